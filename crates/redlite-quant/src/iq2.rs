//! 2-bit lattice formats IQ2_XXS, IQ2_XS, IQ2_S (256-value super-blocks).
//!
//! Every group of 8 weights is one entry of an E8-lattice grid (values
//! 8, 25, 43) with 8 sign bits, times a sub-block scale
//! `d·(0.5 + s)·0.25`. Layouts (ggml-common.h):
//!
//! * IQ2_XXS, 66 bytes: `d: f16`, then 8 × (`u32` of four grid indices,
//!   `u32` of four 7-bit sign indices and a 4-bit scale in the top bits).
//! * IQ2_XS, 74 bytes: `d: f16`, 32 × `u16` (9-bit grid index, 7-bit sign
//!   index), 8 bytes of two 4-bit scales (one per 16 weights).
//! * IQ2_S, 82 bytes: `d: f16`, 32 grid-index low bytes, 32 sign bytes,
//!   8 bytes of 2-bit index highs, 8 bytes of two 4-bit scales.
//!
//! The scalar dequantizers follow gguf-py's float operation order exactly:
//! `db = d * (0.5 + s) * 0.25`, then `db * grid`, then the sign.

use crate::iq_tables::{iq2s_grid, iq2xs_grid, iq2xxs_grid, ksigns_iq2xs};
use crate::util::{dot_via_dequant, f16_at, u16_at, u32_at};
use crate::{GgmlType, TypeKernels};

const QK: usize = 256;
const IQ2XXS_BYTES: usize = 66;
/// Bytes of one IQ2_XS super-block.
pub(crate) const IQ2XS_BYTES: usize = 74;
const IQ2S_BYTES: usize = 82;

pub static IQ2_XXS: TypeKernels = TypeKernels {
    ty: GgmlType::IQ2_XXS,
    dequant: dequant_iq2xxs,
    dot_scalar: dot_iq2xxs,
    dot_avx2: x86::IQ2XXS_AVX2,
    dot_avx512: x86::IQ2XXS_AVX512,
};
pub static IQ2_XS: TypeKernels = TypeKernels {
    ty: GgmlType::IQ2_XS,
    dequant: dequant_iq2xs,
    dot_scalar: dot_iq2xs,
    dot_avx2: x86::IQ2XS_AVX2,
    dot_avx512: x86::IQ2XS_AVX512,
};
pub static IQ2_S: TypeKernels = TypeKernels {
    ty: GgmlType::IQ2_S,
    dequant: dequant_iq2s,
    dot_scalar: dot_iq2s,
    dot_avx2: x86::IQ2S_AVX2,
    dot_avx512: x86::IQ2S_AVX512,
};

/// Value `j` of a packed grid entry (one signed byte per value).
#[inline(always)]
pub(crate) fn grid_val(g: u64, j: usize) -> f32 {
    (g >> (8 * j)) as u8 as i8 as f32
}

/// `out[j] = ±(db * grid[j])`, negated where bit `j` of `signs` is set.
#[inline(always)]
pub(crate) fn put8_signed(out: &mut [f32], db: f32, g: u64, signs: u8) {
    for (j, o) in out[..8].iter_mut().enumerate() {
        // Branch-free negation (sign bits are unpredictable): flipping the
        // sign bit is exactly gguf-py's multiplication by -1.
        let v = db * grid_val(g, j);
        *o = f32::from_bits(v.to_bits() ^ ((((signs >> j) & 1) as u32) << 31));
    }
}

/// The two 16-weight scales of 32 weights packed in one byte.
#[inline(always)]
fn nibble_scales(d: f32, sc: u8) -> [f32; 2] {
    [
        d * (0.5 + (sc & 15) as f32) * 0.25,
        d * (0.5 + (sc >> 4) as f32) * 0.25,
    ]
}

fn deq_iq2xxs_block(b: &[u8], out: &mut [f32; QK]) {
    let d = f16_at(b, 0);
    for ib in 0..8 {
        let aux0 = u32_at(b, 2 + 8 * ib);
        let aux1 = u32_at(b, 6 + 8 * ib);
        let db = d * (0.5 + (aux1 >> 28) as f32) * 0.25;
        for l in 0..4 {
            let g = iq2xxs_grid[((aux0 >> (8 * l)) & 255) as usize];
            let s = ksigns_iq2xs[((aux1 >> (7 * l)) & 127) as usize];
            put8_signed(&mut out[32 * ib + 8 * l..], db, g, s);
        }
    }
}

fn deq_iq2xs_block(b: &[u8], out: &mut [f32; QK]) {
    let d = f16_at(b, 0);
    for ib in 0..8 {
        let db = nibble_scales(d, b[66 + ib]);
        for l in 0..4 {
            let q = u16_at(b, 2 + 2 * (4 * ib + l));
            let g = iq2xs_grid[(q & 511) as usize];
            let s = ksigns_iq2xs[(q >> 9) as usize];
            put8_signed(&mut out[32 * ib + 8 * l..], db[l / 2], g, s);
        }
    }
}

fn deq_iq2s_block(b: &[u8], out: &mut [f32; QK]) {
    let d = f16_at(b, 0);
    for ib in 0..8 {
        let db = nibble_scales(d, b[74 + ib]);
        let qh = b[66 + ib] as usize;
        for l in 0..4 {
            let k = 4 * ib + l;
            let idx = b[2 + k] as usize | (((qh >> (2 * l)) & 3) << 8);
            put8_signed(&mut out[8 * k..], db[l / 2], iq2s_grid[idx], b[34 + k]);
        }
    }
}

macro_rules! scalar_kernels {
    ($deq:ident, $dot:ident, $block:ident, $bytes:expr) => {
        fn $deq(data: &[u8], out: &mut [f32]) {
            for (b, o) in data.chunks_exact($bytes).zip(out.chunks_exact_mut(QK)) {
                let mut buf = [0f32; QK];
                $block(b, &mut buf);
                o.copy_from_slice(&buf);
            }
        }
        fn $dot(data: &[u8], x: &[f32]) -> f32 {
            dot_via_dequant::<QK>(data, x, $bytes, $block)
        }
    };
}
pub(crate) use scalar_kernels;

scalar_kernels!(dequant_iq2xxs, dot_iq2xxs, deq_iq2xxs_block, IQ2XXS_BYTES);
scalar_kernels!(dequant_iq2xs, dot_iq2xs, deq_iq2xs_block, IQ2XS_BYTES);
scalar_kernels!(dequant_iq2s, dot_iq2s, deq_iq2s_block, IQ2S_BYTES);

/// x86-64 building blocks shared by the lattice kernels (IQ1, IQ2, IQ3).
#[cfg(target_arch = "x86_64")]
pub(crate) mod simd {
    use std::arch::x86_64::*;

    /// Safe `DotFn` wrappers around `#[target_feature]` kernels.
    macro_rules! wrappers {
        ($($name:ident => $kernel:ident, $feat:tt;)*) => {$(
            fn $name(data: &[u8], x: &[f32]) -> f32 {
                debug_assert!(std::is_x86_feature_detected!($feat));
                // SAFETY: this function is only reachable through the
                // `dot_avx2` / `dot_avx512` slots, which are called only when
                // the CPU has the kernel's target features.
                unsafe { $kernel(data, x) }
            }
        )*};
    }
    pub(crate) use wrappers;

    /// 32-byte aligned table rows (for aligned vector loads).
    #[repr(C, align(32))]
    pub(crate) struct A32<T>(pub T);

    /// The f32 bit pattern of a small integer (exact for |v| < 2^24).
    const fn int_f32_bits(v: i32) -> u32 {
        if v == 0 {
            return 0;
        }
        let sign = if v < 0 { 1u32 << 31 } else { 0 };
        let a = v.unsigned_abs();
        let e = 31 - a.leading_zeros();
        sign | ((e + 127) << 23) | ((a << (23 - e)) & 0x7f_ffff)
    }

    /// A grid of 8-value entries (signed bytes) as rows of f32 bit patterns.
    pub(crate) const fn expand8<const N: usize>(g: [u64; N]) -> [[u32; 8]; N] {
        let mut t = [[0u32; 8]; N];
        let mut i = 0;
        while i < N {
            let mut j = 0;
            while j < 8 {
                t[i][j] = int_f32_bits((g[i] >> (8 * j)) as u8 as i8 as i32);
                j += 1;
            }
            i += 1;
        }
        t
    }

    /// A grid of 4-value entries (bytes) as rows of f32 bit patterns.
    pub(crate) const fn expand4<const N: usize>(g: [u32; N]) -> [[u32; 4]; N] {
        let mut t = [[0u32; 4]; N];
        let mut i = 0;
        while i < N {
            let mut j = 0;
            while j < 4 {
                t[i][j] = int_f32_bits((g[i] >> (8 * j)) as u8 as i8 as i32);
                j += 1;
            }
            i += 1;
        }
        t
    }

    /// `ksigns_iq2xs[i]`: the 7 bits of `i` plus a parity bit making the count even.
    #[inline(always)]
    pub(crate) const fn ksign(i: u32) -> u32 {
        let i = i & 127;
        i | ((i.count_ones() & 1) << 7)
    }

    /// Sign-bit masks: row `s` has lane `j` = 0x8000_0000 when bit `j` of `s` is set.
    pub(crate) static SIGN_MASKS: A32<[[u32; 8]; 256]> = A32(sign_masks());
    /// The same indexed by a 7-bit sign index (through `ksign`).
    pub(crate) static KSIGN_MASKS: A32<[[u32; 8]; 128]> = A32(ksign_masks());

    const fn sign_masks() -> [[u32; 8]; 256] {
        let mut t = [[0u32; 8]; 256];
        let mut i = 0;
        while i < 256 {
            let mut j = 0;
            while j < 8 {
                if (i >> j) & 1 != 0 {
                    t[i][j] = 0x8000_0000;
                }
                j += 1;
            }
            i += 1;
        }
        t
    }

    const fn ksign_masks() -> [[u32; 8]; 128] {
        let all = sign_masks();
        let mut t = [[0u32; 8]; 128];
        let mut i = 0;
        while i < 128 {
            t[i] = all[ksign(i as u32) as usize];
            i += 1;
        }
        t
    }

    /// f16 → f32 without a library call (exact for every f16, NaN payloads kept).
    #[inline(always)]
    pub(crate) fn f16_to_f32(h: u16) -> f32 {
        let h = h as u32;
        // Shifting the exponent/mantissa into place scales by 2^-112; the
        // multiplication restores it exactly (also for subnormals).
        let mag = f32::from_bits((h & 0x7fff) << 13) * f32::from_bits(0x7780_0000);
        let bits = if h & 0x7c00 == 0x7c00 {
            0x7f80_0000 | ((h & 0x3ff) << 13)
        } else {
            mag.to_bits()
        };
        f32::from_bits(bits | ((h & 0x8000) << 16))
    }

    /// One f16 scale at `p`.
    ///
    /// # Safety
    /// `p` must be valid for reading 2 bytes.
    #[inline(always)]
    pub(crate) unsafe fn f16_ptr(p: *const u8) -> f32 {
        f16_to_f32(rd16(p) as u16)
    }

    /// Little-endian u16 / u32 at `p` (unaligned).
    ///
    /// # Safety
    /// `p` must be valid for reading 2 (resp. 4) bytes.
    #[inline(always)]
    pub(crate) unsafe fn rd16(p: *const u8) -> u32 {
        u16::from_le(p.cast::<u16>().read_unaligned()) as u32
    }
    /// # Safety
    /// See [`rd16`].
    #[inline(always)]
    pub(crate) unsafe fn rd32(p: *const u8) -> u32 {
        u32::from_le(p.cast::<u32>().read_unaligned())
    }

    /// The 8 signed-byte values of a packed grid entry as f32.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub(crate) unsafe fn grid8(g: u64) -> __m256 {
        _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_cvtsi64_si128(g as i64)))
    }

    /// A table row of 8 f32 xor-ed with a row of sign masks.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub(crate) unsafe fn signed_row(row: &[u32; 8], mask: &[u32; 8]) -> __m256 {
        let m = _mm256_load_si256(mask.as_ptr().cast());
        _mm256_xor_ps(_mm256_load_ps(row.as_ptr().cast()), _mm256_castsi256_ps(m))
    }

    /// Two 4-value table rows as one vector of 8 f32.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub(crate) unsafe fn rows4(lo: &[u32; 4], hi: &[u32; 4]) -> __m256 {
        let l = _mm_loadu_ps(lo.as_ptr().cast());
        _mm256_insertf128_ps::<1>(_mm256_castps128_ps256(l), _mm_loadu_ps(hi.as_ptr().cast()))
    }

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub(crate) unsafe fn hsum8(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_movehdup_ps(s));
        _mm_cvtss_f32(s)
    }

    /// Two 256-bit halves as one 512-bit vector.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma")]
    pub(crate) unsafe fn join(lo: __m256, hi: __m256) -> __m512 {
        let v = _mm512_castpd256_pd512(_mm256_castps_pd(lo));
        _mm512_castpd_ps(_mm512_insertf64x4::<1>(v, _mm256_castps_pd(hi)))
    }

    /// Two grid entries (16 values) as f32.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma")]
    pub(crate) unsafe fn grid16(g0: u64, g1: u64) -> __m512 {
        _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_set_epi64x(g1 as i64, g0 as i64)))
    }
}

/// Fast paths. The wrappers are installed only in `dot_avx2` / `dot_avx512`,
/// which lib.rs calls only on CPUs with those features.
#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::simd::*;
    use super::*;
    use crate::iq_tables::{IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID};
    use crate::DotFn;
    use std::arch::x86_64::*;

    pub(super) const IQ2XXS_AVX2: Option<DotFn> = Some(iq2xxs_avx2);
    pub(super) const IQ2XXS_AVX512: Option<DotFn> = Some(iq2xxs_avx512);
    pub(super) const IQ2XS_AVX2: Option<DotFn> = Some(iq2xs_avx2);
    pub(super) const IQ2XS_AVX512: Option<DotFn> = Some(iq2xs_avx512);
    pub(super) const IQ2S_AVX2: Option<DotFn> = Some(iq2s_avx2);
    pub(super) const IQ2S_AVX512: Option<DotFn> = Some(iq2s_avx512);

    wrappers! {
        iq2xxs_avx2 => k_iq2xxs_avx2, "avx2";
        iq2xxs_avx512 => k_iq2xxs_avx512, "avx512bw";
        iq2xs_avx2 => k_iq2xs_avx2, "avx2";
        iq2xs_avx512 => k_iq2xs_avx512, "avx512bw";
        iq2s_avx2 => k_iq2s_avx2, "avx2";
        iq2s_avx512 => k_iq2s_avx512, "avx512bw";
    }

    /// The grids as f32 rows.
    static F_IQ2XXS: A32<[[u32; 8]; 256]> = A32(expand8(IQ2XXS_GRID));
    static F_IQ2XS: A32<[[u32; 8]; 512]> = A32(expand8(IQ2XS_GRID));
    static F_IQ2S: A32<[[u32; 8]; 1024]> = A32(expand8(IQ2S_GRID));

    /// The 8 signed weights (before scaling) of IQ2_XXS group `l` of a sub-block.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn xxs8(aux0: u32, aux1: u32, l: u32) -> __m256 {
        signed_row(
            &F_IQ2XXS.0[((aux0 >> (8 * l)) & 255) as usize],
            &KSIGN_MASKS.0[((aux1 >> (7 * l)) & 127) as usize],
        )
    }

    /// The 8 signed weights of IQ2_S group `k` (index low byte, 2 high bits, sign byte).
    ///
    /// # Safety
    /// `b` must point to a whole IQ2_S block; `k < 32`.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn s8(b: *const u8, k: usize, qh: u32, shift: u32) -> __m256 {
        let idx = *b.add(2 + k) as usize | ((((qh >> shift) & 3) as usize) << 8);
        signed_row(
            &F_IQ2S.0[idx & 1023],
            &SIGN_MASKS.0[*b.add(34 + k) as usize],
        )
    }

    /// # Safety
    /// CPU must have AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn k_iq2xxs_avx2(data: &[u8], x: &[f32]) -> f32 {
        let nb = data.len() / IQ2XXS_BYTES;
        assert_eq!(x.len(), nb * QK, "IQ2_XXS dot: length mismatch");
        let mut acc = [_mm256_setzero_ps(); 2];
        for i in 0..nb {
            let b = data.as_ptr().add(i * IQ2XXS_BYTES);
            let xb = x.as_ptr().add(i * QK);
            let d = f16_ptr(b) * 0.25;
            // Constant accumulator indices keep them in registers.
            for ib2 in 0..4 {
                for (h, a) in acc.iter_mut().enumerate() {
                    let ib = 2 * ib2 + h;
                    let aux0 = rd32(b.add(2 + 8 * ib));
                    let aux1 = rd32(b.add(6 + 8 * ib));
                    let xp = xb.add(32 * ib);
                    let t0 = _mm256_mul_ps(xxs8(aux0, aux1, 0), _mm256_loadu_ps(xp));
                    let t1 = _mm256_mul_ps(xxs8(aux0, aux1, 1), _mm256_loadu_ps(xp.add(8)));
                    let t0 = _mm256_fmadd_ps(xxs8(aux0, aux1, 2), _mm256_loadu_ps(xp.add(16)), t0);
                    let t1 = _mm256_fmadd_ps(xxs8(aux0, aux1, 3), _mm256_loadu_ps(xp.add(24)), t1);
                    let db = _mm256_set1_ps(d * (0.5 + (aux1 >> 28) as f32));
                    *a = _mm256_fmadd_ps(_mm256_add_ps(t0, t1), db, *a);
                }
            }
        }
        hsum8(_mm256_add_ps(acc[0], acc[1]))
    }

    /// # Safety
    /// CPU must have AVX-512 F/BW/VL, AVX2 and FMA.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma")]
    unsafe fn k_iq2xxs_avx512(data: &[u8], x: &[f32]) -> f32 {
        let nb = data.len() / IQ2XXS_BYTES;
        assert_eq!(x.len(), nb * QK, "IQ2_XXS dot: length mismatch");
        let mut acc = [_mm512_setzero_ps(); 2];
        for i in 0..nb {
            let b = data.as_ptr().add(i * IQ2XXS_BYTES);
            let xb = x.as_ptr().add(i * QK);
            let d = f16_ptr(b) * 0.25;
            // Constant accumulator indices keep them in registers.
            for ib2 in 0..4 {
                for (h, a) in acc.iter_mut().enumerate() {
                    let ib = 2 * ib2 + h;
                    let aux0 = rd32(b.add(2 + 8 * ib));
                    let aux1 = rd32(b.add(6 + 8 * ib));
                    let xp = xb.add(32 * ib);
                    let w0 = join(xxs8(aux0, aux1, 0), xxs8(aux0, aux1, 1));
                    let w1 = join(xxs8(aux0, aux1, 2), xxs8(aux0, aux1, 3));
                    let t = _mm512_mul_ps(w0, _mm512_loadu_ps(xp));
                    let t = _mm512_fmadd_ps(w1, _mm512_loadu_ps(xp.add(16)), t);
                    let db = _mm512_set1_ps(d * (0.5 + (aux1 >> 28) as f32));
                    *a = _mm512_fmadd_ps(t, db, *a);
                }
            }
        }
        _mm512_reduce_add_ps(_mm512_add_ps(acc[0], acc[1]))
    }

    /// Per-block precomputation for IQ2_XS: byte offsets of the 32 grid rows
    /// and sign-mask rows, and the 16 scales `d/4·(0.5 + s)`.
    #[repr(C, align(32))]
    struct XsPrep {
        grid: [u16; 32],
        sign: [u16; 32],
        db: [f32; 16],
    }

    /// # Safety
    /// `b` must point to a whole IQ2_XS block; CPU must have AVX2 and FMA.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn xs_prep(b: *const u8, p: &mut XsPrep) {
        let m9 = _mm256_set1_epi16(511);
        for h in 0..2 {
            let q = _mm256_loadu_si256(b.add(2 + 32 * h).cast());
            let g = _mm256_slli_epi16::<5>(_mm256_and_si256(q, m9));
            let s = _mm256_slli_epi16::<5>(_mm256_srli_epi16::<9>(q));
            _mm256_store_si256(p.grid.as_mut_ptr().add(16 * h).cast(), g);
            _mm256_store_si256(p.sign.as_mut_ptr().add(16 * h).cast(), s);
        }
        let d = _mm256_set1_ps(f16_ptr(b) * 0.25);
        let sc = _mm_loadl_epi64(b.add(66).cast());
        let m4 = _mm_set1_epi8(15);
        let lo = _mm_and_si128(sc, m4);
        let hi = _mm_and_si128(_mm_srli_epi16::<4>(sc), m4);
        let s16 = _mm_unpacklo_epi8(lo, hi);
        let half = _mm256_set1_ps(0.5);
        for (j, v) in [s16, _mm_srli_si128::<8>(s16)].into_iter().enumerate() {
            let f = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v));
            _mm256_store_ps(
                p.db.as_mut_ptr().add(8 * j),
                _mm256_mul_ps(d, _mm256_add_ps(f, half)),
            );
        }
    }

    /// Signed weights of group `k` from a prepared block.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn xs_group(p: &XsPrep, k: usize) -> __m256 {
        let row = F_IQ2XS.0.as_ptr().cast::<u8>().add(p.grid[k] as usize);
        let m = KSIGN_MASKS.0.as_ptr().cast::<u8>().add(p.sign[k] as usize);
        _mm256_xor_ps(_mm256_load_ps(row.cast()), _mm256_load_ps(m.cast()))
    }

    /// # Safety
    /// CPU must have AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn k_iq2xs_avx2(data: &[u8], x: &[f32]) -> f32 {
        let nb = data.len() / IQ2XS_BYTES;
        assert_eq!(x.len(), nb * QK, "IQ2_XS dot: length mismatch");
        let mut acc = [_mm256_setzero_ps(); 4];
        let mut p = XsPrep {
            grid: [0; 32],
            sign: [0; 32],
            db: [0.0; 16],
        };
        for i in 0..nb {
            let b = data.as_ptr().add(i * IQ2XS_BYTES);
            let xb = x.as_ptr().add(i * QK);
            xs_prep(b, &mut p);
            // One accumulator per sub-block of a quad: constant indices keep
            // them in registers.
            for j4 in 0..4 {
                for (h, a) in acc.iter_mut().enumerate() {
                    let j = 4 * j4 + h;
                    let xp = xb.add(16 * j);
                    let t = _mm256_mul_ps(xs_group(&p, 2 * j), _mm256_loadu_ps(xp));
                    let t = _mm256_fmadd_ps(xs_group(&p, 2 * j + 1), _mm256_loadu_ps(xp.add(8)), t);
                    *a = _mm256_fmadd_ps(t, _mm256_broadcast_ss(&p.db[j]), *a);
                }
            }
        }
        hsum8(_mm256_add_ps(
            _mm256_add_ps(acc[0], acc[1]),
            _mm256_add_ps(acc[2], acc[3]),
        ))
    }

    /// # Safety
    /// CPU must have AVX-512 F/BW/VL, AVX2 and FMA.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma")]
    unsafe fn k_iq2xs_avx512(data: &[u8], x: &[f32]) -> f32 {
        let nb = data.len() / IQ2XS_BYTES;
        assert_eq!(x.len(), nb * QK, "IQ2_XS dot: length mismatch");
        let mut acc = [_mm512_setzero_ps(); 4];
        let mut p = XsPrep {
            grid: [0; 32],
            sign: [0; 32],
            db: [0.0; 16],
        };
        for i in 0..nb {
            let b = data.as_ptr().add(i * IQ2XS_BYTES);
            let xb = x.as_ptr().add(i * QK);
            xs_prep(b, &mut p);
            for j4 in 0..4 {
                for (h, a) in acc.iter_mut().enumerate() {
                    let j = 4 * j4 + h;
                    let w = join(xs_group(&p, 2 * j), xs_group(&p, 2 * j + 1));
                    let t = _mm512_mul_ps(w, _mm512_loadu_ps(xb.add(16 * j)));
                    *a = _mm512_fmadd_ps(t, _mm512_set1_ps(p.db[j]), *a);
                }
            }
        }
        let s = _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3]));
        _mm512_reduce_add_ps(s)
    }

    /// # Safety
    /// CPU must have AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn k_iq2s_avx2(data: &[u8], x: &[f32]) -> f32 {
        let nb = data.len() / IQ2S_BYTES;
        assert_eq!(x.len(), nb * QK, "IQ2_S dot: length mismatch");
        let mut acc = [_mm256_setzero_ps(); 2];
        for i in 0..nb {
            let b = data.as_ptr().add(i * IQ2S_BYTES);
            let xb = x.as_ptr().add(i * QK);
            let d = f16_ptr(b) * 0.25;
            for ib in 0..8 {
                let sc = *b.add(74 + ib) as u32;
                let qh = *b.add(66 + ib) as u32;
                let k = 4 * ib;
                let xp = xb.add(32 * ib);
                let t0 = _mm256_mul_ps(s8(b, k, qh, 0), _mm256_loadu_ps(xp));
                let t0 = _mm256_fmadd_ps(s8(b, k + 1, qh, 2), _mm256_loadu_ps(xp.add(8)), t0);
                let t1 = _mm256_mul_ps(s8(b, k + 2, qh, 4), _mm256_loadu_ps(xp.add(16)));
                let t1 = _mm256_fmadd_ps(s8(b, k + 3, qh, 6), _mm256_loadu_ps(xp.add(24)), t1);
                let db0 = _mm256_set1_ps(d * (0.5 + (sc & 15) as f32));
                let db1 = _mm256_set1_ps(d * (0.5 + (sc >> 4) as f32));
                acc[0] = _mm256_fmadd_ps(t0, db0, acc[0]);
                acc[1] = _mm256_fmadd_ps(t1, db1, acc[1]);
            }
        }
        hsum8(_mm256_add_ps(acc[0], acc[1]))
    }

    /// # Safety
    /// CPU must have AVX-512 F/BW/VL, AVX2 and FMA.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma")]
    unsafe fn k_iq2s_avx512(data: &[u8], x: &[f32]) -> f32 {
        let nb = data.len() / IQ2S_BYTES;
        assert_eq!(x.len(), nb * QK, "IQ2_S dot: length mismatch");
        let mut acc = [_mm512_setzero_ps(); 2];
        for i in 0..nb {
            let b = data.as_ptr().add(i * IQ2S_BYTES);
            let xb = x.as_ptr().add(i * QK);
            let d = f16_ptr(b) * 0.25;
            for ib in 0..8 {
                let sc = *b.add(74 + ib) as u32;
                let qh = *b.add(66 + ib) as u32;
                let k = 4 * ib;
                let xp = xb.add(32 * ib);
                let w0 = join(s8(b, k, qh, 0), s8(b, k + 1, qh, 2));
                let w1 = join(s8(b, k + 2, qh, 4), s8(b, k + 3, qh, 6));
                let w0 = _mm512_mul_ps(w0, _mm512_set1_ps(d * (0.5 + (sc & 15) as f32)));
                let w1 = _mm512_mul_ps(w1, _mm512_set1_ps(d * (0.5 + (sc >> 4) as f32)));
                acc[0] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(xp), acc[0]);
                acc[1] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(xp.add(16)), acc[1]);
            }
        }
        _mm512_reduce_add_ps(_mm512_add_ps(acc[0], acc[1]))
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod x86 {
    use crate::DotFn;
    pub(super) const IQ2XXS_AVX2: Option<DotFn> = None;
    pub(super) const IQ2XXS_AVX512: Option<DotFn> = None;
    pub(super) const IQ2XS_AVX2: Option<DotFn> = None;
    pub(super) const IQ2XS_AVX512: Option<DotFn> = None;
    pub(super) const IQ2S_AVX2: Option<DotFn> = None;
    pub(super) const IQ2S_AVX512: Option<DotFn> = None;
}

#[cfg(test)]
mod tests {
    use super::test_support::*;
    use super::*;

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn simd_tables_match_reference_tables() {
        for i in 0..128u32 {
            assert_eq!(simd::ksign(i), ksigns_iq2xs[i as usize] as u32, "index {i}");
            for j in 0..8 {
                let neg = ksigns_iq2xs[i as usize] & crate::iq_tables::kmask_iq2xs[j] != 0;
                assert_eq!(
                    simd::KSIGN_MASKS.0[i as usize][j] != 0,
                    neg,
                    "ksign {i} lane {j}"
                );
            }
        }
        let f = simd::expand8(crate::iq_tables::IQ1S_GRID);
        for (row, g) in f.iter().zip(crate::iq_tables::iq1s_grid.iter()) {
            for (j, v) in row.iter().enumerate() {
                assert_eq!(f32::from_bits(*v), grid_val(*g, j));
            }
        }
        let f = simd::expand4(crate::iq_tables::IQ3XXS_GRID);
        for (row, g) in f.iter().zip(crate::iq_tables::iq3xxs_grid.iter()) {
            for (j, v) in row.iter().enumerate() {
                assert_eq!(f32::from_bits(*v), ((g >> (8 * j)) & 255) as f32);
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn f16_conversion_is_exact() {
        for h in 0..=u16::MAX {
            let want = half::f16::from_bits(h).to_f32();
            let got = simd::f16_to_f32(h);
            if want.is_nan() {
                assert!(got.is_nan(), "{h:#06x}");
            } else {
                assert_eq!(got.to_bits(), want.to_bits(), "{h:#06x}");
            }
        }
    }

    #[test]
    fn iq2xxs_random_blocks_match_gguf_py() {
        check_random_vs_python(&IQ2_XXS, 48, 1);
    }
    #[test]
    fn iq2xs_random_blocks_match_gguf_py() {
        check_random_vs_python(&IQ2_XS, 48, 2);
    }
    #[test]
    fn iq2s_random_blocks_match_gguf_py() {
        check_random_vs_python(&IQ2_S, 48, 3);
    }
    #[test]
    fn iq2_fixture_tensors_match_gguf_py() {
        check_fixture_vs_python(&IQ2_XS, "tiny-s-IQ2_XS.gguf");
        check_fixture_vs_python(&IQ2_XXS, "tiny-s-IQ1_M.gguf");
        check_fixture_vs_python(&IQ2_S, "tiny-s-IQ3_XXS.gguf");
    }
    #[test]
    fn iq2_simd_matches_scalar() {
        check_simd_vs_scalar(&IQ2_XXS, 4);
        check_simd_vs_scalar(&IQ2_XS, 5);
        check_simd_vs_scalar(&IQ2_S, 6);
    }
}

/// Test helpers shared by the lattice-format tests (IQ1, IQ2, IQ3): random
/// blocks, the gguf-py oracle, fixture tensors and SIMD-vs-scalar checks.
#[cfg(test)]
pub(crate) mod test_support {
    use crate::{detected_isa, GgmlType, Isa, TypeKernels};
    use redlite_testkit::{fixtures_dir, python};
    use std::io::Write;
    use std::process::{Command, Stdio};

    const DEQUANT_PY: &str = "\
import sys
import numpy as np
from gguf import quants, GGMLQuantizationType
raw = np.frombuffer(sys.stdin.buffer.read(), dtype=np.uint8)
out = quants.dequantize(raw, GGMLQuantizationType[sys.argv[1]])
sys.stdout.buffer.write(np.ascontiguousarray(out, dtype=np.float32).tobytes())
";

    /// `gguf.quants.dequantize` of whole blocks of `ty`.
    pub fn python_dequant(ty: GgmlType, data: &[u8]) -> Vec<f32> {
        let mut child = Command::new(python())
            .args(["-c", DEQUANT_PY, ty.name()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the reference Python");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(data)
            .expect("write blocks to Python");
        let out = child.wait_with_output().expect("run the reference Python");
        assert!(
            out.status.success(),
            "gguf-py dequantize failed for {}",
            ty.name()
        );
        out.stdout
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    }

    pub struct Rng(u64);
    impl Rng {
        pub fn new(seed: u64) -> Rng {
            Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
        }
        pub fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        /// Uniform in [-1, 1).
        pub fn unit(&mut self) -> f32 {
            (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        }
        /// A finite f16 scale of either sign, magnitude about 2^-10 .. 2^5.
        pub fn f16_scale(&mut self) -> u16 {
            let r = self.next();
            let exp = 5 + (r % 16) as u16;
            ((r >> 8) as u16 & 0x8000) | (exp << 10) | ((r >> 20) as u16 & 0x3ff)
        }
    }

    /// `n` random blocks of `ty` with valid (finite) scales.
    pub fn random_blocks(ty: GgmlType, n: usize, rng: &mut Rng) -> Vec<u8> {
        let ts = ty.type_size();
        let mut data: Vec<u8> = (0..n * ts).map(|_| rng.next() as u8).collect();
        for b in data.chunks_exact_mut(ts) {
            let d = rng.f16_scale();
            if ty == GgmlType::IQ1_M {
                // The f16 scale lives in the top nibbles of the four scale words.
                for k in 0..4 {
                    let off = 48 + 2 * k + 1;
                    b[off] = (b[off] & 0x0f) | ((((d >> (4 * k)) & 15) as u8) << 4);
                }
            } else {
                b[..2].copy_from_slice(&d.to_le_bytes());
            }
        }
        data
    }

    pub fn random_x(n: usize, rng: &mut Rng) -> Vec<f32> {
        (0..n).map(|_| rng.unit()).collect()
    }

    fn assert_bits_eq(k: &TypeKernels, what: &str, ours: &[f32], theirs: &[f32]) {
        assert_eq!(ours.len(), theirs.len(), "{} {what}: length", k.ty.name());
        for (i, (a, b)) in ours.iter().zip(theirs).enumerate() {
            assert_eq!(
                a.to_bits(),
                b.to_bits(),
                "{} {what}: value {i} (block {}): ours {a} gguf-py {b}",
                k.ty.name(),
                i / k.ty.block_size()
            );
        }
    }

    /// Dequantize with our scalar reference and with gguf-py; also check the
    /// scalar dot against an f64 dot of gguf-py's weights.
    fn check_vs_python(k: &TypeKernels, what: &str, data: &[u8], rng: &mut Rng) {
        let n = data.len() / k.ty.type_size() * k.ty.block_size();
        let theirs = python_dequant(k.ty, data);
        let mut ours = vec![f32::NAN; n];
        (k.dequant)(data, &mut ours);
        assert_bits_eq(k, what, &ours, &theirs);

        let x = random_x(n, rng);
        let exact: f64 = theirs
            .iter()
            .zip(&x)
            .map(|(w, v)| *w as f64 * *v as f64)
            .sum();
        let mag: f64 = theirs
            .iter()
            .zip(&x)
            .map(|(w, v)| (*w as f64 * *v as f64).abs())
            .sum();
        let got = (k.dot_scalar)(data, &x) as f64;
        assert!(
            (got - exact).abs() <= 1e-5 * mag + 1e-6,
            "{} {what}: scalar dot {got} vs {exact}",
            k.ty.name()
        );
    }

    pub fn check_random_vs_python(k: &TypeKernels, n_blocks: usize, seed: u64) {
        let mut rng = Rng::new(seed);
        let data = random_blocks(k.ty, n_blocks, &mut rng);
        check_vs_python(k, "random blocks", &data, &mut rng);
    }

    /// Every tensor of type `k.ty` in a fixture (at most 64 blocks of each).
    pub fn check_fixture_vs_python(k: &TypeKernels, file: &str) {
        let path = fixtures_dir().join(file);
        let f = redlite_gguf::GgufFile::open(&path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let ts = k.ty.type_size();
        let mut data = Vec::new();
        let mut count = 0;
        for t in f.tensors.iter().filter(|t| t.ggml_type == k.ty) {
            let bytes = f.tensor_data(t);
            data.extend_from_slice(&bytes[..bytes.len().min(64 * ts)]);
            count += 1;
        }
        assert!(count > 0, "{file} has no {} tensor", k.ty.name());
        let mut rng = Rng::new(count as u64);
        check_vs_python(k, file, &data, &mut rng);
    }

    /// Every fast path this CPU can run against the scalar twin.
    pub fn check_simd_vs_scalar(k: &TypeKernels, seed: u64) {
        let mut paths = Vec::new();
        if detected_isa() >= Isa::Avx2 {
            paths.push(("avx2", k.dot_avx2));
        }
        if detected_isa() >= Isa::Avx512 {
            paths.push(("avx512", k.dot_avx512));
        }
        let mut rng = Rng::new(seed);
        for n_blocks in [1, 2, 7, 16] {
            let data = random_blocks(k.ty, n_blocks, &mut rng);
            let n = n_blocks * k.ty.block_size();
            let x = random_x(n, &mut rng);
            let mut w = vec![0f32; n];
            (k.dequant)(&data, &mut w);
            let mag: f32 = w.iter().zip(&x).map(|(a, b)| (a * b).abs()).sum();
            let want = (k.dot_scalar)(&data, &x);
            for (name, f) in &paths {
                let f = f.unwrap_or_else(|| panic!("{}: no {name} kernel", k.ty.name()));
                let got = f(&data, &x);
                assert!(
                    (got - want).abs() <= 1e-4 * mag + 1e-6,
                    "{} {name} {n_blocks} blocks: {got} vs scalar {want} (sum |w x| {mag})",
                    k.ty.name()
                );
            }
        }
    }
}
