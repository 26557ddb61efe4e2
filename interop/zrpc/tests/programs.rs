//! The two programs as an interop harness runs them: `zrpc-interop-server --port=0` and
//! `zrpc-interop-client` with grpc-go's flags, plaintext and over TLS, and their answers to
//! flags they cannot act on.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};

use zrpc_tests::certs::TestCa;

const SERVER: &str = env!("CARGO_BIN_EXE_zrpc-interop-server");
const CLIENT: &str = env!("CARGO_BIN_EXE_zrpc-interop-client");

/// The server program, killed on drop.
struct ServerProcess {
    child: Child,
    port: u16,
}

impl ServerProcess {
    fn start(extra: &[String]) -> ServerProcess {
        let mut child = Command::new(SERVER)
            .args(["--port=0", "--host=127.0.0.1"])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start zrpc-interop-server");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .expect("read its first line");
        let port = line
            .trim()
            .strip_prefix("listening on 127.0.0.1:")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("want `listening on 127.0.0.1:<port>`, got {line:?}"));
        ServerProcess { child, port }
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn client(args: &[String]) -> Output {
    Command::new(CLIENT)
        .args(args)
        .output()
        .expect("run zrpc-interop-client")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn plaintext_cases_pass_through_the_programs() {
    let server = ServerProcess::start(&[]);
    for case in ["large_unary", "ping_pong", "status_code_and_message"] {
        let out = client(&[
            "--server_host=127.0.0.1".into(),
            format!("--server_port={}", server.port),
            format!("--test_case={case}"),
        ]);
        assert!(out.status.success(), "{case}: {}", text(&out));
        assert_eq!(text(&out).trim(), format!("{case} passed"));
    }
}

#[test]
fn tls_with_the_test_ca_and_a_host_override() {
    let ca = TestCa::new("interop programs CA");
    let leaf = ca.issue("foo.test.google.fr", &["DNS:*.test.google.fr"]);
    let server = ServerProcess::start(&[
        "--use_tls".into(),
        format!("--tls_cert_file={}", leaf.cert_str()),
        format!("--tls_key_file={}", leaf.key_str()),
    ]);
    let args = |override_name: &str| {
        vec![
            "--server_host=127.0.0.1".into(),
            format!("--server_port={}", server.port),
            "--test_case=empty_unary".into(),
            "--use_tls=true".into(),
            "--use_test_ca=true".into(),
            format!("--ca_file={}", ca.files.cert_str()),
            format!("--server_host_override={override_name}"),
        ]
    };
    let out = client(&args("foo.test.google.fr"));
    assert!(out.status.success(), "{}", text(&out));
    // the certificate is checked against the override
    let out = client(&args("other.example"));
    assert!(!out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("other.example"), "{}", text(&out));
}

#[test]
fn flags_the_programs_cannot_act_on_are_refused_with_the_reason() {
    let out = client(&["--use_tls".into(), "--use_test_ca".into()]);
    assert!(!out.status.success());
    assert!(
        text(&out).contains("--use_tls --use_test_ca needs --ca_file"),
        "{}",
        text(&out)
    );
    let out = client(&["--test_case=pick_first_unary".into()]);
    assert!(!out.status.success());
    assert!(
        text(&out).contains("unknown test case \"pick_first_unary\"")
            && text(&out).contains("timeout_on_sleeping_server"),
        "{}",
        text(&out)
    );
    let out = Command::new(SERVER)
        .args(["--port=0", "--host=127.0.0.1", "--use_tls"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        text(&out).contains("--use_tls needs --tls_cert_file and --tls_key_file"),
        "{}",
        text(&out)
    );
}
