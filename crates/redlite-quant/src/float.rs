//! Plain float types: F32, F16, BF16.

use half::{bf16, f16};

use crate::{GgmlType, TypeKernels};

pub static F32: TypeKernels = TypeKernels {
    ty: GgmlType::F32,
    dequant: dequant_f32,
    dot_scalar: dot_f32,
    dot_avx2: F32_AVX2,
    dot_avx512: F32_AVX512,
};
pub static F16: TypeKernels = TypeKernels {
    ty: GgmlType::F16,
    dequant: dequant_f16,
    dot_scalar: dot_f16,
    dot_avx2: F16_AVX2,
    dot_avx512: F16_AVX512,
};
pub static BF16: TypeKernels = TypeKernels {
    ty: GgmlType::BF16,
    dequant: dequant_bf16,
    dot_scalar: dot_bf16,
    dot_avx2: BF16_AVX2,
    dot_avx512: BF16_AVX512,
};

#[cfg(target_arch = "x86_64")]
const F32_AVX2: Option<crate::DotFn> = Some(x86::dot_f32_avx2);
#[cfg(target_arch = "x86_64")]
const F32_AVX512: Option<crate::DotFn> = Some(x86::dot_f32_avx512);
#[cfg(not(target_arch = "x86_64"))]
const F32_AVX2: Option<crate::DotFn> = None;
#[cfg(not(target_arch = "x86_64"))]
const F32_AVX512: Option<crate::DotFn> = None;
#[cfg(target_arch = "x86_64")]
const F16_AVX2: Option<crate::DotFn> = Some(x86::dot_f16_avx2);
#[cfg(target_arch = "x86_64")]
const F16_AVX512: Option<crate::DotFn> = Some(x86::dot_f16_avx512);
#[cfg(not(target_arch = "x86_64"))]
const F16_AVX2: Option<crate::DotFn> = None;
#[cfg(not(target_arch = "x86_64"))]
const F16_AVX512: Option<crate::DotFn> = None;
#[cfg(target_arch = "x86_64")]
const BF16_AVX2: Option<crate::DotFn> = Some(x86::dot_bf16_avx2);
#[cfg(target_arch = "x86_64")]
const BF16_AVX512: Option<crate::DotFn> = Some(x86::dot_bf16_avx512);
#[cfg(not(target_arch = "x86_64"))]
const BF16_AVX2: Option<crate::DotFn> = None;
#[cfg(not(target_arch = "x86_64"))]
const BF16_AVX512: Option<crate::DotFn> = None;

pub fn dequant_f32(data: &[u8], out: &mut [f32]) {
    for (o, c) in out.iter_mut().zip(data.chunks_exact(4)) {
        *o = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
    }
}

pub fn dot_f32(data: &[u8], x: &[f32]) -> f32 {
    let mut s = 0f32;
    for (c, v) in data.chunks_exact(4).zip(x) {
        s += f32::from_le_bytes([c[0], c[1], c[2], c[3]]) * v;
    }
    s
}

pub fn dequant_f16(data: &[u8], out: &mut [f32]) {
    for (o, c) in out.iter_mut().zip(data.chunks_exact(2)) {
        *o = f16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32();
    }
}

pub fn dot_f16(data: &[u8], x: &[f32]) -> f32 {
    let mut s = 0f32;
    for (c, v) in data.chunks_exact(2).zip(x) {
        s += f16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32() * v;
    }
    s
}

pub fn dequant_bf16(data: &[u8], out: &mut [f32]) {
    for (o, c) in out.iter_mut().zip(data.chunks_exact(2)) {
        *o = bf16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32();
    }
}

pub fn dot_bf16(data: &[u8], x: &[f32]) -> f32 {
    let mut s = 0f32;
    for (c, v) in data.chunks_exact(2).zip(x) {
        s += bf16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32() * v;
    }
    s
}

/// AVX2 / AVX-512 dot products of plain float rows: four independent
/// accumulators over the bulk, one vector at a time after, then a scalar
/// tail with the same per-element arithmetic as the scalar twin.
#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use crate::util::{has_f16c, hsum256};

    /// Scalar tail shared by the three formats: `Σ conv(w_i)·x_i` over `[i, n)`.
    #[inline(always)]
    fn tail(
        data: &[u8],
        x: &[f32],
        from: usize,
        n: usize,
        ts: usize,
        conv: fn(&[u8]) -> f32,
    ) -> f32 {
        let mut s = 0f32;
        for i in from..n {
            s += conv(&data[ts * i..ts * i + ts]) * x[i];
        }
        s
    }

    fn f32_of(c: &[u8]) -> f32 {
        f32::from_le_bytes([c[0], c[1], c[2], c[3]])
    }
    fn f16_of(c: &[u8]) -> f32 {
        half::f16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32()
    }
    fn bf16_of(c: &[u8]) -> f32 {
        half::bf16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32()
    }

    /// Eight weights starting at element `i` as f32 (AVX2 loaders).
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn ld8_f32(p: *const u8, i: usize) -> __m256 {
        _mm256_loadu_ps((p as *const f32).add(i))
    }
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn ld8_f16(p: *const u8, i: usize) -> __m256 {
        _mm256_cvtph_ps(_mm_loadu_si128(p.add(2 * i) as *const __m128i))
    }
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn ld8_bf16(p: *const u8, i: usize) -> __m256 {
        let h = _mm256_cvtepu16_epi32(_mm_loadu_si128(p.add(2 * i) as *const __m128i));
        _mm256_castsi256_ps(_mm256_slli_epi32::<16>(h))
    }

    /// Sixteen weights starting at element `i` as f32 (AVX-512 loaders).
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
    #[inline]
    unsafe fn ld16_f32(p: *const u8, i: usize) -> __m512 {
        _mm512_loadu_ps((p as *const f32).add(i))
    }
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
    #[inline]
    unsafe fn ld16_f16(p: *const u8, i: usize) -> __m512 {
        _mm512_cvtph_ps(_mm256_loadu_si256(p.add(2 * i) as *const __m256i))
    }
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
    #[inline]
    unsafe fn ld16_bf16(p: *const u8, i: usize) -> __m512 {
        let h = _mm512_cvtepu16_epi32(_mm256_loadu_si256(p.add(2 * i) as *const __m256i));
        _mm512_castsi512_ps(_mm512_slli_epi32::<16>(h))
    }

    macro_rules! float_dot {
        ($avx2:ident, $avx512:ident, $ts:expr, $ld8:ident, $ld16:ident, $conv:ident, $scalar:path) => {
            pub fn $avx2(data: &[u8], x: &[f32]) -> f32 {
                #[target_feature(enable = "avx2,fma,f16c")]
                unsafe fn inner(p: *const u8, xp: *const f32, n: usize) -> (f32, usize) {
                    let mut acc = [_mm256_setzero_ps(); 4];
                    let mut i = 0;
                    while i + 32 <= n {
                        for (k, a) in acc.iter_mut().enumerate() {
                            let j = i + 8 * k;
                            *a = _mm256_fmadd_ps($ld8(p, j), _mm256_loadu_ps(xp.add(j)), *a);
                        }
                        i += 32;
                    }
                    while i + 8 <= n {
                        acc[0] = _mm256_fmadd_ps($ld8(p, i), _mm256_loadu_ps(xp.add(i)), acc[0]);
                        i += 8;
                    }
                    let s =
                        _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
                    (hsum256(s), i)
                }
                let n = (data.len() / $ts).min(x.len());
                if !has_f16c() {
                    return $scalar(data, x);
                }
                // SAFETY: lib.rs selects this kernel only when the CPU has
                // AVX2 and FMA; F16C was checked above. `inner` reads
                // elements `[0, i)` with `i <= n`, inside both slices.
                let (s, i) = unsafe { inner(data.as_ptr(), x.as_ptr(), n) };
                s + tail(data, x, i, n, $ts, $conv)
            }

            pub fn $avx512(data: &[u8], x: &[f32]) -> f32 {
                #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
                unsafe fn inner(p: *const u8, xp: *const f32, n: usize) -> (f32, usize) {
                    let mut acc = [_mm512_setzero_ps(); 4];
                    let mut i = 0;
                    while i + 64 <= n {
                        for (k, a) in acc.iter_mut().enumerate() {
                            let j = i + 16 * k;
                            *a = _mm512_fmadd_ps($ld16(p, j), _mm512_loadu_ps(xp.add(j)), *a);
                        }
                        i += 64;
                    }
                    while i + 16 <= n {
                        acc[0] = _mm512_fmadd_ps($ld16(p, i), _mm512_loadu_ps(xp.add(i)), acc[0]);
                        i += 16;
                    }
                    let s =
                        _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3]));
                    (_mm512_reduce_add_ps(s), i)
                }
                let n = (data.len() / $ts).min(x.len());
                if !has_f16c() {
                    return $scalar(data, x);
                }
                // SAFETY: lib.rs selects this kernel only when the CPU has
                // AVX-512 F/BW/VL, AVX2 and FMA; F16C was checked above.
                // `inner` reads elements `[0, i)` with `i <= n`, inside both
                // slices.
                let (s, i) = unsafe { inner(data.as_ptr(), x.as_ptr(), n) };
                s + tail(data, x, i, n, $ts, $conv)
            }
        };
    }

    float_dot!(
        dot_f32_avx2,
        dot_f32_avx512,
        4,
        ld8_f32,
        ld16_f32,
        f32_of,
        super::dot_f32
    );
    float_dot!(
        dot_f16_avx2,
        dot_f16_avx512,
        2,
        ld8_f16,
        ld16_f16,
        f16_of,
        super::dot_f16
    );
    float_dot!(
        dot_bf16_avx2,
        dot_bf16_avx512,
        2,
        ld8_bf16,
        ld16_bf16,
        bf16_of,
        super::dot_bf16
    );
}
