//! The objects a KafkaCluster wants, rendered purely from its spec (no API calls), so every
//! decision is unit-tested: names, the StatefulSet and its pod template, Services, RBAC,
//! disruption budget, the shared claim and the volume agent.
//!
//! Objects are written as JSON and parsed into their typed form, which checks every field name
//! against the Kubernetes API types at test time.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, PodTemplateSpec, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kaas_shared::crd::KafkaCluster;
use kaas_shared::crd::cluster::{
    Advertise, AuthenticationType, AuthorizationSpec, AuthorizationType, Bind, ExternalListener,
    ExternalListenerType, ListenerAuthentication, ListenerSpec, PodTemplateOverrides,
};
use kube::Resource;
use serde::Serialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::{Error, Result, external, rbac, validate, versions};

/// Where the shared volume is mounted in brokers and the volume agent.
pub const DATA_DIR: &str = "/data";
/// Heartbeat gRPC port (seed 003).
pub const HEARTBEAT_PORT: i32 = 9094;
/// The inter-broker Kafka listener: what brokers send each other (transaction markers and
/// verification), whatever the client listener's TLS and SASL.
pub const INTERBROKER_PORT: i32 = 9091;
/// Where the listener's certificate Secret is mounted in brokers.
pub const LISTENER_TLS_DIR: &str = "/etc/kaas/listener-tls";
/// Where the SCRAM credentials Secret is mounted in brokers.
pub const SASL_CREDENTIALS_DIR: &str = "/etc/kaas/sasl";
/// Where the OAuth key set Secret is mounted in brokers.
pub const OAUTH_JWKS_DIR: &str = "/etc/kaas/oauth-jwks";
/// Where the Secret with the CA of the OAuth key set endpoint is mounted in brokers.
pub const OAUTH_CA_DIR: &str = "/etc/kaas/oauth-ca";
/// Where brokers mount the clients CA (`<cluster>-clients-ca-cert`) they trust for client
/// certificates when the operator issues them.
pub const CLIENTS_CA_DIR: &str = "/etc/kaas/clients-ca";
/// Port of every kaas-operator process's `/healthz`, `/readyz` and `/metrics` (the manager's
/// and each volume agent's).
pub const OPERATOR_HTTP_PORT: u16 = 9096;

/// HTTP port of `/healthz`, `/readyz` and `/metrics`.
pub const HTTP_PORT: i32 = 9095;
/// Pod-template annotation carrying the hash of everything that shapes a broker pod.
pub const INPUTS_HASH_ANNOTATION: &str = "kaas.dev/pod-inputs-hash";
/// Label keys.
pub const LABEL_NAME: &str = "app.kubernetes.io/name";
/// Label keys.
pub const LABEL_INSTANCE: &str = "app.kubernetes.io/instance";
/// Label keys.
pub const LABEL_COMPONENT: &str = "app.kubernetes.io/component";
/// Label keys.
pub const LABEL_MANAGED_BY: &str = "app.kubernetes.io/managed-by";

/// Names of everything one cluster owns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Names {
    /// The KafkaCluster's name; also the StatefulSet's (pods are `<cluster>-<ordinal>`).
    pub cluster: String,
    /// Namespace.
    pub namespace: String,
}

impl Names {
    /// Names for a cluster object.
    pub fn of(kc: &KafkaCluster) -> Result<Names> {
        Ok(Names {
            cluster: kc
                .metadata
                .name
                .clone()
                .ok_or(Error::MissingField("metadata.name"))?,
            namespace: kc
                .metadata
                .namespace
                .clone()
                .ok_or(Error::MissingField("metadata.namespace"))?,
        })
    }
    /// Headless Service (stable pod DNS, EndpointSlices the controller watches).
    pub fn headless(&self) -> String {
        format!("{}-brokers", self.cluster)
    }
    /// Client bootstrap Service.
    pub fn bootstrap(&self) -> String {
        format!("{}-bootstrap", self.cluster)
    }
    /// Brokers' ServiceAccount, Role and RoleBinding.
    pub fn broker_sa(&self) -> String {
        format!("{}-broker", self.cluster)
    }
    /// Volume agent's Deployment, ServiceAccount, Role and RoleBinding.
    pub fn agent(&self) -> String {
        format!("{}-volume-agent", self.cluster)
    }
    /// The claim the operator creates when the spec gives a size.
    pub fn owned_claim(&self) -> String {
        format!("{}-data", self.cluster)
    }
}

/// The labels selecting one component of one cluster.
pub fn selector(names: &Names, component: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (LABEL_NAME.to_owned(), "kaas".to_owned()),
        (LABEL_INSTANCE.to_owned(), names.cluster.clone()),
        (LABEL_COMPONENT.to_owned(), component.to_owned()),
    ])
}

/// [`selector`] as a label selector string (`k=v,...`), as list calls and the scale
/// subresource take it.
pub fn selector_string(names: &Names, component: &str) -> String {
    selector(names, component)
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

fn labels(names: &Names, component: &str) -> BTreeMap<String, String> {
    let mut l = selector(names, component);
    l.insert(LABEL_MANAGED_BY.to_owned(), crate::FIELD_MANAGER.to_owned());
    l
}

/// The claim brokers mount: the existing one, or the one the operator creates.
pub fn claim_name(kc: &KafkaCluster, names: &Names) -> String {
    kc.spec
        .storage
        .existing_claim
        .clone()
        .unwrap_or_else(|| names.owned_claim())
}

fn parse<T: serde::de::DeserializeOwned>(what: &'static str, v: Value) -> Result<T> {
    serde_json::from_value(v).map_err(|source| Error::Serialize { what, source })
}

fn to_json<T: Serialize>(what: &'static str, value: &T) -> Result<Value> {
    serde_json::to_value(value).map_err(|source| Error::Serialize { what, source })
}

pub(crate) fn meta(kc: &KafkaCluster, names: &Names, name: &str, component: &str) -> Value {
    json!({
        "name": name,
        "namespace": names.namespace,
        "labels": labels(names, component),
        "ownerReferences": kc.controller_owner_ref(&()).into_iter().collect::<Vec<_>>(),
    })
}

/// Everything that shapes a broker pod. Its hash is in the pod template; a newer operator that
/// renders the same inputs differently keeps the live template (see [`choose_template`]), so an
/// operator upgrade alone never restarts brokers.
#[derive(Debug, Serialize)]
struct PodInputs<'a> {
    image: String,
    version: &'a str,
    listener: &'a kaas_shared::crd::cluster::ListenerSpec,
    config: &'a BTreeMap<String, String>,
    resources: &'a Option<k8s_openapi::api::core::v1::ResourceRequirements>,
    pod_template: &'a Option<kaas_shared::crd::cluster::PodTemplateOverrides>,
    timeouts: &'a kaas_shared::crd::cluster::TimeoutsSpec,
    claim: String,
    // NB: left out when unset, so that the hash of clusters made before the field is unchanged.
    #[serde(skip_serializing_if = "Option::is_none")]
    authorization: &'a Option<kaas_shared::crd::cluster::AuthorizationSpec>,
}

/// The hash of a cluster's pod inputs (hex SHA-256, 16 characters).
pub fn inputs_hash(kc: &KafkaCluster, names: &Names) -> Result<String> {
    // NB: who may reach the Kafka port is the NetworkPolicy's business, not the pods'; of the
    // external listener, pods see only its port (its Services and addresses change no pod).
    let listener = kaas_shared::crd::cluster::ListenerSpec {
        network_policy_peers: Vec::new(),
        external: kc.spec.listener.external.as_ref().map(|e| ExternalListener {
            kind: ExternalListenerType::Nodeport,
            class: None,
            port: e.port,
            bootstrap: None,
            brokers: Vec::new(),
            annotations: BTreeMap::new(),
        }),
        ..kc.spec.listener.clone()
    };
    let inputs = PodInputs {
        image: versions::broker_image(&kc.spec.version, kc.spec.image.as_deref()),
        version: &kc.spec.version,
        listener: &listener,
        config: &kc.spec.config,
        resources: &kc.spec.resources,
        pod_template: &kc.spec.pod_template,
        timeouts: &kc.spec.timeouts,
        claim: claim_name(kc, names),
        authorization: &kc.spec.authorization,
    };
    let bytes = serde_json::to_vec(&inputs).map_err(|source| Error::Serialize {
        what: "pod inputs",
        source,
    })?;
    let digest = Sha256::digest(&bytes);
    Ok(digest.iter().take(8).map(|b| format!("{b:02x}")).collect())
}

/// Pod-level settings of the *restricted* Pod Security level, which every pod the operator makes
/// starts from (a KafkaCluster's `podTemplate.securityContext` merges over them).
pub fn restricted_pod_security() -> Value {
    json!({"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}})
}

/// Container-level settings of the *restricted* Pod Security level, plus a read-only root: the
/// binaries write only their volume (and stdout).
pub fn restricted_container_security() -> Value {
    json!({
        "allowPrivilegeEscalation": false,
        "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": true,
    })
}

/// `defaults` with every field `overrides` sets replaced by the override's (a whole field: an
/// override's `capabilities` replaces the default's, it is not merged into it).
fn merged<T: Serialize>(
    what: &'static str,
    defaults: Value,
    overrides: Option<&T>,
) -> Result<Value> {
    let mut out = defaults;
    let Some(overrides) = overrides else {
        return Ok(out);
    };
    let overrides = to_json(what, overrides)?;
    if let (Value::Object(out), Value::Object(overrides)) = (&mut out, overrides) {
        out.extend(overrides.into_iter().filter(|(_, v)| !v.is_null()));
    }
    Ok(out)
}

/// The broker pods' security context: [`restricted_pod_security`] with the spec's overrides.
/// The volume agent runs with it too: it writes the same volume, so it needs the same user and
/// groups (an NFS export owned by another uid).
pub fn broker_pod_security(kc: &KafkaCluster) -> Result<Value> {
    let overrides = kc.spec.pod_template.as_ref();
    merged(
        "securityContext",
        restricted_pod_security(),
        overrides.and_then(|o| o.security_context.as_ref()),
    )
}

/// The ServiceAccount broker pods run as: the spec's, or `<cluster>-broker`.
pub fn broker_service_account(kc: &KafkaCluster, names: &Names) -> String {
    kc.spec
        .pod_template
        .as_ref()
        .and_then(|o| o.service_account_name.clone())
        .unwrap_or_else(|| names.broker_sa())
}

/// Seconds a broker gets between SIGTERM and SIGKILL: enough for the controller to notice the
/// drain flag on the next heartbeat, move the broker's partitions while it is healthy, and for
/// the broker to relinquish the rest (persist manifests and snapshots) — a session timeout
/// twice over plus a margin.
pub fn termination_grace_seconds(kc: &KafkaCluster) -> i64 {
    (2 * kc.spec.timeouts.session_timeout_ms / 1000 + 30).max(60)
}

/// The brokers' termination grace period: the spec's `podTemplate.terminationGracePeriodSeconds`,
/// or [`termination_grace_seconds`].
pub fn broker_grace_seconds(kc: &KafkaCluster) -> i64 {
    kc.spec
        .pod_template
        .as_ref()
        .and_then(|o| o.termination_grace_period_seconds)
        .unwrap_or_else(|| termination_grace_seconds(kc))
}

/// The broker pod template.
pub fn broker_pod_template(kc: &KafkaCluster, names: &Names) -> Result<PodTemplateSpec> {
    let spec = &kc.spec;
    let port = spec.listener.port;
    // `[::]` is every IPv4 and IPv6 address (Linux sockets are dual-stack by default): the pod
    // IP, and localhost, which `kubectl port-forward` dials. The broker advertises KAAS_ADVERTISE,
    // never the wildcard.
    let bind = match spec.listener.bind {
        Bind::All => "[::]",
        Bind::PodIp => "$(MY_POD_IP)",
    };
    let advertise = match spec.listener.advertise {
        Advertise::PodIp => format!("$(MY_POD_IP):{port}"),
        Advertise::PodDns => format!(
            "$(MY_POD_NAME).{}.{}.svc:{port}",
            names.headless(),
            names.namespace
        ),
    };
    let mut env = vec![
        json!({"name": "MY_POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}),
        json!({"name": "MY_POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}),
        json!({"name": "MY_POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}),
        json!({"name": "KAAS_CLUSTER_NAME", "value": names.cluster}),
        // One controller Lease per cluster, so two clusters can share a namespace.
        json!({"name": "KAAS_LEASE_NAME", "value": format!("{}-controller", names.cluster)}),
        json!({"name": "KAAS_HEADLESS_SERVICE", "value": names.headless()}),
        json!({"name": "KAAS_DATA_DIR", "value": DATA_DIR}),
        // An IPv6 pod IP comes out unbracketed (`fd00::5:9092`): the kubelet substitutes the
        // bare address. The binaries read that as address and port
        // (kaas_shared::listen_address), and the broker's advertised host likewise.
        json!({"name": "KAAS_LISTEN", "value": format!("{bind}:{port}")}),
        json!({"name": "KAAS_ADVERTISE", "value": advertise}),
        // Only peers dial the heartbeat, at the address it is bound to: the pod IP.
        json!({"name": "KAAS_HEARTBEAT_LISTEN", "value": format!("$(MY_POD_IP):{HEARTBEAT_PORT}")}),
        // Likewise the inter-broker listener.
        json!({"name": "KAAS_INTERBROKER_LISTEN", "value": format!("$(MY_POD_IP):{INTERBROKER_PORT}")}),
        json!({"name": "KAAS_HTTP_LISTEN", "value": format!("{bind}:{HTTP_PORT}")}),
        json!({"name": "KAAS_FENCE_TIMEOUT_MS", "value": spec.timeouts.fence_timeout_ms.to_string()}),
        json!({"name": "KAAS_SESSION_TIMEOUT_MS", "value": spec.timeouts.session_timeout_ms.to_string()}),
    ];
    if let Some(external) = &spec.listener.external {
        env.push(json!({"name": "KAAS_EXTERNAL_LISTEN", "value": format!("{bind}:{}", external.port)}));
        env.push(json!({"name": "KAAS_EXTERNAL_ADDRESSES", "value": format!("{}/{}", external::ADDRESSES_DIR, kaas_shared::external_addresses::FILE_NAME)}));
    }
    let (security_env, security_volumes) = listener_security(&spec.listener, names);
    env.extend(security_env);
    if let Some(authorization) = &spec.authorization {
        env.extend(authorization_env(authorization));
    }
    // Each key becomes its flag's variable; a key without one is refused by validation, and a
    // refused spec is not rolled out (it is never passed on to be silently ignored).
    env.extend(spec.config.iter().filter_map(|(k, v)| {
        validate::broker_env_name(k).map(|name| json!({"name": name, "value": v}))
    }));
    let overrides = spec.pod_template.clone().unwrap_or_default();
    // The user's variables come after the operator's, so they can refer to them (`$(MY_POD_IP)`);
    // a name the operator sets is refused (CRD rule, and `validate::pod_env` for objects stored
    // before it) and never rendered, so the operator's value always holds.
    for var in overrides
        .env
        .iter()
        .filter(|v| !validate::is_operator_env(&v.name))
    {
        env.push(to_json("env", var)?);
    }
    let mut pod_labels = overrides.labels.clone();
    pod_labels.extend(labels(names, "broker")); // selector labels win
    let hash = inputs_hash(kc, names)?;
    let mut annotations = overrides.annotations.clone();
    annotations.insert(INPUTS_HASH_ANNOTATION.to_owned(), hash);
    let mut mounts = vec![json!({"name": "data", "mountPath": DATA_DIR})];
    let mut volumes = vec![
        json!({"name": "data", "persistentVolumeClaim": {"claimName": claim_name(kc, names)}}),
    ];
    for (name, secret, dir) in security_volumes {
        mounts.push(json!({"name": name, "mountPath": dir, "readOnly": true}));
        volumes.push(json!({"name": name, "secret": {"secretName": secret}}));
    }
    let mut ports = vec![
        json!({"name": "kafka", "containerPort": port}),
        json!({"name": "heartbeat", "containerPort": HEARTBEAT_PORT}),
        json!({"name": "interbroker", "containerPort": INTERBROKER_PORT}),
        json!({"name": "http", "containerPort": HTTP_PORT}),
    ];
    if let Some(external) = &spec.listener.external {
        ports.push(json!({"name": "external", "containerPort": external.port}));
        mounts.push(json!({"name": "external-addresses", "mountPath": external::ADDRESSES_DIR, "readOnly": true}));
        // NB: optional, so a pod never waits for it; the operator writes it before the
        // StatefulSet, and brokers read it again as the kubelet refreshes it.
        volumes.push(json!({"name": "external-addresses", "configMap": {"name": external::addresses_config_map_name(names), "optional": true}}));
    }
    let probe = |path: &str, period: i32, failures: i32| json!({"httpGet": {"path": path, "port": "http"}, "periodSeconds": period, "failureThreshold": failures});
    let mut container = json!({
        "name": "kaas",
        "image": versions::broker_image(&spec.version, spec.image.as_deref()),
        "env": env,
        "ports": ports,
        "volumeMounts": mounts,
        // Startup covers recovery of torn segment tails; readiness is the broker's own "settled"
        // answer (assignment applied, partitions led), which paces rolling restarts.
        "startupProbe": probe("/healthz", 2, 150),
        "readinessProbe": probe("/readyz", 2, 3),
        "livenessProbe": probe("/healthz", 10, 6),
    });
    container["securityContext"] = merged(
        "containerSecurityContext",
        restricted_container_security(),
        overrides.container_security_context.as_ref(),
    )?;
    if let Some(resources) = &spec.resources {
        container["resources"] = to_json("resources", resources)?;
    }
    let mut pod_spec = json!({
        "serviceAccountName": broker_service_account(kc, names),
        "terminationGracePeriodSeconds": broker_grace_seconds(kc),
        "securityContext": broker_pod_security(kc)?,
        "containers": [container],
        "volumes": volumes,
    });
    if !overrides.node_selector.is_empty() {
        pod_spec["nodeSelector"] = json!(overrides.node_selector);
    }
    if let Some(affinity) = &overrides.affinity {
        pod_spec["affinity"] = to_json("affinity", affinity)?;
    }
    if !overrides.tolerations.is_empty() {
        pod_spec["tolerations"] = to_json("tolerations", &overrides.tolerations)?;
    }
    pod_overrides(&mut pod_spec, &overrides)?;
    parse(
        "pod template",
        json!({"metadata": {"labels": pod_labels, "annotations": annotations}, "spec": pod_spec}),
    )
}

/// Whether the operator keeps a clients CA for the listener: client certificates
/// (`authentication.type: tls`) on the operator's TLS (`tls: {}`, no Secret named).
pub fn issues_clients_ca(listener: &ListenerSpec) -> bool {
    listener.tls.as_ref().is_some_and(|t| t.secret_name.is_none())
        && listener
            .authentication
            .as_ref()
            .is_some_and(|a| a.kind == AuthenticationType::Tls)
}

/// The broker variables of the listener's TLS and authentication, and the Secrets they need
/// mounted (volume name, Secret, directory).
fn listener_security(
    listener: &ListenerSpec,
    names: &Names,
) -> (Vec<Value>, Vec<(&'static str, String, &'static str)>) {
    let mut env = Vec::new();
    let mut volumes = Vec::new();
    if let Some(tls) = &listener.tls {
        env.push(
            json!({"name": "KAAS_SSL_CERTIFICATE", "value": format!("{LISTENER_TLS_DIR}/tls.crt")}),
        );
        env.push(json!({"name": "KAAS_SSL_KEY", "value": format!("{LISTENER_TLS_DIR}/tls.key")}));
        let secret = tls
            .secret_name
            .clone()
            .unwrap_or_else(|| crate::certificates::listener_secret_name(names));
        volumes.push(("listener-tls", secret, LISTENER_TLS_DIR));
    }
    let sasl_on = match &listener.authentication {
        None => false,
        Some(authentication) => match authentication.kind {
            AuthenticationType::Tls if issues_clients_ca(listener) => {
                // The operator's clients CA, which signs KafkaUsers' certificates.
                let secret = crate::certificates::Ca::Clients.cert_secret_name(names);
                volumes.push(("clients-ca", secret, CLIENTS_CA_DIR));
                env.push(json!({"name": "KAAS_SSL_TRUSTSTORE", "value": format!("{CLIENTS_CA_DIR}/ca.crt")}));
                env.push(json!({"name": "KAAS_SSL_CLIENT_AUTH", "value": "required"}));
                false
            }
            AuthenticationType::Tls => {
                env.push(json!({"name": "KAAS_SSL_TRUSTSTORE", "value": format!("{LISTENER_TLS_DIR}/ca.crt")}));
                env.push(json!({"name": "KAAS_SSL_CLIENT_AUTH", "value": "required"}));
                false
            }
            AuthenticationType::ScramSha512 => {
                scram_env("SCRAM-SHA-512", authentication, &mut env, &mut volumes);
                true
            }
            AuthenticationType::ScramSha256 => {
                scram_env("SCRAM-SHA-256", authentication, &mut env, &mut volumes);
                true
            }
            AuthenticationType::OAuth => {
                oauth_env(authentication, &mut env, &mut volumes);
                true
            }
        },
    };
    let protocol = match (listener.tls.is_some(), sasl_on) {
        (false, false) => "PLAINTEXT",
        (true, false) => "SSL",
        (false, true) => "SASL_PLAINTEXT",
        (true, true) => "SASL_SSL",
    };
    if protocol != "PLAINTEXT" {
        env.push(json!({"name": "KAAS_SECURITY_PROTOCOL", "value": protocol}));
    }
    (env, volumes)
}

/// The broker variables of SCRAM `mechanism`, and the Secret they need mounted: the users of
/// the cluster's KafkaUsers (which brokers read from the volume, `kafka-users.json`), and those
/// of `authentication.secretName`'s `users.json` when it is set.
fn scram_env(
    mechanism: &str,
    authentication: &ListenerAuthentication,
    env: &mut Vec<Value>,
    volumes: &mut Vec<(&'static str, String, &'static str)>,
) {
    env.push(json!({"name": "KAAS_SASL_ENABLED_MECHANISMS", "value": mechanism}));
    if let Some(secret) = &authentication.secret_name {
        env.push(json!({"name": "KAAS_SASL_CREDENTIALS", "value": format!("{SASL_CREDENTIALS_DIR}/users.json")}));
        volumes.push(("sasl-credentials", secret.clone(), SASL_CREDENTIALS_DIR));
    }
}

/// The broker variables of `authentication.type: oauth` (Kafka's `sasl.oauthbearer.*`), and the
/// Secrets they need mounted.
fn oauth_env(
    oauth: &ListenerAuthentication,
    env: &mut Vec<Value>,
    volumes: &mut Vec<(&'static str, String, &'static str)>,
) {
    let mut set = |name: &str, value: String| env.push(json!({"name": name, "value": value}));
    set("KAAS_SASL_ENABLED_MECHANISMS", "OAUTHBEARER".into());
    // NB: the CRD requires one of the two key sets; an object stored without is refused by
    // validation before it is rendered.
    if let Some(uri) = &oauth.jwks_endpoint_uri {
        set("KAAS_SASL_OAUTHBEARER_JWKS", uri.clone());
    }
    if let Some(secret) = &oauth.jwks_secret {
        set("KAAS_SASL_OAUTHBEARER_JWKS", format!("{OAUTH_JWKS_DIR}/{}", secret.key));
        volumes.push(("oauth-jwks", secret.secret_name.clone(), OAUTH_JWKS_DIR));
    }
    if let Some(seconds) = oauth.jwks_refresh_seconds {
        set("KAAS_SASL_OAUTHBEARER_JWKS_ENDPOINT_REFRESH_MS", (i64::from(seconds) * 1000).to_string());
    }
    if let Some(ca) = oauth.tls_trusted_certificates.first() {
        set("KAAS_SASL_OAUTHBEARER_JWKS_ENDPOINT_CA", format!("{OAUTH_CA_DIR}/{}", ca.certificate));
        volumes.push(("oauth-ca", ca.secret_name.clone(), OAUTH_CA_DIR));
    }
    if let Some(issuer) = &oauth.valid_issuer_uri {
        set("KAAS_SASL_OAUTHBEARER_EXPECTED_ISSUER", issuer.clone());
    }
    if let (Some(true), Some(client_id)) = (oauth.check_audience, &oauth.client_id) {
        set("KAAS_SASL_OAUTHBEARER_EXPECTED_AUDIENCE", client_id.clone());
    }
    if let Some(claim) = &oauth.user_name_claim {
        set("KAAS_SASL_OAUTHBEARER_SUB_CLAIM_NAME", claim.clone());
    }
}

/// The broker variables of `spec.authorization`.
fn authorization_env(authorization: &AuthorizationSpec) -> Vec<Value> {
    let AuthorizationType::Simple = authorization.kind;
    // Kafka's `super.users` names principals; Strimzi's superUsers names users.
    let super_users: Vec<String> = authorization
        .super_users
        .iter()
        .map(|u| match u.starts_with("User:") {
            true => u.clone(),
            false => format!("User:{u}"),
        })
        .collect();
    vec![
        json!({"name": "KAAS_AUTHORIZER", "value": "standard"}),
        json!({"name": "KAAS_SUPER_USERS", "value": super_users.join(";")}),
    ]
}

/// The pod-level overrides that are copied as they are.
fn pod_overrides(pod_spec: &mut Value, overrides: &PodTemplateOverrides) -> Result<()> {
    if !overrides.topology_spread_constraints.is_empty() {
        pod_spec["topologySpreadConstraints"] = to_json(
            "topologySpreadConstraints",
            &overrides.topology_spread_constraints,
        )?;
    }
    if let Some(class) = &overrides.priority_class_name {
        pod_spec["priorityClassName"] = json!(class);
    }
    if !overrides.image_pull_secrets.is_empty() {
        pod_spec["imagePullSecrets"] = to_json("imagePullSecrets", &overrides.image_pull_secrets)?;
    }
    Ok(())
}

/// Keeps the live pod template when it was rendered from the same inputs (same hash), so that
/// an operator upgrade that renders differently does not restart brokers; otherwise the new
/// rendering goes out and the StatefulSet rolls.
pub fn choose_template(desired: PodTemplateSpec, live: Option<&StatefulSet>) -> PodTemplateSpec {
    let hash_of = |t: &PodTemplateSpec| {
        t.metadata
            .as_ref()
            .and_then(|m| m.annotations.as_ref())
            .and_then(|a| a.get(INPUTS_HASH_ANNOTATION).cloned())
    };
    match live.map(|s| &s.spec.template) {
        Some(live) if hash_of(live).is_some() && hash_of(live) == hash_of(&desired) => live.clone(),
        _ => desired,
    }
}

/// The broker StatefulSet (with `template` from [`choose_template`]).
pub fn statefulset(
    kc: &KafkaCluster,
    names: &Names,
    template: &PodTemplateSpec,
) -> Result<StatefulSet> {
    parse(
        "statefulset",
        json!({
            "apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": meta(kc, names, &names.cluster, "broker"),
            "spec": {
                "replicas": kc.spec.replicas,
                "serviceName": names.headless(),
                "selector": {"matchLabels": selector(names, "broker")},
                // Brokers do not need each other to start (no quorum), so start them together;
                // updates still go one pod at a time, each waiting for the previous to be Ready
                // (the broker's /readyz), and minReadySeconds lets the assignment settle.
                "podManagementPolicy": "Parallel",
                "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
                "minReadySeconds": 5,
                "template": template,
            }
        }),
    )
}

/// The headless Service: stable pod DNS and the EndpointSlices the controller reads.
pub fn headless_service(kc: &KafkaCluster, names: &Names) -> Result<Service> {
    parse(
        "headless service",
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": meta(kc, names, &names.headless(), "broker"),
            "spec": {
                "clusterIP": "None",
                // Brokers find each other before they are Ready.
                "publishNotReadyAddresses": true,
                "selector": selector(names, "broker"),
                "ports": [
                    {"name": "kafka", "port": kc.spec.listener.port, "targetPort": "kafka"},
                    {"name": "heartbeat", "port": HEARTBEAT_PORT, "targetPort": "heartbeat"},
                ],
            }
        }),
    )
}

/// The bootstrap Service for clients.
pub fn bootstrap_service(kc: &KafkaCluster, names: &Names) -> Result<Service> {
    parse(
        "bootstrap service",
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": meta(kc, names, &names.bootstrap(), "broker"),
            "spec": {
                "type": "ClusterIP",
                "selector": selector(names, "broker"),
                "ports": [{"name": "kafka", "port": kc.spec.listener.port, "targetPort": "kafka"}],
            }
        }),
    )
}

/// `host:port` clients bootstrap from.
pub fn bootstrap_servers(kc: &KafkaCluster, names: &Names) -> String {
    format!(
        "{}.{}.svc:{}",
        names.bootstrap(),
        names.namespace,
        kc.spec.listener.port
    )
}

/// A ServiceAccount.
pub fn service_account(
    kc: &KafkaCluster,
    names: &Names,
    name: &str,
    component: &str,
) -> Result<ServiceAccount> {
    parse(
        "service account",
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta(kc, names, name, component)}),
    )
}

/// A Role with `rules` and its binding to the ServiceAccount `subject`.
pub fn role_and_binding(
    kc: &KafkaCluster,
    names: &Names,
    (name, subject): (&str, &str),
    component: &str,
    rules: Vec<k8s_openapi::api::rbac::v1::PolicyRule>,
) -> Result<(Role, RoleBinding)> {
    let role = parse(
        "role",
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta(kc, names, name, component), "rules": rules}),
    )?;
    let binding = parse(
        "role binding",
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": meta(kc, names, name, component),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": subject, "namespace": names.namespace}],
        }),
    )?;
    Ok((role, binding))
}

/// Brokers' Role: [`rbac::broker_rules`], bound to the ServiceAccount the broker pods run as
/// (`<cluster>-broker`, which is always made, or the spec's own).
pub fn broker_rbac(
    kc: &KafkaCluster,
    names: &Names,
) -> Result<(ServiceAccount, Role, RoleBinding)> {
    let sa = service_account(kc, names, &names.broker_sa(), "broker")?;
    let (role, binding) = role_and_binding(
        kc,
        names,
        (&names.broker_sa(), &broker_service_account(kc, names)),
        "broker",
        rbac::broker_rules(),
    )?;
    Ok((sa, role, binding))
}

/// The disruption budget: voluntary evictions take one broker at a time.
pub fn pdb(kc: &KafkaCluster, names: &Names) -> Result<PodDisruptionBudget> {
    parse(
        "pod disruption budget",
        json!({
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": meta(kc, names, &names.cluster, "broker"),
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": selector(names, "broker")}},
        }),
    )
}

/// The brokers' ingress, where the network enforces NetworkPolicies: the Kafka port from
/// `listener.networkPolicyPeers` (anywhere when it names none), the HTTP port from anywhere
/// (kubelet probes, Prometheus), the heartbeat and inter-broker ports from the cluster's own
/// brokers only (what they carry also proves its broker:
/// docs/security.md), nothing else.
pub fn network_policy(kc: &KafkaCluster, names: &Names) -> Result<NetworkPolicy> {
    let brokers = json!({"matchLabels": selector(names, "broker")});
    let mut kafka = vec![json!({"protocol": "TCP", "port": kc.spec.listener.port})];
    if let Some(external) = &kc.spec.listener.external {
        kafka.push(json!({"protocol": "TCP", "port": external.port}));
    }
    let http = json!({"protocol": "TCP", "port": HTTP_PORT});
    let peers = &kc.spec.listener.network_policy_peers;
    let mut ingress = vec![
        // NB: the first rule keeps its shape when no peers are named (the Kafka ports open too).
        match peers.is_empty() {
            true => json!({"ports": kafka.iter().chain([&http]).collect::<Vec<_>>()}),
            false => json!({"ports": [http]}),
        },
        json!({
            "from": [{"podSelector": brokers}],
            "ports": [
                {"protocol": "TCP", "port": HEARTBEAT_PORT},
                {"protocol": "TCP", "port": INTERBROKER_PORT},
            ],
        }),
    ];
    if !peers.is_empty() {
        ingress.push(
            json!({"from": to_json("listener.networkPolicyPeers", peers)?, "ports": kafka}),
        );
    }
    parse(
        "network policy",
        json!({
            "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": meta(kc, names, &names.cluster, "broker"),
            "spec": {"podSelector": brokers, "policyTypes": ["Ingress"], "ingress": ingress},
        }),
    )
}

/// The ReadWriteMany claim, when the spec asks the operator for one.
///
/// NB: not owned by the KafkaCluster: deleting the cluster object must not delete the data.
pub fn claim(kc: &KafkaCluster, names: &Names) -> Result<Option<PersistentVolumeClaim>> {
    let storage = &kc.spec.storage;
    let Some(size) = &storage.size else {
        return Ok(None);
    };
    if storage.existing_claim.is_some() {
        return Ok(None);
    }
    let mut spec =
        json!({"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": size}}});
    if let Some(class) = &storage.storage_class_name {
        spec["storageClassName"] = json!(class);
    }
    parse(
        "claim",
        json!({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": names.owned_claim(), "namespace": names.namespace, "labels": labels(names, "data")},
            "spec": spec,
        }),
    )
    .map(Some)
}

/// The cluster's PodMonitor (where the Prometheus Operator is installed): its brokers'
/// `/metrics` on port `http`, owned by the KafkaCluster. The shape is
/// [`crate::crdgen::pod_monitor`]'s, like the cluster-wide ones in `config/prometheus`.
pub fn broker_pod_monitor(kc: &KafkaCluster, names: &Names) -> Value {
    crate::crdgen::pod_monitor(
        meta(kc, names, &names.headless(), "broker"),
        json!(selector(names, "broker")),
        "http",
    )
}

/// The volume agent: one replica of the operator's image that mounts the cluster's claim and
/// reconciles its topics. `Recreate`, so a rollout does not start a second agent; and the
/// agent's Lease fences any second one that runs anyway (a pod on a partitioned node whose
/// replacement started): only the holder writes the volume (see `leader`). It runs with the
/// brokers' pod security context ([`broker_pod_security`]).
pub fn volume_agent(kc: &KafkaCluster, names: &Names, image: &str) -> Result<Deployment> {
    let mut container = crate::crdgen::operator_container(
        "agent",
        image,
        "volume-agent",
        vec![
            json!({"name": "KAAS_NAMESPACE", "value": names.namespace}),
            json!({"name": "KAAS_CLUSTER", "value": names.cluster}),
            json!({"name": "KAAS_DATA_DIR", "value": DATA_DIR}),
        ],
    );
    container["volumeMounts"] = json!([{"name": "data", "mountPath": DATA_DIR}]);
    parse(
        "volume agent",
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": meta(kc, names, &names.agent(), "volume-agent"),
            "spec": {
                "replicas": 1,
                "strategy": {"type": "Recreate"},
                "selector": {"matchLabels": selector(names, "volume-agent")},
                "template": {
                    "metadata": {"labels": labels(names, "volume-agent")},
                    "spec": {
                        "serviceAccountName": names.agent(),
                        "securityContext": broker_pod_security(kc)?,
                        "containers": [container],
                        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim_name(kc, names)}}],
                    }
                }
            }
        }),
    )
}

/// The volume agent's ServiceAccount, Role and RoleBinding.
pub fn agent_rbac(kc: &KafkaCluster, names: &Names) -> Result<(ServiceAccount, Role, RoleBinding)> {
    let sa = service_account(kc, names, &names.agent(), "volume-agent")?;
    let (role, binding) = role_and_binding(
        kc,
        names,
        (&names.agent(), &names.agent()),
        "volume-agent",
        rbac::volume_agent_rules(),
    )?;
    Ok((sa, role, binding))
}

#[cfg(test)]
pub(crate) mod tests;
