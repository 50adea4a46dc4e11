//! Tokenization for Qwen3-Next models.
//!
//! * byte-level BPE built from GGUF metadata, with the `qwen2` pre-tokenizer;
//! * streaming, UTF-8-safe detokenization.
//!
//! Chat formatting (templates, message normalisation, the tool-call parser)
//! lives in `redlite-chat`.
pub mod bpe;
pub mod detok;
pub mod pretokenize;
pub mod tokenizer;
pub mod vocab;

pub use detok::{StreamDecoder, Utf8Stream};
pub use pretokenize::PreTokenizer;
pub use tokenizer::{Fragment, Tokenizer};
pub use vocab::{TokenType, TokenizerError};
