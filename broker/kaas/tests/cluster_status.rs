//! What the heartbeat carries besides liveness (issue 20): each broker's traffic, the log ends
//! and sizes of the partitions it leads and its groups go to the controller, which publishes
//! them for `kubectl get`; and the controller hands high watermarks back, so a group's
//! coordinator reports lag for partitions other brokers lead. Three in-process brokers, real
//! librdkafka clients.

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::TestResult;
use common::cluster::Cluster;
use common::workload::{create_topic, produce, producer};
use futures::future::BoxFuture;
use kaas_broker::http::render_metrics;
use kaas_controller::status::{ClusterView, Pacing, StatusPublisher, StatusSink, TopicView};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

const SETTLE: Duration = Duration::from_secs(30);

/// What a publication round wrote.
#[derive(Debug, Default)]
struct Recorded {
    clusters: Mutex<Vec<ClusterView>>,
    topics: Mutex<BTreeMap<String, TopicView>>,
}

impl StatusSink for Recorded {
    fn cluster<'a>(&'a self, view: &'a ClusterView) -> BoxFuture<'a, kaas_controller::Result<()>> {
        self.clusters.lock().expect("not poisoned").push(view.clone());
        Box::pin(async { Ok(()) })
    }
    fn topic<'a>(&'a self, topic: &'a str, view: &'a TopicView) -> BoxFuture<'a, kaas_controller::Result<()>> {
        self.topics.lock().expect("not poisoned").insert(topic.to_string(), *view);
        Box::pin(async { Ok(()) })
    }
}

/// A labelled series' value in a scrape (`labels` as they print, in order).
fn series(text: &str, name: &str, labels: &str) -> Option<f64> {
    let prefix = format!("{name}{{{labels}}} ");
    text.lines().find_map(|l| l.strip_prefix(&prefix)?.trim().parse().ok())
}

/// Polls `check` every 200 ms until it returns `Some`, for at most `SETTLE`.
async fn eventually<T>(what: &str, mut check: impl FnMut() -> TestResult<Option<T>>) -> TestResult<T> {
    let deadline = Instant::now() + SETTLE;
    loop {
        if let Some(found) = check()? {
            return Ok(found);
        }
        if Instant::now() > deadline {
            return Err(format!("timed out waiting for {what}").into());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Commits `offset` on each partition of `lagging` for `group`, as a real client does.
fn commit(cluster: &Cluster, group: &str, offset: i64) -> TestResult {
    tokio::task::block_in_place(|| {
        let consumer: BaseConsumer = cluster.client_config().set("group.id", group).set("enable.auto.commit", "false").create()?;
        let mut offsets = TopicPartitionList::new();
        for p in 0..3 {
            offsets.add_partition_offset("lagging", p, Offset::Offset(offset))?;
        }
        consumer.commit(&offsets, CommitMode::Sync)?;
        Ok(())
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_heartbeat_carries_partition_stats_and_hands_high_watermarks_back_for_lag() -> TestResult {
    let cluster = Cluster::start(3).await?;
    cluster.wait_assignment(SETTLE, |a| a.brokers.len() == 3 && a.consumer_groups.len() == 16).await?;
    create_topic(&cluster, "lagging", 3).await?;
    let placed = cluster.wait_assignment(SETTLE, |a| a.partitions.len() == 3).await?;
    cluster.wait_led(SETTLE, &placed).await?;
    let leaders: Vec<i32> = (0..3).map(|p| placed.partition("lagging", p).map_or(-1, |a| a.leader)).collect();
    assert_eq!(leaders.iter().collect::<std::collections::BTreeSet<_>>().len(), 3, "one partition per broker: {leaders:?}");

    // 100 records a partition; the group commits 40 of each.
    let producer = producer(&cluster)?;
    produce(&producer, "lagging", 3, "m", 300).await?;
    let group = "lag-watchers";
    let coordinator = placed.consumer_groups[&kaas_coordinator::shard_of(group)].coordinator;
    commit(&cluster, group, 40)?;

    // The coordinator reports the lag of every partition, not only the one it leads, and a lag
    // in time for each (estimated for the others).
    let node = &cluster.nodes[&coordinator];
    let per_partition = |text: &str, name: &str| -> Vec<Option<f64>> {
        (0..3).map(|p| series(text, name, &format!("group=\"{group}\",topic=\"lagging\",partition=\"{p}\""))).collect()
    };
    eventually("the coordinator's lag for every partition", || {
        let text = render_metrics(&node.broker)?;
        let sum = series(&text, "kaas_consumer_group_lag_sum", &format!("group=\"{group}\",topic=\"lagging\""));
        let seconds = per_partition(&text, "kaas_consumer_group_lag_seconds");
        Ok((per_partition(&text, "kaas_consumer_group_lag") == [Some(60.0); 3] && sum == Some(180.0) && seconds.iter().all(Option::is_some))
            .then_some(()))
    })
    .await?;

    // The controller's hub has every broker's report: a publication round shows them.
    let controller = cluster.nodes.values().find_map(|n| {
        let hub = n.runtime.hub();
        matches!(hub.role(), kaas_controller::heartbeat_server::Role::Controller { .. }).then_some(hub)
    });
    let hub = controller.ok_or("no controller")?;
    let sink = Arc::new(Recorded::default());
    let pacing = Pacing { round: Duration::from_secs(1), topic_min_interval: Duration::ZERO, topic_writes_per_round: 100 };
    let mut publisher = StatusPublisher::new(hub, sink.clone(), pacing, Duration::from_secs(60));
    let started = Instant::now();
    publisher.round(started).await;
    produce(&producer, "lagging", 3, "n", 300).await?;
    // Rounds a second apart (by the publisher's clock) until both batches and the group show.
    let deadline = Instant::now() + SETTLE;
    let mut round = 0;
    let (view, topic) = loop {
        round += 1;
        publisher.round(started + Duration::from_secs(round)).await;
        let view = sink.clusters.lock().expect("not poisoned").last().cloned();
        let topic = sink.topics.lock().expect("not poisoned").get("lagging").copied();
        if let (Some(v), Some(t)) = (view, topic)
            && t.log_end_offset == 600
            && v.consumer_groups.iter().any(|g| g.summary.group_id == group && g.summary.lag == 480)
        {
            break (v, t);
        }
        assert!(Instant::now() < deadline, "no publication with both batches and the group's lag: {:?}", sink);
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let peak = sink.clusters.lock().expect("not poisoned").iter().map(|v| v.bytes_in_per_second).max();
    assert!(peak.is_some_and(|b| b > 0), "the second batch showed as bytes in per second");
    assert_eq!(topic.partitions_reported, 3);
    assert!(topic.size_bytes > 600 * 3, "600 records take more than {} bytes", topic.size_bytes);
    assert_eq!(view.brokers.iter().map(|b| b.id).collect::<Vec<_>>(), [0, 1, 2]);
    assert_eq!(view.brokers.iter().map(|b| b.partitions_led).sum::<u32>(), 3);
    let summary = view.consumer_groups.iter().find(|g| g.summary.group_id == group).ok_or("the group is listed")?;
    assert_eq!(summary.coordinator, coordinator);
    assert_eq!(view.consumer_group_count, 1);

    // Caught up: lag and lag in time return to 0 on every partition.
    commit(&cluster, group, 200)?;
    eventually("lag back to 0 everywhere", || {
        let text = render_metrics(&node.broker)?;
        let zero = [Some(0.0); 3];
        Ok((per_partition(&text, "kaas_consumer_group_lag") == zero && per_partition(&text, "kaas_consumer_group_lag_seconds") == zero).then_some(()))
    })
    .await?;
    Ok(())
}
