//! [`Compress`]: a gRPC body whose messages go out compressed.

use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame};
use pin_project_lite::pin_project;

use super::frame::{PREFIX_LEN, PrefixReader, peek, prefix};
use super::{CallCompression, Encoding, codec};

pin_project! {
    /// Wraps the body of a call sent with `grpc-encoding: encoding`: each uncompressed message
    /// of at least `min_size` octets ([`DEFAULT_MIN_SIZE`] unless set) is compressed and sent
    /// with the compressed flag; smaller ones, and those a [`CallCompression`] says to send
    /// uncompressed, pass through as they came (without a copy when a message arrives in one
    /// piece). A message that fails to compress is sent uncompressed. Trailers and errors pass
    /// through.
    ///
    /// [`DEFAULT_MIN_SIZE`]: super::DEFAULT_MIN_SIZE
    pub struct Compress<B> {
        #[pin]
        inner: B,
        encoding: Encoding,
        min_size: usize,
        call: Option<CallCompression>,
        prefix: PrefixReader,
        state: State,
        // octets received and not yet sent on
        rest: Bytes,
        // the message being collected to be compressed
        held: BytesMut,
    }
}

#[derive(Debug, Clone, Copy)]
enum State {
    Prefix,
    Plain { left: usize },
    Held { len: usize, left: usize },
}

impl<B> Compress<B> {
    /// Wraps `inner`, whose messages are to be compressed with `encoding`.
    pub fn new(inner: B, encoding: Encoding) -> Self {
        Compress {
            inner,
            encoding,
            min_size: super::DEFAULT_MIN_SIZE,
            call: None,
            prefix: PrefixReader::default(),
            state: State::Prefix,
            rest: Bytes::new(),
            held: BytesMut::new(),
        }
    }

    /// Messages smaller than `min_size` octets are sent uncompressed.
    #[must_use]
    pub fn min_size(mut self, min_size: usize) -> Self {
        self.min_size = min_size;
        self
    }

    /// Follows the choices of `call` ([`CallCompression::set_send`],
    /// [`CallCompression::compress_next`]).
    #[must_use]
    pub fn choices(mut self, call: Option<CallCompression>) -> Self {
        self.call = call;
        self
    }
}

impl<B: Body<Data = Bytes>> Body for Compress<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let mut this = self.project();
        loop {
            if !this.rest.is_empty() {
                let mut step = Step {
                    state: this.state,
                    prefix: this.prefix,
                    rest: this.rest,
                    held: this.held,
                };
                let settings = (*this.encoding, *this.min_size, this.call.as_ref());
                if let Some(data) = step.next_frame(settings) {
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                continue;
            }
            match ready!(this.inner.as_mut().poll_frame(cx)) {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => *this.rest = data,
                    Err(trailers) => return Poll::Ready(Some(Ok(trailers))),
                },
                Some(Err(e)) => return Poll::Ready(Some(Err(e))),
                None => {
                    // the inner body ended inside a message: send on what it gave, as it was
                    if let State::Held { len, .. } = *this.state {
                        *this.state = State::Prefix;
                        return Poll::Ready(Some(Ok(Frame::data(plain(len, this.held)))));
                    }
                    return Poll::Ready(None);
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.rest.is_empty()
            && matches!(self.state, State::Prefix)
            && self.prefix.is_empty()
            && self.inner.is_end_stream()
    }
}

/// The message of `len` octets in `payload`, uncompressed, with its prefix.
fn plain(len: usize, payload: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(PREFIX_LEN + payload.len());
    out.extend_from_slice(&prefix(0, len as u32));
    out.extend_from_slice(payload);
    out.freeze()
}

/// Whether a message of `len` octets is to be compressed.
fn wanted(len: usize, min_size: usize, call: Option<&CallCompression>) -> bool {
    match call {
        Some(c) => c.decide(len, min_size),
        None => len >= min_size,
    }
}

/// The framing state of a [`Compress`] body, borrowed.
struct Step<'a> {
    state: &'a mut State,
    prefix: &'a mut PrefixReader,
    rest: &'a mut Bytes,
    held: &'a mut BytesMut,
}

impl Step<'_> {
    /// The next frame to send from `rest` (never past the end of the message it starts in),
    /// or `None` when `rest` was taken in without one.
    fn next_frame(
        &mut self,
        (encoding, min_size, call): (Encoding, usize, Option<&CallCompression>),
    ) -> Option<Bytes> {
        match *self.state {
            State::Prefix => {
                if self.prefix.is_empty()
                    && let Some((flag, len)) = peek(self.rest)
                {
                    let len = len as usize;
                    // A message already compressed, or one to send as it is, goes on
                    // without a copy; the prefix is read again below otherwise.
                    if flag != 0 || !wanted(len, min_size, call) {
                        let take = PREFIX_LEN + len.min(self.rest.len() - PREFIX_LEN);
                        if take < PREFIX_LEN + len {
                            *self.state = State::Plain {
                                left: PREFIX_LEN + len - take,
                            };
                        }
                        return Some(self.rest.split_to(take));
                    }
                    let _ = self.prefix.read(self.rest);
                    return self.collect(len, len, encoding);
                }
                let (flag, len) = self.prefix.read(self.rest)?;
                let len = len as usize;
                if flag != 0 || !wanted(len, min_size, call) {
                    if len > 0 {
                        *self.state = State::Plain { left: len };
                    }
                    return Some(Bytes::copy_from_slice(&prefix(flag, len as u32)));
                }
                self.collect(len, len, encoding)
            }
            State::Plain { left } => {
                let take = left.min(self.rest.len());
                *self.state = match left - take {
                    0 => State::Prefix,
                    left => State::Plain { left },
                };
                Some(self.rest.split_to(take))
            }
            State::Held { len, left } => self.collect(len, left, encoding),
        }
    }

    /// Takes in the `left` octets still missing of a message of `len` octets to compress;
    /// the compressed message once it is whole.
    fn collect(&mut self, len: usize, left: usize, encoding: Encoding) -> Option<Bytes> {
        if self.held.is_empty() && self.rest.len() >= left {
            // the whole message at hand: compressed from where it lies
            *self.state = State::Prefix;
            let payload = self.rest.split_to(left);
            return Some(compressed(encoding, len, &payload));
        }
        let take = left.min(self.rest.len());
        self.held.extend_from_slice(&self.rest.split_to(take));
        if take < left {
            *self.state = State::Held {
                len,
                left: left - take,
            };
            return None;
        }
        *self.state = State::Prefix;
        let payload = std::mem::take(self.held);
        Some(compressed(encoding, len, &payload))
    }
}

/// The message compressed, or as it was when it does not compress.
fn compressed(encoding: Encoding, len: usize, payload: &[u8]) -> Bytes {
    codec::compress(encoding, payload).unwrap_or_else(|e| {
        tracing::debug!(target: "zrpc::compression", "sending a message uncompressed: {e}");
        plain(len, payload)
    })
}
