//! GGUF metadata values.

use std::fmt;

/// GGUF metadata value type ids (`gguf_type` in ggml's `gguf.h`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum ValueType {
    U8 = 0,
    I8 = 1,
    U16 = 2,
    I16 = 3,
    U32 = 4,
    I32 = 5,
    F32 = 6,
    Bool = 7,
    String = 8,
    Array = 9,
    U64 = 10,
    I64 = 11,
    F64 = 12,
}

impl ValueType {
    pub fn from_id(id: u32) -> Option<ValueType> {
        use ValueType::*;
        Some(match id {
            0 => U8,
            1 => I8,
            2 => U16,
            3 => I16,
            4 => U32,
            5 => I32,
            6 => F32,
            7 => Bool,
            8 => String,
            9 => Array,
            10 => U64,
            11 => I64,
            12 => F64,
            _ => return None,
        })
    }

    /// Encoded size of one scalar of this type; strings and arrays are variable.
    pub fn fixed_size(self) -> Option<usize> {
        use ValueType::*;
        match self {
            U8 | I8 | Bool => Some(1),
            U16 | I16 => Some(2),
            U32 | I32 | F32 => Some(4),
            U64 | I64 | F64 => Some(8),
            String | Array => None,
        }
    }

    pub fn name(self) -> &'static str {
        use ValueType::*;
        match self {
            U8 => "u8",
            I8 => "i8",
            U16 => "u16",
            I16 => "i16",
            U32 => "u32",
            I32 => "i32",
            F32 => "f32",
            Bool => "bool",
            String => "string",
            Array => "array",
            U64 => "u64",
            I64 => "i64",
            F64 => "f64",
        }
    }
}

/// A typed array value. Arrays of arrays are allowed by the format.
#[derive(Clone, Debug, PartialEq)]
pub enum MetaArray {
    U8(Vec<u8>),
    I8(Vec<i8>),
    U16(Vec<u16>),
    I16(Vec<i16>),
    U32(Vec<u32>),
    I32(Vec<i32>),
    F32(Vec<f32>),
    Bool(Vec<bool>),
    String(Vec<String>),
    U64(Vec<u64>),
    I64(Vec<i64>),
    F64(Vec<f64>),
    Array(Vec<MetaArray>),
}

impl MetaArray {
    pub fn len(&self) -> usize {
        use MetaArray::*;
        match self {
            U8(v) => v.len(),
            I8(v) => v.len(),
            U16(v) => v.len(),
            I16(v) => v.len(),
            U32(v) => v.len(),
            I32(v) => v.len(),
            F32(v) => v.len(),
            Bool(v) => v.len(),
            String(v) => v.len(),
            U64(v) => v.len(),
            I64(v) => v.len(),
            F64(v) => v.len(),
            Array(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn elem_type(&self) -> ValueType {
        use MetaArray::*;
        match self {
            U8(_) => ValueType::U8,
            I8(_) => ValueType::I8,
            U16(_) => ValueType::U16,
            I16(_) => ValueType::I16,
            U32(_) => ValueType::U32,
            I32(_) => ValueType::I32,
            F32(_) => ValueType::F32,
            Bool(_) => ValueType::Bool,
            String(_) => ValueType::String,
            U64(_) => ValueType::U64,
            I64(_) => ValueType::I64,
            F64(_) => ValueType::F64,
            Array(_) => ValueType::Array,
        }
    }

    /// Integer elements widened to i64 (any integer or bool element type).
    pub fn as_i64_vec(&self) -> Option<Vec<i64>> {
        use MetaArray::*;
        Some(match self {
            U8(v) => v.iter().map(|&x| x as i64).collect(),
            I8(v) => v.iter().map(|&x| x as i64).collect(),
            U16(v) => v.iter().map(|&x| x as i64).collect(),
            I16(v) => v.iter().map(|&x| x as i64).collect(),
            U32(v) => v.iter().map(|&x| x as i64).collect(),
            I32(v) => v.iter().map(|&x| x as i64).collect(),
            U64(v) => v.iter().map(|&x| x as i64).collect(),
            I64(v) => v.clone(),
            Bool(v) => v.iter().map(|&x| x as i64).collect(),
            _ => return None,
        })
    }
}

/// One metadata value.
#[derive(Clone, Debug, PartialEq)]
pub enum MetaValue {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    Array(MetaArray),
    U64(u64),
    I64(i64),
    F64(f64),
}

impl MetaValue {
    pub fn value_type(&self) -> ValueType {
        use MetaValue::*;
        match self {
            U8(_) => ValueType::U8,
            I8(_) => ValueType::I8,
            U16(_) => ValueType::U16,
            I16(_) => ValueType::I16,
            U32(_) => ValueType::U32,
            I32(_) => ValueType::I32,
            F32(_) => ValueType::F32,
            Bool(_) => ValueType::Bool,
            String(_) => ValueType::String,
            Array(_) => ValueType::Array,
            U64(_) => ValueType::U64,
            I64(_) => ValueType::I64,
            F64(_) => ValueType::F64,
        }
    }

    /// Any integer type that fits a u64 (negative values give `None`).
    pub fn as_u64(&self) -> Option<u64> {
        use MetaValue::*;
        match *self {
            U8(v) => Some(v as u64),
            U16(v) => Some(v as u64),
            U32(v) => Some(v as u64),
            U64(v) => Some(v),
            I8(v) => u64::try_from(v).ok(),
            I16(v) => u64::try_from(v).ok(),
            I32(v) => u64::try_from(v).ok(),
            I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    pub fn as_i64(&self) -> Option<i64> {
        use MetaValue::*;
        match *self {
            U8(v) => Some(v as i64),
            U16(v) => Some(v as i64),
            U32(v) => Some(v as i64),
            U64(v) => i64::try_from(v).ok(),
            I8(v) => Some(v as i64),
            I16(v) => Some(v as i64),
            I32(v) => Some(v as i64),
            I64(v) => Some(v),
            _ => None,
        }
    }

    /// Floats, and integers converted to f64.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            MetaValue::F32(v) => Some(v as f64),
            MetaValue::F64(v) => Some(v),
            _ => self.as_i64().map(|v| v as f64),
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            MetaValue::Bool(b) => Some(b),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            MetaValue::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&MetaArray> {
        match self {
            MetaValue::Array(a) => Some(a),
            _ => None,
        }
    }
}

impl fmt::Display for MetaValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use MetaValue::*;
        match self {
            U8(v) => write!(f, "{v}"),
            I8(v) => write!(f, "{v}"),
            U16(v) => write!(f, "{v}"),
            I16(v) => write!(f, "{v}"),
            U32(v) => write!(f, "{v}"),
            I32(v) => write!(f, "{v}"),
            F32(v) => write!(f, "{v}"),
            Bool(v) => write!(f, "{v}"),
            String(s) => write!(f, "{s:?}"),
            U64(v) => write!(f, "{v}"),
            I64(v) => write!(f, "{v}"),
            F64(v) => write!(f, "{v}"),
            Array(a) => write!(f, "[{} x {}]", a.len(), a.elem_type().name()),
        }
    }
}
