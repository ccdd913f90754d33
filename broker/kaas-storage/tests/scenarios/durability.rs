//! Group commit, the high watermark and poisoning.

use std::sync::Arc;

use kaas_storage::{Error, LogConfig};

use super::support::*;

fn group_commit_makes_everything_durable(v: &Volume) {
    let p = v.leader(
        1,
        LogConfig {
            segment_bytes: 64 << 10,
            ..LogConfig::default()
        },
    );
    let mut rx = p.watch_high_watermark();
    block_on(async {
        let mut tasks = Vec::new();
        for t in 0..8 {
            let p = p.clone();
            tasks.push(tokio::spawn(async move {
                let mut last = -1;
                for i in 0..50 {
                    let b = batch(&format!("t{t}-{i}"), 2);
                    let out = p.append(&b, opts(1)).unwrap();
                    assert!(p.high_watermark() <= p.log_end_offset());
                    p.wait_durable(out.last_offset).await.unwrap();
                    assert!(p.high_watermark() > out.last_offset);
                    last = out.last_offset;
                }
                last
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        assert!(rx.has_changed().unwrap());
        rx.borrow_and_update();
    });
    assert_eq!(p.log_end_offset(), 800);
    assert_eq!(p.high_watermark(), 800);
    assert_eq!(read_all(&p).len(), 800);
}
scenario!(group_commit_makes_everything_durable);

fn unsynced_records_are_not_visible(v: &Volume) {
    let p = v.leader(1, LogConfig::default());
    let out = p.append(&batch("a", 3), opts(1)).unwrap();
    assert_eq!(p.log_end_offset(), 3);
    assert_eq!(p.high_watermark(), 0, "nothing asked for durability yet");
    assert!(p.read(0, 1 << 20).unwrap().records.is_empty());
    let mut rx = p.watch_high_watermark();
    block_on(p.wait_durable(out.last_offset)).unwrap();
    assert_eq!(*rx.borrow_and_update(), 3);
    assert_eq!(read_all(&p).len(), 3);
    assert!(matches!(
        block_on(p.wait_durable(3)),
        Err(Error::OffsetOutOfRange { .. })
    ));
}
scenario!(unsynced_records_are_not_visible);

#[test]
fn failed_fsync_poisons_until_take_over() {
    let v = Volume::memory();
    let mem = v.mem.clone().unwrap();
    let p = v.leader(1, LogConfig::default());
    append(&p, 1, batch("a", 1));
    let out = p.append(&batch("b", 1), opts(1)).unwrap();
    mem.fail_syncs(true);
    assert!(matches!(
        block_on(p.wait_durable(out.last_offset)),
        Err(Error::StorageFailure(_))
    ));
    assert!(matches!(
        p.append(&batch("c", 1), opts(1)),
        Err(Error::StorageFailure(_))
    ));
    assert_eq!(p.high_watermark(), 1);
    assert!(p.has_storage_failure() && p.storage_failure().is_some(), "the flag without the lock says what the reason does");
    mem.fail_syncs(false);
    // fsyncgate: "b" reached the page cache but its fdatasync failed, so it may never reach
    // the disk. It was not acknowledged, and the take-over must not serve it (a consumer
    // would read a record that can vanish later).
    let report = p.take_over(2).unwrap();
    assert_eq!(report.log_end_offset, 1);
    assert!(!p.has_storage_failure() && p.storage_failure().is_none());
    append(&p, 2, batch("d", 1));
    assert_eq!(values(&read_all(&p)), vec!["a-0", "d-0"]);
    // The same at the same epoch (a cluster re-takes a poisoned partition at its epoch).
    let out = p.append(&batch("e", 1), opts(2)).unwrap();
    mem.fail_syncs(true);
    assert!(block_on(p.wait_durable(out.last_offset)).is_err());
    assert!(p.has_storage_failure());
    mem.fail_syncs(false);
    assert_eq!(p.take_over(2).unwrap().log_end_offset, 2);
    assert!(!p.has_storage_failure());
    assert_eq!(values(&read_all(&p)), vec!["a-0", "d-0"]);
}

#[test]
fn waiters_on_many_partitions_share_the_runtime() {
    let v = Volume::memory();
    let engine = v.engine();
    let parts: Vec<Arc<_>> = (0..8)
        .map(|i| {
            let p = engine
                .open_partition(TOPIC, v.topic_id, i, LogConfig::default())
                .unwrap();
            p.take_over(1).unwrap();
            p
        })
        .collect();
    block_on(async {
        let mut tasks = Vec::new();
        for p in &parts {
            for _ in 0..4 {
                let p = p.clone();
                tasks.push(tokio::spawn(async move {
                    let out = p.append(&batch("x", 10), opts(1)).unwrap();
                    p.wait_durable(out.last_offset).await.unwrap();
                }));
            }
        }
        for t in tasks {
            t.await.unwrap();
        }
    });
    assert!(parts.iter().all(|p| p.high_watermark() == 40));
}

/// The produce path's wait (`append_durable`): registered with the append under its lock, it
/// resolves once its round is durable — also when that round ended before anyone waited.
fn an_appends_registered_wait_resolves(v: &Volume) {
    let p = v.leader(1, LogConfig::default());
    let (first, durable) = p.append_durable(&batch("a", 3), opts(1)).unwrap();
    // Nobody waits yet: the append started the group commit itself.
    block_on(async {
        let mut rx = p.watch_high_watermark();
        rx.wait_for(|hwm| *hwm > first.last_offset).await.unwrap();
    });
    block_on(durable.wait()).unwrap();
    let (second, durable) = p.append_durable(&batch("b", 2), opts(1)).unwrap();
    block_on(durable.wait()).unwrap();
    assert_eq!(p.high_watermark(), second.last_offset + 1);
    assert_eq!(values(&read_all(&p)), vec!["a-0", "a-1", "a-2", "b-0", "b-1"]);
}
scenario!(an_appends_registered_wait_resolves);

/// A registered wait must not outlive its partition's leadership: a leader deposed between its
/// append and the append's fdatasync learns it at the round's fence read and answers its waiter
/// with an error (never an acknowledgement, never a hang).
fn an_appends_registered_wait_sees_its_deposition(v: &Volume) {
    let config = LogConfig::default();
    let zombie = v.leader(1, config);
    append(&zombie, 1, batch("old", 1));
    // The newer leader claims the partition first, so the zombie's round must find it.
    let _leader = v.leader(2, config);
    let (_, durable) = zombie.append_durable(&batch("late", 1), opts(1)).unwrap();
    let waited = block_on(async { tokio::time::timeout(std::time::Duration::from_secs(30), durable.wait()).await });
    assert!(matches!(waited, Ok(Err(Error::NotLeader))), "{waited:?}");
    assert!(!zombie.is_leader());
}
scenario!(an_appends_registered_wait_sees_its_deposition);

#[test]
fn an_appends_registered_wait_sees_a_failed_fsync() {
    let v = Volume::memory();
    let mem = v.mem.clone().unwrap();
    let p = v.leader(1, LogConfig::default());
    append(&p, 1, batch("a", 1));
    // Failing before the append: its own round fails, whenever it runs.
    mem.fail_syncs(true);
    let (_, durable) = p.append_durable(&batch("b", 1), opts(1)).unwrap();
    let waited = block_on(async { tokio::time::timeout(std::time::Duration::from_secs(30), durable.wait()).await });
    assert!(matches!(waited, Ok(Err(Error::StorageFailure(_)))), "{waited:?}");
    assert_eq!(p.high_watermark(), 1);
    mem.fail_syncs(false);
}

/// A hand-over (relinquish) syncs everything before the role ends: an append's registered wait
/// still resolves, though its generation has ended.
fn an_appends_registered_wait_resolves_through_a_hand_over(v: &Volume) {
    let p = v.leader(1, LogConfig::default());
    let (_, durable) = p.append_durable(&batch("a", 2), opts(1)).unwrap();
    p.relinquish().unwrap();
    assert!(!p.is_leader());
    block_on(durable.wait()).unwrap();
    let next = v.leader(2, LogConfig::default());
    assert_eq!(values(&read_all(&next)), vec!["a-0", "a-1"]);
}
scenario!(an_appends_registered_wait_resolves_through_a_hand_over);
