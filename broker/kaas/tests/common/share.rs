//! Share-group requests on the wire (KIP-932), for the local and the cluster tests.

use kafka_protocol::messages::incremental_alter_configs_request::{AlterConfigsResource, AlterableConfig};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::share_acknowledge_request::{AcknowledgePartition, AcknowledgeTopic, AcknowledgementBatch};
use kafka_protocol::messages::share_fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{
    DescribeShareGroupOffsetsRequest, GroupId, IncrementalAlterConfigsRequest, MetadataRequest, ProduceRequest, ShareAcknowledgeRequest,
    ShareFetchRequest, ShareFetchResponse, ShareGroupHeartbeatRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

use super::TestResult;
use super::wire::{Wire, batch};

pub const ACCEPT: i8 = 1;
pub const RELEASE: i8 = 2;
pub const REJECT: i8 = 3;

pub fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_owned())
}

pub fn produce(wire: &mut Wire, topic: &str, values: &[&str]) -> TestResult {
    let request = ProduceRequest::default().with_acks(-1).with_timeout_ms(10_000).with_topic_data(vec![
        TopicProduceData::default()
            .with_name(TopicName(s(topic)))
            .with_partition_data(vec![PartitionProduceData::default().with_index(0).with_records(Some(batch(-1, -1, -1, values)?))]),
    ]);
    assert_eq!(wire.call(9, &request)?.responses[0].partition_responses[0].error_code, 0);
    Ok(())
}

pub fn topic_id(wire: &mut Wire, topic: &str) -> TestResult<Uuid> {
    let request = MetadataRequest::default().with_topics(Some(vec![MetadataRequestTopic::default().with_name(Some(TopicName(s(topic))))]));
    Ok(wire.call(12, &request)?.topics[0].topic_id)
}

pub fn set_group_configs(wire: &mut Wire, group: &str, configs: &[(&str, &str)]) -> TestResult {
    let configs = configs.iter().map(|(k, v)| AlterableConfig::default().with_name(s(k)).with_config_operation(0).with_value(Some(s(v)))).collect();
    let request = IncrementalAlterConfigsRequest::default()
        .with_resources(vec![AlterConfigsResource::default().with_resource_type(32).with_resource_name(s(group)).with_configs(configs)]);
    assert_eq!(wire.call(1, &request)?.responses[0].error_code, 0);
    Ok(())
}

/// Joins (or heartbeats) `member`; returns its epoch and assigned partitions of topic `id`.
pub fn heartbeat(wire: &mut Wire, group: &str, member: &str, epoch: i32, topic: Option<&str>, id: Uuid) -> TestResult<(i16, i32, Option<Vec<i32>>)> {
    let request = ShareGroupHeartbeatRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_member_id(s(member))
        .with_member_epoch(epoch)
        .with_subscribed_topic_names(topic.map(|t| vec![TopicName(s(t))]));
    let r = wire.call(1, &request)?;
    let assigned = r.assignment.map(|a| a.topic_partitions.iter().filter(|tp| tp.topic_id == id).flat_map(|tp| tp.partitions.clone()).collect());
    Ok((r.error_code, r.member_epoch, assigned))
}

pub fn share_fetch(wire: &mut Wire, group: &str, member: &str, epoch: i32, id: Uuid, max_records: i32, acks: Vec<AcknowledgementBatchOf>) -> TestResult<ShareFetchResponse> {
    let partition = FetchPartition::default().with_partition_index(0).with_acknowledgement_batches(
        acks.into_iter().map(|(first, last, t)| kafka_protocol::messages::share_fetch_request::AcknowledgementBatch::default().with_first_offset(first).with_last_offset(last).with_acknowledge_types(vec![t])).collect(),
    );
    let request = ShareFetchRequest::default()
        .with_group_id(Some(GroupId(s(group))))
        .with_member_id(Some(s(member)))
        .with_share_session_epoch(epoch)
        .with_max_wait_ms(200)
        .with_min_bytes(1)
        .with_max_bytes(1 << 20)
        .with_max_records(max_records)
        .with_batch_size(max_records)
        .with_topics(vec![FetchTopic::default().with_topic_id(id).with_partitions(vec![partition])]);
    wire.call(1, &request)
}

pub type AcknowledgementBatchOf = (i64, i64, i8);

/// (first, last, delivery count) of what a response handed out.
pub fn acquired(r: &ShareFetchResponse) -> Vec<(i64, i64, i16)> {
    r.responses.iter().flat_map(|t| &t.partitions).flat_map(|p| &p.acquired_records).map(|a| (a.first_offset, a.last_offset, a.delivery_count)).collect()
}

pub fn acknowledge(wire: &mut Wire, group: &str, member: &str, epoch: i32, id: Uuid, acks: &[AcknowledgementBatchOf]) -> TestResult<(i16, Vec<i16>)> {
    let batches = acks.iter().map(|&(first, last, t)| AcknowledgementBatch::default().with_first_offset(first).with_last_offset(last).with_acknowledge_types(vec![t])).collect();
    let request = ShareAcknowledgeRequest::default()
        .with_group_id(Some(GroupId(s(group))))
        .with_member_id(Some(s(member)))
        .with_share_session_epoch(epoch)
        .with_topics(vec![AcknowledgeTopic::default().with_topic_id(id).with_partitions(vec![AcknowledgePartition::default().with_partition_index(0).with_acknowledgement_batches(batches)])]);
    let r = wire.call(1, &request)?;
    Ok((r.error_code, r.responses.iter().flat_map(|t| &t.partitions).map(|p| p.error_code).collect()))
}

/// The group's start offset and lag in partition 0 of `topic` (DescribeShareGroupOffsets v1).
pub fn share_offsets(wire: &mut Wire, group: &str, topic: &str) -> TestResult<(i64, i64)> {
    use kafka_protocol::messages::describe_share_group_offsets_request::{DescribeShareGroupOffsetsRequestGroup, DescribeShareGroupOffsetsRequestTopic};
    let request = DescribeShareGroupOffsetsRequest::default().with_groups(vec![
        DescribeShareGroupOffsetsRequestGroup::default()
            .with_group_id(GroupId(s(group)))
            .with_topics(Some(vec![DescribeShareGroupOffsetsRequestTopic::default().with_topic_name(TopicName(s(topic))).with_partitions(vec![0])])),
    ]);
    let r = wire.call(1, &request)?;
    assert_eq!(r.groups[0].error_code, 0);
    let p = &r.groups[0].topics[0].partitions[0];
    Ok((p.start_offset, p.lag))
}

