//! The integer unit functions of `kernels/q16.cuh`, checked without a GPU:
//! the very text the kernels are built from is compiled as C++ with g++
//! (dp2a and the float helpers have host forms there) and run on random
//! blocks of every type it covers, at the alignments the device gives them.
//!
//! * The activation quantizer must equal its Rust twin (`common::q16_quantize`)
//!   bit for bit (scales, values, sums), and turn a NaN into a NaN scale.
//! * Every 32-value unit's `q16a_T(q16p_T(..))` (with the global lookup
//!   tables, and the same bits with the shared-memory copies `q16_tab_T`
//!   makes for IQ1_M and IQ2_XS) must equal
//!   `Σ w_i · q_i` in f64 (w_i from redlite_quant's scalar dequantizer, q_i
//!   the quantized activations) to within f32 rounding of the unit's sum of
//!   magnitudes (a few times more for the types with a minimum, whose two
//!   terms nearly cancel).

use std::fmt::Write as _;
use std::process::Command;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redlite_cuda::dequant_src::{dequant_source, dq_block_shape, q16_suffixes, Q16_CUH};
use redlite_gguf::GgmlType;

mod common;
use common::{gxx_build, have_gxx, q16_quantize, random_blocks};

const MAIN_CPP: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void (*rl_prep_fn)(const uint8_t*, int, RlQW&, const uint8_t*);
typedef float (*rl_apply_fn)(const RlQW&, const RlXU&);
typedef void (*rl_tab_fn)(uint8_t*, int, int);
struct RlEntry { const char* name; int qk; int bs; int units; rl_prep_fn prep; rl_apply_fn apply;
                 int tab_bytes; rl_tab_fn tab; };
#define RL_ENTRY(T) { #T, QK_##T, BS_##T, Q16_UNITS_##T, q16p_##T, q16a_##T, Q16_TAB_##T, q16_tab_##T },
static const RlEntry RL_ENTRIES[] = { REDLITE_Q16_TYPES(RL_ENTRY) };
#undef RL_ENTRY

static unsigned char* read_all(const char* path, long* n) {
    FILE* f = fopen(path, "rb");
    if (!f) { perror(path); exit(2); }
    fseek(f, 0, SEEK_END); *n = ftell(f); fseek(f, 0, SEEK_SET);
    unsigned char* b = (unsigned char*)malloc((size_t)*n + 64);
    if (fread(b, 1, (size_t)*n, f) != (size_t)*n) { perror(path); exit(2); }
    fclose(f);
    return b;
}
static void write_all(const char* path, const void* p, size_t n) {
    FILE* f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n) { perror(path); exit(2); }
    fclose(f);
}

// Jobs: TYPE misalign blocks x out_units out_x. x holds nb * QK_T floats.
int main(int argc, char** argv) {
    if (argc != 2) { fprintf(stderr, "usage: %s JOBS\n", argv[0]); return 2; }
    FILE* jobs = fopen(argv[1], "r");
    if (!jobs) { perror(argv[1]); return 2; }
    char name[64], in[4096], xin[4096], out[4096], xout[4096];
    int mis;
    while (fscanf(jobs, "%63s %d %4095s %4095s %4095s %4095s", name, &mis, in, xin, out, xout) == 6) {
        const RlEntry* e = 0;
        for (size_t i = 0; i < sizeof RL_ENTRIES / sizeof RL_ENTRIES[0]; ++i)
            if (strcmp(RL_ENTRIES[i].name, name) == 0) e = &RL_ENTRIES[i];
        if (!e) { fprintf(stderr, "unknown type %s\n", name); return 2; }
        long n, nx;
        unsigned char* raw = read_all(in, &n);
        float* x = (float*)read_all(xin, &nx);
        long nb = n / e->bs;
        long nv = nx / 4;
        if (nv != nb * e->qk || nv % 256 != 0) { fprintf(stderr, "bad sizes\n"); return 2; }
        // Blocks at `mis` past a 16-byte aligned address, 64 bytes of slack behind.
        unsigned char* buf = (unsigned char*)aligned_alloc(16, ((size_t)n + 96 + 15) / 16 * 16);
        memset(buf, 0xa5, (size_t)n + 96);
        memcpy(buf + mis, raw, (size_t)n);
        RlXU* u = (RlXU*)aligned_alloc(16, sizeof(RlXU) * (size_t)(nv / 32));
        float* d = (float*)malloc(sizeof(float) * (size_t)(nv / 32));
        rl_q16_quantize_ref(x, (int)nv, u, d);
        float* res = (float*)malloc(sizeof(float) * (size_t)(nv / 32));
        // The type's shared-memory tables, filled as a block fills them (by
        // threads 0..127 in turn); every unit must come out the same from them.
        uint8_t* tab = 0;
        if (e->tab_bytes) {
            tab = (uint8_t*)aligned_alloc(16, ((size_t)e->tab_bytes + 15) / 16 * 16);
            for (int th = 0; th < 128; ++th) e->tab(tab, th, 128);
        }
        for (long b = 0; b < nb; ++b)
            for (int j = 0; j < e->units; ++j) {
                RlQW w;
                e->prep(buf + mis + b * e->bs, j, w, 0);
                res[b * e->units + j] = e->apply(w, u[b * e->units + j]);
                if (tab) {
                    RlQW w2;
                    e->prep(buf + mis + b * e->bs, j, w2, tab);
                    const float r2 = e->apply(w2, u[b * e->units + j]);
                    if (memcmp(&r2, &res[b * e->units + j], 4) != 0 ||
                        memcmp(w.w, w2.w, sizeof w.w) != 0) {
                        fprintf(stderr, "%s: block %ld unit %d differs with the shared tables\n",
                                e->name, b, j);
                        return 3;
                    }
                }
            }
        free(tab);
        write_all(out, res, sizeof(float) * (size_t)(nv / 32));
        FILE* f = fopen(xout, "wb");
        if (!f || fwrite(u, sizeof(RlXU), (size_t)(nv / 32), f) != (size_t)(nv / 32) ||
            fwrite(d, sizeof(float), (size_t)(nv / 32), f) != (size_t)(nv / 32)) {
            perror(xout); return 2;
        }
        fclose(f);
        free(raw); free(x); free(buf); free(u); free(d); free(res);
    }
    fclose(jobs);
    return 0;
}
"#;

fn ty(sfx: &str) -> GgmlType {
    GgmlType::ALL
        .into_iter()
        .find(|t| redlite_cuda::dequant_src::type_suffix(*t) == Some(sfx))
        .expect("known suffix")
}

/// Random activations of `n` values (a multiple of 32): per 32 values a
/// magnitude from 1e-30 to 1e4, some units all zero, some with one outlier.
fn random_x(n: usize, rng: &mut StdRng) -> Vec<f32> {
    let mut x = vec![0f32; n];
    for b in x.chunks_exact_mut(32) {
        match rng.gen_range(0..10) {
            0 => {}
            1 => {
                for v in b.iter_mut() {
                    *v = rng.gen_range(-1.0f32..1.0) * 1e-3;
                }
                let i = rng.gen_range(0..32);
                b[i] = 50.0;
            }
            _ => {
                let scale = 10f32.powf(rng.gen_range(-30.0f32..4.0));
                for v in b.iter_mut() {
                    *v = rng.gen_range(-1.0f32..1.0) * scale;
                }
            }
        }
    }
    x
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

#[test]
fn q16_units_match_f64_reference_on_host() {
    if !have_gxx() {
        eprintln!("g++ not found on PATH: skipping the host check of q16.cuh");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cpp = format!("{}\n{Q16_CUH}\n{MAIN_CPP}", dequant_source());
    let exe = gxx_build(dir.path(), "q16_host", &cpp, "q16.cuh");

    struct Job {
        ty: GgmlType,
        data: Vec<u8>,
        x: Vec<f32>,
        mis: usize,
    }
    let mut rng = StdRng::seed_from_u64(0x0916);
    let mut jobs = Vec::new();
    for (i, sfx) in q16_suffixes().iter().enumerate() {
        let t = ty(sfx);
        let (qk, bs) = dq_block_shape(t).unwrap();
        // The alignment the device guarantees a block: 4 bytes for the
        // K-quants and IQ1_M (their staged rows start 16-byte aligned and their
        // blocks are multiples of 8 or 16 bytes), 2 for the others.
        let mis: &[usize] = if bs % 4 == 0 { &[0] } else { &[0, 2] };
        for (k, &m) in mis.iter().enumerate() {
            let nb = 2048 / qk * 8;
            let data = random_blocks(t, nb, 0x9160 + (i * 4 + k) as u64);
            let x = random_x(nb * qk, &mut rng);
            jobs.push(Job {
                ty: t,
                data,
                x,
                mis: m,
            });
        }
        let _ = bs;
    }
    let mut list = String::new();
    for (i, j) in jobs.iter().enumerate() {
        let p = |s: &str| dir.path().join(format!("{s}{i}.bin"));
        std::fs::write(p("blk"), &j.data).unwrap();
        let xb: Vec<u8> = j.x.iter().flat_map(|v| v.to_le_bytes()).collect();
        std::fs::write(p("x"), xb).unwrap();
        writeln!(
            list,
            "{} {} {} {} {} {}",
            redlite_cuda::dequant_src::type_suffix(j.ty).unwrap(),
            j.mis,
            p("blk").display(),
            p("x").display(),
            p("units").display(),
            p("xq").display()
        )
        .unwrap();
    }
    let list_path = dir.path().join("jobs.txt");
    std::fs::write(&list_path, list).unwrap();
    let run = Command::new(&exe).arg(&list_path).output().unwrap();
    assert!(
        run.status.success(),
        "q16_host failed:\n{}",
        String::from_utf8_lossy(&run.stderr)
    );

    for (i, j) in jobs.iter().enumerate() {
        let (qk, bs) = dq_block_shape(j.ty).unwrap();
        let nb = j.data.len() / bs;
        let nv = nb * qk;
        // The quantized activations against the Rust twin, bit for bit.
        let xq = std::fs::read(dir.path().join(format!("xq{i}.bin"))).unwrap();
        assert_eq!(xq.len(), nv / 32 * 80 + nv / 32 * 4);
        let (act_d, act_q) = q16_quantize(&j.x);
        let dq = f32s(&xq[nv / 32 * 80..]);
        for (b, (&got, &want)) in dq.iter().zip(&act_d).enumerate() {
            assert_eq!(got.to_bits(), want.to_bits(), "{:?}: scale {b}", j.ty);
        }
        let mut q = vec![0i32; nv];
        for u in 0..nv / 32 {
            let rec = &xq[u * 80..u * 80 + 80];
            for k in 0..16 {
                let w = u32::from_le_bytes([
                    rec[4 * k],
                    rec[4 * k + 1],
                    rec[4 * k + 2],
                    rec[4 * k + 3],
                ]);
                q[32 * u + 2 * k] = (w & 0xffff) as u16 as i16 as i32;
                q[32 * u + 2 * k + 1] = (w >> 16) as u16 as i16 as i32;
            }
            for h in 0..4 {
                let o = 64 + 4 * h;
                let s = i32::from_le_bytes([rec[o], rec[o + 1], rec[o + 2], rec[o + 3]]);
                let want: i32 = q[32 * u + 8 * h..32 * u + 8 * h + 8].iter().sum();
                assert_eq!(s, want, "{:?}: unit {u} sum {h}", j.ty);
            }
        }
        for (k, (&a, &b)) in q.iter().zip(&act_q).enumerate() {
            assert_eq!(a, b, "{:?}: activation {k}", j.ty);
        }
        // Every unit against f64.
        let mut w = vec![0f32; nv];
        (redlite_quant::kernels(j.ty).unwrap().dequant)(&j.data, &mut w);
        let got = f32s(&std::fs::read(dir.path().join(format!("units{i}.bin"))).unwrap());
        let mut worst = 0f64;
        for (u, &gu) in got.iter().enumerate() {
            let (mut s, mut mag) = (0f64, 0f64);
            for (&wk, &qk) in w[32 * u..32 * u + 32].iter().zip(&q[32 * u..32 * u + 32]) {
                let p = wk as f64 * qk as f64;
                s += p;
                mag += p.abs();
            }
            let g = gu as f64;
            let err = (g - s).abs();
            // Types with a minimum subtract two products of up to ~10x the
            // unit's magnitude (Q5_K's integer sum also rounds past 2^24).
            let rel = if matches!(j.ty, GgmlType::Q4_K | GgmlType::Q5_K) {
                2e-6
            } else {
                4e-7
            };
            let tol = rel * mag + 1e-38;
            assert!(
                err <= tol,
                "{:?} (block offset {}): unit {u} (block {}, sub {}): q16 {g:e}, f64 {s:e} (|Σ| {mag:e})",
                j.ty,
                j.mis,
                u * 32 / qk,
                u % (qk / 32).max(1)
            );
            if mag > 0.0 {
                worst = worst.max(err / mag);
            }
        }
        eprintln!(
            "{:?} (offset {}): {} units, worst error {worst:.2e} of Σ|w·q|",
            j.ty,
            j.mis,
            nv / 32
        );
    }
}

#[test]
fn q16_quantizer_turns_nan_into_a_nan_scale() {
    if !have_gxx() {
        eprintln!("g++ not found on PATH: skipping");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let main = r#"
#include <stdio.h>
int main() {
    float x[64];
    for (int i = 0; i < 64; i++) x[i] = (float)(i % 7) - 3.0f;
    x[40] = __builtin_nanf("");
    RlXU u[2];
    float d[2];
    rl_q16_quantize_ref(x, 64, u, d);
    float y[32];
    for (int i = 0; i < 32; i++) y[i] = 0.0f;
    y[3] = __builtin_inff();
    float e[1];
    rl_q16_quantize_ref(y, 32, u, e);
    printf("%d %d %d\n", d[0] == d[0], d[1] != d[1], e[0] > 3.0e38f);
    return 0;
}
"#;
    let cpp = format!("{}\n{Q16_CUH}\n{main}", dequant_source());
    let exe = gxx_build(dir.path(), "nan", &cpp, "the quantizer check");
    let run = Command::new(&exe).output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&run.stdout).trim(),
        "1 1 1",
        "first block finite, second NaN, the block with an infinity infinite"
    );
}
