//! The broker's one view of assignment.json (seed 003, gh #75): Metadata, the Produce/Fetch
//! ownership checks, FindCoordinator and /healthz all answer from it.
//!
//! A new assignment is accepted only if it is newer than the one held and its controller epoch
//! is not below the Lease's: a deposed controller back from a pause cannot roll the cluster
//! backwards (the stale-controller fence).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use kaas_shared::assignment::Assignment;
use parking_lot::RwLock;

use crate::control_plane::ControlPlane;

/// Why an assignment was not applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Rejected {
    #[error("written by controller epoch {epoch}, below the Lease epoch {lease_epoch}: a stale controller")]
    StaleController { epoch: i64, lease_epoch: i64 },
    #[error("not newer than the assignment already applied")]
    NotNewer,
}

/// This broker's cluster state.
#[derive(Debug)]
pub struct AssignmentView {
    pub broker_id: i32,
    current: RwLock<Arc<Assignment>>,
    /// The Lease epoch and the heartbeat's acknowledgements.
    pub control: Arc<dyn ControlPlane>,
    fence_timeout: Duration,
    draining: AtomicBool,
}

impl AssignmentView {
    pub fn new(broker_id: i32, control: Arc<dyn ControlPlane>, fence_timeout: Duration) -> AssignmentView {
        AssignmentView {
            broker_id,
            current: RwLock::new(Arc::new(Assignment::default())),
            control,
            fence_timeout,
            draining: AtomicBool::new(false),
        }
    }

    /// The assignment applied last.
    pub fn current(&self) -> Arc<Assignment> {
        self.current.read().clone()
    }

    /// The Lease epoch as last seen.
    pub fn lease_epoch(&self) -> i64 {
        self.control.lease_epoch()
    }

    /// Accepts `candidate` if it is newer and not from a stale controller; returns the
    /// assignment it replaces.
    pub fn apply_if_new(&self, candidate: Assignment) -> Result<Arc<Assignment>, Rejected> {
        let lease_epoch = self.lease_epoch();
        if candidate.controller_epoch < lease_epoch {
            return Err(Rejected::StaleController { epoch: candidate.controller_epoch, lease_epoch });
        }
        let mut current = self.current.write();
        if !candidate.is_newer_than(&current) {
            return Err(Rejected::NotNewer);
        }
        Ok(std::mem::replace(&mut *current, Arc::new(candidate)))
    }

    /// Whether this broker must refuse to acknowledge writes: the controller has not
    /// acknowledged its heartbeat within the fence timeout (DESIGN: broker fencing): the
    /// controller may already be moving its partitions (it waits `session.timeout` >
    /// `fence.timeout` + margin before it does).
    pub fn write_fenced(&self) -> bool {
        self.control.since_last_ack().is_none_or(|since| since > self.fence_timeout)
    }

    /// Marks this broker as draining (SIGTERM); the next heartbeat carries it.
    pub fn start_draining(&self) {
        self.draining.store(true, Ordering::Relaxed);
    }

    pub fn draining(&self) -> bool {
        self.draining.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use super::*;
    use crate::control_plane::FixedControlPlane;

    fn assignment(epoch: i64, version: i64) -> Assignment {
        Assignment { controller_epoch: epoch, assignment_version: version, ..Default::default() }
    }

    #[test]
    fn stale_controllers_and_old_versions_are_refused() {
        let control = Arc::new(FixedControlPlane::default());
        control.lease_epoch.store(3, Ordering::SeqCst);
        let view = AssignmentView::new(0, control.clone(), Duration::from_secs(1));
        assert_eq!(view.apply_if_new(assignment(2, 9)).err(), Some(Rejected::StaleController { epoch: 2, lease_epoch: 3 }));
        assert!(view.apply_if_new(assignment(3, 1)).is_ok());
        assert_eq!(view.apply_if_new(assignment(3, 1)).err(), Some(Rejected::NotNewer));
        assert!(view.apply_if_new(assignment(3, 2)).is_ok());
        control.lease_epoch.store(4, Ordering::SeqCst);
        assert!(matches!(view.apply_if_new(assignment(3, 5)), Err(Rejected::StaleController { .. })));
        assert!(view.apply_if_new(assignment(4, 3)).is_ok());
        assert_eq!(view.current().assignment_version, 3);
        assert!(view.write_fenced(), "never acknowledged: fenced");
        control.acknowledged_now();
        assert!(!view.write_fenced(), "acknowledged just now");
    }

    /// The follow loop, the heartbeat push and a drain's wait apply assignments concurrently:
    /// however they interleave, the view only moves forward and ends at the newest.
    #[test]
    fn concurrent_applies_only_move_forward() {
        let control = Arc::new(FixedControlPlane::default());
        control.lease_epoch.store(1, Ordering::SeqCst);
        let view = AssignmentView::new(0, control, Duration::from_secs(1));
        let appliers = 4;
        let per_applier = 500;
        std::thread::scope(|s| {
            for t in 0..appliers {
                let view = &view;
                s.spawn(move || {
                    for i in 0..per_applier {
                        // Interleaved versions, each applier also retrying older ones.
                        let version = (i * appliers + t) as i64 + 1;
                        for candidate in [version, version / 2] {
                            if let Ok(replaced) = view.apply_if_new(assignment(1, candidate)) {
                                assert!(
                                    replaced.assignment_version < candidate,
                                    "moved back from {} to {candidate}",
                                    replaced.assignment_version
                                );
                            }
                            // Applied, or refused because something at least as new is there.
                            assert!(view.current().assignment_version >= candidate);
                        }
                    }
                });
            }
        });
        assert_eq!(view.current().assignment_version, (appliers * per_applier) as i64);
    }
}
