//! `make bench-scale`: the in-process 3-broker cluster (one data directory, real listeners,
//! the real controller and heartbeats) at the scale of issue 19's goal 4 — by default 2,000
//! topics × 5 partitions, 1,000 consumer groups, 1,000 idempotent producers, 10,000 client
//! connections — and the figures a user sizing a cluster asks for: memory and descriptors per
//! led partition, group, producer and connection; assignment.json's size and the controller's
//! recompute time; Metadata for every topic; produce latency with traffic spread over every
//! partition; how long the survivors take to lead a dead broker's third; a cold start.
//!
//! A benchmark, not a test: it prints figures and asserts only that each phase completed
//! (every partition led, every request answered without error). The three brokers share this
//! process, so memory and descriptors are the process's, minus what it held before the phase.
//! Sizes: KAAS_SCALE_TOPICS, KAAS_SCALE_PARTITIONS, KAAS_SCALE_GROUPS, KAAS_SCALE_PRODUCERS,
//! KAAS_SCALE_CONNECTIONS, KAAS_SCALE_RATES (msg/s, comma-separated; default 1000,10000),
//! KAAS_SCALE_SECONDS (each produce rate's run).

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::TestResult;
use common::cluster::Cluster;
use common::wire::{Wire, batch};
use kaas_shared::assignment::Assignment;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::offset_commit_request::{OffsetCommitRequestPartition, OffsetCommitRequestTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    CreateTopicsRequest, FindCoordinatorRequest, GroupId, InitProducerIdRequest, ListGroupsRequest, MetadataRequest, OffsetCommitRequest,
    ProduceRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use rdkafka::producer::{FutureProducer, FutureRecord};

/// Generous: on two cores a take-over of thousands of partitions takes its time.
const SETTLE: Duration = Duration::from_secs(600);

fn size(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// This process's resident memory in bytes and its open descriptors.
fn footprint() -> TestResult<(u64, usize)> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or("no VmRSS in /proc/self/status")?;
    let fds = std::fs::read_dir("/proc/self/fd")?.count();
    Ok((kib * 1024, fds))
}

/// Memory and descriptors a phase added, per unit of what it created.
struct Delta {
    before: (u64, usize),
}

impl Delta {
    fn start() -> TestResult<Delta> {
        Ok(Delta { before: footprint()? })
    }

    fn report(&self, what: &str, units: usize) -> TestResult {
        let after = footprint()?;
        let bytes = after.0 as i64 - self.before.0 as i64;
        let fds = after.1 as i64 - self.before.1 as i64;
        println!(
            "  {what}: RSS {:+.1} MiB ({:+.1} KiB each), descriptors {fds:+} ({:+.2} each); process now {:.1} MiB, {} descriptors",
            bytes as f64 / 1048576.0,
            bytes as f64 / 1024.0 / units.max(1) as f64,
            fds as f64 / units.max(1) as f64,
            after.0 as f64 / 1048576.0,
            after.1
        );
        Ok(())
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1]
}

/// p50, p99, p99.9 and max of sorted latencies in milliseconds.
fn latency_summary(sorted: &[f64]) -> String {
    format!(
        "p50 {:.2} ms, p99 {:.2} ms, p99.9 {:.2} ms, max {:.2} ms",
        percentile(sorted, 0.5),
        percentile(sorted, 0.99),
        percentile(sorted, 0.999),
        percentile(sorted, 1.0)
    )
}

/// One wire connection to each broker, by id.
fn connect_all(nodes: &BTreeMap<i32, String>) -> TestResult<BTreeMap<i32, Wire>> {
    nodes.iter().map(|(id, address)| Ok((*id, Wire::connect(address)?))).collect()
}

fn name(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_owned())
}

fn topic_name(t: usize) -> String {
    format!("scale-{t:05}")
}

/// Runs blocking wire work off the runtime the brokers run on.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> TestResult<T> + Send + 'static) -> TestResult<T> {
    tokio::task::spawn_blocking(f).await?
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "a benchmark that prints figures: make bench-scale"]
async fn cluster_at_scale() -> TestResult {
    let topics = size("KAAS_SCALE_TOPICS", 2_000);
    let partitions = size("KAAS_SCALE_PARTITIONS", 5);
    let groups = size("KAAS_SCALE_GROUPS", 1_000);
    let producers = size("KAAS_SCALE_PRODUCERS", 1_000);
    let connections = size("KAAS_SCALE_CONNECTIONS", 10_000);
    // Produce rates, msg/s, comma-separated: each runs KAAS_SCALE_SECONDS.
    let rates: Vec<usize> = std::env::var("KAAS_SCALE_RATES")
        .unwrap_or_else(|_| "1000,10000".into())
        .split(',')
        .filter_map(|r| r.trim().parse().ok())
        .collect();
    let seconds = size("KAAS_SCALE_SECONDS", 10);
    let total = topics * partitions;
    println!(
        "bench-scale: 3 in-process brokers, {topics} topics × {partitions} partitions = {total}, {groups} groups, {producers} idempotent producers, {connections} connections"
    );

    let started = Instant::now();
    let mut cluster = Cluster::start(3).await?;
    let first = cluster.wait_assignment(SETTLE, |a| a.brokers.len() == 3).await?;
    println!("cluster of 3 up in {:.2} s (assignment v{})", started.elapsed().as_secs_f64(), first.assignment_version);

    // Topics: CreateTopics in requests of 100 topics, as a provisioning script would.
    let delta = Delta::start()?;
    let started = Instant::now();
    let address = cluster.nodes[&0].bootstrap.clone();
    blocking(move || {
        let mut wire = Wire::connect(&address)?;
        for chunk in (0..topics).collect::<Vec<_>>().chunks(100) {
            let request = CreateTopicsRequest::default().with_timeout_ms(60_000).with_topics(
                chunk
                    .iter()
                    .map(|t| {
                        CreatableTopic::default()
                            .with_name(TopicName(name(&topic_name(*t))))
                            .with_num_partitions(partitions as i32)
                            .with_replication_factor(1)
                    })
                    .collect(),
            );
            let response = wire.call(5, &request)?;
            if let Some(bad) = response.topics.iter().find(|t| t.error_code != 0) {
                return Err(format!("creating {}: error {} {:?}", bad.name.0, bad.error_code, bad.error_message).into());
            }
        }
        Ok(())
    })
    .await?;
    let created = started.elapsed();
    let placed = cluster.wait_assignment(SETTLE, |a| a.partitions.len() >= total).await?;
    let placed_at = started.elapsed();
    cluster.wait_led(SETTLE, &placed).await?;
    println!(
        "created {total} partitions in {:.2} s (CreateTopics answered), all placed in {:.2} s, all led in {:.2} s",
        created.as_secs_f64(),
        placed_at.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
    delta.report("led partitions, just taken over", total)?;
    let delta = Delta::start()?;
    release_idle_descriptors(&cluster).await?;
    delta.report("led partitions, idle (after two housekeeping rounds)", total)?;
    assignment_figures(&cluster)?;

    metadata_figures(&cluster, total).await?;

    let delta = Delta::start()?;
    for rate in &rates {
        wire_produce_figures(&cluster, topics, partitions, *rate, seconds).await?;
    }
    for rate in &rates {
        produce_figures(&cluster, topics, partitions, *rate, seconds).await?;
    }
    delta.report(&format!("after writing to {total} partitions"), total)?;
    let delta = Delta::start()?;
    release_idle_descriptors(&cluster).await?;
    delta.report("written partitions, idle again", total)?;

    let delta = Delta::start()?;
    group_figures(&cluster, groups, topics).await?;
    delta.report("groups with committed offsets", groups)?;

    let delta = Delta::start()?;
    producer_figures(&cluster, producers, topics, partitions).await?;
    delta.report("idempotent producers", producers)?;

    connection_figures(&cluster, connections)?;

    // A broker dies: the survivors take its third over once the session timeout passes.
    let before = cluster.assignment().ok_or("no assignment")?;
    let dead = 2;
    let orphans = before.partitions.values().filter(|p| p.leader == dead).count();
    let started = Instant::now();
    cluster.kill(dead).await;
    let moved = cluster.wait_assignment(SETTLE, |a| !a.partitions.values().any(|p| p.leader == dead)).await?;
    let moved_at = started.elapsed();
    cluster.wait_led(SETTLE, &moved).await?;
    println!(
        "kill of broker {dead} ({orphans} partitions): moved in the assignment after {:.2} s (session timeout {:.0} s), all led by the survivors after {:.2} s",
        moved_at.as_secs_f64(),
        kaas::cluster::ClusterSettings::for_tests("kaas-0", cluster.lease.clone()).session_timeout.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );

    // Then a second one: the last broker leads every partition alone.
    let second = 1;
    let orphans = moved.partitions.values().filter(|p| p.leader == second).count();
    let started = Instant::now();
    cluster.kill(second).await;
    let alone = cluster.wait_assignment(SETTLE, |a| a.partitions.values().all(|p| p.leader == 0)).await?;
    let moved_at = started.elapsed();
    cluster.wait_led(SETTLE, &alone).await?;
    println!(
        "kill of broker {second} ({orphans} partitions; the controller was broker {}): moved after {:.2} s, all {total} led by broker 0 alone after {:.2} s",
        moved.controller_id,
        moved_at.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
    release_idle_descriptors(&cluster).await?;
    let (rss, fds) = footprint()?;
    println!(
        "  broker 0 alone, its partitions idle: process {:.1} MiB, {fds} descriptors (the dead brokers' memory may not have gone back to the system)",
        rss as f64 / 1048576.0
    );
    metadata_figures(&cluster, total).await?;
    for rate in &rates {
        wire_produce_figures(&cluster, topics, partitions, *rate, seconds).await?;
    }

    // A cold start: every broker down, then all three up over the same volume.
    cluster.kill(0).await;
    let started = Instant::now();
    for id in 0..3 {
        cluster.start_node(id).await?;
    }
    let opened = started.elapsed();
    let version = alone.assignment_version;
    let settled = cluster.wait_assignment(SETTLE, |a| a.assignment_version > version && a.brokers.len() == 3).await?;
    cluster.wait_led(SETTLE, &settled).await?;
    println!(
        "cold start of 3 brokers over {total} partitions: listening after {:.2} s, every partition led after {:.2} s",
        opened.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Two housekeeping rounds on every broker (the brokers run one every 30 s): descriptors
/// nobody used in between are released.
async fn release_idle_descriptors(cluster: &Cluster) -> TestResult {
    let brokers: Vec<_> = cluster.nodes.values().map(|n| n.broker.clone()).collect();
    blocking(move || {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_millis() as i64;
        for _ in 0..2 {
            for broker in &brokers {
                broker.topics.housekeeping(now);
            }
        }
        Ok(())
    })
    .await
}

/// assignment.json's size and the controller's recompute time (read, balance, write) so far.
fn assignment_figures(cluster: &Cluster) -> TestResult {
    let path = kaas_shared::layout::Layout::new(cluster.data()).assignment_file();
    let bytes = std::fs::metadata(&path)?.len();
    let started = Instant::now();
    let a: Assignment = cluster.assignment().ok_or("no assignment")?;
    let read = started.elapsed();
    let mut text = String::new();
    for node in cluster.nodes.values() {
        text.push_str(&kaas_broker::http::render_metrics(&node.broker)?);
    }
    let (sum, count) = histogram(&text, "kaas_controller_recompute_seconds");
    println!(
        "assignment.json: {:.1} KiB for {} partitions, read and parsed in {:.1} ms; controller recomputes so far: {count}, mean {:.1} ms",
        bytes as f64 / 1024.0,
        a.partitions.len(),
        read.as_secs_f64() * 1e3,
        if count > 0.0 { sum / count * 1e3 } else { f64::NAN }
    );
    Ok(())
}

/// The sum and count of a histogram in Prometheus text, over every series of that name.
fn histogram(text: &str, family: &str) -> (f64, f64) {
    let value = |suffix: &str| -> f64 {
        text.lines().filter(|l| l.starts_with(&format!("{family}{suffix}"))).filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok()).sum()
    };
    (value("_sum"), value("_count"))
}

/// Metadata for every topic, as a client's first request (and kafka-topics --list) asks it.
async fn metadata_figures(cluster: &Cluster, total: usize) -> TestResult {
    let address = cluster.nodes[&0].bootstrap.clone();
    let timings = blocking(move || {
        let mut wire = Wire::connect(&address)?;
        let mut timings = Vec::new();
        for _ in 0..10 {
            let started = Instant::now();
            let response = wire.call(12, &MetadataRequest::default().with_topics(None))?;
            timings.push(started.elapsed().as_secs_f64() * 1e3);
            let answered: usize = response.topics.iter().map(|t| t.partitions.len()).sum();
            if answered != total {
                return Err(format!("Metadata named {answered} partitions, not {total}").into());
            }
        }
        timings.sort_by(f64::total_cmp);
        Ok(timings)
    })
    .await?;
    println!(
        "Metadata v12 for all topics ({total} partitions), 10 requests: p50 {:.1} ms, max {:.1} ms (request, answer and the client's decode)",
        percentile(&timings, 0.5),
        percentile(&timings, 1.0)
    );
    Ok(())
}

/// Produce latency (librdkafka, acks=all, 1 KiB) at `rate` msg/s spread round-robin over every
/// partition, so nearly every batch is a partition's only one in its request.
async fn produce_figures(cluster: &Cluster, topics: usize, partitions: usize, rate: usize, seconds: usize) -> TestResult {
    let producer: FutureProducer = cluster.client_config().set("acks", "all").set("linger.ms", "5").create()?;
    let payload = vec![b'x'; 1024];
    let mut pending = tokio::task::JoinSet::new();
    let tick = Duration::from_millis(10);
    let per_tick = (rate / 100).max(1);
    let mut next = 0usize;
    let started = Instant::now();
    let mut interval = tokio::time::interval(tick);
    while started.elapsed() < Duration::from_secs(seconds as u64) {
        interval.tick().await;
        for _ in 0..per_tick {
            let (t, p) = (next % topics, (next / topics) % partitions);
            next += 1;
            let topic = topic_name(t);
            let record = FutureRecord::<(), [u8]>::to(&topic).partition(p as i32).payload(&payload);
            let sent = Instant::now();
            let delivery = producer.send_result(record).map_err(|(e, _)| e)?;
            // The latency if acknowledged; a failed or cancelled delivery counts as failed.
            pending.spawn(async move { matches!(delivery.await, Ok(Ok(_))).then(|| sent.elapsed().as_secs_f64() * 1e3) });
        }
    }
    let mut latencies = Vec::with_capacity(next);
    let mut failed = 0;
    while let Some(done) = pending.join_next().await {
        match done? {
            Some(ms) => latencies.push(ms),
            None => failed += 1,
        }
    }
    latencies.sort_by(f64::total_cmp);
    println!(
        "produce {next} × 1 KiB at {rate} msg/s over {} partitions (librdkafka, acks=all, linger 5 ms): {}, {failed} failed",
        topics * partitions,
        latency_summary(&latencies)
    );
    if failed > 0 {
        return Err(format!("{failed} produce requests failed").into());
    }
    Ok(())
}

/// Produce latency with a load generator that costs the brokers' two cores little: per broker,
/// four connections, each sending every 5 ms one ProduceRequest (acks=all) with the messages
/// generated for its partitions since the last one, one request in flight per connection, as a
/// lingering client batches. A message's latency runs from its generation to its
/// acknowledgement, so time waiting behind a slow request counts.
async fn wire_produce_figures(cluster: &Cluster, topics: usize, partitions: usize, rate: usize, seconds: usize) -> TestResult {
    const CONNECTIONS_PER_BROKER: usize = 4;
    const LINGER: Duration = Duration::from_millis(5);
    let a = cluster.assignment().ok_or("no assignment")?;
    // Each sender's partitions, in the round-robin order messages go to them.
    let total = topics * partitions;
    let mut senders: BTreeMap<(i32, usize), Vec<(String, i32)>> = BTreeMap::new();
    let mut per_leader: BTreeMap<i32, usize> = BTreeMap::new();
    for n in 0..total {
        let (t, p) = (n % topics, (n / topics) % partitions);
        let topic = topic_name(t);
        let leader = a.partition(&topic, p as i32).ok_or("unplaced partition")?.leader;
        let seen = per_leader.entry(leader).or_default();
        senders.entry((leader, *seen % CONNECTIONS_PER_BROKER)).or_default().push((topic, p as i32));
        *seen += 1;
    }
    let addresses: BTreeMap<i32, String> = cluster.nodes.values().map(|n| (n.id, n.bootstrap.clone())).collect();
    let value = "x".repeat(1024);
    let connections = senders.len();
    let started = Instant::now();
    let run_for = Duration::from_secs(seconds as u64);
    let mut threads = Vec::new();
    for ((leader, _), owned) in senders {
        let address = addresses.get(&leader).ok_or("leader is no broker")?.clone();
        let value = value.clone();
        // This sender's share of the rate: its partitions' share of all partitions.
        let share = rate as f64 * owned.len() as f64 / total as f64;
        threads.push(std::thread::spawn(move || -> TestResult<Vec<f64>> {
            let mut wire = Wire::connect(&address)?;
            let mut latencies = Vec::new();
            let (mut generated, mut next) = (0usize, 0usize);
            let mut pending: Vec<(Instant, usize)> = Vec::new();
            while started.elapsed() < run_for {
                let due = (share * started.elapsed().as_secs_f64()) as usize;
                while generated < due {
                    // Generated at its due time, the moment `due` counts it: the wait for the
                    // next request counts.
                    pending.push((started + Duration::from_secs_f64((generated + 1) as f64 / share), next % owned.len()));
                    generated += 1;
                    next += 1;
                }
                if pending.is_empty() {
                    std::thread::sleep(LINGER);
                    continue;
                }
                let mut by_topic: BTreeMap<&str, Vec<PartitionProduceData>> = BTreeMap::new();
                for (_, i) in &pending {
                    let (topic, p) = &owned[*i];
                    by_topic.entry(topic).or_default().push(PartitionProduceData::default().with_index(*p).with_records(Some(batch(
                        -1,
                        -1,
                        -1,
                        &[&value],
                    )?)));
                }
                let request = ProduceRequest::default().with_acks(-1).with_timeout_ms(30_000).with_topic_data(
                    by_topic
                        .into_iter()
                        .map(|(t, data)| TopicProduceData::default().with_name(TopicName(name(t))).with_partition_data(data))
                        .collect(),
                );
                let response = wire.call(9, &request)?;
                let done = Instant::now();
                if let Some(bad) = response.responses.iter().flat_map(|t| &t.partition_responses).find(|p| p.error_code != 0) {
                    return Err(format!("produce to partition {}: error {}", bad.index, bad.error_code).into());
                }
                latencies.extend(pending.drain(..).map(|(at, _)| (done - at).as_secs_f64() * 1e3));
                std::thread::sleep(LINGER.saturating_sub(done.elapsed()));
            }
            Ok(latencies)
        }));
    }
    let latencies = blocking(move || {
        let mut all = Vec::new();
        for thread in threads {
            all.extend(thread.join().map_err(|_| "a sender panicked")??);
        }
        all.sort_by(f64::total_cmp);
        Ok(all)
    })
    .await?;
    println!(
        "produce {} × 1 KiB at {rate} msg/s over {total} partitions (wire load generator, acks=all, 5 ms batching, {connections} connections): {}",
        latencies.len(),
        latency_summary(&latencies)
    );
    Ok(())
}

/// `groups` groups, each committing an offset (as standalone consumers and admin tools do), then
/// ListGroups on every broker.
async fn group_figures(cluster: &Cluster, groups: usize, topics: usize) -> TestResult {
    let nodes: BTreeMap<i32, String> = cluster.nodes.values().map(|n| (n.id, n.bootstrap.clone())).collect();
    blocking(move || {
        let mut any = Wire::connect(&nodes[&0])?;
        let ids: Vec<String> = (0..groups).map(|g| format!("scale-group-{g:05}")).collect();
        let mut coordinators: BTreeMap<String, i32> = BTreeMap::new();
        for chunk in ids.chunks(500) {
            let found = any.call(4, &FindCoordinatorRequest::default().with_key_type(0).with_coordinator_keys(chunk.iter().map(|g| name(g)).collect()))?;
            for c in found.coordinators {
                if c.error_code != 0 {
                    return Err(format!("FindCoordinator {}: error {}", c.key, c.error_code).into());
                }
                coordinators.insert(c.key.to_string(), c.node_id.0);
            }
        }
        let mut wires = connect_all(&nodes)?;
        let mut timings = Vec::with_capacity(groups);
        for (g, group) in ids.iter().enumerate() {
            let wire = wires.get_mut(&coordinators[group]).ok_or("coordinator is no broker")?;
            let request = OffsetCommitRequest::default()
                .with_group_id(GroupId(name(group)))
                .with_generation_id_or_member_epoch(-1)
                .with_topics(vec![OffsetCommitRequestTopic::default().with_name(TopicName(name(&topic_name(g % topics)))).with_partitions(vec![
                    OffsetCommitRequestPartition::default().with_partition_index(0).with_committed_offset(1),
                ])]);
            let started = Instant::now();
            let response = wire.call(8, &request)?;
            timings.push(started.elapsed().as_secs_f64() * 1e3);
            let code = response.topics[0].partitions[0].error_code;
            if code != 0 {
                return Err(format!("OffsetCommit for {group}: error {code}").into());
            }
        }
        timings.sort_by(f64::total_cmp);
        let mut listed = 0;
        let started = Instant::now();
        for wire in wires.values_mut() {
            listed += wire.call(4, &ListGroupsRequest::default())?.groups.len();
        }
        let list_ms = started.elapsed().as_secs_f64() * 1e3;
        println!(
            "{groups} groups: OffsetCommit (each a fenced fsync) p50 {:.2} ms, p99 {:.2} ms; ListGroups on the 3 brokers listed {listed} in {list_ms:.1} ms",
            percentile(&timings, 0.5),
            percentile(&timings, 0.99)
        );
        if listed < groups {
            return Err(format!("ListGroups listed {listed} of {groups} groups").into());
        }
        Ok(())
    })
    .await
}

/// `producers` idempotent producers (InitProducerId), each writing one batch to its own partition.
async fn producer_figures(cluster: &Cluster, producers: usize, topics: usize, partitions: usize) -> TestResult {
    let a = cluster.assignment().ok_or("no assignment")?;
    let nodes: BTreeMap<i32, String> = cluster.nodes.values().map(|n| (n.id, n.bootstrap.clone())).collect();
    blocking(move || {
        let mut wires = connect_all(&nodes)?;
        let started = Instant::now();
        for n in 0..producers {
            let (t, p) = (n % topics, (n / topics) % partitions);
            let topic = topic_name(t);
            let leader = a.partition(&topic, p as i32).ok_or("unplaced partition")?.leader;
            let wire = wires.get_mut(&leader).ok_or("leader is no broker")?;
            let init = wire.call(4, &InitProducerIdRequest::default().with_transactional_id(None))?;
            if init.error_code != 0 {
                return Err(format!("InitProducerId: error {}", init.error_code).into());
            }
            let request = ProduceRequest::default().with_acks(-1).with_timeout_ms(30_000).with_topic_data(vec![
                TopicProduceData::default().with_name(TopicName(name(&topic))).with_partition_data(vec![
                    PartitionProduceData::default().with_index(p as i32).with_records(Some(batch(
                        init.producer_id.0,
                        init.producer_epoch,
                        0,
                        &["idempotent"],
                    )?)),
                ]),
            ]);
            let response = wire.call(9, &request)?;
            let code = response.responses[0].partition_responses[0].error_code;
            if code != 0 {
                return Err(format!("idempotent produce to {topic}/{p}: error {code}").into());
            }
        }
        println!("{producers} idempotent producers (InitProducerId, then one batch each): {:.2} s", started.elapsed().as_secs_f64());
        Ok(())
    })
    .await
}

/// `connections` client connections, each having asked ApiVersions, held open by a child
/// process (its descriptors are its own, not counted here).
fn connection_figures(cluster: &Cluster, connections: usize) -> TestResult {
    const SCRIPT: &str = r#"
import socket, struct, sys
addresses = sys.argv[2].split(",")
held = []
for n in range(int(sys.argv[1])):
    host, port = addresses[n % len(addresses)].rsplit(":", 1)
    # Ten client addresses, as many client machines would be: a broker takes 1,000 a address.
    s = socket.create_connection((host, int(port)), source_address=("127.0.0.%d" % (2 + n % 10), 0))
    client = b"scale"
    body = struct.pack(">hhih", 18, 0, n, len(client)) + client
    s.sendall(struct.pack(">i", len(body)) + body)
    size = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))[0]
    s.recv(size, socket.MSG_WAITALL)
    held.append(s)
print("held", len(held), flush=True)
sys.stdin.read()
"#;
    let delta = Delta::start()?;
    let started = Instant::now();
    let mut child = Command::new("python3")
        .args(["-c", SCRIPT, &connections.to_string(), &cluster.bootstrap()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    let mut line = String::new();
    BufReader::new(child.stdout.take().ok_or("no stdout")?).read_line(&mut line)?;
    if line.trim() != format!("held {connections}") {
        let _ = child.kill();
        return Err(format!("the client process said {line:?}").into());
    }
    println!("{connections} connections opened and answered ApiVersions in {:.2} s", started.elapsed().as_secs_f64());
    delta.report("client connections", connections)?;
    child.stdin.take().ok_or("no stdin")?.write_all(b"")?;
    child.wait()?;
    Ok(())
}
