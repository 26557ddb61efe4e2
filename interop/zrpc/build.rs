//! Compiles `proto/grpc/testing/*.proto` (package `grpc.testing`) with zrpc-build, as an
//! application would.

const PROTOS: [&str; 3] = [
    "../../proto/grpc/testing/test.proto",
    "../../proto/grpc/testing/messages.proto",
    "../../proto/grpc/testing/empty.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // the protos live outside this package, where cargo does not look for changes by itself
    for proto in PROTOS {
        println!("cargo:rerun-if-changed={proto}");
    }
    zrpc_build::compile_protos(&PROTOS, &["../../proto"])?;
    Ok(())
}
