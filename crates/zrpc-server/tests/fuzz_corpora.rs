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
