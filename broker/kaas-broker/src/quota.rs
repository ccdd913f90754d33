//! Client quotas: produce and fetch byte rates and request time per user and client id, as
//! Kafka's `ClientQuotaManager` applies them — a request is served, its bytes are counted in the
//! sensor of the entity whose quota applies, and a client over its bound is told how long to
//! wait (`throttle_time_ms`) while its connection reads nothing more for that long (KIP-219) —
//! and new connections a second per address (KIP-612: one over the rate is closed at once).
//!
//! The quotas live in one file on the volume, `__cluster/quotas.json`, the only source of truth,
//! written as [`crate::controller_file`] says: in local mode by the broker, in a cluster by the
//! controller broker (the others forward AlterClientQuotas to it); every broker of a cluster
//! reads the file again every second ([`ClientQuotas::refresh`]). A cluster's KafkaUsers set
//! their users' quotas beside the file ([`ClientQuotas::serve_kafka_users`]).

pub mod model;
pub mod rate;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use kaas_shared::fs::FsRef;
use kaas_shared::layout::Layout;
use parking_lot::{Mutex, RwLock};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use self::model::{Entity, EntityName, InvalidQuota, QuotaFilter, QuotaKey, QuotaTable, SensorKey};
use self::rate::Rate;
use crate::controller_file::{ControllerFile, WriteError};

/// The most quota entities kept; an AlterClientQuotas adding more is refused.
pub const MAX_ENTITIES: usize = 10_000;
/// The most sensors (clients counted apart) kept at once; idle ones are dropped to make room,
/// and beyond it new clients are not counted until some go idle.
pub const MAX_SENSORS: usize = 100_000;

/// Why a quota change was refused.
#[derive(Debug, Clone, thiserror::Error)]
pub enum QuotaError {
    #[error(transparent)]
    Invalid(#[from] InvalidQuota),
    #[error("the broker keeps at most {MAX_ENTITIES} quota entities")]
    TooMany,
    /// A KafkaUser sets this user's quotas: they are changed there.
    #[error("the quotas of user {0:?} are set by its KafkaUser; change them there")]
    KafkaUser(String),
    /// The file was not changed: it could not be written, or a newer controller wrote it.
    #[error("the quotas were not changed: {0}")]
    File(#[from] WriteError),
}

/// One entity's requested change: each key set to a value, or removed (`None`).
#[derive(Debug, Clone, PartialEq)]
pub struct QuotaChange {
    pub entity: Entity,
    pub ops: Vec<(QuotaKey, Option<f64>)>,
}

/// The quota file's content.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
struct QuotaFile {
    quotas: Vec<StoredQuota>,
}

impl QuotaFile {
    fn table(&self) -> QuotaTable {
        self.quotas.iter().map(|q| (q.entity.clone(), q.values.clone())).collect()
    }

    fn of(table: &QuotaTable) -> QuotaFile {
        QuotaFile { quotas: table.iter().map(|(entity, values)| StoredQuota { entity: entity.clone(), values: values.clone() }).collect() }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct StoredQuota {
    entity: Entity,
    values: std::collections::BTreeMap<QuotaKey, f64>,
}

/// The broker's client quotas: the table, its file, and the sensors of the clients it counts.
#[derive(Debug)]
pub struct ClientQuotas {
    /// The file's quotas, with the KafkaUsers' in place of the file's for their users.
    table: RwLock<Arc<QuotaTable>>,
    /// What `table` was made of.
    sources: Mutex<QuotaSources>,
    /// The keys some entity sets, one bit each: a key nobody sets costs a request one atomic
    /// load.
    keys_in_use: AtomicU8,
    sensors: Mutex<HashMap<SensorKey, Rate>>,
    file: ControllerFile,
}

impl ClientQuotas {
    /// Reads `__cluster/quotas.json` (none yet: no quotas).
    pub fn open(fs: FsRef, layout: &Layout) -> Result<ClientQuotas, kaas_shared::Error> {
        let file = ControllerFile::new(fs, layout.cluster_dir().join("quotas.json"), "quota file");
        let sources = QuotaSources { file: file.read::<QuotaFile>()?.table(), kafka_users: QuotaTable::new() };
        let table = sources.table();
        Ok(ClientQuotas {
            keys_in_use: AtomicU8::new(keys_in_use(&table)),
            table: RwLock::new(Arc::new(table)),
            sources: Mutex::new(sources),
            sensors: Mutex::new(HashMap::new()),
            file,
        })
    }

    /// Reads the file again and serves what it holds: in a cluster another broker (the
    /// controller) may have changed it. Blocking (file I/O).
    pub fn refresh(&self) -> Result<(), kaas_shared::Error> {
        self.file.refresh(|file: QuotaFile| self.serve(file.table()))
    }

    fn serve(&self, table: QuotaTable) {
        let mut sources = self.sources.lock();
        if sources.file != table {
            sources.file = table;
            self.serve_sources(&sources);
        }
    }

    /// Enforces the KafkaUsers' quotas from now on: each user's in place of what the file says
    /// of that user.
    pub fn serve_kafka_users(&self, table: QuotaTable) {
        let mut sources = self.sources.lock();
        if sources.kafka_users != table {
            sources.kafka_users = table;
            self.serve_sources(&sources);
        }
    }

    fn serve_sources(&self, sources: &QuotaSources) {
        let table = sources.table();
        self.keys_in_use.store(keys_in_use(&table), Ordering::Relaxed);
        *self.table.write() = Arc::new(table);
    }

    /// Whether a KafkaUser sets `entity`'s quotas.
    fn set_by_kafka_user(&self, entity: &Entity) -> bool {
        self.sources.lock().kafka_users.contains_key(entity)
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
    /// replacement before any is answered. With `validate_only` nothing is written. `epoch` is
    /// the writer's: the controller's Lease epoch in a cluster, 0 in local mode. Blocking (file
    /// I/O).
    pub fn alter(&self, changes: Vec<Result<QuotaChange, InvalidQuota>>, validate_only: bool, epoch: i64) -> Vec<Result<(), QuotaError>> {
        let checked: Vec<Result<QuotaChange, QuotaError>> = changes
            .into_iter()
            .map(|c| match c {
                Ok(c) if self.set_by_kafka_user(&c.entity) => {
                    Err(QuotaError::KafkaUser(c.entity.user.as_ref().and_then(EntityName::as_wire).unwrap_or_default().to_string()))
                }
                c => c.map_err(QuotaError::from),
            })
            .collect();
        let altered = self.file.update(
            epoch,
            |file: &QuotaFile| self.serve(file.table()),
            |file| {
                let mut table = file.table();
                let results: Vec<Result<(), QuotaError>> =
                    checked.iter().map(|c| c.as_ref().map_err(Clone::clone).and_then(|c| apply(&mut table, c.clone()))).collect();
                if !validate_only {
                    *file = QuotaFile::of(&table);
                }
                results
            },
        );
        match altered {
            Ok(results) => results,
            Err(e) => {
                let e = QuotaError::from(e);
                checked.into_iter().map(|c| c.and(Err(e.clone()))).collect()
            }
        }
    }
}

/// The quota tables the served one is made of.
#[derive(Debug, Default)]
struct QuotaSources {
    file: QuotaTable,
    kafka_users: QuotaTable,
}

impl QuotaSources {
    fn table(&self) -> QuotaTable {
        let mut table = self.file.clone();
        table.extend(self.kafka_users.iter().map(|(entity, values)| (entity.clone(), values.clone())));
        table
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
