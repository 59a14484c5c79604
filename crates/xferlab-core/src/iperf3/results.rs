//! The results JSON both sides send after EXCHANGE_RESULTS.

use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use super::json::{kind, parse_object, Fields, JsonError};

/// One side's totals. Reading requires what iperf3's own reader requires
/// (the CPU figures, `sender_has_retransmits`, `streams`, and per stream
/// `id`, `bytes`, `retransmits`, `jitter`, `errors`, `packets`) and
/// ignores unknown keys; writing emits `-1` as `-1`.
#[derive(Debug, Clone, PartialEq)]
pub struct Results {
    /// CPU time over wall time, percent of one core.
    pub cpu_util_total: f64,
    pub cpu_util_user: f64,
    pub cpu_util_system: f64,
    /// -1 if this side only received; 1 if it sent TCP and has tcp_info
    /// retransmits; else 0.
    pub sender_has_retransmits: i64,
    pub congestion_used: Option<String>,
    pub streams: Vec<StreamResult>,
    /// The server's console output, when the client asked for it.
    pub server_output_text: Option<String>,
    /// The server's JSON output, when the client asked for it.
    pub server_output_json: Option<Value>,
}

/// One stream's totals, matched to the peer's by `id`.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamResult {
    pub id: u32,
    /// Sender: bytes sent minus omitted; receiver: bytes received while
    /// running.
    pub bytes: u64,
    /// -1 unless this side sent TCP on it.
    pub retransmits: i64,
    /// Seconds.
    pub jitter: f64,
    /// Lost datagrams (receiver).
    pub errors: i64,
    /// Sender: datagrams sent; receiver: highest sequence number seen.
    pub packets: i64,
    /// 3.14+: the counts during the omitted warm-up. Written as the pair
    /// `omitted_errors` / `omitted_packets` or not at all; a peer that
    /// sends only one of them is read as sending neither.
    pub omitted: Option<Omitted>,
    /// Seconds (0).
    pub start_time: f64,
    /// Seconds; a receiver stamps it when TEST_END arrives.
    pub end_time: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Omitted {
    pub errors: i64,
    pub packets: i64,
}

impl Results {
    /// Parses a results message body (leniently, see the type's docs).
    pub fn from_json(body: &[u8]) -> Result<Results, JsonError> {
        Results::from_map(&parse_object(body)?)
    }

    pub fn from_map(map: &Map<String, Value>) -> Result<Results, JsonError> {
        let f = Fields {
            map,
            what: "results",
        };
        let streams = match map.get("streams") {
            None => {
                return Err(JsonError::Missing {
                    what: "results",
                    key: "streams",
                })
            }
            Some(Value::Array(a)) => a
                .iter()
                .enumerate()
                .map(|(i, s)| StreamResult::from_value(i, s))
                .collect::<Result<Vec<_>, _>>()?,
            Some(v) => {
                return Err(JsonError::WrongType {
                    what: "results",
                    key: "streams",
                    want: "an array",
                    got: kind(v),
                })
            }
        };
        Ok(Results {
            cpu_util_total: f.req_f64("cpu_util_total")?,
            cpu_util_user: f.req_f64("cpu_util_user")?,
            cpu_util_system: f.req_f64("cpu_util_system")?,
            sender_has_retransmits: f.req_i64("sender_has_retransmits")?,
            congestion_used: f.opt_string("congestion_used")?,
            streams,
            server_output_text: f.opt_string("server_output_text")?,
            server_output_json: map
                .get("server_output_json")
                .filter(|v| !v.is_null())
                .cloned(),
        })
    }

    /// The JSON text as sent (without the length prefix).
    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("results always serialize")
    }
}

impl StreamResult {
    fn from_value(i: usize, v: &Value) -> Result<StreamResult, JsonError> {
        let Value::Object(map) = v else {
            return Err(JsonError::StreamNotObject {
                index: i,
                got: kind(v),
            });
        };
        let f = Fields {
            map,
            what: "results stream",
        };
        let id = f.req_i64("id")?;
        let id = u32::try_from(id)
            .ok()
            .filter(|id| *id > 0)
            .ok_or(JsonError::StreamId { index: i, id })?;
        let omitted = match (f.opt_i64("omitted_errors")?, f.opt_i64("omitted_packets")?) {
            (Some(errors), Some(packets)) => Some(Omitted { errors, packets }),
            _ => None,
        };
        Ok(StreamResult {
            id,
            bytes: f.req_u64("bytes")?,
            retransmits: f.req_i64("retransmits")?,
            jitter: f.req_f64("jitter")?,
            errors: f.req_i64("errors")?,
            packets: f.req_i64("packets")?,
            omitted,
            start_time: f.opt_f64("start_time")?.unwrap_or(0.0),
            end_time: f.opt_f64("end_time")?.unwrap_or(0.0),
        })
    }
}

/// JSON has no NaN or infinity (serde_json would write `null`, which
/// iperf3 reads as a type error): write 0 instead.
fn finite(f: f64) -> f64 {
    if f.is_finite() {
        f
    } else {
        0.0
    }
}

impl Serialize for Results {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("cpu_util_total", &finite(self.cpu_util_total))?;
        m.serialize_entry("cpu_util_user", &finite(self.cpu_util_user))?;
        m.serialize_entry("cpu_util_system", &finite(self.cpu_util_system))?;
        m.serialize_entry("sender_has_retransmits", &self.sender_has_retransmits)?;
        if let Some(c) = &self.congestion_used {
            m.serialize_entry("congestion_used", c)?;
        }
        m.serialize_entry("streams", &self.streams)?;
        if let Some(t) = &self.server_output_text {
            m.serialize_entry("server_output_text", t)?;
        }
        if let Some(j) = &self.server_output_json {
            m.serialize_entry("server_output_json", j)?;
        }
        m.end()
    }
}

impl Serialize for StreamResult {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("id", &self.id)?;
        m.serialize_entry("bytes", &self.bytes)?;
        m.serialize_entry("retransmits", &self.retransmits)?;
        m.serialize_entry("jitter", &finite(self.jitter))?;
        m.serialize_entry("errors", &self.errors)?;
        if let Some(o) = &self.omitted {
            m.serialize_entry("omitted_errors", &o.errors)?;
        }
        m.serialize_entry("packets", &self.packets)?;
        if let Some(o) = &self.omitted {
            m.serialize_entry("omitted_packets", &o.packets)?;
        }
        m.serialize_entry("start_time", &finite(self.start_time))?;
        m.serialize_entry("end_time", &finite(self.end_time))?;
        m.end()
    }
}

impl<'de> Deserialize<'de> for Results {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let map = Map::<String, Value>::deserialize(d)?;
        Results::from_map(&map).map_err(serde::de::Error::custom)
    }
}
