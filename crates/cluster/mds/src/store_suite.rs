//! One test suite for every [`MetadataStore`] implementation (STYLE.md §4.3). `open` opens the
//! same backing store each time it is called (after the previous handle is dropped), so the suite
//! also checks that applied batches survive a reopen.

use std::collections::BTreeMap;

use crate::store::*;
use ecstack_mds_proto::{ChunkState, FileKind, OsdState, RecoveryProgress, UpdateScheme};

fn osd(id: u32, name: &str, labels: &[(&str, &str)]) -> OsdRecord {
    OsdRecord {
        osd_id: id,
        name: name.into(),
        addr: format!("127.0.0.1:{}", 7000 + id),
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        capacity_bytes: 1 << 40,
        used_bytes: u64::from(id) * 1000,
        state: OsdState::Up,
        last_heartbeat_ms: 1_700_000_000_000 + u64::from(id),
    }
}

/// File `id` has scheme `ALL[id % 4]`: files 1, 2, 3, 4 are fl, codfs-pl, plr, fo.
fn file(id: u64, path: &str, committed: bool) -> FileRecord {
    FileRecord {
        file_id: id,
        path: path.into(),
        size: id * 100,
        mtime_ms: 1_700_000_000_000 + id,
        committed,
        scheme: UpdateScheme::ALL[(id % 4) as usize],
    }
}

fn seg(id: u64, file_id: u64, index: u32, length: u64, primary: u32) -> SegmentRecord {
    SegmentRecord {
        segment_id: id,
        file_id,
        index,
        length,
        primary,
        epoch: id,
        version: 0,
    }
}

fn chunk(segment_id: u64, index: u32, osd_id: Option<u32>, state: ChunkState) -> ChunkRecord {
    ChunkRecord {
        segment_id,
        index,
        osd_id,
        state,
    }
}

/// Runs the whole suite against a store; `open` must reopen the same store every time.
pub fn run(open: &dyn Fn() -> Box<dyn MetadataStore>) {
    empty_store(open().as_ref());
    {
        let mut s = open();
        osds_round_trip(s.as_mut());
        namespace_round_trip(s.as_mut());
        inodes_and_entries(s.as_mut());
        batches_are_atomic(s.as_mut());
        delete_tasks_and_recovery(s.as_mut());
        robust_files(s.as_mut());
        known_ids(s.as_mut());
    }
    // Everything applied above is still there after the handle is dropped and reopened.
    let s = open();
    check_after_reopen(s.as_ref());
    drop(s);
    loads_follow_batches(open);
    reads_follow_batches(open);
}

/// Inodes and counters one handle reads between its batches (new, changed, deleted, a refused
/// batch) are what a fresh handle reads.
fn reads_follow_batches(open: &dyn Fn() -> Box<dyn MetadataStore>) {
    let mut s = open();
    let read = |s: &dyn MetadataStore| {
        (
            [
                s.inode(70).unwrap(),
                s.inode(71).unwrap(),
                s.inode(ROOT_INO).unwrap(),
                s.lookup(ROOT_INO, b"rows_a").unwrap(),
                s.lookup(ROOT_INO, b"rows_b").unwrap(),
                s.lookup(70, b"rows_c").unwrap(),
            ],
            s.counter("suite_rows").unwrap(),
        )
    };
    let mut changed = inode(70, FileKind::Dir, None);
    changed.mode = 0o700;
    let steps = [
        vec![
            Mutation::PutInode(inode(70, FileKind::Dir, None)),
            Mutation::PutInode(inode(71, FileKind::Dir, None)),
            Mutation::SetCounter {
                name: "suite_rows",
                value: 1,
            },
        ],
        // Refused (an entry of a missing parent).
        vec![
            Mutation::PutInode(changed.clone()),
            Mutation::SetCounter {
                name: "suite_rows",
                value: 2,
            },
            dentry(424_242, "x", 70),
        ],
        vec![
            Mutation::PutInode(changed),
            dentry(ROOT_INO, "rows_a", 70),
            dentry(ROOT_INO, "rows_b", 71),
        ],
        // A rename of a directory entry, and one into the other directory.
        vec![
            Mutation::DeleteDentry {
                parent: ROOT_INO,
                name: b"rows_a".to_vec(),
            },
            dentry(ROOT_INO, "rows_c", 70),
            Mutation::DeleteDentry {
                parent: ROOT_INO,
                name: b"rows_b".to_vec(),
            },
            dentry(70, "rows_c", 71),
        ],
        vec![
            Mutation::DeleteDentry {
                parent: 70,
                name: b"rows_c".to_vec(),
            },
            Mutation::DeleteInode(71),
        ],
        vec![Mutation::SetCounter {
            name: "suite_rows",
            value: 3,
        }],
    ];
    for (i, batch) in steps.iter().enumerate() {
        read(s.as_ref());
        assert_eq!(s.apply(batch).is_err(), i == 1, "batch {i}");
        let seen = read(s.as_ref());
        // A store has one writer: the fresh handle comes after this one (and reads into its own
        // cache, which the next batch then follows).
        drop(s);
        s = open();
        assert_eq!(seen, read(s.as_ref()), "after batch {i}");
    }
    let (rows, counter) = read(s.as_ref());
    assert_eq!(rows[0].as_ref().map(|i| i.mode), Some(0o700));
    assert_eq!(rows[1], None);
    assert_eq!(rows[3], None);
    assert_eq!(rows[4], None);
    assert_eq!(rows[5], None);
    assert_eq!(
        s.lookup(ROOT_INO, b"rows_c").unwrap().map(|i| i.ino),
        Some(70)
    );
    assert_eq!(counter, 3);
}

/// The loads one handle reports after a run of batches (a refused batch, new segments, a resized
/// segment with a new primary, moved and replaced chunks, a removed segment and file) are what a
/// fresh handle counts.
fn loads_follow_batches(open: &dyn Fn() -> Box<dyn MetadataStore>) {
    use ChunkState::*;
    let mut s = open();
    let before = s.osd_loads(2, 1).unwrap();
    // A refused batch first (it drops the count: the loads are counted again below).
    let steps = [
        vec![
            Mutation::PutFile(file(901, "l/a", true)),
            Mutation::PutSegment(seg(9004, 901, 2, 5, 0)),
            Mutation::PutSegment(seg(9005, 424242, 0, 1, 0)),
        ],
        vec![
            Mutation::PutFile(file(901, "l/a", true)),
            Mutation::PutFile(file(902, "l/b", true)),
            Mutation::PutSegment(seg(9001, 901, 0, 600, 0)),
            Mutation::PutChunk(chunk(9001, 0, Some(0), Healthy)),
            Mutation::PutChunk(chunk(9001, 1, Some(1), Healthy)),
            Mutation::PutChunk(chunk(9001, 2, Some(1), Healthy)),
            Mutation::PutSegment(seg(9002, 901, 1, 7, 1)),
            Mutation::PutChunk(chunk(9002, 0, Some(1), Healthy)),
            Mutation::PutChunk(chunk(9002, 1, None, Lost)),
            Mutation::PutSegment(seg(9003, 902, 0, 40, 1)),
            Mutation::PutChunk(chunk(9003, 0, Some(1), Healthy)),
            Mutation::PutChunk(chunk(9003, 1, Some(0), Healthy)),
        ],
        vec![
            Mutation::PutSegment(seg(9002, 901, 1, 300, 0)),
            Mutation::PutChunk(chunk(9002, 1, Some(0), Recovering)),
        ],
        vec![Mutation::PutChunk(chunk(9001, 2, Some(0), Stale))],
        vec![Mutation::DeleteFile(902)],
        vec![
            Mutation::PutSegment(seg(9006, 901, 2, 5, 1)),
            Mutation::PutChunk(chunk(9006, 0, Some(1), Healthy)),
            Mutation::PutChunk(chunk(9006, 1, Some(0), Healthy)),
        ],
        vec![Mutation::DeleteSegment(9001)],
    ];
    for (i, batch) in steps.iter().enumerate() {
        assert_eq!(s.apply(batch).is_err(), i == 0, "batch {i}");
        s.osd_loads(2, 1).unwrap();
    }
    let cached = s.osd_loads(2, 1).unwrap();
    assert_ne!(cached, before);
    drop(s);
    assert_eq!(cached, open().osd_loads(2, 1).unwrap());
}

fn empty_store(s: &dyn MetadataStore) {
    assert_eq!(s.counter(COUNTER_SEGMENT).unwrap(), 0);
    assert!(s.osds().unwrap().is_empty());
    assert!(s.pending_files().unwrap().is_empty());
    assert_eq!(s.totals().unwrap(), (0, 0));
    assert_eq!(s.recovery().unwrap(), RecoveryProgress::default());
    assert!(s.osd_loads(4, 1).unwrap().is_empty());
    assert_eq!(s.segment(1).unwrap(), None);
    assert_eq!(s.file(1).unwrap(), None);
    // A new store has its root directory, and nothing in it.
    let root = s.inode(ROOT_INO).unwrap().unwrap();
    assert_eq!(
        (root.kind, root.nlink, root.mode),
        (FileKind::Dir, 2, 0o755)
    );
    assert_eq!(s.counter(COUNTER_INO).unwrap(), ROOT_INO);
    assert!(s.dir_entries(ROOT_INO, b"", 10).unwrap().is_empty());
    assert_eq!(s.inode_count().unwrap(), 1);
}

fn inode(ino: u64, kind: FileKind, file_id: Option<u64>) -> InodeRecord {
    InodeRecord {
        file_id,
        uid: 1000 + ino as u32,
        gid: 100,
        size: file_id.map_or(0, |f| f * 100),
        ..new_inode(ino, kind, 0o640, 1_700_000_000_000_000_000 + ino)
    }
}

fn dentry(parent: u64, name: &str, ino: u64) -> Mutation {
    Mutation::PutDentry {
        parent,
        name: name.as_bytes().to_vec(),
        ino,
    }
}

fn osds_round_trip(s: &mut dyn MetadataStore) {
    let a = osd(0, "osd-0", &[("host", "h0"), ("rack", "r0")]);
    let b = osd(1, "osd-1", &[("host", "h1")]);
    s.apply(&[
        Mutation::PutOsd(b.clone()),
        Mutation::PutOsd(a.clone()),
        Mutation::SetCounter {
            name: COUNTER_OSD,
            value: 2,
        },
    ])
    .unwrap();
    assert_eq!(s.osds().unwrap(), vec![a.clone(), b.clone()]);
    assert_eq!(s.counter(COUNTER_OSD).unwrap(), 2);
    // Replacing an OSD replaces its labels too.
    let a2 = OsdRecord {
        addr: "127.0.0.1:9999".into(),
        labels: BTreeMap::from([("host".to_string(), "h9".to_string())]),
        state: OsdState::Down,
        ..a
    };
    s.apply(&[Mutation::PutOsd(a2.clone())]).unwrap();
    assert_eq!(s.osds().unwrap(), vec![a2, b]);
}

fn namespace_round_trip(s: &mut dyn MetadataStore) {
    let mut batch = vec![
        Mutation::PutFile(file(1, "a/x", true)),
        Mutation::PutFile(file(2, "a/%y", true)),
        Mutation::PutFile(file(3, "b/z", true)),
        Mutation::PutFile(file(4, "a/x", false)),
        // The tree: /a/x (file 1), /a/%y (file 2), /b/z (file 3); file 4 is pending.
        Mutation::PutInode(inode(2, FileKind::Dir, None)),
        Mutation::PutInode(inode(3, FileKind::File, Some(1))),
        Mutation::PutInode(inode(4, FileKind::File, Some(2))),
        Mutation::PutInode(inode(5, FileKind::Dir, None)),
        Mutation::PutInode(inode(6, FileKind::File, Some(3))),
        dentry(ROOT_INO, "a", 2),
        dentry(2, "x", 3),
        dentry(2, "%y", 4),
        dentry(ROOT_INO, "b", 5),
        dentry(5, "z", 6),
        Mutation::PutSegment(seg(10, 1, 1, 500, 1)),
        Mutation::PutSegment(seg(11, 1, 0, 1000, 0)),
        Mutation::PutSegment(seg(12, 3, 0, 3, 1)),
        Mutation::SetCounter {
            name: COUNTER_SEGMENT,
            value: 12,
        },
    ];
    for (s_id, osds) in [
        (10u64, [Some(0), Some(1), None]),
        (11, [Some(1), Some(0), Some(0)]),
    ] {
        for (i, o) in osds.iter().enumerate() {
            let state = if o.is_some() {
                ChunkState::Healthy
            } else {
                ChunkState::Lost
            };
            batch.push(Mutation::PutChunk(chunk(s_id, i as u32, *o, state)));
        }
    }
    batch.push(Mutation::PutChunk(chunk(12, 0, Some(1), ChunkState::Stale)));
    s.apply(&batch).unwrap();

    assert_eq!(s.file(4).unwrap(), Some(file(4, "a/x", false)));
    assert_eq!(s.committed_file("a/x").unwrap(), Some(file(1, "a/x", true)));
    assert_eq!(
        s.committed_file("/a/x").unwrap(),
        Some(file(1, "a/x", true))
    );
    assert_eq!(s.committed_file("a/").unwrap(), None);
    assert_eq!(s.committed_file("a").unwrap(), None, "a directory");
    assert_eq!(s.committed_file("a//x").unwrap(), None);
    assert_eq!(s.segment_count(1).unwrap(), 2);
    assert_eq!(s.segment_count(2).unwrap(), 0);
    assert_eq!(s.pending_files().unwrap(), vec![file(4, "a/x", false)]);
    assert_eq!(s.totals().unwrap(), (3, 100 + 200 + 300));
    // Every update scheme is kept per file, by every query that returns files.
    let schemes: Vec<UpdateScheme> = (1..=4)
        .map(|id| s.file(id).unwrap().unwrap().scheme)
        .collect();
    assert_eq!(
        schemes,
        [
            UpdateScheme::Fl,
            UpdateScheme::ParityLog,
            UpdateScheme::Plr,
            UpdateScheme::Fo
        ]
    );
    // Replacing a file's record replaces its scheme too (the MDS never does; the store keeps).
    let mut plr = file(4, "a/x", false);
    plr.scheme = UpdateScheme::Plr;
    s.apply(&[Mutation::PutFile(plr.clone())]).unwrap();
    assert_eq!(s.file(4).unwrap(), Some(plr));
    s.apply(&[Mutation::PutFile(file(4, "a/x", false))])
        .unwrap();

    let of1: Vec<u64> = s
        .segments_of_file(1)
        .unwrap()
        .iter()
        .map(|s| s.segment_id)
        .collect();
    assert_eq!(of1, vec![11, 10], "by index");
    assert_eq!(s.segment(12).unwrap(), Some(seg(12, 3, 0, 3, 1)));
    let p1: Vec<u64> = s
        .segments_with_primary(1)
        .unwrap()
        .iter()
        .map(|s| s.segment_id)
        .collect();
    assert_eq!(p1, vec![10, 12]);
    assert_eq!(
        s.chunks(10).unwrap(),
        vec![
            chunk(10, 0, Some(0), ChunkState::Healthy),
            chunk(10, 1, Some(1), ChunkState::Healthy),
            chunk(10, 2, None, ChunkState::Lost),
        ]
    );
    let on0: Vec<(u64, u32)> = s
        .chunks_on_osd(0)
        .unwrap()
        .iter()
        .map(|c| (c.segment_id, c.index))
        .collect();
    assert_eq!(on0, vec![(10, 0), (11, 1), (11, 2)]);
    assert_eq!(
        s.chunks_in_state(ChunkState::Lost).unwrap(),
        vec![chunk(10, 2, None, ChunkState::Lost)]
    );
    assert_eq!(s.all_chunks().unwrap().len(), 7);

    // k = 2: chunk sizes are ceil(500/2) = 250, ceil(1000/2) = 500, ceil(3/2) = 2.
    let loads = s.osd_loads(2, 1).unwrap();
    assert_eq!(
        loads[&0],
        OsdLoad {
            chunks: 3,
            bytes: 250 + 500 + 500,
            data_bytes: 250 + 500, // chunk 2 of segment 11 is its parity
            primaries: 1
        }
    );
    assert_eq!(
        loads[&1],
        OsdLoad {
            chunks: 3,
            bytes: 250 + 500 + 2,
            data_bytes: 250 + 500 + 2,
            primaries: 2
        }
    );
    // Chunks aligned to 4 bytes (RDP with p = 5): 252, 500, 4.
    let loads = s.osd_loads(2, 4).unwrap();
    assert_eq!(
        (loads[&0].bytes, loads[&0].data_bytes),
        (252 + 500 + 500, 252 + 500)
    );
    assert_eq!(
        (loads[&1].bytes, loads[&1].data_bytes),
        (252 + 500 + 4, 252 + 500 + 4)
    );

    // Replacing a chunk (a new holder) and removing a file with its segments and chunks.
    s.apply(&[Mutation::PutChunk(chunk(
        10,
        2,
        Some(1),
        ChunkState::Recovering,
    ))])
    .unwrap();
    assert_eq!(s.chunks_in_state(ChunkState::Recovering).unwrap().len(), 1);
    // A file an inode names cannot go before the inode.
    assert!(s.apply(&[Mutation::DeleteFile(3)]).is_err());
    s.apply(&[
        Mutation::DeleteDentry {
            parent: 5,
            name: b"z".to_vec(),
        },
        Mutation::DeleteInode(6),
        Mutation::DeleteFile(3),
    ])
    .unwrap();
    assert_eq!(s.lookup(5, b"z").unwrap(), None);
    assert_eq!(s.segment(12).unwrap(), None);
    assert!(s.chunks(12).unwrap().is_empty());
    assert_eq!(s.file(3).unwrap(), None);
    // An empty file goes by its records only; one with a segment is refused that way, whole.
    s.apply(&[
        Mutation::PutFile(file(40, "empty", true)),
        Mutation::PutFile(file(41, "full", true)),
        Mutation::PutSegment(seg(4100, 41, 0, 9, 0)),
        Mutation::PutChunk(chunk(4100, 0, Some(0), ChunkState::Healthy)),
    ])
    .unwrap();
    assert!(s
        .apply(&[Mutation::DeleteEmptyFile(40), Mutation::DeleteEmptyFile(41)])
        .is_err());
    assert!(s.file(40).unwrap().is_some());
    assert_eq!(s.chunks(4100).unwrap().len(), 1);
    s.apply(&[Mutation::DeleteEmptyFile(40), Mutation::DeleteFile(41)])
        .unwrap();
    assert_eq!(s.file(40).unwrap(), None);
    assert_eq!(s.file(41).unwrap(), None);
    assert!(s.chunks(4100).unwrap().is_empty());
}

fn batches_are_atomic(s: &mut dyn MetadataStore) {
    let before = (
        s.totals().unwrap(),
        s.pending_files().unwrap(),
        s.counter(COUNTER_FILE).unwrap(),
    );
    // A second entry `a` in the root violates the store's uniqueness: nothing applies.
    let r = s.apply(&[
        Mutation::SetCounter {
            name: COUNTER_FILE,
            value: 99,
        },
        Mutation::PutFile(file(5, "new", false)),
        Mutation::PutInode(inode(50, FileKind::Dir, None)),
        dentry(ROOT_INO, "a", 50),
    ]);
    assert!(r.is_err(), "a second entry a must be refused");
    assert_eq!(s.inode(50).unwrap(), None);
    let after = (
        s.totals().unwrap(),
        s.pending_files().unwrap(),
        s.counter(COUNTER_FILE).unwrap(),
    );
    assert_eq!(before, after);
    // A segment of a file that does not exist is refused as well.
    assert!(s
        .apply(&[Mutation::PutSegment(seg(77, 12345, 0, 1, 0))])
        .is_err());
    assert_eq!(s.segment(77).unwrap(), None);
}

/// Inodes of every kind, entries by name in pages, links, xattrs, segment removal.
fn inodes_and_entries(s: &mut dyn MetadataStore) {
    let mut link = inode(20, FileKind::Symlink, None);
    link.target = Some(b"../a/x\xff".to_vec());
    link.size = 7;
    let mut dev = inode(21, FileKind::CharDev, None);
    dev.rdev = 0x0501;
    s.apply(&[
        Mutation::PutInode(link.clone()),
        Mutation::PutInode(dev.clone()),
        dentry(2, "l", 20),
        dentry(2, "dev", 21),
        // A hard link of /a/x in /b, and a name that is not UTF-8.
        Mutation::PutDentry {
            parent: 5,
            name: b"x\xfe2".to_vec(),
            ino: 3,
        },
        Mutation::PutXattr {
            ino: 3,
            name: b"user.b".to_vec(),
            value: b"2".to_vec(),
        },
        Mutation::PutXattr {
            ino: 3,
            name: b"user.a".to_vec(),
            value: vec![0, 1, 255],
        },
    ])
    .unwrap();
    assert_eq!(s.inode(20).unwrap(), Some(link.clone()));
    assert_eq!(s.lookup(2, b"dev").unwrap(), Some(dev));
    assert_eq!(s.lookup(2, b"nope").unwrap(), None);
    let names = |after: &[u8], limit| -> Vec<Vec<u8>> {
        s.dir_entries(2, after, limit)
            .unwrap()
            .into_iter()
            .map(|(n, _)| n)
            .collect()
    };
    let all: Vec<Vec<u8>> = ["%y", "dev", "l", "x"]
        .iter()
        .map(|n| n.as_bytes().to_vec())
        .collect();
    assert_eq!(names(b"", 10), all);
    assert_eq!(names(b"", 2), all[..2].to_vec());
    assert_eq!(names(b"dev", 10), all[2..].to_vec());
    assert_eq!(
        s.links(3).unwrap(),
        vec![(2, b"x".to_vec()), (5, b"x\xfe2".to_vec())]
    );
    assert_eq!(
        s.xattrs(3).unwrap(),
        vec![
            (b"user.a".to_vec(), vec![0, 1, 255]),
            (b"user.b".to_vec(), b"2".to_vec())
        ]
    );
    // Replacing an xattr, removing one; an entry must name an inode that exists.
    s.apply(&[
        Mutation::PutXattr {
            ino: 3,
            name: b"user.b".to_vec(),
            value: b"3".to_vec(),
        },
        Mutation::DeleteXattr {
            ino: 3,
            name: b"user.a".to_vec(),
        },
    ])
    .unwrap();
    assert_eq!(
        s.xattrs(3).unwrap(),
        vec![(b"user.b".to_vec(), b"3".to_vec())]
    );
    assert!(s.apply(&[dentry(2, "ghost", 999)]).is_err());
    // An inode goes with its xattrs once no entry names it.
    s.apply(&[Mutation::PutXattr {
        ino: 21,
        name: b"user.c".to_vec(),
        value: b"c".to_vec(),
    }])
    .unwrap();
    assert!(
        s.apply(&[Mutation::DeleteInode(21)]).is_err(),
        "still named"
    );
    s.apply(&[
        Mutation::DeleteDentry {
            parent: 2,
            name: b"dev".to_vec(),
        },
        Mutation::DeleteInode(21),
    ])
    .unwrap();
    assert_eq!(s.inode(21).unwrap(), None);
    assert!(s.xattrs(21).unwrap().is_empty());
    // A segment goes with its chunks.
    s.apply(&[Mutation::DeleteSegment(10)]).unwrap();
    assert_eq!(s.segment(10).unwrap(), None);
    assert!(s.chunks(10).unwrap().is_empty());
    assert_eq!(s.segment_count(1).unwrap(), 1);
}

fn delete_tasks_and_recovery(s: &mut dyn MetadataStore) {
    let d = |osd_id, segment_id, chunk| DeleteRecord {
        osd_id,
        segment_id,
        chunk,
    };
    s.apply(&[
        Mutation::PutDelete(d(1, 12, 0)),
        Mutation::PutDelete(d(1, 12, 0)), // a duplicate is harmless
        Mutation::PutDelete(d(1, 9, 2)),
        Mutation::PutDelete(d(1, 9, 1)),
        Mutation::PutDelete(d(0, 9, 0)),
    ])
    .unwrap();
    assert_eq!(
        s.deletes_for(1).unwrap(),
        vec![d(1, 9, 1), d(1, 9, 2), d(1, 12, 0)]
    );
    s.apply(&[Mutation::RemoveDeletes {
        osd_id: 1,
        segment_id: 9,
    }])
    .unwrap();
    assert_eq!(s.deletes_for(1).unwrap(), vec![d(1, 12, 0)]);
    assert_eq!(s.deletes_for(0).unwrap(), vec![d(0, 9, 0)]);
    let r = RecoveryProgress {
        chunks_total: 9,
        chunks_done: 4,
        bytes_done: 4096,
        started_ms: 1_700_000_000_000,
        finished_ms: 0,
    };
    s.apply(&[Mutation::SetRecovery(r.clone())]).unwrap();
    assert_eq!(s.recovery().unwrap(), r);
}

fn check_after_reopen(s: &dyn MetadataStore) {
    assert_eq!(s.osds().unwrap().len(), 2);
    assert_eq!(s.osds().unwrap()[0].addr, "127.0.0.1:9999");
    assert_eq!(s.counter(COUNTER_SEGMENT).unwrap(), 12);
    assert_eq!(s.committed_file("a/x").unwrap(), Some(file(1, "a/x", true)));
    assert_eq!(s.file(2).unwrap().unwrap().scheme, UpdateScheme::ParityLog);
    assert_eq!(s.inode(20).unwrap().unwrap().target.unwrap(), b"../a/x\xff");
    assert_eq!(s.links(3).unwrap().len(), 2);
    assert_eq!(s.xattrs(3).unwrap().len(), 1);
    assert_eq!(s.pending_files().unwrap().len(), 1);
    assert_eq!(s.segment(10).unwrap(), None);
    assert_eq!(s.segment(12).unwrap(), None);
    assert_eq!(s.deletes_for(1).unwrap().len(), 1);
    assert_eq!(s.recovery().unwrap().chunks_done, 4);
}

/// Robust files: coding, objects and blocks round-trip (D and LT's C, δ exactly), a block is
/// replaced by id, the census counts per holder, delete tasks come and go, and a file's removal
/// takes its robust rows with it.
fn robust_files(s: &mut dyn MetadataStore) {
    use ecstack_mds_proto::{RobustBlockKey, RobustCode, RobustParams};
    let params = RobustParams {
        code: RobustCode::Lt,
        block_bytes: 1 << 20,
        redundancy: 0.1 + 0.2,
        object_blocks: 1024,
        lt_c: 1.0,
        lt_delta: 0.5,
    };
    let object = RobustObjectRecord {
        object_id: 900,
        file_id: 90,
        index: 0,
        length: 3 << 20,
        k: 3,
        n: 4,
        id_space: 8,
        seed: 12,
        version: 1,
    };
    let block = |id: u32, version: u64, osd_id: u32| {
        Mutation::Robust(RobustMutation::PutBlock(BlockRecord {
            object_id: 900,
            key: RobustBlockKey { id, version },
            osd_id,
        }))
    };
    s.apply(&[
        Mutation::PutFile(file(90, "/robust", true)),
        Mutation::Robust(RobustMutation::PutFile(RobustFileRecord {
            file_id: 90,
            params,
        })),
        Mutation::Robust(RobustMutation::PutObject(object.clone())),
        block(0, 1, 1),
        block(5, 1, 1),
        block(2, 1, 2),
        block(2, 2, 3),
    ])
    .unwrap();
    let r = s.robust_file(90).unwrap().unwrap();
    assert_eq!(r.params, params, "D = 0.1 + 0.2 reads back bit for bit");
    assert_eq!(s.robust_objects(90).unwrap(), [object.clone()]);
    assert_eq!(s.robust_object(900).unwrap(), Some(object));
    let keys: Vec<(u32, u64, u32)> = s
        .blocks(900)
        .unwrap()
        .iter()
        .map(|b| (b.key.id, b.key.version, b.osd_id))
        .collect();
    assert_eq!(keys, [(0, 1, 1), (2, 2, 3), (5, 1, 1)]);
    let (files, census) = s.robust_census().unwrap();
    assert_eq!(files, 1);
    assert_eq!(census[0].holders, [(1, 2), (3, 1)]);
    s.apply(&[
        Mutation::Robust(RobustMutation::DeleteBlock {
            object_id: 900,
            id: 5,
        }),
        Mutation::Robust(RobustMutation::PutDelete(ObjectDeleteRecord {
            osd_id: 1,
            object_id: 900,
            block: Some(RobustBlockKey { id: 5, version: 1 }),
        })),
        Mutation::Robust(RobustMutation::PutDelete(ObjectDeleteRecord {
            osd_id: 1,
            object_id: 901,
            block: None,
        })),
    ])
    .unwrap();
    assert_eq!(s.blocks(900).unwrap().len(), 2);
    let tasks = s.object_deletes_for(1).unwrap();
    assert_eq!(tasks.len(), 2);
    assert_eq!(tasks[1].block, None);
    s.apply(&[
        Mutation::Robust(RobustMutation::RemoveDeletes {
            osd_id: 1,
            object_id: 900,
        }),
        Mutation::DeleteFile(90),
    ])
    .unwrap();
    assert_eq!(s.object_deletes_for(1).unwrap().len(), 1);
    assert!(s.robust_file(90).unwrap().is_none());
    assert!(s.robust_objects(90).unwrap().is_empty());
    assert!(s.blocks(900).unwrap().is_empty());
    assert_eq!(s.robust_census().unwrap(), (0, Vec::new()));
    s.apply(&[Mutation::Robust(RobustMutation::RemoveDeletes {
        osd_id: 1,
        object_id: 901,
    })])
    .unwrap();
}

/// `known_ids`: a pending file's segment and a robust object are known to every OSD, a delete
/// task only to its own OSD; more ids than one query takes are all answered; the rows made here
/// go again.
fn known_ids(s: &mut dyn MetadataStore) {
    use ecstack_mds_proto::{RobustCode, RobustParams};
    s.apply(&[
        Mutation::PutFile(file(500, "/known/seg", false)),
        Mutation::PutSegment(seg(5001, 500, 0, 100, 1)),
        Mutation::PutFile(file(501, "/known/robust", false)),
        Mutation::Robust(RobustMutation::PutFile(RobustFileRecord {
            file_id: 501,
            params: RobustParams {
                code: RobustCode::RaptorQ,
                block_bytes: 1 << 16,
                redundancy: 1.0,
                object_blocks: 8,
                lt_c: 0.0,
                lt_delta: 0.0,
            },
        })),
        Mutation::Robust(RobustMutation::PutObject(RobustObjectRecord {
            object_id: 5002,
            file_id: 501,
            index: 0,
            length: 1 << 16,
            k: 1,
            n: 2,
            id_space: 4,
            seed: 0,
            version: 1,
        })),
        Mutation::PutDelete(DeleteRecord {
            osd_id: 1,
            segment_id: 5003,
            chunk: 2,
        }),
        Mutation::Robust(RobustMutation::PutDelete(ObjectDeleteRecord {
            osd_id: 2,
            object_id: 5004,
            block: None,
        })),
    ])
    .unwrap();
    let ids: Vec<u64> = (4700..5300).collect();
    let known = |osd: u32| {
        s.known_ids(osd, &ids)
            .unwrap()
            .into_iter()
            .collect::<Vec<u64>>()
    };
    assert_eq!(known(1), [5001, 5002, 5003]);
    assert_eq!(known(2), [5001, 5002, 5004]);
    assert_eq!(known(3), [5001, 5002]);
    assert!(s.known_ids(1, &[]).unwrap().is_empty());
    assert_eq!(s.known_ids(1, &[5003]).unwrap().len(), 1);
    s.apply(&[
        Mutation::DeleteFile(500),
        Mutation::DeleteFile(501),
        Mutation::RemoveDeletes {
            osd_id: 1,
            segment_id: 5003,
        },
        Mutation::Robust(RobustMutation::RemoveDeletes {
            osd_id: 2,
            object_id: 5004,
        }),
    ])
    .unwrap();
    assert!(s.known_ids(1, &ids).unwrap().is_empty());
}
