//! Retries and hedging under the retry budget, against real servers: what a policy recovers,
//! what the budget caps, and what is never retried.

use std::time::{Duration, Instant};

use std::sync::Arc;
use tonic::Code;

use zrpc_client::conf::{
    BalancerName, HedgingPolicyConf, MethodConf, MethodName, RetryBudgetConf, RetryPolicyConf,
    RpcClientConf,
};
use zrpc_client::{Client, ClientHandles};
use zrpc_core::breaker::{BreakerConfig, BreakerRegistry};
use zrpc_tests::pb::HelloRequest;
use zrpc_tests::pb::greeter_client::GreeterClient;

use crate::client_support::Backend;

const GREETER: &str = "greeter.Greeter";

/// `calls` calls from `workers` concurrent callers: (ok, failed, latencies of every call).
async fn run(client: &Client, calls: usize, workers: usize) -> (usize, usize, Vec<Duration>) {
    let per = calls / workers;
    let mut tasks = Vec::new();
    for w in 0..workers {
        let mut greeter = GreeterClient::new(client.clone());
        tasks.push(tokio::spawn(async move {
            let mut out = Vec::with_capacity(per);
            for i in 0..per {
                let start = Instant::now();
                let r = greeter
                    .say_hello(HelloRequest {
                        name: format!("{w}-{i}"),
                    })
                    .await;
                out.push((r.is_ok(), start.elapsed()));
            }
            out
        }));
    }
    let mut ok = 0;
    let mut failed = 0;
    let mut lat = Vec::new();
    for t in tasks {
        for (good, d) in t.await.unwrap() {
            if good {
                ok += 1;
            } else {
                failed += 1;
            }
            lat.push(d);
        }
    }
    (ok, failed, lat)
}

/// The `per_mille` quantile of `lat`.
fn quantile(lat: &[Duration], per_mille: usize) -> Duration {
    let mut lat = lat.to_vec();
    lat.sort();
    lat[(lat.len() * per_mille / 1000).min(lat.len() - 1)]
}

fn greeter_retry(policy: RetryPolicyConf) -> MethodConf {
    MethodConf::retry([MethodName::new(GREETER, "")], policy)
}

/// A client of `backends` without its breaker (these tests count what reaches the servers; an
/// open breaker would keep calls from them and hide what the retries do).
fn direct(backends: &[&Backend]) -> RpcClientConf {
    let mut conf = RpcClientConf::direct(backends.iter().map(|b| b.endpoint()));
    conf.middlewares.breaker = false;
    conf
}

fn retry_conf(backends: &[&Backend], policy: RetryPolicyConf, ratio: f64) -> RpcClientConf {
    direct(backends)
        .with_method_config(greeter_retry(policy))
        .with_retry_budget(RetryBudgetConf::new(ratio, 10, Duration::from_secs(10)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_policy_hides_a_server_failing_a_third_of_its_calls() {
    let a = Backend::start("a", Duration::ZERO);
    let b = Backend::start("b", Duration::ZERO);
    let c = Backend::start("c", Duration::ZERO);
    c.set_failure_share(Code::Unavailable, 300);
    const CALLS: usize = 3000;
    // Round robin sends the failing server a third of the calls whatever their outcome (P2C
    // ejects it after three failures in a row and would hide what the policy does): 10% of the
    // calls fail without a policy.
    let round_robin = |conf: RpcClientConf| {
        let mut conf = conf;
        conf.balancer_name = BalancerName::RoundRobin;
        conf
    };

    let plain = Client::new(round_robin(direct(&[&a, &b, &c])))
        .await
        .unwrap();
    let (ok, failed, _) = run(&plain, CALLS, 6).await;
    let plain_share = ok as f64 / CALLS as f64;
    println!("without a policy: {ok} ok, {failed} failed ({plain_share:.4})");
    assert!(
        (0.85..0.95).contains(&plain_share),
        "{plain_share}: the failing server did not take its third"
    );

    let hits_before = a.hits() + b.hits() + c.hits();
    let policy = RetryPolicyConf::default().with_max_attempts(3);
    let client = Client::new(round_robin(retry_conf(&[&a, &b, &c], policy, 0.2)))
        .await
        .unwrap();
    let (ok, failed, _) = run(&client, CALLS, 6).await;
    let sent = a.hits() + b.hits() + c.hits() - hits_before;
    let share = ok as f64 / CALLS as f64;
    let extra = sent as f64 / CALLS as f64 - 1.0;
    println!(
        "with a retry policy: {ok} ok, {failed} failed ({share:.4}); {sent} requests, {extra:.3} extra per call"
    );
    assert!(share >= 0.999, "{share}");
    // extra requests within the budget: 20% of the calls plus 10/s over the window
    assert!(
        (sent as f64) <= CALLS as f64 * 1.2 + 100.0,
        "{sent} requests for {CALLS} calls"
    );
    // retries carry the attempt count and went elsewhere: the failing server saw each call once
    assert!(a.calls_after(Some(1)) + b.calls_after(Some(1)) > 0);
    assert_eq!(
        c.calls_after(Some(1)) + c.calls_after(Some(2)),
        0,
        "a retry went back to the server that failed"
    );

    // with P2C (the default) the failing server is ejected and the policy has little to do
    let p2c = Client::new(retry_conf(&[&a, &b, &c], RetryPolicyConf::default(), 0.2))
        .await
        .unwrap();
    let (ok, failed, _) = run(&p2c, CALLS, 6).await;
    println!("p2c_ewma with a retry policy: {ok} ok, {failed} failed");
    assert!(ok as f64 / CALLS as f64 >= 0.999);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_budget_caps_retries_when_every_server_fails() {
    let servers: Vec<Backend> = ["a", "b", "c"]
        .iter()
        .map(|id| Backend::start(id, Duration::ZERO))
        .collect();
    for s in &servers {
        s.set_failure(Code::Unavailable);
    }
    let refs: Vec<&Backend> = servers.iter().collect();
    let policy = RetryPolicyConf::default()
        .with_max_attempts(5)
        .with_backoff(Duration::from_millis(1), Duration::from_millis(2));
    let client = Client::new(retry_conf(&refs, policy, 0.1)).await.unwrap();
    const CALLS: usize = 2000;
    let (ok, _, _) = run(&client, CALLS, 4).await;
    let sent: u64 = servers.iter().map(Backend::hits).sum();
    let per_call = sent as f64 / CALLS as f64;
    println!("every server failing: {sent} requests for {CALLS} calls ({per_call:.3} per call)");
    assert_eq!(ok, 0);
    // 1 + ratio, plus the floor of 10/s over the 10 s window (100 retries)
    assert!(
        sent as f64 <= CALLS as f64 * 1.1 + 100.0,
        "{per_call} requests per call: a retry storm"
    );
    assert!(
        sent > CALLS as u64,
        "no retry at all: the budget's floor allows some"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_policy_a_sent_call_is_never_sent_again() {
    let a = Backend::start("a", Duration::ZERO);
    let b = Backend::start("b", Duration::ZERO);
    a.set_failure(Code::Unavailable);
    b.set_failure(Code::Unavailable);
    // a policy for another method only
    let conf = direct(&[&a, &b]).with_method_config(MethodConf::retry(
        [MethodName::new(GREETER, "SayHelloStream")],
        RetryPolicyConf::default(),
    ));
    let client = Client::new(conf).await.unwrap();
    let (ok, failed, _) = run(&client, 200, 2).await;
    assert_eq!((ok, failed), (0, 200));
    assert_eq!(
        a.hits() + b.hits(),
        200,
        "a call without a policy was retried"
    );
    // and a client without any MethodConfig
    let client = Client::new(direct(&[&a, &b])).await.unwrap();
    run(&client, 100, 1).await;
    assert_eq!(a.hits() + b.hits(), 300);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_never_cross_the_callers_deadline() {
    let a = Backend::start("a", Duration::from_millis(120));
    let b = Backend::start("b", Duration::from_millis(120));
    a.set_failure(Code::Unavailable);
    b.set_failure(Code::Unavailable);
    let policy = RetryPolicyConf::default()
        .with_max_attempts(5)
        .with_backoff(Duration::from_millis(10), Duration::from_millis(20));
    let conf = retry_conf(&[&a, &b], policy, 1.0).with_timeout(Duration::from_millis(300));
    let client = Client::new(conf).await.unwrap();
    let mut greeter = GreeterClient::new(client);
    for _ in 0..5 {
        let start = Instant::now();
        let err = greeter
            .say_hello(HelloRequest { name: "x".into() })
            .await
            .unwrap_err();
        let took = start.elapsed();
        // the servers' own expiry of what is left says Cancelled (tonic's server does)
        assert!(
            matches!(
                err.code(),
                Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled
            ),
            "{err:?}"
        );
        assert!(
            took < Duration::from_millis(300 + 100),
            "the call took {took:?} with a 300 ms timeout"
        );
    }
    // each attempt takes 120 ms: at most three fit in 300 ms, never five
    let sent = a.hits() + b.hits();
    assert!(sent <= 15, "{sent} attempts for 5 calls");
    assert!(sent >= 10, "{sent} attempts: the policy did not retry");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_negative_pushback_stops_retries_and_a_positive_one_delays_them() {
    let a = Backend::start("a", Duration::ZERO);
    let b = Backend::start("b", Duration::ZERO);
    for s in [&a, &b] {
        s.set_failure(Code::Unavailable);
        s.set_pushback("-1");
    }
    let conf = retry_conf(&[&a, &b], RetryPolicyConf::default(), 1.0);
    let client = Client::new(conf).await.unwrap();
    let mut greeter = GreeterClient::new(client);
    for _ in 0..10 {
        greeter
            .say_hello(HelloRequest { name: "x".into() })
            .await
            .unwrap_err();
    }
    assert_eq!(a.hits() + b.hits(), 10, "a server's stop was not honoured");

    for s in [&a, &b] {
        s.set_pushback("150");
    }
    let start = Instant::now();
    greeter
        .say_hello(HelloRequest { name: "x".into() })
        .await
        .unwrap_err();
    // three attempts, two waits of 150 ms (the policy's own back-off is at most 100 ms)
    assert_eq!(a.hits() + b.hits(), 13);
    assert!(start.elapsed() >= Duration::from_millis(300));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hedging_cuts_the_tail_of_a_stalling_server_for_few_extra_requests() {
    let a = Backend::start("a", Duration::ZERO);
    let b = Backend::start("b", Duration::ZERO);
    let c = Backend::start("c", Duration::ZERO);
    // one call in 100 of one server in three stalls for 200 ms
    c.set_stall(100, Duration::from_millis(200));
    const CALLS: usize = 4000;
    let slow = |lat: &[Duration]| {
        lat.iter()
            .filter(|d| **d >= Duration::from_millis(190))
            .count()
    };

    // round robin: each server takes a third of the calls, so the stalls reach the callers
    // however P2C would steer around the stalling server
    let round_robin = || {
        let mut conf = direct(&[&a, &b, &c]);
        conf.balancer_name = BalancerName::RoundRobin;
        conf
    };
    let plain = Client::new(round_robin()).await.unwrap();
    let (_, failed, lat) = run(&plain, CALLS, 4).await;
    assert_eq!(failed, 0);
    let (plain_slow, plain_p99, plain_p999) =
        (slow(&lat), quantile(&lat, 990), quantile(&lat, 999));

    let hits_before = a.hits() + b.hits() + c.hits();
    let conf = round_robin()
        .with_method_config(MethodConf::hedging(
            [MethodName::new(GREETER, "SayHello")],
            HedgingPolicyConf::default()
                .with_max_attempts(2)
                .with_delay(Duration::from_millis(20)),
        ))
        .with_retry_budget(RetryBudgetConf::new(0.1, 10, Duration::from_secs(10)));
    // with its breaker, in a registry of its own: the breaker sees every copy
    let mut conf = conf;
    conf.middlewares.breaker = true;
    let breakers = Arc::new(BreakerRegistry::new(BreakerConfig::default()));
    let hedged = Client::with_handles(conf, ClientHandles::default().breakers(breakers.clone()))
        .await
        .unwrap();
    let (_, failed, lat) = run(&hedged, CALLS, 4).await;
    assert_eq!(failed, 0);
    let name = format!("{}/{GREETER}/SayHello", hedged.target());
    let stats = breakers.find(&name).unwrap().stats(Instant::now());
    let (hedged_slow, hedged_p99, hedged_p999) =
        (slow(&lat), quantile(&lat, 990), quantile(&lat, 999));
    let sent = a.hits() + b.hits() + c.hits() - hits_before;
    let extra = sent as f64 / CALLS as f64 - 1.0;
    println!(
        "without hedging: {plain_slow} calls of {CALLS} took >= 190 ms, p99 {plain_p99:?}, \
         p99.9 {plain_p999:?}; hedged at 20 ms: {hedged_slow}, p99 {hedged_p99:?}, p99.9 \
         {hedged_p999:?}; {extra:.4} extra requests per call"
    );
    assert!(plain_slow >= 3, "the stalls did not reach the callers");
    assert!(
        hedged_slow * 4 <= plain_slow,
        "hedging left the stalls to the callers: {hedged_slow} slow calls"
    );
    assert!(extra <= 0.05, "{extra} extra requests per call");
    // a copy that lost the race is no failure of its server: no failure, a request per copy
    // (`rpc_client_attempts_total` counts the copies sent; a server may not see one that was
    // cancelled on its way)
    let hedges: u64 = zrpc_server::metrics::render()
        .lines()
        .filter(|l| {
            l.starts_with("rpc_client_attempts_total{")
                && l.contains("method=\"/greeter.Greeter/SayHello\"")
                && l.contains("kind=\"hedge\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum();
    assert_eq!(stats.failures, 0, "{stats:?}");
    assert_eq!(stats.total, CALLS as u64 + hedges, "{stats:?}");
    assert!(
        hedges >= sent - CALLS as u64,
        "{hedges} copies, {sent} requests"
    );
}

/// A server busy with long silent calls that fill its stream limit is not taken for a frozen
/// one: the calls stall (no byte for longer than ten latencies), the endpoint is probed, on a
/// connection of the probe's own (on the calls' connection it would wait behind the limit), the
/// server answers, and no call is cut.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_calls_that_fill_the_stream_limit_are_not_cut_by_a_probe() {
    let slow = Backend::start_limited("127.0.0.1:0", "slow", Duration::from_millis(1500), Some(2));
    let client = Client::new(direct(&[&slow]).with_timeout(Duration::from_secs(5)))
        .await
        .unwrap();
    let mut calls = Vec::new();
    for i in 0..2 {
        let mut greeter = GreeterClient::new(client.clone());
        calls.push(tokio::spawn(async move {
            greeter
                .say_hello(HelloRequest {
                    name: format!("{i}"),
                })
                .await
        }));
    }
    for c in calls {
        c.await.unwrap().unwrap();
    }
    // the stalled endpoint was probed, on a connection of the probe's own
    let connections = slow.connections();
    println!("long calls filling the stream limit: {connections} connections to the server");
    assert!(
        connections >= 2,
        "no probe connection: {connections} connection(s)"
    );
    // and the endpoint is usable at once: no probe left it suspect
    let mut greeter = GreeterClient::new(client.clone());
    greeter
        .say_hello(HelloRequest {
            name: "after".into(),
        })
        .await
        .unwrap();
}
