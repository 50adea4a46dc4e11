// Prefill products on the CUDA cores, tiled through shared memory.

// ---------------------------------------------------------------------------
// Prefill products on the CUDA cores, tiled through shared memory. A block
// of 256 threads computes MM_R = 64 output rows × TT tokens; per step of
// MM_K = 32 inputs it dequantizes the 64 × 32 weight tile once (one 8-value
// chunk per thread) and stages the TT × 32 input tile, then every thread
// accumulates 2 rows × (TT / 8) tokens from shared memory. n_in must be a
// multiple of 32.
#define MM_R 64
#define MM_K 32
#define MM_BODY(T, TT, XROW, XOK, YSTORE)                                                   \
    __shared__ float Ws[MM_R][MM_K + 1];                                                    \
    __shared__ __align__(16) float Xs[TT][MM_K + 4];                                        \
    const int NJ = TT / 8;                                                                  \
    int tid = threadIdx.x;                                                                  \
    int rr = (tid & 31) * 2, tt = (tid >> 5) * NJ;                                          \
    float acc[2][NJ];                                                                       \
    _Pragma("unroll") for (int j = 0; j < NJ; j++) acc[0][j] = acc[1][j] = 0.f;             \
    const int cpb = QK_##T / 8;                                                             \
    int wr = tid >> 2, wc = tid & 3;                                                        \
    const uint8_t* Wrow = Wb + (u64)min(r0 + wr, n_out - 1) * row_bytes;                    \
    int xt = tid >> 3, xk = (tid & 7) * 4;                                                  \
    bool xload = xt < TT;                                                                   \
    bool xok = xload && (XOK);                                                              \
    const float* xrow = XROW;                                                               \
    for (int k0 = 0; k0 < n_in; k0 += MM_K) {                                               \
        int ch = (k0 >> 3) + wc;                                                            \
        int b = ch / cpb, c = ch - b * cpb;                                                 \
        float v[8];                                                                         \
        dq8_##T(Wrow + (u64)b * BS_##T, c, v);                                              \
        _Pragma("unroll") for (int j = 0; j < 8; j++) Ws[wr][wc * 8 + j] = v[j];           \
        if (xload) {                                                                        \
            float4 xv = xok ? *(const float4*)(xrow + k0 + xk) : make_float4(0.f, 0.f, 0.f, 0.f); \
            *(float4*)&Xs[xt][xk] = xv;                                                     \
        }                                                                                   \
        __syncthreads();                                                                    \
        _Pragma("unroll 8") for (int kk = 0; kk < MM_K; kk++) {                             \
            float w0 = Ws[rr][kk], w1 = Ws[rr + 1][kk];                                     \
            _Pragma("unroll") for (int j = 0; j < NJ; j++) {                                \
                float xj = Xs[tt + j][kk];                                                  \
                acc[0][j] += w0 * xj;                                                       \
                acc[1][j] += w1 * xj;                                                       \
            }                                                                               \
        }                                                                                   \
        __syncthreads();                                                                    \
    }                                                                                       \
    _Pragma("unroll") for (int i = 0; i < 2; i++) {                                         \
        _Pragma("unroll") for (int j = 0; j < NJ; j++) {                                    \
            int row = r0 + rr + i, tj = tt + j;                                             \
            if (row < n_out) { YSTORE }                                                     \
        }                                                                                   \
    }

// Dense: y[t·ldy + o] = Σ_i W[o][i]·x[t·ldx + i] for the block's 64 rows and
// 32 tokens (grid: row tiles × token tiles).
#define DEF_MM(T, ID)                                                                       \
    extern "C" __global__ void __launch_bounds__(256)                                       \
        mm_##T(const uint8_t* __restrict__ Wb, u64 row_bytes, int n_in, int n_out,          \
               const float* __restrict__ x, int ldx, float* __restrict__ y, int ldy,        \
               int n_tok) {                                                                 \
        RL_PDL_ENTER();                                                                     \
        int r0 = blockIdx.x * MM_R, t0 = blockIdx.y * 32;                                   \
        MM_BODY(T, 32, x + (u64)min(t0 + xt, n_tok - 1) * ldx, t0 + xt < n_tok,             \
                if (t0 + tj < n_tok) y[(u64)(t0 + tj) * ldy + row] = acc[i][j];)            \
    }
REDLITE_DQ_TYPES(DEF_MM)

// Prefill products of F32 matrices (the router) on the CUDA cores, tiled for
// reuse (the same sums as mm_F32). A block of 256 threads computes 64
// rows × 128 tokens of y[t·ldy + o] = Σ_i W[o][i]·x[t·ldx + i]; per step of
// 16 inputs the W (64 × 16) and x (128 × 16) tiles, loaded into registers
// during the step before, go transposed (input-major) into one of two shared
// buffers, and each thread accumulates 4 rows (ty·4 ..) × 8 tokens (tx·4 ..,
// 64 + tx·4 ..): three float4 loads per 32 multiply-adds, against mm_F32's
// six scalar loads per 8. Each sum is one fused multiply-add per input in
// input order from zero, as mm_F32's, so the values are the same. n_in must
// be a multiple of 16.
#define MMF_R 64
#define MMF_T 128
#define MMF_K 16
extern "C" __global__ void __launch_bounds__(256)
    mmf_F32(const uint8_t* __restrict__ Wb, u64 row_bytes, int n_in, int n_out,
            const float* __restrict__ x, int ldx, float* __restrict__ y, int ldy, int n_tok) {
    RL_PDL_ENTER();
    __shared__ __align__(16) float Ws[2][MMF_K][MMF_R + 4];
    __shared__ __align__(16) float Xs[2][MMF_K][MMF_T + 4];
    const int tid = threadIdx.x, r0 = blockIdx.x * MMF_R, t0 = blockIdx.y * MMF_T;
    const int ty = tid >> 4, tx = tid & 15;
    // Loads: W row lr, x tokens lr and lr + 64, inputs lk .. lk + 3 of a step.
    const int lr = tid >> 2, lk = (tid & 3) * 4;
    const float* wrow = (const float*)(Wb + (u64)min(r0 + lr, n_out - 1) * row_bytes);
    const float* xr0 = x + (u64)min(t0 + lr, n_tok - 1) * ldx;
    const float* xr1 = x + (u64)min(t0 + lr + 64, n_tok - 1) * ldx;
    float wv[4], xv0[4], xv1[4];
    auto load = [&](int k0) {
#pragma unroll
        for (int i = 0; i < 4; i++) {
            wv[i] = wrow[k0 + lk + i];
            xv0[i] = xr0[k0 + lk + i];
            xv1[i] = xr1[k0 + lk + i];
        }
    };
    auto store = [&](int b) {
#pragma unroll
        for (int i = 0; i < 4; i++) {
            Ws[b][lk + i][lr] = wv[i];
            Xs[b][lk + i][lr] = xv0[i];
            Xs[b][lk + i][lr + 64] = xv1[i];
        }
    };
    float acc[4][8];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 8; j++) acc[i][j] = 0.f;
    load(0);
    store(0);
    __syncthreads();
    for (int k0 = 0; k0 < n_in; k0 += MMF_K) {
        const int b = (k0 / MMF_K) & 1;
        const bool more = k0 + MMF_K < n_in;
        if (more) load(k0 + MMF_K);
#pragma unroll
        for (int kk = 0; kk < MMF_K; kk++) {
            const float4 a = *(const float4*)&Ws[b][kk][ty * 4];
            const float4 p = *(const float4*)&Xs[b][kk][tx * 4];
            const float4 q = *(const float4*)&Xs[b][kk][64 + tx * 4];
            const float av[4] = {a.x, a.y, a.z, a.w};
            const float bv[8] = {p.x, p.y, p.z, p.w, q.x, q.y, q.z, q.w};
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 8; j++) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
        }
        if (more) store(b ^ 1);
        __syncthreads();
    }
#pragma unroll
    for (int j = 0; j < 8; j++) {
        const int t = t0 + (j < 4 ? tx * 4 + j : 64 + tx * 4 + j - 4);
        if (t >= n_tok) continue;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int row = r0 + ty * 4 + i;
            if (row < n_out) y[(u64)t * ldy + row] = acc[i][j];
        }
    }
}

// Grouped experts (after moe_group): block (row tile, -, expert e) runs over
// e's slots 16 at a time; slot q reads x + (q / x_div)·x_zstride and writes
// y + q·y_zstride.
#define DEF_MMG(T, ID)                                                                      \
    extern "C" __global__ void __launch_bounds__(256)                                       \
        mmg_##T(const uint8_t* __restrict__ W, u64 row_bytes, int n_in, int n_out,          \
                u64 w_zstride, const float* __restrict__ x, int x_div, u64 x_zstride,       \
                float* __restrict__ y, u64 y_zstride, const int* __restrict__ counts,       \
                const int* __restrict__ offsets, const int* __restrict__ perm) {            \
        RL_PDL_ENTER();                                                                     \
        int e = blockIdx.z;                                                                 \
        int cnt = counts[e];                                                                \
        if (cnt == 0) return;                                                               \
        int off = offsets[e];                                                               \
        int r0 = blockIdx.x * MM_R;                                                         \
        const uint8_t* Wb = mat_at(W, (u64)e, w_zstride);                                  \
        for (int t0 = 0; t0 < cnt; t0 += 16) {                                              \
            int qx = perm[off + min(t0 + (int)(threadIdx.x >> 3), cnt - 1)];                \
            MM_BODY(T, 16, x + (u64)(qx / x_div) * x_zstride,                               \
                    t0 + xt < cnt,                                                          \
                    if (t0 + tj < cnt) y[(u64)perm[off + t0 + tj] * y_zstride + row] = acc[i][j];) \
        }                                                                                   \
    }
REDLITE_DQ_TYPES(DEF_MMG)

