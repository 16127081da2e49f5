//! An emulated cluster network for `ecstack experiment codfs`: one Linux network namespace per host
//! (the MDS, each OSD, each client), each joined by a veth pair to a bridge in a hub namespace, and
//! `tc` token-bucket filters (tbf) on every OSD's link in both directions, so that each OSD's
//! inbound and outbound bandwidth is the B of CodFS's throughput model (thesis §5.1). The MDS's and
//! the clients' links are not limited (the model charges only the OSDs).
//!
//! A heterogeneous testbed ([`Testbed::create_shaped`], RobuSTore's servers of different speeds and
//! distances) gives every OSD its own [`Shaping`]: its rate (the tbf, both directions) and a delay
//! added to every round trip through it, on the host's outbound side. `netem` would be the tool, but
//! the kernels this project runs on are built without it (`CONFIG_NET_SCH_NETEM` unset: "Specified
//! qdisc kind is unknown"), so the delay is a userspace delay line in the hub namespace
//! (`crate::delay_line`): the delayed host's hub-side veth end leaves the bridge, and the line
//! forwards its frames to a second veth pair whose other end is the bridge port, each frame `delay`
//! after it left the host's tbf (the rate, then the distance, as on a slower link further away);
//! frames to the host pass at once, through the tbf on the hub-side end. [`Testbed::create`] is the
//! homogeneous case: one rate, no delay, no delay lines.
//!
//! Needs root and iproute2 (`ip`, `tc`). Every namespace is deleted when the [`Testbed`] is dropped,
//! on Ctrl-C or SIGTERM (the binary's signal handler calls [`cleanup`]; this library installs none),
//! and namespaces of an earlier run whose process is gone are deleted when a new testbed is created.
//!
//! Addresses: 10.77.0.0/16, host `i` (0-based, in creation order) at 10.77.(i / 250).(i % 250 + 2).
//!
//! TCP congestion control: every host of a testbed runs the one it is created with
//! (`net.ipv4.tcp_congestion_control` is per namespace, and a new namespace starts with the
//! machine's). It matters here: with BBR (v1), some machines' default, the 15–20 flows into an OSD's
//! tbf overflow its queue far more often than with CUBIC, Linux's stock default, and the
//! retransmissions and backoffs leave the links idle part of the time (docs/benchmarks.md).
//! The kernel lets a namespace other than the initial one choose only a congestion control listed
//! in `net.ipv4.tcp_allowed_congestion_control` (a machine whose default is BBR may list only
//! `reno bbr`), so [`allow_congestion_control`] adds the one asked for to that list from the
//! initial namespace first (root may; the list only widens what namespaces may pick, no default
//! changes). Where that is refused, the hosts keep the machine's default and the testbed says why
//! ([`Testbed::congestion_note`]); the experiment never fails for it.

use std::net::Ipv4Addr;
use std::process::Command;
use std::sync::Mutex;

use crate::netns_thread::{enter_namespace, in_namespace};
use crate::{LabError, Result};

/// Namespaces of this tool start with this (then the owning pid, so leftovers can be recognised).
const NS_PREFIX: &str = "ecsb";

/// What the signal thread must undo: daemons to kill and namespaces to delete.
static CLEANUP: Mutex<Cleanup> = Mutex::new(Cleanup {
    pids: Vec::new(),
    namespaces: Vec::new(),
});

struct Cleanup {
    pids: Vec<u32>,
    namespaces: Vec<String>,
}

/// Registers a process to SIGKILL if the run is interrupted (a daemon inside a namespace).
pub fn register_pid(pid: u32) {
    CLEANUP
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .pids
        .push(pid);
}

/// Forgets a process that was reaped (its pid may be reused).
pub fn unregister_pid(pid: u32) {
    CLEANUP
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .pids
        .retain(|&p| p != pid);
}

/// Undo an interrupted run: SIGKILL the registered daemons and delete the registered namespaces
/// (newest first). The binary calls it from its SIGINT/SIGTERM handler, then exits; this library
/// installs no handler. Safe to call from any thread at any time; what it undid is forgotten.
pub fn cleanup() {
    let mut c = CLEANUP.lock().unwrap_or_else(|e| e.into_inner());
    for &pid in &c.pids {
        // SAFETY: kill takes two integers and touches no memory of this process.
        unsafe {
            libc::kill(pid as libc::pid_t, libc::SIGKILL);
        }
    }
    c.pids.clear();
    for ns in c.namespaces.iter().rev() {
        delete_namespace(ns);
    }
    c.namespaces.clear();
}

/// One emulated host.
#[derive(Debug, Clone)]
pub struct Host {
    /// The namespace (`ip netns exec NAME …`).
    pub namespace: String,
    pub ip: Ipv4Addr,
    /// The hub side of its veth pair.
    hub_link: String,
    /// tc rate of its link in each direction, Mbit/s (`None`: not limited).
    pub rate_mbit: Option<f64>,
    /// Added to every round trip through this host (netem on its outbound side), ms.
    pub delay_ms: f64,
}

/// One host's link shaping in a heterogeneous testbed: a rate in each direction and a delay added to
/// every round trip through the host.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Shaping {
    /// Mbit/s, each direction (tbf).
    pub rate_mbit: f64,
    /// ms, on the host's outbound side (netem).
    pub delay_ms: f64,
}

impl Shaping {
    /// A rate and no delay.
    pub fn rate(rate_mbit: f64) -> Shaping {
        Shaping {
            rate_mbit,
            delay_ms: 0.0,
        }
    }
}

/// What a host's link has carried so far, in bytes as the veth counts them (Ethernet frames, but a
/// GSO packet's headers once, so a little less than its tbf charges: see [`TbfCounters`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkBytes {
    pub sent: u64,
    pub received: u64,
}

/// Reads the link counters of some hosts in one `ip` call, on the hub side of their veth pairs (the
/// hub end receives what the host sends). Cheap enough to sample a few times a second.
#[derive(Debug, Clone)]
pub struct LinkProbe {
    hub: String,
    links: Vec<String>,
    /// The hosts' own namespaces (their outbound tbf is on their end of the link).
    namespaces: Vec<String>,
}

/// What a host's link tbf has counted so far, each way: bytes sent on (each packet's length as the
/// tbf charges it, every segment's headers included; a veth's own counters count a GSO packet's
/// headers once) and packets dropped because its queue was full.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TbfCounters {
    pub sent: Tbf,
    pub received: Tbf,
}

/// One tbf's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tbf {
    pub bytes: u64,
    pub drops: u64,
}

impl LinkProbe {
    /// The counters of each host, in the order the probe was made with.
    pub fn read(&self) -> Result<Vec<LinkBytes>> {
        let out = sh_output(&["ip", "-n", &self.hub, "-s", "-j", "link", "show"])?;
        parse_link_counters(&out, &self.links)
    }

    /// The counters of each host's tbf, both ways (one `tc` call for the hub's side, one per host
    /// for its own): a few milliseconds each, so read at the ends of a measurement, not sampled.
    pub fn tbf(&self) -> Result<Vec<TbfCounters>> {
        let inbound = tbf_counters(&self.hub)?;
        self.links
            .iter()
            .zip(&self.namespaces)
            .map(|(link, ns)| {
                let outbound = tbf_counters(ns)?;
                let get = |m: &std::collections::HashMap<String, Tbf>, dev: &str| {
                    m.get(dev).copied().ok_or_else(|| {
                        LabError::Run(format!("tc -s qdisc show: no tbf on {dev} ({ns})"))
                    })
                };
                Ok(TbfCounters {
                    sent: get(&outbound, "eth0")?,
                    received: get(&inbound, link)?,
                })
            })
            .collect()
    }
}

/// The counters of every tbf in namespace `ns`, by device.
fn tbf_counters(ns: &str) -> Result<std::collections::HashMap<String, Tbf>> {
    parse_tbf(&sh_output(&["tc", "-n", ns, "-s", "-j", "qdisc", "show"])?)
}

/// A command's `-j` output: a JSON list of `items`; `bad` makes the error naming the command.
fn json_list(
    json: &[u8],
    items: &str,
    bad: impl Fn(String) -> LabError,
) -> Result<Vec<serde_json::Value>> {
    match serde_json::from_slice(json) {
        Ok(serde_json::Value::Array(list)) => Ok(list),
        Ok(_) => Err(bad(format!("not a list of {items}"))),
        Err(e) => Err(bad(format!("not JSON: {e}"))),
    }
}

/// The `bytes` and `drops` of every tbf in `tc -s -j qdisc show`'s output, by device.
fn parse_tbf(json: &[u8]) -> Result<std::collections::HashMap<String, Tbf>> {
    let bad = |what: String| LabError::Run(format!("tc -s -j qdisc show: {what}"));
    let list = json_list(json, "qdiscs", bad)?;
    let mut out = std::collections::HashMap::new();
    for q in list.iter().filter(|q| q["kind"] == "tbf") {
        let dev = q["dev"]
            .as_str()
            .ok_or_else(|| bad("a tbf without a device".into()))?;
        let counter = |name: &str| {
            q[name]
                .as_u64()
                .ok_or_else(|| bad(format!("{dev}: no {name} counter")))
        };
        out.insert(
            dev.to_owned(),
            Tbf {
                bytes: counter("bytes")?,
                drops: counter("drops")?,
            },
        );
    }
    Ok(out)
}

/// The (rx, tx) counters of `links` in `ip -s -j link show`'s output, as the hosts' (sent, received).
fn parse_link_counters(json: &[u8], links: &[String]) -> Result<Vec<LinkBytes>> {
    let bad = |what: String| LabError::Run(format!("ip -s -j link show: {what}"));
    let list = json_list(json, "links", bad)?;
    links
        .iter()
        .map(|name| {
            let l = list
                .iter()
                .find(|l| l["ifname"].as_str() == Some(name.as_str()))
                .ok_or_else(|| bad(format!("no link {name}")))?;
            let counter = |dir: &str| {
                l["stats64"][dir]["bytes"]
                    .as_u64()
                    .ok_or_else(|| bad(format!("{name}: no stats64.{dir}.bytes")))
            };
            Ok(LinkBytes {
                sent: counter("rx")?,
                received: counter("tx")?,
            })
        })
        .collect()
}

/// The namespaces of one run; all deleted on drop.
pub struct Testbed {
    /// The TCP congestion control set in every namespace (`None`: left as the machine's).
    tcp_cc: Option<String>,
    /// Why the congestion control asked for is not the one the hosts run (`None`: it is).
    cc_note: Option<String>,
    hub: String,
    pub mds: Host,
    pub osds: Vec<Host>,
    pub clients: Vec<Host>,
    /// The delayed hosts' delay lines (stopped on drop).
    delay_lines: Vec<crate::delay_line::DelayLine>,
}

/// Runs a command; its stderr (or status) as one error line on failure.
fn sh(args: &[&str]) -> Result<()> {
    sh_output(args).map(drop)
}

/// Runs a command and returns its stdout; its stderr (or status) as one error line on failure.
fn sh_output(args: &[&str]) -> Result<Vec<u8>> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .map_err(|e| LabError::Run(format!("cannot run {}: {e}", args[0])))?;
    if out.status.success() {
        Ok(out.stdout)
    } else {
        Err(LabError::Run(format!(
            "`{}` failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

fn delete_namespace(ns: &str) {
    // Deleting a namespace removes its links (and the hub's bridge) with it.
    let _ = Command::new("ip").args(["netns", "del", ns]).output();
}

/// `ip` and `tc` present and we are root: otherwise one line saying what is missing.
pub fn check_tools() -> Result<()> {
    for tool in ["ip", "tc"] {
        let found = Command::new(tool)
            .arg("-V")
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false);
        if !found {
            return Err(LabError::Run(format!(
                "`{tool}` not found: the emulated network needs iproute2 (apt-get install iproute2)"
            )));
        }
    }
    // SAFETY: geteuid has no arguments and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Err(LabError::Run(
            "the emulated network needs root (network namespaces and tc)".into(),
        ));
    }
    Ok(())
}

/// A namespace's TCP congestion control (what its sockets start with), as seen from a thread in it.
const TCP_CC_SYSCTL: &str = "/proc/sys/net/ipv4/tcp_congestion_control";
/// The machine's congestion controls that are loaded.
const TCP_CC_AVAILABLE: &str = "/proc/sys/net/ipv4/tcp_available_congestion_control";
/// Those of them a namespace other than the initial one may pick (global; root sets it).
const TCP_CC_ALLOWED: &str = "/proc/sys/net/ipv4/tcp_allowed_congestion_control";

/// `cc` is a congestion control this kernel has loaded: otherwise one line naming those it has.
pub fn check_congestion_control(cc: &str) -> Result<()> {
    let text = std::fs::read_to_string(TCP_CC_AVAILABLE)
        .map_err(|e| LabError::Run(format!("{TCP_CC_AVAILABLE}: {e}")))?;
    if text.split_whitespace().any(|c| c == cc) {
        return Ok(());
    }
    Err(LabError::Config {
        field: "tcp-cc",
        msg: format!(
            "{cc}: not a TCP congestion control this kernel has loaded (it has: {}; `modprobe tcp_{cc}` may add it)",
            text.trim()
        ),
    })
}

/// Makes `cc` (loaded: [`check_congestion_control`]) one that new namespaces may pick, adding it to
/// `net.ipv4.tcp_allowed_congestion_control` from the initial namespace if it is not listed.
/// `Err` says why it could not be (not root, a read-only /proc/sys): the caller then runs with the
/// machine's default and reports that.
pub fn allow_congestion_control(cc: &str) -> std::result::Result<(), String> {
    let allowed =
        std::fs::read_to_string(TCP_CC_ALLOWED).map_err(|e| format!("{TCP_CC_ALLOWED}: {e}"))?;
    if allowed.split_whitespace().any(|c| c == cc) {
        return Ok(());
    }
    let wider = format!("{} {cc}", allowed.trim());
    std::fs::write(TCP_CC_ALLOWED, &wider).map_err(|e| {
        format!(
            "cannot add {cc} to {TCP_CC_ALLOWED} ({}): {e}",
            allowed.trim()
        )
    })?;
    Ok(())
}

/// A TCP listener on `host`'s address, on a thread of its own moved into its namespace, which then
/// runs `serve` with it: the port, and the thread to join for `serve`'s result. `what` names the
/// measurement in errors.
fn listen_on<T: Send + 'static>(
    host: &Host,
    what: &'static str,
    serve: impl FnOnce(std::net::TcpListener) -> Result<T> + Send + 'static,
) -> Result<(u16, std::thread::JoinHandle<Result<T>>)> {
    let (tx, rx) = std::sync::mpsc::channel::<Result<u16>>();
    let host = host.clone();
    let thread = std::thread::spawn(move || -> Result<T> {
        let bound = Testbed::enter(&host).and_then(|()| {
            let l = std::net::TcpListener::bind((host.ip, 0))
                .map_err(|e| LabError::Run(format!("{what} bind: {e}")))?;
            let port = l
                .local_addr()
                .map_err(|e| LabError::Run(format!("{what} bind: {e}")))?
                .port();
            Ok((l, port))
        });
        match bound {
            Ok((l, port)) => {
                let _ = tx.send(Ok(port));
                serve(l)
            }
            Err(e) => {
                let _ = tx.send(Err(LabError::Run(e.to_string())));
                Err(e)
            }
        }
    });
    let port = rx
        .recv()
        .map_err(|_| LabError::Run(format!("{what}: the listener thread ended")))??;
    Ok((port, thread))
}

/// Deletes namespaces left by runs whose process no longer exists (a SIGKILLed experiment).
fn delete_leftovers() {
    let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else {
        return;
    };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        let Some(rest) = name.strip_prefix(NS_PREFIX) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<i32>().ok()) else {
            continue;
        };
        // SAFETY: kill with signal 0 only checks that the process exists.
        let alive = unsafe { libc::kill(pid, 0) } == 0;
        if !alive {
            delete_namespace(name);
        }
    }
}

fn host_ip(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 77, (i / 250) as u8, (i % 250 + 2) as u8)
}

/// A delayed host's second veth pair in the hub: (bridge port, delay line's end).
fn delay_pair(hub_link: &str) -> (String, String) {
    (format!("{hub_link}p"), format!("{hub_link}d"))
}

/// tbf burst: a few milliseconds of the rate, and at least a GSO packet (64 KiB).
fn burst_bytes(rate_mbit: f64) -> u64 {
    ((rate_mbit * 1e6 / 8.0 / 200.0) as u64).max(64 << 10)
}

/// Every rate finite and > 0, every delay finite and >= 0: one line naming the first OSD that is not.
fn check_shaping(osds: &[Shaping]) -> Result<()> {
    let many = osds.len() > 1;
    for (i, s) in osds.iter().enumerate() {
        let who = if many {
            format!("OSD {i}: ")
        } else {
            String::new()
        };
        if !(s.rate_mbit.is_finite() && s.rate_mbit > 0.0) {
            return Err(LabError::Config {
                field: "rate-mbit",
                msg: format!("{who}{}: must be a positive number of Mbit/s", s.rate_mbit),
            });
        }
        if !(s.delay_ms.is_finite() && s.delay_ms >= 0.0) {
            return Err(LabError::Config {
                field: "delay-ms",
                msg: format!("{who}{}: must be a finite number of ms >= 0", s.delay_ms),
            });
        }
    }
    Ok(())
}

impl Testbed {
    /// Creates the hub, the MDS host, `osds` OSD hosts limited to `rate_mbit` in each direction,
    /// and `clients` client hosts. On error, whatever was created is deleted.
    /// Every host runs TCP congestion control `tcp_cc` (`None`: the machine's default). A `tcp_cc`
    /// the kernel has not loaded is an error; one it has but may not allow namespaces to pick runs
    /// the machine's default instead, and [`Testbed::congestion_note`] says why.
    pub fn create(
        osds: usize,
        clients: usize,
        rate_mbit: f64,
        tcp_cc: Option<&str>,
    ) -> Result<Testbed> {
        Testbed::create_shaped(&vec![Shaping::rate(rate_mbit); osds], clients, tcp_cc)
    }

    /// [`Testbed::create`] with one [`Shaping`] per OSD (its rate and delay; `osds.len()` OSDs).
    pub fn create_shaped(
        osds: &[Shaping],
        clients: usize,
        tcp_cc: Option<&str>,
    ) -> Result<Testbed> {
        check_shaping(osds)?;
        check_tools()?;
        let mut cc_note = None;
        let mut tcp_cc = tcp_cc;
        if let Some(cc) = tcp_cc {
            check_congestion_control(cc)?;
            if let Err(why) = allow_congestion_control(cc) {
                cc_note = Some(format!("{cc} was asked for, but {why}"));
                tcp_cc = None;
            }
        }
        delete_leftovers();
        let prefix = format!("{NS_PREFIX}{}", std::process::id());
        let hub = format!("{prefix}-hub");
        let mut bed = Testbed {
            tcp_cc: tcp_cc.map(str::to_owned),
            cc_note,
            hub: hub.clone(),
            mds: Host {
                namespace: String::new(),
                ip: host_ip(0),
                hub_link: String::new(),
                rate_mbit: None,
                delay_ms: 0.0,
            },
            osds: Vec::new(),
            clients: Vec::new(),
            delay_lines: Vec::new(),
        };
        bed.add_namespace(&hub)?;
        sh(&["ip", "-n", &hub, "link", "add", "br0", "type", "bridge"])?;
        sh(&["ip", "-n", &hub, "link", "set", "br0", "up"])?;
        let mut index = 0;
        let mut host =
            |bed: &mut Testbed, name: String, shaping: Option<Shaping>| -> Result<Host> {
                let h = Host {
                    namespace: format!("{prefix}-{name}"),
                    ip: host_ip(index),
                    hub_link: format!("v{index}"),
                    rate_mbit: shaping.map(|s| s.rate_mbit),
                    delay_ms: shaping.map_or(0.0, |s| s.delay_ms),
                };
                index += 1;
                bed.add_host(&h)?;
                Ok(h)
            };
        bed.mds = host(&mut bed, "mds".into(), None)?;
        for (i, &shaping) in osds.iter().enumerate() {
            let h = host(&mut bed, format!("o{i}"), Some(shaping))?;
            bed.osds.push(h);
        }
        for j in 0..clients {
            let h = host(&mut bed, format!("c{j}"), None)?;
            bed.clients.push(h);
        }
        Ok(bed)
    }

    fn add_namespace(&mut self, ns: &str) -> Result<()> {
        sh(&["ip", "netns", "add", ns])?;
        CLEANUP
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .namespaces
            .push(ns.to_owned());
        if let Some(cc) = self.tcp_cc.clone() {
            let set = in_namespace(ns, move || {
                std::fs::write(TCP_CC_SYSCTL, &cc)
                    .map_err(|e| LabError::Run(format!("{TCP_CC_SYSCTL} = {cc}: {e}")))
            });
            if let Err(e) = set {
                // Allowed a moment ago, refused now: the hosts made from here on keep the
                // machine's default, and the report names both (read back from the MDS's host).
                self.cc_note = Some(e.to_string());
                self.tcp_cc = None;
            }
        }
        sh(&["ip", "-n", ns, "link", "set", "lo", "up"])
    }

    /// Why the hosts do not run the congestion control the testbed was created with (`None`: they
    /// do, or none was asked for).
    pub fn congestion_note(&self) -> Option<&str> {
        self.cc_note.as_deref()
    }

    /// The TCP congestion control the hosts run (read from the MDS host's namespace).
    pub fn congestion_control(&self) -> Result<String> {
        in_namespace(&self.mds.namespace, || {
            std::fs::read_to_string(TCP_CC_SYSCTL)
                .map(|s| s.trim().to_owned())
                .map_err(|e| LabError::Run(format!("{TCP_CC_SYSCTL}: {e}")))
        })
    }

    fn add_host(&mut self, h: &Host) -> Result<()> {
        self.add_namespace(&h.namespace)?;
        let hub = self.hub.clone();
        let hub = hub.as_str();
        let ns = h.namespace.as_str();
        sh(&[
            "ip",
            "-n",
            hub,
            "link",
            "add",
            &h.hub_link,
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            ns,
        ])?;
        if h.delay_ms > 0.0 {
            // The host's hub-side end stays out of the bridge; a delay line carries its frames to
            // a second pair whose far end is the bridge port.
            let (port, line_end) = delay_pair(&h.hub_link);
            sh(&[
                "ip", "-n", hub, "link", "add", &port, "type", "veth", "peer", "name", &line_end,
            ])?;
            sh(&["ip", "-n", hub, "link", "set", &port, "master", "br0", "up"])?;
            sh(&["ip", "-n", hub, "link", "set", &line_end, "up"])?;
            sh(&["ip", "-n", hub, "link", "set", &h.hub_link, "up"])?;
        } else {
            sh(&[
                "ip",
                "-n",
                hub,
                "link",
                "set",
                &h.hub_link,
                "master",
                "br0",
                "up",
            ])?;
        }
        sh(&[
            "ip",
            "-n",
            ns,
            "addr",
            "add",
            &format!("{}/16", h.ip),
            "dev",
            "eth0",
        ])?;
        sh(&["ip", "-n", ns, "link", "set", "eth0", "up"])?;
        if let Some(rate) = h.rate_mbit {
            let rate_arg = format!("{rate}mbit");
            let burst = burst_bytes(rate).to_string();
            // Outbound of the host: its own end's egress. Inbound: the hub end's egress.
            for (netns, dev) in [(ns, "eth0"), (hub, h.hub_link.as_str())] {
                sh(&[
                    "tc", "-n", netns, "qdisc", "add", "dev", dev, "root", "tbf", "rate",
                    &rate_arg, "burst", &burst, "latency", "100ms",
                ])?;
            }
        }
        if h.delay_ms > 0.0 {
            let (_, line_end) = delay_pair(&h.hub_link);
            let line = crate::delay_line::DelayLine::start(
                hub,
                &h.hub_link,
                &line_end,
                std::time::Duration::from_secs_f64(h.delay_ms / 1e3),
            )?;
            self.delay_lines.push(line);
        }
        Ok(())
    }

    /// The `tc -s -j qdisc show` of `host`'s own end of its link (its outbound side): what the
    /// shaping installed there, with counters.
    pub fn outbound_qdiscs(host: &Host) -> Result<Vec<serde_json::Value>> {
        let out = sh_output(&[
            "tc",
            "-n",
            &host.namespace,
            "-s",
            "-j",
            "qdisc",
            "show",
            "dev",
            "eth0",
        ])?;
        json_list(&out, "qdiscs", |w| {
            LabError::Run(format!("tc -s -j qdisc show ({}): {w}", host.namespace))
        })
    }

    /// `ip netns exec NS` before a command that must run on `host`.
    pub fn exec_prefix(host: &Host) -> Vec<String> {
        ["ip", "netns", "exec", &host.namespace]
            .iter()
            .map(|s| s.to_string())
            .collect()
    }

    /// Moves the calling thread into `host`'s network namespace (sockets it opens from now on are
    /// that host's). Meant for a thread started for this purpose.
    pub fn enter(host: &Host) -> Result<()> {
        enter_namespace(&host.namespace)
    }

    /// Payload bytes per second a plain TCP stream carries from `from` to `to` (a sender thread in
    /// one namespace, a receiver in the other), counted at the receiver over `secs` after a
    /// quarter-second start. This is the *effective* bandwidth the thesis measured on its testbed and
    /// used as B (§5.1: "effective ... network bandwidths of each node are ... 114.5 MB/s"); through a
    /// tbf of R Mbit/s it is R/8 less TCP/IP and Ethernet framing.
    pub fn tcp_goodput(from: &Host, to: &Host, secs: f64) -> Result<f64> {
        use std::io::{Read, Write};
        use std::net::{SocketAddr, TcpListener, TcpStream};
        use std::time::{Duration, Instant};
        let run = |e: std::io::Error, what: &str| LabError::Run(format!("goodput {what}: {e}"));
        let (port, receiver) = listen_on(to, "goodput", move |listener: TcpListener| {
            let (mut conn, _) = listener.accept().map_err(|e| run(e, "accept"))?;
            let mut buf = vec![0u8; 1 << 20];
            let start = Instant::now();
            let warm = Duration::from_millis(250);
            let (mut counted, mut from_t) = (0u64, None::<Instant>);
            loop {
                let n = conn.read(&mut buf).map_err(|e| run(e, "read"))?;
                if n == 0 {
                    break;
                }
                let now = Instant::now();
                if now - start >= warm {
                    if from_t.is_none() {
                        from_t = Some(now);
                    } else {
                        counted += n as u64;
                    }
                }
            }
            let t0 =
                from_t.ok_or_else(|| LabError::Run("goodput: the stream ended too soon".into()))?;
            Ok(counted as f64 / t0.elapsed().as_secs_f64().max(1e-9))
        })?;
        let (from_host, to_ip) = (from.clone(), to.ip);
        let sender = std::thread::spawn(move || -> Result<()> {
            Testbed::enter(&from_host)?;
            let mut c = TcpStream::connect(SocketAddr::from((to_ip, port)))
                .map_err(|e| run(e, "connect"))?;
            let buf = vec![0x5au8; 1 << 20];
            let end = Instant::now() + Duration::from_secs_f64(secs + 0.25);
            while Instant::now() < end {
                c.write_all(&buf).map_err(|e| run(e, "write"))?;
            }
            c.shutdown(std::net::Shutdown::Write)
                .map_err(|e| run(e, "shutdown"))?;
            Ok(())
        });
        let sent = sender
            .join()
            .map_err(|_| LabError::Run("goodput: the sender thread panicked".into()))?;
        let got = receiver
            .join()
            .map_err(|_| LabError::Run("goodput: the receiver thread panicked".into()))?;
        sent?;
        got
    }

    /// The median time of `samples` TCP connects from `from` to `to` (s): each completes when the
    /// SYN-ACK is back, so it is one round trip of the path, every delay on it included.
    pub fn tcp_connect_rtt(from: &Host, to: &Host, samples: usize) -> Result<f64> {
        use std::net::{SocketAddr, TcpListener, TcpStream};
        use std::time::Instant;
        let run = |e: std::io::Error, what: &str| LabError::Run(format!("connect rtt {what}: {e}"));
        let samples = samples.max(1);
        let (port, listener) = listen_on(to, "connect rtt", move |l: TcpListener| {
            for _ in 0..samples {
                l.accept().map_err(|e| run(e, "accept"))?;
            }
            Ok(())
        })?;
        let (from_host, to_ip) = (from.clone(), to.ip);
        let times = std::thread::spawn(move || -> Result<Vec<f64>> {
            Testbed::enter(&from_host)?;
            (0..samples)
                .map(|_| {
                    let t = Instant::now();
                    let c = TcpStream::connect(SocketAddr::from((to_ip, port)))
                        .map_err(|e| run(e, "connect"))?;
                    let secs = t.elapsed().as_secs_f64();
                    drop(c);
                    Ok(secs)
                })
                .collect()
        })
        .join()
        .map_err(|_| LabError::Run("connect rtt: the connecting thread panicked".into()))?;
        listener
            .join()
            .map_err(|_| LabError::Run("connect rtt: the listener thread panicked".into()))??;
        let mut times = times?;
        times.sort_by(f64::total_cmp);
        Ok(times[times.len() / 2])
    }

    /// A probe of the link counters of `hosts` (hosts of this testbed).
    pub fn link_probe(&self, hosts: &[Host]) -> LinkProbe {
        LinkProbe {
            hub: self.hub.clone(),
            links: hosts.iter().map(|h| h.hub_link.clone()).collect(),
            namespaces: hosts.iter().map(|h| h.namespace.clone()).collect(),
        }
    }

    /// The namespaces of this testbed (for tests and reports).
    pub fn namespaces(&self) -> Vec<String> {
        let mut v = vec![self.hub.clone(), self.mds.namespace.clone()];
        v.extend(self.osds.iter().map(|h| h.namespace.clone()));
        v.extend(self.clients.iter().map(|h| h.namespace.clone()));
        v
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        // The lines stop together (each thread notices within 100 ms); dropping them joins.
        for line in &self.delay_lines {
            line.signal_stop();
        }
        let mut c = CLEANUP.lock().unwrap_or_else(|e| e.into_inner());
        for ns in self.namespaces().iter().rev() {
            if !ns.is_empty() {
                delete_namespace(ns);
            }
            c.namespaces.retain(|n| n != ns);
        }
    }
}

/// Namespaces that exist now (`ip netns list`).
pub fn list_namespaces() -> Vec<String> {
    Command::new("ip")
        .args(["netns", "list"])
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_counters_are_read_from_the_hub_side() {
        let json = br#"[{"ifname":"br0","stats64":{"rx":{"bytes":1},"tx":{"bytes":2}}},
            {"ifname":"v3","stats64":{"rx":{"bytes":300},"tx":{"bytes":4000}}}]"#;
        let got = parse_link_counters(json, &["v3".to_owned()]).unwrap();
        assert_eq!(
            got,
            vec![LinkBytes {
                sent: 300,
                received: 4000
            }]
        );
        let e = parse_link_counters(json, &["v9".to_owned()]).unwrap_err();
        assert!(e.to_string().contains("no link v9"), "{e}");
        assert!(parse_link_counters(b"garbage", &[]).is_err());
    }

    #[test]
    fn tbf_counters_are_read_by_device() {
        let json = br#"[{"kind":"noqueue","dev":"lo","bytes":5,"drops":0},
            {"kind":"tbf","handle":"8001:","dev":"v3","bytes":10,"packets":1,"drops":42,"overlimits":7},
            {"kind":"tbf","dev":"eth0","bytes":0,"drops":0}]"#;
        let got = parse_tbf(json).unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(
            got["v3"],
            Tbf {
                bytes: 10,
                drops: 42
            }
        );
        assert_eq!(got["eth0"], Tbf::default());
        let e = parse_tbf(br#"[{"kind":"tbf","dev":"v1","bytes":1}]"#).unwrap_err();
        assert!(e.to_string().contains("v1: no drops counter"), "{e}");
        assert!(parse_tbf(b"{").is_err());
    }

    #[test]
    fn addresses_and_bursts() {
        assert_eq!(host_ip(0), Ipv4Addr::new(10, 77, 0, 2));
        assert_eq!(host_ip(251), Ipv4Addr::new(10, 77, 1, 3));
        assert_eq!(burst_bytes(100.0), 64 << 10);
        assert_eq!(burst_bytes(1000.0), 625_000);
    }
}
