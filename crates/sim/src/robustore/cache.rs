//! A filer's file-system cache (§6.2.6): LRU, set-associative, fixed-size lines; read data only (writes
//! go through). Lines are named by (global disk, byte address on that disk); a line's set is a hash of
//! its name, its victim the least recently used way of that set.

/// The cache of one filer.
#[derive(Clone, Debug)]
pub struct Cache {
    sets: usize,
    ways: usize,
    line: u64,
    tags: Vec<u64>,
    stamps: Vec<u64>,
    clock: u64,
    pub hits: u64,
    pub misses: u64,
}

const EMPTY: u64 = u64::MAX;

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl Cache {
    /// `bytes` of cache in `line`-byte lines, `ways`-way set-associative (at least one set).
    pub fn new(bytes: u64, line: u64, ways: usize) -> Cache {
        let lines = (bytes / line.max(1)).max(ways as u64) as usize;
        let sets = (lines / ways.max(1)).max(1);
        Cache {
            sets,
            ways: ways.max(1),
            line: line.max(1),
            tags: vec![EMPTY; sets * ways.max(1)],
            stamps: vec![0; sets * ways.max(1)],
            clock: 0,
            hits: 0,
            misses: 0,
        }
    }

    pub fn line_bytes(&self) -> u64 {
        self.line
    }

    fn key(disk: usize, line_no: u64) -> u64 {
        ((disk as u64) << 44) ^ line_no
    }

    fn set_of(&self, key: u64) -> usize {
        (mix(key) % self.sets as u64) as usize
    }

    /// Is the line holding byte `addr` of `disk` cached? A hit makes it most recently used.
    pub fn lookup(&mut self, disk: usize, addr: u64) -> bool {
        let key = Cache::key(disk, addr / self.line);
        let base = self.set_of(key) * self.ways;
        self.clock += 1;
        for w in base..base + self.ways {
            if self.tags[w] == key {
                self.stamps[w] = self.clock;
                self.hits += 1;
                return true;
            }
        }
        self.misses += 1;
        false
    }

    /// Bring the line holding byte `addr` of `disk` in (evicting its set's LRU way); a no-op if present.
    pub fn insert(&mut self, disk: usize, addr: u64) {
        let key = Cache::key(disk, addr / self.line);
        let base = self.set_of(key) * self.ways;
        self.clock += 1;
        let mut victim = base;
        for w in base..base + self.ways {
            if self.tags[w] == key {
                self.stamps[w] = self.clock;
                return;
            }
            if self.stamps[w] < self.stamps[victim] {
                victim = w;
            }
        }
        self.tags[victim] = key;
        self.stamps[victim] = self.clock;
    }

    /// Are all lines of `[addr, addr + len)` cached? Touches them when they are.
    pub fn contains_range(&mut self, disk: usize, addr: u64, len: u64) -> bool {
        let first = addr / self.line;
        let last = (addr + len.max(1) - 1) / self.line;
        // Check without touching first, so a partial hit does not refresh lines.
        let all = (first..=last).all(|l| {
            let key = Cache::key(disk, l);
            let base = self.set_of(key) * self.ways;
            self.tags[base..base + self.ways].contains(&key)
        });
        if all {
            for l in first..=last {
                self.lookup(disk, l * self.line);
            }
        } else {
            self.misses += 1;
        }
        all
    }

    pub fn insert_range(&mut self, disk: usize, addr: u64, len: u64) {
        let first = addr / self.line;
        let last = (addr + len.max(1) - 1) / self.line;
        for l in first..=last {
            self.insert(disk, l * self.line);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lru_within_a_set() {
        // One set of 4 ways: the fifth distinct line evicts the least recently used.
        let mut c = Cache::new(4 * 4096, 4096, 4);
        for i in 0..4 {
            c.insert(0, i * 4096);
        }
        assert!(c.lookup(0, 0)); // line 0 now most recent; line 1 is LRU
        c.insert(0, 4 * 4096);
        assert!(!c.lookup(0, 4096));
        assert!(c.lookup(0, 0));
        assert!(c.lookup(0, 2 * 4096));
        assert!(c.lookup(0, 4 * 4096 + 17));
    }

    #[test]
    fn ranges_need_every_line() {
        let mut c = Cache::new(1 << 20, 4096, 4);
        c.insert_range(3, 0, 3 * 4096);
        assert!(c.contains_range(3, 100, 3 * 4096 - 200));
        assert!(!c.contains_range(3, 0, 4 * 4096));
        assert!(!c.contains_range(4, 0, 4096));
    }
}
