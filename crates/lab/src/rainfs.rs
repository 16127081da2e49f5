//! RainFS (seed `rainfs-treechunks-zombienand-thesis.txt` ch. 2) from Rust: the launcher behind `ecstack
//! rainfs` and `ecstack experiment rainfs`. The file system itself is the Java module `rainfs/`; this finds
//! the JDK and Maven, builds the module once (rebuilt only when `rainfs/src` or `pom.xml` changed), and runs
//! its checker, its TeraSort suite and its experiment with `java` directly (no Maven start-up per run).
//!
//! The experiment ([`ExperimentConfig`]) has two parts, both TeraGen / TeraSort / TeraValidate in Hadoop's
//! local job runner over an emulated network (`rainfs/src/main/java/org/ecstack/rainfs/NasLink.java`):
//!
//! * **by NAS count**: RainFS over 1..N NAS at replication 1 and 2, each NAS behind one shared link of B
//!   MB/s and unlimited client links: NAS-bound, how client-level federation adds NAS bandwidth;
//! * **architectures** (seed §2.3 Fig. 2.2, §2.7 Fig. 2.4): DN-on-Client, DN-on-NAS, No-DN and RainFS at
//!   replication 1 and 2 over `arch_nas` NAS, with client links of BC MB/s each way, NAS links of BN each
//!   way and (DN-on-NAS) a DataNode per NAS head of H MB/s. Each architecture charges the links its
//!   transfers cross in the seed's figures; the bytes themselves are stored by RainFS, so every run still
//!   passes TeraValidate.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use crate::{io_at, LabError, Result};

/// The JDK, Maven and the module directory.
#[derive(Debug, Clone)]
pub struct Tools {
    pub java: PathBuf,
    /// `None` when Maven is missing: fine as long as the module is built and up to date.
    pub mvn: Option<PathBuf>,
    pub module: PathBuf,
}

/// The first `name` on `PATH`.
pub(crate) fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// The `rainfs/` module: `$ECSTACK_RAINFS_DIR`, else the first `rainfs/pom.xml` above the current
/// directory or the executable, else the source tree this was built from.
pub fn module_dir() -> Result<PathBuf> {
    if let Some(d) = std::env::var_os("ECSTACK_RAINFS_DIR") {
        let d = PathBuf::from(d);
        if d.join("pom.xml").is_file() {
            return Ok(d);
        }
        return Err(LabError::Run(format!(
            "ECSTACK_RAINFS_DIR={} holds no pom.xml",
            d.display()
        )));
    }
    let mut starts = vec![];
    if let Ok(d) = std::env::current_dir() {
        starts.push(d);
    }
    if let Ok(e) = std::env::current_exe() {
        starts.push(e);
    }
    starts.push(PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    for s in starts {
        for a in s.ancestors() {
            let m = a.join("rainfs");
            if m.join("pom.xml").is_file() {
                return Ok(m);
            }
        }
    }
    Err(LabError::Run(
        "cannot find the rainfs/ Java module (set ECSTACK_RAINFS_DIR to the directory with its pom.xml)"
            .into(),
    ))
}

/// Find `java` (`$JAVA_HOME/bin/java`, else `PATH`), `mvn` (`PATH`) and the module. One line when the JDK
/// is missing.
pub fn tools() -> Result<Tools> {
    let java = std::env::var_os("JAVA_HOME")
        .map(|h| PathBuf::from(h).join("bin/java"))
        .filter(|p| p.is_file())
        .or_else(|| on_path("java"))
        .ok_or_else(|| {
            LabError::Run(
                "rainfs needs a JDK (17 or newer) and Maven: `java` is not on PATH and JAVA_HOME is not set \
                 (apt-get install default-jdk-headless maven; scripts/setup.sh installs both)"
                    .into(),
            )
        })?;
    Ok(Tools {
        java,
        mvn: on_path("mvn"),
        module: module_dir()?,
    })
}

fn newest_mtime(p: &Path) -> SystemTime {
    let Ok(md) = std::fs::symlink_metadata(p) else {
        return SystemTime::UNIX_EPOCH;
    };
    let mut t = md.modified().unwrap_or(SystemTime::UNIX_EPOCH);
    if md.is_dir() {
        if let Ok(rd) = std::fs::read_dir(p) {
            for e in rd.flatten() {
                t = t.max(newest_mtime(&e.path()));
            }
        }
    }
    t
}

/// What to build: the jar (the checker needs only it) or the jar plus the TeraSort classes and their
/// classpath (the suite and the experiment).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Build {
    Jar,
    TeraSort,
}

impl Tools {
    fn target(&self) -> PathBuf {
        self.module.join("target")
    }

    pub fn jar(&self) -> PathBuf {
        self.target().join("rainfs-0.1.0.jar")
    }

    fn stamp(&self, b: Build) -> PathBuf {
        self.target().join(match b {
            Build::Jar => ".ecstack-jar.stamp",
            Build::TeraSort => ".ecstack-terasort.stamp",
        })
    }

    fn outputs(&self, b: Build) -> Vec<PathBuf> {
        let mut v = vec![self.jar(), self.target().join("classpath.txt")];
        if b == Build::TeraSort {
            v.push(self.target().join("terasort-classpath.txt"));
            v.push(
                self.target()
                    .join("test-classes/org/ecstack/rainfs/RainfsExperiment.class"),
            );
        }
        v
    }

    /// Whether `b`'s outputs exist and are newer than `src/` and `pom.xml`.
    pub fn up_to_date(&self, b: Build) -> bool {
        let stamp = self.stamp(b);
        let Ok(built) = std::fs::metadata(&stamp).and_then(|m| m.modified()) else {
            return false;
        };
        let src =
            newest_mtime(&self.module.join("src")).max(newest_mtime(&self.module.join("pom.xml")));
        built >= src && self.outputs(b).iter().all(|p| p.is_file())
    }

    /// Build `b` with Maven unless it is up to date (the first time, Maven downloads ~120 MB of Hadoop
    /// artifacts into ~/.m2). `log` gets one line before a build.
    pub fn ensure_built(&self, b: Build, log: &dyn Fn(&str)) -> Result<()> {
        if self.up_to_date(b) {
            return Ok(());
        }
        let mvn = self.mvn.as_ref().ok_or_else(|| {
            LabError::Run(format!(
                "rainfs needs Maven to build {}: `mvn` is not on PATH (apt-get install maven; scripts/setup.sh \
                 installs it)",
                self.module.display()
            ))
        })?;
        log(&format!(
            "rainfs: building {} with Maven (once; again only when its sources change)",
            self.module.display()
        ));
        let started = SystemTime::now();
        let mut cmd = Command::new(mvn);
        cmd.current_dir(&self.module)
            .args(["-q", "-B", "-DskipTests"]);
        if b == Build::TeraSort {
            cmd.args([
                "-Pterasort",
                "package",
                "dependency:build-classpath",
                "-Dmdep.outputFile=target/terasort-classpath.txt",
                "-Dmdep.includeScope=test",
            ]);
        } else {
            cmd.arg("package");
        }
        let out = cmd
            .output()
            .map_err(|e| LabError::Run(format!("running {}: {e}", mvn.display())))?;
        if !out.status.success() {
            let text = String::from_utf8_lossy(&out.stdout).to_string()
                + &String::from_utf8_lossy(&out.stderr);
            let first = text
                .lines()
                .find(|l| l.contains("ERROR"))
                .unwrap_or_else(|| text.lines().last().unwrap_or(""));
            return Err(LabError::Run(format!(
                "mvn package in {} failed ({}): {}",
                self.module.display(),
                out.status,
                first.trim()
            )));
        }
        // The stamp carries the time the build started: a source edited during the build is seen next time.
        let stamp = self.stamp(b);
        std::fs::write(&stamp, b"").map_err(io_at(&stamp))?;
        let f = std::fs::File::options()
            .write(true)
            .open(&stamp)
            .map_err(io_at(&stamp))?;
        f.set_modified(started).map_err(io_at(&stamp))?;
        if b == Build::TeraSort {
            // The TeraSort build also rebuilt the jar.
            let j = self.stamp(Build::Jar);
            std::fs::copy(&stamp, &j).map_err(io_at(&j))?;
            let f = std::fs::File::options()
                .write(true)
                .open(&j)
                .map_err(io_at(&j))?;
            f.set_modified(started).map_err(io_at(&j))?;
        }
        Ok(())
    }

    fn read_classpath(&self, name: &str) -> Result<String> {
        let p = self.target().join(name);
        Ok(std::fs::read_to_string(&p)
            .map_err(io_at(&p))?
            .trim()
            .to_string())
    }

    /// The jar plus Hadoop's client jars (for `java -cp` or `HADOOP_CLASSPATH`).
    pub fn classpath(&self) -> Result<String> {
        Ok(format!(
            "{}:{}",
            self.jar().display(),
            self.read_classpath("classpath.txt")?
        ))
    }

    /// `java -cp <jar> org.ecstack.rainfs.RainFsck ARGS` (the checker needs no Hadoop jar).
    pub fn fsck(&self, args: &[String]) -> Command {
        let mut c = Command::new(&self.java);
        c.arg("-cp")
            .arg(self.jar())
            .arg("org.ecstack.rainfs.RainFsck")
            .args(args);
        c
    }

    /// `java` with the TeraSort classpath, run in the module directory (the testbeds go to its target/).
    pub fn terasort_java(&self) -> Result<Command> {
        let t = self.target();
        let cp = format!(
            "{}:{}:{}",
            t.join("classes").display(),
            t.join("test-classes").display(),
            self.read_classpath("terasort-classpath.txt")?
        );
        let mut c = Command::new(&self.java);
        c.current_dir(&self.module).arg("-cp").arg(cp);
        Ok(c)
    }

    /// The TeraSort suite (file:// vs rainfs r=1/r=2, a NAS lost and a NAS hung mid-sort) with `rows` rows;
    /// returns its table.
    pub fn terasort_suite(&self, rows: u64) -> Result<String> {
        let mut c = self.terasort_java()?;
        c.arg(format!("-Dterasort.rows={rows}"))
            .arg("org.junit.runner.JUnitCore")
            .arg("org.ecstack.rainfs.TeraSortSuite");
        let out = c
            .output()
            .map_err(|e| LabError::Run(format!("running {}: {e}", self.java.display())))?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            let fail = stdout
                .lines()
                .skip_while(|l| !l.starts_with("1) "))
                .take(3)
                .collect::<Vec<_>>()
                .join(" ");
            return Err(LabError::Run(format!(
                "the TeraSort suite failed ({}): {fail}",
                out.status
            )));
        }
        let p = self.target().join("terasort.md");
        std::fs::read_to_string(&p).map_err(io_at(&p))
    }
}

/// One architecture of the comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Arch {
    #[serde(rename = "rainfs")]
    Rainfs,
    #[serde(rename = "no-dn")]
    NoDn,
    #[serde(rename = "dn-on-client")]
    DnOnClient,
    #[serde(rename = "dn-on-nas")]
    DnOnNas,
}

impl Arch {
    pub const ALL: [Arch; 4] = [Arch::DnOnClient, Arch::DnOnNas, Arch::NoDn, Arch::Rainfs];

    pub fn label(self) -> &'static str {
        match self {
            Arch::Rainfs => "rainfs",
            Arch::NoDn => "no-dn",
            Arch::DnOnClient => "dn-on-client",
            Arch::DnOnNas => "dn-on-nas",
        }
    }

    pub fn parse(s: &str) -> Option<Arch> {
        Arch::ALL.into_iter().find(|a| a.label() == s)
    }

    /// The seed's Fig. 2.4 name.
    pub fn seed_name(self) -> &'static str {
        match self {
            Arch::Rainfs => "RainFS",
            Arch::NoDn => "No-DN",
            Arch::DnOnClient => "DN-on-Client",
            Arch::DnOnNas => "DN-on-NAS",
        }
    }
}

/// `ecstack experiment rainfs`'s settings.
#[derive(Debug, Clone)]
pub struct ExperimentConfig {
    /// TeraSort rows (100 bytes each) per run.
    pub rows: u64,
    /// Concurrent clients (TeraGen writers; task threads are assigned to them round-robin).
    pub clients: u32,
    /// Part 1: NAS counts for RainFS at r=1, 2 (empty: skip the part).
    pub nas_counts: Vec<u32>,
    /// Part 1: each NAS's one shared link, MB/s.
    pub nas_only_mbps: f64,
    /// Part 2: architectures (empty: skip the part).
    pub archs: Vec<Arch>,
    /// Part 2: replication factors.
    pub replications: Vec<u32>,
    /// Part 2: the number of NAS.
    pub arch_nas: u32,
    /// Part 2: each client's link, each way, MB/s.
    pub client_mbps: f64,
    /// Part 2: each NAS's link, each way, MB/s (seed: 2 bonded 10 GbE per NAS against 1 GbE per client, 10
    /// clients per NAS: twice the clients' aggregate).
    pub nas_mbps: f64,
    /// Part 2: each NAS head's DataNode (DN-on-NAS), MB/s.
    pub head_mbps: f64,
    /// Part 2: DN-on-Client's fraction of misplaced read tasks (the seed measured about a third).
    pub misplaced: f64,
}

impl ExperimentConfig {
    /// The long mode's defaults (tens of minutes on 2 busy cores).
    pub fn long() -> Self {
        ExperimentConfig {
            rows: 200_000,
            clients: 4,
            nas_counts: vec![1, 2, 3, 4],
            nas_only_mbps: 3.0,
            archs: Arch::ALL.to_vec(),
            replications: vec![1, 2],
            arch_nas: 2,
            client_mbps: 0.5,
            nas_mbps: 2.0,
            head_mbps: 0.5,
            misplaced: 1.0 / 3.0,
        }
    }

    /// `--quick`: a few small runs for CI (well under a minute once built).
    pub fn quick() -> Self {
        ExperimentConfig {
            rows: 8_000,
            nas_counts: vec![1],
            archs: vec![Arch::DnOnClient, Arch::Rainfs],
            replications: vec![2],
            client_mbps: 2.0,
            nas_mbps: 8.0,
            head_mbps: 2.0,
            nas_only_mbps: 4.0,
            ..Self::long()
        }
    }

    pub fn validate(&self) -> Result<()> {
        let bad = |field, msg: String| Err(LabError::Config { field, msg });
        if self.rows < 1000 || self.rows % u64::from(self.clients.max(1)) != 0 {
            return bad(
                "rows",
                format!(
                    "{} rows: at least 1000, and a multiple of --clients",
                    self.rows
                ),
            );
        }
        if !(1..=64).contains(&self.clients) {
            return bad("clients", format!("{} is not in 1..=64", self.clients));
        }
        for (field, v) in [
            ("nas-only-mbps", self.nas_only_mbps),
            ("client-mbps", self.client_mbps),
            ("nas-mbps", self.nas_mbps),
            ("head-mbps", self.head_mbps),
        ] {
            if !(v.is_finite() && v > 0.0 && v <= 1e5) {
                return bad(field, format!("{v} is not a bandwidth in (0, 1e5] MB/s"));
            }
        }
        if !(0.0..=1.0).contains(&self.misplaced) {
            return bad("misplaced", format!("{} is not in [0, 1]", self.misplaced));
        }
        if let Some(n) = self.nas_counts.iter().find(|&&n| !(1..=16).contains(&n)) {
            return bad("nas-counts", format!("{n} is not in 1..=16"));
        }
        if !(2..=16).contains(&self.arch_nas) && !self.archs.is_empty() {
            return bad(
                "arch-nas",
                format!(
                    "{} is not in 2..=16 (DN-on-Client's second replica goes to another rack's NAS)",
                    self.arch_nas
                ),
            );
        }
        if let Some(r) = self.replications.iter().find(|&&r| !(1..=2).contains(&r)) {
            return bad(
                "replications",
                format!(
                    "{r}: the seed compares replication 1 and 2 (HDFS on NAS stops at 2, §2.4.3)"
                ),
            );
        }
        if self.nas_counts.is_empty() && self.archs.is_empty() {
            return bad(
                "archs",
                "nothing to run (no NAS counts and no architectures)".into(),
            );
        }
        Ok(())
    }

    /// The runs as `ARCH:NAS:R[:shared]` for the Java side.
    fn runs(&self) -> Vec<String> {
        let mut v = vec![];
        for &n in &self.nas_counts {
            for r in 1..=n.min(2) {
                v.push(format!("rainfs:{n}:{r}:shared"));
            }
        }
        for &r in &self.replications {
            for &a in &self.archs {
                if a == Arch::NoDn && r > 1 {
                    continue; // No-DN cannot replicate (seed Fig. 2.4, bottom)
                }
                v.push(format!("{}:{}:{r}", a.label(), self.arch_nas));
            }
        }
        v
    }
}

/// One run, as the Java side writes it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Row {
    /// `nas-only` (part 1) or `client+nas` (part 2).
    pub links: String,
    pub arch: Arch,
    pub nas: u32,
    pub clients: u32,
    pub replication: u32,
    pub rows: u64,
    pub mb: f64,
    pub nas_mbps: f64,
    pub client_mbps: f64,
    pub head_mbps: f64,
    pub teragen_s: f64,
    pub terasort_s: f64,
    pub teravalidate_s: f64,
    /// Bytes sent over client and NAS links per byte of data during TeraGen (network transits).
    pub teragen_sends_per_byte: f64,
    pub teravalidate_sends_per_byte: f64,
}

impl Row {
    pub fn gen_mbps(&self) -> f64 {
        self.mb / self.teragen_s
    }
    pub fn sort_mbps(&self) -> f64 {
        self.mb / self.terasort_s
    }
    pub fn validate_mbps(&self) -> f64 {
        self.mb / self.teravalidate_s
    }
}

/// The experiment's results.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub rows: Vec<Row>,
    #[serde(skip)]
    pub config_line: String,
}

/// Run the experiment (one JVM, every run in it); `log` gets progress lines.
pub fn run(tools: &Tools, cfg: &ExperimentConfig, log: &dyn Fn(&str)) -> Result<Report> {
    cfg.validate()?;
    tools.ensure_built(Build::TeraSort, log)?;
    let dir =
        tempfile::tempdir().map_err(|e| LabError::Run(format!("a temporary directory: {e}")))?;
    let csv = dir.path().join("runs.csv");
    let mut c = tools.terasort_java()?;
    c.arg("org.ecstack.rainfs.RainfsExperiment")
        .arg("--runs")
        .arg(cfg.runs().join(","))
        .args(["--rows", &cfg.rows.to_string()])
        .args(["--clients", &cfg.clients.to_string()])
        .args(["--nas-mbps", &cfg.nas_mbps.to_string()])
        .args(["--client-mbps", &cfg.client_mbps.to_string()])
        .args(["--head-mbps", &cfg.head_mbps.to_string()])
        .args(["--misplaced", &cfg.misplaced.to_string()])
        .args(["--shared-nas-mbps", &cfg.nas_only_mbps.to_string()])
        .arg("--csv")
        .arg(&csv)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    log(&format!(
        "rainfs experiment: {} runs of {} rows each (TeraGen, TeraSort, TeraValidate)",
        cfg.runs().len(),
        cfg.rows
    ));
    let mut child = c
        .spawn()
        .map_err(|e| LabError::Run(format!("running {}: {e}", tools.java.display())))?;
    let mut last = String::new();
    if let Some(err) = child.stderr.take() {
        use std::io::BufRead;
        for line in std::io::BufReader::new(err).lines().map_while(|l| l.ok()) {
            if line.starts_with("rainfs experiment") || line.starts_with("  TeraGen") {
                log(&line);
            }
            if !line.trim().is_empty() {
                last = line;
            }
        }
    }
    let status = child
        .wait()
        .map_err(|e| LabError::Run(format!("waiting for java: {e}")))?;
    if !status.success() {
        return Err(LabError::Run(format!(
            "the RainFS experiment failed ({status}): {last}"
        )));
    }
    let mut rd = csv::Reader::from_path(&csv)
        .map_err(|e| LabError::Run(format!("{}: {e}", csv.display())))?;
    let rows = rd
        .deserialize()
        .collect::<std::result::Result<Vec<Row>, _>>()
        .map_err(|e| LabError::Run(format!("{}: {e}", csv.display())))?;
    Ok(Report {
        rows,
        config_line: format!(
            "{} rows ({} MB) per run, {} clients; by NAS count: one shared {} MB/s link per NAS; \
             architectures: {} NAS, client links {} MB/s, NAS links {} MB/s each way, NAS head DataNode {} MB/s, \
             DN-on-Client misplaced reads {:.2}",
            cfg.rows,
            cfg.rows as f64 * 100.0 / 1e6,
            cfg.clients,
            cfg.nas_only_mbps,
            cfg.arch_nas,
            cfg.client_mbps,
            cfg.nas_mbps,
            cfg.head_mbps,
            cfg.misplaced
        ),
    })
}

/// The seed's r=1 → r=2 write slowdowns (§2.7.3, Fig. 2.5): DN-on-NAS 2.38×, RainFS 1.52×; DN-on-Client
/// "matches up with" the intuition of 2×.
pub fn seed_write_slowdown(a: Arch) -> Option<f64> {
    match a {
        Arch::DnOnNas => Some(2.38),
        Arch::Rainfs => Some(1.52),
        Arch::DnOnClient => Some(2.0),
        Arch::NoDn => None,
    }
}

/// NAS systems in the report's copy of Table 2.1 (as `ecstack reliability table`'s default).
const TABLE_2_1_NAS: usize = 3;

impl Report {
    fn part(&self, links: &str) -> Vec<&Row> {
        self.rows.iter().filter(|r| r.links == links).collect()
    }

    /// r=1 → r=2 TeraGen slowdown of `a` in part 2.
    pub fn write_slowdown(&self, a: Arch) -> Option<f64> {
        let p = self.part("client+nas");
        let t = |r| {
            p.iter()
                .find(|x| x.arch == a && x.replication == r)
                .map(|x| x.teragen_s)
        };
        Some(t(2)? / t(1)?)
    }

    pub fn markdown(&self) -> String {
        let mut s = format!("# RainFS experiment\n\n{}\n", self.config_line);
        let p1 = self.part("nas-only");
        if !p1.is_empty() {
            s += "\n## RainFS by NAS count (NAS-bound: one shared link per NAS, no client links)\n\n";
            s += "| NAS | r | TeraGen s | TeraGen MB/s | n·B/r | TeraSort s | TeraSort MB/s | TeraValidate s | TeraValidate MB/s |\n";
            s += "|---|---|---|---|---|---|---|---|---|\n";
            for r in p1 {
                s += &format!(
                    "| {} | {} | {:.1} | {:.2} | {:.1} | {:.1} | {:.2} | {:.1} | {:.2} |\n",
                    r.nas,
                    r.replication,
                    r.teragen_s,
                    r.gen_mbps(),
                    f64::from(r.nas) * r.nas_mbps / f64::from(r.replication),
                    r.terasort_s,
                    r.sort_mbps(),
                    r.teravalidate_s,
                    r.validate_mbps()
                );
            }
        }
        let p2 = self.part("client+nas");
        if !p2.is_empty() {
            s += "\n## Architectures (seed Fig. 2.4): client, NAS and NAS-head links emulated\n\n";
            s += "| architecture | r | TeraGen MB/s | TeraSort MB/s | TeraValidate MB/s | write sends/byte | read sends/byte |\n";
            s += "|---|---|---|---|---|---|---|\n";
            for r in &p2 {
                s += &format!(
                    "| {} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} |\n",
                    r.arch.seed_name(),
                    r.replication,
                    r.gen_mbps(),
                    r.sort_mbps(),
                    r.validate_mbps(),
                    r.teragen_sends_per_byte,
                    r.teravalidate_sends_per_byte
                );
            }
            let mut slow = String::new();
            for a in Arch::ALL {
                if let Some(x) = self.write_slowdown(a) {
                    slow += &format!(
                        "| {} | {:.2}× | {} |\n",
                        a.seed_name(),
                        x,
                        seed_write_slowdown(a)
                            .map(|v| format!("{v:.2}×"))
                            .unwrap_or_default()
                    );
                }
            }
            if !slow.is_empty() {
                s += "\nTeraGen slowdown from r=1 to r=2 (seed Fig. 2.5):\n\n| architecture | here | seed |\n|---|---|---|\n";
                s += &slow;
            }
            // The other half of the seed's comparison is reliability, not speed: Table 2.1, from the
            // reliability calculator (`ecstack reliability table`, docs/reliability.md).
            s += &format!(
                "\nFailures tolerated without data loss (seed Table 2.1, {TABLE_2_1_NAS} NAS systems, one per rack; \
                 `ecstack reliability table --nas N`), disks / racks:\n\n```text\n{}```\n",
                ecstack_sim::reliability::rainfs::table_2_1(TABLE_2_1_NAS)
            );
        }
        s
    }

    /// report.md, rainfs.csv, and (with part 2) rainfs-architectures.svg in `out`.
    pub fn write(&self, out: &Path) -> Result<()> {
        std::fs::create_dir_all(out).map_err(io_at(out))?;
        let md = out.join("report.md");
        std::fs::write(&md, self.markdown()).map_err(io_at(&md))?;
        crate::table::write_csv(&out.join("rainfs.csv"), &self.rows)?;
        let p2 = self.part("client+nas");
        if !p2.is_empty() {
            let categories: Vec<String> = p2
                .iter()
                .map(|r| format!("{} r={}", r.arch.seed_name(), r.replication))
                .collect();
            let series = vec![
                (
                    "TeraGen (write)".to_string(),
                    p2.iter().map(|r| r.gen_mbps()).collect(),
                ),
                (
                    "TeraSort".to_string(),
                    p2.iter().map(|r| r.sort_mbps()).collect(),
                ),
                (
                    "TeraValidate (read)".to_string(),
                    p2.iter().map(|r| r.validate_mbps()).collect(),
                ),
            ];
            crate::plot::Bars {
                title: "TeraSort suite by architecture (emulated links)",
                x_label: "architecture, replication",
                y_label: "throughput (MB/s)",
                categories,
                series,
                stacked: false,
            }
            .write_svg(&out.join("rainfs-architectures.svg"))?;
        }
        let p1 = self.part("nas-only");
        if !p1.is_empty() {
            let series = (1..=2)
                .map(|r| {
                    (
                        format!("TeraGen r={r}"),
                        p1.iter()
                            .filter(|x| x.replication == r)
                            .map(|x| (f64::from(x.nas), x.gen_mbps()))
                            .collect::<Vec<_>>(),
                    )
                })
                .filter(|(_, v)| !v.is_empty())
                .collect();
            crate::plot::Lines {
                title: "RainFS write throughput by NAS count (NAS-bound)",
                x_label: "NAS systems",
                y_label: "TeraGen (MB/s)",
                series,
                y_range: None,
            }
            .write_svg(&out.join("rainfs-nas-count.svg"))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_skip_replication_for_no_dn_and_cap_r_at_n() {
        let mut c = ExperimentConfig::long();
        c.nas_counts = vec![1, 2];
        c.replications = vec![1, 2];
        let runs = c.runs();
        assert_eq!(
            &runs[..3],
            [
                "rainfs:1:1:shared",
                "rainfs:2:1:shared",
                "rainfs:2:2:shared"
            ]
        );
        assert!(runs.contains(&"no-dn:2:1".to_string()));
        assert!(!runs.contains(&"no-dn:2:2".to_string()));
        assert_eq!(runs.len(), 3 + 4 + 3);
        c.validate().unwrap();
        c.rows = 1001;
        assert!(c.validate().unwrap_err().to_string().starts_with("rows:"));
    }
}
