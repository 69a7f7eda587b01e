//! Compiles `proto/paxsql.proto` with protox (a pure Rust protobuf compiler, so no system `protoc` is needed;
//! docs/ARCHITECTURE.md §8) and generates prost messages plus tonic clients and servers from the descriptor set.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../proto");
    let proto = proto_dir.join("paxsql.proto");
    println!("cargo:rerun-if-changed={}", proto.display());
    let fds = protox::compile([&proto], [&proto_dir])?;
    // Paxos values arrive as slices of the receive buffer (prost `bytes::Bytes` fields), which the decoded value's
    // commands then share: a large value is not copied again between the wire and the acceptor.
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .bytes(".paxsql.v1.PromiseEntry.value")
        .bytes(".paxsql.v1.Accept.value")
        .bytes(".paxsql.v1.CatchUpEntry.value")
        .compile_fds(fds)?;
    Ok(())
}
