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
                let mut object = KafkaClusterAssignments::new(&name, KafkaClusterAssignmentsSpec::of(&assignment));
                // Owned by the KafkaCluster (deleted with it). The next write may be long in
                // coming, so this one waits a little for the owner's look-up.
                object.metadata.owner_references = owner.wait(OWNER_WAIT).await.map(|o| vec![o]);
                let params = PatchParams::apply(FIELD_MANAGER).force();
                match api.patch(&name, &params, &Patch::Apply(&object)).await {
                    Ok(_) => debug!(version = assignment.assignment_version, "assignment mirrored"),
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
