//! The `qwen3-coder-next` preset: a random-weight model of the real
//! Qwen3-Coder-Next shape (hidden 2048, 48 layers of 12 × (3 Gated DeltaNet +
//! 1 gated attention), 16/2 attention heads of 256, DeltaNet 16 key heads and
//! 32 value heads of 128, 512 experts of width 512 top-10, shared expert 512),
//! optionally shrunk in layers and experts, with its matrices in a chosen
//! quantization mix.
//!
//! Quantized tensors are written directly as random blocks: random quant
//! indices and sub-block scales, and a super-block scale `d` chosen so the
//! dequantized values have the target standard deviation (the ratio comes
//! from dequantizing calibration blocks written with `d = 1` with the quant
//! crate's reference dequantizer). Every tensor is produced at write time
//! from its own seed, so a file of any size streams to disk in constant
//! memory.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use half::{bf16, f16};
use redlite_gguf::{GgmlType, GgufFile, GgufWriter, MetaArray, MetaValue};

use crate::SynthError;

/// Quantization mix of the matrices (norms, conv, gates, routers stay F32).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mix {
    /// Routed experts IQ1_M gate/up and IQ2_XS down; DeltaNet and attention
    /// input projections and shared-expert gate/up Q4_K; `ssm_out`,
    /// `attn_output` and shared-expert down Q5_K; `ssm_ba` Q8_0; token
    /// embeddings Q4_K; output Q6_K.
    Cf2,
    /// llama.cpp's Q4_K_M recipe as it applies by tensor name: Q4_K
    /// everywhere except `attn_qkv` Q5_K, output Q6_K, and `attn_v` and the
    /// `ffn_down` tensors Q6_K on llama.cpp's "more bits" layers (the first
    /// and last eighth and every third in between).
    Q4KM,
    /// Every matrix Q8_0.
    Q8_0,
    /// Every matrix BF16.
    Bf16,
}

impl Mix {
    pub const NAMES: &'static [&'static str] = &["cf2", "q4_k_m", "q8_0", "bf16"];

    pub fn from_name(s: &str) -> Option<Mix> {
        match s.to_ascii_lowercase().as_str() {
            "cf2" => Some(Mix::Cf2),
            "q4_k_m" => Some(Mix::Q4KM),
            "q8_0" => Some(Mix::Q8_0),
            "bf16" => Some(Mix::Bf16),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Mix::Cf2 => "cf2",
            Mix::Q4KM => "q4_k_m",
            Mix::Q8_0 => "q8_0",
            Mix::Bf16 => "bf16",
        }
    }
}

/// llama.cpp's `use_more_bits(i, n)`.
fn use_more_bits(i: usize, n: usize) -> bool {
    i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2
}

/// Tensor roles that choose a type.
#[derive(Clone, Copy, Debug)]
enum Role {
    Embd,
    Output,
    DeltaIn,   // attn_qkv
    DeltaGate, // attn_gate
    SsmBa,
    SsmOut,
    AttnQ,
    AttnK,
    AttnV,
    AttnOut,
    ExpGateUp,
    ExpDown,
    ShGateUp,
    ShDown,
}

impl Mix {
    /// `layer`: index among all layers; `attn_index`/`n_attn`: among attention layers.
    fn ty(
        self,
        role: Role,
        layer: usize,
        n_layer: usize,
        attn_index: usize,
        n_attn: usize,
    ) -> GgmlType {
        use GgmlType as T;
        match self {
            Mix::Bf16 => T::BF16,
            Mix::Q8_0 => T::Q8_0,
            Mix::Cf2 => match role {
                Role::ExpGateUp => T::IQ1_M,
                Role::ExpDown => T::IQ2_XS,
                Role::DeltaIn
                | Role::DeltaGate
                | Role::AttnQ
                | Role::AttnK
                | Role::AttnV
                | Role::ShGateUp
                | Role::Embd => T::Q4_K,
                Role::SsmOut | Role::AttnOut | Role::ShDown => T::Q5_K,
                Role::SsmBa => T::Q8_0,
                Role::Output => T::Q6_K,
            },
            Mix::Q4KM => match role {
                Role::Output => T::Q6_K,
                Role::DeltaIn => T::Q5_K,
                Role::AttnV if use_more_bits(attn_index, n_attn) => T::Q6_K,
                Role::ExpDown | Role::ShDown if use_more_bits(layer, n_layer) => T::Q6_K,
                _ => T::Q4_K,
            },
        }
    }
}

/// Tokenizer metadata for the file: every `tokenizer.*` key of another GGUF
/// (e.g. a vocabulary-only file), and its token count.
#[derive(Clone, Debug)]
pub struct VocabMeta {
    pub keys: Vec<(String, MetaValue)>,
    pub n_vocab: usize,
}

impl VocabMeta {
    /// Copy the `tokenizer.*` metadata of `path`.
    pub fn from_gguf(path: &Path) -> Result<VocabMeta, SynthError> {
        let f = GgufFile::open(path)?;
        let keys: Vec<(String, MetaValue)> = f
            .metadata
            .iter()
            .filter(|(k, _)| k.starts_with("tokenizer."))
            .cloned()
            .collect();
        let n_vocab = f
            .get_str_array("tokenizer.ggml.tokens")?
            .map(|t| t.len())
            .filter(|&n| n > 0)
            .ok_or_else(|| {
                SynthError::Vocab(format!(
                    "{}: no tokenizer.ggml.tokens array to take the vocabulary from",
                    path.display()
                ))
            })?;
        Ok(VocabMeta { keys, n_vocab })
    }

    /// The small byte-level vocabulary trained at run time (as `--preset tiny`).
    pub fn builtin() -> VocabMeta {
        let vocab = crate::vocab::train(1000);
        let eos = vocab.id("<|im_end|>").unwrap_or(0);
        let eot = vocab.id("<|endoftext|>").unwrap_or(0);
        let n_vocab = vocab.tokens.len();
        let keys = vec![
            (
                "tokenizer.ggml.model".into(),
                MetaValue::String("gpt2".into()),
            ),
            (
                "tokenizer.ggml.pre".into(),
                MetaValue::String("qwen2".into()),
            ),
            (
                "tokenizer.ggml.tokens".into(),
                MetaValue::Array(MetaArray::String(vocab.tokens)),
            ),
            (
                "tokenizer.ggml.token_type".into(),
                MetaValue::Array(MetaArray::I32(vocab.token_types)),
            ),
            (
                "tokenizer.ggml.merges".into(),
                MetaValue::Array(MetaArray::String(vocab.merges)),
            ),
            ("tokenizer.ggml.eos_token_id".into(), MetaValue::U32(eos)),
            (
                "tokenizer.ggml.padding_token_id".into(),
                MetaValue::U32(eot),
            ),
            ("tokenizer.ggml.bos_token_id".into(), MetaValue::U32(eot)),
            (
                "tokenizer.ggml.add_bos_token".into(),
                MetaValue::Bool(false),
            ),
        ];
        VocabMeta { keys, n_vocab }
    }
}

/// The `qwen3-coder-next` preset, shrinkable.
#[derive(Clone, Debug)]
pub struct FullConfig {
    /// Layers (a multiple of the attention interval 4).
    pub n_layer: usize,
    pub n_expert: usize,
    /// Experts per token (10, or `n_expert` if fewer).
    pub n_expert_used: usize,
    pub mix: Mix,
    /// Zipf-like expert popularity: 0 = uniform (see [`router_row_scales`]).
    pub router_skew: f32,
    pub seed: u64,
}

impl FullConfig {
    pub const D: usize = 2048;
    pub const N_HEAD: usize = 16;
    pub const N_HEAD_KV: usize = 2;
    pub const HEAD_DIM: usize = 256;
    pub const N_ROT: usize = 64;
    pub const ROPE_THETA: f32 = 5_000_000.0;
    pub const H_K: usize = 16;
    pub const H_V: usize = 32;
    pub const D_K: usize = 128;
    pub const CONV: usize = 4;
    pub const EXPERT_FF: usize = 512;
    pub const SHARED_FF: usize = 512;
    pub const INTERVAL: usize = 4;

    /// Qwen3-Coder-Next's shape: 48 layers, 512 experts top-10.
    pub fn qwen3_coder_next() -> FullConfig {
        FullConfig {
            n_layer: 48,
            n_expert: 512,
            n_expert_used: 10,
            mix: Mix::Cf2,
            router_skew: 0.0,
            seed: 1,
        }
    }

    /// Set the expert count (top-k becomes min(10, n)).
    pub fn with_experts(mut self, n: usize) -> FullConfig {
        self.n_expert = n;
        self.n_expert_used = n.min(10);
        self
    }

    fn check(&self) -> Result<(), SynthError> {
        if self.n_layer == 0 || !self.n_layer.is_multiple_of(Self::INTERVAL) {
            return Err(SynthError::Shape(format!(
                "layers {} must be a positive multiple of {} (3 DeltaNet + 1 attention)",
                self.n_layer,
                Self::INTERVAL
            )));
        }
        if self.n_expert == 0 || self.n_expert_used == 0 || self.n_expert_used > self.n_expert {
            return Err(SynthError::Shape(format!(
                "experts {} (top-{}): need at least one expert",
                self.n_expert, self.n_expert_used
            )));
        }
        if !self.router_skew.is_finite() || self.router_skew < 0.0 {
            return Err(SynthError::Shape(format!(
                "router skew {} must be a finite number >= 0",
                self.router_skew
            )));
        }
        Ok(())
    }
}

/// Called with the number of bytes each time a chunk of tensor data is written.
pub type Progress = Arc<dyn Fn(u64) + Send + Sync>;

/// Fast deterministic generator (SplitMix64 seeding + xoshiro256**).
#[derive(Clone)]
pub struct Rng([u64; 4]);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        let mut z = seed;
        let mut next = || {
            z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut x = z;
            x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            x ^ (x >> 31)
        };
        Rng([next(), next(), next(), next()])
    }
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        let s = &mut self.0;
        let r = s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        r
    }
    /// Uniform in [0, 1).
    #[inline]
    pub fn f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
    #[inline]
    pub fn range(&mut self, lo: u32, hi_incl: u32) -> u32 {
        lo + (self.next_u64() % (hi_incl - lo + 1) as u64) as u32
    }
    pub fn fill_bytes(&mut self, out: &mut [u8]) {
        for c in out.chunks_mut(8) {
            let v = self.next_u64().to_le_bytes();
            c.copy_from_slice(&v[..c.len()]);
        }
    }
    /// Approximately standard normal, fast: the sum of four 16-bit uniforms
    /// (Irwin-Hall), rescaled to unit variance; tails end at ±3.46.
    #[inline]
    pub fn normal_fast(&mut self) -> f32 {
        let r = self.next_u64();
        let s = (r & 0xFFFF) + ((r >> 16) & 0xFFFF) + ((r >> 32) & 0xFFFF) + (r >> 48);
        // Mean 4·32767.5, variance 4·(65536²−1)/12.
        ((s as f32) - 131_070.0) * (3.0f32.sqrt() / 65_536.0)
    }
    /// Standard normal (Box-Muller).
    pub fn normal(&mut self) -> f32 {
        let u1 = self.f64().max(1e-300);
        let u2 = self.f64();
        ((-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()) as f32
    }
}

/// A seed for the tensor `name` (FNV-1a of the name mixed with the model seed).
fn tensor_seed(seed: u64, name: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ seed.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    for b in name.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

fn put_f16(b: &mut [u8], at: usize, v: f32) {
    b[at..at + 2].copy_from_slice(&f16::from_f32(v).to_bits().to_le_bytes());
}

/// The types [`random_blocks`] can write.
pub const BLOCK_TYPES: &[GgmlType] = &[
    GgmlType::F32,
    GgmlType::BF16,
    GgmlType::Q8_0,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
    GgmlType::IQ1_M,
    GgmlType::IQ2_XS,
];

/// Write one random block of `ty` with super-block scale `d` into `b`
/// (`b.len()` = the type's block bytes). Sub-block scales and quant indices
/// are random; values are centred on zero.
fn random_block(ty: GgmlType, rng: &mut Rng, d: f32, b: &mut [u8]) {
    match ty {
        GgmlType::Q8_0 => {
            put_f16(b, 0, d);
            for q in &mut b[2..34] {
                *q = (rng.range(0, 254) as i32 - 127) as i8 as u8;
            }
        }
        GgmlType::Q4_K | GgmlType::Q5_K => {
            // value = d·s·q − dmin·s with dmin = d·(levels−1)/2: centred.
            let half = if ty == GgmlType::Q4_K { 7.5 } else { 15.5 };
            put_f16(b, 0, d);
            put_f16(b, 2, d * half);
            let mut s = [0u8; 8];
            for v in &mut s {
                *v = rng.range(24, 63) as u8;
            }
            // Pack sc = m = s (`get_scale_min_k4` inverse).
            let sc = &mut b[4..16];
            for j in 0..4 {
                sc[j] = s[j] | ((s[j + 4] >> 4) << 6);
                sc[j + 4] = s[j] | ((s[j + 4] >> 4) << 6);
                sc[j + 8] = (s[j + 4] & 0x0F) | ((s[j + 4] & 0x0F) << 4);
            }
            rng.fill_bytes(&mut b[16..]);
        }
        GgmlType::Q6_K => {
            rng.fill_bytes(&mut b[0..192]);
            for v in &mut b[192..208] {
                *v = rng.range(24, 127) as u8;
            }
            put_f16(b, 208, d);
        }
        GgmlType::IQ1_M => {
            rng.fill_bytes(&mut b[0..48]);
            let db = f16::from_f32(d).to_bits();
            for i in 0..4 {
                let low = (rng.next_u64() & 0x0FFF) as u16;
                let w = low | (((db >> (4 * i)) & 0xF) << 12);
                b[48 + 2 * i..50 + 2 * i].copy_from_slice(&w.to_le_bytes());
            }
        }
        GgmlType::IQ2_XS => {
            put_f16(b, 0, d);
            rng.fill_bytes(&mut b[2..74]);
        }
        _ => unreachable!("random_block: {ty} is not a block type here"),
    }
}

/// Standard deviation of dequantized values of `ty` blocks written with
/// `d = 1`, measured with the quant crate's reference dequantizer.
fn unit_std(ty: GgmlType) -> f32 {
    let bb = ty.type_size();
    let n = 512;
    let mut rng = Rng::new(0x5eed ^ ty as u64);
    let mut data = vec![0u8; bb * n];
    for b in data.chunks_mut(bb) {
        random_block(ty, &mut rng, 1.0, b);
    }
    let v = redlite_quant::dequantize_to_vec(ty, &data).unwrap_or_default();
    let m = v.iter().map(|&x| x as f64).sum::<f64>() / v.len().max(1) as f64;
    let var = v.iter().map(|&x| (x as f64 - m).powi(2)).sum::<f64>() / v.len().max(1) as f64;
    var.sqrt() as f32
}

/// `n_rows` rows of `row_len` random values of standard deviation `std`
/// (and mean `mean`, F32/BF16 only) in type `ty`, written to `w` in chunks.
#[allow(clippy::too_many_arguments)]
pub fn random_blocks(
    ty: GgmlType,
    n_rows: u64,
    row_len: u64,
    std: f32,
    mean: f32,
    seed: u64,
    w: &mut dyn Write,
    progress: Option<&Progress>,
) -> std::io::Result<()> {
    let mut rng = Rng::new(seed);
    let row_bytes = ty
        .row_bytes(row_len)
        .ok_or_else(|| std::io::Error::other(format!("{ty}: bad row length {row_len}")))?
        as usize;
    let rows_per_chunk = ((1usize << 20) / row_bytes.max(1)).max(1);
    let mut buf = vec![0u8; rows_per_chunk * row_bytes];
    let d = match ty {
        GgmlType::F32 | GgmlType::BF16 => 0.0,
        _ => std / unit_std(ty),
    };
    let bb = ty.type_size();
    let mut left = n_rows as usize;
    while left > 0 {
        let rows = left.min(rows_per_chunk);
        let chunk = &mut buf[..rows * row_bytes];
        match ty {
            GgmlType::F32 => {
                for c in chunk.chunks_mut(4) {
                    c.copy_from_slice(&(mean + std * rng.normal_fast()).to_le_bytes());
                }
            }
            GgmlType::BF16 => {
                for c in chunk.chunks_mut(2) {
                    let v = bf16::from_f32(mean + std * rng.normal_fast());
                    c.copy_from_slice(&v.to_bits().to_le_bytes());
                }
            }
            _ => {
                for b in chunk.chunks_mut(bb) {
                    random_block(ty, &mut rng, d, b);
                }
            }
        }
        w.write_all(chunk)?;
        if let Some(p) = progress {
            p(chunk.len() as u64);
        }
        left -= rows;
    }
    Ok(())
}

/// Router row scales for `--router-skew S`: expert `e` gets a random rank
/// `r` (a permutation drawn from the seed) and its router row is multiplied by
/// `1 + S·ln(E / (r+1)) / ln(E)` (1 for the least popular, `1 + S` for the
/// most). A row with a larger scale gives logits of larger spread, so it wins
/// the top-k more often: popularity falls off with rank roughly like a Zipf
/// law whose steepness grows with S. S = 0 gives identically distributed
/// experts.
pub fn router_row_scales(n_expert: usize, skew: f32, seed: u64) -> Vec<f32> {
    let mut rng = Rng::new(seed ^ 0x0020_07e2);
    let mut rank: Vec<usize> = (0..n_expert).collect();
    for i in (1..n_expert).rev() {
        let j = (rng.next_u64() % (i as u64 + 1)) as usize;
        rank.swap(i, j);
    }
    let ln_e = (n_expert as f32).ln().max(1e-6);
    rank.iter()
        .map(|&r| {
            if n_expert <= 1 {
                1.0
            } else {
                1.0 + skew * ((n_expert as f32) / (r as f32 + 1.0)).ln() / ln_e
            }
        })
        .collect()
}

/// Build the writer of a `qwen3-coder-next` model; tensors are generated
/// when it writes.
pub fn build_full(
    cfg: &FullConfig,
    vocab: &VocabMeta,
    progress: Option<Progress>,
) -> Result<GgufWriter, SynthError> {
    cfg.check()?;
    let arch = "qwen3next";
    let d = FullConfig::D;
    let mut w = GgufWriter::new();
    let k = |s: &str| format!("{arch}.{s}");
    w.add_str("general.architecture", arch);
    w.add_str("general.type", "model");
    w.add_str(
        "general.name",
        format!(
            "Red Lite synthetic qwen3-coder-next ({} layers, {} experts, {})",
            cfg.n_layer,
            cfg.n_expert,
            cfg.mix.name()
        ),
    );
    w.add_u32(k("block_count"), cfg.n_layer as u32);
    w.add_u32(k("context_length"), 262_144);
    w.add_u32(k("embedding_length"), d as u32);
    w.add_u32(k("feed_forward_length"), 5120);
    w.add_u32(k("attention.head_count"), FullConfig::N_HEAD as u32);
    w.add_u32(k("attention.head_count_kv"), FullConfig::N_HEAD_KV as u32);
    w.add_f32(k("rope.freq_base"), FullConfig::ROPE_THETA);
    w.add_f32(k("attention.layer_norm_rms_epsilon"), 1e-6);
    w.add_u32(k("expert_count"), cfg.n_expert as u32);
    w.add_u32(k("expert_used_count"), cfg.n_expert_used as u32);
    w.add_u32(k("attention.key_length"), FullConfig::HEAD_DIM as u32);
    w.add_u32(k("attention.value_length"), FullConfig::HEAD_DIM as u32);
    w.add_u32(
        k("expert_feed_forward_length"),
        FullConfig::EXPERT_FF as u32,
    );
    w.add_u32(
        k("expert_shared_feed_forward_length"),
        FullConfig::SHARED_FF as u32,
    );
    w.add_u32(k("ssm.conv_kernel"), FullConfig::CONV as u32);
    w.add_u32(k("ssm.state_size"), FullConfig::D_K as u32);
    w.add_u32(k("ssm.group_count"), FullConfig::H_K as u32);
    w.add_u32(k("ssm.time_step_rank"), FullConfig::H_V as u32);
    w.add_u32(
        k("ssm.inner_size"),
        (FullConfig::D_K * FullConfig::H_V) as u32,
    );
    let interval = FullConfig::INTERVAL;
    let recurrent: Vec<bool> = (0..cfg.n_layer).map(|i| (i + 1) % interval != 0).collect();
    w.add_array(
        k("attention.recurrent_layers"),
        MetaArray::Bool(recurrent.clone()),
    );
    w.add_u32(k("full_attention_interval"), interval as u32);
    w.add_u32(k("rope.dimension_count"), FullConfig::N_ROT as u32);
    for (key, v) in &vocab.keys {
        w.add_kv(key.clone(), v.clone());
    }
    w.add_kv("general.quantization_version", MetaValue::U32(2));

    let n_attn = cfg.n_layer / interval;
    let du = d as u64;
    let nv = vocab.n_vocab as u64;
    let seed = cfg.seed;
    // A random tensor: `dims` in ggml order (ne0 = row length).
    let add = |w: &mut GgufWriter,
               name: String,
               dims: &[u64],
               ty: GgmlType,
               std: f32,
               mean: f32|
     -> Result<(), SynthError> {
        let rows: u64 = dims[1..].iter().product();
        let row_len = dims[0];
        let s = tensor_seed(seed, &name);
        let p = progress.clone();
        w.add_tensor_fill(
            name,
            dims,
            ty,
            Box::new(move |out| random_blocks(ty, rows, row_len, std, mean, s, out, p.as_ref())),
        )?;
        Ok(())
    };
    let mix = cfg.mix;
    let ty = |role: Role, layer: usize, ai: usize| mix.ty(role, layer, cfg.n_layer, ai, n_attn);
    let f32t = GgmlType::F32;
    let inv = |fan_in: usize| 1.0 / (fan_in as f32).sqrt();
    let h = d as f32;
    add(
        &mut w,
        "token_embd.weight".into(),
        &[du, nv],
        ty(Role::Embd, 0, 0),
        1.0,
        0.0,
    )?;
    add(&mut w, "output_norm.weight".into(), &[du], f32t, 0.25, 1.0)?;
    add(
        &mut w,
        "output.weight".into(),
        &[du, nv],
        ty(Role::Output, 0, 0),
        2.8 / h.sqrt(),
        0.0,
    )?;
    let (hk, hv, dk) = (FullConfig::H_K, FullConfig::H_V, FullConfig::D_K);
    let vdim = hv * dk;
    let conv_dim = 2 * hk * dk + vdim;
    let (e, ff, sff) = (
        cfg.n_expert as u64,
        FullConfig::EXPERT_FF as u64,
        FullConfig::SHARED_FF as u64,
    );
    let (nh, nkv, hd) = (
        FullConfig::N_HEAD as u64,
        FullConfig::N_HEAD_KV as u64,
        FullConfig::HEAD_DIM as u64,
    );
    let mut attn_index = 0;
    for (il, &rec) in recurrent.iter().enumerate() {
        let b = |s: &str| format!("blk.{il}.{s}");
        add(&mut w, b("attn_norm.weight"), &[du], f32t, 0.25, 1.0)?;
        add(
            &mut w,
            b("post_attention_norm.weight"),
            &[du],
            f32t,
            0.25,
            1.0,
        )?;
        if rec {
            let t = ty(Role::DeltaIn, il, 0);
            add(
                &mut w,
                b("attn_qkv.weight"),
                &[du, conv_dim as u64],
                t,
                inv(d),
                0.0,
            )?;
            let t = ty(Role::DeltaGate, il, 0);
            add(
                &mut w,
                b("attn_gate.weight"),
                &[du, vdim as u64],
                t,
                inv(d),
                0.0,
            )?;
            let t = ty(Role::SsmBa, il, 0);
            add(
                &mut w,
                b("ssm_ba.weight"),
                &[du, (2 * hv) as u64],
                t,
                inv(d),
                0.0,
            )?;
            add(
                &mut w,
                b("ssm_conv1d.weight"),
                &[FullConfig::CONV as u64, conv_dim as u64],
                f32t,
                0.45,
                0.0,
            )?;
            // Small per-head vectors, drawn here from the tensor's own seed.
            let mut r = Rng::new(tensor_seed(seed, &b("ssm_dt.bias")));
            let dt: Vec<f32> = (0..hv).map(|_| -2.0 + 3.0 * r.f64() as f32).collect();
            w.add_f32_tensor(b("ssm_dt.bias"), &[hv as u64], &dt)?;
            let a: Vec<f32> = (0..hv).map(|_| -(0.05 + 3.95 * r.f64() as f32)).collect();
            w.add_f32_tensor(b("ssm_a"), &[hv as u64], &a)?;
            let nrm: Vec<f32> = (0..dk).map(|_| 0.5 + r.f64() as f32).collect();
            w.add_f32_tensor(b("ssm_norm.weight"), &[dk as u64], &nrm)?;
            let t = ty(Role::SsmOut, il, 0);
            add(
                &mut w,
                b("ssm_out.weight"),
                &[vdim as u64, du],
                t,
                inv(vdim),
                0.0,
            )?;
        } else {
            let ai = attn_index;
            attn_index += 1;
            let t = ty(Role::AttnQ, il, ai);
            add(
                &mut w,
                b("attn_q.weight"),
                &[du, 2 * nh * hd],
                t,
                inv(d),
                0.0,
            )?;
            let t = ty(Role::AttnK, il, ai);
            add(&mut w, b("attn_k.weight"), &[du, nkv * hd], t, inv(d), 0.0)?;
            let t = ty(Role::AttnV, il, ai);
            add(&mut w, b("attn_v.weight"), &[du, nkv * hd], t, inv(d), 0.0)?;
            let t = ty(Role::AttnOut, il, ai);
            let fan = (nh * hd) as usize;
            add(
                &mut w,
                b("attn_output.weight"),
                &[nh * hd, du],
                t,
                inv(fan),
                0.0,
            )?;
            add(&mut w, b("attn_q_norm.weight"), &[hd], f32t, 0.25, 1.0)?;
            add(&mut w, b("attn_k_norm.weight"), &[hd], f32t, 0.25, 1.0)?;
        }
        // Router: N(0, 2/√D) rows, scaled per expert for --router-skew.
        let scales = router_row_scales(
            cfg.n_expert,
            cfg.router_skew,
            tensor_seed(seed, &b("router")),
        );
        let mut r = Rng::new(tensor_seed(seed, &b("ffn_gate_inp.weight")));
        let router: Vec<f32> = (0..cfg.n_expert * d)
            .map(|i| scales[i / d] * 2.0 / h.sqrt() * r.normal())
            .collect();
        w.add_f32_tensor(b("ffn_gate_inp.weight"), &[du, e], &router)?;
        let t = ty(Role::ExpGateUp, il, 0);
        add(
            &mut w,
            b("ffn_gate_exps.weight"),
            &[du, ff, e],
            t,
            inv(d),
            0.0,
        )?;
        add(
            &mut w,
            b("ffn_up_exps.weight"),
            &[du, ff, e],
            t,
            inv(d),
            0.0,
        )?;
        let t = ty(Role::ExpDown, il, 0);
        add(
            &mut w,
            b("ffn_down_exps.weight"),
            &[ff, du, e],
            t,
            inv(ff as usize),
            0.0,
        )?;
        add(
            &mut w,
            b("ffn_gate_inp_shexp.weight"),
            &[du],
            f32t,
            1.5 / h.sqrt(),
            0.0,
        )?;
        let t = ty(Role::ShGateUp, il, 0);
        add(
            &mut w,
            b("ffn_gate_shexp.weight"),
            &[du, sff],
            t,
            inv(d),
            0.0,
        )?;
        add(&mut w, b("ffn_up_shexp.weight"), &[du, sff], t, inv(d), 0.0)?;
        let t = ty(Role::ShDown, il, 0);
        add(
            &mut w,
            b("ffn_down_shexp.weight"),
            &[sff, du],
            t,
            inv(sff as usize),
            0.0,
        )?;
    }
    Ok(w)
}
