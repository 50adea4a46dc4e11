//! The machine's streaming read bandwidth: THREADS threads each sum their
//! share of a MIB-mebibyte buffer (integer adds the compiler vectorises, four
//! chains per thread), best of REPS passes, in GB/s. The reference that
//! decode's weight traffic is held against in `bench/RESULTS.md`.
//!
//! `cargo run --release -p redlite-quant --example readbw [MIB] [THREADS] [REPS]`
//! (defaults 2048, 2, 5).

use std::time::Instant;

/// This thread's CPU time in ns (`/proc/thread-self/schedstat`).
fn cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}

fn main() {
    let arg = |i: usize, d: usize| {
        std::env::args()
            .nth(i)
            .and_then(|s| s.parse().ok())
            .unwrap_or(d)
    };
    let (mib, threads, reps) = (arg(1, 2048), arg(2, 2).max(1), arg(3, 5).max(1));
    let n = (mib << 20) / 8;
    // Written first, so every page is backed before the timed passes.
    let buf: Vec<u64> = (0..n as u64).map(|i| i.wrapping_mul(0x9e37_79b9)).collect();
    let chunk = n.div_ceil(threads);
    let mut best = f64::MAX;
    let mut best_cpu = f64::MAX;
    let mut sink = 0u64;
    for _ in 0..reps {
        let t = Instant::now();
        let (total, cpu): (u64, u64) = std::thread::scope(|s| {
            let hs: Vec<_> = buf
                .chunks(chunk)
                .map(|part| {
                    s.spawn(move || {
                        let c0 = cpu_ns();
                        let mut acc = [0u64; 16];
                        for c in part.chunks_exact(16) {
                            for (a, v) in acc.iter_mut().zip(c) {
                                *a = a.wrapping_add(*v);
                            }
                        }
                        let v = acc.iter().fold(0u64, |a, b| a.wrapping_add(*b));
                        (v, cpu_ns() - c0)
                    })
                })
                .collect();
            hs.into_iter()
                .map(|h| h.join().unwrap_or((0, 0)))
                .fold((0u64, 0u64), |a, b| (a.0.wrapping_add(b.0), a.1.max(b.1)))
        });
        best = best.min(t.elapsed().as_secs_f64());
        // The slowest thread's CPU time: the pass's time had the machine
        // been this process's alone.
        best_cpu = best_cpu.min(cpu as f64 * 1e-9);
        sink = sink.wrapping_add(total);
    }
    println!(
        "{} MiB, {} threads: {:.2} GB/s wall, {:.2} GB/s of CPU time (best of {}; checksum {:x})",
        mib,
        threads,
        (n * 8) as f64 / best / 1e9,
        (n * 8) as f64 / best_cpu / 1e9,
        reps,
        sink & 0xffff
    );
}
