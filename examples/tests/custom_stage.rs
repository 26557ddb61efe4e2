//! The rate-limiter stage of `docs/middleware.md` ("Adding a stage"), compiled and run against a
//! real server and client: calls past its budget are answered `ResourceExhausted` with a
//! message naming the limit, counted in `rpc_server_dropped_total{reason="rate"}` and seen by
//! the metrics stage; health checks pass it.

#![allow(missing_docs)]

use std::time::Duration;

use zrpc::tonic;
use zrpc_examples::greeter::Greeter;
use zrpc_examples::pb::HelloRequest;
use zrpc_examples::pb::greeter_client::GreeterClient;

// --- from docs/middleware.md ---------------------------------------------------------------

use std::sync::Mutex;

use tokio::time::Instant;
use zrpc::stage::{Admission, Call, Rejection, Stage};

/// A token bucket for the whole server: `burst` calls at once, refilled at `per_second`.
#[derive(Debug)]
struct RateLimit {
    per_second: f64,
    burst: f64,
    /// Tokens left, and when they were counted.
    bucket: Mutex<(f64, Option<Instant>)>,
}

impl RateLimit {
    fn new(per_second: f64, burst: u32) -> Self {
        let burst = f64::from(burst);
        RateLimit {
            per_second,
            burst,
            bucket: Mutex::new((burst, None)),
        }
    }
}

impl Stage for RateLimit {
    fn admit(&self, call: &mut Call<'_>) -> Admission {
        if call.is_infrastructure() {
            return Admission::pass(); // health checks and reflection are never limited
        }
        let now = call.now(); // the call's one clock read, shared by every stage
        let mut bucket = self.bucket.lock().unwrap_or_else(|e| e.into_inner());
        let (tokens, counted) = &mut *bucket;
        if let Some(then) = counted.replace(now) {
            let refill = now.duration_since(then).as_secs_f64() * self.per_second;
            *tokens = (*tokens + refill).min(self.burst);
        }
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            return Admission::pass();
        }
        let message = format!(
            "rate limit: {} calls per second (burst {}) exceeded",
            self.per_second, self.burst
        );
        Admission::reject(Rejection::new(tonic::Code::ResourceExhausted, message).dropped("rate"))
    }

    fn name(&self) -> &'static str {
        "rate"
    }
}

// -------------------------------------------------------------------------------------------

#[tokio::test]
async fn a_user_stage_rejects_past_its_budget_and_counts_the_drops() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let mut conf = zrpc::RpcServerConf::new("greeter.stage", addr.clone()).with_shutdown(
        zrpc::ShutdownConf::new(Duration::ZERO, Duration::from_secs(5)),
    );
    conf.cpu_threshold = 0; // not a shedding test
    conf.health = true;
    // Three calls, then none for the test's life (a refill every ~17 minutes).
    let server = zrpc::server(conf)
        .unwrap()
        .stage(RateLimit::new(0.001, 3))
        .add_service(Greeter::new(&addr, Duration::ZERO).into_service());
    let handle = server.handle();
    let serving = tokio::spawn(server.serve_with_listener(listener, std::future::pending()));

    let client = zrpc::client(zrpc::RpcClientConf::direct([addr.clone()]))
        .await
        .unwrap();
    let mut greeter = GreeterClient::new(client.clone());
    let mut codes = Vec::new();
    let mut messages = Vec::new();
    for _ in 0..5 {
        match greeter
            .say_hello(HelloRequest {
                name: "stage".into(),
            })
            .await
        {
            Ok(_) => codes.push(tonic::Code::Ok),
            Err(s) => {
                codes.push(s.code());
                messages.push(s.message().to_owned());
            }
        }
    }
    let (ok, exhausted) = (tonic::Code::Ok, tonic::Code::ResourceExhausted);
    assert_eq!(codes, [ok, ok, ok, exhausted, exhausted], "{messages:?}");
    assert_eq!(
        messages[0],
        "rate limit: 0.001 calls per second (burst 3) exceeded"
    );

    // Health checks are not limited.
    let mut health = tonic_health::pb::health_client::HealthClient::new(client);
    health
        .check(tonic_health::pb::HealthCheckRequest::default())
        .await
        .unwrap();

    // Counted as drops under the stage's reason, and by the metrics stage with their code.
    let text = zrpc::metrics::server::render();
    let method = "/greeter.Greeter/SayHello";
    let line = |family: &str, labels: &str| {
        let prefix = format!("{family}{{{labels}}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(prefix.as_str()))
            .unwrap_or_else(|| panic!("no {prefix} in\n{text}"))
            .to_owned()
    };
    assert_eq!(
        line(
            "rpc_server_dropped_total",
            &format!("method=\"{method}\",reason=\"rate\"")
        ),
        "2"
    );
    assert_eq!(
        line(
            "rpc_server_requests_code_total",
            &format!("code=\"8\",method=\"{method}\"")
        ),
        "2"
    );

    handle.shutdown();
    serving.await.unwrap().unwrap();
}
