//! Cuckoo hashing with two candidate buckets of [`BUCKET_SLOTS`] entries (EPLOG §4's object location
//! table; also the index of the metadata cache).
//!
//! An entry holds a 16-bit fingerprint of the key and a 48-bit value (a record's byte address, or a
//! cache node), packed in one `u64`; a bucket of four entries is 32 bytes, one cache line. A key
//! with hash `h` may live in bucket `b1 = h & mask` or `b2 = b1 ^ spread(fp)`: `b2` is computed from `b1` and the fingerprint alone and the map is its own inverse, so
//! relocation moves an entry to its other bucket without knowing (or reading) its key — partial-key
//! cuckoo hashing. Lookups return every entry whose fingerprint matches; the caller resolves
//! collisions by comparing the real key (read from storage for the location table). Insertion
//! searches breadth-first for a path of moves that ends at a free slot (bounded by
//! [`SEARCH_NODES_MAX`]) and applies it from the free end, so a failed insertion changes nothing.

/// Entries per bucket.
pub const BUCKET_SLOTS: usize = 4;
/// Buckets the relocation search visits at most before it reports the table full.
pub const SEARCH_NODES_MAX: usize = 4096;
/// Load the table is sized for by [`CuckooTable::with_capacity`].
const LOAD_TARGET: f64 = 0.9;

/// The 64-bit hash of a key that every table in this crate uses (FNV-1a with a final avalanche).
pub fn key_hash(key: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in key {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

fn fingerprint(h: u64) -> u16 {
    match (h >> 48) as u16 {
        0 => 1, // 0 marks an empty slot
        f => f,
    }
}

fn spread(fp: u16) -> usize {
    (u64::from(fp).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 17) as usize
}

/// Bits of an entry's value: the fingerprint takes the top 16 bits of the entry's `u64`.
pub const VALUE_BITS: u32 = 48;
/// Largest value an entry holds (a byte address below 256 TiB, a cache node index).
pub const VALUE_MAX: u64 = (1 << VALUE_BITS) - 1;

/// One bucket: [`BUCKET_SLOTS`] entries of `fingerprint << 48 | value` (0: empty), 32 bytes
/// aligned to 32, so a probe of a bucket touches one cache line (fingerprints and values used to
/// sit in two arrays: two cache misses per probe).
#[derive(Debug, Clone, Copy, Default)]
#[repr(C, align(32))]
struct Bucket([u64; BUCKET_SLOTS]);

const _: () = assert!(std::mem::size_of::<Bucket>() == 32 && BUCKET_SLOTS == 4);

fn entry_fp(e: u64) -> u16 {
    (e >> VALUE_BITS) as u16
}

fn entry(fp: u16, val: u64) -> u64 {
    assert!(
        val <= VALUE_MAX,
        "value {val:#x} does not fit in {VALUE_BITS} bits"
    );
    u64::from(fp) << VALUE_BITS | val
}

/// A cuckoo hash table of fingerprints and values (see the module docs). Values are at most
/// [`VALUE_MAX`].
#[derive(Debug, Clone)]
pub struct CuckooTable {
    buckets: Vec<Bucket>,
    mask: usize,
    len: usize,
}

impl CuckooTable {
    /// A table with room for `entries` at about 90% load (bucket count a power of two).
    pub fn with_capacity(entries: usize) -> CuckooTable {
        let buckets = (entries as f64 / (BUCKET_SLOTS as f64 * LOAD_TARGET)).ceil() as usize;
        CuckooTable::with_buckets(buckets.max(2).next_power_of_two())
    }

    /// A table of exactly `buckets` buckets (rounded up to a power of two, at least 2).
    pub fn with_buckets(buckets: usize) -> CuckooTable {
        let buckets = buckets.max(2).next_power_of_two();
        CuckooTable {
            buckets: vec![Bucket::default(); buckets],
            mask: buckets - 1,
            len: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Entries the table has room for (buckets × slots).
    pub fn slots(&self) -> usize {
        self.buckets.len() * BUCKET_SLOTS
    }

    /// Fraction of the slots in use.
    pub fn load(&self) -> f64 {
        self.len as f64 / self.slots() as f64
    }

    fn buckets_of(&self, h: u64) -> (usize, usize, u16) {
        let fp = fingerprint(h);
        let b1 = h as usize & self.mask;
        (b1, self.alt(b1, fp), fp)
    }

    fn alt(&self, bucket: usize, fp: u16) -> usize {
        (bucket ^ spread(fp)) & self.mask
    }

    fn at(&self, slot: usize) -> u64 {
        self.buckets[slot / BUCKET_SLOTS].0[slot % BUCKET_SLOTS]
    }

    fn at_mut(&mut self, slot: usize) -> &mut u64 {
        &mut self.buckets[slot / BUCKET_SLOTS].0[slot % BUCKET_SLOTS]
    }

    /// The slots (and their values) whose fingerprint matches `h`, in bucket order: the candidates a
    /// caller checks against the real key.
    pub fn candidates(&self, h: u64) -> impl Iterator<Item = (usize, u64)> + '_ {
        let (b1, b2, fp) = self.buckets_of(h);
        let second = (b2 != b1).then_some(b2);
        std::iter::once(b1).chain(second).flat_map(move |b| {
            let bucket = &self.buckets[b];
            (0..BUCKET_SLOTS).filter_map(move |i| {
                let e = bucket.0[i];
                (entry_fp(e) == fp).then_some((b * BUCKET_SLOTS + i, e & VALUE_MAX))
            })
        })
    }

    /// The first candidate slot for which `is` says yes.
    pub fn find<E>(
        &self,
        h: u64,
        mut is: impl FnMut(u64) -> Result<bool, E>,
    ) -> Result<Option<usize>, E> {
        let (b1, b2, fp) = self.buckets_of(h);
        for b in [b1, b2] {
            let bucket = self.buckets[b];
            for (i, &e) in bucket.0.iter().enumerate() {
                if entry_fp(e) == fp && is(e & VALUE_MAX)? {
                    return Ok(Some(b * BUCKET_SLOTS + i));
                }
            }
            if b2 == b1 {
                break;
            }
        }
        Ok(None)
    }

    /// The slot holding value `val` for a key with hash `h`, if any (no key compare: values such as
    /// record addresses are unique).
    pub fn slot_of_value(&self, h: u64, val: u64) -> Option<usize> {
        let found: Result<Option<usize>, std::convert::Infallible> = self.find(h, |v| Ok(v == val));
        found.unwrap_or_else(|e| match e {})
    }

    pub fn value(&self, slot: usize) -> u64 {
        let e = self.at(slot);
        assert!(entry_fp(e) != 0, "slot {slot} is empty");
        e & VALUE_MAX
    }

    pub fn set_value(&mut self, slot: usize, val: u64) {
        let e = self.at(slot);
        assert!(entry_fp(e) != 0, "slot {slot} is empty");
        *self.at_mut(slot) = entry(entry_fp(e), val);
    }

    pub fn remove(&mut self, slot: usize) {
        assert!(entry_fp(self.at(slot)) != 0, "slot {slot} is already empty");
        *self.at_mut(slot) = 0;
        self.len -= 1;
    }

    fn free_slot(&self, bucket: usize) -> Option<usize> {
        (0..BUCKET_SLOTS)
            .find(|&i| entry_fp(self.buckets[bucket].0[i]) == 0)
            .map(|i| bucket * BUCKET_SLOTS + i)
    }

    /// Insert a value (at most [`VALUE_MAX`]) for a key with hash `h` that is not in the table (the
    /// caller checks). Returns false, changing nothing, when no path of moves frees a slot in
    /// either bucket.
    pub fn insert(&mut self, h: u64, val: u64) -> bool {
        let (b1, b2, fp) = self.buckets_of(h);
        let new = entry(fp, val);
        // The common case: a free slot in a candidate bucket, no search.
        for b in [b1, b2] {
            if let Some(s) = self.free_slot(b) {
                *self.at_mut(s) = new;
                self.len += 1;
                return true;
            }
        }
        // Breadth-first search over buckets; each node remembers the slot whose entry moves into it.
        struct Node {
            bucket: usize,
            parent: usize,
            from_slot: usize,
        }
        let mut nodes: Vec<Node> = Vec::with_capacity(64);
        let mut seen = std::collections::HashSet::new();
        for b in [b1, b2] {
            if seen.insert(b) {
                nodes.push(Node {
                    bucket: b,
                    parent: usize::MAX,
                    from_slot: usize::MAX,
                });
            }
        }
        let mut next = 0;
        let found = loop {
            if next == nodes.len() || nodes.len() > SEARCH_NODES_MAX {
                return false;
            }
            let b = nodes[next].bucket;
            if let Some(s) = self.free_slot(b) {
                break (next, s);
            }
            for s in b * BUCKET_SLOTS..(b + 1) * BUCKET_SLOTS {
                let to = self.alt(b, entry_fp(self.at(s)));
                if seen.insert(to) {
                    nodes.push(Node {
                        bucket: to,
                        parent: next,
                        from_slot: s,
                    });
                }
            }
            next += 1;
        };
        // Apply the moves from the free end back to a root bucket.
        let (mut at, mut free) = found;
        while nodes[at].parent != usize::MAX {
            let from = nodes[at].from_slot;
            let moved = self.at(from);
            *self.at_mut(free) = moved;
            debug_assert_eq!(
                self.alt(nodes[nodes[at].parent].bucket, entry_fp(moved)),
                nodes[at].bucket
            );
            *self.at_mut(from) = 0;
            free = from;
            at = nodes[at].parent;
        }
        debug_assert!(free / BUCKET_SLOTS == b1 || free / BUCKET_SLOTS == b2);
        *self.at_mut(free) = new;
        self.len += 1;
        true
    }
}
