//! `redlite quantize`: make a quantized GGUF from a bf16/f16/f32 one, bit for bit
//! with llama.cpp's `llama-quantize` (see `redlite-quantize`).

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use redlite_gguf::GgmlType;
use redlite_quantize::driver::{parse_split_size, Progress, Split};
use redlite_quantize::ftype::{parse_ggml_type, QUANT_OPTIONS};
use redlite_quantize::{
    named_mix, quantize_file, FileType, Imatrix, QuantizeOptions, TensorTypeOverride, NAMED_MIXES,
};

#[derive(clap::Args)]
#[command(
    after_help = "TYPE is a llama-quantize file type (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q2_K_S, \
    Q3_K_S, Q3_K_M, Q3_K_L, Q4_K_S, Q4_K_M, Q5_K_S, Q5_K_M, Q6_K, IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, \
    IQ2_S, IQ2_M, IQ3_XXS, IQ3_XS, IQ3_S, IQ3_M, IQ4_NL, IQ4_XS, TQ1_0, TQ2_0, MXFP4_MOE, Q1_0, \
    Q2_0, BF16, F16, F32; any case, or its number) or a Red Lite mix:\n  \
    cf2   Q4_K_M with the routed experts' gate/up in IQ1_M and down in IQ2_XS (needs --imatrix)\n\n\
    The output equals llama-quantize's for the same input, importance matrix and options,\n\
    tensor for tensor.\n\n\
    Examples:\n  redlite quantize model-bf16.gguf model-Q4_K_M.gguf Q4_K_M\n  \
    redlite quantize --imatrix imatrix.gguf model-bf16.gguf model-cf2.gguf cf2\n  \
    redlite quantize --dry-run model-bf16.gguf IQ2_XS\n  \
    redlite quantize --split-max-size 40G model-bf16.gguf model-Q4_K_M.gguf Q4_K_M"
)]
pub struct Args {
    /// Input GGUF (bf16, f16 or f32 weights; the first shard of a split model).
    pub input: PathBuf,
    /// `[OUTPUT] TYPE`: the output file and the type (with --dry-run, only TYPE).
    #[arg(num_args = 1..=2, required = true, value_name = "[OUTPUT] TYPE")]
    pub rest: Vec<String>,
    /// Importance matrix (llama.cpp's GGUF imatrix format or the legacy .dat), as made by
    /// `llama-imatrix`. Required by IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, Q2_K_S and cf2.
    #[arg(long)]
    pub imatrix: Option<PathBuf>,
    /// Quantize tensors whose name matches PATTERN (a regular expression, searched) to TYPE
    /// (a ggml type name such as q4_k or iq2_xs). Repeatable; the first match wins.
    #[arg(long = "tensor-type", value_name = "PATTERN=TYPE")]
    pub tensor_type: Vec<String>,
    /// Type of output.weight.
    #[arg(long, value_name = "TYPE")]
    pub output_tensor_type: Option<String>,
    /// Type of token_embd.weight.
    #[arg(long, value_name = "TYPE")]
    pub token_embedding_type: Option<String>,
    /// Leave output.weight as it is in the input.
    #[arg(long)]
    pub leave_output_tensor: bool,
    /// No mix: every quantized tensor gets TYPE's default tensor type.
    #[arg(long)]
    pub pure: bool,
    /// Allow quantizing tensors that are already quantized (loses quality).
    #[arg(long)]
    pub allow_requantize: bool,
    /// Worker threads (default: all cores). The output does not depend on it.
    #[arg(long, short = 't')]
    pub threads: Option<usize>,
    /// Print each tensor's type and size and the totals; write nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Overwrite OUTPUT if it exists.
    #[arg(long)]
    pub force: bool,
    /// Write shards of at most N megabytes (M, 10^6 bytes) or gigabytes (G, 10^9) of tensor
    /// data, as `gguf-split --split-max-size` does: OUTPUT-00001-of-0000N.gguf, ...
    #[arg(long, value_name = "N(M|G)", conflicts_with = "keep_split")]
    pub split_max_size: Option<String>,
    /// Write the output in as many shards as the input, each tensor in its input shard's number
    /// (llama-quantize's --keep-split).
    #[arg(long)]
    pub keep_split: bool,
}

fn ggml_type(s: &str, what: &str) -> Result<GgmlType> {
    parse_ggml_type(s).with_context(|| format!("{what}: invalid ggml type '{s}'"))
}

pub fn run(args: Args) -> Result<()> {
    let (output, type_arg) = match (args.rest.as_slice(), args.dry_run) {
        ([t], true) => (None, t.clone()),
        ([o, t], _) => (Some(PathBuf::from(o)), t.clone()),
        ([_], false) => bail!(
            "missing OUTPUT or TYPE: use `redlite quantize IN OUT TYPE` (or --dry-run IN TYPE)"
        ),
        _ => bail!("expected [OUTPUT] TYPE"),
    };
    let (ftype, name, mut overrides) = if let Some(m) = named_mix(&type_arg) {
        let ov = m
            .tensor_types
            .iter()
            .map(|s| TensorTypeOverride::parse(s).map_err(anyhow::Error::msg))
            .collect::<Result<Vec<_>>>()?;
        (m.ftype, m.name.to_string(), ov)
    } else if let Some((ft, name)) = FileType::parse(&type_arg) {
        (ft, name.to_string(), Vec::new())
    } else {
        let names: Vec<&str> = QUANT_OPTIONS
            .iter()
            .map(|o| o.0)
            .chain(NAMED_MIXES.iter().map(|m| m.name))
            .collect();
        bail!("invalid type '{type_arg}'; one of: {}", names.join(", "));
    };
    // Options given by the user come before a named mix's, so they win.
    let mut user = Vec::new();
    for s in &args.tensor_type {
        user.push(TensorTypeOverride::parse(s).map_err(anyhow::Error::msg)?);
    }
    user.append(&mut overrides);
    let mut opts = QuantizeOptions::new(ftype);
    opts.mix.tensor_types = user;
    opts.mix.pure = args.pure;
    opts.mix.quantize_output_tensor = !args.leave_output_tensor;
    opts.mix.output_tensor_type = args
        .output_tensor_type
        .as_deref()
        .map(|s| ggml_type(s, "--output-tensor-type"))
        .transpose()?;
    opts.mix.token_embedding_type = args
        .token_embedding_type
        .as_deref()
        .map(|s| ggml_type(s, "--token-embedding-type"))
        .transpose()?;
    opts.allow_requantize = args.allow_requantize;
    opts.threads = args.threads.unwrap_or(0);
    opts.dry_run = args.dry_run;
    if let Some(s) = &args.split_max_size {
        opts.split = Split::MaxBytes(
            parse_split_size(s).map_err(|e| anyhow::anyhow!("--split-max-size: {e}"))?,
        );
    } else if args.keep_split {
        opts.split = Split::KeepInput;
    }
    if let Some(p) = &args.imatrix {
        let im = Imatrix::load(p)
            .with_context(|| format!("failed to load imatrix from '{}'", p.display()))?;
        eprintln!(
            "loaded {} importance matrix entries from {} computed on {} chunks{}",
            im.entries.len(),
            p.display(),
            im.chunk_count,
            im.datasets
                .first()
                .map(|d| format!(" of {d}"))
                .unwrap_or_default()
        );
        opts.imatrix = Some((im, p.to_string_lossy().into_owned()));
    }
    let out = output.clone().unwrap_or_default();
    if let Some(o) = &output {
        if o.exists() && !args.force {
            bail!("{} exists (use --force to overwrite)", o.display());
        }
        if let (Ok(a), Ok(b)) = (std::fs::canonicalize(&args.input), std::fs::canonicalize(o)) {
            if a == b {
                bail!(
                    "input and output files are the same: '{}'",
                    args.input.display()
                );
            }
        }
        eprintln!(
            "quantizing '{}' to '{}' as {name}",
            args.input.display(),
            o.display()
        );
    } else {
        eprintln!(
            "calculating quantization size for '{}' as {name}",
            args.input.display()
        );
    }
    let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template(
            "{bar:40} {bytes}/{total_bytes} ({bytes_per_sec}, eta {eta}) {msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let started = Instant::now();
    let progress = |p: Progress<'_>| match p {
        Progress::Start { out_bytes, .. } => bar.set_length(out_bytes),
        Progress::Tensor { tensor, .. } => {
            bar.set_message(format!("{} -> {}", tensor.name, tensor.target))
        }
        Progress::Bytes { bytes } => bar.inc(bytes),
    };
    let input_name = args.input.display().to_string();
    let report = quantize_file(&args.input, &out, &opts, &progress)
        .map_err(|e| anyhow::anyhow!("failed to quantize model from '{input_name}': {e}"))?;
    bar.finish_and_clear();
    let mib = |b: u64| b as f64 / 1024.0 / 1024.0;
    let n = report.tensors.len();
    for (i, t) in report.tensors.iter().enumerate() {
        let dims: Vec<String> = t.dims.iter().map(|d| d.to_string()).collect();
        if t.converts() {
            println!(
                "[{:4}/{:4}] {:<40} [{}] {:>7} -> {:<7} {:9.2} MiB -> {:9.2} MiB{}",
                i + 1,
                n,
                t.name,
                dims.join(", "),
                t.src_type.name(),
                t.target.name(),
                mib(t.in_bytes()),
                mib(t.out_bytes()),
                if t.fallback {
                    " (fallback: row length)"
                } else {
                    ""
                }
            );
        } else {
            println!(
                "[{:4}/{:4}] {:<40} [{}] {:>7} (kept)    {:9.2} MiB",
                i + 1,
                n,
                t.name,
                dims.join(", "),
                t.src_type.name(),
                mib(t.in_bytes())
            );
        }
    }
    let bpw = |b: u64| b as f64 * 8.0 / report.n_elements.max(1) as f64;
    println!(
        "model size  = {:9.2} MiB ({:.2} BPW)",
        mib(report.in_bytes),
        bpw(report.in_bytes)
    );
    println!(
        "quant size  = {:9.2} MiB ({:.2} BPW)",
        mib(report.out_bytes),
        bpw(report.out_bytes)
    );
    if report.n_fallback > 0 {
        println!(
            "{} of {} tensor(s) required fallback quantization",
            report.n_fallback, n
        );
    }
    if report.will_require_imatrix {
        println!("WARNING: dry run completed successfully, but actually completing this quantization will require an imatrix!");
    }
    if report.files.len() > 1 || opts.split != Split::None {
        for f in &report.files {
            println!("wrote {}", f.display());
        }
    }
    if !args.dry_run {
        println!("quantize time = {:.2} s", started.elapsed().as_secs_f64());
    }
    Ok(())
}
