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
const IQ1M_BYTES: usize = 56;

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
            for ib in 0..8 {
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
                acc[ib & 1] = _mm256_fmadd_ps(t, _mm256_set1_ps(dl), acc[ib & 1]);
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
            for ib in 0..8 {
                let qh = rd16(b.add(34 + 2 * ib));
                let (dl, delta) = iq1s_scale(d, qh);
                let dv = _mm512_set1_ps(delta);
                let qs = b.add(2 + 4 * ib);
                let xp = xb.add(32 * ib);
                let w0 = _mm512_add_ps(grid16(s_entry(qs, qh, 0), s_entry(qs, qh, 1)), dv);
                let w1 = _mm512_add_ps(grid16(s_entry(qs, qh, 2), s_entry(qs, qh, 3)), dv);
                let t = _mm512_mul_ps(w0, _mm512_loadu_ps(xp));
                let t = _mm512_fmadd_ps(w1, _mm512_loadu_ps(xp.add(16)), t);
                acc[ib & 1] = _mm512_fmadd_ps(t, _mm512_set1_ps(dl), acc[ib & 1]);
            }
        }
        _mm512_reduce_add_ps(_mm512_add_ps(acc[0], acc[1]))
    }

    /// Rows of `+delta` and `-delta`, selected by a delta sign bit.
    static DELTA_ROWS: A32<[[f32; 8]; 2]> = A32([[IQ1M_DELTA; 8], [-IQ1M_DELTA; 8]]);

    /// IQ1_M scale words of the block at `b`.
    ///
    /// # Safety
    /// `b` must point to a whole IQ1_M block.
    #[inline(always)]
    unsafe fn m_scale_words(b: *const u8) -> [u16; 4] {
        [0, 1, 2, 3].map(|k| rd16(b.add(48 + 2 * k)) as u16)
    }

    /// # Safety
    /// CPU must have AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn k_iq1m_avx2(data: &[u8], x: &[f32]) -> f32 {
        let nb = data.len() / IQ1M_BYTES;
        assert_eq!(x.len(), nb * QK, "IQ1_M dot: length mismatch");
        let mut acc = [_mm256_setzero_ps(); 2];
        for i in 0..nb {
            let b = data.as_ptr().add(i * IQ1M_BYTES);
            let xb = x.as_ptr().add(i * QK);
            let sc = m_scale_words(b);
            let d = f16_to_f32(iq1m_d_bits(sc));
            for ib in 0..8 {
                for (h, a) in acc.iter_mut().enumerate() {
                    let k = 4 * ib + 2 * h;
                    let qh = *b.add(32 + k / 2) as usize;
                    let i0 = *b.add(k) as usize | ((qh & 7) << 8);
                    let i1 = *b.add(k + 1) as usize | (((qh >> 4) & 7) << 8);
                    let d0 = _mm256_load_ps(DELTA_ROWS.0[(qh >> 3) & 1].as_ptr());
                    let d1 = _mm256_load_ps(DELTA_ROWS.0[(qh >> 7) & 1].as_ptr());
                    let w0 = _mm256_add_ps(grid8(iq1s_grid[i0 & 2047]), d0);
                    let w1 = _mm256_add_ps(grid8(iq1s_grid[i1 & 2047]), d1);
                    let xp = xb.add(8 * k);
                    let t = _mm256_mul_ps(w0, _mm256_loadu_ps(xp));
                    let t = _mm256_fmadd_ps(w1, _mm256_loadu_ps(xp.add(8)), t);
                    let dl = _mm256_set1_ps(iq1m_scale(d, sc, ib, h));
                    *a = _mm256_fmadd_ps(t, dl, *a);
                }
            }
        }
        hsum8(_mm256_add_ps(acc[0], acc[1]))
    }

    /// # Safety
    /// CPU must have AVX-512 F/BW/VL, AVX2 and FMA.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma")]
    unsafe fn k_iq1m_avx512(data: &[u8], x: &[f32]) -> f32 {
        let nb = data.len() / IQ1M_BYTES;
        assert_eq!(x.len(), nb * QK, "IQ1_M dot: length mismatch");
        let pos = _mm512_set1_ps(IQ1M_DELTA);
        let neg = _mm512_set1_ps(-IQ1M_DELTA);
        let mut acc = [_mm512_setzero_ps(); 4];
        for i in 0..nb {
            let b = data.as_ptr().add(i * IQ1M_BYTES);
            let xb = x.as_ptr().add(i * QK);
            let sc = m_scale_words(b);
            let d = f16_to_f32(iq1m_d_bits(sc));
            for ib in 0..8 {
                for h in 0..2 {
                    let k = 4 * ib + 2 * h;
                    let qh = *b.add(32 + k / 2);
                    let (g0, _) = iq1m_group(*b.add(k), qh);
                    let (g1, _) = iq1m_group(*b.add(k + 1), qh >> 4);
                    // Lanes 0-7 take the low nibble's delta sign, 8-15 the high one's.
                    let m = (((qh >> 3) & 1) as u16 * 0x00ff) | (((qh >> 7) & 1) as u16 * 0xff00);
                    let w = _mm512_add_ps(grid16(g0, g1), _mm512_mask_blend_ps(m, pos, neg));
                    let w = _mm512_mul_ps(w, _mm512_set1_ps(iq1m_scale(d, sc, ib, h)));
                    let a = &mut acc[(ib & 1) * 2 + h];
                    *a = _mm512_fmadd_ps(w, _mm512_loadu_ps(xb.add(8 * k)), *a);
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
    #[test]
    fn iq1_simd_matches_scalar() {
        check_simd_vs_scalar(&IQ1_S, 23);
        check_simd_vs_scalar(&IQ1_M, 24);
    }
}
