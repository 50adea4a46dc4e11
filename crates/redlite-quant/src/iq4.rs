#![allow(non_upper_case_globals)]
//! Non-linear 4-bit types: IQ4_NL (32-element blocks) and IQ4_XS (256).
//!
//! Layouts (ggml-common.h): `block_iq4_nl { f16 d; u8 qs[16]; }` and
//! `block_iq4_xs { f16 d; u16 scales_h; u8 scales_l[4]; u8 qs[128]; }`.
//! Each 4-bit index selects a value of `KVALUES_IQ4NL`; in a 32-element
//! (sub-)block element `j < 16` is the low nibble of byte `j`, element
//! `j + 16` its high nibble. IQ4_XS sub-block `ib` has the 6-bit scale
//! `(scales_l nibble ib) | (bits 2ib..2ib+1 of scales_h) << 4`, minus 32.

use crate::util::{dequant_blocks, dot_via_dequant, f16_at, u16_at};
use crate::{GgmlType, TypeKernels};

pub static IQ4_NL: TypeKernels = TypeKernels {
    ty: GgmlType::IQ4_NL,
    dequant: dequant_iq4_nl,
    dot_scalar: dot_iq4_nl,
    dot_avx2: IQ4_NL_AVX2,
    dot_avx512: IQ4_NL_AVX512,
};
pub static IQ4_XS: TypeKernels = TypeKernels {
    ty: GgmlType::IQ4_XS,
    dequant: dequant_iq4_xs,
    dot_scalar: dot_iq4_xs,
    dot_avx2: IQ4_XS_AVX2,
    dot_avx512: IQ4_XS_AVX512,
};

#[cfg(target_arch = "x86_64")]
const IQ4_XS_AVX2: Option<crate::DotFn> = Some(simd::dot_iq4_xs_avx2);
#[cfg(target_arch = "x86_64")]
const IQ4_XS_AVX512: Option<crate::DotFn> = Some(simd::dot_iq4_xs_avx512);
#[cfg(target_arch = "x86_64")]
const IQ4_NL_AVX2: Option<crate::DotFn> = Some(simd::dot_iq4_nl_avx2);
#[cfg(target_arch = "x86_64")]
const IQ4_NL_AVX512: Option<crate::DotFn> = Some(simd::dot_iq4_nl_avx512);
#[cfg(not(target_arch = "x86_64"))]
const IQ4_NL_AVX2: Option<crate::DotFn> = None;
#[cfg(not(target_arch = "x86_64"))]
const IQ4_NL_AVX512: Option<crate::DotFn> = None;
#[cfg(not(target_arch = "x86_64"))]
const IQ4_XS_AVX2: Option<crate::DotFn> = None;
#[cfg(not(target_arch = "x86_64"))]
const IQ4_XS_AVX512: Option<crate::DotFn> = None;

/// The 16 values of the non-linear 4-bit grid (`kvalues_iq4nl`).
pub const KVALUES_IQ4NL: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

pub fn block_iq4_nl(b: &[u8], out: &mut [f32; 32]) {
    let d = f16_at(b, 0);
    let qs = &b[2..18];
    for j in 0..16 {
        out[j] = d * KVALUES_IQ4NL[(qs[j] & 0x0F) as usize] as f32;
        out[j + 16] = d * KVALUES_IQ4NL[(qs[j] >> 4) as usize] as f32;
    }
}
pub fn dequant_iq4_nl(data: &[u8], out: &mut [f32]) {
    dequant_blocks(data, out, 18, block_iq4_nl)
}
pub fn dot_iq4_nl(data: &[u8], x: &[f32]) -> f32 {
    dot_via_dequant(data, x, 18, block_iq4_nl)
}

/// The signed 6-bit scale of IQ4_XS sub-block `ib` (0..8).
#[inline(always)]
pub fn scale_iq4_xs(b: &[u8], ib: usize) -> i8 {
    let sh = u16_at(b, 2);
    let lo = (b[4 + ib / 2] >> (4 * (ib % 2))) & 0x0F;
    let hi = ((sh >> (2 * ib)) & 3) as u8;
    (lo | (hi << 4)) as i8 - 32
}

pub fn block_iq4_xs(b: &[u8], out: &mut [f32; 256]) {
    let d = f16_at(b, 0);
    let qs = &b[8..136];
    for ib in 0..8 {
        let dl = d * scale_iq4_xs(b, ib) as f32;
        let q = &qs[16 * ib..16 * ib + 16];
        let o = &mut out[32 * ib..32 * ib + 32];
        for j in 0..16 {
            o[j] = dl * KVALUES_IQ4NL[(q[j] & 0x0F) as usize] as f32;
            o[j + 16] = dl * KVALUES_IQ4NL[(q[j] >> 4) as usize] as f32;
        }
    }
}
pub fn dequant_iq4_xs(data: &[u8], out: &mut [f32]) {
    dequant_blocks(data, out, 136, block_iq4_xs)
}
pub fn dot_iq4_xs(data: &[u8], x: &[f32]) -> f32 {
    dot_via_dequant(data, x, 136, block_iq4_xs)
}

#[cfg(target_arch = "x86_64")]
mod simd {
    use std::arch::x86_64::*;

    use super::{scale_iq4_xs, KVALUES_IQ4NL};
    use crate::kquants::simd::{kdot, Dec};
    use crate::legacy::x86::{block32_dot, nibbles32};
    use crate::util::f16_ptr;

    /// Decode one IQ4_XS block (136 bytes, guaranteed by chunks_exact).
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn dec_iq4_xs(blk: &[u8], dec: &mut Dec) {
        for ib in 0..8 {
            let s = scale_iq4_xs(blk, ib);
            dec.sc[2 * ib] = s;
            dec.sc[2 * ib + 1] = s;
        }
        dec.mn = [0; 16];
        dec.d = f16_ptr(blk.as_ptr());
        dec.dmin = 0.0;
        let t = _mm_loadu_si128(KVALUES_IQ4NL.as_ptr() as *const __m128i);
        let tab = _mm256_broadcastsi128_si256(t);
        let m4 = _mm256_set1_epi8(0x0F);
        let qs = &blk[8..136];
        for p in 0..4 {
            let v = _mm256_loadu_si256(qs[32 * p..32 * p + 32].as_ptr() as *const __m256i);
            let lo = _mm256_shuffle_epi8(tab, _mm256_and_si256(v, m4));
            let hi = _mm256_shuffle_epi8(tab, _mm256_and_si256(_mm256_srli_epi16::<4>(v), m4));
            let a = _mm256_permute2x128_si256::<0x20>(lo, hi);
            let b = _mm256_permute2x128_si256::<0x31>(lo, hi);
            let out = &mut dec.q[64 * p..64 * p + 64];
            _mm256_storeu_si256(out.as_mut_ptr() as *mut __m256i, a);
            _mm256_storeu_si256(out.as_mut_ptr().add(32) as *mut __m256i, b);
        }
    }

    kdot!(
        dot_iq4_xs_avx2,
        dot_iq4_xs_avx512,
        dec_iq4_xs,
        136,
        false,
        super::dot_iq4_xs
    );

    /// Decode one IQ4_NL block: the grid values of its 32 nibbles as signed
    /// bytes in element order, and `d`.
    ///
    /// # Safety
    /// `b` must be valid for reading one 18-byte block; AVX2 and F16C.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn dec_iq4_nl(b: *const u8) -> (__m256i, f32, f32) {
        let t = _mm_loadu_si128(KVALUES_IQ4NL.as_ptr() as *const __m128i);
        let tab = _mm256_broadcastsi128_si256(t);
        let q = _mm256_shuffle_epi8(tab, nibbles32(b.add(2)));
        (q, f16_ptr(b), 0.0)
    }

    block32_dot!(
        dot_iq4_nl_avx2,
        dot_iq4_nl_avx512,
        18,
        dec_iq4_nl,
        false,
        super::dot_iq4_nl
    );
}
