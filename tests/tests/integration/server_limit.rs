//! The adaptive concurrency limit on a real server whose handler is bound by a downstream
//! resource (4 places of 50 ms: 80 calls/s), not by its CPU, under 4x that load from zrpc
//! clients: the limit rejects what the resource cannot serve (`ResourceExhausted`) instead of
//! letting it wait until its deadline, critical calls are all served, every rejection is
//! counted with its reason, the gauges say what the limit is. Without the limit (go-zero's CPU
//! shedder alone, which never sees a hot CPU here), the calls wait for their deadline instead.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tonic::{Code, Request, Response, Status};
use zrpc::conf::{ClientMiddlewaresConf, ConcurrencyLimitConf, RpcClientConf};
use zrpc::{Tier, set_tier};
use zrpc_core::breaker::BreakerRegistry;
use zrpc_tests::greeter::test_conf;
use zrpc_tests::pb::greeter_client::GreeterClient;
use zrpc_tests::pb::greeter_server::{Greeter, GreeterServer};
use zrpc_tests::pb::{HelloReply, HelloRequest, HelloStreamRequest};

const PLACES: usize = 4;
const HOLD: Duration = Duration::from_millis(50);
/// Calls per second the resource serves.
const CAPACITY: f64 = PLACES as f64 / 0.05;

/// A handler that holds one of [`PLACES`] places of a resource for [`HOLD`] (FIFO, as a
/// connection pool), then answers: bound by the resource, its CPU stays idle.
#[derive(Debug, Clone)]
struct Pooled(Arc<Semaphore>);

#[tonic::async_trait]
impl Greeter for Pooled {
    async fn say_hello(&self, req: Request<HelloRequest>) -> Result<Response<HelloReply>, Status> {
        let _place = self.0.acquire().await.expect("never closed");
        tokio::time::sleep(HOLD).await;
        Ok(Response::new(HelloReply {
            message: format!("hello {}", req.into_inner().name),
        }))
    }

    type SayHelloStreamStream = Pin<
        Box<dyn tonic::codegen::tokio_stream::Stream<Item = Result<HelloReply, Status>> + Send>,
    >;

    async fn say_hello_stream(
        &self,
        _req: Request<HelloStreamRequest>,
    ) -> Result<Response<Self::SayHelloStreamStream>, Status> {
        Err(Status::unimplemented("unary only"))
    }
}

/// Calls of each tier in the overload's last two seconds.
#[derive(Debug, Default)]
struct Tally {
    ok: u32,
    rejected: u32,
    timed_out: u32,
    other: Vec<String>,
}

/// Serves [`Pooled`] with `limit`, offers 1x its capacity for 1 s (the limit finds its
/// minimum round-trip time and its level), then 4x for 3 s, one call in ten critical (set per
/// call); tallies the calls of the last two seconds by tier.
async fn overload(name: &str, limit: Option<ConcurrencyLimitConf>) -> (Tally, Tally, String) {
    let mut conf = test_conf(name);
    conf.concurrency_limit = limit;
    let server = zrpc::Server::new(conf)
        .expect("valid config")
        .add_service(GreeterServer::new(Pooled(Arc::new(Semaphore::new(PLACES)))))
        .breaker_registry(Arc::new(BreakerRegistry::default()))
        // The CPU shedder stays in the chain and sees this workload's CPU, not the machine's:
        // the calls wait on a pool, not on the CPU, so it reads cool. The machine's real CPU,
        // busy with other tests or processes, would make it reject calls, which is not what
        // these tests are about (seen on a loaded 2-core machine: hundreds shed).
        .cpu_usage(Arc::new(zrpc_core::cpu::FixedCpu::new(100)));
    let handle = server.handle();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let join = tokio::spawn(server.serve_with_listener(listener, std::future::pending()));
    let addr = handle.serving().await.expect("serves");

    // The client's breaker would count the server's rejections (ResourceExhausted is a
    // failure code) and open: off, to see what the server answers.
    let mut mw = ClientMiddlewaresConf::default();
    mw.breaker = false;
    let client = zrpc::client(RpcClientConf::direct([addr.to_string()]).with_middlewares(mw))
        .await
        .unwrap();
    let greeter = GreeterClient::new(client);
    let phases = [(1.0, Duration::from_secs(1)), (4.0, Duration::from_secs(3))];
    let start = tokio::time::Instant::now();
    let tally_from = start + Duration::from_secs(2);
    let mut calls = Vec::new();
    let mut n = 0u32;
    for (load, length) in phases {
        let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / (load * CAPACITY)));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
        let until = tokio::time::Instant::now() + length;
        while tick.tick().await < until {
            n += 1;
            let critical = n.is_multiple_of(10);
            let counted = tokio::time::Instant::now() >= tally_from;
            let mut g = greeter.clone();
            calls.push(tokio::spawn(async move {
                let mut req = Request::new(HelloRequest { name: "x".into() });
                req.set_timeout(Duration::from_secs(2));
                if critical {
                    set_tier(&mut req, Tier::Critical);
                }
                (critical, counted, g.say_hello(req).await)
            }));
        }
    }
    let (mut default, mut critical) = (Tally::default(), Tally::default());
    for c in calls {
        let (is_critical, counted, res) = c.await.unwrap();
        if !counted {
            continue;
        }
        let t = if is_critical {
            &mut critical
        } else {
            &mut default
        };
        match res {
            Ok(_) => t.ok += 1,
            // go-zero's words, then the limit (or the tier's share) and the calls in flight
            Err(s)
                if s.code() == Code::ResourceExhausted
                    && zrpc_tests::explained::limited(s.message()).is_some() =>
            {
                t.rejected += 1;
            }
            Err(s) if s.code() == Code::DeadlineExceeded => t.timed_out += 1,
            Err(s) => t.other.push(format!("{:?} {}", s.code(), s.message())),
        }
    }
    let metrics = zrpc_server::metrics::render();
    handle.shutdown();
    join.await.unwrap().unwrap();
    println!("{name}: default {default:?}, critical {critical:?}");
    (default, critical, metrics)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resource_bound_overload_is_rejected_at_once_and_critical_calls_are_served() {
    let (default, critical, metrics) =
        overload("limit.rpc", Some(ConcurrencyLimitConf::default())).await;
    // 4x: about three calls in four cannot be served; they are rejected at once.
    let offered = default.ok + default.rejected + default.timed_out;
    assert!(
        f64::from(default.rejected) > 0.5 * f64::from(offered),
        "{default:?}"
    );
    assert!(default.ok > 0, "{default:?}");
    assert_eq!(
        default.timed_out, 0,
        "no admitted call waits for its deadline"
    );
    assert!(default.other.is_empty(), "{:?}", default.other);
    // Critical calls (a tenth of the calls, 0.4x the capacity) keep the places above the
    // default tier's share.
    assert_eq!(
        (critical.rejected, critical.timed_out),
        (0, 0),
        "{critical:?}"
    );
    assert!(critical.ok > 0);
    // The server's metrics say why, and what the limit is.
    let line = |prefix: &str| {
        metrics
            .lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no {prefix} in\n{metrics}"))
            .to_owned()
    };
    let dropped: f64 =
        line("rpc_server_dropped_total{method=\"/greeter.Greeter/SayHello\",reason=\"tier\"}")
            .rsplit_once(' ')
            .unwrap()
            .1
            .parse()
            .unwrap();
    assert!(dropped >= f64::from(default.rejected), "{dropped}");
    let limit: f64 = metrics
        .lines()
        .find(|l| l.starts_with("rpc_server_concurrency_limit{method=\"*\""))
        .expect("the limit's gauge")
        .rsplit_once(' ')
        .unwrap()
        .1
        .parse()
        .unwrap();
    assert!((3.0..=40.0).contains(&limit), "limit {limit}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_limit_the_same_overload_waits_until_its_deadline() {
    let (default, _critical, _) = overload("nolimit.rpc", None).await;
    // The CPU shedder (on by default) never sees a hot CPU: nothing is rejected, and most
    // calls wait in the resource's queue until their deadline.
    let offered = default.ok + default.rejected + default.timed_out;
    assert_eq!(default.rejected, 0, "{default:?}");
    assert!(
        f64::from(default.timed_out) > 0.5 * f64::from(offered),
        "{default:?}"
    );
}
