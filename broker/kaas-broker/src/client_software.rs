//! Open connections by client software (KIP-511: ApiVersions v3+ names the client library and
//! its version), so an operator sees which clients and versions are connected without reading
//! logs. The names are the client's to choose, so their number and length are bounded.

use std::collections::HashSet;
use std::sync::Arc;

use parking_lot::Mutex;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

type SoftwareLabel = [(&'static str, String); 2];

/// Distinct (name, version) pairs with their own series; later ones are counted as `other`.
pub const MAX_DISTINCT: usize = 100;
/// Longer names and versions are cut to this many characters.
const MAX_LEN: usize = 64;
const OTHER: &str = "other";

/// The gauge and the pairs it has seen. Clones share them.
#[derive(Debug, Clone, Default)]
pub struct ClientSoftwareMetrics {
    connections: Family<SoftwareLabel, Gauge>,
    seen: Arc<Mutex<HashSet<(String, String)>>>,
}

impl ClientSoftwareMetrics {
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "connections_by_client",
            "Open connections whose client named itself in ApiVersions (KIP-511), by software name and version",
            self.connections.clone(),
        );
    }

    /// A connection whose client calls itself `name` `version`: counted until the returned tag
    /// is dropped (with the connection, or when the client names itself again).
    pub fn connected(&self, name: &str, version: &str) -> ClientTag {
        let pair = (cut(name), cut(version));
        let label = {
            let mut seen = self.seen.lock();
            if seen.contains(&pair) || seen.len() < MAX_DISTINCT {
                seen.insert(pair.clone());
                [("software", pair.0), ("version", pair.1)]
            } else {
                [("software", OTHER.to_string()), ("version", OTHER.to_string())]
            }
        };
        self.connections.get_or_create(&label).inc();
        ClientTag { metrics: self.clone(), label }
    }

    /// Connections counted for `name` `version` (tests).
    #[cfg(test)]
    pub fn count(&self, name: &str, version: &str) -> i64 {
        self.connections.get_or_create(&[("software", name.to_string()), ("version", version.to_string())]).get()
    }
}

fn cut(s: &str) -> String {
    let s = if s.is_empty() { "unknown" } else { s };
    s.chars().take(MAX_LEN).collect()
}

/// One connection's place in the gauge.
#[derive(Debug)]
pub struct ClientTag {
    metrics: ClientSoftwareMetrics,
    label: SoftwareLabel,
}

impl ClientTag {
    /// The software name the connection is counted under (bounded like the gauge's labels).
    pub fn software(&self) -> &str {
        &self.label[0].1
    }
}

impl Drop for ClientTag {
    fn drop(&mut self) {
        self.metrics.connections.get_or_create(&self.label).dec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_follow_connections_and_renaming() {
        let m = ClientSoftwareMetrics::default();
        let a = m.connected("librdkafka", "2.16.0");
        let b = m.connected("librdkafka", "2.16.0");
        assert_eq!(m.count("librdkafka", "2.16.0"), 2);
        drop(a);
        assert_eq!(m.count("librdkafka", "2.16.0"), 1);
        drop(b);
        assert_eq!(m.count("librdkafka", "2.16.0"), 0);
        let _empty = m.connected("", "");
        assert_eq!(m.count("unknown", "unknown"), 1);
    }

    #[test]
    fn distinct_names_are_bounded() {
        let m = ClientSoftwareMetrics::default();
        let tags: Vec<_> = (0..MAX_DISTINCT + 5).map(|i| m.connected("client", &i.to_string())).collect();
        assert_eq!(m.count(OTHER, OTHER), 5);
        assert_eq!(m.count("client", "0"), 1);
        drop(tags);
        let fresh = ClientSoftwareMetrics::default();
        let long = fresh.connected(&"x".repeat(1000), "1");
        assert_eq!(long.label[0].1.len(), MAX_LEN);
    }
}
