//! Logging and OpenTelemetry set-up (go-zero `ServiceConf.SetUp`: logx + trace agent).
//!
//! [`init`] installs a global `tracing` subscriber and, when `Telemetry.Endpoint` is set and
//! `Telemetry.Disabled` is false, a span exporter for `Telemetry.Batcher` as go-zero has them
//! (`otlpgrpc`, `otlphttp`, `zipkin`, `file`: see [`tracer_provider`]) with go-zero's sampler
//! (`ParentBased(TraceIdRatioBased(Sampler))`), `service.name` and `OtlpHeaders`. Without an
//! endpoint no call gets a span (formatting its fields for no reader cost a JSON-logging
//! service about a quarter of each call's instructions); the caller's trace id still reaches
//! the log lines.
//! It does nothing when a global subscriber is already installed (by the application or a
//! test harness). OTLP export needs the `otel` cargo feature: without it a config with
//! `Telemetry.Endpoint` is refused at load, and spans only carry log lines.
//!
//! Log lines follow the `Log` block (go-zero `logx.SetUp`, `core/logx/logs.go`):
//! - `Encoding`: JSON lines (default) or plain text; never with ANSI colour codes, so files and
//!   log collectors get clean text. A line written inside a traced call carries the call's trace
//!   id under go-zero's key: a top-level `"trace"` in JSON, `trace=<id>` in a plain line (in the
//!   span context when a span has the id, else at the end of the line). The server's RPC span
//!   (target `zrpc::rpc`) exists only when spans are exported: without an exporter the log
//!   filter turns it off, and lines find the caller's trace id in its trace context, which the
//!   server keeps current while it polls the call.
//! - `Level`: `debug`, `info`, `error` (and `severe` = error); `RUST_LOG` overrides it. h2's
//!   own messages are kept to ERROR (zrpc summarises the connections it cuts). `RUST_LOG` takes
//!   `target=level` directives (`info,zrpc=debug`); the `env-filter` cargo feature adds the rest
//!   of tracing-subscriber's `EnvFilter` syntax (span and field filters, regexes).
//! - `Mode`: `console` writes to stdout; `file` appends to `Path/access.log` (errors to
//!   `Path/error.log`, as go-zero splits them); `volume` does the same under
//!   `Path/<ServiceName>/<hostname>` (`ServiceName` defaults to `Name`). The directory is
//!   created; the files are never rotated (see `Log.Rotation` in `docs/configuration.md`).

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[cfg(feature = "otel")]
mod export;
#[cfg(feature = "otel")]
mod file;
#[cfg(feature = "otel")]
mod zipkin;

#[cfg(feature = "otel")]
use opentelemetry::trace::TracerProvider as _;
#[cfg(feature = "otel")]
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::Layer;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::writer::{BoxMakeWriter, MakeWriterExt};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, MakeWriter};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;

use zrpc_core::grpc::trace_context::with_current;

use crate::conf::{LogConf, RpcServerConf, TelemetryConf};
use crate::error::Error;

/// go-zero's file names (`core/logx/vars.go`).
pub(crate) const ACCESS_LOG: &str = "access.log";
pub(crate) const ERROR_LOG: &str = "error.log";

/// Keeps the tracer provider alive; flushes spans at [`TelemetryGuard::shutdown`] or when
/// dropped.
#[derive(Debug, Default)]
pub struct TelemetryGuard {
    #[cfg(feature = "otel")]
    provider: Option<SdkTracerProvider>,
}

impl TelemetryGuard {
    /// Exports the spans still buffered and stops the exporter ([`Server::serve`](crate::Server::serve)
    /// does it when it returns). The exporter's connection runs on the Tokio runtime, so the
    /// flush waits on a blocking thread while the runtime's own threads keep driving it: dropping
    /// the guard instead blocks a runtime thread (on a current-thread runtime the flush then
    /// cannot progress and gives up after 5 s, losing the spans).
    pub async fn shutdown(self) {
        #[cfg(feature = "otel")]
        {
            let mut guard = self;
            if let Some(p) = guard.provider.take() {
                let done = tokio::task::spawn_blocking(move || p.shutdown()).await;
                if let Ok(Err(e)) = done {
                    tracing::warn!(target: "zrpc::telemetry", "tracer provider shutdown: {e}");
                }
            }
        }
    }
}

#[cfg(feature = "otel")]
impl Drop for TelemetryGuard {
    fn drop(&mut self) {
        let Some(p) = self.provider.take() else {
            return;
        };
        let shutdown = move || p.shutdown();
        // on a multi-thread runtime the other threads drive the exporter meanwhile
        let done = match tokio::runtime::Handle::try_current() {
            Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
                tokio::task::block_in_place(shutdown)
            }
            _ => shutdown(),
        };
        if let Err(e) = done {
            tracing::warn!(target: "zrpc::telemetry", "tracer provider shutdown: {e}");
        }
    }
}

/// The log filter of `conf`'s `Log.Level`. h2 stays at ERROR: it logs a WARN for every
/// connection it cuts, which an attacker could turn into a line per connection; zrpc logs its
/// own summary of cuts instead (at most one line per client address per 10 s).
fn level(conf: &RpcServerConf) -> &'static str {
    match conf.log.level.as_str() {
        "debug" => "debug,h2=error",
        "error" | "severe" => "error",
        _ => "info,h2=error",
    }
}

/// The log filter: `tracing-subscriber`'s `EnvFilter` with the `env-filter` feature (its full
/// syntax, at the cost of a regex engine), else its `Targets` (`target=level` directives).
#[cfg(feature = "env-filter")]
type Filter = tracing_subscriber::EnvFilter;
#[cfg(not(feature = "env-filter"))]
type Filter = tracing_subscriber::filter::Targets;

fn parse_filter(directives: &str) -> Result<Filter, String> {
    #[cfg(feature = "env-filter")]
    return Filter::try_new(directives).map_err(|e| e.to_string());
    #[cfg(not(feature = "env-filter"))]
    return directives.parse::<Filter>().map_err(|e| e.to_string());
}

/// `RUST_LOG` when set and valid, else the level of `Log.Level`. Logging is not set up yet, so
/// an invalid `RUST_LOG` is reported on stderr.
fn filter(conf: &RpcServerConf) -> Filter {
    let env = std::env::var("RUST_LOG").unwrap_or_default();
    if !env.trim().is_empty() {
        match parse_filter(&env) {
            Ok(f) => return f,
            Err(e) => eprintln!(
                "zrpc: RUST_LOG={env:?} is not a log filter this build reads ({e}); using \
                 Log.Level. Without the `env-filter` cargo feature of zrpc, RUST_LOG takes \
                 `target=level` directives only."
            ),
        }
    }
    let mut directives = level(conf).to_owned();
    if !exports_spans(conf) {
        // The call's span is for the exporter: with none, it would cost each call the
        // formatting of its fields for no line (log lines find the caller's trace id in its
        // context, `WithTrace`).
        directives.push_str(",zrpc::rpc=off");
    }
    parse_filter(&directives).unwrap_or_default()
}

/// The `Telemetry` block of `conf` when it exports spans (an `Endpoint`, not `Disabled`).
fn exporting(conf: &RpcServerConf) -> Option<&TelemetryConf> {
    conf.telemetry
        .as_ref()
        .filter(|t| !t.endpoint.is_empty() && !t.disabled)
}

/// Whether this build exports the spans of `conf`'s calls (OpenTelemetry).
fn exports_spans(conf: &RpcServerConf) -> bool {
    cfg!(feature = "otel") && exporting(conf).is_some()
}

/// The tracer provider of `conf`, exporting with its `Telemetry.Batcher` (`otlpgrpc`,
/// `otlphttp`, `zipkin` or `file`) to `Telemetry.Endpoint`; `None` when the endpoint is empty or
/// `Telemetry.Disabled`. Build it inside a Tokio runtime: the exporters send from it.
///
/// # Errors
///
/// [`Error::Telemetry`] when the exporter cannot be built (a `file` that cannot be opened, for
/// one) or `OtlpHeaders` is not valid metadata.
#[cfg(feature = "otel")]
pub fn tracer_provider(conf: &RpcServerConf) -> Result<Option<SdkTracerProvider>, Error> {
    let Some(t) = exporting(conf) else {
        return Ok(None);
    };
    export::provider(t, conf.telemetry_name()).map(Some)
}

/// The directory of the `file` / `volume` log files: `Path`, or `Path/<ServiceName>/<hostname>`
/// (go-zero `setupWithVolume`). An empty `Path` is the working directory, as in go-zero.
pub(crate) fn log_dir(conf: &RpcServerConf) -> PathBuf {
    let log = &conf.log;
    let base = PathBuf::from(if log.path.is_empty() { "." } else { &log.path });
    if log.mode != "volume" {
        return base;
    }
    let service = if log.service_name.is_empty() {
        &conf.name
    } else {
        &log.service_name
    };
    base.join(service).join(hostname())
}

/// The host name (go-zero `sysx.Hostname`), from the kernel or `$HOSTNAME`.
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok().filter(|h| !h.is_empty()))
        .unwrap_or_else(|| "localhost".to_owned())
}

fn open_append(path: &Path) -> Result<Arc<File>, Error> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map(Arc::new)
        .map_err(|e| Error::Telemetry(format!("Log: cannot open {}: {e}", path.display())))
}

/// Where log lines go: stdout, or go-zero's `access.log` / `error.log` in [`log_dir`].
fn log_writer(conf: &RpcServerConf) -> Result<BoxMakeWriter, Error> {
    if !conf.log.writes_files() {
        return Ok(BoxMakeWriter::new(std::io::stdout));
    }
    let dir = log_dir(conf);
    std::fs::create_dir_all(&dir).map_err(|e| {
        Error::Telemetry(format!(
            "Log.Path: cannot create the log directory {}: {e}",
            dir.display()
        ))
    })?;
    let access = open_append(&dir.join(ACCESS_LOG))?;
    let error = open_append(&dir.join(ERROR_LOG))?;
    Ok(BoxMakeWriter::new(
        error.with_max_level(Level::ERROR).or_else(access),
    ))
}

/// The formatting layer for `log` (`Encoding`), writing to `writer`, without colour codes.
fn fmt_layer<S, W>(log: &LogConf, writer: W) -> Box<dyn Layer<S> + Send + Sync>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    // No ANSI colour, ever: JSON has none, and plain lines go to files, pipes and collectors
    // where escape codes are noise (tracing-subscriber would colour unless NO_COLOR is set).
    let layer = tracing_subscriber::fmt::layer()
        .with_writer(writer)
        .with_ansi(false);
    if log.encoding == "plain" {
        layer
            .map_event_format(|format| WithTrace {
                format,
                json: false,
            })
            .boxed()
    } else {
        TraceIds
            .and_then(
                layer
                    .json()
                    .map_event_format(|format| WithTrace { format, json: true }),
            )
            .boxed()
    }
}

/// A span's `trace` field (a call's trace id), kept in its extensions by [`TraceIds`].
struct TraceId(String);

/// Keeps the `trace` field of each span that has one, for [`WithTrace`].
struct TraceIds;

/// Reads a `trace` field.
struct TraceField(Option<String>);

impl Visit for TraceField {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "trace" {
            self.0 = Some(value.to_owned());
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "trace" {
            self.0 = Some(format!("{value:?}"));
        }
    }
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for TraceIds {
    fn on_new_span(
        &self,
        attrs: &Attributes<'_>,
        id: &Id,
        ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        let mut field = TraceField(None);
        attrs.record(&mut field);
        if let (Some(trace), Some(span)) = (field.0, ctx.span(id)) {
            span.extensions_mut().replace(TraceId(trace));
        }
    }

    fn on_record(
        &self,
        id: &Id,
        values: &Record<'_>,
        ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        let mut field = TraceField(None);
        values.record(&mut field);
        if let (Some(trace), Some(span)) = (field.0, ctx.span(id)) {
            span.extensions_mut().replace(TraceId(trace));
        }
    }
}

/// tracing-subscriber's lines (`F`: its JSON or its plain format) with the call's trace id under
/// go-zero's key when the event is written inside a traced call: JSON gets a top-level `"trace"`
/// first, from the innermost span that has one ([`TraceIds`]) or else the caller's trace context
/// while the server polls the call; a plain line ends with ` trace=<id>` from that context when
/// no span gives the line its context (a span prints its own `trace` field).
struct WithTrace<F> {
    format: F,
    json: bool,
}

impl<S, N, F> FormatEvent<S, N> for WithTrace<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> std::fmt::Result {
        // the innermost span's id first
        let from_span = || {
            ctx.event_scope().and_then(|scope| {
                scope
                    .into_iter()
                    .find_map(|span| span.extensions().get::<TraceId>().map(|t| t.0.clone()))
            })
        };
        let current = || with_current(|cx| cx.map(|cx| cx.trace_id().to_owned()));
        let trace = match (self.json, ctx.event_scope().is_some()) {
            (true, _) => from_span().or_else(current),
            (false, false) => current(),
            (false, true) => None,
        };
        let Some(trace) = trace else {
            return self.format.format_event(ctx, writer, event);
        };
        let mut line = String::new();
        self.format
            .format_event(ctx, Writer::new(&mut line), event)?;
        // the id is hex (validated or generated): nothing to escape
        match (self.json, line.strip_prefix('{')) {
            (true, Some(rest)) => write!(writer, "{{\"trace\":\"{trace}\",{rest}"),
            (true, None) => writer.write_str(&line),
            (false, _) => writeln!(writer, "{} trace={trace}", line.trim_end_matches('\n')),
        }
    }
}

/// Installs logging and (if configured) OTLP export. See the module docs.
///
/// # Errors
///
/// [`Error::Telemetry`] when the OTLP exporter cannot be built or, in the `file` and `volume`
/// modes, when the log directory or files cannot be created.
pub fn init(conf: &RpcServerConf) -> Result<TelemetryGuard, Error> {
    let filter = filter(conf);
    let writer = log_writer(conf)?;
    #[cfg(not(feature = "otel"))]
    let guard = {
        let _ = tracing_subscriber::registry()
            .with(filter)
            .with(fmt_layer(&conf.log, writer))
            .try_init();
        TelemetryGuard::default()
    };
    #[cfg(feature = "otel")]
    let guard = init_otel(conf, filter, writer)?;
    // What the config's load had to say before there was a log to say it in.
    for warning in zrpc_core::conf::take_load_warnings() {
        tracing::warn!(target: "zrpc::conf", "{warning}");
    }
    Ok(guard)
}

/// [`init`] with the OTLP exporter of `conf`, if it has one.
#[cfg(feature = "otel")]
fn init_otel(
    conf: &RpcServerConf,
    filter: Filter,
    writer: BoxMakeWriter,
) -> Result<TelemetryGuard, Error> {
    let fmt = fmt_layer(&conf.log, writer);
    let Some(provider) = tracer_provider(conf)? else {
        let _ = tracing_subscriber::registry()
            .with(filter)
            .with(fmt)
            .try_init();
        return Ok(TelemetryGuard::default());
    };
    let tracer = provider.tracer("zrpc");
    opentelemetry::global::set_tracer_provider(provider.clone());
    let _ = tracing_subscriber::registry()
        .with(filter)
        .with(fmt)
        .with(
            // go-zero's spans carry the RPC's attributes only: not the code location, thread,
            // target and busy/idle times tracing-opentelemetry adds by default (work per span)
            tracing_opentelemetry::layer()
                .with_tracer(tracer)
                .with_location(false)
                .with_threads(false)
                .with_target(false)
                .with_tracked_inactivity(false),
        )
        .try_init();
    Ok(TelemetryGuard {
        provider: Some(provider),
    })
}

#[cfg(test)]
mod tests {
    #[cfg(feature = "otel")]
    use std::time::Duration;

    #[cfg(feature = "otel")]
    use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
        TraceService, TraceServiceServer,
    };
    #[cfg(feature = "otel")]
    use opentelemetry_proto::tonic::collector::trace::v1::{
        ExportTraceServiceRequest, ExportTraceServiceResponse,
    };
    #[cfg(feature = "otel")]
    use tokio::net::TcpListener;
    #[cfg(feature = "otel")]
    use tokio::sync::mpsc;
    #[cfg(feature = "otel")]
    use tonic_health::pb::HealthCheckRequest;
    #[cfg(feature = "otel")]
    use tonic_health::pb::health_client::HealthClient;

    use super::*;
    use crate::conf::TelemetryConf;
    #[cfg(feature = "otel")]
    use crate::{Server, ServerHandle};

    #[cfg(feature = "otel")]
    /// A fake OTLP collector.
    struct Collector(mpsc::UnboundedSender<ExportTraceServiceRequest>);

    #[cfg(feature = "otel")]
    #[tonic::async_trait]
    impl TraceService for Collector {
        async fn export(
            &self,
            req: tonic::Request<ExportTraceServiceRequest>,
        ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
            let _ = self.0.send(req.into_inner());
            Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
        }
    }

    #[cfg(feature = "otel")]
    async fn start_server(conf: RpcServerConf) -> (ServerHandle, tokio::task::JoinHandle<()>) {
        let server = Server::new(conf).unwrap();
        let handle = server.handle();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let task = tokio::spawn(async move {
            server
                .serve_with_listener(listener, std::future::pending())
                .await
                .unwrap();
        });
        handle.serving().await.unwrap();
        (handle, task)
    }

    /// A directory under the system temp dir, removed on drop.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(name: &str) -> Self {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos();
            let dir = std::env::temp_dir().join(format!(
                "zrpc-telemetry-{name}-{}-{nanos}",
                std::process::id()
            ));
            std::fs::create_dir_all(&dir).unwrap();
            TempDir(dir)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// Emits one line per level through `conf`'s logging, with a thread-local subscriber (the
    /// global one is never touched, so tests cannot race on it).
    fn log_lines_with(conf: &RpcServerConf, writer: BoxMakeWriter) {
        let subscriber = tracing_subscriber::registry()
            .with(parse_filter("info").unwrap())
            .with(fmt_layer(&conf.log, writer));
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!("call", method = "/greet.Greeter/SayHello");
            let _entered = span.enter();
            tracing::info!(target: "zrpc::server", peer = "127.0.0.1:1", "an info line");
            tracing::warn!(target: "zrpc::server", "a warn line");
            tracing::error!(target: "zrpc::server", code = 13, "an error line");
        });
    }

    fn file_conf(mode: &str, encoding: &str, dir: &Path) -> RpcServerConf {
        let mut conf = RpcServerConf::new("greet.rpc", "127.0.0.1:0");
        conf.log.mode = mode.into();
        conf.log.encoding = encoding.into();
        conf.log.path = dir.display().to_string();
        conf
    }

    fn assert_no_ansi(text: &str) {
        assert!(
            !text.contains('\x1b'),
            "ANSI escape in log output: {text:?}"
        );
    }

    #[test]
    fn file_mode_writes_go_zero_files_without_colour() {
        for encoding in ["plain", "json"] {
            let dir = TempDir::new(encoding);
            let conf = file_conf("file", encoding, &dir.0);
            log_lines_with(&conf, log_writer(&conf).unwrap());
            let access = std::fs::read_to_string(dir.0.join(ACCESS_LOG)).unwrap();
            let error = std::fs::read_to_string(dir.0.join(ERROR_LOG)).unwrap();
            assert_no_ansi(&access);
            assert_no_ansi(&error);
            assert!(access.contains("an info line"), "{access}");
            assert!(access.contains("a warn line"), "{access}");
            assert!(!access.contains("an error line"), "{access}");
            assert!(error.contains("an error line"), "{error}");
            assert_eq!(error.lines().count(), 1, "{error}");
            if encoding == "plain" {
                assert!(access.contains(" INFO "), "{access}");
                assert!(!access.trim_start().starts_with('{'), "{access}");
            } else {
                for line in access.lines().chain(error.lines()) {
                    assert!(line.starts_with('{') && line.ends_with('}'), "{line}");
                }
            }
        }
    }

    #[test]
    fn file_mode_appends() {
        let dir = TempDir::new("append");
        let conf = file_conf("file", "plain", &dir.0);
        log_lines_with(&conf, log_writer(&conf).unwrap());
        log_lines_with(&conf, log_writer(&conf).unwrap());
        let access = std::fs::read_to_string(dir.0.join(ACCESS_LOG)).unwrap();
        assert_eq!(access.matches("an info line").count(), 2, "{access}");
    }

    #[test]
    fn volume_mode_writes_under_service_name_and_host() {
        let dir = TempDir::new("volume");
        let mut conf = file_conf("volume", "plain", &dir.0);
        let expected = dir.0.join("greet.rpc").join(hostname());
        assert_eq!(log_dir(&conf), expected, "ServiceName defaults to Name");
        log_lines_with(&conf, log_writer(&conf).unwrap());
        let access = std::fs::read_to_string(expected.join(ACCESS_LOG)).unwrap();
        assert!(access.contains("an info line"), "{access}");
        assert_no_ansi(&access);
        conf.log.service_name = "greet".into();
        assert_eq!(log_dir(&conf), dir.0.join("greet").join(hostname()));
    }

    /// Without an exporter the call's span is off (its fields would be formatted for no
    /// reader), and a line written while the server polls a call still carries the caller's
    /// trace id, from the call's trace context: JSON's top-level key, plain's `trace=<id>`.
    #[test]
    fn without_an_exporter_lines_take_the_trace_id_from_the_calls_context() {
        const ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
        let mut headers = http::HeaderMap::new();
        headers.insert(
            "traceparent",
            http::HeaderValue::from_static(
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            ),
        );
        let context = zrpc_core::grpc::trace_context::TraceContext::extract(&headers).unwrap();
        for encoding in ["json", "plain"] {
            let buf = crate::layers::test_util::LogBuf::default();
            let mut conf = RpcServerConf::new("greet.rpc", "127.0.0.1:0");
            conf.log.encoding = encoding.into();
            assert!(!exports_spans(&conf));
            let sink = buf.clone();
            let subscriber = tracing_subscriber::registry()
                .with(parse_filter(&format!("{},zrpc::rpc=off", level(&conf))).unwrap())
                .with(fmt_layer(
                    &conf.log,
                    BoxMakeWriter::new(move || sink.clone()),
                ));
            tracing::subscriber::with_default(subscriber, || {
                let span = tracing::info_span!(target: "zrpc::rpc", "rpc");
                assert!(span.is_disabled(), "the call's span is off");
                context.in_scope(|| tracing::info!("in the handler"));
                tracing::info!("outside any call");
            });
            let text = buf.contents();
            let lines: Vec<&str> = text.lines().collect();
            assert_eq!(lines.len(), 2, "{text}");
            if encoding == "json" {
                let first: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
                let second: serde_json::Value = serde_json::from_str(lines[1]).unwrap();
                assert_eq!(first["trace"], ID, "{text}");
                assert!(second.get("trace").is_none(), "{text}");
            } else {
                assert!(
                    lines[0].ends_with(&format!("in the handler trace={ID}")),
                    "{text}"
                );
                assert!(!lines[1].contains("trace="), "{text}");
            }
        }
    }

    #[test]
    fn the_calls_span_is_off_unless_spans_are_exported() {
        let mut conf = RpcServerConf::new("greet.rpc", "127.0.0.1:0");
        assert!(!exports_spans(&conf));
        conf.telemetry = Some(TelemetryConf {
            endpoint: "127.0.0.1:4317".into(),
            ..TelemetryConf::default()
        });
        assert_eq!(exports_spans(&conf), cfg!(feature = "otel"));
        conf.telemetry.as_mut().unwrap().disabled = true;
        assert!(!exports_spans(&conf));
    }

    #[test]
    fn json_lines_of_a_traced_call_carry_its_trace_id_under_go_zeros_key() {
        const ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
        let buf = crate::layers::test_util::LogBuf::default();
        let conf = RpcServerConf::new("greet.rpc", "127.0.0.1:0");
        let sink = buf.clone();
        let subscriber = tracing_subscriber::registry()
            .with(parse_filter("info").unwrap())
            .with(fmt_layer(
                &conf.log,
                BoxMakeWriter::new(move || sink.clone()),
            ));
        tracing::subscriber::with_default(subscriber, || {
            let rpc = tracing::info_span!("rpc", trace = ID);
            let _rpc = rpc.enter();
            tracing::info!("in the handler");
            // a client call made by the handler: its span has no id of its own
            let client = tracing::info_span!("rpc.client", trace = tracing::field::Empty);
            let _client = client.enter();
            tracing::error!("a failed call");
            drop(_client);
            drop(_rpc);
            // a trace started later (a root span whose id is known after it opened)
            let root = tracing::info_span!("rpc.client", trace = tracing::field::Empty);
            root.record("trace", "0af7651916cd43dd8448eb211c80319c");
            root.in_scope(|| tracing::info!("a call of its own"));
            tracing::info!("outside any call");
        });
        let text = buf.contents();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 4, "{text}");
        assert!(
            text.lines()
                .next()
                .unwrap()
                .starts_with(&format!("{{\"trace\":\"{ID}\","))
        );
        assert_eq!(lines[0]["trace"], ID, "{text}");
        assert_eq!(lines[1]["trace"], ID, "{text}");
        assert_eq!(
            lines[2]["trace"], "0af7651916cd43dd8448eb211c80319c",
            "{text}"
        );
        assert!(lines[3].get("trace").is_none(), "{text}");
    }

    #[test]
    fn plain_console_output_has_no_colour() {
        let buf = crate::layers::test_util::LogBuf::default();
        let mut conf = RpcServerConf::new("greet.rpc", "127.0.0.1:0");
        conf.log.encoding = "plain".into();
        let sink = buf.clone();
        log_lines_with(&conf, BoxMakeWriter::new(move || sink.clone()));
        let text = buf.contents();
        assert!(text.contains("an error line"), "{text}");
        assert_no_ansi(&text);
    }

    #[test]
    fn an_unwritable_log_path_is_a_clear_error() {
        let dir = TempDir::new("blocked");
        let file = dir.0.join("not-a-dir");
        std::fs::write(&file, b"").unwrap();
        let conf = file_conf("file", "json", &file);
        let e = log_writer(&conf).unwrap_err().to_string();
        assert!(e.contains("Log.Path") && e.contains("not-a-dir"), "{e}");
    }

    #[test]
    fn otlp_headers_become_metadata() {
        let mut t = TelemetryConf::default();
        t.otlp_headers.insert(
            "uptrace-dsn".into(),
            "http://token@localhost:14317/2".into(),
        );
        let md = t.metadata().unwrap();
        assert_eq!(
            md.get("uptrace-dsn").unwrap().to_str().unwrap(),
            "http://token@localhost:14317/2"
        );
        t.otlp_headers.insert("bad name".into(), "x".into());
        let e = t.metadata().unwrap_err();
        assert_eq!(e.path(), Some("Telemetry.OtlpHeaders.bad name"));
    }

    #[cfg(feature = "otel")]
    #[test]
    fn no_endpoint_no_exporter() {
        let conf = RpcServerConf::new("t", "127.0.0.1:0");
        assert!(tracer_provider(&conf).unwrap().is_none());
    }

    /// A collector on this test's runtime: its address and what it receives.
    #[cfg(feature = "otel")]
    async fn collector() -> (
        std::net::SocketAddr,
        mpsc::UnboundedReceiver<ExportTraceServiceRequest>,
    ) {
        let (tx, rx) = mpsc::unbounded_channel();
        let collector = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let collector_addr = collector.local_addr().unwrap();
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(TraceServiceServer::new(Collector(tx)))
                .serve_with_incoming(tonic::transport::server::TcpIncoming::from(collector)),
        );
        (collector_addr, rx)
    }

    /// On a current-thread runtime (this test's) the guard's shutdown still delivers the last
    /// spans: the flush waits off the runtime's thread, which keeps driving the exporter's
    /// connection (a blocking flush there would stall until its 5 s timeout and lose them).
    #[cfg(feature = "otel")]
    #[tokio::test]
    async fn the_guards_shutdown_delivers_the_last_spans_on_a_current_thread_runtime() {
        let (addr, mut rx) = collector().await;
        let mut conf = RpcServerConf::new("flush.rpc", "127.0.0.1:0");
        conf.telemetry = Some(TelemetryConf {
            endpoint: addr.to_string(),
            ..TelemetryConf::default()
        });
        let provider = tracer_provider(&conf).unwrap().unwrap();
        {
            use opentelemetry::trace::{Span as _, Tracer as _};
            provider.tracer("test").start("the last span").end();
        }
        let guard = TelemetryGuard {
            provider: Some(provider),
        };
        let started = std::time::Instant::now();
        guard.shutdown().await;
        let export = rx
            .try_recv()
            .expect("the span was exported before shutdown returned");
        let names: Vec<&str> = export
            .resource_spans
            .iter()
            .flat_map(|r| &r.scope_spans)
            .flat_map(|s| &s.spans)
            .map(|s| s.name.as_str())
            .collect();
        assert_eq!(names, ["the last span"]);
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
    }

    #[cfg(feature = "otel")]
    #[tokio::test]
    async fn spans_reach_an_otlp_collector_with_the_callers_trace() {
        let (collector_addr, mut rx) = collector().await;

        let telemetry = TelemetryConf {
            endpoint: collector_addr.to_string(),
            ..TelemetryConf::default()
        };
        let mut conf = RpcServerConf::new("otlp.rpc", "127.0.0.1:0").with_shutdown(
            crate::conf::ShutdownConf::new(Duration::ZERO, Duration::from_secs(2)),
        );
        conf.telemetry = Some(telemetry);
        let provider = tracer_provider(&conf).unwrap().unwrap();
        // Thread-local subscriber: this test's runtime is single-threaded.
        let _guard = tracing::subscriber::set_default(
            tracing_subscriber::registry()
                .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("zrpc"))),
        );

        let (handle, task) = start_server(conf).await;
        let addr = handle.local_addr().unwrap();
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect()
            .await
            .unwrap();
        let mut req = tonic::Request::new(HealthCheckRequest {
            service: String::new(),
        });
        req.metadata_mut().insert(
            "traceparent",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
                .parse()
                .unwrap(),
        );
        HealthClient::new(channel).check(req).await.unwrap();
        handle.shutdown();
        task.await.unwrap();

        let flush = tokio::task::spawn_blocking(move || provider.force_flush());
        let export = tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .expect("the collector received spans")
            .unwrap();
        let _ = flush.await;
        let span = export
            .resource_spans
            .iter()
            .flat_map(|r| &r.scope_spans)
            .flat_map(|s| &s.spans)
            .find(|s| s.name == "grpc.health.v1.Health/Check")
            .expect("the rpc span");
        assert_eq!(
            span.trace_id,
            [
                0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e,
                0x47, 0x36
            ]
        );
        assert_eq!(
            span.parent_span_id,
            [0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7]
        );
        assert_eq!(span.kind, 2, "SPAN_KIND_SERVER");
        let attr = |k: &str| {
            span.attributes
                .iter()
                .find(|a| a.key == k)
                .and_then(|a| a.value.clone())
        };
        assert!(
            attr("rpc.grpc.status_code").is_some(),
            "{:?}",
            span.attributes
        );
        assert!(attr("rpc.service").is_some(), "{:?}", span.attributes);
    }
}
