//! The kernel source as NVRTC compiles it ([`kernel_source`]: the
//! dequantizers, the integer activations and the forward kernels by family,
//! `FORWARD_PARTS`) and every kernel name the forward pass looks up
//! ([`kernel_names`]).

use super::*;

/// Every kernel name the forward pass launches.
pub fn kernel_names() -> Vec<String> {
    let mut k: Vec<String> = [
        "norm_rows",
        "gated_rmsnorm",
        "add_rmsnorm",
        "swiglu",
        "conv_silu",
        "delta_rule",
        "delta_prep",
        "delta_chunk_prep",
        "delta_chunk_state",
        "rope_neox",
        "kv_append",
        "qk_prep",
        "attn_split",
        "attn_combine",
        "attn_dec_64",
        "attn_dec_128",
        "attn_dec_256",
        "attn_deca_64",
        "attn_deca_128",
        "attn_deca_256",
        "attn_combine_w",
        "attn_flash_64",
        "attn_flash_256",
        "moe_topk",
        "moe_group",
        "moe_combine_norm",
        "router_f32",
        "router_f32n",
        "mmf_F32",
        "xp_fetch",
        "xp_restore",
        "xp_late",
        "xp_scale",
        "fill_normal",
        "q16_quant",
        "tc_split",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for s in dequant_src::all_suffixes() {
        k.push(format!("mv_{s}"));
        k.push(format!("getrows_{s}"));
        k.push(format!("mvg_{s}"));
        k.push(format!("mv1_{s}"));
        k.push(format!("mvn_{s}"));
        k.push(format!("mvgu_{s}"));
        k.push(format!("router_{s}"));
        k.push(format!("mm_{s}"));
        k.push(format!("mmg_{s}"));
    }
    for s in dequant_src::q16_suffixes() {
        k.push(format!("mq1_{s}"));
        k.push(format!("mqgu_{s}"));
        k.push(format!("mqn_{s}"));
    }
    for s in dequant_src::tensor_core_suffixes() {
        k.push(format!("mmt_{s}"));
        k.push(format!("mmgt_{s}"));
        k.push(format!("mmgw_{s}"));
        k.push(format!("mmx_{s}"));
        k.push(format!("mmgx_{s}"));
    }
    k.extend(pair_names());
    k
}

/// The full kernel source: the dequantizers, then the forward kernels.
pub fn kernel_source() -> String {
    let mut s = dequant_src::dequant_source();
    s.push_str(dequant_src::Q16_CUH);
    let list = |pairs: &[(&str, &str)]| {
        pairs
            .iter()
            .map(|(a, b)| format!(" X({a}, {b})"))
            .collect::<String>()
    };
    s.push_str(&format!(
        "#define REDLITE_MQ_PAIRS(X){}\n#define REDLITE_MQGU_PAIRS(X){}\n",
        list(MQ1_PAIRS),
        list(MQGU_PAIRS)
    ));
    for (_, part) in FORWARD_PARTS {
        s.push_str(part);
    }
    s
}

/// The forward kernels by family, in the order [`kernel_source`]
/// concatenates them (each may use what the files before it define).
pub const FORWARD_PARTS: &[(&str, &str)] = &[
    ("common.cuh", include_str!("../../kernels/common.cuh")),
    ("products.cuh", include_str!("../../kernels/products.cuh")),
    ("router.cuh", include_str!("../../kernels/router.cuh")),
    (
        "q16_products.cuh",
        include_str!("../../kernels/q16_products.cuh"),
    ),
    (
        "tiled_products.cuh",
        include_str!("../../kernels/tiled_products.cuh"),
    ),
    (
        "tc_products.cuh",
        include_str!("../../kernels/tc_products.cuh"),
    ),
    (
        "elementwise.cuh",
        include_str!("../../kernels/elementwise.cuh"),
    ),
    ("delta.cuh", include_str!("../../kernels/delta.cuh")),
    ("attention.cuh", include_str!("../../kernels/attention.cuh")),
    (
        "expert_transfer.cuh",
        include_str!("../../kernels/expert_transfer.cuh"),
    ),
    ("moe.cuh", include_str!("../../kernels/moe.cuh")),
];
