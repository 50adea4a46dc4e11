//! The batching scheduler: batch-independence, state reuse, cancellation,
//! the snapshot store's budget.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use redlite_engine::{
    DraftSource, Event, FinishReason, LookupParams, Request, SamplingParams, Scheduler,
    SchedulerConfig, Sink, SnapshotKind, StateCache,
};
use redlite_model::Model;
use redlite_testkit::fixture;

#[derive(Clone, Default)]
struct Collect {
    events: Arc<Mutex<Vec<Event>>>,
    cancel: Arc<AtomicBool>,
    /// Cancel after this many tokens.
    cancel_after: Option<usize>,
}

impl Sink for Collect {
    fn send(&mut self, event: Event) -> bool {
        let mut ev = self.events.lock().expect("lock");
        ev.push(event);
        if let Some(n) = self.cancel_after {
            let toks = ev
                .iter()
                .filter(|e| matches!(e, Event::Token { .. }))
                .count();
            if toks >= n {
                self.cancel.store(true, Ordering::SeqCst);
            }
        }
        true
    }
    fn cancelled(&self) -> bool {
        self.cancel.load(Ordering::SeqCst)
    }
}

impl Collect {
    fn tokens(&self) -> Vec<u32> {
        self.events
            .lock()
            .expect("lock")
            .iter()
            .filter_map(|e| match e {
                Event::Token { id, .. } => Some(*id),
                _ => None,
            })
            .collect()
    }
    fn first_logprobs(&self) -> Vec<(u32, f32)> {
        self.events
            .lock()
            .expect("lock")
            .iter()
            .find_map(|e| match e {
                Event::Token {
                    logprobs: Some(lp), ..
                } => Some(lp.top.clone()),
                _ => None,
            })
            .expect("a token with logprobs")
    }
    fn finish(&self) -> redlite_engine::Finish {
        self.events
            .lock()
            .expect("lock")
            .iter()
            .find_map(|e| match e {
                Event::Finished(f) => Some(f.clone()),
                _ => None,
            })
            .expect("finished")
    }
}

fn model(name: &str) -> Arc<Model> {
    Arc::new(Model::load(&fixture(name)).expect("model"))
}

/// A fixture on the f32-activation (reference) path.
fn model_f32(name: &str) -> Arc<Model> {
    let be = redlite_backend::CpuBackend::new(None)
        .expect("pool")
        .with_activations(redlite_backend::Activations::F32);
    Arc::new(Model::load_with_backend(&fixture(name), Arc::new(be)).expect("model"))
}

fn prompts() -> serde_json::Value {
    let s = std::fs::read_to_string(fixture("prompts.json")).expect("prompts.json");
    serde_json::from_str(&s).expect("parses")
}

fn ids(p: &serde_json::Value, name: &str) -> Vec<u32> {
    p[name]["ids"]
        .as_array()
        .expect("ids")
        .iter()
        .map(|x| x.as_u64().expect("id") as u32)
        .collect()
}

fn greedy(prompt: Vec<u32>, max_tokens: usize) -> Request {
    Request {
        prompt,
        max_tokens,
        sampling: SamplingParams::default(),
        logprobs: None,
        stop_at_eog: false,
        lookup: None,
        draft_source: DraftSource::Lookup,
        boundaries: Vec::new(),
        constraint: None,
    }
}

fn run_all(s: &mut Scheduler, mut queue: Vec<(Request, Collect)>) {
    queue.reverse();
    loop {
        while s.has_free_slot() {
            match queue.pop() {
                Some((r, c)) => s.admit(r, Box::new(c)),
                None => break,
            }
        }
        if !s.step() && queue.is_empty() {
            break;
        }
    }
    assert_eq!(s.active(), 0);
}

#[test]
fn parallel_requests_match_each_alone() {
    let p = prompts();
    for file in ["tiny-s-CF2mix.gguf", "tiny-a-bf16.gguf"] {
        let m = model(file);
        let names = ["hello", "prose", "code", "unicode", "rep120"];
        let cfg = |parallel| SchedulerConfig {
            parallel,
            prefill_chunk: 16,
            checkpoint_interval: 0,
            state_cache_bytes: 0,
            ..SchedulerConfig::default()
        };
        let mut alone = Vec::new();
        for n in names {
            let mut s = Scheduler::new(m.clone(), vec![], cfg(1));
            let c = Collect::default();
            run_all(&mut s, vec![(greedy(ids(&p, n), 40), c.clone())]);
            alone.push(c.tokens());
        }
        let mut s = Scheduler::new(m.clone(), vec![], cfg(4));
        let cs: Vec<Collect> = names.iter().map(|_| Collect::default()).collect();
        let queue = names
            .iter()
            .zip(&cs)
            .enumerate()
            .map(|(i, (n, c))| (greedy(ids(&p, n), 16 + 4 * i), c.clone()))
            .collect();
        run_all(&mut s, queue);
        assert!(s.stats().decode_steps > 0);
        for (i, c) in cs.iter().enumerate() {
            let got = c.tokens();
            assert_eq!(got.len(), 16 + 4 * i);
            assert_eq!(
                got[..],
                alone[i][..got.len()],
                "{file} {}: tokens differ under batching",
                names[i]
            );
            assert_eq!(c.finish().reason, FinishReason::Length);
        }
    }
}

#[test]
fn next_turn_resumes_from_snapshot_with_fresh_logits() {
    // On the f32 path: resuming differs from a fresh prefill only by where
    // the prompt's chunks start (f32 rounding). The integer path rounds
    // activations to 15 bits, which turns such rounding differences into
    // occasional last-bit flips of a quantized activation: log-probs then
    // differ by ~1e-3 (still KL ~1e-7), so this exactness check uses f32.
    let p = prompts();
    let m = model_f32("tiny-s-Q8_0.gguf");
    let mut s = Scheduler::new(m.clone(), vec![], SchedulerConfig::default());
    let turn1 = ids(&p, "code");
    let c1 = Collect::default();
    run_all(&mut s, vec![(greedy(turn1.clone(), 10), c1.clone())]);
    assert_eq!(c1.finish().cached_tokens, 0);
    let reply = c1.tokens();

    // Turn 2 as an agent sends it, with the reply re-serialised differently
    // (its last tokens changed) and new text after it.
    let mut turn2 = turn1.clone();
    turn2.extend_from_slice(&reply[..6]);
    turn2.extend_from_slice(&[7, 8, 9, 10]);
    turn2.extend_from_slice(&ids(&p, "hello"));
    let lp_req = |prompt: Vec<u32>| Request {
        logprobs: Some(8),
        ..greedy(prompt, 3)
    };
    let c2 = Collect::default();
    run_all(&mut s, vec![(lp_req(turn2.clone()), c2.clone())]);
    let f2 = c2.finish();
    // The reply-start snapshot (end of turn 1's prompt) is the longest prefix.
    assert_eq!(f2.cached_tokens, turn1.len());
    assert!(s.stats().prompt_tokens_cached >= turn1.len() as u64);

    // Same request on a scheduler without reuse: same tokens, logprobs
    // within 1e-4.
    let mut fresh = Scheduler::new(
        m,
        vec![],
        SchedulerConfig {
            state_cache_bytes: 0,
            ..SchedulerConfig::default()
        },
    );
    let c3 = Collect::default();
    run_all(&mut fresh, vec![(lp_req(turn2.clone()), c3.clone())]);
    assert_eq!(c3.finish().cached_tokens, 0);
    assert_eq!(c2.tokens(), c3.tokens());
    let (a, b) = (c2.first_logprobs(), c3.first_logprobs());
    assert_eq!(a.len(), 8);
    for ((ta, la), (tb, lb)) in a.iter().zip(&b) {
        assert_eq!(ta, tb);
        assert!((la - lb).abs() < 1e-4, "logprob {la} vs {lb}");
    }

    // Turn 3 extends turn 2 exactly: the end-of-reply snapshot covers the
    // whole of turn 2 and its reply.
    let mut turn3 = turn2.clone();
    turn3.extend_from_slice(&c2.tokens()[..2]);
    turn3.extend_from_slice(&[11, 12]);
    let c4 = Collect::default();
    run_all(&mut s, vec![(greedy(turn3, 2), c4.clone())]);
    assert_eq!(c4.finish().cached_tokens, turn2.len() + 2);

    // The identical request again needs no prefill at all.
    let c5 = Collect::default();
    run_all(&mut s, vec![(lp_req(turn2.clone()), c5.clone())]);
    assert_eq!(c5.finish().cached_tokens, turn2.len());
    assert_eq!(c5.tokens(), c3.tokens());
}

#[test]
fn long_prompts_are_checkpointed() {
    let p = prompts();
    let m = model("tiny-s-bf16.gguf");
    let cfg = SchedulerConfig {
        parallel: 1,
        prefill_chunk: 8,
        checkpoint_interval: 16,
        state_cache_bytes: 1 << 30,
        ..SchedulerConfig::default()
    };
    let mut s = Scheduler::new(m, vec![], cfg);
    let long = ids(&p, "rep120");
    assert!(long.len() > 40);
    run_all(&mut s, vec![(greedy(long.clone(), 1), Collect::default())]);
    // A request sharing only the first 40 tokens resumes from the 32-token checkpoint.
    let mut other = long[..40].to_vec();
    other.push(3);
    let c = Collect::default();
    run_all(&mut s, vec![(greedy(other, 1), c.clone())]);
    assert_eq!(c.finish().cached_tokens, 32);
}

#[test]
fn cancelled_request_frees_its_slot() {
    let p = prompts();
    let m = model("tiny-s-bf16.gguf");
    let mut s = Scheduler::new(m, vec![], SchedulerConfig::default());
    let c = Collect {
        cancel_after: Some(3),
        ..Collect::default()
    };
    run_all(&mut s, vec![(greedy(ids(&p, "prose"), 100), c.clone())]);
    assert_eq!(c.finish().reason, FinishReason::Cancelled);
    assert_eq!(c.tokens().len(), 3);
    // A cancelled reply leaves no end-of-reply snapshot, only the prompt's.
    assert_eq!(s.cache().len(), 1);
}

#[test]
fn eog_stops_and_bad_requests_error() {
    let p = prompts();
    let m = model("tiny-s-bf16.gguf");
    let prompt = ids(&p, "hello");
    // Find the greedy first token, then declare it end-of-generation.
    let c = Collect::default();
    let mut s = Scheduler::new(m.clone(), vec![], SchedulerConfig::default());
    run_all(&mut s, vec![(greedy(prompt.clone(), 1), c.clone())]);
    let first = c.tokens()[0];
    let mut s = Scheduler::new(m.clone(), vec![first], SchedulerConfig::default());
    let c = Collect::default();
    let mut req = greedy(prompt, 5);
    req.stop_at_eog = true;
    run_all(&mut s, vec![(req, c.clone())]);
    assert_eq!(c.finish().reason, FinishReason::EndOfGeneration(first));
    assert!(c.tokens().is_empty());

    let c = Collect::default();
    run_all(&mut s, vec![(greedy(vec![u32::MAX], 5), c.clone())]);
    let ev = c.events.lock().expect("lock");
    assert!(
        ev.iter()
            .any(|e| matches!(e, Event::Error(m) if m.contains("outside the vocabulary"))),
        "{ev:?}"
    );
}

#[test]
fn state_cache_is_lru_within_budget() {
    let m = model("tiny-s-bf16.gguf");
    let mut st = m.new_state();
    let logits = m.forward(&mut st, &[1, 2, 3, 4], false).expect("fwd");
    let one = st.bytes() + logits.len() * 4 + 4 * 4;
    let mut cache = StateCache::new(2 * one + 8);
    assert!(cache.insert(&[1, 2, 3, 4], &st, &logits, SnapshotKind::PromptEnd));
    let mut st2 = m.new_state();
    let l2 = m.forward(&mut st2, &[5, 6, 7, 8], false).expect("fwd");
    assert!(cache.insert(&[5, 6, 7, 8], &st2, &l2, SnapshotKind::PromptEnd));
    assert_eq!(cache.len(), 2);
    // Touch the first, insert a third: the second (least recent) goes.
    assert_eq!(cache.restore(&[1, 2, 3, 4, 9]).expect("hit").tokens, 4);
    let mut st3 = m.new_state();
    let l3 = m.forward(&mut st3, &[9, 9, 9, 9], false).expect("fwd");
    assert!(cache.insert(&[9, 9, 9, 9], &st3, &l3, SnapshotKind::PromptEnd));
    assert_eq!(cache.len(), 2);
    assert!(cache.bytes() <= cache.budget());
    assert!(cache.restore(&[5, 6, 7, 8]).is_none());
    assert!(cache.restore(&[1, 2, 3, 4]).is_some());
    // Inconsistent or oversize inserts are refused.
    assert!(!cache.insert(&[1, 2], &st, &logits, SnapshotKind::PromptEnd));
    let mut tiny = StateCache::new(16);
    assert!(!tiny.insert(&[1, 2, 3, 4], &st, &logits, SnapshotKind::PromptEnd));
}

#[test]
fn speculation_in_slots_changes_no_token() {
    let p = prompts();
    let m = model("tiny-s-CF2mix.gguf");
    let names = ["hello", "prose", "code", "rep120"];
    let cfg = |parallel| SchedulerConfig {
        parallel,
        prefill_chunk: 16,
        checkpoint_interval: 0,
        state_cache_bytes: 0,
        ..SchedulerConfig::default()
    };
    let mut alone = Vec::new();
    for n in names {
        let mut s = Scheduler::new(m.clone(), vec![], cfg(1));
        let c = Collect::default();
        run_all(&mut s, vec![(greedy(ids(&p, n), 40), c.clone())]);
        alone.push(c.tokens());
    }
    let vocab = m.config().vocab_size as u32;
    // Replayed drafts (all accepted), a corrupted replay (rejections and
    // rollbacks), random drafts; four sequences at once, with logprobs.
    for mode in 0..3 {
        let mut s = Scheduler::new(m.clone(), vec![], cfg(4));
        let cs: Vec<Collect> = names.iter().map(|_| Collect::default()).collect();
        let queue = names
            .iter()
            .zip(&cs)
            .enumerate()
            .map(|(i, (n, c))| {
                let mut replay = alone[i].clone();
                if mode == 1 {
                    for (j, t) in replay.iter_mut().enumerate() {
                        if j % 5 == 2 {
                            *t = (*t + 1) % vocab;
                        }
                    }
                }
                let source = match mode {
                    0 | 1 => DraftSource::Replay(replay),
                    _ => DraftSource::Random {
                        vocab,
                        seed: i as u64,
                    },
                };
                let req = Request {
                    lookup: Some(LookupParams::default()),
                    draft_source: source,
                    logprobs: Some(2),
                    ..greedy(ids(&p, n), 40)
                };
                (req, c.clone())
            })
            .collect();
        run_all(&mut s, queue);
        for (i, c) in cs.iter().enumerate() {
            assert_eq!(
                c.tokens(),
                alone[i],
                "mode {mode} {}: tokens differ",
                names[i]
            );
            assert_eq!(c.finish().generated_tokens, 40);
        }
        let st = s.stats();
        assert!(st.spec_rounds > 0 && st.spec_accepted <= st.spec_drafted);
        if mode == 0 {
            assert_eq!(st.spec_accepted, st.spec_drafted);
            // 4 × 40 tokens in far fewer steps than one token per step.
            assert!(st.spec_rounds + st.decode_steps < 80, "{st:?}");
        }
        if mode == 1 {
            assert!(st.spec_accepted > 0 && st.spec_accepted < st.spec_drafted);
        }
    }
}

/// Which message boundaries a prompt snapshots at: the first (end of the
/// system prompt) when far enough past what was restored, then the latest
/// others spaced by the minimum gap, never at the prompt's end.
#[test]
fn boundary_snapshots_are_the_first_then_the_latest_spaced_ones() {
    use redlite_engine::pick_boundaries;
    let b = [1500, 1520, 2000, 3000, 3100, 4200, 5990];
    // First boundary, then latest first: 5990 is within the gap of the end.
    assert_eq!(
        pick_boundaries(&b, 0, 6000, 4, 1000),
        vec![1500, 3100, 4200]
    );
    assert_eq!(pick_boundaries(&b, 0, 6000, 2, 1000), vec![1500, 4200]);
    assert_eq!(pick_boundaries(&b, 0, 6000, 1, 1000), vec![1500]);
    assert!(pick_boundaries(&b, 0, 6000, 0, 1000).is_empty());
    // Resumed past the first: only later ones, a gap past the restore.
    assert_eq!(pick_boundaries(&b, 1520, 6000, 4, 1000), vec![3100, 4200]);
    // A short system prompt is not worth a snapshot of its own.
    assert_eq!(
        pick_boundaries(&[300, 2000], 0, 2100, 4, 1000),
        Vec::<usize>::new()
    );
    // Unsorted, duplicated and out-of-range offsets are tolerated.
    assert_eq!(
        pick_boundaries(&[0, 1500, 1500, 9000], 0, 1600, 4, 1000),
        vec![1500]
    );
}

/// Two conversations sharing a first message: the second resumes from the
/// snapshot taken at the first message boundary (counted under its kind)
/// and decodes exactly as a scheduler without reuse does.
#[test]
fn conversations_sharing_a_first_message_resume_at_its_boundary() {
    let p = prompts();
    let m = model("tiny-s-CF2mix.gguf");
    let mut system = ids(&p, "code");
    system.extend(ids(&p, "prose"));
    let b = system.len();
    let conv = |user: &str| {
        let mut t = system.clone();
        t.extend(ids(&p, user));
        Request {
            boundaries: vec![b],
            logprobs: Some(4),
            ..greedy(t, 3)
        }
    };
    let cfg = |cache| SchedulerConfig {
        prefill_chunk: 64,
        state_cache_bytes: cache,
        boundary_min_tokens: 100,
        ..SchedulerConfig::default()
    };
    let mut s = Scheduler::new(m.clone(), vec![], cfg(1 << 30));
    let c1 = Collect::default();
    run_all(&mut s, vec![(conv("hello"), c1.clone())]);
    assert_eq!(c1.finish().cached_tokens, 0);
    let c2 = Collect::default();
    run_all(&mut s, vec![(conv("unicode"), c2.clone())]);
    assert_eq!(c2.finish().cached_tokens, b);
    let hits = s.stats().snapshot_hits_by_kind;
    assert_eq!(hits[SnapshotKind::MessageBoundary.index()], 1, "{hits:?}");
    assert_eq!(hits.iter().sum::<u64>(), 1);

    let mut fresh = Scheduler::new(m, vec![], cfg(0));
    let c3 = Collect::default();
    run_all(&mut fresh, vec![(conv("unicode"), c3.clone())]);
    assert_eq!(c3.finish().cached_tokens, 0);
    assert_eq!(c2.tokens(), c3.tokens());
    // The same chunks (cut at the boundary in both runs): the same bits.
    assert_eq!(c2.first_logprobs(), c3.first_logprobs());
}
