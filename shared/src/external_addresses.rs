//! The external listener's advertised addresses: what clients outside the Kubernetes cluster
//! are told to dial for each broker (a node address and node port, a load balancer's address,
//! or the user's override).
//!
//! The operator learns them from the per-broker Services and the pods' nodes, and writes them
//! as JSON into the ConfigMap `<cluster>-external-addresses` (key [`FILE_NAME`]); every broker
//! mounts it and answers Metadata and FindCoordinator on its external listener from it. It is
//! not on the shared volume: it is Kubernetes state the operator owns, and the kubelet swaps
//! the mounted file atomically (so a broker reads either the old or the new map, never a mix).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The ConfigMap key, and so the file name in the broker's mount.
pub const FILE_NAME: &str = "addresses.json";

/// Where a broker's external listener is reached from outside.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExternalAddress {
    /// A host name or an IP address (IPv6 without brackets, as Kafka's Metadata carries it).
    pub host: String,
    pub port: u16,
}

/// Every broker's external address that is known yet, by broker id. A broker missing from it
/// (its load balancer has no address yet, its pod is not scheduled) is not announced on the
/// external listener.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ExternalAddresses {
    #[serde(default)]
    pub brokers: BTreeMap<i32, ExternalAddress>,
}

impl ExternalAddresses {
    /// Reads the JSON the operator writes; a broker id key that is not a number is an error.
    pub fn from_json(bytes: &[u8]) -> serde_json::Result<ExternalAddresses> {
        serde_json::from_slice(bytes)
    }

    /// The JSON the operator writes (keys in broker-id order, so equal maps write equal bytes).
    pub fn to_json(&self) -> String {
        // NB: a map of strings and integers always serializes.
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    pub fn get(&self, broker: i32) -> Option<&ExternalAddress> {
        self.brokers.get(&broker)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_what_is_not_a_map_of_brokers() {
        let mut addresses = ExternalAddresses::default();
        addresses.brokers.insert(
            0,
            ExternalAddress {
                host: "203.0.113.7".into(),
                port: 31092,
            },
        );
        addresses.brokers.insert(
            2,
            ExternalAddress {
                host: "fd00::7".into(),
                port: 9093,
            },
        );
        let json = addresses.to_json();
        assert_eq!(
            ExternalAddresses::from_json(json.as_bytes()).unwrap(),
            addresses
        );
        assert!(json.contains("\"0\""), "{json}");
        assert_eq!(
            ExternalAddresses::from_json(b"{}").unwrap(),
            ExternalAddresses::default()
        );
        assert!(
            ExternalAddresses::from_json(br#"{"brokers": {"zero": {"host": "h", "port": 1}}}"#)
                .is_err()
        );
        assert!(
            ExternalAddresses::from_json(br#"{"brokers": {"0": {"host": "h", "port": 70000}}}"#)
                .is_err()
        );
    }
}
