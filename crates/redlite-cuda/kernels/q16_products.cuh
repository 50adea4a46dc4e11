// The 16-bit-activation integer products (one-token, fused gate and up,
// paired, verify) and the grouped f32 products of a prefill chunk.
// (After router.cuh.)

// ---------------------------------------------------------------------------
// 16-bit-activation integer products (the default for the types of
// REDLITE_Q16_TYPES, q16.cuh): every 32-weight unit taken with dp2a
// (q16p_T / q16a_T) against the input quantized per 32 values.
//
// The kernels stream rows: each warp takes a run of consecutive rows (of its
// slot's matrix) and goes through them an item at a time, an item being
// whole rows or, for rows longer than MV_SEG bytes, one MV_SEG piece of a
// row, staged in shared memory by cp.async while the warp computes the item
// before (two buffers). A row of nu units is taken by L = 8, 16 or 32 lanes
// (nu >= 32: the whole warp; shorter rows side by side, RS = 32 / L of them
// at once); lane ll of a row adds d · P (fmaf) for its units ll, ll + L, ...
// (within each piece of a long row: ll, ll + 32, ...) and the row's sum is
// the butterfly sum over its L lanes. Which rows share a warp, an item or a
// step changes none of that, so mq1_T, mqgu_T and the verify twin mqn_T give
// a token the same bits whatever their grids.

// Eight values per lane (values 8·lane .. 8·lane + 7 of a 256-value stretch,
// already formed) quantized into the stretch's 8 units at u and their scales
// at d: rl_q16_scales / rl_q16_pack8 as the host reference uses them, the
// largest magnitude and the NaN test taken over each unit's 4 lanes.
__device__ __forceinline__ void mq_quant_stretch(const float v[8], int lane, RlXU* u, float* d) {
    float amax = 0.f;
    int bad = 0;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        amax = fmaxf(amax, fabsf(v[i]));
        bad |= v[i] != v[i];
    }
#pragma unroll
    for (int o = 1; o < 4; o <<= 1) {
        amax = fmaxf(amax, __shfl_xor_sync(FULL, amax, o));
        bad |= __shfl_xor_sync(FULL, bad, o);
    }
    float dd, id;
    rl_q16_scales(amax, bad != 0, &dd, &id);
    uint32_t w[4];
    const int h = lane & 3;
    const int s = rl_q16_pack8(v, id, w);
    RlXU* dst = u + (lane >> 2);
    *(uint4*)&dst->q[4 * h] = make_uint4(w[0], w[1], w[2], w[3]);
    dst->s[h] = s;
    if (h == 0) d[lane >> 2] = dd;
}

// Eight values of the input at p (silu(p) ⊙ p2 with p2), 16-byte aligned.
__device__ __forceinline__ void mq_load8(const float* p, const float* p2, float v[8]) {
    float4 a = *(const float4*)p, b = *(const float4*)(p + 4);
    v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
    v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
    if (p2) {
        float4 c = *(const float4*)p2, e = *(const float4*)(p2 + 4);
        float u[8] = {c.x, c.y, c.z, c.w, e.x, e.y, e.z, e.w};
#pragma unroll
        for (int i = 0; i < 8; i++) v[i] = silu_f(v[i]) * u[i];
    }
}

// The block's input quantized into shared memory (a warp per 256 values).
__device__ __forceinline__ void mq_stage_x(RlXU* xu, float* xd, const float* x, const float* x2,
                                           int n_in) {
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    for (int sb = warp; sb < n_in / 256; sb += MV_WARPS) {
        float v[8];
        mq_load8(x + 256 * sb + 8 * lane, x2 ? x2 + 256 * sb + 8 * lane : 0, v);
        mq_quant_stretch(v, lane, xu + 8 * sb, xd + 8 * sb);
    }
    __syncthreads();
}

// The activations of n_tok tokens (token t at x + t·n_in, or silu(x) ⊙ x2)
// quantized into xu (n_in / 32 units a token) and xd (a scale per unit) for
// mqn_T, a warp per 256 values.
extern "C" __global__ void __launch_bounds__(128)
    q16_quant(const float* __restrict__ x, const float* __restrict__ x2, int n_in, int n_tok,
              RlXU* __restrict__ xu, float* __restrict__ xd) {
    RL_PDL_ENTER();
    int lane = threadIdx.x & 31;
    int nsb = n_in / 256;
    int gw = (int)((blockIdx.x * blockDim.x + threadIdx.x) >> 5);
    if (gw >= nsb * n_tok) return;
    int t = gw / nsb, sb = gw - t * nsb;
    u64 o = (u64)t * n_in + 256 * sb + 8 * lane;
    float v[8];
    mq_load8(x + o, x2 ? x2 + o : 0, v);
    u64 uo = (u64)t * (n_in / 32) + 8 * sb;
    mq_quant_stretch(v, lane, xu + uo, xd + uo);
}

// One activation unit (five 16-byte loads).
__device__ __forceinline__ void mq_ldx(const RlXU* p, RlXU& x) {
    const uint4* s = (const uint4*)p;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        uint4 v = s[i];
        x.q[4 * i] = v.x; x.q[4 * i + 1] = v.y; x.q[4 * i + 2] = v.z; x.q[4 * i + 3] = v.w;
    }
    uint4 v = s[4];
    x.s[0] = (int)v.x; x.s[1] = (int)v.y; x.s[2] = (int)v.z; x.s[3] = (int)v.w;
}

// Copy `len` bytes from src into a warp's staging buffer (16-byte words,
// cp.async, one commit group); returns where the bytes start in it.
__device__ __forceinline__ int mq_issue(uint8_t* buf, const uint8_t* src, int len, int lane) {
    u64 a = (u64)src, a0 = a & ~(u64)15;
    int shift = (int)(a - a0);
    rl_copy16((uint4*)buf, (const uint4*)a0, (shift + len + 15) >> 4, lane);
    return shift;
}


// How a warp streams the rows of a matrix of n_in inputs (see the section
// comment): units per row, lanes per row (log2), rows side by side, staged
// pieces per row and blocks per piece (rows longer than MV_SEG bytes), rows
// per item. 32-bit arithmetic throughout (a row is far below 2^31 bytes).
struct MqGeo {
    int nu, lgL, RS, nseg, bps, nblk, G, rb;
};
__device__ __forceinline__ MqGeo mq_geo(int n_in, u64 row_bytes, int qk, int bs, int K) {
    MqGeo g;
    g.rb = (int)row_bytes;
    g.nu = n_in >> 5;
    g.lgL = g.nu >= 32 ? 5 : g.nu >= 16 ? 4 : 3;
    g.RS = 32 >> g.lgL;
    g.nblk = n_in / qk;
    g.bps = MV_SEG / bs;
    if (g.rb > MV_SEG) {
        g.nseg = (g.nblk + g.bps - 1) / g.bps;
        g.G = 1;
    } else {
        g.nseg = 1;
        const int steps = MV_SEG / (g.RS * g.rb);
        g.G = g.RS * max(1, min(K, steps));
    }
    return g;
}

// Where an item is in a warp's sequence (row groups of G rows, then matrix,
// then piece): its first row, matrix and piece. mq_next steps to the next.
struct MqPos {
    int row, m, sg;
};
__device__ __forceinline__ void mq_next(MqPos& p, const MqGeo& g, int NM) {
    if (++p.sg == g.nseg) {
        p.sg = 0;
        if (++p.m == NM) {
            p.m = 0;
            p.row += g.G;
        }
    }
}

// The item at p of a warp's rows [.., r1) of NM matrices requested into
// buf; returns where its bytes start there.
__device__ __forceinline__ int mq_issue_at(const MqGeo& g, const MqPos& p,
                                           const uint8_t* const* mat, int NM, int bs, int r1,
                                           uint8_t* buf, int lane) {
    const uint8_t* src = ((NM > 1 && p.m) ? mat[NM - 1] : mat[0]) + (u64)p.row * (u64)g.rb;
    int len;
    if (g.nseg == 1) {
        len = min(g.G, r1 - p.row) * g.rb;
    } else {
        src += (u64)(p.sg * g.bps * bs);
        len = min(g.bps, g.nblk - p.sg * g.bps) * bs;
    }
    return mq_issue(buf, src, len, lane);
}

// Items of a warp's rows [r0, r1) of NM matrices.
__device__ __forceinline__ int mq_items(const MqGeo& g, int NM, int r0, int r1) {
    return r0 < r1 ? (r1 - r0 + g.G - 1) / g.G * NM * g.nseg : 0;
}

// Request a warp's first min(2, items) items into its two buffers (before
// the stream, e.g. ahead of waiting on the kernel before): the count.
__device__ __forceinline__ int mq_prefetch(const MqGeo& g, const uint8_t* const* mat, int NM,
                                           int bs, int r0, int r1, uint8_t (*bufs)[MV_SEG + 32],
                                           int lane, int* sh0, int* sh1) {
    const int n = mq_items(g, NM, r0, r1);
    MqPos p = {r0, 0, 0};
    if (n > 0) *sh0 = mq_issue_at(g, p, mat, NM, bs, r1, bufs[0], lane);
    if (n > 1) {
        mq_next(p, g, NM);
        *sh1 = mq_issue_at(g, p, mat, NM, bs, r1, bufs[1], lane);
    }
    return min(n, 2);
}

// A warp's rows [r0, r1) of NM matrices (mat[m] row r at mat[m] + r·row_bytes:
// NM = 2 for gate and up) against NT tokens' quantized inputs (token t's
// units at xu + t·xstride, its scales at xd + t·xstride; nt of the NT are
// real), K steps of rows per item at most. emit(r, s0, s1) receives, on the
// lane that holds them, row r's sums of matrix 0 and NM - 1 (per token);
// bufs: the warp's two staging buffers, the first `pre` items (0 or 2, or
// all when fewer) requested already by mq_prefetch with their starts sh0,
// sh1. Two items are in flight at the start, one while an item is computed.
#define DEF_MQ_STREAM(T)                                                                    \
    template <int NT, int K, int NM, class Emit>                                            \
    __device__ __forceinline__ void mq_stream_##T(                                          \
        const MqGeo& g, const uint8_t* const* mat, int r0, int r1, const RlXU* xu,          \
        const float* xd, u64 xstride, int nt, uint8_t (*bufs)[MV_SEG + 32], int lane,       \
        int pre, int sh0, int sh1, const uint8_t* tab, Emit emit) {                         \
        const int upb = Q16_UNITS_##T;                                                      \
        const int L = 1 << g.lgL;                                                           \
        const int sr = lane >> g.lgL, ll = lane & (L - 1);                                  \
        const int n_items = mq_items(g, NM, r0, r1);                                        \
        if (n_items == 0) return;                                                           \
        float acc[NM][K][NT];                                                               \
        _Pragma("unroll") for (int m = 0; m < NM; m++)                                      \
            _Pragma("unroll") for (int k = 0; k < K; k++)                                   \
                _Pragma("unroll") for (int t = 0; t < NT; t++) acc[m][k][t] = 0.f;          \
        int shift[2] = {sh0, sh1};                                                          \
        if (pre == 0) {                                                                     \
            pre = mq_prefetch(g, mat, NM, BS_##T, r0, r1, bufs, lane, &shift[0], &shift[1]); \
        }                                                                                   \
        MqPos cp = {r0, 0, 0};                                                              \
        MqPos ip = cp;                                                                      \
        mq_next(ip, g, NM);                                                                 \
        mq_next(ip, g, NM);                                                                 \
        const int first = g.nseg == 1 ? ll : lane;                                          \
        const int step = g.nseg == 1 ? L : WARP;                                            \
        for (int i = 0; i < n_items; i++) {                                                 \
            const int cur = i & 1;                                                          \
            if (i + 1 < n_items)                                                            \
                asm volatile("cp.async.wait_group 1;\n" ::);                                \
            else                                                                            \
                asm volatile("cp.async.wait_group 0;\n" ::);                                \
            __syncwarp();                                                                   \
            const int m = cp.m, sg = cp.sg, row = cp.row;                                   \
            const int gr = g.nseg == 1 ? min(g.G, r1 - row) : 1;                            \
            const uint8_t* sm = bufs[cur] + (cur ? shift[1] : shift[0]);                    \
            const int nus = g.nseg == 1 ? g.nu : min(g.bps, g.nblk - sg * g.bps) * upb;     \
            const int ubase = sg * g.bps * upb;                                             \
            _Pragma("unroll") for (int k = 0; k < K; k++) {                                 \
                const int rr = k * g.RS + sr;                                               \
                if (rr < gr) {                                                              \
                    const uint8_t* rp = sm + rr * g.rb;                                     \
                    for (int u = first; u < nus; u += step) {                               \
                        const int b = u / upb, j = u - b * upb;                             \
                        RlQW w;                                                             \
                        q16p_##T(rp + b * BS_##T, j, w, tab);                               \
                        const int gu = ubase + u;                                           \
                        _Pragma("unroll") for (int t = 0; t < NT; t++) {                    \
                            if (t < nt) {                                                   \
                                RlXU xv;                                                    \
                                mq_ldx(xu + (u64)t * xstride + gu, xv);                     \
                                const float p = q16a_##T(w, xv);                            \
                                const float d = xd[(u64)t * xstride + gu];                  \
                                _Pragma("unroll") for (int mm = 0; mm < NM; mm++)           \
                                    if (mm == m) acc[mm][k][t] = rl_fma(d, p, acc[mm][k][t]); \
                            }                                                               \
                        }                                                                   \
                    }                                                                       \
                }                                                                           \
            }                                                                               \
            __syncwarp();                                                                   \
            if (i + 2 < n_items) {                                                          \
                const int sh = mq_issue_at(g, ip, mat, NM, BS_##T, r1, bufs[cur], lane);    \
                if (cur) shift[1] = sh; else shift[0] = sh;                                 \
                mq_next(ip, g, NM);                                                         \
            }                                                                               \
            mq_next(cp, g, NM);                                                             \
            if (m == NM - 1 && sg == g.nseg - 1) {                                          \
                const int ks = (gr + g.RS - 1) / g.RS;                                      \
                _Pragma("unroll") for (int k = 0; k < K; k++) {                             \
                    if (k < ks) {                                                           \
                        _Pragma("unroll") for (int mm = 0; mm < NM; mm++)                   \
                            _Pragma("unroll") for (int t = 0; t < NT; t++) {                \
                                float v = acc[mm][k][t];                                    \
                                for (int o = step >> 1; o > 0; o >>= 1)                     \
                                    v += __shfl_xor_sync(FULL, v, o);                       \
                                acc[mm][k][t] = v;                                          \
                            }                                                               \
                        const int rr = k * g.RS + sr;                                       \
                        if (first == 0 && rr < gr) emit(row + rr, acc[0][k], acc[NM - 1][k]); \
                        _Pragma("unroll") for (int mm = 0; mm < NM; mm++)                   \
                            _Pragma("unroll") for (int t = 0; t < NT; t++) acc[mm][k][t] = 0.f; \
                    }                                                                       \
                }                                                                           \
            }                                                                               \
        }                                                                                   \
    }
REDLITE_Q16_TYPES(DEF_MQ_STREAM)

// The warp's rows of a slot of n_out rows over gridDim.x blocks: runs of
// ceil(n_out / warps) consecutive rows.
__device__ __forceinline__ void mq_warp_rows_b(int n_out, int bx, int nbx, int* r0, int* r1);
__device__ __forceinline__ void mq_warp_rows(int n_out, int* r0, int* r1) {
    mq_warp_rows_b(n_out, blockIdx.x, gridDim.x, r0, r1);
}

// Steps of rows per item of the one-token kernels.
#define MQ_K 4

// The lookup tables of IQ1_M and IQ2_XS in each block's shared memory
// (RL_Q16_SMEM, filled before the wait on the kernel before) instead of read
// from the global ones through L1; the same bits either way.
#ifndef RL_Q16_SMEM
#define RL_Q16_SMEM 0
#endif
#define MQ_TAB(T) ((RL_Q16_SMEM && Q16_TAB_##T) ? Q16_TAB_##T : 16)
#define MQ_TAB_ON(T) (RL_Q16_SMEM && Q16_TAB_##T)
// Largest input the one-token kernels stage, per type (the table types take
// rows of at most 2,048 so that block and table fit eight blocks an SM).
#define MQ_XS_Q8_0 MV_XS
#define MQ_XS_Q4_K MV_XS
#define MQ_XS_Q5_K MV_XS
#define MQ_XS_Q6_K MV_XS
#define MQ_XS_IQ1_M 2048
#define MQ_XS_IQ2_XS 2048

// mq_warp_rows for block bx of nbx (a slot's share of a paired launch).
__device__ __forceinline__ void mq_warp_rows_b(int n_out, int bx, int nbx, int* r0, int* r1) {
    const int warps = nbx * MV_WARPS;
    const int per = (n_out + warps - 1) / warps;
    const int w = bx * MV_WARPS + (threadIdx.x >> 5);
    *r0 = min(n_out, w * per);
    *r1 = min(n_out, *r0 + per);
}

// DeltaNet's causal conv + SiLU of one token as an epilogue of the product
// that computes its inputs (decode's qkv + gate rows, out non-null): rows r <
// C of the product are the conv's channels, and each warp, once its rows are
// done, takes their conv, lane by lane, exactly as conv_silu does for T = 1
// (the same sums in the same order, the state moved on by one input).
#define CONV_KMAX 8
struct MqConv {
    const float* w;
    const u64* tab;
    int slot;
    float* out;
    int C, K;
};
__device__ __forceinline__ void mq_conv_rows(const MqConv& cv, const float* y, int r0, int r1,
                                             int lane) {
    __syncwarp();
    if (!cv.out || r0 >= min(r1, cv.C)) return;
    float* state = (float*)cv.tab[cv.slot];
    const int ks = cv.K - 1;
    for (int c = r0 + lane; c < min(r1, cv.C); c += WARP) {
        float win[CONV_KMAX];
        float wc[CONV_KMAX];
#pragma unroll
        for (int i = 0; i < CONV_KMAX; i++) {
            win[i] = (i < ks) ? state[(u64)c * ks + i] : 0.f;
            wc[i] = (i < cv.K) ? cv.w[(u64)c * cv.K + i] : 0.f;
        }
        const float xt = y[c];
        float s = 0.f;
#pragma unroll
        for (int i = 0; i < CONV_KMAX; i++)
            if (i < ks) s += wc[i] * win[i];
        s += cv.w[(u64)c * cv.K + ks] * xt;
        cv.out[c] = s / (1.0f + expf(-s));
#pragma unroll
        for (int i = 0; i < CONV_KMAX; i++) {
            if (i + 1 < ks) state[(u64)c * ks + i] = win[i + 1];
            else if (i + 1 == ks) state[(u64)c * ks + i] = xt;
        }
    }
}

// The parameters of mq1_T (MV_PARAMS), each name prefixed.
#define MQ1_PARAMS(p)                                                                       \
    const uint8_t *__restrict__ p##W, u64 p##row_bytes, int p##n_in, int p##n_out,          \
        const float *__restrict__ p##x, int p##ldx, float *__restrict__ p##y, int p##ldy,   \
        int p##n_tok, const int *__restrict__ p##ids, u64 p##w_zstride, int p##x_div,      \
        u64 p##x_zstride, u64 p##y_zstride, const float *__restrict__ p##x2
#define MQ1_ARGS(p)                                                                         \
    p##W, p##row_bytes, p##n_in, p##n_out, p##x, p##ldx, p##y, p##ldy, p##n_tok, p##ids,    \
        p##w_zstride, p##x_div, p##x_zstride, p##y_zstride, p##x2
// mqgu_T's parameters, prefixed.
#define MQGU_PARAMS(p)                                                                      \
    const uint8_t *__restrict__ p##W, u64 p##up_off, u64 p##row_bytes, int p##n_in,         \
        int p##n_out, const float *__restrict__ p##x, float *__restrict__ p##y,             \
        const int *__restrict__ p##ids, u64 p##w_zstride, int p##x_div, u64 p##x_zstride,   \
        u64 p##y_zstride
#define MQGU_ARGS(p)                                                                        \
    p##W, p##up_off, p##row_bytes, p##n_in, p##n_out, p##x, p##y, p##ids, p##w_zstride,     \
        p##x_div, p##x_zstride, p##y_zstride
// A one-token kernel's shared memory: the warps' staging buffers and the
// quantized input of up to XS values.
#define MQ_SMEM(XS)                                                                         \
    __shared__ __align__(16) uint8_t smem[MV_WARPS][2][MV_SEG + 32];                        \
    __shared__ RlXU xu[(XS) / 32];                                                          \
    __shared__ float xd[(XS) / 32]

// mv1_T on 16-bit activations (same arguments; any grid.x, grid.z slots).
// mq1b_T is the work of block bx of nbx of slot z, which mq1p_A_B (below)
// also runs; tab: IQ lookup tables in shared memory, or null.
#define DEF_MQ1(T)                                                                          \
    __device__ __forceinline__ void mq1b_##T(MQ1_PARAMS(), int bx, int nbx, int z,          \
                                             uint8_t (*smem)[2][MV_SEG + 32], RlXU* xu,     \
                                             float* xd, const uint8_t* tab, const MqConv& cv, \
                                             bool early) {                                  \
        int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;                               \
        int r0, r1;                                                                         \
        mq_warp_rows_b(n_out, bx, nbx, &r0, &r1);                                           \
        const float* xz = x + (u64)(z / x_div) * x_zstride;                                 \
        const float* x2z = x2 ? x2 + (u64)(z / x_div) * x_zstride : 0;                      \
        const uint8_t* mat[1];                                                              \
        int sh[2] = {0, 0}, pre = 0;                                                        \
        const MqGeo geo = mq_geo(n_in, row_bytes, QK_##T, BS_##T, MQ_K);                    \
        /* Fixed matrices: the first two items asked for before waiting on the */          \
        /* kernel before; an expert's (ids) only once the router has written ids, */       \
        /* or before the wait too where the router ran two launches back (early: */        \
        /* the down products of a decode pair, RL_PDL_EARLY). */                           \
        auto prefetch = [&](u64 e) {                                                        \
            mat[0] = mat_at(W, e, w_zstride);                                               \
            pre = mq_prefetch(geo, mat, 1, BS_##T, r0, r1, smem[warp], lane, &sh[0], &sh[1]); \
        };                                                                                  \
        if (!ids) prefetch((u64)z);                                                         \
        else if (early) prefetch((u64)ids[z]);                                              \
        RL_PDL_ENTER();                                                                     \
        if (ids && !early) prefetch((u64)ids[z]);                                           \
        mq_stage_x(xu, xd, xz, x2z, n_in);                                                  \
        float* yz = y + (u64)z * y_zstride;                                                 \
        mq_stream_##T<1, MQ_K, 1>(geo, mat, r0, r1, xu, xd, 0, 1, smem[warp], lane, pre,    \
                                  sh[0], sh[1], tab,                                        \
                                  [&](int r, const float* a, const float*) { yz[r] = a[0]; }); \
        mq_conv_rows(cv, yz, r0, r1, lane);                                                 \
    }                                                                                       \
    extern "C" __global__ void __launch_bounds__(MV_WARPS * WARP, MV1_MINB)                 \
        mq1_##T(MV_PARAMS) {                                                                \
        MQ_SMEM(MQ_XS_##T);                                                                 \
        __shared__ __align__(16) uint8_t qtab[MQ_TAB(T)];                                   \
        if (MQ_TAB_ON(T)) q16_tab_##T(qtab, threadIdx.x, blockDim.x);                       \
        const MqConv cv = {0, 0, 0, 0, 0, 0};                                               \
        mq1b_##T(MQ1_ARGS(), blockIdx.x, gridDim.x, blockIdx.z, smem, xu, xd,               \
                 MQ_TAB_ON(T) ? qtab : nullptr, cv, false);                                 \
    }
REDLITE_Q16_TYPES(DEF_MQ1)

// mvgu_T on 16-bit activations (same arguments; any grid.x, grid.z slots):
// y_z[o] = silu(G_z[o]·x_z) · (U_z[o]·x_z). mqgub_T: as mq1b_T.
#define DEF_MQGU(T)                                                                         \
    __device__ __forceinline__ void mqgub_##T(MQGU_PARAMS(), int bx, int nbx, int z,        \
                                              uint8_t (*smem)[2][MV_SEG + 32], RlXU* xu,    \
                                              float* xd, const uint8_t* tab) {              \
        int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;                               \
        int r0, r1;                                                                         \
        mq_warp_rows_b(n_out, bx, nbx, &r0, &r1);                                           \
        const uint8_t* mat[2];                                                              \
        int sh[2] = {0, 0}, pre = 0;                                                        \
        const MqGeo geo = mq_geo(n_in, row_bytes, QK_##T, BS_##T, MQ_K);                    \
        /* As mq1_T: fixed matrices asked for before the wait, experts after. */            \
        auto prefetch = [&](u64 e) {                                                        \
            mat[0] = mat_at(W, e, w_zstride);                                               \
            mat[1] = mat[0] + up_off;                                                       \
            pre = mq_prefetch(geo, mat, 2, BS_##T, r0, r1, smem[warp], lane, &sh[0], &sh[1]); \
        };                                                                                  \
        if (!ids) prefetch((u64)z);                                                         \
        RL_PDL_ENTER();                                                                     \
        if (ids) prefetch((u64)ids[z]);                                                     \
        mq_stage_x(xu, xd, x + (u64)(z / x_div) * x_zstride, 0, n_in);                      \
        float* yz = y + (u64)z * y_zstride;                                                 \
        mq_stream_##T<1, MQ_K, 2>(geo, mat, r0, r1, xu, xd, 0, 1, smem[warp], lane, pre,    \
                                  sh[0], sh[1], tab,                                        \
                                  [&](int r, const float* g, const float* u) {              \
                                      yz[r] = silu_f(g[0]) * u[0];                          \
                                  });                                                       \
    }                                                                                       \
    extern "C" __global__ void __launch_bounds__(MV_WARPS * WARP, MV1_MINB)                 \
        mqgu_##T(MQGU_PARAMS()) {                                                           \
        MQ_SMEM(MQ_XS_##T);                                                                 \
        __shared__ __align__(16) uint8_t qtab[MQ_TAB(T)];                                   \
        if (MQ_TAB_ON(T)) q16_tab_##T(qtab, threadIdx.x, blockDim.x);                       \
        mqgub_##T(MQGU_ARGS(), blockIdx.x, gridDim.x, blockIdx.z, smem, xu, xd,             \
                  MQ_TAB_ON(T) ? qtab : nullptr);                                           \
    }
REDLITE_Q16_TYPES(DEF_MQGU)

// Two independent one-token products in one launch (decode): mq1p_A__B runs
// mq1_A's launch with na blocks per slot over za slots and mq1_B's with nb
// over zb, on a one-dimensional grid of na·za + nb·zb blocks, A's blocks
// first; mqgup_A__B likewise for mqgu. Each row's sums are what the kernel
// alone gives it (they do not depend on the grid), the tables read from
// global memory; mq1p_A__B takes DeltaNet's conv (MqConv, cv_out non-null)
// as the epilogue of B. REDLITE_MQ_PAIRS / REDLITE_MQGU_PAIRS (defined ahead
// of this file) list the pairs compiled. An mq1p launch's expert ids come
// from a router at least two launches back (decode's down products follow
// the gate/up launch), so its blocks fetch their experts before the wait.
#define MQ_XS2(A, B) (MQ_XS_##A > MQ_XS_##B ? MQ_XS_##A : MQ_XS_##B)
#define DEF_MQ1_PAIR(A, B)                                                                  \
    extern "C" __global__ void __launch_bounds__(MV_WARPS * WARP, MV1_MINB)                 \
        mq1p_##A##__##B(MQ1_PARAMS(a_), int na, int za, MQ1_PARAMS(b_), int nb,             \
                        const float* __restrict__ cv_w, const u64* __restrict__ cv_tab,     \
                        int cv_slot, float* __restrict__ cv_out, int cv_c, int cv_k) {      \
        MQ_SMEM(MQ_XS2(A, B));                                                              \
        const int bi = blockIdx.x;                                                          \
        if (bi < na * za) {                                                                 \
            const MqConv none = {0, 0, 0, 0, 0, 0};                                         \
            mq1b_##A(MQ1_ARGS(a_), bi % na, na, bi / na, smem, xu, xd, nullptr, none, true); \
        } else {                                                                            \
            const MqConv cv = {cv_w, cv_tab, cv_slot, cv_out, cv_c, cv_k};                  \
            mq1b_##B(MQ1_ARGS(b_), (bi - na * za) % nb, nb, (bi - na * za) / nb, smem, xu,  \
                     xd, nullptr, cv, true);                                                \
        }                                                                                   \
    }
#define DEF_MQGU_PAIR(A, B)                                                                 \
    extern "C" __global__ void __launch_bounds__(MV_WARPS * WARP, MV1_MINB)                 \
        mqgup_##A##__##B(MQGU_PARAMS(a_), int na, int za, MQGU_PARAMS(b_), int nb) {        \
        MQ_SMEM(MQ_XS2(A, B));                                                              \
        const int bi = blockIdx.x;                                                          \
        if (bi < na * za)                                                                   \
            mqgub_##A(MQGU_ARGS(a_), bi % na, na, bi / na, smem, xu, xd, nullptr);          \
        else                                                                                \
            mqgub_##B(MQGU_ARGS(b_), (bi - na * za) % nb, nb, (bi - na * za) / nb, smem,    \
                      xu, xd, nullptr);                                                     \
    }
#ifdef REDLITE_MQ_PAIRS
REDLITE_MQ_PAIRS(DEF_MQ1_PAIR)
#endif
#ifdef REDLITE_MQGU_PAIRS
REDLITE_MQGU_PAIRS(DEF_MQGU_PAIR)
#endif

// Several tokens exactly as mq1_T computes each one alone (a verify pass):
// the inputs quantized ahead by q16_quant (token t's units at xu + t·(n_in /
// 32), their scales at xd + t·(n_in / 32)), up to MQN_NT tokens per staged
// row (grid.y tiles of MQN_NT). Slot z (blockIdx.z) multiplies W +
// z·w_zstride into y + z·y_zstride (two matrices of one shape reading one
// input). Any grid.x; the host sizes it to MQN_MINB blocks per
// multiprocessor (one wave). Eight tokens a tile keep a thread's sums and
// unit in few enough registers for MQN_MINB blocks of 4 warps to share a
// multiprocessor (16 tokens took 116 registers: 4 blocks, and two waves).
#ifndef MQN_NT
#define MQN_NT 8
#endif
#ifndef MQN_MINB
#define MQN_MINB 6
#endif
#define DEF_MQN(T)                                                                          \
    extern "C" __global__ void __launch_bounds__(MV_WARPS * WARP, MQN_MINB)                 \
        mqn_##T(const uint8_t* __restrict__ W, u64 row_bytes, int n_in, int n_out,          \
                const RlXU* __restrict__ xu, const float* __restrict__ xd,                  \
                float* __restrict__ y, int ldy, int n_tok, u64 w_zstride, u64 y_zstride) {  \
        __shared__ __align__(16) uint8_t smem[MV_WARPS][2][MV_SEG + 32];                    \
        __shared__ __align__(16) uint8_t qtab[MQ_TAB(T)];                                   \
        if (MQ_TAB_ON(T)) q16_tab_##T(qtab, threadIdx.x, blockDim.x);                       \
        int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;                               \
        int z = blockIdx.z;                                                                 \
        int r0, r1;                                                                         \
        mq_warp_rows(n_out, &r0, &r1);                                                      \
        const uint8_t* mat[1] = {W + (u64)z * w_zstride};                                   \
        RL_PDL_ENTER();                                                                     \
        if (MQ_TAB_ON(T)) __syncthreads();                                                  \
        int t0 = blockIdx.y * MQN_NT;                                                       \
        int nt = min(MQN_NT, n_tok - t0);                                                   \
        const u64 xs = (u64)(n_in / 32);                                                    \
        float* yz = y + (u64)z * y_zstride + (u64)t0 * ldy;                                 \
        const MqGeo geo = mq_geo(n_in, row_bytes, QK_##T, BS_##T, 1);                       \
        mq_stream_##T<MQN_NT, 1, 1>(geo, mat, r0, r1, xu + (u64)t0 * xs,                    \
                                    xd + (u64)t0 * xs, xs, nt, smem[warp], lane, 0, 0, 0,   \
                                    MQ_TAB_ON(T) ? qtab : nullptr,                          \
                                    [&](int r, const float* a, const float*) {              \
                                        _Pragma("unroll") for (int t = 0; t < MQN_NT; t++)  \
                                            if (t < nt) yz[(u64)t * ldy + r] = a[t];        \
                                    });                                                     \
    }
REDLITE_Q16_TYPES(DEF_MQN)

// The routed experts of a prefill chunk, grouped by expert: block z works
// for expert z on its slots perm[offsets[z] .. offsets[z] + counts[z]] (a
// slot is token·k + choice), MV_NT slots at a time, so each expert's rows
// are read once per chunk. Slot q reads x + (q / x_div)·x_zstride and
// writes y + q·y_zstride.
#define DEF_MATVEC_GROUPED(T, ID)                                                           \
    extern "C" __global__ void __launch_bounds__(MV_WARPS * WARP)                           \
        mvg_##T(const uint8_t* __restrict__ W, u64 row_bytes, int n_in, int n_out,          \
                u64 w_zstride, const float* __restrict__ x, int x_div, u64 x_zstride,       \
                float* __restrict__ y, u64 y_zstride, const int* __restrict__ counts,       \
                const int* __restrict__ offsets, const int* __restrict__ perm) {            \
        RL_PDL_ENTER();                                                                     \
        int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;                               \
        int row = blockIdx.x * MV_WARPS + warp;                                             \
        int e = blockIdx.z;                                                                 \
        int cnt = counts[e];                                                                \
        if (row >= n_out || cnt == 0) return;                                               \
        int off = offsets[e];                                                               \
        const uint8_t* Wr = mat_at(W, (u64)e, w_zstride) + (u64)row * row_bytes;           \
        const int cpb = QK_##T / 8;                                                         \
        int nch = n_in / 8;                                                                 \
        for (int t0 = 0; t0 < cnt; t0 += MV_NT) {                                           \
            int nt = min(MV_NT, cnt - t0);                                                  \
            int sl[MV_NT];                                                                  \
            float acc[MV_NT];                                                               \
            _Pragma("unroll") for (int t = 0; t < MV_NT; t++) {                             \
                sl[t] = t < nt ? perm[off + t0 + t] : 0;                                    \
                acc[t] = 0.f;                                                               \
            }                                                                               \
            for (int i = lane; i < nch; i += WARP) {                                        \
                int b = i / cpb, c = i - b * cpb;                                           \
                float v[8];                                                                 \
                dq8_##T(Wr + (u64)b * BS_##T, c, v);                                        \
                _Pragma("unroll") for (int t = 0; t < MV_NT; t++) {                         \
                    if (t < nt) {                                                           \
                        const float* xp = x + (u64)(sl[t] / x_div) * x_zstride + (u64)i * 8; \
                        float4 a = *(const float4*)xp, bb = *(const float4*)(xp + 4);       \
                        acc[t] += v[0] * a.x + v[1] * a.y + v[2] * a.z + v[3] * a.w +       \
                                  v[4] * bb.x + v[5] * bb.y + v[6] * bb.z + v[7] * bb.w;    \
                    }                                                                       \
                }                                                                           \
            }                                                                               \
            _Pragma("unroll") for (int t = 0; t < MV_NT; t++) {                             \
                float s = warp_sum(acc[t]);                                                 \
                if (lane == 0 && t < nt) y[(u64)sl[t] * y_zstride + row] = s;               \
            }                                                                               \
        }                                                                                   \
    }
REDLITE_DQ_TYPES(DEF_MATVEC_GROUPED)

