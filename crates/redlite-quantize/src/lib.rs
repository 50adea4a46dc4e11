//! Whole-file quantization of GGUF models, bit for bit with llama.cpp's
//! `llama-quantize` (llama.cpp 0c1e570).
//!
//! - [`ftype`]: llama.cpp's file types and llama-quantize's names for them.
//! - [`mix`]: the per-tensor type choice for `qwen3next` (a port of
//!   `llama-quant.cpp`'s `llama_tensor_get_type`).
//! - [`imatrix`]: importance matrices in llama.cpp's GGUF and legacy formats.
//! - [`driver`]: the streaming quantizer (tensor by tensor, rows in slabs
//!   of bounded size, rows in parallel, output independent of the thread
//!   count), writing the metadata llama-quantize writes.
//!
//! The per-type quantizers live in `redlite_quant::quantize`.

pub mod driver;
pub mod ftype;
pub mod imatrix;
pub mod imatrix_collect;
pub mod mix;

pub use driver::{quantize_file, Progress, QuantizeError, QuantizeOptions, Report};
pub use ftype::FileType;
pub use imatrix::Imatrix;
pub use imatrix_collect::ImatrixCollector;
pub use mix::{MixOptions, ModelInfo, PlannedTensor, TensorTypeOverride};

/// A named Red Lite mix: the file type and the tensor overrides it stands for.
pub struct NamedMix {
    pub name: &'static str,
    pub ftype: FileType,
    /// `PATTERN=TYPE` overrides, in order.
    pub tensor_types: &'static [&'static str],
    pub description: &'static str,
}

/// Red Lite's named mixes.
///
/// `cf2`: Q4_K_M with the routed experts' gate and up projections in IQ1_M
/// and their down projection in IQ2_XS (needs an importance matrix), i.e.
/// `--tensor-type ffn_gate_exps=iq1_m --tensor-type ffn_up_exps=iq1_m
/// --tensor-type ffn_down_exps=iq2_xs Q4_K_M`. Tensor by tensor on
/// `qwen3next`: `ffn_gate_exps`, `ffn_up_exps` IQ1_M; `ffn_down_exps`
/// IQ2_XS; `output` Q6_K; the attention / delta-net value projections
/// (`attn_qkv`, `attn_v`) Q5_K or Q6_K as Q4_K_M bumps them; the shared
/// experts' `ffn_down_shexp` Q6_K on the layers Q4_K_M bumps, Q4_K
/// elsewhere; every other matrix Q4_K; norms, routers, `ssm_a`,
/// `ssm_conv1d` and biases stay F32.
pub const NAMED_MIXES: &[NamedMix] = &[NamedMix {
    name: "cf2",
    ftype: FileType::Q4_K_M,
    tensor_types: &[
        "ffn_gate_exps=iq1_m",
        "ffn_up_exps=iq1_m",
        "ffn_down_exps=iq2_xs",
    ],
    description: "Red Lite's 2-bit MoE mix: routed experts IQ1_M gate/up + IQ2_XS down, the rest as Q4_K_M (needs --imatrix)",
}];

/// The named mix called `name` (any case).
pub fn named_mix(name: &str) -> Option<&'static NamedMix> {
    NAMED_MIXES
        .iter()
        .find(|m| m.name.eq_ignore_ascii_case(name))
}
