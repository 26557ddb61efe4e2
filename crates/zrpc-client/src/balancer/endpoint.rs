//! One server: its address, its stats and its HTTP/2 connection (made when a call needs it, and
//! again once lost: see `conn`; the picker's back-off spaces the attempts). A lost
//! connection, a call past its deadline or stalled calls make it suspect until an out-of-band
//! probe is answered.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use pin_project_lite::pin_project;

use tonic::body::Body;
use tower::BoxError;
use zrpc_core::grpc::{OnStatus, StatusGuard, code};

use super::conn::{Conn, Connecting, ResponseFuture};
use super::stats::{Clock, EjectionLimit, EndpointStats};
use super::wire::{Connector, FirstAnswer, Mark, Wire};
use crate::failure::{
    BodyFailure, Closing, ConnectFailed, DeadlinePassed, body_failure, connect_failure_counted,
    is_connection_loss, is_h2_failure, is_timeout, never_reached_server, remote_reset, reset_code,
};

/// Connection settings of the endpoints.
#[derive(Debug, Clone, Default)]
pub(crate) struct ConnectOptions {
    /// HTTP/2 keepalive ping interval (`KeepaliveTime`), `None` = off.
    pub(crate) keepalive: Option<Duration>,
    /// The connect's timeout: the TCP connect (applied by `wire::Connector`) and the TLS
    /// handshake together.
    pub(crate) connect_timeout: Option<Duration>,
    /// TLS (`Tls` block), `None` = plaintext.
    pub(crate) tls: Option<crate::tls::TlsConfig>,
    /// The cap on ejected endpoints, shared by the balancer's set (`P2c.MaxEjectedPercent`).
    pub(crate) ejection: Arc<EjectionLimit>,
}

/// A server endpoint.
#[derive(Debug)]
pub(crate) struct Endpoint {
    pub(crate) addr: Arc<str>,
    pub(crate) stats: EndpointStats,
    conn: Conn,
    /// Writes and losses of its connections (see `wire`).
    pub(crate) wire: Arc<Wire>,
    /// The balancer's cap on ejected endpoints.
    ejection: Arc<EjectionLimit>,
    /// `wire.reads()` at the last stall check.
    reads_seen: AtomicU64,
    /// How the probes connect: a connection of their own each (see [`Endpoint::probe`]).
    probe_with: Connector,
}

impl AsRef<EndpointStats> for Endpoint {
    fn as_ref(&self) -> &EndpointStats {
        &self.stats
    }
}

impl AsRef<EndpointStats> for Arc<Endpoint> {
    fn as_ref(&self) -> &EndpointStats {
        &self.stats
    }
}

/// How an attempt failed before any response.
#[derive(Debug)]
pub(crate) struct AttemptError {
    pub(crate) status: tonic::Status,
    /// The request provably never reached a server (safe to send elsewhere).
    pub(crate) retryable: bool,
}

/// `addr` as an endpoint's `host:port`, or why it is not one.
pub(crate) fn parse_address(addr: &str) -> Result<http::uri::Authority, String> {
    let authority: http::uri::Authority =
        addr.parse().map_err(|e| format!("not a host:port: {e}"))?;
    // an authority may lack its port, which the connect would take as 80: grpc-go's dialer
    // refuses such an address too ("missing port in address")
    if authority.port_u16().is_none() {
        return Err("not a host:port: no port".to_owned());
    }
    Ok(authority)
}

impl Endpoint {
    /// An endpoint, not connected yet; an error for an address that is no `host:port` (or,
    /// with TLS, whose host is no server name).
    pub(crate) fn new(addr: &str, opts: &ConnectOptions) -> Result<Endpoint, String> {
        let authority = parse_address(addr)?;
        let tls = match &opts.tls {
            Some(tls) => Some(
                tls.for_host(
                    authority
                        .host()
                        .trim_start_matches('[')
                        .trim_end_matches(']'),
                )?,
            ),
            None => None,
        };
        let wire = Arc::new(Wire::default());
        // plain TCP with TCP_NODELAY and the connect timeout, watched to prove a failed request
        // was never written
        let connector = Connector {
            wire: wire.clone(),
            connect_timeout: opts.connect_timeout,
            plaintext: opts.tls.is_none(),
        };
        let probe_with = Connector {
            wire: Arc::new(Wire::default()),
            ..connector.clone()
        };
        Ok(Endpoint {
            addr: Arc::from(addr),
            stats: EndpointStats::new(),
            conn: Conn::new(authority, connector, tls, opts.keepalive),
            wire,
            ejection: Arc::clone(&opts.ejection),
            reads_seen: AtomicU64::new(0),
            probe_with,
        })
    }

    /// Sends `req` (already picked: in flight + 1 at `start`) and wires its completion to the stats:
    /// from the final gRPC status of the response (headers or trailers; a drop counts as
    /// cancelled, or deadline exceeded past `deadline`). A transport error marks the endpoint
    /// down (back-off), unless a connection on its way out turned the request away, and reports
    /// whether the request can be sent again. `timeout` (the
    /// call's `grpc-timeout`) is quoted when the attempt's timer ends the call.
    #[inline]
    pub(crate) fn send(
        self: Arc<Self>,
        (clock, start): (Clock, u64),
        deadline: Option<Instant>,
        timeout: Option<Duration>,
        req: http::Request<Body>,
        target: &Arc<str>,
    ) -> Attempt {
        let mark = self.wire.mark();
        let guard = StatusGuard::new(Done {
            endpoint: Arc::clone(&self),
            clock,
            start,
            deadline,
            mark,
        });
        let state = match self.conn.send(req) {
            Ok(fut) => AttemptState::Sent { fut },
            Err(waiting) => AttemptState::Connecting { waiting },
        };
        Attempt {
            state,
            endpoint: self,
            guard,
            mark,
            timeout,
            target: Arc::clone(target),
            deadline,
            watchdog: None,
        }
    }

    /// Whether the endpoint answered a call within [`PROBE_TIMEOUT`] of `now` and has had no
    /// transport failure since (see [`Endpoint::failed`]).
    fn answered_lately(&self, done: Option<&Done>, now: Instant) -> bool {
        done.is_some_and(|d| {
            !self.stats.is_probing()
                && self
                    .stats
                    .answered_within(d.clock.nanos(now), PROBE_TIMEOUT.as_nanos() as u64)
        })
    }

    /// The error of a failed attempt (see [`Endpoint::send`]), recorded on the endpoint: at or
    /// after the call's deadline (the attempt's timer, or the server ending the call then)
    /// `DeadlineExceeded`, recorded as any deadline; a stream the server reset, the
    /// code of its reason (not a transport failure); anything else a transport failure,
    /// `Unavailable`.
    fn failed(
        &self,
        err: BoxError,
        guard: &mut StatusGuard<Done>,
        mark: Mark,
        timeout: Option<Duration>,
        target: &str,
    ) -> AttemptError {
        let done = guard.take();
        let now = Instant::now();
        let past_deadline = done
            .as_ref()
            .and_then(|d| d.deadline)
            .is_some_and(crate::failure::is_past);
        let reset = remote_reset(&*err);
        if is_timeout(&*err) || (past_deadline && reset.is_some()) {
            if let Some(done) = done {
                done.finish(code::DEADLINE_EXCEEDED, now);
            }
            return AttemptError {
                status: crate::failure::deadline_exceeded(timeout),
                retryable: false,
            };
        }
        if let Some(reason) = reset.filter(|r| *r != h2::Reason::REFUSED_STREAM) {
            let c = reset_code(reason);
            if let Some(done) = done {
                done.finish(c, now);
            }
            return AttemptError {
                status: tonic::Status::new(
                    tonic::Code::from(c),
                    format!(
                        "{target}: endpoint {}: stream terminated by RST_STREAM with error code: \
                         {reason:?}",
                        self.addr
                    ),
                ),
                retryable: false,
            };
        }
        // A connection on its way out turned the request away: a graceful GOAWAY (the server
        // is up and said so), or hyper's cancel of a queued request on an endpoint that answered
        // a call in the last second and has had no transport failure since (a cancel is also how
        // a server that does not speak HTTP/2 to this client, or rejects its certificate, fails
        // a call, also one that answered before a certificate expired: that stays a transport
        // failure, with its back-off). No failure of the endpoint. After a GOAWAY its next call
        // connects anew, so that a re-send does not land on the closing connection, whose
        // sender hyper has not closed yet (the streams below the GOAWAY still run on it); a
        // cancel comes once hyper closed the sender, and the next call connects anew anyway.
        let closing = match crate::failure::closing(&*err) {
            Some(Closing::Canceled) if !self.answered_lately(done.as_ref(), now) => None,
            c => c,
        };
        if closing == Some(Closing::GoAway) {
            self.conn.recycle();
        }
        if let Some(done) = done {
            if closing.is_some() || connect_failure_counted(&*err) {
                done.never_sent();
            } else {
                done.transport_failure(now);
            }
        }
        let lost = is_connection_loss(&*err);
        let retryable = never_reached_server(&*err)
            || (lost && (self.wire.unsent_since(mark) || self.wire.only_silent_losses_since(mark)));
        // a plaintext connection answered with a TLS record fails in h2 (it reads the record
        // as a frame), or in hyper for a request h2 had not taken yet: say what the bytes were
        let answer = self.wire.first_answer();
        let hint = if answer == FirstAnswer::Tls && is_h2_failure(&*err) {
            "; the server answered with a TLS record: the server may require TLS (set Tls in the \
             client config)"
        } else if answer == FirstAnswer::Http1 && (is_h2_failure(&*err) || lost) {
            "; the server answered in HTTP/1.1: it is not a gRPC server (gRPC needs HTTP/2)"
        } else if answer == FirstAnswer::Nothing && (is_h2_failure(&*err) || lost) {
            "; the server closed the connection before sending a byte: it may not be a gRPC \
             server (an HTTP/1.1 server closes so on the HTTP/2 preface)"
        } else if self.wire.closed_since(mark) {
            "; the connection was closed by the client after a probe got no answer and no byte \
             for 1s (a frozen or unreachable server)"
        } else {
            ""
        };
        let message = if reset == Some(h2::Reason::REFUSED_STREAM) {
            // h2's own words for a refused stream say nothing of what it means
            "stream terminated by RST_STREAM with error code: REFUSED_STREAM".to_owned()
        } else {
            crate::failure::describe(&*err)
        };
        let status = tonic::Status::unavailable(format!(
            "{target}: endpoint {}: {message}{hint}",
            self.addr
        ));
        if past_deadline {
            // the call is over: its caller learns that, the endpoint what happened
            return AttemptError {
                status: crate::failure::deadline_exceeded(timeout),
                retryable: false,
            };
        }
        AttemptError { status, retryable }
    }
}

/// How long an out-of-band probe waits for its answer.
pub(crate) const PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// The pause after a probe that got no answer: doubling from the first to the second.
const PROBE_PAUSES: (Duration, Duration) = (Duration::from_millis(100), Duration::from_secs(1));
/// The probe: gRPC's health check of the whole server (`service: ""`), an empty message.
const PROBE_PATH: &str = "/grpc.health.v1.Health/Check";

impl Endpoint {
    /// Marks the endpoint suspect when its calls stalled at `now` (ns): see
    /// [`EndpointStats::is_stalled`]. The balancer checks its endpoints a few times a second.
    /// Bytes read since the last check, or waiting unread in the kernel (the client did not get
    /// to read them yet), count as heard. A check that ran `late` (the client's runtime did not
    /// run: it may not even have sent its calls) starts the silence again: a client starved of
    /// CPU must not take its servers for stalled.
    pub(crate) fn check_stall(self: &Arc<Self>, clock: Clock, now: u64, late: bool) {
        let reads = self.wire.reads();
        if self.reads_seen.swap(reads, Ordering::Relaxed) != reads || late {
            self.stats.heard(now);
        } else if self.stats.is_stalled(now) {
            if self.wire.has_unread() {
                self.stats.heard(now);
            } else {
                self.suspect(clock, "calls stalled");
            }
        }
    }

    /// Makes the endpoint suspect as soon as its last connection is lost (a read EOF or an I/O
    /// error: the server was killed, restarted or closed it), as grpc-go takes a subchannel whose
    /// connection broke out of its picker. No user call then learns of a dead server by being
    /// sent there; a server that only closed an idle connection answers the probe at once.
    pub(crate) fn watch_connection(self: &Arc<Self>, clock: Clock) {
        let endpoint = Arc::downgrade(self);
        self.wire.on_connection_lost(move || {
            if let Some(ep) = endpoint.upgrade() {
                ep.suspect(clock, "connection lost");
            }
        });
    }

    /// A call ran into its deadline here, its calls stalled or its connection was lost (`why`):
    /// the endpoint turns suspect (no user call goes to it while another endpoint is usable)
    /// until an out-of-band probe is answered. A deadline says nothing of why: a server that
    /// froze, a lost network path, or only a slow call; the probe, not the next user call, finds
    /// out which.
    pub(crate) fn suspect(self: &Arc<Self>, clock: Clock, why: &'static str) {
        if !self.stats.suspect() {
            return;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                tracing::debug!(endpoint = %self.addr, "{why}: probing the endpoint out of band");
                rt.spawn(probe_until_answered(Arc::downgrade(self), clock));
            }
            // no runtime to probe from (a body dropped outside one): usable again at once
            Err(_) => self.stats.clear_suspect(clock.nanos(Instant::now())),
        }
    }

    /// Sends the probe on a connection of its own: true when the server answered anything (a
    /// server without the health service answers `Unimplemented`, which is an answer). Not on
    /// the calls' connection: there the probe would wait behind the server's stream limit
    /// when long calls fill it, and find nothing wrong with a server that only runs them.
    async fn probe(&self) -> bool {
        let Ok(mut sender) = self.conn.connect_apart(self.probe_with.clone()).await else {
            return false;
        };
        let mut req = http::Request::new(Body::new(http_body_util::Full::new(
            bytes::Bytes::from_static(&[0, 0, 0, 0, 0]),
        )));
        *req.method_mut() = http::Method::POST;
        *req.uri_mut() = http::Uri::from_static(PROBE_PATH);
        let headers = req.headers_mut();
        headers.insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/grpc"),
        );
        headers.insert(http::header::TE, http::HeaderValue::from_static("trailers"));
        self.conn.origin(&mut req);
        sender.send_request(req).await.is_ok()
    }
}

/// Probes a suspect endpoint until it answers (or is dropped): one probe at a time (see
/// [`probe_once`]), paused 100 ms doubling to 1 s between them. A probe that found the server
/// silent (no answer and no byte on any connection of the endpoint for [`PROBE_TIMEOUT`])
/// found a server that answers neither a new connection nor the old ones: those are closed, so
/// that the calls stuck on them fail now (and a retry policy can send them elsewhere) rather
/// than at their deadlines.
async fn probe_until_answered(endpoint: std::sync::Weak<Endpoint>, clock: Clock) {
    let mut pause = PROBE_PAUSES.0;
    loop {
        let Some(ep) = endpoint.upgrade() else {
            return;
        };
        match probe_once(&ep).await {
            Probed::Answered => {
                tracing::debug!(endpoint = %ep.addr, "probe answered: the endpoint is usable again");
                ep.stats.clear_suspect(clock.nanos(Instant::now()));
                return;
            }
            // the next probe connects again
            Probed::Unanswered => {}
            Probed::Silent => {
                let closed = ep.wire.close_all();
                if closed > 0 {
                    tracing::warn!(endpoint = %ep.addr, "no answer and no byte for {PROBE_TIMEOUT:?}: closed {closed} connection(s)");
                }
            }
        }
        drop(ep);
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(PROBE_PAUSES.1);
    }
}

/// How often a probe waiting for its answer looks at the endpoint's connections.
const PROBE_SLICE: Duration = Duration::from_millis(100);

/// What one probe found.
#[derive(Debug, PartialEq, Eq)]
enum Probed {
    /// The server answered.
    Answered,
    /// The probe could not connect, or got no answer within [`PROBE_TIMEOUT`] though the
    /// server was heard: a byte came, or waits unread, on a connection of the endpoint (the
    /// probe's own included, where a live server sends its SETTINGS at once).
    Unanswered,
    /// Nothing came on any connection of the endpoint, the probe's own included, for
    /// [`PROBE_TIMEOUT`] of time the client ran: a frozen server, or a lost path to it.
    Silent,
}

/// Sends one probe and waits for its answer, looking at the endpoint's connections every
/// [`PROBE_SLICE`]. Silence counts only while the client's runtime runs: a slice that ends
/// late (the runtime was starved of CPU, or the process stopped) starts it again, for the
/// client may not have sent the probe, nor read what came back, and has heard nothing of the
/// server by its own fault. Bytes waiting unread count as heard for the same reason.
async fn probe_once(ep: &Endpoint) -> Probed {
    let probe = ep.probe();
    tokio::pin!(probe);
    let wires = [&ep.wire, &ep.probe_with.wire];
    let reads = wires.map(|w| w.reads());
    let begun = tokio::time::Instant::now();
    let mut silent_for = Duration::ZERO;
    let mut heard = false;
    loop {
        let slice = tokio::time::Instant::now();
        match tokio::time::timeout(PROBE_SLICE, &mut probe).await {
            Ok(true) => return Probed::Answered,
            Ok(false) => return Probed::Unanswered,
            Err(_elapsed) => {}
        }
        let took = slice.elapsed();
        heard = heard
            || wires
                .iter()
                .zip(reads)
                .any(|(w, before)| w.reads() != before);
        silent_for = if took > 2 * PROBE_SLICE {
            Duration::ZERO
        } else {
            silent_for + took
        };
        // bytes waiting unread are looked for (a system call per connection) only when the
        // silence would otherwise be concluded
        if !heard && silent_for >= PROBE_TIMEOUT {
            if !wires.iter().any(|w| w.has_unread()) {
                return Probed::Silent;
            }
            heard = true;
        }
        if heard && begun.elapsed() >= PROBE_TIMEOUT {
            return Probed::Unanswered;
        }
    }
}

pin_project! {
    /// One attempt on an endpoint ([`Endpoint::send`]): a named future.
    ///
    /// The call's `deadline` is enforced by the attempt's own timer, armed the first time the
    /// attempt waits (the connect, or the response): at expiry the attempt fails with
    /// `DeadlineExceeded`, whether it was still waiting for a connection or for the answer.
    pub(crate) struct Attempt {
        state: AttemptState,
        endpoint: Arc<Endpoint>,
        guard: StatusGuard<Done>,
        mark: Mark,
        timeout: Option<Duration>,
        target: Arc<str>,
        deadline: Option<Instant>,
        #[pin]
        watchdog: Option<tokio::time::Sleep>,
    }
}

/// True once `deadline` has passed: arms `watchdog` at `deadline` (once) and polls it.
fn deadline_passed(
    mut watchdog: Pin<&mut Option<tokio::time::Sleep>>,
    deadline: Option<Instant>,
    cx: &mut Context<'_>,
) -> bool {
    let Some(deadline) = deadline else {
        return false;
    };
    if watchdog.is_none() {
        watchdog.set(Some(tokio::time::sleep_until(
            tokio::time::Instant::from_std(deadline),
        )));
    }
    watchdog
        .as_pin_mut()
        .is_some_and(|sleep| sleep.poll(cx).is_ready())
}

enum AttemptState {
    // No live connection when the attempt started: its request waits for the connect.
    Connecting { waiting: Connecting },
    Sent { fut: ResponseFuture },
    Done,
}

impl std::fmt::Debug for Attempt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Attempt")
            .field("endpoint", &self.endpoint.addr)
            .finish_non_exhaustive()
    }
}

impl Future for Attempt {
    type Output = Result<Answer, AttemptError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            let result: Result<http::Response<hyper::body::Incoming>, BoxError> = match this.state {
                AttemptState::Connecting { waiting } => match Pin::new(waiting).poll(cx) {
                    Poll::Ready(Ok(Ok(fut))) => {
                        *this.state = AttemptState::Sent { fut };
                        continue;
                    }
                    Poll::Ready(Ok(Err(e))) => Err(e.into()),
                    // the connect task is gone (the runtime shuts down)
                    Poll::Ready(Err(closed)) => Err(ConnectFailed::new(closed).into()),
                    Poll::Pending
                        if deadline_passed(this.watchdog.as_mut(), *this.deadline, cx) =>
                    {
                        Err(DeadlinePassed.into())
                    }
                    Poll::Pending => return Poll::Pending,
                },
                AttemptState::Sent { fut } => match fut.as_mut().poll(cx) {
                    Poll::Ready(r) => r.map_err(Into::into),
                    Poll::Pending
                        if deadline_passed(this.watchdog.as_mut(), *this.deadline, cx) =>
                    {
                        Err(DeadlinePassed.into())
                    }
                    Poll::Pending => return Poll::Pending,
                },
                // polled again after completing
                AttemptState::Done => return Poll::Pending,
            };
            *this.state = AttemptState::Done;
            return Poll::Ready(match result {
                Ok(resp) => Ok(Answer {
                    resp: resp.map(Body::new),
                    done: this.guard.take(),
                }),
                Err(err) => Err(this.endpoint.failed(
                    err,
                    this.guard,
                    *this.mark,
                    *this.timeout,
                    this.target,
                )),
            });
        }
    }
}

/// The response of an attempt, its final status not read yet: `done` records it on the endpoint.
///
/// The client reads it once for `done` and its observing stage together (`client::finish`), so
/// a call's body is wrapped once and its status parsed once, whatever the attempts were.
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) resp: http::Response<Body>,
    /// `None` once reported (a trailers-only answer that the retry stage read to decide).
    pub(crate) done: Option<Done>,
}

/// Records the completion of one request on its endpoint.
#[derive(Debug)]
pub(crate) struct Done {
    endpoint: Arc<Endpoint>,
    clock: Clock,
    start: u64,
    deadline: Option<Instant>,
    /// The endpoint's connections when the request went out.
    mark: Mark,
}

impl OnStatus for Done {
    fn on_status(self, c: i32) {
        self.finish(c, Instant::now());
    }
}

impl Done {
    /// The completion of a call picked now on `endpoint` (its pick counted by the caller).
    #[cfg(test)]
    pub(crate) fn for_test(endpoint: Arc<Endpoint>) -> Done {
        let clock = Clock::new(Instant::now());
        Done {
            start: clock.nanos(Instant::now()),
            clock,
            deadline: None,
            mark: endpoint.wire.mark(),
            endpoint,
        }
    }

    /// The call was never sent (its connect failed, and another call that waited for it
    /// counted the failure; or a connection on its way out turned it away): it releases its
    /// place and records nothing.
    pub(crate) fn never_sent(self) {
        self.endpoint.stats.on_abandon();
    }

    /// Records the final code `c`, the call having ended at `now`.
    pub(crate) fn finish(self, c: i32, now: Instant) {
        let c = if c == code::CANCELLED && self.deadline.is_some_and(|d| now >= d) {
            code::DEADLINE_EXCEEDED
        } else {
            c
        };
        let endpoint = &self.endpoint;
        endpoint
            .stats
            .on_done_limited(self.start, self.clock.nanos(now), c, &endpoint.ejection);
        if c != code::DEADLINE_EXCEEDED {
            return;
        }
        // Not a byte on the endpoint's connections for the whole of a call that waited a
        // probe's timeout or more: the connection carries nothing. The next call gets a new
        // one; if the server is gone, the probe finds it silent and closes both.
        let waited = self.clock.nanos(now).saturating_sub(self.start);
        if waited >= PROBE_TIMEOUT.as_nanos() as u64 && endpoint.wire.silent_since(self.mark) {
            tracing::debug!(endpoint = %endpoint.addr, "a call's deadline passed with no byte from the server: the next call connects anew");
            endpoint.conn.recycle();
        }
        if !endpoint.stats.recently_verified(self.clock.nanos(now)) {
            endpoint.suspect(self.clock, "no answer in time");
        }
    }
}

impl Done {
    /// Records a transport failure of the endpoint (down for a back-off, see
    /// [`EndpointStats::on_transport_failure`]), the call having ended at `now`.
    pub(crate) fn transport_failure(self, now: Instant) {
        let endpoint = &self.endpoint;
        endpoint.stats.on_transport_failure_limited(
            self.start,
            self.clock.nanos(now),
            &endpoint.ejection,
        );
    }

    /// Records the failure of the response body that tonic reported as `status`, at `now`
    /// (before the call's deadline: a failure at or after it is the deadline's), and returns
    /// the status the caller gets and its code: a reset stream its code; a lost connection
    /// `Unavailable` (grpc-go's code for a broken connection), a transport failure of the
    /// endpoint.
    pub(crate) fn body_failed(self, status: tonic::Status, now: Instant) -> tonic::Status {
        let lost = self.endpoint.wire.lost_since(self.mark);
        match body_failure(&status, lost) {
            BodyFailure::Reset(c) => {
                self.finish(c, now);
                status
            }
            BodyFailure::Connection => {
                let message = format!(
                    "endpoint {}: connection lost while receiving the response: {}",
                    self.endpoint.addr,
                    status.message()
                );
                self.transport_failure(now);
                tonic::Status::unavailable(message)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stall check that finds the server's answer waiting unread (the client's runtime was
    /// busy elsewhere, or the check ran first in the turn that brought the answer), or that ran
    /// late (the runtime did not run: the calls may not even have been sent), takes no server
    /// for stalled; on time, with nothing waiting, the same calls stall the endpoint.
    #[tokio::test]
    async fn a_starved_client_takes_no_server_for_stalled() {
        use tokio::io::AsyncWriteExt;
        let clock = Clock::new(Instant::now());
        // (bytes waiting unread, the check ran late, stalled)
        for (answered, late, stalled) in [
            (true, false, false),
            (false, true, false),
            (false, false, true),
        ] {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap().to_string();
            let ep = Arc::new(Endpoint::new(&addr, &ConnectOptions::default()).unwrap());
            let mut connector = Connector {
                wire: Arc::clone(&ep.wire),
                connect_timeout: None,
                plaintext: true,
            };
            let uri: http::Uri = format!("http://{addr}").parse().unwrap();
            let conn = tower::Service::call(&mut connector, uri).await.unwrap();
            let (mut server, _) = listener.accept().await.unwrap();
            if answered {
                // a SETTINGS frame's first bytes, which the client does not read
                server.write_all(&[0, 0, 0, 4]).await.unwrap();
                conn.inner().readable().await.unwrap();
                assert!(
                    ep.wire.has_unread(),
                    "the server's bytes reached the client"
                );
            } else {
                assert!(!ep.wire.has_unread());
            }
            ep.stats.on_pick_at(clock.nanos(Instant::now()));
            let later = clock.nanos(Instant::now() + 2 * crate::balancer::stats::STALL_MIN);
            ep.check_stall(clock, later, late);
            assert_eq!(
                ep.stats.is_suspect(),
                stalled,
                "bytes waiting unread: {answered}, late: {late}"
            );
            drop((conn, server));
        }
    }

    /// What a server on a thread of its own (a starved client runtime does not stop it) sends
    /// on each connection it accepts; it never answers a call.
    #[derive(Debug, Clone, Copy)]
    enum Mute {
        /// Nothing at all: a frozen server, or a lost path.
        Nothing,
        /// An HTTP/2 SETTINGS frame at once, as every HTTP/2 server does.
        Settings,
        /// A SETTINGS frame once it has read the client's first bytes (as a TLS server answers
        /// only the client's hello).
        SettingsAfterClient,
    }

    /// A [`Mute`] server on a thread of its own, until [`MuteServer::stop`].
    struct MuteServer {
        addr: String,
        stop: Arc<std::sync::atomic::AtomicBool>,
        thread: std::thread::JoinHandle<()>,
    }

    impl MuteServer {
        fn start(mute: Mute) -> MuteServer {
            use std::io::{Read, Write};
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = listener.local_addr().unwrap().to_string();
            let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let stopped = Arc::clone(&stop);
            let thread = std::thread::spawn(move || {
                let mut open = Vec::new();
                while let Ok((mut socket, _)) = listener.accept() {
                    if stopped.load(Ordering::SeqCst) {
                        return;
                    }
                    // bounded: a client that never writes cannot keep the thread from stopping
                    let _ = socket.set_read_timeout(Some(Duration::from_secs(3)));
                    if let Mute::SettingsAfterClient = mute {
                        let _ = socket.read(&mut [0u8; 1]);
                    }
                    if !matches!(mute, Mute::Nothing) {
                        let _ = socket.write_all(&[0, 0, 0, 4, 0, 0, 0, 0, 0]);
                    }
                    open.push(socket);
                }
            });
            MuteServer { addr, stop, thread }
        }

        /// Sets the flag, wakes the accept with a connection of its own, waits for the thread.
        fn stop(self) {
            self.stop.store(true, Ordering::SeqCst);
            let _ = std::net::TcpStream::connect(&self.addr);
            self.thread.join().unwrap();
        }
    }

    /// A probe concludes that a server is silent (and the endpoint's connections are closed)
    /// only when nothing came on any connection of the endpoint, the probe's own included, for
    /// a whole probe timeout while the client ran. A server that sent its SETTINGS is alive,
    /// though it did not answer in time; a client whose runtime was blocked for longer than the
    /// timeout before it wrote its probe has heard nothing by its own fault, and waits to be
    /// heard once it runs again.
    #[tokio::test]
    async fn only_a_silent_server_is_found_silent_by_a_probe() {
        // (what the server sends, the client's runtime blocked for 1.5 s as the probe starts,
        // what the probe finds)
        for (mute, starved, found) in [
            (Mute::Nothing, false, Probed::Silent),
            (Mute::Settings, false, Probed::Unanswered),
            (Mute::SettingsAfterClient, true, Probed::Unanswered),
        ] {
            let server = MuteServer::start(mute);
            let ep = Arc::new(Endpoint::new(&server.addr, &ConnectOptions::default()).unwrap());
            let begun = Instant::now();
            let mut probe = std::pin::pin!(probe_once(&ep));
            if starved {
                // the probe starts (one poll: its connect begins, nothing is written yet), then
                // the runtime's one thread is held
                std::future::poll_fn(|cx| {
                    assert!(probe.as_mut().poll(cx).is_pending());
                    Poll::Ready(())
                })
                .await;
                std::thread::sleep(Duration::from_millis(1500));
            }
            let probed = probe.await;
            let took = begun.elapsed();
            assert_eq!(
                probed, found,
                "{mute:?}, starved: {starved}, after {took:?}"
            );
            assert!(
                took >= PROBE_TIMEOUT && took < PROBE_TIMEOUT * 3,
                "{mute:?}: found {probed:?} after {took:?}"
            );
            server.stop();
        }
    }

    /// A server that answers every call with OK (trailers only), except on its first
    /// connection, which goes dark at its second call: never read or written again (a path a
    /// middlebox dropped without a reset), while other connections are answered. Counts the
    /// connections it accepted.
    async fn dark_after_one_call() -> (String, Arc<std::sync::atomic::AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let connections = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = Arc::clone(&connections);
        tokio::spawn(async move {
            loop {
                let (io, _) = listener.accept().await.unwrap();
                let first = counted.fetch_add(1, Ordering::SeqCst) == 0;
                tokio::spawn(async move {
                    let mut conn = h2::server::handshake(io).await.unwrap();
                    let mut answered = 0;
                    while let Some(Ok((_req, mut respond))) = conn.accept().await {
                        if first && answered == 1 {
                            std::future::pending::<()>().await;
                        }
                        let head = http::Response::builder()
                            .header("content-type", "application/grpc")
                            .header("grpc-status", "0")
                            .body(())
                            .unwrap();
                        let _ = respond.send_response(head, true);
                        answered += 1;
                    }
                });
            }
        });
        (addr, connections)
    }

    /// A call whose deadline passed after a probe's timeout or more with no byte from the
    /// server on the endpoint's connections lets its connection go: the next call is sent on a
    /// new one, not into the same silence until the kernel gives up on it.
    #[tokio::test]
    async fn a_connection_silent_for_a_whole_call_is_let_go() {
        let (addr, connections) = dark_after_one_call().await;
        let ep = Arc::new(Endpoint::new(&addr, &ConnectOptions::default()).unwrap());
        let clock = Clock::new(Instant::now());
        let target: Arc<str> = Arc::from("direct:///test");
        let call = |timeout: Duration| {
            let now = clock.nanos(Instant::now());
            ep.stats.on_pick_at(now);
            Arc::clone(&ep).send(
                (clock, now),
                Some(Instant::now() + timeout),
                Some(timeout),
                http::Request::new(Body::empty()),
                &target,
            )
        };
        drop(call(Duration::from_secs(5)).await.expect("answered"));
        let err = call(Duration::from_millis(1200)).await.unwrap_err();
        assert_eq!(err.status.code(), tonic::Code::DeadlineExceeded);
        let next = tokio::time::timeout(Duration::from_secs(1), call(Duration::from_secs(5)))
            .await
            .expect("the next call is not sent into the dark connection");
        drop(next.expect("answered"));
        assert!(connections.load(Ordering::SeqCst) >= 2);
    }

    /// An endpoint's address is a `host:port`: one without a port is refused, not dialled
    /// on port 80.
    #[test]
    fn an_address_without_a_port_is_refused() {
        let opts = ConnectOptions::default();
        for ok in ["127.0.0.1:8080", "[::1]:8080", "greeter.svc:8080"] {
            assert!(Endpoint::new(ok, &opts).is_ok(), "{ok}");
        }
        for bad in ["127.0.0.1", "greeter.svc", "[::1]", "127.0.0.1:", "a b:1"] {
            let err = Endpoint::new(bad, &opts).unwrap_err();
            assert!(err.starts_with("not a host:port"), "{bad}: {err}");
        }
    }

    /// The calls that waited for one connect that failed count it once: one step of the
    /// endpoint's back-off and of its failure streak, the others released as never sent.
    #[tokio::test]
    async fn one_failed_connect_is_one_transport_failure() {
        let refused = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = refused.local_addr().unwrap().to_string();
        drop(refused);
        let ep = Arc::new(Endpoint::new(&addr, &ConnectOptions::default()).unwrap());
        let clock = Clock::new(Instant::now());
        let target: Arc<str> = Arc::from("direct:///test");
        let attempts: Vec<_> = (0..7)
            .map(|_| {
                let now = clock.nanos(Instant::now());
                ep.stats.on_pick_at(now);
                Arc::clone(&ep).send(
                    (clock, now),
                    None,
                    None,
                    http::Request::new(Body::empty()),
                    &target,
                )
            })
            .collect();
        assert!(
            attempts
                .iter()
                .all(|a| matches!(a.state, AttemptState::Connecting { .. })),
            "all wait for the one connect"
        );
        for attempt in attempts {
            let err = attempt.await.unwrap_err();
            assert!(err.retryable, "a connect error never reached the server");
        }
        assert_eq!(ep.stats.inflight(), 0);
        assert_eq!(ep.stats.fail_streak.load(Ordering::Relaxed), 1);
        let down_for =
            ep.stats.down_until() - clock.nanos(Instant::now()).min(ep.stats.down_until());
        assert!(
            down_for <= crate::balancer::stats::BACKOFF_BASE.as_nanos() as u64,
            "one step of back-off: down for {down_for} ns"
        );
    }

    /// The deadline ends an attempt whether it waits for its connection or for the answer.
    #[tokio::test]
    async fn the_deadline_ends_an_attempt_waiting_to_connect_or_for_its_answer() {
        // A listener whose accept queue (backlog 0: one connection) is full: the kernel drops
        // the SYNs of further connects, which then wait for their retransmissions.
        let sock = tokio::net::TcpSocket::new_v4().unwrap();
        sock.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let full = sock.listen(0).unwrap();
        let addr = full.local_addr().unwrap().to_string();
        let mut queued = Vec::new();
        for _ in 0..2 {
            if let Ok(Ok(c)) = tokio::time::timeout(
                Duration::from_millis(200),
                tokio::net::TcpStream::connect(&addr),
            )
            .await
            {
                queued.push(c);
            }
        }
        // A listener that accepts (the backlog) and never answers.
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let silent_addr = silent.local_addr().unwrap().to_string();
        let clock = Clock::new(Instant::now());
        let target: Arc<str> = Arc::from("direct:///test");
        for (addr, connecting) in [(&addr, true), (&silent_addr, false)] {
            let ep = Arc::new(Endpoint::new(addr, &ConnectOptions::default()).unwrap());
            let begun = Instant::now();
            let mut attempt = Box::pin(Arc::clone(&ep).send(
                (clock, clock.nanos(Instant::now())),
                Some(begun + Duration::from_millis(300)),
                Some(Duration::from_millis(300)),
                http::Request::new(Body::empty()),
                &target,
            ));
            assert!(matches!(attempt.state, AttemptState::Connecting { .. }));
            // driven to its end: still connecting to the full listener, sent to the silent one
            let mut sent = false;
            let ended = std::future::poll_fn(|cx| {
                let r = attempt.as_mut().poll(cx);
                sent |= r.is_pending() && matches!(attempt.state, AttemptState::Sent { .. });
                r
            })
            .await;
            assert_eq!(sent, !connecting, "{addr}: sent {sent}");
            let err = ended.unwrap_err();
            assert_eq!(
                err.status.code(),
                tonic::Code::DeadlineExceeded,
                "{}",
                err.status
            );
            let took = begun.elapsed();
            assert!(
                took >= Duration::from_millis(250) && took < Duration::from_secs(2),
                "{addr}: ended after {took:?}"
            );
        }
        drop((full, queued, silent));
    }
}
