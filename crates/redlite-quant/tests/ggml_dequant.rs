//! The scalar dequantizers against ggml's own C dequantizers (`to_float` of
//! llama.cpp), on every quantized tensor of the newer-type fixture files:
//! `newtypes/dequant-<TYPE>.json` holds, per tensor, the SHA-256 of ggml's
//! f32 output (little-endian bytes of the whole tensor), its element count
//! and its first 64 values.

use std::collections::HashMap;

use redlite_gguf::{GgmlType, GgufFile};
use sha2::{Digest, Sha256};

fn check_file(file_type: &str, main: GgmlType) {
    let gguf = redlite_testkit::fixture(&format!("newtypes/tiny-s-{file_type}.gguf"));
    let json = redlite_testkit::fixture(&format!("newtypes/dequant-{file_type}.json"));
    assert!(gguf.exists(), "fixture {} missing", gguf.display());
    let refs: HashMap<String, serde_json::Value> = serde_json::from_str(
        &std::fs::read_to_string(&json)
            .unwrap_or_else(|e| panic!("fixture {}: {e}", json.display())),
    )
    .unwrap_or_else(|e| panic!("{}: {e}", json.display()));
    let f = GgufFile::open(&gguf).unwrap_or_else(|e| panic!("{e}"));

    // The reference covers every quantized tensor of the file.
    for t in &f.tensors {
        let plain = matches!(t.ggml_type, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16);
        assert!(
            plain || refs.contains_key(&t.name),
            "{file_type}: {} ({}) has no ggml reference",
            t.name,
            t.ggml_type
        );
    }

    let mut fails = Vec::new();
    let mut n_main = 0;
    for (name, r) in &refs {
        let (info, data) = f
            .tensor(name)
            .unwrap_or_else(|| panic!("{file_type}: {name} missing in the Rust reader"));
        let want_id = r["ggml_type"].as_u64().expect("ggml_type");
        assert_eq!(
            info.ggml_type.id() as u64,
            want_id,
            "{file_type}: {name} type"
        );
        let got = redlite_quant::dequantize_to_vec(info.ggml_type, data)
            .unwrap_or_else(|e| panic!("{file_type}: {name}: {e}"));
        let n = r["n"].as_u64().expect("n") as usize;
        assert_eq!(got.len(), n, "{file_type}: {name} element count");
        let first: Vec<f32> = r["first_64"]
            .as_array()
            .expect("first_64")
            .iter()
            .map(|v| v.as_f64().expect("value") as f32)
            .collect();
        for (i, (g, w)) in got.iter().zip(&first).enumerate() {
            if g.to_bits() != w.to_bits() {
                fails.push(format!(
                    "{name} ({}): value {i}: got {g:e}, ggml {w:e}",
                    info.ggml_type
                ));
                break;
            }
        }
        let mut h = Sha256::new();
        for v in &got {
            h.update(v.to_le_bytes());
        }
        let hex: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
        let want = r["sha256_f32le"].as_str().expect("sha256_f32le");
        if hex != want {
            fails.push(format!(
                "{name} ({}): SHA-256 {hex}, ggml {want}",
                info.ggml_type
            ));
        }
        if info.ggml_type == main {
            n_main += 1;
        }
    }
    assert!(
        fails.is_empty(),
        "{file_type}: {} of {} tensors differ from ggml:\n{}",
        fails.len(),
        refs.len(),
        fails.join("\n")
    );
    assert!(n_main > 0, "{file_type}: no {main} tensor checked");
    println!(
        "{file_type}: {} tensors bit-identical to ggml ({n_main} of type {main})",
        refs.len()
    );
}

#[test]
fn tq1_0_matches_ggml() {
    check_file("TQ1_0", GgmlType::TQ1_0);
}
#[test]
fn tq2_0_matches_ggml() {
    check_file("TQ2_0", GgmlType::TQ2_0);
}
#[test]
fn nvfp4_matches_ggml() {
    check_file("NVFP4", GgmlType::NVFP4);
}
#[test]
fn q1_0_matches_ggml() {
    check_file("Q1_0", GgmlType::Q1_0);
}
#[test]
fn q2_0_matches_ggml() {
    check_file("Q2_0", GgmlType::Q2_0);
}
#[test]
fn mxfp4_moe_matches_ggml() {
    check_file("MXFP4_MOE", GgmlType::MXFP4);
}
