//! Server lifecycle: health SERVING then NOT_SERVING during shutdown, the listener
//! closes, and a shutdown with 20 in-flight slow calls completes all 20.

use std::time::Duration;

use tokio_stream::StreamExt;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;
use zrpc_server::Phase;
use zrpc_server::conf::{DevServerConf, ShutdownConf};
use zrpc_tests::greeter::{TestGreeter, http_get, start_server, test_conf};
use zrpc_tests::pb::{HelloRequest, HelloStreamRequest};

async fn health(client: &mut HealthClient<tonic::transport::Channel>, service: &str) -> i32 {
    client
        .check(HealthCheckRequest {
            service: service.into(),
        })
        .await
        .expect("health answers")
        .into_inner()
        .status
}

#[tokio::test]
async fn server_health_serving_then_not_serving_during_shutdown() {
    let conf = test_conf("health.rpc")
        .with_dev_server(DevServerConf::new("127.0.0.1", 0))
        // WrapUpTime 2 s: the checks below, a new connection and a call fit in it on a loaded
        // machine
        .with_shutdown(ShutdownConf::new(
            Duration::from_secs(2),
            Duration::from_secs(5),
        ));
    let srv = start_server(conf, TestGreeter::new()).await;
    let dev = srv.handle.dev_server_addr().unwrap();
    let mut h = HealthClient::new(srv.channel().await);
    assert_eq!(health(&mut h, "").await, 1, "SERVING");
    assert_eq!(health(&mut h, "greeter.Greeter").await, 1, "SERVING");
    assert_eq!(http_get(dev, "/healthz").await.unwrap().0, 200);

    // The health service's own stream says when the status changes.
    let mut watch = h
        .watch(HealthCheckRequest {
            service: "greeter.Greeter".into(),
        })
        .await
        .expect("health watch")
        .into_inner();
    assert_eq!(watch.next().await.unwrap().unwrap().status, 1, "SERVING");

    srv.begin_shutdown();
    assert_eq!(
        srv.handle.wait_for(Phase::WrappingUp).await,
        Phase::WrappingUp
    );
    assert_eq!(
        watch.next().await.unwrap().unwrap().status,
        2,
        "NOT_SERVING"
    );
    // During WrapUpTime the server still answers, but says NOT_SERVING.
    assert_eq!(health(&mut h, "").await, 2, "NOT_SERVING");
    assert_eq!(health(&mut h, "greeter.Greeter").await, 2, "NOT_SERVING");
    let (status, body) = http_get(dev, "/healthz").await.unwrap();
    assert_eq!(status, 503, "{body}");
    let mut c = srv.client().await;
    assert!(
        c.say_hello(HelloRequest {
            name: "late".into()
        })
        .await
        .is_ok()
    );
    srv.join().await.expect("clean shutdown");
}

#[tokio::test]
async fn server_shutdown_completes_20_in_flight_calls() {
    let srv = start_server(test_conf("drain.rpc"), TestGreeter::new()).await;
    let shared = srv.client().await;
    let mut calls = Vec::new();
    for i in 0..20 {
        // Half share one connection, half have their own.
        let mut c = if i % 2 == 0 {
            shared.clone()
        } else {
            srv.client().await
        };
        calls.push(tokio::spawn(async move {
            c.say_hello(HelloRequest {
                name: format!("n{i},sleep:1000"),
            })
            .await
        }));
    }
    let mut stream = shared
        .clone()
        .say_hello_stream(HelloStreamRequest {
            name: "s".into(),
            count: 5,
            interval_ms: 200,
        })
        .await
        .unwrap()
        .into_inner();
    while srv.greeter.started() < 20 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let addr = srv.addr;
    let handle = srv.handle.clone();
    srv.begin_shutdown();

    // Once draining, the listener is closed: new connections are refused.
    handle.wait_for(Phase::Draining).await;
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "listener still open"
    );

    for (i, call) in calls.into_iter().enumerate() {
        let reply = call
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("call {i} lost: {e:?}"));
        assert_eq!(reply.into_inner().message, format!("hello n{i},sleep:1000"));
    }
    let mut got = 0;
    while let Some(m) = stream.next().await {
        m.expect("the stream drains");
        got += 1;
    }
    assert_eq!(got, 5);
    srv.join().await.expect("clean shutdown");
    assert_eq!(handle.phase(), Phase::Stopped);
}

#[tokio::test]
async fn server_stream_still_open_at_wait_time_ends_with_unavailable() {
    let conf = test_conf("cut.rpc").with_shutdown(ShutdownConf::new(
        Duration::from_millis(100),
        Duration::from_millis(1500),
    ));
    let srv = start_server(conf, TestGreeter::new()).await;
    let mut stream = srv
        .client()
        .await
        .say_hello_stream(HelloStreamRequest {
            name: "long".into(),
            count: 1000,
            interval_ms: 100,
        })
        .await
        .unwrap()
        .into_inner();
    stream.next().await.unwrap().expect("first message");
    let t0 = std::time::Instant::now();
    srv.begin_shutdown();
    let mut got = 1;
    let status = loop {
        match stream.next().await {
            Some(Ok(_)) => got += 1,
            Some(Err(status)) => break status,
            None => panic!("the stream ended without a status"),
        }
    };
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
    assert_eq!(status.message(), "server is shutting down");
    assert!(
        got > 5,
        "the stream kept flowing while draining ({got} messages)"
    );
    let handle = srv.handle.clone();
    srv.join().await.expect("clean shutdown");
    let took = t0.elapsed();
    // Forced by WaitTime (1.5 s), long before the stream's own end (1000 messages, 100 s); the
    // 3 s of margin above WaitTime are for a loaded machine.
    assert!(took < Duration::from_millis(4500), "shutdown took {took:?}");
    assert_eq!(handle.phase(), Phase::Stopped);
}

/// At `WaitTime` the server gives up on the calls still running and closes their
/// connections: the caller learns at once, not at its own deadline (the server's process may
/// go on running, as a test's or one that serves again does).
#[tokio::test]
async fn a_call_still_running_at_wait_time_is_cut_with_its_connection() {
    // No server timeout: the call runs until the client's 30 s deadline unless cut.
    let conf = test_conf("giveup.rpc")
        .with_timeout(Duration::ZERO)
        .with_shutdown(ShutdownConf::new(
            Duration::from_millis(100),
            Duration::from_millis(1000),
        ));
    let srv = start_server(conf, TestGreeter::new()).await;
    let mut c = srv.client().await;
    let call = tokio::spawn(async move {
        let mut req = tonic::Request::new(HelloRequest {
            name: "stuck,sleep:60000".into(),
        });
        req.set_timeout(Duration::from_secs(30));
        let started = std::time::Instant::now();
        let res = c.say_hello(req).await;
        (res, started.elapsed())
    });
    srv.greeter
        .wait_for("the call in its handler", |g| g.started() >= 1)
        .await;
    let t0 = std::time::Instant::now();
    srv.begin_shutdown();
    srv.join().await.expect("shutdown gives up at WaitTime");
    let served_until = t0.elapsed();
    let (res, took) = tokio::time::timeout(Duration::from_secs(5), call)
        .await
        .expect("the call ends once the server gave up, not at its 30 s deadline")
        .unwrap();
    let status = res.expect_err("the call cannot have been answered");
    println!(
        "WaitTime 1 s: serve returned after {served_until:?}, the call ended after {took:?}: {status:?}"
    );
    assert_ne!(status.code(), tonic::Code::DeadlineExceeded, "{status:?}");
    assert!(served_until < Duration::from_secs(4), "{served_until:?}");
}

#[tokio::test]
async fn server_health_watch_sees_not_serving_and_does_not_hold_the_shutdown() {
    let conf = test_conf("watch.rpc").with_shutdown(ShutdownConf::new(
        Duration::from_millis(300),
        Duration::from_secs(10),
    ));
    let srv = start_server(conf, TestGreeter::new()).await;
    let mut h = HealthClient::new(srv.channel().await);
    let mut watch = h
        .watch(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(watch.next().await.unwrap().unwrap().status, 1, "SERVING");
    let t0 = std::time::Instant::now();
    srv.begin_shutdown();
    assert_eq!(
        watch.next().await.unwrap().unwrap().status,
        2,
        "NOT_SERVING"
    );
    let end = watch.next().await.unwrap().unwrap_err();
    assert_eq!(end.code(), tonic::Code::Unavailable);
    srv.join().await.expect("clean shutdown");
    assert!(
        t0.elapsed() < Duration::from_secs(3),
        "the watch held the shutdown"
    );
}
