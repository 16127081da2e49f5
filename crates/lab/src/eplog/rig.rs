//! The arrays the runs replay on: devices per testbed, the pre-filled device files of Exps 4–5, and
//! the sequential pre-write that makes every replayed write an update.

use std::fmt;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ecstack_array::{Array, ArrayConfig, ArrayDevices, OpenOptions, SchemeKind};
use ecstack_device::{
    open_spec, BlockDevice, MemDevice, ServiceProfile, SimSsd, SsdConfig, ThrottleConfig, Throttled,
};
use serde::Serialize;

use super::config::{Setting, Testbed};
use super::workload::{Sizing, Trace, CHUNK_BYTES};
use crate::{io_at, LabError, Result};

/// What the devices of a run are.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Backing {
    /// Simulated SSDs (metadata only) for main devices, simulated HDDs for log devices (Exps 1–3).
    Sim,
    /// Exp 4 (and 5, always on files) on one of its testbeds.
    Testbed(Testbed),
}

impl fmt::Display for Backing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Backing::Sim => "simulated",
            Backing::Testbed(Testbed::Files) => "O_DIRECT files",
            Backing::Testbed(Testbed::Paper) => "EPLOG testbed emulated",
        })
    }
}

impl Serialize for Backing {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        crate::serialize_display(self, s)
    }
}

/// Main and log device files in the experiment's directory.
const MAIN_FILES: usize = Setting::K_MAX + Setting::M_MAX;
const LOG_FILES: usize = Setting::M_MAX;

fn main_file(dir: &Path, i: usize) -> PathBuf {
    dir.join(format!("main{i}.img"))
}

fn log_file(dir: &Path, i: usize) -> PathBuf {
    dir.join(format!("log{i}.img"))
}

/// The device files of Exps 4–5, created once and written through with zeros (so no run writes into
/// holes of a sparse file, which costs extent allocation that a real SSD does not have). Dropping
/// it removes the files, and the directory if this created it and it is then empty (a directory the
/// user named, such as /var/tmp, is never removed).
pub struct DeviceFiles {
    dir: PathBuf,
    created_dir: bool,
}

impl DeviceFiles {
    pub fn create(dir: &Path, traces: &[Trace]) -> Result<DeviceFiles> {
        let (mut main, mut log) = (0u64, 0u64);
        for t in traces {
            for s in Setting::ALL {
                let sz = Sizing::of(t, s);
                main = main.max(sz.main_bytes());
                log = log.max(sz.log_bytes());
            }
        }
        DeviceFiles::with_sizes(dir, main, log)
    }

    /// Main files of `main` bytes and log files of `log` bytes.
    pub fn with_sizes(dir: &Path, main: u64, log: u64) -> Result<DeviceFiles> {
        let created_dir = !dir.exists();
        std::fs::create_dir_all(dir).map_err(io_at(dir))?;
        let files = DeviceFiles {
            dir: dir.to_path_buf(),
            created_dir,
        };
        let paths = (0..MAIN_FILES)
            .map(|i| (main_file(dir, i), main))
            .chain((0..LOG_FILES).map(|i| (log_file(dir, i), log)));
        for (p, size) in paths {
            write_zeros(&p, size)?;
        }
        Ok(files)
    }
}

impl Drop for DeviceFiles {
    fn drop(&mut self) {
        for i in 0..MAIN_FILES {
            let _ = std::fs::remove_file(main_file(&self.dir, i));
        }
        for i in 0..LOG_FILES {
            let _ = std::fs::remove_file(log_file(&self.dir, i));
        }
        // Only a directory this created, and only when nothing else is in it.
        if self.created_dir {
            let _ = std::fs::remove_dir(&self.dir);
        }
    }
}

fn write_zeros(p: &Path, size: u64) -> Result<()> {
    const PIECE_BYTES: u64 = 1 << 20;
    let zero = vec![0u8; PIECE_BYTES as usize];
    let mut f = std::fs::File::create(p).map_err(io_at(p))?;
    for _ in 0..size.div_ceil(PIECE_BYTES) {
        f.write_all(&zero).map_err(io_at(p))?;
    }
    f.sync_all().map_err(io_at(p))
}

/// An array built for one run, and the SSD size its simulated devices got.
pub struct Rig {
    pub array: Array,
    pub ssd_blocks: u32,
}

fn ssd_config(dev_bytes: u64) -> SsdConfig {
    let base = SsdConfig::default();
    let per_block = (base.pages_per_block as u64 * base.page_size as u64) as f64 * (1.0 - base.op);
    let blocks = ((dev_bytes as f64 / per_block).ceil() as u32 + 8).max(64);
    SsdConfig { blocks, ..base }
}

type Devices = Vec<Arc<dyn BlockDevice>>;

fn sim_devices(
    ssd: &SsdConfig,
    n: usize,
    nlog: usize,
    log_bytes: u64,
) -> Result<(Devices, Devices)> {
    let main = (0..n)
        .map(|_| Ok(Arc::new(SimSsd::new(ssd.clone())?) as Arc<dyn BlockDevice>))
        .collect::<Result<_>>()?;
    let log = (0..nlog)
        .map(|_| Ok(open_spec(&format!("hdd:capacity={log_bytes},data=0"))?))
        .collect::<Result<_>>()?;
    Ok((main, log))
}

/// The pre-filled files (see [`DeviceFiles`]): writes land on allocated blocks, as on an SSD that has
/// been written before, whatever slot a scheme picks.
fn file_devices(dir: &Path, n: usize, nlog: usize, sz: &Sizing) -> Result<(Devices, Devices)> {
    let open = |p: PathBuf, need: u64| -> Result<Arc<dyn BlockDevice>> {
        let d = open_spec(&format!("file:{}?direct=1", p.display()))?;
        if d.capacity() < need {
            return Err(LabError::Run(format!(
                "{} holds {} bytes, this run needs {need}",
                p.display(),
                d.capacity()
            )));
        }
        Ok(d)
    };
    let main = (0..n)
        .map(|i| open(main_file(dir, i), sz.main_bytes()))
        .collect::<Result<_>>()?;
    let log = (0..nlog)
        .map(|i| open(log_file(dir, i), sz.log_bytes()))
        .collect::<Result<_>>()?;
    Ok((main, log))
}

fn paper_devices(n: usize, nlog: usize, sz: &Sizing) -> Result<(Devices, Devices)> {
    let dev = |profile: &str, bytes: u64, seed: u64| -> Result<Arc<dyn BlockDevice>> {
        let cfg = ThrottleConfig {
            profile: ServiceProfile::preset(profile),
            seed,
            ..ThrottleConfig::default()
        };
        // Pre-faulted: eplog writes out of place into slots never written before, and a page
        // fault on each first write would charge it a cost an SSD does not have.
        let mem = MemDevice::new(bytes)?.prefaulted();
        Ok(Arc::new(Throttled::new(mem, cfg)))
    };
    let main = (0..n)
        .map(|i| dev("eplog-ssd", sz.main_bytes(), i as u64))
        .collect::<Result<_>>()?;
    let log = (0..nlog)
        .map(|i| dev("eplog-hdd", sz.log_bytes(), 100 + i as u64))
        .collect::<Result<_>>()?;
    Ok((main, log))
}

/// An empty array for `t` at setting `s` on `backing`'s devices (`dir` holds the device files).
pub fn build(
    t: &Trace,
    scheme: SchemeKind,
    s: Setting,
    backing: Backing,
    dir: &Path,
) -> Result<Rig> {
    build_sized(&Sizing::of(t, s), scheme, s, backing, dir)
}

/// An empty array of `sz`'s size at setting `s` on `backing`'s devices.
pub fn build_sized(
    sz: &Sizing,
    scheme: SchemeKind,
    s: Setting,
    backing: Backing,
    dir: &Path,
) -> Result<Rig> {
    let nlog = if scheme.uses_log() { s.m } else { 0 };
    let ssd = ssd_config(sz.main_bytes());
    let (main, log) = match backing {
        Backing::Sim => sim_devices(&ssd, s.n(), nlog, sz.log_bytes())?,
        Backing::Testbed(Testbed::Files) => file_devices(dir, s.n(), nlog, sz)?,
        Backing::Testbed(Testbed::Paper) => paper_devices(s.n(), nlog, sz)?,
    };
    let meta: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(1 << 30)?);
    let cfg = ArrayConfig {
        chunk_size: CHUNK_BYTES as u32,
        reserve: (sz.slots - sz.stripes) as f64 / sz.slots as f64 * 0.999,
        max_stripes: Some(sz.stripes),
        ..ArrayConfig::with_geometry(scheme, s.k, s.m)
    };
    let opts = OpenOptions {
        parallel_io: backing != Backing::Sim,
        // The testbed's files are the experiment's own scratch space, rewritten by every run.
        force: true,
        ..OpenOptions::default()
    };
    let devices = ArrayDevices {
        main,
        log,
        meta,
        specs: None,
    };
    // Metadata-only simulated SSDs keep no data: the array turns its chunk checksums off itself.
    Ok(Rig {
        array: Array::create_with(&cfg, devices, &opts)?,
        ssd_blocks: ssd.blocks,
    })
}

/// Write the whole working set sequentially in stripe-aligned pieces, then commit.
pub fn prewrite(a: &Array, wss: u64) -> Result<()> {
    let sb = a.geometry().stripe_bytes();
    let piece = sb * 32;
    let end = wss.div_ceil(sb) * sb;
    let buf = vec![0x5au8; piece as usize];
    let mut off = 0;
    while off < end {
        let len = piece.min(end - off);
        a.write(&buf[..len as usize], off)?;
        off += len;
    }
    a.commit()?;
    Ok(())
}

/// GC victims (blocks reclaimed) per main SSD, averaged over the main array.
pub fn gc_per_ssd(a: &Array) -> f64 {
    let st = a.status();
    let v: Vec<u64> = st
        .devices
        .iter()
        .filter(|d| d.role == "main")
        .map(|d| d.ssd.as_ref().map(|s| s.gc_victims).unwrap_or(0))
        .collect();
    v.iter().sum::<u64>() as f64 / v.len().max(1) as f64
}
