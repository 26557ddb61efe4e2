//! The DevServer (go-zero `internal/devserver`): an HTTP/1.1 port for operators.
//!
//! Routes: `/` (JSON array of the routes), `HealthPath` (default `/healthz`: 200 with
//! `HealthResponse` while the gRPC server serves; 503 before and during shutdown, which
//! go-zero never does), `MetricsPath` (default `/metrics`: Prometheus text) when
//! `EnableMetrics`, and zrpc's operator routes under `/admin` ([`admin`]: the live state of the
//! server and the process's clients ([`state`]), the registration's state, and pausing and
//! resuming it, a write that needs `DevServer.AdminToken`). Other paths
//! get 404, other methods than GET and HEAD 405.
//!
//! Served by hyper's HTTP/1 connection directly rather than a router: three fixed routes do
//! not need one, and HTTP/1.1 alone is what go-zero's port speaks (Go's plaintext server has no
//! HTTP/2) and what Prometheus and Kubernetes probes use, so no second HTTP/2 server with its
//! own limits is compiled in. Limits: a request's headers must arrive within 10 s (hyper counts
//! a kept-alive connection's wait for its next request in them), a response must be read within
//! 10 s ([`stall`]), 16 KiB of buffer per connection, at most 128 connections at once (more are
//! closed on accept), and connections end gracefully on stop.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};

use crate::conf::DevServerConf;
use crate::error::Error;
use crate::handle::{Phase, State as ServerState};

pub(crate) mod admin;
mod redact;
mod stall;
pub(crate) mod state;

pub(crate) use admin::Admin;
pub(crate) use state::ServerView;

/// How long a client may take to send a request's headers.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections served at once; an operator port needs few.
const MAX_CONNECTIONS: usize = 128;

/// What the routes answer from.
struct Routes {
    server: watch::Receiver<ServerState>,
    probe: String,
    health_path: String,
    health_response: String,
    /// `Some(path)` when metrics are served.
    metrics_path: Option<String>,
    /// The JSON listing served at `/`.
    listing: String,
    /// The operator routes under `/admin`.
    admin: Admin,
}

impl Routes {
    fn answer(&self, req: &Request<hyper::body::Incoming>) -> Response<Full<Bytes>> {
        if req.uri().path() == admin::PAGE {
            return page(req.method());
        }
        let authorization = req
            .headers()
            .get(header::AUTHORIZATION)
            .map(|v| v.as_bytes());
        if let Some((status, extra, body)) =
            self.admin
                .answer(req.method(), req.uri().path(), authorization)
        {
            let mut resp = Response::builder()
                .status(status)
                .header(header::CONTENT_TYPE, "application/json");
            if let Some((name, value)) = extra {
                resp = resp.header(name, value);
            }
            return resp.body(Full::new(Bytes::from(body))).unwrap_or_default();
        }
        if req.method() != Method::GET && req.method() != Method::HEAD {
            return Response::builder()
                .status(StatusCode::METHOD_NOT_ALLOWED)
                .header(header::ALLOW, "GET, HEAD")
                .body(Full::default())
                .unwrap_or_default();
        }
        let path = req.uri().path();
        let (status, content_type, body) = if path == self.health_path {
            if self.server.borrow().phase == Phase::Serving {
                (
                    StatusCode::OK,
                    "text/plain; charset=utf-8",
                    self.health_response.clone(),
                )
            } else {
                (
                    StatusCode::SERVICE_UNAVAILABLE,
                    "text/plain; charset=utf-8",
                    format!("Service Unavailable\n{} is not ready\n", self.probe),
                )
            }
        } else if self.metrics_path.as_deref() == Some(path) {
            (
                StatusCode::OK,
                "text/plain; version=0.0.4; charset=utf-8",
                crate::metrics::render(),
            )
        } else if path == "/" {
            (StatusCode::OK, "application/json", self.listing.clone())
        } else {
            (
                StatusCode::NOT_FOUND,
                "text/plain; charset=utf-8",
                String::new(),
            )
        };
        Response::builder()
            .status(status)
            .header(header::CONTENT_TYPE, content_type)
            .body(Full::new(Bytes::from(body)))
            .unwrap_or_default()
    }
}

/// The admin page, for GET and HEAD.
fn page(method: &Method) -> Response<Full<Bytes>> {
    if *method != Method::GET && *method != Method::HEAD {
        return Response::builder()
            .status(StatusCode::METHOD_NOT_ALLOWED)
            .header(header::ALLOW, "GET, HEAD")
            .body(Full::default())
            .unwrap_or_default();
    }
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/html; charset=utf-8")
        .header(header::CONTENT_SECURITY_POLICY, admin::PAGE_CSP)
        .header(header::CACHE_CONTROL, "no-store")
        .header(header::X_CONTENT_TYPE_OPTIONS, "nosniff")
        .body(Full::new(Bytes::from_static(admin::PAGE_HTML.as_bytes())))
        .unwrap_or_default()
}

/// Binds the DevServer; returns its address and the serving future, which ends once
/// `shutdown` resolved and the connections open then have finished their requests.
pub(crate) async fn bind(
    conf: &DevServerConf,
    server: watch::Receiver<ServerState>,
    admin: Admin,
    probe: String,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<
    (
        SocketAddr,
        impl std::future::Future<Output = ()> + Send + 'static,
    ),
    Error,
> {
    let addr = conf.bind_addr();
    let listener = if conf.host.is_empty() {
        crate::transport::all_interfaces(conf.port)
    } else {
        TcpListener::bind(&addr).await
    }
    .map_err(|source| Error::Bind {
        addr: addr.clone(),
        source,
    })?;
    let local = listener.local_addr().map_err(Error::LocalAddr)?;
    let mut paths = vec!["/".to_owned(), conf.health_path.clone()];
    if conf.enable_metrics {
        paths.push(conf.metrics_path.clone());
    }
    paths.push(admin::PAGE.to_owned());
    paths.push(admin::STATE.to_owned());
    paths.push(admin::REGISTRATION.to_owned());
    let listing = format!(
        "[{}]\n",
        paths
            .iter()
            .map(|r| format!("{r:?}"))
            .collect::<Vec<_>>()
            .join(",")
    );
    let routes = Arc::new(Routes {
        server,
        probe,
        health_path: conf.health_path.clone(),
        health_response: conf.health_response.clone(),
        metrics_path: conf.enable_metrics.then(|| conf.metrics_path.clone()),
        listing,
        admin,
    });
    tracing::info!(target: "zrpc::devserver", "dev server listening on {local}");
    Ok((local, serve(listener, routes, shutdown)))
}

/// The accept loop: each connection on its own task until `shutdown`, then a graceful end of
/// every connection (the one request in progress is answered) before this returns.
async fn serve(
    listener: TcpListener,
    routes: Arc<Routes>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let (stop_tx, stop_rx) = watch::channel(());
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut shutdown = std::pin::pin!(shutdown);
    // The admin view's drop windows read from these readings: the first one before the first
    // request can be answered, then one every period.
    routes.admin.keep_reading(std::time::Instant::now());
    let mut readings = tokio::time::interval_at(
        tokio::time::Instant::now() + state::READING_EVERY,
        state::READING_EVERY,
    );
    readings.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let stream = tokio::select! {
            () = &mut shutdown => break,
            _ = readings.tick() => {
                routes.admin.keep_reading(std::time::Instant::now());
                continue;
            }
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of descriptors or the like: wait rather than spin.
                    tracing::warn!(target: "zrpc::devserver", "dev server accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            continue; // dropped: closed at once
        };
        let routes = Arc::clone(&routes);
        let mut stop = stop_rx.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let svc = hyper::service::service_fn(move |req| {
                let res = routes.answer(&req);
                async move { Ok::<_, Infallible>(res) }
            });
            let conn = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT)
                // the requests are a line and a few headers; hyper's default is ~400 KiB
                .max_buf_size(16 << 10)
                .serve_connection(TokioIo::new(stall::WriteStall::new(stream)), svc);
            let mut conn = std::pin::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => return,
                _ = stop.changed() => {}
            }
            conn.as_mut().graceful_shutdown();
            let _ = conn.await;
        });
    }
    drop(listener);
    drop(stop_tx);
    // Every connection task holds a slot: all of them back means all ended.
    let _ = slots.acquire_many(MAX_CONNECTIONS as u32).await;
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    use super::*;

    /// A DevServer on a free port; the sender moves its phase, the oneshot stops it.
    async fn start() -> (
        SocketAddr,
        watch::Sender<ServerState>,
        tokio::sync::oneshot::Sender<()>,
        tokio::task::JoinHandle<()>,
    ) {
        let (state, rx) = watch::channel(ServerState {
            phase: Phase::Starting,
            local_addr: None,
            dev_server_addr: None,
        });
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let conf = DevServerConf::new("127.0.0.1", 0);
        let admin = Admin::new(&crate::handle::HandleParts::new(), "");
        let (addr, fut) = bind(&conf, rx, admin, "zrpc-test".to_owned(), async move {
            let _ = stopped.await;
        })
        .await
        .unwrap();
        (addr, state, stop, tokio::spawn(fut))
    }

    /// A client that pipelines requests and never reads the responses is closed once a
    /// response has waited `WRITE_STALL` for it: it does not hold one of the port's slots for
    /// good. Its writes fail then (the server stopped reading while it could not write).
    #[tokio::test]
    async fn a_client_that_never_reads_its_responses_is_closed() {
        let (addr, _state, stop, task) = start().await;
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(4096).unwrap();
        let mut s = socket.connect(addr).await.unwrap();
        let started = std::time::Instant::now();
        let writer = tokio::spawn(async move {
            let requests = "GET / HTTP/1.1\r\nHost: x\r\n\r\n".repeat(1000);
            loop {
                if s.write_all(requests.as_bytes()).await.is_err() {
                    return;
                }
            }
        });
        tokio::time::timeout(stall::WRITE_STALL * 3, writer)
            .await
            .expect("the server closed the connection of a client that reads nothing")
            .unwrap();
        let took = started.elapsed();
        assert!(took >= stall::WRITE_STALL, "{took:?}");
        let _ = stop.send(());
        task.await.unwrap();
    }

    /// With `Host` empty the port answers on IPv6 and IPv4 (go-zero's `:port`), so a probe to an
    /// IPv6-only pod's address is served.
    #[tokio::test]
    async fn an_empty_host_listens_on_ipv6_and_ipv4() {
        if std::net::TcpListener::bind("[::1]:0").is_err() {
            println!("skipped: this host has no IPv6 loopback");
            return;
        }
        let (_state, rx) = watch::channel(ServerState {
            phase: Phase::Serving,
            local_addr: None,
            dev_server_addr: None,
        });
        let conf = DevServerConf::new("", 0);
        let admin = Admin::new(&crate::handle::HandleParts::new(), "");
        let (addr, fut) = bind(
            &conf,
            rx,
            admin,
            "zrpc-test".to_owned(),
            std::future::pending(),
        )
        .await
        .unwrap();
        let task = tokio::spawn(fut);
        for host in ["[::1]", "127.0.0.1"] {
            let to: SocketAddr = format!("{host}:{}", addr.port()).parse().unwrap();
            let r = exchange(to, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await;
            assert!(r.starts_with("HTTP/1.1 200 OK"), "{host}: {r}");
        }
        task.abort();
    }

    /// Sends `request` raw and reads until the server closes the connection.
    async fn exchange(addr: SocketAddr, request: &str) -> String {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(request.as_bytes()).await.unwrap();
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).await.unwrap();
        String::from_utf8_lossy(&raw).into_owned()
    }

    /// A kept-alive connection to `addr` that has had one `/healthz` answer, which began with
    /// `status`; a buffer to read on.
    async fn answered_kept_alive(addr: SocketAddr, status: &[u8]) -> (TcpStream, [u8; 512]) {
        answered_kept_alive_on(TcpStream::connect(addr).await.unwrap(), status).await
    }

    /// `s` after one kept-alive `/healthz` request and its answer, which began with `status`.
    async fn answered_kept_alive_on(mut s: TcpStream, status: &[u8]) -> (TcpStream, [u8; 512]) {
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut buf = [0u8; 512];
        let n = s.read(&mut buf).await.unwrap();
        assert!(
            buf[..n].starts_with(status),
            "{:?}",
            String::from_utf8_lossy(&buf[..n])
        );
        (s, buf)
    }

    fn get(path: &str) -> String {
        format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    }

    #[tokio::test]
    async fn answers_its_routes_and_refuses_other_paths_and_methods() {
        let (addr, state, _stop, _task) = start().await;
        let r = exchange(addr, &get("/healthz")).await;
        assert!(r.starts_with("HTTP/1.1 503"), "{r}");
        assert!(r.contains("zrpc-test is not ready"), "{r}");
        state.send_modify(|s| s.phase = Phase::Serving);
        let r = exchange(addr, &get("/healthz")).await;
        assert!(r.starts_with("HTTP/1.1 200") && r.ends_with("OK"), "{r}");
        let r = exchange(addr, &get("/metrics")).await;
        assert!(r.starts_with("HTTP/1.1 200"), "{r}");
        assert!(r.contains("text/plain; version=0.0.4"), "{r}");
        let r = exchange(addr, &get("/")).await;
        assert!(
            r.ends_with(
                "[\"/\",\"/healthz\",\"/metrics\",\"/admin\",\"/admin/state\",\"/admin/registration\"]\n"
            ),
            "{r}"
        );
        let r = exchange(addr, &get("/nope")).await;
        assert!(r.starts_with("HTTP/1.1 404"), "{r}");
        let post =
            "POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
        let r = exchange(addr, post).await;
        assert!(r.starts_with("HTTP/1.1 405"), "{r}");
        assert!(r.to_ascii_lowercase().contains("allow: get, head"), "{r}");
        let head = "HEAD /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
        let r = exchange(addr, head).await;
        assert!(
            r.starts_with("HTTP/1.1 200") && r.ends_with("\r\n\r\n"),
            "{r}"
        );
    }

    /// A DevServer with `AdminToken: token` over `parts`; the oneshot stops it.
    async fn start_admin(
        parts: &crate::handle::HandleParts,
        token: &str,
    ) -> (SocketAddr, tokio::sync::oneshot::Sender<()>) {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let conf = DevServerConf::new("127.0.0.1", 0);
        let (addr, fut) = bind(
            &conf,
            parts.state.subscribe(),
            Admin::new(parts, token),
            "zrpc-test".to_owned(),
            async move {
                let _ = stopped.await;
            },
        )
        .await
        .unwrap();
        tokio::spawn(fut);
        (addr, stop)
    }

    fn post(path: &str, token: Option<&str>) -> String {
        let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
        format!(
            "POST {path} HTTP/1.1\r\nHost: x\r\n{auth}Content-Length: 0\r\nConnection: close\r\n\r\n"
        )
    }

    /// Pausing and resuming the registration takes the token; every refused write is a clear
    /// 4xx that changes nothing.
    #[tokio::test]
    async fn registration_writes_take_the_admin_token_and_bad_ones_change_nothing() {
        let parts = crate::handle::HandleParts::new();
        let handle = parts.handle();
        let (addr, _stop) = start_admin(&parts, "s3cret").await;
        let pause = "/admin/registration/pause";
        let basic = "POST /admin/registration/pause HTTP/1.1\r\nHost: x\r\n\
                     Authorization: Basic czNjcmV0\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
        let cases = [
            (
                post(pause, None),
                "401 Unauthorized",
                "Authorization: Bearer",
            ),
            (
                post(pause, Some("guess")),
                "401 Unauthorized",
                "Authorization: Bearer",
            ),
            (basic.to_owned(), "401 Unauthorized", "Bearer"),
            (
                post("/admin/registration/explode", Some("s3cret")),
                "404 Not Found",
                "pause or resume",
            ),
            (get(pause), "405 Method Not Allowed", "allowed: POST"),
            // not a route, whatever the method and the token
            (
                get("/admin/registration/explode"),
                "404 Not Found",
                "pause or resume",
            ),
            (
                post("/admin/registration/explode", None),
                "404 Not Found",
                "pause or resume",
            ),
            (
                post("/admin/registration", Some("s3cret")),
                "405 Method Not Allowed",
                "allowed: GET",
            ),
        ];
        for (request, status, says) in cases {
            let r = exchange(addr, &request).await;
            assert!(
                r.starts_with(&format!("HTTP/1.1 {status}")),
                "{request}: {r}"
            );
            assert!(r.contains(says), "{request}: {r}");
            assert!(!handle.registration_paused(), "{request} changed nothing");
        }
        let r = exchange(addr, &post(pause, Some("s3cret"))).await;
        assert!(r.starts_with("HTTP/1.1 200 OK"), "{r}");
        assert!(r.contains("\"paused\":true"), "{r}");
        assert!(handle.registration_paused());
        let r = exchange(addr, &get("/admin/registration")).await;
        assert!(r.contains("\"paused\":true"), "{r}");
        let r = exchange(addr, &post("/admin/registration/resume", Some("s3cret"))).await;
        assert!(r.contains("\"paused\":false"), "{r}");
        assert!(!handle.registration_paused());
        // The scheme is case-insensitive (RFC 9110), spaces after it are allowed.
        for auth in ["bearer s3cret", "BEARER  s3cret"] {
            let r = exchange(
                addr,
                &format!(
                    "POST {pause} HTTP/1.1\r\nHost: x\r\nAuthorization: {auth}\r\n\
                     Content-Length: 0\r\nConnection: close\r\n\r\n"
                ),
            )
            .await;
            assert!(r.starts_with("HTTP/1.1 200 OK"), "{auth}: {r}");
        }
    }

    /// Without `AdminToken` the writes are off: a user who upgrades exposes no new write.
    #[tokio::test]
    async fn without_an_admin_token_registration_writes_are_forbidden() {
        let parts = crate::handle::HandleParts::new();
        let (addr, _stop) = start_admin(&parts, "").await;
        let r = exchange(addr, &post("/admin/registration/pause", Some(""))).await;
        assert!(r.starts_with("HTTP/1.1 403 Forbidden"), "{r}");
        assert!(r.contains("DevServer.AdminToken"), "{r}");
        assert!(!parts.handle().registration_paused());
        let r = exchange(addr, &get("/admin/registration")).await;
        assert!(
            r.starts_with("HTTP/1.1 200 OK") && r.contains("\"paused\":false"),
            "{r}"
        );
    }

    /// A server's view over real stages: a limit, a hot shedder, a breaker that failed.
    fn view_of(conf: &crate::conf::RpcServerConf) -> ServerView {
        use zrpc_core::breaker::{BreakerConfig, BreakerRegistry};
        let limit = crate::stage::limit::gauges::limit_stage(conf, &[]);
        let cpu = Arc::new(zrpc_core::cpu::FixedCpu::new(950));
        let shedder = crate::stage::shedding::gauges::shedder(conf, Some(cpu));
        let breakers = Arc::new(BreakerRegistry::new(BreakerConfig::default()));
        let now = std::time::Instant::now();
        for _ in 0..50 {
            breakers.get("/v.S/Fails").mark_failure(now);
        }
        ServerView::new(
            conf,
            "127.0.0.1:8080".parse().unwrap(),
            limit.shared(),
            shedder,
            Some(breakers),
            Arc::default(),
        )
    }

    /// `GET /admin/state` shows the stages, the registration, the build and the config
    /// without its secrets; with `AdminToken` set it needs the token, and every refused
    /// request is a clear 4xx that changes nothing.
    #[tokio::test]
    async fn the_state_view_shows_the_stages_and_takes_the_token_when_set() {
        let conf = crate::conf::RpcServerConf::new("view.rpc", "127.0.0.1:8080")
            .with_cpu_threshold(900)
            .with_concurrency_limit(crate::conf::ConcurrencyLimitConf::default())
            .with_dev_server(DevServerConf {
                admin_token: "s3cret".to_owned(),
                ..DevServerConf::default()
            });
        let parts = crate::handle::HandleParts::new();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (addr, fut) = bind(
            &DevServerConf::new("127.0.0.1", 0),
            parts.state.subscribe(),
            Admin::new(&parts, "s3cret").with_view(view_of(&conf)),
            "zrpc-test".to_owned(),
            async move {
                let _ = stopped.await;
            },
        )
        .await
        .unwrap();
        tokio::spawn(fut);
        let get_with = |token: Option<&str>| {
            let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
            format!("GET /admin/state HTTP/1.1\r\nHost: x\r\n{auth}Connection: close\r\n\r\n")
        };
        let cases = [
            (
                get_with(None),
                "401 Unauthorized",
                "Bearer <DevServer.AdminToken>",
            ),
            (
                get_with(Some("guess")),
                "401 Unauthorized",
                "Bearer <DevServer.AdminToken>",
            ),
            (
                post("/admin/state", Some("s3cret")),
                "405 Method Not Allowed",
                "allowed: GET, HEAD",
            ),
            (get("/admin/state/more"), "404 Not Found", ""),
        ];
        for (request, status, says) in cases {
            let r = exchange(addr, &request).await;
            assert!(
                r.starts_with(&format!("HTTP/1.1 {status}")),
                "{request}: {r}"
            );
            assert!(r.contains(says), "{request}: {r}");
            assert!(!r.contains("\"limit\""), "{request} showed the state: {r}");
            assert!(
                !parts.handle().registration_paused(),
                "{request} changed nothing"
            );
        }
        let r = exchange(addr, &get_with(Some("s3cret"))).await;
        assert!(r.starts_with("HTTP/1.1 200 OK"), "{r}");
        assert!(r.contains("application/json"), "{r}");
        let body = &r[r.find("\r\n\r\n").unwrap() + 4..];
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["phase"], "starting");
        assert_eq!(v["registration"]["paused"], false);
        assert!(v["build"]["version"].is_string());
        assert!(
            v["build"]["features"]
                .as_array()
                .unwrap()
                .contains(&"devserver".into())
        );
        assert!(v["clients"].is_array());
        let server = &v["server"];
        assert_eq!(server["name"], "view.rpc");
        assert_eq!(server["connections"]["open"], 0);
        assert_eq!(server["connections"]["peers"], serde_json::json!([]));
        // the limit measuring its minimum round-trip time at its lowest value
        assert_eq!(server["limit"][0]["method"], "*");
        assert_eq!(server["limit"][0]["limit"], 3);
        assert_eq!(server["limit"][0]["measuring"], true);
        assert_eq!(server["shedder"]["cpu_millicpu"], 950);
        assert_eq!(server["shedder"]["threshold_millicpu"], 900);
        assert_eq!(server["shedder"]["hot"], true);
        let b = &server["breakers"][0];
        assert_eq!(
            (b["method"].as_str(), b["state"].as_str()),
            (Some("/v.S/Fails"), Some("open"))
        );
        assert_eq!(
            (b["failures"].as_u64(), b["total"].as_u64()),
            (Some(50), Some(50))
        );
        assert!(server["drops"]["total"].is_object());
        // the DevServer's first reading was taken as it started: the windows cover since then
        let started = &server["drops"]["last_10m"];
        assert!(
            started["seconds"].as_u64().is_some_and(|s| s < 60) && started["by_reason"].is_object(),
            "{server}"
        );
        // the config, its secret redacted
        assert_eq!(server["config"]["Name"], "view.rpc");
        assert_eq!(server["config"]["CpuThreshold"], 900);
        assert_eq!(server["config"]["DevServer"]["AdminToken"], "<redacted>");
        assert!(!body.contains("s3cret"), "{body}");
        drop(stop);
    }

    /// The admin page: HTML with its own script, no external asset, a strict policy.
    #[tokio::test]
    async fn the_admin_page_is_self_contained() {
        let (addr, _state, _stop, _task) = start().await;
        let r = exchange(addr, &get("/admin")).await;
        assert!(r.starts_with("HTTP/1.1 200 OK"), "{r}");
        assert!(r.contains("text/html; charset=utf-8"), "{r}");
        assert!(
            r.contains("content-security-policy: default-src 'none'"),
            "{r}"
        );
        assert!(r.contains("fetch(\"/admin/state\""), "{r}");
        // nothing loaded from elsewhere
        for external in ["http://", "https://", "src=", "<link"] {
            assert!(!r.contains(external), "{external} in the page");
        }
        let post =
            "POST /admin HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
        let r = exchange(addr, post).await;
        assert!(r.starts_with("HTTP/1.1 405"), "{r}");
    }

    /// Without `AdminToken` the state view is open to whoever reaches the port, as `/metrics`.
    #[tokio::test]
    async fn without_an_admin_token_the_state_view_is_open() {
        let parts = crate::handle::HandleParts::new();
        let (addr, _stop) = start_admin(&parts, "").await;
        let r = exchange(addr, &get("/admin/state")).await;
        assert!(r.starts_with("HTTP/1.1 200 OK"), "{r}");
        assert!(r.contains("\"registration\""), "{r}");
    }

    // Paused: the runtime moves the clock on to the server's timer while nothing else runs.
    #[tokio::test(start_paused = true)]
    async fn a_client_slow_to_send_its_headers_is_closed() {
        let (addr, _state, _stop, _task) = start().await;
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
            .await
            .unwrap();
        let started = tokio::time::Instant::now();
        let mut raw = Vec::new();
        let read = tokio::time::timeout(
            HEADER_READ_TIMEOUT + Duration::from_secs(5),
            s.read_to_end(&mut raw),
        )
        .await;
        assert!(read.is_ok(), "still open after {:?}", started.elapsed());
        assert!(started.elapsed() >= HEADER_READ_TIMEOUT - Duration::from_millis(100));
    }

    #[tokio::test]
    async fn stops_once_its_open_connections_end() {
        let (addr, _state, stop, task) = start().await;
        // An idle keep-alive connection, after one answered request.
        let (mut s, mut buf) = answered_kept_alive(addr, b"HTTP/1.1 503").await;
        stop.send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(2), task)
            .await
            .expect("the idle connection held the stop")
            .unwrap();
        // The connection was closed, and nothing accepts any more.
        assert_eq!(s.read(&mut buf).await.unwrap(), 0);
        assert!(TcpStream::connect(addr).await.is_err());
    }

    #[tokio::test]
    async fn connections_over_the_cap_are_closed_at_once() {
        let (addr, state, _stop, _task) = start().await;
        state.send_modify(|s| s.phase = Phase::Serving);
        let mut held = Vec::new();
        for _ in 0..MAX_CONNECTIONS {
            held.push(TcpStream::connect(addr).await.unwrap());
        }
        // Served in order: once the last one held is answered, every slot is taken.
        let last = held.pop().unwrap();
        let (last, mut buf) = answered_kept_alive_on(last, b"HTTP/1.1 200").await;
        held.push(last);
        let mut extra = TcpStream::connect(addr).await.unwrap();
        let closed = tokio::time::timeout(Duration::from_secs(2), extra.read(&mut buf)).await;
        assert!(matches!(closed, Ok(Ok(0)) | Ok(Err(_))), "{closed:?}");
        // A slot freed is a connection served again.
        held.clear();
        tokio::time::sleep(Duration::from_millis(100)).await;
        let r = exchange(addr, &get("/healthz")).await;
        assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_connection_after_a_request_is_closed() {
        let (addr, _state, _stop, _task) = start().await;
        let (mut s, mut buf) = answered_kept_alive(addr, b"HTTP/1.1 503").await;
        // No second request: the connection must not hold its slot for ever.
        let started = tokio::time::Instant::now();
        let end = tokio::time::timeout(
            HEADER_READ_TIMEOUT + Duration::from_secs(5),
            s.read(&mut buf),
        )
        .await;
        assert!(
            matches!(end, Ok(Ok(0)) | Ok(Err(_))),
            "{end:?} after {:?}",
            started.elapsed()
        );
    }
}
