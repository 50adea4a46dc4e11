//! tiny-s-bf16 on the 32,768-token prompt against transformers (long32k.npz),
//! fed in ubatches of 4096.

mod common;
use common::*;

#[test]
fn long32k_matches_transformers() {
    long32k_vs_transformers(&load("tiny-s-bf16.gguf"), "");
}
