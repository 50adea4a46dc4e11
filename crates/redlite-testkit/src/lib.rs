//! Test helpers shared by the workspace's tests (dev-dependency only).
//!
//! * Fixtures are read from `$REDLITE_FIXTURES`, else `<workspace>/../shared/fixtures`.
//! * The Python interpreter used to build independent references (gguf-py,
//!   numpy, jinja2) is `$REDLITE_PYTHON`, else `<workspace>/.venv/bin/python`
//!   (made by `.ci/run`), else `python3`.

use std::collections::HashMap;
use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};

/// The workspace root (this crate lives in `crates/redlite-testkit`).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("workspace root exists")
}

/// The fixtures directory. Panics with a clear message when it is missing:
/// tests that need fixtures must not silently pass without them.
pub fn fixtures_dir() -> PathBuf {
    let dir = match std::env::var_os("REDLITE_FIXTURES") {
        Some(d) => PathBuf::from(d),
        None => workspace_root().join("../shared/fixtures"),
    };
    assert!(
        dir.join("README.md").exists(),
        "fixtures not found at {} (set REDLITE_FIXTURES)",
        dir.display()
    );
    dir
}

pub fn fixture(name: &str) -> PathBuf {
    fixtures_dir().join(name)
}

/// The Python interpreter for reference computations.
pub fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("REDLITE_PYTHON") {
        return PathBuf::from(p);
    }
    let venv = workspace_root().join(".venv/bin/python");
    if venv.exists() {
        return venv;
    }
    PathBuf::from("python3")
}

/// A float32 array read from .npy / .npz, flattened, with its shape.
#[derive(Clone, Debug)]
pub struct Array {
    pub shape: Vec<usize>,
    pub data: Vec<f32>,
}

impl Array {
    /// Row `i` of a 2-D array.
    pub fn row(&self, i: usize) -> &[f32] {
        let w = self.shape[1];
        &self.data[i * w..(i + 1) * w]
    }
}

fn to_array(npy: npyz::NpyFile<impl std::io::Read>) -> Array {
    let shape: Vec<usize> = npy.shape().iter().map(|&d| d as usize).collect();
    let dtype = npy.dtype();
    let descr = dtype
        .descr()
        .trim_matches(|c| c == '\'' || c == '"')
        .to_string();
    let data: Vec<f32> = match descr.as_str() {
        "<f4" => npy.into_vec::<f32>().expect("f32 data"),
        "<f8" => npy
            .into_vec::<f64>()
            .expect("f64 data")
            .into_iter()
            .map(|x| x as f32)
            .collect(),
        "<f2" => npy
            .into_vec::<half_f16::F16>()
            .expect("f16 data")
            .into_iter()
            .map(|x| x.to_f32())
            .collect(),
        "<i8" => npy
            .into_vec::<i64>()
            .expect("i64 data")
            .into_iter()
            .map(|x| x as f32)
            .collect(),
        d => panic!("unsupported npy dtype {d}"),
    };
    Array { shape, data }
}

/// Minimal f16 support for npyz (reads raw 16-bit words).
mod half_f16 {
    #[derive(Clone, Copy)]
    pub struct F16(pub u16);
    impl F16 {
        pub fn to_f32(self) -> f32 {
            let h = self.0 as u32;
            let sign = (h >> 15) << 31;
            let exp = (h >> 10) & 0x1f;
            let mant = h & 0x3ff;
            let bits = if exp == 0 {
                if mant == 0 {
                    sign
                } else {
                    // Subnormal: normalise.
                    let mut e = 127 - 15 + 1;
                    let mut m = mant;
                    while m & 0x400 == 0 {
                        m <<= 1;
                        e -= 1;
                    }
                    sign | ((e as u32) << 23) | ((m & 0x3ff) << 13)
                }
            } else if exp == 31 {
                sign | 0x7f80_0000 | (mant << 13)
            } else {
                sign | ((exp + 127 - 15) << 23) | (mant << 13)
            };
            f32::from_bits(bits)
        }
    }
    impl npyz::Deserialize for F16 {
        type TypeReader = F16Reader;
        fn reader(dtype: &npyz::DType) -> Result<Self::TypeReader, npyz::DTypeError> {
            match dtype {
                npyz::DType::Plain(ts) if ts.to_string() == "<f2" => Ok(F16Reader),
                _ => Err(npyz::DTypeError::custom("expected <f2")),
            }
        }
    }
    pub struct F16Reader;
    impl npyz::TypeRead for F16Reader {
        type Value = F16;
        fn read_one<R: std::io::Read>(&self, mut r: R) -> std::io::Result<F16> {
            let mut b = [0u8; 2];
            r.read_exact(&mut b)?;
            Ok(F16(u16::from_le_bytes(b)))
        }
    }
}

/// Read a .npy file as f32.
pub fn read_npy(path: &Path) -> Array {
    let f = BufReader::new(File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())));
    to_array(npyz::NpyFile::new(f).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
}

/// Read every array of a .npz file as f32, keyed by name (without `.npy`).
pub fn read_npz(path: &Path) -> HashMap<String, Array> {
    let mut npz =
        npyz::npz::NpzArchive::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let names: Vec<String> = npz.array_names().map(|s| s.to_string()).collect();
    let mut out = HashMap::new();
    for n in names {
        let arr = npz
            .by_name(&n)
            .unwrap_or_else(|e| panic!("{}: {n}: {e}", path.display()))
            .unwrap_or_else(|| panic!("{}: {n} missing", path.display()));
        out.insert(n, to_array(arr));
    }
    out
}
