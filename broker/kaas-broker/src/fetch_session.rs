//! Incremental fetch sessions (KIP-227).
//!
//! A session remembers, per partition, the fetch position the client asked for and the
//! high watermark / log start it was last told, so an incremental fetch names only what
//! changed and its answer carries only partitions with news.
//!
//! The cache is shared by every client, so it is built so that no client can hurt another's
//! sessions (issue #15):
//! - ids are random, not sequential, so they cannot be guessed from one's own;
//! - a session belongs to the connection that created it: only that connection can continue,
//!   replace or close it (Kafka closes any session named with epoch -1; kaas does not);
//! - a new session evicts another only as Kafka's `FetchSessionCache` allows: one unused for
//!   longer than the eviction age, or else one older than that age with fewer partitions;
//! - one client address holds at most `per_client` sessions, and a session at most
//!   `max_partitions` partitions.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use indexmap::IndexMap;
use kafka_protocol::ResponseError;
use parking_lot::Mutex;
use uuid::Uuid;

/// How a topic is named in a fetch: by name before v13, by topic id from v13. A name is shared
/// by every partition key of its topic (a request names a topic once for many partitions).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum TopicKey {
    Name(Arc<str>),
    Id(Uuid),
}

/// One partition a fetch asks for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PartitionKey {
    pub topic: TopicKey,
    pub partition: i32,
}

/// What the client wants of a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FetchPosition {
    pub fetch_offset: i64,
    pub max_bytes: i32,
    pub current_leader_epoch: i32,
}

/// What the client was last told about a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LastSent {
    pub high_watermark: i64,
    pub last_stable_offset: i64,
    pub log_start_offset: i64,
}

/// The cache's bounds (broker settings).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionLimits {
    /// `max.incremental.fetch.session.cache.slots`: sessions in the cache (0 disables sessions).
    pub slots: usize,
    /// `min.incremental.fetch.session.eviction.ms`: a session unused this long may be evicted by
    /// any new one; one created longer ago than this only by a larger one; a younger one never.
    pub eviction_age: Duration,
    /// kaas-specific: sessions one client address may hold at once.
    pub per_client: usize,
    /// Partitions one session may hold (kaas's bound on a Fetch request's partitions too).
    pub max_partitions: usize,
}

impl Default for SessionLimits {
    /// Kafka's defaults for its two settings. 100 sessions per address is a tenth of the cache:
    /// one client cannot fill it, while a host running many consumers (or a NAT in front of
    /// them) still gets a session for each of its first hundred. 10,000 partitions is more than
    /// Kafka advises one broker to lead, and keeps a request's keys and answers to a few MB.
    fn default() -> SessionLimits {
        SessionLimits { slots: 1000, eviction_age: Duration::from_secs(120), per_client: 100, max_partitions: 10_000 }
    }
}

#[derive(Debug)]
struct Session {
    /// The connection that created the session; nobody else may use or close it.
    owner: SocketAddr,
    /// The epoch the next incremental request must carry.
    next_epoch: i32,
    partitions: IndexMap<PartitionKey, (FetchPosition, Option<LastSent>)>,
    created: Instant,
    last_used: Instant,
}

/// The session side of one fetch request.
#[derive(Debug)]
pub enum SessionPlan {
    /// No session: serve exactly the requested partitions, answer with session id 0.
    Sessionless,
    /// A session was created (or the full fetch of an existing one): serve everything in it.
    Full { session_id: i32 },
    /// Serve every partition of the session, answer only those with news.
    Incremental { session_id: i32 },
}

impl SessionPlan {
    pub fn session_id(&self) -> i32 {
        match self {
            SessionPlan::Sessionless => 0,
            SessionPlan::Full { session_id } | SessionPlan::Incremental { session_id } => *session_id,
        }
    }
}

/// One fetch request's session fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionRequest {
    /// The connection the request came on.
    pub owner: SocketAddr,
    pub session_id: i32,
    pub epoch: i32,
}

/// The partitions to serve, in order.
pub type Serve = Vec<(PartitionKey, FetchPosition)>;

/// The broker's fetch session cache.
#[derive(Debug, Default)]
pub struct FetchSessions {
    sessions: Mutex<HashMap<i32, Session>>,
}

/// Kafka's sentinel epochs.
const INITIAL_EPOCH: i32 = 0;
const FINAL_EPOCH: i32 = -1;

impl FetchSessions {
    /// Applies a request's session fields and partition list; returns the plan and the
    /// partitions to serve, in order.
    pub fn begin(&self, limits: &SessionLimits, request: SessionRequest, requested: Serve, forgotten: Vec<PartitionKey>) -> Result<(SessionPlan, Serve), ResponseError> {
        self.begin_at(Instant::now(), limits, request, requested, forgotten)
    }

    fn begin_at(&self, now: Instant, limits: &SessionLimits, request: SessionRequest, requested: Serve, forgotten: Vec<PartitionKey>) -> Result<(SessionPlan, Serve), ResponseError> {
        let mut sessions = self.sessions.lock();
        let SessionRequest { owner, session_id, epoch } = request;
        if epoch != INITIAL_EPOCH && epoch != FINAL_EPOCH {
            return continue_session(&mut sessions, limits, request, now, requested, forgotten);
        }
        // KIP-227, as Kafka's FetchManager reads it: epoch 0 (INITIAL) or -1 (FINAL) makes a
        // full fetch, which closes the session it names, if any. A client that resets its
        // session (after an error, or a new assignment) sends its old id with epoch 0. Only
        // the owner's session is closed: another connection naming it changes nothing.
        if session_id != 0 && sessions.get(&session_id).is_some_and(|s| s.owner == owner) {
            sessions.remove(&session_id);
        }
        if epoch == FINAL_EPOCH || !make_room(&mut sessions, limits, owner, requested.len(), now) {
            // As Kafka answers when its cache has no room: a full answer without a session.
            return Ok((SessionPlan::Sessionless, requested));
        }
        let id = random_id(&sessions);
        let partitions = requested.iter().map(|(k, p)| (k.clone(), (*p, None))).collect();
        sessions.insert(id, Session { owner, next_epoch: 1, partitions, created: now, last_used: now });
        Ok((SessionPlan::Full { session_id: id }, requested))
    }

    /// Whether an incremental answer must include this partition, given what it would say now;
    /// records what was sent.
    pub fn note_sent(&self, owner: SocketAddr, session_id: i32, key: &PartitionKey, now: LastSent, has_records: bool, has_error: bool) -> bool {
        let mut sessions = self.sessions.lock();
        let Some(session) = sessions.get_mut(&session_id).filter(|s| s.owner == owner) else { return true };
        let Some(entry) = session.partitions.get_mut(key) else { return true };
        let changed = entry.1 != Some(now);
        entry.1 = Some(now);
        has_records || has_error || changed
    }

    /// Sessions in the cache.
    pub fn len(&self) -> usize {
        self.sessions.lock().len()
    }

    /// Whether the cache holds no session.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// An incremental fetch: the owner's session at the expected epoch, updated by the request.
fn continue_session(
    sessions: &mut HashMap<i32, Session>,
    limits: &SessionLimits,
    request: SessionRequest,
    now: Instant,
    requested: Serve,
    forgotten: Vec<PartitionKey>,
) -> Result<(SessionPlan, Serve), ResponseError> {
    let SessionRequest { owner, session_id, epoch } = request;
    // NB: another connection's session answers as if it did not exist, so ids cannot be probed.
    let session = sessions.get_mut(&session_id).filter(|s| s.owner == owner).ok_or(ResponseError::FetchSessionIdNotFound)?;
    if epoch != session.next_epoch {
        return Err(ResponseError::InvalidFetchSessionEpoch);
    }
    session.next_epoch = session.next_epoch.wrapping_add(1).max(1);
    session.last_used = now;
    for key in forgotten {
        session.partitions.shift_remove(&key);
    }
    for (key, position) in requested {
        match session.partitions.get_mut(&key) {
            Some(entry) => entry.0 = position,
            None => {
                session.partitions.insert(key, (position, None));
            }
        }
    }
    if session.partitions.len() > limits.max_partitions {
        // A session grown past the request bound one increment at a time: the client starts
        // over with a full fetch, which the same bound refuses.
        sessions.remove(&session_id);
        return Err(ResponseError::InvalidRequest);
    }
    let all = session.partitions.iter().map(|(k, (p, _))| (k.clone(), *p)).collect();
    Ok((SessionPlan::Incremental { session_id }, all))
}

/// Frees a slot for a new session of `size` partitions by `owner` if the limits allow it.
fn make_room(sessions: &mut HashMap<i32, Session>, limits: &SessionLimits, owner: SocketAddr, size: usize, now: Instant) -> bool {
    let client = owner.ip();
    let held = sessions.values().filter(|s| s.owner.ip() == client).count();
    if held >= limits.per_client && !evict_stale(sessions, limits, now, |s| s.owner.ip() == client) {
        return false;
    }
    sessions.len() < limits.slots || evict_for(sessions, limits, size, now)
}

/// Kafka's `FetchSessionCache.tryEvict` without privileged (follower) sessions, which kaas does
/// not have: the least recently used session if it is stale, else the smallest session older
/// than the eviction age if the new one is larger. A young session is never evicted, so a
/// client creating sessions in a loop cannot push out the ones in use.
fn evict_for(sessions: &mut HashMap<i32, Session>, limits: &SessionLimits, size: usize, now: Instant) -> bool {
    if evict_stale(sessions, limits, now, |_| true) {
        return true;
    }
    let smallest = sessions
        .iter()
        .filter(|(_, s)| now.saturating_duration_since(s.created) > limits.eviction_age && s.partitions.len() < size)
        .min_by_key(|(_, s)| (s.partitions.len(), s.last_used))
        .map(|(id, _)| *id);
    smallest.is_some_and(|id| sessions.remove(&id).is_some())
}

/// Evicts the least recently used session among `which` if it has been unused longer than the
/// eviction age.
fn evict_stale(sessions: &mut HashMap<i32, Session>, limits: &SessionLimits, now: Instant, which: impl Fn(&Session) -> bool) -> bool {
    let stale = sessions
        .iter()
        .filter(|(_, s)| which(s))
        .min_by_key(|(_, s)| s.last_used)
        .filter(|(_, s)| now.saturating_duration_since(s.last_used) > limits.eviction_age)
        .map(|(id, _)| *id);
    stale.is_some_and(|id| sessions.remove(&id).is_some())
}

/// A random positive id not in use: 31 random bits from a v4 UUID (its low 32 bits are all
/// random). Positive, as kaas's ids always were; 0 means "no session" on the wire.
fn random_id(sessions: &HashMap<i32, Session>) -> i32 {
    loop {
        let bits = Uuid::new_v4().as_u128() as u32;
        let id = (bits >> 1) as i32;
        if id != 0 && !sessions.contains_key(&id) {
            return id;
        }
    }
}

#[cfg(test)]
mod tests;
