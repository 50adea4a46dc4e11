//! Weights to the device: [`Uploader`] copies each tensor once in its stored
//! format (experts placed apart into device records and pinned host memory
//! when they do not all fit) and picks each matrix's kernels.

use super::*;

pub(super) struct Uploader<'a> {
    pub(super) gpu: &'a Gpu,
    pub(super) f: &'a GgufFile,
    pub(super) bufs: Vec<DevBuf>,
    pub(super) tensors: HashMap<usize, u64>,
    pub(super) bytes: usize,
    /// Experts per layer in device memory when placed apart.
    pub(super) place: Option<usize>,
    pub(super) hosts: Vec<crate::gpu::HostBuf>,
    pub(super) placed: ExpertPlacement,
    /// Shortest rows the grouped `mmgx_T` takes ([`CudaTuning::tcx_min_in`]:
    /// the experts' down products, 512 inputs, stay on `mmgw_T`, faster
    /// there: eight steps a tile leave `mmgx_T`'s one block per
    /// multiprocessor waiting on its prologue).
    pub(super) tcx_min_in: usize,
    /// One-token and verify products on 16-bit activations where the type
    /// has the integer kernels (off: f32 activations everywhere).
    pub(super) q16: bool,
}

impl Uploader<'_> {
    /// A device copy of `data` (see [`Gpu::upload`]) kept with the model's
    /// weights and counted in their bytes; its address.
    pub(super) fn keep<T: Copy>(&mut self, data: &[T]) -> Result<u64, ModelError> {
        let b = self.gpu.upload(data).map_err(merr)?;
        let p = b.ptr;
        self.bytes += b.bytes;
        self.bufs.push(b);
        Ok(p)
    }

    pub(super) fn vec(&mut self, v: &[f32]) -> Result<u64, ModelError> {
        self.keep(v)
    }

    /// Kernel `{kind}_{T}` for a matrix of type `ty`, after checking that its
    /// rows are a multiple of 8 values (every kernel works 8 at a time).
    pub(super) fn kernel(
        &self,
        kind: &str,
        ty: GgmlType,
        n_in: usize,
        name: &str,
    ) -> Result<Func, ModelError> {
        if !n_in.is_multiple_of(8) {
            return Err(ModelError::Backend(format!(
                "{name}: rows of {n_in} values (the CUDA kernels need a multiple of 8)"
            )));
        }
        self.gpu
            .func(&format!("{kind}_{}", suffix(ty, name)?))
            .map_err(merr)
    }

    /// The tensor-core prefill kernel `{kind}_T` of `tokens` tokens (or
    /// slots) per tile, where `ty` has one, the tensor cores are on and the
    /// rows are whole 256-input steps; its dynamic shared memory allowed.
    pub(super) fn tc_kernel(
        &self,
        kind: &str,
        tokens: usize,
        ty: GgmlType,
        n_in: usize,
        name: &str,
    ) -> Result<Option<MmKernel>, ModelError> {
        let Some(smem) =
            dequant_src::tc_smem_bytes(ty, tokens).filter(|_| n_in.is_multiple_of(256))
        else {
            return Ok(None);
        };
        let f = self.kernel(kind, ty, n_in, name)?;
        self.gpu.allow_dynamic_smem(f, smem).map_err(merr)?;
        Ok(Some(MmKernel {
            f,
            tokens,
            threads: 128,
            smem,
        }))
    }

    /// The split-input prefill kernel (`mmx_T`, `grouped`: `mmgx_T`) where
    /// `ty` has one, the tensor cores and these kernels are on, the rows are
    /// whole 256-input steps and the device grants its shared memory (a
    /// device with less keeps `mmt_T` / `mmgw_T`).
    pub(super) fn tcx_kernel(
        &self,
        ty: GgmlType,
        n_in: usize,
        name: &str,
        grouped: bool,
    ) -> Result<Option<MmKernel>, ModelError> {
        let Some(smem) = dequant_src::tcx_smem_bytes(ty, grouped)
            .filter(|_| n_in.is_multiple_of(256))
            .filter(|_| !grouped || n_in >= self.tcx_min_in)
        else {
            return Ok(None);
        };
        let f = self.kernel(if grouped { "mmgx" } else { "mmx" }, ty, n_in, name)?;
        Ok(self.gpu.allow_dynamic_smem(f, smem).ok().map(|_| MmKernel {
            f,
            tokens: if grouped { 64 } else { 128 },
            threads: 256,
            smem,
        }))
    }

    /// The tiled prefill kernel of a matrix (`grouped`: an expert stack) of
    /// `ty`: on the tensor cores (`mmt_T`, 64 tokens a block / `mmgt_T`, 16
    /// slots) where [`Uploader::tc_kernel`] has one, else on the CUDA cores
    /// (`mm_T`, 32 tokens / `mmg_T`, 16 slots).
    pub(super) fn mm_kernel(
        &self,
        ty: GgmlType,
        n_in: usize,
        name: &str,
        grouped: bool,
    ) -> Result<MmKernel, ModelError> {
        let (tc_kind, tc_tokens, kind, tokens) = if grouped {
            ("mmgt", 16, "mmg", 16)
        } else {
            ("mmt", 64, "mm", 32)
        };
        if let Some(k) = self.tc_kernel(tc_kind, tc_tokens, ty, n_in, name)? {
            return Ok(k);
        }
        // A dense F32 matrix (the router): `mmf_F32`, 64 rows × 128 tokens
        // a block, the same sums as `mm_F32`.
        if !grouped && ty == GgmlType::F32 && n_in.is_multiple_of(16) {
            return Ok(MmKernel {
                f: self.gpu.func("mmf_F32").map_err(merr)?,
                tokens: 128,
                threads: 256,
                smem: 0,
            });
        }
        Ok(MmKernel {
            f: self.kernel(kind, ty, n_in, name)?,
            tokens,
            threads: 256,
            smem: 0,
        })
    }

    /// The matrix-vector kernels of a matrix (or expert stack) of `ty`.
    pub(super) fn mv_kernels(
        &self,
        ty: GgmlType,
        n_in: usize,
        name: &str,
    ) -> Result<MvKernels, ModelError> {
        let k = |kind| self.kernel(kind, ty, n_in, name);
        // The integer kernels take whole 256-value activation blocks, at most
        // q16_max_inputs of them staged.
        let mq = if self.q16
            && dequant_src::q16_type(ty)
            && n_in.is_multiple_of(256)
            && n_in <= dequant_src::q16_max_inputs(ty)
        {
            Some(MqKernels {
                mq1: k("mq1")?,
                mqgu: k("mqgu")?,
                mqn: k("mqn")?,
            })
        } else {
            None
        };
        Ok(MvKernels {
            mv: k("mv")?,
            mv1: k("mv1")?,
            mvn: k("mvn")?,
            mvgu: k("mvgu")?,
            router: k("router")?,
            mq,
        })
    }

    pub(super) fn mat(&mut self, m: &Mat, name: &str) -> Result<DMat, ModelError> {
        Ok(self.mats(&[(m, name)])?.remove(0))
    }

    /// Matrices uploaded one after another into one allocation (matrix
    /// `i + 1`'s rows right behind matrix `i`'s), so that matrices of one
    /// type and row length read by one input can also be taken as one
    /// taller matrix ([`DMat::joined`]).
    pub(super) fn mats(&mut self, ms: &[(&Mat, &str)]) -> Result<Vec<DMat>, ModelError> {
        let mut parts = Vec::with_capacity(ms.len());
        for (m, _) in ms {
            parts.push(redlite_model::weights::qmats(self.f, m)?);
        }
        let mut offs = Vec::with_capacity(ms.len());
        let mut off = 0;
        for ps in &parts {
            offs.push((off, ps.first().map(|p| p.row_bytes()).unwrap_or(0)));
            off += ps.iter().map(|p| p.data.len()).sum::<usize>();
        }
        // One stored run (the common case) goes up straight from the file.
        let single = match parts.as_slice() {
            [ps] => match ps.as_slice() {
                [one] => Some(one.data),
                _ => None,
            },
            _ => None,
        };
        let base = if let Some(data) = single {
            self.keep(data)?
        } else {
            let mut all = Vec::with_capacity(off);
            for p in parts.iter().flatten() {
                all.extend_from_slice(p.data);
            }
            self.keep(&all)?
        };
        ms.iter()
            .zip(offs)
            .map(|((m, name), (off, row_bytes))| self.dmat(m, name, base + off as u64, row_bytes))
            .collect()
    }

    pub(super) fn dmat(
        &self,
        m: &Mat,
        name: &str,
        ptr: u64,
        row_bytes: usize,
    ) -> Result<DMat, ModelError> {
        let mut kern = self.mv_kernels(m.ty, m.n_in, name)?;
        if !q16_aligned(ptr, 0) {
            kern.mq = None;
        }
        let mm = self.mm_kernel(m.ty, m.n_in, name, false)?;
        let mmx = self.tcx_kernel(m.ty, m.n_in, name, false)?;
        Ok(DMat {
            ty: m.ty,
            kern,
            mm,
            mmx,
            n_in: m.n_in,
            n_out: m.n_out,
            row_bytes,
            ptr,
        })
    }

    pub(super) fn experts(&mut self, x: &Experts, name: &str) -> Result<DExperts, ModelError> {
        let base = match self.tensors.get(&x.tensor) {
            Some(&p) => p,
            None => {
                let data = self.f.tensor_data(&self.f.tensors[x.tensor]);
                let p = self.keep(data)?;
                self.tensors.insert(x.tensor, p);
                p
            }
        };
        self.expert_stack(x, name, base + x.offset as u64, x.stride as u64, 0)
    }

    /// The device view of expert stack `x` at `base` (`stride` apart, or
    /// through a table: [`RL_TABLE`]) with its kernels.
    pub(super) fn expert_stack(
        &self,
        x: &Experts,
        name: &str,
        base: u64,
        stride: u64,
        rec_off: u64,
    ) -> Result<DExperts, ModelError> {
        let k = |kind| self.kernel(kind, x.ty, x.n_in, name);
        let mut kern = self.mv_kernels(x.ty, x.n_in, name)?;
        if !q16_aligned(base, stride) {
            kern.mq = None;
        }
        Ok(DExperts {
            kern,
            mvg: k("mvg")?,
            mmg: self.mm_kernel(x.ty, x.n_in, name, true)?,
            mmgw: self.tc_kernel("mmgw", 64, x.ty, x.n_in, name)?,
            mmgx: self.tcx_kernel(x.ty, x.n_in, name, true)?,
            n_in: x.n_in,
            n_out: x.n_out,
            row_bytes: x.ty.row_bytes(x.n_in as u64).unwrap_or(0) as usize,
            base,
            stride,
            rec_off,
        })
    }

    /// A layer's routed experts (gate, up, down) placed apart: each expert's
    /// three matrices copied into one record, the first `vram` records in
    /// device memory and the rest in pinned host memory, with one address
    /// table per matrix.
    pub(super) fn placed_experts(
        &mut self,
        xs: [&Experts; 3],
        names: [&str; 3],
        n_expert: usize,
        vram: usize,
    ) -> Result<([DExperts; 3], XpLayer), ModelError> {
        let vram = vram.min(n_expert);
        let (offs, sizes, rec) = expert_record(xs);
        let datas: Vec<&[u8]> = xs
            .iter()
            .map(|x| self.f.tensor_data(&self.f.tensors[x.tensor]))
            .collect();
        let slice = |i: usize, e: usize| -> Result<&[u8], ModelError> {
            let a = xs[i].offset + e * xs[i].stride;
            datas[i].get(a..a + sizes[i]).ok_or_else(|| {
                ModelError::Backend(format!(
                    "{}: expert {e} lies past the tensor's {} bytes",
                    names[i],
                    datas[i].len()
                ))
            })
        };
        // Device part: staged on the host, uploaded at once (64 bytes of
        // padding behind it, as every weight buffer has).
        let mut stage = vec![0u8; vram * rec];
        for e in 0..vram {
            for i in 0..3 {
                let at = e * rec + offs[i];
                stage[at..at + sizes[i]].copy_from_slice(slice(i, e)?);
            }
        }
        let dev = self.gpu.upload(&stage).map_err(merr)?;
        drop(stage);
        let n_host = n_expert - vram;
        let mut host = self
            .gpu
            .alloc_host_mapped(n_host * rec + 64)
            .map_err(merr)?;
        {
            let hs = host.as_mut_slice();
            for e in vram..n_expert {
                for i in 0..3 {
                    let at = (e - vram) * rec + offs[i];
                    hs[at..at + sizes[i]].copy_from_slice(slice(i, e)?);
                }
            }
        }
        let rec_at = |e: usize| -> u64 {
            if e < vram {
                dev.ptr + (e * rec) as u64
            } else {
                host.dev + ((e - vram) * rec) as u64
            }
        };
        let mut out = Vec::with_capacity(3);
        let mut tables = [0u64; 3];
        for (i, x) in xs.iter().enumerate() {
            let table: Vec<u64> = (0..n_expert).map(|e| rec_at(e) + offs[i] as u64).collect();
            let tb = self.keep(&table)?;
            tables[i] = tb;
            out.push(self.expert_stack(x, names[i], tb, RL_TABLE, offs[i] as u64)?);
        }
        let xp = XpLayer {
            host: host.dev,
            vram,
            rec: rec as u64,
            tables,
            off_u: offs[1] as u64,
            off_d: offs[2] as u64,
        };
        self.placed.vram = vram;
        self.placed.vram_bytes += dev.bytes;
        self.placed.host_bytes += host.bytes;
        self.bytes += dev.bytes;
        self.bufs.push(dev);
        self.hosts.push(host);
        let mut it = out.into_iter();
        match (it.next(), it.next(), it.next()) {
            (Some(g), Some(u), Some(d)) => Ok(([g, u, d], xp)),
            _ => unreachable!("three matrices were placed"),
        }
    }
}

/// Whether matrices at `base` (`stride` apart; 0: one matrix; [`RL_TABLE`]:
/// through a table of 16-byte aligned records) start where the integer
/// kernels' word loads expect them: 16-byte aligned, which every upload and
/// every whole-row matrix of the types they cover gives.
pub(super) fn q16_aligned(base: u64, stride: u64) -> bool {
    base.is_multiple_of(16) && (stride == RL_TABLE || stride.is_multiple_of(16))
}

/// One expert's record as `placed_experts` lays it out: where each of its
/// three matrices starts (16-byte aligned), their bytes, and the record's
/// bytes (a multiple of 256).
pub(super) fn expert_record(xs: [&Experts; 3]) -> ([usize; 3], [usize; 3], usize) {
    let mut offs = [0usize; 3];
    let mut sizes = [0usize; 3];
    let mut rec = 0usize;
    for (i, x) in xs.iter().enumerate() {
        let rb = x.ty.row_bytes(x.n_in as u64).unwrap_or(0) as usize;
        offs[i] = rec;
        sizes[i] = rb * x.n_out;
        rec = (rec + sizes[i]).next_multiple_of(16);
    }
    (offs, sizes, rec.next_multiple_of(256))
}
