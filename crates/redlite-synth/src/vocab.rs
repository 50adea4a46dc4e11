//! A small byte-level BPE vocabulary trained at run time on a built-in text,
//! so synthetic models tokenize real text like the real Qwen vocabulary does
//! (same GPT-2 byte mapping, same `qwen2` pre-tokenizer name, same special
//! tokens), only with far fewer merges.

use std::collections::HashMap;

/// Special tokens appended after the BPE tokens, as in Qwen3-Coder.
/// (text, GGUF token type: 3 = control, 4 = user-defined)
pub const SPECIAL_TOKENS: &[(&str, i32)] = &[
    ("<|endoftext|>", 3),
    ("<|im_start|>", 3),
    ("<|im_end|>", 3),
    ("<tool_call>", 4),
    ("</tool_call>", 4),
    ("<think>", 4),
    ("</think>", 4),
    ("<tool_response>", 4),
    ("</tool_response>", 4),
    ("<|fim_prefix|>", 3),
    ("<|fim_middle|>", 3),
    ("<|fim_suffix|>", 3),
    ("<|fim_pad|>", 3),
    ("<|repo_name|>", 3),
    ("<|file_sep|>", 3),
];

/// Text the merges are learnt from: a little Python and English.
const CORPUS: &str = r#"
def fibonacci(n):
    """Return the n-th Fibonacci number."""
    if n < 2:
        return n
    a, b = 0, 1
    for _ in range(n - 1):
        a, b = b, a + b
    return b

class Stack:
    def __init__(self):
        self.items = []

    def push(self, item):
        self.items.append(item)

    def pop(self):
        if not self.items:
            raise IndexError("pop from an empty stack")
        return self.items.pop()

def read_file(path):
    with open(path, "r", encoding="utf-8") as f:
        return f.read()

import os
import sys

def main(argv):
    for name in argv[1:]:
        if os.path.exists(name):
            print(name, len(read_file(name)))
        else:
            print("missing:", name, file=sys.stderr)
    return 0

if __name__ == "__main__":
    sys.exit(main(sys.argv))

fn main() {
    let args: Vec<String> = std::env::args().collect();
    for (i, arg) in args.iter().enumerate() {
        println!("{i}: {arg}");
    }
}

The quick brown fox jumps over the lazy dog. This function returns the value of the
item at the given index, and raises an error when the index is out of range. Write a
program that reads a file and prints the number of lines, words and characters in it.
"#;

/// GPT-2's reversible byte -> printable char mapping.
pub fn byte_to_char() -> [char; 256] {
    let mut map = ['\0'; 256];
    let mut n = 0u32;
    for b in 0..256u32 {
        let printable =
            (33..=126).contains(&b) || (161..=172).contains(&b) || (174..=255).contains(&b);
        map[b as usize] = if printable {
            char::from_u32(b).unwrap_or('?')
        } else {
            let c = char::from_u32(256 + n).unwrap_or('?');
            n += 1;
            c
        };
    }
    map
}

/// Split text into words the way the qwen2 pre-tokenizer roughly does:
/// an optional leading space or punctuation run, then letters / digits.
fn words(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut prev_alpha = false;
    for ch in text.chars() {
        let alpha = ch.is_alphanumeric() || ch == '_';
        let boundary = ch == ' ' || ch == '\n' || (alpha != prev_alpha && !cur.ends_with(' '));
        if boundary && !cur.is_empty() {
            out.push(std::mem::take(&mut cur));
        }
        cur.push(ch);
        prev_alpha = alpha;
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// The vocabulary: tokens (byte-level strings), token types and merges.
pub struct Vocab {
    pub tokens: Vec<String>,
    pub token_types: Vec<i32>,
    pub merges: Vec<String>,
}

impl Vocab {
    pub fn id(&self, text: &str) -> Option<u32> {
        self.tokens.iter().position(|t| t == text).map(|i| i as u32)
    }
}

/// Train `n_merges` BPE merges on the built-in corpus.
pub fn train(n_merges: usize) -> Vocab {
    let map = byte_to_char();
    let mut tokens: Vec<String> = map.iter().map(|c| c.to_string()).collect();
    // Word -> count, each word as a sequence of symbols.
    let mut counts: HashMap<Vec<String>, usize> = HashMap::new();
    for w in words(CORPUS) {
        let syms: Vec<String> = w.bytes().map(|b| map[b as usize].to_string()).collect();
        *counts.entry(syms).or_insert(0) += 1;
    }
    let mut words: Vec<(Vec<String>, usize)> = counts.into_iter().collect();
    words.sort();
    let mut merges = Vec::new();
    for _ in 0..n_merges {
        let mut pairs: HashMap<(String, String), usize> = HashMap::new();
        for (syms, c) in &words {
            for p in syms.windows(2) {
                *pairs.entry((p[0].clone(), p[1].clone())).or_insert(0) += c;
            }
        }
        // Most frequent pair; ties broken by the pair itself for determinism.
        let Some(((a, b), n)) = pairs
            .into_iter()
            .max_by(|x, y| x.1.cmp(&y.1).then_with(|| y.0.cmp(&x.0)))
        else {
            break;
        };
        if n < 1 {
            break;
        }
        let joined = format!("{a}{b}");
        for (syms, _) in &mut words {
            let mut i = 0;
            while i + 1 < syms.len() {
                if syms[i] == a && syms[i + 1] == b {
                    syms[i] = joined.clone();
                    syms.remove(i + 1);
                }
                i += 1;
            }
        }
        merges.push(format!("{a} {b}"));
        // Two merge paths can build the same string; the vocabulary holds it once.
        if !tokens.contains(&joined) {
            tokens.push(joined);
        }
    }
    let mut token_types = vec![1; tokens.len()];
    for (t, ty) in SPECIAL_TOKENS {
        tokens.push((*t).to_string());
        token_types.push(*ty);
    }
    Vocab {
        tokens,
        token_types,
        merges,
    }
}
