//! The activation buffers of a pass and where its per-sequence kernels
//! find each sequence's state.

use super::*;

/// Activation buffers for one pass of up to `Scratch::t` tokens (logits for
/// up to `T_MAX` of them).
pub(super) struct Scratch {
    /// Most tokens of one pass.
    pub(super) t: usize,
    pub(super) tok: DevBuf,
    pub(super) x: DevBuf,
    pub(super) h: DevBuf,
    pub(super) mix: DevBuf,
    pub(super) qkv: DevBuf,
    pub(super) z: DevBuf,
    pub(super) ba: DevBuf,
    /// The delta rule's per-token scalars (`delta_prep`), for passes of
    /// more than one token.
    pub(super) dpre: DevBuf,
    /// The chunked delta rule's per-chunk products (`delta_chunk_prep`):
    /// U, W, e^G Q and e^(G_l - G) K (`[t][h_v][DC_D]`), P
    /// (`[chunk][h_v][DC_L][DC_L]`), e^G per token and value head.
    pub(super) dcu: DevBuf,
    pub(super) dcw: DevBuf,
    pub(super) dcq: DevBuf,
    pub(super) dck: DevBuf,
    pub(super) dcp: DevBuf,
    pub(super) dce: DevBuf,
    pub(super) u: DevBuf,
    pub(super) o: DevBuf,
    pub(super) qg: DevBuf,
    pub(super) q: DevBuf,
    pub(super) k: DevBuf,
    pub(super) v: DevBuf,
    pub(super) att: DevBuf,
    pub(super) part: DevBuf,
    pub(super) rl: DevBuf,
    pub(super) ids: DevBuf,
    pub(super) wts: DevBuf,
    pub(super) eg: DevBuf,
    pub(super) eu: DevBuf,
    pub(super) ed: DevBuf,
    pub(super) sg: DevBuf,
    pub(super) su: DevBuf,
    pub(super) sd: DevBuf,
    pub(super) logits: DevBuf,
    /// Per token, blocks of `router_<T>` done (the last one takes the top k
    /// and resets it to 0).
    pub(super) router_done: DevBuf,
    /// Prefill expert grouping: slots per expert, their offsets, the slots.
    pub(super) counts: DevBuf,
    pub(super) offsets: DevBuf,
    pub(super) perm: DevBuf,
    /// Control words the kernels read: [position of the first token, tokens].
    pub(super) ctl: DevBuf,
    /// Per layer, two pointers: (conv, ssm) or (keys, values) of the sequence.
    pub(super) tab: DevBuf,
    /// What `tab` holds (it changes only with the sequence or a larger KV
    /// cache, so a decode step usually has nothing to upload).
    pub(super) tab_host: Vec<u64>,
    /// The captured decode step (one token, last logits), replayed per token.
    pub(super) graph: Option<Graph>,
    /// A batched decode pass's state table (`B_MAX` sequences of `tab`'s
    /// layout, one after another), its control words (per sequence: its
    /// position, 1, 0, 0), what the table holds, and the captured pass per
    /// number of sequences.
    pub(super) btab: DevBuf,
    pub(super) bctl: DevBuf,
    pub(super) btab_host: Vec<u64>,
    pub(super) bgraphs: HashMap<usize, Graph>,
}

/// Where the per-sequence kernels of a pass (conv, delta rule, `qk_prep`,
/// attention) find the sequence states and positions: one sequence (`tab`
/// and `ctl` of the scratch, `bs` 0), or a batched decode pass whose token
/// `i` is sequence `i`'s (`bs` table entries per sequence, control words
/// per sequence; see `att_pos0` in `attention.cuh`).
#[derive(Clone, Copy)]
pub(super) struct SeqTab {
    pub(super) tab: u64,
    pub(super) ctl: u64,
    pub(super) bs: i32,
}

impl SeqTab {
    pub(super) fn of(s: &Scratch, batch: bool, layers: usize) -> SeqTab {
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
    pub(super) fn z(&self, t: usize) -> u32 {
        if self.bs > 0 {
            t as u32
        } else {
            1
        }
    }
}

impl Scratch {
    pub(super) fn new(g: &Gpu, c: &Config, t: usize) -> Result<Scratch, CudaError> {
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
