//! The HTTP API in process (no network): request validation and error
//! shapes, and the OpenAI / Anthropic response structure on the tiny model.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use redlite_model::Model;
use redlite_server::{router, AppState, ServerConfig};
use redlite_testkit::fixture;
use serde_json::{json, Value};
use tower::ServiceExt;

fn app(cfg: ServerConfig) -> axum::Router {
    let model = Model::load(&fixture("tiny-s-bf16.gguf")).expect("model");
    router(Arc::new(AppState::new(model, cfg).expect("app")))
}

fn small() -> ServerConfig {
    ServerConfig {
        context: 256,
        max_body_bytes: 64 * 1024,
        ..ServerConfig::default()
    }
}

async fn call(
    app: &axum::Router,
    method: &str,
    path: &str,
    body: Option<&str>,
    headers: &[(&str, &str)],
) -> (StatusCode, String) {
    let mut b = Request::builder().method(method).uri(path);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let req = b
        .body(body.map_or_else(Body::empty, |s| Body::from(s.to_string())))
        .expect("request");
    let resp = app.clone().oneshot(req).await.expect("response");
    let status = resp.status();
    let bytes = resp.into_body().collect().await.expect("body").to_bytes();
    (status, String::from_utf8_lossy(&bytes).into_owned())
}

async fn post(app: &axum::Router, path: &str, body: &str) -> (StatusCode, Value) {
    let (s, text) = call(
        app,
        "POST",
        path,
        Some(body),
        &[("content-type", "application/json")],
    )
    .await;
    let v =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: not JSON ({e}): {text}"));
    (s, v)
}

/// An OpenAI-shaped error with this status, whose message contains `needle`.
fn openai_error(s: StatusCode, v: &Value, status: u16, needle: &str) {
    assert_eq!(s.as_u16(), status, "{v}");
    let e = &v["error"];
    let msg = e["message"]
        .as_str()
        .unwrap_or_else(|| panic!("no message: {v}"));
    assert!(msg.contains(needle), "'{msg}' lacks '{needle}'");
    assert!(e["type"].is_string(), "{v}");
    assert!(e.get("param").is_some() && e.get("code").is_some(), "{v}");
}

fn chat(extra: Value) -> String {
    let mut b = json!({
        "model": "anything",
        "messages": [{"role": "user", "content": "hello"}],
        "max_tokens": 4,
        "temperature": 0,
    });
    if let (Value::Object(m), Value::Object(x)) = (&mut b, extra) {
        m.extend(x);
    }
    b.to_string()
}

#[tokio::test]
async fn bad_requests_get_openai_errors() {
    let a = app(small());
    let p = "/v1/chat/completions";
    let (s, v) = post(&a, p, "{not json").await;
    openai_error(s, &v, 400, "not valid JSON");
    let (s, v) = post(&a, p, "[1,2]").await;
    openai_error(s, &v, 400, "JSON object");
    let (s, v) = post(&a, p, &chat(json!({"temperature": "hot"}))).await;
    openai_error(s, &v, 400, "'temperature' must be a number");
    assert_eq!(v["error"]["param"], "temperature");
    let (s, v) = post(&a, p, &chat(json!({"max_tokens": -3}))).await;
    openai_error(s, &v, 400, "max_tokens");
    let (s, v) = post(&a, p, &chat(json!({"messages": []}))).await;
    openai_error(s, &v, 400, "must not be empty");
    let (s, v) = post(&a, p, &chat(json!({"messages": "hi"}))).await;
    openai_error(s, &v, 400, "'messages' must be an array");
    let (s, v) = post(&a, p, r#"{"max_tokens": 3}"#).await;
    openai_error(s, &v, 400, "'messages' is required");
    let (s, v) = post(&a, p, &chat(json!({"messages": [{"content": "no role"}]}))).await;
    openai_error(s, &v, 400, "role");
    let (s, v) = post(
        &a,
        p,
        &chat(json!({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]})),
    )
    .await;
    openai_error(s, &v, 400, "");
    // The prompt does not fit the context.
    let long = "word ".repeat(400);
    let (s, v) = post(
        &a,
        p,
        &chat(json!({"messages": [{"role": "user", "content": long}]})),
    )
    .await;
    openai_error(s, &v, 400, "the request exceeds the available context size");
    assert_eq!(v["error"]["code"], "context_length_exceeded");
    // max_tokens beyond the whole context.
    let (s, v) = post(&a, p, &chat(json!({"max_tokens": 100000}))).await;
    openai_error(s, &v, 400, "beyond the context size");
    // Invalid tool schemas and tool choices.
    for tools in [
        json!([{"type": "function"}]),
        json!([{"type": "function", "function": {"name": ""}}]),
        json!([{"type": "function", "function": {"name": "f", "parameters": "x"}}]),
        json!([{"type": "retrieval"}]),
        json!("nope"),
    ] {
        let (s, v) = post(&a, p, &chat(json!({"tools": tools}))).await;
        openai_error(s, &v, 400, "tools");
    }
    let tools = json!([{"type": "function", "function": {"name": "read", "parameters": {"type": "object"}}}]);
    let (s, v) = post(
        &a,
        p,
        &chat(json!({"tools": tools, "tool_choice": {"type": "function", "function": {"name": "write"}}})),
    )
    .await;
    openai_error(s, &v, 400, "not among the tools");
    let (s, v) = post(&a, p, &chat(json!({"tool_choice": "required"}))).await;
    openai_error(s, &v, 400, "no tools");
    let (s, v) = post(&a, p, &chat(json!({"n": 2}))).await;
    openai_error(s, &v, 400, "n = 1");
    let (s, v) = post(
        &a,
        p,
        &chat(json!({"response_format": {"type": "json_schema",
            "json_schema": {"schema": {"type": "object", "required": 3}}}})),
    )
    .await;
    openai_error(s, &v, 400, "response_format");
    let (s, v) = post(&a, p, &chat(json!({"top_logprobs": 30, "logprobs": true}))).await;
    openai_error(s, &v, 400, "at most 20");
    let (s, v) = post(&a, p, &chat(json!({"top_p": 0}))).await;
    openai_error(s, &v, 400, "top_p");
    // Oversized body: 413 in the same shape.
    let big = chat(json!({"messages": [{"role": "user", "content": "x".repeat(100_000)}]}));
    let (s, v) = post(&a, p, &big).await;
    openai_error(s, &v, 413, "larger than");
    // Unknown route.
    let (s, text) = call(&a, "GET", "/v2/nothing", None, &[]).await;
    let v: Value = serde_json::from_str(&text).expect("json");
    openai_error(s, &v, 404, "no route");
    // Completions and tokenize validate too.
    let (s, v) = post(&a, "/v1/completions", r#"{"prompt": 5}"#).await;
    openai_error(s, &v, 400, "'prompt'");
    let (s, v) = post(&a, "/v1/completions", r#"{"prompt": [5, 99999]}"#).await;
    openai_error(s, &v, 400, "token id below");
    // The tiny vocabulary has FIM tokens: `suffix` is fill-in-the-middle.
    let (s, v) = post(
        &a,
        "/v1/completions",
        r#"{"prompt": "a", "suffix": "b", "max_tokens": 1}"#,
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let (_, t) = post(
        &a,
        "/tokenize",
        r#"{"content": "<|fim_prefix|>a<|fim_suffix|>b<|fim_middle|>"}"#,
    )
    .await;
    assert_eq!(
        v["usage"]["prompt_tokens"].as_u64(),
        Some(t["tokens"].as_array().expect("ids").len() as u64)
    );
    let (s, v) = post(&a, "/detokenize", r#"{"tokens": [1, -1]}"#).await;
    openai_error(s, &v, 400, "tokens[1]");
    // Smaller gaps: unknown roles, tool parameters that are not an
    // object schema, counts beyond u32, stop strings too long together.
    let (s, v) = post(
        &a,
        p,
        &chat(json!({"messages": [{"role": "wizard", "content": "hi"}]})),
    )
    .await;
    openai_error(s, &v, 400, "'messages[0].role' is 'wizard'");
    assert_eq!(v["error"]["param"], "messages");
    for params in [
        json!({"type": "string"}),
        json!([1]),
        json!({"type": ["object"]}),
    ] {
        let tools = json!([{"type": "function", "function": {"name": "f", "parameters": params}}]);
        let (s, v) = post(&a, p, &chat(json!({"tools": tools}))).await;
        openai_error(s, &v, 400, "'function.parameters'");
        assert_eq!(v["error"]["param"], "tools");
    }
    for (field, val) in [
        ("max_tokens", json!(1e30)),
        ("max_tokens", json!(4294967296u64)),
        ("max_completion_tokens", json!(18446744073709551615u64)),
        ("top_k", json!(1e20)),
    ] {
        let (s, v) = post(&a, p, &chat(json!({ field: val }))).await;
        openai_error(s, &v, 400, "must be at most 4294967295");
        assert_eq!(v["error"]["param"], field, "{v}");
    }
    let (s, v) = post(
        &a,
        p,
        &chat(json!({"stop": ["x".repeat(3000), "y".repeat(3000)]})),
    )
    .await;
    openai_error(s, &v, 400, "6000 bytes together");
    assert_eq!(v["error"]["param"], "stop");
    let (s, v) = post(&a, p, &chat(json!({"stop": vec!["s"; 17]}))).await;
    openai_error(s, &v, 400, "at most 16");
    // Unknown fields are skipped, whatever they hold; a broken one is
    // still a JSON error.
    let (s, v) = post(
        &a,
        p,
        &chat(json!({"x_unknown": {"deep": [1, 2.5, "s", null, {"a": [true]}]}, "y": "1e400"})),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let (s, v) = post(&a, p, r#"{"junk": [1, 2,, 3], "messages": []}"#).await;
    openai_error(s, &v, 400, "not valid JSON");
    let (s, v) = post(&a, p, &format!("{} trailing", chat(json!({})))).await;
    openai_error(s, &v, 400, "not valid JSON");
    // The server keeps serving after all of that.
    let (s, v) = post(&a, p, &chat(json!({}))).await;
    assert_eq!(s, StatusCode::OK, "{v}");
}

#[tokio::test]
async fn api_key_is_enforced_except_on_health_and_models() {
    let a = app(ServerConfig {
        api_key: Some("sekret".into()),
        ..small()
    });
    let p = "/v1/chat/completions";
    let ct = ("content-type", "application/json");
    for hdrs in [
        vec![ct],
        vec![ct, ("authorization", "Bearer wrong")],
        vec![ct, ("authorization", "sekret")],
    ] {
        let (s, text) = call(&a, "POST", p, Some(&chat(json!({}))), &hdrs).await;
        let v: Value = serde_json::from_str(&text).expect("json");
        openai_error(s, &v, 401, "API key");
        assert_eq!(v["error"]["code"], "invalid_api_key");
    }
    let (s, _) = call(
        &a,
        "POST",
        p,
        Some(&chat(json!({}))),
        &[ct, ("authorization", "Bearer sekret")],
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    let (s, _) = call(
        &a,
        "POST",
        p,
        Some(&chat(json!({}))),
        &[ct, ("x-api-key", "sekret")],
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    // Anthropic route: Anthropic error shape.
    let (s, text) = call(&a, "POST", "/v1/messages", Some("{}"), &[ct]).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    let v: Value = serde_json::from_str(&text).expect("json");
    assert_eq!(v["type"], "error");
    assert_eq!(v["error"]["type"], "authentication_error");
    for open in ["/health", "/v1/models"] {
        let (s, _) = call(&a, "GET", open, None, &[]).await;
        assert_eq!(s, StatusCode::OK, "{open}");
    }
    let (s, _) = call(&a, "GET", "/metrics", None, &[]).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn anthropic_errors_have_anthropic_shape() {
    let a = app(small());
    let p = "/v1/messages";
    let ok_msgs = json!([{"role": "user", "content": "hi"}]);
    let cases = [
        ("{oops", "not valid JSON"),
        (
            r#"{"messages": [{"role": "user", "content": "hi"}]}"#,
            "'max_tokens' is required",
        ),
        (r#"{"max_tokens": 5, "messages": []}"#, "must not be empty"),
        (
            r#"{"max_tokens": 5, "messages": [{"role": "system", "content": "x"}]}"#,
            "role",
        ),
    ];
    for (body, needle) in cases {
        let (s, v) = post(&a, p, body).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
        assert_eq!(v["type"], "error", "{v}");
        assert_eq!(v["error"]["type"], "invalid_request_error");
        let m = v["error"]["message"].as_str().expect("message");
        assert!(m.contains(needle), "'{m}' lacks '{needle}'");
    }
    for schema in [json!("bad"), json!({"type": "array"})] {
        let body = json!({"max_tokens": 5, "messages": ok_msgs,
            "tools": [{"name": "t", "input_schema": schema}]});
        let (s, v) = post(&a, p, &body.to_string()).await;
        assert_eq!(s, StatusCode::BAD_REQUEST);
        assert!(v["error"]["message"]
            .as_str()
            .expect("m")
            .contains("invalid tool schema"));
    }
    for (body, needle) in [
        (
            json!({"max_tokens": 5, "messages": [{"role": "wizard", "content": "x"}]}),
            "'wizard'",
        ),
        (
            json!({"max_tokens": 1e30, "messages": ok_msgs}),
            "must be at most 4294967295",
        ),
        (
            json!({"max_tokens": 5, "messages": ok_msgs, "stop_sequences": ["z".repeat(5000)]}),
            "bytes together",
        ),
    ] {
        let (s, v) = post(&a, p, &body.to_string()).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
        assert_eq!(v["type"], "error", "{v}");
        let m = v["error"]["message"].as_str().expect("message");
        assert!(m.contains(needle), "'{m}' lacks '{needle}'");
    }
    let body =
        json!({"max_tokens": 5, "messages": [{"role": "user", "content": "x ".repeat(500)}]});
    let (s, v) = post(&a, p, &body.to_string()).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert!(v["error"]["message"]
        .as_str()
        .expect("m")
        .contains("context"));
}

#[tokio::test]
async fn responses_have_the_documented_shape() {
    let a = app(small());
    // Chat, non-streaming, with logprobs.
    let (s, v) = post(
        &a,
        "/v1/chat/completions",
        &chat(json!({"logprobs": true, "top_logprobs": 3, "max_tokens": 5})),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(
        v["model"],
        "anything".replace("anything", "qwen3-coder-next")
    );
    let c = &v["choices"][0];
    assert_eq!(c["message"]["role"], "assistant");
    assert!(["stop", "length"].contains(&c["finish_reason"].as_str().expect("fr")));
    let lp = c["logprobs"]["content"].as_array().expect("logprobs");
    assert_eq!(
        lp.len() as u64,
        v["usage"]["completion_tokens"].as_u64().expect("n")
    );
    for e in lp {
        let top = e["top_logprobs"].as_array().expect("top");
        assert_eq!(top.len(), 3);
        // Greedy: the chosen token is the most likely one.
        assert!(
            (e["logprob"].as_f64().expect("lp") - top[0]["logprob"].as_f64().expect("lp")).abs()
                < 1e-6
        );
    }
    let u = &v["usage"];
    assert_eq!(
        u["total_tokens"].as_u64(),
        Some(u["prompt_tokens"].as_u64().expect("p") + u["completion_tokens"].as_u64().expect("c"))
    );
    assert!(u["prompt_tokens_details"]["cached_tokens"].is_u64());

    // Streaming with usage: role chunk first, finish chunk, usage chunk, [DONE].
    let (s, text) = call(
        &a,
        "POST",
        "/v1/chat/completions",
        Some(&chat(
            json!({"stream": true, "stream_options": {"include_usage": true}}),
        )),
        &[("content-type", "application/json")],
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    let data: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .collect();
    assert_eq!(*data.last().expect("done"), "[DONE]");
    let chunks: Vec<Value> = data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).expect("chunk json"))
        .collect();
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let usage = chunks.last().expect("usage");
    assert_eq!(usage["choices"], json!([]));
    assert!(usage["usage"]["prompt_tokens"].as_u64().expect("p") > 0);
    let fin = &chunks[chunks.len() - 2];
    assert!(fin["choices"][0]["finish_reason"].is_string());
    assert!(chunks[..chunks.len() - 1]
        .iter()
        .all(|c| c["usage"].is_null()));

    // Completions with echo and logprobs.
    let (s, v) = post(
        &a,
        "/v1/completions",
        r#"{"prompt": "def f(", "max_tokens": 3, "temperature": 0, "echo": true, "logprobs": 2}"#,
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["object"], "text_completion");
    assert!(v["choices"][0]["text"]
        .as_str()
        .expect("text")
        .starts_with("def f("));
    assert_eq!(
        v["choices"][0]["logprobs"]["tokens"]
            .as_array()
            .expect("t")
            .len(),
        3
    );

    // Tokenize / detokenize round trip.
    let (_, t) = post(&a, "/tokenize", r#"{"content": "Hello, world"}"#).await;
    let ids = t["tokens"].clone();
    let (_, d) = post(&a, "/detokenize", &json!({"tokens": ids}).to_string()).await;
    assert_eq!(d["content"], "Hello, world");
    let (_, t) = post(&a, "/tokenize", r#"{"content": "Hi", "with_pieces": true}"#).await;
    assert!(t["tokens"][0]["piece"].is_string());

    // Anthropic, non-streaming and streaming.
    let body = json!({"model": "x", "max_tokens": 4, "temperature": 0, "system": "be brief",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]});
    let (s, v) = post(&a, "/v1/messages", &body.to_string()).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["type"], "message");
    assert!(["end_turn", "max_tokens"].contains(&v["stop_reason"].as_str().expect("sr")));
    assert!(v["usage"]["cache_read_input_tokens"].is_u64());
    let mut sb = body.clone();
    sb["stream"] = json!(true);
    let (_, text) = call(
        &a,
        "POST",
        "/v1/messages",
        Some(&sb.to_string()),
        &[("content-type", "application/json")],
    )
    .await;
    let events: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("event: "))
        .collect();
    assert_eq!(events.first(), Some(&"message_start"));
    assert_eq!(events.last(), Some(&"message_stop"));
    assert!(events.contains(&"message_delta"));

    // Metrics in Prometheus text. The last event reaches the client just
    // before the compute thread publishes its counts, so allow it a moment
    // (bounded) to show the slot free again.
    let mut m = String::new();
    for _ in 0..200 {
        let (s, text) = call(&a, "GET", "/metrics", None, &[]).await;
        assert_eq!(s, StatusCode::OK);
        m = text;
        if m.contains("redlite_requests_running 0") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(m.contains("redlite_requests_running 0"), "{m}");
    assert!(m.contains("redlite_generation_tokens_total"));
}
