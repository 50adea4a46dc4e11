//! Constrained decoding as the scheduler sees it: a per-sequence matcher
//! that says which tokens may come next. The engine knows nothing of JSON
//! or grammars; it masks the logits before sampling and feeds the matcher
//! every token it emits. The mask for the next step is computed on another
//! thread while the forward pass runs (see `Scheduler`), so a constraint
//! costs the decode step only the time its mask takes beyond the pass.

use std::fmt::Debug;

/// One sequence's position in a constraint.
pub trait TokenConstraint: Send {
    /// The tokens allowed next, as bits: token `t` is bit `t % 32` of word
    /// `t / 32`. End-of-generation tokens are allowed exactly where the
    /// constraint may end.
    fn mask(&mut self, out: &mut Vec<u32>) -> Result<(), String>;
    /// Advance past `token`, which the last mask allowed.
    fn consume(&mut self, token: u32) -> Result<(), String>;
    /// The constraint is complete and allows nothing more (not even
    /// another end-of-generation token): the request ends here.
    fn finished(&self) -> bool {
        false
    }
}

/// A compiled constraint that a request carries: each sequence that uses it
/// starts its own matcher.
pub trait ConstraintSource: Send + Sync + Debug {
    fn start(&self) -> Result<Box<dyn TokenConstraint>, String>;
}

/// Is token `t` set in `mask`?
pub fn allowed(mask: &[u32], t: u32) -> bool {
    mask.get(t as usize / 32)
        .is_some_and(|w| (w >> (t % 32)) & 1 == 1)
}

/// `logits` with every token `mask` does not allow set to NaN (which the
/// sampler skips), written into `out`.
pub fn apply_mask(logits: &[f32], mask: &[u32], out: &mut Vec<f32>) {
    out.clear();
    out.extend(
        logits
            .iter()
            .enumerate()
            .map(|(t, &v)| if allowed(mask, t as u32) { v } else { f32::NAN }),
    );
}

/// The lowest token below `n` that `mask` allows, if any.
pub fn first_allowed(mask: &[u32], n: usize) -> Option<u32> {
    (0..n as u32).find(|&t| allowed(mask, t))
}
