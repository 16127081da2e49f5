//! `ecstack experiment zombienand` end to end at CI scale: the grid and the trace-driven runs write
//! their reports and leave no journal or checkpoint behind, and a leftover journal they cannot take is
//! one error line naming it (the kill-and-resume paths themselves are tested in
//! `crates/lab/tests/zombienand.rs`).

use std::path::Path;
use std::process::{Command, Output};

fn zombienand(out: &Path, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ecstack"))
        .args([
            "experiment",
            "zombienand",
            "--quick",
            "--jobs",
            "2",
            "--out",
        ])
        .arg(out)
        .args(extra)
        .output()
        .expect("run ecstack")
}

fn ok(out: &Path, extra: &[&str]) -> String {
    let o = zombienand(out, extra);
    assert!(
        o.status.success(),
        "{extra:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

fn leftovers(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("journal") || n.ends_with(".ck") || n.ends_with(".tmp"))
        .collect()
}

#[test]
fn grid_and_trace_driven_runs_clean_up_and_refuse_a_foreign_journal() {
    let dir = tempfile::tempdir().unwrap();
    let grid = dir.path().join("grid");
    let md = ok(&grid, &[]);
    assert!(md.contains("| TLC |"), "{md}");
    assert!(grid.join("report.json").exists());
    assert_eq!(leftovers(&grid), Vec::<String>::new());

    let traces = dir.path().join("traces");
    let md = ok(&traces, &["--trace-driven", "--json"]);
    let first: serde_json::Value = serde_json::from_str(&md).unwrap();
    assert_eq!(first["results"].as_array().unwrap().len(), 4);
    assert!(traces.join("lifetime-tlc.svg").exists());
    assert_eq!(leftovers(&traces), Vec::<String>::new());

    // A journal that is not this run's: one error line naming the file, nothing written.
    let journal = traces.join("trace-journal.jsonl");
    std::fs::write(&journal, "{\"format\":\"something else\"}\n").unwrap();
    let o = zombienand(&traces, &["--trace-driven"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    // The notice that a journal was found, then one error line naming it.
    let lines: Vec<&str> = err.trim().lines().collect();
    assert_eq!(lines.len(), 2, "{err}");
    assert!(lines[0].starts_with("resuming from"), "{err}");
    assert!(lines[1].starts_with("ecstack: error:"), "{err}");
    assert!(lines[1].contains("trace-journal.jsonl"), "{err}");
    std::fs::remove_file(&journal).unwrap();
}

/// `--death-rule` and `--life-average` reach the report and the model; a bad value is one error
/// line naming the flag and its choices.
#[test]
fn death_rule_and_life_average_flags() {
    let dir = tempfile::tempdir().unwrap();
    let md = ok(
        &dir.path().join("grid"),
        &[
            "--death-rule",
            "retired-blocks",
            "--life-average",
            "element",
        ],
    );
    assert!(
        md.starts_with("Death rule: retired-blocks; Algorithm 6 average: element."),
        "{md}"
    );
    assert!(!md.contains("spare pages"), "{md}");
    let o = zombienand(&dir.path().join("bad"), &["--death-rule", "dead"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains("--death-rule dead: expected capacity or retired-blocks"),
        "{err}"
    );
    // `ecstack sim zombienand --drive tiny` with more flags.
    let sim = |more: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_ecstack"))
            .args(["sim", "zombienand", "--drive", "tiny"])
            .args(more)
            .output()
            .unwrap()
    };
    let o = sim(&[
        "--working-set",
        "0.1",
        "--death-rule",
        "retired-blocks",
        "--life-average",
        "group",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("death rule retired-blocks, average group"),
        "{out}"
    );
    let o = sim(&["--life-average", "pool"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("--life-average pool: expected group or element"),
        "{err}"
    );
}
