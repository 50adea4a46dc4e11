//! Block formats of llama.cpp's tensor types.
//!
//! For every type: the scalar reference dequantizer and dot product (the
//! specification, tested bit-for-bit against gguf-py's
//! `gguf.quants.dequantize`), and where written, AVX2 / AVX-512 fast paths
//! chosen at run time and tested against the scalar twin.
//!
//! The dot products take an f32 activation vector: `dot(w, x) = Σ w_i·x_i`
//! with `w` the dequantized weights. Keeping activations in f32 is what lets
//! the engine match the exact-arithmetic references of a quantized file.

use std::sync::OnceLock;

pub use redlite_gguf::GgmlType;

pub mod float;
pub mod iq1;
pub mod iq2;
pub mod iq3;
pub mod iq4;
pub mod iq_tables;
pub mod kquants;
pub mod legacy;
pub mod lowbit;
pub mod mxfp4;
pub mod q16;
pub mod quantize;
pub mod util;

/// Dequantize `n` whole blocks: `data.len() == n * type_size`,
/// `out.len() == n * block_size`.
pub type DequantFn = fn(data: &[u8], out: &mut [f32]);
/// Dot product of `n` whole blocks of weights with `n * block_size` f32 values.
pub type DotFn = fn(data: &[u8], x: &[f32]) -> f32;

/// The kernels of one tensor type.
#[derive(Clone, Copy)]
pub struct TypeKernels {
    pub ty: GgmlType,
    /// Scalar reference dequantizer.
    pub dequant: DequantFn,
    /// Scalar reference dot product.
    pub dot_scalar: DotFn,
    /// AVX2+FMA dot product, if written. Only called when the CPU has AVX2 and FMA.
    pub dot_avx2: Option<DotFn>,
    /// AVX-512 (F, BW, VL) dot product, if written. Only called when the CPU has them.
    pub dot_avx512: Option<DotFn>,
}

/// Instruction set level used for the fast paths.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Isa {
    Scalar,
    Avx2,
    Avx512,
}

impl Isa {
    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Avx2 => "avx2",
            Isa::Avx512 => "avx512",
        }
    }
}

impl std::fmt::Display for Isa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Isa {
    type Err = String;

    /// `scalar`, `avx2` or `avx512` (any case).
    fn from_str(s: &str) -> Result<Isa, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "scalar" => Ok(Isa::Scalar),
            "avx2" => Ok(Isa::Avx2),
            "avx512" => Ok(Isa::Avx512),
            _ => Err(format!(
                "{s:?} is not a SIMD level (use scalar, avx2 or avx512)"
            )),
        }
    }
}

/// [`limit_isa`] came too late: a kernel was already chosen at another level.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "the SIMD level is already fixed at {fixed} for this process (a kernel was chosen before \
     the limit); it cannot become {wanted} now"
)]
pub struct IsaFixed {
    /// The level in use.
    pub fixed: Isa,
    /// The level the limit asked for (already capped at what the CPU has).
    pub wanted: Isa,
}

/// What this CPU supports (ignoring any override).
pub fn detected_isa() -> Isa {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512vl")
            && std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma")
        {
            return Isa::Avx512;
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            return Isa::Avx2;
        }
    }
    Isa::Scalar
}

/// The level of the whole process, fixed at its first use.
static ISA: OnceLock<Isa> = OnceLock::new();

/// The level in use: the detected one, or what [`limit_isa`] lowered it to.
/// The first call fixes it for the process (kernels chosen at one level are
/// kept in the loaded weights).
pub fn isa() -> Isa {
    *ISA.get_or_init(detected_isa)
}

/// Lower the level the kernels use to at most `max` (never above what the
/// CPU has), for the whole process. It has to come before the first kernel
/// is chosen (before a model is loaded); returns the level now in use, or
/// [`IsaFixed`] when the level was already fixed at another one.
pub fn limit_isa(max: Isa) -> Result<Isa, IsaFixed> {
    let wanted = detected_isa().min(max);
    let fixed = *ISA.get_or_init(|| wanted);
    if fixed == wanted {
        Ok(fixed)
    } else {
        Err(IsaFixed { fixed, wanted })
    }
}

/// Kernels of `ty`, or `None` if the type has no implementation.
pub fn kernels(ty: GgmlType) -> Option<&'static TypeKernels> {
    use GgmlType::*;
    Some(match ty {
        F32 => &float::F32,
        F16 => &float::F16,
        BF16 => &float::BF16,
        // Legacy 32-element blocks.
        Q4_0 => &legacy::Q4_0,
        Q4_1 => &legacy::Q4_1,
        Q5_0 => &legacy::Q5_0,
        Q5_1 => &legacy::Q5_1,
        Q8_0 => &legacy::Q8_0,
        // K-quants.
        Q2_K => &kquants::Q2_K,
        Q3_K => &kquants::Q3_K,
        Q4_K => &kquants::Q4_K,
        Q5_K => &kquants::Q5_K,
        Q6_K => &kquants::Q6_K,
        Q8_K => &kquants::Q8_K,
        // Non-linear 4-bit and MXFP4.
        IQ4_NL => &iq4::IQ4_NL,
        IQ4_XS => &iq4::IQ4_XS,
        MXFP4 => &mxfp4::MXFP4,
        NVFP4 => &mxfp4::NVFP4,
        // One-scale low-bit types (ternary and 1/2-bit).
        TQ1_0 => &lowbit::TQ1_0,
        TQ2_0 => &lowbit::TQ2_0,
        Q1_0 => &lowbit::Q1_0,
        Q2_0 => &lowbit::Q2_0,
        // Lattice (grid) types.
        IQ2_XXS => &iq2::IQ2_XXS,
        IQ2_XS => &iq2::IQ2_XS,
        IQ2_S => &iq2::IQ2_S,
        IQ3_XXS => &iq3::IQ3_XXS,
        IQ3_S => &iq3::IQ3_S,
        IQ1_S => &iq1::IQ1_S,
        IQ1_M => &iq1::IQ1_M,
        _ => return None,
    })
}

/// Error for a type without kernels or mismatched buffer sizes.
#[derive(Debug, thiserror::Error)]
pub enum QuantError {
    #[error("tensor type {0} is not supported")]
    Unsupported(GgmlType),
    #[error("{ty}: {bytes} bytes and {values} values are not a whole number of matching blocks")]
    Size {
        ty: GgmlType,
        bytes: usize,
        values: usize,
    },
}

fn check(ty: GgmlType, bytes: usize, values: usize) -> Result<&'static TypeKernels, QuantError> {
    let k = kernels(ty).ok_or(QuantError::Unsupported(ty))?;
    let (bs, ts) = (ty.block_size(), ty.type_size());
    if !bytes.is_multiple_of(ts) || !values.is_multiple_of(bs) || bytes / ts != values / bs {
        return Err(QuantError::Size { ty, bytes, values });
    }
    Ok(k)
}

/// Dequantize whole blocks of `ty` into `out` (scalar reference code).
pub fn dequantize(ty: GgmlType, data: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
    let k = check(ty, data.len(), out.len())?;
    (k.dequant)(data, out);
    Ok(())
}

/// Dequantize a whole tensor's bytes into a new vector.
pub fn dequantize_to_vec(ty: GgmlType, data: &[u8]) -> Result<Vec<f32>, QuantError> {
    let ts = ty.type_size();
    if !data.len().is_multiple_of(ts) {
        return Err(QuantError::Size {
            ty,
            bytes: data.len(),
            values: 0,
        });
    }
    let mut out = vec![0f32; data.len() / ts * ty.block_size()];
    dequantize(ty, data, &mut out)?;
    Ok(out)
}

/// The dot function for `ty` at instruction level `level` (falling back to
/// lower levels where a kernel is not written).
pub fn dot_fn_at(ty: GgmlType, level: Isa) -> Option<DotFn> {
    let k = kernels(ty)?;
    let level = level.min(detected_isa());
    if level >= Isa::Avx512 {
        if let Some(f) = k.dot_avx512 {
            return Some(f);
        }
    }
    if level >= Isa::Avx2 {
        if let Some(f) = k.dot_avx2 {
            return Some(f);
        }
    }
    Some(k.dot_scalar)
}

/// The fastest dot function for `ty` at the level in use ([`isa`]).
pub fn dot_fn(ty: GgmlType) -> Option<DotFn> {
    dot_fn_at(ty, isa())
}

/// `Σ w·x` over whole blocks with the fastest kernel.
pub fn dot(ty: GgmlType, data: &[u8], x: &[f32]) -> Result<f32, QuantError> {
    check(ty, data.len(), x.len())?;
    let f = dot_fn(ty).ok_or(QuantError::Unsupported(ty))?;
    Ok(f(data, x))
}

/// `Σ w·x` over whole blocks with the scalar reference kernel.
pub fn dot_scalar(ty: GgmlType, data: &[u8], x: &[f32]) -> Result<f32, QuantError> {
    let k = check(ty, data.len(), x.len())?;
    Ok((k.dot_scalar)(data, x))
}
