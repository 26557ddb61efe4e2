//! gRPC's official interop cases between grpc-go v1.83.2 and zrpc, both ways, and zrpc to
//! zrpc, in plaintext and over TLS: one test per case, direction and transport, named
//! `<direction>::<transport>::<case>`:
//!
//! - `grpcgo_to_zrpc`: grpc-go's own interop client (`interop/grpc-go`) against zrpc's
//!   `TestService` (`zrpc-interop`, on `zrpc::server` with its default chain);
//! - `zrpc_to_grpcgo`: zrpc's interop client (on `zrpc::client`) against grpc-go's own interop
//!   server;
//! - `zrpc_to_zrpc`: zrpc's client against zrpc's server.
//!
//! The four compression cases run against `gzip-interop` on the grpc-go side (grpc-go's stock
//! programs do not implement them), and not zrpc -> grpc-go server_compressed_streaming, which
//! needs a server that compresses one message of a stream and not the next.
//!
//! `protos` checks the repository's `grpc.testing` protos against grpc-go's compiled
//! descriptors. `sleeping_server` (ignored: run it by name) measures timeout_on_sleeping_server
//! over many runs per direction, plain tonic included. Without Go the grpc-go tests print
//! `SKIPPED` and pass; with `CI=true` a missing Go fails them. `docs/interop.md` has the matrix.
//!
//! `cargo test -p zrpc-tests --test grpc_interop`
// clippy.toml lets tests unwrap, but only inside `#[test]` fns and `cfg(test)` modules: a test
// crate's helpers are test code too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod client_codes;
mod client_limits;
mod codes;
mod matrix;
mod protos;
mod sleeping_server;

/// One test per case and transport, in the module of a direction: `cells!(direction: cases)`.
macro_rules! cells {
    ($direction:ident: $($case:ident),* $(,)?) => {
        mod plaintext {
            $(cells!(@cell $direction, Plaintext, $case);)*
        }
        mod tls {
            $(cells!(@cell $direction, Tls, $case);)*
        }
    };
    (@cell $direction:ident, $transport:ident, $case:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $case() {
            crate::matrix::$direction(stringify!($case), crate::matrix::Transport::$transport)
                .await;
        }
    };
}

/// `cells!` for the cases grpc-go's interop client runs, then `extra` ones.
macro_rules! stock_cells {
    ($direction:ident, $($extra:ident),* $(,)?) => {
        cells!($direction:
            empty_unary,
            large_unary,
            client_streaming,
            server_streaming,
            ping_pong,
            empty_stream,
            custom_metadata,
            status_code_and_message,
            special_status_message,
            unimplemented_method,
            unimplemented_service,
            cancel_after_begin,
            cancel_after_first_response,
            timeout_on_sleeping_server,
            rpc_soak,
            channel_soak,
            $($extra),*
        );
    };
}

/// grpc-go's interop client against zrpc's server; the compression cases with `gzip-interop`'s.
mod grpcgo_to_zrpc {
    stock_cells!(
        grpcgo_to_zrpc,
        client_compressed_unary,
        server_compressed_unary,
        client_compressed_streaming,
        server_compressed_streaming,
    );
}

/// zrpc's interop client against grpc-go's server; the compression cases against
/// `gzip-interop`'s. Not server_compressed_streaming: grpc-go compresses a call's messages all
/// or none, and the case wants the first response compressed and the second not.
mod zrpc_to_grpcgo {
    stock_cells!(
        zrpc_to_grpcgo,
        client_compressed_unary,
        server_compressed_unary,
        client_compressed_streaming,
    );
}

/// zrpc's interop client against zrpc's server.
mod zrpc_to_zrpc {
    stock_cells!(
        zrpc_to_zrpc,
        client_compressed_unary,
        server_compressed_unary,
        client_compressed_streaming,
        server_compressed_streaming,
    );
}
