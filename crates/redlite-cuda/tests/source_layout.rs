//! The crate's layout rules, checked on its own source: no environment
//! read in the library (its settings come typed from the caller), and every
//! kernel file in `kernels/` part of the compiled source.

use std::path::{Path, PathBuf};

fn files_under(dir: &Path, ext: &str, out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for e in entries {
        let p = e
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .path();
        if p.is_dir() {
            files_under(&p, ext, out);
        } else if p.extension().is_some_and(|x| x == ext) {
            out.push(p);
        }
    }
}

#[test]
fn the_library_reads_no_environment() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    files_under(&src, "rs", &mut files);
    assert!(files.len() >= 5, "found only {files:?}");
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        for (i, line) in text.lines().enumerate() {
            assert!(
                !line.contains("env::var") && !line.contains("env::vars"),
                "{}:{}: an environment read in the library: {line}",
                f.display(),
                i + 1
            );
        }
    }
}

#[test]
fn every_kernel_file_is_compiled_once() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("kernels");
    let mut files = Vec::new();
    files_under(&dir, "cuh", &mut files);
    files_under(&dir, "cu", &mut files);
    let source = redlite_cuda::kernel_source();
    for f in files {
        let name = f.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        let text = std::fs::read_to_string(&f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        let listed = redlite_cuda::FORWARD_PARTS
            .iter()
            .filter(|(n, _)| *n == name)
            .count();
        match name {
            // Assembled by dequant_src.rs ahead of the forward kernels.
            "dequant.cuh" | "q16.cuh" => assert_eq!(listed, 0, "{name}"),
            _ => assert_eq!(listed, 1, "{name}: not in FORWARD_PARTS once"),
        }
        assert!(
            source.contains(text.trim()),
            "{name}: not in kernel_source()"
        );
    }
    // The parts in their order, each exactly as on disk.
    let mut at = 0;
    for (name, text) in redlite_cuda::FORWARD_PARTS {
        let i = source[at..]
            .find(text)
            .unwrap_or_else(|| panic!("{name}: out of order in kernel_source()"));
        at += i + text.len();
    }
}
