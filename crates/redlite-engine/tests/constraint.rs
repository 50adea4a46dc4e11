//! Constrained decoding in the scheduler: the mask decides what is sampled
//! (checked against a second path that masks the model's own logits), the
//! matcher sees exactly the tokens emitted, the end comes where the
//! constraint allows it, each of several sequences follows its own
//! constraint, and drafts of constrained requests are judged against the
//! mask (speculation changes no constrained output).

use std::sync::{Arc, Mutex};

use redlite_engine::{
    ConstraintSource, DraftSource, Event, FinishReason, LookupParams, Request, SamplingParams,
    Scheduler, SchedulerConfig, Sink, TokenConstraint,
};
use redlite_model::Model;
use redlite_testkit::fixture;

#[derive(Clone, Default)]
struct Collect {
    events: Arc<Mutex<Vec<Event>>>,
}

impl Sink for Collect {
    fn send(&mut self, event: Event) -> bool {
        self.events.lock().expect("lock").push(event);
        true
    }
    fn cancelled(&self) -> bool {
        false
    }
}

impl Collect {
    fn tokens(&self) -> Vec<u32> {
        let ev = self.events.lock().expect("lock");
        ev.iter()
            .filter_map(|e| match e {
                Event::Token { id, .. } => Some(*id),
                _ => None,
            })
            .collect()
    }
    fn reason(&self) -> FinishReason {
        let ev = self.events.lock().expect("lock");
        ev.iter()
            .find_map(|e| match e {
                Event::Finished(f) => Some(f.reason),
                Event::Error(m) => panic!("error: {m}"),
                _ => None,
            })
            .expect("finished")
    }
}

/// Allows the tokens of `set` for `len` tokens, then only `end`; records
/// what it was fed.
#[derive(Debug)]
struct SetSource {
    set: Vec<u32>,
    len: usize,
    end: u32,
    n_vocab: usize,
    fed: Arc<Mutex<Vec<u32>>>,
}

struct SetMatcher {
    set: Vec<u32>,
    len: usize,
    end: u32,
    n_vocab: usize,
    fed: Arc<Mutex<Vec<u32>>>,
    n: usize,
}

impl ConstraintSource for SetSource {
    fn start(&self) -> Result<Box<dyn TokenConstraint>, String> {
        Ok(Box::new(SetMatcher {
            set: self.set.clone(),
            len: self.len,
            end: self.end,
            n_vocab: self.n_vocab,
            fed: self.fed.clone(),
            n: 0,
        }))
    }
}

impl TokenConstraint for SetMatcher {
    fn mask(&mut self, out: &mut Vec<u32>) -> Result<(), String> {
        out.clear();
        out.resize(self.n_vocab.div_ceil(32), 0);
        let toks = if self.n < self.len {
            self.set.clone()
        } else if self.end == NO_END {
            vec![]
        } else {
            vec![self.end]
        };
        for t in toks {
            out[t as usize / 32] |= 1 << (t % 32);
        }
        Ok(())
    }
    fn consume(&mut self, token: u32) -> Result<(), String> {
        if self.n >= self.len || !self.set.contains(&token) {
            return Err(format!("token {token} was not allowed"));
        }
        self.n += 1;
        self.fed.lock().expect("lock").push(token);
        Ok(())
    }
    fn finished(&self) -> bool {
        self.end == NO_END && self.n >= self.len
    }
}

/// A constraint that ends by itself (no end token is allowed).
const NO_END: u32 = u32::MAX;

fn model() -> Arc<Model> {
    Arc::new(Model::load(&fixture("tiny-s-Q8_0.gguf")).expect("model"))
}

fn source(m: &Model, seed: u32, len: usize, end: u32) -> (Arc<SetSource>, Arc<Mutex<Vec<u32>>>) {
    let n = m.config().vocab_size;
    // 40 scattered ids, none the end token.
    let set: Vec<u32> = (0..40u32)
        .map(|k| (k * 7919 + seed * 104729 + 13) % n as u32)
        .filter(|&t| t != end)
        .collect();
    let fed = Arc::new(Mutex::new(Vec::new()));
    let src = SetSource {
        set,
        len,
        end,
        n_vocab: n,
        fed: fed.clone(),
    };
    (Arc::new(src), fed)
}

fn request(prompt: Vec<u32>, c: Option<Arc<SetSource>>, sampling: SamplingParams) -> Request {
    Request {
        prompt,
        max_tokens: 30,
        sampling,
        logprobs: None,
        stop_at_eog: false,
        lookup: None,
        draft_source: DraftSource::Lookup,
        boundaries: Vec::new(),
        constraint: c.map(|c| c as Arc<dyn ConstraintSource>),
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
}

fn cfg(parallel: usize) -> SchedulerConfig {
    SchedulerConfig {
        parallel,
        state_cache_bytes: 0,
        ..Default::default()
    }
}

/// The fixture's model has 1,024 outputs; any id serves as the end token.
const END: u32 = 1000;

#[test]
fn greedy_constrained_equals_masked_argmax_of_the_model() {
    let m = model();
    let prompt: Vec<u32> = vec![40, 11, 187, 0, 576, 397];
    let (src, fed) = source(&m, 1, 8, END);
    let c = Collect::default();
    let mut s = Scheduler::new(m.clone(), vec![END], cfg(1));
    run_all(
        &mut s,
        vec![(
            request(prompt.clone(), Some(src.clone()), SamplingParams::default()),
            c.clone(),
        )],
    );
    let got = c.tokens();
    // The end token is allowed only after 8 tokens, and then it ends the
    // request although `stop_at_eog` is off.
    assert_eq!(c.reason(), FinishReason::EndOfGeneration(END));
    assert_eq!(got.len(), 8);
    assert_eq!(*fed.lock().expect("lock"), got);
    // Second path: the model's logits, masked by hand, argmax.
    let mut state = m.new_state();
    let mut logits = m.forward(&mut state, &prompt, false).expect("forward");
    let mut want = Vec::new();
    for _ in 0..8 {
        let t = *src
            .set
            .iter()
            .max_by(|&&a, &&b| {
                logits[a as usize]
                    .total_cmp(&logits[b as usize])
                    .then(b.cmp(&a))
            })
            .expect("set");
        want.push(t);
        logits = m.forward(&mut state, &[t], false).expect("forward");
    }
    assert_eq!(got, want);
}

#[test]
fn each_sequence_follows_its_own_constraint_with_drafts() {
    let m = model();
    let sampling = SamplingParams {
        temperature: 1.0,
        top_k: 0,
        top_p: 1.0,
        min_p: 0.0,
        seed: Some(5),
    };
    let mut s = Scheduler::new(m.clone(), vec![END], cfg(3));
    let (a, fed_a) = source(&m, 2, 12, END);
    let (b, fed_b) = source(&m, 3, 5, END);
    let drafts = |mut r: Request, seed: u64| {
        r.lookup = Some(LookupParams::default());
        r.draft_source = DraftSource::Random {
            vocab: m.config().vocab_size as u32,
            seed,
        };
        r
    };
    let (ca, cb, cu) = (Collect::default(), Collect::default(), Collect::default());
    let p: Vec<u32> = vec![40, 11, 187, 0];
    run_all(
        &mut s,
        vec![
            (
                drafts(request(p.clone(), Some(a.clone()), sampling.clone()), 1),
                ca.clone(),
            ),
            (
                drafts(request(p.clone(), Some(b.clone()), sampling.clone()), 2),
                cb.clone(),
            ),
            (
                drafts(request(p.clone(), None, sampling.clone()), 3),
                cu.clone(),
            ),
        ],
    );
    for (c, src, fed, len) in [(&ca, &a, &fed_a, 12), (&cb, &b, &fed_b, 5)] {
        let toks = c.tokens();
        assert_eq!(toks.len(), len);
        assert!(toks.iter().all(|t| src.set.contains(t)), "{toks:?}");
        assert_eq!(*fed.lock().expect("lock"), toks);
        assert_eq!(c.reason(), FinishReason::EndOfGeneration(END));
    }
    // Every request drafted (random drafts every step); the unconstrained
    // one ran to its limit.
    assert_eq!(cu.tokens().len(), 30);
    let st = s.stats().clone();
    assert!(st.spec_rounds > 0, "{st:?}");
    assert!(
        st.mask_seconds > 0.0 && st.mask_wait_seconds <= st.decode_seconds,
        "{st:?}"
    );
    let mut alone = Scheduler::new(m.clone(), vec![END], cfg(1));
    let cu2 = Collect::default();
    run_all(
        &mut alone,
        vec![(
            drafts(request(p.clone(), None, sampling.clone()), 3),
            cu2.clone(),
        )],
    );
    // The constrained sequences ran verify passes of their own too.
    assert!(st.spec_rounds > alone.stats().spec_rounds, "{st:?}");
    assert_eq!(cu2.tokens(), cu.tokens());

    // A mask that allows nothing is an error, not a stray token.
    let empty = Arc::new(SetSource {
        set: vec![],
        len: 3,
        end: END,
        n_vocab: m.config().vocab_size,
        fed: Arc::new(Mutex::new(Vec::new())),
    });
    let c = Collect::default();
    run_all(
        &mut s,
        vec![(
            request(p, Some(empty), SamplingParams::default()),
            c.clone(),
        )],
    );
    let ev = c.events.lock().expect("lock");
    assert!(
        matches!(ev.last(), Some(Event::Error(m)) if m.contains("allows no token")),
        "{ev:?}"
    );
}

#[test]
fn a_complete_constraint_ends_the_request_without_an_end_token() {
    let m = model();
    let (src, fed) = source(&m, 4, 6, NO_END);
    let c = Collect::default();
    let mut s = Scheduler::new(m.clone(), vec![END], cfg(1));
    run_all(
        &mut s,
        vec![(
            request(vec![40, 11], Some(src.clone()), SamplingParams::default()),
            c.clone(),
        )],
    );
    assert_eq!(c.reason(), FinishReason::ConstraintComplete);
    assert_eq!(c.tokens().len(), 6);
    assert_eq!(*fed.lock().expect("lock"), c.tokens());
}

/// Greedy constrained decoding with drafts equals it without: drafts that
/// the mask forbids are rejected, drafts it allows are judged on the masked
/// verify rows, and the matcher sees exactly the emitted tokens.
#[test]
fn drafts_change_no_constrained_output() {
    let m = model();
    let prompt: Vec<u32> = vec![40, 11, 187, 0, 576, 397];
    let run = |draft: Option<DraftSource>| {
        let (src, fed) = source(&m, 4, 14, END);
        let c = Collect::default();
        let mut s = Scheduler::new(m.clone(), vec![END], cfg(1));
        let mut r = request(prompt.clone(), Some(src), SamplingParams::default());
        if let Some(d) = draft {
            r.lookup = Some(LookupParams::default());
            r.draft_source = d;
        }
        run_all(&mut s, vec![(r, c.clone())]);
        assert_eq!(c.reason(), FinishReason::EndOfGeneration(END));
        let toks = c.tokens();
        assert_eq!(*fed.lock().expect("lock"), toks);
        (toks, s.stats().clone())
    };
    let (want, plain) = run(None);
    assert_eq!(want.len(), 14);
    assert_eq!(plain.spec_rounds, 0);
    // Drafts from the right answer: accepted.
    let (got, st) = run(Some(DraftSource::Replay(want.clone())));
    assert_eq!(got, want);
    assert!(st.spec_accepted >= 10, "{st:?}");
    // The right answer with a token the mask forbids (the end token, too
    // early) and a wrong but allowed one mixed in: rejected there, and the
    // output is the same.
    let mut wrong = want.clone();
    wrong[3] = END;
    let allowed_other = *source(&m, 4, 14, END)
        .0
        .set
        .iter()
        .find(|&&t| t != want[7])
        .expect("set");
    wrong[7] = allowed_other;
    let (got, st) = run(Some(DraftSource::Replay(wrong)));
    assert_eq!(got, want);
    assert!(
        st.spec_rounds > 0 && st.spec_accepted < st.spec_drafted,
        "{st:?}"
    );
    // Random drafts (almost never allowed): the same output.
    let (got, st) = run(Some(DraftSource::Random {
        vocab: m.config().vocab_size as u32,
        seed: 9,
    }));
    assert_eq!(got, want);
    assert!(st.spec_rounds > 0, "{st:?}");
}
