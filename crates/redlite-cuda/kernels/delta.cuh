// Gated DeltaNet: the causal conv, the delta rule token by token, and the
// chunked delta rule of prefill.

// ---------------------------------------------------------------------------
// Gated DeltaNet.

// Causal depthwise conv + SiLU over T tokens, one thread per (channel, tile of
// CONV_TB tokens):
// out[t][c] = silu(Σ_i w[c][i]·X(t+i, c)) where X is the K−1 saved inputs
// then the new ones; the state (at tab[slot]) keeps the last K−1 inputs.
// With `trail`, the state after token t is also written at trail + t·tstride
// (a verify pass, rolled back to any of its tokens). CONV_KMAX (the longest
// kernel) is defined with mq_conv_rows above.
// Tokens per thread of conv_silu (grid.y = ceil(T / CONV_TB)): each tile
// starts its window from the inputs before it (the saved state for the
// first), so the tiles run in parallel with each output's arithmetic
// unchanged.
#define CONV_TB 64
extern "C" __global__ void conv_silu(const float* __restrict__ x, int T, int C, int K,
                                     const float* __restrict__ w, const u64* __restrict__ tab,
                                     int slot, float* __restrict__ out, float* __restrict__ trail,
                                     u64 tstride, int bs) {
    RL_PDL_ENTER();
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    // A batched decode pass (bs > 0): block row b is sequence b's one token,
    // its state table at tab + b·bs.
    int tile = blockIdx.y;
    if (bs > 0) {
        tab += (u64)tile * bs;
        x += (u64)tile * C;
        out += (u64)tile * C;
        T = 1;
        tile = 0;
    }
    float* state = (float*)tab[slot];
    const int ks = K - 1;
    const int t0 = tile * CONV_TB, t1 = min(T, t0 + CONV_TB);
    float win[CONV_KMAX];
    float wc[CONV_KMAX];
    // Window before token t0: input t0 − ks + i, from the state where
    // that lies before the pass (state[i] is input i − ks).
#pragma unroll
    for (int i = 0; i < CONV_KMAX; i++) {
        const int tt = t0 - ks + i;
        win[i] = (i < ks) ? (tt < 0 ? state[(u64)c * ks + (tt + ks)] : x[(u64)tt * C + c]) : 0.f;
        wc[i] = (i < K) ? w[(u64)c * K + i] : 0.f;
    }
    for (int t = t0; t < t1; t++) {
        float xt = x[(u64)t * C + c];
        float s = 0.f;
#pragma unroll
        for (int i = 0; i < CONV_KMAX; i++)
            if (i < ks) s += wc[i] * win[i];
        s += wc[ks] * xt;
        out[(u64)t * C + c] = s / (1.0f + expf(-s));
#pragma unroll
        for (int i = 0; i < CONV_KMAX - 1; i++)
            if (i + 1 < ks) win[i] = win[i + 1];
        win[ks - 1] = xt;
        if (trail) {
#pragma unroll
            for (int i = 0; i < CONV_KMAX; i++)
                if (i < ks) trail[(u64)t * tstride + (u64)c * ks + i] = win[i];
        }
    }
    // The state after the pass: written by the first tile's thread (the only
    // one that read the old state), from the last tile's window.
    if (tile == 0) {
#pragma unroll
        for (int i = 0; i < CONV_KMAX; i++) {
            if (i < ks) {
                const int tt = T - ks + i;
                if (t1 == T) {
                    state[(u64)c * ks + i] = win[i];
                } else {
                    // T > CONV_TB >= ks: every input of the last window is in x.
                    state[(u64)c * ks + i] = x[(u64)tt * C + c];
                }
            }
        }
    }
}

// The recurrent gated delta rule over T tokens, with its inputs' last steps
// folded in. One warp per row j of one value head's state M [d_v][d_k]
// (kept in registers for all T tokens). Per token: q and k of the head's key
// head are L2-normalised (sums in f64; q also scaled by q_scale), β =
// sigmoid(b), g = ssm_a·softplus(a + dt_bias) from the ba projection
// (grouped per key head: r b's then r a's), then
// M ← M·exp(g); d = β(v_j − M_j·k); M_j += d·k; o_j = M_j·q.
// u: the conv output [T][ld] (q | k | v at 0, key_dim, 2·key_dim);
// o: [T][h_v·d_v]; the states at tab[slot]. With `trail`, the states after
// token t are also written at trail + t·tstride (a verify pass).
#define DK_MAX 256
#define DN_NV (DK_MAX / WARP)
// A token's gate β = sigmoid(b) and decay exp(g), g = ssm_a·softplus(a +
// dt_bias), from its row of the ba projection (bar; b at ib, a at ib + r).
__device__ __forceinline__ void dn_gate(const float* bar, int ib, int r, float sa, float dtb,
                                        float& b, float& decay) {
    b = sigmoid_f(bar[ib]);
    const float a = bar[ib + r] + dtb;
    decay = expf(sa * (a > 20.0f ? a : log1pf(expf(a))));
}
// The scales that L2-normalise a key head's q (times q_scale) and k, from
// the lane's values of each (zero past dk); sums in f64 over the warp.
__device__ __forceinline__ void dn_scales(const float (&qv)[DN_NV], const float (&kv)[DN_NV],
                                          float eps, double q_scale, float& qs, float& ks) {
    double sq = 0.0, sk = 0.0;
#pragma unroll
    for (int i = 0; i < DN_NV; i++) {
        sq += (double)qv[i] * qv[i];
        sk += (double)kv[i] * kv[i];
    }
    sq = warp_sum_d(sq);
    sk = warp_sum_d(sk);
    qs = (float)(q_scale / sqrt(sq + (double)eps));
    ks = (float)(1.0 / sqrt(sk + (double)eps));
}
// The per-token scalars of the delta rule, for every token of a pass at once
// (so the token-by-token kernel below only reads them): pre[t] holds, per
// key head, the scales that L2-normalise q (times q_scale) and k, then per
// value head the gate β = sigmoid(b) and the decay exp(g). Both kernels take
// them from dn_scales and dn_gate, so either way gives the same bits. Grid:
// T blocks of 32·hk threads (one warp per key head).
extern "C" __global__ void delta_prep(const float* __restrict__ u, int ld, int key_dim,
                                      const float* __restrict__ ba,
                                      const float* __restrict__ ssm_a,
                                      const float* __restrict__ dt_bias, float* __restrict__ pre,
                                      int hk, int hv, int dk, float eps, double q_scale) {
    RL_PDL_ENTER();
    const int t = blockIdx.x, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const float* row = u + (u64)t * ld;
    float* pt = pre + (u64)t * 2 * (hk + hv);
    if (warp < hk) {
        const float* q = row + warp * dk;
        const float* k = row + key_dim + warp * dk;
        float qv[DN_NV], kv[DN_NV];
#pragma unroll
        for (int i = 0; i < DN_NV; i++) {
            int c = lane + i * WARP;
            qv[i] = c < dk ? q[c] : 0.f;
            kv[i] = c < dk ? k[c] : 0.f;
        }
        float qs, ks;
        dn_scales(qv, kv, eps, q_scale, qs, ks);
        if (lane == 0) {
            pt[2 * warp] = qs;
            pt[2 * warp + 1] = ks;
        }
    }
    for (int h = threadIdx.x; h < hv; h += blockDim.x) {
        const int r = hv / hk;
        const int ib = 2 * r * (h / r) + h % r;
        dn_gate(ba + (u64)t * 2 * hv, ib, r, ssm_a[h], dt_bias[h], pt[2 * hk + 2 * h],
                pt[2 * hk + 2 * h + 1]);
    }
}

extern "C" __global__ void __launch_bounds__(128)
    delta_rule(const float* __restrict__ u, int ld, int key_dim, const float* __restrict__ ba,
               const float* __restrict__ ssm_a, const float* __restrict__ dt_bias,
               const u64* __restrict__ tab, int slot, float* __restrict__ o, int T, int hk,
               int hv, int dk, int dv, float eps, double q_scale, float* __restrict__ trail,
               u64 tstride, const float* __restrict__ pre, int bs) {
    // A batched decode pass (bs > 0): grid.z is the sequence, each with one
    // token (row blockIdx.z of u, ba, o and pre) and its state table at
    // tab + z·bs.
    if (bs > 0) {
        const u64 b = blockIdx.z;
        tab += b * bs;
        u += b * ld;
        ba += b * 2 * hv;
        o += b * hv * dv;
        if (pre) pre += b * 2 * (hk + hv);
        T = 1;
    }
    // The state row and the gate constants before the wait: no kernel of
    // this pass but this one writes the state (RL_PDL_EARLY).
    float* S = (float*)tab[slot];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int h = blockIdx.x;
    int j = blockIdx.y * 4 + warp;
    int r = hv / hk;
    int kh = h / r;
    int ib = 2 * r * (h / r) + h % r;
    float sa = ssm_a[h], dtb = dt_bias[h];
    const bool live = j < dv;
    float* Mj = S + ((u64)h * dv + (live ? j : 0)) * dk;
    const int NV = DN_NV;
    float m[NV];
#pragma unroll
    for (int i = 0; i < NV; i++) {
        int c = lane + i * WARP;
        m[i] = c < dk ? Mj[c] : 0.f;
    }
    RL_PDL_ENTER();
    if (!live) return;
    // With `pre` (delta_prep's scalars), the next token's inputs are loaded
    // while this one's are used: the loop carries nothing but the state.
    float qn[NV], kn[NV], vn = 0.f, pn[4] = {0.f, 0.f, 0.f, 0.f};
    auto load = [&](int t) {
        const float* row = u + (u64)t * ld;
#pragma unroll
        for (int i = 0; i < NV; i++) {
            int c = lane + i * WARP;
            qn[i] = c < dk ? row[kh * dk + c] : 0.f;
            kn[i] = c < dk ? row[key_dim + kh * dk + c] : 0.f;
        }
        vn = row[2 * key_dim + h * dv + j];
        if (pre) {
            const float* pt = pre + (u64)t * 2 * (hk + hv);
            pn[0] = pt[2 * kh];
            pn[1] = pt[2 * kh + 1];
            pn[2] = pt[2 * hk + 2 * h];
            pn[3] = pt[2 * hk + 2 * h + 1];
        }
    };
    if (T > 0) load(0);
    for (int t = 0; t < T; t++) {
        float kv[NV], qv[NV];
#pragma unroll
        for (int i = 0; i < NV; i++) {
            qv[i] = qn[i];
            kv[i] = kn[i];
        }
        const float vj = vn;
        float qs, ks, b, decay;
        if (pre) {
            qs = pn[0];
            ks = pn[1];
            b = pn[2];
            decay = pn[3];
            if (t + 1 < T) load(t + 1);
        } else {
            dn_gate(ba + (u64)t * 2 * hv, ib, r, sa, dtb, b, decay);
            dn_scales(qv, kv, eps, q_scale, qs, ks);
            if (t + 1 < T) load(t + 1);
        }
        // o_j = (M_j + d·k)·q = M_j·q + d·(k·q): the three sums in one
        // interleaved reduction instead of two in a row.
        float kd = 0.f, mq = 0.f, kq = 0.f;
#pragma unroll
        for (int i = 0; i < NV; i++) {
            kv[i] *= ks;
            qv[i] *= qs;
            m[i] *= decay;
            kd += m[i] * kv[i];
            mq += m[i] * qv[i];
            kq += kv[i] * qv[i];
        }
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) {
            kd += __shfl_xor_sync(FULL, kd, off);
            mq += __shfl_xor_sync(FULL, mq, off);
            kq += __shfl_xor_sync(FULL, kq, off);
        }
        const float d = b * (vj - kd);
#pragma unroll
        for (int i = 0; i < NV; i++) m[i] += d * kv[i];
        const float od = mq + d * kq;
        if (lane == 0) o[(u64)t * hv * dv + (u64)h * dv + j] = od;
        if (trail) {
            float* tj = trail + (u64)t * tstride + ((u64)h * dv + j) * dk;
#pragma unroll
            for (int i = 0; i < NV; i++) {
                int c = lane + i * WARP;
                if (c < dk) tj[c] = m[i];
            }
        }
    }
#pragma unroll
    for (int i = 0; i < NV; i++) {
        int c = lane + i * WARP;
        if (c < dk) Mj[c] = m[i];
    }
}

// ---------------------------------------------------------------------------
// The chunked gated delta rule (prefill passes that are not verify passes,
// of at least `CudaTuning::delta_chunk_min` tokens; shorter ones and heads
// wider than DC_D keep `delta_rule`).
//
// The same algebra as the CPU's `delta_head_chunked` / `delta.rs`. Per value
// head h and chunk of l <= DC_L tokens (K, Q the L2-normed key rows of h's
// key head, Q times q_scale, V h's value rows, β the gates, g the log-decays,
// G their running sum inside the chunk, in f64; the state kept as M [d_v][d_k]
// as `delta_rule` keeps it):
//   A = β_i (k_i·k_j) e^{G_i−G_j}  (j < i),   P = (q_i·k_j) e^{G_i−G_j}  (j ≤ i),
//   U = (I + A)⁻¹ (β V),   W = (I + A)⁻¹ (β e^G K),
//   V' = U − W Mᵀ,   O = (e^G Q) Mᵀ + P V',   M ← e^{G_l} M + V'ᵀ (e^{G_l−G} K).
// Everything but the last line's three products depends on the chunk alone,
// so `delta_chunk_prep` runs every (chunk, head) at once and only
// `delta_chunk_state` walks the chunks in order. Sums in f32, the state in
// f32 throughout (the order of additions differs from the recurrence's; the
// GPU tests bound the difference). Head dims up to DC_D (zero-padded).
#define DC_L 64
#define DC_D 128
#define DC_S1 129  // row stride of delta_chunk_prep's tiles (scalar access)
#define DC_S2 132  // row stride of delta_chunk_state's tiles (float4 access)
#define DC_SP 68   // row stride of delta_chunk_state's P tile
#define DC_J 16    // value columns per delta_chunk_state block
#define DC_PREP_SMEM ((2 * DC_L * DC_S1 + DC_L * (DC_L + 1) + 3 * DC_L) * 4 + DC_L * 8)
#define DC_STATE_SMEM \
    ((2 * DC_L * DC_S2 + DC_J * DC_S2 + DC_L * DC_SP + DC_L * (DC_J + 1)) * 4)

// g = log(decay) of `dn_gate` (the same expression before its expf).
__device__ __forceinline__ float dn_logdecay(const float* bar, int ib, int r, float sa,
                                             float dtb) {
    const float a = bar[ib + r] + dtb;
    return sa * (a > 20.0f ? a : log1pf(expf(a)));
}

// One block per (chunk, value head): grid (ceil(T / DC_L), hv), 256 threads,
// DC_PREP_SMEM bytes of dynamic shared memory. u, ld, key_dim, ba, ssm_a,
// dt_bias as delta_rule's; pre: delta_prep's scalars (q and k scales, β).
// Writes, for the tokens t of the chunk, rows of DC_D values (zero past d_v
// / d_k) at (t·hv + h)·DC_D of: uo = U, wo = W, qo = e^G Q, ko = e^{G_l−G} K;
// P at po + ((chunk·hv + h)·DC_L + i)·DC_L + j (zero above the diagonal and
// past l), e^{G_t} at eg[t·hv + h].
//
// Shared tiles: sK = K (then W in place), sQ = Q (then β V, then U in place),
// sA = A. The Gram products: each thread a 4×4 tile of K Kᵀ and Q Kᵀ, rows
// i = bi + 16a, columns j = bj + 16b (stride 129: a warp's 16 columns hit
// distinct banks). (I + A)⁻¹ is never formed: each thread owns one column
// of W (threads 0-127) or U (128-255) and solves (I + A) X = R down its
// rows, X_i = R_i − Σ_{j<i} A_ij X_j, reading only rows it wrote itself.
extern "C" __global__ void __launch_bounds__(256)
    delta_chunk_prep(const float* __restrict__ u, int ld, int key_dim,
                     const float* __restrict__ ba, const float* __restrict__ ssm_a,
                     const float* __restrict__ dt_bias, const float* __restrict__ pre, int T,
                     int hk, int hv, int dk, int dv, float* __restrict__ uo,
                     float* __restrict__ wo, float* __restrict__ qo, float* __restrict__ ko,
                     float* __restrict__ po, float* __restrict__ eg) {
    RL_PDL_ENTER();
    extern __shared__ __align__(16) float dc_smem[];
    float* sK = dc_smem;
    float* sQ = sK + DC_L * DC_S1;
    float* sA = sQ + DC_L * DC_S1;
    float* sB = sA + DC_L * (DC_L + 1);
    float* sE = sB + DC_L;
    float* sL = sE + DC_L;
    double* sG = (double*)(sL + DC_L);
    const int ch = blockIdx.x, h = blockIdx.y, tid = threadIdx.x;
    const int c0 = ch * DC_L, l = min(DC_L, T - c0);
    const int r = hv / hk, kh = h / r, ib = 2 * r * (h / r) + h % r;
    const int np = 2 * (hk + hv);
#pragma unroll 8
    for (int i = 0; i < DC_L * DC_D / 256; i++) {
        const int e = tid + 256 * i, t = e / DC_D, c = e % DC_D;
        float qv = 0.f, kv = 0.f;
        if (t < l && c < dk) {
            const float* row = u + (u64)(c0 + t) * ld;
            const float* pt = pre + (u64)(c0 + t) * np;
            qv = row[kh * dk + c] * pt[2 * kh];
            kv = row[key_dim + kh * dk + c] * pt[2 * kh + 1];
        }
        sQ[t * DC_S1 + c] = qv;
        sK[t * DC_S1 + c] = kv;
    }
    if (tid < DC_L) {
        float g = 0.f, b = 0.f;
        if (tid < l) {
            g = dn_logdecay(ba + (u64)(c0 + tid) * 2 * hv, ib, r, ssm_a[h], dt_bias[h]);
            b = pre[(u64)(c0 + tid) * np + 2 * hk + 2 * h];
        }
        sB[tid] = b;
        sG[tid] = (double)g;
    }
    __syncthreads();
    if (tid == 0) {
        double acc = 0.0;
        for (int t = 0; t < DC_L; t++) {
            acc += sG[t];
            sG[t] = acc;
        }
    }
    __syncthreads();
    if (tid < DC_L) {
        const float e = expf((float)sG[tid]);
        sE[tid] = e;
        sL[tid] = expf((float)(sG[l - 1] - sG[tid]));
        if (tid < l) eg[(u64)(c0 + tid) * hv + h] = e;
    }
    {
        const int bi = tid >> 4, bj = tid & 15;
        float kk[4][4], qk[4][4];
#pragma unroll
        for (int a = 0; a < 4; a++)
#pragma unroll
            for (int b = 0; b < 4; b++) kk[a][b] = qk[a][b] = 0.f;
#pragma unroll 4
        for (int c = 0; c < DC_D; c++) {
            float ki[4], qi[4], kj[4];
#pragma unroll
            for (int a = 0; a < 4; a++) {
                ki[a] = sK[(bi + 16 * a) * DC_S1 + c];
                qi[a] = sQ[(bi + 16 * a) * DC_S1 + c];
                kj[a] = sK[(bj + 16 * a) * DC_S1 + c];
            }
#pragma unroll
            for (int a = 0; a < 4; a++)
#pragma unroll
                for (int b = 0; b < 4; b++) {
                    kk[a][b] = fmaf(ki[a], kj[b], kk[a][b]);
                    qk[a][b] = fmaf(qi[a], kj[b], qk[a][b]);
                }
        }
        float* pp = po + (u64)(ch * hv + h) * DC_L * DC_L;
#pragma unroll
        for (int a = 0; a < 4; a++)
#pragma unroll
            for (int b = 0; b < 4; b++) {
                const int i = bi + 16 * a, j = bj + 16 * b;
                float av = 0.f, pv = 0.f;
                if (j <= i && i < l) {
                    const float d = expf((float)(sG[i] - sG[j]));
                    if (j < i) av = sB[i] * kk[a][b] * d;
                    pv = qk[a][b] * d;
                }
                sA[i * (DC_L + 1) + j] = av;
                pp[i * DC_L + j] = pv;
            }
    }
    __syncthreads();
    // e^G Q and e^{G_l−G} K out; β V in Q's place (each element read, then
    // written, by one thread).
#pragma unroll 8
    for (int i = 0; i < DC_L * DC_D / 256; i++) {
        const int e = tid + 256 * i, t = e / DC_D, c = e % DC_D;
        float vv = 0.f;
        if (t < l) {
            const u64 at = ((u64)(c0 + t) * hv + h) * DC_D + c;
            qo[at] = sQ[t * DC_S1 + c] * sE[t];
            ko[at] = sK[t * DC_S1 + c] * sL[t];
            if (c < dv) vv = sB[t] * u[(u64)(c0 + t) * ld + 2 * key_dim + h * dv + c];
        }
        sQ[t * DC_S1 + c] = vv;
    }
    __syncthreads();
    {
        const int col = tid & (DC_D - 1);
        const bool isw = tid < DC_D;
        float* X = isw ? sK : sQ;
        float* out = isw ? wo : uo;
        for (int i = 0; i < l; i++) {
            float s0 = X[i * DC_S1 + col] * (isw ? sB[i] * sE[i] : 1.f);
            float s1 = 0.f, s2 = 0.f, s3 = 0.f;
            const float* ar = sA + i * (DC_L + 1);
            int j = 0;
            for (; j + 4 <= i; j += 4) {
                s0 = fmaf(-ar[j], X[j * DC_S1 + col], s0);
                s1 = fmaf(-ar[j + 1], X[(j + 1) * DC_S1 + col], s1);
                s2 = fmaf(-ar[j + 2], X[(j + 2) * DC_S1 + col], s2);
                s3 = fmaf(-ar[j + 3], X[(j + 3) * DC_S1 + col], s3);
            }
            for (; j < i; j++) s0 = fmaf(-ar[j], X[j * DC_S1 + col], s0);
            const float x = (s0 + s1) + (s2 + s3);
            X[i * DC_S1 + col] = x;
            out[((u64)(c0 + i) * hv + h) * DC_D + col] = x;
        }
    }
}

// One 16-byte cp.async into shared memory, and its group controls.
__device__ __forceinline__ void dc_cp16(float* s, const float* g) {
    const unsigned sa = (unsigned)__cvta_generic_to_shared(s);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(sa), "l"(g));
}
#define DC_COMMIT() asm volatile("cp.async.commit_group;\n" ::)
#define DC_WAIT(n) asm volatile("cp.async.wait_group " #n ";\n" ::: "memory")
// Rows c0 .. c0 + l of head h of a [T][hv][DC_D] array into a [DC_L][DC_S2]
// tile, zeros past l.
__device__ __forceinline__ void dc_stage(float* s, const float* g, int c0, int l, int hv, int h,
                                         int tid) {
#pragma unroll
    for (int i = 0; i < DC_L * DC_D / 4 / 256; i++) {
        const int e = tid + 256 * i, t = e / (DC_D / 4), c = 4 * (e % (DC_D / 4));
        if (t < l)
            dc_cp16(s + t * DC_S2 + c, g + ((u64)(c0 + t) * hv + h) * DC_D + c);
        else
            *(float4*)(s + t * DC_S2 + c) = make_float4(0.f, 0.f, 0.f, 0.f);
    }
}
// A chunk's P [DC_L][DC_L] into a [DC_L][DC_SP] tile.
__device__ __forceinline__ void dc_stage_p(float* s, const float* g, int tid) {
#pragma unroll
    for (int i = 0; i < DC_L * DC_L / 4 / 256; i++) {
        const int e = tid + 256 * i, t = e / (DC_L / 4), c = 4 * (e % (DC_L / 4));
        dc_cp16(s + t * DC_SP + c, g + t * DC_L + c);
    }
}

// The chunks in order: one block per (value head, DC_J value columns), grid
// (hv, ceil(dv / DC_J)), 256 threads, DC_STATE_SMEM bytes of dynamic shared
// memory; ui, wi, qi, ki, pi, eg are delta_chunk_prep's U, W, e^G Q,
// e^{G_l−G} K, P and e^G. The block's DC_J rows of M stay in shared memory
// (sM) across the pass. Per chunk: (1) each thread takes value column
// jx = tid & 15 and tokens t = tb + 16a (tb = tid >> 4): X = W Mᵀ and
// Y = (e^G Q) Mᵀ in one pass over d_k (rows of 132 floats, so a quarter
// warp's float4 loads of 8 different M rows hit distinct banks), V' = U − X
// into sV; (2) O = Y + P V' (s ≤ t), written to o [T][hv·d_v]; (3) each
// thread updates 8 values of one row of M: M_j ← e^{G_l} M_j +
// Σ_t V'_tj (e^{G_l−G_t} k_t). The tiles come by cp.async while other steps
// run: e^{G_l−G} K (into Q's tile) and the next W during (2), the next P
// during (3), the next e^G Q after it. At the end the rows go back to the
// state at tab[slot].
extern "C" __global__ void __launch_bounds__(256, 2)
    delta_chunk_state(const u64* __restrict__ tab, int slot, float* __restrict__ o, int T,
                      int hv, int dk, int dv, const float* __restrict__ ui,
                      const float* __restrict__ wi, const float* __restrict__ qi,
                      const float* __restrict__ ki, const float* __restrict__ pi,
                      const float* __restrict__ eg) {
    RL_PDL_ENTER();
    extern __shared__ __align__(16) float dc_smem[];
    float* sW = dc_smem;
    float* sQ = sW + DC_L * DC_S2;
    float* sM = sQ + DC_L * DC_S2;
    float* sP = sM + DC_J * DC_S2;
    float* sV = sP + DC_L * DC_SP;
    float* S = (float*)tab[slot];
    const int h = blockIdx.x, j0 = blockIdx.y * DC_J, tid = threadIdx.x;
    const int nch = (T + DC_L - 1) / DC_L;
    dc_stage(sW, wi, 0, min(DC_L, T), hv, h, tid);
    dc_stage(sQ, qi, 0, min(DC_L, T), hv, h, tid);
    dc_stage_p(sP, pi + (u64)h * DC_L * DC_L, tid);
    DC_COMMIT();
    for (int e = tid; e < DC_J * DC_D; e += 256) {
        const int j = e / DC_D, c = e % DC_D;
        sM[j * DC_S2 + c] = (j0 + j < dv && c < dk) ? S[((u64)h * dv + j0 + j) * dk + c] : 0.f;
    }
    const int jx = tid & 15, tb = tid >> 4;
    for (int ch = 0; ch < nch; ch++) {
        const int c0 = ch * DC_L, l = min(DC_L, T - c0);
        const int c1 = c0 + DC_L, l1 = min(DC_L, T - c1);
        const bool next = ch + 1 < nch;
        float uv[4];
#pragma unroll
        for (int a = 0; a < 4; a++) {
            const int t = tb + 16 * a;
            uv[a] = t < l ? ui[((u64)(c0 + t) * hv + h) * DC_D + j0 + jx] : 0.f;
        }
        DC_WAIT(0);
        __syncthreads();
        float x[4] = {0.f, 0.f, 0.f, 0.f}, y[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll 4
        for (int c = 0; c < DC_D; c += 4) {
            const float4 m = *(const float4*)(sM + jx * DC_S2 + c);
#pragma unroll
            for (int a = 0; a < 4; a++) {
                const float4 w = *(const float4*)(sW + (tb + 16 * a) * DC_S2 + c);
                const float4 q = *(const float4*)(sQ + (tb + 16 * a) * DC_S2 + c);
                x[a] = fmaf(w.x, m.x, fmaf(w.y, m.y, fmaf(w.z, m.z, fmaf(w.w, m.w, x[a]))));
                y[a] = fmaf(q.x, m.x, fmaf(q.y, m.y, fmaf(q.z, m.z, fmaf(q.w, m.w, y[a]))));
            }
        }
#pragma unroll
        for (int a = 0; a < 4; a++) {
            const int t = tb + 16 * a;
            sV[t * (DC_J + 1) + jx] = t < l ? uv[a] - x[a] : 0.f;
        }
        __syncthreads();
        dc_stage(sQ, ki, c0, l, hv, h, tid);
        DC_COMMIT();
        if (next) dc_stage(sW, wi, c1, l1, hv, h, tid);
        DC_COMMIT();
#pragma unroll
        for (int a = 0; a < 4; a++) {
            const int t = tb + 16 * a;
            if (t < l) {
                float acc = y[a];
                const float* pr = sP + t * DC_SP;
                for (int s = 0; s <= t; s++) acc = fmaf(pr[s], sV[s * (DC_J + 1) + jx], acc);
                if (j0 + jx < dv) o[(u64)(c0 + t) * hv * dv + (u64)h * dv + j0 + jx] = acc;
            }
        }
        DC_WAIT(1);
        __syncthreads();
        if (next) dc_stage_p(sP, pi + (u64)((ch + 1) * hv + h) * DC_L * DC_L, tid);
        DC_COMMIT();
        {
            const int jm = tid >> 4, cq = 4 * (tid & 15);
            const float e = eg[(u64)(c0 + l - 1) * hv + h];
            float4 m0 = *(float4*)(sM + jm * DC_S2 + cq);
            float4 m1 = *(float4*)(sM + jm * DC_S2 + DC_D / 2 + cq);
            m0.x *= e, m0.y *= e, m0.z *= e, m0.w *= e;
            m1.x *= e, m1.y *= e, m1.z *= e, m1.w *= e;
            for (int t = 0; t < l; t++) {
                const float v = sV[t * (DC_J + 1) + jm];
                const float4 k0 = *(const float4*)(sQ + t * DC_S2 + cq);
                const float4 k1 = *(const float4*)(sQ + t * DC_S2 + DC_D / 2 + cq);
                m0.x = fmaf(v, k0.x, m0.x), m0.y = fmaf(v, k0.y, m0.y);
                m0.z = fmaf(v, k0.z, m0.z), m0.w = fmaf(v, k0.w, m0.w);
                m1.x = fmaf(v, k1.x, m1.x), m1.y = fmaf(v, k1.y, m1.y);
                m1.z = fmaf(v, k1.z, m1.z), m1.w = fmaf(v, k1.w, m1.w);
            }
            *(float4*)(sM + jm * DC_S2 + cq) = m0;
            *(float4*)(sM + jm * DC_S2 + DC_D / 2 + cq) = m1;
        }
        __syncthreads();
        if (next) dc_stage(sQ, qi, c1, l1, hv, h, tid);
        DC_COMMIT();
    }
    for (int e = tid; e < DC_J * DC_D; e += 256) {
        const int j = e / DC_D, c = e % DC_D;
        if (j0 + j < dv && c < dk) S[((u64)h * dv + j0 + j) * dk + c] = sM[j * DC_S2 + c];
    }
}

