//! Random quant blocks with finite scales, shared by the CUDA tests.
#![allow(dead_code)]

use half::f16;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redlite_cuda::dequant_src::dq_block_shape;
use redlite_gguf::GgmlType;

/// Byte offsets of the f16 scale fields of one block (from the Rust block
/// layouts in redlite_quant). IQ1_M has none: its f16 scale is spread over
/// the top nibbles of the four scale words at 48..56.
fn f16_fields(t: GgmlType) -> &'static [usize] {
    use GgmlType::*;
    match t {
        Q4_0 | Q5_0 | Q8_0 | IQ4_NL => &[0],
        Q4_1 | Q5_1 | Q4_K | Q5_K => &[0, 2],
        Q2_K => &[80, 82],
        Q3_K => &[108],
        Q6_K => &[208],
        IQ1_S | IQ2_XXS | IQ2_XS | IQ2_S | IQ3_XXS | IQ3_S | IQ4_XS => &[0],
        // Plain floats: every value is raw bits (NaN, Inf, subnormals included).
        F32 | F16 | BF16 | IQ1_M => &[],
        other => panic!("no scale layout for {other:?}"),
    }
}

/// A finite f16 scale: mostly `±2·u`, sometimes raw bits with a small
/// exponent (subnormals included) so the converter's paths all get used.
fn random_scale(rng: &mut StdRng) -> u16 {
    if rng.gen_range(0..8) == 0 {
        let exp: u16 = rng.gen_range(0..17);
        (rng.gen::<u16>() & 0x83ff) | (exp << 10)
    } else {
        f16::from_f32(rng.gen_range(-2.0f32..2.0)).to_bits()
    }
}

pub fn random_blocks(t: GgmlType, n: usize, seed: u64) -> Vec<u8> {
    let (_, bs) = dq_block_shape(t).expect("supported type");
    let mut rng = StdRng::seed_from_u64(seed);
    let mut data = vec![0u8; n * bs];
    rng.fill(&mut data[..]);
    for blk in data.chunks_exact_mut(bs) {
        for &off in f16_fields(t) {
            blk[off..off + 2].copy_from_slice(&random_scale(&mut rng).to_le_bytes());
        }
        if t == GgmlType::IQ1_M {
            let d = random_scale(&mut rng);
            for k in 0..4 {
                let w = 48 + 2 * k;
                let word = u16::from_le_bytes([blk[w], blk[w + 1]]);
                let word = (word & 0x0fff) | (((d >> (4 * k)) & 0xf) << 12);
                blk[w..w + 2].copy_from_slice(&word.to_le_bytes());
            }
        }
    }
    data
}

/// The integer kernels' activation quantizer (`rl_q16_quantize_ref` in
/// `kernels/q16.cuh`), written out again: per 32 values, scale
/// `d = amax / 32767` and values `round-half-even(v · 32767 / amax)` in
/// ±32767 (an all-zero unit has scale 0). Returns the scales and the values.
pub fn q16_quantize(x: &[f32]) -> (Vec<f32>, Vec<i32>) {
    assert!(x.len().is_multiple_of(32));
    let mut d = Vec::with_capacity(x.len() / 32);
    let mut q = Vec::with_capacity(x.len());
    for u in x.chunks_exact(32) {
        let amax = u
            .iter()
            .fold(0f32, |a, v| if v.abs() > a { v.abs() } else { a });
        let (dd, id) = if amax > 0.0 && amax.is_finite() {
            (amax / 32767.0, 32767.0 / amax)
        } else {
            (if amax > 0.0 { amax } else { 0.0 }, 0.0)
        };
        d.push(dd);
        q.extend(
            u.iter()
                .map(|&v| (v * id).round_ties_even().clamp(-32767.0, 32767.0) as i32),
        );
    }
    (d, q)
}

/// Whether g++ is on PATH (the host checks of the kernel headers skip
/// without it).
pub fn have_gxx() -> bool {
    std::process::Command::new("g++")
        .arg("--version")
        .output()
        .is_ok()
}

/// `cpp` built by g++ as the host checks build the kernel headers (C++17, no
/// FMA contraction, every warning an error) into `dir/name`; panics with
/// g++'s output, naming `what`, when it fails.
pub fn gxx_build(dir: &std::path::Path, name: &str, cpp: &str, what: &str) -> std::path::PathBuf {
    let src = dir.join(format!("{name}.cpp"));
    let exe = dir.join(name);
    std::fs::write(&src, cpp).unwrap();
    let out = std::process::Command::new("g++")
        .args([
            "-O1",
            "-std=c++17",
            "-ffp-contract=off",
            "-Wall",
            "-Wextra",
            "-Werror",
        ])
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "g++ failed on {what}:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}
