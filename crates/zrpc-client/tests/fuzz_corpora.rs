//! Replays every input of the fuzz corpora (the repository's `fuzz/corpus/<target>/`) through
//! the same entry points the fuzz targets run, so that no input a campaign kept, or a crash it
//! found, can regress. Seconds, on stable; the campaigns themselves run by `scripts/fuzz.sh`.
//! A packaged crate has no corpora: the replay then says so and passes.

/// The corpus of `target` through `run` (`zrpc_core::fuzzing::replay`).
fn replay(target: &str, run: fn(&[u8])) {
    zrpc_core::fuzzing::replay(env!("CARGO_MANIFEST_DIR"), target, run);
}

#[test]
fn client_conf_corpus() {
    replay("client_conf", zrpc_client::fuzzing::client_conf);
}

#[cfg(feature = "etcd")]
#[test]
fn etcd_values_corpus() {
    replay("etcd_values", zrpc_client::fuzzing::etcd_values);
}

#[cfg(feature = "tls")]
#[test]
fn k8s_answers_corpus() {
    replay("k8s_answers", zrpc_client::fuzzing::k8s_answers);
}
