//! How much one read may return (issue #15): a fetch's budget is a hard bound once some
//! partition returned data, and KIP-74's "first batch whole" is bounded by max.message.bytes.

use kaas_storage::testing::{BatchBuilder, decode_records};
use kaas_storage::{Error, LogConfig, Marker, MarkerKind, ReadBound};

use super::support::*;

fn bound(max_bytes: usize, first_batch_whole: bool) -> ReadBound {
    ReadBound {
        max_bytes,
        first_batch_whole,
        piped: false,
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

/// The bytes a read handed over, and whether they came in pipes (drained here).
fn bytes_of(records: &bytes::Bytes) -> (Vec<u8>, bool) {
    match kaas_storage::piped::claim(records).unwrap() {
        Some(mut piped) => {
            let mut out = Vec::new();
            piped.drain_into(&mut out).unwrap();
            assert!(piped.is_sent());
            // The broker's encoder copies short record sets into the response; a stand-in
            // copied there would be sent as its zeros.
            assert!(out.len() >= kaas_storage::piped::MIN_PIPED, "a {}-byte record set was piped", out.len());
            (out, true)
        }
        None => (records.to_vec(), false),
    }
}

/// A piped read (record sets spliced into pipes, ends of whole batches found from headers and
/// the offset index) hands over exactly the bytes, aborted transactions and offsets a copying
/// read returns: for batches of many sizes, every cut of the budget, the first batch whole or
/// not, read_uncommitted and read_committed with an open transaction bounding the latter; and
/// every pipe is given back.
fn piped_reads_hand_over_what_copied_reads_return(v: &Volume) {
    let config = LogConfig {
        index_interval_bytes: 4096,
        max_message_bytes: 1 << 20,
        ..LogConfig::default()
    };
    let p = v.leader(1, config);
    // Batches from 100 B to 300 KiB, so a 64 KiB–1 MiB read ends at all kinds of boundaries.
    let sizes = [100usize, 3000, 17_000, 40_000, 250, 90_000, 300_000, 5000, 64 * 1024, 1200];
    let mut offsets = Vec::new();
    for round in 0..6 {
        for (i, size) in sizes.iter().enumerate() {
            let n = 1 + (i + round) % 3;
            let out = append(&p, 1, BatchBuilder::new().timestamps(NOW).records(n, size / n).build());
            offsets.push(out.base_offset);
            // Aborted transactions here and there: which a read_committed read reports
            // depends on where its batches end.
            if i % 4 == 1 {
                let pid = (round * 10 + i) as i64;
                append(&p, 1, BatchBuilder::new().timestamps(NOW).producer(pid, 0, 0).attributes(0x10).records(1, 20_000).build());
                let abort = Marker { producer_id: pid, producer_epoch: 0, kind: MarkerKind::Abort, coordinator_epoch: 1 };
                let out = p.append_marker(&abort, opts(1)).unwrap();
                block_on(p.wait_durable(out.last_offset)).unwrap();
            }
        }
    }
    // An open transaction: read_committed stops before it, read_uncommitted goes on.
    let open = BatchBuilder::new().timestamps(NOW).producer(999, 0, 0).attributes(0x10).records(2, 30_000).build();
    let lso = append(&p, 1, open).base_offset;
    for _ in 0..3 {
        append(&p, 1, BatchBuilder::new().timestamps(NOW).records(2, 50_000).build());
    }
    assert_eq!(p.last_stable_offset(), lso);

    let (mut piped_reads, mut with_aborts) = (0, 0);
    for &from in offsets.iter().step_by(3) {
        for max_bytes in [70_000usize, 100_000, 333_333, 1 << 20, 3 << 20] {
            for first in [true, false] {
                for committed in [false, true] {
                    let copy = p.read_bounded(from, bound(max_bytes, first), committed).unwrap();
                    let piped = ReadBound { piped: true, ..bound(max_bytes, first) };
                    let via_pipes = p.read_bounded(from, piped, committed).unwrap();
                    let what = format!("from {from}, {max_bytes} B, first whole {first}, committed {committed}");
                    let (handed_over, was_piped) = bytes_of(&via_pipes.records);
                    piped_reads += usize::from(was_piped);
                    assert_eq!(handed_over, copy.records.to_vec(), "{what}");
                    assert_eq!(via_pipes.aborted_transactions, copy.aborted_transactions, "{what}");
                    with_aborts += usize::from(!copy.aborted_transactions.is_empty());
                    assert_eq!(
                        (via_pipes.high_watermark, via_pipes.last_stable_offset, via_pipes.log_start_offset),
                        (copy.high_watermark, copy.last_stable_offset, copy.log_start_offset),
                        "{what}"
                    );
                    drop(via_pipes);
                    // NB: only this scenario's on-disk run uses pipes in this process.
                    if v.mem.is_none() {
                        assert_eq!(kaas_storage::piped::in_flight_bytes(), 0, "{what}: the pipes are given back");
                    }
                }
            }
        }
    }
    assert!(with_aborts > 20, "{with_aborts} reads reported aborted transactions");
    if v.mem.is_none() {
        assert!(piped_reads > 100, "on disk the reads go through pipes ({piped_reads})");
    }
}
scenario!(piped_reads_hand_over_what_copied_reads_return);
