//! Files llama.cpp accepts in forms other than its own converter's output:
//! `ssm_dt` without `.bias` (Ollama's exports), `attention.recurrent_layers`
//! as one scalar or as integers, and MTP-only draft files (refused, saying
//! what they are). Each case is derived from tiny-s-bf16.gguf at test time.

mod common;

use std::path::{Path, PathBuf};

use common::*;
use redlite_gguf::{GgmlType, GgufFile, GgufWriter, MetaArray, MetaValue};
use redlite_model::{mtp_only_blocks, Config, Model, ModelError};
use redlite_testkit::fixture;

/// A copy of tiny-s-bf16 written to `dir`: `meta` maps each key/value to
/// its replacement (None drops it), `tensor` each tensor's name to a new name
/// (None drops it); `extra` tensors are appended.
fn derive(
    dir: &Path,
    meta: impl Fn(&str, &MetaValue) -> Option<MetaValue>,
    tensor: impl Fn(&str) -> Option<String>,
    extra: Vec<(String, Vec<u64>, GgmlType, Vec<u8>)>,
) -> PathBuf {
    let src = GgufFile::open(fixture("tiny-s-bf16.gguf")).expect("fixture opens");
    let mut w = GgufWriter::new();
    for (k, v) in &src.metadata {
        if let Some(v) = meta(k, v) {
            w.add_kv(k.clone(), v);
        }
    }
    for t in &src.tensors {
        if let Some(name) = tensor(&t.name) {
            w.add_tensor(name, &t.dims, t.ggml_type, src.tensor_data(t).to_vec())
                .expect("add tensor");
        }
    }
    for (name, dims, ty, bytes) in extra {
        w.add_tensor(name, &dims, ty, bytes).expect("add tensor");
    }
    let path = dir.join("derived.gguf");
    w.write_to_path(&path).expect("write");
    path
}

fn same_logits(a: &Model, b: &Model) {
    let p = prompts();
    for name in ["hello", "code"] {
        let tokens = prompt_ids(&p, name);
        assert_eq!(
            run(a, &tokens, tokens.len()),
            run(b, &tokens, tokens.len()),
            "{name}: logits differ"
        );
    }
}

#[test]
fn ssm_dt_without_bias_suffix_loads() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = derive(
        dir.path(),
        |_, v| Some(v.clone()),
        |n| Some(n.strip_suffix(".bias").unwrap_or(n).to_string()),
        Vec::new(),
    );
    let f = GgufFile::open(&path).expect("opens");
    assert!(
        f.tensor_info("blk.0.ssm_dt").is_some() && f.tensor_info("blk.0.ssm_dt.bias").is_none()
    );
    let renamed = Model::load(&path).expect("ssm_dt without .bias loads");
    same_logits(&renamed, &load("tiny-s-bf16.gguf"));
}

fn config_with_recurrent(v: MetaValue) -> Config {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = derive(
        dir.path(),
        |k, old| {
            Some(if k == "qwen3next.attention.recurrent_layers" {
                v.clone()
            } else {
                old.clone()
            })
        },
        |n| Some(n.to_string()),
        Vec::new(),
    );
    let f = GgufFile::open(&path).expect("opens");
    Config::from_gguf(&f).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn recurrent_layers_scalar_or_array() {
    // llama.cpp's get_key_or_arr: one scalar applies to every layer.
    for (v, want) in [
        (MetaValue::U32(1), vec![true; 4]),
        (MetaValue::U32(0), vec![false; 4]),
        (MetaValue::Bool(true), vec![true; 4]),
        (
            MetaValue::Array(MetaArray::U32(vec![1, 1, 1, 0])),
            vec![true, true, true, false],
        ),
        (
            MetaValue::Array(MetaArray::Bool(vec![true, false, true, false])),
            vec![true, false, true, false],
        ),
    ] {
        let c = config_with_recurrent(v.clone());
        assert_eq!(c.recurrent, want, "{v}");
    }
    // An integer array runs exactly like the bool array of the fixture.
    let dir = tempfile::tempdir().expect("tempdir");
    let path = derive(
        dir.path(),
        |k, old| {
            Some(if k == "qwen3next.attention.recurrent_layers" {
                MetaValue::Array(MetaArray::U32(vec![1, 1, 1, 0]))
            } else {
                old.clone()
            })
        },
        |n| Some(n.to_string()),
        Vec::new(),
    );
    same_logits(
        &Model::load(&path).expect("loads"),
        &load("tiny-s-bf16.gguf"),
    );
}

/// An MTP-only draft file as llama.cpp's converter writes it with `--mtp`:
/// embeddings, output and block 4 (= block_count − 1) with the attention and
/// MoE tensors of an attention block plus its `nextn` tensors.
fn mtp_only_file(dir: &Path) -> PathBuf {
    let d = 256u64;
    let f32s = |n: usize, v: f32| -> Vec<u8> { (0..n).flat_map(|_| v.to_le_bytes()).collect() };
    derive(
        dir,
        |k, v| match k {
            "qwen3next.block_count" => Some(MetaValue::U32(5)),
            _ => Some(v.clone()),
        },
        |n| {
            if let Some(rest) = n.strip_prefix("blk.3.") {
                Some(format!("blk.4.{rest}"))
            } else if n.starts_with("blk.") {
                None
            } else {
                Some(n.to_string())
            }
        },
        vec![
            (
                "blk.4.nextn.eh_proj.weight".into(),
                vec![2 * d, d],
                GgmlType::F32,
                f32s(2 * 256 * 256, 0.01),
            ),
            (
                "blk.4.nextn.enorm.weight".into(),
                vec![d],
                GgmlType::F32,
                f32s(256, 1.0),
            ),
            (
                "blk.4.nextn.hnorm.weight".into(),
                vec![d],
                GgmlType::F32,
                f32s(256, 1.0),
            ),
            (
                "blk.4.nextn.shared_head_norm.weight".into(),
                vec![d],
                GgmlType::F32,
                f32s(256, 1.0),
            ),
        ],
    )
}

#[test]
fn mtp_only_draft_file_is_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = mtp_only_file(dir.path());
    // With nextn_predict_layers = 1 and without it.
    for with_key in [false, true] {
        if with_key {
            let src = GgufFile::open(&path).expect("opens");
            let mut w = GgufWriter::new();
            for (k, v) in &src.metadata {
                w.add_kv(k.clone(), v.clone());
            }
            w.add_u32("qwen3next.nextn_predict_layers", 1);
            for t in &src.tensors {
                w.add_tensor(
                    t.name.clone(),
                    &t.dims,
                    t.ggml_type,
                    src.tensor_data(t).to_vec(),
                )
                .expect("add tensor");
            }
            w.write_to_path(&path).expect("rewrite");
        }
        let f = GgufFile::open(&path).expect("opens");
        assert_eq!(mtp_only_blocks(&f), Some(vec![4]));
        match Model::load(&path) {
            Err(e @ ModelError::MtpOnly { .. }) => {
                let msg = e.to_string();
                assert!(
                    msg.contains("MTP-only draft file") && msg.contains("blk.4"),
                    "{msg}"
                );
            }
            Err(e) => panic!("wrong error for an MTP-only file: {e}"),
            Ok(_) => panic!("an MTP-only file loaded"),
        }
    }
    // A full model with an MTP block is not an MTP-only file.
    let full = GgufFile::open(fixture("tiny-s-bf16.gguf")).expect("fixture opens");
    assert_eq!(mtp_only_blocks(&full), None);
}
