//! Child processes: termination (SIGTERM, then SIGKILL) and their output lines.

use std::io::{BufRead, BufReader};
use std::process::{Child, ExitStatus};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Sends SIGTERM to `child` (our own process) and waits up to `grace` for it to exit, then
/// SIGKILLs it. Returns its exit status.
pub(super) fn terminate(child: &mut Child, grace: Duration) -> Option<ExitStatus> {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    if let Ok(Some(status)) = child.try_wait() {
        return Some(status);
    }
    if let Ok(pid) = i32::try_from(child.id()) {
        let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
    }
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    child.wait().ok()
}

/// Collects the lines of a child's pipe on a thread.
pub(super) fn collect_lines<R: std::io::Read + Send + 'static>(pipe: R) -> Arc<Mutex<Vec<String>>> {
    let lines = Arc::new(Mutex::new(Vec::new()));
    let sink = lines.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines() {
            let Ok(line) = line else { break };
            sink.lock().unwrap_or_else(|e| e.into_inner()).push(line);
        }
    });
    lines
}

pub(super) fn snapshot(lines: &Arc<Mutex<Vec<String>>>) -> Vec<String> {
    lines.lock().unwrap_or_else(|e| e.into_inner()).clone()
}
