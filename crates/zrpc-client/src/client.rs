//! [`Client`]: the balanced, governed channel that generated tonic clients use.

use std::any::Any;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::ready;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use pin_project_lite::pin_project;
use tonic::body::Body;
use tower::BoxError;
use zrpc_core::breaker::BreakerRegistry;
use zrpc_core::conf::{ConfError, Validate};
use zrpc_core::grpc::StatusGuard;

use crate::Error;
use crate::balancer::Balancer;
use crate::balancer::endpoint::ConnectOptions;
use crate::balancer::rng::random_seed;
use crate::balancer::stats::EjectionLimit;
use crate::conf::RpcClientConf;
use crate::layers::Response;
use crate::layers::credentials::Credentials;
use crate::layers::duration::SLOW_THRESHOLD;
use crate::layers::observe::{Observe, Outcome};
use crate::layers::tier::Tiers;
use crate::layers::timeout::{Timeout, caller_deadline};
use crate::metrics::ClientMetrics;
use crate::resolver::{self, Target};
use crate::retry::policy::Policies;
use crate::retry::{Call, Retry};

/// How long `NonBlock: false` waits for a usable endpoint (go-zero's dial timeout).
pub(crate) const BLOCKING_DIAL_TIMEOUT: Duration = Duration::from_secs(3);
/// Connect timeout of endpoint connections: the TCP connect and the TLS handshake together.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// A zRPC client: `Clone + Send + Sync`, a `tower::Service` that tonic's generated clients accept.
///
/// Requests go through go-zero's chain (tracing, duration log, metrics, breaker, timeout, each
/// switched by `Middlewares`), then `app`/`token` metadata, then the balancer (`p2c_ewma` or
/// `round_robin`) over the endpoints of the target. Clones share everything.
///
/// # Examples
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use zrpc_client::{Client, conf::RpcClientConf};
///
/// let client = Client::new(RpcClientConf::direct(["127.0.0.1:8080"])).await?;
/// // let mut greeter = GreeterClient::new(client.clone());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Client {
    /// The chain's stages, each `None` when switched off (see [`Client::call`]).
    observe: Option<Observe>,
    timeout: Option<Timeout>,
    credentials: Option<Credentials>,
    /// `Tier` and `MethodTiers`, `None` without either.
    tiers: Option<Arc<Tiers>>,
    /// Every attempt of a call (transparent re-sends, `MethodConfig` policies), picked by the
    /// balancer.
    retry: Retry,
    /// Request and response compression (`crate::compression`).
    compression: Arc<crate::compression::Compression>,
    target: Arc<str>,
    /// Keeps the resolver running, and the client in the admin view, while a clone lives.
    _held: Arc<Held>,
}

/// What a client keeps alive for as long as one of its clones lives.
struct Held {
    _resolution: Arc<dyn Any + Send + Sync>,
    _view: Arc<dyn zrpc_core::inspect::Inspect>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("target", &self.target)
            .field("balancer", self.retry.balancer())
            .finish_non_exhaustive()
    }
}

/// The registries a client records into, passed explicitly (as linkerd passes its handles).
///
/// By default a client uses the process-wide ones, as go-zero does: breakers from
/// [`BreakerRegistry::global`] (clients of the same target share them) and metrics in
/// `prometheus::default_registry()` (what the server's DevServer exports on `/metrics`). Give a
/// client its own to keep it apart (tests, several tenants in one process).
///
/// ```
/// use std::sync::Arc;
/// use zrpc_client::ClientHandles;
/// use zrpc_client::metrics::ClientMetrics;
/// use zrpc_core::breaker::{BreakerConfig, BreakerRegistry};
///
/// let registry = prometheus::Registry::new();
/// let handles = ClientHandles::default()
///     .breakers(Arc::new(BreakerRegistry::new(BreakerConfig::default())))
///     .metrics(ClientMetrics::register(&registry).unwrap());
/// ```
#[derive(Debug, Clone, Default)]
#[must_use]
pub struct ClientHandles {
    breakers: Option<Arc<BreakerRegistry>>,
    metrics: Option<ClientMetrics>,
}

impl ClientHandles {
    /// Breakers from `registry` instead of the process-wide one (`Middlewares.Breaker` must be
    /// on: [`Client::with_handles`] refuses a registry it would never use).
    pub fn breakers(mut self, registry: Arc<BreakerRegistry>) -> Self {
        self.breakers = Some(registry);
        self
    }

    /// Metrics into `metrics` ([`ClientMetrics::register`]) instead of the global registry
    /// (`Middlewares.Prometheus` must be on: [`Client::with_handles`] refuses a registry it
    /// would never use).
    pub fn metrics(mut self, metrics: ClientMetrics) -> Self {
        self.metrics = Some(metrics);
        self
    }
}

impl Client {
    /// Builds a client from its config (go-zero `zrpc.NewClient`).
    ///
    /// With `NonBlock: true` (the default) it returns at once; calls made before the first endpoint
    /// set is known wait for it until their deadline, unless the resolver reports a problem (etcd
    /// unreachable, for instance), which fails them at once with `Unavailable` naming the cause.
    /// With `NonBlock: false` it waits up to 3 s for an endpoint that accepts a connection.
    ///
    /// # Errors
    ///
    /// An invalid config or target, a resolver that cannot start, `App`/`Token` that are not valid
    /// header values, or (blocking mode) [`Error::Dial`] naming the target.
    pub async fn new(conf: RpcClientConf) -> Result<Client, Error> {
        Client::with_handles(conf, ClientHandles::default()).await
    }

    /// Like [`Client::new`], recording into the given registries instead of the process-wide ones.
    ///
    /// # Errors
    ///
    /// As [`Client::new`]; and [`Error::Config`] when a registry is given for a stage the config
    /// turns off (`Middlewares.Breaker` or `Middlewares.Prometheus` false), which would never
    /// record into it.
    pub async fn with_handles(
        conf: RpcClientConf,
        handles: ClientHandles,
    ) -> Result<Client, Error> {
        // the errors name the config's file, as load errors do
        let file = conf.file().map(str::to_owned);
        let built = async {
            conf.validate().map_err(Error::Config)?;
            let unused = |key: &str, what: &str| {
                Error::Config(ConfError::invalid(
                    key,
                    format!(
                        "false, but {what} gives the client a registry it would never record \
                         into: turn {key} on or leave the registry out"
                    ),
                ))
            };
            if handles.breakers.is_some() && !conf.middlewares.breaker {
                return Err(unused("Middlewares.Breaker", "ClientHandles::breakers"));
            }
            if handles.metrics.is_some() && !conf.middlewares.prometheus {
                return Err(unused("Middlewares.Prometheus", "ClientHandles::metrics"));
            }
            let target_str = conf.build_target().map_err(Error::Config)?;
            let target = Target::parse(&target_str)?;
            let resolution = resolver::resolve_with(&target, &conf.etcd)?;
            Client::build(
                conf,
                target.name(),
                target.service_name(),
                resolution,
                handles,
            )
            .await
        };
        built.await.map_err(|e| e.in_file(file.as_deref()))
    }

    /// Builds a client over any endpoint-set source: `resolution` stands for the config's
    /// target; `name` names the target in errors, logs, breakers and metrics. Use it for a
    /// custom discovery (publish `Some(set)` on the watch channel on every change), or to drive
    /// endpoint-set updates in tests.
    ///
    /// # Errors
    ///
    /// As [`Client::new`]; and [`Error::Config`] when the config also names a target
    /// (`Endpoints`, `Target` or `Etcd`), which the resolution would silently replace.
    pub async fn with_resolution(
        conf: RpcClientConf,
        name: &str,
        resolution: resolver::Resolution,
    ) -> Result<Client, Error> {
        conf.validate_settings().map_err(Error::Config)?;
        if let Ok(target) = conf.build_target() {
            let key = if !conf.endpoints.is_empty() {
                "Endpoints"
            } else if !conf.target.is_empty() {
                "Target"
            } else {
                "Etcd"
            };
            return Err(Error::Config(ConfError::invalid(
                key,
                format!(
                    "the config names the target {target}, which the resolution given to \
                     Client::with_resolution ({name}) replaces: leave Endpoints, Target and Etcd \
                     empty"
                ),
            )));
        }
        Client::build(
            conf,
            name.to_owned(),
            name.to_owned(),
            resolution,
            ClientHandles::default(),
        )
        .await
    }

    async fn build(
        conf: RpcClientConf,
        target_name: String,
        service_name: String,
        resolution: resolver::Resolution,
        handles: ClientHandles,
    ) -> Result<Client, Error> {
        let target_name: Arc<str> = Arc::from(target_name);
        let connect = ConnectOptions {
            keepalive: conf.keepalive(),
            connect_timeout: Some(CONNECT_TIMEOUT),
            tls: conf.tls.as_ref().map(|t| t.build()).transpose()?,
            ejection: Arc::new(EjectionLimit::new(conf.p2c.max_ejected_percent)),
        };
        let balancer = Balancer::with_status(
            target_name.clone(),
            conf.balancer_name,
            resolution.updates(),
            connect,
            random_seed(),
            resolution.status().clone(),
            // the timeout layer's deadline: the balancer anchors the timer wheel for it
            conf.middlewares
                .timeout
                .then(|| conf.timeout_duration())
                .flatten(),
        );
        crate::metrics::track(&balancer.shared);
        let credentials = if conf.has_credential() {
            Some(
                Credentials::new(&conf.app, &conf.token)
                    .map_err(|e| Error::Config(ConfError::invalid("App/Token", e.to_string())))?,
            )
        } else {
            None
        };
        let m = &conf.middlewares;
        let breakers = m.breaker.then(|| {
            handles
                .breakers
                .clone()
                .unwrap_or_else(BreakerRegistry::shared)
        });
        let metrics = m.prometheus.then(|| {
            handles
                .metrics
                .clone()
                .unwrap_or_else(|| crate::metrics::client_metrics().clone())
        });
        let policies = Policies::new(
            &conf,
            target_name.clone(),
            breakers.clone(),
            metrics.clone(),
        );
        let view_breakers = breakers.clone();
        let observe = (m.trace || m.duration || m.prometheus || m.breaker).then(|| {
            Observe::builder(&target_name)
                .trace(m.trace)
                .duration_log(m.duration.then_some(SLOW_THRESHOLD))
                .metrics(metrics)
                .breakers(breakers)
                .build()
        });
        let retry = Retry::new(balancer, policies);
        let view = crate::inspect::ClientView {
            balancer: retry.balancer().clone(),
            breakers: view_breakers,
            policies: retry.policies().cloned(),
        }
        .register();
        let client = Client {
            observe,
            // the balancer enforces the deadline (one timer per call, see `layers::timeout`)
            timeout: m.timeout.then(|| Timeout::new(conf.timeout_duration())),
            credentials,
            tiers: Tiers::new(&conf),
            retry,
            compression: crate::compression::Compression::new(&conf),
            target: target_name,
            _held: Arc::new(Held {
                _resolution: resolution.into_source(),
                _view: view,
            }),
        };
        if !conf.non_block {
            client.wait_usable(service_name).await?;
        }
        Ok(client)
    }

    /// The target, in canonical form (`direct:///a,b`, `etcd:///h?key=k`, `dns:///host:port`).
    #[must_use]
    pub fn target(&self) -> &str {
        &self.target
    }

    /// A snapshot of the current endpoints and their balancer stats.
    #[must_use]
    pub fn endpoints(&self) -> Vec<EndpointInfo> {
        let shared = &self.retry.balancer().shared;
        let now = shared.clock().coarse_now();
        shared
            .endpoints()
            .iter()
            .map(|e| EndpointInfo {
                addr: e.addr.to_string(),
                lag: e.stats.lag(),
                success: e.stats.success(),
                inflight: e.stats.inflight(),
                requests: e.stats.requests(),
                state: crate::balancer::service::view::state(&e.stats, now),
            })
            .collect()
    }

    /// Why a blocking dial found no usable endpoint: the resolver's problem, the endpoints that
    /// refused connections, or a resolver that has not answered.
    fn dial_state(&self, service: &str) -> String {
        let shared = &self.retry.balancer().shared;
        if let Some(problem) = shared.resolver_problem() {
            return problem.to_string();
        }
        if !shared.is_ready() {
            return "the resolver has not answered yet".to_owned();
        }
        let set: Vec<String> = shared
            .endpoints()
            .iter()
            .map(|e| e.addr.to_string())
            .collect();
        if set.is_empty() {
            return "the resolver returned no endpoints".to_owned();
        }
        format!(
            "no connection to any of the {} resolved endpoint(s) [{}], make sure rpc service {service:?} is already started",
            set.len(),
            set.join(", ")
        )
    }

    async fn wait_usable(&self, service: String) -> Result<(), Error> {
        let shared = &self.retry.balancer().shared;
        let wait = async {
            shared.wait_ready().await;
            loop {
                let set = shared.endpoints();
                let mut attempts: futures_util::stream::FuturesUnordered<_> = set
                    .iter()
                    .map(|e| tokio::net::TcpStream::connect(e.addr.to_string()))
                    .collect();
                use futures_util::StreamExt;
                while let Some(r) = attempts.next().await {
                    if r.is_ok() {
                        return;
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        };
        tokio::time::timeout(BLOCKING_DIAL_TIMEOUT, wait)
            .await
            .map_err(|_| Error::Dial {
                target: self.target.to_string(),
                waited: BLOCKING_DIAL_TIMEOUT,
                state: self.dial_state(&service),
            })
    }
}

/// One endpoint as seen by the balancer ([`Client::endpoints`]).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct EndpointInfo {
    /// `host:port`.
    pub addr: String,
    /// EWMA latency (`None` before the first completed call).
    pub lag: Option<Duration>,
    /// EWMA success score, 0..=1000.
    pub success: f64,
    /// Calls in flight.
    pub inflight: u64,
    /// Calls sent since the endpoint joined.
    pub requests: u64,
    /// Whether the balancer sends calls there.
    pub state: EndpointState,
}

/// What the balancer makes of an endpoint ([`EndpointInfo::state`]; the admin view shows the
/// same names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum EndpointState {
    /// Usable.
    Healthy,
    /// Cold or recovering: one call at a time until its first answer.
    Probing,
    /// In back-off after a transport failure (connection refused, reset).
    Down,
    /// Its connection was lost, a call ran into its deadline or its calls stalled: no call goes
    /// there while another endpoint is usable, until an out-of-band probe is answered.
    Suspect,
    /// Consecutive failed calls (`P2c.Rules: v2`): out of the pick for a back-off.
    Ejected,
}

impl EndpointState {
    /// The state's name: `healthy`, `probing`, `down`, `suspect` or `ejected`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            EndpointState::Healthy => "healthy",
            EndpointState::Probing => "probing",
            EndpointState::Down => "down",
            EndpointState::Suspect => "suspect",
            EndpointState::Ejected => "ejected",
        }
    }
}

pin_project! {
    /// The response future of [`Client`].
    pub struct ResponseFuture {
        #[pin]
        state: State,
    }
}

pin_project! {
    #[project = StateProj]
    enum State {
        Called {
            #[pin]
            call: Call,
            // the observing stage's recorders (disarmed when it is off)
            outcome: StatusGuard<Outcome>,
            // the call's deadline and its timeout (the timeout stage's, or the caller's)
            deadline: Option<Instant>,
            timeout: Option<Duration>,
            // how the response is decompressed
            inflate: crate::compression::Inflate,
        },
        // the breaker rejected the call (recorded already)
        Rejected { err: Option<BoxError> },
    }
}

impl std::fmt::Debug for ResponseFuture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

impl Future for ResponseFuture {
    type Output = Result<Response, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            StateProj::Rejected { err } => Poll::Ready(Err(err
                .take()
                .unwrap_or_else(|| tonic::Status::internal("polled after completion").into()))),
            StateProj::Called {
                call,
                outcome,
                deadline,
                timeout,
                inflate,
            } => {
                let answer = {
                    let _enter = outcome
                        .get()
                        .and_then(Outcome::span)
                        .map(tracing::Span::enter);
                    ready!(call.poll(cx))
                };
                Poll::Ready(
                    crate::response::end(
                        answer,
                        *deadline,
                        *timeout,
                        outcome.take(),
                        Some(inflate.limit()),
                    )
                    .and_then(|resp| std::mem::take(inflate).response(resp)),
                )
            }
        }
    }
}

impl tower::Service<http::Request<Body>> for Client {
    type Response = Response;
    type Error = BoxError;
    type Future = ResponseFuture;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        // the balancer is always ready: a call waits for endpoints in its future
        Poll::Ready(Ok(()))
    }

    /// go-zero's chain in one step, stage by stage (outer to inner): observe (its span, the
    /// breaker), timeout, credentials, then the retry stage: the balancer's pick and the first
    /// attempt, and any attempt after it (a request that never reached a server sent
    /// elsewhere, a method's retry or hedging policy under the retry budget). The stages share
    /// the call's start instant and its deadline without request extensions, and its final
    /// status is read once, for the endpoint and the recorders together (`crate::response`).
    fn call(&mut self, mut req: http::Request<Body>) -> Self::Future {
        let start = Instant::now();
        let outcome = match &self.observe {
            Some(o) => match o.begin(&mut req, start) {
                Ok(outcome) => StatusGuard::new(outcome),
                Err(err) => {
                    return ResponseFuture {
                        state: State::Rejected { err: Some(err) },
                    };
                }
            },
            None => StatusGuard::disarmed(),
        };
        let (deadline, timeout) = match &self.timeout {
            Some(stage) => match stage.apply(&mut req) {
                Some((deadline, timeout)) => (Some(deadline), Some(timeout)),
                None => (None, None),
            },
            // the caller's own `grpc-timeout`, if any
            None => caller_deadline(&req, start),
        };
        if let Some(c) = &self.credentials {
            c.apply(&mut req);
        }
        if let Some(t) = &self.tiers {
            t.apply(&mut req);
        }
        let inflate = self.compression.request(&mut req);
        let call = {
            let _enter = outcome
                .get()
                .and_then(Outcome::span)
                .map(tracing::Span::enter);
            self.retry.call(req, deadline, timeout, start)
        };
        ResponseFuture {
            state: State::Called {
                call,
                outcome,
                deadline,
                timeout,
                inflate,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static_assertions::assert_impl_all!(Client: Clone, Send, Sync, std::fmt::Debug);
    static_assertions::assert_impl_all!(
        Client: tower::Service<http::Request<Body>, Response = http::Response<Body>>
    );

    #[tokio::test]
    async fn a_client_records_into_the_registries_it_is_given() {
        use tower::ServiceExt;
        use zrpc_core::breaker::BreakerConfig;

        // an address nobody listens on: the call fails with Unavailable, recorded all the same
        let addr = crate::refusing_endpoints(1).remove(0);
        let registry = prometheus::Registry::new();
        let metrics = ClientMetrics::register(&registry).unwrap();
        let breakers = Arc::new(BreakerRegistry::new(BreakerConfig::default()));
        let handles = ClientHandles::default()
            .breakers(breakers.clone())
            .metrics(metrics.clone());
        // with a retry policy: its attempts are counted in the given registry too
        let conf = RpcClientConf::direct([addr.clone()]).with_method_config(
            crate::conf::MethodConf::retry(
                [crate::conf::MethodName::new("p.S", "")],
                crate::conf::RetryPolicyConf::default(),
            ),
        );
        let client = Client::with_handles(conf, handles).await.unwrap();
        let req = http::Request::builder()
            .uri(format!("http://{addr}/p.S/M"))
            .body(Body::empty())
            .unwrap();
        assert!(client.oneshot(req).await.is_err());
        let calls = metrics
            .duration_ms
            .with_label_values(&["/p.S/M"])
            .get_sample_count();
        assert_eq!(calls, 1, "the failed call is in the given registry");
        let codes: u64 = registry
            .gather()
            .iter()
            .filter(|f| f.name() == "rpc_client_requests_code_total")
            .flat_map(|f| {
                f.get_metric()
                    .iter()
                    .map(|m| m.get_counter().get_value() as u64)
            })
            .sum();
        assert_eq!(codes, 1, "one call, however many attempts");
        let attempts = |kind: &str| {
            metrics
                .attempts_total
                .with_label_values(&["/p.S/M", kind])
                .get()
        };
        assert_eq!(attempts("first"), 1);
        assert!(attempts("retry") >= 1, "the refused call was retried");
        assert_eq!(breakers.names(), vec![format!("direct:///{addr}/p.S/M")]);
    }

    /// A client of 1,000 endpoints reports a failed call naming the endpoint that refused it
    /// and the target by its first endpoints, in a message of bounded size (spelt out, the
    /// target alone was ~16 KB in every status).
    #[tokio::test]
    async fn a_failed_call_of_a_large_fleet_has_a_short_message_naming_the_endpoint() {
        use tower::ServiceExt;
        // 1,000 loopback addresses nobody listens on: every call is refused
        let endpoints = crate::refusing_endpoints(1000);
        let client = Client::new(RpcClientConf::direct(endpoints.clone()))
            .await
            .unwrap();
        let req = http::Request::builder()
            .uri("http://fleet/p.S/M")
            .body(Body::empty())
            .unwrap();
        let err = client.oneshot(req).await.unwrap_err();
        let status = tonic::Status::from_error(err);
        let message = status.message();
        assert_eq!(status.code(), tonic::Code::Unavailable, "{message}");
        assert!(message.len() < 512, "{} bytes: {message}", message.len());
        assert!(
            message.contains(&format!("direct:///{},", endpoints[0]))
                && message.contains("+997 more"),
            "{message}"
        );
        assert!(
            endpoints
                .iter()
                .any(|e| message.contains(&format!("endpoint {e}"))),
            "names the endpoint that refused: {message}"
        );
    }

    #[tokio::test]
    async fn a_registry_for_a_stage_that_is_off_is_refused() {
        let refused = |breaker: bool, handles: ClientHandles| async move {
            let mut conf = RpcClientConf::direct(["127.0.0.1:1"]);
            conf.middlewares.breaker = breaker;
            conf.middlewares.prometheus = !breaker;
            Client::with_handles(conf, handles)
                .await
                .unwrap_err()
                .to_string()
        };
        let breakers = Arc::new(BreakerRegistry::new(
            zrpc_core::breaker::BreakerConfig::default(),
        ));
        let text = refused(false, ClientHandles::default().breakers(breakers)).await;
        assert!(
            text.contains("Middlewares.Breaker") && text.contains("ClientHandles::breakers"),
            "{text}"
        );
        let metrics = ClientMetrics::register(&prometheus::Registry::new()).unwrap();
        let text = refused(true, ClientHandles::default().metrics(metrics)).await;
        assert!(text.contains("Middlewares.Prometheus"), "{text}");
    }

    #[tokio::test]
    async fn a_resolution_refuses_a_config_that_names_a_target_and_checks_the_rest() {
        let resolution = || resolver::Resolution::fixed(vec!["127.0.0.1:1".into()]);
        let err = Client::with_resolution(
            RpcClientConf::direct(["127.0.0.1:2"]),
            "test:///r",
            resolution(),
        )
        .await
        .unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("Endpoints") && text.contains("direct:///127.0.0.1:2"),
            "{text}"
        );
        // the rest of the config is checked as Client::new checks it
        let bad = RpcClientConf::default()
            .with_p2c(crate::conf::P2cConf::default().with_max_ejected_percent(101));
        let err = Client::with_resolution(bad, "test:///r", resolution())
            .await
            .unwrap_err();
        assert!(err.to_string().contains("P2c.MaxEjectedPercent"), "{err}");
        Client::with_resolution(RpcClientConf::default(), "test:///r", resolution())
            .await
            .unwrap();
    }
}
