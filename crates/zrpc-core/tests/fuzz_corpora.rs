//! Replays every input of the fuzz corpora (the repository's `fuzz/corpus/<target>/`) through
//! the same entry points the fuzz targets run, so that no input a campaign kept, or a crash it
//! found, can regress. Seconds, on stable; the campaigns themselves run by `scripts/fuzz.sh`.
//! A packaged crate has no corpora: the replay then says so and passes.

use std::path::PathBuf;

/// The files of one target's corpus, or `None` when the corpora are not there.
fn corpus(target: &str) -> Option<Vec<(PathBuf, Vec<u8>)>> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        eprintln!(
            "note: no fuzz corpus at {} (a packaged crate?): nothing replayed",
            dir.display()
        );
        return None;
    };
    let mut files: Vec<(PathBuf, Vec<u8>)> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .map(|p| {
            let data = std::fs::read(&p).expect("a corpus file that cannot be read");
            (p, data)
        })
        .collect();
    files.sort();
    Some(files)
}

fn replay(target: &str, run: fn(&[u8])) {
    let Some(files) = corpus(target) else {
        return;
    };
    assert!(!files.is_empty(), "the corpus of {target} is empty");
    for (path, data) in &files {
        let outcome = std::panic::catch_unwind(|| run(data));
        assert!(outcome.is_ok(), "{target}: {} fails", path.display());
    }
    eprintln!("{target}: {} inputs replayed", files.len());
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
