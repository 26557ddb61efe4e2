//! A go-zero client (`gz-client`, go-zero v1.10.3) calling two zrpc servers through Toxiproxy
//! (`zrpc_tests::toxiproxy`) that passes every byte in its own piece, both ways.
//!
//! Two `Endpoints` make grpc-go send `:authority: h1:p1,h2:p2`, which `h2` refuses unless the
//! zrpc server repairs it below `h2` (`crates/zrpc-server/src/authority/`): with the bytes split
//! everywhere, the server's frame scanner must hold and walk header blocks (HPACK with Huffman
//! strings and dynamic-table references to the repaired entry, as grpc-go writes them) across
//! every possible read boundary.

use std::time::Duration;

use zrpc_tests::gozero::{ClientYaml, Discovery, GzClient, start_zrpc, zrpc_conf};
use zrpc_tests::toxiproxy::Toxic;
use zrpc_tests::{gozero_or_skip, toxiproxy_or_skip};

use crate::gozero_client::{CALLS, spread_load};
use crate::support::MIN_SHARE;

#[tokio::test]
async fn gz_client_through_one_byte_slicer_both_ways_multi_host_authority_no_failure() {
    let p = gozero_or_skip!();
    let toxiproxy = toxiproxy_or_skip!();
    let servers = [
        start_zrpc(zrpc_conf("sliced-a.rpc", None)).await,
        start_zrpc(zrpc_conf("sliced-b.rpc", None)).await,
    ];
    let mut endpoints = Vec::new();
    for (i, s) in servers.iter().enumerate() {
        let proxy = toxiproxy
            .proxy(&format!("sliced-{i}"), &s.listen_on())
            .await;
        proxy
            .add_both(Toxic::slicer(1, 0, Duration::from_micros(10)))
            .await;
        endpoints.push(proxy.endpoint());
    }
    let run = spread_load(GzClient::new(
        p,
        &ClientYaml::new(Discovery::Endpoints(endpoints.clone())),
    ))
    .run()
    .await;
    println!(
        "go-zero client -> 1-byte slicer both ways -> zrpc servers, :authority {}: {} calls, {} failed, codes {:?}, shares {}, p99 {:.1} ms",
        endpoints.join(","),
        run.summary.calls,
        run.summary.failed,
        run.summary.codes,
        run.shares_text(&endpoints),
        run.summary.p99_ms
    );
    run.assert_all_ok("sliced", Some(CALLS));
    run.assert_shares("sliced", &endpoints, MIN_SHARE);
    let served: u64 = servers.iter().map(|s| s.greeter.calls()).sum();
    assert_eq!(served, CALLS, "calls seen by the zrpc servers");
}
