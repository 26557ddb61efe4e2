//! What the front of the chain ([`Front`](crate::transport::front::Front)) does with a request's
//! connection: [`into_extensions`] turns the connection's [`ConnInfo`] (which the serve loop
//! hands to `Front`) into the `TcpConnectInfo` extension (so `Request::remote_addr` and zrpc's
//! own layers see the peer as on a plaintext server) and a [`PeerIdentity`] extension, and
//! [`denied`] answers whether `Tls.AllowedClients` refuses the client.
//!
//! `ConnInfo` itself is not left in the extensions: with the call's facts and the router's URL
//! params a request then holds three, which fit the extension map's first allocation (a
//! fourth would make it grow on every call).

use http::Request;

use super::allow::AllowList;
use super::identity::PeerIdentity;
use super::io::ConnInfo;

/// Puts the connection's `TcpConnectInfo` and [`PeerIdentity`] from `info` in `req`'s
/// extensions (what tonic's `Request::remote_addr` and handlers read).
pub(crate) fn into_extensions<B>(req: &mut Request<B>, info: &ConnInfo) {
    req.extensions_mut().insert(info.tcp.clone());
    if let Some(id) = &info.peer {
        req.extensions_mut().insert(id.clone());
    }
}

/// Why `allowed` refuses the client `peer` (`None`: it is served, or there is no list).
pub(crate) fn denied(allowed: Option<&AllowList>, peer: Option<&PeerIdentity>) -> Option<String> {
    let allowed = allowed?;
    match peer {
        None => Some("a client certificate is required (Tls.AllowedClients)".to_owned()),
        Some(id) if allowed.allows(id) => None,
        Some(id) => Some(format!(
            "client certificate ({}) is not in Tls.AllowedClients",
            id.describe()
        )),
    }
}
