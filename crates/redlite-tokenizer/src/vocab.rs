//! The vocabulary of a GGUF byte-level BPE tokenizer: token texts, types,
//! the bytes each token stands for, and the special-token ids.
//!
//! Byte-level BPE (GPT-2 style) stores every token as text in which each raw
//! byte is replaced by a printable character (`bytes_to_unicode`): a space is
//! `Ġ`, a newline `Ċ`. Added tokens (CONTROL / USER_DEFINED) are stored as
//! their raw text.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::path::PathBuf;

use redlite_gguf::{GgufError, GgufFile};

/// Errors building or using a tokenizer. Errors from the GGUF file name the
/// file and the metadata key at fault.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error("{}: metadata key {key}: {msg}", path.display())]
    Key {
        path: PathBuf,
        key: String,
        msg: String,
    },
    #[error("token id {id} is out of range (the vocabulary has {n_vocab} tokens)")]
    IdOutOfRange { id: u32, n_vocab: usize },
}

pub type Result<T, E = TokenizerError> = std::result::Result<T, E>;

pub const KEY_MODEL: &str = "tokenizer.ggml.model";
pub const KEY_PRE: &str = "tokenizer.ggml.pre";
pub const KEY_TOKENS: &str = "tokenizer.ggml.tokens";
pub const KEY_TOKEN_TYPE: &str = "tokenizer.ggml.token_type";
pub const KEY_MERGES: &str = "tokenizer.ggml.merges";
pub const KEY_BOS: &str = "tokenizer.ggml.bos_token_id";
pub const KEY_EOS: &str = "tokenizer.ggml.eos_token_id";
pub const KEY_PAD: &str = "tokenizer.ggml.padding_token_id";
pub const KEY_EOT: &str = "tokenizer.ggml.eot_token_id";
pub const KEY_ADD_BOS: &str = "tokenizer.ggml.add_bos_token";
pub const KEY_ADD_EOS: &str = "tokenizer.ggml.add_eos_token";

/// `tokenizer.ggml.token_type` values (llama.cpp's `llama_token_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TokenType {
    Undefined,
    Normal,
    Unknown,
    /// Special tokens such as `<|im_start|>`: matched whole in text only when
    /// special-token parsing is on.
    Control,
    /// Added tokens such as `<tool_call>`: always matched whole in text.
    UserDefined,
    Unused,
    Byte,
}

impl TokenType {
    pub fn from_i64(v: i64) -> Option<TokenType> {
        Some(match v {
            0 => TokenType::Undefined,
            1 => TokenType::Normal,
            2 => TokenType::Unknown,
            3 => TokenType::Control,
            4 => TokenType::UserDefined,
            5 => TokenType::Unused,
            6 => TokenType::Byte,
            _ => return None,
        })
    }

    /// Tokens matched as whole units in the input text before BPE
    /// (llama.cpp's special-token cache: CONTROL, USER_DEFINED, UNKNOWN).
    pub fn is_special(self) -> bool {
        matches!(
            self,
            TokenType::Control | TokenType::UserDefined | TokenType::Unknown
        )
    }

    /// Tokens only matched in text when special-token parsing is on.
    pub fn needs_parse_special(self) -> bool {
        matches!(self, TokenType::Control | TokenType::Unknown)
    }

    /// Tokens whose GGUF text is stored raw rather than byte-level encoded.
    pub fn is_raw_text(self) -> bool {
        self.is_special()
    }
}

/// FxHash (the rustc hasher): fast for the short keys used here.
#[derive(Default, Clone, Copy)]
pub(crate) struct FxHasher {
    hash: u64,
}

const FX_SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl FxHasher {
    #[inline]
    fn add(&mut self, w: u64) {
        self.hash = (self.hash.rotate_left(5) ^ w).wrapping_mul(FX_SEED);
    }
}

impl Hasher for FxHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut a = [0u8; 8];
            a.copy_from_slice(c);
            self.add(u64::from_le_bytes(a));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut a = [0u8; 8];
            a[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(a) ^ ((rest.len() as u64) << 59));
        }
    }
    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.add(i as u64);
    }
    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.add(i as u64);
    }
    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }
    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }
    #[inline]
    fn finish(&self) -> u64 {
        self.hash
    }
}

pub(crate) type FxMap<K, V> = HashMap<K, V, BuildHasherDefault<FxHasher>>;

/// GPT-2's `bytes_to_unicode`: the printable character standing for each byte.
pub fn byte_to_char(b: u8) -> char {
    BYTE_CHARS[b as usize]
}

static BYTE_CHARS: [char; 256] = build_byte_chars();

const fn is_identity_byte(b: u32) -> bool {
    (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff)
}

const fn build_byte_chars() -> [char; 256] {
    let mut out = ['\0'; 256];
    let mut n = 0u32;
    let mut b = 0u32;
    while b < 256 {
        let c = if is_identity_byte(b) {
            b
        } else {
            let c = 256 + n;
            n += 1;
            c
        };
        out[b as usize] = match char::from_u32(c) {
            Some(c) => c,
            None => '\0',
        };
        b += 1;
    }
    out
}

/// The inverse of [`byte_to_char`]: the byte a printable character stands
/// for, or `None` for characters outside the 256-character alphabet.
pub fn char_to_byte(c: char) -> Option<u8> {
    let c = c as u32;
    if c < 256 {
        if is_identity_byte(c) {
            Some(c as u8)
        } else {
            None
        }
    } else if c < 256 + 68 {
        Some(CHAR_TO_BYTE_HIGH[(c - 256) as usize])
    } else {
        None
    }
}

static CHAR_TO_BYTE_HIGH: [u8; 68] = build_high();

const fn build_high() -> [u8; 68] {
    let mut out = [0u8; 68];
    let mut n = 0usize;
    let mut b = 0u32;
    while b < 256 {
        if !is_identity_byte(b) {
            out[n] = b as u8;
            n += 1;
        }
        b += 1;
    }
    out
}

/// Decode byte-level text to raw bytes; `None` if a character is outside the
/// byte alphabet.
pub fn decode_byte_level(text: &str) -> Option<Vec<u8>> {
    text.chars().map(char_to_byte).collect()
}

/// Encode raw bytes as byte-level text.
pub fn encode_byte_level(bytes: &[u8]) -> String {
    bytes.iter().map(|&b| byte_to_char(b)).collect()
}

/// Token texts, types and pieces read from `tokenizer.ggml.*`.
pub struct Vocab {
    /// GGUF texts, concatenated; `text_off[i]..text_off[i+1]`.
    text_buf: String,
    text_off: Vec<u32>,
    types: Vec<TokenType>,
    /// The bytes each token decodes to, concatenated; `piece_off[i]..piece_off[i+1]`.
    pieces: Vec<u8>,
    piece_off: Vec<u32>,
    index: TextIndex,
}

/// Text -> id without a second copy of the texts: a map from the text's
/// 64-bit hash to the id, checked against the stored text; texts whose hash
/// collides with another text's go to a (practically always empty) list.
#[derive(Default)]
struct TextIndex {
    map: FxMap<u64, u32>,
    overflow: Vec<(String, u32)>,
}

pub(crate) fn hash_str(s: &str) -> u64 {
    let mut h = FxHasher::default();
    h.write(s.as_bytes());
    h.finish()
}
/// Texts llama.cpp forces to CONTROL whatever their stored type
/// (`llama_vocab::impl::load`), besides the end-of-generation texts of
/// [`EOG_TEXTS`], which it forces too: the FIM prefix / suffix / middle markers.
const CONTROL_NOT_EOG: &[&str] = &[
    "<|end\u{2581}of\u{2581}sentence|>",
    "<|fim_prefix|>",
    "<fim-prefix>",
    "<fim_prefix>",
    "<\u{ff5c}fim\u{2581}begin\u{ff5c}>",
    "<PRE>",
    "\u{2581}<PRE>",
    "<|fim_suffix|>",
    "<fim-suffix>",
    "<fim_suffix>",
    "<\u{ff5c}fim\u{2581}hole\u{ff5c}>",
    "<SUF>",
    "\u{2581}<SUF>",
    "<|fim_middle|>",
    "<fim-middle>",
    "<fim_middle>",
    "<\u{ff5c}fim\u{2581}end\u{ff5c}>",
    "<MID>",
    "\u{2581}<MID>",
];

/// Texts of end-of-generation tokens (llama.cpp's EOG set, besides eos/eot
/// and the FIM pad / repo / file-separator tokens).
pub(crate) const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<|fim_pad|>",
    "<fim-pad>",
    "<fim_pad>",
    "<|fim_repo|>",
    "<|repo_name|>",
    "<fim-repo>",
    "<REPO>",
    "<reponame>",
    "<|file_sep|>",
    "<file_sep>",
    "<file-sep>",
];

pub(crate) fn key_err(gguf: &GgufFile, key: &str, msg: impl Into<String>) -> TokenizerError {
    TokenizerError::Key {
        path: gguf.path().to_path_buf(),
        key: key.to_string(),
        msg: msg.into(),
    }
}

impl Vocab {
    /// Read `tokenizer.ggml.tokens` and `tokenizer.ggml.token_type`.
    pub fn from_gguf(gguf: &GgufFile) -> Result<Vocab> {
        let texts = gguf
            .get_str_array(KEY_TOKENS)?
            .ok_or_else(|| key_err(gguf, KEY_TOKENS, "missing (required)"))?;
        if texts.is_empty() {
            return Err(key_err(gguf, KEY_TOKENS, "the token list is empty"));
        }
        if texts.len() > u32::MAX as usize / 2 {
            return Err(key_err(gguf, KEY_TOKENS, "too many tokens"));
        }
        let types: Vec<TokenType> = match gguf.get_array(KEY_TOKEN_TYPE)? {
            None => vec![TokenType::Normal; texts.len()],
            Some(a) => {
                let v = a.as_i64_vec().ok_or_else(|| {
                    key_err(
                        gguf,
                        KEY_TOKEN_TYPE,
                        format!("expected an integer array, found {}", a.elem_type().name()),
                    )
                })?;
                if v.len() != texts.len() {
                    return Err(key_err(
                        gguf,
                        KEY_TOKEN_TYPE,
                        format!(
                            "has {} entries but {KEY_TOKENS} has {}",
                            v.len(),
                            texts.len()
                        ),
                    ));
                }
                let mut out = Vec::with_capacity(v.len());
                for (i, &t) in v.iter().enumerate() {
                    out.push(TokenType::from_i64(t).ok_or_else(|| {
                        key_err(
                            gguf,
                            KEY_TOKEN_TYPE,
                            format!("token {i}: unknown token type {t}"),
                        )
                    })?);
                }
                out
            }
        };
        Ok(Vocab::new(texts, types))
    }

    /// Build from texts and types (same length; checked by the caller).
    pub fn new<S: AsRef<str>>(texts: &[S], mut types: Vec<TokenType>) -> Vocab {
        let n = texts.len();
        let total: usize = texts.iter().map(|t| t.as_ref().len()).sum();
        let mut text_buf = String::with_capacity(total);
        let mut text_off = Vec::with_capacity(n + 1);
        text_off.push(0u32);
        for t in texts {
            text_buf.push_str(t.as_ref());
            text_off.push(text_buf.len() as u32);
        }
        let mut v = Vocab {
            text_buf,
            text_off,
            types: Vec::new(),
            pieces: Vec::new(),
            piece_off: Vec::new(),
            index: TextIndex::default(),
        };
        let mut index = TextIndex::default();
        index.map.reserve(n);
        for i in 0..n as u32 {
            let t = v.text_at(i);
            // Like llama.cpp's `token_to_id[text] = id`: the last one wins.
            match index.map.entry(hash_str(t)) {
                Entry::Vacant(e) => {
                    e.insert(i);
                }
                Entry::Occupied(mut e) => {
                    if v.text_at(*e.get()) == t {
                        e.insert(i);
                    } else {
                        match index.overflow.iter_mut().find(|(s, _)| s == t) {
                            Some(e) => e.1 = i,
                            None => index.overflow.push((t.to_string(), i)),
                        }
                    }
                }
            }
        }
        v.index = index;
        for t in EOG_TEXTS.iter().chain(CONTROL_NOT_EOG) {
            if let Some(id) = v.id_of_text(t) {
                types[id as usize] = TokenType::Control;
            }
        }
        let mut pieces = Vec::with_capacity(total);
        let mut piece_off = Vec::with_capacity(n + 1);
        piece_off.push(0u32);
        for (i, ty) in types.iter().enumerate() {
            let t = v.text_at(i as u32);
            if ty.is_raw_text() {
                pieces.extend_from_slice(t.as_bytes());
            } else {
                // Characters outside the byte alphabet stand for themselves.
                for c in t.chars() {
                    match char_to_byte(c) {
                        Some(b) => pieces.push(b),
                        None => {
                            let mut buf = [0u8; 4];
                            pieces.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                        }
                    }
                }
            }
            piece_off.push(pieces.len() as u32);
        }
        v.types = types;
        v.pieces = pieces;
        v.piece_off = piece_off;
        v
    }

    #[inline]
    fn text_at(&self, id: u32) -> &str {
        let i = id as usize;
        &self.text_buf[self.text_off[i] as usize..self.text_off[i + 1] as usize]
    }

    pub fn len(&self) -> usize {
        self.text_off.len() - 1
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The token's text as stored in the GGUF file.
    pub fn text(&self, id: u32) -> Option<&str> {
        if (id as usize) < self.len() {
            Some(self.text_at(id))
        } else {
            None
        }
    }

    pub fn token_type(&self, id: u32) -> Option<TokenType> {
        self.types.get(id as usize).copied()
    }

    /// The bytes the token decodes to (raw text for special tokens).
    pub fn piece(&self, id: u32) -> Option<&[u8]> {
        let i = id as usize;
        if i >= self.len() {
            return None;
        }
        Some(&self.pieces[self.piece_off[i] as usize..self.piece_off[i + 1] as usize])
    }

    /// The id of the token with this GGUF text (for byte-level tokens, the
    /// encoded text: `Ġthe`).
    pub fn id_of_text(&self, text: &str) -> Option<u32> {
        if let Some(&id) = self.index.map.get(&hash_str(text)) {
            if self.text_at(id) == text {
                return Some(id);
            }
        }
        self.index
            .overflow
            .iter()
            .find(|(s, _)| s == text)
            .map(|e| e.1)
    }

    pub(crate) fn types(&self) -> &[TokenType] {
        &self.types
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_alphabet_matches_gpt2_definition() {
        // GPT-2's bytes_to_unicode, written out the way the original does it.
        let mut bs: Vec<u32> = (b'!' as u32..=b'~' as u32)
            .chain(0xa1..=0xac)
            .chain(0xae..=0xff)
            .collect();
        let mut cs = bs.clone();
        let mut n = 0;
        for b in 0..256u32 {
            if !bs.contains(&b) {
                bs.push(b);
                cs.push(256 + n);
                n += 1;
            }
        }
        for (b, c) in bs.iter().zip(&cs) {
            let ch = char::from_u32(*c).unwrap();
            assert_eq!(byte_to_char(*b as u8), ch);
            assert_eq!(char_to_byte(ch), Some(*b as u8));
        }
        assert_eq!(byte_to_char(b' '), 'Ġ');
        assert_eq!(byte_to_char(b'\n'), 'Ċ');
        assert_eq!(char_to_byte(' '), None);
        assert_eq!(char_to_byte('\u{144}'), None);
    }
}
