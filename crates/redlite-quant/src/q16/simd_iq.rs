//! AVX2 unpackers (placeholders running the scalar twin until written).

use super::Unpacked;

/// # Safety
/// The CPU must have AVX2, FMA and F16C; `blk` holds a whole super-block.
#[inline(always)]
pub unsafe fn unpack_iq2_xs(blk: &[u8], u: &mut Unpacked) {
    super::unpack_iq2_xs(blk, u)
}

/// # Safety
/// The CPU must have AVX2, FMA and F16C; `blk` holds a whole super-block.
#[inline(always)]
pub unsafe fn unpack_iq1_m(blk: &[u8], u: &mut Unpacked) {
    super::unpack_iq1_m(blk, u)
}
