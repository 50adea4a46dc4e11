#![allow(non_upper_case_globals)]
//! One-scale low-bit blocks: the ternary TQ1_0 and TQ2_0, and Q1_0 / Q2_0.
//!
//! Layouts (ggml-common.h) and values (ggml-quants.c `dequantize_row_*`):
//!
//! * `block_q1_0 { f16 d; u8 qs[16]; }`, 128 elements: bit `j % 8` of
//!   `qs[j / 8]` set gives `+d`, clear gives `-d`.
//! * `block_q2_0 { f16 d; u8 qs[16]; }`, 64 elements: code
//!   `c = (qs[j / 4] >> 2·(j % 4)) & 3`, value `(c - 1)·d` (so `-d, 0, d, 2d`).
//! * `block_tq2_0 { u8 qs[64]; f16 d; }`, 256 elements: for `h` in 0..2, `l`
//!   in 0..4, `m` in 0..32, element `128h + 32l + m` has code
//!   `(qs[32h + m] >> 2l) & 3` and value `(c - 1)·d`.
//! * `block_tq1_0 { u8 qs[48]; u8 qh[4]; f16 d; }`, 256 elements packed as
//!   base-3 digits: digit `n` of byte `q` is `((q·3^n mod 256)·3) >> 8`, value
//!   `(digit - 1)·d`. Elements 0..160 are digit `n` (0..5) of `qs[m]`,
//!   `m` in 0..32 (element `32n + m`); elements 160..240 digit `n` of
//!   `qs[32 + m]`, `m` in 0..16 (element `160 + 16n + m`); elements 240..256
//!   digit `n` (0..4) of `qh[m]`, `m` in 0..4 (element `240 + 4n + m`).

use crate::util::{dequant_blocks, dot_via_dequant, f16_at};
use crate::{GgmlType, TypeKernels};

pub static TQ1_0: TypeKernels = TypeKernels {
    ty: GgmlType::TQ1_0,
    dequant: dequant_tq1_0,
    dot_scalar: dot_tq1_0,
    dot_avx2: X86_TQ1_0_AVX2,
    dot_avx512: X86_TQ1_0_AVX512,
};
pub static TQ2_0: TypeKernels = TypeKernels {
    ty: GgmlType::TQ2_0,
    dequant: dequant_tq2_0,
    dot_scalar: dot_tq2_0,
    dot_avx2: X86_TQ2_0_AVX2,
    dot_avx512: X86_TQ2_0_AVX512,
};
pub static Q1_0: TypeKernels = TypeKernels {
    ty: GgmlType::Q1_0,
    dequant: dequant_q1_0,
    dot_scalar: dot_q1_0,
    dot_avx2: X86_Q1_0_AVX2,
    dot_avx512: X86_Q1_0_AVX512,
};
pub static Q2_0: TypeKernels = TypeKernels {
    ty: GgmlType::Q2_0,
    dequant: dequant_q2_0,
    dot_scalar: dot_q2_0,
    dot_avx2: X86_Q2_0_AVX2,
    dot_avx512: X86_Q2_0_AVX512,
};

#[cfg(target_arch = "x86_64")]
const X86_TQ1_0_AVX2: Option<crate::DotFn> = Some(x86::dot_tq1_0_avx2);
#[cfg(target_arch = "x86_64")]
const X86_TQ1_0_AVX512: Option<crate::DotFn> = Some(x86::dot_tq1_0_avx512);
#[cfg(target_arch = "x86_64")]
const X86_TQ2_0_AVX2: Option<crate::DotFn> = Some(x86::dot_tq2_0_avx2);
#[cfg(target_arch = "x86_64")]
const X86_TQ2_0_AVX512: Option<crate::DotFn> = Some(x86::dot_tq2_0_avx512);
#[cfg(target_arch = "x86_64")]
const X86_Q1_0_AVX2: Option<crate::DotFn> = Some(x86::dot_q1_0_avx2);
#[cfg(target_arch = "x86_64")]
const X86_Q1_0_AVX512: Option<crate::DotFn> = Some(x86::dot_q1_0_avx512);
#[cfg(target_arch = "x86_64")]
const X86_Q2_0_AVX2: Option<crate::DotFn> = Some(x86::dot_q2_0_avx2);
#[cfg(target_arch = "x86_64")]
const X86_Q2_0_AVX512: Option<crate::DotFn> = Some(x86::dot_q2_0_avx512);
#[cfg(not(target_arch = "x86_64"))]
const X86_TQ1_0_AVX2: Option<crate::DotFn> = None;
#[cfg(not(target_arch = "x86_64"))]
const X86_TQ1_0_AVX512: Option<crate::DotFn> = None;
#[cfg(not(target_arch = "x86_64"))]
const X86_TQ2_0_AVX2: Option<crate::DotFn> = None;
#[cfg(not(target_arch = "x86_64"))]
const X86_TQ2_0_AVX512: Option<crate::DotFn> = None;
#[cfg(not(target_arch = "x86_64"))]
const X86_Q1_0_AVX2: Option<crate::DotFn> = None;
#[cfg(not(target_arch = "x86_64"))]
const X86_Q1_0_AVX512: Option<crate::DotFn> = None;
#[cfg(not(target_arch = "x86_64"))]
const X86_Q2_0_AVX2: Option<crate::DotFn> = None;
#[cfg(not(target_arch = "x86_64"))]
const X86_Q2_0_AVX512: Option<crate::DotFn> = None;

const POW3: [u8; 6] = [1, 3, 9, 27, 81, 243];

/// Base-3 digit `n` of a TQ1_0 byte, minus one (`-1`, `0` or `1`).
#[inline(always)]
fn trit(q: u8, n: usize) -> i32 {
    let q = q.wrapping_mul(POW3[n]);
    (((q as u16) * 3) >> 8) as i32 - 1
}

pub fn block_tq1_0(b: &[u8], out: &mut [f32; 256]) {
    let d = f16_at(b, 52);
    // (bytes, digits per byte): qs[0..32], qs[32..48], qh[0..4].
    let parts: [(&[u8], usize); 3] = [(&b[0..32], 5), (&b[32..48], 5), (&b[48..52], 4)];
    let mut k = 0;
    for (bytes, n_digits) in parts {
        for n in 0..n_digits {
            for &q in bytes {
                out[k] = trit(q, n) as f32 * d;
                k += 1;
            }
        }
    }
}
pub fn dequant_tq1_0(data: &[u8], out: &mut [f32]) {
    dequant_blocks(data, out, 54, block_tq1_0)
}
pub fn dot_tq1_0(data: &[u8], x: &[f32]) -> f32 {
    dot_via_dequant(data, x, 54, block_tq1_0)
}

pub fn block_tq2_0(b: &[u8], out: &mut [f32; 256]) {
    let d = f16_at(b, 64);
    let mut k = 0;
    for h in 0..2 {
        for l in 0..4 {
            for m in 0..32 {
                let c = (b[32 * h + m] >> (2 * l)) & 3;
                out[k] = (c as i32 - 1) as f32 * d;
                k += 1;
            }
        }
    }
}
pub fn dequant_tq2_0(data: &[u8], out: &mut [f32]) {
    dequant_blocks(data, out, 66, block_tq2_0)
}
pub fn dot_tq2_0(data: &[u8], x: &[f32]) -> f32 {
    dot_via_dequant(data, x, 66, block_tq2_0)
}

pub fn block_q1_0(b: &[u8], out: &mut [f32; 128]) {
    let d = f16_at(b, 0);
    let qs = &b[2..18];
    for (j, o) in out.iter_mut().enumerate() {
        *o = if (qs[j / 8] >> (j % 8)) & 1 != 0 {
            d
        } else {
            -d
        };
    }
}
pub fn dequant_q1_0(data: &[u8], out: &mut [f32]) {
    dequant_blocks(data, out, 18, block_q1_0)
}
pub fn dot_q1_0(data: &[u8], x: &[f32]) -> f32 {
    dot_via_dequant(data, x, 18, block_q1_0)
}

pub fn block_q2_0(b: &[u8], out: &mut [f32; 64]) {
    let d = f16_at(b, 0);
    let qs = &b[2..18];
    for (j, o) in out.iter_mut().enumerate() {
        let c = (qs[j / 4] >> (2 * (j % 4))) & 3;
        *o = (c as i32 - 1) as f32 * d;
    }
}
pub fn dequant_q2_0(data: &[u8], out: &mut [f32]) {
    dequant_blocks(data, out, 18, block_q2_0)
}
pub fn dot_q2_0(data: &[u8], x: &[f32]) -> f32 {
    dot_via_dequant(data, x, 18, block_q2_0)
}

/// AVX2 / AVX-512 dot products. Q1_0, Q2_0 and TQ2_0 decode each 32-element
/// group to signed bytes in element order and reuse the legacy 32-element
/// accumulation ([`crate::legacy::x86::block32_avx2`]); TQ1_0 extracts its
/// base-3 digits in 16-bit lanes. The block scale multiplies each group's
/// (or block's) `Σ q·x`.
#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use crate::legacy::x86::{block32_avx2, block32_avx512};
    use crate::util::{f16_ptr, has_f16c, hsum256};

    /// Generates the safe AVX2 and AVX-512 entry points of a type whose
    /// `$bs`-element, `$ts`-byte block has one f16 scale at byte `$d_off`
    /// and `$bs / 32` groups decoded by `$dec(block, group) -> __m256i`
    /// (signed bytes in element order; AVX2; reads inside the block only).
    macro_rules! groups32_dot {
        ($avx2:ident, $avx512:ident, $ts:expr, $bs:expr, $d_off:expr, $dec:ident, $scalar:path) => {
            pub fn $avx2(data: &[u8], x: &[f32]) -> f32 {
                #[target_feature(enable = "avx2,fma,f16c")]
                unsafe fn inner(mut b: *const u8, mut x: *const f32, n: usize) -> f32 {
                    let mut acc = [_mm256_setzero_ps(); 2];
                    for _ in 0..n {
                        let d = f16_ptr(b.add($d_off));
                        for g in 0..$bs / 32 {
                            block32_avx2::<false>($dec(b, g), d, 0.0, x.add(32 * g), &mut acc);
                        }
                        b = b.add($ts);
                        x = x.add($bs);
                    }
                    hsum256(_mm256_add_ps(acc[0], acc[1]))
                }
                let n = (data.len() / $ts).min(x.len() / $bs);
                if !has_f16c() {
                    return $scalar(data, x);
                }
                // SAFETY: lib.rs selects this kernel only when the CPU has
                // AVX2 and FMA; F16C was checked above. `inner` reads `n`
                // whole blocks and `$bs * n` values, which both slices hold.
                unsafe { inner(data.as_ptr(), x.as_ptr(), n) }
            }

            pub fn $avx512(data: &[u8], x: &[f32]) -> f32 {
                #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
                unsafe fn inner(mut b: *const u8, mut x: *const f32, n: usize) -> f32 {
                    let mut acc = [_mm512_setzero_ps(); 2];
                    for _ in 0..n {
                        let d = f16_ptr(b.add($d_off));
                        for g in 0..$bs / 32 {
                            block32_avx512::<false>($dec(b, g), d, 0.0, x.add(32 * g), &mut acc);
                        }
                        b = b.add($ts);
                        x = x.add($bs);
                    }
                    _mm512_reduce_add_ps(_mm512_add_ps(acc[0], acc[1]))
                }
                let n = (data.len() / $ts).min(x.len() / $bs);
                if !has_f16c() {
                    return $scalar(data, x);
                }
                // SAFETY: lib.rs selects this kernel only when the CPU has
                // AVX-512 F/BW/VL, AVX2 and FMA; F16C was checked above.
                // `inner` reads `n` whole blocks and `$bs * n` values, which
                // both slices hold.
                unsafe { inner(data.as_ptr(), x.as_ptr(), n) }
            }
        };
    }

    /// Q1_0 group `g` (elements 32g..32g+32): `+1` for a set bit, `-1` for a
    /// clear one.
    ///
    /// # Safety
    /// `b` must be valid for reading one 18-byte block, `g < 4`; AVX2.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn dec_q1_0(b: *const u8, g: usize) -> __m256i {
        let bits = std::ptr::read_unaligned(b.add(2 + 4 * g) as *const u32);
        // Byte j gets byte j / 8 of the word, then keeps bit j % 8.
        let shuf = _mm256_set_epi64x(
            0x0303_0303_0303_0303,
            0x0202_0202_0202_0202,
            0x0101_0101_0101_0101,
            0,
        );
        let bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(u32::from_le(bits) as i32), shuf);
        let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
        let set = _mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit), bit);
        // set: 0xFF -> 2 - 1 = 1; clear: 0 - 1 = -1.
        _mm256_sub_epi8(
            _mm256_and_si256(set, _mm256_set1_epi8(2)),
            _mm256_set1_epi8(1),
        )
    }

    /// 32 two-bit codes from 8 bytes at `p` (code `4k + s` in bits `2s` of
    /// byte `k`), minus one, as bytes in element order.
    ///
    /// # Safety
    /// `p` must be valid for reading 8 bytes; AVX2.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn codes2_minus1(p: *const u8) -> __m256i {
        // Dword k holds byte k; spread its four 2-bit fields to the low bits
        // of the dword's four bytes (the shifted copies never overlap there).
        let v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(p as *const __m128i));
        let s = _mm256_or_si256(
            _mm256_or_si256(v, _mm256_slli_epi32::<6>(v)),
            _mm256_or_si256(_mm256_slli_epi32::<12>(v), _mm256_slli_epi32::<18>(v)),
        );
        let c = _mm256_and_si256(s, _mm256_set1_epi32(0x0303_0303));
        _mm256_sub_epi8(c, _mm256_set1_epi8(1))
    }

    /// Q2_0 group `g` (elements 32g..32g+32).
    ///
    /// # Safety
    /// `b` must be valid for reading one 18-byte block, `g < 2`; AVX2.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn dec_q2_0(b: *const u8, g: usize) -> __m256i {
        codes2_minus1(b.add(2 + 8 * g))
    }

    /// TQ2_0 group `g` (elements 32g..32g+32): bits `2(g % 4)` of the 32
    /// bytes `qs[32(g / 4)..]`, minus one.
    ///
    /// # Safety
    /// `b` must be valid for reading one 66-byte block, `g < 8`; AVX2.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn dec_tq2_0(b: *const u8, g: usize) -> __m256i {
        let v = _mm256_loadu_si256(b.add(32 * (g / 4)) as *const __m256i);
        let sh = _mm_cvtsi32_si128(2 * (g % 4) as i32);
        let c = _mm256_and_si256(_mm256_srl_epi16(v, sh), _mm256_set1_epi8(3));
        _mm256_sub_epi8(c, _mm256_set1_epi8(1))
    }

    groups32_dot!(
        dot_q1_0_avx2,
        dot_q1_0_avx512,
        18,
        128,
        0,
        dec_q1_0,
        super::dot_q1_0
    );
    groups32_dot!(
        dot_q2_0_avx2,
        dot_q2_0_avx512,
        18,
        64,
        0,
        dec_q2_0,
        super::dot_q2_0
    );
    groups32_dot!(
        dot_tq2_0_avx2,
        dot_tq2_0_avx512,
        66,
        256,
        64,
        dec_tq2_0,
        super::dot_tq2_0
    );

    // ---- TQ1_0 ----

    /// Base-3 digit of 16 bytes (zero-extended in 16-bit lanes) for the
    /// per-lane multipliers `m` (powers of 3), minus one.
    ///
    /// # Safety
    /// AVX2.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn trits16(a: __m256i, m: __m256i) -> __m256i {
        let q = _mm256_and_si256(_mm256_mullo_epi16(a, m), _mm256_set1_epi16(0xFF));
        let t = _mm256_srli_epi16::<8>(_mm256_mullo_epi16(q, _mm256_set1_epi16(3)));
        _mm256_sub_epi16(t, _mm256_set1_epi16(1))
    }

    /// The TQ1_0 block at `b` as 16 vectors of 16 signed 16-bit digits (each
    /// -1, 0 or 1), in element order.
    ///
    /// # Safety
    /// `b` must be valid for reading one 54-byte block; AVX2.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn tq1_0_digits(b: *const u8) -> [__m256i; 16] {
        let a0 = _mm256_cvtepu8_epi16(_mm_loadu_si128(b as *const __m128i));
        let a1 = _mm256_cvtepu8_epi16(_mm_loadu_si128(b.add(16) as *const __m128i));
        let a2 = _mm256_cvtepu8_epi16(_mm_loadu_si128(b.add(32) as *const __m128i));
        let mut out = [_mm256_setzero_si256(); 16];
        for n in 0..5 {
            let m = _mm256_set1_epi16(super::POW3[n] as i16);
            out[2 * n] = trits16(a0, m);
            out[2 * n + 1] = trits16(a1, m);
            out[10 + n] = trits16(a2, m);
        }
        // Lane i holds qh[i % 4] with multiplier 3^(i / 4).
        let qh = std::ptr::read_unaligned(b.add(48) as *const u32);
        let h = _mm256_cvtepu8_epi16(_mm_set1_epi32(qh as i32));
        let m = _mm256_setr_epi16(1, 1, 1, 1, 3, 3, 3, 3, 9, 9, 9, 9, 27, 27, 27, 27);
        out[15] = trits16(h, m);
        out
    }

    pub fn dot_tq1_0_avx2(data: &[u8], x: &[f32]) -> f32 {
        let n = (data.len() / 54).min(x.len() / 256);
        if !has_f16c() {
            return super::dot_tq1_0(data, x);
        }
        // SAFETY: lib.rs selects this kernel only when the CPU has AVX2 and
        // FMA; F16C was checked above. `n` whole blocks and `256 * n` values
        // are in bounds.
        unsafe { tq1_0_avx2(data.as_ptr(), x.as_ptr(), n) }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn tq1_0_avx2(mut b: *const u8, mut x: *const f32, n: usize) -> f32 {
        let mut acc = _mm256_setzero_ps();
        for _ in 0..n {
            let t = tq1_0_digits(b);
            let mut s0 = _mm256_setzero_ps();
            let mut s1 = _mm256_setzero_ps();
            for (k, v) in t.iter().enumerate() {
                let lo = _mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(_mm256_castsi256_si128(*v)));
                let hi =
                    _mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(_mm256_extracti128_si256::<1>(*v)));
                s0 = _mm256_fmadd_ps(lo, _mm256_loadu_ps(x.add(16 * k)), s0);
                s1 = _mm256_fmadd_ps(hi, _mm256_loadu_ps(x.add(16 * k + 8)), s1);
            }
            let d = _mm256_set1_ps(f16_ptr(b.add(52)));
            acc = _mm256_fmadd_ps(d, _mm256_add_ps(s0, s1), acc);
            b = b.add(54);
            x = x.add(256);
        }
        hsum256(acc)
    }

    pub fn dot_tq1_0_avx512(data: &[u8], x: &[f32]) -> f32 {
        let n = (data.len() / 54).min(x.len() / 256);
        if !has_f16c() {
            return super::dot_tq1_0(data, x);
        }
        // SAFETY: lib.rs selects this kernel only when the CPU has AVX-512
        // F/BW/VL, AVX2 and FMA; F16C was checked above. `n` whole blocks and
        // `256 * n` values are in bounds.
        unsafe { tq1_0_avx512(data.as_ptr(), x.as_ptr(), n) }
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
    unsafe fn tq1_0_avx512(mut b: *const u8, mut x: *const f32, n: usize) -> f32 {
        let mut acc = _mm512_setzero_ps();
        for _ in 0..n {
            let t = tq1_0_digits(b);
            let mut s0 = _mm512_setzero_ps();
            let mut s1 = _mm512_setzero_ps();
            for k in (0..16).step_by(2) {
                let a = _mm512_cvtepi32_ps(_mm512_cvtepi16_epi32(t[k]));
                let c = _mm512_cvtepi32_ps(_mm512_cvtepi16_epi32(t[k + 1]));
                s0 = _mm512_fmadd_ps(a, _mm512_loadu_ps(x.add(16 * k)), s0);
                s1 = _mm512_fmadd_ps(c, _mm512_loadu_ps(x.add(16 * k + 16)), s1);
            }
            let d = _mm512_set1_ps(f16_ptr(b.add(52)));
            acc = _mm512_fmadd_ps(d, _mm512_add_ps(s0, s1), acc);
            b = b.add(54);
            x = x.add(256);
        }
        _mm512_reduce_add_ps(acc)
    }
}
