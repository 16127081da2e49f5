//! TWEEN's real-client test (issue 15): `ecstack array serve` exports a (4+2) tween array over NBD
//! through the log layer. Unmodified fio (its nbd engine) writes random 4 KiB blocks with crc32c
//! verification (through the NVRAM buffers, flushes and GC); the blocks verify again with two devices
//! failed (degraded reads), after both were rebuilt, and after the server was stopped and started
//! again (the map and the unflushed buffers come back from the NVRAM file). nbdcopy checks a TRIM.

use ecstack_nbd::admin_request;
use ecstack_nbd::bench::{fio_has_nbd_engine, fio_randwrite_verify, fio_verify_only, VerifyParams};
use ecstack_testkit::{require, require_tool};

mod nbd_common;
use nbd_common::{check_trim, ecstack, free_port, nbd_copy, Served};
use std::time::Duration;

#[test]
fn fio_verify_over_nbd_through_tween_with_failures_rebuild_and_restart() {
    // A missing client skips loudly, or fails under CI=true / ECSTACK_REQUIRE_CLIENTS=1.
    if !require("fio with the nbd ioengine", fio_has_nbd_engine(), "fio")
        || !require_tool("nbdcopy", "libnbd-bin")
    {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display().to_string();
    let main: Vec<String> = (0..6).map(|i| format!("file:{d}/m{i}?size=16M")).collect();
    let meta = format!("file:{d}/meta?size=32M");
    let nvram = format!("{d}/nvram");
    let main_arg = main.join(",");
    // Stripe 256 KiB (chunk 64 KiB), 2 hotness groups: 4 MiB of random writes fill buffers,
    // flush full stripes, and their rewrite leaves stale extents for GC.
    let o = ecstack(&[
        "array", "create", "--scheme", "tween", "-k", "4", "-m", "2", "--main", &main_arg,
        "--meta", &meta, "--nvram", &nvram, "--stripe", "256K", "--groups", "2",
    ]);
    assert!(
        o.status.success(),
        "create: {}",
        String::from_utf8_lossy(&o.stderr)
    );

    let addr = format!("127.0.0.1:{}", free_port());
    let sock = dir.path().join("admin.sock");
    let served = Served::start(
        &["--meta", &meta, "--nvram", &nvram, "--addr", &addr],
        &sock,
    );
    let uri = format!("nbd://{addr}/ecstack");
    let p = VerifyParams {
        size: 4 << 20,
        iodepth: 8,
        timeout: Duration::from_secs(120),
        ..Default::default()
    };
    let w = fio_randwrite_verify(&uri, &p).unwrap_or_else(|e| panic!("fio write+verify: {e}"));
    assert!(
        w.write.total_ios >= 1024,
        "fio wrote {} blocks",
        w.write.total_ios
    );
    // Again over the same blocks: every block is overwritten, so segments hold stale extents.
    fio_randwrite_verify(&uri, &p).unwrap_or_else(|e| panic!("fio rewrite+verify: {e}"));

    let st = admin_request(&sock, "status").unwrap();
    let st: serde_json::Value =
        serde_json::from_str(&st).unwrap_or_else(|e| panic!("status is not JSON ({e}): {st}"));
    assert_eq!(st["scheme"], "tween", "{st}");
    let flushes = st["tween"]["stats"]["flushes"].as_u64().unwrap();
    assert!(flushes > 0, "no full-stripe flush: {st}");

    admin_request(&sock, "fail 1").unwrap_or_else(|e| panic!("fail 1: {e}"));
    admin_request(&sock, "fail 4").unwrap_or_else(|e| panic!("fail 4: {e}"));
    fio_verify_only(&uri, &p).unwrap_or_else(|e| panic!("degraded verify: {e}"));
    admin_request(&sock, "rebuild 1").unwrap_or_else(|e| panic!("rebuild 1: {e}"));
    admin_request(&sock, "rebuild 4").unwrap_or_else(|e| panic!("rebuild 4: {e}"));
    fio_verify_only(&uri, &p).unwrap_or_else(|e| panic!("verify after rebuild: {e}"));

    // TRIM 1 MiB..3 MiB: zeros there, the rest unchanged (nbdcopy reads the whole export).
    let after = check_trim(&uri, dir.path(), 1 << 20, 3 << 20, "tween");

    // Stop and serve again: the same bytes come back from the devices and the NVRAM file.
    served.stop(&sock);
    let served = Served::start(
        &["--meta", &meta, "--nvram", &nvram, "--addr", &addr],
        &sock,
    );
    assert!(
        nbd_copy(&uri, dir.path(), "reopened.img", "tween") == after,
        "bytes changed across a restart"
    );
    served.stop(&sock);

    // Without --nvram a tween array is refused with one line, not served wrong.
    let o = ecstack(&["array", "serve", "--meta", &meta, "--addr", &addr]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("--nvram"), "{err}");
}
