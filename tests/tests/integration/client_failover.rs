//! Failover: a server killed mid-run costs only the calls in flight on it; a killed server leaves
//! the pick when its connection closes; a dead endpoint is skipped by transparent retry.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use zrpc_client::conf::RpcClientConf;
use zrpc_client::{Client, EndpointState};
use zrpc_tests::pb::HelloRequest;
use zrpc_tests::pb::greeter_client::GreeterClient;
use zrpc_tests::wait;

use crate::client_support::{Backend, dead_endpoint};

/// (start, end, outcome) of one call.
type Call = (Instant, Instant, Result<(), String>);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn client_kill_one_server_only_in_flight_calls_fail() {
    let a = Backend::start("a", Duration::from_millis(2));
    let b = Backend::start("b", Duration::from_millis(2));
    let mut c = Backend::start("c", Duration::from_millis(2));
    let conf = RpcClientConf::direct([a.endpoint(), b.endpoint(), c.endpoint()])
        .with_timeout(Duration::from_secs(5));
    let client = Client::new(conf).await.unwrap();
    const WORKERS: usize = 16;
    // The run goes on until 1000 calls have started after the kill (not for a fixed time: a
    // loaded machine makes fewer calls per second), with a 60 s safety stop.
    const AFTER_KILL: usize = 1000;
    let safety_stop = Instant::now() + Duration::from_secs(60);
    let killed = Arc::new(std::sync::OnceLock::<Instant>::new());
    let started_after_kill = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    // (start, end, ok)
    let log: Arc<Mutex<Vec<Call>>> = Arc::default();
    let mut workers = Vec::new();
    for w in 0..WORKERS {
        let mut greeter = GreeterClient::new(client.clone());
        let log = log.clone();
        let killed = killed.clone();
        let started_after_kill = started_after_kill.clone();
        workers.push(tokio::spawn(async move {
            let mut i = 0;
            while Instant::now() < safety_stop
                && started_after_kill.load(std::sync::atomic::Ordering::Relaxed) <= AFTER_KILL
            {
                if killed.get().is_some() {
                    started_after_kill.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                let start = Instant::now();
                let r = greeter
                    .say_hello(HelloRequest {
                        name: format!("{w}-{i}"),
                    })
                    .await;
                let end = Instant::now();
                log.lock()
                    .unwrap()
                    .push((start, end, r.map(|_| ()).map_err(|e| e.to_string())));
                i += 1;
            }
        }));
    }
    // the load reaches the server about to be killed
    wait::until("50 calls on c", || c.hits() >= 50).await;
    let kill_start = Instant::now();
    let hits_before = c.hits();
    c.kill();
    let kill_done = Instant::now();
    killed.set(kill_done).unwrap();
    for w in workers {
        w.await.unwrap();
    }
    let log = log.lock().unwrap();
    let failed: Vec<_> = log.iter().filter(|(_, _, r)| r.is_err()).collect();
    let after_kill = log.iter().filter(|(s, _, _)| *s > kill_done).count();
    println!(
        "kill: {} calls, {} after the kill, {} failed (in flight on the killed server at most {WORKERS}); killed server had {hits_before} hits",
        log.len(),
        after_kill,
        failed.len()
    );
    for (s, e, r) in &failed {
        assert!(
            *s <= kill_done && *e >= kill_start,
            "a call that was not in flight at the kill failed: {r:?}"
        );
    }
    assert!(failed.len() <= WORKERS);
    // no call was delivered twice (a retry of a call that had reached the killed server)
    let hits = a.hits() + b.hits() + c.hits();
    assert!(
        hits <= log.len() as u64,
        "{hits} hits for {} calls",
        log.len()
    );
    assert!(after_kill > AFTER_KILL, "the run went on after the kill");
    assert!(hits_before > 0);
}

/// Servers killed between calls leave the pick as soon as the client reads their connections'
/// close (as grpc-go takes a subchannel whose connection broke out of its picker): no later call
/// is sent there. Without that, each killed server takes one call to be found out, re-sent at
/// best, and a call whose every send meets a killed server fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_killed_servers_leave_the_pick_before_a_call_is_sent_there() {
    let live: Vec<Backend> = (0..3)
        .map(|i| Backend::start(&format!("live{i}"), Duration::ZERO))
        .collect();
    let mut doomed: Vec<Backend> = (0..3)
        .map(|i| Backend::start(&format!("doomed{i}"), Duration::ZERO))
        .collect();
    let doomed_addrs: Vec<String> = doomed.iter().map(Backend::endpoint).collect();
    let conf = RpcClientConf::direct(live.iter().chain(&doomed).map(Backend::endpoint));
    let client = Client::new(conf).await.unwrap();
    let mut greeter = GreeterClient::new(client.clone());
    // every server gets calls, so each endpoint holds a connection
    let warm_until = Instant::now() + Duration::from_secs(20);
    while live.iter().chain(&doomed).any(|b| b.hits() == 0) {
        assert!(Instant::now() < warm_until, "a server got no call");
        greeter
            .say_hello(HelloRequest { name: "w".into() })
            .await
            .unwrap();
    }
    for b in &mut doomed {
        b.kill();
    }
    let killed = |c: &Client| -> Vec<_> {
        c.endpoints()
            .into_iter()
            .filter(|e| doomed_addrs.contains(&e.addr))
            .collect()
    };
    let took = wait::until("the killed servers' endpoints to turn suspect", || {
        killed(&client)
            .iter()
            .all(|e| e.state == EndpointState::Suspect)
    })
    .await;
    println!("killed servers out of the pick {took:?} after the kill");
    let sent_before: u64 = killed(&client).iter().map(|e| e.requests).sum();
    let live_before: u64 = live.iter().map(Backend::hits).sum();
    for i in 0..300 {
        let r = greeter
            .say_hello(HelloRequest {
                name: format!("{i}"),
            })
            .await;
        assert!(r.is_ok(), "call {i}: {r:?}");
    }
    let sent_after: u64 = killed(&client).iter().map(|e| e.requests).sum();
    assert_eq!(
        sent_after, sent_before,
        "a call was sent to a killed server"
    );
    assert_eq!(
        live.iter().map(Backend::hits).sum::<u64>() - live_before,
        300
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_dead_endpoint_is_retried_transparently() {
    let live = Backend::start("live", Duration::ZERO);
    let conf = RpcClientConf::direct([dead_endpoint(), live.endpoint(), dead_endpoint()]);
    let client = Client::new(conf).await.unwrap();
    let mut greeter = GreeterClient::new(client.clone());
    for i in 0..200 {
        let r = greeter
            .say_hello(HelloRequest {
                name: format!("{i}"),
            })
            .await;
        assert!(r.is_ok(), "call {i}: {r:?}");
    }
    assert_eq!(live.hits(), 200);
    let dead: Vec<_> = client
        .endpoints()
        .into_iter()
        .filter(|e| e.addr != live.endpoint())
        .collect();
    assert!(dead.iter().all(|e| e.success < 500.0), "{dead:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn client_graceful_server_stop_loses_no_call() {
    let a = Backend::start("a", Duration::from_millis(2));
    let b = Backend::start("b", Duration::from_millis(2));
    let mut c = Backend::start("c", Duration::from_millis(2));
    let conf = RpcClientConf::direct([a.endpoint(), b.endpoint(), c.endpoint()])
        .with_timeout(Duration::from_secs(5));
    let client = Client::new(conf).await.unwrap();
    let stop_at = Instant::now() + Duration::from_millis(1500);
    let mut workers = Vec::new();
    for w in 0..16 {
        let mut greeter = GreeterClient::new(client.clone());
        workers.push(tokio::spawn(async move {
            let (mut ok, mut failed) = (0u32, Vec::new());
            let mut i = 0;
            while Instant::now() < stop_at {
                match greeter
                    .say_hello(HelloRequest {
                        name: format!("{w}-{i}"),
                    })
                    .await
                {
                    Ok(_) => ok += 1,
                    Err(e) => failed.push(e.to_string()),
                }
                i += 1;
            }
            (ok, failed)
        }));
    }
    // the load reaches the server about to stop
    wait::until("50 calls on c", || c.hits() >= 50).await;
    let before = c.hits();
    c.stop_gracefully().await;
    let (mut ok, mut failed) = (0, Vec::new());
    for w in workers {
        let (o, f) = w.await.unwrap();
        ok += o;
        failed.extend(f);
    }
    println!(
        "graceful stop: {ok} calls ok, {} failed; stopped server had {before} hits before the stop",
        failed.len()
    );
    assert!(failed.is_empty(), "{failed:?}");
    assert!(before > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn client_restarted_server_gets_traffic_again() {
    let a = Backend::start("a", Duration::from_millis(1));
    let mut c = Backend::start("c", Duration::from_millis(1));
    let addr = c.endpoint();
    let client = Client::new(RpcClientConf::direct([a.endpoint(), addr.clone()]))
        .await
        .unwrap();
    let mut greeter = GreeterClient::new(client.clone());
    let call = |mut g: GreeterClient<Client>| async move {
        g.say_hello(HelloRequest { name: "r".into() })
            .await
            .map(|_| ())
    };
    for _ in 0..50 {
        call(greeter.clone()).await.unwrap();
    }
    assert!(c.hits() > 0);
    c.kill();
    // while it is down every call still succeeds (retried on `a`)
    let down_until = Instant::now() + Duration::from_millis(300);
    while Instant::now() < down_until {
        call(greeter.clone()).await.unwrap();
    }
    let restarted = Backend::start_on(&addr, "c2", Duration::from_millis(1));
    let back = Instant::now();
    while restarted.hits() == 0 {
        assert!(
            back.elapsed() < Duration::from_secs(10),
            "restarted server never got traffic"
        );
        greeter
            .say_hello(HelloRequest { name: "r".into() })
            .await
            .unwrap();
    }
    println!(
        "restarted server got traffic again {:?} after it came back",
        back.elapsed()
    );
}

/// A server that accepts a connection and closes it before sending a byte (one shutting down
/// whose kernel had queued the connection, or one that failed as it accepted) never processed
/// the call written to it: an HTTP/2 server sends its SETTINGS before it reads a request. The
/// client sends that call to another endpoint, as grpc-go, which sends no call before the
/// server's SETTINGS arrive, never sends it there at all.
#[tokio::test]
async fn client_calls_written_to_a_server_that_never_answered_a_byte_go_elsewhere() {
    let good = Backend::start("good", Duration::ZERO);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent = listener.local_addr().unwrap().to_string();
    let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = accepted.clone();
    tokio::spawn(async move {
        loop {
            let (mut socket, _) = listener.accept().await.unwrap();
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            // the client's first bytes, then a close with the rest unread (a reset)
            let mut buf = [0u8; 64];
            let _ = tokio::io::AsyncReadExt::read(&mut socket, &mut buf).await;
            drop(socket);
        }
    });
    let conf = RpcClientConf::direct([good.endpoint(), silent.clone()])
        .with_balancer(zrpc_client::conf::BalancerName::RoundRobin);
    let client = Client::new(conf).await.unwrap();
    let mut greeter = GreeterClient::new(client.clone());
    for i in 0..10 {
        let r = greeter
            .say_hello(HelloRequest {
                name: format!("call {i}"),
            })
            .await;
        assert!(r.is_ok(), "call {i}: {r:?}");
    }
    assert!(
        accepted.load(std::sync::atomic::Ordering::SeqCst) > 0,
        "calls were sent to {silent}"
    );
}

/// A client whose runtime is kept from running (a task blocking its thread, a process starved
/// of CPU) while its call is in flight does not take the server for stalled: it may not even
/// have sent the call, and it has not read what came back. Taken for stalled, the server would
/// leave the pick until a probe answered, and a call it never processed found no other usable
/// endpoint to go to.
#[tokio::test]
async fn client_starved_of_cpu_takes_no_server_for_stalled() {
    let good = Backend::start("good", Duration::ZERO);
    let client = Client::new(RpcClientConf::direct([good.endpoint()]))
        .await
        .unwrap();
    let mut greeter = GreeterClient::new(client.clone());
    let hello = || HelloRequest { name: "s".into() };
    // the connection is up
    greeter.say_hello(hello()).await.unwrap();
    for round in 0..3 {
        // queued before the call: it holds the runtime's one thread for longer than calls
        // without an answer take to stall (250 ms), before the call is even written
        tokio::spawn(async { std::thread::sleep(Duration::from_millis(400)) });
        greeter.say_hello(hello()).await.unwrap();
        let state = client.endpoints()[0].state;
        assert_ne!(state, EndpointState::Suspect, "round {round}");
    }
}
