//! Idempotent producers: duplicates, sequence gaps, epochs, and state across leadership moves.

use kaas_storage::testing::BatchBuilder;
use kaas_storage::{Error, LogConfig};

use super::support::*;

fn idem(pid: i64, epoch: i16, seq: i32, n: usize) -> Vec<u8> {
    BatchBuilder::new()
        .timestamps(NOW)
        .producer(pid, epoch, seq)
        .records(n, 8)
        .build()
}

fn duplicates_return_original_offsets(v: &Volume) {
    let p = v.leader(1, LogConfig::default());
    append(&p, 1, batch("other", 2));
    let first = append(&p, 1, idem(42, 0, 0, 3));
    assert_eq!((first.base_offset, first.last_offset), (2, 4));
    let retry = p.append(&idem(42, 0, 0, 3), opts(1)).unwrap();
    assert!(retry.duplicate);
    assert_eq!((retry.base_offset, retry.last_offset), (2, 4));
    assert_eq!(p.log_end_offset(), 5, "a duplicate writes nothing");
    let next = append(&p, 1, idem(42, 0, 3, 1));
    assert_eq!(next.base_offset, 5);
    // An older batch (within the last five) is still recognised.
    assert!(p.append(&idem(42, 0, 0, 3), opts(1)).unwrap().duplicate);
}
scenario!(duplicates_return_original_offsets);

fn sequence_and_epoch_rules(v: &Volume) {
    let p = v.leader(1, LogConfig::default());
    append(&p, 1, idem(7, 3, 0, 2));
    assert!(matches!(
        p.append(&idem(7, 3, 5, 1), opts(1)),
        Err(Error::OutOfOrderSequence {
            last: 1,
            found: 5,
            ..
        })
    ));
    assert!(matches!(
        p.append(&idem(7, 2, 2, 1), opts(1)),
        Err(Error::InvalidProducerEpoch {
            found: 2,
            current: 3,
            ..
        })
    ));
    assert!(matches!(
        p.append(&idem(7, 4, 1, 1), opts(1)),
        Err(Error::OutOfOrderSequence { .. })
    ));
    append(&p, 1, idem(7, 4, 0, 1));
    assert_eq!(p.log_end_offset(), 3);
    // A producer the partition has never seen may start anywhere (Kafka 4 behaviour).
    append(&p, 1, idem(8, 0, 17, 1));
}
scenario!(sequence_and_epoch_rules);

fn producer_state_survives_relinquish_and_take_over(v: &Volume) {
    let p = v.leader(1, LogConfig::default());
    append(&p, 1, idem(42, 0, 0, 2));
    append(&p, 1, idem(42, 0, 2, 2));
    p.relinquish().unwrap();
    assert!(v.files().contains(&"producer-state.snapshot".to_owned()));
    let q = v.partition(LogConfig::default());
    let report = q.take_over(2).unwrap();
    assert_eq!(report.producers, 1);
    let retry = q.append(&idem(42, 0, 2, 2), opts(2)).unwrap();
    assert!(retry.duplicate);
    assert_eq!(retry.base_offset, 2);
    assert!(matches!(
        q.append(&idem(42, 0, 9, 1), opts(2)),
        Err(Error::OutOfOrderSequence { .. })
    ));
}
scenario!(producer_state_survives_relinquish_and_take_over);

fn producer_state_is_replayed_after_a_crash(v: &Volume) {
    // Small segments: snapshots are written at each roll, the tail after the last one must be
    // replayed from the log because the leader "crashes" (never relinquishes).
    let config = LogConfig {
        segment_bytes: 300,
        ..LogConfig::default()
    };
    let p = v.leader(1, config);
    for seq in 0..10 {
        append(&p, 1, idem(42, 0, seq, 1));
    }
    drop(p);
    let q = v.partition(config);
    q.take_over(2).unwrap();
    let retry = q.append(&idem(42, 0, 9, 1), opts(2)).unwrap();
    assert!(retry.duplicate);
    assert_eq!(retry.base_offset, 9);
    assert_eq!(append(&q, 2, idem(42, 0, 10, 1)).base_offset, 10);
}
scenario!(producer_state_is_replayed_after_a_crash);
