//! Trace replay against any [`BlockDevice`] (file, raw device, simulated HDD/SSD, later the array
//! and cluster): N client threads, as fast as possible or timestamp-faithful with a speed factor,
//! optional pre-write of the working set (EPLOG §5.1), latency percentiles from an HDR histogram.
//!
//! Written data follows a deterministic pattern of the absolute byte address
//! ([`pattern_byte`]), so a replay can be verified by reading the device back.

use crate::error::{Result, TraceError};
use crate::record::{Op, Record};
use crate::transform::{client_of, CODFS_SEGMENT, EPLOG_SEGMENT};
use ecstack_base::LatencyHistogram;
use ecstack_device::BlockDevice;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Pacing of a replay.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Pace {
    /// Issue every request as soon as the previous one of the same client completes.
    Fast,
    /// Issue each request at its trace time divided by `speed` (2.0 = twice as fast).
    Timed { speed: f64 },
}

#[derive(Debug, Clone)]
pub struct ReplayOptions {
    pub clients: usize,
    pub pace: Pace,
    /// Write every touched 1 MiB segment sequentially before the replay.
    pub prewrite: bool,
    /// Fold offsets beyond the device capacity back into it instead of failing.
    pub wrap: bool,
    /// Locality unit for dealing requests to clients.
    pub segment: u64,
    /// Flush the device at the end (included in the elapsed time).
    pub flush: bool,
}

impl Default for ReplayOptions {
    fn default() -> Self {
        ReplayOptions {
            clients: 1,
            pace: Pace::Fast,
            prewrite: false,
            wrap: false,
            segment: CODFS_SEGMENT,
            flush: true,
        }
    }
}

/// Latency percentiles, microseconds.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Latency {
    pub mean_us: f64,
    pub p50_us: f64,
    pub p90_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
}

/// What a replay measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReplayReport {
    pub device: String,
    pub clients: usize,
    pub requests: u64,
    pub reads: u64,
    pub writes: u64,
    pub discards: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub elapsed_s: f64,
    pub requests_per_s: f64,
    pub mb_per_s: f64,
    pub latency: Latency,
    pub read_latency: Latency,
    pub write_latency: Latency,
    pub prewrite_bytes: u64,
    pub prewrite_s: f64,
}

impl ReplayReport {
    /// The text report: requests, throughput, latency percentiles (all, reads, writes), the
    /// pre-write.
    pub fn text(&self) -> String {
        let mut s = format!(
            "{}: {} requests ({} reads, {} writes) by {} client(s) in {:.3} s\n",
            self.device, self.requests, self.reads, self.writes, self.clients, self.elapsed_s
        );
        s.push_str(&format!(
            "{:.0} requests/s, {:.2} MB/s\n",
            self.requests_per_s, self.mb_per_s
        ));
        for (what, l) in [
            ("all", &self.latency),
            ("read", &self.read_latency),
            ("write", &self.write_latency),
        ] {
            s.push_str(&format!(
                "latency {what:<5} mean {:>9.1} us  p50 {:>9.1}  p90 {:>9.1}  p99 {:>9.1}  p99.9 {:>9.1}  max {:>9.1}\n",
                l.mean_us, l.p50_us, l.p90_us, l.p99_us, l.p999_us, l.max_us
            ));
        }
        if self.prewrite_bytes > 0 {
            s.push_str(&format!(
                "pre-write: {} MiB in {:.3} s\n",
                self.prewrite_bytes >> 20,
                self.prewrite_s
            ));
        }
        s
    }
}

/// The byte the replay writes at absolute device address `addr`.
#[inline]
pub fn pattern_byte(addr: u64) -> u8 {
    pattern_word(addr / 8).to_le_bytes()[(addr % 8) as usize]
}

#[inline]
fn pattern_word(w: u64) -> u64 {
    let mut z = w.wrapping_add(0x6563_7374_6163_6b21);
    z = (z ^ (z >> 29)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z ^ (z >> 32)
}

/// Fill `buf` with the pattern of the addresses `[addr, addr + buf.len())`.
pub fn fill_pattern(buf: &mut [u8], addr: u64) {
    let mut i = 0usize;
    while i < buf.len() && (addr + i as u64) & 7 != 0 {
        buf[i] = pattern_byte(addr + i as u64);
        i += 1;
    }
    while i + 8 <= buf.len() {
        let w = pattern_word((addr + i as u64) / 8);
        buf[i..i + 8].copy_from_slice(&w.to_le_bytes());
        i += 8;
    }
    while i < buf.len() {
        buf[i] = pattern_byte(addr + i as u64);
        i += 1;
    }
}

fn place(r: &Record, cap: u64, wrap: bool, dev: &str) -> Result<(u64, u64)> {
    if r.len > cap {
        return Err(TraceError::Invalid(format!(
            "{dev}: request of {} bytes is larger than the device ({cap} bytes)",
            r.len
        )));
    }
    if r.end() <= cap {
        return Ok((r.offset, r.len));
    }
    if !wrap {
        return Err(TraceError::Invalid(format!(
            "{dev}: trace addresses up to {} bytes but the device has {cap}; compact the trace (`ecstack trace transform --compact`) or pass --wrap",
            r.end()
        )));
    }
    let mut off = r.offset % cap;
    if off + r.len > cap {
        off = (cap - r.len) / 4096 * 4096;
    }
    Ok((off, r.len))
}

fn latency(h: &LatencyHistogram) -> Latency {
    if h.count() == 0 {
        return Latency::default();
    }
    let us = |v: u64| v as f64 / 1000.0;
    Latency {
        mean_us: h.mean() / 1000.0,
        p50_us: us(h.quantile(0.50)),
        p90_us: us(h.quantile(0.90)),
        p99_us: us(h.quantile(0.99)),
        p999_us: us(h.quantile(0.999)),
        max_us: us(h.max()),
    }
}

fn new_hist() -> LatencyHistogram {
    LatencyHistogram::new()
}

struct ClientResult {
    all: LatencyHistogram,
    rd: LatencyHistogram,
    wr: LatencyHistogram,
    reads: u64,
    writes: u64,
    discards: u64,
    read_bytes: u64,
    write_bytes: u64,
}

/// Pre-write every touched 1 MiB segment (in address order) with the replay pattern.
/// Returns the bytes written.
pub fn prewrite(dev: &dyn BlockDevice, records: &[Record], wrap: bool) -> Result<u64> {
    let cap = dev.capacity();
    let mut segs = Vec::new();
    for r in records {
        let (off, len) = place(r, cap, wrap, dev.name())?;
        if len == 0 {
            continue;
        }
        for s in off / EPLOG_SEGMENT..=(off + len - 1) / EPLOG_SEGMENT {
            segs.push(s);
        }
    }
    segs.sort_unstable();
    segs.dedup();
    let mut buf = vec![0u8; EPLOG_SEGMENT as usize];
    let mut total = 0;
    for s in segs {
        let off = s * EPLOG_SEGMENT;
        let len = EPLOG_SEGMENT.min(cap - off) as usize;
        fill_pattern(&mut buf[..len], off);
        dev.write_at(&buf[..len], off)?;
        total += len as u64;
    }
    Ok(total)
}

/// Replay `records` against `dev`. `progress` is called with the number of requests completed
/// since its previous call.
pub fn replay(
    dev: &Arc<dyn BlockDevice>,
    records: &[Record],
    opts: &ReplayOptions,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<ReplayReport> {
    let cap = dev.capacity();
    let name = dev.name().to_string();
    // Validate placement before touching the device.
    for r in records {
        place(r, cap, opts.wrap, &name)?;
    }
    if let Pace::Timed { speed } = opts.pace {
        if speed.is_nan() || speed <= 0.0 {
            return Err(TraceError::Invalid("speed must be positive".into()));
        }
    }
    let (mut prewrite_bytes, mut prewrite_s) = (0, 0.0);
    if opts.prewrite {
        let t = Instant::now();
        prewrite_bytes = prewrite(dev.as_ref(), records, opts.wrap)?;
        dev.flush()?;
        prewrite_s = t.elapsed().as_secs_f64();
    }
    let n = opts.clients.max(1);
    let mut streams: Vec<Vec<&Record>> = vec![Vec::new(); n];
    for r in records {
        streams[client_of(r, n, opts.segment)].push(r);
    }
    let t0 = records.iter().map(|r| r.time_ns).min().unwrap_or(0);
    let stop = AtomicBool::new(false);
    let start = Instant::now();
    let results: Vec<Result<ClientResult>> = std::thread::scope(|s| {
        let handles: Vec<_> = streams
            .iter()
            .map(|stream| {
                let dev = Arc::clone(dev);
                let stop = &stop;
                let name = &name;
                s.spawn(move || -> Result<ClientResult> {
                    let mut res = ClientResult {
                        all: new_hist(),
                        rd: new_hist(),
                        wr: new_hist(),
                        reads: 0,
                        writes: 0,
                        discards: 0,
                        read_bytes: 0,
                        write_bytes: 0,
                    };
                    let mut buf: Vec<u8> = Vec::new();
                    let mut unreported = 0u64;
                    for r in stream {
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        if let Pace::Timed { speed } = opts.pace {
                            let due =
                                Duration::from_secs_f64((r.time_ns - t0) as f64 / 1e9 / speed);
                            let now = start.elapsed();
                            if due > now {
                                std::thread::sleep(due - now);
                            }
                        }
                        let (off, len) = place(r, cap, opts.wrap, name)?;
                        let t = Instant::now();
                        let out = match r.op {
                            Op::Read => {
                                buf.resize(len as usize, 0);
                                dev.read_at(&mut buf, off)
                            }
                            Op::Write => {
                                buf.resize(len as usize, 0);
                                fill_pattern(&mut buf, off);
                                let t = Instant::now();
                                let o = dev.write_at(&buf, off);
                                // exclude pattern generation from the latency
                                let ns = t.elapsed().as_nanos() as u64;
                                res.wr.record(ns.max(1));
                                res.all.record(ns.max(1));
                                res.writes += 1;
                                res.write_bytes += len;
                                if let Err(e) = o {
                                    stop.store(true, Ordering::Relaxed);
                                    return Err(e.into());
                                }
                                unreported += 1;
                                if unreported == 256 {
                                    progress(unreported);
                                    unreported = 0;
                                }
                                continue;
                            }
                            Op::Discard => dev.discard(off, len),
                        };
                        let ns = (t.elapsed().as_nanos() as u64).max(1);
                        if let Err(e) = out {
                            stop.store(true, Ordering::Relaxed);
                            return Err(e.into());
                        }
                        res.all.record(ns);
                        match r.op {
                            Op::Read => {
                                res.rd.record(ns);
                                res.reads += 1;
                                res.read_bytes += len;
                            }
                            _ => res.discards += 1,
                        }
                        unreported += 1;
                        if unreported == 256 {
                            progress(unreported);
                            unreported = 0;
                        }
                    }
                    progress(unreported);
                    Ok(res)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(TraceError::Invalid(
                        "a replay client thread panicked".into(),
                    ))
                })
            })
            .collect()
    });
    let mut all = new_hist();
    let mut rd = new_hist();
    let mut wr = new_hist();
    let (mut reads, mut writes, mut discards, mut read_bytes, mut write_bytes) = (0, 0, 0, 0, 0);
    for r in results {
        let r = r?;
        all.merge(&r.all);
        rd.merge(&r.rd);
        wr.merge(&r.wr);
        reads += r.reads;
        writes += r.writes;
        discards += r.discards;
        read_bytes += r.read_bytes;
        write_bytes += r.write_bytes;
    }
    if opts.flush {
        dev.flush()?;
    }
    let elapsed_s = start.elapsed().as_secs_f64().max(1e-9);
    let requests = reads + writes + discards;
    Ok(ReplayReport {
        device: name,
        clients: n,
        requests,
        reads,
        writes,
        discards,
        read_bytes,
        write_bytes,
        elapsed_s,
        requests_per_s: requests as f64 / elapsed_s,
        mb_per_s: (read_bytes + write_bytes) as f64 / 1e6 / elapsed_s,
        latency: latency(&all),
        read_latency: latency(&rd),
        write_latency: latency(&wr),
        prewrite_bytes,
        prewrite_s,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_fill_matches_bytes() {
        let mut b = vec![0u8; 37];
        fill_pattern(&mut b, 13);
        for (i, x) in b.iter().enumerate() {
            assert_eq!(*x, pattern_byte(13 + i as u64));
        }
    }

    #[test]
    fn report_text_has_one_line_per_measure() {
        let l = Latency {
            mean_us: 10.0,
            p50_us: 9.0,
            p90_us: 12.0,
            p99_us: 20.0,
            p999_us: 30.0,
            max_us: 31.5,
        };
        let mut r = ReplayReport {
            device: "mem".into(),
            clients: 2,
            requests: 10,
            reads: 4,
            writes: 6,
            discards: 0,
            read_bytes: 4 << 12,
            write_bytes: 6 << 12,
            elapsed_s: 0.5,
            requests_per_s: 20.0,
            mb_per_s: 0.08,
            latency: l.clone(),
            read_latency: l.clone(),
            write_latency: l,
            prewrite_bytes: 0,
            prewrite_s: 0.0,
        };
        let t = r.text();
        assert_eq!(t.lines().count(), 5, "{t}");
        assert!(t.starts_with("mem: 10 requests (4 reads, 6 writes) by 2 client(s) in 0.500 s\n20 requests/s, 0.08 MB/s\n"), "{t}");
        assert!(
            t.contains("latency write mean      10.0 us  p50       9.0"),
            "{t}"
        );
        r.prewrite_bytes = 3 << 20;
        assert!(r.text().ends_with("pre-write: 3 MiB in 0.000 s\n"));
    }
}
