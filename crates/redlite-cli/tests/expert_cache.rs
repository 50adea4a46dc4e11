//! `--expert-cache` on the commands: `redlite bench --json` on a synth model
//! reports the cache's counters; a budget below one expert is a clear error.

mod common;
use common::{ok, redlite};

fn synth(dir: &std::path::Path) -> String {
    let p = dir
        .join("tiny.gguf")
        .to_str()
        .expect("utf-8 path")
        .to_string();
    ok(&redlite(&["synth", "--preset", "tiny", "-o", &p]));
    p
}

#[test]
fn bench_with_an_expert_cache_reports_its_stats() {
    let dir = tempfile::tempdir().expect("tempdir");
    let model = synth(dir.path());
    let out = redlite(&[
        "bench",
        &model,
        "-p",
        "8",
        "-n",
        "4",
        "-r",
        "1",
        "-t",
        "1",
        "--expert-cache",
        "1MiB",
        "--direct-io",
        "--json",
    ]);
    let (so, se) = ok(&out);
    assert!(
        se.contains("experts: ") && se.contains("streamed from"),
        "{se}"
    );
    let v: serde_json::Value = serde_json::from_str(&so).expect("bench --json parses");
    let tests = v.as_array().expect("a list of tests");
    assert_eq!(tests.len(), 2);
    for t in tests {
        let hits = t["redlite_expert_cache_hits"].as_u64().expect("hits");
        let misses = t["redlite_expert_cache_misses"].as_u64().expect("misses");
        assert!(hits + misses > 0, "{t}");
        assert_eq!(t["redlite_expert_cache_budget_bytes"], 1024 * 1024);
        let layers = t["redlite_expert_cache_layers"].as_array().expect("layers");
        let sum: u64 = layers
            .iter()
            .map(|l| l["misses"].as_u64().unwrap_or(0))
            .sum();
        assert_eq!(sum, misses);
        assert!(t["redlite_expert_cache_bytes_read"].as_u64().is_some());
        assert!(t["redlite_expert_cache_stall_ns"].as_u64().is_some());
    }
    // Without --expert-cache there are no cache fields.
    let (so, _) = ok(&redlite(&[
        "bench", &model, "-p", "4", "-n", "2", "-r", "1", "-t", "1", "--json",
    ]));
    let v: serde_json::Value = serde_json::from_str(&so).expect("parses");
    assert!(v[0].get("redlite_expert_cache_hits").is_none());
    // The human summary has a cache line per test.
    let (so, _) = ok(&redlite(&[
        "bench",
        &model,
        "-p",
        "4",
        "-n",
        "2",
        "-r",
        "1",
        "-t",
        "1",
        "--expert-cache",
        "1MiB",
    ]));
    assert!(so.contains("expert cache tg2"), "{so}");
}

/// `--expert-cache auto` (the default) streams the experts when the model
/// does not fit in the memory available (here said to be 1 MiB), and keeps
/// everything resident when it does.
#[test]
fn the_automatic_budget_streams_what_does_not_fit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let model = synth(dir.path());
    let args = [
        "bench", &model, "-p", "4", "-n", "2", "-r", "1", "-t", "1", "--device", "cpu", "--json",
    ];
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_redlite"))
        .args(args)
        .env("REDLITE_MEM_AVAILABLE", "1MiB")
        .output()
        .expect("run redlite");
    let (so, se) = ok(&out);
    assert!(
        se.contains("does not fit") && se.contains("streamed from"),
        "{se}"
    );
    let v: serde_json::Value = serde_json::from_str(&so).expect("parses");
    assert_eq!(v[0]["redlite_expert_cache_budget_bytes"], 512u64 << 20);
    let (so, se) = ok(&redlite(&args));
    assert!(!se.contains("does not fit"), "{se}");
    let v: serde_json::Value = serde_json::from_str(&so).expect("parses");
    assert!(v[0].get("redlite_expert_cache_hits").is_none());
}

#[test]
fn a_too_small_expert_cache_is_an_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let model = synth(dir.path());
    let out = redlite(&[
        "run",
        &model,
        "-p",
        "hi",
        "-n",
        "1",
        "--expert-cache",
        "1KiB",
    ]);
    let se = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(se.contains("the minimum is"), "{se}");
    assert!(!se.contains("panicked"), "{se}");
    let out = redlite(&["run", &model, "-p", "hi", "--expert-cache", "lots"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a size"));
}
