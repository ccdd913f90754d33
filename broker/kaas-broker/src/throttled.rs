//! Every response's `throttle_time_ms`, wherever the API has one, so the router can apply the
//! request-time quota to any answer without each handler doing so.

use kafka_protocol::messages::*;

/// A response's throttle time (0 and ignored for the APIs without one: Kafka exempts them).
pub trait Throttled {
    fn throttle_time_ms(&self) -> i32;
    fn set_throttle_time_ms(&mut self, ms: i32);
}

macro_rules! throttled {
    (with: $($ty:ty),* ; without: $($none:ty),* $(,)?) => {
        $( impl Throttled for $ty {
            fn throttle_time_ms(&self) -> i32 {
                self.throttle_time_ms
            }
            fn set_throttle_time_ms(&mut self, ms: i32) {
                self.throttle_time_ms = ms;
            }
        } )*
        $( impl Throttled for $none {
            fn throttle_time_ms(&self) -> i32 {
                0
            }
            fn set_throttle_time_ms(&mut self, _ms: i32) {}
        } )*
    };
}

throttled! {
    with: ProduceResponse, FetchResponse, ListOffsetsResponse, MetadataResponse, ApiVersionsResponse,
        CreateTopicsResponse, DeleteTopicsResponse, DeleteRecordsResponse, InitProducerIdResponse,
        OffsetForLeaderEpochResponse, DescribeConfigsResponse, AlterConfigsResponse, CreatePartitionsResponse,
        IncrementalAlterConfigsResponse, DescribeClusterResponse, DescribeTopicPartitionsResponse,
        DescribeLogDirsResponse, FindCoordinatorResponse, JoinGroupResponse, SyncGroupResponse, HeartbeatResponse,
        LeaveGroupResponse, OffsetCommitResponse, OffsetFetchResponse, OffsetDeleteResponse, DescribeGroupsResponse,
        ListGroupsResponse, DeleteGroupsResponse, ConsumerGroupHeartbeatResponse, ConsumerGroupDescribeResponse,
        AddPartitionsToTxnResponse, AddOffsetsToTxnResponse, EndTxnResponse, TxnOffsetCommitResponse,
        DescribeProducersResponse, DescribeTransactionsResponse, ListTransactionsResponse, CreateAclsResponse,
        DescribeAclsResponse, DeleteAclsResponse, DescribeUserScramCredentialsResponse,
        AlterUserScramCredentialsResponse, ListConfigResourcesResponse, DescribeClientQuotasResponse,
        AlterClientQuotasResponse, ShareGroupHeartbeatResponse, ShareGroupDescribeResponse, ShareFetchResponse,
        ShareAcknowledgeResponse, DescribeShareGroupOffsetsResponse, AlterShareGroupOffsetsResponse,
        DeleteShareGroupOffsetsResponse;
    without: WriteTxnMarkersResponse, SaslHandshakeResponse, SaslAuthenticateResponse,
}
