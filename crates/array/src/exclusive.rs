//! One opener per array (issue 46): every opener of an array locks the metadata volume and every
//! member device for the array's lifetime, and `create` refuses devices that hold something.
//!
//! The locks are those of `ecstack_device::lock` (`flock` on files, `O_EXCL` on block devices)
//! on the files behind each device ([`BlockDevice::backing_paths`]); devices in memory and
//! simulated devices have nothing to lock.

use std::path::PathBuf;
use std::sync::Arc;

use ecstack_device::{lock_exclusive, BlockDevice, DeviceError, DeviceLock, LockError};

use crate::format::{decode_label, Superblock};
use crate::{ArrayError, Result};

/// Bytes at the start of each device that `create` checks are zero.
const BLANK_CHECK_BYTES: u64 = 1 << 20;

/// The devices of an array (as `ArrayDevices` holds them).
pub(crate) struct Members<'a> {
    pub main: &'a [Arc<dyn BlockDevice>],
    pub log: &'a [Arc<dyn BlockDevice>],
    pub meta: &'a Arc<dyn BlockDevice>,
    /// Their specs (main, log, meta) when known.
    pub specs: Option<&'a [String]>,
}

/// The devices with the role and the name (its spec when known) each is shown by in errors.
fn roles<'a>(devices: &Members<'a>) -> Vec<(String, &'a Arc<dyn BlockDevice>)> {
    let specs = devices.specs.unwrap_or(&[]);
    let name = |i: usize, d: &Arc<dyn BlockDevice>| {
        specs
            .get(i)
            .cloned()
            .unwrap_or_else(|| d.name().to_string())
    };
    let n = devices.main.len();
    let mut out = Vec::new();
    let main: &'a [Arc<dyn BlockDevice>] = devices.main;
    for (i, d) in main.iter().enumerate() {
        out.push((format!("array device {i} ({})", name(i, d)), d));
    }
    let log: &'a [Arc<dyn BlockDevice>] = devices.log;
    for (j, d) in log.iter().enumerate() {
        out.push((format!("array log device {j} ({})", name(n + j, d)), d));
    }
    let meta_at = n + devices.log.len();
    out.push((
        format!("array meta {}", name(meta_at, devices.meta)),
        devices.meta,
    ));
    out
}

/// Lock every file and block device behind the array's devices, or refuse in one line naming
/// the process that holds one.
pub(crate) fn lock_devices(devices: &Members<'_>) -> Result<Vec<DeviceLock>> {
    let mut held: Vec<DeviceLock> = Vec::new();
    let mut seen: Vec<PathBuf> = Vec::new();
    // The metadata volume first: a refusal names it, the volume every opener names.
    let mut order = roles(devices);
    order.rotate_right(1);
    for (role, d) in order {
        for path in d.backing_paths() {
            let key = std::fs::canonicalize(&path).unwrap_or_else(|_| path.clone());
            if seen.contains(&key) {
                continue;
            }
            seen.push(key);
            held.push(lock_file(&role, &path)?);
        }
    }
    Ok(held)
}

/// Lock the files behind `replacement`, a device about to become member `role` of an open array
/// whose locks are `held`, adding them to `held` (a file the array holds already, such as the
/// failed device rebuilt in place, is skipped).
pub(crate) fn lock_replacement(
    held: &mut Vec<DeviceLock>,
    role: &str,
    replacement: &Arc<dyn BlockDevice>,
) -> Result<()> {
    let canon = |p: &std::path::Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    for path in replacement.backing_paths() {
        let key = canon(&path);
        if held.iter().any(|l| canon(l.path()) == key) {
            continue;
        }
        held.push(lock_file(role, &path)?);
    }
    Ok(())
}

/// Lock one file or block device (`role` names it in a refusal), or refuse in one line naming the
/// process that holds it.
pub(crate) fn lock_file(role: &str, path: &std::path::Path) -> Result<DeviceLock> {
    match lock_exclusive(path) {
        Ok(l) => Ok(l),
        Err(LockError::Busy { holder }) => Err(ArrayError::Busy(busy_message(role, holder))),
        Err(LockError::Io(e)) => {
            Err(DeviceError::io(format!("{role}: locking {}", path.display()), e).into())
        }
    }
}

fn busy_message(role: &str, holder: Option<ecstack_device::Holder>) -> String {
    let Some(h) = holder else {
        return format!(
            "{role} is in use by another program (no holder found in /proc/locks: a block device may be mounted or held by the kernel); stop it first"
        );
    };
    if h.pid == std::process::id() {
        return format!(
            "{role} is already open in this process (pid {}); close that array first",
            h.pid
        );
    }
    let reach = match h.admin_socket() {
        Some(sock) => format!("reach it with --admin {sock}"),
        None => "reach it through its --admin socket".to_string(),
    };
    format!(
        "{role} is open in pid {} ({}); {reach}, or stop it first",
        h.pid,
        h.command(120)
    )
}

/// `create` without `force`: refuse a device (backed by a file or block device) whose first MiB
/// holds an ecstack label or superblock, or any non-zero byte.
pub(crate) fn check_blank(devices: &Members<'_>) -> Result<()> {
    for (role, d) in roles(devices) {
        if d.backing_paths().is_empty() || !d.keeps_data() {
            continue;
        }
        let len = BLANK_CHECK_BYTES.min(d.capacity()) as usize;
        let mut head = vec![0u8; len];
        d.read_at(&mut head, 0)?;
        let Some(first) = head.iter().position(|b| *b != 0) else {
            continue;
        };
        let what = if let Ok(Some((uuid, idx))) = decode_label(&head) {
            format!("the label of member {idx} of ecstack array {uuid:016x}")
        } else if let Ok(Some(sb)) = Superblock::decode(&head) {
            format!(
                "the superblock of ecstack array {:016x} ({} {}+{})",
                sb.uuid, sb.scheme, sb.geometry.k, sb.geometry.m
            )
        } else {
            format!("data (a non-zero byte at offset {first} of its first MiB)")
        };
        return Err(ArrayError::NotBlank(format!(
            "{role} holds {what}; refusing to overwrite it without --force"
        )));
    }
    Ok(())
}
