//! One opener per array (issue 46 §1): a second open or create of an array whose devices are
//! open is refused with one line naming the holder; dropping the array releases its devices;
//! `create` refuses devices that hold something unless `force`.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::*;
use ecstack_array::{Array, ArrayDevices, ArrayError, OpenOptions, SchemeKind};
use ecstack_device::{BlockDevice, FileDevice};

/// A fresh directory under the system's temporary directory, removed on drop.
struct Dir(PathBuf);

impl Dir {
    fn new(tag: &str) -> Dir {
        let p = std::env::temp_dir().join(format!("ecstack-excl-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Dir(p)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const DEV_BYTES: u64 = 4 << 20;

/// Open (creating at 4 MiB if absent) the files of a 2+1 eplog array in `dir`.
fn devices(dir: &Path) -> ArrayDevices {
    let f = |name: &str| -> Arc<dyn BlockDevice> {
        Arc::new(FileDevice::create(dir.join(name), DEV_BYTES).unwrap())
    };
    ArrayDevices {
        main: vec![f("d0"), f("d1"), f("d2")],
        log: vec![f("l0")],
        meta: f("meta"),
        specs: None,
    }
}

fn busy(r: Result<Array, ArrayError>) -> String {
    match r {
        Err(e @ ArrayError::Busy(_)) => e.to_string(),
        Err(e) => panic!("expected a refusal for an open array, got: {e}"),
        Ok(_) => panic!("a second opener of an open array was let in"),
    }
}

#[test]
fn a_second_open_is_refused_until_the_first_is_dropped() {
    let dir = Dir::new("open");
    let cfg = config(SchemeKind::Eplog, 2, 1);
    let a = Array::create(&cfg, devices(&dir.0)).unwrap();
    a.write(&[7u8; 4096], 0).unwrap();
    a.close().unwrap();

    let msg = busy(Array::open(devices(&dir.0)));
    assert!(!msg.contains('\n'), "one line: {msg}");
    assert!(msg.contains("is already open in this process"), "{msg}");
    // create over an open array is refused too, even with force.
    let force = OpenOptions {
        force: true,
        ..OpenOptions::default()
    };
    let msg = busy(Array::create_with(&cfg, devices(&dir.0), &force));
    assert!(msg.contains("already open"), "{msg}");

    drop(a);
    let b = Array::open(devices(&dir.0)).unwrap();
    let mut back = [0u8; 4096];
    b.read(&mut back, 0).unwrap();
    assert_eq!(back, [7u8; 4096]);
}

#[test]
fn each_member_device_is_locked_not_only_the_meta_volume() {
    let dir = Dir::new("member");
    let cfg = config(SchemeKind::Eplog, 2, 1);
    let _a = Array::create(&cfg, devices(&dir.0)).unwrap();
    // Another array that shares only one main device with the open one.
    let other = Dir::new("member-other");
    let mut devs = devices(&other.0);
    devs.main[1] = Arc::new(FileDevice::create(dir.0.join("d1"), DEV_BYTES).unwrap());
    let force = OpenOptions {
        force: true,
        ..OpenOptions::default()
    };
    let msg = busy(Array::create_with(&cfg, devs, &force));
    assert!(msg.starts_with("array device 1 ("), "{msg}");
}

#[test]
fn create_refuses_used_devices_unless_forced() {
    let dir = Dir::new("create");
    let cfg = config(SchemeKind::Eplog, 2, 1);
    let a = Array::create(&cfg, devices(&dir.0)).unwrap();
    a.close().unwrap();
    drop(a);
    let msg = match Array::create(&cfg, devices(&dir.0)) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("create overwrote an array without force"),
    };
    assert!(
        msg.contains("array device 0") && msg.contains("label of member 0"),
        "{msg}"
    );
    assert!(msg.contains("--force"), "{msg}");
    assert!(msg.starts_with("array device 0 ("), "{msg}");

    // Only the meta volume holds something: its superblock is named.
    for d in ["d0", "d1", "d2", "l0"] {
        std::fs::write(dir.0.join(d), vec![0u8; DEV_BYTES as usize]).unwrap();
    }
    let msg = Array::create(&cfg, devices(&dir.0))
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("array meta") && msg.contains("superblock"),
        "{msg}"
    );

    // Any non-zero byte in the first MiB.
    std::fs::write(dir.0.join("meta"), vec![0u8; DEV_BYTES as usize]).unwrap();
    let mut junk = vec![0u8; DEV_BYTES as usize];
    junk[1000] = 1;
    std::fs::write(dir.0.join("l0"), junk).unwrap();
    let msg = Array::create(&cfg, devices(&dir.0))
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("array log device 0") && msg.contains("offset 1000"),
        "{msg}"
    );

    let force = OpenOptions {
        force: true,
        ..OpenOptions::default()
    };
    Array::create_with(&cfg, devices(&dir.0), &force).unwrap();
}

#[test]
fn memory_devices_have_nothing_to_lock() {
    let rig = Rig::new(SchemeKind::Eplog, 2, 1, 1, false);
    let cfg = config(SchemeKind::Eplog, 2, 1);
    let a = Array::create(&cfg, rig.devices()).unwrap();
    a.close().unwrap();
    // The simulator and crash tests reopen arrays over the devices of a live one.
    let _b = Array::open(rig.devices()).unwrap();
}

#[test]
fn a_rebuild_replacement_is_locked_and_may_be_the_failed_device_itself() {
    let dir = Dir::new("rebuild");
    let other = Dir::new("rebuild-other");
    let cfg = config(SchemeKind::Eplog, 2, 1);
    let devs = devices(&dir.0);
    let d1 = Arc::clone(&devs.main[1]);
    let a = Array::create(&cfg, devs).unwrap();
    a.write(&[3u8; 8192], 0).unwrap();
    let _b = Array::create(&cfg, devices(&other.0)).unwrap();
    a.fail_device(1).unwrap();
    // A device of another open array is refused as a replacement.
    let theirs: Arc<dyn BlockDevice> =
        Arc::new(FileDevice::create(other.0.join("d0"), DEV_BYTES).unwrap());
    let msg = a.rebuild_device(1, theirs).unwrap_err().to_string();
    assert!(
        msg.contains("replacement for array device 1") && msg.contains("already open"),
        "{msg}"
    );
    // The failed device itself, already held by this array, is fine.
    a.rebuild_device(1, d1).unwrap();
    let mut back = [0u8; 8192];
    a.read(&mut back, 0).unwrap();
    assert_eq!(back, [3u8; 8192]);
}
