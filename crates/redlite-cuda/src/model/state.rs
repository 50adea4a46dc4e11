//! A sequence's state on the device (recurrent states and KV cache), its
//! trail for speculative rollback, and the `DeviceState` glue.

use super::*;

/// A sequence's state on the device: conv windows and DeltaNet states per
/// recurrent layer, the KV cache per attention layer (`cap` positions of
/// `n_head_kv·head_dim` f32, grown by doubling), the position.
pub struct CudaState {
    pub(super) gpu: Arc<Gpu>,
    /// Tells this sequence's trails from others' (forks get a new one).
    pub(super) id: u64,
    pub(super) pos: usize,
    pub(super) cap: usize,
    pub(super) conv: Vec<DevBuf>,
    pub(super) ssm: Vec<DevBuf>,
    pub(super) k: Vec<DevBuf>,
    pub(super) v: Vec<DevBuf>,
    pub(super) n_dn: usize,
    pub(super) n_at: usize,
    pub(super) conv_bytes: usize,
    pub(super) ssm_bytes: usize,
    pub(super) kv_row: usize,
    /// The recurrent states after each token of the last verify pass, and
    /// that pass's number (a trail handle of an older pass is refused).
    pub(super) trail: Option<TrailBufs>,
    pub(super) trail_gen: u64,
}

/// Per recurrent layer, room for the conv and DeltaNet states after each of
/// `cap` tokens: layer `i`'s state after token `j` at `base + (i·cap + j)·bytes`.
pub(super) struct TrailBufs {
    pub(super) conv: DevBuf,
    pub(super) ssm: DevBuf,
    pub(super) cap: usize,
    pub(super) conv_bytes: usize,
    pub(super) ssm_bytes: usize,
}

impl TrailBufs {
    pub(super) fn conv_at(&self, layer: usize, tok: usize) -> u64 {
        self.conv.ptr + ((layer * self.cap + tok) * self.conv_bytes) as u64
    }
    pub(super) fn ssm_at(&self, layer: usize, tok: usize) -> u64 {
        self.ssm.ptr + ((layer * self.cap + tok) * self.ssm_bytes) as u64
    }
}

/// What a CUDA verify pass hands back: which sequence and pass made it.
pub(super) struct CudaTrail {
    pub(super) id: u64,
    pub(super) gen: u64,
    pub(super) n: usize,
    pub(super) pos0: usize,
}

static NEXT_STATE_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

pub(super) fn next_state_id() -> u64 {
    NEXT_STATE_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

impl std::fmt::Debug for CudaState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CudaState(pos {}, KV capacity {})", self.pos, self.cap)
    }
}

impl CudaState {
    pub(super) fn new(gpu: Arc<Gpu>, c: &Config) -> CudaState {
        let n_dn = c.recurrent.iter().filter(|&&r| r).count();
        CudaState {
            gpu,
            id: next_state_id(),
            pos: 0,
            cap: 0,
            conv: Vec::new(),
            ssm: Vec::new(),
            k: Vec::new(),
            v: Vec::new(),
            n_dn,
            n_at: c.recurrent.len() - n_dn,
            conv_bytes: c.conv_dim() * (c.conv_kernel - 1) * 4,
            ssm_bytes: c.ssm_h_v * c.ssm_d_v * c.ssm_d_k * 4,
            kv_row: c.n_head_kv * c.head_dim * 4,
            trail: None,
            trail_gen: 0,
        }
    }

    /// Room in the trail for `n` tokens (allocated at the first verify,
    /// grown by whole `V_MAX` steps).
    pub(super) fn reserve_trail(&mut self, g: &Gpu, n: usize) -> Result<(), CudaError> {
        if self.trail.as_ref().is_some_and(|t| t.cap >= n) {
            return Ok(());
        }
        let cap = n.next_multiple_of(V_MAX);
        self.trail = None;
        self.trail = Some(TrailBufs {
            conv: g.alloc((self.n_dn * cap * self.conv_bytes).max(4))?,
            ssm: g.alloc((self.n_dn * cap * self.ssm_bytes).max(4))?,
            cap,
            conv_bytes: self.conv_bytes,
            ssm_bytes: self.ssm_bytes,
        });
        Ok(())
    }

    /// Allocate the recurrent states (zeroed) at first use and grow the KV
    /// cache to hold `n` positions.
    pub(super) fn reserve(&mut self, g: &Gpu, _c: &Config, n: usize) -> Result<(), CudaError> {
        if self.conv.len() < self.n_dn {
            for _ in 0..self.n_dn {
                self.conv.push(g.zeros(self.conv_bytes)?);
                self.ssm.push(g.zeros(self.ssm_bytes)?);
            }
        }
        if n > self.cap || self.k.len() < self.n_at {
            let cap = n.max(2 * self.cap).max(256);
            let mut nk = Vec::with_capacity(self.n_at);
            let mut nv = Vec::with_capacity(self.n_at);
            for i in 0..self.n_at {
                let kb = g.alloc(cap * self.kv_row)?;
                let vb = g.alloc(cap * self.kv_row)?;
                if let (Some(ok), Some(ov)) = (self.k.get(i), self.v.get(i)) {
                    g.dtod(kb.ptr, ok.ptr, self.pos * self.kv_row)?;
                    g.dtod(vb.ptr, ov.ptr, self.pos * self.kv_row)?;
                }
                nk.push(kb);
                nv.push(vb);
            }
            g.sync()?;
            self.k = nk;
            self.v = nv;
            self.cap = cap;
        }
        Ok(())
    }

    pub(super) fn copy(&self) -> Result<CudaState, CudaError> {
        let g = &self.gpu;
        g.bind()?;
        let dup = |b: &DevBuf, bytes: usize| -> Result<DevBuf, CudaError> {
            let n = g.alloc(b.bytes)?;
            g.dtod(n.ptr, b.ptr, bytes)?;
            Ok(n)
        };
        let conv = self
            .conv
            .iter()
            .map(|b| dup(b, b.bytes))
            .collect::<Result<_, _>>()?;
        let ssm = self
            .ssm
            .iter()
            .map(|b| dup(b, b.bytes))
            .collect::<Result<_, _>>()?;
        let kvb = self.pos * self.kv_row;
        let k = self
            .k
            .iter()
            .map(|b| dup(b, kvb))
            .collect::<Result<_, _>>()?;
        let v = self
            .v
            .iter()
            .map(|b| dup(b, kvb))
            .collect::<Result<_, _>>()?;
        g.sync()?;
        Ok(CudaState {
            gpu: g.clone(),
            id: next_state_id(),
            pos: self.pos,
            cap: self.cap,
            conv,
            ssm,
            k,
            v,
            n_dn: self.n_dn,
            n_at: self.n_at,
            conv_bytes: self.conv_bytes,
            ssm_bytes: self.ssm_bytes,
            kv_row: self.kv_row,
            trail: None,
            trail_gen: 0,
        })
    }
}

/// Saved recurrent states (device copies).
pub(super) struct Saved {
    pub(super) conv: Vec<DevBuf>,
    pub(super) ssm: Vec<DevBuf>,
}

impl DeviceState for CudaState {
    fn pos(&self) -> usize {
        self.pos
    }

    fn fork(&self) -> Box<dyn DeviceState> {
        match self.copy() {
            Ok(s) => Box::new(s),
            // A failed device copy (out of memory) cannot be reported through
            // Clone; it is fatal for this process.
            Err(e) => panic!("copying a sequence state on the GPU: {e}"),
        }
    }

    fn bytes(&self) -> usize {
        self.n_dn * (self.conv_bytes + self.ssm_bytes) + 2 * self.n_at * self.pos * self.kv_row
    }

    fn save_recurrent(&self) -> Box<dyn Any + Send + Sync> {
        let g = &self.gpu;
        let dup = |b: &DevBuf| -> Result<DevBuf, CudaError> {
            let n = g.alloc(b.bytes)?;
            g.dtod(n.ptr, b.ptr, b.bytes)?;
            Ok(n)
        };
        let saved = (|| -> Result<Saved, CudaError> {
            g.bind()?;
            Ok(Saved {
                conv: self.conv.iter().map(dup).collect::<Result<_, _>>()?,
                ssm: self.ssm.iter().map(dup).collect::<Result<_, _>>()?,
            })
        })();
        match saved {
            Ok(s) => Box::new(s),
            Err(e) => panic!("saving recurrent states on the GPU: {e}"),
        }
    }

    fn restore_recurrent(
        &mut self,
        saved: &(dyn Any + Send + Sync),
        pos: usize,
    ) -> Result<(), ModelError> {
        let s = saved
            .downcast_ref::<Saved>()
            .ok_or_else(|| ModelError::Input("the saved states are not CUDA states".into()))?;
        if pos > self.pos || s.conv.len() != self.conv.len() {
            return Err(ModelError::Input(format!(
                "cannot roll a state at {} back to {pos}",
                self.pos
            )));
        }
        let g = &self.gpu;
        let r = (|| -> Result<(), CudaError> {
            g.bind()?;
            for (d, b) in self.conv.iter().zip(&s.conv) {
                g.dtod(d.ptr, b.ptr, b.bytes)?;
            }
            for (d, b) in self.ssm.iter().zip(&s.ssm) {
                g.dtod(d.ptr, b.ptr, b.bytes)?;
            }
            g.sync()
        })();
        r.map_err(merr)?;
        self.pos = pos;
        Ok(())
    }

    fn rollback(
        &mut self,
        trail: &(dyn Any + Send + Sync),
        keep: usize,
        pos: usize,
    ) -> Result<(), ModelError> {
        let Some(t) = trail.downcast_ref::<CudaTrail>() else {
            return Err(ModelError::Input(
                "the trail was not made by a CUDA verify pass".into(),
            ));
        };
        if t.id != self.id || t.gen != self.trail_gen {
            return Err(ModelError::Input(
                "the trail is not this sequence's last verify pass".into(),
            ));
        }
        if keep == 0 || keep > t.n || pos != t.pos0 + keep || pos > self.pos {
            return Err(ModelError::Input(format!(
                "cannot keep {keep} of {} verified tokens from position {} (state at {})",
                t.n, t.pos0, self.pos
            )));
        }
        let Some(tb) = &self.trail else {
            return Err(ModelError::Input("the sequence has no trail".into()));
        };
        let g = &self.gpu;
        let r = (|| -> Result<(), CudaError> {
            g.bind()?;
            for i in 0..self.n_dn {
                g.dtod(self.conv[i].ptr, tb.conv_at(i, keep - 1), self.conv_bytes)?;
                g.dtod(self.ssm[i].ptr, tb.ssm_at(i, keep - 1), self.ssm_bytes)?;
            }
            g.sync()
        })();
        r.map_err(merr)?;
        self.pos = pos;
        Ok(())
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}
