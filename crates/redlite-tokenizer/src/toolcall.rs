//! Streaming parser from generated text to OpenAI-style message deltas.
//!
//! [`ToolCallParser`] is a state machine fed with the text the model generates
//! (in pieces of any size, split anywhere on `char` boundaries). It turns it
//! into [`Delta`]s — content text, reasoning text, tool-call starts and
//! argument fragments — and accumulates the final [`ParsedMessage`].
//!
//! Recognised forms:
//!
//! * `<think>…</think>` at the start of the message → `reasoning_content`
//!   (or the whole start of the output when the prompt already opened the
//!   block, [`ParserOptions::starts_in_reasoning`]);
//! * Qwen3-Coder tool calls
//!   `<tool_call>\n<function=NAME>\n<parameter=P>\nVALUE\n</parameter>\n…</function>\n</tool_call>`,
//!   several per message; the opening `<tool_call>` may be missing before
//!   `<function=NAME>` of a declared tool (first call only); the closing
//!   `</tool_call>` is optional;
//! * the JSON form `<tool_call>\n{"name": …, "arguments": {…}}\n</tool_call>`.
//!
//! Parameter values are typed by the tool's JSON schema: string-only
//! parameters keep the raw text (newlines preserved, no unescaping); types
//! without `string` are parsed as JSON; mixed types try JSON and keep it when
//! its kind is allowed, else the raw string; unknown parameters try JSON, else
//! string. Python spellings `True`/`False`/`None` (what a Python-rendered
//! template shows the model) are accepted for booleans and null.
//!
//! Streaming rules: text that could be the start of a tag is held back until
//! decided; a tool call is emitted only once it is complete (its start and its
//! argument fragments come together), so a malformed or truncated call is
//! never half-announced: it comes back as plain content. Whitespace around
//! tags (before and between complete calls, after `<think>`, before
//! `</think>`, after `</think>`) and at the ends of the message is dropped;
//! nothing else is
//! changed, and nothing is emitted twice: the concatenation of the deltas
//! equals the final message.

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

/// The JSON types a schema allows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Types {
    string: bool,
    number: bool,
    integer: bool,
    boolean: bool,
    null: bool,
    object: bool,
    array: bool,
}

impl Types {
    fn add_name(&mut self, name: &str) {
        match name {
            "string" => self.string = true,
            "number" => self.number = true,
            "integer" => self.integer = true,
            "boolean" => self.boolean = true,
            "null" => self.null = true,
            "object" => self.object = true,
            "array" => self.array = true,
            _ => {}
        }
    }
    fn add_value_kind(&mut self, v: &Json) {
        match v {
            Json::Null => self.null = true,
            Json::Bool(_) => self.boolean = true,
            Json::Number(n) if n.is_f64() => self.number = true,
            Json::Number(_) => self.integer = true,
            Json::String(_) => self.string = true,
            Json::Array(_) => self.array = true,
            Json::Object(_) => self.object = true,
        }
    }
    fn is_empty(&self) -> bool {
        *self == Types::default()
    }
    fn non_string(&self) -> bool {
        self.number || self.integer || self.boolean || self.null || self.object || self.array
    }
    fn allows(&self, v: &Json) -> bool {
        match v {
            Json::Null => self.null,
            Json::Bool(_) => self.boolean,
            Json::Number(n) => self.number || (self.integer && !n.is_f64()),
            Json::String(_) => self.string,
            Json::Array(_) => self.array,
            Json::Object(_) => self.object,
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

/// Convert a raw parameter value by its schema types (`None` = unknown).
fn convert_value(raw: &str, types: Option<&Types>) -> Json {
    let as_string = || Json::String(raw.to_string());
    match types {
        Some(t) if t.string && !t.non_string() => as_string(),
        Some(t) if !t.is_empty() && !t.string => {
            parse_jsonish(raw.trim()).unwrap_or_else(as_string)
        }
        Some(t) if !t.is_empty() => match parse_jsonish(raw.trim()) {
            Some(v) if t.allows(&v) => v,
            _ => as_string(),
        },
        _ => parse_jsonish(raw.trim()).unwrap_or_else(as_string),
    }
}

/// Outcome of parsing a tool call that starts at the beginning of a buffer.
enum CallParse {
    /// A complete call; `consumed` bytes belong to it.
    Complete {
        name: String,
        arguments: Map<String, Json>,
        consumed: usize,
    },
    /// More text is needed to decide.
    Incomplete,
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
    /// The call started with `<tool_call>`.
    opener: bool,
    /// End of stream: nothing more will come.
    eos: bool,
}

impl CallContext<'_> {
    fn need_more(&self, at_eos: usize) -> CallParse {
        if self.eos {
            CallParse::Malformed { at: at_eos }
        } else {
            CallParse::Incomplete
        }
    }

    /// Parse a call at the start of `s` (which starts with `<tool_call>` or,
    /// without opener, `<function=`).
    fn parse(&self, s: &str) -> CallParse {
        let mut p = 0;
        if self.opener {
            p = skip_ws(s, TOOL_CALL_OPEN.len());
            let rest = &s[p..];
            if rest.starts_with('{') {
                return self.parse_json(s, p);
            }
            if !rest.starts_with(FUNCTION_OPEN) {
                return if could_become(rest, FUNCTION_OPEN) {
                    self.need_more(s.len())
                } else {
                    CallParse::Malformed { at: p }
                };
            }
        }
        // `<function=NAME>`
        let (name, mut p) = match parse_tag_name(s, p + FUNCTION_OPEN.len()) {
            Ok(v) => v,
            Err(None) => return self.need_more(s.len()),
            Err(Some(at)) => return CallParse::Malformed { at },
        };
        let tool = self.tools.get(name);
        if !self.opener && tool.is_none() {
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
            if !rest.starts_with(PARAMETER_OPEN) {
                return if could_become(rest, PARAMETER_OPEN) || could_become(rest, FUNCTION_CLOSE) {
                    self.need_more(s.len())
                } else {
                    CallParse::Malformed { at: p }
                };
            }
            let (pname, after) = match parse_tag_name(s, p + PARAMETER_OPEN.len()) {
                Ok(v) => v,
                Err(None) => return self.need_more(s.len()),
                Err(Some(at)) => return CallParse::Malformed { at },
            };
            let mut vstart = after;
            if s[vstart..].starts_with('\n') {
                vstart += 1;
            } else if s[vstart..].starts_with("\r\n") {
                vstart += 2;
            } else if s.len() == vstart {
                return self.need_more(s.len());
            }
            // The value ends at the first `</parameter>` followed (after
            // whitespace) by another parameter or `</function>`.
            let mut search = vstart;
            let vend = loop {
                let Some(off) = s[search..].find(PARAMETER_CLOSE) else {
                    return self.need_more(s.len());
                };
                let q = search + off;
                let next = skip_ws(s, q + PARAMETER_CLOSE.len());
                let rest = &s[next..];
                if rest.starts_with(PARAMETER_OPEN) || rest.starts_with(FUNCTION_CLOSE) {
                    break q;
                }
                if could_become(rest, PARAMETER_OPEN) || could_become(rest, FUNCTION_CLOSE) {
                    return self.need_more(s.len());
                }
                search = q + 1;
            };
            let mut raw = &s[vstart..vend];
            raw = raw
                .strip_suffix("\r\n")
                .or_else(|| raw.strip_suffix('\n'))
                .unwrap_or(raw);
            let types = tool.and_then(|t| t.params.get(pname));
            arguments.insert(pname.to_string(), convert_value(raw, types));
            p = vend + PARAMETER_CLOSE.len();
        }
        let consumed = self.closing(s, p);
        match consumed {
            Some(consumed) => CallParse::Complete {
                name: name.to_string(),
                arguments,
                consumed,
            },
            None => CallParse::Incomplete,
        }
    }

    /// After the call body ending at `p`: swallow optional whitespace and
    /// `</tool_call>`. `None` = undecided yet.
    fn closing(&self, s: &str, p: usize) -> Option<usize> {
        let q = skip_ws(s, p);
        let rest = &s[q..];
        if rest.starts_with(TOOL_CALL_CLOSE) {
            return Some(q + TOOL_CALL_CLOSE.len());
        }
        if could_become(rest, TOOL_CALL_CLOSE) {
            // A truncated closer at the end of the stream still belongs to
            // the call.
            return if self.eos { Some(s.len()) } else { None };
        }
        Some(p)
    }

    /// `<tool_call>` then `{"name": …, "arguments": …}` at `p`.
    fn parse_json(&self, s: &str, p: usize) -> CallParse {
        let mut stream = serde_json::Deserializer::from_str(&s[p..]).into_iter::<Json>();
        let value = match stream.next() {
            Some(Ok(v)) => v,
            Some(Err(e)) if e.is_eof() => return self.need_more(s.len()),
            Some(Err(_)) => return CallParse::Malformed { at: p },
            None => return self.need_more(s.len()),
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
        match self.closing(s, end) {
            Some(consumed) => CallParse::Complete {
                name,
                arguments,
                consumed,
            },
            None => CallParse::Incomplete,
        }
    }
}

/// Emits text while holding back trailing whitespace, and drops whitespace at
/// segment starts and before tags.
#[derive(Debug)]
struct TextChannel {
    pending_ws: String,
    at_start: bool,
}

impl TextChannel {
    fn new() -> Self {
        TextChannel {
            pending_ws: String::new(),
            at_start: true,
        }
    }
    fn push(&mut self, s: &str) -> Option<String> {
        let s = if self.at_start { s.trim_start() } else { s };
        if s.is_empty() {
            return None;
        }
        self.at_start = false;
        let body = s.trim_end();
        if body.is_empty() {
            self.pending_ws.push_str(s);
            return None;
        }
        let mut out = std::mem::take(&mut self.pending_ws);
        out.push_str(body);
        self.pending_ws.push_str(&s[body.len()..]);
        Some(out)
    }
    /// A tag or the end of the stream: drop held whitespace and trim the
    /// start of what follows.
    fn boundary(&mut self) {
        self.pending_ws.clear();
        self.at_start = true;
    }
}

#[derive(Debug)]
enum Mode {
    Content,
    Reasoning,
    Call { opener: bool },
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
        let rest = self.buf.split_off(n);
        std::mem::replace(&mut self.buf, rest)
    }

    /// Which tags are live in content mode.
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

    fn process(&mut self, eos: bool, out: &mut Vec<Delta>) {
        loop {
            match self.mode {
                Mode::Content => {
                    let triggers = self.content_triggers();
                    let mut found = None;
                    let mut hold_from = self.buf.len();
                    for (pos, _) in self.buf.match_indices('<') {
                        let rest = &self.buf[pos..];
                        if let Some(&(tag, _)) =
                            triggers.iter().find(|(t, on)| *on && rest.starts_with(t))
                        {
                            found = Some((pos, tag));
                            break;
                        }
                        if !eos && triggers.iter().any(|(t, on)| *on && could_become(rest, t)) {
                            hold_from = pos;
                            break;
                        }
                    }
                    match found {
                        Some((pos, tag)) => {
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
                        None => {
                            let text = self.take_buf(hold_from);
                            self.emit_content(&text, out);
                            return;
                        }
                    }
                }
                Mode::Reasoning => {
                    if let Some(pos) = self.buf.find(THINK_CLOSE) {
                        let text = self.take_buf(pos);
                        self.emit_reasoning(&text, out);
                        self.take_buf(THINK_CLOSE.len());
                        self.reasoning.boundary();
                        self.content.boundary();
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
                        opener,
                        eos,
                    };
                    match ctx.parse(&self.buf) {
                        CallParse::Incomplete => return,
                        CallParse::Malformed { at } => {
                            // Progress is guaranteed: `at` is past the trigger.
                            let at = at.max(1).min(self.buf.len());
                            let text = self.take_buf(at);
                            self.emit_content(&text, out);
                            self.mode = Mode::Content;
                        }
                        CallParse::Complete {
                            name,
                            arguments,
                            consumed,
                        } => {
                            self.take_buf(consumed);
                            self.emit_call(name, arguments, out);
                            self.content.boundary();
                            self.mode = Mode::Content;
                        }
                    }
                }
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
