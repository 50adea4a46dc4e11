//! Tokenization and chat formatting for Qwen3-Next models.
//!
//! * byte-level BPE built from GGUF metadata, with the `qwen2` pre-tokenizer;
//! * streaming, UTF-8-safe detokenization;
//! * chat templates rendered with minijinja;
//! * a streaming parser from generated text to OpenAI-style message deltas
//!   (content, reasoning, Qwen3-Coder tool calls).
pub mod template;
pub mod toolcall;
