// Attention: RoPE, the q/k norms and the KV append, split attention and
// its combine, the decode kernels and the tensor-core prefill kernel.

// ---------------------------------------------------------------------------
// Attention.

// The control words: ctl[0] is the position of a pass's first token, token t
// at ctl[0] + t. In a batched decode pass (bs > 0: the state table holds bs
// entries per sequence) token t is sequence t's only token, at ctl[4·t].
// Returns pos0 with token t at pos0 + t either way.
__device__ __forceinline__ int att_pos0(const int* __restrict__ ctl, int t, int bs) {
    return bs > 0 ? ctl[4 * t] - t : ctl[0];
}

// Partial NeoX RoPE in place on [T][heads][hd]: pairs (i, i + half), the
// angle of pair i at position p = p·interp·(1−mix) + p·extrap·mix (f64).
extern "C" __global__ void rope_neox(float* __restrict__ x, int T, int heads, int hd, int half,
                                     const double* __restrict__ pairs, double mscale,
                                     const int* __restrict__ ctl) {
    RL_PDL_ENTER();
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= T * heads * half) return;
    int pos0 = ctl[0];
    int i = idx % half;
    int th = idx / half;
    int t = th / heads;
    double p = (double)(pos0 + t);
    double extrap = pairs[3 * i], interp = pairs[3 * i + 1], mix = pairs[3 * i + 2];
    double theta = p * interp * (1.0 - mix) + p * extrap * mix;
    double sn, cs;
    sincos(theta, &sn, &cs);
    float c = (float)(cs * mscale), s = (float)(sn * mscale);
    float* hp = x + (u64)th * hd;
    float x0 = hp[i], x1 = hp[i + half];
    hp[i] = x0 * c - x1 * s;
    hp[i + half] = x1 * c + x0 * s;
}

// Attention's per-head steps between the projections and the scores in one
// launch, one block per row: rows [0, T·nh) are the query heads (read at qg
// + r·2·hd, written at q + r·hd), rows [T·nh, T·(nh + nkv)) the key heads (in
// place at k + r·hd, then appended to the cache at tab[slot] with the value
// row v + r·hd at tab[slot + 1], position ctl[0] + t). Each row is what
// norm_rows (RMS, weight qw or kw, launched with this block size), rope_neox
// and kv_append give it one after the other: the same arithmetic in the same
// order, so the same bits. Heads of up to QK_HD_MAX values.
#define QK_HD_MAX 256
extern "C" __global__ void qk_prep(const float* __restrict__ qg, float* __restrict__ q,
                                   float* __restrict__ k, const float* __restrict__ v,
                                   const float* __restrict__ qw, const float* __restrict__ kw,
                                   int T, int nh, int nkv, int hd, float eps, int half,
                                   const double* __restrict__ pairs, double mscale,
                                   const int* __restrict__ ctl, const u64* __restrict__ tab,
                                   int slot, int bs) {
    RL_PDL_ENTER();
    __shared__ float row[QK_HD_MAX];
    const int b = blockIdx.x;
    const bool isq = b < T * nh;
    const int r = isq ? b : b - T * nh;
    const int t = isq ? r / nh : r / nkv;
    const float* xi = isq ? qg + (u64)r * 2 * hd : k + (u64)r * hd;
    const float* w = isq ? qw : kw;
    // A batched decode pass (bs > 0): token t is its own sequence's, at
    // position ctl[4t] (pos0 + t below), its cache in tab + t·bs.
    const int pos0 = att_pos0(ctl, t, bs);
    if (bs > 0) tab += (u64)t * bs;
    double ss = 0.0;
    for (int i = threadIdx.x; i < hd; i += blockDim.x) ss += (double)xi[i] * (double)xi[i];
    ss = block_sum_d(ss);
    float s = (float)(1.0 / sqrt(ss / hd + (double)eps));
    for (int i = threadIdx.x; i < hd; i += blockDim.x) {
        float vv = xi[i] * s;
        row[i] = vv * w[i];
    }
    __syncthreads();
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        double p = (double)(pos0 + t);
        double extrap = pairs[3 * i], interp = pairs[3 * i + 1], mix = pairs[3 * i + 2];
        double theta = p * interp * (1.0 - mix) + p * extrap * mix;
        double sn, cs;
        sincos(theta, &sn, &cs);
        float c = (float)(cs * mscale), sf = (float)(sn * mscale);
        float x0 = row[i], x1 = row[i + half];
        row[i] = x0 * c - x1 * sf;
        row[i + half] = x1 * c + x0 * sf;
    }
    __syncthreads();
    float* xo = isq ? q + (u64)r * hd : k + (u64)r * hd;
    for (int i = threadIdx.x; i < hd; i += blockDim.x) xo[i] = row[i];
    if (!isq) {
        const u64 off = (u64)pos0 * nkv * hd + (u64)r * hd;
        float* kc = (float*)tab[slot];
        float* vc = (float*)tab[slot + 1];
        for (int i = threadIdx.x; i < hd; i += blockDim.x) {
            kc[off + i] = row[i];
            vc[off + i] = v[(u64)r * hd + i];
        }
    }
}

// Append the T new keys and values ([T][row] each) to the cache (at tab[slot],
// tab[slot+1]) from position ctl[0].
extern "C" __global__ void kv_append(const float* __restrict__ k, const float* __restrict__ v,
                                     const u64* __restrict__ tab, int slot,
                                     const int* __restrict__ ctl, int T, int row) {
    RL_PDL_ENTER();
    u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    u64 n = (u64)T * row;
    if (i >= n) return;
    u64 off = (u64)ctl[0] * row + i;
    ((float*)tab[slot])[off] = k[i];
    ((float*)tab[slot + 1])[off] = v[i];
}

// One head's split record pp = (M, L, o[0..hd)) from the online-softmax
// partials of nw warps: warp w's running max m[w·ms], sum l[w·ms] and
// outputs o[w·os + c], rescaled to the largest max (warps that saw no key,
// max −inf, left out). The block's threads take the columns, thread 0 M and
// L; the caller synchronises before and after.
__device__ __forceinline__ void att_merge_warps(float* __restrict__ pp, int nw, int hd,
                                                const float* m, const float* l, int ms,
                                                const float* o, int os) {
    float M = -INFINITY;
    for (int w = 0; w < nw; w++) M = fmaxf(M, m[w * ms]);
    for (int c = threadIdx.x; c < hd; c += blockDim.x) {
        float acc = 0.f;
        for (int w = 0; w < nw; w++)
            if (m[w * ms] != -INFINITY) acc += o[w * os + c] * expf(m[w * ms] - M);
        pp[2 + c] = acc;
    }
    if (threadIdx.x == 0) {
        float L = 0.f;
        for (int w = 0; w < nw; w++)
            if (m[w * ms] != -INFINITY) L += l[w * ms] * expf(m[w * ms] - M);
        pp[0] = M;
        pp[1] = L;
    }
}

// Keys per split of a query attending n keys over at most ns splits: a
// multiple of AT_SPLIT_MIN (one step of attn_dec's warps), so a short
// context takes only the splits it fills (their records are all the combine
// reads) and every split but the last runs whole steps. Every kernel of the
// split path derives the splits of a query from n and ns alone, so a
// query's result depends on its position alone.
#define AT_SPLIT_MIN 32
__device__ __forceinline__ int att_split_len(int n, int ns) {
    const int L = (n + ns - 1) / ns;
    return (L + AT_SPLIT_MIN - 1) / AT_SPLIT_MIN * AT_SPLIT_MIN;
}
__device__ __forceinline__ int att_nsplit(int n, int ns) {
    const int L = att_split_len(n, ns);
    return min(ns, (n + L - 1) / L);
}

// Split-K causal attention, grouped by KV head. Block (KV head g, query t,
// split s) attends query t (position pos0 + t, pos0 = ctl[0]) of each query
// head h of the group (h = g·G + i, G = nh / nkv) to keys [s·L, min((s+1)·L,
// pos0+t+1)), L = att_split_len(pos0 + t + 1, ns) (splits past
// att_nsplit have no keys and return), with an online softmax, writing
// (max, sum, o[hd]) to part[t][h][s]. The group's heads go ATT_GH at a time,
// each key and value row read once per pass for all of them (a head's
// arithmetic is what it would be alone). The cache is at tab[slot] (keys)
// and tab[slot+1].
#define ATT_WARPS 4
#define HD_MAX 256
#define ATT_GH 4
extern "C" __global__ void __launch_bounds__(ATT_WARPS * WARP)
    attn_split(const float* __restrict__ q, const u64* __restrict__ tab, int slot,
               float* __restrict__ part, const int* __restrict__ ctl, int nh, int nkv, int hd,
               float scale, int ns, int bs) {
    RL_PDL_ENTER();
    int g = blockIdx.x, t = blockIdx.y, s = blockIdx.z;
    if (bs > 0) tab += (u64)t * bs;
    const float* Kc = (const float*)tab[slot];
    const float* Vc = (const float*)tab[slot + 1];
    int pos0 = att_pos0(ctl, t, bs);
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int G = nh / nkv;
    int n_keys = pos0 + t + 1;
    // Per query, so each query of a pass splits its keys as a decode step
    // at its position would (a verify pass equals decoding bit for bit).
    if (s >= att_nsplit(n_keys, ns)) return;
    int split_len = att_split_len(n_keys, ns);
    int k0 = s * split_len, k1 = min(k0 + split_len, n_keys);
    const int NV = HD_MAX / WARP;
    u64 stride = (u64)nkv * hd;
    __shared__ float sm_m[ATT_WARPS][ATT_GH], sm_l[ATT_WARPS][ATT_GH];
    __shared__ float sm_o[ATT_WARPS][ATT_GH][HD_MAX];
    for (int h0 = 0; h0 < G; h0 += ATT_GH) {
        int gh = min(ATT_GH, G - h0);
        float qv[ATT_GH][NV], ov[ATT_GH][NV], mx[ATT_GH], l[ATT_GH];
#pragma unroll
        for (int i = 0; i < ATT_GH; i++) {
            const float* qp = q + ((u64)t * nh + g * G + h0 + min(i, gh - 1)) * hd;
#pragma unroll
            for (int j = 0; j < NV; j++) {
                int c = lane + j * WARP;
                qv[i][j] = c < hd ? qp[c] * scale : 0.f;
                ov[i][j] = 0.f;
            }
            mx[i] = -INFINITY;
            l[i] = 0.f;
        }
        for (int key = k0 + warp; key < k1; key += ATT_WARPS) {
            const float* kp = Kc + (u64)key * stride + (u64)g * hd;
            const float* vp = Vc + (u64)key * stride + (u64)g * hd;
            float kv[NV], vv[NV];
#pragma unroll
            for (int j = 0; j < NV; j++) {
                int c = lane + j * WARP;
                kv[j] = c < hd ? kp[c] : 0.f;
                vv[j] = c < hd ? vp[c] : 0.f;
            }
#pragma unroll
            for (int i = 0; i < ATT_GH; i++) {
                float sc = 0.f;
#pragma unroll
                for (int j = 0; j < NV; j++) {
                    int c = lane + j * WARP;
                    if (c < hd) sc += qv[i][j] * kv[j];
                }
                sc = warp_sum(sc);
                float mn = fmaxf(mx[i], sc);
                float corr = expf(mx[i] - mn);
                float p = expf(sc - mn);
                l[i] = l[i] * corr + p;
#pragma unroll
                for (int j = 0; j < NV; j++) {
                    int c = lane + j * WARP;
                    if (c < hd) ov[i][j] = ov[i][j] * corr + p * vv[j];
                }
                mx[i] = mn;
            }
        }
        // Combine the warps, head by head.
        __syncthreads();
#pragma unroll
        for (int i = 0; i < ATT_GH; i++) {
            if (lane == 0) {
                sm_m[warp][i] = mx[i];
                sm_l[warp][i] = l[i];
            }
#pragma unroll
            for (int j = 0; j < NV; j++) {
                int c = lane + j * WARP;
                if (c < hd) sm_o[warp][i][c] = ov[i][j];
            }
        }
        __syncthreads();
        for (int i = 0; i < gh; i++) {
            int h = g * G + h0 + i;
            float* pp = part + (((u64)t * nh + h) * ns + s) * (hd + 2);
            att_merge_warps(pp, ATT_WARPS, hd, &sm_m[0][i], &sm_l[0][i], ATT_GH, &sm_o[0][i][0],
                            ATT_GH * HD_MAX);
        }
    }
}

// Merge the splits of (head h, query t) and apply the sigmoid output gate:
// out[t][h] = (Σ_s e^{m_s−M}·o_s / Σ_s e^{m_s−M}·l_s) ⊙ sigmoid(gate[t][h]);
// gate rows are at gate + (t·nh + h)·gate_stride; s over the att_nsplit(n, ns)
// splits in use (n = ctl[0] + t + 1 keys).
extern "C" __global__ void attn_combine(const float* __restrict__ part,
                                        const float* __restrict__ gate, u64 gate_stride,
                                        float* __restrict__ out, int nh, int hd, int ns,
                                        const int* __restrict__ ctl, int bs) {
    RL_PDL_ENTER();
    // ns <= 1024: the weights e^{m_s − M} of every split in shared memory.
    __shared__ float wsm[1024];
    __shared__ float redm[32];
    int h = blockIdx.x, t = blockIdx.y;
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    const float* pp = part + ((u64)t * nh + h) * ns * (hd + 2);
    const int nsu = att_nsplit(att_pos0(ctl, t, bs) + t + 1, ns);
    float m = -INFINITY;
    for (int s = threadIdx.x; s < nsu; s += blockDim.x) m = fmaxf(m, pp[(u64)s * (hd + 2)]);
    m = warp_max(m);
    if (lane == 0) redm[w] = m;
    __syncthreads();
    const float M = warp_max(lane < nw ? redm[lane] : -INFINITY);
    float l = 0.f;
    for (int s = threadIdx.x; s < nsu; s += blockDim.x) {
        float ms = pp[(u64)s * (hd + 2)];
        float ws = ms == -INFINITY ? 0.f : expf(ms - M);
        wsm[s] = ws;
        l += ws * pp[(u64)s * (hd + 2) + 1];
    }
    float L = block_sum_f(l);
    const float* gp = gate + ((u64)t * nh + h) * gate_stride;
    for (int c = threadIdx.x; c < hd; c += blockDim.x) {
        float acc = 0.f;
        for (int s = 0; s < nsu; s++)
            if (wsm[s] != 0.f) acc += pp[(u64)s * (hd + 2) + 2 + c] * wsm[s];
        out[((u64)t * nh + h) * hd + c] = acc / L * sigmoid_f(gp[c]);
    }
}

// Split-K decode attention that reads each key and value row once per step
// for all of a KV head's query heads (attn_dec_<HD> and attn_deca_<HD>, HD =
// 64, 128 or 256; the heads of a group padded to AD_G = 8 with zero queries).
// Split s of (KV head g, query t) covers the same keys as attn_split: [s·L,
// min((s+1)·L, n)), n = pos0 + t + 1, L = att_split_len(n, ns), so a query's
// result depends on its position alone (verify passes equal decoding bit for
// bit); it writes the same (max, sum, o[hd]) records to part[t][h][s] for
// attn_combine(_w), which merge the att_nsplit(n, ns) splits in use. Block
// (g, t, z) takes splits z, z + gridDim.z, … of those (a grid of one wave,
// whatever ns).
// Layout: the group's scaled queries sit in shared memory; each of the AD_W
// warps takes AD_KB consecutive keys per step (warp w: keys k0 + AD_KB·w +
// AD_KB·AD_W·i), its lanes over dims (lane l holds dims j·32·VEC + l·VEC + e,
// read as float4 / float2: each row is read in coalesced 512- or 256-byte
// pieces). attn_dec loads a step's K and V rows into registers;
// attn_deca copies them with cp.async into a ring of AD_STG steps per warp
// (dynamic shared memory, 2·AD_KB·HD floats per step), AD_STG − 1 steps
// ahead of the one it computes, each lane reading back only what it copied.
// The 32 partial dot products (AD_KB keys × 8 heads) of a lane are summed
// across the warp by a transposing butterfly (31 shuffles: lane i ends with
// the whole score of pair i = key·8 + head); one expf per lane gives p, the
// online max and sum are per head over the lanes of that head, and the lanes
// fetch the 32 p and 8 rescale factors by shuffle to accumulate o[8 heads][their
// dims]. The warps' (m, l, o) are merged in a fixed order through shared
// memory (dynamic, AD_W·AD_G/2·HD floats), four heads at a time.
#define AD_W 8
#define AD_KB 4
#define AD_G 8
#define AD_STG 3
template <int OFF>
__device__ __forceinline__ void ad_fold(float* d, int lane) {
    const bool up = (lane & OFF) != 0;
#pragma unroll
    for (int i = 0; i < OFF; i++) {
        float send = up ? d[i] : d[i + OFF];
        float keep = up ? d[i + OFF] : d[i];
        d[i] = keep + __shfl_xor_sync(FULL, send, OFF);
    }
}
// VEC floats (4 or 2) from src to shared dst, or zeros where !ok.
template <int VEC>
__device__ __forceinline__ void ad_cp(float* dst, const float* src, bool ok) {
    unsigned sa = (unsigned)__cvta_generic_to_shared(dst);
    int n = ok ? VEC * 4 : 0;
    if (VEC == 4)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(sa), "l"(src),
                     "r"(n));
    else
        asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(sa), "l"(src), "r"(n));
}
template <int VEC, int NC, int NV>
__device__ __forceinline__ void ad_row(float* r, const float* p, int lane) {
#pragma unroll
    for (int c = 0; c < NC; c++) {
        const int col = c * 32 * VEC + lane * VEC;
        if (VEC == 4) {
            float4 a = *(const float4*)(p + col);
            r[c * VEC + 0] = a.x;
            r[c * VEC + 1] = a.y;
            r[c * VEC + 2] = a.z;
            r[c * VEC + 3] = a.w;
        } else {
            float2 a = *(const float2*)(p + col);
            r[c * VEC + 0] = a.x;
            r[c * VEC + 1] = a.y;
        }
    }
}
template <int HD, bool ASYNC>
__device__ __forceinline__ void attn_dec_body(const float* __restrict__ q,
                                              const u64* __restrict__ tab, int slot,
                                              float* __restrict__ part,
                                              const int* __restrict__ ctl, int nh, int nkv,
                                              float scale, int ns, int bs) {
    constexpr int VEC = HD >= 128 ? 4 : 2;
    constexpr int NC = HD / (32 * VEC);
    constexpr int NV = HD / 32;
    constexpr int STEP = 2 * AD_KB * HD;
    extern __shared__ __align__(16) float ad_sm[];
    __shared__ __align__(16) float sq[AD_G][HD];
    __shared__ float sm_m[AD_W][AD_G], sm_l[AD_W][AD_G];
    float(*so)[AD_G / 2][HD] = (float(*)[AD_G / 2][HD])ad_sm;
    const int g = blockIdx.x, t = blockIdx.y;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int G = nh / nkv;
    const int pos0 = att_pos0(ctl, t, bs);
    if (bs > 0) tab += (u64)t * bs;
    const int n_keys = pos0 + t + 1;
    const int split_len = att_split_len(n_keys, ns);
    const int nsu = att_nsplit(n_keys, ns);
    const u64 stride = (u64)nkv * HD;
    const float* Kc = (const float*)tab[slot] + (u64)g * HD;
    const float* Vc = (const float*)tab[slot + 1] + (u64)g * HD;
    float* wbuf = ad_sm + warp * (AD_STG * STEP);
    for (int s = blockIdx.z; s < nsu; s += gridDim.z) {
        const int k0 = min(s * split_len, n_keys), k1 = min(k0 + split_len, n_keys);
        float* part_s = part + ((u64)t * nh + g * G) * ns * (HD + 2) + (u64)s * (HD + 2);
        if (k0 >= k1) {
            for (int i = threadIdx.x; i < G * (HD + 2); i += blockDim.x) {
                const int hh = i / (HD + 2), c = i % (HD + 2);
                part_s[(u64)hh * ns * (HD + 2) + c] = c == 0 ? -INFINITY : 0.f;
            }
            continue;
        }
        __syncthreads();
        for (int i = threadIdx.x; i < AD_G * HD; i += blockDim.x) {
            int h = i / HD, c = i % HD;
            sq[h][c] = h < G ? q[((u64)t * nh + g * G + h) * HD + c] * scale : 0.f;
        }
        __syncthreads();
        float o[AD_G][NV];
#pragma unroll
        for (int h = 0; h < AD_G; h++)
#pragma unroll
            for (int e = 0; e < NV; e++) o[h][e] = 0.f;
        // This lane's head (pair lane = key·8 + head) and its running max / sum.
        float m = -INFINITY, l = 0.f;
        const int kb0 = k0 + warp * AD_KB;
        const int nb = kb0 < k1 ? (k1 - kb0 + AD_W * AD_KB - 1) / (AD_W * AD_KB) : 0;
        // Step i's copies (an empty commit group past the last step).
        auto issue = [&](int i) {
            if (i < nb) {
                float* b = wbuf + (i % AD_STG) * STEP;
                const int kb = kb0 + i * (AD_W * AD_KB);
#pragma unroll
                for (int j = 0; j < AD_KB; j++) {
                    const bool ok = kb + j < k1;
                    const u64 row = (u64)(ok ? kb + j : k0) * stride;
#pragma unroll
                    for (int c = 0; c < NC; c++) {
                        const int col = c * 32 * VEC + lane * VEC;
                        ad_cp<VEC>(b + j * 2 * HD + col, Kc + row + col, ok);
                        ad_cp<VEC>(b + j * 2 * HD + HD + col, Vc + row + col, ok);
                    }
                }
            }
            asm volatile("cp.async.commit_group;\n" ::);
        };
        if (ASYNC)
#pragma unroll
            for (int i = 0; i < AD_STG - 1; i++) issue(i);
        for (int i = 0; i < nb; i++) {
            const int kb = kb0 + i * (AD_W * AD_KB);
            float kv[AD_KB][NV], vv[AD_KB][NV];
            const float* b = wbuf + (i % AD_STG) * STEP;
            if (ASYNC) {
                issue(i + AD_STG - 1);
                asm volatile("cp.async.wait_group %0;\n" ::"n"(AD_STG - 1));
#pragma unroll
                for (int j = 0; j < AD_KB; j++) ad_row<VEC, NC, NV>(kv[j], b + j * 2 * HD, lane);
            } else {
#pragma unroll
                for (int j = 0; j < AD_KB; j++) {
                    const bool ok = kb + j < k1;
                    const float* kp = Kc + (u64)(kb + j) * stride;
                    const float* vp = Vc + (u64)(kb + j) * stride;
#pragma unroll
                    for (int c = 0; c < NC; c++) {
                        const int col = c * 32 * VEC + lane * VEC;
                        if (VEC == 4) {
                            float4 a = ok ? *(const float4*)(kp + col) : make_float4(0.f, 0.f, 0.f, 0.f);
                            float4 bb = ok ? *(const float4*)(vp + col) : make_float4(0.f, 0.f, 0.f, 0.f);
                            kv[j][c * VEC + 0] = a.x;
                            kv[j][c * VEC + 1] = a.y;
                            kv[j][c * VEC + 2] = a.z;
                            kv[j][c * VEC + 3] = a.w;
                            vv[j][c * VEC + 0] = bb.x;
                            vv[j][c * VEC + 1] = bb.y;
                            vv[j][c * VEC + 2] = bb.z;
                            vv[j][c * VEC + 3] = bb.w;
                        } else {
                            float2 a = ok ? *(const float2*)(kp + col) : make_float2(0.f, 0.f);
                            float2 bb = ok ? *(const float2*)(vp + col) : make_float2(0.f, 0.f);
                            kv[j][c * VEC + 0] = a.x;
                            kv[j][c * VEC + 1] = a.y;
                            vv[j][c * VEC + 0] = bb.x;
                            vv[j][c * VEC + 1] = bb.y;
                        }
                    }
                }
            }
            float d[AD_KB * AD_G];
#pragma unroll
            for (int h = 0; h < AD_G; h++) {
                float qv[NV];
                ad_row<VEC, NC, NV>(qv, &sq[h][0], lane);
#pragma unroll
                for (int j = 0; j < AD_KB; j++) {
                    float acc = 0.f;
#pragma unroll
                    for (int e = 0; e < NV; e++) acc = fmaf(qv[e], kv[j][e], acc);
                    d[j * AD_G + h] = acc;
                }
            }
            // Transposing butterfly: after the step of offset o the lane keeps
            // the half of its values whose index bit o matches its own.
            ad_fold<16>(d, lane);
            ad_fold<8>(d, lane);
            ad_fold<4>(d, lane);
            ad_fold<2>(d, lane);
            ad_fold<1>(d, lane);
            const float sc = kb + (lane >> 3) < k1 ? d[0] : -INFINITY;
            float bm = fmaxf(sc, __shfl_xor_sync(FULL, sc, 8));
            bm = fmaxf(bm, __shfl_xor_sync(FULL, bm, 16));
            const float mn = fmaxf(m, bm);
            const float p = expf(sc - mn);
            const float corr = expf(m - mn);
            float ps = p + __shfl_xor_sync(FULL, p, 8);
            ps += __shfl_xor_sync(FULL, ps, 16);
            l = l * corr + ps;
            m = mn;
            if (ASYNC)
#pragma unroll
                for (int j = 0; j < AD_KB; j++)
                    ad_row<VEC, NC, NV>(vv[j], b + j * 2 * HD + HD, lane);
#pragma unroll
            for (int h = 0; h < AD_G; h++) {
                const float ch = __shfl_sync(FULL, corr, h);
                float pj[AD_KB];
#pragma unroll
                for (int j = 0; j < AD_KB; j++) pj[j] = __shfl_sync(FULL, p, j * AD_G + h);
#pragma unroll
                for (int e = 0; e < NV; e++) {
                    float acc = o[h][e] * ch;
#pragma unroll
                    for (int j = 0; j < AD_KB; j++) acc = fmaf(pj[j], vv[j][e], acc);
                    o[h][e] = acc;
                }
            }
        }
        if (ASYNC) asm volatile("cp.async.wait_all;\n" ::);
        if (lane < AD_G) {
            sm_m[warp][lane] = m;
            sm_l[warp][lane] = l;
        }
#pragma unroll
        for (int h0 = 0; h0 < AD_G; h0 += AD_G / 2) {
            __syncthreads();
#pragma unroll
            for (int i = 0; i < AD_G / 2; i++)
#pragma unroll
                for (int c = 0; c < NC; c++) {
                    const int col = c * 32 * VEC + lane * VEC;
#pragma unroll
                    for (int e = 0; e < VEC; e++) so[warp][i][col + e] = o[h0 + i][c * VEC + e];
                }
            __syncthreads();
            for (int i = 0; i < AD_G / 2 && h0 + i < G; i++) {
                const int hh = h0 + i;
                float* pp = part_s + (u64)hh * ns * (HD + 2);
                att_merge_warps(pp, AD_W, HD, &sm_m[0][hh], &sm_l[0][hh], AD_G, &so[0][i][0],
                                (AD_G / 2) * HD);
            }
        }
        __syncthreads();
    }
}
#define DEF_ATTN_DEC(HD)                                                                      \
    extern "C" __global__ void __launch_bounds__(AD_W * WARP, 1)                              \
        attn_dec_##HD(const float* __restrict__ q, const u64* __restrict__ tab, int slot,     \
                      float* __restrict__ part, const int* __restrict__ ctl, int nh, int nkv, \
                      float scale, int ns, int bs) {                                          \
        RL_PDL_ENTER();                                                                       \
        attn_dec_body<HD, false>(q, tab, slot, part, ctl, nh, nkv, scale, ns, bs);            \
    }                                                                                         \
    extern "C" __global__ void __launch_bounds__(AD_W * WARP, 1)                              \
        attn_deca_##HD(const float* __restrict__ q, const u64* __restrict__ tab, int slot,    \
                       float* __restrict__ part, const int* __restrict__ ctl, int nh,         \
                       int nkv, float scale, int ns, int bs) {                                \
        RL_PDL_ENTER();                                                                       \
        attn_dec_body<HD, true>(q, tab, slot, part, ctl, nh, nkv, scale, ns, bs);             \
    }
DEF_ATTN_DEC(64)
DEF_ATTN_DEC(128)
DEF_ATTN_DEC(256)

// attn_combine with the splits spread over blocks and threads: block (h, t,
// z) merges columns [z·cb, (z+1)·cb) of (head h, query t); threads c + cb·j
// (j < blockDim.x / cb) sum column c of splits j, j + blockDim.x / cb, …
// (four loads in flight each), then thread c adds the groups' sums in order.
// The same merge as attn_combine, its sums in another fixed order; decode and
// verify both take it.
extern "C" __global__ void __launch_bounds__(1024)
    attn_combine_w(const float* __restrict__ part, const float* __restrict__ gate,
                   u64 gate_stride, float* __restrict__ out, int nh, int hd, int ns, int cb,
                   const int* __restrict__ ctl, int bs) {
    RL_PDL_ENTER();
    __shared__ float wsm[1024];
    __shared__ float accs[1024];
    __shared__ float redm[32];
    const int h = blockIdx.x, t = blockIdx.y;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    const u64 rs = hd + 2;
    const float* pp = part + ((u64)t * nh + h) * ns * rs;
    const int nsu = att_nsplit(att_pos0(ctl, t, bs) + t + 1, ns);
    float m = -INFINITY;
    for (int s = threadIdx.x; s < nsu; s += blockDim.x) m = fmaxf(m, pp[(u64)s * rs]);
    m = warp_max(m);
    if (lane == 0) redm[w] = m;
    __syncthreads();
    const float M = warp_max(lane < nw ? redm[lane] : -INFINITY);
    float l = 0.f;
    for (int s = threadIdx.x; s < nsu; s += blockDim.x) {
        float ms = pp[(u64)s * rs];
        float ws = ms == -INFINITY ? 0.f : expf(ms - M);
        wsm[s] = ws;
        l += ws * pp[(u64)s * rs + 1];
    }
    const float L = block_sum_f(l);
    __syncthreads();
    const int cl = threadIdx.x % cb, j = threadIdx.x / cb, ng = blockDim.x / cb;
    const int c = blockIdx.z * cb + cl;
    float a0 = 0.f, a1 = 0.f, a2 = 0.f, a3 = 0.f;
    int s = j;
    for (; s + 3 * ng < nsu; s += 4 * ng) {
        a0 = fmaf(pp[(u64)s * rs + 2 + c], wsm[s], a0);
        a1 = fmaf(pp[(u64)(s + ng) * rs + 2 + c], wsm[s + ng], a1);
        a2 = fmaf(pp[(u64)(s + 2 * ng) * rs + 2 + c], wsm[s + 2 * ng], a2);
        a3 = fmaf(pp[(u64)(s + 3 * ng) * rs + 2 + c], wsm[s + 3 * ng], a3);
    }
    for (; s < nsu; s += ng) a0 = fmaf(pp[(u64)s * rs + 2 + c], wsm[s], a0);
    accs[threadIdx.x] = (a0 + a1) + (a2 + a3);
    __syncthreads();
    if (j == 0) {
        float acc = 0.f;
        for (int i = 0; i < ng; i++) acc += accs[i * cb + cl];
        out[((u64)t * nh + h) * hd + c] =
            acc / L * sigmoid_f(gate[((u64)t * nh + h) * gate_stride + c]);
    }
}

// Causal prefill attention on the tensor cores (attn_flash_<HD>, HD = 64 or
// 256), for forward passes that are not verify passes: one block per (KV
// head g, AF_BM rows), a row being one (query, head) pair of the group (row
// r: query t0 + r / G, head g·G + r % G; AF_BM / G queries per block), so
// each key and value tile is read once for all of the group's heads. Every
// f32 input is split into two bf16 halves, hi = bf16(x) and lo = bf16(x −
// hi), and each product is taken as hi·hi + hi·lo + lo·hi
// (mma.m16n8k16, f32 accumulation): ~16 significant bits per factor, the
// dropped lo·lo term below 2^-16 relative. Shared memory (dynamic,
// attn_flash_smem bytes): the block's scaled queries as hi and lo bf16 pairs
// ([AF_BM][HD/2 + 4] words each: the fragment loads of a warp hit 32
// banks), the key tile likewise ([AF_BN][HD/2 + 4]), the value tile
// transposed as pairs of keys ([HD][AF_BN/2 + 4]). Warp w owns rows
// [16w, 16w + 16): per key tile S = Q·Kᵀ (16 × AF_BN), causal mask (key >
// the row's position), online softmax in the accumulator layout (row max and
// sum over the four lanes of a row), then the probabilities, split the same
// way, are the A operand of O += P·V straight from registers. O stays in
// registers (16 × HD per warp); the end writes out = O / l ⊙ sigmoid(gate)
// as attn_combine does. Global loads are staged in registers: the value tile
// is fetched while S is computed, the next key tile while P·V is.
#define AF_BM 128
#define AF_BN 32
#define AF_THREADS 256
__device__ __forceinline__ void af_split2(float x0, float x1, uint32_t& hi, uint32_t& lo) {
    hi = rl_bf2(x0, x1);
    const float h0 = __uint_as_float(hi << 16), h1 = __uint_as_float(hi & 0xffff0000u);
    lo = rl_bf2(x0 - h0, x1 - h1);
}
template <int HD>
__device__ __forceinline__ void attn_flash_body(const float* __restrict__ q,
                                                const u64* __restrict__ tab, int slot,
                                                const float* __restrict__ gate, u64 gate_stride,
                                                float* __restrict__ out,
                                                const int* __restrict__ ctl, int T, int nh,
                                                int nkv, float scale) {
    constexpr int QP = HD / 2 + 4;
    constexpr int VP = AF_BN / 2 + 4;
    constexpr int NST = AF_BN * HD / (4 * AF_THREADS);
    constexpr int NT = HD / 8;
    extern __shared__ __align__(16) uint32_t af_sm[];
    uint32_t* Qh = af_sm;
    uint32_t* Ql = Qh + AF_BM * QP;
    uint32_t* Kh = Ql + AF_BM * QP;
    uint32_t* Kl = Kh + AF_BN * QP;
    uint32_t* Vh = Kl + AF_BN * QP;
    uint32_t* Vl = Vh + HD * VP;
    const int g = blockIdx.x;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int gq = lane >> 2, tq = lane & 3;
    const int G = nh / nkv, QB = AF_BM / G;
    // The last queries (the most keys) first: the longest blocks start in the first wave.
    const int t0 = (gridDim.y - 1 - blockIdx.y) * QB;
    const int pos0 = ctl[0];
    const int kmax = pos0 + min(t0 + QB, T);
    const u64 stride = (u64)nkv * HD;
    const float* Kc = (const float*)tab[slot] + (u64)g * HD;
    const float* Vc = (const float*)tab[slot + 1] + (u64)g * HD;
    const float4 z4 = make_float4(0.f, 0.f, 0.f, 0.f);
    // The block's queries, scaled, as hi / lo pairs.
    for (int i = tid; i < AF_BM * HD / 4; i += AF_THREADS) {
        const int r = i / (HD / 4), c4 = i % (HD / 4);
        const int t = t0 + r / G;
        float4 v = z4;
        if (t < T) v = *(const float4*)(q + ((u64)t * nh + g * G + r % G) * HD + 4 * c4);
        uint2 h, lo;
        af_split2(v.x * scale, v.y * scale, h.x, lo.x);
        af_split2(v.z * scale, v.w * scale, h.y, lo.y);
        *(uint2*)(Qh + r * QP + 2 * c4) = h;
        *(uint2*)(Ql + r * QP + 2 * c4) = lo;
    }
    const int r0 = warp * 16 + gq, r1 = r0 + 8;
    // Rows past the pass (t >= T) attend as its last query and are not written.
    const int p0 = pos0 + min(t0 + r0 / G, T - 1), p1 = pos0 + min(t0 + r1 / G, T - 1);
    float o[NT][4];
#pragma unroll
    for (int n = 0; n < NT; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;
    float4 st[NST];
    // Key tile kt into st: key (i·AF_THREADS + tid) / (HD/4), its float4 (…) % (HD/4).
    auto load_k = [&](int kt) {
#pragma unroll
        for (int i = 0; i < NST; i++) {
            const int idx = tid + i * AF_THREADS;
            const int key = kt * AF_BN + idx / (HD / 4), c4 = idx % (HD / 4);
            st[i] = key < kmax ? *(const float4*)(Kc + (u64)key * stride + 4 * c4) : z4;
        }
    };
    // Value tile kt: item idx = (key pair idx % (AF_BN/2), dims 4·(idx / (AF_BN/2)) ..+4).
    auto load_v = [&](int kt) {
#pragma unroll
        for (int i = 0; i < NST / 2; i++) {
            const int idx = tid + i * AF_THREADS;
            const int kp = idx % (AF_BN / 2), dq = idx / (AF_BN / 2);
            const int key = kt * AF_BN + 2 * kp;
            st[2 * i] = key < kmax ? *(const float4*)(Vc + (u64)key * stride + 4 * dq) : z4;
            st[2 * i + 1] =
                key + 1 < kmax ? *(const float4*)(Vc + (u64)(key + 1) * stride + 4 * dq) : z4;
        }
    };
    const int ntiles = (kmax + AF_BN - 1) / AF_BN;
    load_k(0);
    for (int kt = 0; kt < ntiles; kt++) {
        __syncthreads();
#pragma unroll
        for (int i = 0; i < NST; i++) {
            const int idx = tid + i * AF_THREADS;
            const int key = idx / (HD / 4), c4 = idx % (HD / 4);
            uint2 h, lo;
            af_split2(st[i].x, st[i].y, h.x, lo.x);
            af_split2(st[i].z, st[i].w, h.y, lo.y);
            *(uint2*)(Kh + key * QP + 2 * c4) = h;
            *(uint2*)(Kl + key * QP + 2 * c4) = lo;
        }
        __syncthreads();
        load_v(kt);
        float sc[AF_BN / 8][4];
#pragma unroll
        for (int n = 0; n < AF_BN / 8; n++) sc[n][0] = sc[n][1] = sc[n][2] = sc[n][3] = 0.f;
#pragma unroll 2
        for (int kk = 0; kk < HD / 16; kk++) {
            uint32_t ah[4], al[4];
            const int w0 = kk * 8 + tq;
            ah[0] = Qh[r0 * QP + w0];
            ah[1] = Qh[r1 * QP + w0];
            ah[2] = Qh[r0 * QP + w0 + 4];
            ah[3] = Qh[r1 * QP + w0 + 4];
            al[0] = Ql[r0 * QP + w0];
            al[1] = Ql[r1 * QP + w0];
            al[2] = Ql[r0 * QP + w0 + 4];
            al[3] = Ql[r1 * QP + w0 + 4];
#pragma unroll
            for (int n = 0; n < AF_BN / 8; n++) {
                const int kr = (n * 8 + gq) * QP + w0;
                const uint32_t bh[2] = {Kh[kr], Kh[kr + 4]};
                const uint32_t bl[2] = {Kl[kr], Kl[kr + 4]};
                rl_mma_bf16_k16(sc[n], al, bh, sc[n]);
                rl_mma_bf16_k16(sc[n], ah, bl, sc[n]);
                rl_mma_bf16_k16(sc[n], ah, bh, sc[n]);
            }
        }
        // Mask, then the online softmax of rows r0 (values 0, 1) and r1 (2, 3).
        float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
        for (int n = 0; n < AF_BN / 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int key = kt * AF_BN + n * 8 + 2 * tq + (e & 1);
                if (key > (e < 2 ? p0 : p1)) sc[n][e] = -INFINITY;
                if (e < 2)
                    mx0 = fmaxf(mx0, sc[n][e]);
                else
                    mx1 = fmaxf(mx1, sc[n][e]);
            }
        mx0 = fmaxf(mx0, __shfl_xor_sync(FULL, mx0, 1));
        mx0 = fmaxf(mx0, __shfl_xor_sync(FULL, mx0, 2));
        mx1 = fmaxf(mx1, __shfl_xor_sync(FULL, mx1, 1));
        mx1 = fmaxf(mx1, __shfl_xor_sync(FULL, mx1, 2));
        // Tile 0 holds key 0, which every row sees: the maxima are finite from then on.
        const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
        const float c0 = expf(m0 - mn0), c1 = expf(m1 - mn1);
        m0 = mn0;
        m1 = mn1;
        float s0 = 0.f, s1 = 0.f;
#pragma unroll
        for (int n = 0; n < AF_BN / 8; n++) {
            sc[n][0] = expf(sc[n][0] - mn0);
            sc[n][1] = expf(sc[n][1] - mn0);
            sc[n][2] = expf(sc[n][2] - mn1);
            sc[n][3] = expf(sc[n][3] - mn1);
            s0 += sc[n][0] + sc[n][1];
            s1 += sc[n][2] + sc[n][3];
        }
        l0 = l0 * c0 + s0;
        l1 = l1 * c1 + s1;
#pragma unroll
        for (int n = 0; n < NT; n++) {
            o[n][0] *= c0;
            o[n][1] *= c0;
            o[n][2] *= c1;
            o[n][3] *= c1;
        }
        uint32_t ph[AF_BN / 16][4], pl[AF_BN / 16][4];
#pragma unroll
        for (int kk = 0; kk < AF_BN / 16; kk++) {
            af_split2(sc[2 * kk][0], sc[2 * kk][1], ph[kk][0], pl[kk][0]);
            af_split2(sc[2 * kk][2], sc[2 * kk][3], ph[kk][1], pl[kk][1]);
            af_split2(sc[2 * kk + 1][0], sc[2 * kk + 1][1], ph[kk][2], pl[kk][2]);
            af_split2(sc[2 * kk + 1][2], sc[2 * kk + 1][3], ph[kk][3], pl[kk][3]);
        }
#pragma unroll
        for (int i = 0; i < NST / 2; i++) {
            const int idx = tid + i * AF_THREADS;
            const int kp = idx % (AF_BN / 2), dq = idx / (AF_BN / 2);
            const float a[4] = {st[2 * i].x, st[2 * i].y, st[2 * i].z, st[2 * i].w};
            const float b[4] = {st[2 * i + 1].x, st[2 * i + 1].y, st[2 * i + 1].z,
                                st[2 * i + 1].w};
#pragma unroll
            for (int e = 0; e < 4; e++) {
                uint32_t h, lo;
                af_split2(a[e], b[e], h, lo);
                Vh[(4 * dq + e) * VP + kp] = h;
                Vl[(4 * dq + e) * VP + kp] = lo;
            }
        }
        __syncthreads();
        if (kt + 1 < ntiles) load_k(kt + 1);
#pragma unroll
        for (int kk = 0; kk < AF_BN / 16; kk++)
#pragma unroll
            for (int n = 0; n < NT; n++) {
                const int vr = (n * 8 + gq) * VP + kk * 8 + tq;
                const uint32_t bh[2] = {Vh[vr], Vh[vr + 4]};
                const uint32_t bl[2] = {Vl[vr], Vl[vr + 4]};
                rl_mma_bf16_k16(o[n], pl[kk], bh, o[n]);
                rl_mma_bf16_k16(o[n], ph[kk], bl, o[n]);
                rl_mma_bf16_k16(o[n], ph[kk], bh, o[n]);
            }
    }
    l0 += __shfl_xor_sync(FULL, l0, 1);
    l0 += __shfl_xor_sync(FULL, l0, 2);
    l1 += __shfl_xor_sync(FULL, l1, 1);
    l1 += __shfl_xor_sync(FULL, l1, 2);
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const int r = half ? r1 : r0;
        const int t = t0 + r / G;
        if (t >= T) continue;
        const float L = half ? l1 : l0;
        const u64 row = (u64)t * nh + g * G + r % G;
        const float* gp = gate + row * gate_stride;
        float* op = out + row * HD;
#pragma unroll
        for (int n = 0; n < NT; n++) {
            const int c = n * 8 + 2 * tq;
            float2 v;
            v.x = o[n][2 * half] / L * sigmoid_f(gp[c]);
            v.y = o[n][2 * half + 1] / L * sigmoid_f(gp[c + 1]);
            *(float2*)(op + c) = v;
        }
    }
}
#define DEF_ATTN_FLASH(HD)                                                                    \
    extern "C" __global__ void __launch_bounds__(AF_THREADS, 1)                               \
        attn_flash_##HD(const float* __restrict__ q, const u64* __restrict__ tab, int slot,   \
                        const float* __restrict__ gate, u64 gate_stride,                      \
                        float* __restrict__ out, const int* __restrict__ ctl, int T, int nh,  \
                        int nkv, float scale) {                                               \
        RL_PDL_ENTER();                                                                       \
        attn_flash_body<HD>(q, tab, slot, gate, gate_stride, out, ctl, T, nh, nkv, scale);    \
    }
DEF_ATTN_FLASH(64)
DEF_ATTN_FLASH(256)

