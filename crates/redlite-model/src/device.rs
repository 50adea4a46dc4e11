//! The boundary a GPU forward pass lives behind.
//!
//! The CPU forward ([`crate::Model::forward`] on a [`redlite_backend::Backend`])
//! is written op by op against host slices, which is what the reference
//! needs. A GPU cannot work that way without copying every activation across
//! the bus, so a device implements the whole forward pass behind
//! [`DeviceForward`]: it owns the weights it uploaded, its activations, and
//! the per-sequence state ([`DeviceState`]: KV cache, conv windows and
//! recurrent states in device memory). The host sees token ids going in and
//! logits coming out, nothing else.
//!
//! [`crate::Model`] dispatches to an attached device once per call (the
//! functions at the end of this module are the device side of that seam),
//! and [`crate::State::Device`] carries the device state, so the engine and
//! the server (snapshots, forks, speculative rollback) work unchanged: a
//! snapshot is a device-side copy, a rollback takes a [`crate::Trail::Device`].

use std::any::Any;

use crate::state::{DeviceTrail, State, Trail};
use crate::ModelError;

/// A sequence's state held by a device (KV cache, conv windows, recurrent
/// states, position). Every copy it makes stays on the device.
pub trait DeviceState: Send + Sync + std::fmt::Debug {
    /// Tokens consumed so far.
    fn pos(&self) -> usize;
    /// An independent copy (a snapshot to restore, or a fork).
    fn fork(&self) -> Box<dyn DeviceState>;
    /// Device bytes held (recurrent states and the KV cache up to `pos`).
    fn bytes(&self) -> usize;
    /// A copy of the recurrent (conv and DeltaNet) states, to roll back to.
    fn save_recurrent(&self) -> Box<dyn Any + Send + Sync>;
    /// Restore recurrent states saved by [`DeviceState::save_recurrent`] of
    /// this sequence, and set the position to `pos` (the KV cache beyond it
    /// is dropped).
    fn restore_recurrent(
        &mut self,
        saved: &(dyn Any + Send + Sync),
        pos: usize,
    ) -> Result<(), ModelError>;
    /// Roll back to `pos` = the trail's start + `keep` with a trail made by
    /// [`DeviceForward::verify`] on this sequence: the recurrent states
    /// after its `keep`-th token, and the KV cache cut at `pos`. The default
    /// takes the per-token saves of the default `verify` ([`StepTrail`]).
    fn rollback(
        &mut self,
        trail: &(dyn Any + Send + Sync),
        keep: usize,
        pos: usize,
    ) -> Result<(), ModelError> {
        let steps = trail
            .downcast_ref::<StepTrail>()
            .ok_or_else(|| ModelError::Input("the trail was not made on this device".into()))?;
        let saved = keep
            .checked_sub(1)
            .and_then(|i| steps.0.get(i))
            .ok_or_else(|| {
                ModelError::Input(format!(
                    "cannot keep {keep} of {} verified tokens",
                    steps.0.len()
                ))
            })?;
        self.restore_recurrent(saved.as_ref(), pos)
    }
    fn as_any(&self) -> &dyn Any;
    fn as_any_mut(&mut self) -> &mut dyn Any;
}

/// The trail of the default [`DeviceForward::verify`]: the recurrent states
/// saved after each token.
pub struct StepTrail(pub Vec<Box<dyn Any + Send + Sync>>);

/// A verify pass's logits (`[n, vocab]`) and the trail to roll back with.
pub type Verified = (Vec<f32>, Box<dyn Any + Send + Sync>);

/// A forward pass that runs entirely on a device.
pub trait DeviceForward: Send + Sync {
    /// The device, in words (e.g. `cuda:0 (NVIDIA H200, sm_90)`).
    fn name(&self) -> String;
    /// A fresh state (position 0); device memory is taken at first use.
    fn new_state(&self) -> Box<dyn DeviceState>;
    /// Feed `tokens` (one sequence) at the state's position and advance it;
    /// returns `[T, vocab]` logits if `all_logits`, else the last `[vocab]`.
    fn forward(
        &self,
        state: &mut dyn DeviceState,
        tokens: &[u32],
        all_logits: bool,
    ) -> Result<Vec<f32>, ModelError>;
    /// Feed `tokens` computing each exactly as a decode step would (the
    /// logits equal plain decoding's), returning all `[n, vocab]` logits and
    /// a trail that [`DeviceState::rollback`] takes back to any of them. The
    /// default runs one decode step per token and saves the recurrent
    /// states after each.
    fn verify(&self, state: &mut dyn DeviceState, tokens: &[u32]) -> Result<Verified, ModelError> {
        let mut logits = Vec::new();
        let mut saved = Vec::with_capacity(tokens.len());
        for &tok in tokens {
            logits.extend(self.forward(state, &[tok], false)?);
            saved.push(state.save_recurrent());
        }
        Ok((logits, Box::new(StepTrail(saved))))
    }
    /// One decode step for each of `states` (distinct sequences, any
    /// positions): `tokens[i]` is fed to `states[i]`, and row `i` of the
    /// `[n, vocab]` result is its logits, equal to what
    /// [`DeviceForward::forward`] gives that sequence alone. A device that
    /// batches reads each weight once for all of them; the default runs the
    /// sequences one after another ([`forward_one_by_one`]).
    fn forward_batch(
        &self,
        states: &mut [&mut dyn DeviceState],
        tokens: &[u32],
    ) -> Result<Vec<f32>, ModelError> {
        forward_one_by_one(self, states, tokens)
    }
    /// A state at position `pos` filled with random data of the magnitudes
    /// real decoding builds (as [`crate::CpuState::fill_random`]), for timing
    /// decode at depth.
    fn fill_random(&self, pos: usize, seed: u64) -> Result<Box<dyn DeviceState>, ModelError>;
    /// Most prompt tokens one forward pass takes (longer inputs go in
    /// chunks of this size): prompts fed in pieces of this size prefill
    /// fastest.
    fn pass_tokens(&self) -> usize {
        512
    }
    /// GPU time per kernel since the last call, when the device profiles
    /// (`(kernel, milliseconds, launches)`, largest first); empty otherwise.
    fn profile(&self) -> Vec<(String, f64, u64)> {
        Vec::new()
    }
    /// The expert prefetch's counters since the last reset (`reset`: zero
    /// them after reading), where the device prefetches experts held
    /// outside its memory; `None` otherwise.
    fn prefetch_stats(&self, _reset: bool) -> Option<PrefetchStats> {
        None
    }
}

/// How a device's expert prefetch did: each decode step predicts every
/// layer's experts ahead (layer L's router on layer L - 1's input) and
/// copies the predicted ones held outside device memory in beside the
/// computation; the others are read where they lie when used.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PrefetchStats {
    /// Experts chosen by the routers (tokens × layers × experts per token).
    pub chosen: u64,
    /// Of those, predicted.
    pub predicted: u64,
    /// Chosen experts held outside device memory.
    pub outside: u64,
    /// Of those, predicted (served from the copy made ahead).
    pub outside_predicted: u64,
    /// Experts copied in ahead of use.
    pub copied: u64,
    /// Bytes of those copies left undone: the copy of a predicted expert
    /// stops once its layer's router has chosen without it.
    pub stopped_bytes: u64,
    /// Chosen experts held outside device memory that were not copied
    /// ahead but copied in after the router (instead of read by the
    /// products); counted among `read_on_use`'s.
    pub late: u64,
    /// Bytes of one expert (gate, up and down).
    pub expert_bytes: u64,
}

impl PrefetchStats {
    /// Bytes moved by the copies made ahead (those begun, less what was
    /// left undone when a copy stopped).
    pub fn bytes_copied(&self) -> u64 {
        (self.copied * self.expert_bytes).saturating_sub(self.stopped_bytes)
    }
    /// Share of chosen experts that were predicted.
    pub fn accuracy(&self) -> f64 {
        self.predicted as f64 / self.chosen.max(1) as f64
    }
    /// Chosen experts held outside device memory that were not copied in
    /// ahead (read over the bus when used).
    pub fn read_on_use(&self) -> u64 {
        self.outside.saturating_sub(self.outside_predicted)
    }
    /// Share of the chosen experts held outside device memory that were
    /// copied in ahead (the rest were read over the bus when used).
    pub fn outside_hit_rate(&self) -> f64 {
        self.outside_predicted as f64 / self.outside.max(1) as f64
    }
}

/// [`crate::Model::forward`] on a device (tokens already checked).
pub(crate) fn forward(
    dev: &dyn DeviceForward,
    state: &mut State,
    tokens: &[u32],
    all_logits: bool,
) -> Result<Vec<f32>, ModelError> {
    dev.forward(state.device_mut()?, tokens, all_logits)
}

/// [`DeviceForward::forward_batch`] the plain way: one sequence after
/// another, so each row is its sequence's own decode step.
pub fn forward_one_by_one<D: DeviceForward + ?Sized>(
    dev: &D,
    states: &mut [&mut dyn DeviceState],
    tokens: &[u32],
) -> Result<Vec<f32>, ModelError> {
    if tokens.len() != states.len() {
        return Err(ModelError::Input(format!(
            "batched decode needs one token per sequence ({} tokens, {} sequences)",
            tokens.len(),
            states.len()
        )));
    }
    let mut out = Vec::new();
    for (st, &tok) in states.iter_mut().zip(tokens) {
        let row = dev.forward(&mut **st, &[tok], false)?;
        if out.is_empty() {
            out.reserve_exact(row.len() * tokens.len());
        }
        out.extend(row);
    }
    Ok(out)
}

/// [`crate::Model::forward_batch`] on a device: the device's batched
/// decode over the sequences' device states.
pub(crate) fn forward_batch(
    dev: &dyn DeviceForward,
    states: &mut [&mut State],
    tokens: &[u32],
) -> Result<Vec<f32>, ModelError> {
    let mut devs = states
        .iter_mut()
        .map(|s| s.device_mut())
        .collect::<Result<Vec<&mut dyn DeviceState>, _>>()?;
    dev.forward_batch(&mut devs, tokens)
}

/// [`crate::Model::forward_verify`] on a device: the device's verify pass,
/// its record wrapped in a [`Trail::Device`] with the span it covers.
pub(crate) fn verify(
    dev: &dyn DeviceForward,
    state: &mut State,
    tokens: &[u32],
) -> Result<(Vec<f32>, Trail), ModelError> {
    let st = state.device_mut()?;
    let pos0 = st.pos();
    let (logits, saved) = dev.verify(st, tokens)?;
    let trail = DeviceTrail {
        pos0,
        n: tokens.len(),
        saved,
    };
    Ok((logits, Trail::Device(trail)))
}
