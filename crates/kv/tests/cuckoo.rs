//! The cuckoo table against a `HashMap`: filled until an insertion fails, it must have reached at
//! least 90% load, and every key inserted before must still be found with its value (also after
//! removals and reinsertion).

use std::collections::HashMap;

use ecstack_base::Rng;
use ecstack_kv::CuckooTable;

fn fill_until_full(seed: u64, buckets: usize) -> f64 {
    let mut rng = Rng::new(seed);
    let mut t = CuckooTable::with_buckets(buckets);
    let mut model: HashMap<u64, u64> = HashMap::new();
    loop {
        let h = rng.next_u64();
        if model.contains_key(&h) {
            continue;
        }
        let v = rng.next_u64() & ecstack_kv::TABLE_VALUE_MAX;
        if !t.insert(h, v) {
            break;
        }
        model.insert(h, v);
        assert_eq!(t.len(), model.len());
    }
    let load = t.load();
    for (&h, &v) in &model {
        let hits: Vec<u64> = t.candidates(h).map(|(_, x)| x).collect();
        assert!(
            hits.contains(&v),
            "seed {seed}: value of hash {h:#x} lost after relocations"
        );
    }
    // Remove half, reinsert new ones: nothing else moves out of reach.
    let keys: Vec<u64> = model.keys().copied().collect();
    for h in keys.iter().step_by(2) {
        let v = model.remove(h).unwrap();
        let slot = t.find::<()>(*h, |x| Ok(x == v)).unwrap().expect("present");
        t.remove(slot);
    }
    for _ in 0..keys.len() / 4 {
        let h = rng.next_u64();
        if model.contains_key(&h) {
            continue;
        }
        assert!(
            t.insert(h, 7),
            "seed {seed}: insert at load {:.2} failed",
            t.load()
        );
        model.insert(h, 7);
    }
    for (&h, &v) in &model {
        assert!(
            t.candidates(h).any(|(_, x)| x == v),
            "seed {seed}: lost after reinsertion"
        );
    }
    assert_eq!(t.len(), model.len());
    load
}

#[test]
fn reaches_ninety_percent_load() {
    for (seed, buckets) in [(1, 1 << 10), (2, 1 << 12), (3, 1 << 14), (4, 64)] {
        let load = fill_until_full(seed, buckets);
        assert!(
            load >= 0.90,
            "seed {seed}, {buckets} buckets: first failure at load {load:.3}"
        );
    }
}

#[test]
fn with_capacity_holds_that_many() {
    let mut rng = Rng::new(9);
    for n in [1usize, 10, 1000, 50_000] {
        let mut t = CuckooTable::with_capacity(n);
        for _ in 0..n {
            assert!(t.insert(rng.next_u64(), 1), "{n} entries did not fit");
        }
    }
}
