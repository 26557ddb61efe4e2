//! A client that speaks no TLS to a TLS server: its first bytes (the HTTP/2 preface
//! `PRI * HTTP/2.0` of a gRPC client without TLS, or an HTTP/1 request) are no TLS record, and
//! rustls fails the handshake on the record's content type. The log says so, naming the
//! client's address, once per address per [`LOG_PERIOD`] with the number held back since: a
//! client that retries with the wrong config writes a line a minute, not one per connection.

use std::collections::HashMap;
use std::io;
use std::net::IpAddr;
use std::time::Duration;

use tokio::time::Instant;

/// One line per client address per this period.
pub(crate) const LOG_PERIOD: Duration = Duration::from_secs(60);
/// Addresses remembered at most; past it, the ones not logged within [`LOG_PERIOD`] are
/// forgotten, and if all are recent, every other address shares one line.
const MAX_ADDRS: usize = 1024;

/// True when the handshake failed on bytes that are not a TLS record (rustls's
/// `InvalidContentType`: the first byte is no TLS content type).
pub(crate) fn is_not_tls(e: &io::Error) -> bool {
    e.get_ref()
        .and_then(|e| e.downcast_ref::<rustls::Error>())
        .is_some_and(|e| {
            matches!(
                e,
                rustls::Error::InvalidMessage(rustls::InvalidMessage::InvalidContentType)
            )
        })
}

/// The client addresses lately logged as plaintext clients: when each was logged, and the
/// handshakes held back since.
#[derive(Debug, Default)]
pub(crate) struct PlaintextLog {
    by_addr: HashMap<Option<IpAddr>, (Instant, u64)>,
}

impl PlaintextLog {
    /// Records a plaintext handshake from `ip` at `now`; `Some(held back)` when it is to be
    /// logged.
    pub(crate) fn allow(&mut self, ip: IpAddr, now: Instant) -> Option<u64> {
        let recent = |logged: Instant| now.saturating_duration_since(logged) < LOG_PERIOD;
        let mut key = Some(ip);
        if self.by_addr.len() >= MAX_ADDRS && !self.by_addr.contains_key(&key) {
            self.by_addr.retain(|_, (logged, _)| recent(*logged));
            if self.by_addr.len() >= MAX_ADDRS {
                key = None;
            }
        }
        match self.by_addr.get_mut(&key) {
            Some((logged, held)) if recent(*logged) => {
                *held += 1;
                None
            }
            Some((logged, held)) => {
                *logged = now;
                Some(std::mem::take(held))
            }
            None => {
                self.by_addr.insert(key, (now, 0));
                Some(0)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_record_that_is_not_tls_is_a_plaintext_client() {
        let not_tls = io::Error::new(
            io::ErrorKind::InvalidData,
            rustls::Error::InvalidMessage(rustls::InvalidMessage::InvalidContentType),
        );
        assert!(is_not_tls(&not_tls));
        let bad_ca = io::Error::new(
            io::ErrorKind::InvalidData,
            rustls::Error::AlertReceived(rustls::AlertDescription::UnknownCA),
        );
        assert!(!is_not_tls(&bad_ca));
        assert!(!is_not_tls(&io::Error::from(io::ErrorKind::TimedOut)));
    }

    #[test]
    fn logs_once_per_address_per_period_with_the_count_held_back() {
        let mut log = PlaintextLog::default();
        let t0 = Instant::now();
        let (a, b): (IpAddr, IpAddr) = ([10, 0, 0, 1].into(), [10, 0, 0, 2].into());
        assert_eq!(log.allow(a, t0), Some(0));
        assert_eq!(log.allow(a, t0 + Duration::from_secs(1)), None);
        assert_eq!(log.allow(a, t0 + Duration::from_secs(2)), None);
        // another address has its own line
        assert_eq!(log.allow(b, t0 + Duration::from_secs(2)), Some(0));
        assert_eq!(log.allow(a, t0 + LOG_PERIOD), Some(2));
        assert_eq!(log.allow(a, t0 + LOG_PERIOD), None);
    }

    #[test]
    fn past_its_cap_every_other_address_shares_one_line() {
        let mut log = PlaintextLog::default();
        let t0 = Instant::now();
        for i in 0..MAX_ADDRS as u32 {
            assert_eq!(log.allow(IpAddr::from(i.to_be_bytes()), t0), Some(0));
        }
        let (x, y): (IpAddr, IpAddr) = ([192, 0, 2, 1].into(), [192, 0, 2, 2].into());
        assert_eq!(log.allow(x, t0), Some(0));
        assert_eq!(log.allow(y, t0), None);
        assert_eq!(log.by_addr.len(), MAX_ADDRS + 1);
        // once the period passed, the old addresses are forgotten for a new one
        let later = t0 + LOG_PERIOD;
        assert_eq!(log.allow(y, later), Some(0));
        assert_eq!(log.by_addr.len(), 1);
    }
}
