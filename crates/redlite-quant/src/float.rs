//! Plain float types: F32, F16, BF16.

use half::{bf16, f16};

use crate::{GgmlType, TypeKernels};

pub static F32: TypeKernels = TypeKernels {
    ty: GgmlType::F32,
    dequant: dequant_f32,
    dot_scalar: dot_f32,
    dot_avx2: None,
    dot_avx512: None,
};
pub static F16: TypeKernels = TypeKernels {
    ty: GgmlType::F16,
    dequant: dequant_f16,
    dot_scalar: dot_f16,
    dot_avx2: None,
    dot_avx512: None,
};
pub static BF16: TypeKernels = TypeKernels {
    ty: GgmlType::BF16,
    dequant: dequant_bf16,
    dot_scalar: dot_bf16,
    dot_avx2: None,
    dot_avx512: None,
};

pub fn dequant_f32(data: &[u8], out: &mut [f32]) {
    for (o, c) in out.iter_mut().zip(data.chunks_exact(4)) {
        *o = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
    }
}

pub fn dot_f32(data: &[u8], x: &[f32]) -> f32 {
    let mut s = 0f32;
    for (c, v) in data.chunks_exact(4).zip(x) {
        s += f32::from_le_bytes([c[0], c[1], c[2], c[3]]) * v;
    }
    s
}

pub fn dequant_f16(data: &[u8], out: &mut [f32]) {
    for (o, c) in out.iter_mut().zip(data.chunks_exact(2)) {
        *o = f16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32();
    }
}

pub fn dot_f16(data: &[u8], x: &[f32]) -> f32 {
    let mut s = 0f32;
    for (c, v) in data.chunks_exact(2).zip(x) {
        s += f16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32() * v;
    }
    s
}

pub fn dequant_bf16(data: &[u8], out: &mut [f32]) {
    for (o, c) in out.iter_mut().zip(data.chunks_exact(2)) {
        *o = bf16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32();
    }
}

pub fn dot_bf16(data: &[u8], x: &[f32]) -> f32 {
    let mut s = 0f32;
    for (c, v) in data.chunks_exact(2).zip(x) {
        s += bf16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32() * v;
    }
    s
}
