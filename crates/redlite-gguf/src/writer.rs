//! GGUF writer (version 3): metadata, tensor table and aligned tensor data.
//!
//! Tensor data is either given as bytes or produced by a callback at write
//! time, so generated models larger than memory can be streamed to disk.

use std::fs::File;
use std::io::{self, BufWriter, Seek, Write};
use std::path::Path;

use crate::error::{GgufError, Result};
use crate::reader::{DEFAULT_ALIGNMENT, GGUF_MAGIC};
use crate::types::GgmlType;
use crate::value::{MetaArray, MetaValue};

/// Produces a tensor's bytes into the writer; must write exactly the
/// tensor's byte size.
pub type TensorFill = Box<dyn FnMut(&mut dyn Write) -> io::Result<()> + Send>;

enum TensorData {
    Bytes(Vec<u8>),
    Fill(TensorFill),
}

struct PendingTensor {
    name: String,
    dims: Vec<u64>,
    ty: GgmlType,
    n_bytes: u64,
    data: TensorData,
}

/// Builds a GGUF file.
pub struct GgufWriter {
    metadata: Vec<(String, MetaValue)>,
    tensors: Vec<PendingTensor>,
    alignment: u64,
}

impl Default for GgufWriter {
    fn default() -> Self {
        Self::new()
    }
}

impl GgufWriter {
    pub fn new() -> GgufWriter {
        GgufWriter {
            metadata: Vec::new(),
            tensors: Vec::new(),
            alignment: DEFAULT_ALIGNMENT,
        }
    }

    /// Set `general.alignment` (a power of two).
    pub fn set_alignment(&mut self, alignment: u64) -> Result<()> {
        if alignment == 0 || !alignment.is_power_of_two() {
            return Err(GgufError::Write(format!(
                "alignment {alignment} is not a power of two"
            )));
        }
        self.alignment = alignment;
        self.add_kv("general.alignment", MetaValue::U32(alignment as u32));
        Ok(())
    }

    /// Add or replace a metadata entry.
    pub fn add_kv(&mut self, key: impl Into<String>, value: MetaValue) {
        let key = key.into();
        if let Some(e) = self.metadata.iter_mut().find(|(k, _)| *k == key) {
            e.1 = value;
        } else {
            self.metadata.push((key, value));
        }
    }

    pub fn add_str(&mut self, key: impl Into<String>, v: impl Into<String>) {
        self.add_kv(key, MetaValue::String(v.into()));
    }
    pub fn add_u32(&mut self, key: impl Into<String>, v: u32) {
        self.add_kv(key, MetaValue::U32(v));
    }
    pub fn add_f32(&mut self, key: impl Into<String>, v: f32) {
        self.add_kv(key, MetaValue::F32(v));
    }
    pub fn add_bool(&mut self, key: impl Into<String>, v: bool) {
        self.add_kv(key, MetaValue::Bool(v));
    }
    pub fn add_array(&mut self, key: impl Into<String>, v: MetaArray) {
        self.add_kv(key, MetaValue::Array(v));
    }

    fn check_tensor(&self, name: &str, dims: &[u64], ty: GgmlType) -> Result<u64> {
        if self.tensors.iter().any(|t| t.name == name) {
            return Err(GgufError::Write(format!("duplicate tensor {name}")));
        }
        if dims.is_empty() || dims.len() > 4 || dims.contains(&0) {
            return Err(GgufError::Write(format!(
                "tensor {name}: invalid dimensions {dims:?}"
            )));
        }
        let row = ty.row_bytes(dims[0]).ok_or_else(|| {
            GgufError::Write(format!(
                "tensor {name}: ne0 {} is not a multiple of the {ty} block size {}",
                dims[0],
                ty.block_size()
            ))
        })?;
        dims[1..]
            .iter()
            .try_fold(row, |a, &d| a.checked_mul(d))
            .ok_or_else(|| GgufError::Write(format!("tensor {name}: size overflows")))
    }

    /// Add a tensor whose bytes are given (`dims` in ggml order).
    pub fn add_tensor(
        &mut self,
        name: impl Into<String>,
        dims: &[u64],
        ty: GgmlType,
        data: Vec<u8>,
    ) -> Result<()> {
        let name = name.into();
        let n_bytes = self.check_tensor(&name, dims, ty)?;
        if data.len() as u64 != n_bytes {
            return Err(GgufError::Write(format!(
                "tensor {name}: {} bytes given, {ty} {dims:?} needs {n_bytes}",
                data.len()
            )));
        }
        self.tensors.push(PendingTensor {
            name,
            dims: dims.to_vec(),
            ty,
            n_bytes,
            data: TensorData::Bytes(data),
        });
        Ok(())
    }

    /// Add an f32 tensor.
    pub fn add_f32_tensor(
        &mut self,
        name: impl Into<String>,
        dims: &[u64],
        data: &[f32],
    ) -> Result<()> {
        let bytes = data.iter().flat_map(|x| x.to_le_bytes()).collect();
        self.add_tensor(name, dims, GgmlType::F32, bytes)
    }

    /// Add a tensor whose bytes are produced at write time.
    pub fn add_tensor_fill(
        &mut self,
        name: impl Into<String>,
        dims: &[u64],
        ty: GgmlType,
        fill: TensorFill,
    ) -> Result<()> {
        let name = name.into();
        let n_bytes = self.check_tensor(&name, dims, ty)?;
        self.tensors.push(PendingTensor {
            name,
            dims: dims.to_vec(),
            ty,
            n_bytes,
            data: TensorData::Fill(fill),
        });
        Ok(())
    }

    /// Total bytes of tensor data that will be written.
    pub fn data_bytes(&self) -> u64 {
        self.tensors.iter().map(|t| t.n_bytes).sum()
    }

    /// Write the file.
    pub fn write_to_path(self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let io = |err| GgufError::Io {
            path: path.to_path_buf(),
            err,
        };
        let f = File::create(path).map_err(io)?;
        let mut w = BufWriter::with_capacity(1 << 20, f);
        self.write(&mut w).map_err(io)?;
        w.flush().map_err(io)?;
        Ok(())
    }

    /// Write the file to any seekable writer.
    pub fn write<W: Write + Seek>(mut self, w: &mut W) -> io::Result<()> {
        let start = w.stream_position()?;
        let mut pos: u64 = 0;
        let put = |w: &mut W, b: &[u8], pos: &mut u64| -> io::Result<()> {
            w.write_all(b)?;
            *pos += b.len() as u64;
            Ok(())
        };
        put(w, &GGUF_MAGIC, &mut pos)?;
        put(w, &3u32.to_le_bytes(), &mut pos)?;
        put(w, &(self.tensors.len() as u64).to_le_bytes(), &mut pos)?;
        put(w, &(self.metadata.len() as u64).to_le_bytes(), &mut pos)?;
        for (k, v) in &self.metadata {
            let mut buf = Vec::new();
            write_string(&mut buf, k);
            buf.extend_from_slice(&(v.value_type() as u32).to_le_bytes());
            write_value(&mut buf, v);
            put(w, &buf, &mut pos)?;
        }
        let a = self.alignment;
        let mut offset = 0u64;
        for t in &self.tensors {
            let mut buf = Vec::new();
            write_string(&mut buf, &t.name);
            buf.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
            for d in &t.dims {
                buf.extend_from_slice(&d.to_le_bytes());
            }
            buf.extend_from_slice(&t.ty.id().to_le_bytes());
            buf.extend_from_slice(&offset.to_le_bytes());
            put(w, &buf, &mut pos)?;
            offset = (offset + t.n_bytes).div_ceil(a) * a;
        }
        let pad = |w: &mut W, pos: &mut u64| -> io::Result<()> {
            let target = pos.div_ceil(a) * a;
            let zeros = vec![0u8; (target - *pos) as usize];
            w.write_all(&zeros)?;
            *pos = target;
            Ok(())
        };
        pad(w, &mut pos)?;
        for t in &mut self.tensors {
            let before = w.stream_position()? - start;
            match &mut t.data {
                TensorData::Bytes(b) => w.write_all(b)?,
                TensorData::Fill(f) => f(w)?,
            }
            let after = w.stream_position()? - start;
            if after - before != t.n_bytes {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "tensor {}: fill wrote {} bytes, expected {}",
                        t.name,
                        after - before,
                        t.n_bytes
                    ),
                ));
            }
            pos = after;
            pad(w, &mut pos)?;
        }
        Ok(())
    }
}

fn write_string(buf: &mut Vec<u8>, s: &str) {
    buf.extend_from_slice(&(s.len() as u64).to_le_bytes());
    buf.extend_from_slice(s.as_bytes());
}

fn write_value(buf: &mut Vec<u8>, v: &MetaValue) {
    match v {
        MetaValue::U8(x) => buf.push(*x),
        MetaValue::I8(x) => buf.push(*x as u8),
        MetaValue::U16(x) => buf.extend_from_slice(&x.to_le_bytes()),
        MetaValue::I16(x) => buf.extend_from_slice(&x.to_le_bytes()),
        MetaValue::U32(x) => buf.extend_from_slice(&x.to_le_bytes()),
        MetaValue::I32(x) => buf.extend_from_slice(&x.to_le_bytes()),
        MetaValue::F32(x) => buf.extend_from_slice(&x.to_le_bytes()),
        MetaValue::Bool(x) => buf.push(*x as u8),
        MetaValue::String(s) => write_string(buf, s),
        MetaValue::U64(x) => buf.extend_from_slice(&x.to_le_bytes()),
        MetaValue::I64(x) => buf.extend_from_slice(&x.to_le_bytes()),
        MetaValue::F64(x) => buf.extend_from_slice(&x.to_le_bytes()),
        MetaValue::Array(a) => write_array(buf, a),
    }
}

fn write_array(buf: &mut Vec<u8>, a: &MetaArray) {
    buf.extend_from_slice(&(a.elem_type() as u32).to_le_bytes());
    buf.extend_from_slice(&(a.len() as u64).to_le_bytes());
    macro_rules! each {
        ($v:expr) => {
            for x in $v {
                buf.extend_from_slice(&x.to_le_bytes());
            }
        };
    }
    match a {
        MetaArray::U8(v) => buf.extend_from_slice(v),
        MetaArray::I8(v) => each!(v),
        MetaArray::U16(v) => each!(v),
        MetaArray::I16(v) => each!(v),
        MetaArray::U32(v) => each!(v),
        MetaArray::I32(v) => each!(v),
        MetaArray::F32(v) => each!(v),
        MetaArray::U64(v) => each!(v),
        MetaArray::I64(v) => each!(v),
        MetaArray::F64(v) => each!(v),
        MetaArray::Bool(v) => buf.extend(v.iter().map(|&b| b as u8)),
        MetaArray::String(v) => {
            for s in v {
                write_string(buf, s);
            }
        }
        MetaArray::Array(v) => {
            for x in v {
                write_array(buf, x);
            }
        }
    }
}
