//! decode(encode(x)) == x on seeded random Unicode strings and on every
//! fixture text, for both fixture vocabularies; the streaming detokenizer's
//! chunks concatenate to decode() and never split a character.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redlite_gguf::GgufFile;
use redlite_tokenizer::{PreTokenizer, Tokenizer};
use serde_json::Value;

fn load(rel: &str) -> Tokenizer {
    let gguf = GgufFile::open(redlite_testkit::fixture(rel)).unwrap();
    Tokenizer::from_gguf(&gguf).unwrap()
}

fn tiny() -> Tokenizer {
    load("tiny-s-bf16.gguf")
}

fn qwen2() -> Tokenizer {
    load("tokenizer/ggml-vocab-qwen2.gguf")
}

/// Pieces random text is built from: every character class the
/// pre-tokenizer distinguishes, contractions, special-token texts.
const PIECES: &[&str] = &[
    " ",
    "  ",
    "\t",
    "\n",
    "\r\n",
    "\r",
    "\u{a0}",
    "\u{3000}",
    "\u{85}",
    "\u{2028}",
    "\u{b}",
    "'s",
    "'LL",
    "'re",
    "'",
    "\"",
    "(",
    ")",
    "{",
    "}",
    "::",
    "->",
    "==",
    "_",
    "#",
    "$",
    "<|im_start|>",
    "<|im_end|>",
    "<tool_call>",
    "</tool_call>",
    "<think>",
    "<|endoftext|>",
    "<",
    "|",
    ">",
    "<|",
    "|>",
    "e\u{301}",
    "\u{301}",
    "\u{200b}",
    "\u{feff}",
    "\u{0}",
    "\u{1c}",
    "½",
    "Ⅻ",
    "٣",
    "😀",
    "👍🏽",
    "🇫🇷",
    "中文",
    "한국어",
    "Ελληνικά",
    "Привет",
    "עברית",
    "ﷺ",
    "\u{10ffff}",
    "\u{e000}",
];

fn random_char(rng: &mut StdRng) -> char {
    loop {
        let c = match rng.gen_range(0..4) {
            0 => rng.gen_range(0x20..0x7f),
            1 => rng.gen_range(0x80..0x800),
            2 => rng.gen_range(0x800..0x10000),
            _ => rng.gen_range(0x10000..0x110000),
        };
        if let Some(c) = char::from_u32(c) {
            return c;
        }
    }
}

fn random_text(rng: &mut StdRng) -> String {
    let n = rng.gen_range(0..40);
    let mut s = String::new();
    for _ in 0..n {
        match rng.gen_range(0..10) {
            0..=3 => s.push_str(PIECES[rng.gen_range(0..PIECES.len())]),
            4..=6 => {
                for _ in 0..rng.gen_range(1..8) {
                    s.push(rng.gen_range(b'a'..=b'z') as char);
                }
            }
            7 => s.push_str(&rng.gen_range(0..100_000u32).to_string()),
            _ => s.push(random_char(rng)),
        }
    }
    s
}

/// Stream `ids` through the streaming decoder in order.
fn stream(tok: &Tokenizer, ids: &[u32]) -> Vec<String> {
    let mut d = tok.stream_decoder();
    let mut chunks: Vec<String> = ids.iter().map(|&i| d.push(i).unwrap()).collect();
    chunks.push(d.finish());
    chunks
}

fn check_roundtrip(tok: &Tokenizer, text: &str) {
    for parse_special in [false, true] {
        let ids = tok.encode(text, parse_special);
        let back = tok.decode(&ids).unwrap();
        assert_eq!(back, text, "parse_special={parse_special} ids={ids:?}");
        let chunks = stream(tok, &ids);
        assert_eq!(chunks.concat(), back);
        // Valid text never produces a replacement character in a chunk,
        // i.e. no chunk ever split a character.
        if !text.contains('\u{FFFD}') {
            assert!(chunks.iter().all(|c| !c.contains('\u{FFFD}')), "{chunks:?}");
        }
    }
}

#[test]
fn random_unicode_roundtrips() {
    let toks = [tiny(), qwen2()];
    let mut rng = StdRng::seed_from_u64(0x5eed);
    for _ in 0..1500 {
        let text = random_text(&mut rng);
        for tok in &toks {
            check_roundtrip(tok, &text);
        }
        // The pre-tokenizers cover the text exactly.
        for pre in [
            PreTokenizer::Qwen2,
            PreTokenizer::Llama3,
            PreTokenizer::Gpt2,
        ] {
            let words = pre.words(&text);
            assert_eq!(words.concat(), text);
            assert!(words.iter().all(|w| !w.is_empty()));
        }
    }
}

#[test]
fn fixture_texts_roundtrip() {
    let toks = [tiny(), qwen2()];
    let dir = redlite_testkit::fixtures_dir();
    let mut texts: Vec<String> = Vec::new();
    let enc: Vec<Value> = serde_json::from_str(
        &std::fs::read_to_string(dir.join("tokenizer/tiny-encodings.json")).unwrap(),
    )
    .unwrap();
    texts.extend(enc.iter().map(|c| c["text"].as_str().unwrap().to_string()));
    let inp = std::fs::read_to_string(dir.join("tokenizer/ggml-vocab-qwen2.gguf.inp")).unwrap();
    texts.extend(inp.split("\n__ggml_vocab_test__\n").map(str::to_string));
    texts.push(std::fs::read_to_string(dir.join("tokenizer/Qwen3-Coder.jinja")).unwrap());
    let prompts: serde_json::Map<String, Value> =
        serde_json::from_str(&std::fs::read_to_string(dir.join("prompts.json")).unwrap()).unwrap();
    texts.extend(
        prompts
            .values()
            .map(|p| p["text"].as_str().unwrap().to_string()),
    );
    for text in &texts {
        for tok in &toks {
            check_roundtrip(tok, text);
        }
    }
}

/// long32k.json holds 32768 ids of CPython source tokenized by the reference
/// tokenizer: decoding and re-encoding gives them back.
#[test]
fn long32k_reencodes_to_the_same_ids() {
    let tok = tiny();
    let v: Value = serde_json::from_str(
        &std::fs::read_to_string(redlite_testkit::fixture("long32k.json")).unwrap(),
    )
    .unwrap();
    let ids: Vec<u32> = v["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect();
    assert_eq!(ids.len(), 32768);
    let text = tok.decode(&ids).unwrap();
    let again = tok.encode(&text, true);
    let first_diff = ids.iter().zip(&again).position(|(a, b)| a != b);
    assert_eq!(first_diff, None, "first difference at token {first_diff:?}");
    assert_eq!(again.len(), ids.len());
    let chunks = stream(&tok, &ids);
    assert_eq!(chunks.concat(), text);
}

/// Arbitrary id sequences (partial UTF-8 pieces included): the streamed
/// chunks still concatenate to decode().
#[test]
fn random_ids_stream_like_decode() {
    let toks = [tiny(), qwen2()];
    let mut rng = StdRng::seed_from_u64(99);
    for tok in &toks {
        let n = tok.n_vocab() as u32;
        for _ in 0..500 {
            let len = rng.gen_range(0..30);
            let ids: Vec<u32> = (0..len).map(|_| rng.gen_range(0..n)).collect();
            let chunks = stream(tok, &ids);
            assert_eq!(chunks.concat(), tok.decode(&ids).unwrap());
        }
        // Out-of-range ids are errors, not panics.
        assert!(tok.decode(&[n]).is_err());
        assert!(tok.stream_decoder().push(n).is_err());
    }
}

/// An emoji split over byte tokens is held back until complete.
#[test]
fn stream_holds_back_partial_characters() {
    let tok = tiny();
    let ids = tok.encode("a😀b", false);
    assert!(
        ids.len() >= 4,
        "the emoji takes several byte tokens: {ids:?}"
    );
    let chunks = stream(&tok, &ids);
    assert_eq!(chunks.concat(), "a😀b");
    assert!(chunks.iter().any(|c| c.is_empty()));
    assert!(chunks.iter().any(|c| c.contains('😀')));
    // A stream cut inside the character flushes one replacement character.
    let mut d = tok.stream_decoder();
    let mut s = String::new();
    for &i in &ids[..2] {
        s.push_str(&d.push(i).unwrap());
    }
    assert!(d.has_pending());
    s.push_str(&d.finish());
    assert_eq!(s, tok.decode(&ids[..2]).unwrap());
    assert!(s.ends_with('\u{FFFD}'));
}

/// Leaving CONTROL tokens out of the text keeps USER_DEFINED tags, in both
/// the one-shot and the streaming decoder.
#[test]
fn control_tokens_can_be_left_out() {
    let tok = tiny();
    let text = "<|im_start|>assistant\n<tool_call>\nx<|im_end|>";
    let ids = tok.encode(text, true);
    assert!(ids.contains(&1010) && ids.contains(&1011) && ids.contains(&1012));
    let plain = tok.decode_opts(&ids, false).unwrap();
    assert_eq!(plain, "assistant\n<tool_call>\nx");
    let mut d = redlite_tokenizer::StreamDecoder::new(&tok, false);
    let mut s = String::new();
    for &i in &ids {
        s.push_str(&d.push(i).unwrap());
    }
    s.push_str(&d.finish());
    assert_eq!(s, plain);
    assert_eq!(tok.decode(&ids).unwrap(), text);
}
