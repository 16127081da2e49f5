fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/osd.proto");
    tonic_prost_build::configure().compile_protos(&["proto/osd.proto"], &["proto"])?;
    Ok(())
}
