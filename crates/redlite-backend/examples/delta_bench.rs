//! Single-thread speed of one head of the chunked delta rule: the per-row
//! reference against the blocked form, on the model's head size.
//!
//! `cargo run --release -p redlite-backend --example delta_bench [TOKENS]`

use redlite_backend::DeltaInputs;
use std::time::Instant;

fn main() {
    let t: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(512);
    let (h_k, h_v, d_k, d_v) = (16, 32, 128, 128);
    let mut s = 0x9e37_79b9_7f4a_7c15u64;
    let mut vec = |n: usize| -> Vec<f32> {
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                ((s >> 40) as f32 / (1u64 << 24) as f32) * 0.2 - 0.1
            })
            .collect()
    };
    let q = vec(t * h_k * d_k);
    let k = vec(t * h_k * d_k);
    let v = vec(t * h_v * d_v);
    let beta: Vec<f32> = vec(t * h_v).iter().map(|x| 0.5 + x).collect();
    let gm: f32 = std::env::args()
        .nth(2)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0.1);
    let g: Vec<f32> = vec(t * h_v).iter().map(|x| -gm * (1.0 + 5.0 * x)).collect();
    let s0 = vec(d_v * d_k);
    let inp = DeltaInputs {
        q: &q,
        k: &k,
        v: &v,
        beta: &beta,
        g: &g,
        n_tok: t,
        h_k,
        h_v,
        d_k,
        d_v,
    };
    type Head = fn(&DeltaInputs<'_>, usize, &mut [f32], &mut [f32]);
    let runs: [(&str, Head); 2] = [
        (
            "reference (per row)",
            redlite_backend::cpu::delta_head_chunked,
        ),
        ("blocked", redlite_backend::delta::delta_head_blocked),
    ];
    for (name, f) in runs {
        let mut best = f64::MAX;
        for _ in 0..5 {
            let mut m = s0.clone();
            let mut o = vec![0f32; t * d_v];
            let t0 = Instant::now();
            f(&inp, 0, &mut m, &mut o);
            best = best.min(t0.elapsed().as_secs_f64());
        }
        println!(
            "{name:>20}: {t} tokens, one head: {:.3} ms ({:.1} µs per token)",
            best * 1e3,
            best * 1e6 / t as f64
        );
    }
}
