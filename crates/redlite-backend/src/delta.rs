//! The chunked gated delta rule as blocked matrix products.
//!
//! [`crate::cpu::delta_head_chunked`] is the reference: it writes the chunk
//! algebra as one dot product or axpy per row (clear, but every 128-value
//! row is a call of its own and the state is reloaded for every token).
//! Here the same algebra runs as a handful of products `C = A·B` whose rows
//! stay in registers across the inner dimension ([`mm`]); the results differ
//! from the reference only in the order of f32 additions (tested).
//!
//! Per chunk of `l ≤ 64` tokens of one head (`K`, `Q` `[l, d_k]`, `V`
//! `[l, d_v]`, state `S` kept transposed as `M = Sᵀ` `[d_v, d_k]`,
//! cumulative log-decay `G`):
//! `A = β ⊙ (K Kᵀ) ⊙ e^{G_i−G_j}` (strictly lower), `P = (Q Kᵀ) ⊙ e^{G_i−G_j}`
//! (lower), `T = (I + A)⁻¹`, `U = T (β V)`, `W = T (β e^G K)`,
//! `V' = U − W S`, `O = e^G ⊙ (Q S) + P V'`, `M ← e^{G_l} M + V'ᵀ (e^{G_l − G} K)`.

use crate::DeltaInputs;

/// Tokens per chunk (as the reference).
const C: usize = crate::DELTA_CHUNK;

/// `out[r, ..n] (+)= Σ_k a[r, k] · b[k, ..n]` for `r < rows`, `k < kdim`:
/// `a` and `out` row-major with strides `lda` and `ldo`, `b` with stride
/// `ldb`. Each output row block of `NB` columns (`RB` rows at a time) is
/// held in registers over the whole inner dimension; every product is one
/// fused multiply-add in `k` order, so the result does not depend on the
/// instruction set.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn mm<const RB: usize, const NB: usize>(
    rows: usize,
    n: usize,
    kdim: usize,
    a: &[f32],
    lda: usize,
    b: &[f32],
    ldb: usize,
    out: &mut [f32],
    ldo: usize,
    add: bool,
) {
    let nfull = n / NB * NB;
    let mut r = 0;
    while r < rows {
        let rb = RB.min(rows - r);
        let mut c0 = 0;
        while c0 < nfull {
            let mut acc = [[0f32; NB]; RB];
            for (i, row) in acc.iter_mut().enumerate().take(rb) {
                if add {
                    row.copy_from_slice(&out[(r + i) * ldo + c0..(r + i) * ldo + c0 + NB]);
                }
            }
            for kk in 0..kdim {
                let Some(br) = b[kk * ldb + c0..].first_chunk::<NB>() else {
                    break;
                };
                for (i, row) in acc.iter_mut().enumerate() {
                    // Rows past `rb` multiply zeros and are not stored.
                    let s = if i < rb { a[(r + i) * lda + kk] } else { 0.0 };
                    for (y, &x) in row.iter_mut().zip(br.iter()) {
                        *y = s.mul_add(x, *y);
                    }
                }
            }
            for (i, row) in acc.iter().enumerate().take(rb) {
                out[(r + i) * ldo + c0..(r + i) * ldo + c0 + NB].copy_from_slice(row);
            }
            c0 += NB;
        }
        // Columns past the last whole block, one at a time.
        for i in 0..rb {
            for c in nfull..n {
                let mut y = if add { out[(r + i) * ldo + c] } else { 0.0 };
                for kk in 0..kdim {
                    y = a[(r + i) * lda + kk].mul_add(b[kk * ldb + c], y);
                }
                out[(r + i) * ldo + c] = y;
            }
        }
        r += rb;
    }
}

/// Work buffers of one head, sized once per call.
struct Bufs {
    kt: Vec<f32>,
    gkk: Vec<f32>,
    gqk: Vec<f32>,
    a: Vec<f32>,
    p: Vec<f32>,
    tm: Vec<f32>,
    bv: Vec<f32>,
    bk: Vec<f32>,
    u: Vec<f32>,
    w: Vec<f32>,
    st: Vec<f32>,
    x: Vec<f32>,
    y: Vec<f32>,
    z: Vec<f32>,
    vnew: Vec<f32>,
    vnt: Vec<f32>,
    kd: Vec<f32>,
}

impl Bufs {
    fn new(d_k: usize, d_v: usize) -> Bufs {
        let z = |n: usize| vec![0f32; n];
        Bufs {
            kt: z(d_k * C),
            gkk: z(C * C),
            gqk: z(C * C),
            a: z(C * C),
            p: z(C * C),
            tm: z(C * C),
            bv: z(C * d_v),
            bk: z(C * d_k),
            u: z(C * d_v),
            w: z(C * d_k),
            st: z(d_k * d_v),
            x: z(C * d_v),
            y: z(C * d_v),
            z: z(C * d_v),
            vnew: z(C * d_v),
            vnt: z(d_v * C),
            kd: z(C * d_k),
        }
    }
}

/// The body, inlined into one wrapper per instruction set.
#[inline(always)]
fn body<const RB: usize, const NB: usize>(
    inp: &DeltaInputs<'_>,
    h: usize,
    m: &mut [f32],
    o: &mut [f32],
) {
    let DeltaInputs {
        n_tok,
        h_k,
        h_v,
        d_k,
        d_v,
        ..
    } = *inp;
    let kh = h / (h_v / h_k);
    let (ldk, ldv) = (h_k * d_k, h_v * d_v);
    let mut bf = Bufs::new(d_k, d_v);
    let mut gc = [0f64; C];
    let mut c0 = 0;
    while c0 < n_tok {
        let l = C.min(n_tok - c0);
        // This chunk's rows of K, Q (stride ldk) and V (stride ldv).
        let kq0 = c0 * ldk + kh * d_k;
        let k = &inp.k[kq0..];
        let q = &inp.q[kq0..];
        let v = &inp.v[c0 * ldv + h * d_v..];
        let beta = |t: usize| inp.beta[(c0 + t) * h_v + h];
        let mut acc = 0f64;
        for (t, g) in gc.iter_mut().enumerate().take(l) {
            acc += inp.g[(c0 + t) * h_v + h] as f64;
            *g = acc;
        }
        let g_last = gc[l - 1];

        // Kᵀ, zero past l, then K Kᵀ and Q Kᵀ.
        bf.kt.iter_mut().for_each(|x| *x = 0.0);
        for t in 0..l {
            for i in 0..d_k {
                bf.kt[i * C + t] = k[t * ldk + i];
            }
        }
        mm::<RB, NB>(l, C, d_k, k, ldk, &bf.kt, C, &mut bf.gkk, C, false);
        mm::<RB, NB>(l, C, d_k, q, ldk, &bf.kt, C, &mut bf.gqk, C, false);
        for i in 0..l {
            for j in 0..C {
                let (av, pv) = if j <= i && j < l {
                    let d = (gc[i] - gc[j]).exp() as f32;
                    let av = if j < i {
                        beta(i) * bf.gkk[i * C + j] * d
                    } else {
                        0.0
                    };
                    (av, bf.gqk[i * C + j] * d)
                } else {
                    (0.0, 0.0)
                };
                bf.a[i * C + j] = av;
                bf.p[i * C + j] = pv;
            }
        }
        // T = (I + A)⁻¹ by forward substitution (lower triangular).
        for i in 0..l {
            let (done, rest) = bf.tm.split_at_mut(i * C);
            let row = &mut rest[..C];
            row.iter_mut().for_each(|x| *x = 0.0);
            row[i] = 1.0;
            for j in 0..i {
                let aij = bf.a[i * C + j];
                if aij != 0.0 {
                    let dj = &done[j * C..j * C + j + 1];
                    for (y, &x) in row[..=j].iter_mut().zip(dj) {
                        *y = (-aij).mul_add(x, *y);
                    }
                }
            }
        }
        // U = T (β V), W = T (β e^G K).
        for t in 0..l {
            let bt = beta(t);
            let be = bt * (gc[t].exp() as f32);
            for i in 0..d_v {
                bf.bv[t * d_v + i] = bt * v[t * ldv + i];
            }
            for i in 0..d_k {
                bf.bk[t * d_k + i] = be * k[t * ldk + i];
            }
        }
        mm::<RB, NB>(l, d_v, l, &bf.tm, C, &bf.bv, d_v, &mut bf.u, d_v, false);
        mm::<RB, NB>(l, d_k, l, &bf.tm, C, &bf.bk, d_k, &mut bf.w, d_k, false);
        // S = Mᵀ.
        for j in 0..d_v {
            for i in 0..d_k {
                bf.st[i * d_v + j] = m[j * d_k + i];
            }
        }
        // V' = U − W S; O = e^G ⊙ (Q S) + P V'.
        mm::<RB, NB>(l, d_v, d_k, &bf.w, d_k, &bf.st, d_v, &mut bf.x, d_v, false);
        for i in 0..l * d_v {
            bf.vnew[i] = bf.u[i] - bf.x[i];
        }
        mm::<RB, NB>(l, d_v, d_k, q, ldk, &bf.st, d_v, &mut bf.y, d_v, false);
        mm::<RB, NB>(l, d_v, l, &bf.p, C, &bf.vnew, d_v, &mut bf.z, d_v, false);
        for t in 0..l {
            let eq = gc[t].exp() as f32;
            let ot = &mut o[(c0 + t) * d_v..(c0 + t + 1) * d_v];
            for (i, oi) in ot.iter_mut().enumerate() {
                *oi = eq.mul_add(bf.y[t * d_v + i], bf.z[t * d_v + i]);
            }
        }
        // M ← e^{G_l} M + V'ᵀ (e^{G_l − G} K).
        for t in 0..l {
            let e = (g_last - gc[t]).exp() as f32;
            for i in 0..d_k {
                bf.kd[t * d_k + i] = k[t * ldk + i] * e;
            }
        }
        for j in 0..d_v {
            for t in 0..l {
                bf.vnt[j * C + t] = bf.vnew[t * d_v + j];
            }
        }
        let el = g_last.exp() as f32;
        m.iter_mut().for_each(|x| *x *= el);
        mm::<RB, NB>(d_v, d_k, l, &bf.vnt, C, &bf.kd, d_k, m, d_k, true);
        c0 += l;
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
#[inline(never)]
unsafe fn head_avx512(inp: &DeltaInputs<'_>, h: usize, m: &mut [f32], o: &mut [f32]) {
    body::<2, 64>(inp, h, m, o)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline(never)]
unsafe fn head_avx2(inp: &DeltaInputs<'_>, h: usize, m: &mut [f32], o: &mut [f32]) {
    // Two rows of 32 columns (eight accumulators, each loaded column block
    // used twice): 7 % faster than one row of 64 on Zen 3 (`delta_bench`:
    // 3.12–3.16 → 2.91 ms a head of 512 tokens); four rows of 16, 3.4 ms.
    body::<2, 32>(inp, h, m, o)
}

#[inline(never)]
fn head_generic(inp: &DeltaInputs<'_>, h: usize, m: &mut [f32], o: &mut [f32]) {
    body::<1, 8>(inp, h, m, o)
}

/// Runs `f` with subnormal f32 results flushed to zero and subnormal inputs
/// read as zero (x86 MXCSR FTZ and DAZ), restoring the previous mode after.
///
/// Strong decays make `e^G` and the products built on it fall below
/// `1.2e-38`; arithmetic on such values takes a slow microcode path (a
/// chunk measured eight times slower). Values that small are far below the
/// f32 resolution of every sum they enter, so flushing them changes nothing
/// that the tests can see.
fn flush_subnormals<R>(f: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::asm;
        const FTZ_DAZ: u32 = (1 << 15) | (1 << 6);
        let mut old = 0u32;
        // SAFETY: `stmxcsr` / `ldmxcsr` (SSE, part of x86-64) store and load
        // the 32-bit control word through valid pointers. The mode changes
        // only for the duration of `f` (our own arithmetic, in a function
        // that is not inlined here) and is restored before returning.
        unsafe {
            asm!("stmxcsr [{}]", in(reg) &mut old, options(nostack, preserves_flags));
            let ftz = old | FTZ_DAZ;
            asm!("ldmxcsr [{}]", in(reg) &ftz, options(nostack, preserves_flags, readonly));
        }
        let r = f();
        // SAFETY: as above; `old` is the mode read before.
        unsafe {
            asm!("ldmxcsr [{}]", in(reg) &old, options(nostack, preserves_flags, readonly));
        }
        r
    }
    #[cfg(not(target_arch = "x86_64"))]
    f()
}

/// Without SIMD (`mul_add` is then a library call: slow, the same values).
pub fn delta_head_blocked_generic(inp: &DeltaInputs<'_>, h: usize, m: &mut [f32], o: &mut [f32]) {
    flush_subnormals(|| head_generic(inp, h, m, o))
}

/// One head of the chunked gated delta rule as blocked products, with the
/// widest instruction set this CPU has (the same results on every one).
/// `m` is the head's state `[d_v, d_k]`, `o` its output `[T, d_v]`.
pub fn delta_head_blocked(inp: &DeltaInputs<'_>, h: usize, m: &mut [f32], o: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    match redlite_quant::isa() {
        // SAFETY: isa() reports Avx512 only where AVX-512 F/BW/VL, AVX2
        // and FMA were detected, Avx2 only where AVX2 and FMA were.
        redlite_quant::Isa::Avx512 => {
            return flush_subnormals(|| unsafe { head_avx512(inp, h, m, o) })
        }
        redlite_quant::Isa::Avx2 => return flush_subnormals(|| unsafe { head_avx2(inp, h, m, o) }),
        redlite_quant::Isa::Scalar => {}
    }
    delta_head_blocked_generic(inp, h, m, o)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::{delta_all_heads, HeadFn};
    use crate::test_util::DeltaCase;

    /// Every head through `f`; returns (state, output).
    fn run(inp: &DeltaInputs<'_>, s0: &[f32], f: HeadFn) -> (Vec<f32>, Vec<f32>) {
        let mut s = s0.to_vec();
        let mut out = vec![0f32; inp.n_tok * inp.h_v * inp.d_v];
        delta_all_heads(inp, &mut s, &mut out, f);
        (s, out)
    }

    fn max_rel(a: &[f32], b: &[f32]) -> f32 {
        let scale = a.iter().fold(0f32, |m, x| m.max(x.abs())).max(1e-6);
        a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs())) / scale
    }

    /// The blocked form against the per-row reference on random inputs
    /// (the real head size, and small odd sizes that leave partial column
    /// blocks), and bit for bit across instruction sets.
    #[test]
    fn blocked_matches_the_reference_and_every_isa() {
        for dims in [[2, 4, 128, 128], [2, 4, 16, 8], [1, 2, 24, 72]] {
            // Mild decays, and strong ones that drive e^G below f32's
            // normal range within a chunk.
            for &(t, decay) in &[
                (1usize, 0.3f32),
                (5, 0.3),
                (63, 0.3),
                (64, 3.0),
                (65, 0.3),
                (130, 3.0),
            ] {
                let mut seed = (t * 1000 + dims[2] + 3 * dims[3]) as u64 | 1;
                let mut next = || {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    ((seed >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
                };
                let case = DeltaCase::new(&mut next, t, dims, decay);
                let (inp, s0) = (case.inputs(), &case.s0);
                let (sr, or) = run(&inp, s0, crate::cpu::delta_head_chunked);
                let (sb, ob) = run(&inp, s0, delta_head_blocked);
                let (ds, dout) = (max_rel(&sr, &sb), max_rel(&or, &ob));
                assert!(
                    ds < 1e-5 && dout < 1e-5,
                    "dims {dims:?}, T={t}: state {ds}, output {dout}"
                );
                let (sg, og) = run(&inp, s0, delta_head_blocked_generic);
                assert!(sg == sb && og == ob, "generic differs, T={t}");
                #[cfg(target_arch = "x86_64")]
                if std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("fma")
                {
                    // SAFETY: AVX2 and FMA detected.
                    let (s2, o2) = run(&inp, s0, |i, h, m, o| {
                        flush_subnormals(|| unsafe { head_avx2(i, h, m, o) })
                    });
                    assert!(s2 == sb && o2 == ob, "avx2 differs, T={t}");
                }
            }
        }
    }
}
