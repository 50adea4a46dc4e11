//! The generation loop: prefill the prompt in chunks, then decode one token
//! at a time, sampling, streaming whole-character text, stopping at an
//! end-of-generation token or the token limit.

use std::time::Instant;

use redlite_model::{Model, ModelError, State};
use redlite_tokenizer::Tokenizer;

use crate::lookup::{DraftSource, Drafter, LookupParams, LookupStats};
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
    /// Prompt-lookup speculative decoding (the output is unchanged: greedy
    /// output is identical, sampled output has the same distribution).
    pub lookup: Option<LookupParams>,
    /// Where drafts come from (prompt lookup unless a benchmark or test
    /// replays a known continuation or drafts at random).
    pub draft_source: DraftSource,
    /// Keep the logits each generated token was chosen from
    /// ([`Generation::logits`]; for tests and parity tools).
    pub keep_logits: bool,
}

impl Default for GenerateParams {
    fn default() -> Self {
        GenerateParams {
            max_tokens: 256,
            sampling: SamplingParams::default(),
            prefill_chunk: 512,
            stop_at_eog: true,
            lookup: None,
            draft_source: DraftSource::Lookup,
            keep_logits: false,
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
    /// Speculative decoding counts (zeros without lookup).
    pub lookup: LookupStats,
    /// With `keep_logits`: for each generated token, the logits it was
    /// chosen from.
    pub logits: Vec<Vec<f32>>,
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
    let mut out = Output {
        tokens: Vec::new(),
        text: String::new(),
        logits: Vec::new(),
        keep_logits: params.keep_logits,
    };
    let mut drafter = params
        .lookup
        .clone()
        .map(|l| Drafter::with_source(l, params.draft_source.clone(), prompt.len()));
    let mut history: Vec<u32> = prompt.to_vec();
    let eog = |t: u32| params.stop_at_eog && tokenizer.is_eog(t);
    let mut stop = StopReason::Length;
    // `next` is chosen but not yet fed; `logits` are what it was chosen from.
    let mut next = sampler.sample(&logits);
    'gen: while out.tokens.len() < params.max_tokens {
        if eog(next) {
            stop = StopReason::EndOfGeneration(next);
            break;
        }
        out.push(&mut decoder, next, &logits, &mut on_text)?;
        history.push(next);
        let remaining = params.max_tokens - out.tokens.len();
        if remaining == 0 {
            break;
        }
        let draft = match drafter.as_mut() {
            Some(d) => d.draft(&history, remaining - 1),
            None => Vec::new(),
        };
        if draft.is_empty() {
            logits = model.forward(&mut state, &[next], false)?;
            next = sampler.sample(&logits);
            continue;
        }
        // Verify: feed `next` and the draft; row i holds the logits after
        // `next` and the first i drafted tokens, exactly as decoding them.
        let mut batch = Vec::with_capacity(draft.len() + 1);
        batch.push(next);
        batch.extend_from_slice(&draft);
        let (rows, trail) = model.forward_verify(&mut state, &batch)?;
        let vocab = rows.len() / batch.len();
        let row = |i: usize| &rows[i * vocab..(i + 1) * vocab];
        let mut fed = 1;
        let mut chosen = None;
        for (i, &d) in draft.iter().enumerate() {
            let (tok, accepted) = sampler.accept_draft(row(i), d);
            if !accepted {
                chosen = Some((tok, i));
                break;
            }
            if eog(tok) {
                stop = StopReason::EndOfGeneration(tok);
                if let Some(dr) = drafter.as_mut() {
                    dr.record(draft.len(), i);
                }
                break 'gen;
            }
            out.push(&mut decoder, tok, row(i), &mut on_text)?;
            history.push(tok);
            fed += 1;
            if out.tokens.len() == params.max_tokens {
                break;
            }
        }
        if let Some(dr) = drafter.as_mut() {
            dr.record(draft.len(), fed - 1);
        }
        if fed < batch.len() {
            state.rollback(&trail, fed)?;
        }
        if out.tokens.len() == params.max_tokens {
            break;
        }
        logits = row(fed - 1).to_vec();
        next = match chosen {
            Some((tok, _)) => tok,
            None => sampler.sample(&logits),
        };
    }
    let Output {
        tokens,
        mut text,
        logits: kept,
        ..
    } = out;
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
        lookup: drafter.map(|d| d.stats).unwrap_or_default(),
        logits: kept,
    })
}

/// What has been generated so far.
struct Output {
    tokens: Vec<u32>,
    text: String,
    logits: Vec<Vec<f32>>,
    keep_logits: bool,
}

impl Output {
    fn push(
        &mut self,
        decoder: &mut redlite_tokenizer::StreamDecoder<'_>,
        tok: u32,
        logits: &[f32],
        on_text: &mut impl FnMut(&str),
    ) -> Result<(), GenerateError> {
        self.tokens.push(tok);
        if self.keep_logits {
            self.logits.push(logits.to_vec());
        }
        let piece = decoder
            .push(tok)
            .map_err(|e| GenerateError::Tokenizer(e.to_string()))?;
        if !piece.is_empty() {
            on_text(&piece);
            self.text.push_str(&piece);
        }
        Ok(())
    }
}
