//! Snapshots of sequence states, keyed by the tokens they have consumed.
//!
//! An agent resends its whole conversation every turn. The scheduler keeps a
//! snapshot of a sequence's state (KV cache, DeltaNet conv and recurrent
//! states) at the end of every prompt, at the end of every reply, at
//! regular points inside long prompts and at message boundaries (the end of
//! the system prompt and tools first, where a new conversation of the same
//! agent parts from an earlier one); a new request resumes from the
//! longest snapshot whose tokens are a prefix of its own and prefills only
//! the rest. The DeltaNet state cannot be truncated to an earlier position,
//! so a snapshot is the only way back to one.
//!
//! Memory is bounded by a byte budget, evicting the least recently used
//! snapshot first. Restoring is exact: a resumed sequence continues with the
//! same arithmetic as the one that was snapshotted.
//!
//! Snapshots of one conversation share their KV cache: a host state's KV
//! lives in reference-counted blocks ([`redlite_model::KvCache`]), a
//! snapshot refers to the blocks of its prefix, and the budget counts every
//! block once however many snapshots hold it ([`StateCache::bytes`]). What
//! each snapshot owns alone (conv and recurrent states, logits, tokens, the
//! partially filled last KV block) is counted per snapshot.

use std::collections::HashMap;

use redlite_model::State;

/// Where in a sequence a snapshot was taken (for the reuse metrics).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SnapshotKind {
    /// The end of a prompt (the start of its reply).
    PromptEnd,
    /// The end of a reply.
    ReplyEnd,
    /// Every few thousand tokens of a long prompt.
    Periodic,
    /// The start of a message of the prompt (the first one: the end of the
    /// system prompt and tools).
    MessageBoundary,
}

impl SnapshotKind {
    pub const ALL: [SnapshotKind; 4] = [
        SnapshotKind::PromptEnd,
        SnapshotKind::ReplyEnd,
        SnapshotKind::Periodic,
        SnapshotKind::MessageBoundary,
    ];

    /// The label used in metrics.
    pub fn name(self) -> &'static str {
        match self {
            SnapshotKind::PromptEnd => "prompt_end",
            SnapshotKind::ReplyEnd => "reply_end",
            SnapshotKind::Periodic => "periodic",
            SnapshotKind::MessageBoundary => "message_boundary",
        }
    }

    /// Position in [`SnapshotKind::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}

struct Entry {
    tokens: Vec<u32>,
    state: State,
    /// Logits after the last token of `tokens`.
    logits: Vec<f32>,
    kind: SnapshotKind,
    /// Bytes this snapshot holds alone.
    own: usize,
    /// The KV blocks it refers to: (id, bytes).
    blocks: Vec<(u64, usize)>,
    last_used: u64,
}

/// A restored snapshot.
pub struct Restored {
    /// The snapshotted state, to continue (position = `tokens`); it shares
    /// the snapshot's KV blocks and copies one only when it writes into it.
    pub state: State,
    /// Logits after the snapshot's last token.
    pub logits: Vec<f32>,
    /// How many leading tokens of the request it covers.
    pub tokens: usize,
    /// Where the snapshot was taken.
    pub kind: SnapshotKind,
}

/// An LRU store of state snapshots bounded in (unique) bytes.
pub struct StateCache {
    budget: usize,
    /// Unique bytes: every entry's own bytes plus each block once.
    used: usize,
    /// What the snapshots would hold as separate copies.
    logical: usize,
    clock: u64,
    entries: Vec<Entry>,
    /// Per KV block held: (entries referring to it, bytes).
    refs: HashMap<u64, (usize, usize)>,
}

impl StateCache {
    /// A store holding at most `budget` bytes (0 disables it).
    pub fn new(budget: usize) -> StateCache {
        StateCache {
            budget,
            used: 0,
            logical: 0,
            clock: 0,
            entries: Vec::new(),
            refs: HashMap::new(),
        }
    }

    /// Bytes held by the snapshots, each shared KV block counted once: what
    /// the budget bounds.
    pub fn bytes(&self) -> usize {
        self.used
    }

    /// Bytes the snapshots would hold if each had its own copy of its KV
    /// cache (the sum of their sizes).
    pub fn logical_bytes(&self) -> usize {
        self.logical
    }

    /// The byte budget.
    pub fn budget(&self) -> usize {
        self.budget
    }

    /// Number of snapshots held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The longest snapshot whose tokens are a prefix of `tokens`, as a copy
    /// that the caller owns (the snapshot stays in the store).
    pub fn restore(&mut self, tokens: &[u32]) -> Option<Restored> {
        let best = self
            .entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.tokens.len() <= tokens.len() && tokens.starts_with(&e.tokens))
            .max_by_key(|(_, e)| e.tokens.len())
            .map(|(i, _)| i)?;
        self.clock += 1;
        let e = &mut self.entries[best];
        e.last_used = self.clock;
        Some(Restored {
            state: e.state.clone(),
            logits: e.logits.clone(),
            tokens: e.tokens.len(),
            kind: e.kind,
        })
    }

    /// Bytes that storing `own` plus `blocks` would add.
    fn marginal(&self, own: usize, blocks: &[(u64, usize)]) -> usize {
        own + blocks
            .iter()
            .filter(|(id, _)| !self.refs.contains_key(id))
            .map(|b| b.1)
            .sum::<usize>()
    }

    /// Drop the least recently used snapshot; false when there is none.
    fn evict_lru(&mut self) -> bool {
        let Some(lru) = self
            .entries
            .iter()
            .enumerate()
            .min_by_key(|(_, e)| e.last_used)
            .map(|(i, _)| i)
        else {
            return false;
        };
        let e = self.entries.swap_remove(lru);
        self.used -= e.own;
        self.logical -= e.own + e.blocks.iter().map(|b| b.1).sum::<usize>();
        for (id, _) in &e.blocks {
            if let Some(r) = self.refs.get_mut(id) {
                r.0 -= 1;
                if r.0 == 0 {
                    self.used -= r.1;
                    self.refs.remove(id);
                }
            }
        }
        true
    }

    /// Keep a snapshot of `state`, which has consumed exactly `tokens` and
    /// whose last logits are `logits`. Evicts least recently used snapshots
    /// to stay within the budget; a snapshot larger than the whole budget is
    /// not kept. Returns whether it was stored.
    pub fn insert(
        &mut self,
        tokens: &[u32],
        state: &State,
        logits: &[f32],
        kind: SnapshotKind,
    ) -> bool {
        if tokens.is_empty() || state.pos() != tokens.len() {
            return false;
        }
        self.clock += 1;
        if let Some(e) = self.entries.iter_mut().find(|e| e.tokens == tokens) {
            e.last_used = self.clock;
            return true;
        }
        if state.bytes() + std::mem::size_of_val(logits) + std::mem::size_of_val(tokens)
            > self.budget
        {
            return false;
        }
        let snap = state.snapshot();
        let (own, blocks) = snap.parts();
        let own = own + std::mem::size_of_val(logits) + std::mem::size_of_val(tokens);
        while self.used + self.marginal(own, &blocks) > self.budget {
            if !self.evict_lru() {
                return false;
            }
        }
        self.used += self.marginal(own, &blocks);
        self.logical += own + blocks.iter().map(|b| b.1).sum::<usize>();
        for &(id, b) in &blocks {
            self.refs.entry(id).or_insert((0, b)).0 += 1;
        }
        self.entries.push(Entry {
            tokens: tokens.to_vec(),
            state: snap,
            logits: logits.to_vec(),
            kind,
            own,
            blocks,
            last_used: self.clock,
        });
        true
    }
}
