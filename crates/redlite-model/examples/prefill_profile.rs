//! Wall-clock time of a prefill pass by operation (CPU backend).
//!
//! `cargo run --release -p redlite-model --example prefill_profile -- MODEL [TOKENS] [THREADS] [PASSES] [STEPS]`
//!
//! Runs one warm-up pass, then PASSES (default 2) passes of TOKENS (default
//! 512) random tokens from a fresh state (none when TOKENS is 0), and then,
//! when STEPS (default 0) is given, STEPS one-token decode steps after a
//! warm-up of two, each with a [`Trace`] that
//! timestamps every named intermediate and every product's input. The time
//! between two consecutive events is charged to the later one (the
//! operation that produced it); layer numbers are dropped, so each line sums
//! every layer. Routed experts (batched, prefill): `in:ffn_gate_exps`
//! closes the router and the gathering of each expert's tokens,
//! `in:ffn_down_exps` every expert's gate and up products and SwiGLU, and
//! `ffn_moe_out` every down product and the weighted sum.
//! Prints the best pass's table, then the decode steps' sums (per step).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use redlite_backend::{CpuBackend, CpuOptions};
use redlite_model::{Model, Trace};

/// Seconds and event count per operation.
type ByOp = BTreeMap<String, (f64, usize)>;

struct Clock {
    last: Instant,
    by: ByOp,
}

impl Clock {
    fn tick(&mut self, name: String) {
        let now = Instant::now();
        let e = self.by.entry(name).or_insert((0.0, 0));
        e.0 += now.duration_since(self.last).as_secs_f64();
        e.1 += 1;
        self.last = now;
    }
}

impl Trace for Clock {
    fn tensor(&mut self, name: &str, _rows: usize, _cols: usize, _data: &[f32]) {
        // `attn_norm-3` → `attn_norm`: every layer on one line.
        let base = match name.rsplit_once('-') {
            Some((b, l)) if l.parse::<usize>().is_ok() => b,
            _ => name,
        };
        self.tick(base.to_string());
    }
    fn matmul_input(&mut self, weight: &str, _e: Option<usize>, _rows: usize, _x: &[f32]) {
        let w = weight
            .split('.')
            .filter(|p| p.parse::<usize>().is_err() && *p != "blk" && *p != "weight");
        self.tick(format!("in:{}", w.collect::<Vec<_>>().join(".")));
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let path = args
        .first()
        .ok_or("usage: prefill_profile MODEL [TOKENS] [THREADS] [PASSES] [STEPS]")?;
    let n: usize = args.get(1).map_or(Ok(512), |a| a.parse())?;
    let threads: usize = args.get(2).map_or(Ok(2), |a| a.parse())?;
    let passes: usize = args.get(3).map_or(Ok(2), |a| a.parse())?;
    let steps: usize = args.get(4).map_or(Ok(0), |a| a.parse())?;
    let be = CpuBackend::with_options(&CpuOptions {
        threads: Some(threads),
        ..Default::default()
    })?;
    let model = Model::load_with_backend(Path::new(path), Arc::new(be))?;
    let vocab = model.config().vocab_size as u64;
    let mut s: u64 = 1;
    let toks: Vec<u32> = (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 33) % vocab) as u32
        })
        .collect();
    if n > 0 {
        let mut best: Option<(f64, ByOp)> = None;
        for pass in 0..=passes {
            let mut st = model.new_state();
            let mut c = Clock {
                last: Instant::now(),
                by: BTreeMap::new(),
            };
            let t0 = Instant::now();
            model.forward_traced(&mut st, &toks, false, Some(&mut c))?;
            let total = t0.elapsed().as_secs_f64();
            eprintln!("pass {pass}: {total:.3} s, {:.2} t/s", n as f64 / total);
            if pass > 0 && best.as_ref().is_none_or(|b| total < b.0) {
                best = Some((total, c.by));
            }
        }
        let (total, by) = best.ok_or("no pass")?;
        println!("best pass {total:.3} s ({:.2} t/s)", n as f64 / total);
        table(by, total, 1.0);
    }
    if steps > 0 {
        let mut st = model.new_state();
        let mut c = Clock {
            last: Instant::now(),
            by: BTreeMap::new(),
        };
        let mut tok = toks.first().copied().unwrap_or(0);
        let mut total = 0.0;
        for step in 0..steps + 2 {
            if step == 2 {
                c.by.clear();
                total = 0.0;
            }
            c.last = Instant::now();
            let t0 = Instant::now();
            let logits = model.forward_traced(&mut st, &[tok], false, Some(&mut c))?;
            total += t0.elapsed().as_secs_f64();
            tok = (0..logits.len())
                .max_by(|&a, &b| logits[a].total_cmp(&logits[b]))
                .unwrap_or(0) as u32;
        }
        println!(
            "{steps} decode steps: {:.2} ms a step ({:.2} t/s)",
            1e3 * total / steps as f64,
            steps as f64 / total
        );
        table(c.by, total, steps as f64);
    }
    Ok(())
}

/// The operations by falling time; `per` divides the seconds and events
/// (one decode step's share).
fn table(by: ByOp, total: f64, per: f64) {
    let mut rows: Vec<_> = by.into_iter().collect();
    rows.sort_by(|a, b| b.1 .0.total_cmp(&a.1 .0));
    println!("| op (ends at) | ms | % | events |\n|---|---|---|---|");
    for (name, (sec, cnt)) in rows {
        println!(
            "| {name} | {:.3} | {:.1} | {} |",
            1e3 * sec / per,
            100.0 * sec / total,
            cnt as f64 / per
        );
    }
}
