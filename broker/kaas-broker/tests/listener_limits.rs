//! The Kafka listener against idle, slow and too many connections (issue #15): a real
//! `Server` on 127.0.0.1:0, clients on real loopback sockets (127.0.0.0/8 gives each test
//! several source addresses), and paused time, so a 10-minute timeout takes no time and is
//! measured exactly.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use kaas_broker::config::{ConnectionLimits, parse_per_ip_overrides};
use kaas_broker::connections::{Closure, Refusal};
use kaas_broker::quota::QuotaChange;
use kaas_broker::quota::model::{Entity, InvalidQuota, QuotaKey};
use kaas_broker::{Broker, BrokerConfig, Server};
use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, BrokerId, FetchRequest, RequestHeader};
use kafka_protocol::protocol::{Encodable, Request, StrBytes};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::oneshot;
use tokio::time::Instant;

type TestResult<T = ()> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// Longer than any timeout under test: "not closed within this" means "not closed".
const FOREVER: Duration = Duration::from_secs(24 * 3600);

/// A broker's listener, stopped when dropped.
struct Listener {
    addr: SocketAddr,
    broker: Arc<Broker>,
    _stop: oneshot::Sender<()>,
}

async fn start(connections: ConnectionLimits) -> TestResult<Listener> {
    start_on("127.0.0.1:0", connections).await
}

/// A listener bound to `bind`; its `addr` is the bound port on 127.0.0.1.
async fn start_on(bind: &str, connections: ConnectionLimits) -> TestResult<Listener> {
    let broker = Broker::open(BrokerConfig { connections, ..BrokerConfig::local_in_memory() })?;
    let listener = tokio::net::TcpListener::bind(bind).await?;
    let addr = SocketAddr::from(([127, 0, 0, 1], listener.local_addr()?.port()));
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(Server::new(listener, broker.clone()).run(async move {
        let _ = stopped.await;
    }));
    Ok(Listener { addr, broker, _stop: stop })
}

/// A connection to `to` from the loopback address `from`.
async fn connect_from(from: [u8; 4], to: SocketAddr) -> TestResult<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::from((from, 0)))?;
    Ok(socket.connect(to).await?)
}

async fn connect(to: SocketAddr) -> TestResult<TcpStream> {
    connect_from([127, 0, 0, 1], to).await
}

fn frame<R: Request>(correlation: i32, version: i16, request: &R) -> TestResult<Vec<u8>> {
    let key = ApiKey::try_from(R::KEY).map_err(|_| "unknown API key")?;
    let header = RequestHeader::default()
        .with_request_api_key(R::KEY)
        .with_request_api_version(version)
        .with_correlation_id(correlation)
        .with_client_id(Some(StrBytes::from_static_str("listener-test")));
    let mut body = BytesMut::new();
    header.encode(&mut body, key.request_header_version(version))?;
    request.encode(&mut body, version)?;
    let mut out = i32::try_from(body.len())?.to_be_bytes().to_vec();
    out.extend_from_slice(&body);
    Ok(out)
}

/// A Fetch of nothing that waits `max_wait` for a byte: a long poll the broker holds open.
fn long_poll(correlation: i32, max_wait: Duration) -> TestResult<Vec<u8>> {
    let request = FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(i32::try_from(max_wait.as_millis())?)
        .with_min_bytes(1)
        .with_max_bytes(1024);
    frame(correlation, 4, &request)
}

/// One response frame; `None` once the broker closed the connection.
async fn read_response(stream: &mut TcpStream) -> TestResult<Option<Vec<u8>>> {
    let mut size = [0u8; 4];
    match stream.read_exact(&mut size).await {
        Ok(_) => {}
        Err(e) if matches!(e.kind(), std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::ConnectionReset) => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    let mut body = vec![0u8; usize::try_from(i32::from_be_bytes(size))?];
    stream.read_exact(&mut body).await?;
    Ok(Some(body))
}

/// Whether the broker answers an ApiVersions on `stream` (within a minute).
async fn served(stream: &mut TcpStream, correlation: i32) -> bool {
    let Ok(request) = frame(correlation, 3, &ApiVersionsRequest::default()) else { return false };
    if stream.write_all(&request).await.is_err() {
        return false;
    }
    let answer = tokio::time::timeout(Duration::from_secs(60), read_response(stream)).await;
    matches!(answer, Ok(Ok(Some(ref r))) if r.get(0..4) == Some(&correlation.to_be_bytes()[..]))
}

/// How long until the broker closes `stream` (discarding what it sends), if within `limit`.
async fn closed_within(stream: &mut TcpStream, limit: Duration) -> Option<Duration> {
    let started = Instant::now();
    let mut buf = [0u8; 1024];
    let eof = async {
        while let Ok(n) = stream.read(&mut buf).await {
            if n == 0 {
                return;
            }
        }
    };
    tokio::time::timeout(limit, eof).await.ok().map(|()| started.elapsed())
}

/// Whether `got` is `expected`, up to the timer's millisecond rounding.
fn about(got: Option<Duration>, expected: Duration) -> bool {
    got.is_some_and(|got| got >= expected && got < expected + Duration::from_millis(50))
}

#[tokio::test(start_paused = true)]
async fn a_half_sent_frame_is_closed_at_the_request_read_timeout() -> TestResult {
    let defaults = ConnectionLimits::default();
    let listener = start(defaults.clone()).await?;
    let mut slow = connect(listener.addr).await?;
    // The size says 100 bytes; 10 arrive, then nothing.
    slow.write_all(&[&100i32.to_be_bytes()[..], &[0; 10]].concat()).await?;
    let closed = closed_within(&mut slow, FOREVER).await;
    assert!(about(closed, defaults.request_read_timeout), "closed after {closed:?}");
    assert_eq!(listener.broker.listener_metrics.closed(Closure::RequestReadTimeout), 1);
    assert!(served(&mut connect(listener.addr).await?, 1).await);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn an_idle_connection_is_closed_after_connections_max_idle_ms() -> TestResult {
    let defaults = ConnectionLimits::default();
    assert_eq!(defaults.max_idle, Duration::from_secs(600), "Kafka's connections.max.idle.ms");
    let listener = start(defaults.clone()).await?;
    let mut silent = connect(listener.addr).await?;
    let mut chatty = connect(listener.addr).await?;
    tokio::time::sleep(Duration::from_secs(400)).await;
    assert!(served(&mut chatty, 1).await, "a request resets the idle clock");
    let closed = closed_within(&mut silent, FOREVER).await;
    assert!(about(closed, Duration::from_secs(200)), "silent connection closed after {closed:?} more");
    let closed = closed_within(&mut chatty, FOREVER).await;
    assert!(about(closed, Duration::from_secs(400)), "chatty connection closed after {closed:?} more");
    assert_eq!(listener.broker.listener_metrics.closed(Closure::Idle), 2);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_connection_with_a_long_poll_outstanding_is_not_idle() -> TestResult {
    let max_idle = Duration::from_secs(2);
    let listener = start(ConnectionLimits { max_idle, ..ConnectionLimits::default() }).await?;
    let mut consumer = connect(listener.addr).await?;
    let started = Instant::now();
    consumer.write_all(&long_poll(1, Duration::from_secs(10))?).await?;
    let answer = read_response(&mut consumer).await?;
    assert!(answer.is_some(), "closed during the long poll");
    assert_eq!(started.elapsed().as_secs(), 10, "answered when the long poll ended");
    // Once answered, the idle clock runs from the answer.
    let closed = closed_within(&mut consumer, FOREVER).await;
    assert!(about(closed, max_idle), "closed {closed:?} after the answer");
    Ok(())
}

/// A client that keeps sending requests and reads none of the answers holds them outstanding
/// forever; once it has taken no response bytes for `connections.max.idle.ms`, it is closed.
#[tokio::test(start_paused = true)]
async fn a_client_that_reads_no_responses_is_closed() -> TestResult {
    let max_idle = Duration::from_secs(5);
    let listener = start(ConnectionLimits { max_idle, ..ConnectionLimits::default() }).await?;
    let socket = TcpSocket::new_v4()?;
    socket.set_recv_buffer_size(4096)?;
    let (_unread, mut requests) = socket.connect(listener.addr).await?.into_split();
    let burst = frame(1, 3, &ApiVersionsRequest::default())?.repeat(1_000);
    let started = Instant::now();
    // Writes until the broker closes the connection (then a write fails).
    let sender = tokio::spawn(async move { while requests.write_all(&burst).await.is_ok() {} });
    assert!(tokio::time::timeout(FOREVER, sender).await.is_ok(), "the connection was never closed");
    assert!(started.elapsed() >= max_idle);
    assert_eq!(listener.broker.listener_metrics.closed(Closure::ResponseStalled), 1);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn an_address_over_its_cap_is_closed_at_once_and_others_are_served() -> TestResult {
    let limits = ConnectionLimits {
        max_connections_per_ip: 2,
        max_connections_per_ip_overrides: parse_per_ip_overrides("127.0.0.3:0,127.0.0.4:3")?,
        ..ConnectionLimits::default()
    };
    let listener = start(limits).await?;
    let addr = listener.addr;
    let mut first = connect_from([127, 0, 0, 1], addr).await?;
    let mut second = connect_from([127, 0, 0, 1], addr).await?;
    assert!(served(&mut first, 1).await && served(&mut second, 2).await);
    let mut third = connect_from([127, 0, 0, 1], addr).await?;
    assert!(closed_within(&mut third, Duration::from_secs(1)).await.is_some(), "a third connection from 127.0.0.1 was kept");
    assert!(served(&mut connect_from([127, 0, 0, 2], addr).await?, 3).await, "another address is served");
    let mut barred = connect_from([127, 0, 0, 3], addr).await?;
    assert!(closed_within(&mut barred, Duration::from_secs(1)).await.is_some(), "an override of 0 bars the address");
    let mut raised = Vec::new();
    for _ in 0..3 {
        raised.push(connect_from([127, 0, 0, 4], addr).await?);
    }
    for (i, stream) in (10..).zip(raised.iter_mut()) {
        assert!(served(stream, i).await, "an override above the default cap is honoured");
    }
    assert_eq!(listener.broker.listener_metrics.refused(Refusal::PerIpLimit), 2);
    // A closed connection frees its address's place (once the broker has seen it close).
    drop(first);
    let mut served_again = false;
    for attempt in 0..50 {
        tokio::time::sleep(Duration::from_millis(10)).await;
        if served(&mut connect_from([127, 0, 0, 1], addr).await?, 100 + attempt).await {
            served_again = true;
            break;
        }
    }
    assert!(served_again);
    Ok(())
}

/// The operator's brokers listen on `[::]`, where IPv4 clients arrive as IPv4-mapped IPv6
/// addresses: a per-IP override written for the IPv4 address still applies.
#[tokio::test(start_paused = true)]
async fn a_dual_stack_listener_knows_ipv4_clients_by_their_ipv4_address() -> TestResult {
    let limits =
        ConnectionLimits { max_connections_per_ip_overrides: parse_per_ip_overrides("127.0.0.3:0")?, ..ConnectionLimits::default() };
    let listener = start_on("[::]:0", limits).await?;
    assert!(served(&mut connect_from([127, 0, 0, 2], listener.addr).await?, 1).await);
    let mut barred = connect_from([127, 0, 0, 3], listener.addr).await?;
    assert!(closed_within(&mut barred, Duration::from_secs(1)).await.is_some(), "the override of 127.0.0.3 did not apply");
    assert_eq!(listener.broker.listener_metrics.refused(Refusal::PerIpLimit), 1);
    Ok(())
}

/// With the listener full of an idle and a half-sent connection and a long poll, a newcomer
/// (a peer broker's call, say) is still served: the least recently active connection with
/// nothing outstanding gives way, and the long poll is never the one.
#[tokio::test(start_paused = true)]
async fn a_full_listener_still_serves_a_new_client() -> TestResult {
    let listener = start(ConnectionLimits { max_connections: 3, ..ConnectionLimits::default() }).await?;
    let addr = listener.addr;
    let mut idle = connect(addr).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut half = connect(addr).await?;
    half.write_all(&[&100i32.to_be_bytes()[..], &[0; 10]].concat()).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut polling = connect(addr).await?;
    let started = Instant::now();
    polling.write_all(&long_poll(1, Duration::from_secs(20))?).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;

    // The newcomers stay connected, so each one's slot has to come from someone else.
    let mut newcomer = connect(addr).await?;
    assert!(served(&mut newcomer, 1).await, "the newcomer was not served");
    assert!(closed_within(&mut idle, Duration::from_secs(1)).await.is_some(), "the oldest idle connection gave way");
    let mut second = connect(addr).await?;
    assert!(served(&mut second, 2).await, "the second newcomer was not served");
    assert!(closed_within(&mut half, Duration::from_secs(1)).await.is_some(), "the half-sent connection gave way next");
    assert_eq!(listener.broker.listener_metrics.closed(Closure::Evicted), 2);
    assert!(read_response(&mut polling).await?.is_some(), "the long poll was cut short");
    assert_eq!(started.elapsed().as_secs(), 20);
    Ok(())
}

/// When every connection has a request outstanding, nothing can give way: the newcomer is
/// closed at once (not left waiting in the backlog) and served once a slot frees up.
#[tokio::test(start_paused = true)]
async fn a_listener_full_of_busy_connections_refuses_at_once() -> TestResult {
    let listener = start(ConnectionLimits { max_connections: 2, ..ConnectionLimits::default() }).await?;
    let addr = listener.addr;
    let mut polls = Vec::new();
    for i in 0..2 {
        let mut stream = connect(addr).await?;
        stream.write_all(&long_poll(i, Duration::from_secs(30))?).await?;
        polls.push(stream);
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut newcomer = connect(addr).await?;
    let closed = closed_within(&mut newcomer, Duration::from_secs(5)).await;
    assert_eq!(closed, Some(Duration::ZERO), "the newcomer was not closed at once");
    assert_eq!(listener.broker.listener_metrics.refused(Refusal::MaxConnections), 1);
    for stream in &mut polls {
        assert!(read_response(stream).await?.is_some(), "a long poll was cut short");
    }
    assert!(served(&mut connect(addr).await?, 9).await, "answered polls give way to a newcomer");
    Ok(())
}

/// KIP-612: an address opening connections faster than its `connection_creation_rate` quota has
/// the excess closed at once (and counted), while an address with a quota of its own is served.
/// Real time: a rate of 1 a second lets the first ten through at once (a rate is measured over
/// ten seconds at least), and 25 connections opened within seconds are well over it.
#[tokio::test]
async fn an_address_over_its_connection_rate_is_refused_and_others_are_served() -> TestResult {
    let listener = start(ConnectionLimits::default()).await?;
    let rate = |ip: Option<&str>, per_second: f64| -> Result<QuotaChange, InvalidQuota> {
        let entity = Entity::from_components([("ip", ip)])?;
        Ok(QuotaChange { entity, ops: vec![(QuotaKey::ConnectionCreationRate, Some(per_second))] })
    };
    let results = listener.broker.quotas.alter(vec![rate(None, 1.0), rate(Some("127.0.0.2"), 1000.0)], false, 0);
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    let mut opened = Vec::new();
    for _ in 0..25 {
        opened.push(connect_from([127, 0, 0, 1], listener.addr).await?);
    }
    for (i, stream) in (1..).zip(opened.iter_mut().take(10)) {
        assert!(served(stream, i).await, "connection {i} of 127.0.0.1 is within the rate");
    }
    let refused = listener.broker.listener_metrics.refused(Refusal::ConnectionRate);
    assert!(refused >= 5, "only {refused} of 25 connections from 127.0.0.1 were refused");
    for i in 100..125 {
        assert!(served(&mut connect_from([127, 0, 0, 2], listener.addr).await?, i).await, "127.0.0.2 has a quota of its own");
    }
    assert_eq!(listener.broker.listener_metrics.refused(Refusal::ConnectionRate), refused);
    Ok(())
}

/// KIP-612's listener-wide `max.connection.creation.rate`: over it the listener waits before it
/// accepts more (as Kafka's acceptor does) and still serves every connection. A rate is measured
/// over ten seconds at least, so at 2 a second the first 20 go through at once and 30 take at
/// least (30 − 20) / 2 = 5 s; without the setting they take none. Paused time measures the
/// waits exactly instead of sleeping them.
#[tokio::test(start_paused = true)]
async fn a_listener_over_its_connection_creation_rate_waits_then_serves_everyone() -> TestResult {
    for rate in [None, Some(2)] {
        let listener = start(ConnectionLimits { max_connection_creation_rate: rate, ..ConnectionLimits::default() }).await?;
        let started = Instant::now();
        let mut opened = Vec::new();
        for _ in 0..30 {
            opened.push(connect(listener.addr).await?);
        }
        for (i, stream) in (1..).zip(opened.iter_mut()) {
            assert!(served(stream, i).await, "connection {i} was not served (rate {rate:?})");
        }
        let took = started.elapsed();
        let waited = listener.broker.listener_metrics.accept_throttle();
        match rate {
            None => assert!(took.is_zero() && waited == 0.0, "an unlimited listener waited {took:?} ({waited} s counted)"),
            Some(_) => {
                assert!(took >= Duration::from_secs(5), "30 connections at 2 a second were served in {took:?}");
                assert!(took < Duration::from_secs(30), "the listener waited {took:?}, far more than the rate asks");
                assert!((waited - took.as_secs_f64()).abs() < 0.1, "{waited} s counted as throttled, {took:?} waited");
            }
        }
        assert_eq!(listener.broker.listener_metrics.refused(Refusal::ConnectionRate), 0);
    }
    Ok(())
}
