//! rpc_soak and channel_soak: large unary calls in a row, on one client or each on a new one,
//! with grpc-go's soak settings.

use std::time::{Duration, Instant};

use super::unary::{LARGE_REQUEST, LARGE_RESPONSE, large_request};
use super::{Runner, show};
use crate::payload;
use crate::pb::test_service_client::TestServiceClient;

/// The soak cases' settings (grpc-go's `--soak_*` flags, with their defaults).
#[derive(Debug, Clone)]
pub struct SoakConf {
    /// Calls to make (`--soak_iterations`, 10).
    pub iterations: u32,
    /// Calls that may fail or be late (`--soak_max_failures`, 0).
    pub max_failures: u32,
    /// A call slower than this counts as failed
    /// (`--soak_per_iteration_max_acceptable_latency_ms`, 1000 ms).
    pub max_latency: Duration,
    /// The whole case must end within this (`--soak_overall_timeout_seconds`, 10 s).
    pub overall_timeout: Duration,
    /// At least this long from one call's start to the next
    /// (`--soak_min_time_ms_between_rpcs`, 0).
    pub min_time_between: Duration,
    /// Request payload bytes (`--soak_request_size`, 271828).
    pub request_size: usize,
    /// Response payload bytes (`--soak_response_size`, 314159).
    pub response_size: usize,
}

impl Default for SoakConf {
    fn default() -> SoakConf {
        SoakConf {
            iterations: 10,
            max_failures: 0,
            max_latency: Duration::from_millis(1000),
            overall_timeout: Duration::from_secs(10),
            min_time_between: Duration::ZERO,
            request_size: LARGE_REQUEST,
            response_size: LARGE_RESPONSE,
        }
    }
}

pub(super) async fn rpc_soak(r: &Runner) -> anyhow::Result<()> {
    soak(r, false).await
}

pub(super) async fn channel_soak(r: &Runner) -> anyhow::Result<()> {
    soak(r, true).await
}

async fn soak(r: &Runner, new_client_each_call: bool) -> anyhow::Result<()> {
    let conf = &r.soak;
    let start = Instant::now();
    let mut failures = Vec::new();
    let mut latencies = Vec::new();
    for i in 0..conf.iterations {
        anyhow::ensure!(
            start.elapsed() < conf.overall_timeout,
            "ran {i} of {} calls in the overall {:?}",
            conf.iterations,
            conf.overall_timeout
        );
        let earliest_next = tokio::time::Instant::now() + conf.min_time_between;
        let call_start = Instant::now();
        let result = if new_client_each_call {
            match zrpc::client(r.conf.clone()).await {
                Ok(client) => one_call(TestServiceClient::new(client), conf).await,
                Err(e) => Err(format!("build a new client: {e}")),
            }
        } else {
            one_call(r.stub(), conf).await
        };
        let latency = call_start.elapsed();
        match result {
            Err(e) => failures.push(format!("call {i}: {e}")),
            Ok(()) if latency > conf.max_latency => failures.push(format!(
                "call {i}: took {latency:?}, over {:?}",
                conf.max_latency
            )),
            Ok(()) => latencies.push(latency),
        }
        tokio::time::sleep_until(earliest_next).await;
    }
    latencies.sort();
    anyhow::ensure!(
        failures.len() <= conf.max_failures as usize,
        "{} of {} calls failed (at most {} may): {}; latencies of the others: {latencies:?}",
        failures.len(),
        conf.iterations,
        conf.max_failures,
        failures.join("; ")
    );
    Ok(())
}

async fn one_call(
    mut stub: TestServiceClient<zrpc::Client>,
    conf: &SoakConf,
) -> Result<(), String> {
    let reply = stub
        .unary_call(large_request(conf.request_size, conf.response_size))
        .await
        .map_err(|s| format!("UnaryCall failed with {}", show(&s)))?
        .into_inner();
    payload::check(reply.payload.as_ref(), conf.response_size).map_err(|e| e.to_string())
}
