//! TWEEN's GC module: which segment to collect (cost-benefit, the default: the most
//! `(1 − u) · age / (1 + u)`, as LFS cleans; or the seed's greedy: most stale extents, ties to the
//! hotter group) and when (background, the default: a worker thread off the request path, the
//! request path collecting only at the floor; active: below a free-segment threshold, inside
//! writes; periodic: when idle).
//!
//! Why a victim always exists and free segments never run out: the logical capacity is
//! `(S − spare) · slots` extents with `spare ≥ threshold + 1` (`spare_segments`). Collection runs
//! while fewer than `threshold ≥ N + 2` segments are free, i.e. more than `S − threshold` are used;
//! they hold at most `S − spare` segments' worth of live extents, so at least
//! `(spare − threshold + 1) · slots ≥ slots` of their extents are stale and the greedy victim has a
//! stale extent. Free segments: after a run of collections free ≥ threshold and one flush or
//! direct write follows, so a run starts with F ≥ threshold − 1 ≥ N + 1 free. In the run, before
//! its j-th flush takes a segment, c victims have been freed and the extents appended (each victim
//! has < slots live) plus what the buffers held (at most one full buffer, the one whose flush
//! started the run, and N − 1 others below full) fill j buffers: j · slots < (N + c + 1) · slots,
//! so j ≤ N + c and free = F − (j − 1) + c ≥ F − N + 1 ≥ 2 > 0 (`gc_floor_holds_with_many_groups`
//! in `tests/tween.rs` runs N = 8 at the floor). (Version 1 kept 2N + 1 / 2N + 2 free, N more than
//! this bound needs: at N = 4 on a 10% spare that left 4% of the segments as stale slack, at N = 8
//! under 1%, which made more groups look worse than they are.)

/// When garbage collection runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum GcMode {
    /// Before a flush, while fewer than the threshold of segments are free.
    Active,
    /// When the device has been idle (`Tween::collect_idle`), while fewer than the threshold are
    /// free; the active rule still runs at the floor of N + 2 free segments.
    Periodic,
    /// Off the request path: a worker (`Tween::start_background`) flushes full NVRAM buffers (a
    /// stream whose buffer fills moves to a spare buffer) and collects while fewer than the
    /// threshold are free; the request path flushes and collects itself only when no spare buffer
    /// is left or free segments fall to the floor of N + 2 (and always when no worker runs).
    Background,
}

impl GcMode {
    pub fn parse(s: &str) -> crate::Result<GcMode> {
        match s.trim().to_ascii_lowercase().as_str() {
            "active" => Ok(GcMode::Active),
            "periodic" | "idle" => Ok(GcMode::Periodic),
            "background" => Ok(GcMode::Background),
            o => Err(crate::ArrayError::Config(format!(
                "unknown GC mode '{o}' (expected background, active or periodic)"
            ))),
        }
    }
    pub(crate) fn id(self) -> u32 {
        match self {
            GcMode::Active => 0,
            GcMode::Periodic => 1,
            GcMode::Background => 2,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            GcMode::Active => "active",
            GcMode::Periodic => "periodic",
            GcMode::Background => "background",
        }
    }
    pub(crate) fn from_id(id: u32) -> Option<GcMode> {
        match id {
            0 => Some(GcMode::Active),
            1 => Some(GcMode::Periodic),
            2 => Some(GcMode::Background),
            _ => None,
        }
    }
}

/// Segments kept out of the logical capacity for GC and the buffers' flushes.
pub(crate) fn spare_segments(segments: u64, groups: usize, over_provisioning: f64) -> u64 {
    let floor = threshold_floor(groups) + 1;
    ((segments as f64 * over_provisioning).ceil() as u64).max(floor)
}

/// The lowest free-segment count at which the active rule collects, whatever the mode.
pub(crate) fn threshold_floor(groups: usize) -> u64 {
    groups as u64 + 2
}

/// The default threshold: one above the floor when the spare allows.
pub(crate) fn default_threshold(groups: usize, spare: u64) -> u64 {
    let floor = threshold_floor(groups);
    if floor + 1 < spare {
        floor + 1
    } else {
        floor
    }
}

/// How the GC module chooses its victim.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum VictimPolicy {
    /// The seed's (§6.2.1): the segment with the most stale extents.
    Greedy,
    /// LFS's (Rosenblum and Ousterhout, the seed's reference [57]): the segment with the largest
    /// `(1 − u) · age / (1 + u)`, u its live fraction and age the host time since its youngest
    /// extent was written: a cold segment is worth cleaning at a higher u than a hot one, whose
    /// remaining live data is about to die anyway.
    CostBenefit,
}

impl VictimPolicy {
    pub fn parse(s: &str) -> crate::Result<VictimPolicy> {
        match s.trim().to_ascii_lowercase().as_str() {
            "greedy" => Ok(VictimPolicy::Greedy),
            "cost-benefit" | "costbenefit" => Ok(VictimPolicy::CostBenefit),
            o => Err(crate::ArrayError::Config(format!(
                "unknown victim policy '{o}' (expected cost-benefit or greedy)"
            ))),
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            VictimPolicy::Greedy => "greedy",
            VictimPolicy::CostBenefit => "cost-benefit",
        }
    }
}

/// One segment as GC sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct SegmentUse {
    pub live: u32,
    /// Extents the segment was written with (0: free, never written since freed).
    pub written: u32,
    /// Hotness of the group that flushed it (its center at selection time).
    pub hotness: f64,
    /// Host time since the youngest extent in it was written by the host.
    pub age: u64,
}

/// The victim under `policy`; None when no used segment has a stale extent.
pub(crate) fn pick_victim(
    policy: VictimPolicy,
    segs: &[SegmentUse],
    excluded: &dyn Fn(u64) -> bool,
) -> Option<u64> {
    match policy {
        VictimPolicy::Greedy => pick_greedy(segs, excluded),
        VictimPolicy::CostBenefit => pick_cost_benefit(segs, excluded),
    }
}

/// Cost-benefit: the largest `(1 − u) · age / (1 + u)` (reading the segment costs 1, writing its
/// live data back u; the space won, 1 − u, lasts in proportion to the data's age); ties to the
/// lower index. Age counts from 1, so among segments written at the same time the emptiest wins.
fn pick_cost_benefit(segs: &[SegmentUse], excluded: &dyn Fn(u64) -> bool) -> Option<u64> {
    let mut best: Option<(u64, f64)> = None;
    for (i, s) in segs.iter().enumerate() {
        let i = i as u64;
        if s.live == 0 || excluded(i) || s.written <= s.live {
            continue;
        }
        let u = s.live as f64 / s.written as f64;
        let score = (1.0 - u) * (s.age as f64 + 1.0) / (1.0 + u);
        if best.is_none_or(|(_, b)| score > b) {
            best = Some((i, score));
        }
    }
    best.map(|b| b.0)
}

/// Greedy: the used segment with the most stale extents, ties to the hotter one, then the lower
/// index.
fn pick_greedy(segs: &[SegmentUse], excluded: &dyn Fn(u64) -> bool) -> Option<u64> {
    let mut best: Option<(u64, u32, f64)> = None;
    for (i, s) in segs.iter().enumerate() {
        let i = i as u64;
        if s.live == 0 || excluded(i) {
            continue; // free (a segment with no live extent is free already)
        }
        let stale = s.written.saturating_sub(s.live);
        if stale == 0 {
            continue;
        }
        let better = match best {
            None => true,
            Some((_, bs, bh)) => stale > bs || (stale == bs && s.hotness > bh),
        };
        if better {
            best = Some((i, stale, s.hotness));
        }
    }
    best.map(|b| b.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(live: u32, written: u32, hotness: f64) -> SegmentUse {
        SegmentUse {
            live,
            written,
            hotness,
            age: 0,
        }
    }

    fn aged(live: u32, age: u64) -> SegmentUse {
        SegmentUse {
            live,
            written: 8,
            hotness: 0.0,
            age,
        }
    }

    /// Where the two policies must differ: a hot segment half stale but just written, and a cold
    /// one with fewer stale extents that has not changed for a long time. Greedy takes the hot one
    /// (4 stale > 3), whose live half is about to die anyway; cost-benefit takes the cold one:
    /// (1 − 5/8) · 1001 / (1 + 5/8) = 231 against (1 − 1/2) · 11 / (1 + 1/2) = 3.7.
    #[test]
    fn cost_benefit_prefers_old_cold_space_over_young_hot_space() {
        let segs = [aged(4, 10), aged(5, 1000), aged(8, 5000), seg(0, 8, 0.0)];
        assert_eq!(
            pick_victim(VictimPolicy::Greedy, &segs, &|_| false),
            Some(0)
        );
        assert_eq!(
            pick_victim(VictimPolicy::CostBenefit, &segs, &|_| false),
            Some(1)
        );
        // At equal age it is greedy's order (the emptiest first), and all-live is never a victim.
        let same = [aged(6, 50), aged(2, 50), aged(8, 50)];
        assert_eq!(
            pick_victim(VictimPolicy::CostBenefit, &same, &|_| false),
            Some(1)
        );
        assert_eq!(
            pick_victim(VictimPolicy::CostBenefit, &same, &|s| s == 1),
            Some(0)
        );
        assert_eq!(
            pick_victim(VictimPolicy::CostBenefit, &[aged(8, 9)], &|_| false),
            None
        );
    }

    #[test]
    fn greedy_picks_most_stale_then_hotter() {
        let segs = [
            seg(0, 8, 0.9), // free: never a victim
            seg(6, 8, 0.9), // 2 stale
            seg(3, 8, 0.1), // 5 stale, cold
            seg(3, 8, 0.5), // 5 stale, hotter: the victim
            seg(8, 8, 1.0), // all live
        ];
        let g = VictimPolicy::Greedy;
        assert_eq!(pick_victim(g, &segs, &|_| false), Some(3));
        assert_eq!(pick_victim(g, &segs, &|s| s == 3), Some(2));
        assert_eq!(
            pick_victim(g, &[seg(8, 8, 0.0), seg(0, 0, 0.0)], &|_| false),
            None
        );
    }

    #[test]
    fn spare_segments_cover_the_buffers() {
        assert_eq!(spare_segments(100, 4, 0.1), 10);
        assert_eq!(spare_segments(20, 4, 0.1), 7);
        assert_eq!(spare_segments(1000, 2, 0.05), 50);
        assert!(threshold_floor(4) < spare_segments(1, 4, 0.0));
        assert_eq!(default_threshold(4, 10), 7);
        assert_eq!(default_threshold(4, 7), 6);
    }
}
