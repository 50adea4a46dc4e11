//! Source text of the block dequantizers shared by the CUDA kernels.
//!
//! [`dequant_source`] assembles what a kernel source starts with: a
//! portability prelude (the same text compiles under NVRTC, nvcc and a host
//! C++ compiler), the IQ lookup tables generated from
//! [`redlite_quant::iq_tables`], and `kernels/dequant.cuh`, which defines for
//! every supported type `T` the block geometry `QK_T` / `BS_T` and
//! `dq8_T(blk, c, v)`: values `8c .. 8c+7` of the block at `blk`, bit-identical
//! to redlite_quant's scalar dequantizer. `REDLITE_DQ_TYPES(X)` lists the
//! types as `X(T, ggml type id)`.
//!
//! The dequantizers are bit-exact when compiled without FMA contraction
//! (the host test builds them with g++ `-ffp-contract=off`). The device
//! build keeps NVRTC's default (contraction on, for the kernels' speed), so
//! on the GPU a value whose expression multiplies and adds may differ from
//! the host's in the last bit; the GPU tests compare within tolerances.

use std::fmt::Write as _;
use std::sync::OnceLock;

use redlite_gguf::GgmlType;
use redlite_quant::iq4::KVALUES_IQ4NL;
use redlite_quant::iq_tables::{
    kmask_iq2xs, ksigns_iq2xs, IQ1M_DELTA, IQ1S_DELTA, IQ1S_GRID, IQ2S_GRID, IQ2XS_GRID,
    IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID,
};

/// The device functions (see the module documentation).
pub const DEQUANT_CUH: &str = include_str!("../kernels/dequant.cuh");

/// Portable definitions the header relies on: fixed-width integers (NVRTC
/// has no `<stdint.h>`), the CUDA qualifiers as no-ops on a host compiler,
/// f32 bit casts, `RL_UNROLL` (full unrolling of the 8-value loops) and `RL_TABLE` for the lookup tables (`__device__ const` on
/// the GPU, `static const` on the host).
const PRELUDE: &str = r#"// ---- redlite dequant prelude ----
#ifndef REDLITE_DQ_PRELUDE
#define REDLITE_DQ_PRELUDE
#if defined(__CUDACC_RTC__)
typedef signed char int8_t;
typedef unsigned char uint8_t;
typedef short int16_t;
typedef unsigned short uint16_t;
typedef int int32_t;
typedef unsigned int uint32_t;
typedef long long int64_t;
typedef unsigned long long uint64_t;
#else
#include <stdint.h>
#endif
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define RL_TABLE __device__ const
#define RL_UNROLL _Pragma("unroll")
__device__ __forceinline__ float rl_as_f32(uint32_t u) { return __uint_as_float(u); }
__device__ __forceinline__ uint32_t rl_f32_bits(float f) { return __float_as_uint(f); }
#else
#include <string.h>
#define __device__
#define __forceinline__ inline
#define __restrict__ __restrict
#define RL_TABLE static const
#define RL_UNROLL _Pragma("GCC unroll 8")
static inline float rl_as_f32(uint32_t u) { float f; memcpy(&f, &u, sizeof f); return f; }
static inline uint32_t rl_f32_bits(float f) { uint32_t u; memcpy(&u, &f, sizeof u); return u; }
#endif
#endif
"#;

/// Prelude, tables and `dequant.cuh`: the text to put before a kernel that
/// calls the `dq8_*` functions.
pub fn dequant_source() -> String {
    static SRC: OnceLock<String> = OnceLock::new();
    SRC.get_or_init(|| {
        let mut s = String::with_capacity(160 * 1024);
        s.push_str(PRELUDE);
        s.push_str("// ---- lookup tables (generated from redlite_quant::iq_tables) ----\n");
        s.push_str("#ifndef REDLITE_DQ_TABLES\n#define REDLITE_DQ_TABLES\n");
        table(&mut s, "uint64_t", "rl_iq2xxs_grid", &IQ2XXS_GRID, hex64);
        table(&mut s, "uint64_t", "rl_iq2xs_grid", &IQ2XS_GRID, hex64);
        table(&mut s, "uint64_t", "rl_iq2s_grid", &IQ2S_GRID, hex64);
        table(&mut s, "uint32_t", "rl_iq3xxs_grid", &IQ3XXS_GRID, hex32);
        table(&mut s, "uint32_t", "rl_iq3s_grid", &IQ3S_GRID, hex32);
        table(&mut s, "uint64_t", "rl_iq1s_grid", &IQ1S_GRID, hex64);
        let codes: Vec<u16> = IQ1S_GRID.iter().map(|&g| iq1s_code(g)).collect();
        table(&mut s, "uint16_t", "rl_iq1s_grid2", &codes, |v| {
            format!("0x{v:04x}")
        });
        table(&mut s, "uint8_t", "rl_ksigns_iq2xs", &ksigns_iq2xs, |v| {
            format!("0x{v:02x}")
        });
        table(&mut s, "uint8_t", "rl_kmask_iq2xs", &kmask_iq2xs, |v| {
            format!("0x{v:02x}")
        });
        table(&mut s, "int8_t", "rl_kvalues_iq4nl", &KVALUES_IQ4NL, |v| {
            v.to_string()
        });
        let _ = writeln!(
            s,
            "#define RL_IQ1S_DELTA_BITS 0x{:08x}u\n#define RL_IQ1M_DELTA_BITS 0x{:08x}u",
            IQ1S_DELTA.to_bits(),
            IQ1M_DELTA.to_bits()
        );
        s.push_str("#endif\n// ---- dequant.cuh ----\n");
        s.push_str(DEQUANT_CUH);
        s
    })
    .clone()
}

/// An IQ1_S / IQ1_M grid entry (eight signed bytes in {-1, 0, 1}) as the
/// integer kernels' 16-bit code: value i + 1 in bits 2i, 2i + 1.
fn iq1s_code(g: u64) -> u16 {
    (0..8).fold(0u16, |c, i| {
        let v = (g >> (8 * i)) as u8 as i8;
        assert!((-1..=1).contains(&v), "IQ1S grid value {v} outside -1..=1");
        c | (((v + 1) as u16) << (2 * i))
    })
}

fn hex64(v: &u64) -> String {
    format!("0x{v:016x}ull")
}

fn hex32(v: &u32) -> String {
    format!("0x{v:08x}u")
}

/// `RL_TABLE ty name[N] = { ... };`, eight entries a line.
fn table<T>(s: &mut String, ty: &str, name: &str, vals: &[T], fmt: impl Fn(&T) -> String) {
    let _ = writeln!(s, "RL_TABLE {ty} {name}[{}] = {{", vals.len());
    for row in vals.chunks(8) {
        let line: Vec<String> = row.iter().map(&fmt).collect();
        let _ = writeln!(s, "    {},", line.join(", "));
    }
    s.push_str("};\n");
}

/// The `T` of `dq8_T` / `QK_T` / `BS_T` for `t`, or `None` if the header has
/// no dequantizer for it.
pub fn type_suffix(t: GgmlType) -> Option<&'static str> {
    use GgmlType::*;
    Some(match t {
        F32 => "F32",
        F16 => "F16",
        BF16 => "BF16",
        Q4_0 => "Q4_0",
        Q4_1 => "Q4_1",
        Q5_0 => "Q5_0",
        Q5_1 => "Q5_1",
        Q8_0 => "Q8_0",
        Q2_K => "Q2_K",
        Q3_K => "Q3_K",
        Q4_K => "Q4_K",
        Q5_K => "Q5_K",
        Q6_K => "Q6_K",
        IQ1_S => "IQ1_S",
        IQ1_M => "IQ1_M",
        IQ2_XXS => "IQ2_XXS",
        IQ2_XS => "IQ2_XS",
        IQ2_S => "IQ2_S",
        IQ3_XXS => "IQ3_XXS",
        IQ3_S => "IQ3_S",
        IQ4_NL => "IQ4_NL",
        IQ4_XS => "IQ4_XS",
        _ => return None,
    })
}

/// Every suffix the header defines (the kernels built per type).
pub fn all_suffixes() -> &'static [&'static str] {
    &[
        "F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K",
        "Q5_K", "Q6_K", "IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S",
        "IQ4_NL", "IQ4_XS",
    ]
}

/// The types with tensor-core prefill kernels (`mmt_T`, `mmgt_T`: their
/// chunks are small integers times per-chunk multipliers; `REDLITE_TC_TYPES`
/// in `tc_products.cuh`).
pub fn tensor_core_suffixes() -> &'static [&'static str] {
    &["Q8_0", "Q4_K", "Q5_K", "Q6_K", "IQ1_M", "IQ2_XS"]
}

/// `kernels/q16.cuh`: the integer unit functions of the 16-bit-activation
/// kernels (`q16p_T` / `q16a_T`) and the activation quantizer; it follows
/// [`dequant_source`] in a kernel source.
pub const Q16_CUH: &str = include_str!("../kernels/q16.cuh");

/// The types with 16-bit-activation integer kernels (`REDLITE_Q16_TYPES` in
/// `q16.cuh`): one-token `mq1_T`, `mqgu_T` and the verify twin `mqn_T`.
pub fn q16_suffixes() -> &'static [&'static str] {
    &["Q8_0", "Q4_K", "Q5_K", "Q6_K", "IQ1_M", "IQ2_XS"]
}

/// The longest rows (inputs) the integer kernels of `t` take (`MQ_XS_T` in
/// `q16_products.cuh`): 2,048 for the types whose lookup tables share the blocks'
/// shared memory (IQ1_M, IQ2_XS), else 4,096.
pub fn q16_max_inputs(t: GgmlType) -> usize {
    match t {
        GgmlType::IQ1_M | GgmlType::IQ2_XS => 2048,
        _ => 4096,
    }
}

/// Whether `t` has 16-bit-activation integer kernels.
pub fn q16_type(t: GgmlType) -> bool {
    type_suffix(t).is_some_and(|s| q16_suffixes().contains(&s))
}

/// Whether `t` has tensor-core prefill kernels.
pub fn tensor_core_prefill(t: GgmlType) -> bool {
    type_suffix(t).is_some_and(|s| tensor_core_suffixes().contains(&s))
}

/// Dynamic shared memory of a tensor-core prefill launch of type `t`
/// (`TC_SMEM` in `tc_products.cuh`) whose tiles are 64 rows × `tokens` tokens
/// (or an expert's slots): the tile, then two buffers of 64 rows' windows
/// over one 256-input step of weights, then the type's lookup table where it
/// has one there. `None` where `t` has no such kernel.
pub fn tc_smem_bytes(t: GgmlType, tokens: usize) -> Option<u32> {
    if !tensor_core_prefill(t) {
        return None;
    }
    let (qk, bs) = dq_block_shape(t)?;
    let (br, bt) = (64, tokens);
    let tile = 112 * br + 192 * bt;
    let rb = bs * (256 / qk);
    let sw = 16 * ((rb + 30) / 16);
    // IQ1_M's grid in shared memory (`TCT_IQ1_M`).
    let table = if t == GgmlType::IQ1_M { 16384 } else { 0 };
    Some((tile + 2 * br * sw + table) as u32)
}

/// Dynamic shared memory of an `mmx_T` (`grouped`: `mmgx_T`) launch of type
/// `t`, as `TxMem<..>::END` in `tc_products.cuh` lays it out: weight q (two
/// buffers of `br` rows × 72 bf16), the inputs' hi and lo (three of `bt`
/// rows each), the groups' A, B and the inputs' sums (three), the tokens' rows, two
/// buffers of raw weights per 256 inputs, the unpacker's table. `br` × `bt`
/// is 128 × 128 dense, 256 × 64 grouped. `None` where `t` has no such kernel.
pub fn tcx_smem_bytes(t: GgmlType, grouped: bool) -> Option<u32> {
    if !tensor_core_prefill(t) {
        return None;
    }
    let (qk, bs) = dq_block_shape(t)?;
    let (br, bt) = if grouped { (256, 64) } else { (128, 128) };
    // Inputs per A (`txd_T::GA`), whether there is a B (`txd_T::BM`), table
    // bytes (`txd_T::TT`).
    let (ga, bm, tt) = match t {
        GgmlType::Q8_0 => (32, false, 0),
        GgmlType::Q4_K | GgmlType::Q5_K => (32, true, 0),
        GgmlType::Q6_K => (16, false, 0),
        GgmlType::IQ1_M => (64, false, 32768),
        GgmlType::IQ2_XS => (16, false, 8192 + 2048),
        _ => return None,
    };
    let ld = 72usize;
    let mut o = 2 * br * ld * 2 + 2 * 3 * bt * ld * 2;
    o += 2 * (64 / ga) * br * 4;
    if bm {
        o += 2 * 2 * br * 4 + 3 * 2 * bt * 4;
    }
    o += bt * 8 + bt * 4;
    o = o.div_ceil(16) * 16;
    let rb = bs * (256 / qk);
    let sw = 16 * ((rb + 30) / 16);
    o += 2 * br * sw + tt;
    Some(o as u32)
}

/// Whether `dequant.cuh` has a `dq8_*` function for `t`.
pub fn type_supported(t: GgmlType) -> bool {
    type_suffix(t).is_some()
}

/// `(QK_T, BS_T)` of a supported type: values and bytes of one block as the
/// header counts them (the plain float types F32 / F16 / BF16 use blocks of
/// 8 values), or `None` if `t` is not supported.
pub fn dq_block_shape(t: GgmlType) -> Option<(usize, usize)> {
    type_suffix(t)?;
    Some(match t {
        GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => (8, 8 * t.type_size()),
        _ => (t.block_size(), t.type_size()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn x_macro_matches_the_supported_types() {
        let src = dequant_source();
        let start = src
            .find("#define REDLITE_DQ_TYPES(X)")
            .expect("X-macro present");
        let body = &src[start..];
        let mut n = 0;
        for t in GgmlType::ALL {
            let Some(sfx) = type_suffix(t) else { continue };
            n += 1;
            assert!(
                body.contains(&format!("X({sfx}, {})", t.id())),
                "X({sfx}, {}) missing from REDLITE_DQ_TYPES",
                t.id()
            );
            let (qk, bs) = dq_block_shape(t).expect("supported");
            assert!(
                src.contains(&format!("#define QK_{sfx} {qk}\n")),
                "QK_{sfx}"
            );
            assert!(
                src.contains(&format!("#define BS_{sfx} {bs}\n")),
                "BS_{sfx}"
            );
            assert!(src.contains(&format!("void dq8_{sfx}(")), "dq8_{sfx}");
        }
        assert_eq!(n, 22);
        assert_eq!(body.matches("    X(").count(), n);
    }
}
