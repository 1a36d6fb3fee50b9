//! Compiles `proto/coroner/v1/*.proto` with protox, a protobuf compiler written in Rust,
//! so no `protoc` has to be installed on the machine that builds coroner.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../proto");
    let files = ["coroner/v1/ingest.proto", "coroner/v1/query.proto", "coroner/v1/live.proto", "coroner/v1/admin.proto"];
    for f in &files {
        println!("cargo:rerun-if-changed={}", root.join(f).display());
    }
    let descriptors = protox::compile(files, [&root])?;
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    let descriptor_path = out.join("coroner_v1_descriptor.bin");
    std::fs::write(&descriptor_path, prost::Message::encode_to_vec(&descriptors))?;
    tonic_prost_build::configure().build_server(true).build_client(true).compile_fds(descriptors)?;
    Ok(())
}
