//! Replays every input of the fuzz corpora (the repository's `fuzz/corpus/<target>/`) through
//! the same entry points the fuzz targets run, so that no input a campaign kept, or a crash it
//! found, can regress. Seconds, on stable; the campaigns themselves run by `scripts/fuzz.sh`.
//! A packaged crate has no corpora: the replay then says so and passes.

/// The corpus of `target` through `run` (`zrpc_core::fuzzing::replay`).
fn replay(target: &str, run: fn(&[u8])) {
    zrpc_core::fuzzing::replay(env!("CARGO_MANIFEST_DIR"), target, run);
}

#[test]
fn frames_corpus() {
    replay("frames", zrpc_server::fuzzing::frames);
}

#[test]
fn authority_repair_corpus() {
    replay("authority_repair", zrpc_server::fuzzing::authority_repair);
}

/// hpack_h2 (the repair against h2's decoder) needs h2's unstable codec: its inputs are
/// replayed here through the repair's own invariants.
#[test]
fn hpack_h2_corpus() {
    replay("hpack_h2", zrpc_server::fuzzing::authority_repair);
}

#[test]
fn hpack_walk_corpus() {
    replay("hpack_walk", zrpc_server::fuzzing::hpack_walk);
}

#[test]
fn server_conf_corpus() {
    replay("server_conf", zrpc_server::fuzzing::server_conf);
}

#[test]
fn binary_metadata_corpus() {
    replay("binary_metadata", zrpc_server::fuzzing::binary_metadata);
}
