//! AVX2 unpackers (placeholders running the scalar twin until written).

use super::Unpacked;

/// # Safety
/// The CPU must have AVX2, FMA and F16C; `blk` holds a whole super-block.
#[inline]
pub unsafe fn unpack_q8_0(blk: &[u8], u: &mut Unpacked) {
    super::unpack_q8_0(blk, u)
}

/// # Safety
/// The CPU must have AVX2, FMA and F16C; `blk` holds a whole super-block.
#[inline]
pub unsafe fn unpack_q4_k(blk: &[u8], u: &mut Unpacked) {
    super::unpack_q4_k(blk, u)
}

/// # Safety
/// The CPU must have AVX2, FMA and F16C; `blk` holds a whole super-block.
#[inline]
pub unsafe fn unpack_q5_k(blk: &[u8], u: &mut Unpacked) {
    super::unpack_q5_k(blk, u)
}

/// # Safety
/// The CPU must have AVX2, FMA and F16C; `blk` holds a whole super-block.
#[inline]
pub unsafe fn unpack_q6_k(blk: &[u8], u: &mut Unpacked) {
    super::unpack_q6_k(blk, u)
}
