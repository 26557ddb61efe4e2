//! Descriptor sets linked into the binary by `zrpc-build`'s generated code.
//!
//! Whether a method streams decides whether the server's timeout and shedder apply to it (a
//! client-streaming call must not be cut at `Timeout`, a stream must not be shed). tonic's
//! generated server types do not say it, so zrpc learns it from the protos' descriptor sets.
//! `zrpc-build` makes that automatic: the code it generates submits the encoded set to this
//! link-time registry (the [`inventory`] crate: a constructor per submission, run before
//! `main`), and [`Server`](crate::Server) reads every submitted set when it starts serving, for
//! the streaming kinds and for reflection. Alternatives considered: a trait implemented for
//! each generated server type cannot be detected by `add_service` without specialization, and
//! an explicit call (`reflection_descriptor`, `streaming_method`) is the step users forget.
//!
//! Not public API: the type is `pub` only for the generated code.

/// One encoded `FileDescriptorSet` submitted by generated code.
#[derive(Debug)]
pub struct LinkedDescriptorSet {
    encoded: &'static [u8],
}

impl LinkedDescriptorSet {
    /// Wraps the bytes `protoc --descriptor_set_out` wrote (`include_bytes!` of the file
    /// `zrpc-build` emits).
    pub const fn new(encoded: &'static [u8]) -> Self {
        LinkedDescriptorSet { encoded }
    }
}

inventory::collect!(LinkedDescriptorSet);

/// `explicit` (from `Server::reflection_descriptor`) followed by every linked set not already
/// in it.
pub(crate) fn with_linked(mut explicit: Vec<&'static [u8]>) -> Vec<&'static [u8]> {
    for set in inventory::iter::<LinkedDescriptorSet> {
        if !explicit.contains(&set.encoded) {
            explicit.push(set.encoded);
        }
    }
    explicit
}

#[cfg(test)]
mod tests {
    use super::*;

    // An empty set: harmless to the other tests of this binary that start servers.
    static SET: &[u8] = b"";
    inventory::submit!(LinkedDescriptorSet::new(SET));

    #[test]
    fn linked_sets_follow_explicit_ones_once() {
        let all = with_linked(vec![b"x".as_slice()]);
        assert_eq!(all[0], b"x");
        assert!(all.contains(&SET));
        let again = with_linked(all.clone());
        assert_eq!(again, all, "a set already registered is not added twice");
    }
}
