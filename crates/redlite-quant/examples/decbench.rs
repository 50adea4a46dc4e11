//! Decode's one-token product as the CPU backend runs it: tasks of 128
//! rows, each taken from its two halves in turn; the file layout's `dot`
//! against the lanes layout's (`q16::lanes`, Q4_K / Q5_K repacked) `dot`,
//! on THREADS threads, weights in GB/s of wall time
//! and of the threads' CPU time (`/proc/thread-self/schedstat`, so a busy
//! machine's other work counts less).
//!
//! `cargo run --release -p redlite-quant --example decbench [MIB] [THREADS] [TYPE] [N_IN]`
//! (defaults 256 MiB, 1 thread, Q4_K and Q5_K, rows of 2048; a type name or `all` for others).

use redlite_quant::q16::{self, Q16Act, Q16Kernels, Q16Ref};
use redlite_quant::GgmlType;
use std::time::Instant;

fn cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}

const TILE: usize = 128;

/// One thread's share: rows `r0..r1` in tiles of 128 as two streams.
fn run(k: &Q16Kernels, data: &[u8], rb: usize, x: Q16Ref<'_>, r0: usize, r1: usize) -> f32 {
    let mut sink = 0f32;
    let mut t0 = r0;
    while t0 < r1 {
        let n = TILE.min(r1 - t0);
        let h = n.div_ceil(2);
        for i in 0..h {
            let a = &data[(t0 + i) * rb..(t0 + i + 1) * rb];
            if i + h < n {
                let b = &data[(t0 + h + i) * rb..(t0 + h + i + 1) * rb];
                sink += (k.dot)(a, x) + (k.dot)(b, x);
            } else {
                sink += (k.dot)(a, x);
            }
        }
        t0 += n;
    }
    sink
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mib: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(256);
    let threads: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(1).max(1);
    let only = args.get(3).cloned();
    let n: usize = args.get(4).and_then(|s| s.parse().ok()).unwrap_or(2048);
    println!(
        "q16 level {:?}, {mib} MiB per type, {threads} threads, rows of {n}",
        q16::level()
    );
    for ty in [
        GgmlType::Q8_0,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
        GgmlType::IQ2_XS,
        GgmlType::IQ1_M,
    ] {
        if only
            .as_deref()
            .is_some_and(|o| o != ty.name() && o != "all")
        {
            continue;
        }
        let k = q16::kernels(ty).expect("q16");
        let lk = q16::lanes::kernels(ty);
        if only.is_none() && lk.is_none() {
            continue;
        }
        let rb = ty.row_bytes(n as u64).expect("row") as usize;
        let rows = ((mib << 20) / rb).max(2);
        let mut s = 0x9e3779b97f4a7c15u64;
        let mut data: Vec<u8> = (0..rows * rb)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                s as u8
            })
            .collect();
        let h = half::f16::from_f32(0.01).to_bits().to_le_bytes();
        for blk in data.chunks_exact_mut(ty.type_size()) {
            match ty {
                GgmlType::Q6_K => blk[208..210].copy_from_slice(&h),
                GgmlType::Q4_K | GgmlType::Q5_K => {
                    blk[0..2].copy_from_slice(&h);
                    blk[2..4].copy_from_slice(&h);
                }
                GgmlType::Q8_0 | GgmlType::IQ2_XS => blk[0..2].copy_from_slice(&h),
                _ => {}
            }
        }
        let mut lanes = data.clone();
        if lk.is_some() {
            q16::lanes::repack(ty, &data, &mut lanes);
        }
        let x: Vec<f32> = (0..n)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0)
            .collect();
        let mut a = Q16Act::default();
        a.quantize(&x);
        let xv = a.view();
        let mut res = Vec::new();
        // Small buffers (in cache) are run over several times.
        let reps = (256 / mib.max(1)).max(1);
        let modes: Vec<(&str, Q16Kernels, &Vec<u8>, bool)> = match lk {
            Some(l) => vec![
                ("file dot  ", k, &data, false),
                ("lanes dot ", l, &lanes, false),
                ("file dot  ", k, &data, false),
                ("lanes dot ", l, &lanes, false),
            ],
            None => vec![
                ("file dot  ", k, &data, false),
                ("file dot  ", k, &data, false),
            ],
        };
        for (name, k, data, _) in modes {
            let mut best = (f64::MAX, f64::MAX);
            for _ in 0..3 {
                let t = Instant::now();
                let per = rows.div_ceil(threads);
                let cpu: u64 = std::thread::scope(|sc| {
                    let hs: Vec<_> = (0..threads)
                        .map(|i| {
                            let (d, k) = (data, &k);
                            sc.spawn(move || {
                                let c0 = cpu_ns();
                                let mut r = 0f32;
                                for _ in 0..reps {
                                    r += run(
                                        k,
                                        d,
                                        rb,
                                        xv,
                                        (i * per).min(rows),
                                        ((i + 1) * per).min(rows),
                                    );
                                }
                                (cpu_ns() - c0, r)
                            })
                        })
                        .collect();
                    hs.into_iter()
                        .map(|h| h.join().map(|v| v.0).unwrap_or(0))
                        .sum()
                });
                let wall = t.elapsed().as_secs_f64();
                best.0 = best.0.min(wall);
                best.1 = best.1.min(cpu as f64 * 1e-9 / threads as f64);
            }
            let gb = (reps * rows * rb) as f64 / 1e9;
            res.push(format!(
                "{}: {:6.2} wall, {:6.2} cpu",
                name,
                gb / best.0,
                gb / best.1
            ));
        }
        println!("{:>7} (GB/s):\n  {}", ty.name(), res.join("\n  "));
    }
}
