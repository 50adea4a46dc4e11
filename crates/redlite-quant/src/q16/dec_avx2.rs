//! AVX2 kernels of the lanes layout of Q4_K / Q5_K ([`super::lanes`]): the
//! one-token dot ([`dot_lanes`]) and the unpacker the matrix-matrix tiles
//! use on repacked weights ([`unpack_lanes`]). Each equals the scalar twin
//! in `lanes.rs` bit for bit (tested). (A two-row variant sharing each
//! activation load between the rows measured no faster.)

use super::x86::prefetch_ahead;
use super::{Q16Ref, Unpacked, QK};
use std::arch::x86_64::*;

/// The eight 6-bit scales and the eight 6-bit minima of a Q4_K / Q5_K
/// block (its bytes 4..16) as the bytes of two `u64` (byte `j`: sub-block
/// `j`), computed in general registers; equal to
/// [`crate::kquants::scale_min_k4`] (tested).
#[inline(always)]
pub(crate) unsafe fn scale_min_u64(p: *const u8) -> (u64, u64) {
    let a = p.cast::<u32>().read_unaligned();
    let b = p.add(4).cast::<u32>().read_unaligned();
    let c = p.add(8).cast::<u32>().read_unaligned();
    let sc_lo = a & 0x3F3F_3F3F;
    let m_lo = b & 0x3F3F_3F3F;
    let sc_hi = (c & 0x0F0F_0F0F) | ((a >> 2) & 0x3030_3030);
    let m_hi = ((c >> 4) & 0x0F0F_0F0F) | ((b >> 2) & 0x3030_3030);
    (
        sc_lo as u64 | (sc_hi as u64) << 32,
        m_lo as u64 | (m_hi as u64) << 32,
    )
}

/// The quants of sub-blocks `2j` (`.0`) and `2j + 1` (`.1`) of a Q4_K /
/// Q5_K block at `p`, one byte each (Q5_K: the fifth bit, bit `k` of `qh`
/// for sub-block `k`, moved to bit 4 by a 16-bit shift that keeps it
/// inside its byte, then masked).
#[inline(always)]
unsafe fn kq_pair<const FIVE: bool>(p: *const u8, qh: __m256i, j: usize) -> (__m256i, __m256i) {
    let m4 = _mm256_set1_epi8(0x0F);
    let qs = p.add(if FIVE { 48 } else { 16 });
    let v = _mm256_loadu_si256(qs.add(32 * j) as *const __m256i);
    let mut lo = _mm256_and_si256(v, m4);
    let mut hi = _mm256_and_si256(_mm256_srli_epi16::<4>(v), m4);
    if FIVE {
        lo = _mm256_or_si256(lo, fifth_bit(qh, 2 * j));
        hi = _mm256_or_si256(hi, fifth_bit(qh, 2 * j + 1));
    }
    (lo, hi)
}

/// Bit `k` of every byte of `qh` at bit 4 (others zero). A 16-bit shift
/// by at most 4 left or 3 right brings bit 4 of each byte from the same
/// byte, so the mask leaves exactly that bit.
#[inline(always)]
unsafe fn fifth_bit(qh: __m256i, k: usize) -> __m256i {
    let m = _mm256_set1_epi8(0x10);
    let v = match k {
        0 => _mm256_slli_epi16::<4>(qh),
        1 => _mm256_slli_epi16::<3>(qh),
        2 => _mm256_slli_epi16::<2>(qh),
        3 => _mm256_slli_epi16::<1>(qh),
        4 => qh,
        5 => _mm256_srli_epi16::<1>(qh),
        6 => _mm256_srli_epi16::<2>(qh),
        _ => _mm256_srli_epi16::<3>(qh),
    };
    _mm256_and_si256(v, m)
}

/// The accumulators of one row of [`dot_lanes`].
#[derive(Clone, Copy)]
struct KRow {
    acc: __m256,
    accm: __m256,
}

/// The f32 steps of one block (as the file layout's byte kernel,
/// `x86::kb_apply`, takes them; lane `s` here is sub-block `s`): `is =
/// 255·zh + zl`, the block's scale `d·dx`, the minima `dmin·dx·m_s`
/// against the activations' sums.
#[inline(always)]
unsafe fn k_tail(
    r: &mut KRow,
    ah: __m256i,
    al: __m256i,
    p: *const u8,
    m: u64,
    dx: f32,
    sums: __m256,
) {
    let d = crate::util::f16_ptr(p);
    let dmin = crate::util::f16_ptr(p.add(2));
    let is = _mm256_fmadd_ps(
        _mm256_cvtepi32_ps(ah),
        _mm256_set1_ps(255.0),
        _mm256_cvtepi32_ps(al),
    );
    r.acc = _mm256_fmadd_ps(is, _mm256_set1_ps(d * dx), r.acc);
    let mv = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(m as i64)));
    r.accm = _mm256_fmadd_ps(_mm256_mul_ps(mv, _mm256_set1_ps(dmin * dx)), sums, r.accm);
}

/// The integer lanes of one lanes-layout block of one row against the
/// token's permuted planes at `ht` / `lt`: eight `vpmaddubsw` per plane
/// summed as 16-bit integers (lane `k` belongs to sub-block `k / 2`; Q5_K
/// sums `l` in two halves), then `vpmaddwd` by the sub-block scales:
/// 32-bit lane `s` holds `sc_s · Σ q·h` (`zh`) and `sc_s · Σ q·l` (`zl`).
#[inline(always)]
unsafe fn lanes_z<const FIVE: bool>(
    q: &[__m256i; 8],
    ht: *const i8,
    lt: *const i8,
    sc: u64,
) -> (__m256i, __m256i) {
    let mut h16 = _mm256_setzero_si256();
    let mut la = _mm256_setzero_si256();
    let mut lb = _mm256_setzero_si256();
    for (r, &qr) in q.iter().enumerate() {
        let h = _mm256_loadu_si256(ht.add(32 * r) as *const __m256i);
        let l = _mm256_loadu_si256(lt.add(32 * r) as *const __m256i);
        h16 = _mm256_add_epi16(h16, _mm256_maddubs_epi16(qr, h));
        if FIVE && r >= 4 {
            lb = _mm256_add_epi16(lb, _mm256_maddubs_epi16(qr, l));
        } else {
            la = _mm256_add_epi16(la, _mm256_maddubs_epi16(qr, l));
        }
    }
    let s8 = _mm_cvtsi64_si128(sc as i64);
    let sv = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(s8, s8));
    let zh = _mm256_madd_epi16(h16, sv);
    let mut zl = _mm256_madd_epi16(la, sv);
    if FIVE {
        zl = _mm256_add_epi32(zl, _mm256_madd_epi16(lb, sv));
    }
    (zh, zl)
}

/// The eight quant registers of a lanes-layout block at `p`.
#[inline(always)]
unsafe fn lanes_q<const FIVE: bool>(p: *const u8) -> [__m256i; 8] {
    let qh = if FIVE {
        _mm256_loadu_si256(p.add(16) as *const __m256i)
    } else {
        _mm256_setzero_si256()
    };
    let mut q = [_mm256_setzero_si256(); 8];
    for j in 0..4 {
        let (a, b) = kq_pair::<FIVE>(p, qh, j);
        q[2 * j] = a;
        q[2 * j + 1] = b;
    }
    q
}

/// One lanes-layout Q4_K / Q5_K row against one token (see `lanes.rs`).
///
/// # Safety
/// AVX2, FMA and F16C; `data` whole blocks of the type; `x` at least as
/// many blocks, with its `ht` / `lt` planes.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_lanes<const FIVE: bool>(data: &[u8], x: Q16Ref<'_>) -> f32 {
    let bytes = if FIVE { 176 } else { 144 };
    let nb = data.len() / bytes;
    let mut r = KRow {
        acc: _mm256_setzero_ps(),
        accm: _mm256_setzero_ps(),
    };
    for blk in 0..nb {
        prefetch_ahead(data, blk * bytes, bytes);
        let p = data.as_ptr().add(blk * bytes);
        let (sc, m) = scale_min_u64(p.add(4));
        let q = lanes_q::<FIVE>(p);
        let (zh, zl) = lanes_z::<FIVE>(
            &q,
            x.ht.as_ptr().add(blk * QK),
            x.lt.as_ptr().add(blk * QK),
            sc,
        );
        let dx = *x.d.get_unchecked(blk);
        let sums = _mm256_cvtepi32_ps(_mm256_loadu_si256(
            x.sums.as_ptr().add(8 * blk) as *const __m256i
        ));
        k_tail(&mut r, zh, zl, p, m, dx, sums);
    }
    crate::util::hsum256(_mm256_sub_ps(r.acc, r.accm))
}

/// The 8×8 transpose of 32-bit words: word `r` of output `s` is word `s`
/// of input `r` (the lanes layout's registers to sub-blocks and back).
#[inline(always)]
unsafe fn transpose8(q: &[__m256i; 8]) -> [__m256i; 8] {
    let t0 = _mm256_unpacklo_epi32(q[0], q[1]);
    let t1 = _mm256_unpackhi_epi32(q[0], q[1]);
    let t2 = _mm256_unpacklo_epi32(q[2], q[3]);
    let t3 = _mm256_unpackhi_epi32(q[2], q[3]);
    let t4 = _mm256_unpacklo_epi32(q[4], q[5]);
    let t5 = _mm256_unpackhi_epi32(q[4], q[5]);
    let t6 = _mm256_unpacklo_epi32(q[6], q[7]);
    let t7 = _mm256_unpackhi_epi32(q[6], q[7]);
    let u0 = _mm256_unpacklo_epi64(t0, t2);
    let u1 = _mm256_unpackhi_epi64(t0, t2);
    let u2 = _mm256_unpacklo_epi64(t1, t3);
    let u3 = _mm256_unpackhi_epi64(t1, t3);
    let u4 = _mm256_unpacklo_epi64(t4, t6);
    let u5 = _mm256_unpackhi_epi64(t4, t6);
    let u6 = _mm256_unpacklo_epi64(t5, t7);
    let u7 = _mm256_unpackhi_epi64(t5, t7);
    [
        _mm256_permute2x128_si256::<0x20>(u0, u4),
        _mm256_permute2x128_si256::<0x20>(u1, u5),
        _mm256_permute2x128_si256::<0x20>(u2, u6),
        _mm256_permute2x128_si256::<0x20>(u3, u7),
        _mm256_permute2x128_si256::<0x31>(u0, u4),
        _mm256_permute2x128_si256::<0x31>(u1, u5),
        _mm256_permute2x128_si256::<0x31>(u2, u6),
        _mm256_permute2x128_si256::<0x31>(u3, u7),
    ]
}

/// [`super::lanes::repack_block`] with AVX2 (the same bytes): the file
/// layout's eight sub-block registers (the same loads as the lanes
/// registers: both layouts keep chunk `j`'s nibbles as registers `2j`,
/// `2j + 1` and the fifth bits at bit `k` of `qh`) transposed, then
/// packed back into nibbles and bits.
///
/// # Safety
/// AVX2, FMA and F16C; `src` and `dst` hold a whole block of the type.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn repack_block<const FIVE: bool>(src: &[u8], dst: &mut [u8]) {
    let bytes = if FIVE { 176 } else { 144 };
    assert!(src.len() >= bytes && dst.len() >= bytes);
    let (p, o) = (src.as_ptr(), dst.as_mut_ptr());
    std::ptr::copy_nonoverlapping(p, o, 16);
    let r = transpose8(&lanes_q::<FIVE>(p));
    let m4 = _mm256_set1_epi8(0x0F);
    let qs = o.add(if FIVE { 48 } else { 16 });
    for j in 0..4 {
        let lo = _mm256_and_si256(r[2 * j], m4);
        let hi = _mm256_slli_epi16::<4>(_mm256_and_si256(r[2 * j + 1], m4));
        _mm256_storeu_si256(qs.add(32 * j) as *mut __m256i, _mm256_or_si256(lo, hi));
    }
    if FIVE {
        // Bit 4 of register k's byte i to bit k of qh byte i (masked
        // first, so a 16-bit shift keeps it inside its byte).
        let b4 = _mm256_set1_epi8(0x10);
        let f = |k: usize| _mm256_and_si256(r[k], b4);
        let qh = [
            _mm256_srli_epi16::<4>(f(0)),
            _mm256_srli_epi16::<3>(f(1)),
            _mm256_srli_epi16::<2>(f(2)),
            _mm256_srli_epi16::<1>(f(3)),
            f(4),
            _mm256_slli_epi16::<1>(f(5)),
            _mm256_slli_epi16::<2>(f(6)),
            _mm256_slli_epi16::<3>(f(7)),
        ]
        .iter()
        .fold(_mm256_setzero_si256(), |a, v| _mm256_or_si256(a, *v));
        _mm256_storeu_si256(o.add(16) as *mut __m256i, qh);
    }
}

/// Unpack a lanes-layout block into the file layout's [`Unpacked`] (the
/// same integers and scales as the type's unpacker): the eight quant
/// registers are transposed as an 8×8 matrix of 32-bit words (register
/// `r`'s word `s` holds values `4r..4r+4` of sub-block `s`), which gives
/// each sub-block's 32 quants in order, then widened and multiplied by
/// the sub-block's scale.
///
/// # Safety
/// AVX2, FMA and F16C; `blk` holds a whole block of the type.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn unpack_lanes<const FIVE: bool>(blk: &[u8], u: &mut Unpacked) {
    let p = blk.as_ptr();
    let (sc, m) = scale_min_u64(p.add(4));
    let q = lanes_q::<FIVE>(p);
    let cols = transpose8(&q);
    let w = u.w.as_mut_ptr();
    for (s, &c) in cols.iter().enumerate() {
        let sv = _mm256_set1_epi16(((sc >> (8 * s)) & 0xFF) as i16);
        let lo = _mm256_cvtepu8_epi16(_mm256_castsi256_si128(c));
        let hi = _mm256_cvtepu8_epi16(_mm256_extracti128_si256::<1>(c));
        _mm256_storeu_si256(w.add(32 * s) as *mut __m256i, _mm256_mullo_epi16(lo, sv));
        _mm256_storeu_si256(
            w.add(32 * s + 16) as *mut __m256i,
            _mm256_mullo_epi16(hi, sv),
        );
    }
    let d = crate::util::f16_ptr(p);
    let dmin = crate::util::f16_ptr(p.add(2));
    let mv = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(m as i64)));
    _mm256_storeu_ps(u.m.as_mut_ptr(), _mm256_mul_ps(_mm256_set1_ps(dmin), mv));
    _mm256_storeu_ps(u.s.as_mut_ptr(), _mm256_set1_ps(d));
}

#[cfg(test)]
mod tests {

    /// The AVX2 repacking writes the scalar one's bytes.
    #[test]
    fn repack_block_matches_scalar() {
        if super::super::level() < super::super::Q16Level::Avx2 {
            return;
        }
        for (ty, five, bytes) in [
            (crate::GgmlType::Q4_K, false, 144),
            (crate::GgmlType::Q5_K, true, 176),
        ] {
            let data = super::super::tests::random_blocks(ty, 64, 77);
            let (mut a, mut b) = (vec![0u8; bytes], vec![0u8; bytes]);
            for blk in data.chunks_exact(bytes) {
                super::super::lanes::repack_block(five, blk, &mut a);
                // SAFETY: AVX2 checked above; whole blocks.
                unsafe {
                    if five {
                        super::repack_block::<true>(blk, &mut b);
                    } else {
                        super::repack_block::<false>(blk, &mut b);
                    }
                }
                assert_eq!(a, b, "{ty}");
            }
        }
    }

    #[test]
    fn scale_min_u64_matches_scale_min_k4() {
        let mut r = super::super::tests::rng(3);
        for _ in 0..2000 {
            let s: Vec<u8> = (0..12).map(|_| r() as u8).collect();
            let (sc, m) = crate::kquants::scale_min_k4(&s);
            // SAFETY: 12 readable bytes.
            let (a, b) = unsafe { super::scale_min_u64(s.as_ptr()) };
            assert_eq!(a.to_le_bytes(), sc);
            assert_eq!(b.to_le_bytes(), m);
        }
    }
}
