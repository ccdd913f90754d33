use super::*;

fn key(p: i32) -> PartitionKey {
    PartitionKey { topic: TopicKey::Name("t".into()), partition: p }
}

fn pos(offset: i64) -> FetchPosition {
    FetchPosition { fetch_offset: offset, max_bytes: 1024, current_leader_epoch: -1 }
}

fn keys(n: i32) -> Serve {
    (0..n).map(|p| (key(p), pos(0))).collect()
}

/// Client connections: `client(1, 5)` is 10.0.0.1:5.
fn client(host: u8, port: u16) -> SocketAddr {
    SocketAddr::from(([10, 0, 0, host], port))
}

fn req(owner: SocketAddr, session_id: i32, epoch: i32) -> SessionRequest {
    SessionRequest { owner, session_id, epoch }
}

/// The default limits with a small cache.
fn limits(slots: usize, per_client: usize) -> SessionLimits {
    SessionLimits { slots, per_client, ..SessionLimits::default() }
}

struct Cache {
    sessions: FetchSessions,
    limits: SessionLimits,
    start: Instant,
}

impl Cache {
    fn new(limits: SessionLimits) -> Cache {
        Cache { sessions: FetchSessions::default(), limits, start: Instant::now() }
    }

    /// `begin` at `secs` seconds after the cache's start.
    fn at(&self, secs: u64, r: SessionRequest, requested: Serve, forgotten: Vec<PartitionKey>) -> Result<(SessionPlan, Serve), ResponseError> {
        self.sessions.begin_at(self.start + Duration::from_secs(secs), &self.limits, r, requested, forgotten)
    }

    /// A new session for `owner` at `secs`; its id, 0 if none was created.
    fn open(&self, secs: u64, owner: SocketAddr, partitions: i32) -> i32 {
        self.at(secs, req(owner, 0, 0), keys(partitions), vec![]).map_or(-1, |(plan, _)| plan.session_id())
    }

    /// An incremental fetch of `id` at `secs` with no changes: whether it was served.
    fn touch(&self, secs: u64, owner: SocketAddr, id: i32, epoch: i32) -> bool {
        matches!(self.at(secs, req(owner, id, epoch), vec![], vec![]), Ok((SessionPlan::Incremental { .. }, _)))
    }
}

#[test]
fn session_lifecycle_follows_kip_227() {
    let cache = Cache::new(SessionLimits::default());
    let a = client(1, 1);
    let (plan, serve) = cache.at(0, req(a, 0, 0), vec![(key(0), pos(0)), (key(1), pos(5))], vec![]).unwrap_or_else(|e| panic!("{e:?}"));
    let id = plan.session_id();
    assert!(id > 0 && serve.len() == 2);

    // Incremental: only partition 1 changed position, both are still served.
    let (plan, serve) = cache.at(0, req(a, id, 1), vec![(key(1), pos(9))], vec![]).unwrap_or_else(|e| panic!("{e:?}"));
    assert!(matches!(plan, SessionPlan::Incremental { .. }));
    assert_eq!(serve, vec![(key(0), pos(0)), (key(1), pos(9))]);

    // Wrong epoch, unknown session, forgotten partitions.
    assert!(matches!(cache.at(0, req(a, id, 1), vec![], vec![]), Err(ResponseError::InvalidFetchSessionEpoch)));
    assert!(matches!(cache.at(0, req(a, id ^ 1, 1), vec![], vec![]), Err(ResponseError::FetchSessionIdNotFound)));
    let (_, serve) = cache.at(0, req(a, id, 2), vec![], vec![key(0)]).unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(serve, vec![(key(1), pos(9))]);

    // Closing the session.
    let (plan, _) = cache.at(0, req(a, id, FINAL_EPOCH), vec![], vec![]).unwrap_or_else(|e| panic!("{e:?}"));
    assert!(matches!(plan, SessionPlan::Sessionless));
    assert!(matches!(cache.at(0, req(a, id, 3), vec![], vec![]), Err(ResponseError::FetchSessionIdNotFound)));
}

#[test]
fn a_full_fetch_naming_a_session_replaces_it() {
    let cache = Cache::new(SessionLimits::default());
    let a = client(1, 1);
    let old = cache.open(0, a, 1);
    assert!(cache.touch(0, a, old, 1));

    // franz-go resets its session this way: the old id with epoch 0. Kafka answers a full
    // fetch with a new session and closes the old one.
    let (plan, serve) = cache.at(0, req(a, old, 0), vec![(key(1), pos(7))], vec![]).unwrap_or_else(|e| panic!("{e:?}"));
    assert!(matches!(plan, SessionPlan::Full { .. }));
    let new = plan.session_id();
    assert!(new > 0 && new != old);
    assert_eq!(serve, vec![(key(1), pos(7))]);
    assert!(matches!(cache.at(0, req(a, old, 2), vec![], vec![]), Err(ResponseError::FetchSessionIdNotFound)));
    let (_, serve) = cache.at(0, req(a, new, 1), vec![], vec![]).unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(serve, vec![(key(1), pos(7))]);

    // Sessionless with a non-zero id also closes the named session.
    let (plan, _) = cache.at(0, req(a, new, FINAL_EPOCH), vec![], vec![]).unwrap_or_else(|e| panic!("{e:?}"));
    assert!(matches!(plan, SessionPlan::Sessionless));
    assert!(matches!(cache.at(0, req(a, new, 2), vec![], vec![]), Err(ResponseError::FetchSessionIdNotFound)));
    // An incremental epoch without a session names no session.
    assert!(matches!(cache.at(0, req(a, 0, 5), vec![], vec![]), Err(ResponseError::FetchSessionIdNotFound)));
    assert!(cache.sessions.is_empty());
}

#[test]
fn incremental_answers_only_news() {
    let cache = Cache::new(SessionLimits::default());
    let a = client(1, 1);
    let id = cache.open(0, a, 1);
    let state = LastSent { high_watermark: 10, last_stable_offset: 10, log_start_offset: 0 };
    let s = &cache.sessions;
    assert!(s.note_sent(a, id, &key(0), state, false, false));
    assert!(!s.note_sent(a, id, &key(0), state, false, false));
    assert!(s.note_sent(a, id, &key(0), state, true, false));
    let moved = LastSent { high_watermark: 11, ..state };
    assert!(s.note_sent(a, id, &key(0), moved, false, false));
    // Another connection's answer never touches this session's record.
    assert!(s.note_sent(client(2, 1), id, &key(0), state, false, false));
    assert!(s.note_sent(a, id, &key(0), state, false, false), "another connection rewrote what this one was told");
}

#[test]
fn session_ids_are_random_and_unique() {
    let cache = Cache::new(SessionLimits { per_client: 1000, ..SessionLimits::default() });
    let ids: Vec<i32> = (0..200).map(|i| cache.open(0, client(1, i), 1)).collect();
    assert!(ids.iter().all(|&id| id > 0), "{ids:?}");
    let distinct: std::collections::HashSet<i32> = ids.iter().copied().collect();
    assert_eq!(distinct.len(), ids.len());
    // Sequential ids would let a client predict its neighbours' ids from its own.
    let steps = ids.windows(2).filter(|w| (i64::from(w[1]) - i64::from(w[0])).abs() < 1000).count();
    assert!(steps < 5, "{steps} of 199 consecutive ids are within 1000 of each other: {ids:?}");
}

#[test]
fn another_connection_cannot_close_continue_or_replace_a_session() {
    let cache = Cache::new(SessionLimits::default());
    let (a, b) = (client(1, 1), client(2, 1));
    let id = cache.open(0, a, 3);
    assert!(id > 0);
    // FINAL and INITIAL epochs naming A's session from B: B gets its own answer, A keeps its
    // session.
    assert!(matches!(cache.at(0, req(b, id, FINAL_EPOCH), vec![], vec![]), Ok((SessionPlan::Sessionless, _))));
    assert!(matches!(cache.at(0, req(b, id, 0), vec![], vec![]), Ok((SessionPlan::Full { session_id }, _)) if session_id != id));
    // An incremental fetch of A's session from B (even from A's host, another port) is refused
    // as unknown, and does not advance A's epoch.
    assert!(matches!(cache.at(0, req(b, id, 1), vec![], vec![]), Err(ResponseError::FetchSessionIdNotFound)));
    assert!(matches!(cache.at(0, req(client(1, 2), id, 1), vec![], vec![]), Err(ResponseError::FetchSessionIdNotFound)));
    let (plan, serve) = cache.at(0, req(a, id, 1), vec![], vec![]).unwrap_or_else(|e| panic!("A lost its session: {e:?}"));
    assert_eq!(plan.session_id(), id);
    assert_eq!(serve.len(), 3);
}

#[test]
fn new_sessions_evict_only_stale_or_older_smaller_ones() {
    let cache = Cache::new(limits(2, 100));
    let age = cache.limits.eviction_age.as_secs();
    let (a, b, c) = (client(1, 1), client(2, 1), client(3, 1));
    let small = cache.open(0, a, 1);
    let big = cache.open(0, b, 5);
    // A full cache of young sessions: the newcomer gets no session, whatever its size.
    for i in 0..50 {
        assert_eq!(cache.open(1, client(3, i), 100), 0);
    }
    // Past the eviction age, both in use: only a larger newcomer evicts, and the smallest.
    assert!(cache.touch(age + 5, a, small, 1));
    assert!(cache.touch(age + 5, b, big, 1));
    assert_eq!(cache.open(age + 6, c, 1), 0, "a newcomer no larger than any session evicted one");
    let larger = cache.open(age + 6, c, 3);
    assert!(larger > 0);
    assert!(!cache.touch(age + 6, a, small, 2), "the smaller session should have been evicted");
    assert!(cache.touch(age + 6, b, big, 2), "the larger session was evicted");
    // A session unused past the eviction age goes to any newcomer, however small.
    assert!(cache.touch(2 * age + 10, c, larger, 1));
    let newest = cache.open(2 * age + 10, a, 0);
    assert!(newest > 0);
    assert!(!cache.touch(2 * age + 10, b, big, 3), "the stale session should have been evicted");
    assert!(cache.touch(2 * age + 10, c, larger, 2));
}

#[test]
fn one_client_address_holds_at_most_its_share() {
    let cache = Cache::new(limits(1000, 3));
    let age = cache.limits.eviction_age.as_secs();
    let mine: Vec<i32> = (0..3).map(|port| cache.open(0, client(1, port), 1)).collect();
    assert!(mine.iter().all(|&id| id > 0));
    // The fourth connection of that address gets no session; another address does.
    assert_eq!(cache.open(0, client(1, 9), 1), 0);
    assert!(cache.open(0, client(2, 9), 1) > 0);
    assert_eq!(cache.sessions.len(), 4);
    // Its own stale session makes room; the ones in use are kept.
    assert!(cache.touch(age + 5, client(1, 1), mine[1], 1));
    assert!(cache.touch(age + 5, client(1, 2), mine[2], 1));
    assert!(cache.open(age + 5, client(1, 9), 1) > 0);
    assert!(!cache.touch(age + 5, client(1, 0), mine[0], 1));
    assert!(cache.touch(age + 5, client(1, 1), mine[1], 2));
}

#[test]
fn a_session_cannot_grow_past_the_partition_bound() {
    let cache = Cache::new(SessionLimits { max_partitions: 10, ..SessionLimits::default() });
    let a = client(1, 1);
    let id = cache.open(0, a, 8);
    assert!(cache.at(0, req(a, id, 1), vec![(key(8), pos(0)), (key(9), pos(0))], vec![]).is_ok());
    // Forgetting one and adding one keeps it within the bound.
    assert!(cache.at(0, req(a, id, 2), vec![(key(10), pos(0))], vec![key(0)]).is_ok());
    assert!(matches!(cache.at(0, req(a, id, 3), vec![(key(11), pos(0))], vec![]), Err(ResponseError::InvalidRequest)));
    assert!(cache.sessions.is_empty(), "the oversized session was kept");
}

#[test]
fn no_slots_means_no_sessions() {
    let cache = Cache::new(limits(0, 100));
    assert_eq!(cache.open(0, client(1, 1), 1), 0);
}
