//! The fetch handler over real brokers (in memory, and on a temporary directory so reads take
//! the blocking path), spoken to over loopback connections: what one request may cost, and
//! long polls that end with their connection.

use std::net::SocketAddr;

use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic, ForgottenTopic};
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use kaas_storage::AppendOptions;
use kaas_storage::testing::BatchBuilder;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::*;
use crate::broker::now_ms;
use crate::config::BrokerConfig;
use crate::server::Server;
use crate::topics::NewTopic;

type TestResult<T = ()> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

fn open(config: BrokerConfig) -> TestResult<Arc<Broker>> {
    Ok(Broker::open(config)?)
}

/// A broker on a temporary directory (reads go through the blocking path), with `fetch`.
fn on_disk(dir: &tempfile::TempDir, fetch: FetchConfig) -> TestResult<Arc<Broker>> {
    open(BrokerConfig { storage: StorageMode::Disk(dir.path().to_path_buf()), fetch, ..BrokerConfig::local_in_memory() })
}

fn create_topic(broker: &Broker, name: &str, partitions: i32, configs: &[(&str, &str)]) -> TestResult {
    let configs = configs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    broker.topics.create(NewTopic { name: name.into(), partitions, configs })?;
    Ok(())
}

/// Appends one batch of `count` records of `size` bytes to `topic`/`partition`, durably.
async fn append(broker: &Broker, topic: &str, partition: i32, count: usize, size: usize) -> TestResult<usize> {
    let p = broker.topics.partition(topic, partition).ok_or("no such partition")?;
    let batch = BatchBuilder::new().timestamps(now_ms()).records(count, size).build();
    let len = batch.len();
    let out = p.append(&batch, AppendOptions { leader_epoch: p.leader_epoch(), now_ms: now_ms() })?;
    p.wait_durable(out.last_offset).await?;
    Ok(len)
}

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

fn fetch_topic(topic: &str, partitions: impl IntoIterator<Item = i32>) -> FetchTopic {
    FetchTopic::default().with_topic(name(topic)).with_partitions(
        partitions.into_iter().map(|p| FetchPartition::default().with_partition(p).with_partition_max_bytes(1 << 20)).collect(),
    )
}

fn request(topics: Vec<FetchTopic>) -> FetchRequest {
    FetchRequest::default().with_max_wait_ms(0).with_min_bytes(0).with_topics(topics)
}

/// A broker's listener on 127.0.0.1:0, stopped when dropped.
struct Listener {
    addr: SocketAddr,
    stop: CancellationToken,
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn listen(broker: &Arc<Broker>) -> TestResult<Listener> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let stop = CancellationToken::new();
    tokio::spawn(Server::new(listener, broker.clone()).run(stop.clone().cancelled_owned()));
    Ok(Listener { addr, stop })
}

/// One client connection.
struct Client {
    stream: TcpStream,
    correlation: i32,
}

impl Client {
    async fn connect(listener: &Listener) -> TestResult<Client> {
        Ok(Client { stream: TcpStream::connect(listener.addr).await?, correlation: 0 })
    }

    async fn send(&mut self, version: i16, request: &FetchRequest) -> TestResult {
        self.correlation += 1;
        let header = RequestHeader::default().with_request_api_key(ApiKey::Fetch as i16).with_request_api_version(version).with_correlation_id(self.correlation);
        let mut body = bytes::BytesMut::new();
        header.encode(&mut body, ApiKey::Fetch.request_header_version(version))?;
        request.encode(&mut body, version)?;
        let mut frame = i32::try_from(body.len())?.to_be_bytes().to_vec();
        frame.extend_from_slice(&body);
        Ok(self.stream.write_all(&frame).await?)
    }

    async fn fetch(&mut self, version: i16, request: &FetchRequest) -> TestResult<FetchResponse> {
        self.send(version, request).await?;
        let mut size = [0u8; 4];
        self.stream.read_exact(&mut size).await?;
        let mut body = vec![0u8; usize::try_from(i32::from_be_bytes(size))?];
        self.stream.read_exact(&mut body).await?;
        let mut body = Bytes::from(body);
        let header = ResponseHeader::decode(&mut body, ApiKey::Fetch.response_header_version(version))?;
        if header.correlation_id != self.correlation {
            return Err(format!("correlation id {} != {}", header.correlation_id, self.correlation).into());
        }
        Ok(FetchResponse::decode(&mut body, version)?)
    }
}

/// One Fetch on a new connection.
async fn fetch(broker: &Arc<Broker>, version: i16, request: FetchRequest) -> TestResult<FetchResponse> {
    let listener = listen(broker).await?;
    Client::connect(&listener).await?.fetch(version, &request).await
}

fn record_bytes(response: &FetchResponse) -> usize {
    response.responses.iter().flat_map(|t| &t.partitions).map(|p| p.records.as_ref().map_or(0, Bytes::len)).sum()
}

#[test]
fn topic_names_follow_kafka_rules_without_copying_huge_ones() {
    assert!(legal_topic_name("orders.v1_x-y"));
    for bad in ["", ".", "..", "a b", "a/b", "ü", &"x".repeat(250), &"x".repeat(1 << 20)] {
        assert!(!legal_topic_name(bad), "{} bytes accepted", bad.len());
    }
}

#[test]
fn a_topics_partitions_share_one_name() {
    let request = request(vec![fetch_topic("shared", 0..1000), fetch_topic(&"x".repeat(1 << 20), 0..1000)]);
    let keyed = keyed(&request, false);
    assert_eq!(keyed.requested.len(), 1000);
    let TopicKey::Name(first) = &keyed.requested[0].0.topic else { panic!("keyed by name") };
    assert!(keyed.requested.iter().all(|(k, _)| matches!(&k.topic, TopicKey::Name(n) if Arc::ptr_eq(n, first))));
    // The illegal topic is set apart, with its partitions, without a key.
    assert_eq!(keyed.rejected.len(), 1);
    assert_eq!(keyed.rejected[0].1.len(), 1000);
}

#[tokio::test]
async fn illegal_topic_names_are_answered_per_partition_and_kept_out_of_sessions() -> TestResult {
    let broker = open(BrokerConfig::local_in_memory())?;
    create_topic(&broker, "real", 1, &[])?;
    let huge = "x".repeat(1 << 20);
    let full = request(vec![fetch_topic("real", [0]), fetch_topic(&huge, 0..1000), fetch_topic("a b", [3])]).with_session_epoch(0);
    // One connection: the session belongs to it.
    let listener = listen(&broker).await?;
    let mut client = Client::connect(&listener).await?;
    let response = client.fetch(12, &full).await?;
    assert!(response.session_id > 0);
    let unknown = ResponseError::UnknownTopicOrPartition.code();
    let by_name = |n: &str| response.responses.iter().find(|t| t.topic.0.as_str() == n);
    let huge_answer = by_name(&huge).ok_or("no answer for the huge name")?;
    assert_eq!(huge_answer.partitions.len(), 1000);
    assert!(huge_answer.partitions.iter().all(|p| p.error_code == unknown));
    assert_eq!(by_name("a b").ok_or("no answer for 'a b'")?.partitions[0].error_code, unknown);
    assert_eq!(by_name("real").ok_or("no answer for real")?.partitions[0].error_code, 0);
    // The session holds the one real partition: an incremental fetch serves only it.
    let next = FetchRequest::default().with_session_id(response.session_id).with_session_epoch(1);
    let response = client.fetch(12, &next).await?;
    assert_eq!(response.error_code, 0);
    assert_eq!(response.responses.iter().map(|t| t.partitions.len()).sum::<usize>(), 0, "nothing changed, nothing answered");
    Ok(())
}

#[tokio::test]
async fn a_request_over_the_partition_bound_is_refused() -> TestResult {
    let fetch_config = FetchConfig { sessions: SessionLimits { max_partitions: 10, ..SessionLimits::default() }, ..FetchConfig::default() };
    let broker = open(BrokerConfig { fetch: fetch_config, ..BrokerConfig::local_in_memory() })?;
    create_topic(&broker, "t", 1, &[])?;
    let response = fetch(&broker, 12, request(vec![fetch_topic("t", 0..6), fetch_topic("u", 0..5)])).await?;
    assert_eq!(response.error_code, ResponseError::InvalidRequest.code());
    assert!(response.responses.is_empty());
    // Forgotten partitions count too (they are keys as well).
    let forgotten = vec![ForgottenTopic::default().with_topic(name("t")).with_partitions((0..10).collect())];
    let response = fetch(&broker, 12, request(vec![fetch_topic("t", [0])]).with_forgotten_topics_data(forgotten)).await?;
    assert_eq!(response.error_code, ResponseError::InvalidRequest.code());
    // v4–6 have no top-level error: an empty answer.
    let response = fetch(&broker, 6, request(vec![fetch_topic("t", 0..11)])).await?;
    assert!(response.responses.is_empty());
    // At the bound, served.
    let response = fetch(&broker, 12, request(vec![fetch_topic("t", 0..10)])).await?;
    assert_eq!(response.error_code, 0);
    assert_eq!(response.responses[0].partitions.len(), 10);
    Ok(())
}

#[tokio::test]
async fn responses_hold_at_most_fetch_max_bytes_whatever_the_client_asks() -> TestResult {
    let dir = tempfile::tempdir()?;
    let broker = on_disk(&dir, FetchConfig { max_bytes: 64 * 1024, ..FetchConfig::default() })?;
    create_topic(&broker, "t", 3, &[])?;
    for p in 0..3 {
        for _ in 0..10 {
            append(&broker, "t", p, 10, 1000).await?;
        }
    }
    let everything = request(vec![fetch_topic("t", 0..3)]).with_max_bytes(i32::MAX);
    let response = fetch(&broker, 12, everything).await?;
    let bytes = record_bytes(&response);
    assert!(bytes > 0 && bytes <= 64 * 1024, "{bytes} record bytes in a response bounded to 64 KiB");
    Ok(())
}

#[tokio::test]
async fn only_the_first_partition_with_data_may_exceed_the_budget() -> TestResult {
    let dir = tempfile::tempdir()?;
    let broker = on_disk(&dir, FetchConfig { max_bytes: 16 * 1024, ..FetchConfig::default() })?;
    create_topic(&broker, "t", 2, &[])?;
    let big = append(&broker, "t", 0, 1, 40 * 1024).await?;
    append(&broker, "t", 1, 1, 40 * 1024).await?;
    let response = fetch(&broker, 12, request(vec![fetch_topic("t", 0..2)])).await?;
    let partitions = &response.responses[0].partitions;
    // KIP-74: the first batch whole (a consumer must progress), the second not at all.
    assert_eq!(partitions[0].records.as_ref().map_or(0, Bytes::len), big);
    assert_eq!(partitions[1].records.as_ref().map_or(0, Bytes::len), 0);
    assert_eq!(partitions[1].high_watermark, 1);
    Ok(())
}

#[tokio::test]
async fn the_wait_is_capped() -> TestResult {
    let broker = open(BrokerConfig { fetch: FetchConfig { max_wait: Duration::from_millis(200), ..FetchConfig::default() }, ..BrokerConfig::local_in_memory() })?;
    create_topic(&broker, "t", 1, &[])?;
    let forever = request(vec![fetch_topic("t", [0])]).with_max_wait_ms(i32::MAX).with_min_bytes(1);
    let answered = tokio::time::timeout(Duration::from_secs(10), fetch(&broker, 12, forever)).await;
    assert!(matches!(answered, Ok(Ok(_))), "a max_wait_ms of i32::MAX was waited out past the cap");
    Ok(())
}

/// A client that sends a long poll and hangs up leaves nothing waiting in the broker.
#[tokio::test]
async fn a_long_poll_ends_when_its_client_hangs_up() -> TestResult {
    let dir = tempfile::tempdir()?;
    let broker = on_disk(&dir, FetchConfig { max_wait: Duration::from_secs(600), ..FetchConfig::default() })?;
    create_topic(&broker, "t", 1, &[])?;
    let listener = listen(&broker).await?;
    let mut client = Client::connect(&listener).await?;
    client.send(12, &request(vec![fetch_topic("t", [0])]).with_max_wait_ms(600_000).with_min_bytes(1)).await?;
    wait_until(|| broker.fetches.in_flight() == 1).await?;
    drop(client);
    wait_until(|| broker.fetches.in_flight() == 0).await.map_err(|_| "the long poll outlived its client")?;
    Ok(())
}

/// A long poll answers as soon as data arrives, from the blocking read path.
#[tokio::test]
async fn a_long_poll_wakes_on_an_append() -> TestResult {
    let dir = tempfile::tempdir()?;
    let broker = on_disk(&dir, FetchConfig::default())?;
    create_topic(&broker, "t", 1, &[])?;
    let listener = listen(&broker).await?;
    let mut client = Client::connect(&listener).await?;
    let poll = request(vec![fetch_topic("t", [0])]).with_max_wait_ms(20_000).with_min_bytes(1);
    let answer = tokio::spawn(async move { client.fetch(12, &poll).await });
    wait_until(|| broker.fetches.in_flight() == 1).await?;
    let appended = append(&broker, "t", 0, 3, 100).await?;
    let response = tokio::time::timeout(Duration::from_secs(10), answer).await???;
    assert_eq!(record_bytes(&response), appended);
    Ok(())
}

/// Polls `cond` for up to 10 s.
async fn wait_until(cond: impl Fn() -> bool) -> TestResult {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cond() {
        if Instant::now() > deadline {
            return Err("condition not met within 10 s".into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(())
}

#[test]
fn a_response_over_2_gib_is_refused_not_wrapped() {
    // Three partitions sharing one 1 GiB buffer (never touched: calloc maps it lazily).
    let records = Bytes::from(vec![0u8; 1 << 30]);
    let partitions = (0..3).map(|i| PartitionData::default().with_partition_index(i).with_records(Some(records.clone()))).collect();
    let response = FetchResponse::default().with_responses(vec![FetchableTopicResponse::default().with_topic(name("t")).with_partitions(partitions)]);
    let encoded = crate::router::encode_response(ApiKey::Fetch, 12, 1, &response);
    assert!(matches!(encoded, Err(crate::router::DispatchError::Encode { .. })), "{:?}", encoded.map(|b| b.len()));
}
