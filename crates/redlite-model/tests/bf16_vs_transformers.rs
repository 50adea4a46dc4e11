//! bf16 tiny models against transformers float32 (refs.npz): every prompt,
//! prefill as one batch and token by token.

mod common;
use common::*;

fn check(model_name: &str) {
    let model = load(&format!("{model_name}-bf16.gguf"));
    bf16_vs_transformers(&model, model_name, "");
}

#[test]
fn tiny_a_bf16_matches_transformers() {
    check("tiny-a");
}

#[test]
fn tiny_s_bf16_matches_transformers() {
    check("tiny-s");
}
