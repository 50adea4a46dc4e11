use std::path::PathBuf;

/// Everything that can go wrong reading or writing a GGUF file. Every variant
/// names the file, and where it applies the key or tensor and the byte offset.
#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    // The I/O error is part of the message rather than a `source`, so a
    // chain printer (`{:#}`) does not print it twice.
    #[error("{}: {err}", path.display())]
    Io { path: PathBuf, err: std::io::Error },
    #[error("{}: at byte {offset}: {msg}", path.display())]
    Format {
        path: PathBuf,
        offset: u64,
        msg: String,
    },
    #[error("{}: tensor {tensor} (info at byte {offset}): {msg}", path.display())]
    Tensor {
        path: PathBuf,
        tensor: String,
        offset: u64,
        msg: String,
    },
    #[error("{}: metadata key {key}: {msg}", path.display())]
    Key {
        path: PathBuf,
        key: String,
        msg: String,
    },
    #[error("{}: split files: {msg}", path.display())]
    Split { path: PathBuf, msg: String },
    #[error("writing GGUF: {0}")]
    Write(String),
}

pub type Result<T, E = GgufError> = std::result::Result<T, E>;
