//! `ecstack reliability`: the human and JSON reports carry the models' figures (checked against a
//! closed form here, not against the library), RainFS Table 2.1 prints the seed's values, and bad
//! inputs are one error line.

use std::process::Command;

fn ecstack(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_ecstack"))
        .args(args)
        .output()
        .expect("run ecstack")
}

/// `ecstack reliability array` of a RAID-5 (k+1) with no URE, plus `extra` options.
fn raid5(k: &str, mttf_hours: &str, mttr_hours: &str, extra: &[&str]) -> String {
    let mut args = vec![
        "reliability",
        "array",
        "--k",
        k,
        "--m",
        "1",
        "--mttf-hours",
        mttf_hours,
        "--mttr-hours",
        mttr_hours,
        "--uber",
        "0",
    ];
    args.extend_from_slice(extra);
    ok(&args)
}

fn ok(args: &[&str]) -> String {
    let o = ecstack(args);
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

#[test]
fn raid5_json_matches_the_closed_form() {
    // RAID-5 of 8 devices, MTTF 1e6 h, MTTR 24 h, no URE:
    // MTTDL = ((2n-1)λ + μ) / (n(n-1)λ²) = (15e-6 + 1/24) / (56e-12) hours.
    let out = raid5("7", "1e6", "24", &["--years", "5", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let want = (15e-6 + 1.0 / 24.0) / 56e-12;
    let got = v["mttdl_hours"].as_f64().unwrap();
    assert!((got / want - 1.0).abs() < 1e-9, "{got} vs {want}");
    assert!((v["mttdl_years"].as_f64().unwrap() - want / 8766.0).abs() < 1e-3);
    let exponential = 1.0 - (-5.0 * 8766.0 / want).exp();
    let pe = v["loss_probability_exponential"].as_f64().unwrap();
    assert!((pe - exponential).abs() < 1e-12);
    // The transient solution: with MTTDL ≫ MTTR the time to loss is nearly exponential, and
    // slightly later (the array must first lose a device): within 0.1 %, and not above it.
    let p = v["loss_probability"].as_f64().unwrap();
    assert!(
        p <= exponential && p > 0.999 * exponential,
        "{p} vs {exponential}"
    );
    assert_eq!(v["model"]["repair"], "sequential");
}

#[test]
fn human_reports_and_monte_carlo() {
    let out = raid5("4", "1000", "50", &["--mc-runs", "4000", "--seed", "3"]);
    assert!(out.contains("RAID-5 (4+1)"), "{out}");
    // 1450 h = 0.1654 years (closed form above with n = 5, λ = 1e-3, μ = 0.02).
    assert!(out.contains("MTTDL: 0.1654 years (1450 hours)"), "{out}");
    assert!(out.contains("Monte-Carlo (4000 runs, seed 3"), "{out}");
    assert!(out.contains("the chain is inside"), "{out}");
    // Fixed rebuilds: the renewal closed form (1/(nλ) + q/((n−1)λ))/q, q = 1 − e^{−(n−1)λR},
    // = 1353 h here, inside the Monte-Carlo's interval; the report names the durations.
    let v: serde_json::Value = serde_json::from_str(&raid5(
        "4",
        "1000",
        "50",
        &[
            "--mc-runs",
            "4000",
            "--seed",
            "3",
            "--repair-times",
            "deterministic",
            "--json",
        ],
    ))
    .unwrap();
    let q = -(-0.2f64).exp_m1();
    let renewal = (200.0 + q / 4e-3) / q;
    let mc = &v["monte_carlo"];
    assert_eq!(mc["repair_times"]["kind"], "deterministic", "{mc}");
    let (lo, hi) = (
        mc["interval_99_hours"][0].as_f64().unwrap(),
        mc["interval_99_hours"][1].as_f64().unwrap(),
    );
    assert!(
        lo < renewal && renewal < hi,
        "{renewal} outside [{lo}, {hi}]"
    );
    let out = raid5(
        "4",
        "1000",
        "50",
        &["--mc-runs", "100", "--repair-times", "lognormal:1.5"],
    );
    assert!(
        out.contains("rebuild durations: lognormal, sigma 1.5"),
        "{out}"
    );
    let e = ok(&["reliability", "eplog"]);
    assert!(e.contains("the main array alone"), "{e}");
    let c = ok(&["reliability", "cluster", "--osds", "12", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&c).unwrap();
    assert!(v["mttdl_years"].as_f64().unwrap() > 0.0);
    // 4 TiB per OSD over 11 survivors at 50 MB/s each, plus 15 minutes of detection.
    let want = 0.25 + 4.0 * 1024f64.powi(4) / (11.0 * 50e6) / 3600.0;
    let got = v["model"]["single_rebuild_hours"].as_f64().unwrap();
    assert!((got - want).abs() < 1e-9, "{got} vs {want}");
}

/// Latent sector errors with a scrub interval, by hand: RAID-5 4+1, λ = 1e-3/h, μ = 1/50 h,
/// ν = 8.766 per year = 1e-3 per hour, scrub every 100 h: a rebuild without redundancy meets a
/// latent error with p = 1 − (1 − e^{−0.4})/0.4, and the RAID-5-with-URE closed form applies:
/// MTTDL = ((n−1)λ + μ + (1−p)nλ) / (nλ((n−1)λ + pμ)).
#[test]
fn latent_errors_and_scrub_in_the_report() {
    let out = raid5(
        "4",
        "1000",
        "50",
        &[
            "--latent-per-year",
            "8.766",
            "--scrub-hours",
            "100",
            "--json",
        ],
    );
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let p = 1.0 - (1.0 - (-0.4f64).exp()) / 0.4;
    let (n, l, mu) = (5.0, 1e-3, 0.02);
    let want = ((n - 1.0) * l + mu + (1.0 - p) * n * l) / (n * l * ((n - 1.0) * l + p * mu));
    let got = v["mttdl_hours"].as_f64().unwrap();
    assert!((got / want - 1.0).abs() < 1e-9, "{got} vs {want}");
    assert_eq!(v["model"]["scrub_hours"], 100.0);
}

#[test]
fn table_2_1_prints_the_seeds_values() {
    let t = ok(&["reliability", "table"]);
    let rows: Vec<String> = t
        .lines()
        .skip(3)
        .map(|l| l.split('|').map(str::trim).collect::<Vec<_>>().join("|"))
        .collect();
    assert_eq!(
        rows,
        [
            "DN-on-Client|1 / 0|2 / 0|3 / 1|5 / 1|- / -|- / -",
            "DN-on-NAS Node|1 / 0|2 / 0|3 / 1|5 / 1|5 / 2|8 / 2",
            "No HDFS|1 / 0|2 / 0|- / -|- / -|- / -|- / -",
            "RainFS|1 / 0|2 / 0|3 / 1|5 / 1|5 / 2|8 / 2",
        ]
    );
}

#[test]
fn bad_inputs_are_one_error_line() {
    let cases: [(&[&str], &str); 14] = [
        (
            &["reliability", "array", "--latent-per-year", "1"],
            "scrub interval",
        ),
        (
            &["reliability", "cluster", "--repair-times", "weibull"],
            "repair times must be",
        ),
        (&["reliability", "array", "--afr", "2"], "AFR"),
        (&["reliability", "array", "--mttr-hours", "NaN"], "MTTR"),
        (
            &["reliability", "array", "--rebuild-mb-s", "0"],
            "recovery throughput",
        ),
        (&["reliability", "array", "--uber", "1.5"], "per-bit"),
        (&["reliability", "array", "--k", "0"], "k >= 1"),
        (
            &["reliability", "array", "--repair", "later"],
            "sequential or parallel",
        ),
        (
            &["reliability", "array", "--device-size", "4Q"],
            "--device-size",
        ),
        (&["reliability", "array", "--mc-runs", "1"], "runs"),
        (
            &["reliability", "eplog", "--commit-seconds", "inf"],
            "commit",
        ),
        (&["reliability", "eplog", "--m", "20"], "m <= 16"),
        (
            &["reliability", "cluster", "--osds", "5"],
            "at least n = 6 OSDs",
        ),
        (&["reliability", "table", "--nas", "0"], "--nas"),
    ];
    for (args, want) in cases {
        let o = ecstack(args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{args:?} succeeded");
        let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(lines.len(), 1, "{args:?}: {err}");
        assert!(
            lines[0].starts_with("ecstack: error:") && lines[0].contains(want),
            "{args:?}: wanted {want:?} in {err}"
        );
    }
}
