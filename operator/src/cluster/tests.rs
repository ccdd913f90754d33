#![allow(clippy::unwrap_used)]

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
    let problem = || {
        Some(Cond::new(
            DEGRADED,
            true,
            "StorageNotBound",
            "claim x is Pending",
        ))
    };
    let c = conditions(3, Some(&sts_status(3, 0, 3, 2)), Some(2), problem());
    assert_eq!((c[0].status, c[0].reason), (false, "StorageNotBound"));
    assert_eq!(c[0].message, "0/3 brokers ready: claim x is Pending");
    assert_eq!((c[1].status, c[1].reason), (true, "BrokersNotReady"));
    assert_eq!(
        (c[2].type_, c[2].status, c[2].reason),
        (DEGRADED, true, "StorageNotBound")
    );
    // Ready brokers outrank a stale diagnosis.
    let c = conditions(3, Some(&sts_status(3, 3, 3, 2)), Some(2), problem());
    assert_eq!((c[0].status, c[2].status), (true, false));
}

#[test]
fn rollout_decisions_name_what_changes() {
    let live = |replicas: i32, hash: &str| -> StatefulSet {
        serde_json::from_value(json!({
            "metadata": {"name": "prod"},
            "spec": {
                "replicas": replicas,
                "selector": {},
                "serviceName": "prod-brokers",
                "template": {"metadata": {"annotations": {resources::INPUTS_HASH_ANNOTATION: hash}}},
            }
        }))
        .unwrap()
    };
    assert_eq!(rollout_decision(None, 3, Some("a")).unwrap().0, "Creating");
    assert_eq!(rollout_decision(Some(&live(3, "a")), 3, Some("a")), None);
    assert_eq!(
        rollout_decision(Some(&live(3, "a")), 5, Some("a"))
            .unwrap()
            .0,
        "ScalingUp"
    );
    let (reason, note) = rollout_decision(Some(&live(3, "a")), 2, Some("a")).unwrap();
    assert_eq!(reason, "ScalingDown");
    assert!(note.contains("drains"), "{note}");
    // A template change is the news even when replicas change with it.
    assert_eq!(
        rollout_decision(Some(&live(3, "a")), 2, Some("b"))
            .unwrap()
            .0,
        "RollingRestart"
    );
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
    let mut kc = cluster("0.1.0");
    kc.spec.pod_template = Some(
        serde_json::from_value(json!({"env": [{"name": "KAAS_LISTEN", "value": "x"}]})).unwrap(),
    );
    assert_eq!(refusal(&kc).unwrap().reason, "InvalidPodTemplate");
    let mut kc = cluster("0.1.0");
    kc.spec.pod_template =
        Some(serde_json::from_value(json!({"terminationGracePeriodSeconds": 20})).unwrap());
    let r = refusal(&kc).unwrap();
    assert_eq!(r.reason, "InvalidPodTemplate");
    assert!(
        r.message.contains("drain.timeout.ms (30000 ms)"),
        "{}",
        r.message
    );
}

#[test]
fn a_refusal_stops_the_rollout_but_not_the_report_of_running_brokers() {
    let refused = || {
        Cond::new(
            DEGRADED,
            true,
            "InvalidConfig",
            "broker config \"x\" is not a broker setting kaas knows",
        )
    };
    // Brokers run (the old template) and are ready: they say so; nothing progresses.
    let c = with_refusal(
        conditions(3, Some(&sts_status(3, 3, 3, 2)), Some(2), None),
        refused(),
        true,
    );
    let get = |c: &[Cond], t: &str| c.iter().find(|c| c.type_ == t).cloned().unwrap();
    assert_eq!(c.len(), 3);
    assert_eq!(
        (get(&c, READY).status, get(&c, READY).reason),
        (true, "Ready")
    );
    assert_eq!(
        (get(&c, PROGRESSING).status, get(&c, PROGRESSING).reason),
        (false, "InvalidConfig")
    );
    assert!(get(&c, PROGRESSING).message.starts_with("not rolled out: "));
    assert_eq!(
        (get(&c, DEGRADED).status, get(&c, DEGRADED).reason),
        (true, "InvalidConfig")
    );
    // Nothing runs yet: the refusal is why nothing is ready.
    let c = with_refusal(conditions(3, None, None, None), refused(), false);
    assert_eq!(
        (get(&c, READY).status, get(&c, READY).reason),
        (false, "InvalidConfig")
    );
}

fn not_found() -> Response<Body> {
    let status = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "reason": "NotFound", "code": 404, "message": "not found"});
    Response::builder()
        .status(404)
        .body(Body::from(serde_json::to_vec(&status).unwrap()))
        .unwrap()
}

fn ok(body: &serde_json::Value) -> Response<Body> {
    Response::builder()
        .body(Body::from(serde_json::to_vec(body).unwrap()))
        .unwrap()
}

/// A refused spec (here an unsupported version and an unknown config key) is not rolled
/// out, and stops nothing else: the StatefulSet keeps the brokers' template but takes the
/// new replica count, the Services, RBAC and agent are applied, and status says why.
#[tokio::test]
async fn a_refused_spec_keeps_the_brokers_template_and_reconciles_the_rest() {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(service, "ns");
    let install = Install::new("kaas-system", &[]);
    let ctx = Arc::new(Context::new(
        client,
        "img".into(),
        ReconcileMetrics::default(),
        install.clone(),
    ));
    let mut kc = cluster("9.0.0");
    kc.spec.replicas = 5;
    kc.annotations_mut()
        .insert(install::CLAIM_ANNOTATION.into(), install.claim_value());
    kc.spec
        .config
        .insert("log.retention.hours".into(), "1".into());
    let live_template = json!({"metadata": {"annotations": {resources::INPUTS_HASH_ANNOTATION: "livehash"}}, "spec": {"containers": [{"name": "kaas", "image": "ghcr.io/kaas/kaas:0.1.0"}]}});
    let live = live_template.clone();
    let server = tokio::spawn(async move {
        let (mut applied, mut sts_patch, mut status_patch) = (Vec::new(), None, None);
        while let Some((request, send)) = handle.next_request().await {
            let (path, method) = (request.uri().path().to_owned(), request.method().clone());
            let body = request.into_body().collect_bytes().await.unwrap();
            let body: serde_json::Value = if body.is_empty() {
                json!(null)
            } else {
                serde_json::from_slice(&body).unwrap()
            };
            if path.contains("/events") {
                send.send_response(
                    Response::builder()
                        .status(201)
                        .body(Body::from(serde_json::to_vec(&body).unwrap()))
                        .unwrap(),
                );
            } else if method == http::Method::GET && path.ends_with("/statefulsets/prod") {
                send.send_response(ok(&json!({
                    "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "prod", "namespace": "ns"},
                    "spec": {"replicas": 3, "selector": {}, "serviceName": "prod-brokers", "template": live},
                })));
            } else if method == http::Method::GET && path.ends_with("/services") {
                // No external Services (the cluster has no external listener).
                send.send_response(ok(&json!({"apiVersion": "v1", "kind": "ServiceList", "metadata": {}, "items": []})));
            } else if method == http::Method::GET {
                // The assignment mirror: none yet.
                send.send_response(not_found());
            } else if path.ends_with("/kafkaclusters/prod/status") {
                let mut updated = serde_json::to_value(cluster("9.0.0")).unwrap();
                updated["status"] = body["status"].clone();
                status_patch = Some(body);
                send.send_response(ok(&updated));
            } else {
                assert_eq!(method, http::Method::PATCH, "{path}");
                let mut echoed = body.clone();
                if path.ends_with("/statefulsets/prod") {
                    echoed["status"] = json!({"replicas": 5, "readyReplicas": 5, "updatedReplicas": 5, "observedGeneration": 1});
                    echoed["metadata"]["generation"] = json!(1);
                    sts_patch = Some(body);
                }
                applied.push(path);
                send.send_response(ok(&echoed));
            }
        }
        (applied, sts_patch.unwrap(), status_patch.unwrap())
    });
    reconcile(Arc::new(kc), ctx).await.unwrap();
    let (applied, sts, status) = server.await.unwrap();
    assert_eq!(sts["spec"]["replicas"], 5, "the scale goes out");
    assert_eq!(
        sts["spec"]["template"], live_template,
        "the brokers keep their template"
    );
    for object in [
        "/services/prod-brokers",
        "/services/prod-bootstrap",
        "/roles/prod-broker",
        "/deployments/prod-volume-agent",
        "/poddisruptionbudgets/prod",
    ] {
        assert!(
            applied.iter().any(|p| p.ends_with(object)),
            "{object} not applied: {applied:?}"
        );
    }
    let conds = status["status"]["conditions"].as_array().unwrap();
    let cond = |t: &str| conds.iter().find(|c| c["type"] == t).unwrap().clone();
    assert_eq!(
        (
            cond("Degraded")["status"].as_str(),
            cond("Degraded")["reason"].as_str()
        ),
        (Some("True"), Some("UnsupportedBrokerVersion"))
    );
    assert_eq!(
        cond("Ready")["status"],
        "True",
        "the running brokers are ready"
    );
    assert_eq!(cond("Progressing")["status"], "False");
    assert_eq!(status["status"]["readyBrokers"], 5);
}
