//! The Kafka listener: accepts connections up to a cap and shuts down as a protocol.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::{Semaphore, broadcast};
use tokio::task::JoinSet;
use tracing::{info, warn};

use crate::broker::Broker;
use crate::connection;

/// A bound listener, ready to serve.
#[derive(Debug)]
pub struct Server {
    listener: TcpListener,
    broker: Arc<Broker>,
}

impl Server {
    /// Serves `broker` on an already bound listener (bind first to learn an ephemeral port).
    pub fn new(listener: TcpListener, broker: Arc<Broker>) -> Server {
        Server { listener, broker }
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `shutdown` resolves, then closes every connection and waits for them.
    pub async fn run(self, shutdown: impl std::future::Future<Output = ()>) {
        let permits = Arc::new(Semaphore::new(self.broker.config.max_connections));
        let (stop_tx, _) = broadcast::channel::<()>(1);
        let mut connections = JoinSet::new();
        tokio::pin!(shutdown);
        loop {
            let permit = tokio::select! {
                permit = permits.clone().acquire_owned() => match permit {
                    Ok(permit) => permit,
                    Err(_) => break,
                },
                _ = &mut shutdown => break,
            };
            let accepted = tokio::select! {
                accepted = self.listener.accept() => accepted,
                _ = &mut shutdown => break,
            };
            match accepted {
                Ok((stream, peer)) => {
                    let broker = self.broker.clone();
                    let stop = stop_tx.subscribe();
                    connections.spawn(async move {
                        connection::serve(broker, stream, peer, stop).await;
                        drop(permit);
                    });
                }
                Err(e) => warn!(error = %e, "accept failed"),
            }
            // Reap finished connections so the set does not grow without bound.
            while connections.try_join_next().is_some() {}
        }
        info!(open = connections.len(), "listener stopped; closing connections");
        let _ = stop_tx.send(());
        while connections.join_next().await.is_some() {}
    }
}
