//! Python's values beyond minijinja's: tuples (printing as `(a, b)`, with
//! named fields), `dict.keys()`/`values()`/`items()` views, integers beyond
//! 128 bits; and every value printed as Python's `str()` and `repr()` print
//! it, within the nesting limit.

use std::fmt::Write as _;
use std::sync::Arc;

use minijinja::value::{Enumerator, Object, ObjectRepr, ValueKind};
use minijinja::{Error, ErrorKind, Value};

use super::py_isprintable;
use crate::template::budget::string_too_large;
use crate::template::{LIMIT_MARKER, MAX_RENDER_OUTPUT, MAX_VALUE_DEPTH};

/// A Python tuple (from `dict.items()`, the `items`, `dictsort` and
/// `groupby` filters, `str.partition`): a sequence that prints as `(a, b)`.
/// `fields` names its items for attribute access, as a named tuple does
/// (`group.grouper`, `group.list`).
#[derive(Debug)]
pub struct PyTuple(pub Vec<Value>, pub &'static [&'static str]);

impl PyTuple {
    /// A plain tuple.
    pub fn value(items: Vec<Value>) -> Value {
        Value::from_object(PyTuple(items, &[]))
    }
}

impl Object for PyTuple {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Seq
    }
    fn get_value(self: &Arc<Self>, key: &Value) -> Option<Value> {
        if let Some(name) = key.as_str() {
            let i = self.1.iter().position(|f| *f == name)?;
            return self.0.get(i).cloned();
        }
        let i = key.as_i64()?;
        let i = if i < 0 { i + self.0.len() as i64 } else { i };
        self.0.get(usize::try_from(i).ok()?).cloned()
    }
    fn enumerate(self: &Arc<Self>) -> Enumerator {
        Enumerator::Seq(self.0.len())
    }
}

/// A `dict.keys()` / `values()` / `items()` view: a sequence that prints as
/// `dict_keys([...])`.
#[derive(Debug)]
pub struct PyDictView {
    /// `dict_keys`, `dict_values` or `dict_items`.
    pub kind: &'static str,
    pub items: Vec<Value>,
}

impl Object for PyDictView {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Seq
    }
    fn get_value(self: &Arc<Self>, key: &Value) -> Option<Value> {
        self.items
            .get(usize::try_from(key.as_i64()?).ok()?)
            .cloned()
    }
    fn enumerate(self: &Arc<Self>) -> Enumerator {
        Enumerator::Seq(self.items.len())
    }
}

/// An integer beyond 128 bits, kept as its decimal digits (Python `int`).
/// It prints and serialises exactly; arithmetic on it is not supported.
#[derive(Debug)]
pub struct PyBigInt(pub String);

impl Object for PyBigInt {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Plain
    }
    fn render(self: &Arc<Self>, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// An integer given as decimal digits (optional `-`), as the smallest value
/// kind that holds it.
pub fn int_from_decimal(digits: &str) -> Value {
    if let Ok(i) = digits.parse::<i64>() {
        Value::from(i)
    } else if let Ok(i) = digits.parse::<i128>() {
        Value::from(i)
    } else if let Ok(u) = digits.parse::<u128>() {
        Value::from(u)
    } else {
        let trimmed = match digits.strip_prefix('-') {
            Some(d) => {
                let d = d.trim_start_matches('0');
                if d.is_empty() {
                    "0".to_string()
                } else {
                    format!("-{d}")
                }
            }
            None => {
                let d = digits.trim_start_matches('0');
                if d.is_empty() { "0" } else { d }.to_string()
            }
        };
        Value::from_object(PyBigInt(trimmed))
    }
}

/// `items()` of a mapping as a list of tuples.
pub(crate) fn items_of(value: &Value) -> Result<Value, Error> {
    let mut out = Vec::new();
    for k in value.try_iter()? {
        let v = value.get_item(&k)?;
        out.push(PyTuple::value(vec![k, v]));
    }
    Ok(Value::from(out))
}

/// Python's type name of a value, for error messages.
pub fn py_type_name(v: &Value) -> &'static str {
    match v.kind() {
        ValueKind::Undefined => "Undefined",
        ValueKind::None => "NoneType",
        ValueKind::Bool => "bool",
        ValueKind::Number if v.is_integer() => "int",
        ValueKind::Number => "float",
        ValueKind::String => "str",
        ValueKind::Bytes => "bytes",
        ValueKind::Seq if v.downcast_object_ref::<PyTuple>().is_some() => "tuple",
        ValueKind::Seq if v.downcast_object_ref::<PyDictView>().is_some() => v
            .downcast_object_ref::<PyDictView>()
            .map_or("list", |d| d.kind),
        ValueKind::Seq => "list",
        ValueKind::Map => "dict",
        ValueKind::Plain if v.downcast_object_ref::<PyBigInt>().is_some() => "int",
        _ => "object",
    }
}

/// Python `str()` / `repr()` of a number. `json` selects JSON spellings of
/// non-finite floats (`NaN`, `Infinity`) as Python's `json` module writes them.
pub(crate) fn py_number(v: &Value, json: bool) -> String {
    if let Some(b) = v.downcast_object_ref::<PyBigInt>() {
        return b.0.clone();
    }
    if v.is_integer() {
        return v.to_string();
    }
    match f64::try_from(v.clone()) {
        Ok(f) => py_float_repr(f, json),
        Err(_) => v.to_string(),
    }
}

/// Python's `repr(float)`: shortest round-trip digits, scientific notation
/// when the decimal exponent is below -4 or at least 16.
pub fn py_float_repr(f: f64, json: bool) -> String {
    if f.is_nan() {
        return if json { "NaN".into() } else { "nan".into() };
    }
    if f.is_infinite() {
        let s = if json { "Infinity" } else { "inf" };
        return if f < 0.0 { format!("-{s}") } else { s.into() };
    }
    // Rust's `{:e}` gives the shortest round-trip digits: "1.2345e-7".
    let sci = format!("{:e}", f);
    let (mant, exp) = match sci.split_once('e') {
        Some((m, e)) => (m, e.parse::<i32>().unwrap_or(0)),
        None => (sci.as_str(), 0),
    };
    let (neg, mant) = match mant.strip_prefix('-') {
        Some(m) => (true, m),
        None => (false, mant),
    };
    let digits: String = mant.chars().filter(|c| c.is_ascii_digit()).collect();
    let mut out = String::new();
    if neg {
        out.push('-');
    }
    if (-4..16).contains(&exp) {
        if exp < 0 {
            out.push_str("0.");
            for _ in 0..(-exp - 1) {
                out.push('0');
            }
            out.push_str(&digits);
        } else {
            let int_len = exp as usize + 1;
            if digits.len() <= int_len {
                out.push_str(&digits);
                for _ in digits.len()..int_len {
                    out.push('0');
                }
                out.push_str(".0");
            } else {
                out.push_str(&digits[..int_len]);
                out.push('.');
                out.push_str(&digits[int_len..]);
            }
        }
    } else {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let _ = write!(
            out,
            "e{}{:02}",
            if exp < 0 { '-' } else { '+' },
            exp.unsigned_abs()
        );
    }
    out
}

/// Python `str()` of a template value: strings as they are, `True`/`False`,
/// `None`, Python float formatting, `repr` syntax for lists, tuples and dicts.
/// Values nested deeper than the printing limit print as `[...]`.
pub fn py_str(v: &Value) -> String {
    match v.kind() {
        ValueKind::String => v.as_str().unwrap_or_default().to_string(),
        ValueKind::Undefined => String::new(),
        _ => py_repr(v),
    }
}

/// [`py_str`] that reports a value nested too deeply as a limit error.
pub(crate) fn py_str_checked(v: &Value) -> Result<String, Error> {
    match v.kind() {
        ValueKind::String => Ok(v.as_str().unwrap_or_default().to_string()),
        ValueKind::Undefined => Ok(String::new()),
        _ => {
            let mut out = String::new();
            match repr_into(v, &mut out, 0) {
                Ok(()) => Ok(out),
                Err(ReprStop::Depth) => Err(depth_error()),
                Err(ReprStop::Size) => Err(string_too_large("printing a value", None)),
            }
        }
    }
}

pub(crate) fn depth_error() -> Error {
    Error::new(
        ErrorKind::InvalidOperation,
        format!("{LIMIT_MARKER}a value is nested more than {MAX_VALUE_DEPTH} levels deep"),
    )
}

/// Python `repr()` of a template value.
/// Values nested deeper than the printing limit print as `[...]`; printing
/// stops at the output budget ([`py_str_checked`] reports both as errors).
pub fn py_repr(v: &Value) -> String {
    let mut out = String::new();
    let _ = repr_into(v, &mut out, 0);
    out
}

/// Why printing a value did not complete.
enum ReprStop {
    /// The nesting limit was reached (the text holds `[...]` there, and the
    /// rest of the value is printed).
    Depth,
    /// The text would exceed the output budget; printing stopped.
    Size,
}

/// Append the repr of `v`.
fn repr_into(v: &Value, out: &mut String, depth: usize) -> Result<(), ReprStop> {
    if out.len() > MAX_RENDER_OUTPUT {
        return Err(ReprStop::Size);
    }
    if depth > MAX_VALUE_DEPTH {
        out.push_str("[...]");
        return Err(ReprStop::Depth);
    }
    let mut ok = Ok(());
    // A nested stop: size ends printing, depth is remembered.
    macro_rules! nested {
        ($e:expr) => {
            match $e {
                Err(ReprStop::Size) => return Err(ReprStop::Size),
                Err(ReprStop::Depth) => ok = Err(ReprStop::Depth),
                Ok(()) => {}
            }
        };
    }
    match v.kind() {
        ValueKind::Undefined => {}
        ValueKind::None => out.push_str("None"),
        ValueKind::Bool => out.push_str(if v.is_true() { "True" } else { "False" }),
        ValueKind::Number => out.push_str(&py_number(v, false)),
        ValueKind::String => {
            let s = v.as_str().unwrap_or_default();
            if out.len().saturating_add(s.len()) > MAX_RENDER_OUTPUT {
                return Err(ReprStop::Size);
            }
            repr_string(s, out)
        }
        ValueKind::Seq | ValueKind::Iterable => {
            let view = v.downcast_object_ref::<PyDictView>().map(|d| d.kind);
            if let Some(kind) = view {
                out.push_str(kind);
                out.push('(');
            }
            let tuple = v.downcast_object_ref::<PyTuple>().is_some();
            out.push(if tuple { '(' } else { '[' });
            let mut n = 0;
            if let Ok(it) = v.try_iter() {
                for (i, item) in it.enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    nested!(repr_into(&item, out, depth + 1));
                    n += 1;
                }
            }
            if tuple {
                if n == 1 {
                    out.push(',');
                }
                out.push(')');
            } else {
                out.push(']');
            }
            if view.is_some() {
                out.push(')');
            }
        }
        ValueKind::Map => {
            out.push('{');
            if let Ok(it) = v.try_iter() {
                for (i, k) in it.enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    nested!(repr_into(&k, out, depth + 1));
                    out.push_str(": ");
                    let item = v.get_item(&k).unwrap_or_default();
                    nested!(repr_into(&item, out, depth + 1));
                }
            }
            out.push('}');
        }
        _ => out.push_str(&v.to_string()),
    }
    ok
}

/// Python `repr(str)`: single quotes unless the text contains `'` and no
/// `"`; `\\`, `\t`, `\n`, `\r` and the quote escaped; other non-printable
/// characters (`str.isprintable`) as `\xNN`, `\uNNNN` or `\UNNNNNNNN`.
fn repr_string(s: &str, out: &mut String) {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if !py_isprintable(c) => {
                let n = c as u32;
                let _ = if n < 0x100 {
                    write!(out, "\\x{n:02x}")
                } else if n < 0x10000 {
                    write!(out, "\\u{n:04x}")
                } else {
                    write!(out, "\\U{n:08x}")
                };
            }
            c => out.push(c),
        }
    }
    out.push(quote);
}
