//! JSON with Python's numbers: [`parse_json`] reads text as `json.loads`
//! does (integers of any size, correctly rounded floats, key order kept) and
//! the `tojson` filter writes values as transformers' `json.dumps` call does.

use std::fmt::Write as _;

use minijinja::value::{Kwargs, ValueKind};
use minijinja::{Error, ErrorKind, State, Value};

use super::{depth_error, int_from_decimal, py_number, PyBigInt};
use crate::template::budget::{check_string, push_checked};
use crate::template::MAX_VALUE_DEPTH;

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

pub(crate) fn tojson_filter(_state: &State, value: Value, kwargs: Kwargs) -> Result<Value, Error> {
    let ensure_ascii = kwargs.get::<Option<bool>>("ensure_ascii")?.unwrap_or(false);
    let indent: Option<Value> = kwargs.get("indent")?;
    let separators: Option<Value> = kwargs.get("separators")?;
    let sort_keys = kwargs.get::<Option<bool>>("sort_keys")?.unwrap_or(false);
    kwargs.assert_all_used()?;
    let indent = match indent {
        None => None,
        Some(v) if v.is_none() => None,
        Some(v) => {
            if let Some(s) = v.as_str() {
                Some(s.to_string())
            } else if let Some(n) = v.as_i64() {
                let n = usize::try_from(n).unwrap_or(0);
                check_string("tojson indent", Some(n))?;
                Some(" ".repeat(n))
            } else {
                return Err(Error::new(
                    ErrorKind::InvalidOperation,
                    "tojson: indent must be an integer or a string",
                ));
            }
        }
    };
    let (item_sep, key_sep) = match separators {
        Some(v) if !v.is_none() => {
            let parts: Vec<Value> = v.try_iter()?.collect();
            match (
                parts.first().and_then(Value::as_str),
                parts.get(1).and_then(Value::as_str),
            ) {
                (Some(a), Some(b)) if parts.len() == 2 => (a.to_string(), b.to_string()),
                _ => {
                    return Err(Error::new(
                        ErrorKind::InvalidOperation,
                        "tojson: separators must be a pair of strings",
                    ))
                }
            }
        }
        _ => {
            if indent.is_some() {
                (",".to_string(), ": ".to_string())
            } else {
                (", ".to_string(), ": ".to_string())
            }
        }
    };
    let opts = DumpOpts {
        ensure_ascii,
        indent,
        item_sep,
        key_sep,
        sort_keys,
    };
    let mut out = String::new();
    dump_value(&value, &opts, 0, &mut out)?;
    Ok(Value::from_safe_string(out))
}

/// Options of Python's `json.dumps` that templates use.
struct DumpOpts {
    ensure_ascii: bool,
    indent: Option<String>,
    item_sep: String,
    key_sep: String,
    sort_keys: bool,
}

fn dump_newline(opts: &DumpOpts, level: usize, out: &mut String) -> Result<(), Error> {
    if let Some(ind) = &opts.indent {
        let len = ind
            .len()
            .checked_mul(level)
            .and_then(|n| n.checked_add(out.len() + 1));
        check_string("tojson", len)?;
        out.push('\n');
        for _ in 0..level {
            out.push_str(ind);
        }
    }
    Ok(())
}

fn dump_value(v: &Value, opts: &DumpOpts, level: usize, out: &mut String) -> Result<(), Error> {
    if level > MAX_VALUE_DEPTH {
        return Err(depth_error());
    }
    if let Some(b) = v.downcast_object_ref::<PyBigInt>() {
        out.push_str(&b.0);
        return Ok(());
    }
    match v.kind() {
        // json.dumps refuses Jinja2's Undefined.
        ValueKind::Undefined => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                "tojson: object of type Undefined is not JSON serializable",
            ))
        }
        ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
        ValueKind::Number => out.push_str(&py_number(v, true)),
        ValueKind::String => dump_string(v.as_str().unwrap_or_default(), opts.ensure_ascii, out)?,
        ValueKind::Map => {
            let mut keys: Vec<Value> = v.try_iter()?.collect();
            if keys.is_empty() {
                out.push_str("{}");
                return Ok(());
            }
            if opts.sort_keys {
                keys.sort();
            }
            out.push('{');
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    push_checked("tojson", out, &opts.item_sep)?;
                }
                dump_newline(opts, level + 1, out)?;
                let key_text = match k.kind() {
                    ValueKind::String => k.as_str().unwrap_or_default().to_string(),
                    ValueKind::Bool => (if k.is_true() { "true" } else { "false" }).to_string(),
                    ValueKind::None => "null".to_string(),
                    ValueKind::Number => py_number(k, true),
                    _ => {
                        return Err(Error::new(
                            ErrorKind::InvalidOperation,
                            format!(
                                "tojson: keys must be str, int, float, bool or None, not {}",
                                k.kind()
                            ),
                        ))
                    }
                };
                dump_string(&key_text, opts.ensure_ascii, out)?;
                push_checked("tojson", out, &opts.key_sep)?;
                let item = v.get_item(k)?;
                dump_value(&item, opts, level + 1, out)?;
            }
            dump_newline(opts, level, out)?;
            out.push('}');
        }
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = v.try_iter()?.collect();
            if items.is_empty() {
                out.push_str("[]");
                return Ok(());
            }
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    push_checked("tojson", out, &opts.item_sep)?;
                }
                dump_newline(opts, level + 1, out)?;
                dump_value(item, opts, level + 1, out)?;
            }
            dump_newline(opts, level, out)?;
            out.push(']');
        }
        _ => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                format!(
                    "tojson: object of type {} is not JSON serializable",
                    v.kind()
                ),
            ))
        }
    }
    Ok(())
}

/// Python `json.dumps` string encoding.
fn dump_string(s: &str, ensure_ascii: bool, out: &mut String) -> Result<(), Error> {
    let escaped: usize = s
        .chars()
        .map(|c| match c {
            '"' | '\\' | '\n' | '\r' | '\t' | '\u{8}' | '\u{c}' => 2,
            c if (c as u32) < 0x20 => 6,
            c if ensure_ascii && (c as u32) > 0x7e => 6 * c.len_utf16(),
            c => c.len_utf8(),
        })
        .sum();
    check_string("tojson", escaped.checked_add(out.len() + 2))?;
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c if ensure_ascii && (c as u32) > 0x7e => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    let _ = write!(out, "\\u{:04x}", unit);
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    Ok(())
}
