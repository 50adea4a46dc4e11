//! The qwen3next forward pass on one CUDA device: weights uploaded once in
//! their stored format, activations in device scratch buffers, the state of
//! each sequence in device memory. The host feeds token ids and reads back
//! logits; nothing else crosses the bus inside a forward pass.
//!
//! This module holds the model ([`CudaModel::with_options`] builds it), its
//! weights' and kernels' types and the `DeviceForward` glue. Beside it:
//! `encode` (a pass as launches: inputs prepared, the layers in order, the
//! LM head, the captured decode and batched steps) with one encoder per
//! block, `deltanet`, `attention` and `moe`; `products` (the matrix products
//! on every path and their typed launch arguments, the paired launches, the
//! norms); `scratch` (a pass's activation buffers and where the
//! per-sequence kernels find each sequence's state); `state` (a sequence's
//! state on the device, [`CudaState`], and its verify trail); `options` (the
//! typed settings and the fit budget), `upload` (weights to the device,
//! expert placement, kernel choice per matrix), `prefetch` (the decode
//! prefetch of experts held in host memory) and `source` (the kernel source
//! and names).

use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use redlite_gguf::{GgmlType, GgufFile};
use redlite_model::weights::{Experts, Mat, Mixer};
use redlite_model::{Config, DeviceForward, DeviceState, Model, ModelError, Verified};

use crate::gpu::{Arg, DevBuf, Func, Gpu, GpuOptions, Graph};
use crate::{dequant_src, CudaError};

mod attention;
mod deltanet;
mod encode;
mod moe;
mod options;
mod prefetch;
mod products;
mod scratch;
mod source;
mod state;
mod upload;

use options::fit_budget;
pub use options::{CudaOptions, CudaTuning, ExpertPlacement, FIT_RESERVE};
use prefetch::{XpBufs, XpLayer, XP_MARK_PAD, XP_WORDS};
use products::MvLaunch;
use scratch::{Scratch, SeqTab};
pub use source::{kernel_names, kernel_source, FORWARD_PARTS};
pub use state::CudaState;
use state::{CudaTrail, TrailBufs};
use upload::{expert_record, Uploader};

/// Most tokens one pass of the kernels takes on a device of less than
/// `BIG_DEVICE` bytes (and most whose logits one pass returns); longer
/// inputs go in chunks.
const T_MAX: usize = 512;
/// Most tokens of one pass on a device of `BIG_DEVICE` bytes or more: a
/// prefill's routed experts are dequantized once per pass, so longer passes
/// read and unpack each expert fewer times ([`CudaTuning::pass_tokens`]
/// sets it; 4,096: about 80 slots per expert of 512 at top-10; 2,048 took 10% longer
/// over 32K tokens on an H200).
const T_BIG: usize = 4096;
const BIG_DEVICE: usize = 40 << 30;
/// Attention splits per (query, head): at most this many for decode and
/// verify (`attn_dec` takes one per block of its wave, `att_nsplit` of them
/// filled at a position; one captured graph serves every position), up to
/// `NS_PREFILL` for prefill.
const NS_DECODE: usize = 256;
const NS_PREFILL: usize = 8;
/// Most tokens of one verify pass (its attention takes decode's splits, at
/// most `NS_DECODE` per query, in the `part` buffer sized for `T_MAX`
/// queries of `NS_PREFILL`); longer verifies go in chunks.
const V_MAX: usize = T_MAX * NS_PREFILL / NS_DECODE;
/// Most sequences of one batched decode pass (`forward_batch`; more go in
/// several passes): a batched pass takes the verify pass's products, which
/// hold up to `V_MAX` tokens.
const B_MAX: usize = V_MAX;
/// The longest conv kernel `mq_conv_rows` takes (`CONV_KMAX` in `q16_products.cuh`).
const CONV_KMAX: usize = 8;
/// The longest head `qk_prep` takes (`QK_HD_MAX` in `attention.cuh`).
const QK_HD_MAX: usize = 256;
/// Tokens per thread of `conv_silu` (`CONV_TB` in `delta.cuh`).
const CONV_TB: usize = 64;
/// The chunked delta rule (`delta.cuh`'s `DC_L`, `DC_D`, `DC_J` and the
/// dynamic shared memory of its two kernels): tokens per chunk, the widest
/// head it takes, value columns per `delta_chunk_state` block.
const DC_L: usize = 64;
const DC_D: usize = 128;
const DC_J: usize = 16;
const DC_PREP_SMEM: u32 = ((2 * DC_L * 129 + DC_L * (DC_L + 1) + 3 * DC_L) * 4 + DC_L * 8) as u32;
const DC_STATE_SMEM: u32 =
    ((2 * DC_L * 132 + DC_J * 132 + DC_L * 68 + DC_L * (DC_J + 1)) * 4) as u32;
/// Shortest pass that takes the chunked delta rule by default (shorter ones,
/// mostly a chunk's worth of padding, stay on the recurrence).
const DC_MIN_TOKENS: usize = 32;

/// The shortest prefill pass that takes the chunked delta rule (`min`, at
/// least 2), or `None` (heads wider than `DC_D`, or more than 32 key heads,
/// which `delta_prep` does not take).
fn delta_chunk_min(c: &Config, min: usize) -> Option<usize> {
    if c.ssm_d_k > DC_D || c.ssm_d_v > DC_D || c.ssm_h_k > 32 || c.ssm_h_k == 0 {
        return None;
    }
    Some(min.max(2))
}

/// Keys per split at least.
const SPLIT_MIN: usize = 256;
/// `attn_flash_<HD>`'s rows per block, keys per tile and threads
/// (`AF_BM`, `AF_BN`, `AF_THREADS` in `attention.cuh`).
const AF_BM: usize = 128;
const AF_BN: usize = 32;
const AF_THREADS: u32 = 256;
/// `attn_dec_<HD>`'s threads, most query heads per KV head, keys per warp
/// step and `attn_deca_<HD>`'s steps in flight per warp (`AD_W` warps,
/// `AD_G`, `AD_KB`, `AD_STG`).
const AD_THREADS: u32 = 256;
const AD_G: usize = 8;
const AD_KB: usize = 4;
const AD_STG: usize = 3;

/// The dynamic shared memory of `attn_flash_<hd>`: the query tile and the
/// key tile as hi / lo bf16 pairs (rows of `hd / 2 + 4` words), the value
/// tile transposed (rows of `AF_BN / 2 + 4` words).
fn attn_flash_smem(hd: usize) -> usize {
    4 * (2 * (AF_BM + AF_BN) * (hd / 2 + 4) + 2 * hd * (AF_BN / 2 + 4))
}
/// `products.cuh`'s one-token matrix kernel: rows per warp, largest input.
const MV1_R: usize = 2;
const MV_XS: usize = 4096;
/// Tokens per block of `mvn_<T>` (the verify pass's products).
const MVN_NT: usize = 16;
/// Blocks per multiprocessor the streaming integer kernels are sized for
/// (`MV1_MINB` in `products.cuh`: what fits one at once).
const MQ_BLOCKS_PER_SM: usize = 8;
/// Tokens per tile of the several-token integer kernels (`MQN_NT` in
/// `q16_products.cuh`).
const MQN_NT: usize = 8;
/// Blocks of `mqn` a multiprocessor holds (`MQN_MINB`): its grid is one
/// wave of them.
const MQN_BLOCKS_PER_SM: usize = 6;

fn merr(e: CudaError) -> ModelError {
    ModelError::Backend(e.to_string())
}

/// The matrix-vector kernels of one weight type.
#[derive(Clone, Copy)]
struct MvKernels {
    mv: Func,
    /// One token (rows per warp staged together).
    mv1: Func,
    /// Several tokens, each computed exactly as `mv1` computes it alone.
    mvn: Func,
    /// Gate and up rows of one token with the SwiGLU between them.
    mvgu: Func,
    /// The router's one-token product with its top-k.
    router: Func,
    /// The 16-bit-activation integer kernels, where the type has them and
    /// they are on (`q16.cuh`).
    mq: Option<MqKernels>,
}

/// The 16-bit-activation twins of `mv1`, `mvgu` and `mvn` (same launch
/// shapes; `mqn` reads inputs quantized ahead by `q16_quant`).
#[derive(Clone, Copy)]
struct MqKernels {
    mq1: Func,
    mqgu: Func,
    mqn: Func,
}

/// A tiled prefill kernel and its launch shape: blocks of 64 rows ×
/// `tokens` tokens (grouped experts: `tokens` slots at a time) of `threads`
/// threads with `smem` bytes of dynamic shared memory.
#[derive(Clone, Copy)]
struct MmKernel {
    f: Func,
    tokens: usize,
    threads: u32,
    smem: u32,
}

/// A matrix on the device.
struct DMat {
    ty: GgmlType,
    kern: MvKernels,
    /// The tiled prefill kernel.
    mm: MmKernel,
    /// The prefill kernel on split inputs (`mmx_T`, 128 rows × 128 tokens a
    /// block), where the type has one and the device its shared memory.
    mmx: Option<MmKernel>,
    n_in: usize,
    n_out: usize,
    row_bytes: usize,
    ptr: u64,
}

impl DMat {
    /// `self` and `next` as one matrix of `self.n_out + next.n_out` rows,
    /// when `next`'s rows follow `self`'s in memory with the same type and
    /// row length (see `Uploader::mats`). Each row's product is computed
    /// the same either way, so the outputs are the same bits.
    fn joined(&self, next: &DMat) -> Option<DMat> {
        let follows = next.ptr == self.ptr + (self.n_out * self.row_bytes) as u64;
        (follows
            && next.ty == self.ty
            && next.n_in == self.n_in
            && next.row_bytes == self.row_bytes)
            .then_some(DMat {
                ty: self.ty,
                kern: self.kern,
                mm: self.mm,
                mmx: self.mmx,
                n_in: self.n_in,
                n_out: self.n_out + next.n_out,
                row_bytes: self.row_bytes,
                ptr: self.ptr,
            })
    }
}

/// A stack of expert matrices on the device: expert `e` at `base + e·stride`,
/// or, placed apart ([`ExpertPlacement`]), at the `e`-th address of the
/// table at `base` (`stride` is then [`RL_TABLE`], and `rec_off` where the
/// matrix lies in its expert's record).
struct DExperts {
    kern: MvKernels,
    mvg: Func,
    mmg: MmKernel,
    /// The grouped tensor-core kernel of 64 slots per tile, for passes with
    /// many slots per expert.
    mmgw: Option<MmKernel>,
    /// The grouped kernel on split inputs (`mmgx_T`, 256 rows × 64 slots a
    /// tile), taking the place of `mmgw` where it is there.
    mmgx: Option<MmKernel>,
    n_in: usize,
    n_out: usize,
    row_bytes: usize,
    base: u64,
    stride: u64,
    rec_off: u64,
}

/// `stride` of a [`DExperts`] whose matrices are found through a table
/// (`RL_TABLE` in `products.cuh`).
const RL_TABLE: u64 = u64::MAX;

impl DExperts {
    /// How far expert e's `up` matrix lies from its `self` (gate) matrix,
    /// the same for every expert (`mvgu` reads both from the gate's address).
    fn up_off(&self, up: &DExperts) -> u64 {
        if self.stride == RL_TABLE {
            up.rec_off.wrapping_sub(self.rec_off)
        } else {
            up.base.wrapping_sub(self.base)
        }
    }
}

/// A gate matrix (or stack) as `mvgu` takes it: its up twin lies at a
/// pointer difference with the same type, shape and expert stride.
#[derive(Clone, Copy)]
struct GuMat {
    kern: MvKernels,
    n_in: usize,
    n_out: usize,
    row_bytes: usize,
    base: u64,
    stride: u64,
}

impl GuMat {
    /// Gate and up of the routed experts, when alike.
    fn experts(g: &DExperts, u: &DExperts) -> Option<GuMat> {
        (g.kern.mvgu.name == u.kern.mvgu.name
            && g.n_in == u.n_in
            && g.n_out == u.n_out
            && g.row_bytes == u.row_bytes
            && g.stride == u.stride)
            .then_some(GuMat {
                kern: g.kern,
                n_in: g.n_in,
                n_out: g.n_out,
                row_bytes: g.row_bytes,
                base: g.base,
                stride: g.stride,
            })
    }
    /// The shared expert's gate and up, when alike (every slot the same
    /// matrix: stride 0).
    fn dense(g: &DMat, u: &DMat) -> Option<GuMat> {
        (g.ty == u.ty && g.n_in == u.n_in && g.n_out == u.n_out && g.row_bytes == u.row_bytes)
            .then_some(GuMat {
                kern: g.kern,
                n_in: g.n_in,
                n_out: g.n_out,
                row_bytes: g.row_bytes,
                base: g.ptr,
                stride: 0,
            })
    }
}

enum DMixer {
    DeltaNet {
        qkv: DMat,
        gate: DMat,
        ba: DMat,
        conv: u64,
        ssm_a: u64,
        dt_bias: u64,
        norm: u64,
        out: DMat,
    },
    Attention {
        q: DMat,
        k: DMat,
        v: DMat,
        out: DMat,
        q_norm: u64,
        k_norm: u64,
    },
}

struct DLayer {
    attn_norm: u64,
    post_norm: u64,
    mixer: DMixer,
    router: DMat,
    gate: DExperts,
    up: DExperts,
    down: DExperts,
    sh_gate: DMat,
    sh_up: DMat,
    sh_down: DMat,
    sh_inp: u64,
    /// Where this layer's routed experts lie when placed apart (for the
    /// decode prefetch).
    xp: Option<XpLayer>,
}

/// The forward pass's kernels.
struct Kern {
    norm_rows: Func,
    gated_rmsnorm: Func,
    add_rmsnorm: Func,
    swiglu: Func,
    conv_silu: Func,
    delta_rule: Func,
    delta_prep: Func,
    delta_chunk_prep: Func,
    delta_chunk_state: Func,
    rope_neox: Func,
    kv_append: Func,
    qk_prep: Func,
    /// The paired one-token products by name (see [`MQ1_PAIRS`]).
    pairs: HashMap<String, Func>,
    attn_split: Func,
    attn_combine: Func,
    attn_combine_w: Func,
    moe_topk: Func,
    moe_group: Func,
    moe_combine_norm: Func,
    router_f32: Func,
    router_f32n: Func,
    fill_normal: Func,
    q16_quant: Func,
    getrows_embd: Func,
    xp_fetch: Func,
    xp_restore: Func,
    xp_late: Func,
    xp_scale: Func,
}

/// An input of `q16_quant`: x, x2, values per token, tokens.
type Q16Key = (u64, u64, usize, usize);

/// The model on a CUDA device.
pub struct CudaModel {
    gpu: Arc<Gpu>,
    c: Config,
    layers: Vec<DLayer>,
    token_embd: DMat,
    output_norm: u64,
    output: DMat,
    rope_pairs: DevBuf,
    rope_half: usize,
    rope_mscale: f64,
    scratch: Mutex<Scratch>,
    /// The split inputs of a product on `mmx_T` / `mmgx_T` (`tc_split`: hi
    /// and lo bf16 rows, then the 32-value sums) for up to `xsp_cap`
    /// values; used only under the scratch's lock, as every pass is.
    xsp: DevBuf,
    xsp_cap: usize,
    tc_split: Func,
    /// Fewest blocks a dense product takes `mmx_T` with
    /// ([`CudaTuning::tcx_waves`], default 2, times the multiprocessors: one
    /// 128 × 128 block a multiprocessor, so a smaller grid leaves them idle
    /// and `mmt_T`'s 64 × 64 blocks do better).
    tcx_min_blocks: usize,
    weight_bytes: usize,
    k: Kern,
    /// Decode and verify attention through `attn_deca_<hd>` or
    /// `attn_dec_<hd>` (each key and value row read once for all of a KV
    /// head's query heads). `None` where the head size or grouping does not
    /// fit it (`attn_split` then).
    attn_dec: Option<(Func, u32)>,
    /// Prefill attention (passes that are not verify passes) on the tensor
    /// cores through `attn_flash_<hd>`, with its dynamic shared memory.
    /// `None` where the head size, grouping or device does not fit it
    /// (`attn_split` + `attn_combine` then).
    attn_flash: Option<(Func, u32)>,
    /// Prefill passes of at least this many tokens (not verify) take the
    /// chunked delta rule (`delta_chunk_prep` + `delta_chunk_state`;
    /// [`CudaTuning::delta_chunk_min`]); `None` where the heads do not fit
    /// it (the token-by-token kernel for every pass).
    delta_chunk_min: Option<usize>,
    /// Slots per expert on average (of a prefill pass) from which the
    /// grouped products take 64-slot tiles ([`CudaTuning::wide_slots`]).
    wide_slots: usize,
    /// Where the routed experts live when placed apart.
    placement: Option<ExpertPlacement>,
    /// The decode prefetch of predicted experts held in host memory (placed
    /// apart, unless `CudaOptions::no_expert_prefetch`).
    xp: Option<XpBufs>,
    /// Whether any product runs on 16-bit activations.
    q16: bool,
    /// Blocks per multiprocessor the streaming integer kernels' grids are
    /// sized for ([`CudaTuning::mq_fill`], default `MQ_BLOCKS_PER_SM`).
    mq_fill: usize,
    /// [`CudaTuning::combine_cols`].
    combine_cols: Option<usize>,
    /// A verify pass's inputs quantized for `mqn` (`q16_quant`): `V_MAX`
    /// tokens of up to `MV_XS` values, as 80-byte units and an f32 scale
    /// per unit.
    q16_units: DevBuf,
    q16_scales: DevBuf,
    /// What `q16_units` holds now: the input (x, x2, values, tokens) last
    /// quantized and the launch count just after, so that products of one
    /// input back to back (qkv, gate and ba; k and v after q) quantize it
    /// once.
    q16_held: Mutex<Option<(Q16Key, u64)>>,
    _bufs: Vec<DevBuf>,
    _hosts: Vec<crate::gpu::HostBuf>,
}

/// The one-token products decode runs two at a time in one launch
/// (`mq1p_A__B`, `mqgup_A__B` in `q16_products.cuh`; A the smaller product's type,
/// its blocks first): DeltaNet's ssm_ba beside qkv + gate, attention's k + v
/// beside q, the shared expert beside the routed experts. Other pairs take
/// two launches.
const MQ1_PAIRS: &[(&str, &str)] = &[
    ("Q8_0", "Q4_K"),
    ("Q5_K", "IQ2_XS"),
    ("Q4_K", "Q4_K"),
    ("Q8_0", "Q8_0"),
];
const MQGU_PAIRS: &[(&str, &str)] = &[("Q4_K", "IQ1_M"), ("Q8_0", "Q8_0"), ("Q4_K", "Q4_K")];

/// The names of the paired kernels (see [`MQ1_PAIRS`]).
fn pair_names() -> Vec<String> {
    let mut v = Vec::new();
    for (a, b) in MQ1_PAIRS {
        v.push(format!("mq1p_{a}__{b}"));
    }
    for (a, b) in MQGU_PAIRS {
        v.push(format!("mqgup_{a}__{b}"));
    }
    v
}

/// `attn_dec_<hd>` or `attn_deca_<hd>`, and `attn_flash_<hd>`, each with
/// its dynamic shared memory (see [`attn_kernels`]).
type AttnKernels = (Option<(Func, u32)>, Option<(Func, u32)>);

/// The attention kernels this model's heads take: `attn_deca_<hd>` for decode
/// and verify (`attn_dec_<hd>`, its loads in registers, on a device whose
/// shared memory per block does not hold `attn_deca_<hd>`'s copy ring),
/// `attn_flash_<hd>` for prefill, each unless unfit (head size, query heads
/// per KV head, the device's shared memory).
fn attn_kernels(gpu: &Gpu, c: &Config) -> Result<AttnKernels, ModelError> {
    let (hd, nkv) = (c.head_dim, c.n_head_kv);
    let grp = if nkv > 0 && c.n_head.is_multiple_of(nkv) {
        c.n_head / nkv
    } else {
        0
    };
    let dec = if matches!(hd, 64 | 128 | 256) && (1..=AD_G).contains(&grp) {
        // The warps' merge area (AD_W·AD_G/2·hd floats), which attn_deca's
        // copy ring (AD_STG steps of 2·AD_KB·hd floats per warp) overlays.
        let warps = AD_THREADS as usize / 32;
        let merge = 4 * warps * AD_G / 2 * hd;
        let ring = 4 * warps * AD_STG * 2 * AD_KB * hd;
        let plain = (
            gpu.func(&format!("attn_dec_{hd}")).map_err(merr)?,
            merge as u32,
        );
        let fa = gpu.func(&format!("attn_deca_{hd}")).map_err(merr)?;
        let bytes = ring.max(merge) as u32;
        if gpu.allow_dynamic_smem(fa, bytes).is_ok() {
            Some((fa, bytes))
        } else {
            Some(plain)
        }
    } else {
        None
    };
    let flash = if matches!(hd, 64 | 256) && grp > 0 && AF_BM.is_multiple_of(grp) {
        let f = gpu.func(&format!("attn_flash_{hd}")).map_err(merr)?;
        let smem = attn_flash_smem(hd) as u32;
        // A device with less shared memory per block keeps attn_split.
        gpu.allow_dynamic_smem(f, smem).ok().map(|_| (f, smem))
    } else {
        None
    };
    Ok((dec, flash))
}

fn suffix(ty: GgmlType, what: &str) -> Result<&'static str, ModelError> {
    dequant_src::type_suffix(ty).ok_or_else(|| {
        ModelError::Backend(format!(
            "{what}: type {ty} has no CUDA kernels yet (run it with --device cpu)"
        ))
    })
}

impl CudaModel {
    /// Upload `model`'s weights to CUDA device `ordinal` and compile the
    /// kernels for it. `progress(done, total)` counts uploaded layers.
    pub fn new(
        model: &Model,
        ordinal: usize,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<CudaModel, ModelError> {
        Self::with_options(model, ordinal, CudaOptions::default(), progress)
    }

    /// [`CudaModel::new`] with options (a device budget for the routed
    /// experts).
    pub fn with_options(
        model: &Model,
        ordinal: usize,
        opts: CudaOptions,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<CudaModel, ModelError> {
        if model.expert_cache().is_some() {
            return Err(ModelError::Input(
                "the CUDA backend does not stream experts yet: load the whole model \
                 (drop --expert-cache) or use --device cpu"
                    .into(),
            ));
        }
        let c = model.config().clone();
        if c.ssm_d_k > 256
            || c.head_dim > 256
            || c.n_head_kv == 0
            || !c.n_head.is_multiple_of(c.n_head_kv)
            || c.conv_kernel > 8
            || c.n_expert_used > 32
            || c.n_expert > 512
        {
            return Err(ModelError::Backend(format!(
                "the CUDA kernels take head dims up to 256, query heads in whole groups per KV \
                 head, conv kernels up to 8 and up to 32 experts per token of at most 512 (this \
                 model: d_k {}, head_dim {}, {} query heads over {} KV heads, conv {}, {} experts)",
                c.ssm_d_k, c.head_dim, c.n_head, c.n_head_kv, c.conv_kernel, c.n_expert_used
            )));
        }
        opts.tuning.check(c.head_dim).map_err(ModelError::Backend)?;
        let gpu = Gpu::open(ordinal, &kernel_source(), &kernel_names(), &opts.gpu).map_err(merr)?;
        let w = model.weights();
        let f = model.gguf();
        // Without a budget, fit the free memory when asked: every expert when
        // the whole model fits with the reserve, else what is left for them.
        let mut opts = opts;
        if opts.expert_vram_bytes.is_none() && opts.fit {
            let (free, _) = gpu.mem_info().map_err(merr)?;
            let free = opts.free_bytes.unwrap_or(free as u64);
            let (experts, other) = redlite_model::expert_split(f);
            opts.expert_vram_bytes = fit_budget(free, experts, other)?;
        }
        // The largest layer's expert record (types may differ by layer): the
        // size of the prefetch's staging slots.
        let rec_max = w
            .layers
            .iter()
            .map(|l| expert_record([&l.moe.gate, &l.moe.up, &l.moe.down]).2 as u64)
            .max()
            .unwrap_or(0);
        // Experts per layer in device memory under the budget (None: all).
        let place = match (opts.expert_vram_bytes, w.layers.first()) {
            (Some(budget), Some(l0)) => {
                let m = &l0.moe;
                let rec = expert_record([&m.gate, &m.up, &m.down]).2.max(1) as u64;
                // The prefetch's staging areas of k records (two, and one
                // for the late copies) come out of the budget.
                let stage = if opts.no_expert_prefetch {
                    0
                } else {
                    3 * c.n_expert_used as u64 * rec_max
                };
                let per_layer = budget.saturating_sub(stage) / (w.layers.len().max(1) as u64);
                let n = (per_layer / rec) as usize;
                (n < c.n_expert).then_some(n)
            }
            _ => None,
        };
        let mut up = Uploader {
            gpu: &gpu,
            f,
            bufs: Vec::new(),
            tensors: HashMap::new(),
            bytes: 0,
            place,
            hosts: Vec::new(),
            placed: ExpertPlacement::default(),
            tcx_min_in: opts.tuning.tcx_min_in,
            q16: !opts.f32_activations,
        };
        let n = w.layers.len();
        let mut layers = Vec::with_capacity(n);
        for (il, l) in w.layers.iter().enumerate() {
            let nm = |s: &str| format!("blk.{il}.{s}");
            let mixer = match &l.mixer {
                Mixer::DeltaNet(d) => {
                    // qkv and gate in one allocation: decode takes them as
                    // one matrix when they share a type (one launch).
                    let mut qg = up
                        .mats(&[(&d.qkv, &nm("attn_qkv")), (&d.gate, &nm("attn_gate"))])?
                        .into_iter();
                    let (Some(qkv), Some(gate)) = (qg.next(), qg.next()) else {
                        return Err(ModelError::Backend(format!(
                            "{}: qkv and gate",
                            nm("attn_qkv")
                        )));
                    };
                    DMixer::DeltaNet {
                        qkv,
                        gate,
                        ba: up.mat(&d.ba, &nm("ssm_ba"))?,
                        conv: up.vec(&d.conv)?,
                        ssm_a: up.vec(&d.ssm_a)?,
                        dt_bias: up.vec(&d.dt_bias)?,
                        norm: up.vec(&d.norm)?,
                        out: up.mat(&d.out, &nm("ssm_out"))?,
                    }
                }
                Mixer::Attention(a) => DMixer::Attention {
                    q: up.mat(&a.q, &nm("attn_q"))?,
                    k: up.mat(&a.k, &nm("attn_k"))?,
                    v: up.mat(&a.v, &nm("attn_v"))?,
                    out: up.mat(&a.out, &nm("attn_output"))?,
                    q_norm: up.vec(&a.q_norm)?,
                    k_norm: up.vec(&a.k_norm)?,
                },
            };
            let m = &l.moe;
            let ([gate, upx, down], xp) = match up.place {
                Some(vram) => up
                    .placed_experts(
                        [&m.gate, &m.up, &m.down],
                        [
                            &nm("ffn_gate_exps"),
                            &nm("ffn_up_exps"),
                            &nm("ffn_down_exps"),
                        ],
                        c.n_expert,
                        vram,
                    )
                    .map(|(x, p)| (x, Some(p)))?,
                None => (
                    [
                        up.experts(&m.gate, &nm("ffn_gate_exps"))?,
                        up.experts(&m.up, &nm("ffn_up_exps"))?,
                        up.experts(&m.down, &nm("ffn_down_exps"))?,
                    ],
                    None,
                ),
            };
            layers.push(DLayer {
                attn_norm: up.vec(&l.attn_norm)?,
                post_norm: up.vec(&l.post_norm)?,
                mixer,
                router: up.mat(&m.router, &nm("ffn_gate_inp"))?,
                gate,
                up: upx,
                down,
                sh_gate: up.mat(&m.sh_gate, &nm("ffn_gate_shexp"))?,
                sh_up: up.mat(&m.sh_up, &nm("ffn_up_shexp"))?,
                sh_down: up.mat(&m.sh_down, &nm("ffn_down_shexp"))?,
                sh_inp: up.vec(&m.sh_inp)?,
                xp,
            });
            progress(il + 1, n);
        }
        let token_embd = up.mat(&w.token_embd, "token_embd")?;
        let output_norm = up.vec(&w.output_norm)?;
        let output = up.mat(&w.output, "output")?;
        let (pairs, mscale) = model.rope_table();
        let flat: Vec<f64> = pairs.iter().flat_map(|&(a, b, m)| [a, b, m]).collect();
        let rope_pairs = gpu.upload(&flat).map_err(merr)?;
        let weight_bytes = up.bytes;
        let placement = up.place.map(|_| up.placed);
        let q16 = up.q16;
        let hosts = up.hosts;
        let bufs = up.bufs;
        let chunk = match opts.tuning.pass_tokens {
            Some(n) => usize::max(n, V_MAX),
            None if gpu.total_mem >= BIG_DEVICE => T_BIG,
            None => T_MAX,
        };
        let scratch = Scratch::new(&gpu, &c, chunk).map_err(merr)?;
        // Values per token of the widest product input: the hidden state,
        // DeltaNet's and attention's outputs, the shared expert's and the
        // routed experts' SwiGLU (k slots a token).
        let xsp_cap = chunk
            * [
                c.n_embd,
                c.value_dim(),
                c.n_head * c.head_dim,
                c.shexp_ff,
                c.n_expert_used * c.expert_ff,
            ]
            .into_iter()
            .max()
            .unwrap_or(0);
        let xsp = gpu.alloc(xsp_cap * 4 + xsp_cap / 8 + 256).map_err(merr)?;
        let gpu_tc_split = gpu.func("tc_split").map_err(merr)?;
        let tcx_min_blocks = gpu.sm_count * opts.tuning.tcx_waves;
        let q16_units = gpu.alloc(V_MAX * (MV_XS / 32) * 80).map_err(merr)?;
        let q16_scales = gpu.alloc(V_MAX * (MV_XS / 32) * 4).map_err(merr)?;
        let fk = |n: &str| gpu.func(n).map_err(merr);
        let k = Kern {
            norm_rows: fk("norm_rows")?,
            gated_rmsnorm: fk("gated_rmsnorm")?,
            add_rmsnorm: fk("add_rmsnorm")?,
            swiglu: fk("swiglu")?,
            conv_silu: fk("conv_silu")?,
            delta_rule: fk("delta_rule")?,
            delta_prep: fk("delta_prep")?,
            delta_chunk_prep: fk("delta_chunk_prep")?,
            delta_chunk_state: fk("delta_chunk_state")?,
            rope_neox: fk("rope_neox")?,
            kv_append: fk("kv_append")?,
            qk_prep: fk("qk_prep")?,
            pairs: pair_names()
                .into_iter()
                .map(|n| fk(&n).map(|f| (n, f)))
                .collect::<Result<_, _>>()?,
            attn_split: fk("attn_split")?,
            attn_combine: fk("attn_combine")?,
            attn_combine_w: fk("attn_combine_w")?,
            moe_topk: fk("moe_topk")?,
            moe_group: fk("moe_group")?,
            moe_combine_norm: fk("moe_combine_norm")?,
            router_f32: fk("router_f32")?,
            router_f32n: fk("router_f32n")?,
            fill_normal: fk("fill_normal")?,
            q16_quant: fk("q16_quant")?,
            getrows_embd: fk(&format!(
                "getrows_{}",
                suffix(w.token_embd.ty, "token_embd")?
            ))?,
            xp_fetch: fk("xp_fetch")?,
            xp_restore: fk("xp_restore")?,
            xp_late: fk("xp_late")?,
            xp_scale: fk("xp_scale")?,
        };
        let delta_chunk_min = delta_chunk_min(&c, opts.tuning.delta_chunk_min);
        if delta_chunk_min.is_some() {
            gpu.allow_dynamic_smem(k.delta_chunk_prep, DC_PREP_SMEM)
                .map_err(merr)?;
            gpu.allow_dynamic_smem(k.delta_chunk_state, DC_STATE_SMEM)
                .map_err(merr)?;
        }
        let (attn_dec, attn_flash) = attn_kernels(&gpu, &c)?;
        let mut model = CudaModel {
            gpu: Arc::new(gpu),
            c,
            layers,
            token_embd,
            output_norm,
            output,
            rope_pairs,
            rope_half: pairs.len(),
            rope_mscale: mscale,
            scratch: Mutex::new(scratch),
            xsp,
            xsp_cap,
            tc_split: gpu_tc_split,
            tcx_min_blocks,
            weight_bytes,
            k,
            attn_dec,
            attn_flash,
            delta_chunk_min,
            wide_slots: opts.tuning.wide_slots,
            placement,
            xp: None,
            q16,
            mq_fill: opts.tuning.mq_fill,
            combine_cols: opts.tuning.combine_cols,
            q16_units,
            q16_scales,
            q16_held: Mutex::new(None),
            _bufs: bufs,
            _hosts: hosts,
        };
        // The decode prefetch: experts placed apart, and routers that the
        // fused router kernels take (they predict as they route).
        let prefetch = !opts.no_expert_prefetch
            && opts.expert_prefetch_top != Some(0)
            && model
                .layers
                .iter()
                .all(|l| l.xp.is_some() && model.fused_router(&l.router).is_some());
        if prefetch {
            let xp = XpBufs::new(
                &model.gpu,
                &model.c,
                rec_max as usize,
                opts.expert_prefetch_top,
                &opts.tuning,
            );
            let mut xp = xp.map_err(merr)?;
            xp.wait = opts.expert_prefetch_wait_router;
            model.xp = Some(xp);
        }
        Ok(model)
    }

    /// The start of a pass (`what`: forward or verify) over `tokens`: this
    /// model's state behind `state`, the scratch buffers (locked), the device
    /// bound to the thread.
    fn begin<'a>(
        &'a self,
        state: &'a mut dyn DeviceState,
        tokens: &[u32],
        what: &str,
    ) -> Result<(&'a mut CudaState, std::sync::MutexGuard<'a, Scratch>), ModelError> {
        let st = state
            .as_any_mut()
            .downcast_mut::<CudaState>()
            .ok_or_else(|| ModelError::Input("the state was not made by this CUDA model".into()))?;
        if tokens.is_empty() {
            return Err(ModelError::Input(format!("{what} called with no tokens")));
        }
        let s = self
            .scratch
            .lock()
            .map_err(|_| ModelError::Backend("a previous CUDA forward pass panicked".into()))?;
        self.gpu.bind().map_err(merr)?;
        Ok((st, s))
    }

    /// Bytes of weights held on the device.
    pub fn weight_bytes(&self) -> usize {
        self.weight_bytes
    }

    /// Where the routed experts live, when not all in device memory.
    pub fn placement(&self) -> Option<ExpertPlacement> {
        self.placement
    }
}

impl DeviceForward for CudaModel {
    fn name(&self) -> String {
        let experts = match self.placement {
            Some(p) => format!(
                "; experts: {} of {} per layer in device memory, the rest in pinned host memory",
                p.vram, self.c.n_expert
            ),
            None => String::new(),
        };
        let act = if self.q16 {
            "int16 activations in one-token and verify products, f32 elsewhere"
        } else {
            "f32 activations"
        };
        format!(
            "cuda:{} ({}, sm_{}{}, {act}{experts})",
            self.gpu.ordinal, self.gpu.name, self.gpu.cc.0, self.gpu.cc.1
        )
    }

    fn new_state(&self) -> Box<dyn DeviceState> {
        Box::new(CudaState::new(self.gpu.clone(), &self.c))
    }

    fn pass_tokens(&self) -> usize {
        self.scratch.lock().map_or(T_MAX, |s| s.t)
    }

    fn forward(
        &self,
        state: &mut dyn DeviceState,
        tokens: &[u32],
        all_logits: bool,
    ) -> Result<Vec<f32>, ModelError> {
        let (st, mut s) = self.begin(state, tokens, "forward")?;
        let g = &self.gpu;
        let vocab = self.c.vocab_size;
        let mut out = Vec::with_capacity(if all_logits { tokens.len() } else { 1 } * vocab);
        let per = if all_logits { s.t.min(T_MAX) } else { s.t };
        let chunks: Vec<&[u32]> = tokens.chunks(per).collect();
        let r = (|| -> Result<(), CudaError> {
            for (i, ch) in chunks.iter().enumerate() {
                let t = ch.len();
                let rows = if all_logits {
                    t
                } else if i + 1 == chunks.len() {
                    1
                } else {
                    0
                };
                self.prepare(&mut s, st, ch)?;
                if t == 1 && rows == 1 && !g.profiling() {
                    self.decode_step(&mut s)?;
                } else {
                    let ns = if t == 1 {
                        NS_DECODE
                    } else {
                        (st.pos + t).div_ceil(SPLIT_MIN).clamp(1, NS_PREFILL)
                    };
                    self.encode(&s, t, ns, rows, None, false)?;
                }
                st.pos += t;
                if rows > 0 {
                    let n0 = out.len();
                    out.resize(n0 + rows * vocab, 0.0);
                    g.dtoh(&mut out[n0..], s.logits.ptr)?;
                }
            }
            g.profile_collect()
        })();
        r.map_err(merr)?;
        Ok(out)
    }

    fn verify(&self, state: &mut dyn DeviceState, tokens: &[u32]) -> Result<Verified, ModelError> {
        let (st, mut s) = self.begin(state, tokens, "verify")?;
        let g = &self.gpu;
        let vocab = self.c.vocab_size;
        let pos0 = st.pos;
        let mut out = vec![0f32; tokens.len() * vocab];
        let r = (|| -> Result<(), CudaError> {
            st.reserve_trail(g, tokens.len())?;
            st.trail_gen += 1;
            let trail = st.trail.take();
            let res = (|| -> Result<(), CudaError> {
                let tb = trail.as_ref().ok_or_else(|| {
                    CudaError::Driver("the verify trail was not allocated".into())
                })?;
                for (i, ch) in tokens.chunks(V_MAX).enumerate() {
                    let t = ch.len();
                    self.prepare(&mut s, st, ch)?;
                    self.encode(&s, t, NS_DECODE, t, Some((tb, i * V_MAX)), false)?;
                    st.pos += t;
                    let o = i * V_MAX * vocab;
                    g.dtoh(&mut out[o..o + t * vocab], s.logits.ptr)?;
                }
                Ok(())
            })();
            st.trail = trail;
            res?;
            g.profile_collect()
        })();
        r.map_err(merr)?;
        let trail = CudaTrail {
            id: st.id,
            gen: st.trail_gen,
            n: tokens.len(),
            pos0,
        };
        Ok((out, Box::new(trail)))
    }

    fn forward_batch(
        &self,
        states: &mut [&mut dyn DeviceState],
        tokens: &[u32],
    ) -> Result<Vec<f32>, ModelError> {
        if tokens.is_empty() || tokens.len() != states.len() {
            return Err(ModelError::Input(format!(
                "batched decode needs one token per sequence ({} tokens, {} sequences)",
                tokens.len(),
                states.len()
            )));
        }
        if tokens.len() == 1 || !self.batches() {
            return redlite_model::forward_one_by_one(self, states, tokens);
        }
        let mut sts = states
            .iter_mut()
            .map(|st| {
                st.as_any_mut().downcast_mut::<CudaState>().ok_or_else(|| {
                    ModelError::Input("a state was not made by this CUDA model".into())
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut s = self
            .scratch
            .lock()
            .map_err(|_| ModelError::Backend("a previous CUDA forward pass panicked".into()))?;
        let g = &self.gpu;
        g.bind().map_err(merr)?;
        let vocab = self.c.vocab_size;
        let mut out = vec![0f32; tokens.len() * vocab];
        let r = (|| -> Result<(), CudaError> {
            for (i, (chunk, toks)) in sts.chunks_mut(B_MAX).zip(tokens.chunks(B_MAX)).enumerate() {
                let n = toks.len();
                self.prepare_batch(&mut s, chunk, toks)?;
                self.batch_step(&mut s, n)?;
                for st in chunk.iter_mut() {
                    st.pos += 1;
                }
                let o = i * B_MAX * vocab;
                g.dtoh(&mut out[o..o + n * vocab], s.logits.ptr)?;
            }
            g.profile_collect()
        })();
        r.map_err(merr)?;
        Ok(out)
    }

    fn prefetch_stats(&self, reset: bool) -> Option<redlite_model::PrefetchStats> {
        let xp = self.xp.as_ref()?;
        // Layer 0's record (every layer's on files whose experts share types).
        let rec = self.layers.first().and_then(|l| l.xp).map_or(0, |x| x.rec);
        let _guard = self.scratch.lock().ok()?;
        let g = &self.gpu;
        let mut c = [0u64; 8];
        let r = (|| -> Result<(), CudaError> {
            g.bind()?;
            g.dtoh(&mut c, xp.stats.ptr)?;
            if reset {
                g.memset0(xp.stats.ptr, 8 * 8)?;
                g.sync()?;
            }
            Ok(())
        })();
        r.ok()?;
        Some(redlite_model::PrefetchStats {
            chosen: c[0],
            predicted: c[1],
            outside: c[2],
            outside_predicted: c[3],
            copied: c[4],
            stopped_bytes: c[5],
            late: c[6],
            expert_bytes: rec,
        })
    }

    fn profile(&self) -> Vec<(String, f64, u64)> {
        self.gpu
            .profile_take()
            .into_iter()
            .map(|(k, ms, n)| (k.to_string(), ms, n))
            .collect()
    }

    fn fill_random(&self, pos: usize, seed: u64) -> Result<Box<dyn DeviceState>, ModelError> {
        let mut st = CudaState::new(self.gpu.clone(), &self.c);
        let g = &self.gpu;
        let r = (|| -> Result<(), CudaError> {
            g.bind()?;
            st.reserve(g, &self.c, pos.max(1))?;
            let fill = |p: u64, bytes: usize, sd: u64, scale: f32| -> Result<(), CudaError> {
                let n = bytes / 4;
                if n == 0 {
                    return Ok(());
                }
                g.launch_f(
                    self.k.fill_normal,
                    (n.div_ceil(256) as u32, 1, 1),
                    256,
                    0,
                    &[Arg::U(p), Arg::U(n as u64), Arg::U(sd), Arg::F(scale)],
                )
            };
            let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15);
            for (c, m) in st.conv.iter().zip(&st.ssm) {
                s = s.wrapping_add(1);
                fill(c.ptr, c.bytes, s, 1.0)?;
                s = s.wrapping_add(1);
                fill(m.ptr, m.bytes, s, 0.05)?;
            }
            for (k, v) in st.k.iter().zip(&st.v) {
                s = s.wrapping_add(1);
                fill(k.ptr, pos * st.kv_row, s, 1.0)?;
                s = s.wrapping_add(1);
                fill(v.ptr, pos * st.kv_row, s, 1.0)?;
            }
            g.sync()
        })();
        r.map_err(merr)?;
        st.pos = pos;
        Ok(Box::new(st))
    }
}
