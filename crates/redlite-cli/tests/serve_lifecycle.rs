//! `redlite serve` as a process: the port is taken before the model loads,
//! SIGINT ends a long generation's stream cleanly and exits, a second
//! SIGINT exits at once, and a 64 MB body of junk in an unknown field costs
//! less than three times its size without holding up `/health`. Each test
//! starts its own server on a free loopback port.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redlite_testkit::fixture;

mod common;
use common::{start_server, Server, ServerOptions};

fn start(args: &[&str]) -> Server {
    start_server(ServerOptions {
        args,
        ..ServerOptions::default()
    })
}

impl Server {
    fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on the pid of a child this test started and has
        // not yet reaped.
        let rc = unsafe { libc::kill(self.child.id() as libc::pid_t, sig) };
        assert_eq!(rc, 0, "kill");
    }

    /// Wait up to `within` for the process to exit.
    fn exited(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let t = Instant::now();
        while t.elapsed() < within {
            if let Ok(Some(st)) = self.child.try_wait() {
                return Some(st);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    fn rss_peak_kib(&self) -> u64 {
        let s = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .expect("/proc status");
        s.lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .expect("VmHWM")
    }
}

fn post(addr: SocketAddr, path: &str, body: &[u8]) -> (u16, String) {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(120))).ok();
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Connection: close\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .expect("head");
    s.write_all(body).expect("body");
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    let status = out
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, out)
}

fn get_status(addr: SocketAddr, path: &str) -> u16 {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30))).ok();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .expect("w");
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// A streamed chat of `n` tokens, read until tokens flow.
fn open_stream(addr: SocketAddr, n: u32) -> TcpStream {
    let body = serde_json::json!({
        "messages": [{"role": "user", "content": "count to a million"}],
        "max_tokens": n, "temperature": 0, "ignore_eos": true, "stream": true,
    })
    .to_string();
    let mut c = TcpStream::connect(addr).expect("connect");
    c.set_read_timeout(Some(Duration::from_secs(30))).ok();
    write!(
        c,
        "POST /v1/chat/completions HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .expect("write");
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while String::from_utf8_lossy(&seen).matches("data: ").count() < 5 {
        let k = c.read(&mut buf).expect("stream");
        assert!(k > 0, "stream ended early");
        seen.extend_from_slice(&buf[..k]);
    }
    c
}

#[test]
fn sigint_ends_a_long_generation_cleanly() {
    let mut s = start(&["--context", "70000"]);
    let mut c = open_stream(s.addr, 60_000);
    let t = Instant::now();
    s.signal(libc::SIGINT);
    let mut rest = Vec::new();
    c.set_read_timeout(Some(Duration::from_secs(10))).ok();
    c.read_to_end(&mut rest).expect("the stream ends");
    let stream_end = t.elapsed();
    let st = s.exited(Duration::from_secs(5));
    let exit = t.elapsed();
    eprintln!("SIGINT: stream ended after {stream_end:?}, process exited after {exit:?}");
    let text = String::from_utf8_lossy(&rest);
    assert!(text.contains("shutting down"), "{text}");
    assert!(
        text.ends_with("0\r\n\r\n"),
        "not a clean chunked end: {text}"
    );
    let st = st.expect("the server exits within 5 s of SIGINT");
    assert!(st.success(), "{st}");
    assert!(s.log_has("SIGINT: shutting down"));
    assert!(s.log_has("finish=cancelled (shutdown)"));
    assert!(s.log_has("stopped"));
}

#[test]
fn a_second_sigint_exits_at_once() {
    let mut s = start(&[]);
    // A request whose body never completes keeps the drain waiting.
    let mut stuck = TcpStream::connect(s.addr).expect("connect");
    write!(
        stuck,
        "POST /v1/chat/completions HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
         Content-Length: 100\r\n\r\n{{",
        s.addr
    )
    .expect("w");
    std::thread::sleep(Duration::from_millis(200));
    s.signal(libc::SIGINT);
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        s.exited(Duration::ZERO).is_none(),
        "exited before the drain ended"
    );
    let t = Instant::now();
    s.signal(libc::SIGINT);
    let st = s.exited(Duration::from_secs(2)).expect("exits at once");
    eprintln!("second SIGINT: exited after {:?}", t.elapsed());
    assert_eq!(st.code(), Some(130));
    assert!(s.log_has("SIGINT again: exiting now"));
}

#[test]
fn a_taken_port_fails_before_the_model_loads() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = taken.local_addr().expect("addr").port().to_string();
    let t = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_redlite"))
        .arg("serve")
        .arg(fixture("tiny-s-bf16.gguf"))
        .args(["--host", "127.0.0.1", "--port", &port])
        .output()
        .expect("run");
    let took = t.elapsed();
    let err = String::from_utf8_lossy(&out.stderr);
    eprintln!("taken port: failed after {took:?}: {err}");
    assert!(!out.status.success());
    assert!(
        err.contains(&port) && err.to_lowercase().contains("in use"),
        "{err}"
    );
    assert!(
        !err.contains("loading ") && !err.contains("ready: "),
        "{err}"
    );
    assert!(took < Duration::from_secs(5), "{took:?}");
}

#[test]
fn a_64mb_body_of_junk_costs_under_three_times_its_size() {
    let s = start(&["--context", "512"]);
    let addr = s.addr;
    // Warm the allocator and the request path first.
    let small = br#"{"messages":[{"role":"user","content":"hi"}],"max_tokens":1}"#;
    assert_eq!(post(addr, "/v1/chat/completions", small).0, 200);
    let before = s.rss_peak_kib();
    // 64 MB of numbers in a field no route reads.
    let n = 64_000_000usize;
    let mut body = Vec::with_capacity(n + 200);
    body.extend_from_slice(
        br#"{"messages":[{"role":"user","content":"hi"}],"max_tokens":1,"x_junk":["#,
    );
    while body.len() < n {
        body.extend_from_slice(b"12345.678,");
    }
    body.extend_from_slice(b"0]}");
    let len = body.len();
    // /health answers throughout.
    let done = Arc::new(AtomicBool::new(false));
    let d = done.clone();
    let prober = std::thread::spawn(move || {
        let mut worst = Duration::ZERO;
        let mut probes = 0;
        while !d.load(Ordering::Relaxed) {
            let t = Instant::now();
            assert_eq!(get_status(addr, "/health"), 200);
            worst = worst.max(t.elapsed());
            probes += 1;
            std::thread::sleep(Duration::from_millis(10));
        }
        (worst, probes)
    });
    let t = Instant::now();
    let (status, out) = post(addr, "/v1/chat/completions", &body);
    let took = t.elapsed();
    drop(body);
    done.store(true, Ordering::Relaxed);
    let (worst, probes) = prober.join().expect("prober");
    let after = s.rss_peak_kib();
    let growth = (after.saturating_sub(before)) * 1024;
    eprintln!(
        "64 MB junk body: {status} in {took:?}; peak RSS {} -> {} MiB (+{:.2}x the body); \
         /health worst {worst:?} over {probes} probes",
        before / 1024,
        after / 1024,
        growth as f64 / len as f64
    );
    assert_eq!(status, 200, "{}", &out[..out.len().min(500)]);
    assert!(
        growth < 3 * len as u64,
        "peak RSS grew by {growth} bytes for a {len}-byte body"
    );
    assert!(probes > 0);
    assert!(worst < Duration::from_secs(1), "/health took {worst:?}");

    // The same numbers in a field the route reads: refused once their
    // parsed form passes its budget, still under three times the body.
    let mut body = Vec::with_capacity(n + 200);
    body.extend_from_slice(br#"{"max_tokens":1,"messages":["#);
    while body.len() < n {
        body.extend_from_slice(b"1,2,3,4,5,");
    }
    body.extend_from_slice(b"0]}");
    let t = Instant::now();
    let (status, out) = post(addr, "/v1/chat/completions", &body);
    let took = t.elapsed();
    let peak = s.rss_peak_kib();
    let growth = peak.saturating_sub(before) * 1024;
    eprintln!(
        "64 MB of numbers in 'messages': {status} in {took:?}; peak RSS {} MiB (+{:.2}x the body)",
        peak / 1024,
        growth as f64 / len as f64
    );
    assert_eq!(status, 400, "{}", &out[..out.len().min(500)]);
    assert!(out.contains("bytes of memory once parsed"), "{out}");
    assert!(
        growth < 3 * len as u64,
        "peak RSS grew by {growth} bytes for a {len}-byte body"
    );
}

#[test]
fn serve_help_lists_every_limit_with_its_default() {
    let out = Command::new(env!("CARGO_BIN_EXE_redlite"))
        .args(["serve", "--help"])
        .output()
        .expect("run");
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    // Each limit flag, then its default before the next flag.
    for (flag, default) in [
        ("--max-body", "[default: 64MiB]"),
        ("--max-body-memory", "[default: 1GiB]"),
        ("--header-timeout", "[default: 10]"),
        ("--body-timeout", "[default: 60]"),
        ("--max-connections", "[default: 512]"),
        ("--max-queue", "[default: 64]"),
        ("--context", "[default: 65536]"),
    ] {
        let at = help
            .find(&format!("{flag} "))
            .unwrap_or_else(|| panic!("{flag} missing:\n{help}"));
        let rest = &help[at..];
        let end = rest[2..].find("\n  -").map_or(rest.len(), |i| i + 2);
        assert!(rest[..end].contains(default), "{flag}: {}", &rest[..end]);
    }
    for fixed in [
        "16 stop strings",
        "4096 bytes",
        "--cors-origin",
        "--allowed-host",
    ] {
        assert!(help.contains(fixed), "{fixed} missing:\n{help}");
    }
}
