//! Issue 5's real-client test: for every update scheme, `ecstack array serve` exports a (4+2) array
//! over NBD; unmodified fio (its nbd engine) writes random 4 KiB blocks with crc32c verification, then
//! re-reads and verifies every block with a main and a second device failed (degraded reads), and again
//! after both were rebuilt.

use ecstack_nbd::admin_request;
use ecstack_nbd::bench::{fio_has_nbd_engine, fio_randwrite_verify, fio_verify_only, VerifyParams};
use ecstack_testkit::{require, require_tool};

mod nbd_common;
use nbd_common::{check_trim, ecstack, free_port, Served};
use std::time::Duration;

fn run_scheme(scheme: &str) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display().to_string();
    let main: Vec<String> = (0..6).map(|i| format!("file:{d}/m{i}?size=16M")).collect();
    let log: Vec<String> = (0..2).map(|i| format!("file:{d}/l{i}?size=16M")).collect();
    let meta = format!("file:{d}/meta?size=32M");
    let main_arg = main.join(",");
    let log_arg = log.join(",");
    let mut args = vec![
        "array", "create", "--scheme", scheme, "-k", "4", "-m", "2", "--main", &main_arg, "--meta",
        &meta,
    ];
    if scheme != "md" {
        args.extend(["--log", log_arg.as_str()]);
    }
    let o = ecstack(&args);
    assert!(
        o.status.success(),
        "{scheme}: create: {}",
        String::from_utf8_lossy(&o.stderr)
    );

    let port = free_port();
    let sock = dir.path().join("admin.sock");
    let addr = format!("127.0.0.1:{port}");
    let _served = Served::start(&["--meta", &meta, "--addr", &addr], &sock);
    let uri = format!("nbd://{addr}/ecstack");
    let p = VerifyParams {
        size: 8 << 20,
        iodepth: 8,
        timeout: Duration::from_secs(120),
        ..Default::default()
    };

    let w = fio_randwrite_verify(&uri, &p)
        .unwrap_or_else(|e| panic!("{scheme}: fio write+verify: {e}"));
    assert!(
        w.write.total_ios >= 2048,
        "{scheme}: fio wrote {} blocks",
        w.write.total_ios
    );

    // Two failures (the most RAID-6 tolerates): a main device and a log device (md has none: a second
    // main device).
    let second = if scheme == "md" {
        "fail 4"
    } else {
        "fail log0"
    };
    admin_request(&sock, "fail 1").unwrap_or_else(|e| panic!("{scheme}: fail 1: {e}"));
    admin_request(&sock, second).unwrap_or_else(|e| panic!("{scheme}: {second}: {e}"));
    fio_verify_only(&uri, &p).unwrap_or_else(|e| panic!("{scheme}: degraded verify: {e}"));

    admin_request(&sock, "rebuild 1").unwrap_or_else(|e| panic!("{scheme}: rebuild 1: {e}"));
    let rebuild2 = second.replace("fail", "rebuild");
    admin_request(&sock, &rebuild2).unwrap_or_else(|e| panic!("{scheme}: {rebuild2}: {e}"));
    fio_verify_only(&uri, &p).unwrap_or_else(|e| panic!("{scheme}: verify after rebuild: {e}"));
    // TRIM from fio's nbd engine: the whole stripes in 2..6 MiB read back as zeros (nbdcopy), the
    // rest is unchanged.
    check_trim(&uri, dir.path(), 2 << 20, 6 << 20, scheme);
    let st = admin_request(&sock, "status").unwrap();
    let st: serde_json::Value =
        serde_json::from_str(&st).unwrap_or_else(|e| panic!("status is not JSON ({e}): {st}"));
    assert!(
        st.to_string().contains(scheme),
        "{scheme}: status does not name the scheme: {st}"
    );
    let _ = admin_request(&sock, "shutdown");
}

#[test]
fn fio_verify_over_nbd_for_every_scheme_before_and_after_failure_and_rebuild() {
    // A missing client skips loudly, or fails under CI=true / ECSTACK_REQUIRE_CLIENTS=1.
    if !require("fio with the nbd ioengine", fio_has_nbd_engine(), "fio")
        || !require_tool("nbdcopy", "libnbd-bin")
    {
        return;
    }
    for scheme in ["md", "pl", "eplog"] {
        run_scheme(scheme);
    }
}
