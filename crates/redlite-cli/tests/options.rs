//! The settings the command line hands to the libraries: each flag (and the
//! environment variable documented beside it) reaches the forward pass, and
//! each non-default path still computes the model (against the exact-math
//! reference of the quantized fixture, or bit for bit against the default
//! path where the arithmetic is the same).

mod common;
use common::ok;

use std::path::Path;
use std::process::{Command, Output};

const MODEL: &str = "tiny-s-Q4_K_M.gguf";

/// `redlite ARGS` with `env` set and every variable the command line reads
/// for these settings removed first (so the caller's environment cannot
/// change the outcome).
fn redlite_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_redlite"));
    for v in [
        "REDLITE_F32_ACT",
        "REDLITE_ISA",
        "REDLITE_NO_HUGEPAGES",
        "REDLITE_EXPERT_READERS",
        "PI_CODING_AGENT_DIR",
    ] {
        c.env_remove(v);
    }
    c.envs(env.iter().copied());
    c.args(args).output().expect("run redlite")
}

fn prompt_ids(name: &str) -> Vec<u32> {
    let p: serde_json::Value =
        serde_json::from_slice(&std::fs::read(redlite_testkit::fixture("prompts.json")).unwrap())
            .unwrap();
    p[name]["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as u32)
        .collect()
}

/// `redlite logits` of the fixture model over `ids`, on the CPU.
fn logits(dir: &Path, ids: &[u32], extra: &[&str], env: &[(&str, &str)]) -> Vec<f32> {
    let toks = dir.join("tokens.txt");
    let text: Vec<String> = ids.iter().map(|i| i.to_string()).collect();
    std::fs::write(&toks, text.join(" ")).unwrap();
    let out = dir.join("out.npy");
    let _ = std::fs::remove_file(&out);
    let model = redlite_testkit::fixture(MODEL);
    let mut args = vec![
        "logits",
        model.to_str().unwrap(),
        "--device",
        "cpu",
        "--tokens-file",
        toks.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    ok(&redlite_env(&args, env));
    let a = redlite_testkit::read_npy(&out);
    assert_eq!(a.shape, vec![ids.len(), 1024], "{extra:?} {env:?}");
    a.data
}

/// Largest |Δ| against the exact-math reference.
fn max_abs(got: &[f32], want: &[f32]) -> f32 {
    assert_eq!(got.len(), want.len());
    got.iter()
        .zip(want)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max)
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// `--f32-activations` (or `REDLITE_F32_ACT`), `--isa` (or `REDLITE_ISA`),
/// `--no-mmap --no-hugepages` and `--expert-readers` each reach the forward
/// pass, and each path computes the model.
#[test]
fn kernel_and_load_settings_reach_the_forward_pass() {
    let dir = tempfile::tempdir().unwrap();
    let ids = prompt_ids("prose");
    let exact = redlite_testkit::read_npz(&redlite_testkit::fixture("exact-Q4_K_M.npz"));
    let want = &exact["prose"].data;

    let int16 = logits(dir.path(), &ids, &[], &[]);
    let f32a = logits(dir.path(), &ids, &["--f32-activations"], &[]);
    let (d_int16, d_f32) = (max_abs(&int16, want), max_abs(&f32a, want));
    println!("max |Δ| from exact: int16 {d_int16:.2e}, f32 {d_f32:.2e}");
    // The f32 path is exact math on the stored weights; the integer path
    // rounds the activations to 15 bits, so it is a different computation.
    assert!(d_f32 <= 5e-3, "f32 activations: max |Δ| {d_f32}");
    assert!(d_int16 <= 5e-2, "int16 activations: max |Δ| {d_int16}");
    assert!(
        bits(&int16) != bits(&f32a),
        "--f32-activations changed nothing"
    );
    for v in ["1", "true", "yes"] {
        let env = logits(dir.path(), &ids, &[], &[("REDLITE_F32_ACT", v)]);
        assert!(bits(&env) == bits(&f32a), "REDLITE_F32_ACT={v}");
    }
    let env = logits(dir.path(), &ids, &[], &[("REDLITE_F32_ACT", "0")]);
    assert!(bits(&env) == bits(&int16), "REDLITE_F32_ACT=0");

    // Every SIMD level computes the same model: the kernels of each level
    // agree with the scalar twins to f32 rounding (summation order), which
    // moves the logits less than the activations' 15-bit rounding does
    // (measured: at most 4.3e-3 from the AVX-512 level, against 1.05e-2
    // from exact); f32 activations at the scalar level are still exact math.
    for isa in ["scalar", "avx2", "avx512"] {
        let got = logits(dir.path(), &ids, &["--isa", isa], &[]);
        let (d, e) = (max_abs(&got, &int16), max_abs(&got, want));
        println!("--isa {isa}: max |Δ| {d:.2e} from the default level, {e:.2e} from exact");
        assert!(d <= 1e-2, "--isa {isa}: max |Δ| {d} from the default level");
        assert!(e <= 5e-2, "--isa {isa}: max |Δ| {e} from exact");
    }
    let scalar_f32 = logits(
        dir.path(),
        &ids,
        &["--f32-activations"],
        &[("REDLITE_ISA", "scalar")],
    );
    let d = max_abs(&scalar_f32, want);
    assert!(d <= 5e-3, "scalar f32 activations: max |Δ| {d}");

    // Reading the file into memory, with or without huge pages, and
    // streaming the experts with other reader counts: the same bytes, the
    // same kernels, the same bits.
    for (extra, env) in [
        (&["--no-mmap"][..], &[][..]),
        (&["--no-mmap", "--no-hugepages"][..], &[][..]),
        (&["--no-mmap"][..], &[("REDLITE_NO_HUGEPAGES", "1")][..]),
        (
            &["--expert-cache", "1MiB", "--expert-readers", "1,1"][..],
            &[][..],
        ),
        (
            &["--expert-cache", "1MiB"][..],
            &[("REDLITE_EXPERT_READERS", "2,1")][..],
        ),
    ] {
        let got = logits(dir.path(), &ids, extra, env);
        assert!(
            bits(&got) == bits(&int16),
            "{extra:?} {env:?}: logits differ"
        );
    }
}

/// `bench` says which level and activations it ran with, so the flags and
/// variables are seen to take effect; bad values are refused by name.
#[test]
fn bench_reports_the_kernel_settings_and_bad_values_are_refused() {
    let model = redlite_testkit::fixture(MODEL);
    let model = model.to_str().unwrap();
    let bench = |extra: &[&str], env: &[(&str, &str)]| -> String {
        let mut args = vec![
            "bench", model, "--device", "cpu", "-p", "8", "-n", "2", "-r", "1", "-t", "1",
        ];
        args.extend_from_slice(extra);
        ok(&redlite_env(&args, env)).1
    };
    let se = bench(&["--isa", "scalar"], &[]);
    assert!(se.contains("scalar, int16 activations (Scalar)"), "{se}");
    let se = bench(&["--f32-activations"], &[("REDLITE_ISA", "scalar")]);
    assert!(se.contains("scalar, f32 activations"), "{se}");
    // avx2 where the CPU has it, else what it has.
    let det = redlite_quant::detected_isa().min(redlite_quant::Isa::Avx2);
    let se = bench(&[], &[("REDLITE_ISA", "AVX2")]);
    assert!(se.contains(&format!(", {det}, int16 activations")), "{se}");

    for (extra, env, what) in [
        (&["--isa", "sse9"][..], &[][..], "not a SIMD level"),
        (&[][..], &[("REDLITE_ISA", "fast")][..], "not a SIMD level"),
        (&[][..], &[("REDLITE_F32_ACT", "maybe")][..], "maybe"),
        (&["--expert-readers", "0,6"][..], &[][..], "DEMAND,PREFETCH"),
    ] {
        let mut args = vec!["bench", model, "--device", "cpu", "-p", "8", "-n", "0"];
        args.extend_from_slice(extra);
        let out = redlite_env(&args, env);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{extra:?} {env:?} was accepted");
        assert!(err.contains(what), "{extra:?} {env:?}: {err}");
    }
}

/// `--cache-type-k` / `--cache-type-v` (and llama.cpp's `-ctk` / `-ctv`)
/// reach the KV cache: the short and long spellings give the same bits,
/// each narrower type moves the logits a little (within the types'
/// rounding of the exact reference), `f32` is the default bit for bit,
/// `bench` names the types, and a type this build lacks is refused.
#[test]
fn cache_types_reach_the_kv_cache() {
    let dir = tempfile::tempdir().unwrap();
    let ids = prompt_ids("prose");
    let exact = redlite_testkit::read_npz(&redlite_testkit::fixture("exact-Q4_K_M.npz"));
    let want = &exact["prose"].data;
    let f32a = ["--f32-activations"];
    let base = logits(dir.path(), &ids, &f32a, &[]);
    let explicit = logits(
        dir.path(),
        &ids,
        &["--f32-activations", "--cache-type-k", "f32", "-ctv", "f32"],
        &[],
    );
    assert!(bits(&explicit) == bits(&base), "f32 is the default");
    for t in ["f16", "bf16", "q8_0", "q4_0"] {
        let long = logits(
            dir.path(),
            &ids,
            &[
                "--f32-activations",
                "--cache-type-k",
                t,
                "--cache-type-v",
                t,
            ],
            &[],
        );
        let short = logits(
            dir.path(),
            &ids,
            &["--f32-activations", "-ctk", t, "-ctv", t],
            &[],
        );
        assert!(bits(&long) == bits(&short), "{t}: -ctk/-ctv differ");
        assert!(bits(&long) != bits(&base), "{t}: changed nothing");
        let d = max_abs(&long, want);
        println!("KV {t}: max |Δ| {d:.2e} from exact");
        // q4_0 keeps 4 bits a value: its logits move by tenths (its mean
        // KL, 5e-4 to 1.3e-3 on the fixtures, is bounded in the model's
        // kv_types test).
        let bound = if t == "q4_0" { 0.5 } else { 5e-2 };
        assert!(d <= bound, "KV {t}: max |Δ| {d} from exact");
    }
    let model = redlite_testkit::fixture(MODEL);
    let model = model.to_str().unwrap();
    let args = [
        "bench", model, "--device", "cpu", "-p", "8", "-n", "2", "-r", "1", "-t", "1", "-ctk",
        "q8_0", "-ctv", "f16",
    ];
    let se = ok(&redlite_env(&args, &[])).1;
    assert!(se.contains("KV cache K q8_0 V f16"), "{se}");
    let out = redlite_env(
        &[
            "bench", model, "--device", "cpu", "-p", "8", "-n", "0", "-ctk", "q5_0",
        ],
        &[],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "q5_0 was accepted");
    assert!(err.contains("not a KV cache type"), "{err}");
}

/// `setup-pi` writes into `--dir`, else `$PI_CODING_AGENT_DIR`, else
/// `$HOME/.pi/agent`.
#[test]
fn setup_pi_resolves_the_agent_directory() {
    let home = tempfile::tempdir().unwrap();
    let agent = tempfile::tempdir().unwrap();
    let chosen = tempfile::tempdir().unwrap();
    let home_s = home.path().to_str().unwrap();
    let agent_s = agent.path().to_str().unwrap();
    let chosen_s = chosen.path().to_str().unwrap();
    let models = |d: &Path| d.join("models.json");

    ok(&redlite_env(&["setup-pi"], &[("HOME", home_s)]));
    assert!(models(&home.path().join(".pi/agent")).is_file());

    ok(&redlite_env(
        &["setup-pi"],
        &[("HOME", home_s), ("PI_CODING_AGENT_DIR", agent_s)],
    ));
    assert!(models(agent.path()).is_file());

    ok(&redlite_env(
        &["setup-pi", "--dir", chosen_s],
        &[("HOME", home_s), ("PI_CODING_AGENT_DIR", agent_s)],
    ));
    assert!(models(chosen.path()).is_file());
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(models(chosen.path())).unwrap()).unwrap();
    assert!(v["providers"]["redlite"].is_object(), "{v}");
}
