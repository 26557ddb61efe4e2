//! The DevServer (go-zero `internal/devserver`): an HTTP port for operators, served with axum.
//!
//! Routes: `/` (JSON array of the routes), `HealthPath` (default `/healthz`: 200 with
//! `HealthResponse` while the gRPC server serves; 503 before and during shutdown, which
//! go-zero never does) and `MetricsPath` (default `/metrics`: Prometheus text) when
//! `EnableMetrics`.

use std::net::SocketAddr;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::conf::DevServerConf;
use crate::error::Error;
use crate::handle::{Phase, State as ServerState};

#[derive(Clone)]
struct DevState {
    server: watch::Receiver<ServerState>,
    probe: String,
    health_response: String,
}

async fn healthz(State(st): State<DevState>) -> impl IntoResponse {
    let phase = st.server.borrow().phase;
    if phase == Phase::Serving {
        (StatusCode::OK, st.health_response.clone())
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("Service Unavailable\n{} is not ready\n", st.probe),
        )
    }
}

async fn metrics() -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        crate::metrics::render(),
    )
}

/// Binds the DevServer; returns its address and the serving future.
pub(crate) async fn bind(
    conf: &DevServerConf,
    server: watch::Receiver<ServerState>,
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
    let listener = TcpListener::bind(&addr)
        .await
        .map_err(|source| Error::Bind {
            addr: addr.clone(),
            source,
        })?;
    let local = listener.local_addr().map_err(Error::LocalAddr)?;
    let mut routes = vec!["/".to_owned(), conf.health_path.clone()];
    let state = DevState {
        server,
        probe,
        health_response: conf.health_response.clone(),
    };
    let mut router = Router::new().route(&conf.health_path, get(healthz));
    if conf.enable_metrics {
        router = router.route(&conf.metrics_path, get(metrics));
        routes.push(conf.metrics_path.clone());
    }
    let listing = format!(
        "[{}]\n",
        routes
            .iter()
            .map(|r| format!("{r:?}"))
            .collect::<Vec<_>>()
            .join(",")
    );
    router = router.route(
        "/",
        get(move || async move { ([(header::CONTENT_TYPE, "application/json")], listing) }),
    );
    let app = router.with_state(state);
    let fut = async move {
        if let Err(e) = axum::serve(listener, app)
            .with_graceful_shutdown(shutdown)
            .await
        {
            tracing::error!(target: "zrpc::devserver", "dev server on {local} failed: {e}");
        }
    };
    tracing::info!(target: "zrpc::devserver", "dev server listening on {local}");
    Ok((local, fut))
}
