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

    struct Known(&'static [&'static str], Budget);
    impl<'de> Visitor<'de> for Known {
        type Value = Obj;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Obj, A::Error> {
            let mut out = Obj::new();
            while let Some(k) = m.next_key::<std::borrow::Cow<'de, str>>()? {
                if self.0.contains(&k.as_ref()) {
                    let v: Value = m.next_value_seed(Budgeted(&self.1))?;
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
    let budget = Budget::for_body(bytes.len());
    let limit = budget.0.get();
    let parsed = Known(known, budget).deserialize(&mut de).and_then(|o| {
        de.end()?;
        Ok(o)
    });
    parsed.map_err(|e| {
        if e.to_string().contains(OVER_BUDGET) {
            ApiError::invalid(format!(
                "the request's fields would take more than {limit} bytes of memory once parsed \
                 (a body of {} bytes; long arrays of small values cost the most)",
                bytes.len()
            ))
        } else if e.classify() == serde_json::error::Category::Data {
            ApiError::invalid(format!("the request body must be a JSON object: {e}"))
        } else {
            ApiError::invalid(format!("the request body is not valid JSON: {e}"))
        }
    })
}

const OVER_BUDGET: &str = "parsed request over its memory budget";

/// What the parsed fields of one body may take in memory: one and a half
/// times the body, at least 32 MiB (so with the body itself the peak stays
/// under three times its size).
/// A JSON value costs `size_of::<Value>()` plus its string bytes, whatever
/// its text took, so a long array of one-digit numbers would otherwise
/// grow some 40-fold.
struct Budget(std::cell::Cell<usize>);

impl Budget {
    fn for_body(len: usize) -> Budget {
        Budget(std::cell::Cell::new(
            (len / 2).saturating_mul(3).max(32 << 20),
        ))
    }

    fn charge<E: serde::de::Error>(&self, n: usize) -> Result<(), E> {
        let left = self.0.get();
        if n > left {
            return Err(E::custom(OVER_BUDGET));
        }
        self.0.set(left - n);
        Ok(())
    }
}

/// Deserializes a [`Value`], charging each node to a [`Budget`].
struct Budgeted<'a>(&'a Budget);

impl<'de> serde::de::DeserializeSeed<'de> for Budgeted<'_> {
    type Value = Value;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for Budgeted<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Value, E> {
        self.0.charge(NODE)?;
        Ok(Value::Bool(v))
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Value, E> {
        self.0.charge(NODE)?;
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Value, E> {
        self.0.charge(NODE)?;
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Value, E> {
        self.0.charge(NODE)?;
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Value, E> {
        self.0.charge(NODE + v.len())?;
        Ok(Value::String(v.to_string()))
    }

    fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Value, E> {
        self.0.charge(NODE + v.len())?;
        Ok(Value::String(v))
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Value, E> {
        self.0.charge(NODE)?;
        Ok(Value::Null)
    }

    fn visit_none<E: serde::de::Error>(self) -> Result<Value, E> {
        self.visit_unit()
    }

    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        serde::de::DeserializeSeed::deserialize(self, d)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut a: A) -> Result<Value, A::Error> {
        self.0.charge(NODE)?;
        let mut v = Vec::new();
        while let Some(x) = a.next_element_seed(Budgeted(self.0))? {
            v.push(x);
        }
        Ok(Value::Array(v))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut a: A) -> Result<Value, A::Error> {
        self.0.charge(NODE)?;
        let mut m = Map::new();
        while let Some(k) = a.next_key::<String>()? {
            // The key's bytes and its entry in the map.
            self.0.charge(k.len() + NODE)?;
            let v = a.next_value_seed(Budgeted(self.0))?;
            m.insert(k, v);
        }
        Ok(Value::Object(m))
    }
}

/// What one parsed JSON node is charged (its `Value`, with room for the
/// container slot holding it).
const NODE: usize = 2 * std::mem::size_of::<Value>();

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parsed_fields_stay_within_their_memory_budget() {
        // 1.5 MB of one-digit numbers in a read field: over 32 MiB parsed.
        let mut body = String::from("{\"prompt\": [");
        body.push_str(&"1,".repeat(750_000));
        body.push_str("1]}");
        let e = parse_known(body.as_bytes(), &["prompt"]).expect_err("over budget");
        assert!(
            e.message.contains("more than 33554432 bytes"),
            "{}",
            e.message
        );
        // The same numbers in a field no route reads cost nothing.
        let o = parse_known(body.as_bytes(), &["other"]).expect("skipped");
        assert!(o.is_empty());
        // A long prompt of token ids (100,000 five-digit ids) is fine, and
        // parses to what serde_json gives.
        let ids: Vec<u32> = (0..100_000).map(|i| 10_000 + i % 50_000).collect();
        let body = serde_json::json!({"prompt": ids, "n": 1.5, "s": "x", "o": {"k": [null, true]}});
        let text = body.to_string();
        let o = parse_known(text.as_bytes(), &["prompt", "n", "s", "o"]).expect("fits");
        assert_eq!(Value::Object(o), body);
        // A long string costs its bytes: 40 MB of text is fine.
        let body = serde_json::json!({"content": "y".repeat(40 << 20)}).to_string();
        assert!(parse_known(body.as_bytes(), &["content"]).is_ok());
    }
}
