//! ArcCache against a straightforward ARC written here from the paper (Megiddo & Modha, FAST 2003,
//! Fig. 4) with plain vectors and linear search: on random traces (uniform, skewed, scans, deletes)
//! every request must hit or miss alike, and the four lists and the target p must match after every
//! step.

use ecstack_base::Rng;
use ecstack_kv::{ArcCache, Lookup};

/// The reference: lists as vectors, index 0 = MRU.
struct RefArc {
    c: usize,
    p: usize,
    t1: Vec<u32>,
    t2: Vec<u32>,
    b1: Vec<u32>,
    b2: Vec<u32>,
}

fn take(list: &mut Vec<u32>, x: u32) -> bool {
    match list.iter().position(|&y| y == x) {
        Some(i) => {
            list.remove(i);
            true
        }
        None => false,
    }
}

impl RefArc {
    fn replace(&mut self, x_in_b2: bool) {
        let t1 = self.t1.len();
        if t1 >= 1 && ((x_in_b2 && t1 == self.p) || t1 > self.p) {
            let y = self.t1.pop().unwrap();
            self.b1.insert(0, y);
        } else if let Some(y) = self.t2.pop() {
            self.b2.insert(0, y);
        } else if let Some(y) = self.t1.pop() {
            self.b1.insert(0, y);
        }
    }

    /// One request; true on a hit.
    fn request(&mut self, x: u32) -> bool {
        // Case I.
        if take(&mut self.t1, x) || take(&mut self.t2, x) {
            self.t2.insert(0, x);
            return true;
        }
        if self.c == 0 {
            return false;
        }
        if self.b1.contains(&x) {
            // Case II.
            let d = if self.b1.len() >= self.b2.len() {
                1
            } else {
                self.b2.len() / self.b1.len()
            };
            self.p = (self.p + d).min(self.c);
            self.replace(false);
            take(&mut self.b1, x);
            self.t2.insert(0, x);
        } else if self.b2.contains(&x) {
            // Case III.
            let d = if self.b2.len() >= self.b1.len() {
                1
            } else {
                self.b1.len() / self.b2.len()
            };
            self.p = self.p.saturating_sub(d);
            self.replace(true);
            take(&mut self.b2, x);
            self.t2.insert(0, x);
        } else {
            // Case IV.
            let l1 = self.t1.len() + self.b1.len();
            let total = l1 + self.t2.len() + self.b2.len();
            if l1 == self.c {
                if self.t1.len() < self.c {
                    self.b1.pop();
                    self.replace(false);
                } else {
                    self.t1.pop();
                }
            } else if l1 < self.c && total >= self.c {
                if total == 2 * self.c {
                    self.b2.pop();
                }
                self.replace(false);
            }
            self.t1.insert(0, x);
        }
        false
    }

    fn remove(&mut self, x: u32) {
        let _found = take(&mut self.t1, x)
            || take(&mut self.t2, x)
            || take(&mut self.b1, x)
            || take(&mut self.b2, x);
    }
}

fn k(x: u32) -> Vec<u8> {
    format!("k{x}").into_bytes()
}

fn run(seed: u64, c: usize, universe: u32, steps: usize, with_removes: bool) -> (usize, usize) {
    let mut rng = Rng::new(seed);
    let mut arc: ArcCache<u32> = ArcCache::new(c);
    let mut r = RefArc {
        c,
        p: 0,
        t1: vec![],
        t2: vec![],
        b1: vec![],
        b2: vec![],
    };
    let (mut hits, mut b_hits) = (0, 0);
    for step in 0..steps {
        // Mix of a hot set, uniform traffic and sequential scans, so both T1 and T2 matter.
        let x = match rng.below(10) {
            0..=4 => rng.below(u64::from(universe / 8).max(1)) as u32,
            5..=7 => rng.below(u64::from(universe)) as u32,
            _ => (step as u32 * 7) % universe,
        };
        if with_removes && rng.below(20) == 0 {
            arc.remove(&k(x));
            r.remove(x);
        } else {
            if r.b1.contains(&x) || r.b2.contains(&x) {
                b_hits += 1;
            }
            let want = r.request(x);
            let got = match arc.get(&k(x)) {
                Lookup::Hit(v) => {
                    assert_eq!(v, x, "seed {seed} step {step}: wrong value");
                    true
                }
                Lookup::Miss => {
                    arc.admit(&k(x), x);
                    false
                }
            };
            assert_eq!(
                got, want,
                "seed {seed} step {step} c {c}: hit/miss of {x} differs"
            );
            hits += usize::from(got);
        }
        let lists = arc.lists();
        let ours: Vec<Vec<u32>> = lists
            .iter()
            .map(|l| {
                l.iter()
                    .map(|b| std::str::from_utf8(&b[1..]).unwrap().parse().unwrap())
                    .collect()
            })
            .collect();
        assert_eq!(
            ours,
            vec![r.t1.clone(), r.t2.clone(), r.b1.clone(), r.b2.clone()],
            "seed {seed} step {step} c {c}: lists differ"
        );
        assert_eq!(arc.target(), r.p, "seed {seed} step {step}: p differs");
    }
    (hits, b_hits)
}

#[test]
fn matches_reference_on_random_traces() {
    let mut ghost_hits = 0;
    for seed in 1..=12u64 {
        let c = [1, 2, 5, 16, 64][seed as usize % 5];
        let (hits, g) = run(seed, c, (c as u32) * 4 + 3, 4000, false);
        assert!(hits > 0, "seed {seed}: the trace never hit");
        ghost_hits += g;
    }
    assert!(
        ghost_hits > 100,
        "ghost hits (cases II and III) were exercised: {ghost_hits}"
    );
}

#[test]
fn matches_reference_with_removals() {
    for seed in 100..=108u64 {
        let c = [3, 8, 32][seed as usize % 3];
        run(seed, c, (c as u32) * 3 + 1, 3000, true);
    }
}

#[test]
fn zero_capacity_never_caches() {
    let mut arc: ArcCache<u32> = ArcCache::new(0);
    arc.admit(b"a", 1);
    assert_eq!(arc.get(b"a"), Lookup::Miss);
    assert!(arc.is_empty());
}

/// The handle of a hit updates that entry without a lookup, and only while it still caches the
/// key: once the entry is evicted, or its slot holds another key, `update_at` refuses and changes
/// nothing (the store then updates by key).
#[test]
fn update_at_only_while_the_handle_holds_the_key() {
    let mut c: ArcCache<u32> = ArcCache::new(2);
    c.admit(b"a", 1);
    let h = ecstack_kv::key_hash(b"a");
    let (handle, v) = c.get_hashed(b"a", h).expect("a is cached");
    assert_eq!(v, 1);
    assert!(c.update_at(handle, b"a", 2));
    assert_eq!(c.peek(b"a"), Some(&2));
    assert!(!c.update_at(handle, b"b", 3), "another key");
    // Push "a" out: it becomes a ghost, then is forgotten and its slot reused.
    for (i, key) in [&b"b"[..], b"c", b"d", b"e", b"f"].iter().enumerate() {
        c.admit(key, 10 + i as u32);
        if c.get(key) == Lookup::Miss {
            c.admit(key, 10 + i as u32);
        }
    }
    assert_eq!(c.peek(b"a"), None, "a was evicted");
    assert!(!c.update_at(handle, b"a", 4));
    assert_eq!(c.peek(b"a"), None);
    assert!(c.len() <= 2);
}

/// Keys on both sides of the length kept inside a node (24 bytes) and up to the longest key:
/// each is found by its exact bytes only, so a key and its prefix, a key padded with zero bytes,
/// and two long keys that differ past byte 24 are distinct entries; the lists give them back whole.
#[test]
fn short_and_long_keys_are_told_apart_by_every_byte() {
    let mut keys: Vec<Vec<u8>> = Vec::new();
    for len in [1usize, 2, 23, 24, 25, 26, 100, 255] {
        let base: Vec<u8> = (0..len).map(|i| b'a' + (i % 26) as u8).collect();
        let mut last = base.clone();
        *last.last_mut().unwrap() = b'#';
        keys.push(base);
        keys.push(last);
    }
    keys.push(b"aa\0".to_vec());
    keys.push(b"a\0".to_vec());
    let mut c: ArcCache<usize> = ArcCache::new(keys.len());
    for (i, k) in keys.iter().enumerate() {
        assert_eq!(c.peek(k), None, "key {i} not yet cached");
        c.admit(k, i);
    }
    for (i, k) in keys.iter().enumerate() {
        assert_eq!(c.get(k), Lookup::Hit(i), "key {i} ({} bytes)", k.len());
    }
    let [t1, t2, b1, b2] = c.lists();
    assert!(t1.is_empty() && b1.is_empty() && b2.is_empty());
    let mut listed = t2;
    listed.sort();
    let mut want = keys.clone();
    want.sort();
    assert_eq!(listed, want);
}
