//! Network faults made by Toxiproxy (`zrpc_tests::toxiproxy`, docs/network-faults.md): between
//! the client and its servers (`servers`) and on the links to etcd (`etcd`).
//!
//! Each case states which calls may fail and why, checks the code they failed with, and that
//! the servers and the client end healthy. With a retry policy (`MethodConfig` retry on
//! `UNAVAILABLE`, docs/retries.md) every case but a cut after the response began has no failed
//! call. Failed calls are told apart by name: each call has its own (`load`), and each greeter
//! records the names it saw (`TestGreeter::with_names`).

mod bench;
mod etcd;
mod load;
mod servers;

use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use zrpc_client::conf::{MethodConf, MethodName, RetryPolicyConf};
use zrpc_tests::greeter::{TestServer, test_conf};

/// Closed-loop callers.
const WORKERS: usize = 8;

/// A test server's config with CPU-adaptive shedding off: on a shared machine the CPU runs hot
/// and the shedder would answer `ResourceExhausted` for reasons no network fault causes.
pub(crate) fn server_conf(name: &str) -> zrpc_server::RpcServerConf {
    // The callers' deadlines are the ones the tests state: without `Timeout: 0` the server's own
    // 2 s (go-zero's default) would end a call whose request is still crossing a slowed link.
    test_conf(name)
        .with_cpu_threshold(0)
        .with_timeout(std::time::Duration::ZERO)
}

/// `greeter.Greeter` retried on `UNAVAILABLE` (3 attempts, the default back-off).
pub(crate) fn retry_on_unavailable() -> MethodConf {
    MethodConf::retry(
        [MethodName::new("greeter.Greeter", "")],
        RetryPolicyConf::default(),
    )
}

/// Every one of `servers` answers its health check with SERVING, directly.
pub(crate) async fn assert_serving(servers: &[TestServer]) {
    for s in servers {
        let mut h = HealthClient::new(s.channel().await);
        let status = h
            .check(HealthCheckRequest {
                service: String::new(),
            })
            .await
            .expect("health check")
            .into_inner()
            .status;
        assert_eq!(status, ServingStatus::Serving as i32, "{}", s.addr);
    }
}
