//! Tool-call values that contain the tool-call format's own tags: code and
//! documents that mention `</parameter>`, `</function>` or `</tool_call>`,
//! whole `<tool_call>…</tool_call>` examples, regular expressions for the
//! tags. Each value must come back whole, with no phantom call and nothing
//! leaking into `content`, whether the text is parsed whole, streamed one
//! character at a time, split at every point, or in random chunks.
//!
//! Every expected result is written out by hand; the call text is built
//! from the expected values the way the model writes calls (one newline
//! around each value), so the values are the independent reference.

use redlite_chat::toolcall::{Delta, ParsedMessage, ParserOptions, ToolCall, ToolCallParser};
use serde_json::{json, Value};

fn tools() -> Vec<Value> {
    vec![
        json!({"type": "function", "function": {"name": "write", "parameters": {"type": "object",
            "properties": {"path": {"type": "string"}, "content": {"type": "string"}}}}}),
        json!({"type": "function", "function": {"name": "edit", "parameters": {"type": "object",
            "properties": {"path": {"type": "string"}, "old": {"type": "string"}, "new": {"type": "string"},
                           "count": {"type": "integer"}, "dry_run": {"type": "boolean"}}}}}),
        json!({"type": "function", "function": {"name": "read", "parameters": {"type": "object",
            "properties": {"path": {"type": "string"}}}}}),
        json!({"type": "function", "function": {"name": "grep", "parameters": {"type": "object",
            "properties": {"pattern": {"type": "string"}, "path": {"type": "string"}}}}}),
    ]
}

fn opts() -> ParserOptions {
    ParserOptions {
        id_prefix: Some("t".into()),
        ..ParserOptions::default()
    }
}

/// A call as the model writes it, around raw parameter values.
fn call_text(func: &str, params: &[(&str, &str)]) -> String {
    let mut s = format!("<tool_call>\n<function={func}>\n");
    for (k, v) in params {
        s.push_str(&format!("<parameter={k}>\n{v}\n</parameter>\n"));
    }
    s.push_str("</function>\n</tool_call>");
    s
}

/// The same with CRLF line ends around the tags (values unchanged).
fn call_text_crlf(func: &str, params: &[(&str, &str)]) -> String {
    let mut s = format!("<tool_call>\r\n<function={func}>\r\n");
    for (k, v) in params {
        s.push_str(&format!("<parameter={k}>\r\n{v}\r\n</parameter>\r\n"));
    }
    s.push_str("</function>\r\n</tool_call>");
    s
}

struct Case {
    name: &'static str,
    text: String,
    content: &'static str,
    calls: Vec<(&'static str, Value)>,
}

/// A Markdown page that shows a complete call (fenced).
const MARKDOWN_PAGE: &str = "# Calling tools\n\nThe model writes a call like this:\n\n```\n<tool_call>\n<function=read>\n<parameter=path>\nsrc/main.rs\n</parameter>\n</function>\n</tool_call>\n```\n\nEach value ends with `</parameter>`; the call with `</function>` and `</tool_call>`.\n";

/// A parser's test file: calls in string literals, one per line with
/// escapes, and one over several lines (with the same tool and parameter
/// names as the call that writes it).
const PARSER_TESTS: &str = "import unittest\n\nONE_LINE = \"<tool_call>\\n<function=write>\\n<parameter=path>\\na\\n</parameter>\\n</function>\\n</tool_call>\"\n\nMULTI = \"\"\"<tool_call>\n<function=write>\n<parameter=path>\nb.txt\n</parameter>\n<parameter=content>\nhello\n</parameter>\n</function>\n</tool_call>\"\"\"\n\n\nclass T(unittest.TestCase):\n    def test_end(self):\n        self.assertTrue(MULTI.endswith(\"</tool_call>\"))\n";

/// Code with the closing tags in string literals.
const CLOSERS_IN_STRINGS: &str = "FUNCTION_END = \"</function>\"\nCALL_END = '</tool_call>'\n\ndef done(text):\n    return text.rstrip().endswith(\"</function>\\n</tool_call>\") or \"</parameter>\" in text\n";

/// A regular expression for the tags.
const REGEX_SOURCE: &str = "import re\n\nCALL = re.compile(r\"<function=(.*?)>(.*?)</function>\", re.DOTALL)\nVALUE = re.compile(r\"<parameter=(.*?)>\\n(.*?)\\n</parameter>\\s*(?=<parameter=|</function>)\", re.DOTALL)\n";

fn cases() -> Vec<Case> {
    vec![
        // --- 1. `</parameter>` inline in a value.
        Case {
            name: "parameter_close_inline",
            text: format!(
                "Noting it.\n{}",
                call_text(
                    "write",
                    &[
                        ("path", "notes.md"),
                        ("content", "A value ends at </parameter> and the text goes on."),
                    ]
                )
            ),
            content: "Noting it.",
            calls: vec![(
                "write",
                json!({"path": "notes.md", "content": "A value ends at </parameter> and the text goes on."}),
            )],
        },
        Case {
            name: "parameter_close_at_line_end_then_text",
            text: call_text(
                "edit",
                &[
                    ("path", "doc.md"),
                    ("old", "ends with\n</parameter>\nthen more"),
                    ("new", "</parameter>"),
                    ("count", "2"),
                ],
            ),
            content: "",
            calls: vec![(
                "edit",
                json!({"path": "doc.md", "old": "ends with\n</parameter>\nthen more", "new": "</parameter>", "count": 2}),
            )],
        },
        Case {
            name: "parameter_close_then_seen_parameter_name",
            // `</parameter>` followed by a parameter that was already read,
            // or by the value's own: not a structural close.
            text: call_text(
                "edit",
                &[("path", "a.txt"), ("old", "x\n</parameter> <parameter=path> y </parameter> <parameter=old>"), ("new", "z")],
            ),
            content: "",
            calls: vec![(
                "edit",
                json!({"path": "a.txt", "old": "x\n</parameter> <parameter=path> y </parameter> <parameter=old>", "new": "z"}),
            )],
        },
        // --- 2. `</function>` / `</tool_call>` in string literals.
        Case {
            name: "closers_in_string_literals",
            text: format!(
                "Adding the helper.\n\n{}\n\nDone.",
                call_text("write", &[("path", "tags.py"), ("content", CLOSERS_IN_STRINGS)])
            ),
            content: "Adding the helper.\nDone.",
            calls: vec![("write", json!({"path": "tags.py", "content": CLOSERS_IN_STRINGS}))],
        },
        Case {
            name: "closers_on_their_own_lines",
            text: call_text(
                "edit",
                &[
                    ("path", "t.txt"),
                    ("old", "line\n</function>\n</tool_call>\nmore"),
                    ("new", "</tool_call>\n<tool_call>\n<function=read>"),
                    ("dry_run", "1"),
                ],
            ),
            content: "",
            calls: vec![(
                "edit",
                json!({"path": "t.txt", "old": "line\n</function>\n</tool_call>\nmore",
                       "new": "</tool_call>\n<tool_call>\n<function=read>", "dry_run": true}),
            )],
        },
        Case {
            name: "end_of_a_call_inside_a_value",
            // `</parameter>` then `</function>`, but no `</tool_call>` after
            // it: text (the call's own end follows).
            text: call_text(
                "write",
                &[("path", "doc.md"), ("content", "A call ends with\n</parameter>\n</function>\nand that is all.")],
            ),
            content: "",
            calls: vec![(
                "write",
                json!({"path": "doc.md", "content": "A call ends with\n</parameter>\n</function>\nand that is all."}),
            )],
        },
        Case {
            name: "bare_call_then_prose",
            // Without `<tool_call>`, `</function>` followed by prose still
            // ends the call (decided at the end of the stream).
            text: "Reading.\n<function=read>\n<parameter=path>\na </parameter> b\n</parameter>\n</function>\nThen more."
                .to_string(),
            content: "Reading.\nThen more.",
            calls: vec![("read", json!({"path": "a </parameter> b"}))],
        },
        // --- 3. Whole calls inside a value.
        Case {
            name: "markdown_page_with_a_call",
            text: format!(
                "Writing the docs.\n{}",
                call_text("write", &[("path", "docs/tools.md"), ("content", MARKDOWN_PAGE)])
            ),
            content: "Writing the docs.",
            calls: vec![("write", json!({"path": "docs/tools.md", "content": MARKDOWN_PAGE}))],
        },
        Case {
            name: "parser_test_strings",
            text: call_text("write", &[("path", "test_parser.py"), ("content", PARSER_TESTS)]),
            content: "",
            calls: vec![("write", json!({"path": "test_parser.py", "content": PARSER_TESTS}))],
        },
        Case {
            name: "example_in_first_parameter_uses_later_names",
            // The example opens `<parameter=new>`, a declared parameter of
            // the outer call not seen yet: a literal pair all the same.
            text: call_text(
                "edit",
                &[
                    ("old", "<tool_call>\n<function=edit>\n<parameter=new>\nv\n</parameter>\n</function>\n</tool_call>"),
                    ("new", ""),
                    ("path", "x.md"),
                ],
            ),
            content: "",
            calls: vec![(
                "edit",
                json!({"old": "<tool_call>\n<function=edit>\n<parameter=new>\nv\n</parameter>\n</function>\n</tool_call>",
                       "new": "", "path": "x.md"}),
            )],
        },
        Case {
            name: "indented_example_then_a_second_call",
            text: format!(
                "{}\n{}\nBoth written.",
                call_text(
                    "write",
                    &[
                        ("path", "a.md"),
                        ("content", "Example:\n\n    <tool_call>\n    <function=write>\n    <parameter=content>\n    hi\n    </parameter>\n    </function>\n    </tool_call>\n"),
                    ]
                ),
                call_text("read", &[("path", "a.md")])
            ),
            content: "Both written.",
            calls: vec![
                (
                    "write",
                    json!({"path": "a.md", "content": "Example:\n\n    <tool_call>\n    <function=write>\n    <parameter=content>\n    hi\n    </parameter>\n    </function>\n    </tool_call>\n"}),
                ),
                ("read", json!({"path": "a.md"})),
            ],
        },
        // --- 4. Regular expressions for the tags.
        Case {
            name: "regex_for_the_tags",
            text: call_text("write", &[("path", "parse.py"), ("content", REGEX_SOURCE)]),
            content: "",
            calls: vec![("write", json!({"path": "parse.py", "content": REGEX_SOURCE}))],
        },
        Case {
            name: "regex_as_a_search_pattern",
            text: format!(
                "Searching.\n{}",
                call_text("grep", &[("pattern", "</function>\\s*</tool_call>"), ("path", "src/")])
            ),
            content: "Searching.",
            calls: vec![("grep", json!({"pattern": "</function>\\s*</tool_call>", "path": "src/"}))],
        },
        // --- The same in CRLF.
        Case {
            name: "crlf_markdown_page",
            text: call_text_crlf("write", &[("path", "d.md"), ("content", MARKDOWN_PAGE)]),
            content: "",
            calls: vec![("write", json!({"path": "d.md", "content": MARKDOWN_PAGE}))],
        },
        // --- Malformed calls with tag text still recover as before.
        Case {
            name: "missing_parameter_close_with_function_close_inline",
            // No `</parameter>`: the value ends at the `</function>` that
            // `</tool_call>` follows, not at the one in the text.
            text: "<tool_call>\n<function=grep>\n<parameter=pattern>\na</function>b\n</function>\n</tool_call>"
                .to_string(),
            content: "",
            calls: vec![("grep", json!({"pattern": "a</function>b"}))],
        },
        Case {
            name: "undeclared_parameter_after_tag_text",
            // `</parameter>` before an undeclared parameter closes the value
            // (second pass at the end of the stream), after a literal one.
            text: call_text("grep", &[("pattern", "a</parameter>b"), ("flags", "-i")]),
            content: "",
            calls: vec![("grep", json!({"pattern": "a</parameter>b", "flags": "-i"}))],
        },
        Case {
            name: "unclosed_value_with_stray_close_is_content",
            text: "Writing.\n<tool_call>\n<function=write>\n<parameter=content>\nx </parameter> y\n</function>".to_string(),
            content: "Writing.\n<tool_call>\n<function=write>\n<parameter=content>\nx </parameter> y\n</function>",
            calls: vec![],
        },
        Case {
            name: "prose_with_tag_text_is_not_a_call",
            text: "Values end with </parameter>, calls with </function> and </tool_call>.".to_string(),
            content: "Values end with </parameter>, calls with </function> and </tool_call>.",
            calls: vec![],
        },
    ]
}

/// Concatenate deltas, checking each call starts once, in order, with its
/// fragments before the next one.
fn assemble(deltas: &[Delta]) -> ParsedMessage {
    let mut m = ParsedMessage::default();
    for d in deltas {
        match d {
            Delta::Content(s) => {
                assert!(!s.is_empty(), "empty content delta");
                m.content.push_str(s)
            }
            Delta::Reasoning(s) => m.reasoning_content.push_str(s),
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

/// Feed `text` cut at `cuts` (byte offsets on char boundaries).
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

fn check(c: &Case, m: &ParsedMessage, how: &str) {
    assert_eq!(m.content, c.content, "{} ({how}): content", c.name);
    assert_eq!(
        m.tool_calls.len(),
        c.calls.len(),
        "{} ({how}): number of calls",
        c.name
    );
    for (i, (got, (name, args))) in m.tool_calls.iter().zip(&c.calls).enumerate() {
        assert_eq!(got.id, format!("t{i}"), "{} ({how}): id", c.name);
        assert_eq!(&got.name, name, "{} ({how}): name of call {i}", c.name);
        // Exact text: compact JSON, parameter order kept.
        assert_eq!(
            got.arguments,
            serde_json::to_string(args).expect("json"),
            "{} ({how}): arguments of call {i}",
            c.name
        );
    }
}

#[test]
fn whole_text_gives_the_exact_calls() {
    for c in cases() {
        let m = ToolCallParser::parse_complete(&c.text, &tools(), opts());
        check(&c, &m, "parse_complete");
        check(&c, &stream(&c.text, &[]), "one push");
    }
}

#[test]
fn char_by_char_and_every_split_give_the_same_calls() {
    for c in cases() {
        let all: Vec<usize> = c.text.char_indices().map(|(i, _)| i).skip(1).collect();
        check(&c, &stream(&c.text, &all), "char by char");
        for &k in &all {
            check(&c, &stream(&c.text, &[k]), &format!("split at {k}"));
        }
    }
}

#[test]
fn random_chunks_give_the_same_calls() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x7a9_7e47);
    for c in cases() {
        let all: Vec<usize> = c.text.char_indices().map(|(i, _)| i).skip(1).collect();
        for round in 0..40 {
            // Chunks of about 1 to 16 characters: like tokens.
            let p = 1.0 / f64::from(1 + round % 16);
            let cuts: Vec<usize> = all.iter().copied().filter(|_| rng.gen_bool(p)).collect();
            check(&c, &stream(&c.text, &cuts), &format!("cuts {cuts:?}"));
        }
    }
}

/// A well-formed call is announced as soon as its `</tool_call>` is read,
/// before the end of the stream, however much tag text its values hold.
#[test]
fn well_formed_calls_are_announced_without_waiting_for_the_end() {
    for c in cases() {
        if c.calls.is_empty()
            || ["missing", "undeclared", "bare"]
                .iter()
                .any(|p| c.name.starts_with(p))
        {
            continue;
        }
        let Some(close) = c.text.rfind("</tool_call>") else {
            continue;
        };
        let upto = close + "</tool_call>".len();
        let mut p = ToolCallParser::new(&tools(), opts());
        for (i, ch) in c.text[..upto].char_indices() {
            p.push(&c.text[i..i + ch.len_utf8()]);
        }
        assert_eq!(
            p.message().tool_calls.len(),
            c.calls.len(),
            "{}: calls announced before the end of the stream",
            c.name
        );
    }
}

/// Random values built from pieces that mention every tag (inline, in
/// string literals, in regular expressions, whole calls at line starts),
/// in random calls between prose: each value comes back exactly, however
/// the text is split.
#[test]
fn random_values_with_tag_text_come_back_exactly() {
    use rand::{Rng, SeedableRng};
    // No piece leaves a `</parameter>` at the end or a `<parameter=` at a
    // line start outside a whole literal call: those are the structural
    // cases, not text.
    const PIECES: &[&str] = &[
        "alpha", " ", "\n", "\n\n", "x = 1;", "ü🚀", "a < b && c > d", "<div>", "<", ">", "=",
        "`</parameter>`", "\"</parameter>\"", "a</parameter>b", "</parameter>)",
        "</function>", "</tool_call>", "<tool_call>", "<function=read>", "<function=",
        "\"</function>\\n</tool_call>\"", "r\"</parameter>\\s*</function>\"",
        "re.compile(r\"<function=(.*?)</function>\")", "x<parameter=path>y",
        "\n<tool_call>\n<function=read>\n<parameter=path>\nv\n</parameter>\n</function>\n</tool_call>\n",
        "\n<parameter=new>\nv\n</parameter>\n",
        "\n</parameter>\n</function>\nmore",
        "\n    <tool_call>\n    <function=write>\n    <parameter=content>\n    <parameter=x>\n    </parameter>\n    </parameter>\n    </function>\n    </tool_call>\n",
    ];
    const PROSE: &[&str] = &["", "Working on it.", "Done.", "Next:"];
    const CALLS: &[(&str, &[&str])] = &[
        ("write", &["path", "content"]),
        ("edit", &["path", "old", "new"]),
        ("grep", &["pattern", "path"]),
    ];
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x7a9_7e48);
    for _ in 0..300 {
        let mut text = String::new();
        let mut content: Vec<&str> = Vec::new();
        let mut calls = Vec::new();
        let prose = PROSE[rng.gen_range(0..PROSE.len())];
        text.push_str(prose);
        if !prose.is_empty() {
            content.push(prose);
        }
        for _ in 0..rng.gen_range(1..4) {
            let (name, params) = CALLS[rng.gen_range(0..CALLS.len())];
            let mut args = serde_json::Map::new();
            let mut raw = Vec::new();
            let chosen: Vec<&str> = params
                .iter()
                .copied()
                .filter(|_| rng.gen_bool(0.8))
                .collect();
            for p in chosen {
                let value: String = (0..rng.gen_range(0..12))
                    .map(|_| PIECES[rng.gen_range(0..PIECES.len())])
                    .collect();
                args.insert(p.to_string(), Value::String(value.clone()));
                raw.push((p.to_string(), value));
            }
            let raw: Vec<(&str, &str)> =
                raw.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            text.push('\n');
            text.push_str(&call_text(name, &raw));
            calls.push((name, Value::Object(args)));
            let prose = PROSE[rng.gen_range(0..PROSE.len())];
            text.push('\n');
            text.push_str(prose);
            if !prose.is_empty() {
                content.push(prose);
            }
        }
        let joined = content.join("\n");
        let c = Case {
            name: Box::leak(format!("random {text:?}").into_boxed_str()),
            text,
            content: Box::leak(joined.into_boxed_str()),
            calls,
        };
        check(
            &c,
            &ToolCallParser::parse_complete(&c.text, &tools(), opts()),
            "whole",
        );
        let all: Vec<usize> = c.text.char_indices().map(|(i, _)| i).skip(1).collect();
        check(&c, &stream(&c.text, &all), "char by char");
        let cuts: Vec<usize> = all.iter().copied().filter(|_| rng.gen_bool(0.25)).collect();
        check(&c, &stream(&c.text, &cuts), &format!("cuts {cuts:?}"));
    }
}
