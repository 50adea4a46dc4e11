//! Tensor lookup and validation: every weight the forward pass uses, with its
//! shape checked against the configuration. Matrices stay in the mapped file;
//! the legacy fused `ssm_in` is read in place as runs of rows.

use std::path::PathBuf;
use std::sync::Arc;

use redlite_backend::QMat;
use redlite_gguf::{GgmlType, GgufFile};

use crate::{Config, ModelError};

/// Where a matrix's bytes live.
pub enum Bytes {
    /// A byte range of a mapped tensor (index into `GgufFile::tensors`).
    Mapped {
        tensor: usize,
        start: usize,
        len: usize,
    },
    /// Runs of rows of one mapped tensor, in order (the legacy fused
    /// `ssm_in` de-interleaved without copying): `(first byte, byte length,
    /// rows)` of each run.
    Rows {
        tensor: usize,
        runs: Vec<(usize, usize, usize)>,
    },
}

/// A 2-D weight `{n_in, n_out}`.
pub struct Mat {
    pub ty: GgmlType,
    pub n_in: usize,
    pub n_out: usize,
    pub bytes: Bytes,
    /// The whole tensor repacked into the lanes layout
    /// ([`redlite_quant::q16::lanes`]), when [`Weights::repack_lanes`] made
    /// it; the products then read it instead of the mapping.
    pub lanes: Option<Arc<memmap2::Mmap>>,
}

/// A stack of per-expert matrices (`{n_in, n_out, n_exp}`), possibly a part of
/// a fused gate/up tensor (`offset` bytes skipped in each expert slice).
#[derive(Clone)]
pub struct Experts {
    pub ty: GgmlType,
    pub n_in: usize,
    pub n_out: usize,
    pub tensor: usize,
    /// Bytes from one expert's slice to the next.
    pub stride: usize,
    /// Byte offset of this matrix inside an expert's slice.
    pub offset: usize,
    /// The whole tensor in the lanes layout, as [`Mat::lanes`].
    pub lanes: Option<Arc<memmap2::Mmap>>,
}

pub struct DeltaNetW {
    pub qkv: Mat,
    pub gate: Mat,
    pub ba: Mat,
    pub conv: Vec<f32>,
    pub ssm_a: Vec<f32>,
    pub dt_bias: Vec<f32>,
    pub norm: Vec<f32>,
    pub out: Mat,
}

pub struct AttnW {
    pub q: Mat,
    pub k: Mat,
    pub v: Mat,
    pub out: Mat,
    pub q_norm: Vec<f32>,
    pub k_norm: Vec<f32>,
}

pub enum Mixer {
    DeltaNet(DeltaNetW),
    Attention(AttnW),
}

pub struct MoeW {
    pub router: Mat,
    pub gate: Experts,
    pub up: Experts,
    pub down: Experts,
    pub sh_gate: Mat,
    pub sh_up: Mat,
    pub sh_down: Mat,
    pub sh_inp: Vec<f32>,
}

pub struct Layer {
    pub attn_norm: Vec<f32>,
    pub post_norm: Vec<f32>,
    pub mixer: Mixer,
    pub moe: MoeW,
}

pub struct Weights {
    pub token_embd: Mat,
    pub output_norm: Vec<f32>,
    pub output: Mat,
    pub layers: Vec<Layer>,
}

impl Weights {
    /// Repack every Q4_K / Q5_K matrix read in place into the lanes layout
    /// ([`redlite_quant::q16::lanes`]), a copy in memory per tensor that the
    /// products then read (the file is not changed); the routed experts
    /// too when `experts`. Nothing is done where this CPU has no lanes
    /// kernels. Returns the bytes repacked.
    pub fn repack_lanes(&mut self, f: &GgufFile, experts: bool) -> u64 {
        use redlite_quant::q16::lanes;
        let mut done: std::collections::HashMap<usize, Arc<memmap2::Mmap>> = Default::default();
        let mut bytes = 0u64;
        let mut repacked = |ty: GgmlType, tensor: usize| -> Option<Arc<memmap2::Mmap>> {
            lanes::kernels(ty)?;
            if let Some(a) = done.get(&tensor) {
                return Some(a.clone());
            }
            let src = f.tensor_data(&f.tensors[tensor]);
            // Anonymous memory on 2 MiB pages where the kernel allows them
            // (fewer faults now, fewer page walks while decode streams it).
            let mut dst = memmap2::MmapMut::map_anon(src.len().max(1)).ok()?;
            #[cfg(target_os = "linux")]
            let _ = dst.advise(memmap2::Advice::HugePage);
            let (block, _) = lanes::layout(ty)?;
            // Whole blocks per thread.
            let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
            let per = src.len().div_ceil(block).div_ceil(threads).max(1) * block;
            let ok = std::thread::scope(|sc| {
                let hs: Vec<_> = src
                    .chunks(per)
                    .zip(dst[..src.len()].chunks_mut(per))
                    .map(|(s, d)| sc.spawn(move || lanes::repack(ty, s, d)))
                    .collect();
                hs.into_iter().all(|h| h.join().unwrap_or(false))
            });
            if !ok {
                return None;
            }
            bytes += src.len() as u64;
            let a = Arc::new(dst.make_read_only().ok()?);
            done.insert(tensor, a.clone());
            Some(a)
        };
        let mut mat = |m: &mut Mat| {
            if let Bytes::Mapped { tensor, .. } = m.bytes {
                m.lanes = repacked(m.ty, tensor);
            }
        };
        for l in &mut self.layers {
            match &mut l.mixer {
                Mixer::DeltaNet(w) => {
                    for m in [&mut w.qkv, &mut w.gate, &mut w.ba, &mut w.out] {
                        mat(m);
                    }
                }
                Mixer::Attention(w) => {
                    for m in [&mut w.q, &mut w.k, &mut w.v, &mut w.out] {
                        mat(m);
                    }
                }
            }
            for m in [&mut l.moe.sh_gate, &mut l.moe.sh_up, &mut l.moe.sh_down] {
                mat(m);
            }
        }
        if experts {
            for l in &mut self.layers {
                for x in [&mut l.moe.gate, &mut l.moe.up, &mut l.moe.down] {
                    x.lanes = repacked(x.ty, x.tensor);
                }
            }
        }
        bytes
    }
}

struct Loader<'a> {
    f: &'a GgufFile,
    path: PathBuf,
}

impl<'a> Loader<'a> {
    fn err(&self, name: &str, msg: impl Into<String>) -> ModelError {
        ModelError::Tensor {
            path: self.path.clone(),
            tensor: name.to_string(),
            msg: msg.into(),
        }
    }

    fn find(&self, name: &str) -> Result<usize, ModelError> {
        if let Some(i) = self.f.tensors.iter().position(|t| t.name == name) {
            return Ok(i);
        }
        Err(match self.f.unknown_tensor(name) {
            Some(u) => self.err(
                name,
                format!(
                    "ggml type id {} (tensor record at byte {}) is not a type this build knows",
                    u.type_id, u.info_offset
                ),
            ),
            None => self.err(name, "missing"),
        })
    }

    /// Whether the file has the tensor (of a known or an unknown type: an
    /// unknown one then fails, by name, where it is loaded).
    fn has(&self, name: &str) -> bool {
        self.f.tensor_info(name).is_some() || self.f.unknown_tensor(name).is_some()
    }

    /// Check dims (trailing 1s ignored) and byte size; returns the tensor index.
    fn checked(&self, name: &str, dims: &[usize]) -> Result<usize, ModelError> {
        let idx = self.find(name)?;
        let t = &self.f.tensors[idx];
        let mut got: Vec<u64> = t.dims.clone();
        while got.len() > 1 && got.last() == Some(&1) {
            got.pop();
        }
        let mut want: Vec<u64> = dims.iter().map(|&d| d as u64).collect();
        while want.len() > 1 && want.last() == Some(&1) {
            want.pop();
        }
        if got != want {
            return Err(self.err(
                name,
                format!("shape {:?}, expected {:?} (ggml order)", t.dims, dims),
            ));
        }
        let Some(k) = redlite_quant::kernels(t.ggml_type) else {
            return Err(self.err(
                name,
                format!("tensor type {} is not supported", t.ggml_type),
            ));
        };
        let _ = k;
        let row = t
            .ggml_type
            .row_bytes(t.dims[0])
            .ok_or_else(|| self.err(name, "row length is not a whole number of blocks"))?;
        if row * t.n_rows() != t.n_bytes {
            return Err(self.err(name, "byte size does not match its shape and type"));
        }
        Ok(idx)
    }

    fn mat(&self, name: &str, n_in: usize, n_out: usize) -> Result<Mat, ModelError> {
        let idx = self.checked(name, &[n_in, n_out])?;
        let t = &self.f.tensors[idx];
        Ok(Mat {
            ty: t.ggml_type,
            n_in,
            n_out,
            bytes: Bytes::Mapped {
                tensor: idx,
                start: 0,
                len: t.n_bytes as usize,
            },
            lanes: None,
        })
    }

    /// A small tensor of any float/quant type, dequantized to f32.
    fn vec(&self, name: &str, dims: &[usize]) -> Result<Vec<f32>, ModelError> {
        let idx = self.checked(name, dims)?;
        let t = &self.f.tensors[idx];
        redlite_quant::dequantize_to_vec(t.ggml_type, self.f.tensor_data(t))
            .map_err(|e| self.err(name, e.to_string()))
    }

    fn experts(
        &self,
        name: &str,
        n_in: usize,
        n_out: usize,
        n_exp: usize,
    ) -> Result<Experts, ModelError> {
        let idx = self.checked(name, &[n_in, n_out, n_exp])?;
        let t = &self.f.tensors[idx];
        let stride = t.n_bytes as usize / n_exp;
        Ok(Experts {
            ty: t.ggml_type,
            n_in,
            n_out,
            tensor: idx,
            stride,
            offset: 0,
            lanes: None,
        })
    }
}

impl Weights {
    pub fn load(f: &GgufFile, c: &Config) -> Result<Weights, ModelError> {
        let l = Loader {
            f,
            path: f.path().to_path_buf(),
        };
        let d = c.n_embd;
        let token_embd = l.mat("token_embd.weight", d, c.vocab_size)?;
        let output = if l.has("output.weight") {
            l.mat("output.weight", d, c.vocab_size)?
        } else {
            l.mat("token_embd.weight", d, c.vocab_size)?
        };
        let output_norm = l.vec("output_norm.weight", &[d])?;
        let mut layers = Vec::with_capacity(c.n_layer);
        for il in 0..c.n_layer {
            let n = |s: &str| format!("blk.{il}.{s}");
            let mixer = if c.recurrent[il] {
                Mixer::DeltaNet(load_deltanet(&l, c, il)?)
            } else {
                let qd = c.n_head * c.head_dim;
                let kvd = c.n_head_kv * c.head_dim;
                let (q, k, v) = if l.has(&n("attn_q.weight")) {
                    (
                        l.mat(&n("attn_q.weight"), d, 2 * qd)?,
                        l.mat(&n("attn_k.weight"), d, kvd)?,
                        l.mat(&n("attn_v.weight"), d, kvd)?,
                    )
                } else {
                    // Fused [q+gate | k | v] rows: three row ranges of one tensor.
                    let fused = l.mat(&n("attn_qkv.weight"), d, 2 * qd + 2 * kvd)?;
                    split_rows(&fused, &[2 * qd, kvd, kvd])
                };
                Mixer::Attention(AttnW {
                    q,
                    k,
                    v,
                    out: l.mat(&n("attn_output.weight"), qd, d)?,
                    q_norm: l.vec(&n("attn_q_norm.weight"), &[c.head_dim])?,
                    k_norm: l.vec(&n("attn_k_norm.weight"), &[c.head_dim])?,
                })
            };
            let (ne, ff) = (c.n_expert, c.expert_ff);
            let (gate, up) = if l.has(&n("ffn_gate_up_exps.weight")) {
                let mut g = l.experts(&n("ffn_gate_up_exps.weight"), d, 2 * ff, ne)?;
                g.n_out = ff;
                let row = g.stride / (2 * ff);
                let u = Experts {
                    offset: ff * row,
                    ..g.clone()
                };
                (g, u)
            } else {
                (
                    l.experts(&n("ffn_gate_exps.weight"), d, ff, ne)?,
                    l.experts(&n("ffn_up_exps.weight"), d, ff, ne)?,
                )
            };
            let moe = MoeW {
                router: l.mat(&n("ffn_gate_inp.weight"), d, ne)?,
                gate,
                up,
                down: l.experts(&n("ffn_down_exps.weight"), ff, d, ne)?,
                sh_gate: l.mat(&n("ffn_gate_shexp.weight"), d, c.shexp_ff)?,
                sh_up: l.mat(&n("ffn_up_shexp.weight"), d, c.shexp_ff)?,
                sh_down: l.mat(&n("ffn_down_shexp.weight"), c.shexp_ff, d)?,
                sh_inp: l.vec(&n("ffn_gate_inp_shexp.weight"), &[d])?,
            };
            layers.push(Layer {
                attn_norm: l.vec(&n("attn_norm.weight"), &[d])?,
                post_norm: l.vec(&n("post_attention_norm.weight"), &[d])?,
                mixer,
                moe,
            });
        }
        let w = Weights {
            token_embd,
            output_norm,
            output,
            layers,
        };
        // Every matrix must be usable by the backend (type has kernels, sizes match).
        w.for_each_mat(|name, m| {
            qmats(f, m)
                .map(|_| ())
                .map_err(|e| l.err(&name, e.to_string()))
        })?;
        Ok(w)
    }

    fn for_each_mat(
        &self,
        mut check: impl FnMut(String, &Mat) -> Result<(), ModelError>,
    ) -> Result<(), ModelError> {
        check("token_embd.weight".into(), &self.token_embd)?;
        check("output.weight".into(), &self.output)?;
        for (il, layer) in self.layers.iter().enumerate() {
            let n = |s: &str| format!("blk.{il}.{s}");
            match &layer.mixer {
                Mixer::DeltaNet(w) => {
                    check(n("attn_qkv.weight"), &w.qkv)?;
                    check(n("attn_gate.weight"), &w.gate)?;
                    check(n("ssm_ba.weight"), &w.ba)?;
                    check(n("ssm_out.weight"), &w.out)?;
                }
                Mixer::Attention(w) => {
                    check(n("attn_q.weight"), &w.q)?;
                    check(n("attn_k.weight"), &w.k)?;
                    check(n("attn_v.weight"), &w.v)?;
                    check(n("attn_output.weight"), &w.out)?;
                }
            }
            let m = &layer.moe;
            check(n("ffn_gate_inp.weight"), &m.router)?;
            check(n("ffn_gate_shexp.weight"), &m.sh_gate)?;
            check(n("ffn_up_shexp.weight"), &m.sh_up)?;
            check(n("ffn_down_shexp.weight"), &m.sh_down)?;
        }
        Ok(())
    }
}

/// Split a mapped matrix into consecutive row ranges.
fn split_rows(m: &Mat, parts: &[usize]) -> (Mat, Mat, Mat) {
    let row = m.ty.row_bytes(m.n_in as u64).unwrap_or(0) as usize;
    let Bytes::Mapped { tensor, start, .. } = m.bytes else {
        unreachable!("split_rows is only used on mapped tensors")
    };
    let mut r0 = 0;
    let mut out = parts.iter().map(|&n| {
        let part = Mat {
            ty: m.ty,
            n_in: m.n_in,
            n_out: n,
            bytes: Bytes::Mapped {
                tensor,
                start: start + r0 * row,
                len: n * row,
            },
            lanes: m.lanes.clone(),
        };
        r0 += n;
        part
    });
    let (a, b, c) = (out.next(), out.next(), out.next());
    match (a, b, c) {
        (Some(a), Some(b), Some(c)) => (a, b, c),
        _ => unreachable!("three parts are always given"),
    }
}

fn load_deltanet(l: &Loader<'_>, c: &Config, il: usize) -> Result<DeltaNetW, ModelError> {
    let n = |s: &str| format!("blk.{il}.{s}");
    let d = c.n_embd;
    let (hk, hv, dk, dv) = (c.ssm_h_k, c.ssm_h_v, c.ssm_d_k, c.ssm_d_v);
    let conv_dim = c.conv_dim();
    let (qkv, gate) = if l.has(&n("attn_qkv.weight")) {
        (
            l.mat(&n("attn_qkv.weight"), d, conv_dim)?,
            l.mat(&n("attn_gate.weight"), d, c.value_dim())?,
        )
    } else if l.has(&n("ssm_in.weight")) {
        // Legacy fused in_proj_qkvz: per key-head group
        // [q dk | k dk | v R·dv | z R·dv]; read in place as runs of rows
        // (all q, then all k, then all v; and all z).
        let name = n("ssm_in.weight");
        let r = hv / hk;
        let group = 2 * dk + 2 * r * dv;
        let fused = l.mat(&name, d, hk * group)?;
        let Bytes::Mapped { tensor, .. } = fused.bytes else {
            unreachable!("freshly loaded tensors are mapped")
        };
        let row = l.f.tensors[tensor].row_bytes() as usize;
        let run = |g: usize, off: usize, cnt: usize| ((g * group + off) * row, cnt * row, cnt);
        let mut qkv_runs = Vec::with_capacity(3 * hk);
        for (off, cnt) in [(0, dk), (dk, dk), (2 * dk, r * dv)] {
            qkv_runs.extend((0..hk).map(|g| run(g, off, cnt)));
        }
        let z_runs = (0..hk).map(|g| run(g, 2 * dk + r * dv, r * dv)).collect();
        (
            Mat {
                ty: fused.ty,
                n_in: d,
                n_out: conv_dim,
                bytes: Bytes::Rows {
                    tensor,
                    runs: qkv_runs,
                },
                lanes: None,
            },
            Mat {
                ty: fused.ty,
                n_in: d,
                n_out: c.value_dim(),
                bytes: Bytes::Rows {
                    tensor,
                    runs: z_runs,
                },
                lanes: None,
            },
        )
    } else {
        return Err(l.err(
            &n("attn_qkv.weight"),
            "missing (and no legacy ssm_in.weight either)",
        ));
    };
    Ok(DeltaNetW {
        qkv,
        gate,
        ba: l.mat(&n("ssm_ba.weight"), d, 2 * hv)?,
        conv: l.vec(&n("ssm_conv1d.weight"), &[c.conv_kernel, conv_dim])?,
        ssm_a: l.vec(&n("ssm_a"), &[hv])?,
        // `ssm_dt.bias` as llama.cpp's converter names it; some exporters
        // (Ollama's) write the same vector as plain `ssm_dt`.
        dt_bias: if !l.has(&n("ssm_dt.bias")) && l.has(&n("ssm_dt")) {
            l.vec(&n("ssm_dt"), &[hv])?
        } else {
            l.vec(&n("ssm_dt.bias"), &[hv])?
        },
        norm: l.vec(&n("ssm_norm.weight"), &[dv])?,
        out: l.mat(&n("ssm_out.weight"), c.value_dim(), d)?,
    })
}

/// A matrix that lies in one contiguous byte range (every matrix but the
/// legacy `ssm_in` parts).
pub fn qmat<'a>(f: &'a GgufFile, m: &'a Mat) -> Result<QMat<'a>, ModelError> {
    match &m.bytes {
        Bytes::Mapped { tensor, start, len } => {
            let whole: &[u8] = match &m.lanes {
                Some(l) => l,
                None => f.tensor_data(&f.tensors[*tensor]),
            };
            let bytes = whole
                .get(*start..*start + *len)
                .ok_or_else(|| ModelError::Backend("matrix byte range out of range".into()))?;
            match m.lanes {
                Some(_) => QMat::new_lanes(m.ty, m.n_in, m.n_out, bytes),
                None => QMat::new(m.ty, m.n_in, m.n_out, bytes),
            }
            .map_err(|e| ModelError::Backend(e.to_string()))
        }
        Bytes::Rows { .. } => Err(ModelError::Backend(
            "a matrix stored as runs of rows has no single byte range".into(),
        )),
    }
}

/// A matrix as one or more consecutive blocks of output rows: its first
/// output rows are the first part's, and so on.
pub fn qmats<'a>(f: &'a GgufFile, m: &'a Mat) -> Result<Vec<QMat<'a>>, ModelError> {
    match &m.bytes {
        Bytes::Mapped { .. } => Ok(vec![qmat(f, m)?]),
        Bytes::Rows { tensor, runs } => {
            let data = f.tensor_data(&f.tensors[*tensor]);
            let mut parts = Vec::with_capacity(runs.len());
            for &(start, len, rows) in runs {
                let bytes = data.get(start..start + len).ok_or_else(|| {
                    ModelError::Backend(format!("row run at byte {start} out of range"))
                })?;
                parts.push(
                    QMat::new(m.ty, m.n_in, rows, bytes)
                        .map_err(|e| ModelError::Backend(e.to_string()))?,
                );
            }
            if parts.iter().map(|p| p.n_out).sum::<usize>() != m.n_out {
                return Err(ModelError::Backend(format!(
                    "row runs hold {} rows, the matrix {}",
                    parts.iter().map(|p| p.n_out).sum::<usize>(),
                    m.n_out
                )));
            }
            Ok(parts)
        }
    }
}

/// If `f` is an MTP-only draft file (llama.cpp's converter with `--mtp`
/// writes one: embeddings, output and the `blk.N.nextn.*` block, no trunk
/// layers), the indices of its MTP blocks.
pub fn mtp_only_blocks(f: &GgufFile) -> Option<Vec<usize>> {
    let names = f
        .tensors
        .iter()
        .map(|t| t.name.as_str())
        .chain(f.unknown_tensors.iter().map(|u| u.name.as_str()));
    let block_of = |name: &str| -> Option<usize> {
        let rest = name.strip_prefix("blk.")?;
        rest.split('.').next()?.parse().ok()
    };
    let mut mtp = std::collections::BTreeSet::new();
    let mut all = std::collections::BTreeSet::new();
    for name in names {
        if let Some(b) = block_of(name) {
            all.insert(b);
            if name.contains(".nextn.") {
                mtp.insert(b);
            }
        }
    }
    (!mtp.is_empty() && all == mtp).then(|| mtp.into_iter().collect())
}

/// Expert `e`'s matrix of a stack.
pub fn expert<'a>(f: &'a GgufFile, x: &'a Experts, e: usize) -> Result<QMat<'a>, ModelError> {
    let data: &[u8] = match &x.lanes {
        Some(l) => l,
        None => f.tensor_data(&f.tensors[x.tensor]),
    };
    let row = x.ty.row_bytes(x.n_in as u64).unwrap_or(0) as usize;
    let s = e * x.stride + x.offset;
    let bytes = data
        .get(s..s + x.n_out * row)
        .ok_or_else(|| ModelError::Backend(format!("expert {e} slice out of range")))?;
    match x.lanes {
        Some(_) => QMat::new_lanes(x.ty, x.n_in, x.n_out, bytes),
        None => QMat::new(x.ty, x.n_in, x.n_out, bytes),
    }
    .map_err(|e| ModelError::Backend(e.to_string()))
}

/// An expert's matrix of a stack from its bytes held elsewhere (the expert
/// cache): the same bytes the mapping holds, so the same products.
/// `lanes`: the cache repacked the bytes into the lanes layout (where it
/// has kernels for the type).
pub(crate) fn expert_from<'a>(
    x: &Experts,
    bytes: &'a [u8],
    lanes: bool,
) -> Result<QMat<'a>, ModelError> {
    if lanes && redlite_quant::q16::lanes::kernels(x.ty).is_some() {
        QMat::new_lanes(x.ty, x.n_in, x.n_out, bytes)
    } else {
        QMat::new(x.ty, x.n_in, x.n_out, bytes)
    }
    .map_err(|e| ModelError::Backend(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The legacy fused `ssm_in` is read in place: no copy of its rows.
    #[test]
    fn legacy_ssm_in_is_not_copied() {
        let m = crate::Model::load(&redlite_testkit::fixture("tiny-s-Q8_0-legacy.gguf"))
            .unwrap_or_else(|e| panic!("{e}"));
        let hk = m.config.ssm_h_k;
        let mut checked = 0;
        for layer in &m.weights.layers {
            if let Mixer::DeltaNet(w) = &layer.mixer {
                let (Bytes::Rows { runs: qkv, .. }, Bytes::Rows { runs: z, .. }) =
                    (&w.qkv.bytes, &w.gate.bytes)
                else {
                    panic!("legacy DeltaNet projections are not row views of ssm_in");
                };
                assert_eq!((qkv.len(), z.len()), (3 * hk, hk));
                checked += 1;
            }
        }
        assert_eq!(checked, 3);
    }
}
