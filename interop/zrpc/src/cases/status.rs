//! status_code_and_message, special_status_message, unimplemented_method and
//! unimplemented_service.

use zrpc::tonic::{Code, Status};

use super::streaming::queued;
use super::{Runner, show};
use crate::pb::unimplemented_service_client::UnimplementedServiceClient;
use crate::pb::{EchoStatus, Empty, SimpleRequest, StreamingOutputCallRequest};

const TEST_MESSAGE: &str = "test status message";
/// Whitespace, a BMP and a non-BMP character: `grpc-message` is percent-encoded on the wire.
const SPECIAL_MESSAGE: &str = "\t\ntest with whitespace\r\nand Unicode BMP ☺ and non-BMP 😈\t\n";

pub(super) async fn status_code_and_message(r: &Runner) -> anyhow::Result<()> {
    let echo = EchoStatus {
        code: 2,
        message: TEST_MESSAGE.to_owned(),
    };
    let unary = r
        .stub()
        .unary_call(SimpleRequest {
            response_status: Some(echo.clone()),
            ..SimpleRequest::default()
        })
        .await;
    expect_status("UnaryCall", unary.err(), Code::Unknown, TEST_MESSAGE)?;

    let (tx, requests) = queued(StreamingOutputCallRequest {
        response_status: Some(echo),
        ..StreamingOutputCallRequest::default()
    })
    .await?;
    drop(tx); // half-close
    // the status may come as the call's answer (trailers only) or at the end of its stream
    let end = match r.stub().full_duplex_call(requests).await {
        Err(s) => Some(s),
        Ok(response) => {
            let mut stream = response.into_inner();
            match stream.message().await {
                Ok(Some(_)) => anyhow::bail!("FullDuplexCall answered a message, want a status"),
                Ok(None) => None,
                Err(s) => Some(s),
            }
        }
    };
    expect_status("FullDuplexCall", end, Code::Unknown, TEST_MESSAGE)
}

pub(super) async fn special_status_message(r: &Runner) -> anyhow::Result<()> {
    let unary = r
        .stub()
        .unary_call(SimpleRequest {
            response_status: Some(EchoStatus {
                code: 2,
                message: SPECIAL_MESSAGE.to_owned(),
            }),
            ..SimpleRequest::default()
        })
        .await;
    expect_status("UnaryCall", unary.err(), Code::Unknown, SPECIAL_MESSAGE)
}

pub(super) async fn unimplemented_method(r: &Runner) -> anyhow::Result<()> {
    let result = r.stub().unimplemented_call(Empty {}).await;
    expect_code(
        "TestService/UnimplementedCall",
        result.err(),
        Code::Unimplemented,
    )
}

pub(super) async fn unimplemented_service(r: &Runner) -> anyhow::Result<()> {
    let result = UnimplementedServiceClient::new(r.client.clone())
        .unimplemented_call(Empty {})
        .await;
    expect_code(
        "UnimplementedService/UnimplementedCall",
        result.err(),
        Code::Unimplemented,
    )
}

fn expect_status(what: &str, got: Option<Status>, code: Code, message: &str) -> anyhow::Result<()> {
    let Some(s) = got else {
        anyhow::bail!("{what} succeeded, want {code:?} {message:?}");
    };
    anyhow::ensure!(
        s.code() == code && s.message() == message,
        "{what} ended with {}, want {code:?} {message:?}",
        show(&s)
    );
    Ok(())
}

fn expect_code(what: &str, got: Option<Status>, code: Code) -> anyhow::Result<()> {
    let Some(s) = got else {
        anyhow::bail!("{what} succeeded, want {code:?}");
    };
    anyhow::ensure!(
        s.code() == code,
        "{what} ended with {}, want {code:?}",
        show(&s)
    );
    Ok(())
}
