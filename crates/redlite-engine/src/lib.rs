//! Generation on top of the model: sampling, stop conditions, the decode loop,
//! and the batching scheduler with state snapshots that a server runs.

pub mod constraint;
pub mod generate;
pub mod lookup;
pub mod sampling;
pub mod scheduler;
pub mod state_cache;

pub use constraint::{ConstraintSource, TokenConstraint};
pub use generate::{generate, prefill, GenerateError, GenerateParams, Generation, StopReason};
pub use lookup::{DraftSource, Drafter, LookupParams, LookupStats};
pub use sampling::{argmax, Sampler, SamplingParams};
pub use scheduler::{
    pick_boundaries, token_logprobs, Event, Finish, FinishReason, Request, Scheduler,
    SchedulerConfig, SchedulerStats, Sink, TokenLogprobs,
};
pub use state_cache::{Restored, SnapshotKind, StateCache};
