//! The kaas operator.
//!
//! Two roles in one binary (and one image):
//! - the **manager** (`kaas-operator run`) reconciles [`KafkaCluster`]s into a broker StatefulSet,
//!   its Services, RBAC, disruption budget, shared claim, and one **volume agent** per cluster;
//! - the **volume agent** (`kaas-operator volume-agent`), a one-replica Deployment that mounts
//!   its cluster's ReadWriteMany claim at `/data`, reconciles that cluster's [`KafkaTopic`]s into
//!   topic directories (identity stamp, topic.json) and reclaims the directories of deleted topics,
//!   and reconciles its [`KafkaUser`]s into `__cluster/kafka-users.json` and their Secrets.
//!
//! Why an agent per cluster rather than the manager mounting volumes: a Pod's volumes are fixed
//! when it starts, so a single manager could only reach claims known at its start; an agent per
//! cluster scales with clusters, keeps each claim mounted by exactly one extra pod, and makes the
//! agent the single writer of its volume's topic metadata (seed 001, rule 3). The manager never
//! touches a volume.
//!
//! Nothing here is a finalizer: deleting a KafkaTopic or a namespace never waits for this
//! operator. The delete flow converges from the volume and `assignment.json` (see [`sweep`]).
//!
//! [`KafkaCluster`]: kaas_shared::crd::KafkaCluster
//! [`KafkaTopic`]: kaas_shared::crd::KafkaTopic
//! [`KafkaUser`]: kaas_shared::crd::KafkaUser

pub mod backoff;
pub mod certificates;
pub mod cluster;
pub mod conditions;
pub mod crdgen;
pub mod diagnosis;
pub mod events;
pub mod external;
pub mod install;
pub mod leader;
pub mod metrics;
pub mod rbac;
pub mod readiness;
pub mod resources;
pub mod self_monitoring;
pub mod sweep;
pub mod topic;
pub mod triggers;
pub mod user;
pub mod validate;
pub mod versions;
pub mod volume;

/// The one field manager of every object and status this operator applies.
pub const FIELD_MANAGER: &str = "kaas-operator";

/// Errors of the operator. Each variant is also a reason in a condition or an event.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A Kubernetes API call failed.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// The on-volume contract refused something (I/O, a bad stamp, an identity mismatch).
    #[error("shared volume: {0}")]
    Volume(#[from] kaas_shared::Error),
    /// An object could not be serialised for server-side apply.
    #[error("serialising {what}: {source}")]
    Serialize {
        /// What was being serialised.
        what: &'static str,
        /// The serde error.
        #[source]
        source: serde_json::Error,
    },
    /// The object lacks a field the API server always sets (name, namespace, uid).
    #[error("{0} is missing from the object")]
    MissingField(&'static str),
    /// The Lease store failed (the in-memory store of tests).
    #[error("lease store: {0}")]
    LeaseStore(String),
    /// This replica does not hold its Lease (any more), so it must not act.
    #[error("not the leader: this replica does not hold the lease")]
    NotLeader,
    /// A blocking task (volume I/O) panicked or was cancelled.
    #[error("volume task: {0}")]
    Join(#[from] tokio::task::JoinError),
    /// A certificate the operator issues could not be made.
    #[error(transparent)]
    Certificate(#[from] certificates::CertificateError),
    /// The OS random source failed (a generated password).
    #[error("random source: {0}")]
    Random(String),
    /// A `tls` user's PKCS#12 keystore could not be made.
    #[error(transparent)]
    Keystore(#[from] user::keystore::KeystoreError),
}

/// Result with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// A short machine-readable name, used as an event reason and a metric label.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::Kube(_) => "KubernetesError",
            Error::Volume(_) => "VolumeError",
            Error::Serialize { .. } => "SerializeError",
            Error::MissingField(_) => "MissingField",
            Error::Join(_) => "VolumeTaskFailed",
            Error::Certificate(e) => e.reason(),
            Error::LeaseStore(_) => "LeaseStoreError",
            Error::NotLeader => "NotLeader",
            Error::Random(_) => "RandomSourceFailed",
            Error::Keystore(_) => "KeystoreError",
        }
    }
}
