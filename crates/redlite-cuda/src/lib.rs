//! The CUDA forward pass of Red Lite.
//!
//! [`CudaModel`] uploads a loaded [`redlite_model::Model`]'s weights to one
//! GPU in their stored (quantized) format and runs the whole forward pass
//! there, behind [`redlite_model::DeviceForward`]: weights, activations, KV
//! cache and recurrent states stay in device memory; token ids go in and
//! logits come out. Kernels are CUDA C++ (`kernels/*.cu`, `kernels/*.cuh`)
//! compiled at first use by NVRTC for the device's architecture and cached
//! on disk ([`gpu::GpuOptions::kernel_cache`]).
//!
//! Settings are typed: [`CudaOptions`] (placement of the experts, the
//! activations, NVRTC's location, the kernel cache, profiling) and its
//! [`CudaTuning`] numbers, each default the value measured best. The caller
//! fills them; this crate reads no environment variable.
//!
//! The CUDA libraries are loaded at run time: this crate builds, and every
//! CPU test runs, on machines without them ([`gpu::driver_present`] is
//! checked before anything touches the driver).

pub mod dequant_src;
pub mod gpu;
mod model;

use std::sync::Arc;

pub use model::{
    kernel_names, kernel_source, CudaModel, CudaOptions, CudaState, CudaTuning, ExpertPlacement,
    FIT_RESERVE, FORWARD_PARTS,
};

/// What can go wrong on the CUDA side.
#[derive(Debug, thiserror::Error)]
pub enum CudaError {
    #[error("no CUDA driver (libcuda) could be loaded on this machine")]
    NoDriver,
    #[error("NVRTC (libnvrtc), which compiles the kernels, could not be loaded; install the CUDA toolkit or the nvidia-cuda-nvrtc package and put it on LD_LIBRARY_PATH")]
    NoNvrtc,
    #[error("CUDA device {ordinal} does not exist ({count} device(s) found)")]
    NoDevice { ordinal: usize, count: usize },
    #[error("out of GPU memory allocating {bytes} bytes: {msg}")]
    OutOfMemory { bytes: usize, msg: String },
    #[error("CUDA: {0}")]
    Driver(String),
    #[error("compiling the CUDA kernels: {0}")]
    Compile(String),
}

/// Whether a CUDA device can be used here (a driver and at least one device).
pub fn available() -> bool {
    gpu::device_count() > 0
}

/// Run `model`'s forward passes on CUDA device `ordinal` from now on
/// (uploads the weights; `progress(layers done, layers)`).
pub fn attach(
    model: &mut redlite_model::Model,
    ordinal: usize,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<(), redlite_model::ModelError> {
    attach_with(model, ordinal, CudaOptions::default(), progress).map(|_| ())
}

/// [`attach`] with options; returns where the routed experts were placed
/// when they did not all go to device memory.
pub fn attach_with(
    model: &mut redlite_model::Model,
    ordinal: usize,
    opts: CudaOptions,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Option<ExpertPlacement>, redlite_model::ModelError> {
    let cm = CudaModel::with_options(model, ordinal, opts, progress)?;
    let placed = cm.placement();
    model.attach_device(Arc::new(cm));
    Ok(placed)
}
