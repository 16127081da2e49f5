//! `ecstack bench admission --quick` through the built binary: three runs (admission off and on
//! with a thread per stream, off with the default queue), the OSD refusing streams only with
//! admission on, and admission delivering more than the interleaved store without it
//! (docs/benchmarks.md has the full run). Bad flags are one line.

use std::process::Command;

fn ecstack(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_ecstack"))
        .args(args)
        .output()
        .expect("run ecstack")
}

#[test]
fn admission_delivers_more_than_interleaved_streams() {
    let o = ecstack(&["bench", "admission", "--quick", "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let runs = r["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 3);
    let f = |i: usize, k: &str| runs[i][k].as_f64().unwrap();
    assert_eq!(runs[0]["admission"], false);
    assert_eq!(runs[1]["admission"], true);
    assert_eq!(f(0, "refused"), 0.0);
    assert!(f(1, "refused") > 0.0, "{r}");
    // The interleaved store collapses; admission keeps it sequential.
    assert!(f(1, "mb_per_s") > 5.0 * f(0, "mb_per_s").max(0.1), "{r}");
    assert!(r["store_ratio"].as_f64().unwrap() > 1.3, "{r}");
}

#[test]
fn bad_flags_are_one_line() {
    let o = ecstack(&["bench", "admission", "--streams", "0", "--seconds", "1"]);
    assert!(!o.status.success());
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(
        e.trim(),
        "ecstack: error: --streams: must be 1..=1024",
        "{e}"
    );
}
