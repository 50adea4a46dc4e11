//! Prompt-lookup drafting: coding agents rewrite files they were just shown,
//! so the continuation of the last few tokens has often appeared before, in
//! the prompt or in what was generated. The drafter finds the most recent
//! earlier occurrence of the longest suffix n-gram and proposes the tokens
//! that followed it; the model verifies them all in one forward pass.
//!
//! Drafts adapt: their length grows while they are accepted and shrinks when
//! they fail, and drafting pauses (for longer each time) when it does not pay.

/// Drafting settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LookupParams {
    /// Longest suffix n-gram searched for.
    pub max_ngram: usize,
    /// Shortest suffix n-gram accepted as a match.
    pub min_ngram: usize,
    /// Most tokens drafted at once.
    pub max_draft: usize,
}

impl Default for LookupParams {
    fn default() -> Self {
        LookupParams {
            max_ngram: 4,
            min_ngram: 2,
            max_draft: 8,
        }
    }
}

/// Where drafts come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DraftSource {
    /// n-grams of the prompt and the output so far (prompt lookup).
    Lookup,
    /// A known continuation: at output position `i` the draft is
    /// `tokens[i..]`. With a previous greedy run's output every draft is
    /// accepted (benchmarks, tests).
    Replay(Vec<u32>),
    /// Pseudo-random tokens below `vocab` (essentially never accepted:
    /// the worst case, for benchmarks and tests).
    Random { vocab: u32, seed: u64 },
}

/// Drafting statistics.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LookupStats {
    /// Verify passes run.
    pub rounds: usize,
    pub drafted: usize,
    pub accepted: usize,
}

/// An adaptive n-gram drafter.
#[derive(Clone, Debug)]
pub struct Drafter {
    params: LookupParams,
    source: DraftSource,
    /// Prompt length (output position = history length − this − 1).
    prompt_len: usize,
    rng: u64,
    /// Current draft length.
    len: usize,
    /// Recent rounds: drafted and accepted tokens (a sliding window).
    window: Vec<(usize, usize)>,
    /// Tokens to generate without drafting before trying again.
    pause: usize,
    /// Length of the next pause when drafting does not pay.
    next_pause: usize,
    pub stats: LookupStats,
}

/// Rounds looked at to decide whether drafting pays.
const WINDOW: usize = 2;
/// Below this acceptance rate over the window, drafting pauses.
const MIN_RATE: f64 = 0.2;
/// Draft length to start with (and after a pause); it doubles while drafts
/// are accepted in full, so a wrong guess costs little.
const FIRST_LEN: usize = 2;
/// First pause, in tokens; it doubles each time drafting fails again.
const FIRST_PAUSE: usize = 64;

impl Drafter {
    /// An n-gram (prompt lookup) drafter.
    pub fn new(params: LookupParams) -> Drafter {
        Drafter::with_source(params, DraftSource::Lookup, 0)
    }

    /// A drafter with another source; `prompt_len` locates the output in the
    /// history for [`DraftSource::Replay`].
    pub fn with_source(params: LookupParams, source: DraftSource, prompt_len: usize) -> Drafter {
        let len = FIRST_LEN.min(params.max_draft.max(1));
        let rng = match &source {
            DraftSource::Random { seed, .. } => seed | 1,
            _ => 1,
        };
        Drafter {
            params,
            source,
            prompt_len,
            rng,
            len,
            window: Vec::new(),
            pause: 0,
            next_pause: FIRST_PAUSE,
            stats: LookupStats::default(),
        }
    }

    /// Draft at most `limit` tokens to follow `history` (the prompt, the
    /// tokens generated so far and the token about to be fed). Empty when
    /// there is no match or drafting is paused (each call counts down the
    /// pause by one token).
    pub fn draft(&mut self, history: &[u32], limit: usize) -> Vec<u32> {
        if self.pause > 0 {
            self.pause -= 1;
            return Vec::new();
        }
        let k = self.len.min(limit);
        if k == 0 || self.params.max_draft == 0 {
            return Vec::new();
        }
        match &self.source {
            DraftSource::Lookup => find_continuation(
                history,
                self.params.min_ngram.max(1),
                self.params.max_ngram,
                k,
            ),
            DraftSource::Replay(tokens) => {
                // `history` ends with the output token about to be fed.
                let at = history.len().saturating_sub(self.prompt_len);
                tokens.iter().skip(at).take(k).copied().collect()
            }
            DraftSource::Random { vocab, .. } => {
                let vocab = (*vocab).max(1) as u64;
                (0..k)
                    .map(|_| {
                        // xorshift64*
                        self.rng ^= self.rng >> 12;
                        self.rng ^= self.rng << 25;
                        self.rng ^= self.rng >> 27;
                        ((self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32) % vocab) as u32
                    })
                    .collect()
            }
        }
    }

    /// Report how many of `drafted` tokens were accepted.
    pub fn record(&mut self, drafted: usize, accepted: usize) {
        self.stats.rounds += 1;
        self.stats.drafted += drafted;
        self.stats.accepted += accepted;
        self.len = if accepted == drafted {
            (self.len * 2).min(self.params.max_draft.max(1))
        } else {
            (accepted + 1).max(1)
        };
        self.window.push((drafted, accepted));
        if self.window.len() > WINDOW {
            self.window.remove(0);
        }
        if self.window.len() == WINDOW {
            let d: usize = self.window.iter().map(|w| w.0).sum();
            let a: usize = self.window.iter().map(|w| w.1).sum();
            if (a as f64) < MIN_RATE * d as f64 {
                self.pause = self.next_pause;
                self.next_pause = (self.next_pause * 2).min(1024);
                self.window.clear();
                self.len = FIRST_LEN.min(self.params.max_draft.max(1));
            } else {
                self.next_pause = FIRST_PAUSE;
            }
        }
    }
}

/// The tokens that followed the most recent earlier occurrence of the
/// longest suffix of `history` of `min_n..=max_n` tokens (at most `k`).
pub fn find_continuation(history: &[u32], min_n: usize, max_n: usize, k: usize) -> Vec<u32> {
    let len = history.len();
    for n in (min_n..=max_n.min(len.saturating_sub(1))).rev() {
        let key = &history[len - n..];
        // Most recent earlier occurrence whose continuation is known.
        let mut start = len - n;
        while start > 0 {
            start -= 1;
            if &history[start..start + n] == key {
                let from = start + n;
                let to = (from + k).min(len);
                if from < to {
                    return history[from..to].to_vec();
                }
            }
        }
    }
    Vec::new()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_longest_most_recent_match() {
        // ... 1 2 3 [9 9] ... 1 2 3 [7 7] ... 2 3 → after "2 3": 7 7 (most recent).
        let h = [1, 2, 3, 9, 9, 5, 1, 2, 3, 7, 7, 6, 2, 3];
        assert_eq!(find_continuation(&h, 1, 4, 2), vec![7, 7]);
        // A longer n-gram wins over a more recent shorter one.
        let h = [4, 2, 3, 8, 8, 1, 2, 3, 7, 7, 4, 2, 3];
        assert_eq!(find_continuation(&h, 1, 3, 2), vec![8, 8]);
        // No match of at least min_n.
        assert!(find_continuation(&[1, 2, 3, 4], 2, 4, 3).is_empty());
        // The continuation may run into the suffix itself (repetition); the
        // most recent occurrence wins even when its continuation is short.
        let h = [5, 5, 5, 5];
        assert_eq!(find_continuation(&h, 1, 2, 3), vec![5]);
        assert!(find_continuation(&[], 1, 4, 3).is_empty());
        assert!(find_continuation(&[1], 1, 4, 3).is_empty());
    }

    #[test]
    fn adapts_and_pauses_when_drafting_does_not_pay() {
        let mut d = Drafter::new(LookupParams {
            max_draft: 8,
            ..LookupParams::default()
        });
        let h = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 1, 2];
        // Starts short, doubles while accepted in full, up to max_draft.
        assert_eq!(d.draft(&h, 100).len(), 2);
        d.record(2, 2);
        assert_eq!(d.draft(&h, 100).len(), 4);
        d.record(4, 4);
        assert_eq!(d.draft(&h, 100).len(), 8);
        d.record(8, 8);
        assert_eq!(d.draft(&h, 100).len(), 8);
        // A partial acceptance shrinks it to what was accepted plus one.
        d.record(8, 2);
        assert_eq!(d.draft(&h, 100).len(), 3);
        assert_eq!(d.draft(&h, 2).len(), 2);
        // Rejections everywhere: after a window, drafting pauses.
        for _ in 0..WINDOW {
            d.record(1, 0);
        }
        for _ in 0..FIRST_PAUSE {
            assert!(d.draft(&h, 100).is_empty());
        }
        assert!(!d.draft(&h, 100).is_empty());
        assert_eq!(d.stats.rounds, 4 + WINDOW);
    }
}
