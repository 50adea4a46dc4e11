//! llama.cpp's own tokenizer test (`test-tokenizer-0`) for the Qwen2 vocab:
//! every input of `ggml-vocab-qwen2.gguf.inp` must encode to the ids of the
//! matching line of `.out` (no BOS, special-token parsing off).

use redlite_gguf::GgufFile;
use redlite_tokenizer::Tokenizer;

/// Inputs are separated by `\n__ggml_vocab_test__\n`; the file ends with one.
fn read_inputs(raw: &str) -> Vec<&str> {
    let sep = "\n__ggml_vocab_test__\n";
    let mut out = Vec::new();
    let mut rest = raw;
    while !rest.is_empty() {
        match rest.find(sep) {
            Some(p) => {
                out.push(&rest[..p]);
                rest = &rest[p + sep.len()..];
            }
            None => {
                out.push(rest);
                break;
            }
        }
    }
    out
}

fn load() -> Tokenizer {
    let path = redlite_testkit::fixture("tokenizer/ggml-vocab-qwen2.gguf");
    let gguf = GgufFile::open(&path).expect("open the qwen2 vocab");
    Tokenizer::from_gguf(&gguf).expect("build the qwen2 tokenizer")
}

#[test]
fn qwen2_vocab_matches_llamacpp_test_tokenizer_0() {
    let dir = redlite_testkit::fixtures_dir().join("tokenizer");
    let inp = std::fs::read_to_string(dir.join("ggml-vocab-qwen2.gguf.inp")).unwrap();
    let out = std::fs::read_to_string(dir.join("ggml-vocab-qwen2.gguf.out")).unwrap();
    let texts = read_inputs(&inp);
    let expected: Vec<Vec<u32>> = out
        .lines()
        .map(|l| l.split_whitespace().map(|t| t.parse().unwrap()).collect())
        .collect();
    assert_eq!(texts.len(), expected.len(), "inputs vs expected lines");
    assert!(texts.len() >= 40);

    let tok = load();
    assert_eq!(tok.n_vocab(), 151936);
    assert_eq!(tok.pre_name(), "qwen2");
    assert!(!tok.add_bos());
    let mut failures = Vec::new();
    for (text, want) in texts.iter().zip(&expected) {
        let got = tok.tokenize(text, false, false);
        if &got != want {
            failures.push(format!("{text:?}\n  want {want:?}\n  got  {got:?}"));
        }
        // Decoding gives the text back.
        assert_eq!(tok.decode(&got).unwrap(), *text);
    }
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn qwen2_special_tokens() {
    let tok = load();
    let im_start = tok.token_id("<|im_start|>").unwrap();
    let im_end = tok.token_id("<|im_end|>").unwrap();
    assert_eq!((im_start, im_end), (151644, 151645));
    assert_eq!(tok.eos_id(), Some(151643));
    assert!(tok.is_eog(151643) && tok.is_eog(im_end));
    assert!(!tok.is_eog(im_start));
    // With special parsing the control tokens are single ids; without, text.
    let text = "<|im_start|>user\nhi<|im_end|>";
    let on = tok.encode(text, true);
    assert_eq!(on.first(), Some(&im_start));
    assert_eq!(on.last(), Some(&im_end));
    assert_eq!(
        &on[1..on.len() - 1],
        tok.encode("user\nhi", false).as_slice()
    );
    let off = tok.encode(text, false);
    assert!(!off.contains(&im_start) && !off.contains(&im_end));
    assert_eq!(tok.decode(&off).unwrap(), text);
    assert_eq!(tok.decode(&on).unwrap(), text);
    // USER_DEFINED tokens ([PAD...] here) are matched even with parsing off.
    let pad = tok.token_id("[PAD151646]").unwrap();
    assert_eq!(tok.encode("a[PAD151646]b", false)[1], pad);
}

#[test]
fn errors_name_the_key() {
    use redlite_gguf::{GgufWriter, MetaArray};
    let dir = std::env::temp_dir().join(format!("redlite-tok-err-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    type Fill = Box<dyn Fn(&mut GgufWriter)>;
    let cases: Vec<(&str, Fill)> = vec![
        (
            "tokenizer.ggml.model",
            Box::new(|w: &mut GgufWriter| w.add_str("tokenizer.ggml.model", "llama")),
        ),
        (
            "tokenizer.ggml.tokens",
            Box::new(|w: &mut GgufWriter| w.add_str("tokenizer.ggml.model", "gpt2")),
        ),
        (
            "tokenizer.ggml.pre",
            Box::new(|w: &mut GgufWriter| {
                w.add_str("tokenizer.ggml.model", "gpt2");
                w.add_str("tokenizer.ggml.pre", "no-such-pre");
            }),
        ),
        (
            "tokenizer.ggml.token_type",
            Box::new(|w: &mut GgufWriter| {
                w.add_str("tokenizer.ggml.model", "gpt2");
                w.add_array(
                    "tokenizer.ggml.tokens",
                    MetaArray::String(vec!["a".into(), "b".into()]),
                );
                w.add_array("tokenizer.ggml.token_type", MetaArray::I32(vec![1]));
            }),
        ),
        (
            "tokenizer.ggml.merges",
            Box::new(|w: &mut GgufWriter| {
                w.add_str("tokenizer.ggml.model", "gpt2");
                w.add_array(
                    "tokenizer.ggml.tokens",
                    MetaArray::String(vec!["a".into(), "b".into()]),
                );
                w.add_array(
                    "tokenizer.ggml.merges",
                    MetaArray::String(vec!["ab".into()]),
                );
            }),
        ),
        (
            "tokenizer.ggml.eos_token_id",
            Box::new(|w: &mut GgufWriter| {
                w.add_str("tokenizer.ggml.model", "gpt2");
                w.add_array(
                    "tokenizer.ggml.tokens",
                    MetaArray::String(vec!["a".into(), "b".into()]),
                );
                w.add_array(
                    "tokenizer.ggml.merges",
                    MetaArray::String(vec!["a b".into()]),
                );
                w.add_u32("tokenizer.ggml.eos_token_id", 7);
            }),
        ),
    ];
    for (i, (key, fill)) in cases.iter().enumerate() {
        let mut w = GgufWriter::new();
        w.add_str("general.architecture", "qwen3next");
        fill(&mut w);
        let path = dir.join(format!("case{i}.gguf"));
        w.write_to_path(&path).unwrap();
        let gguf = GgufFile::open(&path).unwrap();
        let err = match Tokenizer::from_gguf(&gguf) {
            Ok(_) => panic!("case {key}: expected an error"),
            Err(e) => e.to_string(),
        };
        assert!(
            err.contains(key),
            "case {key}: error {err:?} does not name the key"
        );
    }
    std::fs::remove_dir_all(&dir).ok();
}
