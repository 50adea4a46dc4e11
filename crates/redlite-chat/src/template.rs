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
//! minijinja's recursion limit, and a nesting limit when printing values.
//! Every operation that can build a large value checks the size of its
//! result against the budget **before** it allocates (the `budget` module):
//! no string longer than [`MAX_RENDER_OUTPUT`] bytes and no sequence of
//! more than [`MAX_SEQ_ITEMS`] items is ever built, so a hostile template
//! cannot abort the process by exhausting memory (`+` and `*` are rewritten
//! into size-checked calls, like the other operators). Each limit ends
//! rendering with [`TemplateError::Limit`], whose message names the
//! template line. Not covered: a tag the operator rewrite does not
//! understand keeps minijinja's own `+` (unchecked for strings; `*` repeats
//! strings up to 100 MB there), and many values each within the budget can
//! still be kept alive at once.
//!
//! Messages are normalised before rendering (see [`normalize_messages`]):
//! `developer` becomes `system`, arrays of text parts are joined with `"\n"`,
//! tool-call `arguments` given as JSON strings are parsed into objects, and a
//! replayed `reasoning` field is also offered as `reasoning_content`.

use std::collections::BTreeMap;
use std::fmt::Write as _;

mod budget;
mod ops;
pub(crate) mod py;
mod source;
pub use crate::messages::normalize_messages;
pub use budget::MAX_SEQ_ITEMS;
pub use py::parse_json as parse_json_exact;
pub use py::{py_float_repr, py_repr, py_str};

use minijinja::value::{Rest, ValueKind};
use minijinja::{Environment, Error, ErrorKind, Value};
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
pub(crate) const TUPLE_FN: &str = "__redlite_py_tuple__";

/// Marker put in front of resource-limit messages raised by our own code.
pub(crate) const LIMIT_MARKER: &str = "\u{1}limit\u{1}";

/// Most template instructions one render may execute (minijinja fuel). The
/// Qwen3-Coder template renders a 48,000-message agent conversation with 30
/// tools within it; a template that loops without end stops here, well
/// within a second, instead of hanging.
pub const MAX_RENDER_FUEL: u64 = 5_000_000;
/// Largest rendered prompt, in bytes.
pub const MAX_RENDER_OUTPUT: usize = 64 << 20;
/// Deepest nesting `tojson`, `string` and printing walk through.
pub(crate) const MAX_VALUE_DEPTH: usize = 256;

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
            .add_template_owned(TEMPLATE_NAME, source::prepare_source(source, true, true))
            .is_err()
            && env
                .add_template_owned(TEMPLATE_NAME, source::prepare_source(source, true, false))
                .is_err()
        {
            env.add_template_owned(TEMPLATE_NAME, source::prepare_source(source, false, false))
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
                        reason: format!(
                            "expected an object, got {}",
                            crate::messages::json_kind(tool)
                        ),
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
                    return TemplateError::Limit(match e.line().or(me.line()) {
                        Some(line) => format!("{msg} (chat template line {line})"),
                        None => msg.to_string(),
                    });
                }
            }
        }
        cur = err.source();
    }
    TemplateError::Render(describe_error(e))
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
        let text = py::py_str_checked(value)?;
        out.write_str(&text)
            .map_err(|e| Error::new(ErrorKind::WriteFailure, e.to_string()))
    });
    env.add_filter("tojson", py::tojson_filter);
    env.add_filter("string", |v: Value| -> Result<Value, Error> {
        Ok(Value::from(py::py_str_checked(&v)?))
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
    env.add_filter("list", budget::filter_list);
    env.add_filter("batch", budget::filter_batch);
    env.add_filter("slice", budget::filter_slice);
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
    env.add_function(budget::ADD_FN, budget::py_add);
    env.add_function(budget::MUL_FN, budget::py_mul);
    env.add_function(ops::NEG_FN, ops::py_neg);
    env.add_function(ops::POS_FN, ops::py_pos);
    env.add_function("raise_exception", |msg: Value| -> Result<Value, Error> {
        Err(Error::new(
            ErrorKind::InvalidOperation,
            format!("{RAISE_MARKER}{}", py::py_str(&msg)),
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
