//! Element types of the KV cache: f32 (exact), bf16, f16, q8_0 (llama.cpp's
//! block: 32 values, an f16 scale, round to nearest) and q4_0 (32 values in
//! 4 bits around an f16 scale, llama.cpp's `quantize_row_q4_0_ref`).
//!
//! The cache stores keys and values in the chosen type ([`KvRows`] is a
//! block's elements as the attention kernel reads them); the kernel
//! converts one chunk of rows at a time to f32 ([`decode`]), never the
//! whole cache. Each conversion has a scalar reference and an AVX2 (F16C
//! for f16) twin chosen at run time; tests compare the two.

use std::fmt;
use std::str::FromStr;

use crate::kvslab::KvBuf;
use half::{bf16, f16};

/// Values per q8_0 block.
pub const QK8_0: usize = 32;

/// One q8_0 block, llama.cpp's `block_q8_0`: the scale `d` (f16 bits) and
/// 32 signed 8-bit values; value `i` is `d · qs[i]`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlockQ8_0 {
    pub d: u16,
    pub qs: [i8; QK8_0],
}

/// Values per q4_0 block.
pub const QK4_0: usize = 32;

/// One q4_0 block, llama.cpp's `block_q4_0`: the scale `d` (f16 bits) and
/// 32 4-bit values, value `j` in the low nibble of `qs[j]` and value `j +
/// 16` in its high nibble; a value is `d · (q − 8)`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlockQ4_0 {
    pub d: u16,
    pub qs: [u8; QK4_0 / 2],
}

/// The element type of a KV cache (keys and values each have one).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum KvType {
    /// Exact: the values as computed.
    #[default]
    F32,
    F16,
    Bf16,
    Q8_0,
    Q4_0,
}

impl KvType {
    pub const ALL: [KvType; 5] = [
        KvType::F32,
        KvType::F16,
        KvType::Bf16,
        KvType::Q8_0,
        KvType::Q4_0,
    ];

    /// llama.cpp's name (`f32`, `f16`, `bf16`, `q8_0`, `q4_0`).
    pub fn name(self) -> &'static str {
        match self {
            KvType::F32 => "f32",
            KvType::F16 => "f16",
            KvType::Bf16 => "bf16",
            KvType::Q8_0 => "q8_0",
            KvType::Q4_0 => "q4_0",
        }
    }

    /// Bytes that `n` values take in this type (`n` a multiple of 32 for
    /// q8_0 and q4_0).
    pub fn bytes(self, n: usize) -> usize {
        match self {
            KvType::F32 => n * 4,
            KvType::F16 | KvType::Bf16 => n * 2,
            KvType::Q8_0 => n.div_ceil(QK8_0) * std::mem::size_of::<BlockQ8_0>(),
            KvType::Q4_0 => n.div_ceil(QK4_0) * std::mem::size_of::<BlockQ4_0>(),
        }
    }

    /// Whether the type is one of the 32-value block formats.
    pub fn is_block(self) -> bool {
        matches!(self, KvType::Q8_0 | KvType::Q4_0)
    }

    /// Whether rows of `row` values can be stored in this type (q8_0 and
    /// q4_0 need whole blocks of 32 per row).
    pub fn fits_row(self, row: usize) -> bool {
        !self.is_block() || row.is_multiple_of(QK8_0)
    }
}

impl fmt::Display for KvType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for KvType {
    type Err = String;

    fn from_str(s: &str) -> Result<KvType, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "f32" => Ok(KvType::F32),
            "f16" => Ok(KvType::F16),
            "bf16" => Ok(KvType::Bf16),
            "q8_0" => Ok(KvType::Q8_0),
            "q4_0" => Ok(KvType::Q4_0),
            other => Err(format!(
                "{other:?} is not a KV cache type (use f32, f16, bf16, q8_0 or q4_0)"
            )),
        }
    }
}

/// The element types of keys and values.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct KvTypes {
    pub k: KvType,
    pub v: KvType,
}

/// One block's keys (or values) as stored, rows of `[n_head_kv, head_dim]`.
#[derive(Clone, Copy, Debug)]
pub enum KvRows<'a> {
    F32(&'a [f32]),
    /// f16 bits.
    F16(&'a [u16]),
    /// bf16 bits.
    Bf16(&'a [u16]),
    Q8_0(&'a [BlockQ8_0]),
    Q4_0(&'a [BlockQ4_0]),
}

impl KvRows<'_> {
    /// Values held.
    pub fn len(&self) -> usize {
        match self {
            KvRows::F32(x) => x.len(),
            KvRows::F16(x) | KvRows::Bf16(x) => x.len(),
            KvRows::Q8_0(x) => x.len() * QK8_0,
            KvRows::Q4_0(x) => x.len() * QK4_0,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn ty(&self) -> KvType {
        match self {
            KvRows::F32(_) => KvType::F32,
            KvRows::F16(_) => KvType::F16,
            KvRows::Bf16(_) => KvType::Bf16,
            KvRows::Q8_0(_) => KvType::Q8_0,
            KvRows::Q4_0(_) => KvType::Q4_0,
        }
    }
}

/// Owned storage of one block's keys or values in a [`KvType`].
#[derive(Clone, Debug)]
pub enum KvData {
    F32(KvBuf<f32>),
    F16(KvBuf<u16>),
    Bf16(KvBuf<u16>),
    Q8_0(KvBuf<BlockQ8_0>),
    Q4_0(KvBuf<BlockQ4_0>),
}

impl KvData {
    /// Empty storage with room for `n` values.
    pub fn with_capacity(ty: KvType, n: usize) -> KvData {
        match ty {
            KvType::F32 => KvData::F32(KvBuf::with_capacity(n)),
            KvType::F16 => KvData::F16(KvBuf::with_capacity(n)),
            KvType::Bf16 => KvData::Bf16(KvBuf::with_capacity(n)),
            KvType::Q8_0 => KvData::Q8_0(KvBuf::with_capacity(n.div_ceil(QK8_0))),
            KvType::Q4_0 => KvData::Q4_0(KvBuf::with_capacity(n.div_ceil(QK4_0))),
        }
    }

    /// Empty storage for a whole KV block of `n` values: in a huge-page
    /// slab where the size suits one ([`crate::kvslab`]), else as
    /// [`KvData::with_capacity`].
    pub fn block(ty: KvType, n: usize) -> KvData {
        match ty {
            KvType::F32 => KvData::F32(KvBuf::block(n)),
            KvType::F16 => KvData::F16(KvBuf::block(n)),
            KvType::Bf16 => KvData::Bf16(KvBuf::block(n)),
            KvType::Q8_0 => KvData::Q8_0(KvBuf::block(n.div_ceil(QK8_0))),
            KvType::Q4_0 => KvData::Q4_0(KvBuf::block(n.div_ceil(QK4_0))),
        }
    }

    /// Whether the values are in a huge-page slab.
    pub fn in_slab(&self) -> bool {
        match self {
            KvData::F32(x) => x.in_slab(),
            KvData::F16(x) | KvData::Bf16(x) => x.in_slab(),
            KvData::Q8_0(x) => x.in_slab(),
            KvData::Q4_0(x) => x.in_slab(),
        }
    }

    pub fn ty(&self) -> KvType {
        self.rows().ty()
    }

    pub fn rows(&self) -> KvRows<'_> {
        match self {
            KvData::F32(x) => KvRows::F32(x),
            KvData::F16(x) => KvRows::F16(x),
            KvData::Bf16(x) => KvRows::Bf16(x),
            KvData::Q8_0(x) => KvRows::Q8_0(x),
            KvData::Q4_0(x) => KvRows::Q4_0(x),
        }
    }

    /// Values held.
    pub fn len(&self) -> usize {
        self.rows().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes of the values held.
    pub fn bytes(&self) -> usize {
        self.ty().bytes(self.len())
    }

    /// Append `x` converted to the type (a multiple of 32 values for q8_0
    /// and q4_0).
    pub fn push(&mut self, x: &[f32]) {
        match self {
            KvData::F32(d) => d.extend_from_slice(x),
            KvData::F16(d) => d.extend(x.iter().map(|&v| f16::from_f32(v).to_bits())),
            KvData::Bf16(d) => d.extend(x.iter().map(|&v| bf16::from_f32(v).to_bits())),
            KvData::Q8_0(d) => {
                debug_assert!(x.len().is_multiple_of(QK8_0));
                d.extend(x.chunks_exact(QK8_0).map(quantize_q8_0));
            }
            KvData::Q4_0(d) => {
                debug_assert!(x.len().is_multiple_of(QK4_0));
                d.extend(x.chunks_exact(QK4_0).map(quantize_q4_0));
            }
        }
    }

    /// Keep the first `n` values (a multiple of 32 for q8_0 and q4_0).
    pub fn truncate(&mut self, n: usize) {
        match self {
            KvData::F32(d) => d.truncate(n),
            KvData::F16(d) | KvData::Bf16(d) => d.truncate(n),
            KvData::Q8_0(d) => d.truncate(n / QK8_0),
            KvData::Q4_0(d) => d.truncate(n / QK4_0),
        }
    }

    /// A copy of the first `n` values with room for `cap`.
    pub fn copy(&self, n: usize, cap: usize) -> KvData {
        self.copy_into(KvData::with_capacity(self.ty(), cap.max(n)), n)
    }

    /// A copy of the first `n` values as a whole block of `full` values
    /// ([`KvData::block`]).
    pub fn copy_block(&self, n: usize, full: usize) -> KvData {
        self.copy_into(KvData::block(self.ty(), full.max(n)), n)
    }

    fn copy_into(&self, mut e: KvData, n: usize) -> KvData {
        match (&mut e, self) {
            (KvData::F32(d), KvData::F32(s)) => d.extend_from_slice(&s[..n]),
            (KvData::F16(d), KvData::F16(s)) | (KvData::Bf16(d), KvData::Bf16(s)) => {
                d.extend_from_slice(&s[..n])
            }
            (KvData::Q8_0(d), KvData::Q8_0(s)) => d.extend_from_slice(&s[..n / QK8_0]),
            (KvData::Q4_0(d), KvData::Q4_0(s)) => d.extend_from_slice(&s[..n / QK4_0]),
            _ => unreachable!("a copy has the type of its source"),
        }
        e
    }

    /// The values `x` in the type, with room for `cap` (f32 keeps `x`).
    pub fn from_f32(ty: KvType, mut x: Vec<f32>, cap: usize) -> KvData {
        if ty == KvType::F32 {
            x.reserve(cap.saturating_sub(x.len()));
            return KvData::F32(KvBuf::from(x));
        }
        let mut d = KvData::with_capacity(ty, cap.max(x.len()));
        d.push(&x);
        d
    }
}

/// llama.cpp's `quantize_row_q8_0_ref` for one block: `d = amax / 127`,
/// `qs = round(x / d)` (half away from zero), `d` stored as f16.
pub fn quantize_q8_0(x: &[f32]) -> BlockQ8_0 {
    let amax = x.iter().fold(0f32, |a, &v| a.max(v.abs()));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut qs = [0i8; QK8_0];
    for (q, &v) in qs.iter_mut().zip(x) {
        *q = (v * id).round() as i8;
    }
    BlockQ8_0 {
        d: f16::from_f32(d).to_bits(),
        qs,
    }
}

/// llama.cpp's `quantize_row_q4_0_ref` for one block: the value of largest
/// magnitude `max` (its sign kept, the first one on ties) gives `d = max /
/// −8`, `q = min(15, trunc(x / d + 8.5))`, `d` stored as f16.
pub fn quantize_q4_0(x: &[f32]) -> BlockQ4_0 {
    let (mut amax, mut max) = (0f32, 0f32);
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    let d = max / -8.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let q = |v: f32| ((v * id + 8.5) as i32 as i8).min(15) as u8;
    let mut qs = [0u8; QK4_0 / 2];
    for (j, o) in qs.iter_mut().enumerate() {
        *o = q(x[j]) | (q(x[j + QK4_0 / 2]) << 4);
    }
    BlockQ4_0 {
        d: f16::from_f32(d).to_bits(),
        qs,
    }
}

/// Value `e` of a q4_0 block: `d · (q − 8)` in f32 (exact: 11 × 4 bits).
#[inline]
fn q4_0_value(b: &BlockQ4_0, e: usize) -> f32 {
    let byte = b.qs[e % (QK4_0 / 2)];
    let q = if e < QK4_0 / 2 {
        byte & 0x0F
    } else {
        byte >> 4
    };
    f16::from_bits(b.d).to_f32() * (q as i32 - 8) as f32
}

/// Scalar reference of [`decode`].
pub fn decode_scalar(src: KvRows<'_>, start: usize, out: &mut [f32]) {
    let n = out.len();
    match src {
        KvRows::F32(x) => out.copy_from_slice(&x[start..start + n]),
        KvRows::F16(x) => out
            .iter_mut()
            .zip(&x[start..start + n])
            .for_each(|(o, &h)| *o = f16::from_bits(h).to_f32()),
        KvRows::Bf16(x) => out
            .iter_mut()
            .zip(&x[start..start + n])
            .for_each(|(o, &h)| *o = f32::from_bits((h as u32) << 16)),
        KvRows::Q8_0(x) => {
            for (i, o) in out.iter_mut().enumerate() {
                let e = start + i;
                let b = &x[e / QK8_0];
                *o = f16::from_bits(b.d).to_f32() * b.qs[e % QK8_0] as f32;
            }
        }
        KvRows::Q4_0(x) => {
            for (i, o) in out.iter_mut().enumerate() {
                let e = start + i;
                *o = q4_0_value(&x[e / QK4_0], e % QK4_0);
            }
        }
    }
}

/// `out = src[start .. start + out.len()]` as f32 (exactly: every stored
/// type widens to f32 without rounding; q8_0 is `d · q` and q4_0 `d · (q −
/// 8)` in f32).
#[inline]
pub fn decode(src: KvRows<'_>, start: usize, out: &mut [f32]) {
    assert!(start + out.len() <= src.len(), "kv decode: range");
    #[cfg(target_arch = "x86_64")]
    {
        let aligned = start.is_multiple_of(QK8_0) && out.len().is_multiple_of(QK8_0);
        match src {
            KvRows::F16(x) if has_f16c() => {
                // SAFETY: AVX and F16C were detected; the range was checked.
                unsafe { x86::f16_to_f32_f16c(&x[start..start + out.len()], out) };
                return;
            }
            KvRows::Bf16(x) if crate::simd::has_avx2() => {
                // SAFETY: AVX2 was detected; the range was checked.
                unsafe { x86::bf16_to_f32_avx2(&x[start..start + out.len()], out) };
                return;
            }
            KvRows::Q8_0(x) if aligned && crate::simd::has_avx2() => {
                let b0 = start / QK8_0;
                // SAFETY: AVX2 was detected; whole blocks in range.
                unsafe { x86::q8_0_to_f32_avx2(&x[b0..b0 + out.len() / QK8_0], out) };
                return;
            }
            KvRows::Q4_0(x) if aligned && crate::simd::has_avx2() => {
                let b0 = start / QK4_0;
                // SAFETY: AVX2 was detected; whole blocks in range.
                unsafe { x86::q4_0_to_f32_avx2(&x[b0..b0 + out.len() / QK4_0], out) };
                return;
            }
            _ => {}
        }
    }
    decode_scalar(src, start, out)
}

#[cfg(target_arch = "x86_64")]
pub(crate) fn has_f16c() -> bool {
    crate::simd::has_avx2() && std::arch::is_x86_feature_detected!("f16c")
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{BlockQ4_0, BlockQ8_0, QK4_0, QK8_0};
    use std::arch::x86_64::*;

    #[target_feature(enable = "avx,f16c")]
    pub unsafe fn f16_to_f32_f16c(src: &[u16], out: &mut [f32]) {
        let n = out.len().min(src.len());
        let mut i = 0;
        // SAFETY: i + 8 <= n bounds every load and store.
        unsafe {
            while i + 8 <= n {
                let h = _mm_loadu_si128(src.as_ptr().add(i) as *const __m128i);
                _mm256_storeu_ps(out.as_mut_ptr().add(i), _mm256_cvtph_ps(h));
                i += 8;
            }
        }
        for j in i..n {
            out[j] = half::f16::from_bits(src[j]).to_f32();
        }
    }

    #[target_feature(enable = "avx2")]
    pub unsafe fn bf16_to_f32_avx2(src: &[u16], out: &mut [f32]) {
        let n = out.len().min(src.len());
        let mut i = 0;
        // SAFETY: i + 8 <= n bounds every load and store.
        unsafe {
            while i + 8 <= n {
                let h = _mm_loadu_si128(src.as_ptr().add(i) as *const __m128i);
                let w = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
                _mm256_storeu_ps(out.as_mut_ptr().add(i), _mm256_castsi256_ps(w));
                i += 8;
            }
        }
        for j in i..n {
            out[j] = f32::from_bits((src[j] as u32) << 16);
        }
    }

    #[target_feature(enable = "avx2")]
    pub unsafe fn q8_0_to_f32_avx2(src: &[BlockQ8_0], out: &mut [f32]) {
        for (b, o) in src.iter().zip(out.chunks_exact_mut(QK8_0)) {
            let d = _mm256_set1_ps(half::f16::from_bits(b.d).to_f32());
            // SAFETY: a block holds 32 bytes of values; `o` holds 32 floats.
            unsafe {
                let q = b.qs.as_ptr();
                for k in 0..4 {
                    let v8 = _mm_loadl_epi64(q.add(8 * k) as *const __m128i);
                    let f = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v8));
                    _mm256_storeu_ps(o.as_mut_ptr().add(8 * k), _mm256_mul_ps(f, d));
                }
            }
        }
    }

    #[target_feature(enable = "avx2")]
    pub unsafe fn q4_0_to_f32_avx2(src: &[BlockQ4_0], out: &mut [f32]) {
        for (b, o) in src.iter().zip(out.chunks_exact_mut(QK4_0)) {
            let d = _mm256_set1_ps(half::f16::from_bits(b.d).to_f32());
            // SAFETY: a block holds 16 bytes of nibbles; `o` holds 32 floats.
            unsafe {
                let raw = _mm_loadu_si128(b.qs.as_ptr() as *const __m128i);
                let m = _mm_set1_epi8(0x0F);
                let eight = _mm_set1_epi8(8);
                // Values 0..16 (low nibbles) then 16..32 (high nibbles).
                let lo = _mm_sub_epi8(_mm_and_si128(raw, m), eight);
                let hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(raw, 4), m), eight);
                for (k, half) in [lo, lo, hi, hi].into_iter().enumerate() {
                    let v8 = if k % 2 == 0 {
                        half
                    } else {
                        _mm_srli_si128(half, 8)
                    };
                    let f = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v8));
                    _mm256_storeu_ps(o.as_mut_ptr().add(8 * k), _mm256_mul_ps(f, d));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rand(n: usize, seed: u64) -> Vec<f32> {
        let mut r = crate::test_util::Rng(seed);
        (0..n)
            .map(|i| {
                let u = r.unit() - 0.5;
                // Mixed magnitudes, some zeros and a whole zero block.
                if i % 97 == 0 || (64..96).contains(&i) {
                    0.0
                } else {
                    u * [1e-3f32, 1.0, 40.0][i % 3]
                }
            })
            .collect()
    }

    /// Every type: the run-time kernel equals the scalar reference bit for
    /// bit, at aligned and unaligned starts and odd lengths; and the stored
    /// values are within the type's rounding of the input.
    #[test]
    fn decode_matches_scalar_and_input() {
        let x = rand(32 * 41, 7);
        for ty in KvType::ALL {
            let mut d = KvData::with_capacity(ty, x.len());
            d.push(&x);
            assert_eq!(d.len(), x.len());
            assert_eq!(d.bytes(), ty.bytes(x.len()));
            for (start, n) in [(0, x.len()), (32, 256), (64, 64), (5, 37), (33, 1)] {
                let mut a = vec![f32::NAN; n];
                let mut b = vec![f32::NAN; n];
                decode(d.rows(), start, &mut a);
                decode_scalar(d.rows(), start, &mut b);
                let same = a.iter().zip(&b).all(|(p, q)| p.to_bits() == q.to_bits());
                assert!(same, "{ty}: SIMD vs scalar at {start}+{n}");
            }
            let mut all = vec![0f32; x.len()];
            decode(d.rows(), 0, &mut all);
            for (blk, (xs, ys)) in x.chunks(32).zip(all.chunks(32)).enumerate() {
                let amax = xs.iter().fold(0f32, |a, v| a.max(v.abs()));
                for (&xv, &yv) in xs.iter().zip(ys) {
                    let tol = match ty {
                        KvType::F32 => 0.0,
                        KvType::F16 => xv.abs() * 4.9e-4 + 6e-8,
                        KvType::Bf16 => xv.abs() * 3.9e-3,
                        // Half a step plus the f16 rounding of the scale times 127.
                        KvType::Q8_0 => amax / 127.0 * 0.57,
                        // A step of amax / 8 (half a step, but the side opposite
                        // the largest value ends at 7 steps: values beyond are cut
                        // to it), plus the scale's rounding times 8.
                        KvType::Q4_0 => amax / 8.0 * 1.01 + amax * 4.9e-4 * 8.0,
                    };
                    assert!((xv - yv).abs() <= tol, "{ty} block {blk}: {xv} -> {yv}");
                }
            }
        }
    }

    /// q8_0 against llama.cpp's reference arithmetic written out: a known
    /// block quantizes to known bytes.
    #[test]
    fn q8_0_matches_llama_cpp_reference() {
        let mut x = [0f32; 32];
        for (i, v) in x.iter_mut().enumerate() {
            *v = (i as f32 - 15.5) * 0.25;
        }
        // amax = 16 * 0.25 = 4.0 at i = 31 (15.5 * 0.25 = 3.875 at 0).
        x[31] = 4.0;
        let b = quantize_q8_0(&x);
        let d = 4.0f32 / 127.0;
        assert_eq!(b.d, f16::from_f32(d).to_bits());
        assert_eq!(b.qs[31], 127);
        // -3.875 / (4/127) = -123.03 -> -123; 0.125*127/4 = 3.97 -> 4.
        assert_eq!(b.qs[0], -123);
        assert_eq!(b.qs[16], 4);
        // Ties round away from zero (C roundf): 0.5 -> 1, -0.5 -> -1.
        let mut t = [0f32; 32];
        t[0] = 127.0;
        t[1] = 0.5;
        t[2] = -0.5;
        t[3] = 2.5;
        let b = quantize_q8_0(&t);
        assert_eq!(&b.qs[..4], &[127, 1, -1, 3]);
        assert_eq!(quantize_q8_0(&[0.0; 32]), BlockQ8_0::default());
    }

    #[test]
    fn names_parse_as_llama_cpp_spells_them() {
        for ty in KvType::ALL {
            assert_eq!(ty.name().parse::<KvType>(), Ok(ty));
        }
        assert_eq!("Q8_0".parse::<KvType>(), Ok(KvType::Q8_0));
        assert_eq!("Q4_0".parse::<KvType>(), Ok(KvType::Q4_0));
        assert!("q4_1".parse::<KvType>().is_err());
        assert_eq!(KvType::Q4_0.bytes(256), 8 * 18);
        assert_eq!(std::mem::size_of::<BlockQ4_0>(), 18);
        assert_eq!(KvType::Q8_0.bytes(256), 8 * 34);
        assert_eq!(std::mem::size_of::<BlockQ8_0>(), 34);
    }

    /// The block types' bytes against the quant crate's ports of ggml
    /// (`quantize_row_q8_0_ref`, `quantize_row_q4_0_ref` and their
    /// dequantizers), written and tested there against llama-quantize's
    /// files: the same bytes for every block, and the same values read
    /// back.
    #[test]
    fn block_types_match_the_quant_crate() {
        use redlite_quant::quantize::quantize_rows;
        use redlite_quant::GgmlType;
        let mut x = rand(32 * 64, 11);
        // Ties and extremes: a block whose largest magnitude is negative,
        // one with two of equal magnitude and opposite sign, values at the
        // rounding boundaries of q4_0 (x / d + 8.5 landing on integers).
        for j in 0..32 {
            x[128 + j] = (j as f32 - 16.0) * 0.5;
            x[160 + j] = if j % 2 == 0 { 3.0 } else { -3.0 };
            x[192 + j] = -8.0 + j as f32 * 0.25;
        }
        for (ty, gt) in [
            (KvType::Q8_0, GgmlType::Q8_0),
            (KvType::Q4_0, GgmlType::Q4_0),
        ] {
            let mut d = KvData::with_capacity(ty, x.len());
            d.push(&x);
            let ours: Vec<u8> = match &d {
                KvData::Q8_0(b) => b
                    .iter()
                    .flat_map(|b| {
                        let mut v = b.d.to_le_bytes().to_vec();
                        v.extend(b.qs.iter().map(|&q| q as u8));
                        v
                    })
                    .collect(),
                KvData::Q4_0(b) => b
                    .iter()
                    .flat_map(|b| {
                        let mut v = b.d.to_le_bytes().to_vec();
                        v.extend_from_slice(&b.qs);
                        v
                    })
                    .collect(),
                _ => unreachable!(),
            };
            let mut theirs = vec![0u8; ty.bytes(x.len())];
            quantize_rows(gt, &x, 32, None, &mut theirs).expect("quantize");
            assert_eq!(ours, theirs, "{ty}: bytes");
            let mut want = vec![0f32; x.len()];
            match ty {
                KvType::Q8_0 => redlite_quant::legacy::dequant_q8_0(&theirs, &mut want),
                _ => redlite_quant::legacy::dequant_q4_0(&theirs, &mut want),
            }
            let mut got = vec![0f32; x.len()];
            decode(d.rows(), 0, &mut got);
            assert_eq!(got, want, "{ty}: values");
            decode_scalar(d.rows(), 0, &mut got);
            assert_eq!(got, want, "{ty}: scalar values");
        }
    }
}
