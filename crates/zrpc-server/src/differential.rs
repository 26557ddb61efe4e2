//! The [`Governor`] with every stage on against the stages composed one by one, each a governor
//! with only that stage on (as the stages' own unit tests drive them), in the server's order (`facts -> trace -> recover -> stat -> metrics -> auth -> breaker -> limit ->
//! shedding -> timeout`, docs/middleware.md): the same scripted calls go through both, and
//! after each one the answers, the metric samples, the breakers, the concurrency limits and
//! the shedders are compared. The fused form gets each request as the server's serve loop
//! hands it over (`transport::serve::Intake`: the call's facts recorded by the transport's
//! request body, its count in the shedder's flight since its stream was accepted, the
//! caller's deadline read as it arrived), so what production feeds the governor is compared
//! too; the nested form makes the facts with its own facts layer. Both forms are the code the
//! server runs: the test shows that the list of stages behaves as its stages nested.
//!
//! Each form has its own breaker registry, concurrency limit and shedder. The metric families are process-wide
//! (`crate::metrics`), so each form calls its methods under a package of its own and the
//! samples are compared with that package cut off.
//!
//! Where the forms differ, the test asserts the difference itself:
//!
//! - a panic in the handler's future or body: the code stat and metrics record (`Cancelled`
//!   nested, `Internal` fused), on purpose (`Differs::PanicLater`);
//! - a panic in the handler's `call`: nested, the records of the stages inside recover see
//!   the unwinding drop the call (`Differs::PanicInCall`); with every stage in one governor,
//!   recover answers `Internal` first and every record sees it;
//! - the clock: one tokio clock read serves every stage of a governor, so the nested form,
//!   which reads it once per stage, sees slightly later instants; response times (the
//!   shedder's `min_rt`, the limit's round-trip times) are not compared.

use std::collections::{BTreeMap, BTreeSet};
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;
use futures_util::FutureExt;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use tower::util::BoxCloneService;
use tower::{ServiceBuilder, ServiceExt};
use zrpc_core::breaker::{BreakerConfig, BreakerStats};
use zrpc_core::cpu::FixedCpu;
use zrpc_core::grpc::status_message_from_headers;
use zrpc_core::limit::LimitConfig;
use zrpc_core::shedder::{AdaptiveShedder, ShedderConfig, ShedderStats};

use std::sync::Arc;

use http::{Request, Response};
use tonic::body::Body;
use tower::BoxError;
use tower_layer::Layer;
use tower_service::Service;
use zrpc_core::breaker::BreakerRegistry;
use zrpc_core::grpc::{code, status_from_headers};

use crate::auth::StaticTokens;
use crate::auth::TokenStore;
use crate::call::FactsLayer;
use crate::layers::governor::{GovernorLayer, Stages};
use crate::layers::test_util::{TestBody, capture_logs, response_with_code};
use crate::layers::{
    AuthStage, BreakerStage, MetricsStage, RecoverStage, SheddingStage, StatSettings, StatStage,
    TimeoutStage, TraceStage,
};
use crate::layers::{
    LimitSettings, LimitStage, SheddingSettings, StreamingMethods, TimeoutSettings,
};
use crate::layers::{breaker, limit, shedding};
use crate::transport::serve::test_arrival as arriving;

type BoxBody = UnsyncBoxBody<Bytes, BoxError>;
type Svc = BoxCloneService<Request<Body>, Response<BoxBody>, Infallible>;
type Call = Pin<Box<dyn Future<Output = Result<Response<BoxBody>, Infallible>> + Send>>;

/// What the handler does with a call (sent in the `x-do` header).
#[derive(Debug, Clone, Copy)]
enum Act {
    /// Reads the request, answers this code.
    Code(i32),
    /// Answers this code without reading the request (the caller's failure, for the facts).
    NoRead(i32),
    /// Reads the request, then sleeps this long (ms) before answering OK.
    Sleep(u64),
    /// Panics in the service's `call`.
    PanicCall,
    /// Reads the request, then panics in the response future.
    PanicFuture,
    /// Answers with a body that panics when polled.
    PanicBody,
}

impl Act {
    fn header(self) -> String {
        match self {
            Act::Code(c) => format!("code:{c}"),
            Act::NoRead(c) => format!("noread:{c}"),
            Act::Sleep(ms) => format!("sleep:{ms}"),
            Act::PanicCall => "panic-call".to_owned(),
            Act::PanicFuture => "panic-future".to_owned(),
            Act::PanicBody => "panic-body".to_owned(),
        }
    }

    fn parse(s: &str) -> Self {
        let (kind, n) = s.split_once(':').unwrap_or((s, "0"));
        let n: i64 = n.parse().unwrap();
        match kind {
            "code" => Act::Code(n as i32),
            "noread" => Act::NoRead(n as i32),
            "sleep" => Act::Sleep(n as u64),
            "panic-call" => Act::PanicCall,
            "panic-future" => Act::PanicFuture,
            "panic-body" => Act::PanicBody,
            other => panic!("unknown act {other}"),
        }
    }
}

const OK: Act = Act::Code(code::OK);

/// The `app`/`token` metadata a call carries.
#[derive(Debug, Clone, Copy)]
enum Creds {
    Good,
    Missing,
    AppOnly,
    BadToken,
    UnknownApp,
}

/// The handler behind both forms, doing what each request's `x-do` says.
fn handler()
-> impl Service<Request<Body>, Response = Response<TestBody>, Error = Infallible, Future: Send>
+ Clone
+ Send
+ 'static {
    tower::service_fn(|req: Request<Body>| {
        let act = Act::parse(req.headers().get("x-do").unwrap().to_str().unwrap());
        if let Act::PanicCall = act {
            panic!("handler call exploded");
        }
        async move {
            if !matches!(act, Act::NoRead(_) | Act::PanicBody) {
                req.into_body().collect().await.unwrap();
            }
            Ok::<_, Infallible>(match act {
                Act::Code(c) | Act::NoRead(c) => response_with_code(c),
                Act::Sleep(ms) => {
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    response_with_code(code::OK)
                }
                Act::PanicFuture => panic!("handler future exploded"),
                Act::PanicBody => Response::new(TestBody::Panics),
                Act::PanicCall => unreachable!(),
            })
        }
    })
}

fn boxed<S, B>(svc: S) -> Svc
where
    S: Service<Request<Body>, Response = Response<B>, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    BoxCloneService::new(svc.map_response(|r| r.map(|b| b.map_err(Into::into).boxed_unsync())))
}

/// A breaker whose decisions need no random draw, so that two breakers seeded apart decide
/// alike: the weight of accepts is negative, so the SRE ratio is >= 1 once one call was
/// accepted (and <= 0 before, under the huge protection); with one bucket the working scale
/// is 0 while that bucket holds no failure and 1 once it does. The breaker therefore opens at
/// the first server failure after a success, and stays open (the window is an hour, the
/// forced pass never comes).
fn breaker_config() -> BreakerConfig {
    let mut c = BreakerConfig::default();
    c.window = Duration::from_secs(3600);
    c.buckets = 1;
    c.recovery = c.window;
    c.k = -1e9;
    c.min_k = -1e9;
    c.protection = 1_000_000;
    c.force_pass = c.window;
    c
}

/// A shedder whose decisions do not depend on the clock (the forms' clocks differ, see
/// `Form::clock`): the current bucket is never read and the window's other one stays empty
/// during the test, so its flight bound is 1 call times the overload factor (0.1 at full CPU);
/// `flying_beta` 0 makes the average in flight the count at the last finish, and no cool-off
/// keeps it hot exactly while the CPU is.
fn shedder_config() -> ShedderConfig {
    let mut c = ShedderConfig::default();
    c.window = Duration::from_secs(3600);
    c.buckets = 2;
    c.flying_beta = 0.0;
    c.cool_off = Duration::ZERO;
    c
}

/// A concurrency limit of `min_limit` whose decisions do not depend on the clock: its
/// measurement ends with the first call's sample, and no sample window ends during the test
/// (an hour), so the limit stays `min_limit` and admissions depend on the calls in flight
/// only.
fn limit_config(min_limit: u32) -> LimitConfig {
    let mut c = LimitConfig::default();
    c.min_limit = min_limit;
    c.min_rtt_samples = 1;
    c.window = Duration::from_secs(3600);
    c
}

const TIMEOUT: Duration = Duration::from_millis(100);

/// One form: its service, its package and its own breakers and shedder.
struct Form {
    svc: Svc,
    package: String,
    breakers: Arc<BreakerRegistry>,
    limit: Arc<limit::Shared>,
    shedder: Arc<AdaptiveShedder>,
    /// The clock its breaker and shedder are fed from: the layers read std's, the governor
    /// tokio's (paused here).
    clock: fn() -> std::time::Instant,
}

impl Form {
    /// `fused`: the governor over the stages, else the layers nested; `min_limit`: the
    /// concurrency limit's (see [`limit_config`]).
    fn new(fused: bool, test: &str, cpu: &Arc<FixedCpu>, later: bool, min_limit: u32) -> Self {
        let package = format!("/{}_{test}.Diff/", if fused { "fused" } else { "nested" });
        let breakers = Arc::new(BreakerRegistry::new(breaker_config()));
        let shedder = Arc::new(AdaptiveShedder::new(shedder_config(), cpu.clone()));
        let streaming = StreamingMethods::new([format!("{package}Stream")]);
        let tokens = StaticTokens::new([("app", "secret")]);
        let store: Arc<dyn TokenStore> = if later {
            Arc::new(Later(tokens))
        } else {
            Arc::new(tokens)
        };
        // Both forms run the governor, which reads tokio's clock.
        let clock: fn() -> std::time::Instant = || tokio::time::Instant::now().into_std();
        let limit = LimitStage::new(
            Some(LimitSettings {
                config: limit_config(min_limit),
                per_method: false,
                streaming: streaming.clone(),
            }),
            clock(),
        );
        let limit_shared = limit.shared().unwrap();
        let stages = Stages {
            trace: TraceStage::new(true),
            recover: RecoverStage::new(true),
            stat: StatStage::new(StatSettings {
                slow_threshold: Duration::from_millis(50),
                ..StatSettings::default()
            }),
            metrics: MetricsStage::new(true).streaming(streaming.clone()),
            auth: AuthStage::new(Some(store), true),
            breaker: BreakerStage::with_registry(true, breakers.clone()),
            limit,
            shedding: SheddingStage::new(Some(SheddingSettings {
                shedder: shedder.clone(),
                streaming: streaming.clone(),
            })),
            timeout: TimeoutStage::new(TimeoutSettings {
                default: Some(TIMEOUT),
                streaming,
                ..TimeoutSettings::default()
            }),
        };
        let svc: Svc = if fused {
            let in_flight: Arc<dyn crate::call::InFlight> = stages.shedding.shared().unwrap();
            let governor = GovernorLayer::new(&stages).layer(handler());
            boxed(arriving(governor, in_flight))
        } else {
            let Stages {
                trace,
                recover,
                stat,
                metrics,
                auth,
                breaker,
                limit,
                shedding,
                timeout,
            } = stages;
            let nested = ServiceBuilder::new()
                .layer(FactsLayer::new(true))
                .layer(trace)
                .layer(recover)
                .layer(stat)
                .layer(metrics)
                .layer(auth)
                .layer(breaker)
                .layer(limit)
                .layer(shedding)
                .layer(timeout)
                .service(handler());
            boxed(nested)
        };
        Form {
            svc,
            package,
            breakers,
            limit: limit_shared,
            shedder,
            clock,
        }
    }

    fn request(
        &self,
        method: &str,
        creds: Creds,
        act: Act,
        grpc_timeout: Option<&str>,
        tier: Option<&str>,
    ) -> Request<Body> {
        let mut req = Request::builder()
            .uri(format!("{}{method}", self.package))
            .header("x-do", act.header());
        if let Some(tier) = tier {
            req = req.header("zrpc-tier", tier);
        }
        let (app, token) = match creds {
            Creds::Good => (Some("app"), Some("secret")),
            Creds::Missing => (None, None),
            Creds::AppOnly => (Some("app"), None),
            Creds::BadToken => (Some("app"), Some("guess")),
            Creds::UnknownApp => (Some("stranger"), Some("secret")),
        };
        if let Some(app) = app {
            req = req.header("app", app);
        }
        if let Some(token) = token {
            req = req.header("token", token);
        }
        if let Some(t) = grpc_timeout {
            req = req.header("grpc-timeout", t);
        }
        // One (empty) gRPC message: read to its end, the request arrived whole.
        let body = Full::new(Bytes::from_static(b"\0\0\0\0\0"));
        req.body(Body::new(body)).unwrap()
    }

    /// Calls the service: the stages decide in `call`; the call is in flight until its
    /// response body ends (see [`outcome`]).
    fn call(&mut self, req: Request<Body>) -> Call {
        let mut svc = self.svc.clone();
        let ready = svc.ready().now_or_never().unwrap().unwrap();
        ready.call(req)
    }

    /// The form's metric samples, its package cut from the method label.
    fn samples(&self) -> BTreeMap<String, f64> {
        crate::metrics::render()
            .lines()
            .filter(|l| !l.starts_with('#') && l.contains(&self.package))
            .map(|l| {
                let (key, value) = l.rsplit_once(' ').unwrap();
                (key.replace(&self.package, "/"), value.parse().unwrap())
            })
            .collect()
    }

    fn breaker(&self, method: &str) -> Option<BreakerStats> {
        self.breakers
            .find(&format!("{}{method}", self.package))
            .map(|b| b.stats((self.clock)()))
    }

    fn shedder(&self) -> ShedderStats {
        self.shedder.stats((self.clock)())
    }

    /// The limit's admission state (its round-trip times depend on the clock).
    fn limit(&self) -> (u32, u32, bool) {
        let s = self.limit.limits()[0].1.stats();
        (s.limit, s.inflight, s.measuring)
    }
}

/// A call's final status, once its body was read to its end (which fires every record).
#[derive(Debug, PartialEq)]
struct Outcome {
    code: Option<i32>,
    message: Option<String>,
}

async fn outcome(call: Call) -> Outcome {
    read(call.await.unwrap()).await
}

async fn read(resp: Response<BoxBody>) -> Outcome {
    let head = Outcome {
        code: status_from_headers(resp.headers()),
        message: status_message_from_headers(resp.headers()),
    };
    let collected = resp.into_body().collect().await.unwrap();
    if head.code.is_some() {
        return head;
    }
    let trailers = collected.trailers().unwrap();
    Outcome {
        code: status_from_headers(trailers),
        message: status_message_from_headers(trailers),
    }
}

/// How the forms' records of a step differ, on purpose.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Differs {
    /// Not at all.
    No,
    /// The handler's future or body panicked. Nested, stat and metrics sit inside recover and
    /// see the handler dropped (`Cancelled`); fused they see the `Internal` the caller gets.
    PanicLater,
    /// The handler's `call` panicked. Nested, the unwinding passes through the governors of
    /// stat, metrics, breaker and shedding, whose records see the call dropped (`Cancelled`:
    /// no breaker failure); fused, recover answers first and every record sees the `Internal`
    /// the caller gets.
    PanicInCall,
}

/// A started call: its response future, or its response (the call is in flight until its
/// body ends).
enum Pending {
    Call(Call),
    Answered(Response<BoxBody>),
}

impl Pending {
    async fn answer(self) -> Response<BoxBody> {
        match self {
            Pending::Call(call) => call.await.unwrap(),
            Pending::Answered(resp) => resp,
        }
    }
}

impl Started {
    /// Waits for both responses (with a token store that answers later, the stages decide
    /// then), keeping their bodies unread.
    async fn answered(self) -> Self {
        Started {
            fused: Pending::Answered(self.fused.answer().await),
            nested: Pending::Answered(self.nested.answer().await),
            ..self
        }
    }
}

impl Differs {
    fn of(act: Act) -> Self {
        match act {
            Act::PanicCall => Differs::PanicInCall,
            Act::PanicFuture | Act::PanicBody => Differs::PanicLater,
            _ => Differs::No,
        }
    }
}

/// Both forms, and the methods the script called (whose breakers are compared).
struct Pair {
    fused: Form,
    nested: Form,
    cpu: Arc<FixedCpu>,
    methods: BTreeSet<String>,
    /// Methods whose breakers the forms learnt differently (see `Differs::PanicInCall`).
    learnt_differently: BTreeSet<String>,
    /// The `zrpc-tier` of the calls made next.
    tier: Option<&'static str>,
}

/// A call started in both forms, not finished.
struct Started {
    fused: Pending,
    nested: Pending,
    differs: Differs,
    before: (BTreeMap<String, f64>, BTreeMap<String, f64>),
}

impl Pair {
    /// `later`: the token store answers after a yield, as a remote one does. The concurrency
    /// limit is 100, out of the way of the script.
    fn new(test: &str, later: bool) -> Self {
        Self::with_limit(test, later, 100)
    }

    /// [`new`](Self::new) with a concurrency limit of `min_limit`.
    fn with_limit(test: &str, later: bool, min_limit: u32) -> Self {
        let cpu = Arc::new(FixedCpu::new(0));
        Pair {
            fused: Form::new(true, test, &cpu, later, min_limit),
            nested: Form::new(false, test, &cpu, later, min_limit),
            cpu,
            methods: BTreeSet::new(),
            learnt_differently: BTreeSet::new(),
            tier: None,
        }
    }

    /// Starts a call in both forms (each stage decides in `call`), not polled yet: for calls
    /// that are to be in flight together. Their handlers must not sleep: the first form's
    /// wait would move the second's clock.
    fn start(
        &mut self,
        method: &str,
        creds: Creds,
        act: Act,
        grpc_timeout: Option<&str>,
    ) -> Started {
        self.methods.insert(method.to_owned());
        let before = (self.fused.samples(), self.nested.samples());
        let req = self
            .fused
            .request(method, creds, act, grpc_timeout, self.tier);
        let fused = Pending::Call(self.fused.call(req));
        let req = self
            .nested
            .request(method, creds, act, grpc_timeout, self.tier);
        let nested = Pending::Call(self.nested.call(req));
        Started {
            fused,
            nested,
            differs: Differs::of(act),
            before,
        }
    }

    /// Finishes a started call in both forms and compares them.
    async fn finish(&mut self, started: Started) -> Outcome {
        let Started {
            fused,
            nested,
            differs,
            before,
        } = started;
        let fused = read(fused.answer().await).await;
        let nested = read(nested.answer().await).await;
        self.compare(&fused, &nested, differs, &before);
        fused
    }

    /// One call, through the fused form and then through the nested one.
    async fn step(&mut self, method: &str, creds: Creds, act: Act) -> Outcome {
        self.step_with(method, creds, act, None).await
    }

    /// [`step`](Self::step) with the caller's `grpc-timeout`.
    async fn step_with(
        &mut self,
        method: &str,
        creds: Creds,
        act: Act,
        grpc_timeout: Option<&str>,
    ) -> Outcome {
        self.methods.insert(method.to_owned());
        let before = (self.fused.samples(), self.nested.samples());
        let req = self
            .fused
            .request(method, creds, act, grpc_timeout, self.tier);
        let fused = outcome(self.fused.call(req)).await;
        let req = self
            .nested
            .request(method, creds, act, grpc_timeout, self.tier);
        let nested = outcome(self.nested.call(req)).await;
        self.compare(&fused, &nested, Differs::of(act), &before);
        fused
    }

    /// Compares the answers, the metric samples the call added, the breakers and the
    /// shedders.
    fn compare(
        &mut self,
        fused: &Outcome,
        nested: &Outcome,
        differs: Differs,
        before: &(BTreeMap<String, f64>, BTreeMap<String, f64>),
    ) {
        assert_eq!(fused, nested, "answers");
        let fused_delta = delta(&before.0, &self.fused.samples());
        let nested_delta = delta(&before.1, &self.nested.samples());
        match differs {
            Differs::No => assert_eq!(fused_delta, nested_delta, "metric samples"),
            Differs::PanicLater => {
                let relabelled: BTreeMap<_, _> = nested_delta
                    .into_iter()
                    .map(|(k, v)| (k.replace("code=\"1\"", "code=\"13\""), v))
                    .collect();
                assert_eq!(fused_delta, relabelled, "metric samples but the code");
            }
            Differs::PanicInCall => {
                // Nested, the unwinding passes through the governors of stat and metrics, whose
                // records see the call dropped (`Cancelled`).
                let relabelled: BTreeMap<_, _> = nested_delta
                    .into_iter()
                    .map(|(k, v)| (k.replace("code=\"1\"", "code=\"13\""), v))
                    .collect();
                assert_eq!(fused_delta, relabelled, "metric samples but the code");
                let codes = fused_delta
                    .iter()
                    .filter(|(k, _)| k.starts_with("rpc_server_requests_code_total"))
                    .collect::<Vec<_>>();
                assert_eq!(codes.len(), 1, "{fused_delta:?}");
                assert!(codes[0].0.contains("code=\"13\""), "{fused_delta:?}");
            }
        }
        self.compare_guards();
    }

    /// Two successful calls to `method`: the first gives it a breaker, the second is the
    /// breaker's first accept (from then on a server failure opens it).
    async fn warm(&mut self, method: &str) {
        for _ in 0..2 {
            assert_eq!(
                self.step(method, Creds::Good, OK).await,
                code_only(code::OK)
            );
        }
    }

    /// The breakers of every method called so far, the limits and the shedders, compared.
    fn compare_guards(&self) {
        for m in &self.methods {
            let (fused, nested) = (self.fused.breaker(m), self.nested.breaker(m));
            if self.learnt_differently.contains(m) {
                // nested, the breaker's governor saw the call dropped by the unwinding
                assert!(fused.is_some() && nested.is_some(), "breaker of {m}");
            } else {
                assert_eq!(fused, nested, "breaker of {m}");
            }
        }
        assert_eq!(self.fused.limit(), self.nested.limit(), "limit");
        assert_eq!(self.fused.shedder(), self.nested.shedder(), "shedder");
    }

    /// The shedders' passes, read past the test's bucket: the count of calls reported as
    /// passed (their response times differ with the clocks, so `min_rt` is not compared).
    fn passes(&self) -> (u64, u64) {
        let later = |f: &Form| {
            f.shedder
                .stats((f.clock)() + Duration::from_secs(1800))
                .max_pass
        };
        (later(&self.fused), later(&self.nested))
    }
}

/// What changed between two samples (zero changes left out).
fn delta(before: &BTreeMap<String, f64>, after: &BTreeMap<String, f64>) -> BTreeMap<String, f64> {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0.0)))
        .filter(|(_, d)| *d != 0.0)
        .collect()
}

fn status(code: i32, message: &str) -> Outcome {
    Outcome {
        code: Some(code),
        message: Some(message.to_owned()),
    }
}

fn code_only(code: i32) -> Outcome {
    Outcome {
        code: Some(code),
        message: None,
    }
}

const BREAKER_OPEN: (i32, &str) = (code::UNAVAILABLE, breaker::BREAKER_OPEN_MESSAGE);

#[tokio::test(start_paused = true)]
async fn the_governor_answers_and_records_like_the_nested_layers() {
    let (_logs_guard, logs) = capture_logs();
    let mut p = Pair::new("script", false);
    let open = status(BREAKER_OPEN.0, BREAKER_OPEN.1);

    // Acceptable codes keep the breaker closed; a failure code the handler returns opens it.
    for c in [
        code::OK,
        code::NOT_FOUND,
        code::INVALID_ARGUMENT,
        code::ALREADY_EXISTS,
    ] {
        assert_eq!(
            p.step("Codes", Creds::Good, Act::Code(c)).await,
            code_only(c)
        );
    }
    assert_eq!(p.step("Codes", Creds::Good, OK).await, code_only(code::OK));
    for c in [
        code::INTERNAL,
        code::UNAVAILABLE,
        code::DEADLINE_EXCEEDED,
        code::DATA_LOSS,
    ] {
        let method = format!("Fails{c}");
        p.warm(&method).await;
        assert_eq!(
            p.step(&method, Creds::Good, Act::Code(c)).await,
            code_only(c)
        );
        assert_eq!(p.step(&method, Creds::Good, OK).await, open, "{method}");
        assert_eq!(p.step(&method, Creds::Good, OK).await, open, "{method}");
    }
    // A failure before the request was read is the caller's: the breaker stays closed.
    p.warm("NoRead").await;
    assert_eq!(
        p.step("NoRead", Creds::Good, Act::NoRead(code::INTERNAL))
            .await,
        code_only(code::INTERNAL)
    );
    assert_eq!(p.step("NoRead", Creds::Good, OK).await, code_only(code::OK));
    // Unknown methods get no breaker.
    assert_eq!(
        p.step("Unknown", Creds::Good, Act::Code(code::UNIMPLEMENTED))
            .await,
        code_only(code::UNIMPLEMENTED)
    );
    assert_eq!(p.fused.breaker("Unknown"), None);

    // Auth rejects before the breaker and the shedder: neither learns of the method.
    let required = status(code::UNAUTHENTICATED, "app/token required");
    let denied = status(code::UNAUTHENTICATED, "access denied");
    assert_eq!(p.step("Auth", Creds::Missing, OK).await, required);
    assert_eq!(p.step("Auth", Creds::AppOnly, OK).await, required);
    assert_eq!(p.step("Auth", Creds::BadToken, OK).await, denied);
    assert_eq!(p.step("Auth", Creds::UnknownApp, OK).await, denied);
    assert_eq!(p.fused.breaker("Auth"), None);
    assert_eq!(p.step("Auth", Creds::Good, OK).await, code_only(code::OK));

    // Timeouts: the server's, and a caller's shorter one; both are server failures.
    let expired = status(code::DEADLINE_EXCEEDED, "context deadline exceeded");
    p.warm("Slow").await;
    assert_eq!(p.step("Slow", Creds::Good, Act::Sleep(1000)).await, expired);
    assert_eq!(p.step("Slow", Creds::Good, OK).await, open);
    p.warm("Hurried").await;
    assert_eq!(
        p.step_with("Hurried", Creds::Good, Act::Sleep(60), Some("20m"))
            .await,
        expired
    );
    assert_eq!(p.step("Hurried", Creds::Good, OK).await, open);
    // Under its timeout a slow call succeeds.
    assert_eq!(
        p.step("Patient", Creds::Good, Act::Sleep(60)).await,
        code_only(code::OK)
    );

    // Panics answer Internal and count as the server's failures.
    for (method, act, message) in [
        ("PanicCall", Act::PanicCall, "panic: handler call exploded"),
        (
            "PanicFuture",
            Act::PanicFuture,
            "panic: handler future exploded",
        ),
        ("PanicBody", Act::PanicBody, "panic: body exploded"),
    ] {
        p.warm(method).await;
        assert_eq!(
            p.step(method, Creds::Good, act).await,
            status(code::INTERNAL, message)
        );
        assert_eq!(p.step(method, Creds::Good, OK).await, open, "{method}");
    }

    // A method's first call panics in `call`: only the fused form learns the method exists.
    p.learnt_differently.insert("PanicFirst".to_owned());
    assert_eq!(
        p.step("PanicFirst", Creds::Good, Act::PanicCall).await,
        status(code::INTERNAL, "panic: handler call exploded")
    );

    // Shedding: a hot CPU and more calls in flight than the bound (0.1 at full CPU).
    p.cpu.set(1000);
    let first = p.start("Shed", Creds::Good, OK, None);
    p.compare_guards();
    // Nothing had finished: the average in flight is 0, this one is admitted too.
    let second = p.start("Shed", Creds::Good, OK, None);
    p.compare_guards();
    assert_eq!(p.finish(first).await, code_only(code::OK));
    // The average is now 1 (the second call): shed. The breaker sees the ResourceExhausted
    // of a call whose request was never read, the caller's failure: it stays closed.
    let shed = status(code::RESOURCE_EXHAUSTED, shedding::OVERLOADED_MESSAGE);
    assert_eq!(p.step("Shed", Creds::Good, OK).await, shed);
    assert_eq!(p.step("Shed", Creds::Good, OK).await, shed);
    // Streams are never shed nor timed out.
    assert_eq!(
        p.step("Stream", Creds::Good, Act::Sleep(200)).await,
        code_only(code::OK)
    );
    // Auth still answers first.
    assert_eq!(p.step("Shed", Creds::Missing, OK).await, required);
    p.cpu.set(0);
    assert_eq!(p.step("Shed", Creds::Good, OK).await, code_only(code::OK));
    assert_eq!(p.finish(second).await, code_only(code::OK));
    p.cpu.set(1000);
    // Nothing in flight: nothing is shed, hot or not.
    assert_eq!(p.step("Shed", Creds::Good, OK).await, code_only(code::OK));
    p.cpu.set(0);

    // The shedders counted the same passes but for the panics in `call`.
    let (fused, nested) = p.passes();
    assert!(nested > 10, "{nested}");
    assert_eq!(fused, nested);

    // The same log events: slow calls (stat), panics (recover), drops (breaker, shedding).
    let out = logs.contents();
    for what in [
        "slowcall",
        "panic: ",
        breaker::BREAKER_OPEN_MESSAGE,
        "service overloaded",
    ] {
        let count = |f: &Form| {
            events(&out)
                .filter(|e| e.contains(what) && e.contains(&f.package))
                .count()
        };
        assert!(count(&p.fused) > 0, "{what}:\n{out}");
        assert_eq!(count(&p.fused), count(&p.nested), "{what}:\n{out}");
    }
}

#[tokio::test(start_paused = true)]
async fn the_governor_limits_concurrency_like_the_nested_layers() {
    let (_logs_guard, logs) = capture_logs();
    // A limit of 3: the default tier gets 2 places, sheddable calls 1, critical calls 3 of
    // their own.
    let mut p = Pair::with_limit("limit", false, 3);
    let overloaded = status(code::RESOURCE_EXHAUSTED, shedding::OVERLOADED_MESSAGE);
    // The first call ends the limit's measurement; two more warm the breaker.
    p.warm("Lim").await;
    assert_eq!(p.fused.limit(), (3, 0, false));
    // Two calls of the default tier in flight (a caller that sets none, and an unknown value).
    let a = p.start("Lim", Creds::Good, OK, None);
    p.tier = Some("urgent");
    let b = p.start("Lim", Creds::Good, OK, None);
    p.compare_guards();
    // Its share is used: default and sheddable calls are rejected, the breaker learns of the
    // caller's failure only (it stays closed), metrics and logs say `tier`.
    for tier in [None, Some("sheddable")] {
        p.tier = tier;
        assert_eq!(p.step("Lim", Creds::Good, OK).await, overloaded);
    }
    // Three critical calls are admitted beside them; then the limit is reached, for critical
    // calls too.
    p.tier = Some("critical");
    let c: Vec<_> = (0..3)
        .map(|_| p.start("Lim", Creds::Good, OK, None))
        .collect();
    assert_eq!(p.step("Lim", Creds::Good, OK).await, overloaded);
    // Auth still answers first; streams and unknown failures are not limited.
    assert_eq!(
        p.step("Lim", Creds::Missing, OK).await,
        status(code::UNAUTHENTICATED, "app/token required")
    );
    assert_eq!(p.step("Stream", Creds::Good, OK).await, code_only(code::OK));
    for call in [a, b].into_iter().chain(c) {
        assert_eq!(p.finish(call).await, code_only(code::OK));
    }
    p.tier = None;
    assert_eq!(p.fused.limit(), (3, 0, false));
    assert_eq!(p.step("Lim", Creds::Good, OK).await, code_only(code::OK));
    // A call the limit admits and the CPU shedder drops holds no place afterwards.
    p.cpu.set(1000);
    let first = p.start("Lim", Creds::Good, OK, None);
    let second = p.start("Lim", Creds::Good, OK, None);
    assert_eq!(p.finish(first).await, code_only(code::OK));
    assert_eq!(p.step("Lim", Creds::Good, OK).await, overloaded);
    p.cpu.set(0);
    assert_eq!(p.finish(second).await, code_only(code::OK));
    assert_eq!(p.fused.limit(), (3, 0, false));
    assert_eq!(
        p.fused.breaker("Lim").map(|b| b.failures),
        Some(0),
        "rejections are not the server's failures"
    );
    // Both forms logged each reason alike.
    let out = logs.contents();
    for what in ["tier's share", "concurrency limit is reached"] {
        let count = |f: &Form| {
            events(&out)
                .filter(|e| e.contains(what) && e.contains(&f.package))
                .count()
        };
        assert_eq!(count(&p.fused), 1, "{what}:\n{out}");
        assert_eq!(count(&p.nested), 1, "{what}:\n{out}");
    }
}

/// A token store that answers after a yield (as Redis does): the governor's other auth path.
#[derive(Debug)]
struct Later(StaticTokens);

impl TokenStore for Later {
    fn lookup(&self, app: &str) -> crate::auth::Lookup {
        let crate::auth::Lookup::Ready(found) = self.0.lookup(app) else {
            unreachable!("static tokens answer at once")
        };
        crate::auth::Lookup::Pending(Box::pin(async move {
            tokio::task::yield_now().await;
            found
        }))
    }
}

#[tokio::test(start_paused = true)]
async fn a_token_store_that_answers_later_guards_calls_like_the_nested_layers() {
    let mut p = Pair::new("later", true);
    let open = status(BREAKER_OPEN.0, BREAKER_OPEN.1);
    let denied = status(code::UNAUTHENTICATED, "access denied");
    assert_eq!(
        p.step("Auth", Creds::Missing, OK).await,
        status(code::UNAUTHENTICATED, "app/token required")
    );
    assert_eq!(p.step("Auth", Creds::BadToken, OK).await, denied);
    assert_eq!(p.step("Auth", Creds::UnknownApp, OK).await, denied);
    assert_eq!(p.fused.breaker("Auth"), None);
    // Admitted once the store answers, the call goes through the breaker, the shedder and
    // the timeout.
    p.warm("Fails").await;
    assert_eq!(
        p.step("Fails", Creds::Good, Act::Code(code::INTERNAL))
            .await,
        code_only(code::INTERNAL)
    );
    assert_eq!(p.step("Fails", Creds::Good, OK).await, open);
    let expired = status(code::DEADLINE_EXCEEDED, "context deadline exceeded");
    p.warm("Slow").await;
    assert_eq!(p.step("Slow", Creds::Good, Act::Sleep(1000)).await, expired);
    assert_eq!(p.step("Slow", Creds::Good, OK).await, open);
    assert_eq!(
        p.step("PanicFuture", Creds::Good, Act::PanicFuture).await,
        status(code::INTERNAL, "panic: handler future exploded")
    );
    // The shedder decides when the store has answered: two calls in flight, then a third.
    p.cpu.set(1000);
    let first = p.start("Shed", Creds::Good, OK, None).answered().await;
    let second = p.start("Shed", Creds::Good, OK, None).answered().await;
    p.compare_guards();
    assert_eq!(p.finish(first).await, code_only(code::OK));
    let third = p.start("Shed", Creds::Good, OK, None);
    assert_eq!(
        p.finish(third).await,
        status(code::RESOURCE_EXHAUSTED, shedding::OVERLOADED_MESSAGE)
    );
    assert_eq!(p.finish(second).await, code_only(code::OK));
    let (fused, nested) = p.passes();
    assert_eq!(fused, nested);
}

/// The events of a log, each from its timestamp to the next (a panic's event spans the lines
/// of its stack).
fn events(out: &str) -> impl Iterator<Item = String> + '_ {
    let mut events: Vec<String> = Vec::new();
    for line in out.lines() {
        match events.last_mut() {
            Some(e) if !line.starts_with(|c: char| c.is_ascii_digit()) => {
                e.push('\n');
                e.push_str(line);
            }
            _ => events.push(line.to_owned()),
        }
    }
    events.into_iter()
}
