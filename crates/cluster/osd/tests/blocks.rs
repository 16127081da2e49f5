//! Robust objects' blocks through a real OSD service on 127.0.0.1 (its gRPC server and the typed
//! client, `OsdClient::put_blocks` / `get_blocks` / `delete_blocks`): put → get (exact bytes) →
//! delete, unknown objects, a block with a flipped byte on disk reported lost (never served),
//! cancellation on a slow store (queued reads taken back, little read after the cancel, counted
//! by the OSD's metrics), and admission control (a full OSD refuses; a high-priority stream
//! preempts a normal one, which ends refused). The blocks RPCs need no MDS; multi-process runs
//! with an MDS are the client crate's and the CLI's tests.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use ecstack_base::Rng;
use ecstack_codes::{new_code, CodeKind};
use ecstack_osd::admission::AdmissionConfig;
use ecstack_osd::api::{BlockKey, StreamPriority};
use ecstack_osd::chunk_store::{
    blocks_name, record_offset, ChunkStore, FileStore, BLOCK_HEAD_BYTES,
};
use ecstack_osd::device_store::{DeviceStore, DeviceStoreOptions};
use ecstack_osd::service::{BlockConfig, NoMds, Osd, OsdSetup};
use ecstack_osd::{OsdCallError, OsdClient};
use ecstack_rpc::Security;

const ME: u32 = 5;
const MIB: u32 = 1 << 20;

/// An OSD on `store` served on 127.0.0.1; its address.
async fn serve(store: Arc<dyn ChunkStore>, blocks: BlockConfig) -> (Osd, String) {
    let osd = Osd::new(
        OsdSetup {
            osd_id: ME,
            code: new_code(CodeKind::RsVandermonde, 2, 1).unwrap().into(),
            store,
            security: Security::Insecure,
            mds: Arc::new(NoMds),
        },
        0,
    );
    osd.configure_blocks(blocks);
    let addr = osd.serve_loopback().await.unwrap();
    (osd, addr)
}

fn client(addr: &str) -> OsdClient {
    OsdClient::connect(addr, &Security::Insecure)
        .unwrap()
        .for_osd(ME)
}

fn blocks(seed: u64, ids: std::ops::Range<u32>, version: u64, len: u32) -> Vec<(BlockKey, Bytes)> {
    let mut rng = Rng::new(seed);
    ids.map(|id| {
        let mut b = vec![0u8; len as usize];
        rng.fill(&mut b);
        (BlockKey { id, version }, Bytes::from(b))
    })
    .collect()
}

/// Writes `blocks` through one PutBlocks stream; the keys acknowledged, in order.
async fn put(c: &OsdClient, object: u64, len: u32, blocks: &[(BlockKey, Bytes)]) -> Vec<BlockKey> {
    let mut w = c
        .put_blocks(
            object,
            len,
            StreamPriority::Normal,
            len as u64 * blocks.len() as u64,
        )
        .await
        .unwrap();
    let mut acked = Vec::new();
    for (k, d) in blocks {
        w.send(*k, d.clone()).await.unwrap();
    }
    w.close();
    while let Some(k) = w.ack().await.unwrap() {
        acked.push(k);
    }
    acked
}

async fn get_all(c: &OsdClient, object: u64, max_version: u64) -> Vec<(BlockKey, Bytes)> {
    let mut r = c
        .get_blocks(object, max_version, StreamPriority::Normal)
        .await
        .unwrap();
    let mut out = Vec::new();
    while let Some(b) = r.next().await.unwrap() {
        out.push(b);
    }
    out
}

fn dir_store(dir: &std::path::Path) -> Arc<dyn ChunkStore> {
    Arc::new(FileStore::open(dir).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_get_delete_exact_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let (osd, addr) = serve(dir_store(dir.path()), BlockConfig::default()).await;
    let c = client(&addr);
    let first = blocks(1, 0..6, 1, MIB);
    let acked = put(&c, 0x77, MIB, &first).await;
    // Every block acknowledged once, group commit or not.
    let mut sorted = acked.clone();
    sorted.sort();
    assert_eq!(sorted, first.iter().map(|(k, _)| *k).collect::<Vec<_>>());
    assert_eq!(
        get_all(&c, 0x77, 0).await,
        first,
        "stored order, exact bytes"
    );
    // A second stream appends; an update at version 2 of two ids is served instead of their
    // version 1 unless the reader asks for version 1 at most.
    let update = blocks(2, 1..3, 2, MIB);
    put(&c, 0x77, MIB, &update).await;
    let newest: Vec<(BlockKey, Bytes)> = [&first[0], &first[3], &first[4], &first[5]]
        .into_iter()
        .cloned()
        .chain(update.iter().cloned())
        .collect();
    assert_eq!(get_all(&c, 0x77, 0).await, newest);
    assert_eq!(get_all(&c, 0x77, 1).await, first);
    assert_eq!(osd.load().robust_blocks, 8);
    assert_eq!(osd.metrics().blocks.blocks_written.get(), 8);
    // Delete the obsolete blocks, then the object.
    let obsolete = [first[1].0, first[2].0];
    assert_eq!(c.delete_blocks(0x77, &obsolete).await.unwrap(), 2);
    assert_eq!(get_all(&c, 0x77, 0).await, newest);
    assert_eq!(c.delete_blocks(0x77, &[]).await.unwrap(), 6);
    assert_eq!(c.delete_blocks(0x77, &[]).await.unwrap(), 0, "nothing left");
    assert_eq!(osd.load().robust_blocks, 0);
    let t = osd.metrics_text();
    assert!(
        t.contains("ecstack_osd_blocks_written_total{osd=\"5\"} 8"),
        "{t}"
    );
    assert!(t.contains("ecstack_osd_ops_total{osd=\"5\",op=\"get_blocks\",result=\"ok\"} 4"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_are_one_clear_line() {
    let dir = tempfile::tempdir().unwrap();
    let (_osd, addr) = serve(dir_store(dir.path()), BlockConfig::default()).await;
    let c = client(&addr);
    let e = c
        .get_blocks(0xdead, 0, StreamPriority::Normal)
        .await
        .unwrap_err();
    assert!(matches!(e, OsdCallError::NotFound { .. }), "{e:?}");
    assert_eq!(
        e.to_string(),
        format!("OSD {addr}: not found: object 0xdead: no block of it is stored on osd 5")
    );
    // A block of the wrong size is refused before it is sent; a size out of range up front.
    let mut w = c
        .put_blocks(1, 100, StreamPriority::Normal, 0)
        .await
        .unwrap();
    let e = w
        .send(BlockKey { id: 0, version: 1 }, Bytes::from(vec![0u8; 99]))
        .await
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("99 bytes, the stream's blocks are 100"),
        "{e}"
    );
    drop(w);
    let e = c
        .put_blocks(1, 3 << 20, StreamPriority::Normal, 0)
        .await
        .unwrap_err();
    assert!(
        e.to_string().contains("block size 3145728 is outside"),
        "{e}"
    );
    // Another size than the object's stored blocks: the stream ends with the store's line.
    put(&c, 2, 100, &blocks(3, 0..1, 1, 100)).await;
    let mut w = c
        .put_blocks(2, 200, StreamPriority::Normal, 0)
        .await
        .unwrap();
    w.send(BlockKey { id: 1, version: 1 }, Bytes::from(vec![0u8; 200]))
        .await
        .unwrap();
    w.close();
    let e = w.ack().await.unwrap_err();
    assert!(matches!(e, OsdCallError::Invalid { .. }), "{e:?}");
    assert!(e
        .to_string()
        .contains("object 0x2: blocks of 200 bytes, the stored ones have 100"));
    // A call meant for another OSD.
    let other = OsdClient::connect(&addr, &Security::Insecure)
        .unwrap()
        .for_osd(9);
    let e = other
        .get_blocks(2, 0, StreamPriority::Normal)
        .await
        .unwrap_err();
    assert!(matches!(e, OsdCallError::StaleLayout { .. }), "{e:?}");
}

/// A byte flipped in a stored block (bit rot behind the OSD's back): the block is reported lost
/// (metrics) and never served; the others are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flipped_byte_on_disk_is_a_lost_block() {
    let dir = tempfile::tempdir().unwrap();
    let (osd, addr) = serve(dir_store(dir.path()), BlockConfig::default()).await;
    let c = client(&addr);
    let len = 300_000;
    let b = blocks(4, 0..4, 1, len);
    put(&c, 0x99, len, &b).await;
    // Flip one byte of block 2's data in the file itself.
    let path = dir.path().join("chunks").join(blocks_name(0x99));
    let at = record_offset(len, 2) + BLOCK_HEAD_BYTES + 123_456;
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[at as usize] ^= 0x01;
    std::fs::write(&path, &bytes).unwrap();
    let got = get_all(&c, 0x99, 0).await;
    let want: Vec<_> = b.iter().filter(|(k, _)| k.id != 2).cloned().collect();
    assert_eq!(got, want, "the rotted block is not served, the others are");
    assert_eq!(osd.metrics().blocks.blocks_lost.get(), 1);
}

/// The block I/O queue's counters now.
fn counters(osd: &Osd) -> (u64, u64, u64) {
    let b = &osd.metrics().blocks;
    (
        b.blocks_read.get(),
        b.cancelled_reads.get(),
        b.bytes_read_after_cancel.get(),
    )
}

/// A reader of a slow store (8 MB/s) drops its stream after one block: the OSD takes back the
/// reads it had queued and stops the one in service at its next 4 KiB; far less than the object
/// is read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_reader_cancels_its_reads_at_the_osd() {
    let spec = "throttled:bw=8M:mem:128M";
    let store: Arc<dyn ChunkStore> =
        Arc::new(DeviceStore::open_spec(spec, DeviceStoreOptions::default()).unwrap());
    let (osd, addr) = serve(store, BlockConfig::default()).await;
    let c = client(&addr);
    let n = 12;
    put(&c, 0x55, MIB, &blocks(5, 0..n, 1, MIB)).await;
    let mut r = c.get_blocks(0x55, 0, StreamPriority::Normal).await.unwrap();
    let first = r.next().await.unwrap().unwrap();
    assert_eq!(first.0, BlockKey { id: 0, version: 1 });
    drop(r);
    // The OSD hears of the drop and its reads stop within a piece.
    let mut waited = Duration::ZERO;
    while counters(&osd).1 == 0 && waited < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(20)).await;
        waited += Duration::from_millis(20);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (read, cancelled, after) = counters(&osd);
    assert!(cancelled >= 1, "no read cancelled");
    assert!(
        read <= 3,
        "{read} blocks read whole of {n}: the cancel did not stop them"
    );
    assert!(after <= 2 * 4096, "{after} bytes read after the cancel");
    assert_eq!(
        osd.block_io().depth(),
        0,
        "nothing left queued or in service"
    );
    let t = osd.metrics_text();
    assert!(
        t.contains("ecstack_osd_cancelled_reads_total{osd=\"5\"}"),
        "{t}"
    );
}

/// An OSD whose admission floor no store reaches (one stream at a time), its store measured.
async fn one_stream_at_a_time(dir: &std::path::Path) -> (Osd, String) {
    let config = BlockConfig {
        admission: AdmissionConfig {
            enabled: true,
            floor_bytes_per_s: 1 << 50,
        },
        ..BlockConfig::default()
    };
    let (osd, addr) = serve(dir_store(dir), config).await;
    osd.block_io().probe().await.unwrap();
    (osd, addr)
}

/// A full OSD refuses (the client is told to go elsewhere, not to retry here); a high-priority
/// stream preempts the latest normal one, which ends with the refusal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_osd_refuses_and_a_high_stream_preempts() {
    let dir = tempfile::tempdir().unwrap();
    let (osd, addr) = one_stream_at_a_time(dir.path()).await;
    let (read, write) = osd.block_io().rates();
    assert!(
        read.unwrap() > 0.0 && write.unwrap() > 0.0,
        "the probe measured the store"
    );
    let c = client(&addr);
    let b = blocks(6, 0..48, 1, 256 << 10);
    put(&c, 0x66, 256 << 10, &b).await;
    // A holds the OSD: it reads nothing, and the object is larger than the HTTP/2 windows, so
    // its stream stays open.
    let mut a = c.get_blocks(0x66, 0, StreamPriority::Normal).await.unwrap();
    let e = c
        .get_blocks(0x66, 0, StreamPriority::Normal)
        .await
        .unwrap_err();
    assert!(matches!(e, OsdCallError::Refused { .. }), "{e:?}");
    assert!(!e.is_retryable());
    let line = e.to_string();
    assert!(
        line.contains("refused the stream: GetBlocks of object 0x66: osd 5 serves 1 read"),
        "{line}"
    );
    assert!(line.ends_with("try another OSD"), "{line}");
    let e = c
        .put_blocks(0x67, 100, StreamPriority::Normal, 0)
        .await
        .unwrap_err();
    assert!(matches!(e, OsdCallError::Refused { .. }), "{e:?}");
    // A high-priority stream gets in; A ends refused after what it had on its way.
    let mut high = c.get_blocks(0x66, 0, StreamPriority::High).await.unwrap();
    let mut got = 0;
    let end = loop {
        match a.next().await {
            Ok(Some(_)) => got += 1,
            other => break other,
        }
    };
    assert!(got < b.len(), "A read every block: not preempted");
    match end {
        Err(OsdCallError::Refused { msg, .. }) => {
            assert!(msg.contains("high-priority"), "{msg}")
        }
        other => panic!("A ended with {other:?}"),
    }
    let mut all = Vec::new();
    while let Some(x) = high.next().await.unwrap() {
        all.push(x);
    }
    assert_eq!(all, b);
    let m = osd.metrics();
    assert_eq!(m.streams_preempted.get(), 1);
    assert_eq!(m.streams_refused.get(), 2);
    // With admission off, everything comes in.
    osd.configure_blocks(BlockConfig::default());
    let _x = c.get_blocks(0x66, 0, StreamPriority::Normal).await.unwrap();
    let _y = c.get_blocks(0x66, 0, StreamPriority::Normal).await.unwrap();
}

/// A normal writer whose place a high-priority stream takes ends with the refusal at its next
/// block (its acknowledged blocks stay stored).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preempted_writer_ends_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (osd, addr) = one_stream_at_a_time(dir.path()).await;
    let c = client(&addr);
    let b = blocks(7, 0..2, 1, 4096);
    let mut w = c
        .put_blocks(0x70, 4096, StreamPriority::Normal, 0)
        .await
        .unwrap();
    w.send(b[0].0, b[0].1.clone()).await.unwrap();
    assert_eq!(w.ack().await.unwrap(), Some(b[0].0));
    let _high = c
        .put_blocks(0x71, 4096, StreamPriority::High, 0)
        .await
        .unwrap();
    let _ = w.send(b[1].0, b[1].1.clone()).await;
    w.close();
    let e = loop {
        match w.ack().await {
            Ok(Some(_)) => continue,
            Ok(None) => panic!("the writer was not preempted"),
            Err(e) => break e,
        }
    };
    assert!(matches!(e, OsdCallError::Refused { .. }), "{e:?}");
    assert!(!e.is_retryable());
    assert_eq!(osd.metrics().streams_preempted.get(), 1);
    let t = osd.store().block_table(0x70).unwrap().unwrap();
    assert_eq!(t.blocks[0].key, b[0].0, "the acknowledged block stays");
}

/// Deleting some blocks appends a deletion record (the file grows by one slot a call, nothing is
/// rewritten); a compaction through the block I/O queue's low lane (a read queued with it is
/// served too) and the OSD's periodic pass (`Osd::compact_blocks_pass`) give the dead slots back;
/// the blocks read back exactly throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletions_append_and_compaction_gives_the_space_back() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir_store(dir.path());
    let one_thread = BlockConfig {
        threads: 1,
        ..BlockConfig::default()
    };
    let (osd, addr) = serve(store.clone(), one_thread).await;
    let c = client(&addr);
    let all = blocks(7, 0..400, 1, 4096);
    put(&c, 0x90, 4096, &all).await;
    let path = dir.path().join("chunks").join(blocks_name(0x90));
    let len = std::fs::metadata(&path).unwrap().len();
    for (i, group) in all[..300].chunks(100).enumerate() {
        let keys: Vec<BlockKey> = group.iter().map(|(k, _)| *k).collect();
        assert_eq!(c.delete_blocks(0x90, &keys).await.unwrap(), 100);
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            len + (i as u64 + 1) * 8192,
            "one slot appended"
        );
    }
    let t = store.block_table(0x90).unwrap().unwrap();
    assert_eq!((t.blocks.len(), t.slots), (100, 403));
    assert_eq!(store.compactable(), vec![0x90]);
    assert_eq!(get_all(&c, 0x90, 0).await, all[300..]);
    // A compaction and a read queued together: both done, the read exact.
    let io = osd.block_io();
    let opened = Arc::new(store.open_blocks(0x90).unwrap().unwrap());
    let compaction = io.compact(0x90);
    let stream = io.stream();
    let read = io.read(&stream, false, opened.clone(), 7);
    let (compacted, read) = tokio::join!(compaction, read);
    assert_eq!(read.unwrap().unwrap().unwrap(), all[307].1);
    let compacted = compacted.unwrap().unwrap().unwrap();
    assert_eq!((compacted.slots_before, compacted.slots_after), (403, 100));
    assert_eq!(
        std::fs::metadata(&path).unwrap().len(),
        BLOCK_HEAD_BYTES + 100 * 8192
    );
    assert_eq!(get_all(&c, 0x90, 0).await, all[300..]);
    // The periodic pass: only files that want it.
    assert_eq!(osd.compact_blocks_pass().await, 0);
    let keys: Vec<BlockKey> = all[300..380].iter().map(|(k, _)| *k).collect();
    assert_eq!(c.delete_blocks(0x90, &keys).await.unwrap(), 80);
    assert_eq!(osd.compact_blocks_pass().await, 1);
    let t = store.block_table(0x90).unwrap().unwrap();
    assert_eq!((t.blocks.len(), t.slots), (20, 20));
    assert_eq!(get_all(&c, 0x90, 0).await, all[380..]);
}
