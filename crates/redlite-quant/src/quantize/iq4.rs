//! IQ4_NL and IQ4_XS quantizers: a port of ggml's `quantize_row_iq4_nl_impl`
//! as `quantize_iq4_nl` / `quantize_iq4_xs` call it (`ntry` 7, with or
//! without importance weights).
//!
//! Layouts: IQ4_NL `d qs[16]` (32 values); IQ4_XS `d scales_h:u16
//! scales_l[4] qs[128]` (256 values, eight 6-bit sub-block scales).

// Index loops mirror the C they port, statement for statement.
#![allow(clippy::needless_range_loop)]

use super::{f16_bytes, nearest_int, GROUP_MAX_EPS};
use crate::iq4::KVALUES_IQ4NL;

/// `best_index_int8`: the index of the value nearest to `x` (ties to the lower).
pub(super) fn best_index_int8(val: &[i8], x: f32) -> u8 {
    let n = val.len();
    if x <= val[0] as f32 {
        return 0;
    }
    if x >= val[n - 1] as f32 {
        return (n - 1) as u8;
    }
    let (mut ml, mut mu) = (0usize, n - 1);
    while mu - ml > 1 {
        let mav = (ml + mu) / 2;
        if x < val[mav] as f32 {
            mu = mav;
        } else {
            ml = mav;
        }
    }
    if x - (val[mu - 1] as f32) < (val[mu] as f32) - x {
        (mu - 1) as u8
    } else {
        mu as u8
    }
}

/// One super-block of `sbs` values in sub-blocks of 32. Writes `d`, the
/// packed quants and (for IQ4_XS) the sub-block scales.
fn iq4_impl(
    sbs: usize,
    x: &[f32],
    d_out: &mut [u8],
    q4: &mut [u8],
    mut scales_hl: Option<(&mut [u8], &mut [u8])>,
    qw: Option<&[f32]>,
    ntry: i32,
) {
    let values = &KVALUES_IQ4NL;
    let bs = 32usize;
    let mut sigma2 = 0.0f32;
    for j in 0..sbs {
        sigma2 += x[j] * x[j];
    }
    sigma2 *= 2.0 / sbs as f32;
    q4[..sbs / 2].fill(0);
    d_out.copy_from_slice(&f16_bytes(0.0));
    let mut l = [0u8; 256];
    let mut scales = [0f32; 8];
    let mut weight = [0f32; 32];
    let mut max_scale = 0.0f32;
    let mut amax_scale = 0.0f32;
    let v0 = values[0] as f32;
    for ib in 0..sbs / bs {
        let xb = &x[ib * bs..ib * bs + bs];
        match qw {
            Some(qw) => {
                for j in 0..bs {
                    weight[j] = qw[ib * bs + j] * (sigma2 + xb[j] * xb[j]).sqrt();
                }
            }
            None => {
                for j in 0..bs {
                    weight[j] = xb[j] * xb[j];
                }
            }
        }
        let mut amax = 0.0f32;
        let mut max = 0.0f32;
        for &v in xb {
            let ax = v.abs();
            if ax > amax {
                amax = ax;
                max = v;
            }
        }
        if amax < GROUP_MAX_EPS {
            scales[ib] = 0.0;
            continue;
        }
        let mut d = if ntry > 0 { -max / v0 } else { max / v0 };
        let mut id = 1.0 / d;
        let mut sumqx = 0.0f32;
        let mut sumq2 = 0.0f32;
        for j in 0..bs {
            let al = id * xb[j];
            let li = best_index_int8(values, al);
            l[ib * bs + j] = li;
            let q = values[li as usize] as f32;
            let w = weight[j];
            sumqx += w * q * xb[j];
            sumq2 += w * q * q;
        }
        d = if sumq2 > 0.0 { sumqx / sumq2 } else { 0.0 };
        let mut best = d * sumqx;
        for itry in -ntry..=ntry {
            id = (itry + values[0] as i32) as f32 / max;
            sumqx = 0.0;
            sumq2 = 0.0;
            for j in 0..bs {
                let al = id * xb[j];
                let li = best_index_int8(values, al);
                let q = values[li as usize] as f32;
                let w = weight[j];
                sumqx += w * q * xb[j];
                sumq2 += w * q * q;
            }
            if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
                d = sumqx / sumq2;
                best = d * sumqx;
            }
        }
        scales[ib] = d;
        let abs_d = d.abs();
        if abs_d > amax_scale {
            amax_scale = abs_d;
            max_scale = d;
        }
    }
    if sbs / bs > 1 {
        let Some((sh, sl)) = scales_hl.as_mut() else {
            return;
        };
        sh.fill(0);
        let mut scales_h = 0u16;
        let d = -max_scale / 32.0;
        d_out.copy_from_slice(&f16_bytes(d));
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        for ib in 0..sbs / bs {
            let mut li = nearest_int(id * scales[ib]).clamp(-32, 31);
            let dl = d * li as f32;
            let idl = if dl != 0.0 { 1.0 / dl } else { 0.0 };
            for j in 0..bs {
                l[ib * bs + j] = best_index_int8(values, idl * x[ib * bs + j]);
            }
            li += 32;
            let l_l = (li & 0xf) as u8;
            let l_h = (li >> 4) as u16;
            if ib % 2 == 0 {
                sl[ib / 2] = l_l;
            } else {
                sl[ib / 2] |= l_l << 4;
            }
            scales_h |= l_h << (2 * (ib % 8));
        }
        sh.copy_from_slice(&scales_h.to_le_bytes());
    } else {
        d_out.copy_from_slice(&f16_bytes(scales[0]));
        if ntry > 0 {
            let id = if scales[0] != 0.0 {
                1.0 / scales[0]
            } else {
                0.0
            };
            for j in 0..sbs {
                l[j] = best_index_int8(values, id * x[j]);
            }
        }
    }
    for i in 0..sbs / 32 {
        for j in 0..16 {
            q4[16 * i + j] = l[32 * i + j] | (l[32 * i + 16 + j] << 4);
        }
    }
}

/// `quantize_iq4_nl` for one row (`qw`: the row's importance weights).
pub(super) fn iq4_nl_row(x: &[f32], y: &mut [u8], qw: Option<&[f32]>) {
    for (ib, (xb, yb)) in x.chunks_exact(32).zip(y.chunks_exact_mut(18)).enumerate() {
        let (d, qs) = yb.split_at_mut(2);
        iq4_impl(
            32,
            xb,
            d,
            qs,
            None,
            qw.map(|w| &w[32 * ib..32 * ib + 32]),
            7,
        );
    }
}

/// `quantize_iq4_xs` for one row.
pub(super) fn iq4_xs_row(x: &[f32], y: &mut [u8], qw: Option<&[f32]>) {
    for (ib, (xb, yb)) in x.chunks_exact(256).zip(y.chunks_exact_mut(136)).enumerate() {
        let (d, rest) = yb.split_at_mut(2);
        let (sh, rest) = rest.split_at_mut(2);
        let (sl, qs) = rest.split_at_mut(4);
        iq4_impl(
            256,
            xb,
            d,
            qs,
            Some((sh, sl)),
            qw.map(|w| &w[256 * ib..256 * ib + 256]),
            7,
        );
    }
}
