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

// Programmatic dependent launch (sm_90 and later, RL_PDL): every kernel may be
// launched while the one before it on the stream still runs. RL_PDL_WAIT()
// returns once every earlier kernel has finished and its writes are visible,
// so each kernel calls it before its first read of anything the kernel just
// before it may write and before its first global write. Loads of weights
// (never written by a kernel) come before it, and so may loads of what only
// kernels two or more launches back wrote (RL_PDL_EARLY): a kernel starts
// once every block of the one before it has passed its own wait (or ended),
// so those have finished. RL_PDL_ENTER() then lets the next
// kernel start (its blocks take free SM slots and issue their own weight
// loads), one kernel ahead at most. Launched without the attribute, or on an
// older GPU, both are no-ops.
#ifndef RL_PDL
#define RL_PDL 1
#endif
#if RL_PDL && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define RL_PDL_WAIT() asm volatile("griddepcontrol.wait;\n" ::: "memory")
#define RL_PDL_NEXT() asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory")
#else
#define RL_PDL_WAIT()
#define RL_PDL_NEXT()
#endif
#define RL_PDL_ENTER() \
    do {               \
        RL_PDL_WAIT(); \
        RL_PDL_NEXT(); \
    } while (0)

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
    // Every warp folds the partials by the same butterfly (one load a lane,
    // five steps) instead of a serial loop over them: the same sum in every
    // thread, in a fixed order.
    return warp_sum_d(lane < nw ? red[lane] : 0.0);
}
__device__ float block_sum_f(float v) {
    __shared__ float redf[32];
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) redf[w] = v;
    __syncthreads();
    return warp_sum(lane < nw ? redf[lane] : 0.f);
}
__device__ __forceinline__ float sigmoid_f(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ __forceinline__ float silu_f(float x) { return x * sigmoid_f(x); }

// ---------------------------------------------------------------------------
// One-token dot products of 8 weights with 8 activations: dot8_<T>(blk, c,
// x, xsum) = Σ_j w_j·x_j for the chunk c of the block at blk, where x is 16-
// byte aligned and xsum = Σ_j x_j. The hot types fold their per-group scale
// and offset out of the sum (dl·Σq·x − ml·Σx) and turn quants into floats
// with a byte permute (0x4B0000qq is the float 2^23 + qq), a few
// instructions per weight instead of a dequantized value each; the rest
// dequantize with dq8_<T>. Word loads assume the alignment every matrix has
// on the device: it starts 256-byte aligned and its rows are whole blocks, so
// Q4_K / Q5_K (144 / 176-byte blocks) are 16-byte aligned, IQ1_M (56) 8-byte
// and F32 16-byte; 2-byte aligned types (Q8_0, Q6_K, IQ2_XS) read halves.
__device__ __forceinline__ float rl_u8f(uint32_t w, int j) {
    return __int_as_float(__byte_perm(w, 0x4B000000u, 0x7540 | j)) - 8388608.0f;
}
__device__ __forceinline__ uint32_t rl_w32(const uint8_t* p) { return *(const uint32_t*)p; }
__device__ __forceinline__ uint32_t rl_h32(const uint8_t* p) {
    return (uint32_t) * (const uint16_t*)p | ((uint32_t) * (const uint16_t*)(p + 2) << 16);
}
// Byte j of w as the float 2^23 + byte, minus `off` (exact for off = 2^23 + a
// small bias: signed bytes come in flipped, w ^ 0x80808080, with bias 128).
__device__ __forceinline__ float rl_u8o(uint32_t w, int j, float off) {
    return __int_as_float(__byte_perm(w, 0x4B000000u, 0x7540 | j)) - off;
}
__device__ __forceinline__ float rl_dot8o(uint32_t w0, uint32_t w1, const float* x, float off) {
    float4 a = *(const float4*)x, b = *(const float4*)(x + 4);
    return rl_u8o(w0, 0, off) * a.x + rl_u8o(w0, 1, off) * a.y + rl_u8o(w0, 2, off) * a.z +
           rl_u8o(w0, 3, off) * a.w + rl_u8o(w1, 0, off) * b.x + rl_u8o(w1, 1, off) * b.y +
           rl_u8o(w1, 2, off) * b.z + rl_u8o(w1, 3, off) * b.w;
}
__device__ __forceinline__ float rl_dot8u(uint32_t w0, uint32_t w1, const float* x) {
    return rl_dot8o(w0, w1, x, 8388608.0f);
}
// Each dot8_T is split in two: prep8_T turns the chunk's 8 weights into
// exact small-integer (or stored) floats q and the chunk's multipliers a, b;
// apply8_T combines them with the inputs. dot8_T = apply8_T(prep8_T(..)),
// so a kernel that preps a chunk once and applies it to several tokens
// (mvn_T) gives each token exactly what dot8_T gives it alone.
struct W8 {
    float q[8];
    float a, b;
};
// Σ q_j·x_j, in the order every apply8 uses.
__device__ __forceinline__ float rl_qdot8(const W8& w, const float* x) {
    float4 a = *(const float4*)x, b = *(const float4*)(x + 4);
    return w.q[0] * a.x + w.q[1] * a.y + w.q[2] * a.z + w.q[3] * a.w + w.q[4] * b.x +
           w.q[5] * b.y + w.q[6] * b.z + w.q[7] * b.w;
}
// Bytes j of w0, w1 as floats 2^23 + byte − off (see rl_u8o).
__device__ __forceinline__ void rl_q8o(W8& w, uint32_t w0, uint32_t w1, float off) {
#pragma unroll
    for (int j = 0; j < 4; j++) {
        w.q[j] = rl_u8o(w0, j, off);
        w.q[4 + j] = rl_u8o(w1, j, off);
    }
}
#define DEF_DOT8_DEFAULT(T)                                                                 \
    __device__ __forceinline__ void prep8_##T(const uint8_t* blk, int c, W8& w) {           \
        dq8_##T(blk, c, w.q);                                                               \
    }                                                                                       \
    __device__ __forceinline__ float apply8_##T(const W8& w, const float* x, float xsum) {  \
        return rl_qdot8(w, x);                                                              \
    }
DEF_DOT8_DEFAULT(F16)
DEF_DOT8_DEFAULT(BF16)
DEF_DOT8_DEFAULT(Q4_0)
DEF_DOT8_DEFAULT(Q4_1)
DEF_DOT8_DEFAULT(Q5_0)
DEF_DOT8_DEFAULT(Q5_1)
DEF_DOT8_DEFAULT(Q2_K)
DEF_DOT8_DEFAULT(Q3_K)
DEF_DOT8_DEFAULT(IQ1_S)
DEF_DOT8_DEFAULT(IQ2_XXS)
DEF_DOT8_DEFAULT(IQ2_S)
DEF_DOT8_DEFAULT(IQ3_XXS)
DEF_DOT8_DEFAULT(IQ3_S)
DEF_DOT8_DEFAULT(IQ4_NL)
DEF_DOT8_DEFAULT(IQ4_XS)

__device__ __forceinline__ void prep8_F32(const uint8_t* blk, int c, W8& w) {
    const float* p = (const float*)(blk + 32 * c);
    float4 u = *(const float4*)p, v = *(const float4*)(p + 4);
    w.q[0] = u.x; w.q[1] = u.y; w.q[2] = u.z; w.q[3] = u.w;
    w.q[4] = v.x; w.q[5] = v.y; w.q[6] = v.z; w.q[7] = v.w;
}
__device__ __forceinline__ float apply8_F32(const W8& w, const float* x, float xsum) {
    return rl_qdot8(w, x);
}
// Q8_0 and Q6_K: a·Σq·x.
__device__ __forceinline__ void prep8_Q8_0(const uint8_t* blk, int c, W8& w) {
    w.a = rl_ld_f16(blk);
    const uint8_t* q = blk + 2 + 8 * c;
    // Signed bytes: flipped to unsigned (q + 128), taken back exactly by the offset.
    rl_q8o(w, rl_h32(q) ^ 0x80808080u, rl_h32(q + 4) ^ 0x80808080u, 8388736.0f);
}
__device__ __forceinline__ float apply8_Q8_0(const W8& w, const float* x, float xsum) {
    return w.a * rl_qdot8(w, x);
}
// Q4_K and Q5_K: a·Σq·x − b·Σx (scale and minimum folded out of the sum).
__device__ __forceinline__ void prep8_Q4_K(const uint8_t* blk, int c, W8& w) {
    const float d = rl_ld_f16(blk);
    const float dmin = rl_ld_f16(blk + 2);
    const int k = c >> 2;
    uint32_t sc, m;
    rl_scale_min_k4(blk + 4, k, &sc, &m);
    const uint8_t* q = blk + 16 + 32 * (k >> 1) + 8 * (c & 3);
    const int sh = 4 * (k & 1);
    rl_q8o(w, (rl_w32(q) >> sh) & 0x0F0F0F0Fu, (rl_w32(q + 4) >> sh) & 0x0F0F0F0Fu, 8388608.0f);
    w.a = d * (float)sc;
    w.b = dmin * (float)m;
}
__device__ __forceinline__ float apply8_Q4_K(const W8& w, const float* x, float xsum) {
    return w.a * rl_qdot8(w, x) - w.b * xsum;
}
__device__ __forceinline__ void prep8_Q5_K(const uint8_t* blk, int c, W8& w) {
    const float d = rl_ld_f16(blk);
    const float dmin = rl_ld_f16(blk + 2);
    const int k = c >> 2;
    uint32_t sc, m;
    rl_scale_min_k4(blk + 4, k, &sc, &m);
    const int l0 = 8 * (c & 3);
    const uint8_t* qh = blk + 16 + l0;
    const uint8_t* q = blk + 48 + 32 * (k >> 1) + l0;
    const int sh = 4 * (k & 1);
    uint32_t w0 = (rl_w32(q) >> sh) & 0x0F0F0F0Fu, w1 = (rl_w32(q + 4) >> sh) & 0x0F0F0F0Fu;
    w0 |= ((rl_w32(qh) >> k) & 0x01010101u) << 4;
    w1 |= ((rl_w32(qh + 4) >> k) & 0x01010101u) << 4;
    rl_q8o(w, w0, w1, 8388608.0f);
    w.a = d * (float)sc;
    w.b = dmin * (float)m;
}
__device__ __forceinline__ float apply8_Q5_K(const W8& w, const float* x, float xsum) {
    return w.a * rl_qdot8(w, x) - w.b * xsum;
}
__device__ __forceinline__ void prep8_Q6_K(const uint8_t* blk, int c, W8& w) {
    const float d = rl_ld_f16(blk + 208);
    w.a = d * (float)(int8_t)blk[192 + (c >> 1)];
    const int n = c >> 4;
    const int r = c & 15;
    const uint8_t* ql = blk + 64 * n + 8 * (r & 7);
    const uint8_t* qh = blk + 128 + 32 * n + 8 * (r & 3);
    const int shl = 4 * (r >> 3);
    const int shh = 2 * (r >> 2);
    uint32_t w0 = (rl_h32(ql) >> shl) & 0x0F0F0F0Fu, w1 = (rl_h32(ql + 4) >> shl) & 0x0F0F0F0Fu;
    w0 |= ((rl_h32(qh) >> shh) & 0x03030303u) << 4;
    w1 |= ((rl_h32(qh + 4) >> shh) & 0x03030303u) << 4;
    rl_q8o(w, w0, w1, 8388640.0f);
}
__device__ __forceinline__ float apply8_Q6_K(const W8& w, const float* x, float xsum) {
    return w.a * rl_qdot8(w, x);
}
// IQ1_M: a·(Σq·x + b·Σx), b the grid's delta (grid: rl_iq1s_grid, or a copy
// of it in shared memory).
__device__ __forceinline__ void prep8_IQ1_M_g(const uint8_t* blk, int c, W8& w,
                                              const uint64_t* grid) {
    const uint32_t s01 = rl_w32(blk + 48), s23 = rl_w32(blk + 52);
    const uint32_t s0 = s01 & 0xffffu, s1 = s01 >> 16, s2 = s23 & 0xffffu, s3 = s23 >> 16;
    const float d = rl_f16_to_f32(rl_iq1m_dbits(s0, s1, s2, s3));
    const int ib = c >> 2;
    const int l = c & 3;
    const uint32_t sw = (ib >> 1) == 0 ? s0 : (ib >> 1) == 1 ? s1 : (ib >> 1) == 2 ? s2 : s3;
    w.a = d * (float)(2 * ((sw >> (6 * (ib & 1) + 3 * (l >> 1))) & 7) + 1);
    const uint32_t nib = (uint32_t)blk[32 + (c >> 1)] >> (4 * (c & 1));
    const uint32_t idx = (uint32_t)blk[c] | ((nib & 7) << 8);
    w.b = __uint_as_float(RL_IQ1M_DELTA_BITS | ((nib & 8) << 28));
    const uint64_t g = grid[idx];
    // Signed grid bytes, flipped to unsigned and back exactly.
    rl_q8o(w, (uint32_t)g ^ 0x80808080u, (uint32_t)(g >> 32) ^ 0x80808080u, 8388736.0f);
}
__device__ __forceinline__ void prep8_IQ1_M(const uint8_t* blk, int c, W8& w) {
    prep8_IQ1_M_g(blk, c, w, rl_iq1s_grid);
}
__device__ __forceinline__ float apply8_IQ1_M(const W8& w, const float* x, float xsum) {
    return w.a * (rl_qdot8(w, x) + w.b * xsum);
}
// IQ2_XS: a·Σ(±q)·x, the grid signs folded into q (exact).
__device__ __forceinline__ void prep8_IQ2_XS(const uint8_t* blk, int c, W8& w) {
    const float d = rl_ld_f16(blk);
    const int ib = c >> 2;
    const int l = c & 3;
    const uint32_t sc = (blk[66 + ib] >> (4 * (l >> 1))) & 15;
    w.a = d * (0.5f + (float)sc) * 0.25f;
    const uint32_t q = rl_ld_u16(blk + 2 + 2 * c);
    const uint64_t g = rl_iq2xs_grid[q & 511];
    const uint32_t s = rl_ksigns_iq2xs[q >> 9];
    const uint32_t w0 = (uint32_t)g, w1 = (uint32_t)(g >> 32);
#pragma unroll
    for (int j = 0; j < 8; j++)
        w.q[j] = __uint_as_float(__float_as_uint(rl_u8f(j < 4 ? w0 : w1, j & 3)) ^
                                 (((s >> j) & 1u) << 31));
}
__device__ __forceinline__ float apply8_IQ2_XS(const W8& w, const float* x, float xsum) {
    return w.a * rl_qdot8(w, x);
}

// dot8_T(blk, c, x, xsum) = Σ_j w_j·x_j over the chunk.
#define DEF_DOT8(T, ID)                                                                     \
    __device__ __forceinline__ float dot8_##T(const uint8_t* blk, int c, const float* x,    \
                                              float xsum) {                                 \
        W8 w;                                                                               \
        prep8_##T(blk, c, w);                                                               \
        return apply8_##T(w, x, xsum);                                                      \
    }
REDLITE_DQ_TYPES(DEF_DOT8)

// Where matrix e of a stack starts: W + e·w_zstride, or, when w_zstride is
// RL_TABLE, the e-th address of the table at W (routed experts placed apart:
// some in device memory, the rest in pinned host memory the kernels read
// over the bus). Every kernel that takes a stack finds its matrices here.
#define RL_TABLE (~0ull)
__device__ __forceinline__ const uint8_t* mat_at(const uint8_t* W, u64 e, u64 w_zstride) {
    return w_zstride == RL_TABLE ? (const uint8_t*)(((const u64*)W)[e]) : W + e * w_zstride;
}

// ---------------------------------------------------------------------------
// Matrix-vector products over up to MV_NT tokens per block row, several
// independent matrices (slots) per launch.
//
// Slot z (blockIdx.z) multiplies W_z = W + e·w_zstride (e = ids[z], or z
// without ids) with x_z = x + (z / x_div)·x_zstride and writes
// y_z = y + z·y_zstride: y_z[t·ldy + o] = Σ_i W_z[o][i]·x_z[t·ldx + i] for
// the tokens t of the block's tile (blockIdx.y). One warp per output row.
//
// The row's bytes are staged in shared memory a segment at a time with
// 16-byte loads (every lane's loads issued at once), then dequantized from
// there: blocks are only byte-aligned in the file, and byte loads straight
// from global memory leave the warp waiting on one load after another. The
// aligned window may start up to 15 bytes before the row and end up to 15
// after it: every weight buffer has 64 bytes of padding behind it.
#define MV_WARPS 4
#define MV_NT 8
#define MV_SEG 2048
__device__ __forceinline__ int stage_row(uint8_t* sm, const uint8_t* src, int len, int lane) {
    u64 a = (u64)src;
    u64 a0 = a & ~(u64)15;
    int shift = (int)(a - a0);
    int n16 = (shift + len + 15) >> 4;
    const uint4* g = (const uint4*)a0;
    uint4* d = (uint4*)sm;
    for (int j = lane; j < n16; j += WARP) d[j] = __ldg(g + j);
    __syncwarp();
    return shift;
}
#define MV_XS 4096
// The parameters of mv_T, mv1_T and mvn_T (one launch shape for all three;
// see the comment above).
#define MV_PARAMS                                                                           \
    const uint8_t *__restrict__ W, u64 row_bytes, int n_in, int n_out,                      \
        const float *__restrict__ x, int ldx, float *__restrict__ y, int ldy, int n_tok,    \
        const int *__restrict__ ids, u64 w_zstride, int x_div, u64 x_zstride, u64 y_zstride, \
        const float *__restrict__ x2
#define DEF_MATVEC(T, ID)                                                                   \
    extern "C" __global__ void __launch_bounds__(MV_WARPS * WARP)                           \
        mv_##T(MV_PARAMS) {                                                                 \
        RL_PDL_ENTER();                                                                     \
        __shared__ __align__(16) uint8_t smem[MV_WARPS][MV_SEG + 32];                       \
        __shared__ __align__(16) float xs[MV_XS];                                           \
        int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;                               \
        int row = blockIdx.x * MV_WARPS + warp;                                             \
        int z = blockIdx.z;                                                                 \
        const float* xz = x + (u64)(z / x_div) * x_zstride;                                 \
        /* One token: the block's warps share x, staged once in shared memory; with x2, */  \
        /* the input is silu(x) ⊙ x2 (a SwiGLU product feeding a down projection). */       \
        const bool one = n_tok == 1 && n_in <= MV_XS;                                       \
        if (one) {                                                                          \
            const float* x2z = x2 ? x2 + (u64)(z / x_div) * x_zstride : 0;                  \
            for (int i = threadIdx.x; i < n_in; i += MV_WARPS * WARP)                       \
                xs[i] = x2z ? silu_f(xz[i]) * x2z[i] : xz[i];                               \
            __syncthreads();                                                                \
        }                                                                                   \
        if (row >= n_out) return;                                                           \
        u64 e = ids ? (u64)ids[z] : (u64)z;                                                 \
        const uint8_t* Wr = mat_at(W, e, w_zstride) + (u64)row * row_bytes;                \
        float* yz = y + (u64)z * y_zstride;                                                 \
        int t0 = blockIdx.y * MV_NT;                                                        \
        int nt = min(MV_NT, n_tok - t0);                                                    \
        float acc[MV_NT];                                                                   \
        _Pragma("unroll") for (int t = 0; t < MV_NT; t++) acc[t] = 0.f;                     \
        const int cpb = QK_##T / 8;                                                         \
        const int bps = MV_SEG / BS_##T;                                                    \
        int nblk = n_in / QK_##T;                                                           \
        uint8_t* sm = smem[warp];                                                           \
        for (int b0 = 0; b0 < nblk; b0 += bps) {                                            \
            int nb = min(bps, nblk - b0);                                                   \
            int shift = stage_row(sm, Wr + (u64)b0 * BS_##T, nb * BS_##T, lane);            \
            int nch = nb * cpb;                                                             \
            if (one) {                                                                      \
                _Pragma("unroll 2") for (int i = lane; i < nch; i += WARP) {                \
                    int b = i / cpb, c = i - b * cpb;                                       \
                    float v[8];                                                             \
                    dq8_##T(sm + shift + b * BS_##T, c, v);                                 \
                    const float* xp = xs + ((b0 * cpb + i) << 3);                           \
                    float4 a = *(const float4*)xp, bb = *(const float4*)(xp + 4);           \
                    acc[0] += v[0] * a.x + v[1] * a.y + v[2] * a.z + v[3] * a.w +           \
                              v[4] * bb.x + v[5] * bb.y + v[6] * bb.z + v[7] * bb.w;        \
                }                                                                           \
            } else {                                                                        \
                for (int i = lane; i < nch; i += WARP) {                                    \
                    int b = i / cpb, c = i - b * cpb;                                       \
                    float v[8];                                                             \
                    dq8_##T(sm + shift + b * BS_##T, c, v);                                 \
                    u64 xi = ((u64)b0 * cpb + i) * 8;                                       \
                    _Pragma("unroll") for (int t = 0; t < MV_NT; t++) {                     \
                        if (t < nt) {                                                       \
                            const float* xp = xz + (u64)(t0 + t) * ldx + xi;                \
                            float4 a = *(const float4*)xp, bb = *(const float4*)(xp + 4);   \
                            acc[t] += v[0] * a.x + v[1] * a.y + v[2] * a.z + v[3] * a.w +   \
                                      v[4] * bb.x + v[5] * bb.y + v[6] * bb.z + v[7] * bb.w; \
                        }                                                                   \
                    }                                                                       \
                }                                                                           \
            }                                                                               \
            __syncwarp();                                                                   \
        }                                                                                   \
        _Pragma("unroll") for (int t = 0; t < MV_NT; t++) {                                 \
            float s = warp_sum(acc[t]);                                                     \
            if (lane == 0 && t < nt) yz[(u64)(t0 + t) * ldy + row] = s;                     \
        }                                                                                   \
    }
REDLITE_DQ_TYPES(DEF_MATVEC)

// One token, MV1_R rows per warp: the warp stages all its rows' segments
// (every load in flight at once) before dequantizing any, so the latency of
// one row's bytes overlaps the others'. The first segment is requested with
// cp.async before the block stages its input (MV1_PREFETCH), so the weights'
// trip from memory overlaps the input's. Same arguments as mv_T (n_tok = 1,
// n_in <= MV_XS); grid.x = ceil(n_out / (MV_WARPS·MV1_R)).
#define MV1_R 2
#ifndef MV1_PREFETCH
#define MV1_PREFETCH 1
#endif
// Blocks per SM the one-token kernels are compiled for (a register bound: 8
// blocks of 128 threads, 64 registers; 173.6 vs 171.5 tok/s with none).
#ifndef MV1_MINB
#define MV1_MINB 8
#endif

// Copy n16 16-byte words from g to shared d (lane-strided), asynchronously
// where MV1_PREFETCH (completed by rl_async_wait), else at once.
// RL_CP_L2 (0, 128 or 256): the L2 prefetch size the copies ask for. 256:
// on the H200, decode with 25% of the experts in device memory (the rest
// read from pinned host memory) 70.9 -> 74.5 tok/s (128: 71.2); all
// resident 171.2 -> 171.5, the same.
#ifndef RL_CP_L2
#define RL_CP_L2 256
#endif
#if RL_CP_L2 == 128
#define RL_CP_OP "cp.async.cg.shared.global.L2::128B"
#elif RL_CP_L2 == 256
#define RL_CP_OP "cp.async.cg.shared.global.L2::256B"
#else
#define RL_CP_OP "cp.async.cg.shared.global"
#endif
__device__ __forceinline__ void rl_copy16(uint4* d, const uint4* g, int n16, int lane) {
#if MV1_PREFETCH
    for (int j = lane; j < n16; j += WARP) {
        unsigned sa = (unsigned)__cvta_generic_to_shared(d + j);
        asm volatile(RL_CP_OP " [%0], [%1], 16;\n" ::"r"(sa), "l"(g + j));
    }
    asm volatile("cp.async.commit_group;\n" ::);
#else
    for (int j = lane; j < n16; j += WARP) d[j] = __ldg(g + j);
#endif
}
__device__ __forceinline__ void rl_async_wait() {
#if MV1_PREFETCH
    asm volatile("cp.async.wait_all;\n" ::);
#endif
    __syncwarp();
}

// The block's input in shared memory: xs = x (or silu(x) ⊙ x2), and the
// sums of its 8-value chunks (from 0, in order).
__device__ __forceinline__ void mv1_stage_x(float* xs, float* xsum8, const float* xz,
                                            const float* x2z, int n_in) {
    for (int i = threadIdx.x; i < n_in; i += MV_WARPS * WARP)
        xs[i] = x2z ? silu_f(xz[i]) * x2z[i] : xz[i];
    __syncthreads();
    for (int i = threadIdx.x; i < n_in / 8; i += MV_WARPS * WARP) {
        float sx = 0.f;
#pragma unroll
        for (int j = 0; j < 8; j++) sx += xs[8 * i + j];
        xsum8[i] = sx;
    }
    __syncthreads();
}

// Where a warp's MV1_R rows from row0 start in a matrix at base (rows past
// n_out repeat the first, and a warp past the end reads row 0: its loads are
// harmless and its results unused); returns the rows it really has.
__device__ __forceinline__ int mv1_row_src(const uint8_t* base, u64 row_bytes, int row0,
                                           int n_out, const uint8_t** src) {
    bool live = row0 < n_out;
    int nr = live ? min(MV1_R, n_out - row0) : 1;
    const uint8_t* W0 = base + (u64)(live ? row0 : 0) * row_bytes;
#pragma unroll
    for (int r = 0; r < MV1_R; r++) src[r] = W0 + (u64)(r < nr ? r : 0) * row_bytes;
    return nr;
}

// One warp's MV1_R rows (row r's bytes at src[r]; rows r >= nr repeat row 0)
// against the staged input: acc[r] = Σ over the lane's chunks of dot8_T.
// mv1_issue_T requests the segment of blocks from b0 into the warp's staging
// rows (shift[r]: where row r starts in its staging row); mv1_rows_T expects
// the first segment requested already.
#define DEF_MV1_ROWS(T, ID)                                                                 \
    __device__ __forceinline__ void mv1_issue_##T(const uint8_t* const* src, int b0,       \
                                                  int nb, uint8_t (*sm)[MV_SEG + 32],      \
                                                  int lane, int* shift) {                  \
        _Pragma("unroll") for (int r = 0; r < MV1_R; r++) {                                 \
            u64 a = (u64)(src[r] + (u64)b0 * BS_##T), a0 = a & ~(u64)15;                    \
            shift[r] = (int)(a - a0);                                                       \
            int n16 = (shift[r] + nb * BS_##T + 15) >> 4;                                   \
            rl_copy16((uint4*)sm[r], (const uint4*)a0, n16, lane);                          \
        }                                                                                   \
    }                                                                                       \
    __device__ __forceinline__ void mv1_rows_##T(const uint8_t* const* src, int n_in,      \
                                                 const float* xs, const float* xsum8,      \
                                                 uint8_t (*sm)[MV_SEG + 32], int lane,     \
                                                 int* shift, float* acc) {                 \
        const int cpb = QK_##T / 8;                                                         \
        const int bps = MV_SEG / BS_##T;                                                    \
        int nblk = n_in / QK_##T;                                                           \
        for (int b0 = 0; b0 < nblk; b0 += bps) {                                            \
            int nb = min(bps, nblk - b0);                                                   \
            if (b0 > 0) mv1_issue_##T(src, b0, nb, sm, lane, shift);                        \
            rl_async_wait();                                                                \
            int nch = nb * cpb;                                                             \
            for (int i = lane; i < nch; i += WARP) {                                        \
                int b = i / cpb, c = i - b * cpb;                                           \
                int ci = b0 * cpb + i;                                                      \
                const float* xp = xs + (ci << 3);                                           \
                float sx = xsum8[ci];                                                       \
                _Pragma("unroll") for (int r = 0; r < MV1_R; r++)                           \
                    acc[r] += dot8_##T(sm[r] + shift[r] + b * BS_##T, c, xp, sx);           \
            }                                                                               \
            __syncwarp();                                                                   \
        }                                                                                   \
    }
REDLITE_DQ_TYPES(DEF_MV1_ROWS)

#define DEF_MATVEC1(T, ID)                                                                  \
    extern "C" __global__ void __launch_bounds__(MV_WARPS * WARP, MV1_MINB)                 \
        mv1_##T(MV_PARAMS) {                                                                \
        __shared__ __align__(16) uint8_t smem[MV_WARPS][MV1_R][MV_SEG + 32];                \
        __shared__ __align__(16) float xs[MV_XS];                                           \
        __shared__ float xsum8[MV_XS / 8];                                                  \
        int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;                               \
        int row0 = (blockIdx.x * MV_WARPS + warp) * MV1_R;                                  \
        int z = blockIdx.z;                                                                 \
        const float* xz = x + (u64)(z / x_div) * x_zstride;                                 \
        const float* x2z = x2 ? x2 + (u64)(z / x_div) * x_zstride : 0;                      \
        bool live = row0 < n_out;                                                           \
        const uint8_t* src[MV1_R];                                                          \
        int nr = 0;                                                                         \
        int shift[MV1_R];                                                                   \
        const int nb0 = min(MV_SEG / BS_##T, n_in / QK_##T);                                \
        /* Fixed matrices: the first segment is asked for before waiting on the */          \
        /* kernel before; an expert's (ids) only once the router has written ids. */        \
        if (!ids) {                                                                         \
            nr = mv1_row_src(mat_at(W, (u64)z, w_zstride), row_bytes, row0, n_out, src);    \
            if (live) mv1_issue_##T(src, 0, nb0, smem[warp], lane, shift);                  \
        }                                                                                   \
        RL_PDL_ENTER();                                                                     \
        if (ids) {                                                                          \
            nr = mv1_row_src(mat_at(W, (u64)ids[z], w_zstride), row_bytes, row0, n_out, src); \
            if (live) mv1_issue_##T(src, 0, nb0, smem[warp], lane, shift);                  \
        }                                                                                   \
        mv1_stage_x(xs, xsum8, xz, x2z, n_in);                                              \
        if (!live) return;                                                                  \
        float acc[MV1_R];                                                                   \
        _Pragma("unroll") for (int r = 0; r < MV1_R; r++) acc[r] = 0.f;                     \
        mv1_rows_##T(src, n_in, xs, xsum8, smem[warp], lane, shift, acc);                   \
        float* yz = y + (u64)z * y_zstride;                                                 \
        _Pragma("unroll") for (int r = 0; r < MV1_R; r++) {                                 \
            float s = warp_sum(acc[r]);                                                     \
            if (lane == 0 && r < nr) yz[row0 + r] = s;                                      \
        }                                                                                   \
    }
REDLITE_DQ_TYPES(DEF_MATVEC1)

// Router: the top k of each token's logits (ties: lower id) and their
// softmax weights renormalised over the top k (in f64 after an f32 max
// subtraction; only the k winners' exponentials are needed). One warp per
// token; ne <= 32·TOPK_PER = 512.
#define TOPK_PER 16
#ifndef RL_TOPK_REDUX
#define RL_TOPK_REDUX 1
#endif
// An order-preserving unsigned key of a float (−0 taken as +0, so equal
// values have equal keys) and its inverse.
__device__ __forceinline__ unsigned rl_okey(float f) {
    unsigned u = __float_as_uint(f == 0.f ? 0.f : f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ float rl_okey_inv(unsigned k) {
    return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}
// The largest of l[0..16) and its slot, ties to the lower slot (a tree of
// strict comparisons: the right one wins only when larger).
__device__ __forceinline__ void rl_best16(const float* l, float& bv, int& bj) {
    float v[8];
    int jj[8];
#pragma unroll
    for (int i = 0; i < 8; i++) {
        bool b = l[2 * i + 1] > l[2 * i];
        v[i] = b ? l[2 * i + 1] : l[2 * i];
        jj[i] = b ? 2 * i + 1 : 2 * i;
    }
#pragma unroll
    for (int w = 4; w >= 1; w >>= 1) {
#pragma unroll
        for (int i = 0; i < w; i++) {
            bool b = v[2 * i + 1] > v[2 * i];
            v[i] = b ? v[2 * i + 1] : v[2 * i];
            jj[i] = b ? jj[2 * i + 1] : jj[2 * i];
        }
    }
    bv = v[0];
    bj = jj[0];
}
__device__ __forceinline__ void topk_row(const float* row, int ne, int k, int* ids,
                                         float* wts) {
    int lane = threadIdx.x & 31;
    float l[TOPK_PER];
#pragma unroll
    for (int j = 0; j < TOPK_PER; j++) {
        int e = lane + j * WARP;
        l[j] = e < ne ? __ldcg(row + e) : -INFINITY;
    }
    // Top k by repeated arg-max over the logits (the softmax is monotonic;
    // ties go to the lower id, as the reference's stable order); lane r keeps
    // the r-th winner.
    int chosen = -1;
    float chosen_l = -INFINITY;
#if RL_TOPK_REDUX && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    // Each lane keeps its own best (value, slot j); a round takes the warp's
    // largest value with one redux.sync on an order-preserving key and the
    // lowest id holding it with a second, and only the winning lane looks
    // for its next best. (Entries past ne are -inf with ids >= ne, so they
    // lose every tie; k <= ne.)
    float bv;
    int bj;
    rl_best16(l, bv, bj);
    for (int r = 0; r < k; r++) {
        unsigned key = rl_okey(bv);
        unsigned mk = __reduce_max_sync(FULL, key);
        unsigned id = (unsigned)(lane + bj * WARP);
        unsigned mid = __reduce_min_sync(FULL, key == mk ? id : 0xffffffffu);
        if (lane == r) {
            chosen = (int)mid;
            chosen_l = rl_okey_inv(mk);
        }
        if (id == mid) {
#pragma unroll
            for (int j = 0; j < TOPK_PER; j++)
                if (j == bj) l[j] = -INFINITY;
            rl_best16(l, bv, bj);
        }
    }
#else
    for (int r = 0; r < k; r++) {
        float best = -INFINITY;
        int bid = 0x7fffffff;
#pragma unroll
        for (int j = 0; j < TOPK_PER; j++) {
            int e = lane + j * WARP;
            if (e < ne && (l[j] > best || (l[j] == best && e < bid))) {
                best = l[j];
                bid = e;
            }
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            float ob = __shfl_xor_sync(FULL, best, o);
            int oi = __shfl_xor_sync(FULL, bid, o);
            if (ob > best || (ob == best && oi < bid)) {
                best = ob;
                bid = oi;
            }
        }
        if (lane == r) {
            chosen = bid;
            chosen_l = best;
        }
        // Remove the winner from its owner's registers.
#pragma unroll
        for (int j = 0; j < TOPK_PER; j++)
            if (lane + j * WARP == bid) l[j] = -INFINITY;
    }
#endif
    // The winners' weights: softmax probabilities renormalised over the top
    // k, p_r / Σ p = e^(l_r − max) / Σ_top e^(l_j − max) (the softmax's
    // denominator cancels; the reference's floor of 6.1035e-5 under Σ p never
    // applies, the top k holding at least k / ne >= 1/512 of the mass), each
    // in its lane, summed in rank order. The max is the first winner's.
    const float mx = __shfl_sync(FULL, chosen_l, 0);
    double p = lane < k ? exp((double)(chosen_l - mx)) : 0.0;
    double wsum = 0.0;
    for (int r = 0; r < k; r++) wsum += __shfl_sync(FULL, p, r);
    if (lane < k) {
        ids[lane] = chosen;
        wts[lane] = (float)(p / wsum);
    }
}
// A decode step's layer whose experts were predicted and are being copied
// (xp_fetch) marks what its router chose, for the copies to stop on the
// experts it did not choose: chosen[e] = tag for the k chosen ids, then, after
// a fence, done = tag (xpc[0]; chosen at xpc + 4). One warp; ids written by
// its lanes (lane r the r-th). xp_restore clears done at the end of the step.
__device__ __forceinline__ void xp_mark(const int* ids, int k, int* xpc, int tag) {
    const int lane = threadIdx.x & 31;
    if (lane < k) ((volatile int*)xpc)[4 + ids[lane]] = tag;
    __threadfence();
    __syncwarp();
    if (lane == 0) ((volatile int*)xpc)[0] = tag;
}
// The router and its top-k in one launch, one token per slot z (blockIdx.z):
// logits[z] = W·x_z as mv1_T computes it, then the block that finishes last
// (counted in counter[z], reset for the next launch) takes the token's top k
// with topk_row. x_z = x + z·n_in; ids / wts at z·k. xpc non-null (a decode
// step with the layer's experts being copied in): xp_mark(xpc, tag) after it.
#define DEF_ROUTER(T, ID)                                                                   \
    extern "C" __global__ void __launch_bounds__(MV_WARPS * WARP, MV1_MINB)                 \
        router_##T(const uint8_t* __restrict__ W, u64 row_bytes, int n_in, int ne,          \
                   const float* __restrict__ x, float* logits, int k, int* __restrict__ ids, \
                   float* __restrict__ wts, int* counter, int* xpc, int tag) {             \
        __shared__ __align__(16) uint8_t smem[MV_WARPS][MV1_R][MV_SEG + 32];                \
        __shared__ __align__(16) float xs[MV_XS];                                           \
        __shared__ float xsum8[MV_XS / 8];                                                  \
        __shared__ int last;                                                                \
        int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;                               \
        int row0 = (blockIdx.x * MV_WARPS + warp) * MV1_R;                                  \
        int z = blockIdx.z;                                                                 \
        bool live = row0 < ne;                                                              \
        const uint8_t* src[MV1_R];                                                          \
        int nr = mv1_row_src(W, row_bytes, row0, ne, src);                                  \
        int shift[MV1_R];                                                                   \
        if (live)                                                                           \
            mv1_issue_##T(src, 0, min(MV_SEG / BS_##T, n_in / QK_##T), smem[warp], lane, shift); \
        RL_PDL_ENTER();                                                                     \
        mv1_stage_x(xs, xsum8, x + (u64)z * n_in, 0, n_in);                                 \
        float* lz = logits + (u64)z * ne;                                                   \
        if (live) {                                                                         \
            float acc[MV1_R];                                                               \
            _Pragma("unroll") for (int r = 0; r < MV1_R; r++) acc[r] = 0.f;                 \
            mv1_rows_##T(src, n_in, xs, xsum8, smem[warp], lane, shift, acc);               \
            _Pragma("unroll") for (int r = 0; r < MV1_R; r++) {                             \
                float s = warp_sum(acc[r]);                                                 \
                if (lane == 0 && r < nr) lz[row0 + r] = s;                                  \
            }                                                                               \
        }                                                                                   \
        __threadfence();                                                                    \
        __syncthreads();                                                                    \
        if (threadIdx.x == 0) last = atomicAdd(counter + z, 1) == (int)gridDim.x - 1;       \
        __syncthreads();                                                                    \
        if (!last) return;                                                                  \
        __threadfence();                                                                    \
        if (warp == 0) topk_row(lz, ne, k, ids + z * k, wts + z * k);                       \
        if (warp == 0 && xpc) xp_mark(ids + z * k, k, xpc, tag);                            \
        if (threadIdx.x == 0) counter[z] = 0;                                               \
    }
REDLITE_DQ_TYPES(DEF_ROUTER)

// The router of an F32 matrix with rows of n_in <= 32·8·RD_J values (n_in a
// multiple of 256), one row per warp: every lane loads all of its chunks
// (chunk ci = lane + 32·j, in that order, as mv1_F32 takes them) into
// registers at once, before waiting on the kernel before, so the whole
// matrix is one trip to memory instead of mv1_F32's four staged segments.
// Then as router_T: the block that finishes last takes the top k. Same
// parameters as router_T (rows row_bytes apart); launched with 4 rows per
// block instead of 4·MV1_R.
#define RD_J 8
// The body of router_f32 and router_f32n. NORM (router_f32n): the input is
// first formed as add_rmsnorm forms it, in each block: v = xres + y (y the
// product just before, xres the residual, read before the wait as
// RL_PDL_EARLY allows), out = v·s·nw with s = 1/sqrt(Σv²/n_in + eps) (Σ in
// f64), and the block that takes the top k (the last, so every block has
// read the residual by then) writes v back to xres and out to hout for the
// kernels after; otherwise x is the input.
template <bool NORM>
__device__ __forceinline__ void router_f32_body(
    const uint8_t* __restrict__ W, u64 row_bytes, int n_in, int ne, const float* __restrict__ x,
    float* __restrict__ xres, const float* __restrict__ y, const float* __restrict__ nw,
    float* __restrict__ hout, float eps, float* logits, int k, int* __restrict__ ids,
    float* __restrict__ wts, int* counter, int* xpc, int tag) {
    __shared__ __align__(16) float xs[32 * 8 * RD_J];
    __shared__ int last;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int row = blockIdx.x * 4 + warp;
    int z = blockIdx.z;
    bool live = row < ne;
    int nj = n_in >> 8;
    const float4* wr = (const float4*)(W + (u64)(live ? row : 0) * row_bytes);
    float4 wv[RD_J][2];
#pragma unroll
    for (int j = 0; j < RD_J; j++) {
        if (j < nj) {
            wv[j][0] = __ldg(wr + 2 * (lane + 32 * j));
            wv[j][1] = __ldg(wr + 2 * (lane + 32 * j) + 1);
        }
    }
    // NORM: this thread's residual and norm weights (16-byte words i =
    // threadIdx.x + 128·j) before the wait.
    constexpr int XJ = RD_J * 64 / 128;
    float4 rv[XJ], nv[XJ];
    if (NORM) {
        const float4* r4 = (const float4*)(xres + (u64)z * n_in);
#pragma unroll
        for (int j = 0; j < XJ; j++) {
            const int i = threadIdx.x + 128 * j;
            if (i < n_in / 4) {
                rv[j] = r4[i];
                nv[j] = ((const float4*)nw)[i];
            }
        }
    }
    RL_PDL_ENTER();
    if (NORM) {
        const float4* y4 = (const float4*)(y + (u64)z * n_in);
        double ss = 0.0;
#pragma unroll
        for (int j = 0; j < XJ; j++) {
            const int i = threadIdx.x + 128 * j;
            if (i < n_in / 4) {
                const float4 b = y4[i];
                rv[j].x += b.x;
                rv[j].y += b.y;
                rv[j].z += b.z;
                rv[j].w += b.w;
                ss += (double)rv[j].x * (double)rv[j].x;
                ss += (double)rv[j].y * (double)rv[j].y;
                ss += (double)rv[j].z * (double)rv[j].z;
                ss += (double)rv[j].w * (double)rv[j].w;
            }
        }
        ss = block_sum_d(ss);
        const float sc = (float)(1.0 / sqrt(ss / n_in + (double)eps));
#pragma unroll
        for (int j = 0; j < XJ; j++) {
            const int i = threadIdx.x + 128 * j;
            if (i < n_in / 4) {
                float4 o;
                o.x = rv[j].x * sc * nv[j].x;
                o.y = rv[j].y * sc * nv[j].y;
                o.z = rv[j].z * sc * nv[j].z;
                o.w = rv[j].w * sc * nv[j].w;
                ((float4*)xs)[i] = o;
            }
        }
    } else {
        const float* xz = x + (u64)z * n_in;
        {
            // The input as 16-byte words, all of a thread's at once (n_in is a
            // multiple of 256, at most 32·8·RD_J).
            const float4* x4 = (const float4*)xz;
            float4 xv[RD_J * 64 / 128];
#pragma unroll
            for (int j = 0; j < RD_J * 64 / 128; j++) {
                const int i = threadIdx.x + 128 * j;
                if (i < n_in / 4) xv[j] = x4[i];
            }
#pragma unroll
            for (int j = 0; j < RD_J * 64 / 128; j++) {
                const int i = threadIdx.x + 128 * j;
                if (i < n_in / 4) ((float4*)xs)[i] = xv[j];
            }
        }
    }
    __syncthreads();
    float* lz = logits + (u64)z * ne;
    if (live) {
        float acc = 0.f;
#pragma unroll
        for (int j = 0; j < RD_J; j++) {
            if (j < nj) {
                W8 w;
                w.q[0] = wv[j][0].x; w.q[1] = wv[j][0].y; w.q[2] = wv[j][0].z; w.q[3] = wv[j][0].w;
                w.q[4] = wv[j][1].x; w.q[5] = wv[j][1].y; w.q[6] = wv[j][1].z; w.q[7] = wv[j][1].w;
                acc += apply8_F32(w, xs + 8 * (lane + 32 * j), 0.f);
            }
        }
        float s = warp_sum(acc);
        if (lane == 0) lz[row] = s;
    }
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(counter + z, 1) == (int)gridDim.x - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    if (NORM) {
        // The last block, once every block has read the residual: v back to
        // it and the normed input to hout for the kernels after.
#pragma unroll
        for (int j = 0; j < XJ; j++) {
            const int i = threadIdx.x + 128 * j;
            if (i < n_in / 4) {
                ((float4*)(xres + (u64)z * n_in))[i] = rv[j];
                ((float4*)(hout + (u64)z * n_in))[i] = ((const float4*)xs)[i];
            }
        }
    }
    if (warp == 0) topk_row(lz, ne, k, ids + z * k, wts + z * k);
    if (warp == 0 && xpc) xp_mark(ids + z * k, k, xpc, tag);
    if (threadIdx.x == 0) counter[z] = 0;
}
extern "C" __global__ void __launch_bounds__(128)
    router_f32(const uint8_t* __restrict__ W, u64 row_bytes, int n_in, int ne,
               const float* __restrict__ x, float* logits, int k, int* __restrict__ ids,
               float* __restrict__ wts, int* counter, int* xpc, int tag) {
    router_f32_body<false>(W, row_bytes, n_in, ne, x, nullptr, nullptr, nullptr, nullptr, 0.f,
                           logits, k, ids, wts, counter, xpc, tag);
}
// router_f32 on the residual stream: add_rmsnorm's residual add and post
// norm in each block (x += y written back, the normed input to h), then
// the router and its top k; the arguments of router_f32 with the input
// replaced by (x, y, w, h, eps).
extern "C" __global__ void __launch_bounds__(128)
    router_f32n(const uint8_t* __restrict__ W, u64 row_bytes, int n_in, int ne,
                float* __restrict__ x, const float* __restrict__ y, const float* __restrict__ w,
                float* __restrict__ h, float eps, float* logits, int k, int* __restrict__ ids,
                float* __restrict__ wts, int* counter, int* xpc, int tag) {
    router_f32_body<true>(W, row_bytes, n_in, ne, h, x, y, w, h, eps, logits, k, ids, wts,
                          counter, xpc, tag);
}

// Gate and up products with the SwiGLU between them, one token per slot:
// y_z[o] = silu(G_z[o]·x_z) · (U_z[o]·x_z), each warp one output o (its gate
// row and up row staged as mv1_T's two rows, so both sums, and the product,
// equal what mv1_T and the staged silu(g) ⊙ u of a following mv1_T give).
// G_z = W + e·w_zstride (e = ids[z], or z), U_z = G_z + up_off; x_z = x +
// (z / x_div)·x_zstride; y_z = y + z·y_zstride. grid.x = ceil(n_out /
// MV_WARPS), n_in <= MV_XS. (MV1_R is 2: the gate row and the up row.)
#define DEF_MATVEC_GU(T, ID)                                                                \
    extern "C" __global__ void __launch_bounds__(MV_WARPS * WARP, MV1_MINB)                 \
        mvgu_##T(const uint8_t* __restrict__ W, u64 up_off, u64 row_bytes, int n_in,        \
                 int n_out, const float* __restrict__ x, float* __restrict__ y,             \
                 const int* __restrict__ ids, u64 w_zstride, int x_div, u64 x_zstride,      \
                 u64 y_zstride) {                                                           \
        __shared__ __align__(16) uint8_t smem[MV_WARPS][MV1_R][MV_SEG + 32];                \
        __shared__ __align__(16) float xs[MV_XS];                                           \
        __shared__ float xsum8[MV_XS / 8];                                                  \
        int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;                               \
        int row = blockIdx.x * MV_WARPS + warp;                                             \
        int z = blockIdx.z;                                                                 \
        bool live = row < n_out;                                                            \
        const uint8_t* src[MV1_R];                                                          \
        int shift[MV1_R];                                                                   \
        const int nb0 = min(MV_SEG / BS_##T, n_in / QK_##T);                                \
        auto issue = [&](u64 e) {                                                           \
            src[0] = mat_at(W, e, w_zstride) + (u64)(live ? row : 0) * row_bytes;           \
            src[1] = src[0] + up_off;                                                       \
            if (live) mv1_issue_##T(src, 0, nb0, smem[warp], lane, shift);                  \
        };                                                                                  \
        /* As mv1_T: fixed matrices asked for before the wait, experts after. */            \
        if (!ids) issue((u64)z);                                                            \
        RL_PDL_ENTER();                                                                     \
        if (ids) issue((u64)ids[z]);                                                        \
        mv1_stage_x(xs, xsum8, x + (u64)(z / x_div) * x_zstride, 0, n_in);                  \
        if (!live) return;                                                                  \
        float acc[MV1_R] = {0.f, 0.f};                                                      \
        mv1_rows_##T(src, n_in, xs, xsum8, smem[warp], lane, shift, acc);                   \
        float g = warp_sum(acc[0]), u = warp_sum(acc[1]);                                   \
        if (lane == 0) y[(u64)z * y_zstride + row] = silu_f(g) * u;                         \
    }
REDLITE_DQ_TYPES(DEF_MATVEC_GU)

// Several tokens computed exactly as mv1_T computes each one alone (a
// speculative verify pass, whose logits must equal plain decoding's bit for
// bit): the same rows per warp, the same chunk order per lane, dot8_T's two
// halves (each chunk prepared once, applied to every token), the same chunk
// sums Σx (from 0, in order) and the same warp sum, only with the tile's
// MVN_NT tokens sharing each staged row. The inputs are
// read from global memory (through L1) instead of shared memory, which
// changes no value. Same arguments as mv_T (n_in <= MV_XS); grid.x as mv1_T,
// grid.y = ceil(n_tok / MVN_NT).
#define MVN_NT 16
// Blocks per SM mvn_T is compiled for (a register bound; on the H200,
// replayed 8-token drafts 1.89x plain generation with none, 2.04x with 4,
// 1.98x with 6).
#ifndef MVN_MINB
#define MVN_MINB 4
#endif
#define DEF_MATVECN(T, ID)                                                                  \
    extern "C" __global__ void __launch_bounds__(MV_WARPS * WARP, MVN_MINB)                 \
        mvn_##T(MV_PARAMS) {                                                                \
        RL_PDL_ENTER();                                                                     \
        __shared__ __align__(16) uint8_t smem[MV_WARPS][MV1_R][MV_SEG + 32];                \
        int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;                               \
        int row0 = (blockIdx.x * MV_WARPS + warp) * MV1_R;                                  \
        int z = blockIdx.z;                                                                 \
        if (row0 >= n_out) return;                                                          \
        int t0 = blockIdx.y * MVN_NT;                                                       \
        int nt = min(MVN_NT, n_tok - t0);                                                   \
        const float* xz = x + (u64)(z / x_div) * x_zstride + (u64)t0 * ldx;                 \
        const float* x2z = x2 ? x2 + (u64)(z / x_div) * x_zstride + (u64)t0 * ldx : 0;      \
        int nr = min(MV1_R, n_out - row0);                                                  \
        u64 e = ids ? (u64)ids[z] : (u64)z;                                                 \
        const uint8_t* W0 = mat_at(W, e, w_zstride) + (u64)row0 * row_bytes;                \
        float* yz = y + (u64)z * y_zstride + (u64)t0 * ldy;                                 \
        float acc[MV1_R][MVN_NT];                                                           \
        _Pragma("unroll") for (int r = 0; r < MV1_R; r++)                                   \
            _Pragma("unroll") for (int t = 0; t < MVN_NT; t++) acc[r][t] = 0.f;             \
        const int cpb = QK_##T / 8;                                                         \
        const int bps = MV_SEG / BS_##T;                                                    \
        int nblk = n_in / QK_##T;                                                           \
        for (int b0 = 0; b0 < nblk; b0 += bps) {                                            \
            int nb = min(bps, nblk - b0);                                                   \
            int shift[MV1_R];                                                               \
            _Pragma("unroll") for (int r = 0; r < MV1_R; r++) {                             \
                const uint8_t* src = W0 + (u64)(r < nr ? r : 0) * row_bytes + (u64)b0 * BS_##T; \
                u64 a = (u64)src, a0 = a & ~(u64)15;                                        \
                shift[r] = (int)(a - a0);                                                   \
                int n16 = (shift[r] + nb * BS_##T + 15) >> 4;                               \
                const uint4* g = (const uint4*)a0;                                          \
                uint4* d = (uint4*)smem[warp][r];                                           \
                for (int j = lane; j < n16; j += WARP) d[j] = __ldg(g + j);                 \
            }                                                                               \
            __syncwarp();                                                                   \
            int nch = nb * cpb;                                                             \
            for (int i = lane; i < nch; i += WARP) {                                        \
                int b = i / cpb, c = i - b * cpb;                                           \
                u64 ci = (u64)(b0 * cpb + i) << 3;                                          \
                W8 wr[MV1_R];                                                               \
                _Pragma("unroll") for (int r = 0; r < MV1_R; r++)                           \
                    prep8_##T(smem[warp][r] + shift[r] + b * BS_##T, c, wr[r]);             \
                _Pragma("unroll") for (int t = 0; t < MVN_NT; t++) {                        \
                    if (t < nt) {                                                           \
                        __align__(16) float xv[8];                                          \
                        const float* xp = xz + (u64)t * ldx + ci;                           \
                        float4 a = *(const float4*)xp, bb = *(const float4*)(xp + 4);       \
                        xv[0] = a.x; xv[1] = a.y; xv[2] = a.z; xv[3] = a.w;                 \
                        xv[4] = bb.x; xv[5] = bb.y; xv[6] = bb.z; xv[7] = bb.w;             \
                        if (x2z) {                                                          \
                            const float* up = x2z + (u64)t * ldx + ci;                      \
                            _Pragma("unroll") for (int j = 0; j < 8; j++)                   \
                                xv[j] = silu_f(xv[j]) * up[j];                              \
                        }                                                                   \
                        float sx = 0.f;                                                     \
                        _Pragma("unroll") for (int j = 0; j < 8; j++) sx += xv[j];          \
                        _Pragma("unroll") for (int r = 0; r < MV1_R; r++)                   \
                            acc[r][t] += apply8_##T(wr[r], xv, sx);                         \
                    }                                                                       \
                }                                                                           \
            }                                                                               \
            __syncwarp();                                                                   \
        }                                                                                   \
        _Pragma("unroll") for (int t = 0; t < MVN_NT; t++) {                                \
            _Pragma("unroll") for (int r = 0; r < MV1_R; r++) {                             \
                float s = warp_sum(acc[r][t]);                                              \
                if (lane == 0 && r < nr && t < nt) yz[(u64)t * ldy + row0 + r] = s;         \
            }                                                                               \
        }                                                                                   \
    }
REDLITE_DQ_TYPES(DEF_MATVECN)

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
// 32), their scales at xd + t·(n_in / 32)), up to MVN_NT tokens per staged
// row (grid.y tiles of MVN_NT). Slot z (blockIdx.z) multiplies W +
// z·w_zstride into y + z·y_zstride (two matrices of one shape reading one
// input). Any grid.x.
#ifndef MQN_MINB
#define MQN_MINB 3
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
        int t0 = blockIdx.y * MVN_NT;                                                       \
        int nt = min(MVN_NT, n_tok - t0);                                                   \
        const u64 xs = (u64)(n_in / 32);                                                    \
        float* yz = y + (u64)z * y_zstride + (u64)t0 * ldy;                                 \
        const MqGeo geo = mq_geo(n_in, row_bytes, QK_##T, BS_##T, 1);                       \
        mq_stream_##T<MVN_NT, 1, 1>(geo, mat, r0, r1, xu + (u64)t0 * xs,                    \
                                    xd + (u64)t0 * xs, xs, nt, smem[warp], lane, 0, 0, 0,   \
                                    MQ_TAB_ON(T) ? qtab : nullptr,                          \
                                    [&](int r, const float* a, const float*) {              \
                                        _Pragma("unroll") for (int t = 0; t < MVN_NT; t++)  \
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

// ---------------------------------------------------------------------------
// Prefill products on the tensor cores, for the types whose prep8_T gives
// small integers q (|q| <= 128, exact in bf16) and per-chunk multipliers:
// Σ_j w_j·x_j = A·Σ q_j·x_j + B·Σ x_j over each 8-value chunk (tcq_T below
// turns prep8_T's (a, b) into (A, B)). Each input x is split into two bf16
// halves, hi = bf16(x) and lo = bf16(x − hi) (x − hi is exact in f32), so
// hi + lo keeps 16 of x's 24 significant bits (relative error <= 2^-17, far
// below the 2^-8 of 8-bit activations); the products q·hi and q·lo are exact
// and the tensor cores sum them in f32. Per group of chunks that share A:
// D = Σ (Q·Xhi + Q·Xlo) (mma.m16n8k16 bf16 over chunk pairs), then
// acc += A·D + B·Σx per (row, token).
//
// A block of 128 threads (WR × WT warps) computes BR = WR·16·MT rows × BT =
// WT·8·NT tokens; per step of 32 inputs it stages the weight tile's q as
// bf16 pairs with A and B, and the input tile's hi and lo pairs with the
// chunk sums, in shared memory (rows padded to 20 words: the fragment loads
// of a warp hit 32 different banks). n_in must be a multiple of 256.
// tab: the type's lookup table in shared memory (TCT_T bytes; IQ1_M only).
#define TCQ_PLAIN(T)                                                                        \
    __device__ __forceinline__ void tcq_##T(const uint8_t* blk, int c, W8& w,               \
                                            const uint64_t* tab) {                          \
        prep8_##T(blk, c, w);                                                               \
        w.b = 0.f;                                                                          \
    }
TCQ_PLAIN(Q8_0)
TCQ_PLAIN(Q6_K)
TCQ_PLAIN(IQ2_XS)
__device__ __forceinline__ void tcq_Q4_K(const uint8_t* blk, int c, W8& w, const uint64_t* tab) {
    prep8_Q4_K(blk, c, w);
    w.b = -w.b;
}
__device__ __forceinline__ void tcq_Q5_K(const uint8_t* blk, int c, W8& w, const uint64_t* tab) {
    prep8_Q5_K(blk, c, w);
    w.b = -w.b;
}
__device__ __forceinline__ void tcq_IQ1_M(const uint8_t* blk, int c, W8& w,
                                          const uint64_t* tab) {
    prep8_IQ1_M_g(blk, c, w, tab);
    w.b = w.a * w.b;
}
// Per type: chunks that share A (TCG_T: 2 or 4, the products of a group
// are summed before one scaling), and how B goes (TCB_T: 0 none, 1 one per
// group, 2 one per chunk).
#define TCG_Q8_0 4
#define TCB_Q8_0 0
#define TCG_Q4_K 4
#define TCB_Q4_K 1
#define TCG_Q5_K 4
#define TCB_Q5_K 1
#define TCG_Q6_K 2
#define TCB_Q6_K 0
#define TCG_IQ1_M 2
#define TCB_IQ1_M 2
#define TCG_IQ2_XS 2
// Bytes of the type's lookup table copied into shared memory (IQ1_M's grid:
// its random 8-byte lookups are cheaper there than through L1).
#define TCT_Q8_0 0
#define TCT_Q4_K 0
#define TCT_Q5_K 0
#define TCT_Q6_K 0
#define TCT_IQ1_M 16384
#define TCT_IQ2_XS 0
// Copy the TCT bytes of the type's table to shared memory at d.
template <int TT>
__device__ __forceinline__ void tc_load_table(uint64_t* d) {
    if (TT == 16384)
        for (int i = threadIdx.x; i < 2048; i += blockDim.x) d[i] = rl_iq1s_grid[i];
}
#define TCB_IQ2_XS 0
// The types with a tensor-core prefill kernel (mmt_T, mmgt_T, mmgw_T).
#define REDLITE_TC_TYPES(X) X(Q8_0) X(Q4_K) X(Q5_K) X(Q6_K) X(IQ1_M) X(IQ2_XS)

// Two floats as a bf16 pair (lo in the low half), rounded to nearest.
__device__ __forceinline__ uint32_t rl_bf2(float lo, float hi) {
    uint32_t r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
// d = A(16×16, row) · B(16×8, col) + c in f32 (a: rows g and g+8 at columns
// 2·tig, +1, then the same rows 8 columns on; b: rows 2·tig, +1, then 8 on).
__device__ __forceinline__ void rl_mma_bf16_k16(float d[4], const uint32_t a[4],
                                                const uint32_t b[2], const float c[4]) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%10,%11,%12,%13};\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]),
          "f"(c[2]), "f"(c[3]));
}

#define TC_PAD 20
template <int WR, int WT, int MT, int NT>
struct TcTile {
    static constexpr int BR = WR * 16 * MT, BT = WT * 8 * NT;
    uint32_t wq[BR][TC_PAD];  // q pairs of the rows' 32 inputs
    float wa[4][BR], wb[4][BR];
    uint32_t xh[BT][TC_PAD], xl[BT][TC_PAD];  // hi and lo pairs of the tokens' inputs
    float xs[4][BT];                          // the tokens' chunk sums
    const float* xr[BT];                      // each token's input row (null: none)
    float* yr[BT];                            // each token's output row
};
// The weights come in steps of 256 inputs (RB bytes of a row: one block of
// the 256-value types, 8 of Q8_0), copied with cp.async into one of two
// shared buffers while the tensor cores work on the other; a row's bytes
// sit in a window of SW bytes that starts on the 16-byte boundary below them
// (so a block keeps its alignment; rows may end up to 15 bytes past their
// last block, within the 64 bytes of padding behind every weight buffer).
#define TC_RB(QK, BS) ((BS) * (256 / (QK)))
#define TC_SW(QK, BS) (16 * ((TC_RB(QK, BS) + 30) / 16))
// Dynamic shared memory of a launch: the tile, then the two weight buffers
// (the host's `tc_smem_bytes` computes the same).
#define TC_SMEM(TILE, QK, BS, TT) (sizeof(TILE) + 2 * TILE::BR * TC_SW(QK, BS) + (TT))

// One tile: rows r0 .. r0 + BR of the matrix at Wb against the tokens whose
// rows t.xr / t.yr hold (set, and synchronised, by the caller), the first
// nv of them real (the tensor cores skip 8-token groups past them); raw: the
// two weight buffers. n_in must be a multiple of 256.
template <int WR, int WT, int MT, int NT, void (*TCQ)(const uint8_t*, int, W8&, const uint64_t*),
          int QK, int BS,
          int G, int BM>
__device__ __forceinline__ void mmt_tile(TcTile<WR, WT, MT, NT>& t, uint8_t* raw,
                                         const uint8_t* Wb, u64 row_bytes, int n_in, int n_out,
                                         int r0, int nv, const uint64_t* tab) {
    constexpr int BR = WR * 16 * MT, BT = WT * 8 * NT, NTH = WR * WT * 32;
    constexpr int RB = TC_RB(QK, BS), SW = TC_SW(QK, BS), NP = SW / 16, CPB = QK / 8;
    constexpr int XI = (BT * 4 + NTH - 1) / NTH;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, tig = lane & 3;
    const int wr0 = (warp / WT) * 16 * MT, wt0 = (warp % WT) * 8 * NT;
    const int nraw = n_in / 256;
    float acc[MT][NT][4];
#pragma unroll
    for (int m = 0; m < MT; m++)
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int i = 0; i < 4; i++) acc[m][n][i] = 0.f;
    // Where row `row`'s bytes of weight step rr start.
    auto wsrc = [&](int row, int rr) -> const uint8_t* {
        return Wb + (u64)min(r0 + row, n_out - 1) * row_bytes + (u64)rr * RB;
    };
    auto issue = [&](int rr) {
        uint8_t* dst = raw + (rr & 1) * BR * SW;
        for (int it = tid; it < BR * NP; it += NTH) {
            const int row = it / NP, pc = it - row * NP;
            const u64 p = (u64)wsrc(row, rr);
            // Only the pieces that hold the row's bytes (at most 15 past them).
            if (16 * pc >= (int)(p & 15) + RB) continue;
            const uint4* src = (const uint4*)(p & ~(u64)15) + pc;
            const unsigned sa = (unsigned)__cvta_generic_to_shared(dst + row * SW + 16 * pc);
            asm volatile(RL_CP_OP " [%0], [%1], 16;\n" ::"r"(sa), "l"(src));
        }
        asm volatile("cp.async.commit_group;\n" ::);
    };
    float4 xa[XI], xb[XI];
    auto load_x = [&](int k0) {
#pragma unroll
        for (int j = 0; j < XI; j++) {
            const int it = tid + j * NTH;
            const float* xp = it < BT * 4 ? t.xr[it >> 2] : nullptr;
            if (xp) {
                xa[j] = *(const float4*)(xp + k0 + 8 * (it & 3));
                xb[j] = *(const float4*)(xp + k0 + 8 * (it & 3) + 4);
            } else {
                xa[j] = xb[j] = make_float4(0.f, 0.f, 0.f, 0.f);
            }
        }
    };
    issue(0);
    load_x(0);
    for (int rr = 0; rr < nraw; rr++) {
        if (rr + 1 < nraw) {
            issue(rr + 1);
            asm volatile("cp.async.wait_group 1;\n" ::);
        } else {
            asm volatile("cp.async.wait_group 0;\n" ::);
        }
        __syncthreads();
        const uint8_t* buf = raw + (rr & 1) * BR * SW;
        for (int s = 0; s < 8; s++) {
            const int k0 = 256 * rr + 32 * s;
            for (int it = tid; it < BR * 4; it += NTH) {
                const int row = it >> 2, c = it & 3;
                const int shift = (int)((u64)wsrc(row, rr) & 15);
                const int ch = 4 * s + c;
                const int b = ch / CPB;
                W8 w;
                TCQ(buf + row * SW + shift + b * BS, ch - b * CPB, w, tab);
                uint4 p;
                p.x = rl_bf2(w.q[0], w.q[1]);
                p.y = rl_bf2(w.q[2], w.q[3]);
                p.z = rl_bf2(w.q[4], w.q[5]);
                p.w = rl_bf2(w.q[6], w.q[7]);
                *(uint4*)&t.wq[row][4 * c] = p;
                t.wa[c][row] = w.a;
                t.wb[c][row] = w.b;
            }
#pragma unroll
            for (int j = 0; j < XI; j++) {
                const int it = tid + j * NTH;
                if (it < BT * 4) {
                    const int tok = it >> 2, c = it & 3;
                    const float v[8] = {xa[j].x, xa[j].y, xa[j].z, xa[j].w,
                                        xb[j].x, xb[j].y, xb[j].z, xb[j].w};
                    float sum = 0.f;
                    uint32_t hp[4], lp[4];
#pragma unroll
                    for (int q = 0; q < 4; q++) {
                        sum += v[2 * q];
                        sum += v[2 * q + 1];
                        hp[q] = rl_bf2(v[2 * q], v[2 * q + 1]);
                        const float h0 = __uint_as_float(hp[q] << 16);
                        const float h1 = __uint_as_float(hp[q] & 0xffff0000u);
                        lp[q] = rl_bf2(v[2 * q] - h0, v[2 * q + 1] - h1);
                    }
                    *(uint4*)&t.xh[tok][4 * c] = make_uint4(hp[0], hp[1], hp[2], hp[3]);
                    *(uint4*)&t.xl[tok][4 * c] = make_uint4(lp[0], lp[1], lp[2], lp[3]);
                    t.xs[c][tok] = sum;
                }
            }
            if (k0 + 32 < n_in) load_x(k0 + 32);
            __syncthreads();
            // Groups of G chunks share A (and, BM = 1, B): their products
            // are summed by the tensor cores (m16n8k16 over chunk pairs)
            // before one scaling.
#pragma unroll
            for (int c0 = 0; c0 < 4; c0 += G) {
                uint32_t af[MT][G / 2][4];
                float am[MT][2], bm[MT][BM == 2 ? G : 1][2];
#pragma unroll
                for (int m = 0; m < MT; m++) {
                    const int r = wr0 + 16 * m + g;
#pragma unroll
                    for (int p = 0; p < G / 2; p++) {
                        const int c = c0 + 2 * p;
                        af[m][p][0] = t.wq[r][4 * c + tig];
                        af[m][p][1] = t.wq[r + 8][4 * c + tig];
                        af[m][p][2] = t.wq[r][4 * c + 4 + tig];
                        af[m][p][3] = t.wq[r + 8][4 * c + 4 + tig];
                    }
                    am[m][0] = t.wa[c0][r];
                    am[m][1] = t.wa[c0][r + 8];
#pragma unroll
                    for (int cc = 0; cc < (BM == 2 ? G : 1); cc++) {
                        bm[m][cc][0] = BM ? t.wb[c0 + cc][r] : 0.f;
                        bm[m][cc][1] = BM ? t.wb[c0 + cc][r + 8] : 0.f;
                    }
                }
#pragma unroll
                for (int n = 0; n < NT; n++) {
                    const int tk = wt0 + 8 * n;
                    if (tk >= nv) break;
                    uint32_t bh[G / 2][2], bl[G / 2][2];
#pragma unroll
                    for (int p = 0; p < G / 2; p++) {
                        const int c = c0 + 2 * p;
                        bh[p][0] = t.xh[tk + g][4 * c + tig];
                        bh[p][1] = t.xh[tk + g][4 * c + 4 + tig];
                        bl[p][0] = t.xl[tk + g][4 * c + tig];
                        bl[p][1] = t.xl[tk + g][4 * c + 4 + tig];
                    }
                    float2 sx[BM == 2 ? G : 1];
                    if (BM == 1) {
                        sx[0] = make_float2(0.f, 0.f);
#pragma unroll
                        for (int cc = 0; cc < G; cc++) {
                            const float2 v = *(const float2*)&t.xs[c0 + cc][tk + 2 * tig];
                            sx[0].x += v.x;
                            sx[0].y += v.y;
                        }
                    } else if (BM == 2) {
#pragma unroll
                        for (int cc = 0; cc < G; cc++)
                            sx[cc] = *(const float2*)&t.xs[c0 + cc][tk + 2 * tig];
                    }
#pragma unroll
                    for (int m = 0; m < MT; m++) {
                        float d[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
                        for (int p = 0; p < G / 2; p++) {
                            rl_mma_bf16_k16(d, af[m][p], bh[p], d);
                            rl_mma_bf16_k16(d, af[m][p], bl[p], d);
                        }
                        float* ac = acc[m][n];
                        if (BM) {
#pragma unroll
                            for (int cc = 0; cc < (BM == 2 ? G : 1); cc++) {
                                ac[0] = fmaf(bm[m][cc][0], sx[cc].x, ac[0]);
                                ac[1] = fmaf(bm[m][cc][0], sx[cc].y, ac[1]);
                                ac[2] = fmaf(bm[m][cc][1], sx[cc].x, ac[2]);
                                ac[3] = fmaf(bm[m][cc][1], sx[cc].y, ac[3]);
                            }
                        }
                        ac[0] = fmaf(am[m][0], d[0], ac[0]);
                        ac[1] = fmaf(am[m][0], d[1], ac[1]);
                        ac[2] = fmaf(am[m][1], d[2], ac[2]);
                        ac[3] = fmaf(am[m][1], d[3], ac[3]);
                    }
                }
            }
            __syncthreads();
        }
    }
#pragma unroll
    for (int m = 0; m < MT; m++)
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int row = r0 + wr0 + 16 * m + g + 8 * (i >> 1);
                float* yp = t.yr[wt0 + 8 * n + 2 * tig + (i & 1)];
                if (row < n_out && yp) yp[row] = acc[m][n][i];
            }
}

// The launch must give the kernel TC_SMEM bytes of dynamic shared memory
// (the host computes the same sum); with less it stops at once.
__device__ __forceinline__ void tc_check_smem(unsigned need) {
    unsigned have;
    asm("mov.u32 %0, %%dynamic_smem_size;\n" : "=r"(have));
    if (have < need) __trap();
}

// A tensor-core kernel's start: its dynamic shared memory holds the tile,
// then the two weight buffers, then the type's lookup table (TT bytes,
// loaded here); returns the table.
template <class Tile, int QK, int BS, int TT>
__device__ __forceinline__ uint64_t* tc_enter(uint8_t* smem) {
    static_assert(sizeof(Tile) % 16 == 0, "weight buffers 16-byte aligned");
    tc_check_smem(TC_SMEM(Tile, QK, BS, TT));
    uint64_t* tab = (uint64_t*)(smem + sizeof(Tile) + 2 * Tile::BR * TC_SW(QK, BS));
    tc_load_table<TT>(tab);
    return tab;
}

// Dense: as mm_T (same arguments), a block of 64 rows × 64 tokens.
#define MMT_D 2, 2, 2, 4
// Grouped experts: as mmg_T, a block of 64 rows × 16 of the expert's slots
// at a time (mmgt_T), or × 64 (mmgw_T: for passes with many slots per
// expert, each expert's weights unpacked once per 64 slots instead of per 16;
// warps past the last slot skip the tensor-core work).
#define MMT_G 4, 1, 1, 2
#define MMT_W 2, 2, 2, 4
#define DEF_MMT(T)                                                                          \
    extern "C" __global__ void __launch_bounds__(128)                                       \
        mmt_##T(const uint8_t* __restrict__ Wb, u64 row_bytes, int n_in, int n_out,         \
                const float* __restrict__ x, int ldx, float* __restrict__ y, int ldy,       \
                int n_tok) {                                                                \
        typedef TcTile<MMT_D> Tile;                                                         \
        extern __shared__ __align__(16) uint8_t tc_smem[];                                  \
        uint64_t* tab = tc_enter<Tile, QK_##T, BS_##T, TCT_##T>(tc_smem);                   \
        Tile& t = *(Tile*)tc_smem;                                                          \
        RL_PDL_ENTER();                                                                     \
        const int t0 = blockIdx.y * Tile::BT;                                               \
        for (int i = threadIdx.x; i < Tile::BT; i += blockDim.x) {                          \
            const bool ok = t0 + i < n_tok;                                                 \
            t.xr[i] = ok ? x + (u64)(t0 + i) * ldx : nullptr;                               \
            t.yr[i] = ok ? y + (u64)(t0 + i) * ldy : nullptr;                               \
        }                                                                                   \
        __syncthreads();                                                                    \
        mmt_tile<MMT_D, tcq_##T, QK_##T, BS_##T, TCG_##T, TCB_##T>(                         \
            t, tc_smem + sizeof(Tile), Wb, row_bytes, n_in, n_out, blockIdx.x * Tile::BR,   \
            min(n_tok - t0, Tile::BT), tab);                                                \
    }                                                                                       \
    DEF_MMGT(mmgt, T, MMT_G)                                                                \
    DEF_MMGT(mmgw, T, MMT_W)
#define DEF_MMGT(NAME, T, CFG)                                                              \
    extern "C" __global__ void __launch_bounds__(128)                                       \
        NAME##_##T(const uint8_t* __restrict__ W, u64 row_bytes, int n_in, int n_out,         \
                 u64 w_zstride, const float* __restrict__ x, int x_div, u64 x_zstride,      \
                 float* __restrict__ y, u64 y_zstride, const int* __restrict__ counts,      \
                 const int* __restrict__ offsets, const int* __restrict__ perm) {           \
        typedef TcTile<CFG> Tile;                                                           \
        extern __shared__ __align__(16) uint8_t tc_smem[];                                  \
        uint64_t* tab = tc_enter<Tile, QK_##T, BS_##T, TCT_##T>(tc_smem);                   \
        Tile& t = *(Tile*)tc_smem;                                                          \
        RL_PDL_ENTER();                                                                     \
        const int e = blockIdx.z;                                                           \
        const int cnt = counts[e];                                                          \
        if (cnt == 0) return;                                                               \
        const int off = offsets[e];                                                         \
        const uint8_t* Wb = mat_at(W, (u64)e, w_zstride);                                  \
        for (int t0 = 0; t0 < cnt; t0 += Tile::BT) {                                        \
            if (t0) __syncthreads(); /* the last tile's stores read t.yr */                 \
            for (int i = threadIdx.x; i < Tile::BT; i += blockDim.x) {                      \
                const bool ok = t0 + i < cnt;                                               \
                const int q = ok ? perm[off + t0 + i] : 0;                                  \
                t.xr[i] = ok ? x + (u64)(q / x_div) * x_zstride : nullptr;                  \
                t.yr[i] = ok ? y + (u64)q * y_zstride : nullptr;                            \
            }                                                                               \
            __syncthreads();                                                                \
            mmt_tile<CFG, tcq_##T, QK_##T, BS_##T, TCG_##T, TCB_##T>(                       \
                t, tc_smem + sizeof(Tile), Wb, row_bytes, n_in, n_out,                      \
                blockIdx.x * Tile::BR, min(cnt - t0, Tile::BT), tab);                       \
        }                                                                                   \
    }
REDLITE_TC_TYPES(DEF_MMT)

// ---------------------------------------------------------------------------
// Prefill products on the tensor cores, second form (mmx_T dense, mmgx_T
// grouped; small grids, short grouped rows and devices short of shared
// memory keep mmt_T / mmgt_T / mmgw_T above). The same
// numbers as those (q exact in bf16, x = hi + lo, D = Σ Q·Xhi + Q·Xlo in f32,
// acc += A·D + B·Σx), organised for more tensor-core work per instruction
// and per barrier:
// - tc_split turns the product's inputs into bf16 hi and lo rows and f32
//   sums over 32 values once, in device memory (4.125 bytes a value, about
//   what the f32 inputs take), instead of in every row-tile block;
// - a block of 256 threads (8 warps) works on BR = 128 or 256 rows × BT =
//   128 or 64 tokens in steps of 64 inputs, one barrier a step: while the
//   tensor cores take step s from shared buffers (the weights' q as bf16,
//   the inputs' hi and lo, fragments read with ldmatrix), the threads
//   unpack step s + 1's weights into the other weight buffer, interleaved
//   with the products, and cp.async brings step s + 2's inputs (three input
//   buffers); the raw weights come per 256 inputs, two buffers deep;
// - the per-type unpackers (txd_T) give 8 q as 4 bf16 pairs with the
//   group's A (and B); IQ1_M folds its 3-bit scale and its delta into q
//   (q = (2s + 1)·(8·grid ± 1), |q| <= 135, exact in bf16) so that A = d/8
//   holds for the whole 256-value block and B is gone, and IQ1_M / IQ2_XS
//   read their grids as bf16 from shared memory.
// Rows of staged tiles: 64 inputs + 8 of padding (144 bytes: the eight row
// addresses of an ldmatrix phase fall in distinct bank groups).
#define TX_KS 64
#define TX_LD 72

// The inputs' split (rows × n_in, ldx apart): hi and lo bf16 rows of n_in
// values, and per 32 values their f32 sum (((s0 + s1) + s2) + s3 of the
// chunks' sums, each from zero in input order, as mmt_tile sums them).
// One thread per 8 values; n_in must be a multiple of 256.
extern "C" __global__ void __launch_bounds__(256)
    tc_split(const float* __restrict__ x, int ldx, int n_in, int rows,
             uint32_t* __restrict__ hi, uint32_t* __restrict__ lo, float* __restrict__ sums) {
    RL_PDL_ENTER();
    const int per = n_in / 8;
    const u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    const int r = (int)(i / (u64)per), c = (int)(i - (u64)r * per);
    const bool ok = r < rows;
    float v[8];
    if (ok) {
        const float4 a = *(const float4*)(x + (u64)r * ldx + 8 * c);
        const float4 b = *(const float4*)(x + (u64)r * ldx + 8 * c + 4);
        v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
        v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
    } else {
#pragma unroll
        for (int j = 0; j < 8; j++) v[j] = 0.f;
    }
    float sum = 0.f;
    uint32_t hp[4], lp[4];
#pragma unroll
    for (int q = 0; q < 4; q++) {
        sum += v[2 * q];
        sum += v[2 * q + 1];
        hp[q] = rl_bf2(v[2 * q], v[2 * q + 1]);
        const float h0 = __uint_as_float(hp[q] << 16);
        const float h1 = __uint_as_float(hp[q] & 0xffff0000u);
        lp[q] = rl_bf2(v[2 * q] - h0, v[2 * q + 1] - h1);
    }
    // Every warp is whole (rows · per is a multiple of 32), in range or not.
    const float s1 = __shfl_down_sync(FULL, sum, 1);
    const float s2 = __shfl_down_sync(FULL, sum, 2);
    const float s3 = __shfl_down_sync(FULL, sum, 3);
    if (!ok) return;
    const u64 o = (u64)r * (n_in / 2) + 4 * c;
    *(uint4*)(hi + o) = make_uint4(hp[0], hp[1], hp[2], hp[3]);
    *(uint4*)(lo + o) = make_uint4(lp[0], lp[1], lp[2], lp[3]);
    if ((c & 3) == 0) sums[(u64)r * (n_in / 32) + c / 4] = ((sum + s1) + s2) + s3;
}

__device__ __forceinline__ void rl_ldsm4(uint32_t r[4], unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
__device__ __forceinline__ uint32_t rl_fma_bf2(uint32_t a, uint32_t b, uint32_t c) {
    uint32_t d;
    asm("fma.rn.bf16x2 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}
__device__ __forceinline__ uint4 rl_pack_q(const W8& w) {
    return make_uint4(rl_bf2(w.q[0], w.q[1]), rl_bf2(w.q[2], w.q[3]), rl_bf2(w.q[4], w.q[5]),
                      rl_bf2(w.q[6], w.q[7]));
}

// Unpackers: dec(row, c, p, a, b, tab) gives chunk c (0 .. 31) of the 256
// inputs whose bytes start at row: q as bf16 pairs and the multipliers
// (Σ w·x = a·Σ q·x + b·Σx), the same for every chunk of a group of GA
// inputs (B: BM = 1, once per 32); TT bytes of table in shared memory,
// filled by load_tab (every thread of the block takes part).
#define TXD_PLAIN(T, GAV)                                                                   \
    struct txd_##T {                                                                        \
        static constexpr int GA = GAV, BM = TCB_##T ? 1 : 0, TT = 0;                        \
        static __device__ __forceinline__ void load_tab(uint8_t*) {}                        \
        static __device__ __forceinline__ void dec(const uint8_t* row, int c, uint4& p,     \
                                                   float& a, float& b, const uint8_t*) {    \
            const int bk = c / (QK_##T / 8);                                                \
            W8 w;                                                                           \
            tcq_##T(row + bk * BS_##T, c - bk * (QK_##T / 8), w, nullptr);                  \
            p = rl_pack_q(w);                                                               \
            a = w.a;                                                                        \
            b = w.b;                                                                        \
        }                                                                                   \
    };
TXD_PLAIN(Q8_0, 32)
TXD_PLAIN(Q4_K, 32)
TXD_PLAIN(Q5_K, 32)
TXD_PLAIN(Q6_K, 16)
// IQ1_M: w = d·(2s + 1)·(grid + δ), δ = ±1/8, as (d/8)·q with q = (2s+1)·(8·grid ± 1)
// (one fused bf16 multiply-add per pair: products and sums are small
// integers, exact); the grid as bf16 (2048 × 16 bytes).
struct txd_IQ1_M {
    static constexpr int GA = 64, BM = 0, TT = 32768;
    static __device__ __forceinline__ void load_tab(uint8_t* t) {
        for (int i = threadIdx.x; i < 2048; i += blockDim.x) {
            const uint64_t g = rl_iq1s_grid[i];
            uint32_t p[4];
#pragma unroll
            for (int j = 0; j < 4; j++)
                p[j] = rl_bf2((float)(int8_t)(g >> (16 * j)), (float)(int8_t)(g >> (16 * j + 8)));
            ((uint4*)t)[i] = make_uint4(p[0], p[1], p[2], p[3]);
        }
    }
    static __device__ __forceinline__ void dec(const uint8_t* blk, int c, uint4& p, float& a,
                                               float& b, const uint8_t* t) {
        const uint32_t s01 = rl_w32(blk + 48), s23 = rl_w32(blk + 52);
        const uint32_t s0 = s01 & 0xffffu, s1 = s01 >> 16, s2 = s23 & 0xffffu, s3 = s23 >> 16;
        a = rl_f16_to_f32(rl_iq1m_dbits(s0, s1, s2, s3)) * 0.125f;
        b = 0.f;
        const int ib = c >> 2;
        const int l = c & 3;
        const uint32_t sw = (ib >> 1) == 0 ? s0 : (ib >> 1) == 1 ? s1 : (ib >> 1) == 2 ? s2 : s3;
        const float m = (float)(2 * ((sw >> (6 * (ib & 1) + 3 * (l >> 1))) & 7) + 1);
        const uint32_t nib = (uint32_t)blk[32 + (c >> 1)] >> (4 * (c & 1));
        const uint32_t idx = (uint32_t)blk[c] | ((nib & 7) << 8);
        const uint32_t m8 = rl_bf2(8.f * m, 8.f * m);
        const float dl = (nib & 8) ? -m : m;
        const uint32_t dd = rl_bf2(dl, dl);
        const uint4 g = ((const uint4*)t)[idx];
        p = make_uint4(rl_fma_bf2(g.x, m8, dd), rl_fma_bf2(g.y, m8, dd), rl_fma_bf2(g.z, m8, dd),
                       rl_fma_bf2(g.w, m8, dd));
    }
};
// IQ2_XS: the grid as bf16 (512 × 16 bytes), then the 128 sign patterns as
// masks of the bf16 sign bits (128 × 16 bytes).
struct txd_IQ2_XS {
    static constexpr int GA = 16, BM = 0, TT = 8192 + 2048;
    static __device__ __forceinline__ void load_tab(uint8_t* t) {
        for (int i = threadIdx.x; i < 512 + 128; i += blockDim.x) {
            uint32_t p[4];
            if (i < 512) {
                const uint64_t g = rl_iq2xs_grid[i];
#pragma unroll
                for (int j = 0; j < 4; j++)
                    p[j] = rl_bf2((float)(uint32_t)((g >> (16 * j)) & 255),
                                  (float)(uint32_t)((g >> (16 * j + 8)) & 255));
            } else {
                const uint32_t s = rl_ksigns_iq2xs[i - 512];
#pragma unroll
                for (int j = 0; j < 4; j++)
                    p[j] = (((s >> (2 * j)) & 1u) << 15) | (((s >> (2 * j + 1)) & 1u) << 31);
            }
            ((uint4*)t)[i] = make_uint4(p[0], p[1], p[2], p[3]);
        }
    }
    static __device__ __forceinline__ void dec(const uint8_t* blk, int c, uint4& p, float& a,
                                               float& b, const uint8_t* t) {
        const float d = rl_ld_f16(blk);
        const int ib = c >> 2;
        const int l = c & 3;
        const uint32_t sc = (blk[66 + ib] >> (4 * (l >> 1))) & 15;
        a = d * (0.5f + (float)sc) * 0.25f;
        b = 0.f;
        const uint32_t q = rl_ld_u16(blk + 2 + 2 * c);
        const uint4 g = ((const uint4*)t)[q & 511];
        const uint4 s = ((const uint4*)t)[512 + (q >> 9)];
        p = make_uint4(g.x ^ s.x, g.y ^ s.y, g.z ^ s.z, g.w ^ s.w);
    }
};

// Shared memory of a block (BR rows × BT tokens, type T): byte offsets of
// its parts, the end being the launch's dynamic shared memory (the host's
// `tcx_smem_bytes` computes the same).
template <int BR, int BT, int GA, int BM, int SW, int TT>
struct TxMem {
    static constexpr int WQ = 0;                                // [2][BR][TX_LD] bf16
    static constexpr int XH = WQ + 2 * BR * TX_LD * 2;          // [3][BT][TX_LD] bf16
    static constexpr int XL = XH + 3 * BT * TX_LD * 2;          // [3][BT][TX_LD] bf16
    static constexpr int WA = XL + 3 * BT * TX_LD * 2;          // [2][KS/GA][BR] f32
    static constexpr int WB = WA + 2 * (TX_KS / GA) * BR * 4;   // [2][2][BR] f32 (BM)
    static constexpr int XS = WB + (BM ? 2 * 2 * BR * 4 : 0);   // [3][2][BT] f32 (BM)
    static constexpr int YR = XS + (BM ? 3 * 2 * BT * 4 : 0);   // [BT] output rows
    static constexpr int XR = YR + BT * 8;                      // [BT] split rows (-1: none)
    static constexpr int RAW = (XR + BT * 4 + 15) / 16 * 16;    // [2][BR][SW] raw weights
    static constexpr int TAB = RAW + 2 * BR * SW;               // the unpacker's table
    static constexpr int END = TAB + TT;
};

// One tile: rows r0 .. r0 + BR of the matrix at Wb against the tokens
// whose split rows and output rows the caller has put in the XR and YR
// parts of smem (and synchronised), the first nv of them real; hi, lo,
// sums: the split (n_in values a row). n_in must be a multiple of 256.
template <int WR, int WT, int MT, int NT, class D, int QK, int BS>
__device__ __forceinline__ void mmx_tile(uint8_t* smem, const uint8_t* Wb, u64 row_bytes,
                                         int n_in, int n_out, int r0, int nv,
                                         const uint16_t* __restrict__ hi,
                                         const uint16_t* __restrict__ lo,
                                         const float* __restrict__ sums) {
    constexpr int BR = WR * 16 * MT, BT = WT * 8 * NT, NTH = WR * WT * 32;
    constexpr int RB = TC_RB(QK, BS), SW = TC_SW(QK, BS), NP = SW / 16;
    constexpr int GA = D::GA, BM = D::BM, NG = TX_KS / GA, KG = GA / 16;
    typedef TxMem<BR, BT, GA, BM, SW, D::TT> L;
    constexpr int TPR = NTH / BR, CPT = 8 / TPR;  // unpacking: threads a row, chunks a thread
    static_assert(NTH % BR == 0 && CPT % 4 == 0, "unpacking layout");
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, tig = lane & 3;
    const int wr0 = (warp / WT) * 16 * MT, wt0 = (warp % WT) * 8 * NT;
    const int nstep = n_in / TX_KS;
    const unsigned sbase = (unsigned)__cvta_generic_to_shared(smem);
    const int* xrow = (const int*)(smem + L::XR);
    float* const* yr = (float* const*)(smem + L::YR);
    uint8_t* raw = smem + L::RAW;
    const uint8_t* tab = smem + L::TAB;
    // This thread's unpacking: row ur, chunks uc .. uc + CPT of each step.
    const int ur = tid / TPR, uc = (tid % TPR) * CPT;
    const uint8_t* urow = Wb + (u64)min(r0 + ur, n_out - 1) * row_bytes;

    auto issue_raw = [&](int rr) {
        uint8_t* dst = raw + (rr & 1) * BR * SW;
        for (int it = tid; it < BR * NP; it += NTH) {
            const int row = it / NP, pc = it - row * NP;
            const u64 p = (u64)(Wb + (u64)min(r0 + row, n_out - 1) * row_bytes + (u64)rr * RB);
            if (16 * pc >= (int)(p & 15) + RB) continue;
            const uint4* src = (const uint4*)(p & ~(u64)15) + pc;
            const unsigned sa = (unsigned)__cvta_generic_to_shared(dst + row * SW + 16 * pc);
            asm volatile(RL_CP_OP " [%0], [%1], 16;\n" ::"r"(sa), "l"(src));
        }
    };
    // Step s's inputs: per token 8 + 8 pieces of 16 bytes (hi, lo), and
    // (BM) its two 32-value sums.
    auto issue_x = [&](int s) {
        const int b = s % 3;
        for (int it = tid; it < BT * 16; it += NTH) {
            const int tok = it >> 4, pc = it & 15;
            const int xr = xrow[tok];
            if (xr < 0) continue;
            const uint16_t* src = (pc < 8 ? hi : lo) + (u64)xr * n_in + s * TX_KS + 8 * (pc & 7);
            const unsigned sa = sbase + (pc < 8 ? L::XH : L::XL) +
                                ((b * BT + tok) * TX_LD + 8 * (pc & 7)) * 2;
            asm volatile(RL_CP_OP " [%0], [%1], 16;\n" ::"r"(sa), "l"(src));
        }
        if (BM) {
            for (int it = tid; it < BT * 2; it += NTH) {
                const int tok = it >> 1, j = it & 1;
                const int xr = xrow[tok];
                if (xr < 0) continue;
                const float* src = sums + (u64)xr * (n_in / 32) + 2 * s + j;
                const unsigned sa = sbase + L::XS + ((b * 2 + j) * BT + tok) * 4;
                asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(sa), "l"(src));
            }
        }
    };
    // Unpack part kk (of 4) of step s's weights (from raw buffer (s / 4) & 1)
    // into buffer s & 1.
    auto unpack = [&](int s, int kk) {
        const int b = s & 1, rr = s >> 2;
        const u64 p = (u64)(urow + (u64)rr * RB);
        const uint8_t* src = raw + (rr & 1) * BR * SW + ur * SW + (int)(p & 15);
        uint8_t* wq = smem + L::WQ + ((b * BR + ur) * TX_LD) * 2;
        float* wa = (float*)(smem + L::WA) + b * NG * BR;
        float* wb = (float*)(smem + L::WB) + b * 2 * BR;
#pragma unroll
        for (int j = kk * CPT / 4; j < (kk + 1) * CPT / 4; j++) {
            const int cs = uc + j;            // chunk of the step (0 .. 7)
            const int c = 8 * (s & 3) + cs;   // chunk of the 256 inputs
            uint4 q;
            float a, bb;
            D::dec(src, c, q, a, bb, tab);
            *(uint4*)(wq + 16 * cs) = q;
            if ((8 * cs) % GA == 0) {
                wa[(8 * cs / GA) * BR + ur] = a;
                if (BM && (cs & 3) == 0) wb[(cs >> 2) * BR + ur] = bb;
            }
        }
    };

    float acc[MT][NT][4];
#pragma unroll
    for (int m = 0; m < MT; m++)
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int i = 0; i < 4; i++) acc[m][n][i] = 0.f;

    // Prologue: raw blocks 0 (and 1), steps 0 and 1's inputs; step 0 unpacked.
    issue_raw(0);
    if (nstep > 4) issue_raw(1);
    issue_x(0);
    if (nstep > 1) issue_x(1);
    asm volatile("cp.async.commit_group;\n" ::);
    asm volatile("cp.async.wait_group 0;\n" ::);
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < 4; kk++) unpack(0, kk);
    __syncthreads();
    // Step s: one commit group (step s + 2's inputs, and every fourth step
    // a raw block), waited for two steps on; the weights of step s + 1
    // unpacked a quarter before each quarter of step s's products (after
    // the last step into the unused buffer, from stale bytes: harmless, and
    // it keeps the step free of branches).
    for (int s = 0; s < nstep; s++) {
        const int b = s & 1, bx3 = s % 3;
        if (s + 2 < nstep) issue_x(s + 2);
        // Raw block rb + 1 once block rb - 1's last step is unpacked.
        if (((s + 1) & 3) == 0 && (s + 1) / 4 + 1 < nstep / 4) issue_raw((s + 1) / 4 + 1);
        asm volatile("cp.async.commit_group;\n" ::);
        // The tensor cores on step s.
        float d[MT][NT][4];
#pragma unroll
        for (int kk = 0; kk < 4; kk++) {
            unpack(s + 1, kk);
            if (kk % KG == 0) {
#pragma unroll
                for (int m = 0; m < MT; m++)
#pragma unroll
                    for (int n = 0; n < NT; n++)
#pragma unroll
                        for (int i = 0; i < 4; i++) d[m][n][i] = 0.f;
            }
            uint32_t af[MT][4];
#pragma unroll
            for (int m = 0; m < MT; m++)
                rl_ldsm4(af[m], sbase + L::WQ +
                                    ((b * BR + wr0 + 16 * m + (lane & 15)) * TX_LD + 16 * kk +
                                     8 * (lane >> 4)) * 2);
#pragma unroll
            for (int n = 0; n < NT; n++) {
                if (wt0 + 8 * n >= nv) break;
                uint32_t bx[4];  // hi k0-7, hi k8-15, lo k0-7, lo k8-15
                const int j = lane >> 3;
                rl_ldsm4(bx, sbase + (j < 2 ? L::XH : L::XL) +
                                 ((bx3 * BT + wt0 + 8 * n + (lane & 7)) * TX_LD + 16 * kk +
                                  8 * (j & 1)) * 2);
                const uint32_t bh[2] = {bx[0], bx[1]}, bl[2] = {bx[2], bx[3]};
#pragma unroll
                for (int m = 0; m < MT; m++) {
                    rl_mma_bf16_k16(d[m][n], af[m], bh, d[m][n]);
                    rl_mma_bf16_k16(d[m][n], af[m], bl, d[m][n]);
                }
            }
            if (kk % KG == KG - 1) {
                // acc += B·Σx, then A·D, for the group ending here.
                const int grp = kk / KG;
                const float* wa = (const float*)(smem + L::WA) + (b * NG + grp) * BR;
                const float* wb = (const float*)(smem + L::WB) + (b * 2 + grp) * BR;
                const float* xs = (const float*)(smem + L::XS) + (bx3 * 2 + grp) * BT;
#pragma unroll
                for (int m = 0; m < MT; m++) {
                    const int r = wr0 + 16 * m + g;
                    const float a0 = wa[r], a1 = wa[r + 8];
                    const float b0 = BM ? wb[r] : 0.f, b1 = BM ? wb[r + 8] : 0.f;
#pragma unroll
                    for (int n = 0; n < NT; n++) {
                        if (wt0 + 8 * n >= nv) break;
                        float* ac = acc[m][n];
                        if (BM) {
                            const float2 sx = *(const float2*)&xs[wt0 + 8 * n + 2 * tig];
                            ac[0] = fmaf(b0, sx.x, ac[0]);
                            ac[1] = fmaf(b0, sx.y, ac[1]);
                            ac[2] = fmaf(b1, sx.x, ac[2]);
                            ac[3] = fmaf(b1, sx.y, ac[3]);
                        }
                        ac[0] = fmaf(a0, d[m][n][0], ac[0]);
                        ac[1] = fmaf(a0, d[m][n][1], ac[1]);
                        ac[2] = fmaf(a1, d[m][n][2], ac[2]);
                        ac[3] = fmaf(a1, d[m][n][3], ac[3]);
                    }
                }
            }
        }
        asm volatile("cp.async.wait_group 1;\n" ::);
        __syncthreads();
    }
    asm volatile("cp.async.wait_group 0;\n" ::);
#pragma unroll
    for (int m = 0; m < MT; m++)
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int row = r0 + wr0 + 16 * m + g + 8 * (i >> 1);
                float* yp = yr[wt0 + 8 * n + 2 * tig + (i & 1)];
                if (row < n_out && yp) yp[row] = acc[m][n][i];
            }
}

// Dense (mmx_T): as mm_T, and the split of x (tc_split over the n_tok
// rows); a block of 128 rows × 128 tokens.
#define MMX_D 2, 4, 4, 4
// Grouped (mmgx_T): as mmg_T, and the split of the rows that the slots
// read (row q / x_div for slot q); a block of 256 rows × 64 of the expert's
// slots at a time, every warp on all of them (a warp's 32 rows × 64 slots).
#define MMX_G 8, 1, 2, 8
template <int WR, int WT, int MT, int NT, class D, int QK, int BS>
__device__ __forceinline__ uint8_t* tx_enter(uint8_t* smem) {
    constexpr int BR = WR * 16 * MT, BT = WT * 8 * NT;
    typedef TxMem<BR, BT, D::GA, D::BM, TC_SW(QK, BS), D::TT> L;
    tc_check_smem(L::END);
    D::load_tab(smem + L::TAB);
    return smem;
}
#define DEF_MMX(T)                                                                          \
    extern "C" __global__ void __launch_bounds__(256, 1)                                    \
        mmx_##T(const uint8_t* __restrict__ Wb, u64 row_bytes, int n_in, int n_out,         \
                const uint16_t* __restrict__ hi, const uint16_t* __restrict__ lo,           \
                const float* __restrict__ sums, float* __restrict__ y, int ldy, int n_tok) { \
        typedef TxMem<128, 128, txd_##T::GA, txd_##T::BM, TC_SW(QK_##T, BS_##T), txd_##T::TT> L; \
        extern __shared__ __align__(16) uint8_t tx_smem[];                                  \
        uint8_t* sm = tx_enter<MMX_D, txd_##T, QK_##T, BS_##T>(tx_smem);                    \
        RL_PDL_ENTER();                                                                     \
        const int t0 = blockIdx.y * 128;                                                    \
        for (int i = threadIdx.x; i < 128; i += blockDim.x) {                               \
            const bool ok = t0 + i < n_tok;                                                 \
            ((int*)(sm + L::XR))[i] = ok ? t0 + i : -1;                                     \
            ((float**)(sm + L::YR))[i] = ok ? y + (u64)(t0 + i) * ldy : nullptr;            \
        }                                                                                   \
        __syncthreads();                                                                    \
        mmx_tile<MMX_D, txd_##T, QK_##T, BS_##T>(sm, Wb, row_bytes, n_in, n_out,            \
                                                 blockIdx.x * 128, min(n_tok - t0, 128), hi, \
                                                 lo, sums);                                 \
    }                                                                                       \
    extern "C" __global__ void __launch_bounds__(256, 1)                                    \
        mmgx_##T(const uint8_t* __restrict__ W, u64 row_bytes, int n_in, int n_out,         \
                 u64 w_zstride, const uint16_t* __restrict__ hi,                            \
                 const uint16_t* __restrict__ lo, const float* __restrict__ sums, int x_div, \
                 float* __restrict__ y, u64 y_zstride, const int* __restrict__ counts,      \
                 const int* __restrict__ offsets, const int* __restrict__ perm) {           \
        typedef TxMem<256, 64, txd_##T::GA, txd_##T::BM, TC_SW(QK_##T, BS_##T), txd_##T::TT> L; \
        extern __shared__ __align__(16) uint8_t tx_smem[];                                  \
        uint8_t* sm = tx_enter<MMX_G, txd_##T, QK_##T, BS_##T>(tx_smem);                    \
        RL_PDL_ENTER();                                                                     \
        const int e = blockIdx.z;                                                           \
        const int cnt = counts[e];                                                          \
        if (cnt == 0) return;                                                               \
        const int off = offsets[e];                                                         \
        const uint8_t* Wb = mat_at(W, (u64)e, w_zstride);                                  \
        for (int t0 = 0; t0 < cnt; t0 += 64) {                                              \
            if (t0) __syncthreads(); /* the last tile's stores read YR */                   \
            for (int i = threadIdx.x; i < 64; i += blockDim.x) {                            \
                const bool ok = t0 + i < cnt;                                               \
                const int q = ok ? perm[off + t0 + i] : 0;                                  \
                ((int*)(sm + L::XR))[i] = ok ? q / x_div : -1;                              \
                ((float**)(sm + L::YR))[i] = ok ? y + (u64)q * y_zstride : nullptr;         \
            }                                                                               \
            __syncthreads();                                                                \
            mmx_tile<MMX_G, txd_##T, QK_##T, BS_##T>(sm, Wb, row_bytes, n_in, n_out,        \
                                                     blockIdx.x * 256, min(cnt - t0, 64), hi, \
                                                     lo, sums);                             \
        }                                                                                   \
    }
REDLITE_TC_TYPES(DEF_MMX)

// Embedding rows: out[t] = dequant(W[tok[t]]), n_in values each.
#define DEF_GETROWS(T, ID)                                                                  \
    extern "C" __global__ void getrows_##T(const uint8_t* __restrict__ W, u64 row_bytes,    \
                                           int n_in, const int* __restrict__ tok,           \
                                           float* __restrict__ out) {                       \
        RL_PDL_ENTER();                                                                     \
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
    RL_PDL_ENTER();
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
    // The thread's first gate and weight before the wait: z comes from a
    // product at least two launches back (RL_PDL_EARLY).
    const int i0 = threadIdx.x;
    const float z0 = i0 < dim ? z[base + i0] : 0.f, w0 = i0 < dim ? w[i0] : 0.f;
    RL_PDL_ENTER();
    double ss = 0.0;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) ss += (double)o[base + i] * (double)o[base + i];
    ss = block_sum_d(ss);
    float s = (float)(1.0 / sqrt(ss / dim + (double)eps));
    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
        const bool first = i == i0;
        float v = o[base + i] * s * (first ? w0 : w[i]);
        o[base + i] = v * silu_f(first ? z0 : z[base + i]);
    }
}

// a = silu(a) ⊙ b
extern "C" __global__ void swiglu(float* __restrict__ a, const float* __restrict__ b, u64 n) {
    RL_PDL_ENTER();
    u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) a[i] = silu_f(a[i]) * b[i];
}

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
                                     u64 tstride) {
    RL_PDL_ENTER();
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float* state = (float*)tab[slot];
    const int ks = K - 1;
    const int t0 = blockIdx.y * CONV_TB, t1 = min(T, t0 + CONV_TB);
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
    if (blockIdx.y == 0) {
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
               u64 tstride, const float* __restrict__ pre) {
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

// ---------------------------------------------------------------------------
// Attention.

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
                                   int slot) {
    RL_PDL_ENTER();
    __shared__ float row[QK_HD_MAX];
    const int b = blockIdx.x;
    const bool isq = b < T * nh;
    const int r = isq ? b : b - T * nh;
    const int t = isq ? r / nh : r / nkv;
    const float* xi = isq ? qg + (u64)r * 2 * hd : k + (u64)r * hd;
    const float* w = isq ? qw : kw;
    const int pos0 = ctl[0];
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
               float scale, int ns) {
    RL_PDL_ENTER();
    int g = blockIdx.x, t = blockIdx.y, s = blockIdx.z;
    const float* Kc = (const float*)tab[slot];
    const float* Vc = (const float*)tab[slot + 1];
    int pos0 = ctl[0];
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
                                        const int* __restrict__ ctl) {
    RL_PDL_ENTER();
    // ns <= 1024: the weights e^{m_s − M} of every split in shared memory.
    __shared__ float wsm[1024];
    __shared__ float redm[32];
    int h = blockIdx.x, t = blockIdx.y;
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    const float* pp = part + ((u64)t * nh + h) * ns * (hd + 2);
    const int nsu = att_nsplit(ctl[0] + t + 1, ns);
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
                                              float scale, int ns) {
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
    const int pos0 = ctl[0];
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
                      float scale, int ns) {                                                  \
        RL_PDL_ENTER();                                                                       \
        attn_dec_body<HD, false>(q, tab, slot, part, ctl, nh, nkv, scale, ns);                \
    }                                                                                         \
    extern "C" __global__ void __launch_bounds__(AD_W * WARP, 1)                              \
        attn_deca_##HD(const float* __restrict__ q, const u64* __restrict__ tab, int slot,    \
                       float* __restrict__ part, const int* __restrict__ ctl, int nh,         \
                       int nkv, float scale, int ns) {                                        \
        RL_PDL_ENTER();                                                                       \
        attn_dec_body<HD, true>(q, tab, slot, part, ctl, nh, nkv, scale, ns);                 \
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
                   const int* __restrict__ ctl) {
    RL_PDL_ENTER();
    __shared__ float wsm[1024];
    __shared__ float accs[1024];
    __shared__ float redm[32];
    const int h = blockIdx.x, t = blockIdx.y;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    const u64 rs = hd + 2;
    const float* pp = part + ((u64)t * nh + h) * ns * rs;
    const int nsu = att_nsplit(ctl[0] + t + 1, ns);
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

// ---------------------------------------------------------------------------
// Expert prefetch (routed experts placed apart, one-token decode). Layer M's
// experts are predicted by its router applied to x ⊙ w (x: the input of layer
// M - 1, w: layer M's MoE input norm; the norm's positive scale does not change
// the top k), and the predicted ones held in pinned host memory are copied into
// a device staging area on a side stream while layer M - 1 computes. Layer M's
// expert tables point at the copies until the list is restored (by the next
// prefetch into the same staging area, or xp_restore at the end of the step),
// so every other pass sees the tables as uploaded. The copies are the same
// bytes: outputs do not change.
//
// A prefetch list (XP_WORDS words): [0] redirected entries, [1..4) the layer's
// gate / up / down tables, [XP_K] predicted ids, [XP_TOP] of them copied (the
// most likely first), [XP_IDS ..) the predicted ids,
// from XP_RED per redirected entry (expert, its gate, up and down addresses).
#define XP_K 4
#define XP_TOP 5
#define XP_IDS 8
#define XP_RED 40
#define XP_WORDS (XP_RED + 4 * 32)
__device__ void xp_restore_list(u64* pl) {
    const int n = (int)pl[0];
    u64* tg = (u64*)pl[1];
    u64* tu = (u64*)pl[2];
    u64* td = (u64*)pl[3];
    for (int i = 0; i < n; i++) {
        const u64* r = pl + XP_RED + 4 * i;
        tg[r[0]] = r[1];
        tu[r[0]] = r[2];
        td[r[0]] = r[3];
    }
    pl[0] = 0;
}

// Restore n lists (XP_WORDS apart) at pl and clear the n routers' marks
// (xp_mark's done, xpc_stride ints apart); one thread.
extern "C" __global__ void xp_restore(u64* pl, int n, int* xpc, int xpc_stride) {
    RL_PDL_ENTER();
    if (threadIdx.x == 0 && blockIdx.x == 0)
        for (int i = 0; i < n; i++) {
            xp_restore_list(pl + (u64)i * XP_WORDS);
            if (xpc) ((volatile int*)xpc)[(u64)i * xpc_stride] = 0;
        }
}

#ifndef XP_U
#define XP_U 8
#endif
// Copy the first top of the k predicted experts (pred, most likely first)
// that lie in pinned host memory (id >= vram; expert e's record at host +
// (e - vram)·rec) into staging slot j
// (stage + j·rec) and point the tables at them; grid (blocks per expert, k).
// Block (0, 0) first restores the list the staging area served before.
// stats[4] += experts copied. A copy stops once the layer's router has
// chosen (xpc[0] == tag, xp_mark) without it (xpc[4 + e] != tag): that
// expert is not used this step, and the bus is left to the ones that are;
// stats[5] += the bytes left uncopied. wait (tests): every block first waits
// for the router, so an expert it did not choose is not copied at all.
extern "C" __global__ void __launch_bounds__(256)
xp_fetch(const int* __restrict__ pred, int k, int top, int vram, const uint8_t* __restrict__ host,
         u64 rec, uint8_t* __restrict__ stage, u64* __restrict__ pl, u64* tg, u64* tu, u64* td,
         u64 off_u, u64 off_d, unsigned long long* __restrict__ stats, const int* xpc, int tag,
         int wait) {
    __shared__ int stop[2];
    const int j = blockIdx.y;
    if (blockIdx.x == 0 && j == 0 && threadIdx.x == 0) {
        xp_restore_list(pl);
        int n = 0;
        for (int i = 0; i < k; i++) {
            const int e = pred[i];
            pl[XP_IDS + i] = (u64)e;
            if (e < vram || i >= top) continue;
            u64* r = pl + XP_RED + 4 * n;
            r[0] = (u64)e;
            r[1] = tg[e];
            r[2] = tu[e];
            r[3] = td[e];
            const u64 s = (u64)(stage + (u64)i * rec);
            tg[e] = s;
            tu[e] = s + off_u;
            td[e] = s + off_d;
            n++;
        }
        pl[0] = (u64)n;
        pl[1] = (u64)tg;
        pl[2] = (u64)tu;
        pl[3] = (u64)td;
        pl[XP_K] = (u64)k;
        pl[XP_TOP] = (u64)top;
        if (stats) atomicAdd(stats + 4, (unsigned long long)n);
    }
    const int e = pred[j];
    if (e < vram || j >= top) return;
    const uint4* src = (const uint4*)(host + (u64)(e - vram) * rec);
    uint4* dst = (uint4*)(stage + (u64)j * rec);
    const u64 n16 = rec / 16;
    const u64 per = (n16 + gridDim.x - 1) / gridDim.x;
    const u64 a = (u64)blockIdx.x * per, b = min(n16, a + per);
    const volatile int* vx = (const volatile int*)xpc;
    const u64 step = (u64)XP_U * blockDim.x;
    if (vx && wait) {
        if (threadIdx.x == 0) {
            while (vx[0] != tag) __nanosleep(1000);
            __threadfence();
            stop[0] = vx[4 + e] != tag;
            if (stop[0] && stats && a < b) atomicAdd(stats + 5, (unsigned long long)(b - a) * 16ull);
        }
        __syncthreads();
        if (stop[0]) return;
        __syncthreads();
    }
    // Every thread runs the same iterations (the block's decision to stop is
    // shared through stop[], one word per iteration parity).
    int it = 0;
    for (u64 base = a; base < b; base += step, it++) {
        // Thread 0 asks whether to stop before its loads, and decides after.
        int done = 0;
        if (threadIdx.x == 0 && vx) done = vx[0];
        uint4 v[XP_U];
#pragma unroll
        for (int u = 0; u < XP_U; u++) {
            const u64 i = base + threadIdx.x + (u64)u * blockDim.x;
            if (i < b) v[u] = src[i];
        }
#pragma unroll
        for (int u = 0; u < XP_U; u++) {
            const u64 i = base + threadIdx.x + (u64)u * blockDim.x;
            if (i < b) dst[i] = v[u];
        }
        if (!vx) continue;
        if (threadIdx.x == 0) {
            int s = 0;
            if (done == tag) {
                __threadfence();
                s = vx[4 + e] != tag;
            }
            stop[it & 1] = s;
            if (s && stats && base + step < b) atomicAdd(stats + 5, (unsigned long long)(b - base - step) * 16ull);
        }
        __syncthreads();
        if (stop[it & 1]) break;
    }
}

// After layer M's router and the join of its prefetch (list pl complete):
// copy each chosen expert (ids, k of them) that lies in pinned host memory
// and was not copied ahead (not among pl's first top predictions) into slot
// r of the late staging area (late + r·rec), many blocks per expert at once,
// and point the tables at the copy; the redirects are appended to pl, so the
// list's restore puts them back too. The same bytes: outputs do not change.
// Grid (blocks per expert, k); no early launch of the next kernel (it reads
// the tables). stats[6] += experts copied late.
extern "C" __global__ void __launch_bounds__(256)
xp_late(const int* __restrict__ ids, int k, int vram, const uint8_t* __restrict__ host, u64 rec,
        uint8_t* __restrict__ late, u64* __restrict__ pl, u64* tg, u64* tu, u64* td, u64 off_u,
        u64 off_d, unsigned long long* __restrict__ stats) {
    RL_PDL_WAIT();
    const int np = (int)pl[XP_K], top = (int)pl[XP_TOP];
    auto ahead = [&](int e) {
        for (int j = 0; j < np && j < top; j++)
            if ((int)pl[XP_IDS + j] == e) return true;
        return false;
    };
    const int r = blockIdx.y;
    const int e = ids[r];
    const bool mine = e >= vram && !ahead(e);
    // Block (0, 0) writes only pl[0] and the redirects, which the others do
    // not read.
    if (blockIdx.x == 0 && r == 0 && threadIdx.x == 0) {
        int n = (int)pl[0], c = 0;
        for (int q = 0; q < k; q++) {
            const int eq = ids[q];
            if (eq < vram || ahead(eq) || n >= 32) continue;
            u64* red = pl + XP_RED + 4 * n;
            red[0] = (u64)eq;
            red[1] = tg[eq];
            red[2] = tu[eq];
            red[3] = td[eq];
            const u64 sq = (u64)(late + (u64)q * rec);
            tg[eq] = sq;
            tu[eq] = sq + off_u;
            td[eq] = sq + off_d;
            n++;
            c++;
        }
        pl[0] = (u64)n;
        if (stats) atomicAdd(stats + 6, (unsigned long long)c);
    }
    if (mine) {
        const uint4* src = (const uint4*)(host + (u64)(e - vram) * rec);
        uint4* dst = (uint4*)(late + (u64)r * rec);
        const u64 n16 = rec / 16;
        const u64 per = (n16 + gridDim.x - 1) / gridDim.x;
        const u64 a = (u64)blockIdx.x * per, b = min(n16, a + per);
        for (u64 base = a + threadIdx.x; base < b; base += (u64)XP_U * blockDim.x) {
            uint4 v[XP_U];
#pragma unroll
            for (int u = 0; u < XP_U; u++) {
                const u64 i = base + (u64)u * blockDim.x;
                if (i < b) v[u] = src[i];
            }
#pragma unroll
            for (int u = 0; u < XP_U; u++) {
                const u64 i = base + (u64)u * blockDim.x;
                if (i < b) dst[i] = v[u];
            }
        }
    }
    __threadfence();
}

// out_z = x ⊙ w_z for the z-th of two weights (the prediction inputs of
// layers 0 and 1, from the embeddings); one block per z.
extern "C" __global__ void xp_scale(const float* __restrict__ x, const float* __restrict__ w0,
                                    const float* __restrict__ w1, float* __restrict__ o0,
                                    float* __restrict__ o1, int d) {
    RL_PDL_ENTER();
    const float* w = blockIdx.x ? w1 : w0;
    float* o = blockIdx.x ? o1 : o0;
    for (int i = threadIdx.x; i < d; i += blockDim.x) o[i] = x[i] * w[i];
}

// ---------------------------------------------------------------------------
// MoE.

extern "C" __global__ void moe_topk(const float* __restrict__ logits, int ne, int k,
                                    int* __restrict__ ids, float* __restrict__ wts) {
    RL_PDL_ENTER();
    int t = blockIdx.x;
    topk_row(logits + (u64)t * ne, ne, k, ids + t * k, wts + t * k);
}

// Group the n routed slots (ids[q] = expert of slot q) by expert: counts,
// offsets (exclusive prefix sum) and perm (the slots of each expert, in any
// order: every slot's product is computed on its own). One block.
extern "C" __global__ void moe_group(const int* __restrict__ ids, int n, int ne,
                                     int* __restrict__ counts, int* __restrict__ offsets,
                                     int* __restrict__ perm) {
    RL_PDL_ENTER();
    extern __shared__ int gsh[];
    int* cnt = gsh;
    int* pos = gsh + ne;
    for (int e = threadIdx.x; e < ne; e += blockDim.x) cnt[e] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) atomicAdd(&cnt[ids[i]], 1);
    __syncthreads();
    if (threadIdx.x == 0) {
        int run = 0;
        for (int e = 0; e < ne; e++) {
            pos[e] = run;
            offsets[e] = run;
            counts[e] = cnt[e];
            run += cnt[e];
        }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) perm[atomicAdd(&pos[ids[i]], 1)] = i;
}

// The MoE output, one token per block: x[t] += Σ_r wts[t][r]·down[t·k + r] +
// sigmoid(h[t]·sh_inp)·sh[t]; then (w non-null) the next layer's input norm
// out[t] = rmsnorm(x[t])·w. out may be h (each block reads its row of h
// before the first barrier and writes it after the last).
//
// With expert prefetch (decode, pw non-null): pout = x ⊙ pw as well (the
// prediction input of layer + 2, whose input norm is pw; see xp_fetch), and
// (stats non-null) how this layer's chosen experts (ids) compare with its
// prediction (list pl): stats[0] += chosen, [1] += chosen and predicted,
// [2] += chosen from pinned host memory (id >= vram), [3] += those copied
// ahead (predicted among the first top).
//
// Before griddepcontrol.wait it reads only what the kernel launched just
// before it does not write: the weights, and h, x and wts, written two or
// more kernels back (the post-attention norm, the router). That is safe
// because this kernel starts only once every block of the kernel before has
// passed its own wait (RL_PDL_ENTER in every block of every kernel), which
// returns once the kernels before that one have finished. So the shared
// gate's dot product and block sum, the weights and the residual are ready
// when the down products finish; after the wait each thread issues all of
// its loads of down and sh at once (CN_KR experts per batch, CN_IT values
// per thread), with every sum in the order of the plain loops (the gate's
// per thread and block sum as before, y over r from 0, ss over the thread's
// values in increasing index), so the results are those bits.
#define CN_KR 16
#define CN_IT 2
extern "C" __global__ void __launch_bounds__(1024) moe_combine_norm(float* __restrict__ x, const float* __restrict__ down,
                                            const float* __restrict__ wts, int k,
                                            const float* __restrict__ sh, const float* h,
                                            const float* __restrict__ sh_inp, int d,
                                            const float* __restrict__ w, float* out,
                                            float eps, const float* __restrict__ pw,
                                            float* __restrict__ pout,
                                            const int* __restrict__ ids,
                                            const u64* __restrict__ pl,
                                            unsigned long long* __restrict__ stats, int vram) {
    __shared__ float ws[32];
    const int t = blockIdx.x, nb = blockDim.x;
    const bool wsm = k <= 32;
    if (wsm && threadIdx.x < k) ws[threadIdx.x] = wts[t * k + threadIdx.x];
    float gl = 0.f;
    for (int i = threadIdx.x; i < d; i += nb) gl += h[(u64)t * d + i] * sh_inp[i];
    gl = block_sum_f(gl);  // its barriers also publish ws
    const float gate = sigmoid_f(gl);
    float* xt = x + (u64)t * d;
    const float* sht = sh + (u64)t * d;
    const float* dt = down + (u64)t * k * d;
    // The first CN_IT values of this thread: residual and weights loaded
    // before the wait, kept for the norm's pass.
    float xv[CN_IT], wv[CN_IT], pv[CN_IT];
#pragma unroll
    for (int j = 0; j < CN_IT; j++) {
        const int i = threadIdx.x + j * nb;
        if (i < d) {
            xv[j] = xt[i];
            wv[j] = w ? w[i] : 0.f;
            pv[j] = pw ? pw[i] : 0.f;
        }
    }
    RL_PDL_ENTER();
    if (stats && t == 0 && threadIdx.x == 0) {
        const int np = (int)pl[XP_K], top = (int)pl[XP_TOP];
        unsigned long long c[4] = {0, 0, 0, 0};
        for (int r = 0; r < k; r++) {
            const int e = ids[r];
            int at = np;
            for (int j = 0; j < np; j++)
                if ((int)pl[XP_IDS + j] == e) at = j;
            c[0] += 1;
            c[1] += at < np;
            c[2] += e >= vram;
            c[3] += at < top && e >= vram;
        }
        for (int j = 0; j < 4; j++) atomicAdd(stats + j, c[j]);
    }
    double ss = 0.0;
    float vk[CN_IT];
    for (int i0 = threadIdx.x; i0 < d; i0 += CN_IT * nb) {
        const bool first = i0 == (int)threadIdx.x;
        float y[CN_IT], sv[CN_IT];
#pragma unroll
        for (int j = 0; j < CN_IT; j++) {
            y[j] = 0.f;
            const int i = i0 + j * nb;
            if (i < d) sv[j] = sht[i];
        }
        for (int r0 = 0; r0 < k; r0 += CN_KR) {
            float dv[CN_IT][CN_KR];
#pragma unroll
            for (int r = 0; r < CN_KR; r++)
#pragma unroll
                for (int j = 0; j < CN_IT; j++) {
                    const int i = i0 + j * nb;
                    dv[j][r] = r0 + r < k && i < d ? dt[(u64)(r0 + r) * d + i] : 0.f;
                }
#pragma unroll
            for (int r = 0; r < CN_KR; r++) {
                if (r0 + r < k) {
                    const float wr = wsm ? ws[r0 + r] : wts[t * k + r0 + r];
#pragma unroll
                    for (int j = 0; j < CN_IT; j++) y[j] += wr * dv[j][r];
                }
            }
        }
#pragma unroll
        for (int j = 0; j < CN_IT; j++) {
            const int i = i0 + j * nb;
            if (i < d) {
                float v = (first ? xv[j] : xt[i]) + (y[j] + gate * sv[j]);
                xt[i] = v;
                if (pw) pout[(u64)t * d + i] = v * (first ? pv[j] : pw[i]);
                ss += (double)v * (double)v;
                if (first) vk[j] = v;
            }
        }
    }
    if (!w) return;
    ss = block_sum_d(ss);
    float s = (float)(1.0 / sqrt(ss / d + (double)eps));
#pragma unroll
    for (int j = 0; j < CN_IT; j++) {
        const int i = threadIdx.x + j * nb;
        if (i < d) {
            float v = vk[j] * s;
            out[(u64)t * d + i] = v * wv[j];
        }
    }
    for (int i = threadIdx.x + CN_IT * nb; i < d; i += nb) {
        float v = xt[i] * s;
        out[(u64)t * d + i] = v * w[i];
    }
}

// x += y, then out = rmsnorm(x)·w, one block per row of dim values.
#define AR_IT 2
extern "C" __global__ void add_rmsnorm(float* __restrict__ x, const float* __restrict__ y,
                                       const float* __restrict__ w, float* __restrict__ out,
                                       int dim, float eps) {
    u64 base = (u64)blockIdx.x * dim;
    const int nb = blockDim.x;
    // The thread's first AR_IT residual values and weights before the wait:
    // the residual was last written by the layer before's combine, several
    // launches back (RL_PDL_EARLY); y is the product just before.
    float xv[AR_IT], wv[AR_IT];
#pragma unroll
    for (int j = 0; j < AR_IT; j++) {
        const int i = threadIdx.x + j * nb;
        xv[j] = i < dim ? x[base + i] : 0.f;
        wv[j] = i < dim ? w[i] : 0.f;
    }
    RL_PDL_ENTER();
    double ss = 0.0;
#pragma unroll
    for (int j = 0; j < AR_IT; j++) {
        const int i = threadIdx.x + j * nb;
        if (i < dim) {
            xv[j] += y[base + i];
            x[base + i] = xv[j];
            ss += (double)xv[j] * (double)xv[j];
        }
    }
    for (int i = threadIdx.x + AR_IT * nb; i < dim; i += nb) {
        float v = x[base + i] + y[base + i];
        x[base + i] = v;
        ss += (double)v * (double)v;
    }
    ss = block_sum_d(ss);
    float s = (float)(1.0 / sqrt(ss / dim + (double)eps));
#pragma unroll
    for (int j = 0; j < AR_IT; j++) {
        const int i = threadIdx.x + j * nb;
        if (i < dim) out[base + i] = xv[j] * s * wv[j];
    }
    for (int i = threadIdx.x + AR_IT * nb; i < dim; i += nb) out[base + i] = x[base + i] * s * w[i];
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
    RL_PDL_ENTER();
    u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    u64 a = splitmix(seed ^ (2 * i)), b = splitmix(seed ^ (2 * i + 1));
    double u1 = fmax((double)(a >> 11) / 9007199254740992.0, 1e-300);
    double u2 = (double)(b >> 11) / 9007199254740992.0;
    x[i] = scale * (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}
