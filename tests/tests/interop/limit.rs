//! The concurrency limit's tiers seen by a go-zero caller (`gz-client`, go-zero v1.10.3): a
//! call without `zrpc-tier` metadata is of the default tier, one with `zrpc-tier: critical`
//! gets the place kept for critical calls; zrpc's client sets the same metadata from its
//! config.

use std::time::Duration;

use zrpc::Tier;
use zrpc::conf::{ClientMiddlewaresConf, ConcurrencyLimitConf, RpcClientConf};
use zrpc_tests::gozero::{ClientYaml, Discovery, GzClient, eventually, start_zrpc, zrpc_conf};
use zrpc_tests::gozero_or_skip;
use zrpc_tests::pb::HelloRequest;
use zrpc_tests::pb::greeter_client::GreeterClient;

const METHOD: &str = "/greeter.Greeter/SayHello";

/// A zrpc client of `addr` (its breaker off: it would count the rejections) with `edit`.
async fn zrpc_caller(
    addr: &str,
    edit: impl FnOnce(RpcClientConf) -> RpcClientConf,
) -> GreeterClient<zrpc::Client> {
    let mut mw = ClientMiddlewaresConf::default();
    mw.breaker = false;
    let conf = edit(RpcClientConf::direct([addr]).with_middlewares(mw));
    GreeterClient::new(zrpc::client(conf).await.unwrap())
}

#[tokio::test]
async fn interop_a_go_zero_caller_is_of_the_default_tier_and_may_mark_a_call_critical() {
    let p = gozero_or_skip!();
    // A limit of 4, fixed: the default tier may use 3 places, sheddable calls 2, critical 4.
    let mut limit = ConcurrencyLimitConf::default();
    limit.min_limit = 4;
    limit.max_limit = 4;
    limit.min_rtt_samples = 1;
    let mut conf = zrpc_conf("zrpc-limit.rpc", None).with_timeout(Duration::from_secs(10));
    conf.concurrency_limit = Some(limit);
    let server = start_zrpc(conf).await;
    let addr = server.listen_on();
    let plain = zrpc_caller(&addr, |c| c.with_timeout(Duration::from_secs(10))).await;
    // The first call ends the limit's measurement of its minimum round-trip time.
    plain
        .clone()
        .say_hello(HelloRequest { name: "x".into() })
        .await
        .unwrap();

    // Three slow calls of the default tier hold its share while the others are made.
    let held: Vec<_> = (0..3)
        .map(|_| {
            let mut c = plain.clone();
            tokio::spawn(async move {
                c.say_hello(HelloRequest {
                    name: "sleep:5000".into(),
                })
                .await
            })
        })
        .collect();
    // the three are in their handlers (after the first call)
    let greeter = &server.greeter;
    assert!(
        eventually(
            Duration::from_secs(10),
            || async move { greeter.calls() >= 4 }
        )
        .await,
        "the three slow calls did not reach the server"
    );

    let gz = |tier: Option<&str>| {
        let y = ClientYaml::new(Discovery::Endpoints(vec![addr.clone()])).timeout_ms(2000);
        let c = GzClient::new(p, &y).n(1).name("world").verbose();
        match tier {
            Some(t) => c.metadata("zrpc-tier", t),
            None => c,
        }
    };
    // A go-zero caller that sets no tier is of the default tier: rejected, as the CPU
    // shedder's rejections are.
    let run = gz(None).run().await;
    assert_eq!(run.calls.len(), 1, "{}", run.explain());
    assert_eq!(
        (run.calls[0].code.as_str(), run.calls[0].message.as_str()),
        (
            "ResourceExhausted",
            "service overloaded: the default tier's share of the concurrency limit is in use \
             (3 in flight, share 3 of limit 4)"
        ),
        "{}",
        run.explain()
    );
    // The same caller marking its call critical gets the place above the default tier's share.
    let run = gz(Some("critical")).run().await;
    run.assert_all_ok("gz-client with zrpc-tier: critical", Some(1));
    // zrpc's client sends the tier its config gives the method, or the whole client.
    let mut critical = zrpc_caller(&addr, |c| c.with_method_tier(METHOD, Tier::Critical)).await;
    critical
        .say_hello(HelloRequest { name: "x".into() })
        .await
        .expect("a critical call is admitted");
    let mut sheddable = zrpc_caller(&addr, |c| c.with_tier(Tier::Sheddable)).await;
    let err = sheddable
        .say_hello(HelloRequest { name: "x".into() })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::ResourceExhausted, "{err:?}");
    assert_eq!(
        err.message(),
        "service overloaded: the sheddable tier's share of the concurrency limit is in use (3 \
         in flight, share 2 of limit 4)"
    );

    for h in held {
        h.await.unwrap().expect("the held calls are served");
    }
    let tier_drops = zrpc_server::metrics::server_metrics()
        .dropped_total
        .with_label_values(&[METHOD, "tier"])
        .get();
    assert!(tier_drops >= 2, "{tier_drops}");
}
