//! Unit tests of the report logic over hand-made rows (no runs).

use super::report::peak_table;
use super::*;

fn row(variant: Variant, clients: usize, commit: Commit, degraded: bool, rps: f64) -> RunRow {
    RunRow {
        testbed: Backing::Testbed(Testbed::Files),
        trace: TraceName::Fin,
        setting: Setting::SIX_TWO,
        scheme: variant,
        clients,
        batch: None,
        batch_us: None,
        dev_ops_per_req: 0.0,
        cpu_load: 0.0,
        commit,
        degraded,
        requests: 1000,
        seconds: 1000.0 / rps,
        requests_per_s: rps,
        ssd_write_bytes: 0,
        ssd_read_bytes: 0,
        log_write_bytes: 0,
        gc_per_ssd: 0.0,
        commit_seconds: 0.0,
        commits: 0,
        ssd_blocks: 0,
    }
}

fn rows() -> Vec<RunRow> {
    vec![
        row(Variant::PL, 1, Commit::Nil, false, 5_000.0),
        row(Variant::PL, 32, Commit::Nil, false, 21_000.0),
        row(Variant::PL, 128, Commit::Nil, false, 20_000.0),
        row(Variant::EPLOG, 1, Commit::Nil, false, 9_000.0),
        row(Variant::EPLOG, 1, Commit::All, false, 90_000.0),
        row(Variant::EPLOG, 1, Commit::Every(10_000), true, 95_000.0),
        row(Variant::EPLOG, 128, Commit::Nil, false, 60_000.0),
    ]
}

#[test]
fn peak_is_the_fastest_plain_run_over_all_client_counts() {
    let rows = rows();
    let p = peak(&rows, Variant::PL).unwrap();
    assert_eq!((p.clients, p.requests_per_s), (32, 21_000.0));
    // Runs with commits or failures are not the "as fast as possible" figure.
    let e = peak(&rows, Variant::EPLOG).unwrap();
    assert_eq!((e.clients, e.requests_per_s), (128, 60_000.0));
    assert!(peak(&rows, Variant::MD).is_none());
    assert_eq!(client_counts(&rows), vec![1, 32, 128]);
    let mut s = String::new();
    peak_table(&mut s, "peak", &rows);
    assert!(s.contains("| pl | 21000 | 32 | - | 1.00 |"), "{s}");
    assert!(s.contains("| eplog | 60000 | 128 | - | 2.86 |"), "{s}");
    // One client count: no peak table.
    let mut one = String::new();
    peak_table(&mut one, "peak", &rows[..1]);
    assert!(one.is_empty());
}

#[test]
fn typed_keys_keep_their_labels_in_json() {
    let r = row(
        Variant::EplogNoStripeBuffer,
        4,
        Commit::Every(10_000),
        true,
        1.0,
    );
    let v = serde_json::to_value(&r).unwrap();
    assert_eq!(v["scheme"], "eplog-nosb");
    assert_eq!(v["commit"], "10K");
    assert_eq!(v["setting"], "(6+2)");
    assert_eq!(v["trace"], "FIN");
    assert_eq!(v["testbed"], "O_DIRECT files");
    assert_eq!(Variant::EplogDeviceBuffer(16).to_string(), "eplog+buf16");
    assert_eq!(
        r.key(),
        RunKey {
            commit: Commit::Every(10_000),
            degraded: true,
            ..RunKey::fin(Variant::EplogNoStripeBuffer, 4)
        }
    );
}

#[test]
fn exp4_targets_per_client_count_are_primary_and_peaks_secondary() {
    let rows = rows();
    let ts = targets::exp4(&rows, Backing::Testbed(Testbed::Files));
    let primary: Vec<(&str, bool)> = ts
        .iter()
        .filter(|t| t.figure == Figure::Primary)
        .map(|t| (t.what.as_str(), t.met))
        .collect();
    assert_eq!(
        primary,
        [
            ("requests/s eplog / pl (O_DIRECT files, 1 client)", false),
            ("requests/s eplog / pl (O_DIRECT files, 128 clients)", true),
        ]
    );
    // The peak row comes after every primary row and is labelled secondary, met or not.
    let last = ts.last().unwrap();
    assert_eq!(last.figure, Figure::Secondary);
    assert!(
        last.what.contains("each at its peak over 1/32/128 clients"),
        "{}",
        last.what
    );
    assert!((last.ratio - 60_000.0 / 21_000.0).abs() < 1e-9);
    assert_eq!(
        exp4_summary(&ts),
        ["requests/s eplog >= 2 x pl on O_DIRECT files: met at 128 client(s), missed at 1 client(s)"]
    );
    let report = Report {
        scale: 0.01,
        quick: true,
        traces: Vec::new(),
        sim: Vec::new(),
        perf: rows,
        paper: Vec::new(),
        recovery: Vec::new(),
        kv: Vec::new(),
        targets: ts,
        seconds: 1.0,
    };
    let md = report.markdown();
    let at = |needle: &str| {
        md.find(needle)
            .unwrap_or_else(|| panic!("{needle} missing:\n{md}"))
    };
    // Primary rows, then the plain statement, then the secondary heading with the peak row.
    let primary_row =
        at("| requests/s eplog / pl (O_DIRECT files, 128 clients) | 3.00 | >= 2 | yes |");
    let missed_row = at("| requests/s eplog / pl (O_DIRECT files, 1 client) | 1.80 | >= 2 | no |");
    let summary = at("met at 128 client(s), missed at 1 client(s)");
    let secondary = at("#### Secondary: each scheme at its own peak client count");
    let peak_row = at("each at its peak over 1/32/128 clients");
    assert!(missed_row < primary_row && primary_row < summary && summary < secondary);
    assert!(secondary < peak_row, "{md}");
    assert!(
        md.find("| requests/s eplog / pl (O_DIRECT files, 1 client) |")
            .unwrap()
            < secondary
    );
}
