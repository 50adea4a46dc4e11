#![allow(non_upper_case_globals)]
//! STUB: being written; every kernel here is a placeholder that must be replaced.

use crate::{GgmlType, TypeKernels};

fn unimplemented_dequant(_: &[u8], _: &mut [f32]) {
    unimplemented!("kernel not written yet")
}
fn unimplemented_dot(_: &[u8], _: &[f32]) -> f32 {
    unimplemented!("kernel not written yet")
}
pub static Q2_K: TypeKernels = TypeKernels {
    ty: GgmlType::Q2_K,
    dequant: unimplemented_dequant,
    dot_scalar: unimplemented_dot,
    dot_avx2: None,
    dot_avx512: None,
};
pub static Q3_K: TypeKernels = TypeKernels {
    ty: GgmlType::Q3_K,
    dequant: unimplemented_dequant,
    dot_scalar: unimplemented_dot,
    dot_avx2: None,
    dot_avx512: None,
};
pub static Q4_K: TypeKernels = TypeKernels {
    ty: GgmlType::Q4_K,
    dequant: unimplemented_dequant,
    dot_scalar: unimplemented_dot,
    dot_avx2: None,
    dot_avx512: None,
};
pub static Q5_K: TypeKernels = TypeKernels {
    ty: GgmlType::Q5_K,
    dequant: unimplemented_dequant,
    dot_scalar: unimplemented_dot,
    dot_avx2: None,
    dot_avx512: None,
};
pub static Q6_K: TypeKernels = TypeKernels {
    ty: GgmlType::Q6_K,
    dequant: unimplemented_dequant,
    dot_scalar: unimplemented_dot,
    dot_avx2: None,
    dot_avx512: None,
};
pub static Q8_K: TypeKernels = TypeKernels {
    ty: GgmlType::Q8_K,
    dequant: unimplemented_dequant,
    dot_scalar: unimplemented_dot,
    dot_avx2: None,
    dot_avx512: None,
};
