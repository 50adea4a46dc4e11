//! The encoder of a gated attention block: q, k and v products (q beside
//! the k + v pair for decode), their norms, RoPE and the KV append, the
//! attention itself (split per query for decode and verify, the
//! tensor-core kernel for prefill) and the output product.

use super::encode::Pass;
use super::*;

impl CudaModel {
    /// Queue layer `l`'s attention mixer (state table entries `slot`: keys
    /// and values) over the pass `p`, into `s.mix`.
    pub(super) fn encode_attention(
        &self,
        p: &Pass,
        l: &DLayer,
        slot: i32,
    ) -> Result<(), CudaError> {
        let DMixer::Attention {
            q,
            k: wk,
            v,
            out,
            q_norm,
            k_norm,
        } = &l.mixer
        else {
            return Ok(());
        };
        let Pass {
            s,
            t,
            ns,
            exact,
            pair,
            seqs,
            ..
        } = *p;
        let (c, g, k) = (&self.c, &self.gpu, &self.k);
        let one =
            |m: &DMat, x: u64, y: u64| MvLaunch::new(m.ptr, m.row_bytes, m.n_in, m.n_out, x, y, 1);
        let (nh, nkv, hd) = (c.n_head, c.n_head_kv, c.head_dim);
        // q beside the k + v pair when both are jobs.
        let jobs = if pair
            && wk.ty == v.ty
            && wk.n_out == v.n_out
            && wk.row_bytes == v.row_bytes
            && wk.n_in == v.n_in
        {
            let kv = MvLaunch {
                slots: 2,
                w_zstride: v.ptr.wrapping_sub(wk.ptr),
                y_zstride: ((s.v.ptr as i64).wrapping_sub(s.k.ptr as i64) / 4) as u64,
                ..one(wk, s.h.ptr, s.k.ptr)
            };
            self.mq1_job(q.kern, &one(q, s.h.ptr, s.qg.ptr))
                .zip(self.mq1_job(wk.kern, &kv))
        } else {
            None
        };
        match jobs {
            Some((jq, jkv)) => {
                self.launch_two(jq, jkv, None)?;
            }
            None => {
                self.mv(q, s.h.ptr, s.qg.ptr, t, exact)?;
                self.mv_pair(wk, v, s.h.ptr, s.k.ptr, s.v.ptr, t, exact)?;
            }
        }
        if hd <= QK_HD_MAX {
            // Norms, RoPE and the append in one launch (the same
            // arithmetic as the five launches below).
            g.launch_f(
                k.qk_prep,
                ((t * (nh + nkv)) as u32, 1, 1),
                hd.clamp(32, 256).next_power_of_two().min(256) as u32,
                0,
                &[
                    Arg::U(s.qg.ptr),
                    Arg::U(s.q.ptr),
                    Arg::U(s.k.ptr),
                    Arg::U(s.v.ptr),
                    Arg::U(*q_norm),
                    Arg::U(*k_norm),
                    Arg::I(t as i32),
                    Arg::I(nh as i32),
                    Arg::I(nkv as i32),
                    Arg::I(hd as i32),
                    Arg::F(c.rms_eps),
                    Arg::I(self.rope_half as i32),
                    Arg::U(self.rope_pairs.ptr),
                    Arg::D(self.rope_mscale),
                    Arg::U(seqs.ctl),
                    Arg::U(seqs.tab),
                    Arg::I(slot),
                    Arg::I(seqs.bs),
                ],
            )?;
        } else {
            self.norm(
                s.qg.ptr,
                s.q.ptr,
                *q_norm,
                hd,
                t * nh,
                1,
                (2 * hd, 0, hd, 0),
                0,
                0.0,
            )?;
            self.norm(
                s.k.ptr,
                s.k.ptr,
                *k_norm,
                hd,
                t * nkv,
                1,
                (hd, 0, hd, 0),
                0,
                0.0,
            )?;
            for (buf, heads) in [(s.q.ptr, nh), (s.k.ptr, nkv)] {
                let n = t * heads * self.rope_half;
                if n == 0 {
                    continue;
                }
                g.launch_f(
                    k.rope_neox,
                    (n.div_ceil(128) as u32, 1, 1),
                    128,
                    0,
                    &[
                        Arg::U(buf),
                        Arg::I(t as i32),
                        Arg::I(heads as i32),
                        Arg::I(hd as i32),
                        Arg::I(self.rope_half as i32),
                        Arg::U(self.rope_pairs.ptr),
                        Arg::D(self.rope_mscale),
                        Arg::U(s.ctl.ptr),
                    ],
                )?;
            }
            let row = nkv * hd;
            g.launch_f(
                k.kv_append,
                ((t * row).div_ceil(256) as u32, 1, 1),
                256,
                0,
                &[
                    Arg::U(s.k.ptr),
                    Arg::U(s.v.ptr),
                    Arg::U(s.tab.ptr),
                    Arg::I(slot),
                    Arg::U(s.ctl.ptr),
                    Arg::I(t as i32),
                    Arg::I(row as i32),
                ],
            )?;
        }
        self.attention(s, t, ns, slot, exact, seqs)?;
        self.mv(out, s.att.ptr, s.mix.ptr, t, exact)?;
        Ok(())
    }

    /// Attention of the pass's `t` queries (in `s.q`, gates in `s.qg`) over
    /// the cache of `slot` (the pass's keys already appended), into `s.att`.
    /// Prefill (several tokens, not `exact`) goes through `attn_flash_<hd>`
    /// in one launch; decode and verify through splits per query (one per
    /// block of `attn_dec_<hd>`'s wave, or `ns` of `attn_split`), merged by
    /// `attn_combine(_w)`. A
    /// query's splits depend on its position alone, so a verify row equals
    /// decoding bit for bit.
    pub(super) fn attention(
        &self,
        s: &Scratch,
        t: usize,
        ns: usize,
        slot: i32,
        exact: bool,
        seqs: SeqTab,
    ) -> Result<(), CudaError> {
        let c = &self.c;
        let g = &self.gpu;
        let k = &self.k;
        let (nh, nkv, hd) = (c.n_head, c.n_head_kv, c.head_dim);
        let scale = 1.0 / (hd as f32).sqrt();
        let gate = s.qg.ptr + (hd as u64) * 4;
        if let Some((f, smem)) = self.attn_flash.filter(|_| t > 1 && !exact) {
            let qb = AF_BM / (nh / nkv);
            return g.launch_f(
                f,
                (nkv as u32, t.div_ceil(qb) as u32, 1),
                AF_THREADS,
                smem,
                &[
                    Arg::U(s.q.ptr),
                    Arg::U(s.tab.ptr),
                    Arg::I(slot),
                    Arg::U(gate),
                    Arg::U(2 * hd as u64),
                    Arg::U(s.att.ptr),
                    Arg::U(s.ctl.ptr),
                    Arg::I(t as i32),
                    Arg::I(nh as i32),
                    Arg::I(nkv as i32),
                    Arg::F(scale),
                ],
            );
        }
        let dec = self.attn_dec.filter(|_| t == 1 || exact);
        // attn_dec: one wave of blocks, one split each (a query's splits
        // then follow its position and the device alone, the same in decode
        // and verify); a short context fills fewer (`att_nsplit`).
        let ns = match dec {
            Some(_) => (g.sm_count / nkv).clamp(1, ns),
            None => ns,
        };
        let combine = match dec {
            Some((f, smem)) => {
                let z = ns;
                g.launch_f(
                    f,
                    (nkv as u32, t as u32, z as u32),
                    AD_THREADS,
                    smem,
                    &[
                        Arg::U(s.q.ptr),
                        Arg::U(seqs.tab),
                        Arg::I(slot),
                        Arg::U(s.part.ptr),
                        Arg::U(seqs.ctl),
                        Arg::I(nh as i32),
                        Arg::I(nkv as i32),
                        Arg::F(scale),
                        Arg::I(ns as i32),
                        Arg::I(seqs.bs),
                    ],
                )?;
                // The splits spread over blocks of `combine_cols` columns
                // and up to 1,024 threads.
                let cb = self.combine_cols(hd);
                (k.attn_combine_w, (cb * (1024 / cb).min(16)) as u32, cb)
            }
            None => {
                g.launch_f(
                    k.attn_split,
                    (nkv as u32, t as u32, ns as u32),
                    128,
                    0,
                    &[
                        Arg::U(s.q.ptr),
                        Arg::U(seqs.tab),
                        Arg::I(slot),
                        Arg::U(s.part.ptr),
                        Arg::U(seqs.ctl),
                        Arg::I(nh as i32),
                        Arg::I(nkv as i32),
                        Arg::I(hd as i32),
                        Arg::F(scale),
                        Arg::I(ns as i32),
                        Arg::I(seqs.bs),
                    ],
                )?;
                (k.attn_combine, hd.clamp(32, 256) as u32, hd)
            }
        };
        let mut args = vec![
            Arg::U(s.part.ptr),
            Arg::U(gate),
            Arg::U(2 * hd as u64),
            Arg::U(s.att.ptr),
            Arg::I(nh as i32),
            Arg::I(hd as i32),
            Arg::I(ns as i32),
        ];
        if dec.is_some() {
            // attn_combine_w's columns per block (attn_combine: one block per row).
            args.push(Arg::I(combine.2 as i32));
        }
        // The position: the splits in use follow it.
        args.push(Arg::U(seqs.ctl));
        args.push(Arg::I(seqs.bs));
        g.launch_f(
            combine.0,
            (nh as u32, t as u32, (hd / combine.2) as u32),
            combine.1,
            0,
            &args,
        )
    }

    /// Columns per block of `attn_combine_w` ([`CudaTuning::combine_cols`],
    /// checked to divide `hd` at load; default 64).
    pub(super) fn combine_cols(&self, hd: usize) -> usize {
        self.combine_cols
            .unwrap_or(if hd.is_multiple_of(64) { 64 } else { hd })
    }
}
