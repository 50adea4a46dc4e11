//! The qwen3next forward pass
