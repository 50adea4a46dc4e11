//! Encoding speed: the CPython source of `long32k.json` (decoded with the
//! tiny vocab) encoded with the real Qwen2 vocab, one core.
//!
//! `cargo run --release -p redlite-tokenizer --example tokbench [-- PATH.gguf]`

use std::time::Instant;

use redlite_gguf::GgufFile;
use redlite_tokenizer::Tokenizer;

fn fixtures() -> std::path::PathBuf {
    match std::env::var_os("REDLITE_FIXTURES") {
        Some(d) => d.into(),
        None => std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures"),
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let fx = fixtures();
    let vocab_path = std::env::args()
        .nth(1)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| fx.join("tokenizer/ggml-vocab-qwen2.gguf"));

    let tiny = Tokenizer::from_gguf(&GgufFile::open(fx.join("tiny-s-bf16.gguf"))?)?;
    let long: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fx.join("long32k.json"))?)?;
    let ids: Vec<u32> = long["ids"]
        .as_array()
        .ok_or("long32k.json: ids is not an array")?
        .iter()
        .filter_map(|x| x.as_u64().map(|v| v as u32))
        .collect();
    let text = tiny.decode(&ids)?;

    let t0 = Instant::now();
    let gguf = GgufFile::open(&vocab_path)?;
    let t_open = t0.elapsed();
    let tok = Tokenizer::from_gguf(&gguf)?;
    let t_load = t0.elapsed() - t_open;
    println!(
        "vocab {}: {} tokens, {} merges; open {:.1} ms, build {:.1} ms",
        vocab_path.display(),
        tok.n_vocab(),
        tok.n_merges(),
        t_open.as_secs_f64() * 1e3,
        t_load.as_secs_f64() * 1e3
    );

    // Warm up, then time separate calls (each starts with an empty word cache).
    let n_tok = tok.encode(&text, false).len();
    let reps = 20;
    let t = Instant::now();
    let mut total = 0usize;
    for _ in 0..reps {
        total += tok.encode(std::hint::black_box(&text), false).len();
    }
    let dt = t.elapsed().as_secs_f64();
    let mb = (text.len() * reps) as f64 / 1e6;
    println!(
        "encode: {} bytes of Python source -> {} tokens ({:.2} bytes/token); {} calls: {:.2} MB/s",
        text.len(),
        n_tok,
        text.len() as f64 / n_tok as f64,
        reps,
        mb / dt
    );
    assert_eq!(total, n_tok * reps);

    // Without any word-cache benefit: every word distinct within a call.
    let words: Vec<String> = text
        .split_whitespace()
        .enumerate()
        .map(|(i, w)| format!("{w}{i}"))
        .collect();
    let uniq = words.join(" ");
    let t = Instant::now();
    let n2 = tok.encode(&uniq, false).len();
    let dt = t.elapsed().as_secs_f64();
    println!(
        "encode (uncached words): {} bytes -> {} tokens: {:.2} MB/s",
        uniq.len(),
        n2,
        uniq.len() as f64 / 1e6 / dt
    );

    let t = Instant::now();
    let out = tok.decode(&tok.encode(&text, false))?;
    println!(
        "encode+decode round trip ok: {} ({:.1} ms)",
        out == text,
        t.elapsed().as_secs_f64() * 1e3
    );
    Ok(())
}
