//! The MDS logic on a manual clock over a real SQLite store: registration, placement, the put
//! protocol, heartbeat tasks, down/promotion, out/recovery, catch-up, restart durability.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

use crate::engine::*;
use crate::store::SqliteStore;
use ecstack_mds_proto::*;

const K: u32 = 2;
const M: u32 = 1;
const SEG: u64 = 1 << 20;
const DOWN: u64 = 3_000;
const OUT: u64 = 10_000;
const GRACE: u64 = 60_000;

fn settings() -> MdsSettings {
    MdsSettings {
        params: ClusterParams {
            cluster_id: "test".into(),
            code: "rs-vand".into(),
            k: K,
            m: M,
            segment_bytes: SEG,
            heartbeat_ms: 1000,
            down_after_ms: DOWN as u32,
        },
        failure_domain: Some("host".into()),
        out_after_ms: OUT,
        pending_ttl_ms: 60_000,
        default_scheme: UpdateScheme::Fo,
        orphan_grace_ms: GRACE,
    }
}

fn open(path: &Path, clock: &Arc<ManualClock>) -> MdsCore {
    let store = SqliteStore::open(path).unwrap();
    MdsCore::open(Box::new(store), settings(), clock.clone()).unwrap()
}

fn reg(name: &str, host: &str) -> OsdRegistration {
    OsdRegistration {
        name: name.into(),
        addr: format!("127.0.0.1:{}", 7000 + name.len() + host.len()),
        labels: BTreeMap::from([("host".to_string(), host.to_string())]),
        capacity_bytes: 1 << 30,
        used_bytes: 0,
        max_segment_id: 0,
    }
}

fn hb(mds: &mut MdsCore, osd_id: u32) -> HeartbeatReply {
    mds.heartbeat(&Heartbeat {
        osd_id,
        ..Heartbeat::default()
    })
    .unwrap()
}

struct Rig {
    _dir: tempfile::TempDir,
    path: std::path::PathBuf,
    clock: Arc<ManualClock>,
    mds: MdsCore,
    ids: Vec<u32>,
}

fn rig(osds: usize) -> Rig {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mds.sqlite");
    let clock = ManualClock::new(1_700_000_000_000);
    let mut mds = open(&path, &clock);
    let ids = (0..osds)
        .map(|i| {
            mds.register_osd(&reg(&format!("osd-{i}"), &format!("h{i}")))
                .unwrap()
                .osd_id
        })
        .collect();
    Rig {
        _dir: dir,
        path,
        clock,
        mds,
        ids,
    }
}

impl Rig {
    /// Advances the clock by `ms`, heartbeating every OSD except `silent` each second.
    fn run(&mut self, ms: u64, silent: &[u32]) {
        let mut left = ms;
        while left > 0 {
            let step = left.min(1000);
            self.clock.advance(step);
            left -= step;
            for &id in &self.ids.clone() {
                if !silent.contains(&id) {
                    hb(&mut self.mds, id);
                }
            }
            self.mds.tick().unwrap();
        }
    }

    fn put(&mut self, path: &str, lengths: &[u64]) -> Vec<SegmentLayout> {
        self.put_with(path, lengths, None)
    }

    fn put_with(
        &mut self,
        path: &str,
        lengths: &[u64],
        scheme: Option<UpdateScheme>,
    ) -> Vec<SegmentLayout> {
        let f = self.mds.create_file_with(path, scheme).unwrap();
        let segs = self.mds.allocate_segments(f, lengths).unwrap();
        self.mds.commit_file(f, lengths.iter().sum()).unwrap();
        segs
    }

    fn osd_state(&self, id: u32) -> OsdState {
        self.mds
            .status()
            .unwrap()
            .osds
            .iter()
            .find(|o| o.osd_id == id)
            .unwrap()
            .state
    }
}

#[test]
fn a_returning_osd_keeps_its_id_and_updates_its_address() {
    let mut r = rig(3);
    assert_eq!(r.ids, vec![0, 1, 2]);
    let mut again = reg("osd-1", "h1");
    again.addr = "127.0.0.1:9999".into();
    assert_eq!(r.mds.register_osd(&again).unwrap().osd_id, 1);
    let st = r.mds.status().unwrap();
    assert_eq!(st.osds.len(), 3);
    assert_eq!(st.osds[1].addr, "127.0.0.1:9999");
    assert_eq!(st.params.k, K);
    assert!(matches!(
        r.mds.register_osd(&reg("", "h")),
        Err(MdsError::InvalidArgument(_))
    ));
    assert!(matches!(
        r.mds.heartbeat(&Heartbeat { osd_id: 42, ..Heartbeat::default() }),
        Err(MdsError::NotFound(m)) if m.contains("42")
    ));
}

#[test]
fn put_places_on_distinct_osds_and_commit_makes_the_file_visible() {
    let mut r = rig(4);
    let f = r.mds.create_file("dir/a").unwrap();
    // Not visible before commit (close-to-open).
    assert!(matches!(
        r.mds.lookup_file("dir/a"),
        Err(MdsError::NotFound(_))
    ));
    let segs = r.mds.allocate_segments(f, &[SEG, SEG, 10]).unwrap();
    assert_eq!(segs.len(), 3);
    for (i, s) in segs.iter().enumerate() {
        assert_eq!(s.index, i as u32);
        let osds: BTreeSet<u32> = s.chunks.iter().map(|c| c.osd_id).collect();
        assert_eq!(osds.len(), (K + M) as usize);
        assert_eq!(s.primary, s.chunks[0].osd_id);
        assert!(s
            .chunks
            .iter()
            .all(|c| c.state == ChunkState::Healthy && c.up));
    }
    assert!(
        matches!(r.mds.commit_file(f, 5), Err(MdsError::InvalidArgument(m)) if m.contains("hold"))
    );
    r.mds.commit_file(f, 2 * SEG + 10).unwrap();
    r.mds.commit_file(f, 2 * SEG + 10).unwrap(); // a retried commit is fine
    let info = r.mds.lookup_file("dir/a").unwrap();
    assert_eq!(info.size, 2 * SEG + 10);
    assert_eq!(info.segments, segs);
    assert_eq!(r.mds.get_segment(segs[1].segment_id).unwrap(), segs[1]);
    let list = r.mds.list_files("dir/").unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0].segments, 3);
    assert!(r.mds.list_files("other").unwrap().is_empty());
}

#[test]
fn bad_input_gets_one_clear_error() {
    let mut r = rig(3);
    assert!(
        matches!(r.mds.create_file(""), Err(MdsError::InvalidArgument(m)) if m == "path is empty")
    );
    let f = r.mds.create_file("x").unwrap();
    let e = r.mds.allocate_segments(f, &[SEG + 1]).unwrap_err();
    assert!(
        matches!(&e, MdsError::InvalidArgument(m) if m.contains("segment_bytes")),
        "{e}"
    );
    assert!(matches!(
        r.mds.allocate_segments(f, &[0]),
        Err(MdsError::InvalidArgument(_))
    ));
    assert!(matches!(
        r.mds.allocate_segments(f, &[]),
        Err(MdsError::InvalidArgument(_))
    ));
    let many = vec![1u64; MAX_SEGMENTS_PER_CALL + 1];
    assert!(
        matches!(r.mds.allocate_segments(f, &many), Err(MdsError::InvalidArgument(m)) if m.contains("limit"))
    );
    assert!(matches!(
        r.mds.allocate_segments(999, &[1]),
        Err(MdsError::NotFound(_))
    ));
    assert!(matches!(r.mds.get_segment(999), Err(MdsError::NotFound(_))));
    assert!(matches!(
        r.mds.remove_file("nope"),
        Err(MdsError::NotFound(_))
    ));
    assert!(matches!(
        r.mds.mark_stale(999, &[0], 1),
        Err(MdsError::NotFound(_))
    ));
    assert!(matches!(r.mds.osd_out(77), Err(MdsError::NotFound(_))));
    let s = r.mds.allocate_segments(f, &[1]).unwrap();
    assert!(matches!(
        r.mds.mark_stale(s[0].segment_id, &[3], 1),
        Err(MdsError::InvalidArgument(_))
    ));
    assert!(matches!(
        r.mds.mark_stale(s[0].segment_id, &[], 1),
        Err(MdsError::InvalidArgument(m)) if m.contains("no chunk")
    ));
}

#[test]
fn too_few_osds_up_is_one_clear_error() {
    let mut r = rig(2);
    let f = r.mds.create_file("x").unwrap();
    let e = r.mds.allocate_segments(f, &[100]).unwrap_err();
    assert_eq!(
        e,
        MdsError::FailedPrecondition(
            "only 2 OSD(s) are up; a segment needs at least k+1 = 3 (k = 2 data chunks and one parity chunk)".into()
        )
    );
    // A third OSD makes k + 1 = n = 3: every chunk is placed.
    r.ids
        .push(r.mds.register_osd(&reg("osd-2", "h2")).unwrap().osd_id);
    let s = r.put("y", &[100]);
    assert!(s[0].chunks.iter().all(|c| c.state == ChunkState::Healthy));
}

#[test]
fn lost_chunks_are_placed_when_an_osd_comes() {
    // k = 2, m = 2 with 3 OSDs up: chunk 3 is LOST until a fourth OSD registers.
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_700_000_000_000);
    let mut s = settings();
    s.params.m = 2; // n = 4
    let store = SqliteStore::open(&dir.path().join("m.sqlite")).unwrap();
    let mut mds = MdsCore::open(Box::new(store), s, clock.clone()).unwrap();
    for i in 0..3 {
        mds.register_osd(&reg(&format!("osd-{i}"), &format!("h{i}")))
            .unwrap();
    }
    let f = mds.create_file("x").unwrap();
    let seg = mds.allocate_segments(f, &[1000]).unwrap().remove(0);
    assert_eq!(seg.chunks[3].state, ChunkState::Lost);
    assert_eq!(seg.chunks[3].osd_id, NO_OSD);
    assert!(seg.chunks[..3]
        .iter()
        .all(|c| c.state == ChunkState::Healthy));
    mds.commit_file(f, 1000).unwrap();
    assert_eq!(mds.status().unwrap().segments_degraded, 1);
    let new = mds.register_osd(&reg("osd-3", "h3")).unwrap().osd_id;
    mds.tick().unwrap();
    let after = mds.get_segment(seg.segment_id).unwrap();
    assert_eq!(after.chunks[3].osd_id, new);
    assert_eq!(after.chunks[3].state, ChunkState::Recovering);
    assert!(after.epoch > seg.epoch);
    let tasks = mds
        .heartbeat(&Heartbeat {
            osd_id: seg.primary,
            ..Heartbeat::default()
        })
        .unwrap()
        .tasks;
    assert_eq!(
        tasks,
        vec![OsdTask::Recover(RecoverTask {
            layout: after.clone(),
            chunks: vec![3]
        })]
    );
    mds.chunk_recovered(seg.segment_id, 3, new, 0, None)
        .unwrap();
    assert_eq!(
        mds.get_segment(seg.segment_id).unwrap().chunks[3].state,
        ChunkState::Healthy
    );
    let st = mds.status().unwrap();
    assert_eq!(
        (
            st.segments_healthy,
            st.recovery.chunks_total,
            st.recovery.chunks_done
        ),
        (1, 1, 1)
    );
    assert!(st.recovery.finished_ms >= st.recovery.started_ms && st.recovery.started_ms > 0);
}

#[test]
fn replacing_and_removing_files_hands_out_delete_tasks() {
    let mut r = rig(3);
    let old = r.put("p", &[100, 200]);
    let new = r.put("p", &[300]);
    let info = r.mds.lookup_file("p").unwrap();
    assert_eq!((info.size, info.segments.len()), (300, 1));
    assert_eq!(info.segments[0], new[0]);
    assert!(matches!(
        r.mds.get_segment(old[0].segment_id),
        Err(MdsError::NotFound(_))
    ));
    // Every holder of an old chunk gets a DeleteTask for it, until it reports it done.
    for id in r.ids.clone() {
        let tasks = hb(&mut r.mds, id).tasks;
        let mut expected: Vec<OsdTask> = Vec::new();
        for s in &old {
            let chunks: Vec<u32> = s
                .chunks
                .iter()
                .filter(|c| c.osd_id == id)
                .map(|c| c.index)
                .collect();
            if !chunks.is_empty() {
                expected.push(OsdTask::Delete(DeleteTask {
                    segment_id: s.segment_id,
                    chunks,
                }));
            }
        }
        assert_eq!(tasks, expected, "osd {id}");
        assert_eq!(hb(&mut r.mds, id).tasks, expected, "repeated until done");
        let done = r
            .mds
            .heartbeat(&Heartbeat {
                osd_id: id,
                deleted_segments: old.iter().map(|s| s.segment_id).collect(),
                ..Heartbeat::default()
            })
            .unwrap();
        assert!(done.tasks.is_empty());
    }
    r.mds.remove_file("p").unwrap();
    assert!(matches!(r.mds.lookup_file("p"), Err(MdsError::NotFound(_))));
    let holder = new[0].chunks[1].osd_id;
    assert_eq!(
        hb(&mut r.mds, holder).tasks,
        vec![OsdTask::Delete(DeleteTask {
            segment_id: new[0].segment_id,
            chunks: vec![1]
        })]
    );
}

#[test]
fn down_promotes_the_lowest_usable_holder_and_a_return_catches_up() {
    let mut r = rig(4);
    let segs = r.put("f", &[SEG; 6]);
    r.run(2_000, &[]);
    let victim = segs[0].primary;
    // Before down_after_ms nothing changes.
    r.run(DOWN, &[victim]);
    assert_eq!(r.osd_state(victim), OsdState::Up);
    r.run(1_000, &[victim]);
    assert_eq!(r.osd_state(victim), OsdState::Down);
    for s in &segs {
        let now = r.mds.get_segment(s.segment_id).unwrap();
        if s.primary == victim {
            let expect = s.chunks.iter().find(|c| c.osd_id != victim).unwrap().osd_id;
            assert_eq!(
                now.primary, expect,
                "lowest-index usable holder is promoted"
            );
            assert_eq!(now.chunks[0].osd_id, victim, "chunks stay where they are");
            assert!(now.epoch > s.epoch);
        }
        for c in &now.chunks {
            assert_eq!(c.up, c.osd_id != victim);
        }
    }
    assert!(r.mds.status().unwrap().segments_degraded > 0);
    // A write while it is down marks its chunk stale (the primary's MarkStale).
    let hit = segs
        .iter()
        .find(|s| s.chunks.iter().any(|c| c.osd_id == victim))
        .unwrap();
    let idx = hit
        .chunks
        .iter()
        .find(|c| c.osd_id == victim)
        .unwrap()
        .index;
    r.mds.mark_stale(hit.segment_id, &[idx], 7).unwrap();
    // It comes back before out_after_ms: its healthy chunks are usable again, the stale one gets a
    // catch-up RecoverTask (target: the same OSD) at the segment's primary.
    r.ids.retain(|&i| i != victim);
    r.ids.push(victim);
    r.run(1_000, &[]);
    assert_eq!(r.osd_state(victim), OsdState::Up);
    let now = r.mds.get_segment(hit.segment_id).unwrap();
    assert_eq!(now.chunks[idx as usize].state, ChunkState::Stale);
    assert_eq!(now.chunks[idx as usize].osd_id, victim);
    let tasks = hb(&mut r.mds, now.primary).tasks;
    assert!(
        tasks.contains(&OsdTask::Recover(RecoverTask {
            layout: now.clone(),
            chunks: vec![idx]
        })),
        "{tasks:?}"
    );
    // An outdated rebuild is refused; the current one is recorded.
    assert!(matches!(
        r.mds.chunk_recovered(hit.segment_id, idx, victim, 6, None),
        Err(MdsError::FailedPrecondition(_))
    ));
    // A report from an OSD that is not the segment's primary (one deposed by a promotion that
    // still finished an old task) is refused too.
    let deposed = now
        .chunks
        .iter()
        .map(|c| c.osd_id)
        .find(|&o| o != now.primary)
        .unwrap();
    let e = r
        .mds
        .chunk_recovered(hit.segment_id, idx, victim, 7, Some(deposed))
        .unwrap_err();
    assert!(e.to_string().contains("its rebuild is not recorded"), "{e}");
    // The layout carries the version heard of (the stale mark's 7), for whichever OSD is primary.
    assert_eq!(now.version, 7);
    let epoch = r
        .mds
        .chunk_recovered(hit.segment_id, idx, victim, 7, Some(now.primary))
        .unwrap();
    let healed = r.mds.get_segment(hit.segment_id).unwrap();
    assert_eq!(healed.chunks[idx as usize].state, ChunkState::Healthy);
    // The reply's epoch is the new layout's, above every layout that called the chunk stale; a
    // repeated report answers the same.
    assert!(epoch > now.epoch && epoch == healed.epoch);
    assert_eq!(
        r.mds
            .chunk_recovered(hit.segment_id, idx, victim, 7, Some(now.primary))
            .unwrap(),
        epoch
    );
    assert!(hb(&mut r.mds, now.primary)
        .tasks
        .iter()
        .all(|t| !matches!(t, OsdTask::Recover(x) if x.layout.segment_id == hit.segment_id)));
}

#[test]
fn out_moves_chunks_to_new_holders_and_recovery_completes() {
    let mut r = rig(5);
    let segs = r.put("f", &[SEG, SEG, SEG, 1000]);
    let victim = segs[0].chunks[1].osd_id;
    r.run(OUT + 2_000, &[victim]);
    assert_eq!(r.osd_state(victim), OsdState::Out);
    let mut expected_tasks: BTreeMap<u32, Vec<RecoverTask>> = BTreeMap::new();
    let mut total = 0;
    for s in &segs {
        let now = r.mds.get_segment(s.segment_id).unwrap();
        let holders: BTreeSet<u32> = now.chunks.iter().map(|c| c.osd_id).collect();
        assert_eq!(holders.len(), (K + M) as usize, "still distinct");
        assert!(!holders.contains(&victim));
        assert_ne!(now.primary, victim);
        let moved: Vec<u32> = s
            .chunks
            .iter()
            .filter(|c| c.osd_id == victim)
            .map(|c| c.index)
            .collect();
        for &i in &moved {
            assert_eq!(now.chunks[i as usize].state, ChunkState::Recovering);
        }
        if !moved.is_empty() {
            total += moved.len();
            expected_tasks
                .entry(now.primary)
                .or_default()
                .push(RecoverTask {
                    layout: now,
                    chunks: moved,
                });
        }
    }
    assert!(total > 0);
    let st = r.mds.status().unwrap();
    assert_eq!(st.recovery.chunks_total, total as u64);
    assert_eq!(st.recovery.finished_ms, 0);
    for (primary, expected) in &expected_tasks {
        let got: Vec<RecoverTask> = hb(&mut r.mds, *primary)
            .tasks
            .into_iter()
            .filter_map(|t| match t {
                OsdTask::Recover(x) => Some(x),
                OsdTask::Delete(_) | OsdTask::DeleteObject(_) => None,
            })
            .collect();
        assert_eq!(&got, expected);
        for t in got {
            for c in t.chunks {
                let target = t.layout.chunks[c as usize].osd_id;
                r.mds
                    .chunk_recovered(t.layout.segment_id, c, target, 0, None)
                    .unwrap();
                // Reporting twice is harmless.
                r.mds
                    .chunk_recovered(t.layout.segment_id, c, target, 0, None)
                    .unwrap();
                assert!(matches!(
                    r.mds
                        .chunk_recovered(t.layout.segment_id, c, victim, 0, None),
                    Err(MdsError::FailedPrecondition(_))
                ));
            }
        }
    }
    let st = r.mds.status().unwrap();
    assert_eq!(st.recovery.chunks_done, total as u64);
    assert!(st.recovery.finished_ms > 0);
    assert_eq!(st.segments_healthy, segs.len() as u64);
    assert!(st.recovery.bytes_done > 0);
}

#[test]
fn osd_out_by_command_promotes_and_counts() {
    let mut r = rig(4);
    let segs = r.put("f", &[SEG, SEG]);
    let victim = segs[0].primary;
    let on_victim = segs
        .iter()
        .flat_map(|s| &s.chunks)
        .filter(|c| c.osd_id == victim)
        .count();
    assert_eq!(r.mds.osd_out(victim).unwrap(), on_victim as u64);
    assert_ne!(
        r.mds.get_segment(segs[0].segment_id).unwrap().primary,
        victim
    );
    // Heartbeats from an out OSD do not bring it back; registering again does.
    hb(&mut r.mds, victim);
    assert_eq!(r.osd_state(victim), OsdState::Out);
    r.mds
        .register_osd(&reg(&format!("osd-{victim}"), &format!("h{victim}")))
        .unwrap();
    assert_eq!(r.osd_state(victim), OsdState::Up);
}

#[test]
fn a_restart_loses_no_acknowledged_mutation() {
    let mut r = rig(4);
    let segs = r.put("keep", &[SEG, 77]);
    let pending = r.mds.create_file("pending").unwrap();
    r.mds.allocate_segments(pending, &[5]).unwrap();
    r.mds.mark_stale(segs[1].segment_id, &[2], 3).unwrap();
    let victim = segs[0].chunks[2].osd_id;
    r.mds.osd_out(victim).unwrap();
    let before = r.mds.status().unwrap();
    let layouts: Vec<SegmentLayout> = segs
        .iter()
        .map(|s| r.mds.get_segment(s.segment_id).unwrap())
        .collect();
    let path = r.path.clone();
    // The old MDS goes first (its store lock with it): a core on a scratch store stands in.
    let scratch = path.with_file_name("scratch.sqlite");
    drop(std::mem::replace(&mut r.mds, open(&scratch, &r.clock)));
    r.mds = open(&path, &r.clock);
    let after = r.mds.status().unwrap();
    assert_eq!(
        after
            .osds
            .iter()
            .map(|o| (o.osd_id, o.state))
            .collect::<Vec<_>>(),
        before
            .osds
            .iter()
            .map(|o| (o.osd_id, o.state))
            .collect::<Vec<_>>()
    );
    assert_eq!(
        (after.files, after.bytes, after.recovery.clone()),
        (before.files, before.bytes, before.recovery.clone())
    );
    for l in &layouts {
        assert_eq!(&r.mds.get_segment(l.segment_id).unwrap(), l);
    }
    assert_eq!(r.mds.lookup_file("keep").unwrap().size, SEG + 77);
    // The pending file is still pending: committing it now works.
    r.mds.commit_file(pending, 5).unwrap();
    assert_eq!(r.mds.lookup_file("pending").unwrap().size, 5);
    // New ids never reuse old ones.
    let f = r.mds.create_file("n").unwrap();
    assert!(f > pending);
    // After a restart OSDs get a full down_after_ms to heartbeat again.
    r.clock.advance(DOWN - 1);
    r.mds.tick().unwrap();
    assert!(r
        .mds
        .status()
        .unwrap()
        .osds
        .iter()
        .filter(|o| o.osd_id != victim)
        .all(|o| o.state == OsdState::Up));
}

#[test]
fn an_uncommitted_file_expires() {
    let mut r = rig(3);
    let f = r.mds.create_file("tmp").unwrap();
    let s = r.mds.allocate_segments(f, &[10]).unwrap().remove(0);
    r.run(61_000, &[]);
    assert!(matches!(
        r.mds.commit_file(f, 10),
        Err(MdsError::NotFound(_))
    ));
    let holder = s.chunks[0].osd_id;
    assert!(hb(&mut r.mds, holder)
        .tasks
        .contains(&OsdTask::Delete(DeleteTask {
            segment_id: s.segment_id,
            chunks: vec![0]
        })));
}

/// A file whose put failed (created, segments allocated, never committed) holds nothing to
/// rebuild from: its segments are neither counted in the health nor handed out for recovery
/// until the file is committed, so a failed put cannot keep the cluster from full redundancy.
#[test]
fn segments_of_uncommitted_files_are_not_recovered_until_committed() {
    let mut r = rig(5);
    let f = r.mds.create_file("half").unwrap();
    let segs = r.mds.allocate_segments(f, &[SEG, SEG]).unwrap();
    let victim = segs[0].chunks[0].osd_id;
    r.run(OUT + 2_000, &[victim]);
    assert_eq!(r.osd_state(victim), OsdState::Out);
    let st = r.mds.status().unwrap();
    assert_eq!(
        (
            st.segments_recovering,
            st.segments_degraded,
            st.segments_lost
        ),
        (0, 0, 0),
        "{st:?}"
    );
    let recover_tasks = |r: &mut Rig| -> usize {
        r.ids
            .clone()
            .into_iter()
            .map(|id| {
                hb(&mut r.mds, id)
                    .tasks
                    .iter()
                    .filter(|t| matches!(t, OsdTask::Recover(_)))
                    .count()
            })
            .sum()
    };
    assert_eq!(recover_tasks(&mut r), 0, "nothing to rebuild from yet");
    // Committed, the moved chunks are recovered like any other.
    r.mds.commit_file(f, 2 * SEG).unwrap();
    assert!(r.mds.status().unwrap().segments_recovering > 0);
    assert!(recover_tasks(&mut r) > 0);
}

// A core held up (a slow commit) gets to heartbeats late; those that had reached the MDS count
// from their arrival, so its next failure-detector round declares no OSD down.
#[test]
fn heartbeats_count_from_their_arrival_not_from_when_the_core_got_to_them() {
    let mut r = rig(3);
    r.run(2_000, &[]);
    // Every OSD's heartbeat arrives each second while the core is held up for 5 s; only OSD 2
    // stops sending. Then the failure detector runs before the queued heartbeats.
    let mut arrivals = std::collections::HashMap::new();
    for _ in 0..5 {
        r.clock.advance(1_000);
        for &id in &r.ids[..2] {
            arrivals.insert(id, r.clock.now_ms());
        }
    }
    r.mds.note_arrivals(&arrivals);
    r.mds.tick().unwrap();
    assert_eq!(r.osd_state(r.ids[0]), OsdState::Up);
    assert_eq!(r.osd_state(r.ids[1]), OsdState::Up);
    assert_eq!(r.osd_state(r.ids[2]), OsdState::Down, "silent for 5 s");
}

// A heartbeat that changes no state commits nothing (its bytes are held in memory and shown by
// status); one that brings a down OSD back commits the state with them.
#[test]
fn heartbeats_commit_only_state_changes() {
    let mut r = rig(3);
    let id = r.ids[0];
    let stored = |r: &Rig| {
        let store = SqliteStore::peek(&r.path);
        let o = crate::store::MetadataStore::osds(&store)
            .unwrap()
            .into_iter()
            .find(|o| o.osd_id == id)
            .unwrap();
        (o.state, o.used_bytes)
    };
    let beat = |r: &mut Rig, used_bytes: u64| {
        r.mds
            .heartbeat(&Heartbeat {
                osd_id: id,
                used_bytes,
                ..Heartbeat::default()
            })
            .unwrap();
    };
    beat(&mut r, 4096);
    assert_eq!(
        stored(&r),
        (OsdState::Up, 0),
        "no commit for a routine heartbeat"
    );
    let shown = |r: &Rig| {
        let st = r.mds.status().unwrap();
        st.osds.iter().find(|o| o.osd_id == id).unwrap().used_bytes
    };
    assert_eq!(shown(&r), 4096);
    r.run(DOWN + 1_000, &[id]);
    assert_eq!(r.osd_state(id), OsdState::Down);
    assert_eq!(
        stored(&r),
        (OsdState::Down, 4096),
        "the down state carries the last bytes"
    );
    beat(&mut r, 8192);
    assert_eq!(stored(&r), (OsdState::Up, 8192), "back up: committed");
    assert_eq!(shown(&r), 8192);
}

#[test]
fn osd_n_takes_id_n_whatever_the_order() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_700_000_000_000);
    let mut mds = open(&dir.path().join("m.sqlite"), &clock);
    let mut id = |name: &str| mds.register_osd(&reg(name, "h")).unwrap().osd_id;
    assert_eq!(id("osd-2"), 2);
    assert_eq!(id("osd-0"), 0);
    // Other names take the counter's next free id; `osd-01` is not `osd-1`.
    assert_eq!(id("spare"), 1);
    assert_eq!(id("osd-01"), 3);
    // `osd-1`'s id is taken: it gets the next free one; returning OSDs keep theirs.
    assert_eq!(id("osd-1"), 4);
    assert_eq!(id("osd-2"), 2);
    assert_eq!(id("spare"), 1);
    assert_eq!(id("osd-4"), 5);
}

#[test]
fn osd_out_is_refused_when_no_osd_can_take_its_chunks() {
    // k = 2, m = 1 on 3 OSDs: every OSD holds a chunk of every segment.
    let mut r = rig(3);
    let segs = r.put("f", &[SEG]);
    let victim = segs[0].chunks[1].osd_id;
    let e = r.mds.osd_out(victim).unwrap_err();
    match &e {
        MdsError::FailedPrecondition(m) => {
            assert!(m.contains("add an OSD first"), "{m}");
            assert!(m.contains(&format!("OSD {victim} (osd-{victim})")), "{m}");
        }
        other => panic!("expected FailedPrecondition, got {other:?}"),
    }
    // Nothing changed: the OSD is up and the segment's layout is as it was.
    assert_eq!(r.osd_state(victim), OsdState::Up);
    assert_eq!(r.mds.get_segment(segs[0].segment_id).unwrap(), segs[0]);
    // With a fourth OSD the chunk has somewhere to go.
    r.ids
        .push(r.mds.register_osd(&reg("osd-3", "h3")).unwrap().osd_id);
    assert_eq!(r.mds.osd_out(victim).unwrap(), 1);
    assert_eq!(r.osd_state(victim), OsdState::Out);
}

#[test]
fn a_down_osd_goes_out_when_a_down_spare_could_take_its_chunks_later() {
    // k = 2, m = 1 on 4 OSDs: one OSD holds no chunk of the segment. Both it and a holder go
    // down; the holder's chunks are unusable already, so taking it out lowers nothing: it goes
    // out, its chunk waits LOST for the spare, and is placed when the spare is back.
    let mut r = rig(4);
    let segs = r.put("f", &[SEG]);
    let holders: Vec<u32> = segs[0].chunks.iter().map(|c| c.osd_id).collect();
    let spare = *r.ids.iter().find(|i| !holders.contains(i)).unwrap();
    let victim = holders[1];
    r.run(DOWN + 2_000, &[spare, victim]);
    assert_eq!(r.osd_state(victim), OsdState::Down);
    assert_eq!(r.osd_state(spare), OsdState::Down);
    assert_eq!(r.mds.osd_out(victim).unwrap(), 1);
    assert_eq!(r.osd_state(victim), OsdState::Out);
    let l = r.mds.get_segment(segs[0].segment_id).unwrap();
    assert_eq!(l.chunks[1].state, ChunkState::Lost);
    // The spare comes back: the chunk is placed on it, to be rebuilt.
    r.run(2_000, &[victim]);
    let l = r.mds.get_segment(segs[0].segment_id).unwrap();
    assert_eq!(l.chunks[1].osd_id, spare);
    assert_eq!(l.chunks[1].state, ChunkState::Recovering);
}

#[test]
fn a_down_osd_stays_in_when_no_osd_could_ever_take_its_chunks() {
    // k = 2, m = 1 on 3 OSDs: every OSD still in holds a chunk of the segment.
    let mut r = rig(3);
    let segs = r.put("f", &[SEG]);
    let victim = segs[0].chunks[0].osd_id;
    r.run(DOWN + 2_000, &[victim]);
    assert_eq!(r.osd_state(victim), OsdState::Down);
    match r.mds.osd_out(victim).unwrap_err() {
        MdsError::FailedPrecondition(m) => {
            assert!(
                m.contains("every OSD still in") && m.contains("add an OSD first"),
                "{m}"
            )
        }
        other => panic!("expected FailedPrecondition, got {other:?}"),
    }
    assert_eq!(r.osd_state(victim), OsdState::Down);
}

#[test]
fn every_layout_carries_its_files_scheme() {
    let mut r = rig(4);
    let segs = r.put_with("plr", &[SEG, SEG, 10], Some(UpdateScheme::Plr));
    assert!(segs.iter().all(|s| s.scheme == UpdateScheme::Plr));
    let f = segs[0].file_id;
    let fo = r.put("fo", &[SEG]);
    assert_eq!(fo[0].scheme, UpdateScheme::Fo, "the cluster's default");
    let info = r.mds.lookup_file("plr").unwrap();
    assert_eq!(info.scheme, UpdateScheme::Plr);
    assert_eq!(info.segments, segs);
    assert_eq!(r.mds.lookup_file("fo").unwrap().scheme, UpdateScheme::Fo);
    assert_eq!(
        r.mds.get_segment(segs[1].segment_id).unwrap().scheme,
        UpdateScheme::Plr
    );
    // After a promotion (the primary of segment 0 is down) and once it is out, the new layouts
    // and the recover tasks carry the scheme too.
    let victim = segs[0].primary;
    r.run(2_000, &[]);
    r.run(DOWN + 1_000, &[victim]);
    assert_eq!(r.osd_state(victim), OsdState::Down);
    let promoted = r.mds.get_segment(segs[0].segment_id).unwrap();
    assert_ne!(promoted.primary, victim);
    assert_eq!(promoted.scheme, UpdateScheme::Plr);
    r.run(OUT, &[victim]);
    assert_eq!(r.osd_state(victim), OsdState::Out);
    let mut recover = 0;
    for id in r.ids.clone() {
        for t in hb(&mut r.mds, id).tasks {
            if let OsdTask::Recover(t) = t {
                let want = if t.layout.file_id == f {
                    UpdateScheme::Plr
                } else {
                    UpdateScheme::Fo
                };
                assert_eq!(t.layout.scheme, want, "segment {}", t.layout.segment_id);
                recover += 1;
            }
        }
    }
    assert!(recover > 0, "the out OSD held chunks to rebuild");
}

#[test]
fn a_files_scheme_is_fixed_at_creation() {
    let mut r = rig(3);
    r.put_with("p", &[100], Some(UpdateScheme::ParityLog));
    // Another scheme for the path is refused, with one line.
    let e = r
        .mds
        .create_file_with("p", Some(UpdateScheme::Fo))
        .unwrap_err();
    assert!(matches!(e, MdsError::FailedPrecondition(_)), "{e:?}");
    assert_eq!(
        e.to_string(),
        "changing a file's scheme is refused: p is codfs-pl, this put asks for fo (remove the file first)"
    );
    // The same scheme, or none (the put keeps the file's), replaces the file.
    for scheme in [Some(UpdateScheme::ParityLog), None] {
        let segs = r.put_with("p", &[200], scheme);
        assert_eq!(segs[0].scheme, UpdateScheme::ParityLog);
        assert_eq!(
            r.mds.lookup_file("p").unwrap().scheme,
            UpdateScheme::ParityLog
        );
    }
    // Two puts racing for a new path under different schemes: the second commit is refused.
    let a = r.mds.create_file_with("q", Some(UpdateScheme::Fl)).unwrap();
    let b = r
        .mds
        .create_file_with("q", Some(UpdateScheme::Plr))
        .unwrap();
    for id in [a, b] {
        r.mds.allocate_segments(id, &[10]).unwrap();
    }
    r.mds.commit_file(a, 10).unwrap();
    let e = r.mds.commit_file(b, 10).unwrap_err().to_string();
    assert!(
        e.starts_with("changing a file's scheme is refused: q is fl"),
        "{e}"
    );
    assert_eq!(r.mds.lookup_file("q").unwrap().scheme, UpdateScheme::Fl);
    // Once removed, the path may take another scheme.
    r.mds.remove_file("p").unwrap();
    assert!(r.mds.create_file_with("p", Some(UpdateScheme::Fo)).is_ok());
}

#[test]
fn a_new_file_without_a_scheme_takes_the_clusters_default() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_700_000_000_000);
    let s = MdsSettings {
        default_scheme: UpdateScheme::Plr,
        ..settings()
    };
    let store = SqliteStore::open(&dir.path().join("m.sqlite")).unwrap();
    let mut mds = MdsCore::open(Box::new(store), s, clock.clone()).unwrap();
    for i in 0..3 {
        mds.register_osd(&reg(&format!("osd-{i}"), &format!("h{i}")))
            .unwrap();
    }
    let f = mds.create_file("d").unwrap();
    assert_eq!(
        mds.allocate_segments(f, &[5]).unwrap()[0].scheme,
        UpdateScheme::Plr
    );
    let g = mds.create_file_with("e", Some(UpdateScheme::Fo)).unwrap();
    assert_eq!(
        mds.allocate_segments(g, &[5]).unwrap()[0].scheme,
        UpdateScheme::Fo
    );
}

#[test]
fn heartbeats_carry_reserve_log_bytes_and_merges_to_status_without_a_commit() {
    let mut r = rig(3);
    let id = r.ids[1];
    let usage = |r: &Rig| {
        let st = r.mds.status().unwrap();
        let o = st.osds.into_iter().find(|o| o.osd_id == id).unwrap();
        (o.used_bytes, o.reserve_bytes, o.log_bytes, o.merges)
    };
    assert_eq!(usage(&r), (0, 0, 0, 0), "nothing before a heartbeat");
    for (used, reserve, log, merges) in [(4096, 8 << 20, 12_288, 3), (8192, 4 << 20, 0, 5)] {
        r.mds
            .heartbeat(&Heartbeat {
                osd_id: id,
                used_bytes: used,
                reserve_bytes: reserve,
                log_bytes: log,
                merges,
                ..Heartbeat::default()
            })
            .unwrap();
        assert_eq!(
            usage(&r),
            (used, reserve, log, merges),
            "the latest heartbeat's"
        );
    }
    // Held in memory: the stored record did not change (no commit per heartbeat).
    let store = SqliteStore::peek(&r.path);
    let stored = crate::store::MetadataStore::osds(&store)
        .unwrap()
        .into_iter()
        .find(|o| o.osd_id == id)
        .unwrap();
    assert_eq!(stored.used_bytes, 0);
}

// ---- the POSIX namespace (schema version 3)

fn names_in(r: &Rig, dir: u64) -> Vec<String> {
    r.mds
        .read_dir(dir, b"", 0)
        .unwrap()
        .0
        .into_iter()
        .map(|e| String::from_utf8(e.name).unwrap())
        .collect()
}

fn errno_of(e: MdsError) -> Errno {
    match e {
        MdsError::Fs { errno, .. } => errno,
        e => panic!("not an errno: {e:?}"),
    }
}

#[test]
fn directories_files_links_and_symlinks_keep_their_counts() {
    let mut r = rig(3);
    let root = r.mds.get_attr(ROOT_INO).unwrap();
    assert_eq!((root.kind, root.nlink), (FileKind::Dir, 2));
    let d = r.mds.mkdir(ROOT_INO, b"d", 0o750, 1000, 100).unwrap();
    assert_eq!((d.mode, d.uid, d.gid, d.nlink), (0o750, 1000, 100, 2));
    assert_eq!(r.mds.get_attr(ROOT_INO).unwrap().nlink, 3);
    let f = r
        .mds
        .mknod(d.ino, b"f", FileKind::File, 0o640, 1000, 100, 0, true)
        .unwrap();
    assert_eq!((f.kind, f.size, f.nlink), (FileKind::File, 0, 1));
    // Exclusive creation of an existing name fails; a plain one returns the file.
    assert_eq!(
        errno_of(
            r.mds
                .mknod(d.ino, b"f", FileKind::File, 0o600, 0, 0, 0, true)
                .unwrap_err()
        ),
        Errno::Exist
    );
    assert_eq!(
        r.mds
            .mknod(d.ino, b"f", FileKind::File, 0o600, 0, 0, 0, false)
            .unwrap()
            .ino,
        f.ino
    );
    let l = r.mds.link(f.ino, ROOT_INO, b"hard").unwrap();
    assert_eq!(l.nlink, 2);
    let s = r.mds.symlink(ROOT_INO, b"s", b"d/f", 0, 0).unwrap();
    assert_eq!((s.kind, s.size), (FileKind::Symlink, 3));
    assert_eq!(r.mds.read_link(s.ino).unwrap(), b"d/f");
    let fifo = r
        .mds
        .mknod(ROOT_INO, b"p", FileKind::Fifo, 0o600, 0, 0, 0, true)
        .unwrap();
    assert_eq!(fifo.kind, FileKind::Fifo);
    assert_eq!(names_in(&r, ROOT_INO), ["d", "hard", "p", "s"]);
    assert_eq!(r.mds.lookup(ROOT_INO, b"hard").unwrap().ino, f.ino);
    assert!(matches!(
        r.mds.lookup(ROOT_INO, b"nope"),
        Err(MdsError::NotFound(_))
    ));
    // Bad names: one errno each.
    assert_eq!(
        errno_of(r.mds.mkdir(ROOT_INO, b"a/b", 0o755, 0, 0).unwrap_err()),
        Errno::Invalid
    );
    assert_eq!(
        errno_of(r.mds.mkdir(ROOT_INO, b"..", 0o755, 0, 0).unwrap_err()),
        Errno::Invalid
    );
    assert_eq!(
        errno_of(
            r.mds
                .mkdir(ROOT_INO, &[b'x'; 256], 0o755, 0, 0)
                .unwrap_err()
        ),
        Errno::NameTooLong
    );
    assert_eq!(
        errno_of(r.mds.mkdir(f.ino, b"x", 0o755, 0, 0).unwrap_err()),
        Errno::NotDir
    );
    // rmdir of a directory with an entry, unlink of a directory.
    assert_eq!(
        errno_of(r.mds.rmdir(ROOT_INO, b"d").unwrap_err()),
        Errno::NotEmpty
    );
    assert_eq!(
        errno_of(r.mds.unlink(ROOT_INO, b"d").unwrap_err()),
        Errno::IsDir
    );
    assert_eq!(
        errno_of(r.mds.rmdir(ROOT_INO, b"hard").unwrap_err()),
        Errno::NotDir
    );
    // The file goes with its last link.
    r.mds.unlink(d.ino, b"f").unwrap();
    assert_eq!(r.mds.get_attr(f.ino).unwrap().nlink, 1);
    r.mds.unlink(ROOT_INO, b"hard").unwrap();
    assert!(matches!(r.mds.get_attr(f.ino), Err(MdsError::NotFound(_))));
    r.mds.rmdir(ROOT_INO, b"d").unwrap();
    assert_eq!(r.mds.get_attr(ROOT_INO).unwrap().nlink, 2);
    // A set-group-ID directory hands its group (and, to directories, the bit) down.
    let g = r.mds.mkdir(ROOT_INO, b"g", 0o2775, 0, 55).unwrap();
    let sub = r.mds.mkdir(g.ino, b"sub", 0o755, 7, 7).unwrap();
    assert_eq!((sub.gid, sub.mode), (55, 0o2755));
    let file = r
        .mds
        .mknod(g.ino, b"f", FileKind::File, 0o644, 7, 7, 0, true)
        .unwrap();
    assert_eq!((file.gid, file.mode), (55, 0o644));
}

#[test]
fn renames_are_atomic_replace_targets_and_refuse_loops() {
    let mut r = rig(3);
    let a = r.mds.mkdir(ROOT_INO, b"a", 0o755, 0, 0).unwrap();
    let b = r.mds.mkdir(ROOT_INO, b"b", 0o755, 0, 0).unwrap();
    let sub = r.mds.mkdir(a.ino, b"sub", 0o755, 0, 0).unwrap();
    let x = r
        .mds
        .mknod(a.ino, b"x", FileKind::File, 0o644, 0, 0, 0, true)
        .unwrap();
    let y = r
        .mds
        .mknod(b.ino, b"y", FileKind::File, 0o644, 0, 0, 0, true)
        .unwrap();
    let flags = RenameFlags::default();
    // A directory into another: link counts move with it.
    r.mds.rename(a.ino, b"sub", b.ino, b"sub2", flags).unwrap();
    assert_eq!(r.mds.get_attr(a.ino).unwrap().nlink, 2);
    assert_eq!(r.mds.get_attr(b.ino).unwrap().nlink, 3);
    assert_eq!(r.mds.lookup(b.ino, b"sub2").unwrap().ino, sub.ino);
    // Not below itself.
    assert_eq!(
        errno_of(
            r.mds
                .rename(ROOT_INO, b"b", sub.ino, b"loop", flags)
                .unwrap_err()
        ),
        Errno::Invalid
    );
    // A file over a file: the target's inode goes.
    r.mds.rename(a.ino, b"x", b.ino, b"y", flags).unwrap();
    assert_eq!(r.mds.lookup(b.ino, b"y").unwrap().ino, x.ino);
    assert!(matches!(r.mds.get_attr(y.ino), Err(MdsError::NotFound(_))));
    // Kinds must agree; a directory replaces only an empty one.
    let z = r.mds.mkdir(a.ino, b"z", 0o755, 0, 0).unwrap();
    assert_eq!(
        errno_of(r.mds.rename(b.ino, b"y", a.ino, b"z", flags).unwrap_err()),
        Errno::IsDir
    );
    assert_eq!(
        errno_of(r.mds.rename(a.ino, b"z", b.ino, b"y", flags).unwrap_err()),
        Errno::NotDir
    );
    r.mds
        .mknod(sub.ino, b"in", FileKind::File, 0o644, 0, 0, 0, true)
        .unwrap();
    assert_eq!(
        errno_of(
            r.mds
                .rename(a.ino, b"z", b.ino, b"sub2", flags)
                .unwrap_err()
        ),
        Errno::NotEmpty
    );
    r.mds.rename(b.ino, b"sub2", a.ino, b"z", flags).unwrap();
    assert!(matches!(r.mds.get_attr(z.ino), Err(MdsError::NotFound(_))));
    assert_eq!(r.mds.get_attr(a.ino).unwrap().nlink, 3);
    assert_eq!(r.mds.get_attr(b.ino).unwrap().nlink, 2);
    // NOREPLACE and EXCHANGE.
    let noreplace = RenameFlags {
        noreplace: true,
        ..flags
    };
    r.mds
        .mknod(a.ino, b"w", FileKind::File, 0o644, 0, 0, 0, true)
        .unwrap();
    assert_eq!(
        errno_of(
            r.mds
                .rename(b.ino, b"y", a.ino, b"w", noreplace)
                .unwrap_err()
        ),
        Errno::Exist
    );
    let exchange = RenameFlags {
        exchange: true,
        ..flags
    };
    r.mds.rename(b.ino, b"y", a.ino, b"z", exchange).unwrap();
    assert_eq!(r.mds.lookup(a.ino, b"z").unwrap().ino, x.ino);
    assert_eq!(r.mds.lookup(b.ino, b"y").unwrap().ino, sub.ino);
    assert_eq!(r.mds.get_attr(a.ino).unwrap().nlink, 2);
    assert_eq!(r.mds.get_attr(b.ino).unwrap().nlink, 3);
    // Every change above survived as one batch each: a reopened MDS sees the same tree.
    let path = r.path.clone();
    let clock = r.clock.clone();
    drop(r.mds);
    let mds = open(&path, &clock);
    assert_eq!(mds.lookup(b.ino, b"y").unwrap().ino, sub.ino);
    assert_eq!(mds.list_files("").unwrap().len(), 3);
}

#[test]
fn a_file_grows_shrinks_and_commits_its_size_and_version_in_one_setattr() {
    let mut r = rig(3);
    for i in 0..3 {
        let id = r.ids[i];
        hb(&mut r.mds, id);
    }
    let f = r
        .mds
        .mknod(ROOT_INO, b"f", FileKind::File, 0o644, 0, 0, 0, true)
        .unwrap();
    assert_eq!(f.version, 1);
    // Growing: two new segments, then the commit of the size.
    let segs = r.mds.grow_file(f.ino, 0, &[SEG, 100]).unwrap();
    assert_eq!(segs.len(), 2);
    assert_eq!(
        r.mds.open_file(f.ino).unwrap().1.segments.len(),
        0,
        "not committed yet"
    );
    let bad = SetAttr {
        size: Some(SEG + 99),
        data_changed: true,
        ..SetAttr::default()
    };
    let e = r.mds.set_attr(f.ino, &bad).unwrap_err();
    assert!(
        matches!(&e, MdsError::InvalidArgument(m) if m.contains("segment 1")),
        "{e}"
    );
    let a = r
        .mds
        .set_attr(
            f.ino,
            &SetAttr {
                size: Some(SEG + 100),
                data_changed: true,
                ..SetAttr::default()
            },
        )
        .unwrap();
    assert_eq!((a.size, a.version), (SEG + 100, 2));
    let (attr, info) = r.mds.open_file(f.ino).unwrap();
    assert_eq!(attr, a);
    assert_eq!(info.segments.len(), 2);
    assert_eq!(r.mds.lookup_file("/f").unwrap().size, SEG + 100);
    // The last segment rewritten longer, recorded with a new epoch in the same SetAttr.
    let last = info.segments[1].clone();
    let a = r
        .mds
        .set_attr(
            f.ino,
            &SetAttr {
                size: Some(SEG + 500),
                resized: vec![(last.segment_id, 500)],
                data_changed: true,
                ..SetAttr::default()
            },
        )
        .unwrap();
    assert_eq!(a.version, 3);
    let now = r.mds.get_segment(last.segment_id).unwrap();
    assert_eq!(now.length, 500);
    assert!(now.epoch > last.epoch);
    // Cut to one segment: the second goes (with delete tasks for its chunks).
    let a = r
        .mds
        .set_attr(
            f.ino,
            &SetAttr {
                size: Some(SEG),
                ..SetAttr::default()
            },
        )
        .unwrap();
    assert_eq!(a.size, SEG);
    assert!(matches!(
        r.mds.get_segment(last.segment_id),
        Err(MdsError::NotFound(_))
    ));
    let tasks: usize = r
        .ids
        .clone()
        .iter()
        .map(|&id| {
            hb(&mut r.mds, id)
                .tasks
                .iter()
                .filter(|t| matches!(t, OsdTask::Delete(d) if d.segment_id == last.segment_id))
                .count()
        })
        .sum();
    assert_eq!(tasks, 3);
    // Growing from below the committed end is refused; mode, owner and times are kept.
    assert!(r.mds.grow_file(f.ino, 0, &[1]).is_err());
    let a = r
        .mds
        .set_attr(
            f.ino,
            &SetAttr {
                mode: Some(0o4755),
                uid: Some(5),
                gid: Some(6),
                mtime: Some(SetTime::Ns(42)),
                ..SetAttr::default()
            },
        )
        .unwrap();
    assert_eq!(
        (a.mode, a.uid, a.gid, a.mtime_ns, a.version),
        (0o4755, 5, 6, 42, 4)
    );
    // xattrs.
    r.mds
        .set_xattr(f.ino, b"user.k", b"v", true, false)
        .unwrap();
    assert_eq!(
        errno_of(
            r.mds
                .set_xattr(f.ino, b"user.k", b"w", true, false)
                .unwrap_err()
        ),
        Errno::Exist
    );
    assert_eq!(
        errno_of(
            r.mds
                .set_xattr(f.ino, b"user.n", b"w", false, true)
                .unwrap_err()
        ),
        Errno::NoData
    );
    assert_eq!(r.mds.get_xattr(f.ino, b"user.k").unwrap(), b"v");
    assert_eq!(r.mds.list_xattr(f.ino).unwrap(), vec![b"user.k".to_vec()]);
    r.mds.remove_xattr(f.ino, b"user.k").unwrap();
    assert_eq!(
        errno_of(r.mds.get_xattr(f.ino, b"user.k").unwrap_err()),
        Errno::NoData
    );
    // statfs: k/n of the up OSDs' capacity.
    let s = r.mds.stat_fs().unwrap();
    assert_eq!(s.capacity_bytes, 3 * (1 << 30) / 3 * 2);
    assert_eq!(s.name_max, 255);
}

#[test]
fn puts_make_their_directories_and_replace_files_in_place() {
    let mut r = rig(3);
    r.put("/a/b/c", &[10]);
    let a = r.mds.lookup(ROOT_INO, b"a").unwrap();
    let b = r.mds.lookup(a.ino, b"b").unwrap();
    let c = r.mds.lookup(b.ino, b"c").unwrap();
    assert_eq!(
        (a.kind, b.kind, c.kind, c.size),
        (FileKind::Dir, FileKind::Dir, FileKind::File, 10)
    );
    assert_eq!(r.mds.get_attr(ROOT_INO).unwrap().nlink, 3);
    // A replacing put keeps the inode (and its hard links) and bumps its version.
    r.mds.link(c.ino, ROOT_INO, b"alias").unwrap();
    r.put("a/b/c", &[20]);
    let c2 = r.mds.lookup(b.ino, b"c").unwrap();
    assert_eq!((c2.ino, c2.size, c2.version), (c.ino, 20, c.version + 1));
    assert_eq!(r.mds.lookup_file("/alias").unwrap().size, 20);
    // A put through a file, or over a directory, is refused; a path a tree cannot hold too.
    let f = r.mds.create_file("a/b/c/d").unwrap();
    r.mds.allocate_segments(f, &[1]).unwrap();
    assert_eq!(
        errno_of(r.mds.commit_file(f, 1).unwrap_err()),
        Errno::NotDir
    );
    let f = r.mds.create_file("a/b").unwrap();
    r.mds.allocate_segments(f, &[1]).unwrap();
    assert_eq!(errno_of(r.mds.commit_file(f, 1).unwrap_err()), Errno::IsDir);
    for bad in ["a//b", "./x", "a/../b", "/"] {
        assert!(
            matches!(r.mds.create_file(bad), Err(MdsError::InvalidArgument(_))),
            "{bad}"
        );
    }
    // remove_file unlinks; listing walks the tree.
    let listed: Vec<String> = r
        .mds
        .list_files("/")
        .unwrap()
        .into_iter()
        .map(|f| f.path)
        .collect();
    assert_eq!(listed, ["/a/b/c", "/alias"]);
    assert_eq!(r.mds.list_files("/a/b/").unwrap().len(), 1);
    assert_eq!(r.mds.list_files("/al").unwrap().len(), 1);
    r.mds.remove_file("/alias").unwrap();
    assert!(r.mds.remove_file("a/b").is_err(), "a directory");
    assert_eq!(r.mds.list_files("").unwrap().len(), 1);
}

// ---- robust files

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

fn robust_object(index: u32, length: u64) -> RobustObject {
    let k = length.div_ceil(1024) as u32;
    RobustObject {
        object_id: 0,
        index,
        length,
        k,
        n: 2 * k,
        id_space: 4 * k,
        seed: 0,
        version: 1,
        blocks: Vec::new(),
    }
}

/// Blocks 0..count of an object at `version`, round-robin on `osds`.
fn placements(count: u32, version: u64, osds: &[u32]) -> Vec<BlockPlacement> {
    (0..count)
        .map(|id| BlockPlacement {
            key: RobustBlockKey { id, version },
            osd_id: osds[id as usize % osds.len()],
            addr: String::new(),
            up: false,
        })
        .collect()
}

#[test]
fn a_robust_file_is_visible_at_its_commit_and_its_blocks_are_dropped_with_it() {
    let mut r = rig(4);
    let objects = [robust_object(0, 2048), robust_object(1, 100)];
    let (f, ids) = r
        .mds
        .create_robust_file("/r/x", robust_params(), 2148, &objects)
        .unwrap();
    assert!(
        r.mds.lookup_file("/r/x").is_err(),
        "invisible before the commit"
    );
    let committed: Vec<RobustObject> = objects
        .iter()
        .zip(&ids)
        .map(|(o, &id)| RobustObject {
            object_id: id,
            blocks: placements(o.n, 1, &r.ids),
            ..o.clone()
        })
        .collect();
    r.mds.commit_robust_file(f, &committed).unwrap();
    r.mds.commit_robust_file(f, &committed).unwrap(); // a retried commit
    let info = r.mds.lookup_file("/r/x").unwrap();
    let robust = info.robust.unwrap();
    assert_eq!(robust.objects.len(), 2);
    assert_eq!(robust.objects[0].blocks.len(), 4);
    assert_eq!(robust.objects_below_n, 0);
    assert!(robust.objects[0]
        .blocks
        .iter()
        .all(|b| b.up && !b.addr.is_empty()));
    let st = r.mds.status().unwrap();
    assert_eq!((st.robust_files, st.robust_objects_below_n), (1, 0));

    // Replacing the file drops every block of the old one: one task per object and holder.
    let (g, gids) = r
        .mds
        .create_robust_file("/r/x", robust_params(), 100, &[robust_object(0, 100)])
        .unwrap();
    let mut o = robust_object(0, 100);
    o.object_id = gids[0];
    o.blocks = placements(2, 1, &r.ids[..1]);
    r.mds.commit_robust_file(g, &[o]).unwrap();
    let tasks = hb(&mut r.mds, r.ids[0]).tasks;
    let dropped: Vec<u64> = tasks
        .iter()
        .filter_map(|t| match t {
            OsdTask::DeleteObject(d) if d.blocks.is_empty() => Some(d.object_id),
            _ => None,
        })
        .collect();
    assert_eq!(dropped, ids, "both old objects had blocks on the first OSD");
    r.mds
        .heartbeat(&Heartbeat {
            osd_id: r.ids[0],
            deleted_objects: ids.clone(),
            ..Heartbeat::default()
        })
        .unwrap();
    assert!(hb(&mut r.mds, r.ids[0])
        .tasks
        .iter()
        .all(|t| !matches!(t, OsdTask::DeleteObject(_))));

    // An OSD out leaves the object below N, counted by status.
    r.mds.osd_out(r.ids[0]).unwrap();
    let st = r.mds.status().unwrap();
    assert_eq!(st.robust_objects_below_n, 1);
}

#[test]
fn robust_puts_with_bad_objects_or_blocks_are_refused_with_one_line() {
    let mut r = rig(4);
    let p = robust_params();
    let bad = |r: &mut Rig, params: RobustParams, size: u64, o: RobustObject| {
        r.mds
            .create_robust_file("/bad", params, size, &[o])
            .unwrap_err()
            .to_string()
    };
    let e = bad(
        &mut r,
        RobustParams {
            redundancy: 0.0,
            ..p
        },
        100,
        robust_object(0, 100),
    );
    assert!(e.contains("redundancy D = 0"), "{e}");
    let e = bad(&mut r, p, 101, robust_object(0, 100));
    assert!(e.contains("hold 100 bytes, the file is 101"), "{e}");
    let e = bad(&mut r, p, 5000, robust_object(0, 5000));
    assert!(e.contains("exceeds the file's 2 source blocks"), "{e}");
    let mut o = robust_object(0, 100);
    o.n = 1;
    let e = bad(&mut r, p, 100, o);
    assert!(e.contains("K < N"), "{e}");

    let (f, ids) = r
        .mds
        .create_robust_file("/r/y", p, 2048, &[robust_object(0, 2048)])
        .unwrap();
    let mut o = robust_object(0, 2048);
    o.object_id = ids[0];
    o.blocks = placements(1, 1, &r.ids);
    let e = r
        .mds
        .commit_robust_file(f, &[o.clone()])
        .unwrap_err()
        .to_string();
    assert!(e.contains("fewer than its K = 2"), "{e}");
    o.blocks = placements(3, 1, &r.ids);
    o.blocks[2].key.id = 0;
    let e = r
        .mds
        .commit_robust_file(f, &[o.clone()])
        .unwrap_err()
        .to_string();
    assert!(e.contains("names block 0 twice"), "{e}");
    o.blocks[2].key.id = 99;
    let e = r
        .mds
        .commit_robust_file(f, &[o.clone()])
        .unwrap_err()
        .to_string();
    assert!(e.contains("outside its id space of 8"), "{e}");
    o.blocks[2].key.id = 2;
    o.blocks[2].osd_id = 77;
    let e = r
        .mds
        .commit_robust_file(f, &[o.clone()])
        .unwrap_err()
        .to_string();
    assert!(e.contains("unknown OSD 77"), "{e}");
    let e = r.mds.commit_file(f, 2048).unwrap_err().to_string();
    assert!(e.contains("is a robust file"), "{e}");
    let e = r.mds.allocate_segments(f, &[10]).unwrap_err().to_string();
    assert!(e.contains("is a robust file"), "{e}");
}

#[test]
fn an_update_records_the_next_version_and_drops_the_blocks_it_replaces() {
    let mut r = rig(4);
    let (f, ids) = r
        .mds
        .create_robust_file("/u", robust_params(), 2048, &[robust_object(0, 2048)])
        .unwrap();
    let mut o = robust_object(0, 2048);
    o.object_id = ids[0];
    o.blocks = placements(4, 1, &r.ids);
    r.mds.commit_robust_file(f, &[o]).unwrap();
    // Blocks 0 and 1 rewritten at version 2 on other OSDs; block 3 dropped.
    let mut added = placements(2, 2, &r.ids[2..]);
    added[1].osd_id = r.ids[3];
    let u = RobustUpdate {
        file_id: f,
        object_id: ids[0],
        version: 2,
        added,
        dropped: vec![RobustBlockKey { id: 3, version: 1 }],
        seed: 0,
    };
    let now = r.mds.update_robust_object(&u).unwrap();
    assert_eq!(now.version, 2);
    let keys: Vec<(u32, u64)> = now
        .blocks
        .iter()
        .map(|b| (b.key.id, b.key.version))
        .collect();
    assert_eq!(keys, [(0, 2), (1, 2), (2, 1)]);
    // A second update at the same version is refused: another came first.
    let e = r.mds.update_robust_object(&u).unwrap_err().to_string();
    assert!(e.contains("is at version 2"), "{e}");
    // The replaced blocks' holders are told to drop exactly them.
    let tasks = hb(&mut r.mds, r.ids[0]).tasks;
    assert!(tasks.contains(&OsdTask::DeleteObject(DeleteObjectTask {
        object_id: ids[0],
        blocks: vec![RobustBlockKey { id: 0, version: 1 }],
    })));
    let tasks = hb(&mut r.mds, r.ids[3]).tasks;
    assert!(tasks.contains(&OsdTask::DeleteObject(DeleteObjectTask {
        object_id: ids[0],
        blocks: vec![RobustBlockKey { id: 3, version: 1 }],
    })));
    // Below K is refused.
    let e = r
        .mds
        .update_robust_object(&RobustUpdate {
            version: 3,
            added: Vec::new(),
            dropped: vec![
                RobustBlockKey { id: 0, version: 2 },
                RobustBlockKey { id: 1, version: 2 },
            ],
            ..u
        })
        .unwrap_err()
        .to_string();
    assert!(e.contains("would keep 1 blocks"), "{e}");
}
