//! The human-readable mirror of assignment.json (`kubectl get kafkaclusterassignments`).

use kaas_shared::assignment::Assignment;

/// Where the controller publishes each assignment it writes, fire and forget: brokers never
/// read the mirror, so a failed or late publish only delays what `kubectl` shows, and the
/// controller never waits for it.
pub trait AssignmentMirror: Send + Sync + std::fmt::Debug {
    fn publish(&self, assignment: &Assignment);
}
