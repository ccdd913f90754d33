//! `__cluster/interbroker.key`: the secret brokers prove to each other that they are brokers
//! with (the heartbeat, transaction markers, transaction verification).
//!
//! The volume is the cluster's trust boundary already — whoever can write it can rewrite every
//! partition — so a secret kept on it is as safe as the data and needs no distribution: the first
//! broker of a cluster creates it, every broker reads it at start. Creation is an exclusive
//! create of a fully written, fsynced file (seed 001's primitive): of brokers starting at once
//! exactly one wins and the others read the winner's key; the file is never rewritten, so no
//! epoch fences it.
//!
//! A proof is a token `kaas1.<broker id>.<unix ms>.<hex HMAC-SHA256>` over a purpose (what the
//! token may be used for), the broker id, the time and a payload (a request's bytes): it does not
//! reveal the key, cannot be moved to another purpose or request, and expires. Within its
//! lifetime it can be replayed by someone who saw it, which repeats the very same request:
//! every request signed this way is idempotent (markers, verification, a heartbeat stream open).

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::atomic_file::create_exclusive;
use crate::fs::{Fs, read_optional};
use crate::layout::Layout;
use crate::{Error, Result};

/// How far a token's time may be from the verifier's clock (either way): clock skew between
/// nodes plus a request's time in flight.
pub const TOKEN_LIFETIME: Duration = Duration::from_secs(300);

const TOKEN_PREFIX: &str = "kaas1";
const KEY_BYTES: usize = 32;

/// The cluster's inter-broker secret.
#[derive(Clone)]
pub struct InterBrokerKey {
    key: [u8; KEY_BYTES],
}

impl std::fmt::Debug for InterBrokerKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("InterBrokerKey(..)")
    }
}

/// Why a token was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error("no inter-broker token")]
    Missing,
    #[error("malformed inter-broker token")]
    Malformed,
    #[error("inter-broker token outside its lifetime (clock skew between nodes?)")]
    Expired,
    #[error("inter-broker token signed with another key or for another request")]
    BadSignature,
}

impl InterBrokerKey {
    /// The volume's key, made now if the volume has none.
    pub fn load_or_create(fs: &dyn Fs, layout: &Layout) -> Result<InterBrokerKey> {
        let path = layout.interbroker_key_file();
        if let Some(key) = Self::read(fs, &path)? {
            return Ok(key);
        }
        let mut fresh = [0u8; KEY_BYTES];
        getrandom::fill(&mut fresh)
            .map_err(|e| Error::io("random", &path, std::io::Error::other(e.to_string())))?;
        let dir = layout.cluster_dir();
        fs.create_dir_all(&dir)
            .map_err(|e| Error::io("mkdir", &dir, e))?;
        // Losing the race to another broker is fine: its key is the cluster's.
        create_exclusive(fs, &path, format!("{}\n", hex(&fresh)).as_bytes())?;
        Self::read(fs, &path)?
            .ok_or_else(|| Error::io("read", &path, std::io::ErrorKind::NotFound.into()))
    }

    fn read(fs: &dyn Fs, path: &Path) -> Result<Option<InterBrokerKey>> {
        let Some(bytes) = read_optional(fs, path).map_err(|e| Error::io("read", path, e))? else {
            return Ok(None);
        };
        let malformed = || {
            Error::io(
                "parse",
                path,
                std::io::Error::other(format!("not {KEY_BYTES} bytes in hex")),
            )
        };
        let text = std::str::from_utf8(&bytes).map_err(|_| malformed())?.trim();
        let decoded = unhex(text).ok_or_else(malformed)?;
        let key: [u8; KEY_BYTES] = decoded.try_into().map_err(|_| malformed())?;
        Ok(Some(InterBrokerKey { key }))
    }

    /// A key for tests.
    pub fn from_bytes(key: [u8; KEY_BYTES]) -> InterBrokerKey {
        InterBrokerKey { key }
    }

    /// A token by which broker `broker_id` proves, now, that it sends `payload` for `purpose`.
    pub fn token(&self, purpose: &str, broker_id: i32, payload: &[u8]) -> String {
        self.token_at(purpose, broker_id, payload, now_ms())
    }

    fn token_at(&self, purpose: &str, broker_id: i32, payload: &[u8], at_ms: i64) -> String {
        format!(
            "{TOKEN_PREFIX}.{broker_id}.{at_ms}.{}",
            hex(&self.mac(purpose, broker_id, at_ms, payload))
        )
    }

    /// The broker id `token` proves it came from, if it is this key's token for `purpose` and
    /// `payload` and within its lifetime.
    pub fn verify(
        &self,
        token: &str,
        purpose: &str,
        payload: &[u8],
    ) -> std::result::Result<i32, TokenError> {
        self.verify_at(token, purpose, payload, now_ms())
    }

    fn verify_at(
        &self,
        token: &str,
        purpose: &str,
        payload: &[u8],
        now: i64,
    ) -> std::result::Result<i32, TokenError> {
        if token.is_empty() {
            return Err(TokenError::Missing);
        }
        let mut parts = token.split('.');
        let (Some(TOKEN_PREFIX), Some(id), Some(at), Some(mac), None) = (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        ) else {
            return Err(TokenError::Malformed);
        };
        let (Ok(broker_id), Ok(at_ms), Some(mac)) =
            (id.parse::<i32>(), at.parse::<i64>(), unhex(mac))
        else {
            return Err(TokenError::Malformed);
        };
        if now.abs_diff(at_ms) > TOKEN_LIFETIME.as_millis() as u64 {
            return Err(TokenError::Expired);
        }
        // verify_slice compares in constant time.
        self.hmac(purpose, broker_id, at_ms, payload)
            .verify_slice(&mac)
            .map_err(|_| TokenError::BadSignature)?;
        Ok(broker_id)
    }

    fn hmac(&self, purpose: &str, broker_id: i32, at_ms: i64, payload: &[u8]) -> Hmac<Sha256> {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.key)
            .expect("HMAC takes a key of any length");
        // Lengths first, so that no two (purpose, payload) pairs feed the same bytes.
        mac.update(&(purpose.len() as u64).to_be_bytes());
        mac.update(purpose.as_bytes());
        mac.update(&broker_id.to_be_bytes());
        mac.update(&at_ms.to_be_bytes());
        mac.update(&(payload.len() as u64).to_be_bytes());
        mac.update(payload);
        mac
    }

    fn mac(&self, purpose: &str, broker_id: i32, at_ms: i64, payload: &[u8]) -> [u8; 32] {
        self.hmac(purpose, broker_id, at_ms, payload)
            .finalize()
            .into_bytes()
            .into()
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) || !text.is_ascii() {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).ok())
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::fs::MemFs;

    #[test]
    fn the_first_broker_creates_the_key_and_the_others_read_it() {
        let fs = MemFs::default();
        let layout = Layout::new("/data");
        let first = InterBrokerKey::load_or_create(&fs, &layout).unwrap();
        let second = InterBrokerKey::load_or_create(&fs, &layout).unwrap();
        assert_eq!(first.key, second.key);
        let token = first.token("p", 1, b"x");
        assert_eq!(second.verify(&token, "p", b"x"), Ok(1));
    }

    #[test]
    fn a_lost_creation_race_reads_the_winners_key() {
        let fs = MemFs::default();
        let layout = Layout::new("/data");
        fs.create_dir_all(&layout.cluster_dir()).unwrap();
        let winner = [7u8; KEY_BYTES];
        create_exclusive(
            &fs,
            &layout.interbroker_key_file(),
            format!("{}\n", hex(&winner)).as_bytes(),
        )
        .unwrap();
        assert_eq!(
            InterBrokerKey::load_or_create(&fs, &layout).unwrap().key,
            winner
        );
    }

    #[test]
    fn a_malformed_key_file_is_an_error_not_a_new_key() {
        let fs = MemFs::default();
        let layout = Layout::new("/data");
        fs.create_dir_all(&layout.cluster_dir()).unwrap();
        create_exclusive(&fs, &layout.interbroker_key_file(), b"not hex\n").unwrap();
        assert!(InterBrokerKey::load_or_create(&fs, &layout).is_err());
    }

    #[test]
    fn a_token_proves_its_broker_purpose_payload_and_time() {
        let key = InterBrokerKey::from_bytes([1; KEY_BYTES]);
        let other = InterBrokerKey::from_bytes([2; KEY_BYTES]);
        let now = 1_800_000_000_000;
        let token = key.token_at("kafka:27:1", 3, b"body", now);
        assert_eq!(
            key.verify_at(&token, "kafka:27:1", b"body", now + 1_000),
            Ok(3)
        );
        assert_eq!(
            other.verify_at(&token, "kafka:27:1", b"body", now),
            Err(TokenError::BadSignature)
        );
        assert_eq!(
            key.verify_at(&token, "kafka:24:4", b"body", now),
            Err(TokenError::BadSignature)
        );
        assert_eq!(
            key.verify_at(&token, "kafka:27:1", b"other body", now),
            Err(TokenError::BadSignature)
        );
        let lifetime = TOKEN_LIFETIME.as_millis() as i64;
        assert_eq!(
            key.verify_at(&token, "kafka:27:1", b"body", now + lifetime + 1),
            Err(TokenError::Expired)
        );
        assert_eq!(
            key.verify_at(&token, "kafka:27:1", b"body", now - lifetime - 1),
            Err(TokenError::Expired)
        );
        // Another broker id in a copied token breaks the signature.
        let forged = token.replacen(".3.", ".4.", 1);
        assert_eq!(
            key.verify_at(&forged, "kafka:27:1", b"body", now),
            Err(TokenError::BadSignature)
        );
        for bad in [
            "kafka-interbroker",
            "kaas1.3.x.00",
            "kaas1.3.1.zz",
            "kaas2.3.1.00",
            "kaas1.3.1.00.extra",
        ] {
            assert_eq!(
                key.verify_at(bad, "kafka:27:1", b"body", now),
                Err(TokenError::Malformed),
                "{bad}"
            );
        }
        assert_eq!(
            key.verify_at("", "kafka:27:1", b"body", now),
            Err(TokenError::Missing)
        );
    }
}
