//! `BalancerName: consistent_hash` against real zrpc servers: every key goes to the server that
//! owns it on go-zero's ring (`zrpc_client::sim::HashRing`, checked against go-zero's own in the
//! client's unit tests and the interop suite), a call without a key fails as in go-zero, the
//! per-endpoint stats and the breaker work as with p2c, and a server that stops hands its keys,
//! and only those, to the next server on the ring without a failed call.

use std::collections::BTreeMap;
use std::time::Duration;

use zrpc::{BalancerName, RpcClientConf};
use zrpc_client::sim::HashRing;
use zrpc_tests::gozero::{SERVER_HEADER, ZrpcServer, start_zrpc, zrpc_conf};
use zrpc_tests::greeter::SAY_HELLO;
use zrpc_tests::pb::HelloRequest;
use zrpc_tests::pb::greeter_client::GreeterClient;

const KEYS: usize = 300;

async fn servers(n: usize) -> Vec<ZrpcServer> {
    let mut out = Vec::new();
    for i in 0..n {
        out.push(start_zrpc(zrpc_conf(&format!("ch-{i}.rpc"), None)).await);
    }
    out
}

/// One call with `key` (none when `None`): the `x-server` that answered, or the status.
async fn call(
    greeter: &mut GreeterClient<zrpc::Client>,
    key: Option<&str>,
    name: &str,
) -> Result<String, tonic::Status> {
    let mut req = tonic::Request::new(HelloRequest { name: name.into() });
    if let Some(key) = key {
        zrpc::hash_key(&mut req, key);
    }
    let resp = greeter.say_hello(req).await?;
    Ok(resp
        .metadata()
        .get(SERVER_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned())
}

fn key(i: usize) -> String {
    format!("user-{i}")
}

#[tokio::test]
async fn keys_go_to_their_ring_server_and_a_stopped_servers_keys_move_to_the_next() {
    let mut fleet = servers(3).await;
    let addrs: Vec<String> = fleet.iter().map(ZrpcServer::listen_on).collect();
    let conf = RpcClientConf::direct(addrs.clone())
        .with_balancer(BalancerName::ConsistentHash)
        .with_timeout(Duration::from_secs(5));
    let client = zrpc::client(conf).await.unwrap();
    let mut greeter = GreeterClient::new(client.clone());
    let ring = HashRing::new(&addrs);

    let mut per_server: BTreeMap<String, u64> = BTreeMap::new();
    for i in 0..KEYS {
        let got = call(&mut greeter, Some(&key(i)), "world").await.unwrap();
        assert_eq!(got, addrs[ring.get(&key(i)).unwrap()], "{}", key(i));
        *per_server.entry(got).or_default() += 1;
    }
    println!("consistent_hash, {KEYS} keys over 3 zrpc servers: {per_server:?}");
    assert_eq!(per_server.len(), 3, "{per_server:?}");
    // the calls went through the endpoints' stats, as p2c's do (the gauges read them)
    for e in client.endpoints() {
        assert_eq!(e.requests, per_server[&e.addr], "{e:?}");
        assert!(e.lag.is_some(), "{e:?}");
    }

    // no key: go-zero's status, and nothing sent
    let e = call(&mut greeter, None, "world").await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert_eq!(e.message(), "[consistent_hash] missing hash key in context");
    let e = call(&mut greeter, Some(""), "world").await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    let sent: u64 = client.endpoints().iter().map(|e| e.requests).sum();
    assert_eq!(sent, KEYS as u64);

    // one server stops: its keys go to the next server on the ring, the others stay, and the
    // calls that found it gone were retried there (none failed)
    let gone = fleet.remove(1);
    let gone_addr = gone.listen_on();
    gone.shutdown().await.unwrap();
    let mut moved = 0;
    for i in 0..KEYS {
        let before = &addrs[ring.get(&key(i)).unwrap()];
        let want = &addrs[ring.get_where(&key(i), |n| addrs[n] != gone_addr).unwrap()];
        let got = call(&mut greeter, Some(&key(i)), "world").await.unwrap();
        assert_eq!(&got, want, "{}", key(i));
        if *before == gone_addr {
            moved += 1;
        } else {
            assert_eq!(&got, before, "{} moved though its server stayed", key(i));
        }
    }
    println!(
        "after {gone_addr} stopped: {moved} keys moved (its {}), the other {} stayed",
        per_server[&gone_addr],
        KEYS - moved
    );
    assert_eq!(moved as u64, per_server[&gone_addr]);
}

#[tokio::test]
async fn the_breaker_opens_on_a_keys_failing_server_as_with_p2c() {
    let fleet = servers(2).await;
    let addrs: Vec<String> = fleet.iter().map(ZrpcServer::listen_on).collect();
    let conf = RpcClientConf::direct(addrs).with_balancer(BalancerName::ConsistentHash);
    let client = zrpc::client(conf).await.unwrap();
    let breaker = format!("/greeter.Greeter/SayHello to {}", client.target());
    let mut greeter = GreeterClient::new(client);
    // `code:14`: the server answers Unavailable, a failure code for the client's breaker
    let mut open = 0;
    for _ in 0..200 {
        let e = call(&mut greeter, Some("user-1"), "code:14")
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::Unavailable, "{e:?}");
        // the client's breaker (its message names the target); the server's own breaker may
        // open too (its message names the method alone)
        if e.message()
            .starts_with(&format!("{} {breaker}", "circuit breaker is open:"))
        {
            assert!(zrpc_tests::explained::breaker_open(e.message(), &breaker).is_some());
            open += 1;
        } else if zrpc_tests::explained::breaker_open(e.message(), SAY_HELLO).is_none() {
            assert_eq!(e.message(), "forced 14", "{e:?}");
        }
    }
    assert!(open > 0, "the breaker never opened");
}
