//! CUDA backend (skeleton).
pub mod dequant_src;
