//! Streaming parsers for the trace formats the seeds use, into [`Record`]s.
//!
//! | format | source | one request per line |
//! |---|---|---|
//! | [`Format::Msr`] | MSR Cambridge (CodFS ch. 3, EPLOG WEB/USR/MDS) | `Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime` |
//! | [`Format::Spc`] | SPC / UMass Financial, WebSearch (EPLOG FIN) | `ASU,LBA,Size,Opcode,Timestamp[,...]` |
//! | [`Format::Nfs`] | Harvard nfsdump text (DEAS03, EECS; CodFS Table 3.1) | `time src dst U C3 xid proc read fh .. off .. count ..` |
//! | [`Format::Blkparse`] | `blkparse` default text output | `maj,min cpu seq time pid action rwbs sector + nsect [comm]` |
//! | [`Format::Fio`] | fio iolog v2 / v3 | `[time] file action offset length` |
//!
//! Input is read line by line from a (possibly gzip / zstd compressed) stream, so files of tens of
//! GB never sit in memory. A malformed line is an error naming `file:line: reason`; with
//! [`ParseOptions::skip_bad`] the reader counts it (see [`TraceReader::skipped`]) and continues.
//! Lines that are well-formed but carry no data request (NFS replies and metadata calls, blkparse
//! events of other actions, fio `open`/`close`/`sync`) are counted in [`TraceReader::ignored`].

use crate::error::{Result, TraceError};
use crate::input::open_input;
use crate::record::{Names, Op, Record};
use std::collections::VecDeque;
use std::io::BufRead;
use std::path::Path;

/// Input formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    Msr,
    Spc,
    Nfs,
    Blkparse,
    Fio,
}

impl Format {
    pub const ALL: [Format; 5] = [
        Format::Msr,
        Format::Spc,
        Format::Nfs,
        Format::Blkparse,
        Format::Fio,
    ];
    pub fn name(self) -> &'static str {
        match self {
            Format::Msr => "msr",
            Format::Spc => "spc",
            Format::Nfs => "nfs",
            Format::Blkparse => "blkparse",
            Format::Fio => "fio",
        }
    }
    pub fn from_name(s: &str) -> Option<Format> {
        Format::ALL.into_iter().find(|f| f.name() == s)
    }
    /// True for file-level traces (records carry a file id).
    pub fn is_file_trace(self) -> bool {
        matches!(self, Format::Nfs)
    }
}

impl std::fmt::Display for Format {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Which blkparse action marks a request (default `Q`: queued, as the application issued it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlkAction {
    /// `Q`: queued.
    Queue,
    /// `D`: issued to the driver (after merging).
    Issue,
    /// `C`: completed.
    Complete,
}

impl BlkAction {
    fn letter(self) -> &'static [u8] {
        match self {
            BlkAction::Queue => b"Q",
            BlkAction::Issue => b"D",
            BlkAction::Complete => b"C",
        }
    }
}

/// Parser options.
#[derive(Debug, Clone)]
pub struct ParseOptions {
    /// Force a format instead of detecting it from the first lines.
    pub format: Option<Format>,
    /// Skip malformed lines (counted) instead of failing on the first one.
    pub skip_bad: bool,
    /// blkparse: the action whose events become records.
    pub blk_action: BlkAction,
}

impl Default for ParseOptions {
    fn default() -> Self {
        ParseOptions {
            format: None,
            skip_bad: false,
            blk_action: BlkAction::Queue,
        }
    }
}

/// Windows FILETIME of the Unix epoch (100 ns ticks since 1601-01-01).
const FILETIME_UNIX_EPOCH: u64 = 116_444_736_000_000_000;

enum Line {
    Rec(Record),
    Ignore,
    Bad(String),
}

/// A streaming reader of one trace file.
pub struct TraceReader {
    file: String,
    input: Box<dyn BufRead + Send>,
    format: Format,
    opts: ParseOptions,
    pending: VecDeque<Vec<u8>>,
    buf: Vec<u8>,
    lineno: u64,
    eof: bool,
    volumes: Names,
    files: Names,
    skipped: u64,
    ignored: u64,
    records: u64,
    first_bad: Option<String>,
    // per-format state
    fio_version: u8,
    fio_time_us: u64,
    blk_trailer: bool,
    cache_key: Vec<u8>,
    cache_id: u32,
    scratch: Vec<u8>,
}

impl std::fmt::Debug for TraceReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TraceReader")
            .field("file", &self.file)
            .field("format", &self.format)
            .field("line", &self.lineno)
            .finish()
    }
}

const DETECT_LINES: usize = 64;

impl TraceReader {
    /// Open `path` (plain / gzip / zstd; `-` for stdin) with fresh name tables.
    pub fn open(path: &Path, opts: ParseOptions) -> Result<TraceReader> {
        Self::open_with(path, opts, Names::new(), Names::new())
    }

    /// Open `path`, continuing the given volume and file name tables (so that several files of
    /// one trace share ids).
    pub fn open_with(
        path: &Path,
        opts: ParseOptions,
        volumes: Names,
        files: Names,
    ) -> Result<TraceReader> {
        let input = open_input(path)?;
        Self::from_reader(&path.display().to_string(), input, opts, volumes, files)
    }

    /// Read from an already-open stream; `name` is used in error messages.
    pub fn from_reader(
        name: &str,
        mut input: Box<dyn BufRead + Send>,
        opts: ParseOptions,
        volumes: Names,
        files: Names,
    ) -> Result<TraceReader> {
        let mut pending = VecDeque::new();
        let mut eof = false;
        while pending.len() < DETECT_LINES {
            let mut l = Vec::new();
            let n = read_line_bounded(&mut input, &mut l).map_err(|e| TraceError::io(name, e))?;
            if n == 0 {
                eof = true;
                break;
            }
            pending.push_back(l);
        }
        let format = match opts.format {
            Some(f) => f,
            None => detect_format(pending.iter().map(|l| trim_eol(l))).ok_or_else(|| {
                TraceError::UnknownFormat {
                    file: name.to_string(),
                    reason: if pending.is_empty() {
                        "empty input".into()
                    } else {
                        "first lines match none of msr, spc, nfs, blkparse, fio".into()
                    },
                }
            })?,
        };
        Ok(TraceReader {
            file: name.to_string(),
            input,
            format,
            opts,
            pending,
            buf: Vec::with_capacity(256),
            lineno: 0,
            eof,
            volumes,
            files,
            skipped: 0,
            ignored: 0,
            records: 0,
            first_bad: None,
            fio_version: 0,
            fio_time_us: 0,
            blk_trailer: false,
            cache_key: Vec::new(),
            cache_id: u32::MAX,
            scratch: Vec::new(),
        })
    }

    pub fn format(&self) -> Format {
        self.format
    }
    /// Volume names (index = `Record::volume`).
    pub fn volumes(&self) -> &Names {
        &self.volumes
    }
    /// File names (index = `Record::file`, 0 unused for file traces).
    pub fn files(&self) -> &Names {
        &self.files
    }
    /// Hand the name tables back (to continue them in the next file of the same trace).
    pub fn into_names(self) -> (Names, Names) {
        (self.volumes, self.files)
    }
    /// Malformed lines skipped (only with `skip_bad`).
    pub fn skipped(&self) -> u64 {
        self.skipped
    }
    /// The first malformed line skipped, as `file:line: reason`.
    pub fn first_skipped(&self) -> Option<&str> {
        self.first_bad.as_deref()
    }
    /// Well-formed lines that carry no data request.
    pub fn ignored(&self) -> u64 {
        self.ignored
    }
    /// Records produced so far.
    pub fn records(&self) -> u64 {
        self.records
    }
    /// Lines read so far.
    pub fn lines(&self) -> u64 {
        self.lineno
    }

    fn next_line(&mut self) -> Result<bool> {
        self.buf.clear();
        if let Some(l) = self.pending.pop_front() {
            self.buf = l;
            self.lineno += 1;
            return Ok(true);
        }
        if self.eof {
            return Ok(false);
        }
        let n = read_line_bounded(&mut self.input, &mut self.buf)
            .map_err(|e| TraceError::io(&self.file, e))?;
        if n == 0 {
            self.eof = true;
            return Ok(false);
        }
        self.lineno += 1;
        Ok(true)
    }

    /// The next record, `Ok(None)` at the end of the input.
    pub fn next_record(&mut self) -> Result<Option<Record>> {
        loop {
            if !self.next_line()? {
                return Ok(None);
            }
            let buf = std::mem::take(&mut self.buf);
            let line = trim_eol(&buf);
            let res = if buf.len() > MAX_LINE {
                Line::Bad(format!(
                    "line longer than {} KiB (not a text trace?)",
                    MAX_LINE >> 10
                ))
            } else if line.iter().all(|b| b.is_ascii_whitespace()) {
                Line::Ignore
            } else {
                match self.format {
                    Format::Msr => self.parse_msr(line),
                    Format::Spc => self.parse_spc(line),
                    Format::Nfs => self.parse_nfs(line),
                    Format::Blkparse => self.parse_blkparse(line),
                    Format::Fio => self.parse_fio(line),
                }
            };
            self.buf = buf;
            match res {
                Line::Rec(r) => {
                    self.records += 1;
                    return Ok(Some(r));
                }
                Line::Ignore => self.ignored += 1,
                Line::Bad(reason) => {
                    let err = TraceError::Parse {
                        file: self.file.clone(),
                        line: self.lineno,
                        reason,
                    };
                    if !self.opts.skip_bad {
                        return Err(err);
                    }
                    if self.first_bad.is_none() {
                        self.first_bad = Some(err.to_string());
                    }
                    self.skipped += 1;
                }
            }
        }
    }

    fn volume_id(&mut self, key: &[u8]) -> u32 {
        if self.cache_id != u32::MAX && self.cache_key == key {
            return self.cache_id;
        }
        let id = self.volumes.intern(key);
        self.cache_key.clear();
        self.cache_key.extend_from_slice(key);
        self.cache_id = id;
        id
    }

    // ---------------------------------------------------------------- MSR Cambridge
    fn parse_msr(&mut self, line: &[u8]) -> Line {
        let mut f = [&b""[..]; 7];
        let n = split_into(line, b',', &mut f);
        if n < 6 {
            return Line::Bad(format!(
                "MSR line has {n} comma-separated fields, expected 7 (Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime)"
            ));
        }
        let Some(ft) = parse_u64(f[0]) else {
            if self.lineno == 1 && f[0].eq_ignore_ascii_case(b"timestamp") {
                return Line::Ignore; // header row
            }
            return Line::Bad(format!("bad timestamp `{}`", show(f[0])));
        };
        let op = if f[3].eq_ignore_ascii_case(b"write") {
            Op::Write
        } else if f[3].eq_ignore_ascii_case(b"read") {
            Op::Read
        } else {
            return Line::Bad(format!(
                "bad request type `{}` (expected Read or Write)",
                show(f[3])
            ));
        };
        let Some(offset) = parse_u64(f[4]) else {
            return Line::Bad(format!("bad offset `{}`", show(f[4])));
        };
        let Some(len) = parse_u64(f[5]) else {
            return Line::Bad(format!("bad size `{}`", show(f[5])));
        };
        if parse_u64(f[2]).is_none() {
            return Line::Bad(format!("bad disk number `{}`", show(f[2])));
        }
        let time_ns = if ft >= FILETIME_UNIX_EPOCH {
            (ft - FILETIME_UNIX_EPOCH).saturating_mul(100)
        } else {
            ft.saturating_mul(100)
        };
        let mut key = std::mem::take(&mut self.scratch);
        key.clear();
        key.extend_from_slice(f[1]);
        key.push(b'_');
        key.extend_from_slice(f[2]);
        let volume = self.volume_id(&key);
        self.scratch = key;
        Line::Rec(Record {
            time_ns,
            volume,
            file: 0,
            op,
            offset,
            len,
        })
    }

    // ---------------------------------------------------------------- SPC / UMass
    fn parse_spc(&mut self, line: &[u8]) -> Line {
        let mut f = [&b""[..]; 5];
        let n = split_into(line, b',', &mut f);
        if n < 5 {
            return Line::Bad(format!(
                "SPC line has {n} comma-separated fields, expected at least 5 (ASU,LBA,Size,Opcode,Timestamp)"
            ));
        }
        let Some(asu) = parse_u64(f[0]) else {
            return Line::Bad(format!("bad ASU `{}`", show(f[0])));
        };
        let Some(lba) = parse_u64(f[1]) else {
            return Line::Bad(format!("bad LBA `{}`", show(f[1])));
        };
        let Some(len) = parse_u64(f[2]) else {
            return Line::Bad(format!("bad size `{}`", show(f[2])));
        };
        let op = match f[3] {
            b"w" | b"W" => Op::Write,
            b"r" | b"R" => Op::Read,
            other => return Line::Bad(format!("bad opcode `{}` (expected r or w)", show(other))),
        };
        let Some(time_ns) = parse_seconds_ns(f[4]) else {
            return Line::Bad(format!("bad timestamp `{}`", show(f[4])));
        };
        let Some(offset) = lba.checked_mul(512) else {
            return Line::Bad("LBA overflows a 64-bit byte offset".into());
        };
        let mut key = std::mem::take(&mut self.scratch);
        key.clear();
        key.extend_from_slice(b"asu");
        // canonical decimal without allocating ("007" and "7" are one ASU)
        let mut digits = [0u8; 20];
        let mut n = asu;
        let mut i = digits.len();
        loop {
            i -= 1;
            digits[i] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        key.extend_from_slice(&digits[i..]);
        let volume = self.volume_id(&key);
        self.scratch = key;
        Line::Rec(Record {
            time_ns,
            volume,
            file: 0,
            op,
            offset,
            len,
        })
    }

    // ---------------------------------------------------------------- Harvard nfsdump
    fn parse_nfs(&mut self, line: &[u8]) -> Line {
        if line.first() == Some(&b'#') {
            return Line::Ignore;
        }
        let mut t = line
            .split(|b| *b == b' ' || *b == b'\t')
            .filter(|s| !s.is_empty());
        let (Some(time), Some(_src), Some(dst), Some(_proto), Some(dir)) =
            (t.next(), t.next(), t.next(), t.next(), t.next())
        else {
            return Line::Bad("nfsdump line has fewer than 5 fields".into());
        };
        if dir.len() != 2 || !matches!(dir[0], b'C' | b'R') {
            return Line::Bad(format!(
                "bad call/reply field `{}` (expected C2, C3, R2, R3)",
                show(dir)
            ));
        }
        if dir[0] == b'R' {
            return Line::Ignore;
        }
        let (Some(_xid), Some(_proc), Some(opname)) = (t.next(), t.next(), t.next()) else {
            return Line::Bad("nfsdump call line lacks xid, procedure or operation".into());
        };
        let op = match opname {
            b"read" => Op::Read,
            b"write" => Op::Write,
            _ => return Line::Ignore,
        };
        let Some(time_ns) = parse_seconds_ns(time) else {
            return Line::Bad(format!("bad timestamp `{}`", show(time)));
        };
        let (mut fh, mut off, mut count) = (None, None, None);
        while let Some(k) = t.next() {
            match k {
                b"fh" => fh = t.next(),
                b"off" => off = t.next(),
                b"count" => count = t.next(),
                _ => {}
            }
            if fh.is_some() && off.is_some() && count.is_some() {
                break;
            }
        }
        let Some(fh) = fh else {
            return Line::Bad(format!("{} call without `fh`", show(opname)));
        };
        let Some(off) = off else {
            return Line::Bad(format!("{} call without `off`", show(opname)));
        };
        let Some(count) = count else {
            return Line::Bad(format!("{} call without `count`", show(opname)));
        };
        let Some(offset) = parse_hex(off) else {
            return Line::Bad(format!("bad hex offset `{}`", show(off)));
        };
        let Some(len) = parse_hex(count) else {
            return Line::Bad(format!("bad hex count `{}`", show(count)));
        };
        // The server: the destination host of the call (`host.port`, both hex).
        let server = match dst.iter().rposition(|b| *b == b'.') {
            Some(p) => &dst[..p],
            None => dst,
        };
        let volume = self.volume_id(server);
        let file = self.files.intern(fh) + 1;
        Line::Rec(Record {
            time_ns,
            volume,
            file,
            op,
            offset,
            len,
        })
    }

    // ---------------------------------------------------------------- blkparse
    fn parse_blkparse(&mut self, line: &[u8]) -> Line {
        if self.blk_trailer {
            return Line::Ignore;
        }
        let mut f = [&b""[..]; 10];
        let n = split_ws_into(line, &mut f);
        if n == 0 {
            return Line::Ignore;
        }
        if !is_devno(f[0]) {
            // The per-CPU / total summary blkparse prints after the events.
            if [&b"CPU"[..], b"Total", b"Throughput", b"Events", b"Skips"]
                .iter()
                .any(|p| f[0].starts_with(p))
            {
                self.blk_trailer = true;
                return Line::Ignore;
            }
            return Line::Bad(format!(
                "expected a blkparse event starting with `major,minor`, got `{}`",
                show(f[0])
            ));
        }
        if n < 7 {
            return Line::Bad(format!(
                "blkparse event has {n} fields, expected at least 7"
            ));
        }
        if f[5] != self.opts.blk_action.letter() {
            return Line::Ignore;
        }
        let rwbs = f[6];
        let op = if rwbs.contains(&b'D') {
            Op::Discard
        } else if rwbs.contains(&b'W') {
            Op::Write
        } else if rwbs.contains(&b'R') {
            Op::Read
        } else {
            return Line::Ignore; // flush / barrier without data
        };
        if n < 10 || f[8] != b"+" {
            return Line::Bad(format!("{} event without `sector + count`", show(f[5])));
        }
        let Some(sector) = parse_u64(f[7]) else {
            return Line::Bad(format!("bad sector `{}`", show(f[7])));
        };
        let Some(nsect) = parse_u64(f[9]) else {
            return Line::Bad(format!("bad sector count `{}`", show(f[9])));
        };
        if nsect == 0 {
            return Line::Ignore;
        }
        let Some(time_ns) = parse_seconds_ns(f[3]) else {
            return Line::Bad(format!("bad timestamp `{}`", show(f[3])));
        };
        let dev = f[0];
        let volume = self.volume_id(dev);
        Line::Rec(Record {
            time_ns,
            volume,
            file: 0,
            op,
            offset: sector.saturating_mul(512),
            len: nsect.saturating_mul(512),
        })
    }

    // ---------------------------------------------------------------- fio iolog
    fn parse_fio(&mut self, line: &[u8]) -> Line {
        if self.fio_version == 0 {
            return if line.starts_with(b"fio version 2 iolog") {
                self.fio_version = 2;
                Line::Ignore
            } else if line.starts_with(b"fio version 3 iolog") {
                self.fio_version = 3;
                Line::Ignore
            } else {
                Line::Bad(
                    "fio iolog must start with `fio version 2 iolog` or `fio version 3 iolog`"
                        .into(),
                )
            };
        }
        let mut f = [&b""[..]; 6];
        let n = split_ws_into(line, &mut f);
        let (time_us, rest) = if self.fio_version == 3 {
            let Some(t) = parse_u64(f[0]) else {
                return Line::Bad(format!("bad v3 timestamp `{}`", show(f[0])));
            };
            (Some(t), &f[1..n])
        } else {
            (None, &f[..n])
        };
        if rest.len() < 2 {
            return Line::Bad("fio iolog line lacks `filename action`".into());
        }
        let (fname, action) = (rest[0], rest[1]);
        let op = match action {
            b"add" | b"open" | b"close" | b"sync" | b"datasync" => {
                if action == b"add" {
                    self.volume_id(fname);
                }
                return Line::Ignore;
            }
            b"wait" => {
                if self.fio_version == 3 {
                    return Line::Bad("`wait` is not allowed in fio iolog v3".into());
                }
                let Some(us) = rest.get(2).and_then(|s| parse_u64(s)) else {
                    return Line::Bad("`wait` without a microsecond count".into());
                };
                self.fio_time_us = self.fio_time_us.saturating_add(us);
                return Line::Ignore;
            }
            b"read" => Op::Read,
            b"write" => Op::Write,
            b"trim" => Op::Discard,
            other => return Line::Bad(format!("unknown fio iolog action `{}`", show(other))),
        };
        if rest.len() < 4 {
            return Line::Bad(format!("`{}` without offset and length", show(action)));
        }
        let Some(offset) = parse_u64(rest[2]) else {
            return Line::Bad(format!("bad offset `{}`", show(rest[2])));
        };
        let Some(len) = parse_u64(rest[3]) else {
            return Line::Bad(format!("bad length `{}`", show(rest[3])));
        };
        let us = time_us.unwrap_or(self.fio_time_us);
        let volume = self.volume_id(fname);
        Line::Rec(Record {
            time_ns: us.saturating_mul(1000),
            volume,
            file: 0,
            op,
            offset,
            len,
        })
    }
}

impl Iterator for TraceReader {
    type Item = Result<Record>;
    fn next(&mut self) -> Option<Result<Record>> {
        self.next_record().transpose()
    }
}

/// Guess the format from the first lines of a trace.
pub fn detect_format<'a>(lines: impl Iterator<Item = &'a [u8]>) -> Option<Format> {
    for line in lines {
        let line = trim_ascii(line);
        if line.is_empty() || line.starts_with(b"#") {
            continue;
        }
        if line.starts_with(b"fio version 2 iolog") || line.starts_with(b"fio version 3 iolog") {
            return Some(Format::Fio);
        }
        let mut w = [&b""[..]; 8];
        let nw = split_ws_into(line, &mut w);
        if nw >= 7 && is_devno(w[0]) && parse_u64(w[2]).is_some() {
            return Some(Format::Blkparse);
        }
        if nw >= 8
            && parse_seconds_ns(w[0]).is_some()
            && w[4].len() == 2
            && matches!(w[4][0], b'C' | b'R')
            && matches!(w[4][1], b'2' | b'3' | b'4')
        {
            return Some(Format::Nfs);
        }
        let mut c = [&b""[..]; 7];
        let nc = split_into(line, b',', &mut c);
        if nc >= 6 && (c[3].eq_ignore_ascii_case(b"read") || c[3].eq_ignore_ascii_case(b"write")) {
            return Some(Format::Msr);
        }
        if nc >= 6
            && c[0].eq_ignore_ascii_case(b"timestamp")
            && c[1].eq_ignore_ascii_case(b"hostname")
        {
            return Some(Format::Msr);
        }
        if nc >= 5 && matches!(c[3], b"r" | b"R" | b"w" | b"W") && parse_u64(c[1]).is_some() {
            return Some(Format::Spc);
        }
    }
    None
}

// ------------------------------------------------------------------------------------ helpers

/// Longest line kept; longer ones are consumed and reported as malformed (a binary file without
/// newlines must not be read into memory).
const MAX_LINE: usize = 64 << 10;

/// Index of the first `\n` in `s`, eight bytes at a time (the lowest flagged byte of the
/// has-zero-byte test is always a true match).
#[inline]
fn find_newline(s: &[u8]) -> Option<usize> {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    const PAT: u64 = LO * b'\n' as u64;
    let mut i = 0;
    while i + 8 <= s.len() {
        let w = u64::from_le_bytes(s[i..i + 8].try_into().expect("8 bytes")) ^ PAT;
        let z = w.wrapping_sub(LO) & !w & HI;
        if z != 0 {
            return Some(i + (z.trailing_zeros() / 8) as usize);
        }
        i += 8;
    }
    s[i..].iter().position(|b| *b == b'\n').map(|p| i + p)
}

/// `read_until(b'\n')` that stores at most `MAX_LINE + 1` bytes of a line (the rest is consumed).
/// Returns the number of bytes consumed (0 at end of input).
fn read_line_bounded(input: &mut dyn BufRead, buf: &mut Vec<u8>) -> std::io::Result<usize> {
    let mut total = 0;
    loop {
        let avail = match input.fill_buf() {
            Ok(a) => a,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if avail.is_empty() {
            return Ok(total);
        }
        let (used, done) = match find_newline(avail) {
            Some(i) => (i + 1, true),
            None => (avail.len(), false),
        };
        let room = (MAX_LINE + 1).saturating_sub(buf.len());
        buf.extend_from_slice(&avail[..used.min(room)]);
        input.consume(used);
        total += used;
        if done {
            return Ok(total);
        }
    }
}

fn trim_eol(l: &[u8]) -> &[u8] {
    let mut e = l.len();
    while e > 0 && (l[e - 1] == b'\n' || l[e - 1] == b'\r') {
        e -= 1;
    }
    &l[..e]
}

fn trim_ascii(s: &[u8]) -> &[u8] {
    let mut a = 0;
    let mut b = s.len();
    while a < b && s[a].is_ascii_whitespace() {
        a += 1;
    }
    while b > a && s[b - 1].is_ascii_whitespace() {
        b -= 1;
    }
    &s[a..b]
}

/// Split by `sep` into `out` (fields trimmed); returns the total number of fields (may exceed
/// `out.len()`; the extra ones are not stored).
fn split_into<'a>(line: &'a [u8], sep: u8, out: &mut [&'a [u8]]) -> usize {
    let mut n = 0;
    for field in line.split(|b| *b == sep) {
        if n < out.len() {
            out[n] = trim_ascii(field);
        }
        n += 1;
    }
    n
}

/// Split on runs of spaces/tabs into `out`; returns the total number of fields.
fn split_ws_into<'a>(line: &'a [u8], out: &mut [&'a [u8]]) -> usize {
    let mut n = 0;
    for field in line
        .split(|b| *b == b' ' || *b == b'\t')
        .filter(|s| !s.is_empty())
    {
        if n < out.len() {
            out[n] = field;
        }
        n += 1;
    }
    n
}

fn is_devno(s: &[u8]) -> bool {
    match s.iter().position(|b| *b == b',') {
        Some(p) => parse_u64(&s[..p]).is_some() && parse_u64(&s[p + 1..]).is_some(),
        None => false,
    }
}

/// Decimal unsigned integer, no sign, no spaces.
#[inline]
pub(crate) fn parse_u64(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 20 {
        return None;
    }
    let mut v: u64 = 0;
    for &b in s {
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(d as u64)?;
    }
    Some(v)
}

/// Hexadecimal unsigned integer (optional `0x`).
pub(crate) fn parse_hex(s: &[u8]) -> Option<u64> {
    let s = s
        .strip_prefix(b"0x")
        .or_else(|| s.strip_prefix(b"0X"))
        .unwrap_or(s);
    if s.is_empty() || s.len() > 16 {
        return None;
    }
    let mut v: u64 = 0;
    for &b in s {
        let d = match b {
            b'0'..=b'9' => b - b'0',
            b'a'..=b'f' => b - b'a' + 10,
            b'A'..=b'F' => b - b'A' + 10,
            _ => return None,
        };
        v = (v << 4) | d as u64;
    }
    Some(v)
}

/// Decimal seconds (`12`, `12.5`, `0.000123456`) to nanoseconds, exactly (no float rounding).
pub(crate) fn parse_seconds_ns(s: &[u8]) -> Option<u64> {
    let (int, frac) = match s.iter().position(|b| *b == b'.') {
        Some(p) => (&s[..p], &s[p + 1..]),
        None => (s, &b""[..]),
    };
    let secs = if int.is_empty() { 0 } else { parse_u64(int)? };
    if int.is_empty() && frac.is_empty() {
        return None;
    }
    let mut ns: u64 = 0;
    for i in 0..9 {
        let d = match frac.get(i) {
            Some(&b) if b.is_ascii_digit() => (b - b'0') as u64,
            Some(_) => return None,
            None => 0,
        };
        ns = ns * 10 + d;
    }
    if frac.len() > 9 && !frac[9..].iter().all(|b| b.is_ascii_digit()) {
        return None;
    }
    secs.checked_mul(1_000_000_000)?.checked_add(ns)
}

fn show(s: &[u8]) -> String {
    let t = String::from_utf8_lossy(s);
    if t.len() > 40 {
        format!(
            "{}…",
            &t[..t.char_indices().nth(40).map(|c| c.0).unwrap_or(t.len())]
        )
    } else {
        t.into_owned()
    }
}

/// Read every record of `paths` (one trace, shared name tables) into memory.
pub fn read_all(paths: &[&Path], opts: &ParseOptions) -> Result<(Vec<Record>, Names, Names)> {
    let mut volumes = Names::new();
    let mut files = Names::new();
    let mut out = Vec::new();
    for p in paths {
        let mut r = TraceReader::open_with(p, opts.clone(), volumes, files)?;
        while let Some(rec) = r.next_record()? {
            out.push(rec);
        }
        (volumes, files) = r.into_names();
    }
    Ok((out, volumes, files))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds() {
        assert_eq!(parse_seconds_ns(b"1.5"), Some(1_500_000_000));
        assert_eq!(parse_seconds_ns(b"0.000000001"), Some(1));
        assert_eq!(parse_seconds_ns(b"12"), Some(12_000_000_000));
        assert_eq!(parse_seconds_ns(b"1.2345678919"), Some(1_234_567_891));
        assert_eq!(parse_seconds_ns(b"1.x"), None);
        assert_eq!(parse_seconds_ns(b"."), None);
    }

    #[test]
    fn newline_search() {
        for len in 0..40 {
            for at in 0..=len {
                let mut v = vec![b'a'; len];
                if at < len {
                    v[at] = b'\n';
                }
                let want = (at < len).then_some(at);
                assert_eq!(find_newline(&v), want, "len {len} at {at}");
                // bytes that differ from '\n' by one bit must not match
                let w: Vec<u8> = v
                    .iter()
                    .map(|b| if *b == b'a' { b'\n' ^ 0x80 } else { *b })
                    .collect();
                assert_eq!(find_newline(&w), want);
            }
        }
    }

    #[test]
    fn hex() {
        assert_eq!(parse_hex(b"2000"), Some(8192));
        assert_eq!(parse_hex(b"0x10"), Some(16));
        assert_eq!(parse_hex(b"zz"), None);
    }
}
