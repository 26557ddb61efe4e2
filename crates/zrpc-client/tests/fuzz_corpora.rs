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
