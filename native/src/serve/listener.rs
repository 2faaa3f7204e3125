//! A TCP listener that holds at most N connections: each accepted stream carries a semaphore
//! permit, released when the connection closes; while all permits are out, `accept` waits and new
//! connections queue in the kernel's backlog.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// [`TcpListener`] bounded by a semaphore.
pub(super) struct Bounded {
    inner: TcpListener,
    permits: Arc<Semaphore>,
}

impl Bounded {
    /// At most `max` connections at once.
    pub(super) fn new(inner: TcpListener, max: usize) -> Bounded {
        Bounded {
            inner,
            permits: Arc::new(Semaphore::new(max)),
        }
    }
}

/// A connection and its permit.
pub(super) struct Conn {
    stream: TcpStream,
    _permit: OwnedSemaphorePermit,
}

impl axum::serve::Listener for Bounded {
    type Io = Conn;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Conn, SocketAddr) {
        // The semaphore is never closed, so acquiring cannot fail; if it ever did, serving without
        // a permit would be wrong, so wait and retry instead.
        let permit = loop {
            match self.permits.clone().acquire_owned().await {
                Ok(p) => break p,
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        };
        loop {
            match self.inner.accept().await {
                Ok((stream, addr)) => {
                    // Small responses (headers, 304s, 416s) go out at once.
                    let _ = stream.set_nodelay(true);
                    return (
                        Conn {
                            stream,
                            _permit: permit,
                        },
                        addr,
                    );
                }
                // Out of file descriptors or an aborted handshake: wait a moment, as axum's own
                // listener does, rather than spin.
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }
}

impl AsyncRead for Conn {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Conn {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}
