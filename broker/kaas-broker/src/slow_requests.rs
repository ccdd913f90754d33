//! The slow-request log: a request whose own time passed `--slow-request-ms` is logged at WARN
//! with its client, API, the partitions it named and the phase that took the time, so one
//! misbehaving client or a disk that stalls shows in the logs without turning on request
//! tracing.

use std::any::Any;
use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kafka_protocol::messages::{
    ApiKey, DeleteRecordsRequest, FetchRequest, ListOffsetsRequest, OffsetCommitRequest, OffsetForLeaderEpochRequest, ProduceRequest,
    TopicName, TxnOffsetCommitRequest,
};
use uuid::Uuid;

use crate::router::RequestContext;

/// What the log line names, kept from the request until its answer is ready.
///
/// NB: it keeps copies, never the request's own strings: those share the request frame's
/// buffer, and holding one would hold a produce request's megabyte of records until its answer
/// (up to 64 requests a connection).
#[derive(Debug, Clone)]
pub struct SlowRequestLog {
    threshold: Duration,
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    client_id: Option<String>,
    peer: SocketAddr,
    partitions: NamedPartitions,
}

impl SlowRequestLog {
    /// `None` when the log is off, so nothing is cloned per request.
    pub fn for_request(threshold: Option<Duration>, ctx: &RequestContext, partitions: NamedPartitions) -> Option<SlowRequestLog> {
        Some(SlowRequestLog {
            partitions,
            threshold: threshold?,
            api: ctx.api_key,
            version: ctx.version,
            correlation_id: ctx.header.correlation_id,
            client_id: ctx.header.client_id.as_ref().map(|id| id.to_string()),
            peer: ctx.peer,
        })
    }

    /// Logs the request if its local time, plus its wait unless the client asked for that wait,
    /// passed the threshold; returns the phase it named. `deferred_at` is when the handler
    /// deferred its answer.
    pub fn answered(&self, started: Instant, deferred_at: Option<Instant>) -> Option<&'static str> {
        let now = Instant::now();
        let local = deferred_at.unwrap_or(now).duration_since(started);
        let wait = deferred_at.map_or(Duration::ZERO, |at| now.duration_since(at));
        let counted_wait = if waits_by_request(self.api) { Duration::ZERO } else { wait };
        if local + counted_wait < self.threshold {
            return None;
        }
        let phase = if counted_wait > local { "wait" } else { "local" };
        tracing::warn!(
            api = ?self.api,
            version = self.version,
            correlation_id = self.correlation_id,
            client_id = self.client_id.as_deref().unwrap_or(""),
            peer = %self.peer,
            partitions = %self.partitions,
            local_ms = local.as_millis() as u64,
            wait_ms = wait.as_millis() as u64,
            phase,
            "slow request"
        );
        Some(phase)
    }
}

/// How many partitions a log line names before it only counts the rest.
const NAMED_MAX: usize = 8;

/// The partitions a request names (the first [`NAMED_MAX`], and how many more), shown as
/// `topic-partition`; a topic a request names by id alone (Fetch v13+) shows its id. Taken for
/// every request while the log is on, so it copies each named topic's name once (not the
/// request's own string, which would hold the request's buffer); the text is made only for a
/// request that is logged.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NamedPartitions {
    named: Vec<(Arc<str>, Uuid, i32)>,
    more: usize,
}

impl NamedPartitions {
    /// What `request` names, for the request types that name partitions; nothing for the rest.
    pub fn of(request: &dyn Any) -> NamedPartitions {
        let mut out = NamedPartitions::default();
        let none = Uuid::nil();
        if let Some(r) = request.downcast_ref::<ProduceRequest>() {
            r.topic_data.iter().for_each(|t| out.add(&t.name, t.topic_id, t.partition_data.iter().map(|p| p.index)));
        } else if let Some(r) = request.downcast_ref::<FetchRequest>() {
            r.topics.iter().for_each(|t| out.add(&t.topic, t.topic_id, t.partitions.iter().map(|p| p.partition)));
        } else if let Some(r) = request.downcast_ref::<ListOffsetsRequest>() {
            r.topics.iter().for_each(|t| out.add(&t.name, none, t.partitions.iter().map(|p| p.partition_index)));
        } else if let Some(r) = request.downcast_ref::<OffsetCommitRequest>() {
            r.topics.iter().for_each(|t| out.add(&t.name, t.topic_id, t.partitions.iter().map(|p| p.partition_index)));
        } else if let Some(r) = request.downcast_ref::<TxnOffsetCommitRequest>() {
            r.topics.iter().for_each(|t| out.add(&t.name, none, t.partitions.iter().map(|p| p.partition_index)));
        } else if let Some(r) = request.downcast_ref::<DeleteRecordsRequest>() {
            r.topics.iter().for_each(|t| out.add(&t.name, none, t.partitions.iter().map(|p| p.partition_index)));
        } else if let Some(r) = request.downcast_ref::<OffsetForLeaderEpochRequest>() {
            r.topics.iter().for_each(|t| out.add(&t.topic, none, t.partitions.iter().map(|p| p.partition)));
        }
        out
    }

    fn add(&mut self, name: &TopicName, id: Uuid, partitions: impl ExactSizeIterator<Item = i32>) {
        let room = NAMED_MAX.saturating_sub(self.named.len());
        self.more += partitions.len().saturating_sub(room);
        if room == 0 {
            return;
        }
        let name: Arc<str> = Arc::from(name.as_str());
        self.named.extend(partitions.take(room).map(|p| (name.clone(), id, p)));
    }
}

impl fmt::Display for NamedPartitions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (name, id, partition)) in self.named.iter().enumerate() {
            let separator = if i == 0 { "" } else { "," };
            if name.is_empty() {
                write!(f, "{separator}{id}-{partition}")?;
            } else {
                write!(f, "{separator}{name}-{partition}")?;
            }
        }
        if self.more > 0 {
            write!(f, " (+{} more)", self.more)?;
        }
        Ok(())
    }
}

/// APIs whose deferred answer waits as long as the client asked (a fetch's max_wait_ms, a
/// rebalance's timeout): that wait is not slowness.
fn waits_by_request(api: ApiKey) -> bool {
    matches!(api, ApiKey::Fetch | ApiKey::JoinGroup | ApiKey::SyncGroup)
}

#[cfg(test)]
mod tests {
    use kafka_protocol::protocol::StrBytes;

    use super::*;

    fn log(api: ApiKey) -> SlowRequestLog {
        let peer = SocketAddr::from(([127, 0, 0, 1], 40000));
        SlowRequestLog {
            threshold: Duration::from_millis(100),
            api,
            version: 0,
            correlation_id: 7,
            client_id: None,
            peer,
            partitions: NamedPartitions::default(),
        }
    }

    fn ago(ms: u64) -> Instant {
        Instant::now().checked_sub(Duration::from_millis(ms)).unwrap_or_else(Instant::now)
    }

    #[test]
    fn names_the_phase_that_took_the_time() {
        assert_eq!(log(ApiKey::Metadata).answered(ago(500), None), Some("local"));
        assert_eq!(log(ApiKey::Metadata).answered(ago(5), None), None);
        // A produce that waited 400 ms for its fsync after 1 ms of handling.
        assert_eq!(log(ApiKey::Produce).answered(ago(401), Some(ago(400))), Some("wait"));
    }

    #[test]
    fn a_wait_the_client_asked_for_is_not_slowness() {
        assert_eq!(log(ApiKey::Fetch).answered(ago(5000), Some(ago(4999))), None);
        assert_eq!(log(ApiKey::JoinGroup).answered(ago(5000), Some(ago(4999))), None);
        // ... but a fetch that took long to read is.
        assert_eq!(log(ApiKey::Fetch).answered(ago(5000), Some(ago(200))), Some("local"));
    }

    #[test]
    fn names_the_first_partitions_of_a_request_and_counts_the_rest() {
        use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
        let topic = |name: &str, partitions: std::ops::Range<i32>| {
            TopicProduceData::default()
                .with_name(TopicName(StrBytes::from_string(name.to_string())))
                .with_partition_data(partitions.map(|p| PartitionProduceData::default().with_index(p)).collect())
        };
        let produce = ProduceRequest::default().with_topic_data(vec![topic("a", 0..2), topic("b", 0..10)]);
        assert_eq!(NamedPartitions::of(&produce).to_string(), "a-0,a-1,b-0,b-1,b-2,b-3,b-4,b-5 (+4 more)");
        let by_id = FetchRequest::default().with_topics(vec![
            kafka_protocol::messages::fetch_request::FetchTopic::default()
                .with_topic_id(Uuid::nil())
                .with_partitions(vec![kafka_protocol::messages::fetch_request::FetchPartition::default().with_partition(3)]),
        ]);
        assert_eq!(NamedPartitions::of(&by_id).to_string(), format!("{}-3", Uuid::nil()));
        assert_eq!(NamedPartitions::of(&kafka_protocol::messages::MetadataRequest::default()).to_string(), "");
    }

    /// The log is kept until a request is answered; a produce request's strings are slices of
    /// its frame, so keeping one would keep the frame's records alive that long.
    #[test]
    fn the_log_holds_no_part_of_the_request_frame() -> anyhow::Result<()> {
        use bytes::{BufMut, Bytes, BytesMut};
        use kafka_protocol::messages::RequestHeader;
        use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
        use kafka_protocol::protocol::{Decodable, Encodable};
        let header = RequestHeader::default().with_request_api_key(0).with_request_api_version(9).with_client_id(Some(StrBytes::from_static_str("producer-1")));
        let topic = TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_static_str("orders")))
            .with_partition_data(vec![PartitionProduceData::default().with_index(0).with_records(Some(Bytes::from(vec![7u8; 100_000])))]);
        let mut buf = BytesMut::new();
        header.encode(&mut buf, 2)?;
        ProduceRequest::default().with_acks(-1).with_topic_data(vec![topic]).encode(&mut buf, 9)?;
        buf.put_u8(0);
        let frame = buf.freeze();
        let mut body = frame.clone();
        let header = RequestHeader::decode(&mut body, 2)?;
        let request = ProduceRequest::decode(&mut body, 9)?;
        let ctx = crate::router::RequestContext::for_tests(ApiKey::Produce, 9, header);
        let log = SlowRequestLog::for_request(Some(Duration::from_millis(1)), &ctx, NamedPartitions::of(&request));
        drop((request, body, ctx));
        assert!(frame.is_unique(), "something kept a slice of the request frame");
        assert!(log.is_some_and(|l| l.partitions.to_string() == "orders-0" && l.client_id.as_deref() == Some("producer-1")));
        Ok(())
    }
}
