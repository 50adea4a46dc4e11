//! `redlite synth --preset qwen3-coder-next` (shrunk to 4 layers) in every
//! mix: the files load, have the real shape, generate, and stay numerically
//! sane over hundreds of decode steps; `redlite bench` on them.

use std::path::Path;
use std::process::Command;

mod common;
use common::{ok, redlite};

/// Write a 4-layer qwen3-coder-next model with `experts` experts in `mix`.
fn synth(dir: &Path, mix: &str, experts: usize, extra: &[&str]) -> String {
    let path = dir.join(format!("cn-{mix}-{experts}.gguf"));
    let p = path.to_str().unwrap().to_string();
    let e = experts.to_string();
    let mut args = vec![
        "synth",
        "--preset",
        "qwen3-coder-next",
        "--layers",
        "4",
        "--experts",
        &e,
        "--mix",
        mix,
        "-o",
        &p,
    ];
    args.extend_from_slice(extra);
    ok(&redlite(&args));
    p
}

/// `inspect --json --tensors` of a file.
fn inspect(model: &str) -> serde_json::Value {
    let (so, _) = ok(&redlite(&["inspect", model, "--json", "--tensors"]));
    serde_json::from_str(&so).expect("inspect --json parses")
}

fn tensor_type(info: &serde_json::Value, name: &str) -> String {
    let tensors = info["tensors"].as_array().expect("tensors array");
    let t = tensors
        .iter()
        .find(|t| t["name"] == name)
        .unwrap_or_else(|| panic!("tensor {name} missing"));
    t["type"].as_str().unwrap().to_string()
}

#[test]
fn every_mix_loads_has_the_real_shape_and_generates() {
    let dir = tempfile::tempdir().unwrap();
    let expect = [
        // (mix, [token_embd, output, attn_qkv, ssm_out, ssm_ba, gate_exps, down_exps, attn_v(blk.3)])
        (
            "cf2",
            [
                "Q4_K", "Q6_K", "Q4_K", "Q5_K", "Q8_0", "IQ1_M", "IQ2_XS", "Q4_K",
            ],
        ),
        (
            "q4_k_m",
            [
                "Q4_K", "Q6_K", "Q5_K", "Q4_K", "Q4_K", "Q4_K", "Q4_K", "Q6_K",
            ],
        ),
        (
            "q8_0",
            [
                "Q8_0", "Q8_0", "Q8_0", "Q8_0", "Q8_0", "Q8_0", "Q8_0", "Q8_0",
            ],
        ),
        (
            "bf16",
            [
                "BF16", "BF16", "BF16", "BF16", "BF16", "BF16", "BF16", "BF16",
            ],
        ),
    ];
    for (mix, types) in expect {
        let experts = if mix == "bf16" { 2 } else { 4 };
        let m = synth(dir.path(), mix, experts, &[]);
        let info = inspect(&m);
        let names = [
            "token_embd.weight",
            "output.weight",
            "blk.0.attn_qkv.weight",
            "blk.0.ssm_out.weight",
            "blk.0.ssm_ba.weight",
            "blk.0.ffn_gate_exps.weight",
            "blk.0.ffn_down_exps.weight",
            "blk.3.attn_v.weight",
        ];
        for (n, t) in names.iter().zip(types) {
            assert_eq!(tensor_type(&info, n), t, "{mix}: {n}");
        }
        let text = info.to_string();
        for needle in [
            "\"embedding_length\":2048",
            &format!("\"expert_count\":{experts}"),
            "\"attention.head_count\":16",
            "\"attention.head_count_kv\":2",
            "\"attention.key_length\":256",
            "\"rope.dimension_count\":64",
            "\"ssm.group_count\":16",
            "\"ssm.time_step_rank\":32",
            "\"ssm.state_size\":128",
            "\"expert_feed_forward_length\":512",
            "\"rope.freq_base\":5000000.0",
            "\"pattern\":\"3 linear + 1 full\"",
        ] {
            assert!(text.contains(needle), "{mix}: {needle} not in {text:.2000}");
        }
        let (so, se) = ok(&redlite(&[
            "run",
            &m,
            "-p",
            "def fibonacci(n):",
            "-n",
            "6",
            "--temp",
            "0",
            "--ignore-eos",
        ]));
        assert!(!so.trim().is_empty(), "{mix}: no text; {se}");
        assert!(se.contains("generation: 6 tokens"), "{mix}: {se}");
    }
}

#[test]
fn layers_must_be_a_multiple_of_four() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("x.gguf");
    let out = redlite(&[
        "synth",
        "--preset",
        "qwen3-coder-next",
        "--layers",
        "6",
        "-o",
        p.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("multiple of 4"));
    assert!(!p.exists());
}

#[test]
fn vocab_from_copies_the_tokenizer() {
    let dir = tempfile::tempdir().unwrap();
    let vocab = redlite_testkit::fixture("tokenizer/ggml-vocab-qwen2.gguf");
    let m = synth(
        dir.path(),
        "cf2",
        2,
        &["--vocab-from", vocab.to_str().unwrap()],
    );
    let info = inspect(&m);
    let text = info.to_string();
    assert!(text.contains("\"vocab_size\":151936"), "{text:.2000}");
    let (so, _) = ok(&redlite(&[
        "tokenize",
        &m,
        "--text",
        "def main():",
        "--ids",
    ]));
    let (so_ref, _) = ok(&redlite(&[
        "tokenize",
        vocab.to_str().unwrap(),
        "--text",
        "def main():",
        "--ids",
    ]));
    assert_eq!(so, so_ref);
}

/// Hundreds of recurrent decode steps: logits stay finite and of sane size.
#[test]
fn decode_stays_finite_over_hundreds_of_steps() {
    let dir = tempfile::tempdir().unwrap();
    let m = synth(dir.path(), "cf2", 8, &["--router-skew", "1.5"]);
    // Deterministic pseudo-random token ids below the built-in vocabulary size.
    let mut x: u64 = 12345;
    let ids: Vec<String> = (0..256)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((x >> 33) % 500).to_string()
        })
        .collect();
    let toks = dir.path().join("tokens.txt");
    std::fs::write(&toks, ids.join(" ")).unwrap();
    let out = dir.path().join("logits.npy");
    ok(&redlite(&[
        "logits",
        &m,
        "--tokens-file",
        toks.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--batch",
        "1",
    ]));
    let l = redlite_testkit::read_npy(&out);
    assert_eq!(l.shape[0], 256);
    for i in 0..l.shape[0] {
        let row = l.row(i);
        assert!(
            row.iter().all(|v| v.is_finite()),
            "position {i}: non-finite logit"
        );
        let max = row.iter().fold(0f32, |a, &v| a.max(v.abs()));
        let n = row.len() as f64;
        let mean = row.iter().map(|&v| v as f64).sum::<f64>() / n;
        let std = (row.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / n).sqrt();
        assert!(max < 60.0, "position {i}: |logit| up to {max}");
        assert!((0.3..20.0).contains(&std), "position {i}: logit std {std}");
    }
}

const LLAMA_BENCH_KEYS: &[&str] = &[
    "n_prompt",
    "n_gen",
    "n_threads",
    "avg_ts",
    "stddev_ts",
    "samples_ts",
    "avg_ns",
    "stddev_ns",
    "samples_ns",
    "model_filename",
    "model_size",
    "model_n_params",
    "n_depth",
    "redlite_min_ts",
    "redlite_max_ts",
    "redlite_median_ts",
    "redlite_weight_bytes_per_token",
    "redlite_gbps",
    "redlite_peak_rss_bytes",
    "redlite_load_seconds",
    "redlite_isa",
];

fn bench_json(model: &str, extra: &[&str]) -> Vec<serde_json::Value> {
    let mut args = vec!["bench", model, "--json", "-t", "1"];
    args.extend_from_slice(extra);
    let (so, _) = ok(&redlite(&args));
    let v: serde_json::Value = serde_json::from_str(&so)
        .unwrap_or_else(|e| panic!("stdout is not one JSON document ({e}): {so}"));
    v.as_array().expect("a JSON list of tests").clone()
}

/// The weight bytes a decoded token reads, from the file's own tensor table
/// (read here with gguf-py, independently of the bench code).
fn expected_bytes_per_token(model: &str) -> u64 {
    let py = r#"
import sys, gguf
r = gguf.GGUFReader(sys.argv[1])
kv = {f.name: f for f in r.fields.values()}
def u(k):
    f = kv[k]; return int(f.parts[f.data[0]][0])
E, k = u('qwen3next.expert_count'), u('qwen3next.expert_used_count')
total = 0
for t in r.tensors:
    n = int(t.n_bytes)
    if t.name.endswith('_exps.weight'):
        total += n // E * k
    elif t.name == 'token_embd.weight':
        total += n // int(t.shape[1])
    else:
        total += n
print(total)
"#;
    let out = Command::new(redlite_testkit::python())
        .args(["-c", py, model])
        .output()
        .expect("run python");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

#[test]
fn bench_json_has_llama_bench_shape() {
    let dir = tempfile::tempdir().unwrap();
    let m = synth(dir.path(), "cf2", 4, &[]);
    let tests = bench_json(&m, &["-p", "32", "-n", "8", "-r", "2"]);
    assert_eq!(tests.len(), 2, "{tests:?}");
    let size = std::fs::metadata(&m).unwrap().len();
    for t in &tests {
        for k in LLAMA_BENCH_KEYS {
            assert!(t.get(*k).is_some(), "missing {k} in {t}");
        }
        assert!(t["avg_ts"].as_f64().unwrap() > 0.0);
        assert!(t["avg_ns"].as_u64().unwrap() > 0);
        assert_eq!(t["samples_ts"].as_array().unwrap().len(), 2);
        assert_eq!(t["samples_ns"].as_array().unwrap().len(), 2);
        assert!(t["redlite_min_ts"].as_f64().unwrap() <= t["redlite_max_ts"].as_f64().unwrap());
        assert_eq!(t["n_threads"], 1);
        assert_eq!(t["n_depth"], 0);
        assert_eq!(t["model_filename"], m.as_str());
        let ms = t["model_size"].as_u64().unwrap();
        assert!(ms > 0 && ms < size, "model_size {ms} vs file {size}");
        assert!(t["model_n_params"].as_u64().unwrap() > 100_000_000);
        assert!(t["redlite_peak_rss_bytes"].as_u64().unwrap() > 0);
    }
    let (pp, tg) = (&tests[0], &tests[1]);
    assert_eq!(
        (pp["n_prompt"].as_u64(), pp["n_gen"].as_u64()),
        (Some(32), Some(0))
    );
    assert_eq!(
        (tg["n_prompt"].as_u64(), tg["n_gen"].as_u64()),
        (Some(0), Some(8))
    );
    let bpt = tg["redlite_weight_bytes_per_token"].as_u64().unwrap();
    assert_eq!(bpt, expected_bytes_per_token(&m));
    let gbps = tg["redlite_gbps"].as_f64().unwrap();
    let want = bpt as f64 * tg["redlite_median_ts"].as_f64().unwrap() / 1e9;
    assert!(
        (gbps - want).abs() <= 1e-9 * want.max(1.0),
        "{gbps} vs {want}"
    );
}

#[test]
fn bench_from_a_random_state_at_depth() {
    let dir = tempfile::tempdir().unwrap();
    let m = synth(dir.path(), "q4_k_m", 2, &[]);
    let tests = bench_json(
        &m,
        &[
            "-p",
            "0",
            "-n",
            "4",
            "-r",
            "1",
            "--start-position",
            "3000",
            "--fill-state",
            "random",
        ],
    );
    assert_eq!(tests.len(), 1);
    assert_eq!(tests[0]["n_depth"], 3000);
    assert_eq!(tests[0]["n_gen"], 4);
    assert_eq!(tests[0]["redlite_fill_state"], "random");
    assert!(tests[0]["avg_ts"].as_f64().unwrap() > 0.0);
    // The human table names the depth.
    let (so, _) = ok(&redlite(&[
        "bench",
        &m,
        "-p",
        "0",
        "-n",
        "2",
        "-r",
        "1",
        "--start-position",
        "100",
        "--fill-state",
        "random",
    ]));
    assert!(so.contains("| tg2 @ d100 |"), "{so}");
}

/// `--no-mmap` (data read into memory) and `--mlock` give the same logits,
/// bit for bit, as the default memory-mapped load.
#[test]
fn no_mmap_and_mlock_give_identical_logits() {
    let dir = tempfile::tempdir().unwrap();
    let model = redlite_testkit::fixture("tiny-s-CF2mix.gguf");
    let toks = dir.path().join("tokens.txt");
    std::fs::write(&toks, "1 22 333 44 5 66 77 8 9 100").unwrap();
    let run = |extra: &[&str], name: &str| {
        let out = dir.path().join(name);
        let mut args = vec![
            "logits",
            model.to_str().unwrap(),
            "--tokens-file",
            toks.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        ok(&redlite(&args));
        std::fs::read(&out).unwrap()
    };
    let mapped = run(&[], "a.npy");
    let lazy = run(&["--lazy-load"], "b.npy");
    let read = run(&["--no-mmap"], "c.npy");
    let locked = run(&["--no-mmap", "--mlock"], "d.npy");
    assert!(mapped.len() > 1000);
    assert!(mapped == lazy, "--lazy-load changed the logits");
    assert!(mapped == read, "--no-mmap changed the logits");
    assert!(mapped == locked, "--mlock changed the logits");
}

/// `bench --draft`: replayed drafts are all accepted, random ones none, and
/// each configuration's tokens equal plain generation's (bench fails
/// otherwise); the JSON names the drafts and the ratio to plain.
#[test]
fn bench_draft_replays_and_random_drafts() {
    let model = redlite_testkit::fixture("tiny-s-Q4_K_M.gguf");
    let m = model.to_str().unwrap();
    let tests = bench_json(
        m,
        &[
            "-p",
            "0",
            "-n",
            "24",
            "-r",
            "1",
            "--draft",
            "replay,random",
            "--draft-max",
            "4",
        ],
    );
    // tg24, then plain, replay and random generation.
    assert_eq!(tests.len(), 4, "{tests:?}");
    let by = |name: &str| {
        tests
            .iter()
            .find(|t| t["redlite_draft"] == name)
            .unwrap_or_else(|| panic!("no {name} test in {tests:?}"))
    };
    let (plain, replay, random) = (by("plain"), by("replay"), by("random"));
    assert_eq!(plain["redlite_vs_plain"].as_f64(), Some(1.0));
    assert_eq!(plain["redlite_verify_passes"], 0);
    let drafted = replay["redlite_drafted"].as_u64().unwrap();
    assert!(drafted > 0, "{replay}");
    assert_eq!(replay["redlite_accepted"].as_u64(), Some(drafted));
    assert!(random["redlite_drafted"].as_u64().unwrap() > 0, "{random}");
    assert_eq!(random["redlite_accepted"], 0);
    for t in [plain, replay, random] {
        assert_eq!(t["n_gen"], 24);
        assert_eq!(t["redlite_draft_max"], 4);
        assert!(t["redlite_vs_plain"].as_f64().unwrap() > 0.0);
    }
    // Not from a filled state.
    let out = redlite(&[
        "bench",
        m,
        "-p",
        "0",
        "-n",
        "4",
        "--draft",
        "replay",
        "--start-position",
        "8",
        "--fill-state",
        "random",
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--draft generates after a fresh"));
}

/// `bench --parallel`: one generation test per sequence count, its t/s the
/// aggregate of that many sequences decoded together (batched forward
/// passes), with the ratio to one sequence; a count of 0, or no generated
/// tokens, is refused.
#[test]
fn bench_parallel_reports_each_sequence_count() {
    let dir = tempfile::tempdir().unwrap();
    let m = dir.path().join("tiny.gguf");
    let m = m.to_str().unwrap();
    ok(&redlite(&["synth", "--preset", "tiny", "-o", m]));
    let (so, _) = ok(&redlite(&[
        "bench",
        m,
        "-p",
        "0",
        "-n",
        "3",
        "-r",
        "2",
        "-t",
        "1",
        "--parallel",
        "1,3",
        "--json",
    ]));
    let v: serde_json::Value = serde_json::from_str(&so).expect("bench --json parses");
    let tests = v.as_array().expect("a list of tests");
    // tg3, then the batched tests of 1 and 3 sequences.
    assert_eq!(tests.len(), 3, "{tests:?}");
    assert!(tests[0].get("redlite_parallel").is_none());
    for (t, np) in tests[1..].iter().zip([1u64, 3]) {
        assert_eq!(t["redlite_parallel"].as_u64(), Some(np), "{t}");
        assert_eq!(t["n_gen"], 3);
        assert_eq!(t["samples_ns"].as_array().map(Vec::len), Some(2));
        let ts = t["redlite_median_ts"].as_f64().unwrap();
        let each = t["redlite_per_sequence_ts"].as_f64().unwrap();
        assert!(ts > 0.0 && (each * np as f64 - ts).abs() < 1e-6 * ts, "{t}");
        assert!(t["redlite_vs_one_sequence"].as_f64().unwrap() > 0.0, "{t}");
    }
    assert_eq!(tests[1]["redlite_vs_one_sequence"].as_f64(), Some(1.0));
    let (so, _) = ok(&redlite(&[
        "bench",
        m,
        "-p",
        "0",
        "-n",
        "2",
        "-r",
        "1",
        "-t",
        "1",
        "--parallel",
        "2",
    ]));
    assert!(so.contains("x2 seqs"), "{so}");
    for bad in [
        &["--parallel", "0", "-n", "2"][..],
        &["--parallel", "2", "-n", "0"],
    ] {
        let mut args = vec!["bench", m, "-p", "4", "-r", "1"];
        args.extend_from_slice(bad);
        let out = redlite(&args);
        assert!(!out.status.success(), "{bad:?} accepted");
        assert!(String::from_utf8_lossy(&out.stderr).contains("--parallel"));
    }
}
