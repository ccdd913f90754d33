//! The controller acknowledges beats only within its renew deadline, and a broker counts its
//! fence from when the acknowledged beat was sent: together they bound every acknowledgement a
//! paused or cut-off controller can have given by what its Lease shows. The controller's own
//! broker counts its fence from the controller's last renewal.

use std::sync::Arc;
use std::time::Duration;

use kaas_shared::interbroker_key::InterBrokerKey;
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};

use super::{HeartbeatHub, Role, TOKEN_METADATA, TOKEN_PURPOSE};
use crate::heartbeat_client::HeartbeatStatus;
use crate::proto::heartbeat_client::HeartbeatClient;
use crate::proto::{BrokerBeat, controller_message};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// A controller's heartbeat server on a local port.
async fn serve(hub: &Arc<HeartbeatHub>, key: &InterBrokerKey) -> Result<String, Box<dyn std::error::Error>> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?.to_string();
    let service = hub.service(key.clone());
    tokio::spawn(tonic::transport::Server::builder().add_service(service).serve_with_incoming(TcpListenerStream::new(listener)));
    Ok(address)
}

#[tokio::test]
async fn a_controller_past_its_renew_deadline_acknowledges_no_beat() -> TestResult {
    let key = InterBrokerKey::from_bytes([7; 32]);
    let hub = HeartbeatHub::new();
    hub.set_role(Role::Controller { epoch: 1 });
    let deadline = tokio::time::Instant::now() + Duration::from_millis(300);
    hub.renewed(deadline, std::time::SystemTime::now());
    let address = serve(&hub, &key).await?;

    let (beats, rx) = tokio::sync::mpsc::channel(4);
    let mut request = tonic::Request::new(ReceiverStream::new(rx));
    request.metadata_mut().insert(TOKEN_METADATA, key.token(TOKEN_PURPOSE, 3, &[]).parse()?);
    let mut client = HeartbeatClient::connect(format!("http://{address}")).await?;
    let mut inbound = client.stream(request).await?.into_inner();
    let beat = |seq| BrokerBeat { broker_id: 3, incarnation: "i".into(), seq, ..Default::default() };

    beats.send(beat(1)).await?;
    match inbound.message().await?.and_then(|m| m.kind) {
        Some(controller_message::Kind::Ack(ack)) => assert_eq!(ack.seq, 1),
        other => panic!("expected the acknowledgement of beat 1, got {other:?}"),
    }

    // The Lease was not renewed again: the role is still held (nothing stepped down yet, as
    // in a controller just resumed from a pause), but the deadline is behind.
    tokio::time::sleep_until(deadline + Duration::from_millis(50)).await;
    assert_eq!(hub.role(), Role::Controller { epoch: 1 });
    beats.send(beat(2)).await?;
    let next = tokio::time::timeout(Duration::from_secs(10), inbound.message()).await?;
    assert!(
        !matches!(&next, Ok(Some(m)) if matches!(m.kind, Some(controller_message::Kind::Ack(_)))),
        "a beat past the renew deadline was acknowledged: {next:?}"
    );
    Ok(())
}

#[test]
fn a_late_acknowledgement_gives_only_the_freshness_of_its_beat() {
    let status = HeartbeatStatus::new();
    assert!(status.fenced(Duration::from_secs(60)), "nothing acknowledged yet");
    status.sent(1);
    std::thread::sleep(Duration::from_millis(40));
    status.acknowledged(1, 0);
    assert!(status.fenced(Duration::from_millis(30)), "fresh from when beat 1 was sent, 40 ms ago, not from its ack");
    assert!(!status.fenced(Duration::from_secs(60)));

    // An acknowledgement of a beat never sent (or long forgotten) gives nothing.
    let status = HeartbeatStatus::new();
    status.acknowledged(9, 0);
    assert!(status.fenced(Duration::from_secs(60)));
}

/// Micros since the Unix epoch of `t`.
fn micros(t: std::time::SystemTime) -> i64 {
    t.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_micros() as i64)
}

#[test]
fn the_own_broker_counts_its_fence_from_what_its_acknowledgement_says_when_that_is_earlier() {
    let now = std::time::SystemTime::now();
    let status = HeartbeatStatus::new();
    status.sent(1);
    status.acknowledged(1, micros(now - Duration::from_secs(2)));
    assert!(status.fenced(Duration::from_secs(1)), "fresh as of two seconds ago");
    assert!(!status.fenced(Duration::from_secs(60)));
    // A time after the beat was sent (as while renewals keep up) gives the beat's freshness.
    let status = HeartbeatStatus::new();
    status.sent(1);
    status.acknowledged(1, micros(now + Duration::from_secs(60)));
    assert!(!status.fenced(Duration::from_secs(1)), "as fresh as its beat");
}

#[derive(Debug)]
struct Leads(i32);

impl crate::heartbeat_client::BeatSource for Leads {
    fn partitions_led(&self) -> Vec<String> {
        vec![format!("t-{}", self.0)]
    }
    fn assignment_version(&self) -> i64 {
        1
    }
    fn draining(&self) -> bool {
        false
    }
}

/// Over real streams: the controller's own broker (0) is acknowledged as of the time its
/// controller's last renewal gave — fenced when that is older than the fence timeout, although
/// its beats are answered — and fresh again once the Lease is renewed; another broker (1) is
/// acknowledged as of its beats all along.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_controller_s_own_broker_is_acknowledged_as_of_the_last_renewal() -> TestResult {
    let key = InterBrokerKey::from_bytes([7; 32]);
    let hub = HeartbeatHub::of_broker(0);
    hub.set_role(Role::Controller { epoch: 1 });
    let far = tokio::time::Instant::now() + Duration::from_secs(600);
    hub.renewed(far, std::time::SystemTime::now() - Duration::from_secs(5));
    let address = serve(&hub, &key).await?;
    let (_controller, controller_rx) = tokio::sync::watch::channel(Some(address));
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let statuses = [HeartbeatStatus::new(), HeartbeatStatus::new()];
    for (id, status) in statuses.iter().enumerate() {
        let id = id as i32;
        let run = crate::heartbeat_client::run(id, key.clone(), format!("i{id}"), Arc::new(Leads(id)), controller_rx.clone(), status.clone(), stop_rx.clone());
        tokio::spawn(run);
    }
    let fence = Duration::from_secs(2);
    let until = tokio::time::Instant::now() + Duration::from_secs(20);
    while statuses[0].since_last_ack().is_none() || statuses[1].fenced(fence) {
        assert!(tokio::time::Instant::now() < until, "both brokers beating and broker 1 acknowledged");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let since = statuses[0].since_last_ack().ok_or("broker 0 was never acknowledged")?;
    assert!(since >= Duration::from_secs(5), "broker 0 is acknowledged as of 5 s ago, not {since:?} ago");
    assert!(statuses[0].fenced(fence));

    hub.renewed(far, std::time::SystemTime::now());
    while statuses[0].fenced(fence) {
        assert!(tokio::time::Instant::now() < until, "broker 0 fresh after the renewal");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = stop.send(true);
    Ok(())
}

/// A broker whose partition statistics wait, as they do for a partition lock that a take-over
/// holds across a slow volume's fsyncs, until the test releases them (30 s at most).
#[derive(Debug, Default)]
struct HeldStats {
    /// (asked at least once, released)
    state: std::sync::Mutex<(bool, bool)>,
    changed: std::sync::Condvar,
}

impl HeldStats {
    fn asked(&self) -> bool {
        self.state.lock().is_ok_and(|s| s.0)
    }
    fn release(&self) {
        if let Ok(mut s) = self.state.lock() {
            s.1 = true;
        }
        self.changed.notify_all();
    }
}

impl crate::heartbeat_client::BeatSource for HeldStats {
    fn partitions_led(&self) -> Vec<String> {
        vec![kaas_shared::names::partition_key("orders", 0)]
    }
    fn assignment_version(&self) -> i64 {
        1
    }
    fn draining(&self) -> bool {
        false
    }
    fn partition_stats(&self) -> std::collections::BTreeMap<crate::stats::PartitionId, crate::stats::PartitionStats> {
        let Ok(mut s) = self.state.lock() else { return Default::default() };
        s.0 = true;
        // Bounded, so that a beat stuck behind this fails the test instead of hanging it.
        let Ok((s, _)) = self.changed.wait_timeout_while(s, Duration::from_secs(30), |s| !s.1) else { return Default::default() };
        drop(s);
        let stats = crate::stats::PartitionStats { log_end_offset: 42, high_watermark: 42, size_bytes: 4096 };
        [(("orders".to_string(), 0), stats)].into()
    }
}

/// A controller's hub on a local port and broker 1 beating to it with `source` and `status`
/// until the returned sender says stop.
async fn broker_1_beating(
    source: Arc<dyn crate::heartbeat_client::BeatSource>,
    status: Arc<HeartbeatStatus>,
) -> Result<(Arc<HeartbeatHub>, tokio::sync::watch::Sender<bool>), Box<dyn std::error::Error>> {
    let key = InterBrokerKey::from_bytes([7; 32]);
    let hub = HeartbeatHub::new();
    hub.set_role(Role::Controller { epoch: 1 });
    let address = serve(&hub, &key).await?;
    let (controller, controller_rx) = tokio::sync::watch::channel(Some(address));
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        // The controller's address stays put for as long as the broker beats.
        let _controller = controller;
        crate::heartbeat_client::run(1, key, "i1".into(), source, controller_rx, status, stop_rx).await;
    });
    Ok((hub, stop))
}

/// The beat the broker's session and fence hang on goes on while its partition statistics wait
/// for a lock (held open here for three fence timeouts); the statistics follow once they come.
/// Built on the beat, a broker taking over thousands of partitions on a slow volume stopped
/// beating, lost its session and made the cluster flap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn beats_go_on_while_the_partition_statistics_wait_for_a_lock() -> TestResult {
    let source = Arc::new(HeldStats::default());
    let status = HeartbeatStatus::new();
    let (hub, stop) = broker_1_beating(source.clone(), status.clone()).await?;

    let fence = Duration::from_secs(1);
    let until = tokio::time::Instant::now() + Duration::from_secs(20);
    while !source.asked() || status.since_last_ack().is_none() {
        assert!(tokio::time::Instant::now() < until, "the statistics asked for and a beat acknowledged while they wait");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let held_until = tokio::time::Instant::now() + 3 * fence;
    while tokio::time::Instant::now() < held_until {
        assert!(!status.fenced(fence), "fenced while the partition statistics waited for a lock");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let reported = hub.reports(Duration::from_secs(60));
    assert!(reported.get(&1).is_some_and(|r| r.partitions.is_empty()), "no statistics before they were released: {reported:?}");

    source.release();
    let want = crate::stats::PartitionStats { log_end_offset: 42, high_watermark: 42, size_bytes: 4096 };
    loop {
        let reported = hub.reports(Duration::from_secs(60));
        if reported.get(&1).and_then(|r| r.partitions.get(&("orders".to_string(), 0))) == Some(&want) {
            break;
        }
        assert!(tokio::time::Instant::now() < until + 3 * fence, "the released statistics reached the controller: {reported:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = stop.send(true);
    Ok(())
}

/// A broker leading as many partitions as it is told.
#[derive(Debug, Default)]
struct Counted(std::sync::atomic::AtomicUsize);

impl crate::heartbeat_client::BeatSource for Counted {
    fn partitions_led(&self) -> Vec<String> {
        (0..self.0.load(std::sync::atomic::Ordering::SeqCst)).map(|p| format!("t/{p}")).collect()
    }
    fn assignment_version(&self) -> i64 {
        self.0.load(std::sync::atomic::Ordering::SeqCst) as i64
    }
    fn draining(&self) -> bool {
        false
    }
}

/// A broker with news for the controller (it applied an assignment and ran its take-overs)
/// beats at once rather than at its next tick, so a controller handing out partitions in steps
/// sees each step led without waiting for a beat. The ticks here are an hour apart: after the
/// first beat, only the news can reach the controller within the test.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_with_news_beats_at_once_not_at_its_next_tick() -> TestResult {
    let source = Arc::new(Counted::default());
    source.0.store(1, std::sync::atomic::Ordering::SeqCst);
    let status = HeartbeatStatus::beating_every(Duration::from_secs(3600));
    let (hub, stop) = broker_1_beating(source.clone(), status.clone()).await?;

    let led = || hub.alive(Duration::from_secs(3600)).get(&1).map(|s| (s.partitions_led, s.assignment_version));
    let until = tokio::time::Instant::now() + Duration::from_secs(20);
    while led() != Some((1, 1)) {
        assert!(tokio::time::Instant::now() < until, "the first beat arrived: {:?}", led());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for news in 2..=4 {
        source.0.store(news, std::sync::atomic::Ordering::SeqCst);
        status.beat_now.notify_one();
        while led() != Some((news, news as i64)) {
            assert!(tokio::time::Instant::now() < until, "the news reached the controller: {:?}", led());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let _ = stop.send(true);
    Ok(())
}
