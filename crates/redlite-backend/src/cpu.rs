//! The multi-threaded CPU backend (rayon).
//!
//! Matrix products read the quantized rows directly: one token uses the
//! type's fused dot kernel per row; a batch dequantizes a tile of rows into a
//! small f32 scratch buffer and multiplies it with every token of the batch,
//! so each weight byte is read once per batch.

use rayon::prelude::*;
use rayon::ThreadPool;

use crate::simd::{axpy, dot};
use crate::{AttnShape, Backend, DeltaInputs, QMat};

/// Rows of a weight tile dequantized at once in the batched product.
const ROW_TILE: usize = 16;
/// Tokens per block in the batched product (keeps the activations hot).
const TOK_TILE: usize = 64;
/// Below this many tokens the batched product uses the fused dot kernels.
const SMALL_BATCH: usize = 4;
/// Chunk length of the chunked delta rule.
pub const DELTA_CHUNK: usize = 64;
/// Query and key block sizes of the attention kernel.
const ATT_QB: usize = 32;
const ATT_KB: usize = 256;

/// CPU backend on its own rayon pool.
pub struct CpuBackend {
    pool: ThreadPool,
    threads: usize,
}

impl CpuBackend {
    /// A backend with `threads` worker threads (`None`: one per core).
    pub fn new(threads: Option<usize>) -> Result<CpuBackend, rayon::ThreadPoolBuildError> {
        let mut b = rayon::ThreadPoolBuilder::new();
        if let Some(n) = threads {
            b = b.num_threads(n.max(1));
        }
        let pool = b.build()?;
        let threads = pool.current_num_threads();
        Ok(CpuBackend { pool, threads })
    }

    pub fn threads(&self) -> usize {
        self.threads
    }
}

#[inline]
fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

/// Scatter `[n_out][n_tok]` into `[n_tok][n_out]`.
fn transpose_into(yt: &[f32], n_out: usize, n_tok: usize, y: &mut [f32]) {
    for o in 0..n_out {
        let row = &yt[o * n_tok..(o + 1) * n_tok];
        for (t, v) in row.iter().enumerate() {
            y[t * n_out + o] = *v;
        }
    }
}

fn matmul_impl(w: &QMat<'_>, x: &[f32], n_tok: usize, y: &mut [f32]) {
    let (n_in, n_out) = (w.n_in, w.n_out);
    assert_eq!(x.len(), n_tok * n_in, "matmul: activation size");
    assert_eq!(y.len(), n_tok * n_out, "matmul: output size");
    if n_tok == 0 || n_out == 0 {
        return;
    }
    if n_tok == 1 {
        y.par_chunks_mut(ROW_TILE)
            .enumerate()
            .for_each(|(ci, ys)| {
                for (r, yo) in ys.iter_mut().enumerate() {
                    *yo = w.dot_row(ci * ROW_TILE + r, x);
                }
            });
        return;
    }
    let mut yt = vec![0f32; n_out * n_tok];
    if n_tok < SMALL_BATCH {
        yt.par_chunks_mut(ROW_TILE * n_tok)
            .enumerate()
            .for_each(|(ci, ys)| {
                for (r, yr) in ys.chunks_mut(n_tok).enumerate() {
                    let o = ci * ROW_TILE + r;
                    for (t, yo) in yr.iter_mut().enumerate() {
                        *yo = w.dot_row(o, &x[t * n_in..(t + 1) * n_in]);
                    }
                }
            });
    } else {
        yt.par_chunks_mut(ROW_TILE * n_tok)
            .enumerate()
            .for_each(|(ci, ys)| {
                let rows = ys.len() / n_tok;
                let mut wf = vec![0f32; rows * n_in];
                for r in 0..rows {
                    w.dequant_row(ci * ROW_TILE + r, &mut wf[r * n_in..(r + 1) * n_in]);
                }
                let mut t0 = 0;
                while t0 < n_tok {
                    let t1 = (t0 + TOK_TILE).min(n_tok);
                    for r in 0..rows {
                        let wr = &wf[r * n_in..(r + 1) * n_in];
                        let yr = &mut ys[r * n_tok..(r + 1) * n_tok];
                        for t in t0..t1 {
                            yr[t] = dot(wr, &x[t * n_in..(t + 1) * n_in]);
                        }
                    }
                    t0 = t1;
                }
            });
    }
    transpose_into(&yt, n_out, n_tok, y);
}

/// RMSNorm of one row (sum of squares in f64).
pub fn rms_norm_row(x: &mut [f32], w: Option<&[f32]>, eps: f32) {
    let ss: f64 = x.iter().map(|&v| v as f64 * v as f64).sum();
    let scale = (1.0 / (ss / x.len() as f64 + eps as f64).sqrt()) as f32;
    match w {
        Some(w) => x.iter_mut().zip(w).for_each(|(v, w)| *v = *v * scale * w),
        None => x.iter_mut().for_each(|v| *v *= scale),
    }
}

/// One head of the chunked gated delta rule. `m` is the head's state
/// `[d_v, d_k]`, `o` its output `[T, d_v]`.
pub fn delta_head_chunked(inp: &DeltaInputs<'_>, h: usize, m: &mut [f32], o: &mut [f32]) {
    let DeltaInputs {
        n_tok,
        h_k,
        h_v,
        d_k,
        d_v,
        ..
    } = *inp;
    let kh = h / (h_v / h_k);
    let qrow = |t: usize| &inp.q[(t * h_k + kh) * d_k..(t * h_k + kh + 1) * d_k];
    let krow = |t: usize| &inp.k[(t * h_k + kh) * d_k..(t * h_k + kh + 1) * d_k];
    let vrow = |t: usize| &inp.v[(t * h_v + h) * d_v..(t * h_v + h + 1) * d_v];
    let c = DELTA_CHUNK;
    let mut gc = vec![0f64; c];
    let mut a = vec![0f32; c * c];
    let mut tm = vec![0f32; c * c];
    let mut p = vec![0f32; c * c];
    let mut u = vec![0f32; c * d_v];
    let mut wk = vec![0f32; c * d_k];
    let mut kd = vec![0f32; c * d_k];
    let mut vnew = vec![0f32; c * d_v];
    let mut c0 = 0;
    while c0 < n_tok {
        let l = c.min(n_tok - c0);
        let beta = |t: usize| inp.beta[(c0 + t) * h_v + h];
        // Cumulative log-decay inside the chunk.
        let mut acc = 0f64;
        for t in 0..l {
            acc += inp.g[(c0 + t) * h_v + h] as f64;
            gc[t] = acc;
        }
        let g_last = gc[l - 1];
        // A (strictly lower) and P (lower incl. diagonal).
        for i in 0..l {
            let ki = krow(c0 + i);
            let qi = qrow(c0 + i);
            for j in 0..l {
                if j <= i {
                    let d = (gc[i] - gc[j]).exp() as f32;
                    let kj = krow(c0 + j);
                    a[i * c + j] = if j < i { beta(i) * dot(ki, kj) * d } else { 0.0 };
                    p[i * c + j] = dot(qi, kj) * d;
                } else {
                    a[i * c + j] = 0.0;
                    p[i * c + j] = 0.0;
                }
            }
        }
        // Tm = (I + A)^-1 by forward substitution.
        for i in 0..l {
            let (done, rest) = tm.split_at_mut(i * c);
            let row = &mut rest[..c];
            row.iter_mut().for_each(|v| *v = 0.0);
            row[i] = 1.0;
            for j in 0..i {
                let aij = a[i * c + j];
                if aij != 0.0 {
                    axpy(&mut row[..=j], -aij, &done[j * c..j * c + j + 1]);
                }
            }
        }
        // U = Tm·(β v), W = Tm·(β e^G k).
        for i in 0..l {
            let ui = &mut u[i * d_v..(i + 1) * d_v];
            ui.iter_mut().for_each(|v| *v = 0.0);
            let wi = &mut wk[i * d_k..(i + 1) * d_k];
            wi.iter_mut().for_each(|v| *v = 0.0);
            for j in 0..=i {
                let tij = tm[i * c + j];
                if tij != 0.0 {
                    axpy(ui, tij * beta(j), vrow(c0 + j));
                    axpy(wi, tij * beta(j) * (gc[j].exp() as f32), krow(c0 + j));
                }
            }
        }
        for t in 0..l {
            let e = (g_last - gc[t]).exp() as f32;
            let kt = krow(c0 + t);
            kd[t * d_k..(t + 1) * d_k]
                .iter_mut()
                .zip(kt)
                .for_each(|(d, k)| *d = k * e);
        }
        // Sequential part: Vnew = U − W·S, O = Qd·S + P·Vnew, S update.
        for t in 0..l {
            let wt = &wk[t * d_k..(t + 1) * d_k];
            let qt = qrow(c0 + t);
            let eq = gc[t].exp() as f32;
            let ot = &mut o[(c0 + t) * d_v..(c0 + t + 1) * d_v];
            for j in 0..d_v {
                let mj = &m[j * d_k..(j + 1) * d_k];
                vnew[t * d_v + j] = u[t * d_v + j] - dot(wt, mj);
                ot[j] = eq * dot(qt, mj);
            }
        }
        for t in 0..l {
            let ot = &mut o[(c0 + t) * d_v..(c0 + t + 1) * d_v];
            for s in 0..=t {
                axpy(ot, p[t * c + s], &vnew[s * d_v..(s + 1) * d_v]);
            }
        }
        let el = g_last.exp() as f32;
        for j in 0..d_v {
            let mj = &mut m[j * d_k..(j + 1) * d_k];
            mj.iter_mut().for_each(|v| *v *= el);
            for t in 0..l {
                axpy(mj, vnew[t * d_v + j], &kd[t * d_k..(t + 1) * d_k]);
            }
        }
        c0 += l;
    }
}

/// One head of the recurrent gated delta rule (token by token).
pub fn delta_head_recurrent(inp: &DeltaInputs<'_>, h: usize, m: &mut [f32], o: &mut [f32]) {
    let DeltaInputs {
        n_tok,
        h_k,
        h_v,
        d_k,
        d_v,
        ..
    } = *inp;
    let kh = h / (h_v / h_k);
    for t in 0..n_tok {
        let q = &inp.q[(t * h_k + kh) * d_k..(t * h_k + kh + 1) * d_k];
        let k = &inp.k[(t * h_k + kh) * d_k..(t * h_k + kh + 1) * d_k];
        let v = &inp.v[(t * h_v + h) * d_v..(t * h_v + h + 1) * d_v];
        let beta = inp.beta[t * h_v + h];
        let decay = inp.g[t * h_v + h].exp();
        let ot = &mut o[t * d_v..(t + 1) * d_v];
        for j in 0..d_v {
            let mj = &mut m[j * d_k..(j + 1) * d_k];
            mj.iter_mut().for_each(|x| *x *= decay);
            let d = beta * (v[j] - dot(mj, k));
            axpy(mj, d, k);
            ot[j] = dot(mj, q);
        }
    }
}

type HeadFn = fn(&DeltaInputs<'_>, usize, &mut [f32], &mut [f32]);

fn delta_all_heads(inp: &DeltaInputs<'_>, state: &mut [f32], out: &mut [f32], f: HeadFn) {
    let (t, h_v, d_v, d_k) = (inp.n_tok, inp.h_v, inp.d_v, inp.d_k);
    assert_eq!(state.len(), h_v * d_v * d_k, "delta rule: state size");
    assert_eq!(out.len(), t * h_v * d_v, "delta rule: output size");
    let per_head: Vec<Vec<f32>> = state
        .par_chunks_mut(d_v * d_k)
        .enumerate()
        .map(|(h, m)| {
            let mut o = vec![0f32; t * d_v];
            f(inp, h, m, &mut o);
            o
        })
        .collect();
    for (h, o) in per_head.iter().enumerate() {
        for tt in 0..t {
            out[(tt * h_v + h) * d_v..(tt * h_v + h + 1) * d_v]
                .copy_from_slice(&o[tt * d_v..(tt + 1) * d_v]);
        }
    }
}

/// Causal attention of one query head over query tokens `t0..t1`; returns
/// `[(t1 - t0), head_dim]`.
fn attn_block(s: &AttnShape, q: &[f32], k: &[f32], v: &[f32], h: usize, t0: usize, t1: usize) -> Vec<f32> {
    let hd = s.head_dim;
    let kvh = h / (s.n_head / s.n_head_kv);
    let nq = t1 - t0;
    let mut out = vec![0f32; nq * hd];
    let mut mx = vec![f32::NEG_INFINITY; nq];
    let mut sum = vec![0f64; nq];
    let mut scores = vec![0f32; ATT_KB];
    let n_keys = s.pos0 + t1; // keys visible to the last query
    let mut k0 = 0;
    while k0 < n_keys {
        let k1 = (k0 + ATT_KB).min(n_keys);
        for qi in 0..nq {
            let t = t0 + qi;
            let last = (s.pos0 + t + 1).min(k1); // exclusive
            if last <= k0 {
                continue;
            }
            let qv = &q[(t * s.n_head + h) * hd..(t * s.n_head + h + 1) * hd];
            let sc = &mut scores[..last - k0];
            let mut bmax = f32::NEG_INFINITY;
            for (j, sj) in sc.iter_mut().enumerate() {
                let kr = &k[((k0 + j) * s.n_head_kv + kvh) * hd..((k0 + j) * s.n_head_kv + kvh + 1) * hd];
                *sj = dot(qv, kr) * s.scale;
                bmax = bmax.max(*sj);
            }
            let o = &mut out[qi * hd..(qi + 1) * hd];
            let m_new = mx[qi].max(bmax);
            if m_new > mx[qi] && mx[qi] != f32::NEG_INFINITY {
                let corr = (mx[qi] - m_new).exp();
                o.iter_mut().for_each(|x| *x *= corr);
                sum[qi] *= corr as f64;
            }
            mx[qi] = m_new;
            let mut bs = 0f64;
            for (j, sj) in sc.iter().enumerate() {
                let pj = (sj - m_new).exp();
                bs += pj as f64;
                let vr = &v[((k0 + j) * s.n_head_kv + kvh) * hd..((k0 + j) * s.n_head_kv + kvh + 1) * hd];
                axpy(o, pj, vr);
            }
            sum[qi] += bs;
        }
        k0 = k1;
    }
    for qi in 0..nq {
        let inv = (1.0 / sum[qi]) as f32;
        out[qi * hd..(qi + 1) * hd].iter_mut().for_each(|x| *x *= inv);
    }
    out
}

impl Backend for CpuBackend {
    fn name(&self) -> String {
        format!("cpu ({} threads)", self.threads)
    }

    fn matmul(&self, w: &QMat<'_>, x: &[f32], n_tok: usize, y: &mut [f32]) {
        self.pool.install(|| matmul_impl(w, x, n_tok, y))
    }

    fn rms_norm(&self, x: &mut [f32], dim: usize, w: Option<&[f32]>, eps: f32) {
        if x.len() >= 1 << 16 {
            self.pool.install(|| {
                x.par_chunks_mut(dim).for_each(|r| rms_norm_row(r, w, eps))
            })
        } else {
            x.chunks_mut(dim).for_each(|r| rms_norm_row(r, w, eps))
        }
    }

    fn ssm_conv_silu(
        &self,
        x: &[f32],
        n_tok: usize,
        channels: usize,
        kernel: usize,
        w: &[f32],
        state: &mut [f32],
        out: &mut [f32],
    ) {
        let ks = kernel - 1;
        assert_eq!(state.len(), channels * ks, "conv: state size");
        assert_eq!(w.len(), channels * kernel, "conv: weight size");
        // X(j, c) for j in 0..n_tok+ks: the old state, then the new inputs.
        let xv = |j: usize, c: usize| {
            if j < ks {
                state[c * ks + j]
            } else {
                x[(j - ks) * channels + c]
            }
        };
        for t in 0..n_tok {
            for c in 0..channels {
                let wc = &w[c * kernel..(c + 1) * kernel];
                let mut s = 0f32;
                for (i, wi) in wc.iter().enumerate() {
                    s += wi * xv(t + i, c);
                }
                out[t * channels + c] = silu(s);
            }
        }
        let mut ns = vec![0f32; channels * ks];
        for c in 0..channels {
            for j in 0..ks {
                ns[c * ks + j] = xv(n_tok + j, c);
            }
        }
        state.copy_from_slice(&ns);
    }

    fn delta_rule_chunked(&self, inp: &DeltaInputs<'_>, state: &mut [f32], out: &mut [f32]) {
        self.pool
            .install(|| delta_all_heads(inp, state, out, delta_head_chunked))
    }

    fn delta_rule_recurrent(&self, inp: &DeltaInputs<'_>, state: &mut [f32], out: &mut [f32]) {
        self.pool
            .install(|| delta_all_heads(inp, state, out, delta_head_recurrent))
    }

    fn attention(&self, s: &AttnShape, q: &[f32], k: &[f32], v: &[f32], out: &mut [f32]) {
        let (t, hd, nh) = (s.n_tok, s.head_dim, s.n_head);
        assert_eq!(q.len(), t * nh * hd, "attention: query size");
        assert_eq!(out.len(), t * nh * hd, "attention: output size");
        assert!(k.len() >= (s.pos0 + t) * s.n_head_kv * hd, "attention: key cache size");
        assert!(v.len() >= (s.pos0 + t) * s.n_head_kv * hd, "attention: value cache size");
        let n_qb = t.div_ceil(ATT_QB);
        let jobs: Vec<(usize, usize)> = (0..nh).flat_map(|h| (0..n_qb).map(move |b| (h, b))).collect();
        let blocks: Vec<Vec<f32>> = self.pool.install(|| {
            jobs.par_iter()
                .map(|&(h, b)| {
                    let t0 = b * ATT_QB;
                    attn_block(s, q, k, v, h, t0, (t0 + ATT_QB).min(t))
                })
                .collect()
        });
        for (&(h, b), blk) in jobs.iter().zip(&blocks) {
            let t0 = b * ATT_QB;
            for (qi, row) in blk.chunks(hd).enumerate() {
                let tt = t0 + qi;
                out[(tt * nh + h) * hd..(tt * nh + h + 1) * hd].copy_from_slice(row);
            }
        }
    }
}
