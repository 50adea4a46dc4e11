//! Chat formatting for Qwen3-Next models, between the API's messages and the
//! tokenizer's text:
//!
//! * [`template`]: a model's Jinja chat template rendered as Hugging Face
//!   `transformers` renders it (minijinja plus a Python-compatibility layer),
//!   bounded in instructions, output size, recursion and the size of every
//!   value it builds;
//! * [`messages`]: OpenAI-style messages normalised into the shape chat
//!   templates expect;
//! * [`toolcall`]: a streaming parser from generated text to OpenAI-style
//!   message deltas (content, reasoning, Qwen3-Coder tool calls).
//!
//! Nothing here tokenizes: the rendered prompt is text for `redlite-tokenizer`.
pub mod messages;
pub mod template;
pub mod toolcall;
