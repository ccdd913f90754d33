//! The coordinator over a real broker on a temporary directory: durable transitions, the
//! re-drive of a transaction decided before a crash, and bad input.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use kaas_storage::testing::BatchBuilder;
use kaas_storage::{AppendOptions, Partition};

use kaas_coordinator::shard_owner::ShardOwner;
use kaas_coordinator::{Entry, ShardLog};
use kaas_shared::fs::FsRef;
use kaas_shared::layout::Layout;

use super::*;
use crate::config::{BrokerConfig, StorageMode};
use crate::topics::NewTopic;

fn open(dir: &std::path::Path) -> Arc<Broker> {
    let config = BrokerConfig {
        storage: StorageMode::Disk(dir.to_path_buf()),
        ..BrokerConfig::local_in_memory()
    };
    Broker::open(config).unwrap()
}

fn create_topic(broker: &Broker) {
    let new = NewTopic {
        name: "t".into(),
        partitions: 1,
        configs: Default::default(),
    };
    broker.topics.create(new).unwrap();
}

fn partition(broker: &Broker) -> Arc<Partition> {
    broker.topics.partition("t", 0).unwrap()
}

async fn append_txn(p: &Partition, pid: i64, epoch: i16, seq: i32) {
    let batch = BatchBuilder::new()
        .timestamps(now_ms())
        .producer(pid, epoch, seq)
        .attributes(0x10)
        .records(2, 8)
        .build();
    let out = p
        .append(
            &batch,
            AppendOptions {
                leader_epoch: p.leader_epoch(),
                now_ms: now_ms(),
            },
        )
        .unwrap();
    p.wait_durable(out.last_offset).await.unwrap();
}

/// Starts a transactional id "tx" and adds partitions and groups to its transaction.
async fn begin(
    broker: &Arc<Broker>,
    partitions: &[(String, i32)],
    groups: &[String],
) -> (i64, i16) {
    let (pid, epoch) = broker
        .txns
        .init_producer_id(&Host(broker.clone()), "tx", 60_000, None)
        .await
        .unwrap();
    broker
        .txns
        .add("tx", pid, epoch, partitions, groups)
        .await
        .unwrap();
    (pid, epoch)
}

/// PrepareCommit made durable, and nothing more: the broker "crashes" before any marker.
async fn prepare_commit(broker: &Arc<Broker>, pid: i64, epoch: i16) {
    let decided = broker
        .txns
        .prepare_end(&Host(broker.clone()), "tx", (pid, epoch), true, false)
        .await
        .unwrap()
        .0;
    assert!(decided.is_some());
}

/// Runs the transactions loop until "tx" is CompleteCommit; stop it with the sender.
async fn complete_in_background(
    broker: &Arc<Broker>,
) -> (
    tokio::sync::watch::Sender<bool>,
    tokio::task::JoinHandle<()>,
) {
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let ticker = tokio::spawn(broker.clone().transactions_loop(stop_rx));
    wait_state(broker, "tx", TxnState::CompleteCommit).await;
    (stop_tx, ticker)
}

async fn wait_state(broker: &Broker, id: &str, state: TxnState) {
    for _ in 0..200 {
        if broker
            .txns
            .describe(id)
            .unwrap()
            .is_some_and(|m| m.state == state)
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("{id} never reached {state:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_decided_before_a_crash_is_completed_after_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let (pid, epoch) = {
        let broker = open(tmp.path());
        create_topic(&broker);
        let (pid, epoch) = begin(&broker, &[("t".to_owned(), 0)], &[]).await;
        append_txn(&partition(&broker), pid, epoch, 0).await;
        assert_eq!(partition(&broker).last_stable_offset(), 0);
        // PrepareCommit is durable, then the broker "crashes" before any marker is written.
        prepare_commit(&broker, pid, epoch).await;
        (pid, epoch)
    };
    let broker = open(tmp.path());
    assert_eq!(
        broker.txns.describe("tx").unwrap().map(|m| m.state),
        Some(TxnState::PrepareCommit)
    );
    assert_eq!(
        partition(&broker).last_stable_offset(),
        0,
        "the open transaction was recovered from the log"
    );
    let (stop_tx, ticker) = complete_in_background(&broker).await;
    let p = partition(&broker);
    assert_eq!(
        (p.last_stable_offset(), p.high_watermark()),
        (3, 3),
        "data and the commit marker are stable"
    );
    let read = p.read_committed(0, 1 << 20).unwrap();
    assert!(read.aborted_transactions.is_empty());
    // A retried EndTxn(commit) succeeds; an abort now is refused.
    assert_eq!(
        broker.txns.end_txn(&Host(broker.clone()), "tx", (pid, epoch), true, false).await,
        Ok((pid, epoch))
    );
    assert!(matches!(
        broker.txns.end_txn(&Host(broker.clone()), "tx", (pid, epoch), false, false).await,
        Err(TxnError::InvalidState { .. })
    ));
    let _ = stop_tx.send(true);
    ticker.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decision_whose_fsync_failed_drives_no_marker_until_the_shard_is_reloaded() {
    use kaas_shared::fs::{FaultSwitch, FaultyFs, MountFault, RealFs};

    let tmp = tempfile::tempdir().unwrap();
    let mount = FaultSwitch::default();
    let broker = Broker::open(BrokerConfig {
        storage: StorageMode::Disk(tmp.path().to_path_buf()),
        volume_fs: Some(FaultyFs::wrap(Arc::new(RealFs), mount.clone())),
        ..BrokerConfig::local_in_memory()
    })
    .unwrap();
    create_topic(&broker);
    let (pid, epoch) = begin(&broker, &[("t".to_owned(), 0)], &[]).await;
    append_txn(&partition(&broker), pid, epoch, 0).await;

    // The PrepareCommit reaches the page cache, its fsync fails: the client is told so, and
    // nothing may act on the undurable decision (after a real writeback error the volume may
    // not have it, and the transaction could then be aborted where a marker said commit).
    mount.set(MountFault::SyncEio);
    assert!(matches!(
        broker.txns.end_txn(&Host(broker.clone()), "tx", (pid, epoch), true, false).await,
        Err(TxnError::Storage(_))
    ));
    assert_eq!(broker.txns.pending_completions(now_ms()).await, vec![]);
    assert!(matches!(
        broker.txns.describe("tx"),
        Err(TxnError::Storage(_))
    ));
    assert!(matches!(
        broker.txns.verify("tx", pid, epoch, &("t".to_owned(), 0)),
        Err(TxnError::Storage(_))
    ));
    assert_eq!(
        partition(&broker).high_watermark(),
        2,
        "no marker was written"
    );

    // Once the volume works, the housekeeping take-over reloads the shard from the volume
    // (here the write survived the failed writeback) and the decision is completed from there.
    mount.clear();
    assert_eq!(broker.txns.take_over_all(|stored| broker.lease.takeover_epoch(stored)), 0);
    assert_eq!(
        broker.txns.describe("tx").unwrap().map(|m| m.state),
        Some(TxnState::PrepareCommit)
    );
    let (stop_tx, ticker) = complete_in_background(&broker).await;
    assert_eq!(partition(&broker).last_stable_offset(), 3);
    let _ = stop_tx.send(true);
    ticker.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_kafka_errors_and_changes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let broker = open(tmp.path());
    create_topic(&broker);
    let t0 = [("t".to_owned(), 0)];
    assert!(matches!(
        broker.txns.init_producer_id(&Host(broker.clone()), "tx", 0, None).await,
        Err(TxnError::InvalidTimeout(0))
    ));
    assert!(matches!(
        broker.txns.add("nobody", 1, 0, &t0, &[]).await,
        Err(TxnError::ProducerIdMapping { .. })
    ));
    let (pid, epoch) = broker
        .txns
        .init_producer_id(&Host(broker.clone()), "tx", 60_000, None)
        .await
        .unwrap();
    assert!(matches!(
        broker.txns.add("tx", pid + 1, epoch, &t0, &[]).await,
        Err(TxnError::ProducerIdMapping { .. })
    ));
    assert!(
        matches!(
            broker.txns.verify("tx", pid, epoch, &t0[0]),
            Err(TxnError::InvalidState { .. })
        ),
        "not in the transaction"
    );
    broker.txns.add("tx", pid, epoch, &t0, &[]).await.unwrap();
    assert_eq!(broker.txns.verify("tx", pid, epoch, &t0[0]), Ok(()));
    // A new instance fences the old epoch: its open transaction is aborted first.
    assert!(matches!(
        broker
            .txns
            .init_producer_id(&Host(broker.clone()), "tx", 60_000, None)
            .await,
        Err(TxnError::Concurrent(_))
    ));
    wait_state(&broker, "tx", TxnState::CompleteAbort).await;
    let (pid2, epoch2) = broker
        .txns
        .init_producer_id(&Host(broker.clone()), "tx", 60_000, None)
        .await
        .unwrap();
    assert_eq!(
        (pid2, epoch2),
        (pid, epoch + 2),
        "one bump to fence and abort, one for the new instance"
    );
    assert!(matches!(
        broker.txns.add("tx", pid, epoch, &t0, &[]).await,
        Err(TxnError::Fenced { .. })
    ));
    assert!(matches!(
        broker.txns.end_txn(&Host(broker.clone()), "tx", (pid, epoch), true, false).await,
        Err(TxnError::Fenced { .. })
    ));
    let meta = broker.txns.describe("tx").unwrap().unwrap();
    assert_eq!(
        (meta.state, meta.producer_epoch),
        (TxnState::Empty, epoch2),
        "refusals change no state"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offsets_of_a_commit_decided_before_a_crash_become_visible_after_restart() {
    use crate::groups::{CommitOffset, TxnCommitRequest};
    let tmp = tempfile::tempdir().unwrap();
    let committed = |broker: &Arc<Broker>| {
        let found = broker
            .groups
            .fetch_offsets("g", None, Some(vec![("t".to_owned(), vec![0])]))
            .unwrap();
        found[0].1[0].1.as_ref().map(|v| v.offset)
    };
    {
        let broker = open(tmp.path());
        create_topic(&broker);
        let (pid, epoch) = begin(&broker, &[], &["g".to_owned()]).await;
        let offset = CommitOffset {
            topic: "t".into(),
            partition: 0,
            offset: 42,
            leader_epoch: -1,
            metadata: String::new(),
        };
        let req = TxnCommitRequest {
            group_id: "g".into(),
            producer_id: pid,
            generation: -1,
            member_id: String::new(),
            instance_id: None,
            offsets: vec![offset],
        };
        broker.groups.txn_commit(req).unwrap().await.unwrap();
        assert_eq!(
            committed(&broker),
            None,
            "pending until the transaction commits"
        );
        assert!(broker.groups.has_pending_txn_offset("g", "t", 0));
        prepare_commit(&broker, pid, epoch).await;
    }
    let broker = open(tmp.path());
    assert!(
        broker.groups.has_pending_txn_offset("g", "t", 0),
        "the pending offset is durable"
    );
    assert_eq!(committed(&broker), None);
    let (stop_tx, ticker) = complete_in_background(&broker).await;
    assert_eq!(committed(&broker), Some(42));
    assert!(!broker.groups.has_pending_txn_offset("g", "t", 0));
    let _ = stop_tx.send(true);
    ticker.await.unwrap();
}

/// A request that arrives while its shard is being taken over waits for the shard's
/// transactions to load: it must not find the shard owned and the transactional id unknown
/// (an EndTxn retried across a coordinator restart was answered INVALID_PRODUCER_ID_MAPPING).
#[test]
fn a_request_during_a_take_over_sees_the_loaded_transactions() {
    let mem = Arc::new(kaas_shared::fs::MemFs::new());
    let fs: FsRef = mem.clone();
    let layout = Layout::new("/data");
    let shard = shard_of("tx");
    let previous = ShardLog::open(fs.clone(), layout.txn_shard_dir(shard)).unwrap();
    previous.take_over(0).unwrap();
    let meta = TxnMetadata::new(7, 60_000, now_ms());
    previous
        .append(&[Entry::put("tx", serde_json::to_vec(&meta).unwrap())])
        .unwrap();
    previous.relinquish().unwrap();

    let txns = TxnCoordinator::open(fs, &layout).unwrap();
    let described = crate::shard_owner::request_during_take_over(&mem, &txns, shard, 1, || txns.describe("tx"));
    assert_eq!(described, Ok(Some(meta)));
}
