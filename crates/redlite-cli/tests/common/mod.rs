//! Helpers shared by the CLI tests: run the `redlite` binary, start a
//! `redlite serve`.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

pub fn redlite(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_redlite"))
        .args(args)
        .output()
        .expect("run redlite")
}

/// Assert success; returns (stdout, stderr).
pub fn ok(out: &Output) -> (String, String) {
    let so = String::from_utf8_lossy(&out.stdout).into_owned();
    let se = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "failed:\nstdout: {so}\nstderr: {se}");
    (so, se)
}

/// How to start `redlite serve` for a test ([`start_server`]).
pub struct ServerOptions<'a> {
    /// The model file (default: the tiny-s-bf16 fixture).
    pub model: Option<&'a Path>,
    /// Arguments after the model, the address and `--threads`.
    pub args: &'a [&'a str],
    /// `--threads`.
    pub threads: u32,
    /// Wait for the `ready: ` line (the model is loaded), not only for the
    /// address: the port is bound before the model loads.
    pub wait_ready: bool,
    /// The command to run instead of the plain `redlite` binary (one with
    /// limits or environment set).
    pub command: Option<Command>,
}

impl Default for ServerOptions<'_> {
    fn default() -> Self {
        ServerOptions {
            model: None,
            args: &[],
            threads: 2,
            wait_ready: true,
            command: None,
        }
    }
}

/// A running `redlite serve` on a free loopback port, killed on drop.
pub struct Server {
    pub child: Child,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    pub addr: SocketAddr,
    /// Every stderr line so far (each is also shown with the test's output).
    pub log: Arc<Mutex<Vec<String>>>,
}

/// Start `redlite serve MODEL --host 127.0.0.1 --port 0 --threads N ARGS…`,
/// reading its address from the `listening on ` line of stderr and, with
/// `wait_ready`, waiting for the `ready: ` line; panics after 60 s.
pub fn start_server(opts: ServerOptions) -> Server {
    let tiny = redlite_testkit::fixture("tiny-s-bf16.gguf");
    let mut cmd = opts
        .command
        .unwrap_or_else(|| Command::new(env!("CARGO_BIN_EXE_redlite")));
    let mut child = cmd
        .arg("serve")
        .arg(opts.model.unwrap_or(&tiny))
        .args(["--host", "127.0.0.1", "--port", "0"])
        .args(["--threads", &opts.threads.to_string()])
        .args(opts.args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start redlite serve");
    let stderr = child.stderr.take().expect("stderr");
    let log = Arc::new(Mutex::new(Vec::new()));
    let l = log.clone();
    let wait_ready = opts.wait_ready;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut base = None;
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(b) = line.strip_prefix("listening on ") {
                base = Some(b.to_string());
            }
            if !wait_ready || line.starts_with("ready: ") {
                if let Some(b) = base.take() {
                    let _ = tx.send(b);
                }
            }
            // Keep draining so the server never blocks on a full pipe;
            // request log lines are shown with the test's output.
            eprintln!("[server] {line}");
            if let Ok(mut v) = l.lock() {
                v.push(line);
            }
        }
    });
    let Ok(base) = rx.recv_timeout(Duration::from_secs(60)) else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("redlite serve did not start within 60 s");
    };
    let addr = base
        .trim_start_matches("http://")
        .parse()
        .unwrap_or_else(|e| panic!("server address {base:?}: {e}"));
    Server {
        child,
        base,
        addr,
        log,
    }
}

impl Server {
    /// Whether a stderr line so far contains `needle` (waits up to 1 s: the
    /// reader thread may trail the process's exit slightly).
    pub fn log_has(&self, needle: &str) -> bool {
        for _ in 0..50 {
            if self
                .log
                .lock()
                .map(|v| v.iter().any(|l| l.contains(needle)))
                .unwrap_or(false)
            {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
