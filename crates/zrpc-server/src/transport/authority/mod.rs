//! Accepting the `:authority` that grpc-go (go-zero's client) sends for multi-host targets.
//!
//! # The hazard
//!
//! grpc-go sends the path of its dial target as `:authority`. A go-zero client with two or more
//! `Etcd.Hosts` dials `etcd:///h1:p1,h2:p2?key=k` and sends `:authority: h1:p1,h2:p2`; two or more
//! `Endpoints` do the same (`direct:///a:1,b:2`). `h2`, under hyper's HTTP/2 server, parses the
//! authority with `http::uri::Authority`, which refuses more than one port colon, and answers
//! every such request with `RST_STREAM PROTOCOL_ERROR` before any zrpc or tonic code runs: the Go
//! side sees `Internal: stream terminated by RST_STREAM with error code: PROTOCOL_ERROR` on 100 %
//! of its calls. `h2` has no switch for it (hyperium/h2#525), and the value sits inside the
//! HPACK-compressed header block, so no tower layer can reach it.
//!
//! # The fix
//!
//! Every accepted connection's octets are read once, below `h2`, by the connection's frame
//! scanner ([`FrameGuard`](crate::transport::frames::FrameGuard), in the connection wrapper
//! `Guarded`), which also serves the handshake deadline and the frame policies. While the
//! connection's [`Repair`] watches it, the scan stops before each header block (HEADERS +
//! CONTINUATION); the block is held until it is complete (split anywhere across reads), its
//! fragments found (padding and priority skipped, [`block`]), and the client's HPACK dynamic
//! table followed. An `:authority` that `http::uri::Authority` rejects is rewritten **in place,
//! to a valid value of the same length whose characters have the same Huffman code lengths**:
//! every `:` but the last (and any other character that cannot stand in an authority) becomes a
//! plain one, e.g. `127.0.0.1:2379,127.0.0.1:2380` -> `127.0.0.1x2379,127.0.0.1:2380`. The
//! frame lengths stay as they are, and the entry that both the client's encoder and `h2`'s
//! decoder add to their dynamic tables keeps its size, so the two tables stay in step and later
//! requests that refer to the entry by index get the repaired value.
//!
//! Cost: a connection whose first header block carries a valid authority (every client but
//! these) is watched only up to that block, then scanned like any other (frame headers only).
//! Before that block nothing is allocated for it. A connection that needed a repair stays
//! watched: each header block is walked (no allocation per header, Huffman decoding only for
//! new table entries), other frames pass at once. Octets are held back only while a header
//! block is incomplete, at most one block (up to 64 KiB) per connection; a larger block, an
//! HPACK error or a non-HTTP/2 preface ends the repair and leaves the verdict to `h2`.
//!
//! A repair is logged once per connection at DEBUG (target `zrpc::server::authority`), and
//! what the client sent stays available to handlers through [`original_authority`].

mod block;
pub(crate) mod hpack;
pub(crate) mod huffman;
mod huffman_table;
mod repair;
#[cfg(test)]
mod tests;

use std::sync::Arc;

pub(crate) use repair::Repair;

/// The `:authority` the client really sent, when zrpc had to rewrite it for `h2` to accept the
/// request; `None` when the request's authority is what the client sent.
///
/// grpc-go clients (go-zero's) with several etcd hosts or endpoints in their target send
/// `:authority: h1:p1,h2:p2`, which `h2` rejects; zrpc rewrites it below `h2` to a valid value
/// of the same length (`h1:p1` -> `h1xp1` for every colon but the last), so
/// `request.uri().authority()` shows the rewritten value and this function the original
/// (see `docs/migrating-from-go-zero.md`).
///
/// Pass the request's extensions (`tonic::Request::extensions()` or
/// `http::Request::extensions()`). It is a fact of the call's connection, the first rewritten
/// value on it: grpc-go sends one authority per connection.
///
/// # Examples
///
/// ```
/// # fn handler(request: &tonic::Request<()>) {
/// let authority = zrpc_server::original_authority(request.extensions()); // zrpc::original_authority
/// # }
/// ```
pub fn original_authority(extensions: &http::Extensions) -> Option<Arc<str>> {
    let arrival = extensions.get::<crate::call::Arrival>()?;
    arrival.conn.authority.as_ref()?.get().cloned()
}
