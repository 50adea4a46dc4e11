//! Memory-mapped GGUF reader (format versions 2 and 3) with split-file support.
//!
//! Every count, length and offset read from the file is checked against the
//! bytes that remain before it is used: nothing is allocated from an
//! untrusted count, and a bad file is an error naming the file, the key or
//! tensor, and the byte offset.

use std::collections::HashMap;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use memmap2::{Mmap, MmapMut};

use crate::error::{GgufError, Result};
use crate::types::GgmlType;
use crate::value::{MetaArray, MetaValue, ValueType};

pub const GGUF_MAGIC: [u8; 4] = *b"GGUF";
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// Deepest nesting of arrays accepted (the format allows arrays of arrays; no
/// real file nests more than once).
const MAX_ARRAY_DEPTH: u32 = 4;
/// ggml supports at most 4 dimensions.
pub const MAX_DIMS: u32 = 4;

/// One tensor of the (possibly split) model.
#[derive(Clone, Debug)]
pub struct TensorInfo {
    pub name: String,
    /// Dimensions in ggml order: `dims[0]` is the contiguous one.
    pub dims: Vec<u64>,
    pub ggml_type: GgmlType,
    /// Offset relative to the data section of its shard, as stored.
    pub rel_offset: u64,
    /// Absolute byte offset in its shard file.
    pub abs_offset: u64,
    /// Size of the data in bytes.
    pub n_bytes: u64,
    /// Index of the shard (0 for a single file).
    pub shard: usize,
    /// Byte offset of this tensor's info record in the shard (for errors).
    pub info_offset: u64,
}

impl TensorInfo {
    pub fn n_elements(&self) -> u64 {
        self.dims.iter().product()
    }
    /// Rows of `dims[0]` elements.
    pub fn n_rows(&self) -> u64 {
        self.dims.iter().skip(1).product()
    }
    pub fn row_bytes(&self) -> u64 {
        // Checked when the tensor was read.
        self.ggml_type.row_bytes(self.dims[0]).unwrap_or(0)
    }
    pub fn ne(&self, i: usize) -> u64 {
        self.dims.get(i).copied().unwrap_or(1)
    }
}

/// A tensor whose ggml type id this crate does not know (a type newer than
/// this build, or a retired id). Its size cannot be computed, so its bytes are
/// not mapped; opening the file still succeeds, and only code that asks for
/// the tensor sees the problem (see [`GgufFile::unknown_tensor`]).
#[derive(Clone, Debug)]
pub struct UnknownTensor {
    pub name: String,
    pub dims: Vec<u64>,
    /// The type id as stored.
    pub type_id: u32,
    /// Offset relative to the data section of its shard, as stored.
    pub rel_offset: u64,
    pub shard: usize,
    /// Byte offset of this tensor's info record in the shard (for errors).
    pub info_offset: u64,
}

struct Shard {
    path: PathBuf,
    map: Mmap,
}

/// How [`GgufFile::open_with`] brings the tensor data into memory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoadOptions {
    /// Read every shard into anonymous memory instead of mapping the file
    /// (llama.cpp's `--no-mmap`): the file's page cache is not shared, and
    /// nothing is read from disk after the load.
    pub no_mmap: bool,
    /// With a mapping: read the whole file in at open time
    /// (`madvise(MADV_WILLNEED)`, then every page touched in order) so the
    /// first forward pass does not pay the page faults.
    pub prefetch: bool,
    /// Lock the data in RAM (`mlock`), so it is never paged out. A failure
    /// (typically `RLIMIT_MEMLOCK`) is a warning in
    /// [`GgufFile::load_warnings`], not an error.
    pub mlock: bool,
    /// With `no_mmap`: leave the memory on the default pages. Otherwise it
    /// asks for transparent huge pages (`madvise(MADV_HUGEPAGE)`), so
    /// streaming the weights walks a page table entry per 2 MiB instead of
    /// per 4 KiB.
    pub no_huge_pages: bool,
}

/// Bytes per progress report and per read while loading.
const LOAD_CHUNK: usize = 16 << 20;

/// An open GGUF model: metadata of the first shard, tensors of all shards.
pub struct GgufFile {
    path: PathBuf,
    pub version: u32,
    pub alignment: u64,
    /// Metadata in file order.
    pub metadata: Vec<(String, MetaValue)>,
    index: HashMap<String, usize>,
    pub tensors: Vec<TensorInfo>,
    tensor_index: HashMap<String, usize>,
    /// Tensors of unknown type ids (not in `tensors`).
    pub unknown_tensors: Vec<UnknownTensor>,
    /// What [`GgufFile::open_with`] could not do as asked (e.g. `mlock`
    /// refused), one line each.
    pub load_warnings: Vec<String>,
    shards: Vec<Shard>,
}

/// Parse results of one shard.
struct Parsed {
    version: u32,
    alignment: u64,
    metadata: Vec<(String, MetaValue)>,
    tensors: Vec<TensorInfo>,
    unknown: Vec<UnknownTensor>,
}

struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
    path: &'a Path,
}

impl<'a> Cursor<'a> {
    fn err(&self, offset: usize, msg: impl Into<String>) -> GgufError {
        GgufError::Format {
            path: self.path.to_path_buf(),
            offset: offset as u64,
            msg: msg.into(),
        }
    }

    fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(self.err(
                self.pos,
                format!(
                    "file truncated: {what} needs {n} bytes, {} left (file is {} bytes)",
                    self.remaining(),
                    self.buf.len()
                ),
            ));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N]> {
        let s = self.take(N, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    fn u8(&mut self, what: &str) -> Result<u8> {
        Ok(self.array::<1>(what)?[0])
    }
    fn u16(&mut self, what: &str) -> Result<u16> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }
    fn u32(&mut self, what: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }
    fn u64(&mut self, what: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    fn string(&mut self, what: &str) -> Result<String> {
        let at = self.pos;
        let len = self.u64(what)?;
        if len > self.remaining() as u64 {
            return Err(self.err(
                at,
                format!(
                    "{what}: string length {len} runs past the end of the file ({} bytes left)",
                    self.remaining()
                ),
            ));
        }
        let bytes = self.take(len as usize, what)?;
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(s.to_owned()),
            Err(e) => Err(self.err(
                at + 8 + e.valid_up_to(),
                format!("{what}: string is not valid UTF-8"),
            )),
        }
    }

    /// Check that `count` elements of at least `min_size` bytes each can fit in
    /// what is left, so a hostile count cannot drive an allocation.
    fn check_count(&self, at: usize, count: u64, min_size: usize, what: &str) -> Result<usize> {
        let fits = (self.remaining() / min_size.max(1)) as u64;
        if count > fits {
            return Err(self.err(
                at,
                format!(
                    "{what}: count {count} cannot fit in the {} bytes left",
                    self.remaining()
                ),
            ));
        }
        Ok(count as usize)
    }

    fn value(&mut self, ty: ValueType, what: &str, depth: u32) -> Result<MetaValue> {
        Ok(match ty {
            ValueType::U8 => MetaValue::U8(self.u8(what)?),
            ValueType::I8 => MetaValue::I8(self.u8(what)? as i8),
            ValueType::U16 => MetaValue::U16(self.u16(what)?),
            ValueType::I16 => MetaValue::I16(self.u16(what)? as i16),
            ValueType::U32 => MetaValue::U32(self.u32(what)?),
            ValueType::I32 => MetaValue::I32(self.u32(what)? as i32),
            ValueType::F32 => MetaValue::F32(f32::from_bits(self.u32(what)?)),
            ValueType::U64 => MetaValue::U64(self.u64(what)?),
            ValueType::I64 => MetaValue::I64(self.u64(what)? as i64),
            ValueType::F64 => MetaValue::F64(f64::from_bits(self.u64(what)?)),
            ValueType::Bool => {
                let at = self.pos;
                match self.u8(what)? {
                    0 => MetaValue::Bool(false),
                    1 => MetaValue::Bool(true),
                    b => return Err(self.err(at, format!("{what}: bool byte {b} is not 0 or 1"))),
                }
            }
            ValueType::String => MetaValue::String(self.string(what)?),
            ValueType::Array => MetaValue::Array(self.array_value(what, depth)?),
        })
    }

    fn array_value(&mut self, what: &str, depth: u32) -> Result<MetaArray> {
        let at = self.pos;
        if depth >= MAX_ARRAY_DEPTH {
            return Err(self.err(
                at,
                format!("{what}: arrays nested deeper than {MAX_ARRAY_DEPTH}"),
            ));
        }
        let tid = self.u32(what)?;
        let ty = ValueType::from_id(tid)
            .ok_or_else(|| self.err(at, format!("{what}: unknown array element type id {tid}")))?;
        let count_at = self.pos;
        let count = self.u64(what)?;
        // Strings and arrays take at least 8 bytes (their length / header).
        let min = match ty {
            ValueType::String => 8,
            ValueType::Array => 12,
            t => t.fixed_size().unwrap_or(1),
        };
        let n = self.check_count(count_at, count, min, what)?;
        macro_rules! fixed {
            ($variant:ident, $t:ty, $conv:expr) => {{
                let sz = std::mem::size_of::<$t>();
                let bytes = self.take(n * sz, what)?;
                MetaArray::$variant(bytes.chunks_exact(sz).map($conv).collect())
            }};
        }
        Ok(match ty {
            ValueType::U8 => MetaArray::U8(self.take(n, what)?.to_vec()),
            ValueType::I8 => fixed!(I8, i8, |c: &[u8]| c[0] as i8),
            ValueType::U16 => fixed!(U16, u16, |c: &[u8]| u16::from_le_bytes([c[0], c[1]])),
            ValueType::I16 => fixed!(I16, i16, |c: &[u8]| i16::from_le_bytes([c[0], c[1]])),
            ValueType::U32 => fixed!(U32, u32, |c: &[u8]| u32::from_le_bytes([
                c[0], c[1], c[2], c[3]
            ])),
            ValueType::I32 => fixed!(I32, i32, |c: &[u8]| i32::from_le_bytes([
                c[0], c[1], c[2], c[3]
            ])),
            ValueType::F32 => fixed!(F32, f32, |c: &[u8]| f32::from_le_bytes([
                c[0], c[1], c[2], c[3]
            ])),
            ValueType::U64 => fixed!(U64, u64, |c: &[u8]| u64::from_le_bytes([
                c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]
            ])),
            ValueType::I64 => fixed!(I64, i64, |c: &[u8]| i64::from_le_bytes([
                c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]
            ])),
            ValueType::F64 => fixed!(F64, f64, |c: &[u8]| f64::from_le_bytes([
                c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]
            ])),
            ValueType::Bool => {
                let start = self.pos;
                let bytes = self.take(n, what)?;
                let mut v = Vec::with_capacity(n);
                for (i, &b) in bytes.iter().enumerate() {
                    match b {
                        0 => v.push(false),
                        1 => v.push(true),
                        _ => {
                            return Err(self.err(
                                start + i,
                                format!("{what}: bool byte {b} at element {i} is not 0 or 1"),
                            ))
                        }
                    }
                }
                MetaArray::Bool(v)
            }
            ValueType::String => {
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    v.push(self.string(what)?);
                }
                MetaArray::String(v)
            }
            ValueType::Array => {
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    v.push(self.array_value(what, depth + 1)?);
                }
                MetaArray::Array(v)
            }
        })
    }
}

/// Parse the header, metadata and tensor table of one GGUF file held in `buf`.
fn parse(buf: &[u8], path: &Path, shard: usize) -> Result<Parsed> {
    let mut c = Cursor { buf, pos: 0, path };
    let magic = c.array::<4>("magic")?;
    if magic != GGUF_MAGIC {
        return Err(c.err(
            0,
            format!(
                "bad magic {:?}: not a GGUF file (expected \"GGUF\")",
                String::from_utf8_lossy(&magic)
            ),
        ));
    }
    let version = c.u32("version")?;
    if version == 1 {
        return Err(c.err(4, "GGUF version 1 is not supported (re-convert the model)"));
    }
    if !(2..=3).contains(&version) {
        return Err(c.err(
            4,
            format!("unsupported GGUF version {version} (2 and 3 are)"),
        ));
    }
    let at = c.pos;
    let n_tensors = c.u64("tensor count")?;
    let n_kv_at = c.pos;
    let n_kv = c.u64("metadata count")?;
    // A key-value pair takes at least 8 (key len) + 4 (type) + 1 bytes.
    let n_kv = c.check_count(n_kv_at, n_kv, 13, "metadata count")?;
    let mut metadata = Vec::with_capacity(n_kv);
    let mut seen = HashMap::with_capacity(n_kv);
    for i in 0..n_kv {
        let key_at = c.pos;
        let key = c.string(&format!("metadata key #{i}"))?;
        let ty_at = c.pos;
        let tid = c.u32("metadata value type")?;
        let ty = ValueType::from_id(tid).ok_or_else(|| {
            c.err(
                ty_at,
                format!("metadata key {key}: unknown value type id {tid}"),
            )
        })?;
        let value = c.value(ty, &format!("metadata key {key}"), 0)?;
        if seen.insert(key.clone(), ()).is_some() {
            return Err(c.err(key_at, format!("duplicate metadata key {key}")));
        }
        metadata.push((key, value));
    }
    let alignment = match metadata.iter().find(|(k, _)| k == "general.alignment") {
        None => DEFAULT_ALIGNMENT,
        Some((_, v)) => {
            let a = v.as_u64().unwrap_or(0);
            if a == 0 || !a.is_power_of_two() || a > 1 << 20 {
                return Err(GgufError::Key {
                    path: path.to_path_buf(),
                    key: "general.alignment".into(),
                    msg: format!("alignment {v} is not a power of two between 1 and 1 MiB"),
                });
            }
            a
        }
    };
    // A tensor info takes at least 8 (name) + 4 (n_dims) + 8 (dim) + 4 (type) + 8 (offset).
    let n_tensors = c.check_count(at, n_tensors, 32, "tensor count")?;
    let mut tensors: Vec<TensorInfo> = Vec::with_capacity(n_tensors);
    let mut unknown: Vec<UnknownTensor> = Vec::new();
    for i in 0..n_tensors {
        let info_offset = c.pos as u64;
        let name = c.string(&format!("tensor #{i} name"))?;
        let terr = |msg: String| GgufError::Tensor {
            path: path.to_path_buf(),
            tensor: name.clone(),
            offset: info_offset,
            msg,
        };
        let n_dims = c.u32("tensor dimension count")?;
        if n_dims == 0 || n_dims > MAX_DIMS {
            return Err(terr(format!(
                "{n_dims} dimensions (1 to {MAX_DIMS} are allowed)"
            )));
        }
        let mut dims = Vec::with_capacity(n_dims as usize);
        for _ in 0..n_dims {
            dims.push(c.u64("tensor dimension")?);
        }
        let tid = c.u32("tensor type")?;
        let rel_offset = c.u64("tensor offset")?;
        if dims.iter().any(|&d| d == 0 || d > i64::MAX as u64) {
            return Err(terr(format!("invalid dimensions {dims:?}")));
        }
        if !rel_offset.is_multiple_of(alignment) {
            return Err(terr(format!(
                "data offset {rel_offset} is not a multiple of the alignment {alignment}"
            )));
        }
        let Some(ggml_type) = GgmlType::from_id(tid) else {
            // Deferred: an error only for whoever uses this tensor.
            unknown.push(UnknownTensor {
                name,
                dims,
                type_id: tid,
                rel_offset,
                shard,
                info_offset,
            });
            continue;
        };
        let row_bytes = ggml_type.row_bytes(dims[0]).ok_or_else(|| {
            terr(format!(
                "first dimension {} is not a multiple of the {} block size {}",
                dims[0],
                ggml_type,
                ggml_type.block_size()
            ))
        })?;
        let n_bytes = dims[1..]
            .iter()
            .try_fold(row_bytes, |acc, &d| acc.checked_mul(d))
            .ok_or_else(|| terr(format!("size of dimensions {dims:?} overflows")))?;
        tensors.push(TensorInfo {
            name,
            dims,
            ggml_type,
            rel_offset,
            abs_offset: 0,
            n_bytes,
            shard,
            info_offset,
        });
    }
    let data_start = (c.pos as u64).div_ceil(alignment) * alignment;
    let file_len = buf.len() as u64;
    let mut names = HashMap::with_capacity(tensors.len() + unknown.len());
    for u in &unknown {
        if names.insert(u.name.clone(), ()).is_some() {
            return Err(GgufError::Tensor {
                path: path.to_path_buf(),
                tensor: u.name.clone(),
                offset: u.info_offset,
                msg: "duplicate tensor name".into(),
            });
        }
        if data_start
            .checked_add(u.rel_offset)
            .is_none_or(|s| s > file_len)
        {
            return Err(GgufError::Tensor {
                path: path.to_path_buf(),
                tensor: u.name.clone(),
                offset: u.info_offset,
                msg: format!(
                    "data offset {} + {} lies past the end of the file ({} bytes)",
                    data_start, u.rel_offset, file_len
                ),
            });
        }
    }
    for t in &mut tensors {
        if names.insert(t.name.clone(), ()).is_some() {
            return Err(GgufError::Tensor {
                path: path.to_path_buf(),
                tensor: t.name.clone(),
                offset: t.info_offset,
                msg: "duplicate tensor name".into(),
            });
        }
        let start = data_start.checked_add(t.rel_offset);
        let end = start.and_then(|s| s.checked_add(t.n_bytes));
        match (start, end) {
            (Some(s), Some(e)) if e <= file_len => t.abs_offset = s,
            _ => {
                return Err(GgufError::Tensor {
                    path: path.to_path_buf(),
                    tensor: t.name.clone(),
                    offset: t.info_offset,
                    msg: format!(
                        "data [{} + {}, {} bytes) runs past the end of the file ({} bytes)",
                        data_start, t.rel_offset, t.n_bytes, file_len
                    ),
                })
            }
        }
    }
    Ok(Parsed {
        version,
        alignment,
        metadata,
        tensors,
        unknown,
    })
}

fn map_file(path: &Path) -> Result<Mmap> {
    let io = |err| GgufError::Io {
        path: path.to_path_buf(),
        err,
    };
    let file = File::open(path).map_err(io)?;
    // SAFETY: the map is read-only and private to this process. Another
    // process truncating the file while it is mapped would be undefined
    // behaviour in Rust terms; like every mmap-based model loader we accept
    // that model files are not modified while being served.
    let map = unsafe { Mmap::map(&file) }.map_err(io)?;
    Ok(map)
}

/// If `path` names a split shard (`...-00001-of-00003.gguf`), the paths of
/// all shards in order.
pub fn split_paths(path: &Path) -> Option<Vec<PathBuf>> {
    let name = path.file_name()?.to_str()?;
    let stem = name.strip_suffix(".gguf")?;
    // "<prefix>-NNNNN-of-MMMMM"
    let (rest, total) = stem.rsplit_once("-of-")?;
    let (prefix, _no) = rest.rsplit_once('-')?;
    if total.len() != 5 || !total.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: usize = total.parse().ok()?;
    if n == 0 {
        return None;
    }
    let dir = path.parent().unwrap_or(Path::new(""));
    Some(
        (1..=n)
            .map(|i| dir.join(format!("{prefix}-{i:05}-of-{n:05}.gguf")))
            .collect(),
    )
}

impl GgufFile {
    /// Open a GGUF file. If it is one shard of a split model (by its
    /// `split.count` key), every shard is opened and their tensors merged.
    pub fn open(path: impl AsRef<Path>) -> Result<GgufFile> {
        let path = path.as_ref();
        let map = map_file(path)?;
        let parsed = parse(&map, path, 0)?;
        let split_count = parsed
            .metadata
            .iter()
            .find(|(k, _)| k == "split.count")
            .and_then(|(_, v)| v.as_u64())
            .unwrap_or(1);
        if split_count <= 1 {
            return Ok(Self::assemble(
                path,
                parsed,
                vec![Shard {
                    path: path.to_path_buf(),
                    map,
                }],
                Vec::new(),
                Vec::new(),
            ));
        }
        let paths = split_paths(path).ok_or_else(|| GgufError::Split {
            path: path.to_path_buf(),
            msg: format!(
                "split.count is {split_count} but the file name does not end in -NNNNN-of-NNNNN.gguf"
            ),
        })?;
        if paths.len() as u64 != split_count {
            return Err(GgufError::Split {
                path: path.to_path_buf(),
                msg: format!(
                    "split.count is {split_count} but the file name says {} shards",
                    paths.len()
                ),
            });
        }
        // Metadata always comes from the first shard.
        let first_path = paths[0].clone();
        let (first_parsed, first_map) = if first_path == path {
            (parsed, map)
        } else {
            let m = map_file(&first_path)?;
            let p = parse(&m, &first_path, 0)?;
            (p, m)
        };
        let mut shards = vec![Shard {
            path: first_path.clone(),
            map: first_map,
        }];
        let mut extra = Vec::new();
        let mut extra_unknown = Vec::new();
        for (i, p) in paths.iter().enumerate().skip(1) {
            let m = map_file(p)?;
            let parsed = parse(&m, p, i)?;
            let no = parsed
                .metadata
                .iter()
                .find(|(k, _)| k == "split.no")
                .and_then(|(_, v)| v.as_u64());
            if no != Some(i as u64) {
                return Err(GgufError::Split {
                    path: p.clone(),
                    msg: format!("split.no is {no:?}, expected {i}"),
                });
            }
            extra.extend(parsed.tensors);
            extra_unknown.extend(parsed.unknown);
            shards.push(Shard {
                path: p.clone(),
                map: m,
            });
        }
        let f = Self::assemble(&first_path, first_parsed, shards, extra, extra_unknown);
        let n_all = f.tensors.len() + f.unknown_tensors.len();
        if let Some(expected) = f.get("split.tensors.count").and_then(|v| v.as_u64()) {
            if expected != n_all as u64 {
                return Err(GgufError::Split {
                    path: first_path,
                    msg: format!(
                        "split.tensors.count is {expected} but the shards hold {n_all} tensors"
                    ),
                });
            }
        }
        // Names must be unique across shards too.
        let mut all_names: std::collections::HashSet<&str> =
            f.tensors.iter().map(|t| t.name.as_str()).collect();
        all_names.extend(f.unknown_tensors.iter().map(|u| u.name.as_str()));
        if f.tensor_index.len() != f.tensors.len() || all_names.len() != n_all {
            return Err(GgufError::Split {
                path: f.path.clone(),
                msg: "a tensor name appears in more than one shard".into(),
            });
        }
        Ok(f)
    }

    fn assemble(
        path: &Path,
        parsed: Parsed,
        shards: Vec<Shard>,
        extra: Vec<TensorInfo>,
        extra_unknown: Vec<UnknownTensor>,
    ) -> GgufFile {
        let mut tensors = parsed.tensors;
        tensors.extend(extra);
        let mut unknown_tensors = parsed.unknown;
        unknown_tensors.extend(extra_unknown);
        let index = parsed
            .metadata
            .iter()
            .enumerate()
            .map(|(i, (k, _))| (k.clone(), i))
            .collect();
        let tensor_index = tensors
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.clone(), i))
            .collect();
        GgufFile {
            path: path.to_path_buf(),
            version: parsed.version,
            alignment: parsed.alignment,
            metadata: parsed.metadata,
            index,
            tensors,
            tensor_index,
            unknown_tensors,
            load_warnings: Vec::new(),
            shards,
        }
    }

    /// [`GgufFile::open`], then bring the data in as `opts` says, calling
    /// `progress(done, total)` with bytes as it goes.
    pub fn open_with(
        path: impl AsRef<Path>,
        opts: &LoadOptions,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<GgufFile> {
        let mut f = Self::open(path)?;
        f.bring_in(opts, progress)?;
        Ok(f)
    }

    /// [`GgufFile::open`] with a mapping, bringing in at open time only the
    /// tensors `keep` accepts (`opts.prefetch`: their pages are touched in
    /// file order; the others stay on disk until something reads them). Used
    /// by expert streaming, where the routed experts are read from the file on
    /// demand and must not be paged in at load. `opts.no_mmap` (which reads
    /// the whole file) is refused; `opts.mlock` is not applied (a line in
    /// `load_warnings`), since locking the mapping would page every tensor in.
    pub fn open_with_only(
        path: impl AsRef<Path>,
        opts: &LoadOptions,
        keep: &dyn Fn(&TensorInfo) -> bool,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<GgufFile> {
        let path = path.as_ref();
        if opts.no_mmap {
            return Err(GgufError::Io {
                path: path.to_path_buf(),
                err: std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "reading the whole file into memory (no_mmap) cannot be combined with \
                     reading only some tensors in",
                ),
            });
        }
        let mut f = Self::open(path)?;
        // Byte ranges to bring in, per shard, sorted and merged.
        let mut ranges: Vec<Vec<(usize, usize)>> = vec![Vec::new(); f.shards.len()];
        for t in f.tensors.iter().filter(|t| keep(t)) {
            ranges[t.shard].push((t.abs_offset as usize, (t.abs_offset + t.n_bytes) as usize));
        }
        for r in &mut ranges {
            r.sort_unstable();
            let mut merged: Vec<(usize, usize)> = Vec::with_capacity(r.len());
            for &(a, b) in r.iter() {
                match merged.last_mut() {
                    Some(last) if a <= last.1 => last.1 = last.1.max(b),
                    _ => merged.push((a, b)),
                }
            }
            *r = merged;
        }
        let total: u64 = ranges.iter().flatten().map(|&(a, b)| (b - a) as u64).sum();
        let mut done = 0u64;
        progress(0, total);
        if opts.prefetch {
            for (shard, rs) in f.shards.iter().zip(&ranges) {
                let mut acc = 0u8;
                for &(a, b) in rs {
                    // Bounds were validated against this shard at open time.
                    let Some(bytes) = shard.map.get(a..b) else {
                        continue;
                    };
                    for chunk in bytes.chunks(LOAD_CHUNK) {
                        for i in (0..chunk.len()).step_by(4096) {
                            acc ^= std::hint::black_box(chunk[i]);
                        }
                        done += chunk.len() as u64;
                        progress(done, total);
                    }
                }
                std::hint::black_box(acc);
            }
        }
        if opts.mlock {
            f.load_warnings.push(format!(
                "{}: mlock is not applied when only some tensors are brought in (expert \
                 streaming): locking the mapping would read every tensor in",
                f.path.display()
            ));
        }
        progress(total, total);
        Ok(f)
    }

    fn bring_in(&mut self, opts: &LoadOptions, progress: &mut dyn FnMut(u64, u64)) -> Result<()> {
        let total = self.file_bytes();
        let mut done = 0u64;
        progress(0, total);
        for shard in &mut self.shards {
            let io = |err| GgufError::Io {
                path: shard.path.clone(),
                err,
            };
            if opts.no_mmap {
                // Read the file into page-aligned anonymous memory; the parse
                // already validated offsets against this same length.
                let len = shard.map.len();
                let mut mem = MmapMut::map_anon(len.max(1)).map_err(io)?;
                // Ask for 2 MiB pages (where the kernel's transparent huge
                // pages allow them): streaming the weights then walks a
                // page table entry per 2 MiB instead of per 4 KiB.
                #[cfg(target_os = "linux")]
                if !opts.no_huge_pages {
                    if let Err(e) = mem.advise(memmap2::Advice::HugePage) {
                        self.load_warnings.push(format!(
                            "{}: madvise(HUGEPAGE) failed: {e}",
                            shard.path.display()
                        ));
                    }
                }
                let mut file = File::open(&shard.path).map_err(io)?;
                for chunk in mem[..len].chunks_mut(LOAD_CHUNK) {
                    file.read_exact(chunk).map_err(io)?;
                    done += chunk.len() as u64;
                    progress(done, total);
                }
                shard.map = mem.make_read_only().map_err(io)?;
            } else if opts.prefetch {
                #[cfg(unix)]
                if let Err(e) = shard.map.advise(memmap2::Advice::WillNeed) {
                    self.load_warnings.push(format!(
                        "{}: madvise(WILLNEED) failed: {e}",
                        shard.path.display()
                    ));
                }
                let mut acc = 0u8;
                for chunk in shard.map.chunks(LOAD_CHUNK) {
                    // One byte per 4 KiB page faults every page in, in order.
                    for i in (0..chunk.len()).step_by(4096) {
                        acc ^= std::hint::black_box(chunk[i]);
                    }
                    done += chunk.len() as u64;
                    progress(done, total);
                }
                std::hint::black_box(acc);
            }
            if opts.mlock {
                if let Err(e) = shard.map.lock() {
                    self.load_warnings.push(format!(
                        "{}: mlock of {:.2} GiB failed ({e}); the weights may be paged out \
                         (raise the limit with `ulimit -l` or run without --mlock)",
                        shard.path.display(),
                        shard.map.len() as f64 / (1u64 << 30) as f64
                    ));
                }
            }
        }
        progress(total, total);
        Ok(())
    }

    /// The tensor `name` if its type id is unknown to this build (it is then
    /// absent from `tensors`): callers that need it report it by name and id.
    pub fn unknown_tensor(&self, name: &str) -> Option<&UnknownTensor> {
        self.unknown_tensors.iter().find(|u| u.name == name)
    }

    /// Path of the file (the first shard for split models).
    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn shard_paths(&self) -> Vec<&Path> {
        self.shards.iter().map(|s| s.path.as_path()).collect()
    }

    /// Total bytes of all shards.
    pub fn file_bytes(&self) -> u64 {
        self.shards.iter().map(|s| s.map.len() as u64).sum()
    }

    pub fn get(&self, key: &str) -> Option<&MetaValue> {
        self.index.get(key).map(|&i| &self.metadata[i].1)
    }

    fn key_err(&self, key: &str, msg: impl Into<String>) -> GgufError {
        GgufError::Key {
            path: self.path.clone(),
            key: key.to_string(),
            msg: msg.into(),
        }
    }

    fn required(&self, key: &str) -> Result<&MetaValue> {
        self.get(key)
            .ok_or_else(|| self.key_err(key, "missing (required)"))
    }

    pub fn get_str(&self, key: &str) -> Result<Option<&str>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v.as_str().map(Some).ok_or_else(|| {
                self.key_err(
                    key,
                    format!("expected a string, found {}", v.value_type().name()),
                )
            }),
        }
    }

    pub fn get_u64(&self, key: &str) -> Result<Option<u64>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v.as_u64().map(Some).ok_or_else(|| {
                self.key_err(key, format!("expected a non-negative integer, found {v}"))
            }),
        }
    }

    pub fn get_f64(&self, key: &str) -> Result<Option<f64>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_f64()
                .map(Some)
                .ok_or_else(|| self.key_err(key, format!("expected a number, found {v}"))),
        }
    }

    pub fn get_bool(&self, key: &str) -> Result<Option<bool>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_bool()
                .map(Some)
                .ok_or_else(|| self.key_err(key, format!("expected a bool, found {v}"))),
        }
    }

    pub fn require_str(&self, key: &str) -> Result<&str> {
        let v = self.required(key)?;
        v.as_str()
            .ok_or_else(|| self.key_err(key, format!("expected a string, found {v}")))
    }

    pub fn require_u64(&self, key: &str) -> Result<u64> {
        let v = self.required(key)?;
        v.as_u64()
            .ok_or_else(|| self.key_err(key, format!("expected a non-negative integer, found {v}")))
    }

    pub fn require_f64(&self, key: &str) -> Result<f64> {
        let v = self.required(key)?;
        v.as_f64()
            .ok_or_else(|| self.key_err(key, format!("expected a number, found {v}")))
    }

    pub fn get_array(&self, key: &str) -> Result<Option<&MetaArray>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_array()
                .map(Some)
                .ok_or_else(|| self.key_err(key, format!("expected an array, found {v}"))),
        }
    }

    /// An array of strings (`tokenizer.ggml.tokens`, `tokenizer.ggml.merges`).
    pub fn get_str_array(&self, key: &str) -> Result<Option<&[String]>> {
        match self.get_array(key)? {
            None => Ok(None),
            Some(MetaArray::String(v)) => Ok(Some(v)),
            Some(a) => Err(self.key_err(
                key,
                format!(
                    "expected an array of strings, found an array of {}",
                    a.elem_type().name()
                ),
            )),
        }
    }

    /// `general.architecture`.
    pub fn architecture(&self) -> Result<&str> {
        self.require_str("general.architecture")
    }

    /// An architecture-prefixed key: `arch_key("block_count")` reads
    /// `<general.architecture>.block_count`.
    pub fn arch_key(&self, suffix: &str) -> Result<String> {
        Ok(format!("{}.{suffix}", self.architecture()?))
    }

    pub fn tensor_info(&self, name: &str) -> Option<&TensorInfo> {
        self.tensor_index.get(name).map(|&i| &self.tensors[i])
    }

    /// The bytes of a tensor (zero-copy view into the mapped file).
    pub fn tensor_data(&self, t: &TensorInfo) -> &[u8] {
        let map = &self.shards[t.shard].map;
        // Bounds were validated against this shard's length at open time.
        &map[t.abs_offset as usize..(t.abs_offset + t.n_bytes) as usize]
    }

    /// Look up a tensor by name and return its info and bytes.
    pub fn tensor(&self, name: &str) -> Option<(&TensorInfo, &[u8])> {
        self.tensor_info(name).map(|t| (t, self.tensor_data(t)))
    }
}

/// Parse a GGUF image held in memory (used by the fuzzer and tests). Returns
/// the number of metadata entries and tensors on success.
pub fn parse_bytes(buf: &[u8], name: &str) -> Result<(usize, usize)> {
    let p = parse(buf, Path::new(name), 0)?;
    Ok((p.metadata.len(), p.tensors.len() + p.unknown.len()))
}
