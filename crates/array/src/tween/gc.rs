//! TWEEN's GC module: which segment to collect (greedy: most stale extents, ties to the hotter
//! group) and when (active: below a free-segment threshold; periodic: when idle).
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
}

impl GcMode {
    pub fn parse(s: &str) -> crate::Result<GcMode> {
        match s.trim().to_ascii_lowercase().as_str() {
            "active" => Ok(GcMode::Active),
            "periodic" | "idle" => Ok(GcMode::Periodic),
            o => Err(crate::ArrayError::Config(format!(
                "unknown GC mode '{o}' (expected active or periodic)"
            ))),
        }
    }
    pub(crate) fn id(self) -> u32 {
        match self {
            GcMode::Active => 0,
            GcMode::Periodic => 1,
        }
    }
    pub(crate) fn from_id(id: u32) -> Option<GcMode> {
        match id {
            0 => Some(GcMode::Active),
            1 => Some(GcMode::Periodic),
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

/// One segment as GC sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct SegmentUse {
    pub live: u32,
    /// Extents the segment was written with (0: free, never written since freed).
    pub written: u32,
    /// Hotness of the group that flushed it (its center at selection time).
    pub hotness: f64,
}

/// The greedy victim: the used segment with the most stale extents, ties to the hotter one, then
/// the lower index; None when no used segment has a stale extent.
pub(crate) fn pick_victim(segs: &[SegmentUse], excluded: &dyn Fn(u64) -> bool) -> Option<u64> {
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
        }
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
        assert_eq!(pick_victim(&segs, &|_| false), Some(3));
        assert_eq!(pick_victim(&segs, &|s| s == 3), Some(2));
        assert_eq!(
            pick_victim(&[seg(8, 8, 0.0), seg(0, 0, 0.0)], &|_| false),
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
