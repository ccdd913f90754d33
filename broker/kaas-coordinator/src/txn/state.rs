//! One transactional id's metadata and its state machine (Kafka's `TransactionMetadata` and
//! `TransactionState`), as pure functions: the coordinator persists the result of every
//! transition before it answers.
//!
//! ```text
//! Empty ──add──▶ Ongoing ──EndTxn(commit)──▶ PrepareCommit ──markers──▶ CompleteCommit
//!   ▲               │    ──EndTxn(abort) / timeout / re-init──▶ PrepareAbort ──▶ CompleteAbort
//!   └──InitProducerId (epoch bump)──────────────────────────────────────────────┘
//! ```

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

/// Kafka's `transaction.max.timeout.ms` default (15 minutes).
pub const MAX_TIMEOUT_MS: i32 = 15 * 60 * 1000;

/// Where a transaction is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TxnState {
    Empty,
    Ongoing,
    PrepareCommit,
    PrepareAbort,
    CompleteCommit,
    CompleteAbort,
}

impl TxnState {
    /// The name Kafka's admin APIs report (DescribeTransactions, ListTransactions filters).
    pub fn name(self) -> &'static str {
        match self {
            TxnState::Empty => "Empty",
            TxnState::Ongoing => "Ongoing",
            TxnState::PrepareCommit => "PrepareCommit",
            TxnState::PrepareAbort => "PrepareAbort",
            TxnState::CompleteCommit => "CompleteCommit",
            TxnState::CompleteAbort => "CompleteAbort",
        }
    }

    /// PrepareCommit or PrepareAbort: the outcome is decided, markers are being written.
    pub fn is_completing(self) -> bool {
        matches!(self, TxnState::PrepareCommit | TxnState::PrepareAbort)
    }
}

/// Why a transactional request is refused; each maps to one Kafka error code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TxnError {
    #[error("producer id {found} does not own this transactional id (it maps to {current})")]
    ProducerIdMapping { found: i64, current: i64 },
    #[error("producer epoch {found} is fenced by epoch {current}")]
    Fenced { found: i16, current: i16 },
    #[error("the previous transaction is still completing ({0})")]
    Concurrent(&'static str),
    #[error("{request} is not allowed in state {state}")]
    InvalidState {
        request: &'static str,
        state: &'static str,
    },
    #[error("transaction timeout {0} ms is outside 1..={MAX_TIMEOUT_MS}")]
    InvalidTimeout(i32),
    #[error("this broker does not coordinate the transactional id")]
    NotCoordinator,
    #[error("transaction state could not be stored: {0}")]
    Storage(String),
    #[error("cannot allocate a producer id: {0}")]
    ProducerIds(String),
}

/// A transactional id's persisted metadata (the value of its key in the shard log).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TxnMetadata {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub timeout_ms: i32,
    pub state: TxnState,
    /// Partitions of the current (or completing) transaction.
    pub partitions: BTreeSet<(String, i32)>,
    /// Consumer groups whose offsets are part of the transaction (AddOffsetsToTxn).
    pub groups: BTreeSet<String>,
    /// Wall-clock ms the transaction became Ongoing (its timeout counts from here).
    pub start_ms: i64,
    /// Wall-clock ms of the last transition.
    pub update_ms: i64,
}

/// What InitProducerId must do after the transition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InitOutcome {
    /// The producer may start (at the metadata's id and epoch).
    Ready,
    /// The epoch is exhausted: allocate a new producer id, then call [`TxnMetadata::rebind`].
    NeedsNewProducerId,
    /// An open transaction was moved to PrepareAbort (with a bumped epoch, fencing the old
    /// producer): complete it, and let the client retry (CONCURRENT_TRANSACTIONS).
    AbortFirst,
}

/// What EndTxn must do after the transition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndOutcome {
    /// Persisted PrepareCommit/PrepareAbort: write the markers, then complete.
    WriteMarkers,
    /// A retry of an EndTxn that already completed the same way: answer success.
    AlreadyDone,
}

impl TxnMetadata {
    /// A new transactional id at `producer_id`, epoch 0.
    pub fn new(producer_id: i64, timeout_ms: i32, now_ms: i64) -> TxnMetadata {
        TxnMetadata {
            producer_id,
            producer_epoch: 0,
            timeout_ms,
            state: TxnState::Empty,
            partitions: BTreeSet::new(),
            groups: BTreeSet::new(),
            start_ms: -1,
            update_ms: now_ms,
        }
    }

    /// Checks the producer id and epoch of a request against the metadata.
    pub fn check_producer(&self, producer_id: i64, epoch: i16) -> Result<(), TxnError> {
        if producer_id != self.producer_id {
            return Err(TxnError::ProducerIdMapping {
                found: producer_id,
                current: self.producer_id,
            });
        }
        if epoch != self.producer_epoch {
            return Err(TxnError::Fenced {
                found: epoch,
                current: self.producer_epoch,
            });
        }
        Ok(())
    }

    /// InitProducerId for an existing id. `expected` is the (id, epoch) a KIP-360 client says
    /// it has; `None` for a fresh start.
    pub fn init(
        &mut self,
        expected: Option<(i64, i16)>,
        timeout_ms: i32,
        now_ms: i64,
    ) -> Result<InitOutcome, TxnError> {
        if self.state.is_completing() {
            return Err(TxnError::Concurrent(self.state.name()));
        }
        if let Some((pid, epoch)) = expected {
            // A retry after a lost response may name the epoch just handed out.
            if pid != self.producer_id
                || (epoch != self.producer_epoch && epoch.saturating_add(1) != self.producer_epoch)
            {
                return Err(TxnError::Fenced {
                    found: epoch,
                    current: self.producer_epoch,
                });
            }
        }
        self.timeout_ms = timeout_ms;
        self.update_ms = now_ms;
        if self.state == TxnState::Ongoing {
            self.fence_and_abort(now_ms);
            return Ok(InitOutcome::AbortFirst);
        }
        self.state = TxnState::Empty;
        self.partitions.clear();
        self.groups.clear();
        if self.producer_epoch >= i16::MAX - 1 {
            return Ok(InitOutcome::NeedsNewProducerId);
        }
        self.producer_epoch += 1;
        Ok(InitOutcome::Ready)
    }

    /// Moves to a freshly allocated producer id at epoch 0 (epoch exhaustion).
    pub fn rebind(&mut self, producer_id: i64) {
        self.producer_id = producer_id;
        self.producer_epoch = 0;
    }

    /// AddPartitionsToTxn / AddOffsetsToTxn: whether anything new was added (and must be
    /// persisted).
    pub fn add(
        &mut self,
        partitions: &[(String, i32)],
        groups: &[String],
        now_ms: i64,
    ) -> Result<bool, TxnError> {
        let mut changed = false;
        match self.state {
            TxnState::PrepareCommit | TxnState::PrepareAbort => {
                return Err(TxnError::Concurrent(self.state.name()));
            }
            TxnState::Ongoing => {}
            TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort => {
                self.state = TxnState::Ongoing;
                self.partitions.clear();
                self.groups.clear();
                self.start_ms = now_ms;
                changed = true;
            }
        }
        for partition in partitions {
            changed |= self.partitions.insert(partition.clone());
        }
        for group in groups {
            changed |= self.groups.insert(group.clone());
        }
        if changed {
            self.update_ms = now_ms;
        }
        Ok(changed)
    }

    /// EndTxn.
    pub fn end(&mut self, commit: bool, now_ms: i64) -> Result<EndOutcome, TxnError> {
        let request = if commit {
            "EndTxn(commit)"
        } else {
            "EndTxn(abort)"
        };
        match (self.state, commit) {
            (TxnState::Ongoing, _) => {
                self.state = if commit {
                    TxnState::PrepareCommit
                } else {
                    TxnState::PrepareAbort
                };
                self.update_ms = now_ms;
                Ok(EndOutcome::WriteMarkers)
            }
            (TxnState::PrepareCommit, true) | (TxnState::PrepareAbort, false) => {
                Err(TxnError::Concurrent(self.state.name()))
            }
            (TxnState::CompleteCommit, true) | (TxnState::CompleteAbort, false) => {
                Ok(EndOutcome::AlreadyDone)
            }
            (state, _) => Err(TxnError::InvalidState {
                request,
                state: state.name(),
            }),
        }
    }

    /// The coordinator aborts on its own (timeout, re-init): the epoch is bumped so the old
    /// producer is fenced, and the markers carry the new epoch.
    pub fn fence_and_abort(&mut self, now_ms: i64) {
        self.producer_epoch = self.producer_epoch.saturating_add(1);
        self.state = TxnState::PrepareAbort;
        self.update_ms = now_ms;
    }

    /// Whether an Ongoing transaction has outlived its timeout.
    pub fn expired(&self, now_ms: i64) -> bool {
        self.state == TxnState::Ongoing
            && now_ms.saturating_sub(self.start_ms) > i64::from(self.timeout_ms)
    }

    /// Markers are written: PrepareX becomes CompleteX. `false` if the state moved on.
    pub fn complete(&mut self, now_ms: i64) -> bool {
        self.state = match self.state {
            TxnState::PrepareCommit => TxnState::CompleteCommit,
            TxnState::PrepareAbort => TxnState::CompleteAbort,
            _ => return false,
        };
        self.partitions.clear();
        self.groups.clear();
        self.update_ms = now_ms;
        true
    }
}

/// Validates InitProducerId's `transaction_timeout_ms`.
pub fn check_timeout(timeout_ms: i32) -> Result<i32, TxnError> {
    if timeout_ms <= 0 || timeout_ms > MAX_TIMEOUT_MS {
        return Err(TxnError::InvalidTimeout(timeout_ms));
    }
    Ok(timeout_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(t: &str, i: i32) -> (String, i32) {
        (t.to_owned(), i)
    }

    #[test]
    fn commit_cycle() {
        let mut m = TxnMetadata::new(5, 60_000, 0);
        assert_eq!(m.init(None, 60_000, 1), Ok(InitOutcome::Ready));
        assert_eq!(m.producer_epoch, 1);
        assert!(
            matches!(m.end(true, 2), Err(TxnError::InvalidState { .. })),
            "nothing to commit"
        );
        assert_eq!(m.add(&[p("a", 0)], &[], 3), Ok(true));
        assert_eq!(
            m.add(&[p("a", 0)], &[], 4),
            Ok(false),
            "already in the transaction"
        );
        assert_eq!(m.state, TxnState::Ongoing);
        assert_eq!(m.end(true, 5), Ok(EndOutcome::WriteMarkers));
        assert_eq!(m.state, TxnState::PrepareCommit);
        assert!(matches!(
            m.add(&[p("b", 0)], &[], 6),
            Err(TxnError::Concurrent(_))
        ));
        assert!(matches!(m.end(true, 6), Err(TxnError::Concurrent(_))));
        assert!(matches!(
            m.end(false, 6),
            Err(TxnError::InvalidState { .. })
        ));
        assert!(matches!(
            m.init(None, 60_000, 6),
            Err(TxnError::Concurrent(_))
        ));
        assert!(m.complete(7));
        assert_eq!((m.state, m.partitions.len()), (TxnState::CompleteCommit, 0));
        assert_eq!(
            m.end(true, 8),
            Ok(EndOutcome::AlreadyDone),
            "a retried commit succeeds"
        );
        assert!(matches!(
            m.end(false, 8),
            Err(TxnError::InvalidState { .. })
        ));
        // The next transaction starts from CompleteCommit.
        assert_eq!(m.add(&[p("b", 1)], &["g".to_owned()], 9), Ok(true));
        assert_eq!((m.state, m.start_ms), (TxnState::Ongoing, 9));
        assert_eq!(
            m.partitions.iter().cloned().collect::<Vec<_>>(),
            vec![p("b", 1)]
        );
    }

    #[test]
    fn producers_are_checked_and_fenced() {
        let mut m = TxnMetadata::new(5, 60_000, 0);
        m.init(None, 60_000, 1).unwrap_or(InitOutcome::Ready);
        assert_eq!(m.check_producer(5, 1), Ok(()));
        assert!(matches!(
            m.check_producer(6, 1),
            Err(TxnError::ProducerIdMapping { .. })
        ));
        assert!(matches!(
            m.check_producer(5, 0),
            Err(TxnError::Fenced { .. })
        ));
        // A second producer with the same id while a transaction is open: abort it first.
        m.add(&[p("a", 0)], &[], 2).unwrap_or(false);
        assert_eq!(m.init(None, 60_000, 3), Ok(InitOutcome::AbortFirst));
        assert_eq!((m.state, m.producer_epoch), (TxnState::PrepareAbort, 2));
        assert!(
            matches!(m.check_producer(5, 1), Err(TxnError::Fenced { .. })),
            "the old producer is fenced"
        );
        assert!(m.complete(4));
        assert_eq!(m.init(None, 60_000, 5), Ok(InitOutcome::Ready));
        assert_eq!((m.state, m.producer_epoch), (TxnState::Empty, 3));
        // KIP-360: a client naming an older epoch than the current one is fenced.
        assert!(matches!(
            m.init(Some((5, 1)), 60_000, 6),
            Err(TxnError::Fenced { .. })
        ));
        m.producer_epoch = i16::MAX - 1;
        assert_eq!(m.init(None, 60_000, 7), Ok(InitOutcome::NeedsNewProducerId));
        m.rebind(9);
        assert_eq!((m.producer_id, m.producer_epoch), (9, 0));
    }

    #[test]
    fn timeouts_abort_with_a_bumped_epoch() {
        let mut m = TxnMetadata::new(5, 1_000, 0);
        m.add(&[p("a", 0)], &[], 10).unwrap_or(false);
        assert!(!m.expired(1_010));
        assert!(m.expired(1_011));
        m.fence_and_abort(1_011);
        assert_eq!((m.state, m.producer_epoch), (TxnState::PrepareAbort, 1));
        assert!(!m.expired(99_999));
        assert!(check_timeout(0).is_err() && check_timeout(MAX_TIMEOUT_MS + 1).is_err());
        assert_eq!(check_timeout(60_000), Ok(60_000));
    }
}
