//! The tiny fixture tokenizer: `tiny-encodings.json` holds llama.cpp's ids for
//! 45 texts with special-token parsing off (`ids`) and on
//! (`ids_parse_special`), using the vocab embedded in `tiny-s-bf16.gguf`.

use redlite_gguf::GgufFile;
use redlite_tokenizer::{TokenType, Tokenizer};
use serde_json::Value;

fn load() -> Tokenizer {
    let gguf = GgufFile::open(redlite_testkit::fixture("tiny-s-bf16.gguf")).unwrap();
    Tokenizer::from_gguf(&gguf).unwrap()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

#[test]
fn tiny_encodings_match_llamacpp() {
    let tok = load();
    assert_eq!(tok.n_vocab(), 1024);
    let raw =
        std::fs::read_to_string(redlite_testkit::fixture("tokenizer/tiny-encodings.json")).unwrap();
    let cases: Vec<Value> = serde_json::from_str(&raw).unwrap();
    assert_eq!(cases.len(), 45);
    let mut failures = Vec::new();
    let mut n_differ = 0;
    for c in &cases {
        let text = c["text"].as_str().unwrap();
        let want_plain = ids(&c["ids"]);
        let want_special = ids(&c["ids_parse_special"]);
        n_differ += usize::from(want_plain != want_special);
        let got_plain = tok.encode(text, false);
        let got_special = tok.encode(text, true);
        if got_plain != want_plain {
            failures.push(format!(
                "plain {text:?}\n  want {want_plain:?}\n  got  {got_plain:?}"
            ));
        }
        if got_special != want_special {
            failures.push(format!(
                "special {text:?}\n  want {want_special:?}\n  got  {got_special:?}"
            ));
        }
        assert_eq!(tok.decode(&want_plain).unwrap(), text);
        assert_eq!(tok.decode(&want_special).unwrap(), text);
    }
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
    // The fixture exercises special parsing.
    assert!(n_differ > 0);
}

#[test]
fn tiny_metadata() {
    let tok = load();
    assert_eq!(tok.eos_id(), Some(1011));
    assert_eq!(tok.bos_id(), Some(1009));
    assert_eq!(tok.pad_id(), Some(1009));
    assert!(!tok.add_bos());
    assert_eq!(tok.tokenize("x", true, false), tok.encode("x", false));
    assert_eq!(tok.token_type(1010), Some(TokenType::Control));
    assert_eq!(tok.token_type(1012), Some(TokenType::UserDefined));
    assert_eq!(tok.token_id("<tool_call>"), Some(1012));
    assert!(tok.is_eog(1011) && tok.is_eog(1009));
    assert!(!tok.is_eog(1012));
    // USER_DEFINED tags are single tokens with or without special parsing;
    // CONTROL tokens only with it.
    for special in [false, true] {
        let v = tok.encode("<tool_call>\n<function=f>", special);
        assert_eq!(v[0], 1012);
    }
    assert_eq!(tok.encode("<|im_start|>", true), [1010]);
    assert!(tok.encode("<|im_start|>", false).len() > 1);
}

/// The prompts were tokenized by the reference tokenizer (HF `tokenizers`);
/// re-encoding their text must give the same ids.
#[test]
fn prompts_reencode() {
    let tok = load();
    let raw = std::fs::read_to_string(redlite_testkit::fixture("prompts.json")).unwrap();
    let prompts: serde_json::Map<String, Value> = serde_json::from_str(&raw).unwrap();
    for (name, p) in &prompts {
        let want = ids(&p["ids"]);
        let text = p["text"].as_str().unwrap();
        assert_eq!(tok.decode(&want).unwrap(), text, "{name}");
        assert_eq!(tok.encode(text, true), want, "{name}");
    }
}
