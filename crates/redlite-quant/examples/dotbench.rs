//! Single-thread dot-product throughput per tensor type and instruction level.
//!
//! `cargo run --release -p redlite-quant --example dotbench [-- MIB [TYPE...]]`
//!
//! For each type: a weight matrix of MIB MiB (default 64, larger than the
//! last-level cache) of random blocks with sane scales, rows of 4096 values,
//! dotted row by row with one f32 vector; prints the median over several
//! passes of GB/s of weight bytes read, as a Markdown table.

use std::hint::black_box;
use std::time::Instant;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redlite_quant::{detected_isa, kernels, DotFn, GgmlType, Isa};

const WIDTH: usize = 4096;
const REPEATS: usize = 5;

fn random_weights(ty: GgmlType, n_blocks: usize, r: &mut StdRng) -> Vec<u8> {
    let ts = ty.type_size();
    let mut data = vec![0u8; n_blocks * ts];
    r.fill(&mut data[..]);
    // A moderate finite f16 with this bit pattern: exponent 5..16.
    let sane = |r: &mut StdRng| -> [u8; 2] {
        let h = (r.gen_range(5u16..17) << 10) | r.gen_range(0u16..1024) | (r.gen::<u16>() & 0x8000);
        h.to_le_bytes()
    };
    use GgmlType::*;
    let fields: &[usize] = match ty {
        F16 | Q4_0 | Q5_0 | Q8_0 | IQ4_NL | IQ4_XS | IQ2_XXS | IQ2_XS | IQ2_S | IQ3_XXS | IQ3_S
        | IQ1_S | Q1_0 | Q2_0 => &[0],
        Q4_1 | Q5_1 | Q4_K | Q5_K => &[0, 2],
        Q2_K => &[80, 82],
        Q3_K => &[108],
        Q6_K => &[208],
        TQ1_0 => &[52],
        TQ2_0 => &[64],
        _ => &[],
    };
    for blk in data.chunks_exact_mut(ts) {
        for &o in fields {
            blk[o..o + 2].copy_from_slice(&sane(r));
        }
        match ty {
            F32 => blk.copy_from_slice(&r.gen_range(-1.0f32..1.0).to_le_bytes()),
            BF16 => {
                blk.copy_from_slice(&(r.gen_range(-1.0f32..1.0).to_bits() >> 16).to_le_bytes()[..2])
            }
            MXFP4 => blk[0] = r.gen_range(118..=136),
            Q8_K => blk[0..4].copy_from_slice(&r.gen_range(-1.0f32..1.0).to_le_bytes()),
            IQ1_M => blk[55] &= 0xBF,
            _ => {}
        }
    }
    data
}

/// Median GB/s of `f` over the whole matrix.
fn bench(f: DotFn, w: &[u8], row_bytes: usize, x: &[f32]) -> f64 {
    let mut times = Vec::new();
    for _ in 0..REPEATS {
        let t = Instant::now();
        let mut s = 0f32;
        for row in w.chunks_exact(row_bytes) {
            s += f(black_box(row), black_box(x));
        }
        black_box(s);
        times.push(t.elapsed().as_secs_f64());
    }
    times.sort_by(|a, b| a.total_cmp(b));
    w.len() as f64 / times[REPEATS / 2] / 1e9
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mib: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(64);
    let wanted: Vec<GgmlType> = args
        .iter()
        .skip(1)
        .filter_map(|a| GgmlType::from_name(a))
        .collect();
    let isa = detected_isa();
    let mut r = StdRng::seed_from_u64(1);
    let x: Vec<f32> = (0..WIDTH).map(|_| r.gen_range(-1.0f32..1.0)).collect();
    println!("single thread, {mib} MiB of weights per type, rows of {WIDTH}, median of {REPEATS}; detected {}\n", isa.name());
    println!("| type | bits/weight | scalar GB/s | avx2 GB/s | avx512 GB/s |");
    println!("|---|---|---|---|---|");
    for ty in GgmlType::ALL {
        let Some(k) = kernels(ty) else { continue };
        if !wanted.is_empty() && !wanted.contains(&ty) {
            continue;
        }
        let row_bytes = WIDTH / ty.block_size() * ty.type_size();
        let rows = (mib << 20) / row_bytes;
        let w = random_weights(ty, rows * WIDTH / ty.block_size(), &mut r);
        let cell = |f: Option<DotFn>, ok: bool| match (f, ok) {
            (Some(f), true) => format!("{:.2}", bench(f, &w, row_bytes, &x)),
            (Some(_), false) => "n/a (cpu)".to_string(),
            (None, _) => "-".to_string(),
        };
        let s = cell(Some(k.dot_scalar), true);
        let a2 = cell(k.dot_avx2, isa >= Isa::Avx2);
        let a5 = cell(k.dot_avx512, isa >= Isa::Avx512);
        println!(
            "| {} | {:.4} | {s} | {a2} | {a5} |",
            ty.name(),
            ty.bits_per_weight()
        );
    }
}
