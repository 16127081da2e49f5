fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/mds.proto");
    tonic_prost_build::configure().compile_protos(&["proto/mds.proto"], &["proto"])?;
    Ok(())
}
