//! Shared test code: random valid blocks, the gguf-py oracle, bit comparison.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redlite_gguf::GgmlType;

pub fn rng(seed: u64) -> StdRng {
    StdRng::seed_from_u64(seed)
}

/// A random finite f16 bit pattern (any sign, exponent < 31).
pub fn finite_f16(r: &mut StdRng) -> u16 {
    loop {
        let h: u16 = r.gen();
        if (h >> 10) & 0x1f != 0x1f {
            return h;
        }
    }
}

/// A random f16 of moderate magnitude (|v| in about [2^-10, 2^2)), for
/// tests where huge or tiny scales only make tolerances meaningless.
pub fn sane_f16(r: &mut StdRng) -> u16 {
    let exp: u16 = r.gen_range(5..17);
    let mant: u16 = r.gen_range(0..1024);
    let sign: u16 = if r.gen() { 0x8000 } else { 0 };
    sign | (exp << 10) | mant
}

/// Byte offsets of the f16 scale fields of each block type.
pub fn f16_fields(ty: GgmlType) -> &'static [usize] {
    use GgmlType::*;
    match ty {
        Q4_0 | Q5_0 | Q8_0 | IQ4_NL | IQ4_XS | IQ2_XXS | IQ2_XS | IQ2_S | IQ3_XXS | IQ3_S
        | IQ1_S | Q1_0 | Q2_0 => &[0],
        Q4_1 | Q5_1 | Q4_K | Q5_K => &[0, 2],
        Q2_K => &[80, 82],
        Q3_K => &[108],
        Q6_K => &[208],
        TQ1_0 => &[52],
        TQ2_0 => &[64],
        _ => &[],
    }
}

/// `n` random blocks of `ty` with valid, finite scale fields. `sane` picks
/// moderate scales instead of any finite f16.
pub fn random_blocks(ty: GgmlType, n: usize, r: &mut StdRng, sane: bool) -> Vec<u8> {
    let ts = ty.type_size();
    let mut data = vec![0u8; n * ts];
    r.fill(&mut data[..]);
    let f16 = |r: &mut StdRng| if sane { sane_f16(r) } else { finite_f16(r) };
    for blk in data.chunks_exact_mut(ts) {
        match ty {
            GgmlType::F32 => loop {
                let v: u32 = r.gen();
                if (v >> 23) & 0xff != 0xff {
                    blk.copy_from_slice(&v.to_le_bytes());
                    break;
                }
            },
            GgmlType::F16 => blk.copy_from_slice(&f16(r).to_le_bytes()),
            GgmlType::BF16 => loop {
                let v: u16 = r.gen();
                if (v >> 7) & 0xff != 0xff {
                    blk.copy_from_slice(&v.to_le_bytes());
                    break;
                }
            },
            GgmlType::MXFP4 => {
                blk[0] = if sane {
                    r.gen_range(118..=136)
                } else {
                    r.gen_range(0..=254)
                }
            }
            GgmlType::Q8_K => {
                let d: f32 = r.gen_range(-2.0..2.0);
                blk[0..4].copy_from_slice(&d.to_le_bytes());
            }
            GgmlType::IQ1_M => {
                // The f16 scale is spread over the top nibbles of the four
                // u16 scale words; build it and scatter it there.
                let d = f16(r);
                for k in 0..4 {
                    let nib = ((d >> (4 * k)) & 0xF) as u8;
                    let at = 48 + 2 * k + 1;
                    blk[at] = (blk[at] & 0x0F) | (nib << 4);
                }
            }
            _ => {
                for &off in f16_fields(ty) {
                    blk[off..off + 2].copy_from_slice(&f16(r).to_le_bytes());
                }
            }
        }
    }
    data
}

/// Every type with kernels.
pub fn kernel_types() -> Vec<GgmlType> {
    GgmlType::ALL
        .iter()
        .copied()
        .filter(|t| redlite_quant::kernels(*t).is_some())
        .collect()
}

/// One tensor as dequantized by gguf-py.
pub struct PyTensor {
    pub name: String,
    pub ty: String,
    /// `None` when gguf-py cannot dequantize the type.
    pub values: Option<Vec<f32>>,
}

/// Run the gguf-py helper on `gguf`; panics loudly when Python or gguf-py is
/// missing (never skips).
pub fn py_dequant(gguf: &Path) -> Vec<PyTensor> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/dequant_ref.py");
    let dir = tempfile::tempdir().expect("temp dir");
    let out: PathBuf = dir.path().join("ref");
    let py = redlite_testkit::python();
    let res = Command::new(&py)
        .arg(&script)
        .arg(gguf)
        .arg(&out)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run Python interpreter {} ({e}): run the CI setup (.ci/run) to create \
                 the venv with gguf and numpy, or set REDLITE_PYTHON",
                py.display()
            )
        });
    assert!(
        res.status.success(),
        "gguf-py reference failed for {} with {} ({}): {}\nrun the CI setup (.ci/run) to \
         install gguf==0.19 and numpy into the venv, or set REDLITE_PYTHON",
        gguf.display(),
        py.display(),
        res.status,
        String::from_utf8_lossy(&res.stderr)
    );
    let idx = std::fs::read_to_string(out.with_extension("idx")).expect("index written");
    let bin = std::fs::read(out.with_extension("bin")).expect("values written");
    let mut v = Vec::new();
    for line in idx.lines() {
        let f: Vec<&str> = line.split('\t').collect();
        assert_eq!(f.len(), 5, "bad index line {line:?}");
        let off: usize = f[2].parse().expect("offset");
        let n: usize = f[3].parse().expect("count");
        let values = (f[4] == "ok").then(|| {
            bin[off * 4..(off + n) * 4]
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect()
        });
        v.push(PyTensor {
            name: f[0].to_string(),
            ty: f[1].to_string(),
            values,
        });
    }
    v
}

/// Index of the first value whose bits differ (NaN equals NaN), if any.
pub fn first_mismatch(a: &[f32], b: &[f32]) -> Option<usize> {
    a.iter()
        .zip(b)
        .position(|(x, y)| x.to_bits() != y.to_bits() && !(x.is_nan() && y.is_nan()))
}

/// Dequantize with the crate, catching a panicking (unwritten) kernel.
pub fn rust_dequant(ty: GgmlType, data: &[u8]) -> Result<Vec<f32>, String> {
    let data = data.to_vec();
    std::panic::catch_unwind(move || redlite_quant::dequantize_to_vec(ty, &data))
        .map_err(|p| {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            format!("kernel panicked: {msg}")
        })?
        .map_err(|e| e.to_string())
}

/// Compare every tensor of `path` with gguf-py; returns one line per failure.
pub fn compare_gguf(path: &Path) -> (usize, Vec<String>) {
    let file =
        redlite_gguf::GgufFile::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let refs = py_dequant(path);
    let mut fails = Vec::new();
    let mut checked = 0;
    for t in &refs {
        let Some((info, data)) = file.tensor(&t.name) else {
            fails.push(format!("{}: tensor missing in the Rust reader", t.name));
            continue;
        };
        let ty = info.ggml_type;
        if ty.name() != t.ty {
            fails.push(format!("{}: type {} here, {} in gguf-py", t.name, ty, t.ty));
            continue;
        }
        let Some(want) = &t.values else {
            continue;
        };
        match rust_dequant(ty, data) {
            Err(e) => fails.push(format!("{} ({ty}): {e}", t.name)),
            Ok(got) => {
                if got.len() != want.len() {
                    fails.push(format!(
                        "{} ({ty}): {} values here, {} in gguf-py",
                        t.name,
                        got.len(),
                        want.len()
                    ));
                } else if let Some(i) = first_mismatch(&got, want) {
                    let n_bad = got
                        .iter()
                        .zip(want.iter())
                        .filter(|(x, y)| x.to_bits() != y.to_bits() && !(x.is_nan() && y.is_nan()))
                        .count();
                    fails.push(format!(
                        "{} ({ty}): first bad index {i} (block {}): got {:e} ({:#010x}), gguf-py \
                         {:e} ({:#010x}); {n_bad} of {} values differ",
                        t.name,
                        i / ty.block_size(),
                        got[i],
                        got[i].to_bits(),
                        want[i],
                        want[i].to_bits(),
                        got.len()
                    ));
                } else {
                    checked += 1;
                }
            }
        }
    }
    (checked, fails)
}
