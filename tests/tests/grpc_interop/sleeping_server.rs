//! timeout_on_sleeping_server, many times in each direction (100 by default,
//! `ZRPC_SLEEPING_RUNS` to change): a 1 ms deadline on a full-duplex call the server never
//! answers must end with `DeadlineExceeded`, every time. Ignored in the suite (it takes tens of
//! seconds, minutes when calls hang); run it by name:
//!
//! `cargo test -p zrpc-tests --test grpc_interop sleeping_server -- --ignored --nocapture --test-threads 1`
//!
//! Each run is an interop run of its own, as a harness invoking the two programs 100 times makes:
//! a new server, so a new target for the client. (A client's breaker is per target and method and
//! counts `DeadlineExceeded` as a failure, as go-zero's does: 100 deadlines in a row on one target
//! open it, by design.) Each run is bounded to 2 s: a call with a 1 ms deadline still open then
//! counts as hung. The figures (passed, and each other outcome with its count) go to stderr; each
//! test fails unless every run passed.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio_stream::wrappers::ReceiverStream;
use zrpc::tonic;
use zrpc_interop::Case;
use zrpc_interop::pb::test_service_client::TestServiceClient;
use zrpc_interop::pb::{Payload, StreamingOutputCallRequest};
use zrpc_tests::grpcgo::{GrpcGoServer, ZrpcInteropServer, run_grpcgo_client, zrpc_runner};

const BOUND: Duration = Duration::from_secs(2);

fn runs() -> u32 {
    std::env::var("ZRPC_SLEEPING_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100)
}

/// Runs `one` [`runs`] times and reports what each run gave: `Ok(())` passed, `Err(outcome)`
/// anything else (loopback ports blanked, so that runs against different servers count
/// together). Fails unless every run passed.
async fn tally<F, Fut>(direction: &str, mut one: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), String>>,
{
    let runs = runs();
    let mut outcomes = BTreeMap::<String, u32>::new();
    for _ in 0..runs {
        let outcome = match one().await {
            Ok(()) => "passed".to_owned(),
            Err(e) => blank_ports(&e),
        };
        *outcomes.entry(outcome).or_default() += 1;
    }
    let passed = outcomes.get("passed").copied().unwrap_or(0);
    eprintln!("timeout_on_sleeping_server, {direction}: {passed} of {runs} passed");
    for (outcome, n) in outcomes.iter().filter(|(o, _)| *o != "passed") {
        eprintln!("  {n} x {outcome}");
    }
    assert_eq!(passed, runs, "{direction}: {outcomes:?}");
}

fn blank_ports(outcome: &str) -> String {
    let mut key = String::with_capacity(outcome.len());
    let mut rest = outcome;
    while let Some(at) = rest.find("127.0.0.1:") {
        let (head, tail) = rest.split_at(at + "127.0.0.1:".len());
        key.push_str(head);
        key.push_str("<port>");
        rest = tail.trim_start_matches(|c: char| c.is_ascii_digit());
    }
    key.push_str(rest);
    key
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: run it by name"]
async fn sleeping_server_grpcgo_to_zrpc() {
    let p = zrpc_tests::grpcgo_or_skip!();
    tally("grpc-go client -> zrpc server", || async {
        let server = ZrpcInteropServer::start(None).await;
        let run =
            run_grpcgo_client(p, "timeout_on_sleeping_server", server.port(), None, &[]).await;
        if run.passed() {
            Ok(())
        } else {
            Err(last_line(&run.output))
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: run it by name"]
async fn sleeping_server_zrpc_to_grpcgo() {
    let p = zrpc_tests::grpcgo_or_skip!();
    tally("zrpc client -> grpc-go server", || async {
        let server = GrpcGoServer::start(p, None).await;
        zrpc_case(server.port).await
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: run it by name"]
async fn sleeping_server_zrpc_to_zrpc() {
    tally("zrpc client -> zrpc server", || async {
        let server = ZrpcInteropServer::start(None).await;
        zrpc_case(server.port()).await
    })
    .await;
}

/// A plain tonic client (no zrpc) with a 1 ms `grpc-timeout`. tonic's own timer covers the wait
/// for the response headers only, and says `Cancelled` when it fires; a server that resets the
/// stream at the deadline (`RST_STREAM CANCEL`, as grpc-go's does) reaches tonic as `Cancelled`
/// too. So for tonic, "passed" is the call ending within the bound with `DeadlineExceeded` or
/// `Cancelled`; a last line says how many of each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: run it by name"]
async fn sleeping_server_tonic_to_zrpc() {
    let codes = std::sync::Mutex::new(BTreeMap::<String, u32>::new());
    tally("plain tonic client -> zrpc server", || async {
        let server = ZrpcInteropServer::start(None).await;
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", server.addr))
            .expect("endpoint")
            .connect()
            .await
            .expect("connect");
        let code = tonic_sleeping_call(channel).await?;
        *codes
            .lock()
            .unwrap()
            .entry(format!("{code:?}"))
            .or_default() += 1;
        match code {
            tonic::Code::DeadlineExceeded | tonic::Code::Cancelled => Ok(()),
            code => Err(format!("ended with {code:?}")),
        }
    })
    .await;
    eprintln!(
        "plain tonic client -> zrpc server: codes of the ended calls {:?}",
        codes.lock().unwrap()
    );
}

/// zrpc's client case against `127.0.0.1:<port>`, bounded to [`BOUND`].
async fn zrpc_case(port: u16) -> Result<(), String> {
    zrpc_runner(port, None)
        .await
        .with_case_timeout(BOUND)
        .run(Case::TimeoutOnSleepingServer)
        .await
        .map_err(|e| format!("{e:#}"))
}

/// The case by hand on a tonic channel: the code it ended with, or why it did not end.
async fn tonic_sleeping_call(channel: tonic::transport::Channel) -> Result<tonic::Code, String> {
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    tx.send(StreamingOutputCallRequest {
        payload: Some(Payload {
            r#type: 0,
            body: vec![0; 27_182],
        }),
        ..StreamingOutputCallRequest::default()
    })
    .await
    .expect("queue the request");
    let mut request = tonic::Request::new(ReceiverStream::new(rx));
    request.set_timeout(Duration::from_millis(1));
    let call = async {
        let mut stream = TestServiceClient::new(channel)
            .full_duplex_call(request)
            .await?
            .into_inner();
        stream.message().await.map(|_| ())
    };
    let outcome = tokio::time::timeout(BOUND, call).await;
    drop(tx);
    match outcome {
        Err(_) => Err(format!("hung: no end within {BOUND:?}")),
        Ok(Ok(())) => Err("ended OK or with a message".to_owned()),
        Ok(Err(status)) => Ok(status.code()),
    }
}

fn last_line(output: &str) -> String {
    output
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("(no output)")
        .to_owned()
}
