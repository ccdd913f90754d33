//! SASL/OAUTHBEARER (RFC 7628; Kafka's KIP-255 and KIP-768): the client sends a JWT, the broker
//! checks its signature against a JSON Web Key Set and its claims as Kafka's
//! `OAuthBearerValidatorCallbackHandler` does; the `sub` claim (or another one) names the user,
//! and the token's expiry bounds the session.
//!
//! Kafka's broker accepts unsigned (`alg: none`) tokens by default, for development; kaas does
//! only when `--sasl-oauthbearer-allow-unsecured` says so.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64URL;
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::Value;

use super::jwks_endpoint::{JwksEndpoint, JwksFetcher};
use crate::reload::{Reloading, Stamp};

/// How tokens are checked (`sasl.oauthbearer.*` of a Kafka broker).
#[derive(Debug, Clone)]
pub struct OAuthSettings {
    /// `sasl.oauthbearer.jwks.endpoint.url`: where the keys that sign tokens are.
    pub jwks: Option<JwksSource>,
    /// `sasl.oauthbearer.expected.audience`: a token must name one of these in `aud` (none: not checked).
    pub expected_audience: Vec<String>,
    /// `sasl.oauthbearer.expected.issuer`: a token's `iss` must be this (none: not checked).
    pub expected_issuer: Option<String>,
    /// `sasl.oauthbearer.sub.claim.name`: the claim that names the user.
    pub sub_claim: String,
    /// `sasl.oauthbearer.clock.skew.buffer.seconds`: leeway for `exp`, `nbf` and `iat`.
    pub clock_skew: Duration,
    /// Accept unsigned tokens (`alg: none`) — Kafka's default validator does; development only.
    pub allow_unsecured: bool,
}

impl Default for OAuthSettings {
    fn default() -> OAuthSettings {
        OAuthSettings {
            jwks: None,
            expected_audience: Vec::new(),
            expected_issuer: None,
            sub_claim: "sub".into(),
            clock_skew: Duration::from_secs(30),
            allow_unsecured: false,
        }
    }
}

/// Where the key set comes from.
#[derive(Debug, Clone)]
pub enum JwksSource {
    /// A file (a mounted Secret or ConfigMap), read again when it changes (key rotation).
    File(PathBuf),
    /// An identity provider's endpoint, fetched again on a schedule and on an unknown key id.
    Endpoint(JwksEndpoint),
}

/// Why a token, or the key set, is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OAuthError {
    #[error("malformed OAUTHBEARER message: {0}")]
    Message(&'static str),
    #[error("invalid token: {0}")]
    Token(String),
    #[error("the JWKS {path}: {why}")]
    Jwks { path: String, why: String },
    #[error(
        "OAUTHBEARER needs a JWKS (a file or an https:// endpoint) to check tokens against, or unsigned tokens allowed (for development)"
    )]
    NoKeySet,
}

/// A valid token: who it names and when it expires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Validated {
    pub user: String,
    pub expires: SystemTime,
}

/// Checks OAUTHBEARER messages: the settings and the current key set.
#[derive(Debug)]
pub struct OAuthBearer {
    settings: OAuthSettings,
    keys: Option<KeySet>,
}

/// The key set, kept current from its source.
#[derive(Debug)]
enum KeySet {
    File(Reloading<Arc<JwkSet>>),
    Endpoint(Arc<JwksFetcher>),
}

impl KeySet {
    fn current(&self) -> Result<Arc<JwkSet>, OAuthError> {
        match self {
            KeySet::File(file) => Ok(file.get()),
            KeySet::Endpoint(fetcher) => fetcher.keys(),
        }
    }

    /// A token named a key the set does not have: an endpoint may have rotated its keys.
    fn missing_key(&self) {
        if let KeySet::Endpoint(fetcher) = self {
            let _ = fetcher.missing_key();
        }
    }
}

impl OAuthBearer {
    /// Loads a key set file once (an unreadable one stops the broker from starting), or starts
    /// fetching from an endpoint (on the current Tokio runtime; its errors refuse tokens, not
    /// the broker's start).
    pub fn new(settings: OAuthSettings) -> Result<OAuthBearer, OAuthError> {
        let keys = match &settings.jwks {
            None if settings.allow_unsecured => None,
            None => return Err(OAuthError::NoKeySet),
            Some(JwksSource::File(path)) => {
                let first = Arc::new(load_jwks(path)?);
                let paths = vec![path.clone()];
                let stamp = Stamp::of(&paths);
                let reload_path = path.clone();
                let load = move || load_jwks(&reload_path).map(Arc::new).map_err(|e| e.to_string());
                Some(KeySet::File(Reloading::new("OAUTHBEARER key set", paths, stamp, first, load)))
            }
            Some(JwksSource::Endpoint(endpoint)) => Some(KeySet::Endpoint(JwksFetcher::start(endpoint.clone())?)),
        };
        Ok(OAuthBearer { settings, keys })
    }

    /// Checks a client's first (and only) message: `gs2-header ^A auth=Bearer <token> ^A ... ^A`.
    pub fn authenticate(&self, message: &[u8], now: SystemTime) -> Result<Validated, OAuthError> {
        let (authzid, token) = parse_message(message)?;
        let validated = self.validate(token, now)?;
        if authzid.is_some_and(|a| a != validated.user) {
            return Err(OAuthError::Token("the authorization id is not the token's principal".into()));
        }
        Ok(validated)
    }

    /// Checks a token's signature (or that it may be unsigned) and its claims.
    pub fn validate(&self, token: &str, now: SystemTime) -> Result<Validated, OAuthError> {
        let invalid = |why: &str| OAuthError::Token(why.to_owned());
        let parts: Vec<&str> = token.split('.').collect();
        let [header, payload, signature] = parts[..] else { return Err(invalid("a JWT has three dot-separated parts")) };
        let header: Value = decode_part(header).ok_or_else(|| invalid("the header is not base64url JSON"))?;
        let claims: Value = match header.get("alg").and_then(Value::as_str) {
            Some("none") if self.settings.allow_unsecured && signature.is_empty() => {
                decode_part(payload).ok_or_else(|| invalid("the payload is not base64url JSON"))?
            }
            Some("none") => return Err(invalid("unsigned tokens are not accepted")),
            _ => self.verified_claims(token)?,
        };
        self.check_claims(&claims, now)
    }

    /// The claims of a token whose signature one of the key set's keys verifies.
    fn verified_claims(&self, token: &str) -> Result<Value, OAuthError> {
        let Some(keys) = &self.keys else { return Err(OAuthError::Token("signed tokens need a key set".into())) };
        let header = jsonwebtoken::decode_header(token).map_err(|e| OAuthError::Token(e.to_string()))?;
        if !is_public_key_algorithm(header.alg) {
            return Err(OAuthError::Token(format!("{:?} tokens are not accepted", header.alg)));
        }
        let set = keys.current()?;
        let jwk = match &header.kid {
            Some(kid) => set.find(kid).ok_or_else(|| {
                keys.missing_key();
                OAuthError::Token(format!("no key {kid:?} in the key set"))
            })?,
            None => match set.keys.as_slice() {
                [only] => only,
                _ => return Err(OAuthError::Token("the token names no key (kid) and the key set has several".into())),
            },
        };
        let key = DecodingKey::from_jwk(jwk).map_err(|e| OAuthError::Token(format!("unusable key: {e}")))?;
        // Only the signature here; the claims are checked below, one way for every token.
        let mut signature_only = Validation::new(header.alg);
        signature_only.required_spec_claims.clear();
        signature_only.validate_exp = false;
        signature_only.validate_nbf = false;
        signature_only.validate_aud = false;
        jsonwebtoken::decode::<Value>(token, &key, &signature_only).map(|data| data.claims).map_err(|e| OAuthError::Token(e.to_string()))
    }

    /// Kafka's claim checks: `exp` required and not passed, `nbf` and `iat` not in the future,
    /// the user claim a non-empty string, the audience and issuer when expected (each with
    /// the clock-skew leeway).
    fn check_claims(&self, claims: &Value, now: SystemTime) -> Result<Validated, OAuthError> {
        let invalid = |why: String| OAuthError::Token(why);
        let now_s = now.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs_f64();
        let skew = self.settings.clock_skew.as_secs_f64();
        let time = |name: &str| claims.get(name).map(|v| v.as_f64().ok_or_else(|| invalid(format!("{name} is not a number")))).transpose();
        let exp = time("exp")?.ok_or_else(|| invalid("no exp claim".into()))?;
        if exp + skew < now_s {
            return Err(invalid("the token expired".into()));
        }
        for name in ["nbf", "iat"] {
            if time(name)?.is_some_and(|t| t - skew > now_s) {
                return Err(invalid(format!("{name} is in the future")));
            }
        }
        let sub = &self.settings.sub_claim;
        let user = claims.get(sub).and_then(Value::as_str).filter(|s| !s.trim().is_empty());
        let user = user.ok_or_else(|| invalid(format!("no {sub} claim naming the user")))?;
        if !self.settings.expected_audience.is_empty() {
            let audience: Vec<&str> = match claims.get("aud") {
                Some(Value::String(one)) => vec![one.as_str()],
                Some(Value::Array(many)) => many.iter().filter_map(Value::as_str).collect(),
                _ => Vec::new(),
            };
            if !audience.iter().any(|a| self.settings.expected_audience.iter().any(|e| e == a)) {
                return Err(invalid("the token is not for this audience".into()));
            }
        }
        if let Some(issuer) = &self.settings.expected_issuer
            && claims.get("iss").and_then(Value::as_str) != Some(issuer.as_str())
        {
            return Err(invalid("the token is not from the expected issuer".into()));
        }
        let expires = UNIX_EPOCH + Duration::try_from_secs_f64(exp.max(0.0)).unwrap_or(Duration::ZERO);
        Ok(Validated { user: user.to_owned(), expires })
    }
}

fn is_public_key_algorithm(alg: Algorithm) -> bool {
    // NB: an HMAC "key" in a JWKS would let anyone who reads the JWKS sign tokens.
    !matches!(alg, Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512)
}

fn decode_part(part: &str) -> Option<Value> {
    serde_json::from_slice(&B64URL.decode(part.trim_end_matches('=')).ok()?).ok()
}

/// RFC 7628's client initial response: the GS2 header (`n,,` or `n,a=<authzid>,`), then
/// `key=value` pairs each ended by ^A, then ^A. Returns the authzid and the bearer token.
fn parse_message(message: &[u8]) -> Result<(Option<&str>, &str), OAuthError> {
    let text = std::str::from_utf8(message).map_err(|_| OAuthError::Message("not UTF-8"))?;
    let (gs2, rest) = text.split_once('\u{1}').ok_or(OAuthError::Message("no ^A after the GS2 header"))?;
    let authzid = match gs2.strip_prefix("n,").or_else(|| gs2.strip_prefix("y,")) {
        Some("," | "") => None,
        Some(other) => Some(
            other
                .strip_prefix("a=")
                .and_then(|a| a.strip_suffix(','))
                .filter(|a| !a.is_empty())
                .ok_or(OAuthError::Message("a bad authorization id in the GS2 header"))?,
        ),
        None => return Err(OAuthError::Message("the GS2 header must start with n, or y,")),
    };
    let pairs = rest.strip_suffix("\u{1}\u{1}").ok_or(OAuthError::Message("the message must end with ^A^A"))?;
    let mut token = None;
    for pair in pairs.split('\u{1}') {
        let (key, value) = pair.split_once('=').ok_or(OAuthError::Message("a key without a value"))?;
        if key == "auth" {
            let (scheme, bearer) = value.split_once(' ').ok_or(OAuthError::Message("auth must be `Bearer <token>`"))?;
            if !scheme.eq_ignore_ascii_case("bearer") || bearer.trim().is_empty() {
                return Err(OAuthError::Message("auth must be `Bearer <token>`"));
            }
            token = Some(bearer.trim());
        }
        // Other keys are SASL extensions (KIP-342); kaas uses none of them.
    }
    Ok((authzid, token.ok_or(OAuthError::Message("no auth=Bearer <token>"))?))
}

fn load_jwks(path: &PathBuf) -> Result<JwkSet, OAuthError> {
    let bad = |why: String| OAuthError::Jwks { path: path.display().to_string(), why };
    let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
    let set: JwkSet = serde_json::from_str(&text).map_err(|e| bad(format!("not a JSON Web Key Set: {e}")))?;
    if set.keys.is_empty() {
        return Err(bad("no keys".into()));
    }
    Ok(set)
}

#[cfg(test)]
#[path = "oauthbearer_tests.rs"]
mod tests;
