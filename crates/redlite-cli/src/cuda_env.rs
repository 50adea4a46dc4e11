//! The CUDA settings the command line reads from the environment into
//! [`redlite_cuda::CudaOptions`] (the CUDA crate reads none itself).
//!
//! Settings:
//!
//! | variable | what |
//! | --- | --- |
//! | `REDLITE_CUDA_CACHE` | the kernel cache directory (else `$XDG_CACHE_HOME/redlite/cuda`, else `~/.cache/redlite/cuda`) |
//! | `REDLITE_NVRTC_DIR` | a directory holding `libnvrtc.so.*` (also looked for in `$CUDA_HOME/lib64` and `/usr/local/cuda/lib64`) |
//! | `REDLITE_CUDA_PROFILE=1` | time every kernel launch (`redlite bench` prints the per-kernel table; decode then runs without its graph) |
//! | `REDLITE_CUDA_FREE=SIZE` | stands in for the GPU's free memory when `--expert-cache auto` places the experts (e.g. `20G`: try a 24 GiB card's placement on a large GPU) |
//!
//! Tuning numbers ([`redlite_cuda::CudaTuning`]; the defaults are the values
//! measured best, `bench/RESULTS.md`): `REDLITE_CUDA_CHUNK` (tokens per
//! pass), `REDLITE_CUDA_DELTA_CHUNK_MIN`, `REDLITE_CUDA_TCX_MIN_IN`,
//! `REDLITE_CUDA_TCX_WAVES`, `REDLITE_CUDA_WIDE_SLOTS`,
//! `REDLITE_CUDA_MQ_FILL`, `REDLITE_CUDA_COMBINE_COLS`,
//! `REDLITE_CUDA_XP_BLOCKS`, `REDLITE_CUDA_XP_LATE_BLOCKS`.
//!
//! Any other `REDLITE_CUDA_*` variable (the A/B switches of earlier
//! versions, since removed with the paths they chose) draws a warning.

use std::ffi::OsString;
use std::path::PathBuf;
use std::str::FromStr;

use anyhow::{anyhow, Result};
use redlite_cuda::gpu::GpuOptions;
use redlite_cuda::{CudaOptions, CudaTuning};

/// Every `REDLITE_CUDA_*` variable read here.
const KNOWN: &[&str] = &[
    "REDLITE_CUDA_CACHE",
    "REDLITE_CUDA_PROFILE",
    "REDLITE_CUDA_FREE",
    "REDLITE_CUDA_CHUNK",
    "REDLITE_CUDA_DELTA_CHUNK_MIN",
    "REDLITE_CUDA_TCX_MIN_IN",
    "REDLITE_CUDA_TCX_WAVES",
    "REDLITE_CUDA_WIDE_SLOTS",
    "REDLITE_CUDA_MQ_FILL",
    "REDLITE_CUDA_COMBINE_COLS",
    "REDLITE_CUDA_XP_BLOCKS",
    "REDLITE_CUDA_XP_LATE_BLOCKS",
];

/// The options from the process environment (the other fields at their
/// defaults), with a warning on stderr for each `REDLITE_CUDA_*` variable
/// that is no longer read.
pub fn from_env() -> Result<CudaOptions> {
    for (k, _) in std::env::vars_os() {
        if let Some(k) = k.to_str() {
            if k.starts_with("REDLITE_CUDA_") && !KNOWN.contains(&k) {
                eprintln!("warning: {k} is not a setting (ignored)");
            }
        }
    }
    from_vars(|name| std::env::var_os(name))
}

/// Whether `REDLITE_CUDA_PROFILE` asks for per-kernel timing.
pub fn profile() -> bool {
    flag(std::env::var_os("REDLITE_CUDA_PROFILE"))
}

fn flag(v: Option<OsString>) -> bool {
    v.is_some_and(|v| !v.is_empty() && v != "0")
}

/// The options from the variables `var` gives.
fn from_vars(var: impl Fn(&str) -> Option<OsString>) -> Result<CudaOptions> {
    let nonempty = |name: &str| var(name).filter(|v| !v.is_empty());
    let kernel_cache = nonempty("REDLITE_CUDA_CACHE")
        .map(PathBuf::from)
        .or_else(|| {
            redlite_cuda::gpu::default_cache_dir(
                nonempty("XDG_CACHE_HOME").map(PathBuf::from),
                nonempty("HOME").map(PathBuf::from),
            )
        });
    let mut nvrtc_dirs: Vec<PathBuf> = nonempty("REDLITE_NVRTC_DIR")
        .map(PathBuf::from)
        .into_iter()
        .collect();
    if let Some(h) = nonempty("CUDA_HOME") {
        nvrtc_dirs.push(PathBuf::from(h).join("lib64"));
    }
    let text = |name: &str| -> Result<Option<String>> {
        match nonempty(name) {
            None => Ok(None),
            Some(v) => v
                .into_string()
                .map(Some)
                .map_err(|v| anyhow!("{name}={v:?}: not UTF-8")),
        }
    };
    let free_bytes = match text("REDLITE_CUDA_FREE")? {
        None => None,
        Some(v) => Some(
            crate::load::parse_size(&v)
                .map_err(|e| anyhow!("REDLITE_CUDA_FREE={v:?}: {e} (e.g. 20G)"))?,
        ),
    };
    fn num<T: FromStr>(name: &str, v: Option<String>) -> Result<Option<T>> {
        v.map(|v| {
            v.trim()
                .parse()
                .map_err(|_| anyhow!("{name}={v:?}: not a whole number"))
        })
        .transpose()
    }
    let d = CudaTuning::default();
    let n = |name: &str| -> Result<Option<usize>> { num(name, text(name)?) };
    let b = |name: &str| -> Result<Option<u32>> { num(name, text(name)?) };
    let tuning = CudaTuning {
        pass_tokens: n("REDLITE_CUDA_CHUNK")?.or(d.pass_tokens),
        delta_chunk_min: n("REDLITE_CUDA_DELTA_CHUNK_MIN")?.unwrap_or(d.delta_chunk_min),
        tcx_min_in: n("REDLITE_CUDA_TCX_MIN_IN")?.unwrap_or(d.tcx_min_in),
        tcx_waves: n("REDLITE_CUDA_TCX_WAVES")?.unwrap_or(d.tcx_waves),
        wide_slots: n("REDLITE_CUDA_WIDE_SLOTS")?.unwrap_or(d.wide_slots),
        mq_fill: n("REDLITE_CUDA_MQ_FILL")?.unwrap_or(d.mq_fill),
        combine_cols: n("REDLITE_CUDA_COMBINE_COLS")?.or(d.combine_cols),
        xp_blocks: b("REDLITE_CUDA_XP_BLOCKS")?.unwrap_or(d.xp_blocks),
        xp_late_blocks: b("REDLITE_CUDA_XP_LATE_BLOCKS")?.unwrap_or(d.xp_late_blocks),
    };
    Ok(CudaOptions {
        gpu: GpuOptions {
            kernel_cache,
            nvrtc_dirs,
            profile: flag(var("REDLITE_CUDA_PROFILE")),
        },
        free_bytes,
        tuning,
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(vars: &[(&str, &str)]) -> Result<CudaOptions> {
        let vars: Vec<(String, OsString)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), OsString::from(v)))
            .collect();
        from_vars(|name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()))
    }

    #[test]
    fn nothing_set_gives_the_defaults() {
        let o = opts(&[]).expect("defaults");
        assert_eq!(o.tuning, CudaTuning::default());
        assert_eq!(o.gpu.kernel_cache, None);
        assert!(o.gpu.nvrtc_dirs.is_empty());
        assert!(!o.gpu.profile);
        assert_eq!(o.free_bytes, None);
        assert_eq!(o.expert_vram_bytes, None);
    }

    #[test]
    fn settings_and_tuning_numbers_are_read() {
        let o = opts(&[
            ("HOME", "/h"),
            ("REDLITE_NVRTC_DIR", "/n"),
            ("CUDA_HOME", "/c"),
            ("REDLITE_CUDA_PROFILE", "1"),
            ("REDLITE_CUDA_FREE", "20G"),
            ("REDLITE_CUDA_CHUNK", "2048"),
            ("REDLITE_CUDA_MQ_FILL", "4"),
            ("REDLITE_CUDA_XP_LATE_BLOCKS", " 16 "),
        ])
        .expect("read");
        assert_eq!(
            o.gpu.kernel_cache,
            Some(PathBuf::from("/h/.cache/redlite/cuda"))
        );
        assert_eq!(
            o.gpu.nvrtc_dirs,
            [PathBuf::from("/n"), PathBuf::from("/c/lib64")]
        );
        assert!(o.gpu.profile);
        assert_eq!(o.free_bytes, Some(20 << 30));
        assert_eq!(o.tuning.pass_tokens, Some(2048));
        assert_eq!(o.tuning.mq_fill, 4);
        assert_eq!(o.tuning.xp_late_blocks, 16);
        assert_eq!(o.tuning.wide_slots, CudaTuning::default().wide_slots);
        // The explicit cache wins; PROFILE=0 is off.
        let o = opts(&[
            ("HOME", "/h"),
            ("REDLITE_CUDA_CACHE", "/k"),
            ("REDLITE_CUDA_PROFILE", "0"),
        ])
        .expect("read");
        assert_eq!(o.gpu.kernel_cache, Some(PathBuf::from("/k")));
        assert!(!o.gpu.profile);
    }

    #[test]
    fn bad_values_name_their_variable() {
        for (k, v) in [
            ("REDLITE_CUDA_MQ_FILL", "x"),
            ("REDLITE_CUDA_XP_BLOCKS", "-1"),
            ("REDLITE_CUDA_FREE", "lots"),
        ] {
            let e = opts(&[(k, v)]).expect_err("refused").to_string();
            assert!(e.contains(k), "{k}: {e}");
        }
    }
}
