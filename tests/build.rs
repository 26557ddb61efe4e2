//! Compiles `proto/greeter.proto`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=../proto/greeter.proto");
    tonic_prost_build::configure()
        .file_descriptor_set_path(
            std::path::PathBuf::from(std::env::var("OUT_DIR")?).join("greeter_descriptor.bin"),
        )
        .compile_protos(&["../proto/greeter.proto"], &["../proto"])?;
    Ok(())
}
