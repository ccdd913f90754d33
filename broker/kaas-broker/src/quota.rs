//! Client quotas: produce and fetch byte rates and request time per user and client id, as
//! Kafka's `ClientQuotaManager` applies them — a request is served, its bytes are counted in the
//! sensor of the entity whose quota applies, and a client over its bound is told how long to
//! wait (`throttle_time_ms`) while its connection reads nothing more for that long (KIP-219) —
//! and new connections a second per address (KIP-612: one over the rate is closed at once).
//!
//! The quotas live in one file on the volume, `__cluster/quotas.json`, the only source of
//! truth. Seed 001's questions, answered once here:
//! - atomic primitive: the whole file is replaced by temp + fsync + rename + directory fsync
//!   (`kaas_shared::atomic_file::write_json`); a change is acknowledged only after that;
//! - idempotent and re-driven: an AlterClientQuotas sets or removes values, so a client's
//!   retry leaves the same file;
//! - single writer: quotas are changed in local mode only, where this broker is the volume's
//!   one writer (a cluster-mode broker refuses AlterClientQuotas, see docs/security.md), and
//!   writes are serialised by one mutex, each rewriting the file from the table in memory.

pub mod model;
pub mod rate;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use kaas_shared::atomic_file;
use kaas_shared::fs::FsRef;
use kaas_shared::layout::Layout;
use parking_lot::{Mutex, RwLock};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use self::model::{Entity, InvalidQuota, QuotaFilter, QuotaKey, QuotaTable, SensorKey};
use self::rate::Rate;

/// The most quota entities kept; an AlterClientQuotas adding more is refused.
pub const MAX_ENTITIES: usize = 10_000;
/// The most sensors (clients counted apart) kept at once; idle ones are dropped to make room,
/// and beyond it new clients are not counted until some go idle.
pub const MAX_SENSORS: usize = 100_000;

/// Why a quota change was refused.
#[derive(Debug, thiserror::Error)]
pub enum QuotaError {
    #[error(transparent)]
    Invalid(#[from] InvalidQuota),
    #[error("the broker keeps at most {MAX_ENTITIES} quota entities")]
    TooMany,
    #[error("client quotas are changed on a broker in local mode only for now: a cluster has no single writer of them yet")]
    ClusterMode,
    /// The file could not be written; nothing was changed.
    #[error("cannot write the quotas: {0}")]
    Storage(String),
}

/// One entity's requested change: each key set to a value, or removed (`None`).
#[derive(Debug, Clone, PartialEq)]
pub struct QuotaChange {
    pub entity: Entity,
    pub ops: Vec<(QuotaKey, Option<f64>)>,
}

/// The quota file's content.
#[derive(Debug, Default, Serialize, Deserialize)]
struct QuotaFile {
    quotas: Vec<StoredQuota>,
}

#[derive(Debug, Serialize, Deserialize)]
struct StoredQuota {
    entity: Entity,
    values: std::collections::BTreeMap<QuotaKey, f64>,
}

/// The broker's client quotas: the table, its file, and the sensors of the clients it counts.
#[derive(Debug)]
pub struct ClientQuotas {
    table: RwLock<Arc<QuotaTable>>,
    /// The keys some entity sets, one bit each: a key nobody sets costs a request one atomic
    /// load.
    keys_in_use: AtomicU8,
    sensors: Mutex<HashMap<SensorKey, Rate>>,
    fs: FsRef,
    path: PathBuf,
    /// Whether this broker may change the file (local mode).
    writable: bool,
    /// Serialises read-modify-write of the file.
    writing: Mutex<()>,
}

impl ClientQuotas {
    /// Reads `__cluster/quotas.json` (none yet: no quotas).
    pub fn open(fs: FsRef, layout: &Layout, writable: bool) -> Result<ClientQuotas, kaas_shared::Error> {
        let path = layout.cluster_dir().join("quotas.json");
        let file: QuotaFile = atomic_file::read_json(&*fs, &path, "quota file")?.unwrap_or_default();
        let table: QuotaTable = file.quotas.into_iter().map(|q| (q.entity, q.values)).collect();
        Ok(ClientQuotas {
            keys_in_use: AtomicU8::new(keys_in_use(&table)),
            table: RwLock::new(Arc::new(table)),
            sensors: Mutex::new(HashMap::new()),
            fs,
            path,
            writable,
            writing: Mutex::new(()),
        })
    }

    fn current(&self) -> Arc<QuotaTable> {
        self.table.read().clone()
    }

    /// Whether some entity sets `key` (one atomic load): callers skip counting work otherwise.
    pub fn in_use(&self, key: QuotaKey) -> bool {
        self.keys_in_use.load(Ordering::Relaxed) & key.bit() != 0
    }

    /// The quota under `key` that applies to the client, if any entity sets the key.
    fn applicable(&self, key: QuotaKey, user: &str, client_id: &str) -> Option<model::Applicable> {
        if !self.in_use(key) {
            return None;
        }
        model::applicable(&self.current(), key, user, client_id)
    }

    /// Counts `amount` for the client and answers how long it must now wait: nothing when no
    /// quota applies (and, when no entity sets the key, at the cost of one atomic load).
    pub fn record(&self, key: QuotaKey, user: &str, client_id: &str, amount: f64, now: Instant) -> Duration {
        let Some(applicable) = self.applicable(key, user, client_id) else { return Duration::ZERO };
        self.count(applicable, amount, now)
    }

    /// How long the client must wait under `key` now, counting nothing (KIP-599's strict check:
    /// whether it is over its quota already).
    pub fn current_throttle(&self, key: QuotaKey, user: &str, client_id: &str, now: Instant) -> Duration {
        let Some(applicable) = self.applicable(key, user, client_id) else { return Duration::ZERO };
        let mut sensors = self.sensors.lock();
        let Some(sensor) = sensors.get_mut(&applicable.sensor) else { return Duration::ZERO };
        let (measured, span) = sensor.measure(now);
        rate::throttle(measured, applicable.bound, span)
    }

    /// Counts a new connection from `ip` and answers how long it would have to wait to be
    /// within its address's connection_creation_rate (nothing: admit it).
    pub fn record_connection(&self, ip: std::net::IpAddr, now: Instant) -> Duration {
        if !self.in_use(QuotaKey::ConnectionCreationRate) {
            return Duration::ZERO;
        }
        let table = self.current();
        let Some(applicable) = model::applicable_to_address(&table, ip) else { return Duration::ZERO };
        self.count(applicable, 1.0, now)
    }

    fn count(&self, applicable: model::Applicable, amount: f64, now: Instant) -> Duration {
        let mut sensors = self.sensors.lock();
        if !sensors.contains_key(&applicable.sensor) && sensors.len() >= MAX_SENSORS {
            let idle_after = rate::WINDOW * rate::SAMPLES;
            sensors.retain(|_, r| now.saturating_duration_since(r.last_recorded) < idle_after);
            if sensors.len() >= MAX_SENSORS {
                return Duration::ZERO;
            }
        }
        let sensor = sensors.entry(applicable.sensor).or_insert_with(|| Rate::new(now));
        sensor.record_throttle(amount, applicable.bound, now)
    }

    /// The most one response may carry for the client under `key`, if a quota applies.
    pub fn max_in_window(&self, key: QuotaKey, user: &str, client_id: &str) -> Option<f64> {
        self.applicable(key, user, client_id).map(|a| rate::max_in_window(a.bound))
    }

    /// The entities `filter` matches, with their values.
    pub fn describe(&self, filter: &QuotaFilter) -> Vec<(Entity, Vec<(QuotaKey, f64)>)> {
        let table = self.current();
        table
            .iter()
            .filter(|(entity, _)| filter.matches(entity))
            .map(|(entity, values)| (entity.clone(), values.iter().map(|(k, v)| (*k, *v)).collect()))
            .collect()
    }

    /// Applies the valid changes, answering for each; they are written in one fsynced file
    /// replacement before any is answered. With `validate_only` nothing is written. Blocking
    /// (file I/O).
    pub fn alter(&self, changes: Vec<Result<QuotaChange, InvalidQuota>>, validate_only: bool) -> Vec<Result<(), QuotaError>> {
        if !self.writable {
            return changes.into_iter().map(|c| c.map_err(QuotaError::from).and(Err(QuotaError::ClusterMode))).collect();
        }
        let _writing = self.writing.lock();
        let mut table = (*self.current()).clone();
        let mut results: Vec<Result<(), QuotaError>> = Vec::with_capacity(changes.len());
        for change in changes {
            let result = change.map_err(QuotaError::from).and_then(|change| apply(&mut table, change));
            results.push(result);
        }
        if validate_only {
            return results;
        }
        if let Err(e) = self.replace(table) {
            let message = e.to_string();
            return results.into_iter().map(|r| r.and(Err(QuotaError::Storage(message.clone())))).collect();
        }
        results
    }

    fn replace(&self, table: QuotaTable) -> Result<(), kaas_shared::Error> {
        if table == *self.current() {
            return Ok(());
        }
        let file = QuotaFile {
            quotas: table.iter().map(|(entity, values)| StoredQuota { entity: entity.clone(), values: values.clone() }).collect(),
        };
        if let Some(dir) = self.path.parent() {
            self.fs.create_dir_all(dir).map_err(|e| kaas_shared::Error::io("mkdir", dir, e))?;
        }
        atomic_file::write_json(&*self.fs, &self.path, &file)?;
        self.keys_in_use.store(keys_in_use(&table), Ordering::Relaxed);
        *self.table.write() = Arc::new(table);
        Ok(())
    }
}

fn keys_in_use(table: &QuotaTable) -> u8 {
    table.values().flat_map(|values| values.keys()).fold(0, |bits, key| bits | key.bit())
}

/// Applies one change to the table: values set or removed, an entity left without values
/// removed; refused whole if any value is invalid or the table would outgrow its bound.
fn apply(table: &mut QuotaTable, change: QuotaChange) -> Result<(), QuotaError> {
    let mut values = table.get(&change.entity).cloned().unwrap_or_default();
    let mut seen = std::collections::BTreeSet::new();
    for (key, value) in &change.ops {
        if !seen.insert(*key) {
            return Err(InvalidQuota::DuplicateKey(key.name().to_string()).into());
        }
        match value {
            Some(v) => {
                key.validate(&change.entity, *v)?;
                values.insert(*key, *v);
            }
            None => {
                values.remove(key);
            }
        }
    }
    if values.is_empty() {
        table.remove(&change.entity);
    } else {
        if !table.contains_key(&change.entity) && table.len() >= MAX_ENTITIES {
            return Err(QuotaError::TooMany);
        }
        table.insert(change.entity, values);
    }
    Ok(())
}

/// A connection's mute: while a throttle runs, the connection reads no request (KIP-219: the
/// broker answers at once with `throttle_time_ms`, then stops reading for that long).
#[derive(Debug, Default)]
pub struct Mute {
    until: Mutex<Option<Instant>>,
}

impl Mute {
    /// Mutes the connection for `throttle` from now, unless it is muted longer already.
    pub fn extend(&self, throttle: Duration) {
        if throttle.is_zero() {
            return;
        }
        let until = Instant::now() + throttle;
        let mut current = self.until.lock();
        if current.is_none_or(|c| c < until) {
            *current = Some(until);
        }
    }

    /// Until when the connection is muted, if it is.
    pub fn until(&self) -> Option<Instant> {
        let until = *self.until.lock();
        until.filter(|u| *u > Instant::now())
    }
}

#[cfg(test)]
#[path = "quota/tests.rs"]
mod tests;
