//! Matrix-matrix product of the integer kernels (prefill).
//!
//! A chunk of weight rows is unpacked once into a [`Tile`] and multiplied
//! with every token of a batch by [`gemm_tile`]. The product of one row and
//! one token is the sum of [`super::dot_unpacked_scalar`]:
//!
//! `Σ_b dx_b · (Σ_j s_j · Σ_{i∈j} w_i q_i − Σ_j m_j · sums_j)`.
//!
//! # Layout
//!
//! The tile interleaves its rows by groups of four: one 64-byte *line*
//! holds eight consecutive weights of each of the four rows, so a 512-bit
//! vector of weights meets a 128-bit group of eight activations broadcast
//! four times, and one `dpwssd` accumulates four rows × one token (four
//! 32-bit lanes per row). The scales are stored already spread over those
//! lanes. A row group of one super-block is 32 lines (2 KiB).
//!
//! # Drivers
//!
//! The SIMD drivers are register-blocked: a micro-tile is two vectors of
//! rows (8 rows at 512 bits, 4 at 256) × up to four tokens, so each weight
//! vector loaded serves every token of the micro-tile and each activation
//! broadcast every row; a batch is cut into micro-tiles of near-equal
//! widths (5 tokens as 3 + 2). At 256 bits the eight integer accumulators,
//! two weight vectors and one broadcast fit the sixteen registers; the f32
//! sums of the micro-tile live in memory between blocks (four tokens ran
//! 5 % faster than three on Zen 3, whose two `vpmaddwd` pipes the extra
//! chains keep fed). Per 256-value block:
//!
//! * types with one scale per block (`uniform`) accumulate `w·q` in 32-bit
//!   integers over the whole block when the tile's weights are small
//!   (`|w| ≤ 2048`: a lane sees 64 products, `64 · 2048 · 16383 =
//!   2 147 352 576 < 2^31`; Q4_K, Q5_K, IQ2_XS, IQ1_M always are), else over
//!   each half (32 products of `|w| ≤ 4096`, the same bound; Q6_K), then
//!   convert and fused-multiply-add with `s·dx` into an f32 accumulator;
//! * other types (Q8_0) convert per 32 values, multiply-add with `s` and
//!   scale by `dx` once per block;
//! * the offsets subtract `m_j · (sums_j · dx)` from the same accumulator;
//!
//! and the accumulators are reduced horizontally once per run of [`KC`]
//! blocks. Edge micro-tiles (one row group, fewer tokens) split their
//! integer accumulators so at least four independent `dpwssd` chains are in
//! flight. The loops run over [`KC`] blocks, then [`TC`] tokens (whose
//! activations then stay in the second-level cache for every row), then
//! pairs of vector rows, then micro-tiles of tokens; the first pair of
//! vector rows prefetches the activations of the next micro-tile, which
//! keeps large batches (several MiB of activations) near full speed. The
//! drivers differ from the scalar reference only in the order of f32
//! additions.

use super::{level, Q16Act, Q16Kernels, Q16Level, Unpacked, QK};
use crate::GgmlType;

/// Rows of a row group (the rows interleaved in one line).
pub const GROUP: usize = 4;
/// Blocks of 256 per pass over the tokens: a micro-tile's weights for the
/// pass (`8 · KC · 512` bytes) stay near the first-level cache while the
/// tokens stream past, and the horizontal sums are amortized over `KC`
/// blocks (8 and 16 measure the same on Zen 4; 4 is ~5 % slower).
pub const KC: usize = 8;

/// Tokens per pass over the rows: the activations of a pass (`TC · KC ·
/// 512` bytes) stay in the second-level cache while the rows go by.
pub const TC: usize = 64;

/// Largest `|w|` for which a 32-bit lane may sum the 64 products of a
/// whole block: `64 · 2048 · 16383 = 2 147 352 576 < 2^31`.
const LONG_WMAX: u16 = 2048;

/// Weights of one step: eight consecutive values of each row of a group.
#[repr(C, align(64))]
#[derive(Clone, Copy, Default)]
struct Line([i16; 32]);

/// Sixteen f32, lane `4·r + l` for row `r` of a group.
#[repr(C, align(64))]
#[derive(Clone, Copy, Default)]
struct Lanes([f32; 16]);

/// Weight rows unpacked once, reused for every token.
///
/// Rows are kept in groups of [`GROUP`] (the last one padded with zeros);
/// per group and super-block:
///
/// * 32 lines of weights: line `k` holds values `8k..8k+8` of the four rows;
/// * the scales as `Lanes` (`s_{r,j}` in lanes `4r..4r+4`): one for
///   uniform types, one per 32 values (`j = 0..8`) otherwise;
/// * with offsets, two `Lanes`: `m_{r, 4h + l}` in lane `4r + l` of the
///   `h`-th.
///
/// The buffers only grow: once warmed up, [`Tile::unpack`] allocates
/// nothing.
#[derive(Default)]
pub struct Tile {
    w: Vec<Line>,
    s: Vec<Lanes>,
    m: Vec<Lanes>,
    /// One block of each row of a group, as unpacked.
    u: [Unpacked; GROUP],
    rows: usize,
    nb: usize,
    /// Scale vectors per group and block (1 or 8).
    ns: usize,
    /// Largest `|w|` of the tile.
    wmax: u16,
    has_min: bool,
    ty: Option<GgmlType>,
}

fn grow<T: Default + Clone>(v: &mut Vec<T>, n: usize) {
    if v.len() < n {
        v.resize(n, T::default());
    }
}

impl Tile {
    /// An empty tile (no memory until the first [`Tile::unpack`]).
    pub fn new() -> Tile {
        Tile::default()
    }

    /// Rows unpacked by the last [`Tile::unpack`].
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Blocks of 256 values per row.
    pub fn blocks_per_row(&self) -> usize {
        self.nb
    }

    /// Unpack `rows` rows of `row_bytes` bytes each (a whole number of
    /// super-blocks of `k`'s type) starting at `data`.
    pub fn unpack(&mut self, k: &Q16Kernels, data: &[u8], row_bytes: usize, rows: usize) {
        assert!(
            row_bytes.is_multiple_of(k.bytes),
            "q16 tile: row of {row_bytes} bytes for {}-byte blocks",
            k.bytes
        );
        assert!(
            data.len() >= rows * row_bytes,
            "q16 tile: {} bytes for {rows} rows",
            data.len()
        );
        let nb = row_bytes / k.bytes;
        let ns = if k.uniform { 1 } else { 8 };
        let groups = rows.div_ceil(GROUP);
        grow(&mut self.w, groups * nb * 32);
        grow(&mut self.s, groups * nb * ns);
        if k.has_min {
            grow(&mut self.m, groups * nb * 2);
        }
        (self.rows, self.nb, self.ns, self.has_min, self.ty) =
            (rows, nb, ns, k.has_min, Some(k.ty));
        // The bound is this tile's own: a tile reused for other rows must
        // not inherit a previous one's (the product's rounding would then
        // depend on what the worker did before).
        self.wmax = 0;
        for g in 0..groups {
            for b in 0..nb {
                // The block of the group's four rows (zeros past the last).
                for (rr, u) in self.u.iter_mut().enumerate() {
                    let r = g * GROUP + rr;
                    if r < rows {
                        (k.unpack)(&data[r * row_bytes + b * k.bytes..][..k.bytes], u);
                    } else {
                        *u = Unpacked::default();
                    }
                }
                let gb = g * nb + b;
                let u = &self.u;
                for (i, line) in self.w[gb * 32..(gb + 1) * 32].iter_mut().enumerate() {
                    for (dst, ur) in line.0.chunks_exact_mut(8).zip(u) {
                        dst.copy_from_slice(&ur.w[8 * i..8 * i + 8]);
                    }
                }
                // Signed min and max vectorize with SSE2 alone (|w| does not).
                for ur in u {
                    let (lo, hi) =
                        ur.w.iter()
                            .fold((0i16, 0i16), |(lo, hi), &w| (lo.min(w), hi.max(w)));
                    self.wmax = self.wmax.max(lo.unsigned_abs()).max(hi.unsigned_abs());
                }
                for (j, sv) in self.s[gb * ns..(gb + 1) * ns].iter_mut().enumerate() {
                    for (dst, ur) in sv.0.chunks_exact_mut(4).zip(u) {
                        dst.fill(ur.s[j]);
                    }
                }
                if k.has_min {
                    for (h, mv) in self.m[gb * 2..gb * 2 + 2].iter_mut().enumerate() {
                        for (dst, ur) in mv.0.chunks_exact_mut(4).zip(u) {
                            dst.copy_from_slice(&ur.m[4 * h..4 * h + 4]);
                        }
                    }
                }
            }
        }
    }

    /// Weight `i` (`< 256`) of block `b` of row `r`.
    pub fn weight(&self, r: usize, b: usize, i: usize) -> i16 {
        let gb = (r / GROUP) * self.nb + b;
        self.w[gb * 32 + i / 8].0[8 * (r % GROUP) + i % 8]
    }

    /// Scale `s_j` of block `b` of row `r`.
    pub fn scale(&self, r: usize, b: usize, j: usize) -> f32 {
        let gb = (r / GROUP) * self.nb + b;
        let j = if self.ns == 1 { 0 } else { j };
        self.s[gb * self.ns + j].0[4 * (r % GROUP)]
    }

    /// Offset `m_j` of block `b` of row `r` (zero without offsets).
    pub fn offset(&self, r: usize, b: usize, j: usize) -> f32 {
        if !self.has_min {
            return 0.0;
        }
        let gb = (r / GROUP) * self.nb + b;
        self.m[gb * 2 + j / 4].0[4 * (r % GROUP) + j % 4]
    }
}

/// Whether this CPU can run the drivers of `level`.
pub fn level_supported(level: Q16Level) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        let avx2 = has!("avx2") && has!("fma") && has!("f16c");
        let avx512 = avx2 && has!("avx512f") && has!("avx512bw") && has!("avx512vl");
        match level {
            Q16Level::Scalar => true,
            Q16Level::Avx2 => avx2,
            Q16Level::Avx512 => avx512,
            Q16Level::Avx512Vnni => avx512 && has!("avx512vnni"),
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        level == Q16Level::Scalar
    }
}

/// `out[r · out_stride + t] = dot(row r of tile, activation vector t)` for
/// every row of the tile and `t < n_tok`, where `x` holds `n_tok` vectors of
/// `n_in` values (`x.row(t, n_in)` is vector `t`). Uses the fastest driver
/// of this CPU ([`super::level`]).
pub fn gemm_tile(
    k: &Q16Kernels,
    tile: &Tile,
    x: &Q16Act,
    n_tok: usize,
    n_in: usize,
    out: &mut [f32],
    out_stride: usize,
) {
    gemm_tile_at(level(), k, tile, x, n_tok, n_in, out, out_stride)
}

/// [`gemm_tile`] with the driver of `level` (tests and benchmarks).
///
/// # Panics
/// When the CPU lacks `level` ([`level_supported`]) or the sizes disagree.
#[allow(clippy::too_many_arguments)]
pub fn gemm_tile_at(
    level: Q16Level,
    k: &Q16Kernels,
    tile: &Tile,
    x: &Q16Act,
    n_tok: usize,
    n_in: usize,
    out: &mut [f32],
    out_stride: usize,
) {
    check(k, tile, x, n_tok, n_in);
    check_out(tile, n_tok, out, out_stride);
    // SAFETY: `check_out` proved `out[r · out_stride + t]` in bounds for
    // every row and token; the slice is borrowed mutably for the call.
    unsafe { gemm_strided(level, k, tile, x, n_tok, out.as_mut_ptr(), out_stride, 1) }
}

/// [`gemm_tile`] writing `out[r · row_stride + t · tok_stride]`: with
/// `row_stride = 1, tok_stride = n_out` the tile's rows land in place in a
/// token-major `[n_tok][n_out]` output (no transposition afterwards), so
/// tasks owning different row ranges of one output can write it at once.
///
/// # Safety
/// For every row `r < tile.rows()` and token `t < n_tok`,
/// `out.add(r · row_stride + t · tok_stride)` is valid for reads and
/// writes, and no other thread touches those elements during the call.
///
/// # Panics
/// When the tile, kernels and activations disagree in size or type.
#[allow(clippy::too_many_arguments)]
pub unsafe fn gemm_tile_strided(
    k: &Q16Kernels,
    tile: &Tile,
    x: &Q16Act,
    n_tok: usize,
    n_in: usize,
    out: *mut f32,
    row_stride: usize,
    tok_stride: usize,
) {
    // SAFETY: the caller's promise about `out`, passed on.
    unsafe {
        gemm_tile_strided_at(
            level(),
            k,
            tile,
            x,
            n_tok,
            n_in,
            out,
            row_stride,
            tok_stride,
        )
    }
}

/// [`gemm_tile_strided`] with the driver of `level` (tests).
///
/// # Safety
/// As [`gemm_tile_strided`].
///
/// # Panics
/// As [`gemm_tile_at`].
#[allow(clippy::too_many_arguments)]
pub unsafe fn gemm_tile_strided_at(
    level: Q16Level,
    k: &Q16Kernels,
    tile: &Tile,
    x: &Q16Act,
    n_tok: usize,
    n_in: usize,
    out: *mut f32,
    row_stride: usize,
    tok_stride: usize,
) {
    check(k, tile, x, n_tok, n_in);
    // SAFETY: the caller's promise about `out`; `check` covered the rest.
    unsafe { gemm_strided(level, k, tile, x, n_tok, out, row_stride, tok_stride) }
}

/// The drivers behind every entry point (inputs already checked).
///
/// # Safety
/// `check` passed for the operands; `out` as [`gemm_tile_strided`] says.
#[allow(clippy::too_many_arguments)]
unsafe fn gemm_strided(
    level: Q16Level,
    k: &Q16Kernels,
    tile: &Tile,
    x: &Q16Act,
    n_tok: usize,
    out: *mut f32,
    row_stride: usize,
    tok_stride: usize,
) {
    if tile.rows == 0 || n_tok == 0 {
        return;
    }
    if tile.nb == 0 {
        // SAFETY: the caller's promise about `out`.
        return unsafe { zero(tile.rows, n_tok, out, row_stride, tok_stride) };
    }
    assert!(level_supported(level), "q16 gemm: CPU lacks {level:?}");
    #[cfg(target_arch = "x86_64")]
    let a = Args {
        w: tile.w.as_ptr(),
        s: tile.s.as_ptr(),
        m: tile.m.as_ptr(),
        rows: tile.rows,
        nb: tile.nb,
        run: if tile.wmax <= LONG_WMAX { 32 } else { 16 },
        q: x.q.as_ptr(),
        d: x.d.as_ptr(),
        sdx: x.sdx.as_ptr(),
        n_tok,
        out,
        row_stride,
        tok_stride,
    };
    match level {
        // SAFETY: the caller's promise about `out`.
        Q16Level::Scalar => unsafe {
            scalar_strided(k, tile, x, n_tok, out, row_stride, tok_stride)
        },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU has every feature of the level (asserted above);
        // `check` proved the tile and activation pointers of `a` valid for
        // the extents the drivers read, the caller the outputs (see `Args`).
        Q16Level::Avx2 => unsafe { x86::gemm_avx2(&a, k.uniform, k.has_min) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above.
        Q16Level::Avx512 => unsafe { x86::gemm_avx512(&a, k.uniform, k.has_min) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above.
        Q16Level::Avx512Vnni => unsafe { x86::gemm_avx512_vnni(&a, k.uniform, k.has_min) },
        #[cfg(not(target_arch = "x86_64"))]
        // SAFETY: the caller's promise about `out`.
        _ => unsafe { scalar_strided(k, tile, x, n_tok, out, row_stride, tok_stride) },
    }
}

/// The reference twin of [`gemm_tile`]: plain loops, the same arithmetic in
/// the same order as [`super::dot_unpacked_scalar`] for every (row, token).
pub fn gemm_tile_scalar(
    k: &Q16Kernels,
    tile: &Tile,
    x: &Q16Act,
    n_tok: usize,
    n_in: usize,
    out: &mut [f32],
    out_stride: usize,
) {
    check(k, tile, x, n_tok, n_in);
    check_out(tile, n_tok, out, out_stride);
    // SAFETY: `check_out` proved every written index in bounds.
    unsafe { scalar_strided(k, tile, x, n_tok, out.as_mut_ptr(), out_stride, 1) }
}

/// The scalar twin's body, writing `out[r · rs + t · ts]`. It reads only
/// the activations' `d`, `q` and `sums` (what `check` sized and what
/// [`Q16Act::quantize_for_gemm`] fills), as the SIMD drivers do.
///
/// # Safety
/// As [`gemm_tile_strided`]; `check` passed.
unsafe fn scalar_strided(
    k: &Q16Kernels,
    tile: &Tile,
    x: &Q16Act,
    n_tok: usize,
    out: *mut f32,
    rs: usize,
    ts: usize,
) {
    let n_in = tile.nb * QK;
    // SAFETY: the caller's promise about `out`.
    unsafe { zero(tile.rows, n_tok, out, rs, ts) };
    let mut u = Unpacked::default();
    for r in 0..tile.rows {
        for b in 0..tile.nb {
            for (i, w) in u.w.iter_mut().enumerate() {
                *w = tile.weight(r, b, i);
            }
            for j in 0..8 {
                (u.s[j], u.m[j]) = (tile.scale(r, b, j), tile.offset(r, b, j));
            }
            for t in 0..n_tok {
                let xb = t * tile.nb + b;
                let dx = x.d[xb];
                let xq = &x.q[t * n_in + b * QK..t * n_in + (b + 1) * QK];
                let sums = &x.sums[8 * xb..8 * xb + 8];
                // SAFETY: row r < rows, token t < n_tok: the caller's promise.
                let o = unsafe { &mut *out.add(r * rs + t * ts) };
                let mut acc = *o;
                for j in 0..8 {
                    let (w, q) = (&u.w[32 * j..32 * (j + 1)], &xq[32 * j..32 * (j + 1)]);
                    let isum: i32 = w.iter().zip(q).map(|(&w, &q)| w as i32 * q as i32).sum();
                    acc += isum as f32 * (u.s[j] * dx);
                    if k.has_min {
                        acc -= sums[j] as f32 * (u.m[j] * dx);
                    }
                }
                *o = acc;
            }
        }
    }
}

/// Rows of zero-length dot products.
///
/// # Safety
/// As [`gemm_tile_strided`].
unsafe fn zero(rows: usize, n_tok: usize, out: *mut f32, rs: usize, ts: usize) {
    for r in 0..rows {
        for t in 0..n_tok {
            // SAFETY: row r < rows, token t < n_tok: the caller's promise.
            unsafe { *out.add(r * rs + t * ts) = 0.0 };
        }
    }
}

fn check(k: &Q16Kernels, tile: &Tile, x: &Q16Act, n_tok: usize, n_in: usize) {
    assert!(
        tile.rows == 0
            || (tile.ty == Some(k.ty) && tile.has_min == k.has_min && (tile.ns == 1) == k.uniform),
        "q16 gemm: tile of {:?} with kernels of {}",
        tile.ty,
        k.ty
    );
    assert_eq!(
        n_in,
        tile.nb * QK,
        "q16 gemm: {n_in} inputs for a tile of {} blocks",
        tile.nb
    );
    let nb = tile.nb;
    assert!(
        x.q.len() >= n_tok * n_in
            && x.d.len() >= n_tok * nb
            && x.sums.len() >= n_tok * nb * 8
            && x.sdx.len() >= n_tok * nb * 8,
        "q16 gemm: activations hold {} values for {n_tok} tokens of {n_in}",
        x.q.len()
    );
}

/// A row-major output slice holds `r · out_stride + t` for every row and token.
fn check_out(tile: &Tile, n_tok: usize, out: &[f32], out_stride: usize) {
    if tile.rows > 0 && n_tok > 0 {
        assert!(
            out_stride >= n_tok || tile.rows == 1,
            "q16 gemm: output stride {out_stride} below {n_tok} tokens"
        );
        assert!(
            out.len() >= (tile.rows - 1) * out_stride + n_tok,
            "q16 gemm: output of {} for {} rows of stride {out_stride}",
            out.len(),
            tile.rows
        );
    }
}

/// The operands of a driver as raw pointers.
///
/// Valid when (as `check` asserts), with `G = rows.div_ceil(4)` groups:
/// `w`, `s`, `m` hold `G · nb` blocks of the tile's layout (`m` only read
/// for types with offsets); `q`, `d`, `sdx` hold `n_tok · nb · 256`,
/// `n_tok · nb` and `n_tok · nb · 8` values; `out` is writable at
/// `r · row_stride + t · tok_stride` for `r < rows`, `t < n_tok`.
#[cfg(target_arch = "x86_64")]
struct Args {
    w: *const Line,
    s: *const Lanes,
    m: *const Lanes,
    rows: usize,
    nb: usize,
    /// Steps of eight values between conversions for uniform types: 32
    /// when `|w| ≤ LONG_WMAX`, else 16.
    run: usize,
    q: *const i16,
    d: *const f32,
    /// `sums · d` per 32 values ([`Q16Act::sdx`]).
    sdx: *const f32,
    n_tok: usize,
    out: *mut f32,
    row_stride: usize,
    tok_stride: usize,
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{Args, GROUP, KC, QK, TC};
    use std::arch::x86_64::*;

    /// The vector operations of a driver, per instruction level; every
    /// method is inlined into the `#[target_feature]` wrappers below.
    ///
    /// A *vector row* is one integer vector of a line: the whole line (four
    /// rows) at 512 bits, half of it (two rows) at 256 bits.
    ///
    /// # Safety
    /// Every method requires the CPU features of its level; pointers must be
    /// valid for the access (`load_w`, `load_f`: aligned to the vector).
    trait Simd {
        type I: Copy;
        type F: Copy;
        /// Vector rows per line.
        const H: usize;
        /// Most vector rows of a micro-tile.
        const V: usize;
        /// Most tokens of a micro-tile.
        const T: usize;
        unsafe fn izero() -> Self::I;
        unsafe fn fzero() -> Self::F;
        /// One vector row of weights.
        unsafe fn load_w(p: *const i16) -> Self::I;
        /// Eight activations, repeated for every row of a vector row.
        unsafe fn bcast_x(p: *const i16) -> Self::I;
        /// `acc + madd(w, x)`: pairwise products summed into 32-bit lanes.
        unsafe fn dot(acc: Self::I, w: Self::I, x: Self::I) -> Self::I;
        unsafe fn add_i(a: Self::I, b: Self::I) -> Self::I;
        unsafe fn cvt(i: Self::I) -> Self::F;
        /// The lanes of one vector row.
        unsafe fn load_f(p: *const f32) -> Self::F;
        /// Four f32, repeated for every row of a vector row.
        unsafe fn bcast_f4(p: *const f32) -> Self::F;
        unsafe fn set1(v: f32) -> Self::F;
        unsafe fn mul(a: Self::F, b: Self::F) -> Self::F;
        /// `a · b + c`.
        unsafe fn fma(a: Self::F, b: Self::F, c: Self::F) -> Self::F;
        /// `c − a · b`.
        unsafe fn fnma(a: Self::F, b: Self::F, c: Self::F) -> Self::F;
        /// Store the lanes (unaligned).
        unsafe fn store_f(p: *mut f32, v: Self::F);
    }

    // `vpdpwssd` written out (see `crate::q16::x86::dpwssd512`: the
    // intrinsic's chains get split into `vpmaddwd` + `vpaddd`).
    use crate::q16::x86::dpwssd512 as dpwssd;

    struct V512<const VNNI: bool>;

    impl<const VNNI: bool> Simd for V512<VNNI> {
        type I = __m512i;
        type F = __m512;
        const H: usize = 1;
        // Three vector rows (12 chains of `dpwssd`) measured the same as
        // two on an AVX-512 VNNI Xeon: the product runs at one 512-bit
        // `dpwssd` per cycle either way.
        const V: usize = 2;
        const T: usize = 4;
        #[inline(always)]
        unsafe fn izero() -> __m512i {
            _mm512_setzero_si512()
        }
        #[inline(always)]
        unsafe fn fzero() -> __m512 {
            _mm512_setzero_ps()
        }
        #[inline(always)]
        unsafe fn load_w(p: *const i16) -> __m512i {
            _mm512_load_si512(p as *const _)
        }
        #[inline(always)]
        unsafe fn bcast_x(p: *const i16) -> __m512i {
            _mm512_broadcast_i32x4(_mm_loadu_si128(p as *const _))
        }
        #[inline(always)]
        unsafe fn dot(acc: __m512i, w: __m512i, x: __m512i) -> __m512i {
            if VNNI {
                dpwssd(acc, w, x)
            } else {
                _mm512_add_epi32(acc, _mm512_madd_epi16(w, x))
            }
        }
        #[inline(always)]
        unsafe fn add_i(a: __m512i, b: __m512i) -> __m512i {
            _mm512_add_epi32(a, b)
        }
        #[inline(always)]
        unsafe fn cvt(i: __m512i) -> __m512 {
            _mm512_cvtepi32_ps(i)
        }
        #[inline(always)]
        unsafe fn load_f(p: *const f32) -> __m512 {
            _mm512_load_ps(p)
        }
        #[inline(always)]
        unsafe fn bcast_f4(p: *const f32) -> __m512 {
            _mm512_broadcast_f32x4(_mm_loadu_ps(p))
        }
        #[inline(always)]
        unsafe fn set1(v: f32) -> __m512 {
            _mm512_set1_ps(v)
        }
        #[inline(always)]
        unsafe fn mul(a: __m512, b: __m512) -> __m512 {
            _mm512_mul_ps(a, b)
        }
        #[inline(always)]
        unsafe fn fma(a: __m512, b: __m512, c: __m512) -> __m512 {
            _mm512_fmadd_ps(a, b, c)
        }
        #[inline(always)]
        unsafe fn fnma(a: __m512, b: __m512, c: __m512) -> __m512 {
            _mm512_fnmadd_ps(a, b, c)
        }
        #[inline(always)]
        unsafe fn store_f(p: *mut f32, v: __m512) {
            _mm512_storeu_ps(p, v)
        }
    }

    struct V256;

    impl Simd for V256 {
        type I = __m256i;
        type F = __m256;
        const H: usize = 2;
        const V: usize = 2;
        const T: usize = 4;
        #[inline(always)]
        unsafe fn izero() -> __m256i {
            _mm256_setzero_si256()
        }
        #[inline(always)]
        unsafe fn fzero() -> __m256 {
            _mm256_setzero_ps()
        }
        #[inline(always)]
        unsafe fn load_w(p: *const i16) -> __m256i {
            _mm256_load_si256(p as *const _)
        }
        #[inline(always)]
        unsafe fn bcast_x(p: *const i16) -> __m256i {
            _mm256_broadcastsi128_si256(_mm_loadu_si128(p as *const _))
        }
        #[inline(always)]
        unsafe fn dot(acc: __m256i, w: __m256i, x: __m256i) -> __m256i {
            _mm256_add_epi32(acc, _mm256_madd_epi16(w, x))
        }
        #[inline(always)]
        unsafe fn add_i(a: __m256i, b: __m256i) -> __m256i {
            _mm256_add_epi32(a, b)
        }
        #[inline(always)]
        unsafe fn cvt(i: __m256i) -> __m256 {
            _mm256_cvtepi32_ps(i)
        }
        #[inline(always)]
        unsafe fn load_f(p: *const f32) -> __m256 {
            _mm256_load_ps(p)
        }
        #[inline(always)]
        unsafe fn bcast_f4(p: *const f32) -> __m256 {
            let v = _mm_loadu_ps(p);
            _mm256_set_m128(v, v)
        }
        #[inline(always)]
        unsafe fn set1(v: f32) -> __m256 {
            _mm256_set1_ps(v)
        }
        #[inline(always)]
        unsafe fn mul(a: __m256, b: __m256) -> __m256 {
            _mm256_mul_ps(a, b)
        }
        #[inline(always)]
        unsafe fn fma(a: __m256, b: __m256, c: __m256) -> __m256 {
            _mm256_fmadd_ps(a, b, c)
        }
        #[inline(always)]
        unsafe fn fnma(a: __m256, b: __m256, c: __m256) -> __m256 {
            _mm256_fnmadd_ps(a, b, c)
        }
        #[inline(always)]
        unsafe fn store_f(p: *mut f32, v: __m256) {
            _mm256_storeu_ps(p, v)
        }
    }

    /// f32 scratch aligned for the vector loads.
    #[repr(C, align(64))]
    struct Buf<const N: usize>([f32; N]);

    /// One micro-tile: `V` vector rows starting at row group `g0` × `T`
    /// tokens from `t0`, blocks `b0..b1`, with `N` interleaved sets of
    /// integer accumulators (`V · T · N ≥ 4` chains in flight). Stores
    /// (`first`) or adds its sums to `out` for the rows below `a.rows`.
    ///
    /// # Safety
    /// The CPU has `S`'s features; `a` is valid (see `Args`); the vector rows
    /// lie in groups below `a.rows.div_ceil(4)`; `t0 + T <= a.n_tok`;
    /// `b0 < b1 <= a.nb`; `U`/`M` match the tile.
    #[inline(always)]
    #[allow(clippy::needless_range_loop)]
    unsafe fn micro<
        S: Simd,
        const V: usize,
        const T: usize,
        const N: usize,
        const U: bool,
        const M: bool,
    >(
        a: &Args,
        p: Pos,
    ) {
        let Pos {
            g0,
            t0,
            b0,
            b1,
            first,
            pf_t0,
            pf_n,
        } = p;
        // SAFETY (whole body): every pointer stays inside what `Args`
        // promises: lines `gb·32 + step` (step < 32) and scale / offset
        // vectors `gb·ns + c` (c < ns), `gb·2 + h` of groups below
        // `rows.div_ceil(4)` and blocks below `nb`; activations
        // `(t0+t)·n_in + b·256 + 8·step + 8 ≤ n_tok·n_in`, their scale
        // `(t0+t)·nb + b` and `sums · d` (`sdx`) `((t0+t)·nb + b)·8 + 8`;
        // outputs of rows below `rows` and tokens below `n_tok`. `load_w` / `load_f` read
        // 64-byte aligned lines and lanes at multiples of their vector size.
        let (nb, n_in) = (a.nb, a.nb * QK);
        // i16 and f32 offsets of vector row v inside its line / lanes.
        let (wo, fo) = (32 / S::H, 16 / S::H);
        let ns = if U { 1 } else { 8 };
        let mut facc = [[S::fzero(); T]; V];
        for b in b0..b1 {
            let mut wp = [std::ptr::null::<i16>(); V];
            let mut gb = [0usize; V];
            for v in 0..V {
                gb[v] = (g0 + v / S::H) * nb + b;
                wp[v] = (a.w.add(gb[v] * 32) as *const i16).add((v % S::H) * wo);
            }
            let mut xp = [std::ptr::null::<i16>(); T];
            let mut dx = [0f32; T];
            for t in 0..T {
                xp[t] = a.q.add((t0 + t) * n_in + b * QK);
                dx[t] = *a.d.add((t0 + t) * nb + b);
            }
            // The next micro-tile's activations of this block, to hide
            // the latency of memory (prefetches do not fault).
            for i in 0..pf_n {
                let base = a.q.add((pf_t0 + i) * n_in + b * QK);
                for l in 0..QK / 32 {
                    _mm_prefetch::<_MM_HINT_T1>(base.add(32 * l) as *const i8);
                }
            }
            // Steps of eight values between conversions to f32.
            let run = if U { a.run } else { 4 };

            let mut blk = [[S::fzero(); T]; V];
            // Uniform types: each vector row's scales, multiplied by a
            // token's `dx` where they are applied (the same f32 product as
            // computing all of them first, without holding V · T of them).
            let mut sv = [S::fzero(); V];
            if U {
                for v in 0..V {
                    sv[v] = S::load_f((a.s.add(gb[v]) as *const f32).add((v % S::H) * fo));
                }
            }
            for c in 0..32 / run {
                let mut acc = [[[S::izero(); T]; V]; N];
                for k in (0..run).step_by(N) {
                    for n in 0..N {
                        let step = c * run + k + n;
                        let mut wv = [S::izero(); V];
                        for v in 0..V {
                            wv[v] = S::load_w(wp[v].add(32 * step));
                        }
                        for t in 0..T {
                            let xv = S::bcast_x(xp[t].add(8 * step));
                            for v in 0..V {
                                acc[n][v][t] = S::dot(acc[n][v][t], wv[v], xv);
                            }
                        }
                    }
                }
                for v in 0..V {
                    for t in 0..T {
                        let mut i = acc[0][v][t];
                        for n in 1..N {
                            i = S::add_i(i, acc[n][v][t]);
                        }
                        if U {
                            let sc = S::mul(sv[v], S::set1(dx[t]));
                            facc[v][t] = S::fma(S::cvt(i), sc, facc[v][t]);
                        } else {
                            let s = (a.s.add(gb[v] * ns + c) as *const f32).add((v % S::H) * fo);
                            blk[v][t] = S::fma(S::cvt(i), S::load_f(s), blk[v][t]);
                        }
                    }
                }
            }
            if !U {
                for v in 0..V {
                    for t in 0..T {
                        facc[v][t] = S::fma(blk[v][t], S::set1(dx[t]), facc[v][t]);
                    }
                }
            }
            if M {
                for t in 0..T {
                    // `sums · dx` of this token's block, computed once per
                    // batch (`Q16Act::sdx`: the same f32 products).
                    let sdx = a.sdx.add(((t0 + t) * nb + b) * 8);
                    let lo = S::bcast_f4(sdx);
                    let hi = S::bcast_f4(sdx.add(4));
                    for v in 0..V {
                        let m = (a.m.add(gb[v] * 2) as *const f32).add((v % S::H) * fo);
                        facc[v][t] = S::fnma(S::load_f(m), lo, facc[v][t]);
                        facc[v][t] = S::fnma(S::load_f(m.add(16)), hi, facc[v][t]);
                    }
                }
            }
        }
        // Each row owns four lanes of its vector row.
        for v in 0..V {
            for t in 0..T {
                let mut l = Buf([0f32; 16]);
                S::store_f(l.0.as_mut_ptr(), facc[v][t]);
                for rr in 0..GROUP / S::H {
                    let r = (g0 + v / S::H) * GROUP + (v % S::H) * (GROUP / S::H) + rr;
                    if r < a.rows {
                        let sum =
                            (l.0[4 * rr] + l.0[4 * rr + 1]) + (l.0[4 * rr + 2] + l.0[4 * rr + 3]);
                        let o = a.out.add(r * a.row_stride + (t0 + t) * a.tok_stride);
                        *o = if first { sum } else { *o + sum };
                    }
                }
            }
        }
    }

    /// Where a micro-tile lies: row groups from `g0`, tokens from `t0`,
    /// blocks `b0..b1` (the first run of blocks when `first`); and the
    /// `pf_n` tokens from `pf_t0` whose activations it prefetches.
    #[derive(Clone, Copy)]
    struct Pos {
        g0: usize,
        t0: usize,
        b0: usize,
        b1: usize,
        first: bool,
        pf_t0: usize,
        pf_n: usize,
    }

    /// The micro-tile of `v` vector rows × `t` tokens.
    ///
    /// # Safety
    /// As `micro`; `v ≤ S::V`, `t ≤ S::T`, `pf_t0 + pf_n ≤ a.n_tok`.
    #[inline(always)]
    unsafe fn tile<S: Simd, const U: bool, const M: bool>(a: &Args, v: usize, t: usize, p: Pos) {
        match (v, t) {
            (1, 1) => micro::<S, 1, 1, 4, U, M>(a, p),
            (1, 2) => micro::<S, 1, 2, 2, U, M>(a, p),
            (1, 3) if S::T >= 3 => micro::<S, 1, 3, 2, U, M>(a, p),
            (1, 4) if S::T >= 4 => micro::<S, 1, 4, 1, U, M>(a, p),
            (2, 1) => micro::<S, 2, 1, 2, U, M>(a, p),
            (2, 2) => micro::<S, 2, 2, 1, U, M>(a, p),
            (2, 3) if S::T >= 3 => micro::<S, 2, 3, 1, U, M>(a, p),
            (2, 4) if S::T >= 4 => micro::<S, 2, 4, 1, U, M>(a, p),
            _ => unreachable!("q16 gemm: micro-tile {v}×{t}"),
        }
    }

    /// Width of the micro-tile starting `r` tokens before the end of a run
    /// of tokens: the run is cut into as few micro-tiles as possible, of
    /// as equal widths as possible (5 tokens as 2 + 3, not 4 + 1: a lone
    /// token reads as many weights as four).
    #[inline(always)]
    fn width(r: usize, tmax: usize) -> usize {
        r / r.div_ceil(tmax)
    }

    /// The whole tile: runs of `KC` blocks, then runs of `TC` tokens, then
    /// pairs of vector rows, then micro-tiles of tokens. The first pair of
    /// vector rows of a run of tokens prefetches each next micro-tile's
    /// activations (the others find them in the second-level cache).
    ///
    /// # Safety
    /// As `micro`, for the whole of `a`.
    #[inline(always)]
    unsafe fn drive<S: Simd, const U: bool, const M: bool>(a: &Args) {
        let vrows = a.rows.div_ceil(GROUP) * S::H;
        let mut b0 = 0;
        while b0 < a.nb {
            let b1 = (b0 + KC).min(a.nb);
            let mut c0 = 0;
            while c0 < a.n_tok {
                let c1 = (c0 + TC).min(a.n_tok);
                for v0 in (0..vrows).step_by(S::V) {
                    let v = (vrows - v0).min(S::V);
                    let mut t0 = c0;
                    while t0 < c1 {
                        let t = width(c1 - t0, S::T);
                        // The next micro-tile: in this run, else the first
                        // of the next run.
                        let (pf_t0, pf_n) = if v0 > 0 {
                            (0, 0)
                        } else if t0 + t < c1 {
                            (t0 + t, width(c1 - t0 - t, S::T))
                        } else if c1 < a.n_tok {
                            (c1, width((c1 + TC).min(a.n_tok) - c1, S::T))
                        } else {
                            (0, 0)
                        };
                        let p = Pos {
                            // Vector rows v0 .. v0 + V start in group
                            // v0 / H (H divides V: 1 | 3, 2 | 2).
                            g0: v0 / S::H,
                            t0,
                            b0,
                            b1,
                            first: b0 == 0,
                            pf_t0,
                            pf_n,
                        };
                        tile::<S, U, M>(a, v, t, p);
                        t0 += t;
                    }
                }
                c0 = c1;
            }
            b0 = b1;
        }
    }

    /// # Safety
    /// The CPU features of `S`; `a` valid (see `Args`).
    #[inline(always)]
    unsafe fn dispatch<S: Simd>(a: &Args, uniform: bool, has_min: bool) {
        match (uniform, has_min) {
            (true, false) => drive::<S, true, false>(a),
            (true, true) => drive::<S, true, true>(a),
            (false, false) => drive::<S, false, false>(a),
            (false, true) => drive::<S, false, true>(a),
        }
    }

    /// # Safety
    /// The CPU has AVX-512 F/BW/VL/VNNI, AVX2 and FMA; `a` is valid (see `Args`).
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma")]
    pub(super) unsafe fn gemm_avx512_vnni(a: &Args, uniform: bool, has_min: bool) {
        dispatch::<V512<true>>(a, uniform, has_min)
    }

    /// # Safety
    /// The CPU has AVX-512 F/BW/VL, AVX2 and FMA; `a` is valid (see `Args`).
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma")]
    pub(super) unsafe fn gemm_avx512(a: &Args, uniform: bool, has_min: bool) {
        dispatch::<V512<false>>(a, uniform, has_min)
    }

    /// # Safety
    /// The CPU has AVX2 and FMA; `a` is valid (see `Args`).
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn gemm_avx2(a: &Args, uniform: bool, has_min: bool) {
        dispatch::<V256>(a, uniform, has_min)
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{random_blocks, random_x, TYPES};
    use super::super::{dot_unpacked_scalar, kernels, kernels_at};
    use super::*;

    const LEVELS: [Q16Level; 4] = [
        Q16Level::Scalar,
        Q16Level::Avx2,
        Q16Level::Avx512,
        Q16Level::Avx512Vnni,
    ];

    /// `Σ |w·x|` of every (row, token): the scale of the rounding error.
    fn magnitudes(
        ty: GgmlType,
        data: &[u8],
        x: &[f32],
        rows: usize,
        n_tok: usize,
        n_in: usize,
    ) -> Vec<f64> {
        let w = crate::dequantize_to_vec(ty, data).expect("dequantize");
        let mut m = vec![0f64; rows * n_tok];
        for r in 0..rows {
            for t in 0..n_tok {
                m[r * n_tok + t] = w[r * n_in..(r + 1) * n_in]
                    .iter()
                    .zip(&x[t * n_in..(t + 1) * n_in])
                    .map(|(a, b)| (*a as f64 * *b as f64).abs())
                    .sum();
            }
        }
        m
    }

    /// The tile's accessors give back what the scalar unpacker wrote, and
    /// padding rows are zero.
    fn big_wmax(data: &[u8], k: &Q16Kernels) -> bool {
        let mut t = Tile::new();
        t.unpack(k, data, data.len() / 2, 2);
        t.wmax > LONG_WMAX
    }

    /// A tile reused for small weights after large ones computes exactly
    /// what a fresh tile does (the overflow bound is not inherited).
    #[test]
    fn reused_tile_is_deterministic() {
        let k6 = super::super::kernels(GgmlType::Q6_K).expect("q6k");
        let k4 = super::super::kernels(GgmlType::Q4_K).expect("q4k");
        let big = random_blocks(GgmlType::Q6_K, 4, 91);
        let small = random_blocks(GgmlType::Q4_K, 4, 92);
        let x = random_x(2 * QK * 3, 93);
        let mut a = Q16Act::default();
        assert!(a.quantize(&x));
        let rb = small.len() / 2;
        let mut fresh = Tile::new();
        fresh.unpack(&k4, &small, rb, 2);
        let mut want = vec![0f32; 2 * 3];
        gemm_tile(&k4, &fresh, &a, 3, 2 * QK, &mut want, 3);
        let mut reused = Tile::new();
        reused.unpack(&k6, &big, big.len() / 2, 2);
        reused.unpack(&k4, &small, rb, 2);
        assert!(big_wmax(&big, &k6), "the first tile must need short runs");
        assert_eq!(reused.wmax, fresh.wmax, "overflow bound inherited");
        let mut got = vec![0f32; 2 * 3];
        gemm_tile(&k4, &reused, &a, 3, 2 * QK, &mut got, 3);
        assert_eq!(
            got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            want.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
        );
    }

    #[test]
    fn tile_layout_round_trips() {
        let mut tile = Tile::new();
        for (i, ty) in TYPES.into_iter().enumerate() {
            let k = kernels(ty).expect("kernels");
            let (nb, rows) = (3, 7);
            let data = random_blocks(ty, rows * nb, 50 + i as u64);
            tile.unpack(&k, &data, nb * k.bytes, rows);
            let mut u = Unpacked::default();
            for r in 0..rows.div_ceil(GROUP) * GROUP {
                for b in 0..nb {
                    if r < rows {
                        (k.unpack_scalar)(&data[(r * nb + b) * k.bytes..][..k.bytes], &mut u);
                    } else {
                        u = Unpacked::default();
                    }
                    for i in 0..QK {
                        assert_eq!(
                            tile.weight(r, b, i),
                            u.w[i],
                            "{ty} row {r} block {b} weight {i}"
                        );
                    }
                    for j in 0..8 {
                        assert_eq!(
                            tile.scale(r, b, j),
                            u.s[j],
                            "{ty} row {r} block {b} scale {j}"
                        );
                        assert_eq!(
                            tile.offset(r, b, j),
                            u.m[j],
                            "{ty} row {r} block {b} offset {j}"
                        );
                    }
                }
            }
        }
    }

    /// The scalar twin equals the per-row reference dot; every driver level
    /// this CPU has agrees with the scalar twin, for row and token counts on
    /// and off the micro-tile, over several runs of `KC` blocks, with a
    /// reused (shrinking and growing) tile.
    #[test]
    fn gemm_matches_scalar_and_dot() {
        let mut tile = Tile::new();
        let mut cases = 0;
        for (i, ty) in TYPES.into_iter().enumerate() {
            for (nb, rows) in [
                (1usize, 1usize),
                (3, 6),
                (2, 9),
                (KC + 2, 5),
                (1, 12),
                (4, 3),
                (0, 5),
            ] {
                let n_in = nb * QK;
                let ks = kernels_at(ty, Q16Level::Scalar).expect("kernels");
                let row_bytes = nb * ks.bytes;
                let seed = 100 + 13 * i as u64 + nb as u64 * 3 + rows as u64;
                let data = random_blocks(ty, rows * nb, seed);
                let max_tok = if nb > KC { 9 } else { 37 };
                let xf = random_x(max_tok * n_in, seed + 1);
                let mut x = Q16Act::default();
                assert!(x.quantize(&xf));
                let mag = magnitudes(ty, &data, &xf, rows, max_tok, n_in);
                for n_tok in 1..=max_tok {
                    if nb > KC && ![1, 4, 6, 9].contains(&n_tok) {
                        continue;
                    }
                    let stride = n_tok + 3;
                    tile.unpack(&ks, &data, row_bytes, rows);
                    let mut want = vec![f32::NAN; rows * stride];
                    gemm_tile_scalar(&ks, &tile, &x, n_tok, n_in, &mut want, stride);
                    for r in 0..rows {
                        for t in 0..n_tok {
                            let d = dot_unpacked_scalar(
                                &data[r * row_bytes..(r + 1) * row_bytes],
                                ks.bytes,
                                ks.has_min,
                                ks.unpack_scalar,
                                x.row(t, n_in),
                            );
                            let got = want[r * stride + t];
                            let tol = 1e-5 * mag[r * max_tok + t];
                            assert!(
                                ((got - d) as f64).abs() <= tol,
                                "{ty} scalar gemm row {r} tok {t}: {got} vs dot {d}"
                            );
                        }
                    }
                    for lv in LEVELS {
                        if !level_supported(lv) {
                            continue;
                        }
                        let k = kernels_at(ty, lv).expect("kernels");
                        // Every type also through the per-32-scale path
                        // (its scales just happen to be equal).
                        for k in [
                            k,
                            Q16Kernels {
                                uniform: false,
                                ..k
                            },
                        ] {
                            tile.unpack(&k, &data, row_bytes, rows);
                            let mut got = vec![f32::NAN; rows * stride];
                            gemm_tile_at(lv, &k, &tile, &x, n_tok, n_in, &mut got, stride);
                            let u = k.uniform;
                            for r in 0..rows {
                                for t in 0..stride {
                                    let (g, w) = (got[r * stride + t], want[r * stride + t]);
                                    if t >= n_tok {
                                        assert!(g.is_nan(), "{ty} {lv:?}: wrote past n_tok");
                                        continue;
                                    }
                                    let tol = 1e-5 * mag[r * max_tok + t];
                                    assert!(
                                        ((g - w) as f64).abs() <= tol,
                                        "{ty} {lv:?} uniform {u} nb {nb} rows {rows} n_tok {n_tok}: \
                                         row {r} tok {t}: {g} vs scalar {w} (tol {tol})"
                                    );
                                }
                            }
                        }
                        cases += 1;
                    }
                }
            }
        }
        assert!(cases > 0);
    }

    /// Every level, the scalar twin included, reads only what
    /// `quantize_for_gemm` fills (no byte planes): the same bits as with
    /// the fully quantized activations.
    #[test]
    fn gemm_needs_no_byte_planes() {
        let mut tile = Tile::new();
        for (i, ty) in TYPES.into_iter().enumerate() {
            let (nb, rows, n_tok) = (2usize, 5usize, 7usize);
            let n_in = nb * QK;
            let xf = random_x(n_tok * n_in, 900 + i as u64);
            let (mut full, mut lean) = (Q16Act::default(), Q16Act::default());
            assert!(full.quantize(&xf) && lean.quantize_for_gemm(&xf));
            assert!(lean.h.is_empty() && lean.p.is_empty());
            for lv in LEVELS {
                if !level_supported(lv) {
                    continue;
                }
                let k = kernels_at(ty, lv).expect("kernels");
                let data = random_blocks(ty, rows * nb, 910 + i as u64);
                tile.unpack(&k, &data, nb * k.bytes, rows);
                let (mut want, mut got) = (vec![0f32; rows * n_tok], vec![0f32; rows * n_tok]);
                gemm_tile_at(lv, &k, &tile, &full, n_tok, n_in, &mut want, n_tok);
                gemm_tile_at(lv, &k, &tile, &lean, n_tok, n_in, &mut got, n_tok);
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&got), bits(&want), "{ty} {lv:?}");
            }
        }
    }

    /// The strided form writes a token-major output (`row_stride` 1,
    /// `tok_stride` the full row count, a tile's rows at an offset) with
    /// the same bits as the row-major form, at every level, and touches
    /// nothing outside its rows and tokens.
    #[test]
    fn strided_output_equals_row_major() {
        let mut tile = Tile::new();
        for (i, ty) in TYPES.into_iter().enumerate() {
            for (nb, rows, n_tok) in [
                (2usize, 13usize, 7usize),
                (KC + 1, 6, 5),
                (0, 3, 2),
                (1, 1, 1),
            ] {
                let n_in = nb * QK;
                let seed = 700 + 7 * i as u64 + nb as u64;
                let xf = random_x(n_tok * n_in, seed + 1);
                let mut x = Q16Act::default();
                assert!(x.quantize(&xf));
                // The tile's rows are columns r0 .. r0 + rows of an output
                // of n_out values per token.
                let (r0, n_out) = (3, rows + 5);
                for lv in LEVELS {
                    if !level_supported(lv) {
                        continue;
                    }
                    let k = kernels_at(ty, lv).expect("kernels");
                    let data = random_blocks(ty, rows * nb, seed);
                    tile.unpack(&k, &data, nb * k.bytes, rows);
                    let mut want = vec![0f32; rows * n_tok];
                    gemm_tile_at(lv, &k, &tile, &x, n_tok, n_in, &mut want, n_tok);
                    let mut got = vec![f32::NAN; n_tok * n_out];
                    // SAFETY: element r0 + r + t · n_out < n_tok · n_out for
                    // r < rows, t < n_tok; `got` is borrowed mutably here.
                    unsafe {
                        gemm_tile_strided_at(
                            lv,
                            &k,
                            &tile,
                            &x,
                            n_tok,
                            n_in,
                            got.as_mut_ptr().add(r0),
                            1,
                            n_out,
                        );
                    }
                    for t in 0..n_tok {
                        for c in 0..n_out {
                            let g = got[t * n_out + c];
                            if c < r0 || c >= r0 + rows {
                                assert!(g.is_nan(), "{ty} {lv:?}: wrote column {c} of token {t}");
                            } else {
                                let w = want[(c - r0) * n_tok + t];
                                assert_eq!(
                                    g.to_bits(),
                                    w.to_bits(),
                                    "{ty} {lv:?} nb {nb}: row {} token {t}: {g} vs {w}",
                                    c - r0
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    /// Batches longer than a run of `TC` tokens (several runs, prefetches
    /// across runs) over several runs of `KC` blocks.
    #[test]
    fn gemm_many_tokens() {
        let mut tile = Tile::new();
        for (i, ty) in TYPES.into_iter().enumerate() {
            let (nb, rows) = (KC + 1, 6);
            let n_in = nb * QK;
            let data = random_blocks(ty, rows * nb, 70 + i as u64);
            let n_max = 2 * TC + 5;
            let xf = random_x(n_max * n_in, 71 + i as u64);
            let mut x = Q16Act::default();
            assert!(x.quantize(&xf));
            let mag = magnitudes(ty, &data, &xf, rows, n_max, n_in);
            for n_tok in [TC, TC + 1, n_max] {
                for lv in LEVELS.into_iter().filter(|&l| level_supported(l)) {
                    let k = kernels_at(ty, lv).expect("kernels");
                    tile.unpack(&k, &data, nb * k.bytes, rows);
                    let mut want = vec![0f32; rows * n_tok];
                    let mut got = vec![0f32; rows * n_tok];
                    gemm_tile_scalar(&k, &tile, &x, n_tok, n_in, &mut want, n_tok);
                    gemm_tile_at(lv, &k, &tile, &x, n_tok, n_in, &mut got, n_tok);
                    for r in 0..rows {
                        for t in 0..n_tok {
                            let (g, w) = (got[r * n_tok + t], want[r * n_tok + t]);
                            let tol = 1e-5 * mag[r * n_max + t];
                            assert!(
                                ((g - w) as f64).abs() <= tol,
                                "{ty} {lv:?} n_tok {n_tok}: row {r} tok {t}: {g} vs scalar {w}"
                            );
                        }
                    }
                }
            }
        }
    }

    /// The default entry point runs this CPU's level and the tile stops
    /// allocating once it has grown.
    #[test]
    fn gemm_tile_default_level_and_reuse() {
        let ty = GgmlType::Q4_K;
        let k = kernels(ty).expect("kernels");
        let nb = 2;
        let data = random_blocks(ty, 8 * nb, 7);
        let xf = random_x(5 * nb * QK, 8);
        let mut x = Q16Act::default();
        assert!(x.quantize(&xf));
        let mut tile = Tile::new();
        tile.unpack(&k, &data, nb * k.bytes, 8);
        let ptr = tile.w.as_ptr();
        tile.unpack(&k, &data, nb * k.bytes, 3);
        tile.unpack(&k, &data, nb * k.bytes, 8);
        assert_eq!(ptr, tile.w.as_ptr(), "tile reallocated");
        assert_eq!((tile.rows(), tile.blocks_per_row()), (8, nb));
        let (mut a, mut b) = (vec![0f32; 8 * 5], vec![0f32; 8 * 5]);
        gemm_tile(&k, &tile, &x, 5, nb * QK, &mut a, 5);
        gemm_tile_at(level(), &k, &tile, &x, 5, nb * QK, &mut b, 5);
        assert_eq!(a, b);
    }

    /// Weights and activations at their largest magnitudes: the 32-bit
    /// lanes come within 0.01 % of overflowing (`|w| = 4096`, half-block
    /// sums; `|w| = 2048`, whole-block sums) and must not.
    #[test]
    fn gemm_extreme_values_do_not_overflow() {
        let ty = GgmlType::Q6_K;
        let (nb, rows, n_tok) = (2, 8, 5);
        let n_in = nb * QK;
        let sign = |t: usize| if t.is_multiple_of(2) { 1.0f32 } else { -1.0 };
        let xf: Vec<f32> = (0..n_tok * n_in).map(|i| sign(i / n_in)).collect();
        let mut x = Q16Act::default();
        assert!(x.quantize(&xf));
        assert!(x.q.iter().all(|q| q.unsigned_abs() == 16383));
        let d = half::f16::from_f32(0.001);
        for (sc, w) in [(0x80u8, 4096u16), (0xC0, 2048)] {
            // q − 32 = −32 everywhere, scale byte −128 or −64.
            let mut blk = vec![0u8; 210];
            blk[192..208].fill(sc);
            blk[208..210].copy_from_slice(&d.to_bits().to_le_bytes());
            let data = blk.repeat(rows * nb);
            // Σ w·x with x = ±1: 512 · w · d.
            let exact = n_in as f32 * w as f32 * d.to_f32();
            for lv in LEVELS.into_iter().filter(|&l| level_supported(l)) {
                let k = kernels_at(ty, lv).expect("kernels");
                let mut tile = Tile::new();
                tile.unpack(&k, &data, nb * k.bytes, rows);
                assert_eq!(tile.wmax, w);
                let mut want = vec![0f32; rows * n_tok];
                let mut got = vec![0f32; rows * n_tok];
                gemm_tile_scalar(&k, &tile, &x, n_tok, n_in, &mut want, n_tok);
                gemm_tile_at(lv, &k, &tile, &x, n_tok, n_in, &mut got, n_tok);
                for (i, (g, v)) in got.iter().zip(&want).enumerate() {
                    let e = sign(i % n_tok) * exact;
                    assert!(
                        (g - v).abs() <= 1e-5 * v.abs(),
                        "{lv:?} |w| {w}: {g} vs scalar {v}"
                    );
                    assert!(
                        (v - e).abs() <= 1e-4 * e.abs(),
                        "|w| {w}: scalar {v} vs {e}"
                    );
                }
            }
        }
    }
}
