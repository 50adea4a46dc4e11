//! A pass as launches: the inputs prepared, the layers encoded in order
//! (each block by its own encoder: `deltanet.rs`, `attention.rs`,
//! `moe.rs`), the LM head, and the captured decode and batched steps.

use super::*;

/// What every block encoder of one pass reads (see [`CudaModel::encode`]):
/// the scratch, the tokens, the attention splits, whether each token is
/// computed as its decode step alone (`exact`: verify and batched passes),
/// whether the tokens are one sequence's or one each of `batch` sequences,
/// whether one-token products pair up (`pair`; `pair_moe` for the MoE's),
/// where the sequences' states are, the verify trail and the prefetch.
#[derive(Clone, Copy)]
pub(super) struct Pass<'a> {
    pub(super) s: &'a Scratch,
    pub(super) t: usize,
    pub(super) ns: usize,
    pub(super) exact: bool,
    pub(super) batch: bool,
    pub(super) pair: bool,
    pub(super) pair_moe: bool,
    pub(super) seqs: SeqTab,
    pub(super) trail: Option<(&'a TrailBufs, usize)>,
    pub(super) xp: Option<&'a XpBufs>,
}

impl CudaModel {
    /// Before a pass over `tokens` of `st`: room in the KV cache, and the
    /// token ids, control words and state table on the device.
    pub(super) fn prepare(
        &self,
        s: &mut Scratch,
        st: &mut CudaState,
        tokens: &[u32],
    ) -> Result<(), CudaError> {
        let g = &self.gpu;
        st.reserve(g, &self.c, st.pos + tokens.len())?;
        let ids: Vec<i32> = tokens.iter().map(|&x| x as i32).collect();
        g.htod(s.tok.ptr, &ids)?;
        g.htod(s.ctl.ptr, &[st.pos as i32, tokens.len() as i32, 0, 0])?;
        let mut tab = Vec::with_capacity(2 * self.layers.len());
        self.state_tab(st, &mut tab);
        if tab != s.tab_host {
            g.htod(s.tab.ptr, &tab)?;
            s.tab_host = tab;
        }
        Ok(())
    }

    /// Append `st`'s state table (per layer two pointers: conv and
    /// DeltaNet state, or keys and values) to `tab`.
    pub(super) fn state_tab(&self, st: &CudaState, tab: &mut Vec<u64>) {
        let (mut idn, mut iat) = (0, 0);
        for l in &self.layers {
            match l.mixer {
                DMixer::DeltaNet { .. } => {
                    tab.push(st.conv[idn].ptr);
                    tab.push(st.ssm[idn].ptr);
                    idn += 1;
                }
                DMixer::Attention { .. } => {
                    tab.push(st.k[iat].ptr);
                    tab.push(st.v[iat].ptr);
                    iat += 1;
                }
            }
        }
    }

    /// Before a batched decode pass over `sts` (at most `B_MAX`), one token
    /// each: room in each KV cache, then the token ids, the control words
    /// and the state tables on the device.
    pub(super) fn prepare_batch(
        &self,
        s: &mut Scratch,
        sts: &mut [&mut CudaState],
        tokens: &[u32],
    ) -> Result<(), CudaError> {
        let g = &self.gpu;
        let mut tab = Vec::with_capacity(sts.len() * 2 * self.layers.len());
        let mut ctl = Vec::with_capacity(4 * sts.len());
        for st in sts.iter_mut() {
            st.reserve(g, &self.c, st.pos + 1)?;
            self.state_tab(st, &mut tab);
            ctl.extend([st.pos as i32, 1, 0, 0]);
        }
        let ids: Vec<i32> = tokens.iter().map(|&x| x as i32).collect();
        g.htod(s.tok.ptr, &ids)?;
        g.htod(s.bctl.ptr, &ctl)?;
        if tab != s.btab_host {
            g.htod(s.btab.ptr, &tab)?;
            s.btab_host = tab;
        }
        Ok(())
    }

    /// Whether this model takes batched decode passes: `qk_prep` for its
    /// heads and `attn_dec` or `attn_split` for its attention (the prefill
    /// kernels of wider heads read one sequence's position only).
    pub(super) fn batches(&self) -> bool {
        self.c.head_dim <= QK_HD_MAX
    }

    /// One batched decode pass over `sts` (prepared; at most `B_MAX`):
    /// replay the pass captured for this many sequences, capturing it at
    /// the first (launched directly while profiling).
    pub(super) fn batch_step(&self, s: &mut Scratch, n: usize) -> Result<(), CudaError> {
        if self.gpu.profiling() {
            return self.encode(s, n, NS_DECODE, n, None, true);
        }
        if !s.bgraphs.contains_key(&n) {
            self.gpu.begin_capture()?;
            let enc = self.encode(s, n, NS_DECODE, n, None, true);
            let graph = self.gpu.end_capture();
            enc?;
            s.bgraphs.insert(n, graph?);
        }
        match s.bgraphs.get(&n) {
            Some(gr) => self.gpu.replay(gr),
            None => Ok(()),
        }
    }

    /// Queue one pass over `t` tokens (at most `Scratch::t`) prepared by
    /// [`CudaModel::prepare`] at position `pos0`, then the LM head over the
    /// last `rows` of them (logits in `s.logits`). Launches only: no copy, no
    /// synchronisation, so a decode step can be captured as a graph (the
    /// kernels read the position and the state pointers from the device; `ns`
    /// attention splits). With `trail` the pass is a verify pass: every
    /// token is computed exactly as a decode step would compute it (the
    /// one-token kernels and their several-token twins, decode's attention
    /// splits, experts per token), and the recurrent states after each token
    /// are written to the trail.
    pub(super) fn encode(
        &self,
        s: &Scratch,
        t: usize,
        ns: usize,
        rows: usize,
        trail: Option<(&TrailBufs, usize)>,
        batch: bool,
    ) -> Result<(), CudaError> {
        let c = &self.c;
        // A batched decode pass computes each token as a verify pass does
        // (each exactly as its decode step alone).
        let exact = trail.is_some() || batch;
        let seqs = SeqTab::of(s, batch, self.layers.len());
        let mut idn = 0usize;
        let g = &self.gpu;
        let k = &self.k;
        let d = c.n_embd;
        let te = &self.token_embd;
        // Programmatic dependent launch for decode and verify with every
        // expert in device memory (H200, tg128: 169.4 -> 179.3 tok/s with
        // router_f32); off for prefill and for experts read over the bus
        // (72.8 -> 71.0 tok/s with it).
        g.set_pdl((t == 1 || exact) && self.placement.is_none());
        g.launch_f(
            k.getrows_embd,
            (t as u32, 1, 1),
            128,
            0,
            &[
                Arg::U(te.ptr),
                Arg::U(te.row_bytes as u64),
                Arg::I(d as i32),
                Arg::U(s.tok.ptr),
                Arg::U(s.x.ptr),
            ],
        )?;
        // The expert prefetch (one-token decode with experts placed apart):
        // layers 0 and 1 predicted from the embeddings, layer m > 1 from
        // layer m - 1's input (written by layer m - 2's MoE combine).
        let xp = self.xp.as_ref().filter(|_| t == 1 && !exact);
        let nl = self.layers.len();
        if let Some(xp) = xp {
            let w1 = self.layers.get(1).unwrap_or(&self.layers[0]).post_norm;
            g.launch_f(
                k.xp_scale,
                (2, 1, 1),
                256,
                0,
                &[
                    Arg::U(s.x.ptr),
                    Arg::U(self.layers[0].post_norm),
                    Arg::U(w1),
                    Arg::U(xp.snap.ptr),
                    Arg::U(xp.snap.ptr + (d * 4) as u64),
                    Arg::I(d as i32),
                ],
            )?;
            for m in 0..nl.min(2) {
                self.prefetch(xp, m)?;
            }
        }
        // Decode with every expert in device memory: independent one-token
        // products two at a time (`launch_two`).
        let pair = t == 1 && !exact && xp.is_none() && self.placement.is_none();
        // A batched decode pass pairs the MoE's products the same way, a
        // slot per (sequence, choice) for the routed experts and a slot per
        // sequence for the shared expert (each row's sums are what the
        // one-token kernel gives it alone, whatever the grid).
        let pair_moe = pair || (batch && xp.is_none() && self.placement.is_none());
        let p = Pass {
            s,
            t,
            ns,
            exact,
            batch,
            pair,
            pair_moe,
            seqs,
            trail,
            xp,
        };
        for (il, l) in self.layers.iter().enumerate() {
            let slot = (2 * il) as i32;
            if il == 0 {
                // Later layers' input norms come with the previous layer's MoE combine.
                self.norm(s.x.ptr, s.h.ptr, l.attn_norm, d, t, 1, (d, 0, d, 0), 0, 0.0)?;
            }
            match &l.mixer {
                DMixer::DeltaNet { .. } => {
                    self.encode_deltanet(&p, l, slot, idn)?;
                    idn += 1;
                }
                DMixer::Attention { .. } => self.encode_attention(&p, l, slot)?,
            }
            self.encode_moe(&p, l, il)?;
            if let Some(xp) = xp.filter(|_| il + 2 < nl) {
                self.prefetch(xp, il + 2)?;
            }
        }
        if let Some(xp) = xp {
            // Every table as uploaded again.
            g.launch_f(
                k.xp_restore,
                (1, 1, 1),
                32,
                0,
                &[
                    Arg::U(xp.lists.ptr),
                    Arg::I(2),
                    Arg::U(xp.marks.ptr),
                    Arg::I((XP_MARK_PAD + c.n_expert) as i32),
                ],
            )?;
        }
        // Final norm and LM head over the last `rows` hidden states.
        if rows > 0 {
            let first = s.x.ptr + ((t - rows) * d * 4) as u64;
            self.norm(
                first,
                s.h.ptr,
                self.output_norm,
                d,
                rows,
                1,
                (d, 0, d, 0),
                0,
                0.0,
            )?;
            self.mv(&self.output, s.h.ptr, s.logits.ptr, rows, exact)?;
        }
        Ok(())
    }

    /// One decode step of `st` (prepared): replay the captured graph, capturing
    /// it at the first step.
    pub(super) fn decode_step(&self, s: &mut Scratch) -> Result<(), CudaError> {
        if s.graph.is_none() {
            self.gpu.begin_capture()?;
            let enc = self.encode(s, 1, NS_DECODE, 1, None, false);
            let graph = self.gpu.end_capture();
            enc?;
            s.graph = Some(graph?);
        }
        match &s.graph {
            Some(gr) => self.gpu.replay(gr),
            None => Ok(()),
        }
    }
}
