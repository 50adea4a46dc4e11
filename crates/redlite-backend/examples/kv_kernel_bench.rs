//! The decode attention's two kernels apart, one thread: scores
//! (`scores_kv`) and values (`pv_kv`) over runs of 256 cache rows of
//! Qwen3-Coder-Next's shape (2 KV heads of 256, 8 query heads each), from
//! the L2 cache (the same 256 rows again) and from memory (rows spread
//! over 512 MiB).
//!
//!   cargo run --release -p redlite-backend --example kv_kernel_bench -- [TYPE] [REPS]
//!
//! Prints ns per row and group of eight heads for each kernel and source.

use redlite_backend::kvattn::{pv_kv, scores_kv};
use redlite_backend::{KvData, KvType};
use std::time::Instant;

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().collect();
    let ty: KvType = args.get(1).map_or("f16", |s| s.as_str()).parse()?;
    let reps: usize = args
        .get(2)
        .map_or(Ok(2000), |s| s.parse())
        .map_err(|e| format!("{e}"))?;
    let (groups, hd, kb) = (2usize, 256usize, 256usize);
    let row = groups * hd;
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut rnd = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5
    };
    // Blocks of 256 rows: enough of them for 512 MiB of f16 keys.
    let nblk = (512usize << 20) / ty.bytes(kb * row).max(1);
    let mut blocks = Vec::with_capacity(nblk);
    let vals: Vec<f32> = (0..kb * row).map(|_| rnd()).collect();
    for _ in 0..nblk {
        let mut d = KvData::block(ty, kb * row);
        d.push(&vals);
        blocks.push(d);
    }
    let q: Vec<f32> = (0..groups * 8 * hd).map(|_| rnd() * 0.1).collect();
    let mut scores = vec![0f32; groups * 8 * kb];
    let p: Vec<f32> = (0..groups * 8 * kb).map(|_| rnd().abs() * 0.01).collect();
    let mut o = vec![0f32; groups * 8 * hd];
    let mut buf = Vec::new();
    let per = |t: f64, n: usize| t / (n * kb * groups) as f64 * 1e9;
    for round in 0..2 {
        for (name, hot) in [("L2", true), ("memory", false)] {
            let n = if hot { reps } else { nblk.min(reps) };
            let t0 = Instant::now();
            for i in 0..n {
                let b = if hot { &blocks[0] } else { &blocks[i] };
                scores_kv(
                    &q,
                    hd,
                    groups,
                    b.rows(),
                    0,
                    row,
                    kb,
                    &mut scores,
                    kb,
                    &mut buf,
                );
            }
            let ts = t0.elapsed().as_secs_f64();
            let t0 = Instant::now();
            for i in 0..n {
                let b = if hot {
                    &blocks[0]
                } else {
                    &blocks[(i + n / 2) % nblk]
                };
                pv_kv(&mut o, hd, groups, &p, kb, b.rows(), 0, row, kb, &mut buf);
            }
            let tv = t0.elapsed().as_secs_f64();
            println!(
                "round {round} {ty} {name:6}: scores {:6.1} ns, values {:6.1} ns per row and group ({} runs of {kb} rows)",
                per(ts, n),
                per(tv, n),
                n
            );
        }
    }
    // As decode reads them: a block's keys, then its values (the next block).
    for round in 0..2 {
        let n = (nblk / 2).min(reps);
        let (mut ts, mut tv) = (0f64, 0f64);
        for i in 0..n {
            let t0 = Instant::now();
            scores_kv(
                &q,
                hd,
                groups,
                blocks[2 * i].rows(),
                0,
                row,
                kb,
                &mut scores,
                kb,
                &mut buf,
            );
            let t1 = Instant::now();
            pv_kv(
                &mut o,
                hd,
                groups,
                &p,
                kb,
                blocks[2 * i + 1].rows(),
                0,
                row,
                kb,
                &mut buf,
            );
            ts += (t1 - t0).as_secs_f64();
            tv += t1.elapsed().as_secs_f64();
        }
        println!(
            "round {round} {ty} keys then values: scores {:6.1} ns, values {:6.1} ns per row and group ({n} runs)",
            per(ts, n),
            per(tv, n)
        );
    }
    std::hint::black_box((&scores, &o));
    Ok(())
}
