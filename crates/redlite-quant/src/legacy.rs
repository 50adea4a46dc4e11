#![allow(non_upper_case_globals)]
//! STUB: being written; every kernel here is a placeholder that must be replaced.

use crate::{GgmlType, TypeKernels};

fn unimplemented_dequant(_: &[u8], _: &mut [f32]) {
    unimplemented!("kernel not written yet")
}
fn unimplemented_dot(_: &[u8], _: &[f32]) -> f32 {
    unimplemented!("kernel not written yet")
}
pub static Q4_0: TypeKernels = TypeKernels {
    ty: GgmlType::Q4_0,
    dequant: unimplemented_dequant,
    dot_scalar: unimplemented_dot,
    dot_avx2: None,
    dot_avx512: None,
};
pub static Q4_1: TypeKernels = TypeKernels {
    ty: GgmlType::Q4_1,
    dequant: unimplemented_dequant,
    dot_scalar: unimplemented_dot,
    dot_avx2: None,
    dot_avx512: None,
};
pub static Q5_0: TypeKernels = TypeKernels {
    ty: GgmlType::Q5_0,
    dequant: unimplemented_dequant,
    dot_scalar: unimplemented_dot,
    dot_avx2: None,
    dot_avx512: None,
};
pub static Q5_1: TypeKernels = TypeKernels {
    ty: GgmlType::Q5_1,
    dequant: unimplemented_dequant,
    dot_scalar: unimplemented_dot,
    dot_avx2: None,
    dot_avx512: None,
};
pub static Q8_0: TypeKernels = TypeKernels {
    ty: GgmlType::Q8_0,
    dequant: unimplemented_dequant,
    dot_scalar: unimplemented_dot,
    dot_avx2: None,
    dot_avx512: None,
};
