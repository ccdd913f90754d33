//! Kubernetes' opinion of which brokers can serve (their EndpointSlice conditions), which the
//! controller intersects with the heartbeat-connected set: a broker that heartbeats but fails
//! its readiness probe (stuck storage, draining) gets no new work and loses what it leads.

use std::collections::BTreeSet;

/// The broker ids whose endpoints are serving, or `None` while unknown (not synced yet, or no
/// Kubernetes at all): then the heartbeat alone decides.
pub trait ReadyBrokers: Send + Sync + std::fmt::Debug {
    fn ready(&self) -> Option<BTreeSet<i32>>;
}

/// `heartbeating ∩ ready`, but never narrowed to nothing: an EndpointSlice that lags behind a
/// rollout must not produce an empty assignment.
pub fn narrow(heartbeating: BTreeSet<i32>, ready: Option<BTreeSet<i32>>) -> BTreeSet<i32> {
    let Some(ready) = ready else { return heartbeating };
    let both: BTreeSet<i32> = heartbeating.intersection(&ready).copied().collect();
    if both.is_empty() { heartbeating } else { both }
}

#[cfg(test)]
mod tests {
    use super::narrow;

    #[test]
    fn alive_is_heartbeating_and_ready_but_never_empty() {
        let set = |ids: &[i32]| ids.iter().copied().collect();
        assert_eq!(narrow(set(&[0, 1, 2]), None), set(&[0, 1, 2]));
        assert_eq!(narrow(set(&[0, 1, 2]), Some(set(&[0, 2, 5]))), set(&[0, 2]));
        assert_eq!(narrow(set(&[0, 1]), Some(set(&[]))), set(&[0, 1]));
        assert_eq!(narrow(set(&[]), Some(set(&[1]))), set(&[]));
    }
}
