//! Chat templates: render a model's `tokenizer.chat_template` (Jinja) the way
//! Hugging Face `transformers` does.
//!
//! The engine is `minijinja`, configured to behave like the Jinja2 environment
//! built by transformers' `_compile_jinja_template`:
//!
//! * `trim_blocks` and `lstrip_blocks` on, trailing newline of the source dropped,
//!   `break`/`continue` available (`loopcontrols`);
//! * the source is read as Jinja2's lexer reads it: `\r\n` and lone `\r`
//!   become `\n`; transformers' `{% generation %}…{% endgeneration %}` block
//!   renders its body (as a scope, like Jinja2's call block); tuple literals
//!   (`(a, b)`, `(a,)`, `()`) are rewritten into calls that build Python tuples;
//! * Python `str` methods with Python's semantics (`py` module): whitespace is
//!   Python's (`\x1c`–`\x1f` included) in `strip`/`split`/`rsplit`,
//!   `splitlines` splits at all of Python's line boundaries, `find`/`rfind`/
//!   `index`/`count` work on character offsets (`count('')` is `len + 1`),
//!   `islower`/`isupper`/`istitle`/`title`/`capitalize`/`swapcase` follow
//!   Unicode as CPython does; `ljust`/`rjust`/`center`/`zfill`,
//!   `partition`/`rpartition`, `removeprefix`/`removesuffix`, `expandtabs`,
//!   `casefold` exist; `dict.items()`/`keys()`/`values()` are views printing
//!   as `dict_items([('k', 1)])`; the remaining methods come from
//!   `minijinja_contrib::pycompat`;
//! * Jinja2's filters where minijinja's differ or are missing: `trim` (of
//!   `str(value)`), `title` (Jinja2's word split, "they're" → "They're"),
//!   `capitalize`, `upper`, `lower`, `join` (items printed with `str()`),
//!   `items`, `dictsort` and `groupby` (tuples), `int` and `float` (Python
//!   parsing, defaults, `base`), `round` (Python's correctly rounded `round`,
//!   ties to even; `ceil`/`floor`), `e`/`escape` (markupsafe's `&#34;`/`&#39;`
//!   entities), `indent` (Python line boundaries), `replace` (with `count`),
//!   `min`/`max` (case-insensitive, `attribute`), `sum` (`attribute`,
//!   `start`), `center`, `wordcount`, `truncate`, `length` (0 for undefined),
//!   `format` (Python's `%` formatting, below), `abs` (of booleans too);
//! * `raise_exception(msg)` aborts rendering with [`TemplateError::Raised`];
//! * `strftime_now(fmt)` formats the current time (UTC; transformers uses the
//!   local time of the host);
//! * `tojson` is transformers' own filter: `json.dumps(x, ensure_ascii=False)`
//!   with Python's separators (`", "`, `": "`), key order preserved, no HTML
//!   escaping; `indent`, `separators`, `sort_keys` and `ensure_ascii` keyword
//!   arguments are honoured; undefined is an error, as `json.dumps` makes it;
//! * values print like Python's `str()`: `{{ x }}` and the `string` filter give
//!   `True`/`False` for booleans, `None` for null, Python float `repr`, and
//!   Python `repr` syntax for lists, tuples and dicts (`['a', 'b']`, `('k', 1)`,
//!   `{'k': 1}`, non-printable characters escaped as `repr` does). Tool-call
//!   arguments rendered by the Qwen3-Coder template therefore carry booleans as
//!   `True`/`False`, exactly as the model saw them in training; the tool-call
//!   parser accepts both spellings;
//! * numbers are Python's: tool-call `arguments` given as JSON text are read
//!   with [`parse_json_exact`] (integers of any size stay integers, floats are
//!   correctly rounded), and so are tools given as text to
//!   [`ChatTemplate::render_with_tools_json`];
//! * the `iterable`, `sequence` and `number` tests follow Python: `none is
//!   iterable` is false, a dict `is sequence`, a boolean `is number`;
//! * operators are Python's: the `ops` module parses each tag's expressions
//!   with Jinja2's grammar and rewrites `%`, `**`, `/`, `//`, `~` and unary
//!   `-`/`+` into calls of functions with Python's semantics. `%` takes the
//!   divisor's sign (`-7 % 3` is `2`, `-7.5 % 2` is `0.5`) and formats strings
//!   printf-style (`'%05.2f' % x`, `'%s and %s' % (a, b)`, `'%(k)s' % d`:
//!   conversions `s r a d i u o x X e E f F g G c %`, flags, `*` widths,
//!   and Python's errors on missing or surplus arguments); `**` is
//!   left-associative and binds looser than unary minus, as in Jinja2
//!   (`2 ** 3 ** 2` is 64, `-2 ** 2` is 4), a negative integer exponent
//!   gives a float, integer results are exact up to 4096 bits; `/` is true
//!   division (correctly rounded for integers), `//` floors; division or
//!   modulo by zero, `0 ** -1` and float overflow in `**` are render
//!   errors, as Python raises; `~` joins `str()` of its operands (`1e-07`,
//!   `None`); unary `-` and `+` are Python's (`-true` is `-1`, `-x.y`
//!   negates `x.y` where minijinja alone reads `(-x).y`, and minijinja has
//!   no unary `+`).
//!
//! Known differences, in operators and statements minijinja gives no hook
//! for: an integer outside the signed 128-bit range (from `**` or from
//! JSON) prints, formats with `%`, negates and takes `abs`, but is no
//! operand of `+ - * / // % **` (a render error where Python computes a
//! big integer), and `**` refuses results beyond 4096 bits (Python has no
//! bound); a negative float to a fractional power is an error (Python
//! gives a complex number); `%` formatting does not escape its arguments
//! into a `| safe` format string (Jinja2's `Markup` does; autoescaping is
//! off in transformers); `%`-format widths and precisions above 2^20 stop
//! rendering with a limit error; `+`, `-` and `*` are minijinja's, which
//! agree with Python's on numbers within 128 bits, on strings and on
//! lists, except that `+` and `*` of tuples give lists (`(1, 2) + (3,)`
//! prints `[1, 2, 3]`) and repeating by a negative count is an error
//! (Python gives an empty sequence); `for` over `none` renders nothing
//! (Python raises).
//! Jinja2's `wordwrap`, `striptags`, `urlencode` filters and `lipsum` are not
//! provided (rendering fails with an unknown-filter error).
//!
//! A template is untrusted input, so rendering is bounded: at most
//! [`MAX_RENDER_FUEL`] instructions, [`MAX_RENDER_OUTPUT`] bytes of output,
//! minijinja's recursion limit, and a nesting limit when printing values;
//! each ends rendering with [`TemplateError::Limit`], and so does a string
//! built with `~` or `%` formatting longer than [`MAX_RENDER_OUTPUT`]. Not
//! bounded: a string doubled by `+` in a loop grows in memory without
//! passing through any of these checks (minijinja repeats strings with `*`
//! only up to 100 MB).
//!
//! Messages are normalised before rendering (see [`normalize_messages`]):
//! `developer` becomes `system`, arrays of text parts are joined with `"\n"`,
//! tool-call `arguments` given as JSON strings are parsed into objects, and a
//! replayed `reasoning` field is also offered as `reasoning_content`.

use std::collections::BTreeMap;
use std::fmt::Write as _;

mod ops;
mod py;
pub use py::parse_json as parse_json_exact;

use minijinja::value::{Kwargs, Rest, ValueKind};
use minijinja::{Environment, Error, ErrorKind, State, Value};
use serde_json::{Map, Value as Json};
use thiserror::Error as ThisError;

/// Errors from compiling or rendering a chat template.
#[derive(Debug, ThisError)]
pub enum TemplateError {
    /// The template source does not compile.
    #[error("chat template does not compile: {0}")]
    Syntax(String),
    /// The template called `raise_exception(message)`.
    #[error("chat template rejected the conversation: {0}")]
    Raised(String),
    /// Rendering failed (type error, undefined attribute, …).
    #[error("chat template rendering failed: {0}")]
    Render(String),
    /// A message does not have the expected shape.
    #[error("message {index}: {reason}")]
    InvalidMessage { index: usize, reason: String },
    /// A tool definition does not have the expected shape.
    #[error("tool {index}: {reason}")]
    InvalidTool { index: usize, reason: String },
    /// An extra keyword argument would replace one the renderer sets itself.
    #[error("template keyword argument '{0}' is reserved")]
    ReservedKwarg(String),
    /// Tool definitions given as JSON text do not parse.
    #[error("tool definitions: {0}")]
    ToolsJson(String),
    /// Rendering hit a resource limit (instruction budget, output size,
    /// nesting depth).
    #[error("chat template rendering stopped: {0}")]
    Limit(String),
    /// The GGUF metadata could not be read.
    #[error("reading chat template metadata: {0}")]
    Gguf(String),
}

/// Name under which the template is stored in the environment.
const TEMPLATE_NAME: &str = "chat_template";
/// Marker put in front of `raise_exception` messages to recognise them.
const RAISE_MARKER: &str = "\u{1}raise_exception\u{1}";

/// Global function that builds a Python tuple; tuple literals in the source
/// are rewritten into calls of it.
const TUPLE_FN: &str = "__redlite_py_tuple__";

/// Marker put in front of resource-limit messages raised by our own code.
const LIMIT_MARKER: &str = "\u{1}limit\u{1}";

/// Most template instructions one render may execute (minijinja fuel). The
/// Qwen3-Coder template renders a 48,000-message agent conversation with 30
/// tools within it; a template that loops without end stops here, well
/// within a second, instead of hanging.
pub const MAX_RENDER_FUEL: u64 = 5_000_000;
/// Largest rendered prompt, in bytes.
pub const MAX_RENDER_OUTPUT: usize = 64 << 20;
/// Deepest nesting `tojson`, `string` and printing walk through.
const MAX_VALUE_DEPTH: usize = 256;

/// A plain ChatML template, used when a model file carries no chat template.
/// Tool definitions and tool calls are rendered in the Qwen/Hermes JSON style.
pub const CHATML_TEMPLATE: &str = r##"{%- if tools %}
{{- '<|im_start|>system\n' }}
{%- if messages[0].role == 'system' %}{{- messages[0].content + '\n\n' }}{%- endif %}
{{- "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
{%- for tool in tools %}{{- '\n' }}{{- tool | tojson }}{%- endfor %}
{{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- elif messages[0].role == 'system' %}
{{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
{%- endif %}
{%- for message in messages %}
{%- if message.role == 'system' and loop.first %}
{%- elif message.role == 'assistant' and message.tool_calls %}
{{- '<|im_start|>assistant' }}
{%- if message.content %}{{- '\n' + message.content }}{%- endif %}
{%- for tool_call in message.tool_calls %}
{%- if tool_call.function is defined %}{%- set tool_call = tool_call.function %}{%- endif %}
{{- '\n<tool_call>\n{"name": "' + tool_call.name + '", "arguments": ' + (tool_call.arguments | tojson) + '}\n</tool_call>' }}
{%- endfor %}
{{- '<|im_end|>\n' }}
{%- elif message.role == 'tool' %}
{%- if loop.first or loop.previtem.role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}
{{- '\n<tool_response>\n' + message.content + '\n</tool_response>' }}
{%- if loop.last or loop.nextitem.role != 'tool' %}{{- '<|im_end|>\n' }}{%- endif %}
{%- else %}
{{- '<|im_start|>' + message.role + '\n' + (message.content or '') + '<|im_end|>\n' }}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}"##;

/// A compiled chat template plus the special-token strings it may refer to.
pub struct ChatTemplate {
    env: Environment<'static>,
    source: String,
    bos_token: String,
    eos_token: String,
    is_fallback: bool,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("source_len", &self.source.len())
            .field("bos_token", &self.bos_token)
            .field("eos_token", &self.eos_token)
            .field("is_fallback", &self.is_fallback)
            .finish()
    }
}

impl ChatTemplate {
    /// Compile `source` (Jinja). `bos`/`eos` are exposed to the template as
    /// `bos_token` / `eos_token`.
    pub fn new(source: &str, bos: &str, eos: &str) -> Result<ChatTemplate, TemplateError> {
        let mut env = build_environment();
        // Tuple literals are found by a light scan of each tag, operators by
        // a parse of its expressions; should either ever misread a source,
        // the source compiles without that rewrite.
        if env
            .add_template_owned(TEMPLATE_NAME, prepare_source(source, true, true))
            .is_err()
            && env
                .add_template_owned(TEMPLATE_NAME, prepare_source(source, true, false))
                .is_err()
        {
            env.add_template_owned(TEMPLATE_NAME, prepare_source(source, false, false))
                .map_err(|e| TemplateError::Syntax(describe_error(&e)))?;
        }
        Ok(ChatTemplate {
            env,
            source: source.to_string(),
            bos_token: bos.to_string(),
            eos_token: eos.to_string(),
            is_fallback: false,
        })
    }

    /// The built-in ChatML template ([`CHATML_TEMPLATE`]).
    pub fn chatml(bos: &str, eos: &str) -> ChatTemplate {
        match ChatTemplate::new(CHATML_TEMPLATE, bos, eos) {
            Ok(mut t) => {
                t.is_fallback = true;
                t
            }
            // The built-in source is a constant covered by tests.
            Err(e) => unreachable!("built-in ChatML template does not compile: {e}"),
        }
    }

    /// The template stored in a GGUF file (`tokenizer.chat_template`), or the
    /// ChatML fallback when the file has none. `bos_token`/`eos_token` are the
    /// texts of the tokens named by `tokenizer.ggml.bos_token_id` /
    /// `eos_token_id` (empty when absent).
    pub fn from_gguf(file: &redlite_gguf::GgufFile) -> Result<ChatTemplate, TemplateError> {
        let gguf_err = |e: redlite_gguf::GgufError| TemplateError::Gguf(e.to_string());
        let tokens = file
            .get_str_array("tokenizer.ggml.tokens")
            .map_err(gguf_err)?
            .unwrap_or(&[]);
        let token_text = |key: &str| -> Result<String, TemplateError> {
            match file.get_u64(key).map_err(gguf_err)? {
                None => Ok(String::new()),
                Some(id) => tokens.get(id as usize).cloned().ok_or_else(|| {
                    TemplateError::Gguf(format!(
                        "{key} = {id} is outside the token list ({} tokens)",
                        tokens.len()
                    ))
                }),
            }
        };
        let bos = token_text("tokenizer.ggml.bos_token_id")?;
        let eos = token_text("tokenizer.ggml.eos_token_id")?;
        match file.get_str("tokenizer.chat_template").map_err(gguf_err)? {
            Some(src) if !src.trim().is_empty() => ChatTemplate::new(src, &bos, &eos),
            _ => Ok(ChatTemplate::chatml(&bos, &eos)),
        }
    }

    /// The template source.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Whether this is the built-in ChatML fallback.
    pub fn is_fallback(&self) -> bool {
        self.is_fallback
    }

    /// Render a conversation.
    ///
    /// * `messages`: OpenAI-style message objects (normalised first, see
    ///   [`normalize_messages`]);
    /// * `tools`: OpenAI tool definitions; `None` renders `tools` as `none`,
    ///   like transformers does when no tools are given;
    /// * `add_generation_prompt`: append the assistant header;
    /// * `extra`: further template variables (`chat_template_kwargs`), which
    ///   may override `bos_token`/`eos_token` but not `messages`, `tools` or
    ///   `add_generation_prompt`.
    pub fn render(
        &self,
        messages: &[Json],
        tools: Option<&[Json]>,
        add_generation_prompt: bool,
        extra: &Map<String, Json>,
    ) -> Result<String, TemplateError> {
        if let Some(tools) = tools {
            for (index, tool) in tools.iter().enumerate() {
                if !tool.is_object() {
                    return Err(TemplateError::InvalidTool {
                        index,
                        reason: format!("expected an object, got {}", json_kind(tool)),
                    });
                }
            }
        }
        let tools = tools.map(|t| t.iter().map(json_to_value).collect::<Vec<_>>());
        self.render_values(messages, tools, add_generation_prompt, extra)
    }

    /// [`ChatTemplate::render`] with the tool definitions given as JSON text
    /// (an array), read the way Python's `json.loads` reads it: integers of
    /// any size stay exact, as they do in the schemas transformers renders.
    pub fn render_with_tools_json(
        &self,
        messages: &[Json],
        tools_json: Option<&str>,
        add_generation_prompt: bool,
        extra: &Map<String, Json>,
    ) -> Result<String, TemplateError> {
        let tools = match tools_json {
            None => None,
            Some(text) => {
                let v = py::parse_json(text).map_err(TemplateError::ToolsJson)?;
                if v.kind() != ValueKind::Seq {
                    return Err(TemplateError::ToolsJson(format!(
                        "expected an array of tools, got {}",
                        py::py_type_name(&v)
                    )));
                }
                let tools: Vec<Value> = v
                    .try_iter()
                    .map_err(|e| TemplateError::ToolsJson(e.to_string()))?
                    .collect();
                for (index, tool) in tools.iter().enumerate() {
                    if tool.kind() != ValueKind::Map {
                        return Err(TemplateError::InvalidTool {
                            index,
                            reason: format!("expected an object, got {}", py::py_type_name(tool)),
                        });
                    }
                }
                Some(tools)
            }
        };
        self.render_values(messages, tools, add_generation_prompt, extra)
    }

    fn render_values(
        &self,
        messages: &[Json],
        tools: Option<Vec<Value>>,
        add_generation_prompt: bool,
        extra: &Map<String, Json>,
    ) -> Result<String, TemplateError> {
        let normalized = normalize_messages(messages)?;
        let mut message_values = Vec::with_capacity(normalized.len());
        for (index, (norm, orig)) in normalized.iter().zip(messages).enumerate() {
            message_values.push(
                message_value(norm, orig)
                    .map_err(|reason| TemplateError::InvalidMessage { index, reason })?,
            );
        }
        let mut ctx: BTreeMap<String, Value> = BTreeMap::new();
        ctx.insert("bos_token".into(), Value::from(self.bos_token.as_str()));
        ctx.insert("eos_token".into(), Value::from(self.eos_token.as_str()));
        for (k, v) in extra {
            if matches!(
                k.as_str(),
                "messages" | "tools" | "add_generation_prompt" | "documents"
            ) {
                return Err(TemplateError::ReservedKwarg(k.clone()));
            }
            ctx.insert(k.clone(), json_to_value(v));
        }
        ctx.insert("messages".into(), Value::from(message_values));
        ctx.insert(
            "tools".into(),
            match tools {
                Some(t) => Value::from(t),
                None => Value::from(()),
            },
        );
        ctx.insert("documents".into(), Value::from(()));
        ctx.insert(
            "add_generation_prompt".into(),
            Value::from(add_generation_prompt),
        );
        let tmpl = self
            .env
            .get_template(TEMPLATE_NAME)
            .map_err(|e| TemplateError::Syntax(describe_error(&e)))?;
        let mut out = CappedWriter {
            buf: Vec::new(),
            limit: MAX_RENDER_OUTPUT,
            exceeded: false,
        };
        match tmpl.render_captured_to(Value::from(ctx), &mut out) {
            Ok(_) => {}
            Err(_) if out.exceeded => {
                return Err(TemplateError::Limit(format!(
                    "the rendered prompt exceeds {} MiB",
                    MAX_RENDER_OUTPUT >> 20
                )))
            }
            Err(e) => return Err(classify_error(&e)),
        }
        String::from_utf8(out.buf)
            .map_err(|e| TemplateError::Render(format!("output is not UTF-8: {e}")))
    }
}

/// An output sink that refuses to grow past `limit` bytes.
struct CappedWriter {
    buf: Vec<u8>,
    limit: usize,
    exceeded: bool,
}

impl std::io::Write for CappedWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        if self.buf.len().saturating_add(data.len()) > self.limit {
            self.exceeded = true;
            return Err(std::io::Error::other("output size limit reached"));
        }
        self.buf.extend_from_slice(data);
        Ok(data.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A JSON value as a template value (Python's view: ints, floats, dicts in
/// key order).
fn json_to_value(v: &Json) -> Value {
    match v {
        Json::Null => Value::from(()),
        Json::Bool(b) => Value::from(*b),
        Json::Number(n) => {
            if let Some(i) = n.as_i64() {
                Value::from(i)
            } else if let Some(u) = n.as_u64() {
                Value::from(u)
            } else {
                Value::from(n.as_f64().unwrap_or(f64::NAN))
            }
        }
        Json::String(s) => Value::from(s.as_str()),
        Json::Array(a) => Value::from(a.iter().map(json_to_value).collect::<Vec<_>>()),
        Json::Object(o) => Value::from_iter(
            o.iter()
                .map(|(k, v)| (Value::from(k.as_str()), json_to_value(v))),
        ),
    }
}

/// A normalised message as a template value. Tool-call `arguments` that the
/// caller gave as JSON text are read again from that text with
/// [`py::parse_json`], so their numbers are exactly what Python's
/// `json.loads` makes of them (integers of any size, correctly rounded
/// floats).
fn message_value(norm: &Json, orig: &Json) -> Result<Value, String> {
    let (Json::Object(n), Json::Object(o)) = (norm, orig) else {
        return Ok(json_to_value(norm));
    };
    let mut pairs = Vec::with_capacity(n.len());
    for (k, v) in n {
        let value = match (k.as_str(), v, o.get(k)) {
            ("tool_calls", Json::Array(calls), Some(Json::Array(orig_calls))) => {
                let mut out = Vec::with_capacity(calls.len());
                for (ci, (call, orig_call)) in calls.iter().zip(orig_calls).enumerate() {
                    out.push(
                        tool_call_value(call, orig_call)
                            .map_err(|e| format!("tool_calls[{ci}]: {e}"))?,
                    );
                }
                Value::from(out)
            }
            _ => json_to_value(v),
        };
        pairs.push((Value::from(k.as_str()), value));
    }
    Ok(Value::from_iter(pairs))
}

fn tool_call_value(call: &Json, orig: &Json) -> Result<Value, String> {
    let (Json::Object(c), Json::Object(o)) = (call, orig) else {
        return Ok(json_to_value(call));
    };
    let mut pairs = Vec::with_capacity(c.len());
    for (k, v) in c {
        let value = match (k.as_str(), o.get(k)) {
            ("function", Some(orig_f @ Json::Object(_))) => tool_call_value(v, orig_f)?,
            ("arguments", Some(Json::String(text))) => {
                if py::py_strip(text, None, true, true).is_empty() {
                    Value::from_iter(std::iter::empty::<(Value, Value)>())
                } else {
                    py::parse_json(text)
                        .map_err(|e| format!("'arguments' is not valid JSON: {e}"))?
                }
            }
            _ => json_to_value(v),
        };
        pairs.push((Value::from(k.as_str()), value));
    }
    Ok(Value::from_iter(pairs))
}

fn json_kind(v: &Json) -> &'static str {
    match v {
        Json::Null => "null",
        Json::Bool(_) => "a boolean",
        Json::Number(_) => "a number",
        Json::String(_) => "a string",
        Json::Array(_) => "an array",
        Json::Object(_) => "an object",
    }
}

/// Normalise OpenAI-style messages into the shape chat templates expect:
///
/// * `role` must be a string; `developer` becomes `system`;
/// * `content` given as an array of parts becomes the text parts joined with
///   `"\n"` (non-text parts are rejected: the model is text-only); `null`
///   content stays `null` on assistant messages with tool calls and becomes
///   `""` elsewhere;
/// * each tool call's `function.arguments` (or `arguments`) given as a JSON
///   string is parsed into an object, as transformers and llama.cpp do before
///   rendering;
/// * `reasoning` is copied to `reasoning_content` when the latter is absent.
pub fn normalize_messages(messages: &[Json]) -> Result<Vec<Json>, TemplateError> {
    let mut out = Vec::with_capacity(messages.len());
    for (index, msg) in messages.iter().enumerate() {
        let bad = |reason: String| TemplateError::InvalidMessage { index, reason };
        let Json::Object(obj) = msg else {
            return Err(bad(format!("expected an object, got {}", json_kind(msg))));
        };
        let mut obj = obj.clone();
        let role = match obj.get("role") {
            Some(Json::String(r)) => r.clone(),
            Some(other) => {
                return Err(bad(format!(
                    "'role' must be a string, got {}",
                    json_kind(other)
                )))
            }
            None => return Err(bad("missing 'role'".into())),
        };
        if role == "developer" {
            obj.insert("role".into(), Json::String("system".into()));
        }
        let has_tool_calls = matches!(obj.get("tool_calls"), Some(Json::Array(a)) if !a.is_empty());
        match obj.get("content") {
            Some(Json::Array(parts)) => {
                let mut texts = Vec::with_capacity(parts.len());
                for (pi, part) in parts.iter().enumerate() {
                    match part {
                        Json::String(s) => texts.push(s.clone()),
                        Json::Object(p) => {
                            let ty = p.get("type").and_then(Json::as_str).unwrap_or("text");
                            if ty != "text" {
                                return Err(bad(format!(
                                    "content part {pi} has type '{ty}'; only text is supported"
                                )));
                            }
                            match p.get("text") {
                                Some(Json::String(s)) => texts.push(s.clone()),
                                _ => {
                                    return Err(bad(format!(
                                        "content part {pi} has no string 'text'"
                                    )))
                                }
                            }
                        }
                        other => {
                            return Err(bad(format!(
                                "content part {pi} must be an object, got {}",
                                json_kind(other)
                            )))
                        }
                    }
                }
                obj.insert("content".into(), Json::String(texts.join("\n")));
            }
            Some(Json::String(_)) => {}
            Some(Json::Null) | None => {
                if !has_tool_calls {
                    obj.insert("content".into(), Json::String(String::new()));
                } else {
                    obj.insert("content".into(), Json::Null);
                }
            }
            Some(other) => {
                return Err(bad(format!(
                    "'content' must be a string, an array of parts or null, got {}",
                    json_kind(other)
                )))
            }
        }
        if let Some(tcs) = obj.get_mut("tool_calls") {
            match tcs {
                Json::Array(calls) => {
                    for (ci, call) in calls.iter_mut().enumerate() {
                        normalize_tool_call(call)
                            .map_err(|r| bad(format!("tool_calls[{ci}]: {r}")))?;
                    }
                }
                Json::Null => {}
                other => {
                    return Err(bad(format!(
                        "'tool_calls' must be an array, got {}",
                        json_kind(other)
                    )))
                }
            }
        }
        if !obj.contains_key("reasoning_content") {
            if let Some(r @ Json::String(_)) = obj.get("reasoning") {
                let r = r.clone();
                obj.insert("reasoning_content".into(), r);
            }
        }
        out.push(Json::Object(obj));
    }
    Ok(out)
}

fn normalize_tool_call(call: &mut Json) -> Result<(), String> {
    let Json::Object(obj) = call else {
        return Err(format!("expected an object, got {}", json_kind(call)));
    };
    let target = match obj.get_mut("function") {
        Some(Json::Object(f)) => f,
        Some(other) => {
            return Err(format!(
                "'function' must be an object, got {}",
                json_kind(other)
            ))
        }
        None => obj,
    };
    if !matches!(target.get("name"), Some(Json::String(_))) {
        return Err("missing string 'name'".into());
    }
    if let Some(Json::String(s)) = target.get("arguments") {
        let parsed: Json = if py::py_strip(s, None, true, true).is_empty() {
            Json::Object(Map::new())
        } else {
            serde_json::from_str(s).map_err(|e| format!("'arguments' is not valid JSON: {e}"))?
        };
        if !parsed.is_object() {
            return Err(format!(
                "'arguments' must encode a JSON object, got {}",
                json_kind(&parsed)
            ));
        }
        target.insert("arguments".into(), parsed);
    }
    Ok(())
}

fn describe_error(e: &Error) -> String {
    let mut s = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(inner) = src {
        let _ = write!(s, ": {inner}");
        src = inner.source();
    }
    s
}

fn classify_error(e: &Error) -> TemplateError {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(me) = err.downcast_ref::<Error>() {
            if me.kind() == ErrorKind::OutOfFuel {
                return TemplateError::Limit(format!(
                    "the template executed more than {MAX_RENDER_FUEL} instructions"
                ));
            }
            if let Some(detail) = me.detail() {
                if let Some(msg) = detail.strip_prefix(RAISE_MARKER) {
                    return TemplateError::Raised(msg.to_string());
                }
                if let Some(msg) = detail.strip_prefix(LIMIT_MARKER) {
                    return TemplateError::Limit(msg.to_string());
                }
            }
        }
        cur = err.source();
    }
    TemplateError::Render(describe_error(e))
}

/// The template source as Jinja2 sees it after its lexer's normalisation:
/// every `\r\n` and lone `\r` becomes `\n` (`newline_sequence`), and
/// transformers' `{% generation %}…{% endgeneration %}` block, which renders
/// its body unchanged, becomes a scope block minijinja knows (`with`), keeping
/// the tag's whitespace-control markers. With `tuples`, tuple literals
/// (`(a, b)`, `(a,)`, `()`) become calls of [`TUPLE_FN`], so they are Python
/// tuples (minijinja reads them as lists). With `operators`, `%`, `**`,
/// `/`, `//`, `~` and unary `-`/`+` become calls of functions with Python's
/// semantics (see the `ops` module).
fn prepare_source(source: &str, tuples: bool, operators: bool) -> String {
    let src = source.replace("\r\n", "\n").replace('\r', "\n");
    let b = src.as_bytes();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    let mut copied = 0;
    // Skip a string literal starting at `j` (quote char at b[j]).
    let skip_string = |mut j: usize| -> usize {
        let q = b[j];
        j += 1;
        while j < b.len() && b[j] != q {
            if b[j] == b'\\' {
                j += 1;
            }
            j += 1;
        }
        j + 1
    };
    // Skip to just past `close`, stepping over string literals.
    let skip_tag = |mut j: usize, close: &[u8]| -> usize {
        while j < b.len() {
            if b[j] == b'\'' || b[j] == b'"' {
                j = skip_string(j);
            } else if b[j..].starts_with(close) {
                return j + close.len();
            } else {
                j += 1;
            }
        }
        b.len()
    };
    while i + 1 < b.len() {
        if b[i] != b'{' {
            i += 1;
            continue;
        }
        match b[i + 1] {
            b'#' => i = src[i + 2..].find("#}").map_or(b.len(), |p| i + 2 + p + 2),
            b'{' => {
                let end = skip_tag(i + 2, b"}}");
                let inner = src
                    .get(i + 2..end)
                    .and_then(|t| t.strip_suffix("}}"))
                    .unwrap_or_default();
                if let Some(rewritten) = rewrite_tag(inner, false, tuples, operators) {
                    out.push_str(&src[copied..i]);
                    out.push_str("{{");
                    out.push_str(&rewritten);
                    out.push_str("}}");
                    copied = end;
                }
                i = end;
            }
            b'%' => {
                let end = skip_tag(i + 2, b"%}");
                let inner = src
                    .get(i..end)
                    .and_then(|t| t.strip_prefix("{%"))
                    .and_then(|t| t.strip_suffix("%}"))
                    .unwrap_or_default();
                // Whitespace-control markers (`-`, `+`) after `{%` and before `%}`.
                let lead = inner.get(..1).filter(|c| *c == "-" || *c == "+");
                let body = &inner[lead.map_or(0, str::len)..];
                let trail = body
                    .get(body.len().saturating_sub(1)..)
                    .filter(|c| *c == "-" || *c == "+");
                let body = &body[..body.len() - trail.map_or(0, str::len)];
                let name = body.trim();
                if name == "raw" {
                    // Copy everything up to and including the endraw tag.
                    let mut j = end;
                    loop {
                        match src[j.min(src.len())..].find("{%") {
                            None => {
                                j = b.len();
                                break;
                            }
                            Some(p) => {
                                let t_end = skip_tag(j + p + 2, b"%}");
                                let t = src
                                    .get(j + p + 2..t_end)
                                    .and_then(|t| t.strip_suffix("%}"))
                                    .unwrap_or_default()
                                    .trim_matches(|c: char| {
                                        c == '-' || c == '+' || c.is_whitespace()
                                    });
                                j = t_end;
                                if t == "endraw" {
                                    break;
                                }
                            }
                        }
                    }
                    i = j;
                    continue;
                }
                if name == "generation" || name == "endgeneration" {
                    out.push_str(&src[copied..i]);
                    out.push_str("{%");
                    out.push_str(lead.unwrap_or_default());
                    out.push_str(if name == "generation" {
                        " with "
                    } else {
                        " endwith "
                    });
                    out.push_str(trail.unwrap_or_default());
                    out.push_str("%}");
                    copied = end;
                } else if let Some(rewritten) = rewrite_tag(inner, true, tuples, operators) {
                    out.push_str(&src[copied..i]);
                    out.push_str("{%");
                    out.push_str(&rewritten);
                    out.push_str("%}");
                    copied = end;
                }
                i = end;
            }
            _ => i += 1,
        }
    }
    out.push_str(&src[copied.min(src.len())..]);
    out
}

/// The body of one `{{ … }}` or `{% … %}` tag with its tuple literals
/// and/or its operators rewritten; `None` when nothing changes.
fn rewrite_tag(inner: &str, statement: bool, tuples: bool, operators: bool) -> Option<String> {
    let t = if tuples {
        py::rewrite_tuple_literals(inner, statement)
    } else {
        None
    };
    let o = if operators {
        ops::rewrite_operators(t.as_deref().unwrap_or(inner), statement)
    } else {
        None
    };
    o.or(t)
}

fn build_environment() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_trim_blocks(true);
    env.set_lstrip_blocks(true);
    env.set_keep_trailing_newline(false);
    env.set_fuel(Some(MAX_RENDER_FUEL));
    env.set_unknown_method_callback(py::method_callback);
    env.set_formatter(|out, _state, value| {
        if value.is_undefined() {
            return Ok(());
        }
        let text = py_str_checked(value)?;
        out.write_str(&text)
            .map_err(|e| Error::new(ErrorKind::WriteFailure, e.to_string()))
    });
    env.add_filter("tojson", tojson_filter);
    env.add_filter("string", |v: Value| -> Result<Value, Error> {
        Ok(Value::from(py_str_checked(&v)?))
    });
    env.add_filter("trim", py::filter_trim);
    env.add_filter("title", py::filter_title);
    env.add_filter("capitalize", py::filter_capitalize);
    env.add_filter("upper", py::filter_upper);
    env.add_filter("lower", py::filter_lower);
    env.add_filter("escape", py::filter_escape);
    env.add_filter("e", py::filter_escape);
    env.add_filter("join", py::filter_join);
    env.add_filter("items", py::filter_items);
    env.add_filter("int", py::filter_int);
    env.add_filter("float", py::filter_float);
    env.add_filter("round", py::filter_round);
    env.add_filter("indent", py::filter_indent);
    env.add_filter("replace", py::filter_replace);
    env.add_filter("dictsort", py::filter_dictsort);
    env.add_filter("min", py::filter_min);
    env.add_filter("max", py::filter_max);
    env.add_filter("sum", py::filter_sum);
    env.add_filter("groupby", py::filter_groupby);
    env.add_filter("center", py::filter_center);
    env.add_filter("length", py::filter_length);
    env.add_filter("count", py::filter_length);
    env.add_filter("wordcount", py::filter_wordcount);
    env.add_filter("truncate", py::filter_truncate);
    env.add_filter("format", ops::filter_format);
    env.add_filter("abs", ops::filter_abs);
    env.add_test("iterable", |v: Value| -> bool {
        match v.kind() {
            ValueKind::None => false,
            ValueKind::Undefined => true,
            _ => v.try_iter().is_ok(),
        }
    });
    env.add_test("sequence", |v: Value| -> bool {
        matches!(
            v.kind(),
            ValueKind::String
                | ValueKind::Seq
                | ValueKind::Map
                | ValueKind::Bytes
                | ValueKind::Undefined
        )
    });
    env.add_test("number", |v: Value| -> bool {
        // Python: `isinstance(v, numbers.Number)`, and bool is an int.
        matches!(v.kind(), ValueKind::Number | ValueKind::Bool)
            || v.downcast_object_ref::<py::PyBigInt>().is_some()
    });
    env.add_test("integer", |v: Value| -> bool {
        (v.kind() == ValueKind::Number && v.is_integer())
            || v.downcast_object_ref::<py::PyBigInt>().is_some()
    });
    env.add_function(TUPLE_FN, |items: Rest<Value>| -> Value {
        py::PyTuple::value(items.0)
    });
    env.add_function(ops::MOD_FN, ops::py_mod);
    env.add_function(ops::POW_FN, ops::py_pow);
    env.add_function(ops::DIV_FN, ops::py_truediv);
    env.add_function(ops::FLOORDIV_FN, ops::py_floordiv);
    env.add_function(ops::CONCAT_FN, ops::py_concat);
    env.add_function(ops::NEG_FN, ops::py_neg);
    env.add_function(ops::POS_FN, ops::py_pos);
    env.add_function("raise_exception", |msg: Value| -> Result<Value, Error> {
        Err(Error::new(
            ErrorKind::InvalidOperation,
            format!("{RAISE_MARKER}{}", py_str(&msg)),
        ))
    });
    env.add_function("strftime_now", |fmt: String| -> Value {
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0);
        Value::from(strftime_utc(&fmt, secs))
    });
    env
}

fn tojson_filter(_state: &State, value: Value, kwargs: Kwargs) -> Result<Value, Error> {
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
                Some(" ".repeat(n.max(0) as usize))
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

fn dump_newline(opts: &DumpOpts, level: usize, out: &mut String) {
    if let Some(ind) = &opts.indent {
        out.push('\n');
        for _ in 0..level {
            out.push_str(ind);
        }
    }
}

fn dump_value(v: &Value, opts: &DumpOpts, level: usize, out: &mut String) -> Result<(), Error> {
    if level > MAX_VALUE_DEPTH {
        return Err(depth_error());
    }
    if let Some(b) = v.downcast_object_ref::<py::PyBigInt>() {
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
        ValueKind::String => dump_string(v.as_str().unwrap_or_default(), opts.ensure_ascii, out),
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
                    out.push_str(&opts.item_sep);
                }
                dump_newline(opts, level + 1, out);
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
                dump_string(&key_text, opts.ensure_ascii, out);
                out.push_str(&opts.key_sep);
                let item = v.get_item(k)?;
                dump_value(&item, opts, level + 1, out)?;
            }
            dump_newline(opts, level, out);
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
                    out.push_str(&opts.item_sep);
                }
                dump_newline(opts, level + 1, out);
                dump_value(item, opts, level + 1, out)?;
            }
            dump_newline(opts, level, out);
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
fn dump_string(s: &str, ensure_ascii: bool, out: &mut String) {
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
}

/// Python `str()` / `repr()` of a number. `json` selects JSON spellings of
/// non-finite floats (`NaN`, `Infinity`) as Python's `json` module writes them.
fn py_number(v: &Value, json: bool) -> String {
    if let Some(b) = v.downcast_object_ref::<py::PyBigInt>() {
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
fn py_str_checked(v: &Value) -> Result<String, Error> {
    match v.kind() {
        ValueKind::String => Ok(v.as_str().unwrap_or_default().to_string()),
        ValueKind::Undefined => Ok(String::new()),
        _ => {
            let mut out = String::new();
            if repr_into(v, &mut out, 0) {
                Ok(out)
            } else {
                Err(depth_error())
            }
        }
    }
}

fn depth_error() -> Error {
    Error::new(
        ErrorKind::InvalidOperation,
        format!("{LIMIT_MARKER}a value is nested more than {MAX_VALUE_DEPTH} levels deep"),
    )
}

/// Python `repr()` of a template value.
pub fn py_repr(v: &Value) -> String {
    let mut out = String::new();
    repr_into(v, &mut out, 0);
    out
}

/// Append the repr of `v`; false when the nesting limit was reached (the
/// text then holds `[...]` at that point).
fn repr_into(v: &Value, out: &mut String, depth: usize) -> bool {
    if depth > MAX_VALUE_DEPTH {
        out.push_str("[...]");
        return false;
    }
    let mut ok = true;
    match v.kind() {
        ValueKind::Undefined => {}
        ValueKind::None => out.push_str("None"),
        ValueKind::Bool => out.push_str(if v.is_true() { "True" } else { "False" }),
        ValueKind::Number => out.push_str(&py_number(v, false)),
        ValueKind::String => repr_string(v.as_str().unwrap_or_default(), out),
        ValueKind::Seq | ValueKind::Iterable => {
            let view = v.downcast_object_ref::<py::PyDictView>().map(|d| d.kind);
            if let Some(kind) = view {
                out.push_str(kind);
                out.push('(');
            }
            let tuple = v.downcast_object_ref::<py::PyTuple>().is_some();
            out.push(if tuple { '(' } else { '[' });
            let mut n = 0;
            if let Ok(it) = v.try_iter() {
                for (i, item) in it.enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    ok &= repr_into(&item, out, depth + 1);
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
                    ok &= repr_into(&k, out, depth + 1);
                    out.push_str(": ");
                    let item = v.get_item(&k).unwrap_or_default();
                    ok &= repr_into(&item, out, depth + 1);
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
            c if !py::py_isprintable(c) => {
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

/// `strftime` over a UTC timestamp, for `strftime_now`. Supports the
/// directives chat templates use: `%Y %y %m %d %e %H %I %M %S %p %j %a %A %b
/// %B %%`; other directives are copied through unchanged.
pub fn strftime_utc(fmt: &str, unix_secs: i64) -> String {
    const DAYS: [&str; 7] = [
        "Monday",
        "Tuesday",
        "Wednesday",
        "Thursday",
        "Friday",
        "Saturday",
        "Sunday",
    ];
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    let days = unix_secs.div_euclid(86_400);
    let sod = unix_secs.rem_euclid(86_400);
    let (hour, minute, second) = (sod / 3600, (sod / 60) % 60, sod % 60);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy_mar = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy_mar + 2) / 153;
    let day = doy_mar - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    const CUM: [i64; 12] = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];
    let yday = CUM[(month - 1) as usize] + day + i64::from(leap && month > 2);
    // 1970-01-01 was a Thursday (index 3 with Monday = 0).
    let wday = (days + 3).rem_euclid(7) as usize;
    let month_name = MONTHS[(month - 1) as usize];
    let hour12 = if hour % 12 == 0 { 12 } else { hour % 12 };

    let mut out = String::new();
    let mut chars = fmt.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('Y') => {
                let _ = write!(out, "{year}");
            }
            Some('y') => {
                let _ = write!(out, "{:02}", year.rem_euclid(100));
            }
            Some('m') => {
                let _ = write!(out, "{month:02}");
            }
            Some('d') => {
                let _ = write!(out, "{day:02}");
            }
            Some('e') => {
                let _ = write!(out, "{day:>2}");
            }
            Some('H') => {
                let _ = write!(out, "{hour:02}");
            }
            Some('I') => {
                let _ = write!(out, "{hour12:02}");
            }
            Some('M') => {
                let _ = write!(out, "{minute:02}");
            }
            Some('S') => {
                let _ = write!(out, "{second:02}");
            }
            Some('p') => out.push_str(if hour < 12 { "AM" } else { "PM" }),
            Some('j') => {
                let _ = write!(out, "{yday:03}");
            }
            Some('a') => out.push_str(&DAYS[wday][..3]),
            Some('A') => out.push_str(DAYS[wday]),
            Some('b') => out.push_str(&month_name[..3]),
            Some('B') => out.push_str(month_name),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}
