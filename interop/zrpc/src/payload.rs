//! Payloads as the interop cases make them: bodies of zeros, type `COMPRESSABLE`.

use zrpc::tonic::Status;

use crate::pb::{Payload, PayloadType};

/// The largest payload body the server makes (8 MiB: past gRPC's usual 4 MiB receive limit, so
/// that a client's limit can be tested): a request cannot make it allocate more than this per
/// response.
pub(crate) const MAX_RESPONSE_BODY: i32 = 8 << 20;

/// A `COMPRESSABLE` payload of `size` zeros, as a client sends it.
pub(crate) fn zeros(size: usize) -> Payload {
    Payload {
        r#type: PayloadType::Compressable.into(),
        body: vec![0; size],
    }
}

/// The payload a server answers with: `size` zeros of type `response_type`. A type other than
/// `COMPRESSABLE`, a negative size or one over [`MAX_RESPONSE_BODY`] is `InvalidArgument`.
pub(crate) fn response(response_type: i32, size: i32) -> Result<Payload, Status> {
    if PayloadType::try_from(response_type) != Ok(PayloadType::Compressable) {
        return Err(Status::invalid_argument(format!(
            "unsupported response_type {response_type}: this server makes COMPRESSABLE (0) payloads only"
        )));
    }
    let size = match usize::try_from(size) {
        Ok(n) if size <= MAX_RESPONSE_BODY => n,
        _ => {
            return Err(Status::invalid_argument(format!(
                "response size {size} is outside 0..={MAX_RESPONSE_BODY} bytes"
            )));
        }
    };
    Ok(zeros(size))
}

/// Checks that a response payload is `want` zeros of type `COMPRESSABLE`.
pub(crate) fn check(payload: Option<&Payload>, want: usize) -> anyhow::Result<()> {
    let Some(p) = payload else {
        anyhow::bail!("the response has no payload, want {want} bytes");
    };
    anyhow::ensure!(
        p.r#type == i32::from(PayloadType::Compressable),
        "response payload type is {}, want COMPRESSABLE (0)",
        p.r#type
    );
    anyhow::ensure!(
        p.body.len() == want,
        "response payload body is {} bytes, want {want}",
        p.body.len()
    );
    anyhow::ensure!(
        p.body.iter().all(|b| *b == 0),
        "response payload body of {want} bytes is not all zeros"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_refuses_payloads_it_cannot_make() {
        assert_eq!(response(0, 3).unwrap().body, vec![0; 3]);
        for (kind, size) in [(1, 3), (0, -1), (0, MAX_RESPONSE_BODY + 1)] {
            let status = response(kind, size).unwrap_err();
            assert_eq!(
                status.code(),
                zrpc::tonic::Code::InvalidArgument,
                "{kind} {size}"
            );
        }
        assert_eq!(response(0, MAX_RESPONSE_BODY).unwrap().body.len(), 8 << 20);
    }

    #[test]
    fn the_client_checks_type_size_and_zeros() {
        assert!(check(Some(&zeros(5)), 5).is_ok());
        assert!(check(None, 5).is_err());
        assert!(check(Some(&zeros(4)), 5).is_err());
        let mut p = zeros(5);
        p.body[2] = 1;
        assert!(check(Some(&p), 5).is_err());
    }
}
