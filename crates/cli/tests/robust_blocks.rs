//! Robust objects' blocks on real `ecstack osd` processes (the multi-process rig: an MDS and two
//! OSDs of the built binary, mutual TLS with the client certificate): put → get (exact bytes) →
//! delete through `OsdClient`, an unknown object, a byte flipped in a block file on disk reported
//! lost (the OSD's `/metrics`) and never served, and the blocks surviving an OSD's restart (the
//! block file replayed).

mod cluster_common;

use bytes::Bytes;
use cluster_common::*;
use ecstack_base::Rng;
use ecstack_osd::api::{BlockKey, OsdCallError, OsdClient, StreamPriority};
use ecstack_osd::chunk_store::{blocks_name, record_offset, BLOCK_HEAD_BYTES};
use ecstack_rpc::Security;

const OBJECT: u64 = 0x4400;
const LEN: u32 = 256 << 10;

fn blocks(n: u32) -> Vec<(BlockKey, Bytes)> {
    let mut rng = Rng::new(44);
    (0..n)
        .map(|id| {
            let mut b = vec![0u8; LEN as usize];
            rng.fill(&mut b);
            (BlockKey { id, version: 1 }, Bytes::from(b))
        })
        .collect()
}

/// The same keys in the same order, and the same bytes (without printing megabytes).
fn same(got: &[(BlockKey, Bytes)], want: &[(BlockKey, Bytes)], what: &str) {
    let keys = |v: &[(BlockKey, Bytes)]| v.iter().map(|(k, _)| *k).collect::<Vec<_>>();
    assert_eq!(keys(got), keys(want), "{what}: keys");
    assert!(
        got.iter().zip(want).all(|(g, w)| g.1 == w.1),
        "{what}: bytes differ"
    );
}

async fn get_all(c: &OsdClient) -> Result<Vec<(BlockKey, Bytes)>, OsdCallError> {
    let mut r = c.get_blocks(OBJECT, 0, StreamPriority::Normal).await?;
    let mut out = Vec::new();
    while let Some(b) = r.next().await? {
        out.push(b);
    }
    Ok(out)
}

/// OSD `i`'s typed client (its address from the MDS's status).
async fn osd_client(rig: &Rig, i: usize) -> OsdClient {
    let status = rig.client.status().await.unwrap();
    let name = format!("osd-{i}");
    let o = status.osds.iter().find(|o| o.name == name).unwrap();
    let security = Security::load(&rig.cluster.config().certs_dir(), "client").unwrap();
    OsdClient::connect(&o.addr, &security)
        .unwrap()
        .for_osd(o.osd_id)
}

/// The text of OSD `i`'s metrics endpoint.
fn scrape(rig: &Rig, i: usize) -> String {
    scrape_daemon(rig, &format!("osd-{i}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocks_on_real_osd_processes() {
    let mut rig = Rig::start(RigSpec {
        osds: 2,
        k: 1,
        m: 1,
        ..RigSpec::default()
    })
    .await;
    let c = osd_client(&rig, 0).await;
    let b = blocks(6);
    // Two streams: the block rotted below is in an earlier append than the last.
    let mut acked = 0;
    for part in [&b[..4], &b[4..]] {
        let mut w = c
            .put_blocks(OBJECT, LEN, StreamPriority::Normal, 0)
            .await
            .unwrap();
        for (k, d) in part {
            w.send(*k, d.clone()).await.unwrap();
        }
        w.close();
        while w.ack().await.unwrap().is_some() {
            acked += 1;
        }
    }
    assert_eq!(acked, 6);
    same(&get_all(&c).await.unwrap(), &b, "exact bytes, stored order");
    // The other OSD holds none of it: one line.
    let other = osd_client(&rig, 1).await;
    let e = get_all(&other).await.unwrap_err();
    assert!(matches!(e, OsdCallError::NotFound { .. }), "{e:?}");
    assert!(
        e.to_string().contains(&format!(
            "not found: object {OBJECT:#x}: no block of it is stored on osd"
        )),
        "{e}"
    );

    // Survives a restart: the block file is replayed.
    rig.cluster.kill_osd(0);
    rig.restart_and_wait(&[0]).await;
    let c = osd_client(&rig, 0).await;
    same(&get_all(&c).await.unwrap(), &b, "after a restart");

    // A byte flipped on disk (the OSD stopped meanwhile): the block is lost, never served.
    rig.cluster.stop_osd(0);
    let path = rig
        .cluster
        .osd_store(0)
        .join("chunks")
        .join(blocks_name(OBJECT));
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[(record_offset(LEN, 1) + BLOCK_HEAD_BYTES + 1000) as usize] ^= 0x10;
    std::fs::write(&path, &bytes).unwrap();
    rig.restart_and_wait(&[0]).await;
    let c = osd_client(&rig, 0).await;
    let got = get_all(&c).await.unwrap();
    let want: Vec<_> = b.iter().filter(|(k, _)| k.id != 1).cloned().collect();
    same(&got, &want, "the rotted block is not served");
    let m = scrape(&rig, 0);
    assert!(
        m.lines()
            .any(|l| l.starts_with("ecstack_osd_blocks_lost_total{") && l.ends_with(" 1")),
        "{m}"
    );
    assert!(m.contains("ecstack_osd_robust_blocks{"), "{m}");

    // Delete: the listed blocks, then the object.
    assert_eq!(c.delete_blocks(OBJECT, &[b[0].0]).await.unwrap(), 1);
    // Block 1 is still in the table (its head is good): lost when read, deleted with the rest.
    assert_eq!(c.delete_blocks(OBJECT, &[]).await.unwrap(), 5);
    let e = get_all(&c).await.unwrap_err();
    assert!(matches!(e, OsdCallError::NotFound { .. }), "{e:?}");
}
