//! Decode attention (one query token) over the KV cache as stored.
//!
//! Flash-decoding: the positions are cut into chunks of [`DECODE_SPLIT`]
//! positions, each one parallel task over every KV head that returns its
//! partial softmax per query head (the running maximum, the f64 sum of
//! exponentials and the unnormalised output). A task reads each cache row
//! whole (all KV heads, in address order): the memory system streams that
//! far better than one head's half-rows 1 KiB apart. The partials are then
//! combined in chunk order, so the result does not depend on the thread
//! count; a context of one chunk (a task per KV head there, for the
//! threads) is finished exactly as the sequential kernel always did, and a
//! head's result does not depend on which heads share its task.
//!
//! Inside a task, keys and values are read in place in their stored type
//! (f32, f16, bf16, q8_0, q4_0), each row once for the whole group of query
//! heads that share it: [`scores_kv`] converts 32 values of a key row in
//! registers (F16C for f16, integer widening times the block scale for
//! q8_0 and q4_0) and multiplies them into eight heads' accumulators;
//! [`pv_kv`] does the same for values (for the 16- and 32-bit types, tiles
//! of six heads × 16 values and two heads × 32: twelve or eight independent
//! accumulator chains, and a broadcast weight feeds two or four products).
//! The query rows sit on cache lines ([`LineBuf`]: a row 16 bytes off makes
//! every other 32-byte load straddle two lines, a third slower). The rows a
//! step will need are prefetched a few steps ahead, spread over the step's
//! work.
//!
//! Prefill (`attn_prefill`) runs each query of a block of tokens as a
//! decode step over the keys it sees, chunk by chunk, so a chunk's rows
//! come from memory once and from cache for the block's other queries. Each output takes the same operations in the same
//! order as on the row widened to f32 beforehand, so a stored type gives
//! bit for bit the result of its values in f32. Shapes the fused kernels do
//! not take (groups not a multiple of 8 heads, head sizes not a multiple of
//! 32, no AVX2) convert 32 rows at a time into a buffer and use the f32
//! kernels. Scalar twins: [`scores_kv_scalar`], [`pv_kv_scalar`].

use rayon::prelude::*;

use crate::aligned::LineBuf;
use crate::kvtype::{decode, decode_scalar, KvRows};
use crate::simd::{axpy_rows, dot_scalar, scores_group, softmax_step};
use crate::{AttnShape, KvBlocks};

/// Positions of one decode task (a multiple of [`KB`]).
pub const DECODE_SPLIT: usize = 2048;
/// Keys per online-softmax step (the CPU attention's key chunk, decode and
/// prefill).
pub(crate) const KB: usize = 256;
/// Rows converted (or rows whose scales are gathered) at a time.
const SUB: usize = 32;

/// One task's softmax over its positions, per query head of the group.
struct Partial {
    mx: Vec<f32>,
    sum: Vec<f64>,
    /// Unnormalised outputs, `[group, head_dim]`.
    o: Vec<f32>,
}

/// Decode attention for every query head: `out` is `[n_head, head_dim]`.
/// Runs its tasks on the current rayon pool.
pub(crate) fn attn_decode(s: &AttnShape, q: &[f32], kv: &KvBlocks<'_>, out: &mut [f32]) {
    let hd = s.head_dim;
    let g = s.n_head / s.n_head_kv;
    let n_keys = s.pos0 + 1;
    let n_split = n_keys.div_ceil(DECODE_SPLIT);
    let range = |c: usize| (c * DECODE_SPLIT, ((c + 1) * DECODE_SPLIT).min(n_keys));
    // parts[kvh][c]: KV head kvh's partial over chunk c.
    let parts: Vec<Vec<Partial>> = if n_split == 1 {
        // One chunk: a task per KV head.
        (0..s.n_head_kv)
            .into_par_iter()
            .map(|kvh| decode_range(s, q, kv, kvh, 1, 0, n_keys))
            .collect()
    } else {
        // A task per chunk over every KV head: the rows are read whole, in
        // address order, which the memory system streams far better than
        // each head's half-rows apart.
        let by_chunk: Vec<Vec<Partial>> = (0..n_split)
            .into_par_iter()
            .map(|c| {
                let (a, b) = range(c);
                decode_range(s, q, kv, 0, s.n_head_kv, a, b)
            })
            .collect();
        let mut parts: Vec<Vec<Partial>> = (0..s.n_head_kv).map(|_| Vec::new()).collect();
        for chunk in by_chunk {
            for (kvh, p) in chunk.into_iter().enumerate() {
                parts[kvh].push(p);
            }
        }
        parts
    };
    for (kvh, ps) in parts.iter().enumerate() {
        combine(ps, g, hd, &mut out[kvh * g * hd..(kvh + 1) * g * hd]);
    }
}

/// Causal attention of the query heads sharing KV head `kvh` for query
/// tokens `t0..t1` (prefill): each query is a decode step over the keys it
/// sees, with the kernels above (rows read in their stored type, each row
/// once for the group's heads), chunk by chunk of [`KB`] keys, so a chunk's
/// rows are read from memory once and then from cache for every later
/// query of the block. Online softmax per head and query as in decode
/// (max-subtraction, f64 sums). Returns `[group, t1 − t0, head_dim]`.
pub(crate) fn attn_prefill(
    s: &AttnShape,
    q: &[f32],
    kv: &KvBlocks<'_>,
    kvh: usize,
    t0: usize,
    t1: usize,
) -> Vec<f32> {
    let hd = s.head_dim;
    let g = s.n_head / s.n_head_kv;
    let gh = g * hd;
    let nq = t1 - t0;
    let stride = s.n_head_kv * hd;
    // The group's scaled queries, `[nq][g · hd]`, on cache lines.
    let mut qs = LineBuf::zeroed(nq * gh);
    for (qi, r) in qs.chunks_exact_mut(gh.max(1)).enumerate() {
        let at = ((t0 + qi) * s.n_head + kvh * g) * hd;
        r.iter_mut()
            .zip(&q[at..at + gh])
            .for_each(|(a, &b)| *a = b * s.scale);
    }
    // Unnormalised outputs `[nq][g][hd]`, running maxima and sums `[nq][g]`.
    let mut o = vec![0f32; nq * gh];
    let mut mx = vec![f32::NEG_INFINITY; nq * g];
    let mut sum = vec![0f64; nq * g];
    let mut scores = vec![0f32; g * KB];
    let mut buf = Vec::new();
    let n_keys = s.pos0 + t1; // keys visible to the last query
    let mut k0 = 0;
    while k0 < n_keys {
        let (b, off, k1) = kv.locate(k0, KB, n_keys);
        let base = off * stride + kvh * hd;
        for qi in 0..nq {
            // Keys `k0..last` of this chunk are visible to query `t0 + qi`.
            let last = (s.pos0 + t0 + qi + 1).min(k1);
            if last <= k0 {
                continue;
            }
            let rows = ChunkRows {
                k: kv.k[b],
                v: kv.v[b],
                base,
                stride,
                n: last - k0,
            };
            chunk_step(
                &qs[qi * gh..(qi + 1) * gh],
                hd,
                1,
                &rows,
                (
                    &mut mx[qi * g..(qi + 1) * g],
                    &mut sum[qi * g..(qi + 1) * g],
                    &mut o[qi * gh..(qi + 1) * gh],
                ),
                &mut scores,
                &mut buf,
            );
        }
        k0 = k1;
    }
    let mut out = vec![0f32; nq * gh];
    for qi in 0..nq {
        for h in 0..g {
            let i = qi * g + h;
            let inv = (1.0 / sum[i]) as f32;
            out[(h * nq + qi) * hd..(h * nq + qi + 1) * hd]
                .iter_mut()
                .zip(&o[i * hd..(i + 1) * hd])
                .for_each(|(d, &x)| *d = x * inv);
        }
    }
    out
}

/// The partials of one KV head, in position order, into normalised
/// outputs.
fn combine(ps: &[Partial], g: usize, hd: usize, out: &mut [f32]) {
    if let [p] = ps {
        for h in 0..g {
            let inv = (1.0 / p.sum[h]) as f32;
            out[h * hd..(h + 1) * hd]
                .iter_mut()
                .zip(&p.o[h * hd..(h + 1) * hd])
                .for_each(|(o, &x)| *o = x * inv);
        }
        return;
    }
    let mut acc = vec![0f64; hd];
    for h in 0..g {
        let m = ps.iter().fold(f32::NEG_INFINITY, |a, p| a.max(p.mx[h]));
        acc.iter_mut().for_each(|a| *a = 0.0);
        let mut sum = 0f64;
        for p in ps {
            let w = ((p.mx[h] - m) as f64).exp();
            sum += p.sum[h] * w;
            acc.iter_mut()
                .zip(&p.o[h * hd..(h + 1) * hd])
                .for_each(|(a, &x)| *a += x as f64 * w);
        }
        out[h * hd..(h + 1) * hd]
            .iter_mut()
            .zip(&acc)
            .for_each(|(o, &a)| *o = (a / sum) as f32);
    }
}

/// Online softmax of the groups of KV heads `kvh0 .. kvh0 + groups` over
/// positions `start..end` (max-subtraction, f64 sums), unnormalised: a
/// partial per KV head. Each head's partial is the same whatever the
/// number of groups taken together.
#[allow(clippy::too_many_arguments)]
fn decode_range(
    s: &AttnShape,
    q: &[f32],
    kv: &KvBlocks<'_>,
    kvh0: usize,
    groups: usize,
    start: usize,
    end: usize,
) -> Vec<Partial> {
    let hd = s.head_dim;
    let g = s.n_head / s.n_head_kv;
    let heads = groups * g;
    let stride = s.n_head_kv * hd;
    let mut o = vec![0f32; heads * hd];
    let mut mx = vec![f32::NEG_INFINITY; heads];
    let mut sum = vec![0f64; heads];
    let mut scores = vec![0f32; heads * KB];
    let mut buf = Vec::new();
    // On a cache line: the score kernel rereads these rows for every key.
    let qs = LineBuf::from_map(&q[kvh0 * g * hd..(kvh0 + groups) * g * hd], |x| x * s.scale);
    let mut k0 = start;
    while k0 < end {
        let (b, off, k1) = kv.locate(k0, KB, end);
        let base = off * stride + kvh0 * hd;
        let rows = ChunkRows {
            k: kv.k[b],
            v: kv.v[b],
            base,
            stride,
            n: k1 - k0,
        };
        chunk_step(
            &qs,
            hd,
            groups,
            &rows,
            (&mut mx, &mut sum, &mut o),
            &mut scores,
            &mut buf,
        );
        k0 = k1;
    }
    (0..groups)
        .map(|k| Partial {
            mx: mx[k * g..(k + 1) * g].to_vec(),
            sum: sum[k * g..(k + 1) * g].to_vec(),
            o: o[k * g * hd..(k + 1) * g * hd].to_vec(),
        })
        .collect()
}

/// Rows `0..n` of one chunk of keys and values: row `j`'s values `base + j
/// · stride ..` of the block's tables.
struct ChunkRows<'a> {
    k: KvRows<'a>,
    v: KvRows<'a>,
    base: usize,
    stride: usize,
    n: usize,
}

/// One online-softmax step of the heads of `qs` (`groups` groups, each
/// group's heads sharing a row) over a chunk of at most [`KB`] rows: the
/// scores, then per head the softmax step on its running maximum, sum and
/// unnormalised output (`state`: `[heads]`, `[heads]`, `[heads, hd]`), then
/// the chunk's values into the outputs. Decode and prefill both take it.
fn chunk_step(
    qs: &[f32],
    hd: usize,
    groups: usize,
    rows: &ChunkRows<'_>,
    state: (&mut [f32], &mut [f64], &mut [f32]),
    scores: &mut [f32],
    buf: &mut Vec<f32>,
) {
    let (mx, sum, o) = state;
    let (base, stride, nk) = (rows.base, rows.stride, rows.n);
    scores_kv(qs, hd, groups, rows.k, base, stride, nk, scores, KB, buf);
    for (h, (m, s)) in mx.iter_mut().zip(sum.iter_mut()).enumerate() {
        let sc = &mut scores[h * KB..h * KB + nk];
        softmax_step(sc, m, s, &mut o[h * hd..(h + 1) * hd]);
    }
    pv_kv(o, hd, groups, scores, KB, rows.v, base, stride, nk, buf);
}

/// Whether the fused kernels take these rows: groups of 8 heads, rows of
/// whole 32-value blocks starting on one, AVX2 (and F16C).
fn fused(g: usize, hd: usize, base: usize, stride: usize) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        g > 0
            && g.is_multiple_of(8)
            && hd.is_multiple_of(32)
            && base.is_multiple_of(32)
            && stride.is_multiple_of(32)
            && crate::kvtype::has_f16c()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (g, hd, base, stride);
        false
    }
}

/// Whether rows `0..n` (values `base + j · stride ..` of `hd`) lie in
/// `src`.
fn rows_in(src: KvRows<'_>, hd: usize, base: usize, stride: usize, n: usize) -> bool {
    n == 0 || base + (n - 1) * stride + hd <= src.len()
}

/// Rows `j0..j0 + m` of one head as f32 in `buf` (stride `hd`).
fn convert_rows<'b>(
    src: KvRows<'_>,
    hd: usize,
    base: usize,
    stride: usize,
    m: usize,
    buf: &'b mut Vec<f32>,
) -> &'b [f32] {
    if buf.len() < m * hd {
        buf.resize(m * hd, 0.0);
    }
    for (j, r) in buf[..m * hd].chunks_exact_mut(hd).enumerate() {
        decode(src, base + j * stride, r);
    }
    &buf[..m * hd]
}

/// `out[h · ostride + j] = q_h · k_j` for the `g` heads of `q` (`[g, hd]`)
/// and key rows `j < n`. The heads are `groups` equal groups (KV heads):
/// group `k`'s row `j` is the values `base + j · stride + k · hd .. + hd` of
/// `src` in its stored type. Every head's score is the same whatever the
/// grouping; several groups in one call read each row once, in address
/// order. `buf` is scratch for the general path.
#[allow(clippy::too_many_arguments)]
pub fn scores_kv(
    q: &[f32],
    hd: usize,
    groups: usize,
    src: KvRows<'_>,
    base: usize,
    stride: usize,
    n: usize,
    out: &mut [f32],
    ostride: usize,
    buf: &mut Vec<f32>,
) {
    let g = q.len() / hd.max(1);
    let groups = groups.max(1);
    assert!(
        q.len() == g * hd
            && g.is_multiple_of(groups)
            && rows_in(src, groups * hd, base, stride, n)
            && (g == 0 || n == 0 || out.len() >= (g - 1) * ostride + n),
        "scores_kv: sizes"
    );
    let gk = g / groups;
    #[cfg(target_arch = "x86_64")]
    if gk == 8 && fused(gk, hd, base, stride) {
        // SAFETY: AVX2, FMA and F16C were detected; rows 0..n of every
        // group lie in `src`, start on whole blocks, and `out` holds 8 ·
        // groups rows of n scores at `ostride` (all checked above).
        unsafe { x86::scores8(q, hd, groups, src, base, stride, n, out, ostride) };
        return;
    }
    if groups > 1 {
        for k in 0..groups {
            scores_kv(
                &q[k * gk * hd..(k + 1) * gk * hd],
                hd,
                1,
                src,
                base + k * hd,
                stride,
                n,
                &mut out[k * gk * ostride..],
                ostride,
                buf,
            );
        }
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if fused(g, hd, base, stride) {
        for h0 in (0..g).step_by(8) {
            let qh = &q[h0 * hd..(h0 + 8) * hd];
            let o = &mut out[h0 * ostride..];
            // SAFETY: AVX2, FMA and F16C were detected; rows 0..n lie in
            // `src`, start on whole blocks, and `o` holds 8 rows of n
            // scores at `ostride` (all checked above).
            unsafe { x86::scores8(qh, hd, 1, src, base, stride, n, o, ostride) };
        }
        return;
    }
    if let KvRows::F32(x) = src {
        scores_group(q, hd, &x[base..], stride, n, out, ostride);
        return;
    }
    for j0 in (0..n).step_by(SUB) {
        let m = SUB.min(n - j0);
        let rows = convert_rows(src, hd, base + j0 * stride, stride, m, buf);
        scores_group(q, hd, rows, hd, m, &mut out[j0..], ostride);
    }
}

/// Scalar reference of [`scores_kv`].
#[allow(clippy::too_many_arguments)]
pub fn scores_kv_scalar(
    q: &[f32],
    hd: usize,
    groups: usize,
    src: KvRows<'_>,
    base: usize,
    stride: usize,
    n: usize,
    out: &mut [f32],
    ostride: usize,
) {
    let g = q.len() / hd.max(1);
    let gk = g / groups.max(1);
    let mut row = vec![0f32; hd];
    for j in 0..n {
        for h in 0..g {
            decode_scalar(src, base + j * stride + h / gk * hd, &mut row);
            out[h * ostride + j] = dot_scalar(&q[h * hd..(h + 1) * hd], &row);
        }
    }
}

/// `o[h][d] += Σ_j p[h · pstride + j] · v_j[d]` for the `g` heads of `o`
/// (`[g, hd]`) in `groups` groups and value rows `j < n` as in
/// [`scores_kv`].
#[allow(clippy::too_many_arguments)]
pub fn pv_kv(
    o: &mut [f32],
    hd: usize,
    groups: usize,
    p: &[f32],
    pstride: usize,
    src: KvRows<'_>,
    base: usize,
    stride: usize,
    n: usize,
    buf: &mut Vec<f32>,
) {
    let g = o.len() / hd.max(1);
    let groups = groups.max(1);
    assert!(
        o.len() == g * hd
            && g.is_multiple_of(groups)
            && rows_in(src, groups * hd, base, stride, n)
            && (g == 0 || n == 0 || p.len() >= (g - 1) * pstride + n),
        "pv_kv: sizes"
    );
    if n == 0 {
        return;
    }
    let gk = g / groups;
    #[cfg(target_arch = "x86_64")]
    if gk == 8 && fused(gk, hd, base, stride) {
        // SAFETY: AVX2, FMA and F16C were detected; rows 0..n of every
        // group lie in `src` on whole blocks, `p` holds 8 · groups rows of
        // n weights at `pstride` and `o` as many rows of hd (all checked
        // above).
        unsafe { x86::pv8(o, hd, groups, p, pstride, src, base, stride, n) };
        return;
    }
    if groups > 1 {
        for k in 0..groups {
            pv_kv(
                &mut o[k * gk * hd..(k + 1) * gk * hd],
                hd,
                1,
                &p[k * gk * pstride..],
                pstride,
                src,
                base + k * hd,
                stride,
                n,
                buf,
            );
        }
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if fused(g, hd, base, stride) {
        for h0 in (0..g).step_by(8) {
            // SAFETY: AVX2, FMA and F16C were detected; rows 0..n lie in
            // `src` on whole blocks, `p` holds 8 rows of n weights at
            // `pstride` and `o` 8 rows of hd (all checked above).
            unsafe {
                x86::pv8(
                    &mut o[h0 * hd..(h0 + 8) * hd],
                    hd,
                    1,
                    &p[h0 * pstride..],
                    pstride,
                    src,
                    base,
                    stride,
                    n,
                )
            };
        }
        return;
    }
    if let KvRows::F32(x) = src {
        for h in 0..g {
            let ph = &p[h * pstride..h * pstride + n];
            axpy_rows(&mut o[h * hd..(h + 1) * hd], ph, &x[base..], stride);
        }
        return;
    }
    for j0 in (0..n).step_by(SUB) {
        let m = SUB.min(n - j0);
        let rows = convert_rows(src, hd, base + j0 * stride, stride, m, buf);
        for h in 0..g {
            let ph = &p[h * pstride + j0..h * pstride + j0 + m];
            axpy_rows(&mut o[h * hd..(h + 1) * hd], ph, rows, hd);
        }
    }
}

/// Scalar reference of [`pv_kv`].
#[allow(clippy::too_many_arguments)]
pub fn pv_kv_scalar(
    o: &mut [f32],
    hd: usize,
    groups: usize,
    p: &[f32],
    pstride: usize,
    src: KvRows<'_>,
    base: usize,
    stride: usize,
    n: usize,
) {
    let g = o.len() / hd.max(1);
    let gk = g / groups.max(1);
    let mut row = vec![0f32; hd];
    for j in 0..n {
        for h in 0..g {
            decode_scalar(src, base + j * stride + h / gk * hd, &mut row);
            let w = p[h * pstride + j];
            o[h * hd..(h + 1) * hd]
                .iter_mut()
                .zip(&row)
                .for_each(|(a, &v)| *a += w * v);
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::SUB;
    use crate::kvtype::{BlockQ4_0, BlockQ8_0, KvRows};
    use std::arch::x86_64::*;

    /// Key rows ahead that the score kernel prefetches (the value kernel
    /// prefetches the next run of [`SUB`] rows).
    const PREFETCH: usize = 8;

    /// A block's f16 scale as f32.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn scale(d: u16) -> f32 {
        _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(d as i32)))
    }

    /// Prefetch the lines of bytes `from..to` after `a` (an address that is
    /// never dereferenced: a prefetch does not fault).
    #[inline(always)]
    fn prefetch(a: *const i8, from: usize, to: usize) {
        let mut l = from;
        while l < to {
            // SAFETY: a prefetch reads nothing and cannot fault.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(a.wrapping_add(l)) };
            l += 64;
        }
    }

    /// A block of 32 values with an f16 scale.
    trait Scaled {
        fn d(&self) -> u16;
    }
    impl Scaled for BlockQ8_0 {
        fn d(&self) -> u16 {
            self.d
        }
    }
    impl Scaled for BlockQ4_0 {
        fn d(&self) -> u16 {
            self.d
        }
    }

    /// The f32 scales of rows `j0 .. j0 + m` (`nb` blocks from `r`, rows
    /// `bs` blocks apart) into `sc`, `[m][nb]`.
    ///
    /// # Safety
    /// F16C; those blocks lie behind `r` and `sc` holds `m · nb` values.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn gather_scales<B: Scaled>(
        r: *const B,
        bs: usize,
        nb: usize,
        j0: usize,
        m: usize,
        sc: *mut f32,
    ) {
        // SAFETY: the caller vouches for the blocks and the room.
        unsafe {
            for i in 0..m {
                for b in 0..nb {
                    *sc.add(i * nb + b) = scale((*r.add((j0 + i) * bs + b)).d());
                }
            }
        }
    }

    /// 32 values of a q8_0 block as four vectors (`d · q`).
    ///
    /// # Safety
    /// `b` points to a block.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn q8_32(b: *const BlockQ8_0) -> [__m256; 4] {
        // SAFETY: the caller's block; 32 bytes of values.
        unsafe {
            let d = _mm256_set1_ps(scale((*b).d));
            let q = (*b).qs.as_ptr();
            let mut r = [_mm256_setzero_ps(); 4];
            for (k, v) in r.iter_mut().enumerate() {
                let v8 = _mm_loadl_epi64(q.add(8 * k) as *const __m128i);
                *v = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v8)), d);
            }
            r
        }
    }

    /// The 16 values of a q4_0 block's low (`hi == false`: values 0..16)
    /// or high nibbles (16..32) as signed bytes `q − 8`.
    ///
    /// # Safety
    /// `b` points to a block.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn q4_nibbles(b: *const BlockQ4_0) -> (__m128i, __m128i) {
        // SAFETY: the caller's block; 16 bytes of nibbles.
        unsafe {
            let raw = _mm_loadu_si128((*b).qs.as_ptr() as *const __m128i);
            let m = _mm_set1_epi8(0x0F);
            let eight = _mm_set1_epi8(8);
            (
                _mm_sub_epi8(_mm_and_si128(raw, m), eight),
                _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(raw, 4), m), eight),
            )
        }
    }

    /// 32 values of a q4_0 block as four vectors (`d · (q − 8)`).
    ///
    /// # Safety
    /// `b` points to a block.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn q4_32(b: *const BlockQ4_0) -> [__m256; 4] {
        // SAFETY: the caller's block.
        unsafe {
            let d = _mm256_set1_ps(scale((*b).d));
            let (lo, hi) = q4_nibbles(b);
            let w = |x: __m128i| _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(x)), d);
            [
                w(lo),
                w(_mm_srli_si128(lo, 8)),
                w(hi),
                w(_mm_srli_si128(hi, 8)),
            ]
        }
    }

    /// Eight values of a q4_0 block, `k`-th group of 8 (`k < 4`), times `d`.
    ///
    /// # Safety
    /// `b` points to a block.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn q4_8(b: *const BlockQ4_0, k: usize, d: __m256) -> __m256 {
        // SAFETY: the caller's block; bytes 8·(k % 2) .. + 8 of its 16.
        unsafe {
            let raw = _mm_loadl_epi64((*b).qs.as_ptr().add(8 * (k % 2)) as *const __m128i);
            let raw = if k >= 2 { _mm_srli_epi16(raw, 4) } else { raw };
            let q = _mm_sub_epi8(_mm_and_si128(raw, _mm_set1_epi8(0x0F)), _mm_set1_epi8(8));
            _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), d)
        }
    }

    /// Eight 16-bit values (`__m128i`) as f32: f16 (F16C) or, where `bf`,
    /// bf16 (the bits shifted into the high half). A macro, so the kernels'
    /// loops keep it inline.
    macro_rules! widen16 {
        ($h:expr, $bf:expr) => {
            if $bf {
                _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32($h), 16))
            } else {
                _mm256_cvtph_ps($h)
            }
        };
    }

    /// Horizontal sum as [`crate::simd`]'s score kernel takes it.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn hsum(a: __m256) -> f32 {
        let hi = _mm256_extractf128_ps(a, 1);
        let s4 = _mm_add_ps(hi, _mm256_castps256_ps128(a));
        let s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
        let s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
        _mm_cvtss_f32(s1)
    }

    /// Scores of eight heads (`q`: `[8, hd]`) against `n` rows: each row
    /// read once, 32 values at a time converted in registers; each head's
    /// accumulator takes the values in order (as the f32 kernel), then the
    /// same horizontal sum.
    macro_rules! scores8_body {
        ($q:expr, $hd:expr, $groups:expr, $n:expr, $out:expr, $ostride:expr, $ahead:expr, $bytes:expr, $load32:expr) => {{
            let (pq, po) = ($q.as_ptr(), $out.as_mut_ptr());
            // Bytes of the row `PREFETCH` ahead to prefetch per step of 32
            // values (whole lines), so the prefetches are spread over the
            // row instead of queued at its start.
            let steps = $groups * $hd / 32;
            let per = ($bytes as usize).div_ceil(64).div_ceil(steps) * 64;
            for j in 0..$n {
                let a = (j + PREFETCH < $n).then(|| $ahead(j).cast::<i8>());
                for k in 0..$groups {
                    let mut acc = [_mm256_setzero_ps(); 8];
                    let mut c = 0;
                    while c < $hd {
                        if let Some(a) = a {
                            let step = (k * $hd + c) / 32;
                            prefetch(a, step * per, ((step + 1) * per).min($bytes));
                        }
                        let k4: [__m256; 4] = $load32(j, k * $hd + c);
                        for (h, a) in acc.iter_mut().enumerate() {
                            let qh = pq.add((k * 8 + h) * $hd + c);
                            *a = _mm256_fmadd_ps(_mm256_loadu_ps(qh), k4[0], *a);
                            *a = _mm256_fmadd_ps(_mm256_loadu_ps(qh.add(8)), k4[1], *a);
                            *a = _mm256_fmadd_ps(_mm256_loadu_ps(qh.add(16)), k4[2], *a);
                            *a = _mm256_fmadd_ps(_mm256_loadu_ps(qh.add(24)), k4[3], *a);
                        }
                        c += 32;
                    }
                    for (h, a) in acc.iter().enumerate() {
                        *po.add((k * 8 + h) * $ostride + j) = hsum(*a);
                    }
                }
            }
        }};
    }

    /// `groups` groups of eight heads, group `k` reading values `k · hd ..`
    /// of each row: a row's groups are read one after the other, so the
    /// rows stream in address order.
    ///
    /// # Safety
    /// AVX2, FMA and F16C; `q` holds `groups` × 8 × `hd` values (`hd` a
    /// multiple of 32), rows `0..n` (values `base + j · stride .. + groups
    /// · hd`, `base` and `stride` multiples of 32) lie in `src`, `out` holds
    /// rows `0..8 · groups` of `n` at `ostride`.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn scores8(
        q: &[f32],
        hd: usize,
        groups: usize,
        src: KvRows<'_>,
        base: usize,
        stride: usize,
        n: usize,
        out: &mut [f32],
        ostride: usize,
    ) {
        // SAFETY: the caller's contract is the callee's; a head size of 256
        // (the model's) gets its own copy with the size a constant.
        unsafe {
            if hd == 256 {
                scores8_hd::<256>(q, hd, groups, src, base, stride, n, out, ostride)
            } else {
                scores8_hd::<0>(q, hd, groups, src, base, stride, n, out, ostride)
            }
        }
    }

    /// [`scores8`] with the head size `HD` when it is not 0.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn scores8_hd<const HD: usize>(
        q: &[f32],
        hd: usize,
        groups: usize,
        src: KvRows<'_>,
        base: usize,
        stride: usize,
        n: usize,
        out: &mut [f32],
        ostride: usize,
    ) {
        let hd = if HD != 0 { HD } else { hd };
        // SAFETY (whole body): every row read is one the caller vouched
        // for; the prefetch addresses are never dereferenced.
        unsafe {
            match src {
                KvRows::F32(x) => {
                    let p = x.as_ptr().add(base);
                    let row = |j: usize| p.add(j * stride);
                    let ahead = |j: usize| p.wrapping_add((j + PREFETCH) * stride);
                    let load = |j: usize, c: usize| {
                        let r = row(j).add(c);
                        [
                            _mm256_loadu_ps(r),
                            _mm256_loadu_ps(r.add(8)),
                            _mm256_loadu_ps(r.add(16)),
                            _mm256_loadu_ps(r.add(24)),
                        ]
                    };
                    scores8_body!(q, hd, groups, n, out, ostride, ahead, groups * hd * 4, load)
                }
                KvRows::F16(x) | KvRows::Bf16(x) => {
                    let bf = matches!(src, KvRows::Bf16(_));
                    let p = x.as_ptr().add(base);
                    let row = |j: usize| p.add(j * stride);
                    let ahead = |j: usize| p.wrapping_add((j + PREFETCH) * stride);
                    let load = |j: usize, c: usize| {
                        let r = row(j).add(c);
                        let mut v = [_mm256_setzero_ps(); 4];
                        for (k, vk) in v.iter_mut().enumerate() {
                            *vk = widen16!(_mm_loadu_si128(r.add(8 * k) as *const __m128i), bf);
                        }
                        v
                    };
                    scores8_body!(q, hd, groups, n, out, ostride, ahead, groups * hd * 2, load)
                }
                KvRows::Q8_0(x) => {
                    let p = x.as_ptr().add(base / 32);
                    let bs = stride / 32;
                    let row = |j: usize| p.add(j * bs);
                    let ahead = |j: usize| p.wrapping_add((j + PREFETCH) * bs);
                    let load = |j: usize, c: usize| q8_32(row(j).add(c / 32));
                    scores8_body!(
                        q,
                        hd,
                        groups,
                        n,
                        out,
                        ostride,
                        ahead,
                        groups * hd / 32 * 34,
                        load
                    )
                }
                KvRows::Q4_0(x) => {
                    let p = x.as_ptr().add(base / 32);
                    let bs = stride / 32;
                    let row = |j: usize| p.add(j * bs);
                    let ahead = |j: usize| p.wrapping_add((j + PREFETCH) * bs);
                    let load = |j: usize, c: usize| q4_32(row(j).add(c / 32));
                    scores8_body!(
                        q,
                        hd,
                        groups,
                        n,
                        out,
                        ostride,
                        ahead,
                        groups * hd / 32 * 18,
                        load
                    )
                }
            }
        }
    }

    /// One tile of [`pv8_body_wide`]: heads `hh .. hh + H` of group `k`
    /// × `8 · W` values from `e`, over rows `j0 .. j0 + m`; the tile's
    /// accumulators stay in registers while the rows stream past, each
    /// output taking `fma(p, v, o)` row by row in order.
    macro_rules! pv_tile {
        ($H:literal, $W:literal, $po:expr, $pp:expr, $hd:expr, $pstride:expr, $k:expr, $hh:expr, $e:expr, $j0:expr, $m:expr, $load8:expr) => {{
            let d = $k * $hd + $e;
            let oh = ($k * 8 + $hh) * $hd + $e;
            let ph = ($k * 8 + $hh) * $pstride;
            let mut acc = [[_mm256_setzero_ps(); $W]; $H];
            for (h, a) in acc.iter_mut().enumerate() {
                for (i, x) in a.iter_mut().enumerate() {
                    *x = _mm256_loadu_ps($po.add(oh + h * $hd + 8 * i));
                }
            }
            for j in $j0..$j0 + $m {
                let mut v = [_mm256_setzero_ps(); $W];
                for (i, x) in v.iter_mut().enumerate() {
                    *x = $load8(j, d + 8 * i);
                }
                for (h, a) in acc.iter_mut().enumerate() {
                    let s = _mm256_broadcast_ss(&*$pp.add(ph + h * $pstride + j));
                    for (x, &vi) in a.iter_mut().zip(&v) {
                        *x = _mm256_fmadd_ps(s, vi, *x);
                    }
                }
            }
            for (h, a) in acc.iter().enumerate() {
                for (i, x) in a.iter().enumerate() {
                    _mm256_storeu_ps($po.add(oh + h * $hd + 8 * i), *x);
                }
            }
        }};
    }

    /// [`pv8_body`] for rows whose values load in one instruction (f32,
    /// f16, bf16): per group, heads 0–5 × 16 values (12 accumulators) and
    /// heads 6–7 × 32 values (8), so the products have more independent
    /// chains than the multiply's latency × throughput (8) and a broadcast
    /// weight feeds two or four products. Each output still takes
    /// `fma(p, v, o)` row by row in order: the same bits.
    macro_rules! pv8_body_wide {
        ($o:expr, $hd:expr, $groups:expr, $p:expr, $pstride:expr, $n:expr, $ahead:expr, $bytes:expr, $load8:expr) => {{
            let (po, pp) = ($o.as_mut_ptr(), $p.as_ptr());
            // Tiles of a run: per group, hd / 16 of the first kind and hd /
            // 32 of the second; rows of the next run are prefetched `per`
            // a tile.
            let steps = $groups * ($hd / 16 + $hd / 32);
            let per = SUB.div_ceil(steps);
            let mut j0 = 0;
            while j0 < $n {
                let m = SUB.min($n - j0);
                let next = SUB.min($n - j0 - m);
                let mut t = 0;
                let ahead = |t: &mut usize| {
                    for j in j0 + *t * per..(j0 + (*t + 1) * per).min(j0 + next) {
                        prefetch($ahead(j).cast::<i8>(), 0, $bytes);
                    }
                    *t += 1;
                };
                for k in 0..$groups {
                    let mut e = 0;
                    while e < $hd {
                        ahead(&mut t);
                        pv_tile!(6, 2, po, pp, $hd, $pstride, k, 0, e, j0, m, $load8);
                        e += 16;
                    }
                    let mut e = 0;
                    while e < $hd {
                        ahead(&mut t);
                        pv_tile!(2, 4, po, pp, $hd, $pstride, k, 6, e, j0, m, $load8);
                        e += 32;
                    }
                }
                j0 += m;
            }
        }};
    }

    /// `o[h] += Σ_j p[h][j] · v_j` for eight heads: for each run of SUB
    /// rows and each 8 values of the row, the eight heads' accumulators
    /// stay in registers while the rows stream past; each output takes
    /// `fma(p, v, o)` row by row in order (as the f32 kernel).
    macro_rules! pv8_body {
        ($o:expr, $hd:expr, $groups:expr, $p:expr, $pstride:expr, $n:expr, $ahead:expr, $bytes:expr, $prep:expr, $load8:expr) => {{
            let (po, pp) = ($o.as_mut_ptr(), $p.as_ptr());
            let width = $groups * $hd;
            // Rows of the next run to prefetch per step of 8 values, so the
            // prefetches are spread over the run instead of queued at its
            // start.
            let per = SUB.div_ceil(width / 8);
            let mut j0 = 0;
            while j0 < $n {
                let m = SUB.min($n - j0);
                let next = (SUB).min($n - j0 - m);
                $prep(j0, m);
                let mut d = 0;
                while d < width {
                    let t = d / 8 * per;
                    for j in j0 + t..(j0 + t + per).min(j0 + next) {
                        prefetch($ahead(j).cast::<i8>(), 0, $bytes);
                    }
                    // Group `d / hd`: heads `8 · (d / hd) ..`.
                    let (oh, ph) = (d / $hd * 8 * $hd + d % $hd, d / $hd * 8 * $pstride);
                    let mut acc = [_mm256_setzero_ps(); 8];
                    for (h, a) in acc.iter_mut().enumerate() {
                        *a = _mm256_loadu_ps(po.add(oh + h * $hd));
                    }
                    for j in j0..j0 + m {
                        let v: __m256 = $load8(j, d, j - j0);
                        for (h, a) in acc.iter_mut().enumerate() {
                            let w = _mm256_broadcast_ss(&*pp.add(ph + h * $pstride + j));
                            *a = _mm256_fmadd_ps(w, v, *a);
                        }
                    }
                    for (h, a) in acc.iter().enumerate() {
                        _mm256_storeu_ps(po.add(oh + h * $hd), *a);
                    }
                    d += 8;
                }
                j0 += m;
            }
        }};
    }

    /// `groups` groups of eight heads as in [`scores8`].
    ///
    /// # Safety
    /// AVX2, FMA and F16C; `o` holds `groups` × 8 × `hd` values (`hd` a
    /// multiple of 32), `p` rows `0..8 · groups` of `n` weights at
    /// `pstride`, rows `0..n` of `src` as in [`scores8`].
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn pv8(
        o: &mut [f32],
        hd: usize,
        groups: usize,
        p: &[f32],
        pstride: usize,
        src: KvRows<'_>,
        base: usize,
        stride: usize,
        n: usize,
    ) {
        // SAFETY: the caller's contract is the callee's; a head size of 256
        // (the model's) gets its own copy with the size a constant.
        unsafe {
            if hd == 256 {
                pv8_hd::<256>(o, hd, groups, p, pstride, src, base, stride, n)
            } else {
                pv8_hd::<0>(o, hd, groups, p, pstride, src, base, stride, n)
            }
        }
    }

    /// [`pv8`] with the head size `HD` when it is not 0.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn pv8_hd<const HD: usize>(
        o: &mut [f32],
        hd: usize,
        groups: usize,
        p: &[f32],
        pstride: usize,
        src: KvRows<'_>,
        base: usize,
        stride: usize,
        n: usize,
    ) {
        let hd = if HD != 0 { HD } else { hd };
        // Block scales of the current run of rows: [SUB][groups · hd / 32].
        let nb = groups * hd / 32;
        let mut sc = vec![0f32; SUB * nb];
        // SAFETY (whole body): every row read is one the caller vouched
        // for; the prefetch addresses are never dereferenced.
        unsafe {
            match src {
                KvRows::F32(x) => {
                    let r = x.as_ptr().add(base);
                    let ahead = |j: usize| r.wrapping_add((j + SUB) * stride);
                    let load = |j: usize, d: usize| _mm256_loadu_ps(r.add(j * stride + d));
                    pv8_body_wide!(o, hd, groups, p, pstride, n, ahead, groups * hd * 4, load)
                }
                KvRows::F16(x) | KvRows::Bf16(x) => {
                    let bf = matches!(src, KvRows::Bf16(_));
                    let r = x.as_ptr().add(base);
                    let ahead = |j: usize| r.wrapping_add((j + SUB) * stride);
                    let load = |j: usize, d: usize| {
                        widen16!(_mm_loadu_si128(r.add(j * stride + d) as *const __m128i), bf)
                    };
                    pv8_body_wide!(o, hd, groups, p, pstride, n, ahead, groups * hd * 2, load)
                }
                KvRows::Q8_0(x) => {
                    let r = x.as_ptr().add(base / 32);
                    let bs = stride / 32;
                    let ahead = |j: usize| r.wrapping_add((j + SUB) * bs);
                    let scp = sc.as_mut_ptr();
                    let prep = |j0: usize, m: usize| gather_scales(r, bs, nb, j0, m, scp);
                    let load = |j: usize, d: usize, i: usize| {
                        let blk = r.add(j * bs + d / 32);
                        let q = (*blk).qs.as_ptr().add(d % 32);
                        let v8 = _mm_loadl_epi64(q as *const __m128i);
                        let s = _mm256_broadcast_ss(&*scp.add(i * nb + d / 32));
                        _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v8)), s)
                    };
                    pv8_body!(o, hd, groups, p, pstride, n, ahead, nb * 34, prep, load)
                }
                KvRows::Q4_0(x) => {
                    let r = x.as_ptr().add(base / 32);
                    let bs = stride / 32;
                    let ahead = |j: usize| r.wrapping_add((j + SUB) * bs);
                    let scp = sc.as_mut_ptr();
                    let prep = |j0: usize, m: usize| gather_scales(r, bs, nb, j0, m, scp);
                    let load = |j: usize, d: usize, i: usize| {
                        let blk = r.add(j * bs + d / 32);
                        let s = _mm256_broadcast_ss(&*scp.add(i * nb + d / 32));
                        q4_8(blk, (d % 32) / 8, s)
                    };
                    pv8_body!(o, hd, groups, p, pstride, n, ahead, nb * 18, prep, load)
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kvtype::{KvData, KvType};

    use crate::test_util::centred as rand;

    fn stored(ty: KvType, x: &[f32]) -> KvData {
        let mut d = KvData::with_capacity(ty, x.len());
        d.push(x);
        d
    }

    /// The run-time score and value kernels against their scalar twins on
    /// random rows of every type: 16 heads (two groups of 8 through the
    /// fused kernel), 2 KV heads interleaved, row counts that are not
    /// multiples of the runs; and shapes the fused kernels do not take (a
    /// group of 3, head size 16) through the general path.
    #[test]
    fn fused_kernels_match_scalar() {
        for (g, hd, nkv) in [(16, 64, 2), (8, 256, 2), (3, 32, 2), (8, 16, 2)] {
            let stride = nkv * hd;
            let n = 75;
            let x: Vec<f32> = rand(n * stride, 3).iter().map(|v| v * 4.0).collect();
            let q = rand(g * hd, 5);
            let p: Vec<f32> = rand(g * 80, 9).iter().map(|v| v + 0.5).collect();
            for ty in KvType::ALL {
                if !ty.fits_row(stride) {
                    continue;
                }
                let d = stored(ty, &x);
                for kvh in 0..nkv {
                    let base = kvh * hd;
                    let (mut a, mut b) = (vec![0f32; g * 80], vec![0f32; g * 80]);
                    let mut buf = Vec::new();
                    scores_kv(&q, hd, 1, d.rows(), base, stride, n, &mut a, 80, &mut buf);
                    scores_kv_scalar(&q, hd, 1, d.rows(), base, stride, n, &mut b, 80);
                    for (i, (u, w)) in a.iter().zip(&b).enumerate() {
                        assert!(
                            (u - w).abs() <= 1e-5 * (1.0 + w.abs()) * hd as f32,
                            "{ty} g{g} hd{hd}: score {i}: {u} vs {w}"
                        );
                    }
                    let o0 = rand(g * hd, 13);
                    let (mut oa, mut ob) = (o0.clone(), o0.clone());
                    pv_kv(&mut oa, hd, 1, &p, 80, d.rows(), base, stride, n, &mut buf);
                    pv_kv_scalar(&mut ob, hd, 1, &p, 80, d.rows(), base, stride, n);
                    for (i, (u, w)) in oa.iter().zip(&ob).enumerate() {
                        assert!(
                            (u - w).abs() <= 1e-5 * (1.0 + w.abs()) * n as f32,
                            "{ty} g{g} hd{hd}: value {i}: {u} vs {w}"
                        );
                    }
                }
            }
        }
    }

    /// Both KV heads' groups in one call (rows read whole): against the
    /// scalar twin, and bit for bit the per-group calls, for every type,
    /// fused shapes and general ones.
    #[test]
    fn grouped_calls_are_the_per_group_calls() {
        for (g, hd, nkv) in [(8, 64, 2), (8, 256, 2), (8, 32, 4), (3, 32, 2), (16, 64, 2)] {
            let stride = nkv * hd;
            let n = 75;
            let x: Vec<f32> = rand(n * stride, 41).iter().map(|v| v * 4.0).collect();
            let q = rand(nkv * g * hd, 42);
            let p: Vec<f32> = rand(nkv * g * 80, 43).iter().map(|v| v + 0.5).collect();
            for ty in KvType::ALL {
                if !ty.fits_row(stride) {
                    continue;
                }
                let d = stored(ty, &x);
                let mut buf = Vec::new();
                let (mut a, mut b, mut c) = (
                    vec![0f32; nkv * g * 80],
                    vec![0f32; nkv * g * 80],
                    vec![0f32; nkv * g * 80],
                );
                scores_kv(&q, hd, nkv, d.rows(), 0, stride, n, &mut a, 80, &mut buf);
                scores_kv_scalar(&q, hd, nkv, d.rows(), 0, stride, n, &mut b, 80);
                for k in 0..nkv {
                    let qk = &q[k * g * hd..(k + 1) * g * hd];
                    let ck = &mut c[k * g * 80..];
                    scores_kv(qk, hd, 1, d.rows(), k * hd, stride, n, ck, 80, &mut buf);
                }
                assert_eq!(a, c, "{ty} g{g} hd{hd} nkv{nkv}: grouped scores");
                for (i, (u, w)) in a.iter().zip(&b).enumerate() {
                    assert!(
                        (u - w).abs() <= 1e-5 * (1.0 + w.abs()) * hd as f32,
                        "{ty} g{g} hd{hd} nkv{nkv}: score {i}: {u} vs {w}"
                    );
                }
                let o0 = rand(nkv * g * hd, 44);
                let (mut oa, mut ob, mut oc) = (o0.clone(), o0.clone(), o0.clone());
                pv_kv(&mut oa, hd, nkv, &p, 80, d.rows(), 0, stride, n, &mut buf);
                pv_kv_scalar(&mut ob, hd, nkv, &p, 80, d.rows(), 0, stride, n);
                for k in 0..nkv {
                    let ok = &mut oc[k * g * hd..(k + 1) * g * hd];
                    let pk = &p[k * g * 80..];
                    pv_kv(ok, hd, 1, pk, 80, d.rows(), k * hd, stride, n, &mut buf);
                }
                assert_eq!(oa, oc, "{ty} g{g} hd{hd} nkv{nkv}: grouped values");
                for (i, (u, w)) in oa.iter().zip(&ob).enumerate() {
                    assert!(
                        (u - w).abs() <= 1e-5 * (1.0 + w.abs()) * n as f32,
                        "{ty} g{g} hd{hd} nkv{nkv}: value {i}: {u} vs {w}"
                    );
                }
            }
        }
    }

    /// On f32 rows the fused kernels are the f32 kernels bit for bit (the
    /// same operations per output, in the same order), so an f32 cache
    /// decodes as it did before they existed.
    #[test]
    fn fused_f32_is_the_f32_kernels_bit_for_bit() {
        let (g, hd, stride, n) = (8, 64, 128, 75);
        let x = rand(n * stride, 21);
        let q = rand(g * hd, 22);
        let p = rand(g * 80, 23);
        let (mut a, mut b) = (vec![0f32; g * 80], vec![0f32; g * 80]);
        scores_kv(
            &q,
            hd,
            1,
            KvRows::F32(&x),
            64,
            stride,
            n,
            &mut a,
            80,
            &mut Vec::new(),
        );
        scores_group(&q, hd, &x[64..], stride, n, &mut b, 80);
        assert_eq!(a, b);
        let o0 = rand(g * hd, 24);
        let (mut oa, mut ob) = (o0.clone(), o0);
        pv_kv(
            &mut oa,
            hd,
            1,
            &p,
            80,
            KvRows::F32(&x),
            64,
            stride,
            n,
            &mut Vec::new(),
        );
        for h in 0..g {
            let ph = &p[h * 80..h * 80 + n];
            axpy_rows(&mut ob[h * hd..(h + 1) * hd], ph, &x[64..], stride);
        }
        assert_eq!(oa, ob);
    }

    /// Softmax attention of one query head in f64 over `n` positions.
    fn naive(
        q: &[f32],
        k: &[f32],
        v: &[f32],
        stride: usize,
        off: usize,
        n: usize,
        scale: f64,
    ) -> Vec<f64> {
        let hd = q.len();
        let sc: Vec<f64> = (0..n)
            .map(|j| {
                (0..hd)
                    .map(|d| q[d] as f64 * k[j * stride + off + d] as f64)
                    .sum::<f64>()
                    * scale
            })
            .collect();
        let m = sc.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let w: Vec<f64> = sc.iter().map(|s| (s - m).exp()).collect();
        let z: f64 = w.iter().sum();
        (0..hd)
            .map(|d| {
                (0..n)
                    .map(|j| w[j] * v[j * stride + off + d] as f64)
                    .sum::<f64>()
                    / z
            })
            .collect()
    }

    /// Decode over several chunks of positions (flash-decoding): against
    /// the f64 softmax, the same bits whatever the thread count, and every
    /// stored type equal bit for bit to its values widened to f32.
    #[test]
    fn split_decode_matches_softmax_and_ignores_threads() {
        let (nh, nkv, hd) = (16, 2, 32);
        let row = nkv * hd;
        let pos0 = 2 * DECODE_SPLIT + 700;
        let n = pos0 + 1;
        let q = rand(nh * hd, 31);
        let k: Vec<f32> = rand(n * row, 32).iter().map(|x| 6.0 * x).collect();
        let v = rand(n * row, 33);
        let s = AttnShape {
            n_tok: 1,
            pos0,
            n_head: nh,
            n_head_kv: nkv,
            head_dim: hd,
            scale: 0.3,
        };
        let run = |threads: usize, kd: &[KvData], vd: &[KvData]| -> Vec<f32> {
            let kr: Vec<KvRows> = kd.iter().map(|b| b.rows()).collect();
            let vr: Vec<KvRows> = vd.iter().map(|b| b.rows()).collect();
            let kv = KvBlocks {
                k: &kr,
                v: &vr,
                block_tokens: 256,
            };
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .expect("pool");
            let mut out = vec![0f32; nh * hd];
            pool.install(|| attn_decode(&s, &q, &kv, &mut out));
            out
        };
        let blocks = |x: &[f32], ty: KvType| -> Vec<KvData> {
            x.chunks(256 * row).map(|c| stored(ty, c)).collect()
        };
        let widen = |d: &[KvData]| -> Vec<f32> {
            d.iter()
                .flat_map(|b| {
                    let mut o = vec![0f32; b.len()];
                    decode(b.rows(), 0, &mut o);
                    o
                })
                .collect()
        };
        let f32_out = run(2, &blocks(&k, KvType::F32), &blocks(&v, KvType::F32));
        for h in 0..nh {
            let kvh = h / (nh / nkv);
            let want = naive(&q[h * hd..(h + 1) * hd], &k, &v, row, kvh * hd, n, 0.3);
            for d in 0..hd {
                let got = f32_out[h * hd + d] as f64;
                assert!(
                    (got - want[d]).abs() < 1e-5,
                    "h{h} d{d}: {got} vs {}",
                    want[d]
                );
            }
        }
        for ty in KvType::ALL {
            let (kd, vd) = (blocks(&k, ty), blocks(&v, ty));
            let one = run(1, &kd, &vd);
            assert_eq!(one, run(3, &kd, &vd), "{ty}: thread count");
            let (wk, wv) = (widen(&kd), widen(&vd));
            let wide = run(2, &blocks(&wk, KvType::F32), &blocks(&wv, KvType::F32));
            assert_eq!(one, wide, "{ty}: typed vs widened");
        }
    }
}
