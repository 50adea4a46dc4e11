//! Single-thread throughput of the integer matrix-matrix product (prefill).
//!
//! `cargo run --release -p redlite-quant --example q16_gemm_bench [-- WIDTH ROWS TOKENS CHUNK [TYPE...]]`
//!
//! For each type with integer kernels: ROWS (default 512) random rows of
//! WIDTH (default 2048) values with sane scales, times TOKENS (default 64)
//! activation vectors, processed CHUNK (default 32) rows at a time as the
//! backend does (unpack a tile, multiply it with every token). Prints the
//! best GMAC/s (`ROWS · TOKENS · WIDTH` multiply-adds per pass) of:
//!
//! * `f32`: the backend's current batched path: dequantize 16 rows to f32,
//!   then an AVX2 FMA dot of 4 rows with each token;
//! * `dot`: the q16 per-row dot (`Q16Kernels::dot`) for every (row, token);
//! * `scalar`: [`gemm_tile_scalar`];
//! * one column per driver level of this CPU: [`gemm_tile_at`] including
//!   the tile unpacking, and in parentheses the product alone (tile already
//!   unpacked).
//!
//! The activations are quantized once per pass outside the timing (the
//! backend does it once per batch).

use std::hint::black_box;
use std::time::Instant;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redlite_quant::q16::gemm::{gemm_tile_at, gemm_tile_scalar, level_supported, Tile};
use redlite_quant::q16::{kernels_at, Q16Act, Q16Level, QK};
use redlite_quant::GgmlType;

const SAMPLES: usize = 25;

fn random_weights(ty: GgmlType, n_blocks: usize, r: &mut StdRng) -> Vec<u8> {
    let ts = ty.type_size();
    let mut data = vec![0u8; n_blocks * ts];
    r.fill(&mut data[..]);
    // A moderate finite f16: exponent 5..16.
    let sane = |r: &mut StdRng| -> [u8; 2] {
        let h = (r.gen_range(5u16..17) << 10) | r.gen_range(0u16..1024) | (r.gen::<u16>() & 0x8000);
        h.to_le_bytes()
    };
    use GgmlType::*;
    let fields: &[usize] = match ty {
        Q8_0 | IQ2_XS => &[0],
        Q4_K | Q5_K => &[0, 2],
        Q6_K => &[208],
        _ => &[],
    };
    for blk in data.chunks_exact_mut(ts) {
        for &o in fields {
            blk[o..o + 2].copy_from_slice(&sane(r));
        }
        if ty == IQ1_M {
            blk[55] &= 0xBF;
        }
    }
    data
}

/// Best seconds of `f` over `SAMPLES` samples, each running it until 3 ms
/// have passed (the minimum is the least disturbed by other processes).
fn time(mut f: impl FnMut()) -> f64 {
    f();
    let mut best = f64::INFINITY;
    for _ in 0..SAMPLES {
        let t = Instant::now();
        let mut n = 0;
        while t.elapsed().as_secs_f64() < 0.003 || n == 0 {
            f();
            n += 1;
        }
        best = best.min(t.elapsed().as_secs_f64() / n as f64);
    }
    best
}

/// The backend's batched f32 path on one chunk of rows.
fn f32_chunk(
    ty: GgmlType,
    w: &[u8],
    rows: usize,
    x: &[f32],
    n_tok: usize,
    wf: &mut Vec<f32>,
    out: &mut [f32],
) {
    let n_in = x.len() / n_tok;
    wf.resize(rows * n_in, 0.0);
    redlite_quant::dequantize(ty, w, wf).expect("dequantize");
    for r in (0..rows).step_by(4) {
        for t in 0..n_tok {
            let d = dot4(&wf[r * n_in..(r + 4) * n_in], &x[t * n_in..(t + 1) * n_in]);
            out[r * n_tok + t..][..4].copy_from_slice(&d);
        }
    }
}

fn dot4(w: &[f32], x: &[f32]) -> [f32; 4] {
    assert!(w.len() >= 4 * x.len() && x.len().is_multiple_of(8));
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        // SAFETY: AVX2 and FMA detected; sizes checked above.
        return unsafe { dot4_avx2(w, x) };
    }
    let n = x.len();
    std::array::from_fn(|r| {
        w[r * n..(r + 1) * n]
            .iter()
            .zip(x)
            .map(|(a, b)| a * b)
            .sum()
    })
}

/// # Safety
/// AVX2 and FMA; `w.len() >= 4 · x.len()`, `x.len()` a multiple of 8.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot4_avx2(w: &[f32], x: &[f32]) -> [f32; 4] {
    use std::arch::x86_64::*;
    let n = x.len();
    let (pw, px) = (w.as_ptr(), x.as_ptr());
    let mut a = [_mm256_setzero_ps(); 4];
    for i in (0..n).step_by(8) {
        let xv = _mm256_loadu_ps(px.add(i));
        for (r, ar) in a.iter_mut().enumerate() {
            *ar = _mm256_fmadd_ps(_mm256_loadu_ps(pw.add(r * n + i)), xv, *ar);
        }
    }
    let mut out = [0f32; 4];
    for (o, v) in out.iter_mut().zip(a) {
        let mut l = [0f32; 8];
        _mm256_storeu_ps(l.as_mut_ptr(), v);
        *o = l.iter().sum();
    }
    out
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize, d: usize| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(d);
    let (width, rows, n_tok, chunk) = (num(0, 2048), num(1, 512), num(2, 64), num(3, 32));
    assert!(width.is_multiple_of(QK) && rows.is_multiple_of(chunk) && chunk.is_multiple_of(4));
    let wanted: Vec<GgmlType> = args.iter().filter_map(|a| GgmlType::from_name(a)).collect();
    let levels: Vec<Q16Level> = [Q16Level::Avx2, Q16Level::Avx512, Q16Level::Avx512Vnni]
        .into_iter()
        .filter(|&l| level_supported(l))
        .collect();
    let macs = (rows * n_tok * width) as f64;
    println!(
        "single thread, {rows} rows of {width} × {n_tok} tokens, tiles of {chunk} rows; \
         GMAC/s, best of {SAMPLES}\n"
    );
    let mut head = "| type | f32 | dot | scalar |".to_string();
    for l in &levels {
        head += &format!(" {l:?} (product only) |");
    }
    println!("{head}");
    println!("|---|---|---|---|{}", "---|".repeat(levels.len()));
    let mut r = StdRng::seed_from_u64(1);
    let xf: Vec<f32> = (0..n_tok * width)
        .map(|_| r.gen_range(-1.0f32..1.0))
        .collect();
    let mut x = Q16Act::default();
    assert!(x.quantize(&xf));
    for ty in [
        GgmlType::Q8_0,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
        GgmlType::IQ2_XS,
        GgmlType::IQ1_M,
    ] {
        if !wanted.is_empty() && !wanted.contains(&ty) {
            continue;
        }
        let ks = kernels_at(ty, Q16Level::Scalar).expect("kernels");
        let row_bytes = width / QK * ks.bytes;
        let w = random_weights(ty, rows * width / ty.block_size(), &mut r);
        assert_eq!(w.len(), rows * row_bytes);
        let mut out = vec![0f32; rows * n_tok];
        let gmac = |s: f64| macs / s / 1e9;

        let mut wf = Vec::new();
        let f32_s = time(|| {
            for (c, o) in w
                .chunks_exact(16 * row_bytes)
                .zip(out.chunks_exact_mut(16 * n_tok))
            {
                f32_chunk(ty, c, 16, &xf, n_tok, &mut wf, o);
            }
            black_box(&out);
        });

        let kd = kernels_at(ty, *levels.last().unwrap_or(&Q16Level::Scalar)).expect("kernels");
        let dot_s = time(|| {
            for (row, o) in w.chunks_exact(row_bytes).zip(out.chunks_exact_mut(n_tok)) {
                for (t, v) in o.iter_mut().enumerate() {
                    *v = (kd.dot)(row, x.row(t, width));
                }
            }
            black_box(&out);
        });

        let mut tile = Tile::new();
        let scalar_s = time(|| {
            for (c, o) in w
                .chunks_exact(chunk * row_bytes)
                .zip(out.chunks_exact_mut(chunk * n_tok))
            {
                tile.unpack(&ks, c, row_bytes, chunk);
                gemm_tile_scalar(&ks, &tile, &x, n_tok, width, o, n_tok);
            }
            black_box(&out);
        });
        let want = out.clone();

        let mut line = format!(
            "| {} | {:.1} | {:.1} | {:.1} |",
            ty.name(),
            gmac(f32_s),
            gmac(dot_s),
            gmac(scalar_s)
        );
        for &l in &levels {
            let k = kernels_at(ty, l).expect("kernels");
            let full = time(|| {
                for (c, o) in w
                    .chunks_exact(chunk * row_bytes)
                    .zip(out.chunks_exact_mut(chunk * n_tok))
                {
                    tile.unpack(&k, c, row_bytes, chunk);
                    gemm_tile_at(l, &k, &tile, &x, n_tok, width, o, n_tok);
                }
                black_box(&out);
            });
            // A sanity check against the scalar twin (the tests are exact about it).
            let top = want.iter().fold(0f32, |m, v| m.max(v.abs()));
            let worst = out
                .iter()
                .zip(&want)
                .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
            assert!(
                worst <= 1e-4 * top,
                "{ty} {l:?}: off by {worst} (largest output {top})"
            );
            // The product alone: one tile, reused for every chunk of output.
            tile.unpack(&k, &w[..chunk * row_bytes], row_bytes, chunk);
            let prod = time(|| {
                for o in out.chunks_exact_mut(chunk * n_tok) {
                    gemm_tile_at(l, &k, &tile, &x, n_tok, width, o, n_tok);
                }
                black_box(&out);
            });
            line += &format!(" {:.1} ({:.1}) |", gmac(full), gmac(prod));
        }
        println!("{line}");
    }
}
