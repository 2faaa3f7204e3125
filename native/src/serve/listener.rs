//! A TCP listener that serves at most N connections at once and closes the ones that hold a slot
//! without using it.
//!
//! Each accepted stream carries a semaphore permit, released when the connection closes. A
//! connection accepted while every permit is out is answered at once with `503 Service
//! Unavailable` and `Retry-After: 1`, then closed (its request is drained for at most a second so
//! that the answer is not lost to a TCP reset); at most [`REFUSING`] such answers are in flight,
//! beyond which a connection is closed without one. Nothing waits without bound in the kernel's
//! backlog.
//!
//! Each served connection ([`Conn`]) shares a [`Track`] with the request middleware (`track` in
//! the parent module, through `ConnectInfo`), which says whether a request is in flight on it.
//! From that, [`Conn::poll_read`] enforces two deadlines while no request is in flight:
//! - the **header timeout**: a new connection must send its whole first request head within it
//!   of being accepted, and a later request its head within it of its first byte;
//! - the **idle timeout**: a kept-alive connection with no request in flight is closed after it
//!   has been idle this long.
//!
//! While a request is in flight (its handler runs or its body is being sent) neither applies: a
//! long answer is not cut. A connection upgraded to a WebSocket has neither. Writes that make no
//! progress for the idle timeout (a client that stopped reading) fail the connection too.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};

/// The most `503` answers being written at once; a connection over both limits is closed unanswered.
pub(super) const REFUSING: usize = 64;

/// The answer to a connection over the limit.
const BUSY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\n\
Retry-After: 1\r\n\
Content-Type: text/plain; charset=utf-8\r\n\
Content-Length: 71\r\n\
Connection: close\r\n\
\r\n\
this server is serving its most connections (--max-connections); retry\n";

/// The two deadlines of [`Conn`] (`None`: off).
#[derive(Clone, Copy, Debug)]
pub(super) struct Timeouts {
    /// For a request's head (see the module docs).
    pub header: Option<Duration>,
    /// For a kept-alive connection with no request in flight, and for a write that makes no progress.
    pub idle: Option<Duration>,
}

/// [`TcpListener`] bounded by a semaphore.
pub(super) struct Bounded {
    inner: TcpListener,
    permits: Arc<Semaphore>,
    /// Permits for the `503` answers being written.
    refusing: Arc<Semaphore>,
    timeouts: Timeouts,
}

impl Bounded {
    /// At most `max` connections at once, each held to `timeouts`.
    pub(super) fn new(inner: TcpListener, max: usize, timeouts: Timeouts) -> Bounded {
        Bounded {
            inner,
            permits: Arc::new(Semaphore::new(max)),
            refusing: Arc::new(Semaphore::new(REFUSING)),
            timeouts,
        }
    }
}

/// What a connection's state is, as the request middleware tells it.
#[derive(Debug)]
struct TrackState {
    /// Requests in flight: from the handler's call until its response body is dropped.
    busy: usize,
    /// Switched to another protocol (a WebSocket): no deadlines any more.
    upgraded: bool,
    /// When the head of the next request started: the accept for the first, its first byte for
    /// a later one; `None` while a request is in flight, or before a kept-alive one sends a byte.
    head_since: Option<Instant>,
    /// When the last request finished (or the connection was accepted).
    idle_since: Instant,
    /// The waker of the last read that returned `Pending`, woken when the connection turns idle so
    /// that the idle deadline gets armed.
    reader: Option<Waker>,
}

/// One connection's state, shared between [`Conn`] and the request middleware.
#[derive(Debug)]
pub(super) struct Track(Mutex<TrackState>);

impl Track {
    fn new(now: Instant) -> Track {
        Track(Mutex::new(TrackState {
            busy: 0,
            upgraded: false,
            head_since: Some(now),
            idle_since: now,
            reader: None,
        }))
    }

    fn state(&self) -> std::sync::MutexGuard<'_, TrackState> {
        // A poisoned lock only means a panic elsewhere held it; the state is plain data.
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A request's handler starts: no deadlines until the returned guard is dropped (with the
    /// response body).
    pub(super) fn begin(self: &Arc<Self>) -> Busy {
        let mut s = self.state();
        s.busy += 1;
        s.head_since = None;
        Busy(self.clone())
    }

    /// The connection switched protocols (`101`): its deadlines are off for good.
    pub(super) fn upgraded(&self) {
        self.state().upgraded = true;
    }

    /// Bytes were read at `now`.
    fn read_some(&self, now: Instant) {
        let mut s = self.state();
        if s.busy == 0 && s.head_since.is_none() {
            s.head_since = Some(now);
        }
    }

    /// The read deadline now, if any; `waker` is kept to re-arm it when the connection turns idle.
    fn read_deadline(&self, t: &Timeouts, waker: &Waker) -> Option<(Instant, &'static str)> {
        let mut s = self.state();
        if s.upgraded {
            return None;
        }
        s.reader = Some(waker.clone());
        if s.busy > 0 {
            return None;
        }
        match s.head_since {
            Some(h) => t
                .header
                .map(|d| (h + d, "its request head did not arrive within the header timeout")),
            None => t.idle.map(|d| (s.idle_since + d, "it was idle for the idle timeout")),
        }
    }
}

/// A request in flight on a [`Track`]ed connection; dropping it (with the response body) ends it.
#[derive(Debug)]
pub(super) struct Busy(Arc<Track>);

impl Drop for Busy {
    fn drop(&mut self) {
        let waker = {
            let mut s = self.0.state();
            s.busy = s.busy.saturating_sub(1);
            if s.busy > 0 {
                return;
            }
            s.idle_since = Instant::now();
            s.head_since = None;
            s.reader.take()
        };
        // The connection may be parked in a read armed with no deadline (it was busy): wake it so
        // that the next read arms the idle one.
        if let Some(w) = waker {
            w.wake();
        }
    }
}

/// A connection, its permit and its deadlines.
pub(super) struct Conn {
    stream: TcpStream,
    _permit: OwnedSemaphorePermit,
    track: Arc<Track>,
    timeouts: Timeouts,
    /// The timer for the read deadline (see [`Lazy`]).
    read_timer: Lazy,
    /// The timer for a write that makes no progress.
    write_timer: Lazy,
    /// When writes stopped making progress, while they have.
    stalled_since: Option<Instant>,
}

/// A timer armed lazily: it is only moved earlier, never later, so that a deadline that moves
/// forward with every request (the idle one) costs no timer update per request. When it fires
/// before the deadline now asked for, it is re-armed then.
#[derive(Default)]
struct Lazy(Option<Pin<Box<Sleep>>>);

impl Lazy {
    /// Whether `deadline` has passed; if not, the timer wakes the task at or before it.
    fn expired(&mut self, deadline: Instant, cx: &mut Context<'_>) -> bool {
        let t = self
            .0
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        if t.deadline() > deadline {
            t.as_mut().reset(deadline);
        }
        while t.as_mut().poll(cx).is_ready() {
            if Instant::now() >= deadline {
                return true;
            }
            t.as_mut().reset(deadline);
        }
        false
    }
}

impl Conn {
    /// Its [`Track`] (for `ConnectInfo`).
    pub(super) fn track(&self) -> Arc<Track> {
        self.track.clone()
    }

    /// After a write that returned `poll`: progress ends a stall, `Pending` starts one (or goes
    /// on with it); a stall past the idle timeout is an error.
    fn after_write<T>(&mut self, cx: &mut Context<'_>, poll: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        match poll {
            Poll::Pending => {
                let Some(idle) = self.timeouts.idle else {
                    return Poll::Pending;
                };
                let since = *self.stalled_since.get_or_insert_with(Instant::now);
                if self.write_timer.expired(since + idle, cx) {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "closed: the client took nothing for the idle timeout",
                    )));
                }
                Poll::Pending
            }
            done => {
                self.stalled_since = None;
                done
            }
        }
    }
}

impl axum::serve::Listener for Bounded {
    type Io = Conn;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Conn, SocketAddr) {
        loop {
            let (stream, addr) = match self.inner.accept().await {
                Ok(a) => a,
                // Out of file descriptors or an aborted handshake: wait a moment, as axum's own
                // listener does, rather than spin.
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            };
            // Small responses (headers, 304s, 416s) go out at once.
            let _ = stream.set_nodelay(true);
            match self.permits.clone().try_acquire_owned() {
                Ok(permit) => {
                    let conn = Conn {
                        stream,
                        _permit: permit,
                        track: Arc::new(Track::new(Instant::now())),
                        timeouts: self.timeouts,
                        read_timer: Lazy::default(),
                        write_timer: Lazy::default(),
                        stalled_since: None,
                    };
                    return (conn, addr);
                }
                Err(_) => {
                    if let Ok(p) = self.refusing.clone().try_acquire_owned() {
                        tokio::spawn(async move {
                            refuse(stream).await;
                            drop(p);
                        });
                    }
                    // else: dropped, closed at once
                }
            }
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }
}

/// Writes [`BUSY`], ends the sending side and reads what the client sent (at most 64 KiB, at
/// most a second) before closing, so that its unread request does not turn the close into a
/// reset that loses the answer.
async fn refuse(mut stream: TcpStream) {
    use std::future::poll_fn;
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        let mut sent = 0;
        while sent < BUSY.len() {
            let n = poll_fn(|cx| Pin::new(&mut stream).poll_write(cx, &BUSY[sent..])).await?;
            if n == 0 {
                return Err(io::Error::from(io::ErrorKind::WriteZero));
            }
            sent += n;
        }
        poll_fn(|cx| Pin::new(&mut stream).poll_shutdown(cx)).await?;
        let mut sink = [0u8; 4096];
        let mut total = 0;
        while total < (64 << 10) {
            let mut buf = ReadBuf::new(&mut sink);
            poll_fn(|cx| Pin::new(&mut stream).poll_read(cx, &mut buf)).await?;
            if buf.filled().is_empty() {
                break;
            }
            total += buf.filled().len();
        }
        Ok::<(), io::Error>(())
    })
    .await;
}

impl AsyncRead for Conn {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let before = buf.filled().len();
        match Pin::new(&mut this.stream).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    this.track.read_some(Instant::now());
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => {
                // No deadline (a request in flight): the timer is left as it is; if it fires, the
                // task is woken once for nothing.
                let Some((deadline, why)) = this.track.read_deadline(&this.timeouts, cx.waker()) else {
                    return Poll::Pending;
                };
                if this.read_timer.expired(deadline, cx) {
                    return Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, format!("closed: {why}"))));
                }
                Poll::Pending
            }
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let p = Pin::new(&mut self.stream).poll_write(cx, buf);
        self.after_write(cx, p)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let p = Pin::new(&mut self.stream).poll_write_vectored(cx, bufs);
        self.after_write(cx, p)
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
