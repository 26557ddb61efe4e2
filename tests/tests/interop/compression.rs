//! gzip between zrpc and real go-zero v1.10.3, both ways. Every go-zero service accepts gzip:
//! the OTLP exporter go-zero links registers it in grpc-go, whose server then answers a
//! compressed request compressed in the same encoding.
//!
//! - a go-zero client sending gzip (`gz-client -gzip`, `grpc.UseCompressor`) to a zrpc server:
//!   the zrpc handler gets the message decompressed and sees that it came compressed;
//! - a zrpc client with `Compression: gzip` calling a go-zero server: grpc-go decompresses the
//!   request and answers in gzip, which the zrpc client decompresses.

use prost::Message;
use zrpc::compression::{CallCompression, Encoding};
use zrpc_tests::gozero::{ClientYaml, Discovery, GzClient, GzServer, ServerYaml};
use zrpc_tests::gozero_or_skip;
use zrpc_tests::greeter::{TestGreeter, start_server, test_conf};
use zrpc_tests::pb::HelloRequest;
use zrpc_tests::pb::greeter_client::GreeterClient;

/// A name of `n` octets that gzip shrinks well, plus the greeter's `compression` directive.
fn big_name(n: usize) -> String {
    format!("{},compression", "go-zero ".repeat(n / 8))
}

#[tokio::test]
async fn a_go_zero_client_sending_gzip_is_served_by_zrpc() {
    let p = gozero_or_skip!();
    let server = start_server(
        test_conf("gz-gzip-to-zrpc").with_cpu_threshold(0),
        TestGreeter::new(),
    )
    .await;
    let discovery = Discovery::Endpoints(vec![server.addr.to_string()]);
    for (gzip, how) in [(true, "true"), (false, "none")] {
        let name = big_name(4000);
        let mut client = GzClient::new(p, &ClientYaml::new(discovery.clone()))
            .name(&name)
            .n(3)
            .verbose();
        if gzip {
            client = client.gzip();
        }
        let run = client.run().await;
        run.assert_all_ok("go-zero gzip -> zrpc", Some(3));
        for call in &run.calls {
            assert_eq!(
                call.message,
                format!("hello {name} [compressed: {how}]"),
                "gzip {gzip}"
            );
        }
    }
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_zrpc_client_asking_a_go_zero_server_for_gzip_gets_it() {
    let p = gozero_or_skip!();
    let mut yaml = ServerYaml::new("gz-gzip.rpc", &[], "unused");
    yaml.etcd = None;
    let gz = GzServer::start(p, &yaml, &[]).await;
    let name = "z".repeat(4000);
    for (encoding, compressed) in [(Some(Encoding::Gzip), Some(true)), (None, None)] {
        let conf = Discovery::Endpoints(vec![gz.addr.clone()])
            .zrpc_conf()
            .with_compression(encoding);
        let client = zrpc::client(conf).await.unwrap();
        let call = CallCompression::new();
        let mut req = tonic::Request::new(HelloRequest { name: name.clone() });
        req.extensions_mut().insert(call.clone());
        let reply = GreeterClient::new(client).say_hello(req).await.unwrap();
        assert_eq!(reply.get_ref().message, format!("hello {name}"));
        assert!(reply.get_ref().encoded_len() > 4000);
        assert_eq!(
            call.last_received_compressed(),
            compressed,
            "grpc-go answers in the request's encoding: {encoding:?}"
        );
    }
    let stopped = gz.stop().await;
    assert_eq!(stopped.exit_code, Some(0), "{stopped:?}");
    assert_eq!(stopped.calls, Some(2));
}
