//! Quantizers: f32 rows into the block formats, as ggml's
//! `ggml_quantize_chunk` writes them (llama.cpp 0c1e570).
//!
//! Every function here is a port of ggml's C reference (`quantize_row_*_ref`
//! and, with an importance matrix, the weighted searches `quantize_row_*_impl`),
//! with the same operation order, the same f32 arithmetic (no fused
//! multiply-adds), `nearest_int`'s rounding trick and the same `GROUP_MAX_EPS`
//! constants, so that the bytes equal llama-quantize's for the same input.
//! These scalar ports are the specification; they are tested against the
//! SHA-256 of llama-quantize's output tensors (`redlite-quantize`'s manifest
//! test) and, where a fixture file exists, block by block.
//!
//! `quantize_rows` is the entry point: whole rows of `n_per_row` values in,
//! whole rows of blocks out, with an optional importance matrix of
//! `n_per_row` weights shared by the rows (one expert's slice).
//! NVFP4 (which llama-quantize does not make either) is not implemented and
//! answers [`QuantizeError::NotImplemented`].

mod iq3;
mod iq4;
mod kquants;
mod lattice;
mod legacy;

use crate::GgmlType;

/// Why a quantization cannot be done.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum QuantizeError {
    #[error("quantizing to {0} is not implemented yet")]
    NotImplemented(GgmlType),
    #[error("quantizing to {0} needs an importance matrix")]
    NeedsImatrix(GgmlType),
    #[error("{ty}: row length {n_per_row} is not a multiple of the block size {block}")]
    RowLength {
        ty: GgmlType,
        n_per_row: usize,
        block: usize,
    },
    #[error("{ty}: {values} values are not whole rows of {n_per_row}, or the output has {bytes} bytes instead of {expected}")]
    Size {
        ty: GgmlType,
        values: usize,
        n_per_row: usize,
        bytes: usize,
        expected: usize,
    },
    #[error("{ty}: the importance matrix has {got} values, a row has {n_per_row}")]
    Imatrix {
        ty: GgmlType,
        got: usize,
        n_per_row: usize,
    },
}

/// Whether `quantize_rows` can produce `ty`.
pub fn is_implemented(ty: GgmlType) -> bool {
    use GgmlType::*;
    matches!(
        ty,
        F32 | F16
            | BF16
            | Q4_0
            | Q4_1
            | Q5_0
            | Q5_1
            | Q8_0
            | Q1_0
            | Q2_0
            | MXFP4
            | TQ1_0
            | TQ2_0
            | Q2_K
            | Q3_K
            | Q4_K
            | Q5_K
            | Q6_K
            | IQ4_NL
            | IQ4_XS
            | IQ2_XXS
            | IQ2_XS
            | IQ2_S
            | IQ3_XXS
            | IQ3_S
            | IQ1_S
            | IQ1_M
    )
}

/// `ggml_quantize_requires_imatrix`: the types ggml refuses to make without one.
pub fn requires_imatrix(ty: GgmlType) -> bool {
    matches!(ty, GgmlType::IQ2_XXS | GgmlType::IQ2_XS | GgmlType::IQ1_S)
}

/// Quantize whole rows of `src` (`n_per_row` values each) into `dst`
/// (`ty`'s row size times the number of rows), as `ggml_quantize_chunk`.
/// `imatrix`, when given, holds one weight per column and applies to every row.
pub fn quantize_rows(
    ty: GgmlType,
    src: &[f32],
    n_per_row: usize,
    imatrix: Option<&[f32]>,
    dst: &mut [u8],
) -> Result<(), QuantizeError> {
    if !is_implemented(ty) {
        return Err(QuantizeError::NotImplemented(ty));
    }
    let bs = ty.block_size();
    if n_per_row == 0 || !n_per_row.is_multiple_of(bs) {
        return Err(QuantizeError::RowLength {
            ty,
            n_per_row,
            block: bs,
        });
    }
    let row_bytes = n_per_row / bs * ty.type_size();
    let nrows = src.len() / n_per_row;
    if !src.len().is_multiple_of(n_per_row) || dst.len() != nrows * row_bytes {
        return Err(QuantizeError::Size {
            ty,
            values: src.len(),
            n_per_row,
            bytes: dst.len(),
            expected: nrows * row_bytes,
        });
    }
    if let Some(w) = imatrix {
        if w.len() != n_per_row {
            return Err(QuantizeError::Imatrix {
                ty,
                got: w.len(),
                n_per_row,
            });
        }
    }
    use GgmlType::*;
    // Types whose reference quantizer ignores the importance matrix run over
    // the whole chunk at once, as ggml does (TQ1_0's reference reads its
    // maximum from the chunk's start, so the grouping matters).
    match ty {
        F32 => {
            for (o, &x) in dst.chunks_exact_mut(4).zip(src) {
                o.copy_from_slice(&x.to_le_bytes());
            }
            return Ok(());
        }
        F16 => {
            for (o, &x) in dst.chunks_exact_mut(2).zip(src) {
                o.copy_from_slice(&half::f16::from_f32(x).to_bits().to_le_bytes());
            }
            return Ok(());
        }
        BF16 => {
            for (o, &x) in dst.chunks_exact_mut(2).zip(src) {
                o.copy_from_slice(&fp32_to_bf16(x).to_le_bytes());
            }
            return Ok(());
        }
        Q8_0 => {
            legacy::q8_0_ref(src, dst);
            return Ok(());
        }
        MXFP4 => {
            legacy::mxfp4_ref(src, dst);
            return Ok(());
        }
        TQ1_0 => {
            legacy::tq1_0_ref(src, dst);
            return Ok(());
        }
        TQ2_0 => {
            legacy::tq2_0_ref(src, dst);
            return Ok(());
        }
        _ => {}
    }
    let Some(w) = imatrix else {
        match ty {
            Q4_0 => legacy::q4_0_ref(src, dst),
            Q4_1 => legacy::q4_1_ref(src, dst),
            Q5_0 => legacy::q5_0_ref(src, dst),
            Q5_1 => legacy::q5_1_ref(src, dst),
            Q1_0 => legacy::q1_0_ref(src, dst),
            Q2_0 => legacy::q2_0_ref(src, dst),
            Q2_K => kquants::q2_k_ref(src, dst),
            Q3_K => kquants::q3_k_ref(src, dst),
            Q4_K => kquants::q4_k_ref(src, dst),
            Q5_K => kquants::q5_k_ref(src, dst),
            Q6_K => kquants::q6_k_ref(src, dst),
            IQ1_M | IQ2_S | IQ3_XXS | IQ3_S => {
                let row_fn = match ty {
                    IQ1_M => lattice::iq1_m_row,
                    IQ2_S => lattice::iq2_s_row,
                    IQ3_XXS => iq3::iq3_xxs_row,
                    _ => iq3::iq3_s_row,
                };
                for (x, y) in src
                    .chunks_exact(n_per_row)
                    .zip(dst.chunks_exact_mut(row_bytes))
                {
                    row_fn(x, y, None);
                }
            }
            IQ4_NL | IQ4_XS => {
                let row_fn = if ty == IQ4_NL {
                    iq4::iq4_nl_row
                } else {
                    iq4::iq4_xs_row
                };
                for (x, y) in src
                    .chunks_exact(n_per_row)
                    .zip(dst.chunks_exact_mut(row_bytes))
                {
                    row_fn(x, y, None);
                }
            }
            IQ2_XXS | IQ2_XS | IQ1_S => return Err(QuantizeError::NeedsImatrix(ty)),
            _ => return Err(QuantizeError::NotImplemented(ty)),
        }
        return Ok(());
    };
    for (x, y) in src
        .chunks_exact(n_per_row)
        .zip(dst.chunks_exact_mut(row_bytes))
    {
        match ty {
            Q4_0 => legacy::q4_0_impl(x, y, w),
            Q4_1 => legacy::q4_1_impl(x, y, w),
            Q5_0 => legacy::q5_0_impl(x, y, w),
            Q5_1 => legacy::q5_1_impl(x, y, w),
            Q1_0 => legacy::q1_0_ref(x, y),
            Q2_0 => legacy::q2_0_ref(x, y),
            Q2_K => kquants::q2_k_impl(x, y, w),
            Q3_K => kquants::q3_k_impl(x, y, Some(w)),
            Q4_K => kquants::q4_k_impl(x, y, Some(w)),
            Q5_K => kquants::q5_k_impl(x, y, Some(w)),
            Q6_K => kquants::q6_k_impl(x, y, Some(w)),
            IQ4_NL => iq4::iq4_nl_row(x, y, Some(w)),
            IQ4_XS => iq4::iq4_xs_row(x, y, Some(w)),
            IQ2_XXS => lattice::iq2_xxs_row(x, y, w),
            IQ2_XS => lattice::iq2_xs_row(x, y, w),
            IQ2_S => lattice::iq2_s_row(x, y, Some(w)),
            IQ3_XXS => iq3::iq3_xxs_row(x, y, Some(w)),
            IQ3_S => iq3::iq3_s_row(x, y, Some(w)),
            IQ1_S => lattice::iq1_s_row(x, y, w),
            IQ1_M => lattice::iq1_m_row(x, y, Some(w)),
            _ => return Err(QuantizeError::NotImplemented(ty)),
        }
    }
    Ok(())
}

/// `ggml_compute_fp32_to_bf16`: round to nearest even, NaN made quiet.
pub fn fp32_to_bf16(s: f32) -> u16 {
    let u = s.to_bits();
    if (u & 0x7fff_ffff) > 0x7f80_0000 {
        return ((u >> 16) | 64) as u16;
    }
    (u.wrapping_add(0x7fff + ((u >> 16) & 1)) >> 16) as u16
}

/// `GGML_FP32_TO_FP16` (round to nearest even), as little-endian bytes.
#[inline]
pub(crate) fn f16_bytes(x: f32) -> [u8; 2] {
    half::f16::from_f32(x).to_bits().to_le_bytes()
}

/// `GGML_FP16_TO_FP32` of the f16 that `x` rounds to.
#[inline]
pub(crate) fn f16_round(x: f32) -> f32 {
    half::f16::from_f32(x).to_f32()
}

/// ggml's `nearest_int`: round half to even through the 1.5·2^23 trick
/// (valid for |x| ≤ 4194303, as in ggml).
#[inline(always)]
pub(crate) fn nearest_int(fval: f32) -> i32 {
    let val = fval + 12_582_912.0f32;
    let i = val.to_bits() as i32;
    (i & 0x007f_ffff) - 0x0040_0000
}

/// `GROUP_MAX_EPS`.
pub(crate) const GROUP_MAX_EPS: f32 = 1e-15;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_int_rounds_half_to_even() {
        assert_eq!(nearest_int(0.5), 0);
        assert_eq!(nearest_int(1.5), 2);
        assert_eq!(nearest_int(-0.5), 0);
        assert_eq!(nearest_int(-1.5), -2);
        assert_eq!(nearest_int(2.4999), 2);
        assert_eq!(nearest_int(-7.6), -8);
    }

    #[test]
    fn bf16_rounds_to_nearest_even() {
        assert_eq!(fp32_to_bf16(1.0), 0x3f80);
        assert_eq!(fp32_to_bf16(f32::from_bits(0x3f80_8000)), 0x3f80);
        assert_eq!(fp32_to_bf16(f32::from_bits(0x3f81_8000)), 0x3f82);
        assert_eq!(fp32_to_bf16(f32::from_bits(0x3f80_8001)), 0x3f81);
        assert_eq!(fp32_to_bf16(f32::NAN) & 0x7fc0, 0x7fc0);
    }

    #[test]
    fn unimplemented_types_are_refused() {
        let src = [0f32; 256];
        let mut dst = vec![0u8; GgmlType::NVFP4.type_size() * 4];
        assert_eq!(
            quantize_rows(GgmlType::NVFP4, &src, 256, None, &mut dst),
            Err(QuantizeError::NotImplemented(GgmlType::NVFP4))
        );
        let mut dst = vec![0u8; GgmlType::IQ2_XS.type_size()];
        assert_eq!(
            quantize_rows(GgmlType::IQ2_XS, &src, 256, None, &mut dst),
            Err(QuantizeError::NeedsImatrix(GgmlType::IQ2_XS))
        );
    }
}
