//! The mount's cache of extended attributes as the MDS last answered them, present or absent,
//! kept for the attribute timeout (as the kernel keeps attributes and directory entries).
//!
//! Why: the kernel asks for `security.capability` before every write through FUSE (FUSE clears
//! `SB_NOSEC`, so each write checks for privileges to remove), one GETXATTR round trip per write
//! request. Answered by the MDS, that put an MDS call (a TLS round trip and a database read) in
//! line with every 1 MiB of a sequential write; answered here, it costs the FUSE round trip only.
//! A name this mount sets or removes is forgotten at once; another mount's change is seen within
//! the timeout, or at the file's next open (an open forgets the file's names, as it asks the MDS
//! for the file's attributes).

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// At most this many names are kept (all files); past it, the expired go, then all.
const NAMES_MAX: usize = 65_536;

/// A name's value as the MDS answered it: `None` for absent (ENODATA).
pub(crate) type Answer = Option<Vec<u8>>;

/// See the module documentation.
#[derive(Debug)]
pub(crate) struct XattrCache {
    ttl: Duration,
    /// Inode → name → (answer, when it was asked for).
    files: HashMap<u64, HashMap<Vec<u8>, (Answer, Instant)>>,
    names: usize,
    /// Bumped by every forget: an answer asked for before a forget is not kept (it may predate
    /// the change that made the forget).
    generation: u64,
}

impl XattrCache {
    /// Answers are kept for `ttl` (zero: none is kept).
    pub fn new(ttl: Duration) -> XattrCache {
        XattrCache {
            ttl,
            files: HashMap::new(),
            names: 0,
            generation: 0,
        }
    }

    /// The answer for `ino`'s `name` if one younger than the timeout is kept.
    pub fn get(&self, ino: u64, name: &[u8], now: Instant) -> Option<&Answer> {
        let (answer, at) = self.files.get(&ino)?.get(name)?;
        (now.saturating_duration_since(*at) < self.ttl).then_some(answer)
    }

    /// The generation to give [`XattrCache::put`] for an answer asked for now.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Keeps `answer` for `ino`'s `name`, asked for at `asked` in `generation`, unless a forget
    /// came between.
    pub fn put(&mut self, ino: u64, name: &[u8], answer: Answer, generation: u64, asked: Instant) {
        if generation != self.generation || self.ttl.is_zero() {
            return;
        }
        if self.names >= NAMES_MAX {
            self.drop_expired(Instant::now());
            if self.names >= NAMES_MAX {
                self.files.clear();
                self.names = 0;
            }
        }
        let names = self.files.entry(ino).or_default();
        if names.insert(name.to_vec(), (answer, asked)).is_none() {
            self.names += 1;
        }
    }

    /// Forgets every name of `ino` (a change of its attributes here, its open, its forget).
    pub fn forget(&mut self, ino: u64) {
        self.generation += 1;
        if let Some(names) = self.files.remove(&ino) {
            self.names -= names.len();
        }
    }

    fn drop_expired(&mut self, now: Instant) {
        let ttl = self.ttl;
        let mut dropped = 0;
        self.files.retain(|_, names| {
            let before = names.len();
            names.retain(|_, (_, at)| now.saturating_duration_since(*at) < ttl);
            dropped += before - names.len();
            !names.is_empty()
        });
        self.names -= dropped;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_is_kept_for_the_timeout_present_or_absent() {
        let t0 = Instant::now();
        let mut c = XattrCache::new(Duration::from_secs(1));
        let g = c.generation();
        c.put(7, b"security.capability", None, g, t0);
        c.put(7, b"user.a", Some(b"v".to_vec()), g, t0);
        assert_eq!(c.get(7, b"security.capability", t0), Some(&None));
        assert_eq!(c.get(7, b"user.a", t0), Some(&Some(b"v".to_vec())));
        assert_eq!(c.get(7, b"user.b", t0), None, "never asked");
        assert_eq!(c.get(8, b"user.a", t0), None, "another file");
        let later = t0 + Duration::from_millis(1000);
        assert_eq!(c.get(7, b"user.a", later), None, "expired");
    }

    #[test]
    fn a_forget_drops_the_file_and_refuses_answers_asked_before_it() {
        let t0 = Instant::now();
        let mut c = XattrCache::new(Duration::from_secs(1));
        let g = c.generation();
        c.put(7, b"user.a", Some(b"old".to_vec()), g, t0);
        c.put(9, b"user.a", Some(b"other".to_vec()), g, t0);
        // A read of the old value is under way when a setxattr here forgets the file.
        let asked = c.generation();
        c.forget(7);
        assert_eq!(c.get(7, b"user.a", t0), None);
        c.put(7, b"user.a", Some(b"old".to_vec()), asked, t0);
        assert_eq!(c.get(7, b"user.a", t0), None, "a stale answer is not kept");
        assert_eq!(c.names, 1);
        c.put(7, b"user.a", Some(b"new".to_vec()), c.generation(), t0);
        assert_eq!(c.get(7, b"user.a", t0), Some(&Some(b"new".to_vec())));
    }

    #[test]
    fn a_zero_timeout_keeps_nothing_and_the_count_stays_bounded() {
        let t0 = Instant::now();
        let mut c = XattrCache::new(Duration::ZERO);
        c.put(1, b"user.a", None, c.generation(), t0);
        assert_eq!(c.get(1, b"user.a", t0), None);
        assert_eq!(c.names, 0);

        let mut c = XattrCache::new(Duration::from_secs(60));
        for i in 0..(NAMES_MAX as u64 + 10) {
            c.put(i, b"security.capability", None, c.generation(), t0);
        }
        assert!(c.names <= NAMES_MAX);
        assert_eq!(
            c.names,
            c.files.values().map(HashMap::len).sum::<usize>(),
            "the count matches the names kept"
        );
    }
}
