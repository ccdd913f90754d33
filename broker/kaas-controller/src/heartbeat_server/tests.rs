//! The controller acknowledges beats only within its renew deadline, and a broker counts its
//! fence from when the acknowledged beat was sent: together they bound every acknowledgement a
//! paused or cut-off controller can have given by what its Lease shows.

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
    hub.renewed(deadline);
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
    status.acknowledged(1);
    assert!(status.fenced(Duration::from_millis(30)), "fresh from when beat 1 was sent, 40 ms ago, not from its ack");
    assert!(!status.fenced(Duration::from_secs(60)));

    // An acknowledgement of a beat never sent (or long forgotten) gives nothing.
    let status = HeartbeatStatus::new();
    status.acknowledged(9);
    assert!(status.fenced(Duration::from_secs(60)));
}
