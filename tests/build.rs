//! Compiles `proto/greeter.proto` with plain tonic-prost-build (the greeter is also served by
//! bare tonic next to zrpc); zrpc-build reads the proto, so no protoc is needed.

use prost::Message;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=../proto/greeter.proto");
    let set = zrpc_build::file_descriptor_set(&["../proto/greeter.proto"], &["../proto"])?;
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(out.join("greeter_descriptor.bin"), set.encode_to_vec())?;
    tonic_prost_build::configure().compile_fds(set)?;
    Ok(())
}
