//! Every SIMD dot path against its scalar twin on random blocks, at every
//! instruction level this CPU has.

mod common;

use common::*;
use rand::Rng;
use redlite_quant::{detected_isa, kernels, DotFn, GgmlType, Isa};

/// `Σ |w_i x_i|` in f64 from the scalar dequantizer: the scale of the
/// rounding error any reassociated f32 sum may have.
fn abs_sum(ty: GgmlType, data: &[u8], x: &[f32]) -> f64 {
    let w = redlite_quant::dequantize_to_vec(ty, data).expect("dequantize");
    w.iter()
        .zip(x)
        .map(|(a, b)| (*a as f64 * *b as f64).abs())
        .sum()
}

/// Whether `got` (a SIMD sum) agrees with `want` (its scalar twin) for
/// weights `w`: within `1e-4 · Σ|w·x|` when no sum order can overflow;
/// the same NaN or infinity when a weight itself is infinite (any order
/// then ends there); when only some orders may overflow (finite weights,
/// `Σ|w·x|` near `f32::MAX`), within tolerance if both stayed finite.
fn agrees(got: f32, want: f32, w: &[f32], scale: f64) -> bool {
    let tol = 1e-4 * scale + 1e-30;
    let close =
        || got.is_finite() && want.is_finite() && ((got as f64) - (want as f64)).abs() <= tol;
    if scale < f32::MAX as f64 / 2.0 {
        close()
    } else if w.iter().any(|v| !v.is_finite()) {
        (got.is_nan() && want.is_nan()) || got == want
    } else {
        !(got.is_finite() && want.is_finite()) || close()
    }
}

fn check_path(ty: GgmlType, level: &str, f: DotFn) {
    let k = kernels(ty).expect("kernels");
    let mut r = rng(0xd07 ^ ty.id() as u64);
    // Block counts including odd ones (loop tails) and one long row.
    for (case, &n_blocks) in [1usize, 2, 3, 7, 16, 33].iter().enumerate() {
        for sane in [true, false] {
            let data = random_blocks(ty, n_blocks, &mut r, sane);
            let n = n_blocks * ty.block_size();
            let x: Vec<f32> = (0..n).map(|_| r.gen_range(-1.0f32..1.0)).collect();
            let want = (k.dot_scalar)(&data, &x);
            let got = f(&data, &x);
            let w = redlite_quant::dequantize_to_vec(ty, &data).expect("dequantize");
            let scale = abs_sum(ty, &data, &x);
            assert!(
                agrees(got, want, &w, scale),
                "{ty} {level}: case {case} ({n_blocks} blocks, sane scales {sane}): simd {got:e} \
                 vs scalar {want:e} (tolerance {:e})",
                1e-4 * scale
            );
        }
    }
}

#[test]
fn simd_dot_matches_scalar() {
    let isa = detected_isa();
    let mut tested = Vec::new();
    for ty in kernel_types() {
        let k = kernels(ty).expect("kernels");
        if let (Some(f), true) = (k.dot_avx2, isa >= Isa::Avx2) {
            check_path(ty, "avx2", f);
            tested.push(format!("{ty}/avx2"));
        }
        if let (Some(f), true) = (k.dot_avx512, isa >= Isa::Avx512) {
            check_path(ty, "avx512", f);
            tested.push(format!("{ty}/avx512"));
        }
    }
    eprintln!("detected {}; tested {}", isa.name(), tested.join(" "));
}

/// The dispatching entry point agrees with the scalar twin too.
#[test]
fn dispatched_dot_matches_scalar() {
    let mut r = rng(77);
    for ty in kernel_types() {
        let data = random_blocks(ty, 5, &mut r, true);
        let n = 5 * ty.block_size();
        let x: Vec<f32> = (0..n).map(|_| r.gen_range(-1.0f32..1.0)).collect();
        let got = redlite_quant::dot(ty, &data, &x).expect("dot");
        let want = redlite_quant::dot_scalar(ty, &data, &x).expect("dot_scalar");
        let tol = 1e-4 * abs_sum(ty, &data, &x) + 1e-30;
        assert!(
            ((got - want) as f64).abs() <= tol,
            "{ty}: dot {got:e} vs scalar {want:e}"
        );
    }
}

/// The scalar dot is the dequantized weights times x (f64 check).
#[test]
fn scalar_dot_is_dequant_dot() {
    let mut r = rng(78);
    for ty in kernel_types() {
        let data = random_blocks(ty, 4, &mut r, true);
        let n = 4 * ty.block_size();
        let x: Vec<f32> = (0..n).map(|_| r.gen_range(-1.0f32..1.0)).collect();
        let w = redlite_quant::dequantize_to_vec(ty, &data).expect("dequantize");
        let exact: f64 = w.iter().zip(&x).map(|(a, b)| *a as f64 * *b as f64).sum();
        let got = redlite_quant::dot_scalar(ty, &data, &x).expect("dot_scalar");
        let tol = 1e-5 * abs_sum(ty, &data, &x) + 1e-30;
        assert!(
            (got as f64 - exact).abs() <= tol,
            "{ty}: scalar dot {got:e} vs f64 {exact:e}"
        );
    }
}

/// Every type with kernels has both x86 fast paths, so none silently runs
/// the scalar code on a machine that has AVX2 or AVX-512.
#[cfg(target_arch = "x86_64")]
#[test]
fn every_kernel_type_has_simd_paths() {
    let kinds = kernel_types();
    assert!(!kinds.is_empty(), "no types with kernels");
    let missing: Vec<String> = kinds
        .iter()
        .flat_map(|&ty| {
            let k = kernels(ty).expect("kernels");
            let mut m = Vec::new();
            if k.dot_avx2.is_none() {
                m.push(format!("{ty}/avx2"));
            }
            if k.dot_avx512.is_none() {
                m.push(format!("{ty}/avx512"));
            }
            m
        })
        .collect();
    assert!(missing.is_empty(), "types without SIMD paths: {missing:?}");
}

/// Rows of moderate random values of a plain float type (one value per block).
fn float_row(ty: GgmlType, n: usize, r: &mut rand::rngs::StdRng) -> Vec<u8> {
    let mut out = Vec::with_capacity(n * ty.type_size());
    for _ in 0..n {
        let v = r.gen_range(-4.0f32..4.0);
        match ty {
            GgmlType::F32 => out.extend_from_slice(&v.to_le_bytes()),
            GgmlType::F16 => out.extend_from_slice(&sane_f16(r).to_le_bytes()),
            GgmlType::BF16 => out.extend_from_slice(&((v.to_bits() >> 16) as u16).to_le_bytes()),
            _ => panic!("{ty} is not a plain float type"),
        }
    }
    out
}

/// The plain float types have one value per block, so the block counts of
/// `check_path` never reach their unrolled loops: check every length up to
/// 160 (all vector-loop / tail splits of 8, 16, 32 and 64 lanes) and a few
/// long rows, at every level this CPU has.
#[test]
fn float_simd_long_rows_match_scalar() {
    let isa = detected_isa();
    let mut r = rng(0xf10a7);
    let lens: Vec<usize> = (1..=160).chain([1000, 4096, 4099]).collect();
    for ty in [GgmlType::F32, GgmlType::F16, GgmlType::BF16] {
        let k = kernels(ty).expect("kernels");
        let mut paths: Vec<(&str, DotFn)> = Vec::new();
        if let (Some(f), true) = (k.dot_avx2, isa >= Isa::Avx2) {
            paths.push(("avx2", f));
        }
        if let (Some(f), true) = (k.dot_avx512, isa >= Isa::Avx512) {
            paths.push(("avx512", f));
        }
        for &n in &lens {
            let data = float_row(ty, n, &mut r);
            let x: Vec<f32> = (0..n).map(|_| r.gen_range(-1.0f32..1.0)).collect();
            let want = (k.dot_scalar)(&data, &x);
            let tol = 1e-4 * abs_sum(ty, &data, &x) + 1e-30;
            for (level, f) in &paths {
                let got = f(&data, &x);
                assert!(
                    ((got as f64) - (want as f64)).abs() <= tol,
                    "{ty} {level}: {n} values: simd {got:e} vs scalar {want:e} (tolerance {tol:e})"
                );
            }
        }
    }
}
