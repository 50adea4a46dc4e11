//! GGUF: the model file format of llama.cpp.
//!
//! This crate knows bytes, not maths: it parses and validates the header,
//! metadata and tensor table, maps tensor data without copying, resolves split
//! files, and writes new files. Dequantization lives in `redlite-quant`.

mod error;
mod reader;
mod types;
mod value;
mod writer;

pub use error::{GgufError, Result};
pub use reader::{
    parse_bytes, split_paths, GgufFile, LoadOptions, TensorInfo, UnknownTensor, DEFAULT_ALIGNMENT,
    GGUF_MAGIC, MAX_DIMS,
};
pub use types::GgmlType;
pub use value::{MetaArray, MetaValue, ValueType};
pub use writer::{GgufWriter, TensorFill};
