//! Device specs: one string names a device stack, e.g. on the command line or in a config file.
//!
//! ```text
//! spec     := wrapper* base
//! wrapper  := "metered:"
//!           | "faulty:"    [params ":"]
//!           | "throttled:" [params ":"]
//!           | "cached:"    params ":"    (a page-cache model, see `cached.rs`)
//! base     := "file:" path ["?" key=value ("&" key=value)*]
//!           | path                      (anything starting with "/", "./", "../" or "~", or
//!                                        without a known "kind:" prefix: a file or block device)
//!           | "mem:" size | "mem:size=" size
//!           | "ssd:" [params]           (simulated SSD)
//!           | "hdd:" [params]           (simulated HDD)
//!           | "mirror:" spec (";" spec)+ (RAID-1 of two or more devices, see `mirror.rs`)
//! params   := key=value ("," key=value)*
//! size     := integer or decimal with optional K, M, G, T suffix (powers of 1024; "KiB"/"KB" accepted)
//! duration := number with ns, us, ms or s
//! ```
//!
//! A wrapper's `params` segment is present when the text up to the next `:` is a list of `key=value`
//! items with lowercase keys; otherwise it is the start of the inner spec. Keys (and defaults) are
//! documented in `docs/devices.md`:
//!
//! * `file`:  `size`, `direct` (0/1), `create` (0/1; default 1 when `size` is given), `prealloc` (0/1), `ro` (0/1)
//! * `ssd`:   `preset` (eplog, zombienand, zombienand-trace), `blocks`, `pages`, `page`, `op`, `gc_low`,
//!   `gc_high`, `mode` (slc/mlc/tlc), `iface` (MB/s), `data` (0/1)
//! * `hdd`:   `capacity`, `rpm`, `heads`, `zones`, `outer`, `inner` (MB/s), `t2t`, `seek`, `full` (ms),
//!   `sched` (fifo/sstf), `data` (0/1)
//! * `faulty`: `seed`, `fail_at` (op), `fail_after` (duration), `error_rate`, `lse` (`offset+len`,
//!   repeatable), `heal` (0/1), `bitrot`, `cut_at` (op), `survive`, `torn`, `reorder` (0/1), `sector`
//! * `throttled`: `bw` (bytes/s as a size), `lat` (fixed), `lat_min`+`lat_max` (uniform), `lat_mean`
//!   (exponential), `lat_median`+`lat_sigma` (log-normal), `seed`, `profile` (eplog-ssd, eplog-hdd:
//!   service times by request kind instead of `bw`), `ncq` (with a profile: how many of the latest
//!   requests' ends the sequential test looks at, in place of the profile's own; 1 = where the
//!   previous one ended), `ncq_queued` (0/1: of those, only the previous one and the ones still
//!   queued when the request arrives)
//! * `cached`: `size` (bytes of page cache, required), `writeback` (bytes: write back once this
//!   many are dirty and ignore flushes — a model of a program that never syncs, nothing durable
//!   until written back; without it, write-through)
//!
//! Example: `metered:faulty:seed=7,fail_at=100000:ssd:blocks=4096,op=0.2,mode=tlc`.

use std::sync::Arc;
use std::time::Duration;

use crate::{
    cached, BlockDevice, Cached, DeviceError, FaultConfig, Faulty, FileDevice, FileOptions,
    HddConfig, LatencyDist, MemDevice, Metered, Mirror, PowerCutPolicy, Result, ServiceProfile,
    SimHdd, SimSsd, SsdConfig, ThrottleConfig, Throttled,
};

fn err(spec: &str, what: impl Into<String>) -> DeviceError {
    DeviceError::Other {
        device: format!("device spec '{spec}'"),
        what: what.into(),
    }
}

pub use ecstack_base::parse_size;

/// Parse a duration such as `250us`, `2ms`, `1.5s`.
pub fn parse_duration(s: &str) -> std::result::Result<Duration, String> {
    let t = s.trim().to_ascii_lowercase();
    let (num, unit) = if let Some(n) = t.strip_suffix("ns") {
        (n, 1e-9)
    } else if let Some(n) = t.strip_suffix("us") {
        (n, 1e-6)
    } else if let Some(n) = t.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1.0)
    } else {
        return Err(format!(
            "'{s}' is not a duration (give a unit: ns, us, ms or s)"
        ));
    };
    let v = match num.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => v,
        _ => {
            return Err(format!(
                "'{s}' is not a duration (examples: 500us, 2ms, 1.5s)"
            ))
        }
    };
    // Whole nanoseconds in a u64 (about 584 years): what every consumer stores.
    match Duration::try_from_secs_f64(v * unit) {
        Ok(d) if d.as_nanos() <= u64::MAX as u128 => Ok(d),
        _ => Err(format!("'{s}' is too long a duration (at most 584 years)")),
    }
}

/// `key=value` items (in order; keys may repeat).
struct Params<'a> {
    spec: &'a str,
    kind: &'a str,
    items: Vec<(&'a str, &'a str)>,
}

impl<'a> Params<'a> {
    fn parse(spec: &'a str, kind: &'a str, text: &'a str, sep: char) -> Result<Params<'a>> {
        let mut items = Vec::new();
        for item in text.split(sep).filter(|i| !i.is_empty()) {
            let (k, v) = item
                .split_once('=')
                .ok_or_else(|| err(spec, format!("{kind}: expected key=value, got '{item}'")))?;
            items.push((k.trim(), v.trim()));
        }
        Ok(Params { spec, kind, items })
    }

    fn check_keys(&self, allowed: &[&str]) -> Result<()> {
        for (k, _) in &self.items {
            if !allowed.contains(k) {
                return Err(err(
                    self.spec,
                    format!(
                        "{}: unknown key '{k}' (valid: {})",
                        self.kind,
                        allowed.join(", ")
                    ),
                ));
            }
        }
        Ok(())
    }

    fn get(&self, key: &str) -> Option<&'a str> {
        self.items
            .iter()
            .rev()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| *v)
    }

    fn all(&self, key: &str) -> impl Iterator<Item = &'a str> + '_ {
        let key = key.to_string();
        self.items
            .iter()
            .filter(move |(k, _)| *k == key)
            .map(|(_, v)| *v)
    }

    fn bad(&self, key: &str, v: &str, what: &str) -> DeviceError {
        err(self.spec, format!("{}: {key}={v}: {what}", self.kind))
    }

    fn num<T: std::str::FromStr>(&self, key: &str) -> Result<Option<T>> {
        self.get(key)
            .map(|v| v.parse::<T>().map_err(|_| self.bad(key, v, "not a number")))
            .transpose()
    }

    fn frac(&self, key: &str) -> Result<Option<f64>> {
        match self.num::<f64>(key)? {
            Some(x) if !(0.0..=1.0).contains(&x) => Err(self.bad(
                key,
                self.get(key).unwrap_or(""),
                "must be a fraction in [0, 1]",
            )),
            o => Ok(o),
        }
    }

    fn size(&self, key: &str) -> Result<Option<u64>> {
        self.get(key)
            .map(|v| parse_size(v).map_err(|e| self.bad(key, v, &e)))
            .transpose()
    }

    fn dur(&self, key: &str) -> Result<Option<Duration>> {
        self.get(key)
            .map(|v| parse_duration(v).map_err(|e| self.bad(key, v, &e)))
            .transpose()
    }

    fn flag(&self, key: &str) -> Result<Option<bool>> {
        self.get(key)
            .map(|v| match v {
                "1" | "true" | "yes" | "on" => Ok(true),
                "0" | "false" | "no" | "off" => Ok(false),
                _ => Err(self.bad(key, v, "expected 0 or 1")),
            })
            .transpose()
    }
}

/// Is `seg` a wrapper parameter list (`key=value[,key=value...]` with lowercase keys)?
fn looks_like_params(seg: &str) -> bool {
    !seg.is_empty()
        && seg.split(',').all(|item| match item.split_once('=') {
            Some((k, _)) => !k.is_empty() && k.chars().all(|c| c.is_ascii_lowercase() || c == '_'),
            None => false,
        })
}

/// Split `faulty:` / `throttled:` remainder into (params, inner spec).
fn split_wrapper(rest: &str) -> (&str, &str) {
    match rest.split_once(':') {
        Some((seg, inner)) if looks_like_params(seg) => (seg, inner),
        _ => ("", rest),
    }
}

/// Open the device stack a spec names. The error says what is wrong with the spec in one line.
pub fn open_spec(spec: &str) -> Result<Arc<dyn BlockDevice>> {
    open_inner(spec, spec.trim())
}

const KINDS: [&str; 9] = [
    "cached",
    "mirror",
    "file",
    "mem",
    "ssd",
    "hdd",
    "metered",
    "faulty",
    "throttled",
];

fn open_inner(full: &str, s: &str) -> Result<Arc<dyn BlockDevice>> {
    if s.is_empty() {
        return Err(err(
            full,
            "empty spec (examples: mem:256M, file:/tmp/d?size=1G, ssd:, hdd:)",
        ));
    }
    if s.starts_with('/') || s.starts_with("./") || s.starts_with("../") || s.starts_with('~') {
        return open_file(full, s, "");
    }
    let (kind, rest) = match s.split_once(':') {
        Some((k, r)) => (k, r),
        None if KINDS.contains(&s) && !std::path::Path::new(s).exists() => {
            return Err(err(
                full,
                format!("'{s}' needs a colon: '{s}:' (or './{s}' for a file)"),
            ))
        }
        None => return open_file(full, s, ""),
    };
    match kind {
        "metered" => Ok(Arc::new(Metered::new(open_inner(full, rest)?))),
        "mirror" => {
            let legs = rest
                .split(';')
                .map(|l| open_inner(full, l.trim()))
                .collect::<Result<Vec<_>>>()?;
            if legs.len() < 2 {
                return Err(err(
                    full,
                    "mirror: give two or more device specs separated by ';'",
                ));
            }
            let (m, _) = Mirror::open(legs)?;
            Ok(Arc::new(m))
        }
        "faulty" => {
            let (ptext, inner) = split_wrapper(rest);
            let cfg = fault_config(full, ptext)?;
            Ok(Arc::new(Faulty::new(open_inner(full, inner)?, cfg)))
        }
        "throttled" => {
            let (ptext, inner) = split_wrapper(rest);
            let cfg = throttle_config(full, ptext)?;
            Ok(Arc::new(Throttled::new(open_inner(full, inner)?, cfg)))
        }
        "cached" => {
            let (ptext, inner) = split_wrapper(rest);
            let p = Params::parse(full, "cached", ptext, ',')?;
            p.check_keys(&["size", "writeback"])?;
            let size = p.size("size")?.filter(|&s| s >= cached::PAGE_BYTES).ok_or_else(|| {
                err(full, "cached: give size=BYTES (at least 4K), e.g. cached:size=256M:file:d.img")
            })?;
            let writeback = p.size("writeback")?;
            if let Some(w) = writeback.filter(|&w| w < cached::PAGE_BYTES || w > size / 2) {
                return Err(err(
                    full,
                    format!("cached: writeback={w}: the dirty bytes that start a write-back, from 4K to half of size ({size})"),
                ));
            }
            let inner = open_inner(full, inner)?;
            Ok(Arc::new(Cached::with_writeback(inner, size, writeback)))
        }
        "file" => {
            let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
            open_file(full, path, query)
        }
        "mem" => {
            let size_text = rest.strip_prefix("size=").unwrap_or(rest);
            let size = parse_size(size_text).map_err(|e| err(full, format!("mem: {e}")))?;
            if size == 0 {
                return Err(err(full, "mem: size must be positive"));
            }
            Ok(Arc::new(MemDevice::with_name(format!("mem:{size_text}"), size)?))
        }
        "ssd" => {
            let cfg = ssd_config(full, rest)?;
            Ok(Arc::new(SimSsd::new(cfg).map_err(|e| err(full, e.to_string()))?))
        }
        "hdd" => {
            let cfg = hdd_config(full, rest)?;
            Ok(Arc::new(SimHdd::new(cfg).map_err(|e| err(full, e.to_string()))?))
        }
        other if other.len() > 1 && !other.contains('/') && !other.contains('.') => Err(err(
            full,
            format!("unknown device kind '{other}' (expected file, mem, ssd, hdd, mirror, metered, faulty, throttled, cached, or a path)"),
        )),
        _ => open_file(full, s, ""),
    }
}

fn open_file(full: &str, path: &str, query: &str) -> Result<Arc<dyn BlockDevice>> {
    if path.is_empty() {
        return Err(err(full, "file: missing path"));
    }
    let p = Params::parse(full, "file", query, '&')?;
    p.check_keys(&["size", "direct", "create", "prealloc", "ro", "uring"])?;
    let size = p.size("size")?;
    let opts = FileOptions {
        size,
        create: p.flag("create")?.unwrap_or(size.is_some()),
        direct: p.flag("direct")?.unwrap_or(false),
        preallocate: p.flag("prealloc")?.unwrap_or(false),
        read_only: p.flag("ro")?.unwrap_or(false),
        uring: p.flag("uring")?.unwrap_or(true),
    };
    let path = if let Some(rest) = path.strip_prefix("~/") {
        match std::env::var_os("HOME") {
            Some(h) => std::path::PathBuf::from(h).join(rest),
            None => path.into(),
        }
    } else {
        path.into()
    };
    Ok(Arc::new(FileDevice::open(path, &opts)?))
}

/// Parse the parameters of `ssd:` into a config.
pub fn ssd_config(full: &str, text: &str) -> Result<SsdConfig> {
    let p = Params::parse(full, "ssd", text, ',')?;
    p.check_keys(&[
        "preset", "blocks", "pages", "page", "op", "gc_low", "gc_high", "mode", "iface", "data",
    ])?;
    let mut c = match p.get("preset") {
        Some(name) => SsdConfig::preset(name).ok_or_else(|| {
            p.bad(
                "preset",
                name,
                "unknown preset (eplog, zombienand, zombienand-trace)",
            )
        })?,
        None => SsdConfig::default(),
    };
    if let Some(v) = p.num("blocks")? {
        c.blocks = v;
    }
    if let Some(v) = p.num("pages")? {
        c.pages_per_block = v;
    }
    if let Some(v) = p.size("page")? {
        c.page_size =
            u32::try_from(v).map_err(|_| p.bad("page", &v.to_string(), "page size too large"))?;
    }
    if let Some(v) = p.frac("op")? {
        c.op = v;
    }
    if let Some(v) = p.frac("gc_low")? {
        c.gc_low = v;
    }
    if let Some(v) = p.frac("gc_high")? {
        c.gc_high = v;
    }
    if let Some(m) = p.get("mode") {
        c.mode = crate::CellMode::parse(m)
            .ok_or_else(|| p.bad("mode", m, "expected slc, mlc or tlc"))?;
    }
    if let Some(v) = p.num("iface")? {
        c.interface_mbps = v;
    }
    if let Some(v) = p.flag("data")? {
        c.keep_data = v;
    }
    c.validate().map_err(|e| err(full, format!("ssd: {e}")))?;
    Ok(c)
}

/// Parse the parameters of `hdd:` into a config.
pub fn hdd_config(full: &str, text: &str) -> Result<HddConfig> {
    let p = Params::parse(full, "hdd", text, ',')?;
    p.check_keys(&[
        "capacity", "rpm", "heads", "zones", "outer", "inner", "t2t", "seek", "full", "sched",
        "data",
    ])?;
    let mut c = HddConfig::default();
    if let Some(v) = p.size("capacity")? {
        c.capacity = v;
    }
    if let Some(v) = p.num("rpm")? {
        c.rpm = v;
    }
    if let Some(v) = p.num("heads")? {
        c.heads = v;
    }
    if let Some(v) = p.num("zones")? {
        c.zones = v;
    }
    if let Some(v) = p.num("outer")? {
        c.outer_mbps = v;
    }
    if let Some(v) = p.num("inner")? {
        c.inner_mbps = v;
    }
    if let Some(v) = p.num("t2t")? {
        c.track_to_track_ms = v;
    }
    if let Some(v) = p.num("seek")? {
        c.avg_seek_ms = v;
    }
    if let Some(v) = p.num("full")? {
        c.full_stroke_ms = v;
    }
    if let Some(s) = p.get("sched") {
        c.scheduler = match s {
            "fifo" => crate::sim::hdd::Scheduler::Fifo,
            "sstf" => crate::sim::hdd::Scheduler::Sstf,
            _ => return Err(p.bad("sched", s, "expected fifo or sstf")),
        };
    }
    if let Some(v) = p.flag("data")? {
        c.keep_data = v;
    }
    c.validate().map_err(|e| err(full, format!("hdd: {e}")))?;
    Ok(c)
}

fn fault_config(full: &str, text: &str) -> Result<FaultConfig> {
    let p = Params::parse(full, "faulty", text, ',')?;
    p.check_keys(&[
        "seed",
        "fail_at",
        "fail_after",
        "error_rate",
        "lse",
        "heal",
        "bitrot",
        "cut_at",
        "survive",
        "torn",
        "reorder",
        "sector",
    ])?;
    let mut c = FaultConfig {
        seed: p.num("seed")?.unwrap_or(0),
        ..FaultConfig::default()
    };
    c.fail_at_op = p.num("fail_at")?;
    c.fail_after = p.dur("fail_after")?;
    c.transient_error_rate = p.frac("error_rate")?.unwrap_or(0.0);
    c.bitrot_rate = p.frac("bitrot")?.unwrap_or(0.0);
    c.heal_on_write = p.flag("heal")?.unwrap_or(true);
    c.power_cut_at_op = p.num("cut_at")?;
    c.power_cut = PowerCutPolicy {
        survive_prob: p.frac("survive")?.unwrap_or(0.0),
        torn_prob: p.frac("torn")?.unwrap_or(0.0),
        reorder: p.flag("reorder")?.unwrap_or(false),
        sector: p.size("sector")?.unwrap_or(512).max(1),
    };
    for r in p.all("lse") {
        let (o, l) = r
            .split_once('+')
            .ok_or_else(|| p.bad("lse", r, "expected offset+len, e.g. 1M+4K"))?;
        let o = parse_size(o).map_err(|e| p.bad("lse", r, &e))?;
        let l = parse_size(l).map_err(|e| p.bad("lse", r, &e))?;
        c.latent_errors.push((o, o.saturating_add(l)));
    }
    Ok(c)
}

fn throttle_config(full: &str, text: &str) -> Result<ThrottleConfig> {
    let p = Params::parse(full, "throttled", text, ',')?;
    p.check_keys(&[
        "bw",
        "lat",
        "lat_min",
        "lat_max",
        "lat_mean",
        "lat_median",
        "lat_sigma",
        "seed",
        "profile",
        "ncq",
        "ncq_queued",
    ])?;
    // parse_duration keeps durations within u64 nanoseconds.
    let ns = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
    let latency = if let Some(d) = p.dur("lat")? {
        LatencyDist::Fixed { ns: ns(d) }
    } else if let (Some(a), Some(b)) = (p.dur("lat_min")?, p.dur("lat_max")?) {
        if b < a {
            return Err(err(full, "throttled: lat_max is below lat_min"));
        }
        LatencyDist::Uniform {
            min_ns: ns(a),
            max_ns: ns(b),
        }
    } else if let Some(m) = p.dur("lat_mean")? {
        LatencyDist::Exponential { mean_ns: ns(m) }
    } else if let Some(m) = p.dur("lat_median")? {
        let sigma: f64 = p.num("lat_sigma")?.unwrap_or(0.5);
        if !(sigma.is_finite() && (0.0..=10.0).contains(&sigma)) {
            return Err(p.bad(
                "lat_sigma",
                p.get("lat_sigma").unwrap_or(""),
                "must be a number in [0, 10]",
            ));
        }
        LatencyDist::LogNormal {
            median_ns: ns(m),
            sigma,
        }
    } else if p.get("lat_min").is_some() || p.get("lat_max").is_some() {
        return Err(err(full, "throttled: give both lat_min and lat_max"));
    } else {
        LatencyDist::None
    };
    let bandwidth = p.size("bw")?.map(|b| b as f64);
    if bandwidth == Some(0.0) {
        return Err(err(full, "throttled: bw must be positive"));
    }
    let mut profile = match p.get("profile") {
        None => None,
        Some(name) => Some(ServiceProfile::preset(name).ok_or_else(|| {
            err(
                full,
                format!(
                    "throttled: unknown profile '{name}' (expected {})",
                    ServiceProfile::PRESETS.join(", ")
                ),
            )
        })?),
    };
    if profile.is_some() && bandwidth.is_some() {
        return Err(err(full, "throttled: give bw or profile, not both"));
    }
    if let Some(ncq) = p.num::<usize>("ncq")? {
        let Some(prof) = profile.as_mut() else {
            return Err(err(
                full,
                "throttled: ncq sets a profile's sequential test: give a profile",
            ));
        };
        if !(1..=1024).contains(&ncq) {
            return Err(p.bad("ncq", p.get("ncq").unwrap_or(""), "must be 1 to 1024"));
        }
        prof.reorder = ncq;
    }
    if let Some(queued) = p.flag("ncq_queued")? {
        let Some(prof) = profile.as_mut() else {
            return Err(err(
                full,
                "throttled: ncq_queued sets a profile's sequential test: give a profile",
            ));
        };
        prof.queued_only = queued;
    }
    Ok(ThrottleConfig {
        bandwidth,
        profile,
        latency,
        seed: p.num("seed")?.unwrap_or(0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_durations() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("4K").unwrap(), 4096);
        assert_eq!(parse_size("256MiB").unwrap(), 256 << 20);
        assert_eq!(parse_size("1.5G").unwrap(), 3 << 29);
        assert!(parse_size("abc").is_err());
        assert!(parse_size("99999999999T").is_err());
        assert_eq!(parse_duration("2ms").unwrap(), Duration::from_millis(2));
        assert_eq!(parse_duration("250us").unwrap(), Duration::from_micros(250));
        assert!(parse_duration("5").is_err());
    }

    #[test]
    fn wrapper_param_detection() {
        assert_eq!(
            split_wrapper("seed=1,fail_at=10:mem:1M"),
            ("seed=1,fail_at=10", "mem:1M")
        );
        assert_eq!(split_wrapper("mem:1M"), ("", "mem:1M"));
        assert_eq!(split_wrapper("/tmp/a=b"), ("", "/tmp/a=b"));
        assert_eq!(split_wrapper("ssd:blocks=64"), ("", "ssd:blocks=64"));
    }

    /// Hostile values in specs: each is refused with one line naming the spec, never a panic,
    /// a wrap or an overflow (before the fix: `1e300s` panicked in `Duration::from_secs_f64`, and
    /// `ssd:blocks=4,gc_high=0.9` underflowed `blocks - free pool - 2`).
    #[test]
    fn hostile_values_are_one_line_errors() {
        for d in [
            "1e300s",
            "-1s",
            "NaNs",
            "infs",
            "1e12s",
            "18446744073709551616ns",
            "-0.5ms",
            "s",
        ] {
            assert!(parse_duration(d).is_err(), "{d}");
        }
        assert_eq!(
            parse_duration("18446744073ns").unwrap(),
            Duration::from_nanos(18_446_744_073)
        );
        assert!(parse_duration("500y").is_err());
        let specs = [
            "ssd:blocks=4,gc_high=0.9",
            "ssd:blocks=4,gc_low=0.5,gc_high=0.5",
            "ssd:blocks=0",
            "ssd:blocks=-4",
            "ssd:blocks=4294967295",
            "ssd:blocks=18446744073709551616",
            "ssd:pages=0",
            "ssd:page=0",
            "ssd:page=16E",
            "ssd:op=NaN",
            "ssd:op=-1",
            "ssd:op=1e300",
            "ssd:op=0.999999,blocks=4,pages=1",
            "ssd:iface=inf",
            "ssd:iface=NaN",
            "ssd:iface=0",
            "ssd:iface=-5",
            "hdd:heads=4294967295",
            "hdd:heads=0",
            "hdd:zones=4294967295",
            "hdd:rpm=1e-300",
            "hdd:rpm=NaN",
            "hdd:rpm=inf",
            "hdd:outer=1e300",
            "hdd:inner=-1",
            "hdd:capacity=0",
            "hdd:capacity=16383P",
            "hdd:t2t=0",
            "hdd:full=1e300",
            "hdd:seek=NaN",
            "throttled:lat=1e300s:mem:1M",
            "throttled:lat=-1ms:mem:1M",
            "throttled:lat_mean=NaNs:mem:1M",
            "throttled:lat_median=1ms,lat_sigma=NaN:mem:1M",
            "throttled:lat_median=1ms,lat_sigma=-1:mem:1M",
            "throttled:lat_median=1ms,lat_sigma=1e300:mem:1M",
            "throttled:lat_min=2ms,lat_max=1ms:mem:1M",
            "throttled:bw=0:mem:1M",
            "throttled:bw=-1:mem:1M",
            "faulty:fail_after=1e300s:mem:1M",
            "faulty:error_rate=2:mem:1M",
            "faulty:error_rate=NaN:mem:1M",
            "faulty:seed=-1:mem:1M",
            "faulty:fail_at=18446744073709551616:mem:1M",
            "faulty:lse=1e300+4K:mem:1M",
            "mem:0",
            "mem:-1",
            "mem:99999999999T",
            "cached:mem:1M",
            "cached:size=1K:mem:1M",
            "cached:size=1M,ways=2:mem:1M",
            "cached:size=1M,writeback=1K:mem:1M",
            "cached:size=1M,writeback=768K:mem:1M",
        ];
        for spec in specs {
            let e = match open_spec(spec) {
                Ok(d) => panic!("{spec}: accepted as {d:?}"),
                Err(e) => e.to_string(),
            };
            assert!(!e.contains('\n'), "{spec}: {e}");
            assert!(e.contains(spec), "{spec}: the error names the spec: {e}");
        }
        // The largest values that are still sane are accepted.
        assert!(open_spec("cached:size=4K:mem:1M").is_ok());
        assert!(open_spec("cached:size=1M,writeback=512K:mem:1M").is_ok());
        assert!(open_spec("throttled:lat=1ns,bw=1:mem:1M").is_ok());
        assert!(open_spec("ssd:blocks=4,pages=4,op=0.2,gc_low=0,gc_high=0,data=1").is_err());
        assert!(open_spec("ssd:blocks=8,pages=4,op=0.5,gc_low=0,gc_high=0").is_ok());
    }
}
