//! Which type each tensor gets: a port of llama.cpp's `llama-quant.cpp`
//! (`tensor_allows_quantization`, `llama_tensor_get_type`,
//! `llama_tensor_get_type_impl`, `tensor_type_fallback`,
//! `tensor_requires_imatrix`) for the `qwen3next` architecture.
//!
//! The tensors are visited in llama.cpp's order (layer number, then name:
//! `llama_model_loader::weight_name_comparer`), which is also the order of
//! the output file's tensor table, because the mixes count tensors as they go
//! (`i_attention_wv`, `i_ffn_down`, ...).

use redlite_gguf::GgmlType;
use regex::Regex;

use crate::ftype::FileType;

/// What the type choice needs to know about the model (llama.cpp's hparams).
#[derive(Clone, Debug)]
pub struct ModelInfo {
    /// `block_count`.
    pub n_layer: u32,
    /// `expert_count` (0 when the model has no experts, as llama.cpp sets it for ≤ 1).
    pub n_expert: u32,
    /// `head_count / head_count_kv` of layer 0 (0 when there are no KV heads).
    pub n_gqa: u32,
}

/// A `--tensor-type PATTERN=TYPE` override: the first pattern found in a
/// tensor's name (a regular-expression search, as llama.cpp's
/// `std::regex_search`) decides its type.
#[derive(Clone, Debug)]
pub struct TensorTypeOverride {
    pub pattern: String,
    pub regex: Regex,
    pub ty: GgmlType,
}

impl TensorTypeOverride {
    /// Parse `PATTERN=TYPE` as llama-quantize does (`parse_tensor_type`: the
    /// pattern is lowercased, the type is a ggml type name in any case).
    pub fn parse(s: &str) -> Result<TensorTypeOverride, String> {
        let (name, ty) = s
            .split_once('=')
            .ok_or_else(|| format!("malformed tensor type '{s}' (expected PATTERN=TYPE)"))?;
        if name.is_empty() {
            return Err(format!("missing tensor name in '{s}'"));
        }
        if ty.is_empty() {
            return Err(format!("missing quantization type in '{s}'"));
        }
        let ty = crate::ftype::parse_ggml_type(ty)
            .ok_or_else(|| format!("invalid quantization type '{ty}' in '{s}'"))?;
        let pattern = name.to_lowercase();
        let regex = Regex::new(&pattern)
            .map_err(|e| format!("tensor pattern '{pattern}' is not a regular expression: {e}"))?;
        Ok(TensorTypeOverride { pattern, regex, ty })
    }
}

/// The choices that shape the mix (llama-quantize's parameters).
#[derive(Clone, Debug)]
pub struct MixOptions {
    pub ftype: FileType,
    pub output_tensor_type: Option<GgmlType>,
    pub token_embedding_type: Option<GgmlType>,
    pub tensor_types: Vec<TensorTypeOverride>,
    /// `--pure`: no mix, every quantized tensor gets the default type
    /// (overrides and shape fallbacks still apply).
    pub pure: bool,
    /// Whether an importance matrix will be used (some mixes depend on it).
    pub has_imatrix: bool,
    /// `--leave-output-tensor` is the negation.
    pub quantize_output_tensor: bool,
}

impl MixOptions {
    pub fn new(ftype: FileType) -> MixOptions {
        MixOptions {
            ftype,
            output_tensor_type: None,
            token_embedding_type: None,
            tensor_types: Vec::new(),
            pure: false,
            has_imatrix: false,
            quantize_output_tensor: true,
        }
    }
}

/// One input tensor as the type choice sees it.
#[derive(Clone, Debug)]
pub struct TensorDesc {
    pub name: String,
    pub ty: GgmlType,
    /// ggml order: `dims[0]` is the row length.
    pub dims: Vec<u64>,
}

/// The decision for one tensor.
#[derive(Clone, Debug)]
pub struct PlannedTensor {
    pub name: String,
    pub src_type: GgmlType,
    pub dims: Vec<u64>,
    /// The type it is written as.
    pub target: GgmlType,
    /// Whether llama.cpp would quantize it at all (`tensor_allows_quantization`).
    pub allows_quantization: bool,
    /// `tensor_requires_imatrix`.
    pub requires_imatrix: bool,
    /// Whether the row length forced a fallback type.
    pub fallback: bool,
}

impl PlannedTensor {
    /// Bytes of the tensor as written.
    pub fn out_bytes(&self) -> u64 {
        let rows: u64 = self.dims.iter().skip(1).product();
        self.target.row_bytes(self.dims[0]).unwrap_or(0) * rows
    }
    /// Bytes of the tensor as read.
    pub fn in_bytes(&self) -> u64 {
        let rows: u64 = self.dims.iter().skip(1).product();
        self.src_type.row_bytes(self.dims[0]).unwrap_or(0) * rows
    }
    /// Whether the bytes change (llama.cpp copies a tensor whose type stays).
    pub fn converts(&self) -> bool {
        self.src_type != self.target
    }
}

/// Why no type could be chosen.
#[derive(Debug, thiserror::Error)]
pub enum MixError {
    #[error("Failed to determine layer for tensor {0}")]
    NoLayer(String),
    #[error("Bad layer {layer} for tensor {name}. Must be in [0, {n_layer})")]
    BadLayer {
        layer: i64,
        name: String,
        n_layer: u32,
    },
    #[error("no tensor type fallback is defined for type {0}")]
    NoFallback(GgmlType),
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Category {
    TokenEmbd,
    AttentionQ,
    AttentionV,
    AttentionK,
    AttentionQkv,
    AttentionKvB,
    AttentionOutput,
    FfnUp,
    FfnGate,
    FfnDown,
    Output,
    Other,
}

fn category(name: &str) -> Category {
    use Category::*;
    if name == "output.weight" {
        return Output;
    }
    if name == "token_embd.weight" || name == "per_layer_token_embd.weight" {
        return TokenEmbd;
    }
    let table = [
        ("attn_qkv.weight", AttentionQkv),
        ("attn_kv_b.weight", AttentionKvB),
        ("attn_v.weight", AttentionV),
        ("attn_k.weight", AttentionK),
        ("attn_q.weight", AttentionQ),
        ("attn_output.weight", AttentionOutput),
        ("ffn_up", FfnUp),
        ("ffn_gate", FfnGate),
        ("ffn_down", FfnDown),
    ];
    for (pat, c) in table {
        if name.contains(pat) {
            return c;
        }
    }
    Other
}

fn is_attn_v(c: Category) -> bool {
    matches!(
        c,
        Category::AttentionV | Category::AttentionQkv | Category::AttentionKvB
    )
}

/// `sscanf(name, "blk.%d.", &layer)`: the number after `blk.`, if any.
pub fn layer_of(name: &str) -> Option<i64> {
    let rest = name.strip_prefix("blk.")?;
    let rest = rest.trim_start();
    let (sign, digits) = match rest.as_bytes().first() {
        Some(b'-') => (-1i64, &rest[1..]),
        Some(b'+') => (1, &rest[1..]),
        _ => (1, rest),
    };
    let end = digits
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(digits.len());
    if end == 0 {
        return None;
    }
    digits[..end].parse::<i64>().ok().map(|v| sign * v)
}

/// llama.cpp's tensor order: by layer (`-1` for tensors outside a block),
/// then by name (bytewise).
pub fn llama_order(a: &str, b: &str) -> std::cmp::Ordering {
    let la = layer_of(a).unwrap_or(-1);
    let lb = layer_of(b).unwrap_or(-1);
    la.cmp(&lb).then_with(|| a.as_bytes().cmp(b.as_bytes()))
}

/// `tensor_allows_quantization` (the parts that can apply to `qwen3next`
/// and to the generic tensor names llama.cpp checks for every architecture).
pub fn allows_quantization(opts: &MixOptions, t: &TensorDesc) -> bool {
    // ggml_n_dims: trailing dimensions of 1 do not count.
    let n_dims = t
        .dims
        .iter()
        .rposition(|&d| d != 1)
        .map(|p| p + 1)
        .unwrap_or(1);
    if n_dims < 2 {
        return false;
    }
    let name = t.name.as_str();
    let mut q = name.ends_with("weight");
    q &= !name.contains("_norm.weight");
    q &= opts.quantize_output_tensor || name != "output.weight";
    for pat in [
        "ffn_gate_inp.weight",
        "ffn_gate_tid2eid.weight",
        "altup",
        "laurel",
        "per_layer_model_proj",
        "ssm_conv1d",
        "shortconv.conv.weight",
        "indexer.k_proj.weight",
        "indexer.q_proj.weight",
        "time_mix_first.weight",
        "time_mix_w0.weight",
        "time_mix_w1.weight",
        "time_mix_w2.weight",
        "time_mix_v0.weight",
        "time_mix_v1.weight",
        "time_mix_v2.weight",
        "time_mix_a0.weight",
        "time_mix_a1.weight",
        "time_mix_a2.weight",
        "time_mix_g1.weight",
        "time_mix_g2.weight",
        "time_mix_decay_w1.weight",
        "time_mix_decay_w2.weight",
        "time_mix_lerp_fused.weight",
        "attn_rel_b.weight",
        ".position_embd",
        "sam.pos_embd",
        "sam.neck.",
        "sam.net_",
        ".rel_pos",
        ".patch_embd",
        ".patch_merger",
        "a.rvq.codebook",
        "mm.a.code_embd",
    ] {
        q &= !name.contains(pat);
    }
    q &= name != "position_embd.weight" && name != "token_types.weight";
    q
}

struct State<'a> {
    model: &'a ModelInfo,
    opts: &'a MixOptions,
    n_attention_wv: i64,
    n_layer: i64,
    i_attention_wv: i64,
    i_ffn_down: i64,
    i_ffn_gate: i64,
    i_ffn_up: i64,
    has_tied_embeddings: bool,
}

fn use_more_bits(i_layer: i64, n_layers: i64) -> bool {
    i_layer < n_layers / 8 || i_layer >= 7 * n_layers / 8 || (i_layer - n_layers / 8) % 3 == 2
}

impl State<'_> {
    fn layer_info(&self, counter: i64, name: &str) -> Result<(i64, i64), MixError> {
        let n_expert = self.model.n_expert.max(1);
        if n_expert > 1 {
            let layer = layer_of(name).ok_or_else(|| MixError::NoLayer(name.to_string()))?;
            if layer < 0 || layer >= self.n_layer {
                return Err(MixError::BadLayer {
                    layer,
                    name: name.to_string(),
                    n_layer: self.model.n_layer,
                });
            }
            return Ok((layer, self.n_layer));
        }
        Ok((counter, self.n_layer))
    }

    /// `llama_tensor_get_type_impl` (its `if` chains kept as written in C,
    /// even where two branches give the same type).
    #[allow(clippy::if_same_then_else)]
    fn type_impl(
        &mut self,
        mut new_type: GgmlType,
        t: &TensorDesc,
        cat: Category,
    ) -> Result<GgmlType, MixError> {
        use FileType as F;
        use GgmlType as G;
        let ftype = self.opts.ftype;
        let name = t.name.as_str();
        let n_gqa = self.model.n_gqa;
        let n_expert = self.model.n_expert;
        let has_imatrix = self.opts.has_imatrix;
        let is_iq2_family = matches!(
            ftype,
            F::IQ2_XXS | F::IQ2_XS | F::IQ1_S | F::IQ2_S | F::IQ2_M | F::IQ1_M
        );
        if cat == Category::Output || (self.has_tied_embeddings && cat == Category::TokenEmbd) {
            if let Some(ty) = self.opts.output_tensor_type {
                new_type = ty;
            } else {
                let nx = t.dims[0];
                let qk_k = new_type.block_size() as u64;
                if ftype == F::MXFP4_MOE || !nx.is_multiple_of(qk_k) {
                    new_type = G::Q8_0;
                } else if matches!(
                    ftype,
                    F::IQ2_XXS | F::IQ2_XS | F::IQ3_XXS | F::IQ1_S | F::IQ2_S | F::IQ2_M | F::IQ1_M
                ) {
                    new_type = G::Q5_K;
                } else if new_type != G::Q8_0 {
                    new_type = G::Q6_K;
                }
            }
        } else if ftype == F::MXFP4_MOE {
            new_type = if t.dims.get(2).copied().unwrap_or(1) > 1 {
                G::MXFP4
            } else {
                G::Q8_0
            };
        } else if cat == Category::TokenEmbd {
            if let Some(ty) = self.opts.token_embedding_type {
                new_type = ty;
            } else if matches!(ftype, F::IQ2_XXS | F::IQ2_XS | F::IQ1_S | F::IQ1_M) {
                new_type = G::Q2_K;
            } else if matches!(ftype, F::IQ2_S | F::IQ2_M | F::IQ3_XXS) {
                new_type = G::IQ3_S;
            } else if matches!(ftype, F::TQ1_0 | F::TQ2_0 | F::Q2_0) {
                new_type = G::Q4_K;
            }
        } else if is_iq2_family {
            if is_attn_v(cat) {
                if n_gqa >= 4 || n_expert >= 4 {
                    new_type = G::Q4_K;
                } else {
                    new_type = if matches!(ftype, F::IQ2_S | F::IQ2_M) {
                        G::IQ3_S
                    } else {
                        G::Q2_K
                    };
                }
                self.i_attention_wv += 1;
            } else if n_expert == 8 && cat == Category::AttentionK {
                new_type = G::Q4_K;
            } else if cat == Category::FfnDown {
                if self.i_ffn_down < self.n_layer / 8 {
                    new_type = if matches!(ftype, F::IQ2_S | F::IQ2_M) {
                        G::IQ3_S
                    } else {
                        G::Q2_K
                    };
                }
                self.i_ffn_down += 1;
            } else if cat == Category::AttentionOutput {
                if n_expert == 8 {
                    new_type = G::Q5_K;
                } else if matches!(ftype, F::IQ1_S | F::IQ1_M) {
                    new_type = G::IQ2_XXS;
                } else if matches!(ftype, F::IQ2_S | F::IQ2_M) {
                    new_type = G::IQ3_S;
                }
            }
        } else if is_attn_v(cat) {
            if ftype == F::Q2_K {
                new_type = if n_gqa >= 4 { G::Q4_K } else { G::Q3_K };
            } else if ftype == F::Q2_K_S && n_gqa >= 4 {
                new_type = G::Q4_K;
            } else if ftype == F::IQ3_XXS {
                new_type = if n_gqa >= 4 {
                    G::Q4_K
                } else if !has_imatrix {
                    G::IQ3_S
                } else {
                    G::IQ3_XXS
                };
            } else if matches!(ftype, F::IQ3_XS | F::IQ3_S) && n_gqa >= 4 {
                new_type = G::Q4_K;
            } else if ftype == F::IQ3_M {
                new_type = G::Q4_K;
            } else if ftype == F::Q3_K_M {
                new_type = if self.i_attention_wv < 2 {
                    G::Q5_K
                } else {
                    G::Q4_K
                };
            } else if ftype == F::Q3_K_L {
                new_type = G::Q5_K;
            } else if matches!(ftype, F::IQ4_NL | F::IQ4_XS) && n_gqa >= 4 {
                new_type = G::Q5_K;
            } else if matches!(ftype, F::Q4_K_M | F::Q5_K_M)
                && use_more_bits(self.i_attention_wv, self.n_attention_wv)
            {
                new_type = G::Q6_K;
            } else if ftype == F::Q4_K_S && self.i_attention_wv < 4 {
                new_type = G::Q5_K;
            }
            // (LLM_TYPE_70B applies to llama only.)
            if n_expert == 8 {
                new_type = G::Q8_0;
            }
            self.i_attention_wv += 1;
        } else if cat == Category::AttentionK {
            if n_expert == 8 {
                new_type = G::Q8_0;
            } else if ftype == F::IQ3_XS {
                new_type = G::IQ3_XXS;
            } else if ftype == F::IQ3_XXS {
                new_type = G::IQ2_S;
            }
        } else if cat == Category::AttentionQ {
            if ftype == F::IQ3_XS {
                new_type = G::IQ3_XXS;
            } else if ftype == F::IQ3_XXS {
                new_type = G::IQ2_S;
            }
        } else if cat == Category::FfnDown {
            let (i_layer, n_layer) = self.layer_info(self.i_ffn_down, name)?;
            if ftype == F::Q2_K {
                new_type = G::Q3_K;
            } else if ftype == F::Q2_K_S {
                if i_layer < n_layer / 8 {
                    new_type = G::Q4_K;
                }
            } else if ftype == F::IQ3_XXS && !has_imatrix {
                new_type = if i_layer < n_layer / 8 {
                    G::Q4_K
                } else {
                    G::Q3_K
                };
            } else if ftype == F::Q3_K_M {
                // arch != FALCON: the middle alternative always holds.
                new_type = if i_layer < n_layer / 16 {
                    G::Q5_K
                } else {
                    G::Q4_K
                };
            } else if ftype == F::IQ3_M
                && (i_layer < n_layer / 8 || (n_expert == 8 && use_more_bits(i_layer, n_layer)))
            {
                new_type = G::Q4_K;
            } else if ftype == F::Q3_K_L {
                new_type = G::Q5_K;
            } else if ftype == F::Q4_K_M {
                if use_more_bits(i_layer, n_layer) {
                    new_type = G::Q6_K;
                }
            } else if i_layer < n_layer / 8
                && matches!(ftype, F::IQ4_NL | F::IQ4_XS)
                && !has_imatrix
            {
                new_type = G::Q5_K;
            } else if ftype == F::Q5_K_M && use_more_bits(i_layer, n_layer) {
                new_type = G::Q6_K;
            } else if ftype == F::Q4_K_S && i_layer < n_layer / 8 {
                new_type = G::Q5_K;
            } else if matches!(ftype, F::Q4_0 | F::Q5_0) && has_imatrix && i_layer < n_layer / 8 {
                new_type = if ftype == F::Q4_0 { G::Q4_1 } else { G::Q5_1 };
            }
            self.i_ffn_down += 1;
        } else if cat == Category::AttentionOutput {
            if n_expert == 8 {
                if matches!(
                    ftype,
                    F::Q2_K
                        | F::IQ3_XS
                        | F::IQ3_XXS
                        | F::Q3_K_S
                        | F::Q3_K_M
                        | F::IQ4_NL
                        | F::Q4_K_S
                        | F::Q4_K_M
                        | F::IQ3_S
                        | F::IQ3_M
                        | F::IQ4_XS
                ) {
                    new_type = G::Q5_K;
                }
            } else {
                match ftype {
                    F::Q2_K => new_type = G::Q3_K,
                    F::IQ3_XXS => new_type = G::IQ3_S,
                    F::Q3_K_M => new_type = G::Q4_K,
                    F::Q3_K_L => new_type = G::Q5_K,
                    F::IQ3_M => new_type = G::Q4_K,
                    _ => {}
                }
            }
        } else if cat == Category::AttentionQkv {
            if matches!(ftype, F::Q3_K_M | F::Q3_K_L | F::IQ3_M) {
                new_type = G::Q4_K;
            } else if ftype == F::Q4_K_M {
                new_type = G::Q5_K;
            } else if ftype == F::Q5_K_M {
                new_type = G::Q6_K;
            }
        } else if cat == Category::FfnGate || cat == Category::FfnUp {
            let counter = if cat == Category::FfnGate {
                self.i_ffn_gate
            } else {
                self.i_ffn_up
            };
            let (i_layer, n_layer) = self.layer_info(counter, name)?;
            if ftype == F::IQ3_XS && i_layer >= n_layer / 8 && i_layer < 7 * n_layer / 8 {
                new_type = G::IQ3_XXS;
            }
            if cat == Category::FfnGate {
                self.i_ffn_gate += 1;
            } else {
                self.i_ffn_up += 1;
            }
        }
        Ok(new_type)
    }
}

/// `tensor_type_fallback`: a type whose block divides the row length.
fn fallback(t: &TensorDesc, target: GgmlType) -> Result<(GgmlType, bool), MixError> {
    use GgmlType as G;
    let ncols = t.dims[0];
    let qk_k = target.block_size() as u64;
    if ncols.is_multiple_of(qk_k) {
        return Ok((target, false));
    }
    let mut ret = match target {
        G::IQ1_S
        | G::IQ1_M
        | G::IQ2_XXS
        | G::IQ2_XS
        | G::IQ2_S
        | G::IQ3_XXS
        | G::IQ3_S
        | G::IQ4_XS => G::IQ4_NL,
        G::Q2_0 | G::Q2_K | G::Q3_K | G::TQ1_0 | G::TQ2_0 => G::Q4_0,
        G::Q4_K => G::Q5_0,
        G::Q5_K => G::Q5_1,
        G::Q6_K => G::Q8_0,
        _ if qk_k <= 32 => target,
        _ => return Err(MixError::NoFallback(target)),
    };
    if !ncols.is_multiple_of(ret.block_size() as u64) {
        ret = G::F16;
    }
    Ok((ret, true))
}

/// `tensor_requires_imatrix`.
pub fn requires_imatrix(name: &str, dst: GgmlType, ftype: FileType) -> bool {
    if name == "token_embd.weight"
        || name == "per_layer_token_embd.weight"
        || name == "output.weight"
    {
        return false;
    }
    use GgmlType as G;
    match dst {
        G::IQ3_XXS | G::IQ2_XXS | G::IQ2_XS | G::IQ2_S | G::IQ1_M | G::IQ1_S => true,
        G::Q2_K => ftype == FileType::Q2_K_S,
        _ => false,
    }
}

/// The type of every tensor, in llama.cpp's order (which is also the order
/// of the output's tensor table).
pub fn plan(
    model: &ModelInfo,
    opts: &MixOptions,
    tensors: &[TensorDesc],
) -> Result<Vec<PlannedTensor>, MixError> {
    let mut order: Vec<&TensorDesc> = tensors.iter().collect();
    order.sort_by(|a, b| llama_order(&a.name, &b.name));
    let cats: Vec<Category> = order.iter().map(|t| category(&t.name)).collect();
    let mut st = State {
        model,
        opts,
        n_attention_wv: cats.iter().filter(|c| is_attn_v(**c)).count() as i64,
        n_layer: model.n_layer as i64,
        i_attention_wv: 0,
        i_ffn_down: 0,
        i_ffn_gate: 0,
        i_ffn_up: 0,
        has_tied_embeddings: !cats.contains(&Category::Output),
    };
    let default_type = opts.ftype.default_type();
    let mut out = Vec::with_capacity(order.len());
    for (t, &cat) in order.iter().zip(&cats) {
        let allows = allows_quantization(opts, t);
        let mut fell_back = false;
        let target = if !allows {
            t.ty
        } else if let (Some(ty), Category::TokenEmbd) = (opts.token_embedding_type, cat) {
            // per_layer_token_embd follows --token-embedding-type unless a
            // --tensor-type names it.
            let named = t.name == "per_layer_token_embd.weight"
                && opts.tensor_types.iter().any(|o| o.regex.is_match(&t.name));
            if named {
                get_type_general(&mut st, t, cat, default_type, &mut fell_back)?
            } else {
                ty
            }
        } else if let (Some(ty), Category::Output) = (opts.output_tensor_type, cat) {
            ty
        } else {
            get_type_general(&mut st, t, cat, default_type, &mut fell_back)?
        };
        // The output records `ggml_n_dims` dimensions (trailing ones dropped).
        let n_dims = t.dims.iter().rposition(|&d| d != 1).map_or(1, |p| p + 1);
        out.push(PlannedTensor {
            name: t.name.clone(),
            src_type: t.ty,
            dims: t.dims[..n_dims.min(t.dims.len())].to_vec(),
            target,
            allows_quantization: allows,
            requires_imatrix: requires_imatrix(&t.name, target, opts.ftype),
            fallback: fell_back,
        });
    }
    Ok(out)
}

fn get_type_general(
    st: &mut State<'_>,
    t: &TensorDesc,
    cat: Category,
    default_type: GgmlType,
    fell_back: &mut bool,
) -> Result<GgmlType, MixError> {
    let mut new_type = default_type;
    if !is_quantized(default_type) {
        return Ok(new_type);
    }
    let mut manual = false;
    for o in &st.opts.tensor_types {
        if o.regex.is_match(&t.name) {
            new_type = o.ty;
            manual = true;
            break;
        }
    }
    if !manual && !st.opts.pure {
        new_type = st.type_impl(new_type, t, cat)?;
    }
    let (ty, fb) = fallback(t, new_type)?;
    *fell_back = fb;
    Ok(ty)
}

/// `ggml_is_quantized`: every block type (block size above one).
pub fn is_quantized(ty: GgmlType) -> bool {
    ty.block_size() > 1
}
