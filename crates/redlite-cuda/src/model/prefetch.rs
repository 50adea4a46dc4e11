//! The decode prefetch of routed experts placed in pinned host memory: the
//! layer records ([`XpLayer`]), the staging areas and lists ([`XpBufs`]),
//! and [`CudaModel::prefetch`], which predicts a layer's experts and copies
//! them on a side stream (`expert_transfer.cuh`).

use super::*;

/// A layer's routed experts placed apart, as `xp_fetch` takes them: experts
/// `vram..` at `host + (e - vram)·rec` in pinned host memory, the gate, up
/// and down tables, and where up and down lie in a record.
#[derive(Clone, Copy)]
pub(super) struct XpLayer {
    pub(super) host: u64,
    pub(super) vram: usize,
    pub(super) rec: u64,
    pub(super) tables: [u64; 3],
    pub(super) off_u: u64,
    pub(super) off_d: u64,
}

/// Words of one prefetch list (`XP_WORDS` in `expert_transfer.cuh`).
pub(super) const XP_WORDS: usize = 40 + 4 * 32;

/// Ints before the per-expert marks of `xp_mark` (its `done` word first).
pub(super) const XP_MARK_PAD: usize = 4;

/// The decode prefetch's buffers: per parity of the predicted layer, a
/// staging area of `k` expert records, a prefetch list, the prediction
/// input, the router's logits, ids, weights and block counter; and the
/// counters the kernels keep (`PrefetchStats`).
pub(super) struct XpBufs {
    pub(super) stage: [DevBuf; 2],
    pub(super) lists: DevBuf,
    pub(super) snap: DevBuf,
    pub(super) logits: DevBuf,
    pub(super) ids: DevBuf,
    pub(super) wts: DevBuf,
    pub(super) done: DevBuf,
    pub(super) stats: DevBuf,
    /// Per parity, what the layer's router chose (`xp_mark`: a word `done`,
    /// then one per expert), for the copies of experts it did not choose to
    /// stop; `XP_MARK_PAD + n_expert` ints apart.
    pub(super) marks: DevBuf,
    pub(super) n_expert: usize,
    /// `CudaOptions::expert_prefetch_wait_router`.
    pub(super) wait: bool,
    /// The chosen experts that were not copied ahead, copied after the
    /// router (`xp_late`) into this area of k records, instead of read over
    /// the bus by the products.
    pub(super) late: DevBuf,
    /// Blocks per expert of `xp_late` ([`CudaTuning::xp_late_blocks`]).
    pub(super) late_blocks: u32,
    /// Blocks per expert of `xp_fetch` ([`CudaTuning::xp_blocks`]).
    pub(super) blocks: u32,
    /// Predicted experts copied per layer, the most likely first.
    pub(super) top: usize,
}

impl XpBufs {
    /// The marks of parity `p`.
    pub(super) fn marks_at(&self, p: usize) -> u64 {
        self.marks.ptr + (p * (XP_MARK_PAD + self.n_expert) * 4) as u64
    }

    pub(super) fn new(
        g: &Gpu,
        c: &Config,
        rec: usize,
        top: Option<usize>,
        tuning: &CudaTuning,
    ) -> Result<XpBufs, CudaError> {
        let k = c.n_expert_used;
        // Default: the most likely four fifths (8 of 10; H200, 25% of the
        // experts in device memory: 95.0 tok/s against 92.7 with all ten).
        let top = top.unwrap_or((4 * k).div_ceil(5)).min(k);
        Ok(XpBufs {
            stage: [g.alloc(k * rec + 64)?, g.alloc(k * rec + 64)?],
            lists: g.zeros(2 * XP_WORDS * 8)?,
            snap: g.zeros(2 * c.n_embd * 4)?,
            logits: g.zeros(2 * c.n_expert * 4)?,
            ids: g.zeros(2 * k * 4)?,
            wts: g.zeros(2 * k * 4)?,
            done: g.zeros(2 * 16)?,
            stats: g.zeros(8 * 8)?,
            marks: g.zeros(2 * (XP_MARK_PAD + c.n_expert) * 4)?,
            n_expert: c.n_expert,
            wait: false,
            // H200, 25 % of the experts in device memory: 104.4 tok/s against
            // 92.9-95.9 reading them over the bus in the products.
            late: g.alloc(k * rec + 64)?,
            late_blocks: tuning.xp_late_blocks,
            blocks: tuning.xp_blocks,
            top,
        })
    }
}

impl CudaModel {
    /// Layer `m`'s expert prefetch on side stream `m % 2`, after the work
    /// queued on the main stream so far: its router on the prediction input
    /// (`xp.snap`), then `xp_fetch`. The caller joins the side stream before
    /// the layer's routed experts.
    pub(super) fn prefetch(&self, xp: &XpBufs, m: usize) -> Result<(), CudaError> {
        let l = &self.layers[m];
        let (Some(x), Some((f, rows))) = (l.xp, self.fused_router(&l.router)) else {
            return Ok(());
        };
        let (ne, kk, d) = (self.c.n_expert, self.c.n_expert_used, self.c.n_embd);
        let p = m % 2;
        let g = &self.gpu;
        let r = &l.router;
        let ids = xp.ids.ptr + (p * kk * 4) as u64;
        let launch = |f: Func, grid: (u32, u32, u32), block: u32, args: &[Arg]| {
            g.launch_side(p, f, grid, block, 0, args)
        };
        g.fork_side(p)?;
        launch(
            f,
            (r.n_out.div_ceil(rows) as u32, 1, 1),
            128,
            &[
                Arg::U(r.ptr),
                Arg::U(r.row_bytes as u64),
                Arg::I(r.n_in as i32),
                Arg::I(ne as i32),
                Arg::U(xp.snap.ptr + (p * d * 4) as u64),
                Arg::U(xp.logits.ptr + (p * ne * 4) as u64),
                Arg::I(kk as i32),
                Arg::U(ids),
                Arg::U(xp.wts.ptr + (p * kk * 4) as u64),
                Arg::U(xp.done.ptr + (p * 16) as u64),
                Arg::U(0),
                Arg::I(0),
            ],
        )?;
        launch(
            self.k.xp_fetch,
            (xp.blocks, kk as u32, 1),
            256,
            &[
                Arg::U(ids),
                Arg::I(kk as i32),
                Arg::I(xp.top as i32),
                Arg::I(x.vram as i32),
                Arg::U(x.host),
                Arg::U(x.rec),
                Arg::U(xp.stage[p].ptr),
                Arg::U(xp.lists.ptr + (p * XP_WORDS * 8) as u64),
                Arg::U(x.tables[0]),
                Arg::U(x.tables[1]),
                Arg::U(x.tables[2]),
                Arg::U(x.off_u),
                Arg::U(x.off_d),
                Arg::U(xp.stats.ptr),
                Arg::U(xp.marks_at(p)),
                Arg::I(m as i32 + 1),
                Arg::I(xp.wait as i32),
            ],
        )
    }
}
