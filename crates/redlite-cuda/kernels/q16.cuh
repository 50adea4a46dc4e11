// Integer dot products of 16-bit activations with quantized weights (the
// one-token and verify kernels' default path, as the CPU's: redlite_quant's
// q16 module).
//
// Activations are quantized once per token and per 32 values: scale d =
// amax / 32767, values round-half-even(x · 32767 / amax) in ±32767 (16 bits,
// about 256 times finer than llama.cpp's 8-bit activations, each 32 values
// against their own largest magnitude; the CPU's integer path takes 15 bits
// per 256 because its 16-bit multiply-adds must not overflow, dp2a adds into
// 32 bits). The kernels keep them as 32-value units (RlXU: the 32 values,
// pairs packed in words, then the integer sums of each 8), 80 bytes, so that
// lanes reading consecutive units hit distinct shared-memory banks, and one
// f32 scale per unit.
//
// A weight unit is 32 values of one block (a K-quant / IQ sub-block, a whole
// Q8_0 block). q16p_T(blk, j, w, tab) unpacks unit j of the block at blk
// into RlQW (tab: the type's lookup tables in shared memory, Q16_TAB_T bytes
// filled by q16_tab_T, or null for the global ones): the 32
// weights as integers in bytes (four per word, the type's offset left for the
// apply step where an integer sum handles it) and the unit's one or two f32
// scales; q16a_T takes it against one activation unit with dp2a (two 16-bit
// activations times two bytes, added into 32 bits) and returns
//
//     P = Σ_{i<32} w_i · q_i        (the unit's weights w_i as dequantized,
//                                    the activations q_i as integers)
//
// with the weight scales applied in f32 to exact integer sums. A kernel adds
// d · P per unit (fmaf, unit by unit). Products are written with fmaf and
// __fmul_rn so no compiler contraction can differ between the kernels that
// inline them: the one-token kernel and its verify twin give every token the
// same bits.
//
// Integer ranges: |q| <= 32767, so a unit's integer sum is exact in i32 for
// every type (Q8_0, the largest: 32 · 128 · 32767 < 2^28); as f32 it is exact
// below 2^24 (Q4_K, IQ1_M, IQ2_XS, Q6_K after its offset), otherwise its
// conversion rounds once (Q5_K, Q8_0: a relative 6e-8).
//
// The text compiles under NVRTC and as host C++ (tests/q16_host.rs checks
// every unit function against redlite_quant's dequantizer in f64); it needs
// dequant.cuh before it (rl_f16_to_f32 on the host, the IQ tables).

#ifndef REDLITE_Q16_CUH
#define REDLITE_Q16_CUH

#define RL_Q16_XMAX 32767.0f

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define RL_ALIGN16 __align__(16)
__device__ __forceinline__ int rl_dp2lo(uint32_t a, uint32_t b, int c) {
    int d;
    asm("dp2a.lo.s32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}
__device__ __forceinline__ int rl_dp2hi(uint32_t a, uint32_t b, int c) {
    int d;
    asm("dp2a.hi.s32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}
__device__ __forceinline__ int rl_q16_round(float v) { return __float2int_rn(v); }
__device__ __forceinline__ float rl_mul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ float rl_fma(float a, float b, float c) { return __fmaf_rn(a, b, c); }
__device__ __forceinline__ uint32_t rl_q16_w32(const uint8_t* p) { return *(const uint32_t*)p; }
__device__ __forceinline__ uint32_t rl_q16_funnel(uint32_t lo, uint32_t hi, int sh) {
    return __funnelshift_r(lo, hi, sh);
}
__device__ __forceinline__ uint4 rl_q16_ld16(const uint8_t* p) { return *(const uint4*)p; }
__device__ __forceinline__ uint32_t rl_q16_h16(const uint8_t* p) {
    return *(const uint16_t*)p;
}
// A quant scale's half bits (never NaN) to f32 by the hardware conversion.
__device__ __forceinline__ float rl_q16_h2f(uint32_t h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"((unsigned short)h));
    return f;
}
#else
#include <math.h>
#define RL_ALIGN16 alignas(16)
static inline int rl_dp2lo(uint32_t a, uint32_t b, int c) {
    return c + (int)(int16_t)(a & 0xffffu) * (int)(int8_t)(b & 0xffu) +
           (int)(int16_t)(a >> 16) * (int)(int8_t)((b >> 8) & 0xffu);
}
static inline int rl_dp2hi(uint32_t a, uint32_t b, int c) {
    return c + (int)(int16_t)(a & 0xffffu) * (int)(int8_t)((b >> 16) & 0xffu) +
           (int)(int16_t)(a >> 16) * (int)(int8_t)(b >> 24);
}
static inline int rl_q16_round(float v) { return (int)nearbyintf(v); }
static inline float rl_mul(float a, float b) { return a * b; }
static inline float rl_fma(float a, float b, float c) { return fmaf(a, b, c); }
static inline uint32_t rl_q16_w32(const uint8_t* p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}
static inline uint32_t rl_q16_funnel(uint32_t lo, uint32_t hi, int sh) {
    const uint64_t v = ((uint64_t)hi << 32) | lo;
    return (uint32_t)(v >> (sh & 31));
}
struct uint4 {
    uint32_t x, y, z, w;
};
static inline uint4 rl_q16_ld16(const uint8_t* p) {
    uint4 v;
    memcpy(&v, p, 16);
    return v;
}
static inline uint32_t rl_q16_h16(const uint8_t* p) {
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}
static inline float rl_q16_h2f(uint32_t h) { return rl_f16_to_f32(h); }
#endif

// One unit of quantized activations: values 2k, 2k+1 in q[k] (low, high
// halves, two's complement), then s[k] = Σ of values 8k .. 8k+7.
struct RL_ALIGN16 RlXU {
    uint32_t q[16];
    int32_t s[4];
};

// One unit of weights, unpacked: w[k] holds weights 4k .. 4k+3 as bytes;
// a0, a1 the scales (of the whole unit, or of its two halves); f type flags.
struct RlQW {
    uint32_t w[8];
    float a0, a1;
    uint32_t f;
};

// ---------------------------------------------------------------------------
// Activation quantization (per 32 values)
// ---------------------------------------------------------------------------

// Scale and inverse scale of a unit of largest magnitude amax; `bad` (a NaN
// among the values) makes the scale NaN, and an infinity makes it infinite,
// so the products come out NaN as f32 arithmetic would give them.
__device__ __forceinline__ void rl_q16_scales(float amax, bool bad, float* d, float* id) {
    if (amax > 0.0f && amax <= 3.402823466e38f) {
        *d = amax / RL_Q16_XMAX;
        *id = RL_Q16_XMAX / amax;
    } else {
        *d = amax > 0.0f ? amax : 0.0f;  // inf: the products become NaN
        *id = 0.0f;
    }
    if (bad) *d = rl_as_f32(0x7fc00000u);
}

// One value: round-half-even(v · id), clamped to ±32767.
__device__ __forceinline__ int rl_q16_val(float v, float id) {
    int q = rl_q16_round(v * id);
    q = q > 32767 ? 32767 : q;
    q = q < -32767 ? -32767 : q;
    return q;
}

// Two quantized values packed as one word of RlXU::q.
__device__ __forceinline__ uint32_t rl_q16_pack(int lo, int hi) {
    return ((uint32_t)lo & 0xffffu) | ((uint32_t)hi << 16);
}

// Eight consecutive values (v, already formed) of a unit of inverse scale
// id: their four packed words and their sum.
__device__ __forceinline__ int rl_q16_pack8(const float v[8], float id, uint32_t w[4]) {
    int q[8];
    int s = 0;
    RL_UNROLL
    for (int i = 0; i < 8; i++) {
        q[i] = rl_q16_val(v[i], id);
        s += q[i];
    }
    RL_UNROLL
    for (int i = 0; i < 4; i++) w[i] = rl_q16_pack(q[2 * i], q[2 * i + 1]);
    return s;
}

// The same into u's words 4h .. 4h+3 and its sum s[h] (h = which 8 of the
// unit's 32).
__device__ __forceinline__ void rl_q16_put8(const float v[8], float id, RlXU* u, int h) {
    uint32_t w[4];
    u->s[h] = rl_q16_pack8(v, id, w);
    for (int i = 0; i < 4; i++) u->q[4 * h + i] = w[i];
}

// Host (and reference) form: n values (a multiple of 32) into n / 32 units
// and their n / 32 scales.
__device__ __forceinline__ void rl_q16_quantize_ref(const float* x, int n, RlXU* u, float* d) {
    for (int b = 0; b < n / 32; b++) {
        float amax = 0.0f;
        bool bad = false;
        for (int i = 0; i < 32; i++) {
            const float v = x[32 * b + i];
            const float a = fabsf(v);
            amax = a > amax ? a : amax;
            bad = bad || (v != v);
        }
        float id;
        rl_q16_scales(amax, bad, &d[b], &id);
        for (int c = 0; c < 4; c++) rl_q16_put8(x + 32 * b + 8 * c, id, &u[b], c);
    }
}

// ---------------------------------------------------------------------------
// Weight units
// ---------------------------------------------------------------------------

// 32 bytes at p (2-byte aligned) as 8 words: aligned word loads and a funnel
// shift where p is not 4-byte aligned.
__device__ __forceinline__ void rl_q16_ld8w(const uint8_t* p, uint32_t w[8]) {
    const int sh = (int)((unsigned long long)p & 3u) * 8;
    const uint8_t* a = p - (sh >> 3);
    uint32_t r[9];
    RL_UNROLL
    for (int i = 0; i < 8; i++) r[i] = rl_q16_w32(a + 4 * i);
    r[8] = sh ? rl_q16_w32(a + 32) : 0u;
    RL_UNROLL
    for (int i = 0; i < 8; i++) w[i] = rl_q16_funnel(r[i], r[i + 1], sh);
}

// Σ over words k0 .. k1 of w (bytes) times the unit's activation pairs, in
// four independent dp2a chains (the low and high halves of even and odd
// words) added at the end: integer sums, exact, so the chains change no bit
// of the result and only shorten the dependent sequence a warp waits on.
__device__ __forceinline__ int rl_q16_isum(const RlQW& w, const RlXU& x, int k0, int k1) {
    int a0 = 0, a1 = 0, b0 = 0, b1 = 0;
    RL_UNROLL
    for (int k = k0; k < k1; k++) {
        if (((k - k0) & 1) == 0) {
            a0 = rl_dp2lo(x.q[2 * k], w.w[k], a0);
            b0 = rl_dp2hi(x.q[2 * k + 1], w.w[k], b0);
        } else {
            a1 = rl_dp2lo(x.q[2 * k], w.w[k], a1);
            b1 = rl_dp2hi(x.q[2 * k + 1], w.w[k], b1);
        }
    }
    return (a0 + a1) + (b0 + b1);
}

// Q4_K: unit j = sub-block j; weight = a0·q − a1 (q in 0..15).
#define Q16_UNITS_Q4_K 8
// The 16-byte head of a Q4_K / Q5_K block (d, dmin, the 12 scale bytes):
// scale and minimum of sub-block j as rl_scale_min_k4 gives them.
__device__ __forceinline__ void rl_q16_kscales(const uint4 h, int j, float* a, float* b) {
    const float d = rl_q16_h2f(h.x & 0xffffu);
    const float dmin = rl_q16_h2f(h.x >> 16);
    const int sh = 8 * (j & 3);
    const uint32_t A = (h.y >> sh) & 0xffu, B = (h.z >> sh) & 0xffu, E = (h.w >> sh) & 0xffu;
    const bool low = j < 4;
    const uint32_t sc = low ? (A & 63) : ((E & 15) | ((A >> 2) & 0x30));
    const uint32_t m = low ? (B & 63) : ((E >> 4) | ((B >> 2) & 0x30));
    *a = d * (float)sc;
    *b = dmin * (float)m;
}
// Eight words of nibbles: the low (sh 0) or high (sh 4) nibbles of two
// 16-byte vectors.
__device__ __forceinline__ void rl_q16_nib8(const uint4 a, const uint4 b, int sh, uint32_t w[8]) {
    w[0] = (a.x >> sh) & 0x0F0F0F0Fu; w[1] = (a.y >> sh) & 0x0F0F0F0Fu;
    w[2] = (a.z >> sh) & 0x0F0F0F0Fu; w[3] = (a.w >> sh) & 0x0F0F0F0Fu;
    w[4] = (b.x >> sh) & 0x0F0F0F0Fu; w[5] = (b.y >> sh) & 0x0F0F0F0Fu;
    w[6] = (b.z >> sh) & 0x0F0F0F0Fu; w[7] = (b.w >> sh) & 0x0F0F0F0Fu;
}
// Q4_K and Q5_K blocks are 16-byte aligned where the kernels read them.
__device__ __forceinline__ void q16p_Q4_K(const uint8_t* blk, int j, RlQW& w, const uint8_t*) {
    rl_q16_kscales(rl_q16_ld16(blk), j, &w.a0, &w.a1);
    const uint8_t* q = blk + 16 + 32 * (j >> 1);
    rl_q16_nib8(rl_q16_ld16(q), rl_q16_ld16(q + 16), 4 * (j & 1), w.w);
    w.f = 0;
}
__device__ __forceinline__ float q16a_Q4_K(const RlQW& w, const RlXU& x) {
    const int s = rl_q16_isum(w, x, 0, 8);
    const int sx = x.s[0] + x.s[1] + x.s[2] + x.s[3];
    return rl_fma(w.a0, (float)s, -rl_mul(w.a1, (float)sx));
}

// Q5_K: as Q4_K with the fifth bit from qh (bit j of byte i).
#define Q16_UNITS_Q5_K 8
__device__ __forceinline__ void q16p_Q5_K(const uint8_t* blk, int j, RlQW& w, const uint8_t*) {
    rl_q16_kscales(rl_q16_ld16(blk), j, &w.a0, &w.a1);
    const uint8_t* q = blk + 48 + 32 * (j >> 1);
    rl_q16_nib8(rl_q16_ld16(q), rl_q16_ld16(q + 16), 4 * (j & 1), w.w);
    const uint4 h0 = rl_q16_ld16(blk + 16), h1 = rl_q16_ld16(blk + 32);
    const uint32_t hw[8] = {h0.x, h0.y, h0.z, h0.w, h1.x, h1.y, h1.z, h1.w};
    RL_UNROLL
    for (int k = 0; k < 8; k++) w.w[k] |= ((hw[k] >> j) & 0x01010101u) << 4;
    w.f = 0;
}
__device__ __forceinline__ float q16a_Q5_K(const RlQW& w, const RlXU& x) {
    return q16a_Q4_K(w, x);
}

// Q6_K: unit u covers values 32u .. 32u+31; weight = a·(q − 32), q in 0..63,
// a scale per 16 values. Blocks are 2-byte aligned.
#define Q16_UNITS_Q6_K 8
__device__ __forceinline__ void q16p_Q6_K(const uint8_t* blk, int u, RlQW& w, const uint8_t*) {
    const float d = rl_q16_h2f(rl_q16_h16(blk + 208));
    const int n = u >> 2;
    uint32_t l[8], h[8];
    rl_q16_ld8w(blk + 64 * n + 32 * (u & 1), l);
    rl_q16_ld8w(blk + 128 + 32 * n, h);
    const int shl = 4 * ((u >> 1) & 1);
    const int shh = 2 * (u & 3);
    RL_UNROLL
    for (int k = 0; k < 8; k++)
        w.w[k] = ((l[k] >> shl) & 0x0F0F0F0Fu) | (((h[k] >> shh) & 0x03030303u) << 4);
    const uint32_t sc = rl_q16_h16(blk + 192 + 2 * u);
    w.a0 = d * (float)(int8_t)(uint8_t)(sc & 0xffu);
    w.a1 = d * (float)(int8_t)(uint8_t)(sc >> 8);
    w.f = 0;
}
__device__ __forceinline__ float q16a_Q6_K(const RlQW& w, const RlXU& x) {
    const int s0 = rl_q16_isum(w, x, 0, 4) - 32 * (x.s[0] + x.s[1]);
    const int s1 = rl_q16_isum(w, x, 4, 8) - 32 * (x.s[2] + x.s[3]);
    return rl_fma(w.a0, (float)s0, rl_mul(w.a1, (float)s1));
}

// Q8_0: the unit is the block (signed bytes, one f16 scale). 2-byte aligned.
#define Q16_UNITS_Q8_0 1
__device__ __forceinline__ void q16p_Q8_0(const uint8_t* blk, int u, RlQW& w, const uint8_t*) {
    (void)u;
    rl_q16_ld8w(blk + 2, w.w);
    w.a0 = rl_q16_h2f(rl_q16_h16(blk));
    w.a1 = 0.0f;
    w.f = 0;
}
__device__ __forceinline__ float q16a_Q8_0(const RlQW& w, const RlXU& x) {
    return rl_mul(w.a0, (float)rl_q16_isum(w, x, 0, 8));
}

// IQ1_M: unit ib = sub-block ib, four 8-groups of grid values g in {-1, 0,
// 1} shifted by ±1/8: weight = dl·(g ± 1/8) = (dl / 8)·(8g ± 1), dl per 16.
// The bytes hold g + 1 (0, 1, 2; the apply step takes the group sums back
// off), from the u64 grid (tab null) or from a shared-memory copy of it as
// 2-bit codes (q16_tab_IQ1_M). f bit l: group l's shift is negative.
// Blocks are 8-byte aligned.
#define Q16_UNITS_IQ1_M 8
// The grid's bytes (−1, 0, 1) as g + 1 (no carry: (b ^ 0x80) − 0x7f per byte).
__device__ __forceinline__ uint32_t rl_q16_inc4(uint32_t g) {
    return (g ^ 0x80808080u) - 0x7F7F7F7Fu;
}
// Shared-memory tables of IQ1_M: the 2048 grid entries as 16-bit codes
// (value i + 1 in bits 2i, 2i + 1: rl_iq1s_grid2), then 256 words spreading
// a code byte's four values into four bytes.
#define Q16_TAB_IQ1_M (2048 * 2 + 256 * 4)
__device__ __forceinline__ uint32_t rl_q16_spread4(uint32_t c) {
    return (c & 3u) | ((c & 0xCu) << 6) | ((c & 0x30u) << 12) | ((c & 0xC0u) << 18);
}
__device__ __forceinline__ void q16_tab_IQ1_M(uint8_t* tab, int tid, int nth) {
    uint16_t* codes = (uint16_t*)tab;
    uint32_t* spread = (uint32_t*)(tab + 4096);
    for (int i = tid; i < 2048; i += nth) codes[i] = rl_iq1s_grid2[i];
    for (int i = tid; i < 256; i += nth) spread[i] = rl_q16_spread4((uint32_t)i);
}
__device__ __forceinline__ void q16p_IQ1_M(const uint8_t* blk, int ib, RlQW& w,
                                           const uint8_t* tab) {
    const uint32_t s01 = rl_q16_w32(blk + 48), s23 = rl_q16_w32(blk + 52);
    const uint32_t s0 = s01 & 0xffffu, s1 = s01 >> 16, s2 = s23 & 0xffffu, s3 = s23 >> 16;
    const float d = rl_q16_h2f(rl_iq1m_dbits(s0, s1, s2, s3));
    const uint32_t sw = (ib >> 1) == 0 ? s0 : (ib >> 1) == 1 ? s1 : (ib >> 1) == 2 ? s2 : s3;
    const int sh = 6 * (ib & 1);
    w.a0 = d * (float)(2 * ((sw >> sh) & 7) + 1) * 0.125f;
    w.a1 = d * (float)(2 * ((sw >> (sh + 3)) & 7) + 1) * 0.125f;
    const uint32_t qs = rl_q16_w32(blk + 4 * ib);
    const uint32_t qh = rl_q16_h16(blk + 32 + 2 * ib);
    uint32_t f = 0;
    RL_UNROLL
    for (int l = 0; l < 4; l++) {
        const uint32_t nib = qh >> (4 * l);
        const uint32_t idx = ((qs >> (8 * l)) & 0xffu) | ((nib & 7u) << 8);
        if (tab) {
            const uint32_t c = ((const uint16_t*)tab)[idx];
            const uint32_t* spread = (const uint32_t*)(tab + 4096);
            w.w[2 * l] = spread[c & 0xffu];
            w.w[2 * l + 1] = spread[c >> 8];
        } else {
            const uint64_t g = rl_iq1s_grid[idx];
            w.w[2 * l] = rl_q16_inc4((uint32_t)g);
            w.w[2 * l + 1] = rl_q16_inc4((uint32_t)(g >> 32));
        }
        f |= ((nib >> 3) & 1u) << l;
    }
    w.f = f;
}
__device__ __forceinline__ float q16a_IQ1_M(const RlQW& w, const RlXU& x) {
    int t[4];
    RL_UNROLL
    for (int l = 0; l < 4; l++) {
        const int s = rl_q16_isum(w, x, 2 * l, 2 * l + 2) - x.s[l];
        t[l] = 8 * s + (((w.f >> l) & 1u) ? -x.s[l] : x.s[l]);
    }
    return rl_fma(w.a0, (float)(t[0] + t[1]), rl_mul(w.a1, (float)(t[2] + t[3])));
}

// IQ2_XS: unit ib = sub-block ib, four 8-groups of grid magnitudes with
// signs; weight = db·(±g), db = d·(0.5 + sc)·0.25 per 16. The signs are
// folded into the bytes (two's complement; no carry crosses a byte as every
// magnitude is 1..127). Blocks are 2-byte aligned.
#define Q16_UNITS_IQ2_XS 8
// The four sign bits b (bit i: byte i negative) as 0x01 bytes.
__device__ __forceinline__ uint32_t rl_q16_ones4(uint32_t b) {
    return (b * 0x00204081u) & 0x01010101u;
}
__device__ __forceinline__ uint32_t rl_q16_signed4(uint32_t g, uint32_t b) {
    const uint32_t one = rl_q16_ones4(b);
    return (g ^ (one * 0xffu)) + one;
}
// Shared-memory tables of IQ2_XS: the grid, then the sign patterns.
#define Q16_TAB_IQ2_XS (512 * 8 + 128)
__device__ __forceinline__ void q16_tab_IQ2_XS(uint8_t* tab, int tid, int nth) {
    uint64_t* grid = (uint64_t*)tab;
    for (int i = tid; i < 512; i += nth) grid[i] = rl_iq2xs_grid[i];
    for (int i = tid; i < 128; i += nth) tab[4096 + i] = rl_ksigns_iq2xs[i];
}
__device__ __forceinline__ void q16p_IQ2_XS(const uint8_t* blk, int ib, RlQW& w,
                                            const uint8_t* tab) {
    const uint64_t* grid = tab ? (const uint64_t*)tab : rl_iq2xs_grid;
    const uint8_t* signs = tab ? tab + 4096 : rl_ksigns_iq2xs;
    const float d = rl_q16_h2f(rl_q16_h16(blk));
    const uint32_t sc = blk[66 + ib];
    w.a0 = d * (0.5f + (float)(sc & 15u)) * 0.25f;
    w.a1 = d * (0.5f + (float)(sc >> 4)) * 0.25f;
    RL_UNROLL
    for (int l = 0; l < 4; l++) {
        const uint32_t q = rl_q16_h16(blk + 2 + 8 * ib + 2 * l);
        const uint64_t g = grid[q & 511u];
        const uint32_t s = signs[q >> 9];
        w.w[2 * l] = rl_q16_signed4((uint32_t)g, s & 15u);
        w.w[2 * l + 1] = rl_q16_signed4((uint32_t)(g >> 32), s >> 4);
    }
    w.f = 0;
}
__device__ __forceinline__ float q16a_IQ2_XS(const RlQW& w, const RlXU& x) {
    const int s0 = rl_q16_isum(w, x, 0, 4);
    const int s1 = rl_q16_isum(w, x, 4, 8);
    return rl_fma(w.a0, (float)s0, rl_mul(w.a1, (float)s1));
}

// The other types have no tables.
#define Q16_TAB_Q8_0 0
#define Q16_TAB_Q4_K 0
#define Q16_TAB_Q5_K 0
#define Q16_TAB_Q6_K 0
__device__ __forceinline__ void q16_tab_Q8_0(uint8_t*, int, int) {}
__device__ __forceinline__ void q16_tab_Q4_K(uint8_t*, int, int) {}
__device__ __forceinline__ void q16_tab_Q5_K(uint8_t*, int, int) {}
__device__ __forceinline__ void q16_tab_Q6_K(uint8_t*, int, int) {}

// The types with integer kernels, as X(T).
#define REDLITE_Q16_TYPES(X) X(Q8_0) X(Q4_K) X(Q5_K) X(Q6_K) X(IQ1_M) X(IQ2_XS)

#endif
