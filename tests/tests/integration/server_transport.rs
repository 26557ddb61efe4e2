//! Transport limits under hostile clients, loopback only, bounded in count and time:
//! streams per connection capped by the advertised limit, idle and slowloris connections
//! closed at the handshake timeout, idle HTTP/2 connections closed after `MaxConnectionIdle`,
//! GOAWAY at `MaxConnectionAge`, the connection cap, 415 for non-gRPC requests. Each test
//! checks that the server stays up and another client keeps being served.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use zrpc_server::conf::TransportConf;
use zrpc_tests::bench::{rss_kb, rss_serial};
use zrpc_tests::greeter::{TestGreeter, TestServer, start_server, test_conf};
use zrpc_tests::h2raw::{PREFACE, frame, grpc_headers, kind, raw_h2, read_frame};
use zrpc_tests::pb::{HelloRequest, HelloStreamRequest};
use zrpc_tests::wait;

/// A test server with `edit` applied to its `Transport` block. Shedding is off: the suite
/// runs many tests at once on few cores, and these tests are about the transport, not CPU.
async fn server_with(name: &str, edit: impl FnOnce(&mut TransportConf)) -> TestServer {
    let mut conf = test_conf(name).with_cpu_threshold(0);
    edit(&mut conf.transport);
    start_server(conf, TestGreeter::new()).await
}

/// `n` unary calls on a fresh client; returns the p99 latency. Panics on any failure.
async fn served(server: &TestServer, n: usize) -> Duration {
    let mut client = server.client().await;
    let mut took = Vec::with_capacity(n);
    for i in 0..n {
        let started = Instant::now();
        let reply = client
            .say_hello(HelloRequest {
                name: format!("bystander {i}"),
            })
            .await
            .expect("the bystander is served");
        assert_eq!(reply.into_inner().message, format!("hello bystander {i}"));
        took.push(started.elapsed());
    }
    took.sort();
    took[(n * 99 / 100).min(n - 1)]
}

/// SETTINGS_MAX_CONCURRENT_STREAMS in a SETTINGS payload.
fn max_streams_setting(payload: &[u8]) -> Option<u32> {
    payload.chunks_exact(6).find_map(|s| {
        (u16::from_be_bytes([s[0], s[1]]) == 3)
            .then(|| u32::from_be_bytes([s[2], s[3], s[4], s[5]]))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_beyond_the_advertised_limit_are_refused_while_others_are_served() {
    let _rss = rss_serial().await;
    let server = server_with("transport-streams", |_| {}).await;
    let baseline_p99 = served(&server, 50).await;
    let rss_before = rss_kb("self");

    // A client that ignores the advertised limit: 2,000 streams on one connection, each
    // with its headers sent and no request body (they stay open in the handler's decode).
    let mut sock = TcpStream::connect(server.addr).await.unwrap();
    sock.write_all(PREFACE).await.unwrap();
    sock.write_all(&frame(4, 0, 0, &[])).await.unwrap();
    let (kind, _, _, payload) = read_frame(&mut sock).await.unwrap();
    assert_eq!(kind, 4, "the server's first frame is SETTINGS");
    let advertised = max_streams_setting(&payload).expect("MAX_CONCURRENT_STREAMS advertised");
    assert_eq!(advertised, 1000, "the default limit");
    sock.write_all(&frame(4, 1, 0, &[])).await.unwrap(); // SETTINGS ACK
    let headers = grpc_headers(zrpc_tests::greeter::SAY_HELLO_STREAM, "localhost");
    let counted = || {
        zrpc_server::metrics::server_metrics()
            .dropped_total
            .with_label_values(&["", "stream_cap"])
            .get()
    };
    let counted_before = counted();
    let started = Instant::now();
    let mut burst = BytesMut::new();
    for i in 0..2000u32 {
        burst.put_slice(&frame(1, 0x4, 2 * i + 1, &headers));
    }
    sock.write_all(&burst).await.unwrap();

    // Count the refusals (RST_STREAM REFUSED_STREAM) while a bystander is served.
    let reader = tokio::spawn(async move {
        let mut refused = 0u32;
        let mut goaway = None;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while let Ok(Some((kind, _, _, payload))) =
            tokio::time::timeout_at(deadline, read_frame(&mut sock)).await
        {
            match kind {
                3 if payload.get(..4) == Some(&[0, 0, 0, 7]) => refused += 1,
                7 => goaway = Some(payload),
                _ => {}
            }
            if refused >= 1000 {
                break;
            }
        }
        (refused, goaway, sock)
    });
    let attack_p99 = served(&server, 200).await;
    let (refused, goaway, sock) = reader.await.unwrap();
    let rss_after = rss_kb("self");
    println!(
        "2000 streams on one connection: advertised {advertised}, refused {refused} in {:?}, \
         goaway {goaway:?}; bystander p99 {baseline_p99:?} before, {attack_p99:?} during; \
         RSS {rss_before} kB -> {rss_after} kB (+{} kB)",
        started.elapsed(),
        rss_after.saturating_sub(rss_before)
    );
    assert!(refused >= 1000, "streams past the limit refused: {refused}");
    // Each refusal the client saw is a dropped call in the server's metrics (reason
    // `stream_cap`; other tests' refusals may add to the process-wide counter).
    let counted = counted() - counted_before;
    assert!(
        counted >= u64::from(refused),
        "counted {counted} of {refused}"
    );
    assert!(
        attack_p99 < Duration::from_secs(1),
        "bystander p99 {attack_p99:?}"
    );
    assert!(
        rss_after.saturating_sub(rss_before) < 64 * 1024,
        "RSS grew {rss_before} -> {rss_after} kB"
    );
    drop(sock);
    served(&server, 10).await;
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_streams_on_one_connection_are_capped_with_bounded_rss() {
    let _rss = rss_serial().await;
    const STREAMS: u32 = 10_000;
    let server = server_with("transport-10k-streams", |_| {}).await;
    let baseline_p99 = served(&server, 50).await;
    let rss_before = rss_kb("self");
    let mut sock = TcpStream::connect(server.addr).await.unwrap();
    sock.write_all(PREFACE).await.unwrap();
    sock.write_all(&frame(4, 0, 0, &[])).await.unwrap();
    let (_, _, _, payload) = read_frame(&mut sock).await.unwrap();
    let advertised = max_streams_setting(&payload).expect("MAX_CONCURRENT_STREAMS advertised");
    sock.write_all(&frame(4, 1, 0, &[])).await.unwrap();
    let headers = grpc_headers(zrpc_tests::greeter::SAY_HELLO_STREAM, "localhost");
    let started = Instant::now();
    let mut burst = BytesMut::new();
    for i in 0..STREAMS {
        burst.put_slice(&frame(1, 0x4, 2 * i + 1, &headers));
    }
    // Written by a task: the server may stop reading (GOAWAY) before it has all of it.
    let (mut rd, mut wr) = sock.into_split();
    let writer = tokio::spawn(async move {
        let _ = wr.write_all(&burst).await;
        wr
    });
    let reader = tokio::spawn(async move {
        let (mut refused, mut goaway) = (0u32, None);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        let mut h = [0u8; 9];
        while let Ok(Ok(_)) = tokio::time::timeout_at(deadline, rd.read_exact(&mut h)).await {
            let len = u32::from_be_bytes([0, h[0], h[1], h[2]]) as usize;
            let mut payload = vec![0u8; len];
            if rd.read_exact(&mut payload).await.is_err() {
                break;
            }
            match h[3] {
                3 if payload.get(..4) == Some(&[0, 0, 0, 7]) => refused += 1,
                7 if payload.len() >= 8 => {
                    let last = u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]);
                    let code = u32::from_be_bytes([payload[4], payload[5], payload[6], payload[7]]);
                    goaway = Some((last & 0x7fff_ffff, code));
                    break;
                }
                _ => {}
            }
            if refused >= STREAMS - advertised {
                break;
            }
        }
        (refused, goaway, rd)
    });
    let attack_p99 = served(&server, 200).await;
    let (refused, goaway, rd) = reader.await.unwrap();
    let rss_after = rss_kb("self");
    // Streams the server took up: all of them, or those up to the GOAWAY's last stream id.
    let processed = goaway.map_or(STREAMS, |(last, _)| last.div_ceil(2));
    let open = processed.saturating_sub(refused);
    println!(
        "{STREAMS} streams on one connection: advertised {advertised}, refused {refused}, \
         goaway (last stream, code) {goaway:?}, at most {open} open, in {:?}; bystander p99 \
         {baseline_p99:?} before, {attack_p99:?} during; RSS {rss_before} kB -> {rss_after} kB \
         (+{} kB)",
        started.elapsed(),
        rss_after.saturating_sub(rss_before)
    );
    assert!(
        open <= advertised,
        "{open} streams open past the advertised {advertised}"
    );
    assert!(
        attack_p99 < Duration::from_secs(1),
        "bystander p99 {attack_p99:?}"
    );
    assert!(
        rss_after.saturating_sub(rss_before) < 64 * 1024,
        "RSS grew {rss_before} -> {rss_after} kB"
    );
    writer.abort();
    drop(rd);
    served(&server, 10).await;
    server.shutdown().await.unwrap();
}

/// Waits until the peer closes `sock` (EOF or reset); the time it took.
async fn closed_after(mut sock: TcpStream, started: Instant, limit: Duration) -> Option<Duration> {
    let mut buf = [0u8; 1024];
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        match tokio::time::timeout_at(deadline, sock.read(&mut buf)).await {
            Ok(Ok(0) | Err(_)) => return Some(started.elapsed()),
            Ok(Ok(_)) => {}
            Err(_) => return None,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_and_slowloris_connections_are_closed_at_the_handshake_timeout() {
    let timeout = Duration::from_secs(1);
    let server = server_with("transport-handshake", |t| t.handshake_timeout = timeout).await;
    let started = Instant::now();
    let mut waits = Vec::new();
    // 200 TCP connections that never send a byte.
    for _ in 0..200 {
        let sock = TcpStream::connect(server.addr).await.unwrap();
        waits.push(tokio::spawn(closed_after(sock, started, timeout * 5)));
    }
    // 50 slowloris connections sending the preface one octet every 100 ms.
    for _ in 0..50 {
        let sock = TcpStream::connect(server.addr).await.unwrap();
        let (mut rd, mut wr) = sock.into_split();
        waits.push(tokio::spawn(async move {
            let writer = tokio::spawn(async move {
                for b in PREFACE {
                    if wr.write_all(&[*b]).await.is_err() {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            });
            let mut buf = [0u8; 1024];
            let deadline = tokio::time::Instant::now() + timeout * 5;
            let res = loop {
                match tokio::time::timeout_at(deadline, rd.read(&mut buf)).await {
                    Ok(Ok(0) | Err(_)) => break Some(started.elapsed()),
                    Ok(Ok(_)) => {}
                    Err(_) => break None,
                }
            };
            writer.abort();
            res
        }));
    }
    let p99 = served(&server, 100).await;
    let mut latest = Duration::ZERO;
    for w in waits {
        let closed = w
            .await
            .unwrap()
            .expect("connection closed within 5x the timeout");
        assert!(
            closed >= timeout - Duration::from_millis(50),
            "closed early: {closed:?}"
        );
        latest = latest.max(closed);
    }
    println!(
        "200 idle + 50 slowloris connections, HandshakeTimeout {timeout:?}: all closed by \
         {latest:?}; bystander p99 {p99:?}"
    );
    assert!(latest < timeout * 3, "closed by {latest:?}");
    served(&server, 10).await;
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handshaken_connection_outlives_the_handshake_timeout() {
    let server = server_with("transport-handshake-ok", |t| {
        t.handshake_timeout = Duration::from_millis(300);
    })
    .await;
    // One raw HTTP/2 connection, which (unlike a tonic channel) never reconnects: a server
    // that closed it at the handshake timeout could not serve the later calls on it.
    let (send, driver) = h2_connect(server.addr).await;
    for round in 0..3 {
        // An absence check: the connection must stay open past the 300 ms handshake timeout,
        // a bounded 300 ms per round (900 ms in all).
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            !driver.is_finished(),
            "round {round}: the server closed a handshaken connection"
        );
        let (res, mut body) = partial_message(&send, server.addr, 0, 0).await;
        body.send_data(Bytes::new(), true).unwrap();
        assert_eq!(
            grpc_status(res, Duration::from_secs(5)).await.as_deref(),
            Some("0"),
            "round {round}: served on the same connection"
        );
    }
    assert!(!driver.is_finished());
    server.shutdown().await.unwrap();
}

/// An h2 client connection; its driver task ends when the server closes it.
async fn h2_connect(
    addr: SocketAddr,
) -> (
    h2::client::SendRequest<Bytes>,
    tokio::task::JoinHandle<Instant>,
) {
    let sock = TcpStream::connect(addr).await.unwrap();
    let (send, conn) = h2::client::handshake(sock).await.unwrap();
    let driver = tokio::spawn(async move {
        let _ = conn.await;
        Instant::now()
    });
    (send, driver)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_http2_connections_are_closed_after_max_idle_but_not_while_a_call_is_open() {
    let idle = Duration::from_secs(1);
    let server = server_with("transport-idle", |t| t.max_connection_idle = idle).await;
    let started = Instant::now();
    let mut drivers = Vec::new();
    for _ in 0..20 {
        let (send, driver) = h2_connect(server.addr).await;
        drivers.push((send, driver));
    }
    // A stream open longer than the idle time: 3 messages 700 ms apart.
    let mut client = server.client().await;
    let mut stream = client
        .say_hello_stream(HelloStreamRequest {
            name: "long".into(),
            count: 3,
            interval_ms: 700,
        })
        .await
        .unwrap()
        .into_inner();
    let mut got = 0;
    while let Some(m) = stream.message().await.unwrap() {
        assert!(m.message.starts_with("hello long"));
        got += 1;
    }
    assert_eq!(got, 3);
    let mut latest = Duration::ZERO;
    for (_send, driver) in drivers {
        let ended = tokio::time::timeout(idle * 5, driver)
            .await
            .expect("idle connection closed")
            .unwrap();
        let after = ended.duration_since(started);
        assert!(
            after >= idle - Duration::from_millis(50),
            "closed early: {after:?}"
        );
        latest = latest.max(after);
    }
    println!("20 idle HTTP/2 connections, MaxConnectionIdle {idle:?}: closed by {latest:?}");
    assert!(latest < idle * 3);
    served(&server, 10).await;
    server.shutdown().await.unwrap();
}

/// An idle connection is sent a GOAWAY (NO_ERROR) before it is closed, so that a request
/// racing the close is not lost; a client that never answers the GOAWAY's PING is dropped
/// after `KeepaliveTimeout`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_connection_gets_a_goaway_and_a_silent_one_is_then_dropped() {
    let idle = Duration::from_millis(500);
    let grace = Duration::from_millis(700);
    let server = server_with("transport-idle-goaway", |t| {
        t.max_connection_idle = idle;
        t.keepalive_timeout = grace;
    })
    .await;
    // the idle time counts from the accept, inside `raw_h2`
    let started = Instant::now();
    let mut sock = raw_h2(server.addr).await;
    let mut goaway = None;
    let mut pinged = false;
    // Read without answering anything: the server's SETTINGS ack, then its GOAWAY and PING.
    while let Some((k, flags, _, payload)) = read_frame(&mut sock).await {
        match k {
            kind::GOAWAY if goaway.is_none() => {
                let code = u32::from_be_bytes([payload[4], payload[5], payload[6], payload[7]]);
                goaway = Some((started.elapsed(), code));
            }
            kind::PING if flags & 1 == 0 => pinged = true,
            _ => {}
        }
    }
    let closed = started.elapsed();
    let (at, code) = goaway.expect("a GOAWAY before the close");
    println!("idle GOAWAY after {at:?}, connection dropped after {closed:?}");
    assert_eq!(code, 0, "NO_ERROR");
    assert!(
        at >= idle - Duration::from_millis(50),
        "GOAWAY early: {at:?}"
    );
    assert!(pinged, "the GOAWAY comes with a PING");
    assert!(
        closed >= at + grace - Duration::from_millis(50) && closed < at + grace * 3,
        "dropped {closed:?} after the GOAWAY at {at:?}, not about KeepaliveTimeout later"
    );
    served(&server, 10).await;
    server.shutdown().await.unwrap();
}

/// A call the client sent as the idle GOAWAY went out (its stream id is below the GOAWAY's
/// last-stream-id: the server takes it) is served whole, though it runs longer than
/// `KeepaliveTimeout` and the client never answers the GOAWAY's PING; the connection is
/// dropped after it, as for any client that does not close.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_crossed_the_idle_goaway_is_served_whole() {
    let idle = Duration::from_millis(500);
    let grace = Duration::from_millis(700);
    let server = server_with("transport-idle-crossed", |t| {
        t.max_connection_idle = idle;
        t.keepalive_timeout = grace;
    })
    .await;
    let mut sock = raw_h2(server.addr).await;
    // the GOAWAY (NO_ERROR, last-stream-id 2^31-1), unanswered like its PING
    loop {
        let (k, _, _, _) = read_frame(&mut sock).await.expect("an idle GOAWAY");
        if k == kind::GOAWAY {
            break;
        }
    }
    let goaway = Instant::now();
    // a call that takes twice the grace: HEADERS, then its one message (END_STREAM)
    let headers = grpc_headers(zrpc_tests::greeter::SAY_HELLO, "localhost");
    let name = b"crossed,sleep:1400";
    let mut message = vec![0, 0, 0, 0, u8::try_from(name.len() + 2).unwrap(), 0x0a];
    message.push(u8::try_from(name.len()).unwrap());
    message.extend_from_slice(name);
    let mut wire = frame(kind::HEADERS, 4, 1, &headers);
    wire.extend_from_slice(&frame(kind::DATA, 1, 1, &message));
    sock.write_all(&wire).await.unwrap();
    let mut answered = None;
    while let Some((k, flags, stream, payload)) = read_frame(&mut sock).await {
        if k == kind::HEADERS && stream == 1 && flags & 1 != 0 {
            answered = Some((goaway.elapsed(), payload));
        }
    }
    let closed = goaway.elapsed();
    let (at, _trailers) = answered.unwrap_or_else(|| {
        panic!("the call that crossed the GOAWAY was cut: connection closed {closed:?} after it")
    });
    println!(
        "a call crossing the idle GOAWAY answered after {at:?}, connection closed after {closed:?}"
    );
    assert!(
        at >= Duration::from_millis(1400),
        "answered after its sleep: {at:?}"
    );
    assert!(closed >= at, "closed after the answer");
    assert!(
        closed < at + Duration::from_secs(3),
        "and then dropped: {closed:?}"
    );
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_get_goaway_at_max_connection_age() {
    let age = Duration::from_millis(800);
    let server = server_with("transport-age", |t| {
        t.max_connection_age = age;
        t.max_connection_age_grace = Duration::from_millis(500);
    })
    .await;
    let started = Instant::now();
    let (_send, driver) = h2_connect(server.addr).await;
    let ended = tokio::time::timeout(Duration::from_secs(5), driver)
        .await
        .expect("aged connection closed")
        .unwrap()
        .duration_since(started);
    println!("MaxConnectionAge {age:?}: idle connection closed after {ended:?}");
    // Each connection's age is MaxConnectionAge ±10% (the test below).
    assert!(
        ended >= age * 9 / 10 - Duration::from_millis(50) && ended < age * 3,
        "{ended:?}"
    );
    // zrpc's client rides across the ages: a call sent as the GOAWAY crosses it is one the
    // server never took (its stream is past the GOAWAY's last id), re-sent on a new
    // connection. A bare tonic channel fails such a call ("GoAway NO_ERROR"); eight callers
    // back to back over three ages put calls in that window at each GOAWAY.
    let client = zrpc_client::Client::new(zrpc_client::conf::RpcClientConf::direct([server
        .addr
        .to_string()]))
    .await
    .unwrap();
    let greeter = zrpc_tests::pb::greeter_client::GreeterClient::new(client);
    let until = Instant::now() + age * 3;
    let callers = (0..8).map(|_| {
        let mut greeter = greeter.clone();
        tokio::spawn(async move {
            let mut calls = 0u32;
            while Instant::now() < until {
                greeter
                    .say_hello(HelloRequest { name: "x".into() })
                    .await
                    .expect("served across connection ages");
                calls += 1;
            }
            calls
        })
    });
    let mut calls = 0;
    for caller in callers.collect::<Vec<_>>() {
        calls += caller.await.unwrap();
    }
    println!("{calls} calls by 8 callers across three connection ages: all served");
    assert!(calls > 100, "{calls} calls");
    server.shutdown().await.unwrap();
}

/// A foreign client (grpcio, on gRPC core) calling over several jittered connection ages
/// (`MaxConnectionAge: 500ms`) rides across the GOAWAYs: no call fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpcio_rides_across_jittered_connection_ages() {
    use prost::Message;
    let server = server_with("transport-age-grpcio", |t| {
        t.max_connection_age = Duration::from_millis(500);
        t.max_connection_age_grace = Duration::from_secs(1);
    })
    .await;
    let request = HelloRequest { name: "py".into() }.encode_to_vec();
    let args = vec![
        server.addr.to_string(),
        zrpc_tests::greeter::SAY_HELLO.to_owned(),
        zrpc_tests::grpcio::hex(&request),
        "25".to_owned(),
        "100".to_owned(),
    ];
    let v = zrpc_tests::grpcio::run_client("grpcio_calls_over_time.py", args).await;
    let codes = v["codes"].as_array().unwrap();
    assert_eq!(codes.len(), 25, "{v}");
    assert!(codes.iter().all(|c| c == "OK"), "{v}");
    println!("grpcio: 25 calls 100 ms apart across 500 ms connection ages: all OK");
    server.shutdown().await.unwrap();
}

/// Connections made together get their GOAWAYs at different ages, each within ±10% of
/// `MaxConnectionAge` (grpc-go's jitter): after a deploy, a fleet's clients do not all
/// reconnect at the same instant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_made_together_are_aged_apart() {
    let age = Duration::from_secs(2);
    let server = server_with("transport-age-jitter", |t| t.max_connection_age = age).await;
    let mut drivers = Vec::new();
    for _ in 0..16 {
        let connected = Instant::now();
        let (send, driver) = h2_connect(server.addr).await;
        drivers.push((connected, send, driver));
    }
    let mut ages = Vec::new();
    for (connected, _send, driver) in drivers {
        let ended = tokio::time::timeout(Duration::from_secs(6), driver)
            .await
            .expect("aged connection closed")
            .unwrap();
        ages.push(ended.duration_since(connected));
    }
    ages.sort();
    let (first, last) = (ages[0], ages[15]);
    println!("MaxConnectionAge {age:?}: 16 connections' ages {first:?} .. {last:?}");
    assert!(
        first >= age * 9 / 10 - Duration::from_millis(20),
        "{first:?}"
    );
    assert!(last < age * 11 / 10 + Duration::from_secs(1), "{last:?}");
    // Uniform over 400 ms: 16 ages within 100 ms of each other come once in ~10^8 runs.
    assert!(
        last - first >= Duration::from_millis(100),
        "the ages are spread: {ages:?}"
    );
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_over_the_cap_are_closed_at_once() {
    let server = server_with("transport-cap", |t| t.max_connections = 4).await;
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(h2_connect(server.addr).await);
    }
    let started = Instant::now();
    let extra = TcpStream::connect(server.addr).await.unwrap();
    let closed = closed_after(extra, started, Duration::from_secs(2))
        .await
        .expect("the fifth connection is closed");
    println!("MaxConnections 4: the fifth connection closed after {closed:?}");
    drop(held);
    // Once the server has seen the held connections go, new clients are served again.
    let url = server.url();
    wait::until_async("a new connection served after the held ones closed", || {
        let url = url.clone();
        async move {
            let Ok(channel) = tonic::transport::Endpoint::from_shared(url)
                .unwrap()
                .connect()
                .await
            else {
                return false;
            };
            zrpc_tests::pb::greeter_client::GreeterClient::new(channel)
                .say_hello(HelloRequest { name: "x".into() })
                .await
                .is_ok()
        }
    })
    .await;
    served(&server, 10).await;
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_grpc_content_types_get_415() {
    let server = server_with("transport-415", |_| {}).await;
    let (send, _driver) = h2_connect(server.addr).await;
    for content_type in [Some("application/json"), Some("text/plain"), None] {
        let mut req = http::Request::builder()
            .method("POST")
            .uri(format!(
                "http://{}{}",
                server.addr,
                zrpc_tests::greeter::SAY_HELLO
            ))
            .header("te", "trailers");
        if let Some(ct) = content_type {
            req = req.header("content-type", ct);
        }
        let (res, _) = send
            .clone()
            .ready()
            .await
            .unwrap()
            .send_request(req.body(()).unwrap(), true)
            .unwrap();
        let res = res.await.unwrap();
        assert_eq!(res.status(), 415, "{content_type:?}");
        assert_eq!(res.headers()["grpc-status"], "3", "{content_type:?}");
    }
    // gRPC health (inside the same chain) answers gRPC clients as before.
    let mut health = tonic_health::pb::health_client::HealthClient::new(server.channel().await);
    health
        .check(tonic_health::pb::HealthCheckRequest {
            service: String::new(),
        })
        .await
        .unwrap();
    served(&server, 10).await;
    server.shutdown().await.unwrap();
}

/// Starts a unary SayHello whose message says `len` octets and sends only `sent` of them;
/// returns the call's grpc-status once the server ends it (`None` if it does not within
/// `limit`). The stream handle is kept alive so the caller never resets it.
async fn partial_message(
    send: &h2::client::SendRequest<Bytes>,
    addr: SocketAddr,
    len: usize,
    sent: usize,
) -> (h2::client::ResponseFuture, h2::SendStream<Bytes>) {
    let req = http::Request::builder()
        .method("POST")
        .uri(format!("http://{addr}{}", zrpc_tests::greeter::SAY_HELLO))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .unwrap();
    let (res, mut body) = send
        .clone()
        .ready()
        .await
        .unwrap()
        .send_request(req, false)
        .unwrap();
    let mut data = BytesMut::with_capacity(5 + sent);
    data.put_u8(0);
    data.put_u32(u32::try_from(len).unwrap());
    data.put_bytes(b'a', sent);
    body.reserve_capacity(data.len());
    body.send_data(data.freeze(), false).unwrap();
    (res, body)
}

/// The grpc-status of a response: trailers-only headers, else the trailers.
async fn grpc_status(res: h2::client::ResponseFuture, limit: Duration) -> Option<String> {
    tokio::time::timeout(limit, async move {
        let res = res.await.ok()?;
        if let Some(s) = res.headers().get("grpc-status") {
            return Some(s.to_str().ok()?.to_owned());
        }
        let mut body = res.into_body();
        while body.data().await.is_some() {}
        let trailers = body.trailers().await.ok()??;
        Some(trailers.get("grpc-status")?.to_str().ok()?.to_owned())
    })
    .await
    .ok()
    .flatten()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn incomplete_messages_past_the_byte_budget_end_with_resource_exhausted() {
    let _rss = rss_serial().await;
    let server = server_with("transport-budget", |t| {
        t.max_buffered_request_bytes = 8 << 20;
        t.message_receive_timeout = Duration::ZERO;
    })
    .await;
    let rss_before = rss_kb("self");
    // 24 calls each announcing a 3 MiB message and sending 1 MiB of it, then nothing.
    let mut calls = Vec::new();
    let mut conns = Vec::new();
    for _ in 0..6 {
        let (send, driver) = h2_connect(server.addr).await;
        for _ in 0..4 {
            calls.push(partial_message(&send, server.addr, 3 << 20, 1 << 20).await);
        }
        conns.push((send, driver));
    }
    let p99 = served(&server, 100).await;
    let mut exhausted = 0;
    let mut open = Vec::new();
    for (res, body) in calls {
        match grpc_status(res, Duration::from_secs(2)).await.as_deref() {
            Some("8") => exhausted += 1,
            other => open.push((other.map(str::to_owned), body)),
        }
    }
    let rss_after = rss_kb("self");
    println!(
        "24 calls x 1 MiB of a 3 MiB message, MaxBufferedRequestBytes 8 MiB: {exhausted} \
         ResourceExhausted, {} held; bystander p99 {p99:?}; RSS {rss_before} kB -> \
         {rss_after} kB",
        open.len()
    );
    assert!(exhausted >= 16, "calls past the budget ended: {exhausted}");
    assert!(open.len() <= 8, "at most 8 MiB held: {}", open.len());
    drop(open);
    drop(conns);
    served(&server, 10).await;
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_connection_cannot_fill_the_whole_byte_budget() {
    let _rss = rss_serial().await;
    let server = server_with("transport-conn-budget", |t| {
        t.max_buffered_request_bytes = 4 << 20;
        t.max_connection_buffered_request_bytes = 2 << 20;
        t.message_receive_timeout = Duration::ZERO;
    })
    .await;
    // The attacker: 4 calls on one connection, each sending 1 MiB of a 3 MiB message.
    let (send, driver) = h2_connect(server.addr).await;
    let mut calls = Vec::new();
    for _ in 0..4 {
        calls.push(partial_message(&send, server.addr, 3 << 20, 1 << 20).await);
    }
    let mut exhausted = 0;
    let mut held = Vec::new();
    for (res, body) in calls {
        match grpc_status(res, Duration::from_secs(2)).await.as_deref() {
            Some("8") => exhausted += 1,
            _ => held.push(body),
        }
    }
    // Another client still has half the server's budget: a 1.5 MiB message (about 100 DATA
    // frames, charged while it arrives) goes through while the attacker holds its share.
    let mut client = server.client().await;
    let name = "b".repeat(3 << 19);
    let reply = client
        .say_hello(HelloRequest { name: name.clone() })
        .await
        .map(|r| r.into_inner().message.len());
    println!(
        "4 calls x 1 MiB on one connection, MaxConnectionBufferedRequestBytes 2 MiB of 4 MiB: \
         {exhausted} ResourceExhausted, {} held; another client's 1.5 MiB message: {reply:?}",
        held.len()
    );
    assert!(
        exhausted >= 2,
        "calls past the connection's share ended: {exhausted}"
    );
    assert_eq!(reply.unwrap(), name.len() + "hello ".len());
    drop(held);
    drop((send, driver));
    served(&server, 10).await;
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_not_received_whole_in_time_ends_with_resource_exhausted() {
    let timeout = Duration::from_millis(500);
    let server = server_with("transport-msg-timeout", |t| {
        t.message_receive_timeout = timeout
    })
    .await;
    let (send, _driver) = h2_connect(server.addr).await;
    let started = Instant::now();
    let (res, _body) = partial_message(&send, server.addr, 1000, 10).await;
    let status = grpc_status(res, Duration::from_secs(5)).await;
    let took = started.elapsed();
    println!("a message stalled after 10 of 1000 octets: grpc-status {status:?} after {took:?}");
    assert_eq!(status.as_deref(), Some("8"));
    // Ended by MessageReceiveTimeout: not before it, and before the 5 s the status is awaited
    // (without the timeout the stalled message would hold the call forever); the margin above
    // the 500 ms is for a loaded machine.
    assert!(took >= timeout && took < timeout * 8, "{took:?}");
    // A quiet stream between messages is not touched: a long server stream still completes.
    served(&server, 10).await;
    server.shutdown().await.unwrap();
}

/// The child side of `accept_errors_back_off_under_fd_exhaustion`: a server in a process
/// with few file descriptors, serving until its stdin closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by accept_errors_back_off_under_fd_exhaustion, in a child with a low RLIMIT_NOFILE"]
async fn fd_exhaustion_child() {
    if std::env::var_os("ZRPC_FD_CHILD").is_none() {
        return;
    }
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_env_filter("zrpc=info")
        .try_init();
    let server = server_with("transport-fd", |_| {}).await;
    println!("ADDR {}", server.addr);
    let _ = tokio::task::spawn_blocking(|| {
        use std::io::Read;
        std::io::stdin().read(&mut [0u8; 1])
    })
    .await;
    server.shutdown().await.unwrap();
}

/// CPU time (utime + stime, clock ticks) of process `pid`.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after_comm = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = after_comm.split(' ').collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accept_errors_back_off_under_fd_exhaustion() {
    use std::io::BufRead;
    use std::process::{Command, Stdio};
    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new("prlimit")
        .arg("--nofile=64:64")
        .arg(&exe)
        .args([
            "server_transport::fd_exhaustion_child",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("ZRPC_FD_CHILD", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("prlimit runs the test binary");
    let pid = child.id();
    let stdout = child.stdout.take().unwrap();
    let addr: SocketAddr = tokio::task::spawn_blocking(move || {
        std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .find_map(|l| l.split("ADDR ").nth(1).and_then(|a| a.trim().parse().ok()))
    })
    .await
    .unwrap()
    .expect("the child prints its address");
    let stderr = child.stderr.take().unwrap();
    let log = tokio::task::spawn_blocking(move || {
        std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
            .collect::<Vec<_>>()
    });

    // 200 connections: past ~50 the child has no descriptor left to accept with.
    let mut held = Vec::new();
    let connecting = Instant::now();
    for _ in 0..200 {
        if let Ok(Ok(s)) =
            tokio::time::timeout(Duration::from_millis(200), TcpStream::connect(addr)).await
        {
            held.push(s);
        }
    }
    let connected = (held.len(), connecting.elapsed());
    // The server's CPU is measured over a 3 s window, after 0.5 s for the last accepts to settle.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let window = Duration::from_secs(3);
    let before = cpu_ticks(pid);
    tokio::time::sleep(window).await;
    let used = cpu_ticks(pid) - before;
    // The descriptors come back when the connections close; then the server serves again.
    drop(held);
    let recovered = Instant::now();
    let mut served_again = false;
    while recovered.elapsed() < Duration::from_secs(10) {
        let call = async {
            let mut c =
                zrpc_tests::pb::greeter_client::GreeterClient::connect(format!("http://{addr}"))
                    .await
                    .ok()?;
            c.say_hello(HelloRequest { name: "x".into() }).await.ok()
        };
        if let Ok(Some(_)) = tokio::time::timeout(Duration::from_secs(1), call).await {
            served_again = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let recovery = recovered.elapsed();
    drop(child.stdin.take());
    let _ = tokio::task::spawn_blocking(move || child.wait()).await;
    let log = log.await.unwrap();
    let accept_errors: Vec<_> = log
        .iter()
        .filter(|l| l.contains("accepting a connection failed"))
        .collect();
    let cpu_pct = used as f64 / window.as_secs_f64(); // 100 ticks per second
    println!(
        "fd exhaustion (RLIMIT_NOFILE 64, {} connections made in {:?}): server CPU {cpu_pct:.1}% over \
         {window:?}, {} accept-error log lines, first: {:?}; served again {recovery:?} after the \
         connections closed",
        connected.0,
        connected.1,
        accept_errors.len(),
        accept_errors.first()
    );
    assert!(served_again, "the server serves once descriptors are free");
    assert!(!accept_errors.is_empty(), "the accept errors are logged");
    assert!(
        cpu_pct < 5.0,
        "server CPU {cpu_pct:.1}% while out of descriptors"
    );
}

/// Sends `n` PINGs, then reads until EOF (bounded): (PING ACKs, GOAWAY (code, debug data)).
async fn ping_flood(sock: &mut TcpStream, n: u64) -> (usize, Option<(u32, Vec<u8>)>) {
    // One write: the server closes at the third strike, and octets still arriving after its
    // close would make its kernel answer with a reset (which can discard the GOAWAY).
    let flood: Vec<u8> = (0..n)
        .flat_map(|i| frame(6, 0, 0, &i.to_be_bytes()))
        .collect();
    if let Err(e) = sock.write_all(&flood).await {
        println!("the flood's write failed after the server closed: {e}");
    }
    let (mut acks, mut goaway) = (0, None);
    let deadline = Instant::now() + Duration::from_secs(3);
    while let Ok(Some((kind, flags, _, payload))) =
        tokio::time::timeout_at(deadline.into(), read_frame(sock)).await
    {
        match kind {
            6 if flags & 1 == 1 => acks += 1,
            7 => {
                let code = u32::from_be_bytes(payload[4..8].try_into().unwrap());
                goaway = Some((code, payload[8..].to_vec()));
            }
            _ => {}
        }
    }
    (acks, goaway)
}

/// grpc-go's keepalive enforcement (`KeepaliveMinTime`, default 5 min): a client that pings
/// without pause gets GOAWAY ENHANCE_YOUR_CALM "too_many_pings" at its third strike and the
/// connection is closed; a client whose pings follow the server's data (BDP estimation) and
/// other clients are unaffected; `KeepaliveMinTime: 0` answers every PING.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ping_floods_get_goaway_too_many_pings_as_from_grpc_go() {
    let server = server_with("transport-pings", |_| {}).await;
    let mut flood = raw_h2(server.addr).await;
    let started = Instant::now();
    let (acks, goaway) = ping_flood(&mut flood, 100).await;
    println!(
        "100 PINGs at once: {acks} answered, GOAWAY {:?} after {:?}",
        goaway
            .as_ref()
            .map(|(code, debug)| (code, String::from_utf8_lossy(debug))),
        started.elapsed()
    );
    let (code, debug) = goaway.expect("GOAWAY for the ping flood");
    assert_eq!(code, 0xb, "ENHANCE_YOUR_CALM");
    assert_eq!(debug, b"too_many_pings");
    assert!(
        acks <= 4,
        "at most the pings before the third strike are answered: {acks}"
    );
    // the connection is closed after the GOAWAY (ping_flood read until EOF within 3 s)
    assert!(started.elapsed() < Duration::from_secs(3), "closed");

    // A BDP-style pinger: one PING after each response the server sent; never a strike.
    let mut polite = raw_h2(server.addr).await;
    let headers = grpc_headers(zrpc_tests::greeter::SAY_HELLO, "localhost");
    for i in 0..10u64 {
        // a call on this connection, so that the server sends HEADERS and DATA on it
        let stream = 2 * u32::try_from(i).unwrap() + 1;
        polite
            .write_all(&frame(1, 0x4, stream, &headers))
            .await
            .unwrap();
        let msg = [0u8, 0, 0, 0, 3, 0x0a, 1, b'p']; // HelloRequest { name: "p" }
        polite
            .write_all(&frame(0, 0x1, stream, &msg))
            .await
            .unwrap();
        loop {
            let (kind, flags, s, _) = read_frame(&mut polite).await.expect("served");
            assert_ne!(kind, 7, "no GOAWAY for a polite pinger");
            if kind == 1 && s == stream && flags & 0x1 == 0x1 {
                break; // trailers: the call is over
            }
        }
        polite
            .write_all(&frame(6, 0, 0, &i.to_be_bytes()))
            .await
            .unwrap();
        loop {
            let (kind, flags, _, _) = read_frame(&mut polite).await.expect("ping answered");
            assert_ne!(kind, 7, "no GOAWAY for a polite pinger");
            if kind == 6 && flags & 1 == 1 {
                break;
            }
        }
    }
    served(&server, 10).await;
    drop((flood, polite));
    server.shutdown().await.unwrap();

    // KeepaliveMinTime: 0 answers every ping.
    let server = server_with("transport-pings-off", |t| {
        t.keepalive_min_time = Duration::ZERO;
    })
    .await;
    let mut sock = raw_h2(server.addr).await;
    for i in 0..50u64 {
        sock.write_all(&frame(6, 0, 0, &i.to_be_bytes()))
            .await
            .unwrap();
    }
    let mut acks = 0;
    while acks < 50 {
        let (kind, flags, _, _) =
            tokio::time::timeout(Duration::from_secs(3), read_frame(&mut sock))
                .await
                .expect("every ping answered")
                .expect("connection open");
        assert_ne!(kind, 7, "no GOAWAY with KeepaliveMinTime: 0");
        if kind == 6 && flags & 1 == 1 {
            acks += 1;
        }
    }
    drop(sock);
    server.shutdown().await.unwrap();
}
