//! An HPACK (RFC 7541) header-block walker that mirrors the peer encoder's dynamic table and
//! repairs an unparseable `:authority` value in place, keeping its encoded and decoded length.
//!
//! Why the lengths must not change: the frame length stays valid without re-framing, and the
//! dynamic-table entry the client and `h2` both insert keeps the same size (`name + value + 32`
//! octets), so both tables evict the same entries at the same time and every later indexed
//! reference resolves to the same slot on both sides. The only difference is the value of the
//! repaired entry, which `h2` then sees (valid) wherever the client refers to it.
//!
//! The walker keeps no header names or values, only each entry's size and whether it is an
//! `:authority`, so it allocates nothing per header.

use std::collections::VecDeque;

use super::huffman;

/// The table size every HPACK decoder starts with (`SETTINGS_HEADER_TABLE_SIZE` default).
const INITIAL_TABLE_SIZE: usize = 4096;
/// A dynamic-table size update above this gives up inspecting (zrpc's serve loop keeps hyper's
/// default of 4096).
const MAX_TABLE_SIZE: usize = 64 * 1024;
/// Static table index of `:authority` (RFC 7541 Appendix A).
const AUTHORITY_INDEX: usize = 1;
/// The static table has 61 entries.
const STATIC_LEN: usize = 61;
/// `:authority` Huffman-encoded (its only valid encoding: padding is fixed to ones).
const AUTHORITY_HUFFMAN: [u8; 8] = [0xb8, 0x3b, 0x53, 0x39, 0xec, 0x32, 0x7d, 0x7f];

/// A header block this walker cannot follow; the caller stops inspecting the connection and
/// lets `h2` judge it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Unfollowable;

/// What one header block held.
#[derive(Debug, Default)]
pub(crate) struct BlockReport {
    /// The block carried an `:authority` (literal or indexed).
    pub(crate) saw_authority: bool,
    /// The block carried an `:authority` that `http::uri::Authority` rejects (before repair).
    pub(crate) saw_invalid: bool,
    /// Invalid values that were repaired in place.
    pub(crate) repaired: u32,
    /// Invalid values that could not be repaired at the same length.
    pub(crate) unrepaired: u32,
    /// The first repair of this block: `(original, replacement)`.
    pub(crate) first_repair: Option<(String, String)>,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    size: usize,
    name_len: usize,
    /// `Some(valid)` for an `:authority` entry.
    authority: Option<bool>,
}

/// The decoder side of one connection's HPACK context.
#[derive(Debug)]
pub(crate) struct Walker {
    entries: VecDeque<Entry>,
    size: usize,
    max_size: usize,
}

impl Default for Walker {
    fn default() -> Self {
        Self {
            entries: VecDeque::new(),
            size: 0,
            max_size: INITIAL_TABLE_SIZE,
        }
    }
}

/// A string literal's place in the block.
struct Str {
    huffman: bool,
    start: usize,
    end: usize,
}

impl Walker {
    /// Walks one complete header block, repairing invalid `:authority` values in place.
    pub(crate) fn walk(&mut self, block: &mut [u8]) -> Result<BlockReport, Unfollowable> {
        let mut report = BlockReport::default();
        let mut i = 0;
        while i < block.len() {
            let b = block[i];
            if b & 0x80 != 0 {
                // Indexed header field.
                let index = read_int(block, &mut i, 7)?;
                if let Some(valid) = self.lookup(index)? {
                    report.saw_authority = true;
                    report.saw_invalid |= !valid;
                }
            } else if b & 0xe0 == 0x20 {
                // Dynamic table size update.
                let size = read_int(block, &mut i, 5)?;
                if size > MAX_TABLE_SIZE {
                    return Err(Unfollowable);
                }
                self.max_size = size;
                self.evict(0);
            } else {
                // Literal: with incremental indexing (01), without indexing (0000) or never
                // indexed (0001).
                let indexing = b & 0xc0 == 0x40;
                let index = read_int(block, &mut i, if indexing { 6 } else { 4 })?;
                let (is_authority, name_len) = if index == 0 {
                    let name = read_str(block, &mut i)?;
                    let raw = &block[name.start..name.end];
                    let is_authority = if name.huffman {
                        raw == AUTHORITY_HUFFMAN
                    } else {
                        raw == b":authority"
                    };
                    let len = if indexing {
                        decoded_len(block, &name)?
                    } else {
                        0
                    };
                    (is_authority, len)
                } else {
                    (self.lookup(index)?.is_some(), self.name_len(index))
                };
                let value = read_str(block, &mut i)?;
                let mut valid = true;
                if is_authority {
                    report.saw_authority = true;
                    valid = self.check_authority(block, &value, &mut report)?;
                }
                if indexing {
                    let size = name_len + decoded_len(block, &value)? + 32;
                    self.insert(Entry {
                        size,
                        name_len,
                        authority: is_authority.then_some(valid),
                    });
                }
            }
        }
        Ok(report)
    }

    /// Checks an `:authority` value and repairs it when it is invalid; returns whether the value
    /// `h2` will now see is valid.
    fn check_authority(
        &self,
        block: &mut [u8],
        value: &Str,
        report: &mut BlockReport,
    ) -> Result<bool, Unfollowable> {
        let raw = &block[value.start..value.end];
        let decoded = if value.huffman {
            let mut v = Vec::with_capacity(raw.len() * 8 / 5);
            huffman::decode(raw, |b| v.push(b)).map_err(|_| Unfollowable)?;
            v
        } else {
            raw.to_vec()
        };
        if is_valid(&decoded) {
            return Ok(true);
        }
        report.saw_invalid = true;
        let Some(repaired) = repair(&decoded) else {
            report.unrepaired += 1;
            return Ok(false);
        };
        let slot = &mut block[value.start..value.end];
        if value.huffman {
            if huffman::encoded_len(&repaired) != slot.len() {
                report.unrepaired += 1;
                return Ok(false);
            }
            huffman::encode_into(&repaired, slot);
        } else {
            slot.copy_from_slice(&repaired);
        }
        report.repaired += 1;
        if report.first_repair.is_none() {
            report.first_repair = Some((
                String::from_utf8_lossy(&decoded).into_owned(),
                String::from_utf8_lossy(&repaired).into_owned(),
            ));
        }
        Ok(true)
    }

    /// `Some(valid)` when `index` names an `:authority` entry, `None` for any other header.
    fn lookup(&self, index: usize) -> Result<Option<bool>, Unfollowable> {
        match index {
            0 => Err(Unfollowable),
            // The static `:authority` has an empty value, which `h2` rejects too.
            AUTHORITY_INDEX => Ok(Some(false)),
            i if i <= STATIC_LEN => Ok(None),
            i => self
                .entries
                .get(i - STATIC_LEN - 1)
                .map(|e| e.authority)
                .ok_or(Unfollowable),
        }
    }

    /// The decoded length of the name at `index` (a literal with an indexed name re-uses it).
    fn name_len(&self, index: usize) -> usize {
        if index <= STATIC_LEN {
            return STATIC_NAME_LEN[index - 1] as usize;
        }
        self.entries
            .get(index - STATIC_LEN - 1)
            .map_or(0, |e| e.name_len)
    }

    fn insert(&mut self, entry: Entry) {
        if entry.size > self.max_size {
            // RFC 7541 §4.4: an entry larger than the table empties it and is not added.
            self.entries.clear();
            self.size = 0;
            return;
        }
        self.evict(entry.size);
        self.size += entry.size;
        self.entries.push_front(entry);
    }

    /// Evicts the oldest entries until `incoming` more octets fit.
    fn evict(&mut self, incoming: usize) {
        while self.size + incoming > self.max_size {
            match self.entries.pop_back() {
                Some(e) => self.size -= e.size,
                None => break,
            }
        }
    }
}

/// Whether `h2` accepts `value` as an `:authority` (it parses it with `http::uri::Authority`).
pub(crate) fn is_valid(value: &[u8]) -> bool {
    http::uri::Authority::try_from(value).is_ok()
}

/// A valid authority of the same length whose every octet has the same Huffman code length as
/// the one it replaces (so both the raw and the Huffman-encoded lengths are kept), or `None`.
///
/// Every octet that cannot stand in an authority is replaced, and so is every `:` but the last
/// (the port separator): `127.0.0.1:2379,127.0.0.1:2380` becomes
/// `127.0.0.1x2379,127.0.0.1:2380`.
pub(crate) fn repair(value: &[u8]) -> Option<Vec<u8>> {
    let last_colon = value.iter().rposition(|&b| b == b':');
    let repaired: Option<Vec<u8>> = value
        .iter()
        .enumerate()
        .map(|(i, &b)| {
            if is_plain(b) || (b == b':' && Some(i) == last_colon) {
                Some(b)
            } else {
                substitute(huffman::code_len(b))
            }
        })
        .collect();
    repaired.filter(|r| is_valid(r))
}

/// Unreserved characters and sub-delimiters (RFC 3986): always valid in an authority.
fn is_plain(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=".contains(&b)
}

/// A plain character whose Huffman code has `bits` bits.
fn substitute(bits: u8) -> Option<u8> {
    match bits {
        5 => Some(b'a'),
        6 => Some(b'-'),
        7 => Some(b'x'),
        8 => Some(b'*'),
        10 => Some(b'!'),
        11 => Some(b'+'),
        13 => Some(b'~'),
        _ => None,
    }
}

/// Reads an HPACK integer with an `n`-bit prefix at `*i` (RFC 7541 §5.1).
fn read_int(block: &[u8], i: &mut usize, n: u8) -> Result<usize, Unfollowable> {
    let mask = (1usize << n) - 1;
    let first = *block.get(*i).ok_or(Unfollowable)? as usize & mask;
    *i += 1;
    if first < mask {
        return Ok(first);
    }
    let mut value = mask;
    let mut shift = 0;
    loop {
        let b = *block.get(*i).ok_or(Unfollowable)?;
        *i += 1;
        value += ((b & 0x7f) as usize) << shift;
        if b & 0x80 == 0 {
            return Ok(value);
        }
        shift += 7;
        if shift > 28 {
            return Err(Unfollowable);
        }
    }
}

/// Reads a string literal's header at `*i` and skips its octets (RFC 7541 §5.2).
fn read_str(block: &[u8], i: &mut usize) -> Result<Str, Unfollowable> {
    let huffman = *block.get(*i).ok_or(Unfollowable)? & 0x80 != 0;
    let len = read_int(block, i, 7)?;
    let start = *i;
    let end = start.checked_add(len).ok_or(Unfollowable)?;
    if end > block.len() {
        return Err(Unfollowable);
    }
    *i = end;
    Ok(Str {
        huffman,
        start,
        end,
    })
}

fn decoded_len(block: &[u8], s: &Str) -> Result<usize, Unfollowable> {
    let raw = &block[s.start..s.end];
    if !s.huffman {
        return Ok(raw.len());
    }
    let mut n = 0;
    huffman::decode(raw, |_| n += 1).map_err(|_| Unfollowable)?;
    Ok(n)
}

/// Name lengths of the static table entries 1..=61 (RFC 7541 Appendix A).
const STATIC_NAME_LEN: [u8; STATIC_LEN] = [
    10, // :authority
    7,  // :method GET
    7,  // :method POST
    5,  // :path /
    5,  // :path /index.html
    7,  // :scheme http
    7,  // :scheme https
    7,  // :status 200
    7,  // :status 204
    7,  // :status 206
    7,  // :status 304
    7,  // :status 400
    7,  // :status 404
    7,  // :status 500
    14, // accept-charset
    15, // accept-encoding
    15, // accept-language
    13, // accept-ranges
    6,  // accept
    27, // access-control-allow-origin
    3,  // age
    5,  // allow
    13, // authorization
    13, // cache-control
    19, // content-disposition
    16, // content-encoding
    16, // content-language
    14, // content-length
    16, // content-location
    13, // content-range
    12, // content-type
    6,  // cookie
    4,  // date
    4,  // etag
    6,  // expect
    7,  // expires
    4,  // from
    4,  // host
    8,  // if-match
    17, // if-modified-since
    13, // if-none-match
    8,  // if-range
    19, // if-unmodified-since
    13, // last-modified
    4,  // link
    8,  // location
    12, // max-forwards
    18, // proxy-authenticate
    19, // proxy-authorization
    5,  // range
    7,  // referer
    7,  // refresh
    11, // retry-after
    6,  // server
    10, // set-cookie
    25, // strict-transport-security
    17, // transfer-encoding
    10, // user-agent
    4,  // vary
    3,  // via
    16, // www-authenticate
];
