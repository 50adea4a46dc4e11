//! Integer kernels: 16-bit activations against unpacked integer weights.
//!
//! The fast path of the matrix products. Every kernel has one shape:
//!
//! 1. **unpack** a 256-value super-block of weights into [`Unpacked`]: 256
//!    `i16` integer weights with the type's integer sub-block scales already
//!    multiplied in, eight f32 scales (one per 32 values) and, for types with
//!    a minimum, eight f32 offsets;
//! 2. **widen / integer dot** against the activations, quantized once per
//!    token to [`Q16Act`]: per 256 values one f32 scale and 256 `i16` in
//!    `±16383` (15 bits, about 128 times finer than llama.cpp's 8-bit
//!    activations), plus the integer sum of every 32;
//! 3. **scale**: `dot = dx · (Σ_j s_j · Σ_{i∈j} w_i q_i − Σ_j m_j · Σ_{i∈j} q_i)`.
//!
//! Only step 1 is per type (a scalar reference and an AVX2 twin, tested
//! bit-for-bit against each other); steps 2 and 3 are one driver per
//! instruction level (scalar, AVX2, AVX-512, AVX-512 VNNI), so the types do
//! not repeat each other's loops. Integer sums cannot overflow: `|w| ≤ 4096`
//! (the largest is Q6_K's `127 · 32`) and `|q| ≤ 16383`, so one 32-bit lane
//! accumulating the 16 products it sees per super-block stays below `2^31`.
//!
//! The weight arithmetic is exact (integers, then the same f32 scales as the
//! dequantizer); the only new rounding is the activations' 15 bits.

use crate::util::{f16_at, u16_at};
use crate::GgmlType;

/// Values per super-block (and per activation scale).
pub const QK: usize = 256;
/// Tokens a multi-token dot handles per pass over a weight row (more are
/// taken in groups of this many).
pub const NMAX: usize = 16;

/// Largest activation magnitude after quantization.
pub const XMAX: f32 = 16383.0;

/// One super-block of weights made ready for the integer dot.
#[repr(C, align(64))]
#[derive(Clone)]
pub struct Unpacked {
    /// Integer weights with integer sub-block scales folded in (`|w| ≤ 4096`).
    pub w: [i16; QK],
    /// f32 scale of each 32 values.
    pub s: [f32; 8],
    /// f32 offset of each 32 values (weight = `s·w − m`); zero for types without a minimum.
    pub m: [f32; 8],
}

impl Default for Unpacked {
    fn default() -> Self {
        Unpacked {
            w: [0; QK],
            s: [0.0; 8],
            m: [0.0; 8],
        }
    }
}

/// Activations of one or more vectors quantized for the integer kernels.
#[derive(Default, Clone)]
pub struct Q16Act {
    /// Scale per 256 values.
    pub d: Vec<f32>,
    /// Quantized values.
    pub q: Vec<i16>,
    /// Integer sum of every 32 quantized values.
    pub sums: Vec<i32>,
    /// `sums[i] as f32 · d[i / 8]`: the activations' side of the minima
    /// step of the matrix-matrix kernels, computed once per batch instead
    /// of once per row group (the same f32 product either way).
    pub sdx: Vec<f32>,
    /// `q = 255·h + l` with `|l| ≤ 127`, `|h| ≤ 64`: each value as two
    /// signed bytes, for kernels that multiply bytes (`vpmaddubsw`).
    pub h: Vec<i8>,
    pub l: Vec<i8>,
    /// `q = 256·hb + lb` (`hb = q >> 8` in `−64..=63`, `lb = q & 255`), the
    /// 32-value sub-blocks of each 256 in the order [`SB_ORDER`]: the planes
    /// of the AVX-512 Q4_K / Q5_K kernel, whose 64-byte registers hold the
    /// quants of sub-blocks `SB_ORDER[2r]` and `SB_ORDER[2r + 1]`.
    pub hb: Vec<i8>,
    pub lb: Vec<u8>,
    /// `q` reordered per 256 values ([`p_index`]) so that one widening dot
    /// per 32 values adds products into the same 32-bit lanes as the
    /// AVX-512 byte-plane Q4_K / Q5_K kernel does (for the multi-token
    /// kernel, which then gives the same bits).
    pub p: Vec<i16>,
    /// `h` and `l` in the order of the lanes layout of Q4_K / Q5_K
    /// ([`lanes`]): per 256 values, byte `32r + i` holds value
    /// [`lanes::lane_src`]`(r, i)`.
    pub ht: Vec<i8>,
    pub lt: Vec<i8>,
}

/// The order of the sub-blocks of 32 in the `hb` / `lb` planes: the
/// AVX-512 Q4_K / Q5_K kernel's register `r` holds the low nibbles (`r`
/// even) or the high nibbles (`r` odd) of 64 quant bytes, sub-blocks
/// `SB_ORDER[2r]` then `SB_ORDER[2r + 1]`.
pub const SB_ORDER: [usize; 8] = [0, 2, 1, 3, 4, 6, 5, 7];

/// Where value `i` (0..256) of a block sits in the `p` plane: slot `s =
/// 2r + k` (32 values) holds, in 32-bit lane `L` (two values), the values
/// `4·(L mod 8) + 2k` and the next of sub-block `SB_ORDER[2r + L / 8]`, so
/// a lane sees the four consecutive values of one sub-block that the byte
/// kernel's lane `L` sees from register `r`.
pub fn p_index(i: usize) -> usize {
    let (sb, j) = (i / 32, i % 32);
    let pos = SB_ORDER.iter().position(|&s| s == sb).unwrap_or(0);
    let (r, half) = (pos / 2, pos % 2);
    let (quad, k, e) = (j / 4, (j / 2) % 2, j % 2);
    32 * (2 * r + k) + 2 * (8 * half + quad) + e
}

/// A borrowed view of quantized activations (one vector, or a run of blocks).
#[derive(Clone, Copy)]
pub struct Q16Ref<'a> {
    pub d: &'a [f32],
    pub q: &'a [i16],
    pub sums: &'a [i32],
    pub h: &'a [i8],
    pub l: &'a [i8],
    pub hb: &'a [i8],
    pub lb: &'a [u8],
    pub p: &'a [i16],
    pub ht: &'a [i8],
    pub lt: &'a [i8],
}

impl Q16Act {
    /// Quantize `x` (length a multiple of 256) into `self`, reusing its
    /// buffers. Returns `false` when a value is not finite (the caller then
    /// uses the f32 path).
    pub fn quantize(&mut self, x: &[f32]) -> bool {
        self.quantize_opt(x, true)
    }

    fn quantize_opt(&mut self, x: &[f32], planes: bool) -> bool {
        self.size_for(x);
        #[cfg(target_arch = "x86_64")]
        let finite = if level() != Q16Level::Scalar {
            // SAFETY: level() is above Scalar only when the CPU has AVX2,
            // FMA and F16C; the buffers were sized above.
            unsafe { x86::quantize_avx2(x, &mut self.d, &mut self.q, &mut self.sums) }
        } else {
            self.quantize_blocks_scalar(x)
        };
        #[cfg(not(target_arch = "x86_64"))]
        let finite = self.quantize_blocks_scalar(x);
        for ((sd, su), d) in self
            .sdx
            .chunks_exact_mut(8)
            .zip(self.sums.chunks_exact(8))
            .zip(&self.d)
        {
            for (o, &v) in sd.iter_mut().zip(su) {
                *o = v as f32 * d;
            }
        }
        if planes {
            self.split();
        } else {
            self.h.clear();
            self.l.clear();
            self.hb.clear();
            self.lb.clear();
            self.p.clear();
            self.ht.clear();
            self.lt.clear();
        }
        finite
    }

    /// Size the buffers for `x` (a whole number of 256-value blocks).
    fn size_for(&mut self, x: &[f32]) {
        assert!(
            x.len().is_multiple_of(QK),
            "q16: activation length {}",
            x.len()
        );
        let nb = x.len() / QK;
        self.d.resize(nb, 0.0);
        self.q.resize(x.len(), 0);
        self.sums.resize(nb * 8, 0);
        self.sdx.resize(nb * 8, 0.0);
    }

    /// [`Q16Act::quantize`] without the byte planes, for the matrix-matrix
    /// kernel (which reads only `q`): large batches skip that work. The
    /// planes are left empty, so a dot kernel that needs them refuses the
    /// buffer (its size check) instead of reading stale values.
    pub fn quantize_for_gemm(&mut self, x: &[f32]) -> bool {
        self.quantize_opt(x, false)
    }

    /// Fill `h` and `l` from `q` (`q = 255·h + l`, `l` in ±127), `hb` and
    /// `lb` (`q = 256·hb + lb`, sub-blocks in [`SB_ORDER`]) and `p`
    /// ([`p_index`]); `q` holds whole blocks of [`QK`].
    fn split(&mut self) {
        static P_INDEX: std::sync::OnceLock<[u8; QK]> = std::sync::OnceLock::new();
        let pidx = P_INDEX.get_or_init(|| {
            let mut t = [0u8; QK];
            for (i, v) in t.iter_mut().enumerate() {
                *v = p_index(i) as u8;
            }
            t
        });
        let n = self.q.len();
        self.p.resize(n, 0);
        self.hb.resize(n, 0);
        self.lb.resize(n, 0);
        for (b, qc) in self.q.chunks_exact(QK).enumerate() {
            let pc = &mut self.p[b * QK..(b + 1) * QK];
            for (i, &v) in qc.iter().enumerate() {
                pc[pidx[i] as usize] = v;
            }
            for (pos, &sb) in SB_ORDER.iter().enumerate() {
                let src = &qc[32 * sb..32 * sb + 32];
                let o = b * QK + 32 * pos;
                for (j, &v) in src.iter().enumerate() {
                    self.hb[o + j] = (v >> 8) as i8;
                    self.lb[o + j] = (v & 255) as u8;
                }
            }
        }
        self.h.resize(self.q.len(), 0);
        self.l.resize(self.q.len(), 0);
        for ((q, h), l) in self.q.iter().zip(self.h.iter_mut()).zip(self.l.iter_mut()) {
            // (q + 16447) / 255 − 64 = round(q / 255) for |q| ≤ 16383 (the
            // offset keeps the dividend positive; 0x8081 >> 23 divides by 255).
            let hh = (((*q as i32 + 16447) * 0x8081) >> 23) - 64;
            *h = hh as i8;
            *l = (*q as i32 - 255 * hh) as i8;
        }
        let ls = lanes::src_table();
        self.ht.resize(n, 0);
        self.lt.resize(n, 0);
        for b in 0..n / QK {
            let o = b * QK;
            for (i, &src) in ls.iter().enumerate() {
                self.ht[o + i] = self.h[o + src as usize];
                self.lt[o + i] = self.l[o + src as usize];
            }
        }
    }

    /// The scalar twin of [`Q16Act::quantize`] (same results bit for bit).
    pub fn quantize_scalar(&mut self, x: &[f32]) -> bool {
        self.size_for(x);
        let finite = self.quantize_blocks_scalar(x);
        self.split();
        finite
    }

    /// The scalar quantizer proper (buffers already sized; no byte planes).
    fn quantize_blocks_scalar(&mut self, x: &[f32]) -> bool {
        let mut finite = true;
        for (b, xs) in x.chunks_exact(QK).enumerate() {
            let amax = xs.iter().fold(0f32, |a, v| a.max(v.abs()));
            if !amax.is_finite() || xs.iter().any(|v| v.is_nan()) {
                finite = false;
            }
            let (d, id) = if amax > 0.0 && amax.is_finite() {
                (amax / XMAX, XMAX / amax)
            } else {
                (0.0, 0.0)
            };
            self.d[b] = d;
            let qs = &mut self.q[b * QK..(b + 1) * QK];
            for (q, v) in qs.iter_mut().zip(xs) {
                // Round half to even, as the SIMD conversion does.
                *q = (v * id).round_ties_even().clamp(-XMAX, XMAX) as i16;
            }
            for j in 0..8 {
                self.sums[b * 8 + j] = qs[32 * j..32 * (j + 1)].iter().map(|&v| v as i32).sum();
            }
        }
        finite
    }

    /// The whole buffer as one view.
    pub fn view(&self) -> Q16Ref<'_> {
        Q16Ref {
            d: &self.d,
            q: &self.q,
            sums: &self.sums,
            h: &self.h,
            l: &self.l,
            hb: &self.hb,
            lb: &self.lb,
            p: &self.p,
            ht: &self.ht,
            lt: &self.lt,
        }
    }

    /// The view of vector `t` when `self` holds several of `n` values each.
    pub fn row(&self, t: usize, n: usize) -> Q16Ref<'_> {
        let nb = n / QK;
        Q16Ref {
            d: &self.d[t * nb..(t + 1) * nb],
            q: &self.q[t * n..(t + 1) * n],
            sums: &self.sums[t * nb * 8..(t + 1) * nb * 8],
            h: &self.h[t * n..(t + 1) * n],
            l: &self.l[t * n..(t + 1) * n],
            hb: &self.hb[t * n..(t + 1) * n],
            lb: &self.lb[t * n..(t + 1) * n],
            p: &self.p[t * n..(t + 1) * n],
            ht: &self.ht[t * n..(t + 1) * n],
            lt: &self.lt[t * n..(t + 1) * n],
        }
    }
}

/// Unpack one super-block (`bytes` of the type) into `u`.
pub type UnpackFn = fn(blk: &[u8], u: &mut Unpacked);
/// Dot of whole super-blocks of weights with quantized activations.
pub type DotQ16Fn = fn(data: &[u8], x: Q16Ref<'_>) -> f32;

/// The dot of one weight row with several tokens' activations:
/// `out[t] = dot(data, xs[t])` bit for bit, each weight block unpacked once
/// for all of them (`out.len() == xs.len()`).
pub type DotNQ16Fn = fn(data: &[u8], xs: &[Q16Ref<'_>], out: &mut [f32]);

/// The integer kernels of one tensor type.
#[derive(Clone, Copy)]
pub struct Q16Kernels {
    pub ty: GgmlType,
    /// Bytes of one super-block of 256 values.
    pub bytes: usize,
    /// Every `s_j` of a super-block is the same (integer sums run over all 256).
    pub uniform: bool,
    /// The type has offsets `m_j`.
    pub has_min: bool,
    /// Scalar reference unpacker (the specification).
    pub unpack_scalar: UnpackFn,
    /// The fastest unpacker on this CPU (bit-identical to the scalar one).
    pub unpack: UnpackFn,
    /// Scalar reference dot.
    pub dot_scalar: DotQ16Fn,
    /// The fastest dot on this CPU.
    pub dot: DotQ16Fn,
    /// `dot` over several tokens at once (same results, one unpack).
    pub dot_n: DotNQ16Fn,
}

/// The scalar dot over unpacked blocks: the reference the SIMD drivers are
/// tested against (they differ only in the order of f32 additions).
pub fn dot_unpacked_scalar(
    data: &[u8],
    bytes: usize,
    has_min: bool,
    unpack: UnpackFn,
    x: Q16Ref<'_>,
) -> f32 {
    let mut u = Unpacked::default();
    let mut acc = 0f32;
    for (b, blk) in data.chunks_exact(bytes).enumerate() {
        unpack(blk, &mut u);
        let dx = x.d[b];
        let xq = &x.q[b * QK..(b + 1) * QK];
        for j in 0..8 {
            let r = 32 * j..32 * (j + 1);
            let isum: i32 = u.w[r.clone()]
                .iter()
                .zip(&xq[r])
                .map(|(&w, &q)| w as i32 * q as i32)
                .sum();
            acc += isum as f32 * (u.s[j] * dx);
            if has_min {
                acc -= x.sums[b * 8 + j] as f32 * (u.m[j] * dx);
            }
        }
    }
    acc
}

// ---------------------------------------------------------------- unpackers

/// Q8_0: eight 34-byte blocks (f16 `d`, 32 × i8).
pub fn unpack_q8_0(blk: &[u8], u: &mut Unpacked) {
    for j in 0..8 {
        let b = &blk[34 * j..34 * (j + 1)];
        u.s[j] = f16_at(b, 0);
        u.m[j] = 0.0;
        for i in 0..32 {
            u.w[32 * j + i] = b[2 + i] as i8 as i16;
        }
    }
}

/// Q4_K: `w = sc_j · q`, `s = d`, `m_j = dmin · min_j`.
pub fn unpack_q4_k(b: &[u8], u: &mut Unpacked) {
    let d = f16_at(b, 0);
    let dmin = f16_at(b, 2);
    let (sc, m) = crate::kquants::scale_min_k4(&b[4..16]);
    let qs = &b[16..144];
    for k in 0..8 {
        let (j, h) = (k / 2, k % 2);
        u.s[k] = d;
        u.m[k] = dmin * m[k] as f32;
        for l in 0..32 {
            let q = (qs[32 * j + l] >> (4 * h)) & 0x0F;
            u.w[32 * k + l] = q as i16 * sc[k] as i16;
        }
    }
}

/// Q5_K: as Q4_K with a fifth bit from `qh`.
pub fn unpack_q5_k(b: &[u8], u: &mut Unpacked) {
    let d = f16_at(b, 0);
    let dmin = f16_at(b, 2);
    let (sc, m) = crate::kquants::scale_min_k4(&b[4..16]);
    let qh = &b[16..48];
    let qs = &b[48..176];
    for k in 0..8 {
        let (j, h) = (k / 2, k % 2);
        u.s[k] = d;
        u.m[k] = dmin * m[k] as f32;
        for l in 0..32 {
            let q = ((qs[32 * j + l] >> (4 * h)) & 0x0F) | (((qh[l] >> k) & 1) << 4);
            u.w[32 * k + l] = q as i16 * sc[k] as i16;
        }
    }
}

/// Q6_K: `w = sc_g · (q − 32)` with a signed scale per 16, `s = d`.
pub fn unpack_q6_k(b: &[u8], u: &mut Unpacked) {
    let ql = &b[0..128];
    let qh = &b[128..192];
    let sc = &b[192..208];
    let d = f16_at(b, 208);
    for (e, w) in u.w.iter_mut().enumerate() {
        let j = e / 128;
        let r = e % 128;
        let (h, l64) = (r / 64, r % 64);
        let (s, l) = (r / 32, r % 32);
        let lo = (ql[64 * j + l64] >> (4 * h)) & 0x0F;
        let hi = (qh[32 * j + l] >> (2 * s)) & 3;
        let q = (lo | (hi << 4)) as i16 - 32;
        *w = q * (sc[e / 16] as i8) as i16;
    }
    u.s = [d; 8];
    u.m = [0.0; 8];
}

/// IQ2_XS: `w = (2s+1) · ±grid`, `s = d / 8` (the dequantizer's
/// `d · (0.5 + s) · 0.25 · grid`).
pub fn unpack_iq2_xs(b: &[u8], u: &mut Unpacked) {
    use crate::iq_tables::{iq2xs_grid, ksigns_iq2xs};
    let d = f16_at(b, 0);
    for ib in 0..8 {
        let scb = b[66 + ib];
        for l in 0..4 {
            let sc = 2 * ((scb >> (4 * (l / 2))) & 0x0f) as i16 + 1;
            let q = u16_at(b, 2 + 2 * (4 * ib + l));
            let g = iq2xs_grid[(q & 511) as usize];
            let signs = ksigns_iq2xs[(q >> 9) as usize];
            for j in 0..8 {
                let v = (g >> (8 * j)) as u8 as i16;
                let v = if signs & (1 << j) != 0 { -v } else { v };
                u.w[32 * ib + 8 * l + j] = sc * v;
            }
        }
    }
    u.s = [d * 0.125; 8];
    u.m = [0.0; 8];
}

/// IQ1_M: `w = (2s+1) · (8·grid ± 1)`, `s = d / 8` (the dequantizer's
/// `d · (2s+1) · (grid ± 1/8)`).
pub fn unpack_iq1_m(b: &[u8], u: &mut Unpacked) {
    use crate::iq_tables::iq1s_grid;
    let sc = [u16_at(b, 48), u16_at(b, 50), u16_at(b, 52), u16_at(b, 54)];
    let dbits =
        (sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000);
    let d = half::f16::from_bits(dbits).to_f32();
    for ib in 0..8 {
        for l in 0..4 {
            let k = 4 * ib + l;
            let s = 2 * ((sc[ib / 2] >> (6 * (ib % 2) + 3 * (l / 2))) & 7) as i16 + 1;
            let nib = b[32 + k / 2] >> (4 * (k % 2));
            let idx = b[k] as usize | (((nib & 7) as usize) << 8);
            let g = iq1s_grid[idx & 2047];
            let delta: i16 = if nib & 8 != 0 { -1 } else { 1 };
            for j in 0..8 {
                let v = (g >> (8 * j)) as u8 as i8 as i16;
                u.w[8 * k + j] = s * (8 * v + delta);
            }
        }
    }
    u.s = [d * 0.125; 8];
    u.m = [0.0; 8];
}

// ------------------------------------------------------------------ drivers

/// A type's unpackers as a type, so the SIMD drivers are instantiated with
/// the unpacker inlined.
pub trait Unpack {
    const BYTES: usize;
    const UNIFORM: bool;
    const MIN: bool;
    fn scalar(blk: &[u8], u: &mut Unpacked);
    /// The SIMD unpacker (AVX2); bit-identical to `scalar`.
    ///
    /// # Safety
    /// The CPU must have AVX2, FMA and F16C; `blk.len() >= BYTES`.
    unsafe fn avx2(blk: &[u8], u: &mut Unpacked);
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod x86;

/// Which SIMD driver this CPU runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Q16Level {
    Scalar,
    Avx2,
    Avx512,
    Avx512Vnni,
}

/// The driver level for this CPU (at most [`crate::isa`], which may have
/// been lowered with [`crate::limit_isa`]).
pub fn level() -> Q16Level {
    use crate::Isa;
    match crate::isa() {
        Isa::Scalar => Q16Level::Scalar,
        Isa::Avx2 => {
            if has_f16c() {
                Q16Level::Avx2
            } else {
                Q16Level::Scalar
            }
        }
        Isa::Avx512 => {
            if !has_f16c() {
                Q16Level::Scalar
            } else if has_vnni() {
                Q16Level::Avx512Vnni
            } else {
                Q16Level::Avx512
            }
        }
    }
}

fn has_f16c() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("f16c")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

fn has_vnni() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512vnni")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Generates a type's `Unpack` impl, its scalar dot and its per-level dots.
macro_rules! q16_type {
    ($name:ident, $ty:expr, $bytes:expr, $uniform:expr, $min:expr, $scalar:path, $avx2:path) => {
        pub struct $name;
        impl Unpack for $name {
            const BYTES: usize = $bytes;
            const UNIFORM: bool = $uniform;
            const MIN: bool = $min;
            #[inline(always)]
            fn scalar(blk: &[u8], u: &mut Unpacked) {
                $scalar(blk, u)
            }
            #[inline(always)]
            unsafe fn avx2(blk: &[u8], u: &mut Unpacked) {
                $avx2(blk, u)
            }
        }
        impl $name {
            pub fn dot_scalar(data: &[u8], x: Q16Ref<'_>) -> f32 {
                dot_unpacked_scalar(data, $bytes, $min, $scalar, x)
            }
            pub fn unpack_fast(blk: &[u8], u: &mut Unpacked) {
                if level() == Q16Level::Scalar {
                    return $scalar(blk, u);
                }
                assert!(blk.len() >= $bytes);
                #[cfg(target_arch = "x86_64")]
                #[target_feature(enable = "avx2,fma,f16c")]
                unsafe fn fast(blk: &[u8], u: &mut Unpacked) {
                    $avx2(blk, u)
                }
                // SAFETY: level() is above Scalar only when the CPU has AVX2,
                // FMA and F16C; the block length was checked.
                unsafe { fast(blk, u) }
            }
            pub fn dot_n_scalar(data: &[u8], xs: &[Q16Ref<'_>], out: &mut [f32]) {
                assert_eq!(xs.len(), out.len(), "q16 dot_n: tokens and outputs");
                for (x, o) in xs.iter().zip(out.iter_mut()) {
                    *o = Self::dot_scalar(data, *x);
                }
            }
            pub fn dot_n_level(level: Q16Level) -> DotNQ16Fn {
                match level {
                    Q16Level::Scalar => Self::dot_n_scalar,
                    #[cfg(target_arch = "x86_64")]
                    Q16Level::Avx2 => |data, xs, out| {
                        // SAFETY: selected only when the CPU has AVX2, FMA
                        // and F16C; in_groups checks every size.
                        in_groups(data, $bytes, xs, out, |d, x, o| unsafe {
                            x86::dot_n_avx2::<$name>(d, x, o)
                        })
                    },
                    #[cfg(target_arch = "x86_64")]
                    Q16Level::Avx512 => |data, xs, out| {
                        // SAFETY: selected only when the CPU has AVX-512
                        // F/BW/VL, AVX2, FMA and F16C; sizes checked.
                        in_groups(data, $bytes, xs, out, |d, x, o| unsafe {
                            x86::dot_n_avx512::<$name>(d, x, o)
                        })
                    },
                    #[cfg(target_arch = "x86_64")]
                    Q16Level::Avx512Vnni => |data, xs, out| {
                        // SAFETY: as above, with AVX-512 VNNI detected.
                        in_groups(data, $bytes, xs, out, |d, x, o| unsafe {
                            x86::dot_n_avx512_vnni::<$name>(d, x, o)
                        })
                    },
                    #[cfg(not(target_arch = "x86_64"))]
                    _ => Self::dot_n_scalar,
                }
            }
            pub fn dot_level(level: Q16Level) -> DotQ16Fn {
                match level {
                    Q16Level::Scalar => Self::dot_scalar,
                    #[cfg(target_arch = "x86_64")]
                    Q16Level::Avx2 => |data, x| {
                        check_sizes(data, $bytes, x);
                        // SAFETY: selected only when the CPU has AVX2, FMA
                        // and F16C; sizes checked above.
                        unsafe { x86::dot_avx2::<$name>(data, x) }
                    },
                    #[cfg(target_arch = "x86_64")]
                    Q16Level::Avx512 => |data, x| {
                        check_sizes(data, $bytes, x);
                        // SAFETY: selected only when the CPU has AVX-512
                        // F/BW/VL, AVX2, FMA and F16C; sizes checked above.
                        unsafe { x86::dot_avx512::<$name>(data, x) }
                    },
                    #[cfg(target_arch = "x86_64")]
                    Q16Level::Avx512Vnni => |data, x| {
                        check_sizes(data, $bytes, x);
                        // SAFETY: as above, with AVX-512 VNNI detected.
                        unsafe { x86::dot_avx512_vnni::<$name>(data, x) }
                    },
                    #[cfg(not(target_arch = "x86_64"))]
                    _ => Self::dot_scalar,
                }
            }
        }
    };
}

/// Run a multi-token kernel over `xs` in groups of at most [`NMAX`], after
/// checking every token's size against `data`.
#[inline(always)]
fn in_groups(
    data: &[u8],
    bytes: usize,
    xs: &[Q16Ref<'_>],
    out: &mut [f32],
    f: impl Fn(&[u8], &[Q16Ref<'_>], &mut [f32]),
) {
    assert_eq!(xs.len(), out.len(), "q16 dot_n: tokens and outputs");
    for x in xs {
        check_sizes(data, bytes, *x);
    }
    for (xg, og) in xs.chunks(NMAX).zip(out.chunks_mut(NMAX)) {
        f(data, xg, og);
    }
}

/// The byte planes a byte-plane kernel reads are there (activations
/// quantized for the matrix-matrix kernel have none).
#[inline(always)]
fn check_planes(data: &[u8], bytes: usize, x: Q16Ref<'_>) {
    let n = data.len() / bytes * QK;
    assert!(
        x.h.len() >= n && x.l.len() >= n && x.hb.len() >= n && x.lb.len() >= n && x.p.len() >= n,
        "q16 byte-plane dot: {} weight values against {} planes",
        n,
        x.h.len()
            .min(x.l.len())
            .min(x.hb.len())
            .min(x.lb.len())
            .min(x.p.len())
    );
}

#[inline(always)]
fn check_sizes(data: &[u8], bytes: usize, x: Q16Ref<'_>) {
    let nb = data.len() / bytes;
    assert!(
        data.len() == nb * bytes
            && x.d.len() >= nb
            && x.q.len() >= nb * QK
            && x.sums.len() >= nb * 8,
        "q16 dot: {} weight bytes against {} activations",
        data.len(),
        x.q.len()
    );
}

q16_type!(
    Q80,
    GgmlType::Q8_0,
    272,
    false,
    false,
    unpack_q8_0,
    simd::unpack_q8_0
);
q16_type!(
    Q4K,
    GgmlType::Q4_K,
    144,
    true,
    true,
    unpack_q4_k,
    simd::unpack_q4_k
);
q16_type!(
    Q5K,
    GgmlType::Q5_K,
    176,
    true,
    true,
    unpack_q5_k,
    simd::unpack_q5_k
);
q16_type!(
    Q6K,
    GgmlType::Q6_K,
    210,
    true,
    false,
    unpack_q6_k,
    simd::unpack_q6_k
);
q16_type!(
    IQ2XS,
    GgmlType::IQ2_XS,
    74,
    true,
    false,
    unpack_iq2_xs,
    simd::unpack_iq2_xs
);
q16_type!(
    IQ1M,
    GgmlType::IQ1_M,
    56,
    true,
    false,
    unpack_iq1_m,
    simd::unpack_iq1_m
);

macro_rules! table {
    ($($name:ident => $ty:expr, $bytes:expr, $uniform:expr, $min:expr, $scalar:path;)*) => {
        /// Integer kernels of `ty` at driver level `level`, or `None` when
        /// the type has none (the caller uses the f32 path).
        pub fn kernels_at(ty: GgmlType, level: Q16Level) -> Option<Q16Kernels> {
            $(
                if ty == $ty {
                    return Some(Q16Kernels {
                        ty,
                        bytes: $bytes,
                        uniform: $uniform,
                        has_min: $min,
                        unpack_scalar: $scalar,
                        unpack: if level == Q16Level::Scalar { $scalar } else { $name::unpack_fast },
                        dot_scalar: $name::dot_scalar,
                        dot: byte_dot(ty, level)
                            .or(lattice_dot(ty, level))
                            .unwrap_or($name::dot_level(level)),
                        dot_n: byte_dot_n(ty, level)
                            .or(lattice_dot_n(ty, level))
                            .unwrap_or($name::dot_n_level(level)),
                    });
                }
            )*
            None
        }
    };
}

table! {
    Q80 => GgmlType::Q8_0, 272, false, false, unpack_q8_0;
    Q4K => GgmlType::Q4_K, 144, true, true, unpack_q4_k;
    Q5K => GgmlType::Q5_K, 176, true, true, unpack_q5_k;
    Q6K => GgmlType::Q6_K, 210, true, false, unpack_q6_k;
    IQ2XS => GgmlType::IQ2_XS, 74, true, false, unpack_iq2_xs;
    IQ1M => GgmlType::IQ1_M, 56, true, false, unpack_iq1_m;
}

/// The byte-plane decode kernel of `ty` at `level`, where one exists (Q4_K,
/// Q5_K: unsigned quants multiply the activations' byte planes directly).
fn byte_dot(ty: GgmlType, level: Q16Level) -> Option<DotQ16Fn> {
    if level == Q16Level::Scalar {
        return None;
    }
    #[cfg(target_arch = "x86_64")]
    {
        macro_rules! k1 {
            ($name:ident, $bytes:expr, $five:expr, $kernel:ident, $what:literal) => {
                fn $name(data: &[u8], x: Q16Ref<'_>) -> f32 {
                    check_sizes(data, $bytes, x);
                    check_planes(data, $bytes, x);
                    // SAFETY: chosen only at a level whose features the
                    // kernel enables ($what); sizes and planes checked.
                    unsafe { x86::$kernel::<$five>(data, x) }
                }
            };
        }
        k1!(q4_avx2, 144, false, dot_k_bytes, "AVX2, FMA, F16C");
        k1!(q5_avx2, 176, true, dot_k_bytes, "AVX2, FMA, F16C");
        k1!(q4_vnni, 144, false, dot_k_b512_vnni, "AVX-512 with VNNI");
        k1!(q5_vnni, 176, true, dot_k_b512_vnni, "AVX-512 with VNNI");
        k1!(q4_512, 144, false, dot_k_b512, "AVX-512 F/BW/VL");
        k1!(q5_512, 176, true, dot_k_b512, "AVX-512 F/BW/VL");
        let pick: [DotQ16Fn; 2] = match level {
            Q16Level::Avx512Vnni => [q4_vnni, q5_vnni],
            Q16Level::Avx512 => [q4_512, q5_512],
            _ => [q4_avx2, q5_avx2],
        };
        match ty {
            GgmlType::Q4_K => return Some(pick[0]),
            GgmlType::Q5_K => return Some(pick[1]),
            _ => {}
        }
    }
    None
}

/// The one-token dot of IQ1_M, IQ2_XS and Q6_K with their weights kept in
/// registers, at the AVX-512 levels (gathered table rows for the lattice
/// types; the same bits as the generic driver, which unpacks each block to
/// memory and stays the dot of these types below AVX-512).
fn lattice_dot(ty: GgmlType, level: Q16Level) -> Option<DotQ16Fn> {
    if level == Q16Level::Avx2 {
        return lattice_dot_avx2(ty);
    }
    if level < Q16Level::Avx512 {
        return None;
    }
    #[cfg(target_arch = "x86_64")]
    {
        macro_rules! z1 {
            ($name:ident, $bytes:expr, $u:ty, $kernel:ident, $what:literal) => {
                fn $name(data: &[u8], x: Q16Ref<'_>) -> f32 {
                    check_sizes(data, $bytes, x);
                    // SAFETY: chosen only at a level whose features the
                    // kernel enables ($what); sizes checked.
                    unsafe { x86::$kernel::<$u>(data, x) }
                }
            };
        }
        z1!(iq1_zv, 56, IQ1M, dot_zmm_vnni, "AVX-512 with VNNI");
        z1!(iq1_z, 56, IQ1M, dot_zmm_512, "AVX-512 F/BW/VL");
        z1!(iq2_zv, 74, IQ2XS, dot_zmm_vnni, "AVX-512 with VNNI");
        z1!(iq2_z, 74, IQ2XS, dot_zmm_512, "AVX-512 F/BW/VL");
        z1!(q6_zv, 210, Q6K, dot_zmm_vnni, "AVX-512 with VNNI");
        z1!(q6_z, 210, Q6K, dot_zmm_512, "AVX-512 F/BW/VL");
        let vn = level == Q16Level::Avx512Vnni;
        return match ty {
            GgmlType::IQ1_M => Some(if vn { iq1_zv } else { iq1_z }),
            GgmlType::IQ2_XS => Some(if vn { iq2_zv } else { iq2_z }),
            GgmlType::Q6_K => Some(if vn { q6_zv } else { q6_z }),
            _ => None,
        };
    }
    #[allow(unreachable_code)]
    None
}

/// The one-token dot of IQ1_M, IQ2_XS and Q6_K at the AVX2 level: the
/// unpack fused into the product ([`lat_avx2`], `simd_k::dot_q6_k_avx2`;
/// the generic driver's bits).
fn lattice_dot_avx2(ty: GgmlType) -> Option<DotQ16Fn> {
    #[cfg(target_arch = "x86_64")]
    {
        fn iq1(data: &[u8], x: Q16Ref<'_>) -> f32 {
            check_sizes(data, 56, x);
            // SAFETY: chosen only at the AVX2 level (AVX2, FMA and F16C
            // detected); sizes checked.
            unsafe { lat_avx2::dot_iq1_m_avx2(data, x) }
        }
        fn iq2(data: &[u8], x: Q16Ref<'_>) -> f32 {
            check_sizes(data, 74, x);
            // SAFETY: as above.
            unsafe { lat_avx2::dot_iq2_xs_avx2(data, x) }
        }
        fn q6(data: &[u8], x: Q16Ref<'_>) -> f32 {
            check_sizes(data, 210, x);
            // SAFETY: as above.
            unsafe { simd_k::dot_q6_k_avx2(data, x) }
        }
        return match ty {
            GgmlType::IQ1_M => Some(iq1),
            GgmlType::IQ2_XS => Some(iq2),
            GgmlType::Q6_K => Some(q6),
            _ => None,
        };
    }
    #[allow(unreachable_code)]
    {
        let _ = ty;
        None
    }
}

/// The multi-token twin of [`lattice_dot`]'s gathering kernels.
fn lattice_dot_n(ty: GgmlType, level: Q16Level) -> Option<DotNQ16Fn> {
    if level < Q16Level::Avx512 {
        return None;
    }
    #[cfg(target_arch = "x86_64")]
    {
        macro_rules! zn {
            ($name:ident, $bytes:expr, $u:ty, $kernel:ident, $what:literal) => {
                fn $name(data: &[u8], xs: &[Q16Ref<'_>], out: &mut [f32]) {
                    // SAFETY: chosen only at a level whose features the
                    // kernel enables ($what); in_groups checks every size.
                    in_groups(data, $bytes, xs, out, |d, x, o| unsafe {
                        x86::$kernel::<$u>(d, x, o)
                    })
                }
            };
        }
        zn!(iq1_zv, 56, IQ1M, dot_n_zmm_vnni, "AVX-512 with VNNI");
        zn!(iq1_z, 56, IQ1M, dot_n_zmm_512, "AVX-512 F/BW/VL");
        zn!(iq2_zv, 74, IQ2XS, dot_n_zmm_vnni, "AVX-512 with VNNI");
        zn!(iq2_z, 74, IQ2XS, dot_n_zmm_512, "AVX-512 F/BW/VL");
        zn!(q6_zv, 210, Q6K, dot_n_zmm_vnni, "AVX-512 with VNNI");
        zn!(q6_z, 210, Q6K, dot_n_zmm_512, "AVX-512 F/BW/VL");
        let vn = level == Q16Level::Avx512Vnni;
        return match ty {
            GgmlType::IQ1_M => Some(if vn { iq1_zv } else { iq1_z }),
            GgmlType::IQ2_XS => Some(if vn { iq2_zv } else { iq2_z }),
            GgmlType::Q6_K => Some(if vn { q6_zv } else { q6_z }),
            _ => None,
        };
    }
    #[allow(unreachable_code)]
    None
}

/// The multi-token twin of [`byte_dot`]: with AVX-512, the kernel that
/// widens each block once ([`x86::dot_k_n512_vnni`]); with AVX2, the
/// byte-plane kernel over several tokens.
fn byte_dot_n(ty: GgmlType, level: Q16Level) -> Option<DotNQ16Fn> {
    if level == Q16Level::Scalar {
        return None;
    }
    #[cfg(target_arch = "x86_64")]
    {
        macro_rules! kn {
            ($name:ident, $bytes:expr, $five:expr, $kernel:ident, $what:literal) => {
                fn $name(data: &[u8], xs: &[Q16Ref<'_>], out: &mut [f32]) {
                    xs.iter().for_each(|x| check_planes(data, $bytes, *x));
                    // SAFETY: chosen only at a level whose features the
                    // kernel enables ($what); in_groups checks every size
                    // and check_planes the planes it reads.
                    in_groups(data, $bytes, xs, out, |d, x, o| unsafe {
                        x86::$kernel::<$five>(d, x, o)
                    })
                }
            };
        }
        kn!(q4_avx2, 144, false, dot_k_bytes_n, "AVX2, FMA, F16C");
        kn!(q5_avx2, 176, true, dot_k_bytes_n, "AVX2, FMA, F16C");
        kn!(q4_512, 144, false, dot_k_n512, "AVX-512 F/BW/VL");
        kn!(q5_512, 176, true, dot_k_n512, "AVX-512 F/BW/VL");
        kn!(q4_vnni, 144, false, dot_k_n512_vnni, "AVX-512 with VNNI");
        kn!(q5_vnni, 176, true, dot_k_n512_vnni, "AVX-512 with VNNI");
        let pick: [DotNQ16Fn; 2] = match level {
            Q16Level::Avx512Vnni => [q4_vnni, q5_vnni],
            Q16Level::Avx512 => [q4_512, q5_512],
            _ => [q4_avx2, q5_avx2],
        };
        match ty {
            GgmlType::Q4_K => return Some(pick[0]),
            GgmlType::Q5_K => return Some(pick[1]),
            _ => {}
        }
    }
    None
}

/// Integer kernels of `ty` at this CPU's level.
pub fn kernels(ty: GgmlType) -> Option<Q16Kernels> {
    kernels_at(ty, level())
}

/// SIMD unpackers (AVX2; the AVX-512 drivers call them too). Each is
/// bit-identical to its scalar twin above.
pub(crate) mod simd {
    pub use super::simd_iq::{unpack_iq1_m, unpack_iq2_xs};
    pub use super::simd_k::{unpack_q4_k, unpack_q5_k, unpack_q6_k, unpack_q8_0};
}
#[cfg(target_arch = "x86_64")]
mod dec_avx2;
pub mod gemm;
pub mod lanes;
pub mod lat_avx2;
mod simd_iq;
mod simd_k;

#[cfg(test)]
mod tests {
    use super::*;

    /// IQ1_M block `n` of a set that gives every 12-bit grid key (11-bit
    /// index and the delta's sign) in every one of the 32 positions over
    /// 4096 blocks: entry `k` takes key `(n + 129k) mod 4096` (the low
    /// bytes in `blk[0..32]`, the high nibbles in `blk[32..48]`).
    pub(super) fn iq1m_keys(blk: &mut [u8], n: usize) {
        for k in 0..32 {
            let key = (n + 129 * k) % 4096;
            blk[k] = key as u8;
            let nib = (key >> 8) as u8;
            let sh = 4 * (k % 2);
            blk[32 + k / 2] = (blk[32 + k / 2] & !(0x0f << sh)) | (nib << sh);
        }
    }

    pub(super) fn rng(seed: u64) -> impl FnMut() -> u64 {
        let mut s = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        }
    }

    /// Random blocks with sane f16 scales (exponent kept small); also used
    /// by the gemm tests.
    pub(super) fn random_blocks(ty: GgmlType, n: usize, seed: u64) -> Vec<u8> {
        let mut r = rng(seed);
        let ts = ty.type_size();
        let per = QK / ty.block_size();
        let mut v: Vec<u8> = (0..n * per * ts).map(|_| r() as u8).collect();
        // Every f16 at a scale position: a small positive or negative value.
        let f16s: &[usize] = match ty {
            GgmlType::Q8_0 => &[0],
            GgmlType::Q4_K | GgmlType::Q5_K => &[0, 2],
            GgmlType::Q6_K => &[208],
            GgmlType::IQ2_XS => &[0],
            _ => &[],
        };
        for blk in v.chunks_exact_mut(ts) {
            for &o in f16s {
                let val = ((r() % 2000) as f32 / 1000.0 - 1.0) * 0.01;
                blk[o..o + 2].copy_from_slice(&half::f16::from_f32(val).to_bits().to_le_bytes());
            }
            if ty == GgmlType::IQ1_M {
                // Scale f16 lives in the top nibbles of the scale words.
                let bits = half::f16::from_f32(0.003 + (r() % 100) as f32 * 1e-4).to_bits();
                for (i, o) in [48usize, 50, 52, 54].iter().enumerate() {
                    let w = u16::from_le_bytes([blk[*o], blk[o + 1]]);
                    let w = (w & 0x0fff) | (((bits >> (4 * i)) & 0xf) << 12);
                    blk[*o..o + 2].copy_from_slice(&w.to_le_bytes());
                }
            }
        }
        v
    }

    pub(super) const TYPES: [GgmlType; 6] = [
        GgmlType::Q8_0,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
        GgmlType::IQ2_XS,
        GgmlType::IQ1_M,
    ];

    /// The scalar unpacker reproduces the scalar dequantizer: `s·w − m`
    /// equals the dequantized weight up to f32 rounding.
    #[test]
    fn unpack_matches_dequantizer() {
        for (i, ty) in TYPES.into_iter().enumerate() {
            let k = kernels_at(ty, Q16Level::Scalar).expect("kernels");
            let data = random_blocks(ty, 4, 11 + i as u64);
            let want = crate::dequantize_to_vec(ty, &data).expect("dequantize");
            let mut u = Unpacked::default();
            for (b, blk) in data.chunks_exact(k.bytes).enumerate() {
                (k.unpack_scalar)(blk, &mut u);
                assert!(
                    u.w.iter().all(|w| w.unsigned_abs() <= 4096),
                    "{ty}: |w| > 4096"
                );
                for e in 0..QK {
                    let got = u.s[e / 32] * u.w[e] as f32 - u.m[e / 32];
                    let w = want[b * QK + e];
                    assert!(
                        (got - w).abs() <= 1e-6 * w.abs().max(1e-3),
                        "{ty} block {b} value {e}: unpacked {got} vs dequantized {w}"
                    );
                }
                if k.uniform {
                    assert!(u.s.iter().all(|s| s == &u.s[0]), "{ty}: non-uniform scales");
                }
            }
        }
    }

    /// The fast unpacker is bit-identical to the scalar one.
    #[test]
    fn fast_unpack_matches_scalar() {
        for (i, ty) in TYPES.into_iter().enumerate() {
            let k = kernels(ty).expect("kernels");
            let data = random_blocks(ty, 16, 21 + i as u64);
            let (mut a, mut b) = (Unpacked::default(), Unpacked::default());
            for blk in data.chunks_exact(k.bytes) {
                (k.unpack_scalar)(blk, &mut a);
                (k.unpack)(blk, &mut b);
                assert_eq!(a.w, b.w, "{ty}: weights");
                assert_eq!(a.s.map(f32::to_bits), b.s.map(f32::to_bits), "{ty}: scales");
                assert_eq!(
                    a.m.map(f32::to_bits),
                    b.m.map(f32::to_bits),
                    "{ty}: offsets"
                );
            }
        }
    }

    pub(super) fn random_x(n: usize, seed: u64) -> Vec<f32> {
        let mut r = rng(seed);
        (0..n)
            .map(|i| {
                let v = (r() % 20001) as f32 / 10000.0 - 1.0;
                // A few outliers, as real hidden states have.
                if i % 97 == 0 {
                    v * 40.0
                } else {
                    v
                }
            })
            .collect()
    }

    /// Every driver level, lowest first (tests skip those above this CPU's).
    const ALL_LEVELS: [Q16Level; 4] = [
        Q16Level::Scalar,
        Q16Level::Avx2,
        Q16Level::Avx512,
        Q16Level::Avx512Vnni,
    ];

    /// Every driver level this CPU has agrees with the scalar dot, and the
    /// integer dot is within 15-bit rounding of the f32 dot.
    #[test]
    fn drivers_match_scalar_and_f32() {
        let levels = ALL_LEVELS;
        let top = level();
        for (i, ty) in TYPES.into_iter().enumerate() {
            for nb in [1usize, 2, 3, 8] {
                let data = random_blocks(ty, nb, 31 + i as u64 * 7 + nb as u64);
                let x = random_x(nb * QK, 5 + nb as u64);
                let mut a = Q16Act::default();
                assert!(a.quantize(&x));
                let w = crate::dequantize_to_vec(ty, &data).expect("dequantize");
                let exact: f64 = w.iter().zip(&x).map(|(a, b)| *a as f64 * *b as f64).sum();
                let scale: f64 = w
                    .iter()
                    .zip(&x)
                    .map(|(a, b)| (*a as f64 * *b as f64).abs())
                    .sum();
                let want = kernels_at(ty, Q16Level::Scalar).expect("k").dot_scalar;
                let want = want(&data, a.view());
                assert!(
                    ((want as f64) - exact).abs() <= 2e-4 * scale,
                    "{ty} {nb} blocks: q16 {want} vs exact {exact} (scale {scale})"
                );
                for lv in levels {
                    if lv > top {
                        continue;
                    }
                    let got = (kernels_at(ty, lv).expect("k").dot)(&data, a.view());
                    assert!(
                        ((got - want) as f64).abs() <= 1e-5 * scale + 1e-30,
                        "{ty} {lv:?} {nb} blocks: {got} vs scalar {want}"
                    );
                }
            }
        }
    }

    /// The multi-token dot equals the single-token dot of the same level
    /// bit for bit, for every token count (groups of NMAX included), every
    /// type and every level this CPU runs.
    /// The register-unpacking dots (IQ1_M, IQ2_XS, Q6_K) equal the generic
    /// AVX-512 driver (which unpacks each block to memory) bit for bit.
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn register_dots_equal_generic() {
        if !gemm::level_supported(Q16Level::Avx512Vnni) || level() < Q16Level::Avx512Vnni {
            return;
        }
        for (i, ty) in [GgmlType::IQ1_M, GgmlType::IQ2_XS, GgmlType::Q6_K]
            .into_iter()
            .enumerate()
        {
            for nb in [1usize, 7, 9, 33] {
                let data = random_blocks(ty, nb, 300 + i as u64 + nb as u64);
                let x = random_x(nb * QK, 40 + nb as u64);
                let mut a = Q16Act::default();
                assert!(a.quantize(&x));
                let xv = a.view();
                // SAFETY: the AVX-512 VNNI level (all the features these
                // kernels enable) was checked above; whole blocks.
                let (want, zmm) = unsafe {
                    match ty {
                        GgmlType::IQ1_M => (
                            x86::dot_avx512_vnni::<IQ1M>(&data, xv),
                            x86::dot_zmm_vnni::<IQ1M>(&data, xv),
                        ),
                        GgmlType::IQ2_XS => (
                            x86::dot_avx512_vnni::<IQ2XS>(&data, xv),
                            x86::dot_zmm_vnni::<IQ2XS>(&data, xv),
                        ),
                        _ => (
                            x86::dot_avx512_vnni::<Q6K>(&data, xv),
                            x86::dot_zmm_vnni::<Q6K>(&data, xv),
                        ),
                    }
                };
                assert_eq!(zmm.to_bits(), want.to_bits(), "{ty} nb {nb}: register dot");
            }
        }
    }

    /// The AVX2 fused Q6_K dot equals the generic AVX2 driver (which
    /// unpacks each block to memory) bit for bit, on random blocks and on
    /// blocks of extreme quants and scales.
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn q6_k_avx2_dot_equals_generic() {
        if level() < Q16Level::Avx2 {
            return;
        }
        for nb in [1usize, 2, 7, 33] {
            for extreme in [false, true] {
                let mut data = random_blocks(GgmlType::Q6_K, nb, 900 + nb as u64);
                if extreme {
                    // Quants 0 or 63 and scales ±127/−128: the largest
                    // weights (|sc·(q−32)| = 4096) the products meet.
                    for (bi, blk) in data.chunks_exact_mut(210).enumerate() {
                        for (i, v) in blk[..192].iter_mut().enumerate() {
                            *v = if (i + bi) % 3 == 0 { 0x00 } else { 0xFF };
                        }
                        for (g, v) in blk[192..208].iter_mut().enumerate() {
                            *v = [127u8, 0x80, 0x81, 1][(g + bi) % 4];
                        }
                    }
                }
                let x = random_x(nb * QK, 60 + nb as u64);
                let mut a = Q16Act::default();
                assert!(a.quantize(&x));
                let xv = a.view();
                // SAFETY: the AVX2 level (AVX2, FMA, F16C) was checked
                // above; whole blocks and activations for each.
                let (want, got) = unsafe {
                    (
                        x86::dot_avx2::<Q6K>(&data, xv),
                        simd_k::dot_q6_k_avx2(&data, xv),
                    )
                };
                assert_eq!(
                    got.to_bits(),
                    want.to_bits(),
                    "nb {nb} extreme {extreme}: {got} vs {want}"
                );
                // And through the dispatch: the AVX2 level's dot is it.
                let k = kernels_at(GgmlType::Q6_K, Q16Level::Avx2).expect("q6_k kernels");
                assert_eq!((k.dot)(&data, xv).to_bits(), want.to_bits());
            }
        }
    }

    #[test]
    fn dot_n_equals_dot_bit_for_bit() {
        let levels = ALL_LEVELS;
        let top = level();
        for (i, ty) in TYPES.into_iter().enumerate() {
            let nb = 3;
            let data = random_blocks(ty, nb, 77 + i as u64);
            let n_max = NMAX + 3;
            let x = random_x(n_max * nb * QK, 9 + i as u64);
            let mut a = Q16Act::default();
            assert!(a.quantize(&x));
            for lv in levels {
                if lv > top {
                    continue;
                }
                let k = kernels_at(ty, lv).expect("k");
                for n in [1usize, 2, 5, NMAX, n_max] {
                    let xs: Vec<Q16Ref<'_>> = (0..n).map(|t| a.row(t, nb * QK)).collect();
                    let mut got = vec![f32::NAN; n];
                    (k.dot_n)(&data, &xs, &mut got);
                    for (t, g) in got.iter().enumerate() {
                        let want = (k.dot)(&data, xs[t]);
                        assert_eq!(g.to_bits(), want.to_bits(), "{ty} {lv:?} n={n} token {t}");
                    }
                }
            }
        }
    }

    /// The SIMD quantizer equals the scalar one bit for bit, ties included.
    #[test]
    fn quantize_simd_matches_scalar() {
        for seed in 0..8u64 {
            let mut x = random_x(4 * QK, seed);
            // Exact ties: values landing on k + 0.5 after scaling.
            x[5] = 40.0;
            x[6] = 40.0 * 0.5 / XMAX;
            x[7] = -40.0 * 2.5 / XMAX;
            x[300] = 0.0;
            x[600] *= 1e-30;
            let (mut a, mut b) = (Q16Act::default(), Q16Act::default());
            assert_eq!(a.quantize(&x), b.quantize_scalar(&x));
            assert_eq!(a.q, b.q, "seed {seed}");
            assert_eq!(a.sums, b.sums, "seed {seed}");
            assert_eq!(
                a.d.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                b.d.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
            );
        }
    }

    /// Every representable activation splits exactly into two signed bytes.
    #[test]
    fn split_covers_every_value() {
        // Every value, plus one zero to make whole blocks of 256.
        let mut a = Q16Act {
            q: (-16383i16..=16383).chain([0]).collect(),
            ..Q16Act::default()
        };
        a.split();
        for ((q, h), l) in a.q.iter().zip(&a.h).zip(&a.l) {
            assert_eq!(*q as i32, 255 * *h as i32 + *l as i32, "q {q}");
            assert!(
                l.unsigned_abs() <= 127 && h.unsigned_abs() <= 64,
                "q {q}: {h} {l}"
            );
        }
        // The AVX-512 planes: q = 256·hb + lb with the sub-blocks of each
        // 256 in SB_ORDER, and p a permutation of each block's values.
        for (b, qc) in a.q.chunks_exact(QK).enumerate() {
            for (i, &q) in qc.iter().enumerate() {
                let pos = SB_ORDER.iter().position(|&s| s == i / 32).expect("order");
                let o = b * QK + 32 * pos + i % 32;
                assert_eq!(q as i32, 256 * a.hb[o] as i32 + a.lb[o] as i32, "q {q}");
                assert!((-64..=63).contains(&a.hb[o]), "q {q}");
                assert_eq!(a.p[b * QK + p_index(i)], q, "block {b} value {i}");
            }
        }
        let mut seen = [false; QK];
        for i in 0..QK {
            assert!(!seen[p_index(i)], "p_index repeats at {i}");
            seen[p_index(i)] = true;
        }
    }

    #[test]
    fn quantize_handles_zero_and_non_finite() {
        let mut a = Q16Act::default();
        assert!(a.quantize(&[0.0; 256]));
        assert_eq!(a.d[0], 0.0);
        assert!(a.q.iter().all(|&q| q == 0));
        let mut x = vec![1.0f32; 256];
        x[3] = f32::NAN;
        assert!(!a.quantize(&x));
        x[3] = f32::INFINITY;
        assert!(!a.quantize(&x));
        x[3] = -2.0;
        assert!(a.quantize(&x));
        assert_eq!(a.q[3], -16383);
        assert_eq!(a.q[0], 8192);
        assert_eq!(a.sums[0], 31 * 8192 - 16383);
    }
}
