#![allow(non_upper_case_globals)]
//! STUB: being written; every kernel here is a placeholder that must be replaced.

use crate::{GgmlType, TypeKernels};

fn unimplemented_dequant(_: &[u8], _: &mut [f32]) {
    unimplemented!("kernel not written yet")
}
fn unimplemented_dot(_: &[u8], _: &[f32]) -> f32 {
    unimplemented!("kernel not written yet")
}
pub static IQ4_NL: TypeKernels = TypeKernels {
    ty: GgmlType::IQ4_NL,
    dequant: unimplemented_dequant,
    dot_scalar: unimplemented_dot,
    dot_avx2: None,
    dot_avx512: None,
};
pub static IQ4_XS: TypeKernels = TypeKernels {
    ty: GgmlType::IQ4_XS,
    dequant: unimplemented_dequant,
    dot_scalar: unimplemented_dot,
    dot_avx2: None,
    dot_avx512: None,
};
