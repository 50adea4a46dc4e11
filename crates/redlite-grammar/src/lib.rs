//! Constrained decoding: what a request may generate, as a token mask.
//!
//! [`GrammarEnv`] is built once per model from the GGUF vocabulary: a token
//! trie (llguidance's `toktrie`) over every token's bytes, and a parser
//! factory. A request's constraint ([`GrammarSpec`]: a JSON schema, any JSON
//! object, a Lark or GBNF grammar, or the Qwen3-Coder tool-call format over
//! declared tools) is compiled once with [`GrammarEnv::compile`] — which is
//! where an invalid schema or grammar is refused — and each sequence that
//! uses it gets its own [`GrammarMatcher`] ([`Grammar::matcher`]).
//!
//! Tokens in the trie: normal and byte tokens are their bytes; USER_DEFINED
//! tokens (`<tool_call>`, `<function=`…) are their text too, so a grammar
//! that asks for the text `<tool_call>` accepts the single token the model
//! writes as well as the same text spelled in pieces. CONTROL tokens
//! (`<|im_end|>`) are llguidance special tokens (`\xFF` + text): a grammar
//! can name them (`<|im_end|>`, `<[151645]>`) but no text matches them. The
//! end-of-generation tokens are the trie's EOS set: the mask allows them
//! exactly where the grammar may end.

mod gbnf;
mod tools;

use std::sync::Arc;

use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::{self, TokEnv, TokRxInfo, TokTrie, TokenizerEnv};
use llguidance::{Matcher, ParserFactory};
use redlite_tokenizer::{TokenType, Tokenizer};
use serde_json::{json, Value};

pub use gbnf::gbnf_to_lark;
pub use tools::{tool_call_lark, ToolSpec};

/// Why a constraint could not be built or followed.
#[derive(Debug, thiserror::Error)]
pub enum GrammarError {
    /// The vocabulary could not be made into a token trie.
    #[error("token trie: {0}")]
    Vocabulary(String),
    /// The schema, grammar or tool list is invalid; the text names the
    /// problem (and, for grammars, where it is).
    #[error("{0}")]
    Invalid(String),
    /// The matcher failed while decoding (a token it did not allow, or an
    /// internal limit).
    #[error("constraint: {0}")]
    Matcher(String),
}

/// What a request constrains its output to.
#[derive(Clone, Debug)]
pub enum GrammarSpec {
    /// A JSON value valid against this JSON schema.
    JsonSchema(Value),
    /// Any JSON object.
    JsonObject,
    /// llguidance's Lark syntax (with `%json {…}` for JSON-schema values).
    Lark(String),
    /// A llama.cpp GBNF grammar (its `root` rule is the start).
    Gbnf(String),
    /// Qwen3-Coder tool calls over these tools: one call, or with
    /// `parallel` one or more.
    ToolCalls {
        tools: Vec<ToolSpec>,
        parallel: bool,
    },
}

/// Whitespace allowed between JSON tokens: nothing, one space, or one or
/// two newlines and up to 20 spaces or tabs of indentation (as llama.cpp's
/// json-schema-to-grammar allows it). Bounded, so a model cannot fill its
/// budget with blanks.
pub const JSON_WHITESPACE: &str = r"(?: |\n{1,2}[ \t]{0,20})";

/// `schema` with llguidance's JSON options set: bounded whitespace, and
/// `oneOf` read as `anyOf` (which accepts every value `oneOf` does).
pub fn with_json_options(schema: &Value) -> Value {
    let mut s = schema.clone();
    if let Value::Object(m) = &mut s {
        m.entry("x-guidance").or_insert_with(
            || json!({"whitespace_pattern": JSON_WHITESPACE, "coerce_one_of": true}),
        );
        s
    } else {
        // `true` / `false` schemas: keep them as they are.
        s
    }
}

/// The model's vocabulary as llguidance sees it, and its parser factory.
pub struct GrammarEnv {
    factory: Arc<ParserFactory>,
    n_vocab: usize,
}

struct VocabEnv {
    trie: TokTrie,
    tok: Arc<Tokenizer>,
}

impl TokenizerEnv for VocabEnv {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, s: &[u8]) -> Vec<toktrie::TokenId> {
        // Canonical tokenization of text (special tokens as text): what
        // the model itself would write for these bytes.
        match std::str::from_utf8(s) {
            Ok(t) => self.tok.encode(t, false),
            Err(_) => self.trie.greedy_tokenize(s),
        }
    }
}

/// The bytes each token stands for in the trie (see the module docs).
pub fn token_words(tok: &Tokenizer) -> Vec<Vec<u8>> {
    (0..tok.n_vocab() as u32)
        .map(|id| match tok.token_type(id) {
            Some(TokenType::Control) | Some(TokenType::Unknown) => {
                let mut w = vec![TokTrie::SPECIAL_TOKEN_MARKER];
                w.extend_from_slice(tok.token_text(id).unwrap_or_default().as_bytes());
                w
            }
            Some(TokenType::Unused) | None => Vec::new(),
            _ => tok.decode_bytes_opts(&[id], true).unwrap_or_default(),
        })
        .collect()
}

impl GrammarEnv {
    /// Build the trie over `tok`'s vocabulary; `eog` are the tokens that
    /// end a generation (allowed where a grammar may end). `n_logits` is
    /// the model's output width.
    pub fn new(tok: Arc<Tokenizer>, eog: &[u32], n_logits: usize) -> Result<Self, GrammarError> {
        let eos = tok
            .eos_id()
            .or_else(|| eog.first().copied())
            .ok_or_else(|| GrammarError::Vocabulary("the vocabulary has no end token".into()))?;
        let mut words = token_words(&tok);
        // The trie covers the model's outputs: logits beyond the vocabulary
        // (padding) are tokens nothing matches, and tokens the model cannot
        // output are left out.
        words.resize(n_logits, Vec::new());
        let n_vocab = words.len();
        let mut eos_set: Vec<u32> = eog.to_vec();
        if !eos_set.contains(&eos) {
            eos_set.push(eos);
        }
        eos_set.retain(|&t| (t as usize) < n_vocab);
        let info = TokRxInfo::new(n_vocab as u32, eos);
        // The trie asserts its invariants; a vocabulary that breaks them is
        // an error here, not a crash.
        let trie = std::panic::catch_unwind(|| TokTrie::from(&info, &words))
            .map_err(|_| GrammarError::Vocabulary("the vocabulary is inconsistent".into()))?
            .with_eos_tokens(&eos_set);
        let env: TokEnv = Arc::new(VocabEnv { trie, tok });
        let mut factory =
            ParserFactory::new_simple(&env).map_err(|e| GrammarError::Vocabulary(e.to_string()))?;
        factory.quiet();
        Ok(GrammarEnv {
            factory: Arc::new(factory),
            n_vocab,
        })
    }

    /// Tokens a mask covers (the model's output width).
    pub fn n_vocab(&self) -> usize {
        self.n_vocab
    }

    /// Compile `spec`; an invalid schema, grammar or tool list is
    /// [`GrammarError::Invalid`] naming the problem.
    pub fn compile(&self, spec: &GrammarSpec) -> Result<Grammar, GrammarError> {
        let top = top_grammar(spec)?;
        let factory = self.factory.clone();
        let parser =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| factory.create_parser(top)))
                .map_err(|_| GrammarError::Invalid("the grammar could not be compiled".into()))?
                .map_err(|e| GrammarError::Invalid(e.to_string()))?;
        let mut proto = Matcher::new(Ok(parser));
        if let Some(e) = proto.get_error() {
            return Err(GrammarError::Invalid(e));
        }
        // A grammar that allows nothing at all is refused up front (and the
        // first mask is computed once, here, for every matcher cloned).
        let first = proto
            .compute_mask()
            .map_err(|e| GrammarError::Invalid(e.to_string()))?;
        if first.is_zero() {
            return Err(GrammarError::Invalid(
                "the grammar allows no output at all".into(),
            ));
        }
        Ok(Grammar {
            proto,
            n_vocab: self.n_vocab,
        })
    }
}

fn top_grammar(spec: &GrammarSpec) -> Result<TopLevelGrammar, GrammarError> {
    Ok(match spec {
        GrammarSpec::JsonSchema(s) => TopLevelGrammar::from_json_schema(with_json_options(s)),
        GrammarSpec::JsonObject => {
            TopLevelGrammar::from_json_schema(with_json_options(&json!({"type": "object"})))
        }
        GrammarSpec::Lark(g) => TopLevelGrammar::from_lark(g.clone()),
        GrammarSpec::Gbnf(g) => {
            TopLevelGrammar::from_lark(gbnf_to_lark(g).map_err(GrammarError::Invalid)?)
        }
        GrammarSpec::ToolCalls { tools, parallel } => TopLevelGrammar::from_lark(
            tool_call_lark(tools, *parallel).map_err(GrammarError::Invalid)?,
        ),
    })
}

/// A compiled constraint; cheap to start a matcher from.
pub struct Grammar {
    proto: Matcher,
    n_vocab: usize,
}

impl Grammar {
    /// A matcher at the start of the grammar, for one sequence.
    pub fn matcher(&self) -> Result<GrammarMatcher, GrammarError> {
        if let Some(e) = self.proto.get_error() {
            return Err(GrammarError::Invalid(e));
        }
        Ok(GrammarMatcher {
            m: self.proto.deep_clone(),
            n_vocab: self.n_vocab,
        })
    }
}

/// One sequence's position in a grammar.
pub struct GrammarMatcher {
    m: Matcher,
    n_vocab: usize,
}

impl GrammarMatcher {
    /// The tokens allowed next, as bits (token `t` is bit `t % 32` of word
    /// `t / 32`) over the model's output width. After the grammar has
    /// ended, only the end tokens.
    pub fn mask(&mut self, out: &mut Vec<u32>) -> Result<(), GrammarError> {
        let v = self
            .m
            .compute_mask_or_eos()
            .map_err(|e| GrammarError::Matcher(e.to_string()))?;
        out.clear();
        out.extend_from_slice(v.as_slice());
        out.resize(self.n_vocab.div_ceil(32), 0);
        Ok(())
    }

    /// Advance past `token` (which the last mask allowed).
    pub fn consume(&mut self, token: u32) -> Result<(), GrammarError> {
        self.m
            .consume_token(token)
            .map_err(|e| GrammarError::Matcher(e.to_string()))
    }

    /// How many of `tokens` the grammar accepts in a row from here, without
    /// advancing (for checking speculative drafts).
    pub fn validate(&mut self, tokens: &[u32]) -> Result<usize, GrammarError> {
        self.m
            .validate_tokens(tokens)
            .map_err(|e| GrammarError::Matcher(e.to_string()))
    }

    /// The grammar is complete and allows nothing more.
    pub fn is_stopped(&self) -> bool {
        self.m.is_stopped()
    }

    /// The grammar may end here.
    pub fn is_accepting(&mut self) -> bool {
        self.m.is_accepting().unwrap_or(false)
    }
}
