// The kernels of the qwen3next forward pass. Compiled at first use by NVRTC
// for the device's architecture, after the dequantizers (dequant.cuh and its
// tables), which define QK_<T>, BS_<T>, dq8_<T> and REDLITE_DQ_TYPES.
//
// Activations are f32 everywhere; weights are dequantized in registers, 8
// values at a time, exactly as the CPU's scalar dequantizers give them.

#define WARP 32
#define FULL 0xffffffffu
typedef unsigned long long u64;
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL, v, o);
    return v;
}
__device__ __forceinline__ double warp_sum_d(double v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(FULL, v, o));
    return v;
}
// Sum over a block of up to 1024 threads (every thread gets the result).
__device__ double block_sum_d(double v) {
    __shared__ double red[32];
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = warp_sum_d(v);
    __syncthreads();
    if (lane == 0) red[w] = v;
    __syncthreads();
    double s = 0.0;
    for (int i = 0; i < nw; i++) s += red[i];
    return s;
}
__device__ float block_sum_f(float v) {
    __shared__ float redf[32];
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) redf[w] = v;
    __syncthreads();
    float s = 0.f;
    for (int i = 0; i < nw; i++) s += redf[i];
    return s;
}
__device__ __forceinline__ float sigmoid_f(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ __forceinline__ float silu_f(float x) { return x * sigmoid_f(x); }

// ---------------------------------------------------------------------------
// Matrix-vector products over up to MV_NT tokens per block row, several
// independent matrices (slots) per launch.
//
// Slot z (blockIdx.z) multiplies W_z = W + e·w_zstride (e = ids[z], or z
// without ids) with x_z = x + (z / x_div)·x_zstride and writes
// y_z = y + z·y_zstride: y_z[t·ldy + o] = Σ_i W_z[o][i]·x_z[t·ldx + i] for
// the tokens t of the block's tile (blockIdx.y). One warp per output row.
#define MV_WARPS 4
#define MV_NT 8
#define DEF_MATVEC(T, ID)                                                                   \
    extern "C" __global__ void __launch_bounds__(MV_WARPS * WARP)                           \
        mv_##T(const uint8_t* __restrict__ W, u64 row_bytes, int n_in, int n_out,           \
               const float* __restrict__ x, int ldx, float* __restrict__ y, int ldy,        \
               int n_tok, const int* __restrict__ ids, u64 w_zstride, int x_div,            \
               u64 x_zstride, u64 y_zstride) {                                              \
        int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;                               \
        int row = blockIdx.x * MV_WARPS + warp;                                             \
        if (row >= n_out) return;                                                           \
        int z = blockIdx.z;                                                                 \
        u64 e = ids ? (u64)ids[z] : (u64)z;                                                 \
        const uint8_t* Wr = W + e * w_zstride + (u64)row * row_bytes;                       \
        const float* xz = x + (u64)(z / x_div) * x_zstride;                                 \
        float* yz = y + (u64)z * y_zstride;                                                 \
        int t0 = blockIdx.y * MV_NT;                                                        \
        int nt = min(MV_NT, n_tok - t0);                                                    \
        float acc[MV_NT];                                                                   \
        _Pragma("unroll") for (int t = 0; t < MV_NT; t++) acc[t] = 0.f;                     \
        const int cpb = QK_##T / 8;                                                         \
        int nch = n_in / 8;                                                                 \
        for (int i = lane; i < nch; i += WARP) {                                            \
            int b = i / cpb, c = i - b * cpb;                                               \
            float v[8];                                                                     \
            dq8_##T(Wr + (u64)b * BS_##T, c, v);                                            \
            _Pragma("unroll") for (int t = 0; t < MV_NT; t++) {                             \
                if (t < nt) {                                                               \
                    const float* xp = xz + (u64)(t0 + t) * ldx + (u64)i * 8;                \
                    float4 a = *(const float4*)xp, bb = *(const float4*)(xp + 4);           \
                    acc[t] += v[0] * a.x + v[1] * a.y + v[2] * a.z + v[3] * a.w +           \
                              v[4] * bb.x + v[5] * bb.y + v[6] * bb.z + v[7] * bb.w;        \
                }                                                                           \
            }                                                                               \
        }                                                                                   \
        _Pragma("unroll") for (int t = 0; t < MV_NT; t++) {                                 \
            float s = warp_sum(acc[t]);                                                     \
            if (lane == 0 && t < nt) yz[(u64)(t0 + t) * ldy + row] = s;                     \
        }                                                                                   \
    }
REDLITE_DQ_TYPES(DEF_MATVEC)

// Embedding rows: out[t] = dequant(W[tok[t]]), n_in values each.
#define DEF_GETROWS(T, ID)                                                                  \
    extern "C" __global__ void getrows_##T(const uint8_t* __restrict__ W, u64 row_bytes,    \
                                           int n_in, const int* __restrict__ tok,           \
                                           float* __restrict__ out) {                       \
        int t = blockIdx.x;                                                                 \
        const uint8_t* Wr = W + (u64)tok[t] * row_bytes;                                    \
        const int cpb = QK_##T / 8;                                                         \
        for (int i = threadIdx.x; i < n_in / 8; i += blockDim.x) {                          \
            int b = i / cpb, c = i - b * cpb;                                               \
            float v[8];                                                                     \
            dq8_##T(Wr + (u64)b * BS_##T, c, v);                                            \
            _Pragma("unroll") for (int k = 0; k < 8; k++) out[(u64)t * n_in + i * 8 + k] = v[k]; \
        }                                                                                   \
    }
REDLITE_DQ_TYPES(DEF_GETROWS)

// ---------------------------------------------------------------------------
// Norms. Row r of `rows` is read at in + (r / per)·in_outer + (r % per)·in_inner
// and written at the same place in `out` (out_outer, out_inner).
// mode 0 (RMS): s = 1/sqrt(Σx²/dim + eps); mode 1 (L2): s = mul/sqrt(Σx² + eps).
// out = x·s·w (w may be null). Sums in f64, as the CPU reference.
extern "C" __global__ void norm_rows(const float* __restrict__ in, float* __restrict__ out,
                                     const float* __restrict__ w, int dim, int per,
                                     u64 in_outer, u64 in_inner, u64 out_outer, u64 out_inner,
                                     float eps, int mode, double mul) {
    int r = blockIdx.x;
    const float* xi = in + (u64)(r / per) * in_outer + (u64)(r % per) * in_inner;
    float* xo = out + (u64)(r / per) * out_outer + (u64)(r % per) * out_inner;
    double ss = 0.0;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) ss += (double)xi[i] * (double)xi[i];
    ss = block_sum_d(ss);
    float s = mode == 0 ? (float)(1.0 / sqrt(ss / dim + (double)eps))
                        : (float)(mul / sqrt(ss + (double)eps));
    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
        float v = xi[i] * s;
        xo[i] = w ? v * w[i] : v;
    }
}

// DeltaNet output: o = rmsnorm(o_head)·w ⊙ silu(z), in place, one block per
// (token, value head) row of dim values; z has the same layout as o.
extern "C" __global__ void gated_rmsnorm(float* __restrict__ o, const float* __restrict__ z,
                                         const float* __restrict__ w, int dim, float eps) {
    u64 base = (u64)blockIdx.x * dim;
    double ss = 0.0;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) ss += (double)o[base + i] * (double)o[base + i];
    ss = block_sum_d(ss);
    float s = (float)(1.0 / sqrt(ss / dim + (double)eps));
    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
        float v = o[base + i] * s * w[i];
        o[base + i] = v * silu_f(z[base + i]);
    }
}

extern "C" __global__ void add_inplace(float* __restrict__ x, const float* __restrict__ y, u64 n) {
    u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += y[i];
}

// a = silu(a) ⊙ b
extern "C" __global__ void swiglu(float* __restrict__ a, const float* __restrict__ b, u64 n) {
    u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) a[i] = silu_f(a[i]) * b[i];
}

// ---------------------------------------------------------------------------
// Gated DeltaNet.

// β = sigmoid(b), g = ssm_a·softplus(a + dt_bias) from the [T, 2·h_v] ba
// projection (grouped per key head: r b's then r a's).
extern "C" __global__ void dn_gates(const float* __restrict__ ba, const float* __restrict__ ssm_a,
                                    const float* __restrict__ dt_bias, float* __restrict__ beta,
                                    float* __restrict__ g, int T, int hv, int r) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= T * hv) return;
    int t = i / hv, h = i % hv;
    const float* row = ba + (u64)t * 2 * hv;
    int ib = 2 * r * (h / r) + h % r;
    beta[i] = sigmoid_f(row[ib]);
    float a = row[ib + r] + dt_bias[h];
    float sp = a > 20.0f ? a : log1pf(expf(a));
    g[i] = ssm_a[h] * sp;
}

// Causal depthwise conv + SiLU over T tokens, one thread per channel:
// out[t][c] = silu(Σ_i w[c][i]·X(t+i, c)) where X is the K−1 saved inputs
// then the new ones; the state keeps the last K−1 inputs.
#define CONV_KMAX 8
extern "C" __global__ void conv_silu(const float* __restrict__ x, int T, int C, int K,
                                     const float* __restrict__ w, float* __restrict__ state,
                                     float* __restrict__ out) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    int ks = K - 1;
    float win[CONV_KMAX];
    float wc[CONV_KMAX];
#pragma unroll
    for (int i = 0; i < CONV_KMAX; i++) {
        win[i] = (i < ks) ? state[(u64)c * ks + i] : 0.f;
        wc[i] = (i < K) ? w[(u64)c * K + i] : 0.f;
    }
    for (int t = 0; t < T; t++) {
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
    }
#pragma unroll
    for (int i = 0; i < CONV_KMAX; i++)
        if (i < ks) state[(u64)c * ks + i] = win[i];
}

// The recurrent gated delta rule over T tokens. One warp per row j of one
// value head's state M [d_v][d_k] (kept in registers for all T tokens):
// M ← M·exp(g); d = β(v_j − M_j·k); M_j += d·k; o_j = M_j·q.
// u: the conv output [T][ld] (q | k | v at 0, key_dim, 2·key_dim; q and k
// already L2-normed, q scaled); o: [T][h_v·d_v].
#define DK_MAX 256
extern "C" __global__ void __launch_bounds__(128)
    delta_rule(const float* __restrict__ u, int ld, int key_dim, const float* __restrict__ beta,
               const float* __restrict__ g, float* __restrict__ S, float* __restrict__ o, int T,
               int hk, int hv, int dk, int dv) {
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int h = blockIdx.x;
    int j = blockIdx.y * 4 + warp;
    if (j >= dv) return;
    int kh = h / (hv / hk);
    float* Mj = S + ((u64)h * dv + j) * dk;
    float m[DK_MAX / WARP];
#pragma unroll
    for (int i = 0; i < DK_MAX / WARP; i++) {
        int c = lane + i * WARP;
        m[i] = c < dk ? Mj[c] : 0.f;
    }
    for (int t = 0; t < T; t++) {
        const float* row = u + (u64)t * ld;
        const float* q = row + kh * dk;
        const float* k = row + key_dim + kh * dk;
        float vj = row[2 * key_dim + h * dv + j];
        float decay = expf(g[t * hv + h]);
        float b = beta[t * hv + h];
        float kv[DK_MAX / WARP];
        float kd = 0.f;
#pragma unroll
        for (int i = 0; i < DK_MAX / WARP; i++) {
            int c = lane + i * WARP;
            kv[i] = c < dk ? k[c] : 0.f;
            m[i] *= decay;
            kd += m[i] * kv[i];
        }
        kd = warp_sum(kd);
        float d = b * (vj - kd);
        float od = 0.f;
#pragma unroll
        for (int i = 0; i < DK_MAX / WARP; i++) {
            int c = lane + i * WARP;
            m[i] += d * kv[i];
            od += c < dk ? m[i] * q[c] : 0.f;
        }
        od = warp_sum(od);
        if (lane == 0) o[(u64)t * hv * dv + (u64)h * dv + j] = od;
    }
#pragma unroll
    for (int i = 0; i < DK_MAX / WARP; i++) {
        int c = lane + i * WARP;
        if (c < dk) Mj[c] = m[i];
    }
}

// ---------------------------------------------------------------------------
// Attention.

// Partial NeoX RoPE in place on [T][heads][hd]: pairs (i, i + half), the
// angle of pair i at position p = p·interp·(1−mix) + p·extrap·mix (f64).
extern "C" __global__ void rope_neox(float* __restrict__ x, int T, int heads, int hd, int half,
                                     const double* __restrict__ pairs, double mscale, int pos0) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= T * heads * half) return;
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

// Split-K causal attention. Block (head h, query t, split s) attends query t
// (position pos0 + t) to keys [s·split_len, min((s+1)·split_len, pos0+t+1))
// with an online softmax, writing (max, sum, o[hd]) to part[t][h][s].
#define ATT_WARPS 4
#define HD_MAX 256
extern "C" __global__ void __launch_bounds__(ATT_WARPS * WARP)
    attn_split(const float* __restrict__ q, const float* __restrict__ Kc,
               const float* __restrict__ Vc, float* __restrict__ part, int pos0, int nh, int nkv,
               int hd, float scale, int split_len, int ns) {
    int h = blockIdx.x, t = blockIdx.y, s = blockIdx.z;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int kvh = h / (nh / nkv);
    int n_keys = pos0 + t + 1;
    int k0 = s * split_len, k1 = min(k0 + split_len, n_keys);
    float* pp = part + (((u64)t * nh + h) * ns + s) * (hd + 2);
    const int NV = HD_MAX / WARP;
    float qv[NV], ov[NV];
    const float* qp = q + ((u64)t * nh + h) * hd;
#pragma unroll
    for (int i = 0; i < NV; i++) {
        int c = lane + i * WARP;
        qv[i] = c < hd ? qp[c] * scale : 0.f;
        ov[i] = 0.f;
    }
    float mx = -INFINITY, l = 0.f;
    u64 stride = (u64)nkv * hd;
    for (int key = k0 + warp; key < k1; key += ATT_WARPS) {
        const float* kp = Kc + (u64)key * stride + (u64)kvh * hd;
        const float* vp = Vc + (u64)key * stride + (u64)kvh * hd;
        float sc = 0.f;
#pragma unroll
        for (int i = 0; i < NV; i++) {
            int c = lane + i * WARP;
            if (c < hd) sc += qv[i] * kp[c];
        }
        sc = warp_sum(sc);
        float mn = fmaxf(mx, sc);
        float corr = expf(mx - mn);
        float p = expf(sc - mn);
        l = l * corr + p;
#pragma unroll
        for (int i = 0; i < NV; i++) {
            int c = lane + i * WARP;
            if (c < hd) ov[i] = ov[i] * corr + p * vp[c];
        }
        mx = mn;
    }
    // Combine the warps.
    __shared__ float sm_m[ATT_WARPS], sm_l[ATT_WARPS];
    __shared__ float sm_o[ATT_WARPS][HD_MAX];
    if (lane == 0) {
        sm_m[warp] = mx;
        sm_l[warp] = l;
    }
#pragma unroll
    for (int i = 0; i < NV; i++) {
        int c = lane + i * WARP;
        if (c < hd) sm_o[warp][c] = ov[i];
    }
    __syncthreads();
    float M = -INFINITY;
    for (int w = 0; w < ATT_WARPS; w++) M = fmaxf(M, sm_m[w]);
    for (int c = threadIdx.x; c < hd; c += blockDim.x) {
        float acc = 0.f;
        for (int w = 0; w < ATT_WARPS; w++)
            if (sm_m[w] != -INFINITY) acc += sm_o[w][c] * expf(sm_m[w] - M);
        pp[2 + c] = acc;
    }
    if (threadIdx.x == 0) {
        float L = 0.f;
        for (int w = 0; w < ATT_WARPS; w++)
            if (sm_m[w] != -INFINITY) L += sm_l[w] * expf(sm_m[w] - M);
        pp[0] = M;
        pp[1] = L;
    }
}

// Merge the splits of (head h, query t) and apply the sigmoid output gate:
// out[t][h] = (Σ_s e^{m_s−M}·o_s / Σ_s e^{m_s−M}·l_s) ⊙ sigmoid(gate[t][h]);
// gate rows are at gate + (t·nh + h)·gate_stride.
extern "C" __global__ void attn_combine(const float* __restrict__ part,
                                        const float* __restrict__ gate, u64 gate_stride,
                                        float* __restrict__ out, int nh, int hd, int ns) {
    int h = blockIdx.x, t = blockIdx.y;
    const float* pp = part + ((u64)t * nh + h) * ns * (hd + 2);
    float M = -INFINITY;
    for (int s = 0; s < ns; s++) M = fmaxf(M, pp[(u64)s * (hd + 2)]);
    float L = 0.f;
    for (int s = 0; s < ns; s++) {
        float m = pp[(u64)s * (hd + 2)];
        if (m != -INFINITY) L += pp[(u64)s * (hd + 2) + 1] * expf(m - M);
    }
    const float* gp = gate + ((u64)t * nh + h) * gate_stride;
    for (int c = threadIdx.x; c < hd; c += blockDim.x) {
        float acc = 0.f;
        for (int s = 0; s < ns; s++) {
            float m = pp[(u64)s * (hd + 2)];
            if (m != -INFINITY) acc += pp[(u64)s * (hd + 2) + 2 + c] * expf(m - M);
        }
        out[((u64)t * nh + h) * hd + c] = acc / L * sigmoid_f(gp[c]);
    }
}

// Copy q out of the interleaved [T][nh][q hd | gate hd] projection.
extern "C" __global__ void split_q(const float* __restrict__ qg, float* __restrict__ q, int T,
                                   int nh, int hd) {
    u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (u64)T * nh * hd) return;
    u64 th = i / hd, c = i % hd;
    q[i] = qg[th * 2 * hd + c];
}

// ---------------------------------------------------------------------------
// MoE.

// Router: softmax of each token's logits (in f64 after an f32 max
// subtraction), the top k by falling probability (ties: lower id), weights
// renormalised over the top k. One block per token; ne <= 4096.
extern "C" __global__ void moe_topk(const float* __restrict__ logits, int ne, int k,
                                    int* __restrict__ ids, float* __restrict__ wts) {
    extern __shared__ double probs[];
    __shared__ double bv[32];
    __shared__ int bi[32];
    __shared__ int chosen[64];
    int t = blockIdx.x;
    const float* row = logits + (u64)t * ne;
    float mx = -INFINITY;
    for (int e = threadIdx.x; e < ne; e += blockDim.x) mx = fmaxf(mx, row[e]);
    // block max
    __shared__ float red[32];
    float wm = warp_max(mx);
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    if (lane == 0) red[w] = wm;
    __syncthreads();
    mx = -INFINITY;
    for (int i = 0; i < nw; i++) mx = fmaxf(mx, red[i]);
    double sum = 0.0;
    for (int e = threadIdx.x; e < ne; e += blockDim.x) {
        double p = exp((double)(row[e] - mx));
        probs[e] = p;
        sum += p;
    }
    sum = block_sum_d(sum);
    for (int e = threadIdx.x; e < ne; e += blockDim.x) probs[e] /= sum;
    __syncthreads();
    double wsum = 0.0;
    for (int r = 0; r < k; r++) {
        double best = -1.0;
        int bid = 0x7fffffff;
        for (int e = threadIdx.x; e < ne; e += blockDim.x) {
            double p = probs[e];
            if (p > best || (p == best && e < bid)) {
                best = p;
                bid = e;
            }
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            double ob = __shfl_xor_sync(FULL, best, o);
            int oi = __shfl_xor_sync(FULL, bid, o);
            if (ob > best || (ob == best && oi < bid)) {
                best = ob;
                bid = oi;
            }
        }
        if (lane == 0) {
            bv[w] = best;
            bi[w] = bid;
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            double b = bv[0];
            int id = bi[0];
            for (int i = 1; i < nw; i++)
                if (bv[i] > b || (bv[i] == b && bi[i] < id)) {
                    b = bv[i];
                    id = bi[i];
                }
            chosen[r] = id;
            wsum += b;
            probs[id] = -2.0;  // taken
            bv[0] = b;
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        wsum = fmax(wsum, 6.1035e-5);
        // Re-read the chosen probabilities (overwritten above): recompute.
        for (int r = 0; r < k; r++) {
            int id = chosen[r];
            double p = exp((double)(row[id] - mx)) / sum;
            ids[t * k + r] = id;
            wts[t * k + r] = (float)(p / wsum);
        }
    }
}

// x[t] += Σ_r wts[t][r]·down[t·k + r] + sigmoid(h[t]·sh_inp)·sh[t], one block
// per token.
extern "C" __global__ void moe_combine(float* __restrict__ x, const float* __restrict__ down,
                                       const float* __restrict__ wts, int k,
                                       const float* __restrict__ sh, const float* __restrict__ h,
                                       const float* __restrict__ sh_inp, int d) {
    int t = blockIdx.x;
    float gl = 0.f;
    for (int i = threadIdx.x; i < d; i += blockDim.x) gl += h[(u64)t * d + i] * sh_inp[i];
    gl = block_sum_f(gl);
    float gate = sigmoid_f(gl);
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
        float y = 0.f;
        for (int r = 0; r < k; r++) y += wts[t * k + r] * down[((u64)t * k + r) * d + i];
        x[(u64)t * d + i] += y + gate * sh[(u64)t * d + i];
    }
}

// ---------------------------------------------------------------------------
// Random normal fill (for decode timing at depth): x[i] = scale·N(0,1) from a
// counter hash (SplitMix64, Box-Muller).
__device__ __forceinline__ u64 splitmix(u64 z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
extern "C" __global__ void fill_normal(float* __restrict__ x, u64 n, u64 seed, float scale) {
    u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    u64 a = splitmix(seed ^ (2 * i)), b = splitmix(seed ^ (2 * i + 1));
    double u1 = fmax((double)(a >> 11) / 9007199254740992.0, 1e-300);
    double u2 = (double)(b >> 11) / 9007199254740992.0;
    x[i] = scale * (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}
