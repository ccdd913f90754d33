//! Incremental fetch sessions (KIP-227).
//!
//! A session remembers, per partition, the fetch position the client asked for and the
//! high watermark / log start it was last told, so an incremental fetch names only what
//! changed and its answer carries only partitions with news.

use std::collections::HashMap;
use std::time::Instant;

use indexmap::IndexMap;
use kafka_protocol::ResponseError;
use parking_lot::Mutex;
use uuid::Uuid;

/// How a topic is named in a fetch: by name before v13, by topic id from v13.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum TopicKey {
    Name(String),
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

#[derive(Debug)]
struct Session {
    /// The epoch the next incremental request must carry.
    next_epoch: i32,
    partitions: IndexMap<PartitionKey, (FetchPosition, Option<LastSent>)>,
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

/// The broker's fetch session cache.
#[derive(Debug)]
pub struct FetchSessions {
    sessions: Mutex<HashMap<i32, Session>>,
    next_id: Mutex<i32>,
    capacity: usize,
}

impl Default for FetchSessions {
    fn default() -> Self {
        // Kafka's max.incremental.fetch.session.cache.slots.
        FetchSessions::with_capacity(1000)
    }
}

/// Kafka's sentinel epochs.
const INITIAL_EPOCH: i32 = 0;
const FINAL_EPOCH: i32 = -1;

impl FetchSessions {
    pub fn with_capacity(capacity: usize) -> FetchSessions {
        FetchSessions { sessions: Mutex::new(HashMap::new()), next_id: Mutex::new(1), capacity }
    }

    /// Applies a request's session fields and partition list; returns the plan and the
    /// partitions to serve, in order.
    pub fn begin(
        &self,
        session_id: i32,
        epoch: i32,
        requested: Vec<(PartitionKey, FetchPosition)>,
        forgotten: Vec<PartitionKey>,
    ) -> Result<(SessionPlan, Vec<(PartitionKey, FetchPosition)>), ResponseError> {
        let mut sessions = self.sessions.lock();
        // KIP-227, as Kafka's FetchManager reads it: epoch 0 (INITIAL) or -1 (FINAL) makes a
        // full fetch, which closes the session it names, if any. A client that resets its
        // session (after an error, or a new assignment) sends its old id with epoch 0.
        if epoch == INITIAL_EPOCH || epoch == FINAL_EPOCH {
            if session_id != 0 {
                sessions.remove(&session_id);
            }
            if epoch == FINAL_EPOCH {
                return Ok((SessionPlan::Sessionless, requested));
            }
            if sessions.len() >= self.capacity {
                evict_oldest(&mut sessions);
            }
            let id = self.allocate_id(&sessions);
            let partitions = requested.iter().map(|(k, p)| (k.clone(), (*p, None))).collect();
            sessions.insert(id, Session { next_epoch: 1, partitions, last_used: Instant::now() });
            return Ok((SessionPlan::Full { session_id: id }, requested));
        }
        let session = sessions.get_mut(&session_id).ok_or(ResponseError::FetchSessionIdNotFound)?;
        if epoch != session.next_epoch {
            return Err(ResponseError::InvalidFetchSessionEpoch);
        }
        session.next_epoch = session.next_epoch.wrapping_add(1).max(1);
        session.last_used = Instant::now();
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
        let all = session.partitions.iter().map(|(k, (p, _))| (k.clone(), *p)).collect();
        Ok((SessionPlan::Incremental { session_id }, all))
    }

    /// Whether an incremental answer must include this partition, given what it would say now;
    /// records what was sent.
    pub fn note_sent(&self, session_id: i32, key: &PartitionKey, now: LastSent, has_records: bool, has_error: bool) -> bool {
        let mut sessions = self.sessions.lock();
        let Some(session) = sessions.get_mut(&session_id) else { return true };
        let Some(entry) = session.partitions.get_mut(key) else { return true };
        let changed = entry.1 != Some(now);
        entry.1 = Some(now);
        has_records || has_error || changed
    }

    fn allocate_id(&self, sessions: &HashMap<i32, Session>) -> i32 {
        let mut next = self.next_id.lock();
        loop {
            let id = *next;
            *next = if id == i32::MAX { 1 } else { id + 1 };
            if !sessions.contains_key(&id) {
                return id;
            }
        }
    }
}

fn evict_oldest(sessions: &mut HashMap<i32, Session>) {
    if let Some(oldest) = sessions.iter().min_by_key(|(_, s)| s.last_used).map(|(id, _)| *id) {
        sessions.remove(&oldest);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(p: i32) -> PartitionKey {
        PartitionKey { topic: TopicKey::Name("t".into()), partition: p }
    }

    fn pos(offset: i64) -> FetchPosition {
        FetchPosition { fetch_offset: offset, max_bytes: 1024, current_leader_epoch: -1 }
    }

    #[test]
    fn session_lifecycle_follows_kip_227() {
        let cache = FetchSessions::default();
        let (plan, serve) = cache.begin(0, 0, vec![(key(0), pos(0)), (key(1), pos(5))], vec![]).ok().unzip_plan();
        let id = plan.session_id();
        assert!(id > 0 && serve.len() == 2);

        // Incremental: only partition 1 changed position, both are still served.
        let (plan, serve) = cache.begin(id, 1, vec![(key(1), pos(9))], vec![]).ok().unzip_plan();
        assert!(matches!(plan, SessionPlan::Incremental { .. }));
        assert_eq!(serve, vec![(key(0), pos(0)), (key(1), pos(9))]);

        // Wrong epoch, unknown session, forgotten partitions.
        assert!(matches!(cache.begin(id, 1, vec![], vec![]), Err(ResponseError::InvalidFetchSessionEpoch)));
        assert!(matches!(cache.begin(id + 100, 1, vec![], vec![]), Err(ResponseError::FetchSessionIdNotFound)));
        let (_, serve) = cache.begin(id, 2, vec![], vec![key(0)]).ok().unzip_plan();
        assert_eq!(serve, vec![(key(1), pos(9))]);

        // Closing the session.
        let (plan, _) = cache.begin(id, FINAL_EPOCH, vec![], vec![]).ok().unzip_plan();
        assert!(matches!(plan, SessionPlan::Sessionless));
        assert!(matches!(cache.begin(id, 3, vec![], vec![]), Err(ResponseError::FetchSessionIdNotFound)));
    }

    #[test]
    fn a_full_fetch_naming_a_session_replaces_it() {
        let cache = FetchSessions::default();
        let (plan, _) = cache.begin(0, 0, vec![(key(0), pos(0))], vec![]).ok().unzip_plan();
        let old = plan.session_id();
        cache.begin(old, 1, vec![], vec![]).ok().unzip_plan();

        // franz-go resets its session this way: the old id with epoch 0. Kafka answers a full
        // fetch with a new session and closes the old one.
        let (plan, serve) = cache.begin(old, 0, vec![(key(1), pos(7))], vec![]).ok().unzip_plan();
        assert!(matches!(plan, SessionPlan::Full { .. }));
        let new = plan.session_id();
        assert!(new > 0 && new != old);
        assert_eq!(serve, vec![(key(1), pos(7))]);
        assert!(matches!(cache.begin(old, 2, vec![], vec![]), Err(ResponseError::FetchSessionIdNotFound)));
        let (_, serve) = cache.begin(new, 1, vec![], vec![]).ok().unzip_plan();
        assert_eq!(serve, vec![(key(1), pos(7))]);

        // Sessionless with a non-zero id also closes the named session.
        let (plan, _) = cache.begin(new, FINAL_EPOCH, vec![], vec![]).ok().unzip_plan();
        assert!(matches!(plan, SessionPlan::Sessionless));
        assert!(matches!(cache.begin(new, 2, vec![], vec![]), Err(ResponseError::FetchSessionIdNotFound)));
        // An incremental epoch without a session names no session.
        assert!(matches!(cache.begin(0, 5, vec![], vec![]), Err(ResponseError::FetchSessionIdNotFound)));
    }

    #[test]
    fn incremental_answers_only_news() {
        let cache = FetchSessions::default();
        let (plan, _) = cache.begin(0, 0, vec![(key(0), pos(0))], vec![]).ok().unzip_plan();
        let id = plan.session_id();
        let state = LastSent { high_watermark: 10, last_stable_offset: 10, log_start_offset: 0 };
        assert!(cache.note_sent(id, &key(0), state, false, false));
        assert!(!cache.note_sent(id, &key(0), state, false, false));
        assert!(cache.note_sent(id, &key(0), state, true, false));
        let moved = LastSent { high_watermark: 11, ..state };
        assert!(cache.note_sent(id, &key(0), moved, false, false));
    }

    trait UnzipPlan {
        fn unzip_plan(self) -> (SessionPlan, Vec<(PartitionKey, FetchPosition)>);
    }

    impl UnzipPlan for Option<(SessionPlan, Vec<(PartitionKey, FetchPosition)>)> {
        fn unzip_plan(self) -> (SessionPlan, Vec<(PartitionKey, FetchPosition)>) {
            self.unwrap_or((SessionPlan::Sessionless, vec![(key(-1), pos(-1))]))
        }
    }
}
