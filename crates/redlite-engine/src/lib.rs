//! Generation on top of the model: sampling, stop conditions, the decode loop.

pub mod sampling;

pub use sampling::{argmax, Sampler, SamplingParams};
