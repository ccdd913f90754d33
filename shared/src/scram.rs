//! The salted SCRAM credential (RFC 5802 section 3, RFC 7677) a password becomes, as Kafka
//! stores it: the operator derives it for KafkaUsers, the broker for `kaas scram-credential` and
//! AlterUserScramCredentials, and the broker's SCRAM exchange checks proofs against it. Only
//! salted credentials are ever stored; a password never reaches the volume.

use base64::engine::general_purpose::STANDARD as B64;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256, Sha512};
use subtle::ConstantTimeEq;

/// The hash a SCRAM mechanism is built on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum ScramHash {
    #[serde(rename = "SCRAM-SHA-256")]
    Sha256,
    #[serde(rename = "SCRAM-SHA-512")]
    Sha512,
}

impl ScramHash {
    pub fn mechanism(self) -> &'static str {
        match self {
            ScramHash::Sha256 => "SCRAM-SHA-256",
            ScramHash::Sha512 => "SCRAM-SHA-512",
        }
    }

    /// Kafka's ScramMechanism code (DescribeUserScramCredentials, AlterUserScramCredentials).
    pub fn kafka_code(self) -> i8 {
        match self {
            ScramHash::Sha256 => 1,
            ScramHash::Sha512 => 2,
        }
    }

    pub fn from_kafka_code(code: i8) -> Option<ScramHash> {
        match code {
            1 => Some(ScramHash::Sha256),
            2 => Some(ScramHash::Sha512),
            _ => None,
        }
    }

    /// Kafka's bounds on the iteration count.
    pub fn iterations_allowed(self, iterations: u32) -> bool {
        (4096..=16384).contains(&iterations)
    }

    pub fn hmac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        match self {
            ScramHash::Sha256 => mac::<Hmac<Sha256>>(key, data),
            ScramHash::Sha512 => mac::<Hmac<Sha512>>(key, data),
        }
    }

    pub fn hash(self, data: &[u8]) -> Vec<u8> {
        match self {
            ScramHash::Sha256 => Sha256::digest(data).to_vec(),
            ScramHash::Sha512 => Sha512::digest(data).to_vec(),
        }
    }

    pub fn salted_password(self, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
        match self {
            ScramHash::Sha256 => {
                pbkdf2::pbkdf2_hmac_array::<Sha256, 32>(password, salt, iterations).to_vec()
            }
            ScramHash::Sha512 => {
                pbkdf2::pbkdf2_hmac_array::<Sha512, 64>(password, salt, iterations).to_vec()
            }
        }
    }
}

fn mac<M: Mac + hmac::digest::KeyInit>(key: &[u8], data: &[u8]) -> Vec<u8> {
    // NB: HMAC takes keys of any length, so this cannot fail.
    match <M as hmac::digest::KeyInit>::new_from_slice(key) {
        Ok(mut m) => {
            m.update(data);
            m.finalize().into_bytes().to_vec()
        }
        Err(_) => Vec::new(),
    }
}

/// What is stored for one user and mechanism (RFC 5802 section 3).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScramCredential {
    #[serde(with = "b64")]
    pub salt: Vec<u8>,
    pub iterations: u32,
    #[serde(with = "b64")]
    pub stored_key: Vec<u8>,
    #[serde(with = "b64")]
    pub server_key: Vec<u8>,
}

impl ScramCredential {
    /// The credential `password` becomes with `salt` and `iterations`.
    pub fn derive(
        hash: ScramHash,
        password: &[u8],
        salt: &[u8],
        iterations: u32,
    ) -> ScramCredential {
        let salted = hash.salted_password(password, salt, iterations);
        Self::from_salted_password(hash, &salted, salt, iterations)
    }

    /// The credential of an already salted password (AlterUserScramCredentials sends those).
    pub fn from_salted_password(
        hash: ScramHash,
        salted: &[u8],
        salt: &[u8],
        iterations: u32,
    ) -> ScramCredential {
        let client_key = hash.hmac(salted, b"Client Key");
        ScramCredential {
            salt: salt.to_vec(),
            iterations,
            stored_key: hash.hash(&client_key),
            server_key: hash.hmac(salted, b"Server Key"),
        }
    }

    /// Whether `password` is the one this credential was derived from (SASL/PLAIN checks
    /// passwords against the same stored credentials).
    pub fn matches_password(&self, hash: ScramHash, password: &[u8]) -> bool {
        let candidate = Self::derive(hash, password, &self.salt, self.iterations);
        bool::from(candidate.stored_key.ct_eq(&self.stored_key))
    }
}

mod b64 {
    use super::B64;
    use base64::Engine as _;
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&B64.encode(bytes))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(d)?;
        B64.decode(text.as_bytes())
            .map_err(serde::de::Error::custom)
    }
}

/// Random printable text for a server nonce or a salt.
pub fn random_bytes<const N: usize>() -> [u8; N] {
    let mut bytes = [0u8; N];
    // NB: the OS random source does not fail on Linux once booted; if it ever did, a zeroed
    // nonce still completes a correct exchange (it only weakens replay protection), so the
    // error is not worth refusing every client over.
    let _ = getrandom::fill(&mut bytes);
    bytes
}
