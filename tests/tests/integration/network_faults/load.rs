//! Closed-loop callers that record every call (name, start, end, outcome), and what the
//! cases read from those records.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tonic::Code;
use zrpc_client::Client;
use zrpc_tests::pb::HelloRequest;
use zrpc_tests::pb::greeter_client::GreeterClient;

/// One call of a run.
#[derive(Debug, Clone)]
pub(crate) struct Call {
    pub(crate) name: String,
    pub(crate) start: Instant,
    pub(crate) end: Instant,
    pub(crate) result: Result<(), (Code, String)>,
}

impl Call {
    pub(crate) fn took(&self) -> Duration {
        self.end - self.start
    }

    /// The name without its padding, for messages.
    pub(crate) fn short(&self) -> &str {
        short(&self.name)
    }
}

/// A call's name without its padding (the directives and the caller's numbering stay).
pub(crate) fn short(name: &str) -> &str {
    match name.find(",x") {
        Some(i) => &name[..i],
        None => name,
    }
}

/// The failed calls of `calls`.
pub(crate) fn failures(calls: &[Call]) -> Vec<&Call> {
    calls.iter().filter(|c| c.result.is_err()).collect()
}

/// `code: count` of the failures, e.g. `Unavailable: 3`.
pub(crate) fn codes(calls: &[Call]) -> String {
    let mut by_code: std::collections::BTreeMap<String, usize> = Default::default();
    for c in failures(calls) {
        if let Err((code, _)) = &c.result {
            *by_code.entry(format!("{code:?}")).or_default() += 1;
        }
    }
    if by_code.is_empty() {
        return "-".to_owned();
    }
    by_code
        .iter()
        .map(|(c, n)| format!("{c}: {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The `q` quantile of the durations of `calls`.
pub(crate) fn quantile(calls: &[Call], q: f64) -> Duration {
    let mut d: Vec<Duration> = calls.iter().map(Call::took).collect();
    if d.is_empty() {
        return Duration::ZERO;
    }
    d.sort_unstable();
    let i = ((d.len() as f64 * q).ceil() as usize).clamp(1, d.len()) - 1;
    d[i]
}

/// Closed-loop callers on one client until stopped; each call named `<prefix>w<worker>-<i>`
/// followed by `suffix` (greeter directives, padding).
pub(crate) struct Load {
    stop: Arc<AtomicBool>,
    log: Arc<Mutex<Vec<Call>>>,
    done: watch::Receiver<usize>,
    workers: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    pub(crate) fn start(client: &Client, workers: usize, prefix: &str, suffix: &str) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let log: Arc<Mutex<Vec<Call>>> = Arc::default();
        let (done_tx, done) = watch::channel(0usize);
        let done_tx = Arc::new(done_tx);
        let workers = (0..workers)
            .map(|w| {
                let mut greeter = GreeterClient::new(client.clone())
                    .max_decoding_message_size(1 << 20)
                    .max_encoding_message_size(1 << 20);
                let (stop, log, done_tx) = (stop.clone(), log.clone(), done_tx.clone());
                let (prefix, suffix) = (prefix.to_owned(), suffix.to_owned());
                tokio::spawn(async move {
                    let mut i = 0;
                    while !stop.load(Ordering::Relaxed) {
                        let name = format!("{prefix}w{w}-{i}{suffix}");
                        let start = Instant::now();
                        let r = greeter.say_hello(HelloRequest { name: name.clone() }).await;
                        let end = Instant::now();
                        let result = r
                            .map(|_| ())
                            .map_err(|s| (s.code(), s.message().to_owned()));
                        log.lock().unwrap().push(Call {
                            name,
                            start,
                            end,
                            result,
                        });
                        done_tx.send_modify(|n| *n += 1);
                        i += 1;
                        // a call refused at once (no endpoint) never returns Pending: let the
                        // runtime's other tasks (timers, the test itself) run
                        tokio::task::yield_now().await;
                    }
                })
            })
            .collect();
        Load {
            stop,
            log,
            done,
            workers,
        }
    }

    /// Calls completed so far.
    pub(crate) fn completed(&self) -> usize {
        *self.done.borrow()
    }

    /// Waits until `n` calls have completed in all (panics after `limit`).
    pub(crate) async fn wait_completed(&mut self, n: usize, limit: Duration) {
        tokio::time::timeout(limit, self.done.wait_for(|d| *d >= n))
            .await
            .unwrap_or_else(|_| panic!("{n} calls not completed within {limit:?}"))
            .expect("load running");
    }

    /// Stops the callers, waits for their last calls; every call, in completion order.
    pub(crate) async fn stop(self) -> Vec<Call> {
        self.stop.store(true, Ordering::Relaxed);
        for w in self.workers {
            w.await.expect("caller panicked");
        }
        std::mem::take(&mut *self.log.lock().unwrap())
    }
}
