//! `KafkaUser`: one user of one cluster, as Strimzi users know it — how it authenticates (a
//! SCRAM password the operator generates or takes from a Secret, or a certificate the operator
//! issues or one issued elsewhere), its ACLs and its quotas. The cluster's volume agent writes what brokers enforce
//! into `__cluster/kafka-users.json` ([`crate::kafka_users`]).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use crate::kafka_users::{AclRule, UserQuotas};

/// A Kafka user.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Debug, Clone, PartialEq)]
#[kube(
    group = "kaas.dev",
    version = "v1alpha1",
    kind = "KafkaUser",
    namespaced,
    status = "KafkaUserStatus",
    shortname = "ku",
    category = "kaas",
    printcolumn(name = "Cluster", type_ = "string", json_path = ".spec.clusterRef"),
    printcolumn(
        name = "Authentication",
        type_ = "string",
        json_path = ".spec.authentication.type"
    ),
    printcolumn(
        name = "Authorization",
        type_ = "string",
        json_path = ".spec.authorization.type"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Secret",
        type_ = "string",
        json_path = ".status.secret",
        priority = 1
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct KafkaUserSpec {
    /// Name of the KafkaCluster (same namespace) the user belongs to.
    #[schemars(length(min = 1, max = 63))]
    #[x_kube(validation = Rule::new("self == oldSelf").message("clusterRef is immutable: a user cannot move between clusters"))]
    pub cluster_ref: String,
    /// How the user proves who it is; without it the user has only ACLs and quotas (for a
    /// principal another mechanism names, such as an OAuth token's subject).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authentication: Option<UserAuthentication>,
    /// What the user may do.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authorization: Option<UserAuthorization>,
    /// How much of the brokers the user may take.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quotas: Option<UserQuotas>,
}

/// A user's authentication.
#[derive(KubeSchema, Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.type == 'scram-sha-512' || !has(self.password)").message("authentication.password is for type scram-sha-512"))]
pub struct UserAuthentication {
    /// `scram-sha-512`: a password (SASL SCRAM-SHA-512 or -256, either listener); the
    /// operator generates one into a Secret named after the user unless `password` names one.
    /// `tls`: a client certificate the operator issues from the cluster's clients CA (the
    /// listener must be `tls: {}` with `authentication: {type: tls}`) into a Secret named
    /// after the user (`ca.crt`, `user.crt`, `user.key`, and the PKCS#12 keystore `user.p12`
    /// with its password `user.password`), subject `CN=<user name>`.
    /// `tls-external`: a client certificate issued outside kaas whose subject is `CN=<user
    /// name>`; the user has no Secret. Either way the user is `CN=<name>` to ACLs and quotas.
    #[serde(rename = "type")]
    pub kind: UserAuthenticationType,
    /// SCRAM: the password, from a Secret of the user's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<PasswordSource>,
}

/// How a user authenticates.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub enum UserAuthenticationType {
    /// SASL/SCRAM with a password.
    #[serde(rename = "scram-sha-512")]
    ScramSha512,
    /// A client certificate the operator issues from the cluster's clients CA.
    #[serde(rename = "tls")]
    Tls,
    /// A client certificate from another CA.
    #[serde(rename = "tls-external")]
    TlsExternal,
}

/// Where a user's password comes from (Strimzi's `password.valueFrom.secretKeyRef`).
#[derive(schemars::JsonSchema, Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PasswordSource {
    /// The Secret key holding it.
    pub value_from: PasswordValueFrom,
}

/// A Secret key.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PasswordValueFrom {
    /// The Secret and its key.
    pub secret_key_ref: SecretKeyRef,
}

/// One key of a Secret in the user's namespace.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyRef {
    /// The Secret's name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// The key.
    #[schemars(length(min = 1, max = 253), regex(pattern = r"^[-._a-zA-Z0-9]+$"))]
    pub key: String,
}

/// A user's ACLs.
#[derive(KubeSchema, Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.acls.all(a, (a.resource.type == 'cluster') != has(a.resource.name))").message("authorization.acls: a cluster resource has no name; topic, group and transactionalId resources need one"))]
pub struct UserAuthorization {
    /// `simple`: Kafka's ACLs.
    #[serde(rename = "type")]
    pub kind: super::cluster::AuthorizationType,
    /// The user's ACL rules; the brokers enforce exactly these for the user (`kafka-acls`
    /// cannot remove them; change them here).
    #[serde(default)]
    #[schemars(length(max = 1000))]
    pub acls: Vec<AclRule>,
}

/// What the operator observed.
#[derive(KubeSchema, Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct KafkaUserStatus {
    /// `Ready`: the brokers' file holds the user as the spec says (or why not).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The generation the status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The user name clients authenticate as and ACLs name (`User:<username>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    /// SCRAM: the Secret holding the password (`password`, and `sasl.jaas.config` for Java
    /// clients); `tls`: the Secret holding the certificate (`ca.crt`, `user.crt`, `user.key`,
    /// and `user.p12` with `user.password` for Java clients). None for other users.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
}

impl KafkaUser {
    /// The name the user has to Kafka: `metadata.name`, or `CN=<name>` for a certificate.
    pub fn username(&self) -> String {
        let name = self.metadata.name.as_deref().unwrap_or_default();
        match self.spec.authentication.as_ref().map(|a| a.kind) {
            Some(UserAuthenticationType::Tls | UserAuthenticationType::TlsExternal) => {
                format!("CN={name}")
            }
            _ => name.to_string(),
        }
    }
}
