//! Topic administration through the Kafka admin API (librdkafka's AdminClient).

mod common;

use std::time::Duration;

use common::{Kaas, TestResult};
use rdkafka::admin::{AdminOptions, AlterConfig, NewPartitions, NewTopic, ResourceSpecifier, TopicReplication};
use rdkafka::config::FromClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::types::RDKafkaErrorCode as Code;

fn metadata_partitions(kaas: &Kaas, topic: &str) -> TestResult<Option<usize>> {
    let consumer = BaseConsumer::from_config(&kaas.config())?;
    let md = consumer.fetch_metadata(Some(topic), Duration::from_secs(10))?;
    Ok(md.topics().iter().find(|t| t.name() == topic && t.error().is_none()).map(|t| t.partitions().len()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_describe_alter_grow_and_delete() -> TestResult {
    let kaas = Kaas::start_with(&["--auto-create-topics", "false"])?;
    let admin = kaas.admin()?;
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));

    // validate-only creates nothing
    let t = NewTopic::new("orders", 3, TopicReplication::Fixed(1)).set("retention.ms", "60000");
    let validate = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))).validate_only(true);
    let r = admin.create_topics([&t], &validate).await?;
    assert!(r[0].is_ok(), "{r:?}");
    assert_eq!(metadata_partitions(&kaas, "orders")?, None);

    let r = admin.create_topics([&t], &opts).await?;
    assert!(r[0].is_ok(), "{r:?}");
    assert_eq!(metadata_partitions(&kaas, "orders")?, Some(3));

    // a second create fails with TOPIC_ALREADY_EXISTS
    let r = admin.create_topics([&t], &opts).await?;
    assert!(matches!(r[0], Err((_, Code::TopicAlreadyExists))), "{r:?}");

    // bad names, bad configs, bad counts
    let bad = [
        NewTopic::new("bad name", 1, TopicReplication::Fixed(1)),
        NewTopic::new("ok", 1, TopicReplication::Fixed(1)).set("retention.ms", "forever"),
        NewTopic::new("ok2", 1, TopicReplication::Fixed(1)).set("no.such.config", "1"),
        NewTopic::new("ok3", 0, TopicReplication::Fixed(1)),
        NewTopic::new("ok4", 1, TopicReplication::Fixed(3)),
    ];
    let r = admin.create_topics(bad.iter(), &opts).await?;
    assert!(matches!(r[0], Err((_, Code::InvalidTopic))), "{:?}", r[0]);
    assert!(matches!(r[1], Err((_, Code::InvalidConfig))), "{:?}", r[1]);
    assert!(matches!(r[2], Err((_, Code::InvalidConfig))), "{:?}", r[2]);
    assert!(matches!(r[3], Err((_, Code::InvalidPartitions))), "{:?}", r[3]);
    assert!(matches!(r[4], Err((_, Code::InvalidReplicationFactor))), "{:?}", r[4]);

    // describe: the set config is DYNAMIC_TOPIC_CONFIG, others are defaults
    let described = admin.describe_configs([&ResourceSpecifier::Topic("orders")], &opts).await?;
    let resource = described.into_iter().next().ok_or("no result")?.map_err(|e| format!("{e:?}"))?;
    let retention = resource.get("retention.ms").ok_or("retention.ms missing")?;
    assert_eq!(retention.value.as_deref(), Some("60000"));
    assert!(!retention.is_default);
    let segment = resource.get("segment.bytes").ok_or("segment.bytes missing")?;
    assert_eq!(segment.value.as_deref(), Some("1073741824"));
    assert!(segment.is_default);

    // alter (replace all) then describe again
    let alter = AlterConfig::new(ResourceSpecifier::Topic("orders")).set("retention.ms", "120000").set("cleanup.policy", "delete");
    let r = admin.alter_configs([&alter], &opts).await?;
    assert!(r[0].is_ok(), "{r:?}");
    let described = admin.describe_configs([&ResourceSpecifier::Topic("orders")], &opts).await?;
    let resource = described.into_iter().next().ok_or("no result")?.map_err(|e| format!("{e:?}"))?;
    assert_eq!(resource.get("retention.ms").and_then(|e| e.value.as_deref()), Some("120000"));
    let bad_alter = AlterConfig::new(ResourceSpecifier::Topic("orders")).set("retention.ms", "-9");
    // NB: rust-rdkafka reports every AlterConfigs resource as Ok, so the refusal is checked by
    // describing the topic again.
    admin.alter_configs([&bad_alter], &opts).await?;
    let described = admin.describe_configs([&ResourceSpecifier::Topic("orders")], &opts).await?;
    let resource = described.into_iter().next().ok_or("no result")?.map_err(|e| format!("{e:?}"))?;
    assert_eq!(resource.get("retention.ms").and_then(|e| e.value.as_deref()), Some("120000"), "an invalid value was applied");

    // broker configs are readable
    let described = admin.describe_configs([&ResourceSpecifier::Broker(0)], &opts).await?;
    let resource = described.into_iter().next().ok_or("no result")?.map_err(|e| format!("{e:?}"))?;
    assert_eq!(resource.get("auto.create.topics.enable").and_then(|e| e.value.as_deref()), Some("false"));
    // Local mode gives a newcomer what Kafka's shipped config/server.properties does: a first
    // consumer joins its group at once.
    assert_eq!(resource.get("group.initial.rebalance.delay.ms").and_then(|e| e.value.as_deref()), Some("0"));

    // grow partitions; shrinking is refused
    let r = admin.create_partitions([&NewPartitions::new("orders", 5)], &opts).await?;
    assert!(r[0].is_ok(), "{r:?}");
    assert_eq!(metadata_partitions(&kaas, "orders")?, Some(5));
    let r = admin.create_partitions([&NewPartitions::new("orders", 2)], &opts).await?;
    assert!(matches!(r[0], Err((_, Code::InvalidPartitions))), "{r:?}");

    // delete; deleting again is UNKNOWN_TOPIC_OR_PARTITION
    let r = admin.delete_topics(&["orders"], &opts).await?;
    assert!(r[0].is_ok(), "{r:?}");
    assert_eq!(metadata_partitions(&kaas, "orders")?, None);
    let r = admin.delete_topics(&["orders"], &opts).await?;
    assert!(matches!(r[0], Err((_, Code::UnknownTopicOrPartition))), "{r:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topics_and_configs_survive_a_restart_and_deleted_topics_come_back_empty() -> TestResult {
    let mut kaas = Kaas::start_with(&["--auto-create-topics", "false"])?;
    kaas.create_topic("keep", 2, &[("retention.ms", "999999")]).await?;
    kaas.create_topic("gone", 1, &[]).await?;
    let producer = kaas.producer(&[])?;
    producer
        .send(rdkafka::producer::FutureRecord::<(), str>::to("gone").payload("old incarnation"), Duration::from_secs(30))
        .await
        .map_err(|(e, _)| e)?;
    let admin = kaas.admin()?;
    let r = admin.delete_topics(&["gone"], &AdminOptions::new()).await?;
    assert!(r[0].is_ok());
    kaas.create_topic("gone", 1, &[]).await?;

    kaas.stop()?;
    kaas.restart()?;
    assert_eq!(metadata_partitions(&kaas, "keep")?, Some(2));
    let admin = kaas.admin()?;
    let described = admin.describe_configs([&ResourceSpecifier::Topic("keep")], &AdminOptions::new()).await?;
    let resource = described.into_iter().next().ok_or("no result")?.map_err(|e| format!("{e:?}"))?;
    assert_eq!(resource.get("retention.ms").and_then(|e| e.value.as_deref()), Some("999999"));

    // The recreated topic starts empty: nothing of the deleted incarnation reappears.
    let consumer = BaseConsumer::from_config(&kaas.config())?;
    let (low, high) = consumer.fetch_watermarks("gone", 0, Duration::from_secs(10))?;
    assert_eq!((low, high), (0, 0));
    // And no reclaimed directory is left behind.
    let leftovers: Vec<_> = std::fs::read_dir(kaas.data_dir())?
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    Ok(())
}

/// One Metadata request naming many unknown topics auto-creates only the budget's worth; the
/// rest are answered LEADER_NOT_AVAILABLE (retriable), and a topic that already exists is
/// served whatever the budget.
#[test]
fn auto_creation_is_rate_limited() -> TestResult {
    use common::wire::Wire;
    use kafka_protocol::ResponseError;
    use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
    use kafka_protocol::messages::{MetadataRequest, TopicName};
    use kafka_protocol::protocol::StrBytes;

    let kaas = Kaas::start_with(&["--auto-create-topics-per-minute", "3"])?;
    let mut wire = Wire::connect(&kaas.bootstrap)?;
    let names: Vec<String> = (0..8).map(|i| format!("auto-{i}")).collect();
    let request = MetadataRequest::default().with_allow_auto_topic_creation(true).with_topics(Some(
        names
            .iter()
            .map(|n| MetadataRequestTopic::default().with_name(Some(TopicName(StrBytes::from_string(n.clone())))))
            .collect(),
    ));
    let response = wire.call(12, &request)?;
    let created = response.topics.iter().filter(|t| t.error_code == 0).count();
    let deferred = response.topics.iter().filter(|t| t.error_code == ResponseError::LeaderNotAvailable.code()).count();
    assert_eq!((created, deferred), (3, 5), "{:?}", response.topics.iter().map(|t| t.error_code).collect::<Vec<_>>());
    // The created ones are still served; the budget stays spent.
    let again = wire.call(12, &request)?;
    assert_eq!(again.topics.iter().filter(|t| t.error_code == 0).count(), 3);
    Ok(())
}

/// The broker's defaults of the compaction configs (`log.cleanup.policy`, `log.cleaner.*`) are
/// what a topic that sets nothing reports and runs with; a topic whose minimum compaction lag
/// would exceed the maximum is refused (INVALID_CONFIG), as is a broker started that way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_compaction_defaults_reach_topics_and_conflicting_lags_are_refused() -> TestResult {
    let kaas = Kaas::start_with(&[
        "--auto-create-topics",
        "false",
        "--log-cleanup-policy",
        "compact",
        "--log-cleaner-max-compaction-lag-ms",
        "60000",
        "--log-cleaner-delete-retention-ms",
        "5000",
    ])?;
    let admin = kaas.admin()?;
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    let r = admin.create_topics([&NewTopic::new("table", 1, TopicReplication::Fixed(1))], &opts).await?;
    assert!(r[0].is_ok(), "{r:?}");
    let described = admin.describe_configs([&ResourceSpecifier::Topic("table")], &opts).await?;
    let resource = described.into_iter().next().ok_or("no result")?.map_err(|e| format!("{e:?}"))?;
    for (name, value) in [("cleanup.policy", "compact"), ("max.compaction.lag.ms", "60000"), ("delete.retention.ms", "5000")] {
        let entry = resource.get(name).ok_or(format!("{name} missing"))?;
        assert_eq!((entry.value.as_deref(), entry.is_default), (Some(value), true), "{name}");
    }

    let conflicting = [
        NewTopic::new("lagging", 1, TopicReplication::Fixed(1)).set("min.compaction.lag.ms", "60001"),
        NewTopic::new("lagging2", 1, TopicReplication::Fixed(1))
            .set("min.compaction.lag.ms", "10")
            .set("max.compaction.lag.ms", "9"),
        NewTopic::new("fine", 1, TopicReplication::Fixed(1)).set("min.compaction.lag.ms", "60000"),
    ];
    let r = admin.create_topics(conflicting.iter(), &opts).await?;
    assert!(matches!(r[0], Err((_, Code::InvalidConfig))), "{:?}", r[0]);
    assert!(matches!(r[1], Err((_, Code::InvalidConfig))), "{:?}", r[1]);
    assert!(r[2].is_ok(), "{:?}", r[2]);

    let refused = std::process::Command::new(env!("CARGO_BIN_EXE_kaas"))
        .args(["--in-memory", "--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0"])
        .args(["--log-cleaner-min-compaction-lag-ms", "10", "--log-cleaner-max-compaction-lag-ms", "5"])
        .output()?;
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success() && stderr.contains("min.compaction.lag.ms (10) > max.compaction.lag.ms (5)"), "{stderr}");
    Ok(())
}
