//! The gRPC message framing of a body (1-octet flag, 4-octet length), followed chunk by chunk,
//! and the message limit as grpc-go words it: the server's request bodies and the client's
//! response bodies refuse an uncompressed message over the limit as soon as its prefix
//! arrives, with `ResourceExhausted` and [`too_large`]'s words (tonic's decoder would say
//! `OutOfRange`); a compressed one is bounded by the decompressor ([`too_large_decompressed`]).

const PREFIX_LEN: usize = 5;

/// grpc-go's words for a message whose prefix declares `len` octets, over `max`
/// (`rpc_util.go`, `recvMsg`).
#[must_use]
pub fn too_large(len: usize, max: usize) -> String {
    format!("grpc: received message larger than max ({len} vs. {max})")
}

/// grpc-go's words for a compressed message that decompresses to more than `max` octets
/// (`rpc_util.go`, `decompress`).
#[must_use]
pub fn too_large_decompressed(max: usize) -> String {
    format!("grpc: received message after decompression larger than max {max}")
}

/// Where a body is in its message framing.
#[derive(Debug, Default, Clone)]
pub struct Framing {
    prefix: [u8; PREFIX_LEN],
    prefix_seen: usize,
    payload_left: usize,
}

/// What [`Framing::follow`] found in a chunk of the body.
#[derive(Debug, PartialEq, Eq)]
pub struct Followed {
    /// A message is incomplete afterwards.
    pub pending: bool,
    /// Octets of the pending message in the chunk (those of completed messages are not).
    pub octets: usize,
    /// A message completed.
    pub completed: bool,
    /// The length an uncompressed message's prefix declared past `max_message`.
    pub oversized: Option<usize>,
}

impl Framing {
    /// Follows the framing over `data`, stopping at the prefix of an uncompressed message
    /// longer than `max_message`.
    #[inline]
    pub fn follow(&mut self, data: &[u8], max_message: Option<usize>) -> Followed {
        let mut oversized = None;
        let mut rest = data;
        let mut pending_octets = 0;
        let mut completed = false;
        while !rest.is_empty() {
            if self.prefix_seen < PREFIX_LEN {
                let take = (PREFIX_LEN - self.prefix_seen).min(rest.len());
                self.prefix[self.prefix_seen..self.prefix_seen + take]
                    .copy_from_slice(&rest[..take]);
                self.prefix_seen += take;
                pending_octets += take;
                rest = &rest[take..];
                if self.prefix_seen == PREFIX_LEN {
                    let [flag, a, b, c, d] = self.prefix;
                    self.payload_left = u32::from_be_bytes([a, b, c, d]) as usize;
                    if flag == 0 && max_message.is_some_and(|max| self.payload_left > max) {
                        oversized = Some(self.payload_left);
                        break;
                    }
                } else {
                    break;
                }
            }
            let take = self.payload_left.min(rest.len());
            self.payload_left -= take;
            pending_octets += take;
            rest = &rest[take..];
            if self.payload_left == 0 {
                self.prefix_seen = 0;
                pending_octets = 0;
                completed = true;
            }
        }
        Followed {
            pending: self.prefix_seen > 0,
            octets: pending_octets,
            completed,
            oversized,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(flag: u8, len: u32) -> Vec<u8> {
        let mut m = vec![flag];
        m.extend_from_slice(&len.to_be_bytes());
        m.resize(PREFIX_LEN + len as usize, 7);
        m
    }

    #[test]
    fn follows_messages_split_anywhere() {
        let mut body = message(0, 3);
        body.extend(message(0, 0));
        body.extend(message(1, 4));
        for cut in 0..body.len() {
            let mut f = Framing::default();
            let (a, b) = body.split_at(cut);
            let first = f.follow(a, Some(4));
            let second = f.follow(b, Some(4));
            assert_eq!(first.oversized.or(second.oversized), None, "cut at {cut}");
            assert!(!second.pending, "cut at {cut}: whole at the end");
            assert!(first.completed || second.completed);
        }
    }

    #[test]
    fn stops_at_an_uncompressed_prefix_over_the_limit() {
        let mut f = Framing::default();
        let mut body = message(0, 2);
        body.extend(&message(0, 9)[..3]);
        assert_eq!(f.follow(&body, Some(8)).oversized, None);
        let rest = &message(0, 9)[3..PREFIX_LEN];
        assert_eq!(f.follow(rest, Some(8)).oversized, Some(9));
        // compressed ones are the decompressor's to bound
        assert_eq!(
            Framing::default().follow(&message(1, 9), Some(8)).oversized,
            None
        );
        assert_eq!(
            too_large(9, 8),
            "grpc: received message larger than max (9 vs. 8)"
        );
    }
}
