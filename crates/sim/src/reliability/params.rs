//! Units, inputs and errors shared by every model: device MTTF from an AFR, rebuild time from a
//! measured recovery throughput, URE probability of a read, the MTTDL answer.

use thiserror::Error;

/// Hours in a year of 365.25 days.
pub const HOURS_PER_YEAR: f64 = 8766.0;

#[derive(Debug, Error, Clone, PartialEq)]
pub enum ReliabilityError {
    /// A parameter out of its range: the message names it, its unit and what it must be.
    #[error("{0}")]
    Invalid(String),
    /// The model never reaches data loss (every failure can be repaired forever).
    #[error("data loss is unreachable in this model (infinite MTTDL)")]
    NeverLost,
}

pub(crate) fn invalid(msg: String) -> ReliabilityError {
    ReliabilityError::Invalid(msg)
}

/// Checks that `value` is a finite number > 0 (or >= 0 with `zero_ok`).
pub(crate) fn positive(
    name: &str,
    unit: &str,
    value: f64,
    zero_ok: bool,
) -> Result<(), ReliabilityError> {
    let ok = value.is_finite() && (value > 0.0 || (zero_ok && value == 0.0));
    if ok {
        Ok(())
    } else {
        let want = if zero_ok { ">= 0" } else { "> 0" };
        Err(invalid(format!(
            "{name} must be a finite number {want} ({unit}), got {value}"
        )))
    }
}

/// MTTF (hours) of a device with annualized failure rate `afr` (a fraction in (0, 1)), under the
/// exponential lifetime the models assume: AFR = 1 - exp(-8766 h / MTTF).
pub fn mttf_from_afr(afr: f64) -> Result<f64, ReliabilityError> {
    if !(afr.is_finite() && afr > 0.0 && afr < 1.0) {
        return Err(invalid(format!(
            "AFR must be a fraction in (0, 1) (e.g. 0.02 for 2 %/year), got {afr}"
        )));
    }
    Ok(-HOURS_PER_YEAR / (-afr).ln_1p())
}

/// Rebuild time (hours) of `bytes` at a measured recovery throughput of `mb_per_s` (10^6 bytes/s),
/// plus a fixed delay (detection, replacement) in hours.
pub fn rebuild_hours(bytes: f64, mb_per_s: f64, delay_hours: f64) -> Result<f64, ReliabilityError> {
    positive("device size", "bytes", bytes, false)?;
    positive("recovery throughput", "MB/s", mb_per_s, false)?;
    positive("repair delay", "hours", delay_hours, true)?;
    Ok(bytes / (mb_per_s * 1e6) / 3600.0 + delay_hours)
}

/// Probability that reading `bytes` hits at least one unrecoverable read error when each bit fails
/// independently with probability `uber`: 1 - (1 - uber)^(8 bytes).
pub fn ure_probability(bytes: f64, uber: f64) -> f64 {
    if uber <= 0.0 || bytes <= 0.0 {
        return 0.0;
    }
    -(8.0 * bytes * (-uber).ln_1p()).exp_m1()
}

pub(crate) fn check_uber(uber: f64) -> Result<(), ReliabilityError> {
    if uber.is_finite() && (0.0..1.0).contains(&uber) {
        Ok(())
    } else {
        Err(invalid(format!(
            "unrecoverable read error rate must be a per-bit probability in [0, 1) (e.g. 1e-15), got {uber}"
        )))
    }
}

/// A model's answer: the mean time to data loss.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Mttdl {
    pub hours: f64,
}

impl Mttdl {
    pub fn years(&self) -> f64 {
        self.hours / HOURS_PER_YEAR
    }

    /// Probability of data loss within `years`, taking the time to loss as exponential with the
    /// MTTDL as mean (1 - exp(-t / MTTDL)): accurate when the MTTDL is much longer than a repair,
    /// which is the regime where the chain's loss time is close to exponential.
    pub fn loss_probability(&self, years: f64) -> f64 {
        -(-(years * HOURS_PER_YEAR) / self.hours).exp_m1()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn afr_and_mttf() {
        // 1,000,000 h MTTF is an AFR of 1 - exp(-0.008766) = 0.8728 %.
        let afr = 1.0 - (-8766.0f64 / 1e6).exp();
        assert!((mttf_from_afr(afr).unwrap() - 1e6).abs() < 1e-3);
        assert!(mttf_from_afr(0.0).is_err());
        assert!(mttf_from_afr(1.0).is_err());
        assert!(mttf_from_afr(f64::NAN).is_err());
    }

    #[test]
    fn rebuild_time_from_throughput() {
        // 4 TB at 100 MB/s is 40,000 s = 11.11 h, plus 1 h to replace the device.
        let h = rebuild_hours(4e12, 100.0, 1.0).unwrap();
        assert!((h - (40_000.0 / 3600.0 + 1.0)).abs() < 1e-9);
        assert!(rebuild_hours(4e12, 0.0, 0.0).is_err());
        assert!(rebuild_hours(-1.0, 1.0, 0.0).is_err());
    }

    #[test]
    fn ure_probability_small_and_large() {
        // 1e-15 per bit over 1 TB (8e12 bits): 1 - exp(-0.008) = 0.7968 %.
        let p = ure_probability(1e12, 1e-15);
        assert!((p - (1.0 - (-0.008f64).exp())).abs() < 1e-12);
        assert_eq!(ure_probability(1e12, 0.0), 0.0);
        // 1e-14 over 12 TB: the classic "RAID-5 rebuild fails more often than not" figure (61.7 %).
        let p = ure_probability(12e12, 1e-14);
        assert!((p - 0.6171).abs() < 1e-3, "{p}");
    }

    #[test]
    fn loss_probability_of_an_exponential() {
        let m = Mttdl {
            hours: 100.0 * HOURS_PER_YEAR,
        };
        assert!((m.loss_probability(1.0) - (1.0 - (-0.01f64).exp())).abs() < 1e-15);
    }
}
