//! Reuse across conversations: two chats of one agent (the same long system
//! prompt and tools, different first user messages) — the second resumes
//! from the snapshot taken where the system prompt ends, and answers as a
//! fresh run does.

use std::sync::Arc;

use axum::body::Body;
use axum::http::Request;
use http_body_util::BodyExt;
use redlite_model::Model;
use redlite_server::{router, AppState, ServerConfig};
use redlite_testkit::fixture;
use serde_json::{json, Map, Value};
use tower::ServiceExt;

fn app() -> (Arc<AppState>, axum::Router) {
    let model = Model::load(&fixture("tiny-s-bf16.gguf")).expect("model");
    let cfg = ServerConfig {
        context: 4096,
        ..ServerConfig::default()
    };
    let state = Arc::new(AppState::new(model, cfg).expect("app"));
    (state.clone(), router(state))
}

async fn call(app: &axum::Router, method: &str, path: &str, body: Option<Value>) -> String {
    let req = Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", "application/json")
        .body(body.map_or_else(Body::empty, |b| Body::from(b.to_string())))
        .expect("request");
    let resp = app.clone().oneshot(req).await.expect("response");
    assert!(resp.status().is_success(), "{path}: {}", resp.status());
    let bytes = resp.into_body().collect().await.expect("body").to_bytes();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// A long agent system prompt: many lines of code-like instructions.
fn system_prompt() -> String {
    let mut s = String::from("You are a coding agent working in a Python repository.\n");
    for i in 0..42 {
        s.push_str(&format!(
            "def helper_{i}(self, value, count={i}):\n    return self.items[value] + count\n"
        ));
    }
    s
}

fn tools() -> Vec<Value> {
    vec![json!({"type": "function", "function": {
        "name": "read_file",
        "description": "Read a file of the repository.",
        "parameters": {"type": "object",
            "properties": {"path": {"type": "string", "description": "Path to read."}},
            "required": ["path"]}
    }})]
}

fn chat(user: &str) -> Value {
    json!({
        "model": "m",
        "messages": [
            {"role": "system", "content": system_prompt()},
            {"role": "user", "content": user},
        ],
        "tools": tools(),
        "max_tokens": 4,
        "temperature": 0,
        "logprobs": true,
        "top_logprobs": 5,
    })
}

/// (cached tokens, [(token, logprob, top logprobs)]) of a chat response.
fn answer(text: &str) -> (u64, Vec<(String, f64, Vec<f64>)>) {
    let v: Value = serde_json::from_str(text).expect("JSON");
    let cached = v["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .expect("cached_tokens");
    let content = v["choices"][0]["logprobs"]["content"]
        .as_array()
        .expect("logprobs")
        .iter()
        .map(|e| {
            (
                e["token"].as_str().expect("token").to_string(),
                e["logprob"].as_f64().expect("logprob"),
                e["top_logprobs"]
                    .as_array()
                    .expect("top")
                    .iter()
                    .map(|t| t["logprob"].as_f64().expect("lp"))
                    .collect(),
            )
        })
        .collect();
    (cached, content)
}

#[tokio::test]
async fn a_second_conversation_resumes_from_the_shared_system_prompt() {
    let (state, a) = app();
    // The system prompt's length in tokens, rendered on its own (with the
    // tools) by the template: where the second conversation can resume.
    let sys = json!({"role": "system", "content": system_prompt()});
    let text = state
        .template
        .render(&[sys], Some(&tools()), false, &Map::new())
        .expect("render");
    let sys_tokens = state.tokenizer.tokenize(&text, false, true).len() as u64;
    assert!(
        (1200..2400).contains(&sys_tokens),
        "system prompt of {sys_tokens} tokens"
    );

    let first = call(
        &a,
        "POST",
        "/v1/chat/completions",
        Some(chat("Add a test.")),
    )
    .await;
    assert_eq!(answer(&first).0, 0);
    let second_q = chat("Explain what helper_3 returns, briefly.");
    let second = call(&a, "POST", "/v1/chat/completions", Some(second_q.clone())).await;
    let (cached, got) = answer(&second);
    eprintln!("system prompt {sys_tokens} tokens, second conversation cached {cached}");
    assert!(
        cached >= sys_tokens,
        "cached {cached} < system prompt {sys_tokens}"
    );

    // A fresh server answers the second conversation alike.
    let (_, b) = app();
    let fresh = call(&b, "POST", "/v1/chat/completions", Some(second_q)).await;
    let (fresh_cached, want) = answer(&fresh);
    assert_eq!(fresh_cached, 0);
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g.0, w.0, "token {i}");
        assert!((g.1 - w.1).abs() < 1e-4, "token {i}: {} vs {}", g.1, w.1);
        for (x, y) in g.2.iter().zip(&w.2) {
            assert!((x - y).abs() < 1e-4, "token {i} top: {x} vs {y}");
        }
    }

    // The hit is counted under its kind; the snapshots share KV blocks.
    let m = call(&a, "GET", "/metrics", None).await;
    assert!(
        m.contains("redlite_state_restore_hits_total{kind=\"message_boundary\"} 1"),
        "{m}"
    );
    let gauge = |name: &str| -> f64 {
        m.lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {m}"))
    };
    let (unique, logical) = (
        gauge("redlite_state_snapshot_bytes"),
        gauge("redlite_state_snapshot_logical_bytes"),
    );
    assert!(unique > 0.0 && unique < logical, "{unique} vs {logical}");
}
