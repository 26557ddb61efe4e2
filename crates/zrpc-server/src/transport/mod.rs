//! The server's transport: how connections are accepted and what limits they live under
//! (`Transport:` config block, `docs/security.md`).
//!
//! - [`incoming`]: zrpc's accept loop (back-off on accept errors, connection cap, TCP_NODELAY,
//!   then [`Guarded`](conn::Guarded) around the stream);
//! - [`Guarded`](conn::Guarded): handshake timeout, hard end of a connection's age grace, and
//!   the one scan of the client's frames ([`frames`]) for the handshake, the frame policies and
//!   the `:authority` repair;
//! - [`serve`]: zrpc's serve loop over hyper, with every HTTP/2 limit set explicitly (streams
//!   per connection, header list, resets, windows, keepalive) and a GOAWAY at the maximum
//!   connection age and after `MaxConnectionIdle`. Before the chain sees a request, it puts its
//!   body under the budget of incomplete request messages per server and per connection and the
//!   time a started message may take to arrive ([`budget`]), the body recording the call's
//!   facts, and what it knows of the call in its extensions (`crate::call::Arrival`: the
//!   connection, the facts, the call's count in flight, the caller's deadline);
//! - [`Front`](front::Front), the chain's first stage: calls open per connection, for the idle
//!   timeout ([`streams`]); HTTP 415 for requests that are not gRPC ([`content_type`]);
//!   `Tls.AllowedClients`.
//!
//! hyper 1 / h2 0.4 offer no minimum interval for the client's pings (grpc-go's
//! `EnforcementPolicy`, GOAWAY `too_many_pings`) and no limit on control frames or on streams
//! reset after they were accepted: zrpc enforces those below h2 ([`frames`]) and counts and
//! logs every connection cut for breaking a limit ([`cuts`]).

mod accept;
pub(crate) mod authority;
mod backoff;
mod budget;
pub(crate) mod conn;
pub(crate) mod connections;
mod content_type;
mod cuts;
pub(crate) mod frames;
pub(crate) mod front;
pub(crate) mod io;
mod pings;
pub(crate) mod serve;
mod streams;

use std::sync::Arc;

pub(crate) use accept::{AcceptSettings, Incoming, incoming};
pub(crate) use budget::{Budget, RequestBudget};
pub(crate) use conn::ConnLimits;
pub(crate) use front::FrontLayer;
pub(crate) use streams::ConnTable;

use crate::conf::TransportConf;

/// A listener on `port` of every interface, IPv6 and IPv4, as Go's `:port` listens (a server's
/// `ListenOn: ":8080"`, the DevServer's empty `Host`): an IPv6 socket that takes IPv4 too, or
/// IPv4 alone where the host has no IPv6. `0.0.0.0` alone would refuse a client or a probe that
/// reaches an IPv6-only pod's address.
pub(crate) fn all_interfaces(port: u16) -> std::io::Result<tokio::net::TcpListener> {
    use socket2::{Domain, Socket, Type};
    // IPv4 alone only where the host has no IPv6; any other error (the port in use) is the
    // bind's error, not a reason to serve half the addresses
    let socket = match Socket::new(Domain::IPV6, Type::STREAM, None) {
        Ok(socket) => socket,
        Err(_) => {
            let socket = std::net::TcpListener::bind((std::net::Ipv4Addr::UNSPECIFIED, port))?;
            socket.set_nonblocking(true)?;
            return tokio::net::TcpListener::from_std(socket);
        }
    };
    let dual = move || -> std::io::Result<tokio::net::TcpListener> {
        socket.set_only_v6(false)?;
        // as tokio's `TcpListener::bind` does: a restarted server binds at once
        socket.set_reuse_address(true)?;
        socket.bind(&std::net::SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, port)).into())?;
        socket.listen(1024)?;
        socket.set_nonblocking(true)?;
        tokio::net::TcpListener::from_std(socket.into())
    };
    dual()
}

/// The accept-loop settings for `conf`.
pub(crate) fn accept_settings(conf: &TransportConf, authority_repair: bool) -> AcceptSettings {
    AcceptSettings {
        limits: ConnLimits {
            handshake_timeout: conf.handshake_timeout(),
            max_age: conf.max_connection_age(),
            age_grace: conf.max_connection_age_grace(),
            ping_min_time: conf.keepalive_min_time(),
        },
        max_connections: conf.max_connections(),
        authority_repair,
        table: (conf.max_connection_idle().is_some()
            || conf.max_connection_buffered_request_bytes().is_some())
        .then(|| Arc::new(ConnTable::default())),
        tls: None,
        tcp_keepalive: conf.tcp_keepalive(),
        cuts: Arc::default(),
    }
}

/// The HTTP/2 settings of `conf` for zrpc's serve loop ([`serve::serve`]). Each connection's
/// `MaxConnectionAge` is drawn by `Guarded` at accept (the loop sends the GOAWAY then).
pub(crate) fn http2(conf: &TransportConf) -> serve::Http2 {
    serve::Http2 {
        max_concurrent_streams: conf.max_concurrent_streams,
        max_header_list_size: conf.max_header_list_size,
        max_local_error_reset_streams: conf.max_local_error_reset_streams,
        max_pending_accept_reset_streams: conf.max_pending_accept_reset_streams,
        keepalive_interval: conf.keepalive_time(),
        keepalive_timeout: conf.keepalive_timeout,
        max_connection_idle: conf.max_connection_idle(),
    }
}

/// The chain's first stage ([`Front`](front::Front)): call counting per connection (for the
/// idle timeout), 415 for non-gRPC requests, and `allowed` (`Tls.AllowedClients`).
pub(crate) fn front_layer(
    conf: &TransportConf,
    allowed: Option<Arc<crate::tls::allow::AllowList>>,
) -> FrontLayer {
    FrontLayer::new(conf.max_connection_idle().is_some(), allowed)
}

/// What the serve loop does to each request before the chain ([`serve::Intake`]): the call's
/// kind, looked up in `streaming`, the request-bytes budget, whose body records the call's
/// facts, and the count of accepted calls in flight for the stage that owns it (`in_flight`).
/// `max_message`: the largest uncompressed request message (`MaxDecompressedSize`).
pub(crate) fn intake(
    settings: &AcceptSettings,
    conf: &TransportConf,
    max_message: Option<usize>,
    streaming: crate::call::StreamingMethods,
    in_flight: Option<Arc<dyn crate::call::InFlight>>,
    connections: Arc<connections::Connections>,
) -> serve::Intake {
    let max = conf.max_buffered_request_bytes();
    let conn_max = conf.max_connection_buffered_request_bytes();
    let timeout = conf.message_receive_timeout();
    let budget =
        (max.is_some() || conn_max.is_some() || timeout.is_some() || max_message.is_some()).then(
            || {
                Arc::new(
                    Budget::new(max, timeout)
                        .with_conn_max(conn_max)
                        .with_max_message(max_message),
                )
            },
        );
    serve::Intake {
        budget: RequestBudget::new(budget, settings.table.clone()),
        streaming,
        in_flight,
        connections,
    }
}

#[cfg(test)]
mod tests {
    /// One listener takes IPv6 and IPv4 connections (where the host has IPv6 at all).
    #[tokio::test]
    async fn all_interfaces_takes_ipv6_and_ipv4() {
        let listener = super::all_interfaces(0).unwrap();
        let port = listener.local_addr().unwrap().port();
        let mut hosts = vec!["127.0.0.1"];
        if std::net::TcpListener::bind("[::1]:0").is_ok() {
            hosts.push("[::1]");
        } else {
            println!("this host has no IPv6 loopback: IPv4 only");
        }
        for host in hosts {
            let addr = format!("{host}:{port}");
            let (client, accepted) =
                tokio::join!(tokio::net::TcpStream::connect(&addr), listener.accept());
            client.unwrap_or_else(|e| panic!("{addr}: {e}"));
            accepted.unwrap();
        }
    }
}
