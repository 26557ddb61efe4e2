//! One Google-SRE breaker per (target, method) (go-zero `BreakerInterceptor`).
//!
//! Breakers live in a [`BreakerRegistry`](zrpc_core::breaker::BreakerRegistry) under the name
//! `<target><full method>`; the client uses the process-wide one unless given its own, so clients
//! of the same target share them, as in go-zero. An open breaker rejects locally with
//! `Unavailable "circuit breaker is open: ..."` (go-zero's words, then the method, the target
//! and the breaker's window) as a gRPC status (go-zero returns a raw error that shows
//! up as `Unknown`). Outcomes use go-zero's acceptable codes: DeadlineExceeded, Internal,
//! Unavailable, DataLoss, Unimplemented and ResourceExhausted are failures.
//! Switched on with [`ObserveBuilder::breakers`](super::observe::ObserveBuilder::breakers).

use zrpc_core::breaker::BreakerOpen;

/// The message of a local breaker rejection, which the method, the target and the breaker's
/// window follow.
#[cfg(test)]
pub(crate) const BREAKER_OPEN: &str = "circuit breaker is open";

/// The status of a local breaker rejection of a call to `path` of `target`: go-zero's words,
/// then the breaker and its window (`circuit breaker is open: /pkg.S/M to direct:///a:1
/// dropped 38 of the last 200 calls in 10s (150 failed, 12 succeeded; drop chance 81%)`).
pub(crate) fn open(open: &BreakerOpen, path: &str, target: &str) -> tonic::Status {
    tonic::Status::unavailable(open.explain(&format!("{path} to {target}")))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tonic::body::Body;
    use tower::BoxError;
    use zrpc_core::breaker::{BreakerConfig, BreakerRegistry};
    use zrpc_core::grpc::{code, status_response};

    use super::*;
    use crate::layers::observe::{Observe, observed_call};

    #[tokio::test]
    async fn rejects_locally_with_an_unavailable_status_once_failures_pile_up() {
        let registry = Arc::new(BreakerRegistry::new(BreakerConfig::default()));
        let mut inner = tower::service_fn(|_req: http::Request<Body>| async {
            Ok::<_, BoxError>(status_response::<Body>(code::UNAVAILABLE, "down"))
        });
        let observe = Observe::builder("direct:///x:1")
            .breakers(Some(registry.clone()))
            .build();
        let mut local = 0;
        for _ in 0..300 {
            let req = http::Request::builder()
                .uri("/greeter.Greeter/SayHello")
                .body(Body::empty())
                .unwrap();
            match observed_call(&observe, &mut inner, req).await {
                Ok(resp) => assert_eq!(
                    zrpc_core::grpc::status_from_headers(resp.headers()),
                    Some(code::UNAVAILABLE)
                ),
                Err(e) => {
                    let s = e.downcast::<tonic::Status>().unwrap();
                    assert_eq!(s.code(), tonic::Code::Unavailable);
                    let figures = s
                        .message()
                        .strip_prefix(&format!(
                            "{BREAKER_OPEN}: /greeter.Greeter/SayHello to direct:///x:1 dropped "
                        ))
                        .unwrap_or_else(|| panic!("{}", s.message()));
                    assert!(figures.contains(" calls in 10s ("), "{figures}");
                    assert!(
                        figures.contains(" failed, 0 succeeded; drop chance "),
                        "{figures}"
                    );
                    local += 1;
                }
            }
        }
        assert!(local > 100, "{local}");
        assert_eq!(
            registry.names(),
            vec!["direct:///x:1/greeter.Greeter/SayHello".to_owned()]
        );
    }
}
