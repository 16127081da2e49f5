//! Writing records back out in the accepted formats (so every output can be read back), plus fio
//! iologs for replay with fio itself.

use crate::record::{Names, Op, Record};
use std::io::{self, Write};

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutFormat {
    /// MSR Cambridge CSV (`volume` names of the form `host_disk` are split back).
    Msr,
    /// SPC CSV (volumes become ASUs by index).
    Spc,
    /// fio iolog v2 (no times).
    Fio2,
    /// fio iolog v3 (times in microseconds from the first record).
    Fio3,
    /// blkparse text (`Q` events; volumes become device numbers by index).
    Blkparse,
    /// nfsdump text (call lines only; file ids become file handles).
    Nfs,
}

impl OutFormat {
    pub fn from_name(s: &str) -> Option<OutFormat> {
        Some(match s {
            "msr" => OutFormat::Msr,
            "spc" => OutFormat::Spc,
            "fio" | "fio3" => OutFormat::Fio3,
            "fio2" => OutFormat::Fio2,
            "blkparse" => OutFormat::Blkparse,
            "nfs" => OutFormat::Nfs,
            _ => return None,
        })
    }
    pub const NAMES: &'static str = "msr, spc, fio2, fio3 (= fio), blkparse, nfs";
}

/// Options for the fio iolog writer.
#[derive(Debug, Clone, Default)]
pub struct FioTarget {
    /// Replace every volume's file name with this one (e.g. `/dev/nbd0`).
    pub file: Option<String>,
}

/// Streaming writer: header on creation, one line per record, footer on [`TraceWriter::finish`].
pub struct TraceWriter<W: Write> {
    out: W,
    format: OutFormat,
    volumes: Names,
    fio_file: Option<String>,
    fio_seen: Vec<bool>,
    t0: Option<u64>,
    last_us: u64,
    xid: u64,
}

const FILETIME_UNIX_EPOCH: u64 = 116_444_736_000_000_000;

impl<W: Write> TraceWriter<W> {
    pub fn new(
        out: W,
        format: OutFormat,
        volumes: &Names,
        fio_file: Option<String>,
    ) -> io::Result<Self> {
        let mut w = TraceWriter {
            out,
            format,
            volumes: volumes.clone(),
            fio_file,
            fio_seen: Vec::new(),
            t0: None,
            last_us: 0,
            xid: 0,
        };
        match format {
            OutFormat::Fio2 => writeln!(w.out, "fio version 2 iolog")?,
            OutFormat::Fio3 => writeln!(w.out, "fio version 3 iolog")?,
            _ => {}
        }
        Ok(w)
    }

    fn fio_name(&self, v: u32) -> String {
        match &self.fio_file {
            Some(f) => f.clone(),
            None => self.volumes.name(v).replace(char::is_whitespace, "_"),
        }
    }

    /// Adopt a grown name table (volumes that appeared after the writer was created).
    pub fn sync_names(&mut self, volumes: &Names) {
        if volumes.len() > self.volumes.len() {
            self.volumes = volumes.clone();
        }
    }

    pub fn write(&mut self, r: &Record) -> io::Result<()> {
        let t0 = *self.t0.get_or_insert(r.time_ns);
        match self.format {
            OutFormat::Msr => {
                let name = self.volumes.name(r.volume);
                let (host, disk) = match name.rsplit_once('_') {
                    Some((h, d)) if d.parse::<u64>().is_ok() => (h, d),
                    _ => (name, "0"),
                };
                let ft = r.time_ns / 100 + FILETIME_UNIX_EPOCH;
                let ty = if r.op == Op::Read { "Read" } else { "Write" };
                writeln!(self.out, "{ft},{host},{disk},{ty},{},{},0", r.offset, r.len)
            }
            OutFormat::Spc => {
                let op = if r.op == Op::Read { 'r' } else { 'w' };
                let t = r.time_ns - t0.min(r.time_ns);
                writeln!(
                    self.out,
                    "{},{},{},{op},{}.{:09}",
                    r.volume,
                    r.offset / 512,
                    r.len,
                    t / 1_000_000_000,
                    t % 1_000_000_000
                )
            }
            OutFormat::Fio2 | OutFormat::Fio3 => {
                let key = if self.fio_file.is_some() {
                    0
                } else {
                    r.volume as usize
                };
                if key >= self.fio_seen.len() {
                    self.fio_seen.resize(key + 1, false);
                }
                let name = self.fio_name(r.volume);
                let t_us = (r.time_ns - t0.min(r.time_ns)) / 1000;
                self.last_us = self.last_us.max(t_us);
                let ts = if self.format == OutFormat::Fio3 {
                    format!("{t_us} ")
                } else {
                    String::new()
                };
                if !self.fio_seen[key] {
                    self.fio_seen[key] = true;
                    writeln!(self.out, "{ts}{name} add")?;
                    writeln!(self.out, "{ts}{name} open")?;
                }
                let act = match r.op {
                    Op::Read => "read",
                    Op::Write => "write",
                    Op::Discard => "trim",
                };
                writeln!(self.out, "{ts}{name} {act} {} {}", r.offset, r.len)
            }
            OutFormat::Blkparse => {
                self.xid += 1;
                let t = r.time_ns - t0.min(r.time_ns);
                let rwbs = match r.op {
                    Op::Read => "R",
                    Op::Write => "W",
                    Op::Discard => "D",
                };
                writeln!(
                    self.out,
                    "{:>3},{:<2} {:>3} {:>8} {:>5}.{:09} {:>5}  Q {:>3} {} + {} [ecstack]",
                    8,
                    r.volume,
                    0,
                    self.xid,
                    t / 1_000_000_000,
                    t % 1_000_000_000,
                    1,
                    rwbs,
                    r.offset / 512,
                    r.len.div_ceil(512)
                )
            }
            OutFormat::Nfs => {
                self.xid += 1;
                let op = if r.op == Op::Read { "read" } else { "write" };
                let procno = if r.op == Op::Read { 6 } else { 7 };
                let server = self
                    .volumes
                    .name(r.volume)
                    .replace(char::is_whitespace, "_");
                writeln!(
                    self.out,
                    "{}.{:06} 1.0301 {server}.0801 U C3 {:x} {procno} {op} fh {:032x} off {:x} count {:x}",
                    r.time_ns / 1_000_000_000,
                    (r.time_ns % 1_000_000_000) / 1000,
                    self.xid,
                    r.file,
                    r.offset,
                    r.len
                )
            }
        }
    }

    /// Write the footer (fio `close` lines) and flush.
    pub fn finish(mut self) -> io::Result<W> {
        if matches!(self.format, OutFormat::Fio2 | OutFormat::Fio3) {
            for (key, seen) in self.fio_seen.clone().into_iter().enumerate() {
                if seen {
                    let name = self.fio_name(key as u32);
                    if self.format == OutFormat::Fio3 {
                        writeln!(self.out, "{} {name} close", self.last_us)?;
                    } else {
                        writeln!(self.out, "{name} close")?;
                    }
                }
            }
        }
        self.out.flush()?;
        Ok(self.out)
    }
}

/// Write `records` to `out` in `format`.
pub fn write_records<W: Write>(
    out: W,
    format: OutFormat,
    records: &[Record],
    volumes: &Names,
) -> io::Result<W> {
    let mut w = TraceWriter::new(out, format, volumes, None)?;
    for r in records {
        w.write(r)?;
    }
    w.finish()
}
