//! `redlite inspect`: what a GGUF file is, for people (`--json` for machines).

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Context, Result};
use redlite_gguf::{GgmlType, GgufFile, MetaArray, MetaValue};
use serde_json::{json, Value};

#[derive(clap::Args)]
pub struct Args {
    /// GGUF file (for a split model, any of its shards).
    pub model: PathBuf,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// Also list every tensor with its shape and type.
    #[arg(long)]
    pub tensors: bool,
    /// Also list every metadata key (long arrays are summarised).
    #[arg(long)]
    pub metadata: bool,
}

/// Hyper-parameter keys shown for every architecture, in display order.
const ARCH_KEYS: &[&str] = &[
    "block_count",
    "nextn_predict_layers",
    "context_length",
    "embedding_length",
    "feed_forward_length",
    "attention.head_count",
    "attention.head_count_kv",
    "attention.key_length",
    "attention.value_length",
    "attention.layer_norm_rms_epsilon",
    "rope.dimension_count",
    "rope.freq_base",
    "expert_count",
    "expert_used_count",
    "expert_feed_forward_length",
    "expert_shared_feed_forward_length",
    "ssm.conv_kernel",
    "ssm.state_size",
    "ssm.group_count",
    "ssm.time_step_rank",
    "ssm.inner_size",
    "full_attention_interval",
];

fn meta_json(v: &MetaValue) -> Value {
    match v {
        MetaValue::String(s) => json!(s),
        MetaValue::Bool(b) => json!(b),
        // Via the shortest decimal of the f32, so 1e-6 prints as 1e-6.
        MetaValue::F32(x) => json!(x.to_string().parse::<f64>().unwrap_or(*x as f64)),
        MetaValue::F64(x) => json!(x),
        MetaValue::Array(a) => array_json(a),
        other => other
            .as_i64()
            .map(|x| json!(x))
            .or_else(|| other.as_u64().map(|x| json!(x)))
            .unwrap_or(Value::Null),
    }
}

fn array_json(a: &MetaArray) -> Value {
    match a {
        MetaArray::String(v) => json!(v),
        MetaArray::F32(v) => json!(v),
        MetaArray::F64(v) => json!(v),
        MetaArray::Bool(v) => json!(v),
        MetaArray::Array(v) => Value::Array(v.iter().map(array_json).collect()),
        other => json!(other.as_i64_vec().unwrap_or_default()),
    }
}

/// Layer schedule as llama.cpp derives it: `attention.recurrent_layers` if
/// present (an array, or one scalar for every layer), else every
/// `full_attention_interval`-th layer is full attention.
fn layer_kinds(f: &GgufFile, arch: &str, n_layer: u64) -> Result<Vec<&'static str>> {
    let kind = |r: bool| if r { "linear" } else { "full" };
    match f.get(&format!("{arch}.attention.recurrent_layers")) {
        Some(MetaValue::Array(a)) => {
            if let Some(v) = a.as_i64_vec() {
                return Ok(v
                    .iter()
                    .take(n_layer as usize)
                    .map(|&r| kind(r != 0))
                    .collect());
            }
        }
        Some(v) => {
            if let Some(r) = v.as_bool().or_else(|| v.as_i64().map(|x| x != 0)) {
                return Ok(vec![kind(r); n_layer as usize]);
            }
        }
        None => {}
    }
    let interval = f
        .get_u64(&format!("{arch}.full_attention_interval"))?
        .unwrap_or(4)
        .max(1);
    Ok((0..n_layer)
        .map(|i| {
            if (i + 1) % interval == 0 {
                "full"
            } else {
                "linear"
            }
        })
        .collect())
}

fn summarise_kinds(kinds: &[&str]) -> String {
    // Compress a periodic schedule: "12 x (3 linear + 1 full)".
    for period in 1..=kinds.len() {
        if kinds.len().is_multiple_of(period) && kinds.chunks(period).all(|c| c == &kinds[..period])
        {
            let mut parts: Vec<String> = Vec::new();
            let mut i = 0;
            while i < period {
                let k = kinds[i];
                let mut j = i;
                while j < period && kinds[j] == k {
                    j += 1;
                }
                parts.push(format!("{} {k}", j - i));
                i = j;
            }
            let reps = kinds.len() / period;
            return if reps == 1 {
                parts.join(" + ")
            } else {
                format!("{reps} x ({})", parts.join(" + "))
            };
        }
    }
    kinds.join(",")
}

fn human_bytes(b: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut x = b as f64;
    let mut u = 0;
    while x >= 1024.0 && u + 1 < units.len() {
        x /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{x:.2} {}", units[u])
    }
}

pub fn run(args: Args) -> Result<()> {
    let f = GgufFile::open(&args.model)
        .with_context(|| format!("cannot read {}", args.model.display()))?;
    let arch = f.architecture()?.to_string();

    let mut hparams = serde_json::Map::new();
    for k in ARCH_KEYS {
        if let Some(v) = f.get(&format!("{arch}.{k}")) {
            hparams.insert((*k).to_string(), meta_json(v));
        }
    }
    let n_block = f.get_u64(&format!("{arch}.block_count"))?.unwrap_or(0);
    let n_mtp = f
        .get_u64(&format!("{arch}.nextn_predict_layers"))?
        .unwrap_or(0);
    let n_layer = n_block.saturating_sub(n_mtp);
    let kinds = layer_kinds(&f, &arch, n_layer)?;
    let n_linear = kinds.iter().filter(|k| **k == "linear").count();
    let mtp_only = redlite_model::mtp_only_blocks(&f);

    // Tokenizer summary.
    let tokens = f.get_str_array("tokenizer.ggml.tokens")?;
    let merges = f.get_str_array("tokenizer.ggml.merges")?;
    let tok_type_counts = match f.get_array("tokenizer.ggml.token_type")? {
        Some(a) => {
            let mut c = BTreeMap::new();
            for t in a.as_i64_vec().unwrap_or_default() {
                let name = match t {
                    1 => "normal",
                    2 => "unknown",
                    3 => "control",
                    4 => "user_defined",
                    5 => "unused",
                    6 => "byte",
                    _ => "other",
                };
                *c.entry(name).or_insert(0u64) += 1;
            }
            c
        }
        None => BTreeMap::new(),
    };
    let token_text = |key: &str| -> Result<Option<Value>> {
        Ok(f.get_u64(key)?.map(|id| {
            let text = tokens.and_then(|t| t.get(id as usize)).cloned();
            json!({"id": id, "text": text})
        }))
    };
    let tokenizer = json!({
        "model": f.get_str("tokenizer.ggml.model")?,
        "pre": f.get_str("tokenizer.ggml.pre")?,
        "vocab_size": tokens.map(|t| t.len()),
        "merges": merges.map(|m| m.len()),
        "token_types": tok_type_counts,
        "bos": token_text("tokenizer.ggml.bos_token_id")?,
        "eos": token_text("tokenizer.ggml.eos_token_id")?,
        "pad": token_text("tokenizer.ggml.padding_token_id")?,
        "add_bos": f.get_bool("tokenizer.ggml.add_bos_token")?,
        "chat_template_bytes": f.get_str("tokenizer.chat_template")?.map(|s| s.len()),
    });

    // Per-type breakdown.
    let mut by_type: BTreeMap<GgmlType, (u64, u64, u64)> = BTreeMap::new();
    for t in &f.tensors {
        let e = by_type.entry(t.ggml_type).or_default();
        e.0 += 1;
        e.1 += t.n_elements();
        e.2 += t.n_bytes;
    }
    let total_params: u64 = f.tensors.iter().map(|t| t.n_elements()).sum();
    let total_bytes: u64 = f.tensors.iter().map(|t| t.n_bytes).sum();

    if args.json {
        let mut out = json!({
            "file": args.model.display().to_string(),
            "shards": f.shard_paths().iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
            "file_bytes": f.file_bytes(),
            "gguf_version": f.version,
            "alignment": f.alignment,
            "architecture": arch,
            "name": f.get_str("general.name")?,
            "file_type": f.get_u64("general.file_type")?,
            "hparams": hparams,
            "layers": {"count": n_layer, "linear": n_linear, "full": kinds.len() - n_linear,
                       "mtp": n_mtp, "kinds": kinds, "pattern": summarise_kinds(&kinds)},
            "tokenizer": tokenizer,
            "mtp_only": mtp_only.as_ref().map(|b| json!({"blocks": b})),
            "unknown_type_tensors": f.unknown_tensors.iter().map(|u| json!({
                "name": u.name, "dims": u.dims, "type_id": u.type_id})).collect::<Vec<_>>(),
            "tensor_count": f.tensors.len(),
            "parameters": total_params,
            "tensor_bytes": total_bytes,
            "bits_per_weight": if total_params > 0 { total_bytes as f64 * 8.0 / total_params as f64 } else { 0.0 },
            "types": by_type.iter().map(|(t, (n, e, b))| json!({
                "type": t.name(), "tensors": n, "elements": e, "bytes": b})).collect::<Vec<_>>(),
        });
        if args.tensors {
            out["tensors"] = Value::Array(
                f.tensors
                    .iter()
                    .map(|t| {
                        json!({"name": t.name, "dims": t.dims, "type": t.ggml_type.name(),
                    "bytes": t.n_bytes, "offset": t.abs_offset, "shard": t.shard})
                    })
                    .collect(),
            );
        }
        if args.metadata {
            let mut m = serde_json::Map::new();
            for (k, v) in &f.metadata {
                m.insert(k.clone(), meta_json(v));
            }
            out["metadata"] = Value::Object(m);
        }
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }

    println!("file          {}", args.model.display());
    if f.shard_paths().len() > 1 {
        println!("shards        {}", f.shard_paths().len());
    }
    println!(
        "size          {} (GGUF v{}, alignment {})",
        human_bytes(f.file_bytes()),
        f.version,
        f.alignment
    );
    println!("architecture  {arch}");
    if let Some(blocks) = &mtp_only {
        println!(
            "kind          MTP-only draft file: only the multi-token-prediction block(s) {} \
             (nextn tensors) plus embeddings and output, no trunk layers; it drafts tokens for \
             the full model and cannot run on its own",
            blocks
                .iter()
                .map(|b| format!("blk.{b}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    if let Some(n) = f.get_str("general.name")? {
        println!("name          {n}");
    }
    println!(
        "parameters    {total_params} ({:.3} B), {:.2} bits per weight",
        total_params as f64 / 1e9,
        if total_params > 0 {
            total_bytes as f64 * 8.0 / total_params as f64
        } else {
            0.0
        }
    );
    println!(
        "layers        {n_layer}: {} linear (Gated DeltaNet) + {} full attention, pattern {}{}",
        n_linear,
        kinds.len() - n_linear,
        summarise_kinds(&kinds),
        if n_mtp > 0 {
            format!(", plus {n_mtp} MTP block(s) (not run)")
        } else {
            String::new()
        }
    );
    let g = |k: &str| hparams.get(k).map(|v| v.to_string());
    if let (Some(e), Some(k)) = (g("expert_count"), g("expert_used_count")) {
        println!(
            "experts       {e} routed, top-{k}, width {}; shared expert width {}",
            g("expert_feed_forward_length").unwrap_or("?".into()),
            g("expert_shared_feed_forward_length").unwrap_or("-".into())
        );
    }
    println!("hyper-parameters:");
    for (k, v) in &hparams {
        println!("  {arch}.{k:<36} {v}");
    }
    println!("tokenizer:");
    for (k, v) in tokenizer.as_object().into_iter().flatten() {
        if !v.is_null() {
            println!("  {k:<20} {v}");
        }
    }
    println!(
        "tensors       {} ({} of data)",
        f.tensors.len(),
        human_bytes(total_bytes)
    );
    for u in &f.unknown_tensors {
        println!(
            "  {} has ggml type id {}, unknown to this build (not counted above)",
            u.name, u.type_id
        );
    }
    println!(
        "  {:<8} {:>8} {:>16} {:>14} {:>7}",
        "type", "tensors", "elements", "bytes", "share"
    );
    for (t, (n, e, b)) in &by_type {
        println!(
            "  {:<8} {:>8} {:>16} {:>14} {:>6.1}%",
            t.name(),
            n,
            e,
            human_bytes(*b),
            *b as f64 * 100.0 / total_bytes.max(1) as f64
        );
    }
    if args.tensors {
        println!("tensor list:");
        for t in &f.tensors {
            println!(
                "  {:<40} {:<8} {:?} {}",
                t.name,
                t.ggml_type.name(),
                t.dims,
                human_bytes(t.n_bytes)
            );
        }
    }
    if args.metadata {
        println!("metadata:");
        for (k, v) in &f.metadata {
            let s = match v {
                MetaValue::String(s) if s.len() > 80 => format!("<string, {} bytes>", s.len()),
                other => other.to_string(),
            };
            println!("  {k} = {s}");
        }
    }
    Ok(())
}
