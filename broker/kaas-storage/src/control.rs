//! Transaction markers: the control batches a transaction coordinator writes into every
//! partition of a transaction when it commits or aborts (Kafka's `EndTransactionMarker`).
//!
//! A marker is a v2 batch with the transactional and control attribute bits set, one record,
//! no sequence, whose key is `version: i16 = 0, type: i16` (0 abort, 1 commit) and whose value
//! is `version: i16 = 0, coordinatorEpoch: i32`. The engine writes markers itself (clients may
//! not append control batches) and reads their type back when replaying the log.

use crate::batch::{BatchHeader, CONTROL_BIT, HEADER_LEN, TRANSACTIONAL_BIT, read_varint};

/// How a transaction ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkerKind {
    /// The transaction's records are dropped by read_committed consumers.
    Abort,
    /// The transaction's records become visible to read_committed consumers.
    Commit,
}

impl MarkerKind {
    fn code(self) -> i16 {
        match self {
            MarkerKind::Abort => 0,
            MarkerKind::Commit => 1,
        }
    }
}

/// A marker to append: which producer's transaction ends, and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Marker {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub kind: MarkerKind,
    /// The epoch of the coordinator shard that decided the outcome.
    pub coordinator_epoch: i32,
}

/// Encodes a marker batch at offset 0 (the append patches the offset and leader epoch).
pub(crate) fn build(marker: &Marker, now_ms: i64) -> Vec<u8> {
    let mut record = vec![0u8]; // record attributes
    put_varint(&mut record, 0); // timestamp delta
    put_varint(&mut record, 0); // offset delta
    put_varint(&mut record, 4);
    record.extend_from_slice(&0i16.to_be_bytes());
    record.extend_from_slice(&marker.kind.code().to_be_bytes());
    put_varint(&mut record, 6);
    record.extend_from_slice(&0i16.to_be_bytes());
    record.extend_from_slice(&marker.coordinator_epoch.to_be_bytes());
    put_varint(&mut record, 0); // headers
    let mut body = Vec::with_capacity(record.len() + 2);
    put_varint(&mut body, record.len() as i64);
    body.extend_from_slice(&record);

    let mut b = Vec::with_capacity(HEADER_LEN + body.len());
    b.extend_from_slice(&0i64.to_be_bytes());
    b.extend_from_slice(&((HEADER_LEN - 12 + body.len()) as i32).to_be_bytes());
    b.extend_from_slice(&(-1i32).to_be_bytes());
    b.push(2);
    b.extend_from_slice(&[0; 4]);
    b.extend_from_slice(&(TRANSACTIONAL_BIT | CONTROL_BIT).to_be_bytes());
    b.extend_from_slice(&0i32.to_be_bytes()); // lastOffsetDelta
    b.extend_from_slice(&now_ms.to_be_bytes());
    b.extend_from_slice(&now_ms.to_be_bytes());
    b.extend_from_slice(&marker.producer_id.to_be_bytes());
    b.extend_from_slice(&marker.producer_epoch.to_be_bytes());
    b.extend_from_slice(&(-1i32).to_be_bytes()); // baseSequence
    b.extend_from_slice(&1i32.to_be_bytes()); // record count
    b.extend_from_slice(&body);
    let crc = crc32c::crc32c(&b[21..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    b
}

/// The kind and coordinator epoch of the marker in a control batch (`batch` is the whole
/// batch), `None` if it is not a marker this engine understands (Kafka also has other control
/// types, never written here).
pub(crate) fn marker_of(header: &BatchHeader, batch: &[u8]) -> Option<(MarkerKind, i32)> {
    if !header.is_control() || header.is_compressed() {
        return None;
    }
    let rest = batch.get(HEADER_LEN..)?;
    let (_, n) = read_varint(rest)?; // record length
    let rest = rest.get(n + 1..)?; // + record attributes
    let (_, n) = read_varint(rest)?; // timestamp delta
    let rest = rest.get(n..)?;
    let (_, n) = read_varint(rest)?; // offset delta
    let rest = rest.get(n..)?;
    let (key_len, n) = read_varint(rest)?;
    if key_len < 4 {
        return None;
    }
    let key = rest.get(n..n + 4)?;
    let kind = match i16::from_be_bytes([key[2], key[3]]) {
        0 => MarkerKind::Abort,
        1 => MarkerKind::Commit,
        _ => return None,
    };
    let rest = rest.get(n + usize::try_from(key_len).ok()?..)?;
    let (value_len, n) = read_varint(rest)?;
    if value_len < 6 {
        return None;
    }
    let value = rest.get(n + 2..n + 6)?; // after the value's version
    Some((kind, i32::from_be_bytes(value.try_into().ok()?)))
}

pub(crate) fn put_varint(out: &mut Vec<u8>, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    loop {
        let byte = (z & 0x7f) as u8;
        z >>= 7;
        if z == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::batch::{Limits, parse_header, validate_request};

    #[test]
    fn markers_round_trip_and_are_valid_batches() {
        for kind in [MarkerKind::Abort, MarkerKind::Commit] {
            let m = Marker {
                producer_id: 42,
                producer_epoch: 3,
                kind,
                coordinator_epoch: 7,
            };
            let b = build(&m, 1_000);
            let h = parse_header(&b).unwrap();
            crate::batch::verify_crc(&h, &b).unwrap();
            assert!(h.is_control() && h.is_transactional());
            assert_eq!(
                (h.producer_id, h.producer_epoch, h.record_count),
                (42, 3, 1)
            );
            assert_eq!(marker_of(&h, &b), Some((kind, 7)));
            // Clients may not append them.
            assert!(matches!(
                validate_request(&b, &Limits::lenient()),
                Err(crate::Error::InvalidRecord(
                    crate::RecordError::ControlBatch
                ))
            ));
        }
    }
}
