//! Idempotent-producer state: per producer id, its epoch and the last few batches appended, for
//! duplicate detection and sequence checks. The rules follow Apache Kafka's ProducerStateManager
//! and ProducerAppendInfo:
//! - a batch whose epoch is older than the producer's is rejected (`InvalidProducerEpoch`);
//! - a batch matching one of the last five batches (same epoch, first and last sequence) is a
//!   duplicate: nothing is written and the original offsets are returned;
//! - a newer epoch must start at sequence 0;
//! - within an epoch, a batch must start right after the last sequence (wrapping at
//!   `i32::MAX`), else `OutOfOrderSequence`;
//! - a producer with no state (new, or expired) may start at any sequence.

use std::collections::{HashMap, VecDeque};

use serde::{Deserialize, Serialize};

use crate::batch::{BatchHeader, increment_sequence};
use crate::control::MarkerKind;
use crate::txn_index::Transactions;
use crate::{Error, Result};

/// How many batches per producer are remembered for duplicate detection (Kafka's value).
pub(crate) const BATCHES_TO_RETAIN: usize = 5;

/// One appended batch, as remembered for duplicate detection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct BatchMeta {
    pub(crate) first_seq: i32,
    pub(crate) last_seq: i32,
    pub(crate) base_offset: i64,
    pub(crate) last_offset: i64,
    /// maxTimestamp of the batch as stored (the append time for LogAppendTime).
    pub(crate) timestamp: i64,
}

/// One producer's state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ProducerEntry {
    pub(crate) producer_id: i64,
    pub(crate) epoch: i16,
    pub(crate) batches: VecDeque<BatchMeta>,
    /// Newest batch timestamp, for expiration.
    pub(crate) last_timestamp: i64,
    /// Epoch of the newest transaction coordinator that wrote a marker for this producer here
    /// (-1 for none); older coordinators' markers are fenced.
    #[serde(default = "no_coordinator_epoch")]
    pub(crate) coordinator_epoch: i32,
}

fn no_coordinator_epoch() -> i32 {
    -1
}

impl ProducerEntry {
    fn last_seq(&self) -> i32 {
        self.batches.back().map_or(-1, |b| b.last_seq)
    }
}

/// What DescribeProducers reports about one producer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerSummary {
    pub producer_id: i64,
    pub epoch: i16,
    /// -1 if none is remembered.
    pub last_sequence: i32,
    pub last_timestamp: i64,
    /// First offset of its open transaction here.
    pub txn_start_offset: Option<i64>,
    /// Epoch of the newest coordinator that wrote a marker for it here (-1 for none).
    pub coordinator_epoch: i32,
}

/// All producers of one partition.
#[derive(Debug, Default, Clone)]
pub(crate) struct ProducerStates {
    producers: HashMap<i64, ProducerEntry>,
    /// Open and aborted transactions.
    pub(crate) txns: Transactions,
}

/// What checking a request's batches found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Checked {
    /// Every batch may be appended.
    Fresh,
    /// The request repeats an appended batch.
    Duplicate(BatchMeta),
}

impl ProducerStates {
    pub(crate) fn from_entries(entries: Vec<ProducerEntry>, txns: Transactions) -> Self {
        ProducerStates {
            producers: entries.into_iter().map(|e| (e.producer_id, e)).collect(),
            txns,
        }
    }

    pub(crate) fn entries(&self) -> Vec<ProducerEntry> {
        let mut v: Vec<_> = self.producers.values().cloned().collect();
        v.sort_by_key(|e| e.producer_id);
        v
    }

    /// Whether `producer_id` at `epoch` has a transaction open in this partition.
    pub(crate) fn in_open_txn(&self, producer_id: i64, epoch: i16) -> bool {
        self.txns.is_open(producer_id) && self.producers.get(&producer_id).is_some_and(|e| e.epoch == epoch)
    }

    pub(crate) fn summaries(&self) -> Vec<ProducerSummary> {
        let open: HashMap<i64, i64> = self
            .txns
            .open()
            .into_iter()
            .map(|t| (t.producer_id, t.first_offset))
            .collect();
        let mut v: Vec<_> = self
            .producers
            .values()
            .map(|e| ProducerSummary {
                producer_id: e.producer_id,
                epoch: e.epoch,
                last_sequence: e.last_seq(),
                last_timestamp: e.last_timestamp,
                txn_start_offset: open.get(&e.producer_id).copied(),
                coordinator_epoch: e.coordinator_epoch,
            })
            .collect();
        v.sort_by_key(|s| s.producer_id);
        v
    }

    pub(crate) fn len(&self) -> usize {
        self.producers.len()
    }

    /// Checks a request's batches in order, without changing any state. Batches later in the
    /// request are checked against the sequence the earlier ones would leave.
    pub(crate) fn check<'a>(
        &self,
        batches: impl Iterator<Item = &'a BatchHeader>,
    ) -> Result<Checked> {
        // (producer id, epoch, last sequence) left by earlier batches of this request.
        let mut pending: Vec<(i64, i16, i32)> = Vec::new();
        for b in batches.filter(|b| b.producer_id >= 0) {
            let pid = b.producer_id;
            let stored = self.producers.get(&pid);
            let current = pending
                .iter()
                .rev()
                .find(|p| p.0 == pid)
                .map(|&(_, epoch, seq)| (epoch, seq))
                .or_else(|| stored.map(|e| (e.epoch, e.last_seq())));
            if let Some((epoch, last_seq)) = current {
                if b.producer_epoch < epoch {
                    return Err(Error::InvalidProducerEpoch {
                        producer_id: pid,
                        found: b.producer_epoch,
                        current: epoch,
                    });
                }
                if let Some(dup) = stored.and_then(|e| find_duplicate(e, b)) {
                    return Ok(Checked::Duplicate(dup));
                }
                let in_sequence = if b.producer_epoch > epoch {
                    b.base_sequence == 0
                } else {
                    b.base_sequence == increment_sequence(last_seq, 1)
                        || (last_seq == -1 && b.base_sequence == 0)
                };
                if !in_sequence {
                    let last = if b.producer_epoch > epoch {
                        -1
                    } else {
                        last_seq
                    };
                    return Err(Error::OutOfOrderSequence {
                        producer_id: pid,
                        last,
                        found: b.base_sequence,
                    });
                }
            }
            pending.push((pid, b.producer_epoch, b.last_sequence()));
        }
        Ok(Checked::Fresh)
    }

    /// Checks that a marker's producer epoch is not older than the producer's (Kafka fences
    /// markers from a coordinator that has not seen the latest epoch), and that no newer
    /// coordinator has written a marker for the producer here (a deposed coordinator's late
    /// marker could otherwise end a later transaction of the same producer epoch).
    pub(crate) fn check_marker(&self, producer_id: i64, epoch: i16, coordinator_epoch: i32) -> Result<()> {
        match self.producers.get(&producer_id) {
            Some(e) if epoch < e.epoch => Err(Error::InvalidProducerEpoch {
                producer_id,
                found: epoch,
                current: e.epoch,
            }),
            Some(e) if coordinator_epoch < e.coordinator_epoch => Err(Error::CoordinatorFenced {
                producer_id,
                found: coordinator_epoch,
                current: e.coordinator_epoch,
            }),
            _ => Ok(()),
        }
    }

    /// Ends the producer's transaction at the marker batch `b` (after [`Self::record`] of it),
    /// written by the coordinator of `coordinator_epoch`.
    pub(crate) fn end_txn(&mut self, b: &BatchHeader, kind: MarkerKind, coordinator_epoch: i32) {
        self.txns.on_marker(b.producer_id, kind, b.base_offset);
        if let Some(e) = self.producers.get_mut(&b.producer_id) {
            e.coordinator_epoch = e.coordinator_epoch.max(coordinator_epoch);
        }
    }

    /// Records an appended batch (after `check`, or when replaying the log on recovery).
    /// A marker only moves the producer's epoch: it carries no sequence.
    pub(crate) fn record(&mut self, b: &BatchHeader) {
        if b.producer_id < 0 {
            return;
        }
        self.txns.on_data(b);
        let entry = self
            .producers
            .entry(b.producer_id)
            .or_insert_with(|| ProducerEntry {
                producer_id: b.producer_id,
                epoch: b.producer_epoch,
                batches: VecDeque::with_capacity(BATCHES_TO_RETAIN),
                last_timestamp: b.max_timestamp,
                coordinator_epoch: no_coordinator_epoch(),
            });
        if b.producer_epoch != entry.epoch {
            entry.epoch = b.producer_epoch;
            entry.batches.clear();
        }
        if b.is_control() {
            return;
        }
        if entry.batches.len() == BATCHES_TO_RETAIN {
            entry.batches.pop_front();
        }
        entry.batches.push_back(BatchMeta {
            first_seq: b.base_sequence,
            last_seq: b.last_sequence(),
            base_offset: b.base_offset,
            last_offset: b.last_offset(),
            timestamp: b.max_timestamp,
        });
        entry.last_timestamp = entry.last_timestamp.max(b.max_timestamp);
    }

    /// Drops producers idle since before `cutoff_ms`.
    /// A producer with an open transaction is kept: its marker is still to come.
    pub(crate) fn expire(&mut self, cutoff_ms: i64) {
        let txns = &self.txns;
        self.producers
            .retain(|pid, e| e.last_timestamp >= cutoff_ms || txns.is_open(*pid));
    }
}

fn find_duplicate(entry: &ProducerEntry, b: &BatchHeader) -> Option<BatchMeta> {
    if entry.epoch != b.producer_epoch {
        return None;
    }
    let last_seq = b.last_sequence();
    entry
        .batches
        .iter()
        .find(|m| m.first_seq == b.base_sequence && m.last_seq == last_seq)
        .copied()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::batch::parse_header;
    use crate::testing::BatchBuilder;

    fn header(pid: i64, epoch: i16, seq: i32, n: usize, base_offset: i64) -> BatchHeader {
        let b = BatchBuilder::new()
            .producer(pid, epoch, seq)
            .records(n, 1)
            .base_offset(base_offset)
            .build();
        parse_header(&b).unwrap()
    }

    #[test]
    fn kafka_rules() {
        let mut s = ProducerStates::default();
        let first = header(7, 0, 5, 2, 0);
        assert_eq!(
            s.check([&first].into_iter()).unwrap(),
            Checked::Fresh,
            "unknown producer: any sequence"
        );
        s.record(&first);
        let dup = s.check([&header(7, 0, 5, 2, 99)].into_iter()).unwrap();
        assert!(matches!(
            dup,
            Checked::Duplicate(BatchMeta {
                base_offset: 0,
                last_offset: 1,
                ..
            })
        ));
        assert!(matches!(
            s.check([&header(7, 0, 8, 1, 2)].into_iter()),
            Err(Error::OutOfOrderSequence {
                last: 6,
                found: 8,
                ..
            })
        ));
        assert_eq!(
            s.check([&header(7, 0, 7, 1, 2)].into_iter()).unwrap(),
            Checked::Fresh
        );
        // Two batches in one request: the second must follow the first.
        let (a, b) = (header(7, 0, 7, 2, 2), header(7, 0, 9, 1, 4));
        assert_eq!(s.check([&a, &b].into_iter()).unwrap(), Checked::Fresh);
        assert!(s.check([&b, &a].into_iter()).is_err());
        assert!(matches!(
            s.check([&header(7, 1, 3, 1, 2)].into_iter()),
            Err(Error::OutOfOrderSequence { .. })
        ));
        assert_eq!(
            s.check([&header(7, 1, 0, 1, 2)].into_iter()).unwrap(),
            Checked::Fresh
        );
        s.record(&header(7, 1, 0, 1, 2));
        assert!(matches!(
            s.check([&header(7, 0, 1, 1, 3)].into_iter()),
            Err(Error::InvalidProducerEpoch {
                found: 0,
                current: 1,
                ..
            })
        ));
        for i in 1..=6 {
            s.record(&header(7, 1, i, 1, 2 + i64::from(i)));
        }
        assert_eq!(s.entries()[0].batches.len(), BATCHES_TO_RETAIN);
        s.expire(i64::MAX);
        assert_eq!(s.len(), 0);
    }
}
