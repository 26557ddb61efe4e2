//! [`WriteStall`]: a DevServer connection whose client stops reading is closed.
//!
//! hyper's HTTP/1 server bounds the wait for a request's headers, not the wait for the socket
//! to take a response: a client that pipelines requests and never reads would hold its
//! connection, one of the port's 128, for good, and 128 such clients would lock the health
//! probe out. A write the socket has not taken for [`WRITE_STALL`] fails, and hyper drops the
//! connection.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// How long a response may wait for the client to read.
pub(super) const WRITE_STALL: Duration = Duration::from_secs(10);

/// `T` whose writes fail after [`WRITE_STALL`] without progress.
#[derive(Debug)]
pub(super) struct WriteStall<T> {
    inner: T,
    /// Armed while a write waits for the socket.
    stalled: Option<Pin<Box<Sleep>>>,
}

impl<T> WriteStall<T> {
    pub(super) fn new(inner: T) -> Self {
        WriteStall {
            inner,
            stalled: None,
        }
    }

    /// What a write's `res` means under the deadline.
    fn watch<R>(&mut self, res: Poll<io::Result<R>>, cx: &mut Context<'_>) -> Poll<io::Result<R>> {
        if res.is_ready() {
            self.stalled = None;
            return res;
        }
        let stalled = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(WRITE_STALL)));
        if stalled.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client read nothing of its response for 10 s",
            )));
        }
        Poll::Pending
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for WriteStall<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for WriteStall<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let res = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.watch(res, cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let res = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.watch(res, cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let res = Pin::new(&mut this.inner).poll_flush(cx);
        this.watch(res, cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::time::Instant;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_write_the_client_never_reads_fails_after_the_stall() {
        let (mut client, server) = tokio::io::duplex(64);
        let mut conn = WriteStall::new(server);
        let started = Instant::now();
        let err = conn.write_all(&[0u8; 1024]).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert_eq!(started.elapsed(), WRITE_STALL);
        // A client that reads, however slowly, keeps its connection.
        let (mut client2, server) = tokio::io::duplex(64);
        let mut conn = WriteStall::new(server);
        let reader = tokio::spawn(async move {
            let mut buf = [0u8; 64];
            let mut got = 0;
            while got < 1024 {
                tokio::time::sleep(Duration::from_secs(5)).await;
                got += client2.read(&mut buf).await.unwrap();
            }
        });
        conn.write_all(&[0u8; 1024]).await.unwrap();
        reader.await.unwrap();
        let _ = client.read(&mut [0u8; 1]).await;
    }
}
