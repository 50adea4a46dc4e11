//! Shared helpers of the model tests: fixtures, forward modes, distances.
#![allow(dead_code)]

use std::path::Path;

use redlite_model::Model;
use redlite_testkit::{fixture, Array};

pub const PROMPTS: [&str; 6] = ["one", "hello", "prose", "code", "unicode", "rep120"];

pub fn load(name: &str) -> Model {
    Model::load(&fixture(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// A fixture model on a CPU backend with the given activation path.
#[allow(dead_code)]
pub fn load_with(name: &str, act: redlite_backend::Activations) -> Model {
    let be = redlite_backend::CpuBackend::new(None)
        .expect("thread pool")
        .with_activations(act);
    Model::load_with_backend(&fixture(name), std::sync::Arc::new(be))
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

pub fn prompts() -> serde_json::Value {
    let s = std::fs::read_to_string(fixture("prompts.json")).expect("prompts.json");
    serde_json::from_str(&s).expect("prompts.json parses")
}

pub fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .expect("id array")
        .iter()
        .map(|x| x.as_u64().expect("id") as u32)
        .collect()
}

pub fn prompt_ids(p: &serde_json::Value, name: &str) -> Vec<u32> {
    ids(&p[name]["ids"])
}

/// All logits `[T, vocab]`, feeding the prompt in batches of `batch` tokens.
pub fn run(model: &Model, tokens: &[u32], batch: usize) -> Vec<f32> {
    let mut st = model.new_state();
    let mut out = Vec::new();
    for chunk in tokens.chunks(batch.max(1)) {
        out.extend(model.forward(&mut st, chunk, true).expect("forward"));
    }
    assert_eq!(st.pos(), tokens.len());
    out
}

/// KL(p‖q) of the softmaxes of two logit rows, in nats (f64).
pub fn kl(p_logits: &[f32], q_logits: &[f32]) -> f64 {
    let lse = |l: &[f32]| {
        let m = l.iter().fold(f64::NEG_INFINITY, |a, &b| a.max(b as f64));
        m + l.iter().map(|&x| (x as f64 - m).exp()).sum::<f64>().ln()
    };
    let (lp, lq) = (lse(p_logits), lse(q_logits));
    p_logits
        .iter()
        .zip(q_logits)
        .map(|(&a, &b)| {
            let lpa = a as f64 - lp;
            lpa.exp() * (lpa - (b as f64 - lq))
        })
        .sum::<f64>()
        .max(0.0)
}

/// Index of the largest logit (the first one on ties).
pub fn argmax(v: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if x > v[best] {
            best = i;
        }
    }
    best as u32
}

/// A model's logits of every prompt against transformers (`refs.npz`),
/// whole-prompt prefill and token by token: every position within
/// max |Δlogit| 5e-3 and KL 1e-6. `label` names the run in the output.
pub fn bf16_vs_transformers(model: &Model, model_name: &str, label: &str) {
    let refs = redlite_testkit::read_npz(&fixture("refs.npz"));
    let p = prompts();
    for name in PROMPTS {
        let tokens = prompt_ids(&p, name);
        let reference = &refs[&format!("{model_name}.{name}")];
        for (mode, batch) in [("prefill", tokens.len()), ("token-by-token", 1)] {
            let ours = run(model, &tokens, batch);
            let d = per_position(reference, &ours);
            let worst_abs = d.iter().map(|x| x.0).fold(0f32, f32::max);
            let worst_kl = d.iter().map(|x| x.1).fold(0f64, f64::max);
            println!(
                "{label}{model_name} {name:8} {mode:15} max|Δ| {worst_abs:.3e}  max KL {worst_kl:.3e}"
            );
            for (i, (a, k)) in d.iter().enumerate() {
                assert!(
                    *a <= 5e-3,
                    "{label}{model_name} {name} {mode} pos {i}: |Δlogit| {a}"
                );
                assert!(
                    *k <= 1e-6,
                    "{label}{model_name} {name} {mode} pos {i}: KL {k}"
                );
            }
        }
    }
}

/// tiny-s-bf16's logits on the 32,768-token prompt (fed in batches of 4096)
/// against transformers (`long32k.npz`): every compared position within
/// |Δlogit| 2e-3 and KL 1e-6.
pub fn long32k_vs_transformers(model: &Model, label: &str) {
    let s = std::fs::read_to_string(fixture("long32k.json")).expect("long32k.json");
    let j: serde_json::Value = serde_json::from_str(&s).expect("long32k.json parses");
    let tokens = ids(&j["ids"]);
    assert_eq!(tokens.len(), 32768);
    let npz = redlite_testkit::read_npz(&fixture("long32k.npz"));
    let positions: Vec<usize> = npz["positions"].data.iter().map(|&p| p as usize).collect();
    let reference = &npz["logits"];
    let vocab = model.config().vocab_size;
    let mut st = model.new_state();
    let mut ours = vec![Vec::new(); positions.len()];
    let start = std::time::Instant::now();
    for (b, chunk) in tokens.chunks(4096).enumerate() {
        let p0 = b * 4096;
        let logits = model.forward(&mut st, chunk, true).expect("forward");
        for (i, &p) in positions.iter().enumerate() {
            if (p0..p0 + chunk.len()).contains(&p) {
                ours[i] = logits[(p - p0) * vocab..(p - p0 + 1) * vocab].to_vec();
            }
        }
    }
    println!(
        "{label}32768 tokens in {:.1} s",
        start.elapsed().as_secs_f64()
    );
    let (mut worst_abs, mut worst_kl) = (0f32, 0f64);
    for (i, &p) in positions.iter().enumerate() {
        let (a, k) = (
            max_abs(reference.row(i), &ours[i]),
            kl(reference.row(i), &ours[i]),
        );
        worst_abs = worst_abs.max(a);
        worst_kl = worst_kl.max(k);
        assert!(a <= 2e-3, "{label}position {p}: |Δlogit| {a}");
        assert!(k <= 1e-6, "{label}position {p}: KL {k}");
    }
    println!(
        "{label}long32k: max|Δ| {worst_abs:.2e}, max KL {worst_kl:.2e} over {} positions",
        positions.len()
    );
}

pub fn max_abs(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs()))
}

/// Per-position (max |Δ|, KL(ref‖ours)) over `[T, vocab]` arrays.
pub fn per_position(reference: &Array, ours: &[f32]) -> Vec<(f32, f64)> {
    let v = reference.shape[1];
    assert_eq!(ours.len(), reference.data.len(), "logit count");
    (0..reference.shape[0])
        .map(|i| {
            let r = reference.row(i);
            let o = &ours[i * v..(i + 1) * v];
            (max_abs(r, o), kl(r, o))
        })
        .collect()
}

pub fn percentile(mut v: Vec<f64>, p: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        return 0.0;
    }
    // numpy's default (linear interpolation).
    let pos = p / 100.0 * (v.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    v[lo] + (v[hi] - v[lo]) * (pos - lo as f64)
}

pub fn exists(name: &str) -> bool {
    Path::new(&fixture(name)).exists()
}
