//! `redlite bench`: prompt-processing and generation speed, as llama-bench
//! measures them (tests `pp512` and `tg128`, its JSON keys with `--json`),
//! plus the weight bytes one decoded token reads and the bandwidth that
//! implies.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use redlite_gguf::GgufFile;
use redlite_model::{Model, State};
use serde_json::{json, Value};

use crate::load::{gib, load_model, proc_status_bytes, LoadArgs};

/// How the state is brought to `--start-position`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum FillState {
    /// Random KV cache and DeltaNet states of realistic magnitude (instant; the logits are
    /// meaningless but the cost of each step is that of real decoding at that depth).
    Random,
    /// Feed that many random prompt tokens first (real states; takes as long as the prefill).
    Prefill,
}

/// Drafts of the speculative-decoding test (`--draft`).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Draft {
    /// The plain run's own output replayed: every drafted token is accepted (the best case).
    Replay,
    /// Random tokens: none is accepted (the worst case).
    Random,
    /// Prompt lookup, as `run --lookup` drafts (random weights rarely repeat text).
    Lookup,
}

impl Draft {
    fn name(self) -> &'static str {
        match self {
            Draft::Replay => "replay",
            Draft::Random => "random",
            Draft::Lookup => "lookup",
        }
    }
}

#[derive(clap::Args)]
#[command(after_help = "Examples:\n  redlite bench model.gguf\n  \
    redlite bench model.gguf -p 512 -n 128 -r 5 -t 2 --json > bench.json\n  \
    redlite bench model.gguf -p 0 -n 64 --start-position 4096 --fill-state random\n  \
    redlite bench model.gguf -p 0 -n 128 --draft replay,random --draft-max 8\n  \
    redlite bench model.gguf -p 0 -n 128 --parallel 1,4,8")]
pub struct Args {
    /// GGUF model file (for a split model, any of its shards).
    pub model: PathBuf,
    /// Prompt tokens of the prompt-processing test (`ppN`); 0 skips it.
    #[arg(short = 'p', long, default_value_t = 512)]
    pub prompt_tokens: usize,
    /// Tokens of the generation test (`tgN`), decoded one at a time; 0 skips it.
    #[arg(short = 'n', long, default_value_t = 128)]
    pub gen_tokens: usize,
    /// Repetitions of each test (after one warm-up run).
    #[arg(short = 'r', long, default_value_t = 3)]
    pub repeat: usize,
    /// Worker threads (default: all cores).
    #[arg(short = 't', long)]
    pub threads: Option<usize>,
    /// Prompt tokens per forward pass in the prompt-processing test (default: 512 on the CPU;
    /// on a GPU the pass size its buffers were made for, 2,048 on one of 40 GiB or more).
    #[arg(short = 'b', long)]
    pub batch: Option<usize>,
    /// Run both tests after this many positions of context (llama-bench's depth, `-d`).
    #[arg(long, default_value_t = 0)]
    pub start_position: usize,
    /// How the context of --start-position is made.
    #[arg(long, value_enum, default_value_t = FillState::Prefill)]
    pub fill_state: FillState,
    /// Seed of the random prompt tokens and random states.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Speculative decoding, engine side: greedy generation of -n tokens after a 64-token
    /// prompt, plain and with each of these drafts (comma list), interleaved in every
    /// repetition; every run's tokens must equal the plain run's.
    #[arg(long, value_enum, value_delimiter = ',')]
    pub draft: Vec<Draft>,
    /// Most tokens drafted per verify pass in the --draft test.
    #[arg(long, default_value_t = 8)]
    pub draft_max: usize,
    /// Batched generation (comma list of sequence counts, e.g. 1,4,8): that many sequences,
    /// each from the test's start state and its own first token, decode -n tokens greedily
    /// together, one batched forward pass per step (as the server's scheduler runs `--parallel`
    /// slots); t/s is the aggregate over all of them.
    #[arg(long, value_delimiter = ',')]
    pub parallel: Vec<usize>,
    /// Print llama-bench's JSON (a list of tests) on stdout and nothing else there.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub load: LoadArgs,
}

/// Weight bytes one decoded token reads: every tensor of the trunk, except
/// that of the routed experts only `n_expert_used` of `n_expert` are read and
/// of the token embeddings one row (all of it again when it doubles as the
/// output head). MTP blocks beyond the trunk are not read.
pub fn weight_bytes_per_token(f: &GgufFile, n_layer: usize, n_expert: usize, used: usize) -> u64 {
    let has_output = f.tensor_info("output.weight").is_some();
    let mut total = 0u64;
    for t in &f.tensors {
        let name = t.name.as_str();
        if let Some(rest) = name.strip_prefix("blk.") {
            let il: usize = rest
                .split('.')
                .next()
                .and_then(|s| s.parse().ok())
                .unwrap_or(0);
            if il >= n_layer {
                continue;
            }
        }
        total += if name.ends_with("_exps.weight") && n_expert > 0 {
            t.n_bytes / n_expert as u64 * used as u64
        } else if name == "token_embd.weight" {
            let row = t.n_bytes / t.n_rows().max(1);
            if has_output {
                row
            } else {
                row + t.n_bytes
            }
        } else {
            t.n_bytes
        };
    }
    total
}

/// Zero the expert cache's counters (each test reports its own runs).
fn reset_cache_stats(model: &Model) {
    if let Some(c) = model.expert_cache() {
        c.reset_stats();
    }
}

/// The `redlite_expert_prefetch_*` fields of a decode test on a device that
/// prefetches experts held outside its memory.
fn prefetch_json(p: &redlite_model::PrefetchStats) -> serde_json::Map<String, Value> {
    let v = json!({
        "redlite_expert_prefetch_chosen": p.chosen,
        "redlite_expert_prefetch_predicted": p.predicted,
        "redlite_expert_prefetch_accuracy": p.accuracy(),
        "redlite_expert_prefetch_outside": p.outside,
        "redlite_expert_prefetch_outside_copied_ahead": p.outside_predicted,
        "redlite_expert_prefetch_outside_hit_rate": p.outside_hit_rate(),
        "redlite_expert_prefetch_copies": p.copied,
        "redlite_expert_prefetch_bytes_copied": p.bytes_copied(),
        "redlite_expert_prefetch_bytes_stopped": p.stopped_bytes,
        "redlite_expert_prefetch_late_copies": p.late,
        "redlite_expert_prefetch_bytes_read_on_use": p.read_on_use() * p.expert_bytes,
    });
    match v {
        Value::Object(m) => m,
        _ => serde_json::Map::new(),
    }
}

/// One line on the decode prefetch of a test.
fn prefetch_line(p: &redlite_model::PrefetchStats, n: usize) -> String {
    format!(
        "expert prefetch tg{n}: {:.1}% of the chosen experts predicted; of the {} chosen in host \
         memory, {} ({:.1}%) copied in ahead and {} read over the bus when used; {} copies \
         begun ({:.1} MB copied, {:.1} MB left undone by copies stopped), {:.1} MB read on use ({} of those experts copied after the router)",
        100.0 * p.accuracy(),
        p.outside,
        p.outside_predicted,
        100.0 * p.outside_hit_rate(),
        p.read_on_use(),
        p.copied,
        p.bytes_copied() as f64 / 1e6,
        p.stopped_bytes as f64 / 1e6,
        (p.read_on_use() * p.expert_bytes) as f64 / 1e6,
        p.late
    )
}

/// The `redlite_expert_cache_*` fields of a test: settings, totals over the
/// test's runs, and per-layer counters.
fn cache_json(c: &redlite_model::ExpertCacheStats) -> serde_json::Map<String, Value> {
    let t = c.total();
    let layers: Vec<Value> = c
        .layers
        .iter()
        .map(|l| {
            json!({
                "hits": l.hits,
                "misses": l.misses,
                "bytes_read": l.bytes_read,
                "evictions": l.evictions,
                "stall_ns": l.stall.as_nanos() as u64,
                "predictions": l.predictions,
                "prediction_hits": l.prediction_hits,
                "prefetches": l.prefetches,
                "prefetch_bytes_read": l.prefetch_bytes,
                "prefetch_waits": l.waits,
            })
        })
        .collect();
    let v = json!({
        "redlite_expert_cache_budget_bytes": c.budget,
        "redlite_expert_cache_entry_bytes": c.entry_bytes,
        "redlite_expert_cache_direct_io": c.direct_io,
        "redlite_expert_cache_resident_bytes": c.resident_bytes,
        "redlite_expert_cache_entries": c.entries,
        "redlite_expert_cache_hits": t.hits,
        "redlite_expert_cache_misses": t.misses,
        "redlite_expert_cache_hit_rate": t.hit_rate(),
        "redlite_expert_cache_bytes_read": t.bytes_read,
        "redlite_expert_cache_evictions": t.evictions,
        "redlite_expert_cache_stall_ns": t.stall.as_nanos() as u64,
        "redlite_expert_cache_prefetch": c.prefetch,
        "redlite_expert_cache_predictions": t.predictions,
        "redlite_expert_cache_prediction_hits": t.prediction_hits,
        "redlite_expert_cache_prediction_accuracy": t.prediction_accuracy(),
        "redlite_expert_cache_prefetches": t.prefetches,
        "redlite_expert_cache_prefetch_bytes_read": t.prefetch_bytes,
        "redlite_expert_cache_prefetch_waits": t.waits,
        "redlite_expert_cache_layers": layers,
    });
    match v {
        Value::Object(m) => m,
        _ => serde_json::Map::new(),
    }
}

/// Seeded token ids below `vocab`.
fn random_tokens(n: usize, vocab: usize, seed: u64) -> Vec<u32> {
    let mut x = seed ^ 0x9E37_79B9_7F4A_7C15;
    (0..n)
        .map(|_| {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ((x >> 33) % vocab as u64) as u32
        })
        .collect()
}

fn prefill(model: &Model, st: &mut State, ids: &[u32], batch: usize) -> Result<Vec<f32>> {
    let mut last = Vec::new();
    for chunk in ids.chunks(batch) {
        last = model.forward(st, chunk, false)?;
    }
    Ok(last)
}

/// Decode `n` tokens greedily in each of `states` together (one batched
/// forward pass per step), sequence `i` from `first[i]`.
fn decode_batch(model: &Model, states: &mut [State], first: &[u32], n: usize) -> Result<()> {
    let vocab = model.config().vocab_size;
    let mut toks = first.to_vec();
    for _ in 0..n {
        let mut refs: Vec<&mut State> = states.iter_mut().collect();
        let logits = model.forward_batch(&mut refs, &toks)?;
        for (i, t) in toks.iter_mut().enumerate() {
            *t = redlite_engine::argmax(&logits[i * vocab..(i + 1) * vocab]);
        }
    }
    Ok(())
}

/// Decode `n` tokens greedily from `first`.
fn decode(model: &Model, st: &mut State, first: u32, n: usize) -> Result<()> {
    let mut tok = first;
    for _ in 0..n {
        let logits = model.forward(st, &[tok], false)?;
        tok = redlite_engine::argmax(&logits);
    }
    Ok(())
}

struct Stats {
    samples_ns: Vec<u64>,
    samples_ts: Vec<f64>,
}

impl Stats {
    fn new(samples_ns: Vec<u64>, tokens: usize) -> Stats {
        let samples_ts = samples_ns
            .iter()
            .map(|&ns| tokens as f64 * 1e9 / ns.max(1) as f64)
            .collect();
        Stats {
            samples_ns,
            samples_ts,
        }
    }
    fn mean_sd(v: &[f64]) -> (f64, f64) {
        let n = v.len() as f64;
        let m = v.iter().sum::<f64>() / n;
        let sd = if v.len() > 1 {
            (v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (n - 1.0)).sqrt()
        } else {
            0.0
        };
        (m, sd)
    }
    fn ts(&self) -> (f64, f64) {
        Self::mean_sd(&self.samples_ts)
    }
    fn ns(&self) -> (f64, f64) {
        let v: Vec<f64> = self.samples_ns.iter().map(|&x| x as f64).collect();
        Self::mean_sd(&v)
    }
    fn median_ts(&self) -> f64 {
        let mut v = self.samples_ts.clone();
        v.sort_by(|a, b| a.total_cmp(b));
        let n = v.len();
        if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        }
    }
    fn min_ts(&self) -> f64 {
        self.samples_ts
            .iter()
            .copied()
            .fold(f64::INFINITY, f64::min)
    }
    fn max_ts(&self) -> f64 {
        self.samples_ts.iter().copied().fold(0.0, f64::max)
    }
}

fn cpu_info() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string())
}

fn human_count(n: u64) -> String {
    if n >= 1_000_000_000 {
        format!("{:.2} B", n as f64 / 1e9)
    } else {
        format!("{:.2} M", n as f64 / 1e6)
    }
}

pub fn run(args: Args) -> Result<()> {
    if args.repeat == 0 {
        bail!("--repeat must be at least 1");
    }
    if args.parallel.contains(&0) {
        bail!("--parallel takes sequence counts of at least 1");
    }
    if !args.parallel.is_empty() && args.gen_tokens == 0 {
        bail!("--parallel needs generated tokens (-n)");
    }
    if args.batch == Some(0) {
        bail!("--batch must be at least 1");
    }
    if args.prompt_tokens == 0 && args.gen_tokens == 0 {
        bail!("nothing to measure: both --prompt-tokens and --gen-tokens are 0");
    }
    if !args.draft.is_empty() && (args.gen_tokens == 0 || args.draft_max == 0) {
        bail!("--draft needs --gen-tokens and --draft-max of at least 1");
    }
    if !args.draft.is_empty() && args.start_position > 0 {
        bail!(
            "--draft generates after a fresh 64-token prompt; it cannot start at \
             --start-position {} (run the depth tests without --draft)",
            args.start_position
        );
    }
    let loaded = load_model(&args.model, args.threads, &args.load)?;
    let model = &loaded.model;
    let batch = args.batch.unwrap_or_else(|| model.prefill_batch());
    let c = model.config().clone();
    let f = model.gguf();
    let model_size: u64 = f.tensors.iter().map(|t| t.n_bytes).sum();
    let n_params: u64 = f.tensors.iter().map(|t| t.n_elements()).sum();
    let bytes_per_token = weight_bytes_per_token(f, c.n_layer, c.n_expert, c.n_expert_used);
    let isa = redlite_quant::isa().name();
    let activations = if args.load.f32_activations {
        "f32"
    } else {
        "int16"
    };
    let on_gpu = model.device().is_some();
    let activations = if on_gpu && activations == "int16" {
        "int16 (one-token and verify products)"
    } else {
        activations
    };
    let kernels = if on_gpu {
        model.device_name()
    } else {
        format!(
            "{isa}, {activations} activations ({:?}), KV cache K {} V {}",
            redlite_quant::q16::level(),
            args.load.cache_type_k,
            args.load.cache_type_v
        )
    };
    eprintln!(
        "loaded {} in {:.2}s (resident {}; {} layers, {} experts top-{}, vocab {}, {} threads, {kernels})",
        args.model.display(),
        loaded.seconds,
        loaded.rss_bytes.map_or("?".into(), gib),
        c.n_layer,
        c.n_expert,
        c.n_expert_used,
        c.vocab_size,
        loaded.threads
    );

    // The state the tests start from.
    let depth = args.start_position;
    let start = if depth == 0 {
        model.new_state()
    } else {
        match args.fill_state {
            FillState::Random => model.random_state(depth, args.seed)?,
            FillState::Prefill => {
                eprintln!("filling {depth} positions of context with a prefill");
                let mut st = model.new_state();
                let ids = random_tokens(depth, c.vocab_size, args.seed ^ 0xD3);
                prefill(model, &mut st, &ids, batch)?;
                st
            }
        }
    };

    let prompt = random_tokens(args.prompt_tokens, c.vocab_size, args.seed);
    let first = random_tokens(1, c.vocab_size, args.seed ^ 0x7)[0];

    // Warm-up: a short prefill and a few decode steps (caches, thread pool, page faults).
    {
        let mut st = start.snapshot();
        let warm = &prompt[..prompt.len().min(16)];
        if !warm.is_empty() {
            prefill(model, &mut st, warm, batch)?;
        }
        decode(model, &mut st, first, 2)?;
    }

    let n_runs = args.repeat * ((args.prompt_tokens > 0) as usize + (args.gen_tokens > 0) as usize);
    let bar = ProgressBar::with_draw_target(Some(n_runs as u64), ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template("benchmarking {bar:40} {pos}/{len} runs ({msg})")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut pp = None;
    let (mut pp_cache, mut tg_cache) = (None, None);
    let mut tg_prefetch = None;
    if let Some(d) = model.device() {
        d.profile(); // drop what the warm-up timed
    }
    if args.prompt_tokens > 0 {
        bar.set_message(format!("pp{}", args.prompt_tokens));
        let mut ns = Vec::new();
        reset_cache_stats(model);
        for _ in 0..args.repeat {
            let mut st = start.snapshot();
            let t = Instant::now();
            prefill(model, &mut st, &prompt, batch)?;
            ns.push(t.elapsed().as_nanos() as u64);
            bar.inc(1);
        }
        pp = Some(Stats::new(ns, args.prompt_tokens));
        pp_cache = model.expert_cache_stats();
        print_profile(
            model,
            &format!("{}-token prefill", args.prompt_tokens),
            args.repeat as f64,
        );
    }
    let mut tg = None;
    if args.gen_tokens > 0 {
        bar.set_message(format!("tg{}", args.gen_tokens));
        let mut ns = Vec::new();
        reset_cache_stats(model);
        if let Some(d) = model.device() {
            d.prefetch_stats(true);
        }
        for _ in 0..args.repeat {
            let mut st = start.snapshot();
            let t = Instant::now();
            decode(model, &mut st, first, args.gen_tokens)?;
            ns.push(t.elapsed().as_nanos() as u64);
            bar.inc(1);
        }
        tg = Some(Stats::new(ns, args.gen_tokens));
        tg_cache = model.expert_cache_stats();
        tg_prefetch = model.device().and_then(|d| d.prefetch_stats(true));
        print_profile(model, "decode step", (args.repeat * args.gen_tokens) as f64);
    }
    // Batched generation: per sequence count, the aggregate tokens/s.
    let mut par = Vec::new();
    for &np in &args.parallel {
        bar.set_message(format!("tg{} x{np}", args.gen_tokens));
        let firsts = random_tokens(np, c.vocab_size, args.seed ^ 0x5EED);
        // Warm-up (a captured pass per batch size on a GPU).
        {
            let mut sts: Vec<State> = (0..np).map(|_| start.snapshot()).collect();
            decode_batch(model, &mut sts, &firsts, 2)?;
        }
        if let Some(d) = model.device() {
            d.profile();
        }
        let mut ns = Vec::new();
        for _ in 0..args.repeat {
            let mut sts: Vec<State> = (0..np).map(|_| start.snapshot()).collect();
            let t = Instant::now();
            decode_batch(model, &mut sts, &firsts, args.gen_tokens)?;
            ns.push(t.elapsed().as_nanos() as u64);
        }
        print_profile(
            model,
            &format!("batched decode step of {np}"),
            (args.repeat * args.gen_tokens) as f64,
        );
        par.push((np, Stats::new(ns, np * args.gen_tokens)));
    }
    bar.finish_and_clear();
    let spec = if args.draft.is_empty() {
        Vec::new()
    } else {
        draft_test(model, &args)?
    };
    let peak_rss = proc_status_bytes("VmHWM");

    let filename = args.model.display().to_string();
    let model_type = f
        .get_str("general.name")
        .ok()
        .flatten()
        .unwrap_or("qwen3next")
        .to_string();
    let fill = if depth == 0 {
        "none"
    } else {
        match args.fill_state {
            FillState::Random => "random",
            FillState::Prefill => "prefill",
        }
    };
    let test = |s: &Stats,
                n_prompt: usize,
                n_gen: usize,
                cache: &Option<redlite_model::ExpertCacheStats>|
     -> Value {
        let (avg_ts, sd_ts) = s.ts();
        let (avg_ns, sd_ns) = s.ns();
        let decode = n_gen > 0;
        let mut v = json!({
            "cpu_info": cpu_info(),
            "backends": if on_gpu { "CUDA" } else { "CPU" },
            "redlite_device": model.device_name(),
            "model_filename": filename,
            "model_type": model_type,
            "model_size": model_size,
            "model_n_params": n_params,
            "n_batch": batch,
            "n_ubatch": batch,
            "n_threads": loaded.threads,
            "n_gpu_layers": if on_gpu { c.n_layer + 1 } else { 0 },
            "type_k": "f32",
            "type_v": "f32",
            "use_mmap": !args.load.no_mmap,
            "n_prompt": n_prompt,
            "n_gen": n_gen,
            "n_depth": depth,
            "avg_ns": avg_ns.round() as u64,
            "stddev_ns": sd_ns.round() as u64,
            "avg_ts": avg_ts,
            "stddev_ts": sd_ts,
            "samples_ns": s.samples_ns,
            "samples_ts": s.samples_ts,
            "redlite_median_ts": s.median_ts(),
            "redlite_min_ts": s.min_ts(),
            "redlite_max_ts": s.max_ts(),
            "redlite_weight_bytes_per_token": if decode { json!(bytes_per_token) } else { Value::Null },
            "redlite_gbps": if decode { json!(bytes_per_token as f64 * s.median_ts() / 1e9) } else { Value::Null },
            "redlite_peak_rss_bytes": peak_rss,
            "redlite_load_seconds": loaded.seconds,
            "redlite_rss_after_load_bytes": loaded.rss_bytes,
            "redlite_isa": isa,
            "redlite_activations": activations,
            "redlite_cache_type_k": args.load.cache_type_k.name(),
            "redlite_cache_type_v": args.load.cache_type_v.name(),
            "redlite_q16_level": format!("{:?}", redlite_quant::q16::level()),
            "redlite_fill_state": fill,
        });
        if let (Some(obj), Some(c)) = (v.as_object_mut(), cache) {
            obj.extend(cache_json(c));
        }
        v
    };
    let mut tests = Vec::new();
    if let Some(s) = &pp {
        tests.push((
            "pp",
            args.prompt_tokens,
            s,
            test(s, args.prompt_tokens, 0, &pp_cache),
        ));
    }
    if let Some(s) = &tg {
        tests.push(("tg", args.gen_tokens, s, {
            let mut v = test(s, 0, args.gen_tokens, &tg_cache);
            if let (Some(obj), Some(p)) = (v.as_object_mut(), &tg_prefetch) {
                obj.extend(prefetch_json(p));
            }
            v
        }));
    }
    let one_stream = par
        .iter()
        .find(|(np, _)| *np == 1)
        .map(|(_, s)| s.median_ts());
    for (np, st) in &par {
        let mut v = test(st, 0, args.gen_tokens, &None);
        if let Some(obj) = v.as_object_mut() {
            obj.insert("redlite_parallel".into(), json!(np));
            obj.insert(
                "redlite_per_sequence_ts".into(),
                json!(st.median_ts() / *np as f64),
            );
            obj.insert(
                "redlite_vs_one_sequence".into(),
                json!(one_stream.map(|o| st.median_ts() / o)),
            );
        }
        tests.push(("tg", args.gen_tokens, st, v));
    }
    let plain_gen = spec.first().map(|r| r.stats.median_ts());
    for r in &spec {
        let mut v = test(&r.stats, 0, args.gen_tokens, &None);
        if let Some(obj) = v.as_object_mut() {
            obj.insert("redlite_draft".into(), json!(r.name));
            obj.insert("redlite_draft_max".into(), json!(args.draft_max));
            obj.insert("redlite_verify_passes".into(), json!(r.rounds));
            obj.insert("redlite_drafted".into(), json!(r.drafted));
            obj.insert("redlite_accepted".into(), json!(r.accepted));
            obj.insert(
                "redlite_vs_plain".into(),
                json!(plain_gen.map(|p| r.stats.median_ts() / p)),
            );
        }
        tests.push(("tg", args.gen_tokens, &r.stats, v));
    }

    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    if args.json {
        let list: Vec<&Value> = tests.iter().map(|t| &t.3).collect();
        let text = serde_json::to_string_pretty(&list).context("encoding the JSON")?;
        writeln!(out, "{text}").context("writing to stdout")?;
        return Ok(());
    }
    let name = args
        .model
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| filename.clone());
    let mut lines = vec![
        "| model | size | params | backend | threads | test | t/s | median | min | max |"
            .to_string(),
        "| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |".to_string(),
    ];
    let backend = if on_gpu {
        model.device_name()
    } else {
        format!(
            "CPU ({isa}, {activations}, KV {}/{})",
            args.load.cache_type_k, args.load.cache_type_v
        )
    };
    for (kind, n, s, v) in &tests {
        let (avg, sd) = s.ts();
        let mut at = match v.get("redlite_draft").and_then(|d| d.as_str()) {
            Some(d) => format!(" {d}"),
            None if depth > 0 => format!(" @ d{depth}"),
            None => String::new(),
        };
        if let Some(np) = v.get("redlite_parallel").and_then(|p| p.as_u64()) {
            at.push_str(&format!(" x{np} seqs"));
        }
        lines.push(format!(
            "| {name} | {} | {} | {backend} | {} | {kind}{n}{at} | {avg:.2} ± {sd:.2} | {:.2} | {:.2} | {:.2} |",
            gib(model_size),
            human_count(n_params),
            loaded.threads,
            s.median_ts(),
            s.min_ts(),
            s.max_ts()
        ));
    }
    lines.push(String::new());
    let tg_line = match &tg {
        Some(s) => format!(
            "{:.1} MB weights read per decoded token; {:.2} GB/s at the median generation speed",
            bytes_per_token as f64 / 1e6,
            bytes_per_token as f64 * s.median_ts() / 1e9
        ),
        None => format!(
            "{:.1} MB weights read per decoded token",
            bytes_per_token as f64 / 1e6
        ),
    };
    lines.push(tg_line);
    if let Some(o) = one_stream {
        for (np, st) in par.iter().filter(|(np, _)| *np > 1) {
            lines.push(format!(
                "batched generation, {np} sequences: {:.2}x one sequence's tokens/s ({:.2} t/s each)",
                st.median_ts() / o,
                st.median_ts() / *np as f64
            ));
        }
    }
    for r in spec.iter().skip(1) {
        lines.push(format!(
            "speculative, {} drafts of up to {}: {:.2}x plain generation ({} verify passes, {} drafted, {} accepted; tokens equal to plain)",
            r.name,
            args.draft_max,
            r.stats.median_ts() / plain_gen.unwrap_or(f64::NAN),
            r.rounds,
            r.drafted,
            r.accepted
        ));
    }
    if let Some(p) = &tg_prefetch {
        lines.push(prefetch_line(p, args.gen_tokens));
    }
    for (kind, n, cache) in [
        ("pp", args.prompt_tokens, &pp_cache),
        ("tg", args.gen_tokens, &tg_cache),
    ] {
        if let Some(c) = cache {
            let t = c.total();
            lines.push(format!(
                "expert cache {kind}{n} ({} budget, {}): {} hits, {} misses ({:.1}% hit rate), \
                 {:.1} MB read, {:.3}s waiting on reads over {} runs; {}",
                crate::load::human_bytes(c.budget),
                if c.direct_io { "O_DIRECT" } else { "buffered" },
                t.hits,
                t.misses,
                100.0 * t.hit_rate(),
                t.bytes_read as f64 / 1e6,
                t.stall.as_secs_f64(),
                args.repeat,
                if c.prefetch {
                    format!(
                        "prefetch: {}/{} predicted experts used ({:.1}%), {} read ({:.1} MB), \
                         {} uses waited for one",
                        t.prediction_hits,
                        t.predictions,
                        100.0 * t.prediction_accuracy(),
                        t.prefetches,
                        t.prefetch_bytes as f64 / 1e6,
                        t.waits
                    )
                } else {
                    "no prefetch".to_string()
                }
            ));
        }
    }
    lines.push(format!(
        "load {:.2}s; peak resident memory {}; context {}{}",
        loaded.seconds,
        peak_rss.map_or("?".into(), gib),
        depth,
        if depth > 0 {
            format!(" ({fill} state)")
        } else {
            String::new()
        }
    ));
    writeln!(out, "{}", lines.join("\n")).context("writing to stdout")?;
    Ok(())
}

/// One configuration of the speculative-decoding test.
struct SpecRun {
    name: &'static str,
    stats: Stats,
    rounds: usize,
    drafted: usize,
    accepted: usize,
}

/// Greedy generation of `--gen-tokens` after a 64-token random prompt, plain
/// and with each `--draft`, interleaved `--repeat` times; the first result is
/// plain generation. Every run's tokens must equal the plain run's.
fn draft_test(model: &Model, args: &Args) -> Result<Vec<SpecRun>> {
    use redlite_engine::{generate, DraftSource, GenerateParams, LookupParams};
    let tok = redlite_tokenizer::Tokenizer::from_gguf(model.gguf())
        .map_err(|e| anyhow::anyhow!("reading the tokenizer for --draft: {e}"))?;
    let vocab = model.config().vocab_size;
    let prompt = random_tokens(64, vocab, args.seed ^ 0x5EC);
    let plain = GenerateParams {
        max_tokens: args.gen_tokens,
        stop_at_eog: false,
        ..Default::default()
    };
    eprintln!("speculative decoding test: reference run");
    let reference = generate(model, &tok, &prompt, &plain, |_, _| {}, |_| {})?;
    let lookup = LookupParams {
        max_draft: args.draft_max,
        ..LookupParams::default()
    };
    // Each configuration's generation parameters: plain, then each draft source.
    let mut configs: Vec<(&'static str, GenerateParams)> = vec![("plain", plain.clone())];
    for d in &args.draft {
        let src = match d {
            Draft::Replay => DraftSource::Replay(reference.tokens.clone()),
            Draft::Random => DraftSource::Random {
                vocab: vocab as u32,
                seed: args.seed ^ 0xD7,
            },
            Draft::Lookup => DraftSource::Lookup,
        };
        let p = GenerateParams {
            lookup: Some(lookup.clone()),
            draft_source: src,
            ..plain.clone()
        };
        configs.push((d.name(), p));
    }
    let mut samples = vec![Vec::new(); configs.len()];
    let mut counts = vec![(0, 0, 0); configs.len()];
    // With a profiling device, each configuration's kernels are timed on its
    // own (once each, before the interleaved runs).
    let profiling = model.device().is_some_and(|d| {
        d.profile();
        crate::cuda_env::profile()
    });
    if profiling {
        for (name, p) in &configs {
            let g = generate(model, &tok, &prompt, p, |_, _| {}, |_| {})?;
            print_profile(
                model,
                &format!(
                    "generated token ({name} drafts, {} verify passes)",
                    g.lookup.rounds
                ),
                g.tokens.len() as f64,
            );
        }
    }
    for rep in 0..args.repeat {
        for (i, (name, p)) in configs.iter().enumerate() {
            eprintln!("speculative decoding test: {name}, run {}", rep + 1);
            let g = generate(model, &tok, &prompt, p, |_, _| {}, |_| {})?;
            if g.tokens != reference.tokens {
                bail!("{name} drafts: the output differs from plain greedy decoding");
            }
            samples[i].push((g.generated_seconds * 1e9) as u64);
            counts[i] = (g.lookup.rounds, g.lookup.drafted, g.lookup.accepted);
        }
    }
    Ok(configs
        .iter()
        .zip(samples)
        .zip(counts)
        .map(|(((name, _), ns), (rounds, drafted, accepted))| SpecRun {
            name,
            stats: Stats::new(ns, args.gen_tokens),
            rounds,
            drafted,
            accepted,
        })
        .collect())
}

/// Per-kernel GPU time since the last call, per `what` (`REDLITE_CUDA_PROFILE=1`
/// on a CUDA device; nothing otherwise).
fn print_profile(model: &redlite_model::Model, what: &str, units: f64) {
    let prof = model.device().map(|d| d.profile()).unwrap_or_default();
    if prof.is_empty() || units <= 0.0 {
        return;
    }
    let total: f64 = prof.iter().map(|p| p.1).sum();
    eprintln!(
        "GPU time per {what}, by kernel ({:.3} ms in all):",
        total / units
    );
    for (k, ms, n) in &prof {
        eprintln!(
            "  {k:24} {:10.1} us  {:5.1}%  {:8.1} launches",
            1e3 * ms / units,
            100.0 * ms / total,
            *n as f64 / units
        );
    }
}
