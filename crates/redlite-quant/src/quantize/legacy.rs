//! Quantizers of the 32-, 64- and 128-element one-scale blocks (Q4_0, Q4_1,
//! Q5_0, Q5_1, Q8_0, Q1_0, Q2_0, MXFP4) and the ternary 256-element blocks
//! (TQ1_0, TQ2_0): ports of ggml's `quantize_row_*_ref` and, for Q4_0 … Q5_1
//! with an importance matrix, `quantize_row_*_impl`.

// Index loops mirror the C they port, statement for statement.
#![allow(clippy::needless_range_loop)]

use super::f16_bytes;
use super::kquants::{make_qkx3_quants, make_qx_quants};
use crate::mxfp4::{e8m0_to_fp32_half, KVALUES_MXFP4};

/// `fabsf`-maximum with its signed value, first occurrence kept.
#[inline]
fn signed_absmax(x: &[f32]) -> f32 {
    let mut amax = 0.0f32;
    let mut max = 0.0f32;
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    max
}

#[inline]
fn min_max(x: &[f32]) -> (f32, f32) {
    let mut min = f32::MAX;
    let mut max = -f32::MAX;
    for &v in x {
        if v < min {
            min = v;
        }
        if v > max {
            max = v;
        }
    }
    (min, max)
}

/// C's `(int8_t)(float)`: truncation toward zero (in range here).
#[inline]
fn trunc_i8(v: f32) -> i8 {
    v as i32 as i8
}

pub(super) fn q4_0_ref(x: &[f32], y: &mut [u8]) {
    for (xb, yb) in x.chunks_exact(32).zip(y.chunks_exact_mut(18)) {
        let max = signed_absmax(xb);
        let d = max / -8.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        yb[0..2].copy_from_slice(&f16_bytes(d));
        for j in 0..16 {
            let x0 = xb[j] * id;
            let x1 = xb[16 + j] * id;
            let xi0 = trunc_i8(x0 + 8.5).min(15) as u8;
            let xi1 = trunc_i8(x1 + 8.5).min(15) as u8;
            yb[2 + j] = xi0 | (xi1 << 4);
        }
    }
}

pub(super) fn q4_1_ref(x: &[f32], y: &mut [u8]) {
    for (xb, yb) in x.chunks_exact(32).zip(y.chunks_exact_mut(20)) {
        let (min, max) = min_max(xb);
        let d = (max - min) / 15.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        yb[0..2].copy_from_slice(&f16_bytes(d));
        yb[2..4].copy_from_slice(&f16_bytes(min));
        for j in 0..16 {
            let x0 = (xb[j] - min) * id;
            let x1 = (xb[16 + j] - min) * id;
            let xi0 = trunc_i8(x0 + 0.5).min(15) as u8;
            let xi1 = trunc_i8(x1 + 0.5).min(15) as u8;
            yb[4 + j] = xi0 | (xi1 << 4);
        }
    }
}

fn put_q5(yb_qh: &mut [u8], yb_qs: &mut [u8], l: &[u8; 32]) {
    let mut qh = 0u32;
    for j in 0..16 {
        let xi0 = l[j];
        let xi1 = l[j + 16];
        yb_qs[j] = (xi0 & 0x0f) | ((xi1 & 0x0f) << 4);
        qh |= (((xi0 as u32) & 0x10) >> 4) << j;
        qh |= (((xi1 as u32) & 0x10) >> 4) << (j + 16);
    }
    yb_qh.copy_from_slice(&qh.to_le_bytes());
}

pub(super) fn q5_0_ref(x: &[f32], y: &mut [u8]) {
    for (xb, yb) in x.chunks_exact(32).zip(y.chunks_exact_mut(22)) {
        let max = signed_absmax(xb);
        let d = max / -16.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        yb[0..2].copy_from_slice(&f16_bytes(d));
        let mut l = [0u8; 32];
        for j in 0..32 {
            l[j] = trunc_i8(xb[j] * id + 16.5).min(31) as u8;
        }
        let (qh, qs) = yb[2..].split_at_mut(4);
        put_q5(qh, qs, &l);
    }
}

pub(super) fn q5_1_ref(x: &[f32], y: &mut [u8]) {
    for (xb, yb) in x.chunks_exact(32).zip(y.chunks_exact_mut(24)) {
        let (min, max) = min_max(xb);
        let d = (max - min) / 31.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        yb[0..2].copy_from_slice(&f16_bytes(d));
        yb[2..4].copy_from_slice(&f16_bytes(min));
        let mut l = [0u8; 32];
        for j in 0..32 {
            // C: (uint8_t)(x0 + 0.5f), no clamp.
            l[j] = ((xb[j] - min) * id + 0.5) as i32 as u8;
        }
        let (qh, qs) = yb[4..].split_at_mut(4);
        put_q5(qh, qs, &l);
    }
}

pub(super) fn q8_0_ref(x: &[f32], y: &mut [u8]) {
    for (xb, yb) in x.chunks_exact(32).zip(y.chunks_exact_mut(34)) {
        let mut amax = 0.0f32;
        for &v in xb {
            amax = amax.max(v.abs());
        }
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        yb[0..2].copy_from_slice(&f16_bytes(d));
        for j in 0..32 {
            yb[2 + j] = ((xb[j] * id).round() as i32 as i8) as u8;
        }
    }
}

pub(super) fn q1_0_ref(x: &[f32], y: &mut [u8]) {
    for (xb, yb) in x.chunks_exact(128).zip(y.chunks_exact_mut(18)) {
        let mut sum_abs = 0.0f32;
        for &v in xb {
            sum_abs += v.abs();
        }
        let d = sum_abs / 128.0;
        yb[0..2].copy_from_slice(&f16_bytes(d));
        yb[2..].fill(0);
        for (j, &v) in xb.iter().enumerate() {
            if v >= 0.0 {
                yb[2 + j / 8] |= 1 << (j % 8);
            }
        }
    }
}

pub(super) fn q2_0_ref(x: &[f32], y: &mut [u8]) {
    for (xb, yb) in x.chunks_exact(64).zip(y.chunks_exact_mut(18)) {
        let mut amax = 0.0f32;
        for &v in xb {
            let a = v.abs();
            if a > amax {
                amax = a;
            }
        }
        let d = amax;
        let id = if d > 0.0 { 1.0 / d } else { 0.0 };
        yb[0..2].copy_from_slice(&f16_bytes(d));
        yb[2..].fill(0);
        for (j, &w) in xb.iter().enumerate() {
            let q = ((w * id).round() as i32 + 1).clamp(0, 3);
            yb[2 + j / 4] |= (q as u8) << ((j % 4) * 2);
        }
    }
}

fn best_index_mxfp4(x: f32, e: f32) -> u8 {
    let mut best_index = 0u8;
    let mut best_err = (KVALUES_MXFP4[0] as f32 * e - x).abs();
    for (i, &k) in KVALUES_MXFP4.iter().enumerate().skip(1) {
        let err = (k as f32 * e - x).abs();
        if err < best_err {
            best_index = i as u8;
            best_err = err;
        }
    }
    best_index
}

pub(super) fn mxfp4_ref(x: &[f32], y: &mut [u8]) {
    for (xb, yb) in x.chunks_exact(32).zip(y.chunks_exact_mut(17)) {
        let mut amax = 0.0f32;
        for &v in xb {
            if amax < v.abs() {
                amax = v.abs();
            }
        }
        let e = if amax > 0.0 {
            (amax.log2().floor() - 2.0 + 127.0) as i32 as u8
        } else {
            0
        };
        let d = e8m0_to_fp32_half(e);
        yb[0] = e;
        for j in 0..16 {
            let x0 = best_index_mxfp4(xb[j], d);
            let x1 = best_index_mxfp4(xb[16 + j], d);
            yb[1 + j] = x0 | (x1 << 4);
        }
    }
}

/// C's `lroundf` (half away from zero) as an int.
#[inline]
fn lround(v: f32) -> i32 {
    v.round() as i32
}

pub(super) fn tq1_0_ref(x: &[f32], y: &mut [u8]) {
    // block_tq1_0 { u8 qs[48]; u8 qh[4]; f16 d; } (54 bytes)
    for (xb, yb) in x.chunks_exact(256).zip(y.chunks_exact_mut(54)) {
        let mut amax = 0.0f32;
        for &v in xb {
            amax = amax.max(v.abs());
        }
        let d = amax;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let mut xo = 0usize;
        // 5 elements per byte along 32 bytes.
        for m in 0..32 {
            let mut q = 0u8;
            for n in 0..5 {
                let xi = lround(xb[xo + m + n * 32] * id) + 1;
                q = q.wrapping_mul(3).wrapping_add(xi as u8);
            }
            yb[m] = (q as u16 * 256).div_ceil(243) as u8;
        }
        xo += 160;
        // Along 16 bytes.
        for m in 0..16 {
            let mut q = 0u8;
            for n in 0..5 {
                let xi = lround(xb[xo + m + n * 16] * id) + 1;
                q = q.wrapping_mul(3).wrapping_add(xi as u8);
            }
            yb[32 + m] = (q as u16 * 256).div_ceil(243) as u8;
        }
        xo += 80;
        // 4 elements per byte.
        for j in 0..4 {
            let mut q = 0u8;
            for m in 0..4 {
                let xi = lround(xb[xo + j + m * 4] * id) + 1;
                q = q.wrapping_mul(3).wrapping_add(xi as u8);
            }
            q = q.wrapping_mul(3);
            yb[48 + j] = (q as u16 * 256).div_ceil(243) as u8;
        }
        yb[52..54].copy_from_slice(&f16_bytes(d));
    }
}

pub(super) fn tq2_0_ref(x: &[f32], y: &mut [u8]) {
    // block_tq2_0 { u8 qs[64]; f16 d; } (66 bytes)
    for (xb, yb) in x.chunks_exact(256).zip(y.chunks_exact_mut(66)) {
        let mut amax = 0.0f32;
        for &v in xb {
            amax = amax.max(v.abs());
        }
        let d = amax;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        for j in (0..64).step_by(32) {
            let xo = j * 4;
            for m in 0..32 {
                let mut q = 0u8;
                for n in 0..4 {
                    let xi = lround(xb[xo + m + n * 32] * id) + 1;
                    q = q.wrapping_add(((xi & 3) as u8) << (2 * n));
                }
                yb[j + m] = q;
            }
        }
        yb[64..66].copy_from_slice(&f16_bytes(d));
    }
}

/// `sigma2` of a row: `Σx²/n` in f32, in order.
fn row_sigma2(x: &[f32]) -> f32 {
    let mut sum_x2 = 0.0f32;
    for &v in x {
        sum_x2 += v * v;
    }
    sum_x2 / x.len() as f32
}

fn legacy_weights(xb: &[f32], qw: &[f32], sigma2: f32) -> [f32; 32] {
    let mut w = [0f32; 32];
    for j in 0..32 {
        w[j] = qw[j] * (sigma2 + xb[j] * xb[j]).sqrt();
    }
    w
}

pub(super) fn q4_0_impl(x: &[f32], y: &mut [u8], qw: &[f32]) {
    let sigma2 = row_sigma2(x);
    for (ib, (xb, yb)) in x.chunks_exact(32).zip(y.chunks_exact_mut(18)).enumerate() {
        let w = legacy_weights(xb, &qw[32 * ib..32 * ib + 32], sigma2);
        let mut l = [0i8; 32];
        let d = make_qx_quants(32, 8, xb, &mut l, 1, Some(&w));
        yb[0..2].copy_from_slice(&f16_bytes(d));
        for j in 0..16 {
            yb[2 + j] = (l[j] as u8) | ((l[j + 16] as u8) << 4);
        }
    }
}

pub(super) fn q4_1_impl(x: &[f32], y: &mut [u8], qw: &[f32]) {
    let sigma2 = row_sigma2(x);
    for (ib, (xb, yb)) in x.chunks_exact(32).zip(y.chunks_exact_mut(20)).enumerate() {
        let w = legacy_weights(xb, &qw[32 * ib..32 * ib + 32], sigma2);
        let mut l = [0u8; 32];
        let mut laux = [0u8; 32];
        let (d, min) = make_qkx3_quants(
            32,
            15,
            xb,
            Some(&w),
            &mut l,
            &mut laux,
            -0.9,
            0.05,
            36,
            false,
        );
        yb[0..2].copy_from_slice(&f16_bytes(d));
        yb[2..4].copy_from_slice(&f16_bytes(-min));
        for j in 0..16 {
            yb[4 + j] = l[j] | (l[j + 16] << 4);
        }
    }
}

pub(super) fn q5_0_impl(x: &[f32], y: &mut [u8], qw: &[f32]) {
    let sigma2 = row_sigma2(x);
    for (ib, (xb, yb)) in x.chunks_exact(32).zip(y.chunks_exact_mut(22)).enumerate() {
        let w = legacy_weights(xb, &qw[32 * ib..32 * ib + 32], sigma2);
        let mut l = [0i8; 32];
        let d = make_qx_quants(32, 16, xb, &mut l, 1, Some(&w));
        yb[0..2].copy_from_slice(&f16_bytes(d));
        let lu: [u8; 32] = std::array::from_fn(|j| l[j] as u8);
        let (qh, qs) = yb[2..].split_at_mut(4);
        put_q5(qh, qs, &lu);
    }
}

pub(super) fn q5_1_impl(x: &[f32], y: &mut [u8], qw: &[f32]) {
    let sigma2 = row_sigma2(x);
    for (ib, (xb, yb)) in x.chunks_exact(32).zip(y.chunks_exact_mut(24)).enumerate() {
        let w = legacy_weights(xb, &qw[32 * ib..32 * ib + 32], sigma2);
        let mut l = [0u8; 32];
        let mut laux = [0u8; 32];
        let (d, min) = make_qkx3_quants(
            32,
            31,
            xb,
            Some(&w),
            &mut l,
            &mut laux,
            -0.9,
            0.05,
            36,
            false,
        );
        yb[0..2].copy_from_slice(&f16_bytes(d));
        yb[2..4].copy_from_slice(&f16_bytes(-min));
        let (qh, qs) = yb[4..].split_at_mut(4);
        put_q5(qh, qs, &l);
    }
}
