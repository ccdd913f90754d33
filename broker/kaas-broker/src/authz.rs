//! Authorization: Kafka's ACL model as its StandardAuthorizer applies it (`authorizer.class.name`
//! set, `super.users`, `allow.everyone.if.no.acl.found`).
//!
//! The ACLs live in one file on the volume, `__cluster/acls.json`, the only source of truth.
//! Seed 001's questions, answered once here:
//! - atomic primitive: the whole file is replaced by temp + fsync + rename + directory fsync
//!   (`kaas_shared::atomic_file::write_json`); a change is acknowledged only after that;
//! - idempotent and re-driven: a CreateAcls of an ACL that exists, or a DeleteAcls that
//!   matches nothing, changes nothing, so a client's retry is harmless;
//! - single writer: in local mode the broker; in a cluster the controller broker (the others
//!   forward CreateAcls and DeleteAcls to it), which stamps the file with its Lease epoch and
//!   writes only over a file of its epoch or an older one. Writes are serialised by one mutex,
//!   each rewriting the file from what is on disk. Every broker of a cluster reads the file
//!   again every second ([`Authorizer::refresh`]).

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
#[derive(Debug, Clone, thiserror::Error)]
pub enum AclError {
    #[error(transparent)]
    Invalid(#[from] InvalidAcl),
    #[error("the broker keeps at most {0} ACLs (--max-acls)")]
    TooMany(usize),
    /// The file could not be written; nothing was changed.
    #[error("cannot write the ACLs: {0}")]
    Storage(String),
    /// A newer controller wrote the file: this broker is no longer the ACLs' writer.
    #[error("the ACLs were written by a newer controller (epoch {found}, this broker's {ours})")]
    NotController { found: i64, ours: i64 },
}

/// The ACL file's content.
#[derive(Debug, Default, Serialize, Deserialize)]
struct AclFile {
    acls: Vec<AclBinding>,
    /// The Lease epoch of the controller that wrote it (0: a local-mode broker).
    #[serde(default, skip_serializing_if = "is_zero")]
    controller_epoch: i64,
}

fn is_zero(epoch: &i64) -> bool {
    *epoch == 0
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
        let file = read_file(&*fs, &path)?;
        let index = RwLock::new(Arc::new(AclIndex::new(file.acls)));
        Ok(Authorizer { settings, index, fs, path, writing: Mutex::new(()) })
    }

    /// Reads the file again and serves what it holds: in a cluster another broker (the
    /// controller) may have changed it. Blocking (file I/O).
    pub fn refresh(&self) -> Result<(), kaas_shared::Error> {
        // NB: not beside a change of this broker's, which would be served for a moment and then
        // replaced by the older file read before it.
        let _writing = self.writing.lock();
        let file = read_file(&*self.fs, &self.path)?;
        self.serve(file.acls);
        Ok(())
    }

    fn serve(&self, acls: Vec<AclBinding>) {
        if acls.as_slice() != self.current().acls() {
            *self.index.write() = Arc::new(AclIndex::new(acls));
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
        let _writing = self.writing.lock();
        let mut acls = match self.latest(epoch) {
            Ok(acls) => acls,
            Err(e) => return new.iter().map(|_| Err(e.clone())).collect(),
        };
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
        if let Err(e) = self.replace(acls, epoch) {
            let message = e.to_string();
            return results.into_iter().map(|r| r.and(Err(AclError::Storage(message.clone())))).collect();
        }
        results
    }

    /// Removes every ACL any filter matches; the ACLs each filter removed, once the file
    /// without them is fsynced. Blocking (file I/O).
    pub fn delete(&self, filters: &[AclFilter], epoch: i64) -> Result<Vec<Vec<AclBinding>>, AclError> {
        let _writing = self.writing.lock();
        let acls = self.latest(epoch)?;
        let removed: Vec<Vec<AclBinding>> = filters.iter().map(|f| acls.iter().filter(|a| f.matches(a)).cloned().collect()).collect();
        if removed.iter().all(Vec::is_empty) {
            return Ok(removed);
        }
        let kept = acls.into_iter().filter(|a| !filters.iter().any(|f| f.matches(a))).collect();
        self.replace(kept, epoch).map_err(|e| AclError::Storage(e.to_string()))?;
        Ok(removed)
    }

    /// The ACLs on disk, which a change starts from (a previous controller may have written
    /// since this broker last read them), served from now on; refused when a newer
    /// controller wrote them. Called holding `writing`.
    fn latest(&self, epoch: i64) -> Result<Vec<AclBinding>, AclError> {
        let file = read_file(&*self.fs, &self.path).map_err(|e| AclError::Storage(e.to_string()))?;
        if file.controller_epoch > epoch {
            return Err(AclError::NotController { found: file.controller_epoch, ours: epoch });
        }
        self.serve(file.acls.clone());
        Ok(file.acls)
    }

    fn replace(&self, acls: Vec<AclBinding>, epoch: i64) -> Result<(), kaas_shared::Error> {
        if acls.as_slice() == self.current().acls() {
            return Ok(());
        }
        let file = AclFile { acls, controller_epoch: epoch };
        atomic_file::write_json(&*self.fs, &self.path, &file)?;
        *self.index.write() = Arc::new(AclIndex::new(file.acls));
        Ok(())
    }
}

fn read_file(fs: &dyn kaas_shared::fs::Fs, path: &std::path::Path) -> Result<AclFile, kaas_shared::Error> {
    Ok(atomic_file::read_json(fs, path, "ACL file")?.unwrap_or_default())
}

#[cfg(test)]
#[path = "authz/tests.rs"]
mod tests;
