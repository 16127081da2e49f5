//! `ecstack sim array`: a sweep of the deterministic array simulator (`ecstack_array::sim`) over
//! seeds, timed, and its report as JSON or text.

use std::fmt::Write as _;
use std::time::Instant;

use ecstack_array::sim::{sweep, SimFailure, SimOptions, SweepReport};
use serde_json::json;

/// A passed sweep.
#[derive(Clone, Debug)]
pub struct ArraySimRun {
    /// The first seed and the number of seeds asked for.
    pub seed: u64,
    pub seeds: u64,
    pub options: SimOptions,
    pub seconds: f64,
    pub sweep: SweepReport,
    /// The array name and device digest of the last seed.
    pub last: Option<(String, u64)>,
}

/// Run seeds `seed..seed + seeds`, stopping at the first failure; `progress` is called after every
/// seed.
pub fn run(
    seed: u64,
    seeds: u64,
    options: &SimOptions,
    mut progress: impl FnMut(),
) -> Result<ArraySimRun, SimFailure> {
    let t = Instant::now();
    let mut last = None;
    let r = sweep(seed, seeds, options, |r| {
        progress();
        last = Some((r.array.clone(), r.digest));
    })?;
    Ok(ArraySimRun {
        seed,
        seeds,
        options: *options,
        seconds: t.elapsed().as_secs_f64(),
        sweep: r,
        last,
    })
}

/// The `--json` report of a failed sweep.
pub fn failure_json(f: &SimFailure) -> serde_json::Value {
    json!({ "ok": false, "failure": f })
}

impl ArraySimRun {
    /// The single seed's array name and digest, when one seed ran.
    fn single(&self) -> Option<&(String, u64)> {
        match (self.seeds, &self.last) {
            (1, Some(last)) => Some(last),
            _ => None,
        }
    }

    /// The `--json` report.
    pub fn to_json(&self) -> serde_json::Value {
        let mut v = json!({ "ok": true, "seconds": self.seconds, "sweep": self.sweep });
        if let Some((array, digest)) = self.single() {
            v["array"] = json!(array);
            v["digest"] = json!(format!("{digest:016x}"));
        }
        v
    }

    /// The text report: what ran, then what the seeds reached.
    pub fn text(&self) -> String {
        let (r, x, steps) = (&self.sweep, &self.sweep.reached, self.options.steps);
        let mut s = String::new();
        match self.single() {
            Some((array, digest)) => {
                let _ = writeln!(
                    s,
                    "seed {}: {array}, {steps} steps, passed (device digest {digest:016x})",
                    self.seed
                );
            }
            None => {
                let _ = writeln!(
                    s,
                    "seeds {}..{}: {} passed in {:.1} s (md {}, pl {}, eplog {}), {steps} steps each",
                    r.first,
                    r.first + r.seeds,
                    r.seeds,
                    self.seconds,
                    r.per_scheme[0],
                    r.per_scheme[1],
                    r.per_scheme[2],
                );
            }
        }
        let _ = writeln!(
            s,
            "  {} writes, {} reads, {} syncs, {} parity commits, {} idle commits, {} discards, {} reopens",
            x.writes, x.reads, x.syncs, x.commits, x.idle_commits, x.discards, x.reopens
        );
        let _ = writeln!(
            s,
            "  {} power cuts ({} mid-operation; {} device writes torn, {} dropped), {} device failures, {} latent sector errors, {} rebuilds, {} degraded reads",
            x.power_cuts,
            x.mid_op_cuts,
            x.torn_writes,
            x.dropped_writes,
            x.device_failures,
            x.latent_errors,
            x.rebuilds,
            x.degraded_reads
        );
        let _ = writeln!(
            s,
            "  {} bytes checked against the model, 0 lost acknowledged writes",
            x.bytes_checked
        );
        let _ = writeln!(
            s,
            "  {} power cuts while degraded (journal replays and commit reruns included)",
            x.degraded_power_cuts
        );
        if !self.options.strict {
            let _ = writeln!(
                s,
                "  md/pl kept out of the unnoticed-failure hole: {} flushes before a power cut with a device impaired that the array had not noticed, {} silent faults deferred while a mid-operation cut was pending (--strict to include it)",
                x.unnoticed_cut_syncs, x.faults_deferred
            );
        }
        if self.seeds > 1 {
            let missing = x.missing();
            if !missing.is_empty() {
                let _ = writeln!(s, "  never reached: {}", missing.join(", "));
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_seed_reports_its_array_and_digest() {
        let opts = SimOptions {
            steps: 40,
            ..SimOptions::default()
        };
        let mut calls = 0;
        let r = run(3, 1, &opts, || calls += 1).unwrap();
        assert_eq!(calls, 1);
        assert_eq!(r.sweep.seeds, 1);
        let (array, digest) = r.last.clone().unwrap();
        let j = r.to_json();
        assert_eq!(j["ok"], true);
        assert_eq!(j["array"], array.as_str());
        assert_eq!(j["digest"], format!("{digest:016x}"));
        let text = r.text();
        assert!(
            text.starts_with(&format!("seed 3: {array}, 40 steps, passed")),
            "{text}"
        );
        assert!(text.contains("unnoticed-failure hole"), "{text}");
        // the same seed replays to the same digest
        assert_eq!(run(3, 1, &opts, || {}).unwrap().last, r.last);
    }

    #[test]
    fn a_sweep_reports_seeds_per_scheme() {
        let opts = SimOptions {
            steps: 20,
            strict: true,
            journal: true,
            trace: false,
        };
        let r = run(0, 3, &opts, || {}).unwrap();
        assert_eq!(r.sweep.per_scheme.iter().sum::<u64>(), 3);
        let j = r.to_json();
        assert!(j.get("array").is_none());
        let text = r.text();
        assert!(text.starts_with("seeds 0..3: 3 passed in "), "{text}");
        assert!(!text.contains("unnoticed-failure hole"), "{text}");
    }
}
