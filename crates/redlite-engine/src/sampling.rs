//! Token sampling: greedy, temperature, top-k, top-p (nucleus), min-p, seeded.
//!
//! The order follows llama.cpp's default chain: the filters (top-k, then
//! top-p, then min-p) act on the probabilities of the untempered logits, then
//! the temperature is applied to the survivors and one is drawn.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Sampling settings. `temperature <= 0` means greedy (argmax).
#[derive(Clone, Debug, PartialEq)]
pub struct SamplingParams {
    pub temperature: f32,
    /// Keep the `top_k` most likely tokens (0 = off).
    pub top_k: usize,
    /// Keep the smallest set whose probability reaches `top_p` (1.0 = off).
    pub top_p: f32,
    /// Drop tokens whose probability is below `min_p` times the largest (0 = off).
    pub min_p: f32,
    /// Random seed; `None` draws one from the OS.
    pub seed: Option<u64>,
}

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            seed: None,
        }
    }
}

impl SamplingParams {
    /// Check ranges; the message names the offending field.
    pub fn validate(&self) -> Result<(), String> {
        if !self.temperature.is_finite() || self.temperature < 0.0 {
            return Err(format!(
                "temperature must be >= 0, got {}",
                self.temperature
            ));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(format!("top_p must be in (0, 1], got {}", self.top_p));
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return Err(format!("min_p must be in [0, 1], got {}", self.min_p));
        }
        Ok(())
    }
}

/// A sampler with its own random state.
pub struct Sampler {
    params: SamplingParams,
    rng: StdRng,
    // Scratch buffer of (token, logit) reused between calls.
    cand: Vec<(u32, f32)>,
}

/// Index of the largest logit (the first one on ties), ignoring NaN.
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0usize;
    let mut bv = f32::NEG_INFINITY;
    for (i, &v) in logits.iter().enumerate() {
        if v > bv {
            bv = v;
            best = i;
        }
    }
    best as u32
}

impl Sampler {
    pub fn new(params: SamplingParams) -> Sampler {
        let rng = match params.seed {
            Some(s) => StdRng::seed_from_u64(s),
            None => StdRng::from_entropy(),
        };
        Sampler {
            params,
            rng,
            cand: Vec::new(),
        }
    }

    pub fn params(&self) -> &SamplingParams {
        &self.params
    }

    /// The candidates that survive the filters, with their probabilities
    /// after temperature (sorted by descending probability). Exposed for tests
    /// and for callers that report alternatives.
    pub fn distribution(&mut self, logits: &[f32]) -> Vec<(u32, f32)> {
        let p = self.params.clone();
        let cand = &mut self.cand;
        cand.clear();
        cand.extend(
            logits
                .iter()
                .enumerate()
                .filter(|(_, v)| !v.is_nan())
                .map(|(i, &v)| (i as u32, v)),
        );
        if cand.is_empty() {
            return Vec::new();
        }
        // top-k: partial selection, then sort the survivors.
        if p.top_k > 0 && p.top_k < cand.len() {
            cand.select_nth_unstable_by(p.top_k - 1, |a, b| b.1.total_cmp(&a.1));
            cand.truncate(p.top_k);
        }
        cand.sort_unstable_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        // Probabilities of the untempered logits (over the survivors so far).
        let max = cand[0].1;
        let mut probs: Vec<f64> = cand.iter().map(|c| ((c.1 - max) as f64).exp()).collect();
        let total: f64 = probs.iter().sum();
        probs.iter_mut().for_each(|x| *x /= total);
        let mut keep = cand.len();
        if p.top_p < 1.0 {
            let mut acc = 0.0;
            for (i, pr) in probs.iter().enumerate() {
                acc += pr;
                if acc >= p.top_p as f64 {
                    keep = i + 1;
                    break;
                }
            }
        }
        if p.min_p > 0.0 {
            let floor = probs[0] * p.min_p as f64;
            let n = probs[..keep].iter().take_while(|&&x| x >= floor).count();
            keep = n.max(1);
        }
        cand.truncate(keep);
        // Temperature on the survivors.
        let t = if p.temperature > 0.0 {
            p.temperature
        } else {
            1.0
        };
        let mut w: Vec<f64> = cand
            .iter()
            .map(|c| (((c.1 - max) / t) as f64).exp())
            .collect();
        let total: f64 = w.iter().sum();
        w.iter_mut().for_each(|x| *x /= total);
        cand.iter().zip(w).map(|(c, x)| (c.0, x as f32)).collect()
    }

    /// Speculative sampling against a drafted token (a draft that proposes
    /// `draft` with certainty): greedy accepts it exactly when it is the
    /// argmax; with temperature it is accepted with probability `p(draft)`,
    /// and on rejection a token is drawn from `p` without `draft`,
    /// renormalised. Either way the token returned is distributed as
    /// [`Sampler::sample`]'s. Returns `(token, accepted)`.
    pub fn accept_draft(&mut self, logits: &[f32], draft: u32) -> (u32, bool) {
        if self.params.temperature <= 0.0 {
            let best = argmax(logits);
            return (best, best == draft);
        }
        let dist = self.distribution(logits);
        let p_draft = dist
            .iter()
            .find(|(t, _)| *t == draft)
            .map_or(0.0, |&(_, p)| p as f64);
        let r: f64 = self.rng.gen();
        if r < p_draft {
            return (draft, true);
        }
        let rest = 1.0 - p_draft;
        if dist.is_empty() || rest <= 0.0 {
            return (argmax(logits), false);
        }
        let r: f64 = self.rng.gen::<f64>() * rest;
        let mut acc = 0.0f64;
        let mut last = None;
        for &(tok, pr) in &dist {
            if tok == draft {
                continue;
            }
            acc += pr as f64;
            last = Some(tok);
            if r < acc {
                return (tok, false);
            }
        }
        (last.unwrap_or_else(|| argmax(logits)), false)
    }

    /// Pick the next token.
    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        if self.params.temperature <= 0.0 {
            return argmax(logits);
        }
        let dist = self.distribution(logits);
        if dist.is_empty() {
            return argmax(logits);
        }
        let r: f64 = self.rng.gen();
        let mut acc = 0.0f64;
        for &(tok, pr) in &dist {
            acc += pr as f64;
            if r < acc {
                return tok;
            }
        }
        dist[dist.len() - 1].0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn softmax(l: &[f32], t: f32) -> Vec<f64> {
        let m = l.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
        let e: Vec<f64> = l.iter().map(|&x| (((x - m) / t) as f64).exp()).collect();
        let s: f64 = e.iter().sum();
        e.into_iter().map(|x| x / s).collect()
    }

    #[test]
    fn speculative_acceptance_keeps_the_distribution() {
        // The token returned by accept_draft (accepted or not) must follow
        // the same distribution as sample(), whatever the draft.
        let l = [1.0f32, 0.5, -0.5, 2.0, 0.0];
        let params = SamplingParams {
            temperature: 0.8,
            top_k: 4,
            seed: Some(7),
            ..Default::default()
        };
        let mut s = Sampler::new(params.clone());
        let want = s.distribution(&l);
        let n = 200_000;
        for draft in [3u32, 1, 2] {
            let mut counts = [0usize; 5];
            let mut accepted = 0;
            for _ in 0..n {
                let (t, ok) = s.accept_draft(&l, draft);
                counts[t as usize] += 1;
                accepted += ok as usize;
            }
            for &(tok, p) in &want {
                let f = counts[tok as usize] as f64 / n as f64;
                assert!(
                    (f - p as f64).abs() < 5e-3,
                    "draft {draft}: token {tok} {f} vs {p}"
                );
            }
            // Token 2 is cut by top-k: never produced, never accepted.
            assert_eq!(counts[2], 0);
            let p_draft = want
                .iter()
                .find(|w| w.0 == draft)
                .map_or(0.0, |w| w.1 as f64);
            assert!((accepted as f64 / n as f64 - p_draft).abs() < 5e-3);
        }
        // Greedy: accepted exactly when the draft is the argmax.
        let mut g = Sampler::new(SamplingParams::default());
        assert_eq!(g.accept_draft(&l, 3), (3, true));
        assert_eq!(g.accept_draft(&l, 0), (3, false));
    }

    #[test]
    fn greedy_is_argmax() {
        let l = [0.1, 3.0, -1.0, 2.9];
        let mut s = Sampler::new(SamplingParams::default());
        assert_eq!(s.sample(&l), 1);
        assert_eq!(argmax(&[f32::NAN, 1.0, 0.5]), 1);
    }

    #[test]
    fn empirical_frequencies_follow_softmax() {
        let l = [1.0f32, 0.5, -0.5, 2.0, 0.0];
        let t = 0.7;
        let mut s = Sampler::new(SamplingParams {
            temperature: t,
            seed: Some(42),
            ..Default::default()
        });
        let n = 40_000;
        let mut counts = [0usize; 5];
        for _ in 0..n {
            counts[s.sample(&l) as usize] += 1;
        }
        let p = softmax(&l, t);
        for i in 0..5 {
            let f = counts[i] as f64 / n as f64;
            // 5 standard deviations of a binomial proportion.
            let sd = (p[i] * (1.0 - p[i]) / n as f64).sqrt();
            assert!(
                (f - p[i]).abs() < 5.0 * sd + 1e-4,
                "token {i}: {f} vs {}",
                p[i]
            );
        }
    }

    #[test]
    fn filters_keep_the_right_sets() {
        let l = [2.0f32, 1.0, 0.0, -1.0, -2.0];
        let p = softmax(&l, 1.0);
        // top-k = 2.
        let mut s = Sampler::new(SamplingParams {
            temperature: 1.0,
            top_k: 2,
            seed: Some(1),
            ..Default::default()
        });
        let d = s.distribution(&l);
        assert_eq!(d.iter().map(|x| x.0).collect::<Vec<_>>(), vec![0, 1]);
        let z = p[0] + p[1];
        assert!((d[0].1 as f64 - p[0] / z).abs() < 1e-6);
        // top-p: smallest prefix reaching 0.9.
        let mut acc = 0.0;
        let want = p.iter().take_while(|&&x| {
            let before = acc;
            acc += x;
            before < 0.9
        });
        let want = want.count();
        let mut s = Sampler::new(SamplingParams {
            temperature: 1.0,
            top_p: 0.9,
            seed: Some(1),
            ..Default::default()
        });
        assert_eq!(s.distribution(&l).len(), want);
        // min-p 0.3: keep p >= 0.3 * p_max.
        let want = p.iter().filter(|&&x| x >= 0.3 * p[0]).count();
        let mut s = Sampler::new(SamplingParams {
            temperature: 1.0,
            min_p: 0.3,
            seed: Some(1),
            ..Default::default()
        });
        assert_eq!(s.distribution(&l).len(), want);
        // Never sample a filtered token.
        let mut s = Sampler::new(SamplingParams {
            temperature: 5.0,
            top_k: 2,
            seed: Some(9),
            ..Default::default()
        });
        for _ in 0..1000 {
            assert!(s.sample(&l) < 2);
        }
    }

    #[test]
    fn same_seed_same_tokens() {
        let l: Vec<f32> = (0..100).map(|i| ((i * 37) % 11) as f32 * 0.3).collect();
        let params = SamplingParams {
            temperature: 1.0,
            top_p: 0.95,
            seed: Some(7),
            ..Default::default()
        };
        let a: Vec<u32> = {
            let mut s = Sampler::new(params.clone());
            (0..50).map(|_| s.sample(&l)).collect()
        };
        let b: Vec<u32> = {
            let mut s = Sampler::new(params);
            (0..50).map(|_| s.sample(&l)).collect()
        };
        assert_eq!(a, b);
        assert!(a.iter().any(|&x| x != a[0]), "sampling should vary");
    }

    #[test]
    fn validation_names_the_field() {
        let p = SamplingParams {
            top_p: 0.0,
            ..Default::default()
        };
        assert!(p.validate().unwrap_err().contains("top_p"));
        let p = SamplingParams {
            temperature: -1.0,
            ..Default::default()
        };
        assert!(p.validate().unwrap_err().contains("temperature"));
    }
}
