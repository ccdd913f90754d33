//! Per-partition transaction bookkeeping: which producers have a transaction open here (and at
//! which offset it started), and which transactions were aborted (Kafka's aborted-transaction
//! index). The last stable offset is the first offset of the earliest open transaction.
//!
//! It is part of the producer state: saved in `producer-state.snapshot` (written atomically on
//! roll and relinquish) and brought up to date on take_over by replaying the log after the
//! snapshot's offset, where every transactional batch and every marker is seen again. So a
//! crash loses nothing the log holds, and an aborted transaction is known for as long as any of
//! its records is in the log.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::batch::BatchHeader;
use crate::control::MarkerKind;

/// An aborted transaction, as Fetch (read_committed) reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AbortedTxn {
    pub producer_id: i64,
    /// The offset of the transaction's first batch in this partition.
    pub first_offset: i64,
    /// The offset of its abort marker.
    pub last_offset: i64,
}

/// A transaction open in this partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OpenTxn {
    pub(crate) producer_id: i64,
    pub(crate) first_offset: i64,
}

#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Transactions {
    /// Producer id → first offset of its open transaction.
    ongoing: BTreeMap<i64, i64>,
    /// In marker order (so ascending `last_offset`).
    aborted: Vec<AbortedTxn>,
}

impl Transactions {
    /// A data batch was appended: a transactional one opens (or continues) its producer's
    /// transaction.
    pub(crate) fn on_data(&mut self, h: &BatchHeader) {
        if h.is_transactional() && !h.is_control() {
            self.ongoing.entry(h.producer_id).or_insert(h.base_offset);
        }
    }

    /// A marker was appended at `offset`: the producer's transaction (if it wrote anything
    /// here) ends; an aborted one is remembered for read_committed fetches.
    pub(crate) fn on_marker(&mut self, producer_id: i64, kind: MarkerKind, offset: i64) {
        let Some(first_offset) = self.ongoing.remove(&producer_id) else {
            return;
        };
        if kind == MarkerKind::Abort {
            self.aborted.push(AbortedTxn {
                producer_id,
                first_offset,
                last_offset: offset,
            });
        }
    }

    pub(crate) fn is_open(&self, producer_id: i64) -> bool {
        self.ongoing.contains_key(&producer_id)
    }

    /// The first offset of the earliest open transaction.
    pub(crate) fn first_unstable_offset(&self) -> Option<i64> {
        self.ongoing.values().copied().min()
    }

    pub(crate) fn open(&self) -> Vec<OpenTxn> {
        self.ongoing
            .iter()
            .map(|(&producer_id, &first_offset)| OpenTxn {
                producer_id,
                first_offset,
            })
            .collect()
    }

    /// Aborted transactions overlapping `[from, to)`: those a consumer reading that range must
    /// filter out (Kafka's `collectAbortedTxns`).
    pub(crate) fn aborted_between(&self, from: i64, to: i64) -> Vec<AbortedTxn> {
        self.aborted
            .iter()
            .filter(|a| a.last_offset >= from && a.first_offset < to)
            .copied()
            .collect()
    }

    /// Forgets aborted transactions that ended below the log start offset.
    pub(crate) fn trim(&mut self, log_start_offset: i64) {
        self.aborted.retain(|a| a.last_offset >= log_start_offset);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::batch::{TRANSACTIONAL_BIT, parse_header};
    use crate::testing::BatchBuilder;

    fn txn_batch(pid: i64, offset: i64) -> BatchHeader {
        let b = BatchBuilder::new()
            .producer(pid, 0, 0)
            .attributes(TRANSACTIONAL_BIT)
            .records(2, 1)
            .base_offset(offset)
            .build();
        parse_header(&b).unwrap()
    }

    #[test]
    fn open_transactions_bound_the_stable_offset_and_aborts_are_indexed() {
        let mut t = Transactions::default();
        t.on_data(&txn_batch(1, 10));
        t.on_data(&txn_batch(2, 12));
        t.on_data(&txn_batch(1, 14));
        assert_eq!(t.first_unstable_offset(), Some(10));
        t.on_marker(1, MarkerKind::Abort, 16);
        assert_eq!(t.first_unstable_offset(), Some(12));
        t.on_marker(2, MarkerKind::Commit, 17);
        assert_eq!(t.first_unstable_offset(), None);
        // A marker for a producer that wrote nothing here changes nothing.
        t.on_marker(3, MarkerKind::Abort, 18);
        let one = AbortedTxn {
            producer_id: 1,
            first_offset: 10,
            last_offset: 16,
        };
        assert_eq!(t.aborted_between(0, 100), vec![one]);
        assert_eq!(t.aborted_between(17, 100), vec![]);
        assert_eq!(t.aborted_between(0, 10), vec![]);
        let json = serde_json::to_string(&t).unwrap();
        assert_eq!(serde_json::from_str::<Transactions>(&json).unwrap(), t);
        t.trim(17);
        assert_eq!(t.aborted_between(0, 100), vec![]);
    }
}
