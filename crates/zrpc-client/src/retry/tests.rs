use std::time::Duration;

use tokio::sync::watch;

use super::*;
use crate::balancer::endpoint::ConnectOptions;
use crate::conf::BalancerName;
use crate::resolver::ResolverStatus;

// The retry stage as a tower service (its answers wired to nothing but their endpoints):
// only tests use it (here and the observing stage's, `layers::observe`); the client runs the
// stage in `Client::call`.

impl tower::Service<http::Request<Body>> for Retry {
    type Response = http::Response<Body>;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<http::Response<Body>, BoxError>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        let now = Instant::now();
        let (deadline, timeout) = crate::layers::timeout::caller_deadline(&req, now);
        let call = Retry::call(self, req, deadline, timeout, now);
        Box::pin(async move { crate::response::end(call.await, deadline, timeout, None, None) })
    }
}

fn addrs(v: &[&str]) -> Arc<Vec<String>> {
    Arc::new(v.iter().map(|s| (*s).to_owned()).collect())
}

/// A retry stage without policies over a balancer fed by `rx`.
fn stage(target: &str, rx: crate::resolver::EndpointUpdates, status: ResolverStatus) -> Retry {
    let b = Balancer::with_status(
        Arc::from(target),
        BalancerName::P2cEwma,
        rx,
        ConnectOptions::default(),
        1,
        status,
        None,
    );
    Retry::new(b, None)
}

fn status_of(e: BoxError) -> tonic::Status {
    *e.downcast::<tonic::Status>().unwrap()
}

#[tokio::test]
async fn calls_name_the_resolvers_problem() {
    use tower::ServiceExt;

    let (tx, rx) = watch::channel(None);
    let status = ResolverStatus::default();
    let retry = stage("etcd:///h:1?key=k", rx, status.clone());
    let req = || http::Request::new(Body::empty());
    // No answer yet: the call waits; a reported problem fails it at once, with the cause.
    let call = tokio::spawn(retry.clone().oneshot(req()));
    tokio::task::yield_now().await;
    status.set(Some("etcd unreachable at h:1: connection refused".into()));
    let s = status_of(call.await.unwrap().unwrap_err());
    assert_eq!(s.code(), tonic::Code::Unavailable);
    assert_eq!(
        s.message(),
        "no endpoint available for target etcd:///h:1?key=k: etcd unreachable at h:1: connection refused"
    );
    // An empty key: the resolver's words again.
    status.set(Some("no endpoints registered under key \"k\"".into()));
    tx.send_replace(Some(Arc::new(Vec::new())));
    retry.balancer().shared.wait_ready().await;
    let s = status_of(retry.clone().oneshot(req()).await.unwrap_err());
    assert!(
        s.message()
            .ends_with("no endpoints registered under key \"k\""),
        "{s:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_call_waiting_for_its_first_endpoints_ends_at_its_deadline() {
    use tower::ServiceExt;

    let (_tx, rx) = watch::channel(None);
    let retry = stage("dns:///h:1", rx, ResolverStatus::default());
    let mut req = http::Request::new(Body::empty());
    req.headers_mut()
        .insert("grpc-timeout", http::HeaderValue::from_static("1S"));
    let begun = tokio::time::Instant::now();
    let s = status_of(retry.oneshot(req).await.unwrap_err());
    assert_eq!(s.code(), tonic::Code::DeadlineExceeded);
    assert!(
        s.message().contains("no answer from its source yet"),
        "{s:?}"
    );
    assert!(begun.elapsed() >= Duration::from_millis(990));
}

#[tokio::test]
async fn empty_set_is_unavailable_naming_the_target() {
    use tower::ServiceExt;

    let (tx, rx) = watch::channel(None);
    let retry = stage("etcd:///h:2379?key=svc", rx, ResolverStatus::default());
    tx.send_replace(Some(addrs(&[])));
    retry.balancer().shared.wait_ready().await;
    let status = status_of(
        retry
            .oneshot(http::Request::new(Body::empty()))
            .await
            .unwrap_err(),
    );
    assert_eq!(status.code(), tonic::Code::Unavailable);
    assert!(
        status.message().contains("etcd:///h:2379?key=svc"),
        "{status:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn calls_wait_for_the_first_endpoint_set() {
    use tower::ServiceExt;

    let (tx, rx) = watch::channel(None);
    let retry = stage("t", rx, ResolverStatus::default());
    let call = retry.clone().oneshot(http::Request::new(Body::empty()));
    let waited = tokio::time::timeout(Duration::from_secs(1), call).await;
    assert!(waited.is_err(), "no set yet: the call waits");
    let call = retry.oneshot(http::Request::new(Body::empty()));
    tx.send_replace(Some(addrs(&[])));
    let err = status_of(call.await.unwrap_err());
    assert_eq!(err.code(), tonic::Code::Unavailable);
}

#[tokio::test]
async fn a_request_that_never_reached_a_server_is_sent_to_other_endpoints_three_times_in_all() {
    use tower::ServiceExt;

    let (_tx, rx) = watch::channel(Some(Arc::new(crate::refusing_endpoints(5))));
    let retry = stage("direct:///refusing", rx, ResolverStatus::default());
    // a unary request (a complete body, kept for the re-sends)
    let req = http::Request::new(Body::new(http_body_util::Full::new(
        bytes::Bytes::from_static(b"\0\0\0\0\0"),
    )));
    let s = status_of(retry.clone().oneshot(req).await.unwrap_err());
    assert_eq!(s.code(), tonic::Code::Unavailable, "{s:?}");
    let set = retry.balancer().shared.endpoints();
    let sent: Vec<u64> = set.iter().map(|e| e.stats.requests()).collect();
    assert_eq!(sent.iter().sum::<u64>(), MAX_ATTEMPTS as u64, "{sent:?}");
    assert!(
        sent.iter().all(|&n| n <= 1),
        "each to another endpoint: {sent:?}"
    );
    assert!(set.iter().all(|e| e.stats.inflight() == 0));
}

/// A request that reached no server is re-sent to an endpoint that is only suspect (it stalled,
/// a call ran into its deadline or its connection was lost, and no probe has answered yet) when
/// no other is left: failing it instead is certain. An endpoint in back-off after a transport
/// failure is passed over: a re-send there would meet the same failure.
#[tokio::test]
async fn a_request_that_never_reached_a_server_goes_to_a_suspect_endpoint_not_to_one_in_back_off() {
    use tower::ServiceExt;

    // (the other endpoint is in back-off, sends)
    for (backoff, sends) in [(false, 2), (true, 1)] {
        let (_tx, rx) = watch::channel(Some(Arc::new(crate::refusing_endpoints(2))));
        let retry = stage("direct:///refusing", rx, ResolverStatus::default());
        retry.balancer().shared.wait_ready().await;
        let set = retry.balancer().shared.endpoints();
        // far ahead of the picker's clock: in back-off for the whole test
        let later = u64::MAX / 4;
        for e in set.iter() {
            assert!(e.stats.suspect());
            if backoff {
                e.stats.on_pick();
                e.stats.on_transport_failure(later, later);
            }
        }
        let req = http::Request::new(Body::new(http_body_util::Full::new(
            bytes::Bytes::from_static(b"\0\0\0\0\0"),
        )));
        let s = status_of(retry.clone().oneshot(req).await.unwrap_err());
        assert_eq!(s.code(), tonic::Code::Unavailable, "{s:?}");
        let sent: Vec<u64> = set
            .iter()
            .map(|e| e.stats.requests() - u64::from(backoff))
            .collect();
        assert_eq!(
            sent.iter().sum::<u64>(),
            sends,
            "in back-off: {backoff}: {sent:?}"
        );
    }
}

#[tokio::test]
async fn a_request_whose_body_cannot_be_kept_gets_one_attempt() {
    use tower::ServiceExt;

    let (_tx, rx) = watch::channel(Some(Arc::new(crate::refusing_endpoints(3))));
    let retry = stage("direct:///refusing", rx, ResolverStatus::default());
    // a client stream whose next message is not ready: nothing to send again
    let (_more, pending) =
        tokio::sync::mpsc::channel::<Result<http_body::Frame<bytes::Bytes>, tonic::Status>>(1);
    let body = Body::new(http_body_util::StreamBody::new(
        tokio_stream::wrappers::ReceiverStream::new(pending),
    ));
    let s = status_of(
        retry
            .clone()
            .oneshot(http::Request::new(body))
            .await
            .unwrap_err(),
    );
    assert_eq!(s.code(), tonic::Code::Unavailable, "{s:?}");
    let sent: u64 = retry
        .balancer()
        .shared
        .endpoints()
        .iter()
        .map(|e| e.stats.requests())
        .sum();
    assert_eq!(sent, 1);
}
