//! Transactions in a partition: the last stable offset, markers, the aborted-transaction index
//! for read_committed reads, and open-transaction state across a crash.

use kaas_storage::testing::{BatchBuilder, decode_records};
use kaas_storage::{AbortedTxn, Error, LogConfig, Marker, MarkerKind, Partition};

use super::support::*;

const TRANSACTIONAL: i16 = 0x10;

fn txn(pid: i64, epoch: i16, seq: i32, n: usize) -> Vec<u8> {
    BatchBuilder::new()
        .timestamps(NOW)
        .producer(pid, epoch, seq)
        .attributes(TRANSACTIONAL)
        .records(n, 8)
        .build()
}

fn marker(p: &Partition, epoch: i32, pid: i64, producer_epoch: i16, kind: MarkerKind) -> i64 {
    let m = Marker {
        producer_id: pid,
        producer_epoch,
        kind,
        coordinator_epoch: 1,
    };
    let out = p.append_marker(&m, opts(epoch)).unwrap();
    block_on(p.wait_durable(out.last_offset)).unwrap();
    out.base_offset
}

fn lso_follows_open_transactions_and_aborts_are_reported(v: &Volume) {
    let p = v.leader(1, LogConfig::default());
    append(&p, 1, batch("plain", 1)); // 0
    append(&p, 1, txn(7, 0, 0, 2)); // 1..=2
    append(&p, 1, txn(8, 0, 0, 1)); // 3
    assert_eq!(p.high_watermark(), 4);
    assert_eq!(p.last_stable_offset(), 1);
    let r = p.read_committed(0, 1 << 20).unwrap();
    assert_eq!(decode_records(&r.records).len(), 1, "stops at the LSO");
    assert_eq!(r.last_stable_offset, 1);
    assert!(p.read_committed(1, 1 << 20).unwrap().records.is_empty());
    assert_eq!(
        decode_records(&p.read(0, 1 << 20).unwrap().records).len(),
        4
    );

    assert_eq!(marker(&p, 1, 7, 0, MarkerKind::Abort), 4);
    assert_eq!(p.last_stable_offset(), 3, "producer 8 is still open");
    assert_eq!(marker(&p, 1, 8, 0, MarkerKind::Commit), 5);
    assert_eq!(p.last_stable_offset(), 6);
    let r = p.read_committed(0, 1 << 20).unwrap();
    assert_eq!(
        r.aborted_transactions,
        vec![AbortedTxn {
            producer_id: 7,
            first_offset: 1,
            last_offset: 4
        }]
    );
    assert!(
        p.read_committed(5, 1 << 20)
            .unwrap()
            .aborted_transactions
            .is_empty()
    );
    // A marker from an older producer epoch is fenced.
    let stale = Marker {
        producer_id: 7,
        producer_epoch: -1,
        kind: MarkerKind::Abort,
        coordinator_epoch: 1,
    };
    assert!(matches!(
        p.append_marker(&stale, opts(1)),
        Err(Error::InvalidProducerEpoch { .. })
    ));
    // After a marker the producer continues its sequence in the next transaction.
    append(&p, 1, txn(7, 0, 2, 1));
    assert_eq!(p.last_stable_offset(), 6);
}
scenario!(lso_follows_open_transactions_and_aborts_are_reported);

fn open_and_aborted_transactions_survive_a_crash(v: &Volume) {
    // Small segments: some state comes from the snapshot written at a roll, the rest from
    // replaying the log, because the leader "crashes" (never relinquishes).
    let config = LogConfig {
        segment_bytes: 300,
        ..LogConfig::default()
    };
    let p = v.leader(1, config);
    append(&p, 1, txn(7, 0, 0, 1)); // 0
    marker(&p, 1, 7, 0, MarkerKind::Abort); // 1
    for seq in 0..6 {
        append(&p, 1, txn(9, 0, seq, 1)); // 2..=7
    }
    append(&p, 1, txn(7, 1, 0, 1)); // 8
    marker(&p, 1, 7, 1, MarkerKind::Abort); // 9
    append(&p, 1, txn(7, 1, 1, 1)); // 10, open
    drop(p);
    let q = v.partition(config);
    q.take_over(2).unwrap();
    assert_eq!(
        q.last_stable_offset(),
        2,
        "producer 9's transaction is still open"
    );
    marker(&q, 2, 9, 0, MarkerKind::Commit);
    assert_eq!(
        q.last_stable_offset(),
        10,
        "producer 7's second transaction is open"
    );
    let aborted = q.read_committed(0, 1 << 20).unwrap().aborted_transactions;
    assert!(
        aborted.contains(&AbortedTxn {
            producer_id: 7,
            first_offset: 0,
            last_offset: 1
        }),
        "{aborted:?}"
    );
    let mut all = Vec::new();
    let mut next = 0;
    while next < q.last_stable_offset() {
        let r = q.read_committed(next, 1 << 20).unwrap();
        let records = decode_records(&r.records);
        all.extend(r.aborted_transactions);
        next = records
            .last()
            .map_or(q.last_stable_offset(), |r| r.offset + 1);
    }
    assert!(
        all.contains(&AbortedTxn {
            producer_id: 7,
            first_offset: 8,
            last_offset: 9
        }),
        "{all:?}"
    );
    q.relinquish().unwrap();
    let r = v.partition(config);
    r.take_over(3).unwrap();
    assert_eq!(
        r.last_stable_offset(),
        10,
        "from the snapshot written at relinquish"
    );
}
scenario!(open_and_aborted_transactions_survive_a_crash);

fn a_deposed_coordinators_late_marker_is_fenced_across_a_crash(v: &Volume) {
    let p = v.leader(1, LogConfig::default());
    let m = |coordinator_epoch, kind| Marker {
        producer_id: 7,
        producer_epoch: 0,
        kind,
        coordinator_epoch,
    };
    append(&p, 1, txn(7, 0, 0, 1)); // 0
    let out = p.append_marker(&m(3, MarkerKind::Commit), opts(1)).unwrap(); // 1
    block_on(p.wait_durable(out.last_offset)).unwrap();
    append(&p, 1, txn(7, 0, 1, 1)); // 2: the producer's next transaction, same epoch
    assert!(matches!(
        p.append_marker(&m(2, MarkerKind::Commit), opts(1)),
        Err(Error::CoordinatorFenced { found: 2, current: 3, .. })
    ));
    assert_eq!(p.last_stable_offset(), 2, "the late marker ended nothing");
    drop(p); // a crash: the state is rebuilt from the log, markers included
    let q = v.partition(LogConfig::default());
    q.take_over(2).unwrap();
    assert_eq!(q.producers()[0].coordinator_epoch, 3);
    assert!(matches!(
        q.append_marker(&m(2, MarkerKind::Abort), opts(2)),
        Err(Error::CoordinatorFenced { .. })
    ));
    let out = q.append_marker(&m(4, MarkerKind::Abort), opts(2)).unwrap();
    block_on(q.wait_durable(out.last_offset)).unwrap();
    assert_eq!(q.last_stable_offset(), 4);
    assert_eq!(q.producers()[0].coordinator_epoch, 4);
}
scenario!(a_deposed_coordinators_late_marker_is_fenced_across_a_crash);
