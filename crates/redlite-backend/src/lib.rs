//! Backend interface and the CPU backend.
//!
//! A [`Backend`] runs the numeric operations of the forward pass: matrix
//! products against quantized weights (read in their stored format, never
//! dequantized as a whole), normalisations, the causal convolution, the gated
//! delta rule and causal attention. Activations are f32 throughout; see
//! [`CpuBackend`] for the multi-threaded CPU implementation.
//!
//! Despite the crate's name this is the CPU kernel set: every operation
//! takes host `&[f32]` slices. A GPU does not implement [`Backend`]; it
//! replaces the whole forward pass behind `redlite_model::DeviceForward`,
//! and `redlite_model::Model` picks one of the two once per call. A name
//! such as `redlite-cpu` would say so; the crate keeps its name for now.

#![allow(clippy::needless_range_loop)]

use redlite_gguf::GgmlType;
use redlite_quant::{DequantFn, DotFn};

pub mod aligned;
pub mod cpu;
pub mod delta;
pub mod kvattn;
pub mod kvslab;
pub mod kvtype;
pub mod simd;

pub use cpu::{Activations, CpuBackend, CpuError, CpuOptions};
pub use kvtype::{KvData, KvRows, KvType, KvTypes};

/// Chunk length of the chunked delta rule (the reference in [`cpu`] and the
/// blocked products of [`delta`] both cut the tokens at this length).
pub const DELTA_CHUNK: usize = 64;

/// Errors of the backend (only shape/type problems a caller can cause).
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error("tensor type {0} has no kernels")]
    Unsupported(GgmlType),
    #[error("{ty} weight {n_out}x{n_in}: {msg}")]
    Shape {
        ty: GgmlType,
        n_in: usize,
        n_out: usize,
        msg: String,
    },
}

/// A matrix weight in its stored (possibly quantized) format: `n_out` rows of
/// `n_in` values, row `o` contiguous (ggml `{n_in, n_out}`).
#[derive(Clone, Copy)]
pub struct QMat<'a> {
    pub ty: GgmlType,
    pub n_in: usize,
    pub n_out: usize,
    pub data: &'a [u8],
    row_bytes: usize,
    dot: DotFn,
    dequant: DequantFn,
    /// Integer-activation kernels, when the type has them and rows are whole super-blocks.
    q16: Option<redlite_quant::q16::Q16Kernels>,
}

impl<'a> QMat<'a> {
    /// Check the type has kernels and the bytes hold exactly `n_out` whole rows.
    pub fn new(
        ty: GgmlType,
        n_in: usize,
        n_out: usize,
        data: &'a [u8],
    ) -> Result<QMat<'a>, BackendError> {
        let k = redlite_quant::kernels(ty).ok_or(BackendError::Unsupported(ty))?;
        let dot = redlite_quant::dot_fn(ty).ok_or(BackendError::Unsupported(ty))?;
        let shape_err = |msg: String| BackendError::Shape {
            ty,
            n_in,
            n_out,
            msg,
        };
        let row_bytes = ty
            .row_bytes(n_in as u64)
            .ok_or_else(|| shape_err("row length is not a whole number of blocks".into()))?
            as usize;
        if row_bytes.checked_mul(n_out) != Some(data.len()) {
            return Err(shape_err(format!(
                "{} bytes given, {} expected",
                data.len(),
                row_bytes.saturating_mul(n_out)
            )));
        }
        Ok(QMat {
            ty,
            n_in,
            n_out,
            data,
            row_bytes,
            dot,
            dequant: k.dequant,
            q16: if n_in.is_multiple_of(redlite_quant::q16::QK) {
                redlite_quant::q16::kernels(ty)
            } else {
                None
            },
        })
    }

    /// A Q4_K or Q5_K matrix whose blocks were repacked into the lanes
    /// layout ([`redlite_quant::q16::lanes`], made for the one-token
    /// integer dot on this CPU): the same products through that layout's
    /// kernels (the batched tiles unpack it to the same integers; the f32
    /// path puts each block back first). Fails where this CPU has no lanes
    /// kernels for `ty`.
    pub fn new_lanes(
        ty: GgmlType,
        n_in: usize,
        n_out: usize,
        data: &'a [u8],
    ) -> Result<QMat<'a>, BackendError> {
        use redlite_quant::q16::lanes;
        let k = lanes::kernels(ty).ok_or(BackendError::Unsupported(ty))?;
        let plain = QMat::new(ty, n_in, n_out, data)?;
        let five = ty == GgmlType::Q5_K;
        Ok(QMat {
            dot: if five {
                lanes::dot_f32::<true>
            } else {
                lanes::dot_f32::<false>
            },
            dequant: if five {
                lanes::dequant::<true>
            } else {
                lanes::dequant::<false>
            },
            q16: Some(k),
            ..plain
        })
    }

    /// Bytes of one row.
    pub fn row_bytes(&self) -> usize {
        self.row_bytes
    }

    /// The stored bytes of row `o`.
    pub fn row(&self, o: usize) -> &'a [u8] {
        &self.data[o * self.row_bytes..(o + 1) * self.row_bytes]
    }

    /// `Σ_i W[o][i]·x[i]` with the type's fastest dot kernel.
    pub fn dot_row(&self, o: usize, x: &[f32]) -> f32 {
        (self.dot)(self.row(o), x)
    }

    /// The integer-activation kernels of this matrix, if it has them.
    pub fn q16(&self) -> Option<&redlite_quant::q16::Q16Kernels> {
        self.q16.as_ref()
    }

    /// Dequantize row `o` into `out` (`n_in` values).
    pub fn dequant_row(&self, o: usize, out: &mut [f32]) {
        (self.dequant)(self.row(o), out)
    }
}

/// Inputs of the gated delta rule for one sequence, laid out per token.
///
/// `q`, `k`: `[T, h_k, d_k]` (q already L2-normed and scaled, k L2-normed);
/// `v`: `[T, h_v, d_v]`; `beta`, `g`: `[T, h_v]`. Value head `h` reads key
/// head `h / (h_v / h_k)`.
pub struct DeltaInputs<'a> {
    pub q: &'a [f32],
    pub k: &'a [f32],
    pub v: &'a [f32],
    pub beta: &'a [f32],
    pub g: &'a [f32],
    pub n_tok: usize,
    pub h_k: usize,
    pub h_v: usize,
    pub d_k: usize,
    pub d_v: usize,
}

/// Shapes of one causal attention call.
#[derive(Clone, Copy, Debug)]
pub struct AttnShape {
    /// New query tokens.
    pub n_tok: usize,
    /// Absolute position of the first query token; the cache holds positions
    /// `0 .. pos0 + n_tok`.
    pub pos0: usize,
    pub n_head: usize,
    pub n_head_kv: usize,
    pub head_dim: usize,
    pub scale: f32,
}

/// A KV cache as a table of fixed-size blocks, read in place by
/// [`Backend::attention`]: block `i` holds positions `i * block_tokens ..
/// (i + 1) * block_tokens` (the last one may hold fewer), each position a
/// row `[n_head_kv, head_dim]`, keys and values in separate tables. The
/// table is addressed by block index only, so a device can keep the same
/// layout as a table of indices into its own block pool. Elements are
/// stored as [`KvRows`] (f32, f16, bf16, q8_0 or q4_0, keys and values each of
/// one type); the kernel converts a chunk of rows at a time.
#[derive(Clone, Copy, Debug)]
pub struct KvBlocks<'a> {
    pub k: &'a [KvRows<'a>],
    pub v: &'a [KvRows<'a>],
    /// Positions per block (the same for every block; at least 1).
    pub block_tokens: usize,
}

impl<'a> KvBlocks<'a> {
    /// Positions the table holds.
    pub fn positions(&self, row: usize) -> usize {
        let full = self.k.len().saturating_sub(1) * self.block_tokens;
        full + self.k.last().map_or(0, |b| b.len() / row.max(1))
    }

    /// Block and offset of position `p`, and where the chunk of at most
    /// `max` positions that starts there must end (`p + max`, the end of
    /// the block or `end`, whichever comes first).
    #[inline]
    pub fn locate(&self, p: usize, max: usize, end: usize) -> (usize, usize, usize) {
        let bt = self.block_tokens.max(1);
        let (b, off) = (p / bt, p % bt);
        let stop = (p + max).min(end).min(p + (bt - off));
        (b, off, stop)
    }
}

/// `silu(x) · y` as [`Backend::silu_mul`] computes each element.
#[inline]
pub fn silu_mul_one(x: f32, y: f32) -> f32 {
    x * (1.0 / (1.0 + (-x).exp())) * y
}

/// One product of a [`Backend::matmul_multi`] call: `y = W·x` over `n_tok`
/// rows, each computed exactly as at batch 1.
pub struct MatJob<'a, 'b> {
    pub w: QMat<'a>,
    pub x: &'b [f32],
    pub n_tok: usize,
    pub y: &'b mut [f32],
}

/// The operations of the forward pass. All buffers are f32, row-major.
pub trait Backend: Send + Sync {
    fn name(&self) -> String;

    /// `y[t][o] = Σ_i W[o][i]·x[t][i]` for `t < n_tok`; `x` is `[n_tok, n_in]`,
    /// `y` is `[n_tok, n_out]`. Weights are read once per batch.
    fn matmul(&self, w: &QMat<'_>, x: &[f32], n_tok: usize, y: &mut [f32]);

    /// The same product with every output computed exactly as at batch 1
    /// (`y[t]` is bit-identical to `matmul(w, x[t], 1)`), each weight row
    /// still read once for all tokens. Batched decode across sequences uses
    /// it, so a sequence's arithmetic does not depend on its batch-mates.
    fn matmul_rows(&self, w: &QMat<'_>, x: &[f32], n_tok: usize, y: &mut [f32]);

    /// Several independent products at once (the routed experts of a
    /// decode step, projections sharing an input), each exactly as
    /// [`Backend::matmul_rows`] computes it. A backend may run them as one
    /// parallel region; jobs whose `x` is the same slice may share work on it.
    fn matmul_multi(&self, jobs: &mut [MatJob<'_, '_>]) {
        for j in jobs.iter_mut() {
            self.matmul_rows(&j.w, j.x, j.n_tok, j.y);
        }
    }

    /// Several independent products, each exactly as [`Backend::matmul`]
    /// computes it (bit for bit), as one parallel region where the backend
    /// can: a prefill pass's routed experts (every expert's gate and up, then
    /// every down), projections sharing an input. `n_tok` may differ between
    /// jobs; jobs whose `x` is the same slice may share work on it.
    fn matmul_batch(&self, jobs: &mut [MatJob<'_, '_>]) {
        for j in jobs.iter_mut() {
            self.matmul(&j.w, j.x, j.n_tok, j.y);
        }
    }

    /// In place: `a[i] = silu(a[i]) · b[i]`, computed as
    /// `(x · (1 / (1 + e^-x))) · b` in f32 (SwiGLU after the gate and up
    /// products; the model's own formula, so the bits are its).
    fn silu_mul(&self, a: &mut [f32], b: &[f32]) {
        assert_eq!(a.len(), b.len(), "silu_mul: operand sizes");
        a.iter_mut()
            .zip(b)
            .for_each(|(x, y)| *x = silu_mul_one(*x, *y));
    }

    /// `y[r] += w · src` (rows of `d` values, `*y += w * src` per element)
    /// for every `(r, w, src)` of `adds`, in the order given among those of
    /// one row: the weighted sum of a prefill pass's routed experts. A
    /// backend may run different rows in parallel (the bits are the same).
    fn add_rows(&self, y: &mut [f32], d: usize, adds: &[(usize, f32, &[f32])]) {
        for &(r, w, src) in adds {
            y[r * d..(r + 1) * d]
                .iter_mut()
                .zip(src)
                .for_each(|(a, b)| *a += w * b);
        }
    }

    /// In place: each row of `dim` values becomes `x / sqrt(mean(x²) + eps) ⊙ w`
    /// (`w = None`: no weight).
    fn rms_norm(&self, x: &mut [f32], dim: usize, w: Option<&[f32]>, eps: f32);

    /// Causal depthwise convolution with SiLU over `n_tok` tokens of
    /// `channels` values. `state` is `[channels, k-1]` (oldest first, updated
    /// to the last `k-1` inputs); `w` is `[channels, k]` (tap `k-1` multiplies
    /// the current token). Writes `out` `[n_tok, channels]`.
    #[allow(clippy::too_many_arguments)]
    fn ssm_conv_silu(
        &self,
        x: &[f32],
        n_tok: usize,
        channels: usize,
        kernel: usize,
        w: &[f32],
        state: &mut [f32],
        out: &mut [f32],
    );

    /// The gated delta rule over a batch (chunked form, chunk 64) with the
    /// recurrent state `state` `[h_v, d_v, d_k]` (row `j` of head `h` holds
    /// `S_h[:, j]`). Writes `out` `[T, h_v, d_v]` and updates the state.
    fn delta_rule_chunked(&self, inp: &DeltaInputs<'_>, state: &mut [f32], out: &mut [f32]);

    /// The same, one token at a time (the recurrence).
    fn delta_rule_recurrent(&self, inp: &DeltaInputs<'_>, state: &mut [f32], out: &mut [f32]);

    /// Causal softmax attention. `q` is `[n_tok, n_head, head_dim]`; the cache
    /// `kv` holds at least `pos0 + n_tok` positions, read in place block by
    /// block. Query head `h` uses KV head `h / (n_head / n_head_kv)`. Writes
    /// `out` `[n_tok, n_head, head_dim]`.
    fn attention(&self, s: &AttnShape, q: &[f32], kv: &KvBlocks<'_>, out: &mut [f32]);

    /// Run `f` (a whole forward pass) where the backend's operations run:
    /// the CPU backend runs it on one of its own worker threads, so each
    /// operation's parallel region starts there instead of handing work from
    /// the caller's thread to the pool and back, hundreds of times a token.
    /// The default runs `f` in place.
    fn within(&self, f: &mut (dyn FnMut() + Send)) {
        f()
    }
}

/// Test inputs shared by the tests of several modules: random values, and
/// delta-rule cases.
#[cfg(test)]
pub(crate) mod test_util {
    use crate::DeltaInputs;

    /// A 64-bit linear congruential generator (Knuth's MMIX constants):
    /// reproducible random test values, no dependency.
    pub struct Rng(pub u64);

    impl Rng {
        /// The next value in [0, 1) (the state's top 24 bits).
        pub fn unit(&mut self) -> f32 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (self.0 >> 40) as f32 / (1u64 << 24) as f32
        }

        /// The next value in [-1, 1).
        pub fn f(&mut self) -> f32 {
            self.unit() * 2.0 - 1.0
        }

        /// `n` values in [-1, 1).
        pub fn vec(&mut self, n: usize) -> Vec<f32> {
            (0..n).map(|_| self.f()).collect()
        }
    }

    /// `n` values in [-0.5, 0.5) from seed `seed`.
    pub fn centred(n: usize, seed: u64) -> Vec<f32> {
        let mut r = Rng(seed);
        (0..n).map(|_| r.unit() - 0.5).collect()
    }

    /// Random delta-rule inputs of one shape: `q`, `k` L2-normalised per key
    /// head, `β` in (0, 1), decays `g = -decay·(1 + u)`, and a start state.
    pub struct DeltaCase {
        pub q: Vec<f32>,
        pub k: Vec<f32>,
        pub v: Vec<f32>,
        pub beta: Vec<f32>,
        pub g: Vec<f32>,
        pub s0: Vec<f32>,
        pub t: usize,
        pub dims: [usize; 4],
    }

    fn l2(v: &mut [f32], dim: usize) {
        for r in v.chunks_mut(dim) {
            let n = r.iter().map(|x| x * x).sum::<f32>().sqrt();
            r.iter_mut().for_each(|x| *x /= n);
        }
    }

    impl DeltaCase {
        /// `next` draws uniform values in [-1, 1); `dims` = `[h_k, h_v, d_k, d_v]`.
        pub fn new(next: &mut impl FnMut() -> f32, t: usize, dims: [usize; 4], decay: f32) -> Self {
            let [h_k, h_v, d_k, d_v] = dims;
            let mut vec = |n: usize| (0..n).map(|_| next()).collect::<Vec<f32>>();
            let mut q = vec(t * h_k * d_k);
            let mut k = vec(t * h_k * d_k);
            l2(&mut q, d_k);
            l2(&mut k, d_k);
            let v = vec(t * h_v * d_v);
            let beta = vec(t * h_v).iter().map(|u| 0.5 + 0.5 * u).collect();
            let g = vec(t * h_v).iter().map(|u| -decay * (1.0 + u)).collect();
            let s0 = vec(h_v * d_v * d_k);
            DeltaCase {
                q,
                k,
                v,
                beta,
                g,
                s0,
                t,
                dims,
            }
        }

        pub fn inputs(&self) -> DeltaInputs<'_> {
            let [h_k, h_v, d_k, d_v] = self.dims;
            DeltaInputs {
                q: &self.q,
                k: &self.k,
                v: &self.v,
                beta: &self.beta,
                g: &self.g,
                n_tok: self.t,
                h_k,
                h_v,
                d_k,
                d_v,
            }
        }
    }
}
