//! `redlite run`: generate text from a prompt, streaming it to stdout.

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use redlite_chat::template::ChatTemplate;
use redlite_engine::{generate, GenerateParams, LookupParams, SamplingParams, StopReason};
use redlite_tokenizer::Tokenizer;

#[derive(clap::Args)]
pub struct Args {
    /// GGUF model file (for a split model, any of its shards).
    pub model: PathBuf,
    /// Prompt text.
    #[arg(short, long, conflicts_with = "file")]
    pub prompt: Option<String>,
    /// Read the prompt from a file.
    #[arg(short, long)]
    pub file: Option<PathBuf>,
    /// Most tokens to generate.
    #[arg(short = 'n', long, default_value_t = 256)]
    pub n_predict: usize,
    /// Context window in tokens (prompt + reply); a longer prompt is refused, and the reply
    /// stops at the window's end. Default: the model's training context.
    #[arg(short = 'c', long = "context", alias = "ctx-size")]
    pub context: Option<usize>,
    /// Sampling temperature; 0 is greedy (always the most likely token).
    #[arg(long = "temp", default_value_t = 0.7)]
    pub temperature: f32,
    /// Keep only the K most likely tokens (0 = off).
    #[arg(long, default_value_t = 20)]
    pub top_k: usize,
    /// Keep the smallest set of tokens whose probability reaches P (1 = off).
    #[arg(long, default_value_t = 0.8)]
    pub top_p: f32,
    /// Drop tokens less likely than M times the most likely one (0 = off).
    #[arg(long, default_value_t = 0.0)]
    pub min_p: f32,
    /// Random seed (default: a fresh one each run).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Parse special tokens such as <|im_start|> written in the prompt.
    #[arg(long)]
    pub special: bool,
    /// Treat the prompt as a user message: render it with the model's chat template
    /// (ChatML when the file has none) and generate the assistant's reply.
    #[arg(long)]
    pub chat: bool,
    /// System message for --chat.
    #[arg(long, requires = "chat")]
    pub system: Option<String>,
    /// Keep generating past end-of-generation tokens (<|im_end|>, <|endoftext|>).
    #[arg(long)]
    pub ignore_eos: bool,
    /// Worker threads (default: all cores).
    #[arg(short = 't', long)]
    pub threads: Option<usize>,
    /// Prompt tokens fed per forward pass (default: 512 on the CPU; on a GPU the pass size its
    /// buffers were made for, 2,048 on one of 40 GiB or more).
    #[arg(long)]
    pub batch: Option<usize>,
    /// Prompt-lookup speculative decoding: draft tokens from n-grams of the prompt and the
    /// output, verify them in one forward pass. The output is unchanged (greedy: identical tokens;
    /// sampling: the same distribution); it pays when the output repeats the prompt (rewrites).
    #[arg(long)]
    pub lookup: bool,
    /// Most tokens drafted at once with --lookup.
    #[arg(long, default_value_t = 8, requires = "lookup")]
    pub draft_max: usize,
    /// Longest n-gram matched with --lookup.
    #[arg(long, default_value_t = 4, requires = "lookup")]
    pub lookup_ngram: usize,
    #[command(flatten)]
    pub load: crate::load::LoadArgs,
}

pub fn run(args: Args) -> Result<()> {
    let prompt = match (&args.prompt, &args.file) {
        (Some(p), _) => p.clone(),
        (None, Some(f)) => std::fs::read_to_string(f)
            .with_context(|| format!("reading prompt file {}", f.display()))?,
        (None, None) => bail!("give a prompt with -p TEXT or -f FILE"),
    };
    if args.batch == Some(0) {
        bail!("--batch must be at least 1");
    }
    let loaded = crate::load::load_model(&args.model, args.threads, &args.load)?;
    let (model, threads) = (loaded.model, loaded.threads);
    let batch = args.batch.unwrap_or_else(|| model.prefill_batch());
    let tokenizer = Tokenizer::from_gguf(model.gguf())
        .with_context(|| format!("reading the tokenizer of {}", args.model.display()))?;
    let (prompt, special) = if args.chat {
        let template = ChatTemplate::from_gguf(model.gguf())
            .with_context(|| format!("reading the chat template of {}", args.model.display()))?;
        let mut messages = Vec::new();
        if let Some(sys) = &args.system {
            messages.push(serde_json::json!({"role": "system", "content": sys}));
        }
        messages.push(serde_json::json!({"role": "user", "content": prompt}));
        let text = template
            .render(&messages, None, true, &serde_json::Map::new())
            .context("rendering the chat template")?;
        (text, true)
    } else {
        (prompt, args.special)
    };
    let ids = tokenizer.tokenize(&prompt, tokenizer.add_bos(), special);
    if ids.is_empty() {
        bail!("the prompt is empty after tokenization");
    }
    let trained = model.config().context_length;
    let context = args.context.unwrap_or(trained);
    if args.context == Some(0) {
        bail!("--context must be at least 1 token");
    }
    if context > 0 && ids.len() >= context {
        bail!(
            "the prompt is {} tokens, which leaves no room in the context of {} tokens{}",
            ids.len(),
            context,
            if args.context.is_some() {
                " (--context)".to_string()
            } else {
                " (the model's training context; --context sets another)".to_string()
            }
        );
    }
    let max_tokens = if context > 0 {
        let room = context - ids.len();
        if args.n_predict > room {
            eprintln!(
                "note: the reply stops after {room} tokens, at the end of the context of {context} \
                 tokens (prompt {} + -n {} would not fit)",
                ids.len(),
                args.n_predict
            );
        }
        args.n_predict.min(room)
    } else {
        args.n_predict
    };
    eprintln!(
        "loaded {} in {:.2}s (resident {}; {} layers, vocab {}, {} threads); prompt: {} tokens",
        args.model.display(),
        loaded.seconds,
        loaded.rss_bytes.map_or("?".into(), crate::load::gib),
        model.config().n_layer,
        model.config().vocab_size,
        threads,
        ids.len()
    );
    let params = GenerateParams {
        max_tokens,
        sampling: SamplingParams {
            temperature: args.temperature,
            top_k: args.top_k,
            top_p: args.top_p,
            min_p: args.min_p,
            seed: args.seed,
        },
        prefill_chunk: batch,
        stop_at_eog: !args.ignore_eos,
        lookup: args.lookup.then(|| LookupParams {
            max_ngram: args.lookup_ngram.max(1),
            min_ngram: 2.min(args.lookup_ngram.max(1)),
            max_draft: args.draft_max,
        }),
        ..GenerateParams::default()
    };
    // A progress bar for long prompts only (shown after a second).
    let bar = ProgressBar::new(ids.len() as u64);
    bar.set_style(
        ProgressStyle::with_template(
            "reading prompt {bar:40} {pos}/{len} tokens ({per_sec}, eta {eta})",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    let started = Instant::now();
    let mut shown = false;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let g = generate(
        &model,
        &tokenizer,
        &ids,
        &params,
        |done, _total| {
            if !shown && started.elapsed() > Duration::from_secs(1) {
                bar.set_draw_target(indicatif::ProgressDrawTarget::stderr());
                shown = true;
            }
            bar.set_position(done as u64);
        },
        |text| {
            if !bar.is_finished() {
                bar.finish_and_clear();
            }
            // A closed stdout (e.g. piped to `head`) ends output, not the program with a panic.
            let _ = out.write_all(text.as_bytes());
            let _ = out.flush();
        },
    )?;
    bar.finish_and_clear();
    let _ = writeln!(out);
    let why = match g.stop {
        StopReason::EndOfGeneration(t) => format!(
            "end of generation ({})",
            tokenizer.token_text(t).unwrap_or("?")
        ),
        StopReason::Length => format!("token limit {max_tokens}"),
    };
    eprintln!(
        "prompt: {} tokens in {:.2}s ({:.1} tok/s); generation: {} tokens in {:.2}s ({:.1} tok/s); stopped at {}",
        g.prompt_tokens,
        g.prompt_seconds,
        g.prompt_tokens_per_second(),
        g.tokens.len(),
        g.generated_seconds,
        g.generated_tokens_per_second(),
        why
    );
    if args.lookup {
        eprintln!(
            "lookup: {} verify passes, {} tokens drafted, {} accepted ({:.0} %)",
            g.lookup.rounds,
            g.lookup.drafted,
            g.lookup.accepted,
            100.0 * g.lookup.accepted as f64 / g.lookup.drafted.max(1) as f64
        );
    }
    Ok(())
}
