//! `redlite perplexity`: perplexity and KL divergence as llama-perplexity
//! computes them (the arithmetic is `redlite_eval::perplexity`; this file
//! runs the chunks and prints).
//!
//! - `redlite perplexity MODEL -f TEXT`: the text tokenized as llama.cpp does
//!   (one trailing newline dropped, BOS when the vocabulary adds one), cut
//!   into `--chunks` chunks of `-c` tokens, each a fresh sequence whose second
//!   half is scored; `[1]x,[2]y,…` on stdout and the final estimate.
//! - `--kl-divergence-base FILE` (without `--kl-divergence`): also writes the
//!   base logits file (llama-perplexity's format).
//! - `--kl-divergence --kl-divergence-base FILE`: the tokens and chunk layout
//!   come from FILE; prints the per-chunk line and every statistic of
//!   llama-perplexity's KL-divergence mode.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use redlite_eval::perplexity::{
    compress, nll, record_len, BaseReader, BaseWriter, Chunk, Kld, Ppl,
};
use redlite_model::{Model, Trace};
use redlite_tokenizer::Tokenizer;

#[derive(clap::Args)]
pub struct Args {
    /// GGUF model file.
    model: PathBuf,
    /// The text to score (llama.cpp's -f: one trailing newline is dropped).
    #[arg(short = 'f', long = "file", value_name = "TEXT")]
    file: Option<PathBuf>,
    /// Tokens per chunk (llama.cpp's -c).
    #[arg(short = 'c', long = "ctx-size", default_value_t = 512)]
    ctx_size: usize,
    /// At most this many chunks (default: all whole chunks of the text).
    #[arg(long)]
    chunks: Option<usize>,
    /// Without --kl-divergence: write the base logits file (the log-probabilities of the
    /// scored tokens, llama-perplexity's format). With it: the base to compare against.
    #[arg(long, value_name = "FILE", visible_alias = "save-all-logits")]
    kl_divergence_base: Option<PathBuf>,
    /// Compare against the base in --kl-divergence-base (its tokens and chunk size are
    /// used; -f is not needed).
    #[arg(long, requires = "kl_divergence_base")]
    kl_divergence: bool,
    /// Tokens per forward call within a chunk (llama.cpp's micro-batch).
    #[arg(long, default_value_t = 512)]
    batch: usize,
    /// Worker threads (default: all cores).
    #[arg(long, short = 't')]
    threads: Option<usize>,
    /// Print the final figures as one JSON object on stdout (after the text output goes
    /// to stderr).
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    load: crate::load::LoadArgs,
}

/// The text of `-f` as llama.cpp reads it: one trailing newline dropped.
pub fn read_text(path: &Path) -> Result<String> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let mut text = match String::from_utf8(bytes) {
        Ok(s) => s,
        Err(e) => {
            eprintln!(
                "warning: {}: not valid UTF-8 (byte {}); invalid bytes replaced",
                path.display(),
                e.utf8_error().valid_up_to()
            );
            String::from_utf8_lossy(e.as_bytes()).into_owned()
        }
    };
    if text.ends_with('\n') {
        text.pop();
    }
    Ok(text)
}

/// `common_tokenize(text, add_special = true, parse_special)`.
pub fn tokenize(model: &Model, text: &str, parse_special: bool) -> Result<(Tokenizer, Vec<u32>)> {
    let tok = Tokenizer::from_gguf(model.gguf())
        .map_err(|e| anyhow::anyhow!("{}: tokenizer: {e}", model.gguf().path().display()))?;
    let ids = tok.tokenize(text, true, parse_special);
    Ok((tok, ids))
}

/// The number of chunks llama.cpp evaluates: all whole chunks, at most
/// `max`; at least two chunks' worth of tokens are required.
pub fn chunk_count(n_tokens: usize, n_ctx: usize, max: Option<usize>, what: &str) -> Result<usize> {
    if n_ctx < 4 {
        bail!("-c {n_ctx}: a chunk needs at least 4 tokens");
    }
    if n_tokens < 2 * n_ctx {
        bail!(
            "you need at least {} tokens for a context of {n_ctx} tokens: {what} tokenizes to only \
             {n_tokens}",
            2 * n_ctx
        );
    }
    if max == Some(0) {
        bail!("--chunks 0: nothing to compute");
    }
    let n = n_tokens / n_ctx;
    Ok(max.map_or(n, |m| m.min(n)))
}

/// Run one chunk (a fresh sequence; the first token replaced by BOS when
/// `bos` is given) in forward calls of `batch` tokens and return all its
/// logits, `[n_ctx, vocab]`.
pub fn run_chunk(
    model: &Model,
    tokens: &[u32],
    bos: Option<u32>,
    batch: usize,
    mut trace: Option<&mut dyn Trace>,
) -> Result<Vec<f32>> {
    let mut toks = tokens.to_vec();
    if let (Some(b), Some(first)) = (bos, toks.first_mut()) {
        *first = b;
    }
    let mut state = model.new_state();
    let mut logits = Vec::with_capacity(toks.len() * model.config().vocab_size);
    for part in toks.chunks(batch.max(1)) {
        // (Reborrowed per call: the trait object's lifetime shortens only by
        // a coercion, which an Option does not get.)
        let t: Option<&mut dyn Trace> = match trace {
            Some(ref mut t) => Some(&mut **t),
            None => None,
        };
        logits.extend(model.forward_traced(&mut state, part, true, t)?);
    }
    Ok(logits)
}

pub fn bar(len: usize, what: &str) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(Some(len as u64), ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template(&format!(
            "{what} {{bar:40}} {{pos}}/{{len}} chunks ({{elapsed}}, eta {{eta}})"
        ))
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar
}

pub fn run(args: Args) -> Result<()> {
    let loaded = crate::load::load_model(&args.model, args.threads, &args.load)?;
    let model = loaded.model;
    if args.kl_divergence {
        return kl_divergence(&args, &model);
    }
    let Some(file) = &args.file else {
        bail!(
            "-f TEXT is required (except with --kl-divergence, which reads the base file's tokens)"
        );
    };
    let text = read_text(file)?;
    let (tok, tokens) = tokenize(&model, &text, false)?;
    let n_ctx = args.ctx_size;
    let n_chunk = chunk_count(
        tokens.len(),
        n_ctx,
        args.chunks,
        &file.display().to_string(),
    )?;
    let vocab = model.config().vocab_size;
    let bos = if tok.add_bos() { tok.bos_id() } else { None };
    let sc = Chunk::scored(n_ctx);
    eprintln!(
        "perplexity: {} tokens, {n_chunk} chunks of {n_ctx}, scoring the last {} of each, on {}",
        tokens.len(),
        sc.n_scored,
        model.device_name()
    );
    let mut base = match &args.kl_divergence_base {
        Some(p) => {
            eprintln!(
                "perplexity: saving the log-probabilities to {}",
                p.display()
            );
            Some(BaseWriter::create(p, n_ctx, vocab, n_chunk, &tokens)?)
        }
        None => None,
    };
    let rec = record_len(vocab);
    let mut records = vec![0u16; sc.n_scored * rec];
    let mut ppl = Ppl::default();
    let mut out = std::io::stdout().lock();
    let mut running = String::new();
    let bar = bar(n_chunk, "perplexity");
    for i in 0..n_chunk {
        let chunk = &tokens[i * n_ctx..(i + 1) * n_ctx];
        let logits = run_chunk(&model, chunk, bos, args.batch, None)?;
        for k in 0..sc.n_scored {
            let row = &logits[(sc.first + k) * vocab..(sc.first + k + 1) * vocab];
            let next = chunk[sc.first + k + 1] as usize;
            let v = match base {
                Some(_) => compress(row, next, &mut records[k * rec..(k + 1) * rec]),
                None => nll(row, next),
            };
            ppl.add(v);
        }
        if let Some(b) = base.as_mut() {
            b.write_chunk(&records)?;
        }
        let item = format!("[{}]{:.4},", i + 1, ppl.value());
        running.push_str(&item);
        bar.suspend(|| {
            if args.json {
                eprint!("{item}");
            } else {
                let _ = write!(out, "{item}");
                let _ = out.flush();
            }
        });
        bar.inc(1);
    }
    bar.finish_and_clear();
    if let Some(b) = base {
        b.finish()?;
    }
    let est = ppl.estimate();
    let line = match est {
        Some((p, u)) => format!("Final estimate: PPL = {p:.4} +/- {u:.5}"),
        None => "Unexpected negative standard deviation of log(prob)".to_string(),
    };
    if args.json {
        eprintln!("\n{line}");
        let j = serde_json::json!({
            "model": args.model.display().to_string(),
            "file": file.display().to_string(),
            "n_ctx": n_ctx,
            "chunks": n_chunk,
            "tokens_scored": ppl.count,
            "ppl": est.map(|e| e.0),
            "ppl_uncertainty": est.map(|e| e.1),
            "running": running,
        });
        writeln!(out, "{j}")?;
    } else {
        writeln!(out, "\n{line}")?;
    }
    Ok(())
}

fn kl_divergence(args: &Args, model: &Model) -> Result<()> {
    let Some(path) = &args.kl_divergence_base else {
        bail!("--kl-divergence needs --kl-divergence-base FILE");
    };
    let mut base = BaseReader::open(path)?;
    let vocab = model.config().vocab_size;
    if base.n_vocab != vocab {
        bail!(
            "{}: inconsistent vocabulary ({} in the base file, {vocab} in {})",
            path.display(),
            base.n_vocab,
            args.model.display()
        );
    }
    let tok = Tokenizer::from_gguf(model.gguf())
        .map_err(|e| anyhow::anyhow!("{}: tokenizer: {e}", args.model.display()))?;
    let bos = if tok.add_bos() { tok.bos_id() } else { None };
    let n_ctx = base.n_ctx;
    let n_chunk = args.chunks.map_or(base.n_chunk, |c| c.min(base.n_chunk));
    let sc = Chunk::scored(n_ctx);
    let rec = record_len(vocab);
    eprintln!(
        "kl_divergence: {n_chunk} chunks of {n_ctx} from {}, on {}",
        path.display(),
        model.device_name()
    );
    let mut kld = Kld::default();
    let mut records = Vec::new();
    let mut out = std::io::stdout().lock();
    let mut text = String::from(
        "chunk             PPL               ln(PPL(Q)/PPL(base))          KL Divergence              Δp RMS            Same top p\n",
    );
    if !args.json {
        write!(out, "{text}")?;
    }
    let bar = bar(n_chunk, "kl-divergence");
    let tokens = std::mem::take(&mut base.tokens);
    for i in 0..n_chunk {
        base.read_chunk(&mut records)?;
        let chunk = &tokens[i * n_ctx..(i + 1) * n_ctx];
        let logits = run_chunk(model, chunk, bos, args.batch, None)?;
        for k in 0..sc.n_scored {
            let row = &logits[(sc.first + k) * vocab..(sc.first + k + 1) * vocab];
            kld.add(
                row,
                &records[k * rec..(k + 1) * rec],
                chunk[sc.first + k + 1] as usize,
            );
        }
        let line = kld.chunk_line(i + 1);
        text.push_str(&line);
        text.push('\n');
        bar.suspend(|| {
            if args.json {
                eprintln!("{line}");
            } else {
                let _ = writeln!(out, "{line}");
            }
        });
        bar.inc(1);
    }
    bar.finish_and_clear();
    match kld.summary() {
        Some(s) => {
            if args.json {
                let mut j = serde_json::to_value(&s)?;
                j["model"] = serde_json::json!(args.model.display().to_string());
                j["base"] = serde_json::json!(path.display().to_string());
                writeln!(out, "{j}")?;
            } else {
                writeln!(out, "\n{}", s.report())?;
            }
        }
        None => eprintln!("kl_divergence: fewer than 100 tokens scored: no statistics"),
    }
    Ok(())
}
