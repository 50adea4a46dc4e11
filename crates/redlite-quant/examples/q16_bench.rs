//! Single-thread throughput of the dot kernels, f32 activations against
//! 16-bit integer activations, in weight GB/s.
//!
//! `cargo run --release -p redlite-quant --example q16_bench [MIB]`: rows of
//! 2048 values, MIB mebibytes of weights per type (default 64: beyond the
//! caches; use 1 for the kernels' compute speed alone). The last column
//! is the multi-token dot (`dot_n`, 9 tokens, as a speculative verify pass
//! runs it) against nine single-token dots over the same rows. A second
//! argument (a type name, e.g. `IQ1_M`) measures that type alone.

use redlite_quant::q16::{self, Q16Act};
use redlite_quant::GgmlType;
use std::time::Instant;

fn main() {
    let mib: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(64);
    let only: Option<String> = std::env::args().nth(2);
    let n: usize = std::env::var("Q16_BENCH_N")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2048);
    println!("q16 level {:?}, {} MiB per type", q16::level(), mib);
    for ty in [
        GgmlType::Q8_0,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
        GgmlType::IQ2_XS,
        GgmlType::IQ1_M,
    ] {
        if only.as_deref().is_some_and(|o| o != ty.name()) {
            continue;
        }
        let rb = ty.row_bytes(n as u64).expect("row") as usize;
        let rows = (mib << 20) / rb;
        let mut s = 0x9e3779b97f4a7c15u64;
        let mut data: Vec<u8> = (0..rows * rb)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                s as u8
            })
            .collect();
        // Tame the f16 scales so the sums stay finite.
        let bs = ty.type_size();
        for blk in data.chunks_exact_mut(bs) {
            let off = match ty {
                GgmlType::Q6_K => Some(208),
                GgmlType::IQ1_M => None,
                _ => Some(0),
            };
            let h = half::f16::from_f32(0.01).to_bits();
            if let Some(o) = off {
                blk[o..o + 2].copy_from_slice(&h.to_le_bytes());
            }
            // The K-quants' second scale (the minima's) too.
            if matches!(ty, GgmlType::Q4_K | GgmlType::Q5_K) {
                blk[2..4].copy_from_slice(&h.to_le_bytes());
            }
            // IQ1_M spreads its f16 scale over the top nibbles of its four
            // scale words (bytes 48..56).
            if ty == GgmlType::IQ1_M {
                for (i, sh) in [0u16, 4, 8, 12].iter().enumerate() {
                    let w = u16::from_le_bytes([blk[48 + 2 * i], blk[49 + 2 * i]]);
                    let w = (w & 0x0fff) | (((h >> sh) & 0xf) << 12);
                    blk[48 + 2 * i..50 + 2 * i].copy_from_slice(&w.to_le_bytes());
                }
            }
        }
        let x: Vec<f32> = (0..n)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0)
            .collect();
        let f32dot = redlite_quant::dot_fn(ty).expect("dot");
        let k = q16::kernels(ty).expect("q16");
        let mut a = Q16Act::default();
        let reps = 3;
        let mut best = [f64::MAX; 2];
        let mut sink = 0f32;
        for _ in 0..reps {
            let t = Instant::now();
            for r in 0..rows {
                sink += f32dot(&data[r * rb..(r + 1) * rb], &x);
            }
            best[0] = best[0].min(t.elapsed().as_secs_f64());
            let t = Instant::now();
            a.quantize(&x);
            for r in 0..rows {
                sink += (k.dot)(&data[r * rb..(r + 1) * rb], a.view());
            }
            best[1] = best[1].min(t.elapsed().as_secs_f64());
        }
        // The unpacker alone.
        let mut u = q16::Unpacked::default();
        let t = Instant::now();
        for blk in data.chunks_exact(k.bytes) {
            (k.unpack)(blk, &mut u);
            sink += u.w[7] as f32;
        }
        let t_unpack = t.elapsed().as_secs_f64();
        // Nine tokens: one dot_n per row against nine dots.
        let nt = 9;
        let xs9: Vec<f32> = (0..nt * n)
            .map(|i| ((i * 53 % 97) as f32 - 48.0) / 48.0)
            .collect();
        let mut a9 = Q16Act::default();
        a9.quantize(&xs9);
        let views: Vec<_> = (0..nt).map(|t| a9.row(t, n)).collect();
        let mut out = vec![0f32; nt];
        let mut best9 = [f64::MAX; 2];
        for _ in 0..reps {
            let t = Instant::now();
            for r in 0..rows {
                for v in &views {
                    sink += (k.dot)(&data[r * rb..(r + 1) * rb], *v);
                }
            }
            best9[0] = best9[0].min(t.elapsed().as_secs_f64());
            let t = Instant::now();
            for r in 0..rows {
                (k.dot_n)(&data[r * rb..(r + 1) * rb], &views, &mut out);
                sink += out[nt - 1];
            }
            best9[1] = best9[1].min(t.elapsed().as_secs_f64());
        }
        let gb = (rows * rb) as f64 / 1e9;
        print!("9 tokens: dot_n {:5.2}x nine dots | ", best9[0] / best9[1]);
        print!("unpack alone {:6.2} GB/s | ", gb / t_unpack);
        println!(
            "{:>7}: f32 {:6.2} GB/s   q16 {:6.2} GB/s   ({:.2}x)  [{}]",
            ty.name(),
            gb / best[0],
            gb / best[1],
            best[0] / best[1],
            sink.is_finite()
        );
    }
}
