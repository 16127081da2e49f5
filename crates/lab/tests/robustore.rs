//! `ecstack experiment robustore` at the quick scale: files, determinism across thread counts, and a
//! sharded run merged byte-identical to one machine's.

use ecstack_lab::robustore::{merge, run, RobustoreConfig};

fn cfg(out: &std::path::Path, threads: usize, shard: Option<(usize, usize)>) -> RobustoreConfig {
    RobustoreConfig {
        // One layout sweep, one competitive-workload sweep with writes, the cache pair.
        groups: RobustoreConfig::parse_figs(&["6-7".into(), "6-29".into(), "6-36".into()]).unwrap(),
        out: out.to_path_buf(),
        seed: 5,
        quick: true,
        accesses: Some(2),
        threads,
        shard,
    }
}

#[test]
fn quick_run_threads_and_shards_agree() {
    let tmp = tempfile::tempdir().unwrap();
    let one = tmp.path().join("one");
    let files = run(&cfg(&one, 1, None), &|_, _| {}).unwrap();
    for f in [
        "rows.csv",
        "report.md",
        "fig-6-6.svg",
        "fig-6-8.svg",
        "fig-6-29.svg",
        "fig-6-35.svg",
    ] {
        assert!(
            files.iter().any(|p| p.ends_with(f)),
            "{f} missing: {files:?}"
        );
    }
    let rows = std::fs::read_to_string(one.join("rows.csv")).unwrap();
    let report = std::fs::read_to_string(one.join("report.md")).unwrap();
    assert!(report.contains("| claim | seed | ours | verdict |"));
    assert!(rows.lines().count() > 20);

    let three = tmp.path().join("three");
    run(&cfg(&three, 3, None), &|_, _| {}).unwrap();
    assert_eq!(
        std::fs::read_to_string(three.join("rows.csv")).unwrap(),
        rows
    );

    let sharded = tmp.path().join("sharded");
    for i in 0..3 {
        run(&cfg(&sharded, 2, Some((i, 3))), &|_, _| {}).unwrap();
    }
    merge(&sharded).unwrap();
    assert_eq!(
        std::fs::read_to_string(sharded.join("rows.csv")).unwrap(),
        rows
    );
    assert_eq!(
        std::fs::read_to_string(sharded.join("report.md")).unwrap(),
        report
    );
}

#[test]
fn bad_arguments_are_one_line() {
    let e = RobustoreConfig::parse_figs(&["6-99".into()]).unwrap_err();
    assert!(e.to_string().starts_with("fig:"), "{e}");
    assert!(RobustoreConfig::parse_shard("3/3").is_err());
    assert_eq!(RobustoreConfig::parse_shard("2/8").unwrap(), (2, 8));
    let tmp = tempfile::tempdir().unwrap();
    let e = merge(tmp.path()).unwrap_err();
    assert!(e.to_string().contains("no rows-shard"), "{e}");
}
