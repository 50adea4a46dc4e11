//! The one-token dots of the lattice types (IQ2_XS, IQ1_M) on AVX2 with the
//! unpack fused into the product: no block of 16-bit weights is stored and
//! read back (the generic driver writes and reloads 512 bytes a block).
//!
//! Per group of 16 values (two 8-value table rows, one odd scale): the two
//! rows are loaded into one register (`vmovdqa` + `vinserti128`, or
//! `vmovq` + `vpinsrq`), IQ2_XS's signs applied by `vpsignw` with a ±1 row
//! of the sign table, IQ1_M's `8·grid ± 1` bytes widened (`vpmovsxbw`), the
//! group's scale multiplied in (`vpmullw` by a `vpshufb` of the block's
//! scale bytes, its pattern stepped in a register rather than loaded), and
//! one `vpmaddwd` against the activations adds into the block's even- or
//! odd-group integer chain.
//!
//! Where the row offsets come from (what decided the speed on Zen 3, no
//! hardware counters, single thread from L2): IQ2_XS's (grid `(q & 511)·16`,
//! signs `(q >> 9)·16`) are computed in general registers from one 64-bit
//! load per two groups, kept there by an empty `asm!` (the compiler
//! otherwise moves them into vector lanes and extracts them again, 16 → 27
//! ns a block in a trial without signs); IQ1_M's 12-bit keys are built with
//! a few 256-bit unpacks per block, stored to a small stack array one block
//! ahead of their use and read back with one `movzx` each (computing them
//! in general registers cost more: 22.4 against 20.7 ns a block; read back
//! in the same block, the loads wait for the stores). Vector-built IQ2_XS
//! sign masks (`vpshufb`, `vpand`, `vpcmpeqw` per group) were slower than
//! the sign table's rows (30 against 23.7 ns), and so was a 64 KiB table of
//! IQ1_M rows already widened to 16 bits (24.8 against 22.4 ns: it does
//! not fit the 32 KiB L1), and an IQ1_M variant that gathered its rows
//! (`vpgatherdq`, 22.8 ns).
//!
//! The integers are exactly the generic driver's ([`super::x86::dot_avx2`]
//! over the unpackers): every 32-bit lane of the two chains receives the
//! same products (the same pairs of the same groups), the chains are
//! converted and added in the same order, scaled by the same `(d / 8) · dx`
//! and accumulated across blocks in the same order, so the results are the
//! generic driver's bit for bit. The scalar twins below compute the same
//! lanes and f32 steps from the reference tables (`iq_tables`), and the
//! tests hold all three equal.

use super::{Q16Ref, QK};
use crate::iq_tables::{iq1s_grid, iq2xs_grid, ksigns_iq2xs};
use crate::util::{f16_at, u16_at};

use crate::iq1::IQ1M_BYTES;
use crate::iq2::IQ2XS_BYTES;

/// The f32 tail every block of both kernels ends with (the generic AVX2
/// driver's uniform-type step): the two chains' lanes converted and added,
/// times `(d / 8) · dx`, into the row's eight accumulators; `hsum` below
/// sums them as `util::hsum256` does.
#[inline(always)]
fn block_tail(is0: &[i32; 8], is1: &[i32; 8], d: f32, dx: f32, acc: &mut [f32; 8]) {
    let s = (d * 0.125) * dx;
    for l in 0..8 {
        acc[l] = (is0[l] as f32 + is1[l] as f32).mul_add(s, acc[l]);
    }
}

/// `util::hsum256`'s order: halves added, then pairs, then the two.
#[inline(always)]
fn hsum(a: &[f32; 8]) -> f32 {
    let s: [f32; 4] = std::array::from_fn(|i| a[i] + a[i + 4]);
    (s[0] + s[2]) + (s[1] + s[3])
}

/// Adds group `m`'s 16 weights times the activations `xq` (the block's
/// 256) into the even- or odd-group chain, pairs into lanes as
/// `vpmaddwd` does.
#[inline(always)]
fn group_lanes(m: usize, w: &[i32; 16], xq: &[i16], is: &mut [[i32; 8]; 2]) {
    for l in 0..8 {
        let (a, b) = (16 * m + 2 * l, 16 * m + 2 * l + 1);
        is[m % 2][l] += w[2 * l] * xq[a] as i32 + w[2 * l + 1] * xq[b] as i32;
    }
}

/// Scalar twin of [`dot_iq2_xs_avx2`]: the same lanes and f32 steps, the
/// weights from the reference grid and sign tables.
pub fn dot_iq2_xs_fused_scalar(data: &[u8], x: Q16Ref<'_>) -> f32 {
    let mut acc = [0f32; 8];
    for (bi, b) in data.chunks_exact(IQ2XS_BYTES).enumerate() {
        let d = f16_at(b, 0);
        let xq = &x.q[bi * QK..(bi + 1) * QK];
        let mut is = [[0i32; 8]; 2];
        for m in 0..16 {
            let sc = 2 * ((b[66 + m / 2] >> (4 * (m % 2))) & 0x0f) as i32 + 1;
            let mut w = [0i32; 16];
            for r in 0..2 {
                let q = u16_at(b, 2 + 2 * (2 * m + r));
                let g = iq2xs_grid[(q & 511) as usize];
                let signs = ksigns_iq2xs[(q >> 9) as usize];
                for j in 0..8 {
                    let v = (g >> (8 * j)) as u8 as i32;
                    let v = if signs & (1 << j) != 0 { -v } else { v };
                    w[8 * r + j] = sc * v;
                }
            }
            group_lanes(m, &w, xq, &mut is);
        }
        block_tail(&is[0], &is[1], d, x.d[bi], &mut acc);
    }
    hsum(&acc)
}

/// Scalar twin of [`dot_iq1_m_avx2`]: the same lanes and f32 steps, the
/// weights from the reference grid.
pub fn dot_iq1_m_fused_scalar(data: &[u8], x: Q16Ref<'_>) -> f32 {
    let mut acc = [0f32; 8];
    for (bi, b) in data.chunks_exact(IQ1M_BYTES).enumerate() {
        let sc = [u16_at(b, 48), u16_at(b, 50), u16_at(b, 52), u16_at(b, 54)];
        let dbits =
            (sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000);
        let d = half::f16::from_bits(dbits).to_f32();
        let xq = &x.q[bi * QK..(bi + 1) * QK];
        let mut is = [[0i32; 8]; 2];
        for m in 0..16 {
            // Group m: entries 2m and 2m+1 (scale field m of the four words).
            let s = 2 * ((sc[m / 4] >> (3 * (m % 4))) & 7) as i32 + 1;
            let mut w = [0i32; 16];
            for r in 0..2 {
                let k = 2 * m + r;
                let nib = b[32 + k / 2] >> (4 * (k % 2));
                let g = iq1s_grid[(b[k] as usize | (((nib & 7) as usize) << 8)) & 2047];
                let delta = if nib & 8 != 0 { -1 } else { 1 };
                for j in 0..8 {
                    let v = (g >> (8 * j)) as u8 as i8 as i32;
                    w[8 * r + j] = s * (8 * v + delta);
                }
            }
            group_lanes(m, &w, xq, &mut is);
        }
        block_tail(&is[0], &is[1], d, x.d[bi], &mut acc);
    }
    hsum(&acc)
}

#[cfg(target_arch = "x86_64")]
pub(crate) use x86::{dot_iq1_m_avx2, dot_iq2_xs_avx2};

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::super::simd_iq::{iq1_m_scales, unroll16, IQ1_K8, IQ2XS_G16, IQ2XS_S16};
    use super::super::x86::prefetch_ahead;
    use super::super::{Q16Ref, QK};
    use super::{IQ1M_BYTES, IQ2XS_BYTES};
    use std::arch::x86_64::*;

    /// A block's 32 IQ1_M row offsets.
    #[repr(C, align(32))]
    struct Offs([u16; 32]);

    /// Offset `i` of the block's array (a plain load the compiler may not
    /// replace by a lane extraction from the vectors just stored).
    #[inline(always)]
    unsafe fn off(o: &Offs, i: usize) -> usize {
        // SAFETY: `i < 32` at every call (constants of the unrolled groups).
        unsafe { std::ptr::read_volatile(o.0.as_ptr().add(i)) as usize }
    }

    /// `x`, through an empty `asm!` block: what is computed from it stays
    /// in general registers (the compiler cannot move it into vector lanes
    /// and extract it back, which costs more than the scalar work).
    #[inline(always)]
    fn opaque(mut x: usize) -> usize {
        // SAFETY: an empty block; it only hides the value's origin.
        unsafe {
            std::arch::asm!("/* {0} */", inlateout(reg) x, options(pure, nomem, nostack, preserves_flags));
        }
        x
    }

    /// The block tail of the generic AVX2 driver for a uniform type.
    #[inline(always)]
    unsafe fn tail(is0: __m256i, is1: __m256i, d: f32, dx: f32, acc: __m256) -> __m256 {
        // SAFETY: register-only AVX2/FMA instructions (the callers').
        unsafe {
            let is = _mm256_add_ps(_mm256_cvtepi32_ps(is0), _mm256_cvtepi32_ps(is1));
            _mm256_fmadd_ps(is, _mm256_set1_ps((d * 0.125) * dx), acc)
        }
    }

    /// The end of one group of 16 values in both fused dots: the weights
    /// `v` times the group's odd scale (byte `m` of `scb`, through the
    /// `vpshufb` pattern `sp`, stepped to the next group), one `vpmaddwd`
    /// against activations `16 · m ..` of `xq`, added into the even (`is0`)
    /// or odd (`is1`) group chain.
    macro_rules! scaled_madd {
        ($v:expr, $m:expr, $scb:expr, $sp:ident, $one:expr, $xq:expr, $is0:ident, $is1:ident) => {{
            let w = _mm256_mullo_epi16($v, _mm256_shuffle_epi8($scb, $sp));
            $sp = _mm256_add_epi16($sp, $one);
            let p = _mm256_madd_epi16(w, _mm256_loadu_si256($xq.add(16 * $m).cast()));
            if $m.is_multiple_of(2) {
                $is0 = _mm256_add_epi32($is0, p);
            } else {
                $is1 = _mm256_add_epi32($is1, p);
            }
        }};
    }

    /// IQ2_XS against one token's activations, the unpack fused in (see
    /// the module's notes).
    ///
    /// # Safety
    /// AVX2, FMA and F16C; `data` whole 74-byte blocks, `x` at least as
    /// many blocks of activations (the caller checks the sizes).
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn dot_iq2_xs_avx2(data: &[u8], x: Q16Ref<'_>) -> f32 {
        let nb = data.len() / IQ2XS_BYTES;
        let g = IQ2XS_G16.0.as_ptr().cast::<u8>();
        let sg = IQ2XS_S16.0.as_ptr().cast::<u8>();
        let m4 = _mm_set1_epi8(15);
        let one = _mm256_set1_epi16(1);
        let mut acc = _mm256_setzero_ps();
        for bi in 0..nb {
            prefetch_ahead(data, bi * IQ2XS_BYTES, IQ2XS_BYTES);
            // SAFETY: block `bi` is whole (74 bytes at `b`): the loads read
            // bytes 0..2, 2..66 and 66..74. Grid rows at (q & 511)·16 and
            // sign rows at (q >> 9)·16 lie inside their tables; the
            // activations hold 256 values per block (the caller's promise).
            unsafe {
                let b = data.as_ptr().add(bi * IQ2XS_BYTES);
                let d = crate::util::f16_ptr(b);
                // Group 2i takes the low nibble of scale byte i, 2i+1 the high.
                let sc = _mm_loadl_epi64(b.add(66).cast());
                let nib = _mm_unpacklo_epi8(
                    _mm_and_si128(sc, m4),
                    _mm_and_si128(_mm_srli_epi16::<4>(sc), m4),
                );
                let odd = _mm_or_si128(_mm_add_epi8(nib, nib), _mm_set1_epi8(1));
                let scb = _mm256_broadcastsi128_si256(odd);
                // The vpshufb pattern of group m's scale (byte m, then
                // zero), stepped from group to group in a register.
                let mut sp = _mm256_set1_epi16(0x8000u16 as i16);
                let xq = x.q.as_ptr().add(bi * QK);
                let rows = |t: *const u8, o0: usize, o1: usize| {
                    _mm256_inserti128_si256::<1>(
                        _mm256_castsi128_si256(_mm_load_si128(t.add(o0).cast())),
                        _mm_load_si128(t.add(o1).cast()),
                    )
                };
                let mut is0 = _mm256_setzero_si256();
                let mut is1 = _mm256_setzero_si256();
                let mut q4 = 0usize;
                unroll16!(|m: usize| {
                    // Words 2m and 2m + 1 of the four in q4.
                    if m.is_multiple_of(2) {
                        q4 = opaque(b.add(2 + 4 * m).cast::<u64>().read_unaligned() as usize);
                    }
                    let q2 = q4 >> (32 * (m % 2));
                    let gv = rows(g, opaque((q2 << 4) & 0x1ff0), opaque((q2 >> 12) & 0x1ff0));
                    let sv = rows(sg, opaque((q2 >> 5) & 0x7f0), opaque((q2 >> 21) & 0x7f0));
                    let v = _mm256_sign_epi16(gv, sv);
                    scaled_madd!(v, m, scb, sp, one, xq, is0, is1);
                });
                acc = tail(is0, is1, d, *x.d.get_unchecked(bi), acc);
            }
        }
        // SAFETY: register-only instructions of the enabled features.
        unsafe { crate::util::hsum256(acc) }
    }

    /// IQ1_M against one token's activations, the unpack fused in (see
    /// the module's notes). The rows are `8·grid ± 1` bytes keyed by the
    /// entry's 12 bits (index and delta sign, [`IQ1_K8`]).
    ///
    /// # Safety
    /// AVX2, FMA and F16C; `data` whole 56-byte blocks, `x` at least as
    /// many blocks of activations (the caller checks the sizes).
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn dot_iq1_m_avx2(data: &[u8], x: Q16Ref<'_>) -> f32 {
        let nb = data.len() / IQ1M_BYTES;
        let t = IQ1_K8.0.as_ptr().cast::<u8>();
        let one = _mm256_set1_epi16(1);
        let m4 = _mm_set1_epi8(15);
        let mut oo = [Offs([0; 32]), Offs([0; 32])];
        // Block `bi`'s row offsets into `oo[bi % 2]`, one block ahead of
        // their use (loads of words just stored as vectors wait for the
        // stores to complete).
        let prep = |oo: &mut [Offs; 2], bi: usize| {
            // SAFETY: block `bi` is whole (32 bytes at 0 and 16 at 32 read).
            unsafe {
                let b = data.as_ptr().add(bi * IQ1M_BYTES);
                let qs = _mm256_loadu_si256(b.cast());
                let qh = _mm_loadu_si128(b.add(32).cast());
                // Entry k's nibble (bits 0-2 the index's top, bit 3 the
                // delta's sign) as byte k: entries 0..16 | 16..32.
                let lo = _mm_and_si128(qh, m4);
                let hi = _mm_and_si128(_mm_srli_epi16::<4>(qh), m4);
                let n = _mm256_inserti128_si256::<1>(
                    _mm256_castsi128_si256(_mm_unpacklo_epi8(lo, hi)),
                    _mm_unpackhi_epi8(lo, hi),
                );
                // Keys qs[k] | nib[k] << 8, times 8: words of entries
                // 0..8 | 16..24, then 8..16 | 24..32.
                let op = oo[bi % 2].0.as_mut_ptr().cast::<__m256i>();
                _mm256_store_si256(op, _mm256_slli_epi16::<3>(_mm256_unpacklo_epi8(qs, n)));
                _mm256_store_si256(
                    op.add(1),
                    _mm256_slli_epi16::<3>(_mm256_unpackhi_epi8(qs, n)),
                );
            }
        };
        if nb > 0 {
            prep(&mut oo, 0);
        }
        let mut acc = _mm256_setzero_ps();
        for bi in 0..nb {
            prefetch_ahead(data, bi * IQ1M_BYTES, IQ1M_BYTES);
            if bi + 1 < nb {
                prep(&mut oo, bi + 1);
            }
            let o = &oo[bi % 2];
            // SAFETY: block `bi` is whole (8 bytes at 48 read). Row keys
            // are 12 bits, so every row read lies inside the 4096-row
            // table; the activations hold 256 values per block (the
            // caller's promise).
            unsafe {
                let b = data.as_ptr().add(bi * IQ1M_BYTES);
                let (d, scb) = iq1_m_scales(b);
                let mut sp = _mm256_set1_epi16(0x8000u16 as i16);
                let xq = x.q.as_ptr().add(bi * QK);
                // Entry k's position in `o`.
                let pos = |k: usize| match k / 8 {
                    1 => k + 8,
                    2 => k - 8,
                    _ => k,
                };
                let row = |k: usize| t.add(off(o, pos(k))).cast::<i64>().read_unaligned();
                let mut is0 = _mm256_setzero_si256();
                let mut is1 = _mm256_setzero_si256();
                unroll16!(|m: usize| {
                    let v = _mm_set_epi64x(row(2 * m + 1), row(2 * m));
                    scaled_madd!(_mm256_cvtepi8_epi16(v), m, scb, sp, one, xq, is0, is1);
                });
                acc = tail(is0, is1, d, *x.d.get_unchecked(bi), acc);
            }
        }
        // SAFETY: register-only instructions of the enabled features.
        unsafe { crate::util::hsum256(acc) }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{random_blocks, random_x, rng};
    use super::super::{Q16Act, Q16Ref, QK};
    use super::*;
    use crate::GgmlType;

    fn have_avx2() -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma")
                && std::arch::is_x86_feature_detected!("f16c")
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    }

    /// The fused AVX2 dot, its scalar twin and the generic AVX2 driver
    /// (unpack to memory, then the integer dot) on the same row: the
    /// three results bit for bit. Without AVX2 the twin is checked
    /// against the scalar reference dot within rounding.
    fn check_row(ty: GgmlType, data: &[u8], x: Q16Ref<'_>, what: &str) {
        let twin = match ty {
            GgmlType::IQ2_XS => dot_iq2_xs_fused_scalar(data, x),
            _ => dot_iq1_m_fused_scalar(data, x),
        };
        if !have_avx2() {
            let k = super::super::kernels_at(ty, super::super::Q16Level::Scalar).expect("k");
            let want = (k.dot_scalar)(data, x);
            assert!(
                (twin - want).abs() <= 1e-5 * want.abs().max(1.0),
                "{ty} {what}: twin {twin} vs scalar {want}"
            );
            return;
        }
        #[cfg(target_arch = "x86_64")]
        {
            use super::super::{x86, IQ1M, IQ2XS};
            // SAFETY: AVX2, FMA and F16C checked above; `data` holds whole
            // blocks and `x` the activations of as many.
            let (fused, generic) = unsafe {
                match ty {
                    GgmlType::IQ2_XS => (dot_iq2_xs_avx2(data, x), x86::dot_avx2::<IQ2XS>(data, x)),
                    _ => (dot_iq1_m_avx2(data, x), x86::dot_avx2::<IQ1M>(data, x)),
                }
            };
            assert_eq!(
                twin.to_bits(),
                generic.to_bits(),
                "{ty} {what}: twin {twin} vs generic {generic}"
            );
            assert_eq!(
                fused.to_bits(),
                generic.to_bits(),
                "{ty} {what}: fused {fused} vs generic {generic}"
            );
            // And through the dispatch the backend uses.
            let k = super::super::kernels_at(ty, super::super::Q16Level::Avx2).expect("k");
            assert_eq!(
                (k.dot)(data, x).to_bits(),
                generic.to_bits(),
                "{ty} {what}: kernels().dot"
            );
        }
    }

    /// Random rows of several lengths (one block to 17), random
    /// activations with outliers.
    #[test]
    fn fused_dots_equal_twin_and_generic_on_random_rows() {
        for (i, ty) in [GgmlType::IQ2_XS, GgmlType::IQ1_M].into_iter().enumerate() {
            for nb in [1usize, 2, 3, 7, 8, 9, 17] {
                for seed in 0..4u64 {
                    let data = random_blocks(ty, nb, 900 + 31 * i as u64 + 7 * nb as u64 + seed);
                    let x = random_x(nb * QK, 77 + nb as u64 + 13 * seed);
                    let mut a = Q16Act::default();
                    assert!(a.quantize(&x));
                    check_row(ty, &data, a.view(), &format!("{nb} blocks, seed {seed}"));
                }
            }
        }
    }

    /// Every IQ2_XS grid row with every sign index in every row position,
    /// every scale nibble in every group; every IQ1_M (index, delta) key in
    /// every entry position and every 3-bit scale in every group. The
    /// blocks are dotted as rows of 8 against random activations.
    #[test]
    fn fused_dots_cover_every_code() {
        let mut r = rng(4242);
        // IQ2_XS: 2048 blocks, block n's word k = (n % 2048)·32 + k
        // rotated, so all 65536 words appear in every position class.
        let mut data = vec![0u8; 74 * 2048];
        for (n, blk) in data.chunks_exact_mut(74).enumerate() {
            let d = half::f16::from_f32(0.002 + (r() % 1000) as f32 * 1e-5).to_bits();
            blk[0..2].copy_from_slice(&d.to_le_bytes());
            for k in 0..32 {
                let q = (n * 32 + (k + 11 * (n / 64)) % 32) as u16;
                blk[2 + 2 * k..4 + 2 * k].copy_from_slice(&q.to_le_bytes());
            }
            for j in 0..8 {
                blk[66 + j] = (n * 8 + j) as u8 ^ (n >> 5) as u8;
            }
        }
        let x = random_x(8 * QK, 5);
        let mut a = Q16Act::default();
        assert!(a.quantize(&x));
        for (i, row) in data.chunks_exact(74 * 8).enumerate() {
            check_row(GgmlType::IQ2_XS, row, a.view(), &format!("row {i}"));
        }
        // IQ1_M: 4096 blocks, entry k of block n takes key (n + 129k) % 4096.
        let mut data = vec![0u8; 56 * 4096];
        for (n, blk) in data.chunks_exact_mut(56).enumerate() {
            crate::q16::tests::iq1m_keys(blk, n);
            // Scales: every value in every group over the blocks; the f16
            // scale's nibbles (top of each word) a moderate value.
            let mut w = 0u64;
            for m in 0..16u64 {
                w |= ((n as u64 + m + r() % 2) % 8) << (3 * (m % 4) + 16 * (m / 4));
            }
            let bits = half::f16::from_f32(0.003 + (r() % 100) as f32 * 1e-4).to_bits() as u64;
            for i in 0..4 {
                w |= ((bits >> (4 * i)) & 0xf) << (12 + 16 * i);
            }
            blk[48..56].copy_from_slice(&w.to_le_bytes());
        }
        for (i, row) in data.chunks_exact(56 * 8).enumerate() {
            check_row(GgmlType::IQ1_M, row, a.view(), &format!("row {i}"));
        }
    }
}
