//! The encoder of a MoE block: the router and its top-k (the residual add
//! and post norm inside the F32 router for decode and verify), the routed
//! experts (paired with the shared expert for decode and batched decode,
//! one launch per matrix for verify, grouped by expert for prefill), the
//! shared expert, and the combine with the next layer's input norm.

use super::encode::Pass;
use super::*;

impl CudaModel {
    /// Queue layer `il`'s MoE block over the pass `p`: `s.x` gains the
    /// block's output and `s.h` holds the next layer's normed input.
    pub(super) fn encode_moe(&self, p: &Pass, l: &DLayer, il: usize) -> Result<(), CudaError> {
        let Pass {
            s,
            t,
            exact,
            pair_moe,
            xp,
            ..
        } = *p;
        let (c, g, k) = (&self.c, &self.gpu, &self.k);
        let d = c.n_embd;
        let one =
            |m: &DMat, x: u64, y: u64| MvLaunch::new(m.ptr, m.row_bytes, m.n_in, m.n_out, x, y, 1);
        // MoE: router, top-k, routed experts, shared expert, combine.
        let (ne, kk) = (c.n_expert, c.n_expert_used);
        let r = &l.router;
        let fused_router = self.fused_router(r).filter(|_| t == 1 || exact);
        // Decode and verify (every one of their paths, so they stay
        // equal bit for bit): the residual add and post norm inside the
        // F32 router's blocks.
        let norm_in_router =
            r.n_in == d && fused_router.is_some_and(|(f, _)| f.name == "router_f32");
        if !norm_in_router {
            g.launch_f(
                k.add_rmsnorm,
                (t as u32, 1, 1),
                d.next_multiple_of(32).min(1024) as u32,
                0,
                &[
                    Arg::U(s.x.ptr),
                    Arg::U(s.mix.ptr),
                    Arg::U(l.post_norm),
                    Arg::U(s.h.ptr),
                    Arg::I(d as i32),
                    Arg::F(c.rms_eps),
                ],
            )?;
        }
        if let Some((f, rows)) = fused_router {
            let (f, input) = if norm_in_router {
                (
                    k.router_f32n,
                    vec![
                        Arg::U(s.x.ptr),
                        Arg::U(s.mix.ptr),
                        Arg::U(l.post_norm),
                        Arg::U(s.h.ptr),
                        Arg::F(c.rms_eps),
                    ],
                )
            } else {
                (f, vec![Arg::U(s.h.ptr)])
            };
            let mut args = vec![
                Arg::U(r.ptr),
                Arg::U(r.row_bytes as u64),
                Arg::I(r.n_in as i32),
                Arg::I(ne as i32),
            ];
            args.extend(input);
            // Router and top-k in one launch, each token as decode has it.
            args.extend([
                Arg::U(s.rl.ptr),
                Arg::I(kk as i32),
                Arg::U(s.ids.ptr),
                Arg::U(s.wts.ptr),
                Arg::U(s.router_done.ptr),
                // A decode step copying this layer's experts in: mark
                // the chosen ones (xp_fetch stops on the others).
                Arg::U(
                    xp.filter(|_| l.xp.is_some())
                        .map_or(0, |x| x.marks_at(il % 2)),
                ),
                Arg::I(il as i32 + 1),
            ]);
            g.launch_f(
                f,
                (r.n_out.div_ceil(rows) as u32, 1, t as u32),
                128,
                0,
                &args,
            )?;
        } else {
            self.mv(r, s.h.ptr, s.rl.ptr, t, exact)?;
            g.launch_f(
                k.moe_topk,
                (t as u32, 1, 1),
                32,
                0,
                &[
                    Arg::U(s.rl.ptr),
                    Arg::I(ne as i32),
                    Arg::I(kk as i32),
                    Arg::U(s.ids.ptr),
                    Arg::U(s.wts.ptr),
                ],
            )?;
        }
        let slots = t * kk;
        // The shared expert (first when prefetching: it runs while the
        // prefetch may still be copying).
        let shared = || -> Result<(), CudaError> {
            let fused = if t == 1 || exact {
                match GuMat::dense(&l.sh_gate, &l.sh_up) {
                    Some(gu) => {
                        let up_off = l.sh_up.ptr.wrapping_sub(l.sh_gate.ptr);
                        self.mv_gate_up(gu, up_off, 0, t, s.h.ptr, 1, s.sg.ptr)?
                    }
                    None => false,
                }
            } else {
                false
            };
            if fused {
                // sg holds silu(gate) ⊙ up.
                self.mv(&l.sh_down, s.sg.ptr, s.sd.ptr, t, exact)?;
            } else if t == 1 || exact {
                self.mv_pair(&l.sh_gate, &l.sh_up, s.h.ptr, s.sg.ptr, s.su.ptr, t, exact)?;
                self.mv_swiglu(&l.sh_down, s.sg.ptr, s.su.ptr, s.sd.ptr, t)?;
            } else {
                self.mv_pair(&l.sh_gate, &l.sh_up, s.h.ptr, s.sg.ptr, s.su.ptr, t, exact)?;
                self.elementwise(k.swiglu, s.sg.ptr, s.su.ptr, t * l.sh_gate.n_out)?;
                self.mv(&l.sh_down, s.sg.ptr, s.sd.ptr, t, false)?;
            }
            Ok(())
        };
        if let Some(xp) = xp {
            shared()?;
            g.join_side(il % 2)?;
            if let Some(x) = l.xp {
                g.launch_f(
                    k.xp_late,
                    (xp.late_blocks, kk as u32, 1),
                    256,
                    0,
                    &[
                        Arg::U(s.ids.ptr),
                        Arg::I(kk as i32),
                        Arg::I(x.vram as i32),
                        Arg::U(x.host),
                        Arg::U(x.rec),
                        Arg::U(xp.late.ptr),
                        Arg::U(xp.lists.ptr + ((il % 2) * XP_WORDS * 8) as u64),
                        Arg::U(x.tables[0]),
                        Arg::U(x.tables[1]),
                        Arg::U(x.tables[2]),
                        Arg::U(x.off_u),
                        Arg::U(x.off_d),
                        Arg::U(xp.stats.ptr),
                    ],
                )?;
            }
        }
        // Decode: the routed experts' gate + up beside the shared
        // expert's, then their down products side by side.
        let paired = if pair_moe {
            let eg = GuMat::experts(&l.gate, &l.up).and_then(|gu| {
                self.mqgu_job(
                    gu,
                    l.gate.up_off(&l.up),
                    s.ids.ptr,
                    slots,
                    s.h.ptr,
                    kk,
                    s.eg.ptr,
                )
            });
            let sg = GuMat::dense(&l.sh_gate, &l.sh_up).and_then(|gu| {
                let up_off = l.sh_up.ptr.wrapping_sub(l.sh_gate.ptr);
                self.mqgu_job(gu, up_off, 0, t, s.h.ptr, 1, s.sg.ptr)
            });
            let dn = &l.down;
            let ed = self.mq1_job(
                dn.kern,
                &MvLaunch {
                    slots,
                    ids: s.ids.ptr,
                    w_zstride: dn.stride,
                    x_zstride: dn.n_in as u64,
                    y_zstride: dn.n_out as u64,
                    ..MvLaunch::new(
                        dn.base,
                        dn.row_bytes,
                        dn.n_in,
                        dn.n_out,
                        s.eg.ptr,
                        s.ed.ptr,
                        1,
                    )
                },
            );
            let sh = &l.sh_down;
            let sd = self.mq1_job(
                sh.kern,
                &MvLaunch {
                    slots: t,
                    x_zstride: if t > 1 { sh.n_in as u64 } else { 0 },
                    y_zstride: if t > 1 { sh.n_out as u64 } else { 0 },
                    ..one(sh, s.sg.ptr, s.sd.ptr)
                },
            );
            match (eg, sg, ed, sd) {
                (Some(eg), Some(sg), Some(ed), Some(sd)) => {
                    self.launch_two(eg, sg, None)?;
                    self.launch_two(ed, sd, None)?;
                    true
                }
                _ => false,
            }
        } else {
            false
        };
        if paired {
            // Done above.
        } else if t == 1 || exact {
            // Decode (and verify): one launch per matrix over the k
            // chosen experts of each token. The down product reads
            // silu(gate) ⊙ up directly.
            let fused = match GuMat::experts(&l.gate, &l.up) {
                Some(gu) => {
                    let up_off = l.gate.up_off(&l.up);
                    self.mv_gate_up(gu, up_off, s.ids.ptr, slots, s.h.ptr, kk, s.eg.ptr)?
                }
                None => false,
            };
            if fused {
                self.mv_experts(&l.down, s.ids.ptr, slots, s.eg.ptr, 0, 1, s.ed.ptr)?;
            } else {
                self.mv_experts(&l.gate, s.ids.ptr, slots, s.h.ptr, 0, kk, s.eg.ptr)?;
                self.mv_experts(&l.up, s.ids.ptr, slots, s.h.ptr, 0, kk, s.eu.ptr)?;
                self.mv_experts(&l.down, s.ids.ptr, slots, s.eg.ptr, s.eu.ptr, 1, s.ed.ptr)?;
            }
        } else {
            // Prefill: slots grouped by expert, each expert read once.
            g.launch_f(
                k.moe_group,
                (1, 1, 1),
                1024,
                (2 * ne * 4) as u32,
                &[
                    Arg::U(s.ids.ptr),
                    Arg::I(slots as i32),
                    Arg::I(ne as i32),
                    Arg::U(s.counts.ptr),
                    Arg::U(s.offsets.ptr),
                    Arg::U(s.perm.ptr),
                ],
            )?;
            // The up product reads the split the gate product made.
            let split = self.mv_grouped(&l.gate, s, s.h.ptr, kk, s.eg.ptr, slots, false)?;
            let same = l.up.n_in == l.gate.n_in;
            self.mv_grouped(&l.up, s, s.h.ptr, kk, s.eu.ptr, slots, split && same)?;
            self.elementwise(k.swiglu, s.eg.ptr, s.eu.ptr, slots * l.gate.n_out)?;
            self.mv_grouped(&l.down, s, s.eg.ptr, 1, s.ed.ptr, slots, false)?;
        }
        if !paired && xp.is_none() {
            shared()?;
        }
        // x += the experts' and the shared expert's outputs, then the
        // next layer's input norm (h is read for the shared gate first).
        let next_norm = self.layers.get(il + 1).map_or(0, |n| n.attn_norm);
        g.launch_f(
            k.moe_combine_norm,
            (t as u32, 1, 1),
            d.next_multiple_of(32).min(1024) as u32,
            0,
            &[
                Arg::U(s.x.ptr),
                Arg::U(s.ed.ptr),
                Arg::U(s.wts.ptr),
                Arg::I(kk as i32),
                Arg::U(s.sd.ptr),
                Arg::U(s.h.ptr),
                Arg::U(l.sh_inp),
                Arg::I(d as i32),
                Arg::U(next_norm),
                Arg::U(s.h.ptr),
                Arg::F(c.rms_eps),
                // The prediction input of layer il + 2 and this layer's
                // prediction counters.
                Arg::U(xp.and(self.layers.get(il + 2)).map_or(0, |n| n.post_norm)),
                Arg::U(xp.map_or(0, |x| x.snap.ptr + ((il % 2) * d * 4) as u64)),
                Arg::U(s.ids.ptr),
                Arg::U(xp.map_or(0, |x| x.lists.ptr + ((il % 2) * XP_WORDS * 8) as u64)),
                Arg::U(xp.map_or(0, |x| x.stats.ptr)),
                Arg::I(l.xp.map_or(0, |x| x.vram as i32)),
            ],
        )?;
        Ok(())
    }
}
