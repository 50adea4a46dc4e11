//! Prompt-lookup speculative decoding changes nothing in greedy output:
//! same tokens, and the logits each token was chosen from are the plain
//! run's bit for bit, on every fixture prompt.

use redlite_engine::{generate, DraftSource, GenerateParams, LookupParams};
use redlite_model::Model;
use redlite_testkit::fixture;
use redlite_tokenizer::Tokenizer;

const PROMPTS: [&str; 6] = ["one", "hello", "prose", "code", "unicode", "rep120"];

fn ids(p: &serde_json::Value, name: &str) -> Vec<u32> {
    p[name]["ids"]
        .as_array()
        .expect("ids")
        .iter()
        .map(|x| x.as_u64().expect("id") as u32)
        .collect()
}

#[test]
fn greedy_output_is_unchanged_by_lookup() {
    let s = std::fs::read_to_string(fixture("prompts.json")).expect("prompts.json");
    let p: serde_json::Value = serde_json::from_str(&s).expect("parses");
    let mut total_accepted = 0;
    for file in ["tiny-s-bf16.gguf", "tiny-a-bf16.gguf", "tiny-s-CF2mix.gguf"] {
        let model = Model::load(&fixture(file)).expect("model");
        let tok = Tokenizer::from_gguf(model.gguf()).expect("tokenizer");
        for name in PROMPTS {
            let prompt = ids(&p, name);
            let plain = GenerateParams {
                max_tokens: 200,
                stop_at_eog: false,
                keep_logits: true,
                ..Default::default()
            };
            let a = generate(&model, &tok, &prompt, &plain, |_, _| {}, |_| {}).expect("plain");
            assert_eq!(a.tokens.len(), 200);
            assert_eq!(a.lookup.rounds, 0);
            // Drafts from prompt lookup, from the plain output itself (all
            // accepted), from the plain output with every 7th token wrong
            // (rejections and rollbacks at every draft position) and at random.
            let mut corrupt = a.tokens.clone();
            for (i, t) in corrupt.iter_mut().enumerate() {
                if i % 7 == 3 {
                    *t = (*t + 1) % model.config().vocab_size as u32;
                }
            }
            let sources = [
                DraftSource::Lookup,
                DraftSource::Replay(a.tokens.clone()),
                DraftSource::Replay(corrupt),
                DraftSource::Random {
                    vocab: model.config().vocab_size as u32,
                    seed: 9,
                },
            ];
            for (si, source) in sources.into_iter().enumerate() {
                let spec = GenerateParams {
                    lookup: Some(LookupParams::default()),
                    draft_source: source,
                    ..plain.clone()
                };
                let b = generate(&model, &tok, &prompt, &spec, |_, _| {}, |_| {}).expect("lookup");
                assert_eq!(
                    a.tokens, b.tokens,
                    "{file} {name} source {si}: tokens differ"
                );
                assert_eq!(a.text, b.text);
                for (i, (x, y)) in a.logits.iter().zip(&b.logits).enumerate() {
                    let worst = x.iter().zip(y).fold(0f32, |m, (u, v)| m.max((u - v).abs()));
                    assert!(
                        worst <= 1e-4,
                        "{file} {name} token {i}: logits differ by {worst}"
                    );
                    assert!(
                        x.iter().zip(y).all(|(u, v)| u.to_bits() == v.to_bits()),
                        "{file} {name} source {si} token {i}: logits not bit-identical"
                    );
                }
                assert!(b.lookup.accepted <= b.lookup.drafted);
                if si == 1 {
                    // Replaying the output: every draft is accepted, and
                    // 200 tokens take far fewer forward passes.
                    assert_eq!(b.lookup.accepted, b.lookup.drafted);
                    assert!(b.lookup.rounds < 40, "{} rounds", b.lookup.rounds);
                }
                if si == 2 {
                    assert!(b.lookup.accepted > 0 && b.lookup.accepted < b.lookup.drafted);
                }
                println!(
                    "{file} {name} source {si}: {} rounds, {} drafted, {} accepted",
                    b.lookup.rounds, b.lookup.drafted, b.lookup.accepted
                );
                total_accepted += b.lookup.accepted;
            }
        }
    }
    assert!(
        total_accepted > 1000,
        "only {total_accepted} drafted tokens accepted"
    );
}

#[test]
fn sampling_with_lookup_runs_to_the_limit_or_eog() {
    let model = Model::load(&fixture("tiny-s-bf16.gguf")).expect("model");
    let tok = Tokenizer::from_gguf(model.gguf()).expect("tokenizer");
    let params = GenerateParams {
        max_tokens: 120,
        sampling: redlite_engine::SamplingParams {
            temperature: 0.7,
            seed: Some(3),
            ..Default::default()
        },
        lookup: Some(LookupParams::default()),
        ..Default::default()
    };
    let prompt: Vec<u32> = (0..60).map(|i| (i % 12) as u32 + 100).collect();
    let g = generate(&model, &tok, &prompt, &params, |_, _| {}, |_| {}).expect("generate");
    assert!(
        g.tokens.len() == 120 || matches!(g.stop, redlite_engine::StopReason::EndOfGeneration(_))
    );
    // Same seed, same output (the speculative path is deterministic too).
    let h = generate(&model, &tok, &prompt, &params, |_, _| {}, |_| {}).expect("generate");
    assert_eq!(g.tokens, h.tokens);
    assert!(g.lookup.rounds > 0);
}
