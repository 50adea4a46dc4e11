//! CUDA backend (skeleton).
