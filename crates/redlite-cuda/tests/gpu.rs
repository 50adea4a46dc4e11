//! The CUDA forward pass against the references, on a GPU.
//!
//! Every test here needs a CUDA device; without one each says so and passes,
//! unless `REDLITE_REQUIRE_CUDA` is set (the GPU check script sets it, so a
//! machine whose GPU cannot be used fails loudly instead of skipping).
//!
//! - the matrix-vector kernel of every quant type, and the tensor-core
//!   prefill kernels of the types that have them, against the CPU's
//!   dequantized f64 products, on random blocks;
//! - tiny-a and tiny-s bf16 against transformers (max |Δlogit| ≤ 5e-3, KL ≤
//!   1e-6), whole-prompt prefill and token by token;
//! - the 16-bit-activation one-token and verify kernels against f64 products
//!   of the dequantized rows with the CPU's quantized activations, and the
//!   verify twin equal to the one-token kernel bit for bit;
//! - every quantized tiny-s fixture against `exact-<TYPE>.npz`: prefill (f32
//!   activations) and decode on the f32 reference path within the f32
//!   limits (p99 |Δ| ≤ 5e-3, mean KL ≤ 1e-6); decode on the default 16-bit
//!   activations at most a tenth of llama.cpp's mean KL and within its p99;
//! - prefill against decode within 1e-2 on the f32 path (on the default
//!   path: mean KL ≤ 1e-5, p99 of per-position max |Δ| ≤ 2e-2);
//! - the 32,768-token prompt against transformers;
//! - state forks, and speculative verify + rollback, against plain decoding;
//! - batched decode (sequences at different positions in one pass, and more
//!   than one pass holds) against each sequence decoded alone: the same
//!   greedy tokens and the same logits bit for bit.

mod common;
#[path = "../../redlite-model/tests/common/mod.rs"]
mod model_common;

use model_common::*;
use redlite_gguf::GgmlType;
use redlite_model::Model;
use redlite_testkit::{fixture, read_npz};

fn gpu_ready() -> bool {
    if redlite_cuda::available() {
        return true;
    }
    assert!(
        std::env::var_os("REDLITE_REQUIRE_CUDA").is_none(),
        "REDLITE_REQUIRE_CUDA is set but no CUDA device can be used"
    );
    eprintln!("no CUDA device: skipping");
    false
}

/// Where the tests find NVRTC and keep the compiled kernels: the kernel
/// cache of `REDLITE_CUDA_CACHE` (the GPU check script sets one, so that the
/// many loads here compile the kernels once) and NVRTC in `REDLITE_NVRTC_DIR`.
fn gpu_opts() -> redlite_cuda::gpu::GpuOptions {
    redlite_cuda::gpu::GpuOptions {
        kernel_cache: std::env::var_os("REDLITE_CUDA_CACHE").map(Into::into),
        nvrtc_dirs: std::env::var_os("REDLITE_NVRTC_DIR")
            .map(Into::into)
            .into_iter()
            .collect(),
        profile: false,
    }
}

/// [`gpu_opts`] and every other option at its default.
fn cuda_opts() -> redlite_cuda::CudaOptions {
    redlite_cuda::CudaOptions {
        gpu: gpu_opts(),
        ..Default::default()
    }
}

fn open_gpu() -> redlite_cuda::gpu::Gpu {
    redlite_cuda::gpu::Gpu::open(
        0,
        &redlite_cuda::kernel_source(),
        &redlite_cuda::kernel_names(),
        &gpu_opts(),
    )
    .expect("gpu")
}

fn load_gpu(name: &str) -> Model {
    load_gpu_with(name, cuda_opts())
}

fn load_gpu_with(name: &str, opts: redlite_cuda::CudaOptions) -> Model {
    let mut m = load(name);
    redlite_cuda::attach_with(&mut m, 0, opts, &mut |_, _| {})
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    m
}

/// A fixture on the GPU with f32 activations in every product (the
/// reference path) instead of the default 16-bit one-token products.
fn load_gpu_f32(name: &str) -> Model {
    load_gpu_with(
        name,
        redlite_cuda::CudaOptions {
            f32_activations: true,
            ..cuda_opts()
        },
    )
}

/// `mv_<T>`, `mm_<T>`, `mvn_<T>`, `mv1_<T>`, `mvgu_<T>` and the grouped
/// kernels of every type against f64 products of the CPU's dequantized rows,
/// with 1 and 5 tokens and 2 expert slots chosen by id.
#[test]
fn matvec_every_type_matches_the_cpu() {
    use redlite_cuda::gpu::Arg;
    if !gpu_ready() {
        return;
    }
    let gpu = open_gpu();
    let (n_in, n_out) = (512usize, 96usize);
    let mut checked = 0;
    for ty in GgmlType::ALL {
        let Some(sfx) = redlite_cuda::dequant_src::type_suffix(ty) else {
            continue;
        };
        let row_bytes = ty.row_bytes(n_in as u64).expect("row") as usize;
        let (qk, _) = redlite_cuda::dequant_src::dq_block_shape(ty).expect("shape");
        let blocks_per_row = n_in / qk;
        // Two experts of n_out rows each; plain floats get finite values.
        let w: Vec<u8> = match ty {
            GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => {
                let vals: Vec<f32> = (0..2 * n_out * n_in)
                    .map(|i| (((i * 7919) % 1000) as f32 / 500.0 - 1.0) * 0.7)
                    .collect();
                match ty {
                    GgmlType::F32 => vals.iter().flat_map(|v| v.to_le_bytes()).collect(),
                    GgmlType::F16 => vals
                        .iter()
                        .flat_map(|v| half::f16::from_f32(*v).to_le_bytes())
                        .collect(),
                    _ => vals
                        .iter()
                        .flat_map(|v| half::bf16::from_f32(*v).to_le_bytes())
                        .collect(),
                }
            }
            _ => common::random_blocks(ty, 2 * n_out * blocks_per_row, ty as u64 + 11),
        };
        assert_eq!(w.len(), 2 * n_out * row_bytes);
        let deq = dequant_rows(ty, &w, row_bytes, n_in);
        let n_tok = 5;
        let x: Vec<f32> = (0..n_tok * n_in)
            .map(|i| (i * 104729 % 2001) as f32 / 1000.0 - 1.0)
            .collect();
        let wb = gpu.upload(&w).expect("upload");
        let xb = gpu.upload(&x).expect("upload");
        let yb = gpu.alloc(n_tok * 2 * n_out * 4).expect("alloc");
        let ids = gpu.upload(&[1i32, 0i32]).expect("upload");
        // The arguments mm_<T> takes, and the first nine of mv_<T>'s: 5 tokens
        // through expert 0's rows.
        let dense = [
            Arg::U(wb.ptr),
            Arg::U(row_bytes as u64),
            Arg::I(n_in as i32),
            Arg::I(n_out as i32),
            Arg::U(xb.ptr),
            Arg::I(n_in as i32),
            Arg::U(yb.ptr),
            Arg::I(n_out as i32),
            Arg::I(n_tok as i32),
        ];
        // No ids, no slot strides, no SwiGLU input.
        let plain = [
            Arg::U(0),
            Arg::U(0),
            Arg::I(1),
            Arg::U(0),
            Arg::U(0),
            Arg::U(0),
        ];
        let dot = |row: usize, t: usize| -> f64 {
            (0..n_in)
                .map(|i| deq[row * n_in + i] as f64 * x[t * n_in + i] as f64)
                .sum()
        };
        let scale = |t: usize| -> f64 { (0..n_out).map(|o| dot(o, t).abs()).fold(1e-30, f64::max) };
        let mut y = vec![0f32; n_tok * n_out];
        for (kname, rows, threads, args) in [
            (
                format!("mv_{sfx}"),
                4u32,
                128u32,
                [&dense[..], &plain[..]].concat(),
            ),
            (format!("mm_{sfx}"), 64, 256, dense.to_vec()),
            // The verify pass's several-token twin of mv1 (8 rows per block).
            (
                format!("mvn_{sfx}"),
                8,
                128,
                [&dense[..], &plain[..]].concat(),
            ),
        ] {
            gpu.memset0(yb.ptr, yb.bytes).expect("memset");
            gpu.launch(
                &kname,
                ((n_out as u32).div_ceil(rows), 1, 1),
                threads,
                0,
                &args,
            )
            .expect("launch");
            gpu.dtoh(&mut y, yb.ptr).expect("dtoh");
            for t in 0..n_tok {
                let s = scale(t);
                for o in 0..n_out {
                    let e = (y[t * n_out + o] as f64 - dot(o, t)).abs() / s;
                    assert!(
                        e < 1e-5,
                        "{kname} t{t} row {o}: {} vs {}",
                        y[t * n_out + o],
                        dot(o, t)
                    );
                }
            }
        }
        // Slots: slot z uses expert ids[z] on token z (x_div 1), output z.
        // Both one-token kernels: the general one and mv1 (2 rows per warp).
        for (kname, rows_per_block) in [(format!("mv_{sfx}"), 4u32), (format!("mv1_{sfx}"), 8)] {
            gpu.memset0(yb.ptr, yb.bytes).expect("memset");
            gpu.launch(
                &kname,
                ((n_out as u32).div_ceil(rows_per_block), 1, 2),
                128,
                0,
                &[
                    Arg::U(wb.ptr),
                    Arg::U(row_bytes as u64),
                    Arg::I(n_in as i32),
                    Arg::I(n_out as i32),
                    Arg::U(xb.ptr),
                    Arg::I(n_in as i32),
                    Arg::U(yb.ptr),
                    Arg::I(n_out as i32),
                    Arg::I(1),
                    Arg::U(ids.ptr),
                    Arg::U((n_out * row_bytes) as u64),
                    Arg::I(1),
                    Arg::U(n_in as u64),
                    Arg::U(n_out as u64),
                    Arg::U(0),
                ],
            )
            .expect("launch");
            let mut y2 = vec![0f32; 2 * n_out];
            gpu.dtoh(&mut y2, yb.ptr).expect("dtoh");
            for (z, e) in [(0usize, 1usize), (1, 0)] {
                for o in 0..n_out {
                    let want = dot(e * n_out + o, z);
                    let err = (y2[z * n_out + o] as f64 - want).abs() / scale(z).max(1e-30);
                    assert!(
                        err < 1e-4,
                        "{kname} slot {z} row {o}: {} vs {want}",
                        y2[z * n_out + o]
                    );
                }
            }
        }
        // Gate and up with the SwiGLU between (mvgu): expert 0's rows as the
        // gate, expert 1's as the up rows, token 0.
        gpu.memset0(yb.ptr, yb.bytes).expect("memset");
        gpu.launch(
            &format!("mvgu_{sfx}"),
            ((n_out as u32).div_ceil(4), 1, 1),
            128,
            0,
            &[
                Arg::U(wb.ptr),
                Arg::U((n_out * row_bytes) as u64),
                Arg::U(row_bytes as u64),
                Arg::I(n_in as i32),
                Arg::I(n_out as i32),
                Arg::U(xb.ptr),
                Arg::U(yb.ptr),
                Arg::U(0),
                Arg::U(0),
                Arg::I(1),
                Arg::U(n_in as u64),
                Arg::U(n_out as u64),
            ],
        )
        .expect("launch");
        let mut y3 = vec![0f32; n_out];
        gpu.dtoh(&mut y3, yb.ptr).expect("dtoh");
        let swiglu = |o: usize| -> f64 {
            let g = dot(o, 0);
            g / (1.0 + (-g).exp()) * dot(n_out + o, 0)
        };
        let s3 = (0..n_out).map(|o| swiglu(o).abs()).fold(1e-30, f64::max);
        for (o, &got) in y3.iter().enumerate() {
            let err = (got as f64 - swiglu(o)).abs() / s3;
            assert!(err < 1e-4, "mvgu_{sfx} row {o}: {got} vs {}", swiglu(o));
        }
        // Router + top-k (router_<T>), tokens 0 and 1, twice (the block
        // counter resets itself): logits as the CPU's products, the top 4 by
        // logit (ties: lower id) with softmax weights renormalised over them.
        let kk = 4usize;
        let logits = gpu.alloc(2 * n_out * 4).expect("alloc");
        let rid = gpu.alloc(2 * kk * 4).expect("alloc");
        let rwt = gpu.alloc(2 * kk * 4).expect("alloc");
        let done = gpu.zeros(2 * 4).expect("alloc");
        // F32 also through router_f32 (the whole matrix loaded at once).
        let variants: &[bool] = if sfx == "F32" {
            &[false, true]
        } else {
            &[false]
        };
        for (&direct, _) in variants.iter().flat_map(|v| [(v, 0), (v, 1)]) {
            // router_f32 takes router_<T>'s arguments, one row per warp.
            let (rname, rows) = if direct {
                ("router_f32".to_string(), 4)
            } else {
                (format!("router_{sfx}"), 8)
            };
            gpu.launch(
                &rname,
                ((n_out as u32).div_ceil(rows), 1, 2),
                128,
                0,
                &[
                    Arg::U(wb.ptr),
                    Arg::U(row_bytes as u64),
                    Arg::I(n_in as i32),
                    Arg::I(n_out as i32),
                    Arg::U(xb.ptr),
                    Arg::U(logits.ptr),
                    Arg::I(kk as i32),
                    Arg::U(rid.ptr),
                    Arg::U(rwt.ptr),
                    Arg::U(done.ptr),
                    // No expert prefetch marks (xpc, tag).
                    Arg::U(0),
                    Arg::I(0),
                ],
            )
            .expect("launch");
            let mut lg = vec![0f32; 2 * n_out];
            let mut ids_got = vec![0i32; 2 * kk];
            let mut wts_got = vec![0f32; 2 * kk];
            gpu.dtoh(&mut lg, logits.ptr).expect("dtoh");
            gpu.dtoh(&mut ids_got, rid.ptr).expect("dtoh");
            gpu.dtoh(&mut wts_got, rwt.ptr).expect("dtoh");
            for t in 0..2 {
                let row = &lg[t * n_out..(t + 1) * n_out];
                for (o, &v) in row.iter().enumerate() {
                    let e = (v as f64 - dot(o, t)).abs() / scale(t);
                    assert!(e < 1e-5, "{rname} t{t} row {o}: {v} vs {}", dot(o, t));
                }
                let mut order: Vec<usize> = (0..n_out).collect();
                order.sort_by(|&a, &b| row[b].total_cmp(&row[a]).then(a.cmp(&b)));
                let mx = row[order[0]] as f64;
                let z: f64 = row.iter().map(|&v| (v as f64 - mx).exp()).sum();
                let p: Vec<f64> = order[..kk]
                    .iter()
                    .map(|&e| (row[e] as f64 - mx).exp() / z)
                    .collect();
                let ps: f64 = p.iter().sum();
                for r in 0..kk {
                    assert_eq!(
                        ids_got[t * kk + r] as usize,
                        order[r],
                        "{rname} t{t} rank {r}"
                    );
                    let w = wts_got[t * kk + r] as f64;
                    assert!(
                        (w - p[r] / ps).abs() < 1e-6,
                        "{rname} weight {w} vs {}",
                        p[r] / ps
                    );
                }
            }
        }
        // router_f32n: the residual add and post norm in each block, then the
        // router; tokens 0 and 1 of x as the residual, another input as the
        // product before it. The residual comes back as r + y (the same f32
        // sums), h as rmsnorm(r + y)·w (f64 reference), the logits as the
        // rows times h, the top k by those logits.
        if sfx == "F32" {
            let r: Vec<f32> = x[..2 * n_in].to_vec();
            let yv: Vec<f32> = (0..2 * n_in)
                .map(|i| (i * 7877 % 1999) as f32 / 1500.0 - 0.6)
                .collect();
            let nw: Vec<f32> = (0..n_in).map(|i| 0.5 + (i % 97) as f32 / 97.0).collect();
            let eps = 1e-6f32;
            let rb = gpu.upload(&r).expect("upload");
            let yb2 = gpu.upload(&yv).expect("upload");
            let nwb = gpu.upload(&nw).expect("upload");
            let hb = gpu.zeros(2 * n_in * 4).expect("alloc");
            gpu.launch(
                "router_f32n",
                ((n_out as u32).div_ceil(4), 1, 2),
                128,
                0,
                &[
                    Arg::U(wb.ptr),
                    Arg::U(row_bytes as u64),
                    Arg::I(n_in as i32),
                    Arg::I(n_out as i32),
                    Arg::U(rb.ptr),
                    Arg::U(yb2.ptr),
                    Arg::U(nwb.ptr),
                    Arg::U(hb.ptr),
                    Arg::F(eps),
                    Arg::U(logits.ptr),
                    Arg::I(kk as i32),
                    Arg::U(rid.ptr),
                    Arg::U(rwt.ptr),
                    Arg::U(done.ptr),
                    Arg::U(0),
                    Arg::I(0),
                ],
            )
            .expect("launch");
            let mut r_got = vec![0f32; 2 * n_in];
            let mut h_got = vec![0f32; 2 * n_in];
            let mut lg = vec![0f32; 2 * n_out];
            let mut ids_got = vec![0i32; 2 * kk];
            gpu.dtoh(&mut r_got, rb.ptr).expect("dtoh");
            gpu.dtoh(&mut h_got, hb.ptr).expect("dtoh");
            gpu.dtoh(&mut lg, logits.ptr).expect("dtoh");
            gpu.dtoh(&mut ids_got, rid.ptr).expect("dtoh");
            for t in 0..2 {
                let v: Vec<f32> = (0..n_in)
                    .map(|i| r[t * n_in + i] + yv[t * n_in + i])
                    .collect();
                assert_eq!(
                    &r_got[t * n_in..(t + 1) * n_in],
                    &v[..],
                    "router_f32n residual t{t}"
                );
                let ss: f64 = v.iter().map(|&a| a as f64 * a as f64).sum();
                let sc = 1.0 / (ss / n_in as f64 + eps as f64).sqrt();
                let h: Vec<f64> = (0..n_in).map(|i| v[i] as f64 * sc * nw[i] as f64).collect();
                let hmax = h.iter().fold(1e-30f64, |m, a| m.max(a.abs()));
                for i in 0..n_in {
                    let e = (h_got[t * n_in + i] as f64 - h[i]).abs() / hmax;
                    assert!(
                        e < 1e-6,
                        "router_f32n h t{t}[{i}]: {} vs {}",
                        h_got[t * n_in + i],
                        h[i]
                    );
                }
                let want: Vec<f64> = (0..n_out)
                    .map(|o| (0..n_in).map(|i| deq[o * n_in + i] as f64 * h[i]).sum())
                    .collect();
                let lmax = want.iter().fold(1e-30f64, |m, a| m.max(a.abs()));
                let row = &lg[t * n_out..(t + 1) * n_out];
                for o in 0..n_out {
                    let e = (row[o] as f64 - want[o]).abs() / lmax;
                    assert!(
                        e < 1e-5,
                        "router_f32n t{t} row {o}: {} vs {}",
                        row[o],
                        want[o]
                    );
                }
                let mut order: Vec<usize> = (0..n_out).collect();
                order.sort_by(|&a, &b| row[b].total_cmp(&row[a]).then(a.cmp(&b)));
                for rk in 0..kk {
                    assert_eq!(
                        ids_got[t * kk + rk] as usize,
                        order[rk],
                        "router_f32n t{t} rank {rk}"
                    );
                }
            }
        }
        // Grouped (prefill): 5 slots, slot q on token q with expert sel[q],
        // grouped by moe_group, then mvg_<T>.
        let sel = [1i32, 0, 1, 1, 0];
        let groups = group_slots(&gpu, &sel, 2);
        for (kname, rows, threads) in [
            (format!("mvg_{sfx}"), 4u32, 128u32),
            (format!("mmg_{sfx}"), 64, 256),
        ] {
            gpu.memset0(yb.ptr, yb.bytes).expect("memset");
            gpu.launch(
                &kname,
                ((n_out as u32).div_ceil(rows), 1, 2),
                threads,
                0,
                &grouped_args(wb.ptr, row_bytes, (n_in, n_out), xb.ptr, 1, yb.ptr, &groups),
            )
            .expect("launch");
            let mut y3 = vec![0f32; 5 * n_out];
            gpu.dtoh(&mut y3, yb.ptr).expect("dtoh");
            for (q, &e) in sel.iter().enumerate() {
                for o in 0..n_out {
                    let want = dot(e as usize * n_out + o, q);
                    let err = (y3[q * n_out + o] as f64 - want).abs() / scale(q).max(1e-30);
                    assert!(
                        err < 1e-4,
                        "{kname} slot {q} row {o}: {} vs {want}",
                        y3[q * n_out + o]
                    );
                }
            }
        }
        if redlite_cuda::dequant_src::tensor_core_prefill(ty) {
            tensor_core_products_match(&gpu, sfx, &w, &deq, row_bytes, n_in, n_out);
        }
        checked += 1;
    }
    eprintln!("matvec: {checked} types match the CPU");
    assert!(checked >= 22);
}

/// The 16-bit-activation kernels of every type that has them (`mq1_<T>`
/// with expert ids and with a SwiGLU input, `mqgu_<T>`, and `q16_quant` +
/// `mqn_<T>` over 5 and 16 tokens) against f64 products of the CPU's
/// dequantized rows with the activations quantized as the kernels do it
/// (`common::q16_quantize`); `mq1_<T>` must give the same bits on any grid and
/// `mqn_<T>` each token the very bits `mq1_<T>` gives it alone (a verify pass
/// equals decoding). Rows of 256, 512, 2,048 and 4,096 inputs (rows side by
/// side, one staged item of several rows, rows staged in pieces).
#[test]
fn q16_products_match_the_quantized_reference() {
    use redlite_cuda::gpu::Arg;
    if !gpu_ready() {
        return;
    }
    let gpu = open_gpu();
    let mut checked = 0;
    for &sfx in redlite_cuda::dequant_src::q16_suffixes() {
        let ty = GgmlType::ALL
            .into_iter()
            .find(|t| redlite_cuda::dequant_src::type_suffix(*t) == Some(sfx))
            .expect("type");
        let widths: Vec<usize> = [256usize, 512, 2048, 4096]
            .into_iter()
            .filter(|&n| n <= redlite_cuda::dequant_src::q16_max_inputs(ty))
            .collect();
        for n_in in widths {
            let n_out = 100usize;
            let row_bytes = ty.row_bytes(n_in as u64).expect("row") as usize;
            let (qk, _) = redlite_cuda::dequant_src::dq_block_shape(ty).expect("shape");
            let w =
                common::random_blocks(ty, 2 * n_out * (n_in / qk), ty as u64 * 31 + n_in as u64);
            let deq = dequant_rows(ty, &w, row_bytes, n_in);
            let n_tok = 16usize;
            // Inputs of varied magnitude per 256 values.
            let x: Vec<f32> = (0..n_tok * n_in)
                .map(|i| {
                    let mag = [1.0f32, 1e-3, 30.0, 0.02][(i / 256) % 4];
                    ((i * 104729 % 2001) as f32 / 1000.0 - 1.0) * mag
                })
                .collect();
            let x2: Vec<f32> = (0..n_tok * n_in)
                .map(|i| (i * 7727 % 1999) as f32 / 999.0 - 1.0)
                .collect();
            // The inputs as the kernels see them: quantized per token.
            let deq_x = |xs: &[f32]| -> Vec<f64> {
                let (d, q) = common::q16_quantize(xs);
                q.iter()
                    .enumerate()
                    .map(|(i, &q)| q as f64 * d[i / 32] as f64)
                    .collect::<Vec<f64>>()
            };
            let xq = deq_x(&x);
            let dot = |row: usize, xs: &[f64], t: usize| -> f64 {
                (0..n_in)
                    .map(|i| deq[row * n_in + i] as f64 * xs[t * n_in + i])
                    .sum()
            };
            let scale = |xs: &[f64], t: usize| -> f64 {
                (0..2 * n_out)
                    .map(|o| {
                        (0..n_in)
                            .map(|i| (deq[o * n_in + i] as f64 * xs[t * n_in + i]).abs())
                            .sum::<f64>()
                    })
                    .fold(1e-30, f64::max)
            };
            let wb = gpu.upload(&w).expect("upload");
            let xb = gpu.upload(&x).expect("upload");
            let x2b = gpu.upload(&x2).expect("upload");
            let yb = gpu.alloc(n_tok * 2 * n_out * 4).expect("alloc");
            let ids = gpu.upload(&[1i32, 0i32]).expect("upload");
            let label = format!("{sfx} n_in {n_in}");
            // mq1 over `slots` slots: slot z takes the input at x + z·n_in and
            // expert ids[z] (expert z without ids), on `blocks` blocks.
            let mq1 = |x: u64, x2p: u64, blocks: u32, slots: usize, idp: u64| -> Vec<f32> {
                gpu.memset0(yb.ptr, yb.bytes).expect("memset");
                gpu.launch(
                    &format!("mq1_{sfx}"),
                    (blocks, 1, slots as u32),
                    128,
                    0,
                    &[
                        Arg::U(wb.ptr),
                        Arg::U(row_bytes as u64),
                        Arg::I(n_in as i32),
                        Arg::I(n_out as i32),
                        Arg::U(x),
                        Arg::I(n_in as i32),
                        Arg::U(yb.ptr),
                        Arg::I(n_out as i32),
                        Arg::I(1),
                        Arg::U(idp),
                        Arg::U((n_out * row_bytes) as u64),
                        Arg::I(1),
                        Arg::U(n_in as u64),
                        Arg::U(n_out as u64),
                        Arg::U(x2p),
                    ],
                )
                .expect("launch");
                let mut y = vec![0f32; slots * n_out];
                gpu.dtoh(&mut y, yb.ptr).expect("dtoh");
                y
            };
            // Slot z on token z with expert ids[z]: one row per warp (25
            // blocks) or runs of 9 (3 blocks).
            let y1 = mq1(xb.ptr, 0, 25, 2, ids.ptr);
            let y1b = mq1(xb.ptr, 0, 3, 2, ids.ptr);
            for (i, (a, b)) in y1.iter().zip(&y1b).enumerate() {
                assert_eq!(
                    a.to_bits(),
                    b.to_bits(),
                    "mq1 {label}: output {i} differs between grids"
                );
            }
            for (z, e) in [(0usize, 1usize), (1, 0)] {
                let s = scale(&xq, z);
                for o in 0..n_out {
                    let want = dot(e * n_out + o, &xq, z);
                    let err = (y1[z * n_out + o] as f64 - want).abs() / s;
                    assert!(
                        err < 1e-6,
                        "mq1 {label} slot {z} row {o}: {} vs {want}",
                        y1[z * n_out + o]
                    );
                }
            }
            // With a SwiGLU input: silu(x) ⊙ x2, formed in f32 on the device.
            let sw: Vec<f32> = x
                .iter()
                .zip(&x2)
                .map(|(&a, &b)| a / (1.0 + (-a).exp()) * b)
                .collect();
            let swq = deq_x(&sw);
            let ys = mq1(xb.ptr, x2b.ptr, 7, 2, ids.ptr);
            for (z, e) in [(0usize, 1usize), (1, 0)] {
                let s = scale(&swq, z);
                for o in 0..n_out {
                    let want = dot(e * n_out + o, &swq, z);
                    let err = (ys[z * n_out + o] as f64 - want).abs() / s;
                    assert!(
                        err < 1e-4,
                        "mq1 {label} silu slot {z} row {o}: {} vs {want}",
                        ys[z * n_out + o]
                    );
                }
            }
            // mqgu: expert 0's rows as the gate, expert 1's as the up rows.
            gpu.memset0(yb.ptr, yb.bytes).expect("memset");
            gpu.launch(
                &format!("mqgu_{sfx}"),
                (5, 1, 1),
                128,
                0,
                &[
                    Arg::U(wb.ptr),
                    Arg::U((n_out * row_bytes) as u64),
                    Arg::U(row_bytes as u64),
                    Arg::I(n_in as i32),
                    Arg::I(n_out as i32),
                    Arg::U(xb.ptr),
                    Arg::U(yb.ptr),
                    Arg::U(0),
                    Arg::U(0),
                    Arg::I(1),
                    Arg::U(n_in as u64),
                    Arg::U(n_out as u64),
                ],
            )
            .expect("launch");
            let mut yg = vec![0f32; n_out];
            gpu.dtoh(&mut yg, yb.ptr).expect("dtoh");
            let s0 = scale(&xq, 0);
            for (o, &got) in yg.iter().enumerate() {
                let g = dot(o, &xq, 0);
                let want = g / (1.0 + (-g).exp()) * dot(n_out + o, &xq, 0);
                let tol = 1e-5 * s0 * (1.0 + g.abs() + dot(n_out + o, &xq, 0).abs());
                assert!(
                    (got as f64 - want).abs() <= tol,
                    "mqgu {label} row {o}: {got} vs {want}"
                );
            }
            // q16_quant + mqn over the first nt tokens (expert 0), each token
            // bit for bit as mq1 gives it alone.
            let units = gpu.alloc(n_tok * (n_in / 32) * 80).expect("alloc");
            let scales = gpu.alloc(n_tok * (n_in / 32) * 4).expect("alloc");
            for nt in [5usize, 16] {
                gpu.launch(
                    "q16_quant",
                    ((nt * (n_in / 256)).div_ceil(4) as u32, 1, 1),
                    128,
                    0,
                    &[
                        Arg::U(xb.ptr),
                        Arg::U(0),
                        Arg::I(n_in as i32),
                        Arg::I(nt as i32),
                        Arg::U(units.ptr),
                        Arg::U(scales.ptr),
                    ],
                )
                .expect("launch");
                gpu.memset0(yb.ptr, yb.bytes).expect("memset");
                gpu.launch(
                    &format!("mqn_{sfx}"),
                    // Tiles of 8 tokens (MQN_NT): 16 tokens take two.
                    (11, nt.div_ceil(8) as u32, 1),
                    128,
                    0,
                    &[
                        Arg::U(wb.ptr),
                        Arg::U(row_bytes as u64),
                        Arg::I(n_in as i32),
                        Arg::I(n_out as i32),
                        Arg::U(units.ptr),
                        Arg::U(scales.ptr),
                        Arg::U(yb.ptr),
                        Arg::I(n_out as i32),
                        Arg::I(nt as i32),
                        Arg::U(0),
                        Arg::U(0),
                    ],
                )
                .expect("launch");
                let mut yn = vec![0f32; nt * n_out];
                gpu.dtoh(&mut yn, yb.ptr).expect("dtoh");
                for t in 0..nt {
                    let s = scale(&xq, t);
                    for o in 0..n_out {
                        let want = dot(o, &xq, t);
                        let err = (yn[t * n_out + o] as f64 - want).abs() / s;
                        assert!(
                            err < 1e-6,
                            "mqn {label} ({nt} tokens) t{t} row {o}: {} vs {want}",
                            yn[t * n_out + o]
                        );
                    }
                }
                // Token t alone through mq1 (one slot, expert 0 by pointer).
                for t in [0usize, nt - 1] {
                    let y = mq1(xb.ptr + (t * n_in * 4) as u64, 0, 25, 1, 0);
                    for o in 0..n_out {
                        assert_eq!(
                            y[o].to_bits(),
                            yn[t * n_out + o].to_bits(),
                            "mqn {label} t{t} row {o}: {} alone, {} in the pass",
                            y[o],
                            yn[t * n_out + o]
                        );
                    }
                }
            }
            checked += 1;
        }
    }
    eprintln!("q16: {checked} type × width cases match the quantized reference");
    assert_eq!(checked, 22);
}

/// The CPU's dequantization of `w`, rows of `row_bytes` bytes and `n_in`
/// values each.
fn dequant_rows(ty: GgmlType, w: &[u8], row_bytes: usize, n_in: usize) -> Vec<f32> {
    let k = redlite_quant::kernels(ty).expect("cpu kernels");
    let rows = w.len() / row_bytes;
    let mut deq = vec![0f32; rows * n_in];
    for r in 0..rows {
        (k.dequant)(
            &w[r * row_bytes..(r + 1) * row_bytes],
            &mut deq[r * n_in..(r + 1) * n_in],
        );
    }
    deq
}

/// Slots grouped by expert on the device (`moe_group`): slot q goes to
/// expert `sel[q]` of `n_expert`; the counts, offsets and permutation.
fn group_slots(
    gpu: &redlite_cuda::gpu::Gpu,
    sel: &[i32],
    n_expert: usize,
) -> [redlite_cuda::gpu::DevBuf; 3] {
    use redlite_cuda::gpu::Arg;
    let selb = gpu.upload(sel).expect("upload");
    let counts = gpu.alloc(n_expert * 4).expect("alloc");
    let offsets = gpu.alloc(n_expert * 4).expect("alloc");
    let perm = gpu.alloc(sel.len() * 4).expect("alloc");
    gpu.launch(
        "moe_group",
        (1, 1, 1),
        1024,
        (2 * n_expert * 4) as u32,
        &[
            Arg::U(selb.ptr),
            Arg::I(sel.len() as i32),
            Arg::I(n_expert as i32),
            Arg::U(counts.ptr),
            Arg::U(offsets.ptr),
            Arg::U(perm.ptr),
        ],
    )
    .expect("group");
    [counts, offsets, perm]
}

/// The arguments of the grouped kernels (`mvg_T`, `mmg_T`, `mmgt_T`,
/// `mmgw_T`): experts of `n_out` rows one after another at `w`, slot q
/// reading x + (q / x_div)·n_in and writing y + q·n_out, `groups` from
/// [`group_slots`].
fn grouped_args(
    w: u64,
    row_bytes: usize,
    (n_in, n_out): (usize, usize),
    x: u64,
    x_div: i32,
    y: u64,
    groups: &[redlite_cuda::gpu::DevBuf; 3],
) -> Vec<redlite_cuda::gpu::Arg> {
    use redlite_cuda::gpu::Arg;
    vec![
        Arg::U(w),
        Arg::U(row_bytes as u64),
        Arg::I(n_in as i32),
        Arg::I(n_out as i32),
        Arg::U((n_out * row_bytes) as u64),
        Arg::U(x),
        Arg::I(x_div),
        Arg::U(n_in as u64),
        Arg::U(y),
        Arg::U(n_out as u64),
        Arg::U(groups[0].ptr),
        Arg::U(groups[1].ptr),
        Arg::U(groups[2].ptr),
    ]
}

/// The tensor-core prefill kernels of one type (`mmt_T`, dense, and
/// `mmgt_T` / `mmgw_T`, grouped by expert, 16 / 64 slots a tile) against f64 products of the CPU's
/// dequantized rows `deq` (two experts of `n_out` rows of the blocks `w`):
/// 70 tokens (two token tiles, the second partial; two row tiles, the second
/// partial) and 140 slots over two experts (more than one tile each).
/// The inputs go in as two bf16 halves (16 significant bits), so the error
/// bound is 2e-5 of the largest product instead of the f32 kernels' 1e-5.
fn tensor_core_products_match(
    gpu: &redlite_cuda::gpu::Gpu,
    sfx: &str,
    w: &[u8],
    deq: &[f32],
    row_bytes: usize,
    n_in: usize,
    n_out: usize,
) {
    use redlite_cuda::gpu::Arg;
    let n_tok = 70usize;
    // Inputs of mixed magnitudes (the halves must carry small values too).
    let x: Vec<f32> = (0..n_tok * n_in)
        .map(|i| {
            let u = (i * 104729 % 2001) as f32 / 1000.0 - 1.0;
            u * [1.0f32, 3e-3, 40.0][(i / 7) % 3]
        })
        .collect();
    let dot = |row: usize, t: usize| -> f64 {
        (0..n_in)
            .map(|i| deq[row * n_in + i] as f64 * x[t * n_in + i] as f64)
            .sum()
    };
    let wb = gpu.upload(w).expect("upload");
    let xb = gpu.upload(&x).expect("upload");
    let yb = gpu.alloc(n_tok * n_out * 4).expect("alloc");
    gpu.memset0(yb.ptr, yb.bytes).expect("memset");
    let ty = GgmlType::ALL
        .into_iter()
        .find(|&t| redlite_cuda::dequant_src::type_suffix(t) == Some(sfx))
        .expect("type");
    let smem = |name: &str, tokens: usize| -> u32 {
        let b = redlite_cuda::dequant_src::tc_smem_bytes(ty, tokens).expect("tc type");
        let f = gpu.func(name).expect("kernel");
        gpu.allow_dynamic_smem(f, b).expect("shared memory");
        b
    };
    let name = format!("mmt_{sfx}");
    gpu.launch(
        &name,
        ((n_out as u32).div_ceil(64), (n_tok as u32).div_ceil(64), 1),
        128,
        smem(&name, 64),
        &[
            Arg::U(wb.ptr),
            Arg::U(row_bytes as u64),
            Arg::I(n_in as i32),
            Arg::I(n_out as i32),
            Arg::U(xb.ptr),
            Arg::I(n_in as i32),
            Arg::U(yb.ptr),
            Arg::I(n_out as i32),
            Arg::I(n_tok as i32),
        ],
    )
    .expect("launch");
    let mut y = vec![0f32; n_tok * n_out];
    gpu.dtoh(&mut y, yb.ptr).expect("dtoh");
    let mut worst = 0f64;
    for t in 0..n_tok {
        let s = (0..n_out).map(|o| dot(o, t).abs()).fold(1e-30, f64::max);
        for o in 0..n_out {
            let e = (y[t * n_out + o] as f64 - dot(o, t)).abs() / s;
            worst = worst.max(e);
            assert!(
                e < 2e-5,
                "mmt_{sfx} t{t} row {o}: {} vs {}",
                y[t * n_out + o],
                dot(o, t)
            );
        }
    }
    // 140 slots: slot q on token q / 2 (x_div 2) with expert sel[q].
    let n_slot = 140usize;
    let sel: Vec<i32> = (0..n_slot).map(|q| ((q * 7 + q / 3) % 2) as i32).collect();
    let groups = group_slots(gpu, &sel, 2);
    let ys = gpu.alloc(n_slot * n_out * 4).expect("alloc");
    // 16 slots a tile (mmgt) and 64 (mmgw).
    for (kind, tile) in [("mmgt", 16), ("mmgw", 64)] {
        gpu.memset0(ys.ptr, ys.bytes).expect("memset");
        let name = format!("{kind}_{sfx}");
        gpu.launch(
            &name,
            ((n_out as u32).div_ceil(64), 1, 2),
            128,
            smem(&name, tile),
            &grouped_args(wb.ptr, row_bytes, (n_in, n_out), xb.ptr, 2, ys.ptr, &groups),
        )
        .expect("launch");
        let mut y2 = vec![0f32; n_slot * n_out];
        gpu.dtoh(&mut y2, ys.ptr).expect("dtoh");
        for (q, &e) in sel.iter().enumerate() {
            let t = q / 2;
            let e = e as usize;
            let s = (0..n_out)
                .map(|o| dot(e * n_out + o, t).abs())
                .fold(1e-30, f64::max);
            for o in 0..n_out {
                let want = dot(e * n_out + o, t);
                let err = (y2[q * n_out + o] as f64 - want).abs() / s;
                worst = worst.max(err);
                assert!(
                    err < 2e-5,
                    "{name} slot {q} row {o}: {} vs {want}",
                    y2[q * n_out + o]
                );
            }
        }
    }
    // The split-input kernels (mmx_T dense, mmgx_T grouped) on tc_split's
    // halves of x, where the device grants their shared memory.
    let (Some(bx), Some(bg)) = (
        redlite_cuda::dequant_src::tcx_smem_bytes(ty, false),
        redlite_cuda::dequant_src::tcx_smem_bytes(ty, true),
    ) else {
        panic!("mmx_{sfx}: no shared memory size");
    };
    let n_val = n_tok * n_in;
    let sp = gpu.alloc(n_val * 4 + n_val / 8 + 256).expect("alloc");
    let (hi, lo, sums) = (sp.ptr, sp.ptr + 2 * n_val as u64, sp.ptr + 4 * n_val as u64);
    gpu.launch(
        "tc_split",
        ((n_val as u32 / 8).div_ceil(256), 1, 1),
        256,
        0,
        &[
            Arg::U(xb.ptr),
            Arg::I(n_in as i32),
            Arg::I(n_in as i32),
            Arg::I(n_tok as i32),
            Arg::U(hi),
            Arg::U(lo),
            Arg::U(sums),
        ],
    )
    .expect("launch");
    let fx = gpu.func(&format!("mmx_{sfx}")).expect("kernel");
    if gpu.allow_dynamic_smem(fx, bx).is_ok() {
        gpu.memset0(yb.ptr, yb.bytes).expect("memset");
        gpu.launch(
            &format!("mmx_{sfx}"),
            (
                (n_out as u32).div_ceil(128),
                (n_tok as u32).div_ceil(128),
                1,
            ),
            256,
            bx,
            &[
                Arg::U(wb.ptr),
                Arg::U(row_bytes as u64),
                Arg::I(n_in as i32),
                Arg::I(n_out as i32),
                Arg::U(hi),
                Arg::U(lo),
                Arg::U(sums),
                Arg::U(yb.ptr),
                Arg::I(n_out as i32),
                Arg::I(n_tok as i32),
            ],
        )
        .expect("launch");
        gpu.dtoh(&mut y, yb.ptr).expect("dtoh");
        for t in 0..n_tok {
            let s = (0..n_out).map(|o| dot(o, t).abs()).fold(1e-30, f64::max);
            for o in 0..n_out {
                let e = (y[t * n_out + o] as f64 - dot(o, t)).abs() / s;
                worst = worst.max(e);
                assert!(
                    e < 2e-5,
                    "mmx_{sfx} t{t} row {o}: {} vs {}",
                    y[t * n_out + o],
                    dot(o, t)
                );
            }
        }
    }
    let fg = gpu.func(&format!("mmgx_{sfx}")).expect("kernel");
    if gpu.allow_dynamic_smem(fg, bg).is_ok() {
        use redlite_cuda::gpu::Arg as A;
        gpu.memset0(ys.ptr, ys.bytes).expect("memset");
        gpu.launch(
            &format!("mmgx_{sfx}"),
            ((n_out as u32).div_ceil(256), 1, 2),
            256,
            bg,
            &[
                A::U(wb.ptr),
                A::U(row_bytes as u64),
                A::I(n_in as i32),
                A::I(n_out as i32),
                A::U((n_out * row_bytes) as u64),
                A::U(hi),
                A::U(lo),
                A::U(sums),
                A::I(2),
                A::U(ys.ptr),
                A::U(n_out as u64),
                A::U(groups[0].ptr),
                A::U(groups[1].ptr),
                A::U(groups[2].ptr),
            ],
        )
        .expect("launch");
        let mut y2 = vec![0f32; n_slot * n_out];
        gpu.dtoh(&mut y2, ys.ptr).expect("dtoh");
        for (q, &e) in sel.iter().enumerate() {
            let t = q / 2;
            let e = e as usize;
            let s = (0..n_out)
                .map(|o| dot(e * n_out + o, t).abs())
                .fold(1e-30, f64::max);
            for o in 0..n_out {
                let want = dot(e * n_out + o, t);
                let err = (y2[q * n_out + o] as f64 - want).abs() / s;
                worst = worst.max(err);
                assert!(
                    err < 2e-5,
                    "mmgx_{sfx} slot {q} row {o}: {} vs {want}",
                    y2[q * n_out + o]
                );
            }
        }
    }
    eprintln!(
        "mmt_{sfx} / mmgt_{sfx} / mmgw_{sfx} / mmx_{sfx} / mmgx_{sfx} (n_in {n_in}): worst \
         error {worst:.2e} of the largest product"
    );
}

/// The tensor-core prefill kernels of the hot types on rows of 2,048 inputs
/// (eight raw blocks: the split-input kernels' raw-weight pipeline wraps
/// around) and 300 rows (partial row tiles of 128 and 256).
#[test]
fn tensor_core_products_match_on_long_rows() {
    if !gpu_ready() {
        return;
    }
    let gpu = open_gpu();
    let (n_in, n_out) = (2048usize, 300usize);
    for ty in [
        GgmlType::IQ1_M,
        GgmlType::IQ2_XS,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
    ] {
        let sfx = redlite_cuda::dequant_src::type_suffix(ty).expect("suffix");
        let row_bytes = ty.row_bytes(n_in as u64).expect("row") as usize;
        let w = common::random_blocks(ty, 2 * n_out * (n_in / 256), ty as u64 + 29);
        let deq = dequant_rows(ty, &w, row_bytes, n_in);
        tensor_core_products_match(&gpu, sfx, &w, &deq, row_bytes, n_in, n_out);
    }
}

/// Logits of `tokens` through `model`, in batches of `batch`.
fn logits(model: &Model, tokens: &[u32], batch: usize) -> Vec<f32> {
    run(model, tokens, batch)
}

fn bf16_check(model_name: &str) {
    if !gpu_ready() {
        return;
    }
    let model = load_gpu(&format!("{model_name}-bf16.gguf"));
    bf16_vs_transformers(&model, model_name, "gpu ");
}

#[test]
fn tiny_a_bf16_matches_transformers() {
    bf16_check("tiny-a");
}

#[test]
fn tiny_s_bf16_matches_transformers() {
    bf16_check("tiny-s");
}

#[test]
fn quantized_match_the_exact_reference() {
    if !gpu_ready() {
        return;
    }
    let figs: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(fixture("llamacpp-vs-exact.json")).expect("json"),
    )
    .expect("json parses");
    let p = prompts();
    // REDLITE_GPU_TYPES=Q8_0,CF2mix limits the run to some types (the GPU
    // check script splits the fixtures over two device calls).
    let only = std::env::var("REDLITE_GPU_TYPES").ok();
    let all = [
        "Q8_0", "Q4_K_M", "Q2_K", "IQ4_XS", "IQ3_XXS", "IQ2_XS", "IQ1_M", "CF2mix",
    ];
    let types: Vec<&str> = match &only {
        Some(list) => list
            .split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .collect(),
        None => all.to_vec(),
    };
    for ty in types {
        assert!(all.contains(&ty), "REDLITE_GPU_TYPES: unknown type {ty}");
        let file = format!("tiny-s-{ty}.gguf");
        let model = load_gpu(&file);
        let reference = load_gpu_f32(&file);
        let exact = read_npz(&fixture(&format!("exact-{ty}.npz")));
        let lc = &figs[format!("{ty}: llama.cpp vs exact")];
        let lc_kl = lc["mean_kl"].as_f64().expect("mean_kl");
        let lc_p99 = lc["p99_abs"].as_f64().expect("p99_abs");
        // Prefill products keep f32 activations (the tensor cores take each
        // as two bf16 halves); decode's one-token products take 16-bit
        // activations by default, f32 on the reference path.
        for (mode, whole, f32_act) in [
            ("prefill", true, true),
            ("decode", false, false),
            ("decode-f32", false, true),
        ] {
            let model = if mode == "decode-f32" {
                &reference
            } else {
                &model
            };
            let (mut abs, mut kls) = (Vec::new(), Vec::new());
            for name in PROMPTS {
                let tokens = prompt_ids(&p, name);
                let ours = logits(model, &tokens, if whole { tokens.len() } else { 1 });
                for (a, k) in per_position(&exact[name], &ours) {
                    abs.push(a as f64);
                    kls.push(k);
                }
            }
            abs.sort_by(f64::total_cmp);
            let p99 = abs[abs.len() * 99 / 100];
            let mean_kl = kls.iter().sum::<f64>() / kls.len() as f64;
            println!(
                "gpu {ty:8} {mode:8} vs exact: mean KL {mean_kl:.2e} (llama.cpp {lc_kl:.2e}, ratio {:.1e})  p99 |Δ| {p99:.2e}  max |Δ| {:.2e}",
                mean_kl / lc_kl,
                abs[abs.len() - 1]
            );
            assert!(
                mean_kl <= 0.1 * lc_kl && p99 <= lc_p99,
                "{ty} {mode}: KL {mean_kl} vs llama.cpp {lc_kl}, p99 {p99} vs {lc_p99}"
            );
            if f32_act {
                assert!(
                    p99 <= 5e-3 && mean_kl <= 1e-6,
                    "{ty} {mode}: p99 {p99}, KL {mean_kl}"
                );
            }
        }
    }
}

/// Whole-prompt prefill against token-by-token decode. On the f32 reference
/// path every logit agrees within 1e-2. On the default path decode's
/// products take 16-bit activations (prefill's stay f32), and a rounding can
/// flip a near-tie in an expert choice, which moves a few positions' logits
/// by more: there, as on the CPU's integer path, the mean KL stays at most
/// 1e-5 and the 99th percentile of per-position max |Δ| at most 2e-2.
#[test]
fn prefill_matches_decode() {
    if !gpu_ready() {
        return;
    }
    let p = prompts();
    for file in [
        "tiny-s-bf16.gguf",
        "tiny-s-CF2mix.gguf",
        "tiny-s-Q8_0-legacy.gguf",
    ] {
        for f32_act in [true, false] {
            let model = if f32_act {
                load_gpu_f32(file)
            } else {
                load_gpu(file)
            };
            let vocab = model.config().vocab_size;
            let (mut worst, mut kls, mut maxes) = (0f32, Vec::new(), Vec::new());
            for name in PROMPTS {
                let tokens = prompt_ids(&p, name);
                let a = logits(&model, &tokens, tokens.len());
                let b = logits(&model, &tokens, 1);
                worst = worst.max(max_abs(&a, &b));
                for (ra, rb) in a.chunks(vocab).zip(b.chunks(vocab)) {
                    kls.push(kl(ra, rb));
                    maxes.push(max_abs(ra, rb) as f64);
                }
            }
            let mean_kl = kls.iter().sum::<f64>() / kls.len() as f64;
            let p99 = percentile(maxes, 99.0);
            let path = if f32_act { "f32" } else { "int16 decode" };
            println!(
                "gpu {file} ({path}): prefill vs decode max |Δ| {worst:.2e}, p99 {p99:.2e}, mean KL {mean_kl:.2e}"
            );
            if f32_act {
                assert!(worst <= 1e-2, "{file} ({path}): prefill vs decode {worst}");
            } else {
                assert!(
                    mean_kl <= 1e-5 && p99 <= 2e-2,
                    "{file} ({path}): prefill vs decode mean KL {mean_kl}, p99 {p99}"
                );
            }
        }
    }
}

/// Every tuning number away from its default (short passes, the chunked
/// delta rule from two tokens, the wide expert tiles and the split-input
/// products for every product, one integer block per multiprocessor, the
/// narrowest attention combine) computes the same function: prefill and
/// decode on the f32 reference path within the prefill-vs-decode limit of
/// the default model's, and a bad number is refused with its name.
#[test]
fn tuning_numbers_keep_the_outputs() {
    if !gpu_ready() {
        return;
    }
    let name = "tiny-s-CF2mix.gguf";
    let base = load_gpu_f32(name);
    let hd = base.config().head_dim;
    let tuning = redlite_cuda::CudaTuning {
        pass_tokens: Some(1),
        delta_chunk_min: 2,
        tcx_min_in: 256,
        tcx_waves: 0,
        wide_slots: 1,
        mq_fill: 1,
        combine_cols: (hd >= 32).then_some(32).filter(|c| hd.is_multiple_of(*c)),
        xp_blocks: 1,
        xp_late_blocks: 1,
    };
    let tuned = load_gpu_with(
        name,
        redlite_cuda::CudaOptions {
            f32_activations: true,
            tuning: tuning.clone(),
            ..cuda_opts()
        },
    );
    let p = prompts();
    for prompt in PROMPTS {
        let tokens = prompt_ids(&p, prompt);
        for batch in [tokens.len(), 1] {
            let a = logits(&base, &tokens, batch);
            let b = logits(&tuned, &tokens, batch);
            let d = max_abs(&a, &b);
            println!("gpu tuned vs default ({prompt}, batches of {batch}): max |Δ| {d:.2e}");
            assert!(
                d <= 1e-2,
                "{prompt}, batches of {batch}: tuned vs default {d}"
            );
        }
    }
    let mut m = load(name);
    let bad = redlite_cuda::CudaOptions {
        tuning: redlite_cuda::CudaTuning {
            xp_blocks: 0,
            ..tuning
        },
        ..cuda_opts()
    };
    let e = redlite_cuda::attach_with(&mut m, 0, bad, &mut |_, _| {})
        .expect_err("xp_blocks = 0 is refused");
    assert!(e.to_string().contains("xp_blocks"), "{e}");
}

#[test]
fn gpu_matches_the_cpu_reference_path() {
    if !gpu_ready() {
        return;
    }
    let p = prompts();
    let tokens = prompt_ids(&p, "code");
    let cpu = load_with("tiny-s-CF2mix.gguf", redlite_backend::Activations::F32);
    let gpu = load_gpu("tiny-s-CF2mix.gguf");
    let a = logits(&cpu, &tokens, 64);
    let b = logits(&gpu, &tokens, 64);
    let d = max_abs(&a, &b);
    println!("gpu vs cpu f32 path (CF2mix, code, batches of 64): max |Δ| {d:.2e}");
    assert!(d <= 2e-3, "gpu vs cpu: {d}");
}

#[test]
fn long32k_matches_transformers() {
    if !gpu_ready() {
        return;
    }
    long32k_vs_transformers(&load_gpu("tiny-s-bf16.gguf"), "gpu ");
}

/// Forks continue like the original; verify + rollback equals plain decode;
/// batched decode rows equal single-sequence decode.
#[test]
fn states_fork_and_roll_back_on_the_device() {
    if !gpu_ready() {
        return;
    }
    let model = load_gpu("tiny-s-Q4_K_M.gguf");
    let p = prompts();
    let tokens = prompt_ids(&p, "prose");
    let (head, tail) = tokens.split_at(60);
    let mut st = model.new_state();
    assert!(st.is_on_device());
    model.forward(&mut st, head, false).expect("prefill");
    let mut fork = st.snapshot();
    let a = model.forward(&mut st, &tail[..5], true).expect("a");
    let b = model.forward(&mut fork, &tail[..5], true).expect("b");
    assert_eq!(a, b, "a fork continues exactly like the original");
    // Verify 6 tokens, keep 3: the state equals feeding 3.
    let mut v = model.new_state();
    model.forward(&mut v, head, false).expect("prefill");
    let mut plain = v.snapshot();
    let (rows, trail) = model.forward_verify(&mut v, &tail[..6]).expect("verify");
    let mut plain_rows = Vec::new();
    for &t in &tail[..6] {
        plain_rows.extend(model.forward(&mut plain, &[t], false).expect("decode"));
    }
    assert_eq!(rows, plain_rows, "verify rows equal plain decoding");
    let stale = trail;
    // Two passes of the same length at different positions: both equal
    // decoding, and a rollback into the second continues as decoding would.
    let mut v3 = model.new_state();
    model.forward(&mut v3, head, false).expect("prefill");
    let mut plain3 = v3.snapshot();
    let (r3a, _) = model.forward_verify(&mut v3, &tail[..6]).expect("verify a");
    let (r3b, trail3) = model
        .forward_verify(&mut v3, &tail[6..12])
        .expect("verify b");
    let mut plain_rows3 = Vec::new();
    for &t in &tail[..12] {
        plain_rows3.extend(model.forward(&mut plain3, &[t], false).expect("decode"));
    }
    assert_eq!(
        [r3a, r3b].concat(),
        plain_rows3,
        "repeated verify rows equal decoding"
    );
    v3.rollback(&trail3, 2)
        .expect("rollback to 2 of the second pass");
    let mut again3 = model.new_state();
    model
        .forward(&mut again3, &tokens[..68], false)
        .expect("prefill 68");
    let x3 = model.forward(&mut v3, &tail[8..10], true).expect("x3");
    let y3 = model.forward(&mut again3, &tail[8..10], true).expect("y3");
    let d3 = max_abs(&x3, &y3);
    assert!(
        d3 <= 1e-2,
        "rolled back state diverges after a repeated pass: {d3}"
    );
    // Longer than one verify pass (16 tokens): chunked, still equal to
    // decoding, and a rollback into the second chunk continues exactly as
    // decoding those tokens would.
    let mut v2 = model.new_state();
    model.forward(&mut v2, head, false).expect("prefill");
    let mut plain2 = v2.snapshot();
    let draft: Vec<u32> = tail[..20].to_vec();
    let (rows2, trail2) = model.forward_verify(&mut v2, &draft).expect("verify 20");
    let mut plain_rows2 = Vec::new();
    for &t in &draft[..17] {
        plain_rows2.extend(model.forward(&mut plain2, &[t], false).expect("decode"));
    }
    let n17 = plain_rows2.len();
    assert_eq!(
        rows2[..n17],
        plain_rows2[..],
        "chunked verify rows equal decoding"
    );
    v2.rollback(&trail2, 17).expect("rollback to 17");
    assert_eq!(v2.pos(), 60 + 17);
    let next = &tail[17..20];
    let x2 = model.forward(&mut v2, next, true).expect("after rollback");
    let y2 = model.forward(&mut plain2, next, true).expect("plain");
    let d2 = max_abs(&x2, &y2);
    println!("gpu verify: 20 tokens equal decoding; after rollback to 17, max |Δ| {d2:.3e}");
    assert!(d2 <= 1e-4, "rolled back state diverges: {d2}");
    // A trail of another sequence, or an older pass, is refused.
    assert!(
        v2.rollback(&stale, 3).is_err(),
        "a foreign trail is refused"
    );
    v.rollback(&stale, 3).expect("rollback");
    assert_eq!(v.pos(), 63);
    let mut again = model.new_state();
    model
        .forward(&mut again, &tokens[..63], false)
        .expect("prefill");
    let x = model.forward(&mut v, &tail[3..5], true).expect("x");
    let y = model.forward(&mut again, &tail[3..5], true).expect("y");
    let d = max_abs(&x, &y);
    assert!(d <= 1e-2, "rolled back state diverges: {d}");
    // Batched decode: rows equal each sequence's own step.
    let mut s1 = model.new_state();
    let mut s2 = model.new_state();
    model.forward(&mut s1, &tokens[..10], false).expect("p1");
    model.forward(&mut s2, &tokens[..20], false).expect("p2");
    let (mut c1, mut c2) = (s1.snapshot(), s2.snapshot());
    let rows = model
        .forward_batch(&mut [&mut s1, &mut s2], &[tokens[10], tokens[20]])
        .expect("batch");
    let r1 = model.forward(&mut c1, &[tokens[10]], false).expect("r1");
    let r2 = model.forward(&mut c2, &[tokens[20]], false).expect("r2");
    assert_eq!(rows, [r1, r2].concat());
    // A CPU state is refused with an error, not a panic.
    let mut cpu_state = load("tiny-s-Q4_K_M.gguf").new_state();
    assert!(model.forward(&mut cpu_state, &[1], false).is_err());
}

/// Every launch is checked against the kernel's parameters as the driver
/// reports them: a launch with one argument too few, or one of the wrong
/// size, is refused with the kernel's name (nothing runs); the right list
/// is taken.
#[test]
fn launches_are_checked_against_the_kernel_signature() {
    if !gpu_ready() {
        return;
    }
    use redlite_cuda::gpu::Arg;
    let gpu = open_gpu();
    gpu.bind().expect("bind");
    let f = gpu.func("fill_normal").expect("fill_normal");
    let buf = gpu.alloc(256 * 4).expect("alloc");
    let good = [Arg::U(buf.ptr), Arg::U(256), Arg::U(7), Arg::F(1.0)];
    gpu.launch_f(f, (1, 1, 1), 256, 0, &good)
        .expect("the right arguments");
    gpu.sync().expect("sync");
    let short = gpu.launch_f(f, (1, 1, 1), 256, 0, &good[..3]);
    let e = short.expect_err("one argument short").to_string();
    assert!(
        e.contains("fill_normal") && e.contains("3 arguments"),
        "{e}"
    );
    let wrong = [Arg::U(buf.ptr), Arg::I(256), Arg::U(7), Arg::F(1.0)];
    let e = gpu
        .launch_f(f, (1, 1, 1), 256, 0, &wrong)
        .expect_err("a 4-byte argument for a u64")
        .to_string();
    assert!(e.contains("argument 1"), "{e}");
}

fn argmax(v: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if x > v[best] {
            best = i;
        }
    }
    best as u32
}

/// Sequences prefilled with the first `lens[i]` prompt tokens, then `steps`
/// greedy decode steps: alone (`Model::forward`, one token at a time) or
/// all together (`Model::forward_batch`); per sequence its tokens and its
/// logits rows.
fn greedy_decode(
    model: &Model,
    prompt: &[u32],
    lens: &[usize],
    steps: usize,
    batched: bool,
) -> Vec<(Vec<u32>, Vec<f32>)> {
    let vocab = model.config().vocab_size;
    let mut states = Vec::new();
    let mut next = Vec::new();
    for &n in lens {
        let mut st = model.new_state();
        let logits = model
            .forward(&mut st, &prompt[..n], false)
            .expect("prefill");
        next.push(argmax(&logits));
        states.push(st);
    }
    let mut out: Vec<(Vec<u32>, Vec<f32>)> = vec![(Vec::new(), Vec::new()); lens.len()];
    for _ in 0..steps {
        let rows = if batched {
            let mut refs: Vec<&mut redlite_model::State> = states.iter_mut().collect();
            model.forward_batch(&mut refs, &next).expect("batch")
        } else {
            let mut rows = Vec::new();
            for (st, &tok) in states.iter_mut().zip(&next) {
                rows.extend(model.forward(st, &[tok], false).expect("decode"));
            }
            rows
        };
        for (i, o) in out.iter_mut().enumerate() {
            let row = &rows[i * vocab..(i + 1) * vocab];
            o.0.push(next[i]);
            o.1.extend_from_slice(row);
            next[i] = argmax(row);
        }
    }
    for (st, &n) in states.iter().zip(lens) {
        assert_eq!(
            st.pos(),
            n + steps,
            "each sequence advanced by one per step"
        );
    }
    out
}

/// Batched decode on the device (one pass for all sequences: the products
/// over every sequence's row, the conv, delta rule and attention of each
/// sequence on its own state in one launch, a captured pass per batch size)
/// equals decoding each sequence alone: the same greedy tokens and the same
/// logits bit for bit. Four sequences at different positions, then 18 (more
/// than one pass's 16: two passes), on the default 16-bit path (Q4_K_M and
/// the cf2 mix) and the f32 path.
#[test]
fn batched_decode_equals_decoding_alone() {
    if !gpu_ready() {
        return;
    }
    let p = prompts();
    let prompt = prompt_ids(&p, "prose");
    let models = [
        ("Q4_K_M", load_gpu("tiny-s-Q4_K_M.gguf")),
        ("CF2mix", load_gpu("tiny-s-CF2mix.gguf")),
        ("Q4_K_M f32", load_gpu_f32("tiny-s-Q4_K_M.gguf")),
    ];
    let four = [3usize, 17, 40, 61];
    let many: Vec<usize> = (0..18).map(|i| 2 + (i * 7) % 60).collect();
    for (name, model) in &models {
        for (lens, steps) in [(&four[..], 8), (&many[..], 3)] {
            let alone = greedy_decode(model, &prompt, lens, steps, false);
            let batch = greedy_decode(model, &prompt, lens, steps, true);
            let mut worst = 0f32;
            for (a, b) in alone.iter().zip(&batch) {
                worst = worst.max(max_abs(&a.1, &b.1));
            }
            println!(
                "gpu batched decode {name}: {} sequences x {steps} steps, max |Δlogit| vs alone {worst:.3e}",
                lens.len()
            );
            for (i, (a, b)) in alone.iter().zip(&batch).enumerate() {
                assert_eq!(a.0, b.0, "{name}: sequence {i}'s greedy tokens");
                assert!(
                    a.1 == b.1,
                    "{name}: sequence {i}'s logits differ from decoding alone (max |Δ| {:.3e})",
                    max_abs(&a.1, &b.1)
                );
            }
        }
    }
}

/// Routed experts placed apart (a device budget of two experts per layer,
/// the rest in pinned host memory read over the bus) give the all-resident
/// model's logits bit for bit: prefill, decode and a verify pass, with the
/// decode prefetch of predicted experts (copied into device memory on a side
/// stream, the tables pointed at the copies for the step) and without it.
#[test]
fn experts_placed_apart_equal_resident() {
    if !gpu_ready() {
        return;
    }
    for name in ["tiny-s-Q4_K_M.gguf", "tiny-s-CF2mix.gguf"] {
        if name.contains("CF2mix")
            && std::env::var("REDLITE_GPU_TYPES").is_ok_and(|t| !t.contains("CF2mix"))
        {
            continue;
        }
        let resident = load_gpu(name);
        for (no_prefetch, top, wait) in [
            (false, None, false),
            (false, None, true),
            (false, Some(1), false),
            (true, None, false),
        ] {
            let mut placed = load(name);
            // Two experts' records per layer (gate + up + down, with room for
            // their alignment padding), plus the prefetch's three staging
            // areas (two, and the late copies').
            let f = placed.gguf();
            let c = placed.config().clone();
            // Layer il's expert record, with room for its alignment padding.
            let record = |il: usize| {
                let pre = format!("blk.{il}.");
                f.tensors
                    .iter()
                    .filter(|t| {
                        t.name.starts_with(&pre) && redlite_model::is_expert_tensor(&t.name)
                    })
                    .map(|t| t.n_bytes)
                    .sum::<u64>()
                    / c.n_expert as u64
                    + 512
            };
            let rec = record(0);
            // The staging areas hold the largest layer's records (the mixes
            // give some layers' down experts a wider type).
            let rec_max = (0..c.n_layer).map(record).max().unwrap_or(rec);
            let stage = if no_prefetch {
                0
            } else {
                3 * c.n_expert_used as u64 * rec_max
            };
            let budget = 2 * rec * c.n_layer as u64 + stage;
            let opts = redlite_cuda::CudaOptions {
                expert_vram_bytes: Some(budget),
                no_expert_prefetch: no_prefetch,
                expert_prefetch_top: top,
                expert_prefetch_wait_router: wait,
                ..cuda_opts()
            };
            let p = redlite_cuda::attach_with(&mut placed, 0, opts, &mut |_, _| {})
                .unwrap_or_else(|e| panic!("{name}: {e}"))
                .expect("the budget leaves experts on the host");
            assert!(
                c.n_expert > 2,
                "{name}: the test needs more than two experts"
            );
            assert_eq!(p.vram, 2, "{name}: two experts per layer in device memory");
            assert!(p.host_bytes > 0, "{name}: experts on the host");
            let dev = placed.device().expect("on the GPU");
            assert_eq!(
                dev.prefetch_stats(true).is_some(),
                !no_prefetch,
                "{name}: prefetch on unless turned off"
            );
            let tokens = prompt_ids(&prompts(), "code");
            let (head, tail) = tokens.split_at(tokens.len() - 8);
            let mut a = resident.new_state();
            let mut b = placed.new_state();
            let la = resident.forward(&mut a, head, true).expect("prefill");
            let lb = placed.forward(&mut b, head, true).expect("prefill");
            assert!(
                la.iter().zip(&lb).all(|(x, y)| x.to_bits() == y.to_bits()),
                "{name}: prefill"
            );
            let steps = 3;
            for &t in &tail[..steps] {
                let la = resident.forward(&mut a, &[t], false).expect("decode");
                let lb = placed.forward(&mut b, &[t], false).expect("decode");
                let differ = la
                    .iter()
                    .zip(&lb)
                    .filter(|(x, y)| x.to_bits() != y.to_bits())
                    .count();
                let worst = la
                    .iter()
                    .zip(&lb)
                    .map(|(x, y)| (x - y).abs())
                    .fold(0f32, f32::max);
                assert!(
                    differ == 0,
                    "{name}: decode (prefetch {}, top {top:?}): {differ} of {} logits differ, \
                     by up to {worst:e}",
                    !no_prefetch,
                    la.len()
                );
            }
            // The tables are as uploaded again after the decode steps: a
            // verify pass and a fresh prefill read the same experts.
            let (va, _) = resident
                .forward_verify(&mut a, &tail[steps..])
                .expect("verify");
            let (vb, _) = placed
                .forward_verify(&mut b, &tail[steps..])
                .expect("verify");
            assert!(
                va.iter().zip(&vb).all(|(x, y)| x.to_bits() == y.to_bits()),
                "{name}: verify"
            );
            let mut b2 = placed.new_state();
            let lb2 = placed.forward(&mut b2, head, true).expect("prefill again");
            assert!(
                la.iter().zip(&lb2).all(|(x, y)| x.to_bits() == y.to_bits()),
                "{name}: prefill after decoding"
            );
            if let Some(st) = dev.prefetch_stats(true) {
                let k = c.n_expert_used as u64;
                let chosen = steps as u64 * c.n_layer as u64 * k;
                assert_eq!(st.chosen, chosen, "{name}: every decode step counted");
                assert!(
                    st.predicted <= st.chosen && st.outside <= st.chosen,
                    "{st:?}"
                );
                assert!(
                    st.outside_predicted <= st.outside.min(st.predicted),
                    "{st:?}"
                );
                let per_layer = top.unwrap_or(k as usize) as u64;
                assert!(
                    st.copied > 0 && st.copied <= steps as u64 * c.n_layer as u64 * per_layer,
                    "{name}: {st:?}"
                );
                assert!(
                    st.stopped_bytes <= st.copied * st.expert_bytes,
                    "{name}: {st:?}"
                );
                // Every chosen expert in host memory that was not copied
                // ahead is copied after the router.
                assert_eq!(st.late, st.read_on_use(), "{name}: {st:?}");
                if wait {
                    // Every copy waited for the router: those of the
                    // predicted experts it did not choose stopped at once.
                    assert!(
                        st.predicted < steps as u64 * c.n_layer as u64 * k && st.stopped_bytes > 0,
                        "{name}: copies stopped: {st:?}"
                    );
                }
                assert_eq!(dev.prefetch_stats(false).map(|s| s.chosen), Some(0));
                println!(
                    "gpu {name}: prefetch top {top:?} wait {wait}: {:.1}% of chosen experts \
                     predicted, {:.1}% of those on the host copied ahead ({} copies, {} B \
                     left undone)",
                    100.0 * st.accuracy(),
                    100.0 * st.outside_hit_rate(),
                    st.copied,
                    st.stopped_bytes
                );
            }
            println!(
                "gpu {name}: experts 2 per layer in device memory ({} B), {} B on the host, \
                 prefetch {}: prefill, decode and verify equal the resident model bit for bit",
                p.vram_bytes, p.host_bytes, !no_prefetch
            );
        }
    }
}
