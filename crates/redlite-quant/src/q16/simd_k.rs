//! AVX2 unpackers of the K-quants and Q8_0, bit-identical to the scalar
//! twins in `mod.rs`: integer widening and multiplies only, and the same
//! f32 products for the scales.
//!
//! They are `#[inline(always)]` without target features of their own: they
//! are inlined into the drivers (and the `unpack_fast` wrappers), which
//! enable AVX2, FMA and F16C, so the unpacked block can stay in registers.

use super::Unpacked;
use crate::kquants::scale_min_k4;
use crate::kquants::simd::bit_to;
use crate::util::f16_ptr;
use std::arch::x86_64::*;

/// Widen 16 signed bytes to i16 and multiply by `sc`.
#[inline(always)]
unsafe fn w16_i8(v: __m128i, sc: __m256i) -> __m256i {
    _mm256_mullo_epi16(_mm256_cvtepi8_epi16(v), sc)
}

/// [`w16_i8`], stored at `dst`.
#[inline(always)]
unsafe fn put16_i8(dst: *mut i16, v: __m128i, sc: __m256i) {
    _mm256_store_si256(dst as *mut __m256i, w16_i8(v, sc));
}

/// Widen 32 unsigned bytes (values < 128) to i16, multiply by `sc`, store
/// 32 values at `dst`.
#[inline(always)]
unsafe fn put32_u8(dst: *mut i16, v: __m256i, sc: __m256i) {
    let lo = _mm256_cvtepu8_epi16(_mm256_castsi256_si128(v));
    let hi = _mm256_cvtepu8_epi16(_mm256_extracti128_si256::<1>(v));
    _mm256_store_si256(dst as *mut __m256i, _mm256_mullo_epi16(lo, sc));
    _mm256_store_si256(dst.add(16) as *mut __m256i, _mm256_mullo_epi16(hi, sc));
}

/// `m_k = dmin · min_k` for the eight sub-blocks, `s = d`.
#[inline(always)]
unsafe fn scales_k(u: &mut Unpacked, d: f32, dmin: f32, m: &[u8; 8]) {
    let mv = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(
        m.as_ptr() as *const __m128i
    )));
    _mm256_store_ps(u.m.as_mut_ptr(), _mm256_mul_ps(_mm256_set1_ps(dmin), mv));
    _mm256_store_ps(u.s.as_mut_ptr(), _mm256_set1_ps(d));
}

/// # Safety
/// The CPU must have AVX2, FMA and F16C; `blk` holds eight Q8_0 blocks (272 bytes).
#[inline(always)]
pub unsafe fn unpack_q8_0(blk: &[u8], u: &mut Unpacked) {
    assert!(blk.len() >= 272);
    let p = blk.as_ptr();
    let one = _mm256_set1_epi16(1);
    for j in 0..8 {
        let b = p.add(34 * j);
        u.s[j] = f16_ptr(b);
        let v0 = _mm_loadu_si128(b.add(2) as *const __m128i);
        let v1 = _mm_loadu_si128(b.add(18) as *const __m128i);
        put16_i8(u.w.as_mut_ptr().add(32 * j), v0, one);
        put16_i8(u.w.as_mut_ptr().add(32 * j + 16), v1, one);
    }
    u.m = [0.0; 8];
}

/// # Safety
/// The CPU must have AVX2, FMA and F16C; `blk` holds one Q4_K block (144 bytes).
#[inline(always)]
pub unsafe fn unpack_q4_k(blk: &[u8], u: &mut Unpacked) {
    assert!(blk.len() >= 144);
    let p = blk.as_ptr();
    let (sc, m) = scale_min_k4(&blk[4..16]);
    scales_k(u, f16_ptr(p), f16_ptr(p.add(2)), &m);
    let m4 = _mm256_set1_epi8(0x0F);
    let w = u.w.as_mut_ptr();
    for j in 0..4 {
        let v = _mm256_loadu_si256(p.add(16 + 32 * j) as *const __m256i);
        let lo = _mm256_and_si256(v, m4);
        let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(v), m4);
        put32_u8(w.add(64 * j), lo, _mm256_set1_epi16(sc[2 * j] as i16));
        put32_u8(
            w.add(64 * j + 32),
            hi,
            _mm256_set1_epi16(sc[2 * j + 1] as i16),
        );
    }
}

/// # Safety
/// The CPU must have AVX2, FMA and F16C; `blk` holds one Q5_K block (176 bytes).
#[inline(always)]
pub unsafe fn unpack_q5_k(blk: &[u8], u: &mut Unpacked) {
    assert!(blk.len() >= 176);
    let p = blk.as_ptr();
    let (sc, m) = scale_min_k4(&blk[4..16]);
    scales_k(u, f16_ptr(p), f16_ptr(p.add(2)), &m);
    let m4 = _mm256_set1_epi8(0x0F);
    let qh = _mm256_loadu_si256(p.add(16) as *const __m256i);
    // The fifth bit of sub-block k: bit k of qh, moved to bit 4.
    let hbit = |k: usize| bit_to(qh, 1 << k, 16);
    let w = u.w.as_mut_ptr();
    for j in 0..4 {
        let v = _mm256_loadu_si256(p.add(48 + 32 * j) as *const __m256i);
        let lo = _mm256_or_si256(_mm256_and_si256(v, m4), hbit(2 * j));
        let hi = _mm256_or_si256(
            _mm256_and_si256(_mm256_srli_epi16::<4>(v), m4),
            hbit(2 * j + 1),
        );
        put32_u8(w.add(64 * j), lo, _mm256_set1_epi16(sc[2 * j] as i16));
        put32_u8(
            w.add(64 * j + 32),
            hi,
            _mm256_set1_epi16(sc[2 * j + 1] as i16),
        );
    }
}

/// The quants of values `128j .. 128j + 128` of the Q6_K block at `p` as
/// signed bytes `q − 32`, 32 values per register in order (register `s`:
/// values `128j + 32s ..`).
///
/// # Safety
/// AVX2; `p` points at a whole Q6_K block (210 bytes); `j < 2`.
#[inline(always)]
unsafe fn q6_regs(p: *const u8, j: usize) -> [__m256i; 4] {
    let m4 = _mm256_set1_epi8(0x0F);
    let m30 = _mm256_set1_epi8(0x30);
    let m32 = _mm256_set1_epi8(32);
    let l0 = _mm256_loadu_si256(p.add(64 * j) as *const __m256i);
    let l1 = _mm256_loadu_si256(p.add(64 * j + 32) as *const __m256i);
    let h = _mm256_loadu_si256(p.add(128 + 32 * j) as *const __m256i);
    let h0 = _mm256_and_si256(_mm256_slli_epi16::<4>(h), m30);
    let h1 = _mm256_and_si256(_mm256_slli_epi16::<2>(h), m30);
    let h2 = _mm256_and_si256(h, m30);
    let h3 = _mm256_and_si256(_mm256_srli_epi16::<2>(h), m30);
    [
        _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(l0, m4), h0), m32),
        _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(l1, m4), h1), m32),
        _mm256_sub_epi8(
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(l0), m4), h2),
            m32,
        ),
        _mm256_sub_epi8(
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(l1), m4), h3),
            m32,
        ),
    ]
}

/// # Safety
/// The CPU must have AVX2, FMA and F16C; `blk` holds one Q6_K block (210 bytes).
#[inline(always)]
pub unsafe fn unpack_q6_k(blk: &[u8], u: &mut Unpacked) {
    assert!(blk.len() >= 210);
    let p = blk.as_ptr();
    let d = f16_ptr(p.add(208));
    let sc = p.add(192) as *const i8;
    let w = u.w.as_mut_ptr();
    for j in 0..2 {
        for (s, qs) in q6_regs(p, j).iter().enumerate() {
            // Values 128j + 32s .. +32: groups of 16 with their own scale.
            let e = 128 * j + 32 * s;
            let g = e / 16;
            put16_i8(
                w.add(e),
                _mm256_castsi256_si128(*qs),
                _mm256_set1_epi16(*sc.add(g) as i16),
            );
            put16_i8(
                w.add(e + 16),
                _mm256_extracti128_si256::<1>(*qs),
                _mm256_set1_epi16(*sc.add(g + 1) as i16),
            );
        }
    }
    u.s = [d; 8];
    u.m = [0.0; 8];
}

/// Q6_K against one token's activations with the unpack fused in: the
/// weights `sc_g · (q − 32)` of [`unpack_q6_k`] are built in registers and
/// go straight into `vpmaddwd` instead of through a stored block (the
/// generic driver, [`super::x86::dot_avx2`], writes and rereads 512 bytes
/// a block). Every 32-bit lane of the two integer chains (the first and
/// second 16 values of each 32) receives the generic driver's products, and
/// the f32 steps are its own (`cvt(is0) + cvt(is1)`, times `d · dx`, added
/// block by block), so the result is the generic driver's bit for bit.
///
/// # Safety
/// AVX2, FMA and F16C; `data` whole 210-byte blocks, `x.q` and `x.d` at
/// least as many blocks of activations (the caller checks the sizes).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_q6_k_avx2(data: &[u8], x: super::Q16Ref<'_>) -> f32 {
    const BYTES: usize = 210;
    let nb = data.len() / BYTES;
    let mut acc = _mm256_setzero_ps();
    for bi in 0..nb {
        super::x86::prefetch_ahead(data, bi * BYTES, BYTES);
        let p = data.as_ptr().add(bi * BYTES);
        let sc = p.add(192) as *const i8;
        let xq = x.q.as_ptr().add(bi * super::QK);
        let mut is0 = _mm256_setzero_si256();
        let mut is1 = _mm256_setzero_si256();
        for j in 0..2 {
            for (s, qs) in q6_regs(p, j).iter().enumerate() {
                let e = 128 * j + 32 * s;
                let g = e / 16;
                let w0 = w16_i8(
                    _mm256_castsi256_si128(*qs),
                    _mm256_set1_epi16(*sc.add(g) as i16),
                );
                let w1 = w16_i8(
                    _mm256_extracti128_si256::<1>(*qs),
                    _mm256_set1_epi16(*sc.add(g + 1) as i16),
                );
                let x0 = _mm256_loadu_si256(xq.add(e) as *const __m256i);
                let x1 = _mm256_loadu_si256(xq.add(e + 16) as *const __m256i);
                is0 = _mm256_add_epi32(is0, _mm256_madd_epi16(w0, x0));
                is1 = _mm256_add_epi32(is1, _mm256_madd_epi16(w1, x1));
            }
        }
        let d = f16_ptr(p.add(208));
        let dx = *x.d.get_unchecked(bi);
        let is = _mm256_add_ps(_mm256_cvtepi32_ps(is0), _mm256_cvtepi32_ps(is1));
        acc = _mm256_fmadd_ps(is, _mm256_set1_ps(d * dx), acc);
    }
    crate::util::hsum256(acc)
}
