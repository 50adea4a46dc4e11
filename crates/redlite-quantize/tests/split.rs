//! Split files: a `--split-max-size` output reads back equal to the unsplit
//! output (same metadata besides `split.*`, same tensors, same bytes), its
//! shards follow gguf-split's size rule and carry its keys, and a split
//! input quantizes to the same file as the unsplit input.

use std::path::{Path, PathBuf};

use redlite_gguf::{GgufFile, MetaValue};
use redlite_quantize::driver::{parse_split_size, split_path, Split};
use redlite_quantize::{quantize_file, FileType, QuantizeOptions};

fn input() -> PathBuf {
    redlite_testkit::fixtures_dir().join("tiny-s-bf16.gguf")
}

fn opts(ftype: FileType, split: Split) -> QuantizeOptions {
    let mut o = QuantizeOptions::new(ftype);
    o.threads = 2;
    o.split = split;
    o
}

fn without_split_keys(f: &GgufFile) -> Vec<(String, MetaValue)> {
    f.metadata
        .iter()
        .filter(|(k, _)| !k.starts_with("split."))
        .cloned()
        .collect()
}

/// The two files hold the same metadata (`split.*` aside) and the same
/// tensors in the same order, byte for byte.
fn assert_same_model(a: &GgufFile, b: &GgufFile) {
    assert_eq!(without_split_keys(a), without_split_keys(b));
    let names = |f: &GgufFile| f.tensors.iter().map(|t| t.name.clone()).collect::<Vec<_>>();
    assert_eq!(names(a), names(b));
    for t in &a.tensors {
        let (ia, da) = a.tensor(&t.name).expect("tensor in a");
        let (ib, db) = b.tensor(&t.name).expect("tensor in b");
        assert_eq!(ia.ggml_type, ib.ggml_type, "{}", t.name);
        assert_eq!(ia.dims, ib.dims, "{}", t.name);
        assert!(da == db, "{}: bytes differ", t.name);
    }
}

fn u64_key(f: &GgufFile, k: &str) -> Option<u64> {
    f.get(k).and_then(|v| v.as_u64())
}

/// A value of one shard's own metadata (only what the split keys use).
#[derive(Debug, PartialEq)]
enum Val {
    U16(u16),
    I32(i32),
    Other,
}

/// One shard on its own (not merged): its metadata keys with the values of
/// the 16- and 32-bit integer ones, and its tensors' names and byte sizes,
/// read with a minimal GGUF v3 parser independent of `redlite-gguf`.
type Shard = (Vec<(String, Val)>, Vec<(String, u64)>);

fn shard_alone(p: &Path) -> Shard {
    let b = std::fs::read(p).expect("shard");
    let mut o = 0usize;
    let mut take = |n: usize| {
        let s = &b[o..o + n];
        o += n;
        s.to_vec()
    };
    let u32_ = |v: Vec<u8>| u32::from_le_bytes(v.try_into().expect("4 bytes"));
    let u64_ = |v: Vec<u8>| u64::from_le_bytes(v.try_into().expect("8 bytes"));
    assert_eq!(take(4), b"GGUF");
    assert_eq!(u32_(take(4)), 3);
    let n_tensors = u64_(take(8));
    let n_kv = u64_(take(8));
    fn skip(take: &mut dyn FnMut(usize) -> Vec<u8>, ty: u32) {
        let size = |ty: u32| match ty {
            0 | 1 | 7 => 1,
            2 | 3 => 2,
            4..=6 => 4,
            10..=12 => 8,
            _ => 0,
        };
        match ty {
            8 => {
                let n = u64::from_le_bytes(take(8).try_into().expect("len"));
                take(n as usize);
            }
            9 => {
                let et = u32::from_le_bytes(take(4).try_into().expect("type"));
                let n = u64::from_le_bytes(take(8).try_into().expect("len"));
                for _ in 0..n {
                    skip(take, et);
                }
            }
            t => {
                take(size(t));
            }
        }
    }
    let mut meta = Vec::new();
    for _ in 0..n_kv {
        let n = u64_(take(8)) as usize;
        let key = String::from_utf8(take(n)).expect("key");
        let ty = u32_(take(4));
        let v = match ty {
            2 => Val::U16(u16::from_le_bytes(take(2).try_into().expect("u16"))),
            5 => Val::I32(i32::from_le_bytes(take(4).try_into().expect("i32"))),
            t => {
                skip(&mut take, t);
                Val::Other
            }
        };
        meta.push((key, v));
    }
    let mut tensors = Vec::new();
    for _ in 0..n_tensors {
        let n = u64_(take(8)) as usize;
        let name = String::from_utf8(take(n)).expect("name");
        let nd = u32_(take(4));
        let dims: Vec<u64> = (0..nd).map(|_| u64_(take(8))).collect();
        let ty = redlite_gguf::GgmlType::from_id(u32_(take(4))).expect("type");
        let _offset = u64_(take(8));
        let bytes = ty.row_bytes(dims[0]).expect("row") * dims[1..].iter().product::<u64>();
        tensors.push((name, bytes));
    }
    (meta, tensors)
}

#[test]
fn split_output_reads_back_equal_to_the_unsplit_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let whole = dir.path().join("whole.gguf");
    let r = quantize_file(
        &input(),
        &whole,
        &opts(FileType::Q4_K_M, Split::None),
        &|_| {},
    )
    .expect("unsplit quantize");
    assert_eq!(r.files, vec![whole.clone()]);
    // A limit that gives several shards.
    let max = r.out_bytes / 3;
    let out = dir.path().join("split.gguf");
    let r2 = quantize_file(
        &input(),
        &out,
        &opts(FileType::Q4_K_M, Split::MaxBytes(max)),
        &|_| {},
    )
    .expect("split quantize");
    let n = r2.files.len();
    assert!(n >= 3, "{n} shards");
    assert!(!out.exists(), "no unsplit file besides the shards");
    for (i, p) in r2.files.iter().enumerate() {
        assert_eq!(p, &split_path(&out, i, n));
        assert!(p
            .to_string_lossy()
            .ends_with(&format!("split-{:05}-of-{n:05}.gguf", i + 1)));
    }
    let a = GgufFile::open(&whole).expect("whole opens");
    let b = GgufFile::open(&r2.files[0]).expect("shards open");
    assert_same_model(&a, &b);
    assert_eq!(b.shard_paths().len(), n);

    // gguf-split's keys and rule: all metadata in the first shard, only the
    // split keys in the others; a shard's padded tensor sizes stay within
    // the limit, and its successor's first tensor would not have fit.
    let mut prev_sum = 0u64;
    for (i, p) in r2.files.iter().enumerate() {
        let (meta, tensors) = shard_alone(p);
        let get = |k: &str| meta.iter().find(|(key, _)| key == k).map(|(_, v)| v);
        assert_eq!(get("split.no"), Some(&Val::U16(i as u16)));
        assert_eq!(get("split.count"), Some(&Val::U16(n as u16)));
        assert_eq!(
            get("split.tensors.count"),
            Some(&Val::I32(a.tensors.len() as i32))
        );
        if i == 0 {
            assert_eq!(meta.len(), a.metadata.len() + 3);
        } else {
            assert_eq!(meta.len(), 3, "shard {i}: only the split keys");
            let first = tensors[0].1.div_ceil(32) * 32;
            assert!(prev_sum + first > max, "shard {i} started early");
        }
        assert!(!tensors.is_empty());
        let sum: u64 = tensors.iter().map(|(_, b)| b.div_ceil(32) * 32).sum();
        assert!(sum <= max || tensors.len() == 1, "shard {i}: {sum} > {max}");
        prev_sum = sum;
    }
    assert_eq!(u64_key(&b, "split.count"), Some(n as u64));
}

#[test]
fn split_input_quantizes_equal_to_the_unsplit_input() {
    let dir = tempfile::tempdir().expect("tempdir");
    // A split copy of the bf16 input (BF16 to BF16 copies the bytes).
    let copy = dir.path().join("in.gguf");
    let in_bytes = std::fs::metadata(input()).expect("input").len();
    let r = quantize_file(
        &input(),
        &copy,
        &opts(FileType::BF16, Split::MaxBytes(in_bytes / 4)),
        &|_| {},
    )
    .expect("split copy");
    let n = r.files.len();
    assert!(n >= 4, "{n} shards");
    let orig = GgufFile::open(input()).expect("input opens");
    let split_in = GgufFile::open(&r.files[0]).expect("split input opens");
    for t in &orig.tensors {
        let (_, x) = orig.tensor(&t.name).expect("orig tensor");
        let (_, y) = split_in.tensor(&t.name).expect("split tensor");
        assert!(x == y, "{}: copy differs", t.name);
    }

    let whole = dir.path().join("whole.gguf");
    quantize_file(
        &input(),
        &whole,
        &opts(FileType::Q4_K_M, Split::None),
        &|_| {},
    )
    .expect("from the unsplit input");
    let from_split = dir.path().join("from-split.gguf");
    // Any shard names the split model.
    quantize_file(
        &r.files[n - 1],
        &from_split,
        &opts(FileType::Q4_K_M, Split::None),
        &|_| {},
    )
    .expect("from the split input");
    let a = std::fs::read(&whole).expect("whole");
    let b = std::fs::read(&from_split).expect("from split");
    assert!(a == b, "the outputs differ");

    // --keep-split: the output keeps the input's shards, tensor for tensor.
    let kept = dir.path().join("kept.gguf");
    let rk = quantize_file(
        &r.files[0],
        &kept,
        &opts(FileType::Q4_K_M, Split::KeepInput),
        &|_| {},
    )
    .expect("keep split");
    assert_eq!(rk.files.len(), n);
    for (pi, po) in r.files.iter().zip(&rk.files) {
        let ti: Vec<String> = shard_alone(pi).1.into_iter().map(|t| t.0).collect();
        let to: Vec<String> = shard_alone(po).1.into_iter().map(|t| t.0).collect();
        assert_eq!(ti, to);
    }
    let ka = GgufFile::open(&rk.files[0]).expect("kept opens");
    let wa = GgufFile::open(&whole).expect("whole opens");
    assert_same_model(&wa, &ka);
}

#[test]
fn split_sizes_parse_as_gguf_split_does() {
    assert_eq!(parse_split_size("40G"), Ok(40_000_000_000));
    assert_eq!(parse_split_size("500M"), Ok(500_000_000));
    assert!(parse_split_size("0M").is_err());
    assert!(parse_split_size("12").is_err());
    assert!(parse_split_size("xG").is_err());
    assert!(parse_split_size("1K").is_err());
}

#[test]
fn a_first_tensor_larger_than_the_limit_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("tiny.gguf");
    let err = quantize_file(
        &input(),
        &out,
        &opts(FileType::Q8_0, Split::MaxBytes(1)),
        &|_| {},
    )
    .expect_err("a 1-byte limit cannot hold a tensor");
    assert!(err.to_string().contains("no tensors"), "{err}");
    assert!(!split_path(&out, 0, 1).exists());
}
