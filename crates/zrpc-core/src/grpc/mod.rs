//! HTTP-level gRPC helpers shared by the server and the client middleware chains.
//!
//! zrpc's layers are tower services over `http::Request`/`http::Response`, so they
//! see gRPC only as HTTP/2: a status travels either in the response headers (a
//! *trailers-only* response, used for errors returned before any message) or in
//! the trailers after the last message. This module has the small pieces every
//! layer needs, with no networking and no tonic dependency:
//!
//! - [`code`]: numeric gRPC status codes (`i32`, the values of `tonic::Code`) and the one rule
//!   for which of them are failures ([`code::is_acceptable`]);
//! - [`StatusBody`]: a body wrapper that reports the final status exactly once,
//!   from the headers or the trailers, or [`code::CANCELLED`] when it is dropped early;
//! - [`StatusGuard`]: the same "exactly once, Cancelled on drop" callback for response futures;
//! - [`timeout`]: the `grpc-timeout` header (parse and format);
//! - [`method`]: the full method (`/pkg.Service/Method`) from a request path;
//! - [`status_response`]: a trailers-only error response with an empty body;
//! - [`trace_context`]: W3C trace-context pass-through for builds without OpenTelemetry;
//! - [`framing`]: a body's message framing followed chunk by chunk, and the message limit in
//!   grpc-go's words;
//! - [`compression`]: gRPC message compression on the frames of a body (`gzip`, `deflate`,
//!   `zstd`, each behind the cargo feature of that name).

pub mod code;
pub mod compression;
pub mod framing;
pub mod method;
pub mod timeout;
pub mod trace_context;

mod body;
mod guard;
mod response;

pub use body::StatusBody;
pub use guard::{OnStatus, StatusGuard};
pub use response::{
    GRPC_MESSAGE, GRPC_STATUS, decode_grpc_message, encode_grpc_message, find_header,
    is_grpc_content_type, status_from_headers, status_message_from_headers, status_response,
};
