//! [`AuthorityFix`]: the accepted connection seen through the [`Inspector`] until it is known
//! not to need it, then a plain pass-through.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tonic::transport::server::Connected;

use super::frames::{Inspector, Verdict};

/// Octets read from the socket per read while inspecting.
const READ_CHUNK: usize = 16 * 1024;

/// An accepted connection whose unparseable `:authority` values are repaired before `h2` reads
/// them (see the [module docs](super)).
///
/// Writes always go straight through. Reads go through the inspector only until the first
/// header block shows the client does not need it (every well-behaved client); from then on a
/// read costs one branch.
#[derive(Debug)]
pub(crate) struct AuthorityFix<T> {
    inner: T,
    inspecting: Option<Box<Inspecting>>,
    /// The connection's addresses, once a repair is recorded under them.
    recorded: Option<super::ConnAddrs>,
    addrs: Option<super::ConnAddrs>,
}

#[derive(Debug)]
struct Inspecting {
    inspector: Inspector,
    /// Read from the socket: the first `ready` octets are judged and wait for `h2`, the rest
    /// (an incomplete header block) wait for more input. One buffer, consumed from the front,
    /// so its space is reused instead of reallocated.
    buf: BytesMut,
    ready: usize,
    /// Stop inspecting once `buf` is handed on.
    done: bool,
}

impl<T> AuthorityFix<T> {
    /// Wraps an accepted connection; `addrs` (local, remote) key the record of what the client
    /// sent, read back by [`original_authority`](super::original_authority). With `repair`
    /// off the connection passes straight through from the start.
    pub(crate) fn new(inner: T, addrs: Option<super::ConnAddrs>, repair: bool) -> Self {
        Self {
            inner,
            inspecting: repair.then(|| {
                Box::new(Inspecting {
                    inspector: Inspector::default(),
                    buf: BytesMut::new(),
                    ready: 0,
                    done: false,
                })
            }),
            recorded: None,
            addrs,
        }
    }

    /// Whether reads still go through the inspector (for tests).
    #[cfg(test)]
    pub(crate) fn is_inspecting(&self) -> bool {
        self.inspecting.as_ref().is_some_and(|s| !s.done)
    }

    fn note_repair(&mut self, original: String, repaired: String) {
        let peer = self.addrs.map(|(_, remote)| remote);
        tracing::debug!(
            target: "zrpc::server::authority",
            ?peer,
            original = %original,
            repaired = %repaired,
            "rewrote an :authority that h2 would reject (a grpc-go client with several etcd hosts \
             or endpoints in its target); later requests on this connection are repaired too"
        );
        if let Some(addrs) = self.addrs {
            super::record(addrs, original);
            self.recorded = Some(addrs);
        }
    }
}

impl<T> Drop for AuthorityFix<T> {
    fn drop(&mut self) {
        if let Some(addrs) = self.recorded.take() {
            super::forget(addrs);
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for AuthorityFix<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            let Some(state) = this.inspecting.as_deref_mut() else {
                return Pin::new(&mut this.inner).poll_read(cx, out);
            };
            if state.ready > 0 {
                let n = out.remaining().min(state.ready);
                out.put_slice(&state.buf[..n]);
                state.buf.advance(n);
                state.ready -= n;
                return Poll::Ready(Ok(()));
            }
            if state.done {
                if state.buf.is_empty() {
                    this.inspecting = None;
                } else {
                    state.ready = state.buf.len();
                }
                continue;
            }
            // Read more into the spare capacity (no zeroing), then judge what is held.
            state.buf.reserve(READ_CHUNK);
            match tokio_util::io::poll_read_buf(Pin::new(&mut this.inner), cx, &mut state.buf) {
                // Nothing held: the buffer goes until more comes, so that a client that stays
                // silent after its preface (before any header block) holds no read buffer.
                Poll::Pending if state.buf.is_empty() => {
                    state.buf = BytesMut::new();
                    return Poll::Pending;
                }
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Ready(Ok(0)) => {
                    // EOF: hand on what is held; h2 will see the EOF on the next read.
                    state.done = true;
                    continue;
                }
                Poll::Ready(Ok(_)) => {}
            }
            let (released, verdict) = state.inspector.process(&mut state.buf);
            state.ready = released;
            if verdict == Verdict::PassThrough {
                state.done = true;
            }
            if let Some((original, repaired)) = state.inspector.first_repair.take() {
                this.note_repair(original, repaired);
            }
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for AuthorityFix<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

impl<T: Connected> Connected for AuthorityFix<T> {
    type ConnectInfo = T::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}
