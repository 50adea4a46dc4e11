//! 3-bit lattice formats IQ3_XXS and IQ3_S (256-value super-blocks).
//!
//! Every group of 4 weights is one entry of a grid; signs come per 8 weights.
//! Layouts (ggml-common.h):
//!
//! * IQ3_XXS, 98 bytes: `d: f16`, 64 grid indices (bytes), then 8 × `u32`
//!   holding four 7-bit sign indices and a 4-bit scale in the top bits;
//!   sub-block scale `d·(0.5 + s)·0.5`.
//! * IQ3_S, 110 bytes: `d: f16`, 64 grid-index low bytes, 8 bytes of index
//!   9th bits, 32 sign bytes, 4 bytes of two 4-bit scales; sub-block scale
//!   `d·(1 + 2s)`.
//!
//! The scalar dequantizers follow gguf-py's float operation order exactly.

use crate::iq2::{put8_signed, scalar_kernels};
use crate::iq_tables::{iq3s_grid, iq3xxs_grid, ksigns_iq2xs};
use crate::util::{dot_via_dequant, f16_at, u32_at};
use crate::{GgmlType, TypeKernels};

const QK: usize = 256;
const IQ3XXS_BYTES: usize = 98;
const IQ3S_BYTES: usize = 110;

pub static IQ3_XXS: TypeKernels = TypeKernels {
    ty: GgmlType::IQ3_XXS,
    dequant: dequant_iq3xxs,
    dot_scalar: dot_iq3xxs,
    dot_avx2: x86::IQ3XXS_AVX2,
    dot_avx512: x86::IQ3XXS_AVX512,
};
pub static IQ3_S: TypeKernels = TypeKernels {
    ty: GgmlType::IQ3_S,
    dequant: dequant_iq3s,
    dot_scalar: dot_iq3s,
    dot_avx2: x86::IQ3S_AVX2,
    dot_avx512: x86::IQ3S_AVX512,
};

/// Two 4-value grid entries as one 8-value entry.
#[inline(always)]
fn pair(lo: u32, hi: u32) -> u64 {
    lo as u64 | ((hi as u64) << 32)
}

#[inline(always)]
fn iq3xxs_scale(d: f32, aux: u32) -> f32 {
    d * (0.5 + (aux >> 28) as f32) * 0.5
}

#[inline(always)]
fn iq3s_scale(d: f32, scales: u8, ib: usize) -> f32 {
    d * (1 + 2 * ((scales >> (4 * (ib & 1))) & 15) as u32) as f32
}

/// Grid indices `2l` and `2l+1` of IQ3_S sub-block `ib` (qs low byte, qh 9th bit).
#[inline(always)]
fn iq3s_pair(qs0: u8, qs1: u8, qh: u32, l: usize) -> u64 {
    let i0 = qs0 as usize | (((qh >> (2 * l)) & 1) << 8) as usize;
    let i1 = qs1 as usize | (((qh >> (2 * l + 1)) & 1) << 8) as usize;
    pair(iq3s_grid[i0 & 511], iq3s_grid[i1 & 511])
}

fn deq_iq3xxs_block(b: &[u8], out: &mut [f32; QK]) {
    let d = f16_at(b, 0);
    for ib in 0..8 {
        let aux = u32_at(b, 66 + 4 * ib);
        let db = iq3xxs_scale(d, aux);
        for l in 0..4 {
            let q = 2 + 8 * ib + 2 * l;
            let g = pair(iq3xxs_grid[b[q] as usize], iq3xxs_grid[b[q + 1] as usize]);
            let s = ksigns_iq2xs[((aux >> (7 * l)) & 127) as usize];
            put8_signed(&mut out[32 * ib + 8 * l..], db, g, s);
        }
    }
}

fn deq_iq3s_block(b: &[u8], out: &mut [f32; QK]) {
    let d = f16_at(b, 0);
    for ib in 0..8 {
        let db = iq3s_scale(d, b[106 + ib / 2], ib);
        let qh = b[66 + ib] as u32;
        for l in 0..4 {
            let q = 2 + 8 * ib + 2 * l;
            let g = iq3s_pair(b[q], b[q + 1], qh, l);
            put8_signed(&mut out[32 * ib + 8 * l..], db, g, b[74 + 4 * ib + l]);
        }
    }
}

scalar_kernels!(dequant_iq3xxs, dot_iq3xxs, deq_iq3xxs_block, IQ3XXS_BYTES);
scalar_kernels!(dequant_iq3s, dot_iq3s, deq_iq3s_block, IQ3S_BYTES);

/// Fast paths. The wrappers are installed only in `dot_avx2` / `dot_avx512`,
/// which lib.rs calls only on CPUs with those features.
#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::*;
    use crate::iq2::simd::*;
    use crate::iq_tables::{IQ3S_GRID, IQ3XXS_GRID};
    use crate::DotFn;
    use std::arch::x86_64::*;

    pub(super) const IQ3XXS_AVX2: Option<DotFn> = Some(iq3xxs_avx2);
    pub(super) const IQ3XXS_AVX512: Option<DotFn> = Some(iq3xxs_avx512);
    pub(super) const IQ3S_AVX2: Option<DotFn> = Some(iq3s_avx2);
    pub(super) const IQ3S_AVX512: Option<DotFn> = Some(iq3s_avx512);

    wrappers! {
        iq3xxs_avx2 => k_iq3xxs_avx2, "avx2";
        iq3xxs_avx512 => k_iq3xxs_avx512, "avx512bw";
        iq3s_avx2 => k_iq3s_avx2, "avx2";
        iq3s_avx512 => k_iq3s_avx512, "avx512bw";
    }

    /// The grids as f32 rows.
    static F_IQ3XXS: A32<[[u32; 4]; 256]> = A32(expand4(IQ3XXS_GRID));
    static F_IQ3S: A32<[[u32; 4]; 512]> = A32(expand4(IQ3S_GRID));

    /// The 8 signed weights of IQ3_XXS group `l` of sub-block `ib`.
    ///
    /// # Safety
    /// `b` must point to a whole IQ3_XXS block; `ib < 8`, `l < 4`.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn xxs8(b: *const u8, ib: usize, l: usize, aux: u32) -> __m256 {
        let q = rd16(b.add(2 + 8 * ib + 2 * l));
        let g = rows4(
            &F_IQ3XXS.0[(q & 255) as usize],
            &F_IQ3XXS.0[((q >> 8) & 255) as usize],
        );
        let m = _mm256_load_si256(
            KSIGN_MASKS.0[((aux >> (7 * l)) & 127) as usize]
                .as_ptr()
                .cast(),
        );
        _mm256_xor_ps(g, _mm256_castsi256_ps(m))
    }

    /// The 8 signed weights of IQ3_S group `l` of sub-block `ib`.
    ///
    /// # Safety
    /// `b` must point to a whole IQ3_S block; `ib < 8`, `l < 4`.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn s8(b: *const u8, ib: usize, l: usize, qh: u32) -> __m256 {
        let q = rd16(b.add(2 + 8 * ib + 2 * l));
        let i0 = (q & 255) | (((qh >> (2 * l)) & 1) << 8);
        let i1 = (q >> 8) | (((qh >> (2 * l + 1)) & 1) << 8);
        let g = rows4(
            &F_IQ3S.0[(i0 & 511) as usize],
            &F_IQ3S.0[(i1 & 511) as usize],
        );
        let m = _mm256_load_si256(
            SIGN_MASKS.0[*b.add(74 + 4 * ib + l) as usize]
                .as_ptr()
                .cast(),
        );
        _mm256_xor_ps(g, _mm256_castsi256_ps(m))
    }

    /// # Safety
    /// CPU must have AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn k_iq3xxs_avx2(data: &[u8], x: &[f32]) -> f32 {
        let nb = data.len() / IQ3XXS_BYTES;
        assert_eq!(x.len(), nb * QK, "IQ3_XXS dot: length mismatch");
        let mut acc = [_mm256_setzero_ps(); 2];
        for i in 0..nb {
            let b = data.as_ptr().add(i * IQ3XXS_BYTES);
            let xb = x.as_ptr().add(i * QK);
            let d = f16_ptr(b) * 0.5;
            for ib in 0..8 {
                let aux = rd32(b.add(66 + 4 * ib));
                let xp = xb.add(32 * ib);
                let t0 = _mm256_mul_ps(xxs8(b, ib, 0, aux), _mm256_loadu_ps(xp));
                let t1 = _mm256_mul_ps(xxs8(b, ib, 1, aux), _mm256_loadu_ps(xp.add(8)));
                let t0 = _mm256_fmadd_ps(xxs8(b, ib, 2, aux), _mm256_loadu_ps(xp.add(16)), t0);
                let t1 = _mm256_fmadd_ps(xxs8(b, ib, 3, aux), _mm256_loadu_ps(xp.add(24)), t1);
                let db = _mm256_set1_ps(d * (0.5 + (aux >> 28) as f32));
                acc[ib & 1] = _mm256_fmadd_ps(_mm256_add_ps(t0, t1), db, acc[ib & 1]);
            }
        }
        hsum8(_mm256_add_ps(acc[0], acc[1]))
    }

    /// # Safety
    /// CPU must have AVX-512 F/BW/VL, AVX2 and FMA.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma")]
    unsafe fn k_iq3xxs_avx512(data: &[u8], x: &[f32]) -> f32 {
        let nb = data.len() / IQ3XXS_BYTES;
        assert_eq!(x.len(), nb * QK, "IQ3_XXS dot: length mismatch");
        let mut acc = [_mm512_setzero_ps(); 2];
        for i in 0..nb {
            let b = data.as_ptr().add(i * IQ3XXS_BYTES);
            let xb = x.as_ptr().add(i * QK);
            let d = f16_ptr(b) * 0.5;
            for ib in 0..8 {
                let aux = rd32(b.add(66 + 4 * ib));
                let xp = xb.add(32 * ib);
                let w0 = join(xxs8(b, ib, 0, aux), xxs8(b, ib, 1, aux));
                let w1 = join(xxs8(b, ib, 2, aux), xxs8(b, ib, 3, aux));
                let t = _mm512_mul_ps(w0, _mm512_loadu_ps(xp));
                let t = _mm512_fmadd_ps(w1, _mm512_loadu_ps(xp.add(16)), t);
                let db = _mm512_set1_ps(d * (0.5 + (aux >> 28) as f32));
                acc[ib & 1] = _mm512_fmadd_ps(t, db, acc[ib & 1]);
            }
        }
        _mm512_reduce_add_ps(_mm512_add_ps(acc[0], acc[1]))
    }

    /// # Safety
    /// CPU must have AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn k_iq3s_avx2(data: &[u8], x: &[f32]) -> f32 {
        let nb = data.len() / IQ3S_BYTES;
        assert_eq!(x.len(), nb * QK, "IQ3_S dot: length mismatch");
        let mut acc = [_mm256_setzero_ps(); 2];
        for i in 0..nb {
            let b = data.as_ptr().add(i * IQ3S_BYTES);
            let xb = x.as_ptr().add(i * QK);
            let d = f16_ptr(b);
            for ib in 0..8 {
                let qh = *b.add(66 + ib) as u32;
                let xp = xb.add(32 * ib);
                let t0 = _mm256_mul_ps(s8(b, ib, 0, qh), _mm256_loadu_ps(xp));
                let t1 = _mm256_mul_ps(s8(b, ib, 1, qh), _mm256_loadu_ps(xp.add(8)));
                let t0 = _mm256_fmadd_ps(s8(b, ib, 2, qh), _mm256_loadu_ps(xp.add(16)), t0);
                let t1 = _mm256_fmadd_ps(s8(b, ib, 3, qh), _mm256_loadu_ps(xp.add(24)), t1);
                let db = _mm256_set1_ps(iq3s_scale(d, *b.add(106 + ib / 2), ib));
                acc[ib & 1] = _mm256_fmadd_ps(_mm256_add_ps(t0, t1), db, acc[ib & 1]);
            }
        }
        hsum8(_mm256_add_ps(acc[0], acc[1]))
    }

    /// # Safety
    /// CPU must have AVX-512 F/BW/VL, AVX2 and FMA.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma")]
    unsafe fn k_iq3s_avx512(data: &[u8], x: &[f32]) -> f32 {
        let nb = data.len() / IQ3S_BYTES;
        assert_eq!(x.len(), nb * QK, "IQ3_S dot: length mismatch");
        let mut acc = [_mm512_setzero_ps(); 2];
        for i in 0..nb {
            let b = data.as_ptr().add(i * IQ3S_BYTES);
            let xb = x.as_ptr().add(i * QK);
            let d = f16_ptr(b);
            for ib in 0..8 {
                let qh = *b.add(66 + ib) as u32;
                let xp = xb.add(32 * ib);
                let w0 = join(s8(b, ib, 0, qh), s8(b, ib, 1, qh));
                let w1 = join(s8(b, ib, 2, qh), s8(b, ib, 3, qh));
                let t = _mm512_mul_ps(w0, _mm512_loadu_ps(xp));
                let t = _mm512_fmadd_ps(w1, _mm512_loadu_ps(xp.add(16)), t);
                let db = _mm512_set1_ps(iq3s_scale(d, *b.add(106 + ib / 2), ib));
                acc[ib & 1] = _mm512_fmadd_ps(t, db, acc[ib & 1]);
            }
        }
        _mm512_reduce_add_ps(_mm512_add_ps(acc[0], acc[1]))
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod x86 {
    use crate::DotFn;
    pub(super) const IQ3XXS_AVX2: Option<DotFn> = None;
    pub(super) const IQ3XXS_AVX512: Option<DotFn> = None;
    pub(super) const IQ3S_AVX2: Option<DotFn> = None;
    pub(super) const IQ3S_AVX512: Option<DotFn> = None;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::iq2::test_support::*;

    #[test]
    fn iq3xxs_random_blocks_match_gguf_py() {
        check_random_vs_python(&IQ3_XXS, 48, 11);
    }
    #[test]
    fn iq3s_random_blocks_match_gguf_py() {
        check_random_vs_python(&IQ3_S, 48, 12);
    }
    #[test]
    fn iq3_fixture_tensors_match_gguf_py() {
        check_fixture_vs_python(&IQ3_XXS, "tiny-s-IQ3_XXS.gguf");
        check_fixture_vs_python(&IQ3_S, "tiny-s-IQ3_XXS.gguf");
    }
    #[test]
    fn iq3_simd_matches_scalar() {
        check_simd_vs_scalar(&IQ3_XXS, 13);
        check_simd_vs_scalar(&IQ3_S, 14);
    }
}
