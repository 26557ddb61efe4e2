//! client_compressed_unary, server_compressed_unary, client_compressed_streaming and
//! server_compressed_streaming, on zrpc's [`CallCompression`]: a request chooses how its
//! messages go (the whole call, or message by message) and reads how each response message
//! arrived.

use anyhow::Context as _;
use zrpc::compression::{CallCompression, Encoding};
use zrpc::tonic::{Code, Request};

use super::streaming::{end_ok, next_message};
use super::unary::{LARGE_REQUEST, LARGE_RESPONSE, large_request};
use super::{Runner, failed, show};
use crate::payload;
use crate::pb::{
    BoolValue, PayloadType, ResponseParameters, StreamingInputCallRequest,
    StreamingOutputCallRequest,
};

const YES: Option<BoolValue> = Some(BoolValue { value: true });
const NO: Option<BoolValue> = Some(BoolValue { value: false });

pub(super) async fn client_compressed_unary(r: &Runner) -> anyhow::Result<()> {
    let request = |expect: Option<BoolValue>, encoding: Option<Encoding>| {
        let mut request = Request::new(crate::pb::SimpleRequest {
            expect_compressed: expect,
            ..large_request(LARGE_REQUEST, LARGE_RESPONSE)
        });
        request
            .extensions_mut()
            .insert(CallCompression::send(encoding));
        request
    };
    // the probe: expect_compressed, sent uncompressed
    refused(r.stub().unary_call(request(YES, None)).await.err())?;
    for (what, expect, encoding) in [
        ("the compressed call", YES, Some(Encoding::Gzip)),
        ("the uncompressed call", NO, None),
    ] {
        let reply = r
            .stub()
            .unary_call(request(expect, encoding))
            .await
            .map_err(|s| anyhow::anyhow!("{what} failed with {}", show(&s)))?
            .into_inner();
        payload::check(reply.payload.as_ref(), LARGE_RESPONSE).context(what)?;
    }
    Ok(())
}

pub(super) async fn server_compressed_unary(r: &Runner) -> anyhow::Result<()> {
    for want in [true, false] {
        let call = CallCompression::new();
        let mut request = Request::new(crate::pb::SimpleRequest {
            response_compressed: Some(BoolValue { value: want }),
            ..large_request(LARGE_REQUEST, LARGE_RESPONSE)
        });
        request.extensions_mut().insert(call.clone());
        let reply = r
            .stub()
            .unary_call(request)
            .await
            .map_err(|s| {
                anyhow::anyhow!(
                    "UnaryCall with response_compressed {want} failed with {}",
                    show(&s)
                )
            })?
            .into_inner();
        payload::check(reply.payload.as_ref(), LARGE_RESPONSE)?;
        let arrived = call.last_received_compressed().unwrap_or(false);
        anyhow::ensure!(
            arrived == want,
            "response_compressed {want}: the response arrived with compressed flag {arrived}"
        );
    }
    Ok(())
}

pub(super) async fn client_compressed_streaming(r: &Runner) -> anyhow::Result<()> {
    let message = |expect: Option<BoolValue>, size: usize| StreamingInputCallRequest {
        payload: Some(payload::zeros(size)),
        expect_compressed: expect,
    };
    // the probe: a first message with expect_compressed, sent uncompressed
    let mut probe = Request::new(tokio_stream::iter([message(YES, 27_182)]));
    probe.extensions_mut().insert(CallCompression::send(None));
    refused(r.stub().streaming_input_call(probe).await.err())?;
    // the call: its first message compressed, its second not
    let call = CallCompression::send(Some(Encoding::Gzip));
    call.compress_next(true);
    call.compress_next(false);
    let mut request = Request::new(tokio_stream::iter([
        message(YES, 27_182),
        message(NO, 45_904),
    ]));
    request.extensions_mut().insert(call);
    let reply = r
        .stub()
        .streaming_input_call(request)
        .await
        .map_err(failed("StreamingInputCall"))?
        .into_inner();
    anyhow::ensure!(
        reply.aggregated_payload_size == 73_086,
        "aggregated_payload_size is {}, want 73086",
        reply.aggregated_payload_size
    );
    Ok(())
}

pub(super) async fn server_compressed_streaming(r: &Runner) -> anyhow::Result<()> {
    let call = CallCompression::new();
    let mut request = Request::new(StreamingOutputCallRequest {
        response_type: PayloadType::Compressable.into(),
        response_parameters: vec![
            ResponseParameters {
                size: 31_415,
                compressed: YES,
                ..ResponseParameters::default()
            },
            ResponseParameters {
                size: 92_653,
                compressed: NO,
                ..ResponseParameters::default()
            },
        ],
        ..StreamingOutputCallRequest::default()
    });
    request.extensions_mut().insert(call.clone());
    let mut stream = r
        .stub()
        .streaming_output_call(request)
        .await
        .map_err(failed("StreamingOutputCall"))?
        .into_inner();
    for (i, (size, want)) in [(31_415, true), (92_653, false)].into_iter().enumerate() {
        let what = format!("response {i} of 2");
        let reply = next_message(&mut stream, &what).await?;
        payload::check(reply.payload.as_ref(), size).context(what.clone())?;
        let arrived = call.last_received_compressed().unwrap_or(false);
        anyhow::ensure!(
            arrived == want,
            "{what}: arrived with compressed flag {arrived}, want {want}"
        );
    }
    end_ok(&mut stream, 2).await
}

/// The probe (`expect_compressed` on an uncompressed message) must end `InvalidArgument`: the
/// server can tell how a message arrived.
fn refused(probe: Option<zrpc::tonic::Status>) -> anyhow::Result<()> {
    match probe {
        Some(s) if s.code() == Code::InvalidArgument => Ok(()),
        Some(s) => anyhow::bail!(
            "the uncompressed probe with expect_compressed ended with {}, want InvalidArgument",
            show(&s)
        ),
        None => anyhow::bail!(
            "the uncompressed probe with expect_compressed succeeded, want InvalidArgument"
        ),
    }
}
