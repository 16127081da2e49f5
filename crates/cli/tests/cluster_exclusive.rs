//! One process per cluster directory and per OSD store (issue 46), through real processes: a
//! running `ecstack cluster up` refuses a second `cluster up` on its directory, and each of its
//! OSDs refuses a second `ecstack osd` on its store, each in one line naming the holder's pid.
//! A new cluster's `osd-N` is OSD id N, whatever order the OSDs registered in. With no spare OSD
//! (n = k + m OSDs), `osd out` is refused and a put while an OSD is down warns that it is stored
//! below full redundancy, and `stat` shows the chunk without a holder as lost.

mod cluster_common;

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

use cluster_common::{exe, up_lines};

/// A `cluster up` child, SIGTERMed and reaped when dropped.
struct Up(Child);

impl Drop for Up {
    fn drop(&mut self) {
        // SAFETY: kill(2) with our unreaped child's pid and SIGTERM touches no memory.
        unsafe {
            libc_kill(self.0.id() as i32, 15);
        }
        let _ = self.0.wait();
    }
}

extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}

/// Starts `ecstack cluster up` (k = 2, m = `m`) on `dir` and returns it with the lines it
/// printed up to "try:".
fn cluster_up(dir: &Path, osds: usize, m: u32) -> (Up, Vec<String>) {
    let mut child = Command::new(exe())
        .args(["cluster", "up", "--osds", &osds.to_string(), "-k", "2"])
        .args(["-m", &m.to_string()])
        .args(["--segment-size", "1M", "--config"])
        .arg(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let up = Up(child);
    let lines = up_lines(stdout);
    assert!(
        lines.last().is_some_and(|l| l.starts_with("try:")),
        "cluster up did not come up: {lines:?}"
    );
    (up, lines)
}

/// The stderr of a failed run, which must be exactly one line.
fn refusal(o: &Output) -> String {
    assert!(!o.status.success(), "the second opener was not refused");
    let err = String::from_utf8_lossy(&o.stderr);
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one line expected: {err}");
    lines[0].to_owned()
}

/// The pid `cluster up` printed on the line of `name` ("  osd-1 ADDR  (id 1, pid 123, ...)").
fn pid_on_line<'a>(lines: &'a [String], name: &str) -> (&'a str, u32) {
    let line = lines
        .iter()
        .find(|l| l.trim_start().starts_with(&format!("{name} ")))
        .unwrap_or_else(|| panic!("no line for {name}: {lines:?}"));
    let pid = line
        .split("pid ")
        .nth(1)
        .and_then(|s| s.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no pid on {line:?}"));
    (line, pid)
}

#[test]
fn a_second_cluster_up_and_a_second_osd_on_a_store_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("c");
    let (up, lines) = cluster_up(&dir, 4, 1);

    // osd-N is id N on a new cluster (the four registered concurrently).
    for i in 0..4 {
        let (line, _) = pid_on_line(&lines, &format!("osd-{i}"));
        assert!(line.contains(&format!("(id {i},")), "{line}");
    }

    // A second `cluster up` on the directory: refused, naming the first one's pid and command.
    let o = Command::new(exe())
        .args(["cluster", "up", "--osds", "4", "--config"]) // the directory's cluster.toml
        .arg(dir.join("cluster.toml"))
        .output()
        .unwrap();
    let line = refusal(&o);
    assert!(
        line.contains(&format!("already running under pid {}", up.0.id()))
            && line.contains("cluster up")
            && line.contains("cluster.toml"),
        "{line}"
    );

    // A second OSD on osd-1's store: refused, naming osd-1's process.
    let (_, osd1) = pid_on_line(&lines, "osd-1");
    let o = Command::new(exe())
        .args(["osd", "--name", "osd-1", "--config"])
        .arg(dir.join("cluster.toml"))
        .arg("--store")
        .arg(dir.join("osd-1"))
        .output()
        .unwrap();
    let line = refusal(&o);
    assert!(
        line.contains("in use by another OSD")
            && line.contains(&format!("pid {osd1}: ecstack osd"))
            && line.contains("--name osd-1"),
        "{line}"
    );

    // Once the first stops, the directory can be brought up again.
    drop(up);
    let (_again, lines) = cluster_up(&dir, 4, 1);
    assert!(lines[0].starts_with("existing cluster"), "{lines:?}");
}

fn ecstack(args: &[&str], config: &Path) -> Output {
    Command::new(exe())
        .args(args)
        .arg("--config")
        .arg(config)
        .env_remove("ECSTACK_CLUSTER")
        .output()
        .unwrap()
}

#[test]
fn osd_out_without_a_spare_is_refused_and_short_puts_warn() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("c");
    // k = 2, m = 2 on 4 OSDs: every OSD holds a chunk of every segment.
    let (_up, lines) = cluster_up(&dir, 4, 2);
    let config = dir.join("cluster.toml");
    let file = tmp.path().join("f");
    std::fs::write(&file, vec![7u8; 300_000]).unwrap();
    let put = |path: &str| ecstack(&["cluster", "put", file.to_str().unwrap(), path], &config);
    let o = put("/a");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        o.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );

    let o = ecstack(&["cluster", "osd", "out", "osd-1"], &config);
    let line = refusal(&o);
    assert!(
        line.contains("OSD 1 (osd-1) stays in") && line.contains("add an OSD first"),
        "{line}"
    );

    // osd-3 dies; once the MDS sees it down, a put places 3 of 4 chunks and says so.
    let (_, pid) = pid_on_line(&lines, "osd-3");
    // SAFETY: kill(2) with a pid and SIGKILL touches no memory (the pid is the cluster's child).
    unsafe {
        libc_kill(pid as i32, 9);
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let o = ecstack(&["cluster", "status", "--json"], &config);
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
        if v["osds_down"] == 1 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "osd-3 never went down"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let o = put("/b");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("warning: /b is stored below full redundancy")
            && err.contains("as few as 3 of their 4 chunks"),
        "{err}"
    );
    let o = ecstack(&["cluster", "stat", "/b"], &config);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("3@lost"), "{text}");
    assert!(!text.contains("4294967295"), "{text}");
}

/// Without --config and $ECSTACK_CLUSTER, a client names both in its one line.
#[test]
fn a_missing_config_hints_at_both_ways_to_give_one() {
    let tmp = tempfile::tempdir().unwrap();
    let o = Command::new(exe())
        .args(["cluster", "ls"])
        .current_dir(tmp.path())
        .env_remove("ECSTACK_CLUSTER")
        .output()
        .unwrap();
    let line = refusal(&o);
    assert!(
        line.contains("--config") && line.contains("ECSTACK_CLUSTER"),
        "{line}"
    );
}
