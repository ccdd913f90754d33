//! The external listener: a second Kafka listener for clients outside the network the client
//! listener advertises into (Kafka's `EXTERNAL` listener of `advertised.listeners`). It is
//! secured like the client listener; what differs is the address every broker is announced at
//! in Metadata, FindCoordinator and DescribeCluster answers on it.
//!
//! Local mode names this broker's address (`--external-advertise`). On Kubernetes the operator
//! writes every broker's address into a mounted ConfigMap (`--external-addresses`,
//! [`kaas_shared::external_addresses`]), which the kubelet updates in place as load balancers get
//! addresses and pods move between nodes; [`follow`] reads it again every second.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use kaas_shared::external_addresses::{ExternalAddress, ExternalAddresses};
use parking_lot::{Mutex, RwLock};
use tracing::{info, warn};

/// How often the addresses file is read again.
const REFRESH: Duration = Duration::from_secs(1);

/// Where the external listener binds and how its addresses are known.
#[derive(Debug, Clone)]
pub struct ExternalListenerConfig {
    pub listen: SocketAddr,
    pub advertised: ExternalAdvertised,
}

#[derive(Debug, Clone)]
pub enum ExternalAdvertised {
    /// This broker's address, fixed (local mode).
    This(ExternalAddress),
    /// Every broker's address, from this file (the operator's ConfigMap).
    File(PathBuf),
}

/// Why the addresses file could not be served.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("reading {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{path} is not an external addresses map: {source}")]
    Parse { path: PathBuf, source: serde_json::Error },
}

/// The addresses served on the external listener.
#[derive(Debug)]
pub struct External {
    config: ExternalListenerConfig,
    addresses: RwLock<ExternalAddresses>,
    /// The file's bytes last served, so an unchanged file is not parsed again.
    read: Mutex<Option<Vec<u8>>>,
}

impl External {
    /// The addresses of `config` for broker `node_id`; a file is read by [`External::refresh`].
    pub fn new(config: ExternalListenerConfig, node_id: i32) -> External {
        let mut addresses = ExternalAddresses::default();
        if let ExternalAdvertised::This(address) = &config.advertised {
            addresses.brokers.insert(node_id, address.clone());
        }
        External { config, addresses: RwLock::new(addresses), read: Mutex::new(None) }
    }

    pub fn listen(&self) -> SocketAddr {
        self.config.listen
    }

    /// The address broker `id` is announced at; `None` while it has none (it is then left out
    /// of answers on this listener, and clients retry as they do for a broker not up yet).
    pub fn address(&self, id: i32) -> Option<ExternalAddress> {
        self.addresses.read().get(id).cloned()
    }

    /// Reads the addresses file again and serves it if it changed. A missing file serves no
    /// address (the operator writes it once it knows one); an unreadable or malformed one keeps
    /// what was served. Blocking (file I/O).
    pub fn refresh(&self) -> Result<(), Error> {
        let ExternalAdvertised::File(path) = &self.config.advertised else { return Ok(()) };
        let bytes = match std::fs::read(path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(source) => return Err(Error::Read { path: path.clone(), source }),
        };
        let mut read = self.read.lock();
        if read.as_deref() == Some(&bytes[..]) {
            return Ok(());
        }
        let addresses = if bytes.is_empty() {
            ExternalAddresses::default()
        } else {
            ExternalAddresses::from_json(&bytes).map_err(|source| Error::Parse { path: path.clone(), source })?
        };
        info!(brokers = ?addresses.brokers, "external listener addresses changed");
        *self.addresses.write() = addresses;
        *read = Some(bytes);
        Ok(())
    }
}

/// Reads the external addresses file every [`REFRESH`] until `stop`.
pub async fn follow(broker: Arc<crate::Broker>, mut stop: tokio::sync::watch::Receiver<bool>) {
    if broker.external.is_none() {
        return;
    }
    let mut last_error = None;
    loop {
        let reader = broker.clone();
        let read = tokio::task::spawn_blocking(move || reader.external.as_ref().map_or(Ok(()), External::refresh)).await;
        let error = match read {
            Ok(result) => result.err().map(|e| e.to_string()),
            Err(e) => Some(e.to_string()),
        };
        // Said once per new problem, not every second.
        if error.is_some() && error != last_error {
            warn!(error = error.as_deref().unwrap_or_default(), "serving the external addresses read before");
        }
        last_error = error;
        tokio::select! {
            _ = tokio::time::sleep(REFRESH) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn from_file(path: PathBuf) -> External {
        External::new(ExternalListenerConfig { listen: "[::]:9093".parse().unwrap(), advertised: ExternalAdvertised::File(path) }, 1)
    }

    #[test]
    fn a_file_is_served_as_it_changes_and_a_bad_one_keeps_the_last() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("addresses.json");
        let external = from_file(path.clone());
        external.refresh().unwrap();
        assert_eq!(external.address(1), None, "no file yet: no address");

        std::fs::write(
            &path,
            r#"{"brokers": {"0": {"host": "198.51.100.1", "port": 31000}, "1": {"host": "lb-1.example", "port": 9093}}}"#,
        )
        .unwrap();
        external.refresh().unwrap();
        assert_eq!(external.address(1), Some(ExternalAddress { host: "lb-1.example".into(), port: 9093 }));
        assert_eq!(external.address(0).map(|a| a.port), Some(31000));
        assert_eq!(external.address(2), None);

        std::fs::write(&path, "{ not json").unwrap();
        assert!(matches!(external.refresh(), Err(Error::Parse { .. })));
        assert_eq!(external.address(1).map(|a| a.host), Some("lb-1.example".to_string()), "the last good map stays");
    }

    #[test]
    fn local_mode_names_this_broker_only() {
        let address = ExternalAddress { host: "localhost".into(), port: 19092 };
        let external = External::new(
            ExternalListenerConfig { listen: "127.0.0.1:0".parse().unwrap(), advertised: ExternalAdvertised::This(address.clone()) },
            7,
        );
        external.refresh().unwrap();
        assert_eq!(external.address(7), Some(address));
        assert_eq!(external.address(0), None);
    }
}
