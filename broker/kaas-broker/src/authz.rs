//! Authorization: Kafka's ACL model as its StandardAuthorizer applies it (`authorizer.class.name`
//! set, `super.users`, `allow.everyone.if.no.acl.found`).
//!
//! The ACLs live in one file on the volume, `__cluster/acls.json`, the only source of truth,
//! written as [`crate::controller_file`] says: in local mode by the broker, in a cluster by the
//! controller broker (the others forward CreateAcls and DeleteAcls to it); every broker of a
//! cluster reads the file again every second ([`Authorizer::refresh`]). Beside them, a cluster's
//! brokers enforce the ACLs of its KafkaUsers ([`Authorizer::serve_kafka_users`]).

pub mod index;
pub mod model;

use std::net::IpAddr;
use std::sync::Arc;

use kaas_shared::fs::FsRef;
use kaas_shared::layout::Layout;
use parking_lot::{Mutex, RwLock};
use serde::{Deserialize, Serialize};

pub use self::index::{AclIndex, Action, Policy};
use self::model::{AclBinding, AclFilter, InvalidAcl, Operation, Principal, ResourceType};
use crate::controller_file::{ControllerFile, WriteError};

/// `--authorizer standard`'s settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthzSettings {
    pub policy: Policy,
    /// The most ACLs the broker keeps; a CreateAcls beyond it is refused.
    pub max_acls: usize,
}

impl Default for AuthzSettings {
    fn default() -> Self {
        AuthzSettings { policy: Policy::default(), max_acls: 10_000 }
    }
}

/// Why an ACL change was refused.
#[derive(Debug, Clone, thiserror::Error)]
pub enum AclError {
    #[error(transparent)]
    Invalid(#[from] InvalidAcl),
    #[error("the broker keeps at most {0} ACLs (--max-acls)")]
    TooMany(usize),
    /// The file was not changed: it could not be written, or a newer controller wrote it.
    #[error("the ACLs were not changed: {0}")]
    File(#[from] WriteError),
}

/// The ACL file's content.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
struct AclFile {
    acls: Vec<AclBinding>,
}

/// The broker's authorizer: the policy, the ACLs indexed, and their file.
#[derive(Debug)]
pub struct Authorizer {
    settings: AuthzSettings,
    /// The file's ACLs and the KafkaUsers', together.
    index: RwLock<Arc<AclIndex>>,
    /// What `index` was built from: the file's ACLs, and the KafkaUsers' ([`crate::kafka_users`]).
    sources: Mutex<AclSources>,
    file: ControllerFile,
}

#[derive(Debug, Default)]
struct AclSources {
    file: Vec<AclBinding>,
    kafka_users: Vec<AclBinding>,
}

impl AclSources {
    /// Both sources' ACLs, each once.
    fn index(&self) -> AclIndex {
        let mut seen = std::collections::HashSet::new();
        AclIndex::new(self.file.iter().chain(&self.kafka_users).filter(|a| seen.insert(*a)).cloned().collect())
    }
}

impl Authorizer {
    /// Reads `__cluster/acls.json` (none yet: no ACLs).
    pub fn open(fs: FsRef, layout: &Layout, settings: AuthzSettings) -> Result<Authorizer, kaas_shared::Error> {
        let file = ControllerFile::new(fs, layout.cluster_dir().join("acls.json"), "ACL file");
        let sources = AclSources { file: file.read::<AclFile>()?.acls, kafka_users: Vec::new() };
        let index = RwLock::new(Arc::new(sources.index()));
        Ok(Authorizer { settings, index, sources: Mutex::new(sources), file })
    }

    /// Reads the file again and serves what it holds: in a cluster another broker (the
    /// controller) may have changed it. Blocking (file I/O).
    pub fn refresh(&self) -> Result<(), kaas_shared::Error> {
        self.file.refresh(|file: AclFile| self.serve(&file))
    }

    fn serve(&self, file: &AclFile) {
        let mut sources = self.sources.lock();
        if sources.file != file.acls {
            tracing::info!(acls = file.acls.len(), before = sources.file.len(), "serving the ACL file's ACLs");
            sources.file = file.acls.clone();
            *self.index.write() = Arc::new(sources.index());
        }
    }

    /// Enforces the KafkaUsers' ACLs from now on, beside the file's. They are not the file's:
    /// DeleteAcls does not remove them (their KafkaUser is changed instead).
    pub fn serve_kafka_users(&self, acls: Vec<AclBinding>) {
        let mut sources = self.sources.lock();
        if sources.kafka_users != acls {
            sources.kafka_users = acls;
            *self.index.write() = Arc::new(sources.index());
        }
    }

    fn current(&self) -> Arc<AclIndex> {
        self.index.read().clone()
    }

    /// Whether `principal` from `host` may do `action`.
    pub fn authorize(&self, principal: Principal<'_>, host: IpAddr, action: Action<'_>) -> bool {
        self.index.read().authorize(&self.settings.policy, principal, host, action)
    }

    /// Whether `principal` may do `operation` on some resource of the type.
    pub fn authorize_any(&self, principal: Principal<'_>, host: IpAddr, resource_type: ResourceType, operation: Operation) -> bool {
        self.index.read().authorize_any(&self.settings.policy, principal, host, resource_type, operation)
    }

    /// The operations of the type's supported set that `principal` may do on the resource
    /// (`authorized_operations` in Metadata, DescribeGroups, DescribeCluster).
    pub fn authorized_operations(&self, principal: Principal<'_>, host: IpAddr, resource_type: ResourceType, name: &str) -> Vec<Operation> {
        let index = self.current();
        resource_type
            .supported_operations()
            .iter()
            .copied()
            .filter(|&operation| index.authorize(&self.settings.policy, principal, host, Action { operation, resource_type, name }))
            .collect()
    }

    /// The ACLs `filter` matches.
    pub fn describe(&self, filter: &AclFilter) -> Vec<AclBinding> {
        self.current().acls().iter().filter(|a| filter.matches(a)).cloned().collect()
    }

    /// Adds ACLs, answering for each; the valid ones are written in one fsynced file
    /// replacement before any is answered as created. `epoch` is the writer's: the controller's
    /// Lease epoch in a cluster, 0 in local mode. Blocking (file I/O).
    pub fn create(&self, new: Vec<AclBinding>, epoch: i64) -> Vec<Result<(), AclError>> {
        let checked: Vec<Result<AclBinding, AclError>> =
            new.into_iter().map(|acl| acl.validate().map(|()| acl).map_err(AclError::from)).collect();
        let max_acls = self.settings.max_acls;
        let added = self.file.update(
            epoch,
            |file| self.serve(file),
            |file: &mut AclFile| {
                let mut add = |acl: &AclBinding| {
                    if file.acls.contains(acl) {
                        return Ok(()); // Kafka: creating an ACL that exists succeeds.
                    }
                    if file.acls.len() >= max_acls {
                        return Err(AclError::TooMany(max_acls));
                    }
                    file.acls.push(acl.clone());
                    Ok(())
                };
                checked.iter().map(|c| c.as_ref().map_err(Clone::clone).and_then(&mut add)).collect::<Vec<_>>()
            },
        );
        match added {
            Ok(results) => results,
            Err(e) => {
                let e = AclError::from(e);
                checked.into_iter().map(|c| c.and(Err(e.clone()))).collect()
            }
        }
    }

    /// Removes every ACL any filter matches; the ACLs each filter removed, once the file
    /// without them is fsynced. Blocking (file I/O).
    pub fn delete(&self, filters: &[AclFilter], epoch: i64) -> Result<Vec<Vec<AclBinding>>, AclError> {
        let removed = self.file.update(
            epoch,
            |file| self.serve(file),
            |file: &mut AclFile| {
                let removed: Vec<Vec<AclBinding>> =
                    filters.iter().map(|f| file.acls.iter().filter(|a| f.matches(a)).cloned().collect()).collect();
                file.acls.retain(|a| !filters.iter().any(|f| f.matches(a)));
                removed
            },
        )?;
        Ok(removed)
    }
}

#[cfg(test)]
#[path = "authz/tests.rs"]
mod tests;
