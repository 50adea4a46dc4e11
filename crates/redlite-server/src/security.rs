//! What stands between the server and a web page the user happens to visit.
//!
//! The server listens on loopback by default, which keeps other machines
//! out but not the user's own browser: any page can send requests to
//! `http://127.0.0.1:8080`, and by DNS rebinding (a name the attacker
//! controls re-pointed at 127.0.0.1) it can even read the answers as if it
//! were same-origin. Four checks close that, in this order:
//!
//! 1. **Host** ([`host_check`]): bound to a loopback address, a request
//!    whose `Host` is not `localhost`, a loopback literal or a name given
//!    with `--allowed-host`, with the bound port, gets 403. A rebinding
//!    page's requests carry the attacker's name, so they stop here. A
//!    request with no `Host` (not HTTP/1.1, so not a browser) passes.
//! 2. **Origin**: a request carrying an `Origin` that is neither allowed
//!    by `--cors-origin` nor the server's own gets 403, so a cross-site
//!    page cannot even trigger work whose answer it cannot read.
//! 3. **CORS**: no `Access-Control-Allow-*` headers at all unless
//!    `--cors-origin` names origins (`*` only with `--cors-allow-any`).
//! 4. **Content type** ([`require_json`]): API POSTs need
//!    `Content-Type: application/json`, which a page can only send after a
//!    CORS preflight; a `text/plain` or form POST (a "simple" request, no
//!    preflight) gets 415.
//!
//! The API key (`--api-key`, [`key_matches`]) is the only check against
//! other local users and other machines when the server listens beyond
//! loopback. Both sides are hashed (SHA-256) and the digests compared in
//! constant time, so neither the key's bytes nor its length leak through
//! timing; the `Bearer` scheme is matched case-insensitively.

use std::net::{IpAddr, SocketAddr};

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};

use crate::error::{ApiError, Flavor};
use crate::App;

/// The error shape a path's clients parse.
pub fn flavor_of(path: &str) -> Flavor {
    if path.starts_with("/v1/messages") {
        Flavor::Anthropic
    } else {
        Flavor::OpenAi
    }
}

/// Split a `Host` value into (lowercase name without brackets or a
/// trailing dot, port).
fn split_host(h: &str) -> Option<(String, Option<u16>)> {
    let h = h.trim();
    let (name, port) = if let Some(rest) = h.strip_prefix('[') {
        let end = rest.find(']')?;
        let after = &rest[end + 1..];
        let port = match after.strip_prefix(':') {
            Some(p) => Some(p.parse().ok()?),
            None if after.is_empty() => None,
            None => return None,
        };
        (&rest[..end], port)
    } else {
        match h.rsplit_once(':') {
            Some((n, p)) if !n.contains(':') => (n, Some(p.parse().ok()?)),
            Some(_) => return None,
            None => (h, None),
        }
    };
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    (!name.is_empty()).then_some((name, port))
}

/// Whether a `Host` value names this server. `bound`: the listening
/// address (`None`: not known, e.g. in-process tests; any port is taken).
pub fn host_allowed(host: &str, bound: Option<SocketAddr>, allowed: &[String]) -> bool {
    if bound.is_some_and(|b| !b.ip().is_loopback()) {
        // Listening beyond loopback: the API key is the protection.
        return true;
    }
    let Some((name, port)) = split_host(host) else {
        return false;
    };
    if allowed.iter().any(|a| a.eq_ignore_ascii_case(&name)) {
        return true;
    }
    let local = name == "localhost"
        || name
            .parse::<IpAddr>()
            .is_ok_and(|ip| ip.is_loopback() || bound.is_some_and(|b| b.ip() == ip));
    let port_ok = match bound {
        None => true,
        Some(b) => port.unwrap_or(80) == b.port(),
    };
    local && port_ok
}

/// Whether an `Origin` is allowed: listed by `--cors-origin` (or any with
/// `*`), or the server's own (`http://<allowed host>`).
pub fn origin_allowed(
    origin: &str,
    cors: &[String],
    bound: Option<SocketAddr>,
    allowed: &[String],
) -> bool {
    let o = origin.trim().trim_end_matches('/');
    if cors.iter().any(|c| c == "*" || c.eq_ignore_ascii_case(o)) {
        return true;
    }
    match o.strip_prefix("http://") {
        Some(host) if bound.is_some_and(|b| b.ip().is_loopback()) || bound.is_none() => {
            host_allowed(host, bound, allowed)
        }
        // Beyond loopback, only listed origins.
        _ => false,
    }
}

/// The Host and Origin checks: `Some(403 answer)` when the request must
/// be refused.
pub fn check_host_and_origin(
    headers: &HeaderMap,
    path: &str,
    bound: Option<SocketAddr>,
    allowed_hosts: &[String],
    cors: &[String],
) -> Option<Response> {
    let flavor = flavor_of(path);
    if let Some(h) = headers.get(header::HOST) {
        let host = h.to_str().unwrap_or("");
        if !host_allowed(host, bound, allowed_hosts) {
            tracing::warn!(
                "refused a request for Host '{host}' (not this server's name; --allowed-host adds one)"
            );
            return Some(
                ApiError::forbidden(format!(
                    "the Host '{host}' is not this server's address; a reverse proxy's name can be \
                     allowed with --allowed-host"
                ))
                .with_flavor(flavor)
                .into_response(),
            );
        }
    }
    if let Some(o) = headers.get(header::ORIGIN) {
        let origin = o.to_str().unwrap_or("");
        if !origin_allowed(origin, cors, bound, allowed_hosts) {
            tracing::warn!(
                "refused a request from origin '{origin}' (not allowed by --cors-origin)"
            );
            return Some(
                ApiError::forbidden(format!(
                    "requests from the origin '{origin}' are not allowed (the server's --cors-origin)"
                ))
                .with_flavor(flavor)
                .into_response(),
            );
        }
    }
    None
}

/// Middleware on every route: the Host and Origin checks.
pub async fn host_check(State(app): State<App>, req: Request, next: Next) -> Response {
    if let Some(r) = check_host_and_origin(
        req.headers(),
        req.uri().path(),
        app.bound.get().copied(),
        &app.cfg.allowed_hosts,
        &app.cfg.cors_origins,
    ) {
        return r;
    }
    next.run(req).await
}

/// Middleware on the API routes: POSTs must be `application/json`.
pub async fn require_json(req: Request, next: Next) -> Response {
    if req.method() == Method::POST && !is_json(req.headers()) {
        let got = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("none");
        return ApiError::unsupported_media(format!(
            "the request body must be sent with 'Content-Type: application/json' (got '{got}')"
        ))
        .with_flavor(flavor_of(req.uri().path()))
        .into_response();
    }
    next.run(req).await
}

fn is_json(h: &HeaderMap) -> bool {
    h.get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"))
}

/// The key a request carries: `Authorization: Bearer <key>` (scheme in any
/// case) or `x-api-key: <key>`.
pub fn presented_keys(h: &HeaderMap) -> Vec<&str> {
    let mut keys = Vec::new();
    if let Some(v) = h.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()) {
        let v = v.trim();
        if let Some((scheme, key)) = v.split_once(char::is_whitespace) {
            if scheme.eq_ignore_ascii_case("bearer") {
                keys.push(key.trim());
            }
        }
    }
    if let Some(v) = h.get("x-api-key").and_then(|v| v.to_str().ok()) {
        keys.push(v.trim());
    }
    keys
}

/// Compare a presented key with the configured one in time that depends
/// on neither: both are hashed first, then every digest byte is compared.
pub fn key_matches(presented: &str, key: &str) -> bool {
    let a = Sha256::digest(presented.as_bytes());
    let b = Sha256::digest(key.as_bytes());
    a.iter()
        .zip(b.iter())
        .fold(0u8, |acc, (x, y)| acc | (x ^ y))
        == 0
}

/// Middleware on the API routes: `--api-key`.
pub async fn auth(State(app): State<App>, req: Request, next: Next) -> Response {
    if let Some(key) = &app.cfg.api_key {
        let keys = presented_keys(req.headers());
        // Every presented key is compared (no early exit on the first).
        let ok = keys.iter().fold(false, |ok, k| key_matches(k, key) | ok);
        if !ok {
            return ApiError::unauthorized()
                .with_flavor(flavor_of(req.uri().path()))
                .into_response();
        }
    }
    next.run(req).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts() {
        let b: SocketAddr = "127.0.0.1:8080".parse().expect("addr");
        let allowed = vec!["proxy.internal".to_string()];
        for ok in [
            "127.0.0.1:8080",
            "localhost:8080",
            "LOCALHOST:8080",
            "localhost.:8080",
            "[::1]:8080",
            "127.0.0.2:8080",
            "proxy.internal",
            "proxy.internal:443",
        ] {
            assert!(host_allowed(ok, Some(b), &allowed), "{ok}");
        }
        for bad in [
            "attacker.example:8080",
            "attacker.example",
            "localhost:8081",
            "localhost",
            "127.0.0.1",
            "10.0.0.1:8080",
            "[::1]x",
            "localhost:99999",
            "",
        ] {
            assert!(!host_allowed(bad, Some(b), &allowed), "{bad}");
        }
        // Beyond loopback the key is the protection.
        let any: SocketAddr = "0.0.0.0:8080".parse().expect("addr");
        assert!(host_allowed("attacker.example", Some(any), &[]));
        // Port unknown: any port of a loopback name.
        assert!(host_allowed("localhost:1234", None, &[]));
        assert!(!host_allowed("evil.example:1234", None, &[]));
    }

    #[test]
    fn origins() {
        let b: SocketAddr = "127.0.0.1:8080".parse().expect("addr");
        let cors = vec!["https://app.example".to_string()];
        assert!(origin_allowed("https://app.example", &cors, Some(b), &[]));
        assert!(origin_allowed("http://localhost:8080", &cors, Some(b), &[]));
        assert!(!origin_allowed("https://evil.example", &cors, Some(b), &[]));
        assert!(!origin_allowed("null", &cors, Some(b), &[]));
        assert!(origin_allowed("https://x", &["*".into()], Some(b), &[]));
    }

    #[test]
    fn keys() {
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, "BEARER k1".parse().expect("h"));
        assert_eq!(presented_keys(&h), vec!["k1"]);
        h.insert(header::AUTHORIZATION, "Basic k1".parse().expect("h"));
        assert!(presented_keys(&h).is_empty());
        assert!(key_matches("sekret", "sekret"));
        assert!(!key_matches("sekre", "sekret"));
        assert!(!key_matches("sekretsekret", "sekret"));
        assert!(!key_matches("", "sekret"));
    }
}
