//! The Kafka listeners: accepts connections within the connection caps and shuts down as a
//! protocol. A broker has a client listener (the one clients are told about, with its TLS and
//! SASL) and, in a cluster, an inter-broker one (Kafka's `inter.broker.listener.name`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::broadcast;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use crate::broker::Broker;
use crate::connection;
use crate::connections::{ConnectionTable, ListenerMetrics, Refusal};
use crate::quota::rate::Rate;

/// How long the listener pauses after a failed accept.
// NB: the usual failure is running out of file descriptors (EMFILE), which a retry at once
// would only repeat in a busy loop; closing connections free some meanwhile.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Which of a broker's listeners a connection came in on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListenerRole {
    /// The Kafka listener clients use, secured as `--security-protocol` says.
    Client,
    /// The listener for clients outside the client listener's network (`--external-listen`):
    /// secured and served like the client listener, announcing the brokers' external addresses
    /// ([`crate::external`]).
    External,
    /// Where the brokers of a cluster send each other what only brokers send (WriteTxnMarkers,
    /// AddPartitionsToTxn verification and adds, AddOffsetsToTxn for a TxnOffsetCommit v5, ACL
    /// quota and group config changes forwarded to the controller, share-group offset changes
    /// sent by a group's coordinator to partition leaders), whatever the
    /// client listener's TLS and SASL: it serves only those (and ApiVersions), each proven a broker's by its inter-broker token, and its
    /// connection slots are its own, so clients filling theirs do not stall the brokers.
    InterBroker,
}

impl ListenerRole {
    /// Whether a request of `key` is served on this listener; others close the connection.
    pub fn serves(self, key: kafka_protocol::messages::ApiKey) -> bool {
        use kafka_protocol::messages::ApiKey as K;
        match self {
            ListenerRole::Client | ListenerRole::External => true,
            ListenerRole::InterBroker => {
                matches!(
                    key,
                    K::ApiVersions
                        | K::WriteTxnMarkers
                        | K::AddPartitionsToTxn
                        | K::AddOffsetsToTxn
                        | K::CreateAcls
                        | K::DeleteAcls
                        | K::AlterClientQuotas
                        | K::IncrementalAlterConfigs
                        | K::AlterShareGroupOffsets
                        | K::DeleteShareGroupOffsets
                        | K::DescribeShareGroupOffsets
                )
            }
        }
    }
}

/// A bound listener, ready to serve.
#[derive(Debug)]
pub struct Server {
    listener: TcpListener,
    broker: Arc<Broker>,
    role: ListenerRole,
}

impl Server {
    /// Serves `broker`'s clients on an already bound listener (bind first to learn an
    /// ephemeral port).
    pub fn new(listener: TcpListener, broker: Arc<Broker>) -> Server {
        Server { listener, broker, role: ListenerRole::Client }
    }

    /// Serves `broker`'s clients from outside on an already bound external listener.
    pub fn external(listener: TcpListener, broker: Arc<Broker>) -> Server {
        Server { listener, broker, role: ListenerRole::External }
    }

    /// Serves the other brokers of `broker`'s cluster on an already bound listener.
    pub fn inter_broker(listener: TcpListener, broker: Arc<Broker>) -> Server {
        Server { listener, broker, role: ListenerRole::InterBroker }
    }

    /// This listener's connection counters.
    fn metrics(&self) -> &ListenerMetrics {
        match self.role {
            // NB: the external listener's clients are clients: counted with the client listener's.
            ListenerRole::Client | ListenerRole::External => &self.broker.listener_metrics,
            ListenerRole::InterBroker => &self.broker.interbroker_listener_metrics,
        }
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `shutdown` resolves, then closes every connection and waits for them.
    pub async fn run(self, shutdown: impl std::future::Future<Output = ()>) {
        let table = ConnectionTable::new(self.broker.config.connections.clone(), self.metrics().clone());
        let (stop_tx, _) = broadcast::channel::<()>(1);
        let mut connections = JoinSet::new();
        let mut creation_rate = match self.role {
            ListenerRole::Client | ListenerRole::External => self.broker.config.connections.max_connection_creation_rate.map(CreationRate::new),
            ListenerRole::InterBroker => None,
        };
        tokio::pin!(shutdown);
        loop {
            let accepted = tokio::select! {
                accepted = self.listener.accept() => accepted,
                _ = &mut shutdown => break,
            };
            match accepted {
                // NB: on a dual-stack `[::]` listener an IPv4 client arrives as `::ffff:a.b.c.d`;
                // per-IP caps, ACL hosts and logs know it by its IPv4 address.
                Ok((stream, peer)) => {
                    let peer = SocketAddr::new(peer.ip().to_canonical(), peer.port());
                    // KIP-612's listener-wide rate: over it, this connection and the ones behind
                    // it in the backlog wait (Kafka's acceptor waits the same way).
                    if let Some(wait) = creation_rate.as_mut().map(CreationRate::record).filter(|w| !w.is_zero()) {
                        self.metrics().count_accept_throttle(wait);
                        debug!(%peer, ?wait, "accept throttled: max.connection.creation.rate");
                        tokio::select! {
                            _ = tokio::time::sleep(wait) => {}
                            _ = &mut shutdown => break,
                        }
                    }
                    self.admit(&table, stream, peer, &stop_tx, &mut connections)
                }
                Err(e) => {
                    warn!(error = %e, "accept failed");
                    tokio::select! {
                        _ = tokio::time::sleep(ACCEPT_BACKOFF) => {}
                        _ = &mut shutdown => break,
                    }
                }
            }
            // Reap finished connections so the set does not grow without bound.
            while connections.try_join_next().is_some() {}
        }
        info!(listener = ?self.role, open = connections.len(), "listener stopped; closing connections");
        let _ = stop_tx.send(());
        while connections.join_next().await.is_some() {}
    }

    /// Serves `stream` if the connection table admits it; otherwise closes it at once.
    fn admit(&self, table: &Arc<ConnectionTable>, stream: TcpStream, peer: SocketAddr, stop: &broadcast::Sender<()>, connections: &mut JoinSet<()>) {
        // KIP-612: an address over its connection_creation_rate is refused. (Kafka keeps such
        // a connection open for the throttle time before closing it; kaas closes it at once,
        // so a flood holds no descriptors.)
        let throttle = match self.role {
            ListenerRole::Client | ListenerRole::External => self.broker.quotas.record_connection(peer.ip(), tokio::time::Instant::now()),
            ListenerRole::InterBroker => Duration::ZERO,
        };
        if !throttle.is_zero() {
            self.metrics().count_refused(Refusal::ConnectionRate);
            debug!(%peer, ?throttle, "connection refused: connection_creation_rate");
            drop(stream);
            return;
        }
        match table.admit(peer.ip()) {
            Ok(slot) => {
                let broker = self.broker.clone();
                let stop = stop.subscribe();
                connections.spawn(connection::serve(broker, self.role, stream, peer, stop, slot));
            }
            // Debug, not warn: whoever floods the listener would flood the log too; the
            // refusals are counted in kaas_connections_refused_total.
            Err(refusal) => debug!(%peer, reason = refusal.label(), "connection refused"),
        }
    }
}

/// The listener's connection creation rate (`max.connection.creation.rate`), measured like a
/// client quota.
struct CreationRate {
    bound: f64,
    rate: Rate,
}

impl CreationRate {
    fn new(per_second: u32) -> CreationRate {
        CreationRate { bound: f64::from(per_second), rate: Rate::new(Instant::now()) }
    }

    /// Counts one new connection; how long the listener waits before serving it.
    fn record(&mut self) -> Duration {
        self.rate.record_throttle(1.0, self.bound, Instant::now())
    }
}
