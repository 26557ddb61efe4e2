//! `grpc.testing.TestService` on zrpc's server: every server feature of the interop spec.
//!
//! - EmptyCall, UnaryCall, StreamingInputCall, StreamingOutputCall, FullDuplexCall and
//!   HalfDuplexCall as the spec's "Server" section describes them; CacheableUnaryCall answers
//!   with the current time and a `cache-control` header (nothing here serves GET, so no proxy
//!   caches it); UnimplementedCall is `Unimplemented`, as in every interop server.
//! - Echo status: a request with a non-zero `response_status` ends the call with that code and
//!   message.
//! - Echo metadata: `x-grpc-test-echo-initial` comes back in the response headers,
//!   `x-grpc-test-echo-trailing-bin` in the trailers of a successful call (set with
//!   [`zrpc::Trailers`], as a go-zero handler calls `grpc.SetTrailer`).
//! - `interval_us`: the server waits that long before each response.
//! - CompressedRequest and CompressedResponse (`expect_compressed`, `response_compressed`,
//!   `ResponseParameters.compressed`): see [`conf`].
//!
//! Payloads are zeros of type `COMPRESSABLE`; another type, a negative size or one over 8 MiB is
//! `InvalidArgument`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use zrpc::Trailers;
use zrpc::tonic::metadata::{MetadataMap, MetadataValue};
use zrpc::tonic::{self, Request, Response, Status, Streaming};

use crate::compressed::Compression;
use crate::payload;
use crate::pb::test_service_server::{TestService, TestServiceServer};
use crate::pb::{
    EchoStatus, Empty, Payload, SimpleRequest, SimpleResponse, StreamingInputCallRequest,
    StreamingInputCallResponse, StreamingOutputCallRequest, StreamingOutputCallResponse,
};

/// The header echoed back in the response headers.
pub const ECHO_INITIAL: &str = "x-grpc-test-echo-initial";
/// The binary header echoed back in the trailers.
pub const ECHO_TRAILING: &str = "x-grpc-test-echo-trailing-bin";

/// The server config of the interop server listening on `listen_on`: zrpc's defaults (the
/// default chain), with `Compression: gzip` so that each handler is handed the call's
/// `CallCompression` and can compress what the request asks compressed, and only that (every
/// other response is sent uncompressed).
pub fn conf(listen_on: &str) -> zrpc::RpcServerConf {
    zrpc::RpcServerConf::new("grpc.testing.rpc", listen_on)
        .with_compression(Some(zrpc::compression::Encoding::Gzip))
}

/// The interop `TestService` (stateless; clones are free).
#[derive(Debug, Clone, Copy, Default)]
pub struct InteropService;

/// [`InteropService`] as a tonic service, ready for [`zrpc::Server::add_service`].
pub fn service() -> TestServiceServer<InteropService> {
    TestServiceServer::new(InteropService)
}

type Responses = ReceiverStream<Result<StreamingOutputCallResponse, Status>>;

#[tonic::async_trait]
impl TestService for InteropService {
    async fn empty_call(&self, _: Request<Empty>) -> Result<Response<Empty>, Status> {
        Ok(Response::new(Empty {}))
    }

    async fn unary_call(
        &self,
        request: Request<SimpleRequest>,
    ) -> Result<Response<SimpleResponse>, Status> {
        let (echo, compression, req) = take(request);
        compression.check_received(req.expect_compressed.as_ref())?;
        echo_status(req.response_status.as_ref())?;
        compression.respond(req.response_compressed.as_ref())?;
        let payload = payload::response(req.response_type, req.response_size)?;
        Ok(echo.respond(SimpleResponse {
            payload: Some(payload),
            ..SimpleResponse::default()
        }))
    }

    async fn cacheable_unary_call(
        &self,
        _: Request<SimpleRequest>,
    ) -> Result<Response<SimpleResponse>, Status> {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        let mut response = Response::new(SimpleResponse {
            payload: Some(Payload {
                r#type: crate::pb::PayloadType::Compressable.into(),
                body: nanos.to_string().into_bytes(),
            }),
            ..SimpleResponse::default()
        });
        response
            .metadata_mut()
            .insert("cache-control", MetadataValue::from_static("max-age=60"));
        Ok(response)
    }

    type StreamingOutputCallStream = Responses;

    async fn streaming_output_call(
        &self,
        request: Request<StreamingOutputCallRequest>,
    ) -> Result<Response<Responses>, Status> {
        let (echo, compression, req) = take(request);
        echo_status(req.response_status.as_ref())?;
        let (tx, rx) = mpsc::channel(4);
        tokio::spawn(async move {
            let _ = send_all(&tx, &compression, &req).await;
        });
        Ok(echo.respond(ReceiverStream::new(rx)))
    }

    async fn streaming_input_call(
        &self,
        request: Request<Streaming<StreamingInputCallRequest>>,
    ) -> Result<Response<StreamingInputCallResponse>, Status> {
        let (echo, compression, mut inbound) = take(request);
        let mut sum = 0usize;
        while let Some(req) = inbound.message().await? {
            compression.check_received(req.expect_compressed.as_ref())?;
            sum += req.payload.map_or(0, |p| p.body.len());
        }
        compression.respond(None)?;
        let aggregated_payload_size = i32::try_from(sum).map_err(|_| {
            Status::invalid_argument(format!("{sum} payload bytes do not fit the int32 answer"))
        })?;
        Ok(echo.respond(StreamingInputCallResponse {
            aggregated_payload_size,
        }))
    }

    type FullDuplexCallStream = Responses;

    async fn full_duplex_call(
        &self,
        request: Request<Streaming<StreamingOutputCallRequest>>,
    ) -> Result<Response<Responses>, Status> {
        let (echo, compression, mut inbound) = take(request);
        let (tx, rx) = mpsc::channel(4);
        tokio::spawn(async move {
            // each request answered as it arrives; the call ends at the client's half-close
            loop {
                let req = match inbound.message().await {
                    Ok(Some(req)) => req,
                    Ok(None) => return,
                    Err(status) => {
                        let _ = tx.send(Err(status)).await;
                        return;
                    }
                };
                if let Err(status) = echo_status(req.response_status.as_ref()) {
                    let _ = tx.send(Err(status)).await;
                    return;
                }
                if send_all(&tx, &compression, &req).await.is_err() {
                    return;
                }
            }
        });
        Ok(echo.respond(ReceiverStream::new(rx)))
    }

    type HalfDuplexCallStream = Responses;

    async fn half_duplex_call(
        &self,
        request: Request<Streaming<StreamingOutputCallRequest>>,
    ) -> Result<Response<Responses>, Status> {
        let (echo, compression, mut inbound) = take(request);
        let mut all = Vec::new();
        while let Some(req) = inbound.message().await? {
            echo_status(req.response_status.as_ref())?;
            all.push(req);
        }
        let (tx, rx) = mpsc::channel(4);
        tokio::spawn(async move {
            for req in all {
                if send_all(&tx, &compression, &req).await.is_err() {
                    return;
                }
            }
        });
        Ok(echo.respond(ReceiverStream::new(rx)))
    }

    async fn unimplemented_call(&self, _: Request<Empty>) -> Result<Response<Empty>, Status> {
        Err(Status::unimplemented(
            "grpc.testing.TestService/UnimplementedCall is not implemented, as the interop spec asks",
        ))
    }
}

/// Sends one response per parameter set of `req`, each after its `interval_us`, compressed as
/// it asks.
/// `Err` when the call is over (the client went away, or a parameter was refused and the call
/// ended with its status).
async fn send_all(
    tx: &mpsc::Sender<Result<StreamingOutputCallResponse, Status>>,
    compression: &Compression,
    req: &StreamingOutputCallRequest,
) -> Result<(), ()> {
    for p in &req.response_parameters {
        if let Ok(us) = u64::try_from(p.interval_us)
            && us > 0
        {
            tokio::time::sleep(Duration::from_micros(us)).await;
        }
        let message = compression
            .next_message(p.compressed.as_ref())
            .and_then(|()| payload::response(req.response_type, p.size))
            .map(|payload| StreamingOutputCallResponse {
                payload: Some(payload),
                ..StreamingOutputCallResponse::default()
            });
        let refused = message.is_err();
        tx.send(message).await.map_err(|_| ())?;
        if refused {
            return Err(());
        }
    }
    Ok(())
}

/// What a handler needs of its request besides the message: the echo-metadata and compression
/// features, taken before the request is consumed.
fn take<T>(request: Request<T>) -> (Echo, Compression, T) {
    let echo = Echo::take(&request);
    let compression = Compression::of(&request);
    (echo, compression, request.into_inner())
}

/// The status a request asks the server to end with (echo status), if any.
fn echo_status(status: Option<&EchoStatus>) -> Result<(), Status> {
    match status {
        Some(s) if s.code != 0 => Err(Status::new(
            tonic::Code::from_i32(s.code),
            s.message.clone(),
        )),
        _ => Ok(()),
    }
}

/// The echo-metadata feature, taken from the request before it is consumed: the trailing value
/// is set for the call's trailers at once (they carry it whether the call succeeds or ends with
/// an echoed status, as grpc-go's server does), the initial one waits for the response.
struct Echo {
    initial: Option<MetadataValue<tonic::metadata::Ascii>>,
}

impl Echo {
    fn take<T>(request: &Request<T>) -> Echo {
        let md = request.metadata();
        if let (Some(v), Some(trailers)) = (md.get_bin(ECHO_TRAILING), Trailers::of(request)) {
            let mut echoed = MetadataMap::new();
            echoed.insert_bin(ECHO_TRAILING, v.clone());
            trailers.merge(echoed);
        }
        Echo {
            initial: md.get(ECHO_INITIAL).cloned(),
        }
    }

    /// `message` as the response, with the initial value in its headers.
    fn respond<M>(self, message: M) -> Response<M> {
        let mut response = Response::new(message);
        if let Some(v) = self.initial {
            response.metadata_mut().insert(ECHO_INITIAL, v);
        }
        response
    }
}
