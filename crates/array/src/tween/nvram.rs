//! TWEEN's NVRAM region: a byte-addressable persistent region (a file on an fsdax mount, or an
//! ordinary file; device DAX character devices are not supported, see docs/tween.md; mapped with `mmap` and persisted with `msync`; in tests an in-memory region whose
//! persistent image changes only on `persist`), and the layout of TWEEN's metadata in it. Byte
//! layout, write ordering and the durability assumption: `docs/tween.md`.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::{ArrayError, Result};

pub(crate) const NV_MAGIC: &[u8; 8] = b"ECSTKTWN";
/// Version 3: the header records TWEEN's policies (`Header::policy`: cost-benefit victims, adaptive
/// hotness groups, a separate cleaning stream) and GC mode 2 (background); the layout is version
/// 2's. A version-2 region is read as it is (policy 0: greedy, fixed groups, cleaning output
/// classified with host writes — what version 2 did) and its header is rewritten as version 3 on
/// open (`migrate_v2_header`). Version 2: map entries carry their extent's data CRC32C (and t̂ as an
/// age, see `MapEntry`), the header page holds the persisted counters (`StatsRecord`), t̂ counts
/// host extent writes. Version 1 regions are refused by name (`Header::decode`).
pub(crate) const NV_VERSION: u32 = 3;
/// Areas start on this boundary.
const AREA_ALIGN: u64 = 4096;
const HEADER_BYTES: u64 = 4096;
/// One map entry and one buffer entry (aligned: never straddles a 512-byte sector).
pub(crate) const ENTRY_BYTES: usize = 32;
const GROUP_HEADER_BYTES: u64 = 64;
/// Location bit of an extent held in an NVRAM buffer.
pub(crate) const LOC_NVRAM: u64 = 1 << 63;

const _: () = assert!(512 % ENTRY_BYTES == 0);

/// The persistent image of an in-memory NVRAM region, shared so a test can "crash" (drop the
/// region) and open a new region from what was persisted. `cut_after(n)` makes the (n+1)-th
/// persist from then on fail without reaching the image, as a power cut between two persists.
#[derive(Debug, Clone, Default)]
pub struct NvramImage(Arc<Mutex<ImageInner>>);

#[derive(Debug, Default)]
struct ImageInner {
    bytes: Vec<u8>,
    persists_left: Option<u64>,
}

impl NvramImage {
    fn lock(&self) -> std::sync::MutexGuard<'_, ImageInner> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
    /// Let `n` more persists through, then fail every one until `power_on`.
    pub fn cut_after(&self, n: u64) {
        self.lock().persists_left = Some(n);
    }
    pub fn power_on(&self) {
        self.lock().persists_left = None;
    }
    pub fn is_cut(&self) -> bool {
        self.lock().persists_left == Some(0)
    }
    /// The persistent bytes (tests corrupt them to check validation).
    pub fn with_bytes<R>(&self, f: impl FnOnce(&mut Vec<u8>) -> R) -> R {
        f(&mut self.lock().bytes)
    }
}

/// Where TWEEN's NVRAM region lives.
#[derive(Debug, Clone)]
pub enum NvramSpec {
    /// A file on an fsdax mount or an ordinary file (created with `bytes` when missing; `None`
    /// takes the size the layout needs).
    File { path: PathBuf, bytes: Option<u64> },
    /// An in-memory region (tests, simulations): only persisted ranges reach the image.
    Memory(NvramImage),
}

impl NvramSpec {
    pub fn file(path: impl Into<PathBuf>) -> NvramSpec {
        NvramSpec::File {
            path: path.into(),
            bytes: None,
        }
    }
    /// A fresh in-memory region and its image.
    pub fn memory() -> (NvramSpec, NvramImage) {
        let img = NvramImage::default();
        (NvramSpec::Memory(img.clone()), img)
    }
}

fn nv_err(s: impl Into<String>) -> ArrayError {
    ArrayError::Meta(format!("nvram: {}", s.into()))
}

/// A mapped file: the pointer and length of a `MAP_SHARED` mapping.
struct Mapped {
    ptr: *mut u8,
    len: usize,
    _file: std::fs::File,
    /// One opener per region, as for the array's devices (two arrays given one NVRAM file would
    /// overwrite each other's buffers and maps).
    _lock: ecstack_device::DeviceLock,
    path: PathBuf,
}

// SAFETY: the mapping is owned by this value and only reached through `&self`/`&mut self` of the
// region (which TWEEN keeps behind a mutex); the raw pointer is what makes it !Send by default.
unsafe impl Send for Mapped {}

impl Drop for Mapped {
    fn drop(&mut self) {
        // SAFETY (FFI): ptr/len are exactly the mapping made in `map_file`, unmapped once.
        unsafe {
            libc::munmap(self.ptr.cast(), self.len);
        }
    }
}

fn map_file(path: &Path, want: u64, create: bool) -> Result<Mapped> {
    use std::os::fd::AsRawFd;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(create)
        .truncate(false)
        .open(path)
        .map_err(|e| nv_err(format!("{}: {e}", path.display())))?;
    let lock = crate::exclusive::lock_file(&format!("TWEEN NVRAM {}", path.display()), path)?;
    let meta = file
        .metadata()
        .map_err(|e| nv_err(format!("{}: {e}", path.display())))?;
    let mut len = meta.len();
    if meta.is_file() && len < want {
        if !create {
            return Err(nv_err(format!(
                "{} holds {len} bytes, TWEEN's layout needs {want}",
                path.display()
            )));
        }
        file.set_len(want)
            .map_err(|e| nv_err(format!("{}: {e}", path.display())))?;
        len = want;
    }
    if len == 0 {
        return Err(nv_err(format!("{} is empty", path.display())));
    }
    let len = usize::try_from(len).map_err(|_| nv_err("region larger than the address space"))?;
    // SAFETY (FFI): a fresh shared read-write mapping of an open file descriptor; the result is
    // checked against MAP_FAILED before use, and the mapping lives as long as `Mapped`.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        return Err(nv_err(format!(
            "mmap {}: {}",
            path.display(),
            std::io::Error::last_os_error()
        )));
    }
    Ok(Mapped {
        ptr: ptr.cast(),
        len,
        _file: file,
        _lock: lock,
        path: path.to_path_buf(),
    })
}

enum Backing {
    Mapped(Mapped),
    Memory { work: Vec<u8>, image: NvramImage },
}

/// The NVRAM region: byte access plus `persist(range)`.
pub(crate) struct Region {
    backing: Backing,
}

impl Region {
    /// Open (or, with `create`, make) the region, at least `want` bytes long when creating.
    pub fn open(spec: &NvramSpec, want: u64, create: bool) -> Result<Region> {
        let backing = match spec {
            NvramSpec::File { path, bytes } => {
                let size = bytes.unwrap_or(want).max(want);
                Backing::Mapped(map_file(path, size, create)?)
            }
            NvramSpec::Memory(image) => {
                let mut img = image.lock();
                if create && (img.bytes.len() as u64) < want {
                    img.bytes.resize(want as usize, 0);
                }
                Backing::Memory {
                    work: img.bytes.clone(),
                    image: image.clone(),
                }
            }
        };
        Ok(Region { backing })
    }

    pub fn describe(&self) -> String {
        match &self.backing {
            Backing::Mapped(m) => m.path.display().to_string(),
            Backing::Memory { .. } => "memory".into(),
        }
    }

    pub fn len(&self) -> u64 {
        self.bytes().len() as u64
    }

    pub fn bytes(&self) -> &[u8] {
        match &self.backing {
            // SAFETY: the mapping is valid for `len` bytes while `m` lives; shared access only.
            Backing::Mapped(m) => unsafe { std::slice::from_raw_parts(m.ptr, m.len) },
            Backing::Memory { work, .. } => work,
        }
    }

    pub fn bytes_mut(&mut self) -> &mut [u8] {
        match &mut self.backing {
            // SAFETY: as above, and `&mut self` makes this the only access.
            Backing::Mapped(m) => unsafe { std::slice::from_raw_parts_mut(m.ptr, m.len) },
            Backing::Memory { work, .. } => work,
        }
    }

    /// Make `[off, off + len)` persistent.
    pub fn persist(&mut self, off: u64, len: u64) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        match &mut self.backing {
            Backing::Mapped(m) => {
                let page = 4096u64;
                let start = off / page * page;
                let end = (off + len).min(m.len as u64);
                // SAFETY (FFI): [start, end) lies inside the mapping and start is page-aligned.
                let rc = unsafe {
                    libc::msync(
                        m.ptr.add(start as usize).cast(),
                        (end - start) as usize,
                        libc::MS_SYNC,
                    )
                };
                if rc != 0 {
                    return Err(nv_err(format!(
                        "msync {}: {}",
                        m.path.display(),
                        std::io::Error::last_os_error()
                    )));
                }
            }
            Backing::Memory { work, image } => {
                let mut img = image.lock();
                match &mut img.persists_left {
                    Some(0) => return Err(nv_err("power cut (in-memory region)")),
                    Some(n) => *n -= 1,
                    None => {}
                }
                let (a, b) = (off as usize, (off + len) as usize);
                img.bytes[a..b].copy_from_slice(&work[a..b]);
            }
        }
        Ok(())
    }
}

/// TWEEN's parameters as the NVRAM header records them.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Header {
    pub uuid: u64,
    pub stripe_bytes: u64,
    pub extent_bytes: u64,
    pub groups: u32,
    pub segments: u64,
    pub extents: u64,
    pub alpha: f64,
    pub beta: f64,
    /// 0 = active, 1 = periodic, 2 = background (version 3).
    pub gc_mode: u32,
    pub gc_threshold: u64,
    pub seed: u64,
    /// Version 3: TWEEN's policies, `POLICY_*` bits (0 in a version-2 region).
    pub policy: u32,
    /// The version the region was written with (2 or 3; `encode` always writes 3).
    pub version: u32,
}

/// Victims by cost-benefit ((1 − u) · age / (1 + u)) instead of greedy (most stale).
pub(crate) const POLICY_COST_BENEFIT: u32 = 1;
/// The layer chooses how many hotness groups take host writes (1 when the writes show no skew).
pub(crate) const POLICY_ADAPTIVE_GROUPS: u32 = 2;
/// Cleaning output goes to a buffer of its own (a cold stream), never mixed with host writes.
pub(crate) const POLICY_GC_STREAM: u32 = 4;
pub(crate) const POLICY_ALL: u32 = POLICY_COST_BENEFIT | POLICY_ADAPTIVE_GROUPS | POLICY_GC_STREAM;

const H_VERSION: usize = 8;
const H_UUID: usize = H_VERSION + 4;
const H_STRIPE: usize = H_UUID + 8;
const H_EXTENT: usize = H_STRIPE + 8;
const H_GROUPS: usize = H_EXTENT + 8;
const H_SEGMENTS: usize = H_GROUPS + 4;
const H_EXTENTS: usize = H_SEGMENTS + 8;
const H_ALPHA: usize = H_EXTENTS + 8;
const H_BETA: usize = H_ALPHA + 8;
const H_GC_MODE: usize = H_BETA + 8;
const H_GC_THRESHOLD: usize = H_GC_MODE + 4;
const H_SEED: usize = H_GC_THRESHOLD + 8;
/// Version 2 ended here: its CRC32C at this offset.
const H_CRC_V2: usize = H_SEED + 8;
const H_POLICY: usize = H_SEED + 8;
const H_CRC: usize = H_POLICY + 4;
const H_END: usize = H_CRC + 4;
const _: () = assert!(H_END as u64 <= HEADER_BYTES);

fn le64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}
fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

impl Header {
    pub fn encode(&self, b: &mut [u8]) {
        b[..H_END].fill(0);
        b[..8].copy_from_slice(NV_MAGIC);
        b[H_VERSION..H_VERSION + 4].copy_from_slice(&NV_VERSION.to_le_bytes());
        b[H_UUID..H_UUID + 8].copy_from_slice(&self.uuid.to_le_bytes());
        b[H_STRIPE..H_STRIPE + 8].copy_from_slice(&self.stripe_bytes.to_le_bytes());
        b[H_EXTENT..H_EXTENT + 8].copy_from_slice(&self.extent_bytes.to_le_bytes());
        b[H_GROUPS..H_GROUPS + 4].copy_from_slice(&self.groups.to_le_bytes());
        b[H_SEGMENTS..H_SEGMENTS + 8].copy_from_slice(&self.segments.to_le_bytes());
        b[H_EXTENTS..H_EXTENTS + 8].copy_from_slice(&self.extents.to_le_bytes());
        b[H_ALPHA..H_ALPHA + 8].copy_from_slice(&self.alpha.to_le_bytes());
        b[H_BETA..H_BETA + 8].copy_from_slice(&self.beta.to_le_bytes());
        b[H_GC_MODE..H_GC_MODE + 4].copy_from_slice(&self.gc_mode.to_le_bytes());
        b[H_GC_THRESHOLD..H_GC_THRESHOLD + 8].copy_from_slice(&self.gc_threshold.to_le_bytes());
        b[H_SEED..H_SEED + 8].copy_from_slice(&self.seed.to_le_bytes());
        b[H_POLICY..H_POLICY + 4].copy_from_slice(&self.policy.to_le_bytes());
        let crc = crc32c::crc32c(&b[..H_CRC]);
        b[H_CRC..H_CRC + 4].copy_from_slice(&crc.to_le_bytes());
    }

    /// Decode and check the header: magic, version, checksum (the sizes are checked by `Layout`).
    pub fn decode(b: &[u8]) -> Result<Header> {
        if b.len() < H_END {
            return Err(nv_err(format!("region of {} bytes has no header", b.len())));
        }
        if &b[..8] != NV_MAGIC {
            return Err(nv_err(
                "no TWEEN header (bad magic): not a TWEEN NVRAM region",
            ));
        }
        // The checksum first: a flipped version field is corruption, not an old version. Version 2
        // had its checksum at H_CRC_V2 (no policy field).
        let v3 = crc32c::crc32c(&b[..H_CRC]) == le32(b, H_CRC);
        let v2 = crc32c::crc32c(&b[..H_CRC_V2]) == le32(b, H_CRC_V2);
        if !v3 && !v2 {
            return Err(nv_err("header checksum mismatch: the region is corrupt"));
        }
        let v = le32(b, H_VERSION);
        if (v == 2 && !v2) || (v == NV_VERSION && !v3) {
            return Err(nv_err("header checksum mismatch: the region is corrupt"));
        }
        if v == 1 {
            return Err(nv_err(
                "version 1 region (map without per-extent checksums, written by an older ecstack): this build reads version 2 only; read the data out with the older build and create the array again",
            ));
        }
        if v != NV_VERSION && v != 2 {
            return Err(nv_err(format!(
                "header version {v} is not supported (this build reads versions 2 and {NV_VERSION})"
            )));
        }
        let policy = if v == 2 { 0 } else { le32(b, H_POLICY) };
        if policy & !POLICY_ALL != 0 {
            return Err(nv_err(format!("unknown policy bits {policy:#x}")));
        }
        Ok(Header {
            uuid: le64(b, H_UUID),
            stripe_bytes: le64(b, H_STRIPE),
            extent_bytes: le64(b, H_EXTENT),
            groups: le32(b, H_GROUPS),
            segments: le64(b, H_SEGMENTS),
            extents: le64(b, H_EXTENTS),
            alpha: f64::from_le_bytes(b[H_ALPHA..H_ALPHA + 8].try_into().expect("8")),
            beta: f64::from_le_bytes(b[H_BETA..H_BETA + 8].try_into().expect("8")),
            gc_mode: le32(b, H_GC_MODE),
            gc_threshold: le64(b, H_GC_THRESHOLD),
            seed: le64(b, H_SEED),
            policy,
            version: v,
        })
    }
}

/// Offsets of the areas (derived from the header, checked against the region's length).
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    pub groups: usize,
    /// Extent slots per segment (= per buffer).
    pub slots: u64,
    pub extent_bytes: u64,
    pub centers: u64,
    pub group_headers: u64,
    pub buffer_entries: u64,
    pub buffer_data: u64,
    pub usage: u64,
    pub map: u64,
    pub end: u64,
}

fn align(x: u64) -> u64 {
    x.div_ceil(AREA_ALIGN) * AREA_ALIGN
}

impl Layout {
    pub fn new(h: &Header) -> Result<Layout> {
        let bad = |s: String| Err(nv_err(s));
        if h.groups == 0 || h.groups > 64 {
            return bad(format!("{} hotness groups (1..=64)", h.groups));
        }
        if h.extent_bytes == 0
            || h.stripe_bytes == 0
            || !h.stripe_bytes.is_multiple_of(h.extent_bytes)
        {
            return bad(format!(
                "extent size {} does not divide the stripe size {}",
                h.extent_bytes, h.stripe_bytes
            ));
        }
        // Written so that NaN fails too.
        let unit = |x: f64| x > 0.0 && x <= 1.0;
        if !unit(h.alpha) || !unit(h.beta) {
            return bad(format!(
                "alpha {} and beta {} must lie in (0, 1]",
                h.alpha, h.beta
            ));
        }
        let slots = h.stripe_bytes / h.extent_bytes;
        if slots >= u32::MAX as u64 || h.segments >= (1 << 40) || h.extents >= (1 << 40) {
            return bad("sizes out of range".into());
        }
        let n = h.groups as u64;
        let centers = HEADER_BYTES;
        let group_headers = align(centers + 8 * n + 4);
        let buffer_entries = align(group_headers + GROUP_HEADER_BYTES * n);
        let buffer_data = align(buffer_entries + n * slots * ENTRY_BYTES as u64);
        let usage = align(buffer_data + n * h.stripe_bytes);
        let map = align(usage + 8 * h.segments);
        let end = align(map + h.extents * ENTRY_BYTES as u64);
        Ok(Layout {
            groups: h.groups as usize,
            slots,
            extent_bytes: h.extent_bytes,
            centers,
            group_headers,
            buffer_entries,
            buffer_data,
            usage,
            map,
            end,
        })
    }

    pub fn fill_at(&self, g: usize) -> u64 {
        self.group_headers + GROUP_HEADER_BYTES * g as u64
    }
    pub fn buffer_entry_at(&self, g: usize, slot: u64) -> u64 {
        self.buffer_entries + (g as u64 * self.slots + slot) * ENTRY_BYTES as u64
    }
    pub fn buffer_data_at(&self, g: usize, slot: u64) -> u64 {
        self.buffer_data + (g as u64 * self.slots + slot) * self.extent_bytes
    }
    pub fn usage_at(&self, seg: u64) -> u64 {
        self.usage + 8 * seg
    }
    pub fn map_at(&self, e: u64) -> u64 {
        self.map + e * ENTRY_BYTES as u64
    }
}

/// The TWEEN state of one logical extent.
///
/// Encoding (32 bytes): loc u64, seq u64, age u32, H f32, data CRC32C u32, entry CRC32C u32 over
/// bytes 0..28. `age` is `seq − t̂` (both logical times; t̂ ≤ seq always), `u32::MAX` for t̂ = 0
/// (no host write known), saturated at `u32::MAX − 1` (an extent unwritten by the host for 4·10⁹
/// writes: its α/(t − t̂) term is below 10⁻⁹ either way).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub(crate) struct MapEntry {
    /// 0 never written; `LOC_NVRAM | group << 32 | slot`; else `1 + segment · slots + slot`.
    pub loc: u64,
    /// Logical time (write clock) of the write that produced this copy (host write or GC move).
    pub seq: u64,
    /// Host time (host-write clock) of the last host write (t̂), 0 if none.
    pub t_hat: u64,
    /// Hotness H.
    pub hot: f32,
    /// CRC32C of the extent's data (0 for an extent that reads as zeros without being stored).
    pub data_crc: u32,
}

const AGE_NONE: u32 = u32::MAX;

impl MapEntry {
    pub fn encode(&self) -> [u8; ENTRY_BYTES] {
        let mut b = [0u8; ENTRY_BYTES];
        if *self == MapEntry::default() {
            return b;
        }
        let age = if self.t_hat == 0 {
            AGE_NONE
        } else {
            debug_assert!(
                self.t_hat <= self.seq,
                "t̂ {} after seq {}",
                self.t_hat,
                self.seq
            );
            self.seq.saturating_sub(self.t_hat).min(AGE_NONE as u64 - 1) as u32
        };
        b[0..8].copy_from_slice(&self.loc.to_le_bytes());
        b[8..16].copy_from_slice(&self.seq.to_le_bytes());
        b[16..20].copy_from_slice(&age.to_le_bytes());
        b[20..24].copy_from_slice(&self.hot.to_le_bytes());
        b[24..28].copy_from_slice(&self.data_crc.to_le_bytes());
        let crc = crc32c::crc32c(&b[..28]);
        b[28..32].copy_from_slice(&crc.to_le_bytes());
        b
    }
    /// None: checksum mismatch (or an age that no encoding produces).
    pub fn decode(b: &[u8]) -> Option<MapEntry> {
        if b[..ENTRY_BYTES].iter().all(|&x| x == 0) {
            return Some(MapEntry::default());
        }
        if crc32c::crc32c(&b[..28]) != le32(b, 28) {
            return None;
        }
        let seq = le64(b, 8);
        let age = le32(b, 16);
        let t_hat = if age == AGE_NONE {
            0
        } else if (age as u64) < seq {
            seq - age as u64
        } else {
            return None;
        };
        Some(MapEntry {
            loc: le64(b, 0),
            seq,
            t_hat,
            hot: f32::from_le_bytes(b[20..24].try_into().expect("4")),
            data_crc: le32(b, 24),
        })
    }
}

/// The persisted counters (`TweenStats`) and the host-write clock, in the header page at
/// `STATS_AT`: nine u64 (the counters in declaration order, then the clock) then a CRC32C over them (all zero: nothing recorded yet). Rewritten with
/// every request's map entries, so a reopen continues the counts (a crash loses at most those of
/// the request it interrupted).
pub(crate) const STATS_AT: u64 = 2048;
pub(crate) const STATS_FIELDS: usize = 9;
pub(crate) const STATS_BYTES: usize = STATS_FIELDS * 8 + 4;
const _: () = assert!(H_END as u64 <= STATS_AT);
const _: () = assert!(STATS_AT as usize + STATS_BYTES <= HEADER_BYTES as usize);
// Inside one 512-byte sector (written atomically, as the map entries).
const _: () = assert!(STATS_AT as usize / 512 == (STATS_AT as usize + STATS_BYTES - 1) / 512);

pub(crate) fn encode_stats(v: &[u64; STATS_FIELDS]) -> [u8; STATS_BYTES] {
    let mut b = [0u8; STATS_BYTES];
    for (i, x) in v.iter().enumerate() {
        b[8 * i..8 * i + 8].copy_from_slice(&x.to_le_bytes());
    }
    let crc = crc32c::crc32c(&b[..STATS_FIELDS * 8]);
    b[STATS_FIELDS * 8..].copy_from_slice(&crc.to_le_bytes());
    b
}

/// None: checksum mismatch.
pub(crate) fn decode_stats(b: &[u8]) -> Option<[u64; STATS_FIELDS]> {
    let b = &b[..STATS_BYTES];
    let mut v = [0u64; STATS_FIELDS];
    if b.iter().all(|&x| x == 0) {
        return Some(v);
    }
    if crc32c::crc32c(&b[..STATS_FIELDS * 8]) != le32(b, STATS_FIELDS * 8) {
        return None;
    }
    for (i, x) in v.iter_mut().enumerate() {
        *x = le64(b, 8 * i);
    }
    Some(v)
}

/// One extent appended to an NVRAM buffer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct BufferEntry {
    pub extent: u64,
    pub seq: u64,
    pub data_crc: u32,
    /// A host write (else a GC move).
    pub host: bool,
}

impl BufferEntry {
    pub fn encode(&self) -> [u8; ENTRY_BYTES] {
        let mut b = [0u8; ENTRY_BYTES];
        b[0..8].copy_from_slice(&self.extent.to_le_bytes());
        b[8..16].copy_from_slice(&self.seq.to_le_bytes());
        b[16..20].copy_from_slice(&self.data_crc.to_le_bytes());
        b[20] = self.host as u8;
        let crc = crc32c::crc32c(&b[..24]);
        b[24..28].copy_from_slice(&crc.to_le_bytes());
        b
    }
    pub fn decode(b: &[u8]) -> Option<BufferEntry> {
        if crc32c::crc32c(&b[..24]) != le32(b, 24) || b[20] > 1 {
            return None;
        }
        Some(BufferEntry {
            extent: le64(b, 0),
            seq: le64(b, 8),
            data_crc: le32(b, 16),
            host: b[20] == 1,
        })
    }
}

pub(crate) fn encode_centers(c: &[f64]) -> Vec<u8> {
    let mut b: Vec<u8> = c.iter().flat_map(|x| x.to_le_bytes()).collect();
    let crc = crc32c::crc32c(&b);
    b.extend_from_slice(&crc.to_le_bytes());
    b
}

pub(crate) fn decode_centers(b: &[u8], n: usize) -> Option<Vec<f64>> {
    let body = &b[..8 * n];
    if crc32c::crc32c(body) != le32(b, 8 * n) {
        return None;
    }
    Some(
        body.chunks_exact(8)
            .map(|x| f64::from_le_bytes(x.try_into().expect("8")))
            .collect(),
    )
}

pub(crate) fn read_u64(b: &[u8], at: u64) -> u64 {
    le64(b, at as usize)
}

pub(crate) fn nvram_error(s: impl Into<String>) -> ArrayError {
    nv_err(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> Header {
        Header {
            uuid: 0x1234_5678_9abc_def0,
            stripe_bytes: 8 << 20,
            extent_bytes: 4096,
            groups: 4,
            segments: 100,
            extents: 90 * 2048,
            alpha: 0.5,
            beta: 0.1,
            gc_mode: 0,
            gc_threshold: 10,
            seed: 7,
            policy: POLICY_ALL,
            version: NV_VERSION,
        }
    }

    #[test]
    fn header_round_trips_and_every_flipped_bit_is_refused() {
        let h = header();
        let mut b = vec![0u8; HEADER_BYTES as usize];
        h.encode(&mut b);
        assert_eq!(Header::decode(&b).unwrap(), h);
        for i in 0..H_END {
            for bit in [0x01u8, 0x80] {
                let mut c = b.clone();
                c[i] ^= bit;
                assert!(Header::decode(&c).is_err(), "byte {i} bit {bit:#x}");
            }
        }
    }

    #[test]
    fn entries_decode_to_an_error_or_their_exact_encoding() {
        let mut rng = ecstack_base::Rng::new(3);
        let m = MapEntry {
            loc: LOC_NVRAM | 2 << 32 | 17,
            seq: 99,
            t_hat: 98,
            hot: 0.25,
            data_crc: 0xdead_beef,
        };
        assert_eq!(MapEntry::decode(&m.encode()), Some(m));
        // t̂ = 0 (no host write known) and a saturated age round-trip as documented.
        let never = MapEntry { t_hat: 0, ..m };
        assert_eq!(MapEntry::decode(&never.encode()), Some(never));
        let old = MapEntry {
            seq: 1 << 40,
            t_hat: 5,
            ..m
        };
        let back = MapEntry::decode(&old.encode()).unwrap();
        assert_eq!(back.t_hat, (1 << 40) - (u32::MAX as u64 - 1));
        let v = [1, 2, 3, 4, 5, 6, 7, 8, u64::MAX];
        assert_eq!(decode_stats(&encode_stats(&v)), Some(v));
        let mut sb = encode_stats(&v);
        sb[9] ^= 4;
        assert_eq!(decode_stats(&sb), None);
        let e = BufferEntry {
            extent: 5,
            seq: 6,
            data_crc: 7,
            host: true,
        };
        assert_eq!(BufferEntry::decode(&e.encode()), Some(e));
        for _ in 0..20_000 {
            let mut b = [0u8; ENTRY_BYTES];
            if rng.chance(0.5) {
                rng.fill(&mut b);
            } else {
                // A valid entry with one byte changed.
                b = m.encode();
                b[rng.below(28) as usize] ^= 1 + rng.below(255) as u8;
            }
            if let Some(d) = MapEntry::decode(&b) {
                assert_eq!(d.encode()[..28], b[..28], "map entry re-encodes");
            }
            if let Some(d) = BufferEntry::decode(&b) {
                assert_eq!(d.encode()[..28], b[..28], "buffer entry re-encodes");
            }
        }
    }

    #[test]
    fn layout_areas_are_ordered_aligned_and_disjoint() {
        let lay = Layout::new(&header()).unwrap();
        let areas = [
            lay.centers,
            lay.group_headers,
            lay.buffer_entries,
            lay.buffer_data,
            lay.usage,
            lay.map,
            lay.end,
        ];
        assert!(areas.windows(2).all(|w| w[0] < w[1]));
        assert!(areas.iter().all(|a| a % AREA_ALIGN == 0));
        assert_eq!(lay.slots, 2048);
        assert!(lay.buffer_entry_at(3, 2047) + ENTRY_BYTES as u64 <= lay.buffer_data);
        assert!(lay.map_at(header().extents - 1) + ENTRY_BYTES as u64 <= lay.end);
        let bad = Header {
            extent_bytes: 3000,
            ..header()
        };
        assert!(Layout::new(&bad).is_err());
    }
}
