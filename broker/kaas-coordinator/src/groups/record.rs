//! What the coordinator persists in a group shard: one key per group (its membership, as of
//! the last completed rebalance) and one per committed offset; a tombstone deletes. The latest
//! value per key wins, exactly as in Kafka's compacted `__consumer_offsets`.

use bytes::Bytes;
use serde::{Deserialize, Serialize};

/// A shard key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "k")]
pub(crate) enum Key {
    #[serde(rename = "g")]
    Group { g: String },
    #[serde(rename = "o")]
    Offset { g: String, t: String, p: i32 },
    /// An offset committed inside a transaction (TxnOffsetCommit), pending its marker.
    #[serde(rename = "x")]
    TxnOffset { g: String, pid: i64, t: String, p: i32 },
}

impl Key {
    pub(crate) fn group(group: &str) -> String {
        encode(&Key::Group { g: group.to_owned() })
    }

    pub(crate) fn offset(group: &str, topic: &str, partition: i32) -> String {
        encode(&Key::Offset { g: group.to_owned(), t: topic.to_owned(), p: partition })
    }

    pub(crate) fn txn_offset(group: &str, producer_id: i64, topic: &str, partition: i32) -> String {
        encode(&Key::TxnOffset { g: group.to_owned(), pid: producer_id, t: topic.to_owned(), p: partition })
    }

    pub(crate) fn parse(key: &str) -> Option<Key> {
        serde_json::from_str(key).ok()
    }
}

fn encode(key: &Key) -> String {
    // Serializing a struct of strings and integers cannot fail.
    serde_json::to_string(key).unwrap_or_default()
}

/// A committed offset.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct OffsetValue {
    pub(crate) offset: i64,
    pub(crate) leader_epoch: i32,
    pub(crate) metadata: String,
    pub(crate) commit_ms: i64,
    /// Explicit expiry (OffsetCommit v2–v4 `retention_time_ms`), else the group-level rule.
    pub(crate) expire_ms: Option<i64>,
}

/// A group's membership after its last completed rebalance (or on becoming empty).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct GroupValue {
    pub(crate) protocol_type: Option<String>,
    pub(crate) generation: i32,
    pub(crate) protocol: Option<String>,
    pub(crate) leader: Option<String>,
    /// Wall-clock ms of the last state change (offset expiry of an empty group counts from it).
    pub(crate) state_ms: i64,
    pub(crate) members: Vec<MemberValue>,
    /// A KIP-848 consumer group's state (absent for classic groups and in records written
    /// before consumer groups existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) consumer: Option<super::consumer::ConsumerValue>,
    /// A KIP-932 share group's state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) share: Option<super::share::ShareValue>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct MemberValue {
    pub(crate) id: String,
    pub(crate) instance_id: Option<String>,
    pub(crate) client_id: String,
    pub(crate) client_host: String,
    pub(crate) session_timeout_ms: u64,
    pub(crate) rebalance_timeout_ms: u64,
    /// The member's metadata for the selected protocol.
    #[serde(with = "hex")]
    pub(crate) subscription: Bytes,
    #[serde(with = "hex")]
    pub(crate) assignment: Bytes,
}

/// JSON bytes of a value.
pub(crate) fn to_bytes<T: Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value).unwrap_or_default()
}

/// Byte strings as lowercase hex, so group files stay readable with `cat`.
mod hex {
    use bytes::Bytes;
    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    pub(super) fn serialize<S: Serializer>(bytes: &Bytes, s: S) -> Result<S::Ok, S::Error> {
        let mut out = String::with_capacity(bytes.len() * 2);
        for b in bytes.iter() {
            out.push_str(&format!("{b:02x}"));
        }
        s.serialize_str(&out)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Bytes, D::Error> {
        let s = String::deserialize(d)?;
        if s.len() % 2 != 0 {
            return Err(D::Error::custom("odd hex length"));
        }
        (0..s.len())
            .step_by(2)
            .map(|i| s.get(i..i + 2).and_then(|h| u8::from_str_radix(h, 16).ok()).ok_or_else(|| D::Error::custom("bad hex")))
            .collect::<Result<Vec<u8>, _>>()
            .map(Bytes::from)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_values_round_trip() {
        let k = Key::offset("g/1", "t\"x", 3);
        assert_eq!(Key::parse(&k), Some(Key::Offset { g: "g/1".into(), t: "t\"x".into(), p: 3 }));
        assert_eq!(Key::parse(&Key::group("g")), Some(Key::Group { g: "g".into() }));
        assert_eq!(Key::parse("junk"), None);
        let m = MemberValue {
            id: "m".into(),
            instance_id: None,
            client_id: "c".into(),
            client_host: "/127.0.0.1".into(),
            session_timeout_ms: 10,
            rebalance_timeout_ms: 20,
            subscription: Bytes::from_static(&[0, 1, 0xff]),
            assignment: Bytes::new(),
        };
        let json = serde_json::to_string(&m).unwrap();
        assert!(json.contains("\"0001ff\""));
        assert_eq!(serde_json::from_str::<MemberValue>(&json).unwrap(), m);
    }
}
