//! The OSD service end to end inside one process: n OSD servers on 127.0.0.1 (each its own chunk
//! store and gRPC server), a client talking to the primary, every read checked against a model of
//! the segment's bytes. Unreachable holders are holders whose address no longer answers.
//! (Multi-process clusters with an MDS are the client crate's and the CLI's tests.)

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use ecstack_base::Rng;
use ecstack_codes::{new_code, CodeKind};
use ecstack_osd::chunk_store::{ChunkStore, FileStore};
use ecstack_osd::service::{MdsLink, Osd, OsdSetup};
use ecstack_osd::{Holder, Layout, OsdCallError, OsdClient, SegmentAge};
use ecstack_rpc::Security;

type Calls = Arc<Mutex<Vec<String>>>;

/// The layout epoch the recorder answers a rebuild with (the tests' layouts start at 1 or 2): a
/// primary refuses the layouts from before a rebuild it reported.
const REBUILT_EPOCH: u64 = 10;

/// Records what the OSDs tell the MDS.
struct Recorder(Calls);

impl MdsLink for Recorder {
    fn mark_stale<'a>(
        &'a self,
        segment: u64,
        chunks: &'a [u32],
        version: u64,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), String>> + Send + 'a>> {
        let line = format!("stale {segment} {chunks:?} v{version}");
        Box::pin(async move {
            self.0.lock().unwrap().push(line);
            Ok(())
        })
    }
    fn chunk_recovered(
        &self,
        segment: u64,
        chunk: u32,
        osd_id: u32,
        version: u64,
        _reporter: Option<u32>,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<u64, String>> + Send + '_>> {
        let line = format!("recovered {segment} {chunk} osd{osd_id} v{version}");
        Box::pin(async move {
            self.0.lock().unwrap().push(line);
            Ok(REBUILT_EPOCH)
        })
    }
    /// REBUILT_EPOCH once a rebuild of the segment is among the calls not yet taken, else 0.
    fn segment_epoch(
        &self,
        segment: u64,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<u64, String>> + Send + '_>> {
        let rebuilt = format!("recovered {segment} ");
        Box::pin(async move {
            let calls = self.0.lock().unwrap();
            Ok(if calls.iter().any(|c| c.starts_with(&rebuilt)) {
                REBUILT_EPOCH
            } else {
                0
            })
        })
    }
}

struct Node {
    osd: Osd,
    store: Arc<FileStore>,
    addr: String,
}

struct Cluster {
    nodes: Vec<Node>,
    calls: Calls,
    _dirs: Vec<tempfile::TempDir>,
}

/// An address nothing listens on.
async fn dead_addr() -> String {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let a = l.local_addr().unwrap().to_string();
    drop(l);
    a
}

async fn cluster(kind: CodeKind, k: usize, m: usize) -> Cluster {
    let calls: Calls = Arc::default();
    let mut nodes = Vec::new();
    let mut dirs = Vec::new();
    for id in 0..(k + m) as u32 {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(FileStore::open(dir.path()).unwrap());
        let osd = Osd::new(
            OsdSetup {
                osd_id: id,
                code: new_code(kind, k, m).unwrap().into(),
                store: store.clone(),
                security: Security::Insecure,
                mds: Arc::new(Recorder(calls.clone())),
            },
            0,
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let svc = osd.grpc();
        tokio::spawn(async move {
            tonic::transport::Server::builder()
                .add_service(svc)
                .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener))
                .await
                .unwrap();
        });
        nodes.push(Node { osd, store, addr });
        dirs.push(dir);
    }
    Cluster {
        nodes,
        calls,
        _dirs: dirs,
    }
}

impl Cluster {
    fn layout(&self, segment_id: u64, length: u64) -> Layout {
        Layout {
            scheme: Default::default(),
            segment_id,
            length,
            primary: 0,
            holders: self
                .nodes
                .iter()
                .enumerate()
                .map(|(i, n)| Holder {
                    index: i as u32,
                    osd_id: i as u32,
                    addr: n.addr.clone(),
                    usable: true,
                    down: false,
                })
                .collect(),
            epoch: 1,
            version: 0,
        }
    }

    fn client(&self) -> OsdClient {
        OsdClient::connect(&self.nodes[0].addr, &Security::Insecure).unwrap()
    }

    fn calls(&self) -> Vec<String> {
        std::mem::take(&mut *self.calls.lock().unwrap())
    }
}

fn bytes(rng: &mut Rng, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len];
    rng.fill(&mut b);
    b
}

async fn check_reads(c: &OsdClient, l: &Layout, model: &[u8], rng: &mut Rng, n: usize) {
    assert_eq!(c.read_segment(l, 0, l.length).await.unwrap(), model);
    for _ in 0..n {
        let off = rng.below(l.length);
        let len = 1 + rng.below(l.length - off);
        let got = c.read_segment(l, off, len).await.unwrap();
        assert_eq!(
            got,
            model[off as usize..(off + len) as usize],
            "read {off}+{len}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_read_update_against_a_model() {
    for (kind, k, m) in [(CodeKind::RsVandermonde, 4, 2), (CodeKind::Xor, 2, 1)] {
        let c = cluster(kind, k, m).await;
        let client = c.client();
        let mut rng = Rng::new(k as u64);
        // Lengths that are not multiples of k or of the block size; one above a frame.
        for (seg, len) in [(1u64, 100_003usize), (2, 1), (3, (1 << 20) + 5)] {
            let l = c.layout(seg, len as u64);
            let mut model = bytes(&mut rng, len);
            let ack = client.write_segment(&l, &model).await.unwrap();
            assert_eq!((ack.version, ack.stale.clone()), (1, vec![]));
            for node in &c.nodes {
                assert_eq!(
                    node.store.usage().chunks as u64,
                    seg.min(3),
                    "one chunk per OSD"
                );
            }
            check_reads(&client, &l, &model, &mut rng, 10).await;
            for v in 2..8 {
                let off = rng.below(len as u64);
                let ulen = 1 + rng.below((len as u64 - off).min(70_000));
                let new = bytes(&mut rng, ulen as usize);
                let ack = client.update_segment(&l, off, &new).await.unwrap();
                assert_eq!(ack.version, v);
                model[off as usize..(off + ulen) as usize].copy_from_slice(&new);
                check_reads(&client, &l, &model, &mut rng, 3).await;
            }
            // Every parity chunk still matches the data: a read with all data holders but one gone
            // decodes from parity.
            let mut degraded = l.clone();
            for h in degraded.holders.iter_mut().skip(1).take(m.min(k - 1)) {
                h.usable = false;
            }
            check_reads(&client, &degraded, &model, &mut rng, 5).await;
        }
        assert!(c.calls().is_empty());
    }
}

/// The primary forwards data chunks while the segment arrives (cut-through). A write abandoned
/// part way (the client stops sending and goes away), or one that sends too many bytes, must
/// leave no chunk on any holder, even a chunk whose bytes all reached the primary: the primary
/// holds back each forwarded chunk's last frame until the whole segment is in and encoded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandoned_write_leaves_no_chunk_anywhere() {
    use tokio_stream::StreamExt;
    let c = cluster(CodeKind::RsVandermonde, 4, 2).await;
    let client = c.client();
    let mut rng = Rng::new(77);
    // Chunks of 2 MiB + 3 bytes (not a multiple of a frame); odd client frame sizes.
    let cb = (2 << 20) + 3;
    let len = 4 * cb;
    let l = c.layout(9, len as u64);
    let model = bytes(&mut rng, len);
    let frames = |upto: usize| -> Vec<Bytes> {
        model[..upto]
            .chunks(300_001)
            .map(Bytes::copy_from_slice)
            .collect()
    };
    // Chunks 0 and 1 whole and a little of chunk 2, then silence; the client gives up.
    let stalled = tokio_stream::iter(frames(2 * cb + 10)).chain(tokio_stream::pending());
    let (c2, l2) = (client.clone(), l.clone());
    let call = tokio::spawn(async move { c2.write_segment_frames(&l2, stalled).await });
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    call.abort();
    let _ = call.await;
    // Too many bytes.
    let mut long = frames(len);
    long.push(Bytes::from_static(&[1]));
    let e = client
        .write_segment_frames(&l, tokio_stream::iter(long))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("more than its"), "{e}");
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    for (i, node) in c.nodes.iter().enumerate() {
        assert_eq!(node.store.usage().chunks, 0, "osd {i} stored a chunk");
    }
    // The segment is still writable, and reads back whole, from any 4 chunks.
    let ack = client
        .write_segment_frames(&l, tokio_stream::iter(frames(len)))
        .await
        .unwrap();
    assert!(ack.stale.is_empty());
    check_reads(&client, &l, &model, &mut rng, 5).await;
    let mut degraded = l.clone();
    for h in degraded.holders.iter_mut().take(3).skip(1) {
        h.usable = false;
    }
    check_reads(&client, &degraded, &model, &mut rng, 3).await;
}

/// A client may send a segment in frames of any size: 4 KiB frames (a thousand per chunk) are
/// forwarded by the primary as they come, none lost or reordered, and the segment reads back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_in_many_small_frames_reads_back() {
    let c = cluster(CodeKind::RsVandermonde, 4, 2).await;
    let client = c.client();
    let mut rng = Rng::new(78);
    let len = (3 << 20) * 4 + 12_345;
    let l = c.layout(10, len as u64);
    let model = bytes(&mut rng, len);
    let frames: Vec<Bytes> = model.chunks(4093).map(Bytes::copy_from_slice).collect();
    let ack = client
        .write_segment_frames(&l, tokio_stream::iter(frames))
        .await
        .unwrap();
    assert!(ack.stale.is_empty());
    check_reads(&client, &l, &model, &mut rng, 5).await;
    assert_eq!(client.read_segment(&l, 0, len as u64).await.unwrap(), model);
}

/// Serves a second OSD over node `i`'s chunk store, as if it restarted (nothing in memory); its
/// address.
async fn restarted(c: &Cluster, i: usize, kind: CodeKind, k: usize, m: usize) -> String {
    let osd = Osd::new(
        OsdSetup {
            osd_id: i as u32,
            code: new_code(kind, k, m).unwrap().into(),
            store: c.nodes[i].store.clone(),
            security: Security::Insecure,
            mds: Arc::new(Recorder(c.calls.clone())),
        },
        0,
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let svc = osd.grpc();
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(svc)
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener))
            .await
            .unwrap();
    });
    addr
}

/// A segment the MDS has just allocated has no versions to learn: its first write (the client
/// says `SegmentAge::New`) sends no ChunkVersion to any holder before the bytes move. Any other
/// write of a segment whose view the primary does not know asks the n − 1 other holders, and so
/// does a write said to be new that reaches a restarted primary holding a chunk of the segment:
/// only the holders can tell an existing segment's versions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_segments_write_asks_no_holder_for_versions() {
    let (kind, k, m) = (CodeKind::RsVandermonde, 4, 2);
    let c = cluster(kind, k, m).await;
    let client = c.client();
    let mut rng = Rng::new(31);
    let asked = |c: &Cluster| -> u64 {
        c.nodes[1..]
            .iter()
            .map(|n| n.osd.metrics().served("chunk_version"))
            .sum()
    };
    let len = 200_001usize;
    let model = bytes(&mut rng, len);
    let l = c.layout(40, len as u64);
    let ack = client
        .write_segment_bytes_with(&l, Bytes::from(model.clone()), SegmentAge::New, |_| {})
        .await
        .unwrap();
    assert_eq!((ack.version, ack.stale.clone()), (1, vec![]));
    assert_eq!(
        asked(&c),
        0,
        "the write of a new segment asked for versions"
    );
    let skipped = &c.nodes[0].osd.metrics().new_segment_writes;
    assert_eq!(skipped.get(), 1);
    check_reads(&client, &l, &model, &mut rng, 3).await;
    assert_eq!(asked(&c), 0, "the primary knows the view it wrote");

    // The same write not said to be new: the 5 other holders are asked first.
    let l2 = c.layout(41, len as u64);
    assert_eq!(client.write_segment(&l2, &model).await.unwrap().version, 1);
    assert_eq!(asked(&c), 5);
    assert_eq!(skipped.get(), 1);

    // A restarted primary (nothing in memory) gets a write of segment 40 said to be new: it holds
    // chunk 0, so it asks the holders and issues version 2, not 1 again.
    let primary =
        OsdClient::connect(&restarted(&c, 0, kind, k, m).await, &Security::Insecure).unwrap();
    let new = bytes(&mut rng, len);
    let ack = primary
        .write_segment_bytes_with(&l, Bytes::from(new.clone()), SegmentAge::New, |_| {})
        .await
        .unwrap();
    assert_eq!((ack.version, ack.stale), (2, vec![]));
    assert_eq!(asked(&c), 10);
    check_reads(&primary, &l, &new, &mut rng, 3).await;
    assert!(c.calls().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn degraded_reads_and_updates_with_holders_down() {
    let c = cluster(CodeKind::RsVandermonde, 4, 2).await;
    let client = c.client();
    let mut rng = Rng::new(7);
    let len = 300_000usize;
    let l = c.layout(9, len as u64);
    let mut model = bytes(&mut rng, len);
    client.write_segment(&l, &model).await.unwrap();
    // Data holders 1 and 2 stop answering (not yet known to the MDS).
    let mut down = l.clone();
    down.holders[1].addr = dead_addr().await;
    down.holders[2].addr = dead_addr().await;
    check_reads(&client, &down, &model, &mut rng, 5).await;
    // An update touching chunk 1 (unreachable): marked stale before the ack, parity re-encoded.
    let cb = (len as u64).div_ceil(4);
    let off = cb + 10;
    let new = bytes(&mut rng, 5000);
    let ack = client.update_segment(&down, off, &new).await.unwrap();
    assert_eq!(ack.version, 2);
    assert_eq!(ack.stale, vec![1]);
    assert_eq!(c.calls(), vec!["stale 9 [1] v2"]);
    model[off as usize..off as usize + new.len()].copy_from_slice(&new);
    // The MDS now says chunk 1 is stale; holder 2 is still down.
    let mut marked = down.clone();
    marked.holders[1].usable = false;
    check_reads(&client, &marked, &model, &mut rng, 5).await;
    // Chunk 1's old copy is never served: the old holder back with the old version.
    let mut back = l.clone();
    back.holders[2].addr = dead_addr().await;
    let got = client.read_segment(&back, cb, 100).await;
    assert_eq!(got.unwrap(), model[cb as usize..cb as usize + 100]);
    // A third holder down: only 3 of 6 usable, k = 4: reads fail cleanly, writes too.
    let mut three = marked.clone();
    three.holders[3].addr = dead_addr().await;
    let e = client
        .read_segment(&three, 0, len as u64)
        .await
        .unwrap_err();
    assert!(matches!(e, OsdCallError::Unrecoverable { .. }), "{e}");
    let e = client
        .write_segment(&c.layout(10, 10).clone(), &[1u8; 10])
        .await;
    assert!(e.is_ok());
    let mut w = c.layout(11, 1000);
    for i in [1, 2, 3] {
        w.holders[i].addr = dead_addr().await;
    }
    let e = client.write_segment(&w, &[5u8; 1000]).await.unwrap_err();
    assert!(matches!(e, OsdCallError::NotDurable { .. }), "{e}");
    assert!(
        e.to_string()
            .contains("only 3 of 6 chunks durable, need k + 1 = 5"),
        "{e}"
    );
    // One down: written (k + 1 = 5 durable), the missing chunk marked stale first.
    let mut w = c.layout(12, 1000);
    w.holders[5].addr = dead_addr().await;
    let ack = client.write_segment(&w, &[6u8; 1000]).await.unwrap();
    assert_eq!(ack.stale, vec![5]);
    assert!(c.calls().contains(&"stale 12 [5] v1".to_string()));
    // Chunk 5 stale and data holder 1 unreachable: the update reaches only 4 chunks, fewer than
    // k + 1; refused with one line.
    let mut u = c.layout(12, 1000);
    u.holders[5].usable = false;
    u.holders[1].addr = dead_addr().await;
    let e = client
        .update_segment(&u, 300, &[7u8; 10])
        .await
        .unwrap_err();
    assert!(matches!(e, OsdCallError::NotDurable { .. }), "{e}");
    assert!(e.to_string().contains("need k + 1 = 5"), "{e}");
    // Two chunks unusable in the layout: refused before anything changes.
    u.holders[1].usable = false;
    let e = client
        .update_segment(&u, 300, &[7u8; 10])
        .await
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("an update needs k + 1 = 5 usable chunks, the layout has 4"),
        "{e}"
    );
    // The layout claims every chunk is fine (it is not: chunk 1 missed the update that failed above
    // and chunk 5 was never written). The data holder of chunk 1 refuses (its version is older than
    // the primary expects), the primary finishes the sub-update with decoded deltas, and, with only
    // 4 chunks at the new version, refuses to acknowledge; chunk 1's old bytes are never served.
    let all = c.layout(12, 1000);
    let e = client
        .update_segment(&all, 300, &[8u8; 10])
        .await
        .unwrap_err();
    assert!(matches!(e, OsdCallError::NotDurable { .. }), "{e}");
    let calls = c.calls();
    assert!(
        calls.contains(&"stale 12 [1, 5] v3".to_string()),
        "{calls:?}"
    );
    let mut marked = all.clone();
    marked.holders[1].usable = false;
    marked.holders[5].usable = false;
    let mut model12 = vec![6u8; 1000];
    model12[300..310].copy_from_slice(&[8u8; 10]);
    check_reads(&client, &marked, &model12, &mut rng, 5).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_chunk_is_read_around_and_repaired() {
    let c = cluster(CodeKind::RsCauchy, 3, 2).await;
    let client = c.client();
    let mut rng = Rng::new(8);
    let len = 50_000usize;
    let l = c.layout(5, len as u64);
    let model = bytes(&mut rng, len);
    client.write_segment(&l, &model).await.unwrap();
    // Flip a byte in data chunk 1's file (block 2).
    let path = c.nodes[1].store.chunk_path(5, 1);
    let mut b = std::fs::read(&path).unwrap();
    let (meta, _) = c.nodes[1].store.read(5, 1, 0, 0).unwrap();
    let at = ecstack_osd::chunk_store::data_offset(&meta) as usize + 2 * 4096 + 9;
    b[at] ^= 0x40;
    std::fs::write(&path, &b).unwrap();
    let e = c.nodes[1].store.read(5, 1, 0, 16_667).unwrap_err();
    assert!(e.to_string().contains("block 2"), "{e}");
    assert_eq!(client.read_segment(&l, 0, len as u64).await.unwrap(), model);
    // Repaired in place: the chunk reads clean with the right bytes and version.
    let (meta, data) = c.nodes[1].store.read(5, 1, 0, 16_667).unwrap();
    assert_eq!(meta.version, 1);
    assert_eq!(data, model[16_667..2 * 16_667]);
}

// A read of several megabytes is pipelined in 1 MiB pieces; a piece that fails its checksum after
// earlier pieces went out switches the rest of the range to the degraded path (and the repair).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipelined_read_switches_to_degraded_mid_stream() {
    let c = cluster(CodeKind::RsCauchy, 2, 2).await;
    let client = c.client();
    let mut rng = Rng::new(9);
    let len = 5 << 20; // chunks of 2.5 MiB: pieces 1 + 1 + 0.5 MiB each
    let l = c.layout(6, len as u64);
    let model = bytes(&mut rng, len);
    client.write_segment(&l, &model).await.unwrap();
    check_reads(&client, &l, &model, &mut rng, 3).await;
    // Corrupt data chunk 1 inside its second piece (1.5 MiB into the chunk).
    let path = c.nodes[1].store.chunk_path(6, 1);
    let mut b = std::fs::read(&path).unwrap();
    let (meta, _) = c.nodes[1].store.read(6, 1, 0, 0).unwrap();
    let at = ecstack_osd::chunk_store::data_offset(&meta) as usize + (3 << 19) + 5;
    b[at] ^= 0x11;
    std::fs::write(&path, &b).unwrap();
    let half = (len / 2) as u64;
    assert!(c.nodes[1].store.read(6, 1, 0, half).is_err());
    assert_eq!(client.read_segment(&l, 0, len as u64).await.unwrap(), model);
    let (_, data) = c.nodes[1].store.read(6, 1, 0, half).unwrap();
    assert_eq!(data, model[len / 2..], "chunk 1 repaired");
    check_reads(&client, &l, &model, &mut rng, 3).await;
}

/// A TCP relay to `to` (returns its address) that forwards nothing from `to` while `hold` is set:
/// the connection stays open, the peer's replies (and its answers to keep-alive pings) stop.
async fn holding_relay(to: String, hold: Arc<AtomicBool>) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        while let Ok((inbound, _)) = l.accept().await {
            let (to, hold) = (to.clone(), hold.clone());
            tokio::spawn(async move {
                let Ok(outbound) = tokio::net::TcpStream::connect(&to).await else {
                    return;
                };
                let (mut in_r, mut in_w) = inbound.into_split();
                let (mut out_r, mut out_w) = outbound.into_split();
                tokio::spawn(async move { tokio::io::copy(&mut in_r, &mut out_w).await });
                let mut buf = vec![0u8; 64 << 10];
                loop {
                    let n = match out_r.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    while hold.load(Ordering::Relaxed) {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                    if in_w.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_that_stops_sending_is_read_around() {
    let c = cluster(CodeKind::RsCauchy, 2, 2).await;
    let idle = Duration::from_millis(400);
    for n in &c.nodes {
        n.osd.set_peer_fetch_idle(idle);
    }
    let client = c.client();
    let mut rng = Rng::new(12);
    let len = 5 << 20; // chunks of 2.5 MiB: pieces 1 + 1 + 0.5 MiB each
    let mut l = c.layout(8, len as u64);
    let hold = Arc::new(AtomicBool::new(false));
    l.holders[1].addr = holding_relay(c.nodes[1].addr.clone(), hold.clone()).await;
    let model = bytes(&mut rng, len);
    client.write_segment(&l, &model).await.unwrap();
    check_reads(&client, &l, &model, &mut rng, 3).await;
    // Holder 1 keeps its connection but stops sending: without a deadline of their own, the
    // primary's piece fetches would wait for the peer deadline (600 s), far beyond any client's.
    hold.store(true, Ordering::Relaxed);
    let chunk = (len / 2) as u64;
    for (offset, length) in [(0, len as u64), (chunk + 5, 1000), (chunk - 10, chunk)] {
        let got = tokio::time::timeout(
            Duration::from_secs(30),
            client.read_segment(&l, offset, length),
        )
        .await
        .expect("the primary reads around the holder that stopped sending")
        .unwrap();
        assert!(
            got == model[offset as usize..(offset + length) as usize],
            "{offset}+{length}"
        );
    }
    let slow = c.nodes[0].osd.metrics().slow_peer_fetches.get();
    assert!(slow >= 3, "each read gave up on holder 1 once: {slow}");
    let degraded = c.nodes[0].osd.metrics().degraded_reads.get();
    assert!(degraded >= 3, "{degraded}");
    hold.store(false, Ordering::Relaxed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recovery_rebuilds_chunks_onto_their_targets() {
    let c = cluster(CodeKind::RsVandermonde, 4, 2).await;
    let client = c.client();
    let mut rng = Rng::new(9);
    let len = 123_456usize;
    let l = c.layout(3, len as u64);
    let mut model = bytes(&mut rng, len);
    client.write_segment(&l, &model).await.unwrap();
    let new = bytes(&mut rng, 1000);
    client.update_segment(&l, 10, &new).await.unwrap();
    model[10..1010].copy_from_slice(&new);
    // Chunks 2 (data) and 5 (parity) are lost; targets are their old holders (catch-up).
    c.nodes[2].store.delete(3, 2).unwrap();
    c.nodes[5].store.delete(3, 5).unwrap();
    let mut rec = l.clone();
    rec.holders[2].usable = false;
    rec.holders[5].usable = false;
    rec.epoch = 2;
    let moved = c.nodes[0].osd.recover(&rec, &[2, 5]).await.unwrap();
    assert_eq!(moved, 2 * (len as u64).div_ceil(4));
    let mut calls = c.calls();
    calls.sort();
    assert_eq!(
        calls,
        vec!["recovered 3 2 osd2 v2", "recovered 3 5 osd5 v2"]
    );
    // All chunks back: a read using only chunks 2, 3, 4 and 5 decodes the model.
    let mut only = rec.clone();
    only.epoch = REBUILT_EPOCH;
    only.holders[2].usable = true;
    only.holders[5].usable = true;
    only.holders[0].usable = false;
    only.holders[1].usable = false;
    check_reads(&client, &only, &model, &mut rng, 3).await;
}

// Recovery gathers and stores without the segment's lock, so updates go on meanwhile; whatever
// the interleaving, the MDS is told a rebuilt chunk is back only at a version whose bytes it holds
// (a stripe that changed under the rebuild is rebuilt again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recovery_racing_updates_reports_only_what_it_rebuilt() {
    let c = cluster(CodeKind::RsVandermonde, 4, 2).await;
    let client = c.client();
    let mut rng = Rng::new(21);
    let len = 4 << 20;
    let cb = len / 4;
    let l = c.layout(8, len as u64);
    let mut model = bytes(&mut rng, len);
    let ack = client.write_segment(&l, &model).await.unwrap();
    // Chunk 2 (data) is lost; updates keep changing it (degraded: its holder is not usable).
    c.nodes[2].store.delete(8, 2).unwrap();
    let mut rec = l.clone();
    rec.holders[2].usable = false;
    rec.epoch = 2;
    let mut chunk2_at = std::collections::BTreeMap::new();
    chunk2_at.insert(ack.version, model[2 * cb..3 * cb].to_vec());
    let recovery = {
        let (osd, rec) = (c.nodes[0].osd.clone(), rec.clone());
        tokio::spawn(async move { osd.recover(&rec, &[2]).await })
    };
    let mut updates = 0;
    while !recovery.is_finished() && updates < 200 {
        let at = 2 * cb + rng.below(cb as u64 - 4096) as usize;
        let new = bytes(&mut rng, 4096);
        match client.update_segment(&rec, at as u64, &new).await {
            Ok(ack) => {
                model[at..at + 4096].copy_from_slice(&new);
                chunk2_at.insert(ack.version, model[2 * cb..3 * cb].to_vec());
                updates += 1;
            }
            // The rebuild was reported: the layout that calls chunk 2 stale is refused.
            Err(OsdCallError::StaleLayout { .. }) => break,
            Err(e) => panic!("update {updates}: {e}"),
        }
    }
    assert_eq!(recovery.await.unwrap().unwrap(), cb as u64);
    // Once the rebuild is reported, an update under the layout from before it (chunk 2 stale)
    // would leave the rebuilt chunk behind while the MDS counts it healthy: refused, so the
    // client fetches the layout again.
    let e = client
        .update_segment(&rec, 0, &[1u8; 10])
        .await
        .unwrap_err();
    assert!(matches!(e, OsdCallError::StaleLayout { .. }), "{e}");
    let calls = c.calls();
    assert_eq!(calls.len(), 1, "{calls:?}");
    let told: u64 = calls[0]
        .strip_prefix("recovered 8 2 osd2 v")
        .unwrap_or_else(|| panic!("{calls:?}"))
        .parse()
        .unwrap();
    let (meta, data) = c.nodes[2].store.read(8, 2, 0, cb as u64).unwrap();
    assert_eq!(meta.version, told, "after {updates} updates");
    assert!(
        data == chunk2_at[&told],
        "the rebuilt chunk holds the bytes of version {told}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_one_clear_error() {
    let c = cluster(CodeKind::RsVandermonde, 2, 1).await;
    let client = c.client();
    let l = c.layout(1, 100);
    client.write_segment(&l, &[1u8; 100]).await.unwrap();
    let e = client.write_segment(&l, &[1u8; 99]).await.unwrap_err();
    assert!(
        e.to_string()
            .contains("received 99 bytes for a segment of 100"),
        "{e}"
    );
    let e = client.read_segment(&l, 90, 11).await.unwrap_err();
    assert!(matches!(e, OsdCallError::Invalid { .. }), "{e}");
    let e = client.update_segment(&l, 100, &[1]).await.unwrap_err();
    assert!(e.to_string().contains("outside its 100 bytes"), "{e}");
    let mut not_primary = l.clone();
    not_primary.primary = 1;
    let e = client.read_segment(&not_primary, 0, 1).await.unwrap_err();
    assert!(matches!(e, OsdCallError::StaleLayout { .. }), "{e}");
    let mut old = l.clone();
    old.epoch = 5;
    client.read_segment(&old, 0, 1).await.unwrap();
    old.epoch = 4;
    let e = client.read_segment(&old, 0, 1).await.unwrap_err();
    assert!(
        e.to_string().contains("epoch 4 is older than epoch 5"),
        "{e}"
    );
    let mut short = l.clone();
    short.holders.pop();
    let e = client.read_segment(&short, 0, 1).await.unwrap_err();
    assert!(
        e.to_string()
            .contains("layout has 2 holders, the code has n = 3"),
        "{e}"
    );
    let stamp = ecstack_osd::DeltaStamp {
        from: 0,
        prior: 1,
        version: 2,
    };
    let e = client
        .apply_delta(1, 0, &[0..1], &[1], stamp, Default::default())
        .await
        .unwrap_err();
    assert!(e.to_string().contains("deltas go to parity chunks"), "{e}");
    let e = client.get_chunk(77, 0, 0, 0, None).await.unwrap_err();
    assert!(matches!(e, OsdCallError::NotFound { .. }), "{e}");
    // A chunk call meant for another OSD (its address is out of date) is refused.
    let e = client
        .clone()
        .for_osd(4242)
        .get_chunk(77, 0, 0, 0, None)
        .await
        .unwrap_err();
    assert!(matches!(e, OsdCallError::StaleLayout { .. }), "{e}");
    assert!(e.to_string().contains("not osd 4242"), "{e}");
}

/// The stripe as the holders store it satisfies a fresh encode of its data chunks (every chunk
/// read straight from its store), and every chunk has the aligned size.
fn assert_stripe_encodes(c: &Cluster, kind: CodeKind, k: usize, m: usize, seg: u64, cb: u64) {
    let code = new_code(kind, k, m).unwrap();
    let chunks: Vec<Vec<u8>> = c
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let (meta, data) = n.store.read(seg, i as u32, 0, cb).unwrap();
            assert_eq!(meta.chunk_bytes, cb, "segment {seg} chunk {i}: its size");
            data.to_vec()
        })
        .collect();
    let data: Vec<&[u8]> = chunks[..k].iter().map(|d| d.as_slice()).collect();
    let mut parity = vec![vec![0u8; cb as usize]; m];
    let mut refs: Vec<&mut [u8]> = parity.iter_mut().map(|p| p.as_mut_slice()).collect();
    code.encode(&data, &mut refs).unwrap();
    for (j, p) in parity.iter().enumerate() {
        assert!(
            *p == chunks[k + j],
            "segment {seg}: parity chunk {} differs from a fresh encode",
            k + j
        );
    }
}

/// RDP (k = 4, p = 5: chunks of 4 rows) through the service: chunks sized to a multiple of
/// p − 1, FO updates whose diagonal-parity deltas land on other rows (in the middle of a row,
/// across rows, across chunks; the stripe checked against a fresh encode after each), degraded
/// reads with every pair of chunks unusable (two lost: whole chunks decoded, the range cut out),
/// and an update whose data holder is unreachable (the primary's decoded deltas).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rdp_updates_and_degraded_reads_against_a_model() {
    let (kind, k, m) = (CodeKind::Rdp, 4, 2);
    let c = cluster(kind, k, m).await;
    let client = c.client();
    let mut rng = Rng::new(41);
    for (seg, len) in [(1u64, 100_003usize), (2, 3), (3, (1 << 20) + 5)] {
        let cb = (len as u64).div_ceil(4).next_multiple_of(4);
        let row = cb / 4;
        let l = c.layout(seg, len as u64);
        let mut model = bytes(&mut rng, len);
        client.write_segment(&l, &model).await.unwrap();
        assert_stripe_encodes(&c, kind, k, m, seg, cb);
        check_reads(&client, &l, &model, &mut rng, 5).await;
        // (offset, length) inside the segment: mid-row, across a row boundary, across a chunk
        // boundary, one byte at the very end, a whole chunk.
        let updates = [
            (row / 2, 3.min(len as u64 - row / 2)),
            (2 * row - 2, 5),
            (cb - 3, 10),
            (len as u64 - 1, 1),
            (cb, cb),
        ];
        for (i, &(off, ulen)) in updates.iter().enumerate() {
            let ulen = ulen.min(len as u64 - off.min(len as u64 - 1));
            let off = off.min(len as u64 - ulen);
            let new = bytes(&mut rng, ulen as usize);
            let ack = client.update_segment(&l, off, &new).await.unwrap();
            assert!(ack.stale.is_empty(), "update {i}: {:?}", ack.stale);
            model[off as usize..(off + ulen) as usize].copy_from_slice(&new);
            assert_stripe_encodes(&c, kind, k, m, seg, cb);
            check_reads(&client, &l, &model, &mut rng, 2).await;
        }
        // Every pair of chunks unusable: data + data, data + P, data + Q, P + Q.
        for a in 0..k + m {
            for b in a + 1..k + m {
                let mut two = l.clone();
                two.holders[a].usable = false;
                two.holders[b].usable = false;
                check_reads(&client, &two, &model, &mut rng, 2).await;
            }
        }
        assert!(c.calls().is_empty());
    }
    // Data holder 1 unreachable: the primary decodes the old bytes (one chunk lost: the range of
    // the others, Q's included) and sends the ranged deltas itself; chunk 1 is marked stale.
    let len = 100_003usize;
    let cb = (len as u64).div_ceil(4).next_multiple_of(4);
    let l = c.layout(1, len as u64);
    let mut model = client.read_segment(&l, 0, len as u64).await.unwrap();
    let mut down = l.clone();
    down.holders[1].addr = dead_addr().await;
    let off = cb + cb / 4 - 7;
    let new = bytes(&mut rng, 20);
    let ack = client.update_segment(&down, off, &new).await.unwrap();
    assert_eq!(ack.stale, vec![1]);
    model[off as usize..off as usize + 20].copy_from_slice(&new);
    let mut marked = l.clone();
    marked.holders[1].usable = false;
    check_reads(&client, &marked, &model, &mut rng, 5).await;
    // The parity took the update: with chunk 1 and one more lost, every read still decodes.
    for other in [0, 2, 4, 5] {
        let mut two = marked.clone();
        two.holders[other].usable = false;
        check_reads(&client, &two, &model, &mut rng, 2).await;
    }
}

/// Every update scheme through the service, for an RS and an RDP stripe: writes, updates (many
/// more bytes than a PLR reserve of 16 KiB holds, so reserves fill and merge), reads and degraded
/// reads against a model; the chunk store's merged view encodes after every update, logs exist
/// where the scheme keeps them (FL: data and parity, CodFS PL: parity, PLR: in the reserve), and
/// after merging every chunk the stripe still encodes and reads back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_update_scheme_against_a_model() {
    use ecstack_osd::update::Scheme;
    for (kind, k, m) in [(CodeKind::RsVandermonde, 4, 2), (CodeKind::Rdp, 4, 2)] {
        for scheme in Scheme::ALL {
            let c = cluster(kind, k, m).await;
            for n in &c.nodes {
                n.osd.set_initial_reserve(16 << 10);
            }
            let client = c.client();
            let mut rng = Rng::new(scheme.code() as u64 + 100);
            let (seg, len) = (7u64, 200_003usize);
            let align = if kind == CodeKind::Rdp { 4 } else { 1 };
            let cb = (len as u64).div_ceil(4).next_multiple_of(align);
            let l = Layout {
                scheme,
                ..c.layout(seg, len as u64)
            };
            let mut model = bytes(&mut rng, len);
            client.write_segment(&l, &model).await.unwrap();
            for v in 2..14 {
                let off = rng.below(len as u64);
                let ulen = 1 + rng.below((len as u64 - off).min(6_000));
                let new = bytes(&mut rng, ulen as usize);
                let ack = client.update_segment(&l, off, &new).await.unwrap();
                assert_eq!((ack.version, ack.stale.clone()), (v, vec![]), "{scheme}");
                model[off as usize..(off + ulen) as usize].copy_from_slice(&new);
                assert_stripe_encodes(&c, kind, k, m, seg, cb);
            }
            check_reads(&client, &l, &model, &mut rng, 4).await;
            let mut degraded = l.clone();
            for h in degraded.holders.iter_mut().take(2) {
                h.usable = false;
            }
            check_reads(&client, &degraded, &model, &mut rng, 4).await;
            let logged = |range: std::ops::Range<usize>| -> u64 {
                c.nodes[range]
                    .iter()
                    .map(|n| n.store.usage().log_bytes + n.store.usage().merges)
                    .sum()
            };
            let (data_logs, parity_logs) = (logged(0..k), logged(k..k + m));
            match scheme {
                Scheme::Fo => assert_eq!((data_logs, parity_logs), (0, 0), "{scheme}"),
                Scheme::Fl => assert!(data_logs > 0 && parity_logs > 0, "{scheme}"),
                Scheme::ParityLog | Scheme::Plr => {
                    assert!(data_logs == 0 && parity_logs > 0, "{scheme}")
                }
            }
            if scheme == Scheme::Plr {
                let merges: u64 = c.nodes.iter().map(|n| n.store.usage().merges).sum();
                assert!(merges > 0, "PLR's 16 KiB reserves filled and merged");
                let meta = c.nodes[k].store.meta(seg, k as u32).unwrap().unwrap();
                assert_eq!(meta.reserve_bytes, 16 << 10);
            }
            for (i, n) in c.nodes.iter().enumerate() {
                n.store.merge(seg, i as u32).unwrap();
                assert_eq!(
                    n.store.log_state(seg, i as u32).unwrap().unwrap().records,
                    0
                );
            }
            assert_stripe_encodes(&c, kind, k, m, seg, cb);
            check_reads(&client, &l, &model, &mut rng, 4).await;
        }
    }
}

/// Updates `data` at `offset` of the segment `l` while data chunk 3's holder and parity chunk
/// 4's holder stop answering (the MDS does not know yet) and parity chunk 5 is already stale:
/// the primary can neither have chunk 3 updated nor finish its sub-update degraded (3 of the
/// k = 4 chunks it needs), and the update fails with "cannot finish".
async fn update_that_cannot_finish(client: &OsdClient, l: &Layout, offset: u64, data: &[u8]) {
    let mut l2 = l.clone();
    l2.holders[3].addr = dead_addr().await;
    l2.holders[4].addr = dead_addr().await;
    l2.holders[5].usable = false;
    let e = client.update_segment(&l2, offset, data).await.unwrap_err();
    assert!(e.to_string().contains("cannot finish"), "{e}");
}

/// An update whose data holder fails while a parity holder misses the other data holders' deltas:
/// the primary cannot finish the failed sub-update (too few chunks agree), and the update is not
/// acknowledged — but every chunk that misses it (the failed data chunk and the parity that missed
/// deltas) is marked stale at the MDS before the error, so the MDS never counts a parity that
/// disagrees with its data as healthy (found by fault seed 366024: the MDS kept such a parity
/// healthy, and two later kills left the segment with more than m unusable chunks).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_the_primary_cannot_finish_still_marks_what_missed_it() {
    let c = cluster(CodeKind::RsVandermonde, 4, 2).await;
    let client = c.client();
    let mut rng = Rng::new(11);
    let len = 200_000usize;
    let l = c.layout(12, len as u64);
    let model = bytes(&mut rng, len);
    client.write_segment(&l, &model).await.unwrap();
    update_that_cannot_finish(&client, &l, 0, &vec![7u8; len]).await;
    let calls = c.calls();
    assert!(
        calls.iter().any(|c| c.starts_with("stale 12 [3, 4]")),
        "{calls:?}"
    );
}

/// An update that is not acknowledged and reached no chunk still used up its version: the
/// chunks that missed it are marked stale at it, and the MDS refuses a rebuild reported below a
/// stale mark. The primary reports its rebuilds at the newest version it issued, so the
/// segment recovers (fault seed 367173: an update at version 5 whose data holder and degraded
/// path both failed marked its chunk stale at 5 while every live chunk stayed at 4, and each
/// rebuild, reported at 4, was refused for as long as the run waited).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebuild_after_an_update_that_reached_no_chunk_is_reported_at_its_version() {
    let c = cluster(CodeKind::RsVandermonde, 4, 2).await;
    let client = c.client();
    let mut rng = Rng::new(12);
    let len = 200_000usize;
    let cb = len.div_ceil(4);
    let l = c.layout(14, len as u64);
    let model = bytes(&mut rng, len);
    client.write_segment(&l, &model).await.unwrap();
    // An update inside data chunk 3 only: no chunk takes it.
    update_that_cannot_finish(&client, &l, 3 * cb as u64 + 10, &[7u8; 1000]).await;
    assert!(
        c.calls() == ["stale 14 [3] v2"],
        "chunk 3 is marked stale at the update's version (parity 4 missed no delta)"
    );
    // Chunk 3 is rebuilt from the others, all still at version 1; the report says 2.
    let mut rec = l.clone();
    rec.holders[3].usable = false;
    rec.epoch = 2;
    c.nodes[0].osd.recover(&rec, &[3]).await.unwrap();
    assert_eq!(c.calls(), ["recovered 14 3 osd3 v2"]);
    // The stripe reads back as it was before the update that reached no chunk.
    let mut back = l.clone();
    back.epoch = REBUILT_EPOCH;
    let got = client.read_segment(&back, 0, len as u64).await.unwrap();
    assert!(got == model, "the stripe reads back as written");
}

/// A primary that never issued a version of a segment (restarted, or promoted) issues new ones
/// above the version the MDS last heard of, which the layout carries: an update that reached no
/// chunk under the previous primary still used its version up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_primary_issues_versions_above_the_layouts() {
    let c = cluster(CodeKind::RsVandermonde, 4, 2).await;
    let client = c.client();
    let mut rng = Rng::new(13);
    let len = 100_000usize;
    let mut l = c.layout(15, len as u64);
    let mut model = bytes(&mut rng, len);
    assert_eq!(client.write_segment(&l, &model).await.unwrap().version, 1);
    // The MDS heard of version 7 (a stale mark by an earlier primary); this primary never did.
    l.version = 7;
    let ack = client.update_segment(&l, 5, &[9u8; 100]).await.unwrap();
    model[5..105].fill(9);
    assert_eq!(ack.version, 8, "issued above the layout's version");
    check_reads(&client, &l, &model, &mut rng, 3).await;
}

/// An update that reached too few holders to be finished and missed more than m chunks is rolled
/// back, not forward: marking what missed it would leave fewer than k usable chunks (the segment
/// lost, though every chunk held the version before: fault seed 367660, three of six holders
/// unreachable at once). The chunks it may have reached are marked instead, and the stripe reads
/// back as before from the others once their holders answer again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_that_missed_more_than_m_chunks_is_rolled_back() {
    let c = cluster(CodeKind::RsVandermonde, 4, 2).await;
    let client = c.client();
    let mut rng = Rng::new(14);
    let len = 200_000usize;
    let cb = len.div_ceil(4);
    let l = c.layout(16, len as u64);
    let model = bytes(&mut rng, len);
    client.write_segment(&l, &model).await.unwrap();
    // Data chunks 1, 2 and 3 change; the holders of 1, 2 and parity 5 do not answer. Chunk 3
    // and parity 4 take the update (3's delta), which cannot be finished for 1 and 2.
    let mut away = l.clone();
    for i in [1, 2, 5] {
        away.holders[i].addr = dead_addr().await;
    }
    let e = client
        .update_segment(&away, cb as u64 + 100, &vec![7u8; 2 * cb])
        .await
        .unwrap_err();
    assert!(e.to_string().contains("cannot finish"), "{e}");
    assert_eq!(
        c.calls(),
        ["stale 16 [3, 4] v2"],
        "rolled back: the chunks that took it are marked, not 1, 2 and 5"
    );
    // The holders answer again; chunks 3 and 4 are stale at the MDS.
    let mut back = l.clone();
    back.holders[3].usable = false;
    back.holders[4].usable = false;
    let got = client.read_segment(&back, 0, len as u64).await.unwrap();
    assert!(got == model, "the stripe reads back as before the update");
    // Chunks 3 and 4 are rebuilt as they were before the update, reported at the version it
    // used up; then the stripe is whole, and the next update goes above that version.
    back.epoch = 2;
    c.nodes[0].osd.recover(&back, &[3, 4]).await.unwrap();
    let mut calls = c.calls();
    calls.sort();
    assert_eq!(calls, ["recovered 16 3 osd3 v2", "recovered 16 4 osd4 v2"]);
    let mut whole = l.clone();
    whole.epoch = REBUILT_EPOCH;
    let ack = client
        .update_segment(&whole, 10, &[3u8; 100])
        .await
        .unwrap();
    assert_eq!((ack.version, ack.stale), (3, vec![]));
    let mut model = model;
    model[10..110].fill(3);
    check_reads(&client, &whole, &model, &mut rng, 3).await;
}

/// A primary that restarted after reporting a rebuild knows nothing of it, yet a client's layout
/// from before the rebuild still calls the rebuilt chunk stale: its first update of the segment
/// asks the MDS for the segment's epoch and refuses the older layout, so the rebuilt chunk is not
/// left out of updates while the MDS counts it healthy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_primary_refuses_a_layout_from_before_a_rebuild() {
    let c = cluster(CodeKind::RsVandermonde, 4, 2).await;
    let client = c.client();
    let mut rng = Rng::new(15);
    let len = 100_000usize;
    let l = c.layout(17, len as u64);
    let mut model = bytes(&mut rng, len);
    client.write_segment(&l, &model).await.unwrap();
    c.nodes[5].store.delete(17, 5).unwrap();
    let mut rec = l.clone();
    rec.holders[5].usable = false;
    rec.epoch = 2;
    c.nodes[0].osd.recover(&rec, &[5]).await.unwrap();
    // The primary restarts; a client still holds `rec`.
    let addr = restarted(&c, 0, CodeKind::RsVandermonde, 4, 2).await;
    let again = OsdClient::connect(&addr, &Security::Insecure).unwrap();
    let mut old = rec.clone();
    old.holders[0].addr = addr.clone();
    let e = again
        .update_segment(&old, 10, &[5u8; 100])
        .await
        .unwrap_err();
    assert!(matches!(e, OsdCallError::StaleLayout { .. }), "{e}");
    // With the current layout the update reaches every chunk, the rebuilt one too.
    let mut now = l.clone();
    now.holders[0].addr = addr;
    now.epoch = REBUILT_EPOCH;
    let ack = again.update_segment(&now, 10, &[5u8; 100]).await.unwrap();
    assert!(ack.stale.is_empty(), "{:?}", ack.stale);
    model[10..110].fill(5);
    let mut only = now.clone();
    only.holders[1].usable = false;
    check_reads(&again, &only, &model, &mut rng, 3).await;
    assert_eq!(
        c.nodes[5].store.meta(17, 5).unwrap().unwrap().applied[0],
        ack.version
    );
}
