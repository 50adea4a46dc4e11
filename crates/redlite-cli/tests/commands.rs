//! End-to-end runs of the `redlite` binary: the README's first command
//! (synth + run), `logits` against the transformers references, and
//! `tokenize` against the fixture encodings.

use std::path::Path;

mod common;
use common::{ok, redlite};

#[test]
fn synth_then_run_generates_text() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("tiny.gguf");
    let m = model.to_str().unwrap();
    let (_, se) = ok(&redlite(&["synth", "--preset", "tiny", "-o", m]));
    assert!(se.contains("wrote"), "{se}");
    // Refuses to overwrite without --force.
    assert!(!redlite(&["synth", "--preset", "tiny", "-o", m])
        .status
        .success());
    let (so, se) = ok(&redlite(&[
        "run",
        m,
        "-p",
        "def fibonacci(n):",
        "-n",
        "12",
        "--temp",
        "0",
        "--ignore-eos",
    ]));
    assert!(!so.trim().is_empty(), "no text generated");
    assert!(se.contains("generation: 12 tokens"), "{se}");
    assert!(se.contains("tok/s"), "{se}");
    // Greedy is deterministic; a seeded sampler too.
    let (so2, _) = ok(&redlite(&[
        "run",
        m,
        "-p",
        "def fibonacci(n):",
        "-n",
        "12",
        "--temp",
        "0",
        "--ignore-eos",
    ]));
    assert_eq!(so, so2);
    let args = [
        "run",
        m,
        "-p",
        "class Stack:",
        "-n",
        "16",
        "--temp",
        "0.9",
        "--seed",
        "5",
        "--ignore-eos",
    ];
    assert_eq!(ok(&redlite(&args)).0, ok(&redlite(&args)).0);
    // Chat mode renders the prompt through the template (ChatML fallback here).
    let (_, se) = ok(&redlite(&[
        "run",
        m,
        "-p",
        "hello",
        "--chat",
        "--system",
        "Be brief.",
        "-n",
        "4",
        "--temp",
        "0",
    ]));
    // <|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n
    let n_prompt: usize = se
        .split("prompt: ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    assert!(n_prompt >= 9, "{se}");
    // Bad input: clear errors, no panic.
    let out = redlite(&["run", m, "-p", "x", "--top-p", "0"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("top_p") && !err.contains("panicked"), "{err}");
    // A prompt longer than the context is refused with both numbers.
    let long = "word ".repeat(40);
    let out = redlite(&["run", m, "-p", &long, "--context", "16"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("context of 16 tokens")
            && err.contains("the prompt is ")
            && !err.contains("panicked"),
        "{err}"
    );
    let n: usize = err
        .split("the prompt is ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    assert!(n >= 16, "{err}");
    // A reply that would run past the context stops at its end, said so.
    let (so, se) = ok(&redlite(&[
        "run",
        m,
        "-p",
        "hi",
        "--context",
        "12",
        "-n",
        "100",
        "--ignore-eos",
        "--temp",
        "0",
    ]));
    assert!(se.contains("note: the reply stops after"), "{se}");
    assert!(!so.is_empty());
    let out = redlite(&["run", "/nonexistent/model.gguf", "-p", "x"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("model.gguf"), "{err}");
    let out = redlite(&["synth", "--preset", "huge", "-o", "x.gguf"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown preset"));
}

fn prompt_ids(name: &str) -> Vec<u32> {
    let p: serde_json::Value =
        serde_json::from_slice(&std::fs::read(redlite_testkit::fixture("prompts.json")).unwrap())
            .unwrap();
    p[name]["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as u32)
        .collect()
}

fn logits_cmd(dir: &Path, ids: &[u32], extra: &[&str]) -> redlite_testkit::Array {
    let toks = dir.join("tokens.txt");
    let text: Vec<String> = ids.iter().map(|i| i.to_string()).collect();
    std::fs::write(&toks, text.join(" ")).unwrap();
    let out = dir.join("out.npy");
    let model = redlite_testkit::fixture("tiny-s-bf16.gguf");
    let mut args = vec![
        "logits",
        model.to_str().unwrap(),
        "--tokens-file",
        toks.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    ok(&redlite(&args));
    redlite_testkit::read_npy(&out)
}

#[test]
fn logits_match_transformers() {
    let dir = tempfile::tempdir().unwrap();
    let ids = prompt_ids("prose");
    let refs = redlite_testkit::read_npz(&redlite_testkit::fixture("refs.npz"));
    let want = &refs["tiny-s.prose"];
    for extra in [
        &[][..],
        &["--batch", "1"][..],
        &["--batch", "37", "--dump-from", "5"][..],
    ] {
        let got = logits_cmd(dir.path(), &ids, extra);
        let from = if extra.contains(&"--dump-from") { 5 } else { 0 };
        assert_eq!(got.shape, vec![ids.len() - from, 1024], "{extra:?}");
        let worst = got
            .data
            .iter()
            .zip(&want.data[from * 1024..])
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(worst <= 5e-3, "{extra:?}: max |dlogit| {worst}");
    }
}

#[test]
fn tokenize_matches_fixture_ids() {
    let p: serde_json::Value =
        serde_json::from_slice(&std::fs::read(redlite_testkit::fixture("prompts.json")).unwrap())
            .unwrap();
    let text = p["code"]["text"].as_str().unwrap();
    let model = redlite_testkit::fixture("tiny-s-bf16.gguf");
    let (so, _) = ok(&redlite(&[
        "tokenize",
        model.to_str().unwrap(),
        "--ids",
        "--text",
        text,
    ]));
    let got: Vec<u32> = so
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().unwrap())
        .collect();
    assert_eq!(got, prompt_ids("code"));
}
