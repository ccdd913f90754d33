//! Leader election on a `coordination.k8s.io/v1` Lease, for the manager and the volume agent.
//!
//! Two replicas may run; only the Lease holder acts. The decision is a pure function of the
//! Lease as read and of how long this process has seen it unchanged ([`decide`]); the store is a
//! narrow trait ([`LeaseStore`]) with a Kubernetes implementation ([`KubeLease`]) and an
//! in-memory one for tests. Every write is conditional on the `resourceVersion` it was decided
//! on, so of two replicas racing for an expired Lease exactly one wins.
//!
//! ## Why a holder stops before another can start (the volume agent is a single writer)
//!
//! Expiry is judged on the follower's own monotonic clock, as client-go does: a follower takes
//! the Lease over only after it has seen the same `resourceVersion` for the whole
//! `leaseDurationSeconds` ([`Timing::duration`], 15 s). A holder acts only until
//! [`Timing::renew_deadline`] (10 s) after the *start* of its last successful renewal. A
//! follower observes that renewal no earlier than it was sent, so it cannot take over before
//! `renewal start + 15 s`, while the holder stopped at `renewal start + 10 s`. The 5 s between
//! cover a volume operation already under way at the deadline (one stamp, topic.json write or
//! rename: milliseconds) and clock-rate differences; wall-clock skew between nodes does not
//! matter because no replica compares its clock with another's. Every volume mutation checks
//! [`Leadership::is_leading`] under the volume lock right before it runs.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{info, warn};

use crate::Result;

/// How long a Lease lasts and how often it is renewed (client-go's defaults).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// `leaseDurationSeconds`: how long followers wait on an unchanged Lease before taking it.
    pub duration: Duration,
    /// How long a holder keeps acting after the start of its last successful renewal.
    pub renew_deadline: Duration,
    /// How often the Lease is read (followers) or renewed (the holder); also the timeout of
    /// each API call, so a hung call cannot carry a holder past its deadline unnoticed.
    pub retry_period: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// The Lease fields the election reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    /// `holderIdentity`; `None` when released.
    pub holder: Option<String>,
    /// `leaseDurationSeconds`.
    pub duration: Duration,
    /// `leaseTransitions`: grows by one each time the holder changes.
    pub transitions: i32,
    /// `resourceVersion`, which a conditional write must match.
    pub version: String,
}

/// What a write puts in the Lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// `holderIdentity`; `None` releases the Lease.
    pub holder: Option<String>,
    /// `leaseTransitions`.
    pub transitions: i32,
    /// `leaseDurationSeconds`.
    pub duration: Duration,
}

/// What this replica does this round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// No Lease exists: create it in our name.
    Create,
    /// Nobody holds it, or the holder let it go unrenewed for its whole duration: take it.
    Acquire,
    /// We hold it: renew.
    Renew,
    /// Someone else holds a live Lease.
    Follow,
}

/// The election decision. `unchanged_for` is how long this process has seen the Lease at its
/// current `resourceVersion`, on its own monotonic clock.
pub fn decide(me: &str, lease: Option<&Observed>, unchanged_for: Duration) -> Step {
    match lease {
        None => Step::Create,
        Some(l) => match l.holder.as_deref() {
            None | Some("") => Step::Acquire,
            Some(holder) if holder == me => Step::Renew,
            Some(_) if unchanged_for >= l.duration => Step::Acquire,
            Some(_) => Step::Follow,
        },
    }
}

/// The Lease's home.
pub trait LeaseStore: Send + Sync + std::fmt::Debug {
    /// The Lease, or `None` if it does not exist.
    fn get(&self) -> BoxFuture<'_, Result<Option<Observed>>>;
    /// Writes `record` if the Lease is still at `expected` (`None`: it must not exist yet).
    /// `Ok(false)` means someone else wrote first.
    fn put(&self, record: Record, expected: Option<String>) -> BoxFuture<'_, Result<bool>>;
}

/// A Lease in one namespace, optionally owned by another object (the volume agent's Lease is
/// owned by its KafkaCluster, so it is garbage-collected with it).
#[derive(Clone)]
pub struct KubeLease {
    api: Api<Lease>,
    name: String,
    owner: Option<OwnerReference>,
}

impl std::fmt::Debug for KubeLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeLease")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl KubeLease {
    /// The Lease `name` in `namespace`.
    pub fn new(
        client: kube::Client,
        namespace: &str,
        name: &str,
        owner: Option<OwnerReference>,
    ) -> KubeLease {
        KubeLease {
            api: Api::namespaced(client, namespace),
            name: name.to_owned(),
            owner,
        }
    }
}

fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

impl LeaseStore for KubeLease {
    fn get(&self) -> BoxFuture<'_, Result<Option<Observed>>> {
        Box::pin(async move {
            let Some(lease) = self.api.get_opt(&self.name).await? else {
                return Ok(None);
            };
            let spec = lease.spec.unwrap_or_default();
            Ok(Some(Observed {
                holder: spec.holder_identity,
                duration: Duration::from_secs(
                    u64::try_from(spec.lease_duration_seconds.unwrap_or(0)).unwrap_or(0),
                ),
                transitions: spec.lease_transitions.unwrap_or(0),
                version: lease.metadata.resource_version.unwrap_or_default(),
            }))
        })
    }

    fn put(&self, record: Record, expected: Option<String>) -> BoxFuture<'_, Result<bool>> {
        Box::pin(async move {
            let Record {
                holder,
                transitions,
                duration,
            } = record;
            let now = Some(MicroTime(Timestamp::now()));
            let creating = expected.is_none();
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    resource_version: expected,
                    owner_references: self.owner.clone().map(|o| vec![o]),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    acquire_time: holder.as_ref().and(now.clone()),
                    renew_time: holder.as_ref().and(now),
                    holder_identity: holder,
                    lease_duration_seconds: Some(
                        i32::try_from(duration.as_secs()).unwrap_or(i32::MAX),
                    ),
                    lease_transitions: Some(transitions),
                    ..LeaseSpec::default()
                }),
            };
            let pp = PostParams::default();
            // A replace (PUT) carrying resourceVersion is refused with 409 Conflict if anyone
            // wrote in between: the optimistic lock the election relies on.
            let result = if creating {
                self.api.create(&pp, &lease).await.map(|_| ())
            } else {
                self.api.replace(&self.name, &pp, &lease).await.map(|_| ())
            };
            match result {
                Ok(()) => Ok(true),
                Err(e) if is_conflict(&e) => Ok(false),
                Err(e) => Err(e.into()),
            }
        })
    }
}

/// Whether this replica may act now. Cheap to clone and to ask; the answer turns false by
/// itself at the renew deadline, without waiting for the election loop to notice.
#[derive(Debug, Clone)]
pub struct Leadership {
    until: Arc<std::sync::Mutex<Option<Instant>>>,
    /// Leader election is off: this replica always acts.
    always: bool,
    changes: watch::Receiver<bool>,
}

impl Leadership {
    /// A replica that always leads (leader election turned off).
    pub fn always() -> Leadership {
        let (tx, changes) = watch::channel(true);
        // The receiver keeps reading `true` after the sender is gone.
        drop(tx);
        Leadership {
            until: Arc::default(),
            always: true,
            changes,
        }
    }

    /// Whether the last successful renewal started less than the renew deadline ago.
    pub fn is_leading(&self) -> bool {
        self.always
            || self
                .until
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .is_some_and(|until| Instant::now() < until)
    }

    /// Waits until this replica leads (`true`) or the election stopped (`false`).
    pub async fn acquired(&mut self) -> bool {
        self.changes.wait_for(|leading| *leading).await.is_ok()
    }

    /// Waits until this replica no longer leads (or the election stopped).
    pub async fn lost(&mut self) {
        let _ = self.changes.wait_for(|leading| !*leading).await;
    }
}

/// Runs an election: one replica holds `store`'s Lease as `identity` at a time.
#[derive(Debug)]
pub struct Elector {
    store: Arc<dyn LeaseStore>,
    identity: String,
    timing: Timing,
    until: Arc<std::sync::Mutex<Option<Instant>>>,
    changes: watch::Sender<bool>,
    /// The Lease version as last seen and since when (this process's clock).
    seen: Option<(String, Instant)>,
    /// Reported to the `kaas_operator_leader` gauge.
    leader_gauge: Option<prometheus_client::metrics::gauge::Gauge>,
    /// Set once a round succeeded: the API server answers this replica (`/readyz`).
    ready: Option<Arc<AtomicBool>>,
}

impl Elector {
    /// An election as `identity` (unique per process: pod name and a random suffix, so a
    /// restarted container never mistakes its predecessor's Lease for its own).
    pub fn new(store: Arc<dyn LeaseStore>, identity: String, timing: Timing) -> Elector {
        Elector {
            store,
            identity,
            timing,
            until: Arc::default(),
            changes: watch::Sender::new(false),
            seen: None,
            leader_gauge: None,
            ready: None,
        }
    }

    /// Sets `ready` once a round succeeds.
    pub fn with_ready(mut self, ready: Arc<AtomicBool>) -> Elector {
        self.ready = Some(ready);
        self
    }

    /// Sets `gauge` to 1 while this replica leads, 0 otherwise.
    pub fn with_gauge(mut self, gauge: prometheus_client::metrics::gauge::Gauge) -> Elector {
        self.leader_gauge = Some(gauge);
        self
    }

    /// What the replica's workers ask.
    pub fn leadership(&self) -> Leadership {
        Leadership {
            until: self.until.clone(),
            always: false,
            changes: self.changes.subscribe(),
        }
    }

    fn publish(&self) {
        let leading = self
            .until
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .is_some_and(|until| Instant::now() < until);
        if let Some(g) = &self.leader_gauge {
            g.set(i64::from(leading));
        }
        self.changes.send_if_modified(|was| {
            let changed = *was != leading;
            if changed {
                if leading {
                    info!(identity = %self.identity, "acquired the lease; acting");
                } else {
                    warn!(identity = %self.identity, "lost the lease; no longer acting");
                }
            }
            *was = leading;
            changed
        });
    }

    /// One round: read the Lease, decide, write. Returns whether the write (if any) succeeded.
    async fn round(&mut self) -> Result<()> {
        let lease = self.store.get().await?;
        let now = Instant::now();
        let unchanged_for = match (&lease, &self.seen) {
            (Some(l), Some((version, since))) if *version == l.version => now - *since,
            _ => {
                self.seen = lease.as_ref().map(|l| (l.version.clone(), now));
                Duration::ZERO
            }
        };
        let step = decide(&self.identity, lease.as_ref(), unchanged_for);
        let (transitions, expected) = match (&step, &lease) {
            (Step::Follow, _) => return Ok(()),
            (Step::Create, _) | (_, None) => (0, None),
            (Step::Renew, Some(l)) => (l.transitions, Some(l.version.clone())),
            (Step::Acquire, Some(l)) => (l.transitions.saturating_add(1), Some(l.version.clone())),
        };
        // The deadline counts from before the write: the Lease cannot say we renewed any
        // earlier than this.
        let started = Instant::now();
        let won = self
            .store
            .put(
                Record {
                    holder: Some(self.identity.clone()),
                    transitions,
                    duration: self.timing.duration,
                },
                expected,
            )
            .await?;
        if won {
            *self
                .until
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) =
                Some(started + self.timing.renew_deadline);
            if step != Step::Renew {
                info!(identity = %self.identity, transitions, "won the lease");
            }
        }
        Ok(())
    }

    /// Runs rounds every retry period until `shutdown` fires, then releases the Lease if held
    /// (after the caller stopped acting), so a standby takes over at once.
    pub async fn run(mut self, mut shutdown: watch::Receiver<bool>) {
        let mut ticker = tokio::time::interval(self.timing.retry_period);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = ticker.tick() => {}
                _ = shutdown.wait_for(|s| *s) => break,
            }
            match tokio::time::timeout(self.timing.retry_period, self.round()).await {
                Ok(Ok(())) => {
                    if let Some(ready) = &self.ready {
                        ready.store(true, Ordering::SeqCst);
                    }
                }
                Ok(Err(e)) => warn!(error = %e, "lease round failed; retrying"),
                Err(_) => warn!(
                    timeout = ?self.timing.retry_period,
                    "lease round timed out; retrying"
                ),
            }
            self.publish();
        }
        self.release().await;
    }

    async fn release(&mut self) {
        let held = self
            .until
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
            .is_some();
        self.publish();
        if !held {
            return;
        }
        let released = async {
            let lease = self.store.get().await?;
            match lease {
                Some(l) if l.holder.as_deref() == Some(self.identity.as_str()) => {
                    let record = Record {
                        holder: None,
                        transitions: l.transitions,
                        duration: l.duration,
                    };
                    self.store.put(record, Some(l.version)).await
                }
                _ => Ok(false),
            }
        };
        match tokio::time::timeout(self.timing.retry_period, released).await {
            Ok(Ok(true)) => info!(identity = %self.identity, "released the lease"),
            Ok(Ok(false)) => {}
            Ok(Err(e)) => warn!(error = %e, "cannot release the lease; it expires by itself"),
            Err(_) => warn!("releasing the lease timed out; it expires by itself"),
        }
    }
}

/// This process's identity in an election: the pod name (`HOSTNAME`) and a random suffix.
pub fn identity() -> String {
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "kaas-operator".to_owned());
    format!("{host}_{}", uuid::Uuid::new_v4().simple())
}

/// An in-memory Lease (tests): versions are a counter.
#[derive(Debug, Default)]
pub struct MemoryLease {
    lease: std::sync::Mutex<Option<(Observed, u64)>>,
    /// While set, every call fails (an unreachable API server).
    pub unreachable: std::sync::atomic::AtomicBool,
}

impl LeaseStore for MemoryLease {
    fn get(&self) -> BoxFuture<'_, Result<Option<Observed>>> {
        let result = if self.unreachable.load(std::sync::atomic::Ordering::SeqCst) {
            Err(crate::Error::LeaseStore("unreachable (test)".into()))
        } else {
            Ok(self
                .lease
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .as_ref()
                .map(|(o, _)| o.clone()))
        };
        Box::pin(async move { result })
    }

    fn put(&self, record: Record, expected: Option<String>) -> BoxFuture<'_, Result<bool>> {
        let result = if self.unreachable.load(std::sync::atomic::Ordering::SeqCst) {
            Err(crate::Error::LeaseStore("unreachable (test)".into()))
        } else {
            let mut lease = self
                .lease
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let current = lease.as_ref().map(|(o, _)| o.version.clone());
            let ok = current == expected;
            if ok {
                let next = lease.as_ref().map_or(1, |(_, v)| v + 1);
                *lease = Some((
                    Observed {
                        holder: record.holder,
                        duration: record.duration,
                        transitions: record.transitions,
                        version: next.to_string(),
                    },
                    next,
                ));
            }
            Ok(ok)
        };
        Box::pin(async move { result })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn held(by: &str) -> Observed {
        Observed {
            holder: Some(by.into()),
            duration: Duration::from_secs(15),
            transitions: 3,
            version: "7".into(),
        }
    }

    #[test]
    fn decisions() {
        let s = Duration::from_secs;
        assert_eq!(decide("a", None, s(0)), Step::Create);
        assert_eq!(decide("a", Some(&held("a")), s(0)), Step::Renew);
        assert_eq!(decide("a", Some(&held("b")), s(14)), Step::Follow);
        assert_eq!(decide("a", Some(&held("b")), s(15)), Step::Acquire);
        let released = Observed {
            holder: None,
            ..held("b")
        };
        assert_eq!(decide("a", Some(&released), s(0)), Step::Acquire);
    }

    fn elector(store: &Arc<MemoryLease>, me: &str) -> Elector {
        Elector::new(store.clone(), me.into(), Timing::default())
    }

    /// Two replicas: one acquires, the other follows; the holder stops renewing (killed), the
    /// follower takes over only after a whole lease duration, with the epoch advanced.
    #[tokio::test(start_paused = true)]
    async fn a_follower_takes_over_an_abandoned_lease_after_its_duration() {
        let store = Arc::new(MemoryLease::default());
        let (mut a, mut b) = (elector(&store, "a"), elector(&store, "b"));
        a.round().await.unwrap();
        assert!(a.leadership().is_leading());
        b.round().await.unwrap();
        assert!(!b.leadership().is_leading());
        // `a` dies; `b` keeps looking.
        let start = Instant::now();
        while !b.leadership().is_leading() {
            tokio::time::advance(Duration::from_secs(2)).await;
            b.round().await.unwrap();
        }
        assert!(Instant::now() - start >= Duration::from_secs(15));
        assert!(
            !a.leadership().is_leading(),
            "a's deadline passed by itself"
        );
        let lease = store.get().await.unwrap().unwrap();
        assert_eq!((lease.holder.as_deref(), lease.transitions), (Some("b"), 1));
    }

    /// A holder that cannot reach the API server stops acting at its renew deadline, before
    /// anyone else may take the Lease.
    #[tokio::test(start_paused = true)]
    async fn a_holder_that_cannot_renew_stops_before_another_can_start() {
        let store = Arc::new(MemoryLease::default());
        let mut a = elector(&store, "a");
        let leadership = a.leadership();
        a.round().await.unwrap();
        let renewed = Instant::now();
        let mut b = elector(&store, "b");
        b.round().await.unwrap();
        store.unreachable.store(true, Ordering::SeqCst);
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(a.round().await.is_err());
        store.unreachable.store(false, Ordering::SeqCst);
        let mut b_started = None;
        let mut a_stopped = None;
        for _ in 0..30 {
            tokio::time::advance(Duration::from_millis(500)).await;
            if a_stopped.is_none() && !leadership.is_leading() {
                a_stopped = Some(Instant::now());
            }
            b.round().await.unwrap();
            if b_started.is_none() && b.leadership().is_leading() {
                b_started = Some(Instant::now());
            }
        }
        let (a_stopped, b_started) = (a_stopped.unwrap(), b_started.unwrap());
        assert!(a_stopped <= renewed + Duration::from_secs(10));
        assert!(
            b_started >= a_stopped + Duration::from_secs(4),
            "a margin between them"
        );
    }

    /// A graceful stop releases the Lease: a standby takes it at its next round.
    #[tokio::test(start_paused = true)]
    async fn shutdown_releases_the_lease() {
        let store = Arc::new(MemoryLease::default());
        let a = elector(&store, "a");
        let mut leadership = a.leadership();
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(a.run(stopped));
        assert!(leadership.acquired().await);
        stop.send(true).unwrap();
        task.await.unwrap();
        assert!(!leadership.is_leading());
        let mut b = elector(&store, "b");
        b.round().await.unwrap();
        assert!(b.leadership().is_leading());
        assert_eq!(store.get().await.unwrap().unwrap().transitions, 1);
    }
}
