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
            let scale = abs_sum(ty, &data, &x);
            let tol = 1e-4 * scale + 1e-30;
            assert!(
                ((got as f64) - (want as f64)).abs() <= tol && got.is_finite() == want.is_finite(),
                "{ty} {level}: case {case} ({n_blocks} blocks, sane scales {sane}): simd {got:e} \
                 vs scalar {want:e} (tolerance {tol:e})"
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
