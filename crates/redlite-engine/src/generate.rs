//! The generation loop: prefill the prompt in chunks, then decode one token
//! at a time, sampling, streaming whole-character text, stopping at an
//! end-of-generation token or the token limit.

use std::time::Instant;

use redlite_model::{Model, ModelError, State};
use redlite_tokenizer::Tokenizer;

use crate::sampling::{Sampler, SamplingParams};

/// What to generate.
#[derive(Clone, Debug)]
pub struct GenerateParams {
    /// Most tokens to generate.
    pub max_tokens: usize,
    pub sampling: SamplingParams,
    /// Tokens fed per forward call while reading the prompt.
    pub prefill_chunk: usize,
    /// Stop at the tokenizer's end-of-generation tokens (`<|im_end|>`, ...).
    pub stop_at_eog: bool,
}

impl Default for GenerateParams {
    fn default() -> Self {
        GenerateParams {
            max_tokens: 256,
            sampling: SamplingParams::default(),
            prefill_chunk: 512,
            stop_at_eog: true,
        }
    }
}

/// Why generation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// An end-of-generation token was sampled (not included in the output).
    EndOfGeneration(u32),
    /// `max_tokens` were generated.
    Length,
}

/// The result of a generation with its timings.
#[derive(Clone, Debug)]
pub struct Generation {
    pub tokens: Vec<u32>,
    pub text: String,
    pub stop: StopReason,
    pub prompt_tokens: usize,
    pub prompt_seconds: f64,
    pub generated_seconds: f64,
}

impl Generation {
    pub fn prompt_tokens_per_second(&self) -> f64 {
        self.prompt_tokens as f64 / self.prompt_seconds.max(1e-9)
    }
    pub fn generated_tokens_per_second(&self) -> f64 {
        self.tokens.len() as f64 / self.generated_seconds.max(1e-9)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum GenerateError {
    #[error("the prompt is empty: at least one token is needed")]
    EmptyPrompt,
    #[error("invalid sampling parameters: {0}")]
    Sampling(String),
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error("detokenizing: {0}")]
    Tokenizer(String),
}

/// Feed `prompt` into `state` in chunks; returns the logits of the last
/// prompt token. `progress(done, total)` is called after every chunk.
pub fn prefill(
    model: &Model,
    state: &mut State,
    prompt: &[u32],
    chunk: usize,
    mut progress: impl FnMut(usize, usize),
) -> Result<Vec<f32>, GenerateError> {
    if prompt.is_empty() {
        return Err(GenerateError::EmptyPrompt);
    }
    let mut logits = Vec::new();
    let mut done = 0;
    for piece in prompt.chunks(chunk.max(1)) {
        logits = model.forward(state, piece, false)?;
        done += piece.len();
        progress(done, prompt.len());
    }
    Ok(logits)
}

/// Generate from `prompt`, calling `on_text` with each new piece of text
/// (whole characters only) as soon as it is known.
pub fn generate(
    model: &Model,
    tokenizer: &Tokenizer,
    prompt: &[u32],
    params: &GenerateParams,
    progress: impl FnMut(usize, usize),
    mut on_text: impl FnMut(&str),
) -> Result<Generation, GenerateError> {
    params
        .sampling
        .validate()
        .map_err(GenerateError::Sampling)?;
    let mut sampler = Sampler::new(params.sampling.clone());
    let mut state = model.new_state();
    let t0 = Instant::now();
    let mut logits = prefill(model, &mut state, prompt, params.prefill_chunk, progress)?;
    let prompt_seconds = t0.elapsed().as_secs_f64();

    let t1 = Instant::now();
    let mut decoder = tokenizer.stream_decoder();
    let mut tokens = Vec::new();
    let mut text = String::new();
    let mut stop = StopReason::Length;
    while tokens.len() < params.max_tokens {
        let next = sampler.sample(&logits);
        if params.stop_at_eog && tokenizer.is_eog(next) {
            stop = StopReason::EndOfGeneration(next);
            break;
        }
        tokens.push(next);
        let piece = decoder
            .push(next)
            .map_err(|e| GenerateError::Tokenizer(e.to_string()))?;
        if !piece.is_empty() {
            on_text(&piece);
            text.push_str(&piece);
        }
        if tokens.len() == params.max_tokens {
            break;
        }
        logits = model.forward(&mut state, &[next], false)?;
    }
    let rest = decoder.finish();
    if !rest.is_empty() {
        on_text(&rest);
        text.push_str(&rest);
    }
    Ok(Generation {
        tokens,
        text,
        stop,
        prompt_tokens: prompt.len(),
        prompt_seconds,
        generated_seconds: t1.elapsed().as_secs_f64(),
    })
}
