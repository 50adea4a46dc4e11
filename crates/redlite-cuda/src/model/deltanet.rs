//! The encoder of a Gated DeltaNet block: the qkv, gate and ba products
//! (paired for decode), the causal conv, the delta rule (token by token,
//! or chunked for a long prefill), the gated norm and the output product.

use super::encode::Pass;
use super::*;

impl CudaModel {
    /// Queue layer `l`'s DeltaNet mixer (the `idn`-th DeltaNet layer, state
    /// table entries `slot` and `slot + 1`) over the pass `p`, into `s.mix`.
    pub(super) fn encode_deltanet(
        &self,
        p: &Pass,
        l: &DLayer,
        slot: i32,
        idn: usize,
    ) -> Result<(), CudaError> {
        let DMixer::DeltaNet {
            qkv,
            gate,
            ba,
            conv,
            ssm_a,
            dt_bias,
            norm,
            out,
        } = &l.mixer
        else {
            return Ok(());
        };
        let Pass {
            s,
            t,
            exact,
            batch,
            pair,
            seqs,
            trail,
            ..
        } = *p;
        let (c, g, k) = (&self.c, &self.gpu, &self.k);
        let one =
            |m: &DMat, x: u64, y: u64| MvLaunch::new(m.ptr, m.row_bytes, m.n_in, m.n_out, x, y, 1);
        let (hk, hv, dk, dv) = (c.ssm_h_k, c.ssm_h_v, c.ssm_d_k, c.ssm_d_v);
        let (cd, kd) = (c.conv_dim(), c.key_dim());
        // The delta rule kernels' first arguments: the conv's output, its
        // width, the key width, ba and the per-head decay parameters.
        let delta_in = [
            Arg::U(s.u.ptr),
            Arg::I(cd as i32),
            Arg::I(kd as i32),
            Arg::U(s.ba.ptr),
            Arg::U(*ssm_a),
            Arg::U(*dt_bias),
        ];
        // Where this layer's states after each token go (verify).
        let (tconv, tssm) = match trail {
            Some((tr, j0)) => (tr.conv_at(idn, j0), tr.ssm_at(idn, j0)),
            None => (0, 0),
        };
        // One token: qkv and gate as one matrix when they lie
        // together (one launch; z right behind qkv's outputs).
        let mut ba_done = false;
        let mut conv_done = false;
        let conv_args = [
            Arg::U(*conv),
            Arg::U(s.tab.ptr),
            Arg::I(slot),
            Arg::U(s.u.ptr),
            Arg::I(cd as i32),
            Arg::I(c.conv_kernel as i32),
        ];
        let z = match qkv.joined(gate).filter(|_| t == 1) {
            Some(both) => {
                let jobs = if pair {
                    self.mq1_job(both.kern, &one(&both, s.h.ptr, s.qkv.ptr))
                        .zip(self.mq1_job(ba.kern, &one(ba, s.h.ptr, s.ba.ptr)))
                } else {
                    None
                };
                match jobs {
                    Some((j1, j2)) => {
                        // ba first, qkv + gate with the conv after it.
                        let conv = (c.conv_kernel <= CONV_KMAX).then_some(conv_args);
                        conv_done = self.launch_two(j2, j1, conv)?;
                        ba_done = true;
                    }
                    None => self.mv(&both, s.h.ptr, s.qkv.ptr, 1, exact)?,
                }
                s.qkv.ptr + (cd * 4) as u64
            }
            None => {
                self.mv(qkv, s.h.ptr, s.qkv.ptr, t, exact)?;
                self.mv(gate, s.h.ptr, s.z.ptr, t, exact)?;
                s.z.ptr
            }
        };
        if !ba_done {
            self.mv(ba, s.h.ptr, s.ba.ptr, t, exact)?;
        }
        if !conv_done {
            // Batched: a block row per sequence.
            let rows_y = if batch { t } else { t.div_ceil(CONV_TB) };
            g.launch_f(
                k.conv_silu,
                (cd.div_ceil(128) as u32, rows_y as u32, 1),
                128,
                0,
                &[
                    Arg::U(s.qkv.ptr),
                    Arg::I(t as i32),
                    Arg::I(cd as i32),
                    Arg::I(c.conv_kernel as i32),
                    Arg::U(*conv),
                    Arg::U(seqs.tab),
                    Arg::I(slot),
                    Arg::U(s.u.ptr),
                    Arg::U(tconv),
                    Arg::U((c.conv_dim() * (c.conv_kernel - 1)) as u64),
                    Arg::I(seqs.bs),
                ],
            )?;
        }
        // Several tokens: their scalars first, all at once (one
        // warp per key head, up to 32).
        let pre = if t > 1 && hk <= 32 {
            g.launch_f(
                k.delta_prep,
                (t as u32, 1, 1),
                (32 * hk).clamp(32, 1024) as u32,
                0,
                &[
                    &delta_in[..],
                    &[
                        Arg::U(s.dpre.ptr),
                        Arg::I(hk as i32),
                        Arg::I(hv as i32),
                        Arg::I(dk as i32),
                        Arg::F(c.rms_eps),
                        Arg::D(1.0 / (dk as f64).sqrt()),
                    ],
                ]
                .concat(),
            )?;
            s.dpre.ptr
        } else {
            0
        };
        // A long prefill pass (not verify): the chunked form.
        let chunked = pre != 0 && !exact && self.delta_chunk_min.is_some_and(|m| t >= m);
        if chunked {
            let nch = t.div_ceil(DC_L) as u32;
            let bufs = [
                Arg::U(s.dcu.ptr),
                Arg::U(s.dcw.ptr),
                Arg::U(s.dcq.ptr),
                Arg::U(s.dck.ptr),
                Arg::U(s.dcp.ptr),
                Arg::U(s.dce.ptr),
            ];
            let mut args = delta_in.to_vec();
            args.extend([
                Arg::U(pre),
                Arg::I(t as i32),
                Arg::I(hk as i32),
                Arg::I(hv as i32),
                Arg::I(dk as i32),
                Arg::I(dv as i32),
            ]);
            args.extend_from_slice(&bufs);
            g.launch_f(
                k.delta_chunk_prep,
                (nch, hv as u32, 1),
                256,
                DC_PREP_SMEM,
                &args,
            )?;
            let mut args = vec![
                Arg::U(s.tab.ptr),
                Arg::I(slot + 1),
                Arg::U(s.o.ptr),
                Arg::I(t as i32),
                Arg::I(hv as i32),
                Arg::I(dk as i32),
                Arg::I(dv as i32),
            ];
            args.extend_from_slice(&bufs);
            g.launch_f(
                k.delta_chunk_state,
                (hv as u32, dv.div_ceil(DC_J) as u32, 1),
                256,
                DC_STATE_SMEM,
                &args,
            )?;
        } else {
            g.launch_f(
                k.delta_rule,
                (hv as u32, dv.div_ceil(4) as u32, seqs.z(t)),
                128,
                0,
                &[
                    &delta_in[..],
                    &[
                        Arg::U(seqs.tab),
                        Arg::I(slot + 1),
                        Arg::U(s.o.ptr),
                        Arg::I(t as i32),
                        Arg::I(hk as i32),
                        Arg::I(hv as i32),
                        Arg::I(dk as i32),
                        Arg::I(dv as i32),
                        Arg::F(c.rms_eps),
                        Arg::D(1.0 / (dk as f64).sqrt()),
                        Arg::U(tssm),
                        Arg::U((hv * dv * dk) as u64),
                        Arg::U(pre),
                        Arg::I(seqs.bs),
                    ],
                ]
                .concat(),
            )?;
        }
        g.launch_f(
            k.gated_rmsnorm,
            ((t * hv) as u32, 1, 1),
            dv.clamp(32, 256).next_power_of_two().min(256) as u32,
            0,
            &[
                Arg::U(s.o.ptr),
                Arg::U(z),
                Arg::U(*norm),
                Arg::I(dv as i32),
                Arg::F(c.rms_eps),
            ],
        )?;
        self.mv(out, s.o.ptr, s.mix.ptr, t, exact)?;
        Ok(())
    }
}
