//! Loading a model as the commands share it: `--no-mmap`, `--mlock`,
//! `--lazy-load`, a progress bar on stderr, load time and resident memory.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use redlite_backend::CpuBackend;
use redlite_model::{LoadOptions, Model};

/// The load flags of `run`, `bench`, `logits` and `serve` (llama.cpp's names).
#[derive(clap::Args, Clone, Debug, Default)]
pub struct LoadArgs {
    /// Read the model into memory instead of memory-mapping the file (as llama.cpp's
    /// --no-mmap): slower to start, but nothing is read from disk afterwards.
    #[arg(long, help_heading = "Loading")]
    pub no_mmap: bool,
    /// Lock the weights in RAM so they are never paged out (as llama.cpp's --mlock). If
    /// the memory-lock limit (`ulimit -l`) is too low this is a warning, not an error.
    #[arg(long, help_heading = "Loading")]
    pub mlock: bool,
    /// Map the file without reading it in at load: pages come from disk on first use (the
    /// first prompt pays for them).
    #[arg(long, help_heading = "Loading", conflicts_with = "no_mmap")]
    pub lazy_load: bool,
    /// Feed f32 activations to every matrix product (the reference path: exact math on
    /// the stored weights, mean KL ~1e-12 from the exact reference) instead of the default
    /// 16-bit integer activations (faster; mean KL ~1e-6, over 10,000 times closer to
    /// exact than llama.cpp's 8-bit activations). Also REDLITE_F32_ACT=1.
    #[arg(long, help_heading = "Kernels")]
    pub f32_activations: bool,
}

impl LoadArgs {
    pub fn options(&self) -> LoadOptions {
        LoadOptions {
            no_mmap: self.no_mmap,
            prefetch: !self.lazy_load,
            mlock: self.mlock,
        }
    }
}

/// What a load took.
pub struct Loaded {
    pub model: Model,
    pub threads: usize,
    pub seconds: f64,
    /// Resident memory right after the load (VmRSS), bytes.
    pub rss_bytes: Option<u64>,
}

/// A `/proc/self/status` field in bytes (`VmRSS`, `VmHWM`), where there is one.
pub fn proc_status_bytes(key: &str) -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with(key))?;
    let kb: u64 = line[key.len()..]
        .trim_start_matches(':')
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some(kb * 1024)
}

/// Load `path` on a CPU backend with `threads` workers, showing a progress bar
/// on stderr (when it is a terminal) while the weights come in, and printing
/// any load warning (e.g. a refused mlock).
pub fn load_model(path: &Path, threads: Option<usize>, args: &LoadArgs) -> Result<Loaded> {
    let t = Instant::now();
    let mut backend = CpuBackend::new(threads).context("starting the thread pool")?;
    if args.f32_activations {
        backend = backend.with_activations(redlite_backend::Activations::F32);
    }
    let threads = backend.threads();
    let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template(
            "loading {bar:40} {binary_bytes}/{binary_total_bytes} ({binary_bytes_per_sec}, eta {eta})",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut progress = |done: u64, total: u64| {
        bar.set_length(total);
        bar.set_position(done);
    };
    let model = Model::load_with_options(path, Arc::new(backend), &args.options(), &mut progress)
        .with_context(|| format!("loading {}", path.display()));
    bar.finish_and_clear();
    let model = model?;
    for w in &model.gguf().load_warnings {
        eprintln!("warning: {w}");
    }
    Ok(Loaded {
        model,
        threads,
        seconds: t.elapsed().as_secs_f64(),
        rss_bytes: proc_status_bytes("VmRSS"),
    })
}

/// `1.23 GiB`-style binary size.
pub fn gib(bytes: u64) -> String {
    format!("{:.2} GiB", bytes as f64 / (1u64 << 30) as f64)
}
