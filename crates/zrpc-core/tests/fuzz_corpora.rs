//! Replays every input of the fuzz corpora (the repository's `fuzz/corpus/<target>/`) through
//! the same entry points the fuzz targets run, so that no input a campaign kept, or a crash it
//! found, can regress. Seconds, on stable; the campaigns themselves run by `scripts/fuzz.sh`.
//! A packaged crate has no corpora: the replay then says so and passes.

/// The corpus of `target` through `run` (`zrpc_core::fuzzing::replay`).
fn replay(target: &str, run: fn(&[u8])) {
    zrpc_core::fuzzing::replay(env!("CARGO_MANIFEST_DIR"), target, run);
}

#[test]
fn grpc_timeout_corpus() {
    replay("grpc_timeout", zrpc_core::fuzzing::grpc_timeout);
}

#[test]
fn grpc_message_corpus() {
    replay("grpc_message", zrpc_core::fuzzing::grpc_message);
}

#[test]
fn trace_context_corpus() {
    replay("trace_context", zrpc_core::fuzzing::trace_context);
}

#[test]
fn tier_corpus() {
    replay("tier", zrpc_core::fuzzing::tier);
}

#[test]
fn decompress_corpus() {
    replay("decompress", zrpc_core::fuzzing::decompress);
}
