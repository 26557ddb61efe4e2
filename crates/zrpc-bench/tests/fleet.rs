//! The fleet run (`zrpc-bench fleet`): a 3-member etcd cluster, 200 zrpc server processes and
//! 20 clients (10 zrpc, 10 go-zero) under steady load; every server replaced in a rolling
//! deploy, a third killed with SIGKILL, etcd's leader killed: no call lost in the deploy or to
//! the leader's death, none to a killed server past those in flight at the kill. Ignored: it takes minutes and
//! most of a 2-core machine, and needs etcd and Go. Run by hand (figures in
//! `docs/benchmarks.md`, "Fleet run"):
//!
//! ```text
//! cargo test --release -p zrpc-bench --test fleet -- --ignored --nocapture
//! ```

use std::process::Command;

#[test]
#[ignore = "minutes and most of the machine; run by hand"]
fn a_rolling_deploy_of_200_servers_loses_no_call() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("fleet.json");
    let out = Command::new(env!("CARGO_BIN_EXE_zrpc-bench"))
        .arg("fleet")
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    println!("{}", String::from_utf8_lossy(&out.stdout));
    assert!(
        out.status.success(),
        "zrpc-bench fleet failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let phases = v["phases"].as_array().unwrap();
    assert_eq!(phases.len(), 4, "{v:#}");
    let failed = |p: &serde_json::Value, kind: &str| p["failed"][kind].as_u64().unwrap();
    let deploy = &phases[1];
    for kind in ["zrpc", "go-zero"] {
        assert!(
            deploy["calls"][kind].as_u64().unwrap() > 0,
            "no {kind} call in the deploy"
        );
        assert_eq!(
            failed(deploy, kind),
            0,
            "{kind} calls failed in the rolling deploy: {}",
            deploy["failures"]
        );
        // a member down (the leader killed) costs no call either
        assert_eq!(
            failed(&phases[3], kind),
            0,
            "{kind} calls failed after etcd's leader was killed: {}",
            phases[3]["failures"]
        );
    }
    // A killed server leaves a zrpc client's pick when its connection closes: the calls lost
    // are those in flight at the kill (at 20 calls/s and a few ms each, about one per client at
    // most), all failed at once. The phase begins with a reading of every client and member
    // (about 0.1 s), then kills: 2 s from the phase's start is well past the kill.
    let kill = &phases[2];
    assert!(
        failed(kill, "zrpc") <= 10,
        "zrpc calls failed after the SIGKILL: {}",
        kill["failures"]
    );
    if failed(kill, "zrpc") > 0 {
        let last = kill["failures_from_to_s"][1].as_f64().unwrap();
        assert!(
            last < 2.0,
            "a call failed {last} s into the SIGKILL phase: {}",
            kill["failures"]
        );
    }
    for p in phases {
        assert_eq!(
            p["not_followed"], 0,
            "changes in etcd a client never followed in {}",
            p["phase"]
        );
    }
    assert_eq!(v["stale_clients"], 0, "clients left with a stale view");
}
