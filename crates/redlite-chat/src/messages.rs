//! Message normalisation: OpenAI-style messages into the shape chat
//! templates expect (see [`normalize_messages`]).

use serde_json::{Map, Value as Json};

use crate::template::py;
use crate::template::TemplateError;

/// A word for the kind of a JSON value, for error messages.
pub(crate) fn json_kind(v: &Json) -> &'static str {
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
