//! How much one read may return (issue #15): a fetch's budget is a hard bound once some
//! partition returned data, and KIP-74's "first batch whole" is bounded by max.message.bytes.

use kaas_storage::testing::{BatchBuilder, decode_records};
use kaas_storage::{Error, LogConfig, ReadBound};

use super::support::*;

fn bound(max_bytes: usize, first_batch_whole: bool) -> ReadBound {
    ReadBound {
        max_bytes,
        first_batch_whole,
    }
}

fn reads_stay_within_their_bound(v: &Volume) {
    let config = LogConfig {
        max_message_bytes: 1 << 20,
        ..LogConfig::default()
    };
    let p = v.leader(1, config);
    let big = BatchBuilder::new()
        .timestamps(NOW)
        .records(3, 100 * 1024)
        .build();
    append(&p, 1, big.clone());
    append(&p, 1, batch("small", 2));

    // A budget far larger than what is asked for reads only whole batches within it.
    let r = p.read_bounded(0, bound(big.len() + 10, true), false).unwrap();
    assert_eq!(r.records.len(), big.len());
    // KIP-74: the first batch whole, even past the budget...
    let r = p.read_bounded(0, bound(10, true), false).unwrap();
    assert_eq!(decode_records(&r.records).len(), 3);
    // ...but not for a later partition of the same fetch: nothing that does not fit.
    let r = p.read_bounded(0, bound(10, false), false).unwrap();
    assert!(r.records.is_empty());
    assert_eq!(r.high_watermark, 5);
    let r = p.read_committed(3, 10).unwrap();
    assert_eq!(values(&decode_records(&r.records)), vec!["small-0", "small-1"]);

    // A first batch larger than both the budget and max.message.bytes (here: the limit was
    // lowered below the data) is refused, not loaded whatever its size.
    p.set_config(LogConfig {
        max_message_bytes: 64 * 1024,
        ..config
    });
    assert!(matches!(
        p.read_bounded(0, bound(10, true), false),
        Err(Error::RecordTooLarge { size, max }) if size == big.len() && max == 64 * 1024
    ));
    // A budget that holds it still reads it.
    let r = p.read_bounded(0, bound(big.len(), true), false).unwrap();
    assert_eq!(r.records.len(), big.len());
}
scenario!(reads_stay_within_their_bound);
