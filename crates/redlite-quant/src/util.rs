//! Small helpers shared by the block kernels.

use half::f16;

#[inline(always)]
pub fn f16_at(b: &[u8], off: usize) -> f32 {
    f16::from_bits(u16::from_le_bytes([b[off], b[off + 1]])).to_f32()
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
