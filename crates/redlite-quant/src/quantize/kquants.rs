//! K-quant quantizers (Q2_K … Q6_K): ports of ggml's `make_qx_quants`,
//! `make_q3_quants`, `make_qkx2_quants`, `make_qkx3_quants`, `make_qp_quants`
//! and the `quantize_row_q*_K_ref` / `quantize_row_q*_K_impl` row functions.
//!
//! Block layouts (ggml-common.h, byte offsets): Q2_K `scales[16] qs[64] d dmin`;
//! Q3_K `hmask[32] qs[64] scales[12] d`; Q4_K `d dmin scales[12] qs[128]`;
//! Q5_K `d dmin scales[12] qh[32] qs[128]`; Q6_K `ql[128] qh[64] scales[16] d`.

// Index loops mirror the C they port, statement for statement.
#![allow(clippy::needless_range_loop)]

use super::{f16_bytes, f16_round, nearest_int, GROUP_MAX_EPS};

const QK_K: usize = 256;

/// `make_qx_quants`: symmetric levels in `[-nmax, nmax)`, stored in `l` as
/// `level + nmax`; returns the scale.
pub(super) fn make_qx_quants(
    n: usize,
    nmax: i32,
    x: &[f32],
    l_out: &mut [i8],
    rmse_type: i32,
    qw: Option<&[f32]>,
) -> f32 {
    let mut max = 0.0f32;
    let mut amax = 0.0f32;
    for &v in &x[..n] {
        let ax = v.abs();
        if ax > amax {
            amax = ax;
            max = v;
        }
    }
    if amax < GROUP_MAX_EPS {
        l_out[..n].fill(0);
        return 0.0;
    }
    let nmaxf = nmax as f32;
    let mut iscale = -nmaxf / max;
    if rmse_type == 0 {
        for i in 0..n {
            let l = nearest_int(iscale * x[i]);
            l_out[i] = (nmax + l.clamp(-nmax, nmax - 1)) as i8;
        }
        return 1.0 / iscale;
    }
    let mut rmse_type = rmse_type;
    let mut return_early = false;
    if rmse_type < 0 {
        rmse_type = -rmse_type;
        return_early = true;
    }
    let weight = |i: usize| -> f32 {
        match qw {
            Some(w) => w[i],
            None => match rmse_type {
                1 => x[i] * x[i],
                2 => 1.0,
                3 => x[i].abs(),
                _ => x[i].abs().sqrt(),
            },
        }
    };
    let mut sumlx = 0.0f32;
    let mut suml2 = 0.0f32;
    for i in 0..n {
        let l = nearest_int(iscale * x[i]).clamp(-nmax, nmax - 1);
        l_out[i] = (l + nmax) as i8;
        let w = weight(i);
        let lf = l as f32;
        sumlx += w * x[i] * lf;
        suml2 += w * lf * lf;
    }
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    if return_early {
        return if suml2 > 0.0 {
            0.5 * (scale + 1.0 / iscale)
        } else {
            1.0 / iscale
        };
    }
    let mut best = scale * sumlx;
    for is in -9i32..=9 {
        if is == 0 {
            continue;
        }
        iscale = -(nmaxf + 0.1f32 * is as f32) / max;
        sumlx = 0.0;
        suml2 = 0.0;
        for i in 0..n {
            let l = nearest_int(iscale * x[i]).clamp(-nmax, nmax - 1);
            let w = weight(i);
            let lf = l as f32;
            sumlx += w * x[i] * lf;
            suml2 += w * lf * lf;
        }
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            for i in 0..n {
                let l = nearest_int(iscale * x[i]);
                l_out[i] = (nmax + l.clamp(-nmax, nmax - 1)) as i8;
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// `make_q3_quants` (levels in `[-nmax, nmax)`, stored `+ nmax`).
fn make_q3_quants(n: usize, nmax: i32, x: &[f32], l_out: &mut [i8], do_rmse: bool) -> f32 {
    let mut max = 0.0f32;
    let mut amax = 0.0f32;
    for &v in &x[..n] {
        let ax = v.abs();
        if ax > amax {
            amax = ax;
            max = v;
        }
    }
    if amax < GROUP_MAX_EPS {
        l_out[..n].fill(0);
        return 0.0;
    }
    let iscale = -(nmax as f32) / max;
    if do_rmse {
        let mut sumlx = 0.0f32;
        let mut suml2 = 0.0f32;
        for i in 0..n {
            let l = nearest_int(iscale * x[i]).clamp(-nmax, nmax - 1);
            l_out[i] = l as i8;
            let w = x[i] * x[i];
            let lf = l as f32;
            sumlx += w * x[i] * lf;
            suml2 += w * lf * lf;
        }
        for _ in 0..5 {
            let mut n_changed = 0;
            for i in 0..n {
                let w = x[i] * x[i];
                let li = l_out[i] as f32;
                let mut slx = sumlx - w * x[i] * li;
                if slx > 0.0 {
                    let mut sl2 = suml2 - w * li * li;
                    let new_l = nearest_int(x[i] * sl2 / slx).clamp(-nmax, nmax - 1);
                    if new_l != l_out[i] as i32 {
                        let nf = new_l as f32;
                        slx += w * x[i] * nf;
                        sl2 += w * nf * nf;
                        if sl2 > 0.0 && slx * slx * suml2 > sumlx * sumlx * sl2 {
                            l_out[i] = new_l as i8;
                            sumlx = slx;
                            suml2 = sl2;
                            n_changed += 1;
                        }
                    }
                }
            }
            if n_changed == 0 {
                break;
            }
        }
        for v in &mut l_out[..n] {
            *v += nmax as i8;
        }
        return if suml2 > 0.0 { sumlx / suml2 } else { 0.0 };
    }
    for i in 0..n {
        let l = nearest_int(iscale * x[i]).clamp(-nmax, nmax - 1);
        l_out[i] = (l + nmax) as i8;
    }
    1.0 / iscale
}

/// `make_qkx2_quants`: levels in `[0, nmax]` with a minimum; returns
/// `(scale, the_min)` where `the_min` is the negated offset, as in C.
#[allow(clippy::too_many_arguments)]
fn make_qkx2_quants(
    n: usize,
    nmax: i32,
    x: &[f32],
    weights: &[f32],
    l_out: &mut [u8],
    laux: &mut [u8],
    rmin: f32,
    rdelta: f32,
    nstep: i32,
    use_mad: bool,
) -> (f32, f32) {
    let mut min = x[0];
    let mut max = x[0];
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..n {
        if x[i] < min {
            min = x[i];
        }
        if x[i] > max {
            max = x[i];
        }
        let w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        l_out[..n].fill(0);
        return (0.0, -min);
    }
    let nmaxf = nmax as f32;
    let mut iscale = nmaxf / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_error = 0.0f32;
    for i in 0..n {
        let l = nearest_int(iscale * (x[i] - min));
        l_out[i] = l.clamp(0, nmax) as u8;
        let mut diff = scale * l_out[i] as f32 + min - x[i];
        diff = if use_mad { diff.abs() } else { diff * diff };
        best_error += weights[i] * diff;
    }
    if nstep < 1 {
        return (scale, -min);
    }
    for is in 0..=nstep {
        iscale = (rmin + rdelta * is as f32 + nmaxf) / (max - min);
        let mut sum_l = 0.0f32;
        let mut sum_l2 = 0.0f32;
        let mut sum_xl = 0.0f32;
        for i in 0..n {
            let l = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
            laux[i] = l as u8;
            let w = weights[i];
            let lf = l as f32;
            sum_l += w * lf;
            sum_l2 += w * lf * lf;
            sum_xl += w * lf * x[i];
        }
        let d = sum_w * sum_l2 - sum_l * sum_l;
        if d > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / d;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / d;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut cur_error = 0.0f32;
            for i in 0..n {
                let mut diff = this_scale * laux[i] as f32 + this_min - x[i];
                diff = if use_mad { diff.abs() } else { diff * diff };
                cur_error += weights[i] * diff;
            }
            if cur_error < best_error {
                l_out[..n].copy_from_slice(&laux[..n]);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

/// `make_qkx3_quants`: as `make_qkx2_quants`, with `x²` weights when none
/// are given and `max <= min` as the flat case. Returns `(scale, the_min)`.
#[allow(clippy::too_many_arguments)]
pub(super) fn make_qkx3_quants(
    n: usize,
    nmax: i32,
    x: &[f32],
    weights: Option<&[f32]>,
    l_out: &mut [u8],
    laux: &mut [u8],
    rmin: f32,
    rdelta: f32,
    nstep: i32,
    use_mad: bool,
) -> (f32, f32) {
    let wt = |i: usize| -> f32 {
        match weights {
            Some(w) => w[i],
            None => x[i] * x[i],
        }
    };
    let mut min = x[0];
    let mut max = x[0];
    let mut sum_w = wt(0);
    let mut sum_x = sum_w * x[0];
    for i in 1..n {
        if x[i] < min {
            min = x[i];
        }
        if x[i] > max {
            max = x[i];
        }
        let w = wt(i);
        sum_w += w;
        sum_x += w * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max <= min {
        l_out[..n].fill(0);
        return (0.0, -min);
    }
    let nmaxf = nmax as f32;
    let mut iscale = nmaxf / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_mad = 0.0f32;
    for i in 0..n {
        let l = nearest_int(iscale * (x[i] - min));
        l_out[i] = l.clamp(0, nmax) as u8;
        let mut diff = scale * l_out[i] as f32 + min - x[i];
        diff = if use_mad { diff.abs() } else { diff * diff };
        best_mad += wt(i) * diff;
    }
    if nstep < 1 {
        return (scale, -min);
    }
    for is in 0..=nstep {
        iscale = (rmin + rdelta * is as f32 + nmaxf) / (max - min);
        let mut sum_l = 0.0f32;
        let mut sum_l2 = 0.0f32;
        let mut sum_xl = 0.0f32;
        for i in 0..n {
            let l = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
            laux[i] = l as u8;
            let w = wt(i);
            let lf = l as f32;
            sum_l += w * lf;
            sum_l2 += w * lf * lf;
            sum_xl += w * lf * x[i];
        }
        let d = sum_w * sum_l2 - sum_l * sum_l;
        if d > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / d;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / d;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut mad = 0.0f32;
            for i in 0..n {
                let mut diff = this_scale * laux[i] as f32 + this_min - x[i];
                diff = if use_mad { diff.abs() } else { diff * diff };
                mad += wt(i) * diff;
            }
            if mad < best_mad {
                l_out[..n].copy_from_slice(&laux[..n]);
                best_mad = mad;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

/// `make_qp_quants`: non-negative levels in `[0, nmax]` for positive values
/// (the sub-block scales and minima), weighted by `qw`.
pub(super) fn make_qp_quants(n: usize, nmax: i32, x: &[f32], l_out: &mut [u8], qw: &[f32]) -> f32 {
    let mut max = 0.0f32;
    for &v in &x[..n] {
        max = max.max(v);
    }
    if max < GROUP_MAX_EPS {
        l_out[..n].fill(0);
        return 0.0;
    }
    let nmaxf = nmax as f32;
    let mut iscale = nmaxf / max;
    for i in 0..n {
        l_out[i] = nearest_int(iscale * x[i]) as u8;
    }
    let scale = 1.0 / iscale;
    let mut best_mse = 0.0f32;
    for i in 0..n {
        let diff = x[i] - scale * l_out[i] as f32;
        best_mse += qw[i] * diff * diff;
    }
    for is in -4i32..=4 {
        if is == 0 {
            continue;
        }
        let iscale_is = (0.1f32 * is as f32 + nmaxf) / max;
        let scale_is = 1.0 / iscale_is;
        let mut mse = 0.0f32;
        for i in 0..n {
            let l = nearest_int(iscale_is * x[i]).min(nmax);
            let diff = x[i] - scale_is * l as f32;
            mse += qw[i] * diff * diff;
        }
        if mse < best_mse {
            best_mse = mse;
            iscale = iscale_is;
        }
    }
    let mut sumlx = 0.0f32;
    let mut suml2 = 0.0f32;
    for i in 0..n {
        let l = nearest_int(iscale * x[i]).min(nmax);
        l_out[i] = l as u8;
        let w = qw[i];
        let lf = l as f32;
        sumlx += w * x[i] * lf;
        suml2 += w * lf * lf;
    }
    for _ in 0..5 {
        let mut n_changed = 0;
        for i in 0..n {
            let w = qw[i];
            let li = l_out[i] as f32;
            let mut slx = sumlx - w * x[i] * li;
            let mut sl2 = suml2 - w * li * li;
            if slx > 0.0 && sl2 > 0.0 {
                let new_l = nearest_int(x[i] * sl2 / slx).min(nmax);
                if new_l != l_out[i] as i32 {
                    let nf = new_l as f32;
                    slx += w * x[i] * nf;
                    sl2 += w * nf * nf;
                    if slx * slx * suml2 > sumlx * sumlx * sl2 {
                        l_out[i] = new_l as u8;
                        sumlx = slx;
                        suml2 = sl2;
                        n_changed += 1;
                    }
                }
            }
        }
        if n_changed == 0 {
            break;
        }
    }
    if suml2 > 0.0 {
        sumlx / suml2
    } else {
        0.0
    }
}

fn get_scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

fn pack_2bit(l: &[u8; QK_K], qs: &mut [u8]) {
    for j in (0..QK_K).step_by(128) {
        for k in 0..32 {
            qs[j / 4 + k] =
                l[j + k] | (l[j + k + 32] << 2) | (l[j + k + 64] << 4) | (l[j + k + 96] << 6);
        }
    }
}

fn sigma2_of(x: &[f32], mul: f32) -> f32 {
    let mut sum_x2 = 0.0f32;
    for &v in &x[..QK_K] {
        sum_x2 += v * v;
    }
    mul * sum_x2 / QK_K as f32
}

// ---------------------------------------------------------------- Q2_K

pub(super) fn q2_k_ref(x: &[f32], y: &mut [u8]) {
    let q4scale = 15.0f32;
    for (xb, yb) in x.chunks_exact(QK_K).zip(y.chunks_exact_mut(84)) {
        let mut l = [0u8; QK_K];
        let mut laux = [0u8; 16];
        let mut weights = [0f32; 16];
        let mut mins = [0f32; 16];
        let mut scales = [0f32; 16];
        let mut max_scale = 0.0f32;
        let mut max_min = 0.0f32;
        for j in 0..16 {
            for k in 0..16 {
                weights[k] = xb[16 * j + k].abs();
            }
            let (s, m) = make_qkx2_quants(
                16,
                3,
                &xb[16 * j..],
                &weights,
                &mut l[16 * j..16 * j + 16],
                &mut laux,
                -0.5,
                0.1,
                15,
                true,
            );
            scales[j] = s;
            mins[j] = m;
            if s > max_scale {
                max_scale = s;
            }
            if m > max_min {
                max_min = m;
            }
        }
        let (sc, rest) = yb.split_at_mut(16);
        if max_scale > 0.0 {
            let iscale = q4scale / max_scale;
            for j in 0..16 {
                sc[j] = nearest_int(iscale * scales[j]) as u8;
            }
            rest[64..66].copy_from_slice(&f16_bytes(max_scale / q4scale));
        } else {
            sc.fill(0);
            rest[64..66].copy_from_slice(&f16_bytes(0.0));
        }
        if max_min > 0.0 {
            let iscale = q4scale / max_min;
            for j in 0..16 {
                let lm = nearest_int(iscale * mins[j]);
                sc[j] |= (lm << 4) as u8;
            }
            rest[66..68].copy_from_slice(&f16_bytes(max_min / q4scale));
        } else {
            rest[66..68].copy_from_slice(&f16_bytes(0.0));
        }
        let dd = f16_round(max_scale / q4scale);
        let dd = if max_scale > 0.0 { dd } else { 0.0 };
        let dmin = if max_min > 0.0 {
            f16_round(max_min / q4scale)
        } else {
            0.0
        };
        for j in 0..16 {
            let d = dd * (sc[j] & 0xf) as f32;
            if d == 0.0 {
                continue;
            }
            let dm = dmin * (sc[j] >> 4) as f32;
            for ii in 0..16 {
                let q = nearest_int((xb[16 * j + ii] + dm) / d);
                l[16 * j + ii] = q.clamp(0, 3) as u8;
            }
        }
        pack_2bit(&l, &mut rest[..64]);
    }
}

pub(super) fn q2_k_impl(x: &[f32], y: &mut [u8], qw_row: &[f32]) {
    for (i, (xb, yb)) in x.chunks_exact(QK_K).zip(y.chunks_exact_mut(84)).enumerate() {
        let mut l = [0u8; QK_K];
        let mut laux = [0u8; 16];
        let mut mins = [0f32; 16];
        let mut scales = [0f32; 16];
        let mut sw = [0f32; 16];
        let mut weight = [0f32; 16];
        let mut ls = [0u8; 16];
        let mut lm = [0u8; 16];
        let sigma2 = sigma2_of(xb, 1.0);
        for j in 0..16 {
            let qw = &qw_row[QK_K * i + 16 * j..];
            for k in 0..16 {
                weight[k] = qw[k] * (sigma2 + xb[16 * j + k] * xb[16 * j + k]).sqrt();
            }
            for &w in &weight {
                sw[j] += w;
            }
            let (s, m) = make_qkx3_quants(
                16,
                3,
                &xb[16 * j..],
                Some(&weight),
                &mut l[16 * j..16 * j + 16],
                &mut laux,
                -0.9,
                0.05,
                36,
                false,
            );
            scales[j] = s;
            mins[j] = m;
        }
        let dm = make_qp_quants(16, 15, &scales, &mut ls, &sw);
        let mm = make_qp_quants(16, 15, &mins, &mut lm, &sw);
        let (sc, rest) = yb.split_at_mut(16);
        rest[64..66].copy_from_slice(&f16_bytes(dm));
        rest[66..68].copy_from_slice(&f16_bytes(mm));
        let dm = f16_round(dm);
        let mm = f16_round(mm);
        for j in 0..16 {
            sc[j] = ls[j] | (lm[j] << 4);
        }
        for j in 0..16 {
            let d = dm * (sc[j] & 0xf) as f32;
            if d == 0.0 {
                continue;
            }
            let m = mm * (sc[j] >> 4) as f32;
            for ii in 0..16 {
                let q = nearest_int((xb[16 * j + ii] + m) / d);
                l[16 * j + ii] = q.clamp(0, 3) as u8;
            }
        }
        pack_2bit(&l, &mut rest[..64]);
    }
}

// ---------------------------------------------------------------- Q3_K

/// Pack the 16 six-bit scales (`ls[j]` already offset by 32) into 12 bytes.
fn pack_q3_scales(ls: &[i32; 16], sc: &mut [u8]) {
    sc[..12].fill(0);
    for j in 0..16 {
        let mut l = ls[j];
        if j < 8 {
            sc[j] = (l & 0xf) as u8;
        } else {
            sc[j - 8] |= ((l & 0xf) << 4) as u8;
        }
        l >>= 4;
        sc[j % 4 + 8] |= (l << (2 * (j / 4))) as u8;
    }
}

/// Requantize with the stored scales and write hmask and qs.
fn finish_q3(xb: &[f32], l: &mut [i8; QK_K], yb: &mut [u8]) {
    // yb: hmask[0..32] qs[32..96] scales[96..108] d[108..110]
    let d_all = f16_round(half::f16::from_le_bytes([yb[108], yb[109]]).to_f32());
    for j in 0..16 {
        let s = &yb[96..108];
        let mut sc: i8 = if j < 8 {
            (s[j] & 0xf) as i8
        } else {
            (s[j - 8] >> 4) as i8
        };
        sc = (sc | ((((s[8 + j % 4] >> (2 * (j / 4))) & 3) << 4) as i8)) - 32;
        let d = d_all * sc as f32;
        if d == 0.0 {
            continue;
        }
        for ii in 0..16 {
            let q = nearest_int(xb[16 * j + ii] / d).clamp(-4, 3);
            l[16 * j + ii] = (q + 4) as i8;
        }
    }
    yb[..32].fill(0);
    let mut m = 0usize;
    let mut hm = 1u8;
    for j in 0..QK_K {
        if l[j] > 3 {
            yb[m] |= hm;
            l[j] -= 4;
        }
        m += 1;
        if m == QK_K / 8 {
            m = 0;
            hm <<= 1;
        }
    }
    let lu: [u8; QK_K] = std::array::from_fn(|j| l[j] as u8);
    pack_2bit(&lu, &mut yb[32..96]);
}

pub(super) fn q3_k_ref(x: &[f32], y: &mut [u8]) {
    for (xb, yb) in x.chunks_exact(QK_K).zip(y.chunks_exact_mut(110)) {
        let mut l = [0i8; QK_K];
        let mut scales = [0f32; 16];
        let mut max_scale = 0.0f32;
        let mut amax = 0.0f32;
        for j in 0..16 {
            scales[j] = make_q3_quants(16, 4, &xb[16 * j..], &mut l[16 * j..16 * j + 16], true);
            let scale = scales[j].abs();
            if scale > amax {
                amax = scale;
                max_scale = scales[j];
            }
        }
        if max_scale != 0.0 {
            let iscale = -32.0f32 / max_scale;
            let mut ls = [0i32; 16];
            for j in 0..16 {
                // C: int8_t l = nearest_int(...); l = MAX(-32, MIN(31, l)) + 32;
                let q = nearest_int(iscale * scales[j]) as i8 as i32;
                ls[j] = q.clamp(-32, 31) + 32;
            }
            pack_q3_scales(&ls, &mut yb[96..108]);
            yb[108..110].copy_from_slice(&f16_bytes(1.0 / iscale));
        } else {
            yb[96..108].fill(0);
            yb[108..110].copy_from_slice(&f16_bytes(0.0));
        }
        finish_q3(xb, &mut l, yb);
    }
}

pub(super) fn q3_k_impl(x: &[f32], y: &mut [u8], qw_row: Option<&[f32]>) {
    for (i, (xb, yb)) in x
        .chunks_exact(QK_K)
        .zip(y.chunks_exact_mut(110))
        .enumerate()
    {
        let mut l = [0i8; QK_K];
        let mut scales = [0f32; 16];
        let mut weight = [0f32; 16];
        let mut sw = [0f32; 16];
        let mut ls8 = [0i8; 16];
        let sigma2 = sigma2_of(xb, 2.0);
        for j in 0..16 {
            match qw_row {
                Some(qw) => {
                    let qw = &qw[QK_K * i + 16 * j..];
                    for k in 0..16 {
                        weight[k] = qw[k] * (sigma2 + xb[16 * j + k] * xb[16 * j + k]).sqrt();
                    }
                }
                None => {
                    for k in 0..16 {
                        weight[k] = xb[16 * j + k] * xb[16 * j + k];
                    }
                }
            }
            let mut sumw = 0.0f32;
            for &w in &weight {
                sumw += w;
            }
            sw[j] = sumw;
            scales[j] = make_qx_quants(
                16,
                4,
                &xb[16 * j..],
                &mut l[16 * j..16 * j + 16],
                1,
                Some(&weight),
            );
        }
        let d_block = make_qx_quants(16, 32, &scales, &mut ls8, 1, Some(&sw));
        let ls: [i32; 16] = std::array::from_fn(|j| ls8[j] as i32);
        pack_q3_scales(&ls, &mut yb[96..108]);
        yb[108..110].copy_from_slice(&f16_bytes(d_block));
        finish_q3(xb, &mut l, yb);
    }
}

// ---------------------------------------------------------------- Q4_K / Q5_K

/// Pack eight 6-bit scales and minima into the 12-byte K4 layout.
fn pack_k4_scales(ls: &[u8; 8], lm: &[u8; 8], sc: &mut [u8]) {
    for j in 0..8 {
        let (s, m) = (ls[j], lm[j]);
        if j < 4 {
            sc[j] = s;
            sc[j + 4] = m;
        } else {
            sc[j + 4] = (s & 0xf) | ((m & 0xf) << 4);
            sc[j - 4] |= (s >> 4) << 6;
            sc[j] |= (m >> 4) << 6;
        }
    }
}

/// The `_ref` search of Q4_K (`nmax` 15) and Q5_K (`nmax` 31): per 32 values
/// `make_qkx2_quants`, then the scales and minima to six bits. Fills the
/// header (`d`, `dmin`, scales at `yb[0..16]`) and returns the levels.
fn k4_ref_block(xb: &[f32], yb: &mut [u8], nmax: i32, rmin: f32, nstep: i32) -> [u8; QK_K] {
    let mut l = [0u8; QK_K];
    let mut laux = [0u8; 32];
    let mut weights = [0f32; 32];
    let mut mins = [0f32; 8];
    let mut scales = [0f32; 8];
    let mut max_scale = 0.0f32;
    let mut max_min = 0.0f32;
    for j in 0..8 {
        let mut sum_x2 = 0.0f32;
        for k in 0..32 {
            sum_x2 += xb[32 * j + k] * xb[32 * j + k];
        }
        let av_x = (sum_x2 / 32.0).sqrt();
        for k in 0..32 {
            weights[k] = av_x + xb[32 * j + k].abs();
        }
        let (s, m) = make_qkx2_quants(
            32,
            nmax,
            &xb[32 * j..],
            &weights,
            &mut l[32 * j..32 * j + 32],
            &mut laux,
            rmin,
            0.1,
            nstep,
            false,
        );
        scales[j] = s;
        mins[j] = m;
        if s > max_scale {
            max_scale = s;
        }
        if m > max_min {
            max_min = m;
        }
    }
    let inv_scale = if max_scale > 0.0 {
        63.0 / max_scale
    } else {
        0.0
    };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    let mut ls = [0u8; 8];
    let mut lm = [0u8; 8];
    for j in 0..8 {
        // C: uint8_t ls = nearest_int(...); ls = MIN(63, ls);
        ls[j] = (nearest_int(inv_scale * scales[j]) as u8).min(63);
        lm[j] = (nearest_int(inv_min * mins[j]) as u8).min(63);
    }
    pack_k4_scales(&ls, &lm, &mut yb[4..16]);
    yb[0..2].copy_from_slice(&f16_bytes(max_scale / 63.0));
    yb[2..4].copy_from_slice(&f16_bytes(max_min / 63.0));
    l
}

/// The weighted (`_impl`) search of Q4_K and Q5_K.
fn k4_impl_block(xb: &[f32], yb: &mut [u8], nmax: i32, qw: Option<&[f32]>) -> [u8; QK_K] {
    let mut l = [0u8; QK_K];
    let mut laux = [0u8; 32];
    let mut weights = [0f32; 32];
    let mut sw = [0f32; 8];
    let mut mins = [0f32; 8];
    let mut scales = [0f32; 8];
    let mut ls = [0u8; 8];
    let mut lm = [0u8; 8];
    let sigma2 = sigma2_of(xb, 2.0);
    let av_x = sigma2.sqrt();
    for j in 0..8 {
        match qw {
            Some(qw) => {
                for k in 0..32 {
                    weights[k] = qw[32 * j + k] * (sigma2 + xb[32 * j + k] * xb[32 * j + k]).sqrt();
                }
            }
            None => {
                for k in 0..32 {
                    weights[k] = av_x + xb[32 * j + k].abs();
                }
            }
        }
        let mut sumw = 0.0f32;
        for &w in &weights {
            sumw += w;
        }
        sw[j] = sumw;
        let (s, m) = make_qkx3_quants(
            32,
            nmax,
            &xb[32 * j..],
            Some(&weights),
            &mut l[32 * j..32 * j + 32],
            &mut laux,
            -0.9,
            0.05,
            36,
            false,
        );
        scales[j] = s;
        mins[j] = m;
    }
    let d_block = make_qp_quants(8, 63, &scales, &mut ls, &sw);
    let m_block = make_qp_quants(8, 63, &mins, &mut lm, &sw);
    for j in 0..8 {
        ls[j] = ls[j].min(63);
        lm[j] = lm[j].min(63);
    }
    pack_k4_scales(&ls, &lm, &mut yb[4..16]);
    yb[0..2].copy_from_slice(&f16_bytes(d_block));
    yb[2..4].copy_from_slice(&f16_bytes(m_block));
    l
}

/// Requantize every value with the stored six-bit scales and minima.
fn k4_requant(xb: &[f32], yb: &[u8], l: &mut [u8; QK_K], nmax: i32) {
    let d_all = half::f16::from_le_bytes([yb[0], yb[1]]).to_f32();
    let m_all = half::f16::from_le_bytes([yb[2], yb[3]]).to_f32();
    for j in 0..8 {
        let (sc, m) = get_scale_min_k4(j, &yb[4..16]);
        let d = d_all * sc as f32;
        if d == 0.0 {
            continue;
        }
        let dm = m_all * m as f32;
        for ii in 0..32 {
            let q = nearest_int((xb[32 * j + ii] + dm) / d);
            l[32 * j + ii] = q.clamp(0, nmax) as u8;
        }
    }
}

fn q4_k_pack(l: &[u8; QK_K], qs: &mut [u8]) {
    for (n, j) in (0..QK_K).step_by(64).enumerate() {
        for k in 0..32 {
            qs[32 * n + k] = l[j + k] | (l[j + k + 32] << 4);
        }
    }
}

fn q5_k_pack(l: &[u8; QK_K], qh: &mut [u8], ql: &mut [u8]) {
    qh[..32].fill(0);
    let mut m1 = 1u8;
    let mut m2 = 2u8;
    for (blk, n) in (0..QK_K).step_by(64).enumerate() {
        for j in 0..32 {
            let mut l1 = l[n + j];
            if l1 > 15 {
                l1 -= 16;
                qh[j] |= m1;
            }
            let mut l2 = l[n + j + 32];
            if l2 > 15 {
                l2 -= 16;
                qh[j] |= m2;
            }
            ql[32 * blk + j] = l1 | (l2 << 4);
        }
        m1 <<= 2;
        m2 <<= 2;
    }
}

pub(super) fn q4_k_ref(x: &[f32], y: &mut [u8]) {
    for (xb, yb) in x.chunks_exact(QK_K).zip(y.chunks_exact_mut(144)) {
        let mut l = k4_ref_block(xb, yb, 15, -1.0, 20);
        k4_requant(xb, yb, &mut l, 15);
        q4_k_pack(&l, &mut yb[16..144]);
    }
}

pub(super) fn q4_k_impl(x: &[f32], y: &mut [u8], qw: Option<&[f32]>) {
    for (i, (xb, yb)) in x
        .chunks_exact(QK_K)
        .zip(y.chunks_exact_mut(144))
        .enumerate()
    {
        let mut l = k4_impl_block(xb, yb, 15, qw.map(|w| &w[QK_K * i..QK_K * i + QK_K]));
        k4_requant(xb, yb, &mut l, 15);
        q4_k_pack(&l, &mut yb[16..144]);
    }
}

pub(super) fn q5_k_ref(x: &[f32], y: &mut [u8]) {
    for (xb, yb) in x.chunks_exact(QK_K).zip(y.chunks_exact_mut(176)) {
        let mut l = k4_ref_block(xb, yb, 31, -0.5, 15);
        k4_requant(xb, yb, &mut l, 31);
        let (qh, ql) = yb[16..].split_at_mut(32);
        q5_k_pack(&l, qh, ql);
    }
}

pub(super) fn q5_k_impl(x: &[f32], y: &mut [u8], qw: Option<&[f32]>) {
    for (i, (xb, yb)) in x
        .chunks_exact(QK_K)
        .zip(y.chunks_exact_mut(176))
        .enumerate()
    {
        let mut l = k4_impl_block(xb, yb, 31, qw.map(|w| &w[QK_K * i..QK_K * i + QK_K]));
        k4_requant(xb, yb, &mut l, 31);
        let (qh, ql) = yb[16..].split_at_mut(32);
        q5_k_pack(&l, qh, ql);
    }
}

// ---------------------------------------------------------------- Q6_K

fn q6_k_block(xb: &[f32], yb: &mut [u8], qw: Option<&[f32]>) {
    let mut l = [0i8; QK_K];
    let mut scales = [0f32; 16];
    let mut max_scale = 0.0f32;
    let mut max_abs_scale = 0.0f32;
    for ib in 0..16 {
        let w = qw.map(|w| &w[16 * ib..16 * ib + 16]);
        let scale = make_qx_quants(16, 32, &xb[16 * ib..], &mut l[16 * ib..16 * ib + 16], 1, w);
        scales[ib] = scale;
        let abs_scale = scale.abs();
        if abs_scale > max_abs_scale {
            max_abs_scale = abs_scale;
            max_scale = scale;
        }
    }
    if max_abs_scale < GROUP_MAX_EPS {
        yb.fill(0);
        return;
    }
    let iscale = -128.0f32 / max_scale;
    let d_bytes = f16_bytes(1.0 / iscale);
    yb[208..210].copy_from_slice(&d_bytes);
    let d_all = half::f16::from_le_bytes(d_bytes).to_f32();
    let mut sc = [0i8; 16];
    for ib in 0..16 {
        // C: y[i].scales[ib] = MIN(127, nearest_int(iscale*scales[ib])) into an int8_t.
        sc[ib] = nearest_int(iscale * scales[ib]).min(127) as i8;
        yb[192 + ib] = sc[ib] as u8;
    }
    for j in 0..16 {
        let d = d_all * sc[j] as f32;
        if d == 0.0 {
            continue;
        }
        for ii in 0..16 {
            let q = nearest_int(xb[16 * j + ii] / d).clamp(-32, 31);
            l[16 * j + ii] = (q + 32) as i8;
        }
    }
    let lu: [u8; QK_K] = std::array::from_fn(|j| l[j] as u8);
    for (n, j) in (0..QK_K).step_by(128).enumerate() {
        let ql = 64 * n;
        let qh = 128 + 32 * n;
        for k in 0..32 {
            let q1 = lu[j + k] & 0xf;
            let q2 = lu[j + k + 32] & 0xf;
            let q3 = lu[j + k + 64] & 0xf;
            let q4 = lu[j + k + 96] & 0xf;
            yb[ql + k] = q1 | (q3 << 4);
            yb[ql + k + 32] = q2 | (q4 << 4);
            yb[qh + k] = (lu[j + k] >> 4)
                | ((lu[j + k + 32] >> 4) << 2)
                | ((lu[j + k + 64] >> 4) << 4)
                | ((lu[j + k + 96] >> 4) << 6);
        }
    }
}

pub(super) fn q6_k_ref(x: &[f32], y: &mut [u8]) {
    for (xb, yb) in x.chunks_exact(QK_K).zip(y.chunks_exact_mut(210)) {
        q6_k_block(xb, yb, None);
    }
}

pub(super) fn q6_k_impl(x: &[f32], y: &mut [u8], qw: Option<&[f32]>) {
    for (i, (xb, yb)) in x
        .chunks_exact(QK_K)
        .zip(y.chunks_exact_mut(210))
        .enumerate()
    {
        q6_k_block(xb, yb, qw.map(|w| &w[QK_K * i..QK_K * i + QK_K]));
    }
}
