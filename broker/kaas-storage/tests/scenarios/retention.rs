//! Retention by size and time, and DeleteRecords.

use kaas_storage::testing::BatchBuilder;
use kaas_storage::{Error, LogConfig, Manifest};

use super::support::*;

fn retention_by_size(v: &Volume) {
    let config = LogConfig {
        segment_bytes: 500,
        retention_bytes: 1500,
        ..LogConfig::default()
    };
    let p = v.leader(1, config);
    for i in 0..30 {
        append(&p, 1, batch(&format!("r{i}"), 2));
    }
    let before = v.logs().len();
    p.housekeeping(NOW).unwrap();
    assert!(v.logs().len() < before);
    assert!(
        p.size_bytes() >= 1000 && p.size_bytes() <= 2100,
        "size {}",
        p.size_bytes()
    );
    let records = read_all(&p);
    assert_eq!(records.first().unwrap().offset, p.log_start_offset());
    assert_eq!(records.last().unwrap().offset, 59);
    assert!(matches!(
        p.read(0, 100),
        Err(Error::OffsetOutOfRange { .. })
    ));
    assert!(
        !v.files()
            .iter()
            .any(|n| n.starts_with("0000000001-00000000000000000000")),
        "indexes go too"
    );
}
scenario!(retention_by_size);

fn retention_by_time(v: &Volume) {
    let config = LogConfig {
        segment_bytes: 300,
        retention_ms: 1000,
        ..LogConfig::default()
    };
    let p = v.leader(1, config);
    for i in 0..10 {
        append(
            &p,
            1,
            BatchBuilder::new()
                .timestamps(NOW + 100 * i)
                .records(2, 30)
                .build(),
        );
    }
    let segments = v.logs().len();
    p.housekeeping(NOW + 500).unwrap();
    assert_eq!(
        v.logs().len(),
        segments,
        "nothing older than retention.ms yet"
    );
    p.housekeeping(NOW + 1000 + 450).unwrap();
    let start = p.log_start_offset();
    assert!(start > 0 && start < 20, "start {start}");
    assert!(
        read_all(&p)
            .iter()
            .all(|r| r.timestamp + 1000 >= NOW + 1000 + 450 - 200)
    );
    // Retention never removes the active segment.
    p.housekeeping(NOW + 1_000_000).unwrap();
    assert_eq!(v.logs().len(), 1);
    assert_eq!(p.high_watermark(), 20);
}
scenario!(retention_by_time);

fn delete_records_moves_log_start(v: &Volume) {
    let config = LogConfig {
        segment_bytes: 400,
        ..LogConfig::default()
    };
    let p = v.leader(1, config);
    for i in 0..20 {
        append(&p, 1, batch(&format!("d{i}"), 2));
    }
    let segments = v.logs().len();
    assert!(matches!(
        p.delete_records(41),
        Err(Error::OffsetOutOfRange { .. })
    ));
    assert_eq!(p.delete_records(25).unwrap(), 25);
    assert!(v.logs().len() < segments);
    assert_eq!(read_all(&p).first().unwrap().offset, 25);
    assert!(matches!(
        p.read(24, 100),
        Err(Error::OffsetOutOfRange { .. })
    ));
    let manifest: Manifest = serde_json::from_slice(&v.read_file("manifest.json")).unwrap();
    assert_eq!(manifest.log_start_offset, 25, "persisted before unlinking");
    assert_eq!(p.delete_records(10).unwrap(), 25, "never moves back");
    p.relinquish().unwrap();
    let q = v.leader(2, config);
    assert_eq!(q.log_start_offset(), 25);
    assert_eq!(q.delete_records(-1).unwrap(), 40);
    assert!(q.read(40, 100).unwrap().records.is_empty());
}
scenario!(delete_records_moves_log_start);

/// Housekeeping releases the descriptors of segments nobody read or wrote since its previous
/// round; a read opens them again (same records), an append the active one.
fn idle_sealed_descriptors_are_released(v: &Volume) {
    let config = LogConfig {
        segment_bytes: 300,
        ..LogConfig::default()
    };
    let p = v.leader(1, config);
    for i in 0..10 {
        append(&p, 1, batch(&format!("r{i}"), 2));
    }
    let segments = v.logs().len();
    assert!(segments > 3, "{segments} segments");
    let records = read_all(&p);
    assert_eq!(p.open_descriptors(), segments);
    p.housekeeping(NOW).unwrap();
    assert_eq!(
        p.open_descriptors(),
        segments,
        "a first round only clears the marks"
    );
    p.housekeeping(NOW).unwrap();
    assert_eq!(
        p.open_descriptors(),
        0,
        "an idle partition holds no descriptor"
    );

    assert_eq!(read_all(&p), records, "released segments read the same");
    assert_eq!(p.open_descriptors(), segments);
    p.housekeeping(NOW).unwrap();
    p.housekeeping(NOW).unwrap();
    // An append opens the active segment again and lands after what was there.
    append(&p, 1, batch("after", 1));
    assert_eq!(p.open_descriptors(), 1);
    let after = read_all(&p);
    assert_eq!(after[..records.len()], records[..]);
    assert_eq!(after.len(), records.len() + 1);
    assert_eq!(
        after.last().unwrap().offset,
        records.last().unwrap().offset + 1
    );

    // A segment read between two rounds keeps its descriptor for one more.
    p.housekeeping(NOW).unwrap();
    p.housekeeping(NOW).unwrap();
    let opened = p.open_descriptors();
    p.read(0, 1).unwrap();
    p.housekeeping(NOW).unwrap();
    assert_eq!(
        p.open_descriptors(),
        opened + 1,
        "the segment just read stays open"
    );
    p.housekeeping(NOW).unwrap();
    assert_eq!(p.open_descriptors(), opened);
}
scenario!(idle_sealed_descriptors_are_released);
