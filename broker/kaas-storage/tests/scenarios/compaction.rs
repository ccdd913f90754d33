//! Log compaction (cleanup.policy=compact): what a clean keeps, and the swap under crashes.

use std::collections::BTreeMap;
use std::sync::Arc;

use kaas_storage::testing::{BatchBuilder, TestRecord, decode_records};
use kaas_storage::{CleanStep, Error, LogConfig, Marker, MarkerKind, RecordError};

use super::support::*;

const TRANSACTIONAL: i16 = 0x10;

fn compacted() -> LogConfig {
    kaas_storage::testing::compacted_config()
}

/// One record `key` = `value`, stamped NOW.
fn kv(key: &str, value: &str) -> Vec<u8> {
    BatchBuilder::new().timestamps(NOW).record(Some(key.as_bytes()), Some(value.as_bytes())).build()
}

fn tombstone(key: &str) -> Vec<u8> {
    BatchBuilder::new().timestamps(NOW).record(Some(key.as_bytes()), None).build()
}

fn key(r: &TestRecord) -> String {
    String::from_utf8(r.key.clone().unwrap_or_default()).unwrap()
}

fn value(r: &TestRecord) -> Option<String> {
    r.value.clone().map(|v| String::from_utf8(v).unwrap())
}

/// key → (offset, value) of the last record of each key.
fn latest(records: &[TestRecord]) -> BTreeMap<String, (i64, Option<String>)> {
    records.iter().map(|r| (key(r), (r.offset, value(r)))).collect()
}

/// The base offset of the newest (active) segment.
fn active_base(v: &Volume) -> i64 {
    let name = v.logs().pop().unwrap();
    name.split(['-', '.']).nth(1).unwrap().parse().unwrap()
}

/// Writes `n` records cycling over five keys; returns what a read sees.
fn fill(v: &Volume, p: &kaas_storage::Partition, n: usize) -> Vec<TestRecord> {
    for i in 0..n {
        append(p, p.leader_epoch(), kv(&format!("k{}", i % 5), &format!("v{i}")));
    }
    assert!(v.logs().len() > 3, "several segments");
    read_all(p)
}

fn latest_value_per_key_survives_at_its_offset(v: &Volume) {
    let p = v.leader(1, compacted());
    let before = fill(v, &p, 40);
    let active = active_base(v);
    let active_name = v.logs().pop().unwrap();
    let active_bytes = v.read_file(&active_name);
    let report = p.clean(NOW).unwrap().expect("a clean is due");
    assert_eq!(report.clean_up_to, active);
    assert!(report.bytes_written < report.bytes_read);
    let after = read_all(&p);
    // Below the active segment only the latest record of each key stays, at its offset;
    // the active segment is untouched.
    let closed: Vec<_> = before.iter().filter(|r| r.offset < active).cloned().collect();
    let expected: Vec<_> = before.iter().filter(|r| r.offset >= active || latest(&closed)[&key(r)].0 == r.offset).cloned().collect();
    assert_eq!(after, expected);
    assert_eq!(v.read_file(&active_name), active_bytes, "the active segment is never rewritten");
    assert_eq!((p.log_start_offset(), p.high_watermark()), (0, 40), "offsets do not move");
    // A fetch from an offset cleaned away returns the next record.
    let gone = before.iter().find(|r| !after.contains(r)).unwrap().offset;
    let next = after.iter().find(|r| r.offset > gone).unwrap().offset;
    let fetched = decode_records(&p.read(gone, 1 << 20).unwrap().records);
    assert_eq!(fetched.iter().find(|r| r.offset >= gone).unwrap().offset, next);
    // ListOffsets by time answers a record that is still there; DeleteRecords into a gap
    // moves the log start there.
    let first_kept = after.first().unwrap();
    assert_eq!(p.offset_for_timestamp(0).unwrap(), Some((first_kept.offset, first_kept.timestamp)));
    assert_eq!(p.delete_records(gone).unwrap(), gone);
    assert_eq!(read_all(&p).first().unwrap().offset, next);
    let stats = p.cleaner_stats();
    assert!(stats.last_clean_ms == Some(NOW) && stats.bytes_cleaned == report.bytes_read && stats.passes == 1);
    assert!(stats.bytes_removed > 0);
    // Nothing new is dirty: no second pass, and the ratio says so.
    assert_eq!(p.clean(NOW).unwrap(), None);
    assert_eq!(p.cleaner_stats().dirty_ratio, 0.0);
}
scenario!(latest_value_per_key_survives_at_its_offset);

fn a_small_dedupe_buffer_cleans_the_prefix_that_fits(v: &Volume) {
    // A table of 8 buckets: six keys per pass.
    let p = v.leader(1, LogConfig { cleaner_dedupe_buffer_bytes: 25 * 8, ..compacted() });
    for round in 0..3 {
        for k in 0..12 {
            append(&p, 1, kv(&format!("k{k}"), &format!("r{round}")));
        }
    }
    let before = read_all(&p);
    let active = active_base(v);
    let first = p.clean(NOW).unwrap().expect("due");
    assert!(first.clean_up_to <= 6, "only the prefix whose keys fit is mapped: {first:?}");
    let mut passes = 1;
    while p.clean(NOW).unwrap().is_some() {
        passes += 1;
        assert!(passes < 20, "passes go on until the dirty section is clean");
    }
    assert!(passes > 2);
    let after = read_all(&p);
    assert_eq!(latest(&after), latest(&before));
    let closed_keys: Vec<_> = after.iter().filter(|r| r.offset < active).map(key).collect();
    let mut unique = closed_keys.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(closed_keys.len(), unique.len(), "one record per key below the active segment");
}
scenario!(a_small_dedupe_buffer_cleans_the_prefix_that_fits);

fn tombstones_stay_for_delete_retention_after_their_first_clean(v: &Volume) {
    let p = v.leader(1, compacted());
    append(&p, 1, kv("a", "1"));
    append(&p, 1, tombstone("a"));
    fill(v, &p, 30);
    p.clean(NOW).unwrap().expect("due");
    let a: Vec<_> = read_all(&p).into_iter().filter(|r| key(r) == "a").collect();
    assert_eq!(a.len(), 1, "the value goes, the tombstone stays");
    assert_eq!((a[0].offset, a[0].value.clone(), a[0].timestamp), (1, None, NOW));
    assert_eq!(p.clean(NOW + 999).unwrap(), None, "nothing dirty and the horizon not reached");
    assert!(read_all(&p).iter().any(|r| key(r) == "a"));
    p.clean(NOW + 1_000).unwrap().expect("the horizon makes a pass due");
    assert!(!read_all(&p).iter().any(|r| key(r) == "a"), "delete.retention.ms after the first clean, it is gone");
}
scenario!(tombstones_stay_for_delete_retention_after_their_first_clean);

fn min_compaction_lag_holds_young_records(v: &Volume) {
    let p = v.leader(1, LogConfig { min_compaction_lag_ms: 10_000, ..compacted() });
    let before = fill(v, &p, 30);
    assert_eq!(p.clean(NOW + 5_000).unwrap(), None, "every closed segment is younger than the lag");
    assert_eq!(read_all(&p), before);
    p.clean(NOW + 20_000).unwrap().expect("old enough now");
    assert!(read_all(&p).len() < before.len());
}
scenario!(min_compaction_lag_holds_young_records);

fn max_compaction_lag_cleans_whatever_the_dirty_ratio(v: &Volume) {
    let p = v.leader(1, LogConfig { min_cleanable_dirty_ratio: 0.9, max_compaction_lag_ms: 60_000, ..compacted() });
    fill(v, &p, 40);
    p.clean(NOW).unwrap().expect("a new leader's first pass sees the whole log dirty");
    fill(v, &p, 10);
    assert!(p.clean(NOW).unwrap().is_none(), "a little dirt, well below the ratio");
    assert!(p.cleaner_stats().dirty_ratio < 0.9);
    p.clean(NOW + 60_001).unwrap().expect("records older than max.compaction.lag.ms are cleaned");
}
scenario!(max_compaction_lag_cleans_whatever_the_dirty_ratio);

fn idempotent_retries_are_still_duplicates_after_cleaning(v: &Volume) {
    let config = compacted();
    let p = v.leader(1, config);
    let idem = BatchBuilder::new().timestamps(NOW).producer(7, 0, 0).record(Some(b"a"), Some(b"first")).build();
    let first = append(&p, 1, idem.clone());
    fill(v, &p, 30);
    append(&p, 1, kv("a", "second"));
    fill(v, &p, 20);
    p.clean(NOW).unwrap().expect("due");
    assert!(!read_all(&p).iter().any(|r| r.offset == first.base_offset), "the superseded record is gone");
    let retry = p.append(&idem.clone(), opts(1)).unwrap();
    assert!(retry.duplicate && retry.base_offset == first.base_offset);
    // A new leader without the producer snapshot rebuilds the state from the log: the
    // producer's last batch was kept (emptied), so the retry is still a duplicate.
    p.relinquish().unwrap();
    v.fs().remove_file(&v.partition_dir().join("producer-state.snapshot")).unwrap();
    let q = v.leader(2, config);
    let retry = q.append(&idem.clone(), opts(2)).unwrap();
    assert!(retry.duplicate && retry.base_offset == first.base_offset);
}
scenario!(idempotent_retries_are_still_duplicates_after_cleaning);

fn aborted_records_go_committed_stay_markers_last(v: &Volume) {
    let p = v.leader(1, compacted());
    let txn = |pid, seq, key: &str, value: &str| {
        BatchBuilder::new()
            .timestamps(NOW)
            .producer(pid, 0, seq)
            .attributes(TRANSACTIONAL)
            .record(Some(key.as_bytes()), Some(value.as_bytes()))
            .build()
    };
    let marker = |pid, kind| {
        let m = Marker { producer_id: pid, producer_epoch: 0, kind, coordinator_epoch: 1 };
        let out = p.append_marker(&m, opts(1)).unwrap();
        block_on(p.wait_durable(out.last_offset)).unwrap();
        out.base_offset
    };
    append(&p, 1, txn(9, 0, "t", "aborted"));
    let abort = marker(9, MarkerKind::Abort);
    append(&p, 1, txn(10, 0, "u", "committed"));
    let commit = marker(10, MarkerKind::Commit);
    // Producer 9 goes on: its aborted batch is not its last one (the last is kept, emptied,
    // and keeps its marker company, as in Kafka).
    append(&p, 1, txn(9, 1, "t", "later"));
    marker(9, MarkerKind::Commit);
    fill(v, &p, 30);
    p.clean(NOW).unwrap().expect("due");
    let values: Vec<_> = read_all(&p).iter().filter_map(value).collect();
    assert!(!values.iter().any(|x| x == "aborted"), "aborted records are dropped");
    assert!(values.iter().any(|x| x == "committed"), "committed records stay");
    let base_at = |offset| kaas_storage::testing::batch_base_offsets(&p.read(offset, 1 << 20).unwrap().records)[0];
    assert_eq!((base_at(abort), base_at(commit)), (abort, commit), "markers stay while this pass removed their data");
    // The next pass finds the aborted transaction's data gone: its marker waits out
    // delete.retention.ms, then goes. The committed data is still there, so its marker stays.
    fill(v, &p, 10);
    p.clean(NOW + 10).unwrap().expect("due");
    assert_eq!(base_at(abort), abort);
    fill(v, &p, 10);
    p.clean(NOW + 10 + 1_000).unwrap().expect("due");
    assert!(base_at(abort) > abort, "the abort marker is gone");
    assert_eq!(base_at(commit), commit);
    // The aborted transaction is still indexed, its marker is not: the producer's later,
    // committed transaction is not taken for it.
    fill(v, &p, 10);
    p.clean(NOW + 2_000).unwrap().expect("due");
    assert!(read_all(&p).iter().filter_map(value).any(|x| x == "later"), "a later committed transaction of producer 9 stays");
}
scenario!(aborted_records_go_committed_stay_markers_last);

fn keyless_records_are_refused_and_compact_only_keeps_old_segments(v: &Volume) {
    let p = v.leader(1, LogConfig { retention_ms: 1, retention_bytes: 1, ..compacted() });
    let keyless = BatchBuilder::new().timestamps(NOW).record(Some(b"k"), Some(b"v")).record(None, Some(b"v")).build();
    assert!(matches!(p.append(&keyless.clone(), opts(1)), Err(Error::InvalidRecord(RecordError::MissingKey { index: 1 }))));
    fill(v, &p, 30);
    let logs = v.logs().len();
    p.housekeeping(NOW + 1_000_000).unwrap();
    assert_eq!(v.logs().len(), logs, "cleanup.policy=compact alone deletes nothing by retention");
    p.set_config(LogConfig { cleanup_delete: true, ..p.config() });
    p.housekeeping(NOW + 1_000_000).unwrap();
    assert_eq!(v.logs().len(), 1, "compact,delete does");
    // A topic that is not compacted is never cleaned.
    p.set_config(LogConfig { cleanup_compact: false, ..p.config() });
    assert_eq!(p.clean(NOW).unwrap(), None);
}
scenario!(keyless_records_are_refused_and_compact_only_keeps_old_segments);

/// A clean stopped at `step` (as a crash would), then a new leader: the log it reads is the
/// old one or a complete clean of a prefix (each key's latest value at its offset, nothing
/// resurrected, nothing invented), no temp file is left, and its first pass finishes the job.
fn crash_mid_clean(v: &Volume, step: CleanStep) {
    let p = v.leader(1, compacted());
    let before = fill(v, &p, 40);
    // One group of every closed segment, so the swap has segments to unlink.
    p.set_config(LogConfig { segment_bytes: 1 << 20, ..compacted() });
    p.set_clean_hook(Some(Arc::new(move |at| at == step)));
    assert!(matches!(p.clean(NOW), Err(Error::StorageFailure(_))));
    p.abandon();
    let q = v.leader(2, compacted());
    assert!(!v.files().iter().any(|n| n.ends_with(".tmp")), "the take-over removed the temp file: {:?}", v.files());
    let seen = read_all(&q);
    assert!(seen.iter().all(|r| before.contains(r)), "nothing invented");
    assert!(seen.windows(2).all(|w| w[0].offset < w[1].offset));
    assert_eq!(latest(&seen), latest(&before), "every key's latest value, at its offset");
    q.clean(NOW).unwrap().expect("the new leader's first pass cleans");
    let expected: Vec<_> = before.iter().filter(|r| latest(&before)[&key(r)].0 == r.offset).cloned().collect();
    assert_eq!(read_all(&q), expected);
}

/// One scenario per step of the swap.
macro_rules! crash_scenario {
    ($name:ident, $step:ident) => {
        fn $name(v: &Volume) {
            crash_mid_clean(v, CleanStep::$step);
        }
        scenario!($name);
    };
}
crash_scenario!(crash_after_temp_written, TempWritten);
crash_scenario!(crash_after_old_indexes_removed, OldIndexesRemoved);
crash_scenario!(crash_after_rename, Renamed);
crash_scenario!(crash_after_indexes_written, IndexesWritten);
crash_scenario!(crash_after_first_unlink, Unlinked);

fn a_stopped_pass_leaves_the_log_as_it_was(v: &Volume) {
    let p = v.leader(1, compacted());
    let before = fill(v, &p, 40);
    assert_eq!(p.clean_until(NOW, &|| true).unwrap(), None);
    assert_eq!(read_all(&p), before);
    assert!(!v.files().iter().any(|n| n.ends_with(".tmp")));
    assert!(p.clean(NOW).unwrap().is_some(), "the next pass cleans");
}
scenario!(a_stopped_pass_leaves_the_log_as_it_was);

/// A leader deposed while it cleaned must not swap: the new leader's claim fences it.
fn a_deposed_leader_does_not_swap(v: &Volume) {
    let p = v.leader(1, compacted());
    let before = fill(v, &p, 40);
    let q_engine = v.partition(compacted());
    p.set_clean_hook(Some(Arc::new(move |at| {
        if at == CleanStep::TempWritten {
            q_engine.take_over(2).unwrap();
        }
        false
    })));
    assert!(matches!(p.clean(NOW), Err(Error::FencedLeaderEpoch { requested: 1, current: 2 })));
    assert!(!p.is_leader());
    assert!(!v.files().iter().any(|n| n.ends_with(".tmp")));
    let q = v.leader(3, compacted());
    assert_eq!(read_all(&q), before, "the old set, whole");
}
scenario!(a_deposed_leader_does_not_swap);

/// The cleaner checkpoint travels with the partition on a hand-over: the next leader's first
/// pass finds nothing dirty instead of re-cleaning the whole log; a leader from before the
/// checkpoint existed (no field in manifest.json) starts from the log start.
fn a_hand_over_keeps_the_cleaner_checkpoint(v: &Volume) {
    let config = LogConfig { min_cleanable_dirty_ratio: 0.5, ..compacted() };
    let p = v.leader(1, config);
    let before = fill(v, &p, 40);
    let report = p.clean(NOW).unwrap().expect("a new leader's first pass sees the whole log dirty");
    p.relinquish().unwrap();
    let manifest: kaas_shared::epochs::Manifest = serde_json::from_slice(&v.read_file("manifest.json")).unwrap();
    assert_eq!(manifest.cleaned_up_to, Some(report.clean_up_to));

    let q = v.leader(2, config);
    // Dirty now: only what was the active segment (the take-over closed it).
    assert_eq!(q.clean(NOW).unwrap(), None, "the cleaned section is not dirty again");
    assert!(q.cleaner_stats().dirty_ratio < config.min_cleanable_dirty_ratio, "{:?}", q.cleaner_stats());
    assert_eq!(latest(&read_all(&q)), latest(&before));
    q.relinquish().unwrap();

    // A manifest without the checkpoint, as brokers before it wrote them.
    let dir = v.partition_dir();
    let mut old: serde_json::Value = serde_json::from_slice(&v.read_file("manifest.json")).unwrap();
    old.as_object_mut().unwrap().remove("cleanedUpTo");
    kaas_shared::atomic_file::write_json(&*v.fs(), &dir.join("manifest.json"), &old).unwrap();
    let r = v.leader(3, config);
    assert!(r.clean(NOW).unwrap().is_some(), "without a checkpoint the whole log is dirty");
}
scenario!(a_hand_over_keeps_the_cleaner_checkpoint);
