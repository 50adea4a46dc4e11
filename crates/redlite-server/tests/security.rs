//! Browser and DNS-rebinding safety, over a real loopback socket: what a
//! hostile page can send (cross-origin preflights, `text/plain` POSTs, a
//! rebinding `Host`) gets the documented answer, and the API key check
//! takes the scheme in any case and refuses keys of the wrong length.

mod common;

use common::{chat_body, request, start, JSON};
use redlite_server::ServerConfig;

fn small() -> ServerConfig {
    ServerConfig {
        context: 256,
        ..ServerConfig::default()
    }
}

#[test]
fn hostile_pages_get_nothing_by_default() {
    let s = start(small());
    let a = s.addr;
    let chat = "/v1/chat/completions";

    // Cross-origin preflight: refused, and no CORS header that would let a
    // browser go on.
    let r = request(
        a,
        "OPTIONS",
        chat,
        &[
            ("Origin", "https://evil.example"),
            ("Access-Control-Request-Method", "POST"),
            ("Access-Control-Request-Headers", "content-type"),
        ],
        "",
    );
    assert_eq!(r.status, 403, "{r:?}");
    assert!(r.header("access-control-allow-origin").is_none(), "{r:?}");

    // A "simple" cross-site POST (text/plain, no preflight) from a page.
    let r = request(
        a,
        "POST",
        chat,
        &[
            ("Origin", "https://evil.example"),
            ("Content-Type", "text/plain"),
        ],
        &chat_body(1),
    );
    assert_eq!(r.status, 403, "{r:?}");
    assert!(r.header("access-control-allow-origin").is_none());
    // The same without an Origin (a sandboxed page sends "null", a form
    // may send none): the content type alone refuses it.
    for ct in [
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
    ] {
        let r = request(a, "POST", chat, &[("Content-Type", ct)], &chat_body(1));
        assert_eq!(r.status, 415, "{ct}: {r:?}");
        let v = r.json();
        assert!(v["error"]["message"]
            .as_str()
            .expect("message")
            .contains("application/json"));
    }
    let r = request(a, "POST", "/v1/messages", &[], "{}");
    assert_eq!(r.status, 415, "{r:?}");
    assert_eq!(r.json()["type"], "error", "Anthropic shape: {r:?}");

    // DNS rebinding: the page's requests carry the attacker's name.
    for path in ["/health", "/v1/models"] {
        let host = format!("attacker.example:{}", a.port());
        let r = request(a, "GET", path, &[("Host", &host)], "");
        assert_eq!(r.status, 403, "{path}: {r:?}");
        assert!(r.json()["error"]["message"]
            .as_str()
            .expect("message")
            .contains("attacker.example"));
    }
    let host = format!("attacker.example:{}", a.port());
    let r = request(a, "POST", chat, &[("Host", &host), JSON], &chat_body(1));
    assert_eq!(r.status, 403, "{r:?}");
    // The server's own names still work, with its port only.
    for host in [
        format!("localhost:{}", a.port()),
        format!("127.0.0.1:{}", a.port()),
        format!("[::1]:{}", a.port()),
    ] {
        let r = request(a, "GET", "/health", &[("Host", &host)], "");
        assert_eq!(r.status, 200, "{host}: {r:?}");
    }
    let other = format!("localhost:{}", a.port().wrapping_add(1).max(1));
    let r = request(a, "GET", "/health", &[("Host", &other)], "");
    assert_eq!(r.status, 403, "{r:?}");

    // No CORS headers on ordinary answers; a JSON POST from a client works.
    let r = request(a, "POST", chat, &[JSON], &chat_body(1));
    assert_eq!(r.status, 200, "{r:?}");
    assert!(r.header("access-control-allow-origin").is_none());
    assert!(r
        .headers
        .iter()
        .all(|(k, _)| !k.to_ascii_lowercase().starts_with("access-control-")));
}

#[test]
fn allowed_hosts_and_cors_origins() {
    let s = start(ServerConfig {
        cors_origins: vec!["https://app.example".into()],
        allowed_hosts: vec!["llm.internal".into()],
        ..small()
    });
    let a = s.addr;
    let chat = "/v1/chat/completions";
    let r = request(
        a,
        "OPTIONS",
        chat,
        &[
            ("Origin", "https://app.example"),
            ("Access-Control-Request-Method", "POST"),
            (
                "Access-Control-Request-Headers",
                "content-type,authorization",
            ),
        ],
        "",
    );
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some("https://app.example")
    );
    let r = request(
        a,
        "POST",
        chat,
        &[("Origin", "https://app.example"), JSON],
        &chat_body(1),
    );
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some("https://app.example")
    );
    // Another origin: refused, no CORS header.
    for method in ["OPTIONS", "POST"] {
        let r = request(
            a,
            method,
            chat,
            &[
                ("Origin", "https://other.example"),
                ("Access-Control-Request-Method", "POST"),
                JSON,
            ],
            &chat_body(1),
        );
        assert_eq!(r.status, 403, "{method}: {r:?}");
        assert!(r.header("access-control-allow-origin").is_none());
    }
    // A reverse proxy's name, with or without a port.
    for host in ["llm.internal", "LLM.internal:443"] {
        let r = request(a, "GET", "/health", &[("Host", host)], "");
        assert_eq!(r.status, 200, "{host}: {r:?}");
    }
}

#[test]
fn api_key_scheme_and_length() {
    let s = start(ServerConfig {
        api_key: Some("sekret-key".into()),
        ..small()
    });
    let a = s.addr;
    let chat = "/v1/chat/completions";
    let ok = |auth: &str| {
        let r = request(
            a,
            "POST",
            chat,
            &[("Authorization", auth), JSON],
            &chat_body(1),
        );
        r.status
    };
    // The scheme is case-insensitive (RFC 7235).
    for auth in [
        "Bearer sekret-key",
        "bearer sekret-key",
        "BEARER sekret-key",
        "BeArEr   sekret-key",
    ] {
        assert_eq!(ok(auth), 200, "{auth}");
    }
    // Wrong keys of every length, and other schemes.
    for auth in [
        "Bearer sekret-ke",
        "Bearer sekret-keyy",
        "Bearer s",
        "Bearer ",
        "Bearer sekret-kez",
        "Basic sekret-key",
        "sekret-key",
    ] {
        assert_eq!(ok(auth), 401, "{auth}");
    }
    let r = request(
        a,
        "POST",
        "/v1/messages",
        &[("x-api-key", "nope"), JSON],
        "{}",
    );
    assert_eq!(r.status, 401);
    assert_eq!(r.json()["error"]["type"], "authentication_error");
}

#[test]
fn error_answers_are_json_in_the_route_s_shape() {
    let s = start(ServerConfig {
        max_body_bytes: 1000,
        ..small()
    });
    let a = s.addr;
    // 413 with a declared Content-Length, on both APIs.
    let big = "x".repeat(5000);
    let r = request(a, "POST", "/v1/chat/completions", &[JSON], &big);
    assert_eq!(r.status, 413, "{r:?}");
    assert!(r.json()["error"]["message"]
        .as_str()
        .expect("message")
        .contains("1000 bytes"));
    let r = request(a, "POST", "/v1/messages", &[JSON], &big);
    assert_eq!(r.status, 413, "{r:?}");
    assert_eq!(r.json()["error"]["type"], "request_too_large");
    // 405 with a body.
    let r = request(a, "GET", "/v1/chat/completions", &[], "");
    assert_eq!(r.status, 405, "{r:?}");
    assert!(r.json()["error"]["message"]
        .as_str()
        .expect("message")
        .contains("GET"));
    let r = request(a, "GET", "/v1/messages", &[], "");
    assert_eq!(r.status, 405, "{r:?}");
    assert_eq!(r.json()["type"], "error");
}
