// Dequantization of ggml quant blocks, 8 values at a time.
//
// For every supported type T:
//   QK_<T>   values per block (the plain float types use 8)
//   BS_<T>   bytes per block
//   dq8_<T>(blk, c, v)  writes values 8c .. 8c+7 of the block at `blk`
//                       (0 <= c < QK_<T> / 8) into v[0..8]
// and REDLITE_DQ_TYPES(X) lists them as X(T, ggml type id).
//
// The results are bit-identical to redlite_quant's scalar dequantizers (the
// specification): every float expression below mirrors the Rust one in the
// same operation order, when compiled without FMA contraction (g++
// `-ffp-contract=off` in the host test; the device build keeps NVRTC's
// default, contraction on, so there a multiply-add may round once instead of
// twice).
//
// Blocks are only byte-aligned: every multi-byte field is assembled from
// bytes (rl_ld_u16 / rl_ld_u32), never read through a wider pointer.
//
// This file is not self-contained: dequant_source() (src/dequant_src.rs)
// prepends the portability prelude (fixed-width integer types, rl_as_f32 /
// rl_f32_bits, RL_TABLE) and the lookup tables (rl_iq*_grid, rl_ksigns_iq2xs,
// rl_kvalues_iq4nl, RL_IQ1S_DELTA_BITS, RL_IQ1M_DELTA_BITS).

// ---------------------------------------------------------------------------
// Byte-level helpers
// ---------------------------------------------------------------------------

/// Little-endian u16 at `p` (any alignment).
__device__ __forceinline__ uint32_t rl_ld_u16(const uint8_t* __restrict__ p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8);
}

/// Little-endian u32 at `p` (any alignment).
__device__ __forceinline__ uint32_t rl_ld_u32(const uint8_t* __restrict__ p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
           ((uint32_t)p[3] << 24);
}

/// Byte j (0..8) of the 8 bytes held as two little-endian words.
__device__ __forceinline__ uint32_t rl_byte8(uint32_t w0, uint32_t w1, int j) {
    return ((j < 4 ? w0 : w1) >> (8 * (j & 3))) & 0xffu;
}

/// IEEE half bits to f32, exactly as the `half` crate converts them (NaNs
/// come out quiet with their payload kept). Subnormals go through an exact
/// integer product, so the result does not depend on denormal flushing.
__device__ __forceinline__ float rl_f16_to_f32(uint32_t h) {
#ifdef __CUDA_ARCH__
    // The hardware conversion is exact for every non-NaN half (subnormals
    // included); quant scales are never NaN.
    if ((h & 0x7c00u) != 0x7c00u) {
        float f;
        asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"((unsigned short)h));
        return f;
    }
#endif
    const uint32_t sign = (h & 0x8000u) << 16;
    const uint32_t em = h & 0x7fffu;
    const uint32_t man = em & 0x3ffu;
    uint32_t bits;
    if (em >= 0x7c00u) {
        bits = 0x7f800000u | (man != 0u ? (0x00400000u | (man << 13)) : 0u);
    } else if (em >= 0x0400u) {
        bits = (em << 13) + 0x38000000u;  // rebias the exponent: +(127 - 15) << 23
    } else {
        bits = rl_f32_bits((float)man * 5.9604644775390625e-8f);  // man * 2^-24, exact
    }
    return rl_as_f32(bits | sign);
}

/// bfloat16 bits to f32, exactly as the `half` crate converts them.
__device__ __forceinline__ float rl_bf16_to_f32(uint32_t h) {
    const uint32_t quiet = ((h & 0x7fffu) > 0x7f80u) ? 0x0040u : 0u;
    return rl_as_f32((h | quiet) << 16);
}

/// The f16 at `p` (any alignment) as f32.
__device__ __forceinline__ float rl_ld_f16(const uint8_t* __restrict__ p) {
    return rl_f16_to_f32(rl_ld_u16(p));
}

/// Byte `j` of a packed grid word as a signed value.
__device__ __forceinline__ float rl_grid_val(uint64_t g, int j) {
    return (float)(int8_t)(uint8_t)(g >> (8 * j));
}

/// `±(db * grid[j])` for j in 0..8, negated (sign bit flipped) where bit j of
/// `signs` is set: redlite_quant's `put8_signed`.
__device__ __forceinline__ void rl_put8_signed(float v[8], float db, uint64_t g, uint32_t signs) {
    RL_UNROLL
    for (int j = 0; j < 8; ++j) {
        const float w = db * rl_grid_val(g, j);
        v[j] = rl_as_f32(rl_f32_bits(w) ^ (((signs >> j) & 1u) << 31));
    }
}

/// `dl * (grid[j] + delta)` for j in 0..8: redlite_quant's `put8_shifted`.
__device__ __forceinline__ void rl_put8_shifted(float v[8], float dl, uint64_t g, float delta) {
    RL_UNROLL
    for (int j = 0; j < 8; ++j) {
        v[j] = dl * (rl_grid_val(g, j) + delta);
    }
}

// ---------------------------------------------------------------------------
// Plain floats (8 values per "block")
// ---------------------------------------------------------------------------

#define QK_F32 8
#define BS_F32 32
__device__ __forceinline__ void dq8_F32(const uint8_t* __restrict__ blk, int c, float v[8]) {
    const uint8_t* p = blk + 32 * c;
    RL_UNROLL
    for (int j = 0; j < 8; ++j) v[j] = rl_as_f32(rl_ld_u32(p + 4 * j));
}

#define QK_F16 8
#define BS_F16 16
__device__ __forceinline__ void dq8_F16(const uint8_t* __restrict__ blk, int c, float v[8]) {
    const uint8_t* p = blk + 16 * c;
    RL_UNROLL
    for (int j = 0; j < 8; ++j) v[j] = rl_f16_to_f32(rl_ld_u16(p + 2 * j));
}

#define QK_BF16 8
#define BS_BF16 16
__device__ __forceinline__ void dq8_BF16(const uint8_t* __restrict__ blk, int c, float v[8]) {
    const uint8_t* p = blk + 16 * c;
    RL_UNROLL
    for (int j = 0; j < 8; ++j) v[j] = rl_bf16_to_f32(rl_ld_u16(p + 2 * j));
}

// ---------------------------------------------------------------------------
// Legacy 32-value blocks. Values 0..16 are the low nibbles of qs[0..16],
// values 16..32 the high nibbles; chunk c reads qs[8(c&1) ..] shifted by
// 4(c>>1). The fifth bit of value e is bit e of the u32 qh.
// ---------------------------------------------------------------------------

#define QK_Q4_0 32
#define BS_Q4_0 18
__device__ __forceinline__ void dq8_Q4_0(const uint8_t* __restrict__ blk, int c, float v[8]) {
    const float d = rl_ld_f16(blk);
    const uint8_t* q = blk + 2 + 8 * (c & 1);
    const int sh = 4 * (c >> 1);
    RL_UNROLL
    for (int j = 0; j < 8; ++j) v[j] = d * (float)((int)((q[j] >> sh) & 15) - 8);
}

#define QK_Q4_1 32
#define BS_Q4_1 20
__device__ __forceinline__ void dq8_Q4_1(const uint8_t* __restrict__ blk, int c, float v[8]) {
    const float d = rl_ld_f16(blk);
    const float m = rl_ld_f16(blk + 2);
    const uint8_t* q = blk + 4 + 8 * (c & 1);
    const int sh = 4 * (c >> 1);
    RL_UNROLL
    for (int j = 0; j < 8; ++j) v[j] = d * (float)((q[j] >> sh) & 15) + m;
}

#define QK_Q5_0 32
#define BS_Q5_0 22
__device__ __forceinline__ void dq8_Q5_0(const uint8_t* __restrict__ blk, int c, float v[8]) {
    const float d = rl_ld_f16(blk);
    const uint32_t qh = rl_ld_u32(blk + 2) >> (8 * c);
    const uint8_t* q = blk + 6 + 8 * (c & 1);
    const int sh = 4 * (c >> 1);
    RL_UNROLL
    for (int j = 0; j < 8; ++j) {
        const int x = (int)(((q[j] >> sh) & 15) | (((qh >> j) & 1u) << 4));
        v[j] = d * (float)(x - 16);
    }
}

#define QK_Q5_1 32
#define BS_Q5_1 24
__device__ __forceinline__ void dq8_Q5_1(const uint8_t* __restrict__ blk, int c, float v[8]) {
    const float d = rl_ld_f16(blk);
    const float m = rl_ld_f16(blk + 2);
    const uint32_t qh = rl_ld_u32(blk + 4) >> (8 * c);
    const uint8_t* q = blk + 8 + 8 * (c & 1);
    const int sh = 4 * (c >> 1);
    RL_UNROLL
    for (int j = 0; j < 8; ++j) {
        const uint32_t x = ((q[j] >> sh) & 15) | (((qh >> j) & 1u) << 4);
        v[j] = d * (float)x + m;
    }
}

#define QK_Q8_0 32
#define BS_Q8_0 34
__device__ __forceinline__ void dq8_Q8_0(const uint8_t* __restrict__ blk, int c, float v[8]) {
    const float d = rl_ld_f16(blk);
    const uint8_t* q = blk + 2 + 8 * c;
    const uint32_t w0 = rl_ld_u32(q), w1 = rl_ld_u32(q + 4);
    RL_UNROLL
    for (int j = 0; j < 8; ++j) v[j] = (float)(int8_t)rl_byte8(w0, w1, j) * d;
}

// ---------------------------------------------------------------------------
// K-quants (256-value super-blocks). Chunk c covers values 8c..8c+7, all in
// one 16-value scale group g = c/2 and one 32-value run of quant bytes
// starting at l0 = 8(c%4).
// ---------------------------------------------------------------------------

#define QK_Q2_K 256
#define BS_Q2_K 84
__device__ __forceinline__ void dq8_Q2_K(const uint8_t* __restrict__ blk, int c, float v[8]) {
    const float d = rl_ld_f16(blk + 80);
    const float dmin = rl_ld_f16(blk + 82);
    const uint32_t sc = blk[c >> 1];
    const float dl = d * (float)(sc & 15);
    const float ml = dmin * (float)(sc >> 4);
    const uint8_t* q = blk + 16 + 32 * (c >> 4) + 8 * (c & 3);
    const int sh = 2 * ((c >> 2) & 3);
    RL_UNROLL
    for (int j = 0; j < 8; ++j) v[j] = dl * (float)((q[j] >> sh) & 3) - ml;
}

#define QK_Q3_K 256
#define BS_Q3_K 110
__device__ __forceinline__ void dq8_Q3_K(const uint8_t* __restrict__ blk, int c, float v[8]) {
    const float d = rl_ld_f16(blk + 108);
    const int g = c >> 1;
    const uint8_t* s = blk + 96;
    const uint32_t lo = (s[g & 7] >> (4 * (g >> 3))) & 15;
    const uint32_t hi = (s[8 + (g & 3)] >> (2 * (g >> 2))) & 3;
    const float dl = d * (float)((int)(lo | (hi << 4)) - 32);
    const int l0 = 8 * (c & 3);
    const uint8_t* hm = blk + l0;
    const uint8_t* q = blk + 32 + 32 * (c >> 4) + l0;
    const int sh = 2 * ((c >> 2) & 3);
    const int hb = c >> 2;
    RL_UNROLL
    for (int j = 0; j < 8; ++j) {
        const int ql = (q[j] >> sh) & 3;
        const int h = ((hm[j] >> hb) & 1) ^ 1;
        v[j] = dl * (float)(ql - (h << 2));
    }
}

/// Scale and min `k` (0..8) of the packed 6-bit Q4_K / Q5_K scales at `s`
/// (ggml's get_scale_min_k4), without a divergent branch.
__device__ __forceinline__ void rl_scale_min_k4(const uint8_t* __restrict__ s, int k,
                                                uint32_t* sc, uint32_t* m) {
    const int kl = k & 3;
    const uint32_t a = s[kl];
    const uint32_t b = s[kl + 4];
    const uint32_t e = s[kl + 8];
    const bool low = k < 4;
    *sc = low ? (a & 63) : ((e & 15) | ((a >> 2) & 0x30));
    *m = low ? (b & 63) : ((e >> 4) | ((b >> 2) & 0x30));
}

#define QK_Q4_K 256
#define BS_Q4_K 144
__device__ __forceinline__ void dq8_Q4_K(const uint8_t* __restrict__ blk, int c, float v[8]) {
    const float d = rl_ld_f16(blk);
    const float dmin = rl_ld_f16(blk + 2);
    const int k = c >> 2;
    uint32_t sc, m;
    rl_scale_min_k4(blk + 4, k, &sc, &m);
    const float dl = d * (float)sc;
    const float ml = dmin * (float)m;
    const uint8_t* q = blk + 16 + 32 * (k >> 1) + 8 * (c & 3);
    const int sh = 4 * (k & 1);
    const uint32_t w0 = rl_ld_u32(q) >> sh, w1 = rl_ld_u32(q + 4) >> sh;
    RL_UNROLL
    for (int j = 0; j < 8; ++j) v[j] = dl * (float)(rl_byte8(w0, w1, j) & 15) - ml;
}

#define QK_Q5_K 256
#define BS_Q5_K 176
__device__ __forceinline__ void dq8_Q5_K(const uint8_t* __restrict__ blk, int c, float v[8]) {
    const float d = rl_ld_f16(blk);
    const float dmin = rl_ld_f16(blk + 2);
    const int k = c >> 2;
    uint32_t sc, m;
    rl_scale_min_k4(blk + 4, k, &sc, &m);
    const float dl = d * (float)sc;
    const float ml = dmin * (float)m;
    const int l0 = 8 * (c & 3);
    const uint8_t* qh = blk + 16 + l0;
    const uint8_t* q = blk + 48 + 32 * (k >> 1) + l0;
    const int sh = 4 * (k & 1);
    const uint32_t w0 = rl_ld_u32(q) >> sh, w1 = rl_ld_u32(q + 4) >> sh;
    const uint32_t h0 = rl_ld_u32(qh) >> k, h1 = rl_ld_u32(qh + 4) >> k;
    RL_UNROLL
    for (int j = 0; j < 8; ++j) {
        const uint32_t x = (rl_byte8(w0, w1, j) & 15) | ((rl_byte8(h0, h1, j) & 1u) << 4);
        v[j] = dl * (float)x - ml;
    }
}

#define QK_Q6_K 256
#define BS_Q6_K 210
__device__ __forceinline__ void dq8_Q6_K(const uint8_t* __restrict__ blk, int c, float v[8]) {
    const float d = rl_ld_f16(blk + 208);
    const float dl = d * (float)(int8_t)blk[192 + (c >> 1)];
    const int n = c >> 4;   // e / 128
    const int r = c & 15;   // (e % 128) / 8
    const uint8_t* ql = blk + 64 * n + 8 * (r & 7);
    const uint8_t* qh = blk + 128 + 32 * n + 8 * (r & 3);
    const int shl = 4 * (r >> 3);  // 4 * ((e % 128) / 64)
    const int shh = 2 * (r >> 2);  // 2 * ((e % 128) / 32)
    const uint32_t l0 = rl_ld_u32(ql) >> shl, l1 = rl_ld_u32(ql + 4) >> shl;
    const uint32_t h0 = rl_ld_u32(qh) >> shh, h1 = rl_ld_u32(qh + 4) >> shh;
    RL_UNROLL
    for (int j = 0; j < 8; ++j) {
        const int lo = (int)(rl_byte8(l0, l1, j) & 15);
        const int hi = (int)(rl_byte8(h0, h1, j) & 3);
        v[j] = dl * (float)((lo | (hi << 4)) - 32);
    }
}

// ---------------------------------------------------------------------------
// 1-bit lattice types. Chunk c is 8-group k = c of sub-block ib = c/4.
// ---------------------------------------------------------------------------

#define QK_IQ1_S 256
#define BS_IQ1_S 50
__device__ __forceinline__ void dq8_IQ1_S(const uint8_t* __restrict__ blk, int c, float v[8]) {
    const float d = rl_ld_f16(blk);
    const int ib = c >> 2;
    const int l = c & 3;
    const uint32_t qh = rl_ld_u16(blk + 34 + 2 * ib);
    const float dl = d * (float)(2 * ((qh >> 12) & 7) + 1);
    const float delta = rl_as_f32(RL_IQ1S_DELTA_BITS | ((qh & 0x8000u) << 16));
    const uint32_t idx = (uint32_t)blk[2 + c] | (((qh >> (3 * l)) & 7) << 8);
    rl_put8_shifted(v, dl, rl_iq1s_grid[idx], delta);
}

/// The half bits of an IQ1_M block's scale, spread over the top nibbles of
/// its four scale words (s0..s3, the u16s at 48..56).
__device__ __forceinline__ uint32_t rl_iq1m_dbits(uint32_t s0, uint32_t s1, uint32_t s2,
                                                  uint32_t s3) {
    return (s0 >> 12) | ((s1 >> 8) & 0x00f0u) | ((s2 >> 4) & 0x0f00u) | (s3 & 0xf000u);
}

#define QK_IQ1_M 256
#define BS_IQ1_M 56
__device__ __forceinline__ void dq8_IQ1_M(const uint8_t* __restrict__ blk, int c, float v[8]) {
    const uint32_t s0 = rl_ld_u16(blk + 48);
    const uint32_t s1 = rl_ld_u16(blk + 50);
    const uint32_t s2 = rl_ld_u16(blk + 52);
    const uint32_t s3 = rl_ld_u16(blk + 54);
    const float d = rl_f16_to_f32(rl_iq1m_dbits(s0, s1, s2, s3));
    const int ib = c >> 2;
    const int l = c & 3;
    const uint32_t sw = rl_ld_u16(blk + 48 + 2 * (ib >> 1));
    const float dl = d * (float)(2 * ((sw >> (6 * (ib & 1) + 3 * (l >> 1))) & 7) + 1);
    const uint32_t nib = (uint32_t)blk[32 + (c >> 1)] >> (4 * (c & 1));
    const uint32_t idx = (uint32_t)blk[c] | ((nib & 7) << 8);
    const float delta = rl_as_f32(RL_IQ1M_DELTA_BITS | ((nib & 8) << 28));
    rl_put8_shifted(v, dl, rl_iq1s_grid[idx], delta);
}

// ---------------------------------------------------------------------------
// 2-bit lattice types. Chunk c is 8-group k = c of sub-block ib = c/4.
// ---------------------------------------------------------------------------

#define QK_IQ2_XXS 256
#define BS_IQ2_XXS 66
__device__ __forceinline__ void dq8_IQ2_XXS(const uint8_t* __restrict__ blk, int c, float v[8]) {
    const float d = rl_ld_f16(blk);
    const int ib = c >> 2;
    const int l = c & 3;
    const uint32_t aux1 = rl_ld_u32(blk + 6 + 8 * ib);
    const float db = d * (0.5f + (float)(aux1 >> 28)) * 0.25f;
    const uint64_t g = rl_iq2xxs_grid[blk[2 + 8 * ib + l]];
    const uint32_t s = rl_ksigns_iq2xs[(aux1 >> (7 * l)) & 127];
    rl_put8_signed(v, db, g, s);
}

#define QK_IQ2_XS 256
#define BS_IQ2_XS 74
__device__ __forceinline__ void dq8_IQ2_XS(const uint8_t* __restrict__ blk, int c, float v[8]) {
    const float d = rl_ld_f16(blk);
    const int ib = c >> 2;
    const int l = c & 3;
    const uint32_t sc = (blk[66 + ib] >> (4 * (l >> 1))) & 15;
    const float db = d * (0.5f + (float)sc) * 0.25f;
    const uint32_t q = rl_ld_u16(blk + 2 + 2 * c);
    rl_put8_signed(v, db, rl_iq2xs_grid[q & 511], rl_ksigns_iq2xs[q >> 9]);
}

#define QK_IQ2_S 256
#define BS_IQ2_S 82
__device__ __forceinline__ void dq8_IQ2_S(const uint8_t* __restrict__ blk, int c, float v[8]) {
    const float d = rl_ld_f16(blk);
    const int ib = c >> 2;
    const int l = c & 3;
    const uint32_t sc = (blk[74 + ib] >> (4 * (l >> 1))) & 15;
    const float db = d * (0.5f + (float)sc) * 0.25f;
    const uint32_t qh = blk[66 + ib];
    const uint32_t idx = (uint32_t)blk[2 + c] | (((qh >> (2 * l)) & 3) << 8);
    rl_put8_signed(v, db, rl_iq2s_grid[idx], blk[34 + c]);
}

// ---------------------------------------------------------------------------
// 3-bit lattice types: two 4-value grid entries per chunk.
// ---------------------------------------------------------------------------

#define QK_IQ3_XXS 256
#define BS_IQ3_XXS 98
__device__ __forceinline__ void dq8_IQ3_XXS(const uint8_t* __restrict__ blk, int c, float v[8]) {
    const float d = rl_ld_f16(blk);
    const int ib = c >> 2;
    const int l = c & 3;
    const uint32_t aux = rl_ld_u32(blk + 66 + 4 * ib);
    const float db = d * (0.5f + (float)(aux >> 28)) * 0.5f;
    const uint64_t g = (uint64_t)rl_iq3xxs_grid[blk[2 + 2 * c]] |
                       ((uint64_t)rl_iq3xxs_grid[blk[3 + 2 * c]] << 32);
    rl_put8_signed(v, db, g, rl_ksigns_iq2xs[(aux >> (7 * l)) & 127]);
}

#define QK_IQ3_S 256
#define BS_IQ3_S 110
__device__ __forceinline__ void dq8_IQ3_S(const uint8_t* __restrict__ blk, int c, float v[8]) {
    const float d = rl_ld_f16(blk);
    const int ib = c >> 2;
    const int l = c & 3;
    const uint32_t sc = (blk[106 + (ib >> 1)] >> (4 * (ib & 1))) & 15;
    const float db = d * (float)(1 + 2 * sc);
    const uint32_t qh = blk[66 + ib];
    const uint32_t i0 = (uint32_t)blk[2 + 2 * c] | (((qh >> (2 * l)) & 1) << 8);
    const uint32_t i1 = (uint32_t)blk[3 + 2 * c] | (((qh >> (2 * l + 1)) & 1) << 8);
    const uint64_t g = (uint64_t)rl_iq3s_grid[i0] | ((uint64_t)rl_iq3s_grid[i1] << 32);
    rl_put8_signed(v, db, g, blk[74 + c]);
}

// ---------------------------------------------------------------------------
// Non-linear 4-bit types (values from rl_kvalues_iq4nl).
// ---------------------------------------------------------------------------

#define QK_IQ4_NL 32
#define BS_IQ4_NL 18
__device__ __forceinline__ void dq8_IQ4_NL(const uint8_t* __restrict__ blk, int c, float v[8]) {
    const float d = rl_ld_f16(blk);
    const uint8_t* q = blk + 2 + 8 * (c & 1);
    const int sh = 4 * (c >> 1);
    RL_UNROLL
    for (int j = 0; j < 8; ++j) v[j] = d * (float)rl_kvalues_iq4nl[(q[j] >> sh) & 15];
}

#define QK_IQ4_XS 256
#define BS_IQ4_XS 136
__device__ __forceinline__ void dq8_IQ4_XS(const uint8_t* __restrict__ blk, int c, float v[8]) {
    const float d = rl_ld_f16(blk);
    const int ib = c >> 2;
    const uint32_t sh = rl_ld_u16(blk + 2);
    const uint32_t lo = (blk[4 + (ib >> 1)] >> (4 * (ib & 1))) & 15;
    const uint32_t hi = (sh >> (2 * ib)) & 3;
    const float dl = d * (float)((int)(lo | (hi << 4)) - 32);
    const uint8_t* q = blk + 8 + 16 * ib + 8 * (c & 1);
    const int s = 4 * ((c >> 1) & 1);
    RL_UNROLL
    for (int j = 0; j < 8; ++j) v[j] = dl * (float)rl_kvalues_iq4nl[(q[j] >> s) & 15];
}

// ---------------------------------------------------------------------------
// Every type above as X(T, ggml type id).
// ---------------------------------------------------------------------------

#define REDLITE_DQ_TYPES(X) \
    X(F32, 0)               \
    X(F16, 1)               \
    X(Q4_0, 2)              \
    X(Q4_1, 3)              \
    X(Q5_0, 6)              \
    X(Q5_1, 7)              \
    X(Q8_0, 8)              \
    X(Q2_K, 10)             \
    X(Q3_K, 11)             \
    X(Q4_K, 12)             \
    X(Q5_K, 13)             \
    X(Q6_K, 14)             \
    X(IQ2_XXS, 16)          \
    X(IQ2_XS, 17)           \
    X(IQ3_XXS, 18)          \
    X(IQ1_S, 19)            \
    X(IQ4_NL, 20)           \
    X(IQ3_S, 21)            \
    X(IQ2_S, 22)            \
    X(IQ4_XS, 23)           \
    X(IQ1_M, 29)            \
    X(BF16, 30)
