//! Grammars over the real vocabulary (the tiny fixtures carry Qwen3's):
//! text the chat template would write is accepted token by token, random
//! walks through the masks always give text the tool-call parser and JSON
//! read back as valid, and bad schemas or grammars are refused by name.

use std::sync::Arc;

use redlite_chat::toolcall::{ParserOptions, ToolCallParser};
use redlite_gguf::GgufFile;
use redlite_grammar::{GrammarEnv, GrammarMatcher, GrammarSpec, ToolSpec};
use redlite_tokenizer::Tokenizer;
use serde_json::{json, Value};

fn env() -> (Arc<Tokenizer>, GrammarEnv) {
    env_of("tiny-s-Q8_0.gguf")
}

fn env_of(name: &str) -> (Arc<Tokenizer>, GrammarEnv) {
    let g = GgufFile::open(redlite_testkit::fixture(name)).expect("fixture");
    let tok = Arc::new(Tokenizer::from_gguf(&g).expect("tokenizer"));
    let eog = tok.eog_ids().to_vec();
    let n = tok.n_vocab();
    let env = GrammarEnv::new(tok.clone(), &eog, n).expect("grammar env");
    (tok, env)
}

fn allowed(mask: &[u32], t: u32) -> bool {
    mask.get(t as usize / 32)
        .is_some_and(|w| w >> (t % 32) & 1 == 1)
}

/// A small seeded generator (xorshift).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Walk the grammar choosing allowed tokens at random (an end token as soon
/// as one is allowed and a coin says so); returns the tokens before the end.
fn walk(m: &mut GrammarMatcher, tok: &Tokenizer, seed: u64, limit: usize) -> Option<Vec<u32>> {
    let mut rng = Rng(seed | 1);
    let mut out = Vec::new();
    let mut mask = Vec::new();
    for _ in 0..limit {
        m.mask(&mut mask).expect("mask");
        let ids: Vec<u32> = (0..(mask.len() * 32) as u32)
            .filter(|&t| allowed(&mask, t))
            .collect();
        assert!(!ids.is_empty(), "a mask allows nothing");
        let eog: Vec<u32> = ids.iter().copied().filter(|&t| tok.is_eog(t)).collect();
        if !eog.is_empty() && (eog.len() == ids.len() || rng.next().is_multiple_of(2)) {
            return Some(out);
        }
        let pick = ids[(rng.next() % ids.len() as u64) as usize];
        if tok.is_eog(pick) {
            return Some(out);
        }
        m.consume(pick).expect("consume an allowed token");
        out.push(pick);
    }
    None
}

fn tools() -> Vec<Value> {
    vec![
        json!({"type": "function", "function": {"name": "read", "parameters": {"type": "object",
            "properties": {"path": {"type": "string", "maxLength": 12},
                           "limit": {"type": "integer", "minimum": 0, "maximum": 99},
                           "mode": {"type": "string", "enum": ["text", "hex"]},
                           "ratio": {"type": "number"},
                           "big": {"type": "array", "items": {"type": "integer"}},
                           "follow": {"type": "boolean"},
                           "tags": {"type": "array", "items": {"type": "integer"}, "maxItems": 3},
                           "opts": {"type": "object", "properties": {"a": {"type": "boolean"}},
                                    "required": ["a"], "additionalProperties": false},
                           "note": {"type": ["string", "null"], "maxLength": 5}},
            "required": ["path", "limit"]}}}),
        json!({"type": "function", "function": {"name": "ls", "parameters": {"type": "object", "properties": {}}}}),
    ]
}

fn specs(tools: &[Value]) -> Vec<ToolSpec> {
    tools
        .iter()
        .map(|t| ToolSpec {
            name: t["function"]["name"].as_str().unwrap_or_default().into(),
            parameters: t["function"]["parameters"].clone(),
        })
        .collect()
}

#[test]
fn template_written_calls_are_accepted_token_by_token() {
    let (tok, env) = env();
    let g = env
        .compile(&GrammarSpec::ToolCalls {
            tools: specs(&tools()),
            parallel: true,
        })
        .expect("compile");
    let text = "<tool_call>\n<function=read>\n<parameter=path>\nsrc/a.rs\n</parameter>\n<parameter=limit>\n40\n</parameter>\n<parameter=tags>\n[1, 2]\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=ls>\n</function>\n</tool_call>";
    let ids = tok.tokenize(text, false, true);
    // `<tool_call>` is one USER_DEFINED token, as the model writes it.
    assert_eq!(Some(ids[0]), tok.token_id("<tool_call>"));
    let mut m = g.matcher().expect("matcher");
    let ok = m.validate(&ids).expect("validate");
    let pieces: Vec<_> = ids
        .iter()
        .map(|&t| tok.token_text(t).unwrap_or("?").to_string())
        .collect();
    assert_eq!(ok, ids.len(), "{pieces:?}");
    let mut mask = Vec::new();
    for &t in &ids {
        m.mask(&mut mask).expect("mask");
        assert!(
            allowed(&mask, t),
            "token {t} ({:?}) refused",
            tok.token_text(t)
        );
        m.consume(t).expect("consume");
    }
    m.mask(&mut mask).expect("mask");
    assert!(
        tok.eog_ids().iter().any(|&e| allowed(&mask, e)),
        "cannot end after the calls"
    );

    // Not allowed: an undeclared tool, a missing required parameter, a
    // string value containing a closing tag, prose before the call.
    for bad in [
        "<tool_call>\n<function=rm>\n",
        "<tool_call>\n<function=read>\n<parameter=limit>\n",
        "<tool_call>\n<function=read>\n<parameter=path>\na</function>",
        "Sure.\n<tool_call>",
    ] {
        let ids = tok.tokenize(bad, false, true);
        let mut m = g.matcher().expect("matcher");
        assert!(
            m.validate(&ids).expect("validate") < ids.len(),
            "accepted: {bad:?}"
        );
    }
}

#[test]
fn random_walks_give_calls_that_parse_and_match_the_schema() {
    let (tok, env) = env();
    let tools = tools();
    for parallel in [false, true] {
        let g = env
            .compile(&GrammarSpec::ToolCalls {
                tools: specs(&tools),
                parallel,
            })
            .expect("compile");
        for seed in 0..40u64 {
            let mut m = g.matcher().expect("matcher");
            let ids = walk(&mut m, &tok, seed * 7919 + 1, 400).expect("the walk ends");
            let text = tok.decode(&ids).expect("decode");
            let mut p = ToolCallParser::new(&tools, ParserOptions::default());
            p.push(&text);
            p.finish();
            let msg = p.message();
            assert!(!msg.tool_calls.is_empty(), "no call parsed from {text:?}");
            assert!(
                msg.content.is_empty(),
                "content {:?} from {text:?}",
                msg.content
            );
            if !parallel {
                assert_eq!(msg.tool_calls.len(), 1, "{text:?}");
            }
            for c in &msg.tool_calls {
                let args: Value = serde_json::from_str(&c.arguments).expect("arguments");
                if c.name == "read" {
                    let path = args["path"].as_str().expect("path is a string");
                    assert!(path.chars().count() <= 12, "{text:?}");
                    let limit = args["limit"].as_i64().expect("limit is an integer");
                    assert!((0..=99).contains(&limit), "{text:?}");
                    if let Some(mode) = args.get("mode") {
                        assert!(mode == "text" || mode == "hex", "{text:?}");
                    }
                    if let Some(f) = args.get("follow") {
                        assert!(f.is_boolean(), "{text:?}");
                    }
                    if let Some(r) = args.get("ratio") {
                        assert!(r.is_number(), "{text:?}");
                    }
                    if let Some(b) = args.get("big") {
                        let b = b.as_array().expect("big is an array");
                        assert!(b.iter().all(Value::is_i64), "{text:?}");
                    }
                    if let Some(t) = args.get("tags") {
                        let t = t.as_array().expect("tags is an array");
                        assert!(t.len() <= 3 && t.iter().all(Value::is_i64), "{text:?}");
                    }
                    if let Some(o) = args.get("opts") {
                        assert!(
                            o["a"].is_boolean() && o.as_object().map(|o| o.len()) == Some(1),
                            "{text:?}"
                        );
                    }
                    if let Some(n) = args.get("note") {
                        assert!(
                            n.is_null() || n.as_str().is_some_and(|s| s.chars().count() <= 5),
                            "{text:?}"
                        );
                    }
                } else {
                    assert_eq!(c.name, "ls");
                    assert_eq!(args, json!({}));
                }
            }
        }
    }
}

#[test]
fn json_schema_and_gbnf_walks_end_in_valid_output() {
    let (tok, env) = env();
    let schema = json!({"type": "object", "properties": {
        "n": {"type": "integer"}, "ok": {"type": "boolean"},
        "s": {"type": "string", "maxLength": 4}}, "required": ["n", "ok", "s"],
        "additionalProperties": false});
    let g = env
        .compile(&GrammarSpec::JsonSchema(schema))
        .expect("compile");
    for seed in 0..8 {
        let mut m = g.matcher().expect("matcher");
        let ids = walk(&mut m, &tok, seed + 3, 300).expect("ends");
        let v: Value = serde_json::from_str(&tok.decode(&ids).expect("decode")).expect("json");
        assert!(v["n"].is_i64() && v["ok"].is_boolean(), "{v}");
        assert!(
            v["s"].as_str().is_some_and(|s| s.chars().count() <= 4),
            "{v}"
        );
    }
    let g = env
        .compile(&GrammarSpec::Gbnf(
            "root ::= (\"yes\" | \"no\") \" \" [0-9]{2}\n".into(),
        ))
        .expect("gbnf");
    for seed in 0..8 {
        let mut m = g.matcher().expect("matcher");
        let ids = walk(&mut m, &tok, seed + 5, 50).expect("ends");
        let s = tok.decode(&ids).expect("decode");
        let (w, d) = s.split_once(' ').expect("two words");
        assert!(w == "yes" || w == "no", "{s:?}");
        assert!(
            d.len() == 2 && d.bytes().all(|b| b.is_ascii_digit()),
            "{s:?}"
        );
    }
}

#[test]
fn invalid_constraints_are_refused_with_the_reason() {
    let (_tok, env) = env();
    let e = env
        .compile(&GrammarSpec::JsonSchema(
            json!({"type": "object", "properties": {"a": {"type": "nope"}}}),
        ))
        .err()
        .expect("bad type");
    assert!(e.to_string().contains("nope"), "{e}");
    let e = env
        .compile(&GrammarSpec::Lark("start: foo\n".into()))
        .err()
        .expect("undefined rule");
    assert!(e.to_string().contains("foo"), "{e}");
    let e = env
        .compile(&GrammarSpec::Gbnf("root ::= [".into()))
        .err()
        .expect("bad gbnf");
    assert!(e.to_string().contains("GBNF"), "{e}");
}

/// llama.cpp's Qwen2 vocabulary (151,643 BPE tokens + specials; it has no
/// `<tool_call>` token, so the tags are spelled in pieces): template-written
/// calls pass and random walks parse.
#[test]
fn full_size_vocabulary() {
    let (tok, env) = env_of("tokenizer/ggml-vocab-qwen2.gguf");
    assert!(tok.n_vocab() > 150_000);
    let tools = tools();
    let g = env
        .compile(&GrammarSpec::ToolCalls {
            tools: specs(&tools),
            parallel: false,
        })
        .expect("compile");
    let text = "<tool_call>\n<function=read>\n<parameter=path>\nsrc/a.rs\n</parameter>\n<parameter=limit>\n40\n</parameter>\n<parameter=follow>\ntrue\n</parameter>\n</function>\n</tool_call>";
    let ids = tok.tokenize(text, false, true);
    let mut m = g.matcher().expect("matcher");
    assert_eq!(m.validate(&ids).expect("validate"), ids.len());
    for seed in 0..6u64 {
        let mut m = g.matcher().expect("matcher");
        let ids = walk(&mut m, &tok, seed * 31 + 7, 400).expect("the walk ends");
        let text = tok.decode(&ids).expect("decode");
        let mut p = ToolCallParser::new(&tools, ParserOptions::default());
        p.push(&text);
        p.finish();
        assert_eq!(p.message().tool_calls.len(), 1, "{text:?}");
    }
}
