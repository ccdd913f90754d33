//! What the controller publishes for `kubectl get kafkaclusters` and `kubectl get kafkatopics`:
//! the brokers' traffic rates, partitions led and coordinated groups, and each topic's size and
//! log end, from what the brokers' beats reported (see [`crate::stats`]).
//!
//! The publication is paced so that a cluster of thousands of busy topics does not flood the API
//! server: a round every [`Pacing::round`], an object written only when what it shows changed,
//! a topic at most every [`Pacing::topic_min_interval`], and at most
//! [`Pacing::topic_writes_per_round`] topics a round (those written longest ago first). Like
//! the assignment mirror it is fire and forget: brokers never read it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use tokio::sync::watch;
use tracing::{debug, warn};

use crate::heartbeat_server::{BrokerReport, HeartbeatHub, Role};
use crate::proto::{BrokerTotals, GroupSummary};

/// Consumer groups listed in the cluster's status, largest lag first (the rest are counted).
pub const MAX_GROUPS_SHOWN: usize = 50;

/// One broker as the cluster's status shows it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BrokerView {
    pub id: i32,
    pub partitions_led: u32,
    pub bytes_in_per_second: u64,
    pub bytes_out_per_second: u64,
}

/// One consumer group as the cluster's status shows it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GroupView {
    pub coordinator: i32,
    pub summary: GroupSummary,
}

/// The brokers' part of a KafkaCluster's status.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClusterView {
    pub brokers: Vec<BrokerView>,
    pub bytes_in_per_second: u64,
    pub bytes_out_per_second: u64,
    pub messages_in_per_second: u64,
    /// At most [`MAX_GROUPS_SHOWN`], largest lag first.
    pub consumer_groups: Vec<GroupView>,
    pub consumer_group_count: u32,
}

/// The brokers' part of a KafkaTopic's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TopicView {
    /// Partitions whose leader reported them.
    pub partitions_reported: u32,
    pub size_bytes: u64,
    /// The partitions' log end offsets summed: how many offsets the topic has handed out.
    pub log_end_offset: i64,
}

/// Where the views go (the KafkaCluster and KafkaTopic status subresources).
pub trait StatusSink: Send + Sync + std::fmt::Debug {
    fn cluster<'a>(&'a self, view: &'a ClusterView) -> BoxFuture<'a, crate::Result<()>>;
    fn topic<'a>(&'a self, topic: &'a str, view: &'a TopicView) -> BoxFuture<'a, crate::Result<()>>;
}

/// How often, and how much, the controller writes.
#[derive(Debug, Clone, Copy)]
pub struct Pacing {
    pub round: Duration,
    pub topic_min_interval: Duration,
    pub topic_writes_per_round: usize,
}

impl Default for Pacing {
    /// A round every 10 s, a topic at most once a minute, at most 50 topic writes a round (5 a
    /// second): 2,000 busy topics are each refreshed every 400 s.
    fn default() -> Pacing {
        Pacing { round: Duration::from_secs(10), topic_min_interval: Duration::from_secs(60), topic_writes_per_round: 50 }
    }
}

/// Publishes while this broker is the controller.
#[derive(Debug)]
pub struct StatusPublisher {
    hub: Arc<HeartbeatHub>,
    sink: Arc<dyn StatusSink>,
    pacing: Pacing,
    session_timeout: Duration,
    /// The previous round's counters, for the rates.
    previous: Option<(Instant, BTreeMap<i32, BrokerTotals>)>,
    cluster_published: Option<ClusterView>,
    /// Per topic: what was last written, and when.
    topics_published: BTreeMap<String, (TopicView, Instant)>,
}

impl StatusPublisher {
    pub fn new(hub: Arc<HeartbeatHub>, sink: Arc<dyn StatusSink>, pacing: Pacing, session_timeout: Duration) -> StatusPublisher {
        StatusPublisher { hub, sink, pacing, session_timeout, previous: None, cluster_published: None, topics_published: BTreeMap::new() }
    }

    /// Runs rounds until `stop` fires.
    pub async fn run(mut self, mut stop: watch::Receiver<bool>) {
        loop {
            tokio::select! {
                _ = tokio::time::sleep(self.pacing.round) => {}
                _ = stop.changed() => return,
            }
            if matches!(self.hub.role(), Role::Controller { .. }) {
                self.round(Instant::now()).await;
            } else {
                // A later term starts from nothing: another controller may have written since.
                self.previous = None;
                self.cluster_published = None;
                self.topics_published.clear();
            }
        }
    }

    /// One round at `now`: computes the views and writes what changed, within the pacing.
    pub async fn round(&mut self, now: Instant) {
        let reports = self.hub.reports(self.session_timeout);
        let totals: BTreeMap<i32, BrokerTotals> = reports.iter().map(|(id, r)| (*id, r.totals)).collect();
        let previous = self.previous.replace((now, totals));
        // Rates need two rounds of counters.
        if let Some((then, before)) = previous {
            let view = cluster_view(&reports, &before, now.saturating_duration_since(then));
            if self.cluster_published.as_ref() != Some(&view) {
                match self.sink.cluster(&view).await {
                    Ok(()) => self.cluster_published = Some(view),
                    Err(e) => warn!(error = %e, "publishing the cluster status failed; next round retries"),
                }
            }
        }

        let topics = topic_views(&reports);
        self.topics_published.retain(|topic, _| topics.contains_key(topic));
        let mut due: Vec<(&String, &TopicView, Option<Instant>)> = topics
            .iter()
            .filter_map(|(topic, view)| match self.topics_published.get(topic) {
                Some((published, _)) if published == view => None,
                Some((_, at)) if now.saturating_duration_since(*at) < self.pacing.topic_min_interval => None,
                Some((_, at)) => Some((topic, view, Some(*at))),
                None => Some((topic, view, None)),
            })
            .collect();
        // Never-written topics first, then those written longest ago.
        due.sort_by_key(|(_, _, at)| *at);
        for (topic, view, _) in due.into_iter().take(self.pacing.topic_writes_per_round) {
            match self.sink.topic(topic, view).await {
                Ok(()) => {
                    self.topics_published.insert(topic.clone(), (*view, now));
                }
                Err(e) => debug!(topic, error = %e, "publishing a topic's status failed; a later round retries"),
            }
        }
    }
}

fn per_second(now: u64, before: u64, elapsed: Duration) -> u64 {
    let seconds = elapsed.as_secs_f64();
    if seconds <= 0.0 { 0 } else { (now.saturating_sub(before) as f64 / seconds).round() as u64 }
}

fn cluster_view(reports: &BTreeMap<i32, BrokerReport>, before: &BTreeMap<i32, BrokerTotals>, elapsed: Duration) -> ClusterView {
    let mut view = ClusterView::default();
    for (id, report) in reports {
        // A broker that restarted counts from zero again: no rate until its next round.
        let was = before.get(id).copied().filter(|b| b.bytes_in <= report.totals.bytes_in).unwrap_or(report.totals);
        let broker = BrokerView {
            id: *id,
            partitions_led: u32::try_from(report.partitions.len()).unwrap_or(u32::MAX),
            bytes_in_per_second: per_second(report.totals.bytes_in, was.bytes_in, elapsed),
            bytes_out_per_second: per_second(report.totals.bytes_out, was.bytes_out, elapsed),
        };
        view.bytes_in_per_second += broker.bytes_in_per_second;
        view.bytes_out_per_second += broker.bytes_out_per_second;
        view.messages_in_per_second += per_second(report.totals.messages_in, was.messages_in, elapsed);
        view.brokers.push(broker);
        view.consumer_group_count += report.group_count;
        view.consumer_groups.extend(report.groups.iter().map(|g| GroupView { coordinator: *id, summary: g.clone() }));
    }
    view.consumer_groups.sort_by(|a, b| b.summary.lag.cmp(&a.summary.lag).then_with(|| a.summary.group_id.cmp(&b.summary.group_id)));
    view.consumer_groups.truncate(MAX_GROUPS_SHOWN);
    view
}

fn topic_views(reports: &BTreeMap<i32, BrokerReport>) -> BTreeMap<String, TopicView> {
    let mut topics: BTreeMap<String, TopicView> = BTreeMap::new();
    for ((topic, _), stats) in reports.values().flat_map(|r| r.partitions.iter()) {
        let view = topics.entry(topic.clone()).or_default();
        view.partitions_reported += 1;
        view.size_bytes += stats.size_bytes;
        view.log_end_offset += stats.log_end_offset;
    }
    topics
}

#[cfg(test)]
mod tests {
    use parking_lot::Mutex;

    use super::*;
    use crate::proto::{BrokerBeat, TopicPartitionStats};

    #[derive(Debug, Default)]
    struct Recorded {
        clusters: Mutex<Vec<ClusterView>>,
        topics: Mutex<Vec<(String, TopicView)>>,
    }

    impl StatusSink for Recorded {
        fn cluster<'a>(&'a self, view: &'a ClusterView) -> BoxFuture<'a, crate::Result<()>> {
            self.clusters.lock().push(view.clone());
            Box::pin(async { Ok(()) })
        }
        fn topic<'a>(&'a self, topic: &'a str, view: &'a TopicView) -> BoxFuture<'a, crate::Result<()>> {
            self.topics.lock().push((topic.to_string(), *view));
            Box::pin(async { Ok(()) })
        }
    }

    fn beat(bytes_in: u64, offsets: &[(&str, i64)]) -> BrokerBeat {
        let partition_stats = offsets
            .iter()
            .map(|(topic, end)| TopicPartitionStats {
                topic: topic.to_string(),
                partitions: vec![0],
                log_end_offsets: vec![*end],
                high_watermarks: vec![*end],
                size_bytes: vec![*end as u64 * 100],
            })
            .collect();
        BrokerBeat {
            broker_id: 1,
            incarnation: "i".into(),
            partitions_led: offsets.iter().map(|(t, _)| format!("{t}/0")).collect(),
            totals: Some(BrokerTotals { bytes_in, bytes_out: 0, messages_in: bytes_in / 10 }),
            partition_stats,
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn writes_only_changes_within_the_pacing() {
        let hub = HeartbeatHub::new();
        hub.set_role(Role::Controller { epoch: 1 });
        let sink = Arc::new(Recorded::default());
        let pacing = Pacing { round: Duration::from_secs(10), topic_min_interval: Duration::from_secs(60), topic_writes_per_round: 2 };
        let mut publisher = StatusPublisher::new(hub.clone(), sink.clone(), pacing, Duration::from_secs(3600));
        let topics = [("a", 1), ("b", 1), ("c", 1)];
        let start = Instant::now();
        let at = |s: u64| start + Duration::from_secs(s);

        hub.record(&beat(1000, &topics));
        hub.record_report(&beat(1000, &topics));
        publisher.round(at(0)).await;
        assert!(sink.clusters.lock().is_empty(), "no rate from one sample");
        assert_eq!(sink.topics.lock().iter().map(|(t, _)| t.as_str()).collect::<Vec<_>>(), ["a", "b"], "two writes a round");

        hub.record(&beat(2000, &topics));
        hub.record_report(&beat(2000, &topics));
        publisher.round(at(10)).await;
        let cluster = sink.clusters.lock().last().cloned().expect("a cluster view");
        assert_eq!((cluster.bytes_in_per_second, cluster.messages_in_per_second), (100, 10));
        assert_eq!(cluster.brokers, [BrokerView { id: 1, partitions_led: 3, bytes_in_per_second: 100, bytes_out_per_second: 0 }]);
        assert_eq!(
            sink.topics.lock().last().map(|(t, v)| (t.clone(), *v)),
            Some(("c".into(), TopicView { partitions_reported: 1, size_bytes: 100, log_end_offset: 1 }))
        );

        // Nothing changed: nothing written (the rate stays 100 B/s).
        hub.record(&beat(3000, &topics));
        hub.record_report(&beat(3000, &topics));
        publisher.round(at(20)).await;
        assert_eq!((sink.clusters.lock().len(), sink.topics.lock().len()), (1, 3));

        // A topic that changes is written again only a minute after its last write.
        let moved = [("a", 5), ("b", 1), ("c", 1)];
        hub.record_report(&beat(4000, &moved));
        publisher.round(at(30)).await;
        assert_eq!(sink.topics.lock().len(), 3);
        publisher.round(at(60)).await;
        assert_eq!(sink.topics.lock().last().map(|(t, v)| (t.clone(), v.log_end_offset)), Some(("a".into(), 5)));
    }
}
