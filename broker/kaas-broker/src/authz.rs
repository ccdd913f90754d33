//! Authorization: Kafka's ACL model as its StandardAuthorizer applies it (`authorizer.class.name`
//! set, `super.users`, `allow.everyone.if.no.acl.found`).
//!
//! The ACLs live in one file on the volume, `__cluster/acls.json`, the only source of truth.
//! Seed 001's questions, answered once here:
//! - atomic primitive: the whole file is replaced by temp + fsync + rename + directory fsync
//!   (`kaas_shared::atomic_file::write_json`); a change is acknowledged only after that;
//! - idempotent and re-driven: a CreateAcls of an ACL that exists, or a DeleteAcls that
//!   matches nothing, changes nothing, so a client's retry is harmless;
//! - single writer: ACLs exist in local mode only, where this broker is the volume's one
//!   writer (a cluster-mode broker refuses `--authorizer`; see docs/security.md), and writes
//!   are serialised by one mutex, each rewriting the file from the set in memory.

pub mod index;
pub mod model;

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;

use kaas_shared::atomic_file;
use kaas_shared::fs::FsRef;
use kaas_shared::layout::Layout;
use parking_lot::{Mutex, RwLock};
use serde::{Deserialize, Serialize};

pub use self::index::{AclIndex, Action, Policy};
use self::model::{AclBinding, AclFilter, InvalidAcl, Operation, Principal, ResourceType};

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
#[derive(Debug, thiserror::Error)]
pub enum AclError {
    #[error(transparent)]
    Invalid(#[from] InvalidAcl),
    #[error("the broker keeps at most {0} ACLs (--max-acls)")]
    TooMany(usize),
    /// The file could not be written; nothing was changed.
    #[error("cannot write the ACLs: {0}")]
    Storage(String),
}

/// The ACL file's content.
#[derive(Debug, Default, Serialize, Deserialize)]
struct AclFile {
    acls: Vec<AclBinding>,
}

/// The broker's authorizer: the policy, the ACLs indexed, and their file.
#[derive(Debug)]
pub struct Authorizer {
    settings: AuthzSettings,
    index: RwLock<Arc<AclIndex>>,
    fs: FsRef,
    path: PathBuf,
    /// Serialises read-modify-write of the file (CreateAcls, DeleteAcls).
    writing: Mutex<()>,
}

impl Authorizer {
    /// Reads `__cluster/acls.json` (none yet: no ACLs).
    pub fn open(fs: FsRef, layout: &Layout, settings: AuthzSettings) -> Result<Authorizer, kaas_shared::Error> {
        let path = layout.cluster_dir().join("acls.json");
        let file: AclFile = atomic_file::read_json(&*fs, &path, "ACL file")?.unwrap_or_default();
        let index = RwLock::new(Arc::new(AclIndex::new(file.acls)));
        Ok(Authorizer { settings, index, fs, path, writing: Mutex::new(()) })
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
    /// replacement before any is answered as created. Blocking (file I/O).
    pub fn create(&self, new: Vec<AclBinding>) -> Vec<Result<(), AclError>> {
        let _writing = self.writing.lock();
        let mut acls = self.current().acls().to_vec();
        let mut results: Vec<Result<(), AclError>> = Vec::with_capacity(new.len());
        for acl in new {
            let result = acl.validate().map_err(AclError::from).and_then(|()| {
                if acls.contains(&acl) {
                    return Ok(()); // Kafka: creating an ACL that exists succeeds.
                }
                if acls.len() >= self.settings.max_acls {
                    return Err(AclError::TooMany(self.settings.max_acls));
                }
                acls.push(acl);
                Ok(())
            });
            results.push(result);
        }
        if let Err(e) = self.replace(acls) {
            let message = e.to_string();
            return results.into_iter().map(|r| r.and(Err(AclError::Storage(message.clone())))).collect();
        }
        results
    }

    /// Removes every ACL any filter matches; the ACLs each filter removed, once the file
    /// without them is fsynced. Blocking (file I/O).
    pub fn delete(&self, filters: &[AclFilter]) -> Result<Vec<Vec<AclBinding>>, AclError> {
        let _writing = self.writing.lock();
        let acls = self.current().acls().to_vec();
        let removed: Vec<Vec<AclBinding>> = filters.iter().map(|f| acls.iter().filter(|a| f.matches(a)).cloned().collect()).collect();
        if removed.iter().all(Vec::is_empty) {
            return Ok(removed);
        }
        let kept = acls.into_iter().filter(|a| !filters.iter().any(|f| f.matches(a))).collect();
        self.replace(kept).map_err(|e| AclError::Storage(e.to_string()))?;
        Ok(removed)
    }

    fn replace(&self, acls: Vec<AclBinding>) -> Result<(), kaas_shared::Error> {
        if acls.as_slice() == self.current().acls() {
            return Ok(());
        }
        let file = AclFile { acls };
        atomic_file::write_json(&*self.fs, &self.path, &file)?;
        *self.index.write() = Arc::new(AclIndex::new(file.acls));
        Ok(())
    }
}

#[cfg(test)]
#[path = "authz/tests.rs"]
mod tests;
