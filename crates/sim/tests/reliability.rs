//! The reliability models against closed forms derived by hand (in the comments), against
//! Monte-Carlo simulations of individual failures and repairs, and RainFS Table 2.1 against the
//! seed's printed values. Monte-Carlo runs are seeded (`ECSTACK_SEED=<n>` replays another seed).

use ecstack_sim::reliability::{
    rainfs, ArrayModel, ClusterModel, EplogModel, McEstimate, ReliabilityModel, Repair,
    RepairTimes, HOURS_PER_YEAR,
};

fn seed() -> u64 {
    std::env::var("ECSTACK_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed)
}

/// 99.9 % two-sided normal quantile: the Monte-Carlo check is deterministic per seed, and this
/// keeps a correct model from failing on an unlucky seed about once in a thousand.
const Z: f64 = 3.2905;

fn close(a: f64, b: f64, rel: f64) -> bool {
    ((a - b) / b).abs() <= rel
}

fn array(k: usize, m: usize, mttf: f64, mttr: f64, repair: Repair) -> ArrayModel {
    ArrayModel {
        k,
        m,
        mttf_hours: mttf,
        mttr_hours: mttr,
        device_bytes: 4e12,
        uber: 0.0,
        repair,
        latent_per_hour: 0.0,
        scrub_hours: 0.0,
    }
}

/// The estimate agrees with the exact value within its 99.9 % interval, and the interval is
/// narrow enough (half-width under `width` of the value) for the agreement to mean something.
fn assert_agrees(what: &str, exact_hours: f64, mc: &McEstimate, width: f64) {
    let (lo, hi) = mc.interval_hours(Z);
    eprintln!(
        "{what}: chain {exact_hours:.2} h, Monte-Carlo {:.2} h ± {:.2} ({} runs, {} failures, seed {})",
        mc.mean_hours,
        Z * mc.std_error_hours,
        mc.runs,
        mc.failures,
        mc.seed
    );
    assert!(
        mc.contains(exact_hours, Z),
        "{what}: chain {exact_hours} h outside the Monte-Carlo interval [{lo}, {hi}] (seed {}; rerun with ECSTACK_SEED)",
        mc.seed
    );
    assert!(
        (hi - lo) / 2.0 < width * exact_hours,
        "{what}: interval [{lo}, {hi}] too wide to check anything"
    );
    assert!(
        mc.failures > mc.runs,
        "{what}: the runs simulated no repairs"
    );
}

/// The estimate as "mean ± half-width of its 99.9 % interval", in hours, for the test log.
fn mean_pm(mc: &McEstimate) -> String {
    format!("{:.1} ± {:.1} h", mc.mean_hours, Z * mc.std_error_hours)
}

fn log_fixed_rebuilds(what: &str, chain_hours: f64, det: &McEstimate) {
    eprintln!(
        "{what}: chain {chain_hours:.1} h, fixed rebuilds {}",
        mean_pm(det)
    );
}

// --- Closed forms -------------------------------------------------------------------------------
//
// Birth-death chain absorbed at m+1 failures, failure rates λ_i = (n-i)λ, repair rates μ_i. The
// expected time to go from i to i+1 failed is τ_i = 1/λ_i + (μ_i/λ_i) τ_{i-1} (leave i; if the
// exit was a repair, come back from i-1), τ_0 = 1/λ_0, and MTTDL = Σ τ_i.
//
// RAID-5 (m = 1), n devices: τ_0 = 1/(nλ), τ_1 = (nλ + μ)/(n(n-1)λ²), so
//   MTTDL = ((2n-1)λ + μ) / (n(n-1)λ²)  ≈  MTTF² / (n(n-1) MTTR)   (Patterson, Gibson, Katz 1988).
// RAID-6 (m = 2), sequential repair (μ_1 = μ_2 = μ):
//   τ_2 = [n(n-1)λ² + μ(nλ + μ)] / (n(n-1)(n-2)λ³), and over the common denominator
//   MTTDL = ((3n²-6n+2)λ² + (2n-2)λμ + μ²) / (n(n-1)(n-2)λ³)  ≈  MTTF³ / (n(n-1)(n-2) MTTR²).
// RAID-6, parallel repair (μ_2 = 2μ): τ_2 gains 2μ(nλ+μ) instead of μ(nλ+μ), so
//   MTTDL = ((3n²-6n+2)λ² + (3n-2)λμ + 2μ²) / (n(n-1)(n-2)λ³)   (the form in Chen et al. 1994).
// RAID-5 with URE probability p on the rebuild: from 0, a failure goes to 1 with 1-p, else loss;
//   T_0 = 1/(nλ) + (1-p) T_1, T_1 = (1 + μ T_0) / ((n-1)λ + μ), which solve to
//   MTTDL = ((n-1)λ + μ + (1-p) nλ) / (nλ ((n-1)λ + p μ))  ≈  1 / (nλ ((n-1)λ/μ + p)).

#[test]
fn raid5_matches_its_closed_form() {
    for n in [3usize, 5, 9, 16] {
        for (mttf, mttr) in [(1e6, 10.0), (1000.0, 50.0), (100.0, 100.0)] {
            let (l, mu) = (1.0 / mttf, 1.0 / mttr);
            let nf = n as f64;
            let exact = ((2.0 * nf - 1.0) * l + mu) / (nf * (nf - 1.0) * l * l);
            for repair in [Repair::Sequential, Repair::Parallel] {
                let got = array(n - 1, 1, mttf, mttr, repair).mttdl().unwrap().hours;
                assert!(close(got, exact, 1e-12), "n {n}: {got} vs {exact}");
            }
        }
        // The textbook approximation, for realistic devices (MTTR / MTTF = 1e-5).
        let got = array(n - 1, 1, 1e6, 10.0, Repair::Sequential)
            .mttdl()
            .unwrap();
        let approx = 1e6f64 * 1e6 / (n as f64 * (n - 1) as f64 * 10.0);
        assert!(close(got.hours, approx, 1e-3), "{} vs {approx}", got.hours);
    }
    // A figure by hand: 8 devices, MTTF 1,000,000 h, MTTR 24 h: 1e12/(8·7·24) h = 85,000 years.
    let y = array(7, 1, 1e6, 24.0, Repair::Sequential)
        .mttdl()
        .unwrap()
        .years();
    assert!((y / (1e12 / (56.0 * 24.0) / HOURS_PER_YEAR) - 1.0).abs() < 1e-3);
    assert!((84_000.0..86_000.0).contains(&y), "{y}");
}

#[test]
fn raid6_matches_its_closed_forms() {
    for n in [4usize, 6, 10, 20] {
        for (mttf, mttr) in [(1.2e6, 12.0), (1000.0, 50.0), (50.0, 100.0)] {
            let (l, mu, nf) = (1.0 / mttf, 1.0 / mttr, n as f64);
            let den = nf * (nf - 1.0) * (nf - 2.0) * l * l * l;
            let a = (3.0 * nf * nf - 6.0 * nf + 2.0) * l * l;
            let seq = (a + (2.0 * nf - 2.0) * l * mu + mu * mu) / den;
            let par = (a + (3.0 * nf - 2.0) * l * mu + 2.0 * mu * mu) / den;
            let got_seq = array(n - 2, 2, mttf, mttr, Repair::Sequential)
                .mttdl()
                .unwrap()
                .hours;
            let got_par = array(n - 2, 2, mttf, mttr, Repair::Parallel)
                .mttdl()
                .unwrap()
                .hours;
            assert!(close(got_seq, seq, 1e-12), "n {n}: {got_seq} vs {seq}");
            assert!(close(got_par, par, 1e-12), "n {n}: {got_par} vs {par}");
        }
        let got = array(n - 2, 2, 1e6, 10.0, Repair::Sequential)
            .mttdl()
            .unwrap()
            .hours;
        let nf = n as f64;
        let approx = 1e18 / (nf * (nf - 1.0) * (nf - 2.0) * 100.0);
        assert!(close(got, approx, 1e-3), "{got} vs {approx}");
    }
}

#[test]
fn rs_matches_the_birth_death_recursion() {
    // τ-recursion of the comment above, for m = 0..=4 and both repair policies.
    for (k, m) in [(4usize, 0usize), (6, 3), (10, 4), (12, 4)] {
        for repair in [Repair::Sequential, Repair::Parallel] {
            let (mttf, mttr) = (5000.0, 30.0);
            let n = k + m;
            let mut tau_prev = 0.0;
            let mut total = 0.0;
            for i in 0..=m {
                let li = (n - i) as f64 / mttf;
                let mui = match (i, repair) {
                    (0, _) => 0.0,
                    (_, Repair::Sequential) => 1.0 / mttr,
                    (_, Repair::Parallel) => i as f64 / mttr,
                };
                let tau = 1.0 / li + mui / li * tau_prev;
                total += tau;
                tau_prev = tau;
            }
            let got = array(k, m, mttf, mttr, repair).mttdl().unwrap().hours;
            assert!(
                close(got, total, 1e-10),
                "RS({k},{m}) {repair:?}: {got} vs {total}"
            );
        }
    }
}

#[test]
fn raid5_with_unrecoverable_read_errors_matches_its_closed_form() {
    for uber in [1e-15, 1e-14, 1e-13] {
        let mut a = array(7, 1, 1e6, 24.0, Repair::Sequential);
        a.uber = uber;
        let p = a.critical_ure_probability();
        // The rebuild reads 7 devices of 4 TB: 2.24e14 bits.
        assert!(close(p, 1.0 - (-2.24e14 * uber).exp(), 1e-6), "{p}");
        let (n, l, mu) = (8.0, 1e-6, 1.0 / 24.0);
        let exact = ((n - 1.0) * l + mu + (1.0 - p) * n * l) / (n * l * ((n - 1.0) * l + p * mu));
        let got = a.mttdl().unwrap().hours;
        assert!(close(got, exact, 1e-12), "uber {uber}: {got} vs {exact}");
    }
    // UREs dominate a large RAID-5: with 1e-14 per bit, MTTDL is close to MTTF / (n p).
    let mut a = array(7, 1, 1e6, 24.0, Repair::Sequential);
    a.uber = 1e-14;
    let p = a.critical_ure_probability();
    assert!(p > 0.85, "{p}");
    assert!(close(a.mttdl().unwrap().hours, 1e6 / (8.0 * p), 0.01));
}

#[test]
fn bad_inputs_are_errors_not_panics() {
    let mut a = array(4, 1, 1e6, 10.0, Repair::Sequential);
    a.mttf_hours = -1.0;
    assert!(a.mttdl().is_err());
    let mut a = array(0, 1, 1e6, 10.0, Repair::Sequential);
    assert!(a.mttdl().unwrap_err().to_string().contains("k >= 1"));
    a.k = 4;
    a.uber = 1.5;
    assert!(a.mttdl().is_err());
    assert!(array(4, 1, 1e6, 10.0, Repair::Sequential)
        .monte_carlo(1, 1)
        .is_err());
    let c = ClusterModel {
        osds: 5,
        k: 4,
        m: 2,
        segments: 10.0,
        chunk_bytes: 1e6,
        mttf_hours: 1e5,
        osd_recovery_bytes_per_sec: 1e8,
        detect_hours: 0.5,
        uber: 0.0,
    };
    assert!(c
        .mttdl()
        .unwrap_err()
        .to_string()
        .contains("at least n = 6 OSDs"));
}

// --- Monte-Carlo --------------------------------------------------------------------------------

#[test]
fn array_monte_carlo_agrees_with_the_chain() {
    let s = seed();
    let cases = [
        ("RAID-5 4+1", array(4, 1, 1000.0, 50.0, Repair::Sequential)),
        (
            "RAID-6 6+2 sequential",
            array(6, 2, 500.0, 40.0, Repair::Sequential),
        ),
        (
            "RAID-6 6+2 parallel",
            array(6, 2, 500.0, 40.0, Repair::Parallel),
        ),
        (
            "RS(6,3) parallel",
            array(6, 3, 300.0, 40.0, Repair::Parallel),
        ),
    ];
    for (i, (what, a)) in cases.iter().enumerate() {
        let exact = a.mttdl().unwrap().hours;
        let mc = a.monte_carlo(20_000, s + i as u64).unwrap();
        assert_agrees(what, exact, &mc, 0.03);
    }
    // With unrecoverable read errors (p = 0.27 per critical rebuild: 4 devices of 1e12 bytes at
    // 1e-14 per bit... 3.2e13 bits → p = 1 - e^-0.32).
    let mut a = array(4, 1, 1000.0, 50.0, Repair::Sequential);
    a.device_bytes = 1e12;
    a.uber = 1e-14;
    assert!(close(
        a.critical_ure_probability(),
        1.0 - (-0.32f64).exp(),
        1e-9
    ));
    let mut b = array(6, 2, 500.0, 40.0, Repair::Parallel);
    b.device_bytes = 1e12;
    b.uber = 1e-14;
    for (what, a) in [("RAID-5 4+1 URE", a), ("RAID-6 6+2 URE", b)] {
        let exact = a.mttdl().unwrap().hours;
        let mc = a.monte_carlo(20_000, s ^ 0xabc).unwrap();
        assert_agrees(what, exact, &mc, 0.03);
    }
}

#[test]
fn monte_carlo_rejects_a_wrong_chain() {
    // The check can fail: a chain with device MTTF 15 % off lies outside the interval.
    let a = array(6, 2, 500.0, 40.0, Repair::Sequential);
    let mc = a.monte_carlo(20_000, seed()).unwrap();
    let mut wrong = a.clone();
    wrong.mttf_hours *= 0.85;
    assert!(!mc.contains(wrong.mttdl().unwrap().hours, Z));
    // ... and so does the parallel-repair chain for a sequential-repair array.
    let mut wrong = a.clone();
    wrong.repair = Repair::Parallel;
    assert!(!mc.contains(wrong.mttdl().unwrap().hours, Z));
}

#[test]
fn monte_carlo_replays_from_its_seed() {
    let a = array(4, 1, 1000.0, 50.0, Repair::Sequential);
    assert_eq!(
        a.monte_carlo(500, 9).unwrap(),
        a.monte_carlo(500, 9).unwrap()
    );
    assert_ne!(
        a.monte_carlo(500, 9).unwrap(),
        a.monte_carlo(500, 10).unwrap()
    );
}

fn eplog(repair: Repair) -> EplogModel {
    EplogModel {
        main: array(4, 2, 400.0, 30.0, repair),
        log_mttf_hours: 300.0,
        log_mttr_hours: 20.0,
        dirty_hours: 10.0,
        clean_hours: 5.0,
        commit_hours: 2.0,
    }
}

#[test]
fn eplog_monte_carlo_agrees_with_the_chain() {
    let s = seed();
    for (i, repair) in [Repair::Sequential, Repair::Parallel]
        .into_iter()
        .enumerate()
    {
        let e = eplog(repair);
        let exact = e.mttdl().unwrap().hours;
        let mc = e.monte_carlo(20_000, s + 100 + i as u64).unwrap();
        assert_agrees(&format!("EPLOG 4+2 + 2 log, {repair:?}"), exact, &mc, 0.03);
    }
    let mut e = eplog(Repair::Sequential);
    e.main.device_bytes = 1e12;
    e.main.uber = 1e-14;
    let exact = e.mttdl().unwrap().hours;
    let mc = e.monte_carlo(20_000, s + 102).unwrap();
    assert_agrees("EPLOG 4+2 + 2 log, URE", exact, &mc, 0.03);
}

#[test]
fn eplog_limits() {
    // Log devices only take reliability away: uncommitted updates also need them.
    for repair in [Repair::Sequential, Repair::Parallel] {
        let e = eplog(repair);
        let with_logs = e.mttdl().unwrap().hours;
        let main_only = e.main.mttdl().unwrap().hours;
        assert!(with_logs < main_only, "{with_logs} vs {main_only}");
        // Almost never uncommitted: the main array alone.
        let mut e2 = e.clone();
        e2.dirty_hours = 1e-9;
        e2.clean_hours = 1e9;
        assert!(close(e2.mttdl().unwrap().hours, main_only, 1e-6));
    }
    // Always uncommitted, no commit on failure, logs like main devices, parallel repair: an array
    // of n + m devices tolerating m failures.
    let mut e = eplog(Repair::Parallel);
    e.log_mttf_hours = e.main.mttf_hours;
    e.log_mttr_hours = e.main.mttr_hours;
    e.dirty_hours = 1e12;
    e.commit_hours = 1e12;
    e.clean_hours = 1e-9;
    let wide = array(6, 2, 400.0, 30.0, Repair::Parallel)
        .mttdl()
        .unwrap()
        .hours;
    assert!(close(e.mttdl().unwrap().hours, wide, 1e-6));
    // A quicker forced commit shortens the exposure: MTTDL grows as the commit time shrinks.
    let mut fast = eplog(Repair::Sequential);
    fast.commit_hours = 0.01;
    let mut slow = fast.clone();
    slow.commit_hours = 20.0;
    assert!(fast.mttdl().unwrap().hours > slow.mttdl().unwrap().hours);
}

fn cluster(osds: usize, k: usize, m: usize, segments: f64) -> ClusterModel {
    ClusterModel {
        osds,
        k,
        m,
        segments,
        chunk_bytes: 64e6,
        mttf_hours: 200.0,
        // 100 MB/s per OSD; detection 1 h.
        osd_recovery_bytes_per_sec: 1e6,
        detect_hours: 1.0,
        uber: 0.0,
    }
}

#[test]
fn cluster_with_n_osds_is_a_birth_death_chain() {
    // N = n: every segment is on every OSD, so loss is exactly the (m+1)-th concurrent failure,
    // with the shared-recovery rate ρ_j = j / (D + j·C/((N-j)·r)).
    let c = cluster(6, 4, 2, 300.0);
    let cb = c.osd_bytes();
    assert!(close(cb, 300.0 * 64e6, 1e-12));
    let mut tau_prev = 0.0;
    let mut total = 0.0;
    for j in 0..=2usize {
        let lj = (6 - j) as f64 / 200.0;
        let rho = if j == 0 {
            0.0
        } else {
            j as f64 / (1.0 + j as f64 * cb / ((6 - j) as f64 * 1e6) / 3600.0)
        };
        let tau = 1.0 / lj + rho / lj * tau_prev;
        total += tau;
        tau_prev = tau;
    }
    assert!(close(c.mttdl().unwrap().hours, total, 1e-10));
}

#[test]
fn cluster_loss_probability_per_failure() {
    // N = 10, RS(2,1): a segment's 3 chunks cover C(3,2) = 3 of the C(10,2) = 45 pairs; with
    // S segments a second failure loses data with 1 - (1 - 3/45)^S (by hand: S = 10 → 0.4984).
    let c = cluster(10, 2, 1, 10.0);
    assert_eq!(c.loss_on_failure(0), 0.0);
    assert!(close(
        c.loss_on_failure(1),
        1.0 - (42.0f64 / 45.0).powi(10),
        1e-12
    ));
    // Given that pair survived, the third failure: a triple covers a segment when the segment
    // has >= 2 chunks in it: h_3 = (C(3,2)·7 + C(3,3)) / C(10,3) = 22/120.
    let h2 = 3.0 / 45.0;
    let h3 = 22.0 / 120.0;
    let want = 1.0 - ((1.0f64 - h3) / (1.0 - h2)).powi(10);
    assert!(close(c.loss_on_failure(2), want, 1e-12));
}

#[test]
fn cluster_monte_carlo_agrees_with_the_chain() {
    let s = seed();
    // Many segments: every (m+1)-set of OSDs holds a segment (the chain's random-placement
    // loss probabilities are near 1 and exact for the first fatal failure).
    let cases = [
        (
            "12 OSDs RS(4,2) 400 segments",
            cluster(12, 4, 2, 400.0),
            8_000,
        ),
        (
            "10 OSDs RS(2,1) 10 segments",
            cluster(10, 2, 1, 10.0),
            8_000,
        ),
    ];
    for (i, (what, c, runs)) in cases.into_iter().enumerate() {
        let exact = c.mttdl().unwrap().hours;
        let mc = c.monte_carlo(runs, s + 200 + i as u64).unwrap();
        assert_agrees(what, exact, &mc, 0.05);
    }
}

/// The chain assumes exponential recovery times; real rebuilds are closer to fixed durations. The
/// fluid Monte-Carlo (`RepairTimes::Deterministic`) rebuilds each failed OSD's bytes at the
/// survivors' shared pace, so a lone failure takes exactly R = D + C/((N-1)·r).
///
/// With N = n and m = 1 the deterministic case has a closed form of its own (renewal argument):
/// each cycle waits 1/(nλ) for a failure, then loses data if one of the other n-1 OSDs fails
/// within R, with q = 1 - e^{-(n-1)λR}; the degraded time per cycle is q/((n-1)λ), so
/// MTTDL = (1/(nλ) + q/((n-1)λ)) / q. The fluid Monte-Carlo must agree with it (a check of the
/// fluid model). It is *shorter* than the chain's ((2n-1)λ + μ)/(n(n-1)λ²) with μ = 1/R, by
/// about 2 % here: a second failure within a fixed R has probability 1 - e^{-aR} ≈ aR - (aR)²/2,
/// within an exponential one a/(a + μ) ≈ aR - (aR)².
///
/// With m = 2 (measured, docs/reliability.md): fixed-work recovery agrees with the chain within the
/// Monte-Carlo's interval (the shorter tail of fixed durations is offset by two failed OSDs sharing
/// the survivors' pace, which the chain spreads as ρ_2), and widely spread work (lognormal σ = 1.5,
/// median 0.32 of the mean) lives longer than the chain says (measured +17 %): most rebuilds are
/// short. A lognormal factor without its −σ²/2 (mean e^{σ²/2}, 3× the work) would shorten the
/// MTTDL many times and fail the check.
#[test]
fn cluster_repair_time_distribution_against_the_exponential_chain() {
    let s = seed();
    // m = 1, N = n = 6: the renewal closed form.
    let c = cluster(6, 5, 1, 300.0);
    let lambda = 1.0 / c.mttf_hours;
    let r = c.single_rebuild_hours();
    let q = -(-(5.0 * lambda * r)).exp_m1();
    let renewal = (1.0 / (6.0 * lambda) + q / (5.0 * lambda)) / q;
    let chain = c.mttdl().unwrap().hours;
    let mc = c
        .monte_carlo_with(6_000, s + 300, RepairTimes::Deterministic)
        .unwrap();
    assert_agrees(
        "N = n = 6, m = 1, deterministic repairs",
        renewal,
        &mc,
        0.05,
    );
    eprintln!("m = 1: chain {chain:.1} h, deterministic closed form {renewal:.1} h");
    assert!(renewal < chain && renewal > 0.97 * chain);

    // m = 2, N = n = 6, detection 0.1 h (the rebuild itself dominates R): deterministic repairs
    // outlive the chain by more than the interval.
    let c = ClusterModel {
        detect_hours: 0.1,
        mttf_hours: 50.0,
        ..cluster(6, 4, 2, 300.0)
    };
    let chain = c.mttdl().unwrap().hours;
    let runs = |times, seed| c.monte_carlo_with(8_000, seed, times).unwrap();
    let det = runs(RepairTimes::Deterministic, s + 301);
    assert_agrees(
        "N = n = 6, m = 2, deterministic fluid repairs",
        chain,
        &det,
        0.05,
    );
    // The exponential path of the same entry point is the chain's own check.
    let exp = runs(RepairTimes::Exponential, s + 302);
    assert_agrees("N = n = 6, m = 2, exponential repairs", chain, &exp, 0.06);
    // Widely spread rebuild work: longer than the chain, within 1.5×.
    let wide = runs(RepairTimes::Lognormal { sigma: 1.5 }, s + 303);
    eprintln!("m = 2: lognormal sigma 1.5 {}", mean_pm(&wide));
    let (lo, hi) = wide.interval_hours(Z);
    assert!(
        lo > chain && hi < 1.5 * chain,
        "lognormal {wide:?} vs chain {chain}"
    );
    assert!(wide.failures > wide.runs);
    assert!("lognormal:0".parse::<RepairTimes>().is_err());
    assert_eq!(
        "lognormal:0.5".parse::<RepairTimes>().unwrap(),
        RepairTimes::Lognormal { sigma: 0.5 }
    );
}

/// Latent sector errors with a scrub interval: the averaged probability by hand, the chain against
/// a Monte-Carlo that draws the scrub phase and the first latent error at each critical rebuild,
/// and the effect of scrubbing more often.
#[test]
fn latent_errors_and_scrub_interval() {
    // By hand: k = 4, ν = 1e-3 per device-hour, T = 100 h: x = kνT = 0.4,
    // P(latent on a read device) = 1 − (1 − e^{−0.4}) / 0.4 = 0.175800.
    let mut a = array(4, 1, 1000.0, 50.0, Repair::Sequential);
    a.latent_per_hour = 1e-3;
    a.scrub_hours = 100.0;
    let p = a.critical_latent_probability();
    assert!(close(p, 1.0 - (1.0 - (-0.4f64).exp()) / 0.4, 1e-12), "{p}");
    // RAID-5 with a loss probability p on the critical rebuild: the URE closed form applies.
    let (n, l, mu) = (5.0, 1e-3, 1.0 / 50.0);
    let closed = ((n - 1.0) * l + mu + (1.0 - p) * n * l) / (n * l * ((n - 1.0) * l + p * mu));
    let chain = a.mttdl().unwrap().hours;
    assert!(close(chain, closed, 1e-12), "{chain} vs {closed}");
    let mc = a.monte_carlo(20_000, seed() + 500).unwrap();
    assert_agrees(
        "RAID-5 4+1 with latent errors, scrub every 100 h",
        chain,
        &mc,
        0.05,
    );
    // A wrong averaging (latent errors assumed present with probability νT·k, i.e. never
    // repaired within the interval's mean age) is rejected by the same Monte-Carlo.
    let wrong_p = 0.4;
    let wrong =
        ((n - 1.0) * l + mu + (1.0 - wrong_p) * n * l) / (n * l * ((n - 1.0) * l + wrong_p * mu));
    assert!(!mc.contains(wrong, Z), "{wrong}");
    // RAID-6 checked by Monte-Carlo as well; scrubbing 10× as often lengthens the MTTDL.
    let mut b = array(4, 2, 1000.0, 50.0, Repair::Parallel);
    b.latent_per_hour = 1e-3;
    b.scrub_hours = 500.0;
    let chain6 = b.mttdl().unwrap().hours;
    let mc6 = b.monte_carlo(6_000, seed() + 501).unwrap();
    assert_agrees(
        "RAID-6 4+2 with latent errors, scrub every 500 h",
        chain6,
        &mc6,
        0.06,
    );
    let often = ArrayModel {
        scrub_hours: 50.0,
        ..b.clone()
    };
    assert!(often.mttdl().unwrap().hours > 1.5 * chain6);
    // A latent rate without a scrub interval is an error, not a silent zero.
    let bad = ArrayModel {
        scrub_hours: 0.0,
        ..b
    };
    assert!(bad.mttdl().is_err());
}

/// P(loss within t) from the chain's transient solution against the Monte-Carlo's empirical
/// distribution of loss times, on an accelerated RAID-5 where the mission time is a few repairs
/// long: the exponential approximation 1 - e^{-t/MTTDL} is outside the interval there (the array
/// first needs a failure, then a second within a rebuild), the transient solution inside.
#[test]
fn loss_probability_within_a_mission_matches_monte_carlo() {
    let a = array(4, 1, 1000.0, 50.0, Repair::Sequential);
    let chain = a.chain().unwrap();
    let mttdl = a.mttdl().unwrap();
    let runs = 20_000;
    let samples = a.monte_carlo_samples(runs, seed() + 400).unwrap();
    for t in [20.0, 100.0, 1000.0, 4000.0] {
        let exact = chain.loss_probability_within(0, t).unwrap();
        let frac = samples.iter().filter(|&&x| x <= t).count() as f64 / runs as f64;
        let se = (exact * (1.0 - exact) / runs as f64).sqrt();
        let approx = mttdl.loss_probability(t / HOURS_PER_YEAR);
        eprintln!(
            "t {t} h: transient {exact:.5}, Monte-Carlo {frac:.5} ± {:.5}, exponential {approx:.5}",
            Z * se
        );
        assert!(
            (frac - exact).abs() <= Z * se,
            "t {t}: transient {exact} vs Monte-Carlo {frac}"
        );
        if t <= 100.0 {
            assert!(
                (frac - approx).abs() > Z * se,
                "t {t}: the exponential approximation {approx} should be off"
            );
        }
    }
}

#[test]
fn more_osds_recover_faster() {
    // Same data per OSD (segments grow with N): recovery spreads over more survivors.
    let small = cluster(12, 4, 2, 12.0 * 100.0 / 6.0);
    let big = cluster(48, 4, 2, 48.0 * 100.0 / 6.0);
    assert!(close(small.osd_bytes(), big.osd_bytes(), 1e-12));
    assert!(big.single_rebuild_hours() < small.single_rebuild_hours());
}

// --- RainFS Table 2.1 ---------------------------------------------------------------------------

#[test]
fn rainfs_table_2_1_matches_the_seed() {
    // The seed's table, row by row (RAID 5 / RAID 6 × Repl. 1, 2, 3), "disks / racks".
    let seed_table = [
        (
            "DN-on-Client",
            ["1 / 0", "2 / 0", "3 / 1", "5 / 1", "- / -", "- / -"],
        ),
        (
            "DN-on-NAS Node",
            ["1 / 0", "2 / 0", "3 / 1", "5 / 1", "5 / 2", "8 / 2"],
        ),
        (
            "No HDFS",
            ["1 / 0", "2 / 0", "- / -", "- / -", "- / -", "- / -"],
        ),
        (
            "RainFS",
            ["1 / 0", "2 / 0", "3 / 1", "5 / 1", "5 / 2", "8 / 2"],
        ),
    ];
    let t = rainfs::table_2_1(3);
    assert_eq!(t.rows.len(), 4);
    for (row, (want_name, want)) in t.rows.iter().zip(seed_table) {
        assert_eq!(row.architecture, want_name);
        let got: Vec<String> = row
            .cells
            .iter()
            .map(|c| match c {
                Some(t) => format!("{} / {}", t.disks, t.racks),
                None => "- / -".into(),
            })
            .collect();
        assert_eq!(got, want, "{want_name}");
    }
    let text = t.to_string();
    assert!(text.contains("RainFS") && text.contains("8 / 2"), "{text}");
    // With only 2 NAS systems nobody runs 3 replicas.
    let t2 = rainfs::table_2_1(2);
    assert!(t2
        .rows
        .iter()
        .all(|r| r.cells[4].is_none() && r.cells[5].is_none()));
}

/// The array and EPLOG Monte-Carlos with non-exponential rebuild durations (mean MTTR): RAID-5
/// with every rebuild taking exactly R against the renewal closed form (a second failure within
/// a fixed R has probability q = 1 − e^{−(n−1)λR}, so MTTDL = (1/(nλ) + q/((n−1)λ)) / q), slightly
/// below the chain; widely spread (lognormal) durations outlive it (q = 1 − E[e^{−(n−1)λR}] is
/// smaller by Jensen); the exponential kind replays `monte_carlo` exactly. RAID-6 with fixed
/// rebuilds: parallel agrees with the chain, sequential lives nearly twice as long (the chain's
/// memoryless rebuild has a whole mean left when the next failure comes, a fixed one half of it);
/// EPLOG (sequential, RAID-6 main array) longer than its chain (docs/reliability.md).
#[test]
fn array_and_eplog_repair_time_distribution_against_the_chain() {
    let s = seed();
    let a = array(5, 1, 200.0, 2.0, Repair::Sequential);
    let (lambda, r) = (1.0 / a.mttf_hours, a.mttr_hours);
    let q = -(-(5.0 * lambda * r)).exp_m1();
    let renewal = (1.0 / (6.0 * lambda) + q / (5.0 * lambda)) / q;
    let chain = a.mttdl().unwrap().hours;
    assert!(
        renewal < chain && renewal > 0.97 * chain,
        "{renewal} vs {chain}"
    );
    let runs = |times, seed| a.monte_carlo_with(20_000, seed, times).unwrap();
    let det = runs(RepairTimes::Deterministic, s + 400);
    assert_agrees("RAID-5 5+1, fixed rebuilds", renewal, &det, 0.05);
    let wide = runs(RepairTimes::Lognormal { sigma: 1.5 }, s + 401);
    let (lo, _) = wide.interval_hours(Z);
    eprintln!(
        "RAID-5: chain {chain:.1} h, fixed R closed form {renewal:.1} h, lognormal 1.5 {}",
        mean_pm(&wide)
    );
    assert!(lo > chain, "lognormal {wide:?} vs chain {chain}");
    assert_eq!(
        a.monte_carlo_with(2_000, s + 402, RepairTimes::Exponential)
            .unwrap(),
        a.monte_carlo(2_000, s + 402).unwrap()
    );
    assert!(a
        .monte_carlo_with(2_000, s, RepairTimes::Lognormal { sigma: -1.0 })
        .is_err());

    for repair in [Repair::Sequential, Repair::Parallel] {
        let r6 = array(4, 2, 50.0, 1.0, repair);
        let chain = r6.mttdl().unwrap().hours;
        let det = r6
            .monte_carlo_with(8_000, s + 403, RepairTimes::Deterministic)
            .unwrap();
        log_fixed_rebuilds(&format!("RAID-6 4+2 {repair:?}"), chain, &det);
        if repair == Repair::Parallel {
            // Leading order: a second failure lands uniformly inside the first rebuild, so state 2
            // lasts the first rebuild's remainder, R/2 on average: the chain's 1/(2μ) exactly.
            assert_agrees("RAID-6 4+2 parallel, fixed rebuilds", chain, &det, 0.06);
        } else {
            // The chain's state 2 lasts a whole exponential rebuild (mean R, memoryless); a fixed
            // rebuild has only its remainder left (mean R/2): about half the third-failure risk,
            // so nearly twice the MTTDL (second-order terms in λR pull it below 2).
            let (lo, hi) = det.interval_hours(Z);
            assert!(lo > 1.5 * chain && hi < 2.0 * chain, "{det:?} vs {chain}");
        }
    }
    let e = eplog(Repair::Sequential);
    let chain = e.mttdl().unwrap().hours;
    let det = e
        .monte_carlo_with(8_000, s + 404, RepairTimes::Deterministic)
        .unwrap();
    log_fixed_rebuilds("EPLOG", chain, &det);
    // Sequential rebuilds of its RAID-6 main array (and the log devices): longer than the chain.
    let (lo, _) = det.interval_hours(Z);
    assert!(lo > chain, "{det:?} vs {chain}");
}
