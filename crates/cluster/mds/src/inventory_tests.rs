//! OSDs' inventories at the MDS (`engine::inventory`) on a manual clock over a real SQLite store:
//! the orphan rule (unknown → candidate → after the grace → delete task; known, pending, awaiting
//! a delete task or above the counter → none), a restarted MDS that starts from nothing, and
//! the wait for the OSDs' largest ids after a restore.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

use crate::engine::*;
use crate::store::{
    FileRecord, Mutation, SegmentRecord, SqliteStore, COUNTER_RESTORED, COUNTER_SEGMENT,
};
use ecstack_mds_proto::*;

const DOWN: u64 = 3_000;
const GRACE: u64 = 60_000;

fn settings() -> MdsSettings {
    MdsSettings {
        params: ClusterParams {
            cluster_id: "test".into(),
            code: "rs-vand".into(),
            k: 2,
            m: 1,
            segment_bytes: 1 << 20,
            heartbeat_ms: 1000,
            down_after_ms: DOWN as u32,
        },
        failure_domain: None,
        out_after_ms: 600_000,
        pending_ttl_ms: 3_600_000,
        default_scheme: UpdateScheme::Fo,
        orphan_grace_ms: GRACE,
    }
}

fn open(path: &Path, clock: &Arc<ManualClock>) -> MdsCore {
    let store = SqliteStore::open(path).unwrap();
    MdsCore::open(Box::new(store), settings(), clock.clone()).unwrap()
}

fn reg(i: u32, max_segment_id: u64) -> OsdRegistration {
    OsdRegistration {
        name: format!("osd-{i}"),
        addr: format!("127.0.0.1:{}", 7000 + i),
        labels: BTreeMap::new(),
        capacity_bytes: 1 << 30,
        used_bytes: 0,
        max_segment_id,
    }
}

fn beat(
    mds: &mut MdsCore,
    osd_id: u32,
    deleted: &[u64],
    deleted_objects: &[u64],
) -> HeartbeatReply {
    mds.heartbeat(&Heartbeat {
        osd_id,
        deleted_segments: deleted.to_vec(),
        deleted_objects: deleted_objects.to_vec(),
        ..Heartbeat::default()
    })
    .unwrap()
}

/// A whole pass of one page: `segments` (id, chunks) and `objects`, `max` the largest id held.
fn pass(
    mds: &mut MdsCore,
    osd_id: u32,
    pass: u64,
    segments: &[(u64, &[u32])],
    objects: &[u64],
    max: u64,
) {
    let dropped = mds
        .report_inventory(&InventoryPage {
            osd_id,
            pass,
            page: 0,
            last: true,
            max_segment_id: max,
            segments: segments
                .iter()
                .map(|&(segment_id, chunks)| HeldSegment {
                    segment_id,
                    chunks: chunks.to_vec(),
                })
                .collect(),
            objects: objects.to_vec(),
        })
        .unwrap();
    assert!(!dropped);
}

/// The delete tasks a heartbeat of `osd_id` carries: (segment, chunks) and whole objects.
fn deletes(mds: &mut MdsCore, osd_id: u32) -> (BTreeMap<u64, Vec<u32>>, BTreeSet<u64>) {
    let mut chunks = BTreeMap::new();
    let mut objects = BTreeSet::new();
    for t in beat(mds, osd_id, &[], &[]).tasks {
        match t {
            OsdTask::Delete(d) => {
                chunks.insert(d.segment_id, d.chunks);
            }
            OsdTask::DeleteObject(d) => {
                assert!(d.blocks.is_empty(), "an orphan's whole block file goes");
                objects.insert(d.object_id);
            }
            OsdTask::Recover(_) => {}
        }
    }
    (chunks, objects)
}

fn orphans(mds: &MdsCore) -> OrphanCounts {
    mds.status().unwrap().orphans
}

fn robust_object(index: u32) -> RobustObject {
    RobustObject {
        object_id: 0,
        index,
        length: 2048,
        k: 2,
        n: 4,
        id_space: 8,
        seed: 0,
        version: 1,
        blocks: Vec::new(),
    }
}

fn robust_params() -> RobustParams {
    RobustParams {
        code: RobustCode::RaptorQ,
        block_bytes: 1024,
        redundancy: 1.0,
        object_blocks: 2,
        lt_c: 0.0,
        lt_delta: 0.0,
    }
}

#[test]
fn unknown_chunks_and_block_files_are_deleted_after_the_grace_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mds.sqlite");
    let clock = ManualClock::new(1_700_000_000_000);
    let mut mds = open(&path, &clock);
    for i in 0..3 {
        mds.register_osd(&reg(i, 0)).unwrap();
    }
    // Known: a committed segment, a pending one (a put under way) and a pending robust object.
    let f = mds.create_file("/a").unwrap();
    let committed = mds.allocate_segments(f, &[100]).unwrap()[0].segment_id;
    mds.commit_file(f, 100).unwrap();
    let p = mds.create_file("/pending").unwrap();
    let pending = mds.allocate_segments(p, &[100]).unwrap()[0].segment_id;
    let (_, objects) = mds
        .create_robust_file("/r", robust_params(), 2048, &[robust_object(0)])
        .unwrap();
    let object = objects[0];
    let c = committed.max(pending).max(object);
    // An OSD that holds ids up to c + 100 (files the restored metadata lost) moves the counter.
    mds.register_osd(&reg(0, c + 100)).unwrap();
    let (u1, u2, u3, uo, above) = (c + 10, c + 11, c + 12, c + 20, c + 150);
    let held: Vec<(u64, &[u32])> = vec![
        (committed, &[0]),
        (pending, &[1]),
        (u1, &[0, 2]),
        (u2, &[2]),
        (u3, &[1]),
        (above, &[0]),
    ];

    pass(&mut mds, 0, 1, &held, &[object, uo], c + 100);
    assert_eq!(
        orphans(&mds),
        OrphanCounts {
            chunks_pending: 4,
            objects_pending: 1,
            ..OrphanCounts::default()
        }
    );
    assert_eq!(deletes(&mut mds, 0), Default::default());

    // Within the grace: still nothing.
    clock.advance(GRACE / 2);
    pass(&mut mds, 0, 2, &held, &[object, uo], c + 100);
    assert_eq!(deletes(&mut mds, 0), Default::default());

    // u2 leaves the OSD; u3 becomes known (the store changed under the MDS).
    mds.store_mut()
        .apply(&[
            Mutation::PutFile(FileRecord {
                file_id: 9_999,
                path: "/known-again".into(),
                size: 0,
                mtime_ms: clock.now_ms(),
                committed: false,
                scheme: UpdateScheme::Fo,
            }),
            Mutation::PutSegment(SegmentRecord {
                segment_id: u3,
                file_id: 9_999,
                index: 0,
                length: 100,
                primary: 0,
                epoch: 1,
                version: 0,
            }),
        ])
        .unwrap();
    clock.advance(GRACE / 2 + 1);
    let later: Vec<(u64, &[u32])> = held.iter().copied().filter(|&(s, _)| s != u2).collect();
    pass(&mut mds, 0, 3, &later, &[object, uo], c + 100);
    let (chunks, objects) = deletes(&mut mds, 0);
    assert_eq!(chunks, BTreeMap::from([(u1, vec![0, 2])]));
    assert_eq!(objects, BTreeSet::from([uo]));
    assert_eq!(
        orphans(&mds),
        OrphanCounts {
            chunks_deleted: 2,
            objects_deleted: 1,
            ..OrphanCounts::default()
        },
        "u3 is known and u2 gone: no candidate is left"
    );
    // Other OSDs got nothing.
    assert_eq!(deletes(&mut mds, 1), Default::default());

    // Reported again before the OSD deleted them: awaiting their delete tasks, not new orphans.
    clock.advance(GRACE + 1);
    pass(&mut mds, 0, 4, &later, &[object, uo], c + 100);
    assert_eq!(orphans(&mds).chunks_deleted, 2);
    assert_eq!(orphans(&mds).chunks_pending, 0);
    // Done: the tasks go; a pass without them finds nothing.
    beat(&mut mds, 0, &[u1], &[uo]);
    assert_eq!(deletes(&mut mds, 0), Default::default());
    let rest: Vec<(u64, &[u32])> = later.iter().copied().filter(|&(s, _)| s != u1).collect();
    pass(&mut mds, 0, 5, &rest, &[object], c + 100);
    assert_eq!(orphans(&mds).chunks_pending, 0);

    // `above` was past the counter all along: never a candidate, however long.
    assert!(!deletes(&mut mds, 0).0.contains_key(&above));
    // Once a pass's first page moved the counter past it, the next passes judge it.
    clock.advance(GRACE + 1);
    pass(&mut mds, 0, 6, &rest, &[object], above);
    assert_eq!(
        orphans(&mds).chunks_pending,
        0,
        "not in the pass that moved the counter"
    );
    pass(&mut mds, 0, 7, &rest, &[object], above);
    assert_eq!(orphans(&mds).chunks_pending, 1);
    clock.advance(GRACE + 1);
    pass(&mut mds, 0, 8, &rest, &[object], above);
    assert_eq!(deletes(&mut mds, 0).0, BTreeMap::from([(above, vec![0])]));

    // The known ones never had a task, and still read.
    assert!(mds.get_segment(committed).is_ok());
    assert!(mds.get_segment(pending).is_ok());
}

#[test]
fn a_restarted_mds_learns_candidates_again_and_drops_passes_from_before() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mds.sqlite");
    let clock = ManualClock::new(1_700_000_000_000);
    let mut mds = open(&path, &clock);
    for i in 0..3 {
        mds.register_osd(&reg(i, if i == 1 { 500 } else { 0 }))
            .unwrap();
    }
    let orphan: &[(u64, &[u32])] = &[(400, &[1])];
    pass(&mut mds, 1, 1, orphan, &[], 500);
    assert_eq!(orphans(&mds).chunks_pending, 1);
    // A pass of two pages begun before the restart.
    let page = |page: u32, last: bool| InventoryPage {
        osd_id: 1,
        pass: 2,
        page,
        last,
        max_segment_id: 500,
        segments: vec![HeldSegment {
            segment_id: 400,
            chunks: vec![1],
        }],
        objects: Vec::new(),
    };
    assert!(!mds.report_inventory(&page(0, false)).unwrap());
    drop(mds);

    clock.advance(GRACE + 1);
    let mut mds = open(&path, &clock);
    assert_eq!(orphans(&mds), OrphanCounts::default(), "memory only");
    assert!(
        mds.report_inventory(&page(1, true)).unwrap(),
        "the rest of a pass from before the start is dropped"
    );
    // Over the grace since the first sighting before the restart, but this MDS saw it once.
    pass(&mut mds, 1, 3, orphan, &[], 500);
    assert_eq!(deletes(&mut mds, 1), Default::default());
    assert_eq!(orphans(&mds).chunks_pending, 1);
    clock.advance(GRACE + 1);
    pass(&mut mds, 1, 4, orphan, &[], 500);
    assert_eq!(deletes(&mut mds, 1).0, BTreeMap::from([(400, vec![1])]));

    // Out of order, and bad input: one line each, nothing panics.
    assert!(mds.report_inventory(&page(5, true)).unwrap());
    let e = mds
        .report_inventory(&InventoryPage {
            osd_id: 77,
            ..InventoryPage::default()
        })
        .unwrap_err();
    assert!(
        matches!(e, MdsError::NotFound(ref m) if m.contains("register first")),
        "{e}"
    );
    let e = mds
        .report_inventory(&InventoryPage {
            osd_id: 1,
            segments: vec![HeldSegment {
                segment_id: 3,
                chunks: vec![9],
            }],
            ..InventoryPage::default()
        })
        .unwrap_err();
    assert!(e.to_string().contains("chunks are 0..3"), "{e}");
    let e = mds
        .report_inventory(&InventoryPage {
            osd_id: 1,
            objects: vec![1; INVENTORY_PAGE_ENTRIES_MAX + 1],
            ..InventoryPage::default()
        })
        .unwrap_err();
    assert!(matches!(e, MdsError::InvalidArgument(_)), "{e}");
}

#[test]
fn after_a_restore_new_ids_wait_for_every_osds_largest() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mds.sqlite");
    let clock = ManualClock::new(1_700_000_000_000);
    let mut mds = open(&path, &clock);
    for i in 0..4 {
        mds.register_osd(&reg(i, 0)).unwrap();
    }
    mds.store_mut()
        .apply(&[Mutation::SetCounter {
            name: COUNTER_RESTORED,
            value: 1,
        }])
        .unwrap();
    drop(mds);
    let mut mds = open(&path, &clock);
    // An OSD registered after the backup: unknown, told to register again, and waited for.
    let e = mds
        .heartbeat(&Heartbeat {
            osd_id: 9,
            ..Heartbeat::default()
        })
        .unwrap_err();
    assert!(matches!(e, MdsError::NotFound(_)), "{e}");
    let f = mds.create_file("/x").unwrap();
    let e = mds.allocate_segments(f, &[100]).unwrap_err();
    assert!(e.is_retryable(), "{e}");
    assert!(
        e.to_string().contains("restored from a backup")
            && e.to_string()
                .contains("osd-0, osd-1, osd-2, osd-3, OSD id 9, unknown to the restored metadata"),
        "{e}"
    );
    assert!(mds
        .create_robust_file("/r", robust_params(), 2048, &[robust_object(0)])
        .unwrap_err()
        .is_retryable());
    // Heartbeat replies ask for inventories; a first page and a registration report.
    assert!(beat(&mut mds, 0, &[], &[]).inventory_wanted);
    pass(&mut mds, 0, 1, &[(700, &[0])], &[], 700);
    assert!(!beat(&mut mds, 0, &[], &[]).inventory_wanted);
    mds.register_osd(&reg(1, 900)).unwrap();
    assert_eq!(mds.register_osd(&reg(9, 950)).unwrap().osd_id, 9);
    let e = mds.allocate_segments(f, &[100]).unwrap_err();
    assert!(e.to_string().contains("osd-2, osd-3"), "{e}");
    // osd-3 is silent: past down_after_ms it holds nothing up; osd-2 reports.
    for _ in 0..4 {
        clock.advance(1_000);
        for i in [0, 1, 2, 9] {
            beat(&mut mds, i, &[], &[]);
        }
        mds.tick().unwrap();
    }
    let e = mds.allocate_segments(f, &[100]).unwrap_err();
    assert!(e.to_string().contains("(1 not yet: osd-2)"), "{e}");
    pass(&mut mds, 2, 1, &[], &[800], 800);
    let s = mds.allocate_segments(f, &[100]).unwrap();
    assert_eq!(s[0].segment_id, 951, "past every id the OSDs reported");
    assert!(!beat(&mut mds, 3, &[], &[]).inventory_wanted);
    drop(mds);
    let store = SqliteStore::open(&path).unwrap();
    use crate::store::MetadataStore;
    assert_eq!(
        store.counter(COUNTER_RESTORED).unwrap(),
        0,
        "the mark is cleared"
    );
    assert_eq!(store.counter(COUNTER_SEGMENT).unwrap(), 951);
}
