fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/osd.proto");
    // Byte fields are `bytes::Bytes`: a received frame is a slice of the receive buffer, and a
    // frame can be forwarded (holder -> primary -> client) without a copy.
    tonic_prost_build::configure()
        .bytes(".")
        .compile_protos(&["proto/osd.proto"], &["proto"])?;
    Ok(())
}
