//! The Qwen3-Coder tool-call format as a Lark grammar over declared tools.
//!
//! What the chat template writes for a call (and `redlite_chat::toolcall`
//! reads back):
//!
//! ```text
//! <tool_call>
//! <function=NAME>
//! <parameter=P>
//! VALUE
//! </parameter>
//! </function>
//! </tool_call>
//! ```
//!
//! Several calls are joined by one `\n`. The grammar allows exactly this
//! shape: a declared tool's name, its parameters in the order the schema
//! lists them (each at most once, the required ones present, no others),
//! and each value constrained by the parameter's schema:
//!
//! * string-typed (`"string"`, a type list with `"string"`, or untyped):
//!   raw text, as the parser keeps it — within `minLength`/`maxLength`, one
//!   of the `enum`/`const` strings when given, never containing a tag of the
//!   format (`<parameter`, `</parameter`, `<function`, `</function`,
//!   `<tool_call`, `</tool_call`) and not ending in `\r` (which the parser
//!   would take as part of the closing newline);
//! * anything else (integer, number, boolean, null, enums of other kinds,
//!   arrays, objects, `anyOf`…): JSON valid against the parameter's schema
//!   (`%json`), with at most a single space between JSON tokens, and numbers
//!   without bounds held to what the parser reads back as numbers (see
//!   `bound_numbers`).

use serde_json::{json, Map, Value};

/// A declared tool: its name and its parameters' JSON schema (an object
/// schema, or null for none).
#[derive(Clone, Debug)]
pub struct ToolSpec {
    pub name: String,
    pub parameters: Value,
}

/// A Lark string literal (JSON string syntax).
fn lit(s: &str) -> String {
    Value::String(s.to_string()).to_string()
}

/// Tag text a raw string value may not contain.
const TAGS_RX: &str = r"(?s:.*<\/?(?:parameter|function|tool_call).*)";

/// Does a parameter schema take its value as raw text?
fn is_text(schema: &Value) -> bool {
    let Value::Object(m) = schema else {
        // `true` or a malformed schema: untyped, raw text.
        return true;
    };
    match m.get("type") {
        Some(Value::String(t)) => t == "string",
        Some(Value::Array(ts)) => ts.iter().any(|t| t == "string"),
        Some(_) => false,
        None => {
            // Untyped: raw text unless it is a structural schema.
            const STRUCT: [&str; 8] = [
                "anyOf",
                "oneOf",
                "allOf",
                "$ref",
                "properties",
                "items",
                "enum",
                "const",
            ];
            !STRUCT.iter().any(|k| m.contains_key(*k))
        }
    }
}

/// The grammar of one raw-text value (between `<parameter=P>\n` and
/// `\n</parameter>\n`), as a terminal definition.
fn text_terminal(schema: &Value) -> Result<String, String> {
    let m = schema.as_object();
    let strings = |key: &str| -> Option<Vec<String>> {
        let v = m?.get(key)?;
        let vals: Vec<&Value> = match (key, v) {
            ("enum", Value::Array(a)) => a.iter().collect(),
            ("const", v) => vec![v],
            _ => return None,
        };
        // Non-string members (a `null` in a nullable enum) are written as
        // JSON, which the parser reads back for a type list with "null".
        Some(
            vals.iter()
                .map(|v| match v {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                })
                .collect(),
        )
    };
    if let Some(vals) = strings("const").or_else(|| strings("enum")) {
        if vals.is_empty() {
            return Err("'enum' is empty: no value is allowed".into());
        }
        return Ok(vals.iter().map(|v| lit(v)).collect::<Vec<_>>().join(" | "));
    }
    let num = |key: &str| -> Result<Option<u64>, String> {
        match m.and_then(|m| m.get(key)) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .map(Some)
                .ok_or_else(|| format!("'{key}' must be a non-negative integer, got {v}")),
        }
    };
    let min = num("minLength")?.unwrap_or(0);
    let max = num("maxLength")?;
    if let Some(max) = max {
        if max < min {
            return Err(format!("'maxLength' {max} is below 'minLength' {min}"));
        }
    }
    let len = match max {
        Some(max) => format!("{{{min},{max}}}"),
        None if min == 0 => "*".into(),
        None => format!("{{{min},}}"),
    };
    Ok(format!(r"/(?s:.{len})/ & ~/{TAGS_RX}/ & ~/(?s:.*\r)/"))
}

/// Numbers the tool-call parser can hold: it keeps integers beyond 64 bits
/// and infinite floats (`1e999`) as raw strings, which would not match the
/// schema. Every `integer` / `number` subschema without bounds gets them:
/// integers within ±(10^18 - 1), numbers within ±10^15 (llguidance's range
/// expressions cover no wider ones).
fn bound_numbers(m: &mut Map<String, Value>) {
    let types: Vec<String> = match m.get("type") {
        Some(Value::String(t)) => vec![t.clone()],
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(|t| t.as_str().map(String::from))
            .collect(),
        _ => Vec::new(),
    };
    let bounds = if types.iter().any(|t| t == "number") {
        Some((json!(-1e15), json!(1e15)))
    } else if types.iter().any(|t| t == "integer") {
        Some((
            json!(-999_999_999_999_999_999i64),
            json!(999_999_999_999_999_999i64),
        ))
    } else {
        None
    };
    if let Some((lo, hi)) = bounds {
        if !m.contains_key("minimum") && !m.contains_key("exclusiveMinimum") {
            m.insert("minimum".into(), lo);
        }
        if !m.contains_key("maximum") && !m.contains_key("exclusiveMaximum") {
            m.insert("maximum".into(), hi);
        }
    }
    for (k, v) in m.iter_mut() {
        if k == "enum" || k == "const" || k == "x-guidance" {
            continue;
        }
        match v {
            Value::Object(o) => bound_numbers(o),
            Value::Array(a) => a.iter_mut().for_each(|x| {
                if let Value::Object(o) = x {
                    bound_numbers(o)
                }
            }),
            _ => {}
        }
    }
}

/// `schema` made self-contained: the tool's `$defs` / `definitions` carried
/// into a parameter's schema so its `$ref`s resolve.
fn with_defs(schema: &Value, root: &Map<String, Value>) -> Value {
    let mut s = schema.clone();
    if let Value::Object(m) = &mut s {
        for k in ["$defs", "definitions"] {
            if let Some(d) = root.get(k) {
                m.entry(k).or_insert_with(|| d.clone());
            }
        }
        bound_numbers(m);
        m.insert(
            "x-guidance".into(),
            json!({"whitespace_pattern": " ", "coerce_one_of": true}),
        );
    }
    s
}

/// The Lark grammar of a reply made only of tool calls (one, or with
/// `parallel` one or more), over `tools`. Errors name the tool and
/// parameter at fault.
pub fn tool_call_lark(tools: &[ToolSpec], parallel: bool) -> Result<String, String> {
    if tools.is_empty() {
        return Err("no tools to call".into());
    }
    let mut rules = Vec::new();
    let mut fns = Vec::new();
    for (i, t) in tools.iter().enumerate() {
        let bad = |m: String| format!("tool '{}': {m}", t.name);
        if t.name.is_empty() || t.name.contains(['<', '>', '\n']) {
            return Err(bad(
                "the name must be non-empty, without '<', '>' or newlines".into(),
            ));
        }
        let empty = Map::new();
        let root = match &t.parameters {
            Value::Object(m) => m,
            Value::Null => &empty,
            other => return Err(bad(format!("'parameters' must be an object, got {other}"))),
        };
        let props = match root.get("properties") {
            Some(Value::Object(p)) => p.clone(),
            None | Some(Value::Null) => Map::new(),
            Some(other) => return Err(bad(format!("'properties' must be an object, got {other}"))),
        };
        let required: Vec<&str> = match root.get("required") {
            Some(Value::Array(r)) => r.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        for r in &required {
            if !props.contains_key(*r) {
                return Err(bad(format!(
                    "required parameter '{r}' is not among its properties"
                )));
            }
        }
        let mut seq = vec![lit(&format!("<function={}>\n", t.name))];
        for (j, (p, schema)) in props.iter().enumerate() {
            if p.is_empty() || p.contains(['<', '>', '\n']) {
                return Err(bad(format!(
                    "parameter name '{p}' must be non-empty, without '<', '>' or newlines"
                )));
            }
            let open = lit(&format!("<parameter={p}>\n"));
            let close = lit("\n</parameter>\n");
            let name = format!("p{i}_{j}");
            if is_text(schema) {
                // The value and its closing tag are one lexeme: the value
                // cannot contain the tag, so it ends at the first one.
                let term = format!("P{i}_{j}");
                let body =
                    text_terminal(schema).map_err(|m| bad(format!("parameter '{p}': {m}")))?;
                rules.push(format!("{term}_V: {body}"));
                rules.push(format!("{term}: {term}_V {close}"));
                rules.push(format!("{name}: {open} {term}"));
            } else {
                let s = with_defs(schema, root);
                rules.push(format!("{name}: {open} %json {s} {close}"));
            }
            let opt = if required.contains(&p.as_str()) {
                ""
            } else {
                "?"
            };
            seq.push(format!("{name}{opt}"));
        }
        rules.push(format!("f{i}: {}", seq.join(" ")));
        fns.push(format!("f{i}"));
    }
    let start = if parallel {
        "start: call (\"\\n\" call)*"
    } else {
        "start: call"
    };
    let call = format!(
        "call: {} ({}) {}",
        lit("<tool_call>\n"),
        fns.join(" | "),
        lit("</function>\n</tool_call>")
    );
    let mut out = vec![start.to_string(), call];
    out.extend(rules);
    Ok(out.join("\n") + "\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grammar_lists_parameters_in_order_with_required_ones() {
        let g = tool_call_lark(
            &[ToolSpec {
                name: "read".into(),
                parameters: json!({"type": "object",
                    "properties": {"path": {"type": "string", "maxLength": 9},
                                   "limit": {"type": "integer"}},
                    "required": ["path"]}),
            }],
            false,
        )
        .expect("grammar");
        assert!(g.contains("f0: \"<function=read>\\n\" p0_0 p0_1?"), "{g}");
        assert!(g.contains("P0_0_V: /(?s:.{0,9})/"), "{g}");
        assert!(g.contains("%json {\"type\":\"integer\""), "{g}");
    }

    #[test]
    fn bad_tools_name_the_fault() {
        let e = tool_call_lark(
            &[ToolSpec {
                name: "t".into(),
                parameters: json!({"properties": {"a": {"type": "string"}}, "required": ["b"]}),
            }],
            true,
        )
        .expect_err("missing required");
        assert!(e.contains("tool 't'") && e.contains("'b'"), "{e}");
        let e = tool_call_lark(
            &[ToolSpec {
                name: "t".into(),
                parameters: json!({"properties": {"a": {"type": "string", "maxLength": 1, "minLength": 3}}}),
            }],
            true,
        )
        .expect_err("min > max");
        assert!(e.contains("parameter 'a'"), "{e}");
    }
}
