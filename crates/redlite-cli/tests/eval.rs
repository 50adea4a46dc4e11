//! `redlite eval` end to end against `redlite serve` on a tiny random-weight
//! fixture model: the needle check at 2K, 8K and 32K tokens (prompt lengths,
//! positions, table, JSON and SVG), the validation of both agent suites, and
//! one agent task driven through pi and stopped by its request cap and its
//! time limit, with no process left behind.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use redlite_testkit::workspace_root;
use serde_json::Value;

mod common;
use common::{start_server, Server, ServerOptions};

/// A server on the tiny model; its address is used as soon as it is bound
/// (`redlite eval` waits for a server that is still loading its model).
fn start(args: &[&str]) -> Server {
    start_server(ServerOptions {
        args,
        wait_ready: false,
        ..ServerOptions::default()
    })
}

fn eval(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_redlite"))
        .arg("eval")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run redlite eval")
}

fn ok(out: &Output) -> String {
    let so = String::from_utf8_lossy(&out.stdout).into_owned();
    let se = String::from_utf8_lossy(&out.stderr);
    println!("{so}\n{se}");
    assert!(out.status.success(), "redlite eval failed:\n{so}\n{se}");
    so
}

fn read_json(p: &Path) -> Value {
    let t = std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&t).expect("json")
}

#[test]
fn needle_2k_8k_and_32k_end_to_end() {
    let s = start(&["--context", "34000"]);
    let dir = tempfile::tempdir().expect("tmp");
    let json = dir.path().join("needle.json");
    let svg = dir.path().join("needle.svg");
    let out = eval(&[
        "needle",
        "--url",
        &s.base,
        "--lengths",
        "2k,8k",
        "--seed",
        "5",
        "--json",
        json.to_str().expect("utf-8"),
        "--plot",
        svg.to_str().expect("utf-8"),
    ]);
    let table = ok(&out);
    let v = read_json(&json);
    let cases = v["cases"].as_array().expect("cases");
    assert_eq!(cases.len(), 2);
    let mut phrases = Vec::new();
    for (c, len) in cases.iter().zip([2048u64, 8192]) {
        assert_eq!(c["length"], len);
        assert!(c["error"].is_null(), "{c}");
        // The server saw exactly the requested prompt length.
        assert_eq!(c["prompt_tokens"].as_u64(), Some(len), "{c}");
        assert!(c["ttft_s"].as_f64().is_some_and(|t| t > 0.0), "{c}");
        assert!(c["prefill_tok_s"].as_f64().is_some_and(|t| t > 0.0), "{c}");
        assert!(c["cached_tokens"].is_u64(), "{c}");
        let needles = c["needles"].as_array().expect("needles");
        assert_eq!(needles.len(), 3);
        for (n, d) in needles.iter().zip([10.0, 50.0, 90.0]) {
            assert_eq!(n["depth"].as_f64(), Some(d));
            let tok = n["token"].as_u64().expect("token") as f64;
            // Within a line or two of the depth (lines of source are < 64 tokens).
            assert!((tok - d / 100.0 * len as f64).abs() < 64.0, "{n}");
            assert!(n["found"].is_boolean());
            let p = n["passphrase"].as_str().expect("passphrase").to_string();
            // The table names every passphrase and its position.
            assert!(table.contains(&p), "{table}");
            phrases.push(p);
        }
    }
    phrases.sort();
    phrases.dedup();
    assert_eq!(phrases.len(), 6, "passphrases must be distinct");
    let found = v["found"].as_u64().expect("found");
    assert!(table.contains(&format!("found {found}/6")), "{table}");
    let svg_text = std::fs::read_to_string(&svg).expect("svg");
    assert!(svg_text.starts_with("<svg") && svg_text.trim_end().ends_with("</svg>"));
    assert_eq!(
        svg_text.matches("<rect x=").count(),
        6,
        "one cell per length and depth"
    );
    assert!(svg_text.contains(">2k<") && svg_text.contains(">8k<") && svg_text.contains(">90%<"));

    // 32K: the prompt is built and sent at its full length.
    let json32 = dir.path().join("needle32.json");
    let out = eval(&[
        "needle",
        "--url",
        &s.base,
        "--lengths",
        "32k",
        "--max-tokens",
        "16",
        "--json",
        json32.to_str().expect("utf-8"),
    ]);
    ok(&out);
    let v = read_json(&json32);
    let c = &v["cases"][0];
    assert!(c["error"].is_null(), "{c}");
    assert_eq!(c["prompt_tokens"].as_u64(), Some(32768), "{c}");
    let tok90 = c["needles"][2]["token"].as_u64().expect("token");
    assert!(tok90.abs_diff(29491) < 64, "{c}");
}

#[test]
fn needle_reports_an_unreachable_server() {
    let out = eval(&["needle", "--url", "http://127.0.0.1:1", "--lengths", "2k"]);
    assert!(!out.status.success());
    let se = String::from_utf8_lossy(&out.stderr);
    assert!(se.contains("127.0.0.1:1"), "{se}");
}

fn validates(suite: &str, min: usize) {
    let out = eval(&["agent", "--validate", "--suite", suite]);
    let so = ok(&out);
    let n: usize = so
        .lines()
        .find_map(|l| {
            l.strip_prefix(&format!("suite {suite}: all "))
                .and_then(|r| r.split_whitespace().next())
                .and_then(|x| x.parse().ok())
        })
        .unwrap_or_else(|| panic!("no summary line:\n{so}"));
    assert!(n >= min, "suite {suite} has {n} tasks, want at least {min}");
    assert_eq!(so.matches("planted fails").count(), n);
    assert_eq!(so.matches("reference passes").count(), n);
}

#[test]
fn agent_suite_repo_validates() {
    validates("repo", 12);
}

#[test]
fn agent_suite_hard_validates() {
    validates("hard", 6);
}

#[test]
fn a_suite_that_does_not_validate_is_refused() {
    // A copy of one task whose reference patch is emptied of its fix.
    let dir = tempfile::tempdir().expect("tmp");
    let src = workspace_root().join("eval/tasks/repo/py-median-even");
    let dst = dir.path().join("broken/py-median-even");
    copy(&src, &dst);
    std::fs::write(dst.join("check.sh"), "exit 0\n").expect("write");
    let tasks = dir.path().to_str().expect("utf-8");
    let out = eval(&["agent", "--validate", "--suite", "broken", "--tasks", tasks]);
    assert!(!out.status.success());
    let so = String::from_utf8_lossy(&out.stdout);
    assert!(so.contains("planted PASSES"), "{so}");
    let out = eval(&[
        "agent",
        "--suite",
        "broken",
        "--tasks",
        tasks,
        "--url",
        "http://127.0.0.1:1",
    ]);
    assert!(!out.status.success());
    let se = String::from_utf8_lossy(&out.stderr);
    assert!(se.contains("does not validate"), "{se}");
}

fn copy(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for e in std::fs::read_dir(from).expect("read_dir").flatten() {
        let p = e.path();
        if p.is_dir() {
            copy(&p, &to.join(e.file_name()));
        } else {
            std::fs::copy(&p, to.join(e.file_name())).expect("copy");
        }
    }
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

/// Processes whose command line holds `marker`.
fn pgrep(marker: &str) -> String {
    let out = Command::new("pgrep")
        .args(["-a", "-f", marker])
        .output()
        .expect("pgrep");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn agent_task_end_to_end_is_stopped_by_its_cap_and_its_timeout() {
    let pi = pi();
    let s = start(&["--context", "65536"]);
    let dir = tempfile::tempdir().expect("tmp");
    // One real task, its prompt marked so that its processes can be found.
    let marker = format!("evalmarker{}x{}", std::process::id(), line!());
    let task = dir.path().join("tasks/e2e/py-median-even");
    copy(
        &workspace_root().join("eval/tasks/repo/py-median-even"),
        &task,
    );
    let prompt = std::fs::read_to_string(task.join("prompt.md")).expect("prompt");
    std::fs::write(task.join("prompt.md"), format!("{prompt}\n({marker})\n")).expect("write");
    let tasks = dir.path().join("tasks");
    let run = |extra: &[&str], json: &Path| {
        let mut args = vec![
            "agent",
            "--suite",
            "e2e",
            "--url",
            &s.base,
            "--context",
            "65536",
            "--tasks",
            tasks.to_str().expect("utf-8"),
            "--pi",
            pi.to_str().expect("utf-8"),
            "--json",
            json.to_str().expect("utf-8"),
        ];
        args.extend_from_slice(extra);
        let out = eval(&args);
        let table = ok(&out);
        assert!(table.contains("py-median-even"), "{table}");
        assert!(table.contains("0/1 runs passed"), "{table}");
        assert_eq!(pgrep(&marker), "", "processes left behind");
        read_json(json)
    };

    // The cap: stopped at its first request, well before the time limit.
    let v = run(
        &[
            "--max-requests",
            "1",
            "--timeout",
            "300",
            "--temperature",
            "0",
        ],
        &dir.path().join("cap.json"),
    );
    let r = &v["results"][0];
    println!("{r}");
    assert_eq!(r["passed"], false);
    assert_eq!(r["hit_request_cap"], true, "{r}");
    assert_eq!(r["timed_out"], false, "{r}");
    assert_eq!(r["requests"].as_u64(), Some(1), "{r}");
    assert_eq!(r["server_requests"].as_u64(), Some(1), "{r}");
    assert!(r["prompt_tokens"].as_u64().is_some_and(|n| n > 100), "{r}");
    assert!(r["wall_s"].as_f64().is_some_and(|t| t < 300.0), "{r}");
    assert_eq!(v["summary"][0]["loops"], 1);
    assert_eq!(v["summary"][0]["passes"], 0);

    // The time limit: pi is stopped within it (plus the time to kill it).
    // Starting pi and its one request to the random model take about two
    // seconds on an idle 2-core machine, so one second stops it mid-run.
    let v = run(
        &["--max-requests", "50", "--timeout", "1"],
        &dir.path().join("timeout.json"),
    );
    let r = &v["results"][0];
    println!("{r}");
    assert_eq!(r["passed"], false);
    assert_eq!(r["timed_out"], true, "{r}");
    assert_eq!(r["hit_request_cap"], false, "{r}");
    assert!(
        r["wall_s"]
            .as_f64()
            .is_some_and(|t| (1.0..3.0).contains(&t)),
        "{r}"
    );
    assert!(r["requests"].as_u64().is_some_and(|n| n <= 1), "{r}");
    assert_eq!(v["summary"][0]["timeouts"], 1);

    // Ctrl-C (SIGINT) in the middle of a run: pi and its tools go too.
    let child = Command::new(env!("CARGO_BIN_EXE_redlite"))
        .args(["eval", "agent", "--suite", "e2e", "--url", &s.base])
        .args(["--tasks", tasks.to_str().expect("utf-8")])
        .args(["--pi", pi.to_str().expect("utf-8")])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start redlite eval");
    let t0 = std::time::Instant::now();
    while pgrep(&marker).is_empty() {
        assert!(t0.elapsed() < Duration::from_secs(60), "pi never started");
        std::thread::sleep(Duration::from_millis(100));
    }
    let st = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(st.success());
    let out = child.wait_with_output().expect("wait");
    let se = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(se.contains("interrupted"), "{se}");
    assert_eq!(pgrep(&marker), "", "processes left behind after Ctrl-C");

    // And the server goes with the test.
    let pid = s.child.id();
    drop(s);
    assert!(!Path::new(&format!("/proc/{pid}")).exists());
}
