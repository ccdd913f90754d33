//! Protocol details no stock client in the suite exercises: incremental fetch sessions
//! (KIP-227), fetch by topic id (v13+), long-poll wake-up on append, DescribeCluster,
//! OffsetForLeaderEpoch, DescribeTopicPartitions paging, DescribeLogDirs, ListConfigResources,
//! client quotas and the advertised versions.

mod common;

use std::time::{Duration, Instant};

use common::wire::{Wire, batch};
use common::{Kaas, TestResult};
use kafka_protocol::ResponseError;
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic, ForgottenTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::offset_for_leader_epoch_request::{OffsetForLeaderPartition, OffsetForLeaderTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, DescribeClusterRequest, DescribeConfigsRequest, DescribeLogDirsRequest, DescribeTopicPartitionsRequest,
    DescribeTopicPartitionsResponse, FetchRequest, FetchResponse, ListConfigResourcesRequest, MetadataRequest, MetadataResponse,
    OffsetForLeaderEpochRequest, ProduceRequest, ResponseHeader, TopicName,
};
use kafka_protocol::protocol::Decodable;
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

fn name(topic: &str) -> TopicName {
    TopicName(StrBytes::from_string(topic.to_string()))
}

fn produce(wire: &mut Wire, topic: &str, values: &[&str]) -> TestResult {
    let request = ProduceRequest::default().with_acks(-1).with_timeout_ms(10_000).with_topic_data(vec![
        TopicProduceData::default()
            .with_name(name(topic))
            .with_partition_data(vec![PartitionProduceData::default().with_index(0).with_records(Some(batch(-1, -1, -1, values)?))]),
    ]);
    let response = wire.call(9, &request)?;
    assert_eq!(response.responses[0].partition_responses[0].error_code, 0);
    Ok(())
}

fn fetch_partition(offset: i64) -> FetchPartition {
    FetchPartition::default().with_partition(0).with_fetch_offset(offset).with_partition_max_bytes(1 << 20).with_current_leader_epoch(-1)
}

fn topic_id(wire: &mut Wire, topic: &str) -> TestResult<Uuid> {
    let request = MetadataRequest::default().with_topics(Some(vec![MetadataRequestTopic::default().with_name(Some(name(topic)))]));
    let response = wire.call(12, &request)?;
    Ok(response.topics[0].topic_id)
}

fn partitions(response: &FetchResponse) -> usize {
    response.responses.iter().map(|t| t.partitions.len()).sum()
}

#[test]
fn incremental_fetch_sessions_answer_only_what_changed() -> TestResult {
    let kaas = Kaas::start()?;
    let mut wire = Wire::connect(&kaas.bootstrap)?;
    wire.create_topic("s1", 1)?;
    wire.create_topic("s2", 1)?;
    produce(&mut wire, "s1", &["a"])?;

    // Full fetch, epoch 0: a new session, both partitions answered.
    let full = FetchRequest::default().with_max_wait_ms(0).with_session_id(0).with_session_epoch(0).with_topics(vec![
        FetchTopic::default().with_topic(name("s1")).with_partitions(vec![fetch_partition(0)]),
        FetchTopic::default().with_topic(name("s2")).with_partitions(vec![fetch_partition(0)]),
    ]);
    let response = wire.call(12, &full)?;
    assert_eq!(response.error_code, 0);
    let session = response.session_id;
    assert!(session > 0, "no session created");
    assert_eq!(partitions(&response), 2);

    // Incremental, nothing changed, s1 moves past its record: nothing to say.
    let inc = |epoch: i32, topics: Vec<FetchTopic>| {
        FetchRequest::default().with_max_wait_ms(0).with_session_id(session).with_session_epoch(epoch).with_topics(topics)
    };
    let response = wire.call(12, &inc(1, vec![FetchTopic::default().with_topic(name("s1")).with_partitions(vec![fetch_partition(1)])]))?;
    assert_eq!(response.error_code, 0);
    assert_eq!(partitions(&response), 0, "an incremental fetch answered unchanged partitions: {response:?}");

    // A record arrives on s2: only s2 is answered, with its data.
    produce(&mut wire, "s2", &["b"])?;
    let response = wire.call(12, &inc(2, vec![]))?;
    assert_eq!(partitions(&response), 1);
    assert_eq!(response.responses[0].topic.0.as_str(), "s2");
    assert!(response.responses[0].partitions[0].records.as_ref().is_some_and(|r| !r.is_empty()));

    // Wrong epoch, unknown session, forgetting, closing.
    let response = wire.call(12, &inc(9, vec![]))?;
    assert_eq!(response.error_code, ResponseError::InvalidFetchSessionEpoch.code());
    let unknown = FetchRequest::default().with_session_id(session + 1000).with_session_epoch(1);
    assert_eq!(wire.call(12, &unknown)?.error_code, ResponseError::FetchSessionIdNotFound.code());
    let forget = inc(3, vec![]).with_forgotten_topics_data(vec![ForgottenTopic::default().with_topic(name("s1")).with_partitions(vec![0])]);
    assert_eq!(wire.call(12, &forget)?.error_code, 0);
    let close = FetchRequest::default().with_session_id(session).with_session_epoch(-1);
    assert_eq!(wire.call(12, &close)?.session_id, 0);
    assert_eq!(wire.call(12, &inc(4, vec![]))?.error_code, ResponseError::FetchSessionIdNotFound.code());
    Ok(())
}

/// franz-go resets a session by sending its id with epoch 0 (after any session error, and on
/// every reassignment). Kafka answers with a full fetch on a new session and closes the old
/// one; answering INVALID_FETCH_SESSION_EPOCH made franz-go reset again, for ever.
#[test]
fn a_full_fetch_naming_its_old_session_gets_a_new_one() -> TestResult {
    let kaas = Kaas::start()?;
    let mut wire = Wire::connect(&kaas.bootstrap)?;
    wire.create_topic("reset", 1)?;
    produce(&mut wire, "reset", &["a"])?;
    let fetch = |id: i32, epoch: i32| {
        FetchRequest::default().with_max_wait_ms(0).with_session_id(id).with_session_epoch(epoch).with_topics(vec![
            FetchTopic::default().with_topic(name("reset")).with_partitions(vec![fetch_partition(0)]),
        ])
    };
    let first = wire.call(12, &fetch(0, 0))?;
    assert!(first.session_id > 0);
    assert_eq!(wire.call(12, &fetch(first.session_id, 1))?.error_code, 0);

    let reset = wire.call(12, &fetch(first.session_id, 0))?;
    assert_eq!(reset.error_code, 0, "a full fetch naming its old session was refused");
    assert!(reset.session_id > 0 && reset.session_id != first.session_id);
    assert_eq!(partitions(&reset), 1, "a full fetch answers every partition");
    assert_eq!(wire.call(12, &fetch(reset.session_id, 1))?.error_code, 0);
    assert_eq!(wire.call(12, &fetch(first.session_id, 2))?.error_code, ResponseError::FetchSessionIdNotFound.code());
    Ok(())
}

/// The bytes librdkafka 2.16 (confluent-kafka 2.16.1) sends for an all-topics Metadata v13:
/// its 4-byte array-count placeholder is never shrunk, so 3 bytes follow the fields. Kafka reads
/// the fields and ignores the rest; kaas must too, and keep the connection.
#[test]
fn metadata_with_bytes_after_the_body_is_answered_as_kafka_does() -> TestResult {
    let kaas = Kaas::start()?;
    let mut wire = Wire::connect(&kaas.bootstrap)?;
    wire.create_topic("visible", 1)?;
    // Captured from confluent-kafka 2.16.1: header v2 (Metadata v13, correlation 3, client
    // "rdkafka"), then 00 00 00 00 (the placeholder: null topics, false, false, no tags) and
    // 01 00 00 (what librdkafka meant as allow_auto_topic_creation and the rest).
    let captured: &[u8] = &[
        0x00, 0x03, 0x00, 0x0d, 0x00, 0x00, 0x00, 0x03, 0x00, 0x07, b'r', b'd', b'k', b'a', b'f', b'k', b'a', 0x00, //
        0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00,
    ];
    for _ in 0..2 {
        wire.send_frame(captured)?;
        let frame = wire.read_frame()?.ok_or("the broker closed the connection instead of answering")?;
        let mut frame = bytes::Bytes::from(frame);
        let header = ResponseHeader::decode(&mut frame, ApiKey::Metadata.response_header_version(13))?;
        assert_eq!(header.correlation_id, 3);
        let response = MetadataResponse::decode(&mut frame, 13)?;
        assert_eq!(response.brokers.len(), 1);
        assert!(response.topics.iter().any(|t| t.name.as_ref().is_some_and(|n| n.0.as_str() == "visible")), "{response:?}");
    }
    Ok(())
}

#[test]
fn fetch_by_topic_id_and_long_poll_wakes_on_append() -> TestResult {
    let kaas = Kaas::start()?;
    let mut wire = Wire::connect(&kaas.bootstrap)?;
    wire.create_topic("ids", 1)?;
    let id = topic_id(&mut wire, "ids")?;
    assert!(!id.is_nil());

    // Unknown topic id.
    let unknown = FetchRequest::default().with_session_epoch(-1).with_topics(vec![
        FetchTopic::default().with_topic_id(Uuid::new_v4()).with_partitions(vec![fetch_partition(0)]),
    ]);
    let response = wire.call(13, &unknown)?;
    assert_eq!(response.responses[0].partitions[0].error_code, ResponseError::UnknownTopicId.code());

    // A long poll (10 s) on an empty partition returns as soon as a record is appended.
    let addr = kaas.bootstrap.clone();
    let producer = std::thread::spawn(move || -> TestResult {
        std::thread::sleep(Duration::from_millis(300));
        let mut wire = Wire::connect(&addr)?;
        produce(&mut wire, "ids", &["woken"])
    });
    let poll = FetchRequest::default().with_max_wait_ms(10_000).with_min_bytes(1).with_session_epoch(-1).with_topics(vec![
        FetchTopic::default().with_topic_id(id).with_partitions(vec![fetch_partition(0)]),
    ]);
    let started = Instant::now();
    let response = wire.call(13, &poll)?;
    let waited = started.elapsed();
    producer.join().map_err(|_| "producer thread panicked")??;
    let partition = &response.responses[0].partitions[0];
    assert_eq!(response.responses[0].topic_id, id);
    assert_eq!(partition.error_code, 0);
    assert_eq!(partition.high_watermark, 1);
    assert!(partition.records.as_ref().is_some_and(|r| !r.is_empty()), "long poll returned no data");
    assert!(waited < Duration::from_secs(9), "the long poll was not woken by the append ({waited:?})");
    Ok(())
}

#[test]
fn describe_cluster_offset_for_leader_epoch_and_api_versions() -> TestResult {
    let kaas = Kaas::start()?;
    let mut wire = Wire::connect(&kaas.bootstrap)?;
    let cluster = wire.call(1, &DescribeClusterRequest::default().with_endpoint_type(1))?;
    assert_eq!(cluster.error_code, 0);
    assert_eq!(cluster.brokers.len(), 1);
    assert_eq!(cluster.brokers[0].port, i32::from(kaas.port()));
    let controllers = wire.call(1, &DescribeClusterRequest::default().with_endpoint_type(2))?;
    assert_eq!(controllers.error_code, ResponseError::MismatchedEndpointType.code());

    wire.create_topic("epochs", 1)?;
    produce(&mut wire, "epochs", &["a", "b", "c"])?;
    let request = OffsetForLeaderEpochRequest::default().with_replica_id((-1).into()).with_topics(vec![
        OffsetForLeaderTopic::default().with_topic(name("epochs")).with_partitions(vec![
            OffsetForLeaderPartition::default().with_partition(0).with_leader_epoch(0).with_current_leader_epoch(-1),
        ]),
    ]);
    let response = wire.call(4, &request)?;
    let p = &response.topics[0].partitions[0];
    assert_eq!(p.error_code, 0);
    assert_eq!((p.leader_epoch, p.end_offset), (0, 3), "the current epoch ends at the log end");

    let versions = wire.call(3, &ApiVersionsRequest::default())?;
    let find = |key: ApiKey| versions.api_keys.iter().find(|k| k.api_key == key as i16).map(|k| (k.min_version, k.max_version));
    assert_eq!(find(ApiKey::Produce), Some((0, 12)), "Produce from v0 (KAFKA-18659) to transactions v2's, not v13 (topic ids)");
    assert_eq!(find(ApiKey::Fetch), Some((4, 18)));
    assert_eq!(find(ApiKey::EndTxn), Some((0, 5)), "transactions with v2's EndTxn");
    // Transactions v2 is finalized, as on a new Kafka 4 cluster: Kafka 4 producers use it.
    let finalized: Vec<_> = versions.finalized_features.iter().map(|f| (f.name.to_string(), f.min_version_level, f.max_version_level)).collect();
    assert_eq!(finalized, vec![("transaction.version".to_owned(), 2, 2), ("share.version".to_owned(), 1, 1)]);
    assert_eq!(find(ApiKey::ShareFetch), Some((1, 2)), "share groups, with KIP-1222's lock renewal");
    assert_eq!(find(ApiKey::ShareGroupHeartbeat), Some((1, 1)));
    assert!(versions.finalized_features_epoch >= 0, "an epoch a client trusts");
    assert!(versions.supported_features.is_empty(), "a range from level 0 only from v4 (KAFKA-17492)");
    let v4 = wire.call(4, &ApiVersionsRequest::default())?;
    let supported: Vec<_> = v4.supported_features.iter().map(|f| (f.name.to_string(), f.min_version, f.max_version)).collect();
    assert_eq!(supported, vec![("transaction.version".to_owned(), 0, 2), ("share.version".to_owned(), 0, 1)]);
    assert_eq!(find(ApiKey::ElectLeaders), None, "nothing unbuilt is advertised");
    Ok(())
}

/// ListConfigResources as Kafka answers it: v1 lists groups with configs, broker loggers,
/// brokers and topics (an empty type list is every type; client metrics have no configs
/// here), v0 lists client-metrics subscriptions only, and a type Kafka does not list fails the
/// request.
#[test]
fn list_config_resources_names_what_describe_configs_describes() -> TestResult {
    let kaas = Kaas::start()?;
    let mut wire = Wire::connect(&kaas.bootstrap)?;
    wire.create_topic("listed", 1)?;
    let listed = |wire: &mut Wire, version: i16, types: Vec<i8>| -> TestResult<(i16, Vec<(i8, String)>)> {
        let response = wire.call(version, &ListConfigResourcesRequest::default().with_resource_types(types))?;
        Ok((response.error_code, response.config_resources.iter().map(|r| (r.resource_type, r.resource_name.to_string())).collect()))
    };
    let every = listed(&mut wire, 1, vec![])?;
    assert_eq!(every, (0, vec![(8, "0".to_string()), (4, "0".to_string()), (2, "listed".to_string())]), "broker loggers, brokers, topics");
    assert_eq!(listed(&mut wire, 1, vec![2])?, (0, vec![(2, "listed".to_string())]));
    assert_eq!(listed(&mut wire, 1, vec![32, 16])?, (0, vec![]), "no group configs yet, no client-metrics subscriptions");
    assert_eq!(listed(&mut wire, 0, vec![])?, (0, vec![]), "v0 is ListClientMetricsResources");
    assert_eq!(listed(&mut wire, 1, vec![2, 1])?.0, ResponseError::UnsupportedVersion.code(), "type 1 (unknown) is refused");

    // kafka-configs --describe --entity-type groups also describes every group ListGroups
    // names: a group's configs are the consumer-protocol settings, as defaults.
    let group = |name: &str| {
        DescribeConfigsRequest::default().with_resources(vec![
            DescribeConfigsResource::default()
                .with_resource_type(32)
                .with_resource_name(StrBytes::from_string(name.to_string()))
                .with_configuration_keys(None),
        ])
    };
    let described = wire.call(4, &group("orders-app"))?;
    let result = &described.results[0];
    assert_eq!(result.error_code, 0);
    let entries: Vec<(String, Option<String>, i8)> =
        result.configs.iter().map(|c| (c.name.to_string(), c.value.as_ref().map(|v| v.to_string()), c.config_source)).collect();
    let defaults = vec![
        ("consumer.session.timeout.ms".to_string(), Some("45000".to_string()), 5),
        ("consumer.heartbeat.interval.ms".to_string(), Some("5000".to_string()), 5),
        ("share.auto.offset.reset".to_string(), Some("latest".to_string()), 5),
        ("share.record.lock.duration.ms".to_string(), Some("30000".to_string()), 5),
        ("share.delivery.count.limit".to_string(), Some("5".to_string()), 5),
        ("share.isolation.level".to_string(), Some("read_uncommitted".to_string()), 5),
        ("share.session.timeout.ms".to_string(), Some("45000".to_string()), 5),
        ("share.heartbeat.interval.ms".to_string(), Some("5000".to_string()), 5),
    ];
    assert_eq!(entries, defaults);
    assert_eq!(wire.call(4, &group(""))?.results[0].error_code, ResponseError::InvalidRequest.code(), "a group needs a name");

    // A group's share settings are set with IncrementalAlterConfigs (kafka-configs --alter
    // --entity-type groups): valid values only, reported as GROUP_CONFIG, listed as a group
    // with configs, and reset by DELETE.
    let alter = |ops: Vec<(&str, i8, Option<&str>)>| {
        use kafka_protocol::messages::incremental_alter_configs_request::{AlterConfigsResource, AlterableConfig};
        let configs = ops
            .into_iter()
            .map(|(name, op, value)| AlterableConfig::default().with_name(StrBytes::from_string(name.into())).with_config_operation(op).with_value(value.map(|v| StrBytes::from_string(v.into()))))
            .collect();
        kafka_protocol::messages::IncrementalAlterConfigsRequest::default()
            .with_resources(vec![AlterConfigsResource::default().with_resource_type(32).with_resource_name(StrBytes::from_static_str("orders-app")).with_configs(configs)])
    };
    let refused = wire.call(1, &alter(vec![("share.delivery.count.limit", 0, Some("50"))]))?;
    assert_eq!(refused.responses[0].error_code, ResponseError::InvalidConfig.code(), "out of Kafka's bounds");
    let refused = wire.call(1, &alter(vec![("group.initial.rebalance.delay.ms", 0, Some("0"))]))?;
    assert_eq!(refused.responses[0].error_code, ResponseError::InvalidConfig.code(), "a broker setting, not a group config");
    let set = wire.call(1, &alter(vec![
        ("share.auto.offset.reset", 0, Some("earliest")),
        ("share.record.lock.duration.ms", 0, Some("15000")),
        ("consumer.session.timeout.ms", 0, Some("50000")),
    ]))?;
    assert_eq!(set.responses[0].error_code, 0);
    let described = wire.call(4, &group("orders-app"))?;
    let set_ones: Vec<(String, String, i8)> =
        described.results[0].configs.iter().filter(|c| c.config_source == 8).map(|c| (c.name.to_string(), c.value.as_deref().unwrap_or_default().to_string(), c.config_source)).collect();
    assert_eq!(
        set_ones,
        vec![
            ("consumer.session.timeout.ms".into(), "50000".into(), 8),
            ("share.auto.offset.reset".into(), "earliest".into(), 8),
            ("share.record.lock.duration.ms".into(), "15000".into(), 8)
        ]
    );
    assert_eq!(listed(&mut wire, 1, vec![32])?, (0, vec![(32, "orders-app".to_string())]));
    // The override applies: a consumer-protocol member of the group is told its interval.
    assert_eq!(wire.call(1, &alter(vec![("consumer.heartbeat.interval.ms", 0, Some("7000"))]))?.responses[0].error_code, 0);
    let join = kafka_protocol::messages::ConsumerGroupHeartbeatRequest::default()
        .with_group_id(kafka_protocol::messages::GroupId(StrBytes::from_static_str("orders-app")))
        .with_member_id(StrBytes::from_static_str("member-1"))
        .with_member_epoch(0)
        .with_rebalance_timeout_ms(30_000)
        .with_subscribed_topic_names(Some(vec![kafka_protocol::messages::TopicName(StrBytes::from_static_str("listed"))]))
        .with_topic_partitions(Some(vec![]));
    let joined = wire.call(1, &join)?;
    assert_eq!((joined.error_code, joined.heartbeat_interval_ms), (0, 7000));
    let reset = wire.call(1, &alter(vec![("share.auto.offset.reset", 1, None), ("share.record.lock.duration.ms", 1, None), ("consumer.session.timeout.ms", 1, None), ("consumer.heartbeat.interval.ms", 1, None)]))?;
    assert_eq!(reset.responses[0].error_code, 0);
    assert_eq!(listed(&mut wire, 1, vec![32])?, (0, vec![]), "no overrides left: no configs of its own");
    Ok(())
}

/// A local broker has no peer, so WriteTxnMarkers on its listener never comes from a
/// transaction coordinator: it is refused, and a client cannot commit, abort or fence someone
/// else's transaction with it.
#[test]
fn write_txn_markers_from_a_client_is_refused_in_local_mode() -> TestResult {
    use kafka_protocol::messages::write_txn_markers_request::{WritableTxnMarker, WritableTxnMarkerTopic};
    use kafka_protocol::messages::{ProducerId, TopicName, WriteTxnMarkersRequest};

    let kaas = Kaas::start()?;
    let mut wire = Wire::connect(&kaas.bootstrap)?;
    let request = WriteTxnMarkersRequest::default().with_markers(vec![
        WritableTxnMarker::default()
            .with_producer_id(ProducerId(1))
            .with_producer_epoch(0)
            .with_transaction_result(true)
            .with_coordinator_epoch(i32::MAX)
            .with_topics(vec![
                WritableTxnMarkerTopic::default()
                    .with_name(TopicName(StrBytes::from_static_str("victim")))
                    .with_partition_indexes(vec![0, 1]),
            ]),
    ]);
    let response = wire.call(1, &request)?;
    let codes: Vec<i16> = response.markers.iter().flat_map(|m| m.topics.iter()).flat_map(|t| t.partitions.iter()).map(|p| p.error_code).collect();
    assert_eq!(codes, vec![ResponseError::ClusterAuthorizationFailed.code(); 2]);
    Ok(())
}

fn dtp_request(topics: &[&str], limit: i32, cursor: Option<(&str, i32)>) -> DescribeTopicPartitionsRequest {
    use kafka_protocol::messages::describe_topic_partitions_request::{Cursor, TopicRequest};
    DescribeTopicPartitionsRequest::default()
        .with_topics(topics.iter().map(|t| TopicRequest::default().with_name(name(t))).collect())
        .with_response_partition_limit(limit)
        .with_cursor(cursor.map(|(t, p)| Cursor::default().with_topic_name(name(t)).with_partition_index(p)))
}

/// (topic, error, partitions) per answered topic, and the next cursor.
type Page = (Vec<(String, i16, Vec<i32>)>, Option<(String, i32)>);

fn dtp_page(response: &DescribeTopicPartitionsResponse) -> Page {
    let topics = response
        .topics
        .iter()
        .map(|t| {
            let name = t.name.as_ref().map(|n| n.0.to_string()).unwrap_or_default();
            (name, t.error_code, t.partitions.iter().map(|p| p.partition_index).collect())
        })
        .collect();
    (topics, response.next_cursor.as_ref().map(|c| (c.topic_name.0.to_string(), c.partition_index)))
}

/// KIP-966 paging as Kafka's broker does it: name order, the cursor's topic resumed at its
/// partition, a topic cut at the limit ends the page, missing names answered with an error and
/// no partitions.
#[test]
fn describe_topic_partitions_pages_in_name_order_with_a_cursor() -> TestResult {
    let kaas = Kaas::start()?;
    let mut wire = Wire::connect(&kaas.bootstrap)?;
    wire.create_topic("dtp-a", 3)?;
    wire.create_topic("dtp-b", 2)?;
    let owned = |v: Vec<(&str, i16, Vec<i32>)>| v.into_iter().map(|(n, e, p)| (n.to_string(), e, p)).collect::<Vec<_>>();
    let unknown = ResponseError::UnknownTopicOrPartition.code();
    let topics = ["missing", "dtp-b", "dtp-a"];

    let first = wire.call(0, &dtp_request(&topics, 2, None))?;
    assert_eq!(dtp_page(&first), (owned(vec![("dtp-a", 0, vec![0, 1])]), Some(("dtp-a".to_string(), 2))));
    let a = &first.topics[0];
    assert_eq!(a.topic_id, topic_id(&mut wire, "dtp-a")?);
    assert!(a.partitions.iter().all(|p| p.leader_id.0 == 0 && p.replica_nodes.len() == 1), "{a:?}");

    let second = wire.call(0, &dtp_request(&topics, 2, Some(("dtp-a", 2))))?;
    assert_eq!(dtp_page(&second), (owned(vec![("dtp-a", 0, vec![2]), ("dtp-b", 0, vec![0])]), Some(("dtp-b".to_string(), 1))));
    let third = wire.call(0, &dtp_request(&topics, 2, Some(("dtp-b", 1))))?;
    assert_eq!(dtp_page(&third), (owned(vec![("dtp-b", 0, vec![1]), ("missing", unknown, vec![])]), None));

    // All topics (an empty list): only what exists; a limit that ends exactly at a topic's end
    // points the cursor at the next topic's first partition.
    let all = wire.call(0, &dtp_request(&[], 3, None))?;
    assert_eq!(dtp_page(&all), (owned(vec![("dtp-a", 0, vec![0, 1, 2])]), Some(("dtp-b".to_string(), 0))));

    // A cursor naming a topic outside the list, or a negative partition, is an invalid request.
    let invalid = ResponseError::InvalidRequest.code();
    let outside = wire.call(0, &dtp_request(&["dtp-a"], 10, Some(("dtp-b", 0))))?;
    assert_eq!(dtp_page(&outside), (owned(vec![("dtp-a", invalid, vec![])]), None));
    let negative = wire.call(0, &dtp_request(&["dtp-a"], 10, Some(("dtp-a", -1))))?;
    assert_eq!(dtp_page(&negative), (owned(vec![("dtp-a", invalid, vec![])]), None));
    let bad_name = wire.call(0, &dtp_request(&["no spaces"], 10, None))?;
    assert_eq!(dtp_page(&bad_name), (owned(vec![("no spaces", ResponseError::InvalidTopicException.code(), vec![])]), None));
    Ok(())
}

/// One log directory, the data directory, with each partition's segment bytes and the file
/// system's capacity.
#[test]
fn describe_log_dirs_reports_the_data_directory_and_partition_sizes() -> TestResult {
    use kafka_protocol::messages::describe_log_dirs_request::DescribableLogDirTopic;

    let kaas = Kaas::start()?;
    let mut wire = Wire::connect(&kaas.bootstrap)?;
    wire.create_topic("dirs", 2)?;
    produce(&mut wire, "dirs", &["a", "b", "c"])?;

    let all = wire.call(4, &DescribeLogDirsRequest::default().with_topics(None))?;
    assert_eq!(all.error_code, 0);
    assert_eq!(all.results.len(), 1);
    let dir = &all.results[0];
    assert_eq!(dir.error_code, 0);
    assert_eq!(std::path::Path::new(dir.log_dir.as_str()), kaas.data_dir());
    assert!(dir.total_bytes > 0 && dir.usable_bytes >= 0 && dir.usable_bytes <= dir.total_bytes, "{dir:?}");
    let topic = dir.topics.iter().find(|t| t.name.0.as_str() == "dirs").ok_or("no dirs topic")?;
    let sizes: Vec<(i32, i64)> = topic.partitions.iter().map(|p| (p.partition_index, p.partition_size)).collect();
    assert_eq!(sizes.len(), 2, "{sizes:?}");
    assert!(sizes.iter().any(|(i, s)| *i == 0 && *s > 0), "partition 0 holds the batch: {sizes:?}");
    assert!(sizes.iter().any(|(i, s)| *i == 1 && *s == 0), "partition 1 is empty: {sizes:?}");

    // Named partitions only; one the broker does not have is left out, as Kafka does.
    let some = wire.call(1, &DescribeLogDirsRequest::default().with_topics(Some(vec![
        DescribableLogDirTopic::default().with_topic(name("dirs")).with_partitions(vec![1, 7]),
    ])))?;
    let listed: Vec<(String, Vec<i32>)> = some.results[0]
        .topics
        .iter()
        .map(|t| (t.name.0.to_string(), t.partitions.iter().map(|p| p.partition_index).collect()))
        .collect();
    assert_eq!(listed, vec![("dirs".to_string(), vec![1])]);
    Ok(())
}

/// Client quotas over the wire: AlterClientQuotas answers each entity (an invalid one with
/// INVALID_REQUEST, the others applied), DescribeClientQuotas filters by exact, default and any
/// name, and a request_percentage quota of a client id throttles its requests (KIP-124):
/// responses carry throttle_time_ms, and another client id's do not.
#[test]
fn client_quotas_over_the_wire_and_a_request_time_quota() -> TestResult {
    use kafka_protocol::messages::alter_client_quotas_request::{EntityData, EntryData, OpData};
    use kafka_protocol::messages::describe_client_quotas_request::ComponentData;
    use kafka_protocol::messages::{AlterClientQuotasRequest, DescribeClientQuotasRequest};

    let kaas = Kaas::start()?;
    let mut wire = Wire::connect(&kaas.bootstrap)?;
    let entity = |kind: &str, name: Option<&str>| {
        EntityData::default().with_entity_type(StrBytes::from_string(kind.into())).with_entity_name(name.map(|n| StrBytes::from_string(n.into())))
    };
    let set = |entity: Vec<EntityData>, key: &str, value: f64| {
        EntryData::default().with_entity(entity).with_ops(vec![OpData::default().with_key(StrBytes::from_string(key.into())).with_value(value)])
    };
    // 0.0001 % of a thread: ten microseconds of request time over the ten-second window.
    let request = AlterClientQuotasRequest::default().with_entries(vec![
        set(vec![entity("client-id", Some("kaas-wire-test"))], "request_percentage", 0.0001),
        set(vec![entity("client-id", None)], "consumer_byte_rate", 1e9),
        set(vec![entity("user", Some("x")), entity("ip", Some("10.0.0.1"))], "connection_creation_rate", 5.0),
    ]);
    let answer = wire.call(1, &request)?;
    let codes: Vec<i16> = answer.entries.iter().map(|e| e.error_code).collect();
    assert_eq!(codes, vec![0, 0, ResponseError::InvalidRequest.code()], "{answer:?}");

    let describe = |components: Vec<ComponentData>, strict: bool| -> TestResult<Vec<String>> {
        let mut wire = Wire::connect(&kaas.bootstrap)?;
        let response = wire.call(1, &DescribeClientQuotasRequest::default().with_components(components).with_strict(strict))?;
        assert_eq!(response.error_code, 0, "{response:?}");
        let mut keys: Vec<String> =
            response.entries.unwrap_or_default().iter().flat_map(|e| e.values.iter().map(|v| format!("{}={}", v.key.as_str(), v.value))).collect();
        keys.sort();
        Ok(keys)
    };
    let component = |kind: &str, match_type: i8, name: Option<&str>| {
        ComponentData::default()
            .with_entity_type(StrBytes::from_string(kind.into()))
            .with_match_type(match_type)
            .with_match(name.map(|n| StrBytes::from_string(n.into())))
    };
    assert_eq!(describe(vec![], false)?, vec!["consumer_byte_rate=1000000000", "request_percentage=0.0001"]);
    assert_eq!(describe(vec![component("client-id", 0, Some("kaas-wire-test"))], true)?, vec!["request_percentage=0.0001"]);
    assert_eq!(describe(vec![component("client-id", 1, None)], true)?, vec!["consumer_byte_rate=1000000000"]);
    assert_eq!(describe(vec![component("user", 2, None)], false)?, Vec::<String>::new());

    // This client id is over its request time at once; a throttled answer mutes the connection,
    // so the first one is where the check stops.
    let throttled = (0..50).map(|_| wire.call(12, &MetadataRequest::default())).find(|r| r.as_ref().map_or(true, |m| m.throttle_time_ms > 0));
    assert!(matches!(throttled, Some(Ok(_))), "no Metadata answer of 50 was throttled: {throttled:?}");
    let mut other = Wire::connect_as(&kaas.bootstrap, "another-client")?;
    for _ in 0..20 {
        assert_eq!(other.call(12, &MetadataRequest::default())?.throttle_time_ms, 0, "another client id was throttled");
    }
    Ok(())
}

/// KIP-599: a client id over its controller_mutation_rate has further topic creations and
/// deletions refused with THROTTLING_QUOTA_EXCEEDED in the versions that know it (the creation
/// that takes it over passes, throttled), and only throttled in the older ones.
#[test]
fn a_controller_mutation_quota_refuses_topic_changes_over_it() -> TestResult {
    use kafka_protocol::messages::alter_client_quotas_request::{EntityData, EntryData, OpData};
    use kafka_protocol::messages::create_topics_request::CreatableTopic;
    use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
    use kafka_protocol::messages::{AlterClientQuotasRequest, CreateTopicsRequest, DeleteTopicsRequest};

    let kaas = Kaas::start()?;
    let quota = EntryData::default()
        .with_entity(vec![EntityData::default().with_entity_type(StrBytes::from_static_str("client-id")).with_entity_name(Some(StrBytes::from_static_str("mutator")))])
        .with_ops(vec![OpData::default().with_key(StrBytes::from_static_str("controller_mutation_rate")).with_value(1.0)]);
    let answer = Wire::connect(&kaas.bootstrap)?.call(1, &AlterClientQuotasRequest::default().with_entries(vec![quota]))?;
    assert_eq!(answer.entries[0].error_code, 0, "{answer:?}");

    let mut wire = Wire::connect_as(&kaas.bootstrap, "mutator")?;
    let create = |topic: &str, partitions: i32| {
        CreateTopicsRequest::default().with_timeout_ms(10_000).with_topics(vec![
            CreatableTopic::default().with_name(name(topic)).with_num_partitions(partitions).with_replication_factor(1),
        ])
    };
    // Twelve partitions at one a second: ten seconds' worth pass at once, these take it over.
    let first = wire.call(7, &create("burst", 12))?;
    assert_eq!(first.topics[0].error_code, 0, "{first:?}");
    assert!(first.throttle_time_ms > 0, "{first:?}");
    let refused = wire.call(7, &create("next", 1))?;
    assert_eq!(refused.topics[0].error_code, ResponseError::ThrottlingQuotaExceeded.code(), "{refused:?}");
    let delete = DeleteTopicsRequest::default().with_timeout_ms(10_000).with_topics(vec![DeleteTopicState::default().with_name(Some(name("burst")))]);
    let refused = wire.call(6, &delete)?;
    assert_eq!(refused.responses[0].error_code, ResponseError::ThrottlingQuotaExceeded.code(), "{refused:?}");
    // CreateTopics v5 predates the error: the topic is created and the answer throttled.
    let permissive = wire.call(5, &create("older", 1))?;
    assert_eq!(permissive.topics[0].error_code, 0, "{permissive:?}");
    assert!(permissive.throttle_time_ms > 0, "{permissive:?}");
    Ok(())
}
