//! Tests of the `:authority` repair: HPACK walking against a small test encoder, the connection's
//! reads split at every point, and the real `h2` server reading through the connection wrapper.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};

use proptest::prelude::*;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt, ReadBuf};

use super::Repair;
use super::block::MAX_BLOCK;
use super::hpack::{Walker, is_valid, repair};
use super::huffman;
use crate::transport::ConnLimits;
use crate::transport::conn::Guarded;
use crate::transport::frames::FrameGuard;

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const BAD: &str = "127.0.0.1:23790,127.0.0.1:23791";

// ---- a small HPACK encoder, the way grpc-go's encoder writes ----------------------------------

fn int(out: &mut Vec<u8>, first: u8, n: u8, mut v: usize) {
    let mask = (1usize << n) - 1;
    if v < mask {
        out.push(first | v as u8);
        return;
    }
    out.push(first | mask as u8);
    v -= mask;
    while v >= 128 {
        out.push((v % 128) as u8 | 0x80);
        v /= 128;
    }
    out.push(v as u8);
}

fn string(out: &mut Vec<u8>, s: &[u8], huff: bool) {
    if huff {
        let mut enc = vec![0; huffman::encoded_len(s)];
        huffman::encode_into(s, &mut enc);
        int(out, 0x80, 7, enc.len());
        out.extend_from_slice(&enc);
    } else {
        int(out, 0, 7, s.len());
        out.extend_from_slice(s);
    }
}

/// One header field representation.
#[derive(Debug, Clone)]
enum Field {
    Indexed(usize),
    /// Literal with incremental indexing (`true`) or without; name by index or literal.
    Literal {
        indexing: bool,
        name: Result<usize, Vec<u8>>,
        value: Vec<u8>,
        huff: bool,
    },
    SizeUpdate(usize),
}

fn encode(fields: &[Field]) -> Vec<u8> {
    let mut out = Vec::new();
    for f in fields {
        match f {
            Field::Indexed(i) => int(&mut out, 0x80, 7, *i),
            Field::SizeUpdate(s) => int(&mut out, 0x20, 5, *s),
            Field::Literal {
                indexing,
                name,
                value,
                huff,
            } => {
                let (first, n) = if *indexing { (0x40, 6) } else { (0x00, 4) };
                match name {
                    Ok(i) => int(&mut out, first, n, *i),
                    Err(name) => {
                        int(&mut out, first, n, 0);
                        string(&mut out, name, *huff);
                    }
                }
                string(&mut out, value, *huff);
            }
        }
    }
    out
}

fn lit(name: usize, value: &str) -> Field {
    Field::Literal {
        indexing: true,
        name: Ok(name),
        value: value.as_bytes().to_vec(),
        huff: true,
    }
}

/// The first request of a grpc-go client, and the fields of its later ones (which refer to the
/// dynamic table: newest entry is 62).
fn grpc_go_first(authority: &str, huff: bool) -> Vec<Field> {
    vec![
        Field::Indexed(3), // :method POST
        Field::Indexed(6), // :scheme http
        lit(4, "/greeter.Greeter/SayHello"),
        Field::Literal {
            indexing: true,
            name: Ok(1),
            value: authority.as_bytes().to_vec(),
            huff,
        },
        lit(31, "application/grpc"),
        lit(58, "grpc-go/1.80.0"),
        Field::Literal {
            indexing: true,
            name: Err(b"te".to_vec()),
            value: b"trailers".to_vec(),
            huff: true,
        },
        Field::Literal {
            indexing: true,
            name: Err(b"grpc-timeout".to_vec()),
            value: b"1999998u".to_vec(),
            huff: true,
        },
    ]
}

/// The `k`-th later request (k from 0): everything indexed but a new grpc-timeout. The table
/// then holds, newest first: the k earlier timeouts, then grpc-timeout, te, user-agent,
/// content-type, authority, path of the first request.
fn grpc_go_next(k: usize, timeout: &str) -> Vec<Field> {
    vec![
        Field::Indexed(3),
        Field::Indexed(6),
        Field::Indexed(67 + k), // path
        Field::Indexed(66 + k), // authority
        Field::Indexed(65 + k), // content-type
        Field::Indexed(64 + k), // user-agent
        Field::Indexed(63 + k), // te
        Field::Literal {
            indexing: true,
            name: Ok(62), // grpc-timeout by name
            value: timeout.as_bytes().to_vec(),
            huff: true,
        },
    ]
}

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len();
    let mut out = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// HEADERS (END_STREAM) for `stream`, the block split over `pieces` frames; the HEADERS frame
/// padded and with priority when asked.
fn headers(stream: u32, block: &[u8], pieces: usize, padded: bool, priority: bool) -> Vec<u8> {
    let pieces = pieces.clamp(1, block.len().max(1));
    let size = block.len().div_ceil(pieces).max(1);
    let chunks: Vec<&[u8]> = if block.is_empty() {
        vec![&[]]
    } else {
        block.chunks(size).collect()
    };
    let mut out = Vec::new();
    for (i, chunk) in chunks.iter().enumerate() {
        let last = i + 1 == chunks.len();
        let end_headers = if last { 0x4 } else { 0 };
        if i == 0 {
            let mut flags = 0x1 | end_headers;
            let mut payload = Vec::new();
            if padded {
                flags |= 0x8;
                payload.push(3);
            }
            if priority {
                flags |= 0x20;
                payload.extend_from_slice(&[0, 0, 0, 0, 15]);
            }
            payload.extend_from_slice(chunk);
            if padded {
                payload.extend_from_slice(&[0, 0, 0]);
            }
            out.extend(frame(0x1, flags, stream, &payload));
        } else {
            out.extend(frame(0x9, end_headers, stream, chunk));
        }
    }
    out
}

/// A client connection: preface, SETTINGS, then the given requests' HEADERS and a PING between
/// them (a non-header frame that must pass untouched).
fn connection(blocks: &[Vec<u8>], pieces: usize, padded: bool, priority: bool) -> Vec<u8> {
    let mut out = PREFACE.to_vec();
    out.extend(frame(0x4, 0, 0, &[]));
    for (i, block) in blocks.iter().enumerate() {
        out.extend(headers(1 + 2 * i as u32, block, pieces, padded, priority));
        out.extend(frame(0x6, 0, 0, &[1, 2, 3, 4, 5, 6, 7, 8]));
    }
    out
}

fn grpc_go_connection(authority: &str, requests: usize, pieces: usize) -> Vec<u8> {
    let mut blocks = vec![encode(&grpc_go_first(authority, true))];
    for i in 1..requests {
        blocks.push(encode(&grpc_go_next(i - 1, &format!("{}u", 1_999_000 + i))));
    }
    connection(&blocks, pieces, false, false)
}

// ---- the adapter read in chunks -----------------------------------------------------------------

/// A reader that returns the given chunks one per read.
struct Chunks(VecDeque<Vec<u8>>);

impl AsyncRead for Chunks {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if let Some(mut chunk) = self.0.pop_front() {
            let n = chunk.len().min(buf.remaining());
            buf.put_slice(&chunk[..n]);
            if n < chunk.len() {
                self.0.push_front(chunk.split_off(n));
            }
        }
        Poll::Ready(Ok(()))
    }
}

impl tokio::io::AsyncWrite for Chunks {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// `io` as the server reads an accepted connection, with the repair on and no other limit.
fn repairing<T>(io: T) -> Guarded<T> {
    Guarded::new(
        io,
        None,
        ConnLimits::default(),
        None,
        None,
        Repair::new(true, None),
        tokio::time::Instant::now(),
    )
}

fn split(input: &[u8], cuts: &[usize]) -> VecDeque<Vec<u8>> {
    let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (input.len() + 1)).collect();
    cuts.sort_unstable();
    let mut out = VecDeque::new();
    let mut from = 0;
    for c in cuts.into_iter().chain(std::iter::once(input.len())) {
        if c > from {
            out.push_back(input[from..c].to_vec());
            from = c;
        }
    }
    out
}

fn read_through(chunks: VecDeque<Vec<u8>>) -> Vec<u8> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut fix = repairing(Chunks(chunks));
        let mut out = Vec::new();
        fix.read_to_end(&mut out).await.unwrap();
        out
    })
}

/// Whether a repair would still repair something in `stream` (after a repair: never).
fn repairs_needed(stream: &[u8]) -> bool {
    let mut copy = stream.to_vec();
    let mut repair = Repair::new(true, None);
    let _ = repair.scan(&mut FrameGuard::new(None), &mut copy);
    repair.repaired()
}

// ---- tests ----------------------------------------------------------------------------------------

#[test]
fn repair_keeps_length_and_huffman_length() {
    let repaired = repair(BAD.as_bytes()).unwrap();
    assert_eq!(repaired, b"127.0.0.1x23790,127.0.0.1:23791");
    assert!(is_valid(&repaired));
    assert_eq!(
        huffman::encoded_len(&repaired),
        huffman::encoded_len(BAD.as_bytes())
    );
    // Already valid values and bracketed IPv6 lists.
    assert!(is_valid(b"greeter.rpc"));
    let v6 = repair(b"[::1]:2379,[::1]:2380").unwrap();
    assert!(is_valid(&v6), "{}", String::from_utf8_lossy(&v6));
    assert_eq!(v6.len(), 21);
    // Nothing of that code length is valid in an authority: left alone.
    assert_eq!(repair(b"a#b:1:2"), None);
}

#[test]
fn walker_repairs_a_huffman_literal_and_tracks_the_table() {
    let mut walker = Walker::default();
    let mut block = encode(&grpc_go_first(BAD, true));
    let before = block.clone();
    let report = walker.walk(&mut block).unwrap();
    assert_eq!(report.repaired, 1);
    assert_eq!(block.len(), before.len());
    assert_ne!(block, before);
    assert_eq!(
        report.first_repair,
        Some((BAD.to_owned(), "127.0.0.1x23790,127.0.0.1:23791".to_owned()))
    );
    // Later requests refer to the (repaired) table entry: nothing to do, nothing invalid.
    let mut next = encode(&grpc_go_next(0, "1999u"));
    let same = next.clone();
    let report = walker.walk(&mut next).unwrap();
    assert!(report.saw_authority);
    assert!(!report.saw_invalid);
    assert_eq!(next, same);
}

#[test]
fn walker_leaves_a_valid_block_untouched() {
    let mut walker = Walker::default();
    let mut block = encode(&grpc_go_first("greeter.rpc:8080", true));
    let before = block.clone();
    let report = walker.walk(&mut block).unwrap();
    assert_eq!((report.repaired, report.saw_invalid), (0, false));
    assert_eq!(block, before);
}

#[test]
fn walker_repairs_raw_literals_and_literal_names() {
    for indexing in [true, false] {
        let mut walker = Walker::default();
        let mut block = encode(&[Field::Literal {
            indexing,
            name: Err(b":authority".to_vec()),
            value: BAD.as_bytes().to_vec(),
            huff: false,
        }]);
        let report = walker.walk(&mut block).unwrap();
        assert_eq!(report.repaired, 1);
        assert!(
            block
                .windows(BAD.len())
                .any(|w| w == b"127.0.0.1x23790,127.0.0.1:23791")
        );
    }
}

#[test]
fn walker_follows_evictions_and_size_updates() {
    let mut walker = Walker::default();
    // Shrink the table so the authority entry is evicted after a few inserts.
    let mut first = encode(&[Field::SizeUpdate(200)]);
    first.extend(encode(&grpc_go_first(BAD, true)));
    walker.walk(&mut first).unwrap();
    // 8 * (len 1 + 32 + ~10) octets push the authority out; index 62.. are the fillers now.
    let fillers: Vec<Field> = (0..8)
        .map(|i| Field::Literal {
            indexing: true,
            name: Err(format!("x{i}").into_bytes()),
            value: b"0123456789".to_vec(),
            huff: false,
        })
        .collect();
    walker.walk(&mut encode(&fillers)).unwrap();
    // Any index past the live entries is a walker error, so the table size matters.
    let live = 200 / (2 + 10 + 32);
    assert!(
        walker
            .walk(&mut encode(&[Field::Indexed(61 + live)]))
            .is_ok()
    );
    assert!(
        walker
            .walk(&mut encode(&[Field::Indexed(61 + live + 1)]))
            .is_err()
    );
}

#[test]
fn a_grpc_go_connection_is_repaired_through_continuations_and_split_reads() {
    for pieces in [1, 3] {
        let input = grpc_go_connection(BAD, 5, pieces);
        let whole = read_through(VecDeque::from([input.clone()]));
        assert_eq!(whole.len(), input.len());
        assert_ne!(whole, input);
        for size in [1, 2, 7, 9, 10, 100] {
            let cuts: Vec<usize> = (size..input.len()).step_by(size).collect();
            assert_eq!(
                read_through(split(&input, &cuts)),
                whole,
                "pieces {pieces} size {size}"
            );
        }
    }
}

/// Reads exactly the input's length (no EOF) and says whether the adapter still inspects.
fn still_inspecting(input: &[u8]) -> bool {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut fix = repairing(Chunks(VecDeque::from([input.to_vec()])));
        let mut out = vec![0; input.len()];
        fix.read_exact(&mut out).await.unwrap();
        fix.repair().is_inspecting()
    })
}

#[test]
fn a_valid_client_passes_untouched_and_stops_the_inspection() {
    let input = grpc_go_connection("127.0.0.1:8080", 3, 1);
    assert_eq!(read_through(VecDeque::from([input.clone()])), input);
    assert!(!still_inspecting(&input));
    assert!(still_inspecting(&grpc_go_connection(BAD, 3, 1)));
    let mut repair = Repair::new(true, None);
    let mut buf = input.clone();
    let released = repair.scan(&mut FrameGuard::new(None), &mut buf);
    assert_eq!((released, repair.is_inspecting()), (Ok(input.len()), false));
}

#[test]
fn an_oversized_or_foreign_stream_is_handed_on_untouched() {
    // Not HTTP/2.
    let http1 = b"GET / HTTP/1.1\r\nHost: a:1:2\r\n\r\n".to_vec();
    assert_eq!(read_through(VecDeque::from([http1.clone()])), http1);
    // A HEADERS frame larger than the inspection limit.
    let mut big = PREFACE.to_vec();
    big.extend(frame(0x1, 0x5, 1, &vec![0x40; MAX_BLOCK]));
    assert_eq!(read_through(VecDeque::from([big.clone()])), big);
}

#[tokio::test]
async fn h2_accepts_every_request_through_the_adapter_and_rejects_them_without() {
    for (fix, pieces, padded, priority) in [
        (true, 1, false, false),
        (true, 3, true, true),
        (false, 1, false, false),
    ] {
        let requests = 6;
        let mut blocks = vec![encode(&grpc_go_first(BAD, true))];
        for i in 1..requests {
            blocks.push(encode(&grpc_go_next(i - 1, &format!("{}u", 1_999_000 + i))));
        }
        let input = connection(&blocks, pieces, padded, priority);
        let (mut client, server) = tokio::io::duplex(1 << 20);
        client.write_all(&input).await.unwrap();
        let accepted = tokio::spawn(async move {
            let mut seen = Vec::new();
            let io: Pin<Box<dyn AsyncIo>> = if fix {
                Box::pin(repairing(server))
            } else {
                Box::pin(server)
            };
            let mut conn = h2::server::handshake(io).await.unwrap();
            let accept = async {
                while let Some(Ok((req, _))) = conn.accept().await {
                    seen.push((
                        req.uri().authority().map(|a| a.to_string()),
                        req.uri().path().to_owned(),
                        req.headers()
                            .get("content-type")
                            .cloned()
                            .unwrap_or_else(|| panic!("fix {fix} pieces {pieces}: {req:?}")),
                        req.headers()["grpc-timeout"].clone(),
                    ));
                }
            };
            let _ = tokio::time::timeout(std::time::Duration::from_millis(500), accept).await;
            seen
        });
        // Keep reading what the server writes so it never blocks.
        let drain = tokio::spawn(async move {
            let mut sink = vec![0; 1 << 16];
            while let Ok(n) = client.read(&mut sink).await {
                if n == 0 {
                    break;
                }
            }
        });
        let seen = accepted.await.unwrap();
        drain.abort();
        if fix {
            assert_eq!(seen.len(), requests, "{seen:?}");
            for (i, (authority, path, ct, timeout)) in seen.iter().enumerate() {
                assert_eq!(
                    authority.as_deref(),
                    Some("127.0.0.1x23790,127.0.0.1:23791")
                );
                assert_eq!(path, "/greeter.Greeter/SayHello");
                assert_eq!(ct, "application/grpc");
                let want = if i == 0 {
                    "1999998u".to_owned()
                } else {
                    format!("{}u", 1_999_000 + i)
                };
                assert_eq!(timeout, want.as_str());
            }
        } else {
            assert!(seen.is_empty(), "h2 accepted {seen:?}");
        }
    }
}

trait AsyncIo: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send> AsyncIo for T {}

fn authority_strategy() -> impl Strategy<Value = String> {
    proptest::string::string_regex("[0-9a-z.:,\\[\\]-]{1,40}").unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Any split of any grpc-go-like connection reads the same as the whole, keeps its length,
    /// and leaves no repairable authority invalid.
    #[test]
    fn split_reads_match_whole_reads(
        authority in authority_strategy(),
        huff in any::<bool>(),
        requests in 1usize..5,
        pieces in 1usize..4,
        padded in any::<bool>(),
        priority in any::<bool>(),
        cuts in proptest::collection::vec(any::<usize>(), 0..12),
    ) {
        let mut blocks = vec![encode(&grpc_go_first(&authority, huff))];
        for i in 1..requests {
            blocks.push(encode(&grpc_go_next(i - 1, &format!("{i}m"))));
        }
        let input = connection(&blocks, pieces, padded, priority);
        let whole = read_through(VecDeque::from([input.clone()]));
        prop_assert_eq!(whole.len(), input.len());
        prop_assert_eq!(read_through(split(&input, &cuts)), whole.clone());
        if is_valid(authority.as_bytes()) {
            prop_assert_eq!(&whole, &input);
        }
        prop_assert!(!repairs_needed(&whole));
        if !is_valid(authority.as_bytes()) && repair(authority.as_bytes()).is_some() {
            prop_assert!(repairs_needed(&input));
            prop_assert_ne!(&whole, &input);
        }
    }

    /// Garbage after a valid preface never panics, never grows or shrinks the stream, and every
    /// octet outside header blocks passes unchanged.
    #[test]
    fn garbage_never_panics(
        body in proptest::collection::vec(any::<u8>(), 0..2048),
        cuts in proptest::collection::vec(any::<usize>(), 0..8),
    ) {
        let mut input = PREFACE.to_vec();
        input.extend(body);
        let whole = read_through(VecDeque::from([input.clone()]));
        prop_assert_eq!(whole.len(), input.len());
        prop_assert_eq!(read_through(split(&input, &cuts)), whole);
    }

    /// Random header blocks (any mix of representations) walk without panicking.
    #[test]
    fn random_blocks_never_panic(block in proptest::collection::vec(any::<u8>(), 0..512)) {
        let mut block = block;
        let _ = Walker::default().walk(&mut block);
    }
}

/// A real zrpc server, a crafted grpc-go-like connection over TCP: the request reaches the
/// handler chain with the repaired authority, `original_authority` gives what was sent, and only
/// on that connection.
#[tokio::test]
async fn a_zrpc_server_serves_the_request_and_keeps_the_original_for_handlers() {
    use std::sync::{Arc, Mutex};

    use tonic::transport::server::TcpConnectInfo;

    type Seen = Arc<Mutex<Vec<(Option<String>, Option<String>, Option<TcpConnectInfo>)>>>;
    let seen: Seen = Arc::default();
    let record = seen.clone();
    let capture =
        tower::ServiceBuilder::new().map_request(move |req: http::Request<tonic::body::Body>| {
            record.lock().unwrap().push((
                req.uri().authority().map(|a| a.to_string()),
                super::original_authority(req.extensions()).map(|a| a.to_string()),
                req.extensions().get::<TcpConnectInfo>().cloned(),
            ));
            req
        });
    let conf = crate::RpcServerConf::new("authority.rpc", "127.0.0.1:0").with_cpu_threshold(0);
    let server = crate::Server::new(conf)
        .unwrap()
        .layer(capture.into_inner());
    let handle = server.handle();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let task = tokio::spawn(server.serve_with_listener(listener, std::future::pending()));
    let addr = handle.serving().await.unwrap();

    // A grpc-go-like connection with a multi-host authority, then one with a valid authority.
    for (i, sent) in [BAD, "127.0.0.1:23790"].into_iter().enumerate() {
        let mut first = grpc_go_first(sent, true);
        first[2] = lit(4, "/grpc.health.v1.Health/Check");
        let block = encode(&first);
        let mut input = PREFACE.to_vec();
        input.extend(frame(0x4, 0, 0, &[]));
        input.extend(frame(0x1, 0x4, 1, &block)); // END_HEADERS, body follows
        input.extend(frame(0x0, 0x1, 1, &[0, 0, 0, 0, 0])); // empty HealthCheckRequest, END_STREAM
        let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
        conn.write_all(&input).await.unwrap();
        let mut sink = vec![0; 4096];
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
        while seen.lock().unwrap().len() <= i && tokio::time::Instant::now() < deadline {
            let _ =
                tokio::time::timeout(std::time::Duration::from_millis(50), conn.read(&mut sink))
                    .await;
        }
    }
    let seen = seen.lock().unwrap().clone();
    let (authority, original, _) = &seen[0];
    assert_eq!(
        authority.as_deref(),
        Some("127.0.0.1x23790,127.0.0.1:23791")
    );
    assert_eq!(original.as_deref(), Some(BAD));
    // The original is a fact of its connection: another connection's calls do not see it.
    let (authority, original, _) = &seen[1];
    assert_eq!(authority.as_deref(), Some("127.0.0.1:23790"));
    assert_eq!(original.as_deref(), None);
    handle.shutdown();
    task.await.unwrap().unwrap();
}
