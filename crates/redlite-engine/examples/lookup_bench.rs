//! Speculative decoding, engine side only: random-weight models do not copy
//! text, so drafts are replayed from a previous greedy run (all accepted) or
//! drawn at random (none accepted), against plain decoding of the same tokens.
//!
//! `cargo run --release -p redlite-engine --example lookup_bench -- MODEL [TOKENS] [DRAFT] [THREADS] [ROUNDS]`

use std::sync::Arc;

use redlite_backend::CpuBackend;
use redlite_engine::{generate, DraftSource, GenerateParams, LookupParams};
use redlite_model::Model;
use redlite_tokenizer::Tokenizer;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let Some(path) = args.get(1) else {
        eprintln!("usage: lookup_bench MODEL [TOKENS=128] [DRAFT=8] [THREADS] [ROUNDS=5]");
        std::process::exit(2);
    };
    let n: usize = args.get(2).map_or(Ok(128), |s| s.parse())?;
    let k: usize = args.get(3).map_or(Ok(8), |s| s.parse())?;
    let threads: Option<usize> = args.get(4).map(|s| s.parse()).transpose()?;
    let rounds: usize = args.get(5).map_or(Ok(5), |s| s.parse())?;
    let model = Model::load_with_backend(path.as_ref(), Arc::new(CpuBackend::new(threads)?))?;
    let tok = Tokenizer::from_gguf(model.gguf())?;
    let vocab = model.config().vocab_size as u32;
    let prompt: Vec<u32> = (0..64u32).map(|i| (i * 7919 + 13) % vocab).collect();
    let plain = GenerateParams {
        max_tokens: n,
        stop_at_eog: false,
        ..Default::default()
    };
    let lookup = LookupParams {
        max_draft: k,
        ..LookupParams::default()
    };
    // Warm-up, and the reference output to replay.
    let reference = generate(&model, &tok, &prompt, &plain, |_, _| {}, |_| {})?;
    // Configurations measured in turn, `rounds` times, best of each (the
    // machine is shared: interleaving keeps the comparison fair).
    let configs: Vec<(&str, Option<DraftSource>)> = vec![
        ("plain decode", None),
        (
            "replayed drafts (all accepted)",
            Some(DraftSource::Replay(reference.tokens.clone())),
        ),
        (
            "random drafts (none accepted)",
            Some(DraftSource::Random { vocab, seed: 5 }),
        ),
        ("prompt lookup", Some(DraftSource::Lookup)),
    ];
    let mut best = vec![f64::MAX; configs.len()];
    let mut stats = vec![String::new(); configs.len()];
    for _ in 0..rounds.max(1) {
        for (i, (name, src)) in configs.iter().enumerate() {
            let p = GenerateParams {
                lookup: src.as_ref().map(|_| lookup.clone()),
                draft_source: src.clone().unwrap_or(DraftSource::Lookup),
                ..plain.clone()
            };
            let g = generate(&model, &tok, &prompt, &p, |_, _| {}, |_| {})?;
            assert_eq!(
                g.tokens, reference.tokens,
                "{name}: output differs from plain decoding"
            );
            best[i] = best[i].min(g.generated_seconds);
            stats[i] = format!(
                "{} rounds, {} drafted, {} accepted",
                g.lookup.rounds, g.lookup.drafted, g.lookup.accepted
            );
        }
    }
    println!("model {path}, {n} tokens, drafts of {k}, best of {rounds} interleaved rounds");
    let base = n as f64 / best[0];
    for (i, (name, _)) in configs.iter().enumerate() {
        let tps = n as f64 / best[i];
        println!(
            "{name:32} {tps:9.2} tok/s  {:.2}x  {}",
            tps / base,
            stats[i]
        );
    }
    Ok(())
}
