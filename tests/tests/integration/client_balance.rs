//! P2C+EWMA vs round robin with three real servers, one 50x slower: the slow server's share.
//!
//! The servers sleep 5 ms and 250 ms: with smaller delays the loopback and debug-build overhead
//! (about 1 ms per call here) would make the "fast" servers much less than 50x faster.

use std::sync::Arc;
use std::time::{Duration, Instant};

use zrpc_client::Client;
use zrpc_client::conf::{BalancerName, RpcClientConf};
use zrpc_tests::pb::HelloRequest;
use zrpc_tests::pb::greeter_client::GreeterClient;
use zrpc_tests::wait;

use crate::client_support::Backend;

const REQUESTS: usize = 3000;
const CONCURRENCY: usize = 50;
const FAST: Duration = Duration::from_millis(5);
const SLOW: Duration = Duration::from_millis(250);

/// Runs `REQUESTS` calls with `CONCURRENCY` workers; returns the slow server's share and the time.
async fn share_of_slow(balancer: BalancerName) -> (f64, Duration, usize) {
    let fast_a = Backend::start("a", FAST);
    let fast_b = Backend::start("b", FAST);
    let slow = Backend::start("c", SLOW);
    let conf = RpcClientConf::direct([fast_a.endpoint(), fast_b.endpoint(), slow.endpoint()])
        .with_balancer(balancer)
        .with_timeout(Duration::from_secs(10));
    let client = Client::new(conf).await.unwrap();
    let started = Instant::now();
    let failures = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut workers = Vec::new();
    for w in 0..CONCURRENCY {
        let mut greeter = GreeterClient::new(client.clone());
        let failures = failures.clone();
        workers.push(tokio::spawn(async move {
            for i in 0..REQUESTS / CONCURRENCY {
                let r = greeter
                    .say_hello(HelloRequest {
                        name: format!("{w}-{i}"),
                    })
                    .await;
                if r.is_err() {
                    failures.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
            }
        }));
    }
    for w in workers {
        w.await.unwrap();
    }
    let elapsed = started.elapsed();
    let total = fast_a.hits() + fast_b.hits() + slow.hits();
    assert_eq!(total as usize, REQUESTS);
    (
        slow.hits() as f64 / REQUESTS as f64,
        elapsed,
        failures.load(std::sync::atomic::Ordering::SeqCst),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn client_p2c_avoids_the_slow_server_round_robin_does_not() {
    let (p2c, p2c_time, p2c_failed) = share_of_slow(BalancerName::P2cEwma).await;
    let (rr, rr_time, rr_failed) = share_of_slow(BalancerName::RoundRobin).await;
    println!(
        "slow server share of {REQUESTS} requests ({CONCURRENCY} concurrent; servers {FAST:?}, {FAST:?}, {SLOW:?}): \
         p2c_ewma {:.2}% in {p2c_time:?}, round_robin {:.2}% in {rr_time:?}",
        p2c * 100.0,
        rr * 100.0
    );
    assert_eq!(p2c_failed + rr_failed, 0);
    assert!(
        p2c < 0.05,
        "p2c_ewma sent {:.2}% to the slow server",
        p2c * 100.0
    );
    assert!(
        rr > 0.30,
        "round robin sent {:.2}% to the slow server",
        rr * 100.0
    );
}

/// A slow server joining a warm client under load gets a probe and a trickle, not a flood (go-zero's
/// fresh stats with lag 0 make a new node ~1000x more attractive, and reset every other node too).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn client_new_slow_endpoint_is_probed_not_flooded() {
    let a = Backend::start("a", FAST);
    let b = Backend::start("b", FAST);
    let slow = Backend::start("c", SLOW);
    let (tx, rx) = tokio::sync::watch::channel(Some(Arc::new(vec![a.endpoint(), b.endpoint()])));
    let resolution = zrpc_client::resolver::Resolution::new(rx, ());
    let conf = RpcClientConf::default().with_timeout(Duration::from_secs(10));
    let client = Client::with_resolution(conf, "test:///probe", resolution)
        .await
        .unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut workers = Vec::new();
    for w in 0..20 {
        let mut greeter = GreeterClient::new(client.clone());
        let stop = stop.clone();
        workers.push(tokio::spawn(async move {
            let mut i = 0;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                greeter
                    .say_hello(HelloRequest {
                        name: format!("{w}-{i}"),
                    })
                    .await
                    .unwrap();
                i += 1;
            }
        }));
    }
    // the client is warm: both fast endpoints have stats from 50 calls each
    wait::until("50 calls on each fast endpoint", || {
        let eps = client.endpoints();
        eps.len() == 2 && eps.iter().all(|e| e.requests > 50)
    })
    .await;
    let before = a.hits() + b.hits();
    tx.send_replace(Some(Arc::new(vec![
        a.endpoint(),
        b.endpoint(),
        slow.endpoint(),
    ])));
    // The measurement window: the second after the slow endpoint joined (a time window, as its
    // probes and their back-off are timed).
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    for w in workers {
        w.await.unwrap();
    }
    let fast_after = a.hits() + b.hits() - before;
    let share = slow.hits() as f64 / (fast_after + slow.hits()) as f64;
    println!(
        "new slow endpoint: {} of {} calls in the second after it joined ({:.2}%)",
        slow.hits(),
        fast_after + slow.hits(),
        share * 100.0
    );
    assert!(slow.hits() >= 1, "it was probed");
    assert!(share < 0.05, "flooded: {:.2}%", share * 100.0);
    // Measured here: 8-14 calls with the one-probe rule, ~27 without it (lag 0 until the first
    // 250 ms answer comes back). Too close under CI noise for an absolute bound; the deterministic
    // comparison is the picker's simulation test (0.11% vs 13%).
    // the fast endpoints kept their stats across the update
    let eps = client.endpoints();
    assert!(
        eps.iter()
            .filter(|e| e.addr != slow.endpoint())
            .all(|e| e.requests > 50)
    );
}

/// With go-zero's `forcePick` (keyed to the last pick, 1 s), a client with one call at
/// a time sends about two thirds of its calls to a server whose calls take a second (it is
/// overdue again the moment its call returns). v2 re-probes it only when its last answer is
/// older than max(1 s, 30 x its latency): one cold probe in a few seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_one_call_at_a_time_avoids_a_one_second_server() {
    let a = Backend::start("a", FAST);
    let b = Backend::start("b", FAST);
    let slow = Backend::start("c", Duration::from_millis(1000));
    let conf = RpcClientConf::direct([a.endpoint(), b.endpoint(), slow.endpoint()])
        .with_timeout(Duration::from_secs(10));
    let client = Client::new(conf).await.unwrap();
    let mut greeter = GreeterClient::new(client);
    let started = Instant::now();
    let mut calls = 0u64;
    while started.elapsed() < Duration::from_secs(6) {
        greeter
            .say_hello(HelloRequest {
                name: format!("{calls}"),
            })
            .await
            .unwrap();
        calls += 1;
    }
    let share = slow.hits() as f64 / calls as f64;
    println!(
        "one call at a time for 6 s: {} of {calls} calls to the 1000 ms server ({:.2}%)",
        slow.hits(),
        share * 100.0
    );
    assert!(slow.hits() >= 1, "the cold probe");
    assert!(share <= 0.02, "slow share {:.2}%", share * 100.0);
}

/// v2 ejection: a server that answers every call `Unavailable` is ejected after 3 consecutive
/// failures (then 1 s, 2 s, 4 s... between single trial calls); the success score alone (v1)
/// barely moves at high rates, so it kept getting about a third of the calls.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn client_ejects_a_failing_server() {
    let a = Backend::start("a", FAST);
    let b = Backend::start("b", FAST);
    let bad = Backend::start("c", FAST);
    bad.set_failure(tonic::Code::Unavailable);
    let conf = RpcClientConf::direct([a.endpoint(), b.endpoint(), bad.endpoint()])
        .with_timeout(Duration::from_secs(10));
    let client = Client::new(conf).await.unwrap();
    let failures = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut workers = Vec::new();
    for w in 0..10 {
        let mut greeter = GreeterClient::new(client.clone());
        let failures = failures.clone();
        workers.push(tokio::spawn(async move {
            for i in 0..200 {
                let r = greeter
                    .say_hello(HelloRequest {
                        name: format!("{w}-{i}"),
                    })
                    .await;
                if r.is_err() {
                    failures.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
            }
        }));
    }
    for w in workers {
        w.await.unwrap();
    }
    let failed = failures.load(std::sync::atomic::Ordering::SeqCst);
    println!(
        "2000 calls, one of three servers failing: {failed} failed, {} reached it",
        bad.hits()
    );
    // 3 to eject, then one trial per ejection (1 s, 2 s, ...) during a run of a few seconds;
    // the 10 calls in flight when it is ejected may add a few
    assert!(failed <= 40, "{failed} calls failed");
}
