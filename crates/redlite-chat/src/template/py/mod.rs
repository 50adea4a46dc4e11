//! Python semantics for chat templates, by topic:
//!
//! * `strings`: Python's character classes and `str` methods (the method
//!   callback minijinja calls for a method it does not know);
//! * `values`: Python tuples, dict views and integers beyond 128 bits, and
//!   values printed as Python's `str()` / `repr()` print them;
//! * `json`: JSON read as Python's `json.loads` reads it and written as
//!   `json.dumps` writes it (the `tojson` filter);
//! * `filters`: Jinja2's filters where minijinja's differ or are missing.
//!
//! Every function here follows CPython 3 / Jinja2 3.1 and is tested against
//! them (`tests/template_python.rs`).

use minijinja::{Error, ErrorKind};

mod filters;
mod json;
mod strings;
mod values;

pub use filters::*;
pub use json::*;
pub use strings::*;
pub use values::*;

pub(crate) fn invalid(msg: impl Into<String>) -> Error {
    Error::new(ErrorKind::InvalidOperation, msg.into())
}
