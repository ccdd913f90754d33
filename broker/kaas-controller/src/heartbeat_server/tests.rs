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
