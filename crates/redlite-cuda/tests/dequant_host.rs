//! The `dq8_*` device functions of `kernels/dequant.cuh`, checked without a
//! GPU:
//!
//! * `dq8_matches_scalar_dequant_on_host`: the very text of
//!   `dequant_source()` is compiled as C++ with g++ (no FMA contraction),
//!   every 8-value chunk of random blocks and of the fixture GGUF tensors is
//!   dequantized with it, and the result must equal redlite_quant's scalar
//!   dequantizer bit for bit.
//! * `dequant_source_compiles_under_nvrtc`: the same text plus a kernel that
//!   calls every `dq8_*` compiles to PTX with NVRTC (`--fmad=false`, sm_90),
//!   when a libnvrtc can be found.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use redlite_cuda::dequant_src::{dequant_source, dq_block_shape, type_suffix};
use redlite_gguf::{GgmlType, GgufFile};

mod common;
use common::{gxx_build, have_gxx, random_blocks};

/// Random blocks per type (besides the exhaustive F16 / BF16 sweeps).
const RANDOM_BLOCKS: usize = 256;
/// Rows taken from the start of every fixture tensor.
const FIXTURE_ROWS: u64 = 32;

fn supported_types() -> Vec<GgmlType> {
    GgmlType::ALL
        .into_iter()
        .filter(|&t| type_suffix(t).is_some())
        .collect()
}

/// One dequantization job for the C++ program.
struct Job {
    label: String,
    ty: GgmlType,
    data: Vec<u8>,
}

fn fixtures_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("REDLITE_FIXTURES") {
        return PathBuf::from(d);
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures")
}

/// The first rows of every supported-type tensor of every fixture GGUF.
fn fixture_jobs() -> Vec<Job> {
    let dir = fixtures_dir();
    let Ok(rd) = std::fs::read_dir(&dir) else {
        eprintln!(
            "fixtures not found at {} (set REDLITE_FIXTURES): only random blocks are checked",
            dir.display()
        );
        return Vec::new();
    };
    let mut paths: Vec<PathBuf> = rd
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "gguf"))
        .collect();
    paths.sort();
    let mut jobs = Vec::new();
    for p in paths {
        let f = GgufFile::open(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        let fname = p.file_name().unwrap().to_string_lossy().into_owned();
        for t in &f.tensors {
            if type_suffix(t.ggml_type).is_none() {
                continue;
            }
            let data = f.tensor_data(t);
            let (_, bs) = dq_block_shape(t.ggml_type).unwrap();
            let want = (t.row_bytes() * FIXTURE_ROWS.min(t.n_rows())) as usize;
            let len = want.min(data.len()) / bs * bs;
            if len == 0 {
                continue;
            }
            jobs.push(Job {
                label: format!("{fname}:{}", t.name),
                ty: t.ggml_type,
                data: data[..len].to_vec(),
            });
        }
    }
    jobs
}

/// The C++ driver: reads a job list (`TYPE misalign in out` per line),
/// dequantizes every chunk of every block of `in` with `dq8_TYPE` from a
/// buffer whose blocks start `misalign` bytes past a malloc'd address, and
/// writes the raw f32 to `out`.
const MAIN_CPP: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void (*rl_dq_fn)(const uint8_t*, int, float*);
struct RlEntry { const char* name; int qk; int bs; rl_dq_fn fn; };
#define RL_ENTRY(T, id) { #T, QK_##T, BS_##T, dq8_##T },
static const RlEntry RL_ENTRIES[] = { REDLITE_DQ_TYPES(RL_ENTRY) };
#undef RL_ENTRY

static unsigned char* read_all(const char* path, long* n) {
    FILE* f = fopen(path, "rb");
    if (!f) { perror(path); exit(2); }
    fseek(f, 0, SEEK_END); *n = ftell(f); fseek(f, 0, SEEK_SET);
    unsigned char* b = (unsigned char*)malloc((size_t)*n + 16);
    if (fread(b, 1, (size_t)*n, f) != (size_t)*n) { perror(path); exit(2); }
    fclose(f);
    return b;
}

int main(int argc, char** argv) {
    if (argc != 2) { fprintf(stderr, "usage: %s JOBS\n", argv[0]); return 2; }
    FILE* jobs = fopen(argv[1], "r");
    if (!jobs) { perror(argv[1]); return 2; }
    char name[64], in[4096], out[4096];
    int mis;
    while (fscanf(jobs, "%63s %d %4095s %4095s", name, &mis, in, out) == 4) {
        const RlEntry* e = 0;
        for (size_t i = 0; i < sizeof RL_ENTRIES / sizeof RL_ENTRIES[0]; ++i)
            if (strcmp(RL_ENTRIES[i].name, name) == 0) e = &RL_ENTRIES[i];
        if (!e) { fprintf(stderr, "unknown type %s\n", name); return 2; }
        long n;
        unsigned char* raw = read_all(in, &n);
        unsigned char* buf = (unsigned char*)malloc((size_t)n + 16);
        memcpy(buf + mis, raw, (size_t)n);
        long nb = n / e->bs;
        float* res = (float*)malloc(sizeof(float) * (size_t)(nb * e->qk + 1));
        for (long b = 0; b < nb; ++b)
            for (int c = 0; c < e->qk / 8; ++c)
                e->fn(buf + mis + b * e->bs, c, res + b * e->qk + 8 * c);
        FILE* f = fopen(out, "wb");
        if (!f || fwrite(res, sizeof(float), (size_t)(nb * e->qk), f) != (size_t)(nb * e->qk)) {
            perror(out); return 2;
        }
        fclose(f);
        free(raw); free(buf); free(res);
    }
    fclose(jobs);
    return 0;
}
"#;

#[test]
fn dq8_matches_scalar_dequant_on_host() {
    if !have_gxx() {
        eprintln!("g++ not found on PATH: skipping the host check of dequant.cuh");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cpp = format!("{}\n{MAIN_CPP}", dequant_source());
    // Debugging aid: keep a copy of the C++ program.
    if let Some(p) = std::env::var_os("REDLITE_DQ_DUMP") {
        std::fs::write(p, &cpp).unwrap();
    }
    let exe = gxx_build(dir.path(), "dq_host", &cpp, "dequant_source()");

    let mut jobs = Vec::new();
    for (i, t) in supported_types().into_iter().enumerate() {
        jobs.push(Job {
            label: "random".into(),
            ty: t,
            data: random_blocks(t, RANDOM_BLOCKS, 0x5eed + i as u64),
        });
    }
    // Every f16 / bf16 bit pattern.
    let all: Vec<u8> = (0..=u16::MAX).flat_map(|h| h.to_le_bytes()).collect();
    for t in [GgmlType::F16, GgmlType::BF16] {
        jobs.push(Job {
            label: "all 65536 patterns".into(),
            ty: t,
            data: all.clone(),
        });
    }
    let fixtures = fixture_jobs();
    let n_fixture_jobs = fixtures.len();
    jobs.extend(fixtures);

    let mut list = String::new();
    for (i, j) in jobs.iter().enumerate() {
        let inp = dir.path().join(format!("in{i}.bin"));
        let outp = dir.path().join(format!("out{i}.bin"));
        std::fs::write(&inp, &j.data).unwrap();
        // Misaligned starts (odd ones included) for half the jobs.
        writeln!(
            list,
            "{} {} {} {}",
            type_suffix(j.ty).unwrap(),
            i % 4,
            inp.display(),
            outp.display()
        )
        .unwrap();
    }
    let list_path = dir.path().join("jobs.txt");
    std::fs::write(&list_path, list).unwrap();
    let run = Command::new(&exe).arg(&list_path).output().unwrap();
    assert!(
        run.status.success(),
        "dq_host failed:\n{}",
        String::from_utf8_lossy(&run.stderr)
    );

    let mut blocks_per_type: std::collections::BTreeMap<String, (usize, usize)> =
        Default::default();
    for (i, j) in jobs.iter().enumerate() {
        let (qk, bs) = dq_block_shape(j.ty).unwrap();
        let nb = j.data.len() / bs;
        let got = std::fs::read(dir.path().join(format!("out{i}.bin"))).unwrap();
        assert_eq!(
            got.len(),
            nb * qk * 4,
            "{:?} {}: output size",
            j.ty,
            j.label
        );
        let mut want = vec![0f32; nb * qk];
        (redlite_quant::kernels(j.ty).unwrap().dequant)(&j.data, &mut want);
        for (k, (w, g)) in want.iter().zip(got.chunks_exact(4)).enumerate() {
            let g = u32::from_le_bytes([g[0], g[1], g[2], g[3]]);
            assert_eq!(
                w.to_bits(),
                g,
                "{:?} ({}): block {} index {}: scalar {:e} ({:#010x}), dq8 {:e} ({g:#010x})",
                j.ty,
                j.label,
                k / qk,
                k % qk,
                w,
                w.to_bits(),
                f32::from_bits(g)
            );
        }
        let e = blocks_per_type.entry(format!("{:?}", j.ty)).or_default();
        if j.label.contains(".gguf:") {
            e.1 += nb;
        } else {
            e.0 += nb;
        }
    }
    eprintln!(
        "bit-exact (random blocks, fixture blocks) per type; {n_fixture_jobs} fixture tensors:"
    );
    for (t, (r, f)) in &blocks_per_type {
        eprintln!("  {t:8} {r:6} {f:7}");
    }
}

/// Whether cudarc can load NVRTC (from the loader's path, `REDLITE_NVRTC_DIR`
/// or the toolkit's usual places).
fn nvrtc_present() -> bool {
    let dirs: Vec<std::path::PathBuf> = std::env::var_os("REDLITE_NVRTC_DIR")
        .map(Into::into)
        .into_iter()
        .collect();
    redlite_cuda::gpu::find_nvrtc(&dirs)
}

#[test]
fn dequant_source_compiles_under_nvrtc() {
    if !nvrtc_present() {
        eprintln!(
            "libnvrtc not found (set REDLITE_NVRTC_DIR or LD_LIBRARY_PATH): skipping the NVRTC check"
        );
        return;
    }
    let kernel = r#"
extern "C" __global__ void rl_dq_all(const uint8_t* __restrict__ src, float* __restrict__ dst,
                                     int type_id, int nblk) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
#define RL_CASE(T, id)                                                            \
    if (type_id == id) {                                                          \
        const int nc = QK_##T / 8;                                                \
        if (i < nblk * nc) {                                                      \
            float v[8];                                                           \
            dq8_##T(src + (unsigned long long)(i / nc) * BS_##T, i % nc, v);      \
            _Pragma("unroll") for (int j = 0; j < 8; ++j) dst[8 * i + j] = v[j];  \
        }                                                                         \
    }
    REDLITE_DQ_TYPES(RL_CASE)
#undef RL_CASE
}
"#;
    let src = format!("{}\n{kernel}", dequant_source());
    let opts = cudarc::nvrtc::CompileOptions {
        arch: Some("sm_90"),
        fmad: Some(false),
        ..Default::default()
    };
    match cudarc::nvrtc::compile_ptx_with_opts(&src, opts) {
        Ok(ptx) => {
            let text = ptx.to_src();
            // Debugging aid: keep a copy of the PTX.
            if let Some(p) = std::env::var_os("REDLITE_DQ_PTX_DUMP") {
                std::fs::write(p, &text).unwrap();
            }
            assert!(text.contains("rl_dq_all"), "PTX lacks the kernel");
            assert!(
                !text.contains(".local"),
                "the dq8_* functions spill to local memory"
            );
            assert!(!text.contains("fma.rn.f32"), "FMA contraction in the PTX");
            eprintln!("NVRTC: {} bytes of PTX", text.len());
        }
        Err(cudarc::nvrtc::CompileError::CompileError {
            nvrtc,
            options,
            log,
        }) => panic!(
            "NVRTC failed on dequant_source() ({nvrtc:?}, options {options:?}):\n{}",
            log.to_string_lossy()
        ),
        Err(e) => panic!("NVRTC failed on dequant_source(): {e:?}"),
    }
}
