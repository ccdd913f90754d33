//! The log cleaner on the NFS-semantics filesystem, with two hosts: a clean on the leader
//! leaves no `.nfs*` ghost (it closes its own descriptors of a segment before renaming over
//! it), a reader on another host that held an old segment open goes stale instead of reading
//! a mix; a leader that crashes at any step of the swap leaves a log the next leader, on the
//! other host, reads whole and finishes cleaning; a leader deposed by the other host while it
//! cleans swaps nothing.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::*;
use kaas_nfsfs::testing::NfsVolume;
use kaas_storage::testing::{BatchBuilder, TestRecord, read_all};
use kaas_storage::{AppendOptions, CleanStep, Engine, Error, LogConfig, Partition};
use uuid::Uuid;

const TOPIC: &str = "table";
const NOW: i64 = 1_700_000_000_000;
const ESTALE: i32 = 116;

fn compacted() -> LogConfig {
    kaas_storage::testing::compacted_config()
}

/// One host's view of the partition: its engine over that host's mount.
struct Host {
    engine: Engine,
}

impl Host {
    fn on(vol: &NfsVolume, host: &str) -> Host {
        Host {
            engine: Engine::on_disk(&vol.mount(host).join("data")).unwrap(),
        }
    }

    fn partition(&self, topic_id: Uuid, config: LogConfig) -> Arc<Partition> {
        self.engine
            .open_partition(TOPIC, topic_id, 0, config)
            .unwrap()
    }

    fn leader(&self, topic_id: Uuid, epoch: i32, config: LogConfig) -> Arc<Partition> {
        let p = self.partition(topic_id, config);
        p.take_over(epoch).unwrap();
        p
    }

    fn dir(&self) -> PathBuf {
        self.engine.partition_dir(TOPIC, 0).unwrap()
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Writes `n` records cycling over five keys, each acknowledged (fsynced and fenced); returns
/// what a read sees.
fn fill(p: &Partition, n: usize) -> Vec<TestRecord> {
    let rt = runtime();
    for i in 0..n {
        let batch = BatchBuilder::new()
            .timestamps(NOW)
            .record(
                Some(format!("k{}", i % 5).as_bytes()),
                Some(format!("v{i}").as_bytes()),
            )
            .build();
        let options = AppendOptions {
            leader_epoch: p.leader_epoch(),
            now_ms: NOW,
        };
        let out = p.append(&batch, options).unwrap();
        rt.block_on(p.wait_durable(out.last_offset)).unwrap();
    }
    read_all(p)
}

fn key(r: &TestRecord) -> String {
    String::from_utf8(r.key.clone().unwrap_or_default()).unwrap()
}

/// key → (offset, value) of each key's last record.
fn latest(records: &[TestRecord]) -> BTreeMap<String, (i64, Option<Vec<u8>>)> {
    records
        .iter()
        .map(|r| (key(r), (r.offset, r.value.clone())))
        .collect()
}

/// What a clean of everything below `clean_up_to` keeps of `before`: each key's last record
/// below it, and every record from it on.
fn cleaned_below(before: &[TestRecord], clean_up_to: i64) -> Vec<TestRecord> {
    let closed: Vec<TestRecord> = before
        .iter()
        .filter(|r| r.offset < clean_up_to)
        .cloned()
        .collect();
    let last = latest(&closed);
    before
        .iter()
        .filter(|r| r.offset >= clean_up_to || last[&key(r)].0 == r.offset)
        .cloned()
        .collect()
}

/// What a clean of the whole log keeps: each key's last record.
fn cleaned(before: &[TestRecord]) -> Vec<TestRecord> {
    cleaned_below(before, i64::MAX)
}

fn names(dir: &Path, suffix: &str) -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(suffix))
        .collect();
    out.sort();
    out
}

#[test]
fn a_clean_leaves_no_ghost_and_a_reader_on_another_host_goes_stale() {
    let vol = volume(&["a", "b"]);
    let topic_id = Uuid::new_v4();
    let (a, b) = (Host::on(&vol, "a"), Host::on(&vol, "b"));
    let leader = a.leader(topic_id, 1, compacted());
    let before = fill(&leader, 40);
    // The leader's own descriptors and index mappings of the closed segments, opened by reads.
    assert_eq!(read_all(&leader), before);
    // Another host (a deposed leader still answering a fetch, say) holds the first segment.
    let first = names(&b.dir(), ".log").remove(0);
    let held = std::fs::File::open(b.dir().join(&first)).unwrap();
    let mut buf = [0u8; 61];
    held.read_exact_at(&mut buf, 0).unwrap();

    let report = leader.clean(NOW).unwrap().expect("a clean is due");
    assert!(report.bytes_written < report.bytes_read, "{report:?}");
    let expected = cleaned_below(&before, report.clean_up_to);
    assert!(expected.len() < before.len());
    assert_eq!(read_all(&leader), expected);

    // The rename replaced the file on the server: the other host's handle is stale, it never
    // reads the cleaned bytes as if they were the old ones.
    assert_eq!(errno(held.read_exact_at(&mut buf, 0)), ESTALE);
    drop(held);
    // The leader closed its own handles of every replaced or unlinked segment before the
    // rename and the unlinks, so nothing is left silly-renamed while it keeps leading.
    wait_until("no .nfs ghost is left", RELEASE_DEADLINE, || {
        ghosts_under(vol.backing()).is_empty()
    });
    assert!(names(&a.dir(), ".tmp").is_empty());

    // The other host takes over and reads the cleaned log.
    leader.relinquish().unwrap();
    let next = b.leader(topic_id, 2, compacted());
    assert_eq!(read_all(&next), expected);
    assert!(ghosts_under(vol.backing()).is_empty());
}

/// A clean on host A stopped at `step` as a crash would (A's process gone: its descriptors
/// closed, nothing persisted); host B takes over: the log it reads is the old one or a
/// complete clean of a prefix, no temp file and no ghost is left, and B's first pass
/// finishes the clean.
fn crash_mid_clean(step: CleanStep) {
    let vol = volume(&["a", "b"]);
    let topic_id = Uuid::new_v4();
    let (a, b) = (Host::on(&vol, "a"), Host::on(&vol, "b"));
    let on_a = a.leader(topic_id, 1, compacted());
    let before = fill(&on_a, 40);
    // One group of every closed segment, so that the swap has segments to unlink.
    on_a.set_config(LogConfig {
        segment_bytes: 1 << 20,
        ..compacted()
    });
    on_a.set_clean_hook(Some(Arc::new(move |at| at == step)));
    assert!(matches!(on_a.clean(NOW), Err(Error::StorageFailure(_))));
    on_a.abandon();
    drop(on_a);
    drop(a);

    let on_b = b.leader(topic_id, 2, compacted());
    assert!(
        names(&b.dir(), ".tmp").is_empty(),
        "the take-over removed the temp file"
    );
    let seen = read_all(&on_b);
    assert!(seen.iter().all(|r| before.contains(r)), "nothing invented");
    assert_eq!(
        latest(&seen),
        latest(&before),
        "every key's latest value, at its offset"
    );
    on_b.clean(NOW)
        .unwrap()
        .expect("the new leader's first pass cleans");
    assert_eq!(read_all(&on_b), cleaned(&before));
    wait_until("no .nfs ghost is left", RELEASE_DEADLINE, || {
        ghosts_under(vol.backing()).is_empty()
    });
}

#[test]
fn a_crash_after_the_temp_file_is_written() {
    crash_mid_clean(CleanStep::TempWritten);
}

#[test]
fn a_crash_after_the_old_indexes_are_removed() {
    crash_mid_clean(CleanStep::OldIndexesRemoved);
}

#[test]
fn a_crash_after_the_rename() {
    crash_mid_clean(CleanStep::Renamed);
}

#[test]
fn a_crash_after_the_new_indexes_are_written() {
    crash_mid_clean(CleanStep::IndexesWritten);
}

#[test]
fn a_crash_after_the_first_unlink() {
    crash_mid_clean(CleanStep::Unlinked);
}

#[test]
fn a_leader_deposed_by_another_host_mid_clean_swaps_nothing() {
    let vol = volume(&["a", "b"]);
    let topic_id = Uuid::new_v4();
    let (a, b) = (Host::on(&vol, "a"), Host::on(&vol, "b"));
    let on_a = a.leader(topic_id, 1, compacted());
    let before = fill(&on_a, 40);
    // Host B takes the partition over while A's cleaned segment sits under its temp name.
    let on_b = b.partition(topic_id, compacted());
    let taker = on_b.clone();
    on_a.set_clean_hook(Some(Arc::new(move |at| {
        if at == CleanStep::TempWritten {
            taker.take_over(2).unwrap();
        }
        false
    })));
    assert!(matches!(
        on_a.clean(NOW),
        Err(Error::FencedLeaderEpoch {
            requested: 1,
            current: 2
        })
    ));
    assert!(!on_a.is_leader());
    assert!(
        names(&a.dir(), ".tmp").is_empty(),
        "the deposed leader removed its temp file"
    );
    assert_eq!(read_all(&on_b), before, "the old set, whole");
    drop(on_a);
    on_b.clean(NOW).unwrap().expect("the new leader cleans");
    assert_eq!(read_all(&on_b), cleaned(&before));
    wait_until("no .nfs ghost is left", RELEASE_DEADLINE, || {
        ghosts_under(vol.backing()).is_empty()
    });
}
