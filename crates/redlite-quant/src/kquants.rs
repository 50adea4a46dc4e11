#![allow(non_upper_case_globals)]
//! K-quants: 256-element super-blocks (Q2_K .. Q6_K, Q8_K).
//!
//! Layouts (ggml-common.h, QK_K = 256):
//! * `block_q2_K { u8 scales[16]; u8 qs[64]; f16 d, dmin; }`
//! * `block_q3_K { u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d; }`
//! * `block_q4_K { f16 d, dmin; u8 scales[12]; u8 qs[128]; }`
//! * `block_q5_K { f16 d, dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]; }`
//! * `block_q6_K { u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d; }`
//! * `block_q8_K { f32 d; i8 qs[256]; i16 bsums[16]; }`
//!
//! The scalar code evaluates each weight with the same f32 operations as
//! gguf-py (`dl = d * sc`, `ml = dmin * m`, `w = dl * q - ml`), so the results
//! are bit-identical to `gguf.quants.dequantize`.

use crate::util::{dequant_blocks, dot_via_dequant, f16_at, f32_at};
use crate::{GgmlType, TypeKernels};

pub static Q2_K: TypeKernels = TypeKernels {
    ty: GgmlType::Q2_K,
    dequant: dequant_q2_k,
    dot_scalar: dot_q2_k,
    dot_avx2: fast::Q2_K_AVX2,
    dot_avx512: fast::Q2_K_AVX512,
};
pub static Q3_K: TypeKernels = TypeKernels {
    ty: GgmlType::Q3_K,
    dequant: dequant_q3_k,
    dot_scalar: dot_q3_k,
    dot_avx2: fast::Q3_K_AVX2,
    dot_avx512: fast::Q3_K_AVX512,
};
pub static Q4_K: TypeKernels = TypeKernels {
    ty: GgmlType::Q4_K,
    dequant: dequant_q4_k,
    dot_scalar: dot_q4_k,
    dot_avx2: fast::Q4_K_AVX2,
    dot_avx512: fast::Q4_K_AVX512,
};
pub static Q5_K: TypeKernels = TypeKernels {
    ty: GgmlType::Q5_K,
    dequant: dequant_q5_k,
    dot_scalar: dot_q5_k,
    dot_avx2: fast::Q5_K_AVX2,
    dot_avx512: fast::Q5_K_AVX512,
};
pub static Q6_K: TypeKernels = TypeKernels {
    ty: GgmlType::Q6_K,
    dequant: dequant_q6_k,
    dot_scalar: dot_q6_k,
    dot_avx2: fast::Q6_K_AVX2,
    dot_avx512: fast::Q6_K_AVX512,
};
pub static Q8_K: TypeKernels = TypeKernels {
    ty: GgmlType::Q8_K,
    dequant: dequant_q8_k,
    dot_scalar: dot_q8_k,
    dot_avx2: fast::Q8_K_AVX2,
    dot_avx512: fast::Q8_K_AVX512,
};

const QK_K: usize = 256;

/// The 6-bit scales and mins of Q4_K / Q5_K (`get_scale_min_k4`).
#[inline(always)]
pub fn scale_min_k4(s: &[u8]) -> ([u8; 8], [u8; 8]) {
    let mut sc = [0u8; 8];
    let mut m = [0u8; 8];
    for j in 0..4 {
        sc[j] = s[j] & 0x3F;
        m[j] = s[j + 4] & 0x3F;
        sc[j + 4] = (s[j + 8] & 0x0F) | ((s[j] >> 2) & 0x30);
        m[j + 4] = (s[j + 8] >> 4) | ((s[j + 4] >> 2) & 0x30);
    }
    (sc, m)
}

/// The 16 signed 6-bit scales of Q3_K (already minus 32).
#[inline(always)]
pub fn scales_q3_k(s: &[u8]) -> [i8; 16] {
    let mut out = [0i8; 16];
    for (i, o) in out.iter_mut().enumerate() {
        let lo = (s[i % 8] >> (4 * (i / 8))) & 0x0F;
        let hi = (s[8 + i % 4] >> (2 * (i / 4))) & 0x03;
        *o = (lo | (hi << 4)) as i8 - 32;
    }
    out
}

// ---- Q2_K ----

pub fn block_q2_k(b: &[u8], out: &mut [f32; QK_K]) {
    let scales = &b[0..16];
    let qs = &b[16..80];
    let d = f16_at(b, 80);
    let dmin = f16_at(b, 82);
    for (e, o) in out.iter_mut().enumerate() {
        let (j, s, l) = (e / 128, (e / 32) % 4, e % 32);
        let g = e / 16;
        let dl = d * (scales[g] & 0x0F) as f32;
        let ml = dmin * (scales[g] >> 4) as f32;
        let q = (qs[32 * j + l] >> (2 * s)) & 3;
        *o = dl * q as f32 - ml;
    }
}
pub fn dequant_q2_k(data: &[u8], out: &mut [f32]) {
    dequant_blocks(data, out, 84, block_q2_k)
}
pub fn dot_q2_k(data: &[u8], x: &[f32]) -> f32 {
    dot_via_dequant(data, x, 84, block_q2_k)
}

// ---- Q3_K ----

pub fn block_q3_k(b: &[u8], out: &mut [f32; QK_K]) {
    let hmask = &b[0..32];
    let qs = &b[32..96];
    let sc = scales_q3_k(&b[96..108]);
    let d = f16_at(b, 108);
    for (e, o) in out.iter_mut().enumerate() {
        let (j, s, l) = (e / 128, (e / 32) % 4, e % 32);
        let dl = d * sc[e / 16] as f32;
        let ql = ((qs[32 * j + l] >> (2 * s)) & 3) as i8;
        let h = ((hmask[l] >> (e / 32)) & 1) ^ 1;
        let q = ql - ((h << 2) as i8);
        *o = dl * q as f32;
    }
}
pub fn dequant_q3_k(data: &[u8], out: &mut [f32]) {
    dequant_blocks(data, out, 110, block_q3_k)
}
pub fn dot_q3_k(data: &[u8], x: &[f32]) -> f32 {
    dot_via_dequant(data, x, 110, block_q3_k)
}

// ---- Q4_K ----

pub fn block_q4_k(b: &[u8], out: &mut [f32; QK_K]) {
    let d = f16_at(b, 0);
    let dmin = f16_at(b, 2);
    let (sc, m) = scale_min_k4(&b[4..16]);
    let qs = &b[16..144];
    for k in 0..8 {
        let (j, h) = (k / 2, k % 2);
        let dl = d * sc[k] as f32;
        let ml = dmin * m[k] as f32;
        for l in 0..32 {
            let q = (qs[32 * j + l] >> (4 * h)) & 0x0F;
            out[32 * k + l] = dl * q as f32 - ml;
        }
    }
}
pub fn dequant_q4_k(data: &[u8], out: &mut [f32]) {
    dequant_blocks(data, out, 144, block_q4_k)
}
pub fn dot_q4_k(data: &[u8], x: &[f32]) -> f32 {
    dot_via_dequant(data, x, 144, block_q4_k)
}

// ---- Q5_K ----

pub fn block_q5_k(b: &[u8], out: &mut [f32; QK_K]) {
    let d = f16_at(b, 0);
    let dmin = f16_at(b, 2);
    let (sc, m) = scale_min_k4(&b[4..16]);
    let qh = &b[16..48];
    let qs = &b[48..176];
    for k in 0..8 {
        let (j, h) = (k / 2, k % 2);
        let dl = d * sc[k] as f32;
        let ml = dmin * m[k] as f32;
        for l in 0..32 {
            let q = ((qs[32 * j + l] >> (4 * h)) & 0x0F) | (((qh[l] >> k) & 1) << 4);
            out[32 * k + l] = dl * q as f32 - ml;
        }
    }
}
pub fn dequant_q5_k(data: &[u8], out: &mut [f32]) {
    dequant_blocks(data, out, 176, block_q5_k)
}
pub fn dot_q5_k(data: &[u8], x: &[f32]) -> f32 {
    dot_via_dequant(data, x, 176, block_q5_k)
}

// ---- Q6_K ----

pub fn block_q6_k(b: &[u8], out: &mut [f32; QK_K]) {
    let ql = &b[0..128];
    let qh = &b[128..192];
    let sc = &b[192..208];
    let d = f16_at(b, 208);
    for (e, o) in out.iter_mut().enumerate() {
        let j = e / 128;
        let r = e % 128;
        let (h, l64) = (r / 64, r % 64);
        let (s, l) = (r / 32, r % 32);
        let lo = (ql[64 * j + l64] >> (4 * h)) & 0x0F;
        let hi = (qh[32 * j + l] >> (2 * s)) & 3;
        let q = (lo | (hi << 4)) as i8 - 32;
        let dl = d * (sc[e / 16] as i8) as f32;
        *o = dl * q as f32;
    }
}
pub fn dequant_q6_k(data: &[u8], out: &mut [f32]) {
    dequant_blocks(data, out, 210, block_q6_k)
}
pub fn dot_q6_k(data: &[u8], x: &[f32]) -> f32 {
    dot_via_dequant(data, x, 210, block_q6_k)
}

// ---- Q8_K: d * q (llama.cpp's dequantize_row_q8_K) ----

pub fn block_q8_k(b: &[u8], out: &mut [f32; QK_K]) {
    let d = f32_at(b, 0);
    for (o, &q) in out.iter_mut().zip(&b[4..260]) {
        *o = d * (q as i8) as f32;
    }
}
pub fn dequant_q8_k(data: &[u8], out: &mut [f32]) {
    dequant_blocks(data, out, 292, block_q8_k)
}
pub fn dot_q8_k(data: &[u8], x: &[f32]) -> f32 {
    dot_via_dequant(data, x, 292, block_q8_k)
}

/// SIMD dot products (see [`crate::kquants::simd`]).
mod fast {
    #[cfg(target_arch = "x86_64")]
    use super::simd;
    use crate::DotFn;

    macro_rules! paths {
        ($a2:ident, $a512:ident, $f2:ident, $f512:ident) => {
            #[cfg(target_arch = "x86_64")]
            pub const $a2: Option<DotFn> = Some(simd::$f2);
            #[cfg(target_arch = "x86_64")]
            pub const $a512: Option<DotFn> = Some(simd::$f512);
            #[cfg(not(target_arch = "x86_64"))]
            pub const $a2: Option<DotFn> = None;
            #[cfg(not(target_arch = "x86_64"))]
            pub const $a512: Option<DotFn> = None;
        };
    }
    paths!(Q2_K_AVX2, Q2_K_AVX512, dot_q2_k_avx2, dot_q2_k_avx512);
    paths!(Q3_K_AVX2, Q3_K_AVX512, dot_q3_k_avx2, dot_q3_k_avx512);
    paths!(Q4_K_AVX2, Q4_K_AVX512, dot_q4_k_avx2, dot_q4_k_avx512);
    paths!(Q5_K_AVX2, Q5_K_AVX512, dot_q5_k_avx2, dot_q5_k_avx512);
    paths!(Q6_K_AVX2, Q6_K_AVX512, dot_q6_k_avx2, dot_q6_k_avx512);
    paths!(Q8_K_AVX2, Q8_K_AVX512, dot_q8_k_avx2, dot_q8_k_avx512);
}

/// AVX2 / AVX-512 dot products for blocks of 256 weights.
///
/// Each block is first decoded with 256-bit integer ops into a `Dec`: 256
/// signed 8-bit quants, and per 16-element group an integer scale and min
/// with the block's f32 `d` / `dmin`. The weight of element `i` in group `g`
/// is `(d * sc[g]) * q[i] - (dmin * mn[g])`; the backend widens the quants
/// to f32 in registers and FMAs them against `x` (the weight itself is a
/// fused `q * a - b`, so sums differ from the scalar twin only by rounding).
#[cfg(target_arch = "x86_64")]
pub(crate) mod simd {
    use std::arch::x86_64::*;

    use super::{scale_min_k4, scales_q3_k};
    use crate::util::f16_ptr;

    #[repr(C, align(64))]
    pub struct Dec {
        pub q: [i8; 256],
        pub sc: [i8; 16],
        pub mn: [i8; 16],
        pub d: f32,
        pub dmin: f32,
    }

    impl Dec {
        pub fn new() -> Dec {
            Dec {
                q: [0; 256],
                sc: [0; 16],
                mn: [0; 16],
                d: 0.0,
                dmin: 0.0,
            }
        }
    }

    /// Per-group f32 scales `a = d * sc` and offsets `b = dmin * mn`.
    ///
    /// # Safety
    /// The CPU must have AVX2 and FMA.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn group_scales(dec: &Dec, a: &mut [f32; 16], b: &mut [f32; 16]) {
        let d = _mm256_set1_ps(dec.d);
        let dm = _mm256_set1_ps(dec.dmin);
        let sp = dec.sc.as_ptr() as *const __m128i;
        let mp = dec.mn.as_ptr() as *const __m128i;
        let s = _mm_loadu_si128(sp);
        let m = _mm_loadu_si128(mp);
        let s0 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(s));
        let s1 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128::<8>(s)));
        let m0 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(m));
        let m1 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128::<8>(m)));
        _mm256_storeu_ps(a.as_mut_ptr(), _mm256_mul_ps(d, s0));
        _mm256_storeu_ps(a.as_mut_ptr().add(8), _mm256_mul_ps(d, s1));
        _mm256_storeu_ps(b.as_mut_ptr(), _mm256_mul_ps(dm, m0));
        _mm256_storeu_ps(b.as_mut_ptr().add(8), _mm256_mul_ps(dm, m1));
    }

    /// Accumulate one decoded block against 256 values of `x`.
    ///
    /// # Safety
    /// AVX2 and FMA; `x.len() >= 256`.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    pub unsafe fn block_avx2<const MIN: bool>(dec: &Dec, x: &[f32], acc: &mut [__m256; 2]) {
        let mut a = [0f32; 16];
        let mut b = [0f32; 16];
        group_scales(dec, &mut a, &mut b);
        let q = dec.q.as_ptr();
        let xp = x.as_ptr();
        let (mut acc0, mut acc1) = (acc[0], acc[1]);
        for g in 0..16 {
            let av = _mm256_broadcast_ss(&a[g]);
            let q0 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(
                q.add(16 * g) as *const __m128i
            )));
            let q1 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(
                q.add(16 * g + 8) as *const __m128i
            )));
            let (w0, w1) = if MIN {
                let bv = _mm256_broadcast_ss(&b[g]);
                (_mm256_fmsub_ps(q0, av, bv), _mm256_fmsub_ps(q1, av, bv))
            } else {
                (_mm256_mul_ps(q0, av), _mm256_mul_ps(q1, av))
            };
            acc0 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(xp.add(16 * g)), acc0);
            acc1 = _mm256_fmadd_ps(w1, _mm256_loadu_ps(xp.add(16 * g + 8)), acc1);
        }
        acc[0] = acc0;
        acc[1] = acc1;
    }

    /// AVX-512 twin of [`block_avx2`].
    ///
    /// # Safety
    /// AVX-512 F/BW/VL, AVX2, FMA; `x.len() >= 256`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
    #[inline]
    pub unsafe fn block_avx512<const MIN: bool>(dec: &Dec, x: &[f32], acc: &mut [__m512; 4]) {
        let mut a = [0f32; 16];
        let mut b = [0f32; 16];
        group_scales(dec, &mut a, &mut b);
        let q = dec.q.as_ptr();
        let xp = x.as_ptr();
        let mut ac = *acc;
        for g in 0..16 {
            let av = _mm512_set1_ps(a[g]);
            let qf = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(
                q.add(16 * g) as *const __m128i
            )));
            let w = if MIN {
                _mm512_fmsub_ps(qf, av, _mm512_set1_ps(b[g]))
            } else {
                _mm512_mul_ps(qf, av)
            };
            ac[g % 4] = _mm512_fmadd_ps(w, _mm512_loadu_ps(xp.add(16 * g)), ac[g % 4]);
        }
        *acc = ac;
    }

    /// Generates the safe AVX2 and AVX-512 entry points of one type from its
    /// decoder (`unsafe fn(&[u8], &mut Dec)`, AVX2 target features).
    macro_rules! kdot {
        ($avx2:ident, $avx512:ident, $dec:path, $ts:expr, $min:expr, $scalar:path) => {
            pub fn $avx2(data: &[u8], x: &[f32]) -> f32 {
                use std::arch::x86_64::*;
                use $crate::kquants::simd::{block_avx2, Dec};
                #[target_feature(enable = "avx2,fma,f16c")]
                unsafe fn inner(data: &[u8], x: &[f32]) -> f32 {
                    let mut dec = Dec::new();
                    let mut acc = [_mm256_setzero_ps(); 2];
                    for (blk, xs) in data.chunks_exact($ts).zip(x.chunks_exact(256)) {
                        $dec(blk, &mut dec);
                        block_avx2::<{ $min }>(&dec, xs, &mut acc);
                    }
                    $crate::util::hsum256(_mm256_add_ps(acc[0], acc[1]))
                }
                if !$crate::util::has_f16c() {
                    return $scalar(data, x);
                }
                // SAFETY: lib.rs selects this kernel only when the CPU has
                // AVX2 and FMA; F16C was checked above. Blocks and values are
                // walked with chunks_exact, so every load is in bounds.
                unsafe { inner(data, x) }
            }

            pub fn $avx512(data: &[u8], x: &[f32]) -> f32 {
                use std::arch::x86_64::*;
                use $crate::kquants::simd::{block_avx512, Dec};
                #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
                unsafe fn inner(data: &[u8], x: &[f32]) -> f32 {
                    let mut dec = Dec::new();
                    let mut acc = [_mm512_setzero_ps(); 4];
                    for (blk, xs) in data.chunks_exact($ts).zip(x.chunks_exact(256)) {
                        $dec(blk, &mut dec);
                        block_avx512::<{ $min }>(&dec, xs, &mut acc);
                    }
                    let s =
                        _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3]));
                    _mm512_reduce_add_ps(s)
                }
                if !$crate::util::has_f16c() {
                    return $scalar(data, x);
                }
                // SAFETY: lib.rs selects this kernel only when the CPU has
                // AVX-512 F/BW/VL, AVX2 and FMA; F16C was checked above.
                // Blocks and values are walked with chunks_exact, so every
                // load is in bounds.
                unsafe { inner(data, x) }
            }
        };
    }
    pub(crate) use kdot;

    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn store32(p: &mut [i8], v: __m256i) {
        debug_assert!(p.len() >= 32);
        _mm256_storeu_si256(p.as_mut_ptr() as *mut __m256i, v)
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn load32(p: &[u8]) -> __m256i {
        debug_assert!(p.len() >= 32);
        _mm256_loadu_si256(p.as_ptr() as *const __m256i)
    }

    /// `val` in the bytes of `v` whose bit `bit` is set, else 0 (also the
    /// fifth bit of Q5_K in the integer kernels).
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    pub(crate) unsafe fn bit_to(v: __m256i, bit: u8, val: i8) -> __m256i {
        let m = _mm256_set1_epi8(bit as i8);
        _mm256_and_si256(
            _mm256_cmpeq_epi8(_mm256_and_si256(v, m), m),
            _mm256_set1_epi8(val),
        )
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn srl16(v: __m256i, n: i32) -> __m256i {
        _mm256_srl_epi16(v, _mm_cvtsi32_si128(n))
    }

    // Block lengths are guaranteed by chunks_exact in the callers: every
    // decoder below reads only inside `blk`.

    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    pub unsafe fn dec_q2_k(blk: &[u8], dec: &mut Dec) {
        for (g, &s) in blk[..16].iter().enumerate() {
            dec.sc[g] = (s & 0x0F) as i8;
            dec.mn[g] = (s >> 4) as i8;
        }
        dec.d = f16_ptr(blk.as_ptr().add(80));
        dec.dmin = f16_ptr(blk.as_ptr().add(82));
        let m3 = _mm256_set1_epi8(3);
        for j in 0..2 {
            let v = load32(&blk[16 + 32 * j..]);
            for s in 0..4 {
                let q = _mm256_and_si256(srl16(v, 2 * s as i32), m3);
                store32(&mut dec.q[128 * j + 32 * s..], q);
            }
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    pub unsafe fn dec_q3_k(blk: &[u8], dec: &mut Dec) {
        dec.sc = scales_q3_k(&blk[96..108]);
        dec.mn = [0; 16];
        dec.d = f16_ptr(blk.as_ptr().add(108));
        dec.dmin = 0.0;
        let hm = load32(blk);
        let m3 = _mm256_set1_epi8(3);
        let four = _mm256_set1_epi8(4);
        for j in 0..2 {
            let v = load32(&blk[32 + 32 * j..]);
            for s in 0..4 {
                let ql = _mm256_and_si256(srl16(v, 2 * s as i32), m3);
                let h = bit_to(hm, 1u8 << (4 * j + s), 4);
                let q = _mm256_sub_epi8(_mm256_or_si256(ql, h), four);
                store32(&mut dec.q[128 * j + 32 * s..], q);
            }
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    pub unsafe fn dec_q4_k(blk: &[u8], dec: &mut Dec) {
        let (sc, m) = scale_min_k4(&blk[4..16]);
        for k in 0..8 {
            dec.sc[2 * k] = sc[k] as i8;
            dec.sc[2 * k + 1] = sc[k] as i8;
            dec.mn[2 * k] = m[k] as i8;
            dec.mn[2 * k + 1] = m[k] as i8;
        }
        dec.d = f16_ptr(blk.as_ptr());
        dec.dmin = f16_ptr(blk.as_ptr().add(2));
        let m4 = _mm256_set1_epi8(0x0F);
        for j in 0..4 {
            let v = load32(&blk[16 + 32 * j..]);
            store32(&mut dec.q[64 * j..], _mm256_and_si256(v, m4));
            store32(
                &mut dec.q[64 * j + 32..],
                _mm256_and_si256(_mm256_srli_epi16::<4>(v), m4),
            );
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    pub unsafe fn dec_q5_k(blk: &[u8], dec: &mut Dec) {
        let (sc, m) = scale_min_k4(&blk[4..16]);
        for k in 0..8 {
            dec.sc[2 * k] = sc[k] as i8;
            dec.sc[2 * k + 1] = sc[k] as i8;
            dec.mn[2 * k] = m[k] as i8;
            dec.mn[2 * k + 1] = m[k] as i8;
        }
        dec.d = f16_ptr(blk.as_ptr());
        dec.dmin = f16_ptr(blk.as_ptr().add(2));
        let m4 = _mm256_set1_epi8(0x0F);
        let qh = load32(&blk[16..]);
        for j in 0..4 {
            let v = load32(&blk[48 + 32 * j..]);
            let lo = _mm256_or_si256(_mm256_and_si256(v, m4), bit_to(qh, 1 << (2 * j), 16));
            let hi = _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16::<4>(v), m4),
                bit_to(qh, 1 << (2 * j + 1), 16),
            );
            store32(&mut dec.q[64 * j..], lo);
            store32(&mut dec.q[64 * j + 32..], hi);
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    pub unsafe fn dec_q6_k(blk: &[u8], dec: &mut Dec) {
        for g in 0..16 {
            dec.sc[g] = blk[192 + g] as i8;
        }
        dec.mn = [0; 16];
        dec.d = f16_ptr(blk.as_ptr().add(208));
        dec.dmin = 0.0;
        let m4 = _mm256_set1_epi8(0x0F);
        let m30 = _mm256_set1_epi8(0x30);
        let m32 = _mm256_set1_epi8(32);
        for j in 0..2 {
            let l0 = load32(&blk[64 * j..]);
            let l1 = load32(&blk[64 * j + 32..]);
            let h = load32(&blk[128 + 32 * j..]);
            let h0 = _mm256_and_si256(_mm256_slli_epi16::<4>(h), m30);
            let h1 = _mm256_and_si256(_mm256_slli_epi16::<2>(h), m30);
            let h2 = _mm256_and_si256(h, m30);
            let h3 = _mm256_and_si256(_mm256_srli_epi16::<2>(h), m30);
            let q0 = _mm256_or_si256(_mm256_and_si256(l0, m4), h0);
            let q1 = _mm256_or_si256(_mm256_and_si256(l1, m4), h1);
            let q2 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(l0), m4), h2);
            let q3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(l1), m4), h3);
            store32(&mut dec.q[128 * j..], _mm256_sub_epi8(q0, m32));
            store32(&mut dec.q[128 * j + 32..], _mm256_sub_epi8(q1, m32));
            store32(&mut dec.q[128 * j + 64..], _mm256_sub_epi8(q2, m32));
            store32(&mut dec.q[128 * j + 96..], _mm256_sub_epi8(q3, m32));
        }
    }

    kdot!(
        dot_q2_k_avx2,
        dot_q2_k_avx512,
        dec_q2_k,
        84,
        true,
        super::dot_q2_k
    );
    kdot!(
        dot_q3_k_avx2,
        dot_q3_k_avx512,
        dec_q3_k,
        110,
        false,
        super::dot_q3_k
    );
    kdot!(
        dot_q4_k_avx2,
        dot_q4_k_avx512,
        dec_q4_k,
        144,
        true,
        super::dot_q4_k
    );
    kdot!(
        dot_q5_k_avx2,
        dot_q5_k_avx512,
        dec_q5_k,
        176,
        true,
        super::dot_q5_k
    );
    kdot!(
        dot_q6_k_avx2,
        dot_q6_k_avx512,
        dec_q6_k,
        210,
        false,
        super::dot_q6_k
    );

    // ---- Q8_K: d (f32) times 256 signed bytes; `bsums` are not needed ----
    //
    // No integer decode step: the bytes are widened straight from the block,
    // as for Q8_0.

    pub fn dot_q8_k_avx2(data: &[u8], x: &[f32]) -> f32 {
        #[target_feature(enable = "avx2,fma")]
        unsafe fn inner(mut b: *const u8, mut x: *const f32, n: usize) -> f32 {
            let mut acc0 = _mm256_setzero_ps();
            let mut acc1 = _mm256_setzero_ps();
            for _ in 0..n {
                let d = _mm256_set1_ps(std::ptr::read_unaligned(b as *const f32));
                let q = b.add(4);
                let mut s = _mm256_setzero_ps();
                let mut t = _mm256_setzero_ps();
                for k in 0..16 {
                    let w0 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(
                        q.add(16 * k) as *const __m128i,
                    )));
                    let w1 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(
                        q.add(16 * k + 8) as *const __m128i,
                    )));
                    s = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x.add(16 * k)), s);
                    t = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x.add(16 * k + 8)), t);
                }
                acc0 = _mm256_fmadd_ps(d, s, acc0);
                acc1 = _mm256_fmadd_ps(d, t, acc1);
                b = b.add(292);
                x = x.add(256);
            }
            crate::util::hsum256(_mm256_add_ps(acc0, acc1))
        }
        let n = (data.len() / 292).min(x.len() / 256);
        // SAFETY: lib.rs selects this kernel only when the CPU has AVX2 and
        // FMA (the scale is an f32, so F16C is not needed). `inner` reads
        // `n` whole 292-byte blocks and `256 * n` values, which both slices
        // hold.
        unsafe { inner(data.as_ptr(), x.as_ptr(), n) }
    }

    pub fn dot_q8_k_avx512(data: &[u8], x: &[f32]) -> f32 {
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma")]
        unsafe fn inner(mut b: *const u8, mut x: *const f32, n: usize) -> f32 {
            let mut acc0 = _mm512_setzero_ps();
            let mut acc1 = _mm512_setzero_ps();
            for _ in 0..n {
                let d = _mm512_set1_ps(std::ptr::read_unaligned(b as *const f32));
                let q = b.add(4);
                let mut s = _mm512_setzero_ps();
                let mut t = _mm512_setzero_ps();
                for k in 0..8 {
                    let w0 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(
                        q.add(32 * k) as *const __m128i,
                    )));
                    let w1 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(
                        q.add(32 * k + 16) as *const __m128i,
                    )));
                    s = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x.add(32 * k)), s);
                    t = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x.add(32 * k + 16)), t);
                }
                acc0 = _mm512_fmadd_ps(d, s, acc0);
                acc1 = _mm512_fmadd_ps(d, t, acc1);
                b = b.add(292);
                x = x.add(256);
            }
            _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1))
        }
        let n = (data.len() / 292).min(x.len() / 256);
        // SAFETY: lib.rs selects this kernel only when the CPU has AVX-512
        // F/BW/VL, AVX2 and FMA (F16C is not needed). `inner` reads
        // `n` whole 292-byte blocks and `256 * n` values, which both slices
        // hold.
        unsafe { inner(data.as_ptr(), x.as_ptr(), n) }
    }
}
