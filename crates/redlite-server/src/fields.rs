//! Typed reading of request fields with errors that name the field.
//! Unknown fields are ignored, never rejected (clients send many).

use serde_json::{Map, Value};

use crate::error::ApiError;

pub type Obj = Map<String, Value>;

/// Parse a request body as a JSON object.
pub fn parse_body(bytes: &[u8]) -> Result<Obj, ApiError> {
    let v: Value = serde_json::from_slice(bytes)
        .map_err(|e| ApiError::invalid(format!("the request body is not valid JSON: {e}")))?;
    match v {
        Value::Object(o) => Ok(o),
        other => Err(ApiError::invalid(format!(
            "the request body must be a JSON object, got {}",
            kind(&other)
        ))),
    }
}

pub fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn present<'a>(o: &'a Obj, k: &str) -> Option<&'a Value> {
    o.get(k).filter(|v| !v.is_null())
}

fn wrong(k: &str, want: &str, v: &Value) -> ApiError {
    ApiError::param(k, format!("'{k}' must be {want}, got {}", kind(v)))
}

pub fn opt_bool(o: &Obj, k: &str) -> Result<Option<bool>, ApiError> {
    match present(o, k) {
        None => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(v) => Err(wrong(k, "a boolean", v)),
    }
}

pub fn opt_f64(o: &Obj, k: &str) -> Result<Option<f64>, ApiError> {
    match present(o, k) {
        None => Ok(None),
        Some(Value::Number(n)) => n
            .as_f64()
            .filter(|x| x.is_finite())
            .map(Some)
            .ok_or_else(|| ApiError::param(k, format!("'{k}' must be a finite number"))),
        Some(v) => Err(wrong(k, "a number", v)),
    }
}

/// A non-negative integer (floats with no fractional part are accepted).
pub fn opt_usize(o: &Obj, k: &str) -> Result<Option<usize>, ApiError> {
    match present(o, k) {
        None => Ok(None),
        Some(Value::Number(n)) => {
            if let Some(u) = n.as_u64() {
                return Ok(Some(usize::try_from(u).unwrap_or(usize::MAX)));
            }
            match n.as_f64() {
                Some(f) if f >= 0.0 && f.fract() == 0.0 && f.is_finite() => Ok(Some(f as usize)),
                _ => Err(ApiError::param(
                    k,
                    format!("'{k}' must be a non-negative integer, got {n}"),
                )),
            }
        }
        Some(v) => Err(wrong(k, "a non-negative integer", v)),
    }
}

pub fn opt_i64(o: &Obj, k: &str) -> Result<Option<i64>, ApiError> {
    match present(o, k) {
        None => Ok(None),
        Some(Value::Number(n)) => n
            .as_i64()
            .or_else(|| n.as_u64().map(|u| u as i64))
            .map(Some)
            .ok_or_else(|| ApiError::param(k, format!("'{k}' must be an integer, got {n}"))),
        Some(v) => Err(wrong(k, "an integer", v)),
    }
}

pub fn opt_str<'a>(o: &'a Obj, k: &str) -> Result<Option<&'a str>, ApiError> {
    match present(o, k) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(v) => Err(wrong(k, "a string", v)),
    }
}

pub fn opt_array<'a>(o: &'a Obj, k: &str) -> Result<Option<&'a Vec<Value>>, ApiError> {
    match present(o, k) {
        None => Ok(None),
        Some(Value::Array(a)) => Ok(Some(a)),
        Some(v) => Err(wrong(k, "an array", v)),
    }
}

pub fn opt_object<'a>(o: &'a Obj, k: &str) -> Result<Option<&'a Obj>, ApiError> {
    match present(o, k) {
        None => Ok(None),
        Some(Value::Object(m)) => Ok(Some(m)),
        Some(v) => Err(wrong(k, "an object", v)),
    }
}

/// `stop` / `stop_sequences`: a string or an array of strings.
pub fn stop_strings(o: &Obj, k: &str) -> Result<Vec<String>, ApiError> {
    let out: Vec<String> = match present(o, k) {
        None => Vec::new(),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| match v {
                Value::String(s) => Ok(s.clone()),
                other => Err(wrong(k, "a string or an array of strings", other)),
            })
            .collect::<Result<_, _>>()?,
        Some(v) => return Err(wrong(k, "a string or an array of strings", v)),
    };
    if out.len() > 16 {
        return Err(ApiError::param(k, format!("at most 16 '{k}' strings")));
    }
    Ok(out.into_iter().filter(|s| !s.is_empty()).collect())
}
