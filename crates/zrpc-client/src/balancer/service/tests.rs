use std::time::Duration;

use zrpc_core::grpc::code;

use super::*;

// The balancer as a tower service, and its plain constructor: only tests use them (here and
// the observing stage's, `layers::observe`); the client starts its calls with
// `Balancer::start` in `Client::call`.

impl Balancer {
    /// Creates the balancer (no resolver status, no anchor timer) and spawns the task applying
    /// `updates`.
    pub(crate) fn new(
        target: Arc<str>,
        kind: BalancerName,
        updates: EndpointUpdates,
        connect: ConnectOptions,
        seed: u64,
    ) -> Balancer {
        Balancer::with_status(
            target,
            kind,
            updates,
            connect,
            seed,
            ResolverStatus::default(),
            None,
        )
    }
}

impl Shared {
    /// The slow path on its own: a call made before the first endpoint set (it waits for one).
    async fn call(
        self: Arc<Self>,
        req: http::Request<Body>,
    ) -> Result<http::Response<Body>, BoxError> {
        let (deadline, timeout) = call_deadline(&req, Instant::now);
        self.call_at(req, deadline, timeout).await
    }
}

impl tower::Service<http::Request<Body>> for Balancer {
    type Response = http::Response<Body>;
    type Error = BoxError;
    type Future = ResponseFuture;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        let now = Instant::now();
        let (deadline, timeout) = call_deadline(&req, || now);
        ResponseFuture {
            call: self.start(req, deadline, timeout, now),
        }
    }
}

pin_project! {
    /// The response future of the balancer as a service: a [`Call`] whose answer's body is
    /// wrapped to record its final status on the endpoint.
    pub(crate) struct ResponseFuture {
        #[pin]
        call: Call,
    }
}

impl std::fmt::Debug for ResponseFuture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

impl Future for ResponseFuture {
    type Output = Result<http::Response<Body>, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.project().call.poll(cx).map_ok(Answer::into_response)
    }
}

fn addrs(v: &[&str]) -> Arc<Vec<String>> {
    Arc::new(v.iter().map(|s| (*s).to_owned()).collect())
}

#[tokio::test]
async fn calls_name_the_resolvers_problem() {
    let (tx, rx) = watch::channel(None);
    let status = ResolverStatus::default();
    let b = Balancer::with_status(
        Arc::from("etcd:///h:1?key=k"),
        BalancerName::P2cEwma,
        rx,
        ConnectOptions::default(),
        1,
        status.clone(),
        None,
    );
    let req = || http::Request::new(Body::empty());
    // No answer yet: the call waits; a reported problem fails it at once, with the cause.
    let call = tokio::spawn(Arc::clone(&b.shared).call(req()));
    tokio::task::yield_now().await;
    status.set(Some("etcd unreachable at h:1: connection refused".into()));
    let e = call.await.unwrap().unwrap_err();
    let s = e.downcast_ref::<tonic::Status>().unwrap();
    assert_eq!(s.code(), tonic::Code::Unavailable);
    assert_eq!(
        s.message(),
        "no endpoint available for target etcd:///h:1?key=k: etcd unreachable at h:1: connection refused"
    );
    // An empty key: the resolver's words again.
    status.set(Some("no endpoints registered under key \"k\"".into()));
    tx.send_replace(Some(Arc::new(Vec::new())));
    b.shared.wait_ready().await;
    let e = Arc::clone(&b.shared).call(req()).await.unwrap_err();
    let s = e.downcast_ref::<tonic::Status>().unwrap();
    assert!(
        s.message()
            .ends_with("no endpoints registered under key \"k\""),
        "{s:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_call_waiting_for_its_first_endpoints_ends_at_its_deadline() {
    let (_tx, rx) = watch::channel(None);
    let b = Balancer::new(
        Arc::from("dns:///h:1"),
        BalancerName::P2cEwma,
        rx,
        ConnectOptions::default(),
        1,
    );
    let mut req = http::Request::new(Body::empty());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(1);
    req.extensions_mut().insert(Deadline(deadline.into_std()));
    let e = Arc::clone(&b.shared).call(req).await.unwrap_err();
    let s = e.downcast_ref::<tonic::Status>().unwrap();
    assert_eq!(s.code(), tonic::Code::Unavailable);
    assert!(
        s.message().contains("no answer from its source yet"),
        "{s:?}"
    );
}

#[tokio::test]
async fn stats_and_connections_survive_endpoint_set_updates() {
    let (tx, rx) = watch::channel(None);
    let b = Balancer::new(
        Arc::from("direct:///test"),
        BalancerName::P2cEwma,
        rx,
        ConnectOptions::default(),
        1,
    );
    assert!(!b.shared.is_ready());
    tx.send_replace(Some(addrs(&["127.0.0.1:1", "127.0.0.1:2"])));
    b.shared.wait_ready().await;
    let first = b.shared.endpoints();
    assert_eq!(first.len(), 2);
    let a = first
        .iter()
        .find(|e| &*e.addr == "127.0.0.1:1")
        .unwrap()
        .clone();
    a.stats.on_pick();
    a.stats.on_done(0, 5_000_000, code::OK);
    assert_eq!(a.stats.lag(), Some(Duration::from_millis(5)));

    // b leaves, c joins: a keeps its Arc (stats and channel), c starts cold
    tx.send_replace(Some(addrs(&["127.0.0.1:1", "127.0.0.1:3"])));
    for _ in 0..100 {
        if b.shared
            .endpoints()
            .iter()
            .any(|e| &*e.addr == "127.0.0.1:3")
        {
            break;
        }
        tokio::task::yield_now().await;
    }
    let second = b.shared.endpoints();
    let names: Vec<&str> = second.iter().map(|e| &*e.addr).collect();
    assert!(
        names.contains(&"127.0.0.1:1") && names.contains(&"127.0.0.1:3") && names.len() == 2,
        "{names:?}"
    );
    let a2 = second.iter().find(|e| &*e.addr == "127.0.0.1:1").unwrap();
    assert!(Arc::ptr_eq(&a, a2), "same endpoint object");
    assert_eq!(a2.stats.lag(), Some(Duration::from_millis(5)));
    let c = second.iter().find(|e| &*e.addr == "127.0.0.1:3").unwrap();
    assert!(c.stats.is_probing() && c.stats.lag().is_none());
}

#[tokio::test]
async fn empty_set_is_unavailable_naming_the_target() {
    let (tx, rx) = watch::channel(None);
    let mut b = Balancer::new(
        Arc::from("etcd:///h:2379?key=svc"),
        BalancerName::P2cEwma,
        rx,
        ConnectOptions::default(),
        1,
    );
    tx.send_replace(Some(addrs(&[])));
    b.shared.wait_ready().await;
    let req = http::Request::new(Body::empty());
    let err = tower::Service::call(&mut b, req).await.unwrap_err();
    let status = err.downcast::<tonic::Status>().unwrap();
    assert_eq!(status.code(), tonic::Code::Unavailable);
    assert!(
        status.message().contains("etcd:///h:2379?key=svc"),
        "{status:?}"
    );
}

#[tokio::test]
async fn update_task_ends_when_the_balancer_is_dropped() {
    let (tx, rx) = watch::channel(None);
    let b = Balancer::new(
        Arc::from("t"),
        BalancerName::P2cEwma,
        rx,
        ConnectOptions::default(),
        1,
    );
    assert_eq!(tx.receiver_count(), 1, "the update task holds the receiver");
    drop(b);
    tokio::time::timeout(Duration::from_secs(5), tx.closed())
        .await
        .unwrap();
}

#[test]
fn the_anchor_runs_at_half_the_timeout_from_200_ms() {
    assert_eq!(
        anchor_period(Duration::from_secs(2)),
        Some(Duration::from_secs(1))
    );
    assert_eq!(
        anchor_period(Duration::from_millis(200)),
        Some(Duration::from_millis(100))
    );
    assert_eq!(anchor_period(Duration::from_millis(199)), None);
}

#[tokio::test(start_paused = true)]
async fn an_anchored_update_task_outlives_its_resolver_and_ends_with_the_balancer() {
    let (tx, rx) = watch::channel(Some(addrs(&["127.0.0.1:1"])));
    let b = Balancer::with_status(
        Arc::from("t"),
        BalancerName::P2cEwma,
        rx,
        ConnectOptions::default(),
        1,
        ResolverStatus::default(),
        Some(Duration::from_secs(2)),
    );
    let alive = b.shared.alive.subscribe();
    drop(tx);
    // the resolver is gone: the set stays, the task keeps its timer through many periods
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(b.shared.endpoints().len(), 1);
    assert_eq!(b.shared.alive.receiver_count(), 2, "the task still runs");
    drop(alive);
    let tasks = || {
        tokio::runtime::Handle::current()
            .metrics()
            .num_alive_tasks()
    };
    assert!(
        tasks() >= 1,
        "the update task (and the endpoint's channel worker)"
    );
    drop(b);
    for _ in 0..100 {
        if tasks() == 0 {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(tasks(), 0, "the update task ends with the balancer");
}

#[tokio::test(start_paused = true)]
async fn calls_wait_for_the_first_endpoint_set() {
    let (tx, rx) = watch::channel(None);
    let mut b = Balancer::new(
        Arc::from("t"),
        BalancerName::P2cEwma,
        rx,
        ConnectOptions::default(),
        1,
    );
    let call = tower::Service::call(&mut b, http::Request::new(Body::empty()));
    let waited = tokio::time::timeout(Duration::from_secs(1), call).await;
    assert!(waited.is_err(), "no set yet: the call waits");
    let call = tower::Service::call(&mut b, http::Request::new(Body::empty()));
    tx.send_replace(Some(addrs(&[])));
    let err = call.await.unwrap_err().downcast::<tonic::Status>().unwrap();
    assert_eq!(err.code(), tonic::Code::Unavailable);
}
