//! Three brokers on one shared directory behave as one Kafka cluster (issue 5): election,
//! assignment, produce/consume through any broker, broker death, controller death, SIGTERM
//! drain — with real librdkafka clients and no acknowledged record lost.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use common::TestResult;
use common::cluster::Cluster;
use common::wire::Wire;
use kaas_broker::http::render_metrics;
use kaas_shared::assignment::Assignment;
use common::workload::{assert_no_loss, create_topic, produce, producer, read_all};
use rdkafka::admin::{AdminClient, AdminOptions};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

const SETTLE: Duration = Duration::from_secs(30);

fn leaders(a: &kaas_shared::assignment::Assignment) -> BTreeMap<i32, usize> {
    let mut l = BTreeMap::new();
    for p in a.partitions.values() {
        *l.entry(p.leader).or_default() += 1;
    }
    l
}

/// Asked on any broker: DescribeCluster names every broker, DescribeTopicPartitions the leaders
/// the assignment names, and DescribeLogDirs the partitions that broker leads, so that across
/// the brokers every partition is listed once, on its leader.
async fn every_broker_describes_the_cluster(cluster: &Cluster, a: &Assignment, topic: &str, partitions: i32) -> TestResult {
    use kafka_protocol::messages::describe_topic_partitions_request::TopicRequest;
    use kafka_protocol::messages::{DescribeClusterRequest, DescribeLogDirsRequest, DescribeTopicPartitionsRequest, TopicName};
    use kafka_protocol::protocol::StrBytes;

    let nodes: Vec<(i32, String)> = cluster.nodes.values().map(|n| (n.id, n.bootstrap.clone())).collect();
    let expected_leaders: Vec<i32> = (0..partitions).map(|i| a.partition(topic, i).map_or(-1, |p| p.leader)).collect();
    let all_ids: Vec<i32> = nodes.iter().map(|(id, _)| *id).collect();
    let topic = topic.to_string();
    tokio::task::spawn_blocking(move || -> TestResult {
        let mut hosts: BTreeMap<i32, Vec<i32>> = BTreeMap::new();
        for (id, address) in &nodes {
            let mut wire = Wire::connect(address)?;
            let described = wire.call(1, &DescribeClusterRequest::default().with_endpoint_type(1))?;
            let mut ids: Vec<i32> = described.brokers.iter().map(|b| b.broker_id.0).collect();
            ids.sort_unstable();
            assert_eq!(ids, all_ids, "DescribeCluster on broker {id}");

            let name = TopicName(StrBytes::from_string(topic.clone()));
            let request = DescribeTopicPartitionsRequest::default()
                .with_topics(vec![TopicRequest::default().with_name(name)])
                .with_response_partition_limit(100);
            let dtp = wire.call(0, &request)?;
            let leaders: Vec<i32> = dtp.topics[0].partitions.iter().map(|p| p.leader_id.0).collect();
            assert_eq!(leaders, expected_leaders, "DescribeTopicPartitions on broker {id}");

            let dirs = wire.call(4, &DescribeLogDirsRequest::default().with_topics(None))?;
            for t in dirs.results.iter().flat_map(|r| r.topics.iter()).filter(|t| t.name.0.as_str() == topic) {
                for p in &t.partitions {
                    hosts.entry(p.partition_index).or_default().push(*id);
                }
            }
        }
        let hosted: Vec<i32> = (0..partitions)
            .map(|i| match hosts.get(&i).map(Vec::as_slice) {
                Some([one]) => *one,
                _ => -1,
            })
            .collect();
        assert_eq!(hosted, expected_leaders, "DescribeLogDirs: each partition on its leader alone ({hosts:?})");
        Ok(())
    })
    .await?
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_brokers_serve_one_cluster_and_survive_broker_and_controller_loss() -> TestResult {
    let mut cluster = Cluster::start(3).await?;
    // Election: exactly one controller, epoch 1; every broker in the assignment.
    let first = cluster.wait_assignment(SETTLE, |a| a.brokers.len() == 3).await?;
    assert_eq!(first.controller_epoch, 1);
    let holder = cluster.lease.snapshot().and_then(|l| l.holder).ok_or("nobody holds the lease")?;
    assert_eq!(holder, format!("kaas-{}", first.controller_id));

    // A topic created through the Kafka API is placed evenly and taken over.
    create_topic(&cluster, "orders", 6).await?;
    let placed = cluster.wait_assignment(SETTLE, |a| a.partitions.len() == 6 && a.brokers.len() == 3).await?;
    assert!(leaders(&placed).values().all(|n| *n == 2), "{:?}", leaders(&placed));
    cluster.wait_led(SETTLE, &placed).await?;
    every_broker_describes_the_cluster(&cluster, &placed, "orders", 6).await?;
    let producer = producer(&cluster)?;
    let mut acked = vec![produce(&producer, "orders", 6, "before", 600).await?];

    // kill -9 a broker that is not the controller: its partitions move, writes go on.
    let victim = *cluster.nodes.keys().find(|id| **id != placed.controller_id).ok_or("no victim")?;
    cluster.kill(victim).await;
    let moved = cluster.wait_assignment(SETTLE, |a| a.partitions.values().all(|p| p.leader != victim) && a.partitions.len() == 6).await?;
    for (key, p) in &placed.partitions {
        let now = &moved.partitions[key];
        assert!(now.leader_epoch >= p.leader_epoch, "{key}: epoch went backwards");
        if p.leader == victim {
            assert!(now.leader_epoch > p.leader_epoch, "{key}: a moved partition must get a new epoch");
        }
    }
    cluster.wait_led(SETTLE, &moved).await?;
    acked.push(produce(&producer, "orders", 6, "after-broker-death", 600).await?);

    // kill -9 the controller: a new one wins with a higher epoch; nothing rewinds.
    let old_controller = moved.controller_id;
    cluster.kill(old_controller).await;
    let survivor = *cluster.nodes.keys().next().ok_or("no survivor")?;
    let recovered = cluster
        .wait_assignment(SETTLE, |a| a.controller_epoch > moved.controller_epoch && a.partitions.values().all(|p| p.leader == survivor))
        .await?;
    assert_eq!(recovered.controller_id, survivor);
    assert!(recovered.assignment_version > moved.assignment_version);
    cluster.wait_led(SETTLE, &recovered).await?;
    acked.push(produce(&producer, "orders", 6, "after-controller-death", 600).await?);

    assert_no_loss(&acked, &read_all(&cluster, "orders", 6)?);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_drain_moves_partitions_before_exit_and_restart_rejoins() -> TestResult {
    let mut cluster = Cluster::start(3).await?;
    cluster.wait_assignment(SETTLE, |a| a.brokers.len() == 3).await?;
    create_topic(&cluster, "drained", 6).await?;
    let placed = cluster.wait_assignment(SETTLE, |a| a.partitions.len() == 6 && a.brokers.len() == 3).await?;
    cluster.wait_led(SETTLE, &placed).await?;
    let producer = Arc::new(producer(&cluster)?);
    let mut acked = vec![produce(&producer, "drained", 6, "before", 300).await?];

    // Produce continuously while broker 2 drains.
    let writer = {
        let producer = producer.clone();
        tokio::spawn(async move { produce(&producer, "drained", 6, "during", 1500).await.map_err(|e| e.to_string()) })
    };
    let draining = 2;
    let broker = cluster.nodes.get(&draining).ok_or("no broker 2")?.broker.clone();
    kaas_broker::cluster::drain(&broker).await;
    // A drain announces itself and waits for the controller: when it returns, the controller
    // has already moved every partition away from the still-running broker. (A broker that just
    // stops would be moved only after the session timeout, long after its drain gave up.)
    let at_drain_end = cluster.assignment().ok_or("no assignment")?;
    assert!(
        at_drain_end.partitions.values().all(|p| p.leader != draining),
        "the drain returned before the controller moved the broker's partitions: {:?}",
        leaders(&at_drain_end)
    );
    assert!(broker.topics.led().is_empty(), "the drained broker still leads {:?}", broker.topics.led());
    cluster.shut_down(draining).await;
    let after = cluster.wait_assignment(SETTLE, |a| a.partitions.values().all(|p| p.leader != draining)).await?;
    cluster.wait_led(SETTLE, &after).await?;
    acked.push(writer.await??);

    // The drained broker comes back and gets work again.
    cluster.start_node(draining).await?;
    let rebalanced = cluster.wait_assignment(SETTLE, |a| a.partitions.values().any(|p| p.leader == draining)).await?;
    cluster.wait_led(SETTLE, &rebalanced).await?;
    acked.push(produce(&producer, "drained", 6, "after", 300).await?);
    assert_no_loss(&acked, &read_all(&cluster, "drained", 6)?);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_paused_zombie_leader_is_fenced_and_its_late_writes_are_never_served() -> TestResult {
    let mut cluster = Cluster::start(3).await?;
    cluster.wait_assignment(SETTLE, |a| a.brokers.len() == 3).await?;
    create_topic(&cluster, "zombie", 3).await?;
    let placed = cluster.wait_assignment(SETTLE, |a| a.partitions.len() == 3 && a.brokers.len() == 3).await?;
    cluster.wait_led(SETTLE, &placed).await?;
    let producer = producer(&cluster)?;
    let mut acked = vec![produce(&producer, "zombie", 3, "before", 300).await?];
    runtime_series_move(&cluster, placed.controller_id).await?;

    // Pause (SIGSTOP) a leader that is not the controller.
    let (key, pa) = placed.partitions.iter().find(|(_, p)| p.leader != placed.controller_id).ok_or("no candidate")?;
    let (key, zombie_id) = (key.clone(), pa.leader);
    let partition_index: i32 = key.rsplit('/').next().and_then(|p| p.parse().ok()).ok_or("bad key")?;
    let (zombie, zombie_address) = cluster.pause(zombie_id).await?;
    let stale = zombie.topics.partition("zombie", partition_index).ok_or("zombie lost its partition")?;

    // The controller moves its partitions; clients carry on against the new leaders.
    let moved = cluster.wait_assignment(SETTLE, |a| a.partitions.values().all(|p| p.leader != zombie_id)).await?;
    cluster.wait_led(SETTLE, &moved).await?;
    assert!(moved.partitions[&key].leader_epoch > pa.leader_epoch);
    acked.push(produce(&producer, "zombie", 3, "after", 300).await?);

    // While paused it still believes it leads, and by now it is fenced: a write that slipped
    // in lands in the dead epoch's segment and is never acknowledged.
    assert!(stale.is_leader(), "the zombie should still believe it leads {key}");
    assert!(zombie.cluster.as_ref().is_some_and(|c| c.view.write_fenced()), "the zombie must be fenced");
    let batch = kaas_storage::testing::BatchBuilder::new().record(None, Some(b"ZOMBIE WRITE")).build();
    if let Ok(outcome) = stale.append(&batch, kaas_storage::AppendOptions { leader_epoch: stale.leader_epoch(), now_ms: 0 }) {
        let _ = tokio::time::timeout(Duration::from_secs(2), stale.wait_durable(outcome.last_offset)).await;
    }

    // Resume (SIGCONT): it catches up with the assignment and lets go of its stale epoch,
    // writing nothing (the rebalance may hand it the partition back, at a new epoch).
    let stale_epoch = stale.leader_epoch();
    cluster.resume(zombie_id, zombie.clone(), zombie_address).await?;
    let deadline = std::time::Instant::now() + SETTLE;
    while zombie.topics.led().iter().any(|(t, _, p, e)| t == "zombie" && *p == partition_index && *e == stale_epoch) {
        assert!(std::time::Instant::now() < deadline, "the resumed zombie never let go of {key}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    acked.push(produce(&producer, "zombie", 3, "later", 300).await?);
    // The pause shows as one fencing event on the zombie, none on the others.
    let zombie_node = cluster.nodes.get(&zombie_id).ok_or("the zombie is gone")?;
    let fencings = |text: &str| metric(text, "kaas_fencing_events_total");
    let deadline = std::time::Instant::now() + SETTLE;
    while fencings(&render_metrics(&zombie_node.broker)?) != Some(1.0) {
        assert!(std::time::Instant::now() < deadline, "the zombie's fencing was not counted");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for node in cluster.nodes.values().filter(|n| n.id != zombie_id) {
        assert_eq!(fencings(&render_metrics(&node.broker)?), Some(0.0), "broker {} was never fenced", node.id);
    }
    let log = read_all(&cluster, "zombie", 3)?;
    assert!(log.values().flatten().all(|(_, v)| v != "ZOMBIE WRITE"), "a zombie write was served");
    assert_no_loss(&acked, &log);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deleting_and_recreating_a_topic_never_leaks_the_old_incarnation() -> TestResult {
    let cluster = Cluster::start(3).await?;
    cluster.wait_assignment(SETTLE, |a| a.brokers.len() == 3).await?;
    create_topic(&cluster, "phoenix", 3).await?;
    let first = cluster.wait_assignment(SETTLE, |a| a.partitions.len() == 3 && a.brokers.len() == 3).await?;
    cluster.wait_led(SETTLE, &first).await?;
    let producer = producer(&cluster)?;
    produce(&producer, "phoenix", 3, "old", 300).await?;
    let old_id = first.partitions.values().next().map(|p| p.topic_id).ok_or("no partitions")?;

    // Delete and recreate at once, while the old incarnation's leaders still hold it.
    let mut deleted = None;
    for attempt in 1..=3 {
        // An application retries a request that timed out; a retry that finds the topic gone
        // means the first one worked.
        let admin: AdminClient<DefaultClientContext> = cluster.client_config().create()?;
        match admin.delete_topics(&["phoenix"], &AdminOptions::new()).await {
            Err(rdkafka::error::KafkaError::AdminOp(rdkafka::types::RDKafkaErrorCode::OperationTimedOut)) if attempt < 3 => continue,
            Ok(r) if attempt > 1 && matches!(r[0], Err((_, rdkafka::types::RDKafkaErrorCode::UnknownTopicOrPartition))) => deleted = Some(Ok(())),
            Ok(r) => deleted = Some(r[0].clone().map(|_| ())),
            Err(e) => return Err(e.into()),
        }
        break;
    }
    assert!(matches!(deleted, Some(Ok(()))), "{deleted:?}");
    create_topic(&cluster, "phoenix", 3).await?;
    let second = cluster
        .wait_assignment(SETTLE, |a| a.partitions.len() == 3 && a.partitions.values().all(|p| p.topic_id != old_id))
        .await?;
    cluster.wait_led(SETTLE, &second).await?;
    // Every broker dropped the old incarnation (abandon) and no old state reached the new dirs.
    for node in cluster.nodes.values() {
        assert!(node.broker.topics.get("phoenix").is_some_and(|t| t.id != old_id));
    }
    for p in 0..3 {
        let dir = cluster.data().join("phoenix").join(p.to_string());
        let manifest = kaas_shared::epochs::read_manifest(&kaas_shared::fs::RealFs, &dir)?.ok_or("the new leader wrote no manifest")?;
        assert_eq!((manifest.high_watermark, manifest.log_start_offset), (0, 0), "old state in the new incarnation's manifest: {manifest:?}");
    }
    let acked = vec![produce(&producer, "phoenix", 3, "new", 30).await?];
    let log = read_all(&cluster, "phoenix", 3)?;
    assert!(log.values().flatten().all(|(_, v)| v.starts_with("new-")), "old records in the recreated topic");
    assert_no_loss(&acked, &log);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn group_offsets_survive_a_coordinator_move() -> TestResult {
    use rdkafka::consumer::CommitMode;
    let mut cluster = Cluster::start(3).await?;
    let first = cluster.wait_assignment(SETTLE, |a| a.brokers.len() == 3 && a.consumer_groups.len() == 16).await?;
    create_topic(&cluster, "grouped", 3).await?;
    let placed = cluster.wait_assignment(SETTLE, |a| a.partitions.len() == 3).await?;
    cluster.wait_led(SETTLE, &placed).await?;
    let producer = producer(&cluster)?;
    produce(&producer, "grouped", 3, "m", 300).await?;

    let group = "movers";
    let consume = |cluster: &Cluster, count: usize| -> TestResult<Vec<String>> {
        let consumer: BaseConsumer = cluster
            .client_config()
            .set("group.id", group)
            .set("enable.auto.commit", "false")
            .set("auto.offset.reset", "earliest")
            .create()?;
        consumer.subscribe(&["grouped"])?;
        let mut got = Vec::new();
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while got.len() < count {
            if std::time::Instant::now() > deadline {
                return Err(format!("consumed {} of {count}", got.len()).into());
            }
            if let Some(m) = consumer.poll(Duration::from_millis(200)) {
                let m = m?;
                got.push(String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned());
            }
        }
        consumer.commit_consumer_state(CommitMode::Sync)?;
        Ok(got)
    };
    let part_one = tokio::task::block_in_place(|| consume(&cluster, 300))?;
    assert_eq!(part_one.len(), 300);

    // Kill the broker coordinating the group's shard; the shard moves with its offsets.
    let shard = kaas_coordinator::shard_of(group);
    let coordinator = first.consumer_groups[&shard].coordinator;
    cluster.kill(coordinator).await;
    let moved = cluster
        .wait_assignment(SETTLE, |a| a.consumer_groups.get(&shard).is_some_and(|s| s.coordinator != coordinator) && a.partitions.values().all(|p| p.leader != coordinator))
        .await?;
    cluster.wait_led(SETTLE, &moved).await?;
    produce(&producer, "grouped", 3, "n", 30).await?;
    let part_two = tokio::task::block_in_place(|| consume(&cluster, 30))?;
    assert!(part_two.iter().all(|v| v.starts_with("n-")), "the group resumed before its committed offsets: {part_two:?}");
    Ok(())
}

/// Reads every partition of `topic` from the beginning at `isolation` until `count` values have
/// arrived (then a moment more, to catch extras); values sorted.
fn read_isolated(cluster: &Cluster, topic: &str, partitions: i32, isolation: &str, count: usize) -> TestResult<Vec<String>> {
    let consumer: BaseConsumer = cluster.client_config().set("group.id", "txn-readers").set("isolation.level", isolation).create()?;
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, Offset::Beginning)?;
    }
    consumer.assign(&tpl)?;
    let mut got = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut settle: Option<std::time::Instant> = None;
    while settle.is_none_or(|s| std::time::Instant::now() < s) && std::time::Instant::now() < deadline {
        if let Some(m) = consumer.poll(Duration::from_millis(100)) {
            got.push(String::from_utf8_lossy(m?.payload().unwrap_or_default()).into_owned());
        }
        if got.len() >= count && settle.is_none() {
            settle = Some(std::time::Instant::now() + Duration::from_secs(1));
        }
    }
    got.sort();
    Ok(got)
}

/// A transactional id whose shard the assignment places on broker `on`.
fn txn_id_on(a: &kaas_shared::assignment::Assignment, on: i32, stem: &str) -> TestResult<String> {
    (0..1000)
        .map(|i| format!("{stem}-{i}"))
        .find(|id| a.transactions.get(&kaas_coordinator::shard_of(id)).is_some_and(|s| s.coordinator == on))
        .ok_or_else(|| format!("no transactional id of broker {on}").into())
}

fn txn_producer(cluster: &Cluster, id: &str) -> TestResult<rdkafka::producer::BaseProducer> {
    use rdkafka::producer::Producer;
    let p: rdkafka::producer::BaseProducer = cluster.client_config().set("transactional.id", id).set("message.timeout.ms", "60000").create()?;
    p.init_transactions(Duration::from_secs(30))?;
    Ok(p)
}

/// `per_partition` values tagged `tag` into each partition of `topic`, flushed.
fn send_txn(p: &rdkafka::producer::BaseProducer, topic: &str, partitions: i32, tag: &str, per_partition: usize) -> TestResult<Vec<String>> {
    use rdkafka::producer::{BaseRecord, Producer};
    let mut sent = Vec::new();
    for partition in 0..partitions {
        for i in 0..per_partition {
            let value = format!("{tag}-{partition}-{i}");
            p.send(BaseRecord::<(), str>::to(topic).partition(partition).payload(&value)).map_err(|(e, _)| e)?;
            sent.push(value);
        }
    }
    p.flush(Duration::from_secs(30))?;
    Ok(sent)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_transaction_spanning_brokers_completes_after_its_coordinator_dies_mid_commit() -> TestResult {
    use rdkafka::producer::Producer;
    let mut cluster = Cluster::start(4).await?;
    cluster.wait_assignment(SETTLE, |a| a.brokers.len() == 4 && a.transactions.len() == 16).await?;
    create_topic(&cluster, "tx", 4).await?;
    let placed = cluster.wait_assignment(SETTLE, |a| a.partitions.len() == 4 && a.brokers.len() == 4).await?;
    cluster.wait_led(SETTLE, &placed).await?;
    // The coordinator C and a leader L of another partition; the transaction touches every
    // broker's partitions, so its markers go out over WriteTxnMarkers.
    let coordinator = placed.partitions.values().map(|p| p.leader).min().ok_or("no leaders")?;
    let id = txn_id_on(&placed, coordinator, "spanning")?;
    let lagging = placed.partitions.values().map(|p| p.leader).find(|l| *l != coordinator).ok_or("one broker leads everything")?;

    let producer = txn_producer(&cluster, &id)?;
    producer.begin_transaction()?;
    let committed = tokio::task::block_in_place(|| send_txn(&producer, "tx", 4, "c", 10))?;

    // L stops answering before the markers go out, so the commit cannot complete; then C
    // dies with the transaction in PrepareCommit. The new coordinator must finish it.
    let (paused, _) = cluster.pause(lagging).await?;
    let committer = std::thread::spawn(move || producer.commit_transaction(Duration::from_secs(90)).map(|()| producer));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    cluster.kill(coordinator).await;
    let shard = kaas_coordinator::shard_of(&id);
    let moved = cluster
        .wait_assignment(SETTLE, |a| {
            a.transactions.get(&shard).is_some_and(|s| s.coordinator != coordinator)
                && a.partitions.values().all(|p| p.leader != coordinator && p.leader != lagging)
        })
        .await?;
    cluster.wait_led(SETTLE, &moved).await?;
    let producer = tokio::task::spawn_blocking(move || committer.join()).await?.map_err(|_| "committer panicked")??;

    let read = tokio::task::block_in_place(|| read_isolated(&cluster, "tx", 4, "read_committed", committed.len()))?;
    let mut expected = committed.clone();
    expected.sort();
    assert_eq!(read, expected, "every record of the transaction is visible once, under read_committed");

    // The same producer carries on with the new coordinator: an abort stays invisible, a
    // commit is seen, across the two surviving brokers.
    producer.begin_transaction()?;
    let aborted = tokio::task::block_in_place(|| send_txn(&producer, "tx", 4, "a", 3))?;
    producer.abort_transaction(Duration::from_secs(30))?;
    producer.begin_transaction()?;
    let more = tokio::task::block_in_place(|| send_txn(&producer, "tx", 4, "d", 3))?;
    producer.commit_transaction(Duration::from_secs(30))?;
    expected.extend(more.iter().cloned());
    expected.sort();
    let read = tokio::task::block_in_place(|| read_isolated(&cluster, "tx", 4, "read_committed", expected.len()))?;
    assert_eq!(read, expected, "read_committed sees the committed transactions only");
    let all = tokio::task::block_in_place(|| read_isolated(&cluster, "tx", 4, "read_uncommitted", expected.len() + aborted.len()))?;
    assert_eq!(all.len(), expected.len() + aborted.len(), "read_uncommitted sees the aborted records too");
    drop(paused);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn offsets_sent_to_a_transaction_reach_a_group_coordinated_on_another_broker() -> TestResult {
    use rdkafka::producer::Producer;
    let cluster = Cluster::start(3).await?;
    let a = cluster.wait_assignment(SETTLE, |a| a.brokers.len() == 3 && a.transactions.len() == 16 && a.consumer_groups.len() == 16).await?;
    create_topic(&cluster, "eos-in", 1).await?;
    create_topic(&cluster, "eos-out", 3).await?;
    let placed = cluster.wait_assignment(SETTLE, |a| a.partitions.len() == 4).await?;
    cluster.wait_led(SETTLE, &placed).await?;
    let id = txn_id_on(&a, 0, "eos")?;
    let group = (0..1000)
        .map(|i| format!("eos-group-{i}"))
        .find(|g| a.consumer_groups.get(&kaas_coordinator::shard_of(g)).is_some_and(|s| s.coordinator != 0))
        .ok_or("no group coordinated elsewhere")?;

    let consumer: BaseConsumer = cluster.client_config().set("group.id", &group).set("enable.auto.commit", "false").set("isolation.level", "read_uncommitted").create()?;
    let cgm = consumer.group_metadata().ok_or("no group metadata")?;
    let committed = || -> TestResult<Offset> {
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition("eos-in", 0);
        let got = consumer.committed_offsets(tpl, Duration::from_secs(30))?;
        Ok(got.find_partition("eos-in", 0).ok_or("partition missing")?.offset())
    };
    let offsets = |o: i64| -> TestResult<TopicPartitionList> {
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset("eos-in", 0, Offset::Offset(o))?;
        Ok(tpl)
    };
    let producer = txn_producer(&cluster, &id)?;
    producer.begin_transaction()?;
    tokio::task::block_in_place(|| send_txn(&producer, "eos-out", 3, "x", 2))?;
    producer.send_offsets_to_transaction(&offsets(5)?, &cgm, Duration::from_secs(30))?;
    assert_eq!(tokio::task::block_in_place(committed)?, Offset::Invalid, "pending until the transaction commits");
    producer.commit_transaction(Duration::from_secs(30))?;
    assert_eq!(tokio::task::block_in_place(committed)?, Offset::Offset(5));

    producer.begin_transaction()?;
    tokio::task::block_in_place(|| send_txn(&producer, "eos-out", 3, "y", 2))?;
    producer.send_offsets_to_transaction(&offsets(9)?, &cgm, Duration::from_secs(30))?;
    producer.abort_transaction(Duration::from_secs(30))?;
    assert_eq!(tokio::task::block_in_place(committed)?, Offset::Offset(5), "an aborted transaction commits nothing");

    // A second producer with the same transactional id fences the first.
    let successor = txn_producer(&cluster, &id)?;
    producer.begin_transaction()?;
    let zombie = tokio::task::block_in_place(|| send_txn(&producer, "eos-out", 1, "z", 1)).and_then(|_| Ok(producer.commit_transaction(Duration::from_secs(30))?));
    assert!(zombie.is_err(), "the fenced producer cannot commit");
    successor.begin_transaction()?;
    tokio::task::block_in_place(|| send_txn(&successor, "eos-out", 3, "s", 1))?;
    successor.commit_transaction(Duration::from_secs(30))?;
    let read = tokio::task::block_in_place(|| read_isolated(&cluster, "eos-out", 3, "read_committed", 9))?;
    assert_eq!(read.iter().filter(|v| v.starts_with("x-")).count(), 6);
    assert_eq!(read.iter().filter(|v| v.starts_with("s-")).count(), 3);
    assert!(read.iter().all(|v| v.starts_with("x-") || v.starts_with("s-")), "{read:?}");
    Ok(())
}

/// An unlabelled series' value in a scrape.
fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// Every broker has heartbeat round trips and applied assignments observed; the controller
/// sees all three brokers alive and has timed its recomputes.
async fn runtime_series_move(cluster: &Cluster, controller: i32) -> TestResult {
    for node in cluster.nodes.values() {
        let deadline = std::time::Instant::now() + SETTLE;
        let text = loop {
            let text = render_metrics(&node.broker)?;
            if metric(&text, "kaas_heartbeat_round_trip_seconds_count").is_some_and(|n| n >= 1.0) {
                break text;
            }
            assert!(std::time::Instant::now() < deadline, "broker {} observed no heartbeat round trip", node.id);
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        assert!(metric(&text, "kaas_assignment_apply_seconds_count").is_some_and(|n| n >= 1.0), "broker {} applied no assignment", node.id);
        let (alive, recomputes) = (metric(&text, "kaas_alive_brokers"), metric(&text, "kaas_controller_recompute_seconds_count"));
        if node.id == controller {
            assert_eq!(alive, Some(3.0), "the controller's alive set");
            assert!(recomputes.is_some_and(|n| n >= 1.0), "the controller timed no recompute");
        } else {
            assert_eq!(alive, Some(0.0), "broker {} is not the controller", node.id);
            assert_eq!(recomputes, Some(0.0), "broker {} recomputed without the Lease", node.id);
        }
    }
    Ok(())
}

/// Transactions v2 across brokers, on the wire as a Kafka 4 producer speaks it: the partition's
/// leader adds it to a transaction coordinated on another broker (AddPartitionsToTxn from the
/// leader), the group's coordinator adds the group (AddOffsetsToTxn on the client's behalf),
/// and EndTxn v5's bumped epoch fences a late write at the leader.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn transactions_v2_add_partitions_and_groups_on_other_brokers() -> TestResult {
    use kafka_protocol::ResponseError as E;
    use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
    use kafka_protocol::messages::offset_fetch_request::{OffsetFetchRequestGroup, OffsetFetchRequestTopics};
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    use kafka_protocol::messages::txn_offset_commit_request::{TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic};
    use kafka_protocol::messages::{
        EndTxnRequest, GroupId, InitProducerIdRequest, ListOffsetsRequest, OffsetFetchRequest, ProduceRequest, ProducerId, TopicName,
        TransactionalId, TxnOffsetCommitRequest,
    };
    use kafka_protocol::protocol::StrBytes;

    let cluster = Cluster::start(3).await?;
    let a = cluster.wait_assignment(SETTLE, |a| a.brokers.len() == 3 && a.transactions.len() == 16 && a.consumer_groups.len() == 16).await?;
    create_topic(&cluster, "tv2", 3).await?;
    let placed = cluster.wait_assignment(SETTLE, |a| a.partitions.len() == 3).await?;
    cluster.wait_led(SETTLE, &placed).await?;
    let id = txn_id_on(&a, 0, "tv2")?;
    let (partition, leader) = (0..3)
        .find_map(|i| placed.partition("tv2", i).filter(|p| p.leader != 0).map(|p| (i, p.leader)))
        .ok_or("broker 0 leads every partition")?;
    let (group, group_coordinator) = (0..1000)
        .map(|i| format!("tv2-group-{i}"))
        .find_map(|g| {
            let on = a.consumer_groups.get(&kaas_coordinator::shard_of(&g)).map(|s| s.coordinator).filter(|c| *c != 0)?;
            Some((g, on))
        })
        .ok_or("no group coordinated elsewhere")?;
    let address = |node: i32| cluster.nodes.get(&node).map(|n| n.bootstrap.clone()).ok_or(format!("no broker {node}"));
    let (coordinator_at, leader_at, group_at) = (address(0)?, address(leader)?, address(group_coordinator)?);

    tokio::task::spawn_blocking(move || -> TestResult {
        let s = |v: &str| StrBytes::from_string(v.to_owned());
        let mut coordinator = Wire::connect(&coordinator_at)?;
        let mut leader = Wire::connect(&leader_at)?;
        let mut groups = Wire::connect(&group_at)?;
        let init = coordinator.call(4, &InitProducerIdRequest::default().with_transactional_id(Some(TransactionalId(s(&id)))).with_transaction_timeout_ms(60_000))?;
        assert_eq!(init.error_code, 0);
        let (pid, epoch) = (init.producer_id.0, init.producer_epoch);
        let produce = |wire: &mut Wire, epoch: i16, sequence: i32| -> TestResult<i16> {
            let request = ProduceRequest::default().with_transactional_id(Some(TransactionalId(s(&id)))).with_acks(-1).with_timeout_ms(10_000).with_topic_data(vec![
                TopicProduceData::default().with_name(TopicName(s("tv2"))).with_partition_data(vec![
                    PartitionProduceData::default().with_index(partition).with_records(Some(common::wire::txn_batch(pid, epoch, sequence, &["v"])?)),
                ]),
            ]);
            Ok(wire.call(12, &request)?.responses[0].partition_responses[0].error_code)
        };
        assert_eq!(produce(&mut leader, epoch, 0)?, 0, "the leader added the partition at the coordinator");
        let commit = TxnOffsetCommitRequest::default()
            .with_transactional_id(TransactionalId(s(&id)))
            .with_group_id(GroupId(s(&group)))
            .with_producer_id(ProducerId(pid))
            .with_producer_epoch(epoch)
            .with_generation_id(-1)
            .with_topics(vec![TxnOffsetCommitRequestTopic::default().with_name(TopicName(s("tv2"))).with_partitions(vec![
                TxnOffsetCommitRequestPartition::default().with_partition_index(partition).with_committed_offset(3),
            ])]);
        assert_eq!(groups.call(5, &commit)?.topics[0].partitions[0].error_code, 0, "the group coordinator added the group");
        let end = EndTxnRequest::default().with_transactional_id(TransactionalId(s(&id))).with_producer_id(ProducerId(pid)).with_producer_epoch(epoch).with_committed(true);
        let ended = coordinator.call(5, &end)?;
        assert_eq!((ended.error_code, ended.producer_id.0, ended.producer_epoch), (0, pid, epoch + 1));

        let stable = ListOffsetsRequest::default().with_replica_id((-1).into()).with_isolation_level(1).with_topics(vec![
            ListOffsetsTopic::default().with_name(TopicName(s("tv2"))).with_partitions(vec![ListOffsetsPartition::default().with_partition_index(partition).with_timestamp(-1)]),
        ]);
        assert_eq!(leader.call(5, &stable)?.topics[0].partitions[0].offset, 2, "the record and its marker, committed");
        let fetch = OffsetFetchRequest::default().with_require_stable(true).with_groups(vec![OffsetFetchRequestGroup::default()
            .with_group_id(GroupId(s(&group)))
            .with_topics(Some(vec![OffsetFetchRequestTopics::default().with_name(TopicName(s("tv2"))).with_partition_indexes(vec![partition])]))]);
        assert_eq!(groups.call(8, &fetch)?.groups[0].topics[0].partitions[0].committed_offset, 3, "the offsets committed with it");
        assert_eq!(produce(&mut leader, epoch, 1)?, E::InvalidProducerEpoch.code(), "a late write of the ended transaction");
        assert_eq!(produce(&mut leader, epoch + 1, 0)?, 0, "the next transaction at the bumped epoch");
        Ok(())
    })
    .await?
}

/// Share groups across brokers (KIP-932): the partition's leader hands records out and keeps
/// their state, the group's coordinator (another broker) keeps membership; when the leader
/// dies, the next one loads the state from the volume: acknowledged records stay done, those
/// the dead leader had handed out go out again. Resetting and deleting the group at its
/// coordinator reach the partition's leader.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn share_group_state_survives_the_partition_leaders_death() -> TestResult {
    use common::share::{ACCEPT, acknowledge, acquired, heartbeat, produce, s, set_group_configs, share_fetch, share_offsets, topic_id};
    use kafka_protocol::messages::alter_share_group_offsets_request::{AlterShareGroupOffsetsRequestPartition, AlterShareGroupOffsetsRequestTopic};
    use kafka_protocol::messages::{AlterShareGroupOffsetsRequest, DeleteGroupsRequest, GroupId, ShareGroupDescribeRequest, TopicName};

    let mut cluster = Cluster::start(3).await?;
    let a = cluster.wait_assignment(SETTLE, |a| a.brokers.len() == 3 && a.consumer_groups.len() == 16).await?;
    create_topic(&cluster, "shq", 1).await?;
    let placed = cluster.wait_assignment(SETTLE, |a| a.partitions.len() == 1).await?;
    cluster.wait_led(SETTLE, &placed).await?;
    let leader = placed.partition("shq", 0).map(|p| p.leader).ok_or("shq/0 is not placed")?;
    // A group coordinated on a broker that survives and does not lead the partition.
    let (group, coordinator) = (0..1000)
        .map(|i| format!("shq-group-{i}"))
        .find_map(|g| Some((g.clone(), a.consumer_groups.get(&kaas_coordinator::shard_of(&g)).map(|s| s.coordinator).filter(|c| *c != leader)?)))
        .ok_or("no group coordinated away from the leader")?;
    let address = |cluster: &Cluster, node: i32| cluster.nodes.get(&node).map(|n| n.bootstrap.clone()).ok_or(format!("no broker {node}"));
    let (leader_at, coordinator_at) = (address(&cluster, leader)?, address(&cluster, coordinator)?);
    let g = group.clone();
    let id = tokio::task::spawn_blocking(move || -> TestResult<uuid::Uuid> {
        let mut at_leader = Wire::connect(&leader_at)?;
        let mut at_coordinator = Wire::connect(&coordinator_at)?;
        let id = topic_id(&mut at_leader, "shq")?;
        // Group configs are the controller's file: set through any broker.
        set_group_configs(&mut at_coordinator, &g, &[("share.auto.offset.reset", "earliest")])?;
        produce(&mut at_leader, "shq", &["0", "1", "2", "3", "4", "5"])?;
        let (error, _, assigned) = heartbeat(&mut at_coordinator, &g, "m1", 0, Some("shq"), id)?;
        assert_eq!((error, assigned), (0, Some(vec![0])));
        let mut got = Vec::new();
        let mut epoch = 0;
        // The group config reaches the leader within its one-second refresh.
        assert!(common::wait_for(Duration::from_secs(10), || {
            let fetched = share_fetch(&mut at_leader, &g, "m1", epoch, id, 100, vec![]);
            epoch += 1;
            got = fetched.as_ref().map(acquired).unwrap_or_default();
            !got.is_empty()
        }));
        assert_eq!(got, vec![(0, 5, 1)]);
        assert_eq!(acknowledge(&mut at_leader, &g, "m1", epoch, id, &[(0, 2, ACCEPT)])?, (0, vec![0]));
        Ok(id)
    })
    .await??;

    cluster.kill(leader).await;
    let moved = cluster.wait_assignment(SETTLE, |a| a.partition("shq", 0).is_some_and(|p| p.leader != leader)).await?;
    cluster.wait_led(SETTLE, &moved).await?;
    let new_leader = moved.partition("shq", 0).map(|p| p.leader).ok_or("shq/0 is not placed")?;
    let (leader_at, coordinator_at) = (address(&cluster, new_leader)?, address(&cluster, coordinator)?);
    tokio::task::spawn_blocking(move || -> TestResult {
        let mut at_leader = Wire::connect(&leader_at)?;
        let mut at_coordinator = Wire::connect(&coordinator_at)?;
        let (error, _, _) = heartbeat(&mut at_coordinator, &group, "m2", 0, Some("shq"), id)?;
        assert_eq!(error, 0);
        let again = acquired(&share_fetch(&mut at_leader, &group, "m2", 0, id, 100, vec![])?);
        assert_eq!(again.iter().map(|a| (a.0, a.1)).collect::<Vec<_>>(), vec![(3, 5)], "acknowledged records stay done");
        assert_eq!(share_offsets(&mut at_coordinator, &group, "shq")?, (3, 3), "the coordinator asks the leader: 3-5 are owed");
        // Empty the group, then reset it at its coordinator: the leader moves the start.
        for member in ["m1", "m2"] {
            assert_eq!(heartbeat(&mut at_coordinator, &group, member, -1, None, id)?.0, 0);
        }
        let described = at_coordinator.call(1, &ShareGroupDescribeRequest::default().with_group_ids(vec![GroupId(s(&group))]))?;
        assert_eq!(described.groups[0].group_state.as_str(), "Empty");
        let alter = AlterShareGroupOffsetsRequest::default().with_group_id(GroupId(s(&group))).with_topics(vec![
            AlterShareGroupOffsetsRequestTopic::default()
                .with_topic_name(TopicName(s("shq")))
                .with_partitions(vec![AlterShareGroupOffsetsRequestPartition::default().with_partition_index(0).with_start_offset(1)]),
        ]);
        let altered = at_coordinator.call(0, &alter)?;
        assert_eq!((altered.error_code, altered.responses[0].partitions[0].error_code), (0, 0));
        assert_eq!(share_offsets(&mut at_coordinator, &group, "shq")?, (1, 5));
        heartbeat(&mut at_coordinator, &group, "m3", 0, Some("shq"), id)?;
        assert_eq!(acquired(&share_fetch(&mut at_leader, &group, "m3", 0, id, 100, vec![])?), vec![(1, 5, 1)], "everything from the new start, afresh");
        heartbeat(&mut at_coordinator, &group, "m3", -1, None, id)?;
        let deleted = at_coordinator.call(2, &DeleteGroupsRequest::default().with_groups_names(vec![GroupId(s(&group))]))?;
        assert_eq!(deleted.results[0].error_code, 0);
        // The leader forgot the group's state: a new group of that name starts afresh.
        heartbeat(&mut at_coordinator, &group, "m4", 0, Some("shq"), id)?;
        assert_eq!(share_offsets(&mut at_coordinator, &group, "shq")?, (-1, -1), "no state left at the leader");
        Ok(())
    })
    .await?
}
