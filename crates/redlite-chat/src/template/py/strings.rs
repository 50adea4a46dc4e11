//! Python's character classes and `str` methods, with CPython's semantics:
//! offsets in characters, Python's whitespace and line boundaries, Unicode
//! case rules. [`method_callback`] is minijinja's hook for a method it does
//! not know; what it does not handle goes to `minijinja_contrib::pycompat`.

use minijinja::value::{from_args, Kwargs, ValueKind};
use minijinja::{Error, State, Value};
use unicode_general_category::{get_general_category, GeneralCategory as Gc};

use super::{invalid, items_of, py_str_checked, py_type_name, PyDictView, PyTuple};
use crate::template::budget::{check_items, check_string, push_checked};

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
pub(crate) fn py_splitlines(s: &str, keepends: bool) -> Vec<String> {
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

/// A bound on the length of `fmt.format(*args)`: the text, plus for every
/// replacement field the widths and precisions in its spec and the longest
/// argument printed; `None` beyond `usize`.
fn str_format_bound(fmt: &str, args: &[Value]) -> Option<usize> {
    let mut longest = 0usize;
    for a in args {
        let items: Vec<Value> = if a.is_kwargs() {
            a.try_iter()
                .ok()?
                .filter_map(|k| a.get_item(&k).ok())
                .collect()
        } else {
            vec![a.clone()]
        };
        for v in items {
            longest = longest.max(v.len().unwrap_or(0).max(py_str_checked(&v).ok()?.len()));
        }
    }
    let mut bound = fmt.len();
    let mut rest = fmt;
    while let Some(open) = rest.find('{') {
        let field = &rest[open..];
        let close = field.find('}').unwrap_or(field.len());
        let mut digits = 0usize;
        for c in field[..close].chars() {
            match c.to_digit(10) {
                Some(d) => digits = digits.checked_mul(10)?.checked_add(d as usize)?,
                None => {
                    bound = bound.checked_add(digits)?;
                    digits = 0;
                }
            }
        }
        bound = bound.checked_add(digits)?.checked_add(longest)?;
        rest = &field[close.min(field.len())..];
        if close == field.len() {
            break;
        }
        rest = &rest[1..];
    }
    Some(bound)
}

/// Most lines [`py_splitlines`] can give for `s` (one more than its line
/// boundaries), counted without building them.
pub(crate) fn splitlines_bound(s: &str) -> usize {
    s.chars().filter(|&c| is_line_boundary(c)).count() + 1
}

/// Most pieces `str.split(sep)` / `rsplit(sep)` can give for `s`, counted
/// without building them.
fn split_bound(s: &str, sep: Option<&str>) -> usize {
    match sep {
        Some(sep) if !sep.is_empty() => s.matches(sep).count() + 1,
        _ => s.split(py_isspace).filter(|w| !w.is_empty()).count() + 1,
    }
}

/// Length in bytes of `s.replace(old, new, count)` (`count` `None`: every
/// occurrence), computed without building it; `None` beyond `usize`. An
/// empty `old` matches before every character and at the end, as in Python
/// and Rust.
pub(crate) fn replaced_len(s: &str, old: &str, new: &str, count: Option<usize>) -> Option<usize> {
    let found = if old.is_empty() {
        s.chars().count() + 1
    } else {
        s.matches(old).count()
    };
    let k = count.map_or(found, |c| c.min(found));
    (s.len() - k * old.len()).checked_add(k.checked_mul(new.len())?)
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
pub(crate) fn py_capitalize(s: &str) -> String {
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

pub(crate) fn is_alpha(c: char) -> bool {
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

pub(crate) fn is_numeric(c: char) -> bool {
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
        "split" => split_args(args).and_then(|(sep, n)| {
            check_items("split", Some(split_bound(s, sep.as_deref())))?;
            py_split(s, sep.as_deref(), n).map(strings)
        }),
        "rsplit" => split_args(args).and_then(|(sep, n)| {
            check_items("rsplit", Some(split_bound(s, sep.as_deref())))?;
            py_rsplit(s, sep.as_deref(), n).map(strings)
        }),
        "replace" => (|| {
            let (old, new, count): (&str, &str, Option<i64>) = from_args(args)?;
            let count = count.and_then(|c| usize::try_from(c).ok());
            check_string("replace", replaced_len(s, old, new, count))?;
            Ok(Value::from(match count {
                None => s.replace(old, new),
                Some(n) => s.replacen(old, new, n),
            }))
        })(),
        "join" => (|| {
            let (items,): (Value,) = from_args(args)?;
            let mut out = String::new();
            for (i, item) in items.try_iter()?.enumerate() {
                if i > 0 {
                    push_checked("join", &mut out, s)?;
                }
                push_checked("join", &mut out, &item.to_string())?;
            }
            Ok(Value::from(out))
        })(),
        "splitlines" => (|| {
            let (keepends, kwargs): (Option<bool>, Kwargs) = from_args(args)?;
            let keepends = kwargs.get::<Option<bool>>("keepends")?.or(keepends);
            kwargs.assert_all_used()?;
            check_items("splitlines", Some(splitlines_bound(s)))?;
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
                            check_string("expandtabs", out.len().checked_add(n))?;
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
pub(crate) fn py_pad(s: &str, method: &str, width: i64, fill: char) -> Result<String, Error> {
    let len = s.chars().count();
    let width = usize::try_from(width).unwrap_or(0);
    if width <= len {
        return Ok(s.to_string());
    }
    let pad = width - len;
    check_string(
        method,
        pad.checked_mul(fill.len_utf8())
            .and_then(|p| p.checked_add(s.len())),
    )?;
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
        if method == "format" {
            // minijinja's `str.format`, once its result is known to fit.
            check_string("str.format", str_format_bound(s, args))?;
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
