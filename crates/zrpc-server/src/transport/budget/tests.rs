use super::*;
use futures_util::StreamExt;
use http_body_util::{BodyExt, StreamBody};
use std::task::{Context, Poll};
use tower_layer::Layer;
use tower_service::Service;

type Frames = Vec<Result<Frame<Bytes>, Status>>;

fn message(len: usize) -> Vec<u8> {
    let mut m = vec![0u8];
    m.extend_from_slice(&u32::try_from(len).unwrap().to_be_bytes());
    m.extend(std::iter::repeat_n(7u8, len));
    m
}

/// A body yielding `chunks`, then staying open (never ending).
fn open_body(chunks: Vec<Vec<u8>>) -> impl http_body::Body<Data = Bytes, Error = Status> {
    let frames: Frames = chunks
        .into_iter()
        .map(|c| Ok(Frame::data(Bytes::from(c))))
        .collect();
    StreamBody::new(futures_util::stream::iter(frames).chain(futures_util::stream::pending()))
}

async fn next(
    body: &mut Pin<Box<BudgetedBody<impl http_body::Body<Data = Bytes, Error = Status>>>>,
) -> Option<Result<Frame<Bytes>, Status>> {
    body.frame().await
}

#[tokio::test]
async fn follows_messages_across_chunks_and_releases_completed_ones() {
    let budget = Arc::new(Budget::new(Some(1 << 20), None));
    let m = message(100);
    let mut two = m.clone();
    two.extend_from_slice(&m[..30]);
    let chunks = vec![m[..3].to_vec(), m[3..50].to_vec(), m[50..].to_vec(), two];
    let mut body = Box::pin(BudgetedBody::new(open_body(chunks), budget.clone()));
    next(&mut body).await.unwrap().unwrap();
    assert_eq!(budget.used(), 3);
    next(&mut body).await.unwrap().unwrap();
    assert_eq!(budget.used(), 50);
    next(&mut body).await.unwrap().unwrap();
    assert_eq!(budget.used(), 0, "a whole message is released");
    next(&mut body).await.unwrap().unwrap();
    assert_eq!(budget.used(), 30, "only the started message stays charged");
    drop(body);
    assert_eq!(budget.used(), 0, "dropping the call releases its charge");
}

#[tokio::test]
async fn a_spent_budget_ends_the_call_with_resource_exhausted() {
    let budget = Arc::new(Budget::new(Some(1000), None));
    let big = message(4000);
    let mut first = Box::pin(BudgetedBody::new(
        open_body(vec![big[..600].to_vec()]),
        budget.clone(),
    ));
    next(&mut first).await.unwrap().unwrap();
    let mut second = Box::pin(BudgetedBody::new(
        open_body(vec![big[..600].to_vec()]),
        budget.clone(),
    ));
    let err = next(&mut second).await.unwrap().unwrap_err();
    assert_eq!(err.code(), tonic::Code::ResourceExhausted);
    assert!(err.message().contains("Transport.MaxBufferedRequestBytes"));
    assert!(next(&mut second).await.is_none());
    assert_eq!(budget.used(), 600);
    drop(first);
    assert_eq!(budget.used(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_message_that_never_completes_times_out_but_a_quiet_stream_does_not() {
    let budget = Arc::new(Budget::new(None, Some(Duration::from_secs(5))));
    // Between messages: no timeout.
    let whole = message(10);
    let mut quiet = Box::pin(BudgetedBody::new(open_body(vec![whole]), budget.clone()));
    next(&mut quiet).await.unwrap().unwrap();
    assert!(
        tokio::time::timeout(Duration::from_secs(60), next(&mut quiet))
            .await
            .is_err()
    );
    // Inside a message: ResourceExhausted at the timeout.
    let started = tokio::time::Instant::now();
    let mut slow = Box::pin(BudgetedBody::new(
        open_body(vec![message(100)[..20].to_vec()]),
        budget.clone(),
    ));
    next(&mut slow).await.unwrap().unwrap();
    let err = next(&mut slow).await.unwrap().unwrap_err();
    assert_eq!(err.code(), tonic::Code::ResourceExhausted);
    assert!(err.message().contains("Transport.MessageReceiveTimeout"));
    assert_eq!(started.elapsed(), Duration::from_secs(5));
}

#[tokio::test]
async fn one_connection_cannot_take_the_whole_server_budget() {
    let budget = Arc::new(Budget::new(Some(10_000), None).with_conn_max(Some(1000)));
    let (a, b) = (Arc::new(ConnState::new()), Arc::new(ConnState::new()));
    let big = message(4000);
    let call = |conn: &Arc<ConnState>| {
        Box::pin(
            BudgetedBody::new(open_body(vec![big[..600].to_vec()]), budget.clone())
                .on_connection(Some(conn.clone())),
        )
    };
    let mut a1 = call(&a);
    next(&mut a1).await.unwrap().unwrap();
    let mut a2 = call(&a);
    let err = next(&mut a2).await.unwrap().unwrap_err();
    assert_eq!(err.code(), tonic::Code::ResourceExhausted);
    assert!(
        err.message()
            .contains("Transport.MaxConnectionBufferedRequestBytes"),
        "{err}"
    );
    assert_eq!(budget.used(), 600, "the refused charge is not kept");
    assert_eq!(a.buffered.load(Ordering::Acquire), 600);
    // Another connection still has the rest of the server's budget.
    let mut b1 = call(&b);
    next(&mut b1).await.unwrap().unwrap();
    assert_eq!(budget.used(), 1200);
    drop((a1, a2, b1));
    assert_eq!(budget.used(), 0);
    assert_eq!(a.buffered.load(Ordering::Acquire), 0);
    assert_eq!(b.buffered.load(Ordering::Acquire), 0);
}

/// The budget layer gives each call its `CallFacts` and records them as `FactsBody` would
/// around its body, and `FactsLayer` adds no second wrapper.
#[tokio::test]
async fn the_budgeted_body_records_the_call_facts_in_place_of_facts_body() {
    use crate::call::{Blame, CallFacts, FactsLayer};
    use tower::ServiceExt;
    use zrpc_core::grpc::code;

    let budget = Arc::new(Budget::new(Some(1000), None));
    let svc = |budget: Arc<Budget>| {
        tower::ServiceBuilder::new()
            .layer(RequestBudget::new(Some(budget), None))
            .layer(FactsLayer::new(true))
            .service(tower::service_fn(|req: Request<Body>| async move {
                let facts = req.extensions().get::<CallFacts>().cloned().unwrap();
                let collected = req.into_body().collect().await;
                Ok::<_, std::convert::Infallible>((facts, collected.is_ok()))
            }))
    };
    // A whole request: read to its end, a failure is the server's.
    let whole = Request::new(Body::new(http_body_util::Full::new(Bytes::from(message(
        10,
    )))));
    let (facts, ok) = svc(budget.clone()).oneshot(whole).await.unwrap();
    assert!(ok && facts.request_ended());
    assert_eq!(facts.blame(code::INTERNAL), Blame::Server);
    // A message past the budget: the body fails, the caller is blamed.
    let big = message(4000);
    let frames: Frames = vec![Ok(Frame::data(Bytes::copy_from_slice(&big[..2000])))];
    let over = Request::new(Body::new(StreamBody::new(futures_util::stream::iter(
        frames,
    ))));
    let (facts, ok) = svc(budget.clone()).oneshot(over).await.unwrap();
    assert!(!ok && !facts.request_ended());
    assert_eq!(facts.blame(code::INTERNAL), Blame::Caller);
    assert_eq!(budget.used(), 0);
}

// The budget as a tower layer of its own, for these tests (the serve loop applies it to each
// request, `serve::Intake`).

impl RequestBudget {
    /// `req` with its body under the budget (untouched when no limit is set) and its facts
    /// in its extensions. `conn`: the state of the request's connection, charged when the
    /// budget has a per-connection share.
    fn apply_ext(&self, req: Request<Body>, conn: Option<&Arc<ConnState>>) -> Request<Body> {
        let (mut req, facts) = self.apply(req, conn);
        req.extensions_mut().insert(facts);
        req
    }
}

impl<S> Layer<S> for RequestBudget {
    type Service = Budgeted<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Budgeted {
            inner,
            settings: self.clone(),
        }
    }
}

/// The budget as a service, for these tests.
#[derive(Debug, Clone)]
pub(crate) struct Budgeted<S> {
    inner: S,
    settings: RequestBudget,
}

impl<S> Service<Request<Body>> for Budgeted<S>
where
    S: Service<Request<Body>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        let conn = self
            .settings
            .conns
            .as_ref()
            .and_then(|t| t.of_request(&req));
        let req = self.settings.apply_ext(req, conn.as_ref());
        self.inner.call(req)
    }
}
