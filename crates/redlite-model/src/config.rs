//! Hyper-parameters read from the GGUF metadata (`qwen3next.*`).

use std::path::PathBuf;

use redlite_gguf::{GgufFile, MetaValue};

use crate::rope::RopeScaling;
use crate::{ModelError, ARCH};

/// The model's sizes. Every value comes from the file.
#[derive(Clone, Debug)]
pub struct Config {
    /// Rows of the token embedding / LM head.
    pub vocab_size: usize,
    /// Trunk layers (`block_count − nextn_predict_layers`).
    pub n_layer: usize,
    /// Trailing MTP blocks present in the file (not executed).
    pub nextn_predict_layers: usize,
    /// Trained context length (informational: the engine has no limit).
    pub context_length: usize,
    /// Hidden size D.
    pub n_embd: usize,
    pub n_head: usize,
    pub n_head_kv: usize,
    pub head_dim: usize,
    /// Rotated dims per head (partial NeoX RoPE).
    pub n_rot: usize,
    pub rope_theta: f32,
    /// `rope.scaling.*` (none, linear or YaRN).
    pub rope_scaling: RopeScaling,
    pub rms_eps: f32,
    pub n_expert: usize,
    pub n_expert_used: usize,
    pub expert_ff: usize,
    pub shexp_ff: usize,
    /// DeltaNet: causal conv taps K.
    pub conv_kernel: usize,
    /// DeltaNet: key heads H_k.
    pub ssm_h_k: usize,
    /// DeltaNet: value heads H_v.
    pub ssm_h_v: usize,
    /// DeltaNet: key head dim d_k.
    pub ssm_d_k: usize,
    /// DeltaNet: value head dim d_v.
    pub ssm_d_v: usize,
    /// Per trunk layer: true = Gated DeltaNet, false = full attention.
    pub recurrent: Vec<bool>,
}

impl Config {
    /// conv channels: `2·H_k·d_k + H_v·d_v`.
    pub fn conv_dim(&self) -> usize {
        2 * self.ssm_h_k * self.ssm_d_k + self.ssm_h_v * self.ssm_d_v
    }
    pub fn value_dim(&self) -> usize {
        self.ssm_h_v * self.ssm_d_v
    }
    pub fn key_dim(&self) -> usize {
        self.ssm_h_k * self.ssm_d_k
    }

    pub fn from_gguf(f: &GgufFile) -> Result<Config, ModelError> {
        let path: PathBuf = f.path().to_path_buf();
        let arch = f.architecture()?;
        if arch != ARCH {
            return Err(ModelError::Architecture {
                path,
                arch: arch.to_string(),
            });
        }
        let key = |k: &str| format!("{ARCH}.{k}");
        let bad = |k: &str, msg: String| ModelError::Key {
            path: path.clone(),
            key: key(k),
            msg,
        };
        let req = |k: &str| -> Result<usize, ModelError> {
            let v = f.require_u64(&key(k))?;
            usize::try_from(v)
                .ok()
                .filter(|&v| v > 0)
                .ok_or_else(|| bad(k, format!("value {v} must be a positive size")))
        };
        let opt = |k: &str| -> Result<Option<usize>, ModelError> {
            Ok(f.get_u64(&key(k))?.map(|v| v as usize))
        };
        let block_count = req("block_count")?;
        let nextn = opt("nextn_predict_layers")?.unwrap_or(0);
        if nextn >= block_count {
            return Err(bad(
                "nextn_predict_layers",
                format!("{nextn} is not below block_count {block_count}"),
            ));
        }
        let n_layer = block_count - nextn;
        let n_head = req("attention.head_count")?;
        let n_head_kv = req("attention.head_count_kv")?;
        let head_dim = req("attention.key_length")?;
        if let Some(vl) = opt("attention.value_length")? {
            if vl != head_dim {
                return Err(bad(
                    "attention.value_length",
                    format!("{vl} differs from key_length {head_dim} (not supported)"),
                ));
            }
        }
        if n_head % n_head_kv != 0 {
            return Err(bad(
                "attention.head_count_kv",
                format!("{n_head_kv} does not divide head_count {n_head}"),
            ));
        }
        let n_rot = opt("rope.dimension_count")?.unwrap_or(head_dim);
        if n_rot > head_dim || n_rot % 2 != 0 {
            return Err(bad(
                "rope.dimension_count",
                format!("{n_rot} must be even and at most the head dim {head_dim}"),
            ));
        }
        let rope_theta = f.get_f64(&key("rope.freq_base"))?.unwrap_or(10000.0);
        if !(rope_theta.is_finite() && rope_theta > 0.0 && (rope_theta as f32).is_finite()) {
            return Err(bad(
                "rope.freq_base",
                format!("{rope_theta} must be a finite positive number"),
            ));
        }
        let rope_theta = rope_theta as f32;
        let rms_eps = f.require_f64(&key("attention.layer_norm_rms_epsilon"))?;
        // f32's smallest normal number: below it the epsilon vanishes
        // against any realistic mean square.
        if !(rms_eps.is_finite() && rms_eps >= f32::MIN_POSITIVE as f64 && rms_eps < 1.0) {
            return Err(bad(
                "attention.layer_norm_rms_epsilon",
                format!("{rms_eps} must be a finite positive number below 1"),
            ));
        }
        let rms_eps = rms_eps as f32;
        let n_expert = req("expert_count")?;
        let n_expert_used = req("expert_used_count")?;
        if n_expert_used > n_expert {
            return Err(bad(
                "expert_used_count",
                format!("{n_expert_used} exceeds expert_count {n_expert}"),
            ));
        }
        let expert_ff = req("expert_feed_forward_length")?;
        let shexp_ff = opt("expert_shared_feed_forward_length")?.unwrap_or(expert_ff);
        let conv_kernel = req("ssm.conv_kernel")?;
        let ssm_d_k = req("ssm.state_size")?;
        let ssm_h_k = req("ssm.group_count")?;
        let ssm_h_v = req("ssm.time_step_rank")?;
        let inner = req("ssm.inner_size")?;
        if ssm_h_v % ssm_h_k != 0 {
            return Err(bad(
                "ssm.group_count",
                format!("{ssm_h_k} does not divide time_step_rank {ssm_h_v}"),
            ));
        }
        if inner % ssm_h_v != 0 {
            return Err(bad(
                "ssm.inner_size",
                format!("{inner} is not a multiple of time_step_rank {ssm_h_v}"),
            ));
        }
        let ssm_d_v = inner / ssm_h_v;
        // llama.cpp reads this key with get_key_or_arr: an array (one entry
        // per block) or one scalar that applies to every block.
        let recurrent = match f.get(&key("attention.recurrent_layers")) {
            Some(MetaValue::Array(a)) => {
                let v = a.as_i64_vec().ok_or_else(|| {
                    bad(
                        "attention.recurrent_layers",
                        "expected an array of bools or integers".into(),
                    )
                })?;
                if v.len() != block_count {
                    return Err(bad(
                        "attention.recurrent_layers",
                        format!(
                            "{} entries, but block_count is {block_count} (one entry per block)",
                            v.len()
                        ),
                    ));
                }
                v[..n_layer].iter().map(|&x| x != 0).collect()
            }
            Some(v) => {
                let on = v
                    .as_bool()
                    .or_else(|| v.as_i64().map(|x| x != 0))
                    .ok_or_else(|| {
                        bad(
                            "attention.recurrent_layers",
                            format!("expected an array or one bool/integer, found {v}"),
                        )
                    })?;
                vec![on; n_layer]
            }
            None => {
                let interval = opt("full_attention_interval")?.unwrap_or(4).max(1);
                (0..n_layer).map(|i| (i + 1) % interval != 0).collect()
            }
        };
        let (vocab_size, embd) = match f.tensor_info("token_embd.weight") {
            Some(t) if t.dims.len() == 2 => (t.dims[1] as usize, t.dims[0] as usize),
            Some(t) => {
                return Err(ModelError::Tensor {
                    path,
                    tensor: t.name.clone(),
                    msg: format!("expected 2 dimensions, found {:?}", t.dims),
                })
            }
            None => {
                let msg = match f.unknown_tensor("token_embd.weight") {
                    Some(u) => format!(
                        "ggml type id {} (tensor record at byte {}) is not a type this build knows",
                        u.type_id, u.info_offset
                    ),
                    None => "missing".into(),
                };
                return Err(ModelError::Tensor {
                    path,
                    tensor: "token_embd.weight".into(),
                    msg,
                });
            }
        };
        let n_embd = req("embedding_length")?;
        if embd != n_embd {
            return Err(ModelError::Tensor {
                path,
                tensor: "token_embd.weight".into(),
                msg: format!("row length {embd} differs from embedding_length {n_embd}"),
            });
        }
        let context_length = opt("context_length")?.unwrap_or(0);
        let rope_scaling = RopeScaling::from_gguf(f, &path, context_length)?;
        Ok(Config {
            vocab_size,
            n_layer,
            nextn_predict_layers: nextn,
            context_length,
            n_embd,
            n_head,
            n_head_kv,
            head_dim,
            n_rot,
            rope_theta,
            rope_scaling,
            rms_eps,
            n_expert,
            n_expert_used,
            expert_ff,
            shexp_ff,
            conv_kernel,
            ssm_h_k,
            ssm_h_v,
            ssm_d_k,
            ssm_d_v,
            recurrent,
        })
    }
}
