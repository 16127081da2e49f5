//! Deterministic simulation of an array: one seed chooses a scheme (md, pl, eplog), a small
//! geometry and a run of steps — writes, reads, flushes, parity commits, idle commits, discards,
//! fail-stop device failures, latent sector errors, power cuts (whole machine, and scheduled ones
//! that hit the metadata volume in the middle of an operation), clean reopenings and rebuilds onto
//! replacement devices — and checks the array against a byte-vector model after every step:
//!
//! * every acknowledged write reads back exactly until a power cut;
//! * after a power cut, every byte that was durable (written before the last successful flush,
//!   parity commit or close, or dropped by a discard) reads back exactly, and every byte written since
//!   reads as the data of one of the writes that covered it or as its durable value: the old or the
//!   new data of a write, never anything else;
//! * at the end, with every failed device rebuilt and one more device failed, every byte decodes
//!   from the others (parity agrees with the data).
//!
//! Everything nondeterministic is injected: the devices are [`Faulty`] over [`MemDevice`] with
//! power-cut tracking on (unflushed writes survive, tear at 512-byte sectors or vanish, in any
//! order), their faults come from the seed, the array's uuid comes from the seed
//! ([`OpenOptions::uuid`]), time is a manual [`Clock`] that moves only when a step says so, and
//! device I/O runs on the calling thread (no parallel device I/O, no rebuild prefetch thread). Two
//! runs of one seed therefore write identical bytes ([`SimReport::digest`]), and a failing seed
//! replays exactly: `ecstack sim array --seed N`, or `ECSTACK_SEED=N cargo test -p ecstack-array
//! --test sim`.
//!
//! The simulator keeps within what the array promises: at most m devices are impaired (failed,
//! fail-stopped or holding latent sector errors) at once, and faults are only injected into main
//! and log devices; the metadata volume only loses power.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use ecstack_base::Rng;
use ecstack_device::{
    BlockDevice, FaultConfig, Faulty, MemDevice, Outcome, PowerCutPolicy, PowerCutReport,
};

use crate::format::{decode_label, DEVICE_HEADER, LABEL_SIZE};
use crate::{Array, ArrayConfig, ArrayDevices, ArrayError, Clock, OpenOptions, SchemeKind};

type Dev = Arc<Faulty<MemDevice>>;

/// Steps of one seed by default.
pub const DEFAULT_STEPS: usize = 120;

/// Idle time after which [`Array::commit_if_idle`] commits in the simulation.
const IDLE: Duration = Duration::from_secs(1);

/// How to rerun a seed, for failure messages.
pub fn replay_hint(seed: u64) -> String {
    format!(
        "replay: ECSTACK_SEED={seed} cargo test -p ecstack-array --test sim, or ecstack sim array --seed {seed}"
    )
}

/// A seed that broke the array (or the simulator): everything needed to rerun it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SimFailure {
    pub seed: u64,
    pub step: usize,
    /// The array under test, e.g. "eplog (4+2) chunk 1024".
    pub array: String,
    pub what: String,
}

impl std::fmt::Display for SimFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "seed {} step {} ({}): {}; {}",
            self.seed,
            self.step,
            self.array,
            self.what,
            replay_hint(self.seed)
        )
    }
}

impl std::error::Error for SimFailure {}

/// The paths one seed (or a sweep) reached, and how often.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Reached {
    pub writes: u64,
    pub reads: u64,
    pub syncs: u64,
    /// Parity commits that committed at least one stripe (pl, eplog).
    pub commits: u64,
    pub idle_commits: u64,
    /// Discards that dropped at least one stripe.
    pub discards: u64,
    pub reopens: u64,
    pub power_cuts: u64,
    /// Power cuts that hit the metadata volume in the middle of an operation.
    pub mid_op_cuts: u64,
    /// Unflushed device writes a power cut tore (some sectors persisted).
    pub torn_writes: u64,
    /// Unflushed device writes a power cut dropped.
    pub dropped_writes: u64,
    pub device_failures: u64,
    pub latent_errors: u64,
    pub rebuilds: u64,
    /// Reads (checks included) served while at least one device was failed.
    pub degraded_reads: u64,
    /// Bytes compared with the model.
    pub bytes_checked: u64,
    /// Power cuts (whole machine or mid-operation) while the array had a failed device.
    pub degraded_power_cuts: u64,
    /// md/pl power cuts preceded by a flush because a device was impaired without the array
    /// knowing it yet, outside strict mode (see [`SimOptions::strict`]).
    pub unnoticed_cut_syncs: u64,
    /// md/pl fail-stops and latent errors not injected while a scheduled mid-operation cut was
    /// pending, outside strict mode.
    pub faults_deferred: u64,
}

impl Reached {
    pub fn add(&mut self, o: &Reached) {
        self.writes += o.writes;
        self.reads += o.reads;
        self.syncs += o.syncs;
        self.commits += o.commits;
        self.idle_commits += o.idle_commits;
        self.discards += o.discards;
        self.reopens += o.reopens;
        self.power_cuts += o.power_cuts;
        self.mid_op_cuts += o.mid_op_cuts;
        self.torn_writes += o.torn_writes;
        self.dropped_writes += o.dropped_writes;
        self.device_failures += o.device_failures;
        self.latent_errors += o.latent_errors;
        self.rebuilds += o.rebuilds;
        self.degraded_reads += o.degraded_reads;
        self.bytes_checked += o.bytes_checked;
        self.degraded_power_cuts += o.degraded_power_cuts;
        self.unnoticed_cut_syncs += o.unnoticed_cut_syncs;
        self.faults_deferred += o.faults_deferred;
    }

    /// The paths a sweep must reach to mean anything, with their counts.
    pub fn required(&self) -> [(&'static str, u64); 11] {
        [
            ("parity commit", self.commits),
            ("idle commit", self.idle_commits),
            ("discard", self.discards),
            ("power cut", self.power_cuts),
            ("power cut mid-operation", self.mid_op_cuts),
            ("power cut while degraded", self.degraded_power_cuts),
            ("torn write", self.torn_writes),
            ("device failure", self.device_failures),
            ("latent sector error", self.latent_errors),
            ("rebuild", self.rebuilds),
            ("degraded read", self.degraded_reads),
        ]
    }

    /// The required paths never reached.
    pub fn missing(&self) -> Vec<&'static str> {
        self.required()
            .into_iter()
            .filter(|(_, n)| *n == 0)
            .map(|(w, _)| w)
            .collect()
    }
}

/// What one seed did.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SimReport {
    pub seed: u64,
    pub array: String,
    pub steps: usize,
    pub reached: Reached,
    /// A digest of every device's content at the end: equal for two runs of one seed.
    pub digest: u64,
}

/// The outcome of a sweep over seeds `first..first + count`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SweepReport {
    pub first: u64,
    pub seeds: u64,
    pub steps: usize,
    pub reached: Reached,
    /// Seeds per scheme (md, pl, eplog).
    pub per_scheme: [u64; 3],
}

/// How to simulate.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct SimOptions {
    /// Steps per seed.
    pub steps: usize,
    /// Also cut the power of an md or pl array with in-place writes unflushed while a device is
    /// impaired without the array knowing it yet (a latent sector error, or a fail-stop no I/O
    /// has met). Off by default, because md and pl survive it only with the update journal
    /// ([`SimOptions::journal`]): the write-intent resync cannot recompute a stripe whose device
    /// is lost, and by default the journal only protects updates made while the array knew the
    /// device had failed (docs/array.md, "Write hole"). Outside strict mode the
    /// simulator flushes such an array before cutting its power, and injects no silent fault
    /// into it while a scheduled mid-operation cut is pending; it counts both
    /// ([`Reached::unnoticed_cut_syncs`], [`Reached::faults_deferred`]). Power cuts of a degraded array in the middle of its
    /// work (writes, parity commits, rebuilds, opening) are simulated in both modes.
    pub strict: bool,
    /// md/pl arrays journal every in-place update ([`OpenOptions::journal_updates`]), which
    /// closes the hole strict mode adds; off, strict mode shows it (docs/array.md, "Write hole").
    pub journal: bool,
    /// Print every step to stderr.
    pub trace: bool,
}

impl Default for SimOptions {
    fn default() -> Self {
        SimOptions {
            steps: DEFAULT_STEPS,
            strict: false,
            journal: false,
            trace: false,
        }
    }
}

/// Run one seed.
pub fn run_seed(seed: u64, opts: &SimOptions) -> std::result::Result<SimReport, SimFailure> {
    let mut sim = Sim::new(seed, opts);
    match sim.run() {
        Ok(()) => Ok(SimReport {
            seed,
            array: sim.name.clone(),
            steps: opts.steps,
            reached: sim.reached,
            digest: sim.digest(),
        }),
        Err(what) => Err(SimFailure {
            seed,
            step: sim.step,
            array: sim.name.clone(),
            what,
        }),
    }
}

/// Run seeds `first..first + count`, stopping at the first failure; `progress` is called after
/// every seed.
pub fn sweep(
    first: u64,
    count: u64,
    opts: &SimOptions,
    mut progress: impl FnMut(&SimReport),
) -> std::result::Result<SweepReport, SimFailure> {
    let mut out = SweepReport {
        first,
        seeds: 0,
        steps: opts.steps,
        reached: Reached::default(),
        per_scheme: [0; 3],
    };
    for seed in first..first.saturating_add(count) {
        let r = run_seed(seed, opts)?;
        out.seeds += 1;
        out.reached.add(&r.reached);
        let i = SchemeKind::ALL
            .iter()
            .position(|s| r.array.starts_with(s.name()))
            .unwrap_or(0);
        out.per_scheme[i] += 1;
        progress(&r);
    }
    Ok(out)
}

/// A write since the last durability point (acknowledged or cut short by a power cut).
struct Unsynced {
    off: usize,
    data: Vec<u8>,
}

type Step = std::result::Result<(), String>;

struct Sim {
    rng: Rng,
    steps: usize,
    strict: bool,
    trace: bool,
    step: usize,
    name: String,
    cfg: ArrayConfig,
    opts: OpenOptions,
    clock: Clock,
    buffer: usize,
    main: Vec<Dev>,
    log: Vec<Dev>,
    meta: Dev,
    main_bytes: u64,
    log_bytes: u64,
    /// Seed of the last replacement device.
    next_dev_seed: u64,
    array: Option<Array>,
    /// What reads must return: every acknowledged write applied.
    model: Vec<u8>,
    /// What survives a power cut: the model at the last durability point.
    durable: Vec<u8>,
    unsynced: Vec<Unsynced>,
    /// Devices holding latent sector errors not yet replaced.
    latent: BTreeSet<usize>,
    reached: Reached,
}

fn crashy(seed: u64, size: u64, reorder: bool, cut_at: Option<u64>) -> Dev {
    let cfg = FaultConfig {
        seed,
        power_cut: PowerCutPolicy {
            survive_prob: 0.5,
            torn_prob: 0.5,
            reorder,
            sector: 512,
        },
        power_cut_at_op: cut_at,
        track_unflushed: true,
        ..FaultConfig::default()
    };
    Arc::new(Faulty::new(
        MemDevice::new(size).expect("small memory device"),
        cfg,
    ))
}

impl Sim {
    fn new(seed: u64, sim: &SimOptions) -> Sim {
        let mut rng = Rng::new(seed);
        let scheme = SchemeKind::ALL[rng.below(3) as usize];
        let m = 1 + rng.below(3) as usize;
        let k = 2 + rng.below(if m == 3 { 3 } else { 4 }) as usize;
        let chunk: u64 = [512, 1024, 2048][rng.below(3) as usize];
        let slots = 24 + rng.below(24);
        let main_bytes = DEVICE_HEADER.max(chunk) + slots * chunk;
        let log_bytes = DEVICE_HEADER.max(chunk) + (8 + rng.below(16)) * chunk;
        let cfg = ArrayConfig {
            chunk_size: chunk as u32,
            reserve: 0.25 + rng.below(20) as f64 / 100.0,
            ..ArrayConfig::with_geometry(scheme, k, m)
        };
        let reorder = rng.chance(0.7);
        let base = seed.wrapping_mul(1000);
        let main = (0..k + m)
            .map(|i| crashy(base + i as u64, main_bytes, reorder, None))
            .collect();
        let nlog = if scheme.uses_log() { m } else { 0 };
        let log = (0..nlog)
            .map(|i| crashy(base + 100 + i as u64, log_bytes, reorder, None))
            .collect();
        // Half the seeds cut the metadata volume's power in the middle of some operation.
        let cut_at = rng.chance(0.5).then(|| 8 + rng.below(300));
        let meta = crashy(base + 999, 2 << 20, reorder, cut_at);
        let clock = Clock::manual();
        let opts = OpenOptions {
            parallel_io: false,
            rebuild_prefetch: false,
            rebuild_batch: 1 + rng.below(8) as usize,
            clock: clock.clone(),
            uuid: Some(rng.next_u64()),
            journal_updates: sim.journal,
            ..OpenOptions::default()
        };
        let buffer = if scheme == SchemeKind::Eplog && rng.chance(0.3) {
            2 + rng.below(6) as usize
        } else {
            0
        };
        let name = format!(
            "{scheme} ({k}+{m}) chunk {chunk}{}",
            if buffer > 0 {
                format!(" device buffer {buffer}")
            } else {
                String::new()
            }
        );
        Sim {
            rng,
            steps: sim.steps,
            strict: sim.strict,
            trace: sim.trace,
            step: 0,
            name,
            cfg,
            opts,
            clock,
            buffer,
            main,
            log,
            meta,
            main_bytes,
            log_bytes,
            next_dev_seed: base + 200,
            array: None,
            model: Vec::new(),
            durable: Vec::new(),
            unsynced: Vec::new(),
            latent: BTreeSet::new(),
            reached: Reached::default(),
        }
    }

    fn devices(&self) -> ArrayDevices {
        ArrayDevices::from_handles(&self.main, &self.log, &self.meta)
    }

    fn ndev(&self) -> usize {
        self.main.len() + self.log.len()
    }

    fn dev(&self, i: usize) -> &Dev {
        if i < self.main.len() {
            &self.main[i]
        } else {
            &self.log[i - self.main.len()]
        }
    }

    fn all(&self) -> Vec<Dev> {
        self.main
            .iter()
            .chain(&self.log)
            .chain(std::iter::once(&self.meta))
            .cloned()
            .collect()
    }

    fn a(&self) -> &Array {
        self.array.as_ref().expect("array open")
    }

    fn powered_off(&self) -> bool {
        self.all().iter().any(|d| d.is_powered_off())
    }

    /// Devices the array cannot count on: failed in its view, fail-stopped, or with latent errors.
    fn impaired(&self) -> BTreeSet<usize> {
        let mut s: BTreeSet<usize> = self.a().failed_devices().into_iter().collect();
        s.extend(self.latent.iter().copied());
        s.extend((0..self.ndev()).filter(|&i| self.dev(i).is_failed()));
        s
    }

    fn note(&self, what: std::fmt::Arguments) {
        if self.trace {
            eprintln!("step {}: {what}", self.step);
        }
    }

    fn durable_point(&mut self) {
        self.durable.copy_from_slice(&self.model);
        self.unsynced.clear();
    }

    fn run(&mut self) -> Step {
        let a = loop {
            match Array::create_with(&self.cfg, self.devices(), &self.opts) {
                Ok(a) => break a,
                // The scheduled cut hit the creation: power-cycle and create again.
                Err(e) if self.powered_off() => {
                    self.note(format_args!("create cut short: {e}"));
                    self.reached.mid_op_cuts += 1;
                    for d in self.all() {
                        d.power_cut().map_err(|e| format!("power cut: {e}"))?;
                        d.power_on();
                    }
                }
                Err(e) => return Err(format!("create: {e}")),
            }
        };
        a.set_device_buffer(self.buffer)
            .map_err(|e| format!("device buffer: {e}"))?;
        let cap = a.size() as usize;
        self.array = Some(a);
        self.model = vec![0u8; cap];
        self.durable = vec![0u8; cap];
        for step in 0..self.steps {
            self.step = step;
            self.one_step()?;
            if self.powered_off() {
                // A scheduled cut hit the metadata volume during the step: the machine is down.
                self.reached.mid_op_cuts += 1;
                self.power_cut()?;
            }
        }
        self.step = self.steps;
        self.finish()
    }

    /// An operation failed: fine if the machine lost power during it (the step's crash handling
    /// follows), a bug otherwise.
    fn failed(&self, what: &str, e: ArrayError) -> Step {
        if self.powered_off() {
            Ok(())
        } else {
            Err(format!("{what}: {e}"))
        }
    }

    fn one_step(&mut self) -> Step {
        let r = self.rng.below(100);
        match r {
            0..=39 => self.write(),
            40..=54 => self.read(),
            55..=61 => self.sync(false),
            62..=66 => self.sync(true),
            67..=69 => self.idle(),
            70..=72 => self.discard(),
            73..=78 => {
                if self.unnoticed_hole() {
                    // Outside the hole the update journal closes (see strict).
                    self.reached.unnoticed_cut_syncs += 1;
                    self.sync(false)?;
                    if self.powered_off() {
                        return Ok(());
                    }
                }
                self.power_cut()
            }
            79..=80 => self.reopen(),
            81..=86 => self.fail(),
            87..=89 => self.latent_error(),
            _ => self.rebuild(),
        }
    }

    /// A random extent: chunk-aligned chunks, whole stripes, or any bytes.
    fn extent(&mut self) -> (usize, usize) {
        let cap = self.model.len() as u64;
        let g = self.a().geometry();
        let (c, sb, k) = (g.chunk, g.stripe_bytes(), g.k as u64);
        let (off, len) = match self.rng.below(4) {
            0 => {
                let len = (c * (1 + self.rng.below(2 * k))).min(cap);
                (self.rng.below((cap - len) / c + 1) * c, len)
            }
            1 => {
                let len = (sb * (1 + self.rng.below(3))).min(cap);
                (self.rng.below((cap - len) / sb + 1) * sb, len)
            }
            _ => {
                let len = 1 + self.rng.below((2 * sb).min(cap));
                (self.rng.below(cap - len + 1), len)
            }
        };
        (off as usize, len as usize)
    }

    fn write(&mut self) -> Step {
        let (off, len) = self.extent();
        let mut data = vec![0u8; len];
        self.rng.fill(&mut data);
        // Unflushed from the moment it is issued: a power cut during the write may keep any of it.
        self.unsynced.push(Unsynced {
            off,
            data: data.clone(),
        });
        self.note(format_args!("write {off}+{len}"));
        match self.a().write(&data, off as u64) {
            Ok(()) => {
                self.reached.writes += 1;
                self.model[off..off + len].copy_from_slice(&data);
                Ok(())
            }
            Err(e) => self.failed(&format!("write {off}+{len}"), e),
        }
    }

    /// Read `[off, off + len)` and compare with the model; Ok(false) if the machine lost power.
    fn check(&mut self, off: usize, len: usize, what: &str) -> std::result::Result<bool, String> {
        let degraded = !self.a().failed_devices().is_empty();
        let mut buf = vec![0u8; len];
        if let Err(e) = self.a().read(&mut buf, off as u64) {
            self.failed(&format!("{what}: read {off}+{len}"), e)?;
            return Ok(false);
        }
        if degraded || !self.a().failed_devices().is_empty() {
            self.reached.degraded_reads += 1;
        }
        // The simulation flips no bits: a chunk that fails its checksum is a checksum the array
        // got wrong (one not made durable with its chunk, or not forgotten after a crash).
        let crc = self.a().status().checksums;
        if crc.checksum_errors > 0 {
            return Err(format!(
                "{what}: {} chunks failed their checksum, but no bit was flipped ({})",
                crc.checksum_errors,
                self.where_is(off)
            ));
        }
        self.reached.bytes_checked += len as u64;
        if let Some(i) = buf
            .iter()
            .zip(&self.model[off..off + len])
            .position(|(x, y)| x != y)
        {
            let at = off + i;
            return Err(format!(
                "{what}: byte {at} (read {off}+{len}) is {:#04x}, the model has {:#04x} ({})",
                buf[i],
                self.model[at],
                self.where_is(at)
            ));
        }
        Ok(true)
    }

    /// Where logical byte `at` lives, for failure messages.
    fn where_is(&self, at: usize) -> String {
        let g = self.a().geometry();
        let ci = at as u64 / g.chunk;
        let (s, p) = (ci / g.k as u64, ci % g.k as u64);
        format!(
            "stripe {s}, data chunk {p} on device {}, failed devices {:?}",
            g.dev_of(s, p as usize),
            self.a().failed_devices()
        )
    }

    fn read(&mut self) -> Step {
        let (off, len) = self.extent();
        self.reached.reads += 1;
        self.check(off, len, "read").map(|_| ())
    }

    fn sync(&mut self, commit: bool) -> Step {
        self.note(format_args!("{}", if commit { "commit" } else { "sync" }));
        let r = if commit {
            self.a().commit().map(|r| r.stripes)
        } else {
            self.a().sync().map(|()| 0)
        };
        match r {
            Ok(stripes) => {
                if commit && stripes > 0 {
                    self.reached.commits += 1;
                }
                self.reached.syncs += 1;
                self.durable_point();
                Ok(())
            }
            Err(e) => self.failed(if commit { "parity commit" } else { "sync" }, e),
        }
    }

    /// Time passes; the idle committer's check runs.
    fn idle(&mut self) -> Step {
        let ms = self.rng.below(2000);
        self.clock.advance(Duration::from_millis(ms));
        self.note(format_args!("idle {ms} ms"));
        match self.a().commit_if_idle(IDLE) {
            Ok(true) => {
                self.reached.idle_commits += 1;
                self.durable_point();
                Ok(())
            }
            Ok(false) => Ok(()),
            Err(e) => self.failed("idle commit", e),
        }
    }

    /// Discard a range: it reads as zeros from then on. Whole stripes are dropped durably, the
    /// rest is zeroed by ordinary writes, so until the next flush the range may come back after a
    /// power cut as its old data or zeros (like an unflushed write of zeros).
    fn discard(&mut self) -> Step {
        let (off, len) = self.extent();
        self.unsynced.push(Unsynced {
            off,
            data: vec![0u8; len],
        });
        let r = match self.a().discard(off as u64, len as u64) {
            Ok(r) => r,
            Err(e) => {
                self.note(format_args!("discard {off}+{len} failed: {e}"));
                return self.failed(&format!("discard {off}+{len}"), e);
            }
        };
        self.note(format_args!(
            "discard {off}+{len}: {} stripes dropped, {} bytes zeroed",
            r.stripes, r.zeroed_bytes
        ));
        if r.stripes > 0 {
            self.reached.discards += 1;
        }
        self.model[off..off + len].fill(0);
        self.check(off, len, "discarded range").map(|_| ())
    }

    /// Every device loses power at once; the machine comes back and the array is opened again.
    fn power_cut(&mut self) -> Step {
        self.note(format_args!(
            "power cut, {} unflushed writes, device writes unflushed {:?}",
            self.unsynced.len(),
            self.all().iter().map(|d| d.unflushed()).collect::<Vec<_>>()
        ));
        if self
            .array
            .take()
            .is_some_and(|a| !a.failed_devices().is_empty())
        {
            self.reached.degraded_power_cuts += 1;
        }
        self.reached.power_cuts += 1;
        let mut tries = 0;
        loop {
            for d in self.all() {
                let rep: PowerCutReport = d.power_cut().map_err(|e| format!("power cut: {e}"))?;
                self.reached.torn_writes += rep.count(Outcome::Torn) as u64;
                self.reached.dropped_writes += rep.count(Outcome::Dropped) as u64;
                if !rep.writes.is_empty() {
                    self.note(format_args!(
                        "  {}: {:?}",
                        d.name(),
                        rep.writes
                            .iter()
                            .map(|w| (w.offset, w.len, w.outcome))
                            .collect::<Vec<_>>()
                    ));
                }
            }
            for d in self.all() {
                d.power_on();
            }
            match Array::open_with(self.devices(), &self.opts) {
                Ok(a) => {
                    self.array = Some(a);
                    break;
                }
                // The scheduled cut hit the reopening itself: power-cycle again.
                Err(e) if self.powered_off() && tries < 3 => {
                    self.note(format_args!("open cut short: {e}"));
                    tries += 1;
                    self.reached.mid_op_cuts += 1;
                }
                Err(e) => return Err(format!("open after a power cut: {e}")),
            }
        }
        self.a()
            .set_device_buffer(self.buffer)
            .map_err(|e| format!("device buffer: {e}"))?;
        let cap = self.model.len();
        let mut back = vec![0u8; cap];
        let degraded = !self.a().failed_devices().is_empty();
        if let Err(e) = self.a().read(&mut back, 0) {
            if self.powered_off() {
                // The scheduled cut hit the metadata sync of a failure this read found.
                self.note(format_args!("read after a power cut cut short: {e}"));
                self.reached.mid_op_cuts += 1;
                return self.power_cut();
            }
            return Err(format!("read after a power cut: {e}"));
        }
        if degraded {
            self.reached.degraded_reads += 1;
        }
        self.reached.bytes_checked += cap as u64;
        for (i, &got) in back.iter().enumerate() {
            if got == self.durable[i] {
                continue;
            }
            let covers = |w: &&Unsynced| (w.off..w.off + w.data.len()).contains(&i);
            if self
                .unsynced
                .iter()
                .filter(covers)
                .any(|w| w.data[i - w.off] == got)
            {
                continue;
            }

            let why = if self.unsynced.iter().any(|w| covers(&w)) {
                format!(
                    "neither its durable value {:#04x} nor the data of a write since",
                    self.durable[i]
                )
            } else {
                format!(
                    "it was durable as {:#04x} and not written since",
                    self.durable[i]
                )
            };
            return Err(format!(
                "after a power cut byte {i} reads {:#04x}: {why} ({})",
                got,
                self.where_is(i)
            ));
        }
        // Unflushed bytes may hold old or new data: adopt what the array now returns. It is on
        // the media, so it is durable too.
        self.model.copy_from_slice(&back);
        self.durable_point();
        Ok(())
    }

    /// Clean shutdown and reopening.
    fn reopen(&mut self) -> Step {
        self.note(format_args!("close and reopen"));
        if let Err(e) = self.a().close() {
            return self.failed("close", e);
        }
        self.durable_point();
        self.array = None;
        let a = match Array::open_with(self.devices(), &self.opts) {
            Ok(a) => a,
            // The machine lost power while opening: the step's crash handling follows.
            Err(_) if self.powered_off() => return Ok(()),
            Err(e) => return Err(format!("open after close: {e}")),
        };
        a.set_device_buffer(self.buffer)
            .map_err(|e| format!("device buffer: {e}"))?;
        self.array = Some(a);
        self.reached.reopens += 1;
        let cap = self.model.len();
        self.check(0, cap, "after reopening").map(|_| ())
    }

    /// md or pl outside strict mode with a device impaired that the array has not noticed.
    fn unnoticed_hole(&self) -> bool {
        if self.strict || self.cfg.scheme == SchemeKind::Eplog {
            return false;
        }
        let known = self.a().failed_devices();
        self.impaired().iter().any(|d| !known.contains(d))
    }

    /// A healthy device (main or log) that may fail without exceeding m impaired devices.
    /// `silent`: a fault the array notices only when it next meets it; outside strict mode md and
    /// pl get none while a scheduled mid-operation cut is pending (it could land before the array
    /// has noticed the fault and synced, the hole [`SimOptions::strict`] describes).
    fn victim(&mut self, silent: bool) -> Option<usize> {
        let meta_cut = self.meta.config().power_cut_at_op;
        if silent
            && !self.strict
            && self.cfg.scheme != SchemeKind::Eplog
            && meta_cut.is_some_and(|n| self.meta.counts().ops <= n)
        {
            self.reached.faults_deferred += 1;
            return None;
        }
        let bad = self.impaired();
        if bad.len() >= self.cfg.m {
            return None;
        }
        let ok: Vec<usize> = (0..self.ndev()).filter(|i| !bad.contains(i)).collect();
        Some(ok[self.rng.below(ok.len() as u64) as usize])
    }

    /// Fail-stop a device, announced (admin) or discovered by the array on its next I/O.
    fn fail(&mut self) -> Step {
        let announced = self.rng.chance(0.5);
        let Some(i) = self.victim(!announced) else {
            return Ok(());
        };
        self.reached.device_failures += 1;
        self.note(format_args!(
            "fail device {i} ({})",
            if announced { "announced" } else { "fail-stop" }
        ));
        if announced {
            if let Err(e) = self.a().fail_device(i) {
                return self.failed(&format!("fail device {i}"), e);
            }
        } else {
            self.dev(i).fail_now();
        }
        Ok(())
    }

    /// Latent sector errors somewhere in a device's chunk area.
    fn latent_error(&mut self) -> Step {
        let Some(i) = self.victim(true) else {
            return Ok(());
        };
        let g = self.a().geometry().clone();
        let slots = if i < g.n { g.slots } else { g.log_slots };
        let slot = self.rng.below(slots);
        let len = 512 * (1 + self.rng.below(2 * g.chunk / 512));
        self.note(format_args!(
            "latent error on device {i} slot {slot} {len} bytes"
        ));
        self.dev(i).add_latent_error(g.off(slot), len);
        self.latent.insert(i);
        self.reached.latent_errors += 1;
        Ok(())
    }

    /// Rebuild one impaired device onto a new one, then check everything.
    fn rebuild(&mut self) -> Step {
        let bad: Vec<usize> = self.impaired().into_iter().collect();
        if bad.is_empty() {
            return Ok(());
        }
        let i = bad[self.rng.below(bad.len() as u64) as usize];
        let size = if i < self.main.len() {
            self.main_bytes
        } else {
            self.log_bytes
        };
        self.next_dev_seed += 1;
        let reorder = self.meta.config().power_cut.reorder;
        let new = crashy(self.next_dev_seed, size, reorder, None);
        self.note(format_args!("rebuild device {i}"));
        let r = self
            .a()
            .rebuild_device(i, Arc::clone(&new) as Arc<dyn BlockDevice>);
        match r {
            Ok(_) => {
                self.install(i, new);
                self.reached.rebuilds += 1;
                let cap = self.model.len();
                self.check(0, cap, &format!("after rebuilding device {i}"))
                    .map(|_| ())
            }
            Err(e) => {
                // Cut short by a power cut: the operator has swapped the device if the rebuild
                // got as far as labelling it (the array may have recorded the replacement).
                if self.powered_off() {
                    let mut label = vec![0u8; LABEL_SIZE];
                    if new.inner().read_at(&mut label, 0).is_ok()
                        && matches!(decode_label(&label), Ok(Some(_)))
                    {
                        self.install(i, new);
                    }
                }
                self.failed(&format!("rebuild device {i}"), e)
            }
        }
    }

    fn install(&mut self, i: usize, d: Dev) {
        if i < self.main.len() {
            self.main[i] = d;
        } else {
            let n = self.main.len();
            self.log[i - n] = d;
        }
        self.latent.remove(&i);
    }

    /// Rebuild everything, sync, check; then fail one more device and check every byte decodes.
    fn finish(&mut self) -> Step {
        for _ in 0..2 * self.ndev() {
            if self.impaired().is_empty() {
                break;
            }
            self.rebuild()?;
            if self.powered_off() {
                self.power_cut()?;
            }
        }
        if !self.impaired().is_empty() {
            return Err(format!(
                "devices {:?} still impaired after rebuilding",
                self.impaired()
            ));
        }
        self.sync(false)?;
        if self.powered_off() {
            self.power_cut()?;
        }
        let cap = self.model.len();
        if !self.check(0, cap, "at the end")? {
            self.power_cut()?;
        }
        let i = self.rng.below(self.ndev() as u64) as usize;
        self.dev(i).fail_now();
        self.check(0, cap, &format!("at the end with device {i} failed"))
            .map(|_| ())
    }

    /// A digest of every device's content (main, log, metadata volume), FNV-1a over 64-bit words.
    fn digest(&self) -> u64 {
        let mut h = 0xcbf2_9ce4_8422_2325u64;
        let mut buf = vec![0u8; 64 << 10];
        for d in self.all() {
            let inner = d.inner();
            let cap = inner.capacity();
            let mut off = 0;
            while off < cap {
                let n = (cap - off).min(buf.len() as u64) as usize;
                inner
                    .read_at(&mut buf[..n], off)
                    .expect("memory device reads");
                for w in buf[..n].chunks(8) {
                    let mut b = [0u8; 8];
                    b[..w.len()].copy_from_slice(w);
                    h = (h ^ u64::from_le_bytes(b)).wrapping_mul(0x0000_0100_0000_01b3);
                }
                off += n as u64;
            }
        }
        h
    }
}
