//! Streaming tool-call parser on realistic generations: every split point,
//! every prefix, char-by-char feeding; deltas must concatenate to the final
//! message, nothing may be emitted twice, malformed or truncated calls must
//! come back as content.

use redlite_chat::toolcall::{Delta, ParsedMessage, ParserOptions, ToolCallParser};
use serde_json::{json, Value};

fn tools() -> Vec<Value> {
    vec![
        json!({"type": "function", "function": {"name": "read", "parameters": {"type": "object",
            "properties": {"path": {"type": "string"}, "offset": {"type": "integer"},
                           "limit": {"type": ["integer", "null"]}},
            "required": ["path"]}}}),
        json!({"type": "function", "function": {"name": "edit", "parameters": {"type": "object",
            "properties": {"path": {"type": "string"}, "old": {"type": "string"}, "new": {"type": "string"},
                           "edits": {"type": "array", "items": {"type": "object"}},
                           "dry_run": {"type": "boolean"}, "scale": {"type": "number"},
                           "mode": {"enum": ["strict", "fuzzy"]}}}}}),
        json!({"type": "function", "function": {"name": "typed", "parameters": {"type": "object",
            "properties": {"n": {"type": "number"}, "i": {"type": "integer"}, "b": {"type": "boolean"},
                           "z": {"type": "null"}, "o": {"type": "object"}, "a": {"type": "array"},
                           "sn": {"type": ["string", "number"]}, "sn2": {"type": ["string", "number"]},
                           "any": {"anyOf": [{"type": "integer"}, {"type": "boolean"}]},
                           "s": {"type": "string"}}}}}),
        // Bare function object (no "function" wrapper).
        json!({"name": "write", "parameters": {"type": "object",
            "properties": {"path": {"type": "string"}, "content": {"type": "string"}}}}),
    ]
}

/// A stream is a sequence of pieces; the model of the expected result for any
/// prefix is computed from the pieces (independently of the parser).
#[derive(Clone)]
enum Piece {
    Text(&'static str),
    /// Raw text `<think>BODY</think>…` and the expected reasoning.
    Think(&'static str, &'static str),
    /// Raw call text, the offset (within raw) where the call becomes complete,
    /// expected name and arguments.
    Call(&'static str, usize, &'static str, Value),
    /// Text that looks like a call but is not one: all of it is content.
    Bad(&'static str),
}

/// A call complete once `marker` (its first occurrence, or `extra` bytes
/// past the end of `raw` when `marker` is empty) has been read.
fn call_at(
    raw: &'static str,
    marker: &str,
    extra: usize,
    name: &'static str,
    args: Value,
) -> Piece {
    let done = if marker.is_empty() {
        raw.len() + extra
    } else {
        raw.find(marker).expect("marker") + marker.len()
    };
    Piece::Call(raw, done, name, args)
}

fn call(raw: &'static str, name: &'static str, args: Value) -> Piece {
    // Complete once the body is closed (`</function>` or the JSON object's end).
    let done = if let Some(p) = raw.find("</function>") {
        p + "</function>".len()
    } else {
        let open = raw.find('{').expect("json call");
        let mut stream = serde_json::Deserializer::from_str(&raw[open..]).into_iter::<Value>();
        stream.next().expect("value").expect("valid json");
        open + stream.byte_offset()
    };
    Piece::Call(raw, done, name, args)
}

struct Case {
    name: &'static str,
    pieces: Vec<Piece>,
    opts: ParserOptions,
    /// Hand-written expected content / reasoning of the whole stream.
    content: &'static str,
    reasoning: &'static str,
}

fn opts() -> ParserOptions {
    ParserOptions {
        id_prefix: Some("call_t".into()),
        ..ParserOptions::default()
    }
}

fn cases() -> Vec<Case> {
    use Piece::*;
    let read_main = || {
        call(
        "<tool_call>\n<function=read>\n<parameter=path>\nsrc/main.rs\n</parameter>\n<parameter=offset>\n10\n</parameter>\n</function>\n</tool_call>",
        "read", json!({"path": "src/main.rs", "offset": 10}))
    };
    vec![
        Case { name: "one_call", pieces: vec![Text("I'll read the file.\n\n"), read_main()],
               opts: opts(), content: "I'll read the file.", reasoning: "" },
        Case { name: "two_calls_multiline", pieces: vec![
                Text("Reading, then editing.\n"), read_main(), Text("\n"),
                call("<tool_call>\n<function=edit>\n<parameter=path>\nsrc/<lib>&.rs\n</parameter>\n<parameter=old>\nfn a() {\n    1 < 2 && 3 > 2\n}\n</parameter>\n<parameter=new>\n\n  indented <tool_call> & </parameter> inside\n\n</parameter>\n<parameter=edits>\n[{\"old\": \"a\", \"new\": \"b\\n\"}, {\"count\": 2}]\n</parameter>\n<parameter=dry_run>\nTrue\n</parameter>\n<parameter=scale>\n0.5\n</parameter>\n<parameter=mode>\nfuzzy\n</parameter>\n</function>\n</tool_call>",
                     "edit", json!({"path": "src/<lib>&.rs", "old": "fn a() {\n    1 < 2 && 3 > 2\n}",
                                    "new": "\n  indented <tool_call> & </parameter> inside\n",
                                    "edits": [{"old": "a", "new": "b\n"}, {"count": 2}],
                                    "dry_run": true, "scale": 0.5, "mode": "fuzzy"}))],
               opts: opts(), content: "Reading, then editing.", reasoning: "" },
        Case { name: "typed_values", pieces: vec![
                call("<tool_call>\n<function=typed>\n<parameter=n>\n-1.5e3\n</parameter>\n<parameter=i>\n 42 \n</parameter>\n<parameter=b>\nfalse\n</parameter>\n<parameter=z>\nNone\n</parameter>\n<parameter=o>\n{\"k\": [1, {\"x\": null}], \"s\": \"ü<&>\"}\n</parameter>\n<parameter=a>\n[]\n</parameter>\n<parameter=sn>\n007\n</parameter>\n<parameter=sn2>\n7.25\n</parameter>\n<parameter=any>\ntrue\n</parameter>\n<parameter=s>\n123\n</parameter>\n<parameter=unknown>\n{\"u\": 1}\n</parameter>\n<parameter=unknown2>\nplain words\n</parameter>\n<parameter=i_bad>\nnot a number\n</parameter>\n</function>\n</tool_call>",
                     "typed", json!({"n": -1500, "i": 42, "b": false, "z": null, "o": {"k": [1, {"x": null}], "s": "ü<&>"},
                                     "a": [], "sn": "007", "sn2": 7.25, "any": true, "s": "123", "unknown": "{\"u\": 1}",
                                     "unknown2": "plain words", "i_bad": "not a number"}))],
               opts: opts(), content: "", reasoning: "" },
        Case { name: "think_then_call", pieces: vec![
                Think("<think>\nThe user wants main.rs.\nI should read it.\n</think>\n\n", "The user wants main.rs.\nI should read it."),
                Text("Reading now.\n"), read_main()],
               opts: opts(), content: "Reading now.", reasoning: "The user wants main.rs.\nI should read it." },
        Case { name: "starts_in_reasoning", pieces: vec![
                Think("Short thought </thin k>.\n</think>\n\n", "Short thought </thin k>."), Text("Answer: 4.")],
               opts: ParserOptions { starts_in_reasoning: true, ..opts() },
               content: "Answer: 4.", reasoning: "Short thought </thin k>." },
        Case { name: "json_form", pieces: vec![
                Text("Calling.\n"),
                call("<tool_call>\n{\"name\": \"read\", \"arguments\": {\"path\": \"a </tool_call> b.txt\", \"offset\": 3}}\n</tool_call>",
                     "read", json!({"path": "a </tool_call> b.txt", "offset": 3})),
                call("\n<tool_call>\n{\"name\": \"edit\", \"arguments\": \"{\\\"path\\\": \\\"x\\\", \\\"dry_run\\\": true}\"}\n</tool_call>\n",
                     "edit", json!({"path": "x", "dry_run": true}))],
               opts: opts(), content: "Calling.", reasoning: "" },
        Case { name: "malformed_call_is_content", pieces: vec![
                Text("Try this:\n"),
                Bad("<tool_call>\n<function=read>\n<parameter=path>\nx\n</parameter>\noops"),
                Text(" and then </function>\n</tool_call> trailing")],
               opts: opts(),
               content: "Try this:\n<tool_call>\n<function=read>\n<parameter=path>\nx\n</parameter>\noops and then </function>\n</tool_call> trailing",
               reasoning: "" },
        Case { name: "not_a_call_body", pieces: vec![
                Text("Look: "), Bad("<tool_call>\nnot a call"), Text(" here.\n\n"), read_main()],
               opts: opts(), content: "Look: <tool_call>\nnot a call here.", reasoning: "" },
        Case { name: "bad_json_call", pieces: vec![Bad("<tool_call>\n{\"name\": 3}"), Text(" done")],
               opts: opts(), content: "<tool_call>\n{\"name\": 3} done", reasoning: "" },
        Case { name: "truncated_call", pieces: vec![
                Text("Writing the file.\n"),
                Bad("<tool_call>\n<function=write>\n<parameter=path>\na.txt\n</parameter>\n<parameter=content>\nhello\n</parameter>")],
               opts: opts(),
               content: "Writing the file.\n<tool_call>\n<function=write>\n<parameter=path>\na.txt\n</parameter>\n<parameter=content>\nhello\n</parameter>",
               reasoning: "" },
        Case { name: "bare_function_first_call", pieces: vec![
                Text("Reading.\n"),
                call("<function=read>\n<parameter=path>\nsrc/lib.rs\n</parameter>\n</function>\n</tool_call>",
                     "read", json!({"path": "src/lib.rs"})),
                Text("\n"),
                call("<tool_call>\n<function=write>\n<parameter=path>\nb.txt\n</parameter>\n<parameter=content>\nline1\nline2\n</parameter>\n</function>",
                     "write", json!({"path": "b.txt", "content": "line1\nline2"}))],
               opts: opts(), content: "Reading.", reasoning: "" },
        Case { name: "bare_function_not_after_first", pieces: vec![
                read_main(), Text("\n"),
                Bad("<function=read>\n<parameter=path>\nx\n</parameter>\n</function>")],
               opts: opts(),
               content: "<function=read>\n<parameter=path>\nx\n</parameter>\n</function>", reasoning: "" },
        Case { name: "undeclared_bare_function", pieces: vec![
                Text("Write <function=foo> in the docs; compare a<b, <div>, <tool_ and <thinking>.")],
               opts: opts(),
               content: "Write <function=foo> in the docs; compare a<b, <div>, <tool_ and <thinking>.", reasoning: "" },
        Case { name: "undeclared_name_with_opener", pieces: vec![
                call("<tool_call>\n<function=search>\n<parameter=q>\n\"quoted\"\n</parameter>\n<parameter=n>\n5\n</parameter>\n</function>\n</tool_call>",
                     "search", json!({"q": "\"quoted\"", "n": "5"}))],
               opts: opts(), content: "", reasoning: "" },
        Case { name: "tool_calls_disabled", pieces: vec![Text("<tool_call>\n<function=read>\n</function>\n</tool_call>")],
               opts: ParserOptions { parse_tool_calls: false, ..opts() },
               content: "<tool_call>\n<function=read>\n</function>\n</tool_call>", reasoning: "" },
        // Malformed output the official parser recovers from.
        Case { name: "missing_every_close_then_good_call", pieces: vec![
                Text("Two reads.\n"),
                call_at("<tool_call>\n<function=read>\n<parameter=path>\na.rs\n", "", "<tool_call>\n<function=".len(),
                        "read", json!({"path": "a.rs"})),
                read_main()],
               opts: opts(), content: "Two reads.", reasoning: "" },
        Case { name: "missing_function_close_then_good_call", pieces: vec![
                call_at("<tool_call>\n<function=read>\n<parameter=path>\na.rs\n</parameter>\n</tool_call>", "</tool_call>", 0,
                        "read", json!({"path": "a.rs"})),
                Text("\n"), read_main()],
               opts: opts(), content: "", reasoning: "" },
        Case { name: "missing_parameter_close", pieces: vec![
                call("<tool_call>\n<function=edit>\n<parameter=path>\na.rs\n<parameter=dry_run>\nTRUE\n<parameter=scale>\n+5\n</function>\n</tool_call>",
                     "edit", json!({"path": "a.rs", "dry_run": true, "scale": 5})),
                call_at("\n<tool_call>\n<function=read>\n<parameter=offset>\n007</tool_call>", "</tool_call>", 0,
                        "read", json!({"offset": 7}))],
               opts: opts(), content: "", reasoning: "" },
        Case { name: "two_functions_one_block_and_text_around", pieces: vec![
                Text("First a, then b.\n\n"),
                call("<tool_call>\n<function=read>\n<parameter=path>\na\n</parameter>\n</function>",
                     "read", json!({"path": "a"})),
                call("\n<function=edit>\n<parameter=edits>\n[{'old': 'x', 'new': None}, (1, 2.5)]\n</parameter>\n</function>\n</tool_call>",
                     "edit", json!({"edits": [{"old": "x", "new": null}, [1, 2.5]]})),
                Text("\n\nBoth done;\n"), read_main(), Text("\nAll done.\n")],
               opts: opts(), content: "First a, then b.\nBoth done;\nAll done.", reasoning: "" },
        Case { name: "crlf", pieces: vec![
                Text("Editing.\r\n\r\n"),
                call("<tool_call>\r\n<function=edit>\r\n<parameter=path>\r\na.rs\r\n</parameter>\r\n<parameter=new>\r\nx\r\ny\r\n</parameter>\r\n</function>\r\n</tool_call>",
                     "edit", json!({"path": "a.rs", "new": "x\r\ny"})),
                Text("\r\nDone.\r\n")],
               opts: opts(), content: "Editing.\nDone.", reasoning: "" },
        Case { name: "prose_and_inline_code_are_not_calls", pieces: vec![
                Text("Use the `<tool_call>` tag, or `<function=read>`, e.g. `<tool_call>\n<function=read>\n<parameter=path>\nx\n</parameter>\n</function>\n</tool_call>`.\nEmit <tool_call> then <function=NAME>.")],
               opts: opts(),
               content: "Use the `<tool_call>` tag, or `<function=read>`, e.g. `<tool_call>\n<function=read>\n<parameter=path>\nx\n</parameter>\n</function>\n</tool_call>`.\nEmit <tool_call> then <function=NAME>.",
               reasoning: "" },
        Case { name: "stray_text_after_parameter", pieces: vec![
                Bad("<tool_call>\n<function=read>\n<parameter=path>\na\n</parameter>\n"),
                Text("oops\n</function>\n</tool_call>\n"), read_main()],
               opts: opts(),
               content: "<tool_call>\n<function=read>\n<parameter=path>\na\n</parameter>\noops\n</function>\n</tool_call>",
               reasoning: "" },
    ]
}

fn stream_text(pieces: &[Piece]) -> String {
    pieces
        .iter()
        .map(|p| match p {
            Piece::Text(s) | Piece::Bad(s) | Piece::Think(s, _) | Piece::Call(s, _, _, _) => *s,
        })
        .collect()
}

fn no_ws(s: &str) -> String {
    s.chars().filter(|c| !c.is_whitespace()).collect()
}

/// Expected (content, reasoning, calls) for the prefix of `k` bytes followed by
/// end of stream; content and reasoning without whitespace.
fn model_prefix(
    pieces: &[Piece],
    k: usize,
    in_reasoning: bool,
) -> (String, String, Vec<(String, Value)>) {
    let (mut content, mut reasoning, mut calls) = (String::new(), String::new(), Vec::new());
    let mut off = 0;
    // After a call, inside a `<tool_call>` block not yet closed.
    let mut in_block = false;
    for p in pieces {
        let raw = match p {
            Piece::Text(s) | Piece::Bad(s) | Piece::Think(s, _) | Piece::Call(s, _, _, _) => *s,
        };
        if off >= k {
            break;
        }
        let cut = (k - off).min(raw.len());
        match p {
            Piece::Text(_) | Piece::Bad(_) => {
                content.push_str(&raw[..cut]);
                in_block &= raw[..cut].trim().is_empty();
            }
            Piece::Think(_, body) => {
                let open = if in_reasoning { 0 } else { "<think>".len() };
                let close = raw.find("</think>").unwrap();
                if cut == raw.len() || cut >= close + "</think>".len() {
                    reasoning.push_str(body);
                } else if cut < open {
                    content.push_str(&raw[..cut]);
                } else {
                    reasoning.push_str(&raw[open..cut]);
                }
            }
            Piece::Call(_, done, name, args) => {
                // `done` may lie in the next piece (a call ended by the
                // start of the next one).
                if k - off >= *done {
                    calls.push((name.to_string(), args.clone()));
                    in_block = !raw.contains("</tool_call>");
                } else if in_block && raw[..cut].trim() == "<" {
                    // A lone `<` in an open block at the end of the stream
                    // is taken as a cut `</tool_call>`.
                } else {
                    content.push_str(&raw[..cut]);
                    in_block = false;
                }
            }
        }
        off += raw.len();
    }
    (no_ws(&content), no_ws(&reasoning), calls)
}

/// Concatenate deltas into a message, checking the ordering rules: each call
/// index starts once, in order, with its fragments after the start and before
/// the next call.
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
                assert_eq!(
                    *index,
                    m.tool_calls.len(),
                    "call index out of order or repeated"
                );
                m.tool_calls.push(redlite_chat::toolcall::ToolCall {
                    id: id.clone(),
                    name: name.clone(),
                    arguments: String::new(),
                });
            }
            Delta::ToolCallArguments { index, fragment } => {
                assert_eq!(
                    *index + 1,
                    m.tool_calls.len(),
                    "fragment for a call that is not the latest"
                );
                m.tool_calls[*index].arguments.push_str(fragment);
            }
        }
    }
    m
}

fn run(pieces_text: &str, splits: &[usize], o: &ParserOptions) -> (Vec<Delta>, ParsedMessage) {
    let mut p = ToolCallParser::new(&tools(), o.clone());
    let mut deltas = Vec::new();
    let mut last = 0;
    for &s in splits.iter().chain(std::iter::once(&pieces_text.len())) {
        deltas.extend(p.push(&pieces_text[last..s]));
        last = s;
    }
    deltas.extend(p.finish());
    assert!(
        p.push("more").is_empty() && p.finish().is_empty(),
        "parser emitted after finish"
    );
    (deltas, p.into_message())
}

fn check_expected(case: &Case, msg: &ParsedMessage) {
    let expected_calls: Vec<(String, Value)> = case
        .pieces
        .iter()
        .filter_map(|p| match p {
            Piece::Call(_, _, n, a) => Some((n.to_string(), a.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(msg.content, case.content, "{}: content", case.name);
    assert_eq!(
        msg.reasoning_content, case.reasoning,
        "{}: reasoning",
        case.name
    );
    assert_eq!(
        msg.tool_calls.len(),
        expected_calls.len(),
        "{}: number of calls",
        case.name
    );
    for (i, (c, (name, args))) in msg.tool_calls.iter().zip(&expected_calls).enumerate() {
        assert_eq!(c.id, format!("call_t{i}"), "{}: id", case.name);
        assert_eq!(&c.name, name, "{}: name", case.name);
        // Exact text: compact JSON, parameter order kept.
        assert_eq!(
            c.arguments,
            serde_json::to_string(args).unwrap(),
            "{}: arguments of call {i}",
            case.name
        );
    }
}

#[test]
fn whole_streams_give_the_expected_messages() {
    for case in cases() {
        let text = stream_text(&case.pieces);
        let (deltas, msg) = run(&text, &[], &case.opts);
        check_expected(&case, &msg);
        assert_eq!(
            assemble(&deltas),
            msg,
            "{}: deltas do not concatenate to the message",
            case.name
        );
    }
}

#[test]
fn every_split_point_gives_the_same_result() {
    for case in cases() {
        let text = stream_text(&case.pieces);
        let (_, whole) = run(&text, &[], &case.opts);
        for (k, _) in text.char_indices().skip(1) {
            let (deltas, msg) = run(&text, &[k], &case.opts);
            assert_eq!(msg, whole, "{}: split at {k}", case.name);
            assert_eq!(
                assemble(&deltas),
                msg,
                "{}: split at {k}: deltas",
                case.name
            );
        }
        // One char at a time.
        let all: Vec<usize> = text.char_indices().map(|(i, _)| i).skip(1).collect();
        let (deltas, msg) = run(&text, &all, &case.opts);
        assert_eq!(msg, whole, "{}: char by char", case.name);
        assert_eq!(
            assemble(&deltas),
            msg,
            "{}: char by char: deltas",
            case.name
        );
    }
}

#[test]
fn prefixes_never_emit_what_the_full_stream_does_not() {
    for case in cases() {
        let text = stream_text(&case.pieces);
        let (full_deltas, _) = run(&text, &[], &case.opts);
        let full = assemble(&full_deltas);
        let mut ends: Vec<usize> = text.char_indices().map(|(i, _)| i).collect();
        ends.push(text.len());
        for &k in &ends {
            // Streaming char by char up to k, no end of stream yet.
            let mut p = ToolCallParser::new(&tools(), case.opts.clone());
            let mut deltas = Vec::new();
            for (i, c) in text[..k].char_indices() {
                deltas.extend(p.push(&text[i..i + c.len_utf8()]));
            }
            let so_far = assemble(&deltas);
            assert_eq!(
                &so_far,
                p.message(),
                "{}: prefix {k}: deltas vs message",
                case.name
            );
            assert!(
                full.content.starts_with(&so_far.content),
                "{}: prefix {k}: content {:?} not a prefix of {:?}",
                case.name,
                so_far.content,
                full.content
            );
            assert!(
                full.reasoning_content
                    .starts_with(&so_far.reasoning_content),
                "{}: prefix {k}: reasoning",
                case.name
            );
            assert!(
                so_far.tool_calls.len() <= full.tool_calls.len(),
                "{}: prefix {k}: calls",
                case.name
            );
            for (a, b) in so_far.tool_calls.iter().zip(&full.tool_calls) {
                assert_eq!(
                    a, b,
                    "{}: prefix {k}: call emitted early differs",
                    case.name
                );
            }
        }
    }
}

#[test]
fn truncated_prefixes_keep_every_character() {
    for case in cases() {
        let text = stream_text(&case.pieces);
        let mut ends: Vec<usize> = text.char_indices().map(|(i, _)| i).collect();
        ends.push(text.len());
        for &k in &ends {
            let (deltas, msg) = run(&text[..k], &[], &case.opts);
            assert_eq!(assemble(&deltas), msg, "{}: prefix {k}: deltas", case.name);
            let (content, reasoning, calls) =
                model_prefix(&case.pieces, k, case.opts.starts_in_reasoning);
            assert_eq!(
                no_ws(&msg.content),
                content,
                "{}: prefix {k} ({:?}): content",
                case.name,
                &text[..k]
            );
            assert_eq!(
                no_ws(&msg.reasoning_content),
                reasoning,
                "{}: prefix {k}: reasoning",
                case.name
            );
            let got: Vec<(String, Value)> = msg
                .tool_calls
                .iter()
                .map(|c| (c.name.clone(), serde_json::from_str(&c.arguments).unwrap()))
                .collect();
            assert_eq!(
                got,
                calls,
                "{}: prefix {k} ({:?}): calls",
                case.name,
                &text[..k]
            );
        }
    }
}

#[test]
fn openai_shapes() {
    let mut p = ToolCallParser::new(&tools(), opts());
    let mut d = p.push("Hi.\n<tool_call>\n<function=read>\n<parameter=path>\na\n</parameter>\n</function>\n</tool_call>");
    d.extend(p.finish());
    let v: Vec<Value> = d.iter().map(Delta::to_openai).collect();
    assert_eq!(v[0], json!({"content": "Hi."}));
    assert_eq!(
        v[1],
        json!({"tool_calls": [{"index": 0, "id": "call_t0", "type": "function",
                                           "function": {"name": "read", "arguments": ""}}]})
    );
    let args: String = v[2..]
        .iter()
        .map(|x| {
            x["tool_calls"][0]["function"]["arguments"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(args, r#"{"path":"a"}"#);
    let m = p.message().to_openai();
    assert_eq!(m["content"], json!("Hi."));
    assert_eq!(
        m["tool_calls"][0]["function"]["arguments"],
        json!(r#"{"path":"a"}"#)
    );
    // Default ids are unique per parser.
    let a = ToolCallParser::parse_complete(
        "<tool_call>\n<function=read>\n</function>",
        &tools(),
        ParserOptions::default(),
    );
    let b = ToolCallParser::parse_complete(
        "<tool_call>\n<function=read>\n</function>",
        &tools(),
        ParserOptions::default(),
    );
    assert_ne!(a.tool_calls[0].id, b.tool_calls[0].id);
    assert!(ParserOptions::for_prompt("<|im_start|>assistant\n<think>\n").starts_in_reasoning);
    assert!(!ParserOptions::for_prompt("<|im_start|>assistant\n").starts_in_reasoning);
}

/// Random mixes of tag fragments, values and text: no panic, the deltas
/// concatenate to the message, the message does not depend on how the text
/// is split, and every call's arguments are a JSON object.
#[test]
fn random_tag_soup_keeps_the_invariants() {
    use rand::{Rng, SeedableRng};
    const FRAGMENTS: &[&str] = &[
        "<tool_call>", "</tool_call>", "<function=read>", "<function=edit>", "<function=search>",
        "<function=", "</function>", "<parameter=path>", "<parameter=offset>", "<parameter=dry_run>",
        "<parameter=edits>", "<parameter=", "</parameter>", "<think>", "</think>", "<tool_", "</para",
        "<", ">", "=", "\n", "\r\n", " ", "\t", "`", "```", "{", "}", "[", "]", "'", "\"", "\\", ",",
        ":", "text", "ü", "🚀", "007", "+5", "1.5e3", "TRUE", "null", "None", "[1, 'a']",
        "{'k': (1,)}", "{\"name\": \"read\", \"arguments\": {}}", "x</parameter>y",
        "<tool_call>\n<function=read>\n<parameter=path>\na\n</parameter>\n</function>\n</tool_call>",
        "\n<parameter=offset>\n7\n", "<tool_call>\n<function=edit>\n", "\n</parameter>\n</function>\n",
    ];
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x7001_ca11);
    for iter in 0..5000 {
        let n = rng.gen_range(0..40);
        let text: String = (0..n)
            .map(|_| FRAGMENTS[rng.gen_range(0..FRAGMENTS.len())])
            .collect();
        let o = ParserOptions {
            starts_in_reasoning: iter % 5 == 0,
            parse_reasoning: iter % 11 != 0,
            ..opts()
        };
        let (deltas, whole) = run(&text, &[], &o);
        assert_eq!(assemble(&deltas), whole, "{text:?}: deltas");
        for c in &whole.tool_calls {
            let v: Value = serde_json::from_str(&c.arguments)
                .unwrap_or_else(|e| panic!("{text:?}: arguments {:?}: {e}", c.arguments));
            assert!(v.is_object(), "{text:?}: arguments not an object");
        }
        let all: Vec<usize> = text.char_indices().map(|(i, _)| i).skip(1).collect();
        let (deltas, msg) = run(&text, &all, &o);
        assert_eq!(assemble(&deltas), msg, "{text:?}: char by char: deltas");
        assert_eq!(msg, whole, "{text:?}: char by char");
        let mut cuts: Vec<usize> = all.iter().copied().filter(|_| rng.gen_bool(0.2)).collect();
        cuts.dedup();
        let (deltas, msg) = run(&text, &cuts, &o);
        assert_eq!(assemble(&deltas), msg, "{text:?}: cuts {cuts:?}: deltas");
        assert_eq!(msg, whole, "{text:?}: cuts {cuts:?}");
    }
}

/// A long value streamed in small pieces stays about linear: text without a
/// `<` is not parsed again, and the scan of an unfinished value resumes
/// where it stopped (re-parsing the call on every piece is quadratic: about
/// 1 s for 256 KiB of text, a minute for 2 MiB, more with many `<`).
#[test]
fn long_value_streams_in_linear_time() {
    let line = "    let total = values.iter().map(|v| v * 2).sum::<u64>() + offset;\n";
    let plain = "0123456789 abcdefghij ".repeat(3);
    let mut value = String::new();
    while value.len() < 1 << 21 {
        value.push_str(if value.len() % 65_536 < 70 {
            line
        } else {
            &plain
        });
    }
    // Then HTML: a `<` every few bytes.
    while value.len() < 5 << 19 {
        value.push_str("<div class=\"row\"><span>a &lt; b</span><br/></div>\n");
    }
    let text = format!(
        "Writing.\n<tool_call>\n<function=write>\n<parameter=path>\nbig.rs\n</parameter>\n<parameter=content>\n{value}\n</parameter>\n</function>\n</tool_call>"
    );
    let start = std::time::Instant::now();
    let mut p = ToolCallParser::new(&tools(), opts());
    let mut deltas = Vec::new();
    let mut i = 0;
    while i < text.len() {
        let j = (i + 4).min(text.len());
        deltas.extend(p.push(&text[i..j]));
        i = j;
    }
    deltas.extend(p.finish());
    let msg = p.into_message();
    assert_eq!(assemble(&deltas), msg);
    assert_eq!(msg.content, "Writing.");
    let args: Value = serde_json::from_str(&msg.tool_calls[0].arguments).unwrap();
    assert_eq!(args, json!({"path": "big.rs", "content": value}));
    eprintln!("2.5 MiB value in 4-byte pieces: {:?}", start.elapsed());
}
