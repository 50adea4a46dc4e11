//! The products and small launches a pass is made of: matrix × activations
//! on every path (one token, an exact several-token pass, a prefill tile,
//! the grouped experts), the paired one-token launches, the norms.

use super::*;

/// The arguments of `mv` / `mv1` / `mq1` (the same list for each) for `a`.
pub(super) fn mv_args(a: &MvLaunch) -> [Arg; 15] {
    [
        Arg::U(a.w),
        Arg::U(a.row_bytes as u64),
        Arg::I(a.n_in as i32),
        Arg::I(a.n_out as i32),
        Arg::U(a.x),
        Arg::I(a.n_in as i32),
        Arg::U(a.y),
        Arg::I(a.n_out as i32),
        Arg::I(a.n_tok as i32),
        Arg::U(a.ids),
        Arg::U(a.w_zstride),
        Arg::I(a.x_div as i32),
        Arg::U(a.x_zstride),
        Arg::U(a.y_zstride),
        Arg::U(a.x2),
    ]
}

/// The arguments of one matrix-vector launch (`DEF_MATVEC` in
/// `products.cuh`, in its order): `slots` matrices at `w + e·w_zstride` (`e`
/// from `ids`, or the slot), inputs at `x + (slot / x_div)·x_zstride`,
/// outputs at `y + slot·y_zstride`; `x2` non-null: the input is
/// `silu(x) ⊙ x2`.
pub(super) struct MvLaunch {
    pub(super) w: u64,
    pub(super) row_bytes: usize,
    pub(super) n_in: usize,
    pub(super) n_out: usize,
    pub(super) x: u64,
    pub(super) y: u64,
    pub(super) n_tok: usize,
    pub(super) slots: usize,
    pub(super) ids: u64,
    pub(super) w_zstride: u64,
    pub(super) x_div: usize,
    pub(super) x_zstride: u64,
    pub(super) y_zstride: u64,
    pub(super) x2: u64,
}

impl MvLaunch {
    /// One matrix over `n_tok` tokens (rows of `n_in` inputs, `n_out` outputs).
    pub(super) fn new(
        w: u64,
        row_bytes: usize,
        n_in: usize,
        n_out: usize,
        x: u64,
        y: u64,
        n_tok: usize,
    ) -> MvLaunch {
        MvLaunch {
            w,
            row_bytes,
            n_in,
            n_out,
            x,
            y,
            n_tok,
            slots: 1,
            ids: 0,
            w_zstride: 0,
            x_div: 1,
            x_zstride: 0,
            y_zstride: 0,
            x2: 0,
        }
    }
}

/// A one-token product on 16-bit activations (`mq1_T` or `mqgu_T`), made
/// ready to launch alone or beside another ([`CudaModel::launch_two`]).
pub(super) struct MqJob {
    pub(super) f: Func,
    /// The kernel's own arguments.
    pub(super) args: Vec<Arg>,
    /// Blocks per slot when launched alone, and the most that have work (a
    /// warp per row at least).
    pub(super) blocks: u32,
    pub(super) max_blocks: u32,
    pub(super) slots: u32,
    /// Weight bytes read (how two jobs share the device).
    pub(super) bytes: usize,
}

/// The arguments of `mvgu_T` / `mqgu_T` (`MQGU_PARAMS` in
/// `q16_products.cuh`, in its order): slot z multiplies gate `e` (`ids[z]`,
/// or z) of `g` and its up twin `up_off` bytes on with `x + (z / x_div)·n_in`
/// and writes `y + z·n_out`.
pub(super) struct GuLaunch {
    pub(super) g: GuMat,
    pub(super) up_off: u64,
    pub(super) ids: u64,
    pub(super) x: u64,
    pub(super) x_div: usize,
    pub(super) y: u64,
}

impl GuLaunch {
    pub(super) fn args(&self) -> [Arg; 12] {
        let g = &self.g;
        [
            Arg::U(g.base),
            Arg::U(self.up_off),
            Arg::U(g.row_bytes as u64),
            Arg::I(g.n_in as i32),
            Arg::I(g.n_out as i32),
            Arg::U(self.x),
            Arg::U(self.y),
            Arg::U(self.ids),
            Arg::U(g.stride),
            Arg::I(self.x_div as i32),
            Arg::U(g.n_in as u64),
            Arg::U(g.n_out as u64),
        ]
    }
}

impl CudaModel {
    /// `y = M·x` over `t` tokens; `exact`: each token computed exactly as a
    /// one-token pass computes it (a verify pass), else the fastest way.
    pub(super) fn mv(
        &self,
        m: &DMat,
        x: u64,
        y: u64,
        t: usize,
        exact: bool,
    ) -> Result<(), CudaError> {
        if t > 1 && !exact && m.n_in.is_multiple_of(32) {
            let blocks = m.n_out.div_ceil(128) * t.div_ceil(128);
            if let Some(k) = m
                .mmx
                .filter(|_| t * m.n_in <= self.xsp_cap && blocks >= self.tcx_min_blocks)
            {
                let (hi, lo, sums) = self.split(x, m.n_in, t)?;
                return self.gpu.launch_f(
                    k.f,
                    (m.n_out.div_ceil(128) as u32, t.div_ceil(k.tokens) as u32, 1),
                    k.threads,
                    k.smem,
                    &[
                        Arg::U(m.ptr),
                        Arg::U(m.row_bytes as u64),
                        Arg::I(m.n_in as i32),
                        Arg::I(m.n_out as i32),
                        Arg::U(hi),
                        Arg::U(lo),
                        Arg::U(sums),
                        Arg::U(y),
                        Arg::I(m.n_out as i32),
                        Arg::I(t as i32),
                    ],
                );
            }
            return self.gpu.launch_f(
                m.mm.f,
                (
                    m.n_out.div_ceil(64) as u32,
                    t.div_ceil(m.mm.tokens) as u32,
                    1,
                ),
                m.mm.threads,
                m.mm.smem,
                &[
                    Arg::U(m.ptr),
                    Arg::U(m.row_bytes as u64),
                    Arg::I(m.n_in as i32),
                    Arg::I(m.n_out as i32),
                    Arg::U(x),
                    Arg::I(m.n_in as i32),
                    Arg::U(y),
                    Arg::I(m.n_out as i32),
                    Arg::I(t as i32),
                ],
            );
        }
        self.launch_mv(
            m.kern,
            MvLaunch::new(m.ptr, m.row_bytes, m.n_in, m.n_out, x, y, t),
            exact,
        )
    }

    /// Split `rows` rows of `n_in` inputs at `x` (contiguous) into `xsp`
    /// (`tc_split`): the addresses of their hi and lo halves and their sums.
    pub(super) fn split(
        &self,
        x: u64,
        n_in: usize,
        rows: usize,
    ) -> Result<(u64, u64, u64), CudaError> {
        let n = (rows * n_in) as u64;
        let (hi, lo, sums) = (self.xsp.ptr, self.xsp.ptr + 2 * n, self.xsp.ptr + 4 * n);
        self.gpu.launch_f(
            self.tc_split,
            ((rows * n_in / 8).div_ceil(256) as u32, 1, 1),
            256,
            0,
            &[
                Arg::U(x),
                Arg::I(n_in as i32),
                Arg::I(n_in as i32),
                Arg::I(rows as i32),
                Arg::U(hi),
                Arg::U(lo),
                Arg::U(sums),
            ],
        )?;
        Ok((hi, lo, sums))
    }

    /// Launch the matrix-vector kernel of `k` that suits `a` (see
    /// [`CudaModel::pick`]).
    pub(super) fn launch_mv(
        &self,
        k: MvKernels,
        a: MvLaunch,
        exact: bool,
    ) -> Result<(), CudaError> {
        let grid = match k.mq {
            // One token on 16-bit activations: `mq1` takes `mv1`'s arguments
            // on a grid that fills the device.
            Some(mq) if a.n_tok == 1 => (mq.mq1, (self.mq_blocks(a.n_out, a.slots), 1)),
            Some(mq) if exact && a.ids == 0 && a.x_zstride == 0 && a.n_tok <= V_MAX => {
                return self.launch_mqn(mq.mqn, &a);
            }
            _ => {
                let (f, rows, tile) = self.pick(k, a.n_in, a.n_tok, exact);
                (
                    f,
                    (a.n_out.div_ceil(rows) as u32, a.n_tok.div_ceil(tile) as u32),
                )
            }
        };
        let (f, (gx, gy)) = grid;
        self.gpu
            .launch_f(f, (gx, gy, a.slots as u32), 128, 0, &mv_args(&a))
    }

    /// `a` as an `mq1` job, when it is one token on 16-bit activations.
    pub(super) fn mq1_job(&self, k: MvKernels, a: &MvLaunch) -> Option<MqJob> {
        let mq = k.mq.filter(|_| a.n_tok == 1)?;
        Some(MqJob {
            f: mq.mq1,
            args: mv_args(a).to_vec(),
            blocks: self.mq_blocks(a.n_out, a.slots),
            max_blocks: a.n_out.div_ceil(4).max(1) as u32,
            slots: a.slots as u32,
            bytes: a.n_out * a.row_bytes * a.slots,
        })
    }

    /// `mv_gate_up`'s launch as an `mqgu` job, when it is one.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn mqgu_job(
        &self,
        g: GuMat,
        up_off: u64,
        ids: u64,
        slots: usize,
        x: u64,
        x_div: usize,
        y: u64,
    ) -> Option<MqJob> {
        if g.n_in > MV_XS {
            return None;
        }
        let mq = g.kern.mq?;
        Some(MqJob {
            f: mq.mqgu,
            args: GuLaunch {
                g,
                up_off,
                ids,
                x,
                x_div,
                y,
            }
            .args()
            .to_vec(),
            blocks: self.mq_blocks(g.n_out, slots),
            max_blocks: g.n_out.div_ceil(4).max(1) as u32,
            slots: slots as u32,
            bytes: 2 * g.n_out * g.row_bytes * slots,
        })
    }

    /// Launch one job alone.
    pub(super) fn launch_job(&self, j: &MqJob) -> Result<(), CudaError> {
        self.gpu
            .launch_f(j.f, (j.blocks, 1, j.slots), 128, 0, &j.args)
    }

    /// Two independent jobs (neither reads what the other writes): one
    /// launch of their paired kernel when it exists (the device's blocks
    /// shared by weight bytes, the smaller job's first), else one each, `a`
    /// first. `conv` (`mq1` pairs): DeltaNet's conv as the epilogue of `b`
    /// (`MqConv` in `q16_products.cuh`: weights, state table, slot, output,
    /// channels, kernel length), applied only where `b` runs second in the
    /// paired kernel; the answer says whether it was.
    pub(super) fn launch_two(
        &self,
        a: MqJob,
        b: MqJob,
        conv: Option<[Arg; 6]>,
    ) -> Result<bool, CudaError> {
        let (small, big) = if a.bytes <= b.bytes {
            (&a, &b)
        } else {
            (&b, &a)
        };
        let split = |f: Func| f.name.split_once('_');
        let paired = match (split(small.f), split(big.f)) {
            (Some((ks, ts)), Some((kb, tb))) if ks == kb => {
                let p = self.k.pairs.get(&format!("{ks}p_{ts}__{tb}"));
                match p {
                    Some(f) => Some((*f, small, big)),
                    None => self
                        .k
                        .pairs
                        .get(&format!("{ks}p_{tb}__{ts}"))
                        .map(|f| (*f, big, small)),
                }
            }
            _ => None,
        };
        let Some((f, first, second)) = paired else {
            self.launch_job(&a)?;
            self.launch_job(&b)?;
            return Ok(false);
        };
        // Blocks per slot in proportion to the bytes, within what each has
        // work for, the two together filling the device once.
        let fill = (self.gpu.sm_count * self.mq_fill) as u64;
        let total = (first.bytes + second.bytes).max(1) as u64;
        let (z1, z2) = (first.slots.max(1) as u64, second.slots.max(1) as u64);
        let n1 = (fill * first.bytes as u64 / total / z1).clamp(1, first.max_blocks as u64);
        let n2 = (fill.saturating_sub(n1 * z1) / z2).clamp(1, second.max_blocks as u64);
        let n1 = (fill.saturating_sub(n2 * z2) / z1).clamp(1, first.max_blocks as u64);
        let mut args = first.args.clone();
        args.push(Arg::I(n1 as i32));
        args.push(Arg::I(z1 as i32));
        args.extend_from_slice(&second.args);
        args.push(Arg::I(n2 as i32));
        let mut applied = false;
        if f.name.starts_with("mq1p_") {
            match conv.filter(|_| std::ptr::eq(second, &b)) {
                Some(c) => {
                    args.extend_from_slice(&c);
                    applied = true;
                }
                None => args.extend_from_slice(&[
                    Arg::U(0),
                    Arg::U(0),
                    Arg::I(0),
                    Arg::U(0),
                    Arg::I(0),
                    Arg::I(0),
                ]),
            }
        }
        self.gpu
            .launch_f(f, ((n1 * z1 + n2 * z2) as u32, 1, 1), 128, 0, &args)?;
        Ok(applied)
    }

    /// The kernel for `t` tokens of `n_in` inputs, the output rows one
    /// block covers and the tokens it takes: the one-token kernel (`MV1_R`
    /// rows per warp) when it applies, its several-token twin for an exact
    /// pass (each token's sums as `mv1` makes them), else `mv`. (Beyond
    /// `MV_XS` inputs every token count takes `mv`, whose sums do not
    /// depend on the token count either.)
    pub(super) fn pick(
        &self,
        k: MvKernels,
        n_in: usize,
        t: usize,
        exact: bool,
    ) -> (Func, usize, usize) {
        if n_in > MV_XS {
            (k.mv, 4, 8)
        } else if t == 1 {
            (k.mv1, 4 * MV1_R, 1)
        } else if exact {
            (k.mvn, 4 * MV1_R, MVN_NT)
        } else {
            (k.mv, 4, 8)
        }
    }

    /// Blocks per slot of a streaming integer kernel over `n_out` rows and
    /// `slots` slots: enough for every warp a row, at most what fills the
    /// device (`MQ_BLOCKS_PER_SM` per multiprocessor over all slots).
    pub(super) fn mq_blocks(&self, n_out: usize, slots: usize) -> u32 {
        let fill = (self.gpu.sm_count * self.mq_fill).div_ceil(slots.max(1));
        n_out.div_ceil(4).min(fill).max(1) as u32
    }

    /// Blocks per slot of `mqn` over `n_out` rows and `slots` slots (token
    /// tiles counted as slots): enough for every warp a row, at most one
    /// wave of the blocks a multiprocessor holds (`MQN_BLOCKS_PER_SM`).
    pub(super) fn mqn_blocks(&self, n_out: usize, slots: usize) -> u32 {
        let fill = (self.gpu.sm_count * MQN_BLOCKS_PER_SM).div_ceil(slots.max(1));
        n_out.div_ceil(4).min(fill).max(1) as u32
    }

    /// A verify pass's product on 16-bit activations: the tokens' inputs
    /// quantized into the model's `q16_units` / `q16_scales` (`q16_quant`,
    /// the quantizer `mq1` runs per block), then `mqn` over them; `a` has no
    /// expert ids, one input for its slots and at most `V_MAX` tokens.
    /// The quantization is skipped when `q16_units` holds this input already
    /// and nothing was queued since (the product before read the same one).
    pub(super) fn launch_mqn(&self, f: Func, a: &MvLaunch) -> Result<(), CudaError> {
        let key: Q16Key = (a.x, a.x2, a.n_in, a.n_tok);
        let mut held = self.q16_held.lock().unwrap_or_else(|e| e.into_inner());
        let fresh = *held == Some((key, self.gpu.launches()));
        if !fresh {
            let warps = a.n_tok * (a.n_in / 256);
            self.gpu.launch_f(
                self.k.q16_quant,
                (warps.div_ceil(4) as u32, 1, 1),
                128,
                0,
                &[
                    Arg::U(a.x),
                    Arg::U(a.x2),
                    Arg::I(a.n_in as i32),
                    Arg::I(a.n_tok as i32),
                    Arg::U(self.q16_units.ptr),
                    Arg::U(self.q16_scales.ptr),
                ],
            )?;
        }
        self.gpu.launch_f(
            f,
            (
                self.mqn_blocks(a.n_out, a.slots * a.n_tok.div_ceil(MQN_NT)),
                a.n_tok.div_ceil(MQN_NT) as u32,
                a.slots as u32,
            ),
            128,
            0,
            &[
                Arg::U(a.w),
                Arg::U(a.row_bytes as u64),
                Arg::I(a.n_in as i32),
                Arg::I(a.n_out as i32),
                Arg::U(self.q16_units.ptr),
                Arg::U(self.q16_scales.ptr),
                Arg::U(a.y),
                Arg::I(a.n_out as i32),
                Arg::I(a.n_tok as i32),
                Arg::U(a.w_zstride),
                Arg::U(a.y_zstride),
            ],
        )?;
        // The product wrote y only (never x or x2: a product's output is
        // another buffer), so the quantized input still stands.
        *held = Some((key, self.gpu.launches()));
        Ok(())
    }

    /// `y = M·(silu(g) ⊙ u)` over `t` tokens (one, or an exact pass), the
    /// SwiGLU product formed as the kernel reads its input.
    pub(super) fn mv_swiglu(
        &self,
        m: &DMat,
        g: u64,
        u: u64,
        y: u64,
        t: usize,
    ) -> Result<(), CudaError> {
        self.launch_mv(
            m.kern,
            MvLaunch {
                x2: u,
                ..MvLaunch::new(m.ptr, m.row_bytes, m.n_in, m.n_out, g, y, t)
            },
            true,
        )
    }

    /// `ya = A·x` and `yb = B·x` in one launch when A and B have the same
    /// type and shape (slot 1 reaches B and `yb` by pointer differences),
    /// else two.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn mv_pair(
        &self,
        a: &DMat,
        b: &DMat,
        x: u64,
        ya: u64,
        yb: u64,
        t: usize,
        exact: bool,
    ) -> Result<(), CudaError> {
        if (t > 1 && !exact)
            || a.ty != b.ty
            || a.n_in != b.n_in
            || a.n_out != b.n_out
            || a.row_bytes != b.row_bytes
        {
            self.mv(a, x, ya, t, exact)?;
            return self.mv(b, x, yb, t, exact);
        }
        // Slot 1 reaches B and `yb` by pointer differences (wrapping).
        self.launch_mv(
            a.kern,
            MvLaunch {
                slots: 2,
                w_zstride: b.ptr.wrapping_sub(a.ptr),
                y_zstride: ((yb as i64).wrapping_sub(ya as i64) / 4) as u64,
                ..MvLaunch::new(a.ptr, a.row_bytes, a.n_in, a.n_out, x, ya, t)
            },
            exact,
        )
    }

    /// Expert products for `slots` (token, choice) pairs: slot z multiplies
    /// expert ids[z] with x + (z / x_div)·n_in and writes y + z·n_out.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn mv_experts(
        &self,
        m: &DExperts,
        ids: u64,
        slots: usize,
        x: u64,
        x2: u64,
        x_div: usize,
        y: u64,
    ) -> Result<(), CudaError> {
        self.launch_mv(
            m.kern,
            MvLaunch {
                slots,
                ids,
                w_zstride: m.stride,
                x_div,
                x_zstride: m.n_in as u64,
                y_zstride: m.n_out as u64,
                x2,
                ..MvLaunch::new(m.base, m.row_bytes, m.n_in, m.n_out, x, y, 1)
            },
            true,
        )
    }

    /// `y_z = silu(G_z·x_z) ⊙ (U_z·x_z)` for `slots` one-token slots with
    /// `mvgu` (see `products.cuh`), when gate and up are alike (type, shape,
    /// stride) and the input fits the one-token kernels; `Ok(false)` when
    /// they do not (the caller runs the separate products).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn mv_gate_up(
        &self,
        g: GuMat,
        up_off: u64,
        ids: u64,
        slots: usize,
        x: u64,
        x_div: usize,
        y: u64,
    ) -> Result<bool, CudaError> {
        if g.n_in > MV_XS {
            return Ok(false);
        }
        let (f, blocks) = match g.kern.mq {
            Some(m) => (m.mqgu, self.mq_blocks(g.n_out, slots)),
            None => (g.kern.mvgu, g.n_out.div_ceil(4) as u32),
        };
        self.gpu.launch_f(
            f,
            (blocks, 1, slots as u32),
            128,
            0,
            &GuLaunch {
                g,
                up_off,
                ids,
                x,
                x_div,
                y,
            }
            .args(),
        )?;
        Ok(true)
    }

    /// Expert products grouped by expert (after `moe_group`): every slot q
    /// of the pass's `slots` reads x + (q / x_div)·n_in and writes
    /// y + q·n_out. `split`: the call before split this x for `mmgx_T`
    /// (the same rows and row length) and it is split still. Returns
    /// whether this call's x is split now.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn mv_grouped(
        &self,
        m: &DExperts,
        s: &Scratch,
        x: u64,
        x_div: usize,
        y: u64,
        slots: usize,
        split: bool,
    ) -> Result<bool, CudaError> {
        let many = slots >= self.wide_slots * self.c.n_expert;
        let rows = slots / x_div;
        if let Some(k) = m
            .mmgx
            .filter(|_| many && slots.is_multiple_of(x_div) && rows * m.n_in <= self.xsp_cap)
        {
            let n = (rows * m.n_in) as u64;
            let (hi, lo, sums) = if split {
                (self.xsp.ptr, self.xsp.ptr + 2 * n, self.xsp.ptr + 4 * n)
            } else {
                self.split(x, m.n_in, rows)?
            };
            self.gpu.launch_f(
                k.f,
                (m.n_out.div_ceil(256) as u32, 1, self.c.n_expert as u32),
                k.threads,
                k.smem,
                &[
                    Arg::U(m.base),
                    Arg::U(m.row_bytes as u64),
                    Arg::I(m.n_in as i32),
                    Arg::I(m.n_out as i32),
                    Arg::U(m.stride),
                    Arg::U(hi),
                    Arg::U(lo),
                    Arg::U(sums),
                    Arg::I(x_div as i32),
                    Arg::U(y),
                    Arg::U(m.n_out as u64),
                    Arg::U(s.counts.ptr),
                    Arg::U(s.offsets.ptr),
                    Arg::U(s.perm.ptr),
                ],
            )?;
            return Ok(true);
        }
        let wide = m.mmgw.filter(|_| many);
        let (f, rows, threads, smem) = if let Some(w) = wide {
            (w.f, 64, w.threads, w.smem)
        } else if m.n_in.is_multiple_of(32) {
            (m.mmg.f, 64, m.mmg.threads, m.mmg.smem)
        } else {
            (m.mvg, 4, 128, 0)
        };
        self.gpu.launch_f(
            f,
            (m.n_out.div_ceil(rows) as u32, 1, self.c.n_expert as u32),
            threads,
            smem,
            &[
                Arg::U(m.base),
                Arg::U(m.row_bytes as u64),
                Arg::I(m.n_in as i32),
                Arg::I(m.n_out as i32),
                Arg::U(m.stride),
                Arg::U(x),
                Arg::I(x_div as i32),
                Arg::U(m.n_in as u64),
                Arg::U(y),
                Arg::U(m.n_out as u64),
                Arg::U(s.counts.ptr),
                Arg::U(s.offsets.ptr),
                Arg::U(s.perm.ptr),
            ],
        )?;
        Ok(false)
    }

    /// The router and its top-k as one launch (`router_f32`: the matrix
    /// read at once, a row per warp; else `router_<T>`), with the rows each
    /// block takes; `None` where neither takes `r`.
    pub(super) fn fused_router(&self, r: &DMat) -> Option<(Func, usize)> {
        let direct = r.ty == GgmlType::F32 && r.n_in.is_multiple_of(256) && r.n_in <= 2048;
        if direct {
            Some((self.k.router_f32, 4))
        } else if r.n_in <= MV_XS {
            Some((r.kern.router, 4 * MV1_R))
        } else {
            None
        }
    }

    /// RMS (mode 0) or L2 (mode 1) norm over `rows` rows (see `norm_rows`).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn norm(
        &self,
        input: u64,
        out: u64,
        w: u64,
        dim: usize,
        rows: usize,
        per: usize,
        strides: (usize, usize, usize, usize),
        mode: i32,
        mul: f64,
    ) -> Result<(), CudaError> {
        self.gpu.launch_f(
            self.k.norm_rows,
            (rows as u32, 1, 1),
            dim.clamp(32, 256).next_power_of_two().min(256) as u32,
            0,
            &[
                Arg::U(input),
                Arg::U(out),
                Arg::U(w),
                Arg::I(dim as i32),
                Arg::I(per as i32),
                Arg::U(strides.0 as u64),
                Arg::U(strides.1 as u64),
                Arg::U(strides.2 as u64),
                Arg::U(strides.3 as u64),
                Arg::F(self.c.rms_eps),
                Arg::I(mode),
                Arg::D(mul),
            ],
        )
    }

    pub(super) fn elementwise(&self, f: Func, a: u64, b: u64, n: usize) -> Result<(), CudaError> {
        self.gpu.launch_f(
            f,
            (n.div_ceil(256) as u32, 1, 1),
            256,
            0,
            &[Arg::U(a), Arg::U(b), Arg::U(n as u64)],
        )
    }
}
