//! SASL on the Kafka listener (KIP-43, KIP-152, KIP-368): which requests a connection may send
//! before it authenticated, the SaslHandshake/SaslAuthenticate exchange, and re-authentication.
//!
//! A connection to a SASL listener may send only ApiVersions, SaslHandshake and SaslAuthenticate
//! until it authenticated; anything else closes it, as Kafka does. With
//! `connections.max.reauth.ms`, the session ends after that long: the client re-authenticates
//! (same user only) or the connection is closed at its next request.

pub mod credentials;
pub mod jwks_endpoint;
pub mod oauthbearer;
pub mod scram;

use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::ApiKey;
use tokio::time::Instant;

use self::credentials::CredentialStore;
use self::oauthbearer::OAuthBearer;
use self::scram::{ScramError, ScramHash, ScramServer, ScramStep};

/// The shortest session an OAUTHBEARER login gets when re-authentication is on: a token
/// accepted within the clock-skew leeway may already have expired.
const MIN_TOKEN_SESSION: Duration = Duration::from_secs(1);

/// A SASL mechanism the listener can offer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mechanism {
    Plain,
    Scram(ScramHash),
    OAuthBearer,
}

impl Mechanism {
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Plain => "PLAIN",
            Mechanism::Scram(hash) => hash.mechanism(),
            Mechanism::OAuthBearer => "OAUTHBEARER",
        }
    }

    pub fn parse(name: &str) -> Option<Mechanism> {
        match name {
            "PLAIN" => Some(Mechanism::Plain),
            "SCRAM-SHA-256" => Some(Mechanism::Scram(ScramHash::Sha256)),
            "SCRAM-SHA-512" => Some(Mechanism::Scram(ScramHash::Sha512)),
            "OAUTHBEARER" => Some(Mechanism::OAuthBearer),
            _ => None,
        }
    }
}

/// SASL on a listener (`sasl.enabled.mechanisms`, the credentials, `connections.max.reauth.ms`).
#[derive(Debug, Clone)]
pub struct SaslSettings {
    pub mechanisms: Vec<Mechanism>,
    /// The SCRAM credentials PLAIN and SCRAM check (`--sasl-credentials`); `None` when only
    /// OAUTHBEARER is enabled.
    pub credentials: Option<Arc<CredentialStore>>,
    /// How OAUTHBEARER tokens are checked, when it is enabled.
    pub oauth: Option<Arc<OAuthBearer>>,
    /// `connections.max.reauth.ms`; `None` (Kafka's 0): sessions do not expire.
    pub reauth: Option<Duration>,
}

/// Why a request is not served on this connection; the connection is closed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Gate {
    #[error("{0:?} before SASL authentication completed")]
    NotAuthenticated(ApiKey),
    #[error("the SASL session expired (connections.max.reauth.ms) and was not re-authenticated")]
    Expired,
    #[error("SASL authentication failed earlier on this connection")]
    Failed,
}

/// What a handshake or authentication step answers with a Kafka error code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SaslError {
    #[error("SASL is not enabled on this listener, or not expected now")]
    IllegalState,
    #[error("mechanism {0:?} is not enabled")]
    UnsupportedMechanism(String),
    #[error("Authentication failed: {0}")]
    AuthenticationFailed(String),
}

/// One connection's authentication, and the client software it named.
#[derive(Debug)]
pub struct Session {
    settings: Option<SaslSettings>,
    state: State,
    /// The client software the connection named in ApiVersions, counted while it is open.
    client: Option<crate::client_software::ClientTag>,
}

#[derive(Debug)]
enum State {
    /// A listener without SASL: every request is served, as the user the client's TLS
    /// certificate names, or the anonymous user.
    Open {
        user: Option<Arc<str>>,
    },
    AwaitingHandshake {
        previous: Option<String>,
    },
    Handshaken {
        mechanism: Mechanism,
        previous: Option<String>,
    },
    Exchanging {
        scram: ScramServer,
        previous: Option<String>,
    },
    Authenticated {
        user: Arc<str>,
        expires: Option<Instant>,
    },
    Failed,
}

/// A finished authentication step: the bytes for the client, and for how long the session
/// lasts (SaslAuthenticate v1's session_lifetime_ms; 0 when it does not expire).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authenticated {
    pub auth_bytes: Vec<u8>,
    pub session_lifetime_ms: i64,
}

impl Session {
    pub fn new(settings: Option<SaslSettings>) -> Session {
        Session::for_connection(settings, None)
    }

    /// A connection's session; `certificate_user` is who its TLS client certificate names.
    /// Without SASL that is the connection's user (Kafka's SSL principal); with SASL the login
    /// is, as in Kafka's SASL_SSL.
    pub fn for_connection(settings: Option<SaslSettings>, certificate_user: Option<Arc<str>>) -> Session {
        let state = if settings.is_some() { State::AwaitingHandshake { previous: None } } else { State::Open { user: certificate_user } };
        Session { settings, state, client: None }
    }

    /// The client named itself (ApiVersions v3+); a second naming replaces the first.
    pub fn set_client(&mut self, tag: crate::client_software::ClientTag) {
        self.client = Some(tag);
    }

    /// The software the client named itself as, `unknown` before (or without) ApiVersions v3.
    pub fn client_software(&self) -> String {
        self.client.as_ref().map_or_else(|| "unknown".to_owned(), |tag| tag.software().to_owned())
    }

    /// Whether `key` may be served now.
    pub fn admit(&self, key: ApiKey) -> Result<(), Gate> {
        let exchange = matches!(key, ApiKey::ApiVersions | ApiKey::SaslHandshake | ApiKey::SaslAuthenticate);
        match &self.state {
            State::Open { .. } => Ok(()),
            State::Failed => Err(Gate::Failed),
            State::Authenticated { expires, .. } => match expires {
                Some(at) if Instant::now() >= *at && !exchange => Err(Gate::Expired),
                _ => Ok(()),
            },
            _ if exchange => Ok(()),
            _ => Err(Gate::NotAuthenticated(key)),
        }
    }

    /// The user this connection authenticated as; `None` before that, or without SASL and a
    /// client certificate.
    pub fn user(&self) -> Option<&str> {
        self.current_user().map(|user| user.as_ref())
    }

    /// The authenticated user, shared (each request's authorization takes it without copying).
    pub fn shared_user(&self) -> Option<Arc<str>> {
        self.current_user().cloned()
    }

    fn current_user(&self) -> Option<&Arc<str>> {
        match &self.state {
            State::Authenticated { user, .. } | State::Open { user: Some(user) } => Some(user),
            _ => None,
        }
    }

    /// The enabled mechanisms' names (SaslHandshake's answer lists them).
    pub fn mechanisms(&self) -> Vec<&'static str> {
        self.settings.iter().flat_map(|s| s.mechanisms.iter().map(|m| m.name())).collect()
    }

    /// SaslHandshake: picks the mechanism; after a finished authentication it starts a
    /// re-authentication.
    pub fn handshake(&mut self, name: &str) -> Result<(), SaslError> {
        let Some(settings) = &self.settings else { return Err(SaslError::IllegalState) };
        let previous = match &self.state {
            State::AwaitingHandshake { previous } => previous.clone(),
            State::Authenticated { user, .. } => Some(user.to_string()),
            _ => return Err(SaslError::IllegalState),
        };
        let mechanism = settings.mechanisms.iter().copied().find(|m| m.name() == name);
        match mechanism {
            Some(mechanism) => {
                self.state = State::Handshaken { mechanism, previous };
                Ok(())
            }
            None => Err(SaslError::UnsupportedMechanism(name.to_string())),
        }
    }

    /// SaslAuthenticate: one step of the exchange the handshake chose. A failure ends the
    /// connection (after the error is sent).
    pub fn authenticate(&mut self, token: &[u8]) -> Result<Step, SaslError> {
        let Some(settings) = self.settings.clone() else { return Err(SaslError::IllegalState) };
        // Failed unless this step says otherwise.
        let now = std::time::SystemTime::now();
        let mut token_expires = None;
        let (user, auth_bytes, previous) = match std::mem::replace(&mut self.state, State::Failed) {
            State::Handshaken { mechanism: Mechanism::Plain, previous } => (plain(&settings, token)?, Vec::new(), previous),
            State::Handshaken { mechanism: Mechanism::OAuthBearer, previous } => {
                let oauth = settings.oauth.as_ref().ok_or(SaslError::IllegalState)?;
                let valid = oauth.authenticate(token, now).map_err(|e| SaslError::AuthenticationFailed(e.to_string()))?;
                token_expires = Some(valid.expires);
                (valid.user, Vec::new(), previous)
            }
            State::Handshaken { mechanism: Mechanism::Scram(hash), previous } => {
                let mut scram = ScramServer::new(hash, scram::random_nonce());
                let credential = |user: &str| settings.credentials.as_ref().and_then(|c| c.credential(user, hash));
                match scram.step(token, credential).map_err(scram_failure)? {
                    ScramStep::Continue(reply) => {
                        self.state = State::Exchanging { scram, previous };
                        return Ok(Step::Continue(reply));
                    }
                    ScramStep::Done { .. } => return Err(SaslError::AuthenticationFailed("unexpected end of exchange".into())),
                }
            }
            State::Exchanging { mut scram, previous } => match scram.step(token, |_| None).map_err(scram_failure)? {
                ScramStep::Done { user, server_final } => (user, server_final, previous),
                ScramStep::Continue(_) => return Err(SaslError::AuthenticationFailed("unexpected SCRAM step".into())),
            },
            other => {
                // Not in an exchange: refused, and the state is left as it was.
                self.state = other;
                return Err(SaslError::IllegalState);
            }
        };
        if previous.as_deref().is_some_and(|p| p != user) {
            return Err(SaslError::AuthenticationFailed("re-authentication must keep the same user".into()));
        }
        // KIP-368: with re-authentication on, a session also ends when its token does. A token
        // accepted within the clock-skew leeway gets a moment, not 0 (which means "no expiry").
        let lifetime = settings.reauth.map(|d| match token_expires {
            Some(at) => d.min(at.duration_since(now).unwrap_or(Duration::ZERO).max(MIN_TOKEN_SESSION)),
            None => d,
        });
        let expires = lifetime.map(|d| Instant::now() + d);
        let session_lifetime_ms = lifetime.map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        self.state = State::Authenticated { user: user.into(), expires };
        Ok(Step::Done(Authenticated { auth_bytes, session_lifetime_ms }))
    }
}

/// One SaslAuthenticate step's outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Send these bytes; the exchange goes on.
    Continue(Vec<u8>),
    Done(Authenticated),
}

/// The client learns only that authentication failed (as with Kafka, a wrong password and an
/// unknown user read the same); the reason is logged by the caller.
fn scram_failure(e: ScramError) -> SaslError {
    match e {
        ScramError::BadCredentials => SaslError::AuthenticationFailed("Invalid user credentials".into()),
        other => SaslError::AuthenticationFailed(other.to_string()),
    }
}

/// SASL/PLAIN (RFC 4616): `authzid NUL user NUL password`, the password checked against the
/// user's stored SCRAM credential (the strongest one the user has).
fn plain(settings: &SaslSettings, token: &[u8]) -> Result<String, SaslError> {
    let invalid = || SaslError::AuthenticationFailed("Invalid username or password".into());
    let mut parts = token.split(|b| *b == 0);
    let (authzid, user, password) = match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(a), Some(u), Some(p), None) => (a, u, p),
        _ => return Err(SaslError::AuthenticationFailed("PLAIN expects authzid, user and password separated by NUL".into())),
    };
    let user = std::str::from_utf8(user).map_err(|_| invalid())?;
    if user.is_empty() || (!authzid.is_empty() && authzid != user.as_bytes()) {
        return Err(invalid());
    }
    let credentials = settings.credentials.as_ref().ok_or_else(invalid)?;
    let matched = [ScramHash::Sha512, ScramHash::Sha256]
        .into_iter()
        .find_map(|hash| credentials.credential(user, hash).map(|c| c.matches_password(hash, password)));
    match matched {
        Some(true) => Ok(user.to_string()),
        _ => Err(invalid()),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD as B64;
    use scram::ScramCredential;

    fn settings(reauth: Option<Duration>) -> (tempfile::TempDir, SaslSettings) {
        let dir = tempfile::tempdir().unwrap();
        let mut users = credentials::Users::default();
        let mut alice = std::collections::BTreeMap::new();
        for hash in [ScramHash::Sha256, ScramHash::Sha512] {
            alice.insert(hash, ScramCredential::derive(hash, b"alice-secret", b"pepper", 4096));
        }
        users.users.insert("alice".into(), alice);
        let mut bob = std::collections::BTreeMap::new();
        bob.insert(ScramHash::Sha256, ScramCredential::derive(ScramHash::Sha256, b"bob-secret", b"salt", 4096));
        users.users.insert("bob".into(), bob);
        let path = dir.path().join("users.json");
        std::fs::write(&path, serde_json::to_string(&users).unwrap()).unwrap();
        let store = Arc::new(CredentialStore::open(path).unwrap());
        let mechanisms = vec![Mechanism::Plain, Mechanism::Scram(ScramHash::Sha256), Mechanism::Scram(ScramHash::Sha512)];
        (dir, SaslSettings { mechanisms, credentials: Some(store), oauth: None, reauth })
    }

    /// A whole SCRAM exchange as a client would run it.
    fn scram_login(session: &mut Session, hash: ScramHash, user: &str, password: &[u8]) -> Result<Authenticated, SaslError> {
        session.handshake(hash.mechanism())?;
        let client_first_bare = format!("n={user},r=clientnonce");
        let Step::Continue(server_first) = session.authenticate(format!("n,,{client_first_bare}").as_bytes())? else {
            panic!("SCRAM ended after one step")
        };
        let server_first = String::from_utf8(server_first).unwrap();
        let fields: Vec<&str> = server_first.split(',').collect();
        let nonce = fields[0].strip_prefix("r=").unwrap();
        assert!(nonce.starts_with("clientnonce") && nonce.len() > "clientnonce".len(), "the server adds its own nonce");
        let salt = B64.decode(fields[1].strip_prefix("s=").unwrap()).unwrap();
        let iterations: u32 = fields[2].strip_prefix("i=").unwrap().parse().unwrap();
        let without_proof = format!("c=biws,r={nonce}");
        let auth_message = format!("{client_first_bare},{server_first},{without_proof}");
        let proof = scram::client_proof(hash, password, &salt, iterations, &auth_message);
        match session.authenticate(format!("{without_proof},p={}", B64.encode(proof)).as_bytes())? {
            Step::Done(done) => Ok(done),
            Step::Continue(_) => panic!("SCRAM asked for a third step"),
        }
    }

    #[test]
    fn only_the_exchange_is_served_before_authentication() {
        let (_dir, settings) = settings(None);
        let mut session = Session::new(Some(settings));
        for key in [ApiKey::ApiVersions, ApiKey::SaslHandshake, ApiKey::SaslAuthenticate] {
            assert_eq!(session.admit(key), Ok(()));
        }
        assert_eq!(session.admit(ApiKey::Metadata), Err(Gate::NotAuthenticated(ApiKey::Metadata)));
        assert_eq!(session.handshake("GSSAPI"), Err(SaslError::UnsupportedMechanism("GSSAPI".into())));
        session.handshake("PLAIN").unwrap();
        let done = session.authenticate(b"\0alice\0alice-secret").unwrap();
        assert_eq!(done, Step::Done(Authenticated { auth_bytes: vec![], session_lifetime_ms: 0 }));
        assert_eq!(session.user(), Some("alice"));
        assert_eq!(session.admit(ApiKey::Produce), Ok(()));
    }

    #[test]
    fn wrong_passwords_fail_and_end_the_connection() {
        let (_dir, settings) = settings(None);
        for token in [&b"\0alice\0wrong"[..], b"\0nobody\0x", b"mallory\0alice\0alice-secret", b"\0alice", b"\0\0"] {
            let mut session = Session::new(Some(settings.clone()));
            session.handshake("PLAIN").unwrap();
            assert!(matches!(session.authenticate(token), Err(SaslError::AuthenticationFailed(_))), "{token:?}");
            assert_eq!(session.admit(ApiKey::ApiVersions), Err(Gate::Failed));
        }
        let mut session = Session::new(Some(settings));
        assert!(matches!(scram_login(&mut session, ScramHash::Sha512, "alice", b"nope"), Err(SaslError::AuthenticationFailed(_))));
        assert_eq!(session.admit(ApiKey::Metadata), Err(Gate::Failed));
    }

    #[test]
    fn scram_sha_256_and_512_authenticate_with_the_server_signature() {
        let (_dir, settings) = settings(None);
        for hash in [ScramHash::Sha256, ScramHash::Sha512] {
            let mut session = Session::new(Some(settings.clone()));
            let done = scram_login(&mut session, hash, "alice", b"alice-secret").unwrap();
            assert!(done.auth_bytes.starts_with(b"v="), "{:?}", String::from_utf8_lossy(&done.auth_bytes));
            assert_eq!(session.user(), Some("alice"));
        }
        // bob has no SHA-512 credential.
        let mut session = Session::new(Some(settings));
        assert!(scram_login(&mut session, ScramHash::Sha512, "bob", b"bob-secret").is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn an_expired_session_must_reauthenticate_as_the_same_user() {
        let (_dir, settings) = settings(Some(Duration::from_secs(60)));
        let mut session = Session::new(Some(settings));
        let done = scram_login(&mut session, ScramHash::Sha256, "alice", b"alice-secret").unwrap();
        assert_eq!(done.session_lifetime_ms, 60_000);
        tokio::time::advance(Duration::from_secs(61)).await;
        assert_eq!(session.admit(ApiKey::Fetch), Err(Gate::Expired));
        assert_eq!(session.admit(ApiKey::SaslHandshake), Ok(()));
        scram_login(&mut session, ScramHash::Sha256, "alice", b"alice-secret").unwrap();
        assert_eq!(session.admit(ApiKey::Fetch), Ok(()));
        // Another user's credentials cannot take over the connection.
        tokio::time::advance(Duration::from_secs(61)).await;
        assert!(scram_login(&mut session, ScramHash::Sha256, "bob", b"bob-secret").is_err());
        assert_eq!(session.admit(ApiKey::Fetch), Err(Gate::Failed));
    }

    /// With re-authentication on, an OAUTHBEARER session ends with its token (or after a
    /// moment when the token was accepted within the clock-skew leeway), never later.
    #[test]
    fn an_oauthbearer_session_lasts_no_longer_than_its_token() {
        use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64URL;
        let oauth = oauthbearer::OAuthBearer::new(oauthbearer::OAuthSettings { allow_unsecured: true, ..Default::default() }).unwrap();
        let settings = SaslSettings {
            mechanisms: vec![Mechanism::OAuthBearer],
            credentials: None,
            oauth: Some(Arc::new(oauth)),
            reauth: Some(Duration::from_secs(3600)),
        };
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64;
        let login = |exp_in: i64| {
            let claims = serde_json::json!({"sub": "alice", "exp": now + exp_in});
            let token = format!("{}.{}.", B64URL.encode(br#"{"alg":"none"}"#), B64URL.encode(claims.to_string()));
            let mut session = Session::new(Some(settings.clone()));
            session.handshake("OAUTHBEARER").unwrap();
            match session.authenticate(format!("n,,\u{1}auth=Bearer {token}\u{1}\u{1}").as_bytes()).unwrap() {
                Step::Done(done) => (session.user().map(str::to_owned), done.session_lifetime_ms),
                Step::Continue(_) => panic!("OAUTHBEARER is one step"),
            }
        };
        let (user, lifetime) = login(600);
        assert_eq!(user.as_deref(), Some("alice"));
        assert!((590_000..=600_000).contains(&lifetime), "a 10-minute token gave a {lifetime} ms session");
        let (_, lifetime) = login(-10);
        assert_eq!(lifetime, 1_000, "a token within the leeway gets a moment, not 0 (no expiry)");
    }

    #[test]
    fn a_listener_without_sasl_serves_everything_and_refuses_the_exchange() {
        let mut session = Session::new(None);
        assert_eq!(session.admit(ApiKey::Produce), Ok(()));
        assert_eq!(session.handshake("PLAIN"), Err(SaslError::IllegalState));
        assert_eq!(session.authenticate(b"x"), Err(SaslError::IllegalState));
    }
}
