//! The reports of `ecstack reliability`: what every model answers (MTTDL, the probability of data
//! loss within a mission time, the Monte-Carlo check), the extra figures of the EPLOG and cluster
//! models, and their text.

use serde::Serialize;

use super::{
    ArrayModel, Chain, ClusterModel, EplogModel, McEstimate, Mttdl, ReliabilityError, Repair,
    RepairTimes, HOURS_PER_YEAR, Z_99,
};

/// What every model reports.
#[derive(Clone, Debug, Serialize)]
pub struct Answer<M: Serialize> {
    pub model: M,
    pub mttdl_hours: f64,
    pub mttdl_years: f64,
    pub years: f64,
    /// P(data loss within `years`), from the chain's transient solution.
    pub loss_probability: f64,
    /// 1 − e^(−years / MTTDL), for comparison (the exponential approximation).
    pub loss_probability_exponential: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub monte_carlo: Option<McReport>,
}

/// The Monte-Carlo check of a chain.
#[derive(Clone, Debug, Serialize)]
pub struct McReport {
    #[serde(flatten)]
    pub estimate: McEstimate,
    pub mean_years: f64,
    pub interval_99_hours: (f64, f64),
    pub chain_inside_interval: bool,
    /// Rebuild durations the Monte-Carlo drew (the chain assumes exponential ones).
    pub repair_times: RepairTimes,
}

/// The answer of `model` (reported as given), whose chain is `chain` and MTTDL `mttdl`, for a
/// mission of `years`, with the Monte-Carlo estimate when one ran.
pub fn answer<M: Serialize>(
    model: M,
    chain: &Chain,
    mttdl: Mttdl,
    years: f64,
    mc: Option<(McEstimate, RepairTimes)>,
) -> Result<Answer<M>, ReliabilityError> {
    Ok(Answer {
        model,
        mttdl_hours: mttdl.hours,
        mttdl_years: mttdl.years(),
        years,
        loss_probability: chain.loss_probability_within(0, years * HOURS_PER_YEAR)?,
        loss_probability_exponential: mttdl.loss_probability(years),
        monte_carlo: mc.map(|(e, repair_times)| McReport {
            repair_times,
            estimate: e,
            mean_years: e.mean_years(),
            interval_99_hours: e.interval_hours(Z_99),
            chain_inside_interval: e.contains(mttdl.hours, Z_99),
        }),
    })
}

/// A figure in hours or years with 4 significant digits, scientific when large or small.
pub fn num(x: f64) -> String {
    if x == 0.0 {
        "0".into()
    } else if !(1e-3..1e6).contains(&x.abs()) {
        format!("{x:.3e}")
    } else if x.abs() >= 100.0 {
        format!("{x:.0}")
    } else if x.abs() >= 1.0 {
        format!("{x:.2}")
    } else {
        format!("{x:.4}")
    }
}

impl<M: Serialize> Answer<M> {
    /// The text lines every model prints: MTTDL, P(loss), the Monte-Carlo check.
    pub fn text(&self) -> String {
        let mut s = format!(
            "MTTDL: {} years ({} hours)\n",
            num(self.mttdl_years),
            num(self.mttdl_hours)
        );
        s.push_str(&format!(
            "P(data loss within {} years): {} (1 - exp(-t/MTTDL) would say {})\n",
            self.years,
            num(self.loss_probability),
            num(self.loss_probability_exponential)
        ));
        if let Some(mc) = &self.monte_carlo {
            let (lo, hi) = mc.interval_99_hours;
            s.push_str(&format!(
                "Monte-Carlo ({} runs, seed {}, {} failures): {} years, 99 % interval [{}, {}] years: the chain is {}\n",
                mc.estimate.runs,
                mc.estimate.seed,
                mc.estimate.failures,
                num(mc.mean_years),
                num(lo / HOURS_PER_YEAR),
                num(hi / HOURS_PER_YEAR),
                if mc.chain_inside_interval { "inside" } else { "OUTSIDE" }
            ));
            if mc.repair_times != RepairTimes::Exponential {
                s.push_str(&format!(
                    "  (Monte-Carlo rebuild durations: {}; the chain assumes exponential ones)\n",
                    match mc.repair_times {
                        RepairTimes::Exponential => "exponential".to_string(),
                        RepairTimes::Deterministic => "deterministic".to_string(),
                        RepairTimes::Lognormal { sigma } => format!("lognormal, sigma {sigma}"),
                    }
                ));
            }
        }
        s
    }
}

/// One line describing an array model.
pub fn describe_array(m: &ArrayModel) -> String {
    let name = match m.m {
        1 => format!("RAID-5 ({}+1)", m.k),
        2 => format!("RAID-6 ({}+2)", m.k),
        _ => format!("RS({}, {})", m.k, m.m),
    };
    format!(
        "{name}, {} devices of {:.3e} bytes: MTTF {} h, MTTR {} h ({} repair), URE {} \
         (a rebuild without redundancy reads {:.3e} bytes: P(URE) = {})",
        m.n(),
        m.device_bytes,
        num(m.mttf_hours),
        num(m.mttr_hours),
        match m.repair {
            Repair::Sequential => "sequential",
            Repair::Parallel => "parallel",
        },
        if m.uber > 0.0 {
            format!("{:e}/bit", m.uber)
        } else {
            "none".into()
        },
        m.k as f64 * m.device_bytes,
        num(m.critical_ure_probability())
    )
}

/// The EPLOG model as reported: the model and the figures derived from it.
#[derive(Clone, Debug, Serialize)]
pub struct EplogReport<'a> {
    #[serde(flatten)]
    pub model: &'a EplogModel,
    pub dirty_fraction: f64,
    pub main_array_alone_mttdl_years: f64,
}

impl<'a> EplogReport<'a> {
    pub fn new(model: &'a EplogModel, main_alone: Mttdl) -> EplogReport<'a> {
        EplogReport {
            model,
            dirty_fraction: model.dirty_fraction(),
            main_array_alone_mttdl_years: main_alone.years(),
        }
    }

    /// The lines before the answer: the main array, the log devices and the update cycle
    /// (`commit_seconds` as given).
    pub fn head(&self, commit_seconds: f64) -> String {
        let model = self.model;
        format!(
            "main array: {}\nlog devices: {} (MTTF {} h, MTTR {} h); uncommitted {} h, committed {} h between updates \
             ({:.1} % of the time uncommitted), forced parity commit {} s\n",
            describe_array(&model.main),
            model.main.m,
            num(model.log_mttf_hours),
            num(model.log_mttr_hours),
            num(model.dirty_hours),
            num(model.clean_hours),
            100.0 * self.dirty_fraction,
            num(commit_seconds)
        )
    }

    /// The line after the answer: the main array alone, and what the log devices cost.
    pub fn tail(&self, main_alone: Mttdl, mttdl: Mttdl) -> String {
        format!(
            "the main array alone (no uncommitted updates): {} years; the log devices' exposure costs {:.2} %\n",
            num(main_alone.years()),
            100.0 * (1.0 - mttdl.hours / main_alone.hours)
        )
    }
}

/// The cluster model as reported: the model and the figures derived from it.
#[derive(Clone, Debug, Serialize)]
pub struct ClusterReport<'a> {
    #[serde(flatten)]
    pub model: &'a ClusterModel,
    pub osd_bytes: f64,
    pub single_rebuild_hours: f64,
    pub loss_on_failure_m_plus_1: f64,
    /// Recovery durations of the Monte-Carlo (the chain assumes exponential ones).
    pub monte_carlo_repair_times: RepairTimes,
}

impl<'a> ClusterReport<'a> {
    pub fn new(model: &'a ClusterModel, times: RepairTimes) -> ClusterReport<'a> {
        ClusterReport {
            model,
            osd_bytes: model.osd_bytes(),
            single_rebuild_hours: model.single_rebuild_hours(),
            loss_on_failure_m_plus_1: model.loss_on_failure(model.m),
            monte_carlo_repair_times: times,
        }
    }

    /// The lines before the answer: the cluster, its recovery (`segment_bytes`, the per-OSD
    /// recovery rate and the detection delay as given) and P(loss) on one failure too many.
    pub fn head(&self, segment_bytes: f64, osd_recovery_mb_s: f64, detect_minutes: f64) -> String {
        let model = self.model;
        format!(
            "{} OSDs, RS({}, {}), {} segments of {:.3e} bytes ({:.3e} bytes per OSD): OSD MTTF {} h, \
             one OSD rebuilt in {} h ({} MB/s on each of {} survivors, detection {} min)\n\
             P(a failure that leaves {} OSDs failed loses a segment) = {}\n",
            model.osds,
            model.k,
            model.m,
            num(model.segments),
            segment_bytes,
            self.osd_bytes,
            num(model.mttf_hours),
            num(self.single_rebuild_hours),
            num(osd_recovery_mb_s),
            model.osds - 1,
            num(detect_minutes),
            model.m + 1,
            num(self.loss_on_failure_m_plus_1)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reliability::ReliabilityModel;

    fn raid6() -> ArrayModel {
        ArrayModel {
            k: 4,
            m: 2,
            mttf_hours: 1e6,
            mttr_hours: 24.0,
            device_bytes: 4e12,
            uber: 0.0,
            repair: Repair::Sequential,
            latent_per_hour: 0.0,
            scrub_hours: 0.0,
        }
    }

    #[test]
    fn num_keeps_four_significant_digits() {
        assert_eq!(num(0.0), "0");
        assert_eq!(num(1234.4), "1234");
        assert_eq!(num(12.345), "12.35");
        assert_eq!(num(0.012345), "0.0123");
        assert_eq!(num(2.5e7), "2.500e7");
        assert_eq!(num(1e-5), "1.000e-5");
    }

    #[test]
    fn answer_of_an_array_agrees_with_its_mttdl() {
        let m = raid6();
        let mttdl = m.mttdl().unwrap();
        let a = answer(&m, &m.chain().unwrap(), mttdl, 10.0, None).unwrap();
        assert_eq!(a.mttdl_hours, mttdl.hours);
        assert!(a.loss_probability > 0.0 && a.loss_probability < 1e-3);
        // for a rare loss the exponential approximation is close to the chain
        let rel = (a.loss_probability - a.loss_probability_exponential).abs() / a.loss_probability;
        assert!(rel < 0.05, "{rel}");
        let t = a.text();
        assert_eq!(t.lines().count(), 2, "{t}");
        assert!(t.starts_with("MTTDL: "), "{t}");
        assert!(describe_array(&m).starts_with("RAID-6 (4+2), 6 devices of 4.000e12 bytes"));
    }

    #[test]
    fn monte_carlo_lines_name_the_repair_times() {
        // short lifetimes, so that each simulated run ends soon
        let m = ArrayModel {
            mttf_hours: 1000.0,
            ..raid6()
        };
        let mttdl = m.mttdl().unwrap();
        let est = m
            .monte_carlo_with(20, 1, RepairTimes::Deterministic)
            .unwrap();
        let a = answer(
            &m,
            &m.chain().unwrap(),
            mttdl,
            1.0,
            Some((est, RepairTimes::Deterministic)),
        )
        .unwrap();
        let t = a.text();
        assert_eq!(t.lines().count(), 4, "{t}");
        assert!(t.contains("Monte-Carlo (20 runs, seed 1, "), "{t}");
        assert!(t.contains("rebuild durations: deterministic"), "{t}");
    }
}
