//! Bytes of request messages received but not yet whole, bounded per server and per
//! connection, and the time one message may take to arrive (`Transport.MaxBufferedRequestBytes`,
//! `Transport.MaxConnectionBufferedRequestBytes`, `Transport.MessageReceiveTimeout`).
//!
//! tonic keeps the octets of a message in its decode buffer until the message is complete
//! (up to the 4 MiB message limit), for unary and streaming calls alike. A caller that starts
//! large messages and never finishes them on many streams holds that memory for as long as it
//! likes. [`RequestBudget`] follows the gRPC framing (1-octet flag, 4-octet length) of
//! each request body, charges the octets of the incomplete message to a per-server budget and
//! to its connection's share, and ends the call with `ResourceExhausted` when either is spent
//! or when a started message has not arrived whole within the timeout. The connection's share
//! (default half the server's) keeps one connection from taking the whole server budget and
//! failing every other client's large messages. tonic then drops the call and its buffer. The
//! error is a request-body error, so the breaker blames the caller (`call/facts.rs`).
//! A call idle *between* messages (a quiet bidi stream) is not affected.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes};
use http::Request;
use http_body::{Frame, SizeHint};
use pin_project_lite::pin_project;
use tokio::time::Sleep;
use tonic::Status;
use tonic::body::Body;
use zrpc_core::grpc::framing::{self, Followed, Framing};

use super::streams::ConnTable;
use crate::call::{CallFacts, ConnState, FactsBody, record_frame};

use tower::BoxError;

/// The per-server budget, the per-connection share and the message timeout.
#[derive(Debug)]
pub(crate) struct Budget {
    max: Option<usize>,
    used: AtomicUsize,
    conn_max: Option<usize>,
    message_timeout: Option<Duration>,
    /// The largest uncompressed request message (`MaxDecompressedSize`; a compressed one is
    /// the compression layer's).
    max_message: Option<usize>,
}

/// Adds `n` to `used` unless that passes `max`.
fn charge_to(used: &AtomicUsize, max: Option<usize>, n: usize) -> bool {
    let before = used.fetch_add(n, Ordering::AcqRel);
    if max.is_some_and(|max| before.saturating_add(n) > max) {
        used.fetch_sub(n, Ordering::AcqRel);
        false
    } else {
        true
    }
}

impl Budget {
    /// A budget of `max` octets (`None` = unbounded), `message_timeout` per message.
    pub(crate) fn new(max: Option<usize>, message_timeout: Option<Duration>) -> Self {
        Budget {
            max,
            used: AtomicUsize::new(0),
            conn_max: None,
            message_timeout,
            max_message: None,
        }
    }

    /// Refuses uncompressed request messages longer than `max` octets.
    pub(crate) fn with_max_message(mut self, max: Option<usize>) -> Self {
        self.max_message = max;
        self
    }

    /// At most `conn_max` octets per connection (`None` = only the server's budget).
    pub(crate) fn with_conn_max(mut self, conn_max: Option<usize>) -> Self {
        self.conn_max = conn_max;
        self
    }

    /// Charges `n` octets to the server and to `conn`; the limit that stopped it otherwise.
    fn charge(&self, conn: Option<&ConnState>, n: usize) -> Result<(), &'static str> {
        if !charge_to(&self.used, self.max, n) {
            return Err("request messages being received on this server exceed \
                 Transport.MaxBufferedRequestBytes");
        }
        if let Some(conn) = conn
            && !charge_to(&conn.buffered, self.conn_max, n)
        {
            self.used.fetch_sub(n, Ordering::AcqRel);
            return Err("request messages being received on this connection exceed \
                 Transport.MaxConnectionBufferedRequestBytes");
        }
        Ok(())
    }

    fn release(&self, conn: Option<&ConnState>, n: usize) {
        if n > 0 {
            self.used.fetch_sub(n, Ordering::AcqRel);
            if let Some(conn) = conn {
                conn.buffered.fetch_sub(n, Ordering::AcqRel);
            }
        }
    }

    /// Octets charged now (for tests).
    #[cfg(test)]
    pub(crate) fn used(&self) -> usize {
        self.used.load(Ordering::Acquire)
    }
}

/// Wraps each request body in a [`BudgetedBody`] (the serve loop's `Intake`), or when no limit
/// is set in a [`FactsBody`]: either records the call's [`CallFacts`].
#[derive(Debug, Clone)]
pub(crate) struct RequestBudget {
    budget: Option<Arc<Budget>>,
    /// The server's connections, where the per-connection share is counted.
    conns: Option<Arc<ConnTable>>,
}

impl RequestBudget {
    /// Charges to `budget` and, when it has a per-connection share, to the request's
    /// connection in `conns`; `None` leaves request bodies untouched.
    pub(crate) fn new(budget: Option<Arc<Budget>>, conns: Option<Arc<ConnTable>>) -> Self {
        let conns = conns.filter(|_| budget.as_ref().is_some_and(|b| b.conn_max.is_some()));
        RequestBudget { budget, conns }
    }
}

impl RequestBudget {
    /// `req` with its body under the budget (when a limit is set), on the body as hyper gave
    /// it: boxed once, here, as tonic's `Body`. `conn`: the state of the request's connection,
    /// charged when the budget has a per-connection share. Also the call's [`CallFacts`],
    /// which this body records.
    #[inline]
    pub(crate) fn apply<RB>(
        &self,
        req: Request<RB>,
        conn: Option<&Arc<ConnState>>,
    ) -> (Request<Body>, CallFacts)
    where
        RB: http_body::Body<Data = Bytes> + Send + 'static,
        RB::Error: Into<BoxError>,
    {
        let facts = CallFacts::default();
        let Some(budget) = self.budget.as_ref() else {
            let req = req.map(|inner| Body::new(FactsBody::new(inner, facts.clone())));
            return (req, facts);
        };
        let conn = self.conns.as_ref().and(conn).cloned();
        let req = req.map(|inner| {
            let mut body = BudgetedBody::new(inner, budget.clone()).on_connection(conn);
            body.facts = Some(facts.clone());
            Body::new(body)
        });
        (req, facts)
    }
}

pin_project! {
    /// A request body whose incomplete message is charged to the server's [`Budget`].
    #[derive(Debug)]
    pub(crate) struct BudgetedBody<B> {
        #[pin]
        inner: B,
        budget: Arc<Budget>,
        conn: Option<Arc<ConnState>>,
        // Where the body is in its messages.
        framing: Framing,
        // Octets of the current (incomplete) message charged to the budget.
        charged: usize,
        timer: Option<Pin<Box<Sleep>>>,
        timer_armed: bool,
        done: bool,
        // What `FactsBody` would record around this body's output (`call/facts.rs`).
        facts: Option<CallFacts>,
    }

    impl<B> PinnedDrop for BudgetedBody<B> {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            this.budget.release(this.conn.as_deref(), *this.charged);
        }
    }
}

impl<B> BudgetedBody<B> {
    /// Wraps a request body.
    pub(crate) fn new(inner: B, budget: Arc<Budget>) -> Self {
        BudgetedBody {
            inner,
            budget,
            conn: None,
            framing: Framing::default(),
            charged: 0,
            timer: None,
            timer_armed: false,
            done: false,
            facts: None,
        }
    }

    /// Charges the connection's share too.
    pub(crate) fn on_connection(mut self, conn: Option<Arc<ConnState>>) -> Self {
        self.conn = conn;
        self
    }
}

impl<B> http_body::Body for BudgetedBody<B>
where
    B: http_body::Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let frame = std::task::ready!(self.as_mut().poll_budgeted(cx));
        record_frame(self.project().facts, &frame);
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.done || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl<B> BudgetedBody<B>
where
    B: http_body::Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    /// The body's frames under the budget (`poll_frame` before the facts are recorded).
    fn poll_budgeted(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let mut this = self.project();
        if *this.done {
            return Poll::Ready(None);
        }
        let frame = match this.inner.as_mut().poll_frame(cx) {
            Poll::Ready(frame) => frame,
            Poll::Pending => {
                if *this.timer_armed
                    && let Some(t) = this.timer.as_mut()
                    && t.as_mut().poll(cx).is_ready()
                {
                    *this.done = true;
                    this.budget
                        .release(this.conn.as_deref(), std::mem::take(this.charged));
                    let timeout = this.budget.message_timeout.unwrap_or_default();
                    return Poll::Ready(Some(Err(Status::resource_exhausted(format!(
                        "request message not received whole within \
                         Transport.MessageReceiveTimeout ({timeout:?})"
                    )))));
                }
                return Poll::Pending;
            }
        };
        let frame = match frame {
            Some(Ok(frame)) => frame,
            end => {
                this.budget
                    .release(this.conn.as_deref(), std::mem::take(this.charged));
                // As tonic's `Body` maps its inner body's errors.
                return Poll::Ready(end.map(|r| r.map_err(|e| Status::from_error(e.into()))));
            }
        };
        let Some(data) = frame.data_ref() else {
            return Poll::Ready(Some(Ok(frame)));
        };
        let Followed {
            pending,
            octets,
            completed,
            oversized,
        } = this.framing.follow(data.chunk(), this.budget.max_message);
        if let (Some(len), Some(max)) = (oversized, this.budget.max_message) {
            *this.done = true;
            this.budget
                .release(this.conn.as_deref(), std::mem::take(this.charged));
            return Poll::Ready(Some(Err(Status::resource_exhausted(framing::too_large(
                len, max,
            )))));
        }
        if completed {
            this.budget
                .release(this.conn.as_deref(), std::mem::take(this.charged));
            *this.timer_armed = false;
        }
        if pending {
            let new = if completed { octets } else { data.len() };
            if let Err(limit) = this.budget.charge(this.conn.as_deref(), new) {
                *this.done = true;
                this.budget
                    .release(this.conn.as_deref(), std::mem::take(this.charged));
                return Poll::Ready(Some(Err(Status::resource_exhausted(limit))));
            }
            *this.charged += new;
            if !*this.timer_armed
                && let Some(timeout) = this.budget.message_timeout
            {
                let deadline = tokio::time::Instant::now() + timeout;
                match this.timer.as_mut() {
                    Some(t) => t.as_mut().reset(deadline),
                    None => *this.timer = Some(Box::pin(tokio::time::sleep_until(deadline))),
                }
                *this.timer_armed = true;
            }
        }
        Poll::Ready(Some(Ok(frame)))
    }
}

use std::future::Future as _;

#[cfg(test)]
mod tests;
