//! `/metrics` under a real client load (librdkafka): what was produced shows as bytes and
//! records in, what was fetched as bytes out, every answered request in its API's counter and
//! histogram, the led partition's offsets, and a consumer group's lag moves with its commits.

mod common;

use std::time::Duration;

use common::{Kaas, TestResult, series};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::producer::FutureRecord;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

fn commit(kaas: &Kaas, group: &str, topic: &str, offset: i64) -> TestResult {
    let consumer: BaseConsumer = kaas.config().set("group.id", group).set("enable.auto.commit", "false").create()?;
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Offset(offset))?;
    consumer.commit(&tpl, CommitMode::Sync)?;
    Ok(())
}

#[tokio::test]
async fn traffic_offsets_and_lag_follow_a_real_client() -> TestResult {
    let kaas = Kaas::start()?;
    kaas.create_topic("metered", 2, &[]).await?;
    let producer = kaas.producer(&[("acks", "all"), ("linger.ms", "0")])?;
    let value = vec![b'x'; 100];
    // Records an hour old (by their CreateTime), so lag in time has a known size.
    let hour_ago = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_millis() as i64 - 3_600_000;
    for i in 0..100 {
        let key = i.to_string();
        producer
            .send(FutureRecord::to("metered").partition(0).key(&key).payload(&value).timestamp(hour_ago + i), Duration::from_secs(30))
            .await
            .map_err(|(e, _)| e)?;
    }

    let text = kaas.metrics()?;
    let topic = [("topic", "metered")];
    assert_eq!(series(&text, "kaas_topic_messages_in_total", &topic), Some(100.0));
    let bytes_in = series(&text, "kaas_topic_bytes_in_total", &topic).ok_or("no bytes in")?;
    assert!(bytes_in >= 100.0 * 100.0, "bytes in {bytes_in} < the payloads produced");
    let produces = series(&text, "kaas_requests_total", &[("api", "Produce")]).ok_or("no Produce requests")?;
    assert!((1.0..=100.0).contains(&produces), "{produces} Produce requests for 100 records");
    assert_eq!(series(&text, "kaas_request_duration_seconds_count", &[("api", "Produce")]), Some(produces), "one duration per request");
    let p0 = [("topic", "metered"), ("partition", "0")];
    assert_eq!(series(&text, "kaas_partition_high_watermark", &p0), Some(100.0));
    assert_eq!(series(&text, "kaas_partition_log_end_offset", &p0), Some(100.0));
    assert_eq!(series(&text, "kaas_partition_log_start_offset", &p0), Some(0.0));
    assert!(series(&text, "kaas_partition_log_size_bytes", &p0).is_some_and(|b| b >= bytes_in), "log size below bytes in");
    assert_eq!(series(&text, "kaas_partition_high_watermark", &[("topic", "metered"), ("partition", "1")]), Some(0.0));
    assert_eq!(series(&text, "kaas_topic_bytes_out_total", &topic), None, "nothing fetched yet");

    // Fetched records show as bytes out.
    kaas.consume("metered", 0, Offset::Beginning, 100)?;
    let text = kaas.metrics()?;
    let bytes_out = series(&text, "kaas_topic_bytes_out_total", &topic).ok_or("no bytes out")?;
    assert!(bytes_out >= 100.0 * 100.0, "bytes out {bytes_out}");

    // A group that committed 40 of 100 lags 60; committing the end brings it to 0.
    commit(&kaas, "lagging", "metered", 40)?;
    let text = kaas.metrics()?;
    let g0 = [("group", "lagging"), ("topic", "metered"), ("partition", "0")];
    assert_eq!(series(&text, "kaas_consumer_group_committed_offset", &g0), Some(40.0));
    assert_eq!(series(&text, "kaas_consumer_group_lag", &g0), Some(60.0));
    assert_eq!(series(&text, "kaas_consumer_group_lag_sum", &[("group", "lagging"), ("topic", "metered")]), Some(60.0));
    // The oldest uncommitted record (offset 40) is an hour old.
    let age = series(&text, "kaas_consumer_group_lag_seconds", &g0).ok_or("no lag in time")?;
    assert!((3590.0..3700.0).contains(&age), "lag of {age} s behind records an hour old");
    assert_eq!(series(&text, "kaas_consumer_group_lag_seconds_max", &[("group", "lagging"), ("topic", "metered")]), Some(age));
    assert!(series(&text, "kaas_consumer_groups", &[("state", "Empty"), ("type", "classic")]).is_some_and(|n| n >= 1.0), "{text}");
    assert_eq!(series(&text, "kaas_consumer_group_members", &[("group", "lagging")]), Some(0.0), "a committing client is no member");
    // A subscribed consumer is a member while it is in the group.
    let member: BaseConsumer = kaas.config().set("group.id", "watching").create()?;
    member.subscribe(&["metered"])?;
    let joined = common::wait_for(Duration::from_secs(30), || {
        let _ = member.poll(Duration::from_millis(100));
        kaas.metrics().is_ok_and(|text| series(&text, "kaas_consumer_group_members", &[("group", "watching")]) == Some(1.0))
    });
    assert!(joined, "the subscribed consumer never showed as the group's member");
    drop(member);
    commit(&kaas, "lagging", "metered", 100)?;
    let text = kaas.metrics()?;
    assert_eq!(series(&text, "kaas_consumer_group_lag", &g0), Some(0.0));
    assert_eq!(series(&text, "kaas_consumer_group_lag_seconds", &g0), Some(0.0), "caught up: no lag in time");

    // A deleted topic's series go away.
    let admin = kaas.admin()?;
    for r in admin.delete_topics(&["metered"], &rdkafka::admin::AdminOptions::new()).await? {
        r.map_err(|(t, e)| format!("deleting {t}: {e}"))?;
    }
    let text = kaas.metrics()?;
    assert_eq!(series(&text, "kaas_topic_messages_in_total", &topic), None);
    assert_eq!(series(&text, "kaas_partition_high_watermark", &p0), None);
    Ok(())
}

#[tokio::test]
async fn per_partition_series_can_be_turned_off() -> TestResult {
    let kaas = Kaas::start_with(&["--metrics-per-partition", "false"])?;
    kaas.create_topic("quiet", 1, &[]).await?;
    let producer = kaas.producer(&[])?;
    producer.send(FutureRecord::to("quiet").partition(0).key("k").payload("v"), Duration::from_secs(30)).await.map_err(|(e, _)| e)?;
    commit(&kaas, "few", "quiet", 0)?;
    let text = kaas.metrics()?;
    assert_eq!(series(&text, "kaas_partition_high_watermark", &[("topic", "quiet"), ("partition", "0")]), None);
    assert_eq!(series(&text, "kaas_consumer_group_lag", &[("group", "few"), ("topic", "quiet"), ("partition", "0")]), None);
    assert_eq!(series(&text, "kaas_consumer_group_lag_sum", &[("group", "few"), ("topic", "quiet")]), Some(1.0));
    assert_eq!(series(&text, "kaas_topic_messages_in_total", &[("topic", "quiet")]), Some(1.0));
    Ok(())
}

/// Retention shows what it unlinked (segment count and bytes, and the log start it raised), and
/// the process its descriptors, their limit and the fetch buffer pool. A topic whose segments
/// roll after 100 ms and expire after 100 ms loses its first segment to the next housekeeping.
#[tokio::test]
async fn retention_and_process_resources_are_reported() -> TestResult {
    let kaas = Kaas::start_with(&["--housekeeping-interval-ms", "100"])?;
    kaas.create_topic("expiring", 1, &[("segment.ms", "100"), ("retention.ms", "100")]).await?;
    let producer = kaas.producer(&[("acks", "all")])?;
    let value = vec![b'r'; 1000];
    for i in 0..5 {
        let key = i.to_string();
        producer
            .send(FutureRecord::to("expiring").partition(0).key(&key).payload(&value), Duration::from_secs(30))
            .await
            .map_err(|(e, _)| e)?;
    }
    let p0 = [("topic", "expiring"), ("partition", "0")];
    let text =
        scrape_until(&kaas, "the expired segment's deletion", |text| series(text, "kaas_partition_log_start_offset", &p0) == Some(5.0))?;
    assert_eq!(series(&text, "kaas_partition_segments", &p0), Some(1.0), "only the active segment is left");
    let segments = series(&text, "kaas_retention_deleted_segments_total", &[]).ok_or("no deleted segments series")?;
    let bytes = series(&text, "kaas_retention_deleted_bytes_total", &[]).ok_or("no deleted bytes series")?;
    assert!(segments >= 1.0, "{segments} segments deleted");
    assert!(bytes >= 5.0 * 1000.0, "{bytes} bytes deleted for 5 records of 1,000 bytes");
    let fds = series(&text, "kaas_open_fds", &[]).ok_or("no open descriptors series")?;
    let limit = series(&text, "kaas_max_fds", &[]).ok_or("no descriptor limit series")?;
    assert!(fds >= 3.0 && fds < limit, "{fds} descriptors open, limit {limit}");
    assert!(series(&text, "kaas_fetch_buffer_pool_bytes", &[]).is_some(), "no buffer pool series");
    Ok(())
}

/// A broker started with a low soft open-file limit (as some container runtimes start
/// processes) raises it to the hard limit: a broker leading thousands of partitions for
/// thousands of clients needs more than 1,024 descriptors.
#[test]
fn the_open_file_limit_is_raised_to_the_hard_limit() -> TestResult {
    let hard: u64 = std::fs::read_to_string("/proc/self/limits")?
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(4)?.parse().ok())
        .ok_or("no open-file limit in /proc/self/limits")?;
    if hard <= 256 {
        return Err(format!("this machine's hard open-file limit ({hard}) leaves nothing to raise").into());
    }
    let kaas = Kaas::start_launched(&["prlimit", "--nofile=256:"], &[])?;
    let text = kaas.metrics()?;
    assert_eq!(series(&text, "kaas_max_fds", &[]), Some(hard as f64), "the soft limit (256 at start) is the hard one");
    Ok(())
}

/// The series' value once `ready` holds, polling the scrape (a connection's close reaches the
/// broker a moment after the client drops it).
fn scrape_until(kaas: &Kaas, what: &str, ready: impl Fn(&str) -> bool) -> Result<String, String> {
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        let text = kaas.metrics().map_err(|e| e.to_string())?;
        if ready(&text) {
            return Ok(text);
        }
        if std::time::Instant::now() > deadline {
            return Err(format!("{what} never held; last scrape:\n{text}"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[tokio::test]
async fn phases_errors_and_client_software_follow_a_real_client() -> TestResult {
    let kaas = Kaas::start()?;
    kaas.create_topic("phased", 1, &[]).await?;
    let software = [("software", "kaas-metrics-test"), ("version", "1.2.3")];
    let producer = kaas.producer(&[("acks", "all"), ("client.software.name", "kaas-metrics-test"), ("client.software.version", "1.2.3")])?;
    for i in 0..10 {
        let key = i.to_string();
        producer.send(FutureRecord::to("phased").partition(0).key(&key).payload("v"), Duration::from_secs(30)).await.map_err(|(e, _)| e)?;
    }
    let text = kaas.metrics()?;
    let connected = series(&text, "kaas_connections_by_client", &software).ok_or("the producer's connections are not counted")?;
    assert!(connected >= 1.0, "{connected} connections of kaas-metrics-test");

    // Every Produce went through the local phase once; an acks=all answer waits for its fsync
    // and is then sent.
    let produces = series(&text, "kaas_requests_total", &[("api", "Produce")]).ok_or("no Produce requests")?;
    let phase = |text: &str, p: &str| series(text, "kaas_request_phase_seconds_count", &[("api", "Produce"), ("phase", p)]);
    assert_eq!(phase(&text, "local"), Some(produces), "one local phase per Produce");
    let waited = phase(&text, "wait").ok_or("no Produce waited for its fsync")?;
    assert!((1.0..=produces).contains(&waited), "{waited} waits for {produces} produces");
    let sent = phase(&text, "send").ok_or("no Produce answer sent")?;
    assert!((1.0..=produces).contains(&sent), "{sent} sends for {produces} produces");
    assert_eq!(phase(&text, "response_queue"), Some(sent), "every sent answer was queued first");

    // Each acknowledged produce waited for a segment fdatasync (one may cover several), and
    // the syncs made exactly the appended bytes durable.
    let segment_syncs = [("file", "segment"), ("call", "fdatasync")];
    let syncs = series(&text, "kaas_fsync_seconds_count", &segment_syncs).ok_or("no segment fdatasync observed")?;
    assert!((1.0..=produces).contains(&syncs), "{syncs} segment syncs for {produces} acks=all produces");
    let bytes_in = series(&text, "kaas_topic_bytes_in_total", &[("topic", "phased")]).ok_or("no bytes in")?;
    assert_eq!(series(&text, "kaas_fsync_bytes_sum", &segment_syncs), Some(bytes_in), "synced bytes differ from appended bytes");

    // Errors are counted by API and Kafka's error name, once per failed topic.
    let admin = kaas.admin()?;
    for r in admin.delete_topics(&["never-created"], &rdkafka::admin::AdminOptions::new()).await? {
        assert!(r.is_err(), "deleting a missing topic succeeded");
    }
    let text = kaas.metrics()?;
    let unknown = [("api", "DeleteTopics"), ("error", "UNKNOWN_TOPIC_OR_PARTITION")];
    assert_eq!(series(&text, "kaas_request_errors_total", &unknown), Some(1.0));
    assert_eq!(series(&text, "kaas_request_errors_total", &[("api", "Produce"), ("error", "NONE")]), None, "NONE is not an error");
    // And by the client software that got them (the admin client is librdkafka).
    let by_client = [("software", "librdkafka"), ("error", "UNKNOWN_TOPIC_OR_PARTITION")];
    assert_eq!(series(&text, "kaas_client_request_errors_total", &by_client), Some(1.0));

    // The producer's connections are no longer counted once it is gone.
    drop(producer);
    scrape_until(&kaas, "kaas-metrics-test connections closed", |text| series(text, "kaas_connections_by_client", &software) == Some(0.0))?;
    Ok(())
}

/// The names of the series a scrape carries samples for.
fn sampled_names(text: &str) -> std::collections::BTreeSet<String> {
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .filter_map(|line| line.split(['{', ' ']).next())
        .map(str::to_string)
        .collect()
}

/// Every `kaas_…` name a PromQL expression mentions.
fn names_in_query(expr: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = expr;
    while let Some(at) = rest.find("kaas_") {
        let tail = &rest[at..];
        let end = tail.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(tail.len());
        found.push(tail[..end].to_string());
        rest = &tail[end..];
    }
    found
}

/// The Grafana dashboards in monitoring/grafana query only series a broker under a real load
/// (produce, fetch, a committing group, a failed request, a named client) has samples for.
#[tokio::test]
async fn every_dashboard_query_names_a_series_the_broker_exports() -> TestResult {
    // Housekeeping rolls the compacted topic's segments at once, so the cleaner panels' series
    // (a finished clean among them) have samples too.
    let kaas = Kaas::start_with(&["--housekeeping-interval-ms", "100", "--log-cleaner-backoff-ms", "100"])?;
    kaas.create_topic("dashboards", 1, &[]).await?;
    let compacted = [("cleanup.policy", "compact"), ("segment.ms", "200"), ("min.cleanable.dirty.ratio", "0.01")];
    kaas.create_topic("dashboards-compacted", 1, &compacted).await?;
    let producer = kaas.producer(&[("acks", "all")])?;
    for i in 0..5 {
        let key = i.to_string();
        producer.send(FutureRecord::to("dashboards").partition(0).key(&key).payload("v"), Duration::from_secs(30)).await.map_err(|(e, _)| e)?;
    }
    kaas.consume("dashboards", 0, Offset::Beginning, 5)?;
    commit(&kaas, "watchers", "dashboards", 2)?;
    let admin = kaas.admin()?;
    for r in admin.delete_topics(&["not-there"], &rdkafka::admin::AdminOptions::new()).await? {
        assert!(r.is_err(), "deleting a missing topic succeeded");
    }
    for round in 0..3 {
        let value = format!("r{round}");
        let record = FutureRecord::to("dashboards-compacted").partition(0).key("k").payload(&value);
        producer.send(record, Duration::from_secs(30)).await.map_err(|(e, _)| e)?;
    }
    let cleaned = common::wait_for(Duration::from_secs(30), || {
        kaas.metrics().is_ok_and(|text| sampled_names(&text).contains("kaas_partition_cleaner_last_clean_timestamp_seconds"))
    });
    assert!(cleaned, "the cleaner finished no pass over dashboards-compacted");
    let exported = sampled_names(&kaas.metrics()?);

    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../monitoring/grafana");
    let (mut dashboards, mut queries) = (0, 0);
    for entry in std::fs::read_dir(&dir)? {
        let path = entry?.path();
        let dashboard: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path)?)?;
        dashboards += 1;
        let panels = dashboard["panels"].as_array().ok_or_else(|| format!("{}: no panels", path.display()))?;
        for panel in panels {
            let targets = panel["targets"].as_array().ok_or_else(|| format!("{}: {} has no targets", path.display(), panel["title"]))?;
            for target in targets {
                let expr = target["expr"].as_str().ok_or_else(|| format!("{}: a target without expr", path.display()))?;
                let names = names_in_query(expr);
                assert!(!names.is_empty(), "{}: {expr} names no kaas series", path.display());
                for name in names {
                    assert!(exported.contains(&name), "{}: {name} has no samples (query {expr}); exported: {exported:?}", path.display());
                }
                queries += 1;
            }
        }
    }
    assert!(dashboards >= 5 && queries >= 20, "{dashboards} dashboards, {queries} queries");
    Ok(())
}

/// A transactional producer's commits and aborts, and a transaction left open past its
/// timeout, show in the coordinator's counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transaction_outcomes_are_counted() -> TestResult {
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    let kaas = Kaas::start()?;
    kaas.create_topic("txn-metered", 1, &[]).await?;
    let txn_producer = |id: &str| -> TestResult<BaseProducer> {
        let p: BaseProducer = kaas.config().set("transactional.id", id).set("transaction.timeout.ms", "2000").create()?;
        p.init_transactions(Duration::from_secs(30))?;
        Ok(p)
    };
    let send = |p: &BaseProducer| -> TestResult {
        p.send(BaseRecord::<(), str>::to("txn-metered").partition(0).payload("v")).map_err(|(e, _)| e)?;
        p.flush(Duration::from_secs(30))?;
        Ok(())
    };
    let p = txn_producer("counted")?;
    p.begin_transaction()?;
    send(&p)?;
    p.commit_transaction(Duration::from_secs(30))?;
    p.begin_transaction()?;
    send(&p)?;
    p.abort_transaction(Duration::from_secs(30))?;
    let text = kaas.metrics()?;
    assert_eq!(series(&text, "kaas_transactions_committed_total", &[]), Some(1.0));
    assert_eq!(series(&text, "kaas_transactions_aborted_total", &[]), Some(1.0));
    assert_eq!(series(&text, "kaas_transactions_timed_out_total", &[]), Some(0.0));
    assert_eq!(series(&text, "kaas_transactions", &[("state", "CompleteAbort")]), Some(1.0), "{text}");

    // Left Ongoing past transaction.timeout.ms: the coordinator aborts it.
    let open = txn_producer("forgotten")?;
    open.begin_transaction()?;
    send(&open)?;
    assert_eq!(series(&kaas.metrics()?, "kaas_transactions", &[("state", "Ongoing")]), Some(1.0));
    let text = scrape_until(&kaas, "the forgotten transaction timed out", |text| series(text, "kaas_transactions_timed_out_total", &[]) == Some(1.0))?;
    assert_eq!(series(&text, "kaas_transactions_aborted_total", &[]), Some(2.0));
    assert_eq!(series(&text, "kaas_transactions_committed_total", &[]), Some(1.0));
    Ok(())
}
