//! Malformed or unsupported files give errors naming the tensor or key,
//! never a panic. Each case is a copy of tiny-s-bf16.gguf with one change.

use redlite_gguf::{GgmlType, GgufFile, GgufWriter, MetaArray, MetaValue};
use redlite_model::{Model, ModelError};
use redlite_testkit::fixture;

/// Copy tiny-s-bf16 through `edit_meta` / `edit_tensor` into a temporary file
/// and try to load it.
fn load_modified(
    edit_meta: impl Fn(&str, &MetaValue) -> Option<MetaValue>,
    edit_tensor: impl Fn(&str, &[u64], GgmlType, &[u8]) -> Option<(Vec<u64>, GgmlType, Vec<u8>)>,
) -> Result<Model, ModelError> {
    let src = GgufFile::open(fixture("tiny-s-bf16.gguf")).expect("fixture opens");
    let mut w = GgufWriter::new();
    for (k, v) in &src.metadata {
        if let Some(v) = edit_meta(k, v) {
            w.add_kv(k.clone(), v);
        }
    }
    for t in &src.tensors {
        let data = src.tensor_data(t);
        if let Some((dims, ty, bytes)) = edit_tensor(&t.name, &t.dims, t.ggml_type, data) {
            w.add_tensor(t.name.clone(), &dims, ty, bytes)
                .expect("add tensor");
        }
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("m.gguf");
    w.write_to_path(&path).expect("write");
    Model::load(&path)
}

fn keep_meta(_: &str, v: &MetaValue) -> Option<MetaValue> {
    Some(v.clone())
}

fn keep_tensor(
    _: &str,
    d: &[u64],
    ty: GgmlType,
    b: &[u8],
) -> Option<(Vec<u64>, GgmlType, Vec<u8>)> {
    Some((d.to_vec(), ty, b.to_vec()))
}

fn err_text(r: Result<Model, ModelError>) -> String {
    match r {
        Ok(_) => panic!("a malformed file loaded"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn unmodified_copy_loads() {
    let m = load_modified(keep_meta, keep_tensor).expect("copy loads");
    assert_eq!(m.config().n_layer, 4);
    assert_eq!(m.config().vocab_size, 1024);
}

#[test]
fn missing_tensor_is_named() {
    let e = err_text(load_modified(keep_meta, |n, d, ty, b| {
        (n != "blk.1.ssm_out.weight").then(|| (d.to_vec(), ty, b.to_vec()))
    }));
    assert!(
        e.contains("blk.1.ssm_out.weight") && e.contains("missing"),
        "{e}"
    );
}

#[test]
fn missing_expert_tensor_is_named() {
    let e = err_text(load_modified(keep_meta, |n, d, ty, b| {
        (n != "blk.3.ffn_down_exps.weight").then(|| (d.to_vec(), ty, b.to_vec()))
    }));
    assert!(e.contains("blk.3.ffn_down_exps.weight"), "{e}");
}

#[test]
fn wrong_shape_is_named() {
    let e = err_text(load_modified(keep_meta, |n, d, ty, b| {
        if n == "blk.0.attn_qkv.weight" {
            // Half the rows.
            Some((vec![d[0], d[1] / 2], ty, b[..b.len() / 2].to_vec()))
        } else {
            Some((d.to_vec(), ty, b.to_vec()))
        }
    }));
    assert!(
        e.contains("blk.0.attn_qkv.weight") && e.contains("shape"),
        "{e}"
    );
}

#[test]
fn transposed_matrix_is_named() {
    let e = err_text(load_modified(keep_meta, |n, d, ty, b| {
        if n == "blk.3.attn_k.weight" {
            Some((vec![d[1], d[0]], ty, b.to_vec()))
        } else {
            Some((d.to_vec(), ty, b.to_vec()))
        }
    }));
    assert!(e.contains("blk.3.attn_k.weight"), "{e}");
}

#[test]
fn unsupported_type_is_named() {
    // Same bytes, relabelled as I16 (an integer type with no kernels).
    let e = err_text(load_modified(keep_meta, |n, d, ty, b| {
        let ty = if n == "blk.2.ffn_up_shexp.weight" {
            GgmlType::I16
        } else {
            ty
        };
        Some((d.to_vec(), ty, b.to_vec()))
    }));
    assert!(
        e.contains("blk.2.ffn_up_shexp.weight") && e.contains("not supported"),
        "{e}"
    );
}

#[test]
fn unsupported_architecture_is_reported() {
    let e = err_text(load_modified(
        |k, v| {
            if k == "general.architecture" {
                Some(MetaValue::String("llama".into()))
            } else {
                Some(v.clone())
            }
        },
        keep_tensor,
    ));
    assert!(e.contains("llama") && e.contains("qwen3next"), "{e}");
}

#[test]
fn missing_key_is_named() {
    let e = err_text(load_modified(
        |k, v| (k != "qwen3next.ssm.state_size").then(|| v.clone()),
        keep_tensor,
    ));
    assert!(e.contains("qwen3next.ssm.state_size"), "{e}");
}

/// Hyper-parameters that would load and compute garbage: each is refused
/// with an error naming the key.
#[test]
fn bad_hyper_parameters_are_named() {
    let set = |key: &'static str, val: MetaValue| {
        move |k: &str, v: &MetaValue| Some(if k == key { val.clone() } else { v.clone() })
    };
    let eps = "qwen3next.attention.layer_norm_rms_epsilon";
    for bad in [f32::NAN, f32::INFINITY, 0.0, -1e-6] {
        let e = err_text(load_modified(set(eps, MetaValue::F32(bad)), keep_tensor));
        assert!(e.contains(eps), "{bad}: {e}");
    }
    let base = "qwen3next.rope.freq_base";
    for bad in [0.0, -10000.0, f32::NAN, f32::INFINITY] {
        let e = err_text(load_modified(set(base, MetaValue::F32(bad)), keep_tensor));
        assert!(e.contains(base), "{bad}: {e}");
    }
    // The layer schedule has one entry per block (tiny-s has 4).
    let rl = "qwen3next.attention.recurrent_layers";
    for n in [3, 5] {
        let arr = MetaValue::Array(MetaArray::Bool(vec![true; n]));
        let e = err_text(load_modified(set(rl, arr), keep_tensor));
        assert!(e.contains(rl) && e.contains("block_count is 4"), "{n}: {e}");
    }
    let hk = "qwen3next.attention.head_count_kv";
    let e = err_text(load_modified(set(hk, MetaValue::U32(3)), keep_tensor));
    assert!(e.contains(hk), "{e}");
    // The unmodified values load (the checks are not over-eager).
    let ok = MetaValue::Array(MetaArray::Bool(vec![true, true, true, false]));
    load_modified(set(rl, ok), keep_tensor).expect("the fixture's own schedule loads");
}

#[test]
fn bad_token_is_an_error() {
    let m = Model::load(&fixture("tiny-s-bf16.gguf")).expect("loads");
    let mut st = m.new_state();
    let e = m
        .forward(&mut st, &[5, 1024], true)
        .expect_err("token 1024 is out of range");
    assert!(
        matches!(
            e,
            ModelError::Token {
                token: 1024,
                index: 1,
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(st.pos(), 0);
    assert!(m.forward(&mut st, &[], true).is_err());
}

/// tiny-s-bf16 plus, when `extra` is true, an unused `blk.3.nextn.eh_proj.weight`;
/// then the type id of tensor `patch` is overwritten with `id` (a type this
/// build does not know). Returns the load result.
fn load_with_type_id(extra: bool, patch: &str, id: u32) -> Result<Model, ModelError> {
    let src = GgufFile::open(fixture("tiny-s-bf16.gguf")).expect("fixture opens");
    let mut w = GgufWriter::new();
    for (k, v) in &src.metadata {
        w.add_kv(k.clone(), v.clone());
    }
    for t in &src.tensors {
        w.add_tensor(
            t.name.clone(),
            &t.dims,
            t.ggml_type,
            src.tensor_data(t).to_vec(),
        )
        .expect("add tensor");
    }
    if extra {
        w.add_f32_tensor("blk.3.nextn.eh_proj.weight", &[256, 2], &[0.25; 512])
            .expect("add tensor");
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("m.gguf");
    w.write_to_path(&path).expect("write");
    let mut bytes = std::fs::read(&path).expect("read back");
    // The tensor record: u64 name length, name, u32 n_dims, u64 dims, u32 type.
    let mut rec = (patch.len() as u64).to_le_bytes().to_vec();
    rec.extend_from_slice(patch.as_bytes());
    let at = bytes
        .windows(rec.len())
        .position(|w| w == rec.as_slice())
        .expect("tensor record present")
        + rec.len();
    let n_dims = u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes")) as usize;
    let ty_at = at + 4 + 8 * n_dims;
    bytes[ty_at..ty_at + 4].copy_from_slice(&id.to_le_bytes());
    std::fs::write(&path, &bytes).expect("rewrite");
    Model::load(&path)
}

#[test]
fn unknown_type_in_an_unused_tensor_loads() {
    let m = load_with_type_id(true, "blk.3.nextn.eh_proj.weight", 4242)
        .expect("an unknown type in a tensor the model never uses must not stop the load");
    assert_eq!(m.config().n_layer, 4);
}

#[test]
fn unknown_type_in_a_used_tensor_is_named() {
    for name in [
        "blk.2.ffn_up_shexp.weight",
        "token_embd.weight",
        "blk.3.attn_q.weight",
    ] {
        let e = err_text(load_with_type_id(false, name, 4242));
        assert!(e.contains(name) && e.contains("4242"), "{e}");
    }
}
