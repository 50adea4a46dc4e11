//! Decode attention alone: GB/s of KV read, Qwen3-Coder-Next's shape (16
//! query heads, 2 KV heads of 256, 12 attention layers each with its own
//! cache, so nothing stays in the last-level cache between layers).
//!
//!   cargo run --release -p redlite-backend --example attn_decode_bench -- POSITIONS TYPE [THREADS] [STEPS]
//!
//! Prints the median time of one token's 12 layers and the KV bytes read
//! per second (keys and values of every position, in the stored type). The
//! blocks are allocated as the engine allocates them (`KvData::block`: in
//! huge-page slabs).

use redlite_backend::cpu::CpuBackend;
use redlite_backend::{AttnShape, Backend, KvBlocks, KvData, KvRows, KvType};

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: attn_decode_bench POSITIONS TYPE [THREADS] [STEPS]";
    let n: usize = args
        .get(1)
        .ok_or(usage)?
        .parse()
        .map_err(|e| format!("{e}"))?;
    let ty: KvType = args.get(2).ok_or(usage)?.parse()?;
    let threads: Option<usize> = args
        .get(3)
        .map(|s| s.parse())
        .transpose()
        .map_err(|e| format!("{e}"))?;
    let steps: usize = args
        .get(4)
        .map_or(Ok(9), |s| s.parse())
        .map_err(|e| format!("{e}"))?;
    let (nh, nkv, hd, layers, bt) = (16, 2, 256, 12, 256);
    let row = nkv * hd;
    let mut seed = 0x1234_5678_9abc_def0u64;
    let mut rnd = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5
    };
    let mut caches: Vec<(Vec<KvData>, Vec<KvData>)> = Vec::new();
    let mut buf = vec![0f32; bt * row];
    for _ in 0..layers {
        let (mut ks, mut vs) = (Vec::new(), Vec::new());
        for b in 0..n.div_ceil(bt) {
            let m = (n - b * bt).min(bt) * row;
            for part in [&mut ks, &mut vs] {
                buf[..m].iter_mut().for_each(|x| *x = rnd());
                let mut d = KvData::block(ty, bt * row);
                d.push(&buf[..m]);
                part.push(d);
            }
        }
        caches.push((ks, vs));
    }
    let be = CpuBackend::new(threads).map_err(|e| format!("{e}"))?;
    let q: Vec<f32> = (0..nh * hd).map(|_| rnd()).collect();
    let mut out = vec![0f32; nh * hd];
    let s = AttnShape {
        n_tok: 1,
        pos0: n - 1,
        n_head: nh,
        n_head_kv: nkv,
        head_dim: hd,
        scale: 1.0 / 16.0,
    };
    let mut times = Vec::new();
    let cpu0 = cpu_seconds();
    for _ in 0..steps {
        let t0 = std::time::Instant::now();
        for (ks, vs) in &caches {
            let kr: Vec<KvRows> = ks.iter().map(|d| d.rows()).collect();
            let vr: Vec<KvRows> = vs.iter().map(|d| d.rows()).collect();
            let kv = KvBlocks {
                k: &kr,
                v: &vr,
                block_tokens: bt,
            };
            be.attention(&s, &q, &kv, &mut out);
        }
        times.push(t0.elapsed().as_secs_f64());
    }
    let cpu = (cpu_seconds() - cpu0) / steps as f64;
    times.sort_by(f64::total_cmp);
    let med = times[times.len() / 2];
    let bytes = (layers * 2 * ty.bytes(n * row)) as f64;
    println!(
        "{n} positions, KV {ty}, {} threads: {:.2} ms a token (12 layers; {:.0} ms of CPU), {:.0} MiB \
         of KV, {:.2} GB/s",
        be.threads(),
        med * 1e3,
        cpu * 1e3,
        bytes / 1048576.0,
        bytes / med / 1e9
    );
    Ok(())
}

/// CPU time of the whole process so far (user + system, all threads), from
/// `/proc/self/stat` in clock ticks of 10 ms; 0 where it cannot be read.
fn cpu_seconds() -> f64 {
    let Ok(s) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    // Fields after the command name (which ends with the last ')').
    let rest = s.rsplit_once(')').map_or("", |x| x.1);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let tick = |i: usize| f.get(i).and_then(|x| x.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 of the line: 12 and 13 here.
    (tick(11) + tick(12)) / 100.0
}
