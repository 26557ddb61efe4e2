//! [`Routes`]: the services a server serves, each call handed to the one its path names.
//!
//! A gRPC path is `/package.Service/Method`: the service is found by the name between its
//! first two slashes, among the names the services were added under
//! ([`NamedService::NAME`]), and gets the request as it came. A path that names no service is
//! answered as tonic's router answers it: `Unimplemented` with an empty message.
//!
//! Why not tonic's `Routes`: it is an axum router, with a route table of path patterns, a
//! wildcard parameter decoded for every call, and the request and response bodies converted
//! to axum's and back. A gRPC path needs only its service name compared; that router cost
//! every call about 5,300 instructions (`docs/benchmarks.md`, "The router").

use std::convert::Infallible;
use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_util::future::BoxFuture;
use http::{Request, Response};
use tonic::body::Body;
use tonic::server::NamedService;
use tower::ServiceExt;
use tower_service::Service;

/// A call's way into one service: a clone of the service, made ready and called. Not tower's
/// `BoxCloneSyncService`: its `call` takes `&mut self`, so a shared one would be cloned (boxed)
/// for every call; this clones only the service itself (for a tonic server, one `Arc`).
type Handler = Box<
    dyn Fn(Request<Body>) -> BoxFuture<'static, Result<Response<Body>, Infallible>> + Send + Sync,
>;

/// The innermost service of a server's chain: the services added with
/// [`Server::add_service`](crate::Server::add_service) (and health, reflection), each call
/// handed to the one its path names (`/package.Service/Method`, by the name between the first
/// two slashes). A path that names no service is answered `Unimplemented` with an empty
/// message, as tonic's router answers it. A layer added with
/// [`Server::layer`](crate::Server::layer) wraps it.
#[derive(Clone)]
pub struct Routes {
    services: Arc<[(&'static str, Handler)]>,
}

impl fmt::Debug for Routes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.services.iter().map(|(name, _)| name))
            .finish()
    }
}

impl Routes {
    /// The handler of the service `path` names (`/package.Service/Method`).
    fn find(&self, path: &str) -> Option<&Handler> {
        let name = path.strip_prefix('/')?.split_once('/')?.0;
        self.services
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, h)| h)
    }
}

impl Service<Request<Body>> for Routes {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Response<Body>, Infallible>>;

    /// Always ready: each call makes its own clone of its service ready.
    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        match self.find(req.uri().path()) {
            Some(handler) => handler(req),
            None => Box::pin(std::future::ready(Ok(unimplemented()))),
        }
    }
}

/// tonic's router's answer to a path that names no service.
#[cold]
fn unimplemented() -> Response<Body> {
    let (parts, ()) = tonic::Status::unimplemented("")
        .into_http::<()>()
        .into_parts();
    Response::from_parts(parts, Body::empty())
}

/// The services of a server being built.
#[derive(Default)]
pub(crate) struct RoutesBuilder {
    services: Vec<(&'static str, Handler)>,
    /// The first service added under a name already taken.
    duplicate: Option<&'static str>,
}

impl RoutesBuilder {
    /// Adds `svc` under its name. A second service of the same name is an error of
    /// [`routes`](Self::routes).
    pub(crate) fn add_service<S>(&mut self, svc: S)
    where
        S: Service<Request<Body>, Response = Response<Body>, Error = Infallible>
            + NamedService
            + Clone
            + Send
            + Sync
            + 'static,
        S::Future: Send + 'static,
    {
        if self.services.iter().any(|(n, _)| *n == S::NAME) {
            self.duplicate.get_or_insert(S::NAME);
            return;
        }
        let handler: Handler = Box::new(move |req| Box::pin(svc.clone().oneshot(req)));
        self.services.push((S::NAME, handler));
    }

    /// The routes; the name of a service added twice as the error.
    pub(crate) fn routes(self) -> Result<Routes, &'static str> {
        match self.duplicate {
            Some(name) => Err(name),
            None => Ok(Routes {
                services: self.services.into(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::future::Ready;

    use super::*;

    /// A service that answers with its name in a header.
    #[derive(Clone)]
    struct Named<const N: usize>;

    impl<const N: usize> NamedService for Named<N> {
        const NAME: &'static str = ["a.One", "a.Two", "a.One"][N];
    }

    impl<const N: usize> Service<Request<Body>> for Named<N> {
        type Response = Response<Body>;
        type Error = Infallible;
        type Future = Ready<Result<Response<Body>, Infallible>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, req: Request<Body>) -> Self::Future {
            let mut resp = Response::new(Body::empty());
            resp.headers_mut()
                .insert("x-service", Self::NAME.parse().unwrap());
            resp.headers_mut()
                .insert("x-n", N.to_string().parse().unwrap());
            resp.headers_mut()
                .insert("x-path", req.uri().path().parse().unwrap());
            std::future::ready(Ok(resp))
        }
    }

    async fn call(routes: &mut Routes, path: &str) -> Response<Body> {
        let req = Request::builder().uri(path).body(Body::empty()).unwrap();
        routes.call(req).await.unwrap()
    }

    fn header<'a>(resp: &'a Response<Body>, name: &str) -> Option<&'a str> {
        resp.headers().get(name).map(|v| v.to_str().unwrap())
    }

    #[tokio::test]
    async fn a_call_goes_to_the_service_its_path_names() {
        let mut b = RoutesBuilder::default();
        b.add_service(Named::<0>);
        b.add_service(Named::<1>);
        let mut routes = b.routes().unwrap();
        for (path, service) in [
            ("/a.One/M", "a.One"),
            ("/a.Two/M", "a.Two"),
            ("/a.One/", "a.One"),
            ("/a.Two/M/more", "a.Two"),
        ] {
            let resp = call(&mut routes, path).await;
            assert_eq!(header(&resp, "x-service"), Some(service), "{path}");
            assert_eq!(header(&resp, "x-path"), Some(path), "the path as it came");
        }
    }

    /// As tonic's router answers: `Unimplemented`, an empty message, in the response head.
    #[tokio::test]
    async fn a_path_that_names_no_service_is_unimplemented() {
        let mut b = RoutesBuilder::default();
        b.add_service(Named::<0>);
        let mut routes = b.routes().unwrap();
        for path in [
            "/a.Three/M",
            "/a.On/M",
            "/a.One",
            "/",
            "/a.OneX/M",
            "/A.One/M",
        ] {
            let resp = call(&mut routes, path).await;
            assert_eq!(header(&resp, "x-service"), None, "{path}");
            assert_eq!(header(&resp, "grpc-status"), Some("12"), "{path}");
            assert_eq!(header(&resp, "grpc-message"), None, "{path}");
            assert_eq!(
                header(&resp, "content-type"),
                Some("application/grpc"),
                "{path}"
            );
        }
        // no service at all
        let mut empty = RoutesBuilder::default().routes().unwrap();
        let resp = call(&mut empty, "/a.One/M").await;
        assert_eq!(header(&resp, "grpc-status"), Some("12"));
    }

    #[test]
    fn a_service_added_twice_is_an_error_naming_it() {
        let mut b = RoutesBuilder::default();
        b.add_service(Named::<0>);
        b.add_service(Named::<1>);
        b.add_service(Named::<2>);
        assert_eq!(b.routes().err(), Some("a.One"));
    }

    #[tokio::test]
    async fn clones_share_the_services() {
        let mut b = RoutesBuilder::default();
        b.add_service(Named::<1>);
        let routes = b.routes().unwrap();
        let mut clone = routes.clone();
        assert_eq!(format!("{routes:?}"), r#"["a.Two"]"#);
        let resp = call(&mut clone, "/a.Two/M").await;
        assert_eq!(header(&resp, "x-n"), Some("1"));
    }
}
