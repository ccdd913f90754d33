//! The `kaas-controller` Lease in Kubernetes, behind the controller's narrow [`LeaseStore`].
//!
//! Creation is a plain create (exactly one racer wins it); every later write is a server-side
//! apply that carries the resourceVersion it was decided on, so the API server refuses it with
//! 409 Conflict if anyone wrote in between — the optimistic lock the election relies on.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::future::BoxFuture;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kaas_controller::lease::{LeaseState, LeaseStore, VersionedLease};
use kube::api::{Api, Patch, PatchParams, PostParams};

use crate::kube_owner::ClusterOwner;

/// The field manager of every broker's Lease writes.
const FIELD_MANAGER: &str = "kaas-broker";

/// A Lease in one namespace.
#[derive(Clone)]
pub(crate) struct KubeLease {
    api: Api<Lease>,
    name: String,
    /// The KafkaCluster whose deletion deletes the Lease (none outside a KafkaCluster).
    owner: Option<Arc<ClusterOwner>>,
}

impl std::fmt::Debug for KubeLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeLease").field("name", &self.name).finish()
    }
}

impl KubeLease {
    pub(crate) fn new(client: kube::Client, namespace: &str, name: &str, owner: Option<Arc<ClusterOwner>>) -> KubeLease {
        KubeLease { api: Api::namespaced(client, namespace), name: name.to_string(), owner }
    }

    fn object(&self, state: &LeaseState, resource_version: Option<String>) -> Lease {
        let micro = |t: SystemTime| k8s_openapi::jiff::Timestamp::try_from(t).ok().map(MicroTime);
        // Every write carries the owner, so a Lease created before the owner could be read
        // gains it on a later renewal.
        let owner = self.owner.as_ref().and_then(|owner| owner.reference());
        Lease {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                resource_version,
                owner_references: owner.map(|o| vec![o]),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: state.holder.clone(),
                lease_duration_seconds: Some(i32::try_from(state.duration.as_secs()).unwrap_or(i32::MAX).max(1)),
                renew_time: micro(state.renew_time),
                lease_transitions: Some(i32::try_from(state.transitions).unwrap_or(i32::MAX)),
                ..LeaseSpec::default()
            }),
        }
    }
}

fn lease_error(e: kube::Error) -> kaas_controller::Error {
    kaas_controller::Error::Lease(e.to_string())
}

fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

impl LeaseStore for KubeLease {
    fn get(&self) -> BoxFuture<'_, kaas_controller::Result<Option<VersionedLease>>> {
        Box::pin(async move {
            let Some(lease) = self.api.get_opt(&self.name).await.map_err(lease_error)? else { return Ok(None) };
            let spec = lease.spec.unwrap_or_default();
            let state = LeaseState {
                holder: spec.holder_identity.filter(|h| !h.is_empty()),
                renew_time: spec.renew_time.map_or(SystemTime::UNIX_EPOCH, |t| SystemTime::from(t.0)),
                duration: Duration::from_secs(u64::try_from(spec.lease_duration_seconds.unwrap_or(0)).unwrap_or(0)),
                transitions: i64::from(spec.lease_transitions.unwrap_or(0)),
            };
            Ok(Some(VersionedLease { state, version: lease.metadata.resource_version.unwrap_or_default() }))
        })
    }

    fn put(&self, state: LeaseState, expected: Option<String>) -> BoxFuture<'_, kaas_controller::Result<bool>> {
        Box::pin(async move {
            let result = match expected {
                None => self.api.create(&PostParams::default(), &self.object(&state, None)).await.map(|_| ()),
                Some(version) => {
                    let params = PatchParams::apply(FIELD_MANAGER).force();
                    let mut object = serde_json::to_value(self.object(&state, Some(version))).map_err(|e| kaas_controller::Error::Lease(e.to_string()))?;
                    object["apiVersion"] = "coordination.k8s.io/v1".into();
                    object["kind"] = "Lease".into();
                    self.api.patch(&self.name, &params, &Patch::Apply(object)).await.map(|_| ())
                }
            };
            match result {
                Ok(()) => Ok(true),
                Err(e) if is_conflict(&e) => Ok(false),
                Err(e) => Err(lease_error(e)),
            }
        })
    }
}
