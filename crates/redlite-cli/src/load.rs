//! Loading a model as the commands share it: `--no-mmap`, `--mlock`,
//! `--lazy-load`, the kernel settings (`--f32-activations`, `--isa`), a
//! progress bar on stderr, load time and resident memory.
//!
//! The flags here are where the libraries' typed options are filled
//! ([`redlite_backend::CpuOptions`], [`redlite_model::LoadOptions`],
//! [`redlite_model::ExpertCacheOptions`], [`redlite_cuda::CudaOptions`]); the
//! few that also read an environment variable say so in `--help` (clap's
//! `env`), and README.md lists every variable the command line reads.

use redlite_gguf::GgmlType;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::builder::BoolishValueParser;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use redlite_backend::{Activations, CpuBackend, CpuOptions};
use redlite_model::{ExpertReaders, LoadOptions, Model};

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
    /// With --no-mmap: keep the weights' memory on the default 4 KiB pages instead of
    /// asking for transparent huge pages (madvise HUGEPAGE, 2 MiB pages where the
    /// kernel allows them, fewer page-table walks while the weights stream through).
    #[arg(
        long,
        help_heading = "Loading",
        env = "REDLITE_NO_HUGEPAGES",
        value_parser = BoolishValueParser::new()
    )]
    pub no_hugepages: bool,
    /// Feed f32 activations to every matrix product (the reference path: exact math on
    /// the stored weights, mean KL ~1e-12 from the exact reference) instead of the default
    /// 16-bit integer activations (faster; mean KL ~1e-6, over 10,000 times closer to
    /// exact than llama.cpp's 8-bit activations).
    #[arg(
        long,
        help_heading = "Kernels",
        env = "REDLITE_F32_ACT",
        value_parser = BoolishValueParser::new()
    )]
    pub f32_activations: bool,
    /// Keep the Q4_K / Q5_K matrices in the file's layout on the CPU. By default, where the
    /// CPU's best integer kernels are AVX2 (no AVX-512), they are repacked at load into a
    /// layout made for the one-token products (the file is not changed; a copy of those
    /// tensors is kept in memory, so the resident weights grow by their size; streamed
    /// experts keep the file's layout). Not with --f32-activations or on a GPU.
    #[arg(long, help_heading = "Kernels")]
    pub no_repack: bool,
    /// The highest SIMD level the CPU kernels use: `scalar`, `avx2` or `avx512` (default:
    /// the best this CPU has; a level above it is lowered to it). For comparisons: the
    /// levels' kernels agree to f32 rounding.
    #[arg(
        long,
        value_name = "LEVEL",
        help_heading = "Kernels",
        env = "REDLITE_ISA"
    )]
    pub isa: Option<redlite_quant::Isa>,
    /// Element type of the KV cache's keys (as llama.cpp's --cache-type-k, also `-ctk`):
    /// `f32` (the default: exact), `f16`, `bf16`, `q8_0` (32 values and an f16 scale,
    /// 8.5 bits a value) or `q4_0` (4.5 bits a value). f16/bf16 halve the cache, q8_0 takes
    /// 27%, q4_0 14%; README.md gives the quality of each. CPU only for now.
    #[arg(
        long,
        value_name = "TYPE",
        default_value = "f32",
        help_heading = "Kernels"
    )]
    pub cache_type_k: redlite_model::KvType,
    /// Element type of the KV cache's values (as llama.cpp's --cache-type-v, also `-ctv`):
    /// the same types as --cache-type-k.
    #[arg(
        long,
        value_name = "TYPE",
        default_value = "f32",
        help_heading = "Kernels"
    )]
    pub cache_type_v: redlite_model::KvType,
    /// Stream the routed experts from the GGUF file on demand through a cache of SIZE bytes
    /// instead of keeping them all in memory (e.g. `4GiB`, `512MiB`, `1.5G`; K/M/G/T and
    /// KiB/MiB/GiB/TiB are powers of 1024, KB/MB/GB/TB of 1000). Each layer's missing experts
    /// are read in parallel; the least recently used are evicted. Only the other tensors are
    /// read in at load. Outputs are bit-identical to the all-resident model; memory in use
    /// can exceed SIZE by the experts of one layer in flight. The minimum is one expert
    /// (gate, up and down): a smaller SIZE is an error that gives it. `0` keeps every expert
    /// resident. `auto` (the default): every expert resident when the file fits in the
    /// memory available (with room for the KV cache), otherwise a cache as large as what is
    /// left after the other tensors and that room. On a GPU, `auto` keeps everything in GPU
    /// memory when it fits with 3 GiB to spare, else places as many experts per layer as
    /// fit there and the others in pinned host RAM, read by the kernels over the bus; with
    /// `--device cuda[:N]`, SIZE is that GPU memory for the routed experts (the file is
    /// mapped whole on the host).
    #[arg(long, value_name = "SIZE", value_parser = parse_cache, default_value = "auto", help_heading = "Loading")]
    pub expert_cache: CacheBudget,
    /// Read streamed experts with O_DIRECT, bypassing the page cache (so the expert cache
    /// is the only copy in memory). Falls back to buffered reads, with a warning, where the
    /// filesystem refuses O_DIRECT (e.g. tmpfs). Only with --expert-cache.
    #[arg(long, help_heading = "Loading")]
    pub direct_io: bool,
    /// Do not prefetch: by default, with --expert-cache, each decode step applies the next
    /// layer's router to the current layer's input and reads the experts it predicts in
    /// the background while the layer computes (outputs are unchanged). On CUDA with experts
    /// in host memory, the predicted ones are copied into GPU memory on a second stream.
    #[arg(long, help_heading = "Loading")]
    pub no_expert_prefetch: bool,
    /// With --expert-cache: how many of the next layer's predicted experts to read ahead,
    /// the most likely first (default: 60% of the experts per token, 6 of 10: measured
    /// faster than all ten, whose extra guesses are wrong more often than right; on CUDA,
    /// with experts in host memory: 80%, 8 of 10; 0 is --no-expert-prefetch).
    #[arg(long, value_name = "N", help_heading = "Loading")]
    pub expert_prefetch_top: Option<usize>,
    /// With --expert-cache on the CPU: which experts the cache drops first. `freq` (the
    /// default): the least used over the run, with ageing (an expert's priority is its count
    /// of uses plus the priority of the last one dropped, so one popular long ago ages out;
    /// measured: 37.2% hits against LRU's 33.8% over 160 tokens of skewed routing, as good
    /// with uniform routing). `lru`: the least recently used.
    #[arg(
        long,
        value_name = "POLICY",
        default_value = "freq",
        help_heading = "Loading"
    )]
    pub expert_cache_policy: redlite_model::CachePolicy,
    /// With --expert-cache on the CPU: give each layer an equal share of the budget
    /// (each drops its own experts) instead of one pool for all layers.
    #[arg(long, help_heading = "Loading")]
    pub expert_cache_per_layer: bool,
    /// With --expert-cache on the CPU: the threads reading experts from the file, as
    /// DEMAND,PREFETCH (default 32,6: a token's missing experts of a layer, 30 slices, all
    /// reach the disk at once, and at most 6 reads ahead are in flight beside them).
    #[arg(
        long,
        value_name = "DEMAND,PREFETCH",
        help_heading = "Loading",
        env = "REDLITE_EXPERT_READERS"
    )]
    pub expert_readers: Option<ExpertReaders>,
    /// Where the forward pass runs: `cpu`, `cuda` (device 0), `cuda:N`, or `auto` (the
    /// default: the first CUDA device when one can be used, else the CPU). On CUDA the
    /// weights are uploaded in their stored format, one-token and verify products take 16-bit
    /// integer activations (f32 with --f32-activations) and the rest f32; the kernels
    /// are compiled by NVRTC at first use (found on the loader's path, in REDLITE_NVRTC_DIR
    /// or $CUDA_HOME/lib64) and cached (REDLITE_CUDA_CACHE, else ~/.cache/redlite/cuda).
    #[arg(long, value_name = "DEVICE", default_value = "auto", value_parser = parse_device, help_heading = "Kernels")]
    pub device: Device,
}

/// `--expert-cache`: chosen from the memory available, or a byte budget
/// (0: every expert resident).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CacheBudget {
    #[default]
    Auto,
    Bytes(u64),
}

/// `auto` or a size (see [`parse_size`]).
pub fn parse_cache(s: &str) -> Result<CacheBudget, String> {
    if s.trim().eq_ignore_ascii_case("auto") {
        Ok(CacheBudget::Auto)
    } else {
        parse_size(s).map(CacheBudget::Bytes)
    }
}

/// The automatic expert-cache budget (0: keep every expert resident). The
/// whole file stays resident when it fits in `available` bytes with a
/// reserve (a tenth of that memory, at least 1 GiB) for the KV cache,
/// activations and the rest of the process; otherwise the routed experts are
/// streamed through what is left after the other tensors and the reserve,
/// at least 512 MiB.
pub fn auto_expert_budget(expert_bytes: u64, other_bytes: u64, available: u64) -> u64 {
    let reserve = (available / 10).max(1 << 30);
    if expert_bytes + other_bytes + reserve <= available {
        return 0;
    }
    available
        .saturating_sub(other_bytes + reserve)
        .max(512 << 20)
}

/// `MemAvailable` of `/proc/meminfo`, bytes (`REDLITE_MEM_AVAILABLE`, a
/// size, stands in for it: to try the automatic budget on a small model).
pub fn mem_available() -> Option<u64> {
    if let Ok(v) = std::env::var("REDLITE_MEM_AVAILABLE") {
        return parse_size(&v).ok();
    }
    let s = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = s.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: u64 = line["MemAvailable:".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some(kb * 1024)
}

/// Where the forward pass runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Device {
    #[default]
    Auto,
    Cpu,
    Cuda(usize),
}

/// `cpu`, `cuda`, `cuda:N` or `auto`.
pub fn parse_device(s: &str) -> Result<Device, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "auto" => Ok(Device::Auto),
        "cpu" => Ok(Device::Cpu),
        "cuda" | "gpu" => Ok(Device::Cuda(0)),
        other => match other.strip_prefix("cuda:") {
            Some(n) => n
                .parse()
                .map(Device::Cuda)
                .map_err(|_| format!("{s:?}: the device number must be an integer (cuda:0)")),
            None => Err(format!("{s:?}: use cpu, cuda, cuda:N or auto")),
        },
    }
}

/// A byte size: a number (fractions allowed) with an optional unit: `K`, `M`,
/// `G`, `T` and `KiB`..`TiB` are powers of 1024, `KB`..`TB` of 1000, `B` or
/// none is bytes.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let unit = unit.trim();
    let x: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a size (e.g. 4GiB, 512MiB, 0)"))?;
    let mult: f64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kib" => 1024.0,
        "m" | "mib" => 1024f64.powi(2),
        "g" | "gib" => 1024f64.powi(3),
        "t" | "tib" => 1024f64.powi(4),
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        _ => {
            return Err(format!(
                "{s:?}: unknown unit {unit:?} (use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)"
            ))
        }
    };
    let v = x * mult;
    if !v.is_finite() || v >= u64::MAX as f64 {
        return Err(format!("{s:?} is too large"));
    }
    Ok(v.round() as u64)
}

/// `512 MiB` / `1.50 GiB`-style size.
pub fn human_bytes(b: u64) -> String {
    let b = b as f64;
    if b >= (1u64 << 30) as f64 {
        format!("{:.2} GiB", b / (1u64 << 30) as f64)
    } else if b >= (1u64 << 20) as f64 {
        format!("{:.1} MiB", b / (1u64 << 20) as f64)
    } else {
        format!("{:.1} KiB", b / 1024.0)
    }
}

impl LoadArgs {
    pub fn options(&self) -> LoadOptions {
        LoadOptions {
            no_mmap: self.no_mmap,
            prefetch: !self.lazy_load,
            mlock: self.mlock,
            no_huge_pages: self.no_hugepages,
        }
    }

    /// The CPU backend's settings, with `threads` workers (`None`: one per core).
    pub fn cpu_options(&self, threads: Option<usize>) -> CpuOptions {
        CpuOptions {
            threads,
            activations: if self.f32_activations {
                Activations::F32
            } else {
                Activations::Int16
            },
            max_isa: self.isa,
        }
    }

    /// The expert-cache settings for a budget (none for 0: all resident).
    pub fn expert_cache(&self, budget: u64) -> Option<redlite_model::ExpertCacheOptions> {
        (budget > 0).then_some(redlite_model::ExpertCacheOptions {
            budget,
            direct_io: self.direct_io,
            prefetch: !self.no_expert_prefetch,
            prefetch_top: self.expert_prefetch_top,
            policy: self.expert_cache_policy,
            per_layer: self.expert_cache_per_layer,
            readers: self.expert_readers.unwrap_or_default(),
        })
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
    load_model_observed(path, threads, args, &mut |_, _| {})
}

/// [`load_model`], also telling `observe` the bytes read so far and the
/// total (the server's `/health` reports it while loading).
pub fn load_model_observed(
    path: &Path,
    threads: Option<usize>,
    args: &LoadArgs,
    observe: &mut dyn FnMut(u64, u64),
) -> Result<Loaded> {
    let t = Instant::now();
    let backend =
        CpuBackend::with_options(&args.cpu_options(threads)).context("starting the CPU backend")?;
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
        observe(done, total);
    };
    // On an explicit CUDA device a size budgets GPU memory for the experts;
    // the host keeps the whole file mapped.
    let gpu_expert_budget = match (args.device, args.expert_cache) {
        (Device::Cuda(_), CacheBudget::Bytes(b)) if b > 0 => Some(b),
        _ => None,
    };
    let budget = match args.expert_cache {
        _ if gpu_expert_budget.is_some() => 0,
        CacheBudget::Bytes(b) => b,
        CacheBudget::Auto => automatic_budget(path, args.device),
    };
    if args.direct_io && budget == 0 {
        eprintln!("warning: --direct-io only applies to expert reads with --expert-cache; ignored");
    }
    let cache = args.expert_cache(budget);
    let model = Model::load_streaming(
        path,
        Arc::new(backend),
        &args.options(),
        cache.as_ref(),
        &mut progress,
    )
    .with_context(|| format!("loading {}", path.display()));
    bar.finish_and_clear();
    let model = model?;
    for w in &model.gguf().load_warnings {
        eprintln!("warning: {w}");
    }
    if let Some(c) = model.expert_cache() {
        for w in c.warnings() {
            eprintln!("warning: {w}");
        }
        eprintln!("{}", residency_line(&model));
        let (bytes, took) = c.reserved();
        if bytes > 0 {
            eprintln!(
                "expert cache: {} of buffers faulted in at load ({:.1}s)",
                human_bytes(bytes),
                took.as_secs_f64()
            );
        }
    }
    let mut model = model;
    let cuda = match args.device {
        Device::Cpu => None,
        Device::Cuda(n) => Some(n),
        Device::Auto if model.expert_cache().is_some() => None,
        Device::Auto => redlite_cuda::available().then_some(0),
    };
    if let Some(n) = cuda {
        let t_up = Instant::now();
        let layers = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
        layers.set_style(
            ProgressStyle::with_template("uploading to cuda:{msg} {bar:40} {pos}/{len} layers")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        layers.set_message(n.to_string());
        let opts = redlite_cuda::CudaOptions {
            expert_vram_bytes: gpu_expert_budget,
            // `auto`: what does not fit in GPU memory goes to pinned host RAM.
            fit: args.expert_cache == CacheBudget::Auto,
            f32_activations: args.f32_activations,
            no_expert_prefetch: args.no_expert_prefetch,
            expert_prefetch_top: args.expert_prefetch_top,
            expert_prefetch_wait_router: false,
            // NVRTC, the kernel cache, profiling and tuning (REDLITE_CUDA_*).
            ..crate::cuda_env::from_env()?
        };
        let r = redlite_cuda::attach_with(&mut model, n, opts, &mut |done, total| {
            layers.set_length(total as u64);
            layers.set_position(done as u64);
        });
        layers.finish_and_clear();
        match r {
            Ok(placed) => {
                eprintln!(
                    "device: {} (weights uploaded in {:.1} s)",
                    model.device_name(),
                    t_up.elapsed().as_secs_f64()
                );
                if let Some(p) = placed {
                    eprintln!(
                        "routed experts: {} in GPU memory ({} per layer), {} in pinned host memory \
                         (read over the bus)",
                        human_bytes(p.vram_bytes as u64),
                        p.vram,
                        human_bytes(p.host_bytes as u64)
                    );
                } else if let Some(b) = gpu_expert_budget {
                    eprintln!(
                        "routed experts: all in GPU memory (the --expert-cache budget of {} holds them)",
                        human_bytes(b)
                    );
                }
            }
            // Chosen automatically: a model the GPU cannot run (a type without
            // CUDA kernels, too little memory) runs on the CPU instead.
            Err(e) if args.device == Device::Auto => {
                eprintln!("warning: cuda:{n} cannot run this model ({e}); running on the CPU")
            }
            Err(e) => {
                return Err(anyhow::Error::new(e).context(format!(
                    "putting {} on cuda:{n} (use --device cpu to run on the CPU)",
                    path.display()
                )))
            }
        }
    }
    // The repacked copies need memory of their own: where what is free
    // cannot hold them with 1 GiB to spare, keep the file's layout.
    let repack_bytes: u64 = model
        .gguf()
        .tensors
        .iter()
        .filter(|t| {
            matches!(t.ggml_type, GgmlType::Q4_K | GgmlType::Q5_K)
                && !(model.expert_cache().is_some() && t.name.contains("_exps."))
        })
        .map(|t| t.n_bytes)
        .sum();
    let room = mem_available().is_none_or(|m| repack_bytes + (1 << 30) <= m);
    if !args.no_repack && !room && redlite_quant::q16::lanes::kernels(GgmlType::Q4_K).is_some() {
        eprintln!(
            "warning: not repacking {} of Q4_K/Q5_K weights for the one-token products: too little memory available",
            human_bytes(repack_bytes)
        );
    }
    if !args.no_repack && room && !args.f32_activations && model.device().is_none() {
        let t_r = Instant::now();
        let bytes = model.repack_for_decode();
        if bytes > 0 {
            eprintln!(
                "repacked {} of Q4_K/Q5_K weights for the one-token products in {:.1}s (--no-repack: keep the file's layout)",
                human_bytes(bytes),
                t_r.elapsed().as_secs_f64()
            );
        }
    }
    let kv = redlite_model::KvTypes {
        k: args.cache_type_k,
        v: args.cache_type_v,
    };
    model
        .set_kv_types(kv)
        .with_context(|| format!("--cache-type-k {} --cache-type-v {}", kv.k, kv.v))?;
    Ok(Loaded {
        model,
        threads,
        seconds: t.elapsed().as_secs_f64(),
        rss_bytes: proc_status_bytes("VmRSS"),
    })
}

/// `--expert-cache auto` for `path`: 0 (resident) on a GPU or when the file
/// fits in the memory available, else a budget ([`auto_expert_budget`]),
/// said on stderr.
fn automatic_budget(path: &Path, device: Device) -> u64 {
    let on_gpu = match device {
        Device::Cpu => false,
        Device::Cuda(_) => true,
        Device::Auto => redlite_cuda::available(),
    };
    if on_gpu {
        return 0;
    }
    let Some(avail) = mem_available() else {
        return 0;
    };
    // The file sizes (every shard) settle the common case without parsing
    // the file twice; the tensor index is read only when it does not fit.
    let shards = redlite_gguf::split_paths(path).unwrap_or_else(|| vec![path.to_path_buf()]);
    let file_bytes: Option<u64> = shards
        .iter()
        .map(|p| std::fs::metadata(p).ok().map(|m| m.len()))
        .sum();
    if file_bytes.is_some_and(|b| auto_expert_budget(b, 0, avail) == 0) {
        return 0;
    }
    // The data stays unmapped until the load.
    let Ok(f) = redlite_gguf::GgufFile::open(path) else {
        return 0;
    };
    let (experts, other) = redlite_model::expert_split(&f);
    let budget = auto_expert_budget(experts, other, avail);
    if budget > 0 {
        eprintln!(
            "expert cache: the model ({}) does not fit in the {} of memory available: streaming its \
             routed experts ({}) through a {} cache (set the size with --expert-cache, or 0 to \
             keep everything resident)",
            human_bytes(experts + other),
            human_bytes(avail),
            human_bytes(experts),
            human_bytes(budget)
        );
    }
    budget
}

/// Where the weights live, e.g. `experts: 3.00 GiB streamed from FILE through
/// a 512.0 MiB cache (O_DIRECT); 0.50 GiB resident`.
pub fn residency_line(model: &Model) -> String {
    let r = model.residency();
    let files: Vec<String> = r.files.iter().map(|p| p.display().to_string()).collect();
    match r.cache_budget {
        Some(budget) => format!(
            "experts: {} streamed from {} through a {} cache ({}); {} resident",
            human_bytes(r.expert_bytes),
            files.join(" + "),
            human_bytes(budget),
            if r.direct_io {
                "O_DIRECT"
            } else {
                "buffered reads"
            },
            human_bytes(r.other_bytes)
        ),
        None => format!(
            "weights: {} resident (experts {})",
            human_bytes(r.expert_bytes + r.other_bytes),
            human_bytes(r.expert_bytes)
        ),
    }
}

/// `1.23 GiB`-style binary size.
pub fn gib(bytes: u64) -> String {
    format!("{:.2} GiB", bytes as f64 / (1u64 << 30) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn automatic_budget_keeps_what_fits_and_streams_the_rest() {
        const G: u64 = 1 << 30;
        // Fits with the reserve: resident.
        assert_eq!(auto_expert_budget(10 * G, 2 * G, 20 * G), 0);
        // The 19 GiB cf2 file on a 16 GiB machine: stream through what is
        // left after the other 1.5 GiB and a 1.6 GiB reserve.
        let b = auto_expert_budget(17 * G + G / 2, 3 * G / 2, 16 * G);
        assert_eq!(b, 16 * G - 3 * G / 2 - 16 * G / 10);
        // Nothing left: the floor.
        assert_eq!(auto_expert_budget(40 * G, 8 * G, 8 * G), 512 << 20);
        assert_eq!(parse_cache("auto"), Ok(CacheBudget::Auto));
        assert_eq!(parse_cache("0"), Ok(CacheBudget::Bytes(0)));
        assert_eq!(parse_cache("4GiB"), Ok(CacheBudget::Bytes(4 << 30)));
        assert!(parse_cache("lots").is_err());
        assert!(mem_available().is_some_and(|m| m > 0));
    }

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("512MiB"), Ok(512 << 20));
        assert_eq!(parse_size("4GiB"), Ok(4 << 30));
        assert_eq!(parse_size("1.5G"), Ok(3 << 29));
        assert_eq!(parse_size("2 KB"), Ok(2000));
        assert_eq!(parse_size("1gb"), Ok(1_000_000_000));
        assert!(parse_size("lots").is_err());
        assert!(parse_size("4 parsecs").is_err());
        assert!(parse_size("-1G").is_err());
        assert!(parse_size("1e30T").is_err());
    }
}
