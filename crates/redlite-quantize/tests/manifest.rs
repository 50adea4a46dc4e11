//! `redlite_quantize` against llama-quantize: for every run of the fixture
//! manifest (61 llama-quantize runs of `tiny-s-bf16.gguf`, with and without
//! `imatrix-tiny-s.gguf`), the per-tensor types must equal llama-quantize's;
//! for every run llama-quantize completed, every tensor's SHA-256, the
//! quantize metadata and the file size must equal too; and the runs
//! llama-quantize refused must be refused for the same reason.

use std::collections::BTreeMap;
use std::path::PathBuf;

use redlite_gguf::{GgufFile, MetaValue};
use redlite_quantize::driver::{plan, QuantizeError};
use redlite_quantize::{quantize_file, FileType, Imatrix, QuantizeOptions, TensorTypeOverride};
use serde_json::Value;
use sha2::{Digest, Sha256};

fn qdir() -> PathBuf {
    redlite_testkit::fixtures_dir().join("quantize")
}

struct Run {
    key: String,
    opts: QuantizeOptions,
    expect: Value,
}

fn runs() -> Vec<Run> {
    let path = qdir().join("manifest-tiny-s.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (the quantize fixtures are required)",
            path.display()
        )
    });
    let m: Value = serde_json::from_str(&text).expect("manifest JSON");
    let imatrix = Imatrix::load(&qdir().join("imatrix-tiny-s.gguf")).expect("imatrix fixture");
    let files = m["files"].as_object().expect("files");
    let mut out = Vec::new();
    for (key, run) in files {
        let cmd: Vec<&str> = run["command"]
            .as_str()
            .expect("command")
            .split(' ')
            .collect();
        assert_eq!(cmd[0], "llama-quantize");
        let mut i = 1;
        let mut im = None;
        let mut tt = Vec::new();
        while cmd[i].starts_with("--") {
            match cmd[i] {
                "--imatrix" => im = Some(cmd[i + 1].to_string()),
                "--tensor-type" => {
                    tt.push(TensorTypeOverride::parse(cmd[i + 1]).expect("override"))
                }
                o => panic!("{key}: option {o} not handled by the test"),
            }
            i += 2;
        }
        let (ftype, _) = FileType::parse(cmd[i + 2]).expect("file type");
        let mut opts = QuantizeOptions::new(ftype);
        opts.mix.tensor_types = tt;
        opts.threads = 2;
        opts.imatrix = im.map(|name| (imatrix.clone(), name));
        out.push(Run {
            key: key.clone(),
            opts,
            expect: run.clone(),
        });
    }
    assert_eq!(out.len(), 61, "manifest runs");
    out
}

fn input() -> PathBuf {
    redlite_testkit::fixtures_dir().join("tiny-s-bf16.gguf")
}

#[test]
fn every_manifest_run_has_llama_quantize_types() {
    let f = GgufFile::open(input()).expect("tiny-s-bf16.gguf");
    for run in runs() {
        let Some(tensors) = run.expect["tensors"].as_object() else {
            continue;
        };
        let p = plan(&f, &run.opts).unwrap_or_else(|e| panic!("{}: {e}", run.key));
        assert_eq!(p.len(), tensors.len(), "{}", run.key);
        // The output's tensor table is in llama.cpp's order.
        let names: Vec<&String> = tensors.keys().collect();
        let ours: Vec<&String> = p.iter().map(|t| &t.name).collect();
        assert_eq!(ours, names, "{}: tensor order", run.key);
        for t in &p {
            let e = &tensors[&t.name];
            assert_eq!(
                t.target.name(),
                e["type"].as_str().unwrap(),
                "{}: {}",
                run.key,
                t.name
            );
            let shape: Vec<u64> = e["shape"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_u64().unwrap())
                .collect();
            assert_eq!(t.dims, shape, "{}: {}", run.key, t.name);
        }
    }
}

fn reproduce(select: impl Fn(&str) -> bool, must: &[&str]) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut exact = Vec::new();
    let mut completed = 0;
    for run in runs().into_iter().filter(|r| select(&r.key)) {
        if run.expect["error"].is_null() {
            completed += 1;
        }
        let out = dir.path().join(format!("{}.gguf", run.key));
        let t0 = std::time::Instant::now();
        let res = quantize_file(&input(), &out, &run.opts, &|_| {});
        eprintln!("{}: {:.2} s", run.key, t0.elapsed().as_secs_f64());
        if let Some(err) = run.expect["error"].as_str() {
            // llama-quantize: "llama_quantize: failed to quantize model from ..."
            // after "this quantization requires an imatrix!".
            assert!(
                err.contains("failed to quantize model"),
                "{}: {err}",
                run.key
            );
            match res {
                Err(QuantizeError::RequiresImatrix { .. }) => {}
                other => panic!("{}: expected the imatrix refusal, got {other:?}", run.key),
            }
            let msg = quantize_file(&input(), &out, &run.opts, &|_| {})
                .unwrap_err()
                .to_string();
            assert!(
                msg.contains("this quantization requires an imatrix!"),
                "{msg}"
            );
            assert!(!out.exists(), "{}: no output on refusal", run.key);
            continue;
        }
        let tensors = run.expect["tensors"].as_object().expect("tensors");
        res.unwrap_or_else(|e| panic!("{}: {e}", run.key));
        let f = GgufFile::open(&out).expect("output opens");
        let mut bad = Vec::new();
        for (name, e) in tensors {
            let (info, data) = f
                .tensor(name)
                .unwrap_or_else(|| panic!("{}: {name} missing", run.key));
            let sha = format!("{:x}", Sha256::digest(data));
            if sha != e["sha256"].as_str().unwrap() {
                bad.push(format!("{name} ({})", info.ggml_type));
            }
        }
        assert!(
            bad.is_empty(),
            "{}: tensors differ from llama-quantize: {bad:?}",
            run.key
        );
        let meta: BTreeMap<&str, &Value> = run.expect["metadata"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.as_str(), v))
            .collect();
        for (k, v) in meta {
            let got = f
                .get(k)
                .unwrap_or_else(|| panic!("{}: {k} missing", run.key));
            match (got, v) {
                (MetaValue::String(s), Value::String(e)) => assert_eq!(s, e, "{}: {k}", run.key),
                (g, Value::Number(n)) => assert_eq!(g.as_u64(), n.as_u64(), "{}: {k}", run.key),
                (g, e) => panic!("{}: {k}: {g:?} vs {e}", run.key),
            }
        }
        let size = std::fs::metadata(&out).unwrap().len();
        assert_eq!(
            size,
            run.expect["bytes"].as_u64().unwrap(),
            "{}: file size",
            run.key
        );
        exact.push(run.key.clone());
        std::fs::remove_file(&out).ok();
    }
    eprintln!(
        "bit for bit with llama-quantize ({}): {exact:?}",
        exact.len()
    );
    // Every run llama-quantize completed is exact (asserted above); the
    // counts and names guard against the selection silently missing one.
    assert_eq!(exact.len(), completed);
    for k in must {
        assert!(exact.iter().any(|e| e == k), "{k} should be reproduced");
    }
}

fn base(key: &str) -> &str {
    key.split('+').next().unwrap_or(key)
}

fn is_k_mix(key: &str) -> bool {
    let b = base(key);
    b.starts_with('Q') && b.contains("_K")
}

fn is_iq(key: &str) -> bool {
    let b = base(key);
    b.starts_with("IQ") || b == "CF2"
}

/// Float, legacy, ternary, Q1_0/Q2_0 and MXFP4 runs.
#[test]
fn simple_types_bit_for_bit() {
    reproduce(
        |k| !is_k_mix(k) && !is_iq(k),
        &[
            "Q4_0",
            "Q4_1",
            "Q5_0",
            "Q5_1",
            "Q8_0",
            "BF16",
            "F16",
            "TQ1_0",
            "TQ2_0",
            "MXFP4_MOE",
            "Q1_0",
            "Q2_0",
            "Q4_0+imatrix",
            "Q4_1+imatrix",
            "Q5_0+imatrix",
            "Q5_1+imatrix",
        ],
    );
}

/// The K-quant mixes, with and without the importance matrix.
#[test]
fn k_quant_mixes_bit_for_bit() {
    reproduce(
        is_k_mix,
        &[
            "Q2_K",
            "Q3_K_S",
            "Q3_K_M",
            "Q3_K_L",
            "Q4_K_S",
            "Q4_K_M",
            "Q5_K_S",
            "Q5_K_M",
            "Q6_K",
            "Q2_K+imatrix",
            "Q2_K_S+imatrix",
            "Q3_K_M+imatrix",
            "Q4_K_M+imatrix",
            "Q6_K+imatrix",
        ],
    );
}

/// The IQ types and CF2 (runs llama-quantize refused included).
#[test]
fn iq_types_and_cf2_bit_for_bit_or_refused() {
    reproduce(
        is_iq,
        &[
            "IQ4_NL",
            "IQ4_XS",
            "IQ4_NL+imatrix",
            "IQ4_XS+imatrix",
            "IQ1_S+imatrix",
            "IQ1_M+imatrix",
            "IQ2_XXS+imatrix",
            "IQ2_XS+imatrix",
            "IQ2_S+imatrix",
            "IQ2_M+imatrix",
            "IQ3_XXS+imatrix",
            "IQ3_XS+imatrix",
            "IQ3_S+imatrix",
            "IQ3_M+imatrix",
            "IQ3_S",
            "IQ3_M",
            "CF2+imatrix",
        ],
    );
}
