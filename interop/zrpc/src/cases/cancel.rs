//! cancel_after_begin, cancel_after_first_response and timeout_on_sleeping_server.

use std::task::Poll;
use std::time::Duration;

use anyhow::Context as _;
use tokio::sync::{Mutex, oneshot};
use zrpc::CallTimeout;
use zrpc::tonic::{Code, Request};

use super::streaming::{duplex_request, next_message, queued};
use super::{Runner, failed, show};
use crate::payload;
use crate::pb::{Empty, StreamingInputCallRequest};

const STREAMING_INPUT: &str = "/grpc.testing.TestService/StreamingInputCall";
const FULL_DUPLEX: &str = "/grpc.testing.TestService/FullDuplexCall";

/// The cancel cases compare the process-wide count of calls the client recorded as
/// `Cancelled` before and after their own: one at a time in a process.
static CANCEL_RECORDS: Mutex<()> = Mutex::const_new(());

pub(super) async fn cancel_after_begin(r: &Runner) -> anyhow::Result<()> {
    let _one_at_a_time = CANCEL_RECORDS.lock().await;
    let before = cancelled(STREAMING_INPUT);
    // A request stream that tells when the client first asks it for a message (the call's
    // headers are out) and then never yields one.
    let (begun_tx, begun) = oneshot::channel();
    let mut begun_tx = Some(begun_tx);
    let requests = futures_util::stream::poll_fn(move |_| {
        if let Some(tx) = begun_tx.take() {
            let _ = tx.send(());
        }
        Poll::<Option<StreamingInputCallRequest>>::Pending
    });
    let mut stub = r.stub();
    let call = stub.streaming_input_call(requests);
    tokio::select! {
        result = call => anyhow::bail!(
            "StreamingInputCall ended before it was cancelled: {:?}",
            result.map(|_| ()).map_err(|s| show(&s))
        ),
        started = begun => started.context("the call never asked for its first message")?,
    }
    // the call was dropped above, under way: that is the cancellation
    expect_recorded_cancel(STREAMING_INPUT, before)?;
    still_answers(r).await
}

pub(super) async fn cancel_after_first_response(r: &Runner) -> anyhow::Result<()> {
    let _one_at_a_time = CANCEL_RECORDS.lock().await;
    let before = cancelled(FULL_DUPLEX);
    let (tx, requests) = queued(duplex_request(27_182, &[31_415])).await?;
    let mut stream = r
        .stub()
        .full_duplex_call(requests)
        .await
        .map_err(failed("FullDuplexCall"))?
        .into_inner();
    let first = next_message(&mut stream, "the first response").await?;
    payload::check(first.payload.as_ref(), 31_415).context("the first response")?;
    // cancel: the response stream first, so that no half-close goes out before it
    drop(stream);
    expect_recorded_cancel(FULL_DUPLEX, before)?;
    drop(tx);
    still_answers(r).await
}

pub(super) async fn timeout_on_sleeping_server(r: &Runner) -> anyhow::Result<()> {
    let _one_at_a_time = CANCEL_RECORDS.lock().await;
    let (tx, requests) = queued(duplex_request(27_182, &[])).await?;
    let mut request = Request::new(requests);
    request
        .extensions_mut()
        .insert(CallTimeout(Duration::from_millis(1)));
    // the client keeps its side open (`tx` lives to the end): only the deadline ends the call
    let end = match r.stub().full_duplex_call(request).await {
        Err(s) => Err(s),
        Ok(response) => response.into_inner().message().await.map(|m| m.is_some()),
    };
    drop(tx);
    match end {
        Err(s) if s.code() == Code::DeadlineExceeded => Ok(()),
        Err(s) => anyhow::bail!(
            "FullDuplexCall with a 1 ms deadline ended with {}, want DeadlineExceeded",
            show(&s)
        ),
        Ok(true) => anyhow::bail!(
            "FullDuplexCall with a 1 ms deadline answered a message, want DeadlineExceeded"
        ),
        Ok(false) => {
            anyhow::bail!("FullDuplexCall with a 1 ms deadline ended OK, want DeadlineExceeded")
        }
    }
}

/// Calls of `method` the client recorded as `Cancelled` (code 1), in both of its families
/// (unary and streams), as `/metrics` shows them.
fn cancelled(method: &str) -> u64 {
    let method_label = format!("method=\"{method}\"");
    zrpc::metrics::server::render()
        .lines()
        .filter(|l| {
            (l.starts_with("rpc_client_requests_code_total{")
                || l.starts_with("rpc_client_streams_code_total{"))
                && l.contains("code=\"1\"")
                && l.contains(&method_label)
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

fn expect_recorded_cancel(method: &str, before: u64) -> anyhow::Result<()> {
    let after = cancelled(method);
    anyhow::ensure!(
        after == before + 1,
        "the client recorded {} more Cancelled calls of {method} after the cancel, want 1",
        after.saturating_sub(before)
    );
    Ok(())
}

/// The client answers its next call after a cancelled one.
async fn still_answers(r: &Runner) -> anyhow::Result<()> {
    r.stub()
        .empty_call(Empty {})
        .await
        .map_err(failed("EmptyCall after the cancel"))?;
    Ok(())
}
