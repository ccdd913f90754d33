//! Partition statistics on the heartbeat, in both directions: brokers report the log ends and
//! sizes of the partitions they lead; the controller hands the high watermarks of the partitions
//! others lead back in its acknowledgements (group coordinators compute lag with them).
//!
//! Each direction sends only what changed since the previous message of the same stream (all of
//! it on a stream's first), packed per topic, at most [`MAX_PARTITION_STATS`] entries a message:
//! a cluster of 10,000 partitions that all move every second costs a few hundred KB a beat, far
//! below gRPC's 4 MB message limit, and a larger one catches up over several beats.

use std::collections::{BTreeMap, HashMap};

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
