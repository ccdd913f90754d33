//! A connection's two halves, and how its write half sends a piped record set
//! ([`kaas_storage::piped`]): splice from the pipes into a plain TCP socket when it is writable,
//! or, on any other stream (TLS encrypts in user space, tests use in-memory pipes), read the
//! pipes and write the bytes.

use std::io;
use std::os::fd::AsFd;
use std::time::Duration;

use kaas_storage::piped::Piped;
use tokio::io::{AsyncRead, AsyncWrite, DuplexStream, ReadHalf, WriteHalf};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

use super::WriteError;

/// A stream split into the reader's and the writer's halves.
pub(super) trait Halves: Sized {
    type Read: AsyncRead + Send + Unpin + 'static;
    type Write: Sink + 'static;
    fn into_halves(self) -> (Self::Read, Self::Write);
}

/// The write half of a connection.
pub(super) trait Sink: AsyncWrite + Send + Unpin {
    /// Sends `piped` whole; each step must make progress within `stall`.
    fn send_piped(&mut self, piped: &mut Piped, stall: Duration) -> impl Future<Output = Result<(), WriteError>> + Send;
}

impl Halves for TcpStream {
    type Read = OwnedReadHalf;
    type Write = OwnedWriteHalf;
    fn into_halves(self) -> (OwnedReadHalf, OwnedWriteHalf) {
        self.into_split()
    }
}

impl Halves for tokio_rustls::server::TlsStream<TcpStream> {
    type Read = ReadHalf<Self>;
    type Write = WriteHalf<Self>;
    fn into_halves(self) -> (Self::Read, Self::Write) {
        tokio::io::split(self)
    }
}

impl Sink for OwnedWriteHalf {
    async fn send_piped(&mut self, piped: &mut Piped, stall: Duration) -> Result<(), WriteError> {
        let socket: &TcpStream = self.as_ref();
        while !piped.is_sent() {
            tokio::time::timeout(stall, socket.writable()).await.map_err(|_| WriteError::Stalled(stall))??;
            match socket.try_io(tokio::io::Interest::WRITABLE, || piped.send_to(socket.as_fd())) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }
}

impl<S: AsyncWrite + Send> Sink for WriteHalf<S> {
    async fn send_piped(&mut self, piped: &mut Piped, stall: Duration) -> Result<(), WriteError> {
        write_drained(self, piped, stall).await
    }
}

impl Sink for DuplexStream {
    async fn send_piped(&mut self, piped: &mut Piped, stall: Duration) -> Result<(), WriteError> {
        write_drained(self, piped, stall).await
    }
}

/// The copy for a stream that cannot take spliced pages.
async fn write_drained<W: AsyncWrite + Send + Unpin>(out: &mut W, piped: &mut Piped, stall: Duration) -> Result<(), WriteError> {
    let mut bytes = Vec::with_capacity(piped.len());
    piped.drain_into(&mut bytes)?;
    super::write_in_pieces(out, &bytes, stall).await
}
