#![allow(clippy::unwrap_used)]

use super::*;
use kaas_shared::crd::KafkaClusterSpec;

pub(crate) fn cluster(spec: serde_json::Value) -> KafkaCluster {
    let spec: KafkaClusterSpec = serde_json::from_value(spec).unwrap();
    let mut kc = KafkaCluster::new("prod", spec);
    kc.metadata.namespace = Some("ns".into());
    kc.metadata.uid = Some("0b1c2d3e-0000-0000-0000-000000000001".into());
    kc
}

fn base() -> serde_json::Value {
    json!({"replicas": 3, "version": "0.1.0", "storage": {"existingClaim": "shared"}})
}

fn template_of(kc: &KafkaCluster) -> PodTemplateSpec {
    broker_pod_template(kc, &Names::of(kc).unwrap()).unwrap()
}

fn env(t: &PodTemplateSpec) -> BTreeMap<String, String> {
    let c = &t.spec.as_ref().unwrap().containers[0];
    c.env
        .iter()
        .flatten()
        .map(|e| {
            let v = e.value.clone().unwrap_or_else(|| {
                e.value_from
                    .as_ref()
                    .unwrap()
                    .field_ref
                    .as_ref()
                    .unwrap()
                    .field_path
                    .clone()
            });
            (e.name.clone(), v)
        })
        .collect()
}

/// The listener's TLS and authentication become the broker's flags over mounted Secrets.
#[test]
fn listener_security_mounts_its_secrets() {
    let mounted = |listener: serde_json::Value| {
        let mut spec = base();
        spec["listener"] = listener;
        let kc = cluster(spec);
        let t = template_of(&kc);
        let pod = t.spec.as_ref().unwrap();
        let secrets: Vec<(String, String)> = pod
            .volumes
            .iter()
            .flatten()
            .filter_map(|v| {
                let secret = v.secret.as_ref()?.secret_name.clone()?;
                let mount = pod.containers[0]
                    .volume_mounts
                    .iter()
                    .flatten()
                    .find(|m| m.name == v.name)?;
                assert_eq!(mount.read_only, Some(true));
                Some((secret, mount.mount_path.clone()))
            })
            .collect();
        (env(&t), secrets)
    };

    let (e, secrets) = mounted(
        json!({"tls": {"secretName": "prod-tls"}, "authentication": {"type": "scram-sha-512", "secretName": "prod-users"}}),
    );
    assert_eq!(e["KAAS_SECURITY_PROTOCOL"], "SASL_SSL");
    assert_eq!(e["KAAS_SSL_CERTIFICATE"], "/etc/kaas/listener-tls/tls.crt");
    assert_eq!(e["KAAS_SSL_KEY"], "/etc/kaas/listener-tls/tls.key");
    assert_eq!(e["KAAS_SASL_ENABLED_MECHANISMS"], "SCRAM-SHA-512");
    assert_eq!(e["KAAS_SASL_CREDENTIALS"], "/etc/kaas/sasl/users.json");
    assert_eq!(
        secrets,
        [
            ("prod-tls".to_string(), LISTENER_TLS_DIR.to_string()),
            ("prod-users".to_string(), SASL_CREDENTIALS_DIR.to_string())
        ]
    );

    let (e, secrets) =
        mounted(json!({"authentication": {"type": "scram-sha-256", "secretName": "prod-users"}}));
    assert_eq!(e["KAAS_SECURITY_PROTOCOL"], "SASL_PLAINTEXT");
    assert_eq!(e["KAAS_SASL_ENABLED_MECHANISMS"], "SCRAM-SHA-256");
    assert!(!e.contains_key("KAAS_SSL_CERTIFICATE"));
    assert_eq!(secrets.len(), 1);

    // SCRAM users from KafkaUsers only: no credentials file, nothing mounted.
    let (e, secrets) = mounted(json!({"authentication": {"type": "scram-sha-512"}}));
    assert_eq!(e["KAAS_SECURITY_PROTOCOL"], "SASL_PLAINTEXT");
    assert_eq!(e["KAAS_SASL_ENABLED_MECHANISMS"], "SCRAM-SHA-512");
    assert!(!e.contains_key("KAAS_SASL_CREDENTIALS"));
    assert!(secrets.is_empty());

    let (e, secrets) =
        mounted(json!({"tls": {"secretName": "prod-tls"}, "authentication": {"type": "tls"}}));
    assert_eq!(e["KAAS_SECURITY_PROTOCOL"], "SSL");
    assert_eq!(e["KAAS_SSL_CLIENT_AUTH"], "required");
    assert_eq!(e["KAAS_SSL_TRUSTSTORE"], "/etc/kaas/listener-tls/ca.crt");
    assert!(!e.contains_key("KAAS_SASL_ENABLED_MECHANISMS"));
    assert_eq!(
        secrets,
        [("prod-tls".to_string(), LISTENER_TLS_DIR.to_string())]
    );

    // The operator's TLS and client certificates: the brokers trust the operator's clients CA,
    // which signs KafkaUsers' certificates (not the cluster CA the listener Secret holds).
    let (e, secrets) = mounted(json!({"tls": {}, "authentication": {"type": "tls"}}));
    assert_eq!(e["KAAS_SECURITY_PROTOCOL"], "SSL");
    assert_eq!(e["KAAS_SSL_CLIENT_AUTH"], "required");
    assert_eq!(e["KAAS_SSL_CERTIFICATE"], "/etc/kaas/listener-tls/tls.crt");
    assert_eq!(e["KAAS_SSL_TRUSTSTORE"], "/etc/kaas/clients-ca/ca.crt");
    assert_eq!(
        secrets,
        [
            (
                "prod-listener-tls".to_string(),
                LISTENER_TLS_DIR.to_string()
            ),
            (
                "prod-clients-ca-cert".to_string(),
                CLIENTS_CA_DIR.to_string()
            )
        ]
    );
    let mut spec = base();
    spec["listener"] = json!({"tls": {}, "authentication": {"type": "tls"}});
    assert!(issues_clients_ca(&cluster(spec).spec.listener));
    for listener in [
        json!({"tls": {"secretName": "prod-tls"}, "authentication": {"type": "tls"}}),
        json!({"tls": {}}),
        json!({"tls": {}, "authentication": {"type": "scram-sha-512"}}),
    ] {
        let mut spec = base();
        spec["listener"] = listener.clone();
        assert!(
            !issues_clients_ca(&cluster(spec).spec.listener),
            "{listener}"
        );
    }

    let (e, secrets) = mounted(json!({"tls": {"secretName": "prod-tls"}}));
    assert_eq!(e["KAAS_SECURITY_PROTOCOL"], "SSL");
    assert!(!e.contains_key("KAAS_SSL_CLIENT_AUTH"));
    assert_eq!(secrets.len(), 1);

    // OAuth, as Strimzi users write it: an identity provider's endpoint behind a private CA.
    let (e, secrets) = mounted(json!({"tls": {"secretName": "prod-tls"}, "authentication": {
        "type": "oauth", "jwksEndpointUri": "https://idp.example/certs", "jwksRefreshSeconds": 300,
        "validIssuerUri": "https://idp.example", "checkAudience": true, "clientId": "kafka",
        "userNameClaim": "preferred_username",
        "tlsTrustedCertificates": [{"secretName": "idp-ca", "certificate": "ca.pem"}],
    }}));
    assert_eq!(e["KAAS_SECURITY_PROTOCOL"], "SASL_SSL");
    assert_eq!(e["KAAS_SASL_ENABLED_MECHANISMS"], "OAUTHBEARER");
    assert_eq!(e["KAAS_SASL_OAUTHBEARER_JWKS"], "https://idp.example/certs");
    assert_eq!(e["KAAS_SASL_OAUTHBEARER_JWKS_ENDPOINT_REFRESH_MS"], "300000");
    assert_eq!(e["KAAS_SASL_OAUTHBEARER_JWKS_ENDPOINT_CA"], "/etc/kaas/oauth-ca/ca.pem");
    assert_eq!(e["KAAS_SASL_OAUTHBEARER_EXPECTED_ISSUER"], "https://idp.example");
    assert_eq!(e["KAAS_SASL_OAUTHBEARER_EXPECTED_AUDIENCE"], "kafka");
    assert_eq!(e["KAAS_SASL_OAUTHBEARER_SUB_CLAIM_NAME"], "preferred_username");
    assert!(!e.contains_key("KAAS_SASL_CREDENTIALS"));
    assert_eq!(
        secrets,
        [
            ("prod-tls".to_string(), LISTENER_TLS_DIR.to_string()),
            ("idp-ca".to_string(), OAUTH_CA_DIR.to_string())
        ]
    );

    // A key set from a Secret; the audience is not checked unless asked.
    let (e, secrets) = mounted(json!({"authentication": {
        "type": "oauth", "jwksSecret": {"secretName": "keys", "key": "jwks.json"}, "clientId": "kafka",
    }}));
    assert_eq!(e["KAAS_SECURITY_PROTOCOL"], "SASL_PLAINTEXT");
    assert_eq!(e["KAAS_SASL_OAUTHBEARER_JWKS"], "/etc/kaas/oauth-jwks/jwks.json");
    assert!(!e.contains_key("KAAS_SASL_OAUTHBEARER_EXPECTED_AUDIENCE"));
    assert_eq!(secrets, [("keys".to_string(), OAUTH_JWKS_DIR.to_string())]);
}

/// Clusters made before the listener had TLS and authentication keep their pod inputs hash: an
/// operator upgrade alone restarts no broker.
#[test]
fn a_listener_without_security_hashes_as_before() {
    let kc = cluster(base());
    let listener = serde_json::to_value(&kc.spec.listener).unwrap();
    assert_eq!(listener, json!({"port": 9092, "advertise": "PodDns"}));
}

#[test]
fn statefulset_has_what_brokers_need() {
    let kc = cluster(base());
    let names = Names::of(&kc).unwrap();
    let sts = statefulset(&kc, &names, &template_of(&kc)).unwrap();
    let spec = &sts.spec;
    assert_eq!(spec.replicas, Some(3));
    assert_eq!(spec.service_name.as_deref(), Some("prod-brokers"));
    let pod = spec.template.spec.as_ref().unwrap();
    assert_eq!(pod.service_account_name.as_deref(), Some("prod-broker"));
    assert!(pod.termination_grace_period_seconds.unwrap() >= 60);
    let c = &pod.containers[0];
    assert_eq!(c.image.as_deref(), Some("ghcr.io/kaas/kaas:0.1.0"));
    let e = env(&spec.template);
    assert_eq!(e["MY_POD_NAME"], "metadata.name");
    assert_eq!(e["KAAS_DATA_DIR"], "/data");
    assert_eq!(e["KAAS_LEASE_NAME"], "prod-controller");
    assert_eq!(
        e["KAAS_LISTEN"], "[::]:9092",
        "every address: port-forward works"
    );
    assert_eq!(e["KAAS_HTTP_LISTEN"], "[::]:9095");
    assert_eq!(e["KAAS_HEARTBEAT_LISTEN"], "$(MY_POD_IP):9094");
    assert_eq!(e["KAAS_INTERBROKER_LISTEN"], "$(MY_POD_IP):9091");
    assert!(
        !e.contains_key("KAAS_SECURITY_PROTOCOL"),
        "plaintext unless the listener says"
    );
    assert_eq!(
        e["KAAS_ADVERTISE"],
        "$(MY_POD_NAME).prod-brokers.ns.svc:9092"
    );
    assert_eq!(c.volume_mounts.as_ref().unwrap()[0].mount_path, "/data");
    let claim = pod.volumes.as_ref().unwrap()[0]
        .persistent_volume_claim
        .as_ref()
        .unwrap();
    assert_eq!(claim.claim_name, "shared");
    let path = |p: &Option<k8s_openapi::api::core::v1::Probe>| {
        p.as_ref()
            .unwrap()
            .http_get
            .as_ref()
            .unwrap()
            .path
            .clone()
            .unwrap()
    };
    assert_eq!(path(&c.readiness_probe), "/readyz");
    assert_eq!(path(&c.liveness_probe), "/healthz");
    let owner = &sts.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.controller),
        ("KafkaCluster", Some(true))
    );
}

#[test]
fn config_overrides_become_broker_env_and_pod_overrides_merge() {
    let mut spec = base();
    spec["config"] = json!({"log.retention.ms": "1000"});
    spec["listener"] = json!({"advertise": "PodIp"});
    spec["podTemplate"] = json!({
        "labels": {"team": "a", "app.kubernetes.io/instance": "hijack"},
        "tolerations": [{"key": "dedicated", "operator": "Exists"}],
        "nodeSelector": {"disk": "nfs"},
    });
    let t = template_of(&cluster(spec));
    let e = env(&t);
    assert_eq!(e["KAAS_LOG_RETENTION_MS"], "1000");
    assert_eq!(e["KAAS_ADVERTISE"], "$(MY_POD_IP):9092");
    let l = t.metadata.as_ref().unwrap().labels.as_ref().unwrap();
    assert_eq!(l["team"], "a");
    assert_eq!(l[LABEL_INSTANCE], "prod", "selector labels win");
    let pod = t.spec.as_ref().unwrap();
    assert_eq!(pod.tolerations.as_ref().unwrap().len(), 1);
    assert_eq!(pod.node_selector.as_ref().unwrap()["disk"], "nfs");
}

/// Every `$(MY_POD_IP)` of a container's env replaced by `ip`, as the kubelet expands it.
fn expanded(env: &BTreeMap<String, String>, ip: &str) -> BTreeMap<String, String> {
    env.iter()
        .map(|(k, v)| (k.clone(), v.replace("$(MY_POD_IP)", ip)))
        .collect()
}

#[test]
fn brokers_bind_every_address_or_the_pod_ip_and_read_an_ipv6_pod_ip() {
    use kaas_shared::listen_address::parse;
    let mut spec = base();
    spec["listener"] = json!({"advertise": "PodIp", "bind": "PodIp"});
    let e = expanded(&env(&template_of(&cluster(spec))), "fd00::5");
    for (var, want) in [
        ("KAAS_LISTEN", "[fd00::5]:9092"),
        ("KAAS_HTTP_LISTEN", "[fd00::5]:9095"),
        ("KAAS_HEARTBEAT_LISTEN", "[fd00::5]:9094"),
    ] {
        assert_eq!(parse(&e[var]).unwrap().to_string(), want, "{var}");
    }
    // The broker advertises the pod IP (never the wildcard); it reads the unbracketed
    // IPv6 form by its last colon (its own tests).
    assert_eq!(e["KAAS_ADVERTISE"], "fd00::5:9092");
    // Default: the wildcard, which is dual-stack.
    let e = expanded(&env(&template_of(&cluster(base()))), "fd00::5");
    assert_eq!(parse(&e["KAAS_LISTEN"]).unwrap().to_string(), "[::]:9092");
    assert_eq!(
        parse(&e["KAAS_HEARTBEAT_LISTEN"]).unwrap().to_string(),
        "[fd00::5]:9094"
    );
    // The volume agent's metrics address.
    let kc = cluster(base());
    let agent = volume_agent(&kc, &Names::of(&kc).unwrap(), "img:1").unwrap();
    let pod = agent.spec.template.spec.unwrap();
    let metrics = pod.containers[0]
        .env
        .iter()
        .flatten()
        .find(|v| v.name == "KAAS_METRICS_LISTEN")
        .and_then(|v| v.value.clone())
        .unwrap();
    assert_eq!(
        parse(&metrics.replace("$(MY_POD_IP)", "fd00::5"))
            .unwrap()
            .to_string(),
        "[fd00::5]:9096"
    );
}

#[test]
fn pods_meet_the_restricted_pod_security_level_by_default() {
    let kc = cluster(base());
    let names = Names::of(&kc).unwrap();
    let agent = volume_agent(&kc, &names, "img:1").unwrap();
    for pod in [
        template_of(&kc).spec.unwrap(),
        agent.spec.template.spec.unwrap(),
    ] {
        let sc = pod.security_context.unwrap();
        assert_eq!(sc.run_as_non_root, Some(true));
        assert_eq!(sc.seccomp_profile.unwrap().type_, "RuntimeDefault");
        let c = pod.containers[0].security_context.clone().unwrap();
        assert_eq!(c.allow_privilege_escalation, Some(false));
        assert_eq!(c.capabilities.unwrap().drop.unwrap(), ["ALL"]);
        assert_eq!(c.read_only_root_filesystem, Some(true));
        // Nothing but the data volume to write: no emptyDir needed.
        assert_eq!(pod.volumes.unwrap().len(), 1);
    }
}

#[test]
fn pod_template_security_env_and_scheduling_overrides() {
    let mut spec = base();
    spec["podTemplate"] = json!({
        "securityContext": {"runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 2000, "supplementalGroups": [3000]},
        "containerSecurityContext": {"readOnlyRootFilesystem": false},
        "env": [
            {"name": "RUST_BACKTRACE", "value": "1"},
            {"name": "KAAS_LISTEN", "value": "stored before the CRD rule"},
        ],
        "imagePullSecrets": [{"name": "regcred"}],
        "priorityClassName": "kafka-critical",
        "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule"}],
        "serviceAccountName": "kafka-irsa",
        "terminationGracePeriodSeconds": 600,
    });
    let kc = cluster(spec);
    let names = Names::of(&kc).unwrap();
    let t = template_of(&kc);
    let pod = t.spec.clone().unwrap();
    let sc = pod.security_context.clone().unwrap();
    assert_eq!(
        (sc.run_as_user, sc.run_as_group, sc.fs_group),
        (Some(1000), Some(1000), Some(2000))
    );
    assert_eq!(sc.supplemental_groups.clone().unwrap(), [3000]);
    assert_eq!(sc.run_as_non_root, Some(true), "defaults stay");
    let c = pod.containers[0].security_context.clone().unwrap();
    assert_eq!(c.read_only_root_filesystem, Some(false));
    assert_eq!(c.allow_privilege_escalation, Some(false), "defaults stay");
    let e = env(&t);
    assert_eq!(e["RUST_BACKTRACE"], "1");
    assert_eq!(
        e["KAAS_LISTEN"], "[::]:9092",
        "the operator's variables win"
    );
    let names_in_order: Vec<_> = pod.containers[0]
        .env
        .iter()
        .flatten()
        .map(|v| v.name.as_str())
        .collect();
    assert_eq!(names_in_order.last(), Some(&"RUST_BACKTRACE"));
    assert_eq!(
        names_in_order
            .iter()
            .filter(|n| **n == "KAAS_LISTEN")
            .count(),
        1
    );
    assert_eq!(pod.image_pull_secrets.unwrap()[0].name, "regcred");
    assert_eq!(pod.priority_class_name.as_deref(), Some("kafka-critical"));
    assert_eq!(pod.topology_spread_constraints.unwrap()[0].max_skew, 1);
    assert_eq!(pod.termination_grace_period_seconds, Some(600));
    assert_eq!(pod.service_account_name.as_deref(), Some("kafka-irsa"));
    let (sa, _, binding) = broker_rbac(&kc, &names).unwrap();
    assert_eq!(sa.metadata.name.as_deref(), Some("prod-broker"));
    assert_eq!(
        binding.subjects.unwrap()[0].name,
        "kafka-irsa",
        "the Role goes to the pods' ServiceAccount"
    );
    // The volume agent writes the same volume: same user and groups.
    let agent = volume_agent(&kc, &names, "img:1").unwrap();
    let asc = agent.spec.template.spec.unwrap().security_context;
    assert_eq!(asc, Some(sc));
}

/// What restarts brokers: exactly the changes that change the pod inputs hash.
#[test]
fn what_changes_restart_brokers() {
    let hash = |spec: serde_json::Value| {
        let kc = cluster(spec);
        inputs_hash(&kc, &Names::of(&kc).unwrap()).unwrap()
    };
    let original = hash(base());
    let with = |f: &dyn Fn(&mut serde_json::Value)| {
        let mut s = base();
        f(&mut s);
        hash(s)
    };
    // No restart: scaling, or spelling out a default.
    assert_eq!(with(&|s| s["replicas"] = json!(5)), original);
    assert_eq!(with(&|s| s["listener"] = json!({"bind": "All"})), original);
    // Restart: version, image, config, resources, overrides, timeouts, claim, listener.
    for change in [
        &(|s: &mut serde_json::Value| s["version"] = json!("0.1.1"))
            as &dyn Fn(&mut serde_json::Value),
        &|s| s["image"] = json!("me/kaas:dev"),
        &|s| s["config"] = json!({"log.segment.bytes": "1048576"}),
        &|s| s["resources"] = json!({"limits": {"memory": "1Gi"}}),
        &|s| s["podTemplate"] = json!({"labels": {"a": "b"}}),
        &|s| s["timeouts"] = json!({"fenceTimeoutMs": 5000, "sessionTimeoutMs": 9000}),
        &|s| s["storage"] = json!({"existingClaim": "other"}),
        &|s| s["listener"] = json!({"port": 19092}),
        &|s| s["listener"] = json!({"bind": "PodIp"}),
        &|s| s["podTemplate"] = json!({"securityContext": {"fsGroup": 1}}),
    ] {
        assert_ne!(with(change), original);
    }
}

#[test]
fn a_newer_rendering_of_the_same_inputs_keeps_the_live_template() {
    let kc = cluster(base());
    let names = Names::of(&kc).unwrap();
    let desired = template_of(&kc);
    // What an older operator rendered from the same spec: same hash, different details.
    let mut older = desired.clone();
    older.spec.as_mut().unwrap().containers[0].readiness_probe = None;
    let live = statefulset(&kc, &names, &older).unwrap();
    assert_eq!(choose_template(desired.clone(), Some(&live)), older);
    // A spec change goes out.
    let mut changed = base();
    changed["version"] = json!("0.1.1");
    let kc2 = cluster(changed);
    let new = template_of(&kc2);
    assert_eq!(choose_template(new.clone(), Some(&live)), new);
    // Nothing live yet, or a template without a hash (adopted from elsewhere): render.
    assert_eq!(choose_template(desired.clone(), None), desired);
}

#[test]
fn the_pod_monitor_scrapes_this_clusters_brokers_and_is_owned() {
    let kc = cluster(base());
    let names = Names::of(&kc).unwrap();
    let monitor = broker_pod_monitor(&kc, &names);
    let pod = serde_json::to_value(template_of(&kc)).unwrap();
    let labels = monitor["spec"]["selector"]["matchLabels"]
        .as_object()
        .unwrap();
    assert!(
        labels
            .iter()
            .all(|(k, v)| pod["metadata"]["labels"][k] == *v)
    );
    assert_eq!(
        labels[LABEL_INSTANCE], "prod",
        "only this cluster's brokers"
    );
    let port = &monitor["spec"]["podMetricsEndpoints"][0]["port"];
    assert!(
        pod["spec"]["containers"][0]["ports"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == *port)
    );
    assert!(
        monitor["spec"]["namespaceSelector"].is_null(),
        "its own namespace"
    );
    assert_eq!(monitor["metadata"]["namespace"], "ns");
    assert_eq!(
        monitor["metadata"]["ownerReferences"][0]["kind"],
        "KafkaCluster"
    );
}

#[test]
fn services_pdb_rbac_claim_and_agent() {
    let mut spec = base();
    spec["storage"] = json!({"storageClassName": "nfs", "size": "10Gi"});
    let kc = cluster(spec);
    let names = Names::of(&kc).unwrap();
    let h = headless_service(&kc, &names).unwrap();
    let hs = h.spec.as_ref().unwrap();
    assert_eq!(hs.cluster_ip.as_deref(), Some("None"));
    assert_eq!(hs.publish_not_ready_addresses, Some(true));
    assert_eq!(
        bootstrap_service(&kc, &names)
            .unwrap()
            .metadata
            .name
            .as_deref(),
        Some("prod-bootstrap")
    );
    assert_eq!(bootstrap_servers(&kc, &names), "prod-bootstrap.ns.svc:9092");
    let p = pdb(&kc, &names).unwrap();
    assert_eq!(
        p.spec.unwrap().max_unavailable,
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(1))
    );
    let (_, role, binding) = broker_rbac(&kc, &names).unwrap();
    assert_eq!(role.rules.unwrap(), rbac::broker_rules());
    assert_eq!(binding.subjects.unwrap()[0].name, "prod-broker");
    let pvc = claim(&kc, &names).unwrap().unwrap();
    let ps = pvc.spec.unwrap();
    assert_eq!(ps.access_modes.unwrap(), ["ReadWriteMany"]);
    assert_eq!(ps.storage_class_name.as_deref(), Some("nfs"));
    assert!(
        pvc.metadata.owner_references.is_none(),
        "data outlives the cluster object"
    );
    let sts = statefulset(&kc, &names, &template_of(&kc)).unwrap();
    let vol = &sts.spec.template.spec.unwrap().volumes.unwrap()[0];
    assert_eq!(
        vol.persistent_volume_claim.as_ref().unwrap().claim_name,
        "prod-data"
    );
    let agent = volume_agent(&kc, &names, "img:1").unwrap();
    let aspec = agent.spec;
    assert_eq!(aspec.replicas, Some(1));
    assert_eq!(aspec.strategy.unwrap().type_.as_deref(), Some("Recreate"));
    let apod = aspec.template.spec.unwrap();
    assert_eq!(
        apod.volumes.unwrap()[0]
            .persistent_volume_claim
            .as_ref()
            .unwrap()
            .claim_name,
        "prod-data"
    );
    assert_eq!(
        apod.service_account_name.as_deref(),
        Some("prod-volume-agent")
    );
    // An existing claim: nothing to create.
    assert!(claim(&cluster(base()), &names).unwrap().is_none());
}

#[test]
fn the_network_policy_keeps_the_heartbeat_port_to_brokers() {
    let mut spec = base();
    spec["listener"] = json!({"port": 9093});
    let kc = cluster(spec);
    let names = Names::of(&kc).unwrap();
    let policy = network_policy(&kc, &names).unwrap();
    assert_eq!(
        policy.metadata.owner_references.unwrap()[0].kind,
        "KafkaCluster"
    );
    let spec = policy.spec.unwrap();
    let brokers = selector(&names, "broker");
    assert_eq!(spec.pod_selector.unwrap().match_labels.unwrap(), brokers);
    assert_eq!(spec.policy_types.unwrap(), ["Ingress"]);
    let port = |p: &k8s_openapi::api::networking::v1::NetworkPolicyPort| match &p.port {
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(n)) => *n,
        other => panic!("port {other:?}"),
    };
    let rules = spec.ingress.unwrap();
    // The Kafka port the listener names and the HTTP port, from anywhere.
    assert!(rules[0].from.is_none());
    let open: Vec<i32> = rules[0].ports.iter().flatten().map(port).collect();
    assert_eq!(open, [9093, HTTP_PORT]);
    // The heartbeat port from the cluster's brokers only.
    let from = rules[1].from.as_ref().unwrap();
    assert_eq!(from.len(), 1);
    assert_eq!(
        from[0]
            .pod_selector
            .as_ref()
            .unwrap()
            .match_labels
            .as_ref()
            .unwrap(),
        &brokers
    );
    let guarded: Vec<i32> = rules[1].ports.iter().flatten().map(port).collect();
    assert_eq!(guarded, [HEARTBEAT_PORT, INTERBROKER_PORT]);
    assert_eq!(rules.len(), 2, "no other ingress");
}

/// Named peers narrow the Kafka port to them; the HTTP port stays open and the pods' inputs
/// (so the brokers) are untouched.
#[test]
fn network_policy_peers_narrow_the_kafka_port_only() {
    let open = cluster(base());
    let mut spec = base();
    spec["listener"] = json!({"networkPolicyPeers": [
        {"namespaceSelector": {"matchLabels": {"team": "payments"}}},
        {"ipBlock": {"cidr": "10.20.0.0/16"}},
    ]});
    let narrowed = cluster(spec);
    let names = Names::of(&narrowed).unwrap();
    assert_eq!(
        inputs_hash(&open, &names).unwrap(),
        inputs_hash(&narrowed, &names).unwrap(),
        "peers restart no broker"
    );
    let rules = network_policy(&narrowed, &names)
        .unwrap()
        .spec
        .unwrap()
        .ingress
        .unwrap();
    let ports = |i: usize| -> Vec<String> {
        rules[i]
            .ports
            .iter()
            .flatten()
            .map(|p| format!("{:?}", p.port))
            .collect()
    };
    assert!(rules[0].from.is_none());
    assert_eq!(
        ports(0),
        [format!(
            "{:?}",
            Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(HTTP_PORT))
        )]
    );
    assert_eq!(rules.len(), 3);
    assert_eq!(
        ports(2),
        [format!(
            "{:?}",
            Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(9092))
        )]
    );
    let from = rules[2].from.as_ref().unwrap();
    assert_eq!(from.len(), 2);
    assert_eq!(
        from[1].ip_block.as_ref().map(|b| b.cidr.as_str()),
        Some("10.20.0.0/16")
    );
    assert!(from[0].namespace_selector.is_some());
}

/// `spec.authorization` turns the brokers' ACLs on; super users become Kafka principals.
#[test]
fn authorization_reaches_the_brokers() {
    let plain = cluster(base());
    let mut spec = base();
    spec["authorization"] =
        json!({"type": "simple", "superUsers": ["admin", "User:CN=ops,O=Example"]});
    let kc = cluster(spec);
    let e = env(&template_of(&kc));
    assert_eq!(e["KAAS_AUTHORIZER"], "standard");
    assert_eq!(e["KAAS_SUPER_USERS"], "User:admin;User:CN=ops,O=Example");
    assert!(!env(&template_of(&plain)).contains_key("KAAS_AUTHORIZER"));
    let names = Names::of(&kc).unwrap();
    assert_ne!(
        inputs_hash(&plain, &names).unwrap(),
        inputs_hash(&kc, &names).unwrap(),
        "turning ACLs on rolls the brokers"
    );
}

#[test]
fn an_external_listener_adds_its_port_and_addresses_and_only_its_port_rolls_brokers() {
    let with = |external: serde_json::Value| {
        let mut spec = base();
        spec["listener"] = json!({"external": external});
        cluster(spec)
    };
    let kc = with(json!({"type": "nodeport"}));
    let t = template_of(&kc);
    let e = env(&t);
    assert_eq!(e["KAAS_EXTERNAL_LISTEN"], "[::]:9093");
    assert_eq!(e["KAAS_EXTERNAL_ADDRESSES"], "/etc/kaas/external/addresses.json");
    let spec = t.spec.as_ref().unwrap();
    let ports = spec.containers[0].ports.as_ref().unwrap();
    assert!(ports.iter().any(|p| p.name.as_deref() == Some("external") && p.container_port == 9093));
    let volume = spec.volumes.as_ref().unwrap().iter().find(|v| v.name == "external-addresses").unwrap();
    let config_map = volume.config_map.as_ref().unwrap();
    assert_eq!((config_map.name.as_str(), config_map.optional), ("prod-external-addresses", Some(true)));

    let names = Names::of(&kc).unwrap();
    let hash = |kc: &KafkaCluster| inputs_hash(kc, &names).unwrap();
    let without = cluster(base());
    assert_ne!(hash(&kc), hash(&without), "adding the listener rolls the brokers");
    let other_services = with(json!({"type": "loadbalancer", "annotations": {"a": "b"}, "brokers": [{"broker": 0, "advertisedHost": "k0.example"}]}));
    assert_eq!(hash(&kc), hash(&other_services), "Services and addresses change no pod");
    assert_ne!(hash(&kc), hash(&with(json!({"type": "nodeport", "port": 9099}))), "the port is the pods'");
    // Clusters without one keep their hash (an operator upgrade restarts no broker).
    assert!(!serde_json::to_string(&without.spec.listener).unwrap().contains("external"));
}
