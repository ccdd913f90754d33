//! Standard `metav1.Condition`s, merged so that `lastTransitionTime` changes only when the status
//! does (otherwise every reconcile would rewrite the status and wake every watcher).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

/// Whether the last reconcile of the object succeeded; `False` carries the error's reason and
/// message, so a reconcile error reaches status rather than only the operator's log.
pub const RECONCILED: &str = "Reconciled";

/// A condition as the reconciler decides it, before timestamps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cond {
    /// `Ready`, `Progressing`, `Degraded`.
    pub type_: &'static str,
    /// Whether it holds.
    pub status: bool,
    /// CamelCase reason.
    pub reason: &'static str,
    /// Human-readable detail.
    pub message: String,
}

impl Cond {
    /// A condition.
    pub fn new(
        type_: &'static str,
        status: bool,
        reason: &'static str,
        message: impl Into<String>,
    ) -> Cond {
        Cond {
            type_,
            status,
            reason,
            message: message.into(),
        }
    }
}

/// Builds the condition list from `wanted`, keeping the transition time of each condition whose
/// status did not change.
pub fn merge(
    previous: &[Condition],
    wanted: &[Cond],
    generation: Option<i64>,
    now: Timestamp,
) -> Vec<Condition> {
    wanted
        .iter()
        .map(|w| {
            let status = if w.status { "True" } else { "False" };
            let last_transition_time = previous
                .iter()
                .find(|p| p.type_ == w.type_ && p.status == status)
                .map(|p| p.last_transition_time.clone())
                .unwrap_or(Time(now));
            Condition {
                type_: w.type_.to_owned(),
                status: status.to_owned(),
                reason: w.reason.to_owned(),
                message: w.message.clone(),
                observed_generation: generation,
                last_transition_time,
            }
        })
        .collect()
}

/// `previous` with `cond` set (replaced or appended), every other condition kept as it is.
pub fn set(
    previous: &[Condition],
    cond: &Cond,
    generation: Option<i64>,
    now: Timestamp,
) -> Vec<Condition> {
    let mut out: Vec<Condition> = previous
        .iter()
        .filter(|c| c.type_ != cond.type_)
        .cloned()
        .collect();
    out.extend(merge(previous, std::slice::from_ref(cond), generation, now));
    out
}

/// `previous` with `Reconciled=False` carrying `error`'s reason and message.
pub fn failed(
    previous: &[Condition],
    error: &crate::Error,
    generation: Option<i64>,
) -> Vec<Condition> {
    let cond = Cond::new(RECONCILED, false, error.reason(), error.to_string());
    set(previous, &cond, generation, Timestamp::now())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn transition_time_moves_only_on_status_change() {
        let t0: Timestamp = "2025-01-01T00:00:00Z".parse().unwrap();
        let t1: Timestamp = "2025-01-02T00:00:00Z".parse().unwrap();
        let first = merge(
            &[],
            &[Cond::new("Ready", false, "Creating", "x")],
            Some(1),
            t0,
        );
        let same = merge(
            &first,
            &[Cond::new("Ready", false, "Waiting", "y")],
            Some(2),
            t1,
        );
        assert_eq!(same[0].last_transition_time, Time(t0));
        assert_eq!(same[0].reason, "Waiting");
        assert_eq!(same[0].observed_generation, Some(2));
        let flipped = merge(&same, &[Cond::new("Ready", true, "Ready", "")], Some(2), t1);
        assert_eq!(flipped[0].last_transition_time, Time(t1));
        let failed = set(
            &flipped,
            &Cond::new(RECONCILED, false, "KubernetesError", "boom"),
            Some(2),
            t1,
        );
        assert_eq!(failed.len(), 2);
        assert_eq!(
            (failed[0].type_.as_str(), failed[0].status.as_str()),
            ("Ready", "True")
        );
        assert_eq!(
            (failed[1].reason.as_str(), failed[1].message.as_str()),
            ("KubernetesError", "boom")
        );
    }
}
