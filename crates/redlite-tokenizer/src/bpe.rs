//! Byte-pair merging of one pre-tokenized word.
//!
//! A word starts as one symbol per byte. The adjacent pair whose merge has the
//! lowest rank (leftmost on ties) is merged until no pair has a merge: the
//! order llama.cpp's priority queue produces. Symbols are ids; strings that
//! appear in merges but are not tokens get "virtual" ids past the vocabulary
//! so that merging follows the merge list exactly, and a virtual symbol left at
//! the end is emitted as the tokens of its bytes.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use redlite_gguf::GgufFile;

use crate::vocab::{byte_to_char, char_to_byte, key_err, FxMap, Result, Vocab, KEY_MERGES};

/// Words of at most this many bytes use the quadratic scan (faster for the
/// short words that make up almost all text); longer ones a heap.
const LINEAR_MAX: usize = 48;

/// Merge rules by id pair.
pub struct Merges {
    /// `(left << 32) | right` -> `(rank << 32) | result`.
    map: FxMap<u64, u64>,
    /// The id of each single byte (possibly virtual).
    byte_ids: [u32; 256],
    n_vocab: u32,
    /// Bytes of virtual ids (`id - n_vocab`).
    virtual_bytes: Vec<Vec<u8>>,
}

#[inline]
fn pair_key(a: u32, b: u32) -> u64 {
    ((a as u64) << 32) | b as u64
}

impl Merges {
    /// Read `tokenizer.ggml.merges` ("left right" in byte-level text, rank =
    /// position in the list).
    pub fn from_gguf(gguf: &GgufFile, vocab: &Vocab) -> Result<Merges> {
        let list = gguf
            .get_str_array(KEY_MERGES)?
            .ok_or_else(|| key_err(gguf, KEY_MERGES, "missing (required for gpt2 BPE)"))?;
        let mut pairs = Vec::with_capacity(list.len());
        for (i, m) in list.iter().enumerate() {
            // llama.cpp splits at the first space after the first character.
            let first = m.chars().next().map_or(0, char::len_utf8);
            let sp = m[first..]
                .find(' ')
                .filter(|_| first > 0)
                .map(|p| p + first)
                .ok_or_else(|| {
                    key_err(
                        gguf,
                        KEY_MERGES,
                        format!("merge #{i} {m:?} is not two symbols separated by a space"),
                    )
                })?;
            pairs.push((&m[..sp], &m[sp + 1..]));
        }
        Ok(Merges::new(vocab, &pairs))
    }

    /// Build from merge pairs of byte-level texts, in rank order.
    pub fn new<S: AsRef<str>>(vocab: &Vocab, pairs: &[(S, S)]) -> Merges {
        let n_vocab = vocab.len() as u32;
        let mut virt: FxMap<String, u32> = FxMap::default();
        let mut virtual_bytes: Vec<Vec<u8>> = Vec::new();
        let mut id_of = |k: &str| -> u32 {
            if let Some(id) = vocab.id_of_text(k) {
                return id;
            }
            if let Some(&id) = virt.get(k) {
                return id;
            }
            let id = n_vocab + virtual_bytes.len() as u32;
            let bytes = k
                .chars()
                .flat_map(|c| match char_to_byte(c) {
                    Some(b) => vec![b],
                    None => c.to_string().into_bytes(),
                })
                .collect();
            virtual_bytes.push(bytes);
            virt.insert(k.to_string(), id);
            id
        };
        let mut byte_ids = [0u32; 256];
        for (b, slot) in byte_ids.iter_mut().enumerate() {
            let mut buf = [0u8; 4];
            *slot = id_of(byte_to_char(b as u8).encode_utf8(&mut buf));
        }
        let mut map: FxMap<u64, u64> = FxMap::default();
        map.reserve(pairs.len());
        let mut joined = String::new();
        for (rank, (a, b)) in pairs.iter().enumerate() {
            let (a, b) = (a.as_ref(), b.as_ref());
            let ia = id_of(a);
            let ib = id_of(b);
            joined.clear();
            joined.push_str(a);
            joined.push_str(b);
            let r = id_of(&joined);
            // The first occurrence of a pair keeps its rank (llama.cpp's
            // `bpe_ranks.emplace`).
            map.entry(pair_key(ia, ib))
                .or_insert(((rank as u64) << 32) | r as u64);
        }
        Merges {
            map,
            byte_ids,
            n_vocab,
            virtual_bytes,
        }
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// `(rank, result)` of merging `a` and `b`.
    #[inline]
    fn get(&self, a: u32, b: u32) -> Option<(u32, u32)> {
        self.map
            .get(&pair_key(a, b))
            .map(|&v| ((v >> 32) as u32, v as u32))
    }

    /// Encode one word (raw bytes), appending token ids to `out`.
    pub fn encode_word(&self, word: &[u8], out: &mut Vec<u32>) {
        if word.len() <= LINEAR_MAX {
            self.encode_linear(word, out)
        } else {
            self.encode_heap(word, out)
        }
    }

    fn emit(&self, id: u32, out: &mut Vec<u32>) {
        if id < self.n_vocab {
            out.push(id);
        } else {
            // A merged string that is not a token: fall back to its bytes.
            let bytes = &self.virtual_bytes[(id - self.n_vocab) as usize];
            for &b in bytes {
                let bid = self.byte_ids[b as usize];
                if bid < self.n_vocab {
                    out.push(bid);
                }
            }
        }
    }

    /// Repeatedly merge the lowest-ranked (then leftmost) pair by scanning.
    pub(crate) fn encode_linear(&self, word: &[u8], out: &mut Vec<u32>) {
        let mut sym: Vec<u32> = word.iter().map(|&b| self.byte_ids[b as usize]).collect();
        if sym.len() > 1 {
            // ranks[i]: the merge of (sym[i], sym[i+1]).
            let mut ranks: Vec<(u32, u32)> = sym
                .windows(2)
                .map(|w| self.get(w[0], w[1]).unwrap_or((u32::MAX, 0)))
                .collect();
            loop {
                let mut best = u32::MAX;
                let mut at = 0usize;
                for (i, &(r, _)) in ranks.iter().enumerate() {
                    if r < best {
                        best = r;
                        at = i;
                    }
                }
                if best == u32::MAX {
                    break;
                }
                sym[at] = ranks[at].1;
                sym.remove(at + 1);
                ranks.remove(at);
                if at < ranks.len() {
                    ranks[at] = self.get(sym[at], sym[at + 1]).unwrap_or((u32::MAX, 0));
                }
                if at > 0 {
                    ranks[at - 1] = self.get(sym[at - 1], sym[at]).unwrap_or((u32::MAX, 0));
                }
            }
        }
        for id in sym {
            self.emit(id, out);
        }
    }

    /// The same merge order with a priority queue: O(n log n) for long words.
    pub(crate) fn encode_heap(&self, word: &[u8], out: &mut Vec<u32>) {
        let n = word.len();
        if n == 0 {
            return;
        }
        let mut id: Vec<u32> = word.iter().map(|&b| self.byte_ids[b as usize]).collect();
        let mut next: Vec<usize> = (1..=n).collect(); // n = none
        let mut prev: Vec<usize> = (0..n).map(|i| i.wrapping_sub(1)).collect(); // usize::MAX = none
        let mut alive = vec![true; n];
        // (rank, left position, left id, right id)
        let mut heap: BinaryHeap<Reverse<(u32, usize, u32, u32)>> = BinaryHeap::new();
        let push = |heap: &mut BinaryHeap<_>, l: usize, a: u32, b: u32| {
            if let Some((r, _)) = self.get(a, b) {
                heap.push(Reverse((r, l, a, b)));
            }
        };
        for i in 0..n - 1 {
            push(&mut heap, i, id[i], id[i + 1]);
        }
        while let Some(Reverse((_, l, a, b))) = heap.pop() {
            let r = next[l];
            // Skip entries made stale by an earlier merge.
            if !alive[l] || r >= n || id[l] != a || id[r] != b {
                continue;
            }
            let Some((_, m)) = self.get(a, b) else {
                continue;
            };
            id[l] = m;
            alive[r] = false;
            next[l] = next[r];
            if next[l] < n {
                prev[next[l]] = l;
            }
            let p = prev[l];
            if p != usize::MAX {
                push(&mut heap, p, id[p], id[l]);
            }
            if next[l] < n {
                push(&mut heap, l, id[l], id[next[l]]);
            }
        }
        let mut i = 0;
        while i < n {
            self.emit(id[i], out);
            i = next[i];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocab::TokenType;
    use rand::{Rng, SeedableRng};

    /// A small random vocabulary: all bytes of a 4-letter alphabet plus
    /// random merges, some producing strings that are not tokens.
    fn random_merges(rng: &mut rand::rngs::StdRng) -> (Vocab, Merges) {
        let alphabet = b"abcd";
        let mut texts: Vec<String> = (0..=255u8)
            .map(|b| crate::vocab::encode_byte_level(&[b]))
            .collect();
        let mut known: Vec<Vec<u8>> = alphabet.iter().map(|&b| vec![b]).collect();
        let mut pairs = Vec::new();
        for _ in 0..60 {
            let a = known[rng.gen_range(0..known.len())].clone();
            let b = known[rng.gen_range(0..known.len())].clone();
            let mut j = a.clone();
            j.extend_from_slice(&b);
            pairs.push((
                crate::vocab::encode_byte_level(&a),
                crate::vocab::encode_byte_level(&b),
            ));
            if rng.gen_bool(0.85) {
                texts.push(crate::vocab::encode_byte_level(&j));
            }
            known.push(j);
        }
        let types = vec![TokenType::Normal; texts.len()];
        let vocab = Vocab::new(&texts, types);
        let merges = Merges::new(&vocab, &pairs);
        (vocab, merges)
    }

    #[test]
    fn linear_and_heap_merge_orders_agree() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for _ in 0..20 {
            let (vocab, merges) = random_merges(&mut rng);
            for _ in 0..200 {
                let len = rng.gen_range(1..80);
                let word: Vec<u8> = (0..len).map(|_| b"abcd"[rng.gen_range(0..4)]).collect();
                let (mut x, mut y) = (Vec::new(), Vec::new());
                merges.encode_linear(&word, &mut x);
                merges.encode_heap(&word, &mut y);
                assert_eq!(x, y, "word {:?}", String::from_utf8_lossy(&word));
                // The tokens spell the word.
                let spelled: Vec<u8> = x
                    .iter()
                    .flat_map(|&i| vocab.piece(i).unwrap().to_vec())
                    .collect();
                assert_eq!(spelled, word);
            }
        }
    }

    #[test]
    fn lowest_rank_wins_then_leftmost() {
        // Merges: "b c" (rank 0), "a b" (rank 1), "bc d" (rank 2).
        let mut texts: Vec<String> = (0..=255u8)
            .map(|b| crate::vocab::encode_byte_level(&[b]))
            .collect();
        for t in ["bc", "ab", "bcd"] {
            texts.push(t.to_string());
        }
        let types = vec![TokenType::Normal; texts.len()];
        let vocab = Vocab::new(&texts, types);
        let p = |a: &str, b: &str| (a.to_string(), b.to_string());
        let merges = Merges::new(&vocab, &[p("b", "c"), p("a", "b"), p("bc", "d")]);
        let enc = |w: &str| {
            let mut v = Vec::new();
            merges.encode_linear(w.as_bytes(), &mut v);
            v.iter()
                .map(|&i| String::from_utf8(vocab.piece(i).unwrap().to_vec()).unwrap())
                .collect::<Vec<_>>()
        };
        assert_eq!(enc("abcd"), ["a", "bcd"]);
        assert_eq!(enc("abab"), ["ab", "ab"]);
        assert_eq!(enc("bcbc"), ["bc", "bc"]);
    }
}
