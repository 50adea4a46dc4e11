//! The streaming quantizer: `llama_model_quantize_impl` for one (possibly
//! split) GGUF input.
//!
//! The output's header is written first (every tensor's type and size is
//! known from the plan), then each tensor in turn: its rows are read from the
//! input with positioned reads (no mapping, so resident memory stays bounded
//! by the slab size, not the model), converted to f32 a slab at a time,
//! quantized by rows in parallel on a rayon pool and written in order. A
//! row's bytes depend only on the row and its expert's importance weights,
//! so the output is the same for any thread count.
//!
//! Metadata follows llama-quantize: the input's key-value pairs, then
//! `general.quantization_version` (2) and `general.file_type` moved to the
//! end, `split.*` removed, then `quantize.imatrix.file`,
//! `quantize.imatrix.dataset`, `quantize.imatrix.entries_count` and
//! `quantize.imatrix.chunks_count` when an importance matrix is used.
//!
//! Split output ([`Split`]) follows llama.cpp: with a maximum shard size,
//! tensors go to shards as `gguf-split --split-max-size` assigns them (a new
//! shard when the next tensor's 32-byte-padded size would pass the maximum);
//! with `KeepInput`, each tensor stays in its input shard's number as
//! `llama-quantize --keep-split` does. The first shard holds all the metadata,
//! every shard gets `split.no`, `split.count` and `split.tensors.count`, and
//! the shards are named `PREFIX-00001-of-0000N.gguf` (PREFIX: the output path
//! without `.gguf`).

use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rayon::prelude::*;
use redlite_gguf::{GgmlType, GgufFile, GgufWriter, MetaValue};

use crate::ftype::FileType;
use crate::imatrix::Imatrix;
use crate::mix::{self, MixOptions, ModelInfo, PlannedTensor, TensorDesc};

/// Everything `quantize_file` needs besides the input and output paths.
#[derive(Clone, Debug)]
pub struct QuantizeOptions {
    pub mix: MixOptions,
    /// The importance matrix, with the file name to record in
    /// `quantize.imatrix.file` (as the user gave it).
    pub imatrix: Option<(Imatrix, String)>,
    pub allow_requantize: bool,
    /// Worker threads (0: rayon's default).
    pub threads: usize,
    /// Decide and report the types and sizes without writing anything.
    pub dry_run: bool,
    /// Largest slab of a tensor held in memory at once (input + f32 + output bytes).
    pub max_slab_bytes: usize,
    /// Write one file or shards.
    pub split: Split,
}

/// How the output is split into shards.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Split {
    /// One file.
    #[default]
    None,
    /// Shards of at most this many bytes of tensor data (`--split-max-size`).
    MaxBytes(u64),
    /// The input's shards (`--keep-split`); one file for an unsplit input.
    KeepInput,
}

/// gguf-split's size argument: `N` followed by `M` (10^6 bytes) or `G` (10^9).
pub fn parse_split_size(s: &str) -> Result<u64, String> {
    let (num, mult) = match s.chars().last() {
        Some('M') => (&s[..s.len() - 1], 1_000_000u64),
        Some('G') => (&s[..s.len() - 1], 1_000_000_000u64),
        _ => {
            return Err(format!(
                "split size '{s}': supported units are M (megabytes) or G (gigabytes)"
            ))
        }
    };
    let n: u64 = num
        .parse()
        .map_err(|_| format!("split size '{s}': '{num}' is not a whole number"))?;
    if n == 0 {
        return Err(format!("split size '{s}': size must be a positive value"));
    }
    n.checked_mul(mult)
        .ok_or_else(|| format!("split size '{s}' is too large"))
}

/// llama.cpp's `llama_split_path`: `PREFIX-NNNNN-of-MMMMM.gguf`, PREFIX being
/// `output` without its `.gguf` extension.
pub fn split_path(output: &Path, no: usize, count: usize) -> PathBuf {
    let s = output.to_string_lossy();
    let prefix = s.strip_suffix(".gguf").unwrap_or(&s);
    PathBuf::from(format!("{prefix}-{:05}-of-{count:05}.gguf", no + 1))
}

/// The shard of each tensor (in plan order) and the number of shards, or
/// `None` for a single unsplit file.
pub fn assign_shards(
    tensors: &[PlannedTensor],
    input_shard: &[usize],
    split: Split,
) -> Result<Option<(Vec<usize>, usize)>, QuantizeError> {
    match split {
        Split::None => Ok(None),
        Split::KeepInput => {
            let n = input_shard.iter().map(|&s| s + 1).max().unwrap_or(1);
            if n <= 1 {
                return Ok(None);
            }
            Ok(Some((input_shard.to_vec(), n)))
        }
        Split::MaxBytes(max) => {
            let mut out = Vec::with_capacity(tensors.len());
            let mut shard = 0usize;
            let mut in_shard = 0usize;
            let mut cur = 0u64;
            for t in tensors {
                let n = t.out_bytes().div_ceil(32) * 32;
                if cur + n > max {
                    if in_shard == 0 {
                        return Err(QuantizeError::Other(format!(
                            "--split-max-size {max}: one of the splits would have no tensors \
                             (tensor {} alone is {} bytes)",
                            t.name,
                            t.out_bytes()
                        )));
                    }
                    shard += 1;
                    in_shard = 0;
                    cur = n;
                } else {
                    cur += n;
                }
                in_shard += 1;
                out.push(shard);
            }
            Ok(Some((out, shard + 1)))
        }
    }
}

impl QuantizeOptions {
    pub fn new(ftype: FileType) -> QuantizeOptions {
        QuantizeOptions {
            mix: MixOptions::new(ftype),
            imatrix: None,
            allow_requantize: false,
            threads: 0,
            dry_run: false,
            max_slab_bytes: 256 << 20,
            split: Split::None,
        }
    }
}

/// Progress events, one per tensor (and per slab of a large one).
#[derive(Clone, Debug)]
pub enum Progress<'a> {
    /// The plan is made: total bytes to write.
    Start { tensors: usize, out_bytes: u64 },
    /// Tensor `index` starts.
    Tensor {
        index: usize,
        tensor: &'a PlannedTensor,
    },
    /// `bytes` more of the output are written.
    Bytes { bytes: u64 },
}

/// What was done.
#[derive(Clone, Debug)]
pub struct Report {
    pub tensors: Vec<PlannedTensor>,
    pub in_bytes: u64,
    pub out_bytes: u64,
    pub n_elements: u64,
    /// The files written (one, or the shards in order; empty for a dry run).
    pub files: Vec<PathBuf>,
    /// Tensors whose row length forced a fallback type.
    pub n_fallback: usize,
    /// A dry run that would need an importance matrix to complete.
    pub will_require_imatrix: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum QuantizeError {
    #[error("{0}")]
    Gguf(#[from] redlite_gguf::GgufError),
    #[error("{path}: {err}")]
    Io { path: PathBuf, err: io::Error },
    #[error("{0}")]
    Mix(#[from] mix::MixError),
    #[error(
        "this quantization requires an imatrix! (offending tensor: {tensor}, target type: {ty})"
    )]
    RequiresImatrix { tensor: String, ty: GgmlType },
    #[error("Missing importance matrix for tensor {0} in a very low-bit quantization")]
    MissingImatrixEntry(String),
    #[error("imatrix size {got} is different from tensor size {want} for {tensor}")]
    ImatrixSize {
        got: usize,
        want: u64,
        tensor: String,
    },
    #[error("imatrix contains non-finite value {value} (entry {entry})")]
    ImatrixNonFinite { value: f32, entry: String },
    #[error("requantizing from type {0} is disabled (tensor {1}; --allow-requantize allows it)")]
    Requantize(GgmlType, String),
    #[error("tensor {tensor}: converting {from} to {to} is not implemented yet")]
    NotImplemented {
        tensor: String,
        from: GgmlType,
        to: GgmlType,
    },
    #[error("tensor {tensor}: {msg}")]
    Tensor { tensor: String, msg: String },
    #[error("{0}")]
    Other(String),
}

/// The model facts the mix needs, from the input's metadata.
pub fn model_info(f: &GgufFile) -> Result<ModelInfo, QuantizeError> {
    let arch = f.architecture()?;
    let get =
        |k: &str| -> Result<Option<u64>, QuantizeError> { Ok(f.get_u64(&format!("{arch}.{k}"))?) };
    let per_layer0 = |k: &str| -> Result<Option<u64>, QuantizeError> {
        let key = format!("{arch}.{k}");
        match f.get(&key) {
            Some(MetaValue::Array(a)) => Ok(a
                .as_i64_vec()
                .and_then(|v| v.first().copied())
                .map(|v| v.max(0) as u64)),
            Some(_) => Ok(f.get_u64(&key)?),
            None => Ok(None),
        }
    };
    let n_layer = get("block_count")?.ok_or_else(|| {
        QuantizeError::Other(format!(
            "{}: metadata key {arch}.block_count is missing",
            f.path().display()
        ))
    })? as u32;
    let n_expert = get("expert_count")?.unwrap_or(0) as u32;
    let n_expert = if n_expert <= 1 { 0 } else { n_expert };
    let n_head = per_layer0("attention.head_count")?.unwrap_or(0);
    let n_head_kv = per_layer0("attention.head_count_kv")?.unwrap_or(n_head);
    let n_gqa = n_head.checked_div(n_head_kv).unwrap_or(0) as u32;
    Ok(ModelInfo {
        n_layer,
        n_expert,
        n_gqa,
    })
}

/// The per-tensor plan for `f` under `opts` (what `--dry-run` prints).
pub fn plan(f: &GgufFile, opts: &QuantizeOptions) -> Result<Vec<PlannedTensor>, QuantizeError> {
    if let Some(u) = f.unknown_tensors.first() {
        return Err(QuantizeError::Tensor {
            tensor: u.name.clone(),
            msg: format!("type id {} is unknown to this build", u.type_id),
        });
    }
    let model = model_info(f)?;
    let mut mix = opts.mix.clone();
    mix.has_imatrix = opts.imatrix.is_some();
    let descs: Vec<TensorDesc> = f
        .tensors
        .iter()
        .map(|t| TensorDesc {
            name: t.name.clone(),
            ty: t.ggml_type,
            dims: t.dims.clone(),
        })
        .collect();
    Ok(mix::plan(&model, &mix, &descs)?)
}

struct Input {
    shards: Vec<(PathBuf, File)>,
}

impl Input {
    fn read(&self, shard: usize, offset: u64, buf: &mut [u8]) -> Result<(), QuantizeError> {
        let (path, file) = &self.shards[shard];
        file.read_exact_at(buf, offset)
            .map_err(|err| QuantizeError::Io {
                path: path.clone(),
                err,
            })
    }
}

/// Quantize `input` into `output` (or, with `dry_run`, only plan it).
pub fn quantize_file(
    input: &Path,
    output: &Path,
    opts: &QuantizeOptions,
    progress: &(dyn Fn(Progress<'_>) + Sync),
) -> Result<Report, QuantizeError> {
    let f = GgufFile::open(input)?;
    if let Some((im, _)) = &opts.imatrix {
        for (name, v) in &im.entries {
            if let Some(&value) = v.iter().find(|x| !x.is_finite()) {
                return Err(QuantizeError::ImatrixNonFinite {
                    value,
                    entry: name.clone(),
                });
            }
        }
    }
    let tensors = plan(&f, opts)?;
    let input_shard: Vec<usize> = tensors
        .iter()
        .map(|t| f.tensor_info(&t.name).map(|i| i.shard).unwrap_or(0))
        .collect();
    let shard_of = assign_shards(&tensors, &input_shard, opts.split)?;
    let ftype = opts.mix.ftype;
    let mut will_require_imatrix = false;
    if opts.imatrix.is_none() {
        if let Some(t) = tensors
            .iter()
            .find(|t| t.allows_quantization && t.requires_imatrix)
        {
            if !opts.dry_run {
                return Err(QuantizeError::RequiresImatrix {
                    tensor: t.name.clone(),
                    ty: t.target,
                });
            }
            will_require_imatrix = true;
        }
    }
    let in_bytes: u64 = tensors.iter().map(|t| t.in_bytes()).sum();
    let out_bytes: u64 = tensors.iter().map(|t| t.out_bytes()).sum();
    let n_elements: u64 = tensors.iter().map(|t| t.dims.iter().product::<u64>()).sum();
    let report = Report {
        n_fallback: tensors.iter().filter(|t| t.fallback).count(),
        tensors: tensors.clone(),
        in_bytes,
        out_bytes,
        n_elements,
        files: Vec::new(),
        will_require_imatrix,
    };
    if opts.dry_run {
        return Ok(report);
    }

    // Everything that would fail mid-way is checked before the output exists.
    let imatrix = opts.imatrix.as_ref().map(|(im, _)| im);
    let mut weights: Vec<Option<Arc<Vec<f32>>>> = Vec::with_capacity(tensors.len());
    for t in &tensors {
        if !t.converts() {
            weights.push(None);
            continue;
        }
        if t.dims.get(3).copied().unwrap_or(1) > 1 {
            return Err(QuantizeError::Tensor {
                tensor: t.name.clone(),
                msg: format!("4-dimensional tensors {:?} are not supported", t.dims),
            });
        }
        if mix::is_quantized(t.src_type) && !opts.allow_requantize {
            return Err(QuantizeError::Requantize(t.src_type, t.name.clone()));
        }
        if !redlite_quant::quantize::is_implemented(t.target) {
            return Err(QuantizeError::NotImplemented {
                tensor: t.name.clone(),
                from: t.src_type,
                to: t.target,
            });
        }
        if mix::is_quantized(t.src_type) && redlite_quant::kernels(t.src_type).is_none() {
            return Err(QuantizeError::NotImplemented {
                tensor: t.name.clone(),
                from: t.src_type,
                to: t.target,
            });
        }
        let ne0 = t.dims[0];
        let ne2 = t.dims.get(2).copied().unwrap_or(1);
        let mut w = None;
        if let Some(im) = imatrix {
            if let Some(v) = im.entries.get(&t.name) {
                if v.len() as u64 == ne0 * ne2 {
                    w = Some(Arc::new(v.clone()));
                } else if !(t.name == "token_embd.weight"
                    || t.name == "per_layer_token_embd.weight")
                {
                    return Err(QuantizeError::ImatrixSize {
                        got: v.len(),
                        want: ne0 * ne2,
                        tensor: t.name.clone(),
                    });
                }
            }
        }
        if w.is_none() && t.requires_imatrix {
            return Err(QuantizeError::MissingImatrixEntry(t.name.clone()));
        }
        weights.push(w);
    }

    let (shard_of, n_shards) = match shard_of {
        Some((v, n)) => (v, n),
        None => (vec![0; tensors.len()], 1),
    };
    // gguf-split names and marks its output as shards even when one suffices.
    let split_out = n_shards > 1 || matches!(opts.split, Split::MaxBytes(_));
    let out_paths: Vec<PathBuf> = if split_out {
        (0..n_shards)
            .map(|i| split_path(output, i, n_shards))
            .collect()
    } else {
        vec![output.to_path_buf()]
    };
    let mut writers: Vec<GgufWriter> = (0..out_paths.len()).map(|_| GgufWriter::new()).collect();
    for (k, v) in output_metadata(&f, ftype, opts.imatrix.as_ref()) {
        if k == "general.alignment" {
            if let Some(a) = v.as_u64() {
                writers[0].set_alignment(a)?;
                continue;
            }
        }
        writers[0].add_kv(k, v);
    }
    if split_out {
        for (i, w) in writers.iter_mut().enumerate() {
            w.add_kv("split.no", MetaValue::U16(i as u16));
            w.add_kv("split.count", MetaValue::U16(n_shards as u16));
            w.add_kv("split.tensors.count", MetaValue::I32(tensors.len() as i32));
        }
    }
    let shards = f
        .shard_paths()
        .into_iter()
        .map(|p| {
            File::open(p)
                .map(|h| (p.to_path_buf(), h))
                .map_err(|err| QuantizeError::Io {
                    path: p.to_path_buf(),
                    err,
                })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let input_files = Arc::new(Input { shards });
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(opts.threads)
        .build()
        .map_err(|e| QuantizeError::Other(format!("cannot start the worker threads: {e}")))?;
    let pool = Arc::new(pool);
    let failure: Arc<Mutex<Option<QuantizeError>>> = Arc::new(Mutex::new(None));
    progress(Progress::Start {
        tensors: tensors.len(),
        out_bytes,
    });
    // The writer's callbacks are 'static: they share the input, the pool and
    // a slot for the first error (io::Error cannot carry ours).
    let progress_events: Arc<Mutex<Vec<(usize, u64)>>> = Arc::new(Mutex::new(Vec::new()));
    for (i, t) in tensors.iter().enumerate() {
        let info = f
            .tensor_info(&t.name)
            .ok_or_else(|| QuantizeError::Other(format!("tensor {} vanished", t.name)))?
            .clone();
        let t2 = t.clone();
        let input = Arc::clone(&input_files);
        let pool = Arc::clone(&pool);
        let fail = Arc::clone(&failure);
        let w = weights[i].clone();
        let slab = opts.max_slab_bytes;
        let events = Arc::clone(&progress_events);
        writers[shard_of[i]].add_tensor_fill(
            t.name.clone(),
            &t.dims,
            t.target,
            Box::new(move |out: &mut dyn Write| {
                events.lock().map(|mut e| e.push((i, 0))).ok();
                let r = write_tensor(
                    &input,
                    &info,
                    &t2,
                    w.as_deref().map(|v| v.as_slice()),
                    &pool,
                    slab,
                    out,
                    &events,
                );
                match r {
                    Ok(()) => Ok(()),
                    Err(e) => {
                        let msg = e.to_string();
                        if let Ok(mut slot) = fail.lock() {
                            slot.get_or_insert(e);
                        }
                        Err(io::Error::other(msg))
                    }
                }
            }),
        )?;
    }
    // Progress is reported from this thread while the writer runs on another.
    let paths = out_paths.clone();
    let done = std::thread::scope(|s| {
        let h = s.spawn(move || -> Result<(), redlite_gguf::GgufError> {
            for (w, p) in writers.into_iter().zip(&paths) {
                w.write_to_path(p)?;
            }
            Ok(())
        });
        let mut seen = 0usize;
        loop {
            let finished = h.is_finished();
            let batch: Vec<(usize, u64)> = progress_events
                .lock()
                .map(|mut e| e.drain(..).collect())
                .unwrap_or_default();
            for (idx, bytes) in batch {
                if bytes == 0 {
                    progress(Progress::Tensor {
                        index: idx,
                        tensor: &tensors[idx],
                    });
                    seen = seen.max(idx + 1);
                } else {
                    progress(Progress::Bytes { bytes });
                }
            }
            if finished {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let _ = seen;
        h.join()
    });
    let result = match done {
        Ok(r) => r,
        Err(_) => Err(redlite_gguf::GgufError::Write(
            "the writer thread panicked".into(),
        )),
    };
    if let Err(e) = result {
        for p in &out_paths {
            let _ = std::fs::remove_file(p);
        }
        if let Ok(mut slot) = failure.lock() {
            if let Some(err) = slot.take() {
                return Err(err);
            }
        }
        return Err(e.into());
    }
    let mut report = report;
    report.files = out_paths;
    Ok(report)
}

/// The output's key-value pairs, in llama-quantize's order.
pub fn output_metadata(
    f: &GgufFile,
    ftype: FileType,
    imatrix: Option<&(Imatrix, String)>,
) -> Vec<(String, MetaValue)> {
    let mut kv: Vec<(String, MetaValue)> = f.metadata.clone();
    let set = |kv: &mut Vec<(String, MetaValue)>, k: &str, v: MetaValue| {
        kv.retain(|(key, _)| key != k);
        kv.push((k.to_string(), v));
    };
    set(&mut kv, "general.quantization_version", MetaValue::U32(2));
    set(&mut kv, "general.file_type", MetaValue::U32(ftype.id()));
    kv.retain(|(k, _)| k != "split.no" && k != "split.count" && k != "split.tensors.count");
    if let Some((im, name)) = imatrix {
        if !im.entries.is_empty() {
            set(
                &mut kv,
                "quantize.imatrix.file",
                MetaValue::String(truncate_127(name)),
            );
            if let Some(d) = im.datasets.first() {
                set(
                    &mut kv,
                    "quantize.imatrix.dataset",
                    MetaValue::String(truncate_127(d)),
                );
            }
            set(
                &mut kv,
                "quantize.imatrix.entries_count",
                MetaValue::U32(im.entries.len() as u32),
            );
            if im.chunk_count > 0 {
                set(
                    &mut kv,
                    "quantize.imatrix.chunks_count",
                    MetaValue::U32(im.chunk_count),
                );
            }
        }
    }
    kv
}

/// llama-quantize stores these strings in a 128-byte buffer.
fn truncate_127(s: &str) -> String {
    let mut end = s.len().min(127);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

/// Convert `n` values of `ty` to f32 (`llama_tensor_dequantize_impl`).
fn to_f32(ty: GgmlType, src: &[u8], out: &mut [f32]) -> Result<(), String> {
    match ty {
        GgmlType::F32 => {
            for (o, c) in out.iter_mut().zip(src.chunks_exact(4)) {
                *o = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            }
            Ok(())
        }
        GgmlType::F16 => {
            for (o, c) in out.iter_mut().zip(src.chunks_exact(2)) {
                *o = half::f16::from_le_bytes([c[0], c[1]]).to_f32();
            }
            Ok(())
        }
        GgmlType::BF16 => {
            for (o, c) in out.iter_mut().zip(src.chunks_exact(2)) {
                *o = f32::from_bits((u16::from_le_bytes([c[0], c[1]]) as u32) << 16);
            }
            Ok(())
        }
        _ => redlite_quant::dequantize(ty, src, out).map_err(|e| e.to_string()),
    }
}

#[allow(clippy::too_many_arguments)]
fn write_tensor(
    input: &Input,
    info: &redlite_gguf::TensorInfo,
    t: &PlannedTensor,
    imatrix: Option<&[f32]>,
    pool: &rayon::ThreadPool,
    max_slab: usize,
    out: &mut dyn Write,
    events: &Mutex<Vec<(usize, u64)>>,
) -> Result<(), QuantizeError> {
    let io_err = |err: io::Error| QuantizeError::Tensor {
        tensor: t.name.clone(),
        msg: format!("write failed: {err}"),
    };
    let report = |bytes: u64| {
        if let Ok(mut e) = events.lock() {
            e.push((usize::MAX, bytes));
        }
    };
    let src_row = info.row_bytes() as usize;
    if !t.converts() {
        // A plain copy, in slabs.
        let mut off = 0u64;
        let step = (max_slab.max(src_row) / src_row.max(1)).max(1) * src_row.max(1);
        let mut buf = vec![0u8; step.min(info.n_bytes as usize)];
        while off < info.n_bytes {
            let n = ((info.n_bytes - off) as usize).min(buf.len());
            input.read(info.shard, info.abs_offset + off, &mut buf[..n])?;
            out.write_all(&buf[..n]).map_err(io_err)?;
            report(n as u64);
            off += n as u64;
        }
        return Ok(());
    }
    let n_per_row = t.dims[0] as usize;
    let rows_per_expert = t.dims.get(1).copied().unwrap_or(1) as usize;
    let n_rows = rows_per_expert * t.dims.get(2).copied().unwrap_or(1) as usize;
    let dst_row = t
        .target
        .row_bytes(t.dims[0])
        .ok_or_else(|| QuantizeError::Tensor {
            tensor: t.name.clone(),
            msg: format!(
                "{} values per row do not fit {} blocks",
                n_per_row, t.target
            ),
        })? as usize;
    let per_row = src_row + dst_row + 4 * n_per_row;
    let slab_rows = (max_slab / per_row.max(1)).clamp(1, n_rows.max(1));
    let mut src = vec![0u8; slab_rows * src_row];
    let mut f32s = vec![0f32; slab_rows * n_per_row];
    let mut dst = vec![0u8; slab_rows * dst_row];
    let mut r0 = 0usize;
    while r0 < n_rows {
        let nr = slab_rows.min(n_rows - r0);
        input.read(
            info.shard,
            info.abs_offset + (r0 * src_row) as u64,
            &mut src[..nr * src_row],
        )?;
        let (s, fv, d) = (
            &src[..nr * src_row],
            &mut f32s[..nr * n_per_row],
            &mut dst[..nr * dst_row],
        );
        // Convert and quantize rows in parallel: groups of rows that never
        // cross an expert boundary (each expert has its own weights).
        let group = (16384 / n_per_row).max(1);
        let result: Result<(), String> = pool.install(|| {
            s.par_chunks(src_row * group)
                .zip(fv.par_chunks_mut(n_per_row * group))
                .zip(d.par_chunks_mut(dst_row * group))
                .enumerate()
                .try_for_each(|(gi, ((sg, fg), dg))| {
                    to_f32(t.src_type, sg, fg)?;
                    let rows = fg.len() / n_per_row;
                    let mut r = 0;
                    while r < rows {
                        let global = r0 + gi * group + r;
                        let expert = global / rows_per_expert;
                        let take = (rows - r).min(rows_per_expert - global % rows_per_expert);
                        let w = imatrix.map(|m| &m[expert * n_per_row..(expert + 1) * n_per_row]);
                        redlite_quant::quantize::quantize_rows(
                            t.target,
                            &fg[r * n_per_row..(r + take) * n_per_row],
                            n_per_row,
                            w,
                            &mut dg[r * dst_row..(r + take) * dst_row],
                        )
                        .map_err(|e| e.to_string())?;
                        r += take;
                    }
                    Ok(())
                })
        });
        result.map_err(|msg| QuantizeError::Tensor {
            tensor: t.name.clone(),
            msg,
        })?;
        out.write_all(d).map_err(io_err)?;
        report(d.len() as u64);
        r0 += nr;
    }
    Ok(())
}
