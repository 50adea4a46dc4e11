//! Python-compatibility of the template engine, checked live against Python
//! Jinja2 configured like transformers (`tests/py/make_template_golden.py
//! --render`): tojson options, Python `str()` of values, pycompat methods,
//! loop controls and adjacent items, tests, `raise_exception`, and the
//! built-in ChatML fallback.

use std::io::Write;
use std::process::{Command, Stdio};

use redlite_tokenizer::template::{ChatTemplate, TemplateError, CHATML_TEMPLATE};
use serde_json::{json, Map, Value};

/// Render `cases` with Python; returns Ok(text) / Err(message) per case.
fn python_render(template: &str, cases: &[Value]) -> Vec<Result<String, String>> {
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
            _ => Err(r["error"].as_str().unwrap_or("?").to_string()),
        })
        .collect()
}

fn rust_render(tmpl: &ChatTemplate, case: &Value) -> Result<String, TemplateError> {
    let messages = case["messages"].as_array().unwrap();
    let tools = case
        .get("tools")
        .and_then(Value::as_array)
        .map(|t| t.as_slice());
    let extra: Map<String, Value> = case
        .get("extra")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    tmpl.render(
        messages,
        tools,
        case["add_generation_prompt"].as_bool().unwrap_or(false),
        &extra,
    )
}

fn compare(template: &str, cases: &[Value]) {
    let tmpl = ChatTemplate::new(template, "<s>", "</s>").expect("compiles");
    let want = python_render(template, cases);
    for (case, want) in cases.iter().zip(want) {
        let got = rust_render(&tmpl, case);
        match (&got, &want) {
            (Ok(g), Ok(w)) => assert_eq!(g, w, "case {} {}", case["name"], case["extra"]),
            (Err(TemplateError::Raised(g)), Err(w)) => assert_eq!(g, w),
            _ => panic!(
                "case {} {}: rust {got:?} vs python {want:?}",
                case["name"], case["extra"]
            ),
        }
    }
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
