//! The KafkaCluster reconciler (the manager): renders [`resources`] and applies them by
//! server-side apply, then reports status. Owned objects carry owner references, so deleting the
//! KafkaCluster deletes them by garbage collection (except the data claim); there is no finalizer.
//!
//! Rolling restarts are the StatefulSet's `RollingUpdate`: one broker at a time, each waiting
//! for the previous one's `/readyz`, which the broker answers only once the assignment is
//! applied and its partitions are led; the pod's termination grace period covers the drain.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetStatus};
use k8s_openapi::api::core::v1::{Event, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;
use kaas_shared::crd::conditions::{DEGRADED, PROGRESSING, READY};
use kaas_shared::crd::{KafkaCluster, KafkaClusterAssignments, KafkaClusterStatus};
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
};
use kube::runtime::controller::Action;
use kube::runtime::events::Recorder;
use kube::{Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;
use tracing::warn;

use crate::backoff::Backoff;
use crate::conditions::{Cond, RECONCILED, failed, merge};
use crate::install::{self, Claim, Install};
use crate::metrics::ReconcileMetrics;
use crate::resources::{self, Names};
use crate::{
    Error, FIELD_MANAGER, Result, certificates, diagnosis, events, external, validate, versions,
};

/// What the manager's reconcilers share.
#[derive(Clone)]
pub struct Context {
    /// API client.
    pub client: Client,
    /// Image of the volume agents (this operator's own image).
    pub agent_image: String,
    /// Events on KafkaClusters.
    pub recorder: Recorder,
    /// Reconcile counts and durations.
    pub metrics: ReconcileMetrics,
    /// Retry delays of failing clusters.
    pub backoff: Arc<Backoff>,
    /// This install, and which clusters are its ([`install`]).
    pub install: Install,
    /// Clusters another install reconciles that this one has said so about (one event each).
    pub announced_elsewhere: Arc<Mutex<HashSet<(String, String)>>>,
}

impl Context {
    /// A context reporting events as the operator.
    pub fn new(
        client: Client,
        agent_image: String,
        metrics: ReconcileMetrics,
        install: Install,
    ) -> Context {
        Context {
            recorder: events::recorder(&client, FIELD_MANAGER),
            client,
            agent_image,
            metrics,
            backoff: Arc::default(),
            install,
            announced_elsewhere: Arc::default(),
        }
    }
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("agent_image", &self.agent_image)
            .field("install", &self.install)
            .finish_non_exhaustive()
    }
}

/// The metric label of this controller.
pub const CONTROLLER: &str = "kafkacluster";

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
    let env = kc.spec.pod_template.as_ref().map(|t| t.env.as_slice());
    if let Err(problem) = validate::pod_env(env.unwrap_or_default()) {
        return Some(Cond::new(DEGRADED, true, "InvalidPodTemplate", problem));
    }
    let drain = kc.spec.config.get("drain.timeout.ms").map(String::as_str);
    if let Err(problem) = validate::grace_period(resources::broker_grace_seconds(kc), drain) {
        return Some(Cond::new(DEGRADED, true, "InvalidPodTemplate", problem));
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

/// The conditions while the spec is refused: the brokers' readiness as it is (they run the
/// template they had), not progressing (nothing is rolled out) for the refusal's reason, and
/// `Degraded` saying why. With no StatefulSet yet, the refusal is why nothing is ready.
pub fn with_refusal(conditions: Vec<Cond>, refused: Cond, running: bool) -> Vec<Cond> {
    let mut out: Vec<Cond> = conditions
        .into_iter()
        .filter(|c| c.type_ != DEGRADED && c.type_ != PROGRESSING)
        .map(|c| {
            if c.type_ == READY && !running {
                Cond::new(READY, false, refused.reason, refused.message.clone())
            } else {
                c
            }
        })
        .collect();
    out.push(Cond::new(
        PROGRESSING,
        false,
        refused.reason,
        format!("not rolled out: {}", refused.message),
    ));
    out.push(refused);
    out
}

/// Reads what explains brokers that are not ready: the shared claim (and its StorageClass while
/// it is not bound), the StatefulSet's events, the broker pods and the events of those that have
/// not started. A read that fails leaves that part unexplained.
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
    let selector = resources::selector_string(names, "broker");
    let pods = Api::<Pod>::namespaced(client.clone(), &names.namespace)
        .list(&ListParams::default().labels(&selector))
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    let events_api = Api::<Event>::namespaced(client.clone(), &names.namespace);
    // The StatefulSet is named after the cluster; its controller's FailedCreate events say why
    // a pod does not exist.
    let fields = format!("involvedObject.kind=StatefulSet,involvedObject.name={}", names.cluster);
    let statefulset_events = events_api
        .list(&ListParams::default().fields(&fields))
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    // The kubelet's FailedMount events say why a pod that has not started cannot.
    let mut pod_events = Vec::new();
    for pod in pods.iter().filter(|p| diagnosis::not_started(p)) {
        let Some(name) = pod.metadata.name.as_deref() else {
            continue;
        };
        let fields = format!("involvedObject.kind=Pod,involvedObject.name={name}");
        let events = events_api
            .list(&ListParams::default().fields(&fields))
            .await;
        pod_events.extend(events.map(|l| l.items).unwrap_or_default());
    }
    diagnosis::diagnose(&diagnosis::Observed {
        claim_name: &claim_name,
        claim: claim.as_ref(),
        storage_class_exists,
        pods: &pods,
        replicas: kc.spec.replicas,
        statefulset_events: &statefulset_events,
        pod_events: &pod_events,
    })
}

/// A Warning event on the KafkaCluster when a problem is first diagnosed or its reason changes,
/// and a Normal one when it becomes ready (the conditions carry the state while it lasts; the
/// event is the notification).
async fn announce(ctx: &Context, kc: &KafkaCluster, previous: &[Condition], now: &[Condition]) {
    let holds = |conds: &[Condition], type_: &str, reason: Option<&str>| {
        conds
            .iter()
            .any(|c| c.type_ == type_ && c.status == "True" && reason.is_none_or(|r| c.reason == r))
    };
    let reference = kc.object_ref(&());
    if let Some(degraded) = now
        .iter()
        .find(|c| c.type_ == DEGRADED && c.status == "True")
        && !holds(previous, DEGRADED, Some(&degraded.reason))
    {
        events::publish(
            &ctx.recorder,
            &reference,
            true,
            &degraded.reason,
            degraded.message.clone(),
            "Reconcile",
        )
        .await;
    }
    if let Some(ready) = now.iter().find(|c| c.type_ == READY && c.status == "True")
        && !holds(previous, READY, None)
    {
        events::publish(
            &ctx.recorder,
            &reference,
            false,
            "Ready",
            ready.message.clone(),
            "Reconcile",
        )
        .await;
    }
}

/// What applying the StatefulSet is about to change, as an event: the first creation, a scale
/// (a scale-down drains the removed brokers first), a rolling restart.
pub fn rollout_decision(
    live: Option<&StatefulSet>,
    replicas: i32,
    hash: Option<&str>,
) -> Option<(&'static str, String)> {
    let Some(live) = live else {
        return Some((
            "Creating",
            format!("creating the broker StatefulSet with {replicas} brokers"),
        ));
    };
    let live_replicas = live.spec.replicas.unwrap_or(1);
    let live_hash = live
        .spec
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.annotations.as_ref())
        .and_then(|a| a.get(resources::INPUTS_HASH_ANNOTATION))
        .map(String::as_str);
    if live_hash != hash {
        Some((
            "RollingRestart",
            format!(
                "broker pod template changed ({} -> {}); restarting brokers one at a time, each draining first",
                live_hash.unwrap_or("none"),
                hash.unwrap_or("none")
            ),
        ))
    } else if live_replicas < replicas {
        Some((
            "ScalingUp",
            format!("scaling up from {live_replicas} to {replicas} brokers"),
        ))
    } else if live_replicas > replicas {
        Some((
            "ScalingDown",
            format!(
                "scaling down from {live_replicas} to {replicas} brokers; each removed broker drains its partitions before it exits"
            ),
        ))
    } else {
        None
    }
}

pub(crate) async fn apply<K>(client: &Client, ns: &str, obj: &K) -> Result<K>
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

/// The cluster's PodMonitor, where the Prometheus Operator's CRD exists. Monitoring is optional:
/// without the CRD (404) nothing is done, and a failure to apply it is reported but stops
/// nothing else.
async fn apply_pod_monitor(ctx: &Context, kc: &KafkaCluster, names: &Names) {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("monitoring.coreos.com", "v1", "PodMonitor"),
        "podmonitors",
    );
    let api: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), &names.namespace, &resource);
    let monitor = resources::broker_pod_monitor(kc, names);
    match api
        .patch(
            &names.headless(),
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&monitor),
        )
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 => {
            tracing::debug!("no PodMonitor CRD: the Prometheus Operator is not installed");
        }
        Err(e) => warn!(error = %e, "cannot apply the cluster's PodMonitor"),
    }
}

async fn patch_status(
    client: &Client,
    kc: &KafkaCluster,
    names: &Names,
    status: KafkaClusterStatus,
) -> Result<()> {
    let api: Api<KafkaCluster> = Api::namespaced(client.clone(), &names.namespace);
    // The controller broker's fields are its own (another field manager): left out here.
    let patch = json!({
        "apiVersion": KafkaCluster::api_version(&()),
        "kind": KafkaCluster::kind(&()),
        "status": status.without_traffic(),
    });
    api.patch_status(
        &kc.name_any(),
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&patch),
    )
    .await?;
    Ok(())
}

fn key(kc: &KafkaCluster) -> String {
    format!(
        "{}/{}",
        kc.metadata.namespace.as_deref().unwrap_or_default(),
        kc.name_any()
    )
}

/// Reconciles one KafkaCluster: counts and times it, and on failure says so in an event and in
/// the `Reconciled` condition.
pub async fn reconcile(kc: Arc<KafkaCluster>, ctx: Arc<Context>) -> Result<Action> {
    let namespace = kc.metadata.namespace.as_deref().unwrap_or_default();
    let _running = ctx.metrics.running(CONTROLLER, namespace, &kc.name_any());
    let started = std::time::Instant::now();
    let result = converge(&kc, &ctx).await;
    ctx.metrics.observe(CONTROLLER, started.elapsed(), &result);
    match &result {
        Ok(_) => ctx.backoff.succeeded(&key(&kc)),
        Err(e) => report_error(&ctx, &kc, e).await,
    }
    result
}

/// A failed reconcile's event and `Reconciled=False` condition (best effort: the failure may be
/// the API server's).
async fn report_error(ctx: &Context, kc: &KafkaCluster, error: &Error) {
    events::reconcile_failed(&ctx.recorder, &kc.object_ref(&()), error).await;
    let Ok(names) = Names::of(kc) else { return };
    let previous = kc.status.clone().unwrap_or_default();
    let status = KafkaClusterStatus {
        conditions: failed(&previous.conditions, error, kc.metadata.generation),
        ..previous
    };
    if let Err(e) = patch_status(&ctx.client, kc, &names, status).await {
        warn!(error = %e, "cannot write the reconcile error to status");
    }
}

async fn converge(kc: &Arc<KafkaCluster>, ctx: &Context) -> Result<Action> {
    let kc = kc.clone();
    let names = Names::of(&kc)?;
    let client = &ctx.client;
    let generation = kc.metadata.generation;
    let previous = kc.status.clone().unwrap_or_default();
    let now = Timestamp::now();

    // A refused spec (an unsupported version, a config key or value the brokers cannot take)
    // is not rolled out, but it stops nothing else: the brokers keep the pod template they run,
    // and everything else (scaling, Services, RBAC, the volume agent, status) is reconciled.
    let refused = refusal(&kc);

    // Another install's cluster is left alone; an unclaimed one is claimed first.
    let claim = kc
        .annotations()
        .get(install::CLAIM_ANNOTATION)
        .map(String::as_str);
    match ctx.install.decide(claim) {
        Claim::Ours => {}
        Claim::Take => {
            if !install::claim(client, &kc, &ctx.install).await? {
                // Someone wrote in between (another install's claim, perhaps): decide again
                // on the new object, which the watch brings.
                return Ok(Action::requeue(Duration::from_secs(1)));
            }
            ctx.announced_elsewhere
                .lock()
                .map(|mut a| a.retain(|(k, _)| *k != key(&kc)))
                .ok();
        }
        Claim::Theirs(holder) => {
            let first = ctx
                .announced_elsewhere
                .lock()
                .map(|mut a| a.insert((key(&kc), holder.clone())))
                .unwrap_or(false);
            if first {
                events::publish(
                    &ctx.recorder,
                    &kc.object_ref(&()),
                    false,
                    "ManagedByAnotherOperator",
                    format!(
                        "reconciled by the operator install {holder}; the install {} leaves it alone",
                        ctx.install.claim_value()
                    ),
                    "Skip",
                )
                .await;
            }
            return Ok(Action::await_change());
        }
    }

    if let Some(pvc) = resources::claim(&kc, &names)? {
        // NB: a claim's spec is immutable but for a size increase, and the CRD refuses storage
        // changes only for objects admitted after that rule. A refused claim change must not
        // stop the rest of the reconcile: brokers keep the claim they have.
        if let Err(e) = apply(client, &names.namespace, &pvc).await {
            warn!(error = %e, "claim change refused; continuing with the existing claim");
            events::publish(
                &ctx.recorder,
                &kc.object_ref(&()),
                true,
                "StorageChangeRefused",
                format!("the shared claim cannot be changed as the spec asks: {e}"),
                "Reconcile",
            )
            .await;
        }
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
    // Before the StatefulSet: brokers mount the addresses ConfigMap it writes.
    let external = external::reconcile(client, &kc, &names).await?;
    // A TLS listener that names no Secret gets the operator's certificate, issued (again)
    // before brokers mount it; a renewal keeps the Secret's name, so it restarts no broker.
    let tls = kc.spec.listener.tls.as_ref();
    let issues_certificate = tls.is_some_and(|t| t.secret_name.is_none());
    // With client certificates too, a clients CA, which signs KafkaUsers' certificates.
    let clients_ca = resources::issues_clients_ca(&kc.spec.listener);
    if issues_certificate
        && let Some(reason) = certificates::ensure(client, &kc, &names, clients_ca, &external.hosts).await?
    {
        events::publish(
            &ctx.recorder,
            &kc.object_ref(&()),
            false,
            "CertificateIssued",
            format!(
                "listener certificate issued into Secret {}: {reason}",
                certificates::listener_secret_name(&names)
            ),
            "Reconcile",
        )
        .await;
    }
    apply(
        client,
        &names.namespace,
        &resources::network_policy(&kc, &names)?,
    )
    .await?;

    let sts_api: Api<StatefulSet> = Api::namespaced(client.clone(), &names.namespace);
    let live = sts_api.get_opt(&names.cluster).await?;
    let template = match (&refused, &live) {
        (None, _) => Some(resources::choose_template(
            resources::broker_pod_template(&kc, &names)?,
            live.as_ref(),
        )),
        (Some(_), Some(live)) => Some(live.spec.template.clone()),
        // Nothing runs yet: nothing is created until the spec can be rolled out.
        (Some(_), None) => None,
    };
    let hash = template
        .as_ref()
        .and_then(|t| t.metadata.as_ref())
        .and_then(|m| m.annotations.as_ref())
        .and_then(|a| a.get(resources::INPUTS_HASH_ANNOTATION).cloned());
    let sts = match &template {
        Some(template) => {
            let decision = rollout_decision(live.as_ref(), kc.spec.replicas, hash.as_deref());
            let sts = apply(
                client,
                &names.namespace,
                &resources::statefulset(&kc, &names, template)?,
            )
            .await?;
            if let Some((reason, note)) = decision {
                events::publish(
                    &ctx.recorder,
                    &kc.object_ref(&()),
                    false,
                    reason,
                    note,
                    "Apply",
                )
                .await;
            }
            Some(sts)
        }
        None => None,
    };
    apply(
        client,
        &names.namespace,
        &resources::volume_agent(&kc, &names, &ctx.agent_image)?,
    )
    .await?;

    apply_pod_monitor(ctx, &kc, &names).await;

    // The controller's mirror is optional (it exists once a controller has written an assignment).
    let mirror = Api::<KafkaClusterAssignments>::namespaced(client.clone(), &names.namespace)
        .get_opt(&names.cluster)
        .await
        .unwrap_or_else(|e| {
            warn!(error = %e, "cannot read KafkaClusterAssignments; status shows no controller");
            None
        });
    let sts_status = sts.as_ref().and_then(|s| s.status.as_ref());
    let ready = sts_status.and_then(|s| s.ready_replicas).unwrap_or(0);
    let problem = if ready < kc.spec.replicas && sts.is_some() {
        diagnose(client, &kc, &names).await
    } else {
        None
    };
    let degraded = problem.is_some() || refused.is_some();
    let mut wanted = conditions(
        kc.spec.replicas,
        sts_status,
        sts.as_ref().and_then(|s| s.metadata.generation),
        problem,
    );
    if let Some(refused) = refused {
        wanted = with_refusal(wanted, refused, sts.is_some());
    }
    wanted.push(Cond::new(RECONCILED, true, "Success", ""));
    let conditions = merge(&previous.conditions, &wanted, generation, now);
    announce(ctx, &kc, &previous.conditions, &conditions).await;
    let status = KafkaClusterStatus {
        conditions,
        observed_generation: generation,
        ready_brokers: ready,
        current_controller: mirror
            .as_ref()
            .map(|m| format!("{}-{}", names.cluster, m.spec.controller_id)),
        assignment_version: mirror.as_ref().map(|m| m.spec.assignment_version),
        bootstrap_servers: Some(resources::bootstrap_servers(&kc, &names)),
        external_bootstrap_servers: external.bootstrap_servers.clone(),
        replicas: sts_status.map_or(0, |s| s.replicas),
        selector: Some(resources::selector_string(&names, "broker")),
        pod_template_hash: hash,
        traffic: Default::default(),
    };
    // The controller broker's fields are not the operator's to compare (nor to write).
    let current = kc.status.clone().map(KafkaClusterStatus::without_traffic);
    if current.as_ref() != Some(&status) {
        patch_status(client, &kc, &names, status).await?;
    }
    // StatefulSet status changes wake us through the owned-object watch; the requeue is a
    // backstop for the assignment mirror, which is not owned, and for what a diagnosis reads
    // (claims and pods are not watched), so a fixed problem clears within seconds.
    Ok(Action::requeue(Duration::from_secs(
        if degraded || ready < kc.spec.replicas || external.incomplete {
            10
        } else {
            60
        },
    )))
}

/// Requeues after an error, later after each failure in a row ([`crate::backoff`]).
pub fn error_policy(kc: Arc<KafkaCluster>, error: &Error, ctx: Arc<Context>) -> Action {
    let delay = ctx.backoff.failed(&key(&kc));
    warn!(cluster = %kc.name_any(), reason = error.reason(), %error, retry_in = ?delay, "reconcile failed");
    Action::requeue(delay)
}

#[cfg(test)]
mod tests;
