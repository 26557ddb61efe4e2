//! gRPC message compression, as the gRPC compression spec says, for every service a server
//! serves and every generated client on a [`Client`](crate::Client).
//!
//! - **Server**: compressed requests are accepted in every encoding of the build (`gzip` by
//!   default, as every go-zero service accepts it; `deflate` and `zstd` with the cargo
//!   features of those names); one in another encoding is answered `Unimplemented` with the
//!   accepted ones in `grpc-accept-encoding`. Responses are compressed with `Compression`
//!   (none by default), and only for clients that list it in `grpc-accept-encoding`.
//! - **Client**: requests are compressed with `Compression` or the method's
//!   `MethodCompression` (none by default); such calls also list the encodings the client can
//!   decompress, asking for compressed responses, and compressed responses are decompressed.
//! - On both sides a compressed message may decompress to at most `MaxDecompressedSize`
//!   octets (4 MiB by default); a larger one ends its call with `ResourceExhausted`.
//!
//! One call's choices go through a [`CallCompression`]: a client puts one in its request's
//! extensions, a server handler finds one in its request's extensions.
//!
//! ```no_run
//! # use zrpc_examples::pb::{HelloRequest, greeter_client::GreeterClient};
//! # async fn run(client: zrpc::Client) -> Result<(), Box<dyn std::error::Error>> {
//! use zrpc::compression::{CallCompression, Encoding};
//!
//! let mut greeter = GreeterClient::new(client);
//! // this call compressed with gzip, whatever the config says
//! let call = CallCompression::send(Some(Encoding::Gzip));
//! let mut req = zrpc::tonic::Request::new(HelloRequest { name: "zrpc".into() });
//! req.extensions_mut().insert(call.clone());
//! let reply = greeter.say_hello(req).await?;
//! // whether the response arrived compressed
//! let compressed = call.last_received_compressed() == Some(true);
//! # let _ = (reply, compressed); Ok(()) }
//! ```
//!
//! The keys: `docs/configuration.md`; the wire, the limits and go-zero: `docs/compression.md`.

pub use zrpc_core::grpc::compression::{CallCompression, Encoding, Encodings};
