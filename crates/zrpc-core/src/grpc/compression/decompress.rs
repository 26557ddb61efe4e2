//! [`Decompress`]: a gRPC body whose compressed messages come out decompressed.

use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame};
use pin_project_lite::pin_project;

use super::frame::{PREFIX_LEN, PrefixReader, prefix};
use super::{CallCompression, CodecError, Encoding, codec};
use crate::grpc::code;

pin_project! {
    /// Wraps the body of a call whose `grpc-encoding` is `encoding`: each message with the
    /// compressed flag is decompressed (at most `limit` octets, [`DEFAULT_MAX_DECOMPRESSED_SIZE`]
    /// unless set) and handed on as an uncompressed message; other messages pass through as
    /// they came. Each frame it yields holds octets of one message only, so that a reader that
    /// stops at a message's end has seen no octet of the next one (a [`CallCompression`] given
    /// to it then tells how the message just read arrived). Trailers pass through.
    ///
    /// Errors: a compressed message longer than `limit`, or one that inflates past it, is
    /// [`code::RESOURCE_EXHAUSTED`]; a payload that does not decode, a flag other than 0 or 1,
    /// or a body that ends inside a compressed message is [`code::INTERNAL`]. After an error
    /// the body ends.
    ///
    /// [`DEFAULT_MAX_DECOMPRESSED_SIZE`]: super::DEFAULT_MAX_DECOMPRESSED_SIZE
    pub struct Decompress<B> {
        #[pin]
        inner: B,
        encoding: Encoding,
        limit: usize,
        call: Option<CallCompression>,
        prefix: PrefixReader,
        state: State,
        // octets received and not yet handed on
        rest: Bytes,
        // the compressed payload being collected
        held: BytesMut,
        done: bool,
    }
}

#[derive(Debug, Clone, Copy)]
enum State {
    Prefix,
    Plain { left: usize },
    Compressed { left: usize },
}

impl<B> Decompress<B> {
    /// Wraps `inner`, a body whose messages are compressed with `encoding`.
    pub fn new(inner: B, encoding: Encoding) -> Self {
        Decompress {
            inner,
            encoding,
            limit: super::DEFAULT_MAX_DECOMPRESSED_SIZE,
            call: None,
            prefix: PrefixReader::default(),
            state: State::Prefix,
            rest: Bytes::new(),
            held: BytesMut::new(),
            done: false,
        }
    }

    /// Bounds one message, compressed and decompressed, to `limit` octets.
    #[must_use]
    pub fn limit(mut self, limit: usize) -> Self {
        self.limit = limit;
        self
    }

    /// Notes in `call` how each message arrived.
    #[must_use]
    pub fn record(mut self, call: Option<CallCompression>) -> Self {
        self.call = call;
        self
    }
}

/// An error of a [`Decompress`] body: its inner body's, or of a message it could not take.
#[derive(Debug)]
pub enum DecompressError<E> {
    /// The inner body failed.
    Body(E),
    /// A message was refused (see [`Decompress`]).
    Codec(CodecError),
}

impl<E> DecompressError<E> {
    /// The inner body's error as it was, or a refused message's as `codec` makes it (the
    /// caller's status type from [`CodecError::code`] and [`CodecError::message`]).
    pub fn or_codec(self, codec: impl FnOnce(CodecError) -> E) -> E {
        match self {
            DecompressError::Body(e) => e,
            DecompressError::Codec(c) => codec(c),
        }
    }
}

impl<E: fmt::Display> fmt::Display for DecompressError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecompressError::Body(e) => e.fmt(f),
            DecompressError::Codec(e) => e.fmt(f),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for DecompressError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            DecompressError::Body(e) => Some(e),
            DecompressError::Codec(e) => Some(e),
        }
    }
}

type Step<E> = Option<Result<Frame<Bytes>, DecompressError<E>>>;

impl<B: Body<Data = Bytes>> Body for Decompress<B> {
    type Data = Bytes;
    type Error = DecompressError<B::Error>;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let mut this = self.project();
        loop {
            if *this.done {
                return Poll::Ready(None);
            }
            if !this.rest.is_empty() {
                let step = next_frame(
                    this.state,
                    this.prefix,
                    this.rest,
                    this.held,
                    *this.encoding,
                    *this.limit,
                    this.call.as_ref(),
                );
                if let Some(out) = step {
                    *this.done = out.is_err();
                    return Poll::Ready(Some(out));
                }
                continue;
            }
            match ready!(this.inner.as_mut().poll_frame(cx)) {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => *this.rest = data,
                    Err(trailers) => return Poll::Ready(Some(Ok(trailers))),
                },
                Some(Err(e)) => {
                    *this.done = true;
                    return Poll::Ready(Some(Err(DecompressError::Body(e))));
                }
                None => {
                    *this.done = true;
                    let inside =
                        matches!(this.state, State::Compressed { .. }) || !this.prefix.is_empty();
                    return Poll::Ready(inside.then(|| {
                        Err(codec_error(
                            code::INTERNAL,
                            "the body ended inside a message".to_owned(),
                        ))
                    }));
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done
            || (self.rest.is_empty()
                && matches!(self.state, State::Prefix)
                && self.prefix.is_empty()
                && self.inner.is_end_stream())
    }
}

fn codec_error<E>(code: i32, message: String) -> DecompressError<E> {
    DecompressError::Codec(CodecError::new(code, message))
}

/// The next frame to hand on from `rest` (never past the end of the message it starts in),
/// or `None` when `rest` was taken in without one.
fn next_frame<E>(
    state: &mut State,
    prefix_reader: &mut PrefixReader,
    rest: &mut Bytes,
    held: &mut BytesMut,
    encoding: Encoding,
    limit: usize,
    call: Option<&CallCompression>,
) -> Step<E> {
    match *state {
        State::Prefix => {
            // An uncompressed message whose prefix is at hand goes on without a copy.
            if prefix_reader.is_empty()
                && let Some((0, len)) = super::frame::peek(rest)
            {
                if let Some(c) = call {
                    c.received(false);
                }
                let len = len as usize;
                let take = PREFIX_LEN + len.min(rest.len() - PREFIX_LEN);
                if take < PREFIX_LEN + len {
                    *state = State::Plain {
                        left: PREFIX_LEN + len - take,
                    };
                }
                return Some(Ok(Frame::data(rest.split_to(take))));
            }
            let (flag, len) = prefix_reader.read(rest)?;
            let len = len as usize;
            match flag {
                0 => {
                    if let Some(c) = call {
                        c.received(false);
                    }
                    if len > 0 {
                        *state = State::Plain { left: len };
                    }
                    Some(Ok(Frame::data(Bytes::copy_from_slice(&prefix(
                        0, len as u32,
                    )))))
                }
                1 if len > limit => Some(Err(codec_error(
                    code::RESOURCE_EXHAUSTED,
                    crate::grpc::framing::too_large(len, limit),
                ))),
                1 => {
                    *state = State::Compressed { left: len };
                    if len == 0 {
                        return Some(finish(state, held, &[], encoding, limit, call));
                    }
                    None
                }
                other => Some(Err(codec_error(
                    code::INTERNAL,
                    format!("invalid compressed-flag {other} in a gRPC message prefix"),
                ))),
            }
        }
        State::Plain { left } => {
            let take = left.min(rest.len());
            *state = match left - take {
                0 => State::Prefix,
                left => State::Plain { left },
            };
            Some(Ok(Frame::data(rest.split_to(take))))
        }
        State::Compressed { left } => {
            if held.is_empty() && rest.len() >= left {
                // the whole payload at hand: inflated from where it lies
                let payload = rest.split_to(left);
                return Some(finish(state, held, &payload, encoding, limit, call));
            }
            let take = left.min(rest.len());
            held.extend_from_slice(&rest.split_to(take));
            if take < left {
                *state = State::Compressed { left: left - take };
                return None;
            }
            let payload = std::mem::take(held);
            Some(finish(state, held, &payload, encoding, limit, call))
        }
    }
}

/// Decompresses a whole compressed payload into the next frame.
fn finish<E>(
    state: &mut State,
    held: &mut BytesMut,
    payload: &[u8],
    encoding: Encoding,
    limit: usize,
    call: Option<&CallCompression>,
) -> Result<Frame<Bytes>, DecompressError<E>> {
    *state = State::Prefix;
    held.clear();
    let out = codec::decompress(encoding, payload, limit).map_err(DecompressError::Codec)?;
    if let Some(c) = call {
        c.received(true);
    }
    Ok(Frame::data(out))
}
