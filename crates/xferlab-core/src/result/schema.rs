//! The JSON Schema of a result document, derived from the types with
//! schemars, so it cannot drift from what xferlab writes
//! (docs/result-schema.json; a test keeps the committed file current:
//! `XFERLAB_BLESS=1 cargo test -p xferlab-core schema` rewrites it).

use std::collections::BTreeSet;

use serde_json::{json, Value};

use super::{TestResult, SCHEMA};

/// The schema of [`TestResult`] as docs/result-schema.json holds it.
///
/// Objects are closed (`unevaluatedProperties: false`), so a test that
/// validates real output against it also catches a field that serde
/// writes but the types do not describe. Consumers should still ignore
/// fields they do not know: a later minor version may add optional ones.
pub fn document() -> Value {
    let mut root = schemars::schema_for!(TestResult).to_value();
    let obj = root.as_object_mut().expect("a schema is an object");
    obj.insert(
        "title".into(),
        format!("xferlab test result ({SCHEMA})").into(),
    );
    obj.insert(
        "description".into(),
        "The document `xferlab stream --format json` writes. Field meanings and units: \
         docs/result-schema.md. Generated from the Rust types; do not edit by hand."
            .into(),
    );
    obj["properties"]["schema"] = json!({ "const": SCHEMA });
    bound_by_unit(&mut root);
    close_objects(&mut root);
    root
}

/// Bounds a number by the unit its name ends in, the convention every
/// result type follows (docs/result-schema.md): times, rates and shares
/// are never negative, fractions at most 1, percentiles at most 100.
fn bound_by_unit(v: &mut Value) {
    match v {
        Value::Object(o) => {
            if let Some(Value::Object(props)) = o.get_mut("properties") {
                for (name, p) in props.iter_mut() {
                    let range = if name.ends_with("fraction") {
                        Some((0, Some(1)))
                    } else if name == "percentile" {
                        Some((0, Some(100)))
                    } else if [
                        "_s",
                        "_us",
                        "_ns",
                        "_bps",
                        "per_second",
                        "percent",
                        "seconds",
                    ]
                    .iter()
                    .any(|u| name.ends_with(u))
                        || name == "us"
                    {
                        Some((0, None))
                    } else {
                        None
                    };
                    if let (Some((min, max)), Some(o)) = (range, p.as_object_mut()) {
                        if is_number(o) {
                            o.insert("minimum".into(), min.into());
                            if let Some(max) = max {
                                o.insert("maximum".into(), max.into());
                            }
                        }
                    }
                }
            }
            o.values_mut().for_each(bound_by_unit);
        }
        Value::Array(a) => a.iter_mut().for_each(bound_by_unit),
        _ => {}
    }
}

/// A schema of a plain number (or a number or null).
fn is_number(o: &serde_json::Map<String, Value>) -> bool {
    match o.get("type") {
        Some(Value::String(t)) => t == "number",
        Some(Value::Array(ts)) => ts.iter().any(|t| t == "number"),
        _ => false,
    }
}

/// Adds `unevaluatedProperties: false` to every schema that describes a
/// whole object: the root, each definition, and each alternative of an
/// enum's definition. A definition that another schema extends with
/// properties of its own (an internally tagged variant: `$ref` plus
/// `kind`) stays open, and the extending schema is closed instead;
/// fragments a flattened enum adds to its parent stay open too, the
/// parent being closed.
fn close_objects(root: &mut Value) {
    let mut extended = BTreeSet::new();
    find_extended(root, &mut extended);
    close(root);
    let Some(defs) = root.get_mut("$defs").and_then(Value::as_object_mut) else {
        return;
    };
    for (name, def) in defs.iter_mut() {
        if def.get("properties").is_some() {
            if !extended.contains(&format!("#/$defs/{name}")) {
                close(def);
            }
            continue;
        }
        for key in ["oneOf", "anyOf"] {
            for alt in def
                .get_mut(key)
                .and_then(Value::as_array_mut)
                .into_iter()
                .flatten()
            {
                if alt.get("properties").is_some() {
                    close(alt);
                }
            }
        }
    }
}

fn close(schema: &mut Value) {
    if let Some(o) = schema.as_object_mut() {
        o.insert("unevaluatedProperties".into(), false.into());
    }
}

/// The `$ref`s of schemas that also list properties of their own.
fn find_extended(v: &Value, out: &mut BTreeSet<String>) {
    match v {
        Value::Object(o) => {
            if let (Some(Value::String(r)), Some(_)) = (o.get("$ref"), o.get("properties")) {
                out.insert(r.clone());
            }
            o.values().for_each(|v| find_extended(v, out));
        }
        Value::Array(a) => a.iter().for_each(|v| find_extended(v, out)),
        _ => {}
    }
}

/// The committed schema file, pretty-printed as [`document`] writes it.
pub fn text() -> String {
    let mut s = serde_json::to_string_pretty(&document()).expect("a schema serialises");
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/result-schema.json is what the types say. After changing a
    /// result type, rewrite it with `XFERLAB_BLESS=1 cargo test -p
    /// xferlab-core schema` and commit it with the change.
    #[test]
    fn committed_schema_is_current() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/result-schema.json");
        let want = text();
        if std::env::var_os("XFERLAB_BLESS").is_some() {
            std::fs::write(path, &want).unwrap();
        }
        let got = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            got == want,
            "docs/result-schema.json is stale: run `XFERLAB_BLESS=1 cargo test -p xferlab-core schema` and commit it"
        );
    }
}
