//! `redlite imatrix`: an importance matrix as llama-imatrix computes it, from
//! Red Lite's own exact forward pass (CPU, f32 activations): the model's
//! observer hook ([`redlite_model::Trace::matmul_input`]) hands every
//! product's input to [`redlite_quantize::ImatrixCollector`]. Chunks as
//! llama-imatrix lays them out (`-c` tokens each, a fresh sequence, the first
//! token replaced by BOS when the vocabulary adds one; every token counted),
//! with the running perplexity of the second halves printed as it does.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{bail, Result};
use redlite_eval::perplexity::{nll, Chunk, Ppl};
use redlite_model::Trace;
use redlite_quantize::ImatrixCollector;

use crate::cmd_perplexity::{bar, chunk_count, read_text, run_chunk, tokenize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// llama.cpp's GGUF imatrix (`*.in_sum2`, `*.counts`, `imatrix.*` metadata).
    Gguf,
    /// The legacy `.dat` file.
    Dat,
}

#[derive(clap::Args)]
pub struct Args {
    /// GGUF model file (any type; bf16 for the reference importance matrix).
    model: PathBuf,
    /// Calibration text (llama.cpp's -f: one trailing newline is dropped).
    #[arg(short = 'f', long = "file", value_name = "TEXT")]
    file: PathBuf,
    /// Tokens per chunk (llama.cpp's -c).
    #[arg(short = 'c', long = "ctx-size", default_value_t = 512)]
    ctx_size: usize,
    /// At most this many chunks (default: all whole chunks of the text).
    #[arg(long)]
    chunks: Option<usize>,
    /// Output file.
    #[arg(short = 'o', long = "output", default_value = "imatrix.gguf")]
    output: PathBuf,
    /// Output format.
    #[arg(long, value_enum, default_value = "gguf")]
    output_format: Format,
    /// Also collect the input of output.weight (llama-imatrix's --process-output).
    #[arg(long)]
    process_output: bool,
    /// Parse special tokens written in the text (llama.cpp's --parse-special).
    #[arg(long)]
    parse_special: bool,
    /// Do not compute the perplexity of the chunks (llama-imatrix's --no-ppl).
    #[arg(long)]
    no_ppl: bool,
    /// Tokens per forward call within a chunk (default: the whole chunk, so every dense
    /// product has the chunk's rows; products of fewer than 16 rows are not collected, as
    /// in llama-imatrix).
    #[arg(long)]
    batch: Option<usize>,
    /// Worker threads (default: all cores).
    #[arg(long, short = 't')]
    threads: Option<usize>,
    #[command(flatten)]
    load: crate::load::LoadArgs,
}

/// The observer handed to the forward pass.
struct Observer<'a> {
    c: &'a mut ImatrixCollector,
    err: Option<String>,
}

impl Trace for Observer<'_> {
    fn tensor(&mut self, _: &str, _: usize, _: usize, _: &[f32]) {}

    fn matmul_input(&mut self, weight: &str, expert: Option<usize>, rows: usize, x: &[f32]) {
        if self.err.is_none() {
            if let Err(e) = self.c.add(weight, expert, rows, x) {
                self.err = Some(e);
            }
        }
    }
}

pub fn run(args: Args) -> Result<()> {
    // The exact activations: the CPU pass with f32 activations, experts
    // resident (the observer sees every product).
    let mut load = args.load.clone();
    load.device = crate::load::Device::Cpu;
    load.f32_activations = true;
    let model = crate::load::load_model(&args.model, args.threads, &load)?.model;
    let text = read_text(&args.file)?;
    let (tok, tokens) = tokenize(&model, &text, args.parse_special)?;
    let n_ctx = args.ctx_size;
    let n_chunk = chunk_count(
        tokens.len(),
        n_ctx,
        args.chunks,
        &args.file.display().to_string(),
    )?;
    let bos = if tok.add_bos() { tok.bos_id() } else { None };
    let vocab = model.config().vocab_size;
    let sc = Chunk::scored(n_ctx);
    eprintln!(
        "imatrix: {} tokens, {n_chunk} chunks of {n_ctx}",
        tokens.len()
    );
    let mut col = ImatrixCollector::new(model.config().n_expert, n_ctx, args.process_output);
    let mut ppl = Ppl::default();
    let bar = bar(n_chunk, "imatrix");
    let mut out = std::io::stdout().lock();
    for i in 0..n_chunk {
        let chunk = &tokens[i * n_ctx..(i + 1) * n_ctx];
        let mut obs = Observer {
            c: &mut col,
            err: None,
        };
        let batch = args.batch.unwrap_or(n_ctx);
        let logits = run_chunk(&model, chunk, bos, batch, Some(&mut obs))?;
        if let Some(e) = obs.err {
            bail!("{}: chunk {}: {e}", args.model.display(), i + 1);
        }
        if !args.no_ppl {
            for k in 0..sc.n_scored {
                let row = &logits[(sc.first + k) * vocab..(sc.first + k + 1) * vocab];
                ppl.add(nll(row, chunk[sc.first + k + 1] as usize));
            }
            bar.suspend(|| {
                let _ = write!(out, "[{}]{:.4},", i + 1, ppl.value());
                let _ = out.flush();
            });
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    if !args.no_ppl {
        match ppl.estimate() {
            Some((p, u)) => writeln!(out, "\nFinal estimate: PPL = {p:.4} +/- {u:.5}")?,
            None => writeln!(out, "\nUnexpected negative standard deviation of log(prob)")?,
        }
    }
    for (name, used, all) in col.partial() {
        eprintln!(
            "warning: entry '{name}' has partial data ({:.2}%)",
            100.0 * used as f64 / all as f64
        );
    }
    let dataset = args.file.display().to_string();
    match args.output_format {
        Format::Gguf => {
            if args.output.extension().is_none_or(|e| e != "gguf") {
                eprintln!(
                    "warning: saving the importance matrix in the GGUF format with a suffix other \
                     than .gguf (--output-format dat for the legacy format)"
                );
            }
            col.write_gguf(&args.output, &[dataset])?
        }
        Format::Dat => col.write_dat(&args.output, &dataset)?,
    }
    eprintln!(
        "imatrix: {} entries, {} chunks of {n_ctx}, written to {}",
        col.len(),
        col.chunk_count(),
        args.output.display()
    );
    Ok(())
}
