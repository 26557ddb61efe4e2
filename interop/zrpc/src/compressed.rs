//! The server's compression features of the interop spec, on zrpc's [`CallCompression`]:
//!
//! - CompressedRequest: a message with `expect_compressed: true` that arrived uncompressed fails
//!   the call with `InvalidArgument`;
//! - CompressedResponse: `response_compressed` (unary) and `ResponseParameters.compressed`
//!   (streams, message by message) choose whether a response goes compressed; without them it
//!   goes uncompressed, as an interop server answers unless asked.
//!
//! zrpc hands a handler a [`CallCompression`] when the request came compressed or the server's
//! `Compression` is set and the client accepts it, so the interop server runs with
//! `Compression: gzip` ([`server::conf`](crate::server::conf)).

use zrpc::compression::{CallCompression, Encoding};
use zrpc::tonic::{Request, Status};

use crate::pb::BoolValue;

/// One call's compression, taken from its request before the request is consumed.
#[derive(Debug, Clone)]
pub(crate) struct Compression(Option<CallCompression>);

impl Compression {
    pub(crate) fn of<T>(request: &Request<T>) -> Compression {
        Compression(request.extensions().get::<CallCompression>().cloned())
    }

    /// `InvalidArgument` when `expect` asks for a compressed message and the last one received
    /// arrived uncompressed.
    pub(crate) fn check_received(&self, expect: Option<&BoolValue>) -> Result<(), Status> {
        let compressed = self
            .0
            .as_ref()
            .and_then(CallCompression::last_received_compressed)
            == Some(true);
        if expect.is_some_and(|e| e.value) && !compressed {
            return Err(Status::invalid_argument(
                "expect_compressed is true, but the request arrived uncompressed",
            ));
        }
        Ok(())
    }

    /// The whole response compressed with gzip when `asked` is true, uncompressed otherwise.
    /// `InvalidArgument` when it is asked for and the client accepts no gzip.
    pub(crate) fn respond(&self, asked: Option<&BoolValue>) -> Result<(), Status> {
        let on = asked.is_some_and(|a| a.value);
        match &self.0 {
            Some(c) => {
                c.set_send(on.then_some(Encoding::Gzip));
                Ok(())
            }
            None if on => Err(unaccepted()),
            None => Ok(()),
        }
    }

    /// The next response message compressed when `asked` is true, uncompressed otherwise.
    /// `InvalidArgument` when it is asked for and the client accepts no gzip.
    pub(crate) fn next_message(&self, asked: Option<&BoolValue>) -> Result<(), Status> {
        let on = asked.is_some_and(|a| a.value);
        match &self.0 {
            Some(c) => {
                c.compress_next(on);
                Ok(())
            }
            None if on => Err(unaccepted()),
            None => Ok(()),
        }
    }
}

fn unaccepted() -> Status {
    Status::invalid_argument(
        "a compressed response was asked for, but the client does not accept gzip \
         (grpc-accept-encoding)",
    )
}
