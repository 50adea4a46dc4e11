#![allow(non_upper_case_globals)]
//! The FP4 (E2M1) formats.
//!
//! MXFP4 (OCP microscaling FP4): `block_mxfp4 { u8 e; u8 qs[16]; }`, 32
//! elements. `e` is an E8M0 exponent; the scale is
//! `ggml_e8m0_to_fp32_half(e)` (half of 2^(e-127)) and each 4-bit code
//! indexes the E2M1 values doubled (`kvalues_mxfp4`). Element `j < 16` is the
//! low nibble of `qs[j]`, element `j + 16` its high nibble.
//!
//! NVFP4: `block_nvfp4 { u8 d[4]; u8 qs[32]; }`, 64 elements in four
//! sub-blocks of 16. Sub-block `s` has the scale `ggml_ue4m3_to_fp32(d[s])`
//! (an unsigned E4M3 value, halved to match the doubled E2M1 codes) and the
//! codes `qs[8s..8s+8]`: element `16s + j` (`j < 8`) is the low nibble of
//! `qs[8s + j]`, element `16s + 8 + j` its high nibble. The per-tensor scale
//! NVIDIA checkpoints carry is not part of the block (ggml applies it as a
//! separate multiply), so it is not part of these kernels either.

use crate::util::{dequant_blocks, dot_via_dequant};
use crate::{GgmlType, TypeKernels};

pub static MXFP4: TypeKernels = TypeKernels {
    ty: GgmlType::MXFP4,
    dequant: dequant_mxfp4,
    dot_scalar: dot_mxfp4,
    dot_avx2: MXFP4_AVX2,
    dot_avx512: MXFP4_AVX512,
};

pub static NVFP4: TypeKernels = TypeKernels {
    ty: GgmlType::NVFP4,
    dequant: dequant_nvfp4,
    dot_scalar: dot_nvfp4,
    dot_avx2: NVFP4_AVX2,
    dot_avx512: NVFP4_AVX512,
};

#[cfg(target_arch = "x86_64")]
const NVFP4_AVX2: Option<crate::DotFn> = Some(simd::dot_nvfp4_avx2);
#[cfg(target_arch = "x86_64")]
const NVFP4_AVX512: Option<crate::DotFn> = Some(simd::dot_nvfp4_avx512);
#[cfg(not(target_arch = "x86_64"))]
const NVFP4_AVX2: Option<crate::DotFn> = None;
#[cfg(not(target_arch = "x86_64"))]
const NVFP4_AVX512: Option<crate::DotFn> = None;

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

/// `ggml_ue4m3_to_fp32`: the unsigned E4M3 byte `x` (bit 7 ignored, except
/// that only 0x7F is the NaN code) times 0.5. 0 and 0x7F give 0. Every value
/// is exact in f32.
#[inline(always)]
pub fn ue4m3_to_fp32_half(x: u8) -> f32 {
    if x == 0 || x == 0x7F {
        return 0.0;
    }
    let exp = ((x >> 3) & 0x0F) as u32;
    let man = (x & 0x07) as u32;
    if exp == 0 {
        // man · 2^-9 · 0.5
        man as f32 * (1.0 / 1024.0)
    } else {
        // (1 + man/8) · 2^(exp-7) · 0.5
        f32::from_bits(((exp + 119) << 23) | (man << 20))
    }
}

pub fn block_nvfp4(b: &[u8], out: &mut [f32; 64]) {
    for s in 0..4 {
        let d = ue4m3_to_fp32_half(b[s]);
        let qs = &b[4 + 8 * s..12 + 8 * s];
        for j in 0..8 {
            out[16 * s + j] = KVALUES_MXFP4[(qs[j] & 0x0F) as usize] as f32 * d;
            out[16 * s + 8 + j] = KVALUES_MXFP4[(qs[j] >> 4) as usize] as f32 * d;
        }
    }
}
pub fn dequant_nvfp4(data: &[u8], out: &mut [f32]) {
    dequant_blocks(data, out, 36, block_nvfp4)
}
pub fn dot_nvfp4(data: &[u8], x: &[f32]) -> f32 {
    dot_via_dequant(data, x, 36, block_nvfp4)
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

    use super::{e8m0_to_fp32_half, ue4m3_to_fp32_half, KVALUES_MXFP4};
    use crate::legacy::x86::{block32_dot, nibbles32};
    use crate::util::{has_f16c, hsum256};

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

    /// The 16 codes of NVFP4 sub-block `s` of the block at `b`, as signed
    /// bytes (doubled E2M1 values) in element order.
    ///
    /// # Safety
    /// `b` must be valid for reading one 36-byte block, `s < 4`; AVX2.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn nvfp4_sub(b: *const u8, s: usize) -> __m128i {
        let tab = _mm_loadu_si128(KVALUES_MXFP4.as_ptr() as *const __m128i);
        let v = _mm_loadl_epi64(b.add(4 + 8 * s) as *const __m128i);
        let m4 = _mm_set1_epi8(0x0F);
        let lo = _mm_and_si128(v, m4);
        let hi = _mm_and_si128(_mm_srli_epi16::<4>(v), m4);
        _mm_shuffle_epi8(tab, _mm_unpacklo_epi64(lo, hi))
    }

    pub fn dot_nvfp4_avx2(data: &[u8], x: &[f32]) -> f32 {
        let n = (data.len() / 36).min(x.len() / 64);
        if !has_f16c() {
            return super::dot_nvfp4(data, x);
        }
        // SAFETY: lib.rs selects this kernel only when the CPU has AVX2 and
        // FMA; F16C (part of the helpers' feature set) was checked above;
        // `n` whole blocks and `64 * n` values are in bounds.
        unsafe { nvfp4_avx2(data.as_ptr(), x.as_ptr(), n) }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn nvfp4_avx2(mut b: *const u8, mut x: *const f32, n: usize) -> f32 {
        let mut acc = [_mm256_setzero_ps(); 2];
        for _ in 0..n {
            for s in 0..4 {
                let q = nvfp4_sub(b, s);
                let q0 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q));
                let q1 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128::<8>(q)));
                let xs = x.add(16 * s);
                let t = _mm256_fmadd_ps(
                    q1,
                    _mm256_loadu_ps(xs.add(8)),
                    _mm256_mul_ps(q0, _mm256_loadu_ps(xs)),
                );
                let d = _mm256_set1_ps(ue4m3_to_fp32_half(*b.add(s)));
                acc[s & 1] = _mm256_fmadd_ps(d, t, acc[s & 1]);
            }
            b = b.add(36);
            x = x.add(64);
        }
        hsum256(_mm256_add_ps(acc[0], acc[1]))
    }

    pub fn dot_nvfp4_avx512(data: &[u8], x: &[f32]) -> f32 {
        let n = (data.len() / 36).min(x.len() / 64);
        if !has_f16c() {
            return super::dot_nvfp4(data, x);
        }
        // SAFETY: lib.rs selects this kernel only when the CPU has AVX-512
        // F/BW/VL, AVX2 and FMA; F16C was checked above; `n` whole blocks
        // and `64 * n` values are in bounds.
        unsafe { nvfp4_avx512(data.as_ptr(), x.as_ptr(), n) }
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
    unsafe fn nvfp4_avx512(mut b: *const u8, mut x: *const f32, n: usize) -> f32 {
        let mut acc = [_mm512_setzero_ps(); 2];
        for _ in 0..n {
            for s in 0..4 {
                let q = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(nvfp4_sub(b, s)));
                let d = _mm512_set1_ps(ue4m3_to_fp32_half(*b.add(s)));
                acc[s & 1] = _mm512_fmadd_ps(
                    _mm512_mul_ps(q, d),
                    _mm512_loadu_ps(x.add(16 * s)),
                    acc[s & 1],
                );
            }
            b = b.add(36);
            x = x.add(64);
        }
        _mm512_reduce_add_ps(_mm512_add_ps(acc[0], acc[1]))
    }
}
