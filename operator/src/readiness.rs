//! KafkaCluster, KafkaTopic and KafkaUser readiness as gauges, `kaas_operator_resources{kind, ready}`,
//! counted at scrape time from the caches the controllers already keep: no extra watch, and
//! nothing to forget when an object is deleted. A standby replica runs no controller and so
//! reports nothing; each running controller (one per watched namespace) adds its cache.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kaas_shared::crd::{KafkaCluster, KafkaTopic, KafkaUser};
use kube::runtime::reflector::Store;
use std::sync::Mutex;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::gauge::ConstGauge;

/// An object whose status says whether it is ready (`Ready=True`).
pub trait Readable: kube::Resource + Clone + Send + Sync + 'static {
    fn conditions(&self) -> &[Condition];
}

impl Readable for KafkaCluster {
    fn conditions(&self) -> &[Condition] {
        self.status.as_ref().map_or(&[], |s| &s.conditions)
    }
}

impl Readable for KafkaTopic {
    fn conditions(&self) -> &[Condition] {
        self.status.as_ref().map_or(&[], |s| &s.conditions)
    }
}

impl Readable for KafkaUser {
    fn conditions(&self) -> &[Condition] {
        self.status.as_ref().map_or(&[], |s| &s.conditions)
    }
}

fn is_ready(conditions: &[Condition]) -> bool {
    conditions
        .iter()
        .any(|c| c.type_ == "Ready" && c.status == "True")
}

/// (ready, not ready) of one cache.
type Count = Box<dyn Fn() -> (i64, i64) + Send + Sync>;

/// The caches being counted (see the module docs).
#[derive(Default)]
pub struct Readiness {
    caches: Mutex<BTreeMap<u64, (&'static str, Count)>>,
    next: AtomicU64,
}

impl std::fmt::Debug for Readiness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Readiness")
            .field("caches", &self.caches().len())
            .finish()
    }
}

/// Counts a controller's cache until dropped (when the controller stops).
#[derive(Debug)]
pub struct Counted {
    readiness: Arc<Readiness>,
    id: u64,
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.readiness.caches().remove(&self.id);
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Labels {
    kind: &'static str,
    ready: &'static str,
}

impl Readiness {
    /// The caches; a panic while they were held cannot leave them half-changed (each change is
    /// one insert or remove), so a poisoned lock is taken over.
    fn caches(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, (&'static str, Count)>> {
        self.caches.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Counts the objects of `store` as `kind` until the returned guard drops.
    pub fn count<K: Readable>(self: &Arc<Self>, kind: &'static str, store: Store<K>) -> Counted
    where
        K::DynamicType: std::hash::Hash + Eq + Clone,
    {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let count: Count = Box::new(move || {
            let objects = store.state();
            let ready = objects.iter().filter(|o| is_ready(o.conditions())).count();
            (ready as i64, (objects.len() - ready) as i64)
        });
        self.caches().insert(id, (kind, count));
        Counted {
            readiness: self.clone(),
            id,
        }
    }

    /// (kind, ready, not ready), summed over the caches of each kind.
    fn totals(&self) -> BTreeMap<&'static str, (i64, i64)> {
        let mut totals: BTreeMap<&'static str, (i64, i64)> = BTreeMap::new();
        for (kind, count) in self.caches().values() {
            let (ready, not_ready) = count();
            let total = totals.entry(kind).or_default();
            total.0 += ready;
            total.1 += not_ready;
        }
        totals
    }
}

impl Collector for Readiness {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let totals = self.totals();
        if totals.is_empty() {
            return Ok(());
        }
        let mut family = encoder.encode_descriptor(
            "operator_resources",
            "KafkaClusters and KafkaTopics this replica reconciles, by kind and whether their Ready condition is True",
            None,
            prometheus_client::metrics::MetricType::Gauge,
        )?;
        for (kind, (ready, not_ready)) in totals {
            for (label, value) in [("true", ready), ("false", not_ready)] {
                ConstGauge::new(value)
                    .encode(family.encode_family(&Labels { kind, ready: label })?)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use kube::runtime::reflector::store::Writer;
    use kube::runtime::watcher::Event;

    use super::*;

    fn topic(name: &str, ready: Option<&str>) -> KafkaTopic {
        let spec = kaas_shared::crd::KafkaTopicSpec {
            cluster_ref: "kc".into(),
            topic_name: None,
            partitions: 1,
            config: Default::default(),
        };
        let mut t = KafkaTopic::new(name, spec);
        t.metadata.namespace = Some("ns".into());
        if let Some(status) = ready {
            t.status = Some(kaas_shared::crd::KafkaTopicStatus {
                conditions: vec![Condition {
                    type_: "Ready".into(),
                    status: status.into(),
                    reason: "Test".into(),
                    message: String::new(),
                    last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                        Default::default(),
                    ),
                    observed_generation: None,
                }],
                ..Default::default()
            });
        }
        t
    }

    fn scrape(readiness: &Arc<Readiness>) -> String {
        let mut registry = prometheus_client::registry::Registry::with_prefix("kaas");
        registry.register_collector(Box::new(readiness.clone()));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
        text
    }

    #[test]
    fn objects_are_counted_by_readiness_while_their_controller_runs() {
        let readiness = Arc::new(Readiness::default());
        let mut writer = Writer::<KafkaTopic>::default();
        for t in [
            topic("a", Some("True")),
            topic("b", Some("False")),
            topic("c", None),
        ] {
            writer.apply_watcher_event(&Event::Apply(t));
        }
        let counted = readiness.count("KafkaTopic", writer.as_reader());
        let text = scrape(&readiness);
        assert!(
            text.contains("kaas_operator_resources{kind=\"KafkaTopic\",ready=\"true\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("kaas_operator_resources{kind=\"KafkaTopic\",ready=\"false\"} 2\n"),
            "{text}"
        );
        // A deleted object leaves the cache, and the count.
        writer.apply_watcher_event(&Event::Delete(topic("b", Some("False"))));
        assert!(
            scrape(&readiness)
                .contains("kaas_operator_resources{kind=\"KafkaTopic\",ready=\"false\"} 1\n")
        );
        // A stopped controller's cache is no longer counted.
        drop(counted);
        assert!(!scrape(&readiness).contains("kaas_operator_resources"));
    }
}
