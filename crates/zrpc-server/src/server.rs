//! [`Server`]: config -> zrpc's HTTP/2 serve loop + middleware chain + health + reflection +
//! DevServer + registration + graceful shutdown (go-zero `zrpc.NewServer` / `RpcServer.Start`).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use prost::Message;
use tokio::net::TcpListener;
use tokio::time::Instant;
use tonic::body::Body;
use tonic::server::NamedService;
use tonic_health::ServingStatus;
use tower::util::BoxCloneService;
use tower::{ServiceBuilder, ServiceExt};
use tower_layer::{Identity, Layer, Stack};
use tower_service::Service;
use zrpc_core::breaker::BreakerRegistry;
use zrpc_core::conf::{ConfError, Validate};

use crate::auth::TokenStore;
use crate::call::StreamingMethods;
use crate::conf::RpcServerConf;
use crate::error::Error;
use crate::handle::{HandleParts, Phase, ServerHandle};
use crate::layers::{DrainLayer, DrainSignal};
use crate::routes::{Routes, RoutesBuilder};
use crate::shutdown;
use crate::stage::recover::RecoverStage;
use crate::stage::trace::TraceStage;
use crate::stage::{Frame, GovernorLayer, LimitStage, SheddingStage, Stage};

use tower::BoxError;

/// A hook run at the start of shutdown, before WrapUpTime (go-zero's wrap-up listeners;
/// etcd deregistration runs here).
pub type WrapUpHook =
    Box<dyn FnOnce() -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>> + Send>;

/// A zrpc server: tonic services behind go-zero's middleware chain.
///
/// # Examples
///
/// ```no_run
/// # async fn run<S>(svc: S) -> Result<(), zrpc_server::Error>
/// # where S: tower_service::Service<http::Request<tonic::body::Body>,
/// #     Response = http::Response<tonic::body::Body>, Error = std::convert::Infallible>
/// #     + tonic::server::NamedService + Clone + Send + Sync + 'static,
/// #   S::Future: Send + 'static,
/// # {
/// use zrpc_server::{RpcServerConf, Server};
///
/// let conf = RpcServerConf::new("greeter.rpc", "0.0.0.0:8080");
/// Server::new(conf)?.add_service(svc).serve().await
/// # }
/// ```
pub struct Server<L = Identity> {
    base: Base,
    layer: L,
}

/// Everything of a [`Server`] but its inner layers: what serving needs that does not depend
/// on the layers' type, so that it is compiled once, in this crate.
struct Base {
    conf: RpcServerConf,
    routes: RoutesBuilder,
    names: Vec<&'static str>,
    token_store: Option<Arc<dyn TokenStore>>,
    /// The shedder's CPU source; `None` = the process-wide sampler.
    cpu: Option<Arc<dyn zrpc_core::cpu::CpuUsage>>,
    breakers: Arc<BreakerRegistry>,
    descriptors: Vec<&'static [u8]>,
    streaming: Vec<String>,
    wrap_up: Vec<WrapUpHook>,
    authority_repair: bool,
    parts: HandleParts,
    /// Layers around the whole chain, the first added outermost.
    outer: Vec<OuterLayer>,
    /// The user's stages, after the built-in ones, in the order added.
    stages: Vec<Arc<dyn Stage>>,
    /// A builder call the config makes pointless, refused when serving starts.
    refused: Option<ConfError>,
}

impl<L> std::fmt::Debug for Server<L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("name", &self.base.conf.name)
            .field("listen_on", &self.base.conf.listen_on)
            .field("services", &self.base.names)
            .finish_non_exhaustive()
    }
}

impl Server {
    /// Builds a server from a validated config (go-zero `zrpc.NewServer`).
    ///
    /// With `Auth: true` the token store is go-zero's Redis hash when `Redis.Host` is set
    /// (with `Redis.NonBlock: false` Redis is pinged here, blocking up to `PingTimeout`), else
    /// the `AuthTokens` map, unless [`token_store`](Self::token_store) replaces it.
    ///
    /// # Errors
    ///
    /// [`Error::Conf`] when the config does not validate (for Redis: `Redis.Host` not
    /// `host:port`, `Redis.Key` empty, `Redis.Type: cluster`, `Redis.Tls: true`);
    /// [`Error::TokenStore`] when `Redis.NonBlock` is false and Redis does not answer.
    pub fn new(conf: RpcServerConf) -> Result<Server, Error> {
        let checked = conf
            .validate()
            .map_err(Error::from)
            .and_then(|()| crate::registry::check(&conf))
            .and_then(|()| crate::auth::store_from_conf(&conf));
        let token_store = checked.map_err(|e| e.in_file(conf.file()))?;
        Ok(Server {
            base: Base {
                conf,
                routes: RoutesBuilder::default(),
                names: Vec::new(),
                token_store,
                cpu: None,
                breakers: BreakerRegistry::shared(),
                descriptors: Vec::new(),
                streaming: Vec::new(),
                wrap_up: Vec::new(),
                authority_repair: true,
                parts: HandleParts::new(),
                outer: Vec::new(),
                stages: Vec::new(),
                refused: None,
            },
            layer: Identity::new(),
        })
    }
}

impl<L> Server<L> {
    /// Adds a tonic service (e.g. `GreeterServer::new(MyGreeter)`).
    #[must_use]
    pub fn add_service<S>(mut self, svc: S) -> Self
    where
        S: Service<Request<Body>, Response = Response<Body>, Error = std::convert::Infallible>
            + NamedService
            + Clone
            + Send
            + Sync
            + 'static,
        S::Future: Send + 'static,
    {
        self.base.names.push(S::NAME);
        self.base.routes.add_service(svc);
        self
    }

    /// Adds a user tower layer, innermost: it runs after every governing stage (auth, the
    /// breaker, the shedder, the timeout), just before the services (go-zero
    /// `AddUnaryInterceptors`), so it sees only the calls they admitted. Layers added first are
    /// outermost among these. Its responses must keep a body that is `Default` (tonic's `Body`
    /// is). [`outer_layer`](Self::outer_layer) wraps the whole chain instead.
    #[must_use]
    pub fn layer<NL>(self, layer: NL) -> Server<Stack<NL, L>> {
        Server {
            base: self.base,
            layer: Stack::new(layer, self.layer),
        }
    }

    /// Adds a user tower layer around the whole chain: it sees every call before any of
    /// zrpc's stages, also the calls they reject (a request that is not gRPC, a client
    /// missing from `Tls.AllowedClients`, a failed auth check, an open breaker, a shed call),
    /// and every response as the client gets it. Layers added first are outermost. The
    /// chain it wraps is a [`ServerChain`] (boxed: with an outer layer each call costs one
    /// allocation more), and its responses may have any body (they are boxed as tonic's).
    ///
    /// [`layer`](Self::layer) adds a layer inside the chain instead, next to the services.
    #[must_use]
    pub fn outer_layer<NL, RB>(mut self, layer: NL) -> Self
    where
        NL: Layer<ServerChain> + Send + 'static,
        NL::Service: Service<Request<Body>, Response = Response<RB>> + Clone + Send + 'static,
        <NL::Service as Service<Request<Body>>>::Future: Send + 'static,
        <NL::Service as Service<Request<Body>>>::Error: Into<BoxError>,
        RB: http_body::Body<Data = Bytes> + Send + 'static,
        RB::Error: Into<BoxError>,
    {
        self.base
            .outer
            .push(Box::new(move |chain| boxed(layer.layer(chain))));
        self
    }

    /// Adds `stage` to the server's stage list, after the built-in stages (so after auth,
    /// the breaker, the limit and the shedder, and inside the calls' timeout) and the stages
    /// added before it. Its `admit` runs for every call the stages before it admitted,
    /// health and reflection included ([`Call::is_infrastructure`](crate::stage::Call::is_infrastructure)
    /// tells them apart); a [`Rejection`](crate::stage::Rejection) it gives counts in
    /// `rpc_server_dropped_total` under its reason. See [`crate::stage`].
    #[must_use]
    pub fn stage(mut self, stage: impl Stage) -> Self {
        self.base.stages.push(Arc::new(stage));
        self
    }

    /// Replaces the auth token store (default: the `AuthTokens` map, or Redis with
    /// `Redis.Host`).
    ///
    /// Serving fails with [`Error::Conf`] when the config's `Auth` is false: no call would be
    /// checked against the store.
    #[must_use]
    pub fn token_store(mut self, store: Arc<dyn TokenStore>) -> Self {
        if self.base.conf.auth {
            self.base.token_store = Some(store);
        } else {
            self.base.refused = Some(ConfError::invalid(
                "Auth",
                "a token store was given (`Server::token_store`) but `Auth` is false, so no \
                 call would be checked against it: set `Auth: true`",
            ));
        }
        self
    }

    /// Registers an encoded `FileDescriptorSet` (from `tonic_prost_build`'s
    /// `file_descriptor_set_path`), served by reflection (when `Reflection` or `Mode`
    /// dev/test) and used to learn which methods stream (never shed nor timed out).
    #[must_use]
    pub fn reflection_descriptor(mut self, encoded: &'static [u8]) -> Self {
        self.base.descriptors.push(encoded);
        self
    }

    /// Declares a streaming method (`/pkg.Service/Method`) so it is never shed nor timed
    /// out, when no descriptor set is registered.
    #[must_use]
    pub fn streaming_method(mut self, full_method: impl Into<String>) -> Self {
        self.base.streaming.push(full_method.into());
        self
    }

    /// Replaces the CPU usage source of the shedder (default: the process-wide sampler,
    /// cgroup-aware). Tests inject a `zrpc_core::cpu::FixedCpu`.
    #[must_use]
    pub fn cpu_usage(mut self, cpu: Arc<dyn zrpc_core::cpu::CpuUsage>) -> Self {
        self.base.cpu = Some(cpu);
        self
    }

    /// Replaces the breaker registry, an owned handle (default: the process-wide one,
    /// [`BreakerRegistry::shared`], shared by every server in the process, keyed by full
    /// method, as in go-zero). Tests running several servers of the same service in one
    /// process give each its own.
    #[must_use]
    pub fn breaker_registry(mut self, registry: Arc<BreakerRegistry>) -> Self {
        self.base.breakers = registry;
        self
    }

    /// Adds a hook run when shutdown starts, before WrapUpTime (deregistration, flushing).
    #[must_use]
    pub fn on_wrap_up<F, Fut>(mut self, hook: F) -> Self
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.base.wrap_up.push(Box::new(move || Box::pin(hook())));
        self
    }

    /// Whether to repair the `:authority` that grpc-go clients (go-zero's) send for multi-host
    /// targets (`h1:p1,h2:p2`), which `h2` would otherwise reset with `PROTOCOL_ERROR`
    /// (default: on). The repair steps aside after the first request of any other client;
    /// `zrpc_server::original_authority` gives handlers what the client sent.
    #[must_use]
    pub fn authority_repair(mut self, on: bool) -> Self {
        self.base.authority_repair = on;
        self
    }

    /// A handle to watch the server and shut it down.
    pub fn handle(&self) -> ServerHandle {
        self.base.parts.handle()
    }

    /// The config.
    pub fn conf(&self) -> &RpcServerConf {
        &self.base.conf
    }
}

/// Streaming methods declared in encoded descriptor sets.
/// The streaming methods of the health and reflection services zrpc serves.
const INFRA_STREAMS: [&str; 3] = [
    "/grpc.health.v1.Health/Watch",
    "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
    "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
];

/// The streaming methods (`/pkg.Service/Method`) of every descriptor set linked into the binary
/// by `zrpc-build`'s generated code (sets that do not decode are skipped), and health `Watch`
/// and reflection. The facade's `zrpc::client` declares them to the client's metrics, so that a
/// client records streams in the stream families without a declaration of its own.
#[must_use]
pub fn linked_streaming_methods() -> Vec<String> {
    let mut out: Vec<String> = INFRA_STREAMS.iter().map(|m| (*m).to_owned()).collect();
    for set in crate::descriptors::with_linked(Vec::new()) {
        if let Ok(methods) = streaming_from_descriptors(&[set]) {
            out.extend(methods);
        }
    }
    out
}

fn streaming_from_descriptors(sets: &[&'static [u8]]) -> Result<Vec<String>, Error> {
    Ok(described_methods(sets)?
        .into_iter()
        .filter_map(|(method, streams)| streams.then_some(method))
        .collect())
}

/// Every method (`/pkg.Service/Method`) of the encoded descriptor sets, and whether it streams.
fn described_methods(sets: &[&'static [u8]]) -> Result<Vec<(String, bool)>, Error> {
    let mut out = Vec::new();
    for set in sets {
        let set = prost_types::FileDescriptorSet::decode(*set)
            .map_err(|e| Error::Reflection(e.to_string()))?;
        for file in &set.file {
            let pkg = file.package();
            for svc in &file.service {
                let svc_name = if pkg.is_empty() {
                    svc.name().to_owned()
                } else {
                    format!("{pkg}.{}", svc.name())
                };
                for m in &svc.method {
                    let streams = m.client_streaming() || m.server_streaming();
                    out.push((format!("/{svc_name}/{}", m.name()), streams));
                }
            }
        }
    }
    Ok(out)
}

/// The port of a `ListenOn` written `:port` (every interface, IPv6 and IPv4, as in Go).
fn all_interfaces_port(listen_on: &str) -> Option<u16> {
    listen_on.strip_prefix(':')?.parse().ok()
}

fn listen_addr(listen_on: &str) -> String {
    match listen_on.strip_prefix(':') {
        Some(port) => format!("0.0.0.0:{port}"),
        None => listen_on.to_owned(),
    }
}

impl<L, UB> Server<L>
where
    L: Layer<Routes> + Send + 'static,
    L::Service: Service<Request<Body>, Response = Response<UB>> + Clone + Send + 'static,
    <L::Service as Service<Request<Body>>>::Future: Send + 'static,
    <L::Service as Service<Request<Body>>>::Error: Into<BoxError> + Send + 'static,
    UB: http_body::Body<Data = Bytes> + Default + Send + 'static,
    UB::Error: Into<BoxError>,
{
    /// Sets up logging/telemetry, binds `ListenOn` and serves until SIGTERM or SIGINT, then
    /// shuts down gracefully (go-zero `RpcServer.Start`).
    ///
    /// # Errors
    ///
    /// Config, bind or transport errors.
    pub async fn serve(self) -> Result<(), Error> {
        let (base, chain) = self.split();
        base.serve(None, chain).await
    }

    /// Serves on `listener` until `shutdown` resolves (or [`ServerHandle::shutdown`] is
    /// called), then shuts down gracefully:
    ///
    /// 1. wrap-up hooks (etcd deregistration), health NOT_SERVING, DevServer `/healthz` 503;
    /// 2. wait `WrapUpTime` (clients see the change) while still serving;
    /// 3. close the listener and drain in-flight calls and streams;
    /// 4. shortly before `WaitTime` (by a tenth of it, at most 500 ms) end the known
    ///    streams still open with `Unavailable "server is shutting down"`;
    /// 5. give up at `WaitTime` after the signal: the connections still open are closed (their
    ///    callers see the call fail; go-zero's process exits at this point).
    ///
    /// # Errors
    ///
    /// Transport or DevServer bind errors.
    pub async fn serve_with_listener<F>(
        self,
        listener: TcpListener,
        shutdown: F,
    ) -> Result<(), Error>
    where
        F: Future<Output = ()> + Send,
    {
        let (base, chain) = self.split();
        base.serve(Some((listener, Box::pin(shutdown))), chain)
            .await
    }

    /// The layer-independent part of the server, and the function that builds the chain.
    fn split(self) -> (Base, ChainFn) {
        let Server { base, layer } = self;
        let chain: ChainFn =
            Box::new(move |chain, routes, serving| chain.serve(layer, routes, serving));
        (base, chain)
    }
}

/// Builds the serve loop over the chain, given the inner layers (the one part of serving
/// that depends on their type).
type ChainFn = Box<dyn for<'a> FnOnce(Chain<'a>, Routes, Serving) -> ServeFuture + Send>;

/// A shutdown signal given by the caller.
type Shutdown<'a> = std::pin::Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

impl Base {
    /// [`Server::serve`] with `bound` `None`, else [`Server::serve_with_listener`]. Boxed
    /// here, so that the state machine of serving is compiled once, in this crate, rather
    /// than in each codegen unit of the application that awaits it.
    fn serve<'a>(
        mut self,
        bound: Option<(TcpListener, Shutdown<'a>)>,
        chain: ChainFn,
    ) -> std::pin::Pin<Box<dyn Future<Output = Result<(), Error>> + Send + 'a>> {
        // the errors of a start name the config's file, as load errors do
        let file = self.conf.file().map(str::to_owned);
        let serving = async move {
            if let Some(refused) = self.refused.take() {
                return Err(Error::Conf(refused));
            }
            match bound {
                Some((listener, shutdown)) => self.serve_phases(listener, shutdown, chain).await,
                None => {
                    let telemetry = crate::telemetry::init(&self.conf)?;
                    let addr = listen_addr(&self.conf.listen_on);
                    let listener = match all_interfaces_port(&self.conf.listen_on) {
                        Some(port) => crate::transport::all_interfaces(port),
                        None => TcpListener::bind(&addr).await,
                    }
                    .map_err(|source| Error::Bind { addr, source })?;
                    let shutdown = Box::pin(shutdown::signal());
                    let served = self.serve_phases(listener, shutdown, chain).await;
                    // the last spans reach the collector before the process ends
                    telemetry.shutdown().await;
                    served
                }
            }
        };
        Box::pin(async move { serving.await.map_err(|e| e.in_file(file.as_deref())) })
    }

    /// Serving in its four phases.
    async fn serve_phases(
        self,
        listener: TcpListener,
        shutdown: Shutdown<'_>,
        chain: ChainFn,
    ) -> Result<(), Error> {
        let Base {
            conf,
            routes,
            names,
            token_store,
            cpu,
            breakers,
            descriptors,
            streaming,
            wrap_up,
            authority_repair,
            parts,
            outer,
            stages,
            refused: _,
        } = self;
        let local = listener.local_addr().map_err(Error::LocalAddr)?;
        parts.state.send_modify(|s| s.local_addr = Some(local));
        // Logged here rather than in `new`: `serve` has set up logging by now.
        for ignored in conf.ignored_keys() {
            tracing::warn!(target: "zrpc::server", "{ignored}");
        }
        // Phase 1: the services, health and reflection.
        let services = prepare_services(&conf, routes, &names, descriptors, streaming).await?;

        // Phase 2: the chain and the transport, not yet accepting calls.
        // One shedder per server, and its concurrency limits, with their gauges (unregistered
        // when this returns).
        let shedder = crate::stage::shedding::gauges::shedder(&conf, cpu);
        let limit = crate::stage::limit::gauges::limit_stage(&conf, &services.described);
        let _gauges_guard = GaugesGuard::register(shedder.as_ref(), &limit, local);
        let drain = DrainSignal::new();
        let drain_infra = DrainSignal::new();

        // TLS (`crate::tls`): files checked now, the certificate watched while serving.
        let mut accept = crate::transport::accept_settings(&conf.transport, authority_repair);
        let tls = conf
            .tls
            .as_ref()
            .map(crate::tls::ServerTls::load)
            .transpose()?
            .map(Arc::new);
        let _tls_watch = tls.as_ref().map(|t| {
            accept.tls = Some(t.config.clone());
            t.watch()
        });

        // The open connections, counted per connection for the admin view.
        let connections = Arc::new(crate::transport::connections::Connections::new(
            conf.transport.max_connection_idle().is_some(),
        ));
        let sources = ViewSources {
            local,
            limit: &limit,
            shedder: shedder.as_ref(),
            breakers: &breakers,
            connections: &connections,
        };
        let dev = DevServer::start(&conf, &parts, &sources).await?;
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        // zrpc's accept loop (`crate::transport`): back-off on accept errors, the connection
        // cap, TCP_NODELAY; each connection is read through the `:authority` repair for
        // grpc-go's multi-host targets (`crate::transport::authority`, innermost; it steps aside after the
        // first header block of any client that does not need it) and under the handshake,
        // idle and age deadlines.
        let allowed = tls.as_ref().and_then(|t| t.allowed.clone());
        let front = crate::transport::front_layer(&conf.transport, allowed);
        let shedding = crate::stage::shedding::gauges::shedding_stage(shedder.as_ref());
        let in_flight = shedding
            .shared()
            .map(|s| s as Arc<dyn crate::call::InFlight>);
        // The largest uncompressed request message is the decompressed one's (both 4 MiB by
        // default, tonic's and grpc-go's limit), answered as gRPC's table says.
        let max_message = Some(conf.max_decompressed_size).filter(|&m| m > 0);
        let intake = crate::transport::intake(
            &accept,
            &conf.transport,
            max_message,
            services.streaming.clone(),
            in_flight,
            connections,
        );
        let incoming = crate::transport::incoming(listener, accept);
        let http2 = crate::transport::http2(&conf.transport);
        let stopped = Box::pin(async move {
            let _ = stop_rx.await;
        });
        let make_chain = chain;
        let chain = Chain {
            conf: &conf,
            front,
            limit,
            shedding,
            token_store,
            breakers,
            drain: DrainLayer::new(drain.clone(), drain_infra.clone()),
            streaming: &services.streaming,
            described: &services.described,
            outer,
            stages,
        };
        let server = make_chain(
            chain,
            services.routes,
            Serving {
                intake,
                incoming,
                http2,
                stopped,
            },
        );
        let mut server = std::pin::pin!(server);

        // Phase 3: serving and registered, until the shutdown signal (or a transport error).
        if let Some(h) = &services.health {
            set_health(h, &names, ServingStatus::Serving).await;
        }
        parts.set_phase(Phase::Serving);
        tracing::info!(target: "zrpc::server", "{} serving on {local}", conf.name);
        let registration = crate::shutdown::start_registration(&conf, local, &parts);

        let mut shutdown = shutdown;
        tokio::select! {
            res = &mut server => {
                // The transport failed: deregister before reporting it.
                crate::shutdown::stop_registration(registration).await;
                parts.set_phase(Phase::Stopped);
                dev.stop().await;
                return res.map_err(Error::from);
            }
            () = &mut shutdown => {}
            () = parts.shutdown_requested() => {}
        }
        // Phase 4: wrap up, then drain.
        let stopping = Stopping {
            conf: &conf,
            parts: &parts,
            names: &names,
            health: services.health.as_ref(),
            stop_accepting: stop_tx,
            drain: &drain,
            drain_infra: &drain_infra,
        };
        let res = stopping.run(server, wrap_up, registration).await;
        parts.set_phase(Phase::Stopped);
        dev.stop().await;
        tracing::info!(target: "zrpc::server", "{} stopped", conf.name);
        res
    }
}

/// The serve loop's future, whichever chain it runs.
type ServeFuture =
    std::pin::Pin<Box<dyn Future<Output = Result<(), tonic::transport::Error>> + Send>>;

/// A layer added with [`Server::outer_layer`], applied to the chain it wraps.
type OuterLayer = Box<dyn FnOnce(ServerChain) -> ServerChain + Send>;

/// The whole chain as [`Server::outer_layer`]'s layers see it: a cloneable boxed service.
pub type ServerChain = BoxCloneService<Request<Body>, Response<Body>, BoxError>;

/// Phase 2 of serving: the chain, outer to inner (`docs/middleware.md`):
///
/// `outer layers -> Front -> Governor -> Drain -> Compression -> layers -> services`
///
/// `Front` (`transport::front`): calls per connection, 415 for non-gRPC requests,
/// `Tls.AllowedClients`. `Governor` (`crate::stage`): inside the trace and recover frame (and
/// the caller's deadline, always), the stage list built from the config: stat, metrics, auth,
/// breaker, limit, shedding and timeout, then the user's stages.
/// `Drain` ends the streams still open at the shutdown deadline. `Compression`
/// (`crate::compression`) decompresses requests and compresses responses for every service.
struct Chain<'a> {
    conf: &'a RpcServerConf,
    front: crate::transport::FrontLayer,
    limit: LimitStage,
    shedding: SheddingStage,
    token_store: Option<Arc<dyn TokenStore>>,
    breakers: Arc<BreakerRegistry>,
    drain: DrainLayer,
    /// The transport's set, for the governor's requests without an `Arrival`.
    streaming: &'a StreamingMethods,
    /// The methods the descriptor sets name.
    described: &'a [String],
    outer: Vec<OuterLayer>,
    stages: Vec<Arc<dyn Stage>>,
}

impl Chain<'_> {
    /// The serve loop over this chain, the inner layers `layer` and `routes`.
    fn serve<L, UB>(self, layer: L, routes: Routes, serving: Serving) -> ServeFuture
    where
        L: Layer<Routes> + Send + 'static,
        L::Service: Service<Request<Body>, Response = Response<UB>> + Clone + Send + 'static,
        <L::Service as Service<Request<Body>>>::Future: Send + 'static,
        <L::Service as Service<Request<Body>>>::Error: Into<BoxError> + Send + 'static,
        UB: http_body::Body<Data = Bytes> + Default + Send + 'static,
        UB::Error: Into<BoxError>,
    {
        let conf = self.conf;
        let env = crate::stage::Env {
            conf,
            token_store: self.token_store,
            breakers: self.breakers,
            limit: self.limit,
            shedding: self.shedding,
            described: self.described,
        };
        let frame = Frame {
            trace: TraceStage::new(conf.middlewares.trace),
            recover: RecoverStage::new(conf.middlewares.recover),
        };
        let stages = crate::stage::list(&env, &self.stages);
        let inner = ServiceBuilder::new()
            .layer(self.drain)
            .layer(crate::compression::CompressionLayer::new(conf))
            .layer(layer)
            .service(routes);
        // The governor is always on: it enforces the caller's deadline whatever else the
        // config switches off.
        let governor = GovernorLayer::with(frame, stages, self.streaming.clone());
        let chain = self.front.layer(governor.layer(inner));
        if self.outer.is_empty() {
            return run(serving, chain);
        }
        let chain = boxed(chain);
        // The layer added first is outermost.
        let chain = self
            .outer
            .into_iter()
            .rev()
            .fold(chain, |chain, outer| outer(chain));
        run(serving, chain)
    }
}

/// `svc` as a [`ServerChain`].
fn boxed<S, B>(svc: S) -> ServerChain
where
    S: Service<Request<Body>, Response = Response<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    BoxCloneService::new(svc.map_response(|r| r.map(Body::new)).map_err(Into::into))
}

/// What the serve loop needs besides its chain.
struct Serving {
    intake: crate::transport::serve::Intake,
    incoming: crate::transport::Incoming,
    http2: crate::transport::serve::Http2,
    /// Resolves when the listener is to close.
    stopped: std::pin::Pin<Box<dyn Future<Output = ()> + Send>>,
}

/// The serve loop over `chain`.
fn run<S, B>(serving: Serving, chain: S) -> ServeFuture
where
    S: Service<Request<Body>, Response = Response<B>> + Clone + Send + 'static,
    S::Error: Into<BoxError> + Send + 'static,
    S::Future: Send + 'static,
    B: http_body::Body<Data = Bytes> + Default + Send + 'static,
    B::Error: Into<BoxError>,
{
    let Serving {
        intake,
        incoming,
        http2,
        stopped,
    } = serving;
    Box::pin(crate::transport::serve::serve(
        chain, intake, incoming, http2, stopped,
    ))
}

/// The services a server routes to, ready to serve.
struct Services {
    routes: Routes,
    /// The health reporter (`Health: true`), NOT_SERVING until the server serves.
    health: Option<tonic_health::server::HealthReporter>,
    /// Streaming methods: declared, and learned from the descriptor sets.
    streaming: StreamingMethods,
    /// The methods of the descriptor sets: known to exist before any call.
    described: Vec<String>,
}

/// Phase 1 of serving: the user's services plus health and reflection, and the streaming
/// methods.
async fn prepare_services(
    conf: &RpcServerConf,
    mut routes: RoutesBuilder,
    names: &[&'static str],
    descriptors: Vec<&'static [u8]>,
    mut streaming: Vec<String>,
) -> Result<Services, Error> {
    // Sets linked in by zrpc-build's generated code: the methods, their kinds and reflection.
    let descriptors = crate::descriptors::with_linked(descriptors);
    let described = described_methods(&descriptors)?;
    streaming.extend(
        described
            .iter()
            .filter(|(_, streams)| *streams)
            .map(|(m, _)| m.clone()),
    );
    // Health (SERVING only once we serve) and reflection.
    let health = if conf.health {
        let (reporter, svc) = tonic_health::server::health_reporter();
        set_health(&reporter, names, ServingStatus::NotServing).await;
        routes.add_service(svc);
        Some(reporter)
    } else {
        None
    };
    if conf.reflection_enabled() {
        add_reflection(&mut routes, &descriptors, health.is_some())?;
    }
    // Health's Watch and reflection are streams too: their calls belong in the stream metric
    // families (every other stage already treats them apart, as infrastructure).
    streaming.extend(INFRA_STREAMS.iter().map(|m| (*m).to_owned()));
    Ok(Services {
        routes: routes.routes().map_err(Error::DuplicateService)?,
        health,
        streaming: StreamingMethods::new(streaming),
        described: described.into_iter().map(|(m, _)| m).collect(),
    })
}

/// What the DevServer's admin view reads of a server.
#[cfg_attr(not(feature = "devserver"), allow(dead_code))] // no view without the DevServer
struct ViewSources<'a> {
    local: std::net::SocketAddr,
    limit: &'a LimitStage,
    shedder: Option<&'a Arc<zrpc_core::shedder::AdaptiveShedder>>,
    breakers: &'a Arc<BreakerRegistry>,
    connections: &'a Arc<crate::transport::connections::Connections>,
}

/// The DevServer of a server (`DevServer.Enabled`), running as its own task.
struct DevServer {
    stop: tokio::sync::oneshot::Sender<()>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl DevServer {
    /// Binds and spawns it. go-zero starts one DevServer per process: a second server of the
    /// process with the same DevServer port goes on without one (metrics are process-wide).
    async fn start(
        conf: &RpcServerConf,
        parts: &HandleParts,
        sources: &ViewSources<'_>,
    ) -> Result<Self, Error> {
        let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let Some(dev) = conf.dev_server.as_ref().filter(|d| d.enabled) else {
            return Ok(DevServer { stop, task: None });
        };
        // Without the `devserver` feature a `DevServer` block with `Enabled` was refused at
        // load (or by `Server::new`): nothing to start.
        #[cfg(not(feature = "devserver"))]
        {
            let _ = (dev, parts, sources, stop_rx);
            Ok(DevServer { stop, task: None })
        }
        #[cfg(feature = "devserver")]
        {
            let view = crate::devserver::ServerView::new(
                conf,
                sources.local,
                sources.limit.shared(),
                sources.shedder.cloned(),
                conf.middlewares
                    .breaker
                    .then(|| Arc::clone(sources.breakers)),
                Arc::clone(sources.connections),
            );
            let bound = crate::devserver::bind(
                dev,
                parts.state.subscribe(),
                crate::devserver::Admin::new(parts, &dev.admin_token).with_view(view),
                format!("zrpc-{}", conf.listen_on),
                async move {
                    let _ = stop_rx.await;
                },
            )
            .await;
            let task = match bound {
                Ok((addr, fut)) => {
                    parts.state.send_modify(|s| s.dev_server_addr = Some(addr));
                    Some(tokio::spawn(fut))
                }
                Err(Error::Bind { addr, source })
                    if source.kind() == std::io::ErrorKind::AddrInUse =>
                {
                    tracing::warn!(
                        target: "zrpc::devserver",
                        "dev server address {addr} is in use (another server of this process?); \
                         continuing without a dev server for this one"
                    );
                    None
                }
                Err(e) => return Err(e),
            };
            Ok(DevServer { stop, task })
        }
    }

    /// Stops it, waiting up to 1 s for its task.
    async fn stop(self) {
        let _ = self.stop.send(());
        if let Some(t) = self.task {
            let _ = tokio::time::timeout(Duration::from_secs(1), t).await;
        }
    }
}

/// Phase 4 of serving, once the shutdown signal came: wrap-up, then drain.
struct Stopping<'a> {
    conf: &'a RpcServerConf,
    parts: &'a HandleParts,
    names: &'a [&'static str],
    health: Option<&'a tonic_health::server::HealthReporter>,
    /// Closes the listener.
    stop_accepting: tokio::sync::oneshot::Sender<()>,
    drain: &'a DrainSignal,
    drain_infra: &'a DrainSignal,
}

impl Stopping<'_> {
    async fn run<S>(
        self,
        mut server: std::pin::Pin<&mut S>,
        wrap_up: Vec<WrapUpHook>,
        registration: Option<crate::registry::Publisher>,
    ) -> Result<(), Error>
    where
        S: Future<Output = Result<(), tonic::transport::Error>>,
    {
        let started = Instant::now();
        let wait = self
            .conf
            .shutdown
            .wait_time
            .max(self.conf.shutdown.wrap_up_time);
        tracing::info!(target: "zrpc::server", "{} shutting down...", self.conf.name);

        // 1. wrap-up: deregister + NOT_SERVING, while still serving.
        self.parts.set_phase(Phase::WrappingUp);
        let wrap_up_work = async {
            let hooks = wrap_up.into_iter().map(|h| h());
            tokio::join!(
                futures_util::future::join_all(hooks),
                crate::shutdown::stop_registration(registration),
                async {
                    if let Some(h) = self.health {
                        set_health(h, self.names, ServingStatus::NotServing).await;
                    }
                },
            );
            tokio::time::sleep(self.conf.shutdown.wrap_up_time).await;
        };
        tokio::select! {
            res = &mut server => return res.map_err(Error::from),
            () = tokio::time::sleep_until(started + wait) => {}
            () = wrap_up_work => {}
        }

        // 2. stop accepting, drain; shortly before WaitTime end the streams still open with
        // `Unavailable "server is shutting down"`; give up at WaitTime.
        self.parts.set_phase(Phase::Draining);
        let _ = self.stop_accepting.send(());
        self.drain_infra.cut();
        let cut_at = started + wait - (wait / 10).min(Duration::from_millis(500));
        let drained = match tokio::time::timeout_at(cut_at, &mut server).await {
            Ok(res) => Ok(res),
            Err(_) => {
                tracing::warn!(
                    target: "zrpc::server",
                    "ending the streams still open at the shutdown deadline"
                );
                self.drain.cut();
                tokio::time::timeout_at(started + wait, &mut server).await
            }
        };
        match drained {
            Ok(res) => res.map_err(Error::from),
            Err(_) => {
                tracing::warn!(
                    target: "zrpc::server",
                    "still alive after {:?}, giving up on the remaining calls",
                    wait
                );
                Ok(())
            }
        }
    }
}

/// The shedder's and the concurrency limits' gauges, registered while the server runs.
struct GaugesGuard(
    Option<crate::stage::shedding::gauges::ShedderCollector>,
    Option<crate::stage::limit::gauges::LimitCollector>,
);

impl GaugesGuard {
    fn register(
        shedder: Option<&Arc<zrpc_core::shedder::AdaptiveShedder>>,
        limit: &LimitStage,
        local: std::net::SocketAddr,
    ) -> Self {
        let server = local.to_string();
        let shedder = shedder
            .and_then(|s| crate::stage::shedding::gauges::shedder_gauges(s.clone(), &server));
        let limit = limit
            .shared()
            .and_then(|l| crate::stage::limit::gauges::limit_gauges(l, &server));
        if let Some(g) = &shedder {
            crate::metrics::register(g, "shedder");
        }
        if let Some(g) = &limit {
            crate::metrics::register(g, "concurrency-limit");
        }
        GaugesGuard(shedder, limit)
    }
}

impl Drop for GaugesGuard {
    fn drop(&mut self) {
        if let Some(g) = &self.0 {
            crate::metrics::unregister(g);
        }
        if let Some(g) = &self.1 {
            crate::metrics::unregister(g);
        }
    }
}

async fn set_health(
    reporter: &tonic_health::server::HealthReporter,
    names: &[&str],
    status: ServingStatus,
) {
    reporter.set_service_status("", status).await;
    for n in names {
        reporter.set_service_status(*n, status).await;
    }
}

#[cfg(feature = "reflection")]
fn add_reflection(
    routes: &mut RoutesBuilder,
    descriptors: &[&'static [u8]],
    health: bool,
) -> Result<(), Error> {
    // grpc.health.v1.Health is listed too when it is served, as grpc-go (and so go-zero) lists
    // every service it serves.
    let builder = || {
        let health = health.then_some(tonic_health::pb::FILE_DESCRIPTOR_SET);
        descriptors
            .iter()
            .chain(&health)
            .fold(tonic_reflection::server::Builder::configure(), |b, d| {
                b.register_encoded_file_descriptor_set(d)
            })
    };
    if descriptors.is_empty() {
        tracing::warn!(
            target: "zrpc::server",
            "reflection is on but no descriptor set was registered (Server::reflection_descriptor)"
        );
    }
    let v1 = builder()
        .build_v1()
        .map_err(|e| Error::Reflection(e.to_string()))?;
    let v1alpha = builder()
        .build_v1alpha()
        .map_err(|e| Error::Reflection(e.to_string()))?;
    routes.add_service(v1);
    routes.add_service(v1alpha);
    Ok(())
}

/// Without the `reflection` feature: `Reflection: true` was refused at load, so this is
/// `Mode: dev` / `test`, which serves reflection only where the build has it (go-zero's dev
/// mode is more than reflection, so the config is not refused).
#[cfg(not(feature = "reflection"))]
fn add_reflection(_: &mut RoutesBuilder, _: &[&'static [u8]], _: bool) -> Result<(), Error> {
    tracing::warn!(
        target: "zrpc::server",
        "Mode dev/test serves gRPC reflection, which this build of zrpc leaves out: enable the \
         `reflection` cargo feature of zrpc to serve it"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use prost_types::{
        DescriptorProto, FileDescriptorProto, FileDescriptorSet, MethodDescriptorProto,
        ServiceDescriptorProto,
    };

    use super::*;

    /// `package t; message Req {} service Svc { rpc M(Req) returns (Req); rpc S(Req) returns (stream Req); }`
    fn descriptor() -> &'static [u8] {
        let method = |name: &str, streaming: bool| MethodDescriptorProto {
            name: Some(name.into()),
            input_type: Some(".t.Req".into()),
            output_type: Some(".t.Req".into()),
            server_streaming: Some(streaming),
            ..Default::default()
        };
        let set = FileDescriptorSet {
            file: vec![FileDescriptorProto {
                name: Some("t.proto".into()),
                package: Some("t".into()),
                message_type: vec![DescriptorProto {
                    name: Some("Req".into()),
                    ..Default::default()
                }],
                service: vec![ServiceDescriptorProto {
                    name: Some("Svc".into()),
                    method: vec![method("M", false), method("S", true)],
                    ..Default::default()
                }],
                syntax: Some("proto3".into()),
                ..Default::default()
            }],
        };
        Box::leak(set.encode_to_vec().into_boxed_slice())
    }

    #[test]
    fn learns_streaming_methods_from_descriptors() {
        assert_eq!(
            streaming_from_descriptors(&[descriptor()]).unwrap(),
            vec!["/t.Svc/S".to_owned()]
        );
        assert!(streaming_from_descriptors(&[b"\xff\xff"]).is_err());
    }

    #[cfg(feature = "reflection")]
    async fn list_v1(channel: tonic::transport::Channel) -> Vec<String> {
        use tonic_reflection::pb::v1::ServerReflectionRequest;
        use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
        use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
        use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
        let req = ServerReflectionRequest {
            host: String::new(),
            message_request: Some(MessageRequest::ListServices(String::new())),
        };
        let mut resp = ServerReflectionClient::new(channel)
            .server_reflection_info(tokio_stream::once(req))
            .await
            .unwrap()
            .into_inner();
        match resp.message().await.unwrap().unwrap().message_response {
            Some(MessageResponse::ListServicesResponse(l)) => {
                l.service.into_iter().map(|s| s.name).collect()
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[cfg(feature = "reflection")]
    async fn list_v1alpha(channel: tonic::transport::Channel) -> Vec<String> {
        use tonic_reflection::pb::v1alpha::ServerReflectionRequest;
        use tonic_reflection::pb::v1alpha::server_reflection_client::ServerReflectionClient;
        use tonic_reflection::pb::v1alpha::server_reflection_request::MessageRequest;
        use tonic_reflection::pb::v1alpha::server_reflection_response::MessageResponse;
        let req = ServerReflectionRequest {
            host: String::new(),
            message_request: Some(MessageRequest::ListServices(String::new())),
        };
        let mut resp = ServerReflectionClient::new(channel)
            .server_reflection_info(tokio_stream::once(req))
            .await
            .unwrap()
            .into_inner();
        match resp.message().await.unwrap().unwrap().message_response {
            Some(MessageResponse::ListServicesResponse(l)) => {
                l.service.into_iter().map(|s| s.name).collect()
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[cfg(feature = "reflection")]
    #[tokio::test]
    async fn serves_reflection_v1_and_v1alpha_when_switched_on() {
        // Health is listed only when it is served, as grpc-go lists the services it serves
        // (so `grpcurl ... grpc.health.v1.Health/Check` resolves).
        for health in [true, false] {
            let conf = RpcServerConf::new("refl.rpc", "127.0.0.1:0")
                .with_reflection(true)
                .with_health(health);
            let server = Server::new(conf)
                .unwrap()
                .reflection_descriptor(descriptor());
            let handle = server.handle();
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let task = tokio::spawn(server.serve_with_listener(listener, std::future::pending()));
            let addr = handle.serving().await.unwrap();
            let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
                .unwrap()
                .connect()
                .await
                .unwrap();
            for names in [list_v1(channel.clone()).await, list_v1alpha(channel).await] {
                assert!(names.contains(&"t.Svc".to_owned()), "{names:?}");
                assert_eq!(
                    names.contains(&"grpc.health.v1.Health".to_owned()),
                    health,
                    "Health: {health}: {names:?}"
                );
            }
            handle.shutdown();
            task.await.unwrap().unwrap();
            assert_eq!(handle.phase(), Phase::Stopped);
        }
    }

    #[test]
    fn listen_on_without_host_binds_all_interfaces() {
        assert_eq!(listen_addr(":8080"), "0.0.0.0:8080");
        assert_eq!(listen_addr("127.0.0.1:9"), "127.0.0.1:9");
        // `:port` listens on IPv6 and IPv4 (`transport::all_interfaces`), as in Go
        assert_eq!(all_interfaces_port(":8080"), Some(8080));
        assert_eq!(all_interfaces_port("0.0.0.0:8080"), None);
        assert_eq!(all_interfaces_port("[::]:8080"), None);
    }

    #[cfg(feature = "devserver")]
    #[tokio::test]
    async fn a_busy_dev_server_port_does_not_stop_the_second_server() {
        use crate::conf::DevServerConf;
        let busy = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = busy.local_addr().unwrap().port();
        let conf = RpcServerConf::new("dev2.rpc", "127.0.0.1:0")
            .with_dev_server(DevServerConf::new("127.0.0.1", port));
        let server = Server::new(conf).unwrap();
        let handle = server.handle();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let task = tokio::spawn(server.serve_with_listener(listener, std::future::pending()));
        assert!(handle.serving().await.is_some());
        assert_eq!(handle.dev_server_addr(), None);
        handle.shutdown();
        task.await.unwrap().unwrap();
    }

    /// Your own health service with `Health: true` serves `grpc.health.v1.Health` twice: the
    /// start says so (axum's router panicked).
    #[tokio::test]
    async fn a_service_name_served_twice_is_an_error_at_start() {
        let (_, health) = tonic_health::server::health_reporter();
        let conf = RpcServerConf::new("twice.rpc", "127.0.0.1:0").with_cpu_threshold(0);
        let server = Server::new(conf).unwrap().add_service(health);
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let err = server
            .serve_with_listener(listener, std::future::pending())
            .await
            .unwrap_err();
        assert!(
            matches!(err, Error::DuplicateService("grpc.health.v1.Health")),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            "service grpc.health.v1.Health was added twice: a server serves each service name once"
        );
    }

    #[tokio::test]
    async fn rejects_an_invalid_config() {
        let conf = RpcServerConf::new("", "127.0.0.1:0");
        assert!(matches!(Server::new(conf), Err(Error::Conf(_))));
    }
}
