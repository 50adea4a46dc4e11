//! The size budget of the values a template builds.
//!
//! A template is untrusted input: a few instructions can ask for gigabytes
//! (`'x' * 90000000 | replace('x', 'yyyy')`, a string doubled by `+` in a
//! loop, `tojson(indent=10**9)`), and an allocation the allocator cannot
//! satisfy aborts the whole process. So every operation that can build a
//! large value computes the size of its result **before** it allocates and
//! fails with a limit error when that exceeds the budget:
//!
//! * a string may hold at most [`MAX_RENDER_OUTPUT`] bytes (the largest
//!   prompt a render may produce, so no legitimate render needs more);
//! * a sequence may hold at most [`MAX_SEQ_ITEMS`] items (the same bytes at
//!   the size of one item; `range` stays minijinja's, at most 100,000).
//!
//! minijinja has no hook for its `+` and `*`, so the operator rewrite (the
//! `ops` module) turns binary `+` and `*` into calls of [`py_add`] and
//! [`py_mul`], which check the sizes of strings and sequences and leave
//! every other case (numbers, errors) to minijinja's own operator. The
//! filters and `str` methods that build values check the same budget where
//! they build them (`replace`, `join`, `tojson`, `indent`, `format` and `%`,
//! `~`, `center`/`ljust`/`rjust`/`zfill`, `expandtabs`, `list`, `batch`,
//! `slice`, `split`, `splitlines`), and printing a value stops at the budget.

use std::sync::OnceLock;

use minijinja::value::ValueKind;
use minijinja::{Environment, Error, ErrorKind, Expression, State, Value};

use super::{LIMIT_MARKER, MAX_RENDER_OUTPUT};

/// Most items in one sequence a template builds.
pub const MAX_SEQ_ITEMS: usize = MAX_RENDER_OUTPUT / std::mem::size_of::<Value>();

/// Global function computing `a + b` within the budget.
pub const ADD_FN: &str = "__redlite_py_add__";
/// Global function computing `a * b` within the budget.
pub const MUL_FN: &str = "__redlite_py_mul__";

/// The limit error for a string of `bytes` bytes (`None`: beyond `usize`)
/// built by `what`.
pub fn string_too_large(what: &str, bytes: Option<usize>) -> Error {
    let size = bytes.map_or_else(|| "more than 2^64".to_string(), |b| b.to_string());
    Error::new(
        ErrorKind::InvalidOperation,
        format!(
            "{LIMIT_MARKER}{what} would build a string of {size} bytes, beyond the {} MiB limit",
            MAX_RENDER_OUTPUT >> 20
        ),
    )
}

/// Fails unless a string of `bytes` bytes fits the budget.
pub fn check_string(what: &str, bytes: Option<usize>) -> Result<(), Error> {
    match bytes {
        Some(b) if b <= MAX_RENDER_OUTPUT => Ok(()),
        _ => Err(string_too_large(what, bytes)),
    }
}

/// The limit error for a sequence of `items` items (`None`: beyond
/// `usize`) built by `what`.
fn items_too_many(what: &str, items: Option<usize>) -> Error {
    let size = items.map_or_else(|| "more than 2^64".to_string(), |n| n.to_string());
    Error::new(
        ErrorKind::InvalidOperation,
        format!(
            "{LIMIT_MARKER}{what} would build a sequence of {size} items, beyond the \
             limit of {MAX_SEQ_ITEMS} ({} MiB of items)",
            MAX_RENDER_OUTPUT >> 20
        ),
    )
}

/// Fails unless a sequence of `items` items fits the budget.
pub fn check_items(what: &str, items: Option<usize>) -> Result<(), Error> {
    match items {
        Some(n) if n <= MAX_SEQ_ITEMS => Ok(()),
        _ => Err(items_too_many(what, items)),
    }
}

/// Appends `s` to `out` if the result stays within the string budget.
pub fn push_checked(what: &str, out: &mut String, s: &str) -> Result<(), Error> {
    check_string(what, out.len().checked_add(s.len()))?;
    out.push_str(s);
    Ok(())
}

fn is_seq(v: &Value) -> bool {
    matches!(v.kind(), ValueKind::Seq | ValueKind::Iterable)
}

/// minijinja's own binary operator `expr` (`a + b` or `a * b`) on `a` and
/// `b`: its semantics and its errors for everything the budget does not
/// concern.
fn minijinja_op(
    cell: &'static OnceLock<Option<Expression<'static, 'static>>>,
    expr: &'static str,
    a: Value,
    b: Value,
) -> Result<Value, Error> {
    static ENV: OnceLock<Environment<'static>> = OnceLock::new();
    let env = ENV.get_or_init(Environment::new);
    let compiled = cell.get_or_init(|| env.compile_expression(expr).ok());
    let ctx = Value::from_iter([("a", a), ("b", b)]);
    match compiled {
        // A fresh error, without the location inside `expr`: the template's
        // own line is attached where the call fails.
        Some(e) => e
            .eval(ctx)
            .map_err(|err| Error::new(err.kind(), err.detail().unwrap_or_default().to_string())),
        None => Err(Error::new(
            ErrorKind::InvalidOperation,
            format!("internal: `{expr}` does not compile"),
        )),
    }
}

/// Every item of an iterable whose length is not known, refused beyond the
/// item budget (the items are counted as they come, never all stored).
fn collect_bounded(what: &str, v: &Value) -> Result<Vec<Value>, Error> {
    let mut out = Vec::new();
    for item in v.try_iter()? {
        if out.len() >= MAX_SEQ_ITEMS {
            return Err(items_too_many(what, out.len().checked_add(1)));
        }
        out.push(item);
    }
    Ok(out)
}

/// `a + b`: strings and sequences within the budget, the rest minijinja's.
pub fn py_add(a: Value, b: Value) -> Result<Value, Error> {
    static OP: OnceLock<Option<Expression<'static, 'static>>> = OnceLock::new();
    if a.kind() == ValueKind::String && b.kind() == ValueKind::String {
        let (x, y) = (
            a.as_str().unwrap_or_default(),
            b.as_str().unwrap_or_default(),
        );
        check_string("+", x.len().checked_add(y.len()))?;
        return Ok(Value::from([x, y].concat()));
    }
    if is_seq(&a) && is_seq(&b) {
        match (a.len(), b.len()) {
            (Some(n), Some(m)) => check_items("+", n.checked_add(m))?,
            // An operand of unknown length is counted item by item.
            _ => {
                let mut items = collect_bounded("+", &a)?;
                let rest = collect_bounded("+", &b)?;
                check_items("+", items.len().checked_add(rest.len()))?;
                items.extend(rest);
                return Ok(Value::from(items));
            }
        }
    }
    minijinja_op(&OP, "a + b", a, b)
}

/// `a * b`: string and sequence repetition within the budget, the rest
/// minijinja's.
pub fn py_mul(a: Value, b: Value) -> Result<Value, Error> {
    static OP: OnceLock<Option<Expression<'static, 'static>>> = OnceLock::new();
    // minijinja repeats a string when either side is one, else a sequence
    // when either side is one; the count must be a non-negative integer.
    let (base, count) = if a.kind() == ValueKind::String {
        (&a, &b)
    } else if b.kind() == ValueKind::String {
        (&b, &a)
    } else if is_seq(&a) {
        (&a, &b)
    } else {
        (&b, &a)
    };
    if let Some(n) = count.as_usize() {
        if base.kind() == ValueKind::String {
            let s = base.as_str().unwrap_or_default();
            check_string("*", s.len().checked_mul(n))?;
            return Ok(Value::from(s.repeat(n)));
        }
        if is_seq(base) {
            if let Some(len) = base.len() {
                check_items("*", len.checked_mul(n))?;
            }
        }
    }
    minijinja_op(&OP, "a * b", a, b)
}

/// The `list` filter: minijinja's, refused beyond the item budget (a string
/// becomes a list of its characters).
pub fn filter_list(state: &State, value: Value) -> Result<Value, Error> {
    let n = match value.as_str() {
        Some(s) => Some(s.chars().count()),
        None => value.len(),
    };
    match n {
        Some(n) => check_items("list", Some(n))?,
        None if is_seq(&value) => return Ok(Value::from(collect_bounded("list", &value)?)),
        None => {}
    }
    minijinja::filters::list(state, value)
}

/// The `batch` filter: minijinja's, with the batch size within the item
/// budget (each batch is allocated at that size).
pub fn filter_batch(
    state: &State,
    value: Value,
    count: usize,
    fill_with: Option<Value>,
) -> Result<Value, Error> {
    check_items("batch", Some(count))?;
    minijinja::filters::batch(state, value, count, fill_with)
}

/// The `slice` filter: minijinja's, with the number of slices within the
/// item budget.
pub fn filter_slice(
    state: &State,
    value: Value,
    count: usize,
    fill_with: Option<Value>,
) -> Result<Value, Error> {
    check_items("slice", Some(count))?;
    minijinja::filters::slice(state, value, count, fill_with)
}
