//! Which experts the expert cache keeps: the eviction order, apart from the
//! entries themselves (so it is tested on its own).
//!
//! Two policies, each with or without per-layer quotas:
//!
//! * **LRU**: evict the least recently used.
//! * **Frequency with ageing** (LFU with dynamic ageing): every (layer,
//!   expert) keeps a count of its uses over the whole run, held or not; a
//!   held entry's priority is `age + count`, where `age` is the priority of
//!   the last entry evicted. The lowest priority goes first (ties: the least
//!   recently used). The age rises as entries leave, so an entry popular long
//!   ago but unused since drops below newer ones instead of staying forever.
//! * **Per-layer quotas**: each layer holds at most `budget / layers` bytes and
//!   evicts its own entries; without quotas the victim is the lowest of all.

use std::collections::{BTreeMap, HashMap};
use std::str::FromStr;

/// An entry's key: (layer, expert).
pub type Key = (usize, usize);

/// The eviction order of the expert cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum CachePolicy {
    /// Least recently used first.
    Lru,
    /// Lowest `age + uses` first (LFU with dynamic ageing): the default, for
    /// its hit rate (`bench/RESULTS.md`, 2026-12-03).
    #[default]
    Frequency,
}

impl FromStr for CachePolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "lru" => Ok(CachePolicy::Lru),
            "freq" | "frequency" | "lfu" => Ok(CachePolicy::Frequency),
            _ => Err(format!(
                "unknown expert cache policy {s:?} (expected lru or freq)"
            )),
        }
    }
}

/// `(priority, tick)`: the order of eviction (lowest first).
type Order = (u64, u64);

/// What is held, in eviction order, with the byte counts per layer.
pub struct Residency {
    policy: CachePolicy,
    /// Per-layer byte limit (`None`: only the total budget).
    quota: Option<u64>,
    budget: u64,
    tick: u64,
    age: u64,
    /// Uses of every key seen (held or not).
    uses: HashMap<Key, u64>,
    /// Held keys: their bytes and order.
    held: HashMap<Key, (u64, Order)>,
    /// Per layer: held experts by order.
    order: Vec<BTreeMap<Order, usize>>,
    layer_used: Vec<u64>,
    used: u64,
}

impl Residency {
    pub fn new(policy: CachePolicy, per_layer: bool, budget: u64, layers: usize) -> Residency {
        Residency {
            policy,
            quota: per_layer.then(|| budget / layers.max(1) as u64),
            budget,
            tick: 0,
            age: 0,
            uses: HashMap::new(),
            held: HashMap::new(),
            order: vec![BTreeMap::new(); layers],
            layer_used: vec![0; layers],
            used: 0,
        }
    }

    /// Bytes held.
    pub fn used(&self) -> u64 {
        self.used
    }

    #[cfg(test)]
    pub fn is_held(&self, key: Key) -> bool {
        self.held.contains_key(&key)
    }

    fn order_of(&mut self, key: Key) -> Order {
        self.tick += 1;
        let prio = match self.policy {
            CachePolicy::Lru => self.tick,
            CachePolicy::Frequency => self.age + self.uses.get(&key).copied().unwrap_or(0),
        };
        (prio, self.tick)
    }

    /// Re-rank a held key: `used` when a forward pass uses it (counts as a
    /// use), not when a prefetch finds it held. Returns whether it is held.
    pub fn touch(&mut self, key: Key, used: bool) -> bool {
        if !self.held.contains_key(&key) {
            return false;
        }
        if used {
            *self.uses.entry(key).or_insert(0) += 1;
        }
        let new = self.order_of(key);
        if let Some((_, o)) = self.held.get_mut(&key) {
            let old = std::mem::replace(o, new);
            self.order[key.0].remove(&old);
            self.order[key.0].insert(new, key.1);
        }
        true
    }

    /// Make room for `bytes` of layer `key.0` and hold `key` (`used`: a
    /// demand read, which counts as a use; a prefetch does not). Returns the
    /// keys evicted. A key held already is re-ranked instead.
    pub fn admit(&mut self, key: Key, bytes: u64, used: bool) -> Vec<Key> {
        if self.held.contains_key(&key) {
            self.touch(key, used);
            return Vec::new();
        }
        if used {
            *self.uses.entry(key).or_insert(0) += 1;
        }
        let il = key.0;
        let mut out = Vec::new();
        if let Some(q) = self.quota {
            while self.layer_used[il] + bytes > q {
                match self.evict_from(il) {
                    Some(k) => out.push(k),
                    None => break,
                }
            }
        }
        while self.used + bytes > self.budget {
            let Some(l) = (0..self.order.len())
                .filter_map(|l| self.order[l].first_key_value().map(|(o, _)| (*o, l)))
                .min()
                .map(|(_, l)| l)
            else {
                break;
            };
            match self.evict_from(l) {
                Some(k) => out.push(k),
                None => break,
            }
        }
        let o = self.order_of(key);
        self.held.insert(key, (bytes, o));
        self.order[il].insert(o, key.1);
        self.layer_used[il] += bytes;
        self.used += bytes;
        out
    }

    fn evict_from(&mut self, il: usize) -> Option<Key> {
        let (o, e) = self.order[il].pop_first()?;
        let key = (il, e);
        if let Some((bytes, _)) = self.held.remove(&key) {
            self.layer_used[il] -= bytes;
            self.used -= bytes;
        }
        if self.policy == CachePolicy::Frequency {
            self.age = self.age.max(o.0);
        }
        Some(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Replay `uses` (keys used in turn, each admitted on a miss) through a
    /// cache of `slots` unit entries; returns the hits.
    fn hits(
        policy: CachePolicy,
        per_layer: bool,
        slots: u64,
        layers: usize,
        uses: &[Key],
    ) -> usize {
        let mut r = Residency::new(policy, per_layer, slots, layers);
        let mut h = 0;
        for &k in uses {
            if r.touch(k, true) {
                h += 1;
            } else {
                r.admit(k, 1, true);
            }
            assert!(r.used() <= slots);
        }
        h
    }

    #[test]
    fn lru_evicts_the_least_recently_used() {
        let mut r = Residency::new(CachePolicy::Lru, false, 2, 1);
        r.admit((0, 1), 1, true);
        r.admit((0, 2), 1, true);
        r.touch((0, 1), true);
        assert_eq!(r.admit((0, 3), 1, true), vec![(0, 2)]);
        assert!(r.is_held((0, 1)) && r.is_held((0, 3)));
    }

    #[test]
    fn frequency_keeps_the_popular_and_ages_them_out() {
        // Expert 1 used three times, then a scan of 2, 3, 4: LRU drops 1,
        // frequency keeps it.
        let seq = [(0, 1), (0, 1), (0, 1), (0, 2), (0, 3), (0, 4), (0, 1)];
        assert_eq!(hits(CachePolicy::Lru, false, 2, 1, &seq), 2);
        assert_eq!(hits(CachePolicy::Frequency, false, 2, 1, &seq), 3);
        // Ageing: after 1 stops being used, a new pair used over and over
        // takes its place within a bounded number of steps.
        let mut r = Residency::new(CachePolicy::Frequency, false, 2, 1);
        for _ in 0..5 {
            if !r.touch((0, 1), true) {
                r.admit((0, 1), 1, true);
            }
        }
        let mut gone = None;
        for step in 0..40 {
            for e in [2, 3] {
                if !r.touch((0, e), true) {
                    r.admit((0, e), 1, true);
                }
            }
            if !r.is_held((0, 1)) {
                gone = Some(step);
                break;
            }
        }
        assert!(gone.is_some(), "an unused entry must age out");
    }

    #[test]
    fn quotas_keep_each_layer_to_its_share() {
        let mut r = Residency::new(CachePolicy::Lru, true, 4, 2);
        for e in 0..5 {
            r.admit((0, e), 1, true);
        }
        r.admit((1, 0), 1, true);
        // Layer 0 holds its two slots only, layer 1 was not evicted for it.
        assert_eq!((0..5).filter(|&e| r.is_held((0, e))).count(), 2);
        assert!(r.is_held((1, 0)) && r.is_held((0, 4)) && r.is_held((0, 3)));
        assert!(r.used() <= 4);
    }

    #[test]
    fn prefetch_admissions_do_not_count_as_uses() {
        let mut r = Residency::new(CachePolicy::Frequency, false, 2, 1);
        r.admit((0, 1), 1, true);
        r.admit((0, 1), 1, true); // held: a second use
        r.admit((0, 2), 1, false); // prefetched, never used
                                   // The never-used prefetch goes first, although it is newer.
        assert_eq!(r.admit((0, 3), 1, true), vec![(0, 2)]);
    }

    #[test]
    fn policy_names_parse() {
        assert_eq!("lru".parse::<CachePolicy>(), Ok(CachePolicy::Lru));
        assert_eq!("freq".parse::<CachePolicy>(), Ok(CachePolicy::Frequency));
        assert!("mru".parse::<CachePolicy>().is_err());
    }
}
