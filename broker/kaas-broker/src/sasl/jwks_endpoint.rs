//! `sasl.oauthbearer.jwks.endpoint.url` as an HTTP(S) URL (KIP-768): the key set an identity
//! provider (Keycloak, Okta, Entra ID, …) publishes. It is fetched at start, again every
//! refresh interval (`sasl.oauthbearer.jwks.endpoint.refresh.ms`, an hour by default), and early
//! when a token names a key the set does not have (the provider rotated its keys), at most once
//! per [`MISSING_KEY_BACKOFF`], as Kafka's `RefreshingHttpsJwks` does. A failed fetch keeps the
//! keys already held and is retried with a doubling backoff; until a first fetch succeeds every
//! signed token is refused with the fetch's error. The broker starts either way: an identity
//! provider that is down must not keep the brokers down.

use std::path::PathBuf;
use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use jsonwebtoken::jwk::JwkSet;
use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::time::Instant;
use tracing::{info, warn};

use super::oauthbearer::OAuthError;

/// Where the key set is published and how often it is fetched again.
#[derive(Debug, Clone)]
pub struct JwksEndpoint {
    /// `https://…` (or `http://…`, which Kafka allows too; only where the network is trusted).
    pub url: String,
    /// `sasl.oauthbearer.jwks.endpoint.refresh.ms`.
    pub refresh: Duration,
    /// PEM certificates that sign the endpoint's certificate; `None`: the system's roots.
    pub ca: Option<PathBuf>,
}

impl JwksEndpoint {
    pub fn new(url: impl Into<String>) -> JwksEndpoint {
        JwksEndpoint { url: url.into(), refresh: Duration::from_secs(3600), ca: None }
    }
}

/// At most one early fetch for an unknown key id per this long (Kafka's
/// `MISSING_KEY_ID_CACHE_IN_FLIGHT_MS`): tokens naming made-up keys cannot make the broker
/// hammer the identity provider.
pub const MISSING_KEY_BACKOFF: Duration = Duration::from_secs(10);

/// A failed fetch is retried after this, doubling up to [`RETRY_MAX`].
const RETRY_FIRST: Duration = Duration::from_millis(500);
const RETRY_MAX: Duration = Duration::from_secs(30);
/// The largest key set read; a bigger answer is refused.
const MAX_BODY: usize = 1 << 20;
/// One fetch, connection to last byte.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// The key set as last fetched from an endpoint, kept fresh by a background task.
#[derive(Debug)]
pub struct JwksFetcher {
    endpoint: JwksEndpoint,
    uri: http::Uri,
    tls: Option<Arc<rustls::ClientConfig>>,
    state: Mutex<State>,
    /// Wakes the refresher for an early fetch (or to end, once the fetcher is dropped).
    expedite: Arc<Notify>,
}

impl Drop for JwksFetcher {
    fn drop(&mut self) {
        self.expedite.notify_one();
    }
}

#[derive(Debug, Default)]
struct State {
    keys: Option<Arc<JwkSet>>,
    /// Why the last fetch failed (cleared by a good one).
    last_error: Option<String>,
    /// When an unknown key id last asked for an early fetch.
    expedited_at: Option<Instant>,
}

impl JwksFetcher {
    /// Checks the URL and the CA file and starts fetching on the current Tokio runtime. The
    /// refresher stops once the fetcher is dropped.
    pub fn start(endpoint: JwksEndpoint) -> Result<Arc<JwksFetcher>, OAuthError> {
        let bad = |why: String| OAuthError::Jwks { path: endpoint.url.clone(), why };
        let uri: http::Uri = endpoint.url.parse().map_err(|e| bad(format!("not a URL: {e}")))?;
        let tls = match uri.scheme_str() {
            Some("https") => Some(tls_config(endpoint.ca.as_ref()).map_err(bad)?),
            Some("http") => None,
            _ => return Err(bad("the URL must be https://, http:// or a file".into())),
        };
        if uri.host().is_none() {
            return Err(bad("the URL names no host".into()));
        }
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| bad("fetching a key set needs the broker's runtime".into()))?;
        let fetcher = Arc::new(JwksFetcher { endpoint, uri, tls, state: Mutex::new(State::default()), expedite: Arc::new(Notify::new()) });
        runtime.spawn(refresh_loop(Arc::downgrade(&fetcher)));
        Ok(fetcher)
    }

    /// The key set as last fetched; the fetch's error if none was yet.
    pub fn keys(&self) -> Result<Arc<JwkSet>, OAuthError> {
        let state = self.state.lock();
        match (&state.keys, &state.last_error) {
            (Some(keys), _) => Ok(keys.clone()),
            (None, why) => {
                Err(OAuthError::Jwks { path: self.endpoint.url.clone(), why: why.clone().unwrap_or_else(|| "not fetched yet".into()) })
            }
        }
    }

    /// A token named a key the set does not have: fetch again soon, at most once per
    /// [`MISSING_KEY_BACKOFF`]. Whether an early fetch was asked for.
    pub fn missing_key(&self) -> bool {
        let mut state = self.state.lock();
        if state.expedited_at.is_some_and(|at| at.elapsed() < MISSING_KEY_BACKOFF) {
            return false;
        }
        state.expedited_at = Some(Instant::now());
        self.expedite.notify_one();
        true
    }

    /// Fetches the key set once and keeps it if it is one.
    async fn refresh(&self) -> Result<(), String> {
        let fetched =
            tokio::time::timeout(FETCH_TIMEOUT, self.fetch()).await.unwrap_or_else(|_| Err(format!("no answer in {FETCH_TIMEOUT:?}")));
        let parsed = fetched.and_then(|body| {
            let set: JwkSet = serde_json::from_slice(&body).map_err(|e| format!("not a JSON Web Key Set: {e}"))?;
            if set.keys.is_empty() { Err("no keys".to_owned()) } else { Ok(set) }
        });
        let mut state = self.state.lock();
        match parsed {
            Ok(set) => {
                state.keys = Some(Arc::new(set));
                state.last_error = None;
                Ok(())
            }
            Err(why) => {
                state.last_error = Some(why.clone());
                Err(why)
            }
        }
    }

    /// One GET of the endpoint over its own connection (a fetch an hour needs no pool).
    async fn fetch(&self) -> Result<Bytes, String> {
        let host = self.uri.host().unwrap_or_default();
        // NB: a bracketed IPv6 literal is bracketed in the URI's host; the socket wants it bare.
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        let port = self.uri.port_u16().unwrap_or(if self.tls.is_some() { 443 } else { 80 });
        let tcp = tokio::net::TcpStream::connect((bare, port)).await.map_err(|e| format!("connecting to {host}:{port}: {e}"))?;
        let path = self.uri.path_and_query().map_or("/", |p| p.as_str());
        let authority = self.uri.authority().map_or(host, |a| a.as_str());
        let request = http::Request::get(path)
            .header(http::header::HOST, authority)
            .header(http::header::ACCEPT, "application/json")
            .header(http::header::USER_AGENT, concat!("kaas/", env!("CARGO_PKG_VERSION")))
            .body(Empty::<Bytes>::new())
            .map_err(|e| e.to_string())?;
        let response = match &self.tls {
            Some(tls) => {
                let name = rustls::pki_types::ServerName::try_from(bare.to_owned()).map_err(|e| format!("{host}: {e}"))?;
                let stream = tokio_rustls::TlsConnector::from(tls.clone())
                    .connect(name, tcp)
                    .await
                    .map_err(|e| format!("TLS with {host}:{port}: {e}"))?;
                send(stream, request).await?
            }
            None => send(tcp, request).await?,
        };
        if !response.status().is_success() {
            return Err(format!("the endpoint answered {}", response.status()));
        }
        let body = Limited::new(response.into_body(), MAX_BODY).collect().await.map_err(|e| format!("reading the answer: {e}"))?;
        Ok(body.to_bytes())
    }
}

/// Sends `request` on a fresh HTTP/1.1 connection over `io`.
async fn send<S>(io: S, request: http::Request<Empty<Bytes>>) -> Result<http::Response<hyper::body::Incoming>, String>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(io)).await.map_err(|e| format!("HTTP: {e}"))?;
    // The connection is driven until the answer is read, then dropped with the sender.
    let driver = tokio::spawn(connection);
    let answered = sender.send_request(request).await.map_err(|e| format!("HTTP: {e}"));
    if answered.is_err() {
        driver.abort();
    }
    answered
}

/// Fetches at start, then every refresh interval or early when asked; retries a failed fetch
/// with a doubling backoff. Ends when the fetcher is dropped.
async fn refresh_loop(fetcher: Weak<JwksFetcher>) {
    let mut backoff = RETRY_FIRST;
    loop {
        let Some(this) = fetcher.upgrade() else { return };
        let wait = match this.refresh().await {
            Ok(()) => {
                backoff = RETRY_FIRST;
                info!(url = %this.endpoint.url, "OAUTHBEARER key set fetched");
                this.endpoint.refresh
            }
            Err(why) => {
                warn!(url = %this.endpoint.url, error = %why, retry_in = ?backoff, "cannot fetch the OAUTHBEARER key set; keeping the keys held");
                let wait = backoff;
                backoff = (backoff * 2).min(RETRY_MAX);
                wait
            }
        };
        let expedite = this.expedite.clone();
        // NB: no strong reference while waiting, so that dropping the fetcher ends the loop
        // (its drop wakes this wait).
        drop(this);
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = expedite.notified() => {}
        }
    }
}

/// A TLS client configuration that trusts `ca` (PEM), or the system's roots.
fn tls_config(ca: Option<&PathBuf>) -> Result<Arc<rustls::ClientConfig>, String> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;

    let mut roots = rustls::RootCertStore::empty();
    match ca {
        Some(path) => {
            let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
                .and_then(|certs| certs.collect())
                .map_err(|e| format!("the CA file {}: {e}", path.display()))?;
            if certs.is_empty() {
                return Err(format!("the CA file {} holds no certificate", path.display()));
            }
            for cert in certs {
                roots.add(cert).map_err(|e| format!("the CA file {}: {e}", path.display()))?;
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            for cert in found.certs {
                // NB: one unusable system certificate must not cost the others.
                let _ = roots.add(cert);
            }
            if roots.is_empty() {
                return Err("no system CA certificates found; name the endpoint's CA".into());
            }
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}
