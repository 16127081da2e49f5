//! The on-disk format (documented in `docs/kv.md`; one copy of the tables lives there).
//!
//! Chunk 0 holds the [`Superblock`]. A record is a [`RecordHeader`], then the key, then the value.
//! Format version 3 packs records: a record of at most `chunk_bytes` bytes (a *packed* record) starts
//! at any multiple of [`RECORD_ALIGN`] inside one chunk and never crosses a chunk boundary, so one
//! chunk holds many small records; a larger record starts on a chunk boundary and has its
//! `ceil(bytes / chunk_bytes)` chunks to itself. All integers are little-endian.

/// Bytes of a record header.
pub const HEADER_BYTES: usize = 24;
/// Bytes of the superblock (it fills chunk 0; the rest of that chunk is zero).
pub const SUPERBLOCK_BYTES: usize = 40;
/// The record header's magic.
pub const RECORD_MAGIC: [u8; 4] = *b"EKVR";
/// The superblock's magic.
pub const SUPERBLOCK_MAGIC: [u8; 8] = *b"ECSTKVSB";
/// The one format version this code writes and reads. Versions 1 (no value kind byte), 2 (one
/// record per chunk) and 3 (deleted pairs zeroed in place, no tombstones) are refused by name: see
/// `docs/kv.md`, "Version changes".
pub const FORMAT_VERSION: u8 = 4;
/// Packed records start at multiples of this many bytes inside their chunk.
pub const RECORD_ALIGN: usize = 8;
/// Longest key: the seed's metadata keeps the key size in one byte.
pub const KEY_BYTES_MAX: usize = 255;

// Field offsets of the record header, each derived from the previous one.
const R_MAGIC: usize = 0;
const R_VERSION: usize = R_MAGIC + 4;
/// The seed's 5 bytes of metadata start here: key size (1 byte), value size (4 bytes).
const R_KEY_BYTES: usize = R_VERSION + 1;
const R_VALUE_BYTES: usize = R_KEY_BYTES + 1;
const R_KIND: usize = R_VALUE_BYTES + 4;
const R_RESERVED: usize = R_KIND + 1;
const R_SEQ: usize = R_RESERVED + 1;
const R_CRC: usize = R_SEQ + 8;
const _: () = assert!(R_CRC + 4 == HEADER_BYTES);

// Field offsets of the superblock.
const S_MAGIC: usize = 0;
const S_VERSION: usize = S_MAGIC + 8;
const S_CHUNK: usize = S_VERSION + 4;
const S_SALT: usize = S_CHUNK + 4;
const S_CAPACITY: usize = S_SALT + 8;
const S_RESERVED: usize = S_CAPACITY + 8;
const S_CRC: usize = S_RESERVED + 4;
const _: () = assert!(S_CRC + 4 == SUPERBLOCK_BYTES);
const _: () = assert!(HEADER_BYTES + KEY_BYTES_MAX < 512);

/// The store's superblock (chunk 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Superblock {
    pub chunk_bytes: u32,
    /// Random per store; seeds every record checksum, so a value that embeds bytes shaped like a
    /// record (or a record of another store on a reused device) never passes as one.
    pub salt: u64,
    /// Device capacity in bytes when the store was created.
    pub capacity: u64,
}

impl Superblock {
    pub fn encode(&self) -> [u8; SUPERBLOCK_BYTES] {
        let mut b = [0u8; SUPERBLOCK_BYTES];
        b[S_MAGIC..S_VERSION].copy_from_slice(&SUPERBLOCK_MAGIC);
        b[S_VERSION..S_CHUNK].copy_from_slice(&u32::from(FORMAT_VERSION).to_le_bytes());
        b[S_CHUNK..S_SALT].copy_from_slice(&self.chunk_bytes.to_le_bytes());
        b[S_SALT..S_CAPACITY].copy_from_slice(&self.salt.to_le_bytes());
        b[S_CAPACITY..S_RESERVED].copy_from_slice(&self.capacity.to_le_bytes());
        let crc = crc32c::crc32c(&b[..S_CRC]);
        b[S_CRC..].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decode and validate; the error says what is wrong.
    pub fn decode(b: &[u8]) -> Result<Superblock, String> {
        if b.len() < SUPERBLOCK_BYTES {
            return Err(format!("superblock of {} bytes", b.len()));
        }
        if b[S_MAGIC..S_VERSION] != SUPERBLOCK_MAGIC {
            return Err("no ecstack key-value superblock in chunk 0".into());
        }
        let crc = u32::from_le_bytes(b[S_CRC..S_CRC + 4].try_into().unwrap());
        if crc != crc32c::crc32c(&b[..S_CRC]) {
            return Err("superblock checksum mismatch".into());
        }
        let version = u32::from_le_bytes(b[S_VERSION..S_CHUNK].try_into().unwrap());
        if version == 1 {
            return Err(
                "format version 1 (records without a value kind, before hashes and sorted \
                 sets): this build reads only version 4; recreate the store and load it again"
                    .into(),
            );
        }
        if version == 2 {
            return Err(
                "format version 2 (one record per chunk, before packed records): this build \
                 reads only version 4; recreate the store and load it again"
                    .into(),
            );
        }
        if version == 3 {
            return Err(
                "format version 3 (deleted pairs zeroed in place, before tombstones): this build \
                 reads only version 4; recreate the store and load it again"
                    .into(),
            );
        }
        if version != u32::from(FORMAT_VERSION) {
            return Err(format!("unknown format version {version}"));
        }
        let sb = Superblock {
            chunk_bytes: u32::from_le_bytes(b[S_CHUNK..S_SALT].try_into().unwrap()),
            salt: u64::from_le_bytes(b[S_SALT..S_CAPACITY].try_into().unwrap()),
            capacity: u64::from_le_bytes(b[S_CAPACITY..S_RESERVED].try_into().unwrap()),
        };
        if sb.chunk_bytes < 512 || !sb.chunk_bytes.is_power_of_two() {
            return Err(format!(
                "chunk size {} is not a power of two ≥ 512",
                sb.chunk_bytes
            ));
        }
        Ok(sb)
    }
}

/// What a record's value is (header byte 10, format version 2; tombstones since version 4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ValueKind {
    /// A Redis string: the value bytes as given.
    String = 0,
    /// A Redis hash: the value is the encoded field list ([`crate::hash`]).
    Hash = 1,
    /// One member of a Redis sorted set: the key is `[set key bytes] ‖ set key ‖ member`, the value
    /// the score (f64, 8 bytes little-endian).
    ZsetMember = 2,
    /// A deleted string or hash (namespace 0): no value. Its sequence number outranks every older
    /// record of its key, so a scan that finds it keeps the key deleted.
    Tombstone = 3,
    /// A deleted sorted-set member (namespace 1): no value.
    MemberTombstone = 4,
}

impl ValueKind {
    pub fn from_byte(b: u8) -> Option<ValueKind> {
        match b {
            0 => Some(ValueKind::String),
            1 => Some(ValueKind::Hash),
            2 => Some(ValueKind::ZsetMember),
            3 => Some(ValueKind::Tombstone),
            4 => Some(ValueKind::MemberTombstone),
            _ => None,
        }
    }

    /// Records of one namespace share keys: strings and hashes are Redis keys; sorted-set members
    /// live in a namespace of their own. A tombstone is in the namespace of what it deletes.
    pub fn namespace(self) -> u8 {
        match self {
            ValueKind::String | ValueKind::Hash | ValueKind::Tombstone => 0,
            ValueKind::ZsetMember | ValueKind::MemberTombstone => 1,
        }
    }

    /// Whether the record deletes its key instead of holding a value.
    pub fn is_tombstone(self) -> bool {
        matches!(self, ValueKind::Tombstone | ValueKind::MemberTombstone)
    }

    /// The tombstone of namespace `ns`.
    pub fn tombstone_of(ns: u8) -> ValueKind {
        if ns == 0 {
            ValueKind::Tombstone
        } else {
            ValueKind::MemberTombstone
        }
    }
}

/// A decoded record header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordHeader {
    pub kind: ValueKind,
    pub key_bytes: u8,
    pub value_bytes: u32,
    pub seq: u64,
    pub crc: u32,
}

impl RecordHeader {
    /// Bytes of the whole record (header, key, value), before chunk rounding.
    pub fn record_bytes(&self) -> u64 {
        HEADER_BYTES as u64 + u64::from(self.key_bytes) + u64::from(self.value_bytes)
    }

    /// Decode the fixed part; `None` when the bytes are not a record header (wrong magic, version or
    /// reserved bits, empty key). The checksum is checked separately ([`checksum`]) once the key
    /// and value are read.
    pub fn decode(b: &[u8]) -> Option<RecordHeader> {
        if b.len() < HEADER_BYTES
            || b[R_MAGIC..R_VERSION] != RECORD_MAGIC
            || b[R_VERSION] != FORMAT_VERSION
            || b[R_RESERVED] != 0
            || b[R_KEY_BYTES] == 0
        {
            return None;
        }
        Some(RecordHeader {
            kind: ValueKind::from_byte(b[R_KIND])?,
            key_bytes: b[R_KEY_BYTES],
            value_bytes: u32::from_le_bytes(b[R_VALUE_BYTES..R_KIND].try_into().unwrap()),
            seq: u64::from_le_bytes(b[R_SEQ..R_CRC].try_into().unwrap()),
            crc: u32::from_le_bytes(b[R_CRC..HEADER_BYTES].try_into().unwrap()),
        })
    }
}

/// The record checksum: CRC32C over the store salt, header bytes 0..20, the key and the value.
pub fn checksum(salt: u64, head: &[u8], key: &[u8], value: &[u8]) -> u32 {
    let c = crc32c::crc32c(&salt.to_le_bytes());
    let c = crc32c::crc32c_append(c, &head[..R_CRC]);
    let c = crc32c::crc32c_append(c, key);
    crc32c::crc32c_append(c, value)
}

/// Bytes of a record with this key and value size (header, key, value; no padding).
pub fn record_bytes(key_bytes: usize, value_bytes: usize) -> usize {
    HEADER_BYTES + key_bytes + value_bytes
}

/// Bytes a packed record takes in its chunk: its size rounded up to [`RECORD_ALIGN`].
pub fn packed_bytes(record_bytes: usize) -> usize {
    record_bytes.div_ceil(RECORD_ALIGN) * RECORD_ALIGN
}

/// Write a whole record (header, key, value) at the start of `dst`, which holds at least
/// [`record_bytes`] bytes.
pub fn encode_record_into(
    dst: &mut [u8],
    salt: u64,
    seq: u64,
    kind: ValueKind,
    key: &[u8],
    value: &[u8],
) {
    assert!(
        (1..=KEY_BYTES_MAX).contains(&key.len()),
        "key size checked by the caller"
    );
    let value_bytes = u32::try_from(value.len()).expect("value size checked by the caller");
    let mut h = [0u8; HEADER_BYTES];
    h[R_MAGIC..R_VERSION].copy_from_slice(&RECORD_MAGIC);
    h[R_VERSION] = FORMAT_VERSION;
    h[R_KEY_BYTES] = key.len() as u8;
    h[R_VALUE_BYTES..R_KIND].copy_from_slice(&value_bytes.to_le_bytes());
    h[R_KIND] = kind as u8;
    h[R_RESERVED] = 0;
    h[R_SEQ..R_CRC].copy_from_slice(&seq.to_le_bytes());
    let crc = checksum(salt, &h, key, value);
    h[R_CRC..HEADER_BYTES].copy_from_slice(&crc.to_le_bytes());
    let key_end = HEADER_BYTES + key.len();
    dst[..HEADER_BYTES].copy_from_slice(&h);
    dst[HEADER_BYTES..key_end].copy_from_slice(key);
    dst[key_end..key_end + value.len()].copy_from_slice(value);
}

/// Encode a whole record into `out` (cleared, then filled and zero-padded to whole chunks).
pub fn encode_record(
    out: &mut Vec<u8>,
    salt: u64,
    seq: u64,
    kind: ValueKind,
    key: &[u8],
    value: &[u8],
    chunk_bytes: usize,
) {
    let n = record_bytes(key.len(), value.len());
    out.clear();
    out.resize(n.div_ceil(chunk_bytes) * chunk_bytes, 0);
    encode_record_into(out, salt, seq, kind, key, value);
}

/// Check a whole record read from storage (`b` starts at the header and holds at least the record);
/// returns the header when the checksum matches.
pub fn verify_record(b: &[u8], salt: u64) -> Option<RecordHeader> {
    let h = RecordHeader::decode(b)?;
    let end = usize::try_from(h.record_bytes()).ok()?;
    if b.len() < end {
        return None;
    }
    let key_end = HEADER_BYTES + h.key_bytes as usize;
    let crc = checksum(
        salt,
        &b[..HEADER_BYTES],
        &b[HEADER_BYTES..key_end],
        &b[key_end..end],
    );
    (crc == h.crc).then_some(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_round_trip_and_layout() {
        let mut out = Vec::new();
        encode_record(&mut out, 7, 42, ValueKind::Hash, b"key", b"value!", 512);
        assert_eq!(out.len(), 512);
        assert_eq!(out[R_KIND], 1);
        assert_eq!(out[R_KEY_BYTES], 3);
        assert_eq!(&out[R_VALUE_BYTES..R_VALUE_BYTES + 4], &6u32.to_le_bytes());
        let h = verify_record(&out, 7).unwrap();
        assert_eq!((h.key_bytes, h.value_bytes, h.seq), (3, 6, 42));
        assert_eq!(h.kind, ValueKind::Hash);
        assert!(verify_record(&out, 8).is_none(), "another store's salt");
        assert_eq!(out[R_VERSION], 4);
        for i in 0..(HEADER_BYTES + 9) {
            let mut bad = out.clone();
            bad[i] ^= 0x10;
            assert!(verify_record(&bad, 7).is_none(), "flip at byte {i} passed");
        }
    }

    #[test]
    fn superblock_round_trip() {
        let sb = Superblock {
            chunk_bytes: 4096,
            salt: 99,
            capacity: 1 << 30,
        };
        assert_eq!(Superblock::decode(&sb.encode()), Ok(sb));
        let mut b = sb.encode();
        b[S_SALT] ^= 1;
        assert!(Superblock::decode(&b).is_err());
        // Older versions are refused by name, saying what changed.
        let refused = |version: u32| {
            let mut b = sb.encode();
            b[S_VERSION..S_CHUNK].copy_from_slice(&version.to_le_bytes());
            let crc = crc32c::crc32c(&b[..S_CRC]);
            b[S_CRC..].copy_from_slice(&crc.to_le_bytes());
            Superblock::decode(&b).unwrap_err()
        };
        for (version, what) in [(1, "value kind"), (2, "packed"), (3, "tombstones")] {
            let e = refused(version);
            assert!(
                e.contains(&format!("format version {version}")) && e.contains(what),
                "{e}"
            );
            assert!(e.contains("reads only version 4"), "{e}");
        }
        assert!(refused(5).contains("unknown format version 5"));
    }

    #[test]
    fn tombstone_kinds_round_trip() {
        for (kind, ns) in [(ValueKind::Tombstone, 0), (ValueKind::MemberTombstone, 1)] {
            let mut out = Vec::new();
            encode_record(&mut out, 7, 9, kind, b"gone", b"", 512);
            let h = verify_record(&out, 7).unwrap();
            assert_eq!((h.kind, h.value_bytes, h.seq), (kind, 0, 9));
            assert!(h.kind.is_tombstone());
            assert_eq!(h.kind.namespace(), ns);
            assert_eq!(ValueKind::tombstone_of(ns), kind);
        }
        assert!(ValueKind::from_byte(5).is_none());
    }
}
