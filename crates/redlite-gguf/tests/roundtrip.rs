//! Writer/reader round trip and rejection of malformed files.

use rand::{Rng, SeedableRng};
use redlite_gguf::*;

fn sample_writer() -> GgufWriter {
    let mut w = GgufWriter::new();
    w.add_str("general.architecture", "qwen3next");
    w.add_u32("qwen3next.block_count", 4);
    w.add_f32("qwen3next.rope.freq_base", 1e7);
    w.add_bool("tokenizer.ggml.add_bos_token", false);
    w.add_kv("k.u8", MetaValue::U8(7));
    w.add_kv("k.i8", MetaValue::I8(-7));
    w.add_kv("k.u16", MetaValue::U16(65535));
    w.add_kv("k.i16", MetaValue::I16(-300));
    w.add_kv("k.i32", MetaValue::I32(-5));
    w.add_kv("k.u64", MetaValue::U64(1 << 40));
    w.add_kv("k.i64", MetaValue::I64(-(1 << 40)));
    w.add_kv("k.f64", MetaValue::F64(0.125));
    w.add_array(
        "tokenizer.ggml.tokens",
        MetaArray::String(vec!["a".into(), "ü€".into(), "".into()]),
    );
    w.add_array("k.f32s", MetaArray::F32(vec![1.0, -2.5]));
    w.add_array("k.bools", MetaArray::Bool(vec![true, false, true]));
    w.add_array(
        "k.nested",
        MetaArray::Array(vec![MetaArray::I32(vec![1, 2]), MetaArray::U8(vec![3])]),
    );
    w
}

#[test]
fn round_trip_metadata_and_tensors() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.gguf");
    let mut rng = rand::rngs::StdRng::seed_from_u64(1);
    let mut w = sample_writer();
    let a: Vec<f32> = (0..96).map(|_| rng.gen()).collect();
    w.add_f32_tensor("a.weight", &[32, 3], &a).unwrap();
    let q: Vec<u8> = (0..2 * 144).map(|_| rng.gen()).collect();
    w.add_tensor("q.weight", &[256, 2], GgmlType::Q4_K, q.clone())
        .unwrap();
    let s: Vec<u8> = (0..17 * 3).map(|_| rng.gen()).collect();
    let s2 = s.clone();
    w.add_tensor_fill(
        "m.weight",
        &[96],
        GgmlType::MXFP4,
        Box::new(move |out| out.write_all(&s2)),
    )
    .unwrap();
    let written_keys = 16;
    w.write_to_path(&path).unwrap();

    let f = GgufFile::open(&path).unwrap();
    assert_eq!(f.version, 3);
    assert_eq!(f.metadata.len(), written_keys);
    assert_eq!(f.architecture().unwrap(), "qwen3next");
    assert_eq!(f.get_u64("qwen3next.block_count").unwrap(), Some(4));
    assert_eq!(f.get_f64("qwen3next.rope.freq_base").unwrap(), Some(1e7));
    assert_eq!(
        f.get_bool("tokenizer.ggml.add_bos_token").unwrap(),
        Some(false)
    );
    assert_eq!(f.get("k.i8"), Some(&MetaValue::I8(-7)));
    assert_eq!(f.get("k.u16"), Some(&MetaValue::U16(65535)));
    assert_eq!(f.get("k.i16"), Some(&MetaValue::I16(-300)));
    assert_eq!(f.get("k.i64"), Some(&MetaValue::I64(-(1 << 40))));
    assert_eq!(f.get("k.f64"), Some(&MetaValue::F64(0.125)));
    assert_eq!(
        f.get_str_array("tokenizer.ggml.tokens").unwrap().unwrap(),
        &["a".to_string(), "ü€".into(), "".into()]
    );
    assert_eq!(
        f.get("k.nested"),
        Some(&MetaValue::Array(MetaArray::Array(vec![
            MetaArray::I32(vec![1, 2]),
            MetaArray::U8(vec![3])
        ])))
    );
    assert!(f.get_str("qwen3next.block_count").is_err());
    let (t, data) = f.tensor("a.weight").unwrap();
    assert_eq!(t.dims, vec![32, 3]);
    let back: Vec<f32> = data
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    assert_eq!(back, a);
    let (t, data) = f.tensor("q.weight").unwrap();
    assert_eq!((t.ggml_type, data), (GgmlType::Q4_K, &q[..]));
    assert_eq!(t.abs_offset % 32, 0);
    let (_, data) = f.tensor("m.weight").unwrap();
    assert_eq!(data, &s[..]);
}

#[test]
fn custom_alignment() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.gguf");
    let mut w = GgufWriter::new();
    w.set_alignment(64).unwrap();
    w.add_f32_tensor("x", &[3], &[1.0, 2.0, 3.0]).unwrap();
    w.add_f32_tensor("y", &[5], &[4.0; 5]).unwrap();
    w.write_to_path(&path).unwrap();
    let f = GgufFile::open(&path).unwrap();
    assert_eq!(f.alignment, 64);
    for t in &f.tensors {
        assert_eq!(t.abs_offset % 64, 0, "{}", t.name);
    }
    assert_eq!(f.tensor("y").unwrap().1.len(), 20);
}

#[test]
fn writer_rejects_bad_tensors() {
    let mut w = GgufWriter::new();
    assert!(w
        .add_tensor("q", &[100], GgmlType::Q4_K, vec![0; 144])
        .is_err());
    assert!(w
        .add_tensor("q", &[256], GgmlType::Q4_K, vec![0; 143])
        .is_err());
    w.add_tensor("q", &[256], GgmlType::Q4_K, vec![0; 144])
        .unwrap();
    assert!(w
        .add_tensor("q", &[256], GgmlType::Q4_K, vec![0; 144])
        .is_err());
    assert!(w.set_alignment(48).is_err());
}

fn image() -> Vec<u8> {
    let mut w = sample_writer();
    w.add_f32_tensor("a.weight", &[8, 2], &[0.5; 16]).unwrap();
    let mut c = std::io::Cursor::new(Vec::new());
    w.write(&mut c).unwrap();
    c.into_inner()
}

fn expect_err(buf: &[u8], needle: &str) {
    match parse_bytes(buf, "bad.gguf") {
        Ok(r) => panic!("expected an error containing {needle:?}, parsed {r:?}"),
        Err(e) => {
            let msg = e.to_string();
            assert!(msg.contains("bad.gguf"), "{msg}");
            assert!(msg.contains(needle), "{msg} (wanted {needle:?})");
        }
    }
}

#[test]
fn rejects_malformed_files() {
    let good = image();
    assert!(parse_bytes(&good, "ok.gguf").is_ok());

    // Bad magic.
    let mut b = good.clone();
    b[0] = b'X';
    expect_err(&b, "bad magic");
    // Unsupported version.
    let mut b = good.clone();
    b[4] = 9;
    expect_err(&b, "version");
    // Every truncation is an error, never a panic.
    for cut in 0..good.len() {
        assert!(
            parse_bytes(&good[..cut], "bad.gguf").is_err(),
            "cut at {cut}"
        );
    }
    // Absurd tensor count.
    let mut b = good.clone();
    b[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
    expect_err(&b, "cannot fit");
    // Absurd metadata count.
    let mut b = good.clone();
    b[16..24].copy_from_slice(&(1u64 << 60).to_le_bytes());
    expect_err(&b, "cannot fit");
    // Absurd key length: first key's length field.
    let mut b = good.clone();
    b[24..32].copy_from_slice(&(1u64 << 62).to_le_bytes());
    expect_err(&b, "past the end");
    // Non-UTF-8 key.
    let mut b = good.clone();
    b[32] = 0xff;
    expect_err(&b, "UTF-8");
}

fn find(hay: &[u8], needle: &[u8]) -> usize {
    hay.windows(needle.len())
        .position(|w| w == needle)
        .expect("needle present")
}

#[test]
fn rejects_bad_tensor_records() {
    let good = image();
    // The tensor record: name, n_dims u32, dims u64 x n, type u32, offset u64.
    let name_at = find(&good, b"a.weight");
    let ndims_at = name_at + 8;
    let dim0_at = ndims_at + 4;
    let type_at = dim0_at + 16;
    let off_at = type_at + 4;

    // An unknown type id is not an error of the file: the tensor is set
    // aside, by name, for whoever uses it.
    let mut b = good.clone();
    b[type_at..type_at + 4].copy_from_slice(&77u32.to_le_bytes());
    assert_eq!(parse_bytes(&b, "new.gguf").expect("parses").1, 1);
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("new.gguf");
    std::fs::write(&path, &b).expect("write");
    let f = redlite_gguf::GgufFile::open(&path).expect("opens");
    assert!(f.tensor_info("a.weight").is_none());
    let u = f.unknown_tensor("a.weight").expect("set aside");
    assert_eq!((u.type_id, u.dims.as_slice()), (77, &[8u64, 2][..]));
    // ... but its offset is still checked.
    b[off_at..off_at + 8].copy_from_slice(&(1u64 << 40).to_le_bytes());
    expect_err(&b, "past the end");
    let mut b = good.clone();
    b[ndims_at..ndims_at + 4].copy_from_slice(&9u32.to_le_bytes());
    expect_err(&b, "tensor a.weight");
    let mut b = good.clone();
    b[dim0_at..dim0_at + 8].copy_from_slice(&(1u64 << 50).to_le_bytes());
    expect_err(&b, "runs past the end");
    let mut b = good.clone();
    b[dim0_at..dim0_at + 8].copy_from_slice(&u64::MAX.to_le_bytes());
    expect_err(&b, "a.weight");
    let mut b = good.clone();
    b[off_at..off_at + 8].copy_from_slice(&4096u64.to_le_bytes());
    expect_err(&b, "runs past the end");
    let mut b = good.clone();
    b[off_at..off_at + 8].copy_from_slice(&3u64.to_le_bytes());
    expect_err(&b, "alignment");
    // A tensor cut short by truncating the data section.
    expect_err(&good[..good.len() - 4], "runs past the end");
}

#[test]
fn split_files_are_merged() {
    let dir = tempfile::tempdir().unwrap();
    let mk = |no: u16, tensors: &[(&str, f32)], meta: bool| {
        let mut w = GgufWriter::new();
        if meta {
            w.add_str("general.architecture", "qwen3next");
        }
        w.add_kv("split.no", MetaValue::U16(no));
        w.add_kv("split.count", MetaValue::U16(3));
        w.add_kv("split.tensors.count", MetaValue::I32(4));
        for (n, v) in tensors {
            w.add_f32_tensor(*n, &[4], &[*v; 4]).unwrap();
        }
        w.write_to_path(dir.path().join(format!("m-{:05}-of-00003.gguf", no + 1)))
            .unwrap();
    };
    mk(0, &[("t0", 0.0)], true);
    mk(1, &[("t1", 1.0), ("t2", 2.0)], false);
    mk(2, &[("t3", 3.0)], false);
    // Opening any shard opens the whole model.
    for i in 1..=3 {
        let f = GgufFile::open(dir.path().join(format!("m-{i:05}-of-00003.gguf"))).unwrap();
        assert_eq!(f.architecture().unwrap(), "qwen3next");
        assert_eq!(f.tensors.len(), 4);
        for (j, name) in ["t0", "t1", "t2", "t3"].iter().enumerate() {
            let (_, d) = f.tensor(name).unwrap();
            assert_eq!(f32::from_le_bytes([d[0], d[1], d[2], d[3]]), j as f32);
        }
        assert_eq!(f.shard_paths().len(), 3);
    }
    // A missing shard is a clear error naming it.
    std::fs::remove_file(dir.path().join("m-00003-of-00003.gguf")).unwrap();
    let e = GgufFile::open(dir.path().join("m-00001-of-00003.gguf"))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("m-00003-of-00003.gguf"), "{e}");
}

#[test]
fn reads_every_fixture() {
    let dir = redlite_testkit::fixtures_dir();
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().and_then(|s| s.to_str()) != Some("gguf") {
            continue;
        }
        let f = GgufFile::open(&p).unwrap();
        assert_eq!(f.architecture().unwrap(), "qwen3next", "{}", p.display());
        assert_eq!(f.get_u64("qwen3next.block_count").unwrap(), Some(4));
        let covered: u64 = f.tensors.iter().map(|t| t.n_bytes).sum();
        assert!(covered < f.file_bytes());
        n += 1;
    }
    assert!(n >= 11, "found {n} fixture GGUFs");
}

/// Every load mode gives the same tensor bytes and metadata; progress ends at
/// the file size and never goes backwards.
#[test]
fn load_options_keep_the_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.gguf");
    let mut rng = rand::rngs::StdRng::seed_from_u64(2);
    let mut w = sample_writer();
    // Larger than one 16 MiB load chunk, so progress reports several steps.
    let a: Vec<f32> = (0..(5 << 20)).map(|_| rng.gen()).collect();
    w.add_f32_tensor("a.weight", &[1024, 5 << 10], &a).unwrap();
    w.add_f32_tensor("b.weight", &[3], &[1.0, 2.0, 3.0])
        .unwrap();
    w.write_to_path(&path).unwrap();
    let plain = GgufFile::open(&path).unwrap();
    let size = std::fs::metadata(&path).unwrap().len();
    for opts in [
        LoadOptions::default(),
        LoadOptions {
            prefetch: true,
            ..Default::default()
        },
        LoadOptions {
            no_mmap: true,
            ..Default::default()
        },
        LoadOptions {
            no_mmap: true,
            mlock: true,
            prefetch: true,
            ..Default::default()
        },
        LoadOptions {
            no_mmap: true,
            no_huge_pages: true,
            ..Default::default()
        },
    ] {
        let mut seen = Vec::new();
        let f = GgufFile::open_with(&path, &opts, &mut |d, t| seen.push((d, t))).unwrap();
        assert_eq!(seen.last(), Some(&(size, size)), "{opts:?}");
        assert!(seen.windows(2).all(|p| p[0].0 <= p[1].0), "{opts:?}");
        if opts.no_mmap || opts.prefetch {
            assert!(seen.len() >= 3, "{opts:?}: {seen:?}");
        }
        assert_eq!(f.metadata.len(), plain.metadata.len());
        for t in &plain.tensors {
            let (_, bytes) = f.tensor(&t.name).unwrap();
            assert!(bytes == plain.tensor_data(t), "{opts:?}: {}", t.name);
        }
    }
}
