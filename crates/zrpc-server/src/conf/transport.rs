//! `Transport`: zrpc's HTTP/2 and connection limits (a zrpc addition; go-zero has no such
//! block and leaves grpc-go's defaults in place). Every key is documented in
//! `docs/configuration.md` and `docs/security.md`.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use zrpc_core::conf::{ConfError, Validate, duration};

/// HTTP/2 and connection limits of the server (`Transport:` block, a zrpc addition).
///
/// Defaults protect against hostile clients without touching well-behaved ones: grpc-go
/// and tonic clients queue calls beyond `MaxConcurrentStreams` instead of failing them, dead
/// peers are found by TCP keepalive probes (15 s, Go's listener default), and no connection
/// that completed its handshake is ever closed unless `MaxConnectionAge` or
/// `MaxConnectionIdle` is set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields, default)]
#[non_exhaustive]
pub struct TransportConf {
    /// SETTINGS_MAX_CONCURRENT_STREAMS advertised to every client (default 1000, at least 1).
    pub max_concurrent_streams: u32,
    /// SETTINGS_MAX_HEADER_LIST_SIZE: the largest header list (metadata) of a call, in octets
    /// as HTTP/2 counts them (default 16384, hyper's and tonic's; grpc-go allows 16 MiB). A
    /// larger list ends the connection (GOAWAY `ENHANCE_YOUR_CALM`). At least 1024.
    pub max_header_list_size: u32,
    /// Streams the server may reset for a client's protocol errors on one connection before
    /// the connection is ended with GOAWAY `ENHANCE_YOUR_CALM` (default 1024, hyper's; guards
    /// against MadeYouReset, CVE-2025-8671). At least 1.
    pub max_local_error_reset_streams: usize,
    /// Streams the client may reset before the server has accepted them, at once, before the
    /// connection is ended with GOAWAY `ENHANCE_YOUR_CALM` (default 20, h2's; guards against
    /// rapid reset, CVE-2023-44487). At least 1.
    pub max_pending_accept_reset_streams: usize,
    /// Time a new connection has to send the HTTP/2 preface and its first SETTINGS frame
    /// before it is closed (default 10s; 0 = no limit).
    #[serde(with = "duration")]
    pub handshake_timeout: Duration,
    /// Interval of the server's HTTP/2 keepalive pings on a quiet connection (default 0 =
    /// none; grpc-go's server default is 2h). hyper reads the clock for every frame it
    /// receives while pings are on; `TcpKeepalive` finds a dead peer sooner at no cost per
    /// frame. Set it to find a peer process that is frozen but whose kernel still answers.
    #[serde(with = "duration")]
    pub keepalive_time: Duration,
    /// A connection whose keepalive ping is not acknowledged within this is closed
    /// (default 20s, grpc's).
    #[serde(with = "duration")]
    pub keepalive_timeout: Duration,
    /// TCP keepalive of every accepted connection: the kernel probes a connection quiet for
    /// this long, every this long, and closes it when the peer's host stops answering
    /// (default 15s, what Go's `net.Listen` sets on a go-zero server's connections; 0 = off).
    #[serde(with = "duration")]
    pub tcp_keepalive: Duration,
    /// The client's PINGs may not come more often than this: the third PING sooner than
    /// this after the previous one, with no data sent by the server in between, ends the
    /// connection with GOAWAY `too_many_pings` (grpc-go's `EnforcementPolicy.MinTime`,
    /// default 5m; 0 = answer every PING).
    #[serde(with = "duration")]
    pub keepalive_min_time: Duration,
    /// After this, a connection is sent GOAWAY so its client reconnects (and rebalances)
    /// (default 0 = never).
    #[serde(with = "duration")]
    pub max_connection_age: Duration,
    /// After `MaxConnectionAge`, calls still open get this long before the connection is
    /// closed (default 0 = wait for them; needs `MaxConnectionAge`).
    #[serde(with = "duration")]
    pub max_connection_age_grace: Duration,
    /// A connection with no call open for this long is closed (default 0 = never).
    #[serde(with = "duration")]
    pub max_connection_idle: Duration,
    /// At most this many connections at once; more are accepted and closed at once
    /// (default 0 = no cap).
    pub max_connections: usize,
    /// Octets of request messages received but not yet whole, summed over the server's
    /// calls; past it the call that asks for more ends with `ResourceExhausted`
    /// (default 64 MiB = 67108864; 0 = no cap).
    pub max_buffered_request_bytes: usize,
    /// The share of `MaxBufferedRequestBytes` one connection may hold; past it the call that
    /// asks for more ends with `ResourceExhausted`, so one client cannot fail every other
    /// client's large messages (default 32 MiB = 33554432; 0 = no per-connection cap).
    pub max_connection_buffered_request_bytes: usize,
    /// A request message that started arriving must be whole within this, or its call ends
    /// with `ResourceExhausted` (default 60s; 0 = no limit). Time between messages is free.
    #[serde(with = "duration")]
    pub message_receive_timeout: Duration,
}

impl Default for TransportConf {
    fn default() -> Self {
        TransportConf {
            max_concurrent_streams: 1000,
            max_header_list_size: 16 << 10,
            max_local_error_reset_streams: 1024,
            max_pending_accept_reset_streams: 20,
            handshake_timeout: Duration::from_secs(10),
            keepalive_time: Duration::ZERO,
            keepalive_timeout: Duration::from_secs(20),
            tcp_keepalive: Duration::from_secs(15),
            keepalive_min_time: Duration::from_secs(5 * 60),
            max_connection_age: Duration::ZERO,
            max_connection_age_grace: Duration::ZERO,
            max_connection_idle: Duration::ZERO,
            max_connections: 0,
            max_buffered_request_bytes: 64 << 20,
            max_connection_buffered_request_bytes: 32 << 20,
            message_receive_timeout: Duration::from_secs(60),
        }
    }
}

fn some(d: Duration) -> Option<Duration> {
    (!d.is_zero()).then_some(d)
}

impl TransportConf {
    /// `HandshakeTimeout`, `None` when 0.
    pub fn handshake_timeout(&self) -> Option<Duration> {
        some(self.handshake_timeout)
    }

    /// `KeepaliveTime`, `None` when 0.
    pub fn keepalive_time(&self) -> Option<Duration> {
        some(self.keepalive_time)
    }

    /// `TcpKeepalive`, `None` when 0.
    pub fn tcp_keepalive(&self) -> Option<Duration> {
        some(self.tcp_keepalive)
    }

    /// `KeepaliveMinTime`, `None` when 0.
    pub fn keepalive_min_time(&self) -> Option<Duration> {
        some(self.keepalive_min_time)
    }

    /// `MaxConnectionAge`, `None` when 0.
    pub fn max_connection_age(&self) -> Option<Duration> {
        some(self.max_connection_age)
    }

    /// `MaxConnectionAgeGrace`, `None` when 0 or when `MaxConnectionAge` is not set.
    pub fn max_connection_age_grace(&self) -> Option<Duration> {
        self.max_connection_age()
            .and_then(|_| some(self.max_connection_age_grace))
    }

    /// `MaxConnectionIdle`, `None` when 0.
    pub fn max_connection_idle(&self) -> Option<Duration> {
        some(self.max_connection_idle)
    }

    /// `MaxBufferedRequestBytes`, `None` when 0.
    pub fn max_buffered_request_bytes(&self) -> Option<usize> {
        (self.max_buffered_request_bytes > 0).then_some(self.max_buffered_request_bytes)
    }

    /// `MaxConnectionBufferedRequestBytes`, `None` when 0.
    pub fn max_connection_buffered_request_bytes(&self) -> Option<usize> {
        (self.max_connection_buffered_request_bytes > 0)
            .then_some(self.max_connection_buffered_request_bytes)
    }

    /// `MessageReceiveTimeout`, `None` when 0.
    pub fn message_receive_timeout(&self) -> Option<Duration> {
        some(self.message_receive_timeout)
    }

    /// `MaxConnections`, `None` when 0.
    pub fn max_connections(&self) -> Option<usize> {
        (self.max_connections > 0).then_some(self.max_connections)
    }
}

impl Validate for TransportConf {
    fn validate(&self) -> Result<(), ConfError> {
        if self.max_concurrent_streams == 0 {
            return Err(ConfError::invalid(
                "Transport.MaxConcurrentStreams",
                "0 would refuse every call; use at least 1 (default 1000)",
            ));
        }
        if self.max_header_list_size < 1024 {
            return Err(ConfError::invalid(
                "Transport.MaxHeaderListSize",
                format!(
                    "{} octets leaves no room for a call's own headers; use at least 1024 \
                     (default 16384)",
                    self.max_header_list_size
                ),
            ));
        }
        if self.max_local_error_reset_streams == 0 {
            return Err(ConfError::invalid(
                "Transport.MaxLocalErrorResetStreams",
                "0 would end a connection at its first stream error; use at least 1 \
                 (default 1024; there is no setting without a limit)",
            ));
        }
        if self.max_pending_accept_reset_streams == 0 {
            return Err(ConfError::invalid(
                "Transport.MaxPendingAcceptResetStreams",
                "0 would end a connection at the first call its client cancels early; use at \
                 least 1 (default 20; there is no setting without a limit)",
            ));
        }
        if self.keepalive_time().is_some() && self.keepalive_timeout.is_zero() {
            return Err(ConfError::invalid(
                "Transport.KeepaliveTimeout",
                "must be positive while KeepaliveTime is set (default 20s)",
            ));
        }
        if !self.keepalive_time.is_zero() && self.keepalive_time < Duration::from_secs(1) {
            return Err(ConfError::invalid(
                "Transport.KeepaliveTime",
                format!(
                    "{:?} is below 1s; pings that often only cost CPU (grpc-go's default is 2h)",
                    self.keepalive_time
                ),
            ));
        }
        // The kernel takes whole seconds, at most 32767 (Linux's MAX_TCP_KEEPIDLE).
        if !self.tcp_keepalive.is_zero()
            && !(Duration::from_secs(1)..=Duration::from_secs(32_767)).contains(&self.tcp_keepalive)
        {
            return Err(ConfError::invalid(
                "Transport.TcpKeepalive",
                format!(
                    "{:?} is outside 1s..32767s, the kernel's range (default 15s; 0 = off)",
                    self.tcp_keepalive
                ),
            ));
        }
        if !self.max_connection_age_grace.is_zero() && self.max_connection_age.is_zero() {
            return Err(ConfError::invalid(
                "Transport.MaxConnectionAgeGrace",
                "needs Transport.MaxConnectionAge",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conf::RpcServerConf;

    fn yaml(text: &str) -> Result<RpcServerConf, ConfError> {
        zrpc_core::conf::from_str_with_env(text, zrpc_core::conf::Format::Yaml, "t.yaml", |_| None)
    }

    #[test]
    fn transport_block_loads_go_durations_and_keeps_defaults() {
        let c = yaml(
            "Name: a\nListenOn: 127.0.0.1:1\nTransport:\n  MaxConcurrentStreams: 100\n  \
             HandshakeTimeout: 3s\n  MaxConnectionAge: 30m\n  MaxConnectionAgeGrace: 10s\n",
        )
        .unwrap();
        let t = &c.transport;
        assert_eq!(t.max_concurrent_streams, 100);
        assert_eq!(t.handshake_timeout(), Some(Duration::from_secs(3)));
        assert_eq!(t.max_connection_age(), Some(Duration::from_secs(1800)));
        assert_eq!(t.max_connection_age_grace(), Some(Duration::from_secs(10)));
        // No HTTP/2 pings by default (hyper would read the clock per frame); TCP keepalive
        // probes at Go's listener default instead.
        assert_eq!(t.keepalive_time(), None);
        assert_eq!(t.tcp_keepalive(), Some(Duration::from_secs(15)));
        assert_eq!(t.keepalive_min_time(), Some(Duration::from_secs(300)));
        assert_eq!(t.max_connection_idle(), None);
        assert_eq!(t.max_buffered_request_bytes(), Some(64 << 20));
        assert_eq!(t.max_connection_buffered_request_bytes(), Some(32 << 20));
        // Every HTTP/2 limit is on by default (hyper's `None` would mean no limit).
        assert_eq!(t.max_header_list_size, 16384);
        assert_eq!(t.max_local_error_reset_streams, 1024);
        assert_eq!(t.max_pending_accept_reset_streams, 20);
    }

    #[test]
    fn pings_are_opt_in_and_tcp_keepalive_can_be_turned_off() {
        let c = yaml(
            "Name: a\nListenOn: 127.0.0.1:1\nTransport:\n  KeepaliveTime: 2h\n  TcpKeepalive: 0\n",
        )
        .unwrap();
        assert_eq!(
            c.transport.keepalive_time(),
            Some(Duration::from_secs(7200))
        );
        assert_eq!(c.transport.tcp_keepalive(), None);
    }

    #[test]
    fn unknown_and_invalid_transport_keys_are_named() {
        let err = yaml("Name: a\nListenOn: 127.0.0.1:1\nTransport:\n  MaxStreams: 5\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("MaxStreams"), "{err}");
        for (text, key) in [
            ("MaxConcurrentStreams: 0", "Transport.MaxConcurrentStreams"),
            (
                "MaxConnectionAgeGrace: 5s",
                "Transport.MaxConnectionAgeGrace",
            ),
            ("KeepaliveTime: 10ms", "Transport.KeepaliveTime"),
            ("TcpKeepalive: 500ms", "Transport.TcpKeepalive"),
            ("TcpKeepalive: 10h", "Transport.TcpKeepalive"),
            ("MaxHeaderListSize: 100", "Transport.MaxHeaderListSize"),
            (
                "MaxLocalErrorResetStreams: 0",
                "Transport.MaxLocalErrorResetStreams",
            ),
            (
                "MaxPendingAcceptResetStreams: 0",
                "Transport.MaxPendingAcceptResetStreams",
            ),
        ] {
            let err = yaml(&format!(
                "Name: a\nListenOn: 127.0.0.1:1\nTransport:\n  {text}\n"
            ))
            .unwrap_err()
            .to_string();
            assert!(err.contains(key), "{text}: {err}");
        }
    }
}
