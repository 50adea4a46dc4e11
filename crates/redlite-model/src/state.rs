//! The state of one sequence ([`State`]) and the trail a speculative verify
//! pass leaves to roll it back with ([`Trail`]), each in two forms kept
//! apart: on the host for the CPU forward pass ([`CpuState`], [`CpuTrail`])
//! and held by a device ([`crate::DeviceState`], [`DeviceTrail`]).
//!
//! A model makes states of its own form ([`crate::Model::new_state`]) and
//! refuses the other with an error, so neither form carries fields the
//! other needs. The forward pass (`qwen3next.rs`) reads and writes a
//! [`CpuState`]'s layers and records into a [`CpuTrail`]; what a state does
//! on its own (fork, size, the random filler for timing decode at depth,
//! rollback by replaying the delta rule) lives here. A host state's KV
//! caches are tables of shared blocks ([`crate::KvCache`]): a fork shares
//! them all, a snapshot all but the partly filled last one, and either side
//! copies a shared block before writing into it; the conv and recurrent
//! states are copied.

use std::any::Any;
use std::sync::Arc;

use redlite_backend::{Backend, DeltaInputs, KvTypes};

use crate::config::Config;
use crate::kv::KvCache;
use crate::{DeviceState, ModelError};

/// The state of one sequence: position, DeltaNet conv/recurrent states and
/// the attention KV cache, on the host ([`State::Cpu`]) for a model running
/// on the CPU, or in device memory ([`State::Device`]) for a model running
/// on a device. Cloning forks the sequence (a device copy for a device
/// state).
#[derive(Debug)]
pub enum State {
    /// Host memory, for the CPU forward pass.
    Cpu(CpuState),
    /// Held by the device the model runs on.
    Device(Box<dyn DeviceState>),
}

impl Clone for State {
    fn clone(&self) -> State {
        match self {
            State::Cpu(s) => State::Cpu(s.clone()),
            State::Device(d) => State::Device(d.fork()),
        }
    }
}

impl State {
    /// Whether the state lives in device memory.
    pub fn is_on_device(&self) -> bool {
        matches!(self, State::Device(_))
    }

    /// Tokens consumed so far (the position of the next token).
    pub fn pos(&self) -> usize {
        match self {
            State::Cpu(s) => s.pos,
            State::Device(d) => d.pos(),
        }
    }

    /// A copy of this state that evolves independently: a snapshot to
    /// restore later (resuming from it gives the same logits as the original
    /// sequence), or a fork of the sequence. On the host it shares the KV
    /// cache's full blocks and copies the partially filled last block at
    /// its size (a clone shares that one too, until either side writes).
    pub fn snapshot(&self) -> State {
        match self {
            State::Cpu(s) => State::Cpu(s.snapshot()),
            State::Device(d) => State::Device(d.fork()),
        }
    }

    /// The state's memory in two parts: bytes of its own (conv and
    /// recurrent states; the whole of a device state) and the KV blocks it
    /// refers to as (block id, bytes), which other states may share. The
    /// parts add up to [`State::bytes`].
    pub fn parts(&self) -> (usize, Vec<(u64, usize)>) {
        match self {
            State::Cpu(s) => s.parts(),
            State::Device(d) => (d.bytes(), Vec::new()),
        }
    }

    /// A host state at depth `pos` holding random data of realistic
    /// magnitude ([`CpuState::fill_random`]).
    pub fn fill_random(c: &Config, pos: usize, seed: u64) -> State {
        State::Cpu(CpuState::fill_random(c, pos, seed))
    }

    /// [`State::fill_random`] with KV caches stored as `kv`.
    pub fn fill_random_kv(c: &Config, kv: KvTypes, pos: usize, seed: u64) -> State {
        State::Cpu(CpuState::fill_random_kv(c, kv, pos, seed))
    }

    /// Root mean square of the state's parts: (conv windows, recurrent
    /// states, keys, values); 0 for an empty part. A device state's parts
    /// are not read back to the host: all four are 0.
    pub fn rms(&self) -> [f32; 4] {
        match self {
            State::Cpu(s) => s.rms(),
            State::Device(_) => [0.0; 4],
        }
    }

    /// Bytes held: conv and recurrent states plus the KV cache up to `pos`.
    pub fn bytes(&self) -> usize {
        match self {
            State::Cpu(s) => s.bytes(),
            State::Device(d) => d.bytes(),
        }
    }

    /// Keep only the first `keep` tokens of the forward that produced `trail`
    /// (`1 ..= trail.len()`): KV caches are truncated and the DeltaNet states
    /// set to what they were after token `keep`. The result is the state that
    /// feeding just those tokens would have produced, bit for bit.
    pub fn rollback(&mut self, trail: &Trail, keep: usize) -> Result<(), ModelError> {
        let (pos0, n) = (trail.start(), trail.len());
        if self.pos() != pos0 + n || keep == 0 || keep > n {
            return Err(ModelError::Input(format!(
                "rollback to {keep} of {n} verified tokens from position {pos0} does not fit a \
                 state at {}",
                self.pos()
            )));
        }
        match (self, trail) {
            (State::Cpu(s), Trail::Cpu(t)) => s.rollback(t, keep),
            (State::Device(d), Trail::Device(t)) => d.rollback(t.saved.as_ref(), keep, pos0 + keep),
            (State::Device(_), Trail::Cpu(_)) => Err(ModelError::Input(
                "the trail was not made on this state's device".into(),
            )),
            (State::Cpu(_), Trail::Device(_)) => Err(ModelError::Input(
                "the trail was made on a device, not on the CPU".into(),
            )),
        }
    }

    /// The host form, for the CPU forward pass.
    pub(crate) fn cpu_mut(&mut self) -> Result<&mut CpuState, ModelError> {
        match self {
            State::Cpu(s) => Ok(s),
            State::Device(_) => Err(ModelError::Input(
                "this state lives on a device but the model runs on the CPU".into(),
            )),
        }
    }

    /// The device form, for a model running on a device.
    pub(crate) fn device_mut(&mut self) -> Result<&mut dyn DeviceState, ModelError> {
        match self {
            State::Device(d) => Ok(d.as_mut()),
            State::Cpu(_) => Err(ModelError::Input(
                "this state was made for the CPU but the model runs on a device".into(),
            )),
        }
    }
}

/// Per-layer host state of one sequence.
#[derive(Clone, Debug)]
pub(crate) enum LayerState {
    /// Conv state `[conv_dim, K−1]` and recurrent state `[H_v, d_v, d_k]`.
    DeltaNet { conv: Vec<f32>, ssm: Vec<f32> },
    /// KV cache `[pos, n_head_kv, head_dim]` (post-norm, post-RoPE keys),
    /// in shared blocks.
    Attention(KvCache),
}

/// A sequence's state in host memory (f32): position, per DeltaNet layer the
/// conv window and recurrent state, per attention layer the KV cache.
#[derive(Clone, Debug)]
pub struct CpuState {
    pub(crate) pos: usize,
    /// One entry per layer, of the layer's kind.
    pub(crate) layers: Vec<LayerState>,
}

impl CpuState {
    /// Position 0: zero conv and recurrent states, empty f32 KV caches.
    pub fn new(c: &Config) -> CpuState {
        CpuState::with_kv_types(c, KvTypes::default())
    }

    /// [`CpuState::new`] with KV caches stored as `kv` (checked by
    /// [`crate::Model::set_kv_types`]).
    pub fn with_kv_types(c: &Config, kv: KvTypes) -> CpuState {
        let layers = c
            .recurrent
            .iter()
            .map(|&rec| {
                if rec {
                    LayerState::DeltaNet {
                        conv: vec![0.0; c.conv_dim() * (c.conv_kernel - 1)],
                        ssm: vec![0.0; c.ssm_h_v * c.ssm_d_v * c.ssm_d_k],
                    }
                } else {
                    LayerState::Attention(KvCache::with_types(c.n_head_kv * c.head_dim, kv))
                }
            })
            .collect();
        CpuState { pos: 0, layers }
    }

    /// Tokens consumed so far (the position of the next token).
    pub fn pos(&self) -> usize {
        self.pos
    }

    /// A state at position `pos` holding random data of realistic magnitude,
    /// for timing decode at depth without a prefill (`redlite bench
    /// --start-position N --fill-state random`): a KV cache of `pos`
    /// positions per attention layer (keys N(0, 1), as after the per-head
    /// RMSNorm and RoPE; values N(0, 1), as a projection of the unit-RMS
    /// normed hidden state), DeltaNet conv windows N(0, 1) (the projected
    /// q/k/v channels) and recurrent states N(0, 0.05²) (decoding 200 tokens
    /// gives RMS 0.04 to 0.06 on the fixture and the synthetic full-width
    /// models). A unit test checks these against the states real decoding
    /// builds. The logits that follow
    /// mean nothing; only the cost of the step is realistic.
    pub fn fill_random(c: &Config, pos: usize, seed: u64) -> CpuState {
        CpuState::fill_random_kv(c, KvTypes::default(), pos, seed)
    }

    /// [`CpuState::fill_random`] with KV caches stored as `kv` (the same
    /// numbers, rounded to the types).
    pub fn fill_random_kv(c: &Config, kv: KvTypes, pos: usize, seed: u64) -> CpuState {
        let mut st = CpuState::with_kv_types(c, kv);
        for (il, l) in st.layers.iter_mut().enumerate() {
            // One stream per (layer, part): the same numbers whatever the
            // thread count.
            let part = |k: u64| seed ^ (4 * il as u64 + k).wrapping_mul(0xA24B_AED4_963E_E407);
            match l {
                LayerState::DeltaNet { conv, ssm } => {
                    fill_normal(conv, part(0), 1.0);
                    fill_normal(ssm, part(1), 0.05);
                }
                LayerState::Attention(kv) => {
                    // One stream per block (the blocks fill in parallel).
                    let block = |p: u64, i: usize| {
                        part(p) ^ (i as u64 + 1).wrapping_mul(0x9FB2_1C65_1E98_DF25)
                    };
                    kv.fill(pos, |i, k, v| {
                        fill_normal_serial(k, block(2, i), 1.0);
                        fill_normal_serial(v, block(3, i), 1.0);
                    });
                }
            }
        }
        st.pos = pos;
        st
    }

    /// Root mean square of the state's parts: (conv windows, recurrent
    /// states, keys, values); 0 for an empty part.
    pub fn rms(&self) -> [f32; 4] {
        let mut acc = [(0f64, 0usize); 4];
        let mut add = |i: usize, v: &[f32]| {
            acc[i].0 += v.iter().map(|&x| (x as f64) * (x as f64)).sum::<f64>();
            acc[i].1 += v.len();
        };
        for l in &self.layers {
            match l {
                LayerState::DeltaNet { conv, ssm } => {
                    add(0, conv);
                    add(1, ssm);
                }
                LayerState::Attention(kv) => {
                    let (k, v) = kv.to_vecs();
                    add(2, &k);
                    add(3, &v);
                }
            }
        }
        acc.map(|(s, n)| {
            if n == 0 {
                0.0
            } else {
                (s / n as f64).sqrt() as f32
            }
        })
    }

    /// Bytes held: conv and recurrent states plus the KV cache up to `pos`.
    pub fn bytes(&self) -> usize {
        let (own, blocks) = self.parts();
        own + blocks.iter().map(|b| b.1).sum::<usize>()
    }

    /// [`State::parts`] on the host.
    pub fn parts(&self) -> (usize, Vec<(u64, usize)>) {
        let mut own = 0;
        let mut blocks = Vec::new();
        for l in &self.layers {
            match l {
                LayerState::DeltaNet { conv, ssm } => {
                    own += (conv.len() + ssm.len()) * std::mem::size_of::<f32>()
                }
                LayerState::Attention(kv) => blocks.extend(kv.blocks()),
            }
        }
        (own, blocks)
    }

    /// [`State::snapshot`] on the host.
    pub fn snapshot(&self) -> CpuState {
        CpuState {
            pos: self.pos,
            layers: self
                .layers
                .iter()
                .map(|l| match l {
                    LayerState::Attention(kv) => LayerState::Attention(kv.snapshot()),
                    other => other.clone(),
                })
                .collect(),
        }
    }

    /// [`State::rollback`] on the host, the trail's span already checked
    /// against the state: conv windows copied back, recurrent states
    /// replayed from the trail, KV caches truncated.
    fn rollback(&mut self, trail: &CpuTrail, keep: usize) -> Result<(), ModelError> {
        let pos = trail.pos0 + keep;
        for (il, (l, saved)) in self.layers.iter_mut().zip(&trail.layers).enumerate() {
            match l {
                LayerState::DeltaNet { conv, ssm } => {
                    let lt = saved.as_ref().ok_or_else(|| {
                        ModelError::Input("the trail has no record of a DeltaNet layer".into())
                    })?;
                    let window = lt
                        .conv
                        .get(keep - 1)
                        .filter(|w| w.len() == conv.len() && lt.ssm0.len() == ssm.len())
                        .ok_or_else(|| {
                            ModelError::Input(format!(
                                "layer {il}: the trail does not fit this state's DeltaNet layer"
                            ))
                        })?;
                    conv.copy_from_slice(window);
                    lt.replay(trail.be.as_ref(), keep, ssm);
                }
                LayerState::Attention(kv) => kv.truncate(pos),
            }
        }
        self.pos = pos;
        Ok(())
    }
}

/// SplitMix64 with Box-Muller normals (for [`CpuState::fill_random`]).
struct NormalRng(u64);

impl NormalRng {
    fn new(seed: u64) -> NormalRng {
        NormalRng(seed ^ 0x5DEE_CE66_D1CE_4E5B)
    }
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Two independent normals (Box-Muller: the cosine and the sine).
    fn normal2(&mut self) -> (f32, f32) {
        let u1 = self.uniform().max(1e-300);
        let u2 = self.uniform();
        let r = (-2.0 * u1.ln()).sqrt();
        let (s, c) = (2.0 * std::f64::consts::PI * u2).sin_cos();
        ((r * c) as f32, (r * s) as f32)
    }
}

/// `dst` filled with `scale`·N(0, 1) from one stream of `seed`.
fn fill_normal_serial(dst: &mut [f32], seed: u64, scale: f32) {
    let mut rng = NormalRng::new(seed);
    for pair in dst.chunks_mut(2) {
        let (a, b) = rng.normal2();
        pair[0] = scale * a;
        if let Some(x) = pair.get_mut(1) {
            *x = scale * b;
        }
    }
}

/// `dst` filled with `scale`·N(0, 1), in parallel: chunk `i` of 64 Ki values
/// draws from its own stream of `seed`, so the values do not depend on the
/// thread count. (A 128K-token context fills gigabytes: a single stream of
/// Box-Muller pairs took most of `bench --fill-state random` at depth.)
fn fill_normal(dst: &mut [f32], seed: u64, scale: f32) {
    use rayon::prelude::*;
    const CHUNK: usize = 1 << 16;
    dst.par_chunks_mut(CHUNK).enumerate().for_each(|(i, c)| {
        let mut rng = NormalRng::new(seed ^ (i as u64).wrapping_mul(0xD1B5_4A32_D192_ED03));
        for pair in c.chunks_mut(2) {
            let (a, b) = rng.normal2();
            pair[0] = scale * a;
            if let Some(x) = pair.get_mut(1) {
                *x = scale * b;
            }
        }
    });
}

/// What a verify pass ([`crate::Model::forward_verify`]) leaves to roll its
/// sequence back to any of the verified positions ([`State::rollback`]): a
/// host record for a CPU pass, a device's handle for a device pass. A trail
/// is refused by a state of the other form.
#[derive(Debug)]
pub enum Trail {
    /// Made by the CPU forward pass; rolls back a [`State::Cpu`].
    Cpu(CpuTrail),
    /// Made by a device's verify pass; rolls back that device's states.
    Device(DeviceTrail),
}

impl Trail {
    /// Position before the verified tokens.
    pub fn start(&self) -> usize {
        match self {
            Trail::Cpu(t) => t.pos0,
            Trail::Device(t) => t.pos0,
        }
    }

    /// Tokens it covers.
    pub fn len(&self) -> usize {
        match self {
            Trail::Cpu(t) => t.n,
            Trail::Device(t) => t.n,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The DeltaNet conv and recurrent states after each token of an exact
/// multi-token CPU forward, so the sequence can be rolled back to any of
/// those positions.
///
/// The conv windows (small) are kept after every token. The recurrent
/// states (2 MiB a layer) are not: the trail keeps each layer's state before
/// the first token and the delta rule's inputs, and a rollback replays the
/// kept tokens' steps with the same kernel, which gives the same state bit
/// for bit. A pass whose drafts are all accepted never rolls back, so it
/// pays one copy per layer instead of one per token.
pub struct CpuTrail {
    pub(crate) pos0: usize,
    pub(crate) n: usize,
    /// Per layer; `None` for attention layers.
    pub(crate) layers: Vec<Option<LayerTrail>>,
    /// The backend that ran the pass (the one a rollback replays with).
    pub(crate) be: Arc<dyn Backend>,
}

impl CpuTrail {
    /// An empty record of `n` tokens from `pos0` over `n_layer` layers, to
    /// be filled by the pass that runs on `be`.
    pub(crate) fn new(pos0: usize, n: usize, n_layer: usize, be: Arc<dyn Backend>) -> CpuTrail {
        CpuTrail {
            pos0,
            n,
            layers: (0..n_layer).map(|_| None).collect(),
            be,
        }
    }
}

impl std::fmt::Debug for CpuTrail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CpuTrail")
            .field("pos0", &self.pos0)
            .field("n", &self.n)
            .finish()
    }
}

/// One DeltaNet layer's part of a [`CpuTrail`].
#[derive(Default)]
pub(crate) struct LayerTrail {
    /// Conv window after each token.
    pub(crate) conv: Vec<Vec<f32>>,
    /// Recurrent state before the first token.
    pub(crate) ssm0: Vec<f32>,
    /// The delta rule's per-token inputs, token-major, and the head shapes
    /// `[h_k, h_v, d_k, d_v]`.
    pub(crate) q: Vec<f32>,
    pub(crate) k: Vec<f32>,
    pub(crate) v: Vec<f32>,
    pub(crate) beta: Vec<f32>,
    pub(crate) g: Vec<f32>,
    pub(crate) dims: [usize; 4],
}

impl LayerTrail {
    /// The recurrent state after the first `keep` tokens, into `ssm`: the
    /// state before them, then their steps replayed one by one.
    fn replay(&self, be: &dyn Backend, keep: usize, ssm: &mut [f32]) {
        let [hk, hv, dk, dv] = self.dims;
        let (kd, vd) = (hk * dk, hv * dv);
        ssm.copy_from_slice(&self.ssm0);
        let mut out = vec![0f32; keep * vd];
        let inp = DeltaInputs {
            q: &self.q[..keep * kd],
            k: &self.k[..keep * kd],
            v: &self.v[..keep * vd],
            beta: &self.beta[..keep * hv],
            g: &self.g[..keep * hv],
            n_tok: keep,
            h_k: hk,
            h_v: hv,
            d_k: dk,
            d_v: dv,
        };
        // Token by token within each head, as the pass ran them.
        be.delta_rule_recurrent(&inp, ssm, &mut out);
    }
}

/// A device verify pass's trail: the span it covers and the device's own
/// record ([`crate::DeviceForward::verify`]), which only that device's
/// states take ([`crate::DeviceState::rollback`]).
pub struct DeviceTrail {
    pub(crate) pos0: usize,
    pub(crate) n: usize,
    pub(crate) saved: Box<dyn Any + Send + Sync>,
}

impl std::fmt::Debug for DeviceTrail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceTrail")
            .field("pos0", &self.pos0)
            .field("n", &self.n)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Model;

    /// The random state's magnitudes are those real decoding builds (within
    /// a factor of 3), measured on a fixture model after a 200-token prompt.
    #[test]
    fn fill_random_matches_the_magnitude_of_real_states() {
        let path = redlite_testkit::fixture("tiny-s-Q8_0.gguf");
        let model = Model::load(&path).expect("fixture loads");
        let mut st = model.new_state();
        let ids: Vec<u32> = (0..200u32).map(|i| (i * 37 + 11) % 900).collect();
        model.forward(&mut st, &ids, false).expect("prefill");
        let real = st.rms();
        let rand = State::fill_random(model.config(), 200, 7).rms();
        for (i, part) in ["conv", "ssm", "k", "v"].iter().enumerate() {
            let r = rand[i] / real[i];
            assert!(
                (1.0 / 3.0..3.0).contains(&r),
                "{part}: random rms {} vs decoded {}",
                rand[i],
                real[i]
            );
        }
    }

    /// Decoding from a random state at depth works: finite logits, the
    /// KV cache and position advance by one.
    #[test]
    fn decode_from_a_random_state() {
        let path = redlite_testkit::fixture("tiny-s-Q8_0.gguf");
        let model = Model::load(&path).expect("fixture loads");
        let mut st = State::fill_random(model.config(), 300, 1);
        assert_eq!(st.pos(), 300);
        let before = st.bytes();
        let logits = model.forward(&mut st, &[5], false).expect("decode");
        assert_eq!(logits.len(), model.config().vocab_size);
        assert!(logits.iter().all(|x| x.is_finite()));
        assert_eq!(st.pos(), 301);
        let c = model.config();
        let n_attn = c.recurrent.iter().filter(|&&r| !r).count();
        assert_eq!(
            st.bytes() - before,
            n_attn * 2 * c.n_head_kv * c.head_dim * 4
        );
        // Same seed, same state; another seed, another state.
        let a = State::fill_random(c, 10, 3).rms();
        assert_eq!(a, State::fill_random(c, 10, 3).rms());
        assert_ne!(a, State::fill_random(c, 10, 4).rms());
    }
}
