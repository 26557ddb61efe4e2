//! Network faults between the client and its servers.
//!
//! Three zrpc greeter servers, each behind its own proxy; one `zrpc_client::Client` over the
//! three proxies with 8 closed-loop callers (4 with 256 KiB messages); a toxic on one server's
//! proxy (`C`) for part of the run. A toxic hits every HTTP/2 stream of the connections of its
//! proxy at once. The servers end healthy when each answers its health check; the client, when
//! `C` gets calls again once the toxic is gone and 30 calls in a row succeed.

use std::time::{Duration, Instant};

use zrpc_tests::greeter::{TestGreeter, start_server};
use zrpc_tests::pb::HelloRequest;
use zrpc_tests::pb::greeter_client::GreeterClient;
use zrpc_tests::toxiproxy::{Stream, Toxic};
use zrpc_tests::toxiproxy_or_skip;

use super::bench::{Bench, assert_failures_on_c, report};
use super::load::{Call, Load, failures, quantile};
use super::{WORKERS, server_conf};

// ---- slow link ------------------------------------------------------------------------------

/// Latency 300 ± 100 ms on C's answers: P2C moves the traffic to A and B. No call fails, and
/// fewer than 1 % of the calls made during the toxic met the slow link, which is what keeps
/// their p99 below the toxic's floor of 200 ms. The share is asserted, not the p99: on a
/// machine with both cores busy, calls to A and B also pass 200 ms now and then (seen: p99
/// 212 ms with C at 19 of 3,000 calls), which says nothing about where P2C sent them.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fault_slow_link_p2c_moves_away_no_failure_p99_under_200ms() {
    let toxiproxy = toxiproxy_or_skip!();
    let bench = Bench::start(toxiproxy, false, Duration::from_secs(2)).await;
    let mut load = Load::start(&bench.client, WORKERS, "", "");
    bench.warm(20).await;
    let (c, proxy) = bench.c();
    let toxic = proxy
        .add(Toxic::latency(
            Duration::from_millis(300),
            Duration::from_millis(100),
        ))
        .await;
    let faulted = Instant::now();
    let c_before = c.greeter.started();
    let n = load.completed();
    load.wait_completed(n + 3000, Duration::from_secs(60)).await;
    let c_during = c.greeter.started() - c_before;
    proxy.remove(&toxic).await;
    bench.c_gets_calls_again().await;
    let calls = load.stop().await;
    report("latency 300±100 ms", false, &calls, faulted);
    let after: Vec<Call> = calls
        .iter()
        .filter(|c| c.start >= faulted)
        .cloned()
        .collect();
    println!("  C got {c_during} of the calls during the toxic");
    assert!(failures(&calls).is_empty(), "no call fails on a slow link");
    let p99 = quantile(&after, 0.99);
    println!("  p99 of the calls after the toxic: {p99:?}");
    assert!(
        c_during * 100 < 3000,
        "C got {c_during} of the 3000 calls during the toxic (p99 {p99:?})"
    );
    bench.assert_servers_healthy().await;
    bench.assert_client_healthy().await;
}

// ---- blackhole --------------------------------------------------------------------------------

/// C's answers vanish (`timeout` 0 downstream: requests arrive, nothing comes back, no close)
/// while calls are in flight on it. Without a policy exactly the calls whose answer was on that
/// link fail, with `Unavailable`, when the client finds the connection silent (its probe gets no
/// byte for 1 s), about 1.3 s in, not at their 5 s deadline; at most one per caller. With a
/// retry policy none fails.
async fn blackhole_in_flight(policy: bool) {
    let toxiproxy = toxiproxy_or_skip!();
    let deadline = Duration::from_secs(5);
    let bench = Bench::start(toxiproxy, policy, deadline).await;
    // 20 ms handlers: C holds calls at any instant
    let mut load = Load::start(&bench.client, WORKERS, "", ",sleep:20");
    bench.warm(20).await;
    let (c, proxy) = bench.c();
    c.greeter
        .wait_for("calls in flight on C", |g| g.started() >= g.finished() + 2)
        .await;
    let toxic = proxy.add(Toxic::blackhole()).await;
    let faulted = Instant::now();
    let n = load.completed();
    load.wait_completed(n + 1000, Duration::from_secs(60)).await;
    proxy.remove(&toxic).await;
    bench.c_gets_calls_again().await;
    let calls = load.stop().await;
    report("blackhole in flight", policy, &calls, faulted);
    let failed = failures(&calls);
    if policy {
        assert!(failed.is_empty(), "with a retry policy no call fails");
        bench.assert_some_call_retried(&calls);
    } else {
        assert!(!failed.is_empty(), "calls were in flight on C: they fail");
        assert!(failed.len() <= WORKERS, "at most one failure per caller");
        assert_failures_on_c(&bench, &calls, Duration::from_millis(2500));
        for f in &failed {
            assert!(
                c.greeter.saw(&f.name),
                "{} failed but never reached C",
                f.name
            );
        }
    }
    bench.assert_servers_healthy().await;
    bench.assert_client_healthy().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fault_blackhole_in_flight_fails_only_the_calls_on_it_as_unavailable_before_the_deadline() {
    blackhole_in_flight(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fault_blackhole_in_flight_with_retry_policy_fails_no_call() {
    blackhole_in_flight(true).await;
}

/// C's link goes dark (both directions) while the client's connection to it is idle. The next
/// call that picks C does not wait for its 5 s deadline: the client finds the connection silent
/// within about 1.3 s; without a policy that one call fails with `Unavailable`, with a retry
/// policy it succeeds on A or B. Later calls avoid C.
async fn blackhole_idle(policy: bool) {
    let toxiproxy = toxiproxy_or_skip!();
    let deadline = Duration::from_secs(5);
    let bench = Bench::start(toxiproxy, policy, deadline).await;
    let load = Load::start(&bench.client, WORKERS, "warm-", "");
    bench.warm(20).await;
    load.stop().await;
    let (c, proxy) = bench.c();
    let toxics = proxy.add_both(Toxic::blackhole()).await;
    let faulted = Instant::now();
    let mut g = GreeterClient::new(bench.client.clone());
    let mut calls = Vec::new();
    // One call at a time: the calls go on until one picked C, and 50 more after it. C may lose
    // every P2C pair for a while (its warm-up latency is chance); the picker sends to an
    // endpoint it has not picked for 1 s (go-zero's forcePick), so C is picked within ~1 s.
    let mut after_c = None;
    for i in 0.. {
        if after_c.is_none() && faulted.elapsed() > Duration::from_secs(10) {
            break;
        }
        let name = format!("idle-{i}");
        let start = Instant::now();
        let r = g.say_hello(HelloRequest { name: name.clone() }).await;
        let end = Instant::now();
        let picked_c = c.greeter.saw(&name) || end - start > Duration::from_millis(500);
        calls.push(Call {
            name,
            start,
            end,
            result: r
                .map(|_| ())
                .map_err(|s| (s.code(), s.message().to_owned())),
        });
        if picked_c && after_c.is_none() {
            after_c = Some(i);
        }
        if after_c.is_some_and(|first| i >= first + 50) {
            break;
        }
    }
    for t in &toxics {
        proxy.remove(t).await;
    }
    let hit = after_c.expect("a call picked C");
    let first = &calls[hit];
    report("blackhole idle", policy, &calls, faulted);
    assert!(
        first.took() < Duration::from_millis(2500),
        "the first call on the dark link took {:?} (deadline {deadline:?})",
        first.took()
    );
    let failed = failures(&calls);
    if policy {
        assert!(failed.is_empty(), "with a retry policy no call fails");
    } else {
        assert_eq!(
            failed.len(),
            1,
            "exactly the call that met the dark link fails"
        );
        assert_eq!(failed[0].name, first.name);
        assert_failures_on_c(&bench, &calls, Duration::from_millis(2500));
    }
    // a call sent to C would hang until the client's probe gives up (1 s)
    for later in &calls[hit + 1..] {
        assert!(
            later.took() < Duration::from_secs(1),
            "{} after the dark link was found took {:?}: it went to C",
            later.name,
            later.took()
        );
    }
    bench.assert_servers_healthy().await;
    let load = Load::start(&bench.client, WORKERS, "healed-", "");
    bench.c_gets_calls_again().await;
    let healed = load.stop().await;
    assert!(failures(&healed).is_empty(), "{:?}", failures(&healed));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fault_blackhole_idle_next_call_fails_fast_as_unavailable_not_at_its_deadline() {
    blackhole_idle(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fault_blackhole_idle_with_retry_policy_next_call_succeeds_fast() {
    blackhole_idle(true).await;
}

// ---- reset, cut --------------------------------------------------------------------------------

/// Runs `toxic` on C's link for `hold` under 8 callers of 20 ms calls with `suffix` appended
/// to each name; returns the calls and the instant the toxic went on.
async fn hold_toxic(
    bench: &Bench,
    toxics: &[Toxic],
    hold: usize,
    suffix: &str,
) -> (Vec<Call>, Instant) {
    let mut load = Load::start(&bench.client, WORKERS, "", suffix);
    bench.warm(20).await;
    let (c, proxy) = bench.c();
    c.greeter
        .wait_for("calls in flight on C", |g| g.started() >= g.finished() + 2)
        .await;
    let mut names = Vec::new();
    for t in toxics {
        names.push(proxy.add(t.clone()).await);
    }
    let faulted = Instant::now();
    let n = load.completed();
    load.wait_completed(n + hold, Duration::from_secs(60)).await;
    for t in &names {
        proxy.remove(t).await;
    }
    bench.c_gets_calls_again().await;
    (load.stop().await, faulted)
}

/// A connection of C broken while calls run on it (`toxic` held for 1,500 calls of 20 ms,
/// `suffix` appended to each name). Without a policy only calls on C's link fail, each with
/// `Unavailable`, and some do. With a retry policy only calls C had answered may fail: a cut
/// after C's answer began commits the call (it cannot be sent again). That is the case of
/// every failure where `committed` (the cut is in the answers); where the cut is in the
/// requests, a loaded machine can still land one on a call being answered, rarely.
async fn broken_link(case: &str, toxic: Toxic, suffix: &str, policy: bool, committed: bool) {
    let toxiproxy = toxiproxy_or_skip!();
    let bench = Bench::start(toxiproxy, policy, Duration::from_secs(2)).await;
    let (calls, faulted) = hold_toxic(&bench, &[toxic], 1500, suffix).await;
    report(case, policy, &calls, faulted);
    let (c, _) = bench.c();
    if !policy {
        assert!(
            !failures(&calls).is_empty(),
            "calls on the broken link fail"
        );
    } else {
        // A call fails only if it could not be sent again: C had answered it (its answer had
        // begun, which commits it). Where the cut is in the requests (`!committed`), that
        // happens only when a loaded machine lets a cut land while a call that was already
        // sent whole is being answered (seen once under a CPU hog on both cores); a call that
        // failed without C answering it is the bug, whichever way the link was cut.
        let failed = failures(&calls);
        for f in &failed {
            assert!(
                c.greeter.answered(&f.name),
                "{} failed with a retry policy but C had not answered it: {:?}",
                f.short(),
                f.result
            );
        }
        if !committed {
            assert!(
                failed.len() * 100 <= calls.len(),
                "with a retry policy at most one call in a hundred fails (answered by C): {}",
                failed.len()
            );
        }
    }
    if policy {
        bench.assert_some_call_retried(&calls);
    }
    assert_failures_on_c(&bench, &calls, Duration::from_millis(1500));
    bench.assert_servers_healthy().await;
    bench.assert_client_healthy().await;
}

/// `reset_peer` on C's answers: closed 300 ms after the next bytes, again on each new
/// connection while the toxic stays.
fn reset_after_300ms() -> Toxic {
    Toxic::reset_peer(Duration::from_millis(300))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fault_reset_peer_fails_only_calls_on_the_reset_link_as_unavailable() {
    broken_link(
        "reset_peer 300 ms",
        reset_after_300ms(),
        ",sleep:20",
        false,
        false,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fault_reset_peer_with_retry_policy_fails_no_call() {
    broken_link(
        "reset_peer 300 ms",
        reset_after_300ms(),
        ",sleep:20",
        true,
        false,
    )
    .await;
}

/// 8 KiB names (and so 8 KiB answers): a 20,000-byte cut lands inside a message.
fn padding() -> String {
    format!(",sleep:20,{}", "x".repeat(8 * 1024))
}

/// `limit_data` 20,000 bytes on C's requests (`upstream`): each connection is cut inside a
/// request message, before any answer to it.
fn cut_requests() -> Toxic {
    Toxic::limit_data(20_000).stream(Stream::Upstream)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fault_limit_data_cut_in_a_request_fails_only_calls_on_it_as_unavailable() {
    broken_link(
        "limit_data 20,000 B upstream",
        cut_requests(),
        &padding(),
        false,
        false,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fault_limit_data_cut_in_a_request_with_retry_policy_fails_no_call() {
    broken_link(
        "limit_data 20,000 B upstream",
        cut_requests(),
        &padding(),
        true,
        false,
    )
    .await;
}

/// `limit_data` 20,000 bytes on C's answers (`downstream`): each connection is cut inside an
/// answer.
fn cut_answers() -> Toxic {
    Toxic::limit_data(20_000)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fault_limit_data_cut_in_an_answer_fails_only_calls_on_it_as_unavailable() {
    broken_link(
        "limit_data 20,000 B downstream",
        cut_answers(),
        &padding(),
        false,
        true,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fault_limit_data_cut_in_an_answer_with_retry_policy_fails_only_begun_answers() {
    broken_link(
        "limit_data 20,000 B downstream",
        cut_answers(),
        &padding(),
        true,
        true,
    )
    .await;
}

// ---- slicer, bandwidth ---------------------------------------------------------------------------

/// Every byte in its own piece, both directions, on all three links from the start: the
/// server's frame scanner and both HTTP/2 stacks see every split. No call fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fault_slicer_one_byte_pieces_both_directions_no_failure() {
    let toxiproxy = toxiproxy_or_skip!();
    let bench = Bench::start(toxiproxy, false, Duration::from_secs(5)).await;
    for p in &bench.proxies {
        p.add_both(Toxic::slicer(1, 0, Duration::from_micros(10)))
            .await;
    }
    let faulted = Instant::now();
    let mut load = Load::start(&bench.client, 4, "", "");
    load.wait_completed(300, Duration::from_secs(60)).await;
    let calls = load.stop().await;
    report("slicer 1 B both directions", false, &calls, faulted);
    assert!(failures(&calls).is_empty(), "no call fails");
    for s in &bench.servers {
        assert!(s.greeter.started() > 0, "{} got no call", s.addr);
    }
    bench.assert_servers_healthy().await;
}

/// C's link carries at most 512 KB/s each way while 4 callers send 256 KiB requests and get
/// 256 KiB answers: a call alone on C takes about 1 s, on A or B about 15 ms. The
/// 5 s deadline leaves room for every call that can be on C when its link slows (all four:
/// 1 MiB each way, 2 s per direction), so a call that meets the slow link is slow, never failed.
/// P2C moves the traffic to A and B (C gets under 5 % of the calls): no call fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fault_bandwidth_256k_messages_no_call_reaches_its_5s_deadline() {
    let toxiproxy = toxiproxy_or_skip!();
    // 256 KiB messages queued on a slow link: tens of MB held while the tests that measure
    // this process's RSS would count them as their own
    let _rss = zrpc_tests::bench::rss_serial().await;
    let deadline = Duration::from_secs(5);
    let bench = Bench::start(toxiproxy, false, deadline).await;
    let big = format!(",{}", "x".repeat(256 * 1024));
    let mut load = Load::start(&bench.client, 4, "", &big);
    bench.warm(5).await;
    let (c, proxy) = bench.c();
    let toxics = proxy.add_both(Toxic::bandwidth(512)).await;
    let faulted = Instant::now();
    let c_before = c.greeter.started();
    let n = load.completed();
    load.wait_completed(n + 600, Duration::from_secs(60)).await;
    let c_during = c.greeter.started() - c_before;
    for t in &toxics {
        proxy.remove(t).await;
    }
    bench.c_gets_calls_again().await;
    let calls = load.stop().await;
    report("bandwidth 512 KB/s, 256 KiB", false, &calls, faulted);
    println!("  C got {c_during} of the calls during the toxic");
    assert!(failures(&calls).is_empty(), "no call fails");
    assert!(
        c_during * 20 < 600,
        "C got {c_during} of the 600 calls during the toxic (want < 5 %)"
    );
    bench.assert_servers_healthy().await;
    bench.assert_client_healthy().await;
}

/// One call on a raw HTTP/2 connection to `addr` with `:authority: authority` (literal HPACK):
/// `Ok` once a reply message arrives, `Err` on a reset, a GOAWAY or the end of the connection.
async fn raw_call(addr: std::net::SocketAddr, authority: &str) -> Result<(), String> {
    use tokio::io::AsyncWriteExt;
    use zrpc_tests::h2raw::{HELLO_MESSAGE, frame, grpc_headers, kind, raw_h2, read_frame};
    let mut sock = raw_h2(addr).await;
    let headers = grpc_headers(zrpc_tests::greeter::SAY_HELLO, authority);
    let mut out = frame(kind::HEADERS, 0x4, 1, &headers); // END_HEADERS
    out.extend(frame(kind::DATA, 0x1, 1, &HELLO_MESSAGE)); // END_STREAM
    sock.write_all(&out).await.map_err(|e| e.to_string())?;
    loop {
        match read_frame(&mut sock).await {
            Some((kind::DATA, _, 1, _)) => return Ok(()),
            Some((kind::RST_STREAM, _, 1, p)) => return Err(format!("RST_STREAM {p:?}")),
            Some((kind::GOAWAY, _, _, p)) => return Err(format!("GOAWAY {p:?}")),
            Some(_) => {}
            None => return Err("connection closed".to_owned()),
        }
    }
}

/// A go-zero-style multi-host `:authority` (`h1:p1,h2:p2`, which `h2` refuses unless the
/// server repairs it below `h2`) sent in 1-byte pieces both ways: the server's frame scanner
/// sees the header block split at every byte and still repairs it; each call is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fault_slicer_one_byte_pieces_the_multi_host_authority_is_repaired() {
    let toxiproxy = toxiproxy_or_skip!();
    let server = start_server(server_conf("authority"), TestGreeter::new()).await;
    let proxy = toxiproxy.proxy("authority", &server.addr.to_string()).await;
    proxy
        .add_both(Toxic::slicer(1, 0, Duration::from_micros(10)))
        .await;
    let addr: std::net::SocketAddr = proxy.endpoint().parse().unwrap();
    let authority = format!("127.0.0.1:{},127.0.0.1:{}", addr.port(), server.addr.port());
    for i in 0..5 {
        raw_call(addr, &authority)
            .await
            .unwrap_or_else(|e| panic!("call {i} with :authority {authority}: {e}"));
    }
    assert_eq!(server.greeter.finished(), 5);
}
