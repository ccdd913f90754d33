//! TLS for the Kafka listener: rustls (TLS 1.2 and 1.3), the certificate, key and optional
//! client CA read from PEM files (mounted Secrets), and read again when they change so a
//! renewed certificate is served without a restart (see [`crate::reload`]: a renewal that
//! cannot be loaded keeps the previous configuration).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use tracing::info;

use crate::reload::{Reloading, Stamp};

pub mod principal;

use principal::{PrincipalError, PrincipalMapper};

/// Whether clients must present a certificate signed by the client CA (`ssl.client.auth`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    /// No client certificate is asked for.
    None,
    /// One is asked for; a client without one still connects.
    Requested,
    /// The handshake fails without a valid client certificate.
    Required,
}

/// Where the listener's key material lives.
#[derive(Debug, Clone)]
pub struct TlsSettings {
    /// PEM certificate chain, leaf first (`tls.crt` of a Secret).
    pub cert: PathBuf,
    /// PEM private key: PKCS#8, PKCS#1 or SEC1 (`tls.key`).
    pub key: PathBuf,
    /// PEM CA bundle client certificates are checked against (`ca.crt`); needed unless
    /// `client_auth` is `None`.
    pub client_ca: Option<PathBuf>,
    pub client_auth: ClientAuth,
}

/// Why the TLS configuration cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("reading {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{path}: {what}")]
    Pem { path: PathBuf, what: String },
    #[error("client authentication is {0:?} but no client CA file is configured")]
    NoClientCa(ClientAuth),
    #[error("building the TLS configuration: {0}")]
    Config(String),
}

/// The listener's TLS side: hands out the server configuration of the files as they are now.
#[derive(Debug)]
pub struct TlsReloader {
    config: Reloading<Arc<ServerConfig>>,
    /// `ssl.principal.mapping.rules`: the user a client certificate names.
    principals: PrincipalMapper,
}

impl TlsReloader {
    /// Loads the files once; an error here stops the broker from starting, as it should.
    pub fn new(settings: TlsSettings) -> Result<TlsReloader, TlsError> {
        let paths: Vec<PathBuf> = [Some(&settings.cert), Some(&settings.key), settings.client_ca.as_ref()].into_iter().flatten().cloned().collect();
        let stamp = Stamp::of(&paths);
        let first = Arc::new(build(&settings)?);
        info!(cert = %settings.cert.display(), client_auth = ?settings.client_auth, "TLS listener configured");
        let config = Reloading::new("TLS certificate", paths, stamp, first, move || build(&settings).map(Arc::new).map_err(|e| e.to_string()));
        Ok(TlsReloader { config, principals: PrincipalMapper::default() })
    }

    /// Maps client certificates' names to users with these rules instead of `DEFAULT`.
    pub fn with_principal_mapper(self, principals: PrincipalMapper) -> TlsReloader {
        TlsReloader { principals, ..self }
    }

    /// The user a finished handshake's client certificate names; `None` without one.
    pub fn client_user(&self, connection: &rustls::ServerConnection) -> Result<Option<String>, PrincipalError> {
        let Some(leaf) = connection.peer_certificates().and_then(|chain| chain.first()) else { return Ok(None) };
        self.principals.user_of(leaf).map(Some)
    }

    /// The configuration for the next handshake.
    pub fn config(&self) -> Arc<ServerConfig> {
        self.config.get()
    }

    /// A tokio-rustls acceptor over the current configuration.
    pub fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        tokio_rustls::TlsAcceptor::from(self.config())
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn build(settings: &TlsSettings) -> Result<ServerConfig, TlsError> {
    let chain = certificates(&settings.cert)?;
    let key = PrivateKeyDer::from_pem_file(&settings.key)
        .map_err(|e| pem_error(&settings.key, e))?;
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?;
    let builder = match (settings.client_auth, &settings.client_ca) {
        (ClientAuth::None, _) => builder.with_no_client_auth(),
        (auth, None) => return Err(TlsError::NoClientCa(auth)),
        (auth, Some(ca)) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in certificates(ca)? {
                roots.add(cert).map_err(|e| TlsError::Pem { path: ca.clone(), what: e.to_string() })?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider());
            let verifier = if auth == ClientAuth::Requested { verifier.allow_unauthenticated() } else { verifier };
            builder.with_client_cert_verifier(verifier.build().map_err(|e| TlsError::Config(e.to_string()))?)
        }
    };
    builder.with_single_cert(chain, key).map_err(|e| TlsError::Config(e.to_string()))
}

fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| pem_error(path, e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_error(path, e))?;
    if certs.is_empty() {
        return Err(TlsError::Pem { path: path.to_path_buf(), what: "no certificate in the file".into() });
    }
    Ok(certs)
}

fn pem_error(path: &Path, e: rustls::pki_types::pem::Error) -> TlsError {
    match e {
        rustls::pki_types::pem::Error::Io(source) => TlsError::Read { path: path.to_path_buf(), source },
        other => TlsError::Pem { path: path.to_path_buf(), what: other.to_string() },
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
    use rustls::pki_types::ServerName;

    /// A CA and a leaf for `localhost` it signed, as PEM.
    struct Pki {
        ca_pem: String,
        issuer: CertifiedIssuer<'static, KeyPair>,
    }

    impl Pki {
        fn new(name: &str) -> Pki {
            let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
            params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            params.distinguished_name.push(rcgen::DnType::CommonName, name);
            let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
            Pki { ca_pem: issuer.pem(), issuer }
        }

        /// (certificate PEM, key PEM) for `san`.
        fn leaf(&self, san: &str) -> (String, String) {
            let key = KeyPair::generate().unwrap();
            let cert = CertificateParams::new(vec![san.to_string()]).unwrap().signed_by(&key, &*self.issuer).unwrap();
            (cert.pem(), key.serialize_pem())
        }
    }

    fn write(dir: &Path, name: &str, pem: &str) -> PathBuf {
        let path = dir.join(name);
        // Replace, not rewrite in place: what a Secret volume update looks like to a reader.
        let tmp = dir.join(format!(".{name}.tmp"));
        std::fs::write(&tmp, pem).unwrap();
        std::fs::rename(&tmp, &path).unwrap();
        path
    }

    /// Whether a client trusting `ca_pem` completes a handshake with the reloader's config.
    async fn handshake(reloader: &TlsReloader, ca_pem: &str) -> bool {
        handshake_as(reloader, ca_pem, None).await
    }

    /// The same, presenting `identity` (certificate PEM, key PEM) if given.
    async fn handshake_as(reloader: &TlsReloader, ca_pem: &str, identity: Option<(String, String)>) -> bool {
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
            roots.add(cert.unwrap()).unwrap();
        }
        let client = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots);
        let client = match identity {
            None => client.with_no_client_auth(),
            Some((cert, key)) => {
                let chain = CertificateDer::pem_slice_iter(cert.as_bytes()).map(|c| c.unwrap()).collect();
                client.with_client_auth_cert(chain, PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap()).unwrap()
            }
        };
        let connector = tokio_rustls::TlsConnector::from(Arc::new(client));
        let (a, b) = tokio::io::duplex(64 * 1024);
        let acceptor = reloader.acceptor();
        let server = tokio::spawn(async move { acceptor.accept(b).await.is_ok() });
        let name = ServerName::try_from("localhost").unwrap();
        // The client's stream stays open until the server is done: TLS 1.3 clients finish
        // first, and a dropped stream would fail the server's side of a good handshake.
        let client = connector.connect(name, a).await;
        let server_ok = server.await.unwrap_or(false);
        client.is_ok() && server_ok
    }

    #[tokio::test(start_paused = true)]
    async fn a_renewed_certificate_is_served_without_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let (old, new) = (Pki::new("old-ca"), Pki::new("new-ca"));
        let (cert, key) = old.leaf("localhost");
        let settings = TlsSettings {
            cert: write(dir.path(), "tls.crt", &cert),
            key: write(dir.path(), "tls.key", &key),
            client_ca: None,
            client_auth: ClientAuth::None,
        };
        let reloader = TlsReloader::new(settings).unwrap();
        assert!(handshake(&reloader, &old.ca_pem).await);
        assert!(!handshake(&reloader, &new.ca_pem).await, "a client of the new CA only must fail before the renewal");

        // Renewed half-way (certificate first): not loadable, the old pair is still served.
        let (cert, key) = new.leaf("localhost");
        write(dir.path(), "tls.crt", &cert);
        tokio::time::advance(crate::reload::RECHECK).await;
        assert!(handshake(&reloader, &old.ca_pem).await, "a mismatched pair must not replace a working one");

        // The key arrives: the next handshake after the recheck interval gets the new pair.
        write(dir.path(), "tls.key", &key);
        tokio::time::advance(crate::reload::RECHECK).await;
        assert!(handshake(&reloader, &new.ca_pem).await);
        assert!(!handshake(&reloader, &old.ca_pem).await);
    }

    #[tokio::test]
    async fn a_required_client_certificate_must_come_from_the_client_ca() {
        let dir = tempfile::tempdir().unwrap();
        let server_pki = Pki::new("server-ca");
        let (cert, key) = server_pki.leaf("localhost");
        let clients = Pki::new("clients-ca");
        let settings = TlsSettings {
            cert: write(dir.path(), "tls.crt", &cert),
            key: write(dir.path(), "tls.key", &key),
            client_ca: Some(write(dir.path(), "ca.crt", &clients.ca_pem)),
            client_auth: ClientAuth::Required,
        };
        let reloader = TlsReloader::new(settings.clone()).unwrap();
        // No client certificate, or one the clients CA did not sign: refused.
        assert!(!handshake(&reloader, &server_pki.ca_pem).await);
        assert!(!handshake_as(&reloader, &server_pki.ca_pem, Some(server_pki.leaf("alice"))).await);
        // One it signed: accepted.
        assert!(handshake_as(&reloader, &server_pki.ca_pem, Some(clients.leaf("alice"))).await);
        // Required without a CA file is a configuration error, named as such.
        let missing = TlsSettings { client_ca: None, ..settings };
        assert!(matches!(TlsReloader::new(missing), Err(TlsError::NoClientCa(ClientAuth::Required))));
    }

    #[test]
    fn unreadable_files_are_named_in_the_error() {
        let dir = tempfile::tempdir().unwrap();
        let settings = TlsSettings {
            cert: dir.path().join("missing.crt"),
            key: dir.path().join("missing.key"),
            client_ca: None,
            client_auth: ClientAuth::None,
        };
        let e = TlsReloader::new(settings).unwrap_err();
        assert!(e.to_string().contains("missing.crt"), "{e}");
        let garbage = write(dir.path(), "tls.crt", "not a certificate");
        let settings = TlsSettings { cert: garbage, key: dir.path().join("k"), client_ca: None, client_auth: ClientAuth::None };
        assert!(matches!(TlsReloader::new(settings), Err(TlsError::Pem { .. })));
    }
}
