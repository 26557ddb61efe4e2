//! [`PeerLayer`]: right inside the transport layers (which read the connection's state from
//! its [`ConnInfo`]). It turns the `ConnInfo` into the `TcpConnectInfo` extension (so
//! `Request::remote_addr` and zrpc's own layers see the peer as on a plaintext server) and a
//! [`PeerIdentity`] extension. It moves the parts out rather than cloning them, and leaves
//! one extension fewer: with the call's facts and the router's URL params a request then holds
//! three, which fit the extension map's first allocation (a fourth made it grow, per call).
//! [`AllowLayer`] (inside the transport layers) answers `PermissionDenied` to clients
//! missing from `Tls.AllowedClients`.

use std::sync::Arc;
use std::task::{Context, Poll};

use futures_util::future::{Either, Ready, ready};
use http::{Request, Response};
use tower_layer::Layer;
use tower_service::Service;

use super::allow::AllowList;
use super::identity::PeerIdentity;
use super::io::ConnInfo;

/// See the [module docs](self).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct PeerLayer;

impl<S> Layer<S> for PeerLayer {
    type Service = Peer<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Peer { inner }
    }
}

/// See the [module docs](self).
#[derive(Debug, Clone)]
pub(crate) struct Peer<S> {
    inner: S,
}

impl<S, B> Service<Request<B>> for Peer<S>
where
    S: Service<Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<B>) -> Self::Future {
        // The transport layers, outside this one, have read the connection's state already.
        if let Some(info) = req.extensions_mut().remove::<ConnInfo>() {
            req.extensions_mut().insert(info.tcp);
            if let Some(id) = info.peer {
                req.extensions_mut().insert(id);
            }
        }
        self.inner.call(req)
    }
}

/// See the [module docs](self).
#[derive(Debug, Clone, Default)]
pub(crate) struct AllowLayer {
    allowed: Option<Arc<AllowList>>,
}

impl AllowLayer {
    /// `allowed`: the server's allow-list (None = any client).
    pub(crate) fn new(allowed: Option<Arc<AllowList>>) -> Self {
        AllowLayer { allowed }
    }
}

impl<S> Layer<S> for AllowLayer {
    type Service = Allow<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Allow {
            inner,
            allowed: self.allowed.clone(),
        }
    }
}

/// See the [module docs](self).
#[derive(Debug, Clone)]
pub(crate) struct Allow<S> {
    inner: S,
    allowed: Option<Arc<AllowList>>,
}

impl<S, B, ResBody> Service<Request<B>> for Allow<S>
where
    S: Service<Request<B>, Response = Response<ResBody>>,
    ResBody: Default,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = Either<Ready<Result<Response<ResBody>, S::Error>>, S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        if let Some(allowed) = &self.allowed {
            let denied = match req.extensions().get::<PeerIdentity>() {
                None => Some("a client certificate is required (Tls.AllowedClients)".to_owned()),
                Some(id) if allowed.allows(id) => None,
                Some(id) => Some(format!(
                    "client certificate ({}) is not in Tls.AllowedClients",
                    id.describe()
                )),
            };
            if let Some(message) = denied {
                return Either::Left(ready(Ok(
                    tonic::Status::permission_denied(message).into_http()
                )));
            }
        }
        Either::Right(self.inner.call(req))
    }
}
