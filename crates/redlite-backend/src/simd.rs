//! f32 vector kernels: dot product and axpy, with AVX2+FMA fast paths chosen
//! at run time and scalar reference twins.

use std::sync::OnceLock;

pub(crate) fn has_avx2() -> bool {
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            redlite_quant::isa() >= redlite_quant::Isa::Avx2
                && std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma")
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    })
}

/// Scalar reference: `Σ a[i]·b[i]` over `min(len)` values.
pub fn dot_scalar(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let mut acc = [0f32; 8];
    let mut i = 0;
    while i + 8 <= n {
        for l in 0..8 {
            acc[l] += a[i + l] * b[i + l];
        }
        i += 8;
    }
    let mut s = 0f32;
    while i < n {
        s += a[i] * b[i];
        i += 1;
    }
    acc.iter().sum::<f32>() + s
}

/// Scalar reference: `y[i] += alpha·x[i]`.
pub fn axpy_scalar(y: &mut [f32], alpha: f32, x: &[f32]) {
    for (a, b) in y.iter_mut().zip(x) {
        *a += alpha * b;
    }
}

/// `Σ a[i]·b[i]` over `min(a.len(), b.len())` values.
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: AVX2 and FMA were detected on this CPU.
        return unsafe { x86::dot_avx2(a, b) };
    }
    dot_scalar(a, b)
}

/// `y[i] += alpha·x[i]` over `min(len)` values.
#[inline]
pub fn axpy(y: &mut [f32], alpha: f32, x: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: AVX2 and FMA were detected on this CPU.
        unsafe { x86::axpy_avx2(y, alpha, x) };
        return;
    }
    axpy_scalar(y, alpha, x)
}

/// Scalar reference: four dot products of rows `w[r·n .. (r+1)·n]` with `x`.
/// `out[h·ostride + j] = q_h · k_j` for the `g` query heads in `q`
/// (`[g, hd]`) and `n` key rows of `hd` values at stride `stride` in `k`
/// (the scalar twin of [`scores_group`]).
pub fn scores_group_scalar(
    q: &[f32],
    hd: usize,
    k: &[f32],
    stride: usize,
    n: usize,
    out: &mut [f32],
    ostride: usize,
) {
    let g = q.len() / hd;
    for j in 0..n {
        let kr = &k[j * stride..j * stride + hd];
        for h in 0..g {
            out[h * ostride + j] = dot_scalar(&q[h * hd..(h + 1) * hd], kr);
        }
    }
}

/// [`scores_group_scalar`] with AVX2: eight heads at a time share each
/// load of a key row (one pass over the keys instead of one per head).
pub fn scores_group(
    q: &[f32],
    hd: usize,
    k: &[f32],
    stride: usize,
    n: usize,
    out: &mut [f32],
    ostride: usize,
) {
    let g = q.len() / hd;
    assert!(
        q.len() == g * hd
            && (n == 0 || k.len() >= (n - 1) * stride + hd)
            && (g == 0 || out.len() >= (g - 1) * ostride + n),
        "scores_group: sizes"
    );
    #[cfg(target_arch = "x86_64")]
    if has_avx2() && hd.is_multiple_of(8) {
        let full = g / 8 * 8;
        for h0 in (0..full).step_by(8) {
            // SAFETY: AVX2 and FMA were detected; the sizes were checked
            // above (heads h0..h0+8 of q, rows 0..n of k, columns 0..n of
            // rows h0..h0+8 of out).
            unsafe {
                x86::scores8_avx2(
                    &q[h0 * hd..(h0 + 8) * hd],
                    hd,
                    k,
                    stride,
                    n,
                    &mut out[h0 * ostride..],
                    ostride,
                )
            };
        }
        if full < g {
            scores_group_scalar(
                &q[full * hd..],
                hd,
                k,
                stride,
                n,
                &mut out[full * ostride..],
                ostride,
            );
        }
        return;
    }
    scores_group_scalar(q, hd, k, stride, n, out, ostride)
}

pub fn dot4_scalar(w: &[f32], x: &[f32]) -> [f32; 4] {
    let n = x.len();
    std::array::from_fn(|r| dot_scalar(&w[r * n..(r + 1) * n], x))
}

/// Four dot products of consecutive rows of `w` (`[4, x.len()]`) with `x`,
/// reading `x` once.
#[inline]
pub fn dot4(w: &[f32], x: &[f32]) -> [f32; 4] {
    assert!(w.len() >= 4 * x.len(), "dot4: sizes");
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: AVX2 and FMA were detected; sizes were checked above.
        return unsafe { x86::dot4_avx2(w, x) };
    }
    dot4_scalar(w, x)
}

/// Scalar reference: `o[d] += Σ_j p[j]·v[j·stride + d]` for `d < o.len()`.
pub fn axpy_rows_scalar(o: &mut [f32], p: &[f32], v: &[f32], stride: usize) {
    for (j, &pj) in p.iter().enumerate() {
        axpy_scalar(o, pj, &v[j * stride..j * stride + o.len()]);
    }
}

/// `o[d] += Σ_j p[j]·v[j·stride + d]`: a weighted sum of strided rows
/// (attention's `P·V`), with `o` kept in registers across rows.
#[inline]
pub fn axpy_rows(o: &mut [f32], p: &[f32], v: &[f32], stride: usize) {
    if p.is_empty() {
        return;
    }
    assert!(
        v.len() >= (p.len() - 1) * stride + o.len(),
        "axpy_rows: sizes"
    );
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: AVX2 and FMA were detected; sizes were checked above.
        unsafe { x86::axpy_rows_avx2(o, p, v, stride) };
        return;
    }
    axpy_rows_scalar(o, p, v, stride)
}

const EXP_HI: f32 = 88.376_26;
const EXP_LO: f32 = -87.336_55;
const LOG2E: f32 = std::f32::consts::LOG2_E;
const EXP_C1: f32 = 0.693_359_4;
const EXP_C2: f32 = -2.121_944_4e-4;
const EXP_P: [f32; 6] = [
    1.987_569_1e-4,
    1.398_199_9e-3,
    8.333_452e-3,
    4.166_579_6e-2,
    1.666_666_5e-1,
    0.5,
];

/// Scalar reference of the vector exp (Cephes `expf` polynomial, ~1 ulp;
/// inputs below −87.3 give ~0).
pub fn exp_poly(x: f32) -> f32 {
    let x = x.clamp(EXP_LO, EXP_HI);
    let fx = (x * LOG2E + 0.5).floor();
    let r = x - fx * EXP_C1 - fx * EXP_C2;
    let mut y = EXP_P[0];
    for &c in &EXP_P[1..] {
        y = y * r + c;
    }
    let y = y * r * r + r + 1.0;
    y * f32::from_bits(((fx as i32 + 127) as u32) << 23)
}

/// Scalar reference: `x[i] = exp(x[i] − m)`; returns `Σ x[i]` (f64).
pub fn exp_sub_sum_scalar(x: &mut [f32], m: f32) -> f64 {
    let mut s = 0f64;
    for v in x.iter_mut() {
        *v = exp_poly(*v - m);
        s += *v as f64;
    }
    s
}

/// One step of an online softmax over a run of scores `sc`: the running
/// maximum `mx` rises to the run's if it is higher (rescaling the
/// unnormalised output `o` and the sum by `exp(old − new)`), then `sc`
/// becomes `exp(sc − mx)` and its sum is added to `sum`. The caller adds
/// the run's weighted values to `o` afterwards.
#[inline]
pub fn softmax_step(sc: &mut [f32], mx: &mut f32, sum: &mut f64, o: &mut [f32]) {
    let bmax = max_of(sc);
    let m_new = mx.max(bmax);
    if m_new > *mx && *mx != f32::NEG_INFINITY {
        let corr = ((*mx - m_new) as f64).exp();
        o.iter_mut().for_each(|x| *x = (*x as f64 * corr) as f32);
        *sum *= corr;
    }
    *mx = m_new;
    *sum += exp_sub_sum(sc, m_new);
}

/// The largest value of `x` (`−∞` when empty), NaN ignored: `f32::max`
/// folded from `−∞`. A maximum is exact in any order, so the vector kernel
/// (32 lanes side by side instead of one chain of dependent comparisons,
/// which cost decode attention as much as its exponentials) gives the
/// scalar fold's value.
#[inline]
pub fn max_of(x: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: AVX2 was detected on this CPU.
        return unsafe { x86::max_of_avx2(x) };
    }
    max_of_scalar(x)
}

/// Scalar reference of [`max_of`].
pub fn max_of_scalar(x: &[f32]) -> f32 {
    x.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b))
}

/// `x[i] = exp(x[i] − m)` (for `x[i] ≤ m`); returns `Σ x[i]`.
#[inline]
pub fn exp_sub_sum(x: &mut [f32], m: f32) -> f64 {
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: AVX2 and FMA were detected on this CPU.
        return unsafe { x86::exp_sub_sum_avx2(x, m) };
    }
    exp_sub_sum_scalar(x, m)
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// Key rows ahead that [`scores8_avx2`] prefetches.
    const KEY_PREFETCH: usize = 8;

    /// Scores of eight query heads against `n` key rows.
    ///
    /// # Safety
    /// AVX2 and FMA; `q` holds 8 × `hd` values (`hd` a multiple of 8), `k`
    /// rows `0..n` at `stride`, `out` rows `0..8` of `n` values at `ostride`.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn scores8_avx2(
        q: &[f32],
        hd: usize,
        k: &[f32],
        stride: usize,
        n: usize,
        out: &mut [f32],
        ostride: usize,
    ) {
        let (pq, pk, po) = (q.as_ptr(), k.as_ptr(), out.as_mut_ptr());
        // SAFETY (whole body): the caller checked q holds 8 heads of hd
        // values, k rows 0..n at `stride` and out rows 0..8 of n columns.
        for j in 0..n {
            let kr = pk.add(j * stride);
            // The key row KEY_PREFETCH rows ahead, every line (a prefetch
            // past the cache's end never faults). Long contexts stream the
            // keys from memory once per query group.
            let ahead = kr.wrapping_add(KEY_PREFETCH * stride);
            let mut c = 0;
            while c < hd {
                _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(c).cast());
                c += 16;
            }
            let mut acc = [_mm256_setzero_ps(); 8];
            let mut c = 0;
            while c < hd {
                let kc = _mm256_loadu_ps(kr.add(c));
                for (h, a) in acc.iter_mut().enumerate() {
                    *a = _mm256_fmadd_ps(_mm256_loadu_ps(pq.add(h * hd + c)), kc, *a);
                }
                c += 8;
            }
            for (h, a) in acc.iter().enumerate() {
                let hi = _mm256_extractf128_ps(*a, 1);
                let s4 = _mm_add_ps(hi, _mm256_castps256_ps128(*a));
                let s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
                let s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
                *po.add(h * ostride + j) = _mm_cvtss_f32(s1);
            }
        }
    }

    /// # Safety
    /// AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn dot_avx2(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len().min(b.len());
        let (pa, pb) = (a.as_ptr(), b.as_ptr());
        let mut acc0 = _mm256_setzero_ps();
        let mut acc1 = _mm256_setzero_ps();
        let mut i = 0;
        // SAFETY (whole body): every load reads indices < n, in bounds of both slices.
        while i + 16 <= n {
            acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(pa.add(i)), _mm256_loadu_ps(pb.add(i)), acc0);
            acc1 = _mm256_fmadd_ps(
                _mm256_loadu_ps(pa.add(i + 8)),
                _mm256_loadu_ps(pb.add(i + 8)),
                acc1,
            );
            i += 16;
        }
        if i + 8 <= n {
            acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(pa.add(i)), _mm256_loadu_ps(pb.add(i)), acc0);
            i += 8;
        }
        let acc = _mm256_add_ps(acc0, acc1);
        let hi = _mm256_extractf128_ps(acc, 1);
        let lo = _mm256_castps256_ps128(acc);
        let s4 = _mm_add_ps(hi, lo);
        let s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
        let s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
        let mut s = _mm_cvtss_f32(s1);
        while i < n {
            s += *pa.add(i) * *pb.add(i);
            i += 1;
        }
        s
    }

    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn axpy_rows_avx2(o: &mut [f32], p: &[f32], v: &[f32], stride: usize) {
        let n = o.len();
        let (po, pv) = (o.as_mut_ptr(), v.as_ptr());
        let mut d = 0;
        // SAFETY (whole body): the caller checked v.len() >= (p.len()-1)·stride + n,
        // so v[j·stride + d'] for d' < n is in bounds; o is accessed below n.
        while d + 32 <= n {
            let mut a = [
                _mm256_loadu_ps(po.add(d)),
                _mm256_loadu_ps(po.add(d + 8)),
                _mm256_loadu_ps(po.add(d + 16)),
                _mm256_loadu_ps(po.add(d + 24)),
            ];
            for (j, &pj) in p.iter().enumerate() {
                let b = _mm256_set1_ps(pj);
                let row = pv.add(j * stride + d);
                for (l, al) in a.iter_mut().enumerate() {
                    *al = _mm256_fmadd_ps(b, _mm256_loadu_ps(row.add(8 * l)), *al);
                }
            }
            for (l, al) in a.iter().enumerate() {
                _mm256_storeu_ps(po.add(d + 8 * l), *al);
            }
            d += 32;
        }
        while d + 8 <= n {
            let mut a = _mm256_loadu_ps(po.add(d));
            for (j, &pj) in p.iter().enumerate() {
                a = _mm256_fmadd_ps(
                    _mm256_set1_ps(pj),
                    _mm256_loadu_ps(pv.add(j * stride + d)),
                    a,
                );
            }
            _mm256_storeu_ps(po.add(d), a);
            d += 8;
        }
        while d < n {
            let mut a = *po.add(d);
            for (j, &pj) in p.iter().enumerate() {
                a += pj * *pv.add(j * stride + d);
            }
            *po.add(d) = a;
            d += 1;
        }
    }

    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn dot4_avx2(w: &[f32], x: &[f32]) -> [f32; 4] {
        let n = x.len();
        let (pw, px) = (w.as_ptr(), x.as_ptr());
        let mut a = [_mm256_setzero_ps(); 4];
        let mut i = 0;
        // SAFETY (whole body): the caller checked w.len() >= 4·n; indices are
        // r·n + i with i < n.
        while i + 8 <= n {
            let xv = _mm256_loadu_ps(px.add(i));
            for (r, ar) in a.iter_mut().enumerate() {
                *ar = _mm256_fmadd_ps(_mm256_loadu_ps(pw.add(r * n + i)), xv, *ar);
            }
            i += 8;
        }
        let mut out = [0f32; 4];
        for (r, ar) in a.iter().enumerate() {
            let hi = _mm256_extractf128_ps(*ar, 1);
            let s4 = _mm_add_ps(hi, _mm256_castps256_ps128(*ar));
            let s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
            let s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
            let mut s = _mm_cvtss_f32(s1);
            for k in i..n {
                s += *pw.add(r * n + k) * *px.add(k);
            }
            out[r] = s;
        }
        out
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn exp8(x: __m256) -> __m256 {
        use super::{EXP_C1, EXP_C2, EXP_HI, EXP_LO, EXP_P, LOG2E};
        let x = _mm256_min_ps(
            _mm256_max_ps(x, _mm256_set1_ps(EXP_LO)),
            _mm256_set1_ps(EXP_HI),
        );
        let fx = _mm256_floor_ps(_mm256_fmadd_ps(
            x,
            _mm256_set1_ps(LOG2E),
            _mm256_set1_ps(0.5),
        ));
        // Same operation order as the scalar twin (no fused steps here).
        let r = _mm256_sub_ps(
            _mm256_sub_ps(x, _mm256_mul_ps(fx, _mm256_set1_ps(EXP_C1))),
            _mm256_mul_ps(fx, _mm256_set1_ps(EXP_C2)),
        );
        let mut y = _mm256_set1_ps(EXP_P[0]);
        for &c in &EXP_P[1..] {
            y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(c));
        }
        let y = _mm256_add_ps(
            _mm256_fmadd_ps(_mm256_mul_ps(y, r), r, r),
            _mm256_set1_ps(1.0),
        );
        let e = _mm256_slli_epi32(
            _mm256_add_epi32(_mm256_cvtps_epi32(fx), _mm256_set1_epi32(127)),
            23,
        );
        _mm256_mul_ps(y, _mm256_castsi256_ps(e))
    }

    /// The largest value of `x`, NaN ignored (as [`super::max_of_scalar`]).
    ///
    /// # Safety
    /// AVX2.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn max_of_avx2(x: &[f32]) -> f32 {
        let (n, p) = (x.len(), x.as_ptr());
        // `_mm256_max_ps(v, acc)` returns `acc` where `v` is NaN (its second
        // operand), as `acc.max(v)` does; the accumulators never hold NaN.
        let mut acc = [_mm256_set1_ps(f32::NEG_INFINITY); 4];
        let mut i = 0;
        // SAFETY (whole body): every access is at an index < n.
        while i + 32 <= n {
            for (k, a) in acc.iter_mut().enumerate() {
                *a = _mm256_max_ps(_mm256_loadu_ps(p.add(i + 8 * k)), *a);
            }
            i += 32;
        }
        while i + 8 <= n {
            acc[0] = _mm256_max_ps(_mm256_loadu_ps(p.add(i)), acc[0]);
            i += 8;
        }
        let m = _mm256_max_ps(_mm256_max_ps(acc[0], acc[1]), _mm256_max_ps(acc[2], acc[3]));
        let mut lanes = [0f32; 8];
        _mm256_storeu_ps(lanes.as_mut_ptr(), m);
        let mut r = lanes.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
        while i < n {
            r = r.max(*p.add(i));
            i += 1;
        }
        r
    }

    /// `x[i] = exp(x[i] − m)` and their sum, 8 at a time.
    ///
    /// # Safety
    /// AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn exp_sub_sum_avx2(x: &mut [f32], m: f32) -> f64 {
        let n = x.len();
        let p = x.as_mut_ptr();
        let vm = _mm256_set1_ps(m);
        let mut acc = _mm256_setzero_pd();
        let mut i = 0;
        // SAFETY (whole body): every access is at an index < n.
        while i + 8 <= n {
            let e = exp8(_mm256_sub_ps(_mm256_loadu_ps(p.add(i)), vm));
            _mm256_storeu_ps(p.add(i), e);
            acc = _mm256_add_pd(acc, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
            acc = _mm256_add_pd(acc, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
            i += 8;
        }
        let mut lanes = [0f64; 4];
        _mm256_storeu_pd(lanes.as_mut_ptr(), acc);
        let mut s: f64 = lanes.iter().sum();
        while i < n {
            let e = super::exp_poly(*p.add(i) - m);
            *p.add(i) = e;
            s += e as f64;
            i += 1;
        }
        s
    }

    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn axpy_avx2(y: &mut [f32], alpha: f32, x: &[f32]) {
        let n = y.len().min(x.len());
        let (py, px) = (y.as_mut_ptr(), x.as_ptr());
        let va = _mm256_set1_ps(alpha);
        let mut i = 0;
        // SAFETY (whole body): every access is at an index < n, in bounds of both slices.
        while i + 8 <= n {
            let r = _mm256_fmadd_ps(va, _mm256_loadu_ps(px.add(i)), _mm256_loadu_ps(py.add(i)));
            _mm256_storeu_ps(py.add(i), r);
            i += 8;
        }
        while i < n {
            *py.add(i) += alpha * *px.add(i);
            i += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rand_vec(n: usize, seed: u64) -> Vec<f32> {
        crate::test_util::Rng(seed).vec(n)
    }

    #[test]
    fn exp_matches_scalar() {
        let xs: Vec<f32> = (0..1000).map(|i| -100.0 + i as f32 * 0.1013).collect();
        for m in [0.0f32, 1.5] {
            let (mut a, mut b) = (xs.clone(), xs.clone());
            let sa = exp_sub_sum(&mut a, m);
            let sb = exp_sub_sum_scalar(&mut b, m);
            assert!((sa - sb).abs() <= 1e-6 * sb.abs());
            for ((x, ea), eb) in xs.iter().zip(&a).zip(&b) {
                let e = ((*x - m) as f64).exp();
                assert!(
                    (*ea as f64 - e).abs() <= 4e-7 * e + 1e-37,
                    "exp({x}): {ea} vs {e}"
                );
                assert!(
                    (*eb as f64 - e).abs() <= 4e-7 * e + 1e-37,
                    "exp({x}): {eb} vs {e}"
                );
            }
        }
    }

    #[test]
    fn max_of_matches_the_scalar_fold() {
        let mut r = crate::test_util::Rng(77);
        for n in [0usize, 1, 7, 8, 31, 32, 33, 100, 256, 1000] {
            let mut x = r.vec(n);
            assert_eq!(max_of(&x).to_bits(), max_of_scalar(&x).to_bits(), "n {n}");
            // NaN anywhere is ignored; infinities count.
            for (i, v) in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 1e30, -1e30]
                .into_iter()
                .enumerate()
            {
                if n > 0 {
                    x[(i * 13 + 5) % n] = v;
                    let (a, b) = (max_of(&x), max_of_scalar(&x));
                    assert!(a == b && !a.is_nan(), "n {n} with {v}: {a} vs {b}");
                }
            }
        }
        assert_eq!(max_of(&[f32::NAN; 40]), f32::NEG_INFINITY);
        assert_eq!(max_of(&[-3.0, f32::NAN, -2.0]), -2.0);
        // The largest value wherever it sits, against a sort.
        let x = r.vec(513);
        let mut s = x.clone();
        s.sort_by(f32::total_cmp);
        assert_eq!(max_of(&x), s[512]);
    }

    #[test]
    fn dot4_matches_scalar() {
        for n in [1usize, 8, 13, 64, 256] {
            let w = rand_vec(4 * n, n as u64);
            let x = rand_vec(n, 9);
            let (a, b) = (dot4(&w, &x), dot4_scalar(&w, &x));
            for r in 0..4 {
                assert!((a[r] - b[r]).abs() < 1e-5 * n as f32, "{n} {r}");
            }
        }
    }

    #[test]
    fn axpy_rows_matches_scalar() {
        for (n, rows, stride) in [
            (64usize, 37usize, 128usize),
            (40, 3, 40),
            (7, 5, 9),
            (96, 1, 96),
        ] {
            let p = rand_vec(rows, n as u64);
            let v = rand_vec((rows - 1) * stride + n, 3 + rows as u64);
            let o0 = rand_vec(n, 77);
            let (mut a, mut b) = (o0.clone(), o0.clone());
            axpy_rows(&mut a, &p, &v, stride);
            axpy_rows_scalar(&mut b, &p, &v, stride);
            for (x, y) in a.iter().zip(&b) {
                assert!((x - y).abs() < 1e-5, "{x} vs {y}");
            }
        }
    }

    #[test]
    fn dot_and_axpy_match_scalar() {
        for n in [0usize, 1, 7, 8, 15, 16, 17, 64, 100, 257] {
            let a = rand_vec(n, n as u64);
            let b = rand_vec(n, n as u64 + 99);
            let exact: f64 = a.iter().zip(&b).map(|(x, y)| *x as f64 * *y as f64).sum();
            let (f, s) = (dot(&a, &b), dot_scalar(&a, &b));
            assert!(
                (f as f64 - exact).abs() < 1e-5 * (1.0 + n as f64),
                "{n}: {f} vs {exact}"
            );
            assert!((f - s).abs() < 1e-5 * (1.0 + n as f32), "{n}: {f} vs {s}");
            let mut y1 = b.clone();
            let mut y2 = b.clone();
            axpy(&mut y1, 0.37, &a);
            axpy_scalar(&mut y2, 0.37, &a);
            for (p, q) in y1.iter().zip(&y2) {
                assert!((p - q).abs() < 1e-6);
            }
        }
    }
}
