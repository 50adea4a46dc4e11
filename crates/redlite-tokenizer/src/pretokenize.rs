//! Pre-tokenizers: split text into the words BPE works on.
//!
//! Each split is a hand-written scanner equivalent to the regex named by
//! `tokenizer.ggml.pre`, following llama.cpp's own scanners
//! (`unicode_regex_split_custom_*`) so that the words, and therefore the ids,
//! are the same:
//!
//! * `qwen2`:  `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
//! * `llama3`: the same with `\p{N}{1,3}`;
//! * `gpt2`:   `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`.
//!
//! `\s` is the Unicode White_Space property, `\p{L}` / `\p{N}` the letter and
//! number general categories; the contractions are ASCII case-insensitive.

use unicode_general_category::{get_general_category, GeneralCategory as G};

/// The character classes the regexes distinguish.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum CharClass {
    Other = 0,
    Letter = 1,
    Number = 2,
    Space = 3,
}

static ASCII_CLASS: [CharClass; 128] = build_ascii();

const fn build_ascii() -> [CharClass; 128] {
    let mut t = [CharClass::Other; 128];
    let mut i = 0;
    while i < 128 {
        let c = i as u8;
        t[i] = if c.is_ascii_alphabetic() {
            CharClass::Letter
        } else if c.is_ascii_digit() {
            CharClass::Number
        } else if (c >= 0x09 && c <= 0x0d) || c == b' ' {
            CharClass::Space
        } else {
            CharClass::Other
        };
        i += 1;
    }
    t
}

/// The class of one character.
#[inline]
pub fn classify(c: char) -> CharClass {
    let u = c as u32;
    if u < 128 {
        return ASCII_CLASS[u as usize];
    }
    classify_slow(c)
}

fn classify_slow(c: char) -> CharClass {
    // White_Space takes precedence over the general category (U+0085 is Cc,
    // U+00A0 is Zs: both count as \s).
    if c.is_whitespace() {
        return CharClass::Space;
    }
    match get_general_category(c) {
        G::UppercaseLetter
        | G::LowercaseLetter
        | G::TitlecaseLetter
        | G::ModifierLetter
        | G::OtherLetter => CharClass::Letter,
        G::DecimalNumber | G::LetterNumber | G::OtherNumber => CharClass::Number,
        _ => CharClass::Other,
    }
}

/// Which split rule to use (from `tokenizer.ggml.pre`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PreTokenizer {
    /// Qwen2 / Qwen3 / Qwen3-Next: one digit per word.
    Qwen2,
    /// Llama 3: up to three digits per word.
    Llama3,
    /// GPT-2.
    Gpt2,
}

impl PreTokenizer {
    /// Map a `tokenizer.ggml.pre` name to a split rule (the names llama.cpp
    /// maps to the same regexes).
    pub fn from_name(name: &str) -> Option<PreTokenizer> {
        Some(match name {
            "qwen2" | "deepseek-r1-qwen" | "stablelm2" | "hunyuan" | "megrez" => {
                PreTokenizer::Qwen2
            }
            "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "pixtral" => PreTokenizer::Llama3,
            "gpt-2" | "gpt2" | "phi-2" | "jina-es" | "jina-de" | "jina-v2-es" | "jina-v2-de" => {
                PreTokenizer::Gpt2
            }
            _ => return None,
        })
    }

    /// Split `text` into words, calling `f` with each (in order; their
    /// concatenation is `text`).
    pub fn split<'a>(self, text: &'a str, f: impl FnMut(&'a str)) {
        let mut sc = Scanner::new(text);
        match self {
            PreTokenizer::Qwen2 => sc.run_llama3_like(1, f),
            PreTokenizer::Llama3 => sc.run_llama3_like(3, f),
            PreTokenizer::Gpt2 => sc.run_gpt2(f),
        }
    }

    /// The words of `text` as a vector (convenience for tests and tools).
    pub fn words(self, text: &str) -> Vec<&str> {
        let mut v = Vec::new();
        self.split(text, |w| v.push(w));
        v
    }
}

/// Characters of the text with their byte offsets and classes.
struct Scanner<'a> {
    text: &'a str,
    /// Byte offset of each character, plus the text length at the end.
    offs: Vec<u32>,
    cpts: Vec<char>,
    cls: Vec<CharClass>,
}

/// Sentinel for positions past the end (matches no class).
const OUT: char = '\u{10FFFF}';

impl<'a> Scanner<'a> {
    fn new(text: &'a str) -> Scanner<'a> {
        let n = text.len();
        let mut offs = Vec::with_capacity(n + 1);
        let mut cpts = Vec::with_capacity(n);
        let mut cls = Vec::with_capacity(n);
        for (i, c) in text.char_indices() {
            offs.push(i as u32);
            cpts.push(c);
            cls.push(classify(c));
        }
        offs.push(n as u32);
        Scanner {
            text,
            offs,
            cpts,
            cls,
        }
    }

    #[inline]
    fn n(&self) -> usize {
        self.cpts.len()
    }

    #[inline]
    fn cpt(&self, pos: usize) -> char {
        self.cpts.get(pos).copied().unwrap_or(OUT)
    }

    #[inline]
    fn is(&self, pos: usize, c: CharClass) -> bool {
        self.cls.get(pos) == Some(&c)
    }

    #[inline]
    fn word(&self, a: usize, b: usize) -> &'a str {
        &self.text[self.offs[a] as usize..self.offs[b] as usize]
    }

    /// Length of an ASCII-case-insensitive contraction (`'s`, `'re`, ...)
    /// starting at `pos`, or 0.
    #[inline]
    fn contraction(&self, pos: usize, case_insensitive: bool) -> usize {
        if self.cpt(pos) != '\'' {
            return 0;
        }
        let low = |c: char| {
            if case_insensitive {
                c.to_ascii_lowercase()
            } else {
                c
            }
        };
        let c1 = low(self.cpt(pos + 1));
        if matches!(c1, 's' | 't' | 'm' | 'd') {
            return 2;
        }
        let c2 = low(self.cpt(pos + 2));
        if matches!((c1, c2), ('r', 'e') | ('v', 'e') | ('l', 'l')) {
            return 3;
        }
        0
    }

    /// `(?i:'s|...)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,max_digits}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
    fn run_llama3_like(&mut self, max_digits: usize, mut f: impl FnMut(&'a str)) {
        use CharClass::*;
        let n = self.n();
        let mut pos = 0usize;
        while pos < n {
            let start = pos;
            let c = self.cpts[pos];
            let cl = self.cls[pos];

            let k = self.contraction(pos, true);
            if k > 0 {
                pos += k;
                f(self.word(start, pos));
                continue;
            }

            // [^\r\n\p{L}\p{N}]?\p{L}+
            if !(c == '\r' || c == '\n' || cl == Number)
                && (cl == Letter || self.is(pos + 1, Letter))
            {
                pos += 1;
                while self.is(pos, Letter) {
                    pos += 1;
                }
                f(self.word(start, pos));
                continue;
            }

            // \p{N}{1,max_digits}
            if cl == Number {
                let mut ini = pos;
                while self.is(pos, Number) {
                    pos += 1;
                    if pos - ini >= max_digits {
                        f(self.word(ini, pos));
                        ini = pos;
                    }
                }
                if pos > ini {
                    f(self.word(ini, pos));
                }
                continue;
            }

            // <space>?[^\s\p{L}\p{N}]+[\r\n]*
            let p1 = if c == ' ' { pos + 1 } else { pos };
            if self.is(p1, Other) {
                pos = p1;
                while self.is(pos, Other) {
                    pos += 1;
                }
                while matches!(self.cpt(pos), '\r' | '\n') {
                    pos += 1;
                }
                f(self.word(start, pos));
                continue;
            }

            let mut n_ws = 0usize;
            let mut last_crlf_end = 0usize;
            while self.is(pos + n_ws, Space) {
                if matches!(self.cpts[pos + n_ws], '\r' | '\n') {
                    last_crlf_end = pos + n_ws + 1;
                }
                n_ws += 1;
            }
            // \s*[\r\n]+
            if last_crlf_end > 0 {
                pos = last_crlf_end;
                f(self.word(start, pos));
                continue;
            }
            // \s+(?!\S)
            if n_ws > 1 && pos + n_ws < n {
                pos += n_ws - 1;
                f(self.word(start, pos));
                continue;
            }
            // \s+
            if n_ws > 0 {
                pos += n_ws;
                f(self.word(start, pos));
                continue;
            }
            // No alternative matched (cannot happen: every class is covered).
            pos += 1;
            f(self.word(start, pos));
        }
    }

    /// `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
    fn run_gpt2(&mut self, mut f: impl FnMut(&'a str)) {
        use CharClass::*;
        let n = self.n();
        let mut pos = 0usize;
        while pos < n {
            let start = pos;
            let c = self.cpts[pos];
            let k = self.contraction(pos, false);
            if k > 0 {
                pos += k;
                f(self.word(start, pos));
                continue;
            }
            let p1 = if c == ' ' { pos + 1 } else { pos };
            let mut matched = false;
            for class in [Letter, Number, Other] {
                if self.is(p1, class) {
                    pos = p1;
                    while self.is(pos, class) {
                        pos += 1;
                    }
                    f(self.word(start, pos));
                    matched = true;
                    break;
                }
            }
            if matched {
                continue;
            }
            let mut n_ws = 0usize;
            while self.is(pos + n_ws, Space) {
                n_ws += 1;
            }
            if n_ws > 1 && pos + n_ws < n {
                pos += n_ws - 1;
            } else if n_ws > 0 {
                pos += n_ws;
            } else {
                pos += 1;
            }
            f(self.word(start, pos));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_follow_unicode_categories() {
        assert_eq!(classify('a'), CharClass::Letter);
        assert_eq!(classify('Ä'), CharClass::Letter);
        assert_eq!(classify('中'), CharClass::Letter);
        assert_eq!(classify('7'), CharClass::Number);
        assert_eq!(classify('½'), CharClass::Number); // No
        assert_eq!(classify('Ⅻ'), CharClass::Number); // Nl
        assert_eq!(classify('\u{301}'), CharClass::Other); // combining mark
        assert_eq!(classify('\u{a0}'), CharClass::Space);
        assert_eq!(classify('\u{85}'), CharClass::Space);
        assert_eq!(classify('\u{3000}'), CharClass::Space);
        assert_eq!(classify('\u{1c}'), CharClass::Other);
        assert_eq!(classify('\u{200b}'), CharClass::Other); // Cf, not White_Space
        assert_eq!(classify('_'), CharClass::Other);
        // Compare the ASCII table with the slow path.
        for b in 0u8..128 {
            let c = b as char;
            assert_eq!(classify(c), classify_slow(c), "{b:#x}");
        }
    }

    #[test]
    fn qwen2_splits_like_the_regex() {
        let w = PreTokenizer::Qwen2.words("Hello world's  12,345 \n\n  x\tfoo()\r\n  ");
        assert_eq!(
            w,
            [
                "Hello", " world", "'s", " ", " ", "1", "2", ",", "3", "4", "5", " \n\n", " ",
                " x", "\tfoo", "()\r\n", "  "
            ]
        );
        let w = PreTokenizer::Llama3.words("12345 I'LL");
        assert_eq!(w, ["123", "45", " I", "'LL"]);
        let w = PreTokenizer::Gpt2.words("I'LL  go 123!!");
        assert_eq!(w, ["I", "'", "LL", " ", " go", " 123", "!!"]);
    }
}
