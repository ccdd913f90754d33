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
    /// Transactions v2 (KIP-890 part 2): the epoch the producer held before the last end of a
    /// transaction bumped it (its EndTxn, or the coordinator's own abort). A retried EndTxn
    /// names this epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_epoch: Option<i16>,
    /// Transactions v2, the epoch exhausted at EndTxn: the producer id the producer moves to
    /// (at epoch 0) once the markers are written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_producer_id: Option<i64>,
    /// The producer id before such a move (a retried EndTxn names it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_producer_id: Option<i64>,
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
            previous_epoch: None,
            next_producer_id: None,
            previous_producer_id: None,
        }
    }

    /// The producer id and epoch the producer holds once the current transition completes:
    /// what a transactions-v2 EndTxn answers.
    pub fn producer_after_end(&self) -> (i64, i16) {
        match self.next_producer_id {
            Some(next) => (next, 0),
            None => (self.producer_id, self.producer_epoch),
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
        self.previous_epoch = None;
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
        self.previous_epoch = None;
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

    /// EndTxn of transactions v2 (KIP-890 part 2, EndTxn v5+): ending a transaction bumps the
    /// producer's epoch, so the markers carry a newer epoch than the transaction's records and
    /// a late write of the ended transaction is fenced; the producer continues at the bumped
    /// epoch ([`Self::producer_after_end`]), or at a new producer id when the epoch is
    /// exhausted (`allocate`). A retry names the epoch before the bump. An abort with nothing
    /// in the transaction is allowed and bumps the epoch too: with partitions added implicitly
    /// by produce, the client cannot know whether any were.
    pub fn end_v2(
        &mut self,
        producer_id: i64,
        epoch: i16,
        commit: bool,
        now_ms: i64,
        allocate: impl FnOnce() -> Result<i64, TxnError>,
    ) -> Result<EndOutcome, TxnError> {
        let request = if commit { "EndTxn(commit)" } else { "EndTxn(abort)" };
        let retry_after_new_id = self.previous_producer_id == Some(producer_id)
            && producer_id != self.producer_id
            && epoch == i16::MAX - 1
            && self.producer_epoch == 0;
        if producer_id != self.producer_id && !retry_after_new_id {
            return Err(TxnError::ProducerIdMapping { found: producer_id, current: self.producer_id });
        }
        let retry = retry_after_new_id
            || (self.previous_epoch == Some(epoch) && epoch.checked_add(1) == Some(self.producer_epoch));
        let same_outcome = match self.state {
            TxnState::PrepareCommit | TxnState::CompleteCommit => commit,
            TxnState::PrepareAbort | TxnState::CompleteAbort => !commit,
            _ => false,
        };
        let invalid = |state: TxnState| TxnError::InvalidState { request, state: state.name() };
        match self.state {
            TxnState::PrepareCommit | TxnState::PrepareAbort if retry => {
                return Err(if same_outcome { TxnError::Concurrent(self.state.name()) } else { invalid(self.state) });
            }
            TxnState::CompleteCommit | TxnState::CompleteAbort if retry => {
                return if same_outcome { Ok(EndOutcome::AlreadyDone) } else { Err(invalid(self.state)) };
            }
            _ if epoch != self.producer_epoch => {
                return Err(TxnError::Fenced { found: epoch, current: self.producer_epoch });
            }
            TxnState::PrepareCommit | TxnState::PrepareAbort => return Err(TxnError::Concurrent(self.state.name())),
            TxnState::Ongoing => {}
            TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort if !commit => {
                self.partitions.clear();
                self.groups.clear();
            }
            state => return Err(invalid(state)),
        }
        if self.producer_epoch >= i16::MAX - 1 {
            self.next_producer_id = Some(allocate()?);
        }
        self.previous_epoch = Some(self.producer_epoch);
        self.producer_epoch = self.producer_epoch.saturating_add(1);
        self.state = if commit { TxnState::PrepareCommit } else { TxnState::PrepareAbort };
        self.update_ms = now_ms;
        Ok(EndOutcome::WriteMarkers)
    }

    /// The coordinator aborts on its own (timeout, re-init): the epoch is bumped so the old
    /// producer is fenced, and the markers carry the new epoch.
    pub fn fence_and_abort(&mut self, now_ms: i64) {
        self.previous_epoch = Some(self.producer_epoch);
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
        if let Some(next) = self.next_producer_id.take() {
            self.previous_producer_id = Some(self.producer_id);
            self.rebind(next);
        }
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

    fn no_new_id() -> Result<i64, TxnError> {
        Err(TxnError::ProducerIds("not expected".into()))
    }

    #[test]
    fn transactions_v2_bump_the_epoch_at_every_end() {
        let mut m = TxnMetadata::new(5, 60_000, 0);
        m.init(None, 60_000, 1).unwrap_or(InitOutcome::Ready);
        m.add(&[p("a", 0)], &[], 2).unwrap_or(false);
        assert_eq!(m.end_v2(5, 1, true, 3, no_new_id), Ok(EndOutcome::WriteMarkers));
        assert_eq!((m.state, m.producer_epoch), (TxnState::PrepareCommit, 2), "the markers carry epoch 2");
        assert_eq!(m.producer_after_end(), (5, 2));
        // Retries name the old epoch: told to wait while the markers are written, success after.
        assert!(matches!(m.end_v2(5, 1, true, 4, no_new_id), Err(TxnError::Concurrent(_))));
        assert!(matches!(m.end_v2(5, 1, false, 4, no_new_id), Err(TxnError::InvalidState { .. })));
        assert!(matches!(m.end_v2(5, 2, true, 4, no_new_id), Err(TxnError::Concurrent(_))), "the new epoch before the end completed");
        assert!(m.complete(5));
        assert_eq!(m.end_v2(5, 1, true, 6, no_new_id), Ok(EndOutcome::AlreadyDone));
        assert_eq!(m.producer_after_end(), (5, 2));
        // The ended transaction's producer is fenced everywhere else.
        assert!(matches!(m.check_producer(5, 1), Err(TxnError::Fenced { .. })));
        assert!(matches!(m.end_v2(5, 0, false, 6, no_new_id), Err(TxnError::Fenced { .. })));
        assert!(matches!(m.end_v2(6, 2, false, 6, no_new_id), Err(TxnError::ProducerIdMapping { .. })));
        // Nothing in the transaction: a commit is refused, an abort bumps the epoch.
        assert!(matches!(m.end_v2(5, 2, true, 7, no_new_id), Err(TxnError::InvalidState { .. })));
        assert_eq!(m.end_v2(5, 2, false, 7, no_new_id), Ok(EndOutcome::WriteMarkers));
        assert_eq!((m.state, m.producer_epoch, m.partitions.len()), (TxnState::PrepareAbort, 3, 0));
        assert!(m.complete(8));
        // A stale retry after the producer went on to a new transaction is fenced.
        m.add(&[p("a", 0)], &[], 9).unwrap_or(false);
        assert!(matches!(m.end_v2(5, 2, false, 10, no_new_id), Err(TxnError::Fenced { .. })));
    }

    #[test]
    fn transactions_v2_move_to_a_new_producer_id_when_the_epoch_runs_out() {
        let mut m = TxnMetadata::new(5, 60_000, 0);
        m.producer_epoch = i16::MAX - 1;
        m.add(&[p("a", 0)], &[], 1).unwrap_or(false);
        assert_eq!(m.end_v2(5, i16::MAX - 1, true, 2, || Ok(9)), Ok(EndOutcome::WriteMarkers));
        assert_eq!((m.producer_id, m.producer_epoch), (5, i16::MAX), "the markers still carry the old id");
        assert_eq!(m.producer_after_end(), (9, 0), "the producer is told its new id");
        assert!(m.complete(3));
        assert_eq!((m.producer_id, m.producer_epoch), (9, 0));
        assert_eq!(m.end_v2(5, i16::MAX - 1, true, 4, no_new_id), Ok(EndOutcome::AlreadyDone), "a retry names the old id");
        assert_eq!(m.producer_after_end(), (9, 0));
        assert_eq!(m.check_producer(9, 0), Ok(()));
    }

    #[test]
    fn a_transactions_v2_abort_after_the_coordinators_own_is_its_retry() {
        let mut m = TxnMetadata::new(5, 1_000, 0);
        m.add(&[p("a", 0)], &[], 10).unwrap_or(false);
        m.fence_and_abort(2_000);
        assert!(m.complete(2_001));
        // The producer learns of the timeout when it aborts: the abort is already done, and it
        // continues at the epoch the coordinator's abort moved to.
        assert_eq!(m.end_v2(5, 0, false, 2_002, no_new_id), Ok(EndOutcome::AlreadyDone));
        assert_eq!(m.producer_after_end(), (5, 1));
        assert!(matches!(m.end_v2(5, 0, true, 2_003, no_new_id), Err(TxnError::InvalidState { .. })));
    }
}
