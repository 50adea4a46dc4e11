//! Typed reading of request fields with errors that name the field.
//! Unknown fields are ignored, never rejected (clients send many).

use serde_json::{Map, Value};

use crate::error::ApiError;

pub type Obj = Map<String, Value>;

/// Parse a request body as a JSON object. Every field is kept; only for
/// small bodies and tests: handlers use [`parse_known`].
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

/// Parse a request body as a JSON object, keeping only the fields in
/// `known`: the others are checked for syntax and skipped without being
/// built (serde's `IgnoredAny`), so a client's large unknown field costs
/// no memory beyond the body itself. A repeated key keeps its last value.
pub fn parse_known(bytes: &[u8], known: &'static [&'static str]) -> Result<Obj, ApiError> {
    use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};

    struct Known(&'static [&'static str]);
    impl<'de> Visitor<'de> for Known {
        type Value = Obj;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Obj, A::Error> {
            let mut out = Obj::new();
            while let Some(k) = m.next_key::<std::borrow::Cow<'de, str>>()? {
                if self.0.contains(&k.as_ref()) {
                    let v: Value = m.next_value()?;
                    out.insert(k.into_owned(), v);
                } else {
                    m.next_value::<IgnoredAny>()?;
                }
            }
            Ok(out)
        }
    }
    impl<'de> DeserializeSeed<'de> for Known {
        type Value = Obj;
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Obj, D::Error> {
            d.deserialize_map(self)
        }
    }
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let parsed = Known(known).deserialize(&mut de).and_then(|o| {
        de.end()?;
        Ok(o)
    });
    parsed.map_err(|e| {
        if e.classify() == serde_json::error::Category::Data {
            ApiError::invalid(format!("the request body must be a JSON object: {e}"))
        } else {
            ApiError::invalid(format!("the request body is not valid JSON: {e}"))
        }
    })
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

/// A non-negative integer up to `u32::MAX` (floats with no fractional
/// part are accepted).
pub fn opt_usize(o: &Obj, k: &str) -> Result<Option<usize>, ApiError> {
    match present(o, k) {
        None => Ok(None),
        Some(Value::Number(n)) => {
            let v = match n.as_u64() {
                Some(u) => u as f64,
                None => match n.as_f64() {
                    Some(f) if f >= 0.0 && f.fract() == 0.0 && f.is_finite() => f,
                    _ => {
                        return Err(ApiError::param(
                            k,
                            format!("'{k}' must be a non-negative integer, got {n}"),
                        ))
                    }
                },
            };
            if v > u32::MAX as f64 {
                return Err(ApiError::param(
                    k,
                    format!("'{k}' must be at most {}, got {n}", u32::MAX),
                ));
            }
            Ok(Some(v as usize))
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

/// Most stop strings a request may give.
pub const MAX_STOPS: usize = 16;
/// Most bytes all of a request's stop strings may hold together.
pub const MAX_STOP_BYTES: usize = 4096;

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
    if out.len() > MAX_STOPS {
        return Err(ApiError::param(
            k,
            format!("at most {MAX_STOPS} '{k}' strings, got {}", out.len()),
        ));
    }
    let total: usize = out.iter().map(String::len).sum();
    if total > MAX_STOP_BYTES {
        return Err(ApiError::param(
            k,
            format!("the '{k}' strings are {total} bytes together; at most {MAX_STOP_BYTES}"),
        ));
    }
    Ok(out.into_iter().filter(|s| !s.is_empty()).collect())
}
