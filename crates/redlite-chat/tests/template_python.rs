//! Python-compatibility of the template engine, checked live against Python
//! Jinja2 configured like transformers (`tests/py/make_template_golden.py
//! --render`): tojson options, Python `str()` of values, pycompat methods,
//! loop controls and adjacent items, tests, `raise_exception`, the
//! built-in ChatML fallback, and Python semantics of the operators.

use std::io::Write;
use std::process::{Command, Stdio};

use redlite_chat::template::{ChatTemplate, TemplateError, CHATML_TEMPLATE};
use serde_json::{json, Map, Value};

/// One rendering by Python Jinja2: the text, or the error message and
/// whether it was a Python exception other than `TemplateError` (a
/// `TypeError` while rendering, ...).
type PyResult = Result<String, (String, bool)>;

/// Render `cases` with Python; returns Ok(text) / Err(message) per case.
fn python_render(template: &str, cases: &[Value]) -> Vec<PyResult> {
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/make_template_golden.py");
    let mut child = Command::new(redlite_testkit::python())
        .arg(&script)
        .arg("--render")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python starts");
    let req = json!({"template": template, "cases": cases, "bos": "<s>", "eos": "</s>"});
    child
        .stdin
        .take()
        .unwrap()
        .write_all(req.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "python failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    v.into_iter()
        .map(|r| match r.get("ok") {
            Some(Value::String(s)) => Ok(s.clone()),
            _ => Err((
                r["error"].as_str().unwrap_or("?").to_string(),
                r["exception"].as_bool().unwrap_or(false),
            )),
        })
        .collect()
}

/// Render a case in Rust. `messages_json` / `tools_json` (JSON text) are
/// read by `serde_json` when `via_serde` is set, else the tools text goes to
/// `render_with_tools_json`; Python reads the same text with `json.loads`.
fn rust_render(tmpl: &ChatTemplate, case: &Value) -> Result<String, TemplateError> {
    let via_serde = case["via_serde"].as_bool().unwrap_or(false);
    let parsed_messages: Option<Vec<Value>> = case
        .get("messages_json")
        .and_then(Value::as_str)
        .map(|t| serde_json::from_str(t).expect("messages_json parses"));
    let parsed_tools: Option<Vec<Value>> = match case.get("tools_json").and_then(Value::as_str) {
        Some(t) if via_serde => Some(serde_json::from_str(t).expect("tools_json parses")),
        _ => None,
    };
    let messages = match &parsed_messages {
        Some(m) => m.as_slice(),
        None => case["messages"].as_array().unwrap().as_slice(),
    };
    let tools = match &parsed_tools {
        Some(t) => Some(t.as_slice()),
        None => case
            .get("tools")
            .and_then(Value::as_array)
            .map(|t| t.as_slice()),
    };
    let extra: Map<String, Value> = case
        .get("extra")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let agp = case["add_generation_prompt"].as_bool().unwrap_or(false);
    match case.get("tools_json").and_then(Value::as_str) {
        Some(text) if !via_serde => tmpl.render_with_tools_json(messages, Some(text), agp, &extra),
        _ => tmpl.render(messages, tools, agp, &extra),
    }
}

fn compare(template: &str, cases: &[Value]) {
    let tmpl = ChatTemplate::new(template, "<s>", "</s>").expect("compiles");
    let want = python_render(template, cases);
    for (case, want) in cases.iter().zip(want) {
        let got = rust_render(&tmpl, case);
        match (&got, &want) {
            (Ok(g), Ok(w)) => assert_eq!(g, w, "case {} {}", case["name"], case["extra"]),
            (Err(TemplateError::Raised(g)), Err((w, false))) => assert_eq!(g, w),
            // Both refuse the input with an error raised while rendering.
            (Err(TemplateError::Render(_)), Err((_, true))) => {}
            _ => panic!(
                "case {} {}: rust {got:?} vs python {want:?}",
                case["name"], case["extra"]
            ),
        }
    }
}

/// Compare one template rendered with the variables of each `extra`.
fn compare_with(template: &str, extras: &[Value]) {
    let cases: Vec<Value> = extras
        .iter()
        .enumerate()
        .map(|(i, e)| json!({"name": i, "messages": [], "extra": e}))
        .collect();
    compare(template, &cases);
}

/// [`compare_with`] where Python must render every case (so that an
/// error on both sides cannot hide the other lines' differences).
fn compare_with_ok(template: &str, extras: &[Value]) {
    let cases: Vec<Value> = extras
        .iter()
        .map(|e| json!({"messages": [], "extra": e}))
        .collect();
    for r in python_render(template, &cases) {
        assert!(r.is_ok(), "python fails: {r:?}");
    }
    compare_with(template, extras);
}

/// Each expression on its own line, `|` around its output.
fn expr_template(exprs: &[&str]) -> String {
    exprs
        .iter()
        .map(|e| format!("{e}=|{{{{ {e} }}}}|"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn values_print_like_python() {
    let template = r#"{{ v }}|{{ v | string }}|{{ v | tojson }}|{{ v | tojson(indent=2) }}|{{ v | tojson(sort_keys=true, separators=(',', ':')) }}|{{ v | tojson(ensure_ascii=true) }}|{{ v is mapping }}{{ v is sequence }}{{ v is iterable }}{{ v is string }}{{ v is number }}"#;
    let values = vec![
        json!(true),
        json!(false),
        json!(null),
        json!(0),
        json!(-17),
        json!(12345678901234567890u64),
        json!(1.0),
        json!(0.1),
        json!(-2.5),
        json!(1e-7),
        json!(2.5e-5),
        json!(0.0001),
        json!(1e16),
        json!(123456789012345678.0),
        json!(1e21),
        json!(9999999999999998.0),
        json!(std::f64::consts::PI),
        json!("plain"),
        json!("it's"),
        json!("say \"hi\" it's"),
        json!("tab\tnew\nline \\ <&> é ✓ 🚀 \u{7f} \u{1}"),
        json!([]),
        json!({}),
        json!([1, "a", null, true, 2.5, [{"k": "v"}]]),
        json!({"z": 1, "a": [true, false], "m": {"x": null, "é": "ü"}, "n": 1e-7}),
    ];
    let cases: Vec<Value> = values
        .into_iter()
        .map(|v| json!({"messages": [], "extra": {"v": v}}))
        .collect();
    compare(template, &cases);
}

#[test]
fn pycompat_methods_loops_and_tests() {
    let template = r#"
{%- for m in messages %}
  {%- if m.role == 'skip' %}{% continue %}{% endif %}
  {%- if m.role == 'stop' %}{% break %}{% endif %}
  [{{ loop.index0 }} {{ m.role }} prev={{ loop.previtem.role if loop.previtem else '-' }} next={{ loop.nextitem.role if loop.nextitem else '-' }}]
  {{- m.content.strip() }}|{{ m.content.startswith(' He') }}|{{ m.content.split(',') | join(';') }}|{{ m.content.rstrip('! ').lower() }}|{{ m.content | trim | length }}
{%- endfor %}
{%- set ns = namespace(n=0) %}
{%- for k, v in extra_map.items() %}{% set ns.n = ns.n + 1 %}{{ k }}={{ v }};{% endfor %}
{{- ns.n }}|{{ extra_map.get('a') }}|{{ extra_map.get('missing', 'dflt') }}|{{ extra_map | items | list | length }}
{%- for k, v in extra_map | items %}<{{ k }}:{{ v | string }}>{% endfor %}
{{- messages[1:] | length }}|{{ (messages | last).role }}|{{ tools is none }}|{{ tools is iterable }}|{{ undefined_thing is defined }}
{%- if add_generation_prompt %}GEN {{ bos_token }}{{ eos_token }}{% endif %}
"#;
    let messages = json!([
        {"role": "user", "content": " Hello, world! "},
        {"role": "skip", "content": "x"},
        {"role": "assistant", "content": "A,B,,C"},
        {"role": "stop", "content": "y"},
        {"role": "user", "content": "never"}
    ]);
    let extra = json!({"extra_map": {"b": true, "a": 1.5, "c": [1, "two"], "d": null}});
    let cases = vec![
        json!({"messages": messages, "extra": extra, "add_generation_prompt": true}),
        json!({"messages": messages, "extra": extra, "tools": [{"name": "t"}], "add_generation_prompt": false}),
    ];
    compare(template, &cases);
}

#[test]
fn raise_exception_is_reported() {
    let template = "{% if messages[0].role != 'user' %}{{ raise_exception('Conversation must start with a user message, got ' + messages[0].role) }}{% endif %}ok";
    let cases = vec![
        json!({"messages": [{"role": "assistant", "content": "hi"}], "name": 1}),
        json!({"messages": [{"role": "user", "content": "hi"}], "name": 2}),
    ];
    compare(template, &cases);
    let tmpl = ChatTemplate::new(template, "", "").unwrap();
    let err = rust_render(&tmpl, &cases[0]).unwrap_err();
    assert!(
        matches!(&err, TemplateError::Raised(m) if m.ends_with("got assistant")),
        "{err}"
    );
}

#[test]
fn chatml_fallback_matches_python() {
    let tools = json!([{"type": "function", "function": {"name": "read", "description": "Read",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}]);
    let convo = json!([
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Read a.txt"},
        {"role": "assistant", "content": "Sure.", "tool_calls": [{"id": "c1", "type": "function",
            "function": {"name": "read", "arguments": "{\"path\": \"a.txt\"}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "hello"},
        {"role": "tool", "tool_call_id": "c2", "content": "second"},
        {"role": "assistant", "content": "It says hello."},
        {"role": "user", "content": [{"type": "text", "text": "Thanks"}]}
    ]);
    let cases = vec![
        json!({"messages": convo, "tools": tools, "add_generation_prompt": true, "name": 1}),
        json!({"messages": convo, "add_generation_prompt": true, "name": 2}),
        json!({"messages": [{"role": "user", "content": "Hi"}], "add_generation_prompt": false, "name": 3}),
    ];
    compare(CHATML_TEMPLATE, &cases);
    assert!(ChatTemplate::chatml("", "").is_fallback());
}

#[test]
fn clear_errors() {
    let tmpl = ChatTemplate::chatml("", "");
    let none = Map::new();
    let bad_role = tmpl
        .render(&[json!({"content": "x"})], None, false, &none)
        .unwrap_err();
    assert!(
        matches!(bad_role, TemplateError::InvalidMessage { index: 0, .. }),
        "{bad_role}"
    );
    let image = tmpl
        .render(&[json!({"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]})], None, false, &none)
        .unwrap_err();
    assert!(image.to_string().contains("image_url"), "{image}");
    let bad_args = tmpl
        .render(&[json!({"role": "assistant", "content": null, "tool_calls": [{"function": {"name": "f", "arguments": "{oops"}}]})], None, false, &none)
        .unwrap_err();
    assert!(bad_args.to_string().contains("tool_calls[0]"), "{bad_args}");
    let mut reserved = Map::new();
    reserved.insert("messages".into(), json!([]));
    assert!(matches!(
        tmpl.render(&[], None, false, &reserved),
        Err(TemplateError::ReservedKwarg(_))
    ));
    assert!(matches!(
        ChatTemplate::new("{% if %}", "", ""),
        Err(TemplateError::Syntax(_))
    ));
}

// ---------------------------------------------------------------------------
// Differences from Python Jinja2 found on real templates, one test each.

/// Tool-call arguments of the Qwen3-Coder template: numbers come from the
/// caller's JSON text and must print as Python prints what `json.loads`
/// made of it (1-ULP float errors and big integers turned into floats were
/// visible in the prompt).
fn qwen3_coder_template() -> String {
    let path = redlite_testkit::fixture("tokenizer/Qwen3-Coder.jinja");
    std::fs::read_to_string(&path).expect("template fixture")
}

const NUMBER_ARGS: &str = r#"{"f1": 0.1, "f2": 1e-7, "pi": 3.141592653589793, "huge": 1e300,
 "tiny": 5e-324, "max": 1.7976931348623157e308, "sum": 0.30000000000000004,
 "long": 0.1234567890123456789012345678901234567890, "hard": 2.2250738585072011e-308,
 "ulp": 9007199254740993.0, "e": 2.718281828459045235360287471352662497757,
 "small": 7.038531e-26, "tiny2": 1.2345678901234567e-300,
 "big": 123456789012345678901234567890, "neg_big": -123456789012345678901234567890,
 "beyond_u128": 1234567890123456789012345678901234567890123,
 "u64max": 18446744073709551615, "i64min": -9223372036854775808, "zero": -0.0,
 "list": [0.1, 1e-7, [123456789012345678901234567890, [2.5e-5]]],
 "obj": {"x": 1e16, "y": [1e300, -1e-300]}}"#;

fn number_tools_json() -> String {
    // Schemas with the same kinds of numbers, given as JSON text.
    r#"[{"type": "function", "function": {"name": "calc", "description": "Compute.\u001c",
      "parameters": {"type": "object", "properties": {
        "x": {"type": "number", "minimum": 0.1, "maximum": 1e300, "multipleOf": 1e-7,
              "default": 3.141592653589793, "examples": [0.30000000000000004, 123456789012345678901234567890]},
        "n": {"type": "integer", "maximum": 123456789012345678901234567890, "exclusiveMinimum": -1e-7,
              "enum": [1, 2.5, 123456789012345678901234567890]}},
      "required": ["x"], "x-limit": 98765432109876543210987654321}}}]"#
        .to_string()
}

#[test]
fn qwen3_coder_numbers_in_arguments_and_schemas() {
    let messages = json!([
        {"role": "user", "content": "compute"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "calc", "arguments": NUMBER_ARGS}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "done"}
    ]);
    let cases = vec![
        json!({"name": "args_and_schema_text", "messages": messages, "tools_json": number_tools_json(),
               "add_generation_prompt": true}),
        json!({"name": "args_only", "messages": messages, "add_generation_prompt": true}),
    ];
    compare(&qwen3_coder_template(), &cases);
}

#[test]
fn floats_parsed_by_serde_json_are_exact() {
    // Callers parse request bodies with serde_json; without its
    // `float_roundtrip` feature each of these floats lands 1 ULP off.
    let floats = "[2.2250738585072011e-308, 9007199254740993.0, 7.038531e-26, \
        2.718281828459045235360287471352662497757, 1.2345678901234567e-300, 0.1, 1e-7]";
    let tools = format!(
        r#"[{{"name": "f", "parameters": {{"type": "object", "properties": {{
        "a": {{"type": "number", "minimum": 2.2250738585072011e-308, "maximum": 9007199254740993.0,
              "default": 7.038531e-26, "examples": {floats}}}}}}}}}]"#
    );
    let messages = format!(
        r#"[{{"role": "user", "content": "x"}},
        {{"role": "assistant", "content": "", "tool_calls": [{{"type": "function",
          "function": {{"name": "f", "arguments": {{"a": 1.2345678901234567e-300, "l": {floats}}}}}}}]}}]"#
    );
    let cases = vec![
        json!({"name": "serde", "messages_json": messages, "tools_json": tools,
        "via_serde": true, "add_generation_prompt": true}),
    ];
    compare(&qwen3_coder_template(), &cases);
}

#[test]
fn qwen3_coder_strings_with_python_whitespace_and_nonprintables() {
    let odd = "\u{1c}\u{1d} lead\u{1e}\r\n mid\u{85}\u{a0}\u{2028}tail \u{1f}\r";
    let args = json!({
        "text": odd,
        "nested": [["a\u{1c}", "b'c", "d\"e", "f'g\"h"], {"k": ["\u{7f}\u{ad}\u{200b}\u{e000}", "é ✓ 🚀"]}],
        "cr": "x\ry",
        "types": [true, false, null, 1, 2.5]
    });
    let tools = json!([{"type": "function", "function": {"name": "note",
        "description": odd,
        "parameters": {"type": "object", "properties": {
            "text": {"type": ["string", "null"], "description": odd,
                     "enum": ["a\u{1c}", "\u{7f}", "it's"], "title": "x\u{1f}"},
            "flags": {"type": "array", "items": {"type": "boolean"}, "default": [true, null]}}}}}]);
    let messages = json!([
        {"role": "system", "content": odd},
        {"role": "user", "content": odd},
        {"role": "assistant", "content": odd, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "note", "arguments": args.to_string()}}]},
        {"role": "tool", "tool_call_id": "c1", "content": odd}
    ]);
    let cases = vec![
        json!({"name": "odd_strings", "messages": messages, "tools": tools,
        "add_generation_prompt": true}),
    ];
    compare(&qwen3_coder_template(), &cases);
}

#[test]
fn python_whitespace_in_strip_split_splitlines() {
    let exprs = [
        "s.strip()",
        "s.lstrip()",
        "s.rstrip()",
        "s.strip(' \\x1c')",
        "s.split()",
        "s.split(None, 1)",
        "s.split('\\x1d')",
        "s.split(' ', 2)",
        "s.rsplit()",
        "s.rsplit(None, 1)",
        "s.rsplit(' ', 1)",
        "s.splitlines()",
        "s.splitlines(True)",
        "s | trim",
        "s.isspace()",
        "w.isspace()",
        "''.isspace()",
        "w.split()",
        "w.strip() | length",
        "'a\\r\\nb\\rc\\nd\\x0be\\x0cf\\x1cg\\x1dh\\x1ei\\x1fj\\x85k\\u2028l\\u2029m'.splitlines()",
        "'x\\n'.splitlines(keepends=True)",
        "'a,b,,c'.split(',', maxsplit=1)",
        "'  a  b  '.split(sep=None)",
    ];
    let template = expr_template(&exprs);
    compare_with(
        &template,
        &[
            json!({"s": "\u{1c}\u{1d}\u{1e}\u{1f} a\u{1d}b  c\u{85}d\u{a0}e\u{3000}\r\n\u{2028}f \u{1f}", "w": "\u{1c}\u{1f}\u{85} \t"}),
            json!({"s": "", "w": ""}),
        ],
    );
}

#[test]
fn containers_print_like_python_repr() {
    let exprs = [
        "v",
        "v | string",
        "[v, (1, 2)] | length",
        "d.items() | list",
        "d.items()",
        "d.keys()",
        "d.values()",
        "d.keys() | list",
        "d.values() | length",
        "d.get('b')",
        "d | items | list",
        "(d.items() | list)[0]",
        "d | dictsort | length",
        "[s]",
        "{s: s}",
    ];
    let template = expr_template(&exprs);
    compare_with(
        &template,
        &[json!({
            "v": [1, 2.5, "a", "it's", "say \"hi\"", "both ' and \"", true, false, null,
                  [[]], {"k": [1e-7, 1e16, "\u{1c}\u{7f}\u{85}\u{a0}\u{ad}\u{200b}\u{2028}\u{e000}\u{fffe}\u{3000}"]},
                  "tab\tnl\ncr\rbs\\"],
            "d": {"a": 1, "b": [true, null], "c": {"x": "y"}},
            "s": "x\u{1}\u{1b}\u{9f}"
        })],
    );
}

#[test]
fn trim_of_non_strings() {
    let exprs = [
        "n | trim",
        "f | trim",
        "b | trim",
        "z | trim",
        "l | trim",
        "d | trim",
        "s | trim('x')",
        "s | trim",
    ];
    compare_with(
        &expr_template(&exprs),
        &[
            json!({"n": 42, "f": 2.5, "b": true, "z": null, "l": [" a ", 1], "d": {"k": " v "},
                 "s": "xx\u{1c} hi \u{1f}xx"}),
        ],
    );
}

#[test]
fn crlf_template_sources() {
    let template = "{% for m in messages %}\r\n  {%- if m.role == 'user' %}\r\nU: {{ m.content }}\r\n  {% else %}\r\nA: {{ m.content }}\r\r\n{% endif %}\r\n{% endfor %}\r\n{{ 'lit\r\nline' }}\r\n{# c\r\n #}\rend\r\n";
    let cases = vec![json!({"name": "crlf", "messages": [
        {"role": "user", "content": "hi\r\nthere"}, {"role": "assistant", "content": "ok"}]})];
    compare(template, &cases);
    compare("no newline at end\r\n\r\n", &cases);
    compare("lone cr\r", &cases);
}

#[test]
fn generation_block_renders_its_body() {
    let template = "{% for m in messages %}\n{% if m.role == 'assistant' %}\n  {% generation %}\n{{ m.content }}{% set inner = 1 %}\n  {% endgeneration %}\n{% else %}{{ m.content }}{% endif %}\n{%- generation -%}  [{{ loop.index }}]  {%- endgeneration -%}\n{% endfor %}{{ inner is defined }}{{ '{% generation %}' }}{# {% generation %} #}{% raw %}{% generation %}x{% endgeneration %}{% endraw %}";
    let cases = vec![json!({"name": "gen", "messages": [
        {"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]})];
    compare(template, &cases);
}

#[test]
fn round_filter_is_pythons_round() {
    let exprs = [
        "2.5 | round",
        "3.5 | round",
        "-2.5 | round",
        "0.125 | round(2)",
        "0.375 | round(2)",
        "2.675 | round(2)",
        "1.5 | round(0)",
        "42.55 | round(1, 'floor')",
        "42.55 | round(1, 'ceil')",
        "-42.55 | round(1, 'floor')",
        "1250.0 | round(-2)",
        "1350.0 | round(-2)",
        "1250.3 | round(-2)",
        "-1250.0 | round(-2)",
        "15 | round(-1)",
        "25 | round(-1)",
        "-25 | round(-1)",
        "7 | round",
        "7 | round(2)",
        "x | round(3)",
        "1e300 | round(2)",
        "0.5 | round",
        "(1e-7 * 3) | round(8)",
        "123.456 | round(-1, 'floor')",
        "true | round",
    ];
    compare_with(&expr_template(&exprs), &[json!({"x": 12.345_678_9})]);
}

#[test]
fn int_and_float_filters_are_jinja2s() {
    let exprs = [
        "'42' | int",
        "' 42 ' | int",
        "'3.7' | int",
        "'-3.7' | int",
        "'0x1A' | int",
        "'0x1A' | int(base=16)",
        "'1A' | int(0, 16)",
        "'0b101' | int(base=0)",
        "'0o17' | int(base=8)",
        "'1_000' | int",
        "'1__0' | int",
        "'abc' | int",
        "'abc' | int(7)",
        "'abc' | int(default=-1)",
        "'1e3' | int",
        "'inf' | int",
        "'nan' | int",
        "'' | int",
        "none | int",
        "true | int",
        "3.99 | int",
        "-3.99 | int",
        "1e20 | int",
        "1e300 | int",
        "'123456789012345678901234567890' | int",
        "[1] | int",
        "'3.7' | float",
        "' -1e-7 ' | float",
        "'1_0.5' | float",
        "'inf' | float",
        "'-Infinity' | float",
        "'nan' | float",
        "'abc' | float",
        "'abc' | float(1.5)",
        "none | float",
        "true | float",
        "3 | float",
        "'0x10' | float",
        "'.5' | float",
        "'5.' | float",
    ];
    compare_with(&expr_template(&exprs), &[json!({})]);
}

#[test]
fn find_and_count_use_character_offsets() {
    let exprs = [
        "s.find('b')",
        "s.find('✓')",
        "s.rfind('b')",
        "s.find('b', 3)",
        "s.find('b', -3)",
        "s.find('zz')",
        "s.find('')",
        "s.rfind('')",
        "s.find('', 100)",
        "s.index('✓')",
        "s.rindex('b')",
        "s.count('b')",
        "s.count('')",
        "s.count('', 2)",
        "s.count('', 2, 4)",
        "s.count('', 100)",
        "'hello'.count('')",
        "''.count('')",
        "'aaaa'.count('aa')",
        "s.count('b', 0, 3)",
        "'hello'.replace('', '-')",
        "'hello'.replace('', '-', 2)",
    ];
    compare_with(&expr_template(&exprs), &[json!({"s": "éé✓b🚀ab"})]);
}

#[test]
fn case_predicates_and_title_case() {
    let exprs = [
        "s.islower()",
        "s.isupper()",
        "s.istitle()",
        "s.title()",
        "s | title",
        "s.capitalize()",
        "s | capitalize",
        "s.upper()",
        "s | upper",
        "s.lower()",
        "s.isalpha()",
        "s.isdigit()",
        "s.isnumeric()",
        "s.isdecimal()",
        "s.isalnum()",
    ];
    let values = [
        "they're bill's friends from the UK",
        "hello-world (foo) [bar] {baz} <qux> x\u{1c}y a_b a.b",
        "éàü",
        "ÉÀÜ",
        "ǆemal ǈub",
        "ß straße",
        "ﬁne ﬂow",
        "123",
        "²³",
        "١٢٣",
        "Ⅻ",
        "abc123",
        "ǅ",
        "ΣΑΣ ΟΔΟΣ",
        "",
        "1a",
        "ª",
        "Hello World",
        "Hello world",
        "HELLO",
    ];
    let extras: Vec<Value> = values.iter().map(|v| json!({"s": v})).collect();
    compare_with(&expr_template(&exprs), &extras);
    compare_with(
        "{{ n | title }}|{{ b | upper }}|{{ l | lower }}|{{ n | capitalize }}",
        &[json!({"n": 1.5, "b": true, "l": ["A"]})],
    );
}

#[test]
fn escape_filter_uses_markupsafe_entities() {
    let exprs = [
        "s | e",
        "s | escape",
        "s | e | e",
        "n | e",
        "b | e",
        "z | e",
        "l | e",
        "(s | e) | length",
    ];
    compare_with(
        &expr_template(&exprs),
        &[
            json!({"s": "<a href=\"x\">Tom & 'Jerry'</a> / \\", "n": 1.5, "b": false, "z": null,
                 "l": ["<", "'"]}),
        ],
    );
}

#[test]
fn join_prints_items_with_python_str() {
    let exprs = [
        "l | join(',')",
        "l | join",
        "l | join(d='; ')",
        "u | join(', ', attribute='name')",
        "d | join('-')",
        "'abc' | join('.')",
    ];
    compare_with(
        &expr_template(&exprs),
        &[
            json!({"l": [1, 1.0, true, null, "s", [1, "a"], {"k": false}, 1e-7],
                 "u": [{"name": "a"}, {"name": 2.5}], "d": {"x": 1, "y": 2}}),
        ],
    );
}

// ---------------------------------------------------------------------------
// Safety: a template is untrusted input.

#[test]
fn runaway_templates_stop_with_a_clear_error() {
    let none = Map::new();
    // `count('')` once looped forever; it now answers as Python does.
    let t = ChatTemplate::new("{{ 'hello'.count('') }}", "", "").unwrap();
    let start = std::time::Instant::now();
    assert_eq!(t.render(&[], None, false, &none).unwrap(), "6");
    assert!(start.elapsed() < std::time::Duration::from_secs(1));

    // An effectively endless loop is stopped by the instruction budget.
    let t = ChatTemplate::new(
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
        "",
        "",
    )
    .unwrap();
    let start = std::time::Instant::now();
    let err = t.render(&[], None, false, &none).unwrap_err();
    let elapsed = start.elapsed();
    assert!(matches!(err, TemplateError::Limit(_)), "{err}");
    assert!(err.to_string().contains("instructions"), "{err}");
    // A hang guard, not a speed target: the budget, not the clock, stops it.
    assert!(elapsed < std::time::Duration::from_secs(20), "{elapsed:?}");

    // Huge output is refused before it is built in memory.
    let t = ChatTemplate::new(
        "{% set s = 'x' * 99000000 %}{% for i in range(1000) %}{{ s }}{% endfor %}",
        "",
        "",
    )
    .unwrap();
    let err = t.render(&[], None, false, &none).unwrap_err();
    assert!(matches!(err, TemplateError::Limit(_)), "{err}");
    assert!(err.to_string().contains("MiB"), "{err}");

    // Padding wider than the output limit is refused before allocating.
    for src in [
        "{{ 'x'.ljust(10000000000) }}",
        "{{ 'x' | center(10000000000) }}",
    ] {
        let t = ChatTemplate::new(src, "", "").unwrap();
        let err = t.render(&[], None, false, &none).unwrap_err();
        assert!(matches!(err, TemplateError::Limit(_)), "{src}: {err}");
    }

    // Unbounded recursion is refused.
    let t = ChatTemplate::new(
        "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
        "",
        "",
    )
    .unwrap();
    let err = t.render(&[], None, false, &none).unwrap_err();
    assert!(err.to_string().contains("recursion"), "{err}");

    // A value nested beyond the printing limit is an error, not a stack
    // overflow.
    let t = ChatTemplate::new(
        "{% set ns = namespace(v=[]) %}{% for i in range(5000) %}{% set ns.v = [ns.v] %}{% endfor %}{{ ns.v }}",
        "",
        "",
    )
    .unwrap();
    let err = t.render(&[], None, false, &none).unwrap_err();
    assert!(matches!(err, TemplateError::Limit(_)), "{err}");
    let t = ChatTemplate::new(
        "{% set ns = namespace(v=[]) %}{% for i in range(5000) %}{% set ns.v = [ns.v] %}{% endfor %}{{ ns.v | tojson }}",
        "",
        "",
    )
    .unwrap();
    let err = t.render(&[], None, false, &none).unwrap_err();
    assert!(matches!(err, TemplateError::Limit(_)), "{err}");
}

#[test]
fn malformed_sources_fail_to_compile_without_panicking() {
    for src in [
        "{%",
        "{%-%}",
        "{%-",
        "{%+ %}é",
        "{% raw %}é",
        "{% raw %}é{% endraw",
        "{{ 'é",
        "{{ \"é\\",
        "{% generation",
        "{% generation %}",
        "{% endgeneration %}",
        "é{%é%}é",
        "{#é",
        "\r\r\n\r{%\r%}",
    ] {
        // Compiles or reports a syntax error; either way no panic.
        if let Err(e) = ChatTemplate::new(src, "", "") {
            assert!(matches!(e, TemplateError::Syntax(_)), "{src:?}: {e}");
        }
    }
}

#[test]
fn indent_replace_and_aggregating_filters_are_jinja2s() {
    let exprs = [
        "s | indent",
        "s | indent(2, true)",
        "s | indent(first=true, blank=true)",
        "s | indent(width='> ')",
        "'a\\n\\nb' | indent",
        "'a\\n\\nb' | indent(blank=true)",
        "'' | indent",
        "s | replace('l', 'L', 2)",
        "s | replace('l', 'L')",
        "n | replace('7', 'x')",
        "d | dictsort",
        "d | dictsort(true)",
        "d | dictsort(reverse=true)",
        "{'b': 2, 'a': 1} | dictsort(by='value')",
        "(d | dictsort)[0]",
        "w | min",
        "w | max",
        "w | min(case_sensitive=true)",
        "u | min(attribute='v')",
        "u | max(attribute='name')",
        "[] | min",
        "l | sum",
        "l | sum(start=10)",
        "[0.1, 0.2, 1] | sum",
        "[true, 2] | sum",
        "u | sum(attribute='v')",
        "u | groupby('name')",
        "u | groupby('name') | map(attribute='grouper') | list",
        "u | groupby('v') | list",
        "[{'k': 'A'}, {'k': 'a'}, {'k': 'B'}] | groupby('k') | list",
        "[{'k': 'A'}, {'k': 'a'}] | groupby('k', case_sensitive=true) | list",
        "u | groupby('missing', default='zz') | list",
    ];
    let mut template = expr_template(&exprs);
    template.push_str(
        "\n{% for g in u | groupby('name') %}{{ g.grouper }}:{{ g.list | length }};{% endfor %}",
    );
    template.push_str(
        "{% for key, items in u | groupby('name') %}{{ key }}={{ items[0].v }};{% endfor %}",
    );
    compare_with(
        &template,
        &[
            json!({"s": "  Hello, World!\tx\u{1c}y\n second line\r\nthird  ", "n": -7,
            "l": [3, 1, 2, 1], "w": ["b", "a", "C"], "d": {"b": 1, "a": 2, "C": 3},
            "u": [{"name": "x", "v": 2}, {"name": "y", "v": 1}, {"name": "x", "v": 3}]}),
        ],
    );
}

#[test]
fn more_python_str_methods_and_text_filters() {
    let exprs = [
        "'abc'.ljust(6, '*')",
        "'abc'.rjust(6)",
        "'abc'.center(6, '*')",
        "'abc'.center(8, '*')",
        "'ab'.center(5, '*')",
        "'ab'.center(7, '*')",
        "'éé'.center(5)",
        "'-42'.zfill(6)",
        "'42'.zfill(5)",
        "'a,b,c'.partition(',')",
        "'a,b,c'.rpartition(',')",
        "'abc'.partition('x')",
        "'abc'.rpartition('x')",
        "'Straße ΣΑΣ'.swapcase()",
        "'Straße'.casefold()",
        "'abc'.removeprefix('a')",
        "'abc'.removesuffix('c')",
        "'a\\tbc\\td\\n\\tx'.expandtabs()",
        "'a\\tbc'.expandtabs(4)",
        "'a\\tbc'.expandtabs(tabsize=2)",
        "s | center(50)",
        "'ab' | center(7)",
        "'a_b c1 é, x-y' | wordcount",
        "s | truncate(12)",
        "s | truncate(12, true)",
        "s | truncate(12, end='…')",
        "'short' | truncate(3, leeway=0)",
        "'hello world foo' | truncate(9, leeway=0)",
    ];
    compare_with(
        &expr_template(&exprs),
        &[json!({"s": "  Hello, World! they're\tx\u{1c}y\n second line\r\nthird  "})],
    );
}

#[test]
fn random_template_fragments_never_panic() {
    use rand::{Rng, SeedableRng};
    // Sources assembled from Jinja fragments: whatever compiles renders to
    // text or to an error, never a panic, and within the instruction budget.
    const FRAGMENTS: &[&str] = &[
        "{%",
        "%}",
        "{%-",
        "-%}",
        "{{",
        "}}",
        "{#",
        "#}",
        " generation ",
        " endgeneration ",
        " raw ",
        " endraw ",
        "'",
        "\"",
        "\\",
        "\r",
        "\n",
        "\r\n",
        "é",
        "x",
        " ",
        " if ",
        " for ",
        " in ",
        " endif ",
        " endfor ",
        "(",
        ")",
        ",",
        "|",
        "trim",
        "[",
        "]",
        "1",
        "-1",
        ".",
        "count('')",
        "ljust(3)",
        "split()",
        "splitlines()",
        "messages",
        "m",
        "m.content",
        "items()",
        "title",
        "round(1)",
        "int",
        "e",
        "tojson",
        "~",
        "+",
        "*",
        "%",
        "range(3)",
        "**",
        "//",
        "/",
        "-",
        "'%s'",
        "'%(a)5.2f %'",
        "0",
    ];
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x7e3a);
    let messages = [
        json!({"role": "user", "content": " a\u{1c}b\r\n"}),
        json!({"role": "assistant", "content": "c", "tool_calls": [{"function": {"name": "f",
            "arguments": "{\"x\": 123456789012345678901234567890, \"y\": [0.1]}"}}]}),
    ];
    let none = Map::new();
    let mut compiled = 0;
    for _ in 0..20000 {
        let n = rng.gen_range(1..24);
        let src: String = (0..n)
            .map(|_| FRAGMENTS[rng.gen_range(0..FRAGMENTS.len())])
            .collect();
        if let Ok(t) = ChatTemplate::new(&src, "<s>", "</s>") {
            compiled += 1;
            let _ = t.render(&messages, None, true, &none);
        }
    }
    assert!(compiled > 1000, "only {compiled} sources compiled");
}

#[test]
fn undefined_values_behave_as_in_jinja2() {
    compare_with(
        &expr_template(&[
            "undefined_var | length",
            "undefined_var | count",
            "d.missing | length",
            "s | length",
            "l | length",
            "d | length",
            "undefined_var | trim",
            "undefined_var | join(',')",
            "undefined_var | items | list",
            "undefined_var | default('d')",
            "l[5] is defined",
        ]),
        &[json!({"s": "é✓🚀", "l": [1, 2], "d": {"a": 1}})],
    );
    // json.dumps refuses Undefined, and so does tojson; len(None) fails.
    for src in [
        "{{ undefined_var | tojson }}",
        "{{ d.missing | tojson }}",
        "{{ z | length }}",
        "{{ 5 | length }}",
    ] {
        compare_with(src, &[json!({"d": {"a": 1}, "z": null})]);
    }
}

#[test]
fn exact_json_reader_matches_json_loads() {
    // Tools given as JSON text print as Python prints json.loads' result.
    let text = r#" [ {"name": "t", "dup": 1, "x": [1, -0, 0.0, -0.0, 1E5, 1e-5, 2E+3, 10.50,
        -123456789012345678901234567890, 340282366920938463463374607431768211456,
        -170141183460469231731687303715884105729, 18446744073709551616, NaN, Infinity,
        -Infinity, 1e400, true, false, null, [], {}, [[[]]]],
        "s": "\u00e9\ud83d\ude80\/\b\f\n\r\t\"\\ \u0000\u001c é", "dup": {"a": 2, "a": 3},
        "order": {"z": 1, "a": 2, "m": 3}} ]
    "#;
    let cases = vec![json!({"name": "json", "messages": [], "tools_json": text})];
    compare(
        "{{ tools }}|{{ tools[0].x | length }}|{{ tools | tojson }}|{{ tools[0].x[5] is number }}",
        &cases,
    );
    // What json.loads rejects is rejected with a clear error.
    let tmpl = ChatTemplate::chatml("", "");
    let none = Map::new();
    for bad in [
        "[1,]",
        "{\"a\": 1,}",
        "[01]",
        "[1.]",
        "[.5]",
        "[+1]",
        "['a']",
        "[\"a\tb\"]",
        "[1] x",
        "",
        "[\"\\x\"]",
    ] {
        let err = tmpl
            .render_with_tools_json(&[], Some(bad), false, &none)
            .unwrap_err();
        assert!(matches!(err, TemplateError::ToolsJson(_)), "{bad:?}: {err}");
    }
    let deep = format!("[{}{}]", "[".repeat(200), "]".repeat(200));
    assert!(matches!(
        tmpl.render_with_tools_json(&[], Some(&deep), false, &none),
        Err(TemplateError::ToolsJson(_))
    ));
    assert!(matches!(
        tmpl.render_with_tools_json(&[], Some("{\"a\": 1}"), false, &none),
        Err(TemplateError::ToolsJson(_))
    ));
    assert!(matches!(
        tmpl.render_with_tools_json(&[], Some("[1]"), false, &none),
        Err(TemplateError::InvalidTool { index: 0, .. })
    ));
}

#[test]
fn tuple_literals_are_python_tuples() {
    let template = r#"{{ (1, 2) }}|{{ (1,) }}|{{ () }}|{{ (1) }}|{{ ((1, 2), [3, (4,)]) }}|{{ [(1, 'a')] }}
{{- {'k': ('v', none, true)} }}|{{ (1, 2) | length }}|{{ (1, 2)[1] }}|{{ (1, 2) | tojson }}
{%- if r in ('user', 'system') %}|in{% endif %}
{%- if r not in ('x',) %}|notin{% endif %}
{%- for a, b in [(1, 2), (3, 4)] %}|{{ a }}{{ b }}{% endfor %}
{%- for (a, b) in [(5, 6)] %}|{{ a }}{{ b }}{% endfor %}
{%- set t = ('p', 'q') %}|{{ t }}|{{ t | join('-') }}
{%- set x, y = (7, 8) %}|{{ x }}{{ y }}
{%- macro m(v=(1, 2)) %}{{ v }}{% endmacro %}|{{ m() }}|{{ m((3,)) }}
|{{ s.startswith(('a', 'b')) }}|{{ s.split(',')[0] }}|{{ (s, 1) }}|{{ f(1) if f is defined else (1, 2) }}
|{{ {'a': 1} | tojson(separators=(',', ':')) }}|{{ ('a' ~ 'b', 2 * (3 + 4)) }}|{{ (2 * (3 + 4)) }}"#;
    compare_with(template, &[json!({"r": "user", "s": "a,b"})]);
}

/// `nan` and `inf` as template variables (JSON has no spelling for them;
/// the condition keeps Jinja2 from folding them into a constant, which its
/// code generator would spell as an undefined Python name).
const NAN_INF: &str = "{% set nan = ('nan' if messages is defined) | float %}\
    {% set inf = ('inf' if messages is defined) | float %}";

#[test]
fn arithmetic_operators_are_pythons() {
    let exprs = [
        "-7 % 3",
        "7 % -3",
        "-7 % -3",
        "7 % 3",
        "0 % 5",
        "-7.5 % 2",
        "7.5 % -2",
        "-0.0 % 5",
        "0.0 % -5",
        "5.5 % 2.5",
        "1e300 % 7",
        "true % 2",
        "n % 4",
        "big % 97",
        "-big % 97",
        "7 // 2",
        "-7 // 2",
        "7 // -2",
        "-7.5 // 2",
        "7.5 // -2",
        "1e300 // 3",
        "5 / 2",
        "4 / 2",
        "-1 / 3",
        "0 / -5",
        "1 / 3",
        "9007199254740993 / 1",
        "big / 3",
        "big / -7",
        "170141183460469231731687303715884105727 / 3",
        "1e308 / 0.1",
        "2 ** 10",
        "2 ** -1",
        "(-2) ** -1",
        "10 ** -2",
        "2 ** 0.5",
        "2.0 ** 3",
        "0 ** 0",
        "(-1) ** 1001",
        "1 ** 100000000000000000000",
        "2 ** 62",
        "2 ** 63",
        "2 ** 64",
        "2 ** 126",
        "2 ** 127",
        "-2 ** 127",
        "(-2) ** 127",
        "2 ** 128 - 1 if false else 3 ** 80",
        "2 ** 128",
        "3 ** 81",
        "(-2) ** 129",
        "(-3) ** 333",
        "2 ** 4095",
        "-(2 ** 200)",
        "(-(2 ** 200)) | abs",
        "(2 ** 200) ~ ''",
        "(2 ** 200) | tojson",
        "'%d|%x|%o|%X|%#x|%s' % (2 ** 200, 2 ** 200, -(2 ** 200), 3 ** 100, -(3 ** 90), 5 ** 60)",
        "10 ** 38",
        "(-10) ** 38",
        "1 ** nan",
        "nan ** 0",
        "inf ** -1",
        "(-inf) ** 3",
        "0.5 ** inf",
        "2 ** -1074",
        "10.0 ** -400",
        "(-8.0) ** 3",
        "true ** 2",
        "2 ** true",
        "1e-7 ~ ''",
        "1e16 ~ '|' ~ 0.1 ~ '|' ~ 2.5e-5",
        "1 ~ 2 ~ 3",
        "none ~ true ~ false",
        "[1.5, none] ~ 'x'",
        "{'a': 1e-7} ~ ''",
        "undefined_var ~ 'u'",
        "x ~ (1, 2)",
    ];
    compare_with_ok(
        &format!("{NAN_INF}{}", expr_template(&exprs)),
        &[json!({"n": -13, "big": 12345678901234567890u64, "x": 0.1})],
    );
}

#[test]
fn operator_precedence_is_jinja2s() {
    let exprs = [
        "1 + 7 % 3 * 2",
        "2 ** 3 ** 2",
        "-2 ** 2",
        "- 2 ** 2",
        "2 * 3 ** 2",
        "-n % 4",
        "a % b ~ 'x'",
        "'x' ~ a % b",
        "1 + 2 ~ 3 if false else 0",
        "'%s' % x | upper",
        "'%s!' % s | upper",
        "('%s!' % s) | upper",
        "(a % b) if c else d",
        "a % b if c else d",
        "a % b if not c else d",
        "not a % b",
        "a % b == 1 and a ** 2 > 9",
        "a % b in [1, 2]",
        "[a % b, a ** b, a / b, a // b]",
        "{'k': a % b}",
        "(a % b, a // b)",
        "range(a % b + 1) | list",
        "[1, 2, 3][a % b]",
        "'abcdef'[a % b:a ** 2 // 3]",
        "s | replace('a', '%s' % b)",
        "s.split('b' % ())",
        "a is divisibleby 2 % 3",
        "(a % 2) is even",
        "a % 3 is odd",
        "a / b * 2",
        "a // b / 2",
        "a % b % 2",
        "a ** -1 ** 2",
        "a - -b % 5",
        "a|abs % 5",
        "-a|abs % 5",
        "a % b|string|length",
        "a % b~b % a",
        "a%b",
        "(a)%(b)",
    ];
    compare_with_ok(
        &expr_template(&exprs),
        &[json!({"a": 17, "b": 5, "c": true, "d": "dd", "n": 7, "x": "v", "s": "abc"})],
    );
}

#[test]
fn operators_inside_statements() {
    let template = r#"
{%- for m in messages %}
  {%- if loop.index0 % 2 == 0 %}[even {{ loop.index0 % 2 }}]{% else %}[odd {{ -loop.index % 3 }}]{% endif %}
  {%- set ratio = loop.index / loop.length %}{{ ratio }}|{{ (ratio * 100) // 1 }}%
{%- endfor %}
{%- for i in range(10) if i % 3 == 1 %}<{{ i }}:{{ i ** 2 % 7 }}>{% endfor %}
{%- for i in range(7 // 2) %}({{ i ~ '/' ~ i / 2 }}){% endfor %}
{%- set ns = namespace(total=0) %}{% for i in range(5) %}{% set ns.total = ns.total + i % 2 %}{% endfor %}{{ ns.total }}
{%- set a, b = 7 % -3, 2 ** -2 %}|{{ a }}|{{ b }}
{%- macro pct(v, fmt='%.1f%%') %}{{ fmt % (v * 100) }}{% endmacro %}|{{ pct(0.125) }}|{{ pct(1 / 3, '%5.2f') }}
{%- with q = 10 % 4, r = '%03d' % 7 %}|{{ q }}{{ r }}{% endwith %}
{%- set block %}{{ '%s-%s' % ('x', 'y') }}{% endset %}|{{ block }}
{%- filter replace('%', '%%' % ()) %}|50%{% endfilter %}
{%- if (messages | length) % 2 %}|odd count{% elif 1 %}|even count{% endif %}
{#- a comment with 5 % 0 #}
{%- raw %}|{{ 5 % 0 }}{% endraw %}
|{{- '%d items' % (messages | length) -}}|
"#;
    let messages = json!([
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "b"},
        {"role": "user", "content": "c"}
    ]);
    let cases = [json!({"name": "loop", "messages": messages})];
    assert!(python_render(template, &cases)[0].is_ok());
    compare(template, &cases);
}

#[test]
fn percent_formatting_is_pythons() {
    let exprs = [
        "'%s' % x",
        "'%s' % s",
        "'%r' % s",
        "'%a' % u",
        "'%s' % u",
        "'%d' % n",
        "'%i' % f",
        "'%d' % -2.9",
        "'%s and %s' % (s, n)",
        "'%s' % (s,)",
        "'%s' % l",
        "'%r' % l",
        "'%s' % d",
        "'%(k)s=%(n)05d' % d",
        "'%(k)r' % d",
        "'%05.2f' % f",
        "'%.2f|%.0f|%.0f|%.1f' % (0.125, 0.5, 2.5, 0.25)",
        "'%f|%F|%e|%E|%g|%G' % (f, f, f, f, f, f)",
        "'%e|%g|%G' % (1e-10, 1e-10, 1e-10)",
        "'%g|%g|%g|%g|%g' % (100000, 1000000, 0.0001, 0.00001, 123.456)",
        "'%.3g|%#.3g|%#g|%.0g|%#.0f|%#.0e|%.0e' % (0.0001234, 1, 1.5, 0.5, 3, 12345, 12345)",
        "'%g|%g|%f|%d' % (0.0, -0.0, -0.0, -0.0)",
        "'%10.4g|%-10.4g|%+.3e|% f' % (3.14159, -3.14159, 1234.5, 2)",
        "'%.20e|%.17g|%.30f' % (0.1, 0.1, 0.1)",
        "'%f' % 1e300",
        "'%010.3e|%05f|%05.1f|%+f|%F' % (-1234.5, inf, -inf, nan, inf)",
        "'%x|%X|%o|%#x|%#X|%#o' % (255, 255, 8, 255, 255, 8)",
        "'%#08x|%#.5x|%-#8x|%08x' % (255, -255, 255, -255)",
        "'%#x|%#o|%#.3x' % (0, 0, 0)",
        "'%5d|%-5d|%05d|%+d|% d|% 05d|%+05d|%-05d|' % (42, 42, 42, 42, 42, 42, -42, -3)",
        "'%.3d|%.0d|%.d|%5.3d' % (7, 0, 0, -7)",
        "'%d|%x|%s' % (true, true, true)",
        "'%d' % big",
        "'%d' % 1e300",
        "'%s' % big",
        "'%x' % 340282366920938463463374607431768211455",
        "'%c%c%c' % (72, 'i', 0x1F680)",
        "'%5s|%-5s|%.1s|%5.1s|%.3s' % ('abc', 'abc', 'abc', 'abc', u)",
        "'%05s|%-05s' % ('ab', 'ab')",
        "'%*d|%-*d|%.*f|%*.*f' % (5, 3, 4, 3, 2, 3.14159, 8, 3, 2.5)",
        "'%*d|' % (-4, 1)",
        "'%%|%s%%' % (1,)",
        "'%ld|%hd|%Ld|%ls' % (1, 2, 3, 'x')",
        "'100%%' % ()",
        "'no args' % ()",
        "'no args' % {}",
        "'no args' % []",
        "'no args' % d",
        "'%s' % none",
        "'%s' % undefined_var",
        "'x' % undefined_var",
        "'%(a(b))s' % {'a(b)': 2}",
        "'%s %s' % (l, d)",
        "'%s' % ((1, 2),)",
        "'%s|%r' % (1e-7, 2.5e-5)",
        "'%s' % 'it\\'s'",
        "'%r' % 'it\\'s'",
        "'%.2r' % 'abc'",
        "('%s' % s) ~ '%'",
        "'[%s]' % '%s'",
        "'%s' % '%%'",
        "'%s|%r|%s' | format(true, none, 1e-7)",
        "'%(a)s-%(b)05.1f' | format(a='x', b=2.5)",
        "'%s' | format((1, 2))",
        "'%d%%' | format(50)",
        "5 | format",
        "l | format",
    ];
    compare_with_ok(
        &format!("{NAN_INF}{}", expr_template(&exprs)),
        &[
            json!({"x": 5, "s": "abc", "u": "é✓🚀x", "n": 42, "f": 12.34567, "l": [1, "a", null],
                 "d": {"k": "key", "n": 7}, "big": 12345678901234567890u64}),
        ],
    );
}

#[test]
fn operator_errors_are_render_errors_as_in_python() {
    // Each raises in Python (ZeroDivisionError, TypeError, ValueError,
    // KeyError, OverflowError): a render error here.
    for src in [
        "5 % 0",
        "5 % 0.0",
        "5.5 % 0",
        "1 / 0",
        "1.0 / 0",
        "1 / 0.0",
        "0 / 0",
        "1 // 0",
        "1.0 // 0",
        "1 // -0.0",
        "0 ** -1",
        "0.0 ** -1",
        "0 ** -2.5",
        "10.0 ** 400",
        "(-2.0) ** 1e300",
        "'a' ** 2",
        "[1] % 2",
        "5 % 'a'",
        "none % 2",
        "2 ** none",
        "'a' / 2",
        "[1] // 2",
        "'hello' % 5",
        "'hello' % 'x'",
        "'%s %s' % (1,)",
        "'%s' % (1, 2)",
        "'%(a)s %s' % {'a': 1}",
        "'%(a)s' % (1,)",
        "'%(a)s' % {}",
        "'%(a' % {}",
        "'%' % ()",
        "'abc %' % 1",
        "'%s%' % 1",
        "'%q' % 1",
        "'%q' % ()",
        "'%5%' % 1",
        "'%-%' % ()",
        "'%l' % ()",
        "'%d' % '3'",
        "'%d' % none",
        "'%x' % 3.5",
        "'%f' % 'x'",
        "'%d' % nan",
        "'%d' % inf",
        "'%c' % 'ab'",
        "'%c' % 3.0",
        "'%c' % 1114112",
        "'%c' % -1",
        "'%*d' % ('a', 1)",
        "'%.*f' % (1.5, 2.0)",
        "'%s %s' | format(1)",
        "'%s' | format(1, 2)",
        "'%(a)s' | format(b=1)",
    ] {
        let src = format!("{NAN_INF}{{{{ {src} }}}}");
        compare_with(&src, &[json!({})]);
        let tmpl = ChatTemplate::new(&src, "", "").unwrap();
        let err = tmpl
            .render(&[], None, false, &Map::new())
            .map(|_| ())
            .unwrap_err();
        assert!(matches!(err, TemplateError::Render(_)), "{src}: {err}");
    }
    // Undefined operands fail (Jinja2 raises UndefinedError; `~` and
    // `'%s' %` print them as '', compared above).
    for src in [
        "undefined_var % 2",
        "2 ** undefined_var",
        "undefined_var / 2",
        "'%d' % undefined_var",
        "'%(a)s' % undefined_var",
        // Jinja2 raises FilterArgumentError.
        "'%s' | format(1, a=2)",
    ] {
        let tmpl = ChatTemplate::new(&format!("{{{{ {src} }}}}"), "", "").unwrap();
        assert!(tmpl.render(&[], None, false, &Map::new()).is_err(), "{src}");
    }
}

#[test]
fn operator_results_beyond_128_bits_and_huge_formats_fail_clearly() {
    let none = Map::new();
    for (src, want) in [
        ("{{ 2 ** 4096 }}", "more than 4096 bits"),
        ("{{ 7 ** 100000000000 }}", "more than 4096 bits"),
        ("{{ (2 ** 200) % 7 }}", "beyond 128 bits"),
        ("{{ big % 7 }}", "beyond 128 bits"),
        ("{{ big // 7 }}", "beyond 128 bits"),
        ("{{ big / 7 }}", "beyond 128 bits"),
        ("{{ big ** 2 }}", "beyond 128 bits"),
        ("{{ '%x' % big }}", "e2c11a6cbf95b300962bfd56515a64244cb"),
        ("{{ (-8) ** (1 / 3) }}", "complex"),
    ] {
        let mut extra = Map::new();
        extra.insert("big".into(), json!(1));
        let tmpl = ChatTemplate::new(src, "", "").unwrap();
        let tools = r#"[{"n": 1234567890123456789012345678901234567890123}]"#;
        let src2 = src.replace("big", "tools[0].n");
        let tmpl2 = ChatTemplate::new(&src2, "", "").unwrap();
        let got = if src.contains("big") {
            tmpl2.render_with_tools_json(&[], Some(tools), false, &none)
        } else {
            tmpl.render(&[], None, false, &extra)
        };
        match got {
            Ok(text) => assert_eq!(text, want, "{src}"),
            Err(e) => assert!(e.to_string().contains(want), "{src}: {e}"),
        }
    }
    // `%x` of an integer beyond 128 bits (the value checked with Python's
    // `'%x' % 1234567890123456789012345678901234567890123`) works above.
    // Widths and precisions are bounded.
    let tmpl = ChatTemplate::new("{{ '%99999999d' % 1 }}", "", "").unwrap();
    assert!(matches!(
        tmpl.render(&[], None, false, &none),
        Err(TemplateError::Limit(_))
    ));
    // A string doubled with `~` stops at the output limit.
    let tmpl = ChatTemplate::new(
        "{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s | length }}",
        "",
        "",
    )
    .unwrap();
    assert!(matches!(
        tmpl.render(&[], None, false, &none),
        Err(TemplateError::Limit(_))
    ));
}

#[test]
fn operator_idioms_of_published_templates() {
    let template = r#"
{%- for message in messages %}
  {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}
    {{- raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}
  {%- endif %}
  {{- '[' ~ loop.index ~ '/' ~ loop.length ~ '] ' ~ message.content | trim ~ '\n' }}
  {%- if loop.index0 % 2 == 1 and not loop.last %}{{ '---\n' }}{% endif %}
{%- endfor %}
{{- (messages | length / 2) | round(0, 'floor') | int }}|{{ messages | map(attribute='content') | join(', ' ~ '') }}
|{{ ((messages | length) * 100 / 7) | round(2) }}%|{{ '%.1f%%' % (100 * 2 / 3) }}|{{ messages[1:] | length ~ 'x' }}
|{{ 'ab' ~ 'cd' | length }}|{{ ('ab' ~ 'cd') | length }}|{{ messages | length is divisibleby 2 }}
|{{ -(messages | length) | abs }}|{{ -(messages | length) % 4 }}|{{ [1, 2, 3][-1 % 3] }}|{{ {'k': 7 // 2}['k'] ** 2 }}
"#;
    let ok = json!([
        {"role": "user", "content": " hi "},
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "bye"}
    ]);
    let bad = json!([
        {"role": "user", "content": "a"},
        {"role": "user", "content": "b"}
    ]);
    let cases = [
        json!({"name": "alternating", "messages": ok}),
        json!({"name": "not_alternating", "messages": bad}),
    ];
    let r = python_render(template, &cases);
    assert!(r[0].is_ok(), "{:?}", r[0]);
    compare(template, &cases);
}

/// A random arithmetic expression of small numbers (depth-bounded, so
/// that integer results stay within 128 bits).
fn random_arith(rng: &mut rand::rngs::StdRng, depth: u32) -> String {
    use rand::Rng;
    const ATOMS: &[&str] = &[
        "0", "1", "2", "3", "7", "-7", "13", "0.5", "-2.5", "1.5", "3.0", "1e-7", "x", "y", "true",
    ];
    const EXPONENTS: &[&str] = &["0", "1", "2", "3", "-1", "-2", "2.0", "(-2)", "-1.0"];
    if depth == 0 || rng.gen_range(0..4) == 0 {
        return ATOMS[rng.gen_range(0..ATOMS.len())].to_string();
    }
    let a = random_arith(rng, depth - 1);
    match rng.gen_range(0..11) {
        0 => format!("{a} + {}", random_arith(rng, depth - 1)),
        1 => format!("{a} - {}", random_arith(rng, depth - 1)),
        2 => format!("{a} * {}", random_arith(rng, depth - 1)),
        3 => format!("{a} / {}", random_arith(rng, depth - 1)),
        4 => format!("{a} // {}", random_arith(rng, depth - 1)),
        5 | 6 => format!("{a} % {}", random_arith(rng, depth - 1)),
        7 => format!("{a} ** {}", EXPONENTS[rng.gen_range(0..EXPONENTS.len())]),
        8 => format!("-{a}"),
        9 => format!("({a})"),
        _ => format!("({a}) | abs"),
    }
}

#[test]
fn random_arithmetic_matches_python() {
    use rand::SeedableRng;
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x0b5e);
    let mut rendered = 0;
    for _ in 0..80 {
        // One expression per template, so that an error in one (a zero
        // divisor) does not hide the others; several cases per template.
        let expr = random_arith(&mut rng, 3);
        let template =
            format!("{{{{ {expr} }}}}|{{{{ ({expr}) ~ '' }}}}|{{{{ '%r|%s' % ({expr}, -x) }}}}");
        let extras = [json!({"x": 5, "y": -3}), json!({"x": 0.25, "y": 4})];
        let cases: Vec<Value> = extras
            .iter()
            .map(|e| json!({"messages": [], "extra": e}))
            .collect();
        rendered += python_render(&template, &cases)
            .iter()
            .filter(|r| r.is_ok())
            .count();
        compare_with(&template, &extras);
    }
    assert!(rendered > 60, "only {rendered} renderings succeeded");
}

#[test]
fn random_percent_formats_match_python() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x9e7c);
    let values = [
        json!(0),
        json!(1),
        json!(-1),
        json!(255),
        json!(-255),
        json!(65),
        json!(12345678901234567890u64),
        json!(-9223372036854775808i64),
        json!(12.34567),
        json!(-0.0),
        json!(1e-7),
        json!(1e22),
        json!(123456.789),
        json!(-2.5),
        json!(0.5),
        json!(9.995),
        json!(1.5e300),
        json!(true),
        json!(null),
        json!("abc"),
        json!("é"),
        json!([1, "a"]),
        json!({"k": 1}),
    ];
    const CONVERSIONS: &[char] = &[
        's', 'r', 'a', 'd', 'i', 'u', 'o', 'x', 'X', 'e', 'E', 'f', 'F', 'g', 'G', 'c', '%',
    ];
    let mut cases = Vec::new();
    for i in 0..3000 {
        let mut f = String::from("<%");
        for flag in ['-', '+', ' ', '#', '0'] {
            if rng.gen_range(0..4) == 0 {
                f.push(flag);
            }
        }
        if rng.gen_range(0..2) == 0 {
            f.push_str(&rng.gen_range(0..14).to_string());
        }
        if rng.gen_range(0..2) == 0 {
            f.push('.');
            if rng.gen_range(0..5) > 0 {
                f.push_str(&rng.gen_range(0..12).to_string());
            }
        }
        f.push(CONVERSIONS[rng.gen_range(0..CONVERSIONS.len())]);
        f.push('>');
        let v = values[rng.gen_range(0..values.len())].clone();
        cases.push(json!({"name": i, "messages": [], "extra": {"f": f, "v": v}}));
    }
    let template = "{{ f % (v,) }}|{{ f | format(v) }}";
    let ok = python_render(template, &cases)
        .iter()
        .filter(|r| r.is_ok())
        .count();
    assert!(ok > 1500, "only {ok} formats succeeded in Python");
    compare(template, &cases);
}

/// Every operation that can build a large value checks the size of its
/// result before allocating it: each of these would otherwise ask for
/// gigabytes (and abort the process when the allocation fails).
#[test]
fn values_beyond_the_budget_are_refused_before_they_are_built() {
    let none = Map::new();
    let cases = [
        // String repetition fed to `replace` (filter and method).
        "{{ ('x' * 1000000) | replace('x', 'y' * 100) }}",
        "{{ ('x' * 1000000).replace('x', 'y' * 100) }}",
        "{{ ('x' * 1000).replace('', 'y' * 100000) }}",
        // A list multiplied and joined (filter and method).
        "{{ (['x' * 1000] * 1000000) | join }}",
        "{{ ','.join(['x' * 1000] * 1000000) }}",
        "{{ ['a', 'b', 'c'] | join('x' * 34000000) }}",
        // tojson with a huge indent, or a huge nesting times a large indent.
        "{{ [1] | tojson(indent=10000000000) }}",
        "{{ [[[[1]]]] | tojson(indent='x' * 30000000) }}",
        "{{ [1, 2, 3] | tojson(separators=('x' * 34000000, ':')) }}",
        "{{ ['x' * 34000000, 'y' * 34000000] | tojson }}",
        // `+` doubling in a loop, strings and lists.
        "{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s | length }}",
        "{% set ns = namespace(l=[1]) %}{% for i in range(40) %}{% set ns.l = ns.l + ns.l %}{% endfor %}{{ ns.l | length }}",
        // Repetition of strings and lists.
        "{{ 'x' * 100000000 }}",
        "{{ 1000000000 * 'x' }}",
        "{{ ([1] * 1000000) * 1000000 }}",
        "{{ (range(100000) | list) * 100 }}",
        // `~`, `%` and `format`.
        "{{ ('x' * 34000000) ~ ('x' * 34000000) }}",
        "{{ '%s%s' % ('x' * 34000000, 'x' * 34000000) }}",
        "{{ '%s%s' | format('x' * 34000000, 'x' * 34000000) }}",
        "{{ '{:>100000000}'.format(1) }}",
        "{{ ('{0}' * 1000).format('x' * 100000) }}",
        // Padding.
        "{{ 'x' | center(100000000) }}",
        "{{ 'x'.ljust(100000000) }}",
        "{{ 'x'.rjust(100000000) }}",
        "{{ 'x'.zfill(100000000) }}",
        // indent: every line gets the indention.
        "{{ ('\\n' * 10000) | indent('y' * 10000, blank=true) }}",
        // Lists built from a string, or by batching.
        "{{ ('x' * 3000000) | list | length }}",
        "{{ ('\\n' * 3000000).splitlines() | length }}",
        "{{ (' x' * 3000000).split() | length }}",
        "{{ [1] | batch(1000000000) | list }}",
        "{{ [1] | slice(1000000000) | list }}",
        // Printing a value larger than the output.
        "{{ ['x' * 34000000] * 2 }}",
        "{{ (['x' * 34000000] * 2) | string }}",
        "{{ (['x' * 34000000] * 2) | upper }}",
    ];
    for src in cases {
        let t = ChatTemplate::new(src, "", "").unwrap();
        let start = std::time::Instant::now();
        let err = match t.render(&[], None, false, &none) {
            Ok(out) => panic!("{src}: rendered {} bytes", out.len()),
            Err(e) => e,
        };
        assert!(matches!(err, TemplateError::Limit(_)), "{src}: {err}");
        let text = err.to_string();
        assert!(
            text.starts_with("chat template rendering stopped:") && text.contains("MiB"),
            "{src}: {text}"
        );
        assert!(text.contains("chat template line 1"), "{src}: {text}");
        assert!(
            start.elapsed() < std::time::Duration::from_secs(10),
            "{src}: {:?}",
            start.elapsed()
        );
    }

    // Just under the budget still renders, with the exact result.
    let t = ChatTemplate::new(
        "{{ (('ab' * 1000000) | replace('a', 'xyz')) | length }} {{ ((['ab'] * 1000) | join('-')) | length }} {{ ('x' * 30000000 + 'y' * 30000000) | length }} {{ '{:>5}|{}'.format(1, 'ab') }}",
        "",
        "",
    )
    .unwrap();
    assert_eq!(
        t.render(&[], None, false, &none).unwrap(),
        "4000000 2999 60000000     1|ab"
    );

    // Operand errors of `+` and `*` are minijinja's, located in the template.
    for src in ["\n{{ 'a' + 1 }}", "\n{{ 'a' * 'b' }}", "\n{{ {} * 2 }}"] {
        let t = ChatTemplate::new(src, "", "").unwrap();
        let err = t.render(&[], None, false, &none).unwrap_err().to_string();
        assert!(
            err.contains("chat_template:2") && !err.contains("<expression>"),
            "{src}: {err}"
        );
    }
}
