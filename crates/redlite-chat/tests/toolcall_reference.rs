//! The tool-call parser against the official Qwen3-Coder parser, on realistic
//! malformed model output.
//!
//! `tests/py/qwen3coder_reference.py` models the official parser (vLLM's
//! `extract_tool_calls`) in plain Python. Every case has a hand-written
//! expected result for this parser; the reference must give the same calls
//! and the same content (the official parser keeps only the text before the
//! first call, untrimmed), or, where this parser deliberately differs (module
//! documentation), the reference's own result is written out too, so the
//! deviation is asserted rather than assumed. Every case is also streamed
//! whole, char by char and split at every point.

use std::io::Write;
use std::process::{Command, Stdio};

use redlite_chat::toolcall::{Delta, ParsedMessage, ParserOptions, ToolCall, ToolCallParser};
use serde_json::{json, Value};

fn tools() -> Vec<Value> {
    vec![
        json!({"type": "function", "function": {"name": "read", "parameters": {"type": "object",
            "properties": {"path": {"type": "string"}, "offset": {"type": "integer"}}}}}),
        json!({"type": "function", "function": {"name": "edit", "parameters": {"type": "object",
            "properties": {"path": {"type": "string"}, "old": {"type": "string"}, "new": {"type": "string"},
                           "edits": {"type": "array"}, "opts": {"type": "object"},
                           "dry_run": {"type": "boolean"}, "scale": {"type": "number"},
                           "mode": {"type": "string", "enum": ["strict", "fuzzy"]}}}}}),
        json!({"type": "function", "function": {"name": "run", "parameters": {"type": "object",
            "properties": {"cmd": {}, "env": {"description": "untyped"}}}}}),
        json!({"type": "function", "function": {"name": "opt", "parameters": {"type": "object",
            "properties": {"s": {"type": ["string", "null"]}, "n": {"type": ["integer", "null"]},
                           "a": {"anyOf": [{"type": "integer"}, {"type": "null"}]}}}}}),
    ]
}

/// A message: trimmed content and (name, arguments) calls.
struct Msg {
    content: &'static str,
    calls: Vec<(&'static str, Value)>,
}

fn msg(content: &'static str, calls: Vec<(&'static str, Value)>) -> Msg {
    Msg { content, calls }
}

struct Case {
    name: &'static str,
    text: String,
    ours: Msg,
    /// `None`: the official parser gives the same result.
    official: Option<Msg>,
}

fn case(name: &'static str, text: &str, ours: Msg, official: Option<Msg>) -> Case {
    Case {
        name,
        text: text.to_string(),
        ours,
        official,
    }
}

/// `<tool_call>` around a function with `(name, value)` parameters, in the
/// model's usual layout.
fn call_text(func: &str, params: &[(&str, &str)]) -> String {
    let mut s = format!("<tool_call>\n<function={func}>\n");
    for (k, v) in params {
        s.push_str(&format!("<parameter={k}>\n{v}\n</parameter>\n"));
    }
    s.push_str("</function>\n</tool_call>");
    s
}

fn cases() -> Vec<Case> {
    let good_b = call_text("read", &[("path", "b.rs")]);
    vec![
        // --- A call missing a closing tag, followed by a good call.
        case(
            "missing_function_close_then_good_call",
            &format!("Plan.\n<tool_call>\n<function=read>\n<parameter=path>\na.rs\n</parameter>\n</tool_call>\n{good_b}"),
            msg("Plan.", vec![("read", json!({"path": "a.rs"})), ("read", json!({"path": "b.rs"}))]),
            None,
        ),
        case(
            "missing_parameter_and_function_close_then_good_call",
            &format!("<tool_call>\n<function=read>\n<parameter=path>\na.rs\n</tool_call>\n{good_b}"),
            msg("", vec![("read", json!({"path": "a.rs"})), ("read", json!({"path": "b.rs"}))]),
            None,
        ),
        case(
            "missing_every_close_then_good_call",
            &format!("<tool_call>\n<function=read>\n<parameter=path>\na.rs\n{good_b}"),
            msg("", vec![("read", json!({"path": "a.rs"})), ("read", json!({"path": "b.rs"}))]),
            // One merged call: the second call's path overwrites the first.
            Some(msg("", vec![("read", json!({"path": "b.rs"}))])),
        ),
        case(
            "missing_function_close_before_next_function",
            "<tool_call>\n<function=read>\n<parameter=path>\na.rs\n</parameter>\n<function=edit>\n<parameter=path>\nb.rs\n</parameter>\n<parameter=old>\nx\n</parameter>\n</function>\n</tool_call>",
            msg("", vec![("read", json!({"path": "a.rs"})), ("edit", json!({"path": "b.rs", "old": "x"}))]),
            Some(msg("", vec![("read", json!({"path": "b.rs", "old": "x"}))])),
        ),
        case(
            "missing_function_close_before_next_tool_call",
            &format!("<tool_call>\n<function=read>\n<parameter=path>\na.rs\n</parameter>\n{good_b}"),
            msg("", vec![("read", json!({"path": "a.rs"})), ("read", json!({"path": "b.rs"}))]),
            Some(msg("", vec![("read", json!({"path": "b.rs"}))])),
        ),
        // --- A missing `</parameter>` between two parameters.
        case(
            "missing_parameter_close_between_parameters",
            "<tool_call>\n<function=read>\n<parameter=path>\na.rs\n<parameter=offset>\n10\n</parameter>\n</function>\n</tool_call>",
            msg("", vec![("read", json!({"path": "a.rs", "offset": 10}))]),
            None,
        ),
        // --- A value ending at `</function>` or `</tool_call>`.
        case(
            "value_ends_at_function_close",
            "<tool_call>\n<function=read>\n<parameter=path>\na.rs\n</function>\n</tool_call>",
            msg("", vec![("read", json!({"path": "a.rs"}))]),
            None,
        ),
        case(
            "value_ends_at_function_close_same_line",
            "<tool_call>\n<function=read>\n<parameter=offset>\n10</function>\n</tool_call>",
            msg("", vec![("read", json!({"offset": 10}))]),
            None,
        ),
        case(
            "value_ends_at_tool_call_close",
            "Reading.\n\n<tool_call>\n<function=read>\n<parameter=path>\na.rs\n</tool_call>",
            msg("Reading.", vec![("read", json!({"path": "a.rs"}))]),
            None,
        ),
        // --- Text before and after calls.
        case(
            "text_around_calls_is_separated",
            &format!("Let me check.\n{}\nChecked; now b.\n\n{good_b}\nDone.", call_text("read", &[("path", "a.rs")])),
            msg("Let me check.\nChecked; now b.\nDone.", vec![("read", json!({"path": "a.rs"})), ("read", json!({"path": "b.rs"}))]),
            Some(msg("Let me check.", vec![("read", json!({"path": "a.rs"})), ("read", json!({"path": "b.rs"}))])),
        ),
        // --- Booleans.
        case(
            "booleans_in_any_case",
            &call_text("edit", &[("dry_run", "TRUE")]),
            msg("", vec![("edit", json!({"dry_run": true}))]),
            None,
        ),
        case(
            "booleans_python_spelling",
            &call_text("edit", &[("dry_run", "False")]),
            msg("", vec![("edit", json!({"dry_run": false}))]),
            None,
        ),
        case(
            "boolean_one",
            &call_text("edit", &[("dry_run", "1")]),
            msg("", vec![("edit", json!({"dry_run": true}))]),
            Some(msg("", vec![("edit", json!({"dry_run": false}))])),
        ),
        case(
            "boolean_unreadable_stays_string",
            &call_text("edit", &[("dry_run", "yes")]),
            msg("", vec![("edit", json!({"dry_run": "yes"}))]),
            Some(msg("", vec![("edit", json!({"dry_run": false}))])),
        ),
        // --- Integers and numbers by Python's int() / float().
        case(
            "integers_like_python_int",
            "<tool_call>\n<function=read>\n<parameter=offset>\n007\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=read>\n<parameter=offset>\n+5\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=read>\n<parameter=offset>\n 1_000 \n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=read>\n<parameter=offset>\n-3\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=read>\n<parameter=offset>\n1.5\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=read>\n<parameter=offset>\nten\n</parameter>\n</function>\n</tool_call>",
            msg("", vec![("read", json!({"offset": 7})), ("read", json!({"offset": 5})), ("read", json!({"offset": 1000})),
                         ("read", json!({"offset": -3})), ("read", json!({"offset": "1.5"})), ("read", json!({"offset": "ten"}))]),
            None,
        ),
        case(
            "numbers_like_python_float",
            "<tool_call>\n<function=edit>\n<parameter=scale>\n1.0\n</parameter>\n</function>\n<function=edit>\n<parameter=scale>\n-1.5e3\n</parameter>\n</function>\n<function=edit>\n<parameter=scale>\n.5\n</parameter>\n</function>\n<function=edit>\n<parameter=scale>\n+2.50\n</parameter>\n</function>\n<function=edit>\n<parameter=scale>\n1e20\n</parameter>\n</function>\n<function=edit>\n<parameter=scale>\n0x10\n</parameter>\n</function>\n</tool_call>",
            msg("", vec![("edit", json!({"scale": 1})), ("edit", json!({"scale": -1500})), ("edit", json!({"scale": 0.5})),
                         ("edit", json!({"scale": 2.5})), ("edit", json!({"scale": 1e20})), ("edit", json!({"scale": "0x10"}))]),
            None,
        ),
        case(
            "integer_beyond_64_bits_stays_string",
            &call_text("read", &[("offset", "99999999999999999999999")]),
            msg("", vec![("read", json!({"offset": "99999999999999999999999"}))]),
            Some(msg("", vec![("read", json!({"offset": 99999999999999999999999.0}))])),
        ),
        case(
            "infinity_stays_string",
            &call_text("edit", &[("scale", "inf")]),
            msg("", vec![("edit", json!({"scale": "inf"}))]),
            // int(inf) raises OverflowError: the whole output is content.
            Some(msg("<tool_call>\n<function=edit>\n<parameter=scale>\ninf\n</parameter>\n</function>\n</tool_call>", vec![])),
        ),
        // --- Objects and arrays: JSON, else Python literals.
        case(
            "python_literal_list_and_dict",
            &call_text("edit", &[
                ("edits", "[{'old': 'a', 'new': \"b\\n\"}, ('t', 1), None, True, -2.5]"),
                ("opts", "{'k': [1, 2.5], 'n': None, 1: 'one', 'raw': r'c\\d', 'cat': 'x' 'y'}"),
            ]),
            msg("", vec![("edit", json!({"edits": [{"old": "a", "new": "b\n"}, ["t", 1], null, true, -2.5],
                                         "opts": {"k": [1, 2.5], "n": null, "1": "one", "raw": "c\\d", "cat": "xy"}}))]),
            None,
        ),
        case(
            "json_array_and_object",
            &call_text("edit", &[("edits", "[{\"old\": \"a\", \"new\": \"b\\n\"}, {\"count\": 2}]"), ("opts", "{\"deep\": {\"x\": [1, \"s\"]}}")]),
            msg("", vec![("edit", json!({"edits": [{"old": "a", "new": "b\n"}, {"count": 2}], "opts": {"deep": {"x": [1, "s"]}}}))]),
            None,
        ),
        case(
            "unreadable_array_stays_string",
            &call_text("edit", &[("edits", "[a, b")]),
            msg("", vec![("edit", json!({"edits": "[a, b"}))]),
            None,
        ),
        case(
            "python_set_stays_string",
            &call_text("edit", &[("edits", "{1, 2}")]),
            msg("", vec![("edit", json!({"edits": "{1, 2}"}))]),
            // json.dumps fails on a set: the whole output is content.
            Some(msg("<tool_call>\n<function=edit>\n<parameter=edits>\n{1, 2}\n</parameter>\n</function>\n</tool_call>", vec![])),
        ),
        // --- Strings stay raw.
        case(
            "strings_stay_raw",
            &call_text("edit", &[("path", "123"), ("old", "\"quoted\""), ("new", "  [1, 2]\n\n"), ("mode", "fuzzy")]),
            msg("", vec![("edit", json!({"path": "123", "old": "\"quoted\"", "new": "  [1, 2]\n\n", "mode": "fuzzy"}))]),
            None,
        ),
        case(
            "string_null_stays_string",
            &call_text("edit", &[("path", "null")]),
            msg("", vec![("edit", json!({"path": "null"}))]),
            Some(msg("", vec![("edit", json!({"path": null}))])),
        ),
        // --- Undeclared tools and parameters, untyped properties: raw.
        case(
            "undeclared_parameter_is_raw",
            &call_text("read", &[("path", "a.rs"), ("extra", "{\"a\": 1}"), ("flag", "true"), ("none", "null")]),
            msg("", vec![("read", json!({"path": "a.rs", "extra": "{\"a\": 1}", "flag": "true", "none": null}))]),
            None,
        ),
        case(
            "undeclared_tool_is_raw",
            &call_text("search", &[("q", "\"quoted\""), ("n", "5"), ("list", "[1, 2]")]),
            msg("", vec![("search", json!({"q": "\"quoted\"", "n": "5", "list": "[1, 2]"}))]),
            None,
        ),
        case(
            "untyped_property_is_raw",
            &call_text("run", &[("cmd", "[\"ls\", \"-l\"]"), ("env", "true")]),
            msg("", vec![("run", json!({"cmd": "[\"ls\", \"-l\"]", "env": "true"}))]),
            None,
        ),
        // --- Type lists and anyOf are sets of types.
        case(
            "string_or_null_keeps_strings",
            &call_text("opt", &[("s", "123")]),
            msg("", vec![("opt", json!({"s": "123"}))]),
            Some(msg("", vec![("opt", json!({"s": 123}))])),
        ),
        case(
            "string_or_null_null",
            &call_text("opt", &[("s", "null")]),
            msg("", vec![("opt", json!({"s": null}))]),
            None,
        ),
        case(
            "integer_or_null",
            &call_text("opt", &[("n", "007")]),
            msg("", vec![("opt", json!({"n": 7}))]),
            Some(msg("", vec![("opt", json!({"n": "007"}))])),
        ),
        case(
            "integer_or_null_python_none",
            &call_text("opt", &[("n", "None")]),
            msg("", vec![("opt", json!({"n": null}))]),
            None,
        ),
        case(
            "any_of_integer_or_null",
            &call_text("opt", &[("a", "5")]),
            msg("", vec![("opt", json!({"a": 5}))]),
            Some(msg("", vec![("opt", json!({"a": "5"}))])),
        ),
        // --- Several functions in one <tool_call>.
        case(
            "two_functions_in_one_tool_call",
            "Both.\n<tool_call>\n<function=read>\n<parameter=path>\na.rs\n</parameter>\n</function>\n<function=read>\n<parameter=path>\nb.rs\n</parameter>\n</function>\n</tool_call>",
            msg("Both.", vec![("read", json!({"path": "a.rs"})), ("read", json!({"path": "b.rs"}))]),
            None,
        ),
        // --- No phantom calls.
        case(
            "prose_mentions_tool_call_tag",
            "Use the `<tool_call>` tag to call a tool.",
            msg("Use the `<tool_call>` tag to call a tool.", vec![]),
            None,
        ),
        case(
            "prose_mentions_function_tag",
            "Write `<function=read>` in the docs.",
            msg("Write `<function=read>` in the docs.", vec![]),
            Some(msg("Write `", vec![("read", json!({}))])),
        ),
        case(
            "prose_tool_call_then_function_tag",
            "Emit <tool_call> followed by <function=NAME>.",
            msg("Emit <tool_call> followed by <function=NAME>.", vec![]),
            Some(msg("Emit", vec![("NAME", json!({}))])),
        ),
        case(
            "inline_code_call_example",
            "For example `<tool_call>\n<function=read>\n<parameter=path>\nx\n</parameter>\n</function>\n</tool_call>` reads x.",
            msg("For example `<tool_call>\n<function=read>\n<parameter=path>\nx\n</parameter>\n</function>\n</tool_call>` reads x.", vec![]),
            Some(msg("For example `", vec![("read", json!({"path": "x"}))])),
        ),
        case(
            "bare_function_at_line_start",
            "Reading.\n<function=read>\n<parameter=path>\nx\n</parameter>\n</function>",
            msg("Reading.", vec![("read", json!({"path": "x"}))]),
            None,
        ),
        // --- CRLF.
        case(
            "crlf_everywhere",
            "Editing.\r\n<tool_call>\r\n<function=edit>\r\n<parameter=path>\r\na.rs\r\n</parameter>\r\n<parameter=new>\r\nline1\r\nline2\r\n</parameter>\r\n<parameter=dry_run>\r\ntrue\r\n</parameter>\r\n</function>\r\n</tool_call>",
            msg("Editing.", vec![("edit", json!({"path": "a.rs", "new": "line1\r\nline2", "dry_run": true}))]),
            Some(msg("Editing.", vec![("edit", json!({"path": "\r\na.rs\r", "new": "\r\nline1\r\nline2\r", "dry_run": false}))])),
        ),
        // --- `</parameter>` inside a value.
        case(
            "closing_tag_inside_value",
            &call_text("edit", &[("new", "a </parameter> b"), ("path", "p")]),
            msg("", vec![("edit", json!({"new": "a </parameter> b", "path": "p"}))]),
            Some(msg("", vec![("edit", json!({"new": "a ", "path": "p"}))])),
        ),
        // --- Incomplete or broken calls are content.
        case(
            "truncated_call_is_content",
            "Reading.\n<tool_call>\n<function=read>\n<parameter=path>\na.rs\n</parameter>\n",
            msg("Reading.\n<tool_call>\n<function=read>\n<parameter=path>\na.rs\n</parameter>", vec![]),
            Some(msg("Reading.", vec![("read", json!({"path": "a.rs"}))])),
        ),
        case(
            "stray_text_between_parameters",
            "<tool_call>\n<function=read>\n<parameter=path>\na.rs\n</parameter>\noops\n</function>\n</tool_call>",
            msg("<tool_call>\n<function=read>\n<parameter=path>\na.rs\n</parameter>\noops\n</function>\n</tool_call>", vec![]),
            Some(msg("", vec![("read", json!({"path": "a.rs"}))])),
        ),
        // --- Values: newlines, empties, duplicates.
        case(
            "one_newline_stripped_each_side",
            &call_text("edit", &[("new", "\n\n  x\n\n"), ("old", ""), ("path", "p")]),
            msg("", vec![("edit", json!({"new": "\n\n  x\n\n", "old": "", "path": "p"}))]),
            None,
        ),
        case(
            "value_without_newlines_and_duplicate_parameter",
            "<tool_call>\n<function=read>\n<parameter=path>a.rs</parameter>\n<parameter=offset>1</parameter>\n<parameter=path>b.rs</parameter>\n</function>\n</tool_call>",
            msg("", vec![("read", json!({"path": "b.rs", "offset": 1}))]),
            None,
        ),
    ]
}

/// (name, arguments) of each call.
type Calls = Vec<(String, Value)>;

/// Run the reference on every case: (content, [(name, arguments)]).
fn official(cases: &[Case]) -> Vec<(Option<String>, Calls)> {
    official_with(cases, &tools())
}

fn official_with(cases: &[Case], tools: &[Value]) -> Vec<(Option<String>, Calls)> {
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/qwen3coder_reference.py");
    let mut child = Command::new(redlite_testkit::python())
        .arg(&script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python starts (set REDLITE_PYTHON)");
    let req = json!({"cases": cases.iter().map(|c| json!({"text": c.text, "tools": tools})).collect::<Vec<_>>()});
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(req.to_string().as_bytes())
        .expect("write to python");
    let out = child.wait_with_output().expect("python runs");
    assert!(
        out.status.success(),
        "reference failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Vec<Value> = serde_json::from_slice(&out.stdout).expect("reference JSON");
    assert_eq!(v.len(), cases.len());
    v.into_iter()
        .map(|r| {
            let content = r["content"].as_str().map(str::to_string);
            let calls = r["calls"]
                .as_array()
                .expect("calls")
                .iter()
                .map(|c| {
                    let args = c["arguments"].as_str().expect("arguments text");
                    (
                        c["name"].as_str().expect("name").to_string(),
                        serde_json::from_str(args).expect("arguments JSON"),
                    )
                })
                .collect();
            (content, calls)
        })
        .collect()
}

fn opts() -> ParserOptions {
    ParserOptions {
        id_prefix: Some("c".into()),
        ..ParserOptions::default()
    }
}

/// Concatenate deltas, checking that each call starts once, in order, and
/// gets its fragments before the next one starts.
fn assemble(deltas: &[Delta]) -> ParsedMessage {
    let mut m = ParsedMessage::default();
    for d in deltas {
        match d {
            Delta::Content(s) => {
                assert!(!s.is_empty(), "empty content delta");
                m.content.push_str(s)
            }
            Delta::Reasoning(s) => {
                assert!(!s.is_empty(), "empty reasoning delta");
                m.reasoning_content.push_str(s)
            }
            Delta::ToolCallStart { index, id, name } => {
                assert_eq!(*index, m.tool_calls.len(), "call index repeated or skipped");
                m.tool_calls.push(ToolCall {
                    id: id.clone(),
                    name: name.clone(),
                    arguments: String::new(),
                });
            }
            Delta::ToolCallArguments { index, fragment } => {
                assert_eq!(*index + 1, m.tool_calls.len(), "fragment for an older call");
                m.tool_calls[*index].arguments.push_str(fragment);
            }
        }
    }
    m
}

/// Feed `text` cut at `cuts`; returns the message after checking the deltas.
fn stream(text: &str, cuts: &[usize]) -> ParsedMessage {
    let mut p = ToolCallParser::new(&tools(), opts());
    let mut deltas = Vec::new();
    let mut last = 0;
    for &c in cuts.iter().chain(std::iter::once(&text.len())) {
        deltas.extend(p.push(&text[last..c]));
        last = c;
    }
    deltas.extend(p.finish());
    let m = p.into_message();
    assert_eq!(
        assemble(&deltas),
        m,
        "deltas do not concatenate to the message"
    );
    m
}

fn calls_of(m: &ParsedMessage) -> Calls {
    m.tool_calls
        .iter()
        .map(|c| {
            let v: Value = serde_json::from_str(&c.arguments).expect("arguments are JSON");
            // Compact JSON, parameter order kept.
            assert_eq!(c.arguments, serde_json::to_string(&v).expect("json"));
            (c.name.clone(), v)
        })
        .collect()
}

fn owned(calls: &[(&str, Value)]) -> Calls {
    calls
        .iter()
        .map(|(n, v)| (n.to_string(), v.clone()))
        .collect()
}

#[test]
fn matches_the_official_parser_or_the_documented_deviation() {
    let cases = cases();
    let reference = official(&cases);
    for (c, (ref_content, ref_calls)) in cases.iter().zip(reference) {
        let ours = ToolCallParser::parse_complete(&c.text, &tools(), opts());
        assert_eq!(ours.content, c.ours.content, "{}: content", c.name);
        assert_eq!(calls_of(&ours), owned(&c.ours.calls), "{}: calls", c.name);
        let want = c.official.as_ref().unwrap_or(&c.ours);
        assert_eq!(
            ref_content.as_deref().unwrap_or("").trim(),
            want.content,
            "{}: official content",
            c.name
        );
        assert_eq!(ref_calls, owned(&want.calls), "{}: official calls", c.name);
        if c.official.is_some() {
            assert!(
                (ref_content.as_deref().unwrap_or("").trim(), &ref_calls)
                    != (ours.content.as_str(), &calls_of(&ours)),
                "{}: listed as a deviation but the official parser agrees",
                c.name
            );
        }
    }
}

#[test]
fn every_case_streams_to_the_same_message() {
    for c in cases() {
        let whole = stream(&c.text, &[]);
        let all: Vec<usize> = c.text.char_indices().map(|(i, _)| i).skip(1).collect();
        assert_eq!(stream(&c.text, &all), whole, "{}: char by char", c.name);
        for &k in &all {
            assert_eq!(stream(&c.text, &[k]), whole, "{}: split at {k}", c.name);
        }
    }
}

const BIG: &str = "123456789012345678901234567890";

/// Every value under every kind of schema type, converted by this parser and
/// by the official one: equal, except the documented deviations.
#[test]
fn value_conversion_matches_the_official_parser() {
    let kinds: &[(&str, Value)] = &[
        ("string", json!({"type": "string"})),
        ("integer", json!({"type": "integer"})),
        ("number", json!({"type": "number"})),
        ("boolean", json!({"type": "boolean"})),
        ("object", json!({"type": "object"})),
        ("array", json!({"type": "array"})),
        ("other", json!({"type": "double"})),
        ("untyped", json!({"description": "no type"})),
    ];
    let values = [
        "0",
        "1",
        "-1",
        "-0",
        "007",
        "+5",
        " 42 ",
        "1_000",
        "1__0",
        "_1",
        "1.5",
        "1.0",
        "-0.0",
        "1e3",
        "1E-2",
        ".5",
        "5.",
        "1_0.2_5",
        "0x1F",
        "0o17",
        "0b11",
        "abc",
        "",
        "true",
        "True",
        "TRUE",
        "false",
        "False",
        "None",
        "none",
        "null",
        "NULL",
        "nan",
        "[1, 2]",
        "[1, 2,]",
        "(1, 2)",
        "(1,)",
        "()",
        "(1)",
        "{'a': 1}",
        "{\"a\": 1}",
        "{1: 'x', True: 2, None: 3}",
        "{'a': -1.5e3}",
        "[1, 'two', None, True, 3.25, [4]]",
        "'single'",
        "\"double\"",
        "r'raw\\n'",
        "'esc\\t\\x41\\u00e9\\101\\q'",
        "'''tri'ple'''",
        "'a' \"b\"",
        "[-(1)]",
        "--1",
        "- 1",
        "[1, 2",
        "{'a': }",
        "1 2",
        "[\n1,\n2\n]",
        "[\"a\", {\"b\": null}]",
        "{\"a\": 1, \"a\": 2}",
        "[[[[[]]]]]",
        "'\\N{BULLET}'",
        "ünï",
        "12345678901234567890",
        BIG,
        "[-0, -0.0]",
        "-0",
        "{0: 'a', False: 'b', 'k': 1, 'k': 2}",
        " true ",
        "yes",
    ];
    let mut props = serde_json::Map::new();
    for (k, schema) in kinds {
        props.insert(format!("p_{k}"), schema.clone());
    }
    let tools = vec![json!({"type": "function", "function": {"name": "sweep",
        "parameters": {"type": "object", "properties": props}}})];
    let mut cases = Vec::new();
    for (k, _) in kinds.iter().chain(&[("undeclared", json!(null))]) {
        for v in values {
            cases.push((
                k.to_string(),
                v,
                call_text("sweep", &[(&format!("p_{k}"), v)]),
            ));
        }
    }
    let req: Vec<Case> = cases
        .iter()
        .map(|(_, _, text)| case("sweep", text, msg("", vec![]), None))
        .collect();
    let reference = official_with(&req, &tools);
    let mut compared = 0;
    let mut wrong = Vec::new();
    for ((kind, v, text), (ref_content, ref_calls)) in cases.iter().zip(reference) {
        let ours = ToolCallParser::parse_complete(text, &tools, opts());
        let ours = calls_of(&ours);
        assert_eq!(ours.len(), 1, "{kind} {v:?}: one call");
        let got = &ours[0].1[&format!("p_{kind}")];
        let lower = v.to_lowercase();
        let deviation = match kind.as_str() {
            // `null` stays a string for string types.
            "string" => lower == "null",
            // Booleans: `1`/`0`, else the raw string (the official parser
            // gives false for anything but `true`).
            "boolean" => !matches!(lower.as_str(), "true" | "false" | "null" | "0"),
            // Beyond 64 bits an integer stays a string (a Python literal
            // in an object or array parses as JSON, to a float, on both
            // sides here).
            "integer" | "other" if *v == BIG => true,
            // `\N{…}` escapes are not read: the raw string stays.
            "object" | "array" | "other" => v.contains("\\N{"),
            _ => false,
        };
        if ref_calls.is_empty() {
            // The official parser failed on the whole message (a value
            // `json.dumps` cannot write): this parser keeps the raw string.
            assert_eq!(ref_content.as_deref(), Some(text.as_str()), "{kind} {v:?}");
            assert_eq!(got, &json!(v), "{kind} {v:?}: raw string kept");
            continue;
        }
        let want = &ref_calls[0].1[&format!("p_{kind}")];
        if deviation == (got == want) {
            wrong.push(format!(
                "{kind} {v:?}: ours {got}, official {want}{}",
                if deviation {
                    " (listed as a deviation)"
                } else {
                    ""
                }
            ));
        }
        compared += usize::from(!deviation);
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    assert!(compared > 400, "only {compared} values compared");
}
