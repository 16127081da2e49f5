//! Every earlier version of the MDS store opens with today's code (docs/cluster.md "Versioning";
//! STYLE.md §2.6). The databases are stored copies made by the code of their time
//! (`tests/fixtures/README.md` says how); each test opens a copy, because opening migrates in place.
//!
//! Guards against: a schema change that strands the databases already on disk (issue 41 adds each
//! file's update scheme in version 2; issue 42 the POSIX namespace in version 3, where flat paths
//! become directories and those a tree cannot hold go to `/lost+found`).

use std::path::{Path, PathBuf};

use ecstack_mds::engine::{ManualClock, MdsCore, MdsSettings};
use ecstack_mds::store::{
    MetadataStore, SqliteStore, COUNTER_FILE, COUNTER_INO, COUNTER_SEGMENT, ROOT_INO, STORE_VERSION,
};
use ecstack_mds::{ChunkState, ClusterParams, FileKind, UpdateScheme};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// A copy of fixture `name` in a fresh directory (the directory lives as long as the guard).
fn copy_of(name: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mds.sqlite");
    std::fs::copy(fixture(name), &path).unwrap();
    (dir, path)
}

fn version_of(path: &Path) -> String {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.query_row("SELECT value FROM meta WHERE key = 'version'", [], |r| {
        r.get(0)
    })
    .unwrap()
}

/// `PRAGMA table_info` of every table: (table, column, type, not null, default).
fn columns(path: &Path) -> Vec<(String, String, String, bool, Option<String>)> {
    let conn = rusqlite::Connection::open(path).unwrap();
    let mut tables: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    tables.sort();
    let mut out = Vec::new();
    for t in tables {
        let mut stmt = conn.prepare(&format!("PRAGMA table_info({t})")).unwrap();
        let cols = stmt
            .query_map([], |r| {
                Ok((
                    t.clone(),
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, i64>(3)? != 0,
                    r.get::<_, Option<String>>(4)?,
                ))
            })
            .unwrap();
        out.extend(cols.map(Result::unwrap));
    }
    out
}

#[test]
fn a_version_1_store_is_migrated_and_its_files_are_fo_with_their_segments() {
    let (_dir, path) = copy_of("mds-store-v1.sqlite");
    assert_eq!(version_of(&path), "1");
    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(version_of(&path), STORE_VERSION.to_string());

    // The files, as stored by version 1, now fo.
    let a = store.committed_file("dir/a").unwrap().unwrap();
    assert_eq!((a.file_id, a.size), (1, (1 << 20) + 10));
    let b = store.committed_file("b").unwrap().unwrap();
    assert_eq!((b.file_id, b.size), (2, 4096));
    let pending = store.pending_files().unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].path, "pending");
    for f in [&a, &b, &pending[0]] {
        assert_eq!(f.scheme, UpdateScheme::Fo, "{}", f.path);
    }
    assert_eq!(store.totals().unwrap(), (2, (1 << 20) + 10 + 4096));

    // Their segments and chunks, intact.
    let segs = store.segments_of_file(1).unwrap();
    let shape: Vec<(u64, u32, u64)> = segs
        .iter()
        .map(|s| (s.segment_id, s.index, s.length))
        .collect();
    assert_eq!(shape, vec![(1, 0, 1 << 20), (2, 1, 10)]);
    assert_eq!(store.segments_of_file(2).unwrap()[0].length, 4096);
    for id in 1..=4 {
        let chunks = store.chunks(id).unwrap();
        assert_eq!(chunks.len(), 3, "segment {id}");
        assert!(chunks
            .iter()
            .all(|c| c.state == ChunkState::Healthy && c.osd_id.is_some()));
    }
    assert_eq!(store.osds().unwrap().len(), 4);
    assert_eq!(store.counter(COUNTER_FILE).unwrap(), 3);
    assert_eq!(store.counter(COUNTER_SEGMENT).unwrap(), 4);
    drop(store);

    // Reopening a migrated store is a plain open.
    drop(SqliteStore::open(&path).unwrap());
    assert_eq!(version_of(&path), STORE_VERSION.to_string());

    // A migrated store has the schema of a new one, column for column.
    let dir = tempfile::tempdir().unwrap();
    let fresh = dir.path().join("new.sqlite");
    drop(SqliteStore::open(&fresh).unwrap());
    assert_eq!(columns(&path), columns(&fresh));
}

fn settings() -> MdsSettings {
    MdsSettings {
        params: ClusterParams {
            cluster_id: "fixture".into(),
            code: "rs-vand".into(),
            k: 2,
            m: 1,
            segment_bytes: 1 << 20,
            heartbeat_ms: 1000,
            down_after_ms: 3000,
        },
        failure_domain: Some("host".into()),
        out_after_ms: 10_000,
        pending_ttl_ms: 3_600_000,
        default_scheme: UpdateScheme::Fo,
        orphan_grace_ms: 3_600_000,
    }
}

#[test]
fn the_mds_serves_a_migrated_store_with_fo_layouts_and_adds_files_of_other_schemes() {
    let (_dir, path) = copy_of("mds-store-v1.sqlite");
    let clock = ManualClock::new(1_700_000_000_000);
    let store = SqliteStore::open(&path).unwrap();
    let mut mds = MdsCore::open(Box::new(store), settings(), clock).unwrap();
    let info = mds.lookup_file("dir/a").unwrap();
    assert_eq!(info.scheme, UpdateScheme::Fo);
    assert_eq!(info.segments.len(), 2);
    assert!(info.segments.iter().all(|s| s.scheme == UpdateScheme::Fo));
    let f = mds
        .create_file_with("new", Some(UpdateScheme::Plr))
        .unwrap();
    assert_eq!(f, 4, "the file counter carried over");
    let segs = mds.allocate_segments(f, &[100]).unwrap();
    assert_eq!(segs[0].scheme, UpdateScheme::Plr);
    mds.commit_file(f, 100).unwrap();
    assert_eq!(mds.lookup_file("new").unwrap().scheme, UpdateScheme::Plr);
    // Replacing an old file under another scheme is refused; under its own it is a put.
    let e = mds
        .create_file_with("b", Some(UpdateScheme::Fl))
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("changing a file's scheme is refused"), "{e}");
    assert!(mds.create_file("b").is_ok());
}

#[test]
fn a_failed_migration_leaves_the_store_at_version_1() {
    let (_dir, path) = copy_of("mds-store-v1.sqlite");
    // A version-1 database that cannot take the new column (it already has one of that name):
    // the migration fails, and nothing of it is kept.
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch("ALTER TABLE files ADD COLUMN update_scheme TEXT")
            .unwrap();
    }
    let e = SqliteStore::open(&path).err().unwrap().to_string();
    assert!(e.contains("update_scheme"), "{e}");
    assert_eq!(version_of(&path), "1");
}

/// The names in directory `ino`, by name.
fn names(store: &SqliteStore, ino: u64) -> Vec<String> {
    store
        .dir_entries(ino, b"", 100)
        .unwrap()
        .into_iter()
        .map(|(n, _)| String::from_utf8(n).unwrap())
        .collect()
}

#[test]
fn a_version_2_store_becomes_a_tree_and_what_a_tree_cannot_hold_goes_to_lost_found() {
    let (_dir, path) = copy_of("mds-store-v2.sqlite");
    assert_eq!(version_of(&path), "2");
    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(version_of(&path), STORE_VERSION.to_string());

    // The flat paths that a tree holds, at their paths, with their schemes and sizes.
    for (p, id, size, scheme) in [
        ("dir/a", 1, (1 << 20) + 10, UpdateScheme::Fo),
        ("/abs/b", 2, 4096, UpdateScheme::Plr),
        ("dir/sub/c", 3, 7, UpdateScheme::Fl),
        ("empty", 9, 0, UpdateScheme::Fo),
    ] {
        let f = store.committed_file(p).unwrap().unwrap();
        assert_eq!((f.file_id, f.size, f.scheme), (id, size, scheme), "{p}");
    }
    assert_eq!(
        names(&store, ROOT_INO),
        ["abs", "dir", "empty", "lost+found"]
    );
    let dir = store.lookup(ROOT_INO, b"dir").unwrap().unwrap();
    assert_eq!((dir.kind, dir.nlink, dir.mode), (FileKind::Dir, 3, 0o755));
    assert_eq!(names(&store, dir.ino), ["a", "sub"]);
    let a = store.lookup(dir.ino, b"a").unwrap().unwrap();
    assert_eq!(
        (a.kind, a.nlink, a.mode, a.size),
        (FileKind::File, 1, 0o644, (1 << 20) + 10)
    );
    assert_eq!(a.mtime_ns % 1_000_000, 0, "the commit time, in ns");
    let root = store.inode(ROOT_INO).unwrap().unwrap();
    assert_eq!(root.nlink, 5, "abs, dir, lost+found and the root's own two");

    // The rest: in /lost+found, each named by its file id and its old path, none dropped.
    let lf = store.lookup(ROOT_INO, b"lost+found").unwrap().unwrap();
    assert_eq!((lf.kind, lf.mode), (FileKind::Dir, 0o700));
    assert_eq!(
        names(&store, lf.ino),
        [
            "4-dir",
            "5-x%2F%2Fy",
            "6-.%2Fdot",
            "7-up%2F..%2Fz",
            "8-abs%2Fb"
        ]
    );
    for (name, id, size) in [("4-dir", 4, 1), ("5-x%2F%2Fy", 5, 2), ("8-abs%2Fb", 8, 5)] {
        let i = store.lookup(lf.ino, name.as_bytes()).unwrap().unwrap();
        assert_eq!((i.file_id, i.size), (Some(id), size), "{name}");
    }
    assert_eq!(store.pending_files().unwrap()[0].path, "pending");
    assert_eq!(store.totals().unwrap().0, 9);
    // Inode numbers: the root, 4 directories, 9 files.
    assert_eq!(store.inode_count().unwrap(), 14);
    assert_eq!(store.counter(COUNTER_INO).unwrap(), 14);
    assert_eq!(store.segments_of_file(1).unwrap().len(), 2);
    drop(store);

    // Reopening is a plain open; the schema is a new store's.
    drop(SqliteStore::open(&path).unwrap());
    let dir = tempfile::tempdir().unwrap();
    let fresh = dir.path().join("new.sqlite");
    drop(SqliteStore::open(&fresh).unwrap());
    assert_eq!(columns(&path), columns(&fresh));

    // The MDS serves it: lookups by path, listings of the tree, new puts beside the old files.
    let clock = ManualClock::new(1_700_000_000_000);
    let store = SqliteStore::open(&path).unwrap();
    let mut mds = MdsCore::open(Box::new(store), settings(), clock).unwrap();
    assert_eq!(mds.lookup_file("/dir/sub/c").unwrap().segments.len(), 1);
    let listed: Vec<String> = mds
        .list_files("")
        .unwrap()
        .into_iter()
        .map(|f| f.path)
        .collect();
    assert_eq!(listed.len(), 9);
    assert_eq!(listed[0], "/abs/b");
    assert_eq!(listed[4], "/lost+found/4-dir");
    let f = mds.create_file("dir/new").unwrap();
    assert_eq!(f, 11, "the file counter carried over");
    mds.allocate_segments(f, &[3]).unwrap();
    mds.commit_file(f, 3).unwrap();
    assert_eq!(mds.list_files("/dir/").unwrap().len(), 3);
}

#[test]
fn a_failed_migration_leaves_the_store_at_version_2() {
    let (_dir, path) = copy_of("mds-store-v2.sqlite");
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch("CREATE TABLE inodes (x INTEGER)")
            .unwrap();
    }
    let e = SqliteStore::open(&path).err().unwrap().to_string();
    assert!(e.contains("inodes"), "{e}");
    assert_eq!(version_of(&path), "2");
}

/// A robust file's coding for the tests: LT, 1 KiB blocks, D = 0.5.
fn robust_params() -> ecstack_mds::RobustParams {
    ecstack_mds::RobustParams {
        code: ecstack_mds::RobustCode::Lt,
        block_bytes: 1024,
        redundancy: 0.5,
        object_blocks: 4,
        lt_c: 1.0,
        lt_delta: 0.5,
    }
}

#[test]
fn a_version_3_store_keeps_its_namespace_and_takes_robust_files() {
    let (_dir, path) = copy_of("mds-store-v3.sqlite");
    assert_eq!(version_of(&path), "3");
    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(version_of(&path), STORE_VERSION.to_string());

    // Everything version 3 held is where it was.
    for (p, id, size, scheme) in [
        ("dir/a", 1, (1 << 20) + 10, UpdateScheme::Fo),
        ("dir/sub/b", 2, 4096, UpdateScheme::Plr),
        ("c", 3, 7, UpdateScheme::Fl),
    ] {
        let f = store.committed_file(p).unwrap().unwrap();
        assert_eq!((f.file_id, f.size, f.scheme), (id, size, scheme), "{p}");
        assert!(store.robust_file(id).unwrap().is_none(), "{p} has segments");
    }
    assert_eq!(names(&store, ROOT_INO), ["c", "dir", "empty-dir"]);
    let d = store.lookup(ROOT_INO, b"empty-dir").unwrap().unwrap();
    assert_eq!((d.kind, d.mode, d.uid), (FileKind::Dir, 0o750, 1000));
    let link = store.lookup(d.ino, b"link").unwrap().unwrap();
    assert_eq!(link.target.as_deref(), Some(&b"../c"[..]));
    let c = store.lookup(ROOT_INO, b"c").unwrap().unwrap();
    assert_eq!(
        store.xattrs(c.ino).unwrap(),
        [(b"user.note".to_vec(), b"v3".to_vec())]
    );
    assert_eq!(store.pending_files().unwrap()[0].path, "pending");
    let segments = store.counter(COUNTER_SEGMENT).unwrap();
    assert_eq!(segments, 5);
    drop(store);

    // The schema is a new store's.
    let dir = tempfile::tempdir().unwrap();
    let fresh = dir.path().join("new.sqlite");
    drop(SqliteStore::open(&fresh).unwrap());
    assert_eq!(columns(&path), columns(&fresh));

    // The MDS serves it, and a robust file goes in beside the old files: its object ids come
    // after the segments' (one counter), its blocks are on the fixture's OSDs.
    let clock = ManualClock::new(1_700_000_000_000);
    let store = SqliteStore::open(&path).unwrap();
    let mut mds = MdsCore::open(Box::new(store), settings(), clock).unwrap();
    assert_eq!(mds.lookup_file("/dir/sub/b").unwrap().segments.len(), 1);
    let object = ecstack_mds::RobustObject {
        object_id: 0,
        index: 0,
        length: 3000,
        k: 3,
        n: 5,
        id_space: 8,
        seed: 7,
        version: 1,
        blocks: Vec::new(),
    };
    let (f, ids) = mds
        .create_robust_file("/r/obj", robust_params(), 3000, &[object.clone()])
        .unwrap();
    assert_eq!(ids, [segments + 1]);
    let blocks: Vec<ecstack_mds::BlockPlacement> = (0..5u32)
        .map(|i| ecstack_mds::BlockPlacement {
            key: ecstack_mds::RobustBlockKey {
                id: i * 3 % 8,
                version: 1,
            },
            osd_id: i % 4,
            addr: String::new(),
            up: false,
        })
        .collect();
    mds.commit_robust_file(
        f,
        &[ecstack_mds::RobustObject {
            object_id: ids[0],
            blocks,
            ..object
        }],
    )
    .unwrap();
    let info = mds.lookup_file("/r/obj").unwrap();
    assert!(info.segments.is_empty());
    let r = info.robust.expect("a robust file");
    assert_eq!(r.params, robust_params());
    assert_eq!(r.objects[0].blocks.len(), 5);
    assert_eq!(info.size, 3000);
}
