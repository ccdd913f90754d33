//! Why a cluster's brokers are not ready, in the words a user can act on: the shared claim is
//! missing or not bound (and whether its StorageClass exists), the StatefulSet cannot create a
//! broker pod (a missing ServiceAccount or PriorityClass, a quota, an admission webhook), a
//! broker pod cannot mount a volume (a Secret the listener names does not exist, an NFS export
//! refuses the node), a broker image cannot be pulled, a broker crash-loops, or a broker pod
//! cannot be scheduled. The
//! reconciler reports the first that applies as the `Degraded` condition's reason and message,
//! and as a Warning event.

use k8s_openapi::api::core::v1::{Event, PersistentVolumeClaim, Pod};
use kaas_shared::crd::conditions::DEGRADED;

use crate::conditions::Cond;

/// What the reconciler read to explain the brokers' state.
#[derive(Debug, Default)]
pub struct Observed<'a> {
    /// The shared claim's name.
    pub claim_name: &'a str,
    /// The shared claim, if it exists.
    pub claim: Option<&'a PersistentVolumeClaim>,
    /// For a Pending claim that names a StorageClass: whether that class exists.
    pub storage_class_exists: Option<bool>,
    /// The broker pods.
    pub pods: &'a [Pod],
    /// How many broker pods the cluster wants.
    pub replicas: i32,
    /// The StatefulSet's events (its controller reports a pod it cannot create as `FailedCreate`).
    pub statefulset_events: &'a [Event],
    /// The events of broker pods that have not started (the kubelet reports a volume it cannot
    /// mount as `FailedMount`).
    pub pod_events: &'a [Event],
}

/// The first problem found, as a `Degraded=True` condition; `None` when nothing is wrong that
/// a user must fix (brokers may still be starting).
pub fn diagnose(o: &Observed<'_>) -> Option<Cond> {
    claim_problem(o)
        .or_else(|| creation_problem(o))
        .or_else(|| mount_problem(o))
        .or_else(|| pod_problem(o.pods))
}

/// Whether the pod has not started: pending, its containers waiting to be created.
pub fn not_started(pod: &Pod) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    phase.is_none_or(|phase| phase == "Pending")
}

/// The newest of `events` with `reason`.
fn newest<'e>(events: impl Iterator<Item = &'e Event>, reason: &str) -> Option<&'e Event> {
    let at = |e: &Event| e.last_timestamp.as_ref().map(|t| t.0).or(e.event_time.as_ref().map(|t| t.0));
    events.filter(|e| e.reason.as_deref() == Some(reason)).max_by_key(|e| at(e))
}

/// A broker pod that has not started because the kubelet cannot mount one of its volumes: the
/// newest `FailedMount` event of that very pod (not of an earlier pod of the same name) says
/// which and why, e.g. `secret "kafka-tls" not found`.
fn mount_problem(o: &Observed<'_>) -> Option<Cond> {
    let mut pods: Vec<&Pod> = o.pods.iter().filter(|p| not_started(p)).collect();
    pods.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    pods.into_iter().find_map(|pod| {
        let (name, uid) = (pod.metadata.name.as_deref()?, pod.metadata.uid.as_deref());
        let its = o.pod_events.iter().filter(|e| {
            let involved = &e.involved_object;
            involved.kind.as_deref() == Some("Pod")
                && involved.name.as_deref() == Some(name)
                && (uid.is_none() || involved.uid.is_none() || involved.uid.as_deref() == uid)
        });
        let event = newest(its, "FailedMount")?;
        let why = event.message.as_deref().unwrap_or("a volume cannot be mounted");
        Some(Cond::new(
            DEGRADED,
            true,
            "BrokerVolumeNotMounted",
            format!("broker pod {name} cannot start: {why}"),
        ))
    })
}

/// A broker pod that does not exist because the StatefulSet controller's create failed: the
/// newest `FailedCreate` event says why (the API server's refusal).
fn creation_problem(o: &Observed<'_>) -> Option<Cond> {
    if i32::try_from(o.pods.len()).unwrap_or(i32::MAX) >= o.replicas {
        return None;
    }
    let newest = newest(o.statefulset_events.iter(), "FailedCreate")?;
    Some(Cond::new(
        DEGRADED,
        true,
        "BrokerPodsNotCreated",
        format!(
            "{} of {} broker pods exist; the StatefulSet cannot create the others: {}",
            o.pods.len(),
            o.replicas,
            newest.message.as_deref().unwrap_or("no reason given")
        ),
    ))
}

fn claim_problem(o: &Observed<'_>) -> Option<Cond> {
    let Some(claim) = o.claim else {
        return Some(Cond::new(
            DEGRADED,
            true,
            "StorageClaimMissing",
            format!("PersistentVolumeClaim {:?} does not exist; brokers cannot start without the shared volume", o.claim_name),
        ));
    };
    let phase = claim.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("Pending");
    if phase == "Bound" {
        return None;
    }
    let class = claim.spec.as_ref().and_then(|s| s.storage_class_name.as_deref());
    let why = match (class, o.storage_class_exists) {
        (Some(class), Some(false)) => format!("StorageClass {class:?} does not exist"),
        (Some(class), _) => format!(
            "StorageClass {class:?} has not provided a volume yet (it must support ReadWriteMany, e.g. csi-driver-nfs, EFS, Filestore)"
        ),
        (None, _) => "no StorageClass is named and none has provided a volume (is there a default ReadWriteMany class?)".to_owned(),
    };
    Some(Cond::new(DEGRADED, true, "StorageNotBound", format!("PersistentVolumeClaim {:?} is {phase}: {why}", o.claim_name)))
}

/// The first broker pod problem, by pod name order: image pulls, then crash loops, then
/// scheduling.
fn pod_problem(pods: &[Pod]) -> Option<Cond> {
    let mut pods: Vec<&Pod> = pods.iter().collect();
    pods.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let waiting = |reasons: &[&str]| {
        pods.iter().find_map(|pod| {
            let status = pod.status.as_ref()?;
            let containers = status.init_container_statuses.iter().flatten().chain(status.container_statuses.iter().flatten());
            containers.into_iter().find_map(|c| {
                let w = c.state.as_ref()?.waiting.as_ref()?;
                let reason = w.reason.as_deref()?;
                reasons.contains(&reason).then(|| {
                    let name = pod.metadata.name.as_deref().unwrap_or("?");
                    (name.to_owned(), c.image.clone(), reason.to_owned(), w.message.clone().unwrap_or_default(), c)
                })
            })
        })
    };
    if let Some((pod, image, reason, message, _)) = waiting(&["ErrImagePull", "ImagePullBackOff", "ErrImageNeverPull", "InvalidImageName"])
    {
        return Some(Cond::new(
            DEGRADED,
            true,
            "ImagePullFailed",
            format!("broker pod {pod} cannot pull image {image:?} ({reason}): {message}"),
        ));
    }
    if let Some((pod, _, _, _, c)) = waiting(&["CrashLoopBackOff"]) {
        let last = c.last_state.as_ref().and_then(|s| s.terminated.as_ref());
        let exit = last.map_or_else(String::new, |t| {
            let detail = t.message.as_deref().or(t.reason.as_deref()).unwrap_or("");
            format!(", last exit code {}{}{}", t.exit_code, if detail.is_empty() { "" } else { ": " }, detail)
        });
        return Some(Cond::new(
            DEGRADED,
            true,
            "BrokerCrashLooping",
            format!("broker pod {pod} is crash-looping ({} restarts{exit}); see kubectl logs {pod} --previous", c.restart_count),
        ));
    }
    pods.iter().find_map(|pod| {
        let condition = pod.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == "PodScheduled")?;
        (condition.status == "False" && condition.reason.as_deref() == Some("Unschedulable")).then(|| {
            Cond::new(
                DEGRADED,
                true,
                "BrokerUnschedulable",
                format!(
                    "broker pod {} cannot be scheduled: {}",
                    pod.metadata.name.as_deref().unwrap_or("?"),
                    condition.message.as_deref().unwrap_or("no reason given")
                ),
            )
        })
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn claim(phase: &str, class: Option<&str>) -> PersistentVolumeClaim {
        serde_json::from_value(json!({
            "metadata": {"name": "data"},
            "spec": {"storageClassName": class, "accessModes": ["ReadWriteMany"]},
            "status": {"phase": phase},
        }))
        .unwrap()
    }

    fn pod(name: &str, status: serde_json::Value) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": name}, "status": status})).unwrap()
    }

    fn waiting(reason: &str, message: &str) -> serde_json::Value {
        json!({"containerStatuses": [{
            "name": "kafka", "image": "ghcr.io/kaas/kaas:9.9", "imageID": "", "ready": false, "restartCount": 4,
            "state": {"waiting": {"reason": reason, "message": message}},
            "lastState": {"terminated": {"exitCode": 2, "reason": "Error", "message": "cannot open /var/lib/kaas: Permission denied"}},
        }]})
    }

    fn observed<'a>(claim: Option<&'a PersistentVolumeClaim>, exists: Option<bool>, pods: &'a [Pod]) -> Observed<'a> {
        Observed {
            claim_name: "data",
            claim,
            storage_class_exists: exists,
            pods,
            replicas: pods.len() as i32,
            statefulset_events: &[],
            pod_events: &[],
        }
    }

    fn event(reason: &str, at: &str, message: &str) -> Event {
        serde_json::from_value(json!({
            "metadata": {"name": format!("c.{at}")}, "involvedObject": {"kind": "StatefulSet", "name": "c"},
            "reason": reason, "lastTimestamp": at, "message": message,
        }))
        .unwrap()
    }

    fn pod_event(pod: &str, uid: &str, reason: &str, at: &str, message: &str) -> Event {
        serde_json::from_value(json!({
            "metadata": {"name": format!("{pod}.{at}")},
            "involvedObject": {"kind": "Pod", "name": pod, "uid": uid},
            "reason": reason, "lastTimestamp": at, "message": message,
        }))
        .unwrap()
    }

    #[test]
    fn a_volume_the_kubelet_cannot_mount_is_named_for_a_pod_that_has_not_started() {
        let bound = claim("Bound", None);
        let mut pending = pod(
            "c-1",
            json!({"phase": "Pending", "containerStatuses": [{
                "name": "kafka", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
                "state": {"waiting": {"reason": "ContainerCreating"}},
            }]}),
        );
        pending.metadata.uid = Some("new".into());
        let pods = [pod("c-0", json!({"phase": "Running"})), pending];
        let missing = r#"MountVolume.SetUp failed for volume "listener-tls" : secret "kafka-tls" not found"#;
        let events = [
            pod_event("c-1", "old", "FailedMount", "2026-12-01T10:09:00Z", "an earlier pod's problem"),
            pod_event("c-1", "new", "FailedMount", "2026-12-01T10:05:00Z", missing),
            pod_event("c-1", "new", "Scheduled", "2026-12-01T10:04:00Z", "assigned to a node"),
        ];
        let o = Observed { pod_events: &events, ..observed(Some(&bound), None, &pods) };
        let problem = diagnose(&o).unwrap();
        assert_eq!(problem.reason, "BrokerVolumeNotMounted");
        assert_eq!(problem.message, format!("broker pod c-1 cannot start: {missing}"));
        // Once the pod runs, the old event explains nothing.
        let running = [pod("c-1", json!({"phase": "Running"}))];
        let o = Observed { pod_events: &events, ..observed(Some(&bound), None, &running) };
        assert!(diagnose(&o).is_none());
    }

    #[test]
    fn a_pod_the_statefulset_cannot_create_is_named_with_the_refusal() {
        let bound = claim("Bound", None);
        let running = [pod("c-0", json!({"phase": "Running"}))];
        let events = [
            event("FailedCreate", "2026-12-01T10:00:00Z", "create Pod c-1 in StatefulSet c failed error: an older refusal"),
            event(
                "FailedCreate",
                "2026-12-01T10:05:00Z",
                "create Pod c-1 in StatefulSet c failed error: pods \"c-1\" is forbidden: no PriorityClass with name gold was found",
            ),
            event("SuccessfulCreate", "2026-12-01T10:06:00Z", "create Pod c-0 in StatefulSet c successful"),
        ];
        let o = Observed { replicas: 3, statefulset_events: &events, ..observed(Some(&bound), None, &running) };
        let problem = diagnose(&o).unwrap();
        assert_eq!(problem.reason, "BrokerPodsNotCreated");
        assert!(problem.message.starts_with("1 of 3 broker pods exist"), "{}", problem.message);
        assert!(problem.message.contains("no PriorityClass with name gold"), "{}", problem.message);
        // Every pod exists: an old refusal explains nothing any more.
        let all = Observed { replicas: 1, statefulset_events: &events, ..observed(Some(&bound), None, &running) };
        assert_eq!(diagnose(&all), None);
    }

    #[test]
    fn a_bound_claim_and_healthy_pods_are_not_degraded() {
        let bound = claim("Bound", Some("nfs"));
        let pods = [pod("c-0", json!({"phase": "Running"}))];
        assert_eq!(diagnose(&observed(Some(&bound), None, &pods)), None);
    }

    #[test]
    fn storage_problems_name_the_claim_and_the_class() {
        let missing = diagnose(&observed(None, None, &[])).unwrap();
        assert_eq!(missing.reason, "StorageClaimMissing");

        let pending = claim("Pending", Some("nfs"));
        let no_class = diagnose(&observed(Some(&pending), Some(false), &[])).unwrap();
        assert_eq!((no_class.reason, no_class.status), ("StorageNotBound", true));
        assert!(no_class.message.contains("StorageClass \"nfs\" does not exist"), "{}", no_class.message);

        let slow = diagnose(&observed(Some(&pending), Some(true), &[])).unwrap();
        assert!(slow.message.contains("has not provided a volume"), "{}", slow.message);
    }

    #[test]
    fn pod_problems_in_order_of_what_to_fix_first() {
        let bound = claim("Bound", None);
        let pull = pod("c-1", waiting("ImagePullBackOff", "Back-off pulling image"));
        let crash = pod("c-0", waiting("CrashLoopBackOff", "back-off 40s"));
        let unschedulable = pod(
            "c-2",
            json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/3 nodes are available: 3 Insufficient memory."}]}),
        );

        let all = [crash.clone(), pull.clone(), unschedulable.clone()];
        let first = diagnose(&observed(Some(&bound), None, &all)).unwrap();
        assert_eq!(first.reason, "ImagePullFailed");
        assert!(first.message.contains("c-1") && first.message.contains("ghcr.io/kaas/kaas:9.9"), "{}", first.message);

        let looping = diagnose(&observed(Some(&bound), None, &[crash, unschedulable.clone()])).unwrap();
        assert_eq!(looping.reason, "BrokerCrashLooping");
        assert!(
            looping.message.contains("4 restarts, last exit code 2: cannot open /var/lib/kaas: Permission denied"),
            "{}",
            looping.message
        );

        let pending = diagnose(&observed(Some(&bound), None, &[unschedulable])).unwrap();
        assert_eq!(pending.reason, "BrokerUnschedulable");
        assert!(pending.message.contains("Insufficient memory"), "{}", pending.message);
    }
}
