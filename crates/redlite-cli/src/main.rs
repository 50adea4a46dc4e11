//! `redlite`: run Qwen3-Next / Qwen3-Coder-Next GGUF models.

use clap::{Parser, Subcommand};

mod cmd_bench;
mod cmd_eval;
mod cmd_imatrix;
mod cmd_inspect;
mod cmd_logits;
mod cmd_perplexity;
mod cmd_quantize;
mod cmd_run;
mod cmd_serve;
mod cmd_setup_pi;
mod cmd_synth;
mod cmd_tokenize;
mod cuda_env;
mod heap;
mod load;

#[derive(Parser)]
#[command(
    name = "redlite",
    version,
    about = "Red Lite: a fast engine for Qwen3-Coder-Next GGUF models",
    long_about = "Red Lite runs Qwen3-Next / Qwen3-Coder-Next models from the GGUF files llama.cpp uses.\n\nStart with `redlite synth --preset tiny -o tiny.gguf` and `redlite run tiny.gguf -p \"def main\"`,\nor point `redlite run` at a downloaded Qwen3-Coder-Next GGUF."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Show what a GGUF file is: architecture, hyper-parameters, tokenizer, tensors by type.
    Inspect(cmd_inspect::Args),
    /// Tokenize text with a model's tokenizer and print ids and pieces.
    Tokenize(cmd_tokenize::Args),
    /// Compute logits for a list of token ids and save them as .npy.
    Logits(cmd_logits::Args),
    /// Generate text from a prompt.
    Run(cmd_run::Args),
    /// Measure prompt processing and generation speed (llama-bench's tests; --json for its JSON).
    Bench(cmd_bench::Args),
    /// Write a model with random weights (for tests, demos and benchmarks).
    Synth(cmd_synth::Args),
    /// Serve the model over HTTP: OpenAI chat/completions, Anthropic messages, state reuse across turns.
    Serve(cmd_serve::Args),
    /// Quantize a GGUF model (llama-quantize's types and mixes, bit for bit; named mix cf2).
    Quantize(cmd_quantize::Args),
    /// Compute an importance matrix for quantization (llama-imatrix's output, GGUF or .dat).
    Imatrix(cmd_imatrix::Args),
    /// Perplexity and KL divergence of a model on a text (llama-perplexity's figures and files).
    Perplexity(cmd_perplexity::Args),
    /// Point the pi coding agent at `redlite serve` (merges a provider into pi's models.json).
    SetupPi(cmd_setup_pi::Args),
    /// Judge a model through the server: the needle check and the agent suite.
    Eval(cmd_eval::Args),
}

/// llama.cpp's multi-letter short flags, spelled as this command line's
/// long ones (clap's short flags are one letter).
fn llama_flags(args: impl Iterator<Item = std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    args.map(|a| match a.to_str() {
        Some("-ctk") => "--cache-type-k".into(),
        Some("-ctv") => "--cache-type-v".into(),
        _ => a,
    })
    .collect()
}

fn main() {
    let cli = Cli::parse_from(llama_flags(std::env::args_os()));
    // Batch commands keep what a pass frees for the next one; the server
    // keeps the allocator's defaults, so memory a request used (a large
    // body, say) goes back to the system after it (see `heap`).
    if matches!(
        cli.command,
        Command::Run(_)
            | Command::Bench(_)
            | Command::Logits(_)
            | Command::Perplexity(_)
            | Command::Imatrix(_)
    ) {
        heap::tune();
    }
    let result = match cli.command {
        Command::Inspect(a) => cmd_inspect::run(a),
        Command::Tokenize(a) => cmd_tokenize::run(a),
        Command::Logits(a) => cmd_logits::run(a),
        Command::Run(a) => cmd_run::run(a),
        Command::Bench(a) => cmd_bench::run(a),
        Command::Synth(a) => cmd_synth::run(a),
        Command::Serve(a) => cmd_serve::run(a),
        Command::Quantize(a) => cmd_quantize::run(a),
        Command::Imatrix(a) => cmd_imatrix::run(a),
        Command::Perplexity(a) => cmd_perplexity::run(a),
        Command::SetupPi(a) => cmd_setup_pi::run(a),
        Command::Eval(a) => cmd_eval::run(a),
    };
    if let Err(e) = result {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}
