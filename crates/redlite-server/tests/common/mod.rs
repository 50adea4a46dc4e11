//! A server on a free loopback port, in process, and a raw HTTP/1.1 client
//! (so tests can send any Host, Origin or malformed request they like).
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use redlite_model::Model;
use redlite_server::{AppState, ServerConfig};
use redlite_testkit::fixture;
use serde_json::Value;

pub struct TestServer {
    pub addr: SocketAddr,
    pub app: redlite_server::App,
    _rt: tokio::runtime::Runtime,
}

/// Start `redlite serve`'s server on 127.0.0.1:0 with the tiny model.
pub fn start(cfg: ServerConfig) -> TestServer {
    let model = Model::load(&fixture("tiny-s-bf16.gguf")).expect("fixture model");
    let app = Arc::new(AppState::new(model, cfg).expect("app"));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let (tx, rx) = std::sync::mpsc::channel();
    let a = app.clone();
    rt.spawn(async move {
        let addr: SocketAddr = "127.0.0.1:0".parse().expect("addr");
        let _ = redlite_server::serve(a, addr, move |b| {
            let _ = tx.send(b);
        })
        .await;
    });
    let addr = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("server bound");
    TestServer { addr, app, _rt: rt }
}

/// A parsed HTTP response.
#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {} {}", self.status, self.body))
    }
}

/// Send one request (`Connection: close`) and read the whole answer.
/// `headers` are sent as given; a Host header is added unless one is there.
pub fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Resp {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(60))).ok();
    let mut req = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        req.push_str(&format!("Host: {addr}\r\n"));
    }
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
    s.write_all(req.as_bytes()).expect("write head");
    s.write_all(body.as_bytes()).expect("write body");
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("read");
    parse(&raw)
}

pub fn parse(raw: &[u8]) -> Resp {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {text}"));
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let chunked = headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    let body = if chunked {
        dechunk(body)
    } else {
        body.to_string()
    };
    Resp {
        status,
        headers,
        body,
    }
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        s = rest[n..].trim_start_matches("\r\n");
    }
    out
}

pub const JSON: (&str, &str) = ("Content-Type", "application/json");

pub fn chat_body(max_tokens: u32) -> String {
    serde_json::json!({
        "messages": [{"role": "user", "content": "hello"}],
        "max_tokens": max_tokens, "temperature": 0,
    })
    .to_string()
}

/// Start a server like [`start`], returning the runtime-owned handle to
/// its shutdown switch too.
pub fn start_with_shutdown(cfg: ServerConfig) -> (TestServer, redlite_server::Shutdown) {
    let model = Model::load(&fixture("tiny-s-bf16.gguf")).expect("fixture model");
    let app = Arc::new(AppState::new(model, cfg.clone()).expect("app"));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let server =
        redlite_server::Server::bind("127.0.0.1:0".parse().expect("addr"), cfg).expect("bind");
    server.set_app(app.clone());
    let stop = server.shutdown().clone();
    let addr = server.addr();
    rt.spawn(server.run(Duration::from_secs(5)));
    (TestServer { addr, app, _rt: rt }, stop)
}

/// Read one response from a kept-alive connection (Content-Length bodies
/// only).
pub fn read_response(s: &mut TcpStream) -> Resp {
    let mut raw = Vec::new();
    let mut byte = [0u8; 1];
    while !raw.ends_with(b"\r\n\r\n") {
        match s.read(&mut byte) {
            Ok(1) => raw.push(byte[0]),
            _ => panic!(
                "connection closed mid-head: {}",
                String::from_utf8_lossy(&raw)
            ),
        }
    }
    let head = parse(&raw);
    let n: usize = head
        .header("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0u8; n];
    s.read_exact(&mut body).expect("body");
    raw.extend_from_slice(&body);
    parse(&raw)
}

/// GET `path` on a kept-alive connection.
pub fn get_on(s: &mut TcpStream, addr: SocketAddr, path: &str) -> Resp {
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n").expect("write");
    read_response(s)
}

/// Whether the server closed `s` (EOF or reset) within `within`, reading
/// and discarding whatever it sent first.
pub fn closed_by_server(s: &mut TcpStream, within: Duration) -> bool {
    let deadline = std::time::Instant::now() + within;
    let mut buf = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return false;
        }
        s.set_read_timeout(Some(left)).ok();
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut =>
            {
                return false
            }
            Err(_) => return true,
        }
    }
}
