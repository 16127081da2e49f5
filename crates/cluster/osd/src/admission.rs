//! Admission control of block streams (docs/robustore.md "Admission control on OSDs"; RobuSTore
//! §5.4 left it to future work). An OSD admits a new PutBlocks or GetBlocks stream only if it can
//! serve it, beside the streams it serves, at no less than the floor each admitted stream must
//! keep: a stream of kind k needs the fraction `floor / rate_k` of the store's time, where
//! `rate_k` is the store's measured throughput for k (`blockio.rs`: bytes over busy time,
//! decayed), and the admitted streams' fractions add up to at most 1. The first stream is always
//! admitted (an OSD that serves nothing serves the next one, however slow its store); before
//! anything is measured every stream is admitted. Streams are admitted first come, first served;
//! a high-priority stream that does not fit preempts normal ones, the most recently admitted
//! first, if that makes room (the preempted stream ends with the refused status, so its client
//! moves to another OSD); otherwise it is refused like any other.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::api::StreamPriority;

/// `[osd] admission_floor_bytes_per_s` by default: 4 MiB/s per admitted stream.
pub use ecstack_rpc::config::DEFAULT_ADMISSION_FLOOR_BYTES_PER_S as DEFAULT_FLOOR_BYTES_PER_S;

/// How an OSD admits block streams (`[osd]` in `cluster.toml`, `ecstack osd --admission …`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdmissionConfig {
    /// Off: every stream is admitted (the store's bandwidth is shared by however many come).
    pub enabled: bool,
    /// The throughput each admitted stream must keep, bytes/s.
    pub floor_bytes_per_s: u64,
}

impl Default for AdmissionConfig {
    fn default() -> Self {
        AdmissionConfig {
            enabled: true,
            floor_bytes_per_s: DEFAULT_FLOOR_BYTES_PER_S,
        }
    }
}

/// What a stream does to the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamKind {
    Read,
    Write,
}

#[derive(Debug)]
struct Active {
    id: u64,
    kind: StreamKind,
    priority: StreamPriority,
    preempted: Arc<AtomicBool>,
}

/// The streams an OSD serves.
#[derive(Debug, Default)]
pub struct Admission {
    active: Mutex<Vec<Active>>,
    next: AtomicU64,
}

/// An admitted stream's place; dropping it frees the place.
#[derive(Debug)]
pub struct Ticket {
    admission: Arc<Admission>,
    id: u64,
    preempted: Arc<AtomicBool>,
}

impl Ticket {
    /// A high-priority stream took this one's place: end it with the refused status.
    pub fn is_preempted(&self) -> bool {
        self.preempted.load(Ordering::Relaxed)
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.admission.lock().retain(|a| a.id != self.id);
    }
}

/// Why a stream was not admitted, and the streams preempted to admit one.
#[derive(Debug, PartialEq)]
pub enum Verdict {
    Admitted { preempted: usize },
    Refused(String),
}

impl Admission {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Active>> {
        self.active.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Streams served now.
    pub fn streams(&self) -> usize {
        self.lock().len()
    }

    /// Admits a stream of `kind` or says why not; `rates` are the store's measured read and
    /// write throughput (bytes/s; `None`: not measured yet).
    pub fn admit(
        self: &Arc<Self>,
        config: AdmissionConfig,
        kind: StreamKind,
        priority: StreamPriority,
        rates: (Option<f64>, Option<f64>),
    ) -> (Option<Ticket>, Verdict) {
        let mut active = self.lock();
        let floor = config.floor_bytes_per_s.max(1) as f64;
        let need = |k: StreamKind| match k {
            StreamKind::Read => rates.0.map_or(0.0, |r| floor / r.max(1.0)),
            StreamKind::Write => rates.1.map_or(0.0, |r| floor / r.max(1.0)),
        };
        let load = |v: &[Active]| v.iter().map(|a| need(a.kind)).sum::<f64>();
        // A little slack so that float sums of exact fits still fit.
        let fits = |v: &[Active]| v.is_empty() || load(v) + need(kind) <= 1.0 + 1e-9;
        let mut preempted = 0;
        if config.enabled && !fits(&active) {
            // Room from normal streams, the most recently admitted first, for a high one.
            let mut victims = Vec::new();
            if priority == StreamPriority::High {
                let mut rest: Vec<&Active> = active.iter().collect();
                while let Some(i) = rest
                    .iter()
                    .rposition(|a| a.priority == StreamPriority::Normal)
                {
                    victims.push(rest.remove(i).id);
                    let left: f64 = rest.iter().map(|a| need(a.kind)).sum();
                    if rest.is_empty() || left + need(kind) <= 1.0 + 1e-9 {
                        break;
                    }
                }
                let left: f64 = active
                    .iter()
                    .filter(|a| !victims.contains(&a.id))
                    .map(|a| need(a.kind))
                    .sum();
                let room = active.len() == victims.len() || left + need(kind) <= 1.0 + 1e-9;
                if !room {
                    victims.clear();
                }
            }
            if victims.is_empty() {
                let (r, w) = (
                    active.iter().filter(|a| a.kind == StreamKind::Read).count(),
                    active
                        .iter()
                        .filter(|a| a.kind == StreamKind::Write)
                        .count(),
                );
                let mbps = |x: Option<f64>| {
                    x.map_or("unmeasured".to_string(), |x| format!("{:.1} MB/s", x / 1e6))
                };
                return (
                    None,
                    Verdict::Refused(format!(
                        "serves {r} read and {w} write block streams, each at no less than {:.1} MB/s of a store that reads {} and writes {}: no room for another{}",
                        floor / 1e6,
                        mbps(rates.0),
                        mbps(rates.1),
                        if priority == StreamPriority::High {
                            " (none of them is a normal-priority stream it could preempt)"
                        } else {
                            ""
                        }
                    )),
                );
            }
            for a in active.iter().filter(|a| victims.contains(&a.id)) {
                a.preempted.store(true, Ordering::Relaxed);
            }
            active.retain(|a| !victims.contains(&a.id));
            preempted = victims.len();
        }
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let flag = Arc::new(AtomicBool::new(false));
        active.push(Active {
            id,
            kind,
            priority,
            preempted: flag.clone(),
        });
        drop(active);
        (
            Some(Ticket {
                admission: self.clone(),
                id,
                preempted: flag,
            }),
            Verdict::Admitted { preempted },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MB: f64 = 1e6;

    fn config(floor: u64) -> AdmissionConfig {
        AdmissionConfig {
            enabled: true,
            floor_bytes_per_s: floor,
        }
    }

    #[test]
    fn streams_are_admitted_while_each_keeps_its_floor() {
        let a = Arc::new(Admission::default());
        let rates = (Some(100.0 * MB), Some(50.0 * MB));
        let c = config(20_000_000);
        let mut held = Vec::new();
        // Reads need 0.2 of the store each, writes 0.4.
        for _ in 0..3 {
            let (t, v) = a.admit(c, StreamKind::Read, StreamPriority::Normal, rates);
            assert_eq!(v, Verdict::Admitted { preempted: 0 });
            held.push(t.unwrap());
        }
        let (t, v) = a.admit(c, StreamKind::Write, StreamPriority::Normal, rates);
        assert!(matches!(v, Verdict::Admitted { .. }));
        held.push(t.unwrap());
        let (t, v) = a.admit(c, StreamKind::Read, StreamPriority::Normal, rates);
        assert!(t.is_none());
        let Verdict::Refused(why) = v else { panic!() };
        assert!(
            why.contains("serves 3 read and 1 write block streams"),
            "{why}"
        );
        // One ends: there is room again.
        held.remove(0);
        assert!(a
            .admit(c, StreamKind::Read, StreamPriority::Normal, rates)
            .0
            .is_some());
        // Off: everything comes in.
        let off = AdmissionConfig {
            enabled: false,
            ..c
        };
        assert!(a
            .admit(off, StreamKind::Write, StreamPriority::Normal, rates)
            .0
            .is_some());
    }

    #[test]
    fn the_first_stream_and_unmeasured_stores_always_get_in() {
        let a = Arc::new(Admission::default());
        let slow = (Some(1.0), Some(1.0));
        let t = a.admit(
            config(1 << 30),
            StreamKind::Read,
            StreamPriority::Normal,
            slow,
        );
        assert!(t.0.is_some());
        assert!(a
            .admit(
                config(1 << 30),
                StreamKind::Read,
                StreamPriority::Normal,
                slow
            )
            .0
            .is_none());
        let b = Arc::new(Admission::default());
        for _ in 0..50 {
            std::mem::forget(
                b.admit(
                    config(1 << 30),
                    StreamKind::Read,
                    StreamPriority::Normal,
                    (None, None),
                )
                .0,
            );
        }
        assert_eq!(b.streams(), 50);
    }

    #[test]
    fn a_high_stream_preempts_the_latest_normal_one() {
        let a = Arc::new(Admission::default());
        let rates = (Some(10.0 * MB), Some(10.0 * MB));
        let c = config(5_000_000);
        let first = a
            .admit(c, StreamKind::Read, StreamPriority::Normal, rates)
            .0
            .unwrap();
        let second = a
            .admit(c, StreamKind::Read, StreamPriority::Normal, rates)
            .0
            .unwrap();
        assert!(a
            .admit(c, StreamKind::Read, StreamPriority::Normal, rates)
            .0
            .is_none());
        let (high, v) = a.admit(c, StreamKind::Read, StreamPriority::High, rates);
        assert_eq!(v, Verdict::Admitted { preempted: 1 });
        assert!(!first.is_preempted() && second.is_preempted());
        // Only high streams left to take from: a second high stream is refused.
        let (high2, v) = a.admit(c, StreamKind::Read, StreamPriority::High, rates);
        assert_eq!(v, Verdict::Admitted { preempted: 1 });
        assert!(first.is_preempted());
        let (t, v) = a.admit(c, StreamKind::Read, StreamPriority::High, rates);
        assert!(t.is_none());
        assert!(matches!(v, Verdict::Refused(w) if w.contains("none of them is a normal")));
        drop((high, high2));
    }
}
