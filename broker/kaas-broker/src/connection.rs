//! One client connection: frames in, responses out in request order.
//!
//! The reader decodes and dispatches requests one at a time, so a request's ordered work (an
//! append, a topic change) happens in arrival order; what a request then waits for (fsync, long
//! poll) runs concurrently, and the writer sends the answers in the order the requests came.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use kafka_protocol::messages::ApiKey;
use tokio::io::{AsyncWriteExt, BufReader, BufWriter};
use tokio::net::TcpStream;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::sync::{broadcast, mpsc};
use tracing::{debug, warn};

use crate::api::api_versions;
use crate::broker::Broker;
use crate::frame::{FrameError, HeaderPrefix, read_frame};
use crate::router::{self, DispatchError, Pending, RequestContext};

/// Requests of one connection whose responses may be outstanding at once.
const MAX_IN_FLIGHT: usize = 64;

/// Why a connection is closed instead of answered.
#[derive(Debug, thiserror::Error)]
pub enum ConnectionError {
    #[error(transparent)]
    Frame(#[from] FrameError),
    #[error("unknown API key {0}")]
    UnknownApiKey(i16),
    #[error("{key:?} v{version} is not supported (supported: {min}..={max})")]
    UnsupportedVersion { key: ApiKey, version: i16, min: i16, max: i16 },
    #[error("{0:?} is not handled by this broker")]
    NotRouted(ApiKey),
    #[error("malformed request header of {key:?} v{version}: {source}")]
    Header { key: ApiKey, version: i16, source: anyhow::Error },
    #[error(transparent)]
    Dispatch(#[from] DispatchError),
}

/// Serves one connection until the client closes it, it misbehaves, or the broker shuts down.
pub async fn serve(broker: Arc<Broker>, stream: TcpStream, peer: SocketAddr, mut shutdown: broadcast::Receiver<()>) {
    let _ = stream.set_nodelay(true);
    let (read_half, write_half) = stream.into_split();
    let mut reader = BufReader::with_capacity(64 * 1024, read_half);
    let (tx, rx) = mpsc::channel(MAX_IN_FLIGHT);
    let writer = tokio::spawn(write_responses(write_half, rx, peer));
    let limit = broker.config.max_request_bytes;
    loop {
        let frame = tokio::select! {
            frame = read_frame(&mut reader, limit) => frame,
            _ = shutdown.recv() => { debug!(%peer, "closing connection: broker shutting down"); break; }
        };
        let frame = match frame {
            Ok(Some(frame)) => frame,
            Ok(None) => break,
            Err(FrameError::Io(e)) => {
                debug!(%peer, error = %e, "connection lost");
                break;
            }
            Err(e) => {
                warn!(%peer, error = %e, "closing connection: unreadable frame");
                break;
            }
        };
        match handle_frame(&broker, frame.freeze(), peer).await {
            Ok(pending) => {
                if tx.send(pending).await.is_err() {
                    break;
                }
            }
            Err(e) => {
                warn!(%peer, error = %e, "closing connection: bad request");
                break;
            }
        }
    }
    drop(tx);
    let _ = writer.await;
}

/// Parses the header of one frame and dispatches it.
pub(crate) async fn handle_frame(broker: &Arc<Broker>, mut frame: Bytes, peer: SocketAddr) -> Result<Pending, ConnectionError> {
    let prefix = HeaderPrefix::parse(&frame)?;
    let key = ApiKey::try_from(prefix.api_key).map_err(|_| ConnectionError::UnknownApiKey(prefix.api_key))?;
    let route = router::route(key).ok_or(ConnectionError::NotRouted(key))?;
    if prefix.api_version < route.min || prefix.api_version > route.max {
        if key == ApiKey::ApiVersions {
            // KIP-511: answer in v0 with UNSUPPORTED_VERSION and our ranges, so the client can
            // retry with a version we speak.
            return Ok(Pending::Ready(api_versions::unsupported_version_response(prefix.correlation_id)));
        }
        return Err(ConnectionError::UnsupportedVersion {
            key,
            version: prefix.api_version,
            min: route.min,
            max: route.max,
        });
    }
    let header = router::decode_request_header(key, prefix.api_version, &mut frame).map_err(|source| {
        ConnectionError::Header { key, version: prefix.api_version, source }
    })?;
    tracing::trace!(%peer, ?key, version = prefix.api_version, correlation_id = prefix.correlation_id, "request");
    let ctx = RequestContext { header, api_key: key, version: prefix.api_version, peer };
    Ok(router::dispatch(broker, ctx, frame).await?)
}

async fn write_responses(write_half: OwnedWriteHalf, mut rx: mpsc::Receiver<Pending>, peer: SocketAddr) {
    let mut out = BufWriter::with_capacity(64 * 1024, write_half);
    while let Some(pending) = rx.recv().await {
        let bytes = match pending {
            Pending::Ready(bytes) => Some(bytes),
            Pending::Later(handle) => handle.await.ok().flatten(),
            Pending::Silent => None,
        };
        if let Some(bytes) = bytes {
            if let Err(e) = out.write_all(&bytes).await {
                debug!(%peer, error = %e, "client went away");
                return;
            }
        }
        // Flush only when nothing else is queued, so pipelined answers share a syscall.
        if rx.is_empty() {
            if let Err(e) = out.flush().await {
                debug!(%peer, error = %e, "client went away");
                return;
            }
        }
    }
    let _ = out.flush().await;
    let _ = out.into_inner().shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::BrokerConfig;
    use crate::router::ROUTES;
    use proptest::prelude::*;

    fn broker() -> Arc<Broker> {
        match Broker::open(BrokerConfig::local_in_memory()) {
            Ok(b) => b,
            Err(e) => panic!("in-memory broker failed to open: {e}"),
        }
    }

    fn peer() -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], 1))
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, .. ProptestConfig::default() })]

        /// Arbitrary bodies behind a valid header prefix of every routed API and version: the
        /// broker answers or refuses, and never panics.
        #[test]
        fn arbitrary_request_bodies_never_panic(
            route in 0..ROUTES.len(),
            version_pick in any::<u16>(),
            correlation in any::<i32>(),
            body in proptest::collection::vec(any::<u8>(), 0..512),
        ) {
            let r = ROUTES[route];
            let span = (r.max - r.min + 1) as u16;
            let version = r.min + (version_pick % span) as i16;
            let mut frame = Vec::with_capacity(8 + body.len());
            frame.extend_from_slice(&(r.key as i16).to_be_bytes());
            frame.extend_from_slice(&version.to_be_bytes());
            frame.extend_from_slice(&correlation.to_be_bytes());
            frame.extend_from_slice(&body);
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build();
            let rt = match rt { Ok(rt) => rt, Err(e) => panic!("runtime: {e}") };
            let broker = broker();
            let _ = rt.block_on(async {
                // Deferred answers (durability waits) must not panic either; a long poll that a
                // random max_wait keeps open is cut short.
                if let Ok(Pending::Later(handle)) = handle_frame(&broker, Bytes::from(frame), peer()).await {
                    if let Ok(joined) = tokio::time::timeout(std::time::Duration::from_millis(50), handle).await {
                        assert!(joined.is_ok(), "a deferred handler panicked");
                    }
                }
            });
        }

        /// Completely arbitrary frames, including unknown keys and versions.
        #[test]
        fn arbitrary_frames_never_panic(frame in proptest::collection::vec(any::<u8>(), 0..256)) {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build();
            let rt = match rt { Ok(rt) => rt, Err(e) => panic!("runtime: {e}") };
            let broker = broker();
            rt.block_on(async {
                let _ = handle_frame(&broker, Bytes::from(frame), peer()).await;
            });
        }
    }
}
