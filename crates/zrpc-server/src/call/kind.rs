//! A call's kind: whether its method streams and whether it is infrastructure (health,
//! reflection), resolved once per call from its path as the transport accepts its stream, and
//! read from there by every stage and by the drain layer.

use std::collections::HashSet;
use std::sync::Arc;

/// What kind of call a request is, resolved once per call ([`StreamingMethods::kind`]) and
/// kept in its [`Arrival`](super::Arrival). Two facts, not one enum: health's `Watch` and
/// reflection are both streams (the metrics record them as such) and infrastructure (the
/// governing stages leave them alone).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct CallKind {
    /// A known streaming method: not limited, shed or timed out by the server, recorded in
    /// the stream metric families, ended by the drain at the shutdown deadline.
    pub(crate) streaming: bool,
    /// Health checking or reflection: exempt from auth, breaker, limit, shedding and timeout,
    /// so probes and tools keep working on a busy or locked-down server.
    pub(crate) infra: bool,
}

impl CallKind {
    /// A unary call of the user's services.
    pub(crate) const UNARY: CallKind = CallKind {
        streaming: false,
        infra: false,
    };

    /// A streaming call of the user's services.
    #[cfg(test)]
    pub(crate) const STREAMING: CallKind = CallKind {
        streaming: true,
        infra: false,
    };

    /// The kind of a call to `path` that neither the transport nor the governor resolved
    /// (a layer's unit tests): what its path alone says, with no streaming method known.
    pub(crate) fn by_path(path: &str) -> CallKind {
        CallKind {
            infra: is_infra(path),
            ..CallKind::UNARY
        }
    }

    /// A unary call of the user's services: the calls the limit, the shedder and the server's
    /// timeout watch.
    pub(crate) fn is_user_unary(self) -> bool {
        !self.streaming && !self.infra
    }
}

/// Methods of the infrastructure services (health, reflection): exempt from auth, breaker,
/// shedding and timeout, so probes and tools keep working on a busy or locked-down server.
fn is_infra(path: &str) -> bool {
    path.starts_with("/grpc.health.v1.Health/") || path.starts_with("/grpc.reflection.")
}

/// The set of streaming methods (`/pkg.Service/Method`) the server knows about, from which a
/// call's [`CallKind`] is resolved. Filled from the reflection descriptor sets, from
/// [`Server::streaming_method`](crate::Server::streaming_method), and with health's `Watch` and
/// reflection.
#[derive(Debug, Clone, Default)]
pub(crate) struct StreamingMethods(Arc<Methods>);

/// Up to [`SCAN_MAX`] names are scanned (a length compare, then a short `memcmp`): the set is
/// asked once per call, and hashing the path with SipHash costs several times a scan of a
/// typical service's few methods.
#[derive(Debug, Default)]
enum Methods {
    #[default]
    None,
    Few(Box<[String]>),
    Many(HashSet<String>),
}

const SCAN_MAX: usize = 16;

impl StreamingMethods {
    /// A set from full method names.
    pub(crate) fn new<I: IntoIterator<Item = String>>(methods: I) -> Self {
        let set: HashSet<String> = methods.into_iter().collect();
        Self(Arc::new(match set.len() {
            0 => Methods::None,
            n if n <= SCAN_MAX => Methods::Few(set.into_iter().collect()),
            _ => Methods::Many(set),
        }))
    }

    /// The kind of a call to `full_method`: the one lookup of a call's kind, made by the
    /// transport as the call's stream is accepted (and by the governor for a request that
    /// came without an [`Arrival`](super::Arrival)).
    pub(crate) fn kind(&self, full_method: &str) -> CallKind {
        CallKind {
            streaming: self.contains(full_method),
            infra: is_infra(full_method),
        }
    }

    /// Whether `full_method` is a known streaming method.
    pub(crate) fn contains(&self, full_method: &str) -> bool {
        match &*self.0 {
            Methods::None => false,
            Methods::Few(names) => names.iter().any(|n| n == full_method),
            Methods::Many(set) => set.contains(full_method),
        }
    }

    /// Number of known streaming methods.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        match &*self.0 {
            Methods::None => 0,
            Methods::Few(names) => names.len(),
            Methods::Many(set) => set.len(),
        }
    }

    /// Whether no streaming method is known.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streaming_methods_answer_alike_for_no_few_and_many_names() {
        let none = StreamingMethods::new(Vec::new());
        assert!(none.is_empty() && !none.contains("/a.B/C") && !none.contains(""));
        for n in [1, SCAN_MAX, SCAN_MAX + 1, 100] {
            let names: Vec<String> = (0..n).map(|i| format!("/pkg.Svc/M{i}")).collect();
            let set = StreamingMethods::new(names.iter().cloned().chain(names.iter().cloned()));
            assert_eq!(set.len(), n, "duplicates are kept once");
            assert!(names.iter().all(|m| set.contains(m)));
            assert!(!set.contains("/pkg.Svc/M"));
            assert!(!set.contains(&format!("/pkg.Svc/M{n}")));
            assert!(!set.contains("/pkg.Svc/m0"));
        }
    }

    #[test]
    fn a_kind_says_streaming_and_infrastructure_apart() {
        let set = StreamingMethods::new(
            ["/s.T/Stream", "/grpc.health.v1.Health/Watch"].map(str::to_owned),
        );
        let kind = |path: &str| {
            let k = set.kind(path);
            (k.streaming, k.infra, k.is_user_unary())
        };
        assert_eq!(kind("/s.T/M"), (false, false, true));
        assert_eq!(kind("/s.T/Stream"), (true, false, false));
        assert_eq!(kind("/grpc.health.v1.Health/Check"), (false, true, false));
        assert_eq!(kind("/grpc.health.v1.Health/Watch"), (true, true, false));
        assert_eq!(
            kind("/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"),
            (false, true, false)
        );
        assert_eq!(CallKind::by_path("/s.T/Stream"), CallKind::UNARY);
        assert_eq!(
            CallKind::by_path("/grpc.health.v1.Health/Check"),
            set.kind("/grpc.health.v1.Health/Check")
        );
    }
}
