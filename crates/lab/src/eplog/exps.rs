//! The runs of each experiment: Exps 1–3 on simulated SSDs, Exp 4's grid and per-trace runs on a
//! testbed, Exp 5's rebuilds.

use std::path::Path;
use std::sync::Arc;

use ecstack_array::SchemeKind;
use serde::Serialize;

use super::config::{EplogConfig, Exp, Setting, Testbed};
use super::rig::{build, prewrite, Backing};
use super::run::{replay, run, Commit, RunKey, RunRow, RunSpec, Variant};
use super::workload::{Trace, TraceName};
use crate::Result;

/// What every experiment's runs share.
pub struct Ctx<'a> {
    pub cfg: &'a EplogConfig,
    /// Directory of the device files.
    pub dir: &'a Path,
    /// Where progress lines go (one per run).
    pub progress: &'a dyn Fn(&str),
}

impl Ctx<'_> {
    fn run(&self, t: &Trace, key: RunKey, backing: Backing) -> Result<RunRow> {
        let what = format!(
            "{} {} {}, {} client(s), commit {}{}, {backing}",
            key.trace,
            key.setting,
            key.variant,
            key.clients,
            key.commit,
            if key.degraded { ", degraded" } else { "" }
        );
        (self.progress)(&what);
        let spec = RunSpec {
            key,
            backing,
            stripe_buffer: self.cfg.stripe_buffer,
            checksums: self.cfg.checksums,
        };
        run(t, spec, self.dir)
    }
}

/// Exps 1–3 on simulated SSDs: every trace at (6+2) and FIN at every setting, each scheme and
/// eplog with device buffers of 16 chunks; with Exp 3, eplog (6+2) with parity commits.
pub fn simulated(cx: &Ctx, traces: &[Trace]) -> Result<Vec<RunRow>> {
    let cfg = cx.cfg;
    let mut rows = Vec::new();
    for t in traces {
        for &s in &cfg.settings {
            if t.name != TraceName::Fin && s != Setting::SIX_TWO {
                continue;
            }
            for &scheme in &cfg.schemes {
                let key = RunKey::plain(t.name, s, Variant::Plain(scheme), 1);
                rows.push(cx.run(t, key, Backing::Sim)?);
            }
            if s == Setting::SIX_TWO {
                let key = RunKey::plain(t.name, s, Variant::EplogDeviceBuffer(16), 1);
                rows.push(cx.run(t, key, Backing::Sim)?);
            }
        }
    }
    if cfg.wants(Exp::CommitFrequency) {
        for t in traces {
            for commit in [Commit::All, Commit::Every(1000), Commit::Every(10_000)] {
                let key = RunKey {
                    commit,
                    ..RunKey::plain(t.name, Setting::SIX_TWO, Variant::EPLOG, 1)
                };
                rows.push(cx.run(t, key, Backing::Sim)?);
            }
        }
    }
    Ok(rows)
}

/// Exp 4's grid on one testbed: FIN at every setting and scheme for each number of clients (no
/// commit, normal mode); with several clients also eplog without the stripe buffer at (6+2).
pub fn exp4_grid(cx: &Ctx, fin: &Trace, clients: &[usize], tb: Testbed) -> Result<Vec<RunRow>> {
    let cfg = cx.cfg;
    let mut rows = Vec::new();
    for &nc in clients {
        for &s in &cfg.settings {
            for &scheme in &cfg.schemes {
                let key = RunKey::plain(fin.name, s, Variant::Plain(scheme), nc);
                rows.push(cx.run(fin, key, Backing::Testbed(tb))?);
            }
        }
        if nc > 1
            && cfg.settings.contains(&Setting::SIX_TWO)
            && cfg.schemes.contains(&SchemeKind::Eplog)
        {
            let key = RunKey::fin(Variant::EplogNoStripeBuffer, nc);
            rows.push(cx.run(fin, key, Backing::Testbed(tb))?);
        }
    }
    Ok(rows)
}

/// Exps 4b/4c on one testbed: the other traces' md/pl/eplog runs at (6+2), and eplog with a commit
/// at the end or every 10K writes, normal and with two SSDs failed before the last commit.
pub fn exp4_traces(cx: &Ctx, traces: &[&Trace], tb: Testbed) -> Result<Vec<RunRow>> {
    let mut rows = Vec::new();
    for t in traces {
        if t.name != TraceName::Fin {
            for v in [Variant::MD, Variant::PL, Variant::EPLOG] {
                let key = RunKey::plain(t.name, Setting::SIX_TWO, v, 1);
                rows.push(cx.run(t, key, Backing::Testbed(tb))?);
            }
        }
        for commit in [Commit::All, Commit::Every(10_000)] {
            for degraded in [false, true] {
                let key = RunKey {
                    commit,
                    degraded,
                    ..RunKey::plain(t.name, Setting::SIX_TWO, Variant::EPLOG, 1)
                };
                rows.push(cx.run(t, key, Backing::Testbed(tb))?);
            }
        }
    }
    Ok(rows)
}

/// When Exp 5 rebuilds: on the pre-written array, after the replay, after the replay with prefetch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RecoveryCase {
    BeforeReplay,
    AfterReplay,
    AfterReplayPrefetch,
}

impl RecoveryCase {
    pub const ALL: [RecoveryCase; 3] = [
        RecoveryCase::BeforeReplay,
        RecoveryCase::AfterReplay,
        RecoveryCase::AfterReplayPrefetch,
    ];
}

impl std::fmt::Display for RecoveryCase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RecoveryCase::BeforeReplay => "before replay",
            RecoveryCase::AfterReplay => "after replay",
            RecoveryCase::AfterReplayPrefetch => "after replay + prefetch",
        })
    }
}

impl Serialize for RecoveryCase {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        crate::serialize_display(self, s)
    }
}

/// One rebuild of Exp 5.
#[derive(Serialize, Clone, Debug)]
pub struct RecoveryRow {
    pub case: RecoveryCase,
    pub batch: usize,
    pub prefetch: bool,
    pub recovered_bytes: u64,
    pub seconds: f64,
    pub mb_per_s: f64,
}

/// Exp 5 batch sizes (stripes rebuilt per batch).
pub const RECOVERY_BATCHES: [usize; 4] = [1, 10, 100, 1000];

/// Exp 5: FIN (6+2) eplog on the device files; two SSDs rebuilt in place at each batch size, before
/// and after the replay, and after it with prefetch.
pub fn recovery(cx: &Ctx, fin: &Trace) -> Result<Vec<RecoveryRow>> {
    (cx.progress)("exp 5: recovery, FIN (6+2) eplog on O_DIRECT files");
    let files = Backing::Testbed(Testbed::Files);
    let rig = build(fin, SchemeKind::Eplog, Setting::SIX_TWO, files, cx.dir)?;
    let a = &rig.array;
    a.set_checksums(cx.cfg.checksums);
    prewrite(a, fin.wss)?;
    let devs = a.devices();
    let mut rows = Vec::new();
    for case in RecoveryCase::ALL {
        if case == RecoveryCase::AfterReplay {
            replay(a, fin, 1, 0xa5)?;
            a.commit()?;
        }
        let prefetch = case == RecoveryCase::AfterReplayPrefetch;
        for batch in RECOVERY_BATCHES {
            a.set_rebuild(batch, prefetch);
            let failed = vec![(0, Arc::clone(&devs[0])), (1, Arc::clone(&devs[1]))];
            let r = a.rebuild_devices(failed)?;
            rows.push(RecoveryRow {
                case,
                batch,
                prefetch,
                recovered_bytes: r.bytes,
                seconds: r.seconds,
                mb_per_s: r.mb_per_s,
            });
        }
    }
    Ok(rows)
}
