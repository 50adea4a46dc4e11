//! `redlite quantize` end to end: whole output files byte-identical to
//! llama-quantize's (the fixtures' full outputs), the refusal of a type that
//! needs an importance matrix with llama-quantize's message, `--dry-run`,
//! and split output.

use std::path::PathBuf;
use std::process::{Command, Output};

mod common;
use common::ok;

fn qdir() -> PathBuf {
    redlite_testkit::fixtures_dir().join("quantize")
}

/// Run `redlite` in the fixtures' quantize folder, so relative names are
/// recorded as llama-quantize recorded them.
fn redlite_in_fixtures(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_redlite"))
        .current_dir(qdir())
        .args(args)
        .output()
        .expect("run redlite")
}

fn assert_same_file(got: &std::path::Path, want: &str) {
    let want_path = qdir().join(want);
    let w = std::fs::read(&want_path).unwrap_or_else(|e| panic!("{}: {e}", want_path.display()));
    let g = std::fs::read(got).expect("output");
    assert_eq!(g.len(), w.len(), "{want}: size");
    if let Some(i) = g.iter().zip(&w).position(|(a, b)| a != b) {
        panic!("{want}: first difference at byte {i}");
    }
}

#[test]
fn cf2_and_k_mixes_equal_llama_quantize_files() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("cf2.gguf");
    let o = out.to_str().unwrap();
    let (so, se) = ok(&redlite_in_fixtures(&[
        "quantize",
        "--imatrix",
        "imatrix-tiny-s.gguf",
        "../tiny-s-bf16.gguf",
        o,
        "cf2",
        "-t",
        "2",
    ]));
    assert!(se.contains("loaded 48 importance matrix entries"), "{se}");
    assert!(so.contains("blk.0.ffn_gate_exps.weight"), "{so}");
    assert_same_file(&out, "tiny-s-CF2-imat.gguf");
    for (ty, want) in [
        ("Q4_K_M", "tiny-s-Q4_K_M.gguf"),
        ("q3_k_m", "tiny-s-Q3_K_M.gguf"),
    ] {
        let out = dir.path().join(want);
        ok(&redlite_in_fixtures(&[
            "quantize",
            "../tiny-s-bf16.gguf",
            out.to_str().unwrap(),
            ty,
        ]));
        assert_same_file(&out, want);
    }
}

#[test]
fn refuses_low_bit_types_without_an_importance_matrix() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("iq2m.gguf");
    let r = redlite_in_fixtures(&[
        "quantize",
        "../tiny-s-bf16.gguf",
        out.to_str().unwrap(),
        "IQ2_M",
    ]);
    assert!(!r.status.success());
    let se = String::from_utf8_lossy(&r.stderr);
    // llama-quantize: "this quantization requires an imatrix!", then
    // "llama_quantize: failed to quantize model from 'tiny-s-bf16.gguf'".
    assert!(
        se.contains("failed to quantize model from '../tiny-s-bf16.gguf'"),
        "{se}"
    );
    assert!(
        se.contains("this quantization requires an imatrix!"),
        "{se}"
    );
    assert!(se.contains("blk.0.attn_gate.weight"), "{se}");
    assert!(!out.exists());
}

#[test]
fn iq2_s_and_iq3_types_equal_llama_quantize_files() {
    let dir = tempfile::tempdir().unwrap();
    for (ty, want) in [
        ("IQ2_S", "tiny-s-IQ2_S-imat.gguf"),
        ("IQ3_XXS", "tiny-s-IQ3_XXS-imat.gguf"),
        ("IQ3_S", "tiny-s-IQ3_S-imat.gguf"),
    ] {
        let out = dir.path().join(want);
        ok(&redlite_in_fixtures(&[
            "quantize",
            "--imatrix",
            "imatrix-tiny-s.gguf",
            "../tiny-s-bf16.gguf",
            out.to_str().unwrap(),
            ty,
        ]));
        assert_same_file(&out, want);
    }
}

#[test]
fn split_max_size_writes_shards() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("q.gguf");
    let (so, _) = ok(&redlite_in_fixtures(&[
        "quantize",
        "--split-max-size",
        "3M",
        "../tiny-s-bf16.gguf",
        out.to_str().unwrap(),
        "Q4_K_M",
    ]));
    // 3.28 MiB of Q4_K_M tensors in shards of at most 3,000,000 bytes: two.
    let shards: Vec<PathBuf> = (1..=2)
        .map(|i| dir.path().join(format!("q-{i:05}-of-00002.gguf")))
        .collect();
    for s in &shards {
        assert!(s.exists(), "{} missing; {so}", s.display());
        assert!(so.contains(&format!("wrote {}", s.display())), "{so}");
    }
    assert!(!out.exists());
    let r = redlite_in_fixtures(&[
        "quantize",
        "--split-max-size",
        "2K",
        "../tiny-s-bf16.gguf",
        out.to_str().unwrap(),
        "Q4_K_M",
    ]);
    assert!(!r.status.success());
    let se = String::from_utf8_lossy(&r.stderr);
    assert!(se.contains("supported units are M"), "{se}");
}

#[test]
fn dry_run_prints_the_mix_and_writes_nothing() {
    let (so, _) = ok(&redlite_in_fixtures(&[
        "quantize",
        "--dry-run",
        "../tiny-s-bf16.gguf",
        "Q4_K_M",
    ]));
    // Q4_K_M on tiny-s (llama-quantize's choice, in the manifest): output
    // and six bumped value/down projections Q6_K, token_embd Q4_K.
    assert!(
        so.lines()
            .any(|l| l.contains("output.weight") && l.contains("-> Q6_K")),
        "{so}"
    );
    assert!(
        so.lines()
            .any(|l| l.contains("token_embd.weight") && l.contains("-> Q4_K")),
        "{so}"
    );
    assert_eq!(
        so.lines().filter(|l| l.contains("-> Q6_K")).count(),
        7,
        "{so}"
    );
    assert!(so.contains("quant size  ="), "{so}");
    let r = redlite_in_fixtures(&["quantize", "--dry-run", "../tiny-s-bf16.gguf", "IQ2_XS"]);
    let (so, _) = ok(&r);
    assert!(so.contains("will require an imatrix"), "{so}");
}
