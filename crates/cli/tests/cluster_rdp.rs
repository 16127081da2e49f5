//! RDP on a real cluster (processes on 127.0.0.1): `cluster init --code rdp` (and its bad input),
//! then puts, small updates whose diagonal-parity deltas land on other rows (in the middle of a
//! row, across rows, across chunks, across segments, at the file's end), reads against the byte
//! model, two OSDs killed (a data and a parity chunk's holders, then two data chunks' holders),
//! degraded reads and updates, recovery (OSDs declared out, then killed OSDs back for catch-up),
//! and reads that need the rebuilt chunks.

mod cluster_common;

use cluster_common::*;
use ecstack_base::Rng;
use ecstack_client::ReadPath;
use ecstack_lab::codfs_local::LocalCluster;

/// `ecstack cluster init DIR --code rdp -k K -m M` and any `extra` arguments.
fn init_rdp(dir: &std::path::Path, k: &str, m: &str, extra: &[&str]) -> std::process::Output {
    let dir = dir.to_str().unwrap();
    let mut args = vec!["cluster", "init", dir, "--code", "rdp", "-k", k, "-m", m];
    args.extend_from_slice(extra);
    ecstack(&args)
}

/// `cluster init --code rdp` makes a cluster whose config names RDP; RDP with m ≠ 2, or too many
/// chunks, is one clear error line, and no cluster is made.
#[test]
fn cluster_init_takes_rdp_and_refuses_bad_parameters() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("c");
    let o = init_rdp(&d, "4", "2", &["--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let json: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(json["code"]["family"], "rdp", "{json}");
    let toml = std::fs::read_to_string(d.join("cluster.toml")).unwrap();
    assert!(toml.contains("family = \"rdp\""), "{toml}");
    for (k, m, why) in [("4", "3", "rdp has m = 2"), ("300", "2", "k + m <= 256")] {
        let d = dir.path().join(format!("bad-{k}-{m}"));
        let o = init_rdp(&d, k, m, &[]);
        assert!(!o.status.success(), "rdp -k {k} -m {m} was accepted");
        let line = stderr_line(&o);
        assert!(
            line.contains(&format!("--code rdp -k {k} -m {m}")),
            "{line}"
        );
        assert!(line.contains(why), "{line}");
        assert!(
            !d.join("cluster.toml").exists(),
            "a refused init left a config"
        );
    }
}

/// The OSD process (`osd-N`) holding chunk `index` of segment `seg` of `path`.
async fn holder(rig: &Rig, path: &str, seg: usize, index: u32) -> usize {
    let info = rig.client.stat(path).await.unwrap();
    let chunk = info.segments[seg].chunks.iter().find(|c| c.index == index);
    osd_index(&rig.client.status().await.unwrap(), chunk.unwrap().osd_id)
}

/// The whole file and a few small ranges read back as the model says.
async fn check(rig: &Rig, path: &str, model: &FileModel, rng: &mut Rng, ctx: &str) {
    let len = model.cur.len() as u64;
    let got = rig
        .client
        .read(path, 0, len)
        .await
        .unwrap_or_else(|e| panic!("{ctx}: read: {e}\n{}", rig.logs()));
    assert_eq!(model.check(0, &got), None, "{ctx}: whole file");
    for _ in 0..6 {
        let off = rng.below(len);
        let n = 1 + rng.below((len - off).min(70_000));
        let got = rig.client.read(path, off, n).await.unwrap();
        assert_eq!(model.check(off as usize, &got), None, "{ctx}: {off}+{n}");
    }
}

async fn update(rig: &Rig, path: &str, model: &mut FileModel, rng: &mut Rng, off: u64, n: u64) {
    let new = random_bytes(rng, n as usize);
    rig.client
        .update(path, off, &new)
        .await
        .unwrap_or_else(|e| panic!("update {off}+{n}: {e}\n{}", rig.logs()));
    model.updated(off as usize, &new);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rdp_put_update_degraded_recover() {
    // k = 4, m = 2: p = 5, chunks of 4 rows. Eight OSDs: two spare to recover onto.
    let mut rig = Rig::start(RigSpec {
        family: "rdp".into(),
        k: 4,
        m: 2,
        ..RigSpec::default()
    })
    .await;
    let seg = rig.segment_bytes;
    let cb = seg / 4;
    let row = cb / 4;
    let mut rng = Rng::new(41);
    // The last segment (12,345 bytes) has chunks of ⌈12345 / 4⌉ = 3,087 rounded up to 3,088.
    let path = "/rdp";
    let data = random_bytes(&mut rng, 2 * seg as usize + 12_345);
    let len = data.len() as u64;
    rig.client.put(path, &data[..]).await.unwrap();
    let mut model = FileModel::new(data);
    check(&rig, path, &model, &mut rng, "after the put").await;
    // Small updates: mid-row, across rows, across chunks, across segments, the file's last bytes,
    // inside the short last segment's rows.
    let last = 2 * seg;
    for (off, n) in [
        (row / 2, 10),
        (2 * row - 3, 7),
        (cb - 5, 10),
        (seg - 4, 9),
        (last + 3087 - 2, 5),
        (len - 3, 3),
    ] {
        update(&rig, path, &mut model, &mut rng, off, n).await;
    }
    check(&rig, path, &model, &mut rng, "after the updates").await;
    let direct = rig.client_with(ReadPath::Direct);
    let got = direct.read(path, 0, len).await.unwrap();
    assert_eq!(model.check(0, &got), None, "a direct read");

    // A data chunk's holder dies: an update of its range is finished by the primary (decoded old
    // bytes, ranged deltas); then a parity chunk's holder dies too: reads decode with two chunks
    // of segment 0 lost (whole chunks). (An update needs k + 1 usable chunks: none with two lost.)
    let (a, b) = (
        holder(&rig, path, 0, 1).await,
        holder(&rig, path, 0, 5).await,
    );
    assert_ne!(a, b);
    rig.cluster.kill_osd(a);
    rig.wait_down(&LocalCluster::osd_name(a)).await;
    check(&rig, path, &model, &mut rng, "data down").await;
    update(&rig, path, &mut model, &mut rng, cb + row - 4, 8).await;
    check(&rig, path, &model, &mut rng, "updated, data down").await;
    rig.cluster.kill_osd(b);
    rig.wait_down(&LocalCluster::osd_name(b)).await;
    check(&rig, path, &model, &mut rng, "data + parity down").await;
    // Recovery: both declared out, their chunks rebuilt on the two spare OSDs.
    for o in [a, b] {
        rig.admin()
            .osd_out(&LocalCluster::osd_name(o))
            .await
            .unwrap_or_else(|e| panic!("osd out: {e}\n{}", rig.logs()));
    }
    rig.wait_healthy().await;
    check(&rig, path, &model, &mut rng, "recovered").await;

    // Two data chunks' holders die (chunk 0's is the primary: another takes over), the first
    // one before an update of both their ranges. Segment 0 then decodes from chunks 1 and 5,
    // both rebuilt above.
    let (c, d) = (
        holder(&rig, path, 0, 0).await,
        holder(&rig, path, 0, 2).await,
    );
    assert!(![a, b].contains(&c) && ![a, b].contains(&d) && c != d);
    rig.cluster.kill_osd(c);
    rig.wait_down(&LocalCluster::osd_name(c)).await;
    update(&rig, path, &mut model, &mut rng, 2 * row + 1, 30).await;
    update(&rig, path, &mut model, &mut rng, 2 * cb + 7, 4).await;
    check(&rig, path, &model, &mut rng, "updated, chunk 0 down").await;
    rig.cluster.kill_osd(d);
    rig.wait_down(&LocalCluster::osd_name(d)).await;
    check(&rig, path, &model, &mut rng, "two data down").await;
    // Back: their chunks are caught up (rebuilt with the updates they missed).
    rig.cluster.start_osd(c).unwrap();
    rig.cluster.start_osd(d).unwrap();
    rig.wait_healthy().await;
    check(&rig, path, &model, &mut rng, "caught up").await;
    // Reads that need the caught-up chunks: chunks 1 and 3's holders die.
    let (e, f) = (
        holder(&rig, path, 0, 1).await,
        holder(&rig, path, 0, 3).await,
    );
    rig.cluster.kill_osd(e);
    rig.cluster.kill_osd(f);
    rig.wait_down(&LocalCluster::osd_name(e)).await;
    rig.wait_down(&LocalCluster::osd_name(f)).await;
    check(&rig, path, &model, &mut rng, "from the caught-up chunks").await;
}
