//! The KafkaCluster that owns what brokers create in Kubernetes (the controller Lease, the
//! KafkaClusterAssignments mirror, KafkaTopics created through the Kafka API), so the garbage
//! collector deletes them with the cluster.
//!
//! The uid is looked up from the API server (the brokers' Role allows `get` on kafkaclusters)
//! rather than passed in the pod template: a new environment variable would change the template
//! and roll every broker when the operator is upgraded. The look-up is lazy and retried, so
//! brokers started under an older operator's Role (without that `get`) pick the owner up once
//! the upgraded operator has widened the Role, without a restart.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kaas_shared::crd::KafkaCluster;
use kube::Resource;
use kube::api::Api;
use tokio::sync::watch;
use tracing::{info, warn};

/// How long after a failed look-up the next one waits.
const RETRY_AFTER: Duration = Duration::from_secs(30);

/// One cluster's owner reference, looked up by a background task until it is found, so no
/// write (a Lease renewal least of all) waits on the look-up.
#[derive(Debug)]
pub(crate) struct ClusterOwner {
    found: watch::Receiver<Option<OwnerReference>>,
}

impl ClusterOwner {
    /// Starts the look-up of KafkaCluster `name` in `namespace`.
    pub(crate) fn start(client: kube::Client, namespace: &str, name: &str) -> Arc<ClusterOwner> {
        let api: Api<KafkaCluster> = Api::namespaced(client, namespace);
        let (tx, found) = watch::channel(None);
        let name = name.to_string();
        tokio::spawn(async move {
            loop {
                match api.get(&name).await.map(|cluster| owner_reference(&cluster)) {
                    Ok(Some(owner)) => {
                        info!(cluster = %name, uid = %owner.uid, "objects this broker creates are owned by its KafkaCluster");
                        tx.send_replace(Some(owner));
                        return;
                    }
                    Ok(None) => warn!(cluster = %name, "the KafkaCluster has no uid; retrying"),
                    // E.g. 403 under an older operator's Role, until the upgraded one widens it.
                    Err(e) => {
                        warn!(cluster = %name, error = %e, "cannot read the KafkaCluster; objects are created without an owner for now")
                    }
                }
                tokio::time::sleep(RETRY_AFTER).await;
            }
        });
        Arc::new(ClusterOwner { found })
    }

    /// The owner reference if it is known yet. A write without it is fine: the object gains it
    /// on a later write.
    pub(crate) fn reference(&self) -> Option<OwnerReference> {
        self.found.borrow().clone()
    }

    /// The owner reference, waiting at most `bound` for the look-up (for writes that may not
    /// come again soon, such as a created KafkaTopic).
    pub(crate) async fn wait(&self, bound: Duration) -> Option<OwnerReference> {
        let mut found = self.found.clone();
        match tokio::time::timeout(bound, found.wait_for(Option::is_some)).await {
            Ok(Ok(owner)) => owner.clone(),
            _ => self.reference(),
        }
    }
}

/// A controller reference to `cluster` that does not block the owner's deletion: setting
/// `blockOwnerDeletion` needs `update` on the owner's finalizers, which brokers do not hold
/// (and need not: nothing here must outlive the cluster by a moment).
fn owner_reference(cluster: &KafkaCluster) -> Option<OwnerReference> {
    let mut owner = cluster.controller_owner_ref(&())?;
    owner.block_owner_deletion = None;
    Some(owner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reference_names_the_cluster_as_controller_without_blocking_its_deletion() {
        let spec = serde_json::from_value(serde_json::json!({"replicas": 1, "version": "0.1.0", "storage": {"existingClaim": "x"}}));
        let mut cluster = KafkaCluster::new("kc", spec.unwrap_or_else(|e| panic!("spec: {e}")));
        assert!(owner_reference(&cluster).is_none(), "no uid, no reference");
        cluster.metadata.uid = Some("0b1c2d3e-0000-0000-0000-000000000001".into());
        let owner = owner_reference(&cluster).unwrap_or_else(|| panic!("a reference"));
        assert_eq!((owner.kind.as_str(), owner.api_version.as_str(), owner.name.as_str()), ("KafkaCluster", "kaas.dev/v1alpha1", "kc"));
        assert_eq!(owner.uid, "0b1c2d3e-0000-0000-0000-000000000001");
        assert_eq!((owner.controller, owner.block_owner_deletion), (Some(true), None));
    }
}
