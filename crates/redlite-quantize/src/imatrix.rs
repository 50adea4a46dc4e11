//! Importance matrices as llama-quantize reads them: llama.cpp's GGUF format
//! (`<tensor>.in_sum2` and `<tensor>.counts` per matrix, `imatrix.datasets`,
//! `imatrix.chunk_count`, `imatrix.chunk_size`) and the legacy `.dat` format
//! (`common_imatrix_load`), normalized as `load_imatrix` in
//! `tools/quantize/quantize.cpp` does: each expert's sums divided by its
//! count (f32 division), or 1 where the count is 0; legacy sums divided by
//! the number of calls.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use redlite_gguf::{GgmlType, GgufFile, MetaArray, MetaValue};

/// The per-column weights of every matrix, ready for the quantizers.
#[derive(Clone, Debug, Default)]
pub struct Imatrix {
    /// Tensor name → `ne0 · n_expert` weights (expert-major).
    pub entries: BTreeMap<String, Vec<f32>>,
    pub datasets: Vec<String>,
    /// `imatrix.chunk_count` (or the legacy trailer's call count).
    pub chunk_count: u32,
    pub chunk_size: u32,
    pub is_legacy: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum ImatrixError {
    #[error("{path}: {err}")]
    Io { path: PathBuf, err: std::io::Error },
    #[error("{path}: {msg}")]
    Format { path: PathBuf, msg: String },
    #[error("{0}")]
    Gguf(#[from] redlite_gguf::GgufError),
}

impl Imatrix {
    /// Read either format (a file that does not start with the GGUF magic is
    /// read as legacy `.dat`, as llama.cpp does when its GGUF parser fails).
    pub fn load(path: &Path) -> Result<Imatrix, ImatrixError> {
        let bytes = std::fs::read(path).map_err(|err| ImatrixError::Io {
            path: path.to_path_buf(),
            err,
        })?;
        if bytes.starts_with(b"GGUF") {
            Self::load_gguf(path)
        } else {
            Self::parse_legacy(&bytes, path)
        }
    }

    fn load_gguf(path: &Path) -> Result<Imatrix, ImatrixError> {
        let f = GgufFile::open(path)?;
        let fmt = |msg: String| ImatrixError::Format {
            path: path.to_path_buf(),
            msg,
        };
        if f.tensors.is_empty() {
            return Err(fmt("no data in file".into()));
        }
        let datasets = match f.get("imatrix.datasets") {
            Some(MetaValue::Array(MetaArray::String(v))) => Some(v.clone()),
            _ => None,
        };
        let chunk_count = f.get("imatrix.chunk_count").and_then(|v| v.as_u64());
        let chunk_size = f.get("imatrix.chunk_size").and_then(|v| v.as_u64());
        if f.get("imatrix.datasets").is_none() || chunk_count.is_none() || chunk_size.is_none() {
            return Err(fmt(
                "missing imatrix metadata (imatrix.datasets, imatrix.chunk_count, imatrix.chunk_size)"
                    .into(),
            ));
        }
        let mut pairs: BTreeMap<String, (Option<usize>, Option<usize>)> = BTreeMap::new();
        for (i, t) in f.tensors.iter().enumerate() {
            if let Some(n) = t.name.strip_suffix(".in_sum2") {
                pairs.entry(n.to_string()).or_default().0 = Some(i);
            } else if let Some(n) = t.name.strip_suffix(".counts") {
                pairs.entry(n.to_string()).or_default().1 = Some(i);
            }
        }
        let mut entries = BTreeMap::new();
        for (name, (s, c)) in pairs {
            let (Some(s), Some(c)) = (s, c) else {
                return Err(fmt(format!("mismatched sums and counts for {name}")));
            };
            let (ts, tc) = (&f.tensors[s], &f.tensors[c]);
            if ts.ggml_type != GgmlType::F32 || tc.ggml_type != GgmlType::F32 {
                return Err(fmt(format!("sums and counts for {name} must be F32")));
            }
            let sums = f32s(f.tensor_data(ts));
            let counts: Vec<i64> = f32s(f.tensor_data(tc))
                .iter()
                .map(|&c| c.round() as i64)
                .collect();
            if counts.is_empty() || !sums.len().is_multiple_of(counts.len()) {
                return Err(fmt(format!(
                    "{name}: {} sums are not a whole number of rows for {} counts",
                    sums.len(),
                    counts.len()
                )));
            }
            let ne0 = sums.len() / counts.len();
            let mut e = vec![0f32; sums.len()];
            for (j, &cnt) in counts.iter().enumerate() {
                let count = cnt as f32;
                for i in 0..ne0 {
                    e[j * ne0 + i] = if count > 0.0 {
                        sums[j * ne0 + i] / count
                    } else {
                        1.0
                    };
                }
            }
            entries.insert(name, e);
        }
        Ok(Imatrix {
            entries,
            datasets: datasets.unwrap_or_default(),
            chunk_count: chunk_count.unwrap_or(0) as u32,
            chunk_size: chunk_size.unwrap_or(0) as u32,
            is_legacy: false,
        })
    }

    /// The legacy `.dat` format: `i32 n_entries`, then per entry `i32 len,
    /// name, i32 ncall, i32 nval, f32 values[nval]`, then optionally
    /// `i32 chunk_count, i32 len, dataset`.
    pub fn parse_legacy(b: &[u8], path: &Path) -> Result<Imatrix, ImatrixError> {
        let mut pos = 0usize;
        let fmt = |msg: String| ImatrixError::Format {
            path: path.to_path_buf(),
            msg,
        };
        let i32_at = |pos: &mut usize, what: &str| -> Result<i32, ImatrixError> {
            let s = b
                .get(*pos..*pos + 4)
                .ok_or_else(|| fmt(format!("truncated at byte {pos} reading {what}")))?;
            *pos += 4;
            Ok(i32::from_le_bytes([s[0], s[1], s[2], s[3]]))
        };
        let n_entries = i32_at(&mut pos, "the entry count")?;
        if n_entries < 1 {
            return Err(fmt("no data in file".into()));
        }
        let mut entries = BTreeMap::new();
        for i in 0..n_entries {
            let len = i32_at(&mut pos, "a name length")?;
            let len = usize::try_from(len).map_err(|_| {
                fmt(format!(
                    "entry {}: negative name length at byte {}",
                    i + 1,
                    pos - 4
                ))
            })?;
            let name = b.get(pos..pos + len).ok_or_else(|| {
                fmt(format!(
                    "failed reading name for entry {} at byte {pos}",
                    i + 1
                ))
            })?;
            let name = String::from_utf8_lossy(name).into_owned();
            pos += len;
            let ncall = i32_at(&mut pos, "a call count")?;
            let nval = i32_at(&mut pos, "a value count")?;
            if nval < 1 {
                return Err(fmt(format!(
                    "failed reading number of values for entry {i} ({name})"
                )));
            }
            let n = nval as usize;
            let raw = b.get(pos..pos + 4 * n).ok_or_else(|| {
                fmt(format!(
                    "failed reading data for entry {i} ({name}) at byte {pos}"
                ))
            })?;
            pos += 4 * n;
            let sums = f32s(raw);
            let e = if ncall > 0 {
                sums.iter().map(|&s| s / ncall as f32).collect()
            } else {
                sums
            };
            entries.insert(name, e);
        }
        let mut chunk_count = 0u32;
        let mut datasets = Vec::new();
        if pos < b.len() {
            if let Ok(n) = i32_at(&mut pos, "the chunk count") {
                chunk_count = n.max(0) as u32;
                if let Ok(len) = i32_at(&mut pos, "the dataset name length") {
                    if len > 0 {
                        if let Some(d) = b.get(pos..pos + len as usize) {
                            let d = d.split(|&c| c == 0).next().unwrap_or(d);
                            datasets.push(String::from_utf8_lossy(d).into_owned());
                        }
                    }
                }
            }
        }
        Ok(Imatrix {
            entries,
            datasets,
            chunk_count,
            chunk_size: 0,
            is_legacy: true,
        })
    }
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}
