// Links ISA-L when the `isal` feature is on. ISA-L comes from Debian's libisal-dev (/usr/lib/*/libisal.so).
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var_os("CARGO_FEATURE_ISAL").is_some() {
        println!("cargo:rustc-link-lib=dylib=isal");
    }
}
