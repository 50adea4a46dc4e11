//! What one parallel region costs on the pool beyond its work: a decode
//! step opens hundreds of them, each after a stretch of work on one thread.
//!
//! `cargo run --release -p redlite-backend --example region_bench -- [THREADS]`
//!
//! For each serial gap before a region (the calling thread busy, the
//! others idle) and each task count, times 2,000 regions of tasks that each
//! spin for a fixed 5 µs, and prints the mean time of a region less its
//! ideal `ceil(tasks / threads) · 5 µs`: the cost of waking the workers,
//! handing out the tasks and joining them.

use rayon::prelude::*;
use std::time::{Duration, Instant};

/// Busy for `d` on this thread.
fn spin(d: Duration) {
    let t = Instant::now();
    while t.elapsed() < d {
        std::hint::spin_loop();
    }
}

fn main() {
    let threads: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()));
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("thread pool");
    let work = Duration::from_micros(5);
    let reps = 2000;
    println!("{threads} threads, tasks of 5 us, {reps} regions each");
    println!("| gap before (us) | tasks | region (us) | overhead (us) |\n|---|---|---|---|");
    pool.install(|| {
        for gap in [0u64, 20, 100, 1000] {
            for tasks in [threads, 5 * threads] {
                let mut in_regions = Duration::ZERO;
                for _ in 0..reps {
                    spin(Duration::from_micros(gap));
                    let t = Instant::now();
                    (0..tasks).into_par_iter().for_each(|_| spin(work));
                    in_regions += t.elapsed();
                }
                let per = in_regions.as_secs_f64() * 1e6 / reps as f64;
                let ideal = tasks.div_ceil(threads) as f64 * 5.0;
                println!("| {gap} | {tasks} | {per:.1} | {:.1} |", per - ideal);
            }
        }
    });
}
