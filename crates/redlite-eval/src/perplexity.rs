//! Perplexity and KL divergence as `llama-perplexity` computes them
//! (`tools/perplexity/perplexity.cpp`, llama.cpp 0c1e570), from logits: no
//! model here, the caller runs the chunks.
//!
//! - The text is cut into chunks of `n_ctx` tokens (the first token of each
//!   replaced by BOS when the vocabulary adds one); each chunk is a fresh
//!   sequence, and only its second half is scored: the logits at positions
//!   `n_ctx/2 .. n_ctx-2` predict the tokens after them ([`Chunk::scored`]).
//! - [`Ppl`]: the running `[1]x,[2]y` figures and the final estimate with its
//!   uncertainty (`sqrt(var(nll) / (count-1)) · PPL`).
//! - The base logits file (`--kl-divergence-base`): `"_logits_"`, `u32 n_ctx`,
//!   `i32 n_vocab`, `i32 n_chunk`, the `n_ctx · n_chunk` tokens as `i32`, then
//!   per chunk `n_ctx - 1 - n_ctx/2` records of `2·⌈n_vocab/2⌉ + 4` `u16`:
//!   `f32 scale`, `f32 min_log_prob`, then each token's log-probability as
//!   `round((logit - min_logit) / scale)` (logits below `max - 16` stored
//!   as 0), [`compress`]. [`BaseWriter`] and [`BaseReader`].
//! - [`Kld`]: the statistics of `--kl-divergence` (mean KLD and its
//!   uncertainty, percentiles, same-top-token %, Δp and its RMS, PPL(Q),
//!   PPL(base), their ratio, difference and correlation), [`Kld::report`]
//!   printing them as llama-perplexity does.
//!
//! The arithmetic (f32 where llama.cpp uses `float`, f64 where it uses
//! `double`, the same order) is llama.cpp's, so the same logits give the same
//! figures to the last printed digit, and a base file written by either tool
//! is read by the other.

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

/// The first 8 bytes of a base logits file.
pub const MAGIC: &[u8; 8] = b"_logits_";

/// `u16` values per scored token in a base logits file.
pub fn record_len(n_vocab: usize) -> usize {
    2 * n_vocab.div_ceil(2) + 4
}

/// The scored part of a chunk of `n_ctx` tokens: the first logits row used
/// (`n_ctx/2`) and the number of predictions (`n_ctx - 1 - n_ctx/2`).
#[derive(Clone, Copy, Debug)]
pub struct Chunk {
    pub first: usize,
    pub n_scored: usize,
}

impl Chunk {
    pub fn scored(n_ctx: usize) -> Chunk {
        let first = n_ctx / 2;
        Chunk {
            first,
            n_scored: n_ctx.saturating_sub(1 + first),
        }
    }
}

/// ggml's `nearest_int` (round half to even through the f32 magic number).
#[inline]
fn nearest_int(f: f32) -> i32 {
    let v = f + 12_582_912.0;
    (v.to_bits() & 0x007f_ffff) as i32 - 0x0040_0000
}

/// `-log p(tok)` as the plain perplexity run computes it (`log_softmax`
/// without a base file): f32 max, f64 sum of f32 `exp`.
pub fn nll(logits: &[f32], tok: usize) -> f64 {
    let max = logits.iter().copied().fold(logits[0], f32::max);
    let sum: f64 = logits.iter().map(|&l| (l - max).exp() as f64).sum();
    -((logits[tok] - max) as f64 - sum.ln())
}

/// Compress one row of logits into a base-file record (`out` is
/// [`record_len`] long) and return `-log p(tok)` as that path computes it.
pub fn compress(logits: &[f32], tok: usize, out: &mut [u16]) -> f64 {
    let mut max = logits[0];
    let mut min = logits[0];
    for &l in &logits[1..] {
        max = max.max(l);
        min = min.min(l);
    }
    min = min.max(max - 16.0);
    let sum: f64 = logits.iter().map(|&l| (l - max).exp() as f64).sum();
    let log_sum_exp = sum.ln() as f32;
    let min_log_prob = min - max - log_sum_exp;
    let scale = (max - min) / 65535.0;
    let (head, body) = out.split_at_mut(4);
    let s = scale.to_le_bytes();
    let m = min_log_prob.to_le_bytes();
    head[0] = u16::from_le_bytes([s[0], s[1]]);
    head[1] = u16::from_le_bytes([s[2], s[3]]);
    head[2] = u16::from_le_bytes([m[0], m[1]]);
    head[3] = u16::from_le_bytes([m[2], m[3]]);
    body.iter_mut().for_each(|v| *v = 0);
    if scale != 0.0 {
        let inv = 1.0 / scale;
        for (v, &l) in body.iter_mut().zip(logits) {
            *v = if l > min {
                nearest_int(inv * (l - min)) as u16
            } else {
                0
            };
        }
    }
    (max + log_sum_exp - logits[tok]) as f64
}

/// The `(scale, min_log_prob)` header of a record.
fn record_head(rec: &[u16]) -> (f32, f32) {
    let w = |i: usize| rec[i].to_le_bytes();
    let (a, b, c, d) = (w(0), w(1), w(2), w(3));
    (
        f32::from_le_bytes([a[0], a[1], b[0], b[1]]),
        f32::from_le_bytes([c[0], c[1], d[0], d[1]]),
    )
}

/// The log-probabilities a record holds (as llama.cpp reads them back).
pub fn decompress(rec: &[u16], n_vocab: usize) -> Vec<f32> {
    let (scale, min_log_prob) = record_head(rec);
    rec[4..4 + n_vocab]
        .iter()
        .map(|&q| scale * q as f32 + min_log_prob)
        .collect()
}

/// The running perplexity of a plain run.
#[derive(Clone, Debug, Default)]
pub struct Ppl {
    pub nll: f64,
    pub nll2: f64,
    pub count: usize,
}

impl Ppl {
    pub fn add(&mut self, v: f64) {
        self.nll += v;
        self.nll2 += v * v;
        self.count += 1;
    }

    /// `exp(mean nll)` so far.
    pub fn value(&self) -> f64 {
        (self.nll / self.count as f64).exp()
    }

    /// `(PPL, uncertainty)` of the final estimate; `None` when the variance
    /// is not positive (llama.cpp prints an error then).
    pub fn estimate(&self) -> Option<(f64, f64)> {
        let n = self.count as f64;
        let nll = self.nll / n;
        let ppl = nll.exp();
        let var = self.nll2 / n - nll * nll;
        (var > 0.0).then(|| (ppl, (var / (n - 1.0)).sqrt() * ppl))
    }
}

/// The KL-divergence sums of llama-perplexity (`kl_divergence_result`) and
/// the per-token values for the percentiles.
#[derive(Clone, Debug, Default)]
pub struct Kld {
    pub sum_nll: f64,
    pub sum_nll2: f64,
    pub sum_nll_base: f64,
    pub sum_nll_base2: f64,
    pub sum_nll_nll_base: f64,
    pub sum_kld: f64,
    pub sum_kld2: f64,
    pub sum_p_diff: f64,
    pub sum_p_diff2: f64,
    pub sum_p_diff4: f64,
    pub max_p_diff: f32,
    pub n_same_top: usize,
    pub count: usize,
    pub kld_values: Vec<f32>,
    pub p_diff_values: Vec<f32>,
}

/// `(mean, uncertainty)` as llama-perplexity's `mean_and_uncertainty`.
pub fn mean_and_uncertainty(sum: f64, sum2: f64, count: usize) -> (f64, f64) {
    if count < 1 {
        return (0.0, 0.0);
    }
    let n = count as f64;
    let f = sum / n;
    let df = sum2 / n - f * f;
    let df = if df > 0.0 && count > 10 {
        (df / (n - 1.0)).sqrt()
    } else {
        0.0
    };
    (f, df)
}

fn covariance(a: f64, b: f64, ab: f64, count: usize) -> f64 {
    if count < 10 {
        return 0.0;
    }
    let n = count as f64;
    (ab / n - (a / n) * (b / n)) / (n - 1.0)
}

/// llama-perplexity's linear-interpolation percentile of sorted values.
fn percentile(v: &[f32], fraction: f32) -> f32 {
    if fraction <= 0.0 {
        return v[0];
    }
    if fraction >= 1.0 {
        return v[v.len() - 1];
    }
    let mut p = fraction * (v.len() - 1) as f32;
    let ip = p as usize;
    p -= ip as f32;
    (1.0 - p) * v[ip] + p * v[(ip + 1).min(v.len() - 1)]
}

fn median(v: &[f32]) -> f32 {
    let n = v.len();
    if n.is_multiple_of(2) {
        0.5 * (v[n / 2] + v[n / 2 - 1])
    } else {
        v[n / 2]
    }
}

/// The summary of a KL-divergence run (every figure llama-perplexity prints
/// at the end, also for `--json`).
#[derive(Clone, Debug, serde::Serialize)]
pub struct KldSummary {
    pub count: usize,
    pub ppl: (f64, f64),
    pub ppl_base: (f64, f64),
    pub ln_ppl_correlation: f64,
    pub ln_ppl_ratio: (f64, f64),
    pub ppl_ratio: (f64, f64),
    pub ppl_diff: (f64, f64),
    pub kld_mean: (f64, f64),
    /// Maximum, 99.9, 99, 95, 90 %, median, 10, 5, 1, 0.1 %, minimum.
    pub kld_percentiles: Vec<(String, f32)>,
    pub p_diff_mean: (f64, f64),
    /// Maximum, 99.9, 99, 95, 90, 75 %, median, 25, 10, 5, 1, 0.1 %, minimum.
    pub p_diff_percentiles: Vec<(String, f32)>,
    pub rms_p_diff: (f64, f64),
    pub same_top: (f64, f64),
}

impl Kld {
    /// Score one token: `logits` of the model judged, `base` the base file's
    /// record for the same position, `tok` the token that follows. Returns
    /// the token's KL divergence and Δp (as llama.cpp's `log_softmax` with a
    /// base).
    pub fn add(&mut self, logits: &[f32], base: &[u16], tok: usize) -> (f64, f32) {
        let n_vocab = logits.len();
        let mut max = logits[0];
        let mut imax = 0usize;
        for (i, &l) in logits.iter().enumerate().skip(1) {
            if l > max {
                max = l;
                imax = i;
            }
        }
        let sum_exp: f64 = logits.iter().map(|&l| (l - max).exp() as f64).sum();
        let log_sum_exp = sum_exp.ln() as f32;
        let (scale, min_log_prob) = record_head(base);
        let bq = &base[4..4 + n_vocab];
        let nll = max + log_sum_exp - logits[tok];
        self.sum_nll += nll as f64;
        self.sum_nll2 += (nll * nll) as f64;
        let nll_base = -(scale * bq[tok] as f32 + min_log_prob);
        self.sum_nll_base += nll_base as f64;
        self.sum_nll_base2 += (nll_base * nll_base) as f64;
        self.sum_nll_nll_base += (nll * nll_base) as f64;
        let max_l = max + log_sum_exp;
        let mut sum = 0f64;
        let mut imax_base = 0usize;
        let mut p_log_base_max = 0f32;
        for (i, (&q, &l)) in bq.iter().zip(logits).enumerate() {
            let p_log_base = scale * q as f32 + min_log_prob;
            if i == 0 || p_log_base > p_log_base_max {
                p_log_base_max = p_log_base;
                imax_base = i;
            }
            if p_log_base > -16.0 {
                let p_base = p_log_base.exp();
                sum += (p_base * (p_log_base - l + max_l)) as f64;
            }
        }
        self.sum_kld += sum;
        self.sum_kld2 += sum * sum;
        self.count += 1;
        if imax == imax_base {
            self.n_same_top += 1;
        }
        let p_base = (-nll_base).exp();
        let p = (-nll).exp();
        let p_diff = p - p_base;
        self.sum_p_diff += p_diff as f64;
        let p_diff2 = (p_diff * p_diff) as f64;
        self.sum_p_diff2 += p_diff2;
        self.sum_p_diff4 += p_diff2 * p_diff2;
        self.max_p_diff = self.max_p_diff.max(p_diff.abs());
        self.kld_values.push(sum as f32);
        self.p_diff_values.push(p_diff);
        (sum, p_diff)
    }

    /// The per-chunk line llama-perplexity prints in KL mode (chunk number
    /// first).
    pub fn chunk_line(&self, chunk: usize) -> String {
        let lp = mean_and_uncertainty(self.sum_nll, self.sum_nll2, self.count);
        let ppl = lp.0.exp();
        let lpb = mean_and_uncertainty(self.sum_nll_base, self.sum_nll_base2, self.count);
        let cov = covariance(
            self.sum_nll,
            self.sum_nll_base,
            self.sum_nll_nll_base,
            self.count,
        );
        let ratio = lp.0 - lpb.0;
        let ratio_unc = (lp.1 * lp.1 + lpb.1 * lpb.1 - 2.0 * cov).sqrt();
        let kl = mean_and_uncertainty(self.sum_kld, self.sum_kld2, self.count);
        let mse = mean_and_uncertainty(self.sum_p_diff2, self.sum_p_diff4, self.count);
        let rms = mse.0.sqrt();
        let rms_unc = 0.5 / rms * mse.1;
        let top = self.n_same_top as f64 / self.count as f64;
        let top_unc = (top * (1.0 - top) / (self.count as f64 - 1.0)).sqrt();
        format!(
            "{chunk:4}    {:9.4} ± {:9.4}    {:10.5} ± {:10.5}    {:10.5} ± {:10.5}    {:6.3} ± {:6.3} %    {:6.3} ± {:6.3} %",
            ppl,
            ppl * lp.1,
            ratio,
            ratio_unc,
            kl.0,
            kl.1,
            100.0 * rms,
            100.0 * rms_unc,
            100.0 * top,
            100.0 * top_unc
        )
    }

    /// Every final figure; `None` below 100 scored tokens (llama-perplexity
    /// prints no statistics then).
    pub fn summary(&self) -> Option<KldSummary> {
        if self.count < 100 {
            return None;
        }
        let mut kv = self.kld_values.clone();
        let mut pv = self.p_diff_values.clone();
        kv.sort_by(f32::total_cmp);
        pv.sort_by(f32::total_cmp);
        let lp = mean_and_uncertainty(self.sum_nll, self.sum_nll2, self.count);
        let ppl = lp.0.exp();
        let ppl_unc = ppl * lp.1;
        let lpb = mean_and_uncertainty(self.sum_nll_base, self.sum_nll_base2, self.count);
        let ppl_base = lpb.0.exp();
        let ppl_base_unc = ppl_base * lpb.1;
        let cov = covariance(
            self.sum_nll,
            self.sum_nll_base,
            self.sum_nll_nll_base,
            self.count,
        );
        let cor = cov / (lp.1 * lpb.1);
        let ratio = lp.0 - lpb.0;
        let ratio_unc = (lp.1 * lp.1 + lpb.1 * lpb.1 - 2.0 * cov).sqrt();
        let pr = ratio.exp();
        let ppl_cov = ppl * ppl_base * cov;
        let diff_unc = (ppl_unc * ppl_unc + ppl_base_unc * ppl_base_unc - 2.0 * ppl_cov).sqrt();
        let kl = mean_and_uncertainty(self.sum_kld, self.sum_kld2, self.count);
        let pct = |v: &[f32], fr: &[(&str, f32)]| -> Vec<(String, f32)> {
            fr.iter()
                .map(|&(n, f)| {
                    let x = match n {
                        "Maximum" => v[v.len() - 1],
                        "Minimum" => v[0],
                        "Median" => median(v),
                        _ => percentile(v, f),
                    };
                    (n.to_string(), x)
                })
                .collect()
        };
        let kld_percentiles = pct(
            &kv,
            &[
                ("Maximum", 1.0),
                ("99.9%", 0.999),
                ("99.0%", 0.990),
                ("95.0%", 0.950),
                ("90.0%", 0.900),
                ("Median", 0.5),
                ("10.0%", 0.100),
                (" 5.0%", 0.050),
                (" 1.0%", 0.010),
                (" 0.1%", 0.001),
                ("Minimum", 0.0),
            ],
        );
        let p_diff_percentiles = pct(
            &pv,
            &[
                ("Maximum", 1.0),
                ("99.9%", 0.999),
                ("99.0%", 0.990),
                ("95.0%", 0.950),
                ("90.0%", 0.900),
                ("75.0%", 0.750),
                ("Median", 0.5),
                ("25.0%", 0.250),
                ("10.0%", 0.100),
                (" 5.0%", 0.050),
                (" 1.0%", 0.010),
                (" 0.1%", 0.001),
                ("Minimum", 0.0),
            ],
        );
        let pd = mean_and_uncertainty(self.sum_p_diff, self.sum_p_diff2, self.count);
        let mse = mean_and_uncertainty(self.sum_p_diff2, self.sum_p_diff4, self.count);
        let rms = mse.0.sqrt();
        let top = self.n_same_top as f64 / self.count as f64;
        Some(KldSummary {
            count: self.count,
            ppl: (ppl, ppl_unc),
            ppl_base: (ppl_base, ppl_base_unc),
            ln_ppl_correlation: cor,
            ln_ppl_ratio: (ratio, ratio_unc),
            ppl_ratio: (pr, pr * ratio_unc),
            ppl_diff: (ppl - ppl_base, diff_unc),
            kld_mean: kl,
            kld_percentiles,
            p_diff_mean: pd,
            p_diff_percentiles,
            rms_p_diff: (rms, 0.5 / rms * mse.1),
            same_top: (top, (top * (1.0 - top) / (self.count as f64 - 1.0)).sqrt()),
        })
    }
}

impl KldSummary {
    /// The statistics as llama-perplexity prints them.
    pub fn report(&self) -> String {
        let mut s = String::new();
        s += "====== Perplexity statistics ======\n";
        s += &format!(
            "Mean PPL(Q)                   : {:10.6} ± {:10.6}\n",
            self.ppl.0, self.ppl.1
        );
        s += &format!(
            "Mean PPL(base)                : {:10.6} ± {:10.6}\n",
            self.ppl_base.0, self.ppl_base.1
        );
        s += &format!(
            "Cor(ln(PPL(Q)), ln(PPL(base))): {:6.2}%\n",
            100.0 * self.ln_ppl_correlation
        );
        s += &format!(
            "Mean ln(PPL(Q)/PPL(base))     : {:10.6} ± {:10.6}\n",
            self.ln_ppl_ratio.0, self.ln_ppl_ratio.1
        );
        s += &format!(
            "Mean PPL(Q)/PPL(base)         : {:10.6} ± {:10.6}\n",
            self.ppl_ratio.0, self.ppl_ratio.1
        );
        s += &format!(
            "Mean PPL(Q)-PPL(base)         : {:10.6} ± {:10.6}\n",
            self.ppl_diff.0, self.ppl_diff.1
        );
        s += "\n====== KL divergence statistics ======\n";
        s += &format!(
            "Mean    KLD: {:10.6} ± {:10.6}\n",
            self.kld_mean.0, self.kld_mean.1
        );
        for (n, v) in &self.kld_percentiles {
            let label = if n.ends_with('%') {
                format!("{n:<8}KLD")
            } else {
                format!("{n:<7} KLD")
            };
            s += &format!("{label}: {v:10.6}\n");
        }
        s += "\n====== Token probability statistics ======\n";
        s += &format!(
            "Mean    Δp: {:6.3} ± {:5.3} %\n",
            100.0 * self.p_diff_mean.0,
            100.0 * self.p_diff_mean.1
        );
        for (n, v) in &self.p_diff_percentiles {
            let label = if n.ends_with('%') {
                format!("{n:<8}Δp")
            } else {
                format!("{n:<7} Δp")
            };
            s += &format!("{label}: {:6.3}%\n", 100.0 * *v as f64);
        }
        s += &format!(
            "RMS Δp    : {:6.3} ± {:5.3} %\n",
            100.0 * self.rms_p_diff.0,
            100.0 * self.rms_p_diff.1
        );
        s += &format!(
            "Same top p: {:6.3} ± {:5.3} %\n",
            100.0 * self.same_top.0,
            100.0 * self.same_top.1
        );
        s
    }
}

/// Errors reading or writing a base logits file; each names the file and,
/// for a bad file, the byte offset.
#[derive(Debug, thiserror::Error)]
pub enum BaseError {
    #[error("{}: {err}", path.display())]
    Io { path: PathBuf, err: std::io::Error },
    #[error("{}: {msg}", path.display())]
    Format { path: PathBuf, msg: String },
}

/// Writes a base logits file chunk by chunk.
pub struct BaseWriter {
    out: BufWriter<File>,
    path: PathBuf,
    rec: usize,
}

impl BaseWriter {
    /// Create the file and write its header and the `n_ctx · n_chunk`
    /// tokens evaluated.
    pub fn create(
        path: &Path,
        n_ctx: usize,
        n_vocab: usize,
        n_chunk: usize,
        tokens: &[u32],
    ) -> Result<BaseWriter, BaseError> {
        let io = |err| BaseError::Io {
            path: path.to_path_buf(),
            err,
        };
        let Some(tokens) = tokens.get(..n_ctx * n_chunk) else {
            return Err(BaseError::Format {
                path: path.to_path_buf(),
                msg: format!(
                    "{n_chunk} chunks of {n_ctx} need {} tokens, {} given",
                    n_ctx * n_chunk,
                    tokens.len()
                ),
            });
        };
        let f = File::create(path).map_err(io)?;
        let mut out = BufWriter::with_capacity(1 << 20, f);
        let mut head = Vec::with_capacity(20 + 4 * n_ctx * n_chunk);
        head.extend_from_slice(MAGIC);
        head.extend_from_slice(&(n_ctx as u32).to_le_bytes());
        head.extend_from_slice(&(n_vocab as i32).to_le_bytes());
        head.extend_from_slice(&(n_chunk as i32).to_le_bytes());
        for &t in tokens {
            head.extend_from_slice(&(t as i32).to_le_bytes());
        }
        out.write_all(&head).map_err(io)?;
        Ok(BaseWriter {
            out,
            path: path.to_path_buf(),
            rec: record_len(n_vocab),
        })
    }

    /// Append the records of one chunk (`n_scored · record_len` values).
    pub fn write_chunk(&mut self, records: &[u16]) -> Result<(), BaseError> {
        debug_assert!(records.len().is_multiple_of(self.rec));
        let bytes: Vec<u8> = records.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.out.write_all(&bytes).map_err(|err| BaseError::Io {
            path: self.path.clone(),
            err,
        })
    }

    pub fn finish(mut self) -> Result<(), BaseError> {
        self.out.flush().map_err(|err| BaseError::Io {
            path: self.path,
            err,
        })
    }
}

/// Reads a base logits file: the header at open, then chunk by chunk.
pub struct BaseReader {
    inp: BufReader<File>,
    path: PathBuf,
    pub n_ctx: usize,
    pub n_vocab: usize,
    pub n_chunk: usize,
    /// The `n_ctx · n_chunk` tokens evaluated.
    pub tokens: Vec<u32>,
    offset: u64,
}

impl BaseReader {
    pub fn open(path: &Path) -> Result<BaseReader, BaseError> {
        let io = |err| BaseError::Io {
            path: path.to_path_buf(),
            err,
        };
        let fmt = |msg: String| BaseError::Format {
            path: path.to_path_buf(),
            msg,
        };
        let len = std::fs::metadata(path).map_err(io)?.len();
        let mut inp = BufReader::with_capacity(1 << 20, File::open(path).map_err(io)?);
        let mut head = [0u8; 20];
        if len < 20 {
            return Err(fmt(format!(
                "{len} bytes: too short for a log-probabilities file (20-byte header)"
            )));
        }
        inp.read_exact(&mut head).map_err(io)?;
        if &head[..8] != MAGIC {
            return Err(fmt(
                "does not look like a file containing log-probabilities (no \"_logits_\" at byte 0)"
                    .into(),
            ));
        }
        let n_ctx = u32::from_le_bytes([head[8], head[9], head[10], head[11]]) as usize;
        let n_vocab = i32::from_le_bytes([head[12], head[13], head[14], head[15]]);
        let n_chunk = i32::from_le_bytes([head[16], head[17], head[18], head[19]]);
        if n_ctx < 4 {
            return Err(fmt(format!("n_ctx {n_ctx} at byte 8 is too small")));
        }
        if n_vocab < 1 {
            return Err(fmt(format!("n_vocab {n_vocab} at byte 12 is not positive")));
        }
        if n_chunk < 1 {
            return Err(fmt(format!("n_chunk {n_chunk} at byte 16 is not positive")));
        }
        let (n_vocab, n_chunk) = (n_vocab as usize, n_chunk as usize);
        let n_tok = n_ctx as u64 * n_chunk as u64;
        let per_chunk = Chunk::scored(n_ctx).n_scored as u64 * record_len(n_vocab) as u64 * 2;
        let want = 20 + 4 * n_tok + per_chunk * n_chunk as u64;
        if len < want {
            return Err(fmt(format!(
                "{len} bytes, but n_ctx {n_ctx}, n_vocab {n_vocab} and n_chunk {n_chunk} need {want}"
            )));
        }
        let mut raw = vec![0u8; 4 * n_tok as usize];
        inp.read_exact(&mut raw).map_err(io)?;
        let mut tokens = Vec::with_capacity(n_tok as usize);
        for (i, c) in raw.chunks_exact(4).enumerate() {
            let t = i32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            if t < 0 || t as usize >= n_vocab {
                return Err(fmt(format!(
                    "token {t} at byte {} is outside the vocabulary ({n_vocab})",
                    20 + 4 * i
                )));
            }
            tokens.push(t as u32);
        }
        Ok(BaseReader {
            inp,
            path: path.to_path_buf(),
            n_ctx,
            n_vocab,
            n_chunk,
            tokens,
            offset: 20 + 4 * n_tok,
        })
    }

    /// Read the next chunk's records into `out` (resized).
    pub fn read_chunk(&mut self, out: &mut Vec<u16>) -> Result<(), BaseError> {
        let n = Chunk::scored(self.n_ctx).n_scored * record_len(self.n_vocab);
        let mut raw = vec![0u8; 2 * n];
        self.inp
            .read_exact(&mut raw)
            .map_err(|err| BaseError::Format {
                path: self.path.clone(),
                msg: format!("failed reading log-probs at byte {}: {err}", self.offset),
            })?;
        self.offset += raw.len() as u64;
        out.clear();
        out.extend(
            raw.chunks_exact(2)
                .map(|c| u16::from_le_bytes([c[0], c[1]])),
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(n: usize, vocab: usize, seed: u64) -> Vec<f32> {
        let mut s = seed;
        (0..n * vocab)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 12.0
            })
            .collect()
    }

    /// The record's log-probabilities are the row's log-softmax to within
    /// half a quantization step (independent f64 log-softmax).
    #[test]
    fn compress_matches_log_softmax() {
        let vocab = 37;
        let r = rows(5, vocab, 7);
        let mut rec = vec![0u16; record_len(vocab)];
        assert_eq!(rec.len(), 42);
        for (i, row) in r.chunks(vocab).enumerate() {
            let nll_c = compress(row, i, &mut rec);
            let mx = row.iter().fold(f64::MIN, |a, &b| a.max(b as f64));
            let lse = mx + row.iter().map(|&l| (l as f64 - mx).exp()).sum::<f64>().ln();
            assert!((nll_c - (lse - row[i] as f64)).abs() < 1e-5);
            assert!((nll(row, i) - (lse - row[i] as f64)).abs() < 1e-5);
            let (scale, _) = record_head(&rec);
            for (j, lp) in decompress(&rec, vocab).iter().enumerate() {
                let want = row[j] as f64 - lse;
                if want > -16.0 + (mx - lse) {
                    assert!((*lp as f64 - want).abs() <= scale as f64 * 0.5 + 1e-5);
                }
            }
            assert_eq!(rec[4 + vocab], 0, "padding");
        }
    }

    /// Identical logits give zero KL divergence, 100 % same top token and no
    /// Δp beyond the compression's rounding; another model gives a positive
    /// divergence equal to an independent f64 computation.
    #[test]
    fn kld_of_self_is_zero_and_of_other_matches_f64() {
        let vocab = 50;
        let n = 120;
        let a = rows(n, vocab, 1);
        let b = rows(n, vocab, 2);
        let mut recs = vec![0u16; n * record_len(vocab)];
        for (i, row) in a.chunks(vocab).enumerate() {
            compress(
                row,
                (i * 7) % vocab,
                &mut recs[i * record_len(vocab)..(i + 1) * record_len(vocab)],
            );
        }
        let mut same = Kld::default();
        let mut other = Kld::default();
        let mut want = 0f64;
        for i in 0..n {
            let rec = &recs[i * record_len(vocab)..(i + 1) * record_len(vocab)];
            let tok = (i * 7) % vocab;
            same.add(&a[i * vocab..(i + 1) * vocab], rec, tok);
            let (k, _) = other.add(&b[i * vocab..(i + 1) * vocab], rec, tok);
            let lp = decompress(rec, vocab);
            let q = &b[i * vocab..(i + 1) * vocab];
            let mx = q.iter().fold(f64::MIN, |x, &y| x.max(y as f64));
            let lse = mx + q.iter().map(|&l| (l as f64 - mx).exp()).sum::<f64>().ln();
            let kf: f64 = lp
                .iter()
                .zip(q)
                .filter(|(p, _)| **p > -16.0)
                .map(|(&p, &l)| (p as f64).exp() * (p as f64 - (l as f64 - lse)))
                .sum();
            assert!((k - kf).abs() < 1e-4 * kf.max(1.0), "{k} {kf}");
            want += kf;
        }
        let s = same.summary().unwrap();
        assert!(s.kld_mean.0.abs() < 1e-4, "{}", s.kld_mean.0);
        assert_eq!(s.same_top.0, 1.0);
        assert!(s.rms_p_diff.0 < 1e-3);
        let o = other.summary().unwrap();
        assert!((o.kld_mean.0 - want / n as f64).abs() < 1e-4);
        assert!(o.kld_mean.0 > 0.1);
        let text = o.report();
        assert!(text.contains("Mean    KLD:"));
        assert!(text.contains("99.9%   KLD:"));
        assert!(text.contains(" 0.1%   Δp:"));
        assert!(text.contains("Same top p:"));
        assert!(text.contains("Minimum KLD:"));
    }

    /// The file layout byte by byte, as perplexity.cpp writes it: magic,
    /// u32 n_ctx, i32 n_vocab, i32 n_chunk, i32 tokens, then per chunk
    /// (n_ctx - 1 - n_ctx/2) records of 2·⌈n_vocab/2⌉ + 4 u16.
    #[test]
    fn base_file_layout_and_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("base.kld");
        let (n_ctx, vocab, n_chunk) = (8usize, 5usize, 2usize);
        let tokens: Vec<u32> = (0..n_ctx * n_chunk).map(|i| (i % vocab) as u32).collect();
        let c = Chunk::scored(n_ctx);
        assert_eq!((c.first, c.n_scored), (4, 3));
        let rec = record_len(vocab);
        assert_eq!(rec, 10);
        let mut w = BaseWriter::create(&p, n_ctx, vocab, n_chunk, &tokens).unwrap();
        let logits = rows(n_chunk * c.n_scored, vocab, 3);
        let mut all = vec![0u16; n_chunk * c.n_scored * rec];
        for k in 0..n_chunk {
            let part = &mut all[k * c.n_scored * rec..(k + 1) * c.n_scored * rec];
            for i in 0..c.n_scored {
                let row = &logits[(k * c.n_scored + i) * vocab..][..vocab];
                compress(row, 1, &mut part[i * rec..(i + 1) * rec]);
            }
            w.write_chunk(part).unwrap();
        }
        w.finish().unwrap();
        let bytes = std::fs::read(&p).unwrap();
        assert_eq!(bytes.len(), 20 + 4 * 16 + 2 * 2 * 3 * 10);
        assert_eq!(&bytes[..8], b"_logits_");
        assert_eq!(&bytes[8..12], &8u32.to_le_bytes());
        assert_eq!(&bytes[12..16], &5i32.to_le_bytes());
        assert_eq!(&bytes[16..20], &2i32.to_le_bytes());
        assert_eq!(&bytes[20 + 4 * 3..20 + 4 * 4], &3i32.to_le_bytes());
        let first = 20 + 64;
        let (scale, _) = record_head(&all[..rec]);
        assert_eq!(&bytes[first..first + 4], &scale.to_le_bytes());
        let mut r = BaseReader::open(&p).unwrap();
        assert_eq!((r.n_ctx, r.n_vocab, r.n_chunk), (8, 5, 2));
        assert_eq!(r.tokens, tokens);
        let mut back = Vec::new();
        for k in 0..n_chunk {
            r.read_chunk(&mut back).unwrap();
            assert_eq!(back, all[k * c.n_scored * rec..(k + 1) * c.n_scored * rec]);
        }
        assert!(r.read_chunk(&mut back).is_err());
        // A truncated or foreign file is refused with its reason.
        std::fs::write(&p, &bytes[..bytes.len() - 1]).unwrap();
        let e = BaseReader::open(&p).err().unwrap().to_string();
        assert!(e.contains("need"), "{e}");
        std::fs::write(&p, b"GGUF and more bytes than twenty").unwrap();
        let e = BaseReader::open(&p).err().unwrap().to_string();
        assert!(e.contains("_logits_"), "{e}");
    }

    #[test]
    fn ppl_estimate() {
        let mut p = Ppl::default();
        for v in [1.0, 2.0, 3.0, 4.0] {
            p.add(v);
        }
        let (ppl, unc) = p.estimate().unwrap();
        assert!((ppl - 2.5f64.exp()).abs() < 1e-12);
        // var = 7.5 - 6.25 = 1.25; sqrt(1.25/3)·ppl
        assert!((unc - (1.25f64 / 3.0).sqrt() * ppl).abs() < 1e-9);
        assert_eq!(nearest_int(2.5), 2);
        assert_eq!(nearest_int(3.5), 4);
        assert_eq!(nearest_int(65534.6), 65535);
    }
}
