//! The tokenizer: special-token partition, pre-tokenization, BPE.

use aho_corasick::{AhoCorasick, MatchKind};
use redlite_gguf::GgufFile;

use crate::bpe::Merges;
use crate::pretokenize::PreTokenizer;
use crate::vocab::{
    encode_byte_level, key_err, FxMap, Result, TokenType, TokenizerError, Vocab, EOG_TEXTS,
    KEY_ADD_BOS, KEY_ADD_EOS, KEY_BOS, KEY_EOS, KEY_EOT, KEY_MODEL, KEY_PAD, KEY_PRE,
};

/// A byte-level BPE tokenizer read from GGUF metadata.
pub struct Tokenizer {
    pub(crate) vocab: Vocab,
    merges: Merges,
    pre: PreTokenizer,
    pre_name: String,
    specials: Specials,
    ignore_merges: bool,
    bos: Option<u32>,
    eos: Option<u32>,
    eot: Option<u32>,
    pad: Option<u32>,
    add_bos: bool,
    add_eos: bool,
    eog: Vec<u32>,
}

/// A piece of input text after the special-token partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fragment<'a> {
    Text(&'a str),
    Token(u32),
}

/// Special tokens (CONTROL, USER_DEFINED, UNKNOWN) matched as whole units.
struct Specials {
    /// Ids, longest text first (ties: lower id first).
    ids: Vec<u32>,
    texts: Vec<String>,
    types: Vec<TokenType>,
    /// Finds which of `texts` occur in a text (pattern index = position in
    /// `ids`).
    finder: Option<AhoCorasick>,
}

impl Specials {
    fn new(vocab: &Vocab) -> Specials {
        let text = |i: u32| vocab.text(i).unwrap_or("");
        let mut ids: Vec<u32> = (0..vocab.len() as u32)
            .filter(|&i| vocab.types()[i as usize].is_special() && !text(i).is_empty())
            .collect();
        ids.sort_by_key(|&i| (std::cmp::Reverse(text(i).len()), i));
        let texts: Vec<String> = ids.iter().map(|&i| text(i).to_string()).collect();
        let types = ids.iter().map(|&i| vocab.types()[i as usize]).collect();
        let finder = if texts.is_empty() {
            None
        } else {
            AhoCorasick::builder()
                .match_kind(MatchKind::Standard)
                .build(&texts)
                .ok()
        };
        Specials {
            ids,
            texts,
            types,
            finder,
        }
    }

    /// llama.cpp's `tokenizer_st_partition`: for each special token, longest
    /// first, split every remaining text fragment at each of its occurrences
    /// (left to right, non-overlapping). CONTROL / UNKNOWN tokens take part
    /// only when `parse_special` is on; USER_DEFINED tokens always do.
    fn partition<'a>(&self, text: &'a str, parse_special: bool) -> Vec<Fragment<'a>> {
        let mut frags = vec![Fragment::Text(text)];
        let Some(finder) = &self.finder else {
            return frags;
        };
        if text.is_empty() {
            return frags;
        }
        // Only tokens that occur somewhere in the text can split a fragment.
        let mut present: Vec<usize> = finder
            .find_overlapping_iter(text)
            .map(|m| m.pattern().as_usize())
            .filter(|&p| parse_special || !self.types[p].needs_parse_special())
            .collect();
        if present.is_empty() {
            return frags;
        }
        present.sort_unstable();
        present.dedup();
        for p in present {
            let pat = self.texts[p].as_str();
            let id = self.ids[p];
            let mut out = Vec::with_capacity(frags.len() + 2);
            for f in frags {
                match f {
                    Fragment::Text(s) => {
                        let mut last = 0;
                        for (at, _) in s.match_indices(pat) {
                            if at > last {
                                out.push(Fragment::Text(&s[last..at]));
                            }
                            out.push(Fragment::Token(id));
                            last = at + pat.len();
                        }
                        if last < s.len() {
                            out.push(Fragment::Text(&s[last..]));
                        }
                    }
                    t => out.push(t),
                }
            }
            frags = out;
        }
        frags
    }
}

fn opt_id(gguf: &GgufFile, key: &str, n_vocab: usize) -> Result<Option<u32>> {
    match gguf.get_u64(key)? {
        None => Ok(None),
        Some(v) if v < n_vocab as u64 => Ok(Some(v as u32)),
        Some(v) => Err(key_err(
            gguf,
            key,
            format!("token id {v} is out of range (the vocabulary has {n_vocab} tokens)"),
        )),
    }
}

impl Tokenizer {
    /// Build the tokenizer described by a GGUF file's `tokenizer.ggml.*`
    /// metadata. Only byte-level BPE (`tokenizer.ggml.model` = gpt2) is
    /// supported.
    pub fn from_gguf(gguf: &GgufFile) -> Result<Tokenizer> {
        let model = gguf
            .get_str(KEY_MODEL)?
            .ok_or_else(|| key_err(gguf, KEY_MODEL, "missing (required)"))?;
        if model != "gpt2" {
            return Err(key_err(
                gguf,
                KEY_MODEL,
                format!(
                    "tokenizer model {model:?} is not supported (only \"gpt2\", byte-level BPE)"
                ),
            ));
        }
        let pre_name = gguf.get_str(KEY_PRE)?.unwrap_or("gpt2").to_string();
        let pre = PreTokenizer::from_name(&pre_name).ok_or_else(|| {
            key_err(
                gguf,
                KEY_PRE,
                format!("pre-tokenizer {pre_name:?} is not supported (qwen2, llama3 and gpt2 are)"),
            )
        })?;
        let vocab = Vocab::from_gguf(gguf)?;
        let merges = Merges::from_gguf(gguf, &vocab)?;
        let n = vocab.len();
        let bos = opt_id(gguf, KEY_BOS, n)?;
        let eos = opt_id(gguf, KEY_EOS, n)?;
        let pad = opt_id(gguf, KEY_PAD, n)?;
        let mut eot = opt_id(gguf, KEY_EOT, n)?;
        let add_bos = gguf
            .get_bool(KEY_ADD_BOS)?
            .unwrap_or(pre == PreTokenizer::Llama3);
        let add_eos = gguf.get_bool(KEY_ADD_EOS)?.unwrap_or(false);
        if eot.is_none() {
            eot = [
                "<|eot_id|>",
                "<|im_end|>",
                "<|end|>",
                "<end_of_turn>",
                "<|endoftext|>",
            ]
            .iter()
            .find_map(|t| vocab.id_of_text(t));
        }
        let mut eog: Vec<u32> = EOG_TEXTS
            .iter()
            .filter_map(|t| vocab.id_of_text(t))
            .chain(eos)
            .chain(eot)
            .collect();
        eog.sort_unstable();
        eog.dedup();
        let specials = Specials::new(&vocab);
        Ok(Tokenizer {
            vocab,
            merges,
            pre,
            pre_name,
            specials,
            ignore_merges: pre == PreTokenizer::Llama3,
            bos,
            eos,
            eot,
            pad,
            add_bos,
            add_eos,
            eog,
        })
    }

    /// Encode text without BOS/EOS. With `parse_special`, CONTROL tokens
    /// written in the text (`<|im_start|>`) become their ids; without it they
    /// are encoded as ordinary text. USER_DEFINED tokens (`<tool_call>`) are
    /// always matched whole.
    pub fn encode(&self, text: &str, parse_special: bool) -> Vec<u32> {
        self.tokenize(text, false, parse_special)
    }

    /// llama.cpp's `llama_tokenize`: like [`encode`](Self::encode), plus BOS /
    /// EOS when `add_special` is set and the model asks for them.
    pub fn tokenize(&self, text: &str, add_special: bool, parse_special: bool) -> Vec<u32> {
        let mut out = Vec::with_capacity(text.len() / 3 + 2);
        if add_special && self.add_bos {
            out.extend(self.bos);
        }
        let mut cache = WordCache::default();
        for f in self.partition(text, parse_special) {
            match f {
                Fragment::Token(id) => out.push(id),
                Fragment::Text(s) => self.encode_fragment(s, &mut cache, &mut out),
            }
        }
        if add_special && self.add_eos {
            out.extend(self.eos);
        }
        out
    }

    /// Split text at special tokens (see [`encode`](Self::encode)).
    pub fn partition<'a>(&self, text: &'a str, parse_special: bool) -> Vec<Fragment<'a>> {
        self.specials.partition(text, parse_special)
    }

    /// The pre-tokenizer words of a text fragment (no special tokens).
    pub fn pre_tokenize<'a>(&self, text: &'a str) -> Vec<&'a str> {
        self.pre.words(text)
    }

    fn encode_fragment<'a>(&self, text: &'a str, cache: &mut WordCache<'a>, out: &mut Vec<u32>) {
        self.pre.split(text, |w| {
            let wb = w.as_bytes();
            if self.ignore_merges {
                let enc = encode_byte_level(wb);
                if let Some(id) = self.vocab.id_of_text(&enc) {
                    out.push(id);
                    return;
                }
            }
            if wb.len() == 1 {
                self.merges.encode_word(wb, out);
                return;
            }
            if let Some(&(a, b)) = cache.map.get(wb) {
                out.extend_from_slice(&cache.store[a as usize..b as usize]);
                return;
            }
            let start = out.len();
            self.merges.encode_word(wb, out);
            let a = cache.store.len() as u32;
            cache.store.extend_from_slice(&out[start..]);
            cache.map.insert(wb, (a, cache.store.len() as u32));
        });
    }

    pub fn n_vocab(&self) -> usize {
        self.vocab.len()
    }

    /// Number of merge rules.
    pub fn n_merges(&self) -> usize {
        self.merges.len()
    }

    /// The `tokenizer.ggml.pre` name.
    pub fn pre_name(&self) -> &str {
        &self.pre_name
    }

    pub fn pre_tokenizer(&self) -> PreTokenizer {
        self.pre
    }

    /// The token's text as stored in the GGUF file.
    pub fn token_text(&self, id: u32) -> Option<&str> {
        self.vocab.text(id)
    }

    /// The bytes a token decodes to (special tokens: their text).
    pub fn token_bytes(&self, id: u32) -> Option<&[u8]> {
        self.vocab.piece(id)
    }

    pub fn token_type(&self, id: u32) -> Option<TokenType> {
        self.vocab.token_type(id)
    }

    /// The id of the token whose GGUF text is `text` (e.g. `<|im_end|>`).
    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.vocab.id_of_text(text)
    }

    pub fn bos_id(&self) -> Option<u32> {
        self.bos
    }
    pub fn eos_id(&self) -> Option<u32> {
        self.eos
    }
    pub fn eot_id(&self) -> Option<u32> {
        self.eot
    }
    pub fn pad_id(&self) -> Option<u32> {
        self.pad
    }
    pub fn add_bos(&self) -> bool {
        self.add_bos
    }
    pub fn add_eos(&self) -> bool {
        self.add_eos
    }

    /// End-of-generation tokens (eos, eot, `<|im_end|>`, `<|endoftext|>`,
    /// FIM pad / repo / file-separator tokens), sorted.
    pub fn eog_ids(&self) -> &[u32] {
        &self.eog
    }

    pub fn is_eog(&self, id: u32) -> bool {
        self.eog.binary_search(&id).is_ok()
    }

    pub(crate) fn check_id(&self, id: u32) -> Result<()> {
        if (id as usize) < self.vocab.len() {
            Ok(())
        } else {
            Err(TokenizerError::IdOutOfRange {
                id,
                n_vocab: self.vocab.len(),
            })
        }
    }
}

/// Ids of the words already encoded in one call.
#[derive(Default)]
struct WordCache<'a> {
    map: FxMap<&'a [u8], (u32, u32)>,
    store: Vec<u32>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokenizer_is_shareable_across_threads() {
        fn check<T: Send + Sync>() {}
        check::<Tokenizer>();
    }
}
