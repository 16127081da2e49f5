//! Configuration, geometry and the on-disk headers: superblock (on the metadata volume) and device
//! labels (at the front of every main and log device). Byte layout in `docs/array-format.md`.

use crate::{ArrayError, Result};
use ecstack_codes::CodeKind;

/// Superblock magic, version and slot size (two copies at 0 and `SB_SLOT`).
pub(crate) const SB_MAGIC: &[u8; 8] = b"ECSTKARR";
pub(crate) const SB_VERSION: u32 = 1;
pub(crate) const SB_SLOT: u64 = 64 << 10;
/// Superblock copy header: magic, version, body length, body CRC32C (offsets named below).
const SB_VERSION_AT: usize = 8;
const SB_LEN_AT: usize = SB_VERSION_AT + 4;
const SB_CRC_AT: usize = SB_LEN_AT + 4;
const SB_HEADER: usize = SB_CRC_AT + 4;
/// Device label magic and version; the label lives in the first 512 bytes of every main and log
/// device.
pub(crate) const LABEL_MAGIC: &[u8; 8] = b"ECSTKLBL";
pub(crate) const LABEL_VERSION: u32 = 1;
pub(crate) const LABEL_SIZE: usize = 512;
const LABEL_VERSION_AT: usize = 8;
const LABEL_UUID_AT: usize = LABEL_VERSION_AT + 4;
const LABEL_INDEX_AT: usize = LABEL_UUID_AT + 8;
const LABEL_CRC_AT: usize = LABEL_INDEX_AT + 2;
/// Bytes of the label that are written (the rest of `LABEL_SIZE` is zero).
const LABEL_LEN: usize = LABEL_CRC_AT + 4;
/// Bytes reserved at the front of every main and log device before the first chunk slot (at least).
pub(crate) const DEVICE_HEADER: u64 = 4096;
/// Bytes the full-checkpoint header occupies in front of the body (`CheckpointHeader` in `meta.rs`).
pub(crate) const CP_HEADER: usize = 48;
/// Chunk sizes an array accepts: multiples of 512 in this range.
pub(crate) const CHUNK_BYTES_MIN: u64 = 512;
pub(crate) const CHUNK_BYTES_MAX: u64 = 16 << 20;
/// Devices an array can have (main devices; the label stores the member index as u16, the codes
/// work over GF(2^8)).
pub(crate) const MAIN_DEVICES_MAX: usize = 255;

const _: () = assert!(LABEL_LEN == 26);
const _: () = assert!(LABEL_LEN <= LABEL_SIZE);
const _: () = assert!(LABEL_SIZE as u64 <= DEVICE_HEADER);
const _: () = assert!(SB_HEADER == 20 && (SB_HEADER as u64) < SB_SLOT);
const _: () = assert!(MAIN_DEVICES_MAX + MAIN_DEVICES_MAX <= u16::MAX as usize);

/// How writes become chunk writes, logs and parity work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SchemeKind {
    /// Linux-md-like RAID: full-stripe writes, otherwise read-modify-write or reconstruct-write.
    Md,
    /// Classic parity logging (EPLOG §2.2, Fig 1a).
    Pl,
    /// Elastic parity logging (EPLOG §2.3, §3).
    Eplog,
    /// TWEEN (CodFS/TWEEN thesis ch. 6): data stripes are log segments written whole from NVRAM
    /// stripe buffers by `Tween` (`docs/tween.md`); not in `ALL`, which lists the schemes an
    /// `Array` reads and writes itself.
    Tween,
}

impl SchemeKind {
    pub const ALL: [SchemeKind; 3] = [SchemeKind::Md, SchemeKind::Pl, SchemeKind::Eplog];

    pub fn name(self) -> &'static str {
        match self {
            SchemeKind::Md => "md",
            SchemeKind::Pl => "pl",
            SchemeKind::Eplog => "eplog",
            SchemeKind::Tween => "tween",
        }
    }

    pub fn parse(s: &str) -> Result<SchemeKind> {
        match s.trim().to_ascii_lowercase().as_str() {
            "md" | "raid" => Ok(SchemeKind::Md),
            "pl" | "parity-logging" => Ok(SchemeKind::Pl),
            "eplog" | "elastic" => Ok(SchemeKind::Eplog),
            "tween" => Ok(SchemeKind::Tween),
            other => Err(ArrayError::Config(format!(
                "unknown scheme '{other}' (expected md, pl, eplog or tween)"
            ))),
        }
    }

    pub(crate) fn id(self) -> u8 {
        match self {
            SchemeKind::Md => 1,
            SchemeKind::Pl => 2,
            SchemeKind::Eplog => 3,
            SchemeKind::Tween => 4,
        }
    }

    pub(crate) fn from_id(id: u8) -> Option<SchemeKind> {
        SchemeKind::ALL
            .into_iter()
            .chain([SchemeKind::Tween])
            .find(|s| s.id() == id)
    }

    /// Whether the scheme keeps log chunks on log devices.
    pub fn uses_log(self) -> bool {
        !matches!(self, SchemeKind::Md | SchemeKind::Tween)
    }
}

impl std::fmt::Display for SchemeKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What `Array::create` builds.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ArrayConfig {
    pub scheme: SchemeKind,
    pub code: CodeKind,
    /// Data chunks per stripe.
    pub k: usize,
    /// Parity chunks per stripe (= tolerated failures = number of log devices for pl/eplog).
    pub m: usize,
    /// Chunk size in bytes (a multiple of 512; 4 KiB default).
    pub chunk_size: u32,
    /// eplog: fraction of each main device's chunk slots kept for out-of-place updates.
    pub reserve: f64,
    /// Parity commit after every this many write requests (0: never).
    pub commit_every: u64,
    /// Discard (TRIM) the chunk slots freed by a parity commit.
    pub trim_on_commit: bool,
    /// Limit the number of data stripes (default: as many as the devices hold).
    pub max_stripes: Option<u64>,
}

impl ArrayConfig {
    /// (k+1) RAID-5 (XOR parity).
    pub fn raid5(k: usize) -> ArrayConfig {
        ArrayConfig {
            scheme: SchemeKind::Md,
            code: CodeKind::Xor,
            k,
            m: 1,
            chunk_size: 4096,
            reserve: 0.25,
            commit_every: 0,
            trim_on_commit: false,
            max_stripes: None,
        }
    }
    /// (k+2) RAID-6 (P+Q).
    pub fn raid6(k: usize) -> ArrayConfig {
        ArrayConfig {
            code: CodeKind::Raid6,
            m: 2,
            ..ArrayConfig::raid5(k)
        }
    }
    /// General (k+m) Reed-Solomon (Cauchy).
    pub fn rs(k: usize, m: usize) -> ArrayConfig {
        ArrayConfig {
            code: CodeKind::RsCauchy,
            m,
            ..ArrayConfig::raid5(k)
        }
    }
    /// The default code for m parity chunks ([`CodeKind::default_for_parity`]: XOR for 1, RAID-6
    /// for 2, Cauchy RS otherwise).
    pub fn with_geometry(scheme: SchemeKind, k: usize, m: usize) -> ArrayConfig {
        ArrayConfig {
            scheme,
            code: CodeKind::default_for_parity(m),
            m,
            ..ArrayConfig::raid5(k)
        }
    }
}

/// Where everything lives. Slot `s` of a main device is the chunk at byte `data_start + s·chunk`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Geometry {
    pub n: usize,
    pub k: usize,
    pub m: usize,
    pub chunk: u64,
    pub data_start: u64,
    /// Chunk slots per main device.
    pub slots: u64,
    /// Data stripes (the logical capacity is `stripes · k · chunk`).
    pub stripes: u64,
    /// Chunk slots per log device.
    pub log_slots: u64,
}

impl Geometry {
    /// Main device holding position `pos` (0..k data, k..n parity) of stripe `s` (parity rotates).
    #[inline]
    pub fn dev_of(&self, s: u64, pos: usize) -> usize {
        ((s + pos as u64) % self.n as u64) as usize
    }
    /// Position of stripe `s` held by main device `dev`.
    #[inline]
    pub fn pos_of(&self, s: u64, dev: usize) -> usize {
        let n = self.n as u64;
        ((dev as u64 + n - s % n) % n) as usize
    }
    /// Byte offset of chunk slot `slot` on a main or log device.
    #[inline]
    pub fn off(&self, slot: u64) -> u64 {
        self.data_start + slot * self.chunk
    }
    pub fn stripe_bytes(&self) -> u64 {
        self.k as u64 * self.chunk
    }
    pub fn capacity(&self) -> u64 {
        self.stripes * self.stripe_bytes()
    }
    /// Index of log device `i` in the array's device numbering (main 0..n, log n..n+m).
    pub fn log_dev(&self, i: usize) -> usize {
        self.n + i
    }

    /// Main and log devices of an array of this geometry (log devices exist when `log_slots > 0`).
    pub fn devices(&self) -> usize {
        self.n + if self.log_slots > 0 { self.m } else { 0 }
    }

    /// The checks that must pass before any arithmetic with k, m or the chunk size.
    pub fn check_shape(k: usize, m: usize, chunk_bytes: u64) -> Result<()> {
        if k == 0 || m == 0 || k.saturating_add(m) > MAIN_DEVICES_MAX {
            return Err(ArrayError::Config(format!(
                "need k >= 1, n - k >= 1 and n <= {MAIN_DEVICES_MAX} (got k={k}, m={m})"
            )));
        }
        if !(CHUNK_BYTES_MIN..=CHUNK_BYTES_MAX).contains(&chunk_bytes)
            || !chunk_bytes.is_multiple_of(CHUNK_BYTES_MIN)
        {
            return Err(ArrayError::Config(format!(
                "chunk size {chunk_bytes} must be a multiple of 512 between 512 and 16 MiB"
            )));
        }
        Ok(())
    }

    /// Every relationship the rest of the array relies on, checked before it computes with the
    /// geometry: on create (`Array::plan`) and on every superblock decode. The errors are `Config`.
    pub fn validate(&self, scheme: SchemeKind) -> Result<()> {
        let bad = |msg: String| Err(ArrayError::Config(msg));
        Self::check_shape(self.k, self.m, self.chunk)?;
        if self.n != self.k + self.m {
            return bad(format!("n = {} is not k + m = {}", self.n, self.k + self.m));
        }
        let c = self.chunk;
        if self.data_start < DEVICE_HEADER || !self.data_start.is_multiple_of(c) {
            return bad(format!(
                "data start {} must be at least {DEVICE_HEADER} and a multiple of the chunk size {c}",
                self.data_start
            ));
        }
        let end = |slots: u64| {
            slots
                .checked_mul(c)
                .and_then(|b| b.checked_add(self.data_start))
        };
        if end(self.slots).is_none() || end(self.log_slots).is_none() {
            return bad(format!(
                "{} chunk slots of {c} bytes overflow a 64-bit device offset",
                self.slots.max(self.log_slots)
            ));
        }
        if self.slots < 2 {
            return bad(format!(
                "{} chunk slots per main device; at least 2 are needed",
                self.slots
            ));
        }
        if self.stripes == 0 {
            return bad("no room for a single data stripe".into());
        }
        if self.stripes > self.slots {
            return bad(format!(
                "{} data stripes do not fit in {} chunk slots per device",
                self.stripes, self.slots
            ));
        }
        if self
            .stripes
            .checked_mul(self.k as u64)
            .and_then(|x| x.checked_mul(c))
            .is_none()
        {
            return bad(format!(
                "a capacity of {} stripes x {} x {c} bytes overflows 64 bits",
                self.stripes, self.k
            ));
        }
        if scheme == SchemeKind::Eplog && self.slots - self.stripes < 2 {
            return bad(format!(
                "eplog needs spare chunk slots for out-of-place updates: {} slots per device, {} data stripes (raise --reserve or the device size)",
                self.slots, self.stripes
            ));
        }
        if scheme.uses_log() && self.log_slots < 4 {
            return bad(format!(
                "scheme {scheme} needs at least 4 log slots per log device, got {}",
                self.log_slots
            ));
        }
        if !scheme.uses_log() && self.log_slots != 0 {
            return bad(format!(
                "scheme {scheme} uses no log devices, but the geometry has {} log slots",
                self.log_slots
            ));
        }
        Ok(())
    }
}

/// The metadata volume layout: superblock copies, two full-checkpoint areas, incremental area.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct MetaLayout {
    pub cp_off: [u64; 2],
    pub cp_size: u64,
    pub inc_off: u64,
    pub inc_size: u64,
}

impl MetaLayout {
    /// The areas lie after the superblock copies, in order, without overlap or overflow.
    pub fn validate(&self, cp_header: u64) -> Result<()> {
        let bad = || {
            Err(ArrayError::Meta(format!(
                "metadata layout is inconsistent: checkpoint areas at {} and {} of {} bytes, incremental area at {} of {} bytes",
                self.cp_off[0], self.cp_off[1], self.cp_size, self.inc_off, self.inc_size
            )))
        };
        let after = |off: u64| off.checked_add(self.cp_size);
        match (after(self.cp_off[0]), after(self.cp_off[1])) {
            (Some(e0), Some(e1))
                if self.cp_off[0] >= 2 * SB_SLOT
                    && self.cp_off[1] >= e0
                    && self.inc_off >= e1
                    && self.cp_size > cp_header
                    && self.inc_size > 0
                    && self.inc_off.checked_add(self.inc_size).is_some() =>
            {
                Ok(())
            }
            _ => bad(),
        }
    }
}

/// Everything needed to reopen an array, stored twice on the metadata volume.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Superblock {
    pub generation: u64,
    pub uuid: u64,
    pub scheme: SchemeKind,
    pub code: CodeKind,
    pub geometry: Geometry,
    pub layout: MetaLayout,
    pub commit_every: u64,
    pub trim_on_commit: bool,
    /// Device specs (or names) of the main devices, then the log devices, then the metadata volume.
    pub specs: Vec<String>,
}

/// Little-endian encoder.
#[derive(Default)]
pub(crate) struct Enc(pub Vec<u8>);

impl Enc {
    pub fn u8(&mut self, v: u8) {
        self.0.push(v)
    }
    pub fn u16(&mut self, v: u16) {
        self.0.extend_from_slice(&v.to_le_bytes())
    }
    pub fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes())
    }
    pub fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes())
    }
    pub fn str(&mut self, s: &str) {
        self.u32(s.len() as u32);
        self.0.extend_from_slice(s.as_bytes());
    }
}

/// Little-endian decoder; every read checks bounds.
pub(crate) struct Dec<'a> {
    b: &'a [u8],
    p: usize,
}

impl<'a> Dec<'a> {
    pub fn new(b: &'a [u8]) -> Dec<'a> {
        Dec { b, p: 0 }
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.b.len() - self.p < n {
            return Err(ArrayError::Meta("truncated record".into()));
        }
        let s = &self.b[self.p..self.p + n];
        self.p += n;
        Ok(s)
    }
    pub fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
    pub fn u16(&mut self) -> Result<u16> {
        Ok(u16::from_le_bytes(
            self.take(2)?.try_into().expect("2 bytes"),
        ))
    }
    pub fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
    pub fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
    pub fn str(&mut self) -> Result<String> {
        let n = self.u32()? as usize;
        String::from_utf8(self.take(n)?.to_vec())
            .map_err(|_| ArrayError::Meta("a string is not valid UTF-8".into()))
    }
    /// The next `n` bytes as they are.
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8]> {
        self.take(n)
    }
    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.b.len() - self.p
    }
    pub fn done(&self) -> bool {
        self.p == self.b.len()
    }
}

/// The array updates parity with deltas over the data's own byte range (`md`, `pl`) and encodes and
/// rebuilds ranges of chunks: only byte-position-wise codes fit. RDP is not (its diagonal parity mixes
/// the rows of a chunk), so it is refused on create and in a superblock.
pub(crate) fn refuse_unaligned_code(code: &dyn ecstack_codes::ErasureCode) -> Result<()> {
    if code.chunk_align_bytes() != 1 {
        return Err(ArrayError::Config(format!(
            "code {} is not supported by the array: its parity mixes byte positions inside a chunk (for m = 2 use raid6)",
            code.kind()
        )));
    }
    Ok(())
}

impl Superblock {
    /// One superblock copy: magic, version, body length, CRC32C of the body, body.
    pub(crate) fn encode(&self) -> Result<Vec<u8>> {
        let g = &self.geometry;
        let mut b = Enc::default();
        b.u64(self.generation);
        b.u64(self.uuid);
        b.u8(self.scheme.id());
        b.u8(self.code.id());
        b.u16(g.k as u16);
        b.u16(g.m as u16);
        b.u64(g.chunk);
        b.u64(g.data_start);
        b.u64(g.slots);
        b.u64(g.stripes);
        b.u64(g.log_slots);
        b.u64(self.layout.cp_off[0]);
        b.u64(self.layout.cp_off[1]);
        b.u64(self.layout.cp_size);
        b.u64(self.layout.inc_off);
        b.u64(self.layout.inc_size);
        b.u64(self.commit_every);
        b.u8(self.trim_on_commit as u8);
        b.u16(self.specs.len() as u16);
        for s in &self.specs {
            b.str(s);
        }
        let body = b.0;
        let mut out = vec![0u8; SB_HEADER];
        out[..SB_VERSION_AT].copy_from_slice(SB_MAGIC);
        out[SB_VERSION_AT..SB_LEN_AT].copy_from_slice(&SB_VERSION.to_le_bytes());
        out[SB_LEN_AT..SB_CRC_AT].copy_from_slice(&(body.len() as u32).to_le_bytes());
        out[SB_CRC_AT..SB_HEADER].copy_from_slice(&crc32c::crc32c(&body).to_le_bytes());
        out.extend_from_slice(&body);
        if out.len() as u64 > SB_SLOT {
            return Err(ArrayError::Config(format!(
                "superblock of {} bytes does not fit its {} byte slot (device specs too long)",
                out.len(),
                SB_SLOT
            )));
        }
        Ok(out)
    }

    /// Decode one copy; `Ok(None)` when the slot holds no superblock (magic or CRC wrong); an
    /// error when a checksummed superblock has an unknown version or an invalid geometry.
    pub(crate) fn decode(raw: &[u8]) -> Result<Option<Superblock>> {
        if raw.len() < SB_HEADER || &raw[..SB_VERSION_AT] != SB_MAGIC {
            return Ok(None);
        }
        let version = le_u32(raw, SB_VERSION_AT);
        let len = le_u32(raw, SB_LEN_AT) as usize;
        let crc = le_u32(raw, SB_CRC_AT);
        if raw.len() - SB_HEADER < len || crc32c::crc32c(&raw[SB_HEADER..SB_HEADER + len]) != crc {
            return Ok(None);
        }
        if version != SB_VERSION {
            return Err(ArrayError::Meta(format!(
                "superblock has unknown format version {version} (this build reads version {SB_VERSION}): corrupt, or written by a newer ecstack"
            )));
        }
        let sb = Self::decode_body(&raw[SB_HEADER..SB_HEADER + len])?;
        sb.validate()
            .map_err(|e| ArrayError::Meta(format!("superblock: {}", plain(&e))))?;
        Ok(Some(sb))
    }

    /// Everything a decoded superblock must satisfy before the array computes with it.
    pub(crate) fn validate(&self) -> Result<()> {
        let g = &self.geometry;
        g.validate(self.scheme)?;
        let code = ecstack_codes::new_code(self.code, g.k, g.m)
            .map_err(|e| ArrayError::Config(format!("code {}: {e}", self.code.name())))?;
        refuse_unaligned_code(code.as_ref())?;
        self.layout.validate(CP_HEADER as u64)?;
        let want = g.devices() + 1;
        if self.specs.len() != want {
            return Err(ArrayError::Config(format!(
                "{} device specs recorded for {want} devices",
                self.specs.len()
            )));
        }
        Ok(())
    }

    /// Refuse devices that do not match the recorded geometry: wrong counts, or too small for
    /// their chunk slots.
    pub(crate) fn check_devices(
        &self,
        main: &[std::sync::Arc<dyn ecstack_device::BlockDevice>],
        log: &[std::sync::Arc<dyn ecstack_device::BlockDevice>],
    ) -> Result<()> {
        let g = &self.geometry;
        let want_log = g.devices() - g.n;
        if main.len() != g.n || log.len() != want_log {
            return Err(ArrayError::Config(format!(
                "this {} ({}+{}) array has {} main and {want_log} log devices; got {} and {}",
                self.scheme,
                g.k,
                g.m,
                g.n,
                main.len(),
                log.len()
            )));
        }
        let sizes = main
            .iter()
            .map(|d| (d, g.off(g.slots)))
            .chain(log.iter().map(|d| (d, g.off(g.log_slots))));
        for (i, (d, need)) in sizes.enumerate() {
            if d.capacity() < need {
                return Err(ArrayError::Config(format!(
                    "device {i} ({}) has {} bytes; this array needs {need}",
                    d.name(),
                    d.capacity()
                )));
            }
        }
        Ok(())
    }

    fn decode_body(body: &[u8]) -> Result<Superblock> {
        let mut d = Dec::new(body);
        let generation = d.u64()?;
        let uuid = d.u64()?;
        let scheme = SchemeKind::from_id(d.u8()?)
            .ok_or_else(|| ArrayError::Meta("superblock names an unknown scheme".into()))?;
        let code = CodeKind::from_id(d.u8()?)
            .ok_or_else(|| ArrayError::Meta("superblock names an unknown code".into()))?;
        let k = d.u16()? as usize;
        let m = d.u16()? as usize;
        let geometry = Geometry {
            n: k + m,
            k,
            m,
            chunk: d.u64()?,
            data_start: d.u64()?,
            slots: d.u64()?,
            stripes: d.u64()?,
            log_slots: d.u64()?,
        };
        let layout = MetaLayout {
            cp_off: [d.u64()?, d.u64()?],
            cp_size: d.u64()?,
            inc_off: d.u64()?,
            inc_size: d.u64()?,
        };
        let commit_every = d.u64()?;
        let trim_on_commit = d.u8()? != 0;
        let ns = d.u16()? as usize;
        let mut specs = Vec::with_capacity(ns);
        for _ in 0..ns {
            specs.push(d.str()?);
        }
        if !d.done() {
            return Err(ArrayError::Meta(
                "superblock: trailing bytes after the device specs".into(),
            ));
        }
        Ok(Superblock {
            generation,
            uuid,
            scheme,
            code,
            geometry,
            layout,
            commit_every,
            trim_on_commit,
            specs,
        })
    }
}

fn le_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

/// The message of an error without its kind prefix (a `Config` check reported as metadata).
fn plain(e: &ArrayError) -> String {
    match e {
        ArrayError::Config(s) | ArrayError::Meta(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The label at the front of each main/log device: which array and which member it is.
pub(crate) fn encode_label(uuid: u64, index: u16) -> Vec<u8> {
    let mut b = vec![0u8; LABEL_SIZE];
    b[..LABEL_VERSION_AT].copy_from_slice(LABEL_MAGIC);
    b[LABEL_VERSION_AT..LABEL_UUID_AT].copy_from_slice(&LABEL_VERSION.to_le_bytes());
    b[LABEL_UUID_AT..LABEL_INDEX_AT].copy_from_slice(&uuid.to_le_bytes());
    b[LABEL_INDEX_AT..LABEL_CRC_AT].copy_from_slice(&index.to_le_bytes());
    let crc = crc32c::crc32c(&b[..LABEL_CRC_AT]);
    b[LABEL_CRC_AT..LABEL_LEN].copy_from_slice(&crc.to_le_bytes());
    b
}

/// `(uuid, index)` of a label; `Ok(None)` if it is not a label (magic or CRC wrong), an error for
/// a checksummed label of an unknown version.
pub(crate) fn decode_label(b: &[u8]) -> Result<Option<(u64, u16)>> {
    if b.len() < LABEL_LEN || &b[..LABEL_VERSION_AT] != LABEL_MAGIC {
        return Ok(None);
    }
    if crc32c::crc32c(&b[..LABEL_CRC_AT]) != le_u32(b, LABEL_CRC_AT) {
        return Ok(None);
    }
    let version = le_u32(b, LABEL_VERSION_AT);
    if version != LABEL_VERSION {
        return Err(ArrayError::Meta(format!(
            "device label has unknown format version {version} (this build reads version {LABEL_VERSION}): corrupt, or written by a newer ecstack"
        )));
    }
    let uuid = u64::from_le_bytes(b[LABEL_UUID_AT..LABEL_INDEX_AT].try_into().expect("8"));
    let index = u16::from_le_bytes(b[LABEL_INDEX_AT..LABEL_CRC_AT].try_into().expect("2"));
    Ok(Some((uuid, index)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sb() -> Superblock {
        Superblock {
            generation: 3,
            uuid: 42,
            scheme: SchemeKind::Eplog,
            code: CodeKind::RsCauchy,
            geometry: Geometry {
                n: 6,
                k: 4,
                m: 2,
                chunk: 4096,
                data_start: 4096,
                slots: 1000,
                stripes: 700,
                log_slots: 100,
            },
            layout: MetaLayout {
                cp_off: [2 * SB_SLOT, 2 * SB_SLOT + 8192],
                cp_size: 8192,
                inc_off: 2 * SB_SLOT + 16384,
                inc_size: 1 << 20,
            },
            commit_every: 0,
            trim_on_commit: false,
            specs: (0..9).map(|i| format!("mem:{i}")).collect(),
        }
    }

    #[test]
    fn superblock_round_trip() {
        let s = sb();
        s.validate().unwrap();
        assert_eq!(Superblock::decode(&s.encode().unwrap()).unwrap(), Some(s));
    }

    #[test]
    fn invalid_geometry_is_refused_on_decode() {
        type Edit = fn(&mut Superblock);
        let edits: [(&str, Edit); 12] = [
            ("chunk 0", |s| s.geometry.chunk = 0),
            ("chunk 1000", |s| s.geometry.chunk = 1000),
            ("k 0", |s| {
                s.geometry.k = 0;
                s.geometry.n = 2
            }),
            ("stripes 0", |s| s.geometry.stripes = 0),
            ("stripes > slots", |s| s.geometry.stripes = 1001),
            ("no spare", |s| s.geometry.stripes = 999),
            ("slots overflow", |s| s.geometry.slots = u64::MAX / 2),
            ("capacity overflow", |s| {
                s.geometry.slots = u64::MAX / 8192;
                s.geometry.stripes = s.geometry.slots - 2
            }),
            ("log slots", |s| s.geometry.log_slots = 0),
            ("data start", |s| s.geometry.data_start = 0),
            ("layout overlap", |s| s.layout.inc_off = 2 * SB_SLOT),
            ("specs", |s| {
                s.specs.pop();
            }),
        ];
        for (what, edit) in edits {
            let mut s = sb();
            edit(&mut s);
            let e = Superblock::decode(&s.encode().unwrap())
                .expect_err(what)
                .to_string();
            assert!(e.starts_with("metadata: superblock: "), "{what}: {e}");
        }
        // XOR parity with m = 2 is a code the array cannot build.
        let mut s = sb();
        s.code = CodeKind::Xor;
        assert!(Superblock::decode(&s.encode().unwrap()).is_err());
        // RDP builds (m = 2) but its parity is not byte-position-wise: refused with one line.
        let mut s = sb();
        s.code = CodeKind::Rdp;
        assert_eq!(s.geometry.m, 2, "the refusal must not come from m");
        let e = s.validate().unwrap_err().to_string();
        assert!(e.contains("code rdp is not supported by the array"), "{e}");
        assert!(!e.contains('\n'), "{e}");
        assert!(Superblock::decode(&s.encode().unwrap()).is_err());
    }

    #[test]
    fn superblock_version_and_label_version_are_checked() {
        let mut raw = sb().encode().unwrap();
        raw[SB_VERSION_AT] = 9;
        let e = Superblock::decode(&raw).unwrap_err().to_string();
        assert!(e.contains("unknown format version 9"), "{e}");
        let l = encode_label(7, 3);
        assert_eq!(decode_label(&l).unwrap(), Some((7, 3)));
        let mut l2 = l.clone();
        l2[LABEL_VERSION_AT] = 2;
        let crc = crc32c::crc32c(&l2[..LABEL_CRC_AT]);
        l2[LABEL_CRC_AT..LABEL_LEN].copy_from_slice(&crc.to_le_bytes());
        assert!(decode_label(&l2).is_err());
        let mut l3 = l;
        l3[LABEL_UUID_AT] ^= 1;
        assert_eq!(decode_label(&l3).unwrap(), None);
    }
}
