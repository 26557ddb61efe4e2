//! The interop client cases, on [`zrpc::client`].
//!
//! Each [`Case`] does what the interop spec's procedure says and checks what its "Client
//! asserts" list says; a failure is an error that names the case, the step and what came back
//! against what was wanted. [`Runner::run`] bounds every case ([`Runner::with_case_timeout`],
//! 20 s by default), so a call that never ends fails its case instead of hanging the caller.
//!
//! Cancellation in Rust is dropping the call. The cancel cases therefore check what a Rust
//! caller can see of it: the call was under way when dropped, zrpc's client recorded it as
//! `Cancelled` (`rpc_client_*_code_total{code="1"}`: a process-wide count, so these cases run
//! one at a time in a process), and the same client answers the next call.

mod cancel;
mod compression;
mod metadata;
mod soak;
mod status;
mod streaming;
mod unary;

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use anyhow::Context as _;
use zrpc::tonic::Status;
use zrpc::{Client, RpcClientConf};

use crate::pb::test_service_client::TestServiceClient;

pub use soak::SoakConf;

/// An interop client case, named as grpc-go's `--test_case` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Case {
    /// `EmptyCall` with the empty message.
    EmptyUnary,
    /// `UnaryCall` with 271828 bytes, answered with 314159.
    LargeUnary,
    /// `StreamingInputCall` with four messages; the server sums their sizes.
    ClientStreaming,
    /// `StreamingOutputCall` asking for four responses of given sizes.
    ServerStreaming,
    /// `FullDuplexCall`, one response per request, in turn.
    PingPong,
    /// `FullDuplexCall` without a message either way.
    EmptyStream,
    /// Metadata echoed in the response headers and trailers, unary and streaming.
    CustomMetadata,
    /// A status code and message the server must end with, unary and streaming.
    StatusCodeAndMessage,
    /// A status message with whitespace and non-ASCII text.
    SpecialStatusMessage,
    /// `TestService/UnimplementedCall`: `Unimplemented`.
    UnimplementedMethod,
    /// `UnimplementedService/UnimplementedCall`: `Unimplemented`.
    UnimplementedService,
    /// A client stream cancelled once under way.
    CancelAfterBegin,
    /// A full-duplex call cancelled after its first response.
    CancelAfterFirstResponse,
    /// A 1 ms deadline on a full-duplex call the server never answers: `DeadlineExceeded`.
    TimeoutOnSleepingServer,
    /// Large unary calls in a row on one client.
    RpcSoak,
    /// Large unary calls in a row, each on a new client.
    ChannelSoak,
    /// Unary requests sent compressed and not, each saying so (`expect_compressed`).
    ClientCompressedUnary,
    /// Unary responses asked compressed and not (`response_compressed`).
    ServerCompressedUnary,
    /// A client stream whose first message is compressed and second not.
    ClientCompressedStreaming,
    /// A server stream whose first response is asked compressed and second not.
    ServerCompressedStreaming,
}

impl Case {
    /// Every case: those grpc-go's interop client runs, then the compression cases.
    pub const ALL: [Case; 20] = [
        Case::EmptyUnary,
        Case::LargeUnary,
        Case::ClientStreaming,
        Case::ServerStreaming,
        Case::PingPong,
        Case::EmptyStream,
        Case::CustomMetadata,
        Case::StatusCodeAndMessage,
        Case::SpecialStatusMessage,
        Case::UnimplementedMethod,
        Case::UnimplementedService,
        Case::CancelAfterBegin,
        Case::CancelAfterFirstResponse,
        Case::TimeoutOnSleepingServer,
        Case::RpcSoak,
        Case::ChannelSoak,
        Case::ClientCompressedUnary,
        Case::ServerCompressedUnary,
        Case::ClientCompressedStreaming,
        Case::ServerCompressedStreaming,
    ];

    /// The case's `--test_case` name (`large_unary`).
    pub fn name(self) -> &'static str {
        match self {
            Case::EmptyUnary => "empty_unary",
            Case::LargeUnary => "large_unary",
            Case::ClientStreaming => "client_streaming",
            Case::ServerStreaming => "server_streaming",
            Case::PingPong => "ping_pong",
            Case::EmptyStream => "empty_stream",
            Case::CustomMetadata => "custom_metadata",
            Case::StatusCodeAndMessage => "status_code_and_message",
            Case::SpecialStatusMessage => "special_status_message",
            Case::UnimplementedMethod => "unimplemented_method",
            Case::UnimplementedService => "unimplemented_service",
            Case::CancelAfterBegin => "cancel_after_begin",
            Case::CancelAfterFirstResponse => "cancel_after_first_response",
            Case::TimeoutOnSleepingServer => "timeout_on_sleeping_server",
            Case::RpcSoak => "rpc_soak",
            Case::ChannelSoak => "channel_soak",
            Case::ClientCompressedUnary => "client_compressed_unary",
            Case::ServerCompressedUnary => "server_compressed_unary",
            Case::ClientCompressedStreaming => "client_compressed_streaming",
            Case::ServerCompressedStreaming => "server_compressed_streaming",
        }
    }
}

impl fmt::Display for Case {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Case {
    type Err = anyhow::Error;

    fn from_str(s: &str) -> Result<Case, anyhow::Error> {
        Case::ALL
            .into_iter()
            .find(|c| c.name() == s)
            .with_context(|| {
                let names: Vec<_> = Case::ALL.iter().map(|c| c.name()).collect();
                format!(
                    "unknown test case {s:?}; this client runs {}",
                    names.join(", ")
                )
            })
    }
}

/// Runs cases against one server through one [`zrpc::Client`].
#[derive(Debug)]
pub struct Runner {
    conf: RpcClientConf,
    client: Client,
    soak: SoakConf,
    case_timeout: Duration,
}

impl Runner {
    /// A runner whose client is `zrpc::client(conf)`; channel_soak makes a new client from
    /// `conf` for each iteration.
    ///
    /// # Errors
    ///
    /// The client cannot be built from `conf`.
    pub async fn new(conf: RpcClientConf) -> anyhow::Result<Runner> {
        let client = zrpc::client(conf.clone())
            .await
            .context("build the zrpc client")?;
        Ok(Runner {
            conf,
            client,
            soak: SoakConf::default(),
            case_timeout: Duration::from_secs(20),
        })
    }

    /// The soak cases' settings. Default: [`SoakConf::default`].
    #[must_use]
    pub fn with_soak(mut self, soak: SoakConf) -> Runner {
        self.soak = soak;
        self
    }

    /// How long one case may take before it fails as hung. Default: 20 s.
    #[must_use]
    pub fn with_case_timeout(mut self, timeout: Duration) -> Runner {
        self.case_timeout = timeout;
        self
    }

    /// Runs `case`.
    ///
    /// # Errors
    ///
    /// The case failed (the error says which step and why), or took longer than the case
    /// timeout.
    pub async fn run(&self, case: Case) -> anyhow::Result<()> {
        let run = async {
            match case {
                Case::EmptyUnary => unary::empty_unary(self).await,
                Case::LargeUnary => unary::large_unary(self).await,
                Case::ClientStreaming => streaming::client_streaming(self).await,
                Case::ServerStreaming => streaming::server_streaming(self).await,
                Case::PingPong => streaming::ping_pong(self).await,
                Case::EmptyStream => streaming::empty_stream(self).await,
                Case::CustomMetadata => metadata::custom_metadata(self).await,
                Case::StatusCodeAndMessage => status::status_code_and_message(self).await,
                Case::SpecialStatusMessage => status::special_status_message(self).await,
                Case::UnimplementedMethod => status::unimplemented_method(self).await,
                Case::UnimplementedService => status::unimplemented_service(self).await,
                Case::CancelAfterBegin => cancel::cancel_after_begin(self).await,
                Case::CancelAfterFirstResponse => cancel::cancel_after_first_response(self).await,
                Case::TimeoutOnSleepingServer => cancel::timeout_on_sleeping_server(self).await,
                Case::RpcSoak => soak::rpc_soak(self).await,
                Case::ChannelSoak => soak::channel_soak(self).await,
                Case::ClientCompressedUnary => compression::client_compressed_unary(self).await,
                Case::ServerCompressedUnary => compression::server_compressed_unary(self).await,
                Case::ClientCompressedStreaming => {
                    compression::client_compressed_streaming(self).await
                }
                Case::ServerCompressedStreaming => {
                    compression::server_compressed_streaming(self).await
                }
            }
        };
        match tokio::time::timeout(self.case_timeout, run).await {
            Ok(result) => result.with_context(|| format!("{case} failed")),
            Err(_) => anyhow::bail!(
                "{case} failed: no result after {:?} (a call never ended)",
                self.case_timeout
            ),
        }
    }

    /// A `TestService` client on the runner's zrpc client.
    fn stub(&self) -> TestServiceClient<Client> {
        TestServiceClient::new(self.client.clone())
    }
}

/// `status` as a case error: "`what`: Code "message"".
fn failed(what: &'static str) -> impl Fn(Status) -> anyhow::Error {
    move |s| anyhow::anyhow!("{what} failed with {}", show(&s))
}

/// A status as the errors show it: `Unknown "message"`.
fn show(s: &Status) -> String {
    format!("{:?} {:?}", s.code(), s.message())
}

#[cfg(test)]
mod tests {
    use super::Case;

    #[test]
    fn every_case_is_found_by_its_name() {
        for case in Case::ALL {
            assert_eq!(case.name().parse::<Case>().unwrap(), case);
        }
        let err = "orca_oob".parse::<Case>().unwrap_err().to_string();
        assert!(err.contains("unknown test case \"orca_oob\""), "{err}");
    }
}
