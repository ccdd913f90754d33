//! The framing shared by shard logs and snapshots: `[len: u32][crc32c: u32][payload]`, the
//! payload a run of entries `[key_len: u32][key][value_len: i32, -1 = tombstone][value]`.
//! One frame is one atomic change: a crash tears at most the last frame, which the CRC exposes.

/// The largest frame accepted: a length beyond it is garbage, not a frame.
pub(crate) const MAX_FRAME: usize = 64 * 1024 * 1024;
const HEADER: usize = 8;

/// One key/value change; `value: None` deletes the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub key: String,
    pub value: Option<Vec<u8>>,
}

impl Entry {
    /// Sets `key` to `value`.
    pub fn put(key: impl Into<String>, value: Vec<u8>) -> Entry {
        Entry {
            key: key.into(),
            value: Some(value),
        }
    }

    /// Deletes `key`.
    pub fn delete(key: impl Into<String>) -> Entry {
        Entry {
            key: key.into(),
            value: None,
        }
    }

    fn encoded_len(&self) -> usize {
        8 + self.key.len() + self.value.as_ref().map_or(0, Vec::len)
    }
}

/// Encodes entries as one frame; `None` if the frame would exceed [`MAX_FRAME`].
pub(crate) fn encode<'a>(entries: impl IntoIterator<Item = &'a Entry> + Clone) -> Option<Vec<u8>> {
    let len: usize = entries.clone().into_iter().map(Entry::encoded_len).sum();
    if len > MAX_FRAME {
        return None;
    }
    let mut out = Vec::with_capacity(HEADER + len);
    out.extend_from_slice(&(len as u32).to_be_bytes());
    out.extend_from_slice(&[0; 4]);
    for e in entries {
        out.extend_from_slice(&(e.key.len() as u32).to_be_bytes());
        out.extend_from_slice(e.key.as_bytes());
        match &e.value {
            Some(v) => {
                out.extend_from_slice(&(v.len() as i32).to_be_bytes());
                out.extend_from_slice(v);
            }
            None => out.extend_from_slice(&(-1i32).to_be_bytes()),
        }
    }
    let crc = crc32c::crc32c(&out[HEADER..]);
    out[4..8].copy_from_slice(&crc.to_be_bytes());
    Some(out)
}

/// What decoding a file found.
#[derive(Debug, Default)]
pub(crate) struct Decoded {
    /// Entries of every complete, valid frame, in order.
    pub(crate) entries: Vec<Entry>,
    /// Bytes covered by those frames.
    pub(crate) valid_len: usize,
}

/// Decodes frames from the start of `bytes`, stopping at the first torn or corrupt frame.
pub(crate) fn decode(bytes: &[u8]) -> Decoded {
    let mut out = Decoded::default();
    let mut pos = 0;
    while let Some(header) = bytes.get(pos..pos + HEADER) {
        let len = u32::from_be_bytes([header[0], header[1], header[2], header[3]]) as usize;
        let crc = u32::from_be_bytes([header[4], header[5], header[6], header[7]]);
        if len > MAX_FRAME {
            break;
        }
        let Some(payload) = bytes.get(pos + HEADER..pos + HEADER + len) else {
            break;
        };
        if crc32c::crc32c(payload) != crc {
            break;
        }
        let Some(entries) = decode_payload(payload) else {
            break;
        };
        out.entries.extend(entries);
        pos += HEADER + len;
        out.valid_len = pos;
    }
    out
}

fn decode_payload(mut p: &[u8]) -> Option<Vec<Entry>> {
    let mut entries = Vec::new();
    while !p.is_empty() {
        let key_len = u32::from_be_bytes(p.get(..4)?.try_into().ok()?) as usize;
        let key = std::str::from_utf8(p.get(4..4 + key_len)?).ok()?.to_owned();
        p = &p[4 + key_len..];
        let value_len = i32::from_be_bytes(p.get(..4)?.try_into().ok()?);
        p = &p[4..];
        let value = if value_len < 0 {
            None
        } else {
            let v = p.get(..value_len as usize)?.to_vec();
            p = &p[value_len as usize..];
            Some(v)
        };
        entries.push(Entry { key, value });
    }
    Some(entries)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_torn_tails_are_cut() {
        let a = [Entry::put("k1", b"v1".to_vec()), Entry::delete("k2")];
        let b = [Entry::put("k3", vec![])];
        let mut bytes = encode(&a).unwrap();
        let first = bytes.len();
        bytes.extend(encode(&b).unwrap());
        let all = decode(&bytes);
        assert_eq!(all.entries.len(), 3);
        assert_eq!(all.valid_len, bytes.len());
        // Every cut inside the second frame keeps exactly the first.
        for cut in first..bytes.len() {
            let d = decode(&bytes[..cut]);
            assert_eq!(d.entries, a.to_vec());
            assert_eq!(d.valid_len, first);
        }
        // A flipped bit in the second frame is caught by the CRC.
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        assert_eq!(decode(&bytes).valid_len, first);
    }
}
