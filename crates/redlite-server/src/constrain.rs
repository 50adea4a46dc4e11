//! Constrained output: the request fields that ask for it, compiled into a
//! grammar (`redlite-grammar`) that the engine applies as a token mask.
//!
//! * `tool_choice: "required"` / a named function (Anthropic `any` /
//!   `tool`): the reply is tool calls in the Qwen3-Coder format over the
//!   declared tools (only the named one), each argument valid for its
//!   schema; `parallel_tool_calls: false` (Anthropic
//!   `disable_parallel_tool_use`) allows exactly one call.
//! * `response_format: {"type": "json_object"}` or `{"type":
//!   "json_schema", "json_schema": {"schema": …}}`, and llama-server's
//!   `json_schema` (a schema) and `grammar` (GBNF; a grammar starting with
//!   `%llguidance` is llguidance's Lark syntax).
//!
//! A constraint is compiled while the request is prepared, so an invalid
//! schema or grammar is a 400 naming the field and the problem. Stop
//! strings do not apply to constrained output: it ends where the
//! constraint allows (an end-of-turn token, or the constraint complete).

use std::sync::Arc;

use redlite_engine::{ConstraintSource, TokenConstraint};
use redlite_grammar::{Grammar, GrammarMatcher, GrammarSpec, ToolSpec};
use serde_json::Value;

use crate::error::ApiError;
use crate::fields::*;
use crate::openai::ToolChoice;
use crate::App;

/// A compiled grammar as the engine's constraint source.
pub struct GrammarSource(Grammar);

impl std::fmt::Debug for GrammarSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GrammarSource")
    }
}

struct Matcher(GrammarMatcher);

impl TokenConstraint for Matcher {
    fn mask(&mut self, out: &mut Vec<u32>) -> Result<(), String> {
        self.0.mask(out).map_err(|e| e.to_string())
    }
    fn consume(&mut self, token: u32) -> Result<(), String> {
        self.0.consume(token).map_err(|e| e.to_string())
    }
    fn finished(&self) -> bool {
        self.0.is_stopped()
    }
}

impl ConstraintSource for GrammarSource {
    fn start(&self) -> Result<Box<dyn TokenConstraint>, String> {
        Ok(Box::new(Matcher(
            self.0.matcher().map_err(|e| e.to_string())?,
        )))
    }
}

/// A constraint asked for, and the field that asked (named in errors).
pub struct Asked {
    pub spec: GrammarSpec,
    pub field: &'static str,
}

/// `response_format`, `json_schema` and `grammar` (any endpoint).
pub fn output_format(o: &Obj) -> Result<Option<Asked>, ApiError> {
    let mut found: Vec<Asked> = Vec::new();
    if let Some(rf) = opt_object(o, "response_format")? {
        match rf.get("type").and_then(Value::as_str) {
            None | Some("text") => {}
            Some("json_object") => found.push(Asked {
                spec: match rf.get("schema") {
                    // llama-server also reads a schema here.
                    Some(s @ Value::Object(_)) => GrammarSpec::JsonSchema(s.clone()),
                    _ => GrammarSpec::JsonObject,
                },
                field: "response_format",
            }),
            Some("json_schema") => {
                let js = rf.get("json_schema").ok_or_else(|| {
                    ApiError::param(
                        "response_format",
                        "response_format 'json_schema' needs a 'json_schema' object with a 'schema'",
                    )
                })?;
                let schema = js.get("schema").or_else(|| rf.get("schema"));
                match schema {
                    Some(s @ (Value::Object(_) | Value::Bool(_))) => found.push(Asked {
                        spec: GrammarSpec::JsonSchema(s.clone()),
                        field: "response_format",
                    }),
                    Some(other) => {
                        return Err(ApiError::param(
                            "response_format",
                            format!(
                                "'response_format.json_schema.schema' must be a JSON Schema object, got {}",
                                kind(other)
                            ),
                        ))
                    }
                    None => {
                        return Err(ApiError::param(
                            "response_format",
                            "'response_format.json_schema.schema' is required",
                        ))
                    }
                }
            }
            Some(t) => {
                return Err(ApiError::param(
                    "response_format",
                    format!(
                        "response_format type '{t}' is not supported; use 'text', 'json_object' or 'json_schema'"
                    ),
                ))
            }
        }
    }
    match o.get("json_schema") {
        None | Some(Value::Null) => {}
        Some(s @ (Value::Object(_) | Value::Bool(_))) => found.push(Asked {
            spec: GrammarSpec::JsonSchema(s.clone()),
            field: "json_schema",
        }),
        Some(v) => {
            return Err(ApiError::param(
                "json_schema",
                format!(
                    "'json_schema' must be a JSON Schema object, got {}",
                    kind(v)
                ),
            ))
        }
    }
    match o.get("grammar") {
        None | Some(Value::Null) => {}
        Some(Value::String(g)) if g.trim().is_empty() => {}
        Some(Value::String(g)) => found.push(Asked {
            spec: if g.trim_start().starts_with("%llguidance") {
                GrammarSpec::Lark(g.clone())
            } else {
                GrammarSpec::Gbnf(g.clone())
            },
            field: "grammar",
        }),
        Some(v) => {
            return Err(ApiError::param(
                "grammar",
                format!("'grammar' must be a string (GBNF), got {}", kind(v)),
            ))
        }
    }
    if found.len() > 1 {
        let names: Vec<&str> = found.iter().map(|a| a.field).collect();
        return Err(ApiError::param(
            found[1].field,
            format!("only one of {} may be given", names.join(", ")),
        ));
    }
    Ok(found.pop())
}

/// The tool-call constraint of `tool_choice` (none for `auto` / `none`).
pub fn tool_calls(tools: &[Value], choice: &ToolChoice, parallel: bool) -> Option<Asked> {
    let named = match choice {
        ToolChoice::Required => None,
        ToolChoice::Named(n) => Some(n.as_str()),
        ToolChoice::Auto | ToolChoice::None => return None,
    };
    let specs: Vec<ToolSpec> = tools
        .iter()
        .filter_map(|t| {
            let name = t.pointer("/function/name").and_then(Value::as_str)?;
            if named.is_some_and(|n| n != name) {
                return None;
            }
            Some(ToolSpec {
                name: name.to_string(),
                parameters: t
                    .pointer("/function/parameters")
                    .cloned()
                    .unwrap_or(Value::Null),
            })
        })
        .collect();
    Some(Asked {
        spec: GrammarSpec::ToolCalls {
            tools: specs,
            parallel,
        },
        field: "tool_choice",
    })
}

/// At most one of a tool constraint and an output format.
pub fn one(tool: Option<Asked>, format: Option<Asked>) -> Result<Option<Asked>, ApiError> {
    match (tool, format) {
        (Some(_), Some(f)) => Err(ApiError::param(
            f.field,
            format!(
                "'{}' cannot be combined with a forced tool_choice (the reply is then tool calls)",
                f.field
            ),
        )),
        (t, f) => Ok(t.or(f)),
    }
}

/// Compile what was asked for; a 400 names the field and the problem.
pub fn compile(
    app: &App,
    asked: Option<Asked>,
) -> Result<Option<Arc<dyn ConstraintSource>>, ApiError> {
    let Some(a) = asked else {
        return Ok(None);
    };
    let env = app.grammar.as_ref().ok_or_else(|| {
        ApiError::param(
            a.field,
            "constrained output is not available: the model's vocabulary could not be indexed",
        )
    })?;
    let g = env.compile(&a.spec).map_err(|e| {
        ApiError::param(a.field, format!("invalid constraint in '{}': {e}", a.field))
    })?;
    Ok(Some(Arc::new(GrammarSource(g))))
}
