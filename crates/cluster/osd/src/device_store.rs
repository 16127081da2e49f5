//! [`DeviceStore`]: the second [`ChunkStore`] backend, on one block device (`ecstack osd
//! --store-device SPEC`, any spec of `ecstack_device::spec`: a file, a raw device, a throttled or
//! faulty one) with its own extent allocator, so that where a chunk's bytes and its log lie — and
//! the seeks fragmentation costs on an HDD-profiled device — is the store's doing, not a file
//! system's.
//!
//! The chunks are the [`FileStore`]'s (same header, block checksums, PLR reserve, log records,
//! merges and dirty-flag cycle, byte for byte), kept in files of a [`DeviceDir`]: a small file
//! system of the store's own on the device — a superblock, a file table (copy-on-write
//! checkpoints and a journal, each record checksummed: `table`) and a first-fit allocator over the
//! data region's 4 KiB blocks (`alloc`). A chunk's file is allocated whole, its PLR reserve
//! included, in one extent where a free run holds it; a log (FL, CodFS PL) grows by the blocks each
//! record needs, in arrival order, so the logs of chunks updated in turn interleave and fragment as
//! the seed's do on ext4 (§5.2, Table 5.1). docs/cluster.md "The OSD chunk store on a block device"
//! has the layout.

use std::ops::Range;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use ecstack_device::{
    lock_exclusive, open_spec, BlockDevice, FaultConfig, Faulty, LockError, MemDevice,
    PowerCutPolicy,
};

use crate::api::ChunkMeta;
use crate::chunk_store::{
    BlockKey, BlockPart, BlockTable, Change, ChunkImage, ChunkStore, ChunkStoreError, Compacted,
    FileStore, FileStoreOptions, LogPlace, LogState, Modify, ModifyExtents, ObjectBlocks, Part,
    Result, StoreUsage,
};
use crate::store_dir::holder_line;

mod alloc;
mod dir;
mod table;

pub use dir::DeviceDir;
pub use table::{Geometry, DEVICE_FORMAT};

/// Bytes at the start of a device that must be zero (or a store's) before a store is made on it.
const BLANK_CHECK_BYTES: u64 = 1 << 20;

/// How a [`DeviceStore`] opens its device.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeviceStoreOptions {
    /// Make a new store on a device that holds other data (`ecstack osd --force`), as `array
    /// create --force` does; without it such a device is refused.
    pub force: bool,
    /// The journal's size for a new store (default: the device's capacity / 256, 256 KiB to 64
    /// MiB). Tests make it small, so that checkpoints come often.
    #[doc(hidden)]
    pub journal_bytes: Option<u64>,
}

/// A [`ChunkStore`] on one block device (see the module doc).
pub struct DeviceStore {
    store: FileStore,
    dir: Arc<DeviceDir>,
}

impl std::fmt::Debug for DeviceStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DeviceStore({})", self.dir.device().name())
    }
}

/// Why `spec` cannot hold a store, if it is a device in virtual time (a simulated HDD or SSD:
/// its time is modelled, not spent, so seeks would cost nothing an OSD's clients wait for).
pub fn refuse_virtual_time(spec: &str) -> Option<String> {
    let mut rest = spec.trim();
    loop {
        let before = rest;
        for wrapper in ["metered:", "faulty:", "throttled:"] {
            if let Some(r) = rest.strip_prefix(wrapper) {
                rest = match r.split_once(':') {
                    Some((params, inner))
                        if params.split(',').all(|i| {
                            i.split_once('=').is_some_and(|(k, _)| {
                                !k.is_empty()
                                    && k.chars().all(|c| c.is_ascii_lowercase() || c == '_')
                            })
                        }) =>
                    {
                        inner
                    }
                    _ => r,
                };
            }
        }
        if rest == before {
            break;
        }
    }
    let base = rest.split(':').next().unwrap_or("");
    match base {
        "hdd" => Some(
            "--store-device hdd: keeps virtual time; use throttled:profile=eplog-hdd:file:PATH?size=SIZE"
                .into(),
        ),
        "ssd" => Some(
            "--store-device ssd: keeps virtual time; use throttled:profile=eplog-ssd:file:PATH?size=SIZE"
                .into(),
        ),
        _ => None,
    }
}

impl DeviceStore {
    /// Opens the device `spec` names (refusing simulated, virtual-time devices) and the store on
    /// it ([`DeviceStore::open`]).
    pub fn open_spec(spec: &str, options: DeviceStoreOptions) -> Result<DeviceStore> {
        let backing = |message: String| ChunkStoreError::Backing {
            at: spec.to_owned(),
            message,
        };
        if let Some(why) = refuse_virtual_time(spec) {
            return Err(backing(why));
        }
        let dev = open_spec(spec).map_err(|e| backing(e.to_string()))?;
        Self::open(dev, spec, options)
    }

    /// Locks the files behind `dev` (`flock`, and `O_EXCL` on a block device), then opens the
    /// store on it: a device with a store's superblock is opened (its table replayed); a blank
    /// one (its first MiB zero) gets a new store; anything else is refused unless
    /// `options.force`. `name` names the device in messages (its spec).
    pub fn open(
        dev: Arc<dyn BlockDevice>,
        name: &str,
        options: DeviceStoreOptions,
    ) -> Result<DeviceStore> {
        let backing = |message: String| ChunkStoreError::Backing {
            at: name.to_owned(),
            message,
        };
        let io = |op: &'static str| {
            move |source: std::io::Error| ChunkStoreError::Io {
                at: name.to_owned(),
                op,
                source,
            }
        };
        let mut locks = Vec::new();
        for path in dev.backing_paths() {
            match lock_exclusive(&path) {
                Ok(l) => locks.push(l),
                Err(LockError::Busy { holder }) => {
                    return Err(ChunkStoreError::Locked {
                        at: name.to_owned(),
                        holder: holder_line(holder),
                    })
                }
                Err(LockError::Io(e)) => return Err(io("lock device")(e)),
            }
        }
        let mut head = vec![0u8; BLANK_CHECK_BYTES.min(dev.capacity()) as usize];
        dev.read_at(&mut head, 0)
            .map_err(|e| io("read superblock")(crate::store_dir::device_io(e)))?;
        let geo = match Geometry::decode(&head, dev.capacity()).map_err(backing)? {
            Some(g) => g,
            None => {
                if let Some(at) = head.iter().position(|b| *b != 0) {
                    if !options.force {
                        return Err(backing(format!(
                            "the device holds data (a non-zero byte at offset {at} of its first MiB) and no chunk store; refusing to overwrite it without --force"
                        )));
                    }
                }
                let geo = Geometry::for_capacity(dev.capacity(), options.journal_bytes)
                    .map_err(|e| backing(format!("cannot hold a chunk store: {e}")))?;
                DeviceDir::format(&*dev, &geo).map_err(io("make chunk store"))?;
                geo
            }
        };
        let dir = Arc::new(
            DeviceDir::load(dev, name.to_owned(), geo, locks).map_err(io("load chunk table"))?,
        );
        let store = FileStore::on_dir(dir.clone(), FileStoreOptions { direct: false })?;
        Ok(DeviceStore { store, dir })
    }

    /// The device's capacity in bytes.
    pub fn capacity(&self) -> u64 {
        self.dir.device().capacity()
    }

    /// Free bytes of the data region.
    pub fn free_bytes(&self) -> u64 {
        self.dir.free_bytes()
    }

    pub fn geometry(&self) -> Geometry {
        self.dir.geometry()
    }

    /// The files' table and allocator (tests, reports).
    pub fn dir(&self) -> &Arc<DeviceDir> {
        &self.dir
    }

    /// [`FileStore::damage`] on the device (tests).
    #[doc(hidden)]
    pub fn damage(&self, segment: u64, index: u32, part: Part) -> Result<()> {
        self.store.damage(segment, index, part)
    }
}

/// Every operation is the [`FileStore`]'s over the device's files.
impl ChunkStore for DeviceStore {
    fn put(&self, meta: &ChunkMeta, data: &[u8]) -> Result<()> {
        self.store.put(meta, data)
    }
    fn put_image(&self, image: ChunkImage) -> Result<()> {
        self.store.put_image(image)
    }
    fn meta(&self, segment: u64, index: u32) -> Result<Option<ChunkMeta>> {
        self.store.meta(segment, index)
    }
    fn read(&self, segment: u64, index: u32, offset: u64, len: u64) -> Result<(ChunkMeta, Bytes)> {
        self.store.read(segment, index, offset, len)
    }
    fn modify(
        &self,
        segment: u64,
        index: u32,
        offset: u64,
        len: u64,
        change: Change,
        f: Modify<'_>,
    ) -> Result<ChunkMeta> {
        self.store.modify(segment, index, offset, len, change, f)
    }
    fn modify_extents(
        &self,
        segment: u64,
        index: u32,
        extents: &[Range<u64>],
        change: Change,
        f: ModifyExtents<'_>,
    ) -> Result<ChunkMeta> {
        self.store
            .modify_extents(segment, index, extents, change, f)
    }
    fn delete(&self, segment: u64, index: u32) -> Result<bool> {
        self.store.delete(segment, index)
    }
    fn list(&self) -> Result<Vec<(u64, u32)>> {
        self.store.list()
    }
    fn usage(&self) -> StoreUsage {
        self.store.usage()
    }
    fn append(
        &self,
        segment: u64,
        index: u32,
        place: LogPlace,
        extents: &[Range<u64>],
        payload: &[u8],
        change: Change,
    ) -> Result<ChunkMeta> {
        self.store
            .append(segment, index, place, extents, payload, change)
    }
    fn merge(&self, segment: u64, index: u32) -> Result<u64> {
        self.store.merge(segment, index)
    }
    fn log_state(&self, segment: u64, index: u32) -> Result<Option<LogState>> {
        self.store.log_state(segment, index)
    }
    fn set_reserve(&self, segment: u64, index: u32, bytes: u64) -> Result<()> {
        self.store.set_reserve(segment, index, bytes)
    }
    fn logged(&self) -> Vec<(u64, u32)> {
        self.store.logged()
    }
    fn put_blocks(
        &self,
        object: u64,
        block_bytes: u32,
        blocks: &[(BlockKey, &[u8])],
    ) -> Result<()> {
        self.store.put_blocks(object, block_bytes, blocks)
    }
    fn block_table(&self, object: u64) -> Result<Option<BlockTable>> {
        self.store.block_table(object)
    }
    fn open_blocks(&self, object: u64) -> Result<Option<ObjectBlocks>> {
        self.store.open_blocks(object)
    }
    fn delete_blocks(&self, object: u64, keys: Option<&[BlockKey]>) -> Result<u32> {
        self.store.delete_blocks(object, keys)
    }
    fn objects(&self) -> Result<Vec<u64>> {
        self.store.objects()
    }
    fn compactable(&self) -> Vec<u64> {
        self.store.compactable()
    }
    fn compact_blocks(
        &self,
        object: u64,
        go_on: &mut dyn FnMut() -> bool,
    ) -> Result<Option<Compacted>> {
        self.store.compact_blocks(object, go_on)
    }
    fn damage_block(&self, object: u64, key: BlockKey, part: BlockPart) -> Result<()> {
        self.store.damage_block(object, key, part)
    }
    fn fragments(&self, segment: u64, index: u32) -> Result<u64> {
        self.store.fragments(segment, index)
    }
}

/// A device for power-cut tests of a [`DeviceStore`]: a [`Faulty`]`<`[`MemDevice`]`>` whose
/// operations are counted, the power cut just before a chosen one (what was not flushed survives,
/// tears or is lost by the [`PowerCutPolicy`]), and every operation refused until
/// [`SimDevice::power_on`]. A cut is named by the operation and the region of the layout it hit
/// (`write journal`, `read data`, `flush`). Seeded: a seed and a cut point replay exactly.
#[doc(hidden)]
pub struct SimDevice {
    dev: Faulty<MemDevice>,
    geo: Geometry,
    state: Mutex<SimState>,
}

#[derive(Debug, Default)]
struct SimState {
    ops: u64,
    cut_at: Option<u64>,
    powered_off: bool,
    last_cut: Option<String>,
    torn: u64,
}

impl std::fmt::Debug for SimDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SimDevice({})", self.dev.name())
    }
}

impl SimDevice {
    /// An empty device of `capacity` bytes; `journal_bytes` as the store will be made with (for
    /// the names of cut points).
    pub fn new(
        seed: u64,
        policy: PowerCutPolicy,
        capacity: u64,
        journal_bytes: Option<u64>,
    ) -> SimDevice {
        let mem = MemDevice::with_name(format!("sim-{seed}"), capacity).expect("a memory device");
        let cfg = FaultConfig {
            seed,
            power_cut: policy,
            ..FaultConfig::default()
        };
        SimDevice {
            dev: Faulty::new(mem, cfg),
            geo: Geometry::for_capacity(capacity, journal_bytes).expect("room for a store"),
            state: Mutex::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SimState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts an operation, cutting the power first if it is the chosen one.
    fn gate(&self, what: &dyn Fn() -> String) -> ecstack_device::Result<()> {
        let mut st = self.lock();
        let op = st.ops;
        st.ops += 1;
        if st.cut_at == Some(op) && !st.powered_off {
            st.powered_off = true;
            st.last_cut = Some(what());
            let report = self.dev.power_cut()?;
            st.torn += report.count(ecstack_device::Outcome::Torn) as u64;
        }
        if st.powered_off {
            return Err(ecstack_device::DeviceError::io(
                self.dev.name(),
                std::io::Error::other("powered off (simulated power cut)"),
            ));
        }
        Ok(())
    }

    pub fn cut_at(&self, op: Option<u64>) {
        self.lock().cut_at = op;
    }
    pub fn ops(&self) -> u64 {
        self.lock().ops
    }
    pub fn is_powered_off(&self) -> bool {
        self.lock().powered_off
    }
    pub fn power_on(&self) {
        self.lock().powered_off = false;
        self.dev.power_on();
    }
    pub fn last_cut(&self) -> Option<String> {
        self.lock().last_cut.clone()
    }
    /// Writes the cuts so far tore.
    pub fn torn_writes(&self) -> u64 {
        self.lock().torn
    }
}

impl BlockDevice for SimDevice {
    fn name(&self) -> &str {
        self.dev.name()
    }
    fn capacity(&self) -> u64 {
        self.dev.capacity()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> ecstack_device::Result<()> {
        self.gate(&|| format!("read {}", self.geo.region(offset)))?;
        self.dev.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> ecstack_device::Result<()> {
        self.gate(&|| format!("write {}", self.geo.region(offset)))?;
        self.dev.write_at(buf, offset)
    }
    fn flush(&self) -> ecstack_device::Result<()> {
        self.gate(&|| "flush".into())?;
        self.dev.flush()
    }
    fn discard(&self, offset: u64, len: u64) -> ecstack_device::Result<()> {
        self.gate(&|| format!("discard {}", self.geo.region(offset)))?;
        self.dev.discard(offset, len)
    }
}
