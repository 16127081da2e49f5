//! The admin language against a real array: device names are range-checked (a huge `logN` is one
//! error line, not a panic or a wrapped index that fails the wrong device), `fail` and `rebuild`
//! act on the named device, and an array reopens from the specs its superblock records.

use std::sync::Arc;

use ecstack_array::{AdminCommand, AdminReply, Array, ArrayConfig, ArrayDevices, SchemeKind};
use ecstack_device::{BlockDevice, MemDevice};

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn mem_array(scheme: SchemeKind) -> Array {
    let dev = |size: u64| -> Arc<dyn BlockDevice> { Arc::new(MemDevice::new(size).unwrap()) };
    let cfg = ArrayConfig {
        scheme,
        chunk_size: 4096,
        ..ArrayConfig::raid5(4)
    };
    let log = if scheme.uses_log() { 1 } else { 0 };
    Array::create(
        &cfg,
        ArrayDevices {
            main: (0..5).map(|_| dev(1 << 20)).collect(),
            log: (0..log).map(|_| dev(1 << 20)).collect(),
            meta: dev(4 << 20),
            specs: None,
        },
    )
    .unwrap()
}

#[test]
fn huge_device_numbers_are_one_line_errors_and_fail_nothing() {
    let a = mem_array(SchemeKind::Eplog);
    for line in [
        "fail log18446744073709551610",
        "fail log18446744073709551611",
        "fail 18446744073709551615",
        "fail main5",
        "fail log1",
        "fail 6",
        "rebuild log18446744073709551610",
        "fail log99999999999999999999999999",
    ] {
        let e = a.admin(line).unwrap_err().to_string();
        assert!(!e.contains('\n') && !e.is_empty(), "{line}: {e}");
        assert!(e.contains("device"), "{line}: {e}");
        assert!(a.failed_devices().is_empty(), "{line} failed a device");
    }
    let e = a
        .admin("fail log18446744073709551610")
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("no log device 18446744073709551610"), "{e}");
}

#[test]
fn fail_and_rebuild_by_name_over_the_admin_language() {
    let a = mem_array(SchemeKind::Eplog);
    let mut data = pattern(a.size() as usize / 2, 7);
    a.write_at(&data, 0).unwrap();
    // log0 is device 5 of a 4+1 array; failing it commits, rebuilding it brings it back.
    let answer = a.admin("fail log0").unwrap();
    assert_eq!(answer, "device 5 failed; failed devices [5]");
    match a
        .execute(&AdminCommand::parse("rebuild log0 mem:1M").unwrap())
        .unwrap()
    {
        AdminReply::Rebuilt(r) => assert_eq!(r.devices, vec![5]),
        other => panic!("{other:?}"),
    }
    a.write_at(&data[..8192], 4096).unwrap();
    let head = data[..8192].to_vec();
    data[4096..4096 + 8192].copy_from_slice(&head);
    let answer = a.admin("fail main2").unwrap();
    assert_eq!(answer, "device 2 failed; failed devices [2]");
    let mut back = vec![0u8; data.len()];
    a.read_at(&mut back, 0).unwrap();
    assert!(back == data, "degraded read");
    // Rebuild onto a fresh device named by spec; the report comes back as JSON.
    let r = a.admin("rebuild main2 --replacement mem:1M").unwrap();
    let report: ecstack_array::RebuildReport = serde_json::from_str(&r).unwrap();
    assert_eq!(report.devices, vec![2]);
    assert!(report.chunks > 0, "{report:?}");
    assert!(a.failed_devices().is_empty());
    assert_eq!(a.superblock().specs[2], "mem:1M");
    a.read_at(&mut back, 0).unwrap();
    assert!(back == data, "after rebuild");
    // A replacement that cannot be opened is an error line; nothing changes.
    let e = a
        .admin("rebuild 1 --replacement nosuchkind:1M")
        .unwrap_err();
    assert!(
        e.to_string()
            .starts_with("opening replacement 'nosuchkind:1M'"),
        "{e}"
    );
    assert!(a.failed_devices().is_empty());
    // The other commands answer.
    assert!(a.admin("help").unwrap().contains("rebuild DEV"));
    assert_eq!(a.admin("sync").unwrap(), "synced");
    let c: ecstack_array::CommitReport = serde_json::from_str(&a.admin("commit").unwrap()).unwrap();
    assert_eq!(c.stripes, 0, "everything was committed by the rebuilds");
    let st: ecstack_array::ArrayStatus = serde_json::from_str(&a.admin("status").unwrap()).unwrap();
    assert_eq!(st.devices.len(), 6);
    let e = a.admin("explode").unwrap_err().to_string();
    assert!(e.starts_with("unknown array command 'explode'"), "{e}");
}

#[test]
fn md_arrays_have_no_log_devices_to_name() {
    let a = mem_array(SchemeKind::Md);
    let e = a.admin("fail log0").unwrap_err().to_string();
    assert!(e.contains("no log devices"), "{e}");
    assert!(a.failed_devices().is_empty());
    assert_eq!(
        a.admin("fail 4").unwrap(),
        "device 4 failed; failed devices [4]"
    );
}

#[test]
fn reopening_from_recorded_specs() {
    let dir = std::env::temp_dir().join(format!("ecstack-admin-reopen-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let spec = |name: &str, size: &str| format!("file:{}/{name}?size={size}", dir.display());
    let main: Vec<String> = (0..3).map(|i| spec(&format!("m{i}"), "1M")).collect();
    let log = [spec("l0", "1M")];
    let meta = spec("meta", "4M");
    let open = |s: &String| ecstack_device::open_spec(s).unwrap();
    let mut specs = main.clone();
    specs.extend(log.iter().cloned());
    specs.push(meta.clone());
    let cfg = ArrayConfig {
        scheme: SchemeKind::Pl,
        chunk_size: 4096,
        ..ArrayConfig::raid5(2)
    };
    let a = Array::create(
        &cfg,
        ArrayDevices {
            main: main.iter().map(open).collect(),
            log: log.iter().map(open).collect(),
            meta: open(&meta),
            specs: Some(specs),
        },
    )
    .unwrap();
    let data = pattern(64 << 10, 3);
    a.write_at(&data, 8192).unwrap();
    a.close().unwrap();
    drop(a);
    // Everything from the superblock; then with main device 1 gone (a pulled disk): degraded.
    let r = Array::open_recorded(&meta, &[], &[], &Default::default()).unwrap();
    assert!(r.unavailable.is_empty());
    let mut back = vec![0u8; data.len()];
    r.array.read_at(&mut back, 8192).unwrap();
    assert!(back == data);
    r.array.close().unwrap();
    drop(r);
    let mut main2 = main.clone();
    main2[1] = format!("file:{}/missing/m1", dir.display());
    let r = Array::open_recorded(&meta, &main2, &[], &Default::default()).unwrap();
    assert_eq!(r.unavailable.len(), 1, "{:?}", r.unavailable);
    assert_eq!(r.unavailable[0].spec, main2[1]);
    assert_eq!(r.array.failed_devices(), vec![1]);
    r.array.read_at(&mut back, 8192).unwrap();
    assert!(back == data, "degraded read after reopening");
    drop(r);
    let e = Array::open_recorded(
        &format!("file:{}/nometa", dir.display()),
        &[],
        &[],
        &Default::default(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("opening metadata volume"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}
