//! Continuous batching for a server: up to `parallel` sequences share every
//! decode step, prompts are prefilled a chunk at a time between decode steps,
//! and states are snapshotted into a [`StateCache`] so a request that extends
//! an earlier one (an agent's next turn) only prefills its new tokens.
//!
//! The scheduler is synchronous and owns no thread: the server calls
//! [`Scheduler::admit`] and [`Scheduler::step`] from its compute thread.
//! Results go to each request's [`Sink`]; a sink that reports itself
//! cancelled (or refuses an event) frees its slot at the next step.

use std::sync::Arc;
use std::time::Instant;

use redlite_model::{Model, ModelError, State};

use crate::constraint::{apply_mask, first_allowed, ConstraintSource, TokenConstraint};
use crate::lookup::{DraftSource, Drafter, LookupParams};
use crate::sampling::{Sampler, SamplingParams};
use crate::state_cache::{SnapshotKind, StateCache};

/// One generation request, already tokenized.
#[derive(Clone, Debug)]
pub struct Request {
    pub prompt: Vec<u32>,
    /// Most tokens to generate (at least 1).
    pub max_tokens: usize,
    pub sampling: SamplingParams,
    /// Report the chosen token's log-probability and this many alternatives.
    pub logprobs: Option<usize>,
    /// Stop at end-of-generation tokens.
    pub stop_at_eog: bool,
    /// Speculative decoding with drafts from `draft_source` (the output is
    /// unchanged; see `lookup`).
    pub lookup: Option<LookupParams>,
    pub draft_source: DraftSource,
    /// Token offsets in `prompt` where its messages start (the first one
    /// ends the system prompt and tools): places to snapshot so another
    /// conversation that shares the prefix resumes there. The scheduler
    /// keeps a few of them ([`SchedulerConfig::boundary_snapshots`]).
    pub boundaries: Vec<usize>,
    /// What the output must match (a grammar, a JSON schema): each step's
    /// logits are masked to the tokens it allows, and an end-of-generation
    /// token ends the request only where it allows one (always then, even
    /// without `stop_at_eog`). Drafts are judged on the masked rows.
    pub constraint: Option<Arc<dyn ConstraintSource>>,
}

/// Log-probabilities of one generated token (natural log, of the model's
/// untempered distribution).
#[derive(Clone, Debug, PartialEq)]
pub struct TokenLogprobs {
    pub logprob: f32,
    /// The most likely tokens, most likely first.
    pub top: Vec<(u32, f32)>,
}

/// Why a request ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinishReason {
    /// An end-of-generation token was sampled (not reported as a token).
    EndOfGeneration(u32),
    /// `max_tokens` were generated.
    Length,
    /// The constraint was complete and allowed nothing more.
    ConstraintComplete,
    /// The sink was cancelled or went away.
    Cancelled,
}

/// The end of a request, with its counts and timings.
#[derive(Clone, Debug)]
pub struct Finish {
    pub reason: FinishReason,
    pub prompt_tokens: usize,
    /// Prompt tokens covered by a restored snapshot (not prefilled).
    pub cached_tokens: usize,
    pub generated_tokens: usize,
    pub prefill_seconds: f64,
    pub decode_seconds: f64,
}

/// What a request's sink receives, in order: `Started`, then `Token`s, then
/// one `Finished` (or `Error`).
#[derive(Clone, Debug)]
pub enum Event {
    /// Admitted into a slot; `cached_tokens` of the prompt need no prefill.
    Started {
        prompt_tokens: usize,
        cached_tokens: usize,
    },
    Token {
        id: u32,
        logprobs: Option<TokenLogprobs>,
    },
    Finished(Finish),
    /// The model failed on this request (a bug or bad input that validation
    /// missed); the request is over.
    Error(String),
}

/// Where a request's events go.
pub trait Sink: Send {
    /// Deliver an event; `false` means nobody listens any more.
    fn send(&mut self, event: Event) -> bool;
    /// The client asked to stop (disconnected, or a stop string matched).
    fn cancelled(&self) -> bool;
}

/// Scheduler settings.
#[derive(Clone, Debug)]
pub struct SchedulerConfig {
    /// Sequences decoded together.
    pub parallel: usize,
    /// Prompt tokens fed per forward call.
    pub prefill_chunk: usize,
    /// Snapshot a long prompt every this many tokens (0 = never).
    pub checkpoint_interval: usize,
    /// Byte budget of the snapshot store (0 = no reuse).
    pub state_cache_bytes: usize,
    /// Message boundaries snapshotted per prompt, at most (0 = none).
    pub boundary_snapshots: usize,
    /// Tokens between two boundary snapshots of a prompt, at least (and
    /// between a restored snapshot and the first one).
    pub boundary_min_tokens: usize,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            parallel: 1,
            prefill_chunk: 512,
            checkpoint_interval: 4096,
            state_cache_bytes: 4 << 30,
            boundary_snapshots: 4,
            boundary_min_tokens: 1024,
        }
    }
}

/// Running totals for metrics.
#[derive(Clone, Debug, Default)]
pub struct SchedulerStats {
    pub prompt_tokens_evaluated: u64,
    pub prompt_tokens_cached: u64,
    pub generated_tokens: u64,
    pub prefill_seconds: f64,
    pub decode_seconds: f64,
    pub decode_steps: u64,
    pub snapshot_restores_hit: u64,
    pub snapshot_restores_miss: u64,
    /// Restores by the kind of snapshot they resumed from, in the order of
    /// [`SnapshotKind::ALL`].
    pub snapshot_hits_by_kind: [u64; 4],
    /// Speculative verify passes, tokens drafted and accepted.
    pub spec_rounds: u64,
    pub spec_drafted: u64,
    pub spec_accepted: u64,
    /// Constrained decoding: time the mask thread spent advancing matchers
    /// and computing masks, and the part of it the decode steps waited for
    /// after their forward pass had ended (the cost beyond the pass).
    pub mask_seconds: f64,
    pub mask_wait_seconds: f64,
}

enum Phase {
    /// Prompt tokens `fed..` still to feed.
    Prefill,
    /// `logits` are the last fed token's; the next step samples from them.
    Decode,
}

struct Slot {
    sink: Box<dyn Sink>,
    req: Request,
    state: State,
    sampler: Sampler,
    /// Every token fed into `state`, in order.
    fed: Vec<u32>,
    logits: Vec<f32>,
    phase: Phase,
    cached: usize,
    generated: usize,
    prefill_seconds: f64,
    decode_start: Option<Instant>,
    admitted: u64,
    drafter: Option<Drafter>,
    /// A token already chosen (by a rejected draft's verify) for the next step.
    pending: Option<u32>,
    /// Prompt offsets still to snapshot at (message boundaries), ascending.
    marks: Vec<usize>,
    /// This sequence's matcher, and the mask of the tokens allowed next.
    constraint: Option<Box<dyn TokenConstraint>>,
    mask: Vec<u32>,
    /// The logits with the mask applied (scratch).
    masked: Vec<f32>,
}

/// The batching scheduler.
pub struct Scheduler {
    model: Arc<Model>,
    eog: Vec<u32>,
    cfg: SchedulerConfig,
    cache: StateCache,
    slots: Vec<Slot>,
    admitted: u64,
    stats: SchedulerStats,
}

impl Scheduler {
    /// `eog`: the end-of-generation token ids.
    pub fn new(model: Arc<Model>, eog: Vec<u32>, cfg: SchedulerConfig) -> Scheduler {
        let cache = StateCache::new(cfg.state_cache_bytes);
        Scheduler {
            model,
            eog,
            cfg,
            cache,
            slots: Vec::new(),
            admitted: 0,
            stats: SchedulerStats::default(),
        }
    }

    pub fn model(&self) -> &Model {
        &self.model
    }

    /// Requests in slots (prefilling or decoding).
    pub fn active(&self) -> usize {
        self.slots.len()
    }

    pub fn has_free_slot(&self) -> bool {
        self.slots.len() < self.cfg.parallel.max(1)
    }

    pub fn stats(&self) -> &SchedulerStats {
        &self.stats
    }

    pub fn cache(&self) -> &StateCache {
        &self.cache
    }

    /// Put a request into a free slot, resuming from the longest snapshot
    /// that is a prefix of its prompt. The caller checks
    /// [`Scheduler::has_free_slot`] first; without one the request is
    /// refused with an `Error` event.
    pub fn admit(&mut self, req: Request, mut sink: Box<dyn Sink>) {
        if !self.has_free_slot() {
            sink.send(Event::Error("no free slot".into()));
            return;
        }
        if req.prompt.is_empty() {
            sink.send(Event::Error("the prompt is empty".into()));
            return;
        }
        if let Err(e) = req.sampling.validate() {
            sink.send(Event::Error(format!("invalid sampling parameters: {e}")));
            return;
        }
        let (state, fed, logits, cached) = match self.cache.restore(&req.prompt) {
            Some(r) => {
                self.stats.snapshot_restores_hit += 1;
                self.stats.snapshot_hits_by_kind[r.kind.index()] += 1;
                let fed = req.prompt[..r.tokens].to_vec();
                (r.state, fed, r.logits, r.tokens)
            }
            None => {
                self.stats.snapshot_restores_miss += 1;
                (self.model.new_state(), Vec::new(), Vec::new(), 0)
            }
        };
        let mut mask = Vec::new();
        let constraint = match req.constraint.as_ref().map(|c| {
            let mut m = c.start()?;
            m.mask(&mut mask)?;
            Ok::<_, String>(m)
        }) {
            None => None,
            Some(Ok(m)) => Some(m),
            Some(Err(e)) => {
                sink.send(Event::Error(format!("constraint: {e}")));
                return;
            }
        };
        self.stats.prompt_tokens_cached += cached as u64;
        let phase = if cached == req.prompt.len() {
            Phase::Decode
        } else {
            Phase::Prefill
        };
        if !sink.send(Event::Started {
            prompt_tokens: req.prompt.len(),
            cached_tokens: cached,
        }) {
            return;
        }
        self.admitted += 1;
        let sampler = Sampler::new(req.sampling.clone());
        // A constrained request's drafts are judged against its matcher
        // (see `speculate`).
        let drafter = req
            .lookup
            .clone()
            .map(|l| Drafter::with_source(l, req.draft_source.clone(), req.prompt.len()));
        let marks = pick_boundaries(
            &req.boundaries,
            cached,
            req.prompt.len(),
            self.cfg.boundary_snapshots,
            self.cfg.boundary_min_tokens,
        );
        self.slots.push(Slot {
            marks,
            drafter,
            pending: None,
            constraint,
            mask,
            masked: Vec::new(),
            sink,
            req,
            state,
            sampler,
            fed,
            logits,
            phase,
            cached,
            generated: 0,
            prefill_seconds: 0.0,
            decode_start: None,
            admitted: self.admitted,
        });
    }

    /// One round of work: drop cancelled requests, feed one prefill chunk
    /// (of the oldest prefilling request), then one decode step for every
    /// decoding request together. Returns whether anything was done.
    pub fn step(&mut self) -> bool {
        let cancelled: Vec<(usize, Outcome)> = self
            .slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.sink.cancelled())
            .map(|(i, _)| (i, Outcome::Done(FinishReason::Cancelled)))
            .collect();
        let mut worked = !cancelled.is_empty();
        self.finish_all(cancelled);
        if let Some(i) = self
            .slots
            .iter()
            .enumerate()
            .filter(|(_, s)| matches!(s.phase, Phase::Prefill))
            .min_by_key(|(_, s)| s.admitted)
            .map(|(i, _)| i)
        {
            worked = true;
            if let Err(e) = self.prefill_chunk(i) {
                self.finish_all(vec![(i, Outcome::Error(e.to_string()))]);
            }
        }
        if self.slots.iter().any(|s| matches!(s.phase, Phase::Decode)) {
            worked = true;
            self.decode_step();
        }
        worked
    }

    fn prefill_chunk(&mut self, i: usize) -> Result<(), ModelError> {
        let chunk = self.cfg.prefill_chunk.max(1);
        let interval = self.cfg.checkpoint_interval;
        let s = &mut self.slots[i];
        let start = s.fed.len();
        let total = s.req.prompt.len();
        let mut end = (start + chunk).min(total);
        // End chunks on checkpoint boundaries so the snapshot lands there.
        if let Some(q) = start.checked_div(interval) {
            let next_cp = (q + 1) * interval;
            if next_cp < end {
                end = next_cp;
            }
        }
        // And on the next message boundary to snapshot at.
        s.marks.retain(|&m| m > start);
        if let Some(&m) = s.marks.first() {
            end = end.min(m);
        }
        let t0 = Instant::now();
        let piece = &s.req.prompt[start..end];
        s.logits = self.model.forward(&mut s.state, piece, false)?;
        s.fed.extend_from_slice(piece);
        let dt = t0.elapsed().as_secs_f64();
        s.prefill_seconds += dt;
        self.stats.prefill_seconds += dt;
        self.stats.prompt_tokens_evaluated += (end - start) as u64;
        let at_checkpoint = interval > 0 && end.is_multiple_of(interval);
        let at_boundary = s.marks.first() == Some(&end);
        let kind = if end == total {
            // The end of the prompt is the start of the reply: the snapshot
            // that makes tool-using agents' next turns cheap.
            Some(SnapshotKind::PromptEnd)
        } else if at_boundary {
            // Where another conversation of the same agent diverges.
            Some(SnapshotKind::MessageBoundary)
        } else if at_checkpoint {
            Some(SnapshotKind::Periodic)
        } else {
            None
        };
        if let Some(kind) = kind {
            self.cache.insert(&s.fed, &s.state, &s.logits, kind);
        }
        if end == total {
            s.phase = Phase::Decode;
        }
        Ok(())
    }

    fn decode_step(&mut self) {
        let t0 = Instant::now();
        // Sample every decoding slot; collect the ones that go on.
        let mut feed: Vec<(usize, u32)> = Vec::new();
        let mut done: Vec<(usize, Outcome)> = Vec::new();
        for (i, s) in self.slots.iter_mut().enumerate() {
            if !matches!(s.phase, Phase::Decode) {
                continue;
            }
            if s.decode_start.is_none() {
                s.decode_start = Some(Instant::now());
            }
            let next = match (s.pending.take(), s.constraint.is_some()) {
                (Some(t), _) => t,
                (None, false) => s.sampler.sample(&s.logits),
                (None, true) => {
                    if s.constraint.as_ref().is_some_and(|c| c.finished()) {
                        done.push((i, Outcome::Done(FinishReason::ConstraintComplete)));
                        continue;
                    }
                    apply_mask(&s.logits, &s.mask, &mut s.masked);
                    let t = s.sampler.sample(&s.masked);
                    if crate::constraint::allowed(&s.mask, t) {
                        t
                    } else if let Some(t) = first_allowed(&s.mask, s.logits.len()) {
                        // Every allowed logit was -inf or NaN.
                        t
                    } else {
                        done.push((
                            i,
                            Outcome::Error("the constraint allows no token here".into()),
                        ));
                        continue;
                    }
                }
            };
            let logits = std::mem::take(&mut s.logits);
            let emitted = emit(s, next, &logits, &self.eog, &mut self.stats);
            s.logits = logits;
            if let Err(end) = emitted {
                done.push((i, Outcome::Done(end)));
                continue;
            }
            // Speculation: a sequence with a draft verifies it on its own
            // (exactly as decoding would); the others decode together.
            let remaining = s.req.max_tokens - s.generated;
            let draft = match s.drafter.as_mut() {
                Some(d) if remaining > 1 => {
                    s.fed.push(next);
                    let dr = d.draft(&s.fed, remaining - 1);
                    s.fed.pop();
                    dr
                }
                _ => Vec::new(),
            };
            if draft.is_empty() {
                feed.push((i, next));
                continue;
            }
            if let Some(out) = speculate(&self.model, s, next, &draft, &self.eog, &mut self.stats) {
                done.push((i, out));
            }
        }
        if !feed.is_empty() {
            let tokens: Vec<u32> = feed.iter().map(|&(_, t)| t).collect();
            // Constrained sequences' matchers advance past their token and
            // compute the next mask on another thread while the forward
            // pass runs.
            let mut masks: Vec<MaskJob> = feed
                .iter()
                .filter_map(|&(i, t)| {
                    let s = &mut self.slots[i];
                    s.constraint.take().map(|c| MaskJob {
                        slot: i,
                        token: t,
                        matcher: c,
                        mask: std::mem::take(&mut s.mask),
                        result: Ok(()),
                    })
                })
                .collect();
            let model = &self.model;
            let slots = &mut self.slots;
            let (result, joined) = std::thread::scope(|scope| {
                let worker = (!masks.is_empty()).then(|| {
                    scope.spawn(move || {
                        let t = Instant::now();
                        for j in masks.iter_mut() {
                            j.result = j
                                .matcher
                                .consume(j.token)
                                .and_then(|_| j.matcher.mask(&mut j.mask));
                        }
                        (masks, t.elapsed().as_secs_f64())
                    })
                });
                let mut states: Vec<&mut State> = Vec::with_capacity(feed.len());
                let mut k = 0;
                for (i, s) in slots.iter_mut().enumerate() {
                    if k < feed.len() && feed[k].0 == i {
                        states.push(&mut s.state);
                        k += 1;
                    }
                }
                let result = model.forward_batch(&mut states, &tokens);
                let waited = Instant::now();
                let joined = worker.map(|w| w.join());
                if joined.is_some() {
                    self.stats.mask_wait_seconds += waited.elapsed().as_secs_f64();
                }
                (result, joined)
            });
            match joined {
                None => {}
                Some(Ok((jobs, secs))) => {
                    self.stats.mask_seconds += secs;
                    for j in jobs {
                        let s = &mut self.slots[j.slot];
                        s.constraint = Some(j.matcher);
                        s.mask = j.mask;
                        if let Err(e) = j.result {
                            done.push((j.slot, Outcome::Error(format!("constraint: {e}"))));
                        }
                    }
                }
                Some(Err(_)) => {
                    // The matcher thread panicked: its sequences cannot go on.
                    for &(i, _) in &feed {
                        if self.slots[i].req.constraint.is_some() {
                            done.push((i, Outcome::Error("constraint: the matcher failed".into())));
                        }
                    }
                }
            }
            match result {
                Ok(logits) => {
                    let vocab = logits.len() / feed.len();
                    for (row, &(i, t)) in feed.iter().enumerate() {
                        let s = &mut self.slots[i];
                        s.fed.push(t);
                        s.logits.clear();
                        s.logits
                            .extend_from_slice(&logits[row * vocab..(row + 1) * vocab]);
                    }
                    self.stats.decode_steps += 1;
                }
                Err(e) => {
                    // Their states may have advanced partially: end them.
                    let msg = e.to_string();
                    done.extend(feed.iter().map(|&(i, _)| (i, Outcome::Error(msg.clone()))));
                }
            }
        }
        self.stats.decode_seconds += t0.elapsed().as_secs_f64();
        self.finish_all(done);
    }

    /// End the slots at the given indices (all taken before any removal),
    /// removing from the highest index down so the others stay valid.
    fn finish_all(&mut self, mut done: Vec<(usize, Outcome)>) {
        done.sort_by_key(|d| std::cmp::Reverse(d.0));
        // A slot ends once (the first outcome recorded for it wins).
        done.dedup_by_key(|d| d.0);
        for (i, outcome) in done {
            let mut s = self.slots.swap_remove(i);
            let reason = match outcome {
                Outcome::Error(msg) => {
                    s.sink.send(Event::Error(msg));
                    continue;
                }
                Outcome::Done(r) => r,
            };
            if reason != FinishReason::Cancelled {
                // The end of the reply: the next turn starts with it.
                self.cache
                    .insert(&s.fed, &s.state, &s.logits, SnapshotKind::ReplyEnd);
            }
            let fin = Finish {
                reason,
                prompt_tokens: s.req.prompt.len(),
                cached_tokens: s.cached,
                generated_tokens: s.generated,
                prefill_seconds: s.prefill_seconds,
                decode_seconds: s
                    .decode_start
                    .map(|t| t.elapsed().as_secs_f64())
                    .unwrap_or(0.0),
            };
            s.sink.send(Event::Finished(fin));
        }
    }
}

enum Outcome {
    Done(FinishReason),
    Error(String),
}

/// The message boundaries of a prompt of `total` tokens to snapshot at,
/// ascending: the first boundary of the prompt (the end of the system prompt
/// and tools, where two conversations of one agent part) if it lies at
/// least `gap` tokens past the `cached` prefix, then the latest others, each
/// at least `gap` tokens from the next one kept (or the prompt's end, which
/// has its own snapshot) and from the one before; `max` in all.
pub fn pick_boundaries(
    bounds: &[usize],
    cached: usize,
    total: usize,
    max: usize,
    gap: usize,
) -> Vec<usize> {
    let mut sorted: Vec<usize> = bounds
        .iter()
        .copied()
        .filter(|&b| b > 0 && b < total)
        .collect();
    sorted.sort_unstable();
    sorted.dedup();
    let mut out = Vec::new();
    if max == 0 {
        return out;
    }
    let mut floor = cached;
    if let Some(&first) = sorted.first() {
        if first > cached && first < total && first - cached >= gap {
            out.push(first);
            floor = first;
        }
    }
    let mut next = total;
    for &b in sorted.iter().rev() {
        if out.len() >= max || b <= floor {
            break;
        }
        if next - b >= gap && b - floor >= gap {
            out.push(b);
            next = b;
        }
    }
    out.sort_unstable();
    out
}

/// A constrained sequence's matcher, out on the mask thread for one step.
struct MaskJob {
    slot: usize,
    token: u32,
    matcher: Box<dyn TokenConstraint>,
    mask: Vec<u32>,
    result: Result<(), String>,
}

/// Report a chosen token of slot `s` (chosen from `logits`) to its sink.
/// `Err` says why the request ends here: an end-of-generation token (not
/// reported), a sink that went away, or the token limit reached.
fn emit(
    s: &mut Slot,
    tok: u32,
    logits: &[f32],
    eog: &[u32],
    stats: &mut SchedulerStats,
) -> Result<(), FinishReason> {
    if (s.req.stop_at_eog || s.constraint.is_some()) && eog.contains(&tok) {
        return Err(FinishReason::EndOfGeneration(tok));
    }
    let logprobs = s.req.logprobs.map(|k| token_logprobs(logits, tok, k));
    s.generated += 1;
    stats.generated_tokens += 1;
    if !s.sink.send(Event::Token { id: tok, logprobs }) {
        return Err(FinishReason::Cancelled);
    }
    if s.generated >= s.req.max_tokens {
        return Err(FinishReason::Length);
    }
    Ok(())
}

/// Verify `draft` after `next` for one slot, emit the accepted tokens, roll
/// the state back to the last of them, and leave the logits (and, after a
/// rejection, the already chosen replacement) for the next step. Returns an
/// outcome when the request ends here.
fn speculate(
    model: &Model,
    s: &mut Slot,
    next: u32,
    draft: &[u32],
    eog: &[u32],
    stats: &mut SchedulerStats,
) -> Option<Outcome> {
    let mut batch = Vec::with_capacity(draft.len() + 1);
    batch.push(next);
    batch.extend_from_slice(draft);
    let (rows, trail) = match model.forward_verify(&mut s.state, &batch) {
        Ok(r) => r,
        Err(e) => return Some(Outcome::Error(e.to_string())),
    };
    let vocab = rows.len() / batch.len();
    let row = |i: usize| &rows[i * vocab..(i + 1) * vocab];
    s.fed.push(next);
    let mut fed = 1;
    let mut outcome = None;
    // A constrained sequence: the matcher advances past `next` and every
    // accepted draft token, and each verify row is masked by what the
    // matcher allows there before the draft is judged, exactly as decoding
    // one token at a time would mask it. A draft token the mask forbids is
    // a rejection (its probability under the masked row is zero).
    let t_mask = Instant::now();
    let masked = s.constraint.is_some();
    if masked {
        if let Err(e) = advance(s, next) {
            return Some(e);
        }
    }
    for (i, &d) in draft.iter().enumerate() {
        if masked && s.constraint.as_ref().is_some_and(|c| c.finished()) {
            outcome = Some(Outcome::Done(FinishReason::ConstraintComplete));
            break;
        }
        let (tok, accepted) = if masked {
            apply_mask(row(i), &s.mask, &mut s.masked);
            let (t, ok) = s.sampler.accept_draft(&s.masked, d);
            if crate::constraint::allowed(&s.mask, t) {
                (t, ok)
            } else if let Some(t) = first_allowed(&s.mask, vocab) {
                // Every allowed logit was -inf or NaN.
                (t, false)
            } else {
                outcome = Some(Outcome::Error("the constraint allows no token here".into()));
                break;
            }
        } else {
            s.sampler.accept_draft(row(i), d)
        };
        if !accepted {
            s.pending = Some(tok);
            break;
        }
        let emitted = emit(s, tok, row(i), eog, stats);
        if let Err(FinishReason::EndOfGeneration(_)) = emitted {
            // Not kept: the state rolls back to before it.
        } else {
            fed += 1;
            s.fed.push(tok);
        }
        if let Err(end) = emitted {
            outcome = Some(Outcome::Done(end));
            break;
        }
        if masked {
            if let Err(e) = advance(s, tok) {
                outcome = Some(e);
                break;
            }
        }
    }
    if masked {
        stats.mask_seconds += t_mask.elapsed().as_secs_f64();
    }
    stats.spec_rounds += 1;
    stats.spec_drafted += draft.len() as u64;
    stats.spec_accepted += (fed - 1) as u64;
    if let Some(d) = s.drafter.as_mut() {
        d.record(draft.len(), fed - 1);
    }
    if fed < batch.len() {
        if let Err(e) = s.state.rollback(&trail, fed) {
            return Some(Outcome::Error(e.to_string()));
        }
    }
    s.logits.clear();
    s.logits.extend_from_slice(row(fed - 1));
    outcome
}

/// Feed `token` to slot `s`'s matcher and compute its next mask (on this
/// thread: inside a verify round the masks are needed one after another).
fn advance(s: &mut Slot, token: u32) -> Result<(), Outcome> {
    let Some(c) = s.constraint.as_mut() else {
        return Ok(());
    };
    c.consume(token)
        .and_then(|_| c.mask(&mut s.mask))
        .map_err(|e| Outcome::Error(format!("constraint: {e}")))
}

/// Log-softmax of `logits` at `chosen`, plus the `k` most likely tokens.
pub fn token_logprobs(logits: &[f32], chosen: u32, k: usize) -> TokenLogprobs {
    let m = logits.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b)) as f64;
    let lse = m + logits
        .iter()
        .map(|&x| (x as f64 - m).exp())
        .sum::<f64>()
        .ln();
    let lp = |t: u32| (logits[t as usize] as f64 - lse) as f32;
    let mut top = Vec::new();
    if k > 0 {
        let mut idx: Vec<u32> = (0..logits.len() as u32).collect();
        let k = k.min(idx.len());
        idx.select_nth_unstable_by(k - 1, |&a, &b| {
            logits[b as usize]
                .total_cmp(&logits[a as usize])
                .then(a.cmp(&b))
        });
        idx.truncate(k);
        idx.sort_by(|&a, &b| {
            logits[b as usize]
                .total_cmp(&logits[a as usize])
                .then(a.cmp(&b))
        });
        top = idx.into_iter().map(|t| (t, lp(t))).collect();
    }
    TokenLogprobs {
        logprob: lp(chosen),
        top,
    }
}
