//! The qwen3next forward pass on one CUDA device: weights uploaded once in
//! their stored format, activations in device scratch buffers, the state of
//! each sequence in device memory. The host feeds token ids and reads back
//! logits; nothing else crosses the bus inside a forward pass.
//!
//! This module holds the model ([`CudaModel::with_options`] builds it), its
//! products and the per-pass encoder (`encode`: DeltaNet, attention and MoE
//! blocks in layer order), the per-sequence state ([`CudaState`]) and the
//! `DeviceForward` / `DeviceState` glue. Beside it: `options` (the typed
//! settings and the fit budget), `upload` (weights to the device, expert
//! placement, kernel choice per matrix), `prefetch` (the decode prefetch of
//! experts held in host memory) and `source` (the kernel source and names).

use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use redlite_gguf::{GgmlType, GgufFile};
use redlite_model::weights::{Experts, Mat, Mixer};
use redlite_model::{Config, DeviceForward, DeviceState, Model, ModelError, Verified};

use crate::gpu::{Arg, DevBuf, Func, Gpu, GpuOptions, Graph};
use crate::{dequant_src, CudaError};

mod options;
mod prefetch;
mod source;
mod upload;

use options::fit_budget;
pub use options::{CudaOptions, CudaTuning, ExpertPlacement, FIT_RESERVE};
use prefetch::{XpBufs, XpLayer, XP_MARK_PAD, XP_WORDS};
pub use source::{kernel_names, kernel_source, FORWARD_PARTS};
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

/// Activation buffers for one pass of up to `Scratch::t` tokens (logits for
/// up to `T_MAX` of them).
struct Scratch {
    /// Most tokens of one pass.
    t: usize,
    tok: DevBuf,
    x: DevBuf,
    h: DevBuf,
    mix: DevBuf,
    qkv: DevBuf,
    z: DevBuf,
    ba: DevBuf,
    /// The delta rule's per-token scalars (`delta_prep`), for passes of
    /// more than one token.
    dpre: DevBuf,
    /// The chunked delta rule's per-chunk products (`delta_chunk_prep`):
    /// U, W, e^G Q and e^(G_l - G) K (`[t][h_v][DC_D]`), P
    /// (`[chunk][h_v][DC_L][DC_L]`), e^G per token and value head.
    dcu: DevBuf,
    dcw: DevBuf,
    dcq: DevBuf,
    dck: DevBuf,
    dcp: DevBuf,
    dce: DevBuf,
    u: DevBuf,
    o: DevBuf,
    qg: DevBuf,
    q: DevBuf,
    k: DevBuf,
    v: DevBuf,
    att: DevBuf,
    part: DevBuf,
    rl: DevBuf,
    ids: DevBuf,
    wts: DevBuf,
    eg: DevBuf,
    eu: DevBuf,
    ed: DevBuf,
    sg: DevBuf,
    su: DevBuf,
    sd: DevBuf,
    logits: DevBuf,
    /// Per token, blocks of `router_<T>` done (the last one takes the top k
    /// and resets it to 0).
    router_done: DevBuf,
    /// Prefill expert grouping: slots per expert, their offsets, the slots.
    counts: DevBuf,
    offsets: DevBuf,
    perm: DevBuf,
    /// Control words the kernels read: [position of the first token, tokens].
    ctl: DevBuf,
    /// Per layer, two pointers: (conv, ssm) or (keys, values) of the sequence.
    tab: DevBuf,
    /// What `tab` holds (it changes only with the sequence or a larger KV
    /// cache, so a decode step usually has nothing to upload).
    tab_host: Vec<u64>,
    /// The captured decode step (one token, last logits), replayed per token.
    graph: Option<Graph>,
    /// A batched decode pass's state table (`B_MAX` sequences of `tab`'s
    /// layout, one after another), its control words (per sequence: its
    /// position, 1, 0, 0), what the table holds, and the captured pass per
    /// number of sequences.
    btab: DevBuf,
    bctl: DevBuf,
    btab_host: Vec<u64>,
    bgraphs: HashMap<usize, Graph>,
}

/// Where the per-sequence kernels of a pass (conv, delta rule, `qk_prep`,
/// attention) find the sequence states and positions: one sequence (`tab`
/// and `ctl` of the scratch, `bs` 0), or a batched decode pass whose token
/// `i` is sequence `i`'s (`bs` table entries per sequence, control words
/// per sequence; see `att_pos0` in `attention.cuh`).
#[derive(Clone, Copy)]
struct SeqTab {
    tab: u64,
    ctl: u64,
    bs: i32,
}

impl SeqTab {
    fn of(s: &Scratch, batch: bool, layers: usize) -> SeqTab {
        if batch {
            SeqTab {
                tab: s.btab.ptr,
                ctl: s.bctl.ptr,
                bs: (2 * layers) as i32,
            }
        } else {
            SeqTab {
                tab: s.tab.ptr,
                ctl: s.ctl.ptr,
                bs: 0,
            }
        }
    }
    /// The grid's z extent of a per-sequence kernel over `t` tokens (one
    /// block layer per sequence when batched).
    fn z(&self, t: usize) -> u32 {
        if self.bs > 0 {
            t as u32
        } else {
            1
        }
    }
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

/// The arguments of `mv` / `mv1` / `mq1` (the same list for each) for `a`.
fn mv_args(a: &MvLaunch) -> [Arg; 15] {
    [
        Arg::U(a.w),
        Arg::U(a.row_bytes as u64),
        Arg::I(a.n_in as i32),
        Arg::I(a.n_out as i32),
        Arg::U(a.x),
        Arg::I(a.n_in as i32),
        Arg::U(a.y),
        Arg::I(a.n_out as i32),
        Arg::I(a.n_tok as i32),
        Arg::U(a.ids),
        Arg::U(a.w_zstride),
        Arg::I(a.x_div as i32),
        Arg::U(a.x_zstride),
        Arg::U(a.y_zstride),
        Arg::U(a.x2),
    ]
}

/// The arguments of one matrix-vector launch (`DEF_MATVEC` in
/// `products.cuh`, in its order): `slots` matrices at `w + e·w_zstride` (`e`
/// from `ids`, or the slot), inputs at `x + (slot / x_div)·x_zstride`,
/// outputs at `y + slot·y_zstride`; `x2` non-null: the input is
/// `silu(x) ⊙ x2`.
struct MvLaunch {
    w: u64,
    row_bytes: usize,
    n_in: usize,
    n_out: usize,
    x: u64,
    y: u64,
    n_tok: usize,
    slots: usize,
    ids: u64,
    w_zstride: u64,
    x_div: usize,
    x_zstride: u64,
    y_zstride: u64,
    x2: u64,
}

impl MvLaunch {
    /// One matrix over `n_tok` tokens (rows of `n_in` inputs, `n_out` outputs).
    fn new(
        w: u64,
        row_bytes: usize,
        n_in: usize,
        n_out: usize,
        x: u64,
        y: u64,
        n_tok: usize,
    ) -> MvLaunch {
        MvLaunch {
            w,
            row_bytes,
            n_in,
            n_out,
            x,
            y,
            n_tok,
            slots: 1,
            ids: 0,
            w_zstride: 0,
            x_div: 1,
            x_zstride: 0,
            y_zstride: 0,
            x2: 0,
        }
    }
}

/// A one-token product on 16-bit activations (`mq1_T` or `mqgu_T`), made
/// ready to launch alone or beside another ([`CudaModel::launch_two`]).
struct MqJob {
    f: Func,
    /// The kernel's own arguments.
    args: Vec<Arg>,
    /// Blocks per slot when launched alone, and the most that have work (a
    /// warp per row at least).
    blocks: u32,
    max_blocks: u32,
    slots: u32,
    /// Weight bytes read (how two jobs share the device).
    bytes: usize,
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

    /// `y = M·x` over `t` tokens; `exact`: each token computed exactly as a
    /// one-token pass computes it (a verify pass), else the fastest way.
    fn mv(&self, m: &DMat, x: u64, y: u64, t: usize, exact: bool) -> Result<(), CudaError> {
        if t > 1 && !exact && m.n_in.is_multiple_of(32) {
            let blocks = m.n_out.div_ceil(128) * t.div_ceil(128);
            if let Some(k) = m
                .mmx
                .filter(|_| t * m.n_in <= self.xsp_cap && blocks >= self.tcx_min_blocks)
            {
                let (hi, lo, sums) = self.split(x, m.n_in, t)?;
                return self.gpu.launch_f(
                    k.f,
                    (m.n_out.div_ceil(128) as u32, t.div_ceil(k.tokens) as u32, 1),
                    k.threads,
                    k.smem,
                    &[
                        Arg::U(m.ptr),
                        Arg::U(m.row_bytes as u64),
                        Arg::I(m.n_in as i32),
                        Arg::I(m.n_out as i32),
                        Arg::U(hi),
                        Arg::U(lo),
                        Arg::U(sums),
                        Arg::U(y),
                        Arg::I(m.n_out as i32),
                        Arg::I(t as i32),
                    ],
                );
            }
            return self.gpu.launch_f(
                m.mm.f,
                (
                    m.n_out.div_ceil(64) as u32,
                    t.div_ceil(m.mm.tokens) as u32,
                    1,
                ),
                m.mm.threads,
                m.mm.smem,
                &[
                    Arg::U(m.ptr),
                    Arg::U(m.row_bytes as u64),
                    Arg::I(m.n_in as i32),
                    Arg::I(m.n_out as i32),
                    Arg::U(x),
                    Arg::I(m.n_in as i32),
                    Arg::U(y),
                    Arg::I(m.n_out as i32),
                    Arg::I(t as i32),
                ],
            );
        }
        self.launch_mv(
            m.kern,
            MvLaunch::new(m.ptr, m.row_bytes, m.n_in, m.n_out, x, y, t),
            exact,
        )
    }

    /// Split `rows` rows of `n_in` inputs at `x` (contiguous) into `xsp`
    /// (`tc_split`): the addresses of their hi and lo halves and their sums.
    fn split(&self, x: u64, n_in: usize, rows: usize) -> Result<(u64, u64, u64), CudaError> {
        let n = (rows * n_in) as u64;
        let (hi, lo, sums) = (self.xsp.ptr, self.xsp.ptr + 2 * n, self.xsp.ptr + 4 * n);
        self.gpu.launch_f(
            self.tc_split,
            ((rows * n_in / 8).div_ceil(256) as u32, 1, 1),
            256,
            0,
            &[
                Arg::U(x),
                Arg::I(n_in as i32),
                Arg::I(n_in as i32),
                Arg::I(rows as i32),
                Arg::U(hi),
                Arg::U(lo),
                Arg::U(sums),
            ],
        )?;
        Ok((hi, lo, sums))
    }

    /// Launch the matrix-vector kernel of `k` that suits `a` (see
    /// [`CudaModel::pick`]).
    fn launch_mv(&self, k: MvKernels, a: MvLaunch, exact: bool) -> Result<(), CudaError> {
        let grid = match k.mq {
            // One token on 16-bit activations: `mq1` takes `mv1`'s arguments
            // on a grid that fills the device.
            Some(mq) if a.n_tok == 1 => (mq.mq1, (self.mq_blocks(a.n_out, a.slots), 1)),
            Some(mq) if exact && a.ids == 0 && a.x_zstride == 0 && a.n_tok <= V_MAX => {
                return self.launch_mqn(mq.mqn, &a);
            }
            _ => {
                let (f, rows, tile) = self.pick(k, a.n_in, a.n_tok, exact);
                (
                    f,
                    (a.n_out.div_ceil(rows) as u32, a.n_tok.div_ceil(tile) as u32),
                )
            }
        };
        let (f, (gx, gy)) = grid;
        self.gpu
            .launch_f(f, (gx, gy, a.slots as u32), 128, 0, &mv_args(&a))
    }

    /// `a` as an `mq1` job, when it is one token on 16-bit activations.
    fn mq1_job(&self, k: MvKernels, a: &MvLaunch) -> Option<MqJob> {
        let mq = k.mq.filter(|_| a.n_tok == 1)?;
        Some(MqJob {
            f: mq.mq1,
            args: mv_args(a).to_vec(),
            blocks: self.mq_blocks(a.n_out, a.slots),
            max_blocks: a.n_out.div_ceil(4).max(1) as u32,
            slots: a.slots as u32,
            bytes: a.n_out * a.row_bytes * a.slots,
        })
    }

    /// `mv_gate_up`'s launch as an `mqgu` job, when it is one.
    #[allow(clippy::too_many_arguments)]
    fn mqgu_job(
        &self,
        g: GuMat,
        up_off: u64,
        ids: u64,
        slots: usize,
        x: u64,
        x_div: usize,
        y: u64,
    ) -> Option<MqJob> {
        if g.n_in > MV_XS {
            return None;
        }
        let mq = g.kern.mq?;
        Some(MqJob {
            f: mq.mqgu,
            args: vec![
                Arg::U(g.base),
                Arg::U(up_off),
                Arg::U(g.row_bytes as u64),
                Arg::I(g.n_in as i32),
                Arg::I(g.n_out as i32),
                Arg::U(x),
                Arg::U(y),
                Arg::U(ids),
                Arg::U(g.stride),
                Arg::I(x_div as i32),
                Arg::U(g.n_in as u64),
                Arg::U(g.n_out as u64),
            ],
            blocks: self.mq_blocks(g.n_out, slots),
            max_blocks: g.n_out.div_ceil(4).max(1) as u32,
            slots: slots as u32,
            bytes: 2 * g.n_out * g.row_bytes * slots,
        })
    }

    /// Launch one job alone.
    fn launch_job(&self, j: &MqJob) -> Result<(), CudaError> {
        self.gpu
            .launch_f(j.f, (j.blocks, 1, j.slots), 128, 0, &j.args)
    }

    /// Two independent jobs (neither reads what the other writes): one
    /// launch of their paired kernel when it exists (the device's blocks
    /// shared by weight bytes, the smaller job's first), else one each, `a`
    /// first. `conv` (`mq1` pairs): DeltaNet's conv as the epilogue of `b`
    /// (`MqConv` in `q16_products.cuh`: weights, state table, slot, output,
    /// channels, kernel length), applied only where `b` runs second in the
    /// paired kernel; the answer says whether it was.
    fn launch_two(&self, a: MqJob, b: MqJob, conv: Option<[Arg; 6]>) -> Result<bool, CudaError> {
        let (small, big) = if a.bytes <= b.bytes {
            (&a, &b)
        } else {
            (&b, &a)
        };
        let split = |f: Func| f.name.split_once('_');
        let paired = match (split(small.f), split(big.f)) {
            (Some((ks, ts)), Some((kb, tb))) if ks == kb => {
                let p = self.k.pairs.get(&format!("{ks}p_{ts}__{tb}"));
                match p {
                    Some(f) => Some((*f, small, big)),
                    None => self
                        .k
                        .pairs
                        .get(&format!("{ks}p_{tb}__{ts}"))
                        .map(|f| (*f, big, small)),
                }
            }
            _ => None,
        };
        let Some((f, first, second)) = paired else {
            self.launch_job(&a)?;
            self.launch_job(&b)?;
            return Ok(false);
        };
        // Blocks per slot in proportion to the bytes, within what each has
        // work for, the two together filling the device once.
        let fill = (self.gpu.sm_count * self.mq_fill) as u64;
        let total = (first.bytes + second.bytes).max(1) as u64;
        let (z1, z2) = (first.slots.max(1) as u64, second.slots.max(1) as u64);
        let n1 = (fill * first.bytes as u64 / total / z1).clamp(1, first.max_blocks as u64);
        let n2 = (fill.saturating_sub(n1 * z1) / z2).clamp(1, second.max_blocks as u64);
        let n1 = (fill.saturating_sub(n2 * z2) / z1).clamp(1, first.max_blocks as u64);
        let mut args = first.args.clone();
        args.push(Arg::I(n1 as i32));
        args.push(Arg::I(z1 as i32));
        args.extend_from_slice(&second.args);
        args.push(Arg::I(n2 as i32));
        let mut applied = false;
        if f.name.starts_with("mq1p_") {
            match conv.filter(|_| std::ptr::eq(second, &b)) {
                Some(c) => {
                    args.extend_from_slice(&c);
                    applied = true;
                }
                None => args.extend_from_slice(&[
                    Arg::U(0),
                    Arg::U(0),
                    Arg::I(0),
                    Arg::U(0),
                    Arg::I(0),
                    Arg::I(0),
                ]),
            }
        }
        self.gpu
            .launch_f(f, ((n1 * z1 + n2 * z2) as u32, 1, 1), 128, 0, &args)?;
        Ok(applied)
    }

    /// The kernel for `t` tokens of `n_in` inputs, the output rows one
    /// block covers and the tokens it takes: the one-token kernel (`MV1_R`
    /// rows per warp) when it applies, its several-token twin for an exact
    /// pass (each token's sums as `mv1` makes them), else `mv`. (Beyond
    /// `MV_XS` inputs every token count takes `mv`, whose sums do not
    /// depend on the token count either.)
    fn pick(&self, k: MvKernels, n_in: usize, t: usize, exact: bool) -> (Func, usize, usize) {
        if n_in > MV_XS {
            (k.mv, 4, 8)
        } else if t == 1 {
            (k.mv1, 4 * MV1_R, 1)
        } else if exact {
            (k.mvn, 4 * MV1_R, MVN_NT)
        } else {
            (k.mv, 4, 8)
        }
    }

    /// Blocks per slot of a streaming integer kernel over `n_out` rows and
    /// `slots` slots: enough for every warp a row, at most what fills the
    /// device (`MQ_BLOCKS_PER_SM` per multiprocessor over all slots).
    fn mq_blocks(&self, n_out: usize, slots: usize) -> u32 {
        let fill = (self.gpu.sm_count * self.mq_fill).div_ceil(slots.max(1));
        n_out.div_ceil(4).min(fill).max(1) as u32
    }

    /// A verify pass's product on 16-bit activations: the tokens' inputs
    /// quantized into the model's `q16_units` / `q16_scales` (`q16_quant`,
    /// the quantizer `mq1` runs per block), then `mqn` over them; `a` has no
    /// expert ids, one input for its slots and at most `V_MAX` tokens.
    /// The quantization is skipped when `q16_units` holds this input already
    /// and nothing was queued since (the product before read the same one).
    fn launch_mqn(&self, f: Func, a: &MvLaunch) -> Result<(), CudaError> {
        let key: Q16Key = (a.x, a.x2, a.n_in, a.n_tok);
        let mut held = self.q16_held.lock().unwrap_or_else(|e| e.into_inner());
        let fresh = *held == Some((key, self.gpu.launches()));
        if !fresh {
            let warps = a.n_tok * (a.n_in / 256);
            self.gpu.launch_f(
                self.k.q16_quant,
                (warps.div_ceil(4) as u32, 1, 1),
                128,
                0,
                &[
                    Arg::U(a.x),
                    Arg::U(a.x2),
                    Arg::I(a.n_in as i32),
                    Arg::I(a.n_tok as i32),
                    Arg::U(self.q16_units.ptr),
                    Arg::U(self.q16_scales.ptr),
                ],
            )?;
        }
        self.gpu.launch_f(
            f,
            (
                self.mq_blocks(a.n_out, a.slots * a.n_tok.div_ceil(MVN_NT)),
                a.n_tok.div_ceil(MVN_NT) as u32,
                a.slots as u32,
            ),
            128,
            0,
            &[
                Arg::U(a.w),
                Arg::U(a.row_bytes as u64),
                Arg::I(a.n_in as i32),
                Arg::I(a.n_out as i32),
                Arg::U(self.q16_units.ptr),
                Arg::U(self.q16_scales.ptr),
                Arg::U(a.y),
                Arg::I(a.n_out as i32),
                Arg::I(a.n_tok as i32),
                Arg::U(a.w_zstride),
                Arg::U(a.y_zstride),
            ],
        )?;
        // The product wrote y only (never x or x2: a product's output is
        // another buffer), so the quantized input still stands.
        *held = Some((key, self.gpu.launches()));
        Ok(())
    }

    /// `y = M·(silu(g) ⊙ u)` over `t` tokens (one, or an exact pass), the
    /// SwiGLU product formed as the kernel reads its input.
    fn mv_swiglu(&self, m: &DMat, g: u64, u: u64, y: u64, t: usize) -> Result<(), CudaError> {
        self.launch_mv(
            m.kern,
            MvLaunch {
                x2: u,
                ..MvLaunch::new(m.ptr, m.row_bytes, m.n_in, m.n_out, g, y, t)
            },
            true,
        )
    }

    /// `ya = A·x` and `yb = B·x` in one launch when A and B have the same
    /// type and shape (slot 1 reaches B and `yb` by pointer differences),
    /// else two.
    #[allow(clippy::too_many_arguments)]
    fn mv_pair(
        &self,
        a: &DMat,
        b: &DMat,
        x: u64,
        ya: u64,
        yb: u64,
        t: usize,
        exact: bool,
    ) -> Result<(), CudaError> {
        if (t > 1 && !exact)
            || a.ty != b.ty
            || a.n_in != b.n_in
            || a.n_out != b.n_out
            || a.row_bytes != b.row_bytes
        {
            self.mv(a, x, ya, t, exact)?;
            return self.mv(b, x, yb, t, exact);
        }
        // Slot 1 reaches B and `yb` by pointer differences (wrapping).
        self.launch_mv(
            a.kern,
            MvLaunch {
                slots: 2,
                w_zstride: b.ptr.wrapping_sub(a.ptr),
                y_zstride: ((yb as i64).wrapping_sub(ya as i64) / 4) as u64,
                ..MvLaunch::new(a.ptr, a.row_bytes, a.n_in, a.n_out, x, ya, t)
            },
            exact,
        )
    }

    /// Expert products for `slots` (token, choice) pairs: slot z multiplies
    /// expert ids[z] with x + (z / x_div)·n_in and writes y + z·n_out.
    #[allow(clippy::too_many_arguments)]
    fn mv_experts(
        &self,
        m: &DExperts,
        ids: u64,
        slots: usize,
        x: u64,
        x2: u64,
        x_div: usize,
        y: u64,
    ) -> Result<(), CudaError> {
        self.launch_mv(
            m.kern,
            MvLaunch {
                slots,
                ids,
                w_zstride: m.stride,
                x_div,
                x_zstride: m.n_in as u64,
                y_zstride: m.n_out as u64,
                x2,
                ..MvLaunch::new(m.base, m.row_bytes, m.n_in, m.n_out, x, y, 1)
            },
            true,
        )
    }

    /// `y_z = silu(G_z·x_z) ⊙ (U_z·x_z)` for `slots` one-token slots with
    /// `mvgu` (see `products.cuh`), when gate and up are alike (type, shape,
    /// stride) and the input fits the one-token kernels; `Ok(false)` when
    /// they do not (the caller runs the separate products).
    #[allow(clippy::too_many_arguments)]
    fn mv_gate_up(
        &self,
        g: GuMat,
        up_off: u64,
        ids: u64,
        slots: usize,
        x: u64,
        x_div: usize,
        y: u64,
    ) -> Result<bool, CudaError> {
        if g.n_in > MV_XS {
            return Ok(false);
        }
        let (f, blocks) = match g.kern.mq {
            Some(m) => (m.mqgu, self.mq_blocks(g.n_out, slots)),
            None => (g.kern.mvgu, g.n_out.div_ceil(4) as u32),
        };
        self.gpu.launch_f(
            f,
            (blocks, 1, slots as u32),
            128,
            0,
            &[
                Arg::U(g.base),
                Arg::U(up_off),
                Arg::U(g.row_bytes as u64),
                Arg::I(g.n_in as i32),
                Arg::I(g.n_out as i32),
                Arg::U(x),
                Arg::U(y),
                Arg::U(ids),
                Arg::U(g.stride),
                Arg::I(x_div as i32),
                Arg::U(g.n_in as u64),
                Arg::U(g.n_out as u64),
            ],
        )?;
        Ok(true)
    }

    /// Expert products grouped by expert (after `moe_group`): every slot q
    /// of the pass's `slots` reads x + (q / x_div)·n_in and writes
    /// y + q·n_out. `split`: the call before split this x for `mmgx_T`
    /// (the same rows and row length) and it is split still. Returns
    /// whether this call's x is split now.
    #[allow(clippy::too_many_arguments)]
    fn mv_grouped(
        &self,
        m: &DExperts,
        s: &Scratch,
        x: u64,
        x_div: usize,
        y: u64,
        slots: usize,
        split: bool,
    ) -> Result<bool, CudaError> {
        let many = slots >= self.wide_slots * self.c.n_expert;
        let rows = slots / x_div;
        if let Some(k) = m
            .mmgx
            .filter(|_| many && slots.is_multiple_of(x_div) && rows * m.n_in <= self.xsp_cap)
        {
            let n = (rows * m.n_in) as u64;
            let (hi, lo, sums) = if split {
                (self.xsp.ptr, self.xsp.ptr + 2 * n, self.xsp.ptr + 4 * n)
            } else {
                self.split(x, m.n_in, rows)?
            };
            self.gpu.launch_f(
                k.f,
                (m.n_out.div_ceil(256) as u32, 1, self.c.n_expert as u32),
                k.threads,
                k.smem,
                &[
                    Arg::U(m.base),
                    Arg::U(m.row_bytes as u64),
                    Arg::I(m.n_in as i32),
                    Arg::I(m.n_out as i32),
                    Arg::U(m.stride),
                    Arg::U(hi),
                    Arg::U(lo),
                    Arg::U(sums),
                    Arg::I(x_div as i32),
                    Arg::U(y),
                    Arg::U(m.n_out as u64),
                    Arg::U(s.counts.ptr),
                    Arg::U(s.offsets.ptr),
                    Arg::U(s.perm.ptr),
                ],
            )?;
            return Ok(true);
        }
        let wide = m.mmgw.filter(|_| many);
        let (f, rows, threads, smem) = if let Some(w) = wide {
            (w.f, 64, w.threads, w.smem)
        } else if m.n_in.is_multiple_of(32) {
            (m.mmg.f, 64, m.mmg.threads, m.mmg.smem)
        } else {
            (m.mvg, 4, 128, 0)
        };
        self.gpu.launch_f(
            f,
            (m.n_out.div_ceil(rows) as u32, 1, self.c.n_expert as u32),
            threads,
            smem,
            &[
                Arg::U(m.base),
                Arg::U(m.row_bytes as u64),
                Arg::I(m.n_in as i32),
                Arg::I(m.n_out as i32),
                Arg::U(m.stride),
                Arg::U(x),
                Arg::I(x_div as i32),
                Arg::U(m.n_in as u64),
                Arg::U(y),
                Arg::U(m.n_out as u64),
                Arg::U(s.counts.ptr),
                Arg::U(s.offsets.ptr),
                Arg::U(s.perm.ptr),
            ],
        )?;
        Ok(false)
    }

    /// The router and its top-k as one launch (`router_f32`: the matrix
    /// read at once, a row per warp; else `router_<T>`), with the rows each
    /// block takes; `None` where neither takes `r`.
    fn fused_router(&self, r: &DMat) -> Option<(Func, usize)> {
        let direct = r.ty == GgmlType::F32 && r.n_in.is_multiple_of(256) && r.n_in <= 2048;
        if direct {
            Some((self.k.router_f32, 4))
        } else if r.n_in <= MV_XS {
            Some((r.kern.router, 4 * MV1_R))
        } else {
            None
        }
    }

    /// RMS (mode 0) or L2 (mode 1) norm over `rows` rows (see `norm_rows`).
    #[allow(clippy::too_many_arguments)]
    fn norm(
        &self,
        input: u64,
        out: u64,
        w: u64,
        dim: usize,
        rows: usize,
        per: usize,
        strides: (usize, usize, usize, usize),
        mode: i32,
        mul: f64,
    ) -> Result<(), CudaError> {
        self.gpu.launch_f(
            self.k.norm_rows,
            (rows as u32, 1, 1),
            dim.clamp(32, 256).next_power_of_two().min(256) as u32,
            0,
            &[
                Arg::U(input),
                Arg::U(out),
                Arg::U(w),
                Arg::I(dim as i32),
                Arg::I(per as i32),
                Arg::U(strides.0 as u64),
                Arg::U(strides.1 as u64),
                Arg::U(strides.2 as u64),
                Arg::U(strides.3 as u64),
                Arg::F(self.c.rms_eps),
                Arg::I(mode),
                Arg::D(mul),
            ],
        )
    }

    fn elementwise(&self, f: Func, a: u64, b: u64, n: usize) -> Result<(), CudaError> {
        self.gpu.launch_f(
            f,
            (n.div_ceil(256) as u32, 1, 1),
            256,
            0,
            &[Arg::U(a), Arg::U(b), Arg::U(n as u64)],
        )
    }

    /// Before a pass over `tokens` of `st`: room in the KV cache, and the
    /// token ids, control words and state table on the device.
    fn prepare(
        &self,
        s: &mut Scratch,
        st: &mut CudaState,
        tokens: &[u32],
    ) -> Result<(), CudaError> {
        let g = &self.gpu;
        st.reserve(g, &self.c, st.pos + tokens.len())?;
        let ids: Vec<i32> = tokens.iter().map(|&x| x as i32).collect();
        g.htod(s.tok.ptr, &ids)?;
        g.htod(s.ctl.ptr, &[st.pos as i32, tokens.len() as i32, 0, 0])?;
        let mut tab = Vec::with_capacity(2 * self.layers.len());
        self.state_tab(st, &mut tab);
        if tab != s.tab_host {
            g.htod(s.tab.ptr, &tab)?;
            s.tab_host = tab;
        }
        Ok(())
    }

    /// Append `st`'s state table (per layer two pointers: conv and
    /// DeltaNet state, or keys and values) to `tab`.
    fn state_tab(&self, st: &CudaState, tab: &mut Vec<u64>) {
        let (mut idn, mut iat) = (0, 0);
        for l in &self.layers {
            match l.mixer {
                DMixer::DeltaNet { .. } => {
                    tab.push(st.conv[idn].ptr);
                    tab.push(st.ssm[idn].ptr);
                    idn += 1;
                }
                DMixer::Attention { .. } => {
                    tab.push(st.k[iat].ptr);
                    tab.push(st.v[iat].ptr);
                    iat += 1;
                }
            }
        }
    }

    /// Before a batched decode pass over `sts` (at most `B_MAX`), one token
    /// each: room in each KV cache, then the token ids, the control words
    /// and the state tables on the device.
    fn prepare_batch(
        &self,
        s: &mut Scratch,
        sts: &mut [&mut CudaState],
        tokens: &[u32],
    ) -> Result<(), CudaError> {
        let g = &self.gpu;
        let mut tab = Vec::with_capacity(sts.len() * 2 * self.layers.len());
        let mut ctl = Vec::with_capacity(4 * sts.len());
        for st in sts.iter_mut() {
            st.reserve(g, &self.c, st.pos + 1)?;
            self.state_tab(st, &mut tab);
            ctl.extend([st.pos as i32, 1, 0, 0]);
        }
        let ids: Vec<i32> = tokens.iter().map(|&x| x as i32).collect();
        g.htod(s.tok.ptr, &ids)?;
        g.htod(s.bctl.ptr, &ctl)?;
        if tab != s.btab_host {
            g.htod(s.btab.ptr, &tab)?;
            s.btab_host = tab;
        }
        Ok(())
    }

    /// Whether this model takes batched decode passes: `qk_prep` for its
    /// heads and `attn_dec` or `attn_split` for its attention (the prefill
    /// kernels of wider heads read one sequence's position only).
    fn batches(&self) -> bool {
        self.c.head_dim <= QK_HD_MAX
    }

    /// One batched decode pass over `sts` (prepared; at most `B_MAX`):
    /// replay the pass captured for this many sequences, capturing it at
    /// the first (launched directly while profiling).
    fn batch_step(&self, s: &mut Scratch, n: usize) -> Result<(), CudaError> {
        if self.gpu.profiling() {
            return self.encode(s, n, NS_DECODE, n, None, true);
        }
        if !s.bgraphs.contains_key(&n) {
            self.gpu.begin_capture()?;
            let enc = self.encode(s, n, NS_DECODE, n, None, true);
            let graph = self.gpu.end_capture();
            enc?;
            s.bgraphs.insert(n, graph?);
        }
        match s.bgraphs.get(&n) {
            Some(gr) => self.gpu.replay(gr),
            None => Ok(()),
        }
    }

    /// Queue one pass over `t` tokens (at most `Scratch::t`) prepared by
    /// [`CudaModel::prepare`] at position `pos0`, then the LM head over the
    /// last `rows` of them (logits in `s.logits`). Launches only: no copy, no
    /// synchronisation, so a decode step can be captured as a graph (the
    /// kernels read the position and the state pointers from the device; `ns`
    /// attention splits). With `trail` the pass is a verify pass: every
    /// token is computed exactly as a decode step would compute it (the
    /// one-token kernels and their several-token twins, decode's attention
    /// splits, experts per token), and the recurrent states after each token
    /// are written to the trail.
    fn encode(
        &self,
        s: &Scratch,
        t: usize,
        ns: usize,
        rows: usize,
        trail: Option<(&TrailBufs, usize)>,
        batch: bool,
    ) -> Result<(), CudaError> {
        let c = &self.c;
        // A batched decode pass computes each token as a verify pass does
        // (each exactly as its decode step alone).
        let exact = trail.is_some() || batch;
        let seqs = SeqTab::of(s, batch, self.layers.len());
        let mut idn = 0usize;
        let g = &self.gpu;
        let k = &self.k;
        let d = c.n_embd;
        let te = &self.token_embd;
        // Programmatic dependent launch for decode and verify with every
        // expert in device memory (H200, tg128: 169.4 -> 179.3 tok/s with
        // router_f32); off for prefill and for experts read over the bus
        // (72.8 -> 71.0 tok/s with it).
        g.set_pdl((t == 1 || exact) && self.placement.is_none());
        g.launch_f(
            k.getrows_embd,
            (t as u32, 1, 1),
            128,
            0,
            &[
                Arg::U(te.ptr),
                Arg::U(te.row_bytes as u64),
                Arg::I(d as i32),
                Arg::U(s.tok.ptr),
                Arg::U(s.x.ptr),
            ],
        )?;
        // The expert prefetch (one-token decode with experts placed apart):
        // layers 0 and 1 predicted from the embeddings, layer m > 1 from
        // layer m - 1's input (written by layer m - 2's MoE combine).
        let xp = self.xp.as_ref().filter(|_| t == 1 && !exact);
        let nl = self.layers.len();
        if let Some(xp) = xp {
            let w1 = self.layers.get(1).unwrap_or(&self.layers[0]).post_norm;
            g.launch_f(
                k.xp_scale,
                (2, 1, 1),
                256,
                0,
                &[
                    Arg::U(s.x.ptr),
                    Arg::U(self.layers[0].post_norm),
                    Arg::U(w1),
                    Arg::U(xp.snap.ptr),
                    Arg::U(xp.snap.ptr + (d * 4) as u64),
                    Arg::I(d as i32),
                ],
            )?;
            for m in 0..nl.min(2) {
                self.prefetch(xp, m)?;
            }
        }
        // Decode with every expert in device memory: independent one-token
        // products two at a time (`launch_two`).
        let pair = t == 1 && !exact && xp.is_none() && self.placement.is_none();
        // A batched decode pass pairs the MoE's products the same way, a
        // slot per (sequence, choice) for the routed experts and a slot per
        // sequence for the shared expert (each row's sums are what the
        // one-token kernel gives it alone, whatever the grid).
        let pair_moe = pair || (batch && xp.is_none() && self.placement.is_none());
        let one =
            |m: &DMat, x: u64, y: u64| MvLaunch::new(m.ptr, m.row_bytes, m.n_in, m.n_out, x, y, 1);
        for (il, l) in self.layers.iter().enumerate() {
            let slot = (2 * il) as i32;
            if il == 0 {
                // Later layers' input norms come with the previous layer's MoE combine.
                self.norm(s.x.ptr, s.h.ptr, l.attn_norm, d, t, 1, (d, 0, d, 0), 0, 0.0)?;
            }
            match &l.mixer {
                DMixer::DeltaNet {
                    qkv,
                    gate,
                    ba,
                    conv,
                    ssm_a,
                    dt_bias,
                    norm,
                    out,
                } => {
                    let (hk, hv, dk, dv) = (c.ssm_h_k, c.ssm_h_v, c.ssm_d_k, c.ssm_d_v);
                    let (cd, kd) = (c.conv_dim(), c.key_dim());
                    // Where this layer's states after each token go (verify).
                    let (tconv, tssm) = match trail {
                        Some((tr, j0)) => (tr.conv_at(idn, j0), tr.ssm_at(idn, j0)),
                        None => (0, 0),
                    };
                    idn += 1;
                    // One token: qkv and gate as one matrix when they lie
                    // together (one launch; z right behind qkv's outputs).
                    let mut ba_done = false;
                    let mut conv_done = false;
                    let conv_args = [
                        Arg::U(*conv),
                        Arg::U(s.tab.ptr),
                        Arg::I(slot),
                        Arg::U(s.u.ptr),
                        Arg::I(cd as i32),
                        Arg::I(c.conv_kernel as i32),
                    ];
                    let z = match qkv.joined(gate).filter(|_| t == 1) {
                        Some(both) => {
                            let jobs = if pair {
                                self.mq1_job(both.kern, &one(&both, s.h.ptr, s.qkv.ptr))
                                    .zip(self.mq1_job(ba.kern, &one(ba, s.h.ptr, s.ba.ptr)))
                            } else {
                                None
                            };
                            match jobs {
                                Some((j1, j2)) => {
                                    // ba first, qkv + gate with the conv after it.
                                    let conv = (c.conv_kernel <= CONV_KMAX).then_some(conv_args);
                                    conv_done = self.launch_two(j2, j1, conv)?;
                                    ba_done = true;
                                }
                                None => self.mv(&both, s.h.ptr, s.qkv.ptr, 1, exact)?,
                            }
                            s.qkv.ptr + (cd * 4) as u64
                        }
                        None => {
                            self.mv(qkv, s.h.ptr, s.qkv.ptr, t, exact)?;
                            self.mv(gate, s.h.ptr, s.z.ptr, t, exact)?;
                            s.z.ptr
                        }
                    };
                    if !ba_done {
                        self.mv(ba, s.h.ptr, s.ba.ptr, t, exact)?;
                    }
                    if !conv_done {
                        // Batched: a block row per sequence.
                        let rows_y = if batch { t } else { t.div_ceil(CONV_TB) };
                        g.launch_f(
                            k.conv_silu,
                            (cd.div_ceil(128) as u32, rows_y as u32, 1),
                            128,
                            0,
                            &[
                                Arg::U(s.qkv.ptr),
                                Arg::I(t as i32),
                                Arg::I(cd as i32),
                                Arg::I(c.conv_kernel as i32),
                                Arg::U(*conv),
                                Arg::U(seqs.tab),
                                Arg::I(slot),
                                Arg::U(s.u.ptr),
                                Arg::U(tconv),
                                Arg::U((c.conv_dim() * (c.conv_kernel - 1)) as u64),
                                Arg::I(seqs.bs),
                            ],
                        )?;
                    }
                    // Several tokens: their scalars first, all at once (one
                    // warp per key head, up to 32).
                    let pre = if t > 1 && hk <= 32 {
                        g.launch_f(
                            k.delta_prep,
                            (t as u32, 1, 1),
                            (32 * hk).clamp(32, 1024) as u32,
                            0,
                            &[
                                Arg::U(s.u.ptr),
                                Arg::I(cd as i32),
                                Arg::I(kd as i32),
                                Arg::U(s.ba.ptr),
                                Arg::U(*ssm_a),
                                Arg::U(*dt_bias),
                                Arg::U(s.dpre.ptr),
                                Arg::I(hk as i32),
                                Arg::I(hv as i32),
                                Arg::I(dk as i32),
                                Arg::F(c.rms_eps),
                                Arg::D(1.0 / (dk as f64).sqrt()),
                            ],
                        )?;
                        s.dpre.ptr
                    } else {
                        0
                    };
                    // A long prefill pass (not verify): the chunked form.
                    let chunked =
                        pre != 0 && !exact && self.delta_chunk_min.is_some_and(|m| t >= m);
                    if chunked {
                        let nch = t.div_ceil(DC_L) as u32;
                        let bufs = [
                            Arg::U(s.dcu.ptr),
                            Arg::U(s.dcw.ptr),
                            Arg::U(s.dcq.ptr),
                            Arg::U(s.dck.ptr),
                            Arg::U(s.dcp.ptr),
                            Arg::U(s.dce.ptr),
                        ];
                        let mut args = vec![
                            Arg::U(s.u.ptr),
                            Arg::I(cd as i32),
                            Arg::I(kd as i32),
                            Arg::U(s.ba.ptr),
                            Arg::U(*ssm_a),
                            Arg::U(*dt_bias),
                            Arg::U(pre),
                            Arg::I(t as i32),
                            Arg::I(hk as i32),
                            Arg::I(hv as i32),
                            Arg::I(dk as i32),
                            Arg::I(dv as i32),
                        ];
                        args.extend_from_slice(&bufs);
                        g.launch_f(
                            k.delta_chunk_prep,
                            (nch, hv as u32, 1),
                            256,
                            DC_PREP_SMEM,
                            &args,
                        )?;
                        let mut args = vec![
                            Arg::U(s.tab.ptr),
                            Arg::I(slot + 1),
                            Arg::U(s.o.ptr),
                            Arg::I(t as i32),
                            Arg::I(hv as i32),
                            Arg::I(dk as i32),
                            Arg::I(dv as i32),
                        ];
                        args.extend_from_slice(&bufs);
                        g.launch_f(
                            k.delta_chunk_state,
                            (hv as u32, dv.div_ceil(DC_J) as u32, 1),
                            256,
                            DC_STATE_SMEM,
                            &args,
                        )?;
                    } else {
                        g.launch_f(
                            k.delta_rule,
                            (hv as u32, dv.div_ceil(4) as u32, seqs.z(t)),
                            128,
                            0,
                            &[
                                Arg::U(s.u.ptr),
                                Arg::I(cd as i32),
                                Arg::I(kd as i32),
                                Arg::U(s.ba.ptr),
                                Arg::U(*ssm_a),
                                Arg::U(*dt_bias),
                                Arg::U(seqs.tab),
                                Arg::I(slot + 1),
                                Arg::U(s.o.ptr),
                                Arg::I(t as i32),
                                Arg::I(hk as i32),
                                Arg::I(hv as i32),
                                Arg::I(dk as i32),
                                Arg::I(dv as i32),
                                Arg::F(c.rms_eps),
                                Arg::D(1.0 / (dk as f64).sqrt()),
                                Arg::U(tssm),
                                Arg::U((hv * dv * dk) as u64),
                                Arg::U(pre),
                                Arg::I(seqs.bs),
                            ],
                        )?;
                    }
                    g.launch_f(
                        k.gated_rmsnorm,
                        ((t * hv) as u32, 1, 1),
                        dv.clamp(32, 256).next_power_of_two().min(256) as u32,
                        0,
                        &[
                            Arg::U(s.o.ptr),
                            Arg::U(z),
                            Arg::U(*norm),
                            Arg::I(dv as i32),
                            Arg::F(c.rms_eps),
                        ],
                    )?;
                    self.mv(out, s.o.ptr, s.mix.ptr, t, exact)?;
                }
                DMixer::Attention {
                    q,
                    k: wk,
                    v,
                    out,
                    q_norm,
                    k_norm,
                } => {
                    let (nh, nkv, hd) = (c.n_head, c.n_head_kv, c.head_dim);
                    // q beside the k + v pair when both are jobs.
                    let jobs = if pair
                        && wk.ty == v.ty
                        && wk.n_out == v.n_out
                        && wk.row_bytes == v.row_bytes
                        && wk.n_in == v.n_in
                    {
                        let kv = MvLaunch {
                            slots: 2,
                            w_zstride: v.ptr.wrapping_sub(wk.ptr),
                            y_zstride: ((s.v.ptr as i64).wrapping_sub(s.k.ptr as i64) / 4) as u64,
                            ..one(wk, s.h.ptr, s.k.ptr)
                        };
                        self.mq1_job(q.kern, &one(q, s.h.ptr, s.qg.ptr))
                            .zip(self.mq1_job(wk.kern, &kv))
                    } else {
                        None
                    };
                    match jobs {
                        Some((jq, jkv)) => {
                            self.launch_two(jq, jkv, None)?;
                        }
                        None => {
                            self.mv(q, s.h.ptr, s.qg.ptr, t, exact)?;
                            self.mv_pair(wk, v, s.h.ptr, s.k.ptr, s.v.ptr, t, exact)?;
                        }
                    }
                    if hd <= QK_HD_MAX {
                        // Norms, RoPE and the append in one launch (the same
                        // arithmetic as the five launches below).
                        g.launch_f(
                            k.qk_prep,
                            ((t * (nh + nkv)) as u32, 1, 1),
                            hd.clamp(32, 256).next_power_of_two().min(256) as u32,
                            0,
                            &[
                                Arg::U(s.qg.ptr),
                                Arg::U(s.q.ptr),
                                Arg::U(s.k.ptr),
                                Arg::U(s.v.ptr),
                                Arg::U(*q_norm),
                                Arg::U(*k_norm),
                                Arg::I(t as i32),
                                Arg::I(nh as i32),
                                Arg::I(nkv as i32),
                                Arg::I(hd as i32),
                                Arg::F(c.rms_eps),
                                Arg::I(self.rope_half as i32),
                                Arg::U(self.rope_pairs.ptr),
                                Arg::D(self.rope_mscale),
                                Arg::U(seqs.ctl),
                                Arg::U(seqs.tab),
                                Arg::I(slot),
                                Arg::I(seqs.bs),
                            ],
                        )?;
                    } else {
                        self.norm(
                            s.qg.ptr,
                            s.q.ptr,
                            *q_norm,
                            hd,
                            t * nh,
                            1,
                            (2 * hd, 0, hd, 0),
                            0,
                            0.0,
                        )?;
                        self.norm(
                            s.k.ptr,
                            s.k.ptr,
                            *k_norm,
                            hd,
                            t * nkv,
                            1,
                            (hd, 0, hd, 0),
                            0,
                            0.0,
                        )?;
                        for (buf, heads) in [(s.q.ptr, nh), (s.k.ptr, nkv)] {
                            let n = t * heads * self.rope_half;
                            if n == 0 {
                                continue;
                            }
                            g.launch_f(
                                k.rope_neox,
                                (n.div_ceil(128) as u32, 1, 1),
                                128,
                                0,
                                &[
                                    Arg::U(buf),
                                    Arg::I(t as i32),
                                    Arg::I(heads as i32),
                                    Arg::I(hd as i32),
                                    Arg::I(self.rope_half as i32),
                                    Arg::U(self.rope_pairs.ptr),
                                    Arg::D(self.rope_mscale),
                                    Arg::U(s.ctl.ptr),
                                ],
                            )?;
                        }
                        let row = nkv * hd;
                        g.launch_f(
                            k.kv_append,
                            ((t * row).div_ceil(256) as u32, 1, 1),
                            256,
                            0,
                            &[
                                Arg::U(s.k.ptr),
                                Arg::U(s.v.ptr),
                                Arg::U(s.tab.ptr),
                                Arg::I(slot),
                                Arg::U(s.ctl.ptr),
                                Arg::I(t as i32),
                                Arg::I(row as i32),
                            ],
                        )?;
                    }
                    self.attention(s, t, ns, slot, exact, seqs)?;
                    self.mv(out, s.att.ptr, s.mix.ptr, t, exact)?;
                }
            }
            // MoE: router, top-k, routed experts, shared expert, combine.
            let (ne, kk) = (c.n_expert, c.n_expert_used);
            let r = &l.router;
            let fused_router = self.fused_router(r).filter(|_| t == 1 || exact);
            // Decode and verify (every one of their paths, so they stay
            // equal bit for bit): the residual add and post norm inside the
            // F32 router's blocks.
            let norm_in_router =
                r.n_in == d && fused_router.is_some_and(|(f, _)| f.name == "router_f32");
            if !norm_in_router {
                g.launch_f(
                    k.add_rmsnorm,
                    (t as u32, 1, 1),
                    d.next_multiple_of(32).min(1024) as u32,
                    0,
                    &[
                        Arg::U(s.x.ptr),
                        Arg::U(s.mix.ptr),
                        Arg::U(l.post_norm),
                        Arg::U(s.h.ptr),
                        Arg::I(d as i32),
                        Arg::F(c.rms_eps),
                    ],
                )?;
            }
            if let Some((f, rows)) = fused_router {
                let (f, input) = if norm_in_router {
                    (
                        k.router_f32n,
                        vec![
                            Arg::U(s.x.ptr),
                            Arg::U(s.mix.ptr),
                            Arg::U(l.post_norm),
                            Arg::U(s.h.ptr),
                            Arg::F(c.rms_eps),
                        ],
                    )
                } else {
                    (f, vec![Arg::U(s.h.ptr)])
                };
                let mut args = vec![
                    Arg::U(r.ptr),
                    Arg::U(r.row_bytes as u64),
                    Arg::I(r.n_in as i32),
                    Arg::I(ne as i32),
                ];
                args.extend(input);
                // Router and top-k in one launch, each token as decode has it.
                args.extend([
                    Arg::U(s.rl.ptr),
                    Arg::I(kk as i32),
                    Arg::U(s.ids.ptr),
                    Arg::U(s.wts.ptr),
                    Arg::U(s.router_done.ptr),
                    // A decode step copying this layer's experts in: mark
                    // the chosen ones (xp_fetch stops on the others).
                    Arg::U(
                        xp.filter(|_| l.xp.is_some())
                            .map_or(0, |x| x.marks_at(il % 2)),
                    ),
                    Arg::I(il as i32 + 1),
                ]);
                g.launch_f(
                    f,
                    (r.n_out.div_ceil(rows) as u32, 1, t as u32),
                    128,
                    0,
                    &args,
                )?;
            } else {
                self.mv(r, s.h.ptr, s.rl.ptr, t, exact)?;
                g.launch_f(
                    k.moe_topk,
                    (t as u32, 1, 1),
                    32,
                    0,
                    &[
                        Arg::U(s.rl.ptr),
                        Arg::I(ne as i32),
                        Arg::I(kk as i32),
                        Arg::U(s.ids.ptr),
                        Arg::U(s.wts.ptr),
                    ],
                )?;
            }
            let slots = t * kk;
            // The shared expert (first when prefetching: it runs while the
            // prefetch may still be copying).
            let shared = || -> Result<(), CudaError> {
                let fused = if t == 1 || exact {
                    match GuMat::dense(&l.sh_gate, &l.sh_up) {
                        Some(gu) => {
                            let up_off = l.sh_up.ptr.wrapping_sub(l.sh_gate.ptr);
                            self.mv_gate_up(gu, up_off, 0, t, s.h.ptr, 1, s.sg.ptr)?
                        }
                        None => false,
                    }
                } else {
                    false
                };
                if fused {
                    // sg holds silu(gate) ⊙ up.
                    self.mv(&l.sh_down, s.sg.ptr, s.sd.ptr, t, exact)?;
                } else if t == 1 || exact {
                    self.mv_pair(&l.sh_gate, &l.sh_up, s.h.ptr, s.sg.ptr, s.su.ptr, t, exact)?;
                    self.mv_swiglu(&l.sh_down, s.sg.ptr, s.su.ptr, s.sd.ptr, t)?;
                } else {
                    self.mv_pair(&l.sh_gate, &l.sh_up, s.h.ptr, s.sg.ptr, s.su.ptr, t, exact)?;
                    self.elementwise(k.swiglu, s.sg.ptr, s.su.ptr, t * l.sh_gate.n_out)?;
                    self.mv(&l.sh_down, s.sg.ptr, s.sd.ptr, t, false)?;
                }
                Ok(())
            };
            if let Some(xp) = xp {
                shared()?;
                g.join_side(il % 2)?;
                if let Some(x) = l.xp {
                    g.launch_f(
                        k.xp_late,
                        (xp.late_blocks, kk as u32, 1),
                        256,
                        0,
                        &[
                            Arg::U(s.ids.ptr),
                            Arg::I(kk as i32),
                            Arg::I(x.vram as i32),
                            Arg::U(x.host),
                            Arg::U(x.rec),
                            Arg::U(xp.late.ptr),
                            Arg::U(xp.lists.ptr + ((il % 2) * XP_WORDS * 8) as u64),
                            Arg::U(x.tables[0]),
                            Arg::U(x.tables[1]),
                            Arg::U(x.tables[2]),
                            Arg::U(x.off_u),
                            Arg::U(x.off_d),
                            Arg::U(xp.stats.ptr),
                        ],
                    )?;
                }
            }
            // Decode: the routed experts' gate + up beside the shared
            // expert's, then their down products side by side.
            let paired = if pair_moe {
                let eg = GuMat::experts(&l.gate, &l.up).and_then(|gu| {
                    self.mqgu_job(
                        gu,
                        l.gate.up_off(&l.up),
                        s.ids.ptr,
                        slots,
                        s.h.ptr,
                        kk,
                        s.eg.ptr,
                    )
                });
                let sg = GuMat::dense(&l.sh_gate, &l.sh_up).and_then(|gu| {
                    let up_off = l.sh_up.ptr.wrapping_sub(l.sh_gate.ptr);
                    self.mqgu_job(gu, up_off, 0, t, s.h.ptr, 1, s.sg.ptr)
                });
                let dn = &l.down;
                let ed = self.mq1_job(
                    dn.kern,
                    &MvLaunch {
                        slots,
                        ids: s.ids.ptr,
                        w_zstride: dn.stride,
                        x_zstride: dn.n_in as u64,
                        y_zstride: dn.n_out as u64,
                        ..MvLaunch::new(
                            dn.base,
                            dn.row_bytes,
                            dn.n_in,
                            dn.n_out,
                            s.eg.ptr,
                            s.ed.ptr,
                            1,
                        )
                    },
                );
                let sh = &l.sh_down;
                let sd = self.mq1_job(
                    sh.kern,
                    &MvLaunch {
                        slots: t,
                        x_zstride: if t > 1 { sh.n_in as u64 } else { 0 },
                        y_zstride: if t > 1 { sh.n_out as u64 } else { 0 },
                        ..one(sh, s.sg.ptr, s.sd.ptr)
                    },
                );
                match (eg, sg, ed, sd) {
                    (Some(eg), Some(sg), Some(ed), Some(sd)) => {
                        self.launch_two(eg, sg, None)?;
                        self.launch_two(ed, sd, None)?;
                        true
                    }
                    _ => false,
                }
            } else {
                false
            };
            if paired {
                // Done above.
            } else if t == 1 || exact {
                // Decode (and verify): one launch per matrix over the k
                // chosen experts of each token. The down product reads
                // silu(gate) ⊙ up directly.
                let fused = match GuMat::experts(&l.gate, &l.up) {
                    Some(gu) => {
                        let up_off = l.gate.up_off(&l.up);
                        self.mv_gate_up(gu, up_off, s.ids.ptr, slots, s.h.ptr, kk, s.eg.ptr)?
                    }
                    None => false,
                };
                if fused {
                    self.mv_experts(&l.down, s.ids.ptr, slots, s.eg.ptr, 0, 1, s.ed.ptr)?;
                } else {
                    self.mv_experts(&l.gate, s.ids.ptr, slots, s.h.ptr, 0, kk, s.eg.ptr)?;
                    self.mv_experts(&l.up, s.ids.ptr, slots, s.h.ptr, 0, kk, s.eu.ptr)?;
                    self.mv_experts(&l.down, s.ids.ptr, slots, s.eg.ptr, s.eu.ptr, 1, s.ed.ptr)?;
                }
            } else {
                // Prefill: slots grouped by expert, each expert read once.
                g.launch_f(
                    k.moe_group,
                    (1, 1, 1),
                    1024,
                    (2 * ne * 4) as u32,
                    &[
                        Arg::U(s.ids.ptr),
                        Arg::I(slots as i32),
                        Arg::I(ne as i32),
                        Arg::U(s.counts.ptr),
                        Arg::U(s.offsets.ptr),
                        Arg::U(s.perm.ptr),
                    ],
                )?;
                // The up product reads the split the gate product made.
                let split = self.mv_grouped(&l.gate, s, s.h.ptr, kk, s.eg.ptr, slots, false)?;
                let same = l.up.n_in == l.gate.n_in;
                self.mv_grouped(&l.up, s, s.h.ptr, kk, s.eu.ptr, slots, split && same)?;
                self.elementwise(k.swiglu, s.eg.ptr, s.eu.ptr, slots * l.gate.n_out)?;
                self.mv_grouped(&l.down, s, s.eg.ptr, 1, s.ed.ptr, slots, false)?;
            }
            if !paired && xp.is_none() {
                shared()?;
            }
            // x += the experts' and the shared expert's outputs, then the
            // next layer's input norm (h is read for the shared gate first).
            let next_norm = self.layers.get(il + 1).map_or(0, |n| n.attn_norm);
            g.launch_f(
                k.moe_combine_norm,
                (t as u32, 1, 1),
                d.next_multiple_of(32).min(1024) as u32,
                0,
                &[
                    Arg::U(s.x.ptr),
                    Arg::U(s.ed.ptr),
                    Arg::U(s.wts.ptr),
                    Arg::I(kk as i32),
                    Arg::U(s.sd.ptr),
                    Arg::U(s.h.ptr),
                    Arg::U(l.sh_inp),
                    Arg::I(d as i32),
                    Arg::U(next_norm),
                    Arg::U(s.h.ptr),
                    Arg::F(c.rms_eps),
                    // The prediction input of layer il + 2 and this layer's
                    // prediction counters.
                    Arg::U(xp.and(self.layers.get(il + 2)).map_or(0, |n| n.post_norm)),
                    Arg::U(xp.map_or(0, |x| x.snap.ptr + ((il % 2) * d * 4) as u64)),
                    Arg::U(s.ids.ptr),
                    Arg::U(xp.map_or(0, |x| x.lists.ptr + ((il % 2) * XP_WORDS * 8) as u64)),
                    Arg::U(xp.map_or(0, |x| x.stats.ptr)),
                    Arg::I(l.xp.map_or(0, |x| x.vram as i32)),
                ],
            )?;
            if let Some(xp) = xp.filter(|_| il + 2 < nl) {
                self.prefetch(xp, il + 2)?;
            }
        }
        if let Some(xp) = xp {
            // Every table as uploaded again.
            g.launch_f(
                k.xp_restore,
                (1, 1, 1),
                32,
                0,
                &[
                    Arg::U(xp.lists.ptr),
                    Arg::I(2),
                    Arg::U(xp.marks.ptr),
                    Arg::I((XP_MARK_PAD + c.n_expert) as i32),
                ],
            )?;
        }
        // Final norm and LM head over the last `rows` hidden states.
        if rows > 0 {
            let first = s.x.ptr + ((t - rows) * d * 4) as u64;
            self.norm(
                first,
                s.h.ptr,
                self.output_norm,
                d,
                rows,
                1,
                (d, 0, d, 0),
                0,
                0.0,
            )?;
            self.mv(&self.output, s.h.ptr, s.logits.ptr, rows, exact)?;
        }
        Ok(())
    }

    /// Attention of the pass's `t` queries (in `s.q`, gates in `s.qg`) over
    /// the cache of `slot` (the pass's keys already appended), into `s.att`.
    /// Prefill (several tokens, not `exact`) goes through `attn_flash_<hd>`
    /// in one launch; decode and verify through splits per query (one per
    /// block of `attn_dec_<hd>`'s wave, or `ns` of `attn_split`), merged by
    /// `attn_combine(_w)`. A
    /// query's splits depend on its position alone, so a verify row equals
    /// decoding bit for bit.
    fn attention(
        &self,
        s: &Scratch,
        t: usize,
        ns: usize,
        slot: i32,
        exact: bool,
        seqs: SeqTab,
    ) -> Result<(), CudaError> {
        let c = &self.c;
        let g = &self.gpu;
        let k = &self.k;
        let (nh, nkv, hd) = (c.n_head, c.n_head_kv, c.head_dim);
        let scale = 1.0 / (hd as f32).sqrt();
        let gate = s.qg.ptr + (hd as u64) * 4;
        if let Some((f, smem)) = self.attn_flash.filter(|_| t > 1 && !exact) {
            let qb = AF_BM / (nh / nkv);
            return g.launch_f(
                f,
                (nkv as u32, t.div_ceil(qb) as u32, 1),
                AF_THREADS,
                smem,
                &[
                    Arg::U(s.q.ptr),
                    Arg::U(s.tab.ptr),
                    Arg::I(slot),
                    Arg::U(gate),
                    Arg::U(2 * hd as u64),
                    Arg::U(s.att.ptr),
                    Arg::U(s.ctl.ptr),
                    Arg::I(t as i32),
                    Arg::I(nh as i32),
                    Arg::I(nkv as i32),
                    Arg::F(scale),
                ],
            );
        }
        let dec = self.attn_dec.filter(|_| t == 1 || exact);
        // attn_dec: one wave of blocks, one split each (a query's splits
        // then follow its position and the device alone, the same in decode
        // and verify); a short context fills fewer (`att_nsplit`).
        let ns = match dec {
            Some(_) => (g.sm_count / nkv).clamp(1, ns),
            None => ns,
        };
        let combine = match dec {
            Some((f, smem)) => {
                let z = ns;
                g.launch_f(
                    f,
                    (nkv as u32, t as u32, z as u32),
                    AD_THREADS,
                    smem,
                    &[
                        Arg::U(s.q.ptr),
                        Arg::U(seqs.tab),
                        Arg::I(slot),
                        Arg::U(s.part.ptr),
                        Arg::U(seqs.ctl),
                        Arg::I(nh as i32),
                        Arg::I(nkv as i32),
                        Arg::F(scale),
                        Arg::I(ns as i32),
                        Arg::I(seqs.bs),
                    ],
                )?;
                // The splits spread over blocks of `combine_cols` columns
                // and up to 1,024 threads.
                let cb = self.combine_cols(hd);
                (k.attn_combine_w, (cb * (1024 / cb).min(16)) as u32, cb)
            }
            None => {
                g.launch_f(
                    k.attn_split,
                    (nkv as u32, t as u32, ns as u32),
                    128,
                    0,
                    &[
                        Arg::U(s.q.ptr),
                        Arg::U(seqs.tab),
                        Arg::I(slot),
                        Arg::U(s.part.ptr),
                        Arg::U(seqs.ctl),
                        Arg::I(nh as i32),
                        Arg::I(nkv as i32),
                        Arg::I(hd as i32),
                        Arg::F(scale),
                        Arg::I(ns as i32),
                        Arg::I(seqs.bs),
                    ],
                )?;
                (k.attn_combine, hd.clamp(32, 256) as u32, hd)
            }
        };
        let mut args = vec![
            Arg::U(s.part.ptr),
            Arg::U(gate),
            Arg::U(2 * hd as u64),
            Arg::U(s.att.ptr),
            Arg::I(nh as i32),
            Arg::I(hd as i32),
            Arg::I(ns as i32),
        ];
        if dec.is_some() {
            // attn_combine_w's columns per block (attn_combine: one block per row).
            args.push(Arg::I(combine.2 as i32));
        }
        // The position: the splits in use follow it.
        args.push(Arg::U(seqs.ctl));
        args.push(Arg::I(seqs.bs));
        g.launch_f(
            combine.0,
            (nh as u32, t as u32, (hd / combine.2) as u32),
            combine.1,
            0,
            &args,
        )
    }

    /// Columns per block of `attn_combine_w` ([`CudaTuning::combine_cols`],
    /// checked to divide `hd` at load; default 64).
    fn combine_cols(&self, hd: usize) -> usize {
        self.combine_cols
            .unwrap_or(if hd.is_multiple_of(64) { 64 } else { hd })
    }

    /// One decode step of `st` (prepared): replay the captured graph, capturing
    /// it at the first step.
    fn decode_step(&self, s: &mut Scratch) -> Result<(), CudaError> {
        if s.graph.is_none() {
            self.gpu.begin_capture()?;
            let enc = self.encode(s, 1, NS_DECODE, 1, None, false);
            let graph = self.gpu.end_capture();
            enc?;
            s.graph = Some(graph?);
        }
        match &s.graph {
            Some(gr) => self.gpu.replay(gr),
            None => Ok(()),
        }
    }
}

impl Scratch {
    fn new(g: &Gpu, c: &Config, t: usize) -> Result<Scratch, CudaError> {
        let f = |n: usize| g.alloc(n.max(1) * 4);
        let ff = c.expert_ff;
        let k = c.n_expert_used;
        let parts = (t * c.n_head * NS_PREFILL).max(c.n_head * NS_DECODE) * (c.head_dim + 2);
        Ok(Scratch {
            t,
            tok: f(t)?,
            x: f(t * c.n_embd)?,
            h: f(t * c.n_embd)?,
            mix: f(t * c.n_embd)?,
            qkv: f(t * c.conv_dim())?,
            z: f(t * c.value_dim())?,
            ba: f(t * 2 * c.ssm_h_v)?,
            dpre: f(t * 2 * (c.ssm_h_k + c.ssm_h_v))?,
            dcu: f(t * c.ssm_h_v * DC_D)?,
            dcw: f(t * c.ssm_h_v * DC_D)?,
            dcq: f(t * c.ssm_h_v * DC_D)?,
            dck: f(t * c.ssm_h_v * DC_D)?,
            dcp: f(t.div_ceil(DC_L) * c.ssm_h_v * DC_L * DC_L)?,
            dce: f(t * c.ssm_h_v)?,
            u: f(t * c.conv_dim())?,
            o: f(t * c.value_dim())?,
            qg: f(t * c.n_head * 2 * c.head_dim)?,
            q: f(t * c.n_head * c.head_dim)?,
            k: f(t * c.n_head_kv * c.head_dim)?,
            v: f(t * c.n_head_kv * c.head_dim)?,
            att: f(t * c.n_head * c.head_dim)?,
            part: f(parts)?,
            rl: f(t * c.n_expert)?,
            ids: f(t * k)?,
            wts: f(t * k)?,
            eg: f(t * k * ff)?,
            eu: f(t * k * ff)?,
            ed: f(t * k * c.n_embd)?,
            sg: f(t * c.shexp_ff)?,
            su: f(t * c.shexp_ff)?,
            sd: f(t * c.n_embd)?,
            logits: f(t.min(T_MAX) * c.vocab_size)?,
            ctl: f(4)?,
            counts: f(c.n_expert)?,
            offsets: f(c.n_expert)?,
            perm: f(t * k)?,
            router_done: g.zeros(t * 4)?,
            tab: g.alloc(2 * c.n_layer.max(1) * 8)?,
            tab_host: Vec::new(),
            graph: None,
            btab: g.alloc(B_MAX * 2 * c.n_layer.max(1) * 8)?,
            bctl: g.alloc(B_MAX * 4 * 4)?,
            btab_host: Vec::new(),
            bgraphs: HashMap::new(),
        })
    }
}

/// A sequence's state on the device: conv windows and DeltaNet states per
/// recurrent layer, the KV cache per attention layer (`cap` positions of
/// `n_head_kv·head_dim` f32, grown by doubling), the position.
pub struct CudaState {
    gpu: Arc<Gpu>,
    /// Tells this sequence's trails from others' (forks get a new one).
    id: u64,
    pos: usize,
    cap: usize,
    conv: Vec<DevBuf>,
    ssm: Vec<DevBuf>,
    k: Vec<DevBuf>,
    v: Vec<DevBuf>,
    n_dn: usize,
    n_at: usize,
    conv_bytes: usize,
    ssm_bytes: usize,
    kv_row: usize,
    /// The recurrent states after each token of the last verify pass, and
    /// that pass's number (a trail handle of an older pass is refused).
    trail: Option<TrailBufs>,
    trail_gen: u64,
}

/// Per recurrent layer, room for the conv and DeltaNet states after each of
/// `cap` tokens: layer `i`'s state after token `j` at `base + (i·cap + j)·bytes`.
struct TrailBufs {
    conv: DevBuf,
    ssm: DevBuf,
    cap: usize,
    conv_bytes: usize,
    ssm_bytes: usize,
}

impl TrailBufs {
    fn conv_at(&self, layer: usize, tok: usize) -> u64 {
        self.conv.ptr + ((layer * self.cap + tok) * self.conv_bytes) as u64
    }
    fn ssm_at(&self, layer: usize, tok: usize) -> u64 {
        self.ssm.ptr + ((layer * self.cap + tok) * self.ssm_bytes) as u64
    }
}

/// What a CUDA verify pass hands back: which sequence and pass made it.
struct CudaTrail {
    id: u64,
    gen: u64,
    n: usize,
    pos0: usize,
}

static NEXT_STATE_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

fn next_state_id() -> u64 {
    NEXT_STATE_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

impl std::fmt::Debug for CudaState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CudaState(pos {}, KV capacity {})", self.pos, self.cap)
    }
}

impl CudaState {
    fn new(gpu: Arc<Gpu>, c: &Config) -> CudaState {
        let n_dn = c.recurrent.iter().filter(|&&r| r).count();
        CudaState {
            gpu,
            id: next_state_id(),
            pos: 0,
            cap: 0,
            conv: Vec::new(),
            ssm: Vec::new(),
            k: Vec::new(),
            v: Vec::new(),
            n_dn,
            n_at: c.recurrent.len() - n_dn,
            conv_bytes: c.conv_dim() * (c.conv_kernel - 1) * 4,
            ssm_bytes: c.ssm_h_v * c.ssm_d_v * c.ssm_d_k * 4,
            kv_row: c.n_head_kv * c.head_dim * 4,
            trail: None,
            trail_gen: 0,
        }
    }

    /// Room in the trail for `n` tokens (allocated at the first verify,
    /// grown by whole `V_MAX` steps).
    fn reserve_trail(&mut self, g: &Gpu, n: usize) -> Result<(), CudaError> {
        if self.trail.as_ref().is_some_and(|t| t.cap >= n) {
            return Ok(());
        }
        let cap = n.next_multiple_of(V_MAX);
        self.trail = None;
        self.trail = Some(TrailBufs {
            conv: g.alloc((self.n_dn * cap * self.conv_bytes).max(4))?,
            ssm: g.alloc((self.n_dn * cap * self.ssm_bytes).max(4))?,
            cap,
            conv_bytes: self.conv_bytes,
            ssm_bytes: self.ssm_bytes,
        });
        Ok(())
    }

    /// Allocate the recurrent states (zeroed) at first use and grow the KV
    /// cache to hold `n` positions.
    fn reserve(&mut self, g: &Gpu, _c: &Config, n: usize) -> Result<(), CudaError> {
        if self.conv.len() < self.n_dn {
            for _ in 0..self.n_dn {
                self.conv.push(g.zeros(self.conv_bytes)?);
                self.ssm.push(g.zeros(self.ssm_bytes)?);
            }
        }
        if n > self.cap || self.k.len() < self.n_at {
            let cap = n.max(2 * self.cap).max(256);
            let mut nk = Vec::with_capacity(self.n_at);
            let mut nv = Vec::with_capacity(self.n_at);
            for i in 0..self.n_at {
                let kb = g.alloc(cap * self.kv_row)?;
                let vb = g.alloc(cap * self.kv_row)?;
                if let (Some(ok), Some(ov)) = (self.k.get(i), self.v.get(i)) {
                    g.dtod(kb.ptr, ok.ptr, self.pos * self.kv_row)?;
                    g.dtod(vb.ptr, ov.ptr, self.pos * self.kv_row)?;
                }
                nk.push(kb);
                nv.push(vb);
            }
            g.sync()?;
            self.k = nk;
            self.v = nv;
            self.cap = cap;
        }
        Ok(())
    }

    fn copy(&self) -> Result<CudaState, CudaError> {
        let g = &self.gpu;
        g.bind()?;
        let dup = |b: &DevBuf, bytes: usize| -> Result<DevBuf, CudaError> {
            let n = g.alloc(b.bytes)?;
            g.dtod(n.ptr, b.ptr, bytes)?;
            Ok(n)
        };
        let conv = self
            .conv
            .iter()
            .map(|b| dup(b, b.bytes))
            .collect::<Result<_, _>>()?;
        let ssm = self
            .ssm
            .iter()
            .map(|b| dup(b, b.bytes))
            .collect::<Result<_, _>>()?;
        let kvb = self.pos * self.kv_row;
        let k = self
            .k
            .iter()
            .map(|b| dup(b, kvb))
            .collect::<Result<_, _>>()?;
        let v = self
            .v
            .iter()
            .map(|b| dup(b, kvb))
            .collect::<Result<_, _>>()?;
        g.sync()?;
        Ok(CudaState {
            gpu: g.clone(),
            id: next_state_id(),
            pos: self.pos,
            cap: self.cap,
            conv,
            ssm,
            k,
            v,
            n_dn: self.n_dn,
            n_at: self.n_at,
            conv_bytes: self.conv_bytes,
            ssm_bytes: self.ssm_bytes,
            kv_row: self.kv_row,
            trail: None,
            trail_gen: 0,
        })
    }
}

/// Saved recurrent states (device copies).
struct Saved {
    conv: Vec<DevBuf>,
    ssm: Vec<DevBuf>,
}

impl DeviceState for CudaState {
    fn pos(&self) -> usize {
        self.pos
    }

    fn fork(&self) -> Box<dyn DeviceState> {
        match self.copy() {
            Ok(s) => Box::new(s),
            // A failed device copy (out of memory) cannot be reported through
            // Clone; it is fatal for this process.
            Err(e) => panic!("copying a sequence state on the GPU: {e}"),
        }
    }

    fn bytes(&self) -> usize {
        self.n_dn * (self.conv_bytes + self.ssm_bytes) + 2 * self.n_at * self.pos * self.kv_row
    }

    fn save_recurrent(&self) -> Box<dyn Any + Send + Sync> {
        let g = &self.gpu;
        let dup = |b: &DevBuf| -> Result<DevBuf, CudaError> {
            let n = g.alloc(b.bytes)?;
            g.dtod(n.ptr, b.ptr, b.bytes)?;
            Ok(n)
        };
        let saved = (|| -> Result<Saved, CudaError> {
            g.bind()?;
            Ok(Saved {
                conv: self.conv.iter().map(dup).collect::<Result<_, _>>()?,
                ssm: self.ssm.iter().map(dup).collect::<Result<_, _>>()?,
            })
        })();
        match saved {
            Ok(s) => Box::new(s),
            Err(e) => panic!("saving recurrent states on the GPU: {e}"),
        }
    }

    fn restore_recurrent(
        &mut self,
        saved: &(dyn Any + Send + Sync),
        pos: usize,
    ) -> Result<(), ModelError> {
        let s = saved
            .downcast_ref::<Saved>()
            .ok_or_else(|| ModelError::Input("the saved states are not CUDA states".into()))?;
        if pos > self.pos || s.conv.len() != self.conv.len() {
            return Err(ModelError::Input(format!(
                "cannot roll a state at {} back to {pos}",
                self.pos
            )));
        }
        let g = &self.gpu;
        let r = (|| -> Result<(), CudaError> {
            g.bind()?;
            for (d, b) in self.conv.iter().zip(&s.conv) {
                g.dtod(d.ptr, b.ptr, b.bytes)?;
            }
            for (d, b) in self.ssm.iter().zip(&s.ssm) {
                g.dtod(d.ptr, b.ptr, b.bytes)?;
            }
            g.sync()
        })();
        r.map_err(merr)?;
        self.pos = pos;
        Ok(())
    }

    fn rollback(
        &mut self,
        trail: &(dyn Any + Send + Sync),
        keep: usize,
        pos: usize,
    ) -> Result<(), ModelError> {
        let Some(t) = trail.downcast_ref::<CudaTrail>() else {
            return Err(ModelError::Input(
                "the trail was not made by a CUDA verify pass".into(),
            ));
        };
        if t.id != self.id || t.gen != self.trail_gen {
            return Err(ModelError::Input(
                "the trail is not this sequence's last verify pass".into(),
            ));
        }
        if keep == 0 || keep > t.n || pos != t.pos0 + keep || pos > self.pos {
            return Err(ModelError::Input(format!(
                "cannot keep {keep} of {} verified tokens from position {} (state at {})",
                t.n, t.pos0, self.pos
            )));
        }
        let Some(tb) = &self.trail else {
            return Err(ModelError::Input("the sequence has no trail".into()));
        };
        let g = &self.gpu;
        let r = (|| -> Result<(), CudaError> {
            g.bind()?;
            for i in 0..self.n_dn {
                g.dtod(self.conv[i].ptr, tb.conv_at(i, keep - 1), self.conv_bytes)?;
                g.dtod(self.ssm[i].ptr, tb.ssm_at(i, keep - 1), self.ssm_bytes)?;
            }
            g.sync()
        })();
        r.map_err(merr)?;
        self.pos = pos;
        Ok(())
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
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
