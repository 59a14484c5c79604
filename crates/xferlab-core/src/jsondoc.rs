//! Reading result documents as JSON values, as the experiment's metrics
//! and the transports' own metrics do: numbers and arrays at paths, the
//! sides' sender flows, and the unit words a metric carries. Below both
//! (`transport` and `experiment`) so a transport's model can read its own
//! sections with the same helpers. A field that is missing reads as
//! nothing, so documents of older or newer builds still give what they
//! carry.

use serde_json::Value;

/// Unit words, as `experiment::metrics::Metric::unit` holds them.
pub mod unit {
    pub const BPS: &str = "bit/s";
    pub const PER_SECOND: &str = "1/s";
    pub const US: &str = "us";
    pub const FRACTION: &str = "fraction";
    pub const COUNT: &str = "count";
    pub const PERCENT: &str = "%";
    pub const BOOL: &str = "bool";
    pub const BYTES: &str = "bytes";
    pub const SECONDS: &str = "s";
    /// CPU seconds per gigabyte (1e9 bytes) moved.
    pub const SECONDS_PER_GB: &str = "s/GB";
}

/// A metric a table lists: (name, unit, meaning).
pub type MetricInfo = (&'static str, &'static str, &'static str);

/// A number at a path of object keys.
pub fn num(v: &Value, path: &[&str]) -> Option<f64> {
    path.iter().try_fold(v, |v, k| v.get(k))?.as_f64()
}

/// An array at `key`, or nothing.
pub fn arr<'a>(v: &'a Value, key: &str) -> &'a [Value] {
    v.get(key)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// The side reports present (`server` is null when it never reported).
pub fn sides(doc: &Value) -> impl Iterator<Item = &Value> {
    ["client", "server"]
        .into_iter()
        .filter_map(|k| doc.get(k).filter(|v| v.is_object()))
}

/// Sender flows of both sides.
pub fn sender_flows(doc: &Value) -> impl Iterator<Item = &Value> {
    sides(doc)
        .flat_map(|s| arr(s, "flows"))
        .filter(|f| f.get("role").and_then(Value::as_str) == Some("sender"))
}
