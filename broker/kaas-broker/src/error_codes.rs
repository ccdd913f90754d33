//! Every error code a response carries, wherever the API's schema puts it (top level, per
//! topic, per partition, per group, per transaction), so `/metrics` can count failed requests
//! by error as Kafka's `ErrorsPerSec` does without each handler reporting its own.

use kafka_protocol::messages::*;

/// Calls `f` with each error code in a response (NONE included: callers skip it).
pub trait ErrorCodes {
    fn error_codes(&self, f: &mut dyn FnMut(i16));
}

/// `error_codes!(Response => |r, f| ...)`: one line per response type, the closure walks the
/// schema's nesting.
macro_rules! error_codes {
    ($( $ty:ty => |$r:ident, $f:ident| $body:expr ;)*) => {
        $( impl ErrorCodes for $ty {
            fn error_codes(&self, $f: &mut dyn FnMut(i16)) {
                let $r = self;
                $body
            }
        } )*
    };
}

error_codes! {
    ProduceResponse => |r, f| r.responses.iter().flat_map(|t| &t.partition_responses).for_each(|p| f(p.error_code));
    FetchResponse => |r, f| {
        f(r.error_code);
        r.responses.iter().flat_map(|t| &t.partitions).for_each(|p| f(p.error_code));
    };
    ListOffsetsResponse => |r, f| r.topics.iter().flat_map(|t| &t.partitions).for_each(|p| f(p.error_code));
    MetadataResponse => |r, f| {
        f(r.error_code);
        for t in &r.topics {
            f(t.error_code);
            t.partitions.iter().for_each(|p| f(p.error_code));
        }
    };
    ApiVersionsResponse => |r, f| f(r.error_code);
    CreateTopicsResponse => |r, f| r.topics.iter().for_each(|t| f(t.error_code));
    DeleteTopicsResponse => |r, f| r.responses.iter().for_each(|t| f(t.error_code));
    DeleteRecordsResponse => |r, f| r.topics.iter().flat_map(|t| &t.partitions).for_each(|p| f(p.error_code));
    InitProducerIdResponse => |r, f| f(r.error_code);
    OffsetForLeaderEpochResponse => |r, f| r.topics.iter().flat_map(|t| &t.partitions).for_each(|p| f(p.error_code));
    DescribeConfigsResponse => |r, f| r.results.iter().for_each(|c| f(c.error_code));
    AlterConfigsResponse => |r, f| r.responses.iter().for_each(|c| f(c.error_code));
    CreatePartitionsResponse => |r, f| r.results.iter().for_each(|t| f(t.error_code));
    IncrementalAlterConfigsResponse => |r, f| r.responses.iter().for_each(|c| f(c.error_code));
    DescribeClusterResponse => |r, f| f(r.error_code);
    DescribeTopicPartitionsResponse => |r, f| {
        for t in &r.topics {
            f(t.error_code);
            t.partitions.iter().for_each(|p| f(p.error_code));
        }
    };
    DescribeLogDirsResponse => |r, f| {
        f(r.error_code);
        r.results.iter().for_each(|d| f(d.error_code));
    };
    FindCoordinatorResponse => |r, f| {
        f(r.error_code);
        r.coordinators.iter().for_each(|c| f(c.error_code));
    };
    JoinGroupResponse => |r, f| f(r.error_code);
    SyncGroupResponse => |r, f| f(r.error_code);
    HeartbeatResponse => |r, f| f(r.error_code);
    LeaveGroupResponse => |r, f| {
        f(r.error_code);
        r.members.iter().for_each(|m| f(m.error_code));
    };
    OffsetCommitResponse => |r, f| r.topics.iter().flat_map(|t| &t.partitions).for_each(|p| f(p.error_code));
    OffsetFetchResponse => |r, f| {
        f(r.error_code);
        r.topics.iter().flat_map(|t| &t.partitions).for_each(|p| f(p.error_code));
        for g in &r.groups {
            f(g.error_code);
            g.topics.iter().flat_map(|t| &t.partitions).for_each(|p| f(p.error_code));
        }
    };
    OffsetDeleteResponse => |r, f| {
        f(r.error_code);
        r.topics.iter().flat_map(|t| &t.partitions).for_each(|p| f(p.error_code));
    };
    DescribeGroupsResponse => |r, f| r.groups.iter().for_each(|g| f(g.error_code));
    ListGroupsResponse => |r, f| f(r.error_code);
    DeleteGroupsResponse => |r, f| r.results.iter().for_each(|g| f(g.error_code));
    ConsumerGroupHeartbeatResponse => |r, f| f(r.error_code);
    ConsumerGroupDescribeResponse => |r, f| r.groups.iter().for_each(|g| f(g.error_code));
    ShareGroupHeartbeatResponse => |r, f| f(r.error_code);
    ShareGroupDescribeResponse => |r, f| r.groups.iter().for_each(|g| f(g.error_code));
    ShareFetchResponse => |r, f| {
        f(r.error_code);
        for p in r.responses.iter().flat_map(|t| &t.partitions) {
            f(p.error_code);
            f(p.acknowledge_error_code);
        }
    };
    ShareAcknowledgeResponse => |r, f| {
        f(r.error_code);
        r.responses.iter().flat_map(|t| &t.partitions).for_each(|p| f(p.error_code));
    };
    DescribeShareGroupOffsetsResponse => |r, f| {
        for g in &r.groups {
            f(g.error_code);
            g.topics.iter().flat_map(|t| &t.partitions).for_each(|p| f(p.error_code));
        }
    };
    AlterShareGroupOffsetsResponse => |r, f| {
        f(r.error_code);
        r.responses.iter().flat_map(|t| &t.partitions).for_each(|p| f(p.error_code));
    };
    DeleteShareGroupOffsetsResponse => |r, f| {
        f(r.error_code);
        r.responses.iter().for_each(|t| f(t.error_code));
    };
    AddPartitionsToTxnResponse => |r, f| {
        f(r.error_code);
        let v3 = r.results_by_topic_v3_and_below.iter();
        let v4 = r.results_by_transaction.iter().flat_map(|t| &t.topic_results);
        v3.chain(v4).flat_map(|t| &t.results_by_partition).for_each(|p| f(p.partition_error_code));
    };
    AddOffsetsToTxnResponse => |r, f| f(r.error_code);
    EndTxnResponse => |r, f| f(r.error_code);
    WriteTxnMarkersResponse => |r, f| {
        r.markers.iter().flat_map(|m| &m.topics).flat_map(|t| &t.partitions).for_each(|p| f(p.error_code));
    };
    TxnOffsetCommitResponse => |r, f| r.topics.iter().flat_map(|t| &t.partitions).for_each(|p| f(p.error_code));
    DescribeProducersResponse => |r, f| r.topics.iter().flat_map(|t| &t.partitions).for_each(|p| f(p.error_code));
    DescribeTransactionsResponse => |r, f| r.transaction_states.iter().for_each(|t| f(t.error_code));
    ListTransactionsResponse => |r, f| f(r.error_code);
    SaslHandshakeResponse => |r, f| f(r.error_code);
    SaslAuthenticateResponse => |r, f| f(r.error_code);
    CreateAclsResponse => |r, f| r.results.iter().for_each(|c| f(c.error_code));
    DescribeAclsResponse => |r, f| f(r.error_code);
    DeleteAclsResponse => |r, f| r.filter_results.iter().for_each(|c| f(c.error_code));
    DescribeUserScramCredentialsResponse => |r, f| {
        f(r.error_code);
        r.results.iter().for_each(|u| f(u.error_code));
    };
    AlterUserScramCredentialsResponse => |r, f| r.results.iter().for_each(|u| f(u.error_code));
    ListConfigResourcesResponse => |r, f| f(r.error_code);
    DescribeClientQuotasResponse => |r, f| f(r.error_code);
    AlterClientQuotasResponse => |r, f| r.entries.iter().for_each(|e| f(e.error_code));
}

/// The Kafka name of an error code (`NOT_LEADER_OR_FOLLOWER`), as Kafka labels its
/// `ErrorsPerSec` metric; a code this library does not know keeps its number.
pub fn error_name(code: i16) -> String {
    match kafka_protocol::ResponseError::try_from_code(code) {
        None => "NONE".to_string(),
        Some(kafka_protocol::ResponseError::Unknown(code)) => format!("UNKNOWN_CODE_{code}"),
        Some(error) => screaming_snake(&format!("{error:?}")),
    }
}

/// `NotLeaderOrFollower` → `NOT_LEADER_OR_FOLLOWER`.
fn screaming_snake(camel: &str) -> String {
    let mut out = String::with_capacity(camel.len() + 8);
    for (i, c) in camel.char_indices() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_uppercase());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::ResponseError;

    #[test]
    fn names_are_kafkas() {
        assert_eq!(error_name(ResponseError::NotLeaderOrFollower.code()), "NOT_LEADER_OR_FOLLOWER");
        assert_eq!(error_name(ResponseError::UnknownTopicOrPartition.code()), "UNKNOWN_TOPIC_OR_PARTITION");
        assert_eq!(error_name(ResponseError::InvalidRequest.code()), "INVALID_REQUEST");
        assert_eq!(error_name(-32000), "UNKNOWN_CODE_-32000");
        assert_eq!(error_name(0), "NONE");
    }

    #[test]
    fn nested_codes_are_all_visited() {
        use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
        let partition = |code| PartitionProduceResponse::default().with_error_code(code);
        let response = ProduceResponse::default().with_responses(vec![
            TopicProduceResponse::default().with_partition_responses(vec![partition(0), partition(6)]),
            TopicProduceResponse::default().with_partition_responses(vec![partition(3)]),
        ]);
        let mut codes = Vec::new();
        response.error_codes(&mut |c| codes.push(c));
        assert_eq!(codes, vec![0, 6, 3]);
    }
}
