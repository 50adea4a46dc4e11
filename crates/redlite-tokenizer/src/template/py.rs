//! Python semantics for chat templates: `str` methods, Jinja2 filters whose
//! behaviour differs from minijinja's, Python tuples and integers beyond 128
//! bits, and a JSON reader that keeps numbers as Python's `json.loads` does.
//!
//! Every function here follows CPython 3 / Jinja2 3.1 and is tested against
//! them (`tests/template_python.rs`).

use std::fmt::Write as _;
use std::sync::Arc;

use minijinja::value::{from_args, Enumerator, Kwargs, Object, ObjectRepr, ValueKind};
use minijinja::{Error, ErrorKind, State, Value};
use unicode_general_category::{get_general_category, GeneralCategory as Gc};

fn invalid(msg: impl Into<String>) -> Error {
    Error::new(ErrorKind::InvalidOperation, msg.into())
}

// ---------------------------------------------------------------------------
// Character classes

/// Python's `str.isspace()` for one character: Unicode White_Space plus the
/// information separators `\x1c`–`\x1f`.
pub fn py_isspace(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// A line boundary of Python's `str.splitlines()` (`\r\n` is one boundary).
fn is_line_boundary(c: char) -> bool {
    matches!(
        c,
        '\n' | '\r'
            | '\u{b}'
            | '\u{c}'
            | '\u{1c}'
            | '\u{1d}'
            | '\u{1e}'
            | '\u{85}'
            | '\u{2028}'
            | '\u{2029}'
    )
}

/// Python's `str.isprintable()` for one character.
pub fn py_isprintable(c: char) -> bool {
    if c == ' ' {
        return true;
    }
    !matches!(
        get_general_category(c),
        Gc::Control
            | Gc::Format
            | Gc::Surrogate
            | Gc::PrivateUse
            | Gc::Unassigned
            | Gc::LineSeparator
            | Gc::ParagraphSeparator
            | Gc::SpaceSeparator
    )
}

fn is_titlecase(c: char) -> bool {
    get_general_category(c) == Gc::TitlecaseLetter
}

/// Python's notion of a cased character (Lowercase, Uppercase or Lt).
fn is_cased(c: char) -> bool {
    c.is_lowercase() || c.is_uppercase() || is_titlecase(c)
}

/// Full titlecase mapping (Python `_PyUnicode_ToTitleFull`). Rust's standard
/// library has none; titlecase equals uppercase except for these characters.
fn push_title(c: char, out: &mut String) {
    let special: Option<&str> = match c {
        '\u{1c4}'..='\u{1c6}' => Some("\u{1c5}"),
        '\u{1c7}'..='\u{1c9}' => Some("\u{1c8}"),
        '\u{1ca}'..='\u{1cc}' => Some("\u{1cb}"),
        '\u{1f1}'..='\u{1f3}' => Some("\u{1f2}"),
        'ß' => Some("Ss"),
        '\u{587}' => Some("\u{535}\u{582}"),
        '\u{fb00}' => Some("Ff"),
        '\u{fb01}' => Some("Fi"),
        '\u{fb02}' => Some("Fl"),
        '\u{fb03}' => Some("Ffi"),
        '\u{fb04}' => Some("Ffl"),
        '\u{fb05}' | '\u{fb06}' => Some("St"),
        '\u{fb13}' => Some("\u{544}\u{576}"),
        '\u{fb14}' => Some("\u{544}\u{565}"),
        '\u{fb15}' => Some("\u{544}\u{56b}"),
        '\u{fb16}' => Some("\u{54e}\u{576}"),
        '\u{fb17}' => Some("\u{544}\u{56d}"),
        _ => None,
    };
    match special {
        Some(s) => out.push_str(s),
        None if is_titlecase(c) => out.push(c),
        None => out.extend(c.to_uppercase()),
    }
}

// ---------------------------------------------------------------------------
// str methods

/// Python `str.strip(chars)` family. `chars = None` strips whitespace.
pub fn py_strip<'a>(s: &'a str, chars: Option<&str>, left: bool, right: bool) -> &'a str {
    let pred = |c: char| match chars {
        None => py_isspace(c),
        Some(set) => set.contains(c),
    };
    let mut out = s;
    if left {
        out = out.trim_start_matches(pred);
    }
    if right {
        out = out.trim_end_matches(pred);
    }
    out
}

/// Python `str.split(sep, maxsplit)`.
fn py_split(s: &str, sep: Option<&str>, maxsplit: i64) -> Result<Vec<String>, Error> {
    let mut out = Vec::new();
    let mut left = if maxsplit < 0 {
        usize::MAX
    } else {
        maxsplit as usize
    };
    match sep {
        Some("") => return Err(invalid("ValueError: empty separator")),
        Some(sep) => {
            let mut rest = s;
            while left > 0 {
                match rest.find(sep) {
                    Some(i) => {
                        out.push(rest[..i].to_string());
                        rest = &rest[i + sep.len()..];
                        left -= 1;
                    }
                    None => break,
                }
            }
            out.push(rest.to_string());
        }
        None => {
            let mut rest = s.trim_start_matches(py_isspace);
            while !rest.is_empty() {
                if left == 0 {
                    out.push(rest.to_string());
                    break;
                }
                match rest.find(py_isspace) {
                    Some(i) => {
                        out.push(rest[..i].to_string());
                        rest = rest[i..].trim_start_matches(py_isspace);
                        left -= 1;
                    }
                    None => {
                        out.push(rest.to_string());
                        break;
                    }
                }
            }
        }
    }
    Ok(out)
}

/// Python `str.rsplit(sep, maxsplit)`.
fn py_rsplit(s: &str, sep: Option<&str>, maxsplit: i64) -> Result<Vec<String>, Error> {
    if maxsplit < 0 {
        return py_split(s, sep, maxsplit);
    }
    let mut left = maxsplit as usize;
    let mut out = Vec::new();
    match sep {
        Some("") => return Err(invalid("ValueError: empty separator")),
        Some(sep) => {
            let mut rest = s;
            while left > 0 {
                match rest.rfind(sep) {
                    Some(i) => {
                        out.push(rest[i + sep.len()..].to_string());
                        rest = &rest[..i];
                        left -= 1;
                    }
                    None => break,
                }
            }
            out.push(rest.to_string());
        }
        None => {
            let mut rest = s.trim_end_matches(py_isspace);
            while !rest.is_empty() {
                if left == 0 {
                    out.push(rest.to_string());
                    break;
                }
                match rest.rfind(py_isspace) {
                    Some(i) => {
                        let ws_len = rest[i..].chars().next().map_or(1, char::len_utf8);
                        out.push(rest[i + ws_len..].to_string());
                        rest = rest[..i].trim_end_matches(py_isspace);
                        left -= 1;
                    }
                    None => {
                        out.push(rest.to_string());
                        break;
                    }
                }
            }
        }
    }
    out.reverse();
    Ok(out)
}

/// Python `str.splitlines(keepends)`.
fn py_splitlines(s: &str, keepends: bool) -> Vec<String> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut it = s.char_indices().peekable();
    while let Some((i, c)) = it.next() {
        if !is_line_boundary(c) {
            continue;
        }
        let mut end = i + c.len_utf8();
        if c == '\r' {
            if let Some(&(j, '\n')) = it.peek() {
                end = j + 1;
                it.next();
            }
        }
        out.push(s[start..if keepends { end } else { i }].to_string());
        start = end;
    }
    if start < s.len() {
        out.push(s[start..].to_string());
    }
    out
}

/// Python `str.title()`: a character after a cased one is lowercased, any
/// other is titlecased ("they're" → "They'Re").
fn py_title_method(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut prev_cased = false;
    let chars: Vec<char> = s.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        if prev_cased {
            if c == '\u{3a3}' {
                out.push(sigma_lower(&chars, i));
            } else {
                out.extend(c.to_lowercase());
            }
        } else {
            push_title(c, &mut out);
        }
        prev_cased = is_cased(c);
    }
    out
}

/// Unicode's case-ignorable characters (approximation: marks, format
/// characters, modifier letters and symbols, and the word-internal
/// punctuation of the Word_Break property).
fn is_case_ignorable(c: char) -> bool {
    matches!(
        c,
        '\'' | '.' | ':' | '^' | '`' | '\u{b7}' | '\u{2018}' | '\u{2019}' | '\u{2024}' | '\u{2027}'
    ) || matches!(
        get_general_category(c),
        Gc::NonspacingMark
            | Gc::EnclosingMark
            | Gc::Format
            | Gc::ModifierLetter
            | Gc::ModifierSymbol
    )
}

/// Lowercase of the capital sigma at `chars[i]`: final `ς` when a cased
/// letter precedes it and none follows (skipping case-ignorables), as
/// CPython's `lower()` and `title()` do.
fn sigma_lower(chars: &[char], i: usize) -> char {
    let before = chars[..i]
        .iter()
        .rev()
        .find(|&&c| !is_case_ignorable(c))
        .is_some_and(|&c| is_cased(c));
    let after = chars[i + 1..]
        .iter()
        .find(|&&c| !is_case_ignorable(c))
        .is_some_and(|&c| is_cased(c));
    if before && !after {
        '\u{3c2}'
    } else {
        '\u{3c3}'
    }
}

/// Python `str.capitalize()` (3.8+): first character titlecased, the rest
/// lowercased.
fn py_capitalize(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    if let Some(c) = chars.next() {
        push_title(c, &mut out);
    }
    out.push_str(&chars.as_str().to_lowercase());
    out
}

fn py_islower(s: &str) -> bool {
    let mut cased = false;
    for c in s.chars() {
        if c.is_uppercase() || is_titlecase(c) {
            return false;
        }
        cased |= c.is_lowercase();
    }
    cased
}

fn py_isupper(s: &str) -> bool {
    let mut cased = false;
    for c in s.chars() {
        if c.is_lowercase() || is_titlecase(c) {
            return false;
        }
        cased |= c.is_uppercase();
    }
    cased
}

fn py_istitle(s: &str) -> bool {
    let mut cased = false;
    let mut prev_cased = false;
    for c in s.chars() {
        if c.is_uppercase() || is_titlecase(c) {
            if prev_cased {
                return false;
            }
            prev_cased = true;
            cased = true;
        } else if c.is_lowercase() {
            if !prev_cased {
                return false;
            }
            prev_cased = true;
            cased = true;
        } else {
            prev_cased = false;
        }
    }
    cased
}

fn is_alpha(c: char) -> bool {
    matches!(
        get_general_category(c),
        Gc::UppercaseLetter
            | Gc::LowercaseLetter
            | Gc::TitlecaseLetter
            | Gc::ModifierLetter
            | Gc::OtherLetter
    )
}

fn is_decimal(c: char) -> bool {
    get_general_category(c) == Gc::DecimalNumber
}

fn is_digit(c: char) -> bool {
    is_decimal(c)
        || matches!(c, '\u{b2}' | '\u{b3}' | '\u{b9}' | '\u{2070}' | '\u{2074}'..='\u{2079}'
            | '\u{2080}'..='\u{2089}' | '\u{2460}'..='\u{2468}' | '\u{2474}'..='\u{247c}'
            | '\u{2488}'..='\u{2490}' | '\u{24f5}'..='\u{24fd}' | '\u{2776}'..='\u{277e}'
            | '\u{2780}'..='\u{2788}' | '\u{278a}'..='\u{2792}')
}

fn is_numeric(c: char) -> bool {
    is_digit(c) || matches!(get_general_category(c), Gc::LetterNumber | Gc::OtherNumber)
}

/// All characters satisfy `pred` and there is at least one.
fn all_nonempty(s: &str, pred: impl Fn(char) -> bool) -> bool {
    !s.is_empty() && s.chars().all(pred)
}

/// Python slice bounds `[start:end]` over `len` items (negative indices count
/// from the end; out-of-range bounds clamp). Returns (start, end) with start
/// possibly greater than end or `len`.
fn slice_bounds(len: usize, start: Option<i64>, end: Option<i64>) -> (usize, usize) {
    let len_i = len as i64;
    let adj = |v: i64| -> i64 {
        if v < 0 {
            (v + len_i).max(0)
        } else {
            v
        }
    };
    let s = start.map_or(0, adj);
    let e = end.map_or(len_i, adj).min(len_i);
    (s as usize, e.max(0) as usize)
}

/// Byte offset of the `n`-th character (or the end of the string).
fn char_to_byte(s: &str, n: usize) -> usize {
    s.char_indices().nth(n).map_or(s.len(), |(i, _)| i)
}

/// `str.find` / `rfind` / `count` on character offsets, as Python does.
fn find_like(
    s: &str,
    sub: &str,
    start: Option<i64>,
    end: Option<i64>,
    reverse: bool,
) -> Option<usize> {
    let len = s.chars().count();
    let (a, b) = slice_bounds(len, start, end);
    if a > len || a > b {
        return None;
    }
    let (ba, bb) = (char_to_byte(s, a), char_to_byte(s, b));
    let hay = &s[ba..bb];
    let hit = if reverse {
        hay.rfind(sub)
    } else {
        hay.find(sub)
    }?;
    Some(a + hay[..hit].chars().count())
}

fn py_count(s: &str, sub: &str, start: Option<i64>, end: Option<i64>) -> usize {
    let len = s.chars().count();
    let (a, b) = slice_bounds(len, start, end);
    if a > len || a > b {
        return 0;
    }
    let (ba, bb) = (char_to_byte(s, a), char_to_byte(s, b));
    let hay = &s[ba..bb];
    if sub.is_empty() {
        // An empty needle matches between every two characters and at both
        // ends; never search for it (that loops forever).
        return b - a + 1;
    }
    hay.matches(sub).count()
}

/// `(sub, start=None, end=None)` arguments of `find`-like methods.
fn find_args(args: &[Value]) -> Result<(String, Option<i64>, Option<i64>), Error> {
    let (sub, start, end): (&Value, Option<Value>, Option<Value>) = from_args(args)?;
    let Some(sub) = sub.as_str() else {
        return Err(invalid(format!(
            "TypeError: must be str, not {}",
            py_type_name(sub)
        )));
    };
    let opt_int = |v: Option<Value>| -> Result<Option<i64>, Error> {
        match v {
            None => Ok(None),
            Some(v) if v.is_none() => Ok(None),
            Some(v) => v
                .as_i64()
                .map(Some)
                .ok_or_else(|| invalid("TypeError: slice indices must be integers or None")),
        }
    };
    Ok((sub.to_string(), opt_int(start)?, opt_int(end)?))
}

/// `(sep=None, maxsplit=-1)` arguments of `split`/`rsplit`, positional or
/// keyword.
fn split_args(args: &[Value]) -> Result<(Option<String>, i64), Error> {
    let (sep, maxsplit, kwargs): (Option<Value>, Option<i64>, Kwargs) = from_args(args)?;
    let sep = match kwargs.get::<Option<Value>>("sep")? {
        Some(v) => Some(v),
        None => sep,
    };
    let maxsplit = kwargs.get::<Option<i64>>("maxsplit")?.or(maxsplit);
    kwargs.assert_all_used()?;
    let sep = match sep {
        None => None,
        Some(v) if v.is_none() => None,
        Some(v) => match v.as_str() {
            Some(s) => Some(s.to_string()),
            None => {
                return Err(invalid(format!(
                    "TypeError: must be str or None, not {}",
                    py_type_name(&v)
                )))
            }
        },
    };
    Ok((sep, maxsplit.unwrap_or(-1)))
}

fn strings(v: Vec<String>) -> Value {
    Value::from(v.into_iter().map(Value::from).collect::<Vec<_>>())
}

/// Python string methods that minijinja-contrib's pycompat gets wrong or lacks.
fn string_method(s: &str, method: &str, args: &[Value]) -> Option<Result<Value, Error>> {
    let r = match method {
        "strip" | "lstrip" | "rstrip" => (|| {
            let (chars,): (Option<Value>,) = from_args(args)?;
            let chars = match &chars {
                Some(v) if !v.is_none() => Some(v.as_str().ok_or_else(|| {
                    invalid(format!("TypeError: {method} arg must be None or str"))
                })?),
                _ => None,
            };
            Ok(Value::from(py_strip(
                s,
                chars,
                method != "rstrip",
                method != "lstrip",
            )))
        })(),
        "split" => {
            split_args(args).and_then(|(sep, n)| py_split(s, sep.as_deref(), n).map(strings))
        }
        "rsplit" => {
            split_args(args).and_then(|(sep, n)| py_rsplit(s, sep.as_deref(), n).map(strings))
        }
        "splitlines" => (|| {
            let (keepends, kwargs): (Option<bool>, Kwargs) = from_args(args)?;
            let keepends = kwargs.get::<Option<bool>>("keepends")?.or(keepends);
            kwargs.assert_all_used()?;
            Ok(strings(py_splitlines(s, keepends.unwrap_or(false))))
        })(),
        "count" => find_args(args).map(|(sub, a, b)| Value::from(py_count(s, &sub, a, b))),
        "find" | "rfind" | "index" | "rindex" => find_args(args).and_then(|(sub, a, b)| {
            let reverse = method.starts_with('r');
            match find_like(s, &sub, a, b, reverse) {
                Some(i) => Ok(Value::from(i)),
                None if method.ends_with("find") => Ok(Value::from(-1)),
                None => Err(invalid("ValueError: substring not found")),
            }
        }),
        "title" => from_args::<()>(args).map(|()| Value::from(py_title_method(s))),
        "capitalize" => from_args::<()>(args).map(|()| Value::from(py_capitalize(s))),
        "islower" => from_args::<()>(args).map(|()| Value::from(py_islower(s))),
        "isupper" => from_args::<()>(args).map(|()| Value::from(py_isupper(s))),
        "istitle" => from_args::<()>(args).map(|()| Value::from(py_istitle(s))),
        "isspace" => from_args::<()>(args).map(|()| Value::from(all_nonempty(s, py_isspace))),
        "isalpha" => from_args::<()>(args).map(|()| Value::from(all_nonempty(s, is_alpha))),
        "isdecimal" => from_args::<()>(args).map(|()| Value::from(all_nonempty(s, is_decimal))),
        "isdigit" => from_args::<()>(args).map(|()| Value::from(all_nonempty(s, is_digit))),
        "isnumeric" => from_args::<()>(args).map(|()| Value::from(all_nonempty(s, is_numeric))),
        "isalnum" => from_args::<()>(args)
            .map(|()| Value::from(all_nonempty(s, |c| is_alpha(c) || is_numeric(c)))),
        "swapcase" => from_args::<()>(args).map(|()| {
            let mut out = String::with_capacity(s.len());
            let chars: Vec<char> = s.chars().collect();
            for (i, &c) in chars.iter().enumerate() {
                if c.is_uppercase() {
                    if c == '\u{3a3}' {
                        out.push(sigma_lower(&chars, i));
                    } else {
                        out.extend(c.to_lowercase());
                    }
                } else if c.is_lowercase() {
                    out.extend(c.to_uppercase());
                } else {
                    out.push(c);
                }
            }
            Value::from(out)
        }),
        "casefold" => from_args::<()>(args).map(|()| {
            // Full case folding; `lower` plus the folds that differ from it.
            let mut out = String::with_capacity(s.len());
            for c in s.chars() {
                match c {
                    'ß' | '\u{1e9e}' => out.push_str("ss"),
                    '\u{3c2}' => out.push('\u{3c3}'),
                    _ => out.extend(c.to_lowercase()),
                }
            }
            Value::from(out)
        }),
        "removeprefix" | "removesuffix" => (|| {
            let (affix,): (&str,) = from_args(args)?;
            Ok(Value::from(if method == "removeprefix" {
                s.strip_prefix(affix).unwrap_or(s)
            } else {
                s.strip_suffix(affix).unwrap_or(s)
            }))
        })(),
        "partition" | "rpartition" => (|| {
            let (sep,): (&str,) = from_args(args)?;
            if sep.is_empty() {
                return Err(invalid("ValueError: empty separator"));
            }
            let hit = if method == "partition" {
                s.find(sep)
            } else {
                s.rfind(sep)
            };
            let parts: [&str; 3] = match hit {
                Some(i) => [&s[..i], sep, &s[i + sep.len()..]],
                None if method == "partition" => [s, "", ""],
                None => ["", "", s],
            };
            Ok(PyTuple::value(
                parts.iter().map(|p| Value::from(*p)).collect(),
            ))
        })(),
        "ljust" | "rjust" | "center" | "zfill" => (|| {
            let (width, fill): (i64, Option<&str>) = from_args(args)?;
            let fill = match fill {
                None => ' ',
                Some(f) if f.chars().count() == 1 && method != "zfill" => {
                    f.chars().next().unwrap_or(' ')
                }
                Some(_) => {
                    return Err(invalid(
                        "TypeError: The fill character must be exactly one character long",
                    ))
                }
            };
            py_pad(s, method, width, fill).map(Value::from)
        })(),
        "expandtabs" => (|| {
            let (tabsize, kwargs): (Option<i64>, Kwargs) = from_args(args)?;
            let tabsize = kwargs
                .get::<Option<i64>>("tabsize")?
                .or(tabsize)
                .unwrap_or(8);
            kwargs.assert_all_used()?;
            let mut out = String::with_capacity(s.len());
            let mut col: usize = 0;
            for c in s.chars() {
                match c {
                    '\t' => {
                        if tabsize > 0 {
                            let ts = usize::try_from(tabsize).unwrap_or(8);
                            let n = ts - col % ts;
                            if out.len() + n > super::MAX_RENDER_OUTPUT {
                                return Err(invalid(format!(
                                    "{}expandtabs: result larger than the output limit",
                                    super::LIMIT_MARKER
                                )));
                            }
                            out.extend(std::iter::repeat_n(' ', n));
                            col += n;
                        }
                    }
                    '\n' | '\r' => {
                        out.push(c);
                        col = 0;
                    }
                    c => {
                        out.push(c);
                        col += 1;
                    }
                }
            }
            Ok(Value::from(out))
        })(),
        "isprintable" => from_args::<()>(args).map(|()| Value::from(s.chars().all(py_isprintable))),
        _ => return None,
    };
    Some(r)
}

/// `str.ljust` / `rjust` / `center` / `zfill` to `width` characters.
fn py_pad(s: &str, method: &str, width: i64, fill: char) -> Result<String, Error> {
    let len = s.chars().count();
    let width = usize::try_from(width).unwrap_or(0);
    if width <= len {
        return Ok(s.to_string());
    }
    if width > super::MAX_RENDER_OUTPUT {
        return Err(invalid(format!(
            "{}{method}: width {width} is larger than the output limit",
            super::LIMIT_MARKER
        )));
    }
    let pad = width - len;
    let (left, right) = match method {
        "ljust" => (0, pad),
        "rjust" | "zfill" => (pad, 0),
        // CPython puts the odd space on the left when the width is odd.
        _ => {
            let left = pad / 2 + (pad & width & 1);
            (left, pad - left)
        }
    };
    let mut out = String::with_capacity(s.len() + pad);
    if method == "zfill" {
        let (sign, rest) = match s.chars().next() {
            Some(c @ ('+' | '-')) => (Some(c), &s[1..]),
            _ => (None, s),
        };
        out.extend(sign);
        out.extend(std::iter::repeat_n('0', left));
        out.push_str(rest);
    } else {
        out.extend(std::iter::repeat_n(fill, left));
        out.push_str(s);
        out.extend(std::iter::repeat_n(fill, right));
    }
    Ok(out)
}

/// Unknown-method callback: Python `str`/`dict` methods with Python's
/// semantics, then minijinja-contrib's pycompat for the rest.
pub fn method_callback(
    state: &State,
    value: &Value,
    method: &str,
    args: &[Value],
) -> Result<Value, Error> {
    if let Some(s) = value.as_str() {
        if let Some(r) = string_method(s, method, args) {
            return r;
        }
    }
    if value.kind() == ValueKind::Map && matches!(method, "items" | "keys" | "values") {
        let () = from_args(args)?;
        let items = match method {
            "items" => items_of(value)?.try_iter()?.collect(),
            "keys" => value.try_iter()?.collect(),
            _ => value
                .try_iter()?
                .map(|k| value.get_item(&k))
                .collect::<Result<Vec<_>, _>>()?,
        };
        let kind = match method {
            "items" => "dict_items",
            "keys" => "dict_keys",
            _ => "dict_values",
        };
        return Ok(Value::from_object(PyDictView { kind, items }));
    }
    minijinja_contrib::pycompat::unknown_method_callback(state, value, method, args)
}

// ---------------------------------------------------------------------------
// Tuples and big integers

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
fn items_of(value: &Value) -> Result<Value, Error> {
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

// ---------------------------------------------------------------------------
// Filters (Jinja2 3.1 semantics)

/// `trim(chars=None)`: `str(value).strip(chars)`.
pub fn filter_trim(value: Value, chars: Option<Value>) -> Result<Value, Error> {
    let s = super::py_str(&value);
    let chars = match &chars {
        Some(c) if !c.is_none() => Some(super::py_str(c)),
        _ => None,
    };
    Ok(Value::from(py_strip(&s, chars.as_deref(), true, true)))
}

/// Jinja2's `title` filter: split at runs of `-`, whitespace, `(`, `{`, `[`,
/// `<`; each piece gets its first character uppercased and the rest
/// lowercased ("they're" → "They're", unlike `str.title`).
pub fn filter_title(value: Value) -> Value {
    let s = super::py_str(&value);
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
    Value::from(out)
}

/// `capitalize`, `upper`, `lower` filters: the `str` method on `str(value)`.
pub fn filter_capitalize(value: Value) -> Value {
    Value::from(py_capitalize(&super::py_str(&value)))
}
pub fn filter_upper(value: Value) -> Value {
    Value::from(super::py_str(&value).to_uppercase())
}
pub fn filter_lower(value: Value) -> Value {
    Value::from(super::py_str(&value).to_lowercase())
}

/// markupsafe's `escape`: `&`, `<`, `>`, `"`, `'` as `&amp;`, `&lt;`,
/// `&gt;`, `&#34;`, `&#39;`; an already safe value is returned unchanged.
pub fn filter_escape(value: Value) -> Value {
    if value.is_safe() {
        return value;
    }
    let s = super::py_str(&value);
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
    Value::from_safe_string(out)
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
    let sep = d.map(|d| super::py_str(&d)).unwrap_or_default();
    let mut out = String::new();
    if value.is_undefined() || value.is_none() {
        if value.is_none() {
            return Err(invalid("TypeError: 'NoneType' object is not iterable"));
        }
        return Ok(Value::from(out));
    }
    for (i, item) in value.try_iter()?.enumerate() {
        if i > 0 {
            out.push_str(&sep);
        }
        let item = match &attribute {
            Some(a) if !a.is_none() => match a.as_str() {
                Some(path) => get_path(&item, path)?,
                None => item.get_item(a)?,
            },
            _ => item,
        };
        out.push_str(&super::py_str(&item));
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
    let method = method
        .map(|m| super::py_str(&m))
        .unwrap_or_else(|| "common".into());
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
// JSON as Python's json.loads reads it

/// Parse JSON text the way Python's `json.loads` does: integers of any size
/// stay integers (beyond 128 bits as an object printing its digits), every float is the
/// correctly rounded `f64`, object key order is kept (a repeated key keeps its
/// first position and last value), `NaN`/`Infinity`/`-Infinity` are accepted.
pub fn parse_json(text: &str) -> Result<Value, String> {
    let mut p = JsonParser {
        s: text.as_bytes(),
        text,
        i: 0,
        depth: 0,
    };
    p.ws();
    let v = p.value()?;
    p.ws();
    if p.i != p.s.len() {
        return Err(p.err("extra data"));
    }
    Ok(v)
}

/// Nesting limit of [`parse_json`] (serde_json's is 128 too).
const JSON_MAX_DEPTH: usize = 128;

struct JsonParser<'a> {
    s: &'a [u8],
    text: &'a str,
    i: usize,
    depth: usize,
}

impl JsonParser<'_> {
    fn err(&self, what: &str) -> String {
        format!("{what} at byte {}", self.i)
    }
    fn ws(&mut self) {
        while matches!(self.s.get(self.i), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.i += 1;
        }
    }
    fn eat(&mut self, lit: &str) -> bool {
        if self.s[self.i..].starts_with(lit.as_bytes()) {
            self.i += lit.len();
            true
        } else {
            false
        }
    }
    fn value(&mut self) -> Result<Value, String> {
        match self.s.get(self.i) {
            None => Err(self.err("unexpected end of JSON")),
            Some(b'{') => self.nested(true),
            Some(b'[') => self.nested(false),
            Some(b'"') => self.string().map(Value::from),
            Some(b't') if self.eat("true") => Ok(Value::from(true)),
            Some(b'f') if self.eat("false") => Ok(Value::from(false)),
            Some(b'n') if self.eat("null") => Ok(Value::from(())),
            Some(b'N') if self.eat("NaN") => Ok(Value::from(f64::NAN)),
            Some(b'I') if self.eat("Infinity") => Ok(Value::from(f64::INFINITY)),
            Some(b'-') if self.s[self.i..].starts_with(b"-Infinity") => {
                self.i += 9;
                Ok(Value::from(f64::NEG_INFINITY))
            }
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(_) => Err(self.err("expected a JSON value")),
        }
    }
    fn nested(&mut self, object: bool) -> Result<Value, String> {
        self.depth += 1;
        if self.depth > JSON_MAX_DEPTH {
            return Err(self.err("JSON nested too deeply"));
        }
        self.i += 1;
        self.ws();
        let close = if object { b'}' } else { b']' };
        let mut items: Vec<Value> = Vec::new();
        let mut map: indexmap_like::Pairs = indexmap_like::Pairs::default();
        if self.s.get(self.i) == Some(&close) {
            self.i += 1;
        } else {
            loop {
                if object {
                    if self.s.get(self.i) != Some(&b'"') {
                        return Err(self.err("expected a string key"));
                    }
                    let k = self.string()?;
                    self.ws();
                    if self.s.get(self.i) != Some(&b':') {
                        return Err(self.err("expected ':'"));
                    }
                    self.i += 1;
                    self.ws();
                    let v = self.value()?;
                    map.insert(k, v);
                } else {
                    items.push(self.value()?);
                }
                self.ws();
                match self.s.get(self.i) {
                    Some(b',') => {
                        self.i += 1;
                        self.ws();
                    }
                    Some(c) if *c == close => {
                        self.i += 1;
                        break;
                    }
                    _ => return Err(self.err("expected ',' or a closing bracket")),
                }
            }
        }
        self.depth -= 1;
        Ok(if object {
            map.into_value()
        } else {
            Value::from(items)
        })
    }
    fn hex4(&mut self) -> Result<u32, String> {
        let h = self
            .text
            .get(self.i..self.i + 4)
            .ok_or_else(|| self.err("truncated \\u escape"))?;
        let v = u32::from_str_radix(h, 16).map_err(|_| self.err("bad \\u escape"))?;
        self.i += 4;
        Ok(v)
    }
    fn string(&mut self) -> Result<String, String> {
        self.i += 1;
        let mut out = String::new();
        loop {
            let start = self.i;
            while let Some(&c) = self.s.get(self.i) {
                if c == b'"' || c == b'\\' || c < 0x20 {
                    break;
                }
                self.i += 1;
            }
            out.push_str(&self.text[start..self.i]);
            match self.s.get(self.i) {
                None => return Err(self.err("unterminated string")),
                Some(b'"') => {
                    self.i += 1;
                    return Ok(out);
                }
                Some(b'\\') => {
                    self.i += 1;
                    let e = *self.s.get(self.i).ok_or_else(|| self.err("bad escape"))?;
                    self.i += 1;
                    match e {
                        b'"' => out.push('"'),
                        b'\\' => out.push('\\'),
                        b'/' => out.push('/'),
                        b'b' => out.push('\u{8}'),
                        b'f' => out.push('\u{c}'),
                        b'n' => out.push('\n'),
                        b'r' => out.push('\r'),
                        b't' => out.push('\t'),
                        b'u' => {
                            let hi = self.hex4()?;
                            let mut cp = hi;
                            if (0xd800..0xdc00).contains(&hi)
                                && self.s[self.i..].starts_with(b"\\u")
                            {
                                let save = self.i;
                                self.i += 2;
                                let lo = self.hex4()?;
                                if (0xdc00..0xe000).contains(&lo) {
                                    cp = 0x10000 + ((hi - 0xd800) << 10) + (lo - 0xdc00);
                                } else {
                                    self.i = save;
                                }
                            }
                            // Lone surrogates cannot be held in a Rust string.
                            out.push(char::from_u32(cp).unwrap_or('\u{fffd}'));
                        }
                        _ => return Err(self.err("bad escape")),
                    }
                }
                Some(_) => return Err(self.err("control character in string")),
            }
        }
    }
    fn number(&mut self) -> Result<Value, String> {
        let start = self.i;
        if self.s[self.i] == b'-' {
            self.i += 1;
        }
        let int_start = self.i;
        match self.s.get(self.i) {
            Some(b'0') => self.i += 1,
            Some(b'1'..=b'9') => {
                while self.s.get(self.i).is_some_and(u8::is_ascii_digit) {
                    self.i += 1;
                }
            }
            _ => return Err(self.err("bad number")),
        }
        let _ = int_start;
        let mut is_float = false;
        if self.s.get(self.i) == Some(&b'.')
            && self.s.get(self.i + 1).is_some_and(u8::is_ascii_digit)
        {
            is_float = true;
            self.i += 1;
            while self.s.get(self.i).is_some_and(u8::is_ascii_digit) {
                self.i += 1;
            }
        }
        if matches!(self.s.get(self.i), Some(b'e' | b'E')) {
            let save = self.i;
            self.i += 1;
            if matches!(self.s.get(self.i), Some(b'+' | b'-')) {
                self.i += 1;
            }
            if self.s.get(self.i).is_some_and(u8::is_ascii_digit) {
                is_float = true;
                while self.s.get(self.i).is_some_and(u8::is_ascii_digit) {
                    self.i += 1;
                }
            } else {
                self.i = save;
            }
        }
        let text = &self.text[start..self.i];
        if is_float {
            text.parse::<f64>()
                .map(Value::from)
                .map_err(|_| self.err("bad number"))
        } else {
            Ok(int_from_decimal(text))
        }
    }
}

/// An insertion-ordered map builder with Python dict semantics for repeated
/// keys.
mod indexmap_like {
    use std::collections::HashMap;

    use minijinja::Value;

    #[derive(Default)]
    pub struct Pairs {
        index: HashMap<String, usize>,
        keys: Vec<String>,
        values: Vec<Value>,
    }

    impl Pairs {
        pub fn insert(&mut self, k: String, v: Value) {
            if let Some(&i) = self.index.get(&k) {
                self.values[i] = v;
            } else {
                self.index.insert(k.clone(), self.keys.len());
                self.keys.push(k);
                self.values.push(v);
            }
        }
        pub fn into_value(self) -> Value {
            Value::from_iter(self.keys.into_iter().map(Value::from).zip(self.values))
        }
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
                        super::LIMIT_MARKER
                    )));
                }
                " ".repeat(n)
            }
            _ => return Err(invalid("indent: width must be an integer or a string")),
        },
    };
    let mut s = super::py_str(&value);
    s.push('\n');
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
        super::py_str(&value),
        super::py_str(&old),
        super::py_str(&new),
    );
    let count = match count {
        None => -1,
        Some(c) if c.is_none() => -1,
        Some(c) => c
            .as_i64()
            .ok_or_else(|| invalid("TypeError: replace count must be an integer"))?,
    };
    Ok(Value::from(if count < 0 {
        s.replace(&old, &new)
    } else {
        s.replacen(&old, &new, usize::try_from(count).unwrap_or(0))
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
    py_pad(&super::py_str(&value), "center", width.unwrap_or(80), ' ').map(Value::from)
}

/// `wordcount`: the number of `\w+` runs (letters, digits, `_`).
pub fn filter_wordcount(value: Value) -> Value {
    let s = super::py_str(&value);
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
    Value::from(n)
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
    let s = super::py_str(&value);
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

// ---------------------------------------------------------------------------
// Tuple literals

/// A token of a Jinja expression, as far as finding tuple literals needs.
#[derive(Clone, Copy, PartialEq)]
enum Tok<'a> {
    Ident(&'a str),
    Other,
    Punct(&'a str),
}

fn tokens(src: &str) -> Vec<(usize, Tok<'_>)> {
    let b = src.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
        } else if c == b'\'' || c == b'"' {
            let start = i;
            i += 1;
            while i < b.len() && b[i] != c {
                if b[i] == b'\\' {
                    i += 1;
                }
                i += 1;
            }
            i = (i + 1).min(b.len());
            out.push((start, Tok::Other));
        } else if c == b'_' || c.is_ascii_alphabetic() || c >= 0x80 {
            let start = i;
            while i < b.len() && (b[i] == b'_' || b[i].is_ascii_alphanumeric() || b[i] >= 0x80) {
                i += 1;
            }
            out.push((start, Tok::Ident(&src[start..i])));
        } else if c.is_ascii_digit() {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'.' || b[i] == b'_') {
                i += 1;
            }
            out.push((start, Tok::Other));
        } else {
            let two = src.get(i..i + 2).unwrap_or_default();
            let len = if matches!(two, "==" | "!=" | "<=" | ">=" | "**" | "//") {
                2
            } else {
                1
            };
            out.push((i, Tok::Punct(&src[i..i + len])));
            i += len;
        }
    }
    out
}

/// Rewrite the tuple literals of one `{{ … }}` or `{% … %}` tag body into
/// calls of the tuple function; `None` when there are none. A `(` opens a
/// tuple when it does not call something (it follows an operator, a keyword
/// or nothing) and holds a top-level comma or nothing. Assignment targets
/// (`for (a, b) in`, `set (a, b) =`) are left alone.
pub fn rewrite_tuple_literals(src: &str, statement: bool) -> Option<String> {
    const KEYWORDS: &[&str] = &[
        "in", "not", "and", "or", "if", "else", "elif", "is", "for", "set", "with", "return",
        "print",
    ];
    let toks = tokens(src);
    // First token that may be part of an expression.
    let mut first = 0;
    if statement {
        let keyword = toks.iter().find_map(|(_, t)| match t {
            Tok::Ident(w) => Some(*w),
            _ => None,
        });
        let target_end = |stop: &dyn Fn(&Tok) -> bool| -> usize {
            let mut depth = 0i32;
            for (k, (_, t)) in toks.iter().enumerate() {
                match t {
                    Tok::Punct("(" | "[" | "{") => depth += 1,
                    Tok::Punct(")" | "]" | "}") => depth -= 1,
                    t if depth == 0 && stop(t) => return k + 1,
                    _ => {}
                }
            }
            toks.len()
        };
        first = match keyword {
            Some("for") => target_end(&|t| *t == Tok::Ident("in")),
            Some("set" | "with") => target_end(&|t| *t == Tok::Punct("=")),
            _ => 0,
        };
    }
    let mut inserts: Vec<usize> = Vec::new();
    for k in first..toks.len() {
        if toks[k].1 != Tok::Punct("(") {
            continue;
        }
        let calls = match k.checked_sub(1).map(|p| toks[p].1) {
            Some(Tok::Ident(w)) => !KEYWORDS.contains(&w),
            Some(Tok::Punct(")" | "]")) | Some(Tok::Other) => true,
            _ => false,
        };
        if calls {
            continue;
        }
        // Find the matching `)` and a comma directly inside.
        let mut depth = 0i32;
        let mut comma = false;
        let mut empty = true;
        let mut closed = false;
        for (_, t) in &toks[k + 1..] {
            match t {
                Tok::Punct("(" | "[" | "{") => depth += 1,
                Tok::Punct(")") if depth == 0 => {
                    closed = true;
                    break;
                }
                Tok::Punct(")" | "]" | "}") => depth -= 1,
                Tok::Punct(",") if depth == 0 => comma = true,
                _ => {}
            }
            empty = false;
        }
        if closed && (comma || empty) {
            inserts.push(toks[k].0);
        }
    }
    if inserts.is_empty() {
        return None;
    }
    let mut out = String::with_capacity(src.len() + inserts.len() * 24);
    let mut last = 0;
    for at in inserts {
        out.push_str(&src[last..at]);
        out.push(' ');
        out.push_str(super::TUPLE_FN);
        last = at;
    }
    out.push_str(&src[last..]);
    Some(out)
}
