//! bf16 tiny models against transformers float32 (refs.npz): every prompt,
//! prefill as one batch and token by token.

mod common;
use common::*;
use redlite_testkit::{fixture, read_npz};

fn check(model_name: &str) {
    let model = load(&format!("{model_name}-bf16.gguf"));
    let refs = read_npz(&fixture("refs.npz"));
    let p = prompts();
    for name in PROMPTS {
        let tokens = prompt_ids(&p, name);
        let reference = &refs[&format!("{model_name}.{name}")];
        for (mode, batch) in [("prefill", tokens.len()), ("token-by-token", 1)] {
            let ours = run(&model, &tokens, batch);
            let d = per_position(reference, &ours);
            let worst_abs = d.iter().map(|x| x.0).fold(0f32, f32::max);
            let worst_kl = d.iter().map(|x| x.1).fold(0f64, f64::max);
            println!(
                "{model_name} {name:8} {mode:15} max|Δ| {worst_abs:.3e}  max KL {worst_kl:.3e}"
            );
            for (i, (a, k)) in d.iter().enumerate() {
                assert!(
                    *a <= 5e-3,
                    "{model_name} {name} {mode} pos {i}: |Δlogit| {a}"
                );
                assert!(*k <= 1e-6, "{model_name} {name} {mode} pos {i}: KL {k}");
            }
        }
    }
}

#[test]
fn tiny_a_bf16_matches_transformers() {
    check("tiny-a");
}

#[test]
fn tiny_s_bf16_matches_transformers() {
    check("tiny-s");
}
