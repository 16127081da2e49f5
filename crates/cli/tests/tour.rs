//! README's tour as a test (issue 46 §4): every command of every code block between README's
//! "## A tour" and the next "## " heading runs, in order, as a user would type it, in a temporary
//! directory. A tour command that fails fails this test, so the README and the commands cannot drift
//! apart: a change to the tour is tested the next time this runs.
//!
//! How README's commands become runs (the rules; README needs no markers):
//!
//! * **Blocks.** Each ``` block runs in a shell of its own (a new terminal: variables and jobs do not
//!   carry over), in order, in one temporary directory. A line ending in `\` continues; `#` outside
//!   quotes, after a blank, starts a comment.
//! * **Fixtures.** What the tour takes as given exists first: `big.iso` and `disk.img` (4 MiB),
//!   `msr.csv` (a synthesized MSR trace), the tree `/srv/data` (a copy of `docs/`), empty `/srv/a`,
//!   `/srv/t`, `/tmp` and `/dev/shm`, and `/etc/rainfs.conf` over three NAS directories.
//! * **Paths.** `/srv/`, `/tmp/`, `/dev/shm/` and `/etc/` become directories of the temporary
//!   directory. `target/release/ecstack` is the ecstack under test (long mode: the repository's).
//! * **Small sizes.** `size=NG` in a device spec becomes `size=N×256M` (a 4 GiB device is 1 GiB, sparse);
//!   `--size NG` becomes `--size N×8M`; `--seeds N` above 20 becomes `--seeds 20`.
//! * **Servers.** `cluster up`, `cluster mount` and every `… serve` start in the background, and the
//!   next command waits (60 s at most) for the line that says "Ctrl-C stops". One started in the
//!   foreground (the user's own terminal) is stopped with SIGTERM, as Ctrl-C would, before the next
//!   foreground server starts; one started with `&` is the README's to stop (`kill %1`, after which
//!   the run waits for it to exit, or `fusermount3 -u` for a mount).
//!   Every server left is stopped at the end of its block and must exit within 15 s.
//! * **Timeouts.** Each command has 120 s (SIGTERM, then SIGKILL); a pipeline fails if any of its
//!   commands fails (a reader's early exit, SIGPIPE, is fine).
//! * **Long commands** — experiments, benchmarks (`bench`, `kv bench`, `kv ycsb`, `reduce anchors`:
//!   beside their peers), RainFS (a JDK and Maven), `cargo build`, `mvn` — run with `--help` appended
//!   in CI: the command parses (every flag and value of the README's line is accepted) and prints its
//!   usage. `cargo build` and `mvn` lines are what `scripts/test.sh` itself runs, so CI skips them.
//!   Long mode runs them whole, as written:
//!   `cargo test --release -p ecstack --test tour -- --ignored --nocapture` (hours: the experiments).
//!
//! Fixed ports (10809, 6379) are the README's: the tour runs in a network namespace of its own
//! (`unshare --net`), so it takes no port of anything else on the machine.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// A command's time limit, seconds (each step; long mode's long commands get `LONG_STEP_SECS`).
const STEP_SECS: u32 = 120;
const LONG_STEP_SECS: u32 = 6 * 3600;
/// A server's time to print its "Ctrl-C stops" line.
const READY_SECS: u32 = 60;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    /// CI: long commands only parse (`--help`).
    Ci,
    /// Every command whole.
    Long,
}

/// One ``` block of the tour: the `###` heading above it and its commands (continuations joined,
/// comments removed).
#[derive(Debug)]
struct Block {
    heading: String,
    commands: Vec<String>,
}

/// The tour's blocks, from README's text.
fn tour_blocks(readme: &str) -> Vec<Block> {
    let start = if readme.starts_with("## A tour") {
        0
    } else {
        readme
            .find("\n## A tour")
            .expect("README.md has no '## A tour' section")
            + 1
    };
    let rest = &readme[start..];
    let end = rest[3..].find("\n## ").map_or(rest.len(), |i| i + 3);
    let mut blocks = Vec::new();
    let mut heading = String::from("A tour");
    let mut current: Option<Block> = None;
    let mut pending = String::new();
    for line in rest[..end].lines() {
        if line.trim_start().starts_with("```") {
            match current.take() {
                Some(b) => {
                    assert!(pending.is_empty(), "{heading}: a block ends in '\\'");
                    if !b.commands.is_empty() {
                        blocks.push(b);
                    }
                }
                None => {
                    current = Some(Block {
                        heading: heading.clone(),
                        commands: Vec::new(),
                    })
                }
            }
            continue;
        }
        let Some(b) = current.as_mut() else {
            if let Some(h) = line.strip_prefix("### ") {
                heading = h.trim().to_owned();
            }
            continue;
        };
        let code = strip_comment(line).trim_end();
        if let Some(head) = code.strip_suffix('\\') {
            pending.push_str(head.trim());
            pending.push(' ');
            continue;
        }
        pending.push_str(code.trim_start());
        let cmd = std::mem::take(&mut pending).trim().to_owned();
        if !cmd.is_empty() {
            b.commands.push(cmd);
        }
    }
    assert!(current.is_none(), "README's tour ends inside a ``` block");
    blocks
}

/// `line` without its shell comment: from a `#` outside quotes that starts a word.
fn strip_comment(line: &str) -> &str {
    let (mut single, mut double) = (false, false);
    let mut prev = ' ';
    for (i, c) in line.char_indices() {
        match c {
            '\'' if !double => single = !single,
            '"' if !single => double = !double,
            '#' if !single && !double && prev.is_whitespace() => return &line[..i],
            _ => {}
        }
        prev = c;
    }
    line
}

/// How the runner treats a command.
#[derive(Debug, PartialEq, Eq)]
enum Kind {
    /// A variable, `export`, `kill` or `cd`: run in the block's own shell.
    Shell,
    /// `cluster up`, `cluster mount` or `… serve`; `background`: README started it with `&`.
    Server { background: bool },
    /// Whole only in long mode (see the module's rules).
    Long,
    /// Everything else, with a timeout.
    Run,
}

fn kind(cmd: &str) -> Kind {
    let words: Vec<&str> = cmd.split_whitespace().collect();
    let is_long = cmd.starts_with("cargo ")
        || cmd.contains("mvn ")
        || ["experiment", "bench", "rainfs"]
            .iter()
            .any(|w| ecstack_words(&words).first() == Some(w))
        || [["kv", "bench"], ["kv", "ycsb"], ["reduce", "anchors"]]
            .iter()
            .any(|p| ecstack_words(&words).starts_with(p));
    if is_long {
        return Kind::Long;
    }
    let first = words.first().copied().unwrap_or("");
    let assignment = first
        .split_once('=')
        .is_some_and(|(v, _)| !v.is_empty() && v.chars().all(|c| c.is_alphanumeric() || c == '_'));
    if assignment || ["export", "kill", "cd"].contains(&first) {
        return Kind::Shell;
    }
    let sub = ecstack_words(&words);
    if sub.starts_with(&["cluster", "up"])
        || sub.starts_with(&["cluster", "mount"])
        || sub.get(1) == Some(&"serve")
    {
        return Kind::Server {
            background: cmd.ends_with('&'),
        };
    }
    Kind::Run
}

/// The words after `ecstack` (also `sudo ecstack`, `target/release/ecstack`), or none.
fn ecstack_words<'a>(words: &[&'a str]) -> Vec<&'a str> {
    let at = words
        .iter()
        .position(|w| *w == "ecstack" || w.ends_with("/ecstack"));
    match at {
        Some(i) if i <= 1 => words[i + 1..].to_vec(),
        _ => Vec::new(),
    }
}

/// The command with the tour's paths moved into `dir` and, unless `whole`, small sizes (the module's
/// rules).
fn rewrite(cmd: &str, dir: &Path, repo: &Path, mode: Mode, whole: bool) -> String {
    let d = dir.display().to_string();
    let mut out = String::new();
    let mut prev = ' ';
    let mut rest = cmd;
    'scan: while let Some(c) = rest.chars().next() {
        if " :='\",;(".contains(prev) {
            for (from, to) in [
                ("/srv/", "srv/"),
                ("/tmp/", "tmp/"),
                ("/dev/shm/", "shm/"),
                ("/etc/", "etc/"),
            ] {
                if let Some(r) = rest.strip_prefix(from) {
                    write!(out, "{d}/{to}").unwrap();
                    rest = r;
                    prev = '/';
                    continue 'scan;
                }
            }
        }
        out.push(c);
        prev = c;
        rest = &rest[c.len_utf8()..];
    }
    let release = match mode {
        Mode::Ci => "ecstack".to_owned(),
        Mode::Long => repo.join("target/release/ecstack").display().to_string(),
    };
    out = out.replace("target/release/ecstack", &release);
    if let Some(r) = out.strip_prefix("sudo ") {
        // Root runs it as it is (the test runs as root, or in a user namespace as its root).
        out = r.to_owned();
    }
    if whole {
        return out;
    }
    out = scale(&out, "size=", 256);
    out = scale(&out, "--size ", 8);
    cap(&out, "--seeds ", 20)
}

/// Each `KEY` followed by `NG` becomes `KEY` and `N·per_gib` MiB.
fn scale(s: &str, key: &str, per_gib: u64) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find(key) {
        let after = &rest[i + key.len()..];
        let digits = after.chars().take_while(char::is_ascii_digit).count();
        out.push_str(&rest[..i + key.len()]);
        if digits > 0 && after[digits..].starts_with('G') {
            let n: u64 = after[..digits].parse().unwrap();
            write!(out, "{}M", n * per_gib).unwrap();
            rest = &after[digits + 1..];
        } else {
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// `KEY N` with N above `max` becomes `KEY max`.
fn cap(s: &str, key: &str, max: u64) -> String {
    let Some(i) = s.find(key) else {
        return s.to_owned();
    };
    let after = &s[i + key.len()..];
    let digits = after.chars().take_while(char::is_ascii_digit).count();
    match after[..digits].parse::<u64>() {
        Ok(n) if n > max => format!("{}{max}{}", &s[..i + key.len()], &after[digits..]),
        _ => s.to_owned(),
    }
}

/// `s` quoted for bash.
fn q(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The functions every block's script uses: `step`, `help_step`, `shell`, `server`, `stop_all`.
const LIB: &str = r#"
n=0; fails=0; fg_servers=(); bg_servers=(); all_servers=()
now() { date +%s%N; }
secs() { local d=$(( $(now) - $1 )); printf '%d.%d' $((d / 1000000000)) $(( (d / 100000000) % 10 )); }
report() { # STATUS ORIG LOG T0 [WHAT]
  if [ "$1" = 0 ]; then
    printf 'ok   %6s s  %s%s\n' "$(secs "$4")" "$2" "${5:-}"
  else
    fails=$((fails + 1))
    local why="exit $1"; [ "$1" = 124 ] && why="timed out"
    printf 'FAIL %6s s  %s%s  (%s)\n' "$(secs "$4")" "$2" "${5:-}" "$why"
    [ -s "$3" ] && tail -n 20 "$3" | sed 's/^/       | /'
  fi
}
# A command with a timeout; every command of its last pipeline must succeed (or die of SIGPIPE).
step() { # TIMEOUT ORIG CMD [WHAT]
  n=$((n + 1)); local log="$LOGS/$BLOCK.$n.log" t0; t0=$(now)
  timeout -k 5 "$1" bash -c "$3"$'\n''for s in "${PIPESTATUS[@]}"; do case $s in 0|141) ;; *) exit "$s";; esac; done' \
    >"$log" 2>&1 </dev/null
  report $? "$2" "$log" "$t0" "${4:-}"
}
# In this shell: variables, export, cd, kill (`kill %N` then waits up to 15 s for job N to exit).
# README's job N is the Nth server it started with `&` (the runner starts foreground ones in the
# background too: they are the user's other terminal, not jobs of this one).
shell() { # ORIG CMD
  n=$((n + 1)); local t0 pid="" s cmd="$2"; t0=$(now)
  case "$2" in kill\ %*)
    pid=${bg_servers[$(( ${2##*%} - 1 ))]:-}
    [ -n "$pid" ] && cmd="kill $pid" ;;
  esac
  eval "$cmd"; s=$?
  if [ "$s" = 0 ] && [ -n "$pid" ]; then gone "$pid" || s=124; fi
  report "$s" "$1" /dev/null "$t0"
}
gone() { # PID: waits up to 15 s for it to exit
  local i
  for i in $(seq 150); do kill -0 "$1" 2>/dev/null || { wait "$1" 2>/dev/null; return 0; }; sleep 0.1; done
  return 1
}
stop() { # PID: SIGTERM (Ctrl-C's twin for every ecstack server), then SIGKILL after 15 s
  kill -0 "$1" 2>/dev/null || return 0
  local t0; t0=$(now)
  kill -TERM "$1" 2>/dev/null
  if gone "$1"; then return 0; fi
  kill -KILL "$1" 2>/dev/null; wait "$1" 2>/dev/null
  report 1 "server pid $1" /dev/null "$t0" " did not stop within 15 s of SIGTERM"
}
stop_fg() { local p; for p in "${fg_servers[@]}"; do stop "$p"; done; fg_servers=(); }
# A server in the background; ready when its output says "Ctrl-C stop".
server() { # BACKGROUND(0|1) ORIG CMD
  [ "$1" = 0 ] && stop_fg
  n=$((n + 1)); local log="$LOGS/$BLOCK.$n.log" t0 pid i; t0=$(now)
  : >"$log"
  bash -c "exec $3" >"$log" 2>&1 </dev/null &
  pid=$!
  all_servers+=("$pid")
  if [ "$1" = 0 ]; then fg_servers+=("$pid"); else bg_servers+=("$pid"); fi
  for i in $(seq $((READY_SECS * 10))); do
    if grep -q 'Ctrl-C stop' "$log"; then report 0 "$2" "$log" "$t0" "  (ready, pid $pid)"; return; fi
    if ! kill -0 "$pid" 2>/dev/null; then wait "$pid"; local s=$?; report $((s == 0 ? 1 : s)) "$2" "$log" "$t0" "  (exited before it was ready)"; return; fi
    sleep 0.1
  done
  report 124 "$2" "$log" "$t0" "  (not ready in $READY_SECS s)"
}
stop_all() {
  local p; for p in "${all_servers[@]}"; do stop "$p"; done
  echo "== $BLOCK: $n steps, $fails failed"
  exit $((fails > 0))
}
"#;

/// The bash script of block `i`.
fn block_script(b: &Block, i: usize, dir: &Path, repo: &Path, mode: Mode) -> String {
    let mut s = String::new();
    writeln!(
        s,
        "set -u -a\nBLOCK=block{i}; LOGS={}",
        q(&dir.join("logs").display().to_string())
    )
    .unwrap();
    writeln!(s, "READY_SECS={READY_SECS}").unwrap();
    s.push_str(LIB);
    writeln!(
        s,
        "trap stop_all EXIT\ncd {}",
        q(&dir.display().to_string())
    )
    .unwrap();
    writeln!(s, "echo {}", q(&format!("== {} (block {i})", b.heading))).unwrap();
    for cmd in &b.commands {
        let k = kind(cmd);
        let whole = k == Kind::Long && mode == Mode::Long;
        let run = rewrite(cmd, dir, repo, mode, whole);
        let line = match k {
            Kind::Shell => format!("shell {} {}", q(cmd), q(&run)),
            Kind::Server { background } => {
                let run = run.trim_end().trim_end_matches('&').trim_end();
                format!("server {} {} {}", u8::from(background), q(cmd), q(run))
            }
            Kind::Run => format!("step {STEP_SECS} {} {}", q(cmd), q(&run)),
            Kind::Long if mode == Mode::Long => {
                // Builds and the Maven suite run in the repository, as README's reader runs them.
                let in_repo = run.starts_with("cargo ") || run.starts_with("cd rainfs");
                let run = if in_repo {
                    format!("cd {} && {run}", q(&repo.display().to_string()))
                } else {
                    run
                };
                format!("step {LONG_STEP_SECS} {} {}", q(cmd), q(&run))
            }
            Kind::Long => {
                let words: Vec<&str> = run.split_whitespace().collect();
                if ecstack_words(&words).is_empty() {
                    format!(
                        "echo {}",
                        q(&format!(
                            "skip          {cmd}  (CI: scripts/test.sh runs this itself)"
                        ))
                    )
                } else if ecstack_words(&words).starts_with(&["rainfs", "fsck"]) {
                    // Its flags are RainFsck's (Java): `--help` would build the jar with Maven,
                    // which tests/rainfs.rs does (and runs fsck); here, that the command exists.
                    let help = "ecstack rainfs --help | grep -q '^  fsck '";
                    format!(
                        "step {STEP_SECS} {} {} {}",
                        q(cmd),
                        q(help),
                        q("  (CI: the command exists)")
                    )
                } else {
                    // The first command of the line (up to && or a pipe), which must parse.
                    let first = run
                        .split(['|', ';'])
                        .next()
                        .unwrap()
                        .split("&&")
                        .next()
                        .unwrap();
                    let help = format!("{} --help | grep -i '^usage'", first.trim());
                    format!(
                        "step {STEP_SECS} {} {} {}",
                        q(cmd),
                        q(&help),
                        q("  (--help in CI)")
                    )
                }
            }
        };
        s.push_str(&line);
        s.push('\n');
    }
    s
}

/// The tour's given files and directories (the module's "Fixtures").
fn fixtures(dir: &Path, repo: &Path) {
    for d in [
        "srv/a",
        "srv/t",
        "tmp",
        "shm",
        "etc",
        "logs",
        "nas0/rainfs",
        "nas1",
        "nas2",
    ] {
        std::fs::create_dir_all(dir.join(d)).unwrap();
    }
    // Deterministic bytes that do not compress.
    let mut data = vec![0u8; 4 << 20];
    ecstack_base::Rng::new(46).fill(&mut data);
    std::fs::write(dir.join("big.iso"), &data).unwrap();
    std::fs::write(dir.join("disk.img"), &data).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_ecstack"))
        .args([
            "trace", "synth", "--preset", "msr-web0", "--scale", "0.01", "-o",
        ])
        .arg(dir.join("msr.csv"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let status = Command::new("cp")
        .arg("-r")
        .arg(repo.join("docs"))
        .arg(dir.join("srv/data"))
        .status()
        .unwrap();
    assert!(status.success());
    let d = dir.display();
    std::fs::write(
        dir.join("etc/rainfs.conf"),
        format!(
            "namespace = {d}/nas0/rainfs\nnas = {d}/nas0, {d}/nas1, {d}/nas2\nreplication = 2\n"
        ),
    )
    .unwrap();
}

/// `unshare` arguments for a network namespace of our own: root makes one; anyone else asks for a
/// user namespace too (its root may make one).
fn netns_args() -> Option<Vec<&'static str>> {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.trim_ascii() == b"0");
    let args = if root {
        vec!["--net"]
    } else {
        vec!["--net", "--map-root-user"]
    };
    let ok = Command::new("unshare")
        .args(&args)
        .args(["ip", "link", "set", "lo", "up"])
        .status()
        .is_ok_and(|s| s.success());
    ok.then_some(args)
}

fn run_tour(mode: Mode) {
    for (tool, package) in [
        ("unshare", "util-linux"),
        ("ip", "iproute2"),
        ("timeout", "coreutils"),
        ("nbdcopy", "libnbd-bin"),
        ("redis-cli", "redis-tools"),
        ("xxd", "xxd"),
    ] {
        if !ecstack_testkit::require_tool(tool, package) {
            return;
        }
    }
    let netns = netns_args();
    if !ecstack_testkit::require(
        "a network namespace (unshare --net, as root or in a user namespace)",
        netns.is_some(),
        "util-linux",
    ) {
        return;
    }
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let repo = repo.canonicalize().unwrap();
    let readme = std::fs::read_to_string(repo.join("README.md")).unwrap();
    let blocks = tour_blocks(&readme);
    let commands: usize = blocks.iter().map(|b| b.commands.len()).sum();
    assert!(
        blocks.len() >= 8 && commands >= 50,
        "the tour parsed into {} blocks, {commands} commands",
        blocks.len()
    );

    let tmp = tempfile::Builder::new()
        .prefix("ecstack-tour-")
        .tempdir()
        .unwrap();
    let dir = tmp.path().to_path_buf();
    fixtures(&dir, &repo);
    // `ecstack` on PATH is the binary under test.
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_ecstack"), bin.join("ecstack")).unwrap();
    let mut driver = String::from("ip link set lo up || exit 1\nstatus=0\n");
    for (i, b) in blocks.iter().enumerate() {
        let script = dir.join(format!("block{i}.sh"));
        std::fs::write(&script, block_script(b, i, &dir, &repo, mode)).unwrap();
        writeln!(
            driver,
            "bash {} || status=1",
            q(&script.display().to_string())
        )
        .unwrap();
    }
    driver.push_str("exit $status\n");
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let start = Instant::now();
    let out = Command::new("unshare")
        .args(netns.unwrap())
        .args(["bash", "-c", &driver])
        .env("PATH", path)
        .env("TMPDIR", dir.join("tmp"))
        .env_remove("ECSTACK_CLUSTER")
        .current_dir(&dir)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    // Straight to stderr, past the harness's capture: a CI log shows each step and its time even
    // when the test passes.
    let _ = writeln!(
        std::io::stderr(),
        "{text}{}tour ({mode:?}): {} blocks, {commands} commands in {:.1} s",
        String::from_utf8_lossy(&out.stderr),
        blocks.len(),
        start.elapsed().as_secs_f64()
    );
    let failed: Vec<&str> = text.lines().filter(|l| l.starts_with("FAIL")).collect();
    if !out.status.success() || !failed.is_empty() {
        let kept = tmp.keep();
        panic!(
            "README's tour failed ({} commands): {}\n(files and logs kept in {})",
            failed.len(),
            failed.join("\n"),
            kept.display()
        );
    }
}

/// CI: every tour command at small sizes; long commands parse (`--help`).
#[test]
fn readme_tour_runs() {
    run_tour(Mode::Ci);
}

/// Long mode: the long commands whole too (hours: every experiment, the benchmarks, Maven's suite).
#[test]
#[ignore = "long: hours (every experiment and benchmark of the tour); run with --ignored"]
fn readme_tour_runs_whole() {
    run_tour(Mode::Long);
}

#[test]
fn the_rules_on_readme_lines() {
    let dir = Path::new("/t");
    let repo = Path::new("/r");
    let m = r#"M=$(for i in 0 1; do printf "file:/srv/a/m$i?size=4G,"; done); M=${M%,}"#;
    assert_eq!(kind(m), Kind::Shell);
    assert_eq!(
        rewrite(m, dir, repo, Mode::Ci, false),
        r#"M=$(for i in 0 1; do printf "file:/t/srv/a/m$i?size=1024M,"; done); M=${M%,}"#
    );
    assert_eq!(
        strip_comment("ecstack ec info x --json   # a # b"),
        "ecstack ec info x --json   "
    );
    assert_eq!(strip_comment("echo '#x' \"a#\" #c"), "echo '#x' \"a#\" ");
    assert_eq!(
        kind("ecstack array serve --meta file:/srv/a/meta &"),
        Kind::Server { background: true }
    );
    assert_eq!(
        kind("ecstack cluster up --osds 9"),
        Kind::Server { background: false }
    );
    assert_eq!(
        kind("ecstack cluster mount /srv/m &"),
        Kind::Server { background: true }
    );
    assert_eq!(kind("sudo ecstack experiment codfs --osds 10"), Kind::Long);
    assert_eq!(kind("target/release/ecstack bench ec"), Kind::Long);
    assert_eq!(kind("cd rainfs && mvn -q -B test"), Kind::Long);
    assert_eq!(kind("ecstack kv ycsb"), Kind::Long);
    assert_eq!(
        kind("ecstack kv serve --device mem:256M"),
        Kind::Server { background: false }
    );
    assert_eq!(kind("kill %1"), Kind::Shell);
    assert_eq!(kind("redis-cli -a secret SET k v"), Kind::Run);
    assert_eq!(
        rewrite(
            "ecstack ec demo --size 1G -k 6 -m 3",
            dir,
            repo,
            Mode::Ci,
            false
        ),
        "ecstack ec demo --size 8M -k 6 -m 3"
    );
    assert_eq!(
        rewrite(
            "ecstack sim array --seed 0 --seeds 10000",
            dir,
            repo,
            Mode::Ci,
            false
        ),
        "ecstack sim array --seed 0 --seeds 20"
    );
    assert_eq!(
        rewrite(
            "x --admin /tmp/a.sock --nvram /dev/shm/tween 'file:/srv/a/n?size=4G'",
            dir,
            repo,
            Mode::Ci,
            false
        ),
        "x --admin /t/tmp/a.sock --nvram /t/shm/tween 'file:/t/srv/a/n?size=1024M'"
    );
    assert_eq!(
        rewrite(
            "sudo ecstack experiment codfs --size 256M",
            dir,
            repo,
            Mode::Long,
            true
        ),
        "ecstack experiment codfs --size 256M"
    );
    let blocks =
        tour_blocks("## A tour\n### One\n```\na \\\n  b   # c\n# d\n```\n## Next\n```\nz\n```\n");
    assert_eq!(blocks.len(), 1);
    assert_eq!(blocks[0].heading, "One");
    assert_eq!(blocks[0].commands, ["a b"]);
}
