//! Only the brokers of a cluster may send what brokers send each other: WriteTxnMarkers and
//! AddPartitionsToTxn v4+ on the Kafka and inter-broker ports, and heartbeats on the heartbeat
//! port. A client
//! without the cluster's inter-broker key is refused, whatever it claims to be.

mod common;

use std::time::Duration;

use common::TestResult;
use common::cluster::Cluster;
use common::wire::Wire;
use common::workload::create_topic;
use kaas_controller::heartbeat_server::{TOKEN_METADATA, TOKEN_PURPOSE};
use kaas_controller::proto::heartbeat_client::HeartbeatClient;
use kaas_controller::proto::{BrokerBeat, ControllerMessage, controller_message};
use kaas_shared::interbroker_key::InterBrokerKey;
use kaas_shared::layout::Layout;
use kafka_protocol::ResponseError;
use kafka_protocol::messages::add_partitions_to_txn_request::{AddPartitionsToTxnTopic, AddPartitionsToTxnTransaction};
use kafka_protocol::messages::write_txn_markers_request::{WritableTxnMarker, WritableTxnMarkerTopic};
use kafka_protocol::messages::{AddPartitionsToTxnRequest, ProducerId, TopicName, TransactionalId, WriteTxnMarkersRequest};
use kafka_protocol::protocol::StrBytes;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Code;

const SETTLE: Duration = Duration::from_secs(30);

/// A commit marker from "the coordinator with the highest epoch there is": accepted, it would
/// make every later marker of that partition's real coordinator look stale.
fn hostile_marker(topic: &str) -> WriteTxnMarkersRequest {
    WriteTxnMarkersRequest::default().with_markers(vec![
        WritableTxnMarker::default()
            .with_producer_id(ProducerId(4242))
            .with_producer_epoch(0)
            .with_transaction_result(true)
            .with_coordinator_epoch(i32::MAX)
            .with_topics(vec![
                WritableTxnMarkerTopic::default()
                    .with_name(TopicName(StrBytes::from_string(topic.to_owned())))
                    .with_partition_indexes(vec![0]),
            ]),
    ])
}

fn verification(topic: &str) -> AddPartitionsToTxnRequest {
    AddPartitionsToTxnRequest::default().with_transactions(vec![
        AddPartitionsToTxnTransaction::default()
            .with_transactional_id(TransactionalId(StrBytes::from_static_str("someone-elses")))
            .with_producer_id(ProducerId(4242))
            .with_producer_epoch(0)
            .with_verify_only(true)
            .with_topics(vec![
                AddPartitionsToTxnTopic::default()
                    .with_name(TopicName(StrBytes::from_string(topic.to_owned())))
                    .with_partitions(vec![0]),
            ]),
    ])
}

fn marker_code(response: &kafka_protocol::messages::WriteTxnMarkersResponse) -> Vec<i16> {
    response.markers.iter().flat_map(|m| &m.topics).flat_map(|t| &t.partitions).map(|p| p.error_code).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn only_the_clusters_brokers_may_send_markers_verifications_and_heartbeats() -> TestResult {
    let cluster = Cluster::start(3).await?;
    cluster.wait_assignment(SETTLE, |a| a.brokers.len() == 3).await?;
    create_topic(&cluster, "guarded", 1).await?;
    let placed = cluster.wait_assignment(SETTLE, |a| a.partitions.len() == 1).await?;
    cluster.wait_led(SETTLE, &placed).await?;
    let leader = placed.partition("guarded", 0).ok_or("guarded/0 is not placed")?.leader;
    let leader_address = cluster.nodes.get(&leader).ok_or("no such node")?.bootstrap.clone();
    let interbroker_address =
        placed.brokers.get(&leader).and_then(|e| e.interbroker.clone()).ok_or("the leader has no inter-broker listener")?;
    assert_ne!(interbroker_address, leader_address, "brokers call each other on a listener of their own");
    let layout = Layout::new(cluster.data());
    let key = InterBrokerKey::load_or_create(&kaas_shared::fs::RealFs, &layout)?;

    // The Kafka port and the inter-broker one: a client's broker-only requests, with its own
    // client id or a forged token, are refused; the same request signed with the cluster's key
    // is served. The inter-broker port serves nothing but what brokers send.
    let signed = key.token("kafka:27:1", leader, &{
        use kafka_protocol::protocol::Encodable;
        let mut body = bytes::BytesMut::new();
        hostile_marker("guarded").with_markers(vec![]).encode(&mut body, 1)?;
        body
    });
    let leader_broker = cluster.nodes.get(&leader).ok_or("no such node")?.broker.clone();
    tokio::task::spawn_blocking(move || -> TestResult {
        let refused = ResponseError::ClusterAuthorizationFailed.code();
        let forged = format!("kaas1.{leader}.{}.{}", std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_millis(), "00".repeat(32));
        for address in [&leader_address, &interbroker_address] {
            for client_id in ["kaas-interbroker", forged.as_str(), signed.as_str()] {
                let mut wire = Wire::connect_as(address, client_id)?;
                let markers = wire.call(1, &hostile_marker("guarded"))?;
                assert_eq!(marker_code(&markers), vec![refused], "WriteTxnMarkers to {address} from client id {client_id:?}");
                let verified = wire.call(4, &verification("guarded"))?;
                assert_eq!(verified.error_code, refused, "AddPartitionsToTxn v4 to {address} from client id {client_id:?}");
            }
        }
        let mut wire = Wire::connect(&interbroker_address)?;
        let metadata = wire.call(12, &kafka_protocol::messages::MetadataRequest::default());
        assert!(metadata.is_err(), "the inter-broker listener answered Metadata: {metadata:?}");
        // Positive control: a token over this very request (an empty marker list) is a broker's.
        let empty = WriteTxnMarkersRequest::default();
        let clients_open = leader_broker.listener_metrics.open();
        let mut wires = Vec::new();
        for _ in 0..5 {
            let mut wire = Wire::connect_as(&interbroker_address, &signed)?;
            let answered = wire.call(1, &empty)?;
            assert!(answered.markers.is_empty(), "the signed empty request is served: {answered:?}");
            wires.push(wire);
        }
        // Their connections are counted on the inter-broker listener, not among the clients'
        // (whose count earlier connections closing may still lower).
        assert!(leader_broker.interbroker_listener_metrics.open() >= 5, "{}", leader_broker.interbroker_listener_metrics.open());
        assert!(leader_broker.listener_metrics.open() <= clients_open, "{} > {clients_open}", leader_broker.listener_metrics.open());
        Ok(())
    })
    .await??;

    // The heartbeat port: without a token no stream opens on any broker; with a token of
    // broker 7, a beat that claims to be broker 2 (draining) ends the stream unacknowledged,
    // while broker 7's own beats are acknowledged by the controller (broker 7 has no registration,
// so the controller places nothing on it).
    let registrations = kaas_shared::brokers::list(&kaas_shared::fs::RealFs, &layout)?;
    let mut controller = None;
    for r in &registrations {
        let mut client = HeartbeatClient::connect(format!("http://{}", r.heartbeat)).await?;
        let (_tx, rx) = tokio::sync::mpsc::channel::<BrokerBeat>(1);
        let status = client.stream(ReceiverStream::new(rx)).await.err().ok_or("a stream opened without a token")?;
        assert_eq!(status.code(), Code::Unauthenticated, "broker {}: {status}", r.broker_id);
        let token = key.token(TOKEN_PURPOSE, 7, &[]);
        match open(&r.heartbeat, &token).await {
            Ok(stream) => controller = Some((r.heartbeat.clone(), stream, token)),
            Err(status) => assert_eq!(status.code(), Code::FailedPrecondition, "broker {}: {status}", r.broker_id),
        }
    }
    let (address, (tx, mut inbound), used) = controller.ok_or("no broker took a heartbeat stream: no controller")?;
    let replayed = open(&address, &used).await.err().ok_or("a used token opened a second stream")?;
    assert_eq!(replayed.code(), Code::Unauthenticated, "{replayed}");
    tx.send(beat(2, true)).await?;
    loop {
        match tokio::time::timeout(SETTLE, inbound.message()).await? {
            Ok(Some(ControllerMessage { kind: Some(controller_message::Kind::Ack(_)) })) => {
                return Err("a beat for broker 2 on broker 7's stream was acknowledged".into());
            }
            Ok(Some(_)) => continue, // an assignment push
            Ok(None) | Err(_) => break,  // the controller closed the stream
        }
    }
    // (Broker 8: a token opens one stream only, and broker 7's opened the one above.)
    let (tx, mut inbound) = open(&address, &key.token(TOKEN_PURPOSE, 8, &[])).await?;
    tx.send(beat(8, false)).await?;
    loop {
        match tokio::time::timeout(SETTLE, inbound.message()).await?? {
            Some(ControllerMessage { kind: Some(controller_message::Kind::Ack(_)) }) => break,
            Some(_) => continue,
            None => return Err("broker 8's own stream ended without an acknowledgement".into()),
        }
    }
    Ok(())
}

type Beats = tokio::sync::mpsc::Sender<BrokerBeat>;

async fn open(address: &str, token: &str) -> Result<(Beats, tonic::Streaming<ControllerMessage>), tonic::Status> {
    let mut client =
        HeartbeatClient::connect(format!("http://{address}")).await.map_err(|e| tonic::Status::unavailable(e.to_string()))?;
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let mut request = tonic::Request::new(ReceiverStream::new(rx));
    request.metadata_mut().insert(TOKEN_METADATA, token.parse().map_err(|_| tonic::Status::internal("token"))?);
    let inbound = client.stream(request).await?.into_inner();
    Ok((tx, inbound))
}

fn beat(broker_id: i32, draining: bool) -> BrokerBeat {
    BrokerBeat { broker_id, incarnation: format!("test-{broker_id}"), draining, seq: 1, ..Default::default() }
}
