//! `redlite serve` driven by real clients over loopback: the official openai
//! and anthropic Python SDKs, a multi-turn agent conversation with state
//! reuse, batched decoding, constrained decoding, a bounded load test, and
//! the pi coding agent.
//! Each test starts its own server on a free port (`--port 0`).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use redlite_testkit::{fixture, python, workspace_root};

mod common;
use common::{start_server, Server, ServerOptions};

fn start(model: &Path, args: &[&str]) -> Server {
    start_server(ServerOptions {
        model: Some(model),
        args,
        ..ServerOptions::default()
    })
}

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/serve")
        .join(name)
}

/// Run a client script; it must exit 0. Returns its stdout.
fn run_py(name: &str, env: &[(&str, String)]) -> String {
    let mut cmd = Command::new(python());
    cmd.arg(script(name)).env("PYTHONUNBUFFERED", "1");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("running {name} with {}: {e}", python().display()));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    assert!(
        out.status.success(),
        "{name} failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    stdout
}

fn tiny() -> PathBuf {
    fixture("tiny-s-bf16.gguf")
}

#[test]
fn openai_and_anthropic_sdks() {
    let s = start(&tiny(), &["--context", "4096"]);
    let out = run_py("clients.py", &[("REDLITE_BASE", s.base.clone())]);
    assert!(out.contains("clients ok"));
}

#[test]
fn constrained_tool_calls_and_json_on_random_weights() {
    // tiny-s has random weights: every valid call and JSON value here is
    // the grammar's doing.
    let s = start(&tiny(), &["--parallel", "4"]);
    let out = run_py("constrained.py", &[("REDLITE_BASE", s.base.clone())]);
    assert!(out.contains("constrained ok"));
}

#[test]
fn expert_cache_counters_in_metrics() {
    // Two of tiny-s's experts fit in 1 MiB: every layer evicts.
    let s = start(&tiny(), &["--expert-cache", "1MiB"]);
    let out = run_py("expertcache.py", &[("REDLITE_BASE", s.base.clone())]);
    assert!(out.contains("expert cache metrics ok"));
}

#[test]
fn multi_turn_agent_reuses_state() {
    let warm = start(&tiny(), &["--context", "8192"]);
    let fresh = start(&tiny(), &["--context", "8192", "--state-cache", "0"]);
    let out = run_py(
        "multiturn.py",
        &[
            ("REDLITE_BASE", warm.base.clone()),
            ("REDLITE_BASE_FRESH", fresh.base.clone()),
        ],
    );
    assert!(out.contains("multiturn ok"));
}

#[test]
fn parallel_requests_decode_together_exactly() {
    // tiny-a has more experts than tiny-s: batch-mates route differently.
    for model in ["tiny-a-bf16.gguf", "tiny-s-CF2mix.gguf"] {
        let s = start(
            &fixture(model),
            &["--parallel", "4", "--state-cache", "0", "--batch", "16"],
        );
        let out = run_py("parallel.py", &[("REDLITE_BASE", s.base.clone())]);
        assert!(out.contains("parallel ok"), "{model}");
    }
}

#[test]
fn lookup_changes_no_token_in_the_server() {
    let reference = start(&tiny(), &["--state-cache", "0"]);
    let s = start(
        &tiny(),
        &["--parallel", "4", "--state-cache", "0", "--lookup"],
    );
    let out = run_py(
        "parallel.py",
        &[
            ("REDLITE_BASE", s.base.clone()),
            ("REDLITE_BASE_REF", reference.base.clone()),
            // Long enough for the random model's output to repeat itself.
            ("REDLITE_TOKENS", "200".to_string()),
        ],
    );
    assert!(out.contains("parallel ok"));
    let m = ureq_metrics(&s.base);
    let drafts: f64 = m
        .lines()
        .find_map(|l| l.strip_prefix("redlite_spec_drafts_total "))
        .and_then(|v| v.trim().parse().ok())
        .expect("spec metric");
    assert!(drafts > 0.0, "no drafts were verified:\n{m}");
}

#[test]
fn load_test_no_5xx_no_leaks() {
    let s = start(
        &tiny(),
        &[
            "--parallel",
            "4",
            "--state-cache",
            "32MiB",
            "--context",
            "4096",
        ],
    );
    let pid = s.child.id().to_string();
    let secs = std::env::var("REDLITE_LOAD_SECONDS").unwrap_or_else(|_| "50".into());
    let out = run_py(
        "load.py",
        &[
            ("REDLITE_BASE", s.base.clone()),
            ("REDLITE_PID", pid),
            ("REDLITE_LOAD_SECONDS", secs),
        ],
    );
    assert!(out.contains("load ok"));
}

/// The pi executable: `$REDLITE_PI`, else the copy `.ci/run` installs.
fn pi() -> PathBuf {
    if let Some(p) = std::env::var_os("REDLITE_PI") {
        return PathBuf::from(p);
    }
    let p = workspace_root().join(".ci/node/node_modules/.bin/pi");
    assert!(
        p.exists(),
        "pi not found at {} (run .ci/run, which installs it, or set REDLITE_PI)",
        p.display()
    );
    p
}

#[test]
fn pi_agent_completes_a_prompt() {
    let pi = pi();
    let s = start(&tiny(), &["--context", "8192"]);
    let port = s.base.rsplit(':').next().expect("port").to_string();
    let home = tempfile::tempdir().expect("tmp");
    let agent = home.path().join("agent");
    let work = home.path().join("work");
    std::fs::create_dir_all(&work).expect("work dir");
    // Configured only by `redlite setup-pi`.
    let st = Command::new(env!("CARGO_BIN_EXE_redlite"))
        .args(["setup-pi", "--port", &port, "--context", "8192", "--dir"])
        .arg(&agent)
        .status()
        .expect("setup-pi");
    assert!(st.success());
    let out = Command::new(&pi)
        .args(["-p", "Say hello in one word.", "--no-session"])
        .current_dir(&work)
        .env("HOME", home.path())
        .env("PI_CODING_AGENT_DIR", &agent)
        .env("PI_OFFLINE", "1")
        .stdin(Stdio::null())
        .output()
        .expect("run pi");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("pi stdout: {stdout}\npi stderr: {stderr}");
    assert!(out.status.success(), "pi exited with {}", out.status);
    // pi asked the server (not some other provider): the server saw a request.
    let m = ureq_metrics(&s.base);
    assert!(
        m.contains("endpoint=\"/v1/chat/completions\",status=\"200\""),
        "{m}"
    );
}

/// GET /metrics with a raw HTTP/1.1 request (no client library needed).
fn ureq_metrics(base: &str) -> String {
    use std::io::{Read, Write};
    let addr = base.trim_start_matches("http://");
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30))).ok();
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .expect("write");
    let mut out = String::new();
    s.read_to_string(&mut out).expect("read");
    out
}
