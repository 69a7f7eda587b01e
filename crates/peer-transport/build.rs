//! Compiles `proto/paxsql.proto` with protox (a pure Rust protobuf compiler, so no system `protoc` is needed;
//! docs/ARCHITECTURE.md §8) and generates prost messages plus tonic clients and servers from the descriptor set.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../proto");
    let proto = proto_dir.join("paxsql.proto");
    println!("cargo:rerun-if-changed={}", proto.display());
    let fds = protox::compile([&proto], [&proto_dir])?;
    tonic_prost_build::configure().build_client(true).build_server(true).compile_fds(fds)?;
    Ok(())
}
