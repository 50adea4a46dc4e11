//! Jinja2 3.1's filters where minijinja's differ or are missing.

use std::fmt::Write as _;

use minijinja::value::{Kwargs, ValueKind};
use minijinja::{Error, Value};

use super::*;
use crate::template::budget::{check_items, check_string, push_checked};

/// `trim(chars=None)`: `str(value).strip(chars)`.
pub fn filter_trim(value: Value, chars: Option<Value>) -> Result<Value, Error> {
    let s = py_str_checked(&value)?;
    let chars = match &chars {
        Some(c) if !c.is_none() => Some(py_str_checked(c)?),
        _ => None,
    };
    Ok(Value::from(py_strip(&s, chars.as_deref(), true, true)))
}

/// Jinja2's `title` filter: split at runs of `-`, whitespace, `(`, `{`, `[`,
/// `<`; each piece gets its first character uppercased and the rest
/// lowercased ("they're" → "They're", unlike `str.title`).
pub fn filter_title(value: Value) -> Result<Value, Error> {
    let s = py_str_checked(&value)?;
    let is_sep = |c: char| matches!(c, '-' | '(' | '{' | '[' | '<') || py_isspace(c);
    let mut out = String::with_capacity(s.len());
    let mut rest = s.as_str();
    while !rest.is_empty() {
        let first_is_sep = rest.chars().next().is_some_and(is_sep);
        let end = if first_is_sep {
            rest.find(|c: char| !is_sep(c)).unwrap_or(rest.len())
        } else {
            rest.find(is_sep).unwrap_or(rest.len())
        };
        let piece = &rest[..end];
        let mut chars = piece.chars();
        if let Some(c) = chars.next() {
            out.extend(c.to_uppercase());
        }
        out.push_str(&chars.as_str().to_lowercase());
        rest = &rest[end..];
    }
    Ok(Value::from(out))
}

/// `capitalize`, `upper`, `lower` filters: the `str` method on `str(value)`.
pub fn filter_capitalize(value: Value) -> Result<Value, Error> {
    Ok(Value::from(py_capitalize(&py_str_checked(&value)?)))
}
pub fn filter_upper(value: Value) -> Result<Value, Error> {
    Ok(Value::from(py_str_checked(&value)?.to_uppercase()))
}
pub fn filter_lower(value: Value) -> Result<Value, Error> {
    Ok(Value::from(py_str_checked(&value)?.to_lowercase()))
}

/// markupsafe's `escape`: `&`, `<`, `>`, `"`, `'` as `&amp;`, `&lt;`,
/// `&gt;`, `&#34;`, `&#39;`; an already safe value is returned unchanged.
pub fn filter_escape(value: Value) -> Result<Value, Error> {
    if value.is_safe() {
        return Ok(value);
    }
    let s = py_str_checked(&value)?;
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&#34;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    Ok(Value::from_safe_string(out))
}

/// Follow a Jinja2 attribute path (`"a.b.0"`).
fn get_path(v: &Value, path: &str) -> Result<Value, Error> {
    let mut cur = v.clone();
    for part in path.split('.') {
        let key = match part.parse::<i64>() {
            Ok(i) => Value::from(i),
            Err(_) => Value::from(part),
        };
        cur = cur.get_item(&key)?;
    }
    Ok(cur)
}

/// `join(d='', attribute=None)`: `str(d).join(str(x) for x in value)`.
pub fn filter_join(value: Value, d: Option<Value>, kwargs: Kwargs) -> Result<Value, Error> {
    let attribute: Option<Value> = kwargs.get("attribute")?;
    let d = match kwargs.get::<Option<Value>>("d")? {
        Some(v) => Some(v),
        None => d,
    };
    kwargs.assert_all_used()?;
    let sep = match d {
        Some(d) => py_str_checked(&d)?,
        None => String::new(),
    };
    let mut out = String::new();
    if value.is_undefined() || value.is_none() {
        if value.is_none() {
            return Err(invalid("TypeError: 'NoneType' object is not iterable"));
        }
        return Ok(Value::from(out));
    }
    for (i, item) in value.try_iter()?.enumerate() {
        if i > 0 {
            push_checked("join", &mut out, &sep)?;
        }
        let item = match &attribute {
            Some(a) if !a.is_none() => match a.as_str() {
                Some(path) => get_path(&item, path)?,
                None => item.get_item(a)?,
            },
            _ => item,
        };
        push_checked("join", &mut out, &py_str_checked(&item)?)?;
    }
    Ok(Value::from(out))
}

/// `items` filter: the mapping's `(key, value)` tuples; undefined gives none.
pub fn filter_items(value: Value) -> Result<Value, Error> {
    if value.is_undefined() {
        return Ok(Value::from(Vec::<Value>::new()));
    }
    if value.kind() != ValueKind::Map {
        return Err(invalid("Can only get item pairs from a mapping."));
    }
    items_of(&value)
}

/// Python `int(text, base)` (whitespace, sign, underscores between digits,
/// `0x`/`0o`/`0b` prefixes for their base or base 0). Returns the decimal
/// digits of the result.
fn parse_py_int(text: &str, base: u32) -> Option<String> {
    let t = py_strip(text, None, true, true);
    let (neg, t) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let lower = t.to_ascii_lowercase();
    let (mut base, mut body) = (base, lower.as_str());
    for (prefix, b) in [("0x", 16), ("0o", 8), ("0b", 2)] {
        if (base == b || base == 0) && body.starts_with(prefix) {
            base = b;
            body = &body[2..];
            // An underscore may follow the prefix.
            body = body.strip_prefix('_').unwrap_or(body);
            break;
        }
    }
    if base == 0 {
        base = 10;
        // Base 0 rejects leading zeros on a non-zero decimal.
        if body.len() > 1 && body.starts_with('0') && body.chars().any(|c| c != '0' && c != '_') {
            return None;
        }
    }
    if !(2..=36).contains(&base) || body.is_empty() || body.ends_with('_') || body.contains("__") {
        return None;
    }
    let mut digits: Vec<u32> = Vec::new();
    for c in body.chars() {
        if c == '_' {
            continue;
        }
        let d = c.to_digit(36)?;
        if d >= base {
            return None;
        }
        digits.push(d);
    }
    // Convert to decimal with a little big-number arithmetic (base 10^9 limbs).
    let mut limbs: Vec<u64> = vec![0];
    for d in digits {
        let mut carry = u64::from(d);
        for limb in limbs.iter_mut() {
            let x = *limb * u64::from(base) + carry;
            *limb = x % 1_000_000_000;
            carry = x / 1_000_000_000;
        }
        while carry > 0 {
            limbs.push(carry % 1_000_000_000);
            carry /= 1_000_000_000;
        }
    }
    let mut out = String::new();
    let is_zero = limbs.iter().all(|&l| l == 0);
    if neg && !is_zero {
        out.push('-');
    }
    let mut it = limbs.iter().rev();
    if let Some(top) = it.next() {
        let _ = write!(out, "{top}");
    }
    for l in it {
        let _ = write!(out, "{l:09}");
    }
    Some(out)
}

/// Python `float(text)`: whitespace, sign, underscores between digits,
/// `inf`/`infinity`/`nan` in any case.
pub fn parse_py_float(text: &str) -> Option<f64> {
    let t = py_strip(text, None, true, true);
    let (sign, body) = match t.as_bytes().first() {
        Some(b'-') => (-1.0, &t[1..]),
        Some(b'+') => (1.0, &t[1..]),
        _ => (1.0, t),
    };
    let lower = body.to_ascii_lowercase();
    if lower == "inf" || lower == "infinity" {
        return Some(sign * f64::INFINITY);
    }
    if lower == "nan" {
        return Some(f64::NAN);
    }
    // Underscores only between two digits.
    let b = body.as_bytes();
    for (i, &c) in b.iter().enumerate() {
        if c == b'_'
            && !(i > 0 && b[i - 1].is_ascii_digit() && b.get(i + 1).is_some_and(u8::is_ascii_digit))
        {
            return None;
        }
    }
    let clean: String = body.chars().filter(|&c| c != '_').collect();
    // Rust accepts "inf"/"nan" spellings handled above and nothing else
    // beyond Python's grammar, except a lone "." which both reject.
    if clean.is_empty()
        || !clean
            .chars()
            .all(|c| c.is_ascii_digit() || matches!(c, '.' | 'e' | 'E' | '+' | '-'))
    {
        return None;
    }
    clean.parse::<f64>().ok().map(|f| sign * f)
}

/// Exact decimal digits of the integer part of a finite float (`int(f)`).
pub fn float_trunc_digits(f: f64) -> String {
    let s = format!("{:.0}", f.trunc());
    if s == "-0" {
        "0".into()
    } else {
        s
    }
}

/// `int(value)` of a float as a template value.
fn int_of_float(f: f64) -> Value {
    int_from_decimal(&float_trunc_digits(f))
}

/// Jinja2's `int(default=0, base=10)` filter.
pub fn filter_int(
    value: Value,
    default: Option<Value>,
    base: Option<Value>,
    kwargs: Kwargs,
) -> Result<Value, Error> {
    let default = kwargs
        .get::<Option<Value>>("default")?
        .or(default)
        .unwrap_or(Value::from(0));
    let base = kwargs.get::<Option<Value>>("base")?.or(base);
    kwargs.assert_all_used()?;
    let base = match base {
        None => 10,
        Some(b) => match b.as_i64() {
            Some(b) if b == 0 || (2..=36).contains(&b) => b as u32,
            _ => {
                return Err(invalid(
                    "ValueError: int() base must be >= 2 and <= 36, or 0",
                ))
            }
        },
    };
    match value.kind() {
        ValueKind::String => {
            let s = value.as_str().unwrap_or_default();
            if let Some(d) = parse_py_int(s, base) {
                return Ok(int_from_decimal(&d));
            }
            // "42.23"|int is 42; nan, inf and bad text give the default.
            match parse_py_float(s) {
                Some(f) if f.is_finite() => Ok(int_of_float(f)),
                _ => Ok(default),
            }
        }
        ValueKind::Bool => Ok(Value::from(i64::from(value.is_true()))),
        ValueKind::Number if value.is_integer() => Ok(value),
        ValueKind::Number => {
            let f = f64::try_from(value.clone()).unwrap_or(f64::NAN);
            if f.is_nan() {
                Ok(default)
            } else if f.is_infinite() {
                Err(invalid(
                    "OverflowError: cannot convert float infinity to integer",
                ))
            } else {
                Ok(int_of_float(f))
            }
        }
        ValueKind::Plain if value.downcast_object_ref::<PyBigInt>().is_some() => Ok(value),
        ValueKind::Undefined => Err(invalid("UndefinedError: value is undefined")),
        _ => Ok(default),
    }
}

/// Jinja2's `float(default=0.0)` filter.
pub fn filter_float(value: Value, default: Option<Value>, kwargs: Kwargs) -> Result<Value, Error> {
    let default = kwargs
        .get::<Option<Value>>("default")?
        .or(default)
        .unwrap_or(Value::from(0.0));
    kwargs.assert_all_used()?;
    match value.kind() {
        ValueKind::String => Ok(match parse_py_float(value.as_str().unwrap_or_default()) {
            Some(f) => Value::from(f),
            None => default,
        }),
        ValueKind::Bool => Ok(Value::from(if value.is_true() { 1.0 } else { 0.0 })),
        ValueKind::Number => Ok(Value::from(
            f64::try_from(value.clone()).unwrap_or(f64::NAN),
        )),
        ValueKind::Plain => match value.downcast_object_ref::<PyBigInt>() {
            Some(b) => Ok(Value::from(b.0.parse::<f64>().unwrap_or(f64::NAN))),
            None => Ok(default),
        },
        ValueKind::Undefined => Err(invalid("UndefinedError: value is undefined")),
        _ => Ok(default),
    }
}

/// Round the decimal integer `digits` (no sign) to a multiple of 10^k with
/// ties to even; `sticky` says a non-zero fraction lies beyond the digits.
fn round_digits_half_even(digits: &str, k: usize, sticky: bool) -> String {
    if k == 0 {
        return digits.to_string();
    }
    if digits.len() < k {
        // |x| < 10^k / 10 ≤ 10^k / 2 unless it reaches half: only possible
        // when digits.len() == k, handled below.
        return "0".into();
    }
    let (head, tail) = digits.split_at(digits.len() - k);
    let half_cmp = {
        let first = tail.as_bytes()[0];
        let rest_zero = tail.as_bytes()[1..].iter().all(|&b| b == b'0') && !sticky;
        match first.cmp(&b'5') {
            std::cmp::Ordering::Less => std::cmp::Ordering::Less,
            std::cmp::Ordering::Greater => std::cmp::Ordering::Greater,
            std::cmp::Ordering::Equal if rest_zero => std::cmp::Ordering::Equal,
            std::cmp::Ordering::Equal => std::cmp::Ordering::Greater,
        }
    };
    let head = if head.is_empty() { "0" } else { head };
    let last_odd = head.as_bytes()[head.len() - 1] % 2 == 1;
    let up = match half_cmp {
        std::cmp::Ordering::Greater => true,
        std::cmp::Ordering::Equal => last_odd,
        std::cmp::Ordering::Less => false,
    };
    let mut h: Vec<u8> = head.bytes().collect();
    if up {
        let mut i = h.len();
        loop {
            if i == 0 {
                h.insert(0, b'1');
                break;
            }
            i -= 1;
            if h[i] == b'9' {
                h[i] = b'0';
            } else {
                h[i] += 1;
                break;
            }
        }
    }
    let mut s: String = h.into_iter().map(char::from).collect();
    let s_trim = s.trim_start_matches('0');
    if s_trim.is_empty() {
        return "0".into();
    }
    s = s_trim.to_string();
    s.extend(std::iter::repeat_n('0', k));
    s
}

/// Python's `round(x, n)`: correctly rounded, ties to even; a float for a
/// float, an int for an int.
fn py_round(value: &Value, ndigits: i64) -> Result<Value, Error> {
    match value.kind() {
        ValueKind::Bool => Ok(Value::from(i64::from(value.is_true()))),
        ValueKind::Number if value.is_integer() => {
            if ndigits >= 0 {
                return Ok(value.clone());
            }
            let s = value.to_string();
            let (neg, digits) = match s.strip_prefix('-') {
                Some(d) => (true, d),
                None => (false, s.as_str()),
            };
            let r = round_digits_half_even(digits, (-ndigits) as usize, false);
            Ok(int_from_decimal(&if neg && r != "0" {
                format!("-{r}")
            } else {
                r
            }))
        }
        ValueKind::Number => {
            let f = f64::try_from(value.clone()).unwrap_or(f64::NAN);
            if !f.is_finite() {
                return Ok(Value::from(f));
            }
            let r = if ndigits >= 0 {
                if ndigits > 400 {
                    f
                } else {
                    // Rust's fixed-precision formatting is exact and rounds
                    // ties to even, like CPython's dtoa in mode 3.
                    format!("{:.*}", ndigits as usize, f)
                        .parse::<f64>()
                        .unwrap_or(f)
                }
            } else {
                let k = (-ndigits) as usize;
                if k > 400 {
                    0.0_f64.copysign(f)
                } else {
                    let int_part = f.trunc();
                    let sticky = f != int_part;
                    let s = float_trunc_digits(int_part.abs());
                    let r = round_digits_half_even(&s, k, sticky);
                    let v = r.parse::<f64>().unwrap_or(0.0);
                    if f < 0.0 {
                        -v
                    } else {
                        v
                    }
                }
            };
            Ok(Value::from(r))
        }
        _ => Err(invalid(format!(
            "TypeError: type {} doesn't define __round__ method",
            py_type_name(value)
        ))),
    }
}

/// Jinja2's `round(precision=0, method='common')` filter.
pub fn filter_round(
    value: Value,
    precision: Option<Value>,
    method: Option<Value>,
    kwargs: Kwargs,
) -> Result<Value, Error> {
    let precision = kwargs.get::<Option<Value>>("precision")?.or(precision);
    let method = kwargs.get::<Option<Value>>("method")?.or(method);
    kwargs.assert_all_used()?;
    let p = match &precision {
        None => 0,
        Some(p) => p.as_i64().ok_or_else(|| {
            invalid(format!(
                "TypeError: '{}' object cannot be interpreted as an integer",
                py_type_name(p)
            ))
        })?,
    };
    let method = match method {
        Some(m) => py_str_checked(&m)?,
        None => "common".into(),
    };
    match method.as_str() {
        "common" => py_round(&value, p),
        "ceil" | "floor" => {
            let x = match value.kind() {
                ValueKind::Bool => f64::from(u8::from(value.is_true())),
                ValueKind::Number => f64::try_from(value.clone()).unwrap_or(f64::NAN),
                _ => {
                    return Err(invalid(format!(
                        "TypeError: unsupported operand type(s) for *: '{}' and 'int'",
                        py_type_name(&value)
                    )))
                }
            };
            let scale = 10f64.powf(p as f64);
            let y = x * scale;
            if !y.is_finite() {
                return Err(invalid(
                    "OverflowError: cannot convert float infinity to integer",
                ));
            }
            let r = if method == "ceil" {
                y.ceil()
            } else {
                y.floor()
            };
            Ok(Value::from(r / scale))
        }
        _ => Err(invalid("method must be common, ceil or floor")),
    }
}

// ---------------------------------------------------------------------------
// Sorting and aggregating filters (Jinja2 3.1)

/// Python's `<` between two values: numbers (bools included) by value,
/// strings by code point, lists and tuples item by item; anything else is a
/// `TypeError`, as in Python.
fn py_cmp(a: &Value, b: &Value) -> Result<std::cmp::Ordering, Error> {
    use std::cmp::Ordering;
    let numeric = |v: &Value| matches!(v.kind(), ValueKind::Number | ValueKind::Bool);
    if numeric(a) && numeric(b) {
        let as_f = |v: &Value| -> f64 {
            if v.kind() == ValueKind::Bool {
                f64::from(u8::from(v.is_true()))
            } else {
                f64::try_from(v.clone()).unwrap_or(f64::NAN)
            }
        };
        if a.is_integer() && b.is_integer() {
            if let (Ok(x), Ok(y)) = (i128::try_from(a.clone()), i128::try_from(b.clone())) {
                return Ok(x.cmp(&y));
            }
        }
        return Ok(as_f(a).partial_cmp(&as_f(b)).unwrap_or(Ordering::Equal));
    }
    if let (Some(x), Some(y)) = (a.as_str(), b.as_str()) {
        return Ok(x.cmp(y));
    }
    let tuple = |v: &Value| v.downcast_object_ref::<PyTuple>().is_some();
    if a.kind() == ValueKind::Seq && b.kind() == ValueKind::Seq && tuple(a) == tuple(b) {
        let xs: Vec<Value> = a.try_iter()?.collect();
        let ys: Vec<Value> = b.try_iter()?.collect();
        for (x, y) in xs.iter().zip(&ys) {
            if x == y {
                continue;
            }
            return py_cmp(x, y);
        }
        return Ok(xs.len().cmp(&ys.len()));
    }
    Err(invalid(format!(
        "TypeError: '<' not supported between instances of '{}' and '{}'",
        py_type_name(a),
        py_type_name(b)
    )))
}

/// Sort `items` by `key` with Python's comparison (stable).
fn py_sort_by_key(items: &mut [(Value, Value)], reverse: bool) -> Result<(), Error> {
    let mut err = None;
    items.sort_by(|(ka, _), (kb, _)| match py_cmp(ka, kb) {
        Ok(o) => {
            if reverse {
                o.reverse()
            } else {
                o
            }
        }
        Err(e) => {
            err.get_or_insert(e);
            std::cmp::Ordering::Equal
        }
    });
    err.map_or(Ok(()), Err)
}

/// Jinja2's `ignore_case`: lowercase strings, leave the rest.
fn ignore_case(v: Value) -> Value {
    match v.as_str() {
        Some(s) => Value::from(s.to_lowercase()),
        None => v,
    }
}

/// Jinja2's `make_attrgetter`: a dotted path of attributes / item indices.
fn attr_of(item: &Value, attribute: Option<&Value>) -> Result<Value, Error> {
    match attribute {
        None => Ok(item.clone()),
        Some(a) if a.is_none() => Ok(item.clone()),
        Some(a) => match a.as_str() {
            Some(path) => get_path(item, path),
            None => item.get_item(a),
        },
    }
}

/// `indent(width=4, first=False, blank=False)`, lines split as Python's
/// `splitlines` does.
pub fn filter_indent(
    value: Value,
    width: Option<Value>,
    first: Option<bool>,
    blank: Option<bool>,
    kwargs: Kwargs,
) -> Result<Value, Error> {
    let width = kwargs.get::<Option<Value>>("width")?.or(width);
    let first = kwargs
        .get::<Option<bool>>("first")?
        .or(first)
        .unwrap_or(false);
    let blank = kwargs
        .get::<Option<bool>>("blank")?
        .or(blank)
        .unwrap_or(false);
    kwargs.assert_all_used()?;
    let indention = match &width {
        None => "    ".to_string(),
        Some(w) => match (w.as_str(), w.as_i64()) {
            (Some(s), _) => s.to_string(),
            (None, Some(n)) => {
                let n = usize::try_from(n).unwrap_or(0);
                if n > 4096 {
                    return Err(invalid(format!(
                        "{}indent: width {n} is too large",
                        crate::template::LIMIT_MARKER
                    )));
                }
                " ".repeat(n)
            }
            _ => return Err(invalid("indent: width must be an integer or a string")),
        },
    };
    let mut s = py_str_checked(&value)?;
    s.push('\n');
    // Every line may get the indention: refuse before splitting.
    let lines = splitlines_bound(&s);
    check_items("indent", Some(lines))?;
    check_string(
        "indent",
        lines
            .checked_mul(indention.len() + 1)
            .and_then(|n| n.checked_add(s.len())),
    )?;
    let lines = py_splitlines(&s, false);
    let mut rv = if blank {
        lines.join(&format!("\n{indention}"))
    } else {
        let mut it = lines.into_iter();
        let mut rv = it.next().unwrap_or_default();
        let rest: Vec<String> = it
            .map(|l| {
                if l.is_empty() {
                    l
                } else {
                    format!("{indention}{l}")
                }
            })
            .collect();
        if !rest.is_empty() {
            rv.push('\n');
            rv.push_str(&rest.join("\n"));
        }
        rv
    };
    if first {
        rv.insert_str(0, &indention);
    }
    Ok(Value::from(rv))
}

/// `replace(old, new, count=None)`: `str(s).replace(str(old), str(new), count)`.
pub fn filter_replace(
    value: Value,
    old: Value,
    new: Value,
    count: Option<Value>,
) -> Result<Value, Error> {
    let (s, old, new) = (
        py_str_checked(&value)?,
        py_str_checked(&old)?,
        py_str_checked(&new)?,
    );
    let count = match count {
        None => -1,
        Some(c) if c.is_none() => -1,
        Some(c) => c
            .as_i64()
            .ok_or_else(|| invalid("TypeError: replace count must be an integer"))?,
    };
    let count = usize::try_from(count).ok();
    check_string("replace", replaced_len(&s, &old, &new, count))?;
    Ok(Value::from(match count {
        None => s.replace(&old, &new),
        Some(n) => s.replacen(&old, &new, n),
    }))
}

/// `dictsort(case_sensitive=False, by='key', reverse=False)`: a list of
/// `(key, value)` tuples.
pub fn filter_dictsort(
    value: Value,
    case_sensitive: Option<bool>,
    by: Option<String>,
    reverse: Option<bool>,
    kwargs: Kwargs,
) -> Result<Value, Error> {
    let case_sensitive = kwargs
        .get::<Option<bool>>("case_sensitive")?
        .or(case_sensitive)
        .unwrap_or(false);
    let by = kwargs.get::<Option<String>>("by")?.or(by);
    let reverse = kwargs
        .get::<Option<bool>>("reverse")?
        .or(reverse)
        .unwrap_or(false);
    kwargs.assert_all_used()?;
    let pos = match by.as_deref() {
        None | Some("key") => 0,
        Some("value") => 1,
        Some(_) => return Err(invalid("You can only sort by either \"key\" or \"value\"")),
    };
    if value.kind() != ValueKind::Map {
        return Err(invalid("AttributeError: value has no attribute 'items'"));
    }
    let mut items: Vec<(Value, Value)> = Vec::new();
    for k in value.try_iter()? {
        let v = value.get_item(&k)?;
        let key = if pos == 0 { k.clone() } else { v.clone() };
        let key = if case_sensitive {
            key
        } else {
            ignore_case(key)
        };
        items.push((key, PyTuple::value(vec![k, v])));
    }
    py_sort_by_key(&mut items, reverse)?;
    Ok(Value::from(
        items.into_iter().map(|(_, t)| t).collect::<Vec<_>>(),
    ))
}

/// `min` / `max (case_sensitive=False, attribute=None)`: the first smallest
/// (largest) item; undefined for an empty sequence.
fn min_or_max(value: Value, kwargs: Kwargs, want_max: bool) -> Result<Value, Error> {
    let case_sensitive = kwargs
        .get::<Option<bool>>("case_sensitive")?
        .unwrap_or(false);
    let attribute: Option<Value> = kwargs.get("attribute")?;
    kwargs.assert_all_used()?;
    let mut best: Option<(Value, Value)> = None;
    for item in value.try_iter()? {
        let key = attr_of(&item, attribute.as_ref())?;
        let key = if case_sensitive {
            key
        } else {
            ignore_case(key)
        };
        let replace = match &best {
            None => true,
            Some((bk, _)) => {
                let o = py_cmp(&key, bk)?;
                if want_max {
                    o == std::cmp::Ordering::Greater
                } else {
                    o == std::cmp::Ordering::Less
                }
            }
        };
        if replace {
            best = Some((key, item));
        }
    }
    Ok(best.map_or(Value::UNDEFINED, |(_, v)| v))
}

pub fn filter_min(value: Value, kwargs: Kwargs) -> Result<Value, Error> {
    min_or_max(value, kwargs, false)
}

pub fn filter_max(value: Value, kwargs: Kwargs) -> Result<Value, Error> {
    min_or_max(value, kwargs, true)
}

/// `sum(attribute=None, start=0)`: Python's `sum`, left to right.
pub fn filter_sum(value: Value, kwargs: Kwargs) -> Result<Value, Error> {
    let attribute: Option<Value> = kwargs.get("attribute")?;
    let start: Option<Value> = kwargs.get("start")?;
    kwargs.assert_all_used()?;
    enum Acc {
        Int(i128),
        Float(f64),
    }
    let num = |v: &Value| -> Result<Acc, Error> {
        match v.kind() {
            ValueKind::Bool => Ok(Acc::Int(i128::from(v.is_true()))),
            ValueKind::Number if v.is_integer() => i128::try_from(v.clone())
                .map(Acc::Int)
                .map_err(|_| invalid("sum: integer out of range")),
            ValueKind::Number => Ok(Acc::Float(f64::try_from(v.clone()).unwrap_or(f64::NAN))),
            _ => Err(invalid(format!(
                "TypeError: unsupported operand type(s) for +: 'int' and '{}'",
                py_type_name(v)
            ))),
        }
    };
    let mut acc = match &start {
        None => Acc::Int(0),
        Some(s) => num(s)?,
    };
    for item in value.try_iter()? {
        let x = num(&attr_of(&item, attribute.as_ref())?)?;
        acc = match (acc, x) {
            (Acc::Int(a), Acc::Int(b)) => Acc::Int(
                a.checked_add(b)
                    .ok_or_else(|| invalid("sum: integer overflow"))?,
            ),
            (Acc::Int(a), Acc::Float(b)) => Acc::Float(a as f64 + b),
            (Acc::Float(a), Acc::Int(b)) => Acc::Float(a + b as f64),
            (Acc::Float(a), Acc::Float(b)) => Acc::Float(a + b),
        };
    }
    Ok(match acc {
        Acc::Int(i) => Value::from(i),
        Acc::Float(f) => Value::from(f),
    })
}

/// `groupby(attribute, default=None, case_sensitive=False)`: sorted groups as
/// `(grouper, list)` named tuples.
pub fn filter_groupby(value: Value, attribute: Value, kwargs: Kwargs) -> Result<Value, Error> {
    let default: Option<Value> = kwargs.get("default")?;
    let case_sensitive = kwargs
        .get::<Option<bool>>("case_sensitive")?
        .unwrap_or(false);
    kwargs.assert_all_used()?;
    let get = |item: &Value| -> Result<Value, Error> {
        let v = attr_of(item, Some(&attribute)).unwrap_or(Value::UNDEFINED);
        Ok(match (&default, v.is_undefined()) {
            (Some(d), true) => d.clone(),
            _ => v,
        })
    };
    let mut items: Vec<(Value, Value)> = Vec::new();
    for item in value.try_iter()? {
        let key = get(&item)?;
        let key = if case_sensitive {
            key
        } else {
            ignore_case(key)
        };
        items.push((key, item));
    }
    py_sort_by_key(&mut items, false)?;
    let mut groups: Vec<Value> = Vec::new();
    let mut i = 0;
    while i < items.len() {
        let mut j = i + 1;
        while j < items.len() && items[j].0 == items[i].0 {
            j += 1;
        }
        let members: Vec<Value> = items[i..j].iter().map(|(_, v)| v.clone()).collect();
        let grouper = if case_sensitive {
            items[i].0.clone()
        } else {
            get(&members[0])?
        };
        groups.push(Value::from_object(PyTuple(
            vec![grouper, Value::from(members)],
            &["grouper", "list"],
        )));
        i = j;
    }
    Ok(Value::from(groups))
}

/// `center(width=80)`: `str(value).center(width)`.
pub fn filter_center(value: Value, width: Option<i64>) -> Result<Value, Error> {
    py_pad(&py_str_checked(&value)?, "center", width.unwrap_or(80), ' ').map(Value::from)
}

/// `wordcount`: the number of `\w+` runs (letters, digits, `_`).
pub fn filter_wordcount(value: Value) -> Result<Value, Error> {
    let s = py_str_checked(&value)?;
    let is_word = |c: char| c == '_' || is_alpha(c) || is_numeric(c);
    let mut n = 0;
    let mut in_word = false;
    for c in s.chars() {
        let w = is_word(c);
        if w && !in_word {
            n += 1;
        }
        in_word = w;
    }
    Ok(Value::from(n))
}

/// `truncate(length=255, killwords=False, end='...', leeway=5)` (`leeway`
/// by keyword only).
pub fn filter_truncate(
    value: Value,
    length: Option<i64>,
    killwords: Option<bool>,
    end: Option<String>,
    kwargs: Kwargs,
) -> Result<Value, Error> {
    let length = kwargs
        .get::<Option<i64>>("length")?
        .or(length)
        .unwrap_or(255);
    let killwords = kwargs
        .get::<Option<bool>>("killwords")?
        .or(killwords)
        .unwrap_or(false);
    let end = kwargs
        .get::<Option<String>>("end")?
        .or(end)
        .unwrap_or_else(|| "...".into());
    let leeway = kwargs.get::<Option<i64>>("leeway")?.unwrap_or(5);
    kwargs.assert_all_used()?;
    let s = py_str_checked(&value)?;
    let end_len = end.chars().count() as i64;
    if length < end_len {
        return Err(invalid(format!(
            "AssertionError: expected length >= {end_len}, got {length}"
        )));
    }
    if leeway < 0 {
        return Err(invalid(format!(
            "AssertionError: expected leeway >= 0, got {leeway}"
        )));
    }
    let chars: Vec<char> = s.chars().collect();
    if chars.len() as i64 <= length + leeway {
        return Ok(Value::from(s));
    }
    let keep: String = chars[..(length - end_len) as usize].iter().collect();
    let result = if killwords {
        keep
    } else {
        match keep.rfind(' ') {
            Some(i) => keep[..i].to_string(),
            None => keep,
        }
    };
    Ok(Value::from(result + &end))
}

/// `length` / `count`: Python's `len()`; an undefined value has length 0.
pub fn filter_length(value: Value) -> Result<Value, Error> {
    match value.kind() {
        ValueKind::Undefined => Ok(Value::from(0)),
        ValueKind::String => Ok(Value::from(
            value.as_str().unwrap_or_default().chars().count(),
        )),
        ValueKind::None | ValueKind::Bool | ValueKind::Number => Err(invalid(format!(
            "TypeError: object of type '{}' has no len()",
            py_type_name(&value)
        ))),
        _ => match value.len() {
            Some(n) => Ok(Value::from(n)),
            None => match value.try_iter() {
                Ok(it) => Ok(Value::from(it.count())),
                Err(_) => Err(invalid(format!(
                    "TypeError: object of type '{}' has no len()",
                    py_type_name(&value)
                ))),
            },
        },
    }
}
