//! The KafkaCluster reconciler (the manager): renders [`resources`] and applies them by
//! server-side apply, then reports status. Owned objects carry owner references, so deleting the
//! KafkaCluster deletes them by garbage collection (except the data claim); there is no finalizer.
//!
//! Rolling restarts are the StatefulSet's `RollingUpdate`: one broker at a time, each waiting
//! for the previous one's `/readyz`, which the broker answers only once the assignment is
//! applied and its partitions are led; the pod's termination grace period covers the drain.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetStatus};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;
use kaas_shared::crd::conditions::{DEGRADED, PROGRESSING, READY};
use kaas_shared::crd::{KafkaCluster, KafkaClusterAssignments, KafkaClusterStatus};
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;
use tracing::warn;

use crate::conditions::{Cond, merge};
use crate::diagnosis;
use crate::resources::{self, Names};
use crate::{ERROR_REQUEUE, Error, FIELD_MANAGER, Result, validate, versions};

/// What the manager's reconcilers share.
#[derive(Clone)]
pub struct Context {
    /// API client.
    pub client: Client,
    /// Image of the volume agents (this operator's own image).
    pub agent_image: String,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("agent_image", &self.agent_image)
            .finish_non_exhaustive()
    }
}

/// Why the spec cannot be rolled out, if it cannot.
pub fn refusal(kc: &KafkaCluster) -> Option<Cond> {
    if !versions::is_supported(&kc.spec.version) {
        return Some(Cond::new(
            DEGRADED,
            true,
            "UnsupportedBrokerVersion",
            format!(
                "broker version {:?} is not managed by kaas-operator {}; it manages {}",
                kc.spec.version,
                versions::OPERATOR_VERSION,
                versions::SUPPORTED_BROKER_MINORS
                    .iter()
                    .map(|m| format!("{m}.x"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    }
    if let Err(problems) = validate::broker_configs(&kc.spec.config) {
        return Some(Cond::new(
            DEGRADED,
            true,
            "InvalidConfig",
            problems.join("; "),
        ));
    }
    None
}

/// The three conditions from the StatefulSet's status and, while brokers are not ready, the
/// diagnosed reason (`diagnosis::diagnose`).
pub fn conditions(
    replicas: i32,
    sts: Option<&StatefulSetStatus>,
    sts_generation: Option<i64>,
    problem: Option<Cond>,
) -> Vec<Cond> {
    let ready = sts.map_or(0, |s| s.ready_replicas.unwrap_or(0));
    let updated = sts.map_or(0, |s| s.updated_replicas.unwrap_or(0));
    let current = sts.map_or(0, |s| s.replicas);
    let observed = sts.and_then(|s| s.observed_generation);
    let rolled_out = observed.is_some()
        && observed == sts_generation
        && updated == replicas
        && current == replicas;
    let (is_ready, reason, message) = if sts.is_none() {
        (
            false,
            "Creating",
            "creating the broker StatefulSet".to_owned(),
        )
    } else if !rolled_out {
        (
            false,
            "RollingOut",
            format!("{updated}/{replicas} brokers updated, {ready} ready"),
        )
    } else if ready < replicas {
        (
            false,
            "BrokersNotReady",
            format!("{ready}/{replicas} brokers ready"),
        )
    } else {
        (true, "Ready", format!("{ready}/{replicas} brokers ready"))
    };
    match problem.filter(|_| !is_ready) {
        Some(problem) => vec![
            Cond::new(
                READY,
                false,
                problem.reason,
                format!("{message}: {}", problem.message),
            ),
            Cond::new(PROGRESSING, true, reason, message),
            problem,
        ],
        None => vec![
            Cond::new(READY, is_ready, reason, message.clone()),
            Cond::new(
                PROGRESSING,
                !is_ready,
                if is_ready { "Settled" } else { reason },
                message,
            ),
            Cond::new(DEGRADED, false, "AsExpected", ""),
        ],
    }
}

/// Reads what explains brokers that are not ready: the shared claim (and its StorageClass while
/// it is not bound) and the broker pods. A read that fails leaves that part unexplained.
async fn diagnose(client: &Client, kc: &KafkaCluster, names: &Names) -> Option<Cond> {
    let claim_name = resources::claim_name(kc, names);
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &names.namespace);
    let claim = claims.get_opt(&claim_name).await.ok()?;
    let pending_class = claim
        .as_ref()
        .filter(|c| c.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Bound"))
        .and_then(|c| c.spec.as_ref()?.storage_class_name.clone());
    let storage_class_exists = match pending_class {
        Some(class) => Api::<StorageClass>::all(client.clone())
            .get_opt(&class)
            .await
            .ok()
            .map(|c| c.is_some()),
        None => None,
    };
    let selector = resources::selector(names, "broker")
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",");
    let pods = Api::<Pod>::namespaced(client.clone(), &names.namespace)
        .list(&ListParams::default().labels(&selector))
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    diagnosis::diagnose(&diagnosis::Observed {
        claim_name: &claim_name,
        claim: claim.as_ref(),
        storage_class_exists,
        pods: &pods,
    })
}

/// A Warning event on the KafkaCluster when a problem is first diagnosed or its reason changes
/// (the condition carries it while it lasts; the event is the notification).
async fn announce(client: &Client, kc: &KafkaCluster, previous: &[Condition], now: &[Condition]) {
    let Some(degraded) = now.iter().find(|c| c.type_ == DEGRADED && c.status == "True") else {
        return;
    };
    let same = previous.iter().any(|c| {
        c.type_ == DEGRADED && c.status == "True" && c.reason == degraded.reason
    });
    if same {
        return;
    }
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: FIELD_MANAGER.into(),
            instance: std::env::var("HOSTNAME").ok(),
        },
    );
    let event = Event {
        type_: EventType::Warning,
        reason: degraded.reason.clone(),
        note: Some(degraded.message.clone()),
        action: "Reconcile".into(),
        secondary: None,
    };
    if let Err(e) = recorder.publish(&event, &kc.object_ref(&())).await {
        warn!(error = %e, "cannot publish event");
    }
}

async fn apply<K>(client: &Client, ns: &str, obj: &K) -> Result<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + Serialize
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    let name = obj
        .meta()
        .name
        .clone()
        .ok_or(Error::MissingField("metadata.name"))?;
    Ok(api
        .patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(obj),
        )
        .await?)
}

async fn patch_status(
    client: &Client,
    kc: &KafkaCluster,
    names: &Names,
    status: KafkaClusterStatus,
) -> Result<()> {
    let api: Api<KafkaCluster> = Api::namespaced(client.clone(), &names.namespace);
    let patch = json!({
        "apiVersion": KafkaCluster::api_version(&()),
        "kind": KafkaCluster::kind(&()),
        "status": status,
    });
    api.patch_status(
        &kc.name_any(),
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&patch),
    )
    .await?;
    Ok(())
}

/// Reconciles one KafkaCluster.
pub async fn reconcile(kc: Arc<KafkaCluster>, ctx: Arc<Context>) -> Result<Action> {
    let names = Names::of(&kc)?;
    let client = &ctx.client;
    let generation = kc.metadata.generation;
    let previous = kc.status.clone().unwrap_or_default();
    let now = Timestamp::now();

    if let Some(refused) = refusal(&kc) {
        // Leave whatever runs untouched: an unsupported spec must not take a working cluster
        // down, and the next supported spec resumes from it.
        let wanted = [
            Cond::new(READY, false, refused.reason, refused.message.clone()),
            Cond::new(PROGRESSING, false, refused.reason, refused.message.clone()),
            refused,
        ];
        let status = KafkaClusterStatus {
            conditions: merge(&previous.conditions, &wanted, generation, now),
            observed_generation: generation,
            ..previous.clone()
        };
        patch_status(client, &kc, &names, status).await?;
        return Ok(Action::requeue(Duration::from_secs(300)));
    }

    if let Some(pvc) = resources::claim(&kc, &names)? {
        apply(client, &names.namespace, &pvc).await?;
    }
    let (sa, role, binding) = resources::broker_rbac(&kc, &names)?;
    apply(client, &names.namespace, &sa).await?;
    apply(client, &names.namespace, &role).await?;
    apply(client, &names.namespace, &binding).await?;
    let (sa, role, binding) = resources::agent_rbac(&kc, &names)?;
    apply(client, &names.namespace, &sa).await?;
    apply(client, &names.namespace, &role).await?;
    apply(client, &names.namespace, &binding).await?;
    apply(
        client,
        &names.namespace,
        &resources::headless_service(&kc, &names)?,
    )
    .await?;
    apply(
        client,
        &names.namespace,
        &resources::bootstrap_service(&kc, &names)?,
    )
    .await?;
    apply(client, &names.namespace, &resources::pdb(&kc, &names)?).await?;

    let sts_api: Api<StatefulSet> = Api::namespaced(client.clone(), &names.namespace);
    let live = sts_api.get_opt(&names.cluster).await?;
    let template =
        resources::choose_template(resources::broker_pod_template(&kc, &names)?, live.as_ref());
    let hash = template
        .metadata
        .as_ref()
        .and_then(|m| m.annotations.as_ref())
        .and_then(|a| a.get(resources::INPUTS_HASH_ANNOTATION).cloned());
    let sts = apply(
        client,
        &names.namespace,
        &resources::statefulset(&kc, &names, &template)?,
    )
    .await?;
    apply(
        client,
        &names.namespace,
        &resources::volume_agent(&kc, &names, &ctx.agent_image)?,
    )
    .await?;

    // The controller's mirror is optional (it exists once a controller has written an assignment).
    let mirror = Api::<KafkaClusterAssignments>::namespaced(client.clone(), &names.namespace)
        .get_opt(&names.cluster)
        .await
        .unwrap_or_else(|e| {
            warn!(error = %e, "cannot read KafkaClusterAssignments; status shows no controller");
            None
        });
    let ready = sts
        .status
        .as_ref()
        .and_then(|s| s.ready_replicas)
        .unwrap_or(0);
    let problem = if ready < kc.spec.replicas {
        diagnose(client, &kc, &names).await
    } else {
        None
    };
    let degraded = problem.is_some();
    let wanted = conditions(
        kc.spec.replicas,
        sts.status.as_ref(),
        sts.metadata.generation,
        problem,
    );
    let conditions = merge(&previous.conditions, &wanted, generation, now);
    announce(client, &kc, &previous.conditions, &conditions).await;
    let status = KafkaClusterStatus {
        conditions,
        observed_generation: generation,
        ready_brokers: sts
            .status
            .as_ref()
            .and_then(|s| s.ready_replicas)
            .unwrap_or(0),
        current_controller: mirror
            .as_ref()
            .map(|m| format!("{}-{}", names.cluster, m.spec.controller_id)),
        assignment_version: mirror.as_ref().map(|m| m.spec.assignment_version),
        bootstrap_servers: Some(resources::bootstrap_servers(&kc, &names)),
        pod_template_hash: hash,
    };
    if kc.status.as_ref() != Some(&status) {
        patch_status(client, &kc, &names, status).await?;
    }
    // StatefulSet status changes wake us through the owned-object watch; the requeue is a
    // backstop for the assignment mirror, which is not owned, and for what a diagnosis reads
    // (claims and pods are not watched), so a fixed problem clears within seconds.
    Ok(Action::requeue(Duration::from_secs(if degraded || ready < kc.spec.replicas { 10 } else { 60 })))
}

/// Requeues after an error.
pub fn error_policy(kc: Arc<KafkaCluster>, error: &Error, _ctx: Arc<Context>) -> Action {
    warn!(cluster = %kc.name_any(), reason = error.reason(), %error, "reconcile failed");
    Action::requeue(ERROR_REQUEUE)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use http::{Request, Response};
    use kube::client::Body;

    fn sts_status(replicas: i32, ready: i32, updated: i32, observed: i64) -> StatefulSetStatus {
        StatefulSetStatus {
            replicas,
            ready_replicas: Some(ready),
            updated_replicas: Some(updated),
            observed_generation: Some(observed),
            ..StatefulSetStatus::default()
        }
    }

    #[test]
    fn conditions_follow_the_statefulset() {
        let c = conditions(3, None, None, None);
        assert_eq!((c[0].status, c[0].reason), (false, "Creating"));
        let c = conditions(3, Some(&sts_status(3, 3, 1, 2)), Some(2), None);
        assert_eq!(
            (c[0].status, c[0].reason, c[1].status),
            (false, "RollingOut", true)
        );
        let c = conditions(3, Some(&sts_status(3, 3, 3, 1)), Some(2), None);
        assert_eq!(
            c[0].reason, "RollingOut",
            "StatefulSet controller has not seen the new spec"
        );
        let c = conditions(3, Some(&sts_status(3, 2, 3, 2)), Some(2), None);
        assert_eq!((c[0].status, c[0].reason), (false, "BrokersNotReady"));
        let c = conditions(3, Some(&sts_status(3, 3, 3, 2)), Some(2), None);
        assert_eq!(
            (c[0].status, c[1].status, c[2].status),
            (true, false, false)
        );
    }

    #[test]
    fn a_diagnosed_problem_is_the_reason_brokers_are_not_ready() {
        let problem = || Some(Cond::new(DEGRADED, true, "StorageNotBound", "claim x is Pending"));
        let c = conditions(3, Some(&sts_status(3, 0, 3, 2)), Some(2), problem());
        assert_eq!((c[0].status, c[0].reason), (false, "StorageNotBound"));
        assert_eq!(c[0].message, "0/3 brokers ready: claim x is Pending");
        assert_eq!((c[1].status, c[1].reason), (true, "BrokersNotReady"));
        assert_eq!((c[2].type_, c[2].status, c[2].reason), (DEGRADED, true, "StorageNotBound"));
        // Ready brokers outrank a stale diagnosis.
        let c = conditions(3, Some(&sts_status(3, 3, 3, 2)), Some(2), problem());
        assert_eq!((c[0].status, c[2].status), (true, false));
    }

    fn cluster(version: &str) -> KafkaCluster {
        let spec = serde_json::from_value(
            json!({"replicas": 1, "version": version, "storage": {"existingClaim": "x"}}),
        )
        .unwrap();
        let mut kc = KafkaCluster::new("prod", spec);
        kc.metadata.namespace = Some("ns".into());
        kc.metadata.uid = Some("u".into());
        kc.metadata.generation = Some(4);
        kc
    }

    #[test]
    fn unsupported_versions_and_configs_are_refused() {
        assert!(refusal(&cluster("0.1.0")).is_none());
        let r = refusal(&cluster("9.0.0")).unwrap();
        assert_eq!(
            (r.type_, r.reason),
            ("Degraded", "UnsupportedBrokerVersion")
        );
        assert!(r.message.contains("0.1.x"), "{}", r.message);
        let mut kc = cluster("0.1.0");
        kc.spec.config.insert("listen".into(), "x".into());
        assert_eq!(refusal(&kc).unwrap().reason, "InvalidConfig");
    }

    /// An unsupported version: the reconciler writes only status (Degraded) and creates nothing.
    #[tokio::test]
    async fn an_unsupported_version_touches_nothing_but_status() {
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let client = Client::new(service, "ns");
        let ctx = Arc::new(Context {
            client,
            agent_image: "img".into(),
        });
        let server = tokio::spawn(async move {
            let (request, send) = handle.next_request().await.expect("one request");
            assert_eq!(request.method(), http::Method::PATCH);
            assert_eq!(
                request.uri().path(),
                "/apis/kaas.dev/v1alpha1/namespaces/ns/kafkaclusters/prod/status"
            );
            let body = request.into_body().collect_bytes().await.unwrap();
            let patch: serde_json::Value = serde_json::from_slice(&body).unwrap();
            let conds = patch["status"]["conditions"].as_array().unwrap();
            let degraded = conds.iter().find(|c| c["type"] == "Degraded").unwrap();
            assert_eq!(degraded["status"], "True");
            assert_eq!(degraded["reason"], "UnsupportedBrokerVersion");
            assert_eq!(patch["status"]["observedGeneration"], 4);
            let mut updated = serde_json::to_value(cluster("9.0.0")).unwrap();
            updated["status"] = patch["status"].clone();
            send.send_response(
                Response::builder()
                    .body(Body::from(serde_json::to_vec(&updated).unwrap()))
                    .unwrap(),
            );
            // No further request may come.
            assert!(handle.next_request().await.is_none());
        });
        let action = reconcile(Arc::new(cluster("9.0.0")), ctx).await.unwrap();
        assert_eq!(action, Action::requeue(Duration::from_secs(300)));
        server.await.unwrap();
    }
}
