//! The client-to-servers bench: three servers behind their proxies, a client over the proxies,
//! and what every case asserts of a run.

use std::time::{Duration, Instant};
use zrpc_tests::wait;

use tonic::Code;
use zrpc_client::Client;
use zrpc_client::conf::RpcClientConf;
use zrpc_tests::greeter::{TestGreeter, TestServer, start_server};
use zrpc_tests::pb::HelloRequest;
use zrpc_tests::pb::greeter_client::GreeterClient;
use zrpc_tests::toxiproxy::{Proxy, Toxiproxy};

use super::load::{Call, codes, failures, quantile};
use super::{assert_serving, retry_on_unavailable, server_conf};

/// The client's longest re-probe interval of an endpoint that keeps losing its pairs (p2c v2's
/// `PROBE_MAX`, `docs/balancing.md`).
const PROBE_MAX: Duration = Duration::from_secs(30);

/// Three servers behind their proxies and a client over the proxies.
pub(super) struct Bench {
    _toxiproxy: Toxiproxy,
    pub(super) servers: Vec<TestServer>,
    pub(super) proxies: Vec<Proxy>,
    pub(super) client: Client,
}

impl Bench {
    pub(super) async fn start(toxiproxy: Toxiproxy, policy: bool, timeout: Duration) -> Bench {
        let mut servers = Vec::new();
        let mut proxies = Vec::new();
        for name in ["a", "b", "c"] {
            let s = start_server(server_conf(name), TestGreeter::new().with_names()).await;
            proxies.push(toxiproxy.proxy(name, &s.addr.to_string()).await);
            servers.push(s);
        }
        let mut conf =
            RpcClientConf::direct(proxies.iter().map(Proxy::endpoint)).with_timeout(timeout);
        if policy {
            conf = conf.with_method_config(retry_on_unavailable());
        }
        let client = Client::new(conf).await.expect("client");
        Bench {
            _toxiproxy: toxiproxy,
            servers,
            proxies,
            client,
        }
    }

    /// The faulted server `C` and its proxy.
    pub(super) fn c(&self) -> (&TestServer, &Proxy) {
        (&self.servers[2], &self.proxies[2])
    }

    /// Waits until every server has started `n` calls.
    pub(super) async fn warm(&self, n: u64) {
        for s in &self.servers {
            s.greeter
                .wait_for("warm-up calls", |g| g.started() >= n)
                .await;
        }
    }

    /// Whether some server other than `C` saw the call `name`.
    pub(super) fn seen_elsewhere(&self, name: &str) -> bool {
        self.servers[..2].iter().any(|s| s.greeter.saw(name))
    }

    /// Asserts that some call reached C and was answered by another server: the retry policy
    /// sent again a call the fault broke (so a case without failures did meet the fault).
    pub(super) fn assert_some_call_retried(&self, calls: &[Call]) {
        let (c, _) = self.c();
        assert!(
            calls
                .iter()
                .any(|call| c.greeter.saw(&call.name) && self.seen_elsewhere(&call.name)),
            "no call was retried after reaching C"
        );
    }

    /// Waits until `C` gets calls again after the toxic was taken off (5 more calls).
    ///
    /// C left the fault with a high latency, so it wins picks again only once a re-probe
    /// answers fast. A slow endpoint is re-probed when its last answer is older than 30 x its
    /// latency, at most [`PROBE_MAX`] (`docs/balancing.md`): a 1 s latency under the toxic puts
    /// the next probe up to 30 s after the heal. The check is that C is not shut out (the bug
    /// would keep it out for good), so the wait is that bound plus [`wait::LIMIT`], not a speed.
    pub(super) async fn c_gets_calls_again(&self) {
        let (c, proxy) = self.c();
        let before = c.greeter.started();
        let limit = PROBE_MAX + wait::LIMIT;
        let took = wait::within(limit, || {
            std::future::ready(c.greeter.started() > before + 5)
        })
        .await;
        let Some(took) = took else {
            // what the client made of C, for the failure's cause
            let proxied = proxy.endpoint();
            let views: Vec<serde_json::Value> = zrpc_core::inspect::client_snapshots()
                .into_iter()
                .filter(|v| v.to_string().contains(&proxied))
                .collect();
            panic!(
                "C ({proxied}) got {} calls within {:?} of the heal, not 5; the client's view: \
                 {:#}",
                c.greeter.started() - before,
                limit,
                serde_json::Value::Array(views)
            );
        };
        println!("  C got 5 calls {took:?} after the heal");
    }

    /// Every server answers its health check with SERVING, directly (not through its proxy).
    pub(super) async fn assert_servers_healthy(&self) {
        assert_serving(&self.servers).await;
    }

    /// 30 sequential calls after the heal all succeed.
    pub(super) async fn assert_client_healthy(&self) {
        let mut g = GreeterClient::new(self.client.clone());
        for i in 0..30 {
            let r = g
                .say_hello(HelloRequest {
                    name: format!("after-{i}"),
                })
                .await;
            assert!(r.is_ok(), "call {i} after the heal: {r:?}");
        }
    }
}

/// One row of the matrix, printed for docs/network-faults.md.
pub(super) fn report(case: &str, policy: bool, calls: &[Call], after: Instant) {
    let since: Vec<Call> = calls.iter().filter(|c| c.start >= after).cloned().collect();
    println!(
        "network fault [{case}] policy={}: {} calls, {} failed ({}), p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms (calls started after the fault: {}, p99 {:.1} ms)",
        if policy { "retry UNAVAILABLE" } else { "none" },
        calls.len(),
        failures(calls).len(),
        codes(calls),
        quantile(calls, 0.5).as_secs_f64() * 1e3,
        quantile(calls, 0.99).as_secs_f64() * 1e3,
        quantile(calls, 1.0).as_secs_f64() * 1e3,
        since.len(),
        quantile(&since, 0.99).as_secs_f64() * 1e3,
    );
    for c in failures(calls) {
        println!(
            "  failed {} after {:?}: {:?}",
            c.short(),
            c.took(),
            c.result
        );
    }
}

/// Asserts each failure is `Unavailable` (a broken connection), reached no server but `C` (it
/// was on C's link) and ended well before `deadline` (the client did not wait for it).
pub(super) fn assert_failures_on_c(bench: &Bench, calls: &[Call], deadline: Duration) {
    for c in failures(calls) {
        assert!(
            !bench.seen_elsewhere(&c.name),
            "{} failed but another server saw it: {:?}",
            c.short(),
            c.result
        );
        assert!(
            matches!(c.result, Err((Code::Unavailable, _))),
            "{} on a broken connection must fail with Unavailable: {:?}",
            c.short(),
            c.result
        );
        assert!(
            c.took() < deadline,
            "{} failed after {:?}, at its deadline {deadline:?}: {:?}",
            c.short(),
            c.took(),
            c.result
        );
    }
}
