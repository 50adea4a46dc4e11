//! Tokenization and chat formatting for Qwen3-Next models.
//!
//! * byte-level BPE built from GGUF metadata, with the `qwen2` pre-tokenizer;
//! * streaming, UTF-8-safe detokenization;
//! * chat templates rendered with minijinja;
//! * a streaming parser from generated text to OpenAI-style message deltas
//!   (content, reasoning, Qwen3-Coder tool calls).
pub mod template;
pub mod toolcall;

pub mod bpe;
pub mod detok;
pub mod pretokenize;
pub mod tokenizer;
pub mod vocab;

pub use detok::{StreamDecoder, Utf8Stream};
pub use pretokenize::PreTokenizer;
pub use tokenizer::{Fragment, Tokenizer};
pub use vocab::{TokenType, TokenizerError};
