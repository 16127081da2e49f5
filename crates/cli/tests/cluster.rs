//! The cluster through real processes on 127.0.0.1: put/get/update of random files and ranges
//! against a byte model, listing and removal, the CLI commands, bad input (ranges, config,
//! certificates of another cluster). Fault runs are in `cluster_faults.rs`.

mod cluster_common;

use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cluster_common::*;
use ecstack_base::Rng;
use ecstack_client::{Client, ClientError, ClientOptions, FailedAttempts, ReadPath};
use ecstack_lab::codfs_local::{LocalCluster, LocalSpec};
use ecstack_rpc::Security;

/// Random puts, whole and ranged gets and updates (inside a segment, across segment boundaries,
/// at the file's end) checked byte for byte against the model; then ls, stat and rm.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_get_update_match_the_model() {
    // OSDs of one worker thread each (`ecstack osd --threads 1`): every request still completes.
    let rig = Rig::start(RigSpec {
        osd_threads: Some(1),
        ..RigSpec::default()
    })
    .await;
    // Reads go through the primary (the rig's client) or straight from the holders, at random.
    let direct = rig.client_with(ReadPath::Direct);
    let seg = rig.segment_bytes as usize;
    // The counters a throughput is sampled from add up: a put's bytes sent are those acknowledged
    // (plus those of failed attempts: none here), a get's bytes received are its length.
    {
        let (sent, acked, received) = (counter(), counter(), counter());
        let failed = Arc::new(FailedAttempts::default());
        let c = rig.client_with_options(ClientOptions {
            sent: Some(sent.clone()),
            progress: Some(acked.clone()),
            received: Some(received.clone()),
            failed_attempts: Some(failed.clone()),
            ..client_options(20)
        });
        let data = random_bytes(&mut Rng::new(5), 3 * seg + 12345);
        let len = data.len() as u64;
        assert_eq!(c.put("/counted", &data[..]).await.unwrap(), len);
        assert_eq!(failed.attempts.load(Ordering::Relaxed), 0);
        assert_eq!(sent.load(Ordering::Relaxed), len);
        assert_eq!(acked.load(Ordering::Relaxed), len);
        assert!(c.read("/counted", 0, len).await.unwrap() == data);
        assert_eq!(received.load(Ordering::Relaxed), len);
        c.remove("/counted").await.unwrap();
    }
    for seed in seeds(1) {
        let mut rng = Rng::new(seed);
        let mut model = Model::new();
        let sizes = [0, 1, 4095, seg - 1, seg, seg + 1, 3 * seg + 12345];
        for (i, &size) in sizes.iter().enumerate() {
            let path = format!("/s{seed}/f{i}");
            let data = random_bytes(&mut rng, size);
            let n = rig.client.put(&path, &data[..]).await.unwrap();
            assert_eq!(n, size as u64);
            model.insert(path, FileModel::new(data));
        }
        for step in 0..60 {
            let paths: Vec<String> = model.keys().cloned().collect();
            let path = &paths[rng.below(paths.len() as u64) as usize];
            let size = model[path].cur.len();
            let ctx = format!("seed {seed} step {step} {path} ({size} bytes)");
            if size == 0 {
                let got = rig.client.read(path, 0, 0).await.unwrap();
                assert!(got.is_empty(), "{ctx}");
                continue;
            }
            let offset = rng.below(size as u64) as usize;
            let len = 1 + rng.below((size - offset) as u64) as usize;
            if rng.chance(0.5) {
                let data = random_bytes(&mut rng, len);
                rig.client
                    .update(path, offset as u64, &data)
                    .await
                    .unwrap_or_else(|e| panic!("{ctx}: update {offset}+{len}: {e}"));
                model.get_mut(path).unwrap().updated(offset, &data);
            } else {
                let reader = if rng.chance(0.5) {
                    &direct
                } else {
                    &rig.client
                };
                // Joined by the client, or as the frames they arrived in (no join copy).
                let got = if rng.chance(0.5) {
                    reader.read(path, offset as u64, len as u64).await
                } else {
                    reader
                        .read_frames(path, offset as u64, len as u64)
                        .await
                        .map(|frames| frames.concat())
                }
                .unwrap_or_else(|e| panic!("{ctx}: get {offset}+{len}: {e}"));
                assert_eq!(got.len(), len, "{ctx}");
                assert_eq!(
                    model[path].check(offset, &got),
                    None,
                    "{ctx}: get {offset}+{len}"
                );
            }
        }
        // Several ranges as one read (one window across them), wrapping past the file's end.
        for (path, f) in &model {
            let size = f.cur.len() as u64;
            let mut ranges = vec![(0, None), (size / 2, None)];
            for _ in 0..3 {
                let offset = rng.below(size + 1);
                ranges.push((offset, Some(rng.below(size - offset + 1))));
            }
            let mut got = Vec::new();
            let n = rig
                .client
                .get_ranges(path, &ranges, &mut got)
                .await
                .unwrap_or_else(|e| panic!("seed {seed}: {path} get_ranges {ranges:?}: {e}"));
            let mut want = Vec::new();
            for &(offset, length) in &ranges {
                let end = length.map_or(size, |l| offset + l) as usize;
                want.extend_from_slice(&f.cur[offset as usize..end]);
            }
            assert_eq!(n, want.len() as u64, "seed {seed}: {path} {ranges:?}");
            assert!(
                got == want,
                "seed {seed}: {path} get_ranges {ranges:?} differs"
            );
        }
        for (path, f) in &model {
            let got = rig.client.read(path, 0, f.cur.len() as u64).await.unwrap();
            assert!(got == f.cur, "seed {seed}: {path} whole file differs");
            let got = direct.read(path, 0, f.cur.len() as u64).await.unwrap();
            assert!(
                got == f.cur,
                "seed {seed}: {path} whole file differs (direct)"
            );
        }
        let reads = direct.read_stats();
        assert!(reads.direct > 0, "seed {seed}: {reads:?}");
        assert_eq!(
            reads.fallbacks, 0,
            "seed {seed}: nothing failed, yet {reads:?}"
        );
        assert_eq!(reads.primary, 0, "seed {seed}: {reads:?}");
        let listed = rig.client.list(&format!("/s{seed}/")).await.unwrap();
        let names: Vec<&str> = listed.iter().map(|f| f.path.as_str()).collect();
        let want: Vec<&str> = model.keys().map(String::as_str).collect();
        assert_eq!(names, want, "seed {seed}: listing");
        let big = format!("/s{seed}/f6");
        let info = rig.client.stat(&big).await.unwrap();
        assert_eq!(info.size, model[&big].cur.len() as u64);
        assert_eq!(info.segments.len(), 4);
        for s in &info.segments {
            assert_eq!(s.chunks.len(), (rig.k + rig.m) as usize);
            let mut osds: Vec<u32> = s.chunks.iter().map(|c| c.osd_id).collect();
            osds.sort_unstable();
            osds.dedup();
            assert_eq!(
                osds.len(),
                (rig.k + rig.m) as usize,
                "two chunks on one OSD"
            );
        }
        // Replacing a file (close-to-open): the new content, whole.
        let data = random_bytes(&mut rng, 2 * seg + 7);
        rig.client.put(&big, &data[..]).await.unwrap();
        let got = rig.client.read(&big, 0, data.len() as u64).await.unwrap();
        assert!(got == data, "replaced file");
        rig.client.remove(&big).await.unwrap();
        let e = rig.client.stat(&big).await.unwrap_err();
        assert!(!e.is_retryable(), "{e}");
        let listed = rig.client.list(&format!("/s{seed}/")).await.unwrap();
        assert_eq!(listed.len(), model.len() - 1);
    }
}

/// Direct reads (`ReadPath::Direct`) while updates rewrite a whole segment: every read returns one
/// update's bytes whole (never chunks of two updates: a chunk at another version than the primary
/// planned sends the piece through the primary), reads never go back in time, and with a data
/// holder killed the reads fall back to the primary's degraded read and stay exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_reads_see_whole_updates_and_fall_back_when_degraded() {
    let rig = Rig::start(RigSpec::default()).await;
    let seg = rig.segment_bytes as usize;
    let path = "/direct";
    rig.client.put(path, &vec![0u8; seg][..]).await.unwrap();
    let reader = rig.client_with(ReadPath::Direct);
    const UPDATES: u8 = 24;
    let writer = rig.client.clone();
    let updates = tokio::spawn(async move {
        for v in 1..=UPDATES {
            writer.update(path, 0, &vec![v; seg]).await.unwrap();
        }
    });
    let mut last = 0u8;
    let mut reads = 0u32;
    while !updates.is_finished() || reads == 0 {
        let got = reader.read(path, 0, seg as u64).await.unwrap();
        let v = got[0];
        if let Some(at) = got.iter().position(|&b| b != v) {
            panic!(
                "read {reads}: byte 0 is from update {v}, byte {at} from update {}",
                got[at]
            );
        }
        assert!(v >= last, "read {reads}: update {v} after update {last}");
        last = v;
        reads += 1;
    }
    updates.await.unwrap();
    let got = reader.read(path, 0, seg as u64).await.unwrap();
    assert!(got.iter().all(|&b| b == UPDATES), "after the updates");
    let before = reader.read_stats();
    assert!(before.direct > 0, "{before:?}");
    eprintln!("{reads} reads during {UPDATES} updates: {before:?}");

    // Kill the holder of data chunk 1 (not the primary): the segment is degraded, the plan says so
    // and the piece goes through the primary, which decodes.
    let info = rig.client.stat(path).await.unwrap();
    let holder = info.segments[0]
        .chunks
        .iter()
        .find(|c| c.index == 1)
        .unwrap()
        .osd_id;
    let status = rig.client.status().await.unwrap();
    let name = status
        .osds
        .iter()
        .find(|o| o.osd_id == holder)
        .unwrap()
        .name
        .clone();
    let i = (0..rig.cluster.osd_count())
        .find(|&i| LocalCluster::osd_name(i) == name)
        .unwrap();
    let mut rig = rig;
    rig.cluster.kill_osd(i);
    // Before the MDS notices, the holder is unreachable: the direct read falls back too.
    let got = reader.read(path, 0, seg as u64).await.unwrap();
    assert!(got.iter().all(|&b| b == UPDATES), "holder just killed");
    rig.wait_down(&name).await;
    let got = reader.read(path, 0, seg as u64).await.unwrap();
    assert!(got.iter().all(|&b| b == UPDATES), "degraded");
    let after = reader.read_stats();
    assert!(
        after.fallbacks >= before.fallbacks + 2,
        "{before:?} -> {after:?}"
    );
}

/// Ranges outside the file are one clear error each, and nothing is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ranges_outside_the_file_are_refused() {
    let rig = Rig::start(RigSpec {
        osds: 6,
        ..RigSpec::default()
    })
    .await;
    let data = vec![7u8; 1000];
    rig.client.put("/r", &data[..]).await.unwrap();
    for (offset, len) in [(1000u64, 1u64), (999, 2), (u64::MAX, 2)] {
        let e = rig.client.read("/r", offset, len).await.unwrap_err();
        assert!(matches!(e, ClientError::Range { .. }), "{e}");
        let e = rig
            .client
            .update("/r", offset, &vec![1u8; len as usize])
            .await
            .unwrap_err();
        assert!(matches!(e, ClientError::Range { .. }), "{e}");
        assert!(!e.to_string().contains('\n'));
    }
    // One range outside the file refuses the whole read before a byte is written.
    let mut out = Vec::new();
    let e = rig
        .client
        .get_ranges("/r", &[(0, None), (10, Some(991))], &mut out)
        .await
        .unwrap_err();
    assert!(matches!(e, ClientError::Range { .. }), "{e}");
    assert!(out.is_empty());
    assert_eq!(rig.client.read("/r", 0, 1000).await.unwrap(), data);
    let e = rig.client.read("/missing", 0, 1).await.unwrap_err();
    assert!(
        !e.is_retryable() && e.to_string().contains("/missing"),
        "{e}"
    );
}

fn counter() -> Arc<AtomicU64> {
    Arc::new(AtomicU64::new(0))
}

/// The CLI end to end: put a file, get it whole and as a range (to a file and to stdout), update
/// it, ls/stat/status as JSON, rm.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_commands_round_trip() {
    let rig = Rig::start(RigSpec {
        osds: 6,
        ..RigSpec::default()
    })
    .await;
    let config = rig.cluster.config_path();
    let config = config.to_str().unwrap();
    let work = rig.dir.path();
    let mut rng = Rng::new(5);
    let data = random_bytes(&mut rng, 2_500_000);
    let local = work.join("in.bin");
    std::fs::write(&local, &data).unwrap();
    let ok = |o: std::process::Output| {
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        o
    };
    ok(ecstack(&[
        "cluster",
        "put",
        local.to_str().unwrap(),
        "/cli/a",
        "--config",
        config,
    ]));
    let out = work.join("out.bin");
    ok(ecstack(&[
        "cluster",
        "get",
        "/cli/a",
        out.to_str().unwrap(),
        "--config",
        config,
    ]));
    assert!(std::fs::read(&out).unwrap() == data);
    let o = ok(ecstack(&[
        "cluster", "get", "/cli/a", "-", "--offset", "1048570", "--length", "100", "--config",
        config,
    ]));
    assert_eq!(o.stdout, &data[1_048_570..1_048_670]);
    ok(ecstack(&[
        "cluster", "update", "/cli/a", "--offset", "1048575", "--data", "hello", "--config", config,
    ]));
    let o = ok(ecstack(&[
        "cluster", "get", "/cli/a", "--offset", "1048574", "--length", "7", "--config", config,
    ]));
    let mut want = data[1_048_574..1_048_581].to_vec();
    want[1..6].copy_from_slice(b"hello");
    assert_eq!(o.stdout, want);
    let o = ok(ecstack(&[
        "cluster", "ls", "/cli/", "--json", "--config", config,
    ]));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v[0]["path"], "/cli/a");
    assert_eq!(v[0]["size"], 2_500_000);
    let o = ok(ecstack(&[
        "cluster", "stat", "/cli/a", "--json", "--config", config,
    ]));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["segments"].as_array().unwrap().len(), 3);
    let o = ok(ecstack(&[
        "cluster", "status", "--json", "--config", config,
    ]));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["osds_up"], 6);
    assert_eq!(v["segments"]["healthy"], 3);
    ok(ecstack(&["cluster", "rm", "/cli/a", "--config", config]));
    let o = ecstack(&["cluster", "get", "/cli/a", "--config", config]);
    assert!(!o.status.success());
    let line = stderr_line(&o);
    assert!(line.contains("/cli/a"), "{line}");
}

/// A config that does not exist, is not TOML, or holds impossible values: one clear line each,
/// before any network call.
#[test]
fn wrong_config_is_one_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.toml");
    let line = stderr_line(&ecstack(&[
        "cluster",
        "ls",
        "--config",
        missing.to_str().unwrap(),
    ]));
    assert!(line.contains("nope.toml"), "{line}");
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "cluster_id = [\n").unwrap();
    let line = stderr_line(&ecstack(&[
        "cluster",
        "status",
        "--config",
        bad.to_str().unwrap(),
    ]));
    assert!(line.contains("bad.toml"), "{line}");
    // A real config with an impossible code.
    let c = dir.path().join("c");
    ecstack_rpc::init_cluster(&c, &ecstack_rpc::InitOptions::default()).unwrap();
    let path = c.join("cluster.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replace("k = 6", "k = 0")).unwrap();
    let line = stderr_line(&ecstack(&[
        "cluster",
        "ls",
        "--config",
        path.to_str().unwrap(),
    ]));
    assert!(
        line.contains("k=0") || line.contains("k = 0") || line.contains("k"),
        "{line}"
    );
    // No certificate of that name.
    std::fs::write(&path, text).unwrap();
    let line = stderr_line(&ecstack(&[
        "cluster",
        "ls",
        "--config",
        path.to_str().unwrap(),
        "--name",
        "nobody",
    ]));
    assert!(line.contains("nobody"), "{line}");
}

/// A client holding a certificate of another cluster (its own CA) is refused by the MDS and by
/// the OSDs: a clean error, no data.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_from_another_cluster_is_refused() {
    let rig = Rig::start(RigSpec {
        osds: 6,
        ..RigSpec::default()
    })
    .await;
    rig.client
        .put("/secret", &b"for this cluster only"[..])
        .await
        .unwrap();
    let other = rig.dir.path().join("other");
    ecstack_rpc::init_cluster(&other, &ecstack_rpc::InitOptions::default()).unwrap();
    let foreign = Security::load(&other.join("certs"), "client").unwrap();
    let intruder = Client::connect_with(rig.cluster.config(), foreign, client_options(2)).unwrap();
    let e = intruder.read("/secret", 0, 5).await.unwrap_err();
    assert!(!e.to_string().contains('\n'), "{e}");
    let e = intruder.list("").await.unwrap_err();
    assert!(!e.to_string().contains('\n'), "{e}");
    // Straight to an OSD, with a layout the real client fetched.
    let info = rig.client.stat("/secret").await.unwrap();
    let osd = ecstack_osd_proto::OsdClient::connect(
        &info.segments[0].primary_addr,
        &Security::load(&other.join("certs"), "client").unwrap(),
    )
    .unwrap();
    let layout = ecstack_osd_proto::Layout {
        scheme: Default::default(),
        segment_id: info.segments[0].segment_id,
        length: info.segments[0].length,
        primary: info.segments[0].primary,
        holders: Vec::new(),
        epoch: info.segments[0].epoch,
        version: info.segments[0].version,
    };
    let r = tokio::time::timeout(Duration::from_secs(20), osd.read_segment(&layout, 0, 5)).await;
    assert!(
        matches!(r, Ok(Err(_))),
        "an OSD served a foreign client: {r:?}"
    );
    // The failure is final: through a proxy that counts connections, the intruder's `ls` (with
    // the default policy, which retries an unreachable MDS for 30 s) makes one attempt, one TCP
    // connection, and fails with one line saying the certificate is not of this cluster.
    let (proxy, connections) = counting_proxy(&rig.cluster.config().mds.addr).await;
    let mut via_proxy = rig.cluster.config().clone();
    via_proxy.mds.addr = proxy.clone();
    let intruder = Client::connect_with(
        &via_proxy,
        Security::load(&other.join("certs"), "client").unwrap(),
        ClientOptions::default(),
    )
    .unwrap();
    let e = intruder.list("").await.unwrap_err();
    let line = e.to_string();
    assert!(
        line.contains("the certificate is not of this cluster") && !line.contains('\n'),
        "{line}"
    );
    assert!(!matches!(e, ClientError::GaveUp { .. }), "{line}");
    assert_eq!(connections.load(Ordering::SeqCst), 1, "one attempt: {line}");
    // The same through the CLI: the other cluster's config, pointed at this cluster's MDS.
    let other_config = other.join("cluster.toml");
    let text = std::fs::read_to_string(&other_config).unwrap();
    let text = text.replace(&ecstack_rpc::init::DEFAULT_MDS_ADDR.to_string(), &proxy);
    assert!(text.contains(&proxy), "{text}");
    std::fs::write(&other_config, text).unwrap();
    let o = tokio::task::spawn_blocking(move || {
        ecstack(&["cluster", "ls", "--config", other_config.to_str().unwrap()])
    })
    .await
    .unwrap();
    let line = stderr_line(&o);
    assert!(
        line.contains("cannot authenticate to the MDS: the certificate is not of this cluster"),
        "{line}"
    );
    assert_eq!(connections.load(Ordering::SeqCst), 2, "one attempt: {line}");
    // The cluster's own client still works.
    assert_eq!(rig.client.read("/secret", 0, 3).await.unwrap(), b"for");
}

/// A TCP proxy on 127.0.0.1 to `target` that counts the connections it accepts.
async fn counting_proxy(target: &str) -> (String, Arc<AtomicU64>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let accepted = counter();
    let (count, target) = (accepted.clone(), target.to_owned());
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            let target = target.clone();
            tokio::spawn(async move {
                if let Ok(mut outbound) = tokio::net::TcpStream::connect(&target).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
    (addr, accepted)
}

/// Roles through the CLI: `osd out` uses the admin certificate by default and is refused, in one
/// line, with a client's; the client's commands work with the client's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn administrative_commands_need_the_admin_certificate() {
    let rig = Rig::start(RigSpec {
        osds: 3,
        k: 2,
        m: 1,
        ..RigSpec::default()
    })
    .await;
    let config = rig.cluster.config_path();
    let run = |args: Vec<String>| {
        tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            ecstack(&args)
        })
    };
    let args = |extra: &[&str]| {
        let mut a: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        a.extend(["--config".to_owned(), config.display().to_string()]);
        a
    };
    let o = run(args(&[
        "cluster", "osd", "out", "osd-1", "--name", "client",
    ]))
    .await
    .unwrap();
    let line = stderr_line(&o);
    assert!(
        line.contains("permission denied")
            && line.contains("has role client")
            && line.contains("OsdOut is for admin certificates only"),
        "{line}"
    );
    // With the admin certificate (the default) the MDS gets as far as looking the OSD up.
    let o = run(args(&["cluster", "osd", "out", "osd-99"]))
        .await
        .unwrap();
    let line = stderr_line(&o);
    assert!(line.contains("no OSD \"osd-99\""), "{line}");
    // A client's commands with the client's certificate (the default), status included.
    for cmd in [&["cluster", "ls"][..], &["cluster", "status"]] {
        let o = run(args(cmd)).await.unwrap();
        assert!(
            o.status.success(),
            "{cmd:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    // A certificate from before roles: refused with the fix named; reissued, it works.
    let certs = rig.cluster.config().certs_dir();
    ecstack_rpc::init::issue_certificate_with_role(rig.cluster.config(), "client-old", None, false)
        .unwrap();
    let o = run(args(&["cluster", "ls", "--name", "client-old"]))
        .await
        .unwrap();
    let line = stderr_line(&o);
    assert!(
        line.contains("`ecstack cluster cert client-old --force`"),
        "{line}"
    );
    let o = run(args(&["cluster", "cert", "client-old", "--force"]))
        .await
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(certs.join("client-old.pem").exists());
    let o = run(args(&["cluster", "ls", "--name", "client-old"]))
        .await
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// `ecstack cluster up` starts the daemons, reports them, and stops every one on SIGTERM.
#[test]
fn cluster_up_starts_and_stops_its_children() {
    let dir = tempfile::tempdir().unwrap();
    let cdir = dir.path().join("c");
    // A cluster made the way `up` makes one, on a free port (the default 7100 may be taken).
    let mut spec = LocalSpec::new(exe(), cdir.clone(), 0);
    spec.k = 2;
    spec.m = 1;
    spec.segment_bytes = 1 << 20;
    drop(LocalCluster::start(spec).unwrap());
    // `--update-scheme` sets a new cluster's default; an existing cluster of another default
    // says so in one line (its config is not rewritten) before starting anything.
    let line = stderr_line(&ecstack(&[
        "cluster",
        "up",
        "--osds",
        "3",
        "--config",
        cdir.to_str().unwrap(),
        "--update-scheme",
        "plr",
    ]));
    assert!(
        line.contains("--update-scheme plr") && line.contains("[update] scheme = \"fo\""),
        "{line}"
    );
    let mut plr = LocalSpec::new(exe(), dir.path().join("plr"), 0);
    plr.update_scheme = ecstack_rpc::UpdateScheme::Plr;
    drop(LocalCluster::start(plr).unwrap());
    let config = ecstack_rpc::ClusterConfig::load(&dir.path().join("plr/cluster.toml")).unwrap();
    assert_eq!(config.update.scheme, ecstack_rpc::UpdateScheme::Plr);
    let mut child = Command::new(exe())
        .args([
            "cluster",
            "up",
            "--osds",
            "3",
            "--config",
            cdir.to_str().unwrap(),
            "--update-scheme",
            "fo",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || up_lines(stdout));
    let lines = reader.join().unwrap();
    let text = lines.join("\n");
    assert!(text.contains("MDS") && text.contains("osd-2"), "{text}");
    let pids: Vec<i32> = lines
        .iter()
        .filter_map(|l| l.split("pid ").nth(1))
        .filter_map(|s| s.split(|c: char| !c.is_ascii_digit()).next())
        .filter_map(|s| s.parse().ok())
        .collect();
    assert_eq!(pids.len(), 4, "{text}");
    // SAFETY: kill(2) with a child's pid and SIGTERM touches no memory.
    unsafe {
        libc_kill(child.id() as i32, 15);
    }
    let status = child.wait().unwrap();
    assert!(status.success(), "cluster up exited with {status}");
    for pid in pids {
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists()
                || std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .map(|s| s.contains(") Z "))
                    .unwrap_or(true),
            "daemon {pid} outlived `cluster up`"
        );
    }
}

extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}

/// A file handle updates without a lookup each time. After its segment's primary is killed and
/// another is promoted, one update retries (the old primary refuses the connection) and the
/// handle keeps the layout the retry fetched: the next update goes straight to the new primary,
/// with no failed attempt. The bytes read back are the last update's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_handle_keeps_the_layout_of_a_promoted_primary() {
    let rig = Rig::start(RigSpec::default()).await;
    let failed = Arc::new(FailedAttempts::default());
    let client = rig.client_with_options(ClientOptions {
        failed_attempts: Some(failed.clone()),
        ..client_options(20)
    });
    let mut data = random_bytes(&mut Rng::new(5), 300_000);
    client.put("/h", &data[..]).await.unwrap();
    let handle = client.open("/h").await.unwrap();
    handle.update(10, b"first").await.unwrap();
    data[10..15].copy_from_slice(b"first");
    assert_eq!(failed.attempts.load(Ordering::Relaxed), 0);
    // Kill the primary of the only segment and wait for the MDS to promote another.
    let primary = handle.info().segments[0].primary;
    let status = client.status().await.unwrap();
    let name = status
        .osds
        .iter()
        .find(|o| o.osd_id == primary)
        .map(|o| o.name.clone())
        .unwrap();
    let i: usize = name.trim_start_matches("osd-").parse().unwrap();
    let mut rig = rig;
    rig.cluster.kill_osd(i);
    rig.wait_down(&name).await;
    handle.update(20, b"second").await.unwrap();
    data[20..26].copy_from_slice(b"second");
    let after_failover = failed.attempts.load(Ordering::Relaxed);
    assert!(after_failover >= 1, "the stale primary was not tried");
    handle.update(30, b"third").await.unwrap();
    data[30..35].copy_from_slice(b"third");
    assert_eq!(
        failed.attempts.load(Ordering::Relaxed),
        after_failover,
        "the handle went to the dead primary again: {:?}",
        failed.last_error()
    );
    let got = client.read("/h", 0, data.len() as u64).await.unwrap();
    assert!(got == data, "the handle's updates did not all land");
}

/// A file handle's updates and reads send the MDS nothing (over several segments, by both read
/// paths), where an update or a read by path looks the file up each time. Then the primary of a
/// segment is killed: the handle's next read retries, fetching that segment's layout, and keeps it,
/// so the read after it goes straight to the promoted primary (no failed attempt, no MDS request).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_handle_reads_and_updates_without_the_mds_and_keeps_a_fresh_layout() {
    let mut rig = Rig::start(RigSpec::default()).await;
    let seg = rig.segment_bytes as usize;
    let failed = Arc::new(FailedAttempts::default());
    let client = rig.client_with_options(ClientOptions {
        failed_attempts: Some(failed.clone()),
        ..client_options(20)
    });
    let direct = rig.client_with(ReadPath::Direct);
    let mut data = random_bytes(&mut Rng::new(9), 3 * seg + 777);
    client.put("/fh", &data[..]).await.unwrap();
    let handle = client.open("/fh").await.unwrap();
    let direct_handle = direct.open("/fh").await.unwrap();
    assert_eq!(handle.info().size, data.len() as u64);
    let asked = (client.mds_requests(), direct.mds_requests());

    // Across the boundary of segments 0 and 1, and inside segment 2.
    let a = random_bytes(&mut Rng::new(10), 5000);
    handle.update((seg - 1000) as u64, &a).await.unwrap();
    data[seg - 1000..seg + 4000].copy_from_slice(&a);
    handle
        .update((2 * seg + 5) as u64, b"inside")
        .await
        .unwrap();
    data[2 * seg + 5..2 * seg + 11].copy_from_slice(b"inside");
    for h in [&handle, &direct_handle] {
        let got = h.read(0, data.len() as u64).await.unwrap();
        assert!(got == data, "{h:?}: the whole file after the updates");
        let got = h.read((seg - 10) as u64, 2 * seg as u64).await.unwrap();
        assert!(got[..] == data[seg - 10..3 * seg - 10], "{h:?}: a range");
    }
    assert!(matches!(
        handle.read(1, data.len() as u64).await,
        Err(ClientError::Range { .. })
    ));
    assert_eq!((client.mds_requests(), direct.mds_requests()), asked);
    assert_eq!(failed.attempts.load(Ordering::Relaxed), 0);
    // By path, each call looks the file up.
    client.update("/fh", 0, b"p").await.unwrap();
    data[0] = b'p';
    assert_eq!(client.read("/fh", 0, 1).await.unwrap(), b"p");
    assert_eq!(client.mds_requests(), asked.0 + 2);

    // The primary of segment 1 dies; another is promoted.
    let primary = handle.info().segments[1].primary;
    let status = rig.client.status().await.unwrap();
    let i = osd_index(&status, primary);
    rig.cluster.kill_osd(i);
    rig.wait_down(&LocalCluster::osd_name(i)).await;
    let got = handle.read(seg as u64, seg as u64).await.unwrap();
    assert!(got[..] == data[seg..2 * seg], "read across the failover");
    let after_failover = (
        failed.attempts.load(Ordering::Relaxed),
        client.mds_requests(),
    );
    assert!(after_failover.0 >= 1, "the dead primary was not tried");
    assert!(after_failover.1 > asked.0 + 2, "no layout was fetched");
    let got = handle.read(seg as u64, seg as u64).await.unwrap();
    assert!(got[..] == data[seg..2 * seg]);
    assert_eq!(
        (
            failed.attempts.load(Ordering::Relaxed),
            client.mds_requests()
        ),
        after_failover,
        "the handle read from the dead primary again: {:?}",
        failed.last_error()
    );
}

/// Per-file update schemes through the CLI and real processes (issue 41, the MDS side): `put
/// --update-scheme plr` makes a plr file that `stat` shows; without the flag a new path takes the
/// cluster's default (fo) and a replaced path keeps its scheme; a bare `pl` names `codfs-pl`;
/// another scheme for an existing path is refused with one line; `status` shows each OSD's
/// reserve, log bytes and merges. (Whether the OSDs keep plr's reserve is the chunk store's test.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_files_update_scheme_is_set_by_put_and_shown_by_stat() {
    let rig = Rig::start(RigSpec {
        osds: 3,
        k: 2,
        m: 1,
        ..RigSpec::default()
    })
    .await;
    let config = rig.cluster.config_path();
    let config = config.to_str().unwrap();
    let local = rig.dir.path().join("in.bin");
    std::fs::write(&local, random_bytes(&mut Rng::new(41), 300_000)).unwrap();
    let local = local.to_str().unwrap();
    let ok = |o: std::process::Output| {
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8(o.stdout).unwrap()
    };
    let stat_scheme = |path: &str| {
        let o = ok(ecstack(&[
            "cluster", "stat", path, "--json", "--config", config,
        ]));
        let v: serde_json::Value = serde_json::from_str(&o).unwrap();
        v["update_scheme"].as_str().unwrap().to_owned()
    };

    let out = ok(ecstack(&[
        "cluster",
        "put",
        local,
        "/s/plr",
        "--update-scheme",
        "plr",
        "--config",
        config,
    ]));
    assert!(out.contains("update scheme plr"), "{out}");
    assert_eq!(stat_scheme("/s/plr"), "plr");
    let text = ok(ecstack(&["cluster", "stat", "/s/plr", "--config", config]));
    assert!(
        text.lines().next().unwrap().ends_with("update scheme plr"),
        "{text}"
    );
    let v: serde_json::Value = serde_json::from_str(&ok(ecstack(&[
        "cluster",
        "put",
        local,
        "/s/default",
        "--json",
        "--config",
        config,
    ])))
    .unwrap();
    assert_eq!(v["update_scheme"], "fo", "the cluster's default");
    assert_eq!(stat_scheme("/s/default"), "fo");

    // A bare `pl` is refused before anything is stored, naming codfs-pl.
    let o = ecstack(&[
        "cluster",
        "put",
        local,
        "/s/pl",
        "--update-scheme",
        "pl",
        "--config",
        config,
    ]);
    assert!(!o.status.success());
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("codfs-pl"), "{e}");
    let o = ecstack(&["cluster", "stat", "/s/pl", "--config", config]);
    assert!(!o.status.success(), "nothing was stored");

    // A file keeps its scheme: another one is refused with one line; none keeps the file's.
    let line = stderr_line(&ecstack(&[
        "cluster",
        "put",
        local,
        "/s/plr",
        "--update-scheme",
        "fl",
        "--config",
        config,
    ]));
    assert!(
        line.contains("changing a file's scheme is refused"),
        "{line}"
    );
    assert!(line.contains("/s/plr is plr"), "{line}");
    ok(ecstack(&[
        "cluster", "put", local, "/s/plr", "--config", config,
    ]));
    assert_eq!(stat_scheme("/s/plr"), "plr");
    ok(ecstack(&[
        "cluster",
        "put",
        local,
        "/s/plr",
        "--update-scheme",
        "plr",
        "--config",
        config,
    ]));

    // Each OSD's store usage from its heartbeats.
    let v: serde_json::Value = serde_json::from_str(&ok(ecstack(&[
        "cluster", "status", "--json", "--config", config,
    ])))
    .unwrap();
    for o in v["osds"].as_array().unwrap() {
        for key in ["reserve_bytes", "log_bytes", "merges"] {
            assert!(o[key].is_u64(), "{key} in {o}");
        }
    }
    let text = ok(ecstack(&["cluster", "status", "--config", config]));
    assert!(
        text.contains("reserve") && text.contains("merges"),
        "{text}"
    );
}

/// `cluster init --update-scheme` writes the cluster's default scheme into cluster.toml; a bad
/// name is refused, a bare `pl` with the codfs-pl hint.
#[test]
fn cluster_init_writes_the_update_scheme() {
    let dir = tempfile::tempdir().unwrap();
    let c = dir.path().join("c");
    let o = ecstack(&[
        "cluster",
        "init",
        c.to_str().unwrap(),
        "--osds",
        "1",
        "--update-scheme",
        "codfs-pl",
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["update_scheme"], "codfs-pl");
    let config = ecstack_rpc::ClusterConfig::load(&c.join("cluster.toml")).unwrap();
    assert_eq!(config.update.scheme, ecstack_rpc::UpdateScheme::ParityLog);
    assert_eq!(config.update.reserve, ecstack_rpc::ReserveConfig::default());
    for (bad, hint) in [
        ("pl", "codfs-pl"),
        ("raid5", "known: fo, fl, codfs-pl, plr"),
    ] {
        let d = dir.path().join(bad);
        let o = ecstack(&[
            "cluster",
            "init",
            d.to_str().unwrap(),
            "--update-scheme",
            bad,
        ]);
        assert!(!o.status.success());
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(e.contains(hint), "{e}");
        assert!(!d.join("cluster.toml").exists());
    }
}

/// An MDS on PostgreSQL (the testkit's throwaway server): a put and a get of a two-segment file
/// through OSDs and the client, the MDS restarted on the same database, the file read again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mds_on_postgresql_serves_puts_and_gets_across_a_restart() {
    let Some(pg) = ecstack_testkit::postgres::shared() else {
        return;
    };
    let url = pg.create_db("cluster");
    let mut rig = Rig::start(RigSpec {
        osds: 4,
        k: 2,
        m: 1,
        mds_store: Some(url.clone()),
        ..RigSpec::default()
    })
    .await;
    let log = std::fs::read_to_string(rig.cluster.log_dir().join("mds.log")).unwrap();
    assert!(log.contains(&format!("ecstack mds: store {url}")), "{log}");
    let data = random_bytes(&mut Rng::new(43), 1_500_000);
    let n = rig.client.put("/pg/a", &data[..]).await.unwrap();
    assert_eq!(n, data.len() as u64);
    let got = rig
        .client
        .read("/pg/a", 0, data.len() as u64)
        .await
        .unwrap();
    assert!(got == data, "the file read back differs");
    rig.cluster.kill_mds();
    rig.cluster.start_mds().unwrap();
    let got = rig
        .client
        .read("/pg/a", 0, data.len() as u64)
        .await
        .unwrap();
    assert!(
        got == data,
        "the file read back after the MDS restart differs"
    );
    let st = rig.client.status().await.unwrap();
    assert_eq!((st.files, st.bytes), (1, data.len() as u64));
}

/// `ecstack bench mds` (small): both stores run all four phases and the report says so.
#[test]
fn bench_mds_compares_sqlite_and_postgresql() {
    let Some(pg) = ecstack_testkit::postgres::shared() else {
        return;
    };
    let url = pg.create_db("bench");
    let out = ecstack(&[
        "bench",
        "mds",
        "--postgres",
        &url,
        "--files",
        "40",
        "--concurrency",
        "4",
        "--rounds",
        "2",
        "--insecure",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let ops = report["ops"].as_array().unwrap();
    let names: Vec<&str> = ops.iter().map(|o| o["op"].as_str().unwrap()).collect();
    assert_eq!(names, ["create", "stat", "rename", "unlink"]);
    for o in ops {
        for k in ["sqlite_ops_per_sec", "postgresql_ops_per_sec", "ratio"] {
            assert!(o[k].as_f64().unwrap() > 0.0, "{o}");
        }
        assert_eq!(o["round_ratios"].as_array().unwrap().len(), 2, "{o}");
    }
}
