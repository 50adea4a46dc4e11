//! The random quantized blocks of the `qwen3-coder-next` preset dequantize
//! (with the quant crate's reference dequantizers) to values of the intended
//! magnitude, centred on zero, and finite.

use redlite_gguf::GgmlType;
use redlite_synth::full::{random_blocks, router_row_scales, BLOCK_TYPES};

fn stats(v: &[f32]) -> (f64, f64) {
    let n = v.len() as f64;
    let m = v.iter().map(|&x| x as f64).sum::<f64>() / n;
    let var = v.iter().map(|&x| (x as f64 - m).powi(2)).sum::<f64>() / n;
    (m, var.sqrt())
}

#[test]
fn every_block_type_dequantizes_to_the_target_std() {
    for &ty in BLOCK_TYPES {
        for (target, seed) in [(1.0f32, 7u64), (1.0 / 2048f32.sqrt(), 99), (0.0442, 12345)] {
            let (rows, cols) = (64u64, 2048u64);
            let mut bytes = Vec::new();
            random_blocks(ty, rows, cols, target, 0.0, seed, &mut bytes, None).unwrap();
            assert_eq!(
                bytes.len() as u64,
                ty.row_bytes(cols).unwrap() * rows,
                "{ty}"
            );
            let v = redlite_quant::dequantize_to_vec(ty, &bytes).unwrap();
            assert_eq!(v.len() as u64, rows * cols);
            assert!(v.iter().all(|x| x.is_finite()), "{ty}: non-finite value");
            let (mean, std) = stats(&v);
            let ratio = std / target as f64;
            assert!(
                (0.8..1.25).contains(&ratio),
                "{ty}: dequantized std {std} for target {target} (ratio {ratio})"
            );
            assert!(
                mean.abs() < 0.1 * target as f64,
                "{ty}: mean {mean} for std {target}"
            );
            // Not all equal: the blocks carry information.
            let distinct = v
                .iter()
                .take(4096)
                .map(|x| x.to_bits())
                .collect::<std::collections::HashSet<_>>();
            assert!(
                distinct.len() > 3,
                "{ty}: only {} distinct values",
                distinct.len()
            );
        }
    }
}

#[test]
fn f32_and_bf16_honour_the_mean() {
    for ty in [GgmlType::F32, GgmlType::BF16] {
        let mut bytes = Vec::new();
        random_blocks(ty, 16, 256, 0.25, 1.0, 3, &mut bytes, None).unwrap();
        let v = redlite_quant::dequantize_to_vec(ty, &bytes).unwrap();
        let (mean, std) = stats(&v);
        assert!(
            (mean - 1.0).abs() < 0.05 && (std - 0.25).abs() < 0.03,
            "{ty}: {mean} {std}"
        );
    }
}

#[test]
fn router_skew_orders_experts() {
    let flat = router_row_scales(64, 0.0, 1);
    assert!(flat.iter().all(|&s| s == 1.0));
    let s = router_row_scales(64, 2.0, 1);
    let mut sorted = s.clone();
    sorted.sort_by(|a, b| b.partial_cmp(a).unwrap());
    assert!((sorted[0] - 3.0).abs() < 1e-5 && (sorted[63] - 1.0).abs() < 1e-5);
    // A permutation: every rank's scale appears once.
    sorted.dedup();
    assert_eq!(sorted.len(), 64);
}
