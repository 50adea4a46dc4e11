//! Snapshots of sequence states, keyed by the tokens they have consumed.
//!
//! An agent resends its whole conversation every turn. The scheduler keeps a
//! snapshot of a sequence's state (KV cache, DeltaNet conv and recurrent
//! states) at the end of every prompt, at the end of every reply and at
//! regular points inside long prompts; a new request resumes from the
//! longest snapshot whose tokens are a prefix of its own and prefills only
//! the rest. The DeltaNet state cannot be truncated to an earlier position,
//! so a snapshot is the only way back to one.
//!
//! Memory is bounded by a byte budget, evicting the least recently used
//! snapshot first. Restoring is exact: a resumed sequence continues with the
//! same arithmetic as the one that was snapshotted.

use redlite_model::State;

struct Entry {
    tokens: Vec<u32>,
    state: State,
    /// Logits after the last token of `tokens`.
    logits: Vec<f32>,
    bytes: usize,
    last_used: u64,
}

/// A restored snapshot.
pub struct Restored {
    /// A fresh copy of the snapshotted state (position = `tokens`).
    pub state: State,
    /// Logits after the snapshot's last token.
    pub logits: Vec<f32>,
    /// How many leading tokens of the request it covers.
    pub tokens: usize,
}

/// An LRU store of state snapshots bounded in bytes.
pub struct StateCache {
    budget: usize,
    used: usize,
    clock: u64,
    entries: Vec<Entry>,
}

impl StateCache {
    /// A store holding at most `budget` bytes (0 disables it).
    pub fn new(budget: usize) -> StateCache {
        StateCache {
            budget,
            used: 0,
            clock: 0,
            entries: Vec::new(),
        }
    }

    /// Bytes held by the snapshots.
    pub fn bytes(&self) -> usize {
        self.used
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
            state: e.state.snapshot(),
            logits: e.logits.clone(),
            tokens: e.tokens.len(),
        })
    }

    /// Keep a snapshot of `state`, which has consumed exactly `tokens` and
    /// whose last logits are `logits`. Evicts least recently used snapshots
    /// to stay within the budget; a snapshot larger than the whole budget is
    /// not kept. Returns whether it was stored.
    pub fn insert(&mut self, tokens: &[u32], state: &State, logits: &[f32]) -> bool {
        if tokens.is_empty() || state.pos() != tokens.len() {
            return false;
        }
        self.clock += 1;
        if let Some(e) = self.entries.iter_mut().find(|e| e.tokens == tokens) {
            e.last_used = self.clock;
            return true;
        }
        let bytes = state.bytes() + std::mem::size_of_val(logits) + std::mem::size_of_val(tokens);
        if bytes > self.budget {
            return false;
        }
        while self.used + bytes > self.budget {
            let Some(lru) = self
                .entries
                .iter()
                .enumerate()
                .min_by_key(|(_, e)| e.last_used)
                .map(|(i, _)| i)
            else {
                break;
            };
            let e = self.entries.swap_remove(lru);
            self.used -= e.bytes;
        }
        self.used += bytes;
        self.entries.push(Entry {
            tokens: tokens.to_vec(),
            state: state.snapshot(),
            logits: logits.to_vec(),
            bytes,
            last_used: self.clock,
        });
        true
    }
}
