#![allow(non_upper_case_globals)]
//! MXFP4 (OCP microscaling FP4): `block_mxfp4 { u8 e; u8 qs[16]; }`, 32 elements.
//!
//! `e` is an E8M0 exponent; the scale is `ggml_e8m0_to_fp32_half(e)` (half of
//! 2^(e-127)) and each 4-bit code indexes the E2M1 values doubled
//! (`kvalues_mxfp4`). Element `j < 16` is the low nibble of `qs[j]`, element
//! `j + 16` its high nibble.

use crate::util::{dequant_blocks, dot_via_dequant};
use crate::{GgmlType, TypeKernels};

pub static MXFP4: TypeKernels = TypeKernels {
    ty: GgmlType::MXFP4,
    dequant: dequant_mxfp4,
    dot_scalar: dot_mxfp4,
    dot_avx2: MXFP4_AVX2,
    dot_avx512: MXFP4_AVX512,
};

#[cfg(target_arch = "x86_64")]
const MXFP4_AVX2: Option<crate::DotFn> = Some(simd::dot_mxfp4_avx2);
#[cfg(target_arch = "x86_64")]
const MXFP4_AVX512: Option<crate::DotFn> = Some(simd::dot_mxfp4_avx512);
#[cfg(not(target_arch = "x86_64"))]
const MXFP4_AVX2: Option<crate::DotFn> = None;
#[cfg(not(target_arch = "x86_64"))]
const MXFP4_AVX512: Option<crate::DotFn> = None;

/// E2M1 values times two.
pub const KVALUES_MXFP4: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

/// `ggml_e8m0_to_fp32_half`: 2^(e-128) as f32, subnormal for e < 2.
#[inline(always)]
pub fn e8m0_to_fp32_half(e: u8) -> f32 {
    let bits = if e < 2 {
        0x0020_0000u32 << e
    } else {
        ((e as u32) - 1) << 23
    };
    f32::from_bits(bits)
}

pub fn block_mxfp4(b: &[u8], out: &mut [f32; 32]) {
    let d = e8m0_to_fp32_half(b[0]);
    let qs = &b[1..17];
    for j in 0..16 {
        out[j] = d * KVALUES_MXFP4[(qs[j] & 0x0F) as usize] as f32;
        out[j + 16] = d * KVALUES_MXFP4[(qs[j] >> 4) as usize] as f32;
    }
}
pub fn dequant_mxfp4(data: &[u8], out: &mut [f32]) {
    dequant_blocks(data, out, 17, block_mxfp4)
}
pub fn dot_mxfp4(data: &[u8], x: &[f32]) -> f32 {
    dot_via_dequant(data, x, 17, block_mxfp4)
}

/// AVX2 / AVX-512 dot products (the 32-element block machinery of
/// [`crate::legacy`]). Each weight is formed as `d·v` first, exactly as the
/// scalar twin does, so scales near the top of the E8M0 range overflow to
/// the same infinities in both.
#[cfg(target_arch = "x86_64")]
mod simd {
    use std::arch::x86_64::*;

    use super::{e8m0_to_fp32_half, KVALUES_MXFP4};
    use crate::legacy::x86::{block32_dot, nibbles32};

    /// Decode one MXFP4 block: the doubled E2M1 values of its 32 nibbles as
    /// signed bytes in element order, the scale, and a zero offset.
    ///
    /// # Safety
    /// `b` must be valid for reading one 17-byte block; AVX2.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn dec_mxfp4(b: *const u8) -> (__m256i, f32, f32) {
        let t = _mm_loadu_si128(KVALUES_MXFP4.as_ptr() as *const __m128i);
        let tab = _mm256_broadcastsi128_si256(t);
        let q = _mm256_shuffle_epi8(tab, nibbles32(b.add(1)));
        (q, e8m0_to_fp32_half(*b), 0.0)
    }

    block32_dot!(
        dot_mxfp4_avx2,
        dot_mxfp4_avx512,
        17,
        dec_mxfp4,
        true,
        super::dot_mxfp4
    );
}
