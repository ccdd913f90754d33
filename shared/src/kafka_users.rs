//! `__cluster/kafka-users.json`: what the cluster's KafkaUsers say — each user's salted SCRAM
//! credentials, ACLs and quotas — for the brokers to enforce.
//!
//! Seed 001's three questions:
//! 1. Atomic primitive: the file is replaced whole ([`write`]: temp file, fsync, rename, fsync of
//!    the directory), so a broker reads the old or the new content, never half.
//! 2. Re-driven: each KafkaUser's reconcile sets its entry (setting what is there already writes
//!    nothing) and the agent's periodic sweep removes the entries of deleted users, so the file
//!    converges from any interruption.
//! 3. One writer: the cluster's volume agent, fenced by its Lease (every write runs under the
//!    agent's volume lock after a leadership check, as its topic.json writes do). Brokers only
//!    read it, every second. The file's `revision` grows with each write; an entry records the
//!    revision that wrote it, so a sweep that listed the live users at revision `r` removes only
//!    entries written at or before `r` — never one of a user created after the listing.
//!
//! The ACL and quota types are the KafkaUser's own (Strimzi's vocabulary); the broker maps them
//! to Kafka's. Salted credentials are as safe on the volume as the data: whoever can read the
//! volume can read every record already (seed 000: the volume is the trust boundary).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::Result;
use crate::atomic_file::{read_json, write_json};
use crate::fs::Fs;
use crate::layout::Layout;
use crate::scram::{ScramCredential, ScramHash};

/// The file's content.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KafkaUsersFile {
    /// One more with each write.
    #[serde(default)]
    pub revision: u64,
    /// By user name (the principal is `User:<name>`).
    #[serde(default)]
    pub users: BTreeMap<String, KafkaUserEntry>,
}

/// One KafkaUser as brokers enforce it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KafkaUserEntry {
    /// The KafkaUser's `metadata.uid`.
    pub uid: String,
    /// The file revision that last wrote this entry.
    #[serde(default)]
    pub revision: u64,
    /// Salted SCRAM credentials, one per mechanism (none for users who authenticate otherwise).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub scram: BTreeMap<ScramHash, ScramCredential>,
    /// The user's ACLs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub acls: Vec<AclRule>,
    /// The user's quotas.
    #[serde(default, skip_serializing_if = "UserQuotas::is_empty")]
    pub quotas: UserQuotas,
}

/// One ACL rule of a KafkaUser (Strimzi's `acls[]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "crd", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct AclRule {
    /// What the rule is about.
    pub resource: AclResource,
    /// The operations it allows or denies.
    #[cfg_attr(feature = "crd", schemars(length(min = 1, max = 11)))]
    pub operations: Vec<AclOperation>,
    /// The client address it applies to (`*`, the default: any).
    #[serde(default = "any_host")]
    #[cfg_attr(feature = "crd", schemars(length(min = 1, max = 45)))]
    pub host: String,
    /// `allow` (the default) or `deny`; a deny wins over any allow.
    #[serde(rename = "type", default)]
    pub permission: AclPermission,
}

fn any_host() -> String {
    "*".to_string()
}

/// An ACL rule's resource.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "crd", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct AclResource {
    /// `topic`, `group`, `transactionalId` or `cluster`.
    #[serde(rename = "type")]
    pub kind: AclResourceType,
    /// The resource's name (or its prefix, or `*` for all); none for `cluster`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "crd", schemars(length(min = 1, max = 255)))]
    pub name: Option<String>,
    /// `literal` (the default: the name itself, or every name for `*`) or `prefix`.
    #[serde(default)]
    pub pattern_type: AclPatternType,
}

/// The resource types of ACL rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "crd", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub enum AclResourceType {
    /// A topic.
    Topic,
    /// A consumer group.
    Group,
    /// A transactional id.
    TransactionalId,
    /// The cluster.
    Cluster,
}

/// How a rule's resource name matches.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "crd", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub enum AclPatternType {
    /// The name itself (`*`: every name).
    #[default]
    Literal,
    /// Every name that starts with it.
    Prefix,
}

/// Kafka's ACL operations, as Strimzi spells them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "crd", derive(schemars::JsonSchema))]
#[allow(missing_docs)]
pub enum AclOperation {
    Read,
    Write,
    Create,
    Delete,
    Alter,
    Describe,
    ClusterAction,
    AlterConfigs,
    DescribeConfigs,
    IdempotentWrite,
    All,
}

/// Allow or deny.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "crd", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub enum AclPermission {
    /// The rule allows its operations.
    #[default]
    Allow,
    /// The rule denies them (a deny wins).
    Deny,
}

/// A KafkaUser's quotas (Strimzi's `quotas`; Kafka's `user` entity quotas).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "crd", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct UserQuotas {
    /// Bytes a second the user may produce (`producer_byte_rate`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "crd", schemars(range(min = 1)))]
    pub producer_byte_rate: Option<i64>,
    /// Bytes a second the user may fetch (`consumer_byte_rate`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "crd", schemars(range(min = 1)))]
    pub consumer_byte_rate: Option<i64>,
    /// Percent of one request thread's time the user's requests may take (`request_percentage`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "crd", schemars(range(min = 1)))]
    pub request_percentage: Option<i32>,
    /// Partitions a second the user may create, add or delete (`controller_mutation_rate`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "crd", schemars(range(min = 0.0)))]
    pub controller_mutation_rate: Option<f64>,
}

impl UserQuotas {
    /// Whether no quota is set.
    pub fn is_empty(&self) -> bool {
        self == &UserQuotas::default()
    }

    /// The quotas set, under Kafka's names.
    pub fn by_kafka_name(&self) -> Vec<(&'static str, f64)> {
        [
            (
                "producer_byte_rate",
                self.producer_byte_rate.map(|v| v as f64),
            ),
            (
                "consumer_byte_rate",
                self.consumer_byte_rate.map(|v| v as f64),
            ),
            ("request_percentage", self.request_percentage.map(f64::from)),
            ("controller_mutation_rate", self.controller_mutation_rate),
        ]
        .into_iter()
        .filter_map(|(name, value)| value.map(|v| (name, v)))
        .collect()
    }
}

impl KafkaUsersFile {
    /// Sets `name`'s entry (its `revision` is ignored), and removes the entry of the same
    /// KafkaUser (uid) under another name (a user whose name to Kafka changed); whether that
    /// changed the file, in which case the file's revision grew and the entry carries it.
    pub fn set(&mut self, name: &str, mut entry: KafkaUserEntry) -> bool {
        let before = self.users.len();
        self.users
            .retain(|other, e| other.as_str() == name || e.uid != entry.uid);
        let renamed = self.users.len() != before;
        if let Some(current) = self.users.get(name) {
            entry.revision = current.revision;
            if *current == entry && !renamed {
                return false;
            }
        }
        self.revision += 1;
        entry.revision = self.revision;
        self.users.insert(name.to_string(), entry);
        true
    }

    /// Removes the entries of users that are not `live` (by uid) and were written at or before
    /// `listed_at` (the file's revision when `live` was listed); the names removed. The file's
    /// revision grows when something was removed.
    pub fn remove_dead(&mut self, live: &BTreeSet<String>, listed_at: u64) -> Vec<String> {
        let dead: Vec<String> = self
            .users
            .iter()
            .filter(|(_, e)| e.revision <= listed_at && !live.contains(&e.uid))
            .map(|(name, _)| name.clone())
            .collect();
        for name in &dead {
            self.users.remove(name);
        }
        if !dead.is_empty() {
            self.revision += 1;
        }
        dead
    }
}

/// Reads the file (none yet: no users).
pub fn read(fs: &dyn Fs, layout: &Layout) -> Result<KafkaUsersFile> {
    Ok(read_json(fs, &layout.kafka_users_file(), "KafkaUsers file")?.unwrap_or_default())
}

/// Replaces the file whole ([`crate::atomic_file::write_atomic`]).
pub fn write(fs: &dyn Fs, layout: &Layout, file: &KafkaUsersFile) -> Result<()> {
    write_json(fs, &layout.kafka_users_file(), file)
}

/// A user's SCRAM credential for `password`: the one it has when that password still matches
/// (a reconcile does not rewrite the file with a new salt each time), else a fresh salt's.
pub fn scram_credential(
    existing: Option<&ScramCredential>,
    hash: ScramHash,
    password: &[u8],
) -> ScramCredential {
    match existing {
        Some(c) if hash.iterations_allowed(c.iterations) && c.matches_password(hash, password) => {
            c.clone()
        }
        _ => ScramCredential::derive(
            hash,
            password,
            &crate::scram::random_bytes::<32>(),
            SCRAM_ITERATIONS,
        ),
    }
}

/// The iteration count of KafkaUsers' credentials (Kafka's minimum, Strimzi's choice).
pub const SCRAM_ITERATIONS: u32 = 4096;

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::fs::MemFs;

    fn entry(uid: &str) -> KafkaUserEntry {
        KafkaUserEntry {
            uid: uid.into(),
            ..KafkaUserEntry::default()
        }
    }

    #[test]
    fn setting_the_same_entry_writes_nothing_and_a_change_takes_a_new_revision() {
        let mut file = KafkaUsersFile::default();
        assert!(file.set("alice", entry("u1")));
        assert_eq!((file.revision, file.users["alice"].revision), (1, 1));
        assert!(!file.set("alice", entry("u1")));
        assert_eq!(file.revision, 1);
        let mut changed = entry("u1");
        changed.quotas.producer_byte_rate = Some(1024);
        assert!(file.set("alice", changed));
        assert_eq!((file.revision, file.users["alice"].revision), (2, 2));
    }

    #[test]
    fn a_sweep_removes_dead_users_but_not_one_written_after_its_listing() {
        let mut file = KafkaUsersFile::default();
        file.set("alice", entry("u1"));
        file.set("bob", entry("u2"));
        let listed_at = file.revision;
        // carol is created (and written) after the sweep listed the live users.
        file.set("carol", entry("u3"));
        let live: BTreeSet<String> = ["u1".to_string()].into();
        assert_eq!(file.remove_dead(&live, listed_at), vec!["bob".to_string()]);
        assert_eq!(file.users.keys().collect::<Vec<_>>(), ["alice", "carol"]);
        assert_eq!(file.revision, 4);
    }

    #[test]
    fn a_credential_keeps_its_salt_while_the_password_matches() {
        let first = scram_credential(None, ScramHash::Sha512, b"secret");
        assert_eq!(
            scram_credential(Some(&first), ScramHash::Sha512, b"secret"),
            first
        );
        let other = scram_credential(Some(&first), ScramHash::Sha512, b"changed");
        assert_ne!(other.salt, first.salt);
        assert!(other.matches_password(ScramHash::Sha512, b"changed"));
    }

    #[test]
    fn the_file_round_trips_through_the_volume() {
        let fs = MemFs::new();
        let layout = Layout::new("/data");
        fs.create_dir_all(&layout.cluster_dir()).unwrap();
        assert_eq!(read(&fs, &layout).unwrap(), KafkaUsersFile::default());
        let mut file = KafkaUsersFile::default();
        let mut alice = entry("u1");
        alice.scram.insert(
            ScramHash::Sha512,
            scram_credential(None, ScramHash::Sha512, b"pw"),
        );
        alice.acls.push(AclRule {
            resource: AclResource {
                kind: AclResourceType::Topic,
                name: Some("orders".into()),
                pattern_type: AclPatternType::Prefix,
            },
            operations: vec![AclOperation::Read, AclOperation::Describe],
            host: "*".into(),
            permission: AclPermission::Allow,
        });
        file.set("alice", alice);
        write(&fs, &layout, &file).unwrap();
        assert_eq!(read(&fs, &layout).unwrap(), file);
    }
}
