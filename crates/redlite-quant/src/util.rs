//! Small helpers shared by the block kernels.

use half::f16;

#[inline(always)]
pub fn f16_at(b: &[u8], off: usize) -> f32 {
    f16::from_bits(u16::from_le_bytes([b[off], b[off + 1]])).to_f32()
}

#[inline(always)]
pub fn f32_at(b: &[u8], off: usize) -> f32 {
    f32::from_le_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

#[inline(always)]
pub fn u16_at(b: &[u8], off: usize) -> u16 {
    u16::from_le_bytes([b[off], b[off + 1]])
}

#[inline(always)]
pub fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

/// Scalar dot product used by reference kernels: dequantize one block at a
/// time into a stack buffer, then accumulate in f32 in element order.
#[inline(always)]
pub fn dot_via_dequant<const BS: usize>(
    data: &[u8],
    x: &[f32],
    type_size: usize,
    dequant_block: impl Fn(&[u8], &mut [f32; BS]),
) -> f32 {
    let mut buf = [0f32; BS];
    let mut sum = 0f32;
    for (blk, xs) in data.chunks_exact(type_size).zip(x.chunks_exact(BS)) {
        dequant_block(blk, &mut buf);
        let mut s = 0f32;
        for (w, v) in buf.iter().zip(xs) {
            s += w * v;
        }
        sum += s;
    }
    sum
}

/// Dequantize whole blocks with a per-block function.
#[inline(always)]
pub fn dequant_blocks<const BS: usize>(
    data: &[u8],
    out: &mut [f32],
    type_size: usize,
    dequant_block: impl Fn(&[u8], &mut [f32; BS]),
) {
    for (blk, o) in data.chunks_exact(type_size).zip(out.chunks_exact_mut(BS)) {
        let o: &mut [f32; BS] = o.try_into().expect("chunks_exact yields BS elements");
        dequant_block(blk, o);
    }
}

/// Whether the CPU converts f16 in hardware (F16C); the SIMD kernels use it
/// for block scales and fall back to the scalar twin without it.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub fn has_f16c() -> bool {
    std::arch::is_x86_feature_detected!("f16c")
}

/// Horizontal sum of an AVX2 vector of 8 f32.
///
/// # Safety
/// The CPU must have AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
pub unsafe fn hsum256(v: std::arch::x86_64::__m256) -> f32 {
    use std::arch::x86_64::*;
    let lo = _mm256_castps256_ps128(v);
    let hi = _mm256_extractf128_ps::<1>(v);
    let s = _mm_add_ps(lo, hi);
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}

/// One f16 at `p` (unaligned) converted with F16C.
///
/// # Safety
/// `p` must be valid for reading 2 bytes; the CPU must have F16C.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "f16c")]
#[inline]
pub unsafe fn f16_ptr(p: *const u8) -> f32 {
    use std::arch::x86_64::*;
    let h = std::ptr::read_unaligned(p as *const u16);
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h as i32)))
}
