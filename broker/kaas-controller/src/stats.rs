//! Partition statistics on the heartbeat, in both directions: brokers report the log ends and
//! sizes of the partitions they lead; the controller hands the high watermarks of the partitions
//! others lead back in its acknowledgements (group coordinators compute lag with them).
//!
//! Each direction sends only what changed since the previous message of the same stream (all of
//! it on a stream's first), packed per topic, at most [`MAX_PARTITION_STATS`] entries a message:
//! a cluster of 10,000 partitions that all move every second costs a few hundred KB a beat, far
//! below gRPC's 4 MB message limit, and a larger one catches up over several beats.

use std::collections::{BTreeMap, HashMap, VecDeque};

use crate::proto::TopicPartitionStats;

/// Entries in one beat or acknowledgement; the rest follow in the next ones.
pub const MAX_PARTITION_STATS: usize = 20_000;

/// A partition by topic name and index.
pub type PartitionId = (String, i32);

/// What a partition's leader knows of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PartitionStats {
    pub log_end_offset: i64,
    pub high_watermark: i64,
    pub size_bytes: u64,
}

/// What one end of a stream has already sent, so that the next message carries only changes.
#[derive(Debug, Default)]
pub struct DeltaSender {
    sent: HashMap<PartitionId, PartitionStats>,
}

impl DeltaSender {
    /// The entries of `current` that differ from what was sent, at most `limit` of them, packed
    /// per topic; they count as sent from now on. Entries absent from `current` are forgotten,
    /// so a partition that comes back is sent again.
    pub fn changes(&mut self, current: &BTreeMap<PartitionId, PartitionStats>, limit: usize) -> Vec<TopicPartitionStats> {
        self.sent.retain(|id, _| current.contains_key(id));
        let mut out: Vec<TopicPartitionStats> = Vec::new();
        let mut count = 0;
        for (id, stats) in current {
            if count == limit {
                break;
            }
            if self.sent.get(id) == Some(stats) {
                continue;
            }
            self.sent.insert(id.clone(), *stats);
            count += 1;
            let packed = match out.last_mut() {
                Some(last) if last.topic == id.0 => last,
                _ => {
                    out.push(TopicPartitionStats { topic: id.0.clone(), ..Default::default() });
                    out.last_mut().expect("just pushed")
                }
            };
            packed.partitions.push(id.1);
            packed.log_end_offsets.push(stats.log_end_offset);
            packed.high_watermarks.push(stats.high_watermark);
            packed.size_bytes.push(stats.size_bytes);
        }
        out
    }
}

/// Samples of a handed-back high watermark kept per partition.
const HISTORY: usize = 16;

/// A partition another broker leads, as the controller hands it back: its latest statistics,
/// and when this broker first saw its high watermark reach which offset. That history stands in
/// for the record timestamps this broker cannot read (only the leader reads the log): the lag in
/// time of a committed offset is estimated as the time since the high watermark was first seen
/// past it, a lower bound, its precision the spacing of the samples (a beat apart while young;
/// older samples are thinned, keeping the oldest, so the history spans the partition's whole
/// time on this broker in [`HISTORY`] samples).
#[derive(Debug, Clone, Default)]
pub struct RemotePartition {
    pub stats: PartitionStats,
    /// (high watermark, Unix ms it was first seen), oldest first, high watermarks increasing.
    history: VecDeque<(i64, i64)>,
}

impl RemotePartition {
    /// Takes in a handed-back statistic seen at `now_ms`.
    pub fn observe(&mut self, stats: PartitionStats, now_ms: i64) {
        self.stats = stats;
        // A high watermark that went back (a truncated log) invalidates the samples above it.
        self.history.retain(|(hw, _)| *hw <= stats.high_watermark);
        if self.history.back().is_some_and(|(hw, _)| *hw == stats.high_watermark) {
            return;
        }
        self.history.push_back((stats.high_watermark, now_ms));
        if self.history.len() > HISTORY {
            // Drop the inner sample whose neighbours are closest in time: the spacing stays
            // even, and old samples grow sparse before young ones.
            let closest = (1..self.history.len() - 1).min_by_key(|&i| self.history[i + 1].1 - self.history[i - 1].1);
            if let Some(i) = closest {
                self.history.remove(i);
            }
        }
    }

    /// Seconds since the high watermark was first seen past `committed` (0 when it is not:
    /// caught up); at least the time since the oldest sample when that one is already past it.
    pub fn lag_seconds(&self, committed: i64, now_ms: i64) -> f64 {
        match self.history.iter().find(|(hw, _)| *hw > committed) {
            Some((_, seen)) => (now_ms - seen).max(0) as f64 / 1000.0,
            None => 0.0,
        }
    }
}

/// The entries of received messages. A message whose lists disagree in length (a peer that does
/// not follow this file) yields only the entries every list has.
pub fn decode(messages: &[TopicPartitionStats]) -> impl Iterator<Item = (PartitionId, PartitionStats)> + '_ {
    messages.iter().flat_map(|m| {
        let columns = m.partitions.iter().zip(&m.log_end_offsets).zip(&m.high_watermarks).zip(&m.size_bytes);
        columns.map(|(((p, leo), hw), size)| {
            ((m.topic.clone(), *p), PartitionStats { log_end_offset: *leo, high_watermark: *hw, size_bytes: *size })
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(n: i64) -> PartitionStats {
        PartitionStats { log_end_offset: n, high_watermark: n, size_bytes: n as u64 * 10 }
    }

    #[test]
    fn only_changes_are_sent_packed_per_topic_and_bounded() {
        let mut current = BTreeMap::new();
        for p in 0..3 {
            current.insert(("a".to_string(), p), stats(1));
            current.insert(("b".to_string(), p), stats(1));
        }
        let mut sender = DeltaSender::default();
        let first = sender.changes(&current, 4);
        assert_eq!(
            first.iter().map(|t| (t.topic.as_str(), t.partitions.clone())).collect::<Vec<_>>(),
            [("a", vec![0, 1, 2]), ("b", vec![0])]
        );
        let rest = sender.changes(&current, 4);
        assert_eq!(rest.iter().map(|t| (t.topic.as_str(), t.partitions.clone())).collect::<Vec<_>>(), [("b", vec![1, 2])]);
        assert!(sender.changes(&current, 4).is_empty(), "nothing changed");

        current.insert(("b".to_string(), 2), stats(7));
        let changed: Vec<_> = decode(&sender.changes(&current, 4)).collect();
        assert_eq!(changed, [(("b".to_string(), 2), stats(7))]);

        // A partition that goes away and comes back is sent again.
        let gone = current.remove(&("a".to_string(), 0)).expect("present");
        assert!(sender.changes(&current, 4).is_empty());
        current.insert(("a".to_string(), 0), gone);
        assert_eq!(decode(&sender.changes(&current, 4)).count(), 1);
    }

    #[test]
    fn lag_in_time_is_the_time_since_the_high_watermark_passed_the_commit() {
        let mut p = RemotePartition::default();
        let at = |hw: i64| PartitionStats { high_watermark: hw, ..PartitionStats::default() };
        p.observe(at(10), 1_000);
        p.observe(at(10), 2_000);
        p.observe(at(20), 3_000);
        p.observe(at(30), 4_000);
        assert_eq!(p.lag_seconds(30, 9_000), 0.0, "caught up");
        assert_eq!(p.lag_seconds(25, 9_000), 5.0, "offset 25 became readable when 30 was seen");
        assert_eq!(p.lag_seconds(10, 9_000), 6.0);
        assert_eq!(p.lag_seconds(3, 9_000), 8.0, "older than the history: since its oldest sample");
        // A long history keeps its oldest sample and stays bounded.
        for i in 0..1000 {
            p.observe(at(31 + i), 5_000 + i * 1_000);
        }
        assert_eq!(p.history.len(), HISTORY);
        assert_eq!(p.history.front(), Some(&(10, 1_000)));
        assert_eq!(p.lag_seconds(1029, 1_004_000), 0.0);
        assert!(p.lag_seconds(1029, 1_004_000 + 3_000) == 3.0);
    }

    #[test]
    fn uneven_lists_decode_to_the_common_prefix() {
        let m = TopicPartitionStats {
            topic: "t".into(),
            partitions: vec![0, 1],
            log_end_offsets: vec![5],
            high_watermarks: vec![5, 6],
            size_bytes: vec![1, 2],
        };
        assert_eq!(decode(&[m]).count(), 1);
    }
}
