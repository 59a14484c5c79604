//! Lenient readers for the JSON values iperf3 peers send.
//!
//! iperf3 keeps every number as a C double/int64 and 3.12 prints negative
//! integers through an unsigned 64-bit format, so `-1` arrives as
//! `18446744073709551615`. Flags arrive as `true` from some keys and as
//! `1` from others. These helpers accept all of that and nothing else.

use serde_json::{Map, Value};

/// A signed integer from a JSON number. Values above `i64::MAX` are
/// reinterpreted as the two's-complement `i64` they were printed from
/// (`18446744073709551615` is `-1`); a float is truncated toward zero as
/// iperf3's `valueint` does. Not a number (or not finite): `None`.
pub fn lenient_i64(v: &Value) -> Option<i64> {
    let Value::Number(n) = v else {
        return None;
    };
    if let Some(i) = n.as_i64() {
        return Some(i);
    }
    if let Some(u) = n.as_u64() {
        return Some(reinterpret_u64(u));
    }
    let f = n.as_f64()?;
    if !f.is_finite() {
        return None;
    }
    let t = f.trunc();
    if t >= -(2f64.powi(63)) && t < 2f64.powi(63) {
        Some(t as i64)
    } else if t >= 0.0 && t < 2f64.powi(64) {
        Some(reinterpret_u64(t as u64))
    } else {
        None
    }
}

/// A `u64` printed from a C `int64` holds that value's bits.
pub fn reinterpret_u64(u: u64) -> i64 {
    i64::from_ne_bytes(u.to_ne_bytes())
}

/// A non-negative integer (byte counts, rates). Negative: `None`.
pub fn lenient_u64(v: &Value) -> Option<u64> {
    let Value::Number(n) = v else {
        return None;
    };
    if let Some(u) = n.as_u64() {
        return Some(u);
    }
    if n.as_i64().is_some() {
        return None;
    }
    let f = n.as_f64()?;
    (f.is_finite() && f >= 0.0 && f < 2f64.powi(64)).then(|| f.trunc() as u64)
}

/// Any finite JSON number as `f64`.
pub fn lenient_f64(v: &Value) -> Option<f64> {
    v.as_f64().filter(|f| f.is_finite())
}

/// A flag: `true`/`false`, or a number (non-zero is set), or `null`
/// (unset). Strings and containers are refused.
pub fn lenient_flag(v: &Value) -> Option<bool> {
    match v {
        Value::Bool(b) => Some(*b),
        Value::Null => Some(false),
        Value::Number(_) => lenient_f64(v).map(|f| f != 0.0),
        _ => None,
    }
}

/// Parses one JSON message body into an object. Trailing NUL bytes and
/// whitespace are tolerated (C peers sometimes count the terminator).
pub fn parse_object(body: &[u8]) -> Result<Map<String, Value>, JsonError> {
    let end = body
        .iter()
        .rposition(|b| !matches!(b, 0 | b' ' | b'\t' | b'\r' | b'\n'))
        .map_or(0, |i| i + 1);
    match serde_json::from_slice::<Value>(&body[..end]) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(other) => Err(JsonError::NotObject(kind(&other))),
        Err(e) => {
            let mut m = e.to_string();
            m.truncate(200);
            Err(JsonError::Syntax(m))
        }
    }
}

pub(super) fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A JSON message from an iperf3 peer that does not parse or lacks what
/// iperf3 always sends; the message names the object and the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JsonError {
    /// Not JSON: serde_json's message, cut to 200 bytes.
    #[error("{0}")]
    Syntax(String),
    #[error("expected a JSON object, got {0}")]
    NotObject(&'static str),
    #[error("{what}: \"{key}\" must be {want}, got {got}")]
    WrongType {
        what: &'static str,
        key: &'static str,
        want: &'static str,
        got: &'static str,
    },
    #[error("{what}: \"{key}\" is missing")]
    Missing {
        what: &'static str,
        key: &'static str,
    },
    #[error("results: streams[{index}] must be an object, got {got}")]
    StreamNotObject { index: usize, got: &'static str },
    #[error("results: streams[{index}] has an invalid id {id}")]
    StreamId { index: usize, id: i64 },
    /// A JSON message in a state that takes none.
    #[error("a JSON message {during}")]
    Unexpected { during: &'static str },
}

/// Typed access to an object's keys with errors that name the key.
pub(super) struct Fields<'a> {
    pub map: &'a Map<String, Value>,
    pub what: &'static str,
}

impl Fields<'_> {
    fn get(&self, key: &str) -> Option<&Value> {
        self.map.get(key)
    }

    fn bad(&self, key: &'static str, want: &'static str, v: &Value) -> JsonError {
        JsonError::WrongType {
            what: self.what,
            key,
            want,
            got: kind(v),
        }
    }

    fn missing(&self, key: &'static str) -> JsonError {
        JsonError::Missing {
            what: self.what,
            key,
        }
    }

    pub fn opt_i64(&self, key: &'static str) -> Result<Option<i64>, JsonError> {
        match self.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => lenient_i64(v)
                .map(Some)
                .ok_or_else(|| self.bad(key, "an integer", v)),
        }
    }

    pub fn opt_u64(&self, key: &'static str) -> Result<Option<u64>, JsonError> {
        match self.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => lenient_u64(v)
                .map(Some)
                .ok_or_else(|| self.bad(key, "a non-negative integer", v)),
        }
    }

    pub fn opt_f64(&self, key: &'static str) -> Result<Option<f64>, JsonError> {
        match self.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => lenient_f64(v)
                .map(Some)
                .ok_or_else(|| self.bad(key, "a number", v)),
        }
    }

    pub fn flag(&self, key: &'static str) -> Result<bool, JsonError> {
        match self.get(key) {
            None => Ok(false),
            Some(v) => lenient_flag(v).ok_or_else(|| self.bad(key, "true/false or a number", v)),
        }
    }

    /// A flag that carries a value: `true` is 1, `false`/`null`/absent 0.
    pub fn flag_value(&self, key: &'static str) -> Result<i64, JsonError> {
        match self.get(key) {
            None | Some(Value::Null) | Some(Value::Bool(false)) => Ok(0),
            Some(Value::Bool(true)) => Ok(1),
            Some(v) => lenient_i64(v).ok_or_else(|| self.bad(key, "true/false or a number", v)),
        }
    }

    pub fn opt_string(&self, key: &'static str) -> Result<Option<String>, JsonError> {
        match self.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(v) => Err(self.bad(key, "a string", v)),
        }
    }

    pub fn req_i64(&self, key: &'static str) -> Result<i64, JsonError> {
        self.opt_i64(key)?.ok_or_else(|| self.missing(key))
    }

    pub fn req_u64(&self, key: &'static str) -> Result<u64, JsonError> {
        self.opt_u64(key)?.ok_or_else(|| self.missing(key))
    }

    pub fn req_f64(&self, key: &'static str) -> Result<f64, JsonError> {
        self.opt_f64(key)?.ok_or_else(|| self.missing(key))
    }
}
