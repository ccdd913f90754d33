//! Everything generated from the Rust types and tables, in one place: the CRDs (`crds/`), the
//! operator's RBAC, Deployment and samples (`config/`), and the OLM bundle. `crdgen write`
//! writes the checked-in files; `tests/generated.rs` fails when they drift.

use std::path::PathBuf;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, ValidationRule,
};
use kaas_shared::crd::{KafkaCluster, KafkaClusterAssignments, KafkaTopic, KafkaUser};
use kube::CustomResourceExt;
use serde_json::{Value, json};

use crate::{rbac, resources, versions};

/// Namespace the plain (`config/`) install runs the operator in.
pub const OPERATOR_NAMESPACE: &str = "kaas-system";
/// The operator's ServiceAccount, ClusterRole and Deployment name.
pub const OPERATOR_NAME: &str = "kaas-operator";

/// The four CRDs with their file names.
pub fn crds() -> Vec<(&'static str, CustomResourceDefinition)> {
    vec![
        (
            "kaas.dev_kafkaclusters.yaml",
            with_config_keys_rule(KafkaCluster::crd()),
        ),
        ("kaas.dev_kafkatopics.yaml", KafkaTopic::crd()),
        (
            "kaas.dev_kafkaclusterassignments.yaml",
            KafkaClusterAssignments::crd(),
        ),
        ("kaas.dev_kafkausers.yaml", KafkaUser::crd()),
    ]
}

/// At most this many `config` keys (bounds the CEL rule's cost; kaas has fewer settings).
const MAX_CONFIG_KEYS: i64 = 64;

/// Adds to KafkaCluster's `spec.config` a CEL rule that refuses, at admission and with a
/// message, keys that are not broker settings kaas takes
/// ([`kaas_shared::broker_settings::SETTINGS`], the table the operator renders from). Values
/// are checked by the operator (`validate::broker_configs`, reported as `InvalidConfig`).
fn with_config_keys_rule(mut crd: CustomResourceDefinition) -> CustomResourceDefinition {
    let keys = kaas_shared::broker_settings::SETTINGS
        .iter()
        .map(|s| format!("'{}'", s.key))
        .collect::<Vec<_>>()
        .join(", ");
    let config = crd
        .spec
        .versions
        .iter_mut()
        .filter_map(|v| v.schema.as_mut()?.open_api_v3_schema.as_mut())
        .filter_map(|schema| schema.properties.as_mut()?.get_mut("spec"))
        .filter_map(|spec| spec.properties.as_mut()?.get_mut("config"));
    for config in config {
        config.max_properties = Some(MAX_CONFIG_KEYS);
        config.x_kubernetes_validations = Some(vec![ValidationRule {
            rule: format!("self.all(k, k in [{keys}])"),
            // NB: a messageExpression naming the keys is refused by the API server's cost
            // estimate (map keys have no length bound); the operator's InvalidConfig condition
            // names each key for objects stored before this rule.
            message: Some(
                "config has keys kaas does not take: only broker settings by Kafka's names are accepted (docs/operator.md lists them)".into(),
            ),
            ..ValidationRule::default()
        }]);
    }
    crd
}

fn yaml<T: serde::Serialize>(value: &T) -> String {
    // Serialising plain data to YAML cannot fail.
    serde_yaml::to_string(value).unwrap_or_default()
}

/// The operator's ClusterRole.
pub fn cluster_role() -> Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": OPERATOR_NAME},
        "rules": rbac::operator_rules(),
    })
}

/// The probes of every kaas-operator process (manager and volume agent), on the port of its
/// `/healthz`, `/readyz` and `/metrics`.
pub fn probes() -> Value {
    let port = resources::OPERATOR_HTTP_PORT;
    json!({
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": port}, "periodSeconds": 10, "failureThreshold": 3},
        // Ready once the API server answered this replica (a standby is ready too: it is
        // healthy, and takes over when the holder goes).
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": port}, "periodSeconds": 5},
    })
}

/// A kaas-operator container running `role`: its HTTP port (on the pod IP, as the process
/// kubelet runs pods on one host), probes, and `env` after the listen address.
pub fn operator_container(name: &str, image: &str, role: &str, env: Vec<Value>) -> Value {
    let port = resources::OPERATOR_HTTP_PORT;
    let mut all_env = vec![
        json!({"name": "MY_POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}),
        json!({"name": "KAAS_METRICS_LISTEN", "value": format!("$(MY_POD_IP):{port}")}),
    ];
    all_env.extend(env);
    let mut container = json!({
        "name": name,
        "image": image,
        "command": ["/kaas-operator", role],
        "ports": [{"name": "metrics", "containerPort": port}],
        "env": all_env,
        "securityContext": resources::restricted_container_security(),
    });
    if let (Some(c), Value::Object(p)) = (container.as_object_mut(), probes()) {
        c.extend(p);
    }
    container
}

/// Where an install's manager takes the namespaces it watches from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Watch {
    /// OLM's `olm.targetNamespaces` annotation on the pod (empty for AllNamespaces, and where
    /// there is no such annotation: a plain cluster-wide install).
    OlmTargetNamespaces,
    /// Its own namespace only (`config/namespaced`).
    OwnNamespace,
}

/// The operator's Deployment spec (shared by `config/manager`, `config/namespaced` and the
/// CSV).
pub fn deployment_spec(image: &str, watch: Watch) -> Value {
    let watched = match watch {
        Watch::OlmTargetNamespaces => "metadata.annotations['olm.targetNamespaces']",
        Watch::OwnNamespace => "metadata.namespace",
    };
    let mut container = operator_container(
        "manager",
        image,
        "run",
        vec![
            json!({"name": "KAAS_AGENT_IMAGE", "value": image}),
            // The manager's Lease lives in its own namespace.
            json!({"name": "KAAS_POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}),
            json!({"name": "KAAS_WATCH_NAMESPACES", "valueFrom": {"fieldRef": {"fieldPath": watched}}}),
        ],
    );
    container["resources"] =
        json!({"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}});
    json!({
        // Two replicas: one holds the Lease and reconciles, the other stands by and takes
        // over within the lease duration if the holder dies (at once if it stops cleanly).
        "replicas": 2,
        // A rolling update is safe with leader election: the new replica waits for the Lease,
        // which the old one releases when it stops.
        "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 1}},
        "selector": {"matchLabels": {"app.kubernetes.io/name": OPERATOR_NAME}},
        "template": {
            "metadata": {"labels": {"app.kubernetes.io/name": OPERATOR_NAME}},
            "spec": {
                "serviceAccountName": OPERATOR_NAME,
                "securityContext": resources::restricted_pod_security(),
                "containers": [container],
            }
        }
    })
}

/// The Service in front of the manager's `/metrics`, for Prometheus to scrape (every replica:
/// `kaas_operator_leader` tells the holder from the standby).
pub fn metrics_service(namespace: Option<&str>) -> Value {
    let mut metadata = json!({"name": format!("{OPERATOR_NAME}-metrics"), "labels": {"app.kubernetes.io/name": OPERATOR_NAME}});
    if let (Some(ns), Some(m)) = (namespace, metadata.as_object_mut()) {
        m.insert("namespace".into(), json!(ns));
    }
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": metadata,
        "spec": {
            "selector": {"app.kubernetes.io/name": OPERATOR_NAME},
            "ports": [{"name": "metrics", "port": resources::OPERATOR_HTTP_PORT, "targetPort": "metrics"}],
        }
    })
}

/// Sample custom resources (also the CSV's `alm-examples`).
pub fn samples() -> Vec<(&'static str, Value)> {
    vec![
        (
            "kafkacluster.yaml",
            json!({
                "apiVersion": "kaas.dev/v1alpha1", "kind": "KafkaCluster",
                "metadata": {"name": "demo"},
                "spec": {
                    "replicas": 3,
                    "version": "0.1.0",
                    "storage": {"storageClassName": "nfs", "size": "20Gi"},
                    "config": {"log.retention.ms": "604800000"},
                }
            }),
        ),
        (
            "kafkatopic.yaml",
            json!({
                "apiVersion": "kaas.dev/v1alpha1", "kind": "KafkaTopic",
                "metadata": {"name": "orders"},
                "spec": {"clusterRef": "demo", "partitions": 6, "config": {"retention.ms": "86400000", "cleanup.policy": "delete"}}
            }),
        ),
        (
            "kafkauser.yaml",
            json!({
                "apiVersion": "kaas.dev/v1alpha1", "kind": "KafkaUser",
                "metadata": {"name": "orders-app"},
                "spec": {
                    "clusterRef": "demo",
                    // The operator generates the password into Secret orders-app.
                    "authentication": {"type": "scram-sha-512"},
                    "authorization": {
                        "type": "simple",
                        "acls": [
                            {"resource": {"type": "topic", "name": "orders"}, "operations": ["Read", "Write", "Describe"]},
                            {"resource": {"type": "group", "name": "orders-", "patternType": "prefix"}, "operations": ["Read"]},
                        ],
                    },
                    "quotas": {"producerByteRate": 1048576, "consumerByteRate": 2097152, "requestPercentage": 50},
                }
            }),
        ),
    ]
}

/// `config/namespaced`: an install that reconciles only the KafkaClusters of its own namespace,
/// with a Role there instead of a ClusterRole (set the namespace with kustomize's `namespace:`;
/// the CRDs are cluster-wide and installed with it).
pub fn namespaced_install() -> Vec<(&'static str, Value)> {
    let meta =
        |name: &str| json!({"name": name, "labels": {"app.kubernetes.io/name": OPERATOR_NAME}});
    vec![
        (
            "kustomization.yaml",
            json!({
                "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
                "namespace": "kaas-operator",
                "resources": ["../crd", "service_account.yaml", "role.yaml", "role_binding.yaml", "deployment.yaml", "service.yaml"],
            }),
        ),
        (
            "service_account.yaml",
            json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta(OPERATOR_NAME)}),
        ),
        (
            "role.yaml",
            json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                "metadata": meta(OPERATOR_NAME),
                "rules": rbac::namespaced_operator_rules(),
            }),
        ),
        (
            "role_binding.yaml",
            json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": meta(OPERATOR_NAME),
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": OPERATOR_NAME},
                // No namespace: kustomize's `namespace:` fills it in (it rewrites no set one).
                "subjects": [{"kind": "ServiceAccount", "name": OPERATOR_NAME}],
            }),
        ),
        (
            "deployment.yaml",
            json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": meta(OPERATOR_NAME),
                "spec": deployment_spec(&versions::operator_image(), Watch::OwnNamespace),
            }),
        ),
        ("service.yaml", metrics_service(None)),
    ]
}

/// Files under the repository root that `crdgen write` produces.
pub fn repo_files() -> Vec<(PathBuf, String)> {
    let mut files = Vec::new();
    for (name, crd) in crds() {
        files.push((PathBuf::from("crds").join(name), yaml(&crd)));
        // A copy inside config/: kustomize refuses resources outside a kustomization's root.
        files.push((PathBuf::from("config/crd/bases").join(name), yaml(&crd)));
    }
    files.push((
        PathBuf::from("config/rbac/role.yaml"),
        yaml(&cluster_role()),
    ));
    files.push((
        PathBuf::from("config/manager/deployment.yaml"),
        yaml(&json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": OPERATOR_NAME, "namespace": OPERATOR_NAMESPACE},
            "spec": deployment_spec(&versions::operator_image(), Watch::OlmTargetNamespaces),
        })),
    ));
    files.push((
        PathBuf::from("config/manager/service.yaml"),
        yaml(&metrics_service(Some(OPERATOR_NAMESPACE))),
    ));
    for (name, object) in namespaced_install() {
        files.push((PathBuf::from("config/namespaced").join(name), yaml(&object)));
    }
    for (name, sample) in samples() {
        files.push((PathBuf::from("config/samples").join(name), yaml(&sample)));
    }
    for (name, monitor) in pod_monitors() {
        files.push((
            PathBuf::from("config/prometheus").join(name),
            yaml(&monitor),
        ));
    }
    files.push((
        PathBuf::from("config/prometheus/kustomization.yaml"),
        yaml(&json!({
            "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
            "resources": pod_monitors().into_iter().map(|(name, _)| name).collect::<Vec<_>>(),
        })),
    ));
    files
}

/// A Prometheus Operator PodMonitor scraping `/metrics` on the port named `port` of the pods
/// with `labels` (in its own namespace unless a `namespaceSelector` is added).
pub fn pod_monitor(metadata: Value, labels: Value, port: &str) -> Value {
    json!({
        "apiVersion": "monitoring.coreos.com/v1", "kind": "PodMonitor",
        "metadata": metadata,
        "spec": {
            "selector": {"matchLabels": labels},
            "podMetricsEndpoints": [{"port": port, "path": "/metrics"}],
        }
    })
}

/// Prometheus Operator PodMonitors for every volume agent and the operator's manager replicas
/// (port `metrics`), in any namespace. Brokers need none here: the operator creates a PodMonitor
/// per KafkaCluster ([`resources::broker_pod_monitor`]) where the CRD exists.
/// Not part of `config/default`: apply `config/prometheus` where the Prometheus Operator's CRDs
/// exist (the manager also applies them itself, [`crate::self_monitoring`]). Built from the same
/// label and port names the pods get, so they cannot drift.
pub fn pod_monitors() -> Vec<(&'static str, Value)> {
    pod_monitors_in(OPERATOR_NAMESPACE)
}

/// [`pod_monitors`] in the operator's namespace `namespace`.
pub fn pod_monitors_in(namespace: &str) -> Vec<(&'static str, Value)> {
    let monitor = |name: &str, labels: Value, port: &str| {
        let mut monitor = pod_monitor(
            json!({"name": name, "namespace": namespace, "labels": {"app.kubernetes.io/name": OPERATOR_NAME}}),
            labels,
            port,
        );
        monitor["spec"]["namespaceSelector"] = json!({"any": true});
        monitor
    };
    vec![
        (
            "volume_agent_podmonitor.yaml",
            monitor(
                "kaas-volume-agents",
                json!({resources::LABEL_NAME: "kaas", resources::LABEL_COMPONENT: "volume-agent"}),
                "metrics",
            ),
        ),
        (
            "operator_podmonitor.yaml",
            monitor(
                "kaas-operator",
                json!({"app.kubernetes.io/name": OPERATOR_NAME}),
                "metrics",
            ),
        ),
    ]
}

/// A CSV descriptor: `(path, display name, description, x-descriptors)`.
type Descriptor<'a> = (&'a str, &'a str, &'a str, &'a [&'a str]);

fn owned_crd(
    crd: &CustomResourceDefinition,
    display: &str,
    description: &str,
    spec: &[Descriptor],
    status: &[(&str, &str, &str)],
) -> Value {
    let version = crd
        .spec
        .versions
        .first()
        .map(|v| v.name.clone())
        .unwrap_or_default();
    json!({
        "name": crd.metadata.name,
        "version": version,
        "kind": crd.spec.names.kind,
        "displayName": display,
        "description": description,
        "specDescriptors": spec.iter().map(|(path, name, desc, x)| json!({"path": path, "displayName": name, "description": desc, "x-descriptors": x})).collect::<Vec<_>>(),
        "statusDescriptors": status.iter().map(|(path, name, desc)| json!({"path": path, "displayName": name, "description": desc})).collect::<Vec<_>>(),
    })
}

/// The images a CSV names in `relatedImages`: the operator's and the broker image of the
/// newest broker version the samples use.
fn related_images(image: &str) -> Vec<Value> {
    let mut images = vec![json!({"name": "kaas-operator", "image": image})];
    for (_, sample) in samples() {
        if let Some(version) = sample["spec"]["version"].as_str() {
            images.push(json!({"name": format!("kaas-broker-{}", version.replace('.', "-")), "image": versions::broker_image(version, None)}));
        }
    }
    images
}

/// The ClusterServiceVersion of this operator version.
pub fn csv(image: &str) -> Value {
    let version = versions::OPERATOR_VERSION;
    let examples: Vec<Value> = samples().into_iter().map(|(_, s)| s).collect();
    let crds = crds();
    let owned = vec![
        owned_crd(
            &crds[0].1,
            "Kafka Cluster",
            "A set of kaas brokers sharing one ReadWriteMany volume.",
            &[
                (
                    "replicas",
                    "Brokers",
                    "Number of brokers; a scale-down drains the removed ones",
                    &["urn:alm:descriptor:com.tectonic.ui:podCount"],
                ),
                (
                    "version",
                    "Broker version",
                    "kaas broker version (MAJOR.MINOR.PATCH)",
                    &["urn:alm:descriptor:com.tectonic.ui:text"],
                ),
                (
                    "storage.existingClaim",
                    "Existing claim",
                    "A ReadWriteMany claim to use (immutable)",
                    &["urn:alm:descriptor:io.kubernetes:PersistentVolumeClaim"],
                ),
                (
                    "storage.storageClassName",
                    "Storage class",
                    "Class of the claim the operator creates (immutable)",
                    &["urn:alm:descriptor:io.kubernetes:StorageClass"],
                ),
                (
                    "storage.size",
                    "Storage size",
                    "Size of the claim the operator creates (immutable)",
                    &["urn:alm:descriptor:com.tectonic.ui:text"],
                ),
                (
                    "config",
                    "Broker settings",
                    "Broker settings by Kafka's name (log.retention.ms, num.partitions, ...)",
                    &["urn:alm:descriptor:com.tectonic.ui:advanced"],
                ),
                (
                    "resources",
                    "Resources",
                    "Compute resources of each broker",
                    &["urn:alm:descriptor:com.tectonic.ui:resourceRequirements"],
                ),
            ],
            &[
                (
                    "conditions",
                    "Conditions",
                    "Ready, Progressing and Degraded",
                ),
                (
                    "readyBrokers",
                    "Ready brokers",
                    "Brokers passing their readiness probe",
                ),
                (
                    "bootstrapServers",
                    "Bootstrap servers",
                    "Where clients connect",
                ),
            ],
        ),
        owned_crd(
            &crds[1].1,
            "Kafka Topic",
            "A Kafka topic; its uid is the topic ID.",
            &[
                (
                    "clusterRef",
                    "Cluster",
                    "The KafkaCluster serving the topic (immutable)",
                    &["urn:alm:descriptor:com.tectonic.ui:text"],
                ),
                (
                    "partitions",
                    "Partitions",
                    "Partition count; may grow, never shrink",
                    &["urn:alm:descriptor:com.tectonic.ui:number"],
                ),
                (
                    "topicName",
                    "Topic name",
                    "The Kafka name when it is not a valid resource name (immutable)",
                    &["urn:alm:descriptor:com.tectonic.ui:text"],
                ),
                (
                    "config",
                    "Topic configs",
                    "Kafka topic configs (retention.ms, cleanup.policy, ...)",
                    &["urn:alm:descriptor:com.tectonic.ui:advanced"],
                ),
            ],
            &[
                (
                    "conditions",
                    "Conditions",
                    "Ready, with the reason a spec is refused",
                ),
                (
                    "topicId",
                    "Topic ID",
                    "The topic's identity, stamped in its directory",
                ),
            ],
        ),
        owned_crd(
            &crds[2].1,
            "Kafka Cluster Assignments",
            "The controller broker's mirror of assignment.json (read only).",
            &[],
            &[],
        ),
        owned_crd(
            &crds[3].1,
            "Kafka User",
            "A Kafka user: its SCRAM password (in a Secret named after it), ACLs and quotas.",
            &[
                (
                    "clusterRef",
                    "Cluster",
                    "The KafkaCluster the user belongs to (immutable)",
                    &["urn:alm:descriptor:com.tectonic.ui:text"],
                ),
                (
                    "authentication",
                    "Authentication",
                    "scram-sha-512 (a generated or provided password) or tls-external",
                    &["urn:alm:descriptor:com.tectonic.ui:advanced"],
                ),
                (
                    "authorization",
                    "Authorization",
                    "The user's ACL rules",
                    &["urn:alm:descriptor:com.tectonic.ui:advanced"],
                ),
                (
                    "quotas",
                    "Quotas",
                    "Produce and fetch byte rates, request percentage, controller mutation rate",
                    &["urn:alm:descriptor:com.tectonic.ui:advanced"],
                ),
            ],
            &[
                (
                    "conditions",
                    "Conditions",
                    "Ready, with the reason a user is not",
                ),
                (
                    "username",
                    "User name",
                    "The name clients authenticate as and ACLs name",
                ),
                ("secret", "Secret", "The Secret holding the user's password"),
            ],
        ),
    ];
    let mut csv = json!({
        "apiVersion": "operators.coreos.com/v1alpha1",
        "kind": "ClusterServiceVersion",
        "metadata": {
            "name": format!("{OPERATOR_NAME}.v{version}"),
            "namespace": "placeholder",
            "annotations": {
                "alm-examples": serde_json::to_string_pretty(&examples).unwrap_or_default(),
                // NB: not "Seamless Upgrades" until an operator upgrade with traffic running has
                // been tested end to end on the real control plane (issue #21).
                "capabilities": "Basic Install",
                // The upgrade graph: this version replaces any older one directly.
                "olm.skipRange": format!("<{version}"),
                "categories": "Streaming & Messaging",
                "containerImage": image,
                "description": "Kafka-compatible streaming on a shared ReadWriteMany volume.",
                "operators.operatorframework.io/builder": "kaas-crdgen",
                "repository": "https://github.com/kaas/kaas",
                "kaas.dev/managed-broker-versions": versions::SUPPORTED_BROKER_MINORS.iter().map(|m| format!("{m}.x")).collect::<Vec<_>>().join(","),
            }
        },
        "spec": {
            "displayName": "kaas",
            "description": "kaas runs Kafka-compatible brokers that share one ReadWriteMany volume instead of replicating. The operator manages KafkaCluster, KafkaTopic and KafkaUser resources: the broker StatefulSet, its Services, RBAC and disruption budget, the topic directories on the shared volume, and users' credentials, ACLs and quotas.",
            "version": version,
            "maturity": "alpha",
            "minKubeVersion": "1.33.0",
            "keywords": ["kafka", "streaming", "messaging"],
            "maintainers": [{"name": "kaas maintainers", "email": "maintainers@kaas.dev"}],
            "provider": {"name": "kaas"},
            "links": [{"name": "Source", "url": "https://github.com/kaas/kaas"}],
            "icon": [{"base64data": "PHN2ZyB4bWxucz0iaHR0cDovL3d3dy53My5vcmcvMjAwMC9zdmciIHZpZXdCb3g9IjAgMCAxIDEiLz4=", "mediatype": "image/svg+xml"}],
            "installModes": [
                {"type": "OwnNamespace", "supported": true},
                {"type": "SingleNamespace", "supported": true},
                {"type": "MultiNamespace", "supported": true},
                {"type": "AllNamespaces", "supported": true},
            ],
            "install": {
                "strategy": "deployment",
                "spec": {
                    // OLM makes Roles of `permissions` in the target namespaces (ClusterRoles
                    // for AllNamespaces) and ClusterRoles of `clusterPermissions`.
                    "permissions": [{"serviceAccountName": OPERATOR_NAME, "rules": rbac::namespaced_operator_rules()}],
                    "clusterPermissions": [{"serviceAccountName": OPERATOR_NAME, "rules": rbac::cluster_scoped_operator_rules()}],
                    "deployments": [{"name": OPERATOR_NAME, "spec": deployment_spec(image, Watch::OlmTargetNamespaces)}],
                }
            },
            "customresourcedefinitions": {"owned": owned},
            // Every image the operator runs, for disconnected mirrors: itself (also the volume
            // agents) and the brokers of the versions it manages by default.
            "relatedImages": related_images(image),
        }
    });
    if let Some(previous) = versions::REPLACES_OPERATOR_VERSION {
        csv["spec"]["replaces"] = json!(format!("{OPERATOR_NAME}.v{previous}"));
    }
    csv
}

/// The bundle's files, relative to the bundle directory.
pub fn bundle_files(image: &str, channel: &str) -> Vec<(PathBuf, String)> {
    let mut files: Vec<(PathBuf, String)> = crds()
        .into_iter()
        .map(|(name, crd)| (PathBuf::from("manifests").join(name), yaml(&crd)))
        .collect();
    files.push((
        PathBuf::from(format!(
            "manifests/{OPERATOR_NAME}.clusterserviceversion.yaml"
        )),
        yaml(&csv(image)),
    ));
    // OLM creates a bundle's Services in the install namespace.
    files.push((
        PathBuf::from(format!("manifests/{OPERATOR_NAME}-metrics_v1_service.yaml")),
        yaml(&metrics_service(None)),
    ));
    let annotations = [
        (
            "operators.operatorframework.io.bundle.mediatype.v1",
            "registry+v1",
        ),
        (
            "operators.operatorframework.io.bundle.manifests.v1",
            "manifests/",
        ),
        (
            "operators.operatorframework.io.bundle.metadata.v1",
            "metadata/",
        ),
        (
            "operators.operatorframework.io.bundle.package.v1",
            OPERATOR_NAME,
        ),
        ("operators.operatorframework.io.bundle.channels.v1", channel),
        (
            "operators.operatorframework.io.bundle.channel.default.v1",
            channel,
        ),
    ];
    let map: serde_json::Map<String, Value> = annotations
        .iter()
        .map(|(k, v)| ((*k).to_owned(), json!(v)))
        .collect();
    files.push((
        PathBuf::from("metadata/annotations.yaml"),
        yaml(&json!({"annotations": map})),
    ));
    let mut dockerfile = String::from("FROM scratch\n\n");
    for (k, v) in annotations {
        dockerfile.push_str(&format!("LABEL {k}={v}\n"));
    }
    dockerfile.push_str("\nCOPY manifests /manifests/\nCOPY metadata /metadata/\n");
    files.push((PathBuf::from("bundle.Dockerfile"), dockerfile));
    files
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn crds_have_cel_rules_and_printer_columns() {
        let topic = serde_json::to_string(&KafkaTopic::crd()).unwrap();
        assert!(
            topic.contains(r#""rule":"self >= oldSelf""#),
            "partitions may only grow"
        );
        assert!(topic.contains("partitions may grow but never shrink"));
        let cluster = serde_json::to_value(KafkaCluster::crd()).unwrap();
        let columns = &cluster["spec"]["versions"][0]["additionalPrinterColumns"];
        assert!(columns.as_array().unwrap().len() >= 5);
        assert!(cluster["spec"]["versions"][0]["subresources"]["status"].is_object());
        assert_eq!(cluster["spec"]["group"], "kaas.dev");
    }

    #[test]
    fn config_keys_are_checked_at_admission_from_the_settings_table() {
        let (_, cluster) = crds().remove(0);
        let cluster = serde_json::to_value(cluster).unwrap();
        let config = &cluster["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
            ["properties"]["config"];
        assert_eq!(config["maxProperties"], MAX_CONFIG_KEYS);
        let rule = config["x-kubernetes-validations"][0]["rule"]
            .as_str()
            .unwrap();
        for setting in kaas_shared::broker_settings::SETTINGS {
            assert!(
                rule.contains(&format!("'{}'", setting.key)),
                "{}",
                setting.key
            );
        }
        assert!(
            !rule.contains("'listen'"),
            "an operator-owned key is no setting"
        );
        assert!(
            (kaas_shared::broker_settings::SETTINGS.len() as i64) < MAX_CONFIG_KEYS,
            "every setting fits"
        );
    }

    /// Each PodMonitor (a cluster's, and those of `config/prometheus`) selects the pods it is
    /// for and names a port they have.
    #[test]
    fn pod_monitors_select_the_pods_and_ports_they_scrape() {
        let kc = crate::resources::tests::cluster(
            json!({"replicas": 3, "version": "0.1.0", "storage": {"existingClaim": "shared"}}),
        );
        let names = resources::Names::of(&kc).unwrap();
        let broker =
            serde_json::to_value(resources::broker_pod_template(&kc, &names).unwrap()).unwrap();
        let agent =
            serde_json::to_value(resources::volume_agent(&kc, &names, "img:1").unwrap()).unwrap();
        let agent = agent["spec"]["template"].clone();
        let manager = deployment_spec("img:1", Watch::OlmTargetNamespaces)["template"].clone();
        let scraped = |pod: &Value, monitor: &Value| {
            let selected = monitor["spec"]["selector"]["matchLabels"]
                .as_object()
                .unwrap()
                .iter()
                .all(|(k, v)| pod["metadata"]["labels"][k] == *v);
            let port = &monitor["spec"]["podMetricsEndpoints"][0]["port"];
            let has_port = pod["spec"]["containers"][0]["ports"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["name"] == *port);
            selected && has_port
        };
        let monitors: std::collections::BTreeMap<_, _> = pod_monitors().into_iter().collect();
        let (b, a, m) = (
            &resources::broker_pod_monitor(&kc, &names),
            &monitors["volume_agent_podmonitor.yaml"],
            &monitors["operator_podmonitor.yaml"],
        );
        assert!(scraped(&broker, b) && !scraped(&agent, b) && !scraped(&manager, b));
        assert!(scraped(&agent, a) && !scraped(&broker, a) && !scraped(&manager, a));
        assert!(scraped(&manager, m) && !scraped(&broker, m) && !scraped(&agent, m));
    }

    #[test]
    fn the_committed_crds_and_config_are_what_the_types_generate() {
        // The CRDs and RBAC that kubectl applies (config/, crds/) are generated; one left behind
        // a change to the types or the rules fails here rather than as a refused call on a
        // real cluster.
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        for (path, text) in repo_files() {
            let committed = std::fs::read_to_string(root.join(&path)).unwrap_or_default();
            assert!(
                committed == text,
                "{} is not what the types generate: run `make crds`",
                path.display()
            );
        }
    }

    #[test]
    fn the_csv_has_an_upgrade_graph_related_images_and_descriptors_and_claims_no_seamless_upgrades()
    {
        let csv = csv("img:1");
        let annotations = &csv["metadata"]["annotations"];
        assert_eq!(annotations["capabilities"], "Basic Install");
        assert_eq!(
            annotations["olm.skipRange"],
            format!("<{}", versions::OPERATOR_VERSION)
        );
        let images = csv["spec"]["relatedImages"].as_array().unwrap();
        assert_eq!(images[0]["image"], "img:1");
        assert!(
            images
                .iter()
                .any(|i| i["image"] == "ghcr.io/kaas/kaas:0.1.0")
        );
        let owned = csv["spec"]["customresourcedefinitions"]["owned"]
            .as_array()
            .unwrap();
        let paths: Vec<&str> = owned[0]["specDescriptors"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|d| d["path"].as_str())
            .collect();
        assert!(
            paths.contains(&"replicas") && paths.contains(&"config"),
            "{paths:?}"
        );
    }

    #[test]
    fn the_csv_owns_every_crd() {
        let csv = csv("img:1");
        let owned = csv["spec"]["customresourcedefinitions"]["owned"]
            .as_array()
            .unwrap();
        assert_eq!(owned.len(), 4);
        assert_eq!(owned[1]["name"], "kafkatopics.kaas.dev");
        assert_eq!(owned[3]["name"], "kafkausers.kaas.dev");
        let examples: Vec<Value> = serde_json::from_str(
            csv["metadata"]["annotations"]["alm-examples"]
                .as_str()
                .unwrap(),
        )
        .unwrap();
        assert!(examples.iter().any(|e| e["kind"] == "KafkaUser"));
        assert_eq!(
            csv["spec"]["install"]["spec"]["deployments"][0]["spec"]["template"]["spec"]["containers"]
                [0]["image"],
            "img:1"
        );
    }
}
