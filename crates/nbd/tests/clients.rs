//! Real, unmodified clients against the server: libnbd's `nbdinfo` and `nbdcopy`, and fio's `nbd`
//! ioengine with crc32c verification. A test whose tool is missing fails under CI and says loudly
//! that it skipped elsewhere (`ecstack_testkit::require_tool`; scripts/setup.sh installs `fio` and
//! `libnbd-bin`).

mod common;

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use ecstack_device::{BlockDevice, FileDevice, MemDevice, Metered};
use ecstack_nbd::bench::{
    fio_has_nbd_engine, fio_randwrite, fio_randwrite_verify, fio_verify_only, FioParams, FioTarget,
    VerifyParams,
};
use ecstack_nbd::Server;

const MIB: u64 = 1 << 20;

fn run(cmd: &mut Command) -> std::process::Output {
    let out = cmd.output().expect("spawn");
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn nbdinfo_size(uri: &str) -> u64 {
    let out = run(Command::new("nbdinfo").args(["--json", uri]));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("nbdinfo JSON");
    let exp = &v["exports"][0];
    assert_eq!(exp["export-name"], "ecstack");
    assert_eq!(exp["is_read_only"], false);
    assert_eq!(exp["can_flush"], true);
    assert_eq!(exp["can_trim"], true);
    assert_eq!(exp["can_multi_conn"], true);
    assert_eq!(exp["block_size_minimum"], 1);
    assert_eq!(exp["block_size_preferred"], 4096);
    assert_eq!(exp["block_size_maximum"], 32 << 20);
    exp["export-size"].as_u64().expect("export-size")
}

#[test]
fn nbdinfo_reports_size_for_mem_and_file_exports() {
    if !ecstack_testkit::require_tool("nbdinfo", "libnbd-bin") {
        return;
    }
    let (server, _dev) = mem_server(48 * MIB + 4096, cfg());
    assert_eq!(nbdinfo_size(&server.uri()), 48 * MIB + 4096);
    let out = run(Command::new("nbdinfo").args(["--list", "--json", &server.uri()]));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["exports"][0]["export-name"], "ecstack");
    // An unknown export name is refused.
    let bad = format!("nbd://{}/nope", server.addr());
    let out = Command::new("nbdinfo").arg(&bad).output().unwrap();
    assert!(!out.status.success());
    server.shutdown().unwrap();

    let dir = tempfile::tempdir().unwrap();
    let dev: Arc<dyn BlockDevice> =
        Arc::new(FileDevice::create(dir.path().join("disk.img"), 20 * MIB).unwrap());
    let server = Server::start(dev, None, cfg()).unwrap();
    assert_eq!(nbdinfo_size(&server.uri()), 20 * MIB);
    server.shutdown().unwrap();
}

/// nbdcopy a file with random data and a zero hole into the export and back out.
fn nbdcopy_roundtrip(server: &Server, dev: &dyn BlockDevice, size: usize) {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src.bin");
    let back = dir.path().join("back.bin");
    let mut data = pattern(size, 42);
    // A zero region: nbdcopy sends it as NBD_CMD_WRITE_ZEROES.
    data[size / 4..size / 4 + (1 << 20)].fill(0);
    std::fs::write(&src, &data).unwrap();
    // Pre-fill the device so a skipped zero region would show.
    dev.write_at(&vec![0xaa; size], 0).unwrap();
    run(Command::new("nbdcopy")
        .args(["--flush"])
        .arg(&src)
        .arg(server.uri()));
    let mut on_dev = vec![0u8; size];
    dev.read_at(&mut on_dev, 0).unwrap();
    assert!(on_dev == data, "device holds the copied bytes");
    run(Command::new("nbdcopy").arg(server.uri()).arg(&back));
    let got = std::fs::read(&back).unwrap();
    assert_eq!(got.len(), size);
    assert!(got == data, "bytes copied out equal the bytes copied in");
}

#[test]
fn nbdcopy_roundtrip_mem_and_file() {
    if !ecstack_testkit::require_tool("nbdcopy", "libnbd-bin") {
        return;
    }
    let size = 24 << 20;
    let dev = Arc::new(Metered::new(MemDevice::new(size as u64).unwrap()));
    let server = Server::start(dev.clone() as Arc<dyn BlockDevice>, None, cfg()).unwrap();
    nbdcopy_roundtrip(&server, dev.as_ref(), size);
    let st = server.stats();
    assert!(
        st.flushes >= 1,
        "nbdcopy --flush reaches the server: {st:?}"
    );
    assert!(dev.snapshot().flushes >= 1, "and the device");
    assert!(
        st.write_zeroes >= 1,
        "zero region sent as WRITE_ZEROES: {st:?}"
    );
    assert!(
        st.connections_total >= 2,
        "nbdcopy uses several connections (multi-conn)"
    );
    server.shutdown().unwrap();

    let dir = tempfile::tempdir().unwrap();
    let fdev = Arc::new(FileDevice::create(dir.path().join("disk.img"), size as u64).unwrap());
    let server = Server::start(fdev.clone() as Arc<dyn BlockDevice>, None, cfg()).unwrap();
    nbdcopy_roundtrip(&server, fdev.as_ref(), size);
    server.shutdown().unwrap();
}

fn fio_ok() -> bool {
    ecstack_testkit::require_tool("fio", "fio")
        && ecstack_testkit::require("fio with the nbd ioengine", fio_has_nbd_engine(), "fio")
}

fn fio_verify_cycle(dev: Arc<dyn BlockDevice>, size: u64) {
    let server = Server::start(dev.clone(), None, cfg()).unwrap();
    let p = VerifyParams {
        size,
        ..VerifyParams::default()
    };
    let w = fio_randwrite_verify(&server.uri(), &p).unwrap();
    assert_eq!(w.write.total_ios, size / 4096, "{}", w.command);
    assert!(
        w.read.total_ios >= size / 4096,
        "fio read every block back to verify"
    );
    // A fresh fio process, new connection: verify-only read pass.
    let writes = server.stats().writes;
    let v = fio_verify_only(&server.uri(), &p).unwrap();
    assert_eq!(
        server.stats().writes,
        writes,
        "verify_only pass does not write"
    );
    assert!(v.read.total_ios >= size / 4096, "{}", v.command);
    // Corrupt one block behind the server's back: the verify-only pass must now fail.
    dev.write_at(&[0x5a; 512], 8 * 4096 + 1024).unwrap();
    let bad = fio_verify_only(&server.uri(), &p);
    assert!(bad.is_err(), "verify must catch the corrupted block");
    eprintln!("expected verify failure: {}", bad.unwrap_err());
    server.shutdown().unwrap();
}

#[test]
fn fio_nbd_randwrite_verify_mem() {
    if !fio_ok() {
        return;
    }
    fio_verify_cycle(Arc::new(MemDevice::new(32 * MIB).unwrap()), 16 * MIB);
}

#[test]
fn fio_nbd_randwrite_verify_file() {
    if !fio_ok() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let dev = Arc::new(FileDevice::create(dir.path().join("disk.img"), 16 * MIB).unwrap());
    fio_verify_cycle(dev, 16 * MIB);
}

#[test]
fn fio_randwrite_iops_nbd_and_file() {
    if !fio_ok() {
        return;
    }
    let (server, dev) = mem_server(32 * MIB, cfg());
    let p = FioParams {
        size: 16 * MIB,
        runtime: Duration::from_secs(1),
        ..FioParams::default()
    };
    let r = fio_randwrite(&FioTarget::Nbd(server.uri()), &p).unwrap();
    assert!(r.write.iops > 0.0 && r.write.total_ios > 0, "{r:?}");
    assert_eq!(dev.snapshot().write_ops, server.stats().writes);
    assert!(r.command.contains("--ioengine=nbd"));
    server.shutdown().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("raw.img");
    let r = fio_randwrite(&FioTarget::File(f), &p).unwrap();
    assert!(r.write.iops > 0.0, "{r:?}");
}
