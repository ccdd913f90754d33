//! The users SASL authenticates against: salted SCRAM credentials in one JSON file (a mounted
//! Secret in a cluster, a local file in local mode), read again when it changes, and in a
//! cluster its KafkaUsers ([`crate::kafka_users`]).
//!
//! ```json
//! {"users": {"alice": {"SCRAM-SHA-512": {"salt": "…", "iterations": 8192,
//!                                         "storedKey": "…", "serverKey": "…"}}}}
//! ```
//!
//! SASL/PLAIN checks a password against the same credentials, so no password is stored.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::RwLock;

use serde::{Deserialize, Serialize};

use super::scram::{ScramCredential, ScramHash};
use crate::reload::{Reloading, Stamp};

/// Every user's credentials, per SCRAM mechanism.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Users {
    pub users: BTreeMap<String, BTreeMap<ScramHash, ScramCredential>>,
}

impl Users {
    pub fn credential(&self, user: &str, hash: ScramHash) -> Option<ScramCredential> {
        self.users.get(user).and_then(|m| m.get(&hash)).cloned()
    }

    /// Parses the file's text; every credential's iteration count must be one Kafka accepts.
    pub fn parse(text: &str) -> Result<Users, String> {
        let users: Users = serde_json::from_str(text).map_err(|e| format!("not a credentials file: {e}"))?;
        for (name, credentials) in &users.users {
            for (hash, c) in credentials {
                if !hash.iterations_allowed(c.iterations) {
                    return Err(format!("user {name:?}: {} iterations {} outside 4096..=16384", hash.mechanism(), c.iterations));
                }
            }
        }
        Ok(users)
    }

    /// Sets (or replaces) `user`'s credential for one mechanism.
    pub fn set(&mut self, user: &str, hash: ScramHash, credential: ScramCredential) {
        self.users.entry(user.to_string()).or_default().insert(hash, credential);
    }

    /// Removes `user`'s credential for one mechanism (and the user once none is left);
    /// whether there was one.
    pub fn remove(&mut self, user: &str, hash: ScramHash) -> bool {
        let Some(credentials) = self.users.get_mut(user) else { return false };
        let removed = credentials.remove(&hash).is_some();
        if credentials.is_empty() {
            self.users.remove(user);
        }
        removed
    }

    /// Writes the file whole or not at all: a temporary file beside it, fsynced, renamed over
    /// it, and the directory fsynced, so a broker reading it (or a crash) never sees half.
    // NB: not `kaas_shared::atomic_file::write_atomic` (the volume's primitive, same steps): the
    // temp file must be created owner-only (salted credentials still allow offline guessing),
    // and a chmod after the rename would leave a window where it is readable by all.
    pub fn save(&self, path: &Path) -> std::io::Result<()> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let text = serde_json::to_vec_pretty(self).map_err(std::io::Error::other)?;
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let name = path.file_name().ok_or_else(|| std::io::Error::other("the credentials path names no file"))?;
        let tmp = dir.join(format!(".{}.tmp", name.to_string_lossy()));
        let mut file = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&tmp)?;
        file.write_all(&text)?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)?;
        std::fs::File::open(dir)?.sync_all()
    }

    /// Reads `path`; a missing file is an empty set of users (the first `set` creates it).
    pub fn load_or_empty(path: &Path) -> Result<Users, String> {
        if !path.exists() {
            return Ok(Users::default());
        }
        Users::load(path)
    }

    fn load(path: &Path) -> Result<Users, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
        Users::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }
}

/// The users SASL knows: those of the credentials file (as it is now), and in a cluster those
/// of its KafkaUsers ([`crate::kafka_users`]), which win where both name a user.
#[derive(Debug)]
pub struct CredentialStore {
    file: Option<CredentialFile>,
    /// The KafkaUsers' credentials, as the volume's KafkaUsers file last said.
    managed: RwLock<Arc<Users>>,
}

#[derive(Debug)]
struct CredentialFile {
    path: PathBuf,
    users: Reloading<Arc<Users>>,
    /// Serialises the broker's own changes (AlterUserScramCredentials).
    writing: parking_lot::Mutex<()>,
}

impl CredentialStore {
    /// Reads `path` once; a file that cannot be read or parsed stops the broker from starting.
    pub fn open(path: PathBuf) -> Result<CredentialStore, String> {
        let stamp = Stamp::of(std::slice::from_ref(&path));
        let first = Arc::new(Users::load(&path)?);
        let reload_path = path.clone();
        let users = Reloading::new("SASL credentials", vec![path.clone()], stamp, first, move || Users::load(&reload_path).map(Arc::new));
        let file = CredentialFile { path, users, writing: parking_lot::Mutex::new(()) };
        Ok(CredentialStore { file: Some(file), managed: RwLock::default() })
    }

    /// A store without a file: a cluster whose users are all KafkaUsers.
    pub fn managed_only() -> CredentialStore {
        CredentialStore { file: None, managed: RwLock::default() }
    }

    /// Changes the file: reads it as it is on disk (the CLI may have changed it since the last
    /// reload), applies `edit`, writes it whole and fsynced ([`Users::save`]), and serves the
    /// result at once. Returns what `edit` returned, once the change is durable. Blocking.
    pub fn edit<R>(&self, edit: impl FnOnce(&mut Users) -> R) -> Result<R, String> {
        let file = self.file.as_ref().ok_or("the broker has no credentials file (--sasl-credentials)")?;
        let _writing = file.writing.lock();
        let mut users = Users::load(&file.path)?;
        let result = edit(&mut users);
        users.save(&file.path).map_err(|e| format!("writing {}: {e}", file.path.display()))?;
        file.users.replace(Arc::new(users));
        Ok(result)
    }

    /// `user`'s credential for `hash`, if it has one.
    pub fn credential(&self, user: &str, hash: ScramHash) -> Option<ScramCredential> {
        let managed = self.managed.read().clone();
        match managed.users.get(user) {
            // A KafkaUser of that name decides alone (it may have no credential: a tls-external user).
            Some(credentials) => credentials.get(&hash).cloned(),
            None => self.file.as_ref().and_then(|f| f.users.get().credential(user, hash)),
        }
    }

    /// Every user with its credentials.
    pub fn users(&self) -> Arc<Users> {
        let managed = self.managed.read().clone();
        let Some(file) = &self.file else { return managed };
        let mut all = (*file.users.get()).clone();
        all.users.extend(managed.users.iter().map(|(name, c)| (name.clone(), c.clone())));
        Arc::new(all)
    }

    /// Serves the KafkaUsers' credentials from now on.
    pub fn serve_managed(&self, users: Users) {
        *self.managed.write() = Arc::new(users);
    }
}
