//! Synthetic `qwen3next` models: random weights with the statistics of the
//! project's fixture models, a small trained byte-level BPE vocabulary, and
//! every metadata key a real Qwen3-Next GGUF carries, written with the GGUF
//! writer. They exercise the whole pipeline (file reading, tokenizer, forward
//! pass, sampling) anywhere, in seconds.

use std::path::Path;

use half::{bf16, f16};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redlite_gguf::{GgmlType, GgufError, GgufWriter, MetaArray, MetaValue};

pub mod full;
pub mod vocab;

pub use full::{build_full, FullConfig, Mix, Progress, VocabMeta};

/// Shape of a synthetic model (the general form of the Qwen3-Next hyper-parameters).
#[derive(Clone, Debug)]
pub struct SynthConfig {
    pub name: String,
    pub n_layer: usize,
    pub full_attention_interval: usize,
    pub d_model: usize,
    pub n_head: usize,
    pub n_head_kv: usize,
    pub head_dim: usize,
    pub n_rot: usize,
    pub rope_theta: f32,
    pub ssm_group_count: usize,
    pub ssm_time_step_rank: usize,
    pub ssm_state_size: usize,
    pub conv_kernel: usize,
    pub n_expert: usize,
    pub n_expert_used: usize,
    pub expert_ff: usize,
    pub shared_ff: usize,
    pub n_merges: usize,
    pub context_length: u32,
    pub rms_eps: f32,
    /// Type of the matrix weights (norms, router, conv and gates stay F32).
    pub weight_type: GgmlType,
    pub seed: u64,
}

impl SynthConfig {
    /// `tiny`: the shape of the tiny-s test model (4 layers: 3 DeltaNet + 1
    /// attention, D = 256, 8 experts top-2), with a ~1.3K-token vocabulary.
    pub fn tiny() -> SynthConfig {
        SynthConfig {
            name: "Red Lite synthetic tiny".into(),
            n_layer: 4,
            full_attention_interval: 4,
            d_model: 256,
            n_head: 4,
            n_head_kv: 2,
            head_dim: 64,
            n_rot: 16,
            rope_theta: 10_000_000.0,
            ssm_group_count: 2,
            ssm_time_step_rank: 4,
            ssm_state_size: 64,
            conv_kernel: 4,
            n_expert: 8,
            n_expert_used: 2,
            expert_ff: 256,
            shared_ff: 256,
            n_merges: 1000,
            context_length: 262_144,
            rms_eps: 1e-6,
            weight_type: GgmlType::BF16,
            seed: 1,
        }
    }

    pub fn preset(name: &str) -> Option<SynthConfig> {
        match name {
            "tiny" => Some(SynthConfig::tiny()),
            _ => None,
        }
    }

    /// Every preset name (`qwen3-coder-next` is built by [`build_full`]).
    pub const PRESETS: &'static [&'static str] = &["tiny", "qwen3-coder-next"];
}

#[derive(Debug, thiserror::Error)]
pub enum SynthError {
    #[error("weight type {0} is not supported by synth (use f32, f16 or bf16)")]
    UnsupportedType(GgmlType),
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error("vocabulary: {0}")]
    Vocab(String),
    #[error("shape: {0}")]
    Shape(String),
}

struct Gen {
    rng: StdRng,
}

impl Gen {
    fn normal(&mut self) -> f32 {
        // Box-Muller.
        let u1: f64 = self.rng.gen::<f64>().max(1e-300);
        let u2: f64 = self.rng.gen();
        ((-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()) as f32
    }
    fn normals(&mut self, n: usize, std: f32, mean: f32) -> Vec<f32> {
        (0..n).map(|_| mean + std * self.normal()).collect()
    }
    fn uniform(&mut self, n: usize, lo: f32, hi: f32) -> Vec<f32> {
        (0..n).map(|_| self.rng.gen_range(lo..hi)).collect()
    }
}

fn encode(values: &[f32], ty: GgmlType) -> Result<Vec<u8>, SynthError> {
    Ok(match ty {
        GgmlType::F32 => values.iter().flat_map(|x| x.to_le_bytes()).collect(),
        GgmlType::F16 => values
            .iter()
            .flat_map(|&x| f16::from_f32(x).to_bits().to_le_bytes())
            .collect(),
        GgmlType::BF16 => values
            .iter()
            .flat_map(|&x| bf16::from_f32(x).to_bits().to_le_bytes())
            .collect(),
        other => return Err(SynthError::UnsupportedType(other)),
    })
}

/// Build the GGUF writer for a synthetic model.
pub fn build(cfg: &SynthConfig) -> Result<GgufWriter, SynthError> {
    let mut g = Gen {
        rng: StdRng::seed_from_u64(cfg.seed),
    };
    let vocab = vocab::train(cfg.n_merges);
    let n_vocab = vocab.tokens.len();
    let d = cfg.d_model;
    let arch = "qwen3next";
    let mut w = GgufWriter::new();
    let k = |s: &str| format!("{arch}.{s}");
    w.add_str("general.architecture", arch);
    w.add_str("general.type", "model");
    w.add_str("general.name", cfg.name.clone());
    w.add_u32(k("block_count"), cfg.n_layer as u32);
    w.add_u32(k("context_length"), cfg.context_length);
    w.add_u32(k("embedding_length"), d as u32);
    w.add_u32(k("feed_forward_length"), (2 * cfg.expert_ff) as u32);
    w.add_u32(k("attention.head_count"), cfg.n_head as u32);
    w.add_u32(k("attention.head_count_kv"), cfg.n_head_kv as u32);
    w.add_f32(k("rope.freq_base"), cfg.rope_theta);
    w.add_f32(k("attention.layer_norm_rms_epsilon"), cfg.rms_eps);
    w.add_u32(k("expert_count"), cfg.n_expert as u32);
    w.add_u32(k("expert_used_count"), cfg.n_expert_used as u32);
    w.add_u32(k("attention.key_length"), cfg.head_dim as u32);
    w.add_u32(k("attention.value_length"), cfg.head_dim as u32);
    w.add_u32(k("expert_feed_forward_length"), cfg.expert_ff as u32);
    w.add_u32(k("expert_shared_feed_forward_length"), cfg.shared_ff as u32);
    w.add_u32(k("ssm.conv_kernel"), cfg.conv_kernel as u32);
    w.add_u32(k("ssm.state_size"), cfg.ssm_state_size as u32);
    w.add_u32(k("ssm.group_count"), cfg.ssm_group_count as u32);
    w.add_u32(k("ssm.time_step_rank"), cfg.ssm_time_step_rank as u32);
    let d_v = cfg.ssm_state_size;
    w.add_u32(k("ssm.inner_size"), (d_v * cfg.ssm_time_step_rank) as u32);
    let interval = cfg.full_attention_interval.max(1);
    let recurrent: Vec<bool> = (0..cfg.n_layer).map(|i| (i + 1) % interval != 0).collect();
    w.add_array(
        k("attention.recurrent_layers"),
        MetaArray::Bool(recurrent.clone()),
    );
    w.add_u32(k("full_attention_interval"), interval as u32);
    w.add_u32(k("rope.dimension_count"), cfg.n_rot as u32);
    w.add_str("tokenizer.ggml.model", "gpt2");
    w.add_str("tokenizer.ggml.pre", "qwen2");
    let eos = vocab.id("<|im_end|>").unwrap_or(0);
    let eot = vocab.id("<|endoftext|>").unwrap_or(0);
    w.add_array(
        "tokenizer.ggml.tokens",
        MetaArray::String(vocab.tokens.clone()),
    );
    w.add_array(
        "tokenizer.ggml.token_type",
        MetaArray::I32(vocab.token_types.clone()),
    );
    w.add_array(
        "tokenizer.ggml.merges",
        MetaArray::String(vocab.merges.clone()),
    );
    w.add_u32("tokenizer.ggml.eos_token_id", eos);
    w.add_u32("tokenizer.ggml.padding_token_id", eot);
    w.add_u32("tokenizer.ggml.bos_token_id", eot);
    w.add_bool("tokenizer.ggml.add_bos_token", false);
    w.add_kv("general.quantization_version", MetaValue::U32(2));

    let wt = cfg.weight_type;
    let h = d as f32;
    // Matrix weight {n_in, n_out, n_exp}: N(0, 1/fan_in) unless a std is given.
    let mat = |w: &mut GgufWriter,
               g: &mut Gen,
               name: String,
               dims: &[u64],
               std: f32|
     -> Result<(), SynthError> {
        let n: u64 = dims.iter().product();
        let v = g.normals(n as usize, std, 0.0);
        w.add_tensor(name, dims, wt, encode(&v, wt)?)?;
        Ok(())
    };
    let f32t =
        |w: &mut GgufWriter, name: String, dims: &[u64], v: Vec<f32>| -> Result<(), SynthError> {
            w.add_f32_tensor(name, dims, &v)?;
            Ok(())
        };
    let du = d as u64;
    mat(
        &mut w,
        &mut g,
        "token_embd.weight".into(),
        &[du, n_vocab as u64],
        1.0,
    )?;
    let norm = g.normals(d, 0.25, 1.0);
    f32t(&mut w, "output_norm.weight".into(), &[du], norm)?;
    mat(
        &mut w,
        &mut g,
        "output.weight".into(),
        &[du, n_vocab as u64],
        2.8 / h.sqrt(),
    )?;
    let inv = |fan_in: usize| 1.0 / (fan_in as f32).sqrt();
    let (hk, hv, dk) = (
        cfg.ssm_group_count,
        cfg.ssm_time_step_rank,
        cfg.ssm_state_size,
    );
    let conv_dim = 2 * hk * dk + hv * d_v;
    let (e, ff, sff) = (
        cfg.n_expert as u64,
        cfg.expert_ff as u64,
        cfg.shared_ff as u64,
    );
    for (il, &rec) in recurrent.iter().enumerate() {
        let b = |s: &str| format!("blk.{il}.{s}");
        let v = g.normals(d, 0.25, 1.0);
        f32t(&mut w, b("attn_norm.weight"), &[du], v)?;
        let v = g.normals(d, 0.25, 1.0);
        f32t(&mut w, b("post_attention_norm.weight"), &[du], v)?;
        if rec {
            mat(
                &mut w,
                &mut g,
                b("attn_qkv.weight"),
                &[du, conv_dim as u64],
                inv(d),
            )?;
            mat(
                &mut w,
                &mut g,
                b("attn_gate.weight"),
                &[du, (hv * d_v) as u64],
                inv(d),
            )?;
            mat(
                &mut w,
                &mut g,
                b("ssm_ba.weight"),
                &[du, (2 * hv) as u64],
                inv(d),
            )?;
            let v = g.normals(conv_dim * cfg.conv_kernel, 0.45, 0.0);
            f32t(
                &mut w,
                b("ssm_conv1d.weight"),
                &[cfg.conv_kernel as u64, conv_dim as u64],
                v,
            )?;
            let v = g.uniform(hv, -2.0, 1.0);
            f32t(&mut w, b("ssm_dt.bias"), &[hv as u64], v)?;
            let v = g.uniform(hv, 0.05, 4.0).into_iter().map(|a| -a).collect();
            f32t(&mut w, b("ssm_a"), &[hv as u64], v)?;
            let v = g.uniform(d_v, 0.5, 1.5);
            f32t(&mut w, b("ssm_norm.weight"), &[d_v as u64], v)?;
            mat(
                &mut w,
                &mut g,
                b("ssm_out.weight"),
                &[(hv * d_v) as u64, du],
                inv(hv * d_v),
            )?;
        } else {
            let (nh, nkv, hd) = (cfg.n_head as u64, cfg.n_head_kv as u64, cfg.head_dim as u64);
            mat(
                &mut w,
                &mut g,
                b("attn_q.weight"),
                &[du, 2 * nh * hd],
                inv(d),
            )?;
            mat(&mut w, &mut g, b("attn_k.weight"), &[du, nkv * hd], inv(d))?;
            mat(&mut w, &mut g, b("attn_v.weight"), &[du, nkv * hd], inv(d))?;
            mat(
                &mut w,
                &mut g,
                b("attn_output.weight"),
                &[nh * hd, du],
                inv((nh * hd) as usize),
            )?;
            let v = g.normals(hd as usize, 0.25, 1.0);
            f32t(&mut w, b("attn_q_norm.weight"), &[hd], v)?;
            let v = g.normals(hd as usize, 0.25, 1.0);
            f32t(&mut w, b("attn_k_norm.weight"), &[hd], v)?;
        }
        let v = g.normals(d * e as usize, 2.0 / h.sqrt(), 0.0);
        f32t(&mut w, b("ffn_gate_inp.weight"), &[du, e], v)?;
        mat(
            &mut w,
            &mut g,
            b("ffn_gate_exps.weight"),
            &[du, ff, e],
            inv(d),
        )?;
        mat(
            &mut w,
            &mut g,
            b("ffn_up_exps.weight"),
            &[du, ff, e],
            inv(d),
        )?;
        mat(
            &mut w,
            &mut g,
            b("ffn_down_exps.weight"),
            &[ff, du, e],
            inv(ff as usize),
        )?;
        let v = g.normals(d, 1.5 / h.sqrt(), 0.0);
        f32t(&mut w, b("ffn_gate_inp_shexp.weight"), &[du], v)?;
        mat(
            &mut w,
            &mut g,
            b("ffn_gate_shexp.weight"),
            &[du, sff],
            inv(d),
        )?;
        mat(&mut w, &mut g, b("ffn_up_shexp.weight"), &[du, sff], inv(d))?;
        mat(
            &mut w,
            &mut g,
            b("ffn_down_shexp.weight"),
            &[sff, du],
            inv(sff as usize),
        )?;
    }
    Ok(w)
}

/// Write a synthetic model to `path`.
pub fn write(cfg: &SynthConfig, path: &Path) -> Result<(), SynthError> {
    build(cfg)?.write_to_path(path)?;
    Ok(())
}
