use std::collections::HashMap;

use proptest::prelude::*;

use super::super::stats::BACKOFF_MAX;
use super::*;

/// `murmur3.Sum64` of the first `n` bytes of [`ALPHABET`], printed by go-zero's `core/hash`
/// (`interop/gozero/bin/gz-ring`): every tail length and one, two and three 16-byte blocks.
const ALPHABET: &str = "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLM";
const GO_SUM64: &[(usize, u64)] = &[
    (0, 0u64),
    (1, 9607679276477937801u64),
    (2, 10631611042442844974u64),
    (3, 13012657714217449575u64),
    (4, 13293420856045129039u64),
    (5, 2321271983248423864u64),
    (7, 12019315343699666073u64),
    (8, 14738604482492337154u64),
    (9, 380484692874131812u64),
    (15, 9997468155419308027u64),
    (16, 14180213048082216739u64),
    (17, 8459014091212432983u64),
    (31, 5471981472859969704u64),
    (32, 1630628199398509283u64),
    (33, 17196416333647536264u64),
    (40, 9087769137275592996u64),
];

#[test]
fn sum64_is_gos_murmur3_sum64() {
    for &(n, want) in GO_SUM64 {
        assert_eq!(sum64(&ALPHABET.as_bytes()[..n]), want, "{n} bytes");
    }
}

/// go-zero's answers (`gz-ring -addrs ... -keys 16`): three loopback servers.
const GO_LOOPBACK: &[(&str, &str)] = &[
    ("key-0", "127.0.0.1:8081"),
    ("key-1", "127.0.0.1:8081"),
    ("key-2", "127.0.0.1:8081"),
    ("key-3", "127.0.0.1:8082"),
    ("key-4", "127.0.0.1:8081"),
    ("key-5", "127.0.0.1:8080"),
    ("key-6", "127.0.0.1:8082"),
    ("key-7", "127.0.0.1:8080"),
    ("key-8", "127.0.0.1:8080"),
    ("key-9", "127.0.0.1:8082"),
    ("key-10", "127.0.0.1:8081"),
    ("key-11", "127.0.0.1:8082"),
    ("key-12", "127.0.0.1:8082"),
    ("key-13", "127.0.0.1:8082"),
    ("key-14", "127.0.0.1:8081"),
    ("key-15", "127.0.0.1:8082"),
];

/// go-zero's answers for `10.0.0.1:80`, `:801` and `:8080`, where `:80` and `:801` share ten
/// points (`"10.0.0.1:80" + "1x"` is `"10.0.0.1:801" + "x"`): the first twelve keys land on
/// shared points, so the key's second hash chooses (both ways), the last four do not.
const GO_SHARED_POINTS: &[(&str, &str)] = &[
    ("key-14", "10.0.0.1:801"),
    ("key-82", "10.0.0.1:80"),
    ("key-140", "10.0.0.1:801"),
    ("key-161", "10.0.0.1:80"),
    ("key-185", "10.0.0.1:80"),
    ("key-218", "10.0.0.1:801"),
    ("key-252", "10.0.0.1:80"),
    ("key-259", "10.0.0.1:80"),
    ("key-296", "10.0.0.1:80"),
    ("key-308", "10.0.0.1:80"),
    ("key-320", "10.0.0.1:80"),
    ("key-362", "10.0.0.1:801"),
    ("key-0", "10.0.0.1:801"),
    ("key-1", "10.0.0.1:8080"),
    ("key-2", "10.0.0.1:8080"),
    ("key-3", "10.0.0.1:801"),
];

fn owner<'a>(ring: &HashRing, addrs: &[&'a str], key: &str) -> &'a str {
    addrs[ring.get(key).unwrap()]
}

/// The ring point `key` lands on is shared by several addresses.
fn on_shared_point(ring: &HashRing, key: &str) -> bool {
    let hash = sum64(key.as_bytes());
    let i = ring.points.partition_point(|&p| p < hash) % ring.points.len();
    ring.points.iter().filter(|&&p| p == ring.points[i]).count() > 1
}

#[test]
fn keys_go_where_go_zero_sends_them() {
    // any listing order: the ring is the same
    for addrs in [
        ["127.0.0.1:8080", "127.0.0.1:8081", "127.0.0.1:8082"],
        ["127.0.0.1:8082", "127.0.0.1:8080", "127.0.0.1:8081"],
    ] {
        let ring = HashRing::new(&addrs);
        assert_eq!(ring.len(), 3);
        assert_eq!(ring.points.len(), 300);
        for &(key, want) in GO_LOOPBACK {
            assert_eq!(owner(&ring, &addrs, key), want, "{key}");
        }
    }
    for addrs in [
        ["10.0.0.1:80", "10.0.0.1:801", "10.0.0.1:8080"],
        ["10.0.0.1:8080", "10.0.0.1:801", "10.0.0.1:80"],
    ] {
        let ring = HashRing::new(&addrs);
        for (i, &(key, want)) in GO_SHARED_POINTS.iter().enumerate() {
            assert_eq!(on_shared_point(&ring, key), i < 12, "{key}");
            assert_eq!(owner(&ring, &addrs, key), want, "{key}");
        }
    }
}

#[test]
fn an_empty_ring_owns_nothing_and_duplicates_count_once() {
    let none: [&str; 0] = [];
    assert!(HashRing::new(&none).get("k").is_none());
    assert!(HashRing::new(&none).is_empty());
    let ring = HashRing::new(&["a:1", "b:1", "a:1"]);
    assert_eq!(ring.len(), 2);
    assert_eq!(ring.points.len(), 2 * REPLICAS);
    assert!((0..100).all(|k| ring.get(&format!("k{k}")) != Some(2)));
}

fn addr_sets() -> impl Strategy<Value = Vec<String>> {
    // ports that are prefixes of one another share points: 80, 801, 8080, 18080, ...
    prop::collection::btree_set(
        prop_oneof![
            (1u16..9999).prop_map(|p| format!("127.0.0.1:{p}")),
            (0u16..12).prop_map(|p| format!(
                "10.0.0.1:80{}",
                if p < 10 { p.to_string() } else { String::new() }
            )),
        ],
        2..8,
    )
    .prop_map(|s| s.into_iter().collect())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Passing over an endpoint gives the answer of the ring built without it, and moves only
    /// the keys it owned.
    #[test]
    fn passing_over_a_node_is_the_ring_without_it(addrs in addr_sets(), gone in 0usize..8) {
        let gone = gone % addrs.len();
        let ring = HashRing::new(&addrs);
        let rest: Vec<&String> = addrs.iter().enumerate().filter(|&(i, _)| i != gone).map(|(_, a)| a).collect();
        let smaller = HashRing::new(&rest);
        for k in 0..300 {
            let key = format!("key-{k}");
            let before = ring.get(&key).unwrap();
            let after = ring.get_where(&key, |i| i != gone).unwrap();
            prop_assert_eq!(&addrs[after], rest[smaller.get(&key).unwrap()], "{}", key);
            if before != gone {
                prop_assert_eq!(after, before, "{} moved without its owner leaving", key);
            }
        }
    }
}

fn stats(n: usize) -> Vec<Arc<EndpointStats>> {
    (0..n).map(|_| Arc::new(EndpointStats::new())).collect()
}

#[test]
fn an_unreachable_endpoint_passes_its_keys_to_the_next_on_the_ring_until_its_back_off_ends() {
    let addrs = ["127.0.0.1:8080", "127.0.0.1:8081", "127.0.0.1:8082"];
    let ring = HashRing::new(&addrs);
    let set = stats(3);
    // key-5 belongs to :8080 (see GO_LOOPBACK)
    assert_eq!(ring.pick("key-5", &set, 0), Some(0));
    assert_eq!(set[0].inflight(), 1, "the pick marks it in flight");
    set[0].on_abandon();
    set[0].on_pick();
    set[0].on_transport_failure(0, 0);
    let next = ring.get_where("key-5", |i| i != 0).unwrap();
    assert_ne!(next, 0);
    assert_eq!(ring.pick("key-5", &set, 1), Some(next));
    assert_eq!(set[next].inflight(), 1);
    // keys of the others stay put
    for &(key, want) in GO_LOOPBACK.iter().filter(|(_, a)| *a != addrs[0]) {
        assert_eq!(addrs[ring.pick(key, &set, 1).unwrap()], want, "{key}");
    }
    // back-off over: the key is back home
    let later = u64::try_from(BACKOFF_MAX.as_nanos()).unwrap() + 1;
    assert_eq!(ring.pick("key-5", &set, later), Some(0));
}

#[test]
fn with_every_endpoint_unreachable_the_keys_own_is_tried() {
    let addrs = ["127.0.0.1:8080", "127.0.0.1:8081"];
    let ring = HashRing::new(&addrs);
    let set = stats(2);
    for s in &set {
        s.on_pick();
        s.on_transport_failure(0, 0);
    }
    let own: HashMap<String, usize> = (0..20)
        .map(|k| format!("key-{k}"))
        .map(|k| {
            let o = ring.get(&k).unwrap();
            (k, o)
        })
        .collect();
    for (key, o) in &own {
        assert_eq!(ring.pick(key, &set, 1), Some(*o), "{key}");
    }
}

#[test]
fn a_call_without_a_key_fails_as_in_go_zero() {
    let ch = ConsistentHash::default();
    for key in [None, Some(HashKey::new(""))] {
        let e = ch.pick(key.as_ref(), &[], 0).unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
        assert_eq!(e.message(), "[consistent_hash] missing hash key in context");
    }
    // with a key and no endpoint: nothing to pick (the balancer says "no endpoint")
    assert!(ch.pick(Some(&HashKey::new("k")), &[], 0).unwrap().is_none());
}

#[test]
fn hash_key_sets_the_extension() {
    let mut req = tonic::Request::new(());
    hash_key(&mut req, String::from("user-42"));
    assert_eq!(
        req.extensions().get::<HashKey>().map(HashKey::as_str),
        Some("user-42")
    );
}

#[tokio::test]
async fn a_retry_avoiding_the_keys_server_goes_to_its_next_on_the_ring() {
    let addrs = ["127.0.0.1:8080", "127.0.0.1:8081", "127.0.0.1:8082"];
    let eps: Vec<Arc<Endpoint>> = addrs
        .iter()
        .map(|a| Arc::new(Endpoint::new(a, &Default::default()).unwrap()))
        .collect();
    let ch = ConsistentHash::default();
    ch.update(&eps);
    let ring = HashRing::new(&addrs);
    let key = HashKey::new("key-5");
    let own = ch.pick(Some(&key), &eps, 0).unwrap().unwrap();
    assert_eq!(&*own.addr, "127.0.0.1:8080");
    // the pool a retry policy passes: the set less the endpoints already tried
    let rest: Vec<Arc<Endpoint>> = eps
        .iter()
        .filter(|e| !Arc::ptr_eq(e, &own))
        .cloned()
        .collect();
    let next = ch.pick(Some(&key), &rest, 0).unwrap().unwrap();
    assert_eq!(
        *next.addr,
        *addrs[ring.get_where("key-5", |i| i != 0).unwrap()]
    );
    let last: Vec<Arc<Endpoint>> = rest
        .iter()
        .filter(|e| !Arc::ptr_eq(e, &next))
        .cloned()
        .collect();
    let third = ch.pick(Some(&key), &last, 0).unwrap().unwrap();
    assert!(!Arc::ptr_eq(&third, &own) && !Arc::ptr_eq(&third, &next));
}
