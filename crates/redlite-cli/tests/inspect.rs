//! `redlite inspect` on every fixture: the hyper-parameters the fixture
//! README documents, read back through the JSON output.

use std::process::Command;

use serde_json::Value;

fn inspect(file: &str) -> Value {
    let path = redlite_testkit::fixture(file);
    let out = Command::new(env!("CARGO_BIN_EXE_redlite"))
        .args(["inspect", "--json"])
        .arg(&path)
        .output()
        .expect("run redlite");
    assert!(
        out.status.success(),
        "{file}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("valid JSON")
}

#[test]
fn inspect_reports_fixture_hparams() {
    let files = [
        "tiny-a-bf16.gguf",
        "tiny-s-bf16.gguf",
        "tiny-s-Q8_0.gguf",
        "tiny-s-Q8_0-legacy.gguf",
        "tiny-s-Q4_K_M.gguf",
        "tiny-s-Q2_K.gguf",
        "tiny-s-IQ4_XS.gguf",
        "tiny-s-IQ3_XXS.gguf",
        "tiny-s-IQ2_XS.gguf",
        "tiny-s-IQ1_M.gguf",
        "tiny-s-CF2mix.gguf",
        "newtypes/tiny-s-TQ1_0.gguf",
        "newtypes/tiny-s-TQ2_0.gguf",
        "newtypes/tiny-s-NVFP4.gguf",
        "newtypes/tiny-s-Q1_0.gguf",
        "newtypes/tiny-s-Q2_0.gguf",
        "newtypes/tiny-s-MXFP4_MOE.gguf",
    ];
    for file in files {
        let j = inspect(file);
        let tiny_a = file.starts_with("tiny-a");
        let h = &j["hparams"];
        assert_eq!(j["architecture"], "qwen3next", "{file}");
        assert_eq!(j["layers"]["count"], 4, "{file}");
        assert_eq!(j["layers"]["linear"], 3, "{file}");
        assert_eq!(j["layers"]["full"], 1, "{file}");
        assert_eq!(
            j["layers"]["kinds"],
            serde_json::json!(["linear", "linear", "linear", "full"]),
            "{file}"
        );
        assert_eq!(
            h["embedding_length"],
            if tiny_a { 128 } else { 256 },
            "{file}"
        );
        assert_eq!(h["expert_count"], if tiny_a { 8 } else { 4 }, "{file}");
        assert_eq!(h["expert_used_count"], if tiny_a { 3 } else { 2 }, "{file}");
        assert_eq!(h["attention.head_count"], 4, "{file}");
        assert_eq!(h["attention.head_count_kv"], 2, "{file}");
        assert_eq!(h["attention.key_length"], 64, "{file}");
        assert_eq!(h["rope.dimension_count"], 16, "{file}");
        assert_eq!(h["rope.freq_base"].as_f64(), Some(1e7), "{file}");
        assert_eq!(
            h["attention.layer_norm_rms_epsilon"].as_f64(),
            Some(1e-6),
            "{file}"
        );
        assert_eq!(h["ssm.conv_kernel"], 4, "{file}");
        assert_eq!(h["ssm.group_count"], 2, "{file}");
        assert_eq!(h["ssm.time_step_rank"], 4, "{file}");
        assert_eq!(h["ssm.state_size"], if tiny_a { 32 } else { 64 }, "{file}");
        assert_eq!(j["tokenizer"]["vocab_size"], 1024, "{file}");
        assert_eq!(j["tokenizer"]["eos"]["text"], "<|im_end|>", "{file}");
        // Parameter counts from the fixture README.
        assert_eq!(
            j["parameters"],
            if tiny_a { 1_535_864 } else { 5_525_080 },
            "{file}"
        );
        let type_bytes: u64 = j["types"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["bytes"].as_u64().unwrap())
            .sum();
        assert_eq!(Some(type_bytes), j["tensor_bytes"].as_u64(), "{file}");
    }
    // Per-type breakdown of the 2-bit expert mix.
    let j = inspect("tiny-s-CF2mix.gguf");
    let types: Vec<(String, u64)> = j["types"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["type"].as_str().unwrap().to_string(),
                t["tensors"].as_u64().unwrap(),
            )
        })
        .collect();
    assert!(types.contains(&("IQ1_M".into(), 8)), "{types:?}");
    assert!(types.contains(&("IQ2_XS".into(), 4)), "{types:?}");
}

#[test]
fn inspect_human_output_and_errors() {
    let out = Command::new(env!("CARGO_BIN_EXE_redlite"))
        .arg("inspect")
        .arg(redlite_testkit::fixture("tiny-a-bf16.gguf"))
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("3 linear (Gated DeltaNet) + 1 full attention"),
        "{text}"
    );
    assert!(text.contains("8 routed, top-3"), "{text}");
    assert!(text.contains("BF16"), "{text}");

    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.gguf");
    std::fs::write(&bad, b"GGUF\x03\x00\x00\x00\xff").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_redlite"))
        .arg("inspect")
        .arg(&bad)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bad.gguf") && err.contains("truncated"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

/// An MTP-only draft file (embeddings, output and only the `nextn` block,
/// here block 4 built from tiny-s-bf16's block 3): `inspect` says what it
/// is, `run` refuses it with the same words.
#[test]
fn inspect_and_run_name_an_mtp_only_file() {
    use redlite_gguf::{GgmlType, GgufFile, GgufWriter, MetaValue};

    let src = GgufFile::open(redlite_testkit::fixture("tiny-s-bf16.gguf")).expect("fixture");
    let mut w = GgufWriter::new();
    for (k, v) in &src.metadata {
        let v = match k.as_str() {
            "qwen3next.block_count" => MetaValue::U32(5),
            _ => v.clone(),
        };
        w.add_kv(k.clone(), v);
    }
    w.add_u32("qwen3next.nextn_predict_layers", 1);
    for t in &src.tensors {
        let name = match t.name.strip_prefix("blk.3.") {
            Some(rest) => format!("blk.4.{rest}"),
            None if t.name.starts_with("blk.") => continue,
            None => t.name.clone(),
        };
        w.add_tensor(name, &t.dims, t.ggml_type, src.tensor_data(t).to_vec())
            .expect("add tensor");
    }
    for (name, dims) in [
        ("blk.4.nextn.eh_proj.weight", vec![512u64, 256]),
        ("blk.4.nextn.enorm.weight", vec![256]),
        ("blk.4.nextn.hnorm.weight", vec![256]),
    ] {
        let n: u64 = dims.iter().product();
        w.add_tensor(name, &dims, GgmlType::F32, vec![0u8; n as usize * 4])
            .expect("add tensor");
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("draft.gguf");
    w.write_to_path(&path).expect("write");

    let out = Command::new(env!("CARGO_BIN_EXE_redlite"))
        .args(["inspect", "--json"])
        .arg(&path)
        .output()
        .expect("run redlite");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let j: Value = serde_json::from_slice(&out.stdout).expect("valid JSON");
    assert_eq!(j["mtp_only"]["blocks"], serde_json::json!([4]), "{j}");

    let out = Command::new(env!("CARGO_BIN_EXE_redlite"))
        .arg("inspect")
        .arg(&path)
        .output()
        .expect("run redlite");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("MTP-only draft file") && text.contains("blk.4"),
        "{text}"
    );

    let out = Command::new(env!("CARGO_BIN_EXE_redlite"))
        .args(["run", "-n", "1", "-p", "x"])
        .arg(&path)
        .output()
        .expect("run redlite");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("MTP-only draft file"), "{err}");
    assert!(!err.contains("panicked"), "{err}");

    // A normal file is not reported as one.
    let j = inspect("tiny-s-bf16.gguf");
    assert!(j["mtp_only"].is_null(), "{j}");
}
