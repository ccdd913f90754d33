//! The transaction coordinator on its own: an in-memory volume, a host whose marker drivers are
//! held, and paused time.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use kaas_shared::fs::{FsRef, MemFs};
use kaas_shared::layout::Layout;
use parking_lot::Mutex;

use super::*;

/// A host whose marker drivers never finish until the test finishes them.
#[derive(Debug, Default)]
struct HeldMarkers {
    coordinator: Option<Arc<TxnCoordinator>>,
    next_producer_id: Mutex<i64>,
    /// Each driver started: its completion and the sender that ends it.
    drivers: Mutex<Vec<(Completion, tokio::sync::watch::Sender<()>)>>,
}

impl TxnHost for HeldMarkers {
    fn allocate_producer_id(&self) -> Result<i64, String> {
        let mut next = self.next_producer_id.lock();
        *next += 1;
        Ok(*next)
    }

    fn complete(&self, c: Completion) -> Completing {
        let coordinator = self.coordinator.as_ref().unwrap();
        match coordinator.start_driver(&c.transactional_id) {
            Err(running) => running,
            Ok((done, completing)) => {
                self.drivers.lock().push((c, done));
                completing
            }
        }
    }
}

fn coordinator() -> (Arc<TxnCoordinator>, HeldMarkers) {
    let fs: FsRef = Arc::new(MemFs::new());
    let txns = Arc::new(TxnCoordinator::open(fs, &Layout::new("/data")).unwrap());
    assert_eq!(txns.take_over_all(|stored| stored + 1), 0);
    let host = HeldMarkers {
        coordinator: Some(txns.clone()),
        ..HeldMarkers::default()
    };
    (txns, host)
}

/// Transaction "tx" with a new producer and timeout, Ongoing with partition t/0 added.
async fn ongoing(txns: &TxnCoordinator, host: &HeldMarkers, timeout_ms: i32) -> (i64, i16) {
    let (pid, epoch) = txns
        .init_producer_id(host, "tx", timeout_ms, None)
        .await
        .unwrap();
    txns.add("tx", pid, epoch, &[("t".to_owned(), 0)], &[])
        .await
        .unwrap();
    (pid, epoch)
}

/// EndTxn answers once its markers are written, or after END_TXN_WAIT with the decision durable
/// and the driver still at work: a client is never left waiting on a slow partition leader, and
/// nothing is completed before its markers are.
#[tokio::test(start_paused = true)]
async fn end_txn_answers_after_its_wait_while_the_markers_are_still_being_written() {
    let (txns, host) = coordinator();
    let (pid, epoch) = ongoing(&txns, &host, 60_000).await;

    let started = tokio::time::Instant::now();
    txns.end_txn(&host, "tx", (pid, epoch), true, false).await.unwrap();
    assert_eq!(
        started.elapsed(),
        END_TXN_WAIT,
        "answered at the wait's end, not before"
    );
    assert_eq!(
        txns.describe("tx").unwrap().unwrap().state,
        TxnState::PrepareCommit
    );

    // A retried EndTxn while the markers are written is told to retry (as Kafka answers
    // CONCURRENT_TRANSACTIONS), and starts no second driver.
    assert!(matches!(
        txns.end_txn(&host, "tx", (pid, epoch), true, false).await,
        Err(TxnError::Concurrent(_))
    ));
    assert_eq!(host.drivers.lock().len(), 1);

    // The driver wrote the markers: only its finish completes the transaction.
    let (completion, done) = host.drivers.lock().pop().unwrap();
    assert_eq!(completion.partitions, vec![("t".to_owned(), 0)]);
    assert!(completion.commit);
    txns.finish(&completion).unwrap();
    txns.driver_done(&completion.transactional_id);
    drop(done);
    assert_eq!(
        txns.describe("tx").unwrap().unwrap().state,
        TxnState::CompleteCommit
    );
}

/// A transaction left Ongoing past its timeout is aborted by the coordinator: the abort is
/// durable and handed to a driver, and its producer is fenced (epoch bumped).
#[tokio::test(start_paused = true)]
async fn a_timed_out_transaction_is_decided_abort_and_its_producer_fenced() {
    let (txns, host) = coordinator();
    let (pid, epoch) = ongoing(&txns, &host, 1_000).await;
    assert_eq!(
        txns.pending_completions(crate::clock::now_ms()).await,
        vec![]
    );

    let later = crate::clock::now_ms() + 2_000;
    let pending = txns.pending_completions(later).await;
    assert_eq!(pending.len(), 1);
    assert!(!pending[0].commit);
    assert_eq!(pending[0].producer_epoch, epoch + 1);
    assert_eq!(
        txns.describe("tx").unwrap().unwrap().state,
        TxnState::PrepareAbort
    );
    assert!(matches!(
        txns.end_txn(&host, "tx", (pid, epoch), true, false).await,
        Err(TxnError::Fenced { .. })
    ));
    assert_eq!(txns.outcomes.timed_out.get(), 1);
}

/// The broker's re-drive loop can start a transaction's driver between EndTxn's decision and
/// EndTxn's own start of one: EndTxn then answers when that driver is done, not at once (a
/// client reading its group's offsets right after the commit returned found them not yet
/// written), and not only at the end of its wait.
#[tokio::test(start_paused = true)]
async fn end_txn_waits_for_a_driver_started_before_its_own() {
    let (txns, host) = coordinator();
    let (pid, epoch) = ongoing(&txns, &host, 60_000).await;
    // The race held open: another driver of "tx" is running when EndTxn decides.
    let (running, _) = txns.start_driver("tx").unwrap();
    let started = tokio::time::Instant::now();
    let end = {
        let txns = txns.clone();
        let host = Arc::new(host);
        tokio::spawn(async move { txns.end_txn(&*host, "tx", (pid, epoch), true, false).await })
    };
    // Paused time moves only while every task waits: EndTxn has decided and is waiting.
    tokio::time::sleep(END_TXN_WAIT / 2).await;
    assert_eq!(
        txns.describe("tx").unwrap().unwrap().state,
        TxnState::PrepareCommit
    );
    assert!(
        !end.is_finished(),
        "EndTxn answered while the transaction's driver was still running"
    );
    txns.driver_done("tx");
    drop(running);
    assert_eq!(end.await.unwrap(), Ok((pid, epoch)));
    assert_eq!(
        started.elapsed(),
        END_TXN_WAIT / 2,
        "answered when the driver finished, not at the wait's end"
    );
}
