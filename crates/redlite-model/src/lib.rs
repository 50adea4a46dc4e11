//! The qwen3next forward pass (Qwen3-Next / Qwen3-Coder-Next) from GGUF.
//!
//! ```no_run
//! # fn main() -> Result<(), redlite_model::ModelError> {
//! let model = redlite_model::Model::load(std::path::Path::new("model.gguf"))?;
//! let mut state = model.new_state();
//! let logits = model.forward(&mut state, &[1, 2, 3], false)?; // [vocab]
//! # Ok(()) }
//! ```
//!
//! **One execution seam.** A [`Model`] runs either on the CPU (the forward
//! pass of `qwen3next.rs`, op by op on a [`Backend`] over host [`CpuState`]s)
//! or on an attached device (the whole pass behind [`DeviceForward`], over
//! [`DeviceState`]s). Each of [`Model::new_state`], [`Model::random_state`],
//! [`Model::forward`], [`Model::forward_batch`] and [`Model::forward_verify`]
//! checks its inputs, then picks one of the two once (`match self.device`);
//! nothing below that point asks where it runs. A [`State`] and a [`Trail`]
//! are enums of the two forms (`state.rs`), so snapshots, forks and rollback
//! need no dispatch of their own, and a state or trail of the other form is
//! refused with an error.
//!
//! `redlite_backend` is, despite its name, the CPU kernel set (host `&[f32]`
//! activations): a device does not implement [`Backend`] but replaces the
//! whole pass.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use redlite_backend::{Backend, CpuBackend};
pub use redlite_backend::{KvType, KvTypes};
pub use redlite_gguf::LoadOptions;
use redlite_gguf::{GgufError, GgufFile};

mod cache_policy;
mod config;
mod device;
mod expert_cache;
mod kv;
mod par;
mod qwen3next;
mod rope;
mod state;
pub mod weights;

pub use cache_policy::CachePolicy;
pub use config::Config;
pub use device::{
    forward_one_by_one, DeviceForward, DeviceState, PrefetchStats, StepTrail, Verified,
};
pub use expert_cache::{
    default_prefetch_count, ExpertCache, ExpertCacheCounters, ExpertCacheOptions, ExpertCacheStats,
    ExpertEntry, ExpertReaders,
};
pub use kv::{KvCache, KV_BLOCK_TOKENS};
pub use rope::{RopeScaling, RopeScalingType};
pub use state::{CpuState, CpuTrail, DeviceTrail, State, Trail};
pub use weights::mtp_only_blocks;

/// The `general.architecture` this crate runs, and the prefix of its
/// hyper-parameter keys (`qwen3next.block_count`, `qwen3next.rope.*`, ...).
pub const ARCH: &str = "qwen3next";

/// Everything that can go wrong loading or running a model. Every load error
/// names the file and the tensor or metadata key concerned.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error("{}: unsupported architecture {arch:?} (this engine runs qwen3next)", path.display())]
    Architecture { path: PathBuf, arch: String },
    #[error(
        "{}: this is an MTP-only draft file (only the multi-token-prediction block(s) {} with \
         their `nextn` tensors, plus embeddings and output; no trunk layers): it drafts tokens for \
         speculative decoding next to the full model and cannot run on its own; load the full \
         qwen3next model instead",
        path.display(),
        blocks.iter().map(|b| format!("blk.{b}")).collect::<Vec<_>>().join(", ")
    )]
    MtpOnly { path: PathBuf, blocks: Vec<usize> },
    #[error("{}: metadata key {key}: {msg}", path.display())]
    Key {
        path: PathBuf,
        key: String,
        msg: String,
    },
    #[error("{}: tensor {tensor}: {msg}", path.display())]
    Tensor {
        path: PathBuf,
        tensor: String,
        msg: String,
    },
    #[error("token id {token} at index {index} is outside the vocabulary ({vocab} tokens)")]
    Token {
        token: u32,
        index: usize,
        vocab: usize,
    },
    #[error("invalid input: {0}")]
    Input(String),
    #[error("backend: {0}")]
    Backend(String),
}

/// A routed-expert stack (`blk.N.ffn_{gate,up,down,gate_up}_exps.weight`).
pub fn is_expert_tensor(name: &str) -> bool {
    name.starts_with("blk.") && name.ends_with("_exps.weight")
}

/// Bytes of a file's routed-expert tensors and of all its other tensors.
pub fn expert_split(f: &redlite_gguf::GgufFile) -> (u64, u64) {
    let (mut experts, mut other) = (0u64, 0u64);
    for t in &f.tensors {
        if is_expert_tensor(&t.name) {
            experts += t.n_bytes;
        } else {
            other += t.n_bytes;
        }
    }
    (experts, other)
}

/// Receives named intermediate tensors during a forward pass (llama.cpp
/// callback names, e.g. `attn_norm-3`): `data` is `[rows, cols]` row-major.
///
/// It is also the observer of every matrix product's input (what
/// `redlite imatrix` collects): [`Trace::matmul_input`], which by default
/// ignores it. Without a trace the forward pass calls neither.
pub trait Trace {
    fn tensor(&mut self, name: &str, rows: usize, cols: usize, data: &[f32]);

    /// The input of a product with the weight tensor `weight` (its GGUF
    /// name): `x` is `[rows, n_in]` row-major. For a routed-expert stack
    /// (`*_exps`), `expert` is the expert and `x` holds only the rows routed
    /// to it, in token order. A tensor read as several parts (a fused
    /// projection) is reported once per input; the shared expert's gate
    /// vector `ffn_gate_inp_shexp` counts as a product (llama.cpp's is one).
    fn matmul_input(&mut self, weight: &str, expert: Option<usize>, rows: usize, x: &[f32]) {
        let _ = (weight, expert, rows, x);
    }
}

/// A loaded model: the memory-mapped GGUF, the parsed hyper-parameters and a
/// backend.
pub struct Model {
    gguf: GgufFile,
    config: Config,
    weights: weights::Weights,
    rope: rope::Rope,
    /// Tests only: cos/sin pairs `[pos][n_rot/2]` used instead of `rope`.
    #[cfg(test)]
    rope_override: Option<Vec<Vec<(f32, f32)>>>,
    backend: Arc<dyn Backend>,
    /// The routed experts read on demand, when streaming them.
    expert_cache: Option<Arc<ExpertCache>>,
    /// The device the forward pass runs on, when not the CPU backend: the
    /// one field the execution seam dispatches on.
    device: Option<Arc<dyn DeviceForward>>,
    /// Element types of the host KV caches of new states.
    kv_types: KvTypes,
}

/// Where a model's weights live: resident (mapped and brought in) or
/// streamed from the file through the expert cache.
#[derive(Clone, Debug)]
pub struct Residency {
    /// Bytes of the routed-expert tensors (streamed when `cache_budget` is set).
    pub expert_bytes: u64,
    /// Bytes of every other tensor.
    pub other_bytes: u64,
    /// The expert cache's budget, when streaming.
    pub cache_budget: Option<u64>,
    /// Whether the streamed reads use `O_DIRECT`.
    pub direct_io: bool,
    /// The file(s) the experts are read from.
    pub files: Vec<PathBuf>,
}

impl Model {
    /// Memory-map and validate a qwen3next GGUF, with a CPU backend on all cores.
    pub fn load(path: &Path) -> Result<Model, ModelError> {
        let backend = CpuBackend::new(None).map_err(|e| ModelError::Backend(e.to_string()))?;
        Self::load_with_backend(path, Arc::new(backend))
    }

    /// Memory-map and validate a qwen3next GGUF, computing on `backend`.
    pub fn load_with_backend(path: &Path, backend: Arc<dyn Backend>) -> Result<Model, ModelError> {
        Self::from_gguf(GgufFile::open(path)?, backend)
    }

    /// Open a qwen3next GGUF bringing its data in as `opts` says (prefetch
    /// the mapping, read it into memory instead, `mlock`), calling
    /// `progress(done, total)` in bytes; what could not be done as asked
    /// (e.g. `mlock` refused) is in `model.gguf().load_warnings`.
    pub fn load_with_options(
        path: &Path,
        backend: Arc<dyn Backend>,
        opts: &LoadOptions,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<Model, ModelError> {
        Self::from_gguf(GgufFile::open_with(path, opts, progress)?, backend)
    }

    /// [`Model::load_with_options`], with the routed experts streamed from
    /// the file through an [`ExpertCache`] when `cache` is given: they are
    /// not brought in at load (only the other tensors are prefetched), and
    /// each forward pass reads the experts it selects through the cache.
    /// Outputs are bit-identical to the all-resident model. `no_mmap` cannot
    /// be combined with a cache; a budget below one expert is an error that
    /// gives the minimum.
    pub fn load_streaming(
        path: &Path,
        backend: Arc<dyn Backend>,
        opts: &LoadOptions,
        cache: Option<&ExpertCacheOptions>,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<Model, ModelError> {
        let Some(copts) = cache else {
            return Self::load_with_options(path, backend, opts, progress);
        };
        if opts.no_mmap {
            return Err(ModelError::Input(format!(
                "{}: --no-mmap reads the whole file into memory; it cannot be combined with an \
                 expert cache (which reads the routed experts from the file on demand)",
                path.display()
            )));
        }
        let keep = |t: &redlite_gguf::TensorInfo| !is_expert_tensor(&t.name);
        let gguf = GgufFile::open_with_only(path, opts, &keep, progress)?;
        let mut model = Self::from_gguf(gguf, backend)?;
        let cache = ExpertCache::new(&model.gguf, &model.weights, model.config.n_expert, copts)?;
        model.expert_cache = Some(Arc::new(cache));
        Ok(model)
    }

    /// Repack the Q4_K / Q5_K matrices into the lanes layout for the CPU's
    /// one-token integer products (`redlite_quant::q16::lanes`): a copy of
    /// each such tensor in memory, which every product then reads (the
    /// batched tiles unpack it to the same integers; the file is not
    /// changed). Does nothing
    /// where this CPU has no lanes kernels (only AVX2 has them) and when a
    /// device runs the pass; streamed experts are repacked as the expert
    /// cache reads them. Returns the bytes repacked. Meant for the
    /// default integer activations (the f32 path reads a repacked matrix
    /// correctly, block by block put back, but slowly).
    pub fn repack_for_decode(&mut self) -> u64 {
        if self.device.is_some() {
            return 0;
        }
        let experts = self.expert_cache.is_none();
        let bytes = self.weights.repack_lanes(&self.gguf, experts);
        if let Some(c) = &self.expert_cache {
            // Streamed experts are repacked as they are read, so they
            // compute as resident repacked ones do.
            c.set_lanes(redlite_quant::q16::lanes::kernels(redlite_gguf::GgmlType::Q4_K).is_some());
        }
        bytes
    }

    /// The expert cache, when the routed experts are streamed.
    pub fn expert_cache(&self) -> Option<&ExpertCache> {
        self.expert_cache.as_deref()
    }

    /// The expert cache as a shared handle (for [`ExpertCache::prefetch`]).
    pub fn expert_cache_arc(&self) -> Option<Arc<ExpertCache>> {
        self.expert_cache.clone()
    }

    /// Hits, misses, bytes read and I/O stall of the expert cache, per layer
    /// (`None` when every expert is resident).
    pub fn expert_cache_stats(&self) -> Option<ExpertCacheStats> {
        self.expert_cache.as_ref().map(|c| c.stats())
    }

    /// What is resident and what is streamed.
    pub fn residency(&self) -> Residency {
        let (mut expert_bytes, mut other_bytes) = (0, 0);
        for t in &self.gguf.tensors {
            if is_expert_tensor(&t.name) {
                expert_bytes += t.n_bytes;
            } else {
                other_bytes += t.n_bytes;
            }
        }
        Residency {
            expert_bytes,
            other_bytes,
            cache_budget: self.expert_cache.as_ref().map(|c| c.stats().budget),
            direct_io: self.expert_cache.as_ref().is_some_and(|c| c.direct_io()),
            files: self
                .gguf
                .shard_paths()
                .into_iter()
                .map(Path::to_path_buf)
                .collect(),
        }
    }

    /// Validate an opened GGUF as a qwen3next model.
    pub fn from_gguf(gguf: GgufFile, backend: Arc<dyn Backend>) -> Result<Model, ModelError> {
        let path = gguf.path().to_path_buf();
        let path = path.as_path();
        if let Some(blocks) = mtp_only_blocks(&gguf) {
            return Err(ModelError::MtpOnly {
                path: path.to_path_buf(),
                blocks,
            });
        }
        let config = Config::from_gguf(&gguf)?;
        let weights = weights::Weights::load(&gguf, &config)?;
        let rope = rope::Rope::new(config.n_rot, config.rope_theta, &config.rope_scaling);
        Ok(Model {
            gguf,
            config,
            weights,
            rope,
            #[cfg(test)]
            rope_override: None,
            backend,
            expert_cache: None,
            device: None,
            kv_types: KvTypes::default(),
        })
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The GGUF file (metadata, tokenizer tables).
    pub fn gguf(&self) -> &GgufFile {
        &self.gguf
    }

    pub fn backend(&self) -> &dyn Backend {
        self.backend.as_ref()
    }

    /// Run every forward pass on `device` from now on (states made before
    /// are refused). The mapped file stays open for the tokenizer and
    /// metadata; the device holds its own copy of the weights.
    pub fn attach_device(&mut self, device: Arc<dyn DeviceForward>) {
        self.device = Some(device);
    }

    /// Store the KV caches of states made from now on as `kv` (f32, the
    /// default, is exact). A device keeps f32 for now: other types are
    /// refused once a device is attached; q8_0 needs KV rows (`n_head_kv ·
    /// head_dim`) of whole 32-value blocks.
    pub fn set_kv_types(&mut self, kv: KvTypes) -> Result<(), ModelError> {
        if let Some(d) = &self.device {
            if kv != KvTypes::default() {
                return Err(ModelError::Input(format!(
                    "KV cache type {}/{} (keys/values): {} keeps its KV cache in f32 for now \
                     (use --cache-type-k f32 --cache-type-v f32, or --device cpu)",
                    kv.k,
                    kv.v,
                    d.name()
                )));
            }
        }
        let row = self.config.n_head_kv * self.config.head_dim;
        for (what, ty) in [("keys", kv.k), ("values", kv.v)] {
            if !ty.fits_row(row) {
                return Err(ModelError::Input(format!(
                    "KV cache type {ty} for {what}: a KV row of {row} values (n_head_kv · \
                     head_dim) is not a whole number of 32-value blocks"
                )));
            }
        }
        self.kv_types = kv;
        Ok(())
    }

    /// Element types of the host KV caches of new states.
    pub fn kv_types(&self) -> KvTypes {
        self.kv_types
    }

    /// The device the forward pass runs on, if not the CPU.
    pub fn device(&self) -> Option<&dyn DeviceForward> {
        self.device.as_deref()
    }

    /// Prompt tokens to feed per forward pass when the caller does not say:
    /// 512 on the CPU, the device's pass size on a device.
    pub fn prefill_batch(&self) -> usize {
        self.device.as_ref().map_or(512, |d| d.pass_tokens())
    }

    /// Where the forward pass runs, in words.
    pub fn device_name(&self) -> String {
        match &self.device {
            Some(d) => d.name(),
            None => self.backend.name(),
        }
    }

    /// A fresh per-sequence state (position 0, zero recurrent/conv state,
    /// empty KV cache), on the model's device.
    pub fn new_state(&self) -> State {
        match &self.device {
            None => State::Cpu(CpuState::with_kv_types(&self.config, self.kv_types)),
            Some(d) => State::Device(d.new_state()),
        }
    }

    /// A state at depth `pos` filled with random data of realistic
    /// magnitude ([`CpuState::fill_random`]), on the model's device.
    pub fn random_state(&self, pos: usize, seed: u64) -> Result<State, ModelError> {
        match &self.device {
            None => Ok(State::fill_random_kv(
                &self.config,
                self.kv_types,
                pos,
                seed,
            )),
            Some(d) => Ok(State::Device(d.fill_random(pos, seed)?)),
        }
    }

    /// The RoPE pair table: `(extrapolated θ base, interpolated θ base, mix)`
    /// per rotated pair and the magnitude scale; the angle of pair `i` at
    /// position `p` is `p·interp·(1−mix) + p·extrap·mix` (computed in f64).
    pub fn rope_table(&self) -> (Vec<(f64, f64, f64)>, f64) {
        self.rope.table()
    }

    /// The validated weight layout (tensor indices, byte ranges, shapes), for
    /// a device to upload.
    pub fn weights(&self) -> &weights::Weights {
        &self.weights
    }

    /// Feed `tokens` (one batch) at the state's position and advance it.
    /// Returns `[T, vocab]` logits if `all_logits`, else the last position's
    /// `[vocab]`.
    pub fn forward(
        &self,
        state: &mut State,
        tokens: &[u32],
        all_logits: bool,
    ) -> Result<Vec<f32>, ModelError> {
        self.forward_traced(state, tokens, all_logits, None)
    }

    /// One decode step for several sequences at once: `tokens[i]` is fed to
    /// `states[i]` and row `i` of the `[n, vocab]` result is its logits. Each
    /// weight is read once for all sequences, and each row is bit-identical
    /// to what [`Model::forward`] gives for that sequence alone.
    pub fn forward_batch(
        &self,
        states: &mut [&mut State],
        tokens: &[u32],
    ) -> Result<Vec<f32>, ModelError> {
        if tokens.is_empty() || tokens.len() != states.len() {
            return Err(ModelError::Input(format!(
                "batched decode needs one token per sequence ({} tokens, {} sequences)",
                tokens.len(),
                states.len()
            )));
        }
        self.check_tokens(tokens)?;
        self.within(|| match &self.device {
            None => {
                let mut cpu = states
                    .iter_mut()
                    .map(|s| s.cpu_mut())
                    .collect::<Result<Vec<_>, _>>()?;
                qwen3next::forward_batch(self, &mut cpu, tokens)
            }
            Some(d) => device::forward_batch(d.as_ref(), states, tokens),
        })
    }

    /// `f` run where the backend's operations run ([`Backend::within`]);
    /// a device's pass runs on the caller's thread (it uses no CPU
    /// operation), leaving the CPU pool idle.
    fn within<R: Send>(&self, mut f: impl FnMut() -> R + Send) -> R {
        if self.device.is_some() {
            return f();
        }
        let mut out = None;
        self.backend.within(&mut || out = Some(f()));
        match out {
            Some(r) => r,
            None => unreachable!("Backend::within runs its closure"),
        }
    }

    /// Feed `tokens` to one sequence, computing each token exactly as a
    /// decode step would (weights still read once for the batch), and return
    /// all `[n, vocab]` logits with a [`Trail`] to roll the state back to
    /// any of those positions ([`State::rollback`]). Speculative decoding
    /// verifies its drafts with it: the logits equal plain decoding's bit for
    /// bit, so accepting a draft never changes the output.
    pub fn forward_verify(
        &self,
        state: &mut State,
        tokens: &[u32],
    ) -> Result<(Vec<f32>, Trail), ModelError> {
        if tokens.is_empty() {
            return Err(ModelError::Input("verify called with no tokens".into()));
        }
        self.check_tokens(tokens)?;
        self.within(|| match &self.device {
            None => {
                let (logits, trail) = qwen3next::forward_verify(self, state.cpu_mut()?, tokens)?;
                Ok((logits, Trail::Cpu(trail)))
            }
            Some(d) => device::verify(d.as_ref(), state, tokens),
        })
    }

    /// [`Model::forward`], reporting named intermediates to `trace`.
    pub fn forward_traced(
        &self,
        state: &mut State,
        tokens: &[u32],
        all_logits: bool,
        trace: Option<&mut dyn Trace>,
    ) -> Result<Vec<f32>, ModelError> {
        if tokens.is_empty() {
            return Err(ModelError::Input("forward called with no tokens".into()));
        }
        self.check_tokens(tokens)?;
        match (&self.device, trace) {
            // A trace is the caller's and may not leave its thread.
            (None, Some(t)) => {
                qwen3next::forward(self, state.cpu_mut()?, tokens, all_logits, Some(t))
            }
            (None, None) => {
                self.within(|| qwen3next::forward(self, state.cpu_mut()?, tokens, all_logits, None))
            }
            (Some(d), Some(_)) => Err(ModelError::Input(format!(
                "intermediate tensors cannot be traced on {} (use the CPU)",
                d.name()
            ))),
            (Some(d), None) => {
                self.within(|| device::forward(d.as_ref(), state, tokens, all_logits))
            }
        }
    }

    /// Every token id inside the vocabulary (checked once, before either
    /// execution runs).
    fn check_tokens(&self, tokens: &[u32]) -> Result<(), ModelError> {
        let vocab = self.config.vocab_size;
        match tokens
            .iter()
            .enumerate()
            .find(|(_, &t)| t as usize >= vocab)
        {
            Some((index, &token)) => Err(ModelError::Token {
                token,
                index,
                vocab,
            }),
            None => Ok(()),
        }
    }
}
