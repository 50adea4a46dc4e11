//! Streaming parser from generated text to OpenAI-style message deltas.
//!
//! [`ToolCallParser`] is a state machine fed with the text the model generates
//! (in pieces of any size, split anywhere on `char` boundaries). It turns it
//! into [`Delta`]s — content text, reasoning text, tool-call starts and
//! argument fragments — and accumulates the final [`ParsedMessage`].
//!
//! # Recognised forms
//!
//! * `<think>…</think>` at the start of the message (only whitespace before
//!   it) → `reasoning_content`
//!   (or the whole start of the output when the prompt already opened the
//!   block, [`ParserOptions::starts_in_reasoning`]);
//! * Qwen3-Coder tool calls
//!   `<tool_call>\n<function=NAME>\n<parameter=P>\nVALUE\n</parameter>\n…</function>\n</tool_call>`,
//!   several per message and several `<function=…>` blocks per `<tool_call>`
//!   (one call each);
//! * the JSON form `<tool_call>\n{"name": …, "arguments": {…}}\n</tool_call>`
//!   (an extension: the official parser leaves it as content).
//!
//! # Call structure and malformed output
//!
//! The reference is the official Qwen3-Coder parser (vLLM's
//! `qwen3coder_tool_parser.py`, non-streaming path, in its current form: a
//! structural walk of the call rather than the first tag that matches).
//! Like it:
//!
//! * a parameter value is the text after `<parameter=NAME>` minus one leading
//!   and one trailing newline;
//! * **tag text inside a value stays in the value.** A `</parameter>` closes
//!   the value only when what follows it (after whitespace) is a
//!   `<parameter=NAME>` of a declared parameter not seen yet in the call
//!   (any name when the tool declares no parameters), `</function>` followed
//!   by `</tool_call>` (or the next call), or `</tool_call>` (or the end of
//!   the stream). A `<parameter=` at the start of a line inside a value opens
//!   a literal call (an example in a document, a parser's test strings): the
//!   next `</parameter>` closes it, not the value. `</function>`,
//!   `</tool_call>`, `<tool_call>` and `<function=` inside a value are text.
//!   So a value may hold code that mentions the tags (`"</function>"` in a
//!   string literal, a regular expression), an inline `</parameter>`, or
//!   whole `<tool_call>…</tool_call>` examples;
//! * when no `</parameter>` closes a value that way, a second pass at the end
//!   of the stream takes the first `</parameter>` (outside literal pairs)
//!   followed by any `<parameter=` (an undeclared or repeated parameter) or
//!   any of the tags above; failing that, `</parameter>` is missing and the
//!   value ends at the first `<parameter=NAME>` at a line start naming a
//!   declared parameter not seen yet, `</tool_call>`, or a `</function>`
//!   followed by `</tool_call>` or the end (or the start of the next call);
//! * a function whose `</function>` is missing ends at `</tool_call>`;
//! * every `<function=…>` block of a `<tool_call>` is a call of its own;
//!   `</tool_call>` itself is optional.
//!
//! A call whose values need the second pass or a missing `</parameter>` is
//! decided at the end of the stream (a structural `</parameter>` could still
//! come); every other call as soon as its last tag is read.
//!
//! The walk is a heuristic with the official parser's limits: a value that
//! shows only the end of a call down to `</tool_call>` (without the opening
//! `<parameter=` at a line start before it) ends there, and a literal
//! `<parameter=` at a line start without its `</parameter>` pairs with the
//! value's own close (the value is then read by the second pass).
//!
//! Where the official parser is unsafe or loses text, this one differs
//! (deliberately, and tested against a model of the official parser):
//!
//! * **No phantom calls.** A call starts only at `<tool_call>` followed (after
//!   whitespace) by `<function=NAME>` or a JSON object, and only when the whole
//!   call has a valid shape; otherwise the text is content. A `<tool_call>`
//!   right after a backtick (inline code) is content. Without `<tool_call>`, a
//!   bare `<function=NAME>` is a call only for the first call of a message,
//!   only for a declared tool, only at the start of a line, and not right
//!   after a `<tool_call>` that was content (the official parser turns any
//!   `<function=` anywhere into a call when no `<tool_call>` is present).
//! * **Truncated calls are content.** A call not ended by `</function>` or
//!   `</tool_call>` (or the start of the next call) before the end of the
//!   stream is never announced; its text comes back as content. (The official
//!   parser emits whatever it has.)
//! * **A stricter walk.** The official walk takes any declared parameter
//!   name after `</parameter>` (this one only those not seen yet, then the
//!   rest in the second pass), ends a function at any `</function>` after a
//!   closed value (this one only before `</tool_call>` or the next call,
//!   then the rest in the second pass), and counts a line start only right
//!   after `\n` (this one also after indentation).
//! * **Calls are not merged.** A call missing `</function>` or
//!   `</tool_call>` ends where the next call starts: a `</parameter>`
//!   followed by `<tool_call>` or `<function=` closes the value too, and a
//!   value missing `</parameter>` ends at a `<tool_call>` followed by
//!   `<function=`, or a `<function=NAME>`, at the start of a line (the
//!   official parser makes one call of both, the second call's parameters
//!   going to the first).
//! * **Stray text.** When a value missing `</parameter>` holds a
//!   `</parameter>` outside literal pairs, the text after it is stray text
//!   and the call is malformed (content); other text between parameters
//!   makes the call malformed too (the official parser ignores it, or keeps
//!   it in the value).
//! * **CRLF.** `\r\n` counts as the newline stripped at both ends of a value
//!   (the official parser strips `\n` only and leaves a `\r`); a line start
//!   may be indented by spaces or tabs.
//! * **Content** is the text outside calls, before *and after* them (the
//!   official parser keeps only the text before the first call), trimmed;
//!   text resuming after a call is joined to earlier content with one `\n`
//!   so words are never glued together.
//!
//! # Values
//!
//! Each value is converted by the type of its parameter in the tool's JSON
//! schema (`type` as a name or a list of names, `anyOf`/`oneOf`/`allOf`
//! alternatives, else the kinds of the `enum`/`const` values):
//!
//! | type | value |
//! |------|-------|
//! | undeclared tool or parameter, untyped property | the raw string; `null` (any case) → null |
//! | `string` (also `str`, `text`, `varchar`, `char`, `enum`) | the raw string, always (also `null`) |
//! | `integer` (`int…`, `uint…`, `long…`, `short…`, `unsigned…`) | Python `int()`: `007` → 7, `+5` → 5, `1_000` → 1000 |
//! | `number` (`num…`, `float…`) | Python `float()`, an integer when whole: `1.0` → 1, `-1.5e3` → -1500 |
//! | `boolean` (`bool`, `binary`) | `true`/`false` in any case, and `1`/`0` |
//! | `object`, `array` (`arr`, `dict…`, `list…`) | JSON, else a Python literal (`['a', 1]`, `{'k': None}`, tuples) |
//! | any other name (`null`, …) | a Python literal |
//! | several types including `string` | JSON (or `True`/`False`/`None`) of another allowed type, else the raw string: `007` stays a string |
//! | several types without `string` | `null` → null, then each conversion above in the order integer, number, boolean, object/array, Python literal |
//!
//! A value that fails its conversion stays the raw string. For non-string
//! types, whitespace around the value is ignored. Deviations from the
//! official parser here: `string`-typed `null` stays a string (it gives
//! null); booleans accept `1`/`0` and surrounding whitespace, and keep
//! anything else as the raw string (it gives `false` for anything but
//! exactly `true` in some case, so `yes` or ` true` would switch a flag off
//! silently); a type list or `anyOf` is a set
//! of types (it stringifies a list and `ast.literal_eval`s it, so
//! `["string", "null"]` turned `123` into an integer, and it ignores `anyOf`);
//! integers beyond 64 bits, infinities, NaN, Python sets, bytes and complex
//! numbers stay strings (JSON cannot hold them; it emits a big integer, or
//! fails the whole message), and so do Python literals with float dict keys
//! or `\N{…}` escapes; only ASCII digits are digits.
//!
//! # Streaming
//!
//! Text that could be the start of a tag is held back until decided; a tool
//! call is emitted only once it is complete (its start and its argument
//! fragments come together), so a malformed or truncated call is never
//! half-announced: it comes back as plain content. Whitespace around tags
//! (before and between complete calls, after `<think>`, before `</think>`,
//! after `</think>`) and at the ends of the message is dropped; nothing else
//! is changed but the `\n` joining content across a call, and nothing is
//! emitted twice: the concatenation of the deltas equals the final message,
//! whatever the split of the input.

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Map, Value as Json};

const TOOL_CALL_OPEN: &str = "<tool_call>";
const TOOL_CALL_CLOSE: &str = "</tool_call>";
const FUNCTION_OPEN: &str = "<function=";
const FUNCTION_CLOSE: &str = "</function>";
const PARAMETER_OPEN: &str = "<parameter=";
const PARAMETER_CLOSE: &str = "</parameter>";
const THINK_OPEN: &str = "<think>";
const THINK_CLOSE: &str = "</think>";
/// Longest accepted function / parameter name.
const MAX_NAME_LEN: usize = 256;
/// Tags that may follow a value's `</parameter>` (besides `<parameter=` of
/// another declared parameter), or a parameter when `</function>` is
/// missing.
const AFTER_VALUE: [&str; 4] = [
    FUNCTION_CLOSE,
    TOOL_CALL_CLOSE,
    TOOL_CALL_OPEN,
    FUNCTION_OPEN,
];
/// Tags that may follow a parameter inside a function block.
const STRUCTURAL: [&str; 5] = [
    PARAMETER_OPEN,
    FUNCTION_CLOSE,
    TOOL_CALL_CLOSE,
    TOOL_CALL_OPEN,
    FUNCTION_OPEN,
];
/// One streaming update.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Delta {
    /// A piece of `content`.
    Content(String),
    /// A piece of `reasoning_content`.
    Reasoning(String),
    /// A new tool call: the first fragment for `index`.
    ToolCallStart {
        index: usize,
        id: String,
        name: String,
    },
    /// A piece of the call's `arguments` JSON text.
    ToolCallArguments { index: usize, fragment: String },
}

impl Delta {
    /// The `delta` object of an OpenAI `chat.completion.chunk`.
    pub fn to_openai(&self) -> Json {
        match self {
            Delta::Content(s) => serde_json::json!({ "content": s }),
            Delta::Reasoning(s) => serde_json::json!({ "reasoning_content": s }),
            Delta::ToolCallStart { index, id, name } => serde_json::json!({
                "tool_calls": [{
                    "index": index, "id": id, "type": "function",
                    "function": { "name": name, "arguments": "" }
                }]
            }),
            Delta::ToolCallArguments { index, fragment } => serde_json::json!({
                "tool_calls": [{ "index": index, "function": { "arguments": fragment } }]
            }),
        }
    }
}

/// A complete tool call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// The arguments object as compact JSON text (parameter order kept).
    pub arguments: String,
}

/// The message assembled from all deltas.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ParsedMessage {
    pub content: String,
    pub reasoning_content: String,
    pub tool_calls: Vec<ToolCall>,
}

impl ParsedMessage {
    /// The OpenAI `message` object (`content` is null when empty and there
    /// are tool calls; `reasoning_content` only when non-empty).
    pub fn to_openai(&self) -> Json {
        let mut m = Map::new();
        m.insert("role".into(), Json::String("assistant".into()));
        let content = if self.content.is_empty() && !self.tool_calls.is_empty() {
            Json::Null
        } else {
            Json::String(self.content.clone())
        };
        m.insert("content".into(), content);
        if !self.reasoning_content.is_empty() {
            m.insert(
                "reasoning_content".into(),
                Json::String(self.reasoning_content.clone()),
            );
        }
        if !self.tool_calls.is_empty() {
            let calls: Vec<Json> = self
                .tool_calls
                .iter()
                .map(|c| {
                    serde_json::json!({
                        "id": c.id, "type": "function",
                        "function": { "name": c.name, "arguments": c.arguments }
                    })
                })
                .collect();
            m.insert("tool_calls".into(), Json::Array(calls));
        }
        Json::Object(m)
    }
}

/// Parser settings.
#[derive(Clone, Debug)]
pub struct ParserOptions {
    /// Recognise tool calls (off for `tool_choice: "none"`).
    pub parse_tool_calls: bool,
    /// Recognise a leading `<think>…</think>` block.
    pub parse_reasoning: bool,
    /// The prompt already opened a `<think>` block: the output starts in
    /// reasoning and `</think>` ends it.
    pub starts_in_reasoning: bool,
    /// Tool-call ids are `<id_prefix><index>`; `None` picks a prefix unique to
    /// this parser (`call_<16 hex digits>_`).
    pub id_prefix: Option<String>,
}

impl Default for ParserOptions {
    fn default() -> Self {
        ParserOptions {
            parse_tool_calls: true,
            parse_reasoning: true,
            starts_in_reasoning: false,
            id_prefix: None,
        }
    }
}

impl ParserOptions {
    /// Defaults, with `starts_in_reasoning` set when the rendered prompt ends
    /// with an open `<think>` tag.
    pub fn for_prompt(prompt: &str) -> ParserOptions {
        ParserOptions {
            starts_in_reasoning: prompt.trim_end().ends_with(THINK_OPEN),
            ..ParserOptions::default()
        }
    }
}

/// The kinds of value a parameter's schema allows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Types {
    string: bool,
    integer: bool,
    number: bool,
    boolean: bool,
    /// `object` or `array`: JSON, else a Python literal.
    structured: bool,
    null: bool,
    /// A type name the table does not know: a Python literal.
    other: bool,
}

impl Types {
    /// A schema type name, read like the official parser does.
    fn add_name(&mut self, name: &str) {
        let n = name.trim().to_ascii_lowercase();
        let starts = |ps: &[&str]| ps.iter().any(|p| n.starts_with(p));
        match n.as_str() {
            "string" | "str" | "text" | "varchar" | "char" | "enum" => self.string = true,
            "boolean" | "bool" | "binary" => self.boolean = true,
            "object" | "array" | "arr" => self.structured = true,
            "null" => self.null = true,
            _ if starts(&["int", "uint", "long", "short", "unsigned"]) => self.integer = true,
            _ if starts(&["num", "float"]) => self.number = true,
            _ if starts(&["dict", "list"]) => self.structured = true,
            _ => self.other = true,
        }
    }
    fn add_value_kind(&mut self, v: &Json) {
        match v {
            Json::Null => self.null = true,
            Json::Bool(_) => self.boolean = true,
            Json::Number(n) if n.is_f64() => self.number = true,
            Json::Number(_) => self.integer = true,
            Json::String(_) => self.string = true,
            Json::Array(_) | Json::Object(_) => self.structured = true,
        }
    }
    fn is_empty(&self) -> bool {
        *self == Types::default()
    }
    fn non_string(&self) -> bool {
        self.integer || self.number || self.boolean || self.structured || self.null || self.other
    }
    /// Whether a decoded non-string value fits these types.
    fn allows(&self, v: &Json) -> bool {
        self.other
            || match v {
                Json::Null => self.null,
                Json::Bool(_) => self.boolean,
                Json::Number(n) => self.number || (self.integer && !n.is_f64()),
                Json::String(_) => false,
                Json::Array(_) | Json::Object(_) => self.structured,
            }
    }
}

fn collect_types(schema: &Json, types: &mut Types, depth: usize) {
    let Json::Object(s) = schema else { return };
    match s.get("type") {
        Some(Json::String(t)) => types.add_name(t),
        Some(Json::Array(ts)) => ts
            .iter()
            .filter_map(Json::as_str)
            .for_each(|t| types.add_name(t)),
        _ => {}
    }
    if depth < 4 {
        for key in ["anyOf", "oneOf", "allOf"] {
            if let Some(Json::Array(alts)) = s.get(key) {
                for alt in alts {
                    collect_types(alt, types, depth + 1);
                }
            }
        }
    }
    if types.is_empty() {
        if let Some(Json::Array(vals)) = s.get("enum") {
            vals.iter().for_each(|v| types.add_value_kind(v));
        }
        if let Some(v) = s.get("const") {
            types.add_value_kind(v);
        }
    }
}

/// How a declared tool's parameters are typed.
#[derive(Clone, Debug, Default)]
struct ToolInfo {
    params: HashMap<String, Types>,
}

/// Read OpenAI tool definitions (`{type, function: {name, parameters}}` or
/// the bare function object). Entries without a name are skipped.
fn tool_table(tools: &[Json]) -> HashMap<String, ToolInfo> {
    let mut table = HashMap::new();
    for tool in tools {
        let f = tool.get("function").unwrap_or(tool);
        let Some(name) = f.get("name").and_then(Json::as_str) else {
            continue;
        };
        let mut info = ToolInfo::default();
        if let Some(Json::Object(props)) = f.get("parameters").and_then(|p| p.get("properties")) {
            for (pname, schema) in props {
                let mut t = Types::default();
                collect_types(schema, &mut t, 0);
                info.params.insert(pname.clone(), t);
            }
        }
        table.insert(name.to_string(), info);
    }
    table
}

/// JSON, or Python's spellings of the JSON constants.
fn parse_jsonish(s: &str) -> Option<Json> {
    if let Ok(v) = serde_json::from_str::<Json>(s) {
        return Some(v);
    }
    match s {
        "True" => Some(Json::Bool(true)),
        "False" => Some(Json::Bool(false)),
        "None" => Some(Json::Null),
        _ => None,
    }
}

/// A decimal digit string with single underscores between digits (Python's
/// `digitpart`).
fn is_digitpart(s: &str) -> bool {
    !s.is_empty()
        && !s.starts_with('_')
        && !s.ends_with('_')
        && !s.contains("__")
        && s.bytes().all(|b| b.is_ascii_digit() || b == b'_')
}

/// An integer as JSON, when it fits 64 bits.
fn int_json(negative: bool, magnitude: u128) -> Option<Json> {
    if negative {
        let v = i64::try_from(magnitude)
            .ok()
            .map(|m| -m)
            .or_else(|| (magnitude == 1u128 << 63).then_some(i64::MIN))?;
        Some(Json::from(v))
    } else {
        u64::try_from(magnitude).ok().map(Json::from)
    }
}

fn split_sign(s: &str) -> (bool, &str) {
    match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    }
}

/// Python `int(s)` (base 10).
fn py_int(s: &str) -> Option<Json> {
    let (neg, digits) = split_sign(s.trim());
    if !is_digitpart(digits) {
        return None;
    }
    let mut m: u128 = 0;
    for b in digits.bytes().filter(u8::is_ascii_digit) {
        m = m.checked_mul(10)?.checked_add(u128::from(b - b'0'))?;
    }
    int_json(neg, m)
}

/// A Python float literal without sign: `digits[.digits][e[+-]digits]`,
/// `.digits…` or `digits.`; underscores between digits.
fn is_py_float_body(s: &str) -> bool {
    let (mantissa, exp) = match s.find(['e', 'E']) {
        Some(i) => (&s[..i], Some(&s[i + 1..])),
        None => (s, None),
    };
    let mantissa_ok = match mantissa.split_once('.') {
        Some((a, b)) => {
            (a.is_empty() || is_digitpart(a))
                && (b.is_empty() || is_digitpart(b))
                && !(a.is_empty() && b.is_empty())
        }
        None => is_digitpart(mantissa),
    };
    let exp_ok = match exp {
        None => true,
        Some(e) => is_digitpart(split_sign(e).1),
    };
    mantissa_ok && exp_ok
}

/// A finite float as JSON.
fn float_json(f: f64) -> Option<Json> {
    serde_json::Number::from_f64(f).map(Json::Number)
}

/// Python `float(s)`, then an integer when whole (the official parser's
/// `number` rule). Infinities and NaN give `None`.
fn py_number(s: &str) -> Option<Json> {
    let t = s.trim();
    let (neg, body) = split_sign(t);
    if !is_py_float_body(body) {
        return None;
    }
    let f: f64 = body.replace('_', "").parse().ok()?;
    let f = if neg { -f } else { f };
    if !f.is_finite() {
        return None;
    }
    // Whole numbers become integers where JSON integers reach (exact casts:
    // the bounds are powers of two).
    if f.fract() == 0.0 {
        if (0.0..18_446_744_073_709_551_616.0).contains(&f) {
            return Some(Json::from(f as u64));
        }
        if (-9_223_372_036_854_775_808.0..0.0).contains(&f) {
            return Some(Json::from(f as i64));
        }
    }
    float_json(f)
}

/// `true`/`false` in any case, `1`/`0`.
fn py_bool(s: &str) -> Option<Json> {
    let t = s.trim();
    if t.eq_ignore_ascii_case("true") || t == "1" {
        Some(Json::Bool(true))
    } else if t.eq_ignore_ascii_case("false") || t == "0" {
        Some(Json::Bool(false))
    } else {
        None
    }
}

fn is_null_word(s: &str) -> bool {
    s.trim().eq_ignore_ascii_case("null")
}

/// JSON as Python's `json.loads` reads it: an integer `-0` is 0 (serde_json
/// reads it as the float -0.0; the Python-literal reader spells numbers the
/// same way as JSON and gets it right).
fn json_value(s: &str) -> Option<Json> {
    fn has_negative_zero(v: &Json) -> bool {
        match v {
            Json::Number(n) => n.as_f64().is_some_and(|f| f == 0.0 && f.is_sign_negative()),
            Json::Array(a) => a.iter().any(has_negative_zero),
            Json::Object(m) => m.values().any(has_negative_zero),
            _ => false,
        }
    }
    let v: Json = serde_json::from_str(s).ok()?;
    if has_negative_zero(&v) {
        if let Some(p) = pylit::parse(s) {
            return Some(p);
        }
    }
    Some(v)
}

/// Convert a raw parameter value by its schema types (`None` = undeclared
/// tool or parameter). The rules are in the module documentation.
fn convert_value(raw: &str, types: Option<&Types>) -> Json {
    let as_string = || Json::String(raw.to_string());
    let t = match types {
        Some(t) if !t.is_empty() => t,
        _ if is_null_word(raw) => return Json::Null,
        _ => return as_string(),
    };
    if t.string {
        if !t.non_string() {
            return as_string();
        }
        return match parse_jsonish(raw.trim()) {
            Some(v) if t.allows(&v) => v,
            _ => as_string(),
        };
    }
    if is_null_word(raw) {
        return Json::Null;
    }
    let mut conversions: Vec<fn(&str) -> Option<Json>> = Vec::new();
    if t.integer {
        conversions.push(py_int);
    }
    if t.number {
        conversions.push(py_number);
    }
    if t.boolean {
        conversions.push(py_bool);
    }
    if t.structured {
        conversions.push(json_value);
        conversions.push(pylit::parse);
    }
    if t.other || t.null {
        conversions.push(pylit::parse);
    }
    conversions
        .into_iter()
        .find_map(|f| f(raw))
        .unwrap_or_else(as_string)
}

/// Python literals as `ast.literal_eval` reads them (the official parser's
/// fallback), for the subset JSON can hold: `None`, `True`, `False`, ints,
/// floats, strings (quotes, prefixes `r`/`u`, escapes, adjacent
/// concatenation), lists, tuples (→ arrays) and dicts with string, int,
/// bool or `None` keys (→ objects, keys spelled as `json.dumps` does).
/// Anything else (sets, bytes, complex numbers, calls, big integers,
/// infinities) gives `None`.
mod pylit {
    use super::{float_json, int_json, is_digitpart, is_py_float_body};
    use serde_json::{Map, Value as Json};

    const MAX_DEPTH: usize = 64;

    pub(super) fn parse(s: &str) -> Option<Json> {
        let mut p = P { s, i: 0 };
        let v = p.value(0)?;
        p.ws();
        (p.i == s.len()).then_some(v)
    }

    struct P<'a> {
        s: &'a str,
        i: usize,
    }

    impl P<'_> {
        fn peek(&self) -> Option<char> {
            self.s[self.i..].chars().next()
        }
        fn peek2(&self) -> Option<char> {
            self.s[self.i..].chars().nth(1)
        }
        fn bump(&mut self) -> Option<char> {
            let c = self.peek()?;
            self.i += c.len_utf8();
            Some(c)
        }
        fn eat(&mut self, c: char) -> bool {
            if self.peek() == Some(c) {
                self.i += c.len_utf8();
                true
            } else {
                false
            }
        }
        fn ws(&mut self) {
            loop {
                match self.peek() {
                    Some(' ' | '\t' | '\n' | '\r' | '\x0c') => self.i += 1,
                    Some('\\') if self.s[self.i + 1..].starts_with('\n') => self.i += 2,
                    _ => return,
                }
            }
        }

        fn value(&mut self, depth: usize) -> Option<Json> {
            if depth > MAX_DEPTH {
                return None;
            }
            self.ws();
            match self.peek()? {
                '[' => {
                    self.i += 1;
                    self.items(']', depth).map(Json::Array)
                }
                '(' => {
                    self.i += 1;
                    self.ws();
                    if self.eat(')') {
                        return Some(Json::Array(Vec::new()));
                    }
                    let first = self.value(depth + 1)?;
                    self.ws();
                    if self.eat(')') {
                        return Some(first);
                    }
                    if !self.eat(',') {
                        return None;
                    }
                    let mut rest = self.items(')', depth)?;
                    rest.insert(0, first);
                    Some(Json::Array(rest))
                }
                '{' => {
                    self.i += 1;
                    self.dict(depth)
                }
                '+' | '-' => {
                    let neg = self.bump()? == '-';
                    self.ws();
                    // `-(1)` is a signed constant too.
                    let mut parens = 0;
                    while self.eat('(') {
                        parens += 1;
                        self.ws();
                    }
                    let v = self.number(neg)?;
                    for _ in 0..parens {
                        self.ws();
                        if !self.eat(')') {
                            return None;
                        }
                    }
                    Some(v)
                }
                c if c.is_ascii_digit() || c == '.' => self.number(false),
                '\'' | '"' => self.strings(),
                c if c.is_alphabetic() || c == '_' => {
                    let start = self.i;
                    while matches!(self.peek(), Some(c) if c.is_alphanumeric() || c == '_') {
                        self.bump();
                    }
                    let word = &self.s[start..self.i];
                    match word {
                        "None" => Some(Json::Null),
                        "True" => Some(Json::Bool(true)),
                        "False" => Some(Json::Bool(false)),
                        _ if matches!(self.peek(), Some('\'' | '"')) => {
                            self.i = start;
                            self.strings()
                        }
                        _ => None,
                    }
                }
                _ => None,
            }
        }

        /// Comma-separated values up to `close` (trailing comma allowed).
        fn items(&mut self, close: char, depth: usize) -> Option<Vec<Json>> {
            let mut out = Vec::new();
            loop {
                self.ws();
                if self.eat(close) {
                    return Some(out);
                }
                out.push(self.value(depth + 1)?);
                self.ws();
                if self.eat(close) {
                    return Some(out);
                }
                if !self.eat(',') {
                    return None;
                }
            }
        }

        fn dict(&mut self, depth: usize) -> Option<Json> {
            let mut m = Map::new();
            // Python key equality (`True == 1`): the first spelling stays,
            // the last value wins.
            let mut spelling: Vec<(Json, String)> = Vec::new();
            loop {
                self.ws();
                if self.eat('}') {
                    return Some(Json::Object(m));
                }
                let k = self.value(depth + 1)?;
                let identity = match &k {
                    Json::Bool(b) => Json::from(u64::from(*b)),
                    Json::Number(n) if n.is_f64() => return None,
                    Json::Array(_) | Json::Object(_) => return None,
                    other => other.clone(),
                };
                let key = match spelling.iter().find(|(id, _)| *id == identity) {
                    Some((_, s)) => s.clone(),
                    None => {
                        let s = match &k {
                            Json::String(s) => s.clone(),
                            Json::Bool(b) => b.to_string(),
                            Json::Null => "null".to_string(),
                            other => other.to_string(),
                        };
                        spelling.push((identity, s.clone()));
                        s
                    }
                };
                self.ws();
                // `{1, 2}` is a set: not JSON.
                if !self.eat(':') {
                    return None;
                }
                let v = self.value(depth + 1)?;
                m.insert(key, v);
                self.ws();
                if self.eat('}') {
                    return Some(Json::Object(m));
                }
                if !self.eat(',') {
                    return None;
                }
            }
        }

        /// A number token (after an optional sign already read).
        fn number(&mut self, neg: bool) -> Option<Json> {
            let start = self.i;
            let mut prev = '\0';
            while let Some(c) = self.peek() {
                let exp_sign = (c == '+' || c == '-') && (prev == 'e' || prev == 'E');
                if !(c.is_ascii_alphanumeric() || c == '_' || c == '.' || exp_sign) {
                    break;
                }
                prev = c;
                self.i += 1;
            }
            let tok = &self.s[start..self.i];
            let lower = tok.to_ascii_lowercase();
            let radix = |prefix: &str, r: u32| -> Option<Option<u128>> {
                let body = lower.strip_prefix(prefix)?;
                let body = body.strip_prefix('_').unwrap_or(body);
                if body.is_empty()
                    || body.ends_with('_')
                    || body.contains("__")
                    || body.starts_with('_')
                {
                    return Some(None);
                }
                Some(u128::from_str_radix(&body.replace('_', ""), r).ok())
            };
            let magnitude = match (radix("0x", 16), radix("0o", 8), radix("0b", 2)) {
                (Some(m), _, _) | (_, Some(m), _) | (_, _, Some(m)) => Some(m?),
                _ => None,
            };
            if let Some(m) = magnitude {
                return int_json(neg, m);
            }
            if is_digitpart(tok) {
                let digits: String = tok.chars().filter(char::is_ascii_digit).collect();
                // Python 3 rejects leading zeros (`007`) except in zero.
                if digits.len() > 1 && digits.starts_with('0') && digits.bytes().any(|b| b != b'0')
                {
                    return None;
                }
                let m: u128 = digits.parse().ok()?;
                return int_json(neg, m);
            }
            if is_py_float_body(tok) {
                let f: f64 = tok.replace('_', "").parse().ok()?;
                return float_json(if neg { -f } else { f });
            }
            None
        }

        /// One or more adjacent string literals, concatenated.
        fn strings(&mut self) -> Option<Json> {
            let mut out = self.string()?;
            loop {
                let save = self.i;
                self.ws();
                let mut look = P {
                    s: self.s,
                    i: self.i,
                };
                while matches!(look.peek(), Some(c) if c.is_ascii_alphabetic()) {
                    look.bump();
                }
                if matches!(look.peek(), Some('\'' | '"')) {
                    out.push_str(&self.string()?);
                } else {
                    self.i = save;
                    return Some(Json::String(out));
                }
            }
        }

        /// One string literal with an optional `r`/`u` prefix.
        fn string(&mut self) -> Option<String> {
            let start = self.i;
            while matches!(self.peek(), Some(c) if c.is_ascii_alphabetic()) {
                self.bump();
            }
            let raw = match self.s[start..self.i].to_ascii_lowercase().as_str() {
                "" | "u" => false,
                "r" => true,
                _ => return None,
            };
            let q = self.bump()?;
            if q != '\'' && q != '"' {
                return None;
            }
            let triple = self.peek() == Some(q) && self.peek2() == Some(q);
            if triple {
                self.i += 2;
            } else if self.eat(q) {
                return Some(String::new());
            }
            let mut out = String::new();
            loop {
                let c = self.bump()?;
                if c == q {
                    if !triple {
                        return Some(out);
                    }
                    if self.peek() == Some(q) && self.peek2() == Some(q) {
                        self.i += 2;
                        return Some(out);
                    }
                    out.push(c);
                } else if c == '\n' && !triple {
                    return None;
                } else if c == '\\' {
                    let e = self.bump()?;
                    if raw {
                        out.push('\\');
                        out.push(e);
                    } else {
                        self.escape(e, &mut out)?;
                    }
                } else {
                    out.push(c);
                }
            }
        }

        fn hex(&mut self, n: usize) -> Option<char> {
            let h = self.s.get(self.i..self.i + n)?;
            if !h.bytes().all(|b| b.is_ascii_hexdigit()) {
                return None;
            }
            self.i += n;
            char::from_u32(u32::from_str_radix(h, 16).ok()?)
        }

        fn escape(&mut self, e: char, out: &mut String) -> Option<()> {
            let c = match e {
                '\n' => return Some(()),
                '\\' | '\'' | '"' => e,
                'a' => '\x07',
                'b' => '\x08',
                'f' => '\x0c',
                'n' => '\n',
                'r' => '\r',
                't' => '\t',
                'v' => '\x0b',
                'x' => self.hex(2)?,
                'u' => self.hex(4)?,
                'U' => self.hex(8)?,
                '0'..='7' => {
                    let mut v = e.to_digit(8)?;
                    for _ in 0..2 {
                        match self.peek().and_then(|c| c.to_digit(8)) {
                            Some(d) => {
                                v = v * 8 + d;
                                self.i += 1;
                            }
                            None => break,
                        }
                    }
                    char::from_u32(v)?
                }
                'N' => return None,
                _ => {
                    out.push('\\');
                    e
                }
            };
            out.push(c);
            Some(())
        }
    }
}

/// Outcome of parsing a call (or one function block) at a buffer position.
enum CallParse {
    /// A complete call; the buffer up to `end` belongs to it.
    Complete {
        name: String,
        arguments: Map<String, Json>,
        end: usize,
    },
    /// More text is needed to decide.
    Incomplete,
    /// More text is needed, and text without a `<` cannot decide anything
    /// (inside a value, no tag since): parsing can wait for a `<`.
    AwaitingTag,
    /// Not a valid call: the first `at` bytes (at least the trigger tag) are
    /// plain content.
    Malformed { at: usize },
}

fn skip_ws(s: &str, mut p: usize) -> usize {
    while let Some(c) = s[p..].chars().next() {
        if !c.is_whitespace() {
            break;
        }
        p += c.len_utf8();
    }
    p
}

/// `rest` could still become `tag` (is a proper prefix of it, possibly empty).
fn could_become(rest: &str, tag: &str) -> bool {
    rest.len() < tag.len() && tag.starts_with(rest)
}

/// Whether `rest` starts with one of `tags`: `Some(true)`, `Some(false)`,
/// or `None` when it could still become one.
fn starts_with_any(rest: &str, tags: &[&str]) -> Option<bool> {
    if tags.iter().any(|t| rest.starts_with(t)) {
        Some(true)
    } else if tags.iter().any(|t| could_become(rest, t)) {
        None
    } else {
        Some(false)
    }
}

/// Position `q` of `s` is at the start of a line (only spaces or tabs since
/// the last newline).
fn at_line_start(s: &str, q: usize) -> bool {
    s[..q].trim_end_matches([' ', '\t']).ends_with('\n')
}

/// Strip one leading newline (`\n` or `\r\n`).
fn strip_leading_newline(s: &str) -> &str {
    s.strip_prefix("\r\n")
        .or_else(|| s.strip_prefix('\n'))
        .unwrap_or(s)
}

/// Strip one trailing newline (`\n` or `\r\n`).
fn strip_trailing_newline(s: &str) -> &str {
    s.strip_suffix("\r\n")
        .or_else(|| s.strip_suffix('\n'))
        .unwrap_or(s)
}

/// A `NAME>` at `p`: returns (name, position after `>`), or `Err(None)` when
/// more text is needed, `Err(Some(at))` when malformed.
fn parse_tag_name(s: &str, p: usize) -> Result<(&str, usize), Option<usize>> {
    let rest = &s[p..];
    for (i, c) in rest.char_indices() {
        if c == '>' {
            let name = &rest[..i];
            return if name.is_empty() {
                Err(Some(p))
            } else {
                Ok((name, p + i + 1))
            };
        }
        if c.is_whitespace() || c == '<' || i >= MAX_NAME_LEN {
            return Err(Some(p));
        }
    }
    Err(None)
}

struct CallContext<'a> {
    tools: &'a HashMap<String, ToolInfo>,
    /// End of stream: nothing more will come.
    eos: bool,
    /// Where the scan of an unfinished value stopped last time (the buffer
    /// only grew since), to resume there.
    resume: Option<ValueScan>,
    /// Where the scan of an unfinished value stops now.
    stopped: Cell<Option<ValueScan>>,
}

/// The state of the scan for the end of a value: everything before `at` is
/// decided, and `depth` literal `<parameter=` tags opened inside the value
/// before `at` are not closed yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct ValueScan {
    vstart: usize,
    at: usize,
    depth: usize,
}

/// The end of a parameter value.
struct ValueEnd {
    /// Where the value text ends.
    end: usize,
    /// Where parsing resumes (after `</parameter>` when present).
    next: usize,
}

/// The value being scanned: its parameter and the call around it.
struct ValueCtx<'a> {
    /// Where the value text starts (after the tag and one newline).
    vstart: usize,
    /// The parameter's name.
    name: &'a str,
    /// The tool's declaration (`None`: undeclared tool).
    tool: Option<&'a ToolInfo>,
    /// The parameters of the call read before this one.
    seen: &'a Map<String, Json>,
}

impl ValueCtx<'_> {
    /// `name` can be a parameter of this call: a declared property, or any
    /// name when the tool declares none.
    fn declares(&self, name: &str) -> bool {
        match self.tool {
            Some(t) if !t.params.is_empty() => t.params.contains_key(name),
            _ => true,
        }
    }
    /// Position `q` of `s` is at the start of a line of the value.
    fn line_start(&self, s: &str, q: usize) -> bool {
        q == self.vstart || (q > self.vstart && at_line_start(s, q))
    }
}

impl CallContext<'_> {
    /// More text is needed; at the end of the stream the whole buffer is
    /// content.
    fn need_more(&self, s: &str) -> CallParse {
        if self.eos {
            CallParse::Malformed { at: s.len() }
        } else {
            CallParse::Incomplete
        }
    }

    /// A `<tool_call>` at the start of `s`.
    fn parse_block_start(&self, s: &str) -> CallParse {
        let p = skip_ws(s, TOOL_CALL_OPEN.len());
        let rest = &s[p..];
        if rest.starts_with('{') {
            return self.parse_json(s, p);
        }
        if rest.starts_with(FUNCTION_OPEN) {
            return self.parse_function(s, p, false);
        }
        if could_become(rest, FUNCTION_OPEN) {
            return self.need_more(s);
        }
        CallParse::Malformed { at: p }
    }

    /// Whether the `</parameter>` ending just before `next` closes the value:
    /// what follows it (after whitespace) is a structural tag, `None` when
    /// that is not decided yet (more text, or the end of the stream).
    /// `lenient`: any `<parameter=` counts (an undeclared, repeated or
    /// unnamed one), as in the second pass of the walk.
    fn closes_value(&self, s: &str, next: usize, v: &ValueCtx, lenient: bool) -> Option<bool> {
        let f = skip_ws(s, next);
        let rest = &s[f..];
        if lenient {
            return starts_with_any(rest, &STRUCTURAL);
        }
        if rest.starts_with(PARAMETER_OPEN) {
            // Another parameter of this call: a declared one not seen yet.
            return match parse_tag_name(s, f + PARAMETER_OPEN.len()) {
                Ok((name, _)) => {
                    Some(name != v.name && !v.seen.contains_key(name) && v.declares(name))
                }
                Err(None) => None,
                Err(Some(_)) => Some(false),
            };
        }
        if could_become(rest, PARAMETER_OPEN) {
            return None;
        }
        if rest.starts_with(FUNCTION_CLOSE) {
            // The end of the call: only where the block ends or the next
            // call starts (a value may show the end of a call).
            let after = &s[skip_ws(s, f + FUNCTION_CLOSE.len())..];
            return starts_with_any(after, &[TOOL_CALL_CLOSE, TOOL_CALL_OPEN, FUNCTION_OPEN]);
        }
        starts_with_any(rest, &AFTER_VALUE)
    }

    /// Find the end of the value of `v`.
    fn value_end(&self, s: &str, v: &ValueCtx) -> Result<ValueEnd, CallParse> {
        let (mut i, mut depth) = match self.resume {
            Some(r) if r.vstart == v.vstart && r.at <= s.len() => (r.at, r.depth),
            _ => (v.vstart, 0),
        };
        let result = self.scan_value(s, v, &mut i, &mut depth, false);
        if matches!(result, Err(CallParse::Incomplete | CallParse::AwaitingTag)) {
            self.stopped.set(Some(ValueScan {
                vstart: v.vstart,
                at: i,
                depth,
            }));
        }
        result
    }

    /// The structural walk of [`value_end`](Self::value_end) from `*i`: the
    /// value ends at the first `</parameter>` outside literal
    /// `<parameter=…>…</parameter>` pairs that is followed by a structural
    /// tag ([`closes_value`](Self::closes_value)). At the end of the stream,
    /// when none did, a second, `lenient` pass from the value's start, then
    /// [`unclosed_value_end`](Self::unclosed_value_end). On `Incomplete` `*i`
    /// is the first undecided position.
    fn scan_value(
        &self,
        s: &str,
        v: &ValueCtx,
        i: &mut usize,
        depth: &mut usize,
        lenient: bool,
    ) -> Result<ValueEnd, CallParse> {
        while let Some(off) = s[*i..].find('<') {
            let q = *i + off;
            *i = q;
            let rest = &s[q..];
            if rest.starts_with(PARAMETER_CLOSE) {
                let next = q + PARAMETER_CLOSE.len();
                if *depth > 0 {
                    // Closes a literal `<parameter=` of the value.
                    *depth -= 1;
                } else {
                    match self.closes_value(s, next, v, lenient) {
                        Some(true) => return Ok(ValueEnd { end: q, next }),
                        Some(false) => {}
                        None if !self.eos => return Err(CallParse::Incomplete),
                        // The end of the stream (or a cut tag) follows: the
                        // value ends here; the call is then incomplete.
                        None => return Ok(ValueEnd { end: q, next }),
                    }
                }
                *i = next;
                continue;
            }
            let line_start = v.line_start(s, q);
            if line_start && rest.starts_with(PARAMETER_OPEN) {
                // A literal call inside the value (an example in a document,
                // a test string): its `</parameter>` is not this value's.
                *depth += 1;
                *i = q + PARAMETER_OPEN.len();
                continue;
            }
            if !self.eos
                && (could_become(rest, PARAMETER_CLOSE)
                    || (line_start && could_become(rest, PARAMETER_OPEN)))
            {
                return Err(CallParse::Incomplete);
            }
            *i = q + 1;
        }
        *i = s.len();
        if !self.eos {
            Err(CallParse::AwaitingTag)
        } else if !lenient {
            let mut at = v.vstart;
            self.scan_value(s, v, &mut at, &mut 0, true)
        } else {
            self.unclosed_value_end(s, v)
        }
    }

    /// The end of a value that no structural `</parameter>` closes (read at
    /// the end of the stream, once none can come): the first of a `<parameter=`
    /// at a line start naming a declared parameter not seen yet,
    /// `</tool_call>`, a `</function>` followed by the end of the block or of
    /// the stream or by the next call, or the start of the next call at a
    /// line start. A `</parameter>` before that end, outside literal pairs,
    /// is followed by stray text: the call is malformed. Without any such end
    /// the call is truncated.
    fn unclosed_value_end(&self, s: &str, v: &ValueCtx) -> Result<ValueEnd, CallParse> {
        let mut depth = 0usize;
        let mut first_close = None;
        let mut i = v.vstart;
        while let Some(off) = s[i..].find('<') {
            let q = i + off;
            i = q + 1;
            let rest = &s[q..];
            let line_start = v.line_start(s, q);
            let named = |open: &str| parse_tag_name(s, q + open.len()).ok().map(|(n, _)| n);
            let ends = if rest.starts_with(PARAMETER_CLOSE) {
                if depth > 0 {
                    depth -= 1;
                } else {
                    first_close.get_or_insert(q);
                }
                false
            } else if rest.starts_with(TOOL_CALL_CLOSE) {
                true
            } else if rest.starts_with(FUNCTION_CLOSE) {
                // (At the end of the stream a cut tag counts too.)
                let after = &s[skip_ws(s, q + FUNCTION_CLOSE.len())..];
                starts_with_any(after, &[TOOL_CALL_CLOSE, TOOL_CALL_OPEN, FUNCTION_OPEN])
                    != Some(false)
            } else if line_start && rest.starts_with(PARAMETER_OPEN) {
                let ends = named(PARAMETER_OPEN)
                    .is_some_and(|n| n != v.name && !v.seen.contains_key(n) && v.declares(n));
                if !ends {
                    depth += 1;
                }
                ends
            } else if line_start && rest.starts_with(FUNCTION_OPEN) {
                named(FUNCTION_OPEN).is_some()
            } else if line_start && rest.starts_with(TOOL_CALL_OPEN) {
                s[skip_ws(s, q + TOOL_CALL_OPEN.len())..].starts_with(FUNCTION_OPEN)
            } else {
                false
            };
            if ends {
                return match first_close {
                    Some(c) => Err(CallParse::Malformed {
                        at: c + PARAMETER_CLOSE.len(),
                    }),
                    None => Ok(ValueEnd { end: q, next: q }),
                };
            }
        }
        Err(CallParse::Malformed { at: s.len() })
    }

    /// A `<function=NAME>` block at `p`; `bare`: not inside `<tool_call>`
    /// (the tool must then be declared).
    fn parse_function(&self, s: &str, p: usize, bare: bool) -> CallParse {
        let (name, mut p) = match parse_tag_name(s, p + FUNCTION_OPEN.len()) {
            Ok(v) => v,
            Err(None) => return self.need_more(s),
            Err(Some(at)) => return CallParse::Malformed { at },
        };
        let tool = self.tools.get(name);
        if bare && tool.is_none() {
            return CallParse::Malformed { at: p };
        }
        let mut arguments = Map::new();
        loop {
            p = skip_ws(s, p);
            let rest = &s[p..];
            if rest.starts_with(FUNCTION_CLOSE) {
                p += FUNCTION_CLOSE.len();
                break;
            }
            // `</function>` missing: the call ends where the block or the
            // next call starts.
            if rest.starts_with(TOOL_CALL_CLOSE)
                || rest.starts_with(TOOL_CALL_OPEN)
                || rest.starts_with(FUNCTION_OPEN)
            {
                break;
            }
            if !rest.starts_with(PARAMETER_OPEN) {
                return match starts_with_any(rest, &STRUCTURAL) {
                    None => self.need_more(s),
                    Some(_) => CallParse::Malformed { at: p },
                };
            }
            let (pname, after) = match parse_tag_name(s, p + PARAMETER_OPEN.len()) {
                Ok(v) => v,
                Err(None) => return self.need_more(s),
                Err(Some(at)) => return CallParse::Malformed { at },
            };
            // Wait for the newline that may follow the tag.
            let tail = &s[after..];
            if !self.eos && (tail.is_empty() || tail == "\r") {
                return CallParse::Incomplete;
            }
            let vstart = after + (tail.len() - strip_leading_newline(tail).len());
            let value = ValueCtx {
                vstart,
                name: pname,
                tool,
                seen: &arguments,
            };
            let ValueEnd { end, next } = match self.value_end(s, &value) {
                Ok(v) => v,
                Err(e) => return e,
            };
            let raw = strip_trailing_newline(&s[vstart..end]);
            let types = tool.and_then(|t| t.params.get(pname));
            arguments.insert(pname.to_string(), convert_value(raw, types));
            p = next;
        }
        CallParse::Complete {
            name: name.to_string(),
            arguments,
            end: p,
        }
    }

    /// `{"name": …, "arguments": …}` at `p`.
    fn parse_json(&self, s: &str, p: usize) -> CallParse {
        let mut stream = serde_json::Deserializer::from_str(&s[p..]).into_iter::<Json>();
        let value = match stream.next() {
            Some(Ok(v)) => v,
            Some(Err(e)) if e.is_eof() => return self.need_more(s),
            Some(Err(_)) => return CallParse::Malformed { at: p },
            None => return self.need_more(s),
        };
        let end = p + stream.byte_offset();
        let Json::Object(mut obj) = value else {
            return CallParse::Malformed { at: p };
        };
        let Some(Json::String(name)) = obj.remove("name") else {
            return CallParse::Malformed { at: p };
        };
        let args = obj.remove("arguments").or_else(|| obj.remove("parameters"));
        let arguments = match args {
            None | Some(Json::Null) => Map::new(),
            Some(Json::Object(m)) => m,
            Some(Json::String(text)) => match serde_json::from_str::<Json>(&text) {
                Ok(Json::Object(m)) => m,
                _ => return CallParse::Malformed { at: p },
            },
            Some(_) => return CallParse::Malformed { at: p },
        };
        CallParse::Complete {
            name,
            arguments,
            end,
        }
    }
}

/// Emits text while holding back trailing whitespace, and drops whitespace at
/// segment starts and before tags.
#[derive(Debug)]
struct TextChannel {
    pending_ws: String,
    at_start: bool,
    /// Something was emitted on this channel.
    emitted: bool,
    /// A call came since the last text: join the next text with `\n`.
    separate: bool,
}

impl TextChannel {
    fn new() -> Self {
        TextChannel {
            pending_ws: String::new(),
            at_start: true,
            emitted: false,
            separate: false,
        }
    }
    fn push(&mut self, s: &str) -> Option<String> {
        let s = if self.at_start { s.trim_start() } else { s };
        if s.is_empty() {
            return None;
        }
        let mut out = std::mem::take(&mut self.pending_ws);
        if self.at_start && self.separate && self.emitted {
            out.push('\n');
        }
        self.at_start = false;
        self.separate = false;
        let body = s.trim_end();
        if body.is_empty() {
            // Only whitespace (never right after a boundary: trimmed above).
            out.push_str(s);
            self.pending_ws = out;
            return None;
        }
        out.push_str(body);
        self.pending_ws.push_str(&s[body.len()..]);
        self.emitted = true;
        Some(out)
    }
    /// A tag or the end of the stream: drop held whitespace and trim the
    /// start of what follows.
    fn boundary(&mut self) {
        self.pending_ws.clear();
        self.at_start = true;
    }
    /// After a tool call: like [`boundary`](Self::boundary), and the next
    /// text is separated from the earlier one.
    fn boundary_after_call(&mut self) {
        self.boundary();
        self.separate = true;
    }
}

/// What the raw text just before the buffer looks like (for the rules on
/// where a call may start).
#[derive(Clone, Debug)]
struct TextContext {
    /// Only spaces or tabs since the last newline (or the message start).
    line_start: bool,
    /// The last character.
    prev: Option<char>,
    /// The last few non-whitespace characters.
    recent: String,
}

impl TextContext {
    fn start() -> TextContext {
        TextContext {
            line_start: true,
            prev: None,
            recent: String::new(),
        }
    }
    fn advance(&mut self, s: &str) {
        for c in s.chars() {
            if c == '\n' {
                self.line_start = true;
            } else if c != ' ' && c != '\t' {
                self.line_start = false;
            }
            if !c.is_whitespace() {
                if self.recent.len() >= 4 * TOOL_CALL_OPEN.len() {
                    let cut = self.recent.len() - 2 * TOOL_CALL_OPEN.len();
                    let cut = (cut..self.recent.len())
                        .find(|&i| self.recent.is_char_boundary(i))
                        .unwrap_or(0);
                    self.recent.drain(..cut);
                }
                self.recent.push(c);
            }
            self.prev = Some(c);
        }
    }
}

#[derive(Debug)]
enum Mode {
    Content,
    Reasoning,
    /// At a `<tool_call>` (`opener`) or a bare `<function=`.
    Call {
        opener: bool,
    },
    /// After a call inside a `<tool_call>` block: more `<function=` blocks
    /// or `</tool_call>` may follow.
    Block,
}

static PARSER_COUNTER: AtomicU64 = AtomicU64::new(0);

fn unique_id_prefix() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let n = PARSER_COUNTER.fetch_add(1, Ordering::Relaxed);
    // splitmix64 of time and counter.
    let mut z = nanos ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ u64::from(std::process::id());
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    format!("call_{z:016x}_")
}

/// The streaming parser. Feed generated text with [`push`](Self::push), end
/// with [`finish`](Self::finish); read the result with
/// [`message`](Self::message).
#[derive(Debug)]
pub struct ToolCallParser {
    tools: HashMap<String, ToolInfo>,
    opts: ParserOptions,
    id_prefix: String,
    /// Text not yet decided.
    buf: String,
    mode: Mode,
    content: TextChannel,
    reasoning: TextChannel,
    reasoning_seen: bool,
    /// The raw content text before `buf`.
    ctx: TextContext,
    /// The call in `buf` is inside a value: only a `<` can change anything,
    /// so text without one is appended without parsing again (long values
    /// stream in linear time).
    awaiting_tag: bool,
    /// Where the scan of the unfinished value in `buf` stopped.
    value_scan: Option<ValueScan>,
    message: ParsedMessage,
    finished: bool,
}

impl ToolCallParser {
    /// A parser for a response to a request with these tool definitions.
    pub fn new(tools: &[Json], opts: ParserOptions) -> ToolCallParser {
        let id_prefix = opts.id_prefix.clone().unwrap_or_else(unique_id_prefix);
        let starts_in_reasoning = opts.starts_in_reasoning;
        ToolCallParser {
            tools: tool_table(tools),
            opts,
            id_prefix,
            buf: String::new(),
            mode: if starts_in_reasoning {
                Mode::Reasoning
            } else {
                Mode::Content
            },
            content: TextChannel::new(),
            reasoning: TextChannel::new(),
            reasoning_seen: starts_in_reasoning,
            ctx: TextContext::start(),
            awaiting_tag: false,
            value_scan: None,
            message: ParsedMessage::default(),
            finished: false,
        }
    }

    /// Feed newly generated text; returns the deltas it decides.
    pub fn push(&mut self, text: &str) -> Vec<Delta> {
        if self.finished {
            return Vec::new();
        }
        self.buf.push_str(text);
        if self.awaiting_tag && !text.contains('<') {
            return Vec::new();
        }
        self.awaiting_tag = false;
        let mut out = Vec::new();
        self.process(false, &mut out);
        out
    }

    /// End of stream: decide everything still held back (incomplete calls
    /// become content). Further calls return nothing.
    pub fn finish(&mut self) -> Vec<Delta> {
        if self.finished {
            return Vec::new();
        }
        let mut out = Vec::new();
        self.awaiting_tag = false;
        self.process(true, &mut out);
        self.content.boundary();
        self.reasoning.boundary();
        self.finished = true;
        out
    }

    /// The message assembled so far (complete after [`finish`](Self::finish)).
    pub fn message(&self) -> &ParsedMessage {
        &self.message
    }

    /// Consume the parser, returning the message.
    pub fn into_message(self) -> ParsedMessage {
        self.message
    }

    /// Parse a complete generation in one go.
    pub fn parse_complete(text: &str, tools: &[Json], opts: ParserOptions) -> ParsedMessage {
        let mut p = ToolCallParser::new(tools, opts);
        p.push(text);
        p.finish();
        p.into_message()
    }

    fn emit_content(&mut self, s: &str, out: &mut Vec<Delta>) {
        self.ctx.advance(s);
        if let Some(t) = self.content.push(s) {
            self.message.content.push_str(&t);
            out.push(Delta::Content(t));
        }
    }

    fn emit_reasoning(&mut self, s: &str, out: &mut Vec<Delta>) {
        if let Some(t) = self.reasoning.push(s) {
            self.message.reasoning_content.push_str(&t);
            out.push(Delta::Reasoning(t));
        }
    }

    fn take_buf(&mut self, n: usize) -> String {
        // Positions in the buffer change.
        self.value_scan = None;
        let rest = self.buf.split_off(n);
        std::mem::replace(&mut self.buf, rest)
    }

    /// Which tags are live in content mode (before the context rules).
    fn content_triggers(&self) -> [(&'static str, bool); 3] {
        let think = self.opts.parse_reasoning
            && !self.reasoning_seen
            && self.content.at_start
            && self.message.tool_calls.is_empty();
        let call = self.opts.parse_tool_calls;
        let bare = call && self.message.tool_calls.is_empty() && !self.tools.is_empty();
        [
            (THINK_OPEN, think),
            (TOOL_CALL_OPEN, call),
            (FUNCTION_OPEN, bare),
        ]
    }

    /// Find the first live tag in the buffer: `Ok((pos, tag))`, or
    /// `Err(hold_from)`: no tag, and text from `hold_from` on could still
    /// become one.
    fn find_trigger(&self, eos: bool) -> Result<(usize, &'static str), usize> {
        let triggers = self.content_triggers();
        let mut ctx = self.ctx.clone();
        let mut last = 0;
        for (pos, _) in self.buf.match_indices('<') {
            ctx.advance(&self.buf[last..pos]);
            last = pos;
            let rest = &self.buf[pos..];
            let live = |tag: &str| match tag {
                // `<think>` only opens the message.
                THINK_OPEN => self.buf[..pos].trim().is_empty(),
                // Inline code (`` `<tool_call>` ``) is never a call.
                TOOL_CALL_OPEN => ctx.prev != Some('`'),
                // A bare function: at a line start, and not right after a
                // `<tool_call>` that was not a call.
                FUNCTION_OPEN => {
                    ctx.prev != Some('`') && ctx.line_start && !ctx.recent.ends_with(TOOL_CALL_OPEN)
                }
                _ => true,
            };
            if let Some(&(tag, _)) = triggers
                .iter()
                .find(|(t, on)| *on && rest.starts_with(t) && live(t))
            {
                return Ok((pos, tag));
            }
            if !eos && triggers.iter().any(|(t, on)| *on && could_become(rest, t)) {
                return Err(pos);
            }
        }
        Err(self.buf.len())
    }

    fn process(&mut self, eos: bool, out: &mut Vec<Delta>) {
        loop {
            match self.mode {
                Mode::Content => match self.find_trigger(eos) {
                    Ok((pos, tag)) => {
                        let text = self.take_buf(pos);
                        self.emit_content(&text, out);
                        if tag == THINK_OPEN {
                            self.content.boundary();
                            self.take_buf(THINK_OPEN.len());
                            self.reasoning_seen = true;
                            self.mode = Mode::Reasoning;
                        } else {
                            self.mode = Mode::Call {
                                opener: tag == TOOL_CALL_OPEN,
                            };
                        }
                    }
                    Err(hold_from) => {
                        let text = self.take_buf(hold_from);
                        self.emit_content(&text, out);
                        return;
                    }
                },
                Mode::Reasoning => {
                    if let Some(pos) = self.buf.find(THINK_CLOSE) {
                        let text = self.take_buf(pos);
                        self.emit_reasoning(&text, out);
                        self.take_buf(THINK_CLOSE.len());
                        self.reasoning.boundary();
                        self.content.boundary();
                        self.ctx = TextContext::start();
                        self.mode = Mode::Content;
                        continue;
                    }
                    let mut hold_from = self.buf.len();
                    if !eos {
                        for (pos, _) in self.buf.match_indices('<') {
                            if could_become(&self.buf[pos..], THINK_CLOSE) {
                                hold_from = pos;
                                break;
                            }
                        }
                    }
                    let text = self.take_buf(hold_from);
                    self.emit_reasoning(&text, out);
                    return;
                }
                Mode::Call { opener } => {
                    let ctx = CallContext {
                        tools: &self.tools,
                        eos,
                        resume: self.value_scan,
                        stopped: Cell::new(None),
                    };
                    let parsed = if opener {
                        ctx.parse_block_start(&self.buf)
                    } else {
                        ctx.parse_function(&self.buf, 0, true)
                    };
                    self.value_scan = ctx.stopped.get();
                    if !self.apply(parsed, out) {
                        return;
                    }
                }
                Mode::Block => {
                    let p = skip_ws(&self.buf, 0);
                    let rest = &self.buf[p..];
                    if rest.starts_with(TOOL_CALL_CLOSE) {
                        self.take_buf(p + TOOL_CALL_CLOSE.len());
                        self.mode = Mode::Content;
                    } else if rest.starts_with(FUNCTION_OPEN) {
                        let ctx = CallContext {
                            tools: &self.tools,
                            eos,
                            resume: self.value_scan,
                            stopped: Cell::new(None),
                        };
                        let parsed = ctx.parse_function(&self.buf, p, false);
                        self.value_scan = ctx.stopped.get();
                        if !self.apply(parsed, out) {
                            return;
                        }
                    } else if could_become(rest, TOOL_CALL_CLOSE)
                        || could_become(rest, FUNCTION_OPEN)
                    {
                        if !eos {
                            return;
                        }
                        // A cut `</tool_call>` at the end still closes the
                        // block; a cut `<function=` is content.
                        if could_become(rest, TOOL_CALL_CLOSE) {
                            self.take_buf(self.buf.len());
                        }
                        self.mode = Mode::Content;
                    } else {
                        self.mode = Mode::Content;
                    }
                }
            }
        }
    }

    /// Act on a call parse; `false` when more text is needed.
    fn apply(&mut self, parsed: CallParse, out: &mut Vec<Delta>) -> bool {
        match parsed {
            CallParse::Incomplete => false,
            CallParse::AwaitingTag => {
                self.awaiting_tag = true;
                false
            }
            CallParse::Malformed { at } => {
                // Progress is guaranteed: `at` is past the trigger.
                let mut at = at.clamp(1, self.buf.len());
                while !self.buf.is_char_boundary(at) {
                    at += 1;
                }
                let text = self.take_buf(at);
                self.emit_content(&text, out);
                self.mode = Mode::Content;
                true
            }
            CallParse::Complete {
                name,
                arguments,
                end,
            } => {
                self.take_buf(end);
                self.emit_call(name, arguments, out);
                self.content.boundary_after_call();
                self.ctx = TextContext::start();
                self.mode = Mode::Block;
                true
            }
        }
    }

    fn emit_call(&mut self, name: String, arguments: Map<String, Json>, out: &mut Vec<Delta>) {
        let index = self.message.tool_calls.len();
        let id = format!("{}{}", self.id_prefix, index);
        out.push(Delta::ToolCallStart {
            index,
            id: id.clone(),
            name: name.clone(),
        });
        // One fragment per parameter, then the closing brace.
        let mut full = String::new();
        let n = arguments.len();
        for (i, (k, v)) in arguments.iter().enumerate() {
            let mut frag = String::from(if i == 0 { "{" } else { "," });
            frag.push_str(&Json::String(k.clone()).to_string());
            frag.push(':');
            frag.push_str(&v.to_string());
            full.push_str(&frag);
            out.push(Delta::ToolCallArguments {
                index,
                fragment: frag,
            });
        }
        let close = if n == 0 { "{}" } else { "}" };
        full.push_str(close);
        out.push(Delta::ToolCallArguments {
            index,
            fragment: close.to_string(),
        });
        self.message.tool_calls.push(ToolCall {
            id,
            name,
            arguments: full,
        });
    }
}
