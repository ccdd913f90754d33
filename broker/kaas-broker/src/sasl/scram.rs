//! SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka's brokers speak them: the
//! server side of the exchange, and the salted credential a password becomes. Only salted
//! credentials are ever stored; the password never reaches the broker's disk.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
pub use kaas_shared::scram::{ScramCredential, ScramHash, random_bytes};
use subtle::ConstantTimeEq;

/// Why a SCRAM exchange failed; the client is told only that authentication failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScramError {
    #[error("malformed SCRAM message: {0}")]
    Malformed(&'static str),
    #[error("channel binding is not supported")]
    ChannelBinding,
    #[error("unknown user or wrong password")]
    BadCredentials,
    #[error("the exchange is already over")]
    Finished,
}

/// The server side of one exchange: client-first, server-first, client-final, server-final.
#[derive(Debug)]
pub struct ScramServer {
    hash: ScramHash,
    state: State,
}

#[derive(Debug)]
enum State {
    Initial { server_nonce: String },
    SentFirst { user: String, credential: ScramCredential, client_first_bare: String, server_first: String, gs2_header: String, nonce: String },
    Done,
}

/// What the user of a finished exchange is and what to send back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScramStep {
    /// Send this and wait for the next client message.
    Continue(Vec<u8>),
    /// Authenticated as this user; send the server-final message.
    Done { user: String, server_final: Vec<u8> },
}

impl ScramServer {
    /// A new exchange; `server_nonce` is random printable text (tests pass a fixed one).
    pub fn new(hash: ScramHash, server_nonce: String) -> ScramServer {
        ScramServer { hash, state: State::Initial { server_nonce } }
    }

    /// Takes the next client message. `lookup` finds a user's credential for this mechanism.
    pub fn step(&mut self, message: &[u8], lookup: impl FnOnce(&str) -> Option<ScramCredential>) -> Result<ScramStep, ScramError> {
        let message = std::str::from_utf8(message).map_err(|_| ScramError::Malformed("not UTF-8"))?;
        match std::mem::replace(&mut self.state, State::Done) {
            State::Initial { server_nonce } => self.client_first(message, &server_nonce, lookup),
            State::SentFirst { user, credential, client_first_bare, server_first, gs2_header, nonce } => {
                self.client_final(message, &user, &credential, &client_first_bare, &server_first, &gs2_header, &nonce)
            }
            State::Done => Err(ScramError::Finished),
        }
    }

    fn client_first(&mut self, message: &str, server_nonce: &str, lookup: impl FnOnce(&str) -> Option<ScramCredential>) -> Result<ScramStep, ScramError> {
        // gs2-header: a channel-binding flag, an optional authzid, then the bare message.
        let mut parts = message.splitn(3, ',');
        let (flag, authzid, bare) = match (parts.next(), parts.next(), parts.next()) {
            (Some(f), Some(a), Some(b)) => (f, a, b),
            _ => return Err(ScramError::Malformed("client-first has no gs2 header")),
        };
        match flag {
            "n" | "y" => {}
            f if f.starts_with("p=") => return Err(ScramError::ChannelBinding),
            _ => return Err(ScramError::Malformed("bad channel-binding flag")),
        }
        let gs2_header = format!("{flag},{authzid},");
        let mut fields = bare.split(',');
        let user = fields.next().and_then(|f| f.strip_prefix("n=")).ok_or(ScramError::Malformed("client-first has no user name"))?;
        let client_nonce = fields.next().and_then(|f| f.strip_prefix("r=")).ok_or(ScramError::Malformed("client-first has no nonce"))?;
        // Further fields are extensions (Kafka's tokenauth); none is supported, all are ignored.
        let user = unescape(user)?;
        if client_nonce.is_empty() || !client_nonce.bytes().all(|b| (0x21..=0x7e).contains(&b) && b != b',') {
            return Err(ScramError::Malformed("client nonce is not printable"));
        }
        if let Some(authzid) = authzid.strip_prefix("a=") {
            // Kafka allows an authorization id only when it names the user itself.
            if unescape(authzid)? != user {
                return Err(ScramError::BadCredentials);
            }
        }
        let credential = lookup(&user).ok_or(ScramError::BadCredentials)?;
        let nonce = format!("{client_nonce}{server_nonce}");
        let server_first = format!("r={nonce},s={},i={}", B64.encode(&credential.salt), credential.iterations);
        let reply = server_first.clone().into_bytes();
        self.state = State::SentFirst { user, credential, client_first_bare: bare.to_string(), server_first, gs2_header, nonce };
        Ok(ScramStep::Continue(reply))
    }

    #[allow(clippy::too_many_arguments)]
    fn client_final(&mut self, message: &str, user: &str, credential: &ScramCredential, client_first_bare: &str, server_first: &str, gs2_header: &str, nonce: &str) -> Result<ScramStep, ScramError> {
        let (without_proof, proof) = message.rsplit_once(",p=").ok_or(ScramError::Malformed("client-final has no proof"))?;
        let mut fields = without_proof.split(',');
        let binding = fields.next().and_then(|f| f.strip_prefix("c=")).ok_or(ScramError::Malformed("client-final has no channel binding"))?;
        let their_nonce = fields.next().and_then(|f| f.strip_prefix("r=")).ok_or(ScramError::Malformed("client-final has no nonce"))?;
        if B64.decode(binding).ok().as_deref() != Some(gs2_header.as_bytes()) {
            return Err(ScramError::Malformed("channel binding does not repeat the gs2 header"));
        }
        if their_nonce != nonce {
            return Err(ScramError::Malformed("nonce changed"));
        }
        let proof = B64.decode(proof).map_err(|_| ScramError::Malformed("proof is not base64"))?;
        let auth_message = format!("{client_first_bare},{server_first},{without_proof}");
        let client_signature = self.hash.hmac(&credential.stored_key, auth_message.as_bytes());
        if proof.len() != client_signature.len() {
            return Err(ScramError::BadCredentials);
        }
        let client_key: Vec<u8> = proof.iter().zip(&client_signature).map(|(p, s)| p ^ s).collect();
        if !bool::from(self.hash.hash(&client_key).ct_eq(&credential.stored_key)) {
            return Err(ScramError::BadCredentials);
        }
        let server_signature = self.hash.hmac(&credential.server_key, auth_message.as_bytes());
        Ok(ScramStep::Done { user: user.to_string(), server_final: format!("v={}", B64.encode(server_signature)).into_bytes() })
    }
}

/// A SCRAM user name with `=2C` and `=3D` decoded.
fn unescape(name: &str) -> Result<String, ScramError> {
    let mut out = String::with_capacity(name.len());
    let mut rest = name;
    while let Some(i) = rest.find('=') {
        out.push_str(&rest[..i]);
        match rest.get(i..i + 3) {
            Some("=2C") => out.push(','),
            Some("=3D") => out.push('='),
            _ => return Err(ScramError::Malformed("bad escape in user name")),
        }
        rest = &rest[i + 3..];
    }
    out.push_str(rest);
    if out.is_empty() {
        return Err(ScramError::Malformed("empty user name"));
    }
    Ok(out)
}

/// A client's proof for `auth_message` (tests play the client side with it).
#[cfg(test)]
pub(crate) fn client_proof(hash: ScramHash, password: &[u8], salt: &[u8], iterations: u32, auth_message: &str) -> Vec<u8> {
    let salted = hash.salted_password(password, salt, iterations);
    let client_key = hash.hmac(&salted, b"Client Key");
    let signature = hash.hmac(&hash.hash(&client_key), auth_message.as_bytes());
    client_key.iter().zip(signature).map(|(k, s)| k ^ s).collect()
}

pub fn random_nonce() -> String {
    B64.encode(random_bytes::<24>())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// RFC 7677's example exchange, byte for byte.
    #[test]
    fn rfc_7677_sha_256_example() {
        let salt = B64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        let credential = ScramCredential::derive(ScramHash::Sha256, b"pencil", &salt, 4096);
        let mut server = ScramServer::new(ScramHash::Sha256, "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0".into());
        let first = server.step(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO", |u| (u == "user").then(|| credential.clone())).unwrap();
        assert_eq!(
            first,
            ScramStep::Continue(b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096".to_vec())
        );
        let last = server
            .step(b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=", |_| None)
            .unwrap();
        assert_eq!(last, ScramStep::Done { user: "user".into(), server_final: b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=".to_vec() });
        assert_eq!(server.step(b"again", |_| None), Err(ScramError::Finished));
    }

    #[test]
    fn a_wrong_password_an_unknown_user_and_a_changed_nonce_fail() {
        let salt = B64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        let credential = ScramCredential::derive(ScramHash::Sha256, b"not-pencil", &salt, 4096);
        let mut server = ScramServer::new(ScramHash::Sha256, "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0".into());
        server.step(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO", |_| Some(credential.clone())).unwrap();
        let proof = b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
        assert_eq!(server.step(proof, |_| None), Err(ScramError::BadCredentials));

        let mut server = ScramServer::new(ScramHash::Sha256, "x".into());
        assert_eq!(server.step(b"n,,n=nobody,r=abc", |_| None), Err(ScramError::BadCredentials));

        let mut server = ScramServer::new(ScramHash::Sha256, "srv".into());
        server.step(b"n,,n=user,r=abc", |_| Some(credential.clone())).unwrap();
        assert_eq!(server.step(b"c=biws,r=abcOTHER,p=AAAA", |_| None), Err(ScramError::Malformed("nonce changed")));
    }

    #[test]
    fn malformed_first_messages_are_refused() {
        for bad in [&b""[..], b"n,,", b"x,,n=u,r=a", b"p=tls-unique,,n=u,r=a", b"n,,n=u=ZZ,r=a", b"n,,r=a", b"\xff\xfe"] {
            let mut server = ScramServer::new(ScramHash::Sha512, "s".into());
            assert!(server.step(bad, |_| None).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn names_unescape_and_plain_passwords_check_against_the_credential() {
        assert_eq!(unescape("a=2Cb=3Dc").unwrap(), "a,b=c");
        let c = ScramCredential::derive(ScramHash::Sha512, b"secret", b"salt", 4096);
        assert!(c.matches_password(ScramHash::Sha512, b"secret"));
        assert!(!c.matches_password(ScramHash::Sha512, b"Secret"));
        let json = serde_json::to_string(&c).unwrap();
        assert_eq!(serde_json::from_str::<ScramCredential>(&json).unwrap(), c);
    }
}
