//! gRPC message compression, as the gRPC compression spec (`doc/compression.md` in grpc/grpc)
//! and the HTTP/2 wire format (`PROTOCOL-HTTP2.md`) describe it, for both sides of a call.
//!
//! A gRPC body is a run of messages, each framed as a 1-octet compressed flag, a 4-octet
//! big-endian length and the payload. A call that compresses names its encoding once, in the
//! `grpc-encoding` header; each message then says with its flag whether it is compressed. A
//! peer lists what it can decompress in `grpc-accept-encoding`.
//!
//! The pieces here work on those frames, below any codec, so one stage on each side serves
//! every service and every generated client (tonic's own compression lives in each generated
//! service's codec and is configured per service):
//!
//! - [`Encoding`] (`gzip`, `deflate`, `zstd`: the names the spec registers, each in the cargo
//!   feature of that name) and [`Encodings`], a set of them (`grpc-accept-encoding`);
//! - [`Decompress`]: a body that decompresses compressed messages and hands them on as
//!   uncompressed frames, never holding more than the size limit of one message (a small
//!   compressed message that would inflate past it is refused with `ResourceExhausted`, as
//!   grpc-go does, before it is inflated further);
//! - [`Compress`]: a body that compresses the messages passing through it;
//! - [`CallCompression`]: the per-call (and per-message) choices of an application, and what
//!   it can learn of the messages it received.
//!
//! Neither body allocates or copies for a message that it passes through uncompressed and that
//! arrives in one piece.

use std::collections::VecDeque;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use http::{HeaderMap, HeaderName, HeaderValue};
use parking_lot::Mutex;

mod codec;
mod compress;
mod decompress;
mod frame;

pub use compress::Compress;
pub use decompress::{Decompress, DecompressError};

/// The header naming the encoding of a call's compressed messages (a name, so that a lookup
/// does not parse it).
pub const GRPC_ENCODING: HeaderName = HeaderName::from_static("grpc-encoding");
/// The header listing the encodings a peer can decompress.
pub const GRPC_ACCEPT_ENCODING: HeaderName = HeaderName::from_static("grpc-accept-encoding");
/// The default bound of one decompressed message: 4 MiB, the default receive limit of tonic
/// (`max_decoding_message_size`) and of grpc-go (`MaxRecvMsgSize`).
pub const DEFAULT_MAX_DECOMPRESSED_SIZE: usize = 4 * 1024 * 1024;
/// The default size below which a message is sent uncompressed: smaller messages rarely
/// shrink by more than the encoding's own overhead (about 20 octets for gzip).
pub const DEFAULT_MIN_SIZE: usize = 1024;

/// A compression encoding of gRPC messages, under the name the gRPC spec registers.
///
/// Every variant exists in every build; [`Encoding::is_built`] says whether this build can
/// compress and decompress it (its cargo feature is on).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Encoding {
    /// `gzip` (RFC 1952), what grpc-go registers and go-zero services accept.
    Gzip,
    /// `deflate`: the zlib format (RFC 1950), as grpc-core and tonic send it.
    Deflate,
    /// `zstd` (RFC 8878).
    Zstd,
}

impl Encoding {
    /// Every encoding, in the order a set of them is listed.
    pub const ALL: [Encoding; 3] = [Encoding::Gzip, Encoding::Deflate, Encoding::Zstd];

    /// The name on the wire and in config files (`gzip`, `deflate`, `zstd`).
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Encoding::Gzip => "gzip",
            Encoding::Deflate => "deflate",
            Encoding::Zstd => "zstd",
        }
    }

    /// The encoding of a `grpc-encoding` value (exact, lower case, as grpc-go compares).
    #[must_use]
    pub fn from_name(name: &[u8]) -> Option<Encoding> {
        Encoding::ALL
            .into_iter()
            .find(|e| e.name().as_bytes() == name)
    }

    /// The cargo feature that builds it (of `zrpc` and of this crate): its name.
    #[must_use]
    pub fn feature(self) -> &'static str {
        self.name()
    }

    /// Whether this build compresses and decompresses it.
    #[must_use]
    pub fn is_built(self) -> bool {
        match self {
            Encoding::Gzip => cfg!(feature = "gzip"),
            Encoding::Deflate => cfg!(feature = "deflate"),
            Encoding::Zstd => cfg!(feature = "zstd"),
        }
    }

    /// Its name as a header value.
    #[must_use]
    pub fn header_value(self) -> HeaderValue {
        HeaderValue::from_static(self.name())
    }

    fn bit(self) -> u8 {
        match self {
            Encoding::Gzip => 1,
            Encoding::Deflate => 2,
            Encoding::Zstd => 4,
        }
    }
}

impl fmt::Display for Encoding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A name that is not a compression encoding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownEncoding(pub String);

impl fmt::Display for UnknownEncoding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown compression {:?} (the options: gzip, deflate, zstd, or identity for none)",
            self.0
        )
    }
}

impl std::error::Error for UnknownEncoding {}

impl FromStr for Encoding {
    type Err = UnknownEncoding;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Encoding::from_name(s.as_bytes()).ok_or_else(|| UnknownEncoding(s.to_owned()))
    }
}

/// Reads a config value: an encoding's name, or `identity` / `none` / empty for none.
///
/// # Errors
///
/// [`UnknownEncoding`] for any other value.
pub fn parse_setting(s: &str) -> Result<Option<Encoding>, UnknownEncoding> {
    match s {
        "" | "identity" | "none" => Ok(None),
        name => name.parse().map(Some),
    }
}

/// Config values of type `Option<Encoding>` (`Compression: gzip`), for
/// `#[serde(with = "zrpc_core::grpc::compression::setting")]`: an encoding's name, or
/// `identity` / `none` / empty for none ([`parse_setting`]).
pub mod setting {
    use serde::{Deserialize, Deserializer, Serializer};

    use super::{Encoding, parse_setting};

    /// Writes the encoding's name (`""` for none).
    ///
    /// # Errors
    ///
    /// The serializer's.
    pub fn serialize<S: Serializer>(v: &Option<Encoding>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(v.map_or("", Encoding::name))
    }

    /// Reads a name.
    ///
    /// # Errors
    ///
    /// A value that is not an encoding's name (the options are in the message).
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Encoding>, D::Error> {
        let s = String::deserialize(d)?;
        parse_setting(&s).map_err(serde::de::Error::custom)
    }

    /// Checks that this build has `encoding` (its cargo feature, as
    /// [`feature_on`](crate::conf::feature_on) reports it), for the config key `key`.
    ///
    /// # Errors
    ///
    /// A [`ConfError`](crate::conf::ConfError) naming the key, the value and the feature.
    pub fn check_built(
        key: &str,
        encoding: Option<Encoding>,
    ) -> Result<(), crate::conf::ConfError> {
        match encoding {
            Some(e) if !crate::conf::feature_on(e.feature(), e.is_built()) => Err(
                crate::conf::ConfError::feature_off(key, e.name(), "this compression", e.feature()),
            ),
            _ => Ok(()),
        }
    }
}

/// A set of [`Encoding`]s, as in `grpc-accept-encoding`.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
pub struct Encodings(u8);

impl Encodings {
    /// The empty set.
    #[must_use]
    pub const fn none() -> Self {
        Encodings(0)
    }

    /// The encodings this build compresses and decompresses.
    #[must_use]
    pub fn built() -> Self {
        Encoding::ALL
            .into_iter()
            .filter(|e| e.is_built())
            .fold(Encodings::none(), Encodings::with)
    }

    /// The set with `e` too.
    #[must_use]
    pub fn with(self, e: Encoding) -> Self {
        Encodings(self.0 | e.bit())
    }

    /// Whether `e` is in the set.
    #[must_use]
    pub fn contains(self, e: Encoding) -> bool {
        self.0 & e.bit() != 0
    }

    /// Whether the set is empty.
    #[must_use]
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The encodings in the set, in [`Encoding::ALL`] order.
    pub fn iter(self) -> impl Iterator<Item = Encoding> {
        Encoding::ALL.into_iter().filter(move |e| self.contains(*e))
    }

    /// The encodings a peer lists in its `grpc-accept-encoding` headers (names this crate
    /// does not know are left out).
    #[must_use]
    pub fn from_accept_header(headers: &HeaderMap) -> Self {
        headers
            .get_all(&GRPC_ACCEPT_ENCODING)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .filter_map(|name| Encoding::from_name(name.trim().as_bytes()))
            .fold(Encodings::none(), Encodings::with)
    }

    /// The set as a `grpc-accept-encoding` value (`gzip,zstd`), or `identity` when empty.
    #[must_use]
    pub fn header_value(self) -> HeaderValue {
        HeaderValue::from_static(match self.0 {
            0 => "identity",
            1 => "gzip",
            2 => "deflate",
            3 => "gzip,deflate",
            4 => "zstd",
            5 => "gzip,zstd",
            6 => "deflate,zstd",
            _ => "gzip,deflate,zstd",
        })
    }
}

impl fmt::Debug for Encodings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

/// An error of the compression layer, with the gRPC status code it stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodecError {
    code: i32,
    message: String,
}

impl CodecError {
    pub(crate) fn new(code: i32, message: String) -> Self {
        CodecError { code, message }
    }

    /// The gRPC status code (`ResourceExhausted` for a message past the limit, `Internal` for
    /// a message that does not decode).
    #[must_use]
    pub fn code(&self) -> i32 {
        self.code
    }

    /// What went wrong.
    #[must_use]
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for CodecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for CodecError {}

/// One call's compression, shared between the application and zrpc: the application's
/// choices for the messages this side sends, and whether the messages it received arrived
/// compressed. Clones share one state.
///
/// - **Client**: insert one into the request's extensions
///   (`tonic::Request::extensions_mut().insert(...)`) to choose for this call, overriding the
///   client's `Compression` config ([`CallCompression::send`]), and keep a clone to choose
///   message by message ([`compress_next`](Self::compress_next)) or to read what the response
///   was ([`last_received_compressed`](Self::last_received_compressed)). When the response
///   arrives compressed and the call has none, zrpc puts one in the response's extensions.
/// - **Server**: zrpc puts one in the request's extensions when the request names an encoding
///   or the response can be compressed (the server's `Compression` is set and the client
///   accepts it). A handler can then turn compression off or on for its response
///   ([`set_send`](Self::set_send), before it returns), choose message by message, and learn
///   whether a message it received arrived compressed.
#[derive(Clone, Debug, Default)]
pub struct CallCompression(Arc<Shared>);

#[derive(Debug, Default)]
struct Shared {
    choices: Mutex<Choices>,
    /// 0: no message received yet; 1: the last one arrived uncompressed; 2: compressed.
    received: AtomicU8,
}

#[derive(Debug, Default)]
struct Choices {
    /// `Some(encoding)`: the call's choice, over the config's (`Some(None)`: uncompressed).
    call: Option<Option<Encoding>>,
    /// One choice per message still to be sent, in order.
    next: VecDeque<bool>,
}

impl CallCompression {
    /// No choice made yet: the config decides.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// A call whose messages are compressed with `encoding` (`None`: uncompressed), whatever
    /// the config says; messages of every size are compressed.
    #[must_use]
    pub fn send(encoding: Option<Encoding>) -> Self {
        let c = Self::default();
        c.set_send(encoding);
        c
    }

    /// Chooses how this call's messages are sent (`None`: uncompressed). On a server the
    /// encoding is used only when the client accepts it, and only when chosen before the
    /// response's headers are sent (before a unary handler returns; for a stream, before
    /// the handler returns its stream).
    pub fn set_send(&self, encoding: Option<Encoding>) {
        self.0.choices.lock().call = Some(encoding);
    }

    /// The call's own choice, if it made one (`Some(None)`: uncompressed).
    #[must_use]
    pub fn send_choice(&self) -> Option<Option<Encoding>> {
        self.0.choices.lock().call
    }

    /// Chooses for the next message this side sends on the call that has no choice yet
    /// (choices queue up, one per message, in order): `false` sends it uncompressed, `true`
    /// compresses it with the call's encoding whatever its size. Without a choice a message
    /// follows the call's (or the config's) setting. A call sent uncompressed stays so.
    pub fn compress_next(&self, compress: bool) {
        self.0.choices.lock().next.push_back(compress);
    }

    /// Whether the last message received on the call arrived compressed; `None` before the
    /// first one.
    #[must_use]
    pub fn last_received_compressed(&self) -> Option<bool> {
        match self.0.received.load(Ordering::Acquire) {
            0 => None,
            v => Some(v == 2),
        }
    }

    /// Whether the next message to send, of `len` octets, is compressed: its own choice
    /// (taken from the queue), else the call's (every size), else `len >= min_size`.
    pub(crate) fn decide(&self, len: usize, min_size: usize) -> bool {
        let mut c = self.0.choices.lock();
        let next = c.next.pop_front();
        match (c.call, next) {
            (Some(None), _) => false,
            (_, Some(choice)) => choice,
            (Some(Some(_)), None) => true,
            (None, None) => len >= min_size,
        }
    }

    /// Notes how a received message arrived.
    pub(crate) fn received(&self, compressed: bool) {
        self.0
            .received
            .store(if compressed { 2 } else { 1 }, Ordering::Release);
    }
}

#[cfg(test)]
mod tests;
