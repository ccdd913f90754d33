//! Crash recovery at take_over: torn and scribbled tails, lagging manifests.

use kaas_storage::LogConfig;

use super::support::*;

/// Three durable batches, then the leader "crashes" (no relinquish). Returns the name of the
/// segment holding them and the size of the last batch.
fn crashed_leader(v: &Volume) -> (String, u64) {
    let p = v.leader(1, LogConfig::default());
    append(&p, 1, batch("a", 2));
    append(&p, 1, batch("b", 2));
    let last = batch("c", 2).len() as u64;
    append(&p, 1, batch("c", 2));
    drop(p);
    let log = v.logs().into_iter().find(|n| v.file_len(n) > 0).unwrap();
    (log, last)
}

fn torn_tail_is_truncated(v: &Volume) {
    let (log, last) = crashed_leader(v);
    let len = v.file_len(&log);
    v.truncate(&log, len - 10);
    let p = v.partition(LogConfig::default());
    let report = p.take_over(2).unwrap();
    assert_eq!(report.truncated_bytes, last - 10);
    assert_eq!(report.log_end_offset, 4);
    assert_eq!(
        v.file_len(&log),
        len - last,
        "the file ends on a batch boundary"
    );
    assert_eq!(values(&read_all(&p)), vec!["a-0", "a-1", "b-0", "b-1"]);
    let out = append(&p, 2, batch("d", 1));
    assert_eq!(out.base_offset, 4);
}
scenario!(torn_tail_is_truncated);

fn scribbled_tail_is_truncated(v: &Volume) {
    let (log, last) = crashed_leader(v);
    let len = v.file_len(&log);
    v.write_at(&log, len - 5, b"XXXXX");
    let report = v.partition(LogConfig::default()).take_over(2).unwrap();
    assert_eq!(report.truncated_bytes, last);
    assert_eq!(report.log_end_offset, 4);
}
scenario!(scribbled_tail_is_truncated);

fn zeroed_and_garbage_tails_are_truncated(v: &Volume) {
    let (log, _) = crashed_leader(v);
    let len = v.file_len(&log);
    v.write_at(&log, len, &[0u8; 4096]);
    let p = v.partition(LogConfig::default());
    let report = p.take_over(2).unwrap();
    assert_eq!((report.truncated_bytes, report.log_end_offset), (4096, 6));
    p.relinquish().unwrap();
    // A valid batch that does not continue the offsets (stale bytes) is cut as well.
    let newest = v.logs().into_iter().last().unwrap();
    let mut stale = batch("stale", 1);
    stale[7] = 99; // base offset 99 instead of 6
    let crc_free = stale.len() as u64;
    v.write_at(&newest, 0, &stale);
    let report = v.partition(LogConfig::default()).take_over(3).unwrap();
    assert_eq!(
        (report.truncated_bytes, report.log_end_offset),
        (crc_free, 6)
    );
}
scenario!(zeroed_and_garbage_tails_are_truncated);

fn lagging_manifest_is_reconciled_with_the_log(v: &Volume) {
    let p = v.leader(1, LogConfig::default());
    append(&p, 1, batch("a", 5));
    drop(p); // crash: the manifest still says high watermark 0
    let q = v.partition(LogConfig::default());
    let report = q.take_over(2).unwrap();
    assert_eq!(
        (report.manifest_high_watermark, report.log_end_offset),
        (0, 5)
    );
    assert_eq!(q.high_watermark(), 5);
    assert_eq!(read_all(&q).len(), 5);
}
scenario!(lagging_manifest_is_reconciled_with_the_log);

fn leftover_temp_files_are_removed(v: &Volume) {
    let p = v.leader(1, LogConfig::default());
    append(&p, 1, batch("a", 1));
    p.relinquish().unwrap();
    let temp = kaas_shared::names::temp_file_name("manifest.json");
    v.fs()
        .open(
            &v.partition_dir().join(&temp),
            kaas_shared::fs::OpenMode::CreateNew,
        )
        .unwrap();
    let report = v.partition(LogConfig::default()).take_over(2).unwrap();
    assert_eq!(report.removed_files, 1);
    assert!(!v.files().contains(&temp));
}
scenario!(leftover_temp_files_are_removed);

#[cfg(test)]
mod property {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        /// Whatever bytes follow valid batches in the newest segment, recovery never panics,
        /// keeps the valid prefix and leaves a log that takes appends.
        #[test]
        fn recovery_survives_arbitrary_tails(tail in proptest::collection::vec(any::<u8>(), 0..600)) {
            let v = Volume::memory();
            let (log, _) = crashed_leader(&v);
            let len = v.file_len(&log);
            v.write_at(&log, len, &tail);
            let p = v.partition(LogConfig::default());
            let report = p.take_over(2).unwrap();
            prop_assert!(report.log_end_offset >= 6);
            prop_assert_eq!(&values(&read_all(&p))[..6], &["a-0", "a-1", "b-0", "b-1", "c-0", "c-1"]);
            let b = batch("after", 1);
            let out = p.append(&b, opts(2)).unwrap();
            prop_assert_eq!(out.base_offset, report.log_end_offset);
        }
    }
}
