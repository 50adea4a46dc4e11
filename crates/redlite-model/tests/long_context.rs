//! tiny-s-bf16 on the 32,768-token prompt against transformers (long32k.npz),
//! fed in ubatches of 4096.

mod common;
use common::*;
use redlite_testkit::{fixture, read_npz};

#[test]
fn long32k_matches_transformers() {
    let model = load("tiny-s-bf16.gguf");
    let s = std::fs::read_to_string(fixture("long32k.json")).expect("long32k.json");
    let j: serde_json::Value = serde_json::from_str(&s).expect("long32k.json parses");
    let tokens = ids(&j["ids"]);
    assert_eq!(tokens.len(), 32768);
    let npz = read_npz(&fixture("long32k.npz"));
    let positions: Vec<usize> = npz["positions"].data.iter().map(|&p| p as usize).collect();
    let reference = &npz["logits"];
    let vocab = model.config().vocab_size;
    let mut st = model.new_state();
    let mut ours = vec![Vec::new(); positions.len()];
    let start = std::time::Instant::now();
    for (b, chunk) in tokens.chunks(4096).enumerate() {
        let p0 = b * 4096;
        let logits = model.forward(&mut st, chunk, true).expect("forward");
        for (i, &p) in positions.iter().enumerate() {
            if (p0..p0 + chunk.len()).contains(&p) {
                ours[i] = logits[(p - p0) * vocab..(p - p0 + 1) * vocab].to_vec();
            }
        }
    }
    println!("32768 tokens in {:.1} s", start.elapsed().as_secs_f64());
    let (mut worst_abs, mut worst_kl) = (0f32, 0f64);
    for (i, &p) in positions.iter().enumerate() {
        let (a, k) = (
            max_abs(reference.row(i), &ours[i]),
            kl(reference.row(i), &ours[i]),
        );
        worst_abs = worst_abs.max(a);
        worst_kl = worst_kl.max(k);
        assert!(a <= 2e-3, "position {p}: |Δlogit| {a}");
        assert!(k <= 1e-6, "position {p}: KL {k}");
    }
    println!(
        "long32k: max|Δ| {worst_abs:.2e}, max KL {worst_kl:.2e} over {} positions",
        positions.len()
    );
}
