//! custom_metadata: an ASCII and a binary header echoed in the response headers and trailers.

use anyhow::Context as _;
use zrpc::tonic::codegen::http::uri::PathAndQuery;
use zrpc::tonic::metadata::{BinaryMetadataValue, MetadataMap, MetadataValue};
use zrpc::tonic::{self, Request};

use super::streaming::{duplex_request, end_ok, next_message, queued};
use super::unary::{LARGE_REQUEST, LARGE_RESPONSE, large_request};
use super::{Runner, failed, show};
use crate::payload;
use crate::pb::{SimpleRequest, SimpleResponse};
use crate::server::{ECHO_INITIAL, ECHO_TRAILING};

const INITIAL_VALUE: &str = "test_initial_metadata_value";
const TRAILING_VALUE: [u8; 3] = [0xab, 0xab, 0xab];

pub(super) async fn custom_metadata(r: &Runner) -> anyhow::Result<()> {
    // Unary. tonic's unary call merges the trailers into the response metadata; the same
    // method read as a one-message stream keeps the headers and the trailers apart, so the
    // case can tell where each value came back (the bytes on the wire are the same).
    let mut grpc = tonic::client::Grpc::new(r.client.clone());
    grpc.ready()
        .await
        .map_err(|e| anyhow::anyhow!("the client is not ready: {e}"))?;
    let response = grpc
        .server_streaming(
            with_echo(large_request(LARGE_REQUEST, LARGE_RESPONSE)),
            PathAndQuery::from_static("/grpc.testing.TestService/UnaryCall"),
            tonic_prost::ProstCodec::<SimpleRequest, SimpleResponse>::default(),
        )
        .await
        .map_err(failed("UnaryCall"))?;
    check_initial("UnaryCall", response.metadata())?;
    let mut stream = response.into_inner();
    let reply = next_message(&mut stream, "UnaryCall's response").await?;
    payload::check(reply.payload.as_ref(), LARGE_RESPONSE).context("UnaryCall")?;
    end_ok(&mut stream, 1).await.context("UnaryCall")?;
    check_trailing("UnaryCall", stream.trailers().await)?;

    // Full duplex.
    let (tx, requests) = queued(duplex_request(LARGE_REQUEST, &[LARGE_RESPONSE])).await?;
    let response = r
        .stub()
        .full_duplex_call(with_echo(requests))
        .await
        .map_err(failed("FullDuplexCall"))?;
    check_initial("FullDuplexCall", response.metadata())?;
    let mut stream = response.into_inner();
    let reply = next_message(&mut stream, "FullDuplexCall's response").await?;
    payload::check(reply.payload.as_ref(), LARGE_RESPONSE).context("FullDuplexCall")?;
    drop(tx); // half-close
    end_ok(&mut stream, 1).await.context("FullDuplexCall")?;
    check_trailing("FullDuplexCall", stream.trailers().await)
}

fn with_echo<T>(message: T) -> Request<T> {
    let mut request = Request::new(message);
    let md = request.metadata_mut();
    md.insert(ECHO_INITIAL, MetadataValue::from_static(INITIAL_VALUE));
    md.insert_bin(
        ECHO_TRAILING,
        BinaryMetadataValue::from_bytes(&TRAILING_VALUE),
    );
    request
}

fn check_initial(what: &str, headers: &MetadataMap) -> anyhow::Result<()> {
    let values: Vec<_> = headers.get_all(ECHO_INITIAL).iter().collect();
    anyhow::ensure!(
        values.len() == 1 && values[0] == INITIAL_VALUE,
        "{what}: response headers carry {ECHO_INITIAL} {values:?}, want exactly [{INITIAL_VALUE:?}]"
    );
    Ok(())
}

fn check_trailing(
    what: &str,
    trailers: Result<Option<MetadataMap>, tonic::Status>,
) -> anyhow::Result<()> {
    let trailers = trailers
        .map_err(|s| anyhow::anyhow!("{what}: reading the trailers failed with {}", show(&s)))?
        .unwrap_or_default();
    let values: Vec<Vec<u8>> = trailers
        .get_all_bin(ECHO_TRAILING)
        .iter()
        .map(|v| v.to_bytes().map(|b| b.to_vec()).unwrap_or_default())
        .collect();
    anyhow::ensure!(
        values.len() == 1 && values[0] == TRAILING_VALUE,
        "{what}: trailers carry {ECHO_TRAILING} {values:02x?}, want exactly [{TRAILING_VALUE:02x?}]"
    );
    Ok(())
}
