//! The qwen3next forward pass, in the order of the block diagram:
//!
//! ```text
//! embeddings
//! per layer:  RMSNorm → Gated DeltaNet | gated full attention → +residual
//!             RMSNorm → MoE (softmax router, top-k renormalised, SwiGLU experts,
//!                            shared expert with sigmoid gate)  → +residual
//! RMSNorm → LM head
//! ```
//!
//! One call processes a batch of T tokens of one sequence: projections are
//! matrix-matrix products over the batch, the DeltaNet uses the chunked delta
//! rule (T > 1) or the recurrence (T = 1), attention is causal over the
//! cache. Activations are f32 everywhere.
//!
//! This is the CPU execution: every operation goes to the model's
//! [`Backend`] (the CPU kernels, host slices) and the sequence's state is a
//! [`CpuState`]. A device runs its own whole pass behind
//! [`crate::DeviceForward`]; [`Model`] picks one of the two once per call
//! (`lib.rs`), so nothing here asks where it runs.

use redlite_backend::{AttnShape, Backend, DeltaInputs};

use crate::kv::{self, KvCache};
use crate::rope;
use crate::state::{CpuState, CpuTrail, LayerState, LayerTrail};
use crate::weights::{expert, expert_from, qmat, qmats, AttnW, Bytes, DeltaNetW, Mat, Mixer, MoeW};
use crate::{Model, ModelError, Trace};

/// Optional sink for named intermediates.
struct Tr<'a>(Option<&'a mut dyn Trace>);

impl Tr<'_> {
    /// Report the input `x` (`rows` rows) of the products with `mats` (each
    /// distinct tensor once) to the observer.
    fn inputs(&mut self, f: &redlite_gguf::GgufFile, mats: &[&Mat], rows: usize, x: &[f32]) {
        if let Some(t) = self.0.as_deref_mut() {
            let mut seen: Vec<usize> = Vec::with_capacity(mats.len());
            for m in mats {
                let (Bytes::Mapped { tensor, .. } | Bytes::Rows { tensor, .. }) = m.bytes;
                if !seen.contains(&tensor) {
                    seen.push(tensor);
                    t.matmul_input(&f.tensors[tensor].name, None, rows, x);
                }
            }
        }
    }

    /// Report the rows `x` routed to expert `e` as the input of the expert
    /// stacks `tensors` (each distinct tensor once).
    fn expert_input(
        &mut self,
        f: &redlite_gguf::GgufFile,
        tensors: &[usize],
        e: usize,
        rows: usize,
        x: &[f32],
    ) {
        if let Some(t) = self.0.as_deref_mut() {
            for (i, &tensor) in tensors.iter().enumerate() {
                if !tensors[..i].contains(&tensor) {
                    t.matmul_input(&f.tensors[tensor].name, Some(e), rows, x);
                }
            }
        }
    }

    fn put(&mut self, name: &str, il: Option<usize>, rows: usize, data: &[f32]) {
        if let Some(t) = self.0.as_deref_mut() {
            let cols = data.len().checked_div(rows).unwrap_or(0);
            match il {
                Some(il) => t.tensor(&format!("{name}-{il}"), rows, cols, data),
                None => t.tensor(name, rows, cols, data),
            }
        }
    }
}

#[inline]
fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

#[inline]
fn silu(x: f32) -> f32 {
    x * sigmoid(x)
}

/// softplus with the threshold of ggml and torch (x > 20 → x).
#[inline]
fn softplus(x: f32) -> f32 {
    if x > 20.0 {
        x
    } else {
        x.exp().ln_1p()
    }
}

use crate::par::{self, add_into};

/// How the tokens of one forward call map onto sequences: `lens[i]`
/// consecutive tokens belong to sequence `i`. With several sequences every
/// product is computed row by row exactly as at batch 1 (`matmul_rows`), so
/// a sequence's arithmetic does not depend on its batch-mates.
///
/// `exact` also makes a multi-token sequence compute every token as a decode
/// step would (the conv, the delta rule and attention run token by token), so
/// a speculative verify batch gives exactly the logits of plain decoding.
struct Segs<'a> {
    lens: &'a [usize],
    exact: bool,
}

impl Segs<'_> {
    /// `(sequence, first token, token count)` for each sequence.
    fn iter(&self) -> impl Iterator<Item = (usize, usize, usize)> + '_ {
        let mut start = 0;
        self.lens.iter().enumerate().map(move |(i, &n)| {
            let s = start;
            start += n;
            (i, s, n)
        })
    }
}

/// `Y = W·X` over a batch: `x` is `[t, n_in]`, the result `[t, n_out]`.
fn linear(
    be: &dyn Backend,
    w: &redlite_backend::QMat<'_>,
    x: &[f32],
    t: usize,
    exact: bool,
) -> Vec<f32> {
    let mut y = par::zeros(t * w.n_out);
    if exact {
        be.matmul_rows(w, x, t, &mut y);
    } else {
        be.matmul(w, x, t, &mut y);
    }
    y
}

/// Several products of the same input `x`, as one region with `x`
/// quantized once: decode-sized batches (and exact-row mode) as
/// `matmul_multi`, larger batches as `matmul_batch` (each product as
/// [`linear`] computes it; a matrix stored as runs of rows, the legacy
/// fused `ssm_in`, gives each run's outputs to its columns).
fn linear_group(
    be: &dyn Backend,
    f: &redlite_gguf::GgufFile,
    mats: &[&Mat],
    x: &[f32],
    t: usize,
    exact: bool,
) -> Result<Vec<Vec<f32>>, ModelError> {
    let parts: Vec<Vec<redlite_backend::QMat<'_>>> =
        mats.iter().map(|m| qmats(f, m)).collect::<Result<_, _>>()?;
    let mut outs: Vec<Vec<Vec<f32>>> = parts
        .iter()
        .map(|ps| ps.iter().map(|p| par::zeros(t * p.n_out)).collect())
        .collect();
    {
        let mut jobs = Vec::new();
        for (ps, os) in parts.iter().zip(outs.iter_mut()) {
            for (p, y) in ps.iter().zip(os.iter_mut()) {
                jobs.push(redlite_backend::MatJob {
                    w: *p,
                    x,
                    n_tok: t,
                    y,
                });
            }
        }
        if exact || t < EXPERT_GEMM_MIN {
            be.matmul_multi(&mut jobs);
        } else {
            be.matmul_batch(&mut jobs);
        }
    }
    Ok(mats
        .iter()
        .zip(outs)
        .map(|(m, mut os)| {
            if os.len() == 1 {
                return os.pop().unwrap_or_default();
            }
            let mut y = vec![0f32; t * m.n_out];
            let mut col = 0;
            for yp in &os {
                let n = yp.len() / t.max(1);
                for (dst, src) in y.chunks_mut(m.n_out).zip(yp.chunks(n.max(1))) {
                    dst[col..col + n].copy_from_slice(src);
                }
                col += n;
            }
            y
        })
        .collect())
}

/// Feed `tokens` (one batch of one sequence) at the state's position and
/// advance it; `[T, vocab]` logits if `all_logits`, else the last `[vocab]`.
/// The caller ([`Model`]) has checked the token ids against the vocabulary.
pub(crate) fn forward(
    model: &Model,
    state: &mut CpuState,
    tokens: &[u32],
    all_logits: bool,
    trace: Option<&mut dyn Trace>,
) -> Result<Vec<f32>, ModelError> {
    forward_segments(
        model,
        &mut [state],
        tokens,
        &[tokens.len()],
        all_logits,
        trace,
        false,
        None,
    )
}

/// One decode step for several sequences: `tokens[i]` is fed to `states[i]`.
/// Returns `[n, vocab]` logits, each row bit-identical to what
/// [`forward`] gives for that sequence alone.
pub(crate) fn forward_batch(
    model: &Model,
    states: &mut [&mut CpuState],
    tokens: &[u32],
) -> Result<Vec<f32>, ModelError> {
    let lens = vec![1; tokens.len()];
    forward_segments(model, states, tokens, &lens, false, None, true, None)
}

/// Feed `tokens` to one sequence computing each exactly as a decode step
/// would, returning all `[n, vocab]` logits and the trail to roll back with.
pub(crate) fn forward_verify(
    model: &Model,
    state: &mut CpuState,
    tokens: &[u32],
) -> Result<(Vec<f32>, CpuTrail), ModelError> {
    let mut trail = CpuTrail::new(
        state.pos,
        tokens.len(),
        model.config.n_layer,
        model.backend.clone(),
    );
    let logits = forward_segments(
        model,
        &mut [state],
        tokens,
        &[tokens.len()],
        true,
        None,
        true,
        Some(&mut trail),
    )?;
    Ok((logits, trail))
}

#[allow(clippy::too_many_arguments)]
fn forward_segments(
    model: &Model,
    states: &mut [&mut CpuState],
    tokens: &[u32],
    lens: &[usize],
    all_logits: bool,
    trace: Option<&mut dyn Trace>,
    exact: bool,
    mut trail: Option<&mut CpuTrail>,
) -> Result<Vec<f32>, ModelError> {
    let c = &model.config;
    let w = &model.weights;
    let f = &model.gguf;
    let be = model.backend.as_ref();
    let mut tr = Tr(trace);
    let segs = Segs { lens, exact };
    if tokens.is_empty() || lens.contains(&0) {
        return Err(ModelError::Input("forward called with no tokens".into()));
    }
    for st in states.iter() {
        if st.layers.len() != c.n_layer {
            return Err(ModelError::Input(format!(
                "the state has {} layers but the model {}",
                st.layers.len(),
                c.n_layer
            )));
        }
    }
    let t = tokens.len();
    let d = c.n_embd;
    let eps = c.rms_eps;

    // Embeddings: one dequantized row per token (the ids were checked
    // against the vocabulary by `Model` before it dispatched here).
    let emb = qmat(f, &w.token_embd)?;
    let mut x = vec![0f32; t * d];
    for (i, &tok) in tokens.iter().enumerate() {
        emb.dequant_row(tok as usize, &mut x[i * d..(i + 1) * d]);
    }
    tr.put("inp_embd", None, t, &x);

    for (il, layer) in w.layers.iter().enumerate() {
        // Token mixer.
        let mut h = par::copy(&x);
        be.rms_norm(&mut h, d, Some(&layer.attn_norm), eps);
        tr.put("attn_norm", Some(il), t, &h);
        let m = match &layer.mixer {
            Mixer::DeltaNet(dw) => {
                let mut ls = Vec::with_capacity(states.len());
                for st in states.iter_mut() {
                    match &mut st.layers[il] {
                        LayerState::DeltaNet { conv, ssm } => ls.push((conv, ssm)),
                        _ => return Err(wrong_kind(il)),
                    }
                }
                let rec = trail
                    .as_deref_mut()
                    .map(|t| t.layers[il].get_or_insert_with(LayerTrail::default));
                deltanet(model, dw, &mut ls, &h, &segs, il, &mut tr, rec)?
            }
            Mixer::Attention(aw) => {
                let mut ls = Vec::with_capacity(states.len());
                for st in states.iter_mut() {
                    let pos = st.pos;
                    match &mut st.layers[il] {
                        LayerState::Attention(kv) => ls.push((kv, pos)),
                        _ => return Err(wrong_kind(il)),
                    }
                }
                attention(model, aw, &mut ls, &h, &segs, il, &mut tr)?
            }
        };
        add_into(&mut x, &m);
        tr.put("attn_residual", Some(il), t, &x);

        // MoE feed-forward.
        let mut h2 = par::copy(&x);
        be.rms_norm(&mut h2, d, Some(&layer.post_norm), eps);
        tr.put("attn_post_norm", Some(il), t, &h2);
        let y = moe(model, &layer.moe, &h2, t, segs.exact, il, &mut tr)?;
        tr.put("ffn_out", Some(il), t, &y);
        add_into(&mut x, &y);
        tr.put("l_out", Some(il), t, &x);
    }

    // Final norm and LM head (only the rows whose logits are wanted: all,
    // or the last of each sequence).
    let (mut y, rows) = if all_logits {
        (x, t)
    } else {
        let mut y = Vec::with_capacity(lens.len() * d);
        for (_, s, n) in segs.iter() {
            y.extend_from_slice(&x[(s + n - 1) * d..(s + n) * d]);
        }
        (y, lens.len())
    };
    be.rms_norm(&mut y, d, Some(&w.output_norm), eps);
    tr.put("result_norm", None, rows, &y);
    tr.inputs(f, &[&w.output], rows, &y);
    let logits = linear(be, &qmat(f, &w.output)?, &y, rows, segs.exact);
    tr.put("result_output", None, rows, &logits);
    for (st, &n) in states.iter_mut().zip(lens) {
        st.pos += n;
    }
    Ok(logits)
}

fn wrong_kind(il: usize) -> ModelError {
    ModelError::Input(format!(
        "the state's layer {il} is of the wrong kind for this model"
    ))
}

/// Gated DeltaNet over a batch of `t` tokens; returns `[t, D]`.
#[allow(clippy::too_many_arguments)]
fn deltanet(
    model: &Model,
    w: &DeltaNetW,
    states: &mut [(&mut Vec<f32>, &mut Vec<f32>)],
    h: &[f32],
    segs: &Segs<'_>,
    il: usize,
    tr: &mut Tr<'_>,
    mut record: Option<&mut LayerTrail>,
) -> Result<Vec<f32>, ModelError> {
    let t = h.len() / model.config.n_embd;
    let ex = segs.exact;
    let c = &model.config;
    let f = &model.gguf;
    let be = model.backend.as_ref();
    let (hk, hv, dk, dv) = (c.ssm_h_k, c.ssm_h_v, c.ssm_d_k, c.ssm_d_v);
    let r = hv / hk;
    let conv_dim = c.conv_dim();
    let key_dim = c.key_dim();
    let value_dim = c.value_dim();

    // Projections: qkv (pre-conv), z (output gate), b/a.
    tr.inputs(f, &[&w.qkv, &w.gate, &w.ba], t, h);
    let mut proj = linear_group(be, f, &[&w.qkv, &w.gate, &w.ba], h, t, ex)?.into_iter();
    let (qkv, z, ba) = match (proj.next(), proj.next(), proj.next()) {
        (Some(a), Some(b), Some(c)) => (a, b, c),
        _ => unreachable!("linear_group returns one output per matrix"),
    };
    tr.put("linear_attn_qkv_mixed", Some(il), t, &qkv);
    tr.put("z", Some(il), t, &z);

    // β = sigmoid(b), g = ssm_a · softplus(a + dt_bias); ba is grouped per key head.
    let mut beta = vec![0f32; t * hv];
    let mut g = vec![0f32; t * hv];
    par::rows2_mut(&mut beta, hv, &mut g, hv, |tt, beta, g| {
        let row = &ba[tt * 2 * hv..(tt + 1) * 2 * hv];
        for head in 0..hv {
            let ib = 2 * r * (head / r) + head % r;
            beta[head] = sigmoid(row[ib]);
            g[head] = w.ssm_a[head] * softplus(row[ib + r] + w.dt_bias[head]);
        }
    });
    tr.put("beta", Some(il), t, &beta);
    tr.put("gate", Some(il), t, &g);

    // Causal conv (kernel K) + SiLU, carrying the last K−1 inputs.
    // In exact mode each token is its own step (as in decoding), and the
    // states after each token are recorded for rollback when asked.
    let mut u = par::zeros(t * conv_dim);
    for (i, s0, n) in segs.iter() {
        let step = if ex { 1 } else { n };
        for a in (s0..s0 + n).step_by(step) {
            be.ssm_conv_silu(
                &qkv[a * conv_dim..(a + step) * conv_dim],
                step,
                conv_dim,
                c.conv_kernel,
                &w.conv,
                states[i].0,
                &mut u[a * conv_dim..(a + step) * conv_dim],
            );
            if let Some(rec) = record.as_deref_mut() {
                rec.conv.push(states[i].0.clone());
            }
        }
    }
    tr.put("conv_output_silu", Some(il), t, &u);

    // Split q | k | v; L2-normalise q and k per key head; scale q by 1/sqrt(d_k).
    let mut q = par::zeros(t * key_dim);
    let mut k = par::zeros(t * key_dim);
    let mut v = par::zeros(t * value_dim);
    par::rows2_mut(&mut q, key_dim, &mut k, key_dim, |tt, q, k| {
        let row = &u[tt * conv_dim..(tt + 1) * conv_dim];
        q.copy_from_slice(&row[..key_dim]);
        k.copy_from_slice(&row[key_dim..2 * key_dim]);
    });
    par::rows_mut(&mut v, value_dim, |tt, v| {
        v.copy_from_slice(&u[tt * conv_dim + 2 * key_dim..(tt + 1) * conv_dim])
    });
    let q_scale = 1.0 / (dk as f64).sqrt();
    l2_norm_rows(&mut q, dk, c.rms_eps, q_scale);
    l2_norm_rows(&mut k, dk, c.rms_eps, 1.0);
    tr.put("q_conv_predelta", Some(il), t, &q);
    tr.put("k_conv_predelta", Some(il), t, &k);
    tr.put("v_conv_predelta", Some(il), t, &v);

    // Gated delta rule, one state per value head. A trail (one sequence)
    // keeps the state before the first token and the rule's inputs.
    if let Some(rec) = record {
        if states.len() != 1 {
            return Err(ModelError::Input(
                "a verify trail covers one sequence".into(),
            ));
        }
        rec.ssm0 = states[0].1.clone();
        rec.q = q.clone();
        rec.k = k.clone();
        rec.v = v.clone();
        rec.beta = beta.clone();
        rec.g = g.clone();
        rec.dims = [hk, hv, dk, dv];
    }
    // A segment goes through the recurrent kernel in one call when exact
    // (it steps token by token within each head, so the results are those
    // of one call per token, with each head's state kept in cache across
    // the tokens) or one token long; otherwise through the chunked form.
    let mut o = par::zeros(t * value_dim);
    for (i, a, n) in segs.iter() {
        let inp = DeltaInputs {
            q: &q[a * key_dim..(a + n) * key_dim],
            k: &k[a * key_dim..(a + n) * key_dim],
            v: &v[a * value_dim..(a + n) * value_dim],
            beta: &beta[a * hv..(a + n) * hv],
            g: &g[a * hv..(a + n) * hv],
            n_tok: n,
            h_k: hk,
            h_v: hv,
            d_k: dk,
            d_v: dv,
        };
        let out = &mut o[a * value_dim..(a + n) * value_dim];
        if ex || n == 1 {
            be.delta_rule_recurrent(&inp, states[i].1, out);
        } else {
            be.delta_rule_chunked(&inp, states[i].1, out);
        }
    }
    tr.put("attn_output", Some(il), t, &o);

    // Gated RMSNorm per value head: norm(o) ⊙ ssm_norm ⊙ silu(z).
    be.rms_norm(&mut o, dv, Some(&w.norm), c.rms_eps);
    par::zip_mut_exp(&mut o, &z, |a, zz| *a *= silu(zz));
    tr.put("final_output", Some(il), t, &o);

    tr.inputs(f, &[&w.out], t, &o);
    let out = linear(be, &qmat(f, &w.out)?, &o, t, ex);
    tr.put("linear_attn_out", Some(il), t, &out);
    Ok(out)
}

/// `x / sqrt(Σx² + eps) · scale` for each row of `dim` values.
fn l2_norm_rows(x: &mut [f32], dim: usize, eps: f32, scale: f64) {
    par::rows_mut(x, dim, |_, row| {
        let ss: f64 = row.iter().map(|&v| v as f64 * v as f64).sum();
        let s = (scale / (ss + eps as f64).sqrt()) as f32;
        row.iter_mut().for_each(|v| *v *= s);
    });
}

/// Gated full attention over a batch at positions `pos0..pos0+t`; returns `[t, D]`.
#[allow(clippy::too_many_arguments)]
fn attention(
    model: &Model,
    w: &AttnW,
    caches: &mut [(&mut KvCache, usize)],
    h: &[f32],
    segs: &Segs<'_>,
    il: usize,
    tr: &mut Tr<'_>,
) -> Result<Vec<f32>, ModelError> {
    let t = h.len() / model.config.n_embd;
    let ex = segs.exact;
    let c = &model.config;
    let f = &model.gguf;
    let be = model.backend.as_ref();
    let (nh, nkv, hd) = (c.n_head, c.n_head_kv, c.head_dim);

    // Query and output gate interleaved per head: [query hd | gate hd].
    tr.inputs(f, &[&w.q, &w.k, &w.v], t, h);
    let mut proj = linear_group(be, f, &[&w.q, &w.k, &w.v], h, t, ex)?.into_iter();
    let (qg, mut k, v) = match (proj.next(), proj.next(), proj.next()) {
        (Some(a), Some(b), Some(c)) => (a, b, c),
        _ => unreachable!("linear_group returns one output per matrix"),
    };
    let mut q = par::zeros(t * nh * hd);
    let mut gate = par::zeros(t * nh * hd);
    par::rows2_mut(&mut q, hd, &mut gate, hd, |i, q, gate| {
        let blk = &qg[i * 2 * hd..(i + 1) * 2 * hd];
        q.copy_from_slice(&blk[..hd]);
        gate.copy_from_slice(&blk[hd..]);
    });

    // Per-head q/k RMSNorm, then partial NeoX RoPE.
    be.rms_norm(&mut q, hd, Some(&w.q_norm), c.rms_eps);
    be.rms_norm(&mut k, hd, Some(&w.k_norm), c.rms_eps);
    tr.put("Qcur_normed", Some(il), t, &q);
    tr.put("Kcur_normed", Some(il), t, &k);
    // Each token's position, then every token rotated (in parallel).
    let mut pos = Vec::with_capacity(t);
    for (i, _, n) in segs.iter() {
        pos.extend((0..n).map(|j| caches[i].1 + j));
    }
    #[cfg(test)]
    if let Some(table) = &model.rope_override {
        if let Some(&p) = pos.iter().find(|&&p| p >= table.len()) {
            return Err(ModelError::Input(format!(
                "rope override table ends before position {p}"
            )));
        }
    }
    par::rows2_mut(&mut q, nh * hd, &mut k, nkv * hd, |tt, q, k| {
        let mut cs = Vec::with_capacity(c.n_rot / 2);
        model.rope.cos_sin(pos[tt], &mut cs);
        #[cfg(test)]
        if let Some(table) = &model.rope_override {
            cs.clone_from(&table[pos[tt]]);
        }
        rope::apply(q, hd, &cs);
        rope::apply(k, hd, &cs);
    });
    tr.put("Qcur", Some(il), t, &q);
    tr.put("Kcur", Some(il), t, &k);

    // Append to the KV cache and attend causally (GQA), per sequence.
    let mut o = par::zeros(t * nh * hd);
    for (i, s0, n) in segs.iter() {
        let (cache, pos0) = &mut caches[i];
        let pos0 = *pos0;
        if cache.len() != pos0 || cache.row() != nkv * hd {
            return Err(ModelError::Input(format!(
                "layer {il}: KV cache holds {} positions of {} values but the state is at \
                 {pos0} with rows of {}",
                cache.len(),
                cache.row(),
                nkv * hd
            )));
        }
        cache.append(
            &k[s0 * nkv * hd..(s0 + n) * nkv * hd],
            &v[s0 * nkv * hd..(s0 + n) * nkv * hd],
        );
        // The blocks are read in place: a table of slices, no copy.
        let (kt, vt) = cache.tables();
        let kv = kv::view(&kt, &vt);
        // Exact mode: each query as its own decode step.
        let step = if ex { 1 } else { n };
        for a in (s0..s0 + n).step_by(step) {
            let shape = AttnShape {
                n_tok: step,
                pos0: pos0 + (a - s0),
                n_head: nh,
                n_head_kv: nkv,
                head_dim: hd,
                scale: 1.0 / (hd as f32).sqrt(),
            };
            be.attention(
                &shape,
                &q[a * nh * hd..(a + step) * nh * hd],
                &kv,
                &mut o[a * nh * hd..(a + step) * nh * hd],
            );
        }
    }
    tr.put("attn_pregate", Some(il), t, &o);

    // Sigmoid output gate, then the output projection.
    par::zip_mut_exp(&mut o, &gate, |a, g| *a *= sigmoid(g));
    tr.put("attn_gated", Some(il), t, &o);
    tr.inputs(f, &[&w.out], t, &o);
    let out = linear(be, &qmat(f, &w.out)?, &o, t, ex);
    tr.put("attn_out", Some(il), t, &out);
    Ok(out)
}

/// Sparse MoE with a shared expert; returns `[t, D]`.
fn moe(
    model: &Model,
    w: &MoeW,
    h: &[f32],
    t: usize,
    ex: bool,
    il: usize,
    tr: &mut Tr<'_>,
) -> Result<Vec<f32>, ModelError> {
    let c = &model.config;
    let f = &model.gguf;
    let be = model.backend.as_ref();
    let d = c.n_embd;
    let ne = c.n_expert;

    // Router: softmax over all experts, top-k, renormalise.
    tr.inputs(f, &[&w.router], t, h);
    let logits = linear(be, &qmat(f, &w.router)?, h, t, ex);
    tr.put("ffn_moe_logits", Some(il), t, &logits);
    // Each token's experts and weights (tokens in parallel), then each
    // expert's tokens in token order.
    let k_used = c.n_expert_used;
    let pick = |(probs, order): &mut (Vec<f64>, Vec<usize>), row: &[f32]| {
        route_row(row, probs, order);
        let top = &order[..k_used];
        let wsum: f64 = top.iter().map(|&e| probs[e]).sum();
        let wsum = wsum.max(6.1035e-5);
        top.iter()
            .map(|&e| (e, (probs[e] / wsum) as f32))
            .collect::<Vec<_>>()
    };
    let init = || (vec![0f64; ne], Vec::with_capacity(ne));
    let picks: Vec<Vec<(usize, f32)>> = if logits.len() >= par::PAR_MIN {
        use rayon::prelude::*;
        logits.par_chunks(ne).map_init(init, pick).collect()
    } else {
        let mut scratch = init();
        logits
            .chunks(ne)
            .map(|row| pick(&mut scratch, row))
            .collect()
    };
    let mut routes: Vec<Vec<(usize, f32)>> = vec![Vec::new(); ne];
    for (tt, top) in picks.iter().enumerate() {
        for &(e, wt) in top {
            routes[e].push((tt, wt));
        }
    }
    let mut probs = vec![0f64; ne];
    let mut order: Vec<usize> = Vec::with_capacity(ne);

    // Prefetch (streaming, one-token steps): the next layer's router applied
    // to this layer's input predicts its experts; they are read in the
    // background while this layer computes.
    let next = match (&model.expert_cache, model.weights.layers.get(il + 1)) {
        (Some(cache), Some(nl)) if t == 1 && cache.prefetch_enabled() => {
            let nlog = linear(be, &qmat(f, &nl.moe.router)?, h, t, ex);
            route_row(&nlog, &mut probs, &mut order);
            Some(order[..cache.prefetch_count(c.n_expert_used)].to_vec())
        }
        _ => None,
    };

    // Routed experts: gather each expert's tokens, SwiGLU, scatter-add.
    let mut y = par::zeros(t * d);
    if ex || t < EXPERT_GEMM_MIN {
        routed_small(model, w, h, t, &routes, &mut y, il, next.as_deref(), tr)?;
    } else {
        // Expert by expert in id order; when streaming, a group of experts
        // that fits the cache's budget is read (in parallel) at a time.
        let active: Vec<usize> = (0..ne).filter(|&e| !routes[e].is_empty()).collect();
        let group = model
            .expert_cache
            .as_ref()
            .map_or(active.len().max(1), |c| c.group_size());
        for ids in active.chunks(group) {
            let held = hold(model, il, ids)?;
            routed_batch(model, w, &held, ids, h, &routes, &mut y, tr)?;
        }
    }
    tr.put("ffn_moe_out", Some(il), t, &y);

    // Shared expert with a sigmoid gate per token.
    tr.inputs(f, &[&w.sh_gate, &w.sh_up], t, h);
    let mut gu = linear_group(be, f, &[&w.sh_gate, &w.sh_up], h, t, ex)?.into_iter();
    let (mut act, up) = match (gu.next(), gu.next()) {
        (Some(a), Some(b)) => (a, b),
        _ => unreachable!("linear_group returns one output per matrix"),
    };
    be.silu_mul(&mut act, &up);
    tr.inputs(f, &[&w.sh_down], t, &act);
    if let Some(o) = tr.0.as_deref_mut() {
        o.matmul_input(&format!("blk.{il}.ffn_gate_inp_shexp.weight"), None, t, h);
    }
    let sh = linear(be, &qmat(f, &w.sh_down)?, &act, t, ex);
    par::rows_mut(&mut y, d, |tt, yr| {
        let hr = &h[tt * d..(tt + 1) * d];
        let gl: f32 = redlite_backend::simd::dot(hr, &w.sh_inp);
        let gate = sigmoid(gl);
        yr.iter_mut()
            .zip(&sh[tt * d..(tt + 1) * d])
            .for_each(|(a, b)| *a += gate * b);
    });
    Ok(y)
}

/// Softmax of one token's router logits into `probs` and the experts by
/// falling probability (ties: lower id first) into `order`.
fn route_row(row: &[f32], probs: &mut [f64], order: &mut Vec<usize>) {
    let mx = row.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
    let mut sum = 0f64;
    for (p, &l) in probs.iter_mut().zip(row) {
        *p = ((l - mx) as f64).exp();
        sum += *p;
    }
    probs.iter_mut().for_each(|p| *p /= sum);
    order.clear();
    order.extend(0..row.len());
    order.sort_by(|&a, &b| probs[b].total_cmp(&probs[a]).then(a.cmp(&b)));
}

/// Below this many tokens the routed experts run as one multi-product
/// region per step (decode); from it on, expert by expert (prefill).
const EXPERT_GEMM_MIN: usize = 4;

/// `y[tt] += wt · down[i]` for every routed token `(tt, wt)` of an expert.
fn scatter_add(y: &mut [f32], d: usize, toks: &[(usize, f32)], down: &[f32]) {
    for (i, &(tt, wt)) in toks.iter().enumerate() {
        y[tt * d..(tt + 1) * d]
            .iter_mut()
            .zip(&down[i * d..(i + 1) * d])
            .for_each(|(a, b)| *a += wt * b);
    }
}

/// The routed experts of a few tokens: every selected expert's gate and up
/// products in one `matmul_multi` region, then every down product in a
/// second; each computed exactly as at batch 1. `next`: the experts
/// predicted for layer `il + 1`, prefetched once this layer's are held.
#[allow(clippy::too_many_arguments)]
fn routed_small(
    model: &Model,
    w: &MoeW,
    h: &[f32],
    t: usize,
    routes: &[Vec<(usize, f32)>],
    y: &mut [f32],
    il: usize,
    next: Option<&[usize]>,
    tr: &mut Tr<'_>,
) -> Result<(), ModelError> {
    use redlite_backend::MatJob;
    let f = &model.gguf;
    let be = model.backend.as_ref();
    let d = model.config.n_embd;
    let active: Vec<(usize, &[(usize, f32)])> = routes
        .iter()
        .enumerate()
        .filter(|(_, v)| !v.is_empty())
        .map(|(e, v)| (e, v.as_slice()))
        .collect();
    // Inputs: one token needs no gather (every job shares `h`, which the
    // backend then quantizes once).
    let xes: Vec<Vec<f32>> = active
        .iter()
        .map(|(_, toks)| {
            if t == 1 {
                Vec::new()
            } else {
                toks.iter()
                    .flat_map(|&(tt, _)| h[tt * d..(tt + 1) * d].iter().copied())
                    .collect()
            }
        })
        .collect();
    let ids: Vec<usize> = active.iter().map(|&(e, _)| e).collect();
    let held = hold(model, il, &ids)?;
    if let (Some(cache), Some(next)) = (&model.expert_cache, next) {
        cache.prefetch(il + 1, next);
    }
    let mats: Vec<_> = ids
        .iter()
        .enumerate()
        .map(|(i, &e)| held.mats(f, w, i, e))
        .collect::<Result<_, ModelError>>()?;
    for (i, &(e, toks)) in active.iter().enumerate() {
        let x: &[f32] = if t == 1 { h } else { &xes[i] };
        tr.expert_input(f, &[w.gate.tensor, w.up.tensor], e, toks.len(), x);
    }
    let ff = mats.first().map(|m| m.0.n_out).unwrap_or(0);
    let mut gs: Vec<Vec<f32>> = active
        .iter()
        .map(|(_, v)| vec![0f32; v.len() * ff])
        .collect();
    let mut us = gs.clone();
    {
        let mut jobs = Vec::with_capacity(2 * active.len());
        for (i, (g, u)) in gs.iter_mut().zip(us.iter_mut()).enumerate() {
            let x: &[f32] = if t == 1 { h } else { &xes[i] };
            let n_tok = active[i].1.len();
            jobs.push(MatJob {
                w: mats[i].0,
                x,
                n_tok,
                y: g,
            });
            jobs.push(MatJob {
                w: mats[i].1,
                x,
                n_tok,
                y: u,
            });
        }
        be.matmul_multi(&mut jobs);
    }
    // SwiGLU, the experts in parallel (each element an `exp`).
    {
        use rayon::prelude::*;
        gs.par_iter_mut()
            .zip(&us)
            .for_each(|(g, u)| g.iter_mut().zip(u).for_each(|(a, b)| *a = silu(*a) * b));
    }
    for (&(e, toks), g) in active.iter().zip(&gs) {
        tr.expert_input(f, &[w.down.tensor], e, toks.len(), g);
    }
    let mut downs: Vec<Vec<f32>> = active
        .iter()
        .map(|(_, v)| vec![0f32; v.len() * d])
        .collect();
    {
        let mut jobs: Vec<MatJob<'_, '_>> = downs
            .iter_mut()
            .zip(&gs)
            .enumerate()
            .map(|(i, (y, g))| MatJob {
                w: mats[i].2,
                x: g,
                n_tok: active[i].1.len(),
                y,
            })
            .collect();
        be.matmul_multi(&mut jobs);
    }
    for ((_, toks), down) in active.iter().zip(&downs) {
        scatter_add(y, d, toks, down);
    }
    Ok(())
}

/// The routed experts a step uses, held while it computes: views of the
/// mapping, or entries of the expert cache (which may evict them meanwhile
/// without freeing them).
enum Held {
    Mapped,
    /// The entries, and whether the cache repacked them (lanes layout).
    Cached(Vec<std::sync::Arc<crate::ExpertEntry>>, bool),
}

/// Hold experts `ids` (distinct) of layer `il`: read through the cache when
/// streaming (misses in parallel), else nothing to do.
fn hold(model: &Model, il: usize, ids: &[usize]) -> Result<Held, ModelError> {
    match &model.expert_cache {
        None => Ok(Held::Mapped),
        Some(c) => Ok(Held::Cached(c.get(il, ids)?, c.lanes())),
    }
}

type ExpertMats<'a> = (
    redlite_backend::QMat<'a>,
    redlite_backend::QMat<'a>,
    redlite_backend::QMat<'a>,
);

impl Held {
    /// Gate, up and down of expert `e`, the `i`-th of those held.
    fn mats<'a>(
        &'a self,
        f: &'a redlite_gguf::GgufFile,
        w: &'a MoeW,
        i: usize,
        e: usize,
    ) -> Result<ExpertMats<'a>, ModelError> {
        match self {
            Held::Mapped => Ok((
                expert(f, &w.gate, e)?,
                expert(f, &w.up, e)?,
                expert(f, &w.down, e)?,
            )),
            Held::Cached(v, lanes) => {
                let en = v
                    .get(i)
                    .ok_or_else(|| ModelError::Backend(format!("expert {e} not held")))?;
                Ok((
                    expert_from(&w.gate, en.gate(), *lanes)?,
                    expert_from(&w.up, en.up(), *lanes)?,
                    expert_from(&w.down, en.down(), *lanes)?,
                ))
            }
        }
    }
}

/// Experts per pair of batched regions in a prefill pass: enough tiles to
/// keep every core busy to the end of a region, few enough that the
/// experts' inputs and outputs stay in the last-level cache (8 experts of
/// ~80 tokens: about 12 MB in all).
const EXPERT_BATCH: usize = 8;

thread_local! {
    /// The batched experts' gathered inputs, gate and up outputs and down
    /// outputs, reused from layer to layer: buffers of megabytes allocated
    /// afresh would be mapped and zeroed page by page every time.
    static MOE_SCRATCH: std::cell::RefCell<[Vec<f32>; 4]> = Default::default();
}

/// `v[..n]`, grown (never shrunk) as needed; its old contents stay.
fn scratch(v: &mut Vec<f32>, n: usize) -> &mut [f32] {
    if v.len() < n {
        v.resize(n, 0.0);
    }
    &mut v[..n]
}

/// The routed experts `ids` (held) of a prefill pass, [`EXPERT_BATCH`] at a
/// time: each batch's gate and up products in one
/// [`Backend::matmul_batch`] region, SwiGLU over all of them, the down
/// products in a second region, then the weighted sums in expert order.
/// Each product is computed as [`Backend::matmul`] computes it alone, so `y`
/// is what one expert after another gives, bit for bit.
///
/// [`Backend::matmul_batch`]: redlite_backend::Backend::matmul_batch
/// [`Backend::matmul`]: redlite_backend::Backend::matmul
#[allow(clippy::too_many_arguments)]
fn routed_batch(
    model: &Model,
    w: &MoeW,
    held: &Held,
    ids: &[usize],
    h: &[f32],
    routes: &[Vec<(usize, f32)>],
    y: &mut [f32],
    tr: &mut Tr<'_>,
) -> Result<(), ModelError> {
    MOE_SCRATCH.with(|cell| {
        let mut bufs = cell.borrow_mut();
        for (ci, sub) in ids.chunks(EXPERT_BATCH).enumerate() {
            let at = ci * EXPERT_BATCH;
            routed_sub(model, w, held, at, sub, h, routes, y, tr, &mut bufs)?;
        }
        Ok(())
    })
}

/// One batch of [`routed_batch`]: experts `ids`, the `at`-th held first.
#[allow(clippy::too_many_arguments)]
fn routed_sub(
    model: &Model,
    w: &MoeW,
    held: &Held,
    at: usize,
    ids: &[usize],
    h: &[f32],
    routes: &[Vec<(usize, f32)>],
    y: &mut [f32],
    tr: &mut Tr<'_>,
    bufs: &mut [Vec<f32>; 4],
) -> Result<(), ModelError> {
    let f = &model.gguf;
    let be = model.backend.as_ref();
    let d = model.config.n_embd;
    let [xs, gb, ub, db] = bufs;
    let mats: Vec<ExpertMats<'_>> = ids
        .iter()
        .enumerate()
        .map(|(i, &e)| held.mats(f, w, at + i, e))
        .collect::<Result<_, _>>()?;
    let ns: Vec<usize> = ids.iter().map(|&e| routes[e].len()).collect();
    let rows: usize = ns.iter().sum();
    // Each expert's tokens gathered (`[n_e, d]`), one after another.
    let xs = scratch(xs, rows * d);
    let src: Vec<usize> = ids
        .iter()
        .flat_map(|&e| routes[e].iter().map(|&(tt, _)| tt))
        .collect();
    par::gather_rows(xs, h, d, &src);
    let xes = split_rows(xs, &ns, d);
    for ((&e, &n), xe) in ids.iter().zip(&ns).zip(&xes) {
        tr.expert_input(f, &[w.gate.tensor, w.up.tensor], e, n, xe);
    }
    // Gate and up of every expert, one region; then SwiGLU over all of them.
    let sizes: Vec<usize> = ns.iter().zip(&mats).map(|(n, m)| n * m.0.n_out).collect();
    let total: usize = sizes.iter().sum();
    let (g, u) = (scratch(gb, total), scratch(ub, total));
    {
        let mut jobs = Vec::with_capacity(2 * ids.len());
        let (mut gr, mut ur) = (&mut *g, &mut *u);
        for (((gate, up, _), xe), (&n, &sz)) in mats.iter().zip(&xes).zip(ns.iter().zip(&sizes)) {
            let (gy, gn) = gr.split_at_mut(sz);
            let (uy, un) = ur.split_at_mut(sz);
            (gr, ur) = (gn, un);
            jobs.push(redlite_backend::MatJob {
                w: *gate,
                x: xe,
                n_tok: n,
                y: gy,
            });
            jobs.push(redlite_backend::MatJob {
                w: *up,
                x: xe,
                n_tok: n,
                y: uy,
            });
        }
        be.matmul_batch(&mut jobs);
    }
    be.silu_mul(g, u);
    let acts = split_rows(g, &sizes, 1);
    for ((&e, &n), act) in ids.iter().zip(&ns).zip(&acts) {
        tr.expert_input(f, &[w.down.tensor], e, n, act);
    }
    // Every down product, one region.
    let downs = scratch(db, rows * d);
    {
        let mut jobs = Vec::with_capacity(ids.len());
        let mut rest = &mut *downs;
        for (((_, _, down), act), &n) in mats.iter().zip(&acts).zip(&ns) {
            let (dy, r) = rest.split_at_mut(n * d);
            rest = r;
            jobs.push(redlite_backend::MatJob {
                w: *down,
                x: act,
                n_tok: n,
                y: dy,
            });
        }
        be.matmul_batch(&mut jobs);
    }
    // y[tt] += wt · down row, expert after expert (as scatter_add would).
    let mut adds = Vec::with_capacity(rows);
    for (&e, down) in ids.iter().zip(split_rows(downs, &ns, d)) {
        for (&(tt, wt), row) in routes[e].iter().zip(down.chunks_exact(d)) {
            adds.push((tt, wt, row));
        }
    }
    be.add_rows(y, d, &adds);
    Ok(())
}

/// `v` cut into consecutive pieces of `n_i · width` values.
fn split_rows<'a>(v: &'a [f32], ns: &[usize], width: usize) -> Vec<&'a [f32]> {
    let mut out = Vec::with_capacity(ns.len());
    let mut rest = v;
    for &n in ns {
        let (a, r) = rest.split_at(n * width);
        out.push(a);
        rest = r;
    }
    out
}
