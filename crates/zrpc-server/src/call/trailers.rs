//! [`Trailers`]: what a handler adds to its call's trailers.

use tonic::metadata::MetadataMap;

use super::{Arrival, CallFacts};

/// The trailers of a call's response, for its handler to add to: go-zero handlers call
/// grpc-go's `grpc.SetTrailer(ctx, md)`; a zrpc handler takes this handle from its request
/// (before `into_inner`, which drops the request's extensions) and calls [`merge`](Self::merge)
/// at any time before its response ends.
///
/// The entries reach the caller unchanged in the response's trailers, on success and on
/// failure alike (for an error answered without a body, in the headers that carry its status),
/// and every stage of the chain, and layers added with `Server::outer_layer`, see them there.
/// `grpc-status`, `grpc-message` and `grpc-status-details-bin` are the status's own and are not
/// taken from here: return a [`tonic::Status`] to set them.
///
/// # Examples
///
/// ```
/// use tonic::metadata::{MetadataMap, MetadataValue};
/// use tonic::{Request, Response, Status};
/// use zrpc_server::Trailers;
///
/// // A handler's body: the trailers go out with the reply.
/// async fn say_hello(request: Request<String>) -> Result<Response<String>, Status> {
///     if let Some(trailers) = Trailers::of(&request) {
///         let mut md = MetadataMap::new();
///         md.insert("x-cache", MetadataValue::from_static("hit"));
///         trailers.merge(md);
///     }
///     Ok(Response::new(format!("Hello {}", request.into_inner())))
/// }
/// ```
#[derive(Debug, Clone)]
pub struct Trailers(CallFacts);

impl Trailers {
    /// The trailers of the call `request` arrived with; `None` for a request that did not come
    /// through a zrpc server (a handler called directly in a unit test, say).
    #[must_use]
    pub fn of<T>(request: &tonic::Request<T>) -> Option<Trailers> {
        request
            .extensions()
            .get::<Arrival>()
            .map(|a| Trailers(a.facts.clone()))
    }

    /// Adds `md` to the call's trailers (appended to what was added before, as
    /// `grpc.SetTrailer` does). Binary entries (`-bin` keys) are sent base64-encoded, as gRPC
    /// says.
    pub fn merge(&self, md: MetadataMap) {
        self.0.add_trailers(md.into_headers());
    }
}
