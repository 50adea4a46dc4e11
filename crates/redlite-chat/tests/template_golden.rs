//! Qwen3-Coder chat template rendered by `ChatTemplate` against golden text
//! produced by Python Jinja2 configured like transformers
//! (`tests/py/make_template_golden.py`).

use redlite_chat::template::ChatTemplate;
use serde_json::Value;

fn golden() -> Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden/qwen3_coder_template.json");
    let text = std::fs::read_to_string(&path).expect("golden file");
    serde_json::from_str(&text).expect("golden JSON")
}

fn fixture_template() -> String {
    let path = redlite_testkit::fixture("tokenizer/Qwen3-Coder.jinja");
    std::fs::read_to_string(&path).expect("template fixture")
}

#[test]
fn qwen3_coder_matches_python_renderer() {
    let g = golden();
    let tmpl = ChatTemplate::new(
        &fixture_template(),
        g["bos_token"].as_str().unwrap(),
        g["eos_token"].as_str().unwrap(),
    )
    .expect("template compiles");
    let cases = g["cases"].as_array().unwrap();
    assert!(cases.len() >= 8, "golden file has {} cases", cases.len());
    let mut failures = Vec::new();
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let messages = case["messages"].as_array().unwrap();
        let tools = case
            .get("tools")
            .and_then(Value::as_array)
            .map(|v| v.as_slice());
        let agp = case["add_generation_prompt"].as_bool().unwrap();
        let extra = case
            .get("extra")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        let got = tmpl
            .render(messages, tools, agp, &extra)
            .unwrap_or_else(|e| panic!("case {name}: {e}"));
        let want = case["expected"].as_str().unwrap();
        if got != want {
            let at = got
                .char_indices()
                .zip(want.chars())
                .find(|((_, a), b)| a != b)
                .map(|((i, _), _)| i)
                .unwrap_or(got.len().min(want.len()));
            let lo = at.saturating_sub(80);
            failures.push(format!(
                "case {name}: first difference at byte {at}\n  got:  {:?}\n  want: {:?}",
                got.get(lo..(at + 80).min(got.len())).unwrap_or(""),
                want.get(lo..(at + 80).min(want.len())).unwrap_or("")
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn golden_covers_the_required_scenarios() {
    // The golden file itself must contain the structures the renderer is
    // judged on, so a regenerated file cannot silently drop them.
    let g = golden();
    let full = &g["cases"][0];
    let want = full["expected"].as_str().unwrap();
    assert_eq!(want.matches("<tool_call>\n<function=read>").count(), 1);
    assert_eq!(want.matches("<tool_call>\n<function=edit>").count(), 1);
    assert_eq!(want.matches("<tool_response>").count(), 2);
    assert_eq!(want.matches("<|im_start|>user\n<tool_response>").count(), 1);
    assert!(want.contains("<parameter=dry_run>\nTrue\n</parameter>"));
    assert!(want.contains("line <two> & three\n"));
    assert!(want.ends_with("<|im_start|>assistant\n"));
    let names: Vec<&str> = g["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    for n in [
        "no_system_with_tools",
        "no_tools",
        "tool_only_turn",
        "content_as_parts",
    ] {
        assert!(names.contains(&n), "missing scenario {n}");
    }
}

#[test]
fn template_from_gguf_is_the_embedded_one() {
    // Every fixture GGUF embeds the Qwen3-Coder template; bos/eos come from
    // the token ids in the metadata (README: bos 1009, eos 1011).
    let file = redlite_gguf::GgufFile::open(redlite_testkit::fixture("tiny-s-bf16.gguf")).unwrap();
    let tmpl = ChatTemplate::from_gguf(&file).unwrap();
    assert!(!tmpl.is_fallback());
    assert_eq!(tmpl.source(), fixture_template());
    let out = tmpl
        .render(
            &[serde_json::json!({"role": "user", "content": "{{ eos_token }}"})],
            None,
            true,
            &serde_json::Map::new(),
        )
        .unwrap();
    // Content is data, not template code.
    assert_eq!(
        out,
        "<|im_start|>user\n{{ eos_token }}<|im_end|>\n<|im_start|>assistant\n"
    );
    let probe = ChatTemplate::new(
        "{{ bos_token }}|{{ eos_token }}",
        "<|endoftext|>",
        "<|im_end|>",
    )
    .unwrap();
    let expect = probe
        .render(&[], None, false, &serde_json::Map::new())
        .unwrap();
    let file_probe = format!("{:?}", tmpl);
    assert!(
        file_probe.contains("<|endoftext|>") && file_probe.contains("<|im_end|>"),
        "{file_probe} vs {expect}"
    );
}
