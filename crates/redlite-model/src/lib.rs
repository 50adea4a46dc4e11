//! The qwen3next forward pass (Qwen3-Next / Qwen3-Coder-Next) from GGUF.
//!
//! ```no_run
//! # fn main() -> Result<(), redlite_model::ModelError> {
//! let model = redlite_model::Model::load(std::path::Path::new("model.gguf"))?;
//! let mut state = model.new_state();
//! let logits = model.forward(&mut state, &[1, 2, 3], false)?; // [vocab]
//! # Ok(()) }
//! ```

use std::path::{Path, PathBuf};
use std::sync::Arc;

use redlite_backend::{Backend, CpuBackend};
pub use redlite_gguf::LoadOptions;
use redlite_gguf::{GgufError, GgufFile};

mod config;
mod qwen3next;
mod rope;
mod weights;

pub use config::Config;
pub use qwen3next::{State, Trail};
pub use rope::{RopeScaling, RopeScalingType};
pub use weights::mtp_only_blocks;

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

/// Receives named intermediate tensors during a forward pass (llama.cpp
/// callback names, e.g. `attn_norm-3`): `data` is `[rows, cols]` row-major.
pub trait Trace {
    fn tensor(&mut self, name: &str, rows: usize, cols: usize, data: &[f32]);
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

    /// A fresh per-sequence state (position 0, zero recurrent/conv state,
    /// empty KV cache).
    pub fn new_state(&self) -> State {
        State::new(&self.config)
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
        qwen3next::forward_batch(self, states, tokens)
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
        qwen3next::forward_verify(self, state, tokens)
    }

    /// [`Model::forward`], reporting named intermediates to `trace`.
    pub fn forward_traced(
        &self,
        state: &mut State,
        tokens: &[u32],
        all_logits: bool,
        trace: Option<&mut dyn Trace>,
    ) -> Result<Vec<f32>, ModelError> {
        qwen3next::forward(self, state, tokens, all_logits, trace)
    }
}
