//! Generates the heartbeat gRPC code from proto/heartbeat.proto with a vendored protoc, so no
//! system protoc is needed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "../../proto/heartbeat.proto";
    println!("cargo:rerun-if-changed={proto}");
    let mut config = tonic_prost_build::Config::new();
    config.protoc_executable(protoc_bin_vendored::protoc_bin_path()?);
    tonic_prost_build::configure().compile_with_config(config, &[proto], &["../../proto"])?;
    Ok(())
}
