//! The KafkaTopic reconciler, run by a cluster's volume agent: validate the spec with Kafka's
//! rules, converge the topic directory ([`volume::ensure_topic`]), report status. Deleted topics
//! are not seen here (there is no finalizer); [`crate::sweep`] reclaims their directories.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;
use kaas_shared::crd::conditions::READY;
use kaas_shared::crd::{KafkaTopic, KafkaTopicStatus};
use kaas_shared::fs::FsRef;
use kaas_shared::layout::Layout;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::Recorder;
use kube::runtime::reflector::Store;
use kube::{Client, Resource, ResourceExt};
use serde_json::json;
use tracing::{info, warn};
use uuid::Uuid;

use crate::backoff::Backoff;
use crate::conditions::{Cond, RECONCILED, failed, merge};
use crate::leader::Leadership;
use crate::metrics::ReconcileMetrics;
use crate::volume::{self, DesiredTopic, Ensured};
use crate::{Error, FIELD_MANAGER, Result, events, validate};

/// What a volume agent's tasks share.
#[derive(Clone)]
pub struct AgentContext {
    /// API client.
    pub client: Client,
    /// The cluster's namespace.
    pub namespace: String,
    /// The KafkaCluster whose topics this agent owns.
    pub cluster: String,
    /// The volume.
    pub fs: FsRef,
    /// The volume's mount point.
    pub root: PathBuf,
    /// Serialises every volume mutation of this agent (reconciles and sweeps), so that a sweep
    /// acting on a slightly old listing never races a create at the same path.
    pub volume_lock: Arc<Mutex<()>>,
    /// Every KafkaTopic of the namespace, as last seen (for name-collision checks).
    pub topics: Store<KafkaTopic>,
    /// Whether this agent holds its Lease: the volume's single writer (see [`crate::leader`]).
    pub leadership: Leadership,
    /// Events on KafkaTopics and the KafkaCluster.
    pub recorder: Recorder,
    /// Reconcile counts and durations.
    pub metrics: ReconcileMetrics,
    /// Retry delays of failing topics.
    pub backoff: Arc<Backoff>,
}

impl std::fmt::Debug for AgentContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentContext")
            .field("namespace", &self.namespace)
            .field("cluster", &self.cluster)
            .field("root", &self.root)
            .finish_non_exhaustive()
    }
}

impl AgentContext {
    /// Runs volume work on a blocking thread, under the volume lock, if this agent still holds
    /// its Lease at that moment ([`Error::NotLeader`] otherwise).
    pub async fn with_volume<T: Send + 'static>(
        &self,
        work: impl FnOnce(&dyn kaas_shared::fs::Fs, &std::path::Path) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let (fs, root, lock) = (self.fs.clone(), self.root.clone(), self.volume_lock.clone());
        let leadership = self.leadership.clone();
        tokio::task::spawn_blocking(move || {
            let _guard = lock
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            // Checked under the lock, right before the work: the fence of a single writer. The
            // work itself is one short operation, well inside the margin between the renew
            // deadline and the lease duration.
            if !leadership.is_leading() {
                return Err(Error::NotLeader);
            }
            work(&*fs, &root)
        })
        .await?
    }

    /// The cluster's `assignment.json`; `None` before a controller wrote one (then no broker
    /// leads anything).
    pub async fn assignment(&self) -> Result<Option<kaas_shared::assignment::Assignment>> {
        self.with_volume(|fs, root| {
            Ok(kaas_shared::assignment::read(
                fs,
                &Layout::new(root.to_owned()),
            )?)
        })
        .await
    }
}

/// Why a topic's spec is refused, if it is: Kafka's rules for its name and configs, and
/// Kafka's refusal of names that collide with another topic's ('.' vs '_').
pub fn refusal<'a>(
    topic: &KafkaTopic,
    others: impl IntoIterator<Item = &'a KafkaTopic>,
) -> Option<String> {
    let name = topic.topic_name();
    let mut problems = Vec::new();
    if let Err(p) = validate::topic_name(name) {
        problems.push(p);
    }
    if let Err(p) = validate::topic_configs(&topic.spec.config) {
        problems.extend(p);
    }
    for other in others {
        if other.uid() != topic.uid()
            && other.spec.cluster_ref == topic.spec.cluster_ref
            && validate::collides(name, other.topic_name())
        {
            problems.push(format!(
                "topic name {name:?} collides with topic {:?} (Kafka treats '.' and '_' alike in metric names)",
                other.topic_name()
            ));
        }
    }
    if problems.is_empty() {
        None
    } else {
        Some(problems.join("; "))
    }
}

async fn patch_status(
    ctx: &AgentContext,
    topic: &KafkaTopic,
    status: KafkaTopicStatus,
) -> Result<()> {
    if topic.status.as_ref() == Some(&status) {
        return Ok(());
    }
    let api: Api<KafkaTopic> = Api::namespaced(ctx.client.clone(), &ctx.namespace);
    // The controller broker's fields are its own (another field manager): left out here.
    let patch = json!({"apiVersion": "kaas.dev/v1alpha1", "kind": "KafkaTopic", "status": status.without_log()});
    api.patch_status(
        &topic.name_any(),
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&patch),
    )
    .await?;
    Ok(())
}

/// The metric label of this controller.
pub const CONTROLLER: &str = "kafkatopic";

fn key(topic: &KafkaTopic) -> String {
    format!(
        "{}/{}",
        topic.metadata.namespace.as_deref().unwrap_or_default(),
        topic.name_any()
    )
}

/// Whether `cond` is news: the previous condition of its type had another reason.
pub(crate) fn is_news(previous: &[Condition], cond: &Cond) -> bool {
    !previous
        .iter()
        .any(|c| c.type_ == cond.type_ && c.reason == cond.reason)
}

/// Reconciles one KafkaTopic of this agent's cluster: counts and times it, and on failure says
/// so in an event and in the `Reconciled` condition.
pub async fn reconcile(topic: Arc<KafkaTopic>, ctx: Arc<AgentContext>) -> Result<Action> {
    let namespace = topic.metadata.namespace.as_deref().unwrap_or_default();
    let _running = ctx
        .metrics
        .running(CONTROLLER, namespace, &topic.name_any());
    if topic.spec.cluster_ref != ctx.cluster {
        return Ok(Action::await_change());
    }
    let started = std::time::Instant::now();
    let result = converge(&topic, &ctx).await;
    ctx.metrics.observe(CONTROLLER, started.elapsed(), &result);
    match &result {
        Ok(_) => ctx.backoff.succeeded(&key(&topic)),
        // A standby says nothing: not leading is not the topic's problem.
        Err(Error::NotLeader) => {}
        Err(e) => {
            events::reconcile_failed(&ctx.recorder, &topic.object_ref(&()), e).await;
            let previous = topic.status.clone().unwrap_or_default();
            let status = KafkaTopicStatus {
                conditions: failed(&previous.conditions, e, topic.metadata.generation),
                ..previous
            };
            if let Err(e) = patch_status(&ctx, &topic, status).await {
                warn!(error = %e, "cannot write the reconcile error to status");
            }
        }
    }
    result
}

async fn converge(topic: &Arc<KafkaTopic>, ctx: &AgentContext) -> Result<Action> {
    let topic = topic.clone();
    let uid = topic.uid().ok_or(Error::MissingField("metadata.uid"))?;
    let id = Uuid::parse_str(&uid).map_err(|_| Error::MissingField("a UUID metadata.uid"))?;
    let name = topic.topic_name().to_owned();
    let generation = topic.metadata.generation;
    let previous = topic.status.clone().unwrap_or_default();
    let base = KafkaTopicStatus {
        observed_generation: generation,
        topic_name: Some(name.clone()),
        topic_id: Some(id.hyphenated().to_string()),
        ..previous.clone()
    };
    let now = Timestamp::now();

    let others = ctx.topics.state();
    if let Some(message) = refusal(&topic, others.iter().map(|t| &**t)) {
        let cond = Cond::new(READY, false, "InvalidSpec", message);
        if is_news(&previous.conditions, &cond) {
            events::publish(
                &ctx.recorder,
                &topic.object_ref(&()),
                true,
                "InvalidSpec",
                cond.message.clone(),
                "Validate",
            )
            .await;
        }
        let status = KafkaTopicStatus {
            conditions: merge(
                &previous.conditions,
                &[cond, Cond::new(RECONCILED, true, "Success", "")],
                generation,
                now,
            ),
            ..base
        };
        patch_status(ctx, &topic, status).await?;
        return Ok(Action::await_change());
    }

    let assignment = ctx.assignment().await?;
    let desired = DesiredTopic {
        name: name.clone(),
        id,
        partitions: topic.spec.partitions,
        configs: topic.spec.config.clone(),
    };
    let ensure = |live: Option<HashSet<Uuid>>| {
        let (desired, assignment) = (desired.clone(), assignment.clone());
        ctx.with_volume(move |fs, root| {
            volume::ensure_topic(fs, root, &desired, live.as_ref(), assignment.as_ref())
        })
    };
    let mut outcome = ensure(None).await?;
    if outcome == Ensured::NeedsLiveTopics {
        // Another incarnation's stamp is on the path. Identities of every live KafkaTopic,
        // fresh from the API server rather than the cache: a directory stamped by a topic the
        // cache has not seen yet must count as live, or it would be reclaimed from under that
        // topic. Listed only here, not for every topic reconciled: with thousands of topics a
        // list per reconcile made creating them quadratic in API server work.
        let live: HashSet<Uuid> = Api::<KafkaTopic>::namespaced(ctx.client.clone(), &ctx.namespace)
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .filter_map(|t| t.uid().and_then(|u| Uuid::parse_str(&u).ok()))
            .collect();
        outcome = ensure(Some(live)).await?;
    }
    let (cond, partitions, action) = match outcome {
        Ensured::Ready {
            partitions,
            written,
        } => {
            if written {
                info!(topic = %name, %id, partitions, "topic.json written");
                let (reason, note) = if previous.topic_id.is_none() {
                    (
                        "TopicCreated",
                        format!(
                            "topic directory {name} stamped with {id}, {partitions} partitions"
                        ),
                    )
                } else {
                    (
                        "TopicUpdated",
                        format!("topic.json of {name} written: {partitions} partitions"),
                    )
                };
                events::publish(
                    &ctx.recorder,
                    &topic.object_ref(&()),
                    false,
                    reason,
                    note,
                    "Write",
                )
                .await;
            }
            let message = if partitions > topic.spec.partitions {
                format!("the volume has {partitions} partitions; a topic cannot shrink")
            } else {
                format!("{partitions} partitions")
            };
            (
                Cond::new(READY, true, "Ready", message),
                Some(partitions),
                Action::requeue(Duration::from_secs(300)),
            )
        }
        Ensured::WaitingForOldIncarnation { old } => (
            Cond::new(
                READY,
                false,
                "WaitingForReclaim",
                format!(
                    "the directory of an earlier incarnation {old} is still led by a broker; it is reclaimed once the controller moves its partitions"
                ),
            ),
            previous.partitions,
            Action::requeue(Duration::from_secs(2)),
        ),
        Ensured::Conflict { other } => (
            Cond::new(
                READY,
                false,
                "NameConflict",
                format!("topic name {name:?} is already used by KafkaTopic with uid {other}"),
            ),
            previous.partitions,
            Action::requeue(Duration::from_secs(30)),
        ),
        // Not with the live identities given; should a change ever make it so, try again.
        Ensured::NeedsLiveTopics => (
            Cond::new(
                READY,
                false,
                "Pending",
                "the directory's stamp is another incarnation's".to_string(),
            ),
            previous.partitions,
            Action::requeue(Duration::from_secs(2)),
        ),
    };
    if !cond.status && is_news(&previous.conditions, &cond) {
        events::publish(
            &ctx.recorder,
            &topic.object_ref(&()),
            true,
            cond.reason,
            cond.message.clone(),
            "Write",
        )
        .await;
    }
    let status = KafkaTopicStatus {
        conditions: merge(
            &previous.conditions,
            &[cond, Cond::new(RECONCILED, true, "Success", "")],
            generation,
            now,
        ),
        partitions,
        ..base
    };
    patch_status(ctx, &topic, status).await?;
    Ok(action)
}

/// Requeues after an error, later after each failure in a row ([`crate::backoff`]).
pub fn error_policy(topic: Arc<KafkaTopic>, error: &Error, ctx: Arc<AgentContext>) -> Action {
    let delay = ctx.backoff.failed(&key(&topic));
    warn!(topic = %topic.name_any(), reason = error.reason(), %error, retry_in = ?delay, "reconcile failed");
    Action::requeue(delay)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use kaas_shared::crd::KafkaTopicSpec;

    fn topic(name: &str, uid: &str, spec: serde_json::Value) -> KafkaTopic {
        let spec: KafkaTopicSpec = serde_json::from_value(spec).unwrap();
        let mut t = KafkaTopic::new(name, spec);
        t.metadata.uid = Some(uid.into());
        t
    }

    #[test]
    fn specs_are_refused_with_readable_messages() {
        let ok = topic(
            "orders",
            "1",
            json!({"clusterRef": "c", "partitions": 3, "config": {"retention.ms": "1000"}}),
        );
        assert_eq!(refusal(&ok, []), None);
        let bad = topic(
            "bad",
            "2",
            json!({"clusterRef": "c", "partitions": 3, "topicName": "__x", "config": {"retention.ms": "x"}}),
        );
        let message = refusal(&bad, []).unwrap();
        assert!(
            message.contains("reserved") && message.contains("whole number"),
            "{message}"
        );
        let dotted = topic(
            "a-b",
            "3",
            json!({"clusterRef": "c", "partitions": 1, "topicName": "a.b"}),
        );
        let underscored = topic(
            "a-b2",
            "4",
            json!({"clusterRef": "c", "partitions": 1, "topicName": "a_b"}),
        );
        let elsewhere = topic(
            "a-b3",
            "5",
            json!({"clusterRef": "other", "partitions": 1, "topicName": "a_b"}),
        );
        assert!(
            refusal(&dotted, [&underscored])
                .unwrap()
                .contains("collides")
        );
        assert_eq!(refusal(&dotted, [&elsewhere, &dotted]), None);
    }

    #[test]
    fn the_kafka_name_defaults_to_the_object_name() {
        let t = topic("orders", "1", json!({"clusterRef": "c", "partitions": 1}));
        assert_eq!(t.topic_name(), "orders");
        let t = topic(
            "orders",
            "1",
            json!({"clusterRef": "c", "partitions": 1, "topicName": "Orders_V2"}),
        );
        assert_eq!(t.topic_name(), "Orders_V2");
    }
}
