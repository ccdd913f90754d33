//! The controller's KafkaClusterAssignments mirror: the latest assignment, server-side applied
//! by a background task so the controller never waits on the API server for it.

use std::sync::Arc;

use kaas_controller::mirror::AssignmentMirror;
use kaas_shared::assignment::Assignment;
use kaas_shared::crd::{KafkaClusterAssignments, KafkaClusterAssignmentsSpec};
use kube::api::{Api, Patch, PatchParams};
use tokio::sync::watch;
use tracing::{debug, warn};

use futures::future::BoxFuture;
use kaas_controller::status::{ClusterView, StatusSink, TopicView};
use kaas_shared::crd::cluster::{BrokerTraffic, ClusterTraffic, ConsumerGroupSummary};
use kaas_shared::crd::topic::{TopicLog, human_size};
use kaas_shared::crd::{KafkaCluster, KafkaTopic};
use kube::Resource;

use crate::kube_owner::ClusterOwner;

/// How long a mirror write waits for the owner's look-up before going out without it.
const OWNER_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// The field manager of the mirror's writes.
const FIELD_MANAGER: &str = "kaas-controller";

/// At most one mirror write this often (the newest assignment then): each write carries every
/// partition, about 115 bytes each, and the operator follows every one, so a burst of topic
/// creations must not become a write per topic.
const MIN_INTERVAL: std::time::Duration = std::time::Duration::from_secs(2);

/// The most JSON a mirror write's spec carries, well under etcd's 1.5 MiB object limit: past
/// about 9,000 partitions the rest are left out (see [`fitted`]).
const MAX_SPEC_BYTES: usize = 1 << 20;

/// Says how many partitions a mirror shows when it cannot show them all.
const SHOWN_ANNOTATION: &str = "kaas.dev/partitions-shown";

/// Publishes into the KafkaClusterAssignments named after the cluster.
#[derive(Debug)]
pub(crate) struct KubeMirror {
    latest: watch::Sender<Option<Assignment>>,
}

impl KubeMirror {
    pub(crate) fn start(client: kube::Client, namespace: &str, cluster: &str, owner: Arc<ClusterOwner>) -> KubeMirror {
        let api: Api<KafkaClusterAssignments> = Api::namespaced(client, namespace);
        let (latest, mut next) = watch::channel(None::<Assignment>);
        let name = cluster.to_string();
        tokio::spawn(async move {
            // Only the newest assignment matters: a burst of publishes collapses into one write.
            while next.changed().await.is_ok() {
                let Some(assignment) = next.borrow_and_update().clone() else { continue };
                let (spec, shown) = fitted(&assignment, MAX_SPEC_BYTES);
                let total = spec.partition_count;
                let mut object = KafkaClusterAssignments::new(&name, spec);
                if usize::try_from(total).is_ok_and(|total| shown < total) {
                    let note = format!("{shown} of {total}; assignment.json on the volume has every partition");
                    object.metadata.annotations = Some([(SHOWN_ANNOTATION.to_string(), note)].into());
                }
                // Owned by the KafkaCluster (deleted with it). The next write may be long in
                // coming, so this one waits a little for the owner's look-up.
                object.metadata.owner_references = owner.wait(OWNER_WAIT).await.map(|o| vec![o]);
                let params = PatchParams::apply(FIELD_MANAGER).force();
                match api.patch(&name, &params, &Patch::Apply(&object)).await {
                    Ok(_) => {
                        debug!(version = assignment.assignment_version, "assignment mirrored");
                        // Assignments published meanwhile collapse into the next write.
                        tokio::time::sleep(MIN_INTERVAL).await;
                    }
                    Err(e) => {
                        warn!(version = assignment.assignment_version, error = %e, "mirroring the assignment failed; retrying shortly");
                        tokio::time::sleep(std::time::Duration::from_secs(2)).await;
                        next.mark_changed();
                    }
                }
            }
        });
        KubeMirror { latest }
    }
}

/// The mirror's spec of `assignment` within `max_bytes` of JSON, and how many partitions it
/// lists: those past what fits are left out (the first in topic order are kept), while
/// `partitionCount` still counts every one.
fn fitted(assignment: &Assignment, max_bytes: usize) -> (KafkaClusterAssignmentsSpec, usize) {
    let mut spec = KafkaClusterAssignmentsSpec::of(assignment);
    loop {
        let size = serde_json::to_vec(&spec).map_or(usize::MAX, |json| json.len());
        if size <= max_bytes || spec.partitions.is_empty() {
            break;
        }
        // In proportion, and a tenth more, so that long topic names take few rounds.
        let keep = spec.partitions.len().saturating_mul(max_bytes) / size * 9 / 10;
        spec.partitions.truncate(keep);
    }
    let shown = spec.partitions.len();
    (spec, shown)
}

impl AssignmentMirror for KubeMirror {
    fn publish(&self, assignment: &Assignment) {
        self.latest.send_replace(Some(assignment.clone()));
    }
}

/// The controller's status publication (`kubectl get kafkaclusters` / `kafkatopics`): server-side
/// applies of only the fields the controller owns, under its own field manager, so the
/// operator's and the volume agent's status fields are neither removed nor overwritten (they
/// leave these out of their applies in turn: `without_traffic`, `without_log`).
#[derive(Debug)]
pub(crate) struct KubeStatus {
    clusters: Api<KafkaCluster>,
    topics: Api<KafkaTopic>,
    cluster: String,
    catalog: Arc<crate::kube_topics::KubeTopics>,
}

impl KubeStatus {
    pub(crate) fn new(client: kube::Client, namespace: &str, cluster: &str, catalog: Arc<crate::kube_topics::KubeTopics>) -> KubeStatus {
        KubeStatus {
            clusters: Api::namespaced(client.clone(), namespace),
            topics: Api::namespaced(client, namespace),
            cluster: cluster.to_string(),
            catalog,
        }
    }
}

fn status_error(e: kube::Error) -> kaas_controller::Error {
    kaas_controller::Error::Publish(e.to_string())
}

impl StatusSink for KubeStatus {
    fn cluster<'a>(&'a self, view: &'a ClusterView) -> BoxFuture<'a, kaas_controller::Result<()>> {
        Box::pin(async move {
            let rate = |v: u64| Some(i64::try_from(v).unwrap_or(i64::MAX));
            let traffic = ClusterTraffic {
                bytes_in_per_second: rate(view.bytes_in_per_second),
                bytes_out_per_second: rate(view.bytes_out_per_second),
                messages_in_per_second: rate(view.messages_in_per_second),
                brokers: view
                    .brokers
                    .iter()
                    .map(|b| BrokerTraffic {
                        id: b.id,
                        partitions_led: i32::try_from(b.partitions_led).unwrap_or(i32::MAX),
                        bytes_in_per_second: i64::try_from(b.bytes_in_per_second).unwrap_or(i64::MAX),
                        bytes_out_per_second: i64::try_from(b.bytes_out_per_second).unwrap_or(i64::MAX),
                    })
                    .collect(),
                consumer_group_count: Some(i32::try_from(view.consumer_group_count).unwrap_or(i32::MAX)),
                consumer_groups: view
                    .consumer_groups
                    .iter()
                    .map(|g| ConsumerGroupSummary {
                        name: g.summary.group_id.clone(),
                        state: g.summary.state.clone(),
                        group_type: g.summary.group_type.clone(),
                        protocol_type: g.summary.protocol_type.clone(),
                        members: i32::try_from(g.summary.members).unwrap_or(i32::MAX),
                        lag: g.summary.lag,
                        coordinator: g.coordinator,
                    })
                    .collect(),
            };
            let patch =
                serde_json::json!({"apiVersion": KafkaCluster::api_version(&()), "kind": KafkaCluster::kind(&()), "status": traffic});
            let params = PatchParams::apply(FIELD_MANAGER).force();
            self.clusters.patch_status(&self.cluster, &params, &Patch::Apply(&patch)).await.map_err(status_error)?;
            Ok(())
        })
    }

    fn topic<'a>(&'a self, topic: &'a str, view: &'a TopicView) -> BoxFuture<'a, kaas_controller::Result<()>> {
        Box::pin(async move {
            // A topic without its resource (deleted meanwhile) has no status to show.
            let Some(resource) = self.catalog.resource_name(topic) else { return Ok(()) };
            let log = TopicLog {
                size_bytes: Some(i64::try_from(view.size_bytes).unwrap_or(i64::MAX)),
                size: Some(human_size(view.size_bytes)),
                log_end_offset: Some(view.log_end_offset),
                partitions_reported: Some(i32::try_from(view.partitions_reported).unwrap_or(i32::MAX)),
            };
            let patch = serde_json::json!({"apiVersion": KafkaTopic::api_version(&()), "kind": KafkaTopic::kind(&()), "status": log});
            let params = PatchParams::apply(FIELD_MANAGER).force();
            self.topics.patch_status(&resource, &params, &Patch::Apply(&patch)).await.map_err(status_error)?;
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use kaas_shared::assignment::{Assignment, PartitionAssignment};
    use uuid::Uuid;

    use super::fitted;

    fn assignment(topics: usize, partitions: i32, name_length: usize) -> Assignment {
        let mut a = Assignment::default();
        for t in 0..topics {
            let topic = format!("{t:0name_length$}");
            for p in 0..partitions {
                let placed = PartitionAssignment { topic_id: Uuid::from_u128(t as u128), leader: p % 3, leader_epoch: 0 };
                a.partitions.insert(kaas_shared::names::partition_key(&topic, p), placed);
            }
        }
        a
    }

    #[test]
    fn a_mirror_that_fits_lists_every_partition() {
        let (spec, shown) = fitted(&assignment(100, 5, 12), 1 << 20);
        assert_eq!((shown, spec.partitions.len(), spec.partition_count), (500, 500, 500));
    }

    #[test]
    fn a_mirror_too_large_for_etcd_lists_what_fits_and_counts_every_partition() {
        // 12,000 partitions of 200-character topic names: about 3 MB in full.
        let (spec, shown) = fitted(&assignment(2_000, 6, 200), 1 << 20);
        let size = serde_json::to_vec(&spec).map(|json| json.len()).unwrap_or(usize::MAX);
        assert!(size <= 1 << 20, "{size} bytes");
        assert!(shown > 2_000 && shown < 12_000, "{shown} shown");
        assert_eq!((spec.partitions.len(), spec.partition_count), (shown, 12_000));
    }
}
