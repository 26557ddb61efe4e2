//! The process's live parts, for the admin view (`GET /admin/state` on the DevServer): a
//! registry of weak references that the parts add themselves to (each zrpc client as it is
//! built) and the admin view reads when asked.
//!
//! Nothing here runs per call: a part is registered once, and its snapshot is taken only when
//! the view is asked for. A part that is dropped leaves the registry at the next snapshot.

use std::sync::{Arc, OnceLock, Weak};

use parking_lot::Mutex;

/// A part of the process the admin view shows.
pub trait Inspect: Send + Sync {
    /// Its state now, as JSON.
    fn snapshot(&self) -> serde_json::Value;
}

fn clients() -> &'static Mutex<Vec<Weak<dyn Inspect>>> {
    static CLIENTS: OnceLock<Mutex<Vec<Weak<dyn Inspect>>>> = OnceLock::new();
    CLIENTS.get_or_init(Mutex::default)
}

/// Adds a client: it shows in the view for as long as `client` lives.
pub fn register_client(client: &Arc<dyn Inspect>) {
    let mut list = clients().lock();
    list.retain(|w| w.strong_count() > 0);
    list.push(Arc::downgrade(client));
}

/// The snapshots of the live clients, oldest first.
#[must_use]
pub fn client_snapshots() -> Vec<serde_json::Value> {
    let live: Vec<Arc<dyn Inspect>> = {
        let mut list = clients().lock();
        list.retain(|w| w.strong_count() > 0);
        list.iter().filter_map(Weak::upgrade).collect()
    };
    // the snapshots are taken outside the lock
    live.iter().map(|c| c.snapshot()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Part(u32);

    impl Inspect for Part {
        fn snapshot(&self) -> serde_json::Value {
            serde_json::json!({ "part": self.0 })
        }
    }

    #[test]
    fn a_dropped_part_leaves_the_view() {
        let kept: Arc<dyn Inspect> = Arc::new(Part(41));
        let dropped: Arc<dyn Inspect> = Arc::new(Part(42));
        register_client(&kept);
        register_client(&dropped);
        let has = |n: u32| {
            client_snapshots()
                .iter()
                .any(|s| s["part"] == serde_json::json!(n))
        };
        assert!(has(41) && has(42));
        drop(dropped);
        assert!(has(41) && !has(42));
    }
}
