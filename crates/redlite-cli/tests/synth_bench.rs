//! `redlite synth --preset qwen3-coder-next` (shrunk to 4 layers) in every
//! mix: the files load, have the real shape, generate, and stay numerically
//! sane over hundreds of decode steps; `redlite bench` on them.

use std::path::Path;
use std::process::{Command, Output};

fn redlite(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_redlite"))
        .args(args)
        .output()
        .expect("run redlite")
}

fn ok(out: &Output) -> (String, String) {
    let so = String::from_utf8_lossy(&out.stdout).into_owned();
    let se = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "failed:\nstdout: {so}\nstderr: {se}");
    (so, se)
}

/// Write a 4-layer qwen3-coder-next model with `experts` experts in `mix`.
fn synth(dir: &Path, mix: &str, experts: usize, extra: &[&str]) -> String {
    let path = dir.join(format!("cn-{mix}-{experts}.gguf"));
    let p = path.to_str().unwrap().to_string();
    let e = experts.to_string();
    let mut args = vec![
        "synth",
        "--preset",
        "qwen3-coder-next",
        "--layers",
        "4",
        "--experts",
        &e,
        "--mix",
        mix,
        "-o",
        &p,
    ];
    args.extend_from_slice(extra);
    ok(&redlite(&args));
    p
}

/// `inspect --json --tensors` of a file.
fn inspect(model: &str) -> serde_json::Value {
    let (so, _) = ok(&redlite(&["inspect", model, "--json", "--tensors"]));
    serde_json::from_str(&so).expect("inspect --json parses")
}

fn tensor_type(info: &serde_json::Value, name: &str) -> String {
    let tensors = info["tensors"].as_array().expect("tensors array");
    let t = tensors
        .iter()
        .find(|t| t["name"] == name)
        .unwrap_or_else(|| panic!("tensor {name} missing"));
    t["type"].as_str().unwrap().to_string()
}

#[test]
fn every_mix_loads_has_the_real_shape_and_generates() {
    let dir = tempfile::tempdir().unwrap();
    let expect = [
        // (mix, [token_embd, output, attn_qkv, ssm_out, ssm_ba, gate_exps, down_exps, attn_v(blk.3)])
        (
            "cf2",
            [
                "Q4_K", "Q6_K", "Q4_K", "Q5_K", "Q8_0", "IQ1_M", "IQ2_XS", "Q4_K",
            ],
        ),
        (
            "q4_k_m",
            [
                "Q4_K", "Q6_K", "Q5_K", "Q4_K", "Q4_K", "Q4_K", "Q4_K", "Q6_K",
            ],
        ),
        (
            "q8_0",
            [
                "Q8_0", "Q8_0", "Q8_0", "Q8_0", "Q8_0", "Q8_0", "Q8_0", "Q8_0",
            ],
        ),
        (
            "bf16",
            [
                "BF16", "BF16", "BF16", "BF16", "BF16", "BF16", "BF16", "BF16",
            ],
        ),
    ];
    for (mix, types) in expect {
        let experts = if mix == "bf16" { 2 } else { 4 };
        let m = synth(dir.path(), mix, experts, &[]);
        let info = inspect(&m);
        let names = [
            "token_embd.weight",
            "output.weight",
            "blk.0.attn_qkv.weight",
            "blk.0.ssm_out.weight",
            "blk.0.ssm_ba.weight",
            "blk.0.ffn_gate_exps.weight",
            "blk.0.ffn_down_exps.weight",
            "blk.3.attn_v.weight",
        ];
        for (n, t) in names.iter().zip(types) {
            assert_eq!(tensor_type(&info, n), t, "{mix}: {n}");
        }
        let text = info.to_string();
        for needle in [
            "\"embedding_length\":2048",
            &format!("\"expert_count\":{experts}"),
            "\"attention.head_count\":16",
            "\"attention.head_count_kv\":2",
            "\"attention.key_length\":256",
            "\"rope.dimension_count\":64",
            "\"ssm.group_count\":16",
            "\"ssm.time_step_rank\":32",
            "\"ssm.state_size\":128",
            "\"expert_feed_forward_length\":512",
            "\"rope.freq_base\":5000000.0",
            "\"pattern\":\"3 linear + 1 full\"",
        ] {
            assert!(text.contains(needle), "{mix}: {needle} not in {text:.2000}");
        }
        let (so, se) = ok(&redlite(&[
            "run",
            &m,
            "-p",
            "def fibonacci(n):",
            "-n",
            "6",
            "--temp",
            "0",
            "--ignore-eos",
        ]));
        assert!(!so.trim().is_empty(), "{mix}: no text; {se}");
        assert!(se.contains("generation: 6 tokens"), "{mix}: {se}");
    }
}

#[test]
fn layers_must_be_a_multiple_of_four() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("x.gguf");
    let out = redlite(&[
        "synth",
        "--preset",
        "qwen3-coder-next",
        "--layers",
        "6",
        "-o",
        p.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("multiple of 4"));
    assert!(!p.exists());
}

#[test]
fn vocab_from_copies_the_tokenizer() {
    let dir = tempfile::tempdir().unwrap();
    let vocab = redlite_testkit::fixture("tokenizer/ggml-vocab-qwen2.gguf");
    let m = synth(
        dir.path(),
        "cf2",
        2,
        &["--vocab-from", vocab.to_str().unwrap()],
    );
    let info = inspect(&m);
    let text = info.to_string();
    assert!(text.contains("\"vocab_size\":151936"), "{text:.2000}");
    let (so, _) = ok(&redlite(&[
        "tokenize",
        &m,
        "--text",
        "def main():",
        "--ids",
    ]));
    let (so_ref, _) = ok(&redlite(&[
        "tokenize",
        vocab.to_str().unwrap(),
        "--text",
        "def main():",
        "--ids",
    ]));
    assert_eq!(so, so_ref);
}

/// Hundreds of recurrent decode steps: logits stay finite and of sane size.
#[test]
fn decode_stays_finite_over_hundreds_of_steps() {
    let dir = tempfile::tempdir().unwrap();
    let m = synth(dir.path(), "cf2", 8, &["--router-skew", "1.5"]);
    // Deterministic pseudo-random token ids below the built-in vocabulary size.
    let mut x: u64 = 12345;
    let ids: Vec<String> = (0..256)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((x >> 33) % 500).to_string()
        })
        .collect();
    let toks = dir.path().join("tokens.txt");
    std::fs::write(&toks, ids.join(" ")).unwrap();
    let out = dir.path().join("logits.npy");
    ok(&redlite(&[
        "logits",
        &m,
        "--tokens-file",
        toks.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--batch",
        "1",
    ]));
    let l = redlite_testkit::read_npy(&out);
    assert_eq!(l.shape[0], 256);
    for i in 0..l.shape[0] {
        let row = l.row(i);
        assert!(
            row.iter().all(|v| v.is_finite()),
            "position {i}: non-finite logit"
        );
        let max = row.iter().fold(0f32, |a, &v| a.max(v.abs()));
        let n = row.len() as f64;
        let mean = row.iter().map(|&v| v as f64).sum::<f64>() / n;
        let std = (row.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / n).sqrt();
        assert!(max < 60.0, "position {i}: |logit| up to {max}");
        assert!((0.3..20.0).contains(&std), "position {i}: logit std {std}");
    }
}
