//! Lookups by timestamp, max timestamp and leader epoch.

use kaas_storage::testing::BatchBuilder;
use kaas_storage::{Error, LogConfig};

use super::support::*;

fn timestamps_and_epochs(v: &Volume) {
    let config = LogConfig {
        segment_bytes: 400,
        index_interval_bytes: 64,
        ..LogConfig::default()
    };
    let p = v.leader(1, config);
    assert_eq!(p.max_timestamp().unwrap(), None);
    assert_eq!(p.offset_for_timestamp(0).unwrap(), None);
    // 20 batches of 3 records; batch i has timestamps NOW + 10 i + (0, 1, 2).
    for i in 0..20 {
        append(
            &p,
            1,
            BatchBuilder::new()
                .timestamps(NOW + 10 * i)
                .records(3, 20)
                .build(),
        );
    }
    // A batch with an out-of-order (older) timestamp does not disturb lookups.
    append(
        &p,
        1,
        BatchBuilder::new()
            .timestamps(NOW - 100)
            .records(1, 20)
            .build(),
    );
    assert_eq!(p.offset_for_timestamp(NOW).unwrap(), Some((0, NOW)));
    assert_eq!(p.offset_for_timestamp(NOW - 1000).unwrap(), Some((0, NOW)));
    assert_eq!(
        p.offset_for_timestamp(NOW + 101).unwrap(),
        Some((31, NOW + 101))
    );
    assert_eq!(
        p.offset_for_timestamp(NOW + 103).unwrap(),
        Some((33, NOW + 110))
    );
    assert_eq!(
        p.offset_for_timestamp(NOW + 192).unwrap(),
        Some((59, NOW + 192))
    );
    assert_eq!(p.offset_for_timestamp(NOW + 193).unwrap(), None);
    assert_eq!(p.max_timestamp().unwrap(), Some((59, NOW + 192)));
    p.relinquish().unwrap();
    let q = v.leader(4, config);
    append(&q, 4, batch("x", 2));
    assert_eq!(
        q.offset_for_timestamp(NOW + 101).unwrap(),
        Some((31, NOW + 101)),
        "from sealed index files"
    );
    assert_eq!(q.max_timestamp().unwrap(), Some((59, NOW + 192)));
    // Epochs from segment names: epoch 1 covered [0, 61), epoch 4 starts at 61.
    assert_eq!(q.end_offset_for_epoch(4).unwrap(), (4, 63));
    assert_eq!(q.end_offset_for_epoch(1).unwrap(), (1, 61));
    assert_eq!(q.end_offset_for_epoch(3).unwrap(), (1, 61));
    assert_eq!(q.end_offset_for_epoch(0).unwrap(), (0, 0));
    assert_eq!(q.end_offset_for_epoch(9).unwrap(), (-1, -1));
    q.relinquish().unwrap();
    assert!(matches!(q.end_offset_for_epoch(4), Err(Error::NotLeader)));
}
scenario!(timestamps_and_epochs);

fn corrupt_index_files_are_rebuilt(v: &Volume) {
    let config = LogConfig {
        segment_bytes: 2000,
        index_interval_bytes: 100,
        ..LogConfig::default()
    };
    let p = v.leader(1, config);
    for i in 0..30 {
        append(&p, 1, batch(&format!("b{i}"), 2));
    }
    p.relinquish().unwrap();
    let index = v
        .files()
        .into_iter()
        .find(|n| n.ends_with(".index"))
        .unwrap();
    let timeindex = v
        .files()
        .into_iter()
        .find(|n| n.ends_with(".timeindex"))
        .unwrap();
    let len = v.file_len(&index);
    v.write_at(&index, 0, &vec![0xee; len as usize]);
    v.truncate(&timeindex, 5);
    let q = v.leader(2, config);
    assert_eq!(read_all(&q).len(), 60);
    for offset in [0, 7, 13, 29, 59] {
        let got = kaas_storage::testing::decode_records(&q.read(offset, 1).unwrap().records);
        assert!(got.iter().any(|r| r.offset == offset));
    }
}
scenario!(corrupt_index_files_are_rebuilt);
