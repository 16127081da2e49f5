//! RobuSTore on a real cluster (an MDS and OSD processes on 127.0.0.1): robust files put (write
//! until N), read all-then-cancel and updated with both codes, against a byte model; OSDs killed
//! before a read and during a write; bad input refused with one line; and seeded fault runs that
//! mix robust and RS files with OSD kills and restarts (`ECSTACK_SEED=<n>` replays one,
//! `ECSTACK_CLUSTER_SEEDS=<count>` sweeps more: docs/robustore.md "On the cluster").

mod cluster_common;

use cluster_common::*;
use ecstack_base::Rng;
use ecstack_client::robust::RobustOptions;
use ecstack_client::Bytes;
use ecstack_client::Client;
use ecstack_mds_proto::{OsdState, RobustCode};

fn opts(code: RobustCode, redundancy: f64) -> RobustOptions {
    RobustOptions {
        code,
        block_bytes: 64 << 10,
        redundancy: Some(redundancy),
        object_blocks: Some(24),
        ..RobustOptions::default()
    }
}

async fn read_all(client: &Client, path: &str) -> Vec<u8> {
    let mut out = Vec::new();
    client.get(path, 0, None, &mut out).await.unwrap();
    out
}

/// Both codes: put → get exact (two objects, the last one short), the read report's counts,
/// updates inside one object and across two (only LT's changed blocks rewritten), and a file
/// replaced by a put of another mode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn robust_files_put_get_and_update_with_both_codes() {
    let rig = Rig::start(RigSpec {
        osds: 6,
        ..RigSpec::default()
    })
    .await;
    let mut rng = Rng::new(44);
    for code in [RobustCode::RaptorQ, RobustCode::Lt] {
        let path = format!("/robust/{code}");
        let data = random_bytes(&mut rng, (24 + 7) * (64 << 10) + 1234);
        let mut model = FileModel::new(data.clone());
        let report = rig
            .client
            .put_robust(&path, Bytes::from(data.clone()), &opts(code, 1.0))
            .await
            .unwrap_or_else(|e| panic!("{e}\n{}", rig.logs()));
        assert_eq!(report.objects, 2);
        assert!(report.blocks >= 2 * (24 + 8), "{report:?}");
        assert_eq!(read_all(&rig.client, &path).await, data);

        let info = rig.client.stat(&path).await.unwrap();
        let (bytes, got) = rig
            .client
            .get_robust(&info, Default::default())
            .await
            .unwrap();
        assert_eq!(&bytes[..], &data[..]);
        assert_eq!(got.k, 24 + 8);
        assert!(got.used >= got.k && got.received >= got.used, "{got:?}");
        assert_eq!(got.stale, 0);

        // Inside object 0, then across the objects' boundary, then the file's last byte.
        for (offset, len) in [
            (1000u64, 5000usize),
            ((24 << 16) - 100, 300),
            (data.len() as u64 - 1, 1),
        ] {
            let new = random_bytes(&mut rng, len);
            rig.client.update(&path, offset, &new).await.unwrap();
            model.updated(offset as usize, &new);
            let got = read_all(&rig.client, &path).await;
            assert_eq!(
                model.check(0, &got),
                None,
                "{code} after an update at {offset}"
            );
        }
        let info = rig.client.stat(&path).await.unwrap();
        let r = info.robust.unwrap();
        assert_eq!(r.objects[0].version, 3, "two updates touched object 0");
        assert_eq!(r.objects[1].version, 3, "two updates touched object 1");
    }
    // A robust file replaced by a file of segments, and back.
    let seg = random_bytes(&mut rng, 300_000);
    rig.client
        .put_bytes("/robust/lt", Bytes::from(seg.clone()))
        .await
        .unwrap();
    assert_eq!(read_all(&rig.client, "/robust/lt").await, seg);
    assert!(rig
        .client
        .stat("/robust/lt")
        .await
        .unwrap()
        .robust
        .is_none());
    rig.client
        .put_robust(
            "/robust/lt",
            Bytes::from(seg.clone()),
            &opts(RobustCode::Lt, 1.0),
        )
        .await
        .unwrap();
    assert_eq!(read_all(&rig.client, "/robust/lt").await, seg);
}

/// Reads decode while enough blocks remain with OSDs killed; a write with an OSD killed midway
/// still leaves a file that decodes; the MDS counts objects below N once an OSD is out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_and_writes_survive_killed_osds() {
    let mut rig = Rig::start(RigSpec {
        osds: 6,
        ..RigSpec::default()
    })
    .await;
    let mut rng = Rng::new(45);
    let data = random_bytes(&mut rng, 40 * (64 << 10));
    let path = "/robust/killed";
    rig.client
        .put_robust(
            path,
            Bytes::from(data.clone()),
            &opts(RobustCode::RaptorQ, 1.5),
        )
        .await
        .unwrap();
    // OSDs gone that hold blocks, K of every object still on the others: two if any two can go
    // (write until N spreads blocks unevenly: fast OSDs hold more), else one.
    let st = rig.client.status().await.unwrap();
    let objects = rig.client.stat(path).await.unwrap().robust.unwrap().objects;
    let ids: Vec<u32> = st.osds.iter().map(|o| o.osd_id).collect();
    let holds = |id: u32| {
        objects
            .iter()
            .any(|o| o.blocks.iter().any(|b| b.osd_id == id))
    };
    let readable = |gone: &[u32]| {
        objects.iter().all(|o| {
            o.blocks
                .iter()
                .filter(|b| !gone.contains(&b.osd_id))
                .count()
                >= o.k as usize
        })
    };
    let mut sets: Vec<Vec<u32>> = Vec::new();
    for (x, &a) in ids.iter().enumerate() {
        for &b in &ids[x + 1..] {
            sets.push(vec![a, b]);
        }
    }
    sets.extend(ids.iter().map(|&a| vec![a]));
    let victims = sets
        .into_iter()
        .find(|v| v.iter().all(|&id| holds(id)) && readable(v))
        .expect("some OSD holding blocks can go with every object still readable (D = 1.5)");
    let down: Vec<usize> = victims.iter().map(|&id| osd_index(&st, id)).collect();
    for &i in &down {
        rig.cluster.kill_osd(i);
    }
    assert_eq!(read_all(&rig.client, path).await, data);
    rig.wait_down(&ecstack_lab::codfs_local::LocalCluster::osd_name(down[0]))
        .await;
    assert_eq!(read_all(&rig.client, path).await, data);

    // A write on all six, one of them killed while blocks flow: the put completes on the others
    // and reads back exactly.
    rig.restart_and_wait(&down).await;
    let big = random_bytes(&mut rng, 64 * (64 << 10));
    let writer = {
        let c = rig.client.clone();
        let big = big.clone();
        tokio::spawn(async move {
            c.put_robust(
                "/robust/midway",
                Bytes::from(big),
                &RobustOptions {
                    disks: Some(6),
                    object_blocks: Some(64),
                    ..opts(RobustCode::Lt, 1.0)
                },
            )
            .await
        })
    };
    tokio::time::sleep(std::time::Duration::from_millis(30)).await;
    rig.cluster.kill_osd(3);
    let report = writer
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("{e}\n{}", rig.logs()));
    assert!(report.blocks >= 64, "{report:?}");
    // Blocks acknowledged by osd-3 before it died are in the map; the others decode the object
    // when their ids decode (a fast OSD may have taken many blocks; LT at K = 64 needs well over
    // K), else the read says it did not decode.
    let r = rig
        .client
        .stat("/robust/midway")
        .await
        .unwrap()
        .robust
        .unwrap();
    let o = &r.objects[0];
    let code = ecstack_client::robust::object_code(&r.params, o).unwrap();
    let st = rig.client.status().await.unwrap();
    let left: Vec<u32> = o
        .blocks
        .iter()
        .filter(|b| osd_index(&st, b.osd_id) != 3)
        .map(|b| b.key.id)
        .collect();
    let mut out = Vec::new();
    match rig.client.get("/robust/midway", 0, None, &mut out).await {
        Ok(_) => assert_eq!(out, big),
        Err(e) => {
            assert!(!code.decodable(&left), "{e}: the blocks left decode");
            assert!(e.to_string().contains("did not decode"), "{e}");
        }
    }

    // Out: the object keeps fewer than N blocks on OSDs not out.
    rig.admin().osd_out("osd-3").await.unwrap();
    let st = rig.client.status().await.unwrap();
    assert!(st.osds.iter().any(|o| o.state == OsdState::Out));
    assert_eq!(st.robust_files, 2);
    // Each object counts when the blocks it keeps on OSDs not out are fewer than its N.
    let mut below = 0;
    for path in ["/robust/killed", "/robust/midway"] {
        let info = rig.client.stat(path).await.unwrap();
        for o in &info.robust.unwrap().objects {
            let kept = o.blocks.iter().filter(|b| b.osd_id != 3).count();
            below += u64::from(kept < o.n as usize);
        }
    }
    assert_eq!(st.robust_objects_below_n, below, "{st:?}");
}

/// D ≤ 0, a RaptorQ block size not a multiple of 32, more disks than OSDs up, an update past the
/// end: one line each, nothing stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_robust_input_is_one_line() {
    let rig = Rig::start(RigSpec {
        osds: 4,
        ..RigSpec::default()
    })
    .await;
    let data = Bytes::from(vec![7u8; 100_000]);
    let e = rig
        .client
        .put_robust("/bad", data.clone(), &opts(RobustCode::Lt, 0.0))
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("redundancy D = 0 is refused"), "{e}");
    let e = rig
        .client
        .put_robust(
            "/bad",
            data.clone(),
            &RobustOptions {
                block_bytes: 1000,
                ..opts(RobustCode::RaptorQ, 1.0)
            },
        )
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("multiple of 32"), "{e}");
    let e = rig
        .client
        .put_robust(
            "/bad",
            data.clone(),
            &RobustOptions {
                disks: Some(5),
                ..opts(RobustCode::RaptorQ, 1.0)
            },
        )
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("on 5 disks needs 5 OSDs up"), "{e}");
    assert!(
        rig.client.stat("/bad").await.is_err(),
        "nothing was committed"
    );
    rig.client
        .put_robust("/ok", data.clone(), &opts(RobustCode::RaptorQ, 1.0))
        .await
        .unwrap();
    let e = rig
        .client
        .update("/ok", 99_999, b"xy")
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("outside the file"), "{e}");
    for e in [&e] {
        assert_eq!(e.lines().count(), 1, "{e}");
    }

    // The CLI: a bad code name and D are one line too.
    let config = rig.cluster.config_path();
    let local = rig.dir.path().join("in.bin");
    std::fs::write(&local, &data).unwrap();
    for (extra, want) in [
        (vec!["--code", "fountain"], "unknown robust code"),
        (vec!["--redundancy=-1"], "redundancy D = -1 is refused"),
    ] {
        let mut args = vec![
            "cluster",
            "put",
            local.to_str().unwrap(),
            "/cli",
            "--mode",
            "robust",
            "--config",
            config.to_str().unwrap(),
        ];
        args.extend(extra);
        let o = ecstack(&args);
        assert!(!o.status.success());
        let line = stderr_line(&o);
        assert!(line.contains(want), "{line}");
    }
}

/// Seeded fault runs: robust files (both codes) and RS files beside them, puts, updates and
/// reads while OSDs are killed and restarted (at most two down at once); every read returns
/// exactly the model's bytes or fails with an error, never wrong data.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seeded_fault_runs_mix_robust_and_rs_files() {
    for seed in seeds(2) {
        fault_run(seed).await;
    }
}

async fn fault_run(seed: u64) {
    let mut rig = Rig::start(RigSpec {
        osds: 7,
        ..RigSpec::default()
    })
    .await;
    let mut rng = Rng::new(seed);
    let mut files: Vec<(String, FileModel, bool)> = Vec::new();
    let mut down: Vec<usize> = Vec::new();
    for step in 0..14 {
        match rng.next_u64() % 5 {
            0 | 1 => {
                let robust = files.len() % 3 != 2;
                let path = format!("/f{step}");
                let len = 20_000 + (rng.next_u64() % 600_000) as usize;
                let data = random_bytes(&mut rng, len);
                let r = if robust {
                    let code = if rng.next_u64() % 2 == 0 {
                        RobustCode::Lt
                    } else {
                        RobustCode::RaptorQ
                    };
                    let up = 7 - down.len();
                    rig.client
                        .put_robust(
                            &path,
                            Bytes::from(data.clone()),
                            &RobustOptions {
                                disks: Some(up.min(5)),
                                ..opts(code, 1.5)
                            },
                        )
                        .await
                        .map(drop)
                } else {
                    rig.client
                        .put_bytes(&path, Bytes::from(data.clone()))
                        .await
                        .map(drop)
                };
                if r.is_ok() {
                    files.push((path, FileModel::new(data), robust));
                }
            }
            2 if !files.is_empty() => {
                let i = (rng.next_u64() % files.len() as u64) as usize;
                let (path, model, _) = &mut files[i];
                let len = model.cur.len();
                let at = (rng.next_u64() % len as u64) as usize;
                let n = (len - at).min(1 + (rng.next_u64() % 70_000) as usize);
                let new = random_bytes(&mut rng, n);
                match rig.client.update(path, at as u64, &new).await {
                    Ok(()) => model.updated(at, &new),
                    Err(_) => model.maybe_updated(at, &new),
                }
            }
            3 if down.len() < 2 => {
                let i = (rng.next_u64() % 7) as usize;
                if !down.contains(&i) {
                    rig.cluster.kill_osd(i);
                    down.push(i);
                }
            }
            _ if !down.is_empty() => {
                let back = std::mem::take(&mut down);
                rig.restart_and_wait(&back).await;
            }
            _ => {}
        }
        for (path, model, robust) in &files {
            let mut out = Vec::new();
            if rig.client.get(path, 0, None, &mut out).await.is_ok() {
                assert_eq!(out.len(), model.cur.len(), "seed {seed}: {path} length");
                if let Some(at) = model.check(0, &out) {
                    panic!(
                        "seed {seed}: {path} ({}) reads wrong at byte {at} after step {step}\n{}",
                        if *robust { "robust" } else { "RS" },
                        rig.logs()
                    );
                }
            }
        }
    }
}

/// `experiment robustore-cluster --quick` end to end: every mode read back exactly (the run checks
/// each read), the report with its targets and the simulator beside each figure, and a
/// `testbed.json` the simulator takes (`sim robustore --disk-mbps @testbed.json`).
#[test]
fn the_cluster_experiment_runs_quick_and_its_testbed_feeds_the_simulator() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("exp");
    let o = ecstack(&[
        "experiment",
        "robustore-cluster",
        "--quick",
        "-o",
        out.to_str().unwrap(),
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let files: Vec<String> = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(files.len(), 4, "{files:?}");
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    for want in [
        "| rs-primary |",
        "| rs-direct |",
        "| robust-lt |",
        "| robust-raptorq |",
        "RaptorQ reception overhead",
        "within 25 %",
    ] {
        assert!(report.contains(want), "{want} missing:\n{report}");
    }
    let csv = std::fs::read_to_string(out.join("results.csv")).unwrap();
    assert_eq!(csv.lines().count(), 5, "{csv}");
    let testbed = format!("@{}", out.join("testbed.json").display());
    let o = ecstack(&[
        "sim",
        "robustore",
        "--disk-mbps",
        &testbed,
        "--disks",
        "8",
        "--accesses",
        "2",
        "--size",
        "8M",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// Admission control from the client's side: an OSD on a slow store (2 MB/s: each stream needs more
/// than its whole throughput at the 4 MiB/s floor) serving one block stream refuses the next, and a
/// robust put whose first-choice OSD refuses moves that stream to its spare; the file reads back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_stream_moves_to_a_spare_osd() {
    let imgs = tempfile::tempdir().unwrap();
    let rig = Rig::start(RigSpec {
        osds: 3,
        store_device: Some(format!(
            "throttled:bw=2M:file:{}/osd-{{osd}}.img?size=256M",
            imgs.path().display()
        )),
        ..RigSpec::default()
    })
    .await;
    let st = rig.client.status().await.unwrap();
    let mut ids: Vec<u32> = st.osds.iter().map(|o| o.osd_id).collect();
    ids.sort_unstable();
    let mut rng = Rng::new(46);
    let hold = random_bytes(&mut rng, 16 * (256 << 10));
    rig.client
        .put_robust(
            "/hold",
            Bytes::from(hold),
            &RobustOptions {
                osds: Some(vec![ids[0]]),
                redundancy: Some(0.2),
                object_blocks: Some(16),
                block_bytes: 256 << 10,
                ..RobustOptions::default()
            },
        )
        .await
        .unwrap();
    let info = rig.client.stat("/hold").await.unwrap();
    let o = &info.robust.as_ref().unwrap().objects[0];
    let addr = &o.blocks[0].addr;
    let security =
        ecstack_rpc::Security::load(&rig.cluster.config().certs_dir(), "client").unwrap();
    let osd = ecstack_osd_proto::OsdClient::connect(addr, &security)
        .unwrap()
        .for_osd(ids[0]);
    // Reading 4.8 MiB at 2 MB/s: the stream stays admitted for seconds.
    let reader = osd
        .get_blocks(o.object_id, o.version, Default::default())
        .await
        .unwrap();
    let data = random_bytes(&mut rng, 200_000);
    let report = rig
        .client
        .put_robust(
            "/moved",
            Bytes::from(data.clone()),
            &RobustOptions {
                osds: Some(vec![ids[0], ids[1], ids[2]]),
                disks: Some(2),
                ..opts(RobustCode::RaptorQ, 1.0)
            },
        )
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", rig.logs()));
    drop(reader);
    assert!(report.refused >= 1, "{report:?}");
    assert!(!report.per_osd.contains_key(&ids[0]), "{report:?}");
    assert!(report.per_osd.contains_key(&ids[2]), "{report:?}");
    assert_eq!(read_all(&rig.client, "/moved").await, data);
}
