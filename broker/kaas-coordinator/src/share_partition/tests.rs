use super::*;

fn settings() -> ShareSettings {
    ShareSettings { lock_duration: Duration::from_secs(30), delivery_limit: 3, max_locks: 10 }
}

fn batch(first: i64, last: i64, types: &[Ack]) -> AckBatch {
    AckBatch { first, last, types: types.to_vec() }
}

#[test]
fn delivers_each_record_to_one_member_at_a_time() {
    let (s, now) = (settings(), Instant::now());
    let mut p = SharePartitionState::new(0);
    assert_eq!(p.next_to_read(&s), Some(0));
    let a = p.acquire("a", 0, 4, 100, 100, now, &s, &|_| false);
    assert_eq!(a, vec![Acquired { first: 0, last: 4, deliveries: 1 }]);
    // b reads the same batch and gets only what follows it.
    assert_eq!(p.next_to_read(&s), Some(5));
    let b = p.acquire("b", 0, 7, 100, 100, now, &s, &|_| false);
    assert_eq!(b, vec![Acquired { first: 5, last: 7, deliveries: 1 }]);
    // Acknowledging another member's records is refused, all or nothing.
    assert_eq!(p.acknowledge("b", &[batch(5, 7, &[Ack::Accept]), batch(0, 0, &[Ack::Accept])], now, &s), Err(AckError::InvalidRecordState));
    assert_eq!(p.in_flight(), 8);
    p.acknowledge("a", &[batch(0, 4, &[Ack::Accept, Ack::Release, Ack::Accept, Ack::Reject, Ack::Gap])], now, &s).unwrap();
    assert_eq!(p.start_offset(), 1);
    // The released record goes to the next reader, with its delivery count.
    let c = p.acquire("c", 1, 9, 100, 100, now, &s, &|_| false);
    assert_eq!(c, vec![Acquired { first: 1, last: 1, deliveries: 2 }, Acquired { first: 8, last: 9, deliveries: 1 }]);
    p.acknowledge("c", &[batch(1, 1, &[Ack::Accept])], now, &s).unwrap();
    assert_eq!(p.start_offset(), 5);
}

#[test]
fn the_window_bounds_what_is_delivered_and_the_high_watermark_too() {
    let (s, now) = (settings(), Instant::now());
    let mut p = SharePartitionState::new(0);
    assert_eq!(p.acquire("a", 0, 50, 100, 100, now, &s, &|_| false).last().map(|a| a.last), Some(9));
    assert_eq!(p.next_to_read(&s), None);
    let mut q = SharePartitionState::new(0);
    assert_eq!(q.acquire("a", 0, 50, 3, 2, now, &s, &|_| false), vec![Acquired { first: 0, last: 1, deliveries: 1 }]);
    assert_eq!(q.acquire("a", 2, 50, 3, 100, now, &s, &|_| false), vec![Acquired { first: 2, last: 2, deliveries: 1 }]);
    assert!(q.acquire("a", 3, 50, 3, 100, now, &s, &|_| false).is_empty());
    assert!(q.acquire("a", 9, 5, 3, 100, now, &s, &|_| false).is_empty(), "a read that ends before it starts acquires nothing");
}

#[test]
fn expired_locks_give_records_back_until_the_delivery_limit() {
    let (s, now) = (settings(), Instant::now());
    let mut p = SharePartitionState::new(10);
    for round in 1..=3 {
        let got = p.acquire("a", 10, 10, 100, 100, now, &s, &|_| false);
        assert_eq!(got, vec![Acquired { first: 10, last: 10, deliveries: round }]);
        assert!(!p.expire_locks(now + Duration::from_secs(29), &s));
        assert_eq!(p.next_expiry(), Some(now + s.lock_duration));
        assert!(p.expire_locks(now + s.lock_duration, &s));
    }
    // Delivered three times: archived, the window moves past it.
    assert_eq!(p.start_offset(), 11);
    assert!(p.acquire("a", 10, 10, 100, 100, now, &s, &|_| false).is_empty());
}

#[test]
fn renew_keeps_the_lock_and_release_member_gives_everything_back() {
    let (s, now) = (settings(), Instant::now());
    let mut p = SharePartitionState::new(0);
    p.acquire("a", 0, 2, 100, 100, now, &s, &|_| false);
    let later = now + Duration::from_secs(20);
    p.acknowledge("a", &[batch(0, 0, &[Ack::Renew])], later, &s).unwrap();
    assert!(p.expire_locks(now + s.lock_duration, &s));
    assert_eq!(p.acquire("b", 0, 2, 100, 100, now, &s, &|_| false), vec![Acquired { first: 1, last: 2, deliveries: 2 }]);
    assert!(p.release_member("a", &s));
    assert!(p.release_member("b", &s));
    assert_eq!(p.acknowledge("a", &[batch(0, 0, &[Ack::Accept])], now, &s), Err(AckError::InvalidRecordState));
    assert_eq!(p.acknowledge("a", &[batch(3, 1, &[Ack::Accept])], now, &s), Err(AckError::InvalidRequest));
    assert_eq!(p.acknowledge("a", &[batch(0, 2, &[Ack::Accept, Ack::Accept])], now, &s), Err(AckError::InvalidRequest));
}

#[test]
fn persisted_state_round_trips_and_acquisitions_come_back_available() {
    let (s, now) = (settings(), Instant::now());
    let mut p = SharePartitionState::new(0);
    p.acquire("a", 0, 5, 100, 100, now, &s, &|_| false);
    p.acknowledge("a", &[batch(0, 0, &[Ack::Release]), batch(2, 3, &[Ack::Accept])], now, &s).unwrap();
    let stored = p.persisted();
    assert_eq!((stored.start, stored.end), (0, 6));
    let json = serde_json::to_vec(&stored).unwrap();
    let mut back = SharePartitionState::restore(&serde_json::from_slice(&json).unwrap());
    assert_eq!(back.start_offset(), 0);
    let again = back.acquire("b", 0, 5, 100, 100, now, &s, &|_| false);
    assert_eq!(again, vec![
        Acquired { first: 0, last: 1, deliveries: 2 },
        Acquired { first: 4, last: 5, deliveries: 2 },
    ]);
    assert!(back.follow_log_start(5));
    assert_eq!(back.start_offset(), 5);
    back.reset(42);
    assert_eq!((back.start_offset(), back.next_to_read(&s)), (42, Some(42)));
}

#[test]
fn skipped_offsets_are_archived_not_delivered() {
    let (s, now) = (settings(), Instant::now());
    let mut p = SharePartitionState::new(0);
    let got = p.acquire("a", 0, 5, 100, 100, now, &s, &|o| o == 0 || o == 3);
    assert_eq!(got, vec![Acquired { first: 1, last: 2, deliveries: 1 }, Acquired { first: 4, last: 5, deliveries: 1 }]);
    assert_eq!(p.start_offset(), 1);
    p.acknowledge("a", &[batch(1, 2, &[Ack::Accept])], now, &s).unwrap();
    assert_eq!(p.start_offset(), 4);
}
