#![allow(non_upper_case_globals)]
//! Legacy 32-element blocks: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0.
//!
//! Layouts (ggml-common.h): `block_q4_0 { f16 d; u8 qs[16]; }`,
//! `block_q4_1 { f16 d, m; u8 qs[16]; }`, `block_q5_0 { f16 d; u8 qh[4]; u8 qs[16]; }`,
//! `block_q5_1 { f16 d, m; u8 qh[4]; u8 qs[16]; }`, `block_q8_0 { f16 d; i8 qs[32]; }`.
//! Element `j < 16` is the low nibble of `qs[j]`, element `j + 16` the high
//! nibble; for the 5-bit types bit `j` of the little-endian `qh` word is the
//! fifth bit of element `j`.

use crate::util::{dequant_blocks, dot_via_dequant, f16_at, u32_at};
use crate::{GgmlType, TypeKernels};

pub static Q4_0: TypeKernels = TypeKernels {
    ty: GgmlType::Q4_0,
    dequant: dequant_q4_0,
    dot_scalar: dot_q4_0,
    dot_avx2: X86_Q4_0_AVX2,
    dot_avx512: X86_Q4_0_AVX512,
};
pub static Q4_1: TypeKernels = TypeKernels {
    ty: GgmlType::Q4_1,
    dequant: dequant_q4_1,
    dot_scalar: dot_q4_1,
    dot_avx2: X86_Q4_1_AVX2,
    dot_avx512: X86_Q4_1_AVX512,
};
pub static Q5_0: TypeKernels = TypeKernels {
    ty: GgmlType::Q5_0,
    dequant: dequant_q5_0,
    dot_scalar: dot_q5_0,
    dot_avx2: X86_Q5_0_AVX2,
    dot_avx512: X86_Q5_0_AVX512,
};
pub static Q5_1: TypeKernels = TypeKernels {
    ty: GgmlType::Q5_1,
    dequant: dequant_q5_1,
    dot_scalar: dot_q5_1,
    dot_avx2: X86_Q5_1_AVX2,
    dot_avx512: X86_Q5_1_AVX512,
};
pub static Q8_0: TypeKernels = TypeKernels {
    ty: GgmlType::Q8_0,
    dequant: dequant_q8_0,
    dot_scalar: dot_q8_0,
    dot_avx2: X86_Q8_0_AVX2,
    dot_avx512: X86_Q8_0_AVX512,
};

#[cfg(target_arch = "x86_64")]
const X86_Q4_0_AVX2: Option<crate::DotFn> = Some(x86::dot_q4_0_avx2);
#[cfg(target_arch = "x86_64")]
const X86_Q4_0_AVX512: Option<crate::DotFn> = Some(x86::dot_q4_0_avx512);
#[cfg(target_arch = "x86_64")]
const X86_Q8_0_AVX2: Option<crate::DotFn> = Some(x86::dot_q8_0_avx2);
#[cfg(target_arch = "x86_64")]
const X86_Q8_0_AVX512: Option<crate::DotFn> = Some(x86::dot_q8_0_avx512);
#[cfg(not(target_arch = "x86_64"))]
const X86_Q4_0_AVX2: Option<crate::DotFn> = None;
#[cfg(not(target_arch = "x86_64"))]
const X86_Q4_0_AVX512: Option<crate::DotFn> = None;
#[cfg(not(target_arch = "x86_64"))]
const X86_Q8_0_AVX2: Option<crate::DotFn> = None;
#[cfg(not(target_arch = "x86_64"))]
const X86_Q8_0_AVX512: Option<crate::DotFn> = None;
#[cfg(target_arch = "x86_64")]
const X86_Q4_1_AVX2: Option<crate::DotFn> = Some(x86::dot_q4_1_avx2);
#[cfg(target_arch = "x86_64")]
const X86_Q4_1_AVX512: Option<crate::DotFn> = Some(x86::dot_q4_1_avx512);
#[cfg(not(target_arch = "x86_64"))]
const X86_Q4_1_AVX2: Option<crate::DotFn> = None;
#[cfg(not(target_arch = "x86_64"))]
const X86_Q4_1_AVX512: Option<crate::DotFn> = None;
#[cfg(target_arch = "x86_64")]
const X86_Q5_0_AVX2: Option<crate::DotFn> = Some(x86::dot_q5_0_avx2);
#[cfg(target_arch = "x86_64")]
const X86_Q5_0_AVX512: Option<crate::DotFn> = Some(x86::dot_q5_0_avx512);
#[cfg(not(target_arch = "x86_64"))]
const X86_Q5_0_AVX2: Option<crate::DotFn> = None;
#[cfg(not(target_arch = "x86_64"))]
const X86_Q5_0_AVX512: Option<crate::DotFn> = None;
#[cfg(target_arch = "x86_64")]
const X86_Q5_1_AVX2: Option<crate::DotFn> = Some(x86::dot_q5_1_avx2);
#[cfg(target_arch = "x86_64")]
const X86_Q5_1_AVX512: Option<crate::DotFn> = Some(x86::dot_q5_1_avx512);
#[cfg(not(target_arch = "x86_64"))]
const X86_Q5_1_AVX2: Option<crate::DotFn> = None;
#[cfg(not(target_arch = "x86_64"))]
const X86_Q5_1_AVX512: Option<crate::DotFn> = None;

const QK: usize = 32;

// ---- Q4_0: d * (q - 8) ----

pub fn block_q4_0(b: &[u8], out: &mut [f32; QK]) {
    let d = f16_at(b, 0);
    let qs = &b[2..18];
    for j in 0..16 {
        out[j] = d * ((qs[j] & 0x0F) as i32 - 8) as f32;
        out[j + 16] = d * ((qs[j] >> 4) as i32 - 8) as f32;
    }
}
pub fn dequant_q4_0(data: &[u8], out: &mut [f32]) {
    dequant_blocks(data, out, 18, block_q4_0)
}
pub fn dot_q4_0(data: &[u8], x: &[f32]) -> f32 {
    dot_via_dequant(data, x, 18, block_q4_0)
}

// ---- Q4_1: d * q + m ----

pub fn block_q4_1(b: &[u8], out: &mut [f32; QK]) {
    let d = f16_at(b, 0);
    let m = f16_at(b, 2);
    let qs = &b[4..20];
    for j in 0..16 {
        out[j] = d * (qs[j] & 0x0F) as f32 + m;
        out[j + 16] = d * (qs[j] >> 4) as f32 + m;
    }
}
pub fn dequant_q4_1(data: &[u8], out: &mut [f32]) {
    dequant_blocks(data, out, 20, block_q4_1)
}
pub fn dot_q4_1(data: &[u8], x: &[f32]) -> f32 {
    dot_via_dequant(data, x, 20, block_q4_1)
}

// ---- Q5_0: d * (q - 16) ----

pub fn block_q5_0(b: &[u8], out: &mut [f32; QK]) {
    let d = f16_at(b, 0);
    let qh = u32_at(b, 2);
    let qs = &b[6..22];
    for j in 0..16 {
        let lo = (qs[j] & 0x0F) | ((((qh >> j) & 1) as u8) << 4);
        let hi = (qs[j] >> 4) | ((((qh >> (j + 16)) & 1) as u8) << 4);
        out[j] = d * (lo as i32 - 16) as f32;
        out[j + 16] = d * (hi as i32 - 16) as f32;
    }
}
pub fn dequant_q5_0(data: &[u8], out: &mut [f32]) {
    dequant_blocks(data, out, 22, block_q5_0)
}
pub fn dot_q5_0(data: &[u8], x: &[f32]) -> f32 {
    dot_via_dequant(data, x, 22, block_q5_0)
}

// ---- Q5_1: d * q + m ----

pub fn block_q5_1(b: &[u8], out: &mut [f32; QK]) {
    let d = f16_at(b, 0);
    let m = f16_at(b, 2);
    let qh = u32_at(b, 4);
    let qs = &b[8..24];
    for j in 0..16 {
        let lo = (qs[j] & 0x0F) | ((((qh >> j) & 1) as u8) << 4);
        let hi = (qs[j] >> 4) | ((((qh >> (j + 16)) & 1) as u8) << 4);
        out[j] = d * lo as f32 + m;
        out[j + 16] = d * hi as f32 + m;
    }
}
pub fn dequant_q5_1(data: &[u8], out: &mut [f32]) {
    dequant_blocks(data, out, 24, block_q5_1)
}
pub fn dot_q5_1(data: &[u8], x: &[f32]) -> f32 {
    dot_via_dequant(data, x, 24, block_q5_1)
}

// ---- Q8_0: q * d ----

pub fn block_q8_0(b: &[u8], out: &mut [f32; QK]) {
    let d = f16_at(b, 0);
    for j in 0..QK {
        out[j] = (b[2 + j] as i8) as f32 * d;
    }
}
pub fn dequant_q8_0(data: &[u8], out: &mut [f32]) {
    dequant_blocks(data, out, 34, block_q8_0)
}
pub fn dot_q8_0(data: &[u8], x: &[f32]) -> f32 {
    dot_via_dequant(data, x, 34, block_q8_0)
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod x86 {
    use std::arch::x86_64::*;

    use crate::util::{f16_ptr, has_f16c, hsum256};

    // ---- Q8_0 ----

    pub fn dot_q8_0_avx2(data: &[u8], x: &[f32]) -> f32 {
        let n = (data.len() / 34).min(x.len() / 32);
        if !has_f16c() {
            return super::dot_q8_0(data, x);
        }
        // SAFETY: lib.rs calls this only when AVX2 and FMA are present, F16C
        // was checked above; `q8_0_avx2` reads `n` whole blocks and `32 * n`
        // values, which both slices hold.
        unsafe { q8_0_avx2(data.as_ptr(), x.as_ptr(), n) }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn q8_0_avx2(mut b: *const u8, mut x: *const f32, n: usize) -> f32 {
        let mut acc0 = _mm256_setzero_ps();
        let mut acc1 = _mm256_setzero_ps();
        for _ in 0..n {
            let d = _mm256_set1_ps(f16_ptr(b));
            let q = b.add(2);
            let w0 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(q as *const __m128i)));
            let w1 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(
                q.add(8) as *const __m128i
            )));
            let w2 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(
                q.add(16) as *const __m128i
            )));
            let w3 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(
                q.add(24) as *const __m128i
            )));
            let mut s = _mm256_mul_ps(w0, _mm256_loadu_ps(x));
            let mut t = _mm256_mul_ps(w1, _mm256_loadu_ps(x.add(8)));
            s = _mm256_fmadd_ps(w2, _mm256_loadu_ps(x.add(16)), s);
            t = _mm256_fmadd_ps(w3, _mm256_loadu_ps(x.add(24)), t);
            acc0 = _mm256_fmadd_ps(d, s, acc0);
            acc1 = _mm256_fmadd_ps(d, t, acc1);
            b = b.add(34);
            x = x.add(32);
        }
        hsum256(_mm256_add_ps(acc0, acc1))
    }

    pub fn dot_q8_0_avx512(data: &[u8], x: &[f32]) -> f32 {
        let n = (data.len() / 34).min(x.len() / 32);
        if !has_f16c() {
            return super::dot_q8_0(data, x);
        }
        // SAFETY: lib.rs calls this only when AVX-512 F/BW/VL, AVX2 and FMA
        // are present, F16C was checked above; `n` whole blocks and `32 * n`
        // values are in bounds.
        unsafe { q8_0_avx512(data.as_ptr(), x.as_ptr(), n) }
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
    unsafe fn q8_0_avx512(mut b: *const u8, mut x: *const f32, n: usize) -> f32 {
        let mut acc0 = _mm512_setzero_ps();
        let mut acc1 = _mm512_setzero_ps();
        let mut i = 0;
        // Two blocks per iteration keep two independent chains.
        while i + 2 <= n {
            let d0 = _mm512_set1_ps(f16_ptr(b));
            let d1 = _mm512_set1_ps(f16_ptr(b.add(34)));
            let q0 = b.add(2);
            let q1 = b.add(36);
            let w0 =
                _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(q0 as *const __m128i)));
            let w1 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(
                q0.add(16) as *const __m128i
            )));
            let w2 =
                _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(q1 as *const __m128i)));
            let w3 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(
                q1.add(16) as *const __m128i
            )));
            let s = _mm512_fmadd_ps(
                w1,
                _mm512_loadu_ps(x.add(16)),
                _mm512_mul_ps(w0, _mm512_loadu_ps(x)),
            );
            let t = _mm512_fmadd_ps(
                w3,
                _mm512_loadu_ps(x.add(48)),
                _mm512_mul_ps(w2, _mm512_loadu_ps(x.add(32))),
            );
            acc0 = _mm512_fmadd_ps(d0, s, acc0);
            acc1 = _mm512_fmadd_ps(d1, t, acc1);
            b = b.add(68);
            x = x.add(64);
            i += 2;
        }
        if i < n {
            let d0 = _mm512_set1_ps(f16_ptr(b));
            let q0 = b.add(2);
            let w0 =
                _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(q0 as *const __m128i)));
            let w1 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(
                q0.add(16) as *const __m128i
            )));
            let s = _mm512_fmadd_ps(
                w1,
                _mm512_loadu_ps(x.add(16)),
                _mm512_mul_ps(w0, _mm512_loadu_ps(x)),
            );
            acc0 = _mm512_fmadd_ps(d0, s, acc0);
        }
        _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1))
    }

    // ---- Q4_0 ----

    pub fn dot_q4_0_avx2(data: &[u8], x: &[f32]) -> f32 {
        let n = (data.len() / 18).min(x.len() / 32);
        if !has_f16c() {
            return super::dot_q4_0(data, x);
        }
        // SAFETY: AVX2+FMA guaranteed by the caller (lib.rs), F16C checked;
        // `n` whole blocks and `32 * n` values are in bounds.
        unsafe { q4_0_avx2(data.as_ptr(), x.as_ptr(), n) }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn q4_0_avx2(mut b: *const u8, mut x: *const f32, n: usize) -> f32 {
        let mut acc0 = _mm256_setzero_ps();
        let mut acc1 = _mm256_setzero_ps();
        let m4 = _mm256_set1_epi32(0x0F);
        let eight = _mm256_set1_epi32(8);
        for _ in 0..n {
            let d = _mm256_set1_ps(f16_ptr(b));
            let q = b.add(2);
            let a = _mm256_cvtepu8_epi32(_mm_loadl_epi64(q as *const __m128i));
            let c = _mm256_cvtepu8_epi32(_mm_loadl_epi64(q.add(8) as *const __m128i));
            let w0 = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_and_si256(a, m4), eight));
            let w1 = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_and_si256(c, m4), eight));
            let w2 = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_srli_epi32::<4>(a), eight));
            let w3 = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_srli_epi32::<4>(c), eight));
            let mut s = _mm256_mul_ps(w0, _mm256_loadu_ps(x));
            let mut t = _mm256_mul_ps(w1, _mm256_loadu_ps(x.add(8)));
            s = _mm256_fmadd_ps(w2, _mm256_loadu_ps(x.add(16)), s);
            t = _mm256_fmadd_ps(w3, _mm256_loadu_ps(x.add(24)), t);
            acc0 = _mm256_fmadd_ps(d, s, acc0);
            acc1 = _mm256_fmadd_ps(d, t, acc1);
            b = b.add(18);
            x = x.add(32);
        }
        hsum256(_mm256_add_ps(acc0, acc1))
    }

    pub fn dot_q4_0_avx512(data: &[u8], x: &[f32]) -> f32 {
        let n = (data.len() / 18).min(x.len() / 32);
        if !has_f16c() {
            return super::dot_q4_0(data, x);
        }
        // SAFETY: AVX-512 F/BW/VL + AVX2/FMA guaranteed by the caller, F16C
        // checked; `n` whole blocks and `32 * n` values are in bounds.
        unsafe { q4_0_avx512(data.as_ptr(), x.as_ptr(), n) }
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
    unsafe fn q4_0_avx512(mut b: *const u8, mut x: *const f32, n: usize) -> f32 {
        let mut acc0 = _mm512_setzero_ps();
        let mut acc1 = _mm512_setzero_ps();
        // q - 8 for every nibble value: the low 4 bits of the index select.
        let tab = _mm512_setr_ps(
            -8.0, -7.0, -6.0, -5.0, -4.0, -3.0, -2.0, -1.0, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0,
        );
        for _ in 0..n {
            let d = _mm512_set1_ps(f16_ptr(b));
            let q = _mm512_cvtepu8_epi32(_mm_loadu_si128(b.add(2) as *const __m128i));
            let w0 = _mm512_permutexvar_ps(q, tab);
            let w1 = _mm512_permutexvar_ps(_mm512_srli_epi32::<4>(q), tab);
            let s = _mm512_fmadd_ps(
                w1,
                _mm512_loadu_ps(x.add(16)),
                _mm512_mul_ps(w0, _mm512_loadu_ps(x)),
            );
            acc0 = _mm512_fmadd_ps(d, s, acc0);
            std::mem::swap(&mut acc0, &mut acc1);
            b = b.add(18);
            x = x.add(32);
        }
        _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1))
    }

    // ---- Shared 32-element block machinery (Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4) ----

    /// The 32 nibbles of the 16 bytes at `q` as bytes in element order: low
    /// nibbles (elements 0..16) in the low lane, high nibbles in the high one.
    ///
    /// # Safety
    /// `q` must be valid for reading 16 bytes; the CPU must have AVX2.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    pub(crate) unsafe fn nibbles32(q: *const u8) -> __m256i {
        let v = _mm_loadu_si128(q as *const __m128i);
        let m4 = _mm_set1_epi8(0x0F);
        let lo = _mm_and_si128(v, m4);
        let hi = _mm_and_si128(_mm_srli_epi16::<4>(v), m4);
        _mm256_set_m128i(hi, lo)
    }

    /// `0x10` in byte `j` where bit `j` of the little-endian u32 at `p` is set.
    ///
    /// # Safety
    /// `p` must be valid for reading 4 bytes; the CPU must have AVX2.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn fifth_bits(p: *const u8) -> __m256i {
        let qh = u32::from_le(std::ptr::read_unaligned(p as *const u32));
        // Byte j gets byte j / 8 of qh, then keeps bit j % 8.
        let shuf = _mm256_set_epi64x(
            0x0303_0303_0303_0303,
            0x0202_0202_0202_0202,
            0x0101_0101_0101_0101,
            0,
        );
        let bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(qh as i32), shuf);
        let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
        let set = _mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit), bit);
        _mm256_and_si256(set, _mm256_set1_epi8(0x10))
    }

    /// Accumulate one 32-element block: `q` holds the 32 quants as signed
    /// bytes in element order, `x` points at its 32 values. With `AFFINE`
    /// each weight is `q·d + m` (one fused op) before it meets `x`;
    /// otherwise `d` multiplies the block's `Σ q·x` (and `m` is unused).
    ///
    /// # Safety
    /// `x` must be valid for reading 32 f32; AVX2 and FMA.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    pub(crate) unsafe fn block32_avx2<const AFFINE: bool>(
        q: __m256i,
        d: f32,
        m: f32,
        x: *const f32,
        acc: &mut [__m256; 2],
    ) {
        let lo = _mm256_castsi256_si128(q);
        let hi = _mm256_extracti128_si256::<1>(q);
        let q0 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo));
        let q1 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128::<8>(lo)));
        let q2 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi));
        let q3 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128::<8>(hi)));
        let dv = _mm256_set1_ps(d);
        if AFFINE {
            let mv = _mm256_set1_ps(m);
            let mut a0 = acc[0];
            let mut a1 = acc[1];
            a0 = _mm256_fmadd_ps(_mm256_fmadd_ps(q0, dv, mv), _mm256_loadu_ps(x), a0);
            a1 = _mm256_fmadd_ps(_mm256_fmadd_ps(q1, dv, mv), _mm256_loadu_ps(x.add(8)), a1);
            a0 = _mm256_fmadd_ps(_mm256_fmadd_ps(q2, dv, mv), _mm256_loadu_ps(x.add(16)), a0);
            a1 = _mm256_fmadd_ps(_mm256_fmadd_ps(q3, dv, mv), _mm256_loadu_ps(x.add(24)), a1);
            acc[0] = a0;
            acc[1] = a1;
        } else {
            let mut s = _mm256_mul_ps(q0, _mm256_loadu_ps(x));
            let mut t = _mm256_mul_ps(q1, _mm256_loadu_ps(x.add(8)));
            s = _mm256_fmadd_ps(q2, _mm256_loadu_ps(x.add(16)), s);
            t = _mm256_fmadd_ps(q3, _mm256_loadu_ps(x.add(24)), t);
            acc[0] = _mm256_fmadd_ps(dv, s, acc[0]);
            acc[1] = _mm256_fmadd_ps(dv, t, acc[1]);
        }
    }

    /// AVX-512 twin of [`block32_avx2`]: 16 lanes, two vectors per block.
    ///
    /// # Safety
    /// `x` must be valid for reading 32 f32; AVX-512 F/BW/VL, AVX2, FMA.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
    #[inline]
    pub(crate) unsafe fn block32_avx512<const AFFINE: bool>(
        q: __m256i,
        d: f32,
        m: f32,
        x: *const f32,
        acc: &mut [__m512; 2],
    ) {
        let q0 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(q)));
        let q1 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256::<1>(q)));
        let dv = _mm512_set1_ps(d);
        if AFFINE {
            let mv = _mm512_set1_ps(m);
            acc[0] = _mm512_fmadd_ps(_mm512_fmadd_ps(q0, dv, mv), _mm512_loadu_ps(x), acc[0]);
            acc[1] = _mm512_fmadd_ps(
                _mm512_fmadd_ps(q1, dv, mv),
                _mm512_loadu_ps(x.add(16)),
                acc[1],
            );
        } else {
            let s = _mm512_fmadd_ps(
                q1,
                _mm512_loadu_ps(x.add(16)),
                _mm512_mul_ps(q0, _mm512_loadu_ps(x)),
            );
            acc[0] = _mm512_fmadd_ps(dv, s, acc[0]);
            acc.swap(0, 1);
        }
    }

    /// Generates the safe AVX2 and AVX-512 entry points of a 32-element
    /// block type from its decoder `unsafe fn(*const u8) -> (__m256i, f32,
    /// f32)` (quants as signed bytes in element order, `d`, `m`; AVX2 target
    /// features; reads only inside the `$ts`-byte block).
    macro_rules! block32_dot {
        ($avx2:ident, $avx512:ident, $ts:expr, $dec:path, $affine:expr, $scalar:path) => {
            pub fn $avx2(data: &[u8], x: &[f32]) -> f32 {
                use std::arch::x86_64::*;
                #[target_feature(enable = "avx2,fma,f16c")]
                unsafe fn inner(mut b: *const u8, mut x: *const f32, n: usize) -> f32 {
                    let mut acc = [_mm256_setzero_ps(); 2];
                    for _ in 0..n {
                        let (q, d, m) = $dec(b);
                        $crate::legacy::x86::block32_avx2::<{ $affine }>(q, d, m, x, &mut acc);
                        b = b.add($ts);
                        x = x.add(32);
                    }
                    $crate::util::hsum256(_mm256_add_ps(acc[0], acc[1]))
                }
                let n = (data.len() / $ts).min(x.len() / 32);
                if !$crate::util::has_f16c() {
                    return $scalar(data, x);
                }
                // SAFETY: lib.rs selects this kernel only when the CPU has
                // AVX2 and FMA; F16C was checked above. `inner` reads `n`
                // whole blocks and `32 * n` values, which both slices hold.
                unsafe { inner(data.as_ptr(), x.as_ptr(), n) }
            }

            pub fn $avx512(data: &[u8], x: &[f32]) -> f32 {
                use std::arch::x86_64::*;
                #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
                unsafe fn inner(mut b: *const u8, mut x: *const f32, n: usize) -> f32 {
                    let mut acc = [_mm512_setzero_ps(); 2];
                    for _ in 0..n {
                        let (q, d, m) = $dec(b);
                        $crate::legacy::x86::block32_avx512::<{ $affine }>(q, d, m, x, &mut acc);
                        b = b.add($ts);
                        x = x.add(32);
                    }
                    _mm512_reduce_add_ps(_mm512_add_ps(acc[0], acc[1]))
                }
                let n = (data.len() / $ts).min(x.len() / 32);
                if !$crate::util::has_f16c() {
                    return $scalar(data, x);
                }
                // SAFETY: lib.rs selects this kernel only when the CPU has
                // AVX-512 F/BW/VL, AVX2 and FMA; F16C was checked above.
                // `inner` reads `n` whole blocks and `32 * n` values, which
                // both slices hold.
                unsafe { inner(data.as_ptr(), x.as_ptr(), n) }
            }
        };
    }
    pub(crate) use block32_dot;

    // ---- Q4_1: d * q + m ----

    /// # Safety
    /// `b` must be valid for reading one 20-byte block; AVX2 and F16C.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn dec_q4_1(b: *const u8) -> (__m256i, f32, f32) {
        (nibbles32(b.add(4)), f16_ptr(b), f16_ptr(b.add(2)))
    }

    // ---- Q5_0: d * (q - 16) ----

    /// # Safety
    /// `b` must be valid for reading one 22-byte block; AVX2 and F16C.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn dec_q5_0(b: *const u8) -> (__m256i, f32, f32) {
        let q = _mm256_or_si256(nibbles32(b.add(6)), fifth_bits(b.add(2)));
        (_mm256_sub_epi8(q, _mm256_set1_epi8(16)), f16_ptr(b), 0.0)
    }

    // ---- Q5_1: d * q + m ----

    /// # Safety
    /// `b` must be valid for reading one 24-byte block; AVX2 and F16C.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn dec_q5_1(b: *const u8) -> (__m256i, f32, f32) {
        let q = _mm256_or_si256(nibbles32(b.add(8)), fifth_bits(b.add(4)));
        (q, f16_ptr(b), f16_ptr(b.add(2)))
    }

    block32_dot!(
        dot_q4_1_avx2,
        dot_q4_1_avx512,
        20,
        dec_q4_1,
        true,
        super::dot_q4_1
    );
    block32_dot!(
        dot_q5_0_avx2,
        dot_q5_0_avx512,
        22,
        dec_q5_0,
        false,
        super::dot_q5_0
    );
    block32_dot!(
        dot_q5_1_avx2,
        dot_q5_1_avx512,
        24,
        dec_q5_1,
        true,
        super::dot_q5_1
    );
}
