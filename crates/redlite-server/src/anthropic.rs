//! `POST /v1/messages` (Anthropic Messages), so Claude-Code-style clients
//! need no proxy. The request is translated into the chat form the template
//! renders; the reply comes from the same pipeline as chat completions.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::Response;
use axum::Json;
use redlite_chat::toolcall::{Delta, ParserOptions};
use redlite_engine::{DraftSource, Request, TokenLogprobs};
use serde_json::{json, Map, Value};

use crate::error::ApiError;
use crate::fields::*;
use crate::openai::{blocking, object_schema, render_chat, sampling, ChatPrompt, ToolChoice};
use crate::pipeline::ChatOutput;
use crate::run::{respond, Chunk, End, EndReason, Format};
use crate::{body_bytes, constrain, new_id, App};

/// Text of a `content` that is a string or an array of text blocks.
fn text_of(v: &Value, what: &str) -> Result<String, ApiError> {
    match v {
        Value::String(s) => Ok(s.clone()),
        Value::Null => Ok(String::new()),
        Value::Array(blocks) => {
            let mut parts = Vec::new();
            for b in blocks {
                match b.get("type").and_then(Value::as_str) {
                    Some("text") => parts.push(
                        b.get("text")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_string(),
                    ),
                    Some("image") | Some("document") => {
                        return Err(ApiError::invalid(format!(
                            "{what}: image and document blocks are not supported (text-only model)"
                        )))
                    }
                    _ => {
                        return Err(ApiError::invalid(format!(
                            "{what}: expected text blocks, got {b}"
                        )))
                    }
                }
            }
            Ok(parts.join("\n"))
        }
        other => Err(ApiError::invalid(format!(
            "{what}: content must be a string or an array of blocks, got {}",
            kind(other)
        ))),
    }
}

/// Anthropic messages → OpenAI-style messages for the chat template.
pub fn to_chat_messages(o: &Obj) -> Result<Vec<Value>, ApiError> {
    let mut out = Vec::new();
    if let Some(sys) = o.get("system").filter(|v| !v.is_null()) {
        let s = text_of(sys, "system")?;
        if !s.is_empty() {
            out.push(json!({"role": "system", "content": s}));
        }
    }
    let msgs = opt_array(o, "messages")?
        .ok_or_else(|| ApiError::param("messages", "'messages' is required"))?;
    if msgs.is_empty() {
        return Err(ApiError::param("messages", "'messages' must not be empty"));
    }
    for (i, m) in msgs.iter().enumerate() {
        let what = format!("messages[{i}]");
        let Value::Object(m) = m else {
            return Err(ApiError::invalid(format!("{what}: expected an object")));
        };
        let role = m.get("role").and_then(Value::as_str).unwrap_or_default();
        let content = m.get("content").cloned().unwrap_or(Value::Null);
        match (role, &content) {
            ("user" | "assistant", Value::String(s)) => {
                out.push(json!({"role": role, "content": s}));
            }
            ("user", Value::Array(blocks)) => {
                let mut text = Vec::new();
                for b in blocks {
                    match b.get("type").and_then(Value::as_str) {
                        Some("tool_result") => {
                            let id = b
                                .get("tool_use_id")
                                .and_then(Value::as_str)
                                .unwrap_or_default();
                            let c = text_of(
                                b.get("content").unwrap_or(&Value::Null),
                                &format!("{what} tool_result"),
                            )?;
                            out.push(json!({"role": "tool", "tool_call_id": id, "content": c}));
                        }
                        _ => text.push(text_of(&Value::Array(vec![b.clone()]), &what)?),
                    }
                }
                if !text.is_empty() {
                    out.push(json!({"role": "user", "content": text.join("\n")}));
                }
            }
            ("assistant", Value::Array(blocks)) => {
                let mut text = Vec::new();
                let mut reasoning = Vec::new();
                let mut calls = Vec::new();
                for b in blocks {
                    match b.get("type").and_then(Value::as_str) {
                        Some("text") => text.push(
                            b.get("text")
                                .and_then(Value::as_str)
                                .unwrap_or_default()
                                .to_string(),
                        ),
                        Some("thinking") => reasoning.push(
                            b.get("thinking")
                                .and_then(Value::as_str)
                                .unwrap_or_default()
                                .to_string(),
                        ),
                        Some("redacted_thinking") => {}
                        Some("tool_use") => {
                            let input = b.get("input").cloned().unwrap_or(json!({}));
                            calls.push(json!({
                                "id": b.get("id").and_then(Value::as_str).unwrap_or_default(),
                                "type": "function",
                                "function": {
                                    "name": b.get("name").and_then(Value::as_str).unwrap_or_default(),
                                    "arguments": input.to_string(),
                                }
                            }));
                        }
                        _ => {
                            return Err(ApiError::invalid(format!(
                                "{what}: unsupported assistant block {b}"
                            )))
                        }
                    }
                }
                let mut msg = Map::new();
                msg.insert("role".into(), json!("assistant"));
                msg.insert(
                    "content".into(),
                    if text.is_empty() && !calls.is_empty() {
                        Value::Null
                    } else {
                        json!(text.join("\n"))
                    },
                );
                if !reasoning.is_empty() {
                    msg.insert("reasoning_content".into(), json!(reasoning.join("\n")));
                }
                if !calls.is_empty() {
                    msg.insert("tool_calls".into(), Value::Array(calls));
                }
                out.push(Value::Object(msg));
            }
            ("user" | "assistant", other) => {
                return Err(ApiError::invalid(format!(
                    "{what}: content must be a string or an array of blocks, got {}",
                    kind(other)
                )))
            }
            (r, _) => {
                return Err(ApiError::invalid(format!(
                    "{what}: role must be 'user' or 'assistant', got '{r}'"
                )))
            }
        }
    }
    Ok(out)
}

/// Anthropic tools → OpenAI function tools.
fn to_chat_tools(o: &Obj) -> Result<Vec<Value>, ApiError> {
    let Some(tools) = opt_array(o, "tools")? else {
        return Ok(Vec::new());
    };
    tools
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let bad =
                |m: &str| ApiError::param("tools", format!("invalid tool schema: tools[{i}]: {m}"));
            let Value::Object(t) = t else {
                return Err(bad("expected an object"));
            };
            if let Some(ty) = t.get("type").and_then(Value::as_str) {
                if ty != "custom" {
                    return Err(bad(&format!("server tool type '{ty}' is not supported")));
                }
            }
            let name = match t.get("name") {
                Some(Value::String(n)) if !n.is_empty() && n.len() <= 256 => n.clone(),
                _ => return Err(bad("'name' must be a non-empty string")),
            };
            let schema = match t.get("input_schema") {
                Some(v @ Value::Object(_)) => {
                    object_schema(v).map_err(|m| bad(&format!("'input_schema' {m}")))?;
                    v.clone()
                }
                _ => return Err(bad("'input_schema' must be a JSON Schema object")),
            };
            let mut f = Map::new();
            f.insert("name".into(), json!(name));
            if let Some(d) = t.get("description") {
                f.insert("description".into(), d.clone());
            }
            f.insert("parameters".into(), schema);
            Ok(json!({"type": "function", "function": f}))
        })
        .collect()
}

fn to_tool_choice(o: &Obj, tools: &[Value]) -> Result<ToolChoice, ApiError> {
    let Some(tc) = opt_object(o, "tool_choice")? else {
        return Ok(ToolChoice::Auto);
    };
    let c = match tc.get("type").and_then(Value::as_str) {
        Some("auto") | None => ToolChoice::Auto,
        Some("none") => ToolChoice::None,
        Some("any") => ToolChoice::Required,
        Some("tool") => ToolChoice::Named(
            tc.get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| ApiError::param("tool_choice", "tool_choice 'tool' needs 'name'"))?
                .to_string(),
        ),
        Some(t) => {
            return Err(ApiError::param(
                "tool_choice",
                format!("unknown tool_choice type '{t}'"),
            ))
        }
    };
    let known = |n: &str| {
        tools
            .iter()
            .any(|t| t.pointer("/function/name").and_then(Value::as_str) == Some(n))
    };
    match &c {
        ToolChoice::Required if tools.is_empty() => Err(ApiError::param(
            "tool_choice",
            "tool_choice 'any' needs tools",
        )),
        ToolChoice::Named(n) if !known(n) => Err(ApiError::param(
            "tool_choice",
            format!("tool_choice names '{n}', which is not among the tools"),
        )),
        _ => Ok(c),
    }
}

fn prepare(app: &App, o: &Obj) -> Result<(ChatPrompt, Vec<Value>, ToolChoice), ApiError> {
    let messages = to_chat_messages(o)?;
    let tools = to_chat_tools(o)?;
    let choice = to_tool_choice(o, &tools)?;
    let prompt = render_chat(app, &messages, &tools, &choice, &Map::new())?;
    Ok((prompt, tools, choice))
}

/// An open content block of the streamed message.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Block {
    None,
    Text,
    Thinking,
    Tool(usize),
}

struct MessagesFormat {
    app: App,
    id: String,
    model: String,
    out: ChatOutput,
    prompt_tokens: usize,
    open: Block,
    index: usize,
}

fn ev(name: &'static str, data: Value) -> Chunk {
    Chunk::new().event(name).data(data.to_string())
}

impl MessagesFormat {
    fn close(&mut self, evs: &mut Vec<Chunk>) {
        if self.open != Block::None {
            evs.push(ev(
                "content_block_stop",
                json!({"type": "content_block_stop", "index": self.index}),
            ));
            self.index += 1;
            self.open = Block::None;
        }
    }

    fn events(&mut self, ds: Vec<Delta>) -> Vec<Chunk> {
        let mut evs = Vec::new();
        for d in ds {
            match d {
                Delta::Content(t) => {
                    if self.open != Block::Text {
                        self.close(&mut evs);
                        evs.push(ev(
                            "content_block_start",
                            json!({"type": "content_block_start",
                            "index": self.index, "content_block": {"type": "text", "text": ""}}),
                        ));
                        self.open = Block::Text;
                    }
                    evs.push(ev(
                        "content_block_delta",
                        json!({"type": "content_block_delta",
                        "index": self.index, "delta": {"type": "text_delta", "text": t}}),
                    ));
                }
                Delta::Reasoning(t) => {
                    if self.open != Block::Thinking {
                        self.close(&mut evs);
                        evs.push(ev("content_block_start", json!({"type": "content_block_start",
                            "index": self.index, "content_block": {"type": "thinking", "thinking": ""}})));
                        self.open = Block::Thinking;
                    }
                    evs.push(ev(
                        "content_block_delta",
                        json!({"type": "content_block_delta",
                        "index": self.index, "delta": {"type": "thinking_delta", "thinking": t}}),
                    ));
                }
                Delta::ToolCallStart { index, id, name } => {
                    self.close(&mut evs);
                    evs.push(ev("content_block_start", json!({"type": "content_block_start",
                        "index": self.index,
                        "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}})));
                    self.open = Block::Tool(index);
                }
                Delta::ToolCallArguments { fragment, .. } => {
                    evs.push(ev(
                        "content_block_delta",
                        json!({"type": "content_block_delta",
                        "index": self.index,
                        "delta": {"type": "input_json_delta", "partial_json": fragment}}),
                    ));
                }
            }
        }
        evs
    }

    fn stop_reason(&self, end: &End) -> (&'static str, Option<String>) {
        match &end.reason {
            EndReason::Length => ("max_tokens", None),
            EndReason::StopString(s) => ("stop_sequence", Some(s.clone())),
            EndReason::EndOfTurn if !self.out.message().tool_calls.is_empty() => ("tool_use", None),
            EndReason::EndOfTurn => ("end_turn", None),
        }
    }

    fn usage(end: &End) -> Value {
        json!({
            "input_tokens": end.prompt_tokens - end.cached_tokens,
            "output_tokens": end.generated_tokens,
            "cache_read_input_tokens": end.cached_tokens,
            "cache_creation_input_tokens": 0,
        })
    }
}

impl Format for MessagesFormat {
    fn head(&mut self) -> Vec<Chunk> {
        vec![
            ev(
                "message_start",
                json!({"type": "message_start", "message": {
                "id": self.id, "type": "message", "role": "assistant", "model": self.model,
                "content": [], "stop_reason": null, "stop_sequence": null,
                "usage": {"input_tokens": self.prompt_tokens, "output_tokens": 0,
                          "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0}}}),
            ),
            ev("ping", json!({"type": "ping"})),
        ]
    }

    fn token(&mut self, id: u32, _lp: Option<&TokenLogprobs>, stream: bool) -> Vec<Chunk> {
        let ds = self.out.push(&self.app.tokenizer, id);
        if stream {
            self.events(ds)
        } else {
            Vec::new()
        }
    }

    fn stopped(&self) -> Option<String> {
        self.out.matched().map(str::to_string)
    }

    fn tail(&mut self, end: &End) -> Vec<Chunk> {
        let ds = self.out.finish();
        let mut evs = self.events(ds);
        self.close(&mut evs);
        let (reason, seq) = self.stop_reason(end);
        evs.push(ev(
            "message_delta",
            json!({"type": "message_delta",
            "delta": {"stop_reason": reason, "stop_sequence": seq},
            "usage": Self::usage(end)}),
        ));
        evs.push(ev("message_stop", json!({"type": "message_stop"})));
        evs
    }

    fn body(&mut self, end: &End) -> Value {
        self.out.finish();
        let m = self.out.message();
        let mut content = Vec::new();
        if !m.reasoning_content.is_empty() {
            content.push(
                json!({"type": "thinking", "thinking": m.reasoning_content, "signature": ""}),
            );
        }
        if !m.content.is_empty() {
            content.push(json!({"type": "text", "text": m.content}));
        }
        for c in &m.tool_calls {
            let input: Value = serde_json::from_str(&c.arguments).unwrap_or(json!({}));
            content.push(json!({"type": "tool_use", "id": c.id, "name": c.name, "input": input}));
        }
        let (reason, seq) = self.stop_reason(end);
        json!({
            "id": self.id, "type": "message", "role": "assistant", "model": self.model,
            "content": content, "stop_reason": reason, "stop_sequence": seq,
            "usage": Self::usage(end),
        })
    }

    fn error_event(&self, msg: &str) -> Chunk {
        ev(
            "error",
            ApiError::internal(msg.to_string()).anthropic().body(),
        )
    }

    fn reason_name(&self, end: &End) -> String {
        self.stop_reason(end).0.to_string()
    }
}

/// `POST /v1/messages`.
pub async fn messages(
    State(app): State<App>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    inner(app, body).await.map_err(ApiError::anthropic)
}

/// Fields `/v1/messages` and `count_tokens` read; any other is skipped
/// unparsed.
const MESSAGES_FIELDS: &[&str] = &[
    "system",
    "messages",
    "tools",
    "tool_choice",
    "max_tokens",
    "stream",
    "stop_sequences",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "seed",
];

async fn inner(app: App, body: Result<Bytes, BytesRejection>) -> Result<Response, ApiError> {
    let bytes = body_bytes(body, app.cfg.max_body_bytes)?;
    let a = app.clone();
    let (id, req, fmt, stream) = blocking(move || prepare_messages(&a, &bytes)).await?;
    respond(app, id, req, fmt, stream).await
}

fn prepare_messages(
    app: &App,
    bytes: &[u8],
) -> Result<(String, Request, MessagesFormat, bool), ApiError> {
    let o = parse_known(bytes, MESSAGES_FIELDS)?;
    let max_tokens = opt_usize(&o, "max_tokens")?
        .ok_or_else(|| ApiError::param("max_tokens", "'max_tokens' is required"))?;
    let (prompt, tools, choice) = prepare(app, &o)?;
    let sampling = sampling(&o, app)?;
    let stream = opt_bool(&o, "stream")?.unwrap_or(false);
    let stops = stop_strings(&o, "stop_sequences")?;
    let max_tokens = app.budget(prompt.ids.len(), Some(max_tokens), "max_tokens")?;
    let id = new_id("msg_");
    let opts = ParserOptions {
        parse_tool_calls: choice != ToolChoice::None,
        id_prefix: Some(format!("toolu_{}_", &id[4..16])),
        ..ParserOptions::for_prompt(&prompt.text)
    };
    // `disable_parallel_tool_use` in `tool_choice`: exactly one call.
    let parallel = !opt_object(&o, "tool_choice")?
        .and_then(|tc| tc.get("disable_parallel_tool_use"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let constraint = match constrain::tool_calls(&tools, &choice, parallel) {
        Some(a) if app.grammar.is_some() => constrain::compile(app, Some(a))?,
        _ => None,
    };
    let stops = if constraint.is_some() {
        Vec::new()
    } else {
        stops
    };
    let out = ChatOutput::new(&tools, opts, stops, &prompt.forced);
    let fmt = MessagesFormat {
        app: app.clone(),
        id: id.clone(),
        model: app.cfg.alias.clone(),
        out,
        prompt_tokens: prompt.ids.len(),
        open: Block::None,
        index: 0,
    };
    let req = Request {
        boundaries: prompt.boundaries,
        prompt: prompt.ids,
        max_tokens,
        sampling,
        logprobs: None,
        stop_at_eog: true,
        lookup: app.cfg.lookup.clone(),
        draft_source: DraftSource::Lookup,
        constraint,
    };
    Ok((id, req, fmt, stream))
}

/// `POST /v1/messages/count_tokens`.
pub async fn count_tokens(
    State(app): State<App>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let run = async {
        let bytes = body_bytes(body, app.cfg.max_body_bytes)?;
        let n = blocking(move || {
            let o = parse_known(&bytes, MESSAGES_FIELDS)?;
            let (prompt, _, _) = prepare(&app, &o)?;
            Ok(prompt.ids.len())
        })
        .await?;
        Ok(Json(json!({ "input_tokens": n })))
    };
    run.await.map_err(ApiError::anthropic)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{test_app, test_end, test_tokens};

    #[test]
    fn tool_use_streams_as_content_blocks() {
        let app = test_app();
        let tools = to_chat_tools(
            json!({"tools": [{"name": "read", "input_schema": {"type": "object",
                "properties": {"path": {"type": "string"}}}}]})
            .as_object()
            .expect("obj"),
        )
        .expect("tools");
        let mk = || MessagesFormat {
            app: app.clone(),
            id: "msg_t".into(),
            model: "m".into(),
            out: ChatOutput::new(&tools, ParserOptions::default(), vec![], ""),
            prompt_tokens: 10,
            open: Block::None,
            index: 0,
        };
        let text = "Let me look.\n<tool_call>\n<function=read>\n<parameter=path>\nREADME.md\n</parameter>\n</function>\n</tool_call>";
        let ids = test_tokens(&app, text);
        let mut f = mk();
        let mut ev = f.head();
        for &id in &ids {
            ev.extend(f.token(id, None, true));
        }
        ev.extend(f.tail(&test_end(ids.len())));
        let names: Vec<&str> = ev.iter().map(|c| c.event.unwrap_or("")).collect();
        assert_eq!(names[0], "message_start");
        assert_eq!(*names.last().expect("last"), "message_stop");
        let data: Vec<Value> = ev
            .iter()
            .map(|c| serde_json::from_str(&c.data).expect("json"))
            .collect();
        let starts: Vec<&Value> = data
            .iter()
            .filter(|d| d["type"] == "content_block_start")
            .collect();
        assert_eq!(starts.len(), 2);
        assert_eq!(starts[0]["content_block"]["type"], "text");
        assert_eq!(starts[1]["content_block"]["type"], "tool_use");
        assert_eq!(starts[1]["content_block"]["name"], "read");
        assert_eq!(starts[1]["index"], 1);
        let json_parts: String = data
            .iter()
            .filter(|d| d["delta"]["type"] == "input_json_delta")
            .map(|d| d["delta"]["partial_json"].as_str().unwrap_or(""))
            .collect();
        assert_eq!(
            serde_json::from_str::<Value>(&json_parts).expect("json"),
            json!({"path": "README.md"})
        );
        let md = data
            .iter()
            .find(|d| d["type"] == "message_delta")
            .expect("delta");
        assert_eq!(md["delta"]["stop_reason"], "tool_use");
        assert_eq!(md["usage"]["cache_read_input_tokens"], 4);
        assert_eq!(md["usage"]["input_tokens"], 6);
        // Every block is stopped once.
        let stops = data
            .iter()
            .filter(|d| d["type"] == "content_block_stop")
            .count();
        assert_eq!(stops, 2);

        let mut f = mk();
        for &id in &ids {
            f.token(id, None, false);
        }
        let body = f.body(&test_end(ids.len()));
        assert_eq!(
            body["content"][0],
            json!({"type": "text", "text": "Let me look."})
        );
        assert_eq!(body["content"][1]["type"], "tool_use");
        assert_eq!(body["content"][1]["input"], json!({"path": "README.md"}));
        assert_eq!(body["stop_reason"], "tool_use");
    }

    #[test]
    fn messages_translate_to_chat_form() {
        let o = json!({
            "system": [{"type": "text", "text": "sys"}],
            "messages": [
                {"role": "user", "content": "read it"},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "ok"},
                    {"type": "tool_use", "id": "t1", "name": "read", "input": {"path": "a"}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "data"}]},
                    {"type": "text", "text": "thanks"}]},
            ]
        });
        let m = to_chat_messages(o.as_object().expect("obj")).expect("translate");
        assert_eq!(m[0], json!({"role": "system", "content": "sys"}));
        assert_eq!(
            m[2]["tool_calls"][0]["function"]["arguments"],
            r#"{"path":"a"}"#
        );
        assert_eq!(
            m[3],
            json!({"role": "tool", "tool_call_id": "t1", "content": "data"})
        );
        assert_eq!(m[4], json!({"role": "user", "content": "thanks"}));
    }
}
