//! Judging a model file by what it does through `redlite serve`, over HTTP
//! as any client would:
//!
//! - [`needle`]: passphrases hidden in code comments at chosen depths of a
//!   prompt made of real source code, exactly N tokens long, asked for
//!   through `/v1/chat/completions`; a table, JSON and an SVG heatmap.
//! - [`agent`]: tasks on small projects (`eval/tasks/<suite>/<task>/`), each
//!   solved by the pi coding agent against the server, then judged by a
//!   check the agent never sees; `--validate` proves every check fails on
//!   the planted project and passes with the reference patch.
//!
//! - [`perplexity`]: perplexity and KL divergence as llama-perplexity
//!   computes them, from logits (the caller runs the model), and its base
//!   logits file.
//!
//! The crate talks to the server only over HTTP: [`http`], a small blocking
//! HTTP/1.1 client, and [`proxy`], the relay each agent run goes through (it
//! counts the run's requests and can set their temperature); it links no
//! part of the engine.

pub mod agent;
pub mod http;
pub mod needle;
pub mod perplexity;
pub mod proxy;
