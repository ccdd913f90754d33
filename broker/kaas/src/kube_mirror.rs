//! The controller's KafkaClusterAssignments mirror: the latest assignment, server-side applied
//! by a background task so the controller never waits on the API server for it.

use kaas_controller::mirror::AssignmentMirror;
use kaas_shared::assignment::Assignment;
use kaas_shared::crd::{KafkaClusterAssignments, KafkaClusterAssignmentsSpec};
use kube::api::{Api, Patch, PatchParams};
use tokio::sync::watch;
use tracing::{debug, warn};

/// The field manager of the mirror's writes.
const FIELD_MANAGER: &str = "kaas-controller";

/// Publishes into the KafkaClusterAssignments named after the cluster.
#[derive(Debug)]
pub(crate) struct KubeMirror {
    latest: watch::Sender<Option<Assignment>>,
}

impl KubeMirror {
    pub(crate) fn start(client: kube::Client, namespace: &str, cluster: &str) -> KubeMirror {
        let api: Api<KafkaClusterAssignments> = Api::namespaced(client, namespace);
        let (latest, mut next) = watch::channel(None::<Assignment>);
        let name = cluster.to_string();
        tokio::spawn(async move {
            // Only the newest assignment matters: a burst of publishes collapses into one write.
            while next.changed().await.is_ok() {
                let Some(assignment) = next.borrow_and_update().clone() else { continue };
                let object = KafkaClusterAssignments::new(&name, KafkaClusterAssignmentsSpec::of(&assignment));
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
