//! Consistent hashing: go-zero's `consistent_hash` balancer (v1.9.3+,
//! `zrpc/internal/balancer/consistenthash/consistenthash.go` on the ring of `core/hash`).
//!
//! Each call carries a key ([`hash_key`], go-zero's `zrpc.SetHashKey`) and goes to the server
//! that owns the key on a ring, so that one user's calls keep going to one server (cache
//! affinity). The ring is go-zero's, point for point, so that a key goes to the same server from a
//! Go client and a Rust client:
//! - each address gets [`REPLICAS`] (100) points, the murmur3 hashes of the address followed by
//!   `0` .. `99` in decimal (`repr(addr) + strconv.Itoa(i)`);
//! - a key goes to the first point at or after its own hash, wrapping around;
//! - a point shared by several addresses (possible only when an address is another one plus one
//!   digit, such as `:80` and `:801`) picks among them by the hash of `"16777619:" + key`,
//!   modulo their number. go-zero lists them in the order its picker added them (the iteration
//!   order of a Go map, so it varies); zrpc in the order of the addresses;
//! - murmur3 is x64_128's first half with seed 0 (Go `spaolacci/murmur3.Sum64`), from the
//!   `murmur3` crate.
//!
//! go-zero builds the ring from its connections that are READY: a server whose connection fails
//! leaves the ring until it reconnects, and its keys go to the next server on the ring in the
//! meantime. zrpc does the same without rebuilding: a lookup walks the ring past the points of
//! endpoints that are unreachable (in back-off after a connection failure), which gives exactly
//! the server the smaller ring would. Answers never move a key, slow or failed ones included:
//! neither does go-zero, and the point is that a key stays where its state is.
//!
//! A call without a key fails with go-zero's `InvalidArgument "[consistent_hash] missing hash
//! key in context"`.

use std::fmt::Write as _;
use std::sync::Arc;

use arc_swap::ArcSwap;

use super::endpoint::Endpoint;
use super::stats::EndpointStats;

/// go-zero `defaultReplicaCount`: points per address on the ring.
pub const REPLICAS: usize = 100;

/// go-zero's prefix of the key's second hash, which chooses among addresses sharing a point
/// (`innerRepr`: `fmt.Sprintf("%d:%v", prime, key)`).
const INNER_PREFIX: &[u8] = b"16777619:";

/// go-zero's status message for a call without a key.
pub(crate) const MISSING_KEY: &str = "[consistent_hash] missing hash key in context";

/// The key a `consistent_hash` client routes a call by. Set it with [`hash_key`]; other balancers
/// ignore it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HashKey(Arc<str>);

impl HashKey {
    /// A key.
    pub fn new(key: impl Into<Arc<str>>) -> Self {
        HashKey(key.into())
    }

    /// The key.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Sets the key by which a `consistent_hash` client routes `request` (go-zero
/// `zrpc.SetHashKey(ctx, key)`): calls with the same key go to the same server.
///
/// ```
/// # #[derive(Default)] struct HelloRequest;
/// let mut request = tonic::Request::new(HelloRequest::default());
/// zrpc_client::hash_key(&mut request, "user-42");
/// // greeter.say_hello(request).await
/// ```
pub fn hash_key<T>(request: &mut tonic::Request<T>, key: impl Into<Arc<str>>) {
    request.extensions_mut().insert(HashKey::new(key));
}

/// Go's `murmur3.Sum64` of `data`: the first half of MurmurHash3 x64_128 with seed 0.
fn sum64(data: &[u8]) -> u64 {
    let mut reader = data;
    murmur3::murmur3_x64_128(&mut reader, 0).map_or(0, |h| h as u64)
}

/// go-zero's hash ring over a list of addresses; node `i` is the `i`-th address.
#[derive(Debug, Clone, Default)]
pub struct HashRing {
    /// The points, sorted (a shared point appears once per node that has it).
    points: Box<[u64]>,
    /// The node of each point; the nodes of a shared point follow in address order.
    owners: Box<[u32]>,
    nodes: usize,
}

impl HashRing {
    /// The ring of `addrs` ([`REPLICAS`] points each). An address listed twice counts once (its
    /// first position).
    #[must_use]
    pub fn new<S: AsRef<str>>(addrs: &[S]) -> Self {
        let mut order: Vec<usize> = (0..addrs.len()).collect();
        order.sort_by(|&a, &b| addrs[a].as_ref().cmp(addrs[b].as_ref()).then(a.cmp(&b)));
        order.dedup_by(|b, a| addrs[*a].as_ref() == addrs[*b].as_ref());
        let mut points = Vec::with_capacity(order.len() * REPLICAS);
        let mut vnode = String::new();
        for (rank, &node) in order.iter().enumerate() {
            let id = u32::try_from(node).unwrap_or(u32::MAX);
            for i in 0..REPLICAS {
                vnode.clear();
                // go-zero: repr(node) + strconv.Itoa(i)
                let _ = write!(vnode, "{}{i}", addrs[node].as_ref());
                points.push((sum64(vnode.as_bytes()), rank, id));
            }
        }
        // by point, then by address: a shared point lists its nodes as go-zero's ring does when
        // it adds them in address order
        points.sort_unstable_by_key(|&(point, rank, _)| (point, rank));
        HashRing {
            owners: points.iter().map(|&(_, _, n)| n).collect(),
            points: points.into_iter().map(|(p, _, _)| p).collect(),
            nodes: order.len(),
        }
    }

    /// The number of distinct addresses.
    #[must_use]
    pub fn len(&self) -> usize {
        self.nodes
    }

    /// True for the ring of no address.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.nodes == 0
    }

    /// The node that owns `key` (go-zero `ConsistentHash.Get`); `None` for an empty ring.
    #[must_use]
    pub fn get(&self, key: &str) -> Option<usize> {
        self.get_where(key, |_| true)
    }

    /// The node that owns `key` on the ring of the nodes for which `usable` is true: the answer
    /// of go-zero's `Get` on a ring built from those nodes alone. `None` when no node is usable.
    pub fn get_where(&self, key: &str, mut usable: impl FnMut(usize) -> bool) -> Option<usize> {
        let n = self.points.len();
        if n == 0 {
            return None;
        }
        let hash = sum64(key.as_bytes());
        let start = self.points.partition_point(|&p| p < hash) % n;
        let node = |k: usize| self.owners[k] as usize;
        let mut i = start;
        loop {
            // the nodes sharing this point: [i, end)
            let mut end = i + 1;
            while end < n && self.points[end] == self.points[i] {
                end += 1;
            }
            if end - i == 1 {
                if usable(node(i)) {
                    return Some(node(i));
                }
            } else {
                let live = (i..end).filter(|&k| usable(node(k))).count();
                if live > 0 {
                    // a shared point is rare: the concatenation allocates
                    let inner = sum64(&[INNER_PREFIX, key.as_bytes()].concat());
                    let pos = (inner % live as u64) as usize;
                    return (i..end).map(node).filter(|&v| usable(v)).nth(pos);
                }
            }
            i = end % n;
            if i == start {
                return None;
            }
        }
    }

    /// Picks the endpoint of `set` (node `i` is `set[i]`) that owns `key` among those that are
    /// reachable at `now` (ns; not in back-off after a connection failure), marks it in flight and
    /// returns its index. When none is reachable, the key's own endpoint (a reconnection attempt
    /// beats failing without trying). `None` for an empty ring.
    pub fn pick<E: AsRef<EndpointStats>>(&self, key: &str, set: &[E], now: u64) -> Option<usize> {
        self.pick_where(key, set, now, |_| true)
    }

    /// [`HashRing::pick`] among the nodes for which `allowed` is true.
    pub(crate) fn pick_where<E: AsRef<EndpointStats>>(
        &self,
        key: &str,
        set: &[E],
        now: u64,
        allowed: impl Fn(usize) -> bool,
    ) -> Option<usize> {
        let reachable = |i: usize| set.get(i).is_some_and(|e| !e.as_ref().is_unreachable(now));
        let i = self
            .get_where(key, |i| allowed(i) && reachable(i))
            .or_else(|| self.get_where(key, |i| allowed(i) && i < set.len()))?;
        set[i].as_ref().on_pick_at(now);
        Some(i)
    }
}

/// The ring over one endpoint set, with the endpoints it was built from.
#[derive(Debug, Default)]
struct Ring {
    hash: HashRing,
    endpoints: Vec<Arc<Endpoint>>,
}

/// The client's `consistent_hash` picker: the ring of the current endpoint set, swapped whole on
/// each update (a pick never sees a ring and a set of two different updates).
#[derive(Debug, Default)]
pub(crate) struct ConsistentHash {
    ring: ArcSwap<Ring>,
}

impl ConsistentHash {
    /// Rebuilds the ring for `endpoints` (the balancer's new set).
    pub(crate) fn update(&self, endpoints: &[Arc<Endpoint>]) {
        let addrs: Vec<&str> = endpoints.iter().map(|e| &*e.addr).collect();
        self.ring.store(Arc::new(Ring {
            hash: HashRing::new(&addrs),
            endpoints: endpoints.to_vec(),
        }));
    }

    /// Picks the endpoint for `key` among those of `pool` (the set, or the set less the endpoints
    /// a retry avoids) at `now` (see [`HashRing::pick`]).
    ///
    /// # Errors
    ///
    /// `InvalidArgument` (go-zero's message) without a key or with an empty one; `Ok(None)` when
    /// the pool has no endpoint of the ring.
    pub(crate) fn pick(
        &self,
        key: Option<&HashKey>,
        pool: &[Arc<Endpoint>],
        now: u64,
    ) -> Result<Option<Arc<Endpoint>>, tonic::Status> {
        let Some(key) = key.filter(|k| !k.as_str().is_empty()) else {
            return Err(tonic::Status::invalid_argument(MISSING_KEY));
        };
        let ring = self.ring.load();
        let eps = &ring.endpoints;
        // the ring lists the endpoints in the order of the set it was built from: a pool that is
        // that set matches at the same index
        let in_pool = |i: usize| {
            pool.get(i).is_some_and(|p| Arc::ptr_eq(p, &eps[i]))
                || pool.iter().any(|p| Arc::ptr_eq(p, &eps[i]))
        };
        Ok(ring
            .hash
            .pick_where(key.as_str(), eps, now, in_pool)
            .map(|i| Arc::clone(&eps[i])))
    }
}

#[cfg(test)]
mod tests;
