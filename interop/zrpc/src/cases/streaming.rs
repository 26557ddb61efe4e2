//! client_streaming, server_streaming, ping_pong and empty_stream.

use anyhow::Context as _;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use super::{Runner, failed, show};
use crate::payload;
use crate::pb::{
    PayloadType, ResponseParameters, StreamingInputCallRequest, StreamingOutputCallRequest,
};

/// The request sizes of client_streaming and ping_pong.
const REQUEST_SIZES: [usize; 4] = [27_182, 8, 1_828, 45_904];
/// The response sizes of server_streaming and ping_pong.
const RESPONSE_SIZES: [usize; 4] = [31_415, 9, 2_653, 58_979];

pub(super) async fn client_streaming(r: &Runner) -> anyhow::Result<()> {
    let requests = REQUEST_SIZES.map(|n| StreamingInputCallRequest {
        payload: Some(payload::zeros(n)),
        ..StreamingInputCallRequest::default()
    });
    let reply = r
        .stub()
        .streaming_input_call(tokio_stream::iter(requests))
        .await
        .map_err(failed("StreamingInputCall"))?
        .into_inner();
    let want: usize = REQUEST_SIZES.iter().sum();
    anyhow::ensure!(
        usize::try_from(reply.aggregated_payload_size).ok() == Some(want),
        "aggregated_payload_size is {}, want {want}",
        reply.aggregated_payload_size
    );
    Ok(())
}

pub(super) async fn server_streaming(r: &Runner) -> anyhow::Result<()> {
    let request = StreamingOutputCallRequest {
        response_type: PayloadType::Compressable.into(),
        response_parameters: RESPONSE_SIZES.iter().map(|n| params(*n)).collect(),
        ..StreamingOutputCallRequest::default()
    };
    let mut stream = r
        .stub()
        .streaming_output_call(request)
        .await
        .map_err(failed("StreamingOutputCall"))?
        .into_inner();
    for (i, want) in RESPONSE_SIZES.iter().enumerate() {
        let what = format!("response {i} of 4");
        let reply = next_message(&mut stream, &what).await?;
        payload::check(reply.payload.as_ref(), *want).context(what)?;
    }
    end_ok(&mut stream, 4).await
}

pub(super) async fn ping_pong(r: &Runner) -> anyhow::Result<()> {
    let request = |i: usize| duplex_request(REQUEST_SIZES[i], &[RESPONSE_SIZES[i]]);
    let (tx, requests) = queued(request(0)).await?;
    let mut stream = r
        .stub()
        .full_duplex_call(requests)
        .await
        .map_err(failed("FullDuplexCall"))?
        .into_inner();
    for (i, want) in RESPONSE_SIZES.iter().enumerate() {
        if i > 0 {
            tx.send(request(i))
                .await
                .with_context(|| format!("send request {i}: the call is over"))?;
        }
        let what = format!("response {i} of 4");
        let reply = next_message(&mut stream, &what).await?;
        payload::check(reply.payload.as_ref(), *want).context(what)?;
    }
    drop(tx); // half-close
    end_ok(&mut stream, 4).await
}

pub(super) async fn empty_stream(r: &Runner) -> anyhow::Result<()> {
    let mut stream = r
        .stub()
        .full_duplex_call(tokio_stream::empty())
        .await
        .map_err(failed("FullDuplexCall"))?
        .into_inner();
    end_ok(&mut stream, 0).await
}

/// The stream's next message; an error naming `what` when the call failed or the stream ended.
pub(super) async fn next_message<T>(
    stream: &mut zrpc::tonic::Streaming<T>,
    what: &str,
) -> anyhow::Result<T>
where
    T: Send + 'static,
{
    stream
        .message()
        .await
        .map_err(|s| anyhow::anyhow!("{what} failed with {}", show(&s)))?
        .with_context(|| format!("{what}: the stream ended without it"))
}

/// Checks that the stream ends with OK and no more messages after `seen`.
pub(super) async fn end_ok<T>(
    stream: &mut zrpc::tonic::Streaming<T>,
    seen: usize,
) -> anyhow::Result<()>
where
    T: Send + 'static,
{
    match stream.message().await {
        Ok(None) => Ok(()),
        Ok(Some(_)) => anyhow::bail!("a response after the {seen} expected"),
        Err(s) => anyhow::bail!("the stream ended with {}, want OK", show(&s)),
    }
}

/// A full-duplex request: `payload` zeros, asking for one response per size in `sizes`.
pub(super) fn duplex_request(payload: usize, sizes: &[usize]) -> StreamingOutputCallRequest {
    StreamingOutputCallRequest {
        response_type: PayloadType::Compressable.into(),
        response_parameters: sizes.iter().map(|n| params(*n)).collect(),
        payload: Some(payload::zeros(payload)),
        ..StreamingOutputCallRequest::default()
    }
}

/// A request stream with `first` already in it, and its sender (dropping it half-closes). The
/// first request goes out with the call: a server may hold its response headers until it
/// answers one (grpc-go's does).
pub(super) async fn queued(
    first: StreamingOutputCallRequest,
) -> anyhow::Result<(
    mpsc::Sender<StreamingOutputCallRequest>,
    ReceiverStream<StreamingOutputCallRequest>,
)> {
    let (tx, rx) = mpsc::channel(1);
    tx.send(first).await?;
    Ok((tx, ReceiverStream::new(rx)))
}

/// One response of `size` bytes.
pub(super) fn params(size: usize) -> ResponseParameters {
    ResponseParameters {
        size: i32::try_from(size).unwrap_or(i32::MAX),
        ..ResponseParameters::default()
    }
}
