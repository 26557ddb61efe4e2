//! One Google-SRE breaker per (target, method) (go-zero `BreakerInterceptor`).
//!
//! Breakers live in a [`BreakerRegistry`](zrpc_core::breaker::BreakerRegistry) under the name
//! `<target><full method>`; the client uses the process-wide one unless given its own, so clients
//! of the same target share them, as in go-zero. An open breaker rejects locally with
//! `Unavailable "circuit breaker is open"` as a gRPC status (go-zero returns a raw error that shows
//! up as `Unknown`). Outcomes use go-zero's acceptable codes: DeadlineExceeded, Internal,
//! Unavailable, DataLoss, Unimplemented and ResourceExhausted are failures.
//! Switched on with [`ObserveBuilder::breakers`](super::observe::ObserveBuilder::breakers).

/// The message of a local breaker rejection.
pub(crate) const BREAKER_OPEN: &str = "circuit breaker is open";

/// The status of a local breaker rejection.
pub(crate) fn open() -> tonic::Status {
    tonic::Status::unavailable(BREAKER_OPEN)
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
                    assert_eq!(s.message(), BREAKER_OPEN);
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
