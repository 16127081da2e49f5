//! Fuzzed request decoders: mutated protobuf bytes of every OSD request go through prost decoding,
//! the request checks and, when every holder they name is this OSD (so nothing leaves the process),
//! the real service handler; each case must end in a value or a clean error, never a panic. Long
//! mode: `ECSTACK_FUZZ_CASES=1000000 cargo test -p ecstack-osd --lib fuzz` (seed: `ECSTACK_SEED`).

use std::sync::Arc;

use ecstack_base::mutate::{case_rng, fuzz_cases, fuzz_seed, mutate};
use ecstack_codes::{new_code, CodeKind};
use prost::Message;
use tonic::Request;

use crate::api::{self, layout_from_proto, meta_from_proto, Holder, Layout};
use crate::chunk_store::{check_meta, FileStore};
use crate::proto;
use crate::proto::osd_server::Osd as _;
pub(crate) use crate::service::NoMds;
use crate::service::{check_layout, check_range, Osd, OsdSetup};

const K: usize = 2;
const M: usize = 1;
const ME: u32 = 7;

fn layout() -> Layout {
    local_layout(10_000, (K + M) as u32, ME)
}

/// Segment 1 of `length` bytes with all n chunks on OSD `osd` (its primary): every call on it
/// stays inside that OSD.
pub(crate) fn local_layout(length: u64, n: u32, osd: u32) -> Layout {
    Layout {
        scheme: Default::default(),
        segment_id: 1,
        length,
        primary: osd,
        holders: (0..n)
            .map(|index| Holder {
                index,
                osd_id: osd,
                addr: "127.0.0.1:1".into(),
                usable: true,
                down: false,
            })
            .collect(),
        epoch: 1,
        version: 0,
    }
}

fn all_local(l: &proto::Layout) -> bool {
    l.holders.iter().all(|h| h.osd_id == ME)
}

/// The valid requests the mutations start from, as (name, encoded bytes).
fn images() -> Vec<(&'static str, Vec<u8>)> {
    let l = api::layout_to_proto(&layout());
    let parity: Vec<proto::Holder> = l.holders[K..].to_vec();
    let delta = proto::ApplyDeltaRequest {
        update_scheme: 0,
        target_osd: Some(ME),
        segment_id: 1,
        index: 2,
        offset: 17,
        delta: vec![3u8; 50].into(),
        version: 9,
        from_index: 1,
        prior_version: 1,
        extents: Vec::new(),
    };
    vec![
        (
            "read",
            proto::ReadSegmentRequest {
                layout: Some(l.clone()),
                offset: 100,
                length: 5000,
            }
            .encode_to_vec(),
        ),
        (
            "update",
            proto::UpdateSegmentRequest {
                layout: Some(l.clone()),
                offset: 4990,
                data: vec![9u8; 40].into(),
            }
            .encode_to_vec(),
        ),
        (
            "segment_write",
            proto::SegmentWrite {
                part: Some(proto::segment_write::Part::Layout(l.clone())),
            }
            .encode_to_vec(),
        ),
        (
            "chunk_write",
            proto::ChunkWrite {
                part: Some(proto::chunk_write::Part::Header(proto::ChunkHeader {
                    reserve_bytes: 0,
                    update_scheme: 0,
                    target_osd: Some(ME),
                    segment_id: 2,
                    index: 1,
                    version: 3,
                    chunk_bytes: 5000,
                    segment_length: 10_000,
                    applied: vec![2, 3],
                })),
            }
            .encode_to_vec(),
        ),
        (
            "get_chunk",
            proto::GetChunkRequest {
                target_osd: Some(ME),
                segment_id: 1,
                index: 1,
                offset: 10,
                length: 4500,
            }
            .encode_to_vec(),
        ),
        (
            "update_chunk",
            proto::UpdateChunkRequest {
                update_scheme: 0,
                target_osd: Some(ME),
                segment_id: 1,
                index: 0,
                offset: 4000,
                data: vec![1u8; 100].into(),
                version: 9,
                parity,
                expected_version: 1,
            }
            .encode_to_vec(),
        ),
        ("apply_delta", delta.encode_to_vec()),
        // The same delta over two extents (an RDP diagonal parity's rows).
        (
            "apply_delta",
            proto::ApplyDeltaRequest {
                offset: 0,
                extents: vec![
                    proto::Extent { offset: 3, len: 20 },
                    proto::Extent {
                        offset: 4090,
                        len: 30,
                    },
                ],
                ..delta
            }
            .encode_to_vec(),
        ),
        (
            "chunk_version",
            proto::ChunkVersionRequest {
                target_osd: Some(ME),
                segment_id: 1,
                index: 2,
            }
            .encode_to_vec(),
        ),
        (
            "delete_chunk",
            proto::DeleteChunkRequest {
                target_osd: Some(ME),
                segment_id: 3,
                index: 2,
            }
            .encode_to_vec(),
        ),
    ]
}

/// One case: decode, check, and run the handler where that stays inside this OSD.
async fn run_case(osd: &Osd, name: &str, b: &[u8]) {
    let n = K + M;
    match name {
        "read" => {
            if let Ok(r) = proto::ReadSegmentRequest::decode(b) {
                if let Some(l) = &r.layout {
                    if let Ok(layout) = layout_from_proto(l) {
                        if check_layout(&layout, n).is_ok() {
                            let _ = check_range(&layout, r.offset, r.length);
                        }
                    }
                    if all_local(l) {
                        let _ = osd.read_segment(Request::new(r)).await;
                    }
                }
            }
        }
        "update" => {
            if let Ok(r) = proto::UpdateSegmentRequest::decode(b) {
                if r.layout.as_ref().is_some_and(all_local) {
                    let _ = osd.update_segment(Request::new(r)).await;
                }
            }
        }
        "segment_write" => {
            if let Ok(proto::SegmentWrite {
                part: Some(proto::segment_write::Part::Layout(l)),
            }) = proto::SegmentWrite::decode(b)
            {
                if let Ok(layout) = layout_from_proto(&l) {
                    let _ = check_layout(&layout, n);
                }
            }
        }
        "chunk_write" => {
            if let Ok(proto::ChunkWrite {
                part: Some(proto::chunk_write::Part::Header(h)),
            }) = proto::ChunkWrite::decode(b)
            {
                if let Ok(meta) = meta_from_proto(&h) {
                    let _ = check_meta(&meta);
                }
            }
        }
        "get_chunk" => {
            if let Ok(r) = proto::GetChunkRequest::decode(b) {
                let _ = osd.get_chunk(Request::new(r)).await;
            }
        }
        "update_chunk" => {
            if let Ok(r) = proto::UpdateChunkRequest::decode(b) {
                if r.parity.iter().all(|h| h.osd_id == ME) {
                    let _ = osd.update_chunk(Request::new(r)).await;
                }
            }
        }
        "apply_delta" => {
            if let Ok(r) = proto::ApplyDeltaRequest::decode(b) {
                let _ = osd.apply_delta(Request::new(r)).await;
            }
        }
        "chunk_version" => {
            if let Ok(r) = proto::ChunkVersionRequest::decode(b) {
                let _ = osd.chunk_version(Request::new(r)).await;
            }
        }
        "delete_chunk" => {
            if let Ok(r) = proto::DeleteChunkRequest::decode(b) {
                if r.segment_id != 1 {
                    let _ = osd.delete_chunk(Request::new(r)).await;
                }
            }
        }
        _ => unreachable!("no request named {name}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fuzz_mutated_requests() {
    let dir = tempfile::tempdir().unwrap();
    let osd = Osd::new(
        OsdSetup {
            osd_id: ME,
            code: new_code(CodeKind::RsVandermonde, K, M).unwrap().into(),
            store: Arc::new(FileStore::open(dir.path()).unwrap()),
            security: ecstack_rpc::Security::Insecure,
            mds: Arc::new(NoMds),
        },
        0,
    );
    let data: Vec<u8> = (0..10_000u32).map(|i| (i * 31) as u8).collect();
    osd.write(layout(), data).await.unwrap();
    let images = images();
    // The valid images pass.
    for (name, b) in &images {
        run_case(&osd, name, b).await;
    }
    let donors: Vec<&[u8]> = images.iter().map(|(_, b)| b.as_slice()).collect();
    let seed = fuzz_seed(12);
    let cases = fuzz_cases(400);
    for case in 0..cases {
        let mut rng = case_rng(seed, case);
        let (name, valid) = &images[rng.below(images.len() as u64) as usize];
        let b = mutate(&mut rng, valid, &donors);
        run_case(&osd, name, &b).await;
    }
    // The segment still reads (whatever the cases did to it, the OSD answers cleanly).
    let _ = osd.read(layout(), 0, 10_000).await;
}
