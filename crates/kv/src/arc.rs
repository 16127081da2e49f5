//! The object metadata cache (EPLOG §4): ARC replacement (N. Megiddo and D. S. Modha, "ARC: A
//! Self-Tuning, Low Overhead Replacement Cache", FAST 2003, Fig. 4) over a cuckoo-hashed directory.
//!
//! `T1` (seen once recently) and `T2` (seen at least twice) hold cached entries, `B1` and `B2` the
//! keys of entries recently evicted from them (ghosts, no value); `|T1| + |T2| ≤ c` and the four lists
//! hold at most `2c` keys. The target size `p` of `T1` moves by `max(|B2| / |B1|, 1)` (integer
//! division) on a ghost hit in `B1` and by `max(|B1| / |B2|, 1)` the other way.
//!
//! A request is [`ArcCache::get`] (a hit moves the entry to the MRU end of `T2`) followed, on a miss,
//! by [`ArcCache::admit`] once the caller has fetched the value (cases II–IV of the paper). Beyond the
//! paper, [`ArcCache::update`] changes a resident value in place (not a request) and
//! [`ArcCache::remove`] forgets a key wherever it is (the pair was deleted).

use crate::cuckoo::{key_hash, CuckooTable};

const T1: usize = 0;
const T2: usize = 1;
const B1: usize = 2;
const B2: usize = 3;
const NIL: usize = usize::MAX;

/// Keys up to this many bytes live inside their node (redis-benchmark's `key:%012d` is 16 bytes,
/// YCSB's `user<digits>` at most 23).
const KEY_INLINE_BYTES: usize = 24;

/// A node's key: inside the node when short, so a directory lookup that finds the node compares
/// the key without chasing a pointer to the heap (one cache miss less per lookup, per GET and SET).
#[derive(Debug)]
enum NodeKey {
    Inline {
        len: u8,
        bytes: [u8; KEY_INLINE_BYTES],
    },
    Heap(Box<[u8]>),
}

impl Default for NodeKey {
    fn default() -> Self {
        NodeKey::Inline {
            len: 0,
            bytes: [0; KEY_INLINE_BYTES],
        }
    }
}

impl NodeKey {
    fn new(key: &[u8]) -> NodeKey {
        match u8::try_from(key.len()) {
            Ok(len) if key.len() <= KEY_INLINE_BYTES => {
                let mut bytes = [0; KEY_INLINE_BYTES];
                bytes[..key.len()].copy_from_slice(key);
                NodeKey::Inline { len, bytes }
            }
            _ => NodeKey::Heap(key.into()),
        }
    }

    fn as_slice(&self) -> &[u8] {
        match self {
            NodeKey::Inline { len, bytes } => &bytes[..*len as usize],
            NodeKey::Heap(b) => b,
        }
    }
}

#[derive(Debug)]
struct Node<V> {
    key: NodeKey,
    val: Option<V>,
    list: usize,
    prev: usize,
    next: usize,
}

/// The outcome of [`ArcCache::get`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup<V> {
    Hit(V),
    Miss,
}

/// An ARC cache of `capacity` entries keyed by byte strings (see the module docs).
#[derive(Debug)]
pub struct ArcCache<V> {
    c: usize,
    p: usize,
    nodes: Vec<Node<V>>,
    free: Vec<usize>,
    /// MRU end of each list.
    head: [usize; 4],
    /// LRU end of each list.
    tail: [usize; 4],
    len: [usize; 4],
    index: CuckooTable,
}

impl<V: Clone> ArcCache<V> {
    pub fn new(capacity: usize) -> ArcCache<V> {
        ArcCache {
            c: capacity,
            p: 0,
            nodes: Vec::new(),
            free: Vec::new(),
            head: [NIL; 4],
            tail: [NIL; 4],
            len: [0; 4],
            index: CuckooTable::with_capacity(2 * capacity + 16),
        }
    }

    pub fn capacity(&self) -> usize {
        self.c
    }

    /// Cached entries (`|T1| + |T2|`).
    pub fn len(&self) -> usize {
        self.len[T1] + self.len[T2]
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The adaptation target `p` (the size ARC aims for `T1`).
    pub fn target(&self) -> usize {
        self.p
    }

    /// The keys of `T1`, `T2`, `B1`, `B2`, each from MRU to LRU (for tests and reports).
    pub fn lists(&self) -> [Vec<Vec<u8>>; 4] {
        let walk = |l: usize| {
            let mut out = Vec::with_capacity(self.len[l]);
            let mut i = self.head[l];
            while i != NIL {
                out.push(self.nodes[i].key.as_slice().to_vec());
                i = self.nodes[i].next;
            }
            out
        };
        [walk(T1), walk(T2), walk(B1), walk(B2)]
    }

    fn find(&self, key: &[u8]) -> Option<(usize, usize)> {
        self.find_hashed(key, key_hash(key))
    }

    fn find_hashed(&self, key: &[u8], h: u64) -> Option<(usize, usize)> {
        let found: Result<Option<usize>, std::convert::Infallible> = self
            .index
            .find(h, |n| Ok(self.nodes[n as usize].key.as_slice() == key));
        found
            .unwrap_or_else(|e| match e {})
            .map(|slot| (slot, self.index.value(slot) as usize))
    }

    fn unlink(&mut self, i: usize) {
        let (l, prev, next) = (self.nodes[i].list, self.nodes[i].prev, self.nodes[i].next);
        if prev == NIL {
            self.head[l] = next;
        } else {
            self.nodes[prev].next = next;
        }
        if next == NIL {
            self.tail[l] = prev;
        } else {
            self.nodes[next].prev = prev;
        }
        self.len[l] -= 1;
    }

    fn push_mru(&mut self, i: usize, l: usize) {
        let old = self.head[l];
        self.nodes[i].list = l;
        self.nodes[i].prev = NIL;
        self.nodes[i].next = old;
        if old == NIL {
            self.tail[l] = i;
        } else {
            self.nodes[old].prev = i;
        }
        self.head[l] = i;
        self.len[l] += 1;
    }

    fn move_to(&mut self, i: usize, l: usize) {
        self.unlink(i);
        self.push_mru(i, l);
    }

    /// Drop the LRU key of list `l` from the directory entirely.
    fn delete_lru(&mut self, l: usize) {
        let i = self.tail[l];
        if i != NIL {
            self.forget(i);
        }
    }

    fn forget(&mut self, i: usize) {
        self.unlink(i);
        let key = std::mem::take(&mut self.nodes[i].key);
        let (slot, _) = self.find_node_slot(key.as_slice(), i);
        self.index.remove(slot);
        self.nodes[i].val = None;
        self.free.push(i);
    }

    fn find_node_slot(&self, key: &[u8], node: usize) -> (usize, usize) {
        let slot = self
            .index
            .candidates(key_hash(key))
            .find(|&(_, v)| v as usize == node)
            .map(|(s, _)| s)
            .expect("every listed node is indexed");
        (slot, node)
    }

    /// REPLACE(x, p) of the paper; `in_b2` says whether the requested key is a ghost of `B2`.
    fn replace(&mut self, in_b2: bool) {
        let t1 = self.len[T1];
        let from_t1 = t1 >= 1 && ((in_b2 && t1 == self.p) || t1 > self.p);
        // Beyond the paper: removals can leave the chosen list empty; take the other one then.
        let (from, to) = if (from_t1 || self.len[T2] == 0) && t1 > 0 {
            (T1, B1)
        } else if self.len[T2] > 0 {
            (T2, B2)
        } else {
            return;
        };
        let i = self.tail[from];
        self.nodes[i].val = None;
        self.move_to(i, to);
    }

    /// A request for `key`: on a hit the entry moves to the MRU end of `T2` (case I).
    pub fn get(&mut self, key: &[u8]) -> Lookup<V> {
        match self.get_hashed(key, key_hash(key)) {
            Some((_, v)) => Lookup::Hit(v),
            None => Lookup::Miss,
        }
    }

    /// [`ArcCache::get`] of a key whose [`key_hash`] is `h`; a hit also gives the entry's handle
    /// for [`ArcCache::update_at`].
    pub fn get_hashed(&mut self, key: &[u8], h: u64) -> Option<(usize, V)> {
        match self.find_hashed(key, h) {
            Some((_, i)) if self.nodes[i].list == T1 || self.nodes[i].list == T2 => {
                self.move_to(i, T2);
                let v = self.nodes[i]
                    .val
                    .clone()
                    .expect("resident entries hold a value");
                Some((i, v))
            }
            _ => None,
        }
    }

    /// Change the value of the cached entry `handle` (from [`ArcCache::get_hashed`]) without a
    /// directory lookup, if it still caches `key` (a later admission may have evicted it or reused
    /// its handle); false otherwise, changing nothing.
    pub fn update_at(&mut self, handle: usize, key: &[u8], val: V) -> bool {
        match self.nodes.get_mut(handle) {
            Some(n) if n.val.is_some() && n.key.as_slice() == key => {
                n.val = Some(val);
                true
            }
            _ => false,
        }
    }

    /// Whether `key` is cached (not a request: nothing moves).
    pub fn peek(&self, key: &[u8]) -> Option<&V> {
        self.find(key).and_then(|(_, i)| self.nodes[i].val.as_ref())
    }

    /// Change the value of a cached entry without counting a request; false if it is not cached.
    pub fn update(&mut self, key: &[u8], val: V) -> bool {
        self.update_hashed(key, key_hash(key), val)
    }

    /// [`ArcCache::update`] of a key whose [`key_hash`] is `h`.
    pub fn update_hashed(&mut self, key: &[u8], h: u64, val: V) -> bool {
        match self.find_hashed(key, h) {
            Some((_, i)) if self.nodes[i].val.is_some() => {
                self.nodes[i].val = Some(val);
                true
            }
            _ => false,
        }
    }

    /// Forget `key` (cached or ghost).
    pub fn remove(&mut self, key: &[u8]) {
        if let Some((_, i)) = self.find(key) {
            self.forget(i);
        }
    }

    /// Admit `key` after a miss (cases II–IV of the paper). A key that is already cached only gets
    /// its value replaced and counts as a hit (case I).
    pub fn admit(&mut self, key: &[u8], val: V) {
        self.admit_hashed(key, key_hash(key), val)
    }

    /// [`ArcCache::admit`] of a key whose [`key_hash`] is `h`.
    pub fn admit_hashed(&mut self, key: &[u8], h: u64, val: V) {
        if self.c == 0 {
            return;
        }
        let found = self.find_hashed(key, h).map(|(_, i)| i);
        match found.map(|i| (i, self.nodes[i].list)) {
            Some((i, T1 | T2)) => {
                self.nodes[i].val = Some(val);
                self.move_to(i, T2);
            }
            Some((i, B1)) => {
                let delta = (self.len[B2] / self.len[B1]).max(1);
                self.p = (self.p + delta).min(self.c);
                self.replace(false);
                self.nodes[i].val = Some(val);
                self.move_to(i, T2);
            }
            Some((i, _)) => {
                let delta = (self.len[B1] / self.len[B2]).max(1);
                self.p = self.p.saturating_sub(delta);
                self.replace(true);
                self.nodes[i].val = Some(val);
                self.move_to(i, T2);
            }
            None => self.admit_new(key, h, val),
        }
    }

    /// Case IV: a key in none of the lists.
    fn admit_new(&mut self, key: &[u8], h: u64, val: V) {
        let l1 = self.len[T1] + self.len[B1];
        let total = l1 + self.len[T2] + self.len[B2];
        if l1 >= self.c {
            if self.len[T1] < self.c {
                self.delete_lru(B1);
                self.replace(false);
            } else {
                self.delete_lru(T1);
            }
        } else if total >= self.c {
            if total >= 2 * self.c {
                self.delete_lru(B2);
            }
            self.replace(false);
        }
        let node = Node {
            key: NodeKey::new(key),
            val: Some(val),
            list: T1,
            prev: NIL,
            next: NIL,
        };
        let i = match self.free.pop() {
            Some(i) => {
                self.nodes[i] = node;
                i
            }
            None => {
                self.nodes.push(node);
                self.nodes.len() - 1
            }
        };
        // The directory holds at most 2c keys and is sized for that at ≤ 90% load.
        // Should the relocation search ever fail, the key is simply not cached.
        if !self.index.insert(h, i as u64) {
            self.nodes[i].val = None;
            self.nodes[i].key = NodeKey::default();
            self.free.push(i);
            return;
        }
        self.push_mru(i, T1);
        debug_assert!(self.len[T1] + self.len[T2] <= self.c);
        debug_assert!(self.len.iter().sum::<usize>() <= 2 * self.c);
    }
}
