//! `KafkaCluster`: a set of brokers sharing one ReadWriteMany volume.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, EnvVar, LocalObjectReference, PodSecurityContext, ResourceRequirements,
    SecurityContext, Toleration, TopologySpreadConstraint,
};
use k8s_openapi::api::networking::v1::NetworkPolicyPeer;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

/// A kaas cluster: `replicas` brokers of broker version `version`, all mounting one RWX claim.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Debug, Clone, PartialEq)]
#[kube(
    group = "kaas.dev",
    version = "v1alpha1",
    kind = "KafkaCluster",
    namespaced,
    status = "KafkaClusterStatus",
    shortname = "kc",
    category = "kaas",
    // `kubectl scale kafkacluster/x --replicas N` (and autoscalers) write spec.replicas; the
    // operator reconciles it like any replicas change (a scale-down drains removed brokers).
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.replicas",
        label_selector_path = ".status.selector"
    ),
    printcolumn(name = "Brokers", type_ = "integer", json_path = ".spec.replicas"),
    printcolumn(name = "Ready", type_ = "integer", json_path = ".status.readyBrokers"),
    printcolumn(name = "Version", type_ = "string", json_path = ".spec.version"),
    printcolumn(
        name = "Controller",
        type_ = "string",
        json_path = ".status.currentController"
    ),
    printcolumn(
        name = "Status",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].reason"
    ),
    printcolumn(
        name = "In B/s",
        type_ = "integer",
        json_path = ".status.bytesInPerSecond"
    ),
    printcolumn(
        name = "Out B/s",
        type_ = "integer",
        json_path = ".status.bytesOutPerSecond"
    ),
    printcolumn(
        name = "Groups",
        type_ = "integer",
        json_path = ".status.consumerGroupCount",
        priority = 1
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct KafkaClusterSpec {
    /// Number of brokers.
    #[schemars(range(min = 1, max = 64))]
    pub replicas: i32,
    /// Broker version (the `kaas` release, `MAJOR.MINOR.PATCH` with an optional pre-release).
    /// The operator refuses versions it does not manage with a `Degraded` condition instead of
    /// guessing their flags.
    #[schemars(length(min = 1, max = 64), regex(pattern = r"^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$"))]
    pub version: String,
    /// Broker image; defaults to the published image of `version`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Where the shared volume comes from. Immutable: another claim would be another volume,
    /// without the cluster's data.
    #[x_kube(validation = Rule::new("self == oldSelf").message("storage is immutable: brokers would lose the volume that holds their data; create a new KafkaCluster to move"))]
    pub storage: StorageSpec,
    /// Client listener.
    #[serde(default)]
    pub listener: ListenerSpec,
    /// Broker settings by Kafka's broker config name (`log.retention.ms`, `num.partitions`,
    /// `auto.create.topics.enable`, ...; docs/operator.md lists them). Keys the operator sets
    /// and unknown keys are refused. A change restarts brokers one at a time.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub config: BTreeMap<String, String>,
    /// Compute resources of each broker container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// Pod template overrides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template: Option<PodTemplateOverrides>,
    /// Broker fencing and session timeouts (DESIGN "Broker fencing").
    #[serde(default)]
    pub timeouts: TimeoutsSpec,
    /// Kafka ACLs: every request is checked against them (managed with `kafka-acls` or any
    /// admin client, kept on the volume); without it every client may do everything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authorization: Option<AuthorizationSpec>,
    /// The cluster CA, which signs the listener certificate when `listener.tls` names no
    /// Secret (clients trust `<cluster>-cluster-ca-cert`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_ca: Option<CertificateAuthority>,
    /// The clients CA, which signs the certificates of KafkaUsers of type `tls` and which the
    /// brokers trust for client certificates (`listener.authentication.type: tls` with
    /// `tls: {}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clients_ca: Option<CertificateAuthority>,
}

/// How the operator keeps one of a cluster's CAs (Strimzi's `clusterCa`/`clientsCa` fields).
/// A generated CA is renewed `renewalDays` before it expires (or at once when its Secret
/// `<cluster>-cluster-ca`/`<cluster>-clients-ca` is annotated `kaas.dev/force-renew`): a new
/// certificate for the same key, so certificates it signed before still chain to it, and every
/// certificate it signs is issued again. Certificates a CA signs live a year at most and never
/// past the CA's expiry.
#[derive(KubeSchema, Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.renewalDays < self.validityDays").message("renewalDays must be less than validityDays: the CA is renewed renewalDays before it expires"))]
pub struct CertificateAuthority {
    /// `true` (the default): the operator generates the CA and renews it. `false`: the user
    /// provides it before the cluster needs it — the certificate as `ca.crt` in
    /// `<cluster>-cluster-ca-cert` (or `<cluster>-clients-ca-cert`) and its private key (PEM,
    /// PKCS#8 or SEC1) as `ca.key` in `<cluster>-cluster-ca` (or `<cluster>-clients-ca`) —
    /// and renews it; the operator only signs with it and never writes either Secret.
    #[serde(default = "generate_certificate_authority")]
    pub generate_certificate_authority: bool,
    /// How long a generated CA certificate is valid, in days (default 365).
    #[serde(default = "ca_validity_days")]
    #[schemars(range(min = 2, max = 36500))]
    pub validity_days: u32,
    /// How many days before its expiry a generated CA is renewed (default 30).
    #[serde(default = "ca_renewal_days")]
    #[schemars(range(min = 1, max = 36499))]
    pub renewal_days: u32,
}

fn generate_certificate_authority() -> bool {
    true
}

fn ca_validity_days() -> u32 {
    365
}

fn ca_renewal_days() -> u32 {
    30
}

impl Default for CertificateAuthority {
    fn default() -> Self {
        Self {
            generate_certificate_authority: generate_certificate_authority(),
            validity_days: ca_validity_days(),
            renewal_days: ca_renewal_days(),
        }
    }
}

/// How requests are authorized.
#[derive(KubeSchema, Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AuthorizationSpec {
    /// `simple`: Kafka's ACLs, as its StandardAuthorizer applies them.
    #[serde(rename = "type")]
    pub kind: AuthorizationType,
    /// Users allowed everything (`super.users`): names as clients authenticate (`alice`, or a
    /// certificate's `CN=...`), or `User:<name>`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub super_users: Vec<String>,
}

/// An authorizer.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthorizationType {
    /// Kafka's ACLs.
    #[serde(rename = "simple")]
    Simple,
}

/// The shared volume: an existing RWX claim, or a size (and class) for which the operator
/// creates one.
#[derive(KubeSchema, Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.existingClaim) != has(self.size)").message("storage: set either existingClaim or size (with an optional storageClassName), not both and not neither"))]
#[x_kube(validation = Rule::new("!has(self.storageClassName) || has(self.size)").message("storage: storageClassName needs size"))]
pub struct StorageSpec {
    /// Name of an existing ReadWriteMany PersistentVolumeClaim in the cluster's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub existing_claim: Option<String>,
    /// Storage class of the ReadWriteMany claim the operator creates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_class_name: Option<String>,
    /// Size of the claim the operator creates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<Quantity>,
}

/// How brokers listen and what address they advertise to clients.
#[derive(KubeSchema, Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!has(self.authentication) || self.authentication.type != 'tls' || has(self.tls)").message("listener.authentication type tls needs listener.tls: client certificates are presented in the TLS handshake; with tls: {} they are checked against the operator's clients CA (which issues KafkaUsers of type tls their certificates), with tls.secretName against that Secret's ca.crt"))]
#[x_kube(validation = Rule::new("!has(self.external) || self.external.type != 'ingress' || has(self.tls)").message("listener.external type ingress passes TLS through to the brokers by its server name (SNI): it needs listener.tls"))]
#[x_kube(validation = Rule::new("!has(self.external) || !(self.external.port in [self.port, 9091, 9094, 9095])").message("listener.external.port must differ from listener.port and from the brokers' own ports 9091 (inter-broker), 9094 (heartbeat) and 9095 (probes and metrics)"))]
#[x_kube(validation = Rule::new("!has(self.tls) || has(self.tls.secretName) || !has(self.advertise) || self.advertise != 'PodIp'").message("listener.tls without a secretName needs advertise: PodDns: the operator's certificate names DNS names, and pod IPs change with each pod; name a Secret with a certificate for the pod IPs instead"))]
pub struct ListenerSpec {
    /// Kafka protocol port.
    #[serde(default = "default_kafka_port")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: i32,
    /// What brokers advertise in Metadata.
    #[serde(default)]
    pub advertise: Advertise,
    /// Which addresses the Kafka and HTTP ports bind: `All` (`[::]`, every IPv4 and IPv6
    /// address of the pod, so `kubectl port-forward` reaches the broker) or `PodIp` (the pod IP
    /// only, for runtimes where pods share one network namespace).
    // NB: left out when default, so that the pod inputs hash of clusters made before this
    // field existed is unchanged (an operator upgrade alone restarts no broker).
    #[serde(default, skip_serializing_if = "Bind::is_default")]
    pub bind: Bind,
    /// TLS on the Kafka listener (`SSL`, or `SASL_SSL` with `authentication`); without it
    /// clients connect in plain text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<ListenerTls>,
    /// How clients authenticate: SASL/SCRAM, or TLS client certificates; without it clients
    /// are anonymous.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authentication: Option<ListenerAuthentication>,
    /// Who may reach the Kafka port where the network enforces NetworkPolicies (as in a
    /// NetworkPolicy's `from`: pod and namespace selectors, IP blocks); empty: anyone. Changing
    /// it changes the cluster's NetworkPolicy only, restarting no broker.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub network_policy_peers: Vec<NetworkPolicyPeer>,
    /// A second listener for clients outside the Kubernetes cluster, secured like this one:
    /// one Service per broker and a bootstrap Service of the type asked for; each broker
    /// announces its own Service's address on it. `status.externalBootstrapServers` says where
    /// to connect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external: Option<ExternalListener>,
}

/// How clients outside the cluster reach the brokers (Strimzi's `nodeport` and `loadbalancer`
/// listener types).
#[derive(KubeSchema, Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.type == 'nodeport' || ((!has(self.bootstrap) || !has(self.bootstrap.nodePort)) && (!has(self.brokers) || self.brokers.all(b, !has(b.nodePort))))").message("listener.external nodePort fields are for type nodeport"))]
#[x_kube(validation = Rule::new("self.type != 'ingress' || (has(self.bootstrap) && has(self.bootstrap.host) && has(self.brokers) && self.brokers.all(b, has(b.host)))").message("listener.external type ingress needs bootstrap.host and a host for every broker (brokers[].host): the ingress controller routes by those names"))]
#[x_kube(validation = Rule::new("self.type == 'ingress' || ((!has(self.bootstrap) || !has(self.bootstrap.host)) && (!has(self.brokers) || self.brokers.all(b, !has(b.host))) && !has(self.class))").message("listener.external host and class fields are for type ingress"))]
pub struct ExternalListener {
    /// `nodeport`: every node forwards a port per broker (clients dial a node's address);
    /// `loadbalancer`: a load balancer per broker (and one for bootstrapping); `ingress`: an
    /// Ingress per broker whose controller passes TLS through by server name (ingress-nginx
    /// with `--enable-ssl-passthrough`), clients dialing `<host>:443`.
    #[serde(rename = "type")]
    pub kind: ExternalListenerType,
    /// The Ingresses' `ingressClassName` (type ingress); none: the cluster's default class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub class: Option<String>,
    /// The brokers' external listener port, and the load balancers' port.
    #[serde(default = "default_external_port")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: i32,
    /// The bootstrap Service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bootstrap: Option<ExternalBootstrap>,
    /// Per broker: a fixed node port, the address to announce instead of the one the Service
    /// gives (a DNS name in front of a node or load balancer), Service annotations.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 1000))]
    #[x_kube(validation = Rule::new("self.all(b, self.exists_one(c, c.broker == b.broker))").message("listener.external.brokers names a broker twice"))]
    pub brokers: Vec<ExternalBrokerOverride>,
    /// Annotations on every external Service (a cloud's load balancer settings).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// The external listener's Service types.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ExternalListenerType {
    Nodeport,
    Loadbalancer,
    Ingress,
}

/// The external bootstrap Service's settings.
#[derive(KubeSchema, Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ExternalBootstrap {
    /// The bootstrap host name (type ingress), which a DNS record must point at the ingress
    /// controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub host: Option<String>,
    /// A fixed node port (type nodeport); none: Kubernetes picks one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub node_port: Option<i32>,
    /// Annotations on the bootstrap Service.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// One broker's external settings.
#[derive(KubeSchema, Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ExternalBrokerOverride {
    /// The broker id (its pod's ordinal).
    #[schemars(range(min = 0))]
    pub broker: i32,
    /// This broker's host name (type ingress), which a DNS record must point at the ingress
    /// controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub host: Option<String>,
    /// A fixed node port (type nodeport); none: Kubernetes picks one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub node_port: Option<i32>,
    /// The host clients are told to dial for this broker, instead of its node's address or
    /// its load balancer's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub advertised_host: Option<String>,
    /// The port clients are told to dial, instead of the node port or load balancer port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub advertised_port: Option<i32>,
    /// Annotations on this broker's Service.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

fn default_external_port() -> i32 {
    9093
}

impl Default for ListenerSpec {
    fn default() -> Self {
        ListenerSpec {
            port: default_kafka_port(),
            advertise: Advertise::default(),
            bind: Bind::default(),
            tls: None,
            authentication: None,
            network_policy_peers: Vec::new(),
            external: None,
        }
    }
}

/// The listener's certificate. Brokers read the mounted files again when the Secret changes
/// (a renewal needs no restart).
#[derive(KubeSchema, Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ListenerTls {
    /// A Secret in the cluster's namespace with `tls.crt` (the chain, valid for the names
    /// clients connect to: the advertised pod addresses and the bootstrap Service) and
    /// `tls.key` — a `kubernetes.io/tls` Secret such as cert-manager writes — and, for
    /// `authentication.type: tls`, `ca.crt`: the CA client certificates must chain to.
    /// Without it the operator issues the certificate from a cluster CA of its own
    /// (`<cluster>-cluster-ca-cert` holds the CA clients trust), for the pod DNS names and the
    /// bootstrap Service, and issues it again before it expires; with `authentication.type:
    /// tls` it also keeps a clients CA (`<cluster>-clients-ca-cert`), which signs the
    /// certificates of KafkaUsers of type `tls` and is the one client certificates must chain to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub secret_name: Option<String>,
}

/// How clients of the listener prove who they are.
#[derive(KubeSchema, Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.type != 'oauth' || has(self.jwksEndpointUri) != has(self.jwksSecret)").message("listener.authentication type oauth needs either jwksEndpointUri (the identity provider's key set) or jwksSecret, not both"))]
#[x_kube(validation = Rule::new("self.type == 'oauth' || !(has(self.jwksEndpointUri) || has(self.jwksSecret) || has(self.validIssuerUri) || has(self.userNameClaim) || has(self.checkAudience) || has(self.clientId) || has(self.jwksRefreshSeconds) || has(self.tlsTrustedCertificates))").message("listener.authentication: the OAuth fields are for type oauth"))]
#[x_kube(validation = Rule::new("!has(self.checkAudience) || !self.checkAudience || has(self.clientId)").message("listener.authentication: checkAudience needs clientId, the audience tokens must name"))]
pub struct ListenerAuthentication {
    /// `scram-sha-512` or `scram-sha-256` (SASL; `SASL_SSL` with `tls`, else `SASL_PLAINTEXT`),
    /// `tls` (client certificates, required; the certificate's subject names the user), or
    /// `oauth` (SASL/OAUTHBEARER: JWTs signed by an identity provider's keys).
    #[serde(rename = "type")]
    pub kind: AuthenticationType,
    /// SCRAM: the users are those of the cluster's KafkaUsers, and those of this Secret's
    /// `users.json` if it is set (a Secret in the cluster's namespace holding the users' salted
    /// credentials, as `kaas scram-credential` writes them). Brokers read both again when they
    /// change, so users are added and removed without a restart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub secret_name: Option<String>,
    /// OAuth: the identity provider's JSON Web Key Set endpoint (`https://`), fetched again
    /// every `jwksRefreshSeconds` and early when a token names a key it does not have.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 2048), regex(pattern = r"^https?://"))]
    pub jwks_endpoint_uri: Option<String>,
    /// OAuth: the key set in a Secret instead (clusters that cannot reach the identity
    /// provider); read again when the Secret changes, so keys rotate without a restart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jwks_secret: Option<SecretKey>,
    /// OAuth: how often the key set endpoint is fetched again (default 3600).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 86400))]
    pub jwks_refresh_seconds: Option<i32>,
    /// OAuth: tokens must have this issuer (`iss`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 2048))]
    pub valid_issuer_uri: Option<String>,
    /// OAuth: the claim that names the user ACLs and quotas see (default `sub`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub user_name_claim: Option<String>,
    /// OAuth: tokens must name `clientId` in their audience (`aud`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check_audience: Option<bool>,
    /// OAuth: the broker's client id at the identity provider, the audience `checkAudience`
    /// requires.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub client_id: Option<String>,
    /// OAuth: the CA certificates (PEM) the key set endpoint's certificate must chain to, for
    /// a private CA; one Secret key, which may hold several certificates.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 1))]
    pub tls_trusted_certificates: Vec<TrustedCertificate>,
}

/// One key of a Secret in the cluster's namespace.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SecretKey {
    #[schemars(length(min = 1, max = 253))]
    pub secret_name: String,
    #[schemars(length(min = 1, max = 253), regex(pattern = r"^[-._a-zA-Z0-9]+$"))]
    pub key: String,
}

/// A certificate file in a Secret of the cluster's namespace (Strimzi's shape).
#[derive(schemars::JsonSchema, Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TrustedCertificate {
    #[schemars(length(min = 1, max = 253))]
    pub secret_name: String,
    /// The Secret's key holding the PEM certificates.
    #[schemars(length(min = 1, max = 253), regex(pattern = r"^[-._a-zA-Z0-9]+$"))]
    pub certificate: String,
}

/// A listener's client authentication.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthenticationType {
    /// SASL/SCRAM-SHA-512.
    #[serde(rename = "scram-sha-512")]
    ScramSha512,
    /// SASL/SCRAM-SHA-256.
    #[serde(rename = "scram-sha-256")]
    ScramSha256,
    /// TLS client certificates (mutual TLS).
    #[serde(rename = "tls")]
    Tls,
    /// SASL/OAUTHBEARER with JWTs.
    #[serde(rename = "oauth")]
    OAuth,
}

fn default_kafka_port() -> i32 {
    9092
}

/// The address a broker advertises.
#[derive(
    schemars::JsonSchema, Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default,
)]
pub enum Advertise {
    /// `<pod>.<cluster>-brokers.<namespace>.svc`, through the headless Service.
    #[default]
    PodDns,
    /// The pod IP (clusters without DNS, or clients on the pod network).
    PodIp,
}

/// The addresses a broker's Kafka and HTTP listeners bind (the heartbeat port, which only peers
/// dial, always binds the pod IP).
#[derive(
    schemars::JsonSchema, Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default,
)]
pub enum Bind {
    /// Every address of the pod, IPv4 and IPv6 (`[::]`): the pod IP, and localhost for
    /// `kubectl port-forward`.
    #[default]
    All,
    /// The pod IP only: for runtimes where pods share one network namespace. `kubectl
    /// port-forward` cannot reach such a broker.
    PodIp,
}

impl Bind {
    fn is_default(&self) -> bool {
        *self == Bind::default()
    }
}

/// Overrides merged into the broker pod template.
#[derive(KubeSchema, Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct PodTemplateOverrides {
    /// Extra pod labels (the operator's selector labels always win).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Extra pod annotations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// Node selector.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// Affinity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,
    /// Tolerations.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    /// Topology spread constraints (e.g. brokers across zones).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub topology_spread_constraints: Vec<TopologySpreadConstraint>,
    /// Priority class of the broker pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
    /// Secrets for pulling the broker image from a private registry.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub image_pull_secrets: Vec<LocalObjectReference>,
    /// Pod security context, merged field by field over the operator's defaults
    /// (`runAsNonRoot: true`, `seccompProfile: RuntimeDefault`): set `runAsUser`, `runAsGroup`,
    /// `fsGroup` or `supplementalGroups` to match the owner of an NFS export.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_context: Option<PodSecurityContext>,
    /// The broker container's security context, merged field by field over the operator's
    /// defaults (`allowPrivilegeEscalation: false`, `capabilities: {drop: [ALL]}`,
    /// `readOnlyRootFilesystem: true`); a field set here replaces the default's whole field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_security_context: Option<SecurityContext>,
    /// Extra environment variables of the broker container. Names the operator sets (`KAAS_*`,
    /// `MY_POD_*`) are refused: broker settings go in `config`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 128))]
    #[x_kube(validation = Rule::new("self.all(e, !e.name.startsWith('KAAS_') && !e.name.startsWith('MY_POD_'))").message("podTemplate.env: names starting with KAAS_ or MY_POD_ are set by the operator; broker settings go in spec.config"))]
    pub env: Vec<EnvVar>,
    /// ServiceAccount of the broker pods (one you manage, e.g. annotated for workload
    /// identity); the operator binds the brokers' Role to it. Default: `<cluster>-broker`, which
    /// the operator creates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,
    /// Seconds a broker gets to drain after SIGTERM. Default: twice the session timeout plus
    /// 30 s, at least 60 s; less may kill a broker before it hands its partitions over (nothing
    /// acknowledged is lost, but the next leader recovers them instead of taking them cleanly).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 86400))]
    pub termination_grace_period_seconds: Option<i64>,
}

/// Fencing: a broker whose heartbeats go unacknowledged for `fenceTimeoutMs` stops acknowledging
/// produce requests; the controller reassigns its partitions only after `sessionTimeoutMs`, which
/// must exceed the fence timeout by a margin so that no zombie leader acknowledges a write.
#[derive(KubeSchema, Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.sessionTimeoutMs >= self.fenceTimeoutMs + 2000").message("timeouts: sessionTimeoutMs must exceed fenceTimeoutMs by at least 2000 ms, or a fenced broker's partitions could move before it stops acknowledging writes"))]
pub struct TimeoutsSpec {
    /// Milliseconds without an acknowledged heartbeat after which a broker fences itself.
    #[serde(default = "default_fence_timeout_ms")]
    #[schemars(range(min = 1000, max = 600000))]
    pub fence_timeout_ms: i64,
    /// Milliseconds of silence after which the controller moves a broker's partitions.
    #[serde(default = "default_session_timeout_ms")]
    #[schemars(range(min = 3000, max = 1200000))]
    pub session_timeout_ms: i64,
}

impl Default for TimeoutsSpec {
    fn default() -> Self {
        TimeoutsSpec {
            fence_timeout_ms: default_fence_timeout_ms(),
            session_timeout_ms: default_session_timeout_ms(),
        }
    }
}

fn default_fence_timeout_ms() -> i64 {
    6000
}

fn default_session_timeout_ms() -> i64 {
    10000
}

/// What the operator observed.
#[derive(KubeSchema, Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct KafkaClusterStatus {
    /// `Ready`, `Progressing`, `Degraded`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The generation the status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Brokers passing their readiness probe.
    #[serde(default)]
    pub ready_brokers: i32,
    /// The broker holding the controller Lease, as mirrored in KafkaClusterAssignments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_controller: Option<String>,
    /// The latest assignment version the controller published.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assignment_version: Option<i64>,
    /// `host:port,...` of every broker, for clients.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bootstrap_servers: Option<String>,
    /// Where clients outside the cluster bootstrap from (`listener.external`), once the
    /// external Services have addresses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_bootstrap_servers: Option<String>,
    /// Brokers that exist (ready or not): the scale subresource's status replicas.
    #[serde(default)]
    pub replicas: i32,
    /// The broker pods' label selector, for the scale subresource (autoscalers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
    /// Hash of the rendered broker pod template the StatefulSet carries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template_hash: Option<String>,
    /// What the controller broker publishes (its own field manager, `kaas-controller`).
    #[serde(flatten)]
    pub traffic: ClusterTraffic,
}

impl KafkaClusterStatus {
    /// The status without the fields the controller broker publishes: what the operator
    /// applies, so that neither field manager's apply removes or overwrites the other's fields.
    pub fn without_traffic(self) -> KafkaClusterStatus {
        KafkaClusterStatus {
            traffic: ClusterTraffic::default(),
            ..self
        }
    }
}

/// The part of a KafkaCluster's status the controller broker publishes from its brokers'
/// heartbeats: rates, partitions led and consumer groups (docs/monitoring.md). Refreshed at
/// most every 10 s, and only when it changed.
#[derive(KubeSchema, Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ClusterTraffic {
    /// Record batch bytes appended per second, all brokers (over the last publication interval).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_in_per_second: Option<i64>,
    /// Record bytes sent to consumers per second, all brokers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_out_per_second: Option<i64>,
    /// Records appended per second, all brokers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub messages_in_per_second: Option<i64>,
    /// Each heartbeating broker: partitions it leads and its traffic.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub brokers: Vec<BrokerTraffic>,
    /// Consumer groups in the cluster (all of them; `consumerGroups` lists at most 50).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consumer_group_count: Option<i32>,
    /// The consumer groups with the largest lag, at most 50 (a status is no place for every
    /// group a client may create: the rest are counted, and their lag is on `/metrics`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub consumer_groups: Vec<ConsumerGroupSummary>,
}

/// One broker in a KafkaCluster's status.
#[derive(KubeSchema, Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct BrokerTraffic {
    /// The broker id (the pod's ordinal).
    pub id: i32,
    /// Partitions it leads.
    pub partitions_led: i32,
    pub bytes_in_per_second: i64,
    pub bytes_out_per_second: i64,
}

/// One consumer group in a KafkaCluster's status.
#[derive(KubeSchema, Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ConsumerGroupSummary {
    pub name: String,
    /// Kafka's state name: `Empty`, `Stable`, `PreparingRebalance`, ...
    pub state: String,
    /// `classic` or `consumer` (KIP-848).
    #[serde(rename = "type")]
    pub group_type: String,
    /// A classic group's protocol type (`consumer`, `connect`, ...).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub protocol_type: String,
    pub members: i32,
    /// High watermark minus committed offset, summed over the group's partitions.
    pub lag: i64,
    /// The broker coordinating it.
    pub coordinator: i32,
}
