//! `redlite synth`: write a random-weight model.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use redlite_gguf::GgmlType;
use redlite_synth::SynthConfig;

#[derive(clap::Args)]
pub struct Args {
    /// Model shape. `tiny`: 4 layers (3 Gated DeltaNet + 1 attention), hidden size 256,
    /// 8 experts (top-2), about 1.3K tokens of vocabulary; writes in a second.
    #[arg(long, default_value = "tiny")]
    pub preset: String,
    /// Output GGUF file.
    #[arg(short, long)]
    pub output: PathBuf,
    /// Type of the matrix weights: bf16, f16 or f32 (norms, router and gates are always f32).
    #[arg(long = "type", default_value = "bf16")]
    pub weight_type: String,
    /// Random seed of the weights.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Overwrite the output file if it exists.
    #[arg(long)]
    pub force: bool,
}

pub fn run(args: Args) -> Result<()> {
    let Some(mut cfg) = SynthConfig::preset(&args.preset) else {
        bail!(
            "unknown preset {:?} (available: {})",
            args.preset,
            SynthConfig::PRESETS.join(", ")
        );
    };
    let ty = GgmlType::from_name(&args.weight_type)
        .filter(|t| matches!(t, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16))
        .with_context(|| format!("--type {:?}: use bf16, f16 or f32", args.weight_type))?;
    cfg.weight_type = ty;
    cfg.seed = args.seed;
    if args.output.exists() && !args.force {
        bail!(
            "{} exists (use --force to overwrite)",
            args.output.display()
        );
    }
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
