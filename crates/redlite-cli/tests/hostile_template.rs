//! A model file's chat template is untrusted input. A copy of tiny-s-bf16
//! with a hostile `tokenizer.chat_template` (each branch asks for gigabytes:
//! string repetition fed to `replace`, a list multiplied and joined,
//! `tojson` with a huge indent, a string doubled by `+` in a loop) must give
//! a clear error under a memory limit, never an abort: `run --chat` exits
//! with status 1, and `serve` answers the chat request with an error and
//! keeps serving.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use redlite_gguf::{GgufFile, GgufWriter};
use redlite_testkit::fixture;

mod common;
use common::{start_server, Server, ServerOptions};

/// Address space the child processes may use: room for the model, the
/// threads and the template's own budget, far less than any hostile branch
/// asks for.
const MEMORY_LIMIT: u64 = 2 << 30;

/// The conversation's last message picks the branch; anything else renders
/// a plain ChatML prompt.
const HOSTILE: &str = r#"{%- set m = messages[-1].content -%}
{%- if m == 'replace' -%}{{ ('x' * 60000000) | replace('x', 'y' * 100) }}
{%- elif m == 'join' -%}{{ (['x' * 100000] * 100000) | join }}
{%- elif m == 'tojson' -%}{{ messages | tojson(indent=10000000000) }}
{%- elif m == 'double' -%}{%- set ns = namespace(s='x') -%}{%- for i in range(64) -%}{%- set ns.s = ns.s + ns.s -%}{%- endfor -%}{{ ns.s }}
{%- else -%}<|im_start|>user
{{ m }}<|im_end|>
<|im_start|>assistant
{% endif -%}"#;

const BRANCHES: [&str; 4] = ["replace", "join", "tojson", "double"];

/// Write a copy of tiny-s-bf16.gguf carrying `template` into `dir`.
fn copy_with_template(dir: &Path, template: &str) -> PathBuf {
    let src = GgufFile::open(fixture("tiny-s-bf16.gguf")).expect("fixture opens");
    let mut w = GgufWriter::new();
    for (k, v) in &src.metadata {
        w.add_kv(k.clone(), v.clone());
    }
    w.add_str("tokenizer.chat_template", template);
    for t in &src.tensors {
        w.add_tensor(
            t.name.clone(),
            &t.dims,
            t.ggml_type,
            src.tensor_data(t).to_vec(),
        )
        .expect("add tensor");
    }
    let path = dir.join("hostile.gguf");
    w.write_to_path(&path).expect("write the copy");
    path
}

/// `redlite` with its address space limited to [`MEMORY_LIMIT`].
fn limited_redlite() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_redlite"));
    // One malloc arena keeps the address space of idle threads small.
    cmd.env("MALLOC_ARENA_MAX", "1");
    // SAFETY: the closure runs in the forked child before exec and only
    // calls `setrlimit`, which is async-signal-safe; it touches no memory
    // shared with the parent.
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: MEMORY_LIMIT,
                rlim_max: MEMORY_LIMIT,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd
}

#[test]
fn run_chat_reports_a_hostile_template_instead_of_aborting() {
    let dir = tempfile::tempdir().expect("tempdir");
    let model = copy_with_template(dir.path(), HOSTILE);
    let model = model.to_str().expect("utf-8 path");
    for branch in BRANCHES {
        let out = limited_redlite()
            .args(["run", model, "--chat", "-p", branch, "-n", "1", "-t", "1"])
            .output()
            .expect("run redlite");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(1),
            "{branch}: {:?} (a signal means an abort)\n{stderr}",
            out.status
        );
        assert!(
            stderr.contains("rendering the chat template")
                && stderr.contains("chat template rendering stopped")
                && stderr.contains("MiB"),
            "{branch}: {stderr}"
        );
    }
    // The same file renders an ordinary prompt under the same limit.
    let out = limited_redlite()
        .args(["run", model, "--chat", "-p", "hello", "-n", "2", "-t", "1"])
        .args(["--temp", "0"])
        .output()
        .expect("run redlite");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn start(model: &Path) -> Server {
    start_server(ServerOptions {
        model: Some(model),
        threads: 1,
        command: Some(limited_redlite()),
        ..ServerOptions::default()
    })
}

/// One HTTP/1.1 request; returns the status code and the body.
fn http(addr: &str, method: &str, path: &str, body: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(60)))
        .expect("timeout");
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .expect("send");
    let mut resp = String::new();
    s.read_to_string(&mut resp).expect("read");
    let status = resp
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {resp}"));
    let body = resp
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string();
    (status, body)
}

fn chat(addr: &str, content: &str) -> (u16, String) {
    let body = serde_json::json!({
        "messages": [{"role": "user", "content": content}],
        "max_tokens": 2,
        "temperature": 0,
    });
    http(addr, "POST", "/v1/chat/completions", &body.to_string())
}

#[test]
fn serve_answers_a_hostile_template_with_an_error_and_keeps_serving() {
    let dir = tempfile::tempdir().expect("tempdir");
    let model = copy_with_template(dir.path(), HOSTILE);
    let server = start(&model);
    let addr = server.base.trim_start_matches("http://");
    for branch in BRANCHES {
        let (status, body) = chat(addr, branch);
        assert_eq!(status, 400, "{branch}: {body}");
        assert!(
            body.contains("chat template rendering stopped") && body.contains("MiB"),
            "{branch}: {body}"
        );
        // Still alive and serving after each one.
        let (status, body) = http(addr, "GET", "/health", "");
        assert_eq!(status, 200, "health after {branch}: {body}");
    }
    let (status, body) = http(
        addr,
        "POST",
        "/v1/completions",
        r#"{"prompt": "hello", "max_tokens": 2, "temperature": 0}"#,
    );
    assert_eq!(status, 200, "{body}");
    let (status, body) = chat(addr, "hello");
    assert_eq!(status, 200, "{body}");
}
