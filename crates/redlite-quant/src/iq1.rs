//! 1-bit lattice formats IQ1_S and IQ1_M (256-value super-blocks).
//!
//! Every group of 8 weights is an entry of an 11-bit grid of values
//! -1, 0, 1, shifted by ±0.125 and scaled: `w = dl·(grid + delta)`.
//! Layouts (ggml-common.h):
//!
//! * IQ1_S, 50 bytes: `d: f16`, 32 grid-index low bytes, 8 × `u16`
//!   (per 32 weights: four 3-bit index highs, a 3-bit scale, the delta sign
//!   in bit 15); `dl = d·(2s + 1)`.
//! * IQ1_M, 56 bytes: 32 grid-index low bytes, 16 bytes of nibbles (3-bit
//!   index high + delta sign, one per 8 weights), 4 × `u16` scale words
//!   holding 3-bit scales (one per 16 weights, `dl = d·(2s + 1)`). There is
//!   no `d` field: the f16 super-block scale is assembled from the top
//!   nibbles of the four scale words.
//!
//! The scalar dequantizers follow gguf-py's float operation order exactly.

use crate::iq2::{grid_val, scalar_kernels};
use crate::iq_tables::{iq1s_grid, IQ1M_DELTA, IQ1S_DELTA};
use crate::util::{dot_via_dequant, f16_at, u16_at};
use crate::{GgmlType, TypeKernels};

const QK: usize = 256;
const IQ1S_BYTES: usize = 50;
/// Bytes of one IQ1_M super-block.
pub(crate) const IQ1M_BYTES: usize = 56;

pub static IQ1_S: TypeKernels = TypeKernels {
    ty: GgmlType::IQ1_S,
    dequant: dequant_iq1s,
    dot_scalar: dot_iq1s,
    dot_avx2: x86::IQ1S_AVX2,
    dot_avx512: x86::IQ1S_AVX512,
};
pub static IQ1_M: TypeKernels = TypeKernels {
    ty: GgmlType::IQ1_M,
    dequant: dequant_iq1m,
    dot_scalar: dot_iq1m,
    dot_avx2: x86::IQ1M_AVX2,
    dot_avx512: x86::IQ1M_AVX512,
};

/// `out[j] = dl * (grid[j] + delta)`.
#[inline(always)]
fn put8_shifted(out: &mut [f32], dl: f32, g: u64, delta: f32) {
    for (j, o) in out[..8].iter_mut().enumerate() {
        *o = dl * (grid_val(g, j) + delta);
    }
}

/// IQ1_S: the scale and delta of the 32 weights described by `qh`.
#[inline(always)]
fn iq1s_scale(d: f32, qh: u32) -> (f32, f32) {
    let dl = d * (2 * ((qh >> 12) & 7) + 1) as f32;
    // Branch-free: bit 15 of `qh` becomes the sign bit of the delta.
    let delta = f32::from_bits(IQ1S_DELTA.to_bits() | ((qh & 0x8000) << 16));
    (dl, delta)
}

/// IQ1_M: the f16 super-block scale, from the top nibbles of the scale words.
#[inline(always)]
fn iq1m_d(sc: [u16; 4]) -> f32 {
    half::f16::from_bits(iq1m_d_bits(sc)).to_f32()
}

#[inline(always)]
fn iq1m_d_bits(sc: [u16; 4]) -> u16 {
    (sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000)
}

/// IQ1_M: the scale of half `h` (16 weights) of sub-block `ib`.
#[inline(always)]
fn iq1m_scale(d: f32, sc: [u16; 4], ib: usize, h: usize) -> f32 {
    d * (2 * ((sc[ib / 2] >> (6 * (ib % 2) + 3 * h)) & 7) + 1) as f32
}

/// IQ1_M: the grid entry and delta of 8-group `k` from its index byte and nibble.
#[inline(always)]
fn iq1m_group(qs: u8, nib: u8) -> (u64, f32) {
    let idx = qs as usize | (((nib & 7) as usize) << 8);
    // Branch-free: bit 3 of the nibble becomes the sign bit of the delta.
    let delta = f32::from_bits(IQ1M_DELTA.to_bits() | (((nib & 8) as u32) << 28));
    (iq1s_grid[idx & 2047], delta)
}

fn deq_iq1s_block(b: &[u8], out: &mut [f32; QK]) {
    let d = f16_at(b, 0);
    for ib in 0..8 {
        let qh = u16_at(b, 34 + 2 * ib) as u32;
        let (dl, delta) = iq1s_scale(d, qh);
        for l in 0..4 {
            let idx = b[2 + 4 * ib + l] as usize | ((((qh >> (3 * l)) & 7) as usize) << 8);
            put8_shifted(&mut out[32 * ib + 8 * l..], dl, iq1s_grid[idx], delta);
        }
    }
}

fn iq1m_scale_words(b: &[u8]) -> [u16; 4] {
    [u16_at(b, 48), u16_at(b, 50), u16_at(b, 52), u16_at(b, 54)]
}

fn deq_iq1m_block(b: &[u8], out: &mut [f32; QK]) {
    let sc = iq1m_scale_words(b);
    let d = iq1m_d(sc);
    for ib in 0..8 {
        for l in 0..4 {
            let k = 4 * ib + l;
            let dl = iq1m_scale(d, sc, ib, l / 2);
            let (g, delta) = iq1m_group(b[k], b[32 + k / 2] >> (4 * (k % 2)));
            put8_shifted(&mut out[8 * k..], dl, g, delta);
        }
    }
}

scalar_kernels!(dequant_iq1s, dot_iq1s, deq_iq1s_block, IQ1S_BYTES);
scalar_kernels!(dequant_iq1m, dot_iq1m, deq_iq1m_block, IQ1M_BYTES);

/// Fast paths. The wrappers are installed only in `dot_avx2` / `dot_avx512`,
/// which lib.rs calls only on CPUs with those features.
#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::*;
    use crate::iq2::simd::*;
    use crate::iq_tables::IQ1S_GRID;
    use crate::DotFn;
    use std::arch::x86_64::*;

    pub(super) const IQ1S_AVX2: Option<DotFn> = Some(iq1s_avx2);
    pub(super) const IQ1S_AVX512: Option<DotFn> = Some(iq1s_avx512);
    pub(super) const IQ1M_AVX2: Option<DotFn> = Some(iq1m_avx2);
    pub(super) const IQ1M_AVX512: Option<DotFn> = Some(iq1m_avx512);

    wrappers! {
        iq1s_avx2 => k_iq1s_avx2, "avx2";
        iq1s_avx512 => k_iq1s_avx512, "avx512bw";
        iq1m_avx2 => k_iq1m_avx2, "avx2";
        iq1m_avx512 => k_iq1m_avx512, "avx512bw";
    }

    /// IQ1_S grid entry `l` of the sub-block whose index highs are in `qh`.
    ///
    /// # Safety
    /// `qs` must point to at least `l + 1` readable bytes.
    #[inline(always)]
    unsafe fn s_entry(qs: *const u8, qh: u32, l: usize) -> u64 {
        let idx = *qs.add(l) as usize | ((((qh >> (3 * l)) & 7) as usize) << 8);
        iq1s_grid[idx & 2047]
    }

    /// # Safety
    /// CPU must have AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn k_iq1s_avx2(data: &[u8], x: &[f32]) -> f32 {
        let nb = data.len() / IQ1S_BYTES;
        assert_eq!(x.len(), nb * QK, "IQ1_S dot: length mismatch");
        let mut acc = [_mm256_setzero_ps(); 2];
        for i in 0..nb {
            let b = data.as_ptr().add(i * IQ1S_BYTES);
            let xb = x.as_ptr().add(i * QK);
            let d = f16_ptr(b);
            // Constant accumulator indices keep them in registers.
            for ib2 in 0..4 {
                for (h, a) in acc.iter_mut().enumerate() {
                    let ib = 2 * ib2 + h;
                    let qh = rd16(b.add(34 + 2 * ib));
                    let (dl, delta) = iq1s_scale(d, qh);
                    let dv = _mm256_set1_ps(delta);
                    let qs = b.add(2 + 4 * ib);
                    let xp = xb.add(32 * ib);
                    let mut t = [_mm256_setzero_ps(); 2];
                    for l in 0..4 {
                        let w = _mm256_add_ps(grid8(s_entry(qs, qh, l)), dv);
                        t[l & 1] = _mm256_fmadd_ps(w, _mm256_loadu_ps(xp.add(8 * l)), t[l & 1]);
                    }
                    let t = _mm256_add_ps(t[0], t[1]);
                    *a = _mm256_fmadd_ps(t, _mm256_set1_ps(dl), *a);
                }
            }
        }
        hsum8(_mm256_add_ps(acc[0], acc[1]))
    }

    /// # Safety
    /// CPU must have AVX-512 F/BW/VL, AVX2 and FMA.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma")]
    unsafe fn k_iq1s_avx512(data: &[u8], x: &[f32]) -> f32 {
        let nb = data.len() / IQ1S_BYTES;
        assert_eq!(x.len(), nb * QK, "IQ1_S dot: length mismatch");
        let mut acc = [_mm512_setzero_ps(); 2];
        for i in 0..nb {
            let b = data.as_ptr().add(i * IQ1S_BYTES);
            let xb = x.as_ptr().add(i * QK);
            let d = f16_ptr(b);
            // Constant accumulator indices keep them in registers.
            for ib2 in 0..4 {
                for (h, a) in acc.iter_mut().enumerate() {
                    let ib = 2 * ib2 + h;
                    let qh = rd16(b.add(34 + 2 * ib));
                    let (dl, delta) = iq1s_scale(d, qh);
                    let dv = _mm512_set1_ps(delta);
                    let qs = b.add(2 + 4 * ib);
                    let xp = xb.add(32 * ib);
                    let w0 = _mm512_add_ps(grid16(s_entry(qs, qh, 0), s_entry(qs, qh, 1)), dv);
                    let w1 = _mm512_add_ps(grid16(s_entry(qs, qh, 2), s_entry(qs, qh, 3)), dv);
                    let t = _mm512_mul_ps(w0, _mm512_loadu_ps(xp));
                    let t = _mm512_fmadd_ps(w1, _mm512_loadu_ps(xp.add(16)), t);
                    *a = _mm512_fmadd_ps(t, _mm512_set1_ps(dl), *a);
                }
            }
        }
        _mm512_reduce_add_ps(_mm512_add_ps(acc[0], acc[1]))
    }

    /// One IQ1_M block made ready for the dot loop: the 256 weights as
    /// signed bytes `8·(grid + delta)` (exact: grid values are -1, 0, 1 and
    /// delta is ±1/8) and the 16 scales `d·(2s + 1)/8`, one per 16 weights.
    #[repr(C, align(32))]
    pub(super) struct MPrep {
        pub(super) q: [i8; QK],
        pub(super) dl: [f32; 16],
    }

    impl MPrep {
        pub(super) fn new() -> MPrep {
            MPrep {
                q: [0; QK],
                dl: [0.0; 16],
            }
        }
    }

    /// `8·grid` of every IQ1_S/IQ1_M grid entry (bytes -8, 0, 8).
    pub(super) static GRID8: [u64; 2048] = times8(IQ1S_GRID);

    const fn times8<const N: usize>(g: [u64; N]) -> [u64; N] {
        let mut t = [0u64; N];
        let mut i = 0;
        while i < N {
            // Bytes are -1, 0, 1: the bits shifted in from the byte below are masked off.
            t[i] = (g[i] << 3) & 0xf8f8_f8f8_f8f8_f8f8;
            i += 1;
        }
        t
    }

    /// Offsets of 32 grid rows, aligned for vector stores.
    #[repr(C, align(32))]
    struct Offsets([u16; 32]);

    /// Fills `p` from the IQ1_M block at `b`: the 32 rows of `8·grid` are
    /// assembled four at a time and shifted by `8·delta` in the byte domain.
    ///
    /// # Safety
    /// `b` must point to a whole IQ1_M block; CPU must have AVX2 and FMA.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn m_prep(b: *const u8, p: &mut MPrep) {
        let qh = _mm_loadu_si128(b.add(32).cast());
        let m4 = _mm_set1_epi8(15);
        let m3 = _mm_set1_epi8(7);
        // Nibble of group k (3 index high bits, delta sign in bit 3).
        let lo = _mm_and_si128(qh, m4);
        let hi = _mm_and_si128(_mm_srli_epi16::<4>(qh), m4);
        let nib = [_mm_unpacklo_epi8(lo, hi), _mm_unpackhi_epi8(lo, hi)];
        // 11-bit grid indices.
        let mut off = Offsets([0; 32]);
        for (c, n) in nib.iter().enumerate() {
            let qs = _mm_loadu_si128(b.add(16 * c).cast());
            let h = _mm_and_si128(*n, m3);
            let o = off.0.as_mut_ptr().add(16 * c);
            _mm_store_si128(o.cast(), _mm_unpacklo_epi8(qs, h));
            _mm_store_si128(o.add(8).cast(), _mm_unpackhi_epi8(qs, h));
        }
        // `8·delta` per nibble: +1 below 8, -1 from 8 on (sign bit set).
        let lut = _mm256_setr_epi8(
            1, 1, 1, 1, 1, 1, 1, 1, -1, -1, -1, -1, -1, -1, -1, -1, 1, 1, 1, 1, 1, 1, 1, 1, -1, -1,
            -1, -1, -1, -1, -1, -1,
        );
        // Spreads nibbles 0..4 of a 128-bit lane over 8 bytes each.
        let spread = _mm256_setr_epi8(
            0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3,
            3, 3, 3,
        );
        for c in 0..8 {
            let n = _mm256_broadcastsi128_si256(nib[c / 4]);
            let pat = _mm256_add_epi8(spread, _mm256_set1_epi8(4 * (c % 4) as i8));
            let delta = _mm256_shuffle_epi8(lut, _mm256_shuffle_epi8(n, pat));
            // Volatile: keeps the offsets as plain loads rather than
            // vector-to-scalar extractions.
            let row =
                |j: usize| GRID8[off.0.as_ptr().add(4 * c + j).read_volatile() as usize & 2047];
            let g = _mm256_setr_epi64x(row(0) as i64, row(1) as i64, row(2) as i64, row(3) as i64);
            let v = _mm256_add_epi8(g, delta);
            _mm256_store_si256(p.q.as_mut_ptr().add(32 * c).cast(), v);
        }
        // Scale m (16 weights) is bits 3(m%4) .. 3(m%4)+3 of word m/4.
        let d8 = _mm256_set1_ps(f16_to_f32(iq1m_d_bits(m_scale_words(b))) * 0.125);
        let words = _mm256_cvtepu16_epi32(_mm_loadl_epi64(b.add(48).cast()));
        let shifts = _mm256_setr_epi32(0, 3, 6, 9, 0, 3, 6, 9);
        let seven = _mm256_set1_epi32(7);
        let one32 = _mm256_set1_epi32(1);
        for (j, sel) in [
            _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1),
            _mm256_setr_epi32(2, 2, 2, 2, 3, 3, 3, 3),
        ]
        .into_iter()
        .enumerate()
        {
            let s = _mm256_and_si256(
                _mm256_srlv_epi32(_mm256_permutevar8x32_epi32(words, sel), shifts),
                seven,
            );
            let odd = _mm256_or_si256(_mm256_slli_epi32::<1>(s), one32);
            _mm256_store_ps(
                p.dl.as_mut_ptr().add(8 * j),
                _mm256_mul_ps(d8, _mm256_cvtepi32_ps(odd)),
            );
        }
    }

    /// IQ1_M scale words of the block at `b`.
    ///
    /// # Safety
    /// `b` must point to a whole IQ1_M block.
    #[inline(always)]
    unsafe fn m_scale_words(b: *const u8) -> [u16; 4] {
        [0, 1, 2, 3].map(|k| rd16(b.add(48 + 2 * k)) as u16)
    }

    /// 8 prepared weight bytes at `q` as f32.
    ///
    /// # Safety
    /// `q` must be valid for reading 8 bytes; CPU must have AVX2 and FMA.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn bytes8(q: *const i8) -> __m256 {
        _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(q.cast())))
    }

    /// # Safety
    /// CPU must have AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn k_iq1m_avx2(data: &[u8], x: &[f32]) -> f32 {
        let nb = data.len() / IQ1M_BYTES;
        assert_eq!(x.len(), nb * QK, "IQ1_M dot: length mismatch");
        let mut acc = [_mm256_setzero_ps(); 4];
        let mut p = MPrep::new();
        for i in 0..nb {
            let b = data.as_ptr().add(i * IQ1M_BYTES);
            let xb = x.as_ptr().add(i * QK);
            m_prep(b, &mut p);
            // One accumulator per sub-block of a quad: constant indices keep
            // them in registers.
            for m4 in 0..4 {
                for (h, a) in acc.iter_mut().enumerate() {
                    let m = 4 * m4 + h;
                    let q = p.q.as_ptr().add(16 * m);
                    let xp = xb.add(16 * m);
                    let t = _mm256_mul_ps(bytes8(q), _mm256_loadu_ps(xp));
                    let t = _mm256_fmadd_ps(bytes8(q.add(8)), _mm256_loadu_ps(xp.add(8)), t);
                    *a = _mm256_fmadd_ps(t, _mm256_broadcast_ss(&p.dl[m]), *a);
                }
            }
        }
        let s = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
        hsum8(s)
    }

    /// # Safety
    /// CPU must have AVX-512 F/BW/VL, AVX2 and FMA.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma")]
    unsafe fn k_iq1m_avx512(data: &[u8], x: &[f32]) -> f32 {
        let nb = data.len() / IQ1M_BYTES;
        assert_eq!(x.len(), nb * QK, "IQ1_M dot: length mismatch");
        let mut acc = [_mm512_setzero_ps(); 4];
        let mut p = MPrep::new();
        for i in 0..nb {
            let b = data.as_ptr().add(i * IQ1M_BYTES);
            let xb = x.as_ptr().add(i * QK);
            m_prep(b, &mut p);
            for m4 in 0..4 {
                for (h, a) in acc.iter_mut().enumerate() {
                    let m = 4 * m4 + h;
                    let q = _mm_load_si128(p.q.as_ptr().add(16 * m).cast());
                    let w = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q));
                    let t = _mm512_mul_ps(w, _mm512_loadu_ps(xb.add(16 * m)));
                    *a = _mm512_fmadd_ps(t, _mm512_set1_ps(p.dl[m]), *a);
                }
            }
        }
        let s = _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3]));
        _mm512_reduce_add_ps(s)
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod x86 {
    use crate::DotFn;
    pub(super) const IQ1S_AVX2: Option<DotFn> = None;
    pub(super) const IQ1S_AVX512: Option<DotFn> = None;
    pub(super) const IQ1M_AVX2: Option<DotFn> = None;
    pub(super) const IQ1M_AVX512: Option<DotFn> = None;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::iq2::test_support::*;

    #[test]
    fn iq1s_random_blocks_match_gguf_py() {
        check_random_vs_python(&IQ1_S, 48, 21);
    }
    #[test]
    fn iq1m_random_blocks_match_gguf_py() {
        check_random_vs_python(&IQ1_M, 48, 22);
    }
    #[test]
    fn iq1m_fixture_tensors_match_gguf_py() {
        check_fixture_vs_python(&IQ1_M, "tiny-s-IQ1_M.gguf");
        check_fixture_vs_python(&IQ1_M, "tiny-s-CF2mix.gguf");
    }
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn grid8_is_eight_times_the_reference_grid() {
        assert_eq!(x86::GRID8.len(), iq1s_grid.len());
        for (i, (g8, g)) in x86::GRID8.iter().zip(iq1s_grid.iter()).enumerate() {
            for j in 0..8 {
                let v = (g8 >> (8 * j)) as u8 as i8 as f32;
                assert_eq!(v, 8.0 * grid_val(*g, j), "entry {i} value {j}");
            }
        }
    }

    #[test]
    fn iq1_simd_matches_scalar() {
        check_simd_vs_scalar(&IQ1_S, 23);
        check_simd_vs_scalar(&IQ1_M, 24);
    }
}
