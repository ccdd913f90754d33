//! What a broker in a cluster needs of the cluster runtime (the controller role and the
//! heartbeat, which the `kaas` binary wires from `kaas-controller`): the Lease epoch that fences
//! stale assignments, the controller's acknowledgements that fence this broker's writes, what
//! the controller hands back of partitions other brokers lead, and the runtime's own series.
//! The broker knows no controller types; it sees only this.

use std::time::Duration;

use prometheus_client::metrics::histogram::Histogram;
use tokio::sync::Notify;

/// The cluster runtime as the broker sees it.
pub trait ControlPlane: Send + Sync + std::fmt::Debug {
    /// The Lease epoch as last seen: an assignment written under a lower one is stale.
    fn lease_epoch(&self) -> i64;
    /// How long ago the controller last acknowledged this broker's heartbeat; `None`: never.
    fn since_last_ack(&self) -> Option<Duration>;
    /// Woken when the controller pushes ASSIGNMENT_CHANGED.
    fn assignment_changed(&self) -> &Notify;
    /// (controller epoch, assignment version) of the newest assignment the controller announced
    /// (ASSIGNMENT_CHANGED); (0, 0) before the first.
    fn announced_assignment(&self) -> (i64, i64);
    /// Asks the controller role (if this broker holds it) to recompute the placement now: a
    /// topic was created or deleted.
    fn topics_changed(&self);
    /// This broker applied a new assignment and ran its take-overs: the heartbeat tells the
    /// controller now, not at its next beat, so a controller handing partitions out in steps
    /// (each once the last is led) gives the next without waiting for a beat.
    fn report_now(&self);
    /// This broker, as controller, changed a file it writes for every broker (the ACLs, the
    /// client quotas, the group configs) and fsynced it: the others read them again now.
    fn controller_files_written(&self);
    /// The high watermark of a partition another broker leads, as the controller last handed it
    /// back; `None` if it did not.
    fn remote_high_watermark(&self, topic: &str, partition: i32) -> Option<i64>;
    /// How old the oldest record at or after `committed` is on a partition another broker
    /// leads, estimated from when its high watermarks were handed back; `None` if none were.
    fn remote_lag_seconds(&self, topic: &str, partition: i32, committed: i64, now_ms: i64) -> Option<f64>;
    /// Whether this broker holds the controller Lease.
    fn is_controller(&self) -> bool;
    /// Brokers whose heartbeats this broker receives as controller (0 when it is not).
    fn alive_brokers(&self) -> usize;
    /// Heartbeat beat to acknowledgement, for `/metrics`.
    fn heartbeat_round_trip(&self) -> Histogram;
    /// The controller's placement recomputes, for `/metrics`.
    fn recompute_seconds(&self) -> Histogram;
}

/// A control plane for unit tests: a fixed Lease epoch and acknowledgements set by hand.
#[cfg(test)]
#[derive(Debug, Default)]
pub(crate) struct FixedControlPlane {
    pub(crate) lease_epoch: std::sync::atomic::AtomicI64,
    pub(crate) last_ack: parking_lot::Mutex<Option<std::time::Instant>>,
    pub(crate) assignment_changed: Notify,
    pub(crate) announced: parking_lot::Mutex<(i64, i64)>,
}

#[cfg(test)]
impl FixedControlPlane {
    /// The controller acknowledged a heartbeat just now.
    pub(crate) fn acknowledged_now(&self) {
        *self.last_ack.lock() = Some(std::time::Instant::now());
    }
}

#[cfg(test)]
impl ControlPlane for FixedControlPlane {
    fn lease_epoch(&self) -> i64 {
        self.lease_epoch.load(std::sync::atomic::Ordering::SeqCst)
    }
    fn since_last_ack(&self) -> Option<Duration> {
        self.last_ack.lock().map(|at| at.elapsed())
    }
    fn assignment_changed(&self) -> &Notify {
        &self.assignment_changed
    }
    fn announced_assignment(&self) -> (i64, i64) {
        *self.announced.lock()
    }
    fn topics_changed(&self) {}
    fn report_now(&self) {}
    fn controller_files_written(&self) {}
    fn remote_high_watermark(&self, _: &str, _: i32) -> Option<i64> {
        None
    }
    fn remote_lag_seconds(&self, _: &str, _: i32, _: i64, _: i64) -> Option<f64> {
        None
    }
    fn is_controller(&self) -> bool {
        false
    }
    fn alive_brokers(&self) -> usize {
        0
    }
    fn heartbeat_round_trip(&self) -> Histogram {
        Histogram::new(std::iter::empty())
    }
    fn recompute_seconds(&self) -> Histogram {
        Histogram::new(std::iter::empty())
    }
}
