//! `zrpc-bench many-serve`: one hand-written service, `bench.Many`, with N unary methods
//! `/bench.Many/M<i>` (each answers an empty message) and `/bench.Many/Hold`, which answers
//! its response headers and then a body that never ends (an open stream). Served by bare tonic
//! or by zrpc's full default chain (`--conf`, a go-zero YAML). Prints `{"ready": addr}` once it
//! listens, then serves until killed.

use std::convert::Infallible;
use std::path::PathBuf;
use std::task::{Context as TaskContext, Poll};

use anyhow::{Context, Result};
use bytes::Bytes;
use http_body::Frame;
use tonic::body::Body;

/// The service's name.
pub(crate) const NAME: &str = "bench.Many";
/// The method that holds its call open.
pub(crate) const HOLD: &str = "/bench.Many/Hold";
/// SETTINGS_MAX_CONCURRENT_STREAMS of both servers (zrpc's default).
pub(crate) const MAX_STREAMS: u32 = 1000;

/// The `many-serve` arguments.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ManyServeArgs {
    /// `tonic` (bare tonic server) or `zrpc` (zrpc server from `--conf`).
    #[arg(long)]
    kind: String,
    /// Methods `M0` .. `M<N-1>`.
    #[arg(long)]
    methods: usize,
    /// Listen address for `tonic`.
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: String,
    /// The zrpc server config (go-zero YAML); its ListenOn is used.
    #[arg(long)]
    conf: Option<PathBuf>,
}

/// `bench.Many` with `methods` unary methods.
#[derive(Debug, Clone, Copy)]
struct Many {
    methods: usize,
}

impl tonic::server::NamedService for Many {
    const NAME: &'static str = NAME;
}

type BoxStream = futures_util::stream::BoxStream<'static, Result<Frame<Bytes>, Infallible>>;

/// A gRPC response: `application/grpc` headers and `frames` as its body.
fn grpc_response(frames: BoxStream) -> http::Response<Body> {
    let mut r = http::Response::new(Body::new(http_body_util::StreamBody::new(frames)));
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/grpc"),
    );
    r
}

impl tonic::codegen::Service<http::Request<Body>> for Many {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = futures_util::future::BoxFuture<'static, Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut TaskContext<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        let methods = self.methods;
        Box::pin(async move { Ok(answer(methods, req).await) })
    }
}

/// The answer to `req` of a service with `methods` methods. The request is read to its end
/// first, as a service decodes it: a stream answered before its request ended is reset by the
/// server, and h2 takes many such resets for an attack (GOAWAY `too_many_internal_resets`).
async fn answer(methods: usize, req: http::Request<Body>) -> http::Response<Body> {
    use futures_util::StreamExt;
    use http_body_util::BodyExt;
    let (parts, body) = req.into_parts();
    if body.collect().await.is_err() {
        return tonic::Status::cancelled("request body").into_http();
    }
    let path = parts.uri.path();
    let method = path
        .strip_prefix("/bench.Many/")
        .unwrap_or_default()
        .to_owned();
    let index = method
        .strip_prefix('M')
        .and_then(|i| i.parse::<usize>().ok());
    match index {
        Some(i) if i < methods => {
            // One empty message (no compression, length 0), then `grpc-status: 0`.
            let mut trailers = http::HeaderMap::new();
            trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
            let frames = [
                Ok(Frame::data(Bytes::from_static(&[0, 0, 0, 0, 0]))),
                Ok(Frame::trailers(trailers)),
            ];
            grpc_response(futures_util::stream::iter(frames).boxed())
        }
        _ if path == HOLD => grpc_response(futures_util::stream::pending().boxed()),
        _ => tonic::Status::unimplemented(format!("no method {path}")).into_http(),
    }
}

pub(crate) fn run(args: ManyServeArgs) -> Result<()> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(serve(args))
}

async fn serve(args: ManyServeArgs) -> Result<()> {
    let conf: Option<zrpc::RpcServerConf> = match &args.conf {
        Some(path) => Some(zrpc::conf::load(path)?),
        None => None,
    };
    let listen = conf
        .as_ref()
        .map_or(args.listen.clone(), |c| c.listen_on.clone());
    let listener = tokio::net::TcpListener::bind(&listen)
        .await
        .with_context(|| format!("cannot listen on {listen}"))?;
    println!(
        "{}",
        serde_json::json!({ "ready": listener.local_addr()?.to_string() })
    );
    let svc = Many {
        methods: args.methods,
    };
    match (args.kind.as_str(), conf) {
        ("zrpc", Some(conf)) => {
            let _telemetry = zrpc::telemetry::init(&conf)?;
            zrpc::server(conf)?
                .streaming_method(HOLD)
                .add_service(svc)
                .serve_with_listener(listener, zrpc::shutdown::signal())
                .await?;
        }
        ("tonic", None) => {
            tonic::transport::Server::builder()
                .max_concurrent_streams(MAX_STREAMS)
                .add_service(svc)
                .serve_with_incoming_shutdown(
                    tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
                    zrpc::shutdown::signal(),
                )
                .await?;
        }
        (kind, _) => anyhow::bail!(
            "many-serve: --kind {kind} with or without --conf: zrpc needs it, tonic takes none"
        ),
    }
    Ok(())
}
