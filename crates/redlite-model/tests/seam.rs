//! The execution seam: a model with a device attached sends every pass to
//! the device and makes device states and trails; a state or trail of the
//! other form is refused with an error, never run.
//!
//! The device here is a host stand-in that runs a second, CPU-only copy of
//! the same fixture behind [`DeviceForward`] (with the trait's default
//! verify, which saves the recurrent states after each token), so the
//! device path's results must equal the CPU model's bit for bit.

mod common;
use common::*;

use std::any::Any;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use redlite_model::{DeviceForward, DeviceState, Model, ModelError, State, Trail};

/// A sequence of the stand-in device: a CPU state of the inner model.
#[derive(Clone, Debug)]
struct HostSeq(State);

impl DeviceState for HostSeq {
    fn pos(&self) -> usize {
        self.0.pos()
    }
    fn fork(&self) -> Box<dyn DeviceState> {
        Box::new(self.clone())
    }
    fn bytes(&self) -> usize {
        self.0.bytes()
    }
    fn save_recurrent(&self) -> Box<dyn Any + Send + Sync> {
        Box::new(self.0.snapshot())
    }
    fn restore_recurrent(
        &mut self,
        saved: &(dyn Any + Send + Sync),
        pos: usize,
    ) -> Result<(), ModelError> {
        let s = saved
            .downcast_ref::<State>()
            .ok_or_else(|| ModelError::Input("not a host save".into()))?;
        if s.pos() != pos {
            return Err(ModelError::Input(format!(
                "saved at {} but asked for {pos}",
                s.pos()
            )));
        }
        self.0 = s.snapshot();
        Ok(())
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

/// The stand-in device: the inner model's CPU pass, counting the passes it
/// runs (so a test sees that the device path was taken).
struct HostDevice {
    inner: Model,
    passes: AtomicUsize,
}

impl DeviceForward for HostDevice {
    fn name(&self) -> String {
        "host stand-in".into()
    }
    fn new_state(&self) -> Box<dyn DeviceState> {
        Box::new(HostSeq(self.inner.new_state()))
    }
    fn forward(
        &self,
        state: &mut dyn DeviceState,
        tokens: &[u32],
        all_logits: bool,
    ) -> Result<Vec<f32>, ModelError> {
        self.passes.fetch_add(1, Ordering::Relaxed);
        let s = state
            .as_any_mut()
            .downcast_mut::<HostSeq>()
            .ok_or_else(|| ModelError::Input("not a host sequence".into()))?;
        self.inner.forward(&mut s.0, tokens, all_logits)
    }
    fn fill_random(&self, pos: usize, seed: u64) -> Result<Box<dyn DeviceState>, ModelError> {
        Ok(Box::new(HostSeq(self.inner.random_state(pos, seed)?)))
    }
}

const FILE: &str = "tiny-s-CF2mix.gguf";

/// The CPU model and a second copy with the stand-in device attached.
fn pair() -> (Model, Model, Arc<HostDevice>) {
    let cpu = load(FILE);
    let dev = Arc::new(HostDevice {
        inner: load(FILE),
        passes: AtomicUsize::new(0),
    });
    let mut on_dev = load(FILE);
    on_dev.attach_device(dev.clone());
    (cpu, on_dev, dev)
}

fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

#[test]
fn a_device_model_runs_every_pass_on_the_device() {
    let (cpu, on_dev, dev) = pair();
    let p = prompts();
    let prompt = prompt_ids(&p, "code");
    let vocab = cpu.config().vocab_size;
    assert_eq!(on_dev.device_name(), "host stand-in");
    assert!(cpu.device().is_none() && on_dev.device().is_some());

    let mut c = cpu.new_state();
    let mut d = on_dev.new_state();
    assert!(matches!(c, State::Cpu(_)) && !c.is_on_device());
    assert!(matches!(d, State::Device(_)) && d.is_on_device());
    let want = cpu.forward(&mut c, &prompt, true).expect("cpu prefill");
    let got = on_dev
        .forward(&mut d, &prompt, true)
        .expect("device prefill");
    assert!(same_bits(&got, &want), "prefill logits differ");
    assert_eq!(dev.passes.load(Ordering::Relaxed), 1);
    assert_eq!((d.pos(), d.bytes()), (c.pos(), c.bytes()));

    // A fork of a device state is a device state that evolves on its own.
    let mut d2 = d.snapshot();
    let mut c2 = c.snapshot();
    assert!(d2.is_on_device());
    let a = on_dev.forward(&mut d2, &[7], false).expect("fork decode");
    let b = cpu.forward(&mut c2, &[7], false).expect("fork decode");
    assert!(same_bits(&a, &b), "fork logits differ");
    assert_eq!((d.pos(), d2.pos()), (prompt.len(), prompt.len() + 1));

    // A batched step: each row its sequence's own decode step.
    let want = cpu
        .forward_batch(&mut [&mut c, &mut c2], &[3, 9])
        .expect("cpu batch");
    let got = on_dev
        .forward_batch(&mut [&mut d, &mut d2], &[3, 9])
        .expect("device batch");
    assert_eq!(got.len(), 2 * vocab);
    assert!(same_bits(&got, &want), "batched logits differ");

    // A random state at depth is made by the device.
    let r = on_dev.random_state(40, 5).expect("random state");
    assert!(r.is_on_device());
    assert_eq!(r.pos(), 40);
    assert_eq!(r.bytes(), cpu.random_state(40, 5).expect("cpu").bytes());
}

#[test]
fn device_verify_rolls_back_like_decoding() {
    let (cpu, on_dev, _) = pair();
    let p = prompts();
    let prompt = prompt_ids(&p, "hello");
    let draft: Vec<u32> = prompt_ids(&p, "prose")[..5].to_vec();
    let vocab = cpu.config().vocab_size;

    let mut plain = cpu.new_state();
    cpu.forward(&mut plain, &prompt, false).expect("prefill");
    let mut plain_logits = Vec::new();
    let mut plain_states = Vec::new();
    for &t in &draft {
        plain_logits.extend(cpu.forward(&mut plain, &[t], false).expect("decode"));
        plain_states.push(plain.snapshot());
    }

    let mut base = on_dev.new_state();
    on_dev.forward(&mut base, &prompt, false).expect("prefill");
    let mut st = base.snapshot();
    let (logits, trail) = on_dev.forward_verify(&mut st, &draft).expect("verify");
    assert!(matches!(trail, Trail::Device(_)));
    assert_eq!((trail.start(), trail.len()), (prompt.len(), draft.len()));
    assert!(same_bits(&logits, &plain_logits), "verify != decoding");
    for keep in 1..=draft.len() {
        let mut s = st.snapshot();
        s.rollback(&trail, keep).expect("rollback");
        assert_eq!(s.pos(), prompt.len() + keep);
        let next = on_dev.forward(&mut s, &[5], false).expect("after rollback");
        let mut r = plain_states[keep - 1].snapshot();
        let want = cpu.forward(&mut r, &[5], false).expect("reference");
        assert_eq!(next.len(), vocab);
        assert!(same_bits(&next, &want), "rolled back to {keep}: differs");
    }
    assert!(st.snapshot().rollback(&trail, 0).is_err());
    assert!(st.snapshot().rollback(&trail, draft.len() + 1).is_err());
    assert!(base.rollback(&trail, 1).is_err());
}

#[test]
fn states_and_trails_of_the_other_form_are_refused() {
    let (cpu, on_dev, dev) = pair();
    let toks = [1u32, 2, 3];
    let msg = |r: Result<Vec<f32>, ModelError>| match r {
        Ok(_) => panic!("a state of the other form was run"),
        Err(e) => e.to_string(),
    };

    // A CPU state on the device model, a device state on the CPU model.
    let mut c = cpu.new_state();
    let mut d = on_dev.new_state();
    let e = msg(on_dev.forward(&mut c, &toks, false));
    assert!(e.contains("made for the CPU"), "{e}");
    let e = msg(cpu.forward(&mut d, &toks, false));
    assert!(e.contains("lives on a device"), "{e}");
    let e = msg(on_dev.forward_batch(&mut [&mut c], &[1]));
    assert!(e.contains("made for the CPU"), "{e}");
    let e = msg(cpu.forward_batch(&mut [&mut d], &[1]));
    assert!(e.contains("lives on a device"), "{e}");
    assert!(on_dev.forward_verify(&mut c, &toks).is_err());
    assert!(cpu.forward_verify(&mut d, &toks).is_err());
    assert_eq!((c.pos(), d.pos()), (0, 0));
    assert_eq!(dev.passes.load(Ordering::Relaxed), 0);

    // Intermediate tracing is CPU-only; token ids are checked before either
    // side runs.
    struct Sink;
    impl redlite_model::Trace for Sink {
        fn tensor(&mut self, _: &str, _: usize, _: usize, _: &[f32]) {}
    }
    let e = msg(on_dev.forward_traced(&mut d, &toks, false, Some(&mut Sink)));
    assert!(e.contains("cannot be traced"), "{e}");
    let vocab = cpu.config().vocab_size as u32;
    for m in [&cpu, &on_dev] {
        let mut s = m.new_state();
        let e = msg(m.forward(&mut s, &[1, vocab], false));
        assert!(e.contains("outside the vocabulary"), "{e}");
        let e = msg(m.forward_batch(&mut [&mut s], &[vocab]));
        assert!(e.contains("outside the vocabulary"), "{e}");
        assert!(m.forward_verify(&mut s, &[vocab]).is_err());
        assert!(m.forward_verify(&mut s, &[]).is_err());
    }
    assert_eq!(dev.passes.load(Ordering::Relaxed), 0);

    // Trails: a CPU trail cannot roll a device state back, nor the reverse,
    // even where the spans fit.
    on_dev
        .forward(&mut d, &toks, false)
        .expect("device prefill");
    cpu.forward(&mut c, &toks, false).expect("cpu prefill");
    let (_, dt) = on_dev
        .forward_verify(&mut d, &[4, 5])
        .expect("device verify");
    let (_, ct) = cpu.forward_verify(&mut c, &[4, 5]).expect("cpu verify");
    assert!(matches!(ct, Trail::Cpu(_)));
    let e = d.rollback(&ct, 1).expect_err("CPU trail on a device state");
    assert!(
        e.to_string().contains("not made on this state's device"),
        "{e}"
    );
    let e = c.rollback(&dt, 1).expect_err("device trail on a CPU state");
    assert!(e.to_string().contains("made on a device"), "{e}");
    // Each still takes its own.
    d.rollback(&dt, 1).expect("device rollback");
    c.rollback(&ct, 1).expect("cpu rollback");
    assert_eq!((c.pos(), d.pos()), (4, 4));
}

/// A device keeps an f32 KV cache for now: a narrower type is refused by
/// name, f32 is accepted.
#[test]
fn a_device_model_refuses_narrow_kv_types() {
    use redlite_model::{KvType, KvTypes};
    let (mut cpu, mut on_dev, _) = pair();
    let q8 = KvTypes {
        k: KvType::Q8_0,
        v: KvType::F16,
    };
    let e = on_dev.set_kv_types(q8).expect_err("a device with q8_0");
    assert!(e.to_string().contains("q8_0/f16"), "{e}");
    on_dev.set_kv_types(KvTypes::default()).expect("f32");
    cpu.set_kv_types(q8).expect("the CPU takes it");
    assert_eq!(cpu.kv_types(), q8);
}
