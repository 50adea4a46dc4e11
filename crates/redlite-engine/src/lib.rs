//! Generation on top of the model: sampling, stop conditions, the decode loop.

pub mod generate;
pub mod sampling;

pub use generate::{generate, prefill, GenerateError, GenerateParams, Generation, StopReason};
pub use sampling::{argmax, Sampler, SamplingParams};
