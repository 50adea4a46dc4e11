// The f32-activation products: one-token dot products, matrix-vector
// products of several tokens and slots, the one-token kernel, the fused gate
// and up products, the verify twin of the one-token kernel, and the
// embedding rows. (After common.cuh.)

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

