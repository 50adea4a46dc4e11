//! The generation loop against a second code path (a hand-written greedy
//! loop over `Model::forward`) and against the transformers greedy
//! references.

use redlite_engine::*;
use redlite_model::Model;
use redlite_tokenizer::Tokenizer;

fn refs() -> serde_json::Value {
    let p = redlite_testkit::fixture("refs.json");
    serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap()
}

#[test]
fn greedy_generation_matches_manual_loop_and_reference() {
    let model = Model::load(&redlite_testkit::fixture("tiny-s-bf16.gguf")).unwrap();
    let tok = Tokenizer::from_gguf(model.gguf()).unwrap();
    let r = &refs()["greedy_tiny-s_prose"];
    let prompt: Vec<u32> = r["prompt_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as u32)
        .collect();
    let want: Vec<u32> = r["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as u32)
        .collect();
    let margins: Vec<f64> = r["margins"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    let n = 16;
    let params = GenerateParams {
        max_tokens: n,
        stop_at_eog: false,
        prefill_chunk: 7, // exercise chunked prefill
        ..Default::default()
    };
    let mut streamed = String::new();
    let g = generate(
        &model,
        &tok,
        &prompt,
        &params,
        |_, _| {},
        |s| streamed.push_str(s),
    )
    .unwrap();
    assert_eq!(g.tokens.len(), n);
    assert_eq!(g.stop, StopReason::Length);
    assert_eq!(streamed, g.text);
    assert_eq!(g.text, tok.decode(&g.tokens).unwrap());

    // Second path: one batch prefill, then argmax token by token.
    let mut st = model.new_state();
    let mut logits = model.forward(&mut st, &prompt, false).unwrap();
    let mut manual = Vec::new();
    for _ in 0..n {
        let t = argmax(&logits);
        manual.push(t);
        logits = model.forward(&mut st, &[t], false).unwrap();
    }
    assert_eq!(g.tokens, manual);

    // The transformers greedy continuation, up to the first near-tie.
    for i in 0..n {
        if margins[i] < 1e-2 {
            eprintln!(
                "stopping comparison at step {i}: reference margin {}",
                margins[i]
            );
            break;
        }
        assert_eq!(g.tokens[i], want[i], "step {i}");
    }
}

#[test]
fn stops_at_end_of_generation_and_rejects_bad_input() {
    let model = Model::load(&redlite_testkit::fixture("tiny-s-bf16.gguf")).unwrap();
    let tok = Tokenizer::from_gguf(model.gguf()).unwrap();
    let empty = generate(
        &model,
        &tok,
        &[],
        &GenerateParams::default(),
        |_, _| {},
        |_| {},
    );
    assert!(matches!(empty, Err(GenerateError::EmptyPrompt)));
    let bad = GenerateParams {
        sampling: SamplingParams {
            top_p: 2.0,
            ..Default::default()
        },
        ..Default::default()
    };
    assert!(matches!(
        generate(&model, &tok, &[1, 2], &bad, |_, _| {}, |_| {}),
        Err(GenerateError::Sampling(_))
    ));
    // Sample at high temperature until some sequence hits an EOG token, then
    // check that generation stopped right there and left it out.
    let eog = tok.eos_id().unwrap();
    let mut hit = false;
    for seed in 0..40 {
        let params = GenerateParams {
            max_tokens: 64,
            sampling: SamplingParams {
                temperature: 3.0,
                seed: Some(seed),
                ..Default::default()
            },
            ..Default::default()
        };
        let g = generate(&model, &tok, &[eog, 10, 20], &params, |_, _| {}, |_| {}).unwrap();
        assert!(!g.tokens.iter().any(|&t| tok.is_eog(t)));
        if let StopReason::EndOfGeneration(t) = g.stop {
            assert!(tok.is_eog(t));
            assert!(g.tokens.len() < 64);
            hit = true;
            break;
        } else {
            assert_eq!(g.tokens.len(), 64);
        }
    }
    assert!(
        hit,
        "no sampled sequence reached an end-of-generation token"
    );
}
