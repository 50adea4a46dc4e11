//! `redlite synth`: write a random-weight model.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use redlite_gguf::GgmlType;
use redlite_synth::{FullConfig, Mix, SynthConfig, VocabMeta};

#[derive(clap::Args)]
#[command(
    after_help = "Examples:\n  redlite synth --preset tiny -o tiny.gguf\n  \
    redlite synth --preset qwen3-coder-next --experts 64 --mix cf2 \
    --vocab-from ggml-vocab-qwen2.gguf -o coder-next-64e.gguf"
)]
pub struct Args {
    /// Model shape. `tiny`: 4 layers (3 Gated DeltaNet + 1 attention), hidden size 256,
    /// 8 experts (top-2), about 1.3K tokens of vocabulary; writes in a second.
    /// `qwen3-coder-next`: the real Qwen3-Coder-Next shape (48 layers, hidden 2048, 512
    /// experts top-10; about 19 GiB in the cf2 mix), shrinkable with --layers / --experts.
    #[arg(long, default_value = "tiny")]
    pub preset: String,
    /// Output GGUF file.
    #[arg(short, long)]
    pub output: PathBuf,
    /// `tiny` only: type of the matrix weights: bf16, f16 or f32 (norms, router and gates are
    /// always f32).
    #[arg(long = "type", default_value = "bf16")]
    pub weight_type: String,
    /// `qwen3-coder-next` only: quantization mix. cf2: experts IQ1_M gate/up + IQ2_XS down,
    /// projections Q4_K/Q5_K, ssm_ba Q8_0, output Q6_K; q4_k_m: llama.cpp's Q4_K_M recipe
    /// (Q4_K, attn_qkv Q5_K, attn_v and ffn_down Q6_K on its "more bits" layers, output Q6_K);
    /// q8_0: every matrix Q8_0; bf16: every matrix BF16.
    #[arg(long, default_value = "cf2")]
    pub mix: String,
    /// `qwen3-coder-next` only: routed experts per layer (top-k is min(10, N)).
    #[arg(long, default_value_t = 512)]
    pub experts: usize,
    /// `qwen3-coder-next` only: layers, a multiple of 4 (3 DeltaNet + 1 attention each).
    #[arg(long, default_value_t = 48)]
    pub layers: usize,
    /// `qwen3-coder-next` only: Zipf-like expert popularity. Each expert gets a random rank r
    /// and its router row is scaled by 1 + S·ln(E/(r+1))/ln(E), so higher-ranked experts
    /// win the top-k more often; 0 = all experts alike.
    #[arg(long, default_value_t = 0.0)]
    pub router_skew: f32,
    /// `qwen3-coder-next` only: copy the tokenizer (every tokenizer.* key) from this GGUF, e.g.
    /// a vocab-only file of the Qwen2 vocabulary (151,936 tokens); embedding and output rows
    /// follow its size. Default: the small built-in vocabulary.
    #[arg(long)]
    pub vocab_from: Option<PathBuf>,
    /// Random seed of the weights.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Overwrite the output file if it exists.
    #[arg(long)]
    pub force: bool,
}

/// Bytes available to an unprivileged user on the file system holding `dir`.
fn free_bytes(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `c` is a NUL-terminated path and `st` points to writable memory of
    // the right type; statvfs only writes it, and we read it only on success.
    let rc = unsafe { libc::statvfs(c.as_ptr(), st.as_mut_ptr()) };
    if rc != 0 {
        return None;
    }
    // SAFETY: statvfs returned 0, so it initialised `st`.
    let st = unsafe { st.assume_init() };
    // The field types differ between platforms (u32 on some).
    #[allow(clippy::unnecessary_cast)]
    Some((st.f_bavail as u64).saturating_mul(st.f_frsize as u64))
}

pub fn run(args: Args) -> Result<()> {
    if args.output.exists() && !args.force {
        bail!(
            "{} exists (use --force to overwrite)",
            args.output.display()
        );
    }
    match args.preset.as_str() {
        "tiny" => run_tiny(args),
        "qwen3-coder-next" => run_full(args),
        other => bail!(
            "unknown preset {other:?} (available: {})",
            SynthConfig::PRESETS.join(", ")
        ),
    }
}

fn run_tiny(args: Args) -> Result<()> {
    let mut cfg = SynthConfig::tiny();
    let ty = GgmlType::from_name(&args.weight_type)
        .filter(|t| matches!(t, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16))
        .with_context(|| format!("--type {:?}: use bf16, f16 or f32", args.weight_type))?;
    cfg.weight_type = ty;
    cfg.seed = args.seed;
    let t = std::time::Instant::now();
    redlite_synth::write(&cfg, &args.output)
        .with_context(|| format!("writing {}", args.output.display()))?;
    let bytes = std::fs::metadata(&args.output)
        .map(|m| m.len())
        .unwrap_or(0);
    eprintln!(
        "wrote {} ({} preset, {} weights, {:.1} MiB) in {:.2}s",
        args.output.display(),
        args.preset,
        ty,
        bytes as f64 / (1 << 20) as f64,
        t.elapsed().as_secs_f64()
    );
    Ok(())
}

fn run_full(args: Args) -> Result<()> {
    let mix = Mix::from_name(&args.mix)
        .with_context(|| format!("--mix {:?}: use one of {}", args.mix, Mix::NAMES.join(", ")))?;
    let mut cfg = FullConfig::qwen3_coder_next().with_experts(args.experts);
    cfg.n_layer = args.layers;
    cfg.mix = mix;
    cfg.router_skew = args.router_skew;
    cfg.seed = args.seed;
    let vocab = match &args.vocab_from {
        Some(p) => VocabMeta::from_gguf(p)
            .with_context(|| format!("reading the tokenizer of {}", p.display()))?,
        None => VocabMeta::builtin(),
    };
    let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
    let b2 = bar.clone();
    let progress: redlite_synth::Progress = Arc::new(move |n| b2.inc(n));
    let writer = redlite_synth::build_full(&cfg, &vocab, Some(progress))
        .context("building the model description")?;
    let need = writer.data_bytes();
    // Space: what the file needs, less what overwriting an existing file frees.
    let dir = match args.output.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let existing = std::fs::metadata(&args.output)
        .map(|m| m.len())
        .unwrap_or(0);
    let margin = 64 << 20;
    match free_bytes(&dir) {
        Some(free) if free.saturating_add(existing) < need + margin => bail!(
            "not enough disk space for {}: it needs {:.2} GiB, {} has {:.2} GiB free",
            args.output.display(),
            need as f64 / (1u64 << 30) as f64,
            dir.display(),
            free as f64 / (1u64 << 30) as f64
        ),
        Some(_) => {}
        None => bail!(
            "cannot check the free space of {} (does the folder exist?)",
            dir.display()
        ),
    }
    bar.set_length(need);
    bar.set_style(
        ProgressStyle::with_template(
            "writing {bar:40} {binary_bytes}/{binary_total_bytes} ({binary_bytes_per_sec}, eta {eta})",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let t = std::time::Instant::now();
    let res = writer.write_to_path(&args.output);
    bar.finish_and_clear();
    if let Err(e) = res {
        // Leave no truncated file that looks like a model.
        let _ = std::fs::remove_file(&args.output);
        return Err(e).with_context(|| format!("writing {}", args.output.display()));
    }
    let bytes = std::fs::metadata(&args.output)
        .map(|m| m.len())
        .unwrap_or(0);
    eprintln!(
        "wrote {} (qwen3-coder-next preset: {} layers, {} experts top-{}, {} mix, vocab {}, {:.2} GiB) in {:.1}s",
        args.output.display(),
        cfg.n_layer,
        cfg.n_expert,
        cfg.n_expert_used,
        mix.name(),
        vocab.n_vocab,
        bytes as f64 / (1u64 << 30) as f64,
        t.elapsed().as_secs_f64()
    );
    Ok(())
}
