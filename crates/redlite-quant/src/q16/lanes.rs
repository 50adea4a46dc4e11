//! The lanes layout of Q4_K and Q5_K: a load-time repacking of each block
//! for the one-token (decode) integer kernels at the AVX2 level.
//!
//! The file stays llama.cpp's; a repacked copy lives in memory. Each
//! 256-value block keeps its size and its header (the f16 scales and the
//! 12 bytes of 6-bit sub-block scales and minima); only the 4-bit quants
//! (and Q5_K's fifth bits) are permuted. Register `r` (0..8) of a block,
//! byte `i` (0..32), holds value `4r + i % 4` of sub-block `i / 4`
//! ([`lane_src`]): the quants of chunk `j` (32 bytes) are registers `2j`
//! (low nibbles) and `2j + 1` (high nibbles), and Q5_K's `qh` byte `i`
//! holds the fifth bit of register `r`'s byte `i` at bit `r`.
//!
//! Why: against 16-bit activations split into two signed bytes (`q = 255·h
//! + l`), a block costs 16 `vpmaddubsw` whatever the layout; in the file's
//! layout every register holds one sub-block, so each product needs its
//! own `vpmaddwd` by that sub-block's scale before products of different
//! sub-blocks may be summed (16 more multiplies a block). In the lanes
//! layout every 16-bit lane of a product belongs to one sub-block, the
//! same for every register, so the eight products of a block are summed
//! as 16-bit integers (they cannot overflow: `8 · 2 · 15 · 127 < 2^15`;
//! Q5_K sums its `l` products in two halves) and two or three `vpmaddwd`
//! apply the scales. The activations are permuted the same way once per
//! token ([`super::Q16Act::ht`], `lt`).
//!
//! Every weight integer and every f32 step is that of a fixed formula
//! (per sub-block `s`: `z_s = sc_s · Σ q·h`, likewise with `l`, then
//! `255·z_h + z_l` in f32, the block scale, the minima), so the results
//! are deterministic and equal to the scalar twin [`dot_scalar`] bit for
//! bit; against the file's layout the kernels differ only in the order of
//! the f32 additions.

use super::{Q16Kernels, Q16Level, Q16Ref, Unpacked, QK};
use crate::GgmlType;

/// The plain (file) position, in `0..256`, of lanes-layout weight `(r, i)`.
pub const fn lane_src(r: usize, i: usize) -> usize {
    32 * (i / 4) + 4 * r + i % 4
}

/// [`lane_src`] for the 256 positions `32r + i` of a block.
pub fn src_table() -> &'static [u8; QK] {
    static T: [u8; QK] = {
        let mut t = [0u8; QK];
        let mut k = 0;
        while k < QK {
            t[k] = lane_src(k / 32, k % 32) as u8;
            k += 1;
        }
        t
    };
    &T
}

/// Bytes of a block and whether the type has a fifth bit, for the two
/// types with a lanes layout.
pub fn layout(ty: GgmlType) -> Option<(usize, bool)> {
    match ty {
        GgmlType::Q4_K => Some((144, false)),
        GgmlType::Q5_K => Some((176, true)),
        _ => None,
    }
}

/// The 4- or 5-bit quant of plain value `e` of a block.
fn plain_q(five: bool, b: &[u8], e: usize) -> u8 {
    let (sb, l) = (e / 32, e % 32);
    let qs = if five { &b[48..176] } else { &b[16..144] };
    let lo = (qs[32 * (sb / 2) + l] >> (4 * (sb % 2))) & 0x0F;
    if five {
        lo | (((b[16 + l] >> sb) & 1) << 4)
    } else {
        lo
    }
}

/// Repack one block from the file's layout into the lanes layout.
pub fn repack_block(five: bool, src: &[u8], dst: &mut [u8]) {
    let bytes = if five { 176 } else { 144 };
    let (src, dst) = (&src[..bytes], &mut dst[..bytes]);
    dst[..16].copy_from_slice(&src[..16]);
    dst[16..].fill(0);
    let qs0 = if five { 48 } else { 16 };
    for r in 0..8 {
        for i in 0..32 {
            let q = plain_q(five, src, lane_src(r, i));
            dst[qs0 + 32 * (r / 2) + i] |= (q & 0x0F) << (4 * (r % 2));
            if five {
                dst[16 + i] |= ((q >> 4) & 1) << r;
            }
        }
    }
}

/// The inverse of [`repack_block`].
pub fn unrepack_block(five: bool, src: &[u8], dst: &mut [u8]) {
    let bytes = if five { 176 } else { 144 };
    let (src, dst) = (&src[..bytes], &mut dst[..bytes]);
    dst[..16].copy_from_slice(&src[..16]);
    dst[16..].fill(0);
    let qs0 = if five { 48 } else { 16 };
    for r in 0..8 {
        for i in 0..32 {
            let mut q = (src[qs0 + 32 * (r / 2) + i] >> (4 * (r % 2))) & 0x0F;
            if five {
                q |= ((src[16 + i] >> r) & 1) << 4;
            }
            let e = lane_src(r, i);
            let (sb, l) = (e / 32, e % 32);
            dst[qs0 + 32 * (sb / 2) + l] |= (q & 0x0F) << (4 * (sb % 2));
            if five {
                dst[16 + l] |= ((q >> 4) & 1) << sb;
            }
        }
    }
}

/// Repack whole blocks of `ty` (`src.len() == dst.len()`, a multiple of
/// the block size), with AVX2 where the CPU has it (the same bytes).
/// Returns `false`, writing nothing, for another type or a size that is
/// not whole blocks.
pub fn repack(ty: GgmlType, src: &[u8], dst: &mut [u8]) -> bool {
    let Some((bytes, five)) = layout(ty) else {
        return false;
    };
    if src.len() != dst.len() || !src.len().is_multiple_of(bytes) {
        return false;
    }
    #[cfg(target_arch = "x86_64")]
    if super::level() >= Q16Level::Avx2 {
        for (s, d) in src.chunks_exact(bytes).zip(dst.chunks_exact_mut(bytes)) {
            // SAFETY: the level says AVX2, FMA and F16C; whole blocks.
            unsafe {
                if five {
                    super::dec_avx2::repack_block::<true>(s, d)
                } else {
                    super::dec_avx2::repack_block::<false>(s, d)
                }
            }
        }
        return true;
    }
    for (s, d) in src.chunks_exact(bytes).zip(dst.chunks_exact_mut(bytes)) {
        repack_block(five, s, d);
    }
    true
}

/// A block in the file's layout from lanes-layout bytes.
fn plain_of<const FIVE: bool>(blk: &[u8]) -> [u8; 176] {
    let mut p = [0u8; 176];
    unrepack_block(FIVE, blk, &mut p);
    p
}

/// The scalar unpacker of the lanes layout: the block put back in the
/// file's layout, then the type's scalar unpacker (so the same integers).
pub fn unpack_scalar<const FIVE: bool>(blk: &[u8], u: &mut Unpacked) {
    let p = plain_of::<FIVE>(blk);
    if FIVE {
        super::unpack_q5_k(&p, u)
    } else {
        super::unpack_q4_k(&p, u)
    }
}

/// The scalar dequantizer of lanes-layout rows (the f32 path).
pub fn dequant<const FIVE: bool>(data: &[u8], out: &mut [f32]) {
    let bytes = if FIVE { 176 } else { 144 };
    let k = if FIVE {
        &crate::kquants::Q5_K
    } else {
        &crate::kquants::Q4_K
    };
    for (blk, o) in data.chunks_exact(bytes).zip(out.chunks_exact_mut(QK)) {
        let p = plain_of::<FIVE>(blk);
        (k.dequant)(&p[..bytes], o);
    }
}

/// The f32 dot of lanes-layout rows (the f32 path: each block put back
/// in the file's layout and dotted with the type's fastest f32 kernel).
pub fn dot_f32<const FIVE: bool>(data: &[u8], x: &[f32]) -> f32 {
    let bytes = if FIVE { 176 } else { 144 };
    let ty = if FIVE { GgmlType::Q5_K } else { GgmlType::Q4_K };
    let Some(f) = crate::dot_fn(ty) else {
        return f32::NAN;
    };
    let mut acc = 0f32;
    for (blk, xb) in data.chunks_exact(bytes).zip(x.chunks_exact(QK)) {
        let p = plain_of::<FIVE>(blk);
        acc += f(&p[..bytes], xb);
    }
    acc
}

/// The scalar twin of the AVX2 lanes kernels: the same integers per
/// sub-block and the same f32 operations in the same order (eight lanes,
/// one per sub-block, summed at the end as `hsum256` does), so the same
/// bits.
pub fn dot_scalar<const FIVE: bool>(data: &[u8], x: Q16Ref<'_>) -> f32 {
    let bytes = if FIVE { 176 } else { 144 };
    let mut acc = [0f32; 8];
    let mut accm = [0f32; 8];
    for (b, blk) in data.chunks_exact(bytes).enumerate() {
        let p = plain_of::<FIVE>(blk);
        let (sc, m) = crate::kquants::scale_min_k4(&p[4..16]);
        let d = half::f16::from_le_bytes([p[0], p[1]]).to_f32();
        let dmin = half::f16::from_le_bytes([p[2], p[3]]).to_f32();
        let dx = x.d[b];
        for s in 0..8 {
            let (mut zh, mut zl) = (0i32, 0i32);
            for v in 0..32 {
                let e = 32 * s + v;
                let q = plain_q(FIVE, &p, e) as i32;
                zh += q * x.h[b * QK + e] as i32;
                zl += q * x.l[b * QK + e] as i32;
            }
            let (zh, zl) = (zh * sc[s] as i32, zl * sc[s] as i32);
            let is = (zh as f32).mul_add(255.0, zl as f32);
            acc[s] = is.mul_add(d * dx, acc[s]);
            let mv = m[s] as f32 * (dmin * dx);
            accm[s] = mv.mul_add(x.sums[b * 8 + s] as f32, accm[s]);
        }
    }
    let v: [f32; 8] = std::array::from_fn(|i| acc[i] - accm[i]);
    let s4: [f32; 4] = std::array::from_fn(|i| v[i] + v[i + 4]);
    let (a, c) = (s4[0] + s4[2], s4[1] + s4[3]);
    a + c
}

/// The integer kernels of `ty`'s lanes layout at this CPU's level, where
/// it has them (the AVX2 level; `None` elsewhere, and for other types:
/// nothing is repacked then). `dot_n` is `dot` per token, so a batch
/// equals decoding alone bit for bit.
pub fn kernels(ty: GgmlType) -> Option<Q16Kernels> {
    kernels_at(ty, super::level())
}

/// [`kernels`] at `level`.
pub fn kernels_at(ty: GgmlType, level: Q16Level) -> Option<Q16Kernels> {
    if level != Q16Level::Avx2 {
        return None;
    }
    #[cfg(target_arch = "x86_64")]
    {
        use super::dec_avx2 as k;
        use super::{check_sizes, in_groups};
        macro_rules! kset {
            ($five:expr, $bytes:expr) => {{
                fn dot(data: &[u8], x: Q16Ref<'_>) -> f32 {
                    check_sizes(data, $bytes, x);
                    check_lanes(data, $bytes, x);
                    // SAFETY: chosen only at the AVX2 level (AVX2, FMA and
                    // F16C); sizes and planes checked.
                    unsafe { k::dot_lanes::<$five>(data, x) }
                }
                fn dot_n(data: &[u8], xs: &[Q16Ref<'_>], out: &mut [f32]) {
                    in_groups(data, $bytes, xs, out, |d, x, o| {
                        for (xt, ot) in x.iter().zip(o.iter_mut()) {
                            *ot = dot(d, *xt);
                        }
                    })
                }
                fn unpack(blk: &[u8], u: &mut Unpacked) {
                    assert!(blk.len() >= $bytes, "q16 lanes unpack: short block");
                    // SAFETY: AVX2 level (see `dot`); the block's bytes checked.
                    unsafe { k::unpack_lanes::<$five>(blk, u) }
                }
                Q16Kernels {
                    ty,
                    bytes: $bytes,
                    uniform: true,
                    has_min: true,
                    unpack_scalar: unpack_scalar::<$five>,
                    unpack,
                    dot_scalar: dot_scalar::<$five>,
                    dot,
                    dot_n,
                }
            }};
        }
        return match ty {
            GgmlType::Q4_K => Some(kset!(false, 144)),
            GgmlType::Q5_K => Some(kset!(true, 176)),
            _ => None,
        };
    }
    #[allow(unreachable_code)]
    None
}

/// The permuted planes the lanes kernels read are there.
#[inline(always)]
fn check_lanes(data: &[u8], bytes: usize, x: Q16Ref<'_>) {
    let n = data.len() / bytes * QK;
    assert!(
        x.ht.len() >= n && x.lt.len() >= n,
        "q16 lanes dot: {} weight values against {} permuted planes",
        n,
        x.ht.len().min(x.lt.len())
    );
}

#[cfg(test)]
mod tests {
    use super::super::tests::{random_blocks, random_x};
    use super::super::{kernels_at as plain_at, Q16Act, Q16Level, Unpacked, QK};
    use super::*;

    fn types() -> [(GgmlType, bool, usize); 2] {
        [(GgmlType::Q4_K, false, 144), (GgmlType::Q5_K, true, 176)]
    }

    #[test]
    fn src_table_is_a_permutation() {
        let mut seen = [false; QK];
        for &s in src_table() {
            assert!(!seen[s as usize]);
            seen[s as usize] = true;
        }
    }

    /// Repacking and putting back give the block's bytes again, and the
    /// scalar unpacker of the lanes layout gives the plain unpacker's
    /// integers and scales.
    #[test]
    fn repack_round_trips_and_unpacks_the_same() {
        for (i, (ty, five, bytes)) in types().into_iter().enumerate() {
            let data = random_blocks(ty, 16, 500 + i as u64);
            let mut lanes = vec![0u8; data.len()];
            assert!(repack(ty, &data, &mut lanes));
            assert!(!repack(GgmlType::Q6_K, &data, &mut lanes.clone()));
            let mut back = vec![0u8; bytes];
            let (mut a, mut b) = (Unpacked::default(), Unpacked::default());
            for (blk, lb) in data.chunks_exact(bytes).zip(lanes.chunks_exact(bytes)) {
                unrepack_block(five, lb, &mut back);
                assert_eq!(&back[..], blk, "{ty}: round trip");
                (plain_at(ty, Q16Level::Scalar).expect("k").unpack_scalar)(blk, &mut a);
                if five {
                    unpack_scalar::<true>(lb, &mut b);
                } else {
                    unpack_scalar::<false>(lb, &mut b);
                }
                assert_eq!(a.w, b.w, "{ty}: weights");
                assert_eq!(a.s.map(f32::to_bits), b.s.map(f32::to_bits));
                assert_eq!(a.m.map(f32::to_bits), b.m.map(f32::to_bits));
            }
        }
    }

    /// The AVX2 kernels (one row, two rows, several tokens, the unpacker)
    /// equal the scalar twin bit for bit; the twin is within rounding of
    /// the plain layout's scalar dot; the f32 path equals the plain one's.
    #[test]
    #[allow(clippy::needless_range_loop)]
    fn lanes_kernels_match_scalar_twin_and_plain() {
        for (i, (ty, five, bytes)) in types().into_iter().enumerate() {
            for nb in [1usize, 2, 3, 8, 9] {
                let data = random_blocks(ty, 2 * nb, 700 + 31 * i as u64 + nb as u64);
                let mut lanes = vec![0u8; data.len()];
                assert!(repack(ty, &data, &mut lanes));
                let x = random_x(3 * nb * QK, 9 + nb as u64);
                let mut a = Q16Act::default();
                assert!(a.quantize(&x));
                let xs: Vec<_> = (0..3).map(|t| a.row(t, nb * QK)).collect();
                let la = &lanes[..nb * bytes];
                let twin = |d: &[u8], t: usize| {
                    if five {
                        dot_scalar::<true>(d, xs[t])
                    } else {
                        dot_scalar::<false>(d, xs[t])
                    }
                };
                let plain = plain_at(ty, Q16Level::Scalar).expect("k").dot_scalar;
                let wq = crate::dequantize_to_vec(ty, &data[..nb * bytes]).expect("deq");
                for t in 0..3 {
                    let (w, p) = (twin(la, t), plain(&data[..nb * bytes], xs[t]));
                    let mag: f32 = wq
                        .iter()
                        .zip(&x[t * nb * QK..(t + 1) * nb * QK])
                        .map(|(a, b)| (a * b).abs())
                        .sum();
                    assert!(
                        (w - p).abs() <= 1e-5 * mag + 1e-30,
                        "{ty} {nb}: twin {w} vs plain {p}"
                    );
                }
                let fa = if five {
                    dot_f32::<true>
                } else {
                    dot_f32::<false>
                };
                let pf = crate::dot_fn(ty).expect("dot");
                let xf = &x[..nb * QK];
                let (g, w) = (fa(la, xf), pf(&data[..nb * bytes], xf));
                assert!(
                    (g - w).abs() <= 1e-4 * w.abs().max(1e-3),
                    "{ty}: f32 {g} vs {w}"
                );
                let mut deq = vec![0f32; nb * QK];
                if five {
                    dequant::<true>(la, &mut deq);
                } else {
                    dequant::<false>(la, &mut deq);
                }
                let want = crate::dequantize_to_vec(ty, &data[..nb * bytes]).expect("deq");
                assert_eq!(deq, want, "{ty}: dequantized");
                let Some(k) = kernels(ty) else {
                    continue;
                };
                for t in 0..3 {
                    assert_eq!(
                        (k.dot)(la, xs[t]).to_bits(),
                        twin(la, t).to_bits(),
                        "{ty} dot"
                    );
                }
                let mut out = vec![0f32; 3];
                (k.dot_n)(la, &xs, &mut out);
                for t in 0..3 {
                    assert_eq!(out[t].to_bits(), twin(la, t).to_bits(), "{ty} dot_n");
                }
                let (mut u1, mut u2) = (Unpacked::default(), Unpacked::default());
                for blk in la.chunks_exact(bytes) {
                    (k.unpack)(blk, &mut u1);
                    (k.unpack_scalar)(blk, &mut u2);
                    assert_eq!(u1.w, u2.w, "{ty}: fast unpack");
                    assert_eq!(u1.s.map(f32::to_bits), u2.s.map(f32::to_bits));
                    assert_eq!(u1.m.map(f32::to_bits), u2.m.map(f32::to_bits));
                }
            }
        }
    }
}
