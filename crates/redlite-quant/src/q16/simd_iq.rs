//! AVX2 unpackers of the lattice types (IQ2_XS, IQ1_M).
//!
//! Per group of 16 weights (one output vector, one integer scale): two grid
//! rows are looked up by index, the signs (IQ2_XS) or the delta (IQ1_M) are
//! applied, and one 16-bit multiply by the broadcast scale finishes the group.
//! Every value is an exact small integer, so the output is bit-identical to
//! the scalar twins in `mod.rs`.
//!
//! What mattered for speed (measured on Zen 4, inside the dot drivers):
//!
//! * the table indices are computed in general registers straight from the
//!   block bytes. Computing them in vector registers and reading them back
//!   through a stack array made the dot loop up to twice as slow: narrow
//!   loads of freshly stored vectors are apparently not store-forwarded,
//!   and the wait serialises consecutive blocks;
//! * the scales stay in a vector register (one byte per group, picked out by
//!   a `vpshufb` whose zeroing pattern also widens the byte to 16 bits)
//!   rather than being broadcast from a stack array;
//! * the 16 groups are fully unrolled, so every shuffle pattern and offset is
//!   a constant (rolled loops got slower shuffle sequences).

use super::Unpacked;

/// The tables and block-scale helper the fused AVX2 dots (`lat_avx2`) share.
#[cfg(target_arch = "x86_64")]
pub(crate) use x86::{iq1_m_scales, unroll16, IQ1_K8, IQ2XS_G16, IQ2XS_S16};
#[cfg(target_arch = "x86_64")]
pub use x86::{unpack_iq1_m, unpack_iq2_xs, zmm_iq1_m, zmm_iq2_xs, zmm_q6_k};

/// The scalar twin (no SIMD on this architecture).
///
/// # Safety
/// Always safe here; `unsafe` only to match the x86-64 signature.
#[cfg(not(target_arch = "x86_64"))]
#[inline]
pub unsafe fn unpack_iq2_xs(blk: &[u8], u: &mut Unpacked) {
    super::unpack_iq2_xs(blk, u)
}

/// The scalar twin (no SIMD on this architecture).
///
/// # Safety
/// Always safe here; `unsafe` only to match the x86-64 signature.
#[cfg(not(target_arch = "x86_64"))]
#[inline]
pub unsafe fn unpack_iq1_m(blk: &[u8], u: &mut Unpacked) {
    super::unpack_iq1_m(blk, u)
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::Unpacked;
    use crate::iq1::IQ1M_BYTES;
    use crate::iq2::IQ2XS_BYTES;
    use crate::iq_tables::{IQ1S_GRID, IQ2XS_GRID};
    use std::arch::x86_64::*;

    /// Runs `$f(0)` .. `$f(15)`: the groups of a super-block, fully unrolled
    /// (constant group indices make every pattern and offset a constant).
    macro_rules! unroll16 {
        ($f:expr) => {{
            let f = &mut $f;
            f(0);
            f(1);
            f(2);
            f(3);
            f(4);
            f(5);
            f(6);
            f(7);
            f(8);
            f(9);
            f(10);
            f(11);
            f(12);
            f(13);
            f(14);
            f(15);
        }};
    }
    pub(crate) use unroll16;

    /// 32-byte aligned tables (rows never straddle a cache line).
    #[repr(C, align(32))]
    pub(crate) struct A32<T>(pub(crate) T);

    /// `ksigns_iq2xs[i]`: the 7 bits of `i` plus a parity bit making the count even.
    const fn ksign(i: usize) -> u32 {
        let i = (i & 127) as u32;
        i | ((i.count_ones() & 1) << 7)
    }

    /// The IQ2_XS grid as rows of 8 `i16` (values 8, 25, 43).
    pub(crate) static IQ2XS_G16: A32<[[i16; 8]; 512]> = A32(iq2xs_g16());
    /// Per 7-bit sign index, `±1` per value (`-1` where the sign bit is set).
    pub(crate) static IQ2XS_S16: A32<[[i16; 8]; 128]> = A32(iq2xs_s16());

    const fn iq2xs_g16() -> [[i16; 8]; 512] {
        let mut t = [[0i16; 8]; 512];
        let mut i = 0;
        while i < 512 {
            let mut j = 0;
            while j < 8 {
                t[i][j] = (IQ2XS_GRID[i] >> (8 * j)) as u8 as i16;
                j += 1;
            }
            i += 1;
        }
        t
    }

    const fn iq2xs_s16() -> [[i16; 8]; 128] {
        let mut t = [[0i16; 8]; 128];
        let mut i = 0;
        while i < 128 {
            let s = ksign(i);
            let mut j = 0;
            while j < 8 {
                t[i][j] = if (s >> j) & 1 != 0 { -1 } else { 1 };
                j += 1;
            }
            i += 1;
        }
        t
    }

    /// `8·grid + 1` of every IQ1_S/IQ1_M grid entry as bytes (-7, 1, 9): the
    /// positive delta folded in; a negative delta subtracts 2.
    pub(super) static IQ1_G8: A32<[u64; 2048]> = A32(iq1_g8());

    const fn iq1_g8() -> [u64; 2048] {
        let mut t = [0u64; 2048];
        let mut i = 0;
        while i < 2048 {
            let mut r = 0u64;
            let mut j = 0;
            while j < 8 {
                let v = (IQ1S_GRID[i] >> (8 * j)) as u8 as i8;
                r |= ((8 * v + 1) as u8 as u64) << (8 * j);
                j += 1;
            }
            t[i] = r;
            i += 1;
        }
        t
    }

    /// The delta correction of a group (two entries sharing the nibble byte
    /// `h`), at byte offset `16·((h >> 3) & 0x11)`: `-2` on the 8 bytes of an
    /// entry whose delta is negative (bit 3 for the first, bit 7 the second).
    pub(super) static IQ1_DELTA: A32<[[i8; 16]; 18]> = A32(iq1_delta());

    const fn iq1_delta() -> [[i8; 16]; 18] {
        let mut t = [[0i8; 16]; 18];
        let mut k = 0;
        while k < 18 {
            let mut j = 0;
            while j < 16 {
                let bit = if j < 8 { 1 } else { 16 };
                t[k][j] = if k & bit != 0 { -2 } else { 0 };
                j += 1;
            }
            k += 1;
        }
        t
    }

    /// An f16 as f32 (F16C; the same value as `half` for every bit pattern).
    ///
    /// # Safety
    /// The CPU must have AVX2, FMA and F16C.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn f16_to_f32(h: u16) -> f32 {
        _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h as i32)))
    }

    /// Group `m`'s scale from `scb` (16 scale bytes, in both 128-bit lanes)
    /// in every 16-bit lane: the pattern picks byte `m`, then zero.
    ///
    /// # Safety
    /// The CPU must have AVX2, FMA and F16C.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn group_scale(scb: __m256i, m: usize) -> __m256i {
        _mm256_shuffle_epi8(scb, _mm256_set1_epi16((0x8000 | m) as u16 as i16))
    }

    /// Writes the f32 scale `d / 8` and zero offsets.
    ///
    /// # Safety
    /// The CPU must have AVX2, FMA and F16C.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn finish(u: &mut Unpacked, d: f32) {
        // The same f32 operation as the scalar twin.
        let s = d * 0.125;
        // SAFETY: `s` and `m` hold 8 f32 each (unaligned stores).
        unsafe {
            _mm256_storeu_ps(u.s.as_mut_ptr(), _mm256_set1_ps(s));
            _mm256_storeu_ps(u.m.as_mut_ptr(), _mm256_setzero_ps());
        }
    }

    /// IQ2_XS: `w = (2s+1) · ±grid`, `s = d / 8` (see the scalar twin).
    ///
    /// Per group of two 16-bit words `q`: grid rows at `(q & 511)·16`, sign
    /// rows at `(q >> 9)·16` (both `i16` rows), `vpsignw`, `vpmullw`.
    ///
    /// # Safety
    /// The CPU must have AVX2, FMA and F16C; `blk` holds a whole super-block
    /// (74 bytes).
    // No target features of its own: it inlines into the drivers (which
    // enable AVX2, FMA and F16C), as unpack_iq1_m does.
    #[inline(always)]
    pub unsafe fn unpack_iq2_xs(blk: &[u8], u: &mut Unpacked) {
        debug_assert!(blk.len() >= IQ2XS_BYTES);
        let b = blk.as_ptr();
        // SAFETY: the caller guarantees the 74 bytes of a block at `b`; every
        // read below lies inside them (the last, an 8-byte read at 66). Grid
        // and sign rows are read at offsets masked to 9 and 7 bits times 16,
        // inside their tables, and the 16 aligned stores fill `u.w` (64-byte
        // aligned) exactly.
        unsafe {
            let d = f16_to_f32(b.cast::<u16>().read_unaligned());
            // Group 2ib takes the low nibble of scale byte ib, 2ib+1 the high.
            let sc = _mm_loadl_epi64(b.add(66).cast());
            let m4 = _mm_set1_epi8(15);
            let nib = _mm_unpacklo_epi8(
                _mm_and_si128(sc, m4),
                _mm_and_si128(_mm_srli_epi16::<4>(sc), m4),
            );
            let odd = _mm_or_si128(_mm_add_epi8(nib, nib), _mm_set1_epi8(1));
            let scb = _mm256_broadcastsi128_si256(odd);
            let g = IQ2XS_G16.0.as_ptr().cast::<u8>();
            let sg = IQ2XS_S16.0.as_ptr().cast::<u8>();
            let rows = |t: *const u8, o0: usize, o1: usize| {
                _mm256_inserti128_si256::<1>(
                    _mm256_castsi128_si256(_mm_load_si128(t.add(o0).cast())),
                    _mm_load_si128(t.add(o1).cast()),
                )
            };
            let w = u.w.as_mut_ptr();
            unroll16!(|m: usize| {
                let q4 = b.add(2 + 8 * (m / 2)).cast::<u64>().read_unaligned();
                let q2 = (q4 >> (32 * (m % 2))) as usize;
                let (q0, q1) = (q2 & 0xffff, (q2 >> 16) & 0xffff);
                let gv = rows(g, (q0 & 511) << 4, (q1 & 511) << 4);
                let sv = rows(sg, (q0 >> 9) << 4, (q1 >> 9) << 4);
                let v = _mm256_sign_epi16(gv, sv);
                _mm256_store_si256(
                    w.add(16 * m).cast(),
                    _mm256_mullo_epi16(v, group_scale(scb, m)),
                );
            });
            finish(u, d);
        }
    }

    /// An IQ1_M block's f16 scale `d` (its nibbles spread over the tops of
    /// the four scale words) and its 16 group scales `2s+1` as bytes, in
    /// both 128-bit lanes (for [`group_scale`]).
    ///
    /// # Safety
    /// The CPU must have AVX2, FMA and F16C; `b` points at a whole block
    /// (56 bytes).
    #[inline(always)]
    pub(crate) unsafe fn iq1_m_scales(b: *const u8) -> (f32, __m256i) {
        // SAFETY: the 8 bytes at 48 lie inside the block (the caller's promise).
        unsafe {
            let sw = b.add(48).cast::<u64>().read_unaligned();
            let (s0, s1, s2, s3) = (
                sw as u16,
                (sw >> 16) as u16,
                (sw >> 32) as u16,
                (sw >> 48) as u16,
            );
            let dbits = (s0 >> 12) | ((s1 >> 8) & 0x00f0) | ((s2 >> 4) & 0x0f00) | (s3 & 0xf000);
            let d = f16_to_f32(dbits);
            // Scale of group m: bits 3(m%4).. of word m/4. Spread the words
            // over 16-bit lanes (w0 ×4, w1 ×4 | w2 ×4, w3 ×4), move each
            // field to the top with a multiply, shift it down, make it odd.
            let words = _mm256_broadcastsi128_si256(_mm_loadl_epi64(b.add(48).cast()));
            let spread = _mm256_setr_epi8(
                0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3, 2, 3, 4, 5, 4, 5, 4, 5, 4, 5, 6, 7, 6, 7,
                6, 7, 6, 7,
            );
            let mult = _mm256_setr_epi16(
                1 << 13,
                1 << 10,
                1 << 7,
                1 << 4,
                1 << 13,
                1 << 10,
                1 << 7,
                1 << 4,
                1 << 13,
                1 << 10,
                1 << 7,
                1 << 4,
                1 << 13,
                1 << 10,
                1 << 7,
                1 << 4,
            );
            let s = _mm256_srli_epi16::<13>(_mm256_mullo_epi16(
                _mm256_shuffle_epi8(words, spread),
                mult,
            ));
            let s = _mm256_or_si256(_mm256_slli_epi16::<1>(s), _mm256_set1_epi16(1));
            // The 16 scale bytes in both lanes.
            let scb = _mm256_permute4x64_epi64::<0b10_00_10_00>(_mm256_packus_epi16(s, s));
            (d, scb)
        }
    }

    /// IQ1_M: `w = (2s+1) · (8·grid ± 1)`, `s = d / 8` (see the scalar twin).
    ///
    /// Per group (entries 2m, 2m+1): two rows of `8·grid + 1` bytes at their
    /// 11-bit indices, `-2` where the delta is negative, sign-extended to 16
    /// bits, `vpmullw` by the group's `2s+1` (`|w| ≤ 135`).
    ///
    /// # Safety
    /// The CPU must have AVX2, FMA and F16C; `blk` holds a whole super-block
    /// (56 bytes).
    // No target features of its own: it inlines into the drivers (which
    // enable AVX2, FMA and F16C); as an out-of-line call it measured 15 %
    // slower there.
    #[inline(always)]
    pub unsafe fn unpack_iq1_m(blk: &[u8], u: &mut Unpacked) {
        debug_assert!(blk.len() >= IQ1M_BYTES);
        let b = blk.as_ptr();
        // SAFETY: the caller guarantees the 56 bytes of a block at `b`; every
        // read below lies inside them (the last, 8 bytes at 48). Grid rows are
        // read at 11-bit indices (2048 rows), delta rows at offsets of at most
        // 16·17 (18 rows), and the 16 aligned stores fill `u.w` exactly.
        unsafe {
            let (d, scb) = iq1_m_scales(b);
            let g = IQ1_G8.0.as_ptr();
            let dt = IQ1_DELTA.0.as_ptr().cast::<u8>();
            let w = u.w.as_mut_ptr();
            // Indices four groups (eight entries) at a time, 16 bits per lane:
            // `ev` entries 2m, `od` entries 2m+1, `dk` the delta row offsets.
            let (mut ev, mut od, mut dk) = (0u64, 0u64, 0u64);
            unroll16!(|m: usize| {
                let (j, i) = (m / 4, m % 4);
                if i == 0 {
                    let lo8 = b.add(8 * j).cast::<u64>().read_unaligned();
                    let h4 = b.add(32 + 4 * j).cast::<u32>().read_unaligned() as u64;
                    // Nibble byte h of group 4j+i into the low byte of lane i.
                    let x = (h4 | (h4 << 16)) & 0x0000_ffff_0000_ffff;
                    let x = (x | (x << 8)) & 0x00ff_00ff_00ff_00ff;
                    ev = (lo8 & 0x00ff_00ff_00ff_00ff) | ((x << 8) & 0x0700_0700_0700_0700);
                    od = ((lo8 >> 8) & 0x00ff_00ff_00ff_00ff) | ((x << 4) & 0x0700_0700_0700_0700);
                    dk = (x << 1) & 0x0110_0110_0110_0110;
                }
                let lane = |v: u64| ((v >> (16 * i)) & 0xffff) as usize;
                let v = _mm_set_epi64x(*g.add(lane(od)) as i64, *g.add(lane(ev)) as i64);
                let v = _mm_add_epi8(v, _mm_load_si128(dt.add(lane(dk)).cast()));
                let v = _mm256_cvtepi8_epi16(v);
                _mm256_store_si256(
                    w.add(16 * m).cast(),
                    _mm256_mullo_epi16(v, group_scale(scb, m)),
                );
            });
            finish(u, d);
        }
    }

    #[repr(C, align(64))]
    pub(crate) struct A64<T>(pub(crate) T);

    /// Lane `k` of 32 takes 16-bit lane `k / 2` (each `qh` byte for its two entries).
    static IQ1_DUP: A64<[u16; 32]> = A64(iq1_dup());

    const fn iq1_dup() -> [u16; 32] {
        let mut t = [0u16; 32];
        let mut k = 0;
        while k < 32 {
            t[k] = (k / 2) as u16;
            k += 1;
        }
        t
    }

    /// Entry `k`'s nibble is the low (even `k`) or high (odd) half of its byte.
    static IQ1_SHIFT: A64<[u16; 32]> = A64(iq1_shift());

    const fn iq1_shift() -> [u16; 32] {
        let mut t = [0u16; 32];
        let mut k = 0;
        while k < 32 {
            t[k] = 4 * (k % 2) as u16;
            k += 1;
        }
        t
    }

    /// `8·grid ± 1` of every IQ1_S/IQ1_M grid entry as eight bytes, keyed by
    /// the entry's 12 bits (11-bit index, bit 11 the delta's sign: rows
    /// `0..2048` take `+1`, `2048..4096` take `-1`), for the gathers of
    /// [`zmm_iq1_m`] (32 KiB).
    pub(crate) static IQ1_K8: A64<[u64; 4096]> = A64(iq1_k8());

    const fn iq1_k8() -> [u64; 4096] {
        let mut t = [0u64; 4096];
        let mut i = 0;
        while i < 4096 {
            let mut v = 0u64;
            let mut j = 0;
            while j < 8 {
                let g = (IQ1S_GRID[i % 2048] >> (8 * j)) as u8 as i8 as i16;
                let w = 8 * g + if i < 2048 { 1 } else { -1 };
                v |= ((w as i8 as u8) as u64) << (8 * j);
                j += 1;
            }
            t[i] = v;
            i += 1;
        }
        t
    }

    /// Word indices for `vpermw`: register `i` of a block's eight takes group
    /// scale `2i` in its first 16 lanes and `2i + 1` in the last 16.
    static PAIR_IDX: A64<[[u16; 32]; 8]> = A64(pair_idx());

    const fn pair_idx() -> [[u16; 32]; 8] {
        let mut t = [[0u16; 32]; 8];
        let mut i = 0;
        while i < 8 {
            let mut k = 0;
            while k < 32 {
                t[i][k] = (2 * i + k / 16) as u16;
                k += 1;
            }
            i += 1;
        }
        t
    }

    /// The eight 512-bit weight registers of a block from its eight bytes per
    /// 8-value entry (`g[q]`: entries `8q .. 8q + 8`, signed bytes) and its
    /// 16 group scales as words (`s16`, lanes 0..16): `w[i]` = values
    /// `32i .. 32i + 32` as `i16`, each times its group's scale.
    #[inline(always)]
    unsafe fn widen_scale(g: &[__m512i; 4], s16: __m512i, w: &mut [__m512i; 8]) {
        // SAFETY: register work of AVX-512 F/BW (the callers' features) and
        // aligned loads of the 64-byte rows of PAIR_IDX.
        unsafe {
            let idx = PAIR_IDX.0.as_ptr();
            for q in 0..4 {
                let lo = _mm512_cvtepi8_epi16(_mm512_castsi512_si256(g[q]));
                let hi = _mm512_cvtepi8_epi16(_mm512_extracti64x4_epi64::<1>(g[q]));
                let s0 = _mm512_permutexvar_epi16(_mm512_load_si512(idx.add(2 * q).cast()), s16);
                let s1 =
                    _mm512_permutexvar_epi16(_mm512_load_si512(idx.add(2 * q + 1).cast()), s16);
                w[2 * q] = _mm512_mullo_epi16(lo, s0);
                w[2 * q + 1] = _mm512_mullo_epi16(hi, s1);
            }
        }
    }

    /// Four gathers of eight 8-byte table rows: row keys are the 32 words
    /// of `keys` (each below the table's length).
    #[inline(always)]
    unsafe fn gather4(keys: __m512i, t: *const u64) -> [__m512i; 4] {
        // SAFETY: every key indexes a row of the table at `t` (the callers'
        // promise); the gathers read 8 bytes per row.
        unsafe {
            let k0 = _mm512_cvtepu16_epi32(_mm512_castsi512_si256(keys));
            let k1 = _mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64::<1>(keys));
            let t = t.cast::<i64>();
            [
                _mm512_i32gather_epi64::<8>(_mm512_castsi512_si256(k0), t),
                _mm512_i32gather_epi64::<8>(_mm512_extracti64x4_epi64::<1>(k0), t),
                _mm512_i32gather_epi64::<8>(_mm512_castsi512_si256(k1), t),
                _mm512_i32gather_epi64::<8>(_mm512_extracti64x4_epi64::<1>(k1), t),
            ]
        }
    }

    /// IQ1_M into eight 512-bit registers (`w[i]` = values `32i .. 32i + 32`
    /// as `i16`, the integers of [`unpack_iq1_m`]); returns the block's f32
    /// scale `d / 8`. The 32 entries' 8-byte rows of `8·grid ± 1` come by
    /// four gathers from [`IQ1_K8`] (keyed by index and delta sign), are
    /// sign-extended and multiplied by their group scales.
    ///
    /// # Safety
    /// The CPU has AVX-512 F/BW/VL, AVX2, FMA and F16C; `b` points at a whole
    /// 56-byte block.
    #[inline(always)]
    pub unsafe fn zmm_iq1_m(b: *const u8, w: &mut [__m512i; 8]) -> f32 {
        // SAFETY: the block's 56 bytes are readable (32 at 0, 16 at 32, 8 at
        // 48); keys are 12-bit (inside IQ1_K8); the table vectors are
        // 64-byte aligned.
        unsafe {
            let (d, scb) = iq1_m_scales(b);
            let dup = _mm512_load_si512(IQ1_DUP.0.as_ptr().cast());
            let shift = _mm512_load_si512(IQ1_SHIFT.0.as_ptr().cast());
            let q = _mm512_cvtepu8_epi16(_mm256_loadu_si256(b.cast()));
            let h = _mm512_castsi256_si512(_mm256_cvtepu8_epi16(_mm_loadu_si128(b.add(32).cast())));
            let v = _mm512_srlv_epi16(_mm512_permutexvar_epi16(dup, h), shift);
            let keys = _mm512_or_si512(
                q,
                _mm512_slli_epi16::<8>(_mm512_and_si512(v, _mm512_set1_epi16(15))),
            );
            let g = gather4(keys, IQ1_K8.0.as_ptr());
            let s16 = _mm512_castsi256_si512(_mm256_cvtepu8_epi16(_mm256_castsi256_si128(scb)));
            widen_scale(&g, s16, w);
            d * 0.125
        }
    }

    /// IQ2_XS into eight 512-bit registers (as [`zmm_iq1_m`]; the integers of
    /// [`unpack_iq2_xs`]); returns `d / 8`. Grid rows (bytes 8, 25, 43) by
    /// four gathers, the signs (7 bits of each word and their parity) as
    /// byte masks of a masked negation, then the group scales.
    ///
    /// # Safety
    /// The CPU has AVX-512 F/BW/VL, AVX2, FMA and F16C; `b` points at a whole
    /// 74-byte block.
    #[inline(always)]
    pub unsafe fn zmm_iq2_xs(b: *const u8, w: &mut [__m512i; 8]) -> f32 {
        // SAFETY: the block's 74 bytes are readable (2 at 0, 64 at 2, 8 at
        // 66); grid keys are masked to 9 bits (inside IQ2XS_GRID).
        unsafe {
            let d = f16_to_f32(b.cast::<u16>().read_unaligned());
            let qv = _mm512_loadu_si512(b.add(2).cast());
            let g = gather4(
                _mm512_and_si512(qv, _mm512_set1_epi16(511)),
                crate::iq_tables::iq2xs_grid.as_ptr(),
            );
            // Sign byte of each word: its top 7 bits and their parity on bit 7.
            let s = _mm512_srli_epi16::<9>(qv);
            let mut p = _mm512_xor_si512(s, _mm512_srli_epi16::<4>(s));
            p = _mm512_xor_si512(p, _mm512_srli_epi16::<2>(p));
            p = _mm512_xor_si512(p, _mm512_srli_epi16::<1>(p));
            let sw = _mm512_or_si512(
                s,
                _mm512_slli_epi16::<7>(_mm512_and_si512(p, _mm512_set1_epi16(1))),
            );
            let sb = _mm512_cvtepi16_epi8(sw);
            let (s0, s1) = (
                _mm256_castsi256_si128(sb),
                _mm256_extracti128_si256::<1>(sb),
            );
            let masks = [
                _mm_cvtsi128_si64(s0) as u64,
                _mm_extract_epi64::<1>(s0) as u64,
                _mm_cvtsi128_si64(s1) as u64,
                _mm_extract_epi64::<1>(s1) as u64,
            ];
            let z = _mm512_setzero_si512();
            let mut gs = g;
            for q in 0..4 {
                gs[q] = _mm512_mask_sub_epi8(g[q], _cvtu64_mask64(masks[q]), z, g[q]);
            }
            // Group 2i takes the low nibble of scale byte i, 2i+1 the high.
            let sc = _mm_loadl_epi64(b.add(66).cast());
            let m4 = _mm_set1_epi8(15);
            let nib = _mm_unpacklo_epi8(
                _mm_and_si128(sc, m4),
                _mm_and_si128(_mm_srli_epi16::<4>(sc), m4),
            );
            let odd = _mm_or_si128(_mm_add_epi8(nib, nib), _mm_set1_epi8(1));
            let s16 = _mm512_castsi256_si512(_mm256_cvtepu8_epi16(odd));
            widen_scale(&gs, s16, w);
            d * 0.125
        }
    }

    /// Q6_K into eight 512-bit registers (as [`zmm_iq1_m`]; the integers
    /// `(q - 32) · sc` of the scalar `unpack_q6_k`); returns `d`. Per half
    /// of 128 values: the 64 low-nibble bytes and 32 high-bit bytes make
    /// values `0 .. 64` (low nibbles, high bits 0-1 | 2-3) and `64 .. 128`
    /// (high nibbles, bits 4-5 | 6-7) as bytes in order, less 32.
    ///
    /// # Safety
    /// The CPU has AVX-512 F/BW/VL, AVX2, FMA and F16C; `b` points at a whole
    /// 210-byte block.
    #[inline(always)]
    pub unsafe fn zmm_q6_k(b: *const u8, w: &mut [__m512i; 8]) -> f32 {
        // SAFETY: the block's 210 bytes are readable (128 at 0, 64 at 128,
        // 16 at 192, 2 at 208).
        unsafe {
            let d = f16_to_f32(b.add(208).cast::<u16>().read_unaligned());
            let m4 = _mm512_set1_epi8(0x0f);
            let m3 = _mm512_set1_epi8(0x03);
            let m30 = _mm512_set1_epi8(0x30);
            let c32 = _mm512_set1_epi8(32);
            let mut g = [_mm512_setzero_si512(); 4];
            for n in 0..2 {
                let q = _mm512_loadu_si512(b.add(64 * n).cast());
                let h = _mm256_loadu_si256(b.add(128 + 32 * n).cast());
                let h2 =
                    _mm512_inserti64x4::<1>(_mm512_castsi256_si512(h), _mm256_srli_epi16::<2>(h));
                // 0xD8: c ? b : a bit by bit, c = 0x0f: the nibble from b, the rest from a.
                let lo = _mm512_ternarylogic_epi32::<0xD8>(
                    _mm512_slli_epi16::<4>(_mm512_and_si512(h2, m3)),
                    q,
                    m4,
                );
                let hi = _mm512_ternarylogic_epi32::<0xD8>(
                    _mm512_and_si512(h2, m30),
                    _mm512_srli_epi16::<4>(q),
                    m4,
                );
                g[2 * n] = _mm512_sub_epi8(lo, c32);
                g[2 * n + 1] = _mm512_sub_epi8(hi, c32);
            }
            let s16 =
                _mm512_castsi256_si512(_mm256_cvtepi8_epi16(_mm_loadu_si128(b.add(192).cast())));
            widen_scale(&g, s16, w);
            d
        }
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::x86::{IQ1_G8, IQ2XS_G16, IQ2XS_S16};
    use super::Unpacked;
    use crate::iq_tables::{iq1s_grid, iq2xs_grid, ksigns_iq2xs};

    fn have_avx2() -> bool {
        is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("fma")
            && is_x86_feature_detected!("f16c")
    }

    /// Scalar and SIMD unpack of one block agree bit for bit.
    fn check(blk: &[u8], scalar: fn(&[u8], &mut Unpacked), simd: unsafe fn(&[u8], &mut Unpacked)) {
        let (mut a, mut b) = (Unpacked::default(), Unpacked::default());
        // Garbage in the output: every field must be written.
        b.w = [0x5a5a; 256];
        b.s = [f32::from_bits(0x7fc0_1234); 8];
        b.m = [1.0; 8];
        scalar(blk, &mut a);
        // SAFETY: the callers check AVX2, FMA and F16C; `blk` is a whole block.
        unsafe { simd(blk, &mut b) };
        assert_eq!(a.w, b.w, "weights of block {blk:02x?}");
        assert_eq!(
            a.s.map(f32::to_bits),
            b.s.map(f32::to_bits),
            "scales of block {blk:02x?}"
        );
        assert_eq!(
            a.m.map(f32::to_bits),
            b.m.map(f32::to_bits),
            "offsets of block {blk:02x?}"
        );
    }

    #[test]
    fn tables_match_reference() {
        for (i, row) in IQ2XS_G16.0.iter().enumerate() {
            for (j, v) in row.iter().enumerate() {
                assert_eq!(*v, (iq2xs_grid[i] >> (8 * j)) as u8 as i16);
            }
        }
        for (i, row) in IQ2XS_S16.0.iter().enumerate() {
            for (j, v) in row.iter().enumerate() {
                assert_eq!(
                    *v,
                    if ksigns_iq2xs[i] & (1 << j) != 0 {
                        -1
                    } else {
                        1
                    }
                );
            }
        }
        for (i, g) in IQ1_G8.0.iter().enumerate() {
            for j in 0..8 {
                let want = 8 * ((iq1s_grid[i] >> (8 * j)) as u8 as i8) + 1;
                assert_eq!((g >> (8 * j)) as u8 as i8, want);
            }
        }
    }

    /// F16C conversion equals `half`'s for every bit pattern (NaNs included).
    #[test]
    fn f16_conversion_matches_half() {
        if !have_avx2() {
            return;
        }
        for h in 0..=u16::MAX {
            // SAFETY: AVX2, FMA and F16C checked above.
            let got = unsafe { super::x86::f16_to_f32(h) };
            assert_eq!(
                got.to_bits(),
                half::f16::from_bits(h).to_f32().to_bits(),
                "f16 {h:#06x}"
            );
        }
    }

    /// IQ2_XS: every 16-bit index word (all 512 grid rows × all 128 sign
    /// indices) in every position, every scale byte, and a spread of `d`
    /// bit patterns (infinities and NaNs included).
    #[test]
    fn iq2_xs_every_index_and_scale() {
        if !have_avx2() {
            return;
        }
        let mut blk = [0u8; 74];
        for n in 0..(65536 / 32) * 3 {
            let d = (n as u16).wrapping_mul(40503);
            blk[0..2].copy_from_slice(&d.to_le_bytes());
            for k in 0..32 {
                // Each pass covers every word; passes rotate the positions.
                let q = ((n % 2048) * 32 + (k + 11 * (n / 2048)) % 32) as u16;
                blk[2 + 2 * k..4 + 2 * k].copy_from_slice(&q.to_le_bytes());
            }
            for j in 0..8 {
                blk[66 + j] = (n * 8 + j) as u8 ^ (n >> 5) as u8;
            }
            check(&blk, crate::q16::unpack_iq2_xs, super::unpack_iq2_xs);
        }
    }

    /// IQ1_M: all 2048 grid entries with both delta signs in every position,
    /// every 3-bit scale in every position, and a spread of `d` bit patterns.
    /// The one-token IQ1_M dot equals its multi-token twin with one token
    /// bit for bit, over rows covering every grid entry with both delta
    /// signs and every scale, of several lengths, at every AVX-512 level
    /// the CPU has.
    #[test]
    fn iq1_m_fused_dot_equals_generic() {
        use crate::q16::{kernels_at, Q16Act, Q16Level};
        use crate::GgmlType;
        let mut r = 0x9e3779b97f4a7c15u64;
        let mut next = || {
            r ^= r << 13;
            r ^= r >> 7;
            r ^= r << 17;
            r
        };
        // 128 blocks: block n's entries take keys (n·32 + k) spread by 129, so
        // all 4096 (index, delta) keys appear; scales random, d moderate.
        let nb_all = 128;
        let mut data = vec![0u8; 56 * nb_all];
        for (n, blk) in data.chunks_exact_mut(56).enumerate() {
            for k in 0..32 {
                let key = ((n * 32 + k) * 129) % 4096;
                blk[k] = key as u8;
                let nib = (key >> 8) as u8;
                let sh = 4 * (k % 2);
                blk[32 + k / 2] = (blk[32 + k / 2] & !(0x0f << sh)) | (nib << sh);
            }
            // Scales random; the f16 scale's nibbles (top of each word) a
            // moderate value (0x2e66).
            let mut w = next() & 0x0fff_0fff_0fff_0fff;
            w |= (0x6u64 << 12) | (0x6u64 << 28) | (0xeu64 << 44) | (0x2u64 << 60);
            blk[48..56].copy_from_slice(&w.to_le_bytes());
        }
        let mut tested = 0;
        for lv in [Q16Level::Avx512, Q16Level::Avx512Vnni] {
            if !crate::q16::gemm::level_supported(lv) || crate::q16::level() < lv {
                continue;
            }
            let k = kernels_at(GgmlType::IQ1_M, lv).expect("iq1_m kernels");
            for nb in [1usize, 7, 8, 9, 17, 128] {
                let x: Vec<f32> = (0..nb * 256)
                    .map(|_| (next() >> 40) as f32 / 8e5 - 10.0)
                    .collect();
                let mut a = Q16Act::default();
                assert!(a.quantize(&x));
                for start in [0usize, nb_all - nb] {
                    let d = &data[56 * start..56 * (start + nb)];
                    let got = (k.dot)(d, a.view());
                    let mut want = [0f32];
                    (k.dot_n)(d, &[a.view()], &mut want);
                    assert_eq!(
                        got.to_bits(),
                        want[0].to_bits(),
                        "{lv:?} nb {nb} from {start}"
                    );
                    tested += 1;
                }
            }
        }
        if std::arch::is_x86_feature_detected!("avx512bw") {
            assert!(tested > 0);
        }
    }

    /// The AVX-512 register unpackers give exactly the scalar twins'
    /// integers and scale: IQ2_XS over every grid row with every sign index
    /// in every position and every scale nibble, IQ1_M over every (index,
    /// delta) key in every position and every scale, Q6_K over random blocks.
    #[test]
    fn register_unpackers_match_scalar() {
        if !(have_avx2()
            && std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512vl"))
        {
            return;
        }
        use std::arch::x86_64::*;
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
        unsafe fn regs(blk: &[u8], iq1: bool) -> ([i16; 256], f32) {
            // SAFETY: AVX-512 F/BW/VL, AVX2, FMA and F16C checked by the
            // caller; `blk` is a whole block of its type.
            unsafe {
                let mut w = [_mm512_setzero_si512(); 8];
                let s = if iq1 {
                    super::x86::zmm_iq1_m(blk.as_ptr(), &mut w)
                } else {
                    super::x86::zmm_iq2_xs(blk.as_ptr(), &mut w)
                };
                let mut out = [0i16; 256];
                for (i, wi) in w.iter().enumerate() {
                    _mm512_storeu_si512(out.as_mut_ptr().add(32 * i).cast(), *wi);
                }
                (out, s)
            }
        }
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
        unsafe fn regs_q6(blk: &[u8]) -> ([i16; 256], f32) {
            // SAFETY: as for `regs`.
            unsafe {
                let mut w = [_mm512_setzero_si512(); 8];
                let s = super::x86::zmm_q6_k(blk.as_ptr(), &mut w);
                let mut out = [0i16; 256];
                for (i, wi) in w.iter().enumerate() {
                    _mm512_storeu_si512(out.as_mut_ptr().add(32 * i).cast(), *wi);
                }
                (out, s)
            }
        }
        let cmp = |blk: &[u8], iq1: bool| {
            let mut u = Unpacked::default();
            if iq1 {
                crate::q16::unpack_iq1_m(blk, &mut u);
            } else {
                crate::q16::unpack_iq2_xs(blk, &mut u);
            }
            // SAFETY: the features were checked above.
            let (w, s) = unsafe { regs(blk, iq1) };
            assert_eq!(w, u.w, "weights of block {blk:02x?}");
            assert_eq!(s.to_bits(), u.s[0].to_bits(), "scale of block {blk:02x?}");
        };
        let mut r = 0x2545f4914f6cdd1du64;
        let mut next = || {
            r ^= r << 13;
            r ^= r >> 7;
            r ^= r << 17;
            r
        };
        let mut blk = [0u8; 74];
        for n in 0..(65536 / 32) * 2 {
            let d = (n as u16).wrapping_mul(40503);
            blk[0..2].copy_from_slice(&d.to_le_bytes());
            for k in 0..32 {
                let q = ((n % 2048) * 32 + (k + 11 * (n / 2048)) % 32) as u16;
                blk[2 + 2 * k..4 + 2 * k].copy_from_slice(&q.to_le_bytes());
            }
            blk[66..74].copy_from_slice(&next().to_le_bytes());
            cmp(&blk, false);
        }
        let mut blk = [0u8; 210];
        for _ in 0..4096 {
            for c in blk.chunks_mut(8) {
                let v = next().to_le_bytes();
                c.copy_from_slice(&v[..c.len()]);
            }
            let mut u = Unpacked::default();
            crate::q16::unpack_q6_k(&blk, &mut u);
            // SAFETY: the features were checked above; a whole block.
            let (w, s) = unsafe { regs_q6(&blk) };
            assert_eq!(w, u.w, "weights of Q6_K block {blk:02x?}");
            assert_eq!(s.to_bits(), u.s[0].to_bits(), "scale of Q6_K block");
        }
        let mut blk = [0u8; 56];
        for n in 0..4096 {
            crate::q16::tests::iq1m_keys(&mut blk, n);
            blk[48..56].copy_from_slice(&next().to_le_bytes());
            cmp(&blk, true);
        }
    }

    #[test]
    fn iq1_m_every_entry_delta_and_scale() {
        if !have_avx2() {
            return;
        }
        let mut blk = [0u8; 56];
        let mut r = 0x2545f4914f6cdd1du64;
        for n in 0..4096 {
            crate::q16::tests::iq1m_keys(&mut blk, n);
            r ^= r << 13;
            r ^= r >> 7;
            r ^= r << 17;
            blk[48..56].copy_from_slice(&r.to_le_bytes());
            check(&blk, crate::q16::unpack_iq1_m, super::unpack_iq1_m);
        }
        // Every scale value in every position.
        for s in 0..8u64 {
            let mut w = 0u64;
            for m in 0..16 {
                w |= ((s + m) % 8) << (3 * (m % 4) + 16 * (m / 4));
            }
            blk[48..56].copy_from_slice(&(w | 0x3c00_0000_0000_0000).to_le_bytes());
            check(&blk, crate::q16::unpack_iq1_m, super::unpack_iq1_m);
        }
    }
}
