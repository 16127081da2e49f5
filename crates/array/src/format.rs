//! Configuration, geometry and the on-disk headers: superblock (on the metadata volume) and device
//! labels (at the front of every main and log device). Byte layout in `docs/array-format.md`.

use crate::{ArrayError, Result};
use ecstack_codes::CodeKind;

/// Superblock magic, version and slot size (two copies at 0 and `SB_SLOT`).
pub(crate) const SB_MAGIC: &[u8; 8] = b"ECSTKARR";
pub(crate) const SB_VERSION: u32 = 1;
pub(crate) const SB_SLOT: u64 = 64 << 10;
/// Device label magic; the label lives in the first 512 bytes of every main and log device.
pub(crate) const LABEL_MAGIC: &[u8; 8] = b"ECSTKLBL";
pub(crate) const LABEL_SIZE: usize = 512;
/// Bytes reserved at the front of every main and log device before the first chunk slot (at least).
pub(crate) const DEVICE_HEADER: u64 = 4096;

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
}

impl SchemeKind {
    pub const ALL: [SchemeKind; 3] = [SchemeKind::Md, SchemeKind::Pl, SchemeKind::Eplog];

    pub fn name(self) -> &'static str {
        match self {
            SchemeKind::Md => "md",
            SchemeKind::Pl => "pl",
            SchemeKind::Eplog => "eplog",
        }
    }

    pub fn parse(s: &str) -> Result<SchemeKind> {
        match s.trim().to_ascii_lowercase().as_str() {
            "md" | "raid" => Ok(SchemeKind::Md),
            "pl" | "parity-logging" => Ok(SchemeKind::Pl),
            "eplog" | "elastic" => Ok(SchemeKind::Eplog),
            other => Err(ArrayError::Config(format!(
                "unknown scheme '{other}' (expected md, pl or eplog)"
            ))),
        }
    }

    pub(crate) fn id(self) -> u8 {
        match self {
            SchemeKind::Md => 1,
            SchemeKind::Pl => 2,
            SchemeKind::Eplog => 3,
        }
    }

    pub(crate) fn from_id(id: u8) -> Option<SchemeKind> {
        SchemeKind::ALL.into_iter().find(|s| s.id() == id)
    }

    /// Whether the scheme keeps log chunks on log devices.
    pub fn uses_log(self) -> bool {
        !matches!(self, SchemeKind::Md)
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
    /// The natural code for m parity chunks: XOR for 1, RAID-6 for 2, Cauchy RS otherwise.
    pub fn with_geometry(scheme: SchemeKind, k: usize, m: usize) -> ArrayConfig {
        let base = match m {
            1 => ArrayConfig::raid5(k),
            2 => ArrayConfig::raid6(k),
            _ => ArrayConfig::rs(k, m),
        };
        ArrayConfig { scheme, ..base }
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
}

/// The metadata volume layout: superblock copies, two full-checkpoint areas, incremental area.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct MetaLayout {
    pub cp_off: [u64; 2],
    pub cp_size: u64,
    pub inc_off: u64,
    pub inc_size: u64,
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
        Ok(String::from_utf8_lossy(self.take(n)?).into_owned())
    }
    pub fn done(&self) -> bool {
        self.p == self.b.len()
    }
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
        let mut out = Vec::with_capacity(body.len() + 20);
        out.extend_from_slice(SB_MAGIC);
        out.extend_from_slice(&SB_VERSION.to_le_bytes());
        out.extend_from_slice(&(body.len() as u32).to_le_bytes());
        out.extend_from_slice(&crc32c::crc32c(&body).to_le_bytes());
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

    /// Decode one copy; `Ok(None)` when the slot holds no valid superblock.
    pub(crate) fn decode(raw: &[u8]) -> Result<Option<Superblock>> {
        if raw.len() < 20 || &raw[..8] != SB_MAGIC {
            return Ok(None);
        }
        let version = u32::from_le_bytes(raw[8..12].try_into().expect("4"));
        let len = u32::from_le_bytes(raw[12..16].try_into().expect("4")) as usize;
        let crc = u32::from_le_bytes(raw[16..20].try_into().expect("4"));
        if raw.len() < 20 + len || crc32c::crc32c(&raw[20..20 + len]) != crc {
            return Ok(None);
        }
        if version != SB_VERSION {
            return Err(ArrayError::Meta(format!(
                "superblock version {version} is not supported (this build reads version {SB_VERSION})"
            )));
        }
        let mut d = Dec::new(&raw[20..20 + len]);
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
        Ok(Some(Superblock {
            generation,
            uuid,
            scheme,
            code,
            geometry,
            layout,
            commit_every,
            trim_on_commit,
            specs,
        }))
    }
}

/// The label at the front of each main/log device: which array and which member it is.
pub(crate) fn encode_label(uuid: u64, index: u16) -> Vec<u8> {
    let mut b = vec![0u8; LABEL_SIZE];
    b[..8].copy_from_slice(LABEL_MAGIC);
    b[8..12].copy_from_slice(&SB_VERSION.to_le_bytes());
    b[12..20].copy_from_slice(&uuid.to_le_bytes());
    b[20..22].copy_from_slice(&index.to_le_bytes());
    let crc = crc32c::crc32c(&b[..22]);
    b[22..26].copy_from_slice(&crc.to_le_bytes());
    b
}

/// `(uuid, index)` of a label, or None if it is not a valid label.
pub(crate) fn decode_label(b: &[u8]) -> Option<(u64, u16)> {
    if b.len() < 26 || &b[..8] != LABEL_MAGIC {
        return None;
    }
    let crc = u32::from_le_bytes(b[22..26].try_into().ok()?);
    if crc32c::crc32c(&b[..22]) != crc {
        return None;
    }
    Some((
        u64::from_le_bytes(b[12..20].try_into().ok()?),
        u16::from_le_bytes(b[20..22].try_into().ok()?),
    ))
}
