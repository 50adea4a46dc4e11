//! Second code path for the tool-call parser: assistant tool calls rendered by
//! the Qwen3-Coder chat template (as the model sees them in its history) must
//! parse back to the same names and argument values, whole and streamed.

use redlite_chat::template::ChatTemplate;
use redlite_chat::toolcall::{Delta, ParserOptions, ToolCallParser};
use serde_json::{json, Map, Value};

#[test]
fn rendered_calls_parse_back_to_the_same_arguments() {
    let source =
        std::fs::read_to_string(redlite_testkit::fixture("tokenizer/Qwen3-Coder.jinja")).unwrap();
    let tmpl = ChatTemplate::new(&source, "", "<|im_end|>").unwrap();
    let tools = vec![
        json!({"type": "function", "function": {"name": "edit", "parameters": {"type": "object", "properties": {
            "path": {"type": "string"}, "text": {"type": "string"}, "count": {"type": "integer"},
            "ratio": {"type": "number"}, "force": {"type": "boolean"}, "limit": {"type": ["integer", "null"]},
            "opts": {"type": "object"}, "lines": {"type": "array"}, "id": {"type": ["string", "number"]}}}}}),
        json!({"type": "function", "function": {"name": "ping", "parameters": {"type": "object", "properties": {}}}}),
    ];
    let calls = vec![
        (
            "edit",
            json!({"path": "src/<a>&b.rs", "text": "\nfn f() {\n    a < b && c\n}\n\n", "count": 3, "ratio": 0.25,
                        "force": true, "limit": null, "opts": {"deep": {"x": [1, 2.5, "s"]}, "flag": false},
                        "lines": ["a", "b\nc"], "id": "0042"}),
        ),
        ("ping", json!({})),
        (
            "edit",
            json!({"path": "42", "force": false, "id": 7, "text": "ünï </parameter> x"}),
        ),
    ];
    let tool_calls: Vec<Value> = calls
        .iter()
        .enumerate()
        .map(|(i, (name, args))| {
            // Alternate between JSON-string and object arguments.
            let arguments = if i % 2 == 0 { Value::String(args.to_string()) } else { args.clone() };
            json!({"id": format!("c{i}"), "type": "function", "function": {"name": name, "arguments": arguments}})
        })
        .collect();
    let messages = vec![
        json!({"role": "user", "content": "go"}),
        json!({"role": "assistant", "content": "Working on it.", "tool_calls": tool_calls}),
    ];
    let text = tmpl
        .render(&messages, Some(&tools), false, &Map::new())
        .unwrap();
    let start = text.rfind("<|im_start|>assistant").unwrap() + "<|im_start|>assistant".len();
    let end = text.rfind("<|im_end|>").unwrap();
    let generated = &text[start..end];
    assert!(
        generated.contains("<parameter=force>\nTrue\n</parameter>"),
        "{generated}"
    );

    let opts = ParserOptions {
        id_prefix: Some("x".into()),
        ..ParserOptions::default()
    };
    let whole = ToolCallParser::parse_complete(generated, &tools, opts.clone());
    assert_eq!(whole.content, "Working on it.");
    assert_eq!(whole.tool_calls.len(), calls.len());
    for (got, (name, args)) in whole.tool_calls.iter().zip(&calls) {
        assert_eq!(&got.name, name);
        let parsed: Value = serde_json::from_str(&got.arguments).unwrap();
        assert_eq!(&parsed, args, "call {name}");
    }
    // Streamed in 3-char pieces: same message, deltas concatenate to it.
    let mut p = ToolCallParser::new(&tools, opts);
    let chars: Vec<char> = generated.chars().collect();
    let mut args = vec![String::new(); calls.len()];
    let mut content = String::new();
    for chunk in chars.chunks(3) {
        let piece: String = chunk.iter().collect();
        for d in p.push(&piece).into_iter() {
            match d {
                Delta::Content(s) => content.push_str(&s),
                Delta::ToolCallArguments { index, fragment } => args[index].push_str(&fragment),
                _ => {}
            }
        }
    }
    for d in p.finish() {
        if let Delta::ToolCallArguments { index, fragment } = d {
            args[index].push_str(&fragment);
        }
    }
    assert_eq!(p.message(), &whole);
    assert_eq!(content, whole.content);
    for (a, c) in args.iter().zip(&whole.tool_calls) {
        assert_eq!(a, &c.arguments);
    }
}
