//! Making an importance matrix as `llama-imatrix` does
//! (`tools/imatrix/imatrix.cpp`, `IMatrixCollector`): for the input of every
//! matrix product of the blocks (`blk.*`, and `output.weight` when asked),
//! the per-column sum of squared activations and the number of rows, per
//! expert for the routed-expert stacks (counted over the rows routed to each
//! expert); written in llama.cpp's GGUF imatrix format or its legacy `.dat`.
//!
//! What is the same as llama-imatrix: which products are collected (dense
//! products of fewer than 16 rows are skipped, routed experts never are), the
//! counts, the entry names and order, the shapes (`in_sum2` `{n_in, n_mat}`,
//! `counts` `{1, n_mat}`, a single matrix written 1-D as ggml drops the
//! trailing 1), the metadata (`general.type`, `imatrix.datasets`,
//! `imatrix.chunk_count` = the largest count / chunk size,
//! `imatrix.chunk_size`) and the legacy file's normalisation. What differs:
//! the sums are accumulated in f64 (llama.cpp adds f32 squares into an f32
//! sum) and the activations are Red Lite's exact ones, so the sums differ by
//! llama.cpp's rounding only (measured in `bench/RESULTS.md`).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use redlite_gguf::{GgufWriter, MetaArray, MetaValue};

use crate::imatrix::ImatrixError;

/// Dense products with fewer rows than this are not collected
/// (llama-imatrix's `src1->ne[1] < 16` rule).
pub const MIN_DENSE_ROWS: usize = 16;

#[derive(Clone, Debug)]
struct Stat {
    n_in: usize,
    /// `n_in · n_mat` sums, matrix-major.
    sums: Vec<f64>,
    /// One count per matrix (1 for a dense tensor, one per expert).
    counts: Vec<u64>,
}

/// Accumulates the squared activations of every collected product.
#[derive(Clone, Debug)]
pub struct ImatrixCollector {
    entries: BTreeMap<String, Stat>,
    n_expert: usize,
    chunk_size: usize,
    process_output: bool,
}

impl ImatrixCollector {
    /// `n_expert`: the routed experts per stack; `chunk_size`: the tokens per
    /// chunk (`-c`); `process_output`: also collect `output.weight`.
    pub fn new(n_expert: usize, chunk_size: usize, process_output: bool) -> ImatrixCollector {
        ImatrixCollector {
            entries: BTreeMap::new(),
            n_expert,
            chunk_size: chunk_size.max(1),
            process_output,
        }
    }

    /// Whether products with `weight` are collected.
    pub fn wants(&self, weight: &str) -> bool {
        weight.starts_with("blk.") || (self.process_output && weight == "output.weight")
    }

    /// Add the input `x` (`rows` rows) of a product with `weight`; `expert`
    /// for a routed-expert stack. A non-finite sum is an error naming the
    /// tensor (llama-imatrix stops there too).
    pub fn add(
        &mut self,
        weight: &str,
        expert: Option<usize>,
        rows: usize,
        x: &[f32],
    ) -> Result<(), String> {
        if rows == 0 || !self.wants(weight) {
            return Ok(());
        }
        if expert.is_none() && rows < MIN_DENSE_ROWS {
            return Ok(());
        }
        if !x.len().is_multiple_of(rows) {
            return Err(format!(
                "{weight}: {} input values are not {rows} whole rows",
                x.len()
            ));
        }
        let n_in = x.len() / rows;
        let n_mat = if expert.is_some() { self.n_expert } else { 1 };
        let e = self
            .entries
            .entry(weight.to_string())
            .or_insert_with(|| Stat {
                n_in,
                sums: vec![0.0; n_in * n_mat],
                counts: vec![0; n_mat],
            });
        if e.n_in != n_in || e.counts.len() != n_mat {
            return Err(format!(
                "{weight}: inconsistent input size ({n_in} columns for {n_mat} matrices, \
                 earlier {} for {})",
                e.n_in,
                e.counts.len()
            ));
        }
        let m = expert.unwrap_or(0);
        if m >= n_mat {
            return Err(format!(
                "{weight}: expert {m} is outside the {n_mat} experts"
            ));
        }
        let acc = &mut e.sums[m * n_in..(m + 1) * n_in];
        for row in x.chunks_exact(n_in) {
            for (a, &v) in acc.iter_mut().zip(row) {
                *a += v as f64 * v as f64;
            }
        }
        if acc.iter().any(|v| !v.is_finite()) {
            return Err(format!("non-finite values detected in {weight}"));
        }
        e.counts[m] += rows as u64;
        Ok(())
    }

    /// Entries collected so far.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// `imatrix.chunk_count`: the largest count divided by the chunk size.
    pub fn chunk_count(&self) -> u32 {
        let max = self
            .entries
            .values()
            .flat_map(|e| e.counts.iter().copied())
            .max()
            .unwrap_or(0);
        (max / self.chunk_size as u64) as u32
    }

    /// The raw sums (as f32) and counts of one entry, for tests and reports.
    pub fn entry(&self, weight: &str) -> Option<(Vec<f32>, Vec<u64>)> {
        self.entries
            .get(weight)
            .map(|e| (e.sums.iter().map(|&v| v as f32).collect(), e.counts.clone()))
    }

    /// Entries with at least one matrix never used (as llama-imatrix warns).
    pub fn partial(&self) -> Vec<(String, usize, usize)> {
        self.entries
            .iter()
            .filter_map(|(n, e)| {
                let zeros = e.counts.iter().filter(|&&c| c == 0).count();
                (zeros > 0).then(|| (n.clone(), e.counts.len() - zeros, e.counts.len()))
            })
            .collect()
    }

    /// llama.cpp's GGUF imatrix file; `datasets` are the calibration files'
    /// names as given.
    pub fn write_gguf(&self, path: &Path, datasets: &[String]) -> Result<(), ImatrixError> {
        let mut w = GgufWriter::new();
        w.add_str("general.type", "imatrix");
        w.add_kv(
            "imatrix.datasets",
            MetaValue::Array(MetaArray::String(datasets.to_vec())),
        );
        w.add_u32("imatrix.chunk_count", self.chunk_count());
        w.add_u32("imatrix.chunk_size", self.chunk_size as u32);
        for (name, e) in &self.entries {
            let n_mat = e.counts.len() as u64;
            let n_in = e.n_in as u64;
            let (sdims, cdims): (Vec<u64>, Vec<u64>) = if n_mat == 1 {
                (vec![n_in], vec![1])
            } else {
                (vec![n_in, n_mat], vec![1, n_mat])
            };
            let sums: Vec<f32> = e.sums.iter().map(|&v| v as f32).collect();
            let counts: Vec<f32> = e.counts.iter().map(|&c| c as f32).collect();
            w.add_f32_tensor(format!("{name}.in_sum2"), &sdims, &sums)?;
            w.add_f32_tensor(format!("{name}.counts"), &cdims, &counts)?;
        }
        w.write_to_path(path)?;
        Ok(())
    }

    /// The legacy `.dat` file (`save_imatrix_legacy`): entries with any data,
    /// by name; each `(sum / count) · ncall` in f32 with `ncall` the count in
    /// chunks rounded up (a matrix never used stores `ncall`); then the chunk
    /// count and the dataset name.
    pub fn write_dat(&self, path: &Path, dataset: &str) -> Result<(), ImatrixError> {
        let io = |err| ImatrixError::Io {
            path: path.to_path_buf(),
            err,
        };
        let mut out = Vec::new();
        let stored: Vec<(&String, &Stat)> = self
            .entries
            .iter()
            .filter(|(_, e)| e.counts.iter().any(|&c| c > 0))
            .collect();
        out.extend_from_slice(&(stored.len() as i32).to_le_bytes());
        let cs = self.chunk_size as u64;
        for (name, e) in stored {
            out.extend_from_slice(&(name.len() as i32).to_le_bytes());
            out.extend_from_slice(name.as_bytes());
            let max = e.counts.iter().copied().max().unwrap_or(0);
            let ncall = max.div_ceil(cs) as i32;
            out.extend_from_slice(&ncall.to_le_bytes());
            out.extend_from_slice(&(e.sums.len() as i32).to_le_bytes());
            for (i, &s) in e.sums.iter().enumerate() {
                let mut count = e.counts[i / e.n_in] as f32;
                let mut value = s as f32;
                if count == 0.0 {
                    value = 1.0;
                    count = 1.0;
                }
                out.extend_from_slice(&((value / count) * ncall as f32).to_le_bytes());
            }
        }
        out.extend_from_slice(&(self.chunk_count() as i32).to_le_bytes());
        out.extend_from_slice(&(dataset.len() as i32).to_le_bytes());
        out.extend_from_slice(dataset.as_bytes());
        let mut f = std::fs::File::create(path).map_err(io)?;
        f.write_all(&out).map_err(io)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Imatrix;

    fn sample() -> ImatrixCollector {
        let mut c = ImatrixCollector::new(3, 16, false);
        let x: Vec<f32> = (0..16 * 4).map(|i| (i as f32 - 30.0) / 7.0).collect();
        c.add("blk.0.attn_qkv.weight", None, 16, &x).unwrap();
        c.add("blk.0.attn_qkv.weight", None, 8, &x[..32]).unwrap(); // < 16 rows: skipped
        c.add("blk.0.ffn_up_exps.weight", Some(2), 3, &x[..12])
            .unwrap();
        c.add("blk.0.ffn_up_exps.weight", Some(0), 1, &x[4..8])
            .unwrap();
        c.add("output.weight", None, 16, &x).unwrap(); // not without process_output
        c
    }

    #[test]
    fn sums_counts_and_rules() {
        let c = sample();
        assert_eq!(c.len(), 2);
        let (s, n) = c.entry("blk.0.attn_qkv.weight").unwrap();
        assert_eq!(n, vec![16]);
        for (j, &v) in s.iter().enumerate() {
            let want: f64 = (0..16)
                .map(|r| ((r * 4 + j) as f64 - 30.0) / 7.0)
                .map(|v| {
                    let v = v as f32 as f64;
                    v * v
                })
                .sum();
            assert!((v as f64 - want).abs() <= 1e-6 * want, "{v} {want}");
        }
        let (s, n) = c.entry("blk.0.ffn_up_exps.weight").unwrap();
        assert_eq!(n, vec![1, 0, 3]);
        assert_eq!(s.len(), 12);
        assert!(s[4..8].iter().all(|&v| v == 0.0));
        assert_eq!(c.partial().len(), 1);
        assert_eq!(c.chunk_count(), 1);
        let mut bad = ImatrixCollector::new(3, 16, false);
        assert!(bad
            .add("blk.0.ffn_up_exps.weight", Some(3), 1, &[1.0])
            .is_err());
        assert!(bad
            .add("blk.0.x.weight", None, 16, &[f32::NAN; 16])
            .is_err());
    }

    /// Both formats read back through the reader llama-quantize's loader is
    /// ported in (`Imatrix::load`), with the same normalised weights.
    #[test]
    fn gguf_and_dat_read_back() {
        let c = sample();
        let dir = tempfile::tempdir().unwrap();
        let g = dir.path().join("m.gguf");
        let d = dir.path().join("m.dat");
        c.write_gguf(&g, &["calib.txt".to_string()]).unwrap();
        c.write_dat(&d, "calib.txt").unwrap();
        let a = Imatrix::load(&g).unwrap();
        let b = Imatrix::load(&d).unwrap();
        assert!(!a.is_legacy && b.is_legacy);
        assert_eq!(a.datasets, vec!["calib.txt".to_string()]);
        assert_eq!(b.datasets, vec!["calib.txt".to_string()]);
        assert_eq!((a.chunk_count, a.chunk_size, b.chunk_count), (1, 16, 1));
        assert_eq!(a.entries.len(), 2);
        for (name, wa) in &a.entries {
            let wb = &b.entries[name];
            assert_eq!(wa.len(), wb.len(), "{name}");
            for (i, (x, y)) in wa.iter().zip(wb).enumerate() {
                // The reader gives 1 where a matrix has no data.
                assert!(
                    (x - y).abs() <= 1e-6 * x.abs().max(1.0),
                    "{name}[{i}]: {x} {y}"
                );
            }
        }
        let (s, _) = c.entry("blk.0.ffn_up_exps.weight").unwrap();
        let w = &a.entries["blk.0.ffn_up_exps.weight"];
        assert_eq!(w[0], s[0]);
        assert_eq!(w[4], 1.0);
        assert_eq!(w[8], s[8] / 3.0);
    }
}
