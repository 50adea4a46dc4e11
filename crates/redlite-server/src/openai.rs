//! `POST /v1/chat/completions` and `POST /v1/completions`.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::Response;
use redlite_chat::toolcall::{Delta, ParserOptions};
use redlite_engine::{DraftSource, Request, SamplingParams, TokenLogprobs};
use serde_json::{json, Map, Value};

use crate::error::ApiError;
use crate::fields::*;
use crate::pipeline::{ChatOutput, TextOutput};
use crate::run::{chat_logprob_entry, respond, token_text, Chunk, End, EndReason, Format};
use crate::{body_bytes, constrain, new_id, App};

/// Sampling fields shared by every endpoint (`temperature`, `top_p`,
/// `top_k`, `min_p`, `seed`), over the server's defaults.
pub fn sampling(o: &Obj, app: &App) -> Result<SamplingParams, ApiError> {
    let mut s = app.default_sampling.clone();
    if let Some(t) = opt_f64(o, "temperature")? {
        if !(0.0..=2.0).contains(&t) {
            return Err(ApiError::param(
                "temperature",
                format!("'temperature' must be between 0 and 2, got {t}"),
            ));
        }
        s.temperature = t as f32;
    }
    if let Some(p) = opt_f64(o, "top_p")? {
        s.top_p = p as f32;
    }
    if let Some(k) = opt_usize(o, "top_k")? {
        s.top_k = k;
    }
    if let Some(m) = opt_f64(o, "min_p")? {
        s.min_p = m as f32;
    }
    if let Some(seed) = opt_i64(o, "seed")? {
        s.seed = Some(seed as u64);
    }
    s.validate().map_err(ApiError::invalid)?;
    Ok(s)
}

/// `n` must be 1.
fn single_text_choice(o: &Obj) -> Result<(), ApiError> {
    if let Some(n) = opt_usize(o, "n")? {
        if n != 1 {
            return Err(ApiError::param("n", "only n = 1 is supported"));
        }
    }
    Ok(())
}

/// Validate `tools` (OpenAI function tools) and return them.
pub fn tools(o: &Obj) -> Result<Vec<Value>, ApiError> {
    let Some(arr) = opt_array(o, "tools")? else {
        return Ok(Vec::new());
    };
    for (i, t) in arr.iter().enumerate() {
        let bad =
            |m: &str| ApiError::param("tools", format!("invalid tool schema: tools[{i}]: {m}"));
        let Value::Object(t) = t else {
            return Err(bad("expected an object"));
        };
        match t.get("type").and_then(Value::as_str) {
            Some("function") => {}
            Some(other) => {
                return Err(bad(&format!(
                    "type '{other}' is not supported (only 'function')"
                )))
            }
            None => return Err(bad("missing 'type': 'function'")),
        }
        let Some(Value::Object(f)) = t.get("function") else {
            return Err(bad("'function' must be an object"));
        };
        match f.get("name") {
            Some(Value::String(n)) if !n.is_empty() && n.len() <= 256 => {}
            _ => return Err(bad("'function.name' must be a non-empty string")),
        }
        if let Some(p) = f.get("parameters").filter(|p| !p.is_null()) {
            object_schema(p).map_err(|m| bad(&format!("'function.parameters' {m}")))?;
        }
    }
    Ok(arr.clone())
}

/// A tool's parameters must be a JSON Schema for an object (`{}`, or a
/// schema whose `type` is `"object"`): the template lists them as named
/// arguments and the tool-call parser reads them back that way.
pub fn object_schema(p: &Value) -> Result<(), String> {
    let Value::Object(m) = p else {
        return Err(format!("must be a JSON Schema object, got {}", kind(p)));
    };
    match m.get("type") {
        None => Ok(()),
        Some(Value::String(t)) if t == "object" => Ok(()),
        Some(t) => Err(format!(
            "must be a JSON Schema with \"type\": \"object\", got \"type\": {t}"
        )),
    }
}

/// The roles a chat message may have.
const ROLES: [&str; 5] = ["system", "developer", "user", "assistant", "tool"];

/// Each message is an object with a known role.
fn check_messages(messages: &[Value]) -> Result<(), ApiError> {
    for (i, m) in messages.iter().enumerate() {
        let Value::Object(m) = m else {
            return Err(ApiError::param(
                "messages",
                format!("'messages[{i}]' must be an object, got {}", kind(m)),
            ));
        };
        match m.get("role") {
            Some(Value::String(r)) if ROLES.contains(&r.as_str()) => {}
            Some(Value::String(r)) => {
                return Err(ApiError::param(
                    "messages",
                    format!(
                        "'messages[{i}].role' is '{r}'; it must be one of {}",
                        ROLES.join(", ")
                    ),
                ))
            }
            _ => {
                return Err(ApiError::param(
                    "messages",
                    format!("'messages[{i}].role' is required (a string)"),
                ))
            }
        }
    }
    Ok(())
}

/// Fields `/v1/chat/completions` reads; any other is skipped unparsed.
const CHAT_FIELDS: &[&str] = &[
    "messages",
    "tools",
    "tool_choice",
    "n",
    "response_format",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "seed",
    "logprobs",
    "top_logprobs",
    "stream",
    "stream_options",
    "stop",
    "max_completion_tokens",
    "max_tokens",
    "chat_template_kwargs",
    "ignore_eos",
    "parallel_tool_calls",
    "json_schema",
    "grammar",
];

/// Fields `/v1/completions` reads.
const COMPLETION_FIELDS: &[&str] = &[
    "prompt",
    "suffix",
    "n",
    "response_format",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "seed",
    "echo",
    "logprobs",
    "stream",
    "stream_options",
    "stop",
    "max_tokens",
    "ignore_eos",
    "json_schema",
    "grammar",
];

/// What `tool_choice` asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolChoice {
    Auto,
    None,
    Required,
    Named(String),
}

impl ToolChoice {
    /// Text the reply is forced to start with: `required` and a named tool
    /// open the call in the prompt so the model continues it.
    pub fn forced_prefix(&self) -> String {
        match self {
            ToolChoice::Required => "<tool_call>\n<function=".into(),
            ToolChoice::Named(n) => format!("<tool_call>\n<function={n}>\n"),
            _ => String::new(),
        }
    }
}

fn tool_choice(o: &Obj, tools: &[Value]) -> Result<ToolChoice, ApiError> {
    let names: Vec<&str> = tools
        .iter()
        .filter_map(|t| t.pointer("/function/name").and_then(Value::as_str))
        .collect();
    let tc = match o.get("tool_choice") {
        None | Some(Value::Null) => ToolChoice::Auto,
        Some(Value::String(s)) => match s.as_str() {
            "auto" => ToolChoice::Auto,
            "none" => ToolChoice::None,
            "required" => ToolChoice::Required,
            other => {
                return Err(ApiError::param(
                    "tool_choice",
                    format!(
                    "'tool_choice' must be auto, none, required or a named function, got '{other}'"
                ),
                ))
            }
        },
        Some(Value::Object(m)) => {
            let name = m
                .get("function")
                .and_then(|f| f.get("name"))
                .or_else(|| m.get("name"))
                .and_then(Value::as_str)
                .ok_or_else(|| {
                    ApiError::param("tool_choice", "a named 'tool_choice' needs function.name")
                })?;
            ToolChoice::Named(name.to_string())
        }
        Some(v) => {
            return Err(ApiError::param(
                "tool_choice",
                format!(
                    "'tool_choice' must be a string or an object, got {}",
                    kind(v)
                ),
            ))
        }
    };
    match &tc {
        ToolChoice::Required if tools.is_empty() => Err(ApiError::param(
            "tool_choice",
            "'tool_choice' is 'required' but no tools are given",
        )),
        ToolChoice::Named(n) if !names.contains(&n.as_str()) => Err(ApiError::param(
            "tool_choice",
            format!("'tool_choice' names '{n}', which is not among the tools"),
        )),
        _ => Ok(tc),
    }
}

/// `logprobs` / `top_logprobs` of chat.
fn chat_logprobs(o: &Obj) -> Result<Option<usize>, ApiError> {
    let on = opt_bool(o, "logprobs")?.unwrap_or(false);
    let top = opt_usize(o, "top_logprobs")?;
    if let Some(k) = top {
        if k > 20 {
            return Err(ApiError::param(
                "top_logprobs",
                "'top_logprobs' must be at most 20",
            ));
        }
        if !on {
            return Err(ApiError::param(
                "top_logprobs",
                "'top_logprobs' needs 'logprobs': true",
            ));
        }
    }
    Ok(on.then_some(top.unwrap_or(0)))
}

/// Render a chat request's prompt and tokenize it.
pub struct ChatPrompt {
    pub text: String,
    pub ids: Vec<u32>,
    pub forced: String,
    /// Token offsets where the template starts a message after the first
    /// (the first of them ends the system prompt and tools).
    pub boundaries: Vec<usize>,
}

/// Where `ids` (a rendered chat) starts its messages: the offsets of the
/// template's message-start token (`<|im_start|>` in the Qwen templates,
/// a special token, so the tokens before it do not depend on what follows),
/// after position 0.
pub fn message_boundaries(tok: &redlite_tokenizer::Tokenizer, ids: &[u32]) -> Vec<usize> {
    let Some(start) = tok.token_id("<|im_start|>") else {
        return Vec::new();
    };
    ids.iter()
        .enumerate()
        .skip(1)
        .filter(|&(_, &t)| t == start)
        .map(|(i, _)| i)
        .collect()
}

pub fn render_chat(
    app: &App,
    messages: &[Value],
    tools: &[Value],
    choice: &ToolChoice,
    kwargs: &Map<String, Value>,
) -> Result<ChatPrompt, ApiError> {
    if messages.is_empty() {
        return Err(ApiError::param("messages", "'messages' must not be empty"));
    }
    let tools_arg = (!tools.is_empty()).then_some(tools);
    let mut text = app
        .template
        .render(messages, tools_arg, true, kwargs)
        .map_err(|e| ApiError::param("messages", e.to_string()))?;
    // With constrained output the grammar writes the call; without it the
    // prompt opens the call for the model to continue.
    let forced = if app.grammar.is_some() {
        String::new()
    } else {
        choice.forced_prefix()
    };
    text.push_str(&forced);
    let tok = &app.tokenizer;
    let ids = tok.tokenize(&text, tok.add_bos(), true);
    let boundaries = message_boundaries(tok, &ids);
    Ok(ChatPrompt {
        text,
        ids,
        forced,
        boundaries,
    })
}

/// Usage in OpenAI's shape.
pub fn usage(end: &End) -> Value {
    json!({
        "prompt_tokens": end.prompt_tokens,
        "completion_tokens": end.generated_tokens,
        "total_tokens": end.prompt_tokens + end.generated_tokens,
        "prompt_tokens_details": {"cached_tokens": end.cached_tokens},
        "completion_tokens_details": {"reasoning_tokens": 0},
    })
}

struct ChatFormat {
    app: App,
    id: String,
    created: u64,
    model: String,
    out: ChatOutput,
    include_usage: bool,
    logprobs: bool,
    /// Logprob entries not yet sent (streaming) / all of them.
    lp: Vec<Value>,
}

impl ChatFormat {
    fn chunk(&mut self, delta: Value, finish: Option<&str>) -> Chunk {
        let mut choice =
            json!({"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish});
        if self.logprobs && !self.lp.is_empty() {
            choice["logprobs"] = json!({"content": std::mem::take(&mut self.lp)});
        }
        let mut c = json!({
            "id": self.id, "object": "chat.completion.chunk", "created": self.created,
            "model": self.model, "system_fingerprint": fingerprint(&self.app),
            "choices": [choice],
        });
        if self.include_usage {
            c["usage"] = Value::Null;
        }
        Chunk::new().data(c.to_string())
    }

    fn deltas(&mut self, ds: Vec<Delta>) -> Vec<Chunk> {
        ds.iter().map(|d| self.chunk(d.to_openai(), None)).collect()
    }

    fn finish_reason(&self, end: &End) -> &'static str {
        match end.reason {
            EndReason::Length => "length",
            _ if !self.out.message().tool_calls.is_empty() => "tool_calls",
            _ => "stop",
        }
    }
}

/// `redlite-<version>-<backend>`: which build answered.
fn fingerprint(app: &App) -> String {
    let backend = app.backend.split_whitespace().next().unwrap_or("cpu");
    format!("redlite-{}-{backend}", env!("CARGO_PKG_VERSION"))
}

impl Format for ChatFormat {
    fn head(&mut self) -> Vec<Chunk> {
        vec![self.chunk(json!({"role": "assistant", "content": ""}), None)]
    }

    fn token(&mut self, id: u32, lp: Option<&TokenLogprobs>, stream: bool) -> Vec<Chunk> {
        if let Some(lp) = lp {
            self.lp.push(chat_logprob_entry(&self.app, id, lp));
        }
        let ds = self.out.push(&self.app.tokenizer, id);
        if stream {
            self.deltas(ds)
        } else {
            Vec::new()
        }
    }

    fn stopped(&self) -> Option<String> {
        self.out.matched().map(str::to_string)
    }

    fn tail(&mut self, end: &End) -> Vec<Chunk> {
        let ds = self.out.finish();
        let mut ev = self.deltas(ds);
        let fr = self.finish_reason(end);
        ev.push(self.chunk(json!({}), Some(fr)));
        if self.include_usage {
            let c = json!({
                "id": self.id, "object": "chat.completion.chunk", "created": self.created,
                "model": self.model, "system_fingerprint": fingerprint(&self.app),
                "choices": [], "usage": usage(end), "timings": end.timings(),
            });
            ev.push(Chunk::new().data(c.to_string()));
        }
        ev.push(Chunk::new().data("[DONE]"));
        ev
    }

    fn body(&mut self, end: &End) -> Value {
        self.out.finish();
        let mut message = self.out.message().to_openai();
        if let Value::Object(m) = &mut message {
            m.insert("role".into(), json!("assistant"));
        }
        let logprobs = if self.logprobs {
            json!({"content": std::mem::take(&mut self.lp)})
        } else {
            Value::Null
        };
        json!({
            "id": self.id, "object": "chat.completion", "created": self.created,
            "model": self.model, "system_fingerprint": fingerprint(&self.app),
            "choices": [{"index": 0, "message": message, "logprobs": logprobs,
                         "finish_reason": self.finish_reason(end)}],
            "usage": usage(end), "timings": end.timings(),
        })
    }

    fn error_event(&self, msg: &str) -> Chunk {
        let e = ApiError::internal(msg.to_string());
        Chunk::new().data(e.body().to_string())
    }

    fn reason_name(&self, end: &End) -> String {
        self.finish_reason(end).to_string()
    }
}

/// `POST /v1/chat/completions`. Parsing, rendering and tokenizing run on
/// a blocking thread; only the generation's events use the runtime.
pub async fn chat(
    State(app): State<App>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let bytes = body_bytes(body, app.cfg.max_body_bytes)?;
    let a = app.clone();
    let (id, req, fmt, stream) = blocking(move || prepare_chat(&a, &bytes)).await?;
    respond(app, id, req, fmt, stream).await
}

/// Run CPU-heavy request work (parsing, template rendering, tokenizing)
/// off the async runtime's worker threads.
pub async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::internal(format!("request preparation failed: {e}")))?
}

type Prepared<F> = (String, Request, F, bool);

fn prepare_chat(app: &App, bytes: &[u8]) -> Result<Prepared<ChatFormat>, ApiError> {
    let o = parse_known(bytes, CHAT_FIELDS)?;
    let messages = opt_array(&o, "messages")?
        .ok_or_else(|| ApiError::param("messages", "'messages' is required"))?;
    let tools = tools(&o)?;
    let choice = tool_choice(&o, &tools)?;
    single_text_choice(&o)?;
    let sampling = sampling(&o, app)?;
    let logprobs = chat_logprobs(&o)?;
    let stream = opt_bool(&o, "stream")?.unwrap_or(false);
    let include_usage = match opt_object(&o, "stream_options")? {
        Some(so) => opt_bool(so, "include_usage")?.unwrap_or(false),
        None => false,
    };
    let stops = stop_strings(&o, "stop")?;
    let max_req = match opt_usize(&o, "max_completion_tokens")? {
        Some(m) => Some((m, "max_completion_tokens")),
        None => opt_usize(&o, "max_tokens")?.map(|m| (m, "max_tokens")),
    };
    let kwargs = opt_object(&o, "chat_template_kwargs")?
        .cloned()
        .unwrap_or_default();
    check_messages(messages)?;
    let prompt = render_chat(app, messages, &tools, &choice, &kwargs)?;
    let max_tokens = app.budget(
        prompt.ids.len(),
        max_req.map(|m| m.0),
        max_req.map_or("max_tokens", |m| m.1),
    )?;
    let parallel = opt_bool(&o, "parallel_tool_calls")?.unwrap_or(true);
    let asked = constrain::one(
        constrain::tool_calls(&tools, &choice, parallel),
        constrain::output_format(&o)?,
    )?;
    let constraint = if app.grammar.is_some() {
        constrain::compile(app, asked)?
    } else {
        constrain::compile(app, asked.filter(|a| a.field != "tool_choice"))?
    };
    // Constrained output ends where the constraint allows, not at a stop
    // string.
    let stops = if constraint.is_some() {
        Vec::new()
    } else {
        stops
    };
    let opts = ParserOptions {
        parse_tool_calls: choice != ToolChoice::None,
        ..ParserOptions::for_prompt(&prompt.text)
    };
    let out = ChatOutput::new(&tools, opts, stops, &prompt.forced);
    let id = new_id("chatcmpl-");
    let fmt = ChatFormat {
        app: app.clone(),
        id: id.clone(),
        created: crate::now(),
        model: app.cfg.alias.clone(),
        out,
        include_usage,
        logprobs: logprobs.is_some(),
        lp: Vec::new(),
    };
    let req = Request {
        boundaries: prompt.boundaries,
        prompt: prompt.ids,
        max_tokens,
        sampling,
        logprobs,
        stop_at_eog: !opt_bool(&o, "ignore_eos")?.unwrap_or(false),
        lookup: app.cfg.lookup.clone(),
        draft_source: DraftSource::Lookup,
        constraint,
    };
    Ok((id, req, fmt, stream))
}

struct TextFormat {
    app: App,
    id: String,
    created: u64,
    model: String,
    out: TextOutput,
    text: String,
    echo: String,
    include_usage: bool,
    logprobs: bool,
    /// Legacy logprobs: tokens, token_logprobs, top_logprobs, text_offset.
    lp: (Vec<Value>, Vec<Value>, Vec<Value>, Vec<Value>),
    offset: usize,
}

impl TextFormat {
    /// The legacy logprobs object of the tokens not yet reported.
    fn lp_json(&mut self) -> Value {
        if !self.logprobs {
            return Value::Null;
        }
        let lp = std::mem::take(&mut self.lp);
        json!({"tokens": lp.0, "token_logprobs": lp.1, "top_logprobs": lp.2, "text_offset": lp.3})
    }

    fn chunk(&mut self, text: &str, finish: Option<&str>) -> Chunk {
        let lp = self.lp_json();
        let mut c = json!({
            "id": self.id, "object": "text_completion", "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "text": text, "logprobs": lp, "finish_reason": finish}],
        });
        if self.include_usage {
            c["usage"] = Value::Null;
        }
        Chunk::new().data(c.to_string())
    }

    fn finish_reason(end: &End) -> &'static str {
        match end.reason {
            EndReason::Length => "length",
            _ => "stop",
        }
    }
}

impl Format for TextFormat {
    fn head(&mut self) -> Vec<Chunk> {
        if self.echo.is_empty() {
            Vec::new()
        } else {
            let e = self.echo.clone();
            vec![self.chunk(&e, None)]
        }
    }

    fn token(&mut self, id: u32, lp: Option<&TokenLogprobs>, stream: bool) -> Vec<Chunk> {
        if let Some(lp) = lp {
            let (t, _) = token_text(&self.app, id);
            let top: Map<String, Value> = lp
                .top
                .iter()
                .map(|&(tid, l)| (token_text(&self.app, tid).0, json!(l)))
                .collect();
            self.lp.0.push(json!(t));
            self.lp.1.push(json!(lp.logprob));
            self.lp.2.push(Value::Object(top));
            self.lp.3.push(json!(self.offset));
            self.offset += t.len();
        }
        let piece = self.out.push(&self.app.tokenizer, id);
        if piece.is_empty() {
            return Vec::new();
        }
        self.text.push_str(&piece);
        if stream {
            vec![self.chunk(&piece, None)]
        } else {
            Vec::new()
        }
    }

    fn stopped(&self) -> Option<String> {
        self.out.matched().map(str::to_string)
    }

    fn tail(&mut self, end: &End) -> Vec<Chunk> {
        let rest = self.out.finish();
        let mut ev = Vec::new();
        if !rest.is_empty() {
            self.text.push_str(&rest);
            ev.push(self.chunk(&rest, None));
        }
        ev.push(self.chunk("", Some(Self::finish_reason(end))));
        if self.include_usage {
            let c = json!({
                "id": self.id, "object": "text_completion", "created": self.created,
                "model": self.model, "choices": [], "usage": usage(end),
            });
            ev.push(Chunk::new().data(c.to_string()));
        }
        ev.push(Chunk::new().data("[DONE]"));
        ev
    }

    fn body(&mut self, end: &End) -> Value {
        let rest = self.out.finish();
        self.text.push_str(&rest);
        let text = format!("{}{}", self.echo, self.text);
        json!({
            "id": self.id, "object": "text_completion", "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "text": text, "logprobs": self.lp_json(),
                         "finish_reason": Self::finish_reason(end)}],
            "usage": usage(end), "timings": end.timings(),
        })
    }

    fn error_event(&self, msg: &str) -> Chunk {
        Chunk::new().data(ApiError::internal(msg.to_string()).body().to_string())
    }

    fn reason_name(&self, end: &End) -> String {
        Self::finish_reason(end).to_string()
    }
}

/// `POST /v1/completions` (legacy): `prompt` as a string or token ids,
/// `suffix` as fill-in-the-middle when the vocabulary has FIM tokens.
pub async fn completions(
    State(app): State<App>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let bytes = body_bytes(body, app.cfg.max_body_bytes)?;
    let a = app.clone();
    let (id, req, fmt, stream) = blocking(move || prepare_completion(&a, &bytes)).await?;
    respond(app, id, req, fmt, stream).await
}

fn prepare_completion(app: &App, bytes: &[u8]) -> Result<Prepared<TextFormat>, ApiError> {
    let o = parse_known(bytes, COMPLETION_FIELDS)?;
    single_text_choice(&o)?;
    let tok = app.tokenizer.clone();
    let (prompt_text, mut ids): (String, Vec<u32>) = match o.get("prompt") {
        Some(Value::String(s)) => (s.clone(), Vec::new()),
        Some(Value::Array(a)) if a.len() == 1 && a[0].is_string() => {
            (a[0].as_str().unwrap_or_default().to_string(), Vec::new())
        }
        Some(Value::Array(a)) if a.iter().all(Value::is_number) && !a.is_empty() => (
            String::new(),
            crate::misc::token_ids(a, "prompt", app.n_vocab)?,
        ),
        Some(Value::Array(a)) if a.len() == 1 && a[0].is_array() => {
            let inner = a[0].as_array().map(Vec::as_slice).unwrap_or_default();
            (String::new(), crate::misc::token_ids(inner, "prompt", app.n_vocab)?)
        }
        Some(Value::Array(_)) => {
            return Err(ApiError::param(
                "prompt",
                "'prompt' must be a string, one string in an array, or token ids (batches of several prompts are not supported)",
            ))
        }
        None | Some(Value::Null) => return Err(ApiError::param("prompt", "'prompt' is required")),
        Some(v) => {
            return Err(ApiError::param(
                "prompt",
                format!("'prompt' must be a string or an array, got {}", kind(v)),
            ))
        }
    };
    let suffix = opt_str(&o, "suffix")?.unwrap_or("");
    if ids.is_empty() {
        let text = if suffix.is_empty() {
            prompt_text.clone()
        } else {
            let (Some(_), Some(_), Some(_)) = (
                tok.token_id("<|fim_prefix|>"),
                tok.token_id("<|fim_suffix|>"),
                tok.token_id("<|fim_middle|>"),
            ) else {
                return Err(ApiError::param(
                    "suffix",
                    "'suffix' (fill-in-the-middle) needs a model with FIM tokens",
                ));
            };
            format!("<|fim_prefix|>{prompt_text}<|fim_suffix|>{suffix}<|fim_middle|>")
        };
        ids = tok.tokenize(&text, tok.add_bos(), !suffix.is_empty());
    }
    let sampling = sampling(&o, app)?;
    let stream = opt_bool(&o, "stream")?.unwrap_or(false);
    let include_usage = match opt_object(&o, "stream_options")? {
        Some(so) => opt_bool(so, "include_usage")?.unwrap_or(false),
        None => false,
    };
    let echo = opt_bool(&o, "echo")?.unwrap_or(false);
    let logprobs = match opt_usize(&o, "logprobs")? {
        Some(k) if k > 5 => {
            return Err(ApiError::param("logprobs", "'logprobs' must be at most 5"))
        }
        k => k,
    };
    let constraint = constrain::compile(app, constrain::output_format(&o)?)?;
    let stops = if constraint.is_some() {
        Vec::new()
    } else {
        stop_strings(&o, "stop")?
    };
    // OpenAI's default for this endpoint is 16 tokens.
    let max_tokens = app.budget(
        ids.len(),
        Some(opt_usize(&o, "max_tokens")?.unwrap_or(16)),
        "max_tokens",
    )?;
    let echo_text = if echo {
        tok.decode_opts(&ids, true).unwrap_or_default()
    } else {
        String::new()
    };
    let id = new_id("cmpl-");
    let fmt = TextFormat {
        app: app.clone(),
        id: id.clone(),
        created: crate::now(),
        model: app.cfg.alias.clone(),
        out: TextOutput::new(stops),
        text: String::new(),
        echo: echo_text,
        include_usage,
        logprobs: logprobs.is_some(),
        lp: Default::default(),
        offset: 0,
    };
    let req = Request {
        // A prompt rendered by the client may hold chat messages too.
        boundaries: message_boundaries(&app.tokenizer, &ids),
        prompt: ids,
        max_tokens,
        sampling,
        logprobs,
        stop_at_eog: !opt_bool(&o, "ignore_eos")?.unwrap_or(false),
        lookup: app.cfg.lookup.clone(),
        draft_source: DraftSource::Lookup,
        constraint,
    };
    Ok((id, req, fmt, stream))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{test_app, test_end, test_tokens};
    use std::sync::Arc;

    const CALL_TEXT: &str = "Reading the file.\n<tool_call>\n<function=read>\n<parameter=path>\nsrc/main.rs\n</parameter>\n<parameter=limit>\n40\n</parameter>\n</function>\n</tool_call>";

    fn tools() -> Vec<Value> {
        vec![
            json!({"type": "function", "function": {"name": "read", "parameters": {
            "type": "object", "properties": {"path": {"type": "string"}, "limit": {"type": "integer"}}}}}),
        ]
    }

    fn format(app: &App) -> ChatFormat {
        ChatFormat {
            app: app.clone(),
            id: "chatcmpl-t".into(),
            created: 1,
            model: "m".into(),
            out: ChatOutput::new(&tools(), ParserOptions::default(), vec![], ""),
            include_usage: true,
            logprobs: false,
            lp: Vec::new(),
        }
    }

    /// Streamed tool calls merge by index into the call the model wrote,
    /// with `finish_reason: tool_calls`, as clients merge them.
    #[test]
    fn streamed_tool_call_chunks_merge_by_index() {
        let app = test_app();
        let ids = test_tokens(&app, CALL_TEXT);
        let mut f = format(&app);
        let mut chunks = f.head();
        for &id in &ids {
            chunks.extend(f.token(id, None, true));
        }
        let end = test_end(ids.len());
        chunks.extend(f.tail(&end));
        assert_eq!(chunks.last().map(|c| c.data.as_str()), Some("[DONE]"));
        let vals: Vec<Value> = chunks[..chunks.len() - 1]
            .iter()
            .map(|c| serde_json::from_str(&c.data).expect("json"))
            .collect();
        let (mut content, mut calls, mut finish) =
            (String::new(), Vec::<(String, String, String)>::new(), None);
        for v in &vals {
            let Some(ch) = v["choices"].get(0) else {
                assert_eq!(v["usage"]["completion_tokens"], ids.len());
                assert_eq!(v["usage"]["prompt_tokens_details"]["cached_tokens"], 4);
                continue;
            };
            let d = &ch["delta"];
            if let Some(c) = d["content"].as_str() {
                content.push_str(c);
            }
            for tc in d["tool_calls"].as_array().into_iter().flatten() {
                let i = tc["index"].as_u64().expect("index") as usize;
                if i == calls.len() {
                    calls.push((
                        tc["id"].as_str().expect("id on first fragment").into(),
                        tc["function"]["name"].as_str().expect("name").into(),
                        String::new(),
                    ));
                } else {
                    assert!(tc.get("id").is_none() && tc["function"].get("name").is_none());
                }
                calls[i]
                    .2
                    .push_str(tc["function"]["arguments"].as_str().unwrap_or(""));
            }
            if let Some(fr) = ch["finish_reason"].as_str() {
                finish = Some(fr.to_string());
            }
        }
        assert_eq!(content, "Reading the file.");
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].1, "read");
        let args: Value = serde_json::from_str(&calls[0].2).expect("arguments are JSON");
        assert_eq!(args, json!({"path": "src/main.rs", "limit": 40}));
        assert_eq!(finish.as_deref(), Some("tool_calls"));

        // Non-streaming: the same message.
        let mut f = format(&app);
        for &id in &ids {
            f.token(id, None, false);
        }
        let body = f.body(&end);
        let m = &body["choices"][0]["message"];
        assert_eq!(m["content"], "Reading the file.");
        assert_eq!(m["tool_calls"][0]["function"]["name"], "read");
        assert_eq!(body["choices"][0]["finish_reason"], "tool_calls");
    }

    #[test]
    fn stop_strings_end_the_text() {
        let app = test_app();
        let mut f = format(&app);
        f.out = ChatOutput::new(&[], ParserOptions::default(), vec!["STOP".into()], "");
        let mut text = String::new();
        for id in test_tokens(&app, "one two STOP three") {
            for c in f.token(id, None, true) {
                let v: Value = serde_json::from_str(&c.data).expect("json");
                text.push_str(v["choices"][0]["delta"]["content"].as_str().unwrap_or(""));
            }
            if f.stopped().is_some() {
                break;
            }
        }
        assert_eq!(f.stopped().as_deref(), Some("STOP"));
        for c in f.tail(&test_end(3)) {
            if let Ok(v) = serde_json::from_str::<Value>(&c.data) {
                text.push_str(v["choices"][0]["delta"]["content"].as_str().unwrap_or(""));
            }
        }
        // The parser trims whitespace at the ends of the message.
        assert_eq!(text, "one two");
    }

    /// Without an indexed vocabulary (no constrained output), a forced
    /// tool choice opens the call in the prompt.
    #[test]
    fn forced_tool_choice_opens_the_call() {
        let mut st = Arc::try_unwrap(test_app()).ok().expect("one owner");
        st.grammar = None;
        let app = Arc::new(st);
        let named = ToolChoice::Named("read".into());
        let p = render_chat(
            &app,
            &[json!({"role": "user", "content": "hi"})],
            &tools(),
            &named,
            &Map::new(),
        )
        .expect("render");
        assert!(p.text.ends_with("<tool_call>\n<function=read>\n"));
        // The model continues the opened call; the parser sees the whole call.
        let mut out = ChatOutput::new(&tools(), ParserOptions::default(), vec![], &p.forced);
        let rest = "<parameter=path>\na.rs\n</parameter>\n</function>\n</tool_call>";
        let mut deltas = Vec::new();
        for id in test_tokens(&app, rest) {
            deltas.extend(out.push(&app.tokenizer, id));
        }
        deltas.extend(out.finish());
        let m = out.message();
        assert_eq!(m.tool_calls.len(), 1, "{deltas:?}");
        assert_eq!(m.tool_calls[0].name, "read");
        assert_eq!(m.tool_calls[0].arguments, r#"{"path":"a.rs"}"#);
        assert!(m.content.is_empty());
    }

    /// Values that hold the call format's own tags (a Markdown page showing
    /// a call, a regular expression for `</function>`) come through the
    /// streaming path token by token whole, as in the non-streaming body.
    #[test]
    fn tag_text_in_values_streams_like_the_whole_message() {
        let app = test_app();
        let page = "Example:\n<tool_call>\n<function=read>\n<parameter=path>\na.rs\n</parameter>\n</function>\n</tool_call>\nValues end at `</parameter>`.";
        let regex = "r\"</function>\\s*</tool_call>\"";
        let text = format!(
            "Writing.\n<tool_call>\n<function=write>\n<parameter=path>\ndoc.md\n</parameter>\n<parameter=content>\n{page}\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=write>\n<parameter=path>\nre.py\n</parameter>\n<parameter=content>\n{regex}\n</parameter>\n</function>\n</tool_call>"
        );
        let tools = vec![
            json!({"type": "function", "function": {"name": "write", "parameters": {
            "type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}}}}}),
        ];
        let ids = test_tokens(&app, &text);
        let end = test_end(ids.len());
        let mut f = format(&app);
        f.out = ChatOutput::new(&tools, ParserOptions::default(), vec![], "");
        let (mut content, mut args) = (String::new(), Vec::<String>::new());
        for &id in &ids {
            for c in f.token(id, None, true) {
                let v: Value = serde_json::from_str(&c.data).expect("json");
                let d = &v["choices"][0]["delta"];
                content.push_str(d["content"].as_str().unwrap_or(""));
                for tc in d["tool_calls"].as_array().into_iter().flatten() {
                    let i = tc["index"].as_u64().expect("index") as usize;
                    args.resize(args.len().max(i + 1), String::new());
                    args[i].push_str(tc["function"]["arguments"].as_str().unwrap_or(""));
                }
            }
        }
        let want = [
            json!({"path": "doc.md", "content": page}),
            json!({"path": "re.py", "content": regex}),
        ];
        assert_eq!(content, "Writing.");
        let got: Vec<Value> = args
            .iter()
            .map(|a| serde_json::from_str(a).expect("arguments are JSON"))
            .collect();
        assert_eq!(got, want);
        // Non-streaming: the same calls.
        let mut f = format(&app);
        f.out = ChatOutput::new(&tools, ParserOptions::default(), vec![], "");
        for &id in &ids {
            f.token(id, None, false);
        }
        let body = f.body(&end);
        let m = &body["choices"][0]["message"];
        assert_eq!(m["content"], "Writing.");
        for (i, w) in want.iter().enumerate() {
            let a = m["tool_calls"][i]["function"]["arguments"]
                .as_str()
                .expect("arguments");
            assert_eq!(&serde_json::from_str::<Value>(a).expect("json"), w);
        }
        assert_eq!(body["choices"][0]["finish_reason"], "tool_calls");
    }

    fn body(v: Value) -> Vec<u8> {
        serde_json::to_vec(&v).expect("json")
    }

    fn refused<T>(r: Result<T, ApiError>) -> String {
        match r {
            Ok(_) => panic!("accepted"),
            Err(e) => e.body().to_string(),
        }
    }

    /// Constraints compile while the request is prepared; a forced tool
    /// choice is then a grammar, not a prompt prefix; invalid schemas and
    /// grammars are 400s naming the field and the problem.
    #[test]
    fn constraints_compile_or_are_refused_by_name() {
        let app = test_app();
        let hi = json!([{"role": "user", "content": "hi"}]);
        let (_, req, fmt, _) = prepare_chat(
            &app,
            &body(
                json!({"messages": hi, "tools": tools(), "tool_choice": "required",
                         "stop": ["x"]}),
            ),
        )
        .expect("required");
        assert!(req.constraint.is_some());
        let plain =
            prepare_chat(&app, &body(json!({"messages": hi, "tools": tools()}))).expect("auto");
        assert!(plain.1.constraint.is_none());
        // The prompt is the unconstrained one: the grammar writes the call.
        assert_eq!(req.prompt, plain.1.prompt);
        assert!(fmt.out.matched().is_none());
        for rf in [
            json!({"type": "json_object"}),
            json!({"type": "json_schema", "json_schema": {"name": "x", "strict": true,
                   "schema": {"type": "object", "properties": {"a": {"type": "integer"}}}}}),
        ] {
            let r = prepare_chat(&app, &body(json!({"messages": hi, "response_format": rf})));
            assert!(r.expect("json").1.constraint.is_some());
        }
        let r = prepare_completion(
            &app,
            &body(json!({"prompt": "x", "grammar": "root ::= \"a\" [0-9]+"})),
        );
        assert!(r.expect("gbnf").1.constraint.is_some());
        let r = prepare_completion(
            &app,
            &body(json!({"prompt": "x", "json_schema": {"type": "integer"}})),
        );
        assert!(r.expect("json_schema").1.constraint.is_some());

        let e = refused(prepare_chat(
            &app,
            &body(
                json!({"messages": hi, "response_format": {"type": "json_schema",
                "json_schema": {"schema": {"type": "object", "properties": {"a": {"type": "nope"}}}}}}),
            ),
        ));
        assert!(e.contains("response_format") && e.contains("nope"), "{e}");
        let e = refused(prepare_chat(
            &app,
            &body(
                json!({"messages": hi, "response_format": {"type": "json_schema", "json_schema": {}}}),
            ),
        ));
        assert!(e.contains("schema' is required"), "{e}");
        let e = refused(prepare_completion(
            &app,
            &body(json!({"prompt": "x", "grammar": "root ::= undefined-rule"})),
        ));
        assert!(e.contains("grammar") && e.contains("undefined-rule"), "{e}");
        let e = refused(prepare_chat(
            &app,
            &body(
                json!({"messages": hi, "tools": tools(), "tool_choice": "required",
                         "response_format": {"type": "json_object"}}),
            ),
        ));
        assert!(e.contains("cannot be combined"), "{e}");
        let e = refused(prepare_chat(
            &app,
            &body(json!({"messages": hi, "response_format": {"type": "xml"}})),
        ));
        assert!(e.contains("'xml' is not supported"), "{e}");
    }
}
