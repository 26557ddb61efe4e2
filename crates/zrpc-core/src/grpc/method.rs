//! The gRPC full method (`/pkg.Service/Method`) of a request.
//!
//! go-zero keys breakers, metrics and `MethodTimeouts` by `info.FullMethod`, which is
//! exactly the HTTP/2 `:path` of the request.

/// The full method of a request path: the path itself (`/pkg.Service/Method`).
#[must_use]
pub fn full_method(uri: &http::Uri) -> &str {
    uri.path()
}

/// Splits a full method into `(service, method)`: `/pkg.Svc/M` -> `("pkg.Svc", "M")`.
/// Returns `None` when the path is not of that shape.
#[must_use]
pub fn split(full_method: &str) -> Option<(&str, &str)> {
    let rest = full_method.strip_prefix('/')?;
    let (service, method) = rest.split_once('/')?;
    if service.is_empty() || method.is_empty() || method.contains('/') {
        return None;
    }
    Some((service, method))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_full_methods() {
        assert_eq!(
            split("/greeter.Greeter/SayHello"),
            Some(("greeter.Greeter", "SayHello"))
        );
        assert_eq!(split("greeter.Greeter/SayHello"), None);
        assert_eq!(split("/greeter.Greeter"), None);
        assert_eq!(split("/a/b/c"), None);
        let uri: http::Uri = "http://h/greeter.Greeter/SayHello"
            .parse()
            .unwrap_or_default();
        assert_eq!(full_method(&uri), "/greeter.Greeter/SayHello");
    }
}
