//! One client connection: frames in, responses out in request order.
//!
//! The reader decodes and dispatches requests one at a time, so a request's ordered work (an
//! append, a topic change) happens in arrival order; what a request then waits for (fsync, long
//! poll) runs concurrently, and the writer sends the answers in the order the requests came.
//!
//! A connection is closed by the broker when it has received nothing and had nothing
//! outstanding for `connections.max.idle.ms`, when a frame is not complete within the request
//! read timeout of its first byte, when its client takes no response bytes for
//! `connections.max.idle.ms`, or when the listener evicts it (see [`crate::connections`]).

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::ApiKey;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufReader, BufWriter, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::api::api_versions;
use crate::broker::Broker;
use crate::connections::{Activity, Closure, ListenerMetrics, Slot};
use crate::frame::{FrameError, HeaderPrefix, read_frame};
use crate::metrics::TrafficMetrics;
use crate::router::{self, DispatchError, Encoded, Part, Pending, RequestContext, Response};
use crate::sasl::Session;
use crate::server::ListenerRole;
use parking_lot::Mutex;

mod sink;
use sink::{Halves, Sink};

/// Requests of one connection whose responses may be outstanding at once.
const MAX_IN_FLIGHT: usize = 64;

/// Responses are written in pieces of this size, each within `connections.max.idle.ms`, so a
/// large response to a slow reader is judged by its progress, not its total time.
const WRITE_PIECE: usize = 64 * 1024;

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
    #[error("{key:?} is not served on the {role:?} listener")]
    NotOnThisListener { key: ApiKey, role: ListenerRole },
    #[error("malformed request header of {key:?} v{version}: {source}")]
    Header { key: ApiKey, version: i16, source: anyhow::Error },
    #[error(transparent)]
    Dispatch(#[from] DispatchError),
    #[error(transparent)]
    Sasl(#[from] crate::sasl::Gate),
}

/// Why the reader stopped waiting for the next frame.
#[derive(Debug)]
enum Stop {
    /// The client closed the connection between frames.
    ClientClosed,
    Frame(FrameError),
    Idle,
    /// Closed from outside the reader (eviction, a stalled writer), already logged and counted.
    Closed,
    Shutdown,
}

/// Serves one connection until the client closes it, it misbehaves or idles, or the broker
/// shuts down. `slot` is its place in the listener's connection table, freed on return.
pub async fn serve(
    broker: Arc<Broker>,
    role: ListenerRole,
    stream: TcpStream,
    peer: SocketAddr,
    shutdown: broadcast::Receiver<()>,
    slot: Slot,
) {
    tune(&stream, &broker.config.connections, peer);
    // NB: the inter-broker listener has neither TLS nor SASL: what it serves is proven by the
    // cluster's key, request by request (`interbroker::from_a_broker`).
    let Some(tls) = tls_of(&broker, role) else {
        return serve_stream(broker, role, stream, peer, shutdown, slot, None).await;
    };
    // The handshake is part of reading the first request: bounded by the same deadline.
    let deadline = broker.config.connections.request_read_timeout;
    match tokio::time::timeout(deadline, tls.acceptor().accept(stream)).await {
        Ok(Ok(stream)) => {
            // On SASL_SSL the SASL login is the user, as in Kafka: the certificate names nobody.
            let certificate_user = match broker.config.security.sasl {
                Some(_) => Ok(None),
                None => tls.client_user(stream.get_ref().1),
            };
            match certificate_user {
                Ok(user) => serve_stream(broker, role, stream, peer, shutdown, slot, user.map(Arc::from)).await,
                // Kafka fails the authentication when no rule maps the certificate's name.
                Err(e) => {
                    broker.listener_metrics.count_closed(Closure::TlsHandshake);
                    info!(%peer, error = %e, "closing connection: TLS client certificate names no user");
                }
            }
        }
        Ok(Err(e)) => {
            broker.listener_metrics.count_closed(Closure::TlsHandshake);
            info!(%peer, error = %e, "closing connection: TLS handshake failed");
        }
        Err(_) => {
            broker.listener_metrics.count_closed(Closure::TlsHandshake);
            info!(%peer, ?deadline, "closing connection: TLS handshake not done in time");
        }
    }
}

/// Socket options of a new connection: no Nagle delay (responses are whole frames), and
/// `socket.send.buffer.bytes` when set.
fn tune(stream: &TcpStream, limits: &crate::config::ConnectionLimits, peer: SocketAddr) {
    let _ = stream.set_nodelay(true);
    if let Some(bytes) = limits.send_buffer_bytes
        && let Err(e) = nix::sys::socket::setsockopt(stream, nix::sys::socket::sockopt::SndBuf, &bytes)
    {
        debug!(%peer, error = %e, "socket.send.buffer.bytes not applied");
    }
}

/// The TLS a listener's connections speak, if any.
fn tls_of(broker: &Broker, role: ListenerRole) -> Option<Arc<crate::tls::TlsReloader>> {
    match role {
        ListenerRole::Client | ListenerRole::External => broker.config.security.tls.clone(),
        ListenerRole::InterBroker => None,
    }
}

/// Whether a listener's connections are plain TCP, whose writer splices record sets from pipes
/// into the socket (TLS encrypts in user space: its records must be read into memory anyway).
pub(crate) fn splices(broker: &Broker, role: ListenerRole) -> bool {
    tls_of(broker, role).is_none()
}

/// Serves a connection's byte stream (plain TCP or TLS over it); `certificate_user` is who the
/// client's TLS certificate names.
async fn serve_stream<S>(
    broker: Arc<Broker>,
    role: ListenerRole,
    stream: S,
    peer: SocketAddr,
    mut shutdown: broadcast::Receiver<()>,
    slot: Slot,
    certificate_user: Option<Arc<str>>,
) where
    S: Halves,
{
    let limits = &broker.config.connections;
    let activity = slot.activity().clone();
    let sasl = match role {
        ListenerRole::Client | ListenerRole::External => broker.config.security.sasl.clone(),
        ListenerRole::InterBroker => None,
    };
    let session = Arc::new(Mutex::new(Session::for_connection(sasl, certificate_user)));
    let (read_half, write_half) = stream.into_halves();
    let mut reader = BufReader::with_capacity(64 * 1024, Touching { inner: read_half, activity: activity.clone() });
    let (tx, rx) = mpsc::channel(MAX_IN_FLIGHT);
    let closed = CancellationToken::new();
    let observers = Observers { listener: slot.metrics().clone(), traffic: broker.metrics.clone() };
    let writer = tokio::spawn(write_responses(write_half, rx, peer, activity.clone(), observers, limits.max_idle));
    let mute = Arc::new(crate::quota::Mute::default());
    loop {
        // A throttled client's connection reads nothing until its throttle ran out (KIP-219).
        if let Some(until) = mute.until() {
            tokio::select! {
                _ = tokio::time::sleep_until(until) => {}
                _ = activity.closed() => break,
                _ = shutdown.recv() => break,
            }
        }
        let frame = match next_frame(&broker, &mut reader, &activity, &mut shutdown).await {
            Ok(frame) => frame,
            Err(stop) => {
                log_stop(&stop, peer, limits.max_idle, slot.metrics());
                break;
            }
        };
        activity.request_started();
        match handle_frame(&broker, role, frame, peer, &closed, &session, &mute).await {
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
    // Long polls of a connection that reads no more requests end now, not at their deadline
    // (the writer waits for them in order before it can notice the client is gone).
    closed.cancel();
    drop(tx);
    let _ = writer.await;
}

/// Waits for the next whole frame, closing the connection when it has been idle for
/// `connections.max.idle.ms`, is closed from outside, or the broker shuts down.
async fn next_frame<R: AsyncRead + Unpin>(
    broker: &Broker,
    reader: &mut BufReader<Touching<R>>,
    activity: &Activity,
    shutdown: &mut broadcast::Receiver<()>,
) -> Result<Bytes, Stop> {
    let limits = &broker.config.connections;
    // NB: the read is pinned outside the loop: an idle check that finds the connection active
    // must not drop a half-read frame.
    let read = read_frame(reader, broker.config.max_request_bytes, limits.request_read_timeout, &broker.frame_read_ahead);
    tokio::pin!(read);
    loop {
        let check_at = activity.next_idle_check(limits.max_idle);
        tokio::select! {
            frame = &mut read => return match frame {
                Ok(Some(frame)) => Ok(frame),
                Ok(None) => Err(Stop::ClientClosed),
                Err(e) => Err(Stop::Frame(e)),
            },
            _ = tokio::time::sleep_until(check_at) => {
                if activity.idle_for(limits.max_idle) {
                    return Err(Stop::Idle);
                }
            }
            _ = activity.closed() => return Err(Stop::Closed),
            _ = shutdown.recv() => return Err(Stop::Shutdown),
        }
    }
}

fn log_stop(stop: &Stop, peer: SocketAddr, max_idle: Duration, metrics: &ListenerMetrics) {
    match stop {
        Stop::ClientClosed | Stop::Closed => {}
        Stop::Shutdown => debug!(%peer, "closing connection: broker shutting down"),
        Stop::Idle => {
            metrics.count_closed(Closure::Idle);
            debug!(%peer, ?max_idle, "closing connection: idle (connections.max.idle.ms)");
        }
        Stop::Frame(FrameError::Io(e)) => debug!(%peer, error = %e, "connection lost"),
        Stop::Frame(e @ FrameError::ReadTimeout(_)) => {
            metrics.count_closed(Closure::RequestReadTimeout);
            info!(%peer, error = %e, "closing connection: frame too slow");
        }
        Stop::Frame(e) => warn!(%peer, error = %e, "closing connection: unreadable frame"),
    }
}

/// The read half, marking the connection active whenever bytes arrive.
#[derive(Debug)]
struct Touching<R> {
    inner: R,
    activity: Arc<Activity>,
}

impl<R: AsyncRead + Unpin> AsyncRead for Touching<R> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.touch();
        }
        polled
    }
}

/// Parses the header of one frame and dispatches it.
pub async fn handle_frame(
    broker: &Arc<Broker>,
    role: ListenerRole,
    mut frame: Bytes,
    peer: SocketAddr,
    closed: &CancellationToken,
    session: &Arc<Mutex<Session>>,
    mute: &Arc<crate::quota::Mute>,
) -> Result<Pending, ConnectionError> {
    let size = frame.len();
    let prefix = HeaderPrefix::parse(&frame)?;
    let key = ApiKey::try_from(prefix.api_key).map_err(|_| ConnectionError::UnknownApiKey(prefix.api_key))?;
    let route = router::route(key).ok_or(ConnectionError::NotRouted(key))?;
    if !role.serves(key) {
        return Err(ConnectionError::NotOnThisListener { key, role });
    }
    if prefix.api_version < route.min || prefix.api_version > route.max {
        if key == ApiKey::ApiVersions {
            // KIP-511: answer in v0 with UNSUPPORTED_VERSION and our ranges, so the client can
            // retry with a version we speak.
            let bytes = api_versions::unsupported_version_response(prefix.correlation_id);
            return Ok(Pending::Ready(Response::ready_now(key, bytes)));
        }
        return Err(ConnectionError::UnsupportedVersion {
            key,
            version: prefix.api_version,
            min: route.min,
            max: route.max,
        });
    }
    // Before SASL authentication only the exchange itself is served (and nothing after a
    // failed one or an expired session): the connection is closed, as Kafka closes it.
    let user = {
        let session = session.lock();
        session.admit(key)?;
        session.shared_user()
    };
    let header = router::decode_request_header(key, prefix.api_version, &mut frame).map_err(|source| {
        ConnectionError::Header { key, version: prefix.api_version, source }
    })?;
    tracing::trace!(%peer, ?key, version = prefix.api_version, correlation_id = prefix.correlation_id, "request");
    let ctx = RequestContext {
        header,
        api_key: key,
        version: prefix.api_version,
        peer,
        closed: closed.clone(),
        session: session.clone(),
        user,
        size,
        mute: mute.clone(),
        listener: role,
    };
    Ok(router::dispatch(broker, ctx, frame).await?)
}

/// Why the writer gave up on a connection.
#[derive(Debug, thiserror::Error)]
enum WriteError {
    #[error("the client took no response bytes for {0:?} (connections.max.idle.ms)")]
    Stalled(Duration),
    #[error("i/o: {0}")]
    Io(#[from] io::Error),
}

/// What the writer reports to: connection closures, and each response's queue and send times.
struct Observers {
    listener: ListenerMetrics,
    traffic: TrafficMetrics,
}

async fn write_responses<W: Sink>(
    write_half: W,
    mut rx: mpsc::Receiver<Pending>,
    peer: SocketAddr,
    activity: Arc<Activity>,
    observers: Observers,
    stall: Duration,
) {
    let mut out = BufWriter::with_capacity(64 * 1024, write_half);
    while let Some(pending) = rx.recv().await {
        let response = match pending {
            Pending::Ready(response) => Some(response),
            Pending::Later(handle) => handle.await.ok().flatten(),
            Pending::Silent => None,
        };
        let taken_at = Instant::now();
        let written = write_one(&mut out, response.as_ref().map(|r| &r.encoded), rx.is_empty(), stall).await;
        activity.request_finished();
        if let (Ok(spliced), Some(response)) = (&written, &response) {
            observers.traffic.response_written(response.api, response.ready_at, taken_at);
            observers.traffic.spliced(*spliced);
        }
        if let Err(e) = written {
            if matches!(e, WriteError::Stalled(_)) {
                observers.listener.count_closed(Closure::ResponseStalled);
                info!(%peer, error = %e, "closing connection: responses not read");
            } else {
                debug!(%peer, error = %e, "client went away");
            }
            // The reader may be waiting for bytes that no longer matter.
            activity.close();
            return;
        }
    }
    let _ = tokio::time::timeout(stall, out.flush()).await;
    let _ = out.into_inner().shutdown().await;
}

/// Writes one response (none for acks=0) and flushes when nothing else is queued, so
/// pipelined answers share a syscall. Each piece must be taken within `stall`. A response that
/// refers to its record sets instead of holding a copy goes out after what was buffered before
/// it, in vectored writes straight from them, and record sets in pipes spliced into the socket.
/// Returns the bytes spliced.
async fn write_one<W: Sink>(out: &mut BufWriter<W>, response: Option<&Encoded>, flush: bool, stall: Duration) -> Result<u64, WriteError> {
    let Some(response) = response else {
        return flush_within(out, flush, stall).await.map(|()| 0);
    };
    if response.is_gathered() {
        tokio::time::timeout(stall, out.flush()).await.map_err(|_| WriteError::Stalled(stall))??;
        let (mut run, mut spliced): (Vec<&[u8]>, u64) = (Vec::new(), 0);
        for part in response.parts() {
            let piped = match part {
                Part::Shared(bytes) => kaas_storage::piped::claim(bytes)?,
                Part::Written(_) => None,
            };
            let Some(mut piped) = piped else {
                run.push(part.bytes());
                continue;
            };
            write_all_vectored(out.get_mut(), &run, stall).await?;
            run.clear();
            out.get_mut().send_piped(&mut piped, stall).await?;
            spliced += piped.len() as u64;
        }
        return write_all_vectored(out.get_mut(), &run, stall).await.map(|()| spliced);
    }
    write_in_pieces(out, &response.to_bytes(), stall).await?;
    flush_within(out, flush, stall).await.map(|()| 0)
}

/// Writes `bytes` in [`WRITE_PIECE`]s, each taken within `stall`.
async fn write_in_pieces<W: AsyncWrite + Unpin>(out: &mut W, bytes: &[u8], stall: Duration) -> Result<(), WriteError> {
    for piece in bytes.chunks(WRITE_PIECE) {
        tokio::time::timeout(stall, out.write_all(piece)).await.map_err(|_| WriteError::Stalled(stall))??;
    }
    Ok(())
}

async fn flush_within<W: AsyncWrite + Unpin>(out: &mut W, flush: bool, stall: Duration) -> Result<(), WriteError> {
    if flush {
        tokio::time::timeout(stall, out.flush()).await.map_err(|_| WriteError::Stalled(stall))??;
    }
    Ok(())
}

/// Writes every piece, as many at once as one vectored write takes; each write must take
/// some bytes within `stall`.
async fn write_all_vectored<W: AsyncWrite + Unpin>(out: &mut W, pieces: &[&[u8]], stall: Duration) -> Result<(), WriteError> {
    // NB: Linux takes at most IOV_MAX (1,024) slices per writev.
    const MAX_SLICES: usize = 1024;
    let (mut piece, mut within) = (0, 0);
    while piece < pieces.len() {
        let slices: Vec<io::IoSlice<'_>> = pieces[piece..]
            .iter()
            .take(MAX_SLICES)
            .enumerate()
            .map(|(i, p)| io::IoSlice::new(if i == 0 { &p[within..] } else { p }))
            .collect();
        let mut n = tokio::time::timeout(stall, out.write_vectored(&slices)).await.map_err(|_| WriteError::Stalled(stall))??;
        if n == 0 {
            return Err(WriteError::Io(io::ErrorKind::WriteZero.into()));
        }
        while piece < pieces.len() && n >= pieces[piece].len() - within {
            n -= pieces[piece].len() - within;
            (piece, within) = (piece + 1, 0);
        }
        within += n;
    }
    Ok(())
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

    fn open_session() -> Arc<Mutex<Session>> {
        Arc::new(Mutex::new(Session::new(None)))
    }

    /// A frame of `key` at `version` with a null client id and `body`.
    fn frame_of(key: ApiKey, version: i16, body: &[u8]) -> Bytes {
        let mut frame = Vec::new();
        frame.extend_from_slice(&(key as i16).to_be_bytes());
        frame.extend_from_slice(&version.to_be_bytes());
        frame.extend_from_slice(&7i32.to_be_bytes());
        frame.extend_from_slice(&(-1i16).to_be_bytes());
        frame.extend_from_slice(body);
        Bytes::from(frame)
    }

    #[tokio::test]
    async fn the_inter_broker_listener_serves_only_what_brokers_send() {
        let broker = broker();
        // Metadata v1 for every topic: a null topic array.
        let all_topics = (-1i32).to_be_bytes();
        let on = |role, key, version| {
            let broker = broker.clone();
            async move {
                handle_frame(&broker, role, frame_of(key, version, &all_topics), peer(), &CancellationToken::new(), &open_session(), &Default::default())
                    .await
            }
        };
        for (key, version) in [(ApiKey::Metadata, 1), (ApiKey::Produce, 3), (ApiKey::SaslHandshake, 1), (ApiKey::DeleteTopics, 1)] {
            let refused = on(ListenerRole::InterBroker, key, version).await;
            assert!(matches!(refused, Err(ConnectionError::NotOnThisListener { .. })), "{key:?} on the inter-broker listener");
        }
        assert!(on(ListenerRole::InterBroker, ApiKey::ApiVersions, 0).await.is_ok(), "ApiVersions is served");
        assert!(on(ListenerRole::Client, ApiKey::Metadata, 1).await.is_ok(), "the client listener serves Metadata");
    }

    /// `socket.send.buffer.bytes` (Kafka's 100 KiB by default) reaches the socket (Linux reports
    /// twice what was set: it counts its bookkeeping in the buffer); unset leaves the kernel's.
    #[tokio::test]
    async fn the_send_buffer_is_what_the_limits_say() -> Result<(), Box<dyn std::error::Error>> {
        use nix::sys::socket::{getsockopt, sockopt::SndBuf};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let _client = TcpStream::connect(addr).await?;
        let (plain, _) = listener.accept().await?;
        let before = getsockopt(&plain, SndBuf)?;
        let unset = crate::config::ConnectionLimits { send_buffer_bytes: None, ..Default::default() };
        tune(&plain, &unset, addr);
        assert_eq!(getsockopt(&plain, SndBuf)?, before, "unset: the kernel's size");
        tune(&plain, &crate::config::ConnectionLimits::default(), addr);
        assert_eq!(getsockopt(&plain, SndBuf)?, 2 * 102_400);
        assert!(plain.nodelay()?);
        Ok(())
    }

    /// A gathered response goes out whole and in order behind what was buffered before it,
    /// through a reader that takes a few bytes at a time (every write partial).
    #[tokio::test]
    async fn a_gathered_response_is_written_whole_through_partial_writes() {
        use bytes::BufMut;
        use kafka_protocol::protocol::buf::{ByteBufMut, GatherBuf};
        let (client, server) = tokio::io::duplex(7);
        let mut out = BufWriter::with_capacity(64, server);
        let mut gather = GatherBuf::new(bytes::BytesMut::new(), 16);
        let big: Vec<Bytes> = (0..3u8).map(|i| Bytes::from(vec![i; 1000 + usize::from(i)])).collect();
        for (i, b) in big.iter().enumerate() {
            gather.put_slice(&[0xA0 + i as u8; 5]);
            gather.put_shared(b);
        }
        gather.put_slice(b"end");
        let (written, shared) = gather.into_parts();
        let encoded = Encoded::gathered(written.freeze(), shared);
        let expected = [&b"first"[..], &encoded.to_bytes()].concat();
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            let _ = tokio::io::AsyncReadExt::read_to_end(&mut { client }, &mut got).await;
            got
        });
        let stall = Duration::from_secs(10);
        let first = Encoded::whole(Bytes::from_static(b"first"));
        assert!(write_one(&mut out, Some(&first), false, stall).await.is_ok());
        assert!(write_one(&mut out, Some(&encoded), true, stall).await.is_ok());
        drop(out);
        assert_eq!(reader.await.ok(), Some(expected));
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
            rt.block_on(async {
                // Deferred answers (durability waits) must not panic either; a long poll that a
                // random max_wait keeps open is cut short.
                if let Ok(Pending::Later(handle)) = handle_frame(&broker, ListenerRole::Client, Bytes::from(frame), peer(), &CancellationToken::new(), &open_session(), &Default::default()).await
                    && let Ok(joined) = tokio::time::timeout(std::time::Duration::from_millis(50), handle).await
                {
                    assert!(joined.is_ok(), "a deferred handler panicked");
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
                let _ = handle_frame(&broker, ListenerRole::Client, Bytes::from(frame), peer(), &CancellationToken::new(), &open_session(), &Default::default()).await;
            });
        }
    }
}
