//! The runs behind `ecstack trace`: read trace files into memory, transform files into files
//! (select, merge, round, compact, split into client streams, convert), synthesize into a file and
//! check the result against its targets, and prepare records for a block replay.
//!
//! Output paths follow the input convention: `-` is standard output. Progress and the count of
//! malformed lines skipped reach the caller as [`Event`]s.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::analyze::{AnalyzeOptions, Analyzer};
use crate::parse::{ParseOptions, TraceReader};
use crate::record::{Names, Op, Record};
use crate::synth::{Check, FileTargets, Generator, Preset, SynthStream, Targets};
use crate::transform::{client_of, eplog_prepare, Compactor, Pipeline, TransformOptions};
use crate::write::{OutFormat, TraceWriter};
use crate::{Result, TraceError};

/// What a run tells its caller while it goes.
#[derive(Debug, PartialEq)]
pub enum Event<'a> {
    /// Records read or written so far (every 65,536 records).
    Records(u64),
    /// A file had malformed lines that were skipped (`ParseOptions::skip_bad`).
    Skipped { count: u64, first: &'a str },
}

/// Open an output stream: `-` is standard output, anything else a new file.
pub fn create_output(path: &Path) -> Result<Box<dyn Write>> {
    if path.as_os_str() == "-" {
        return Ok(Box::new(BufWriter::new(std::io::stdout().lock())));
    }
    let f = File::create(path).map_err(|source| TraceError::Create {
        path: path.to_path_buf(),
        source,
    })?;
    Ok(Box::new(BufWriter::with_capacity(1 << 20, f)))
}

fn report_skipped(r: &TraceReader, on: &mut dyn FnMut(Event)) {
    if let Some(first) = r.first_skipped() {
        on(Event::Skipped {
            count: r.skipped(),
            first,
        });
    }
}

/// Read every record of `files` (one trace, shared name tables) into memory: the records, the
/// volume names and the number of malformed lines skipped.
pub fn read_files(
    files: &[&Path],
    opts: &ParseOptions,
    on: &mut dyn FnMut(Event),
) -> Result<(Vec<Record>, Names, u64)> {
    let (mut vols, mut fnames) = (Names::new(), Names::new());
    let mut out = Vec::new();
    let mut skipped = 0;
    for p in files {
        let mut r = TraceReader::open_with(p, opts.clone(), vols, fnames)?;
        while let Some(rec) = r.next_record()? {
            out.push(rec);
            if out.len() & 0xffff == 0 {
                on(Event::Records(out.len() as u64));
            }
        }
        skipped += r.skipped();
        report_skipped(&r, on);
        (vols, fnames) = r.into_names();
    }
    Ok((out, vols, skipped))
}

// ------------------------------------------------------------------------------- transform

/// One `ecstack trace transform` run.
#[derive(Clone, Debug)]
pub struct TransformFiles {
    pub inputs: Vec<PathBuf>,
    pub parse: ParseOptions,
    pub transform: TransformOptions,
    /// Output path (`-`: standard output); with several clients, `OUTPUT.0` … `OUTPUT.{n-1}`.
    pub output: PathBuf,
    pub format: OutFormat,
    /// fio iolog: the file name for every volume.
    pub fio_file: Option<String>,
    /// Client streams (at least 1); each locality segment's requests go to one client.
    pub clients: usize,
    /// Locality segment for the client split, bytes (positive).
    pub segment: u64,
}

/// What a transform did.
#[derive(Debug, Clone, Serialize)]
pub struct TransformSummary {
    pub records_in: u64,
    pub records_out: u64,
    pub skipped: u64,
    pub compacted_bytes: Option<u64>,
    pub segments: Option<u64>,
    pub outputs: Vec<String>,
    pub per_output: Vec<u64>,
}

impl TransformSummary {
    /// One line: records in and out, the compacted address space, malformed lines skipped.
    pub fn line(&self) -> String {
        format!(
            "{} records in, {} out{}{}",
            self.records_in,
            self.records_out,
            self.compacted_bytes
                .map(|b| format!(", compacted address space {} MiB", b >> 20))
                .unwrap_or_default(),
            if self.skipped > 0 {
                format!(", {} malformed line(s) skipped", self.skipped)
            } else {
                String::new()
            }
        )
    }
}

/// The output paths of a transform into `clients` streams.
pub fn output_paths(output: &Path, clients: usize) -> Vec<PathBuf> {
    if clients <= 1 {
        vec![output.to_path_buf()]
    } else {
        (0..clients)
            .map(|i| PathBuf::from(format!("{}.{i}", output.display())))
            .collect()
    }
}

/// One pass of the select/merge/round pipeline over every input, calling `f` per output record:
/// records in, lines skipped, the volume names. Volume selection is by name, decided once per
/// volume id as names appear.
fn transform_pass(
    o: &TransformFiles,
    on: &mut dyn FnMut(Event),
    f: &mut dyn FnMut(Record, &Names) -> Result<()>,
) -> Result<(u64, u64, Names)> {
    let topts = &o.transform;
    let (mut vols, mut fnames) = (Names::new(), Names::new());
    let (mut n_in, mut skipped) = (0u64, 0u64);
    let mut pipe = Pipeline::new(
        &TransformOptions {
            volumes: vec![],
            ..topts.clone()
        },
        &Names::new(),
    )?;
    let mut keep: Vec<Option<bool>> = Vec::new();
    let mut err: Option<TraceError> = None;
    for p in &o.inputs {
        let mut r = TraceReader::open_with(p, o.parse.clone(), vols, fnames)?;
        while let Some(rec) = r.next_record()? {
            n_in += 1;
            let v = rec.volume as usize;
            if v >= keep.len() {
                keep.resize(v + 1, None);
            }
            let k = *keep[v].get_or_insert_with(|| {
                topts.volumes.is_empty()
                    || topts
                        .volumes
                        .iter()
                        .any(|n| n == r.volumes().name(rec.volume))
            });
            if !k {
                continue;
            }
            let names = r.volumes();
            pipe.push(rec, &mut |x| {
                if err.is_none() {
                    err = f(x, names).err();
                }
            });
            if let Some(e) = err.take() {
                return Err(e);
            }
        }
        skipped += r.skipped();
        report_skipped(&r, on);
        (vols, fnames) = r.into_names();
    }
    pipe.finish(&mut |x| {
        if err.is_none() {
            err = f(x, &vols).err();
        }
    });
    if let Some(e) = err {
        return Err(e);
    }
    for v in &topts.volumes {
        if vols.get(v).is_none() {
            return Err(TraceError::Invalid(format!(
                "volume `{v}` is not in the trace (volumes: {})",
                vols.iter().take(20).collect::<Vec<_>>().join(", ")
            )));
        }
    }
    Ok((n_in, skipped, vols))
}

/// Run `ecstack trace transform`: with compaction, a first pass learns the touched segments and a
/// second writes; every client stream gets a file, an empty one included.
pub fn transform_files(o: &TransformFiles, on: &mut dyn FnMut(Event)) -> Result<TransformSummary> {
    let clients = o.clients.max(1);
    let segment = o.segment.max(1);
    let compactor = match o.transform.compact {
        Some(seg) => {
            let mut c = Compactor::new(seg, o.transform.flatten);
            transform_pass(o, on, &mut |r, _| {
                c.learn(&r);
                Ok(())
            })?;
            c.finish();
            Some(c)
        }
        None => None,
    };
    let outputs = output_paths(&o.output, clients);
    let mut writers: Vec<Option<TraceWriter<Box<dyn Write>>>> =
        outputs.iter().map(|_| None).collect();
    let mut counts = vec![0u64; clients];
    let (n_in, skipped, _vols) = transform_pass(o, on, &mut |r, names| {
        let r = match &compactor {
            Some(c) => c.map(&r)?,
            None => r,
        };
        let i = client_of(&r, clients, segment);
        if writers[i].is_none() {
            writers[i] = Some(
                TraceWriter::new(
                    create_output(&outputs[i])?,
                    o.format,
                    names,
                    o.fio_file.clone(),
                )
                .map_err(TraceError::Output)?,
            );
        }
        let w = writers[i].as_mut().expect("created");
        w.sync_names(names);
        w.write(&r).map_err(TraceError::Output)?;
        counts[i] += 1;
        Ok(())
    })?;
    for (i, w) in writers.into_iter().enumerate() {
        let w = match w {
            Some(w) => w,
            // an empty stream still gets a (valid, empty) file
            None => TraceWriter::new(
                create_output(&outputs[i])?,
                o.format,
                &Names::new(),
                o.fio_file.clone(),
            )
            .map_err(TraceError::Output)?,
        };
        w.finish().map_err(TraceError::Output)?;
    }
    Ok(TransformSummary {
        records_in: n_in,
        records_out: counts.iter().sum(),
        skipped,
        compacted_bytes: compactor.as_ref().map(|c| c.compacted_bytes()),
        segments: compactor.as_ref().map(|c| c.segments()),
        outputs: outputs.iter().map(|p| p.display().to_string()).collect(),
        per_output: counts,
    })
}

// ----------------------------------------------------------------------------------- synth

/// How far a synthesized trace may be off a target (relative: 3%).
pub const SYNTH_TOLERANCE: f64 = 0.03;

/// Targets given one by one (`ecstack trace synth --writes …`), over a target preset or alone.
#[derive(Clone, Debug, Default)]
pub struct TargetOverrides {
    pub writes: Option<u64>,
    pub avg_write_bytes: Option<u64>,
    pub random_pct: Option<f64>,
    pub wss_bytes: Option<u64>,
    pub updated_wss_pct: Option<f64>,
    pub update_writes_pct: Option<f64>,
    pub read_pct: Option<f64>,
    pub zipf: Option<f64>,
    pub duration_s: Option<f64>,
    pub files: Option<u64>,
    pub updated_files_pct: Option<f64>,
}

impl TargetOverrides {
    fn any(&self) -> bool {
        self.writes.is_some()
            || self.avg_write_bytes.is_some()
            || self.random_pct.is_some()
            || self.wss_bytes.is_some()
            || self.updated_wss_pct.is_some()
            || self.update_writes_pct.is_some()
            || self.read_pct.is_some()
            || self.zipf.is_some()
            || self.duration_s.is_some()
            || self.files.is_some()
            || self.updated_files_pct.is_some()
    }

    /// The generator: `base`'s with these targets over it. Without a base, `writes` and
    /// `wss_bytes` are required and the other targets default to a mixed workload. `None` when
    /// there is neither a base nor a target.
    pub fn generator(&self, base: Option<&Preset>) -> Result<Option<Generator>> {
        if !self.any() {
            return Ok(base.map(|p| p.generator.clone()));
        }
        let required =
            |what: &str| TraceError::Invalid(format!("{what} is required without --preset"));
        let mut t = match base.map(|p| &p.generator) {
            Some(Generator::Targets(t)) => t.clone(),
            Some(_) => {
                return Err(TraceError::Invalid(
                    "target flags only apply to target presets (not iozone / ycsb patterns)".into(),
                ))
            }
            None => Targets {
                name: "synth".into(),
                writes: self.writes.ok_or_else(|| required("--writes"))?,
                avg_write_size: 8192.0,
                random_pct: 75.0,
                wss_bytes: self.wss_bytes.ok_or_else(|| required("--wss"))?,
                updated_wss_pct: 50.0,
                update_writes_pct: 90.0,
                read_pct: 30.0,
                zipf: 0.9,
                duration_s: 3600.0,
                files: None,
            },
        };
        if let Some(v) = self.writes {
            t.writes = v;
        }
        if let Some(v) = self.avg_write_bytes {
            t.avg_write_size = v as f64;
        }
        if let Some(v) = self.random_pct {
            t.random_pct = v;
        }
        if let Some(v) = self.wss_bytes {
            t.wss_bytes = v / 4096 * 4096;
        }
        if let Some(v) = self.updated_wss_pct {
            t.updated_wss_pct = v;
        }
        if let Some(v) = self.update_writes_pct {
            t.update_writes_pct = v;
        }
        if let Some(v) = self.read_pct {
            t.read_pct = v;
        }
        if let Some(v) = self.zipf {
            t.zipf = v;
        }
        if let Some(v) = self.duration_s {
            t.duration_s = v;
        }
        if self.files.is_some() || self.updated_files_pct.is_some() {
            let prev = t.files.clone().unwrap_or(FileTargets {
                files: 1000,
                updated_files_pct: 10.0,
            });
            t.files = Some(FileTargets {
                files: self.files.unwrap_or(prev.files),
                updated_files_pct: self.updated_files_pct.unwrap_or(prev.updated_files_pct),
            });
        }
        Ok(Some(Generator::Targets(t)))
    }
}

/// One `ecstack trace synth` run.
#[derive(Clone, Debug)]
pub struct SynthFile {
    /// The preset's name, when one was named.
    pub preset: Option<String>,
    pub generator: Generator,
    /// Size relative to the published trace (positive).
    pub scale: f64,
    pub seed: u64,
    /// Where to write (`-`: standard output); `None` only checks the targets.
    pub output: Option<PathBuf>,
    /// Output format (`None`: nfs for a file trace, msr otherwise).
    pub format: Option<OutFormat>,
    /// Analyze the result and compare it with the targets.
    pub verify: bool,
}

/// What a synthesis did.
#[derive(Debug, Clone, Serialize)]
pub struct SynthSummary {
    pub preset: Option<String>,
    pub generator: Generator,
    pub scale: f64,
    pub seed: u64,
    pub records: u64,
    pub output: Option<String>,
    pub checks: Option<Vec<Check>>,
}

impl SynthSummary {
    /// Whether a checked target is off by more than [`SYNTH_TOLERANCE`].
    pub fn failed(&self) -> bool {
        self.checks
            .as_ref()
            .is_some_and(|c| c.iter().any(|c| !c.ok))
    }

    /// The checks as a table (empty without checks).
    pub fn checks_table(&self) -> String {
        let Some(cs) = &self.checks else {
            return String::new();
        };
        let mut s = format!(
            "{:<20} {:>16} {:>16} {:>8}\n",
            "metric", "target", "measured", "error%"
        );
        for c in cs {
            s.push_str(&format!(
                "{:<20} {:>16.3} {:>16.3} {:>8.3}{}\n",
                c.metric.name(),
                c.target,
                c.measured,
                c.error * 100.0,
                if c.ok { "" } else { "  OFF" }
            ));
        }
        s
    }
}

/// Run `ecstack trace synth`: stream the generator into the output and, with `verify`, through an
/// analyzer whose report is checked against the targets.
pub fn synth_file(o: &SynthFile, on: &mut dyn FnMut(Event)) -> Result<SynthSummary> {
    let stream = SynthStream::new(&o.generator, o.scale, o.seed)?;
    let volumes = stream.volumes().clone();
    let file_trace = matches!(&o.generator, Generator::Targets(t) if t.files.is_some());
    let fmt = match o.format {
        Some(f) => f,
        None if file_trace => OutFormat::Nfs,
        None => OutFormat::Msr,
    };
    if file_trace && !matches!(fmt, OutFormat::Nfs) {
        return Err(TraceError::Invalid(
            "a file trace (files target) can only be written as --out-format nfs".into(),
        ));
    }
    if o.output.is_none() && !o.verify {
        return Err(TraceError::Invalid(
            "give -o OUT (or --verify to only check the targets)".into(),
        ));
    }
    let mut writer = match &o.output {
        Some(p) => Some(
            TraceWriter::new(create_output(p)?, fmt, &volumes, None).map_err(TraceError::Output)?,
        ),
        None => None,
    };
    let mut analyzer = o.verify.then(|| {
        Analyzer::new(AnalyzeOptions {
            reuse_cdf: false,
            ..Default::default()
        })
    });
    let mut n = 0u64;
    for r in stream {
        if let Some(w) = writer.as_mut() {
            w.write(&r).map_err(TraceError::Output)?;
        }
        if let Some(an) = analyzer.as_mut() {
            an.add(&r);
        }
        n += 1;
        if n & 0xffff == 0 {
            on(Event::Records(n));
        }
    }
    if let Some(w) = writer {
        w.finish().map_err(TraceError::Output)?;
    }
    let p = Preset {
        name: o.preset.clone().unwrap_or_else(|| "custom".into()),
        source: String::new(),
        generator: o.generator.clone(),
    };
    let checks = analyzer.map(|an| {
        let rep = an.report(&volumes);
        rep.volumes
            .first()
            .map(|v| p.check(v, o.scale, SYNTH_TOLERANCE))
            .unwrap_or_default()
    });
    Ok(SynthSummary {
        preset: o.preset.clone(),
        generator: o.generator.clone(),
        scale: o.scale,
        seed: o.seed,
        records: n,
        output: o.output.as_ref().map(|p| p.display().to_string()),
        checks,
    })
}

// ---------------------------------------------------------------------------------- replay

/// Lay records out for a block replay: keep only writes if asked, and with `compact_chunk` round
/// to that chunk and compact by 1 MiB segments (EPLOG's preparation, volumes flattened). A file
/// trace needs the compaction; an empty result is an error.
pub fn prepare_for_replay(
    mut records: Vec<Record>,
    writes_only: bool,
    compact_chunk: Option<u64>,
) -> Result<Vec<Record>> {
    if writes_only {
        records.retain(|r| r.op == Op::Write);
    }
    match compact_chunk {
        Some(chunk) => records = eplog_prepare(&records, chunk.max(1)).0,
        None if records.iter().any(|r| r.file != 0) => {
            return Err(TraceError::Invalid(
                "a file trace needs --compact to be laid out on a block device".into(),
            ))
        }
        None => {}
    }
    if records.is_empty() {
        return Err(TraceError::Invalid("the trace has no requests".into()));
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synth::preset;

    fn rec(time_ns: u64, op: Op, offset: u64, len: u64) -> Record {
        Record {
            time_ns,
            volume: 0,
            file: 0,
            op,
            offset,
            len,
        }
    }

    fn msr(dir: &Path, name: &str, lines: &[(&str, u64, u64)]) -> PathBuf {
        let ft = 128_166_372_000_000_000u64;
        let body: String = lines
            .iter()
            .enumerate()
            .map(|(i, (ty, off, len))| {
                format!("{},usr,0,{ty},{off},{len},100\n", ft + i as u64 * 10)
            })
            .collect();
        let p = dir.join(name);
        std::fs::write(&p, body).unwrap();
        p
    }

    #[test]
    fn read_files_reports_skipped_lines() {
        let dir = tempfile::tempdir().unwrap();
        let p = msr(
            dir.path(),
            "a.csv",
            &[("Write", 0, 4096), ("Read", 8192, 512)],
        );
        let mut body = std::fs::read_to_string(&p).unwrap();
        body.push_str("not a line\n");
        std::fs::write(&p, body).unwrap();
        let opts = ParseOptions {
            skip_bad: true,
            ..ParseOptions::default()
        };
        let mut skips = Vec::new();
        let (recs, vols, skipped) = read_files(&[p.as_path()], &opts, &mut |e| {
            if let Event::Skipped { count, first } = e {
                skips.push((count, first.to_string()));
            }
        })
        .unwrap();
        assert_eq!(recs.len(), 2);
        assert_eq!(vols.len(), 1);
        assert_eq!(skipped, 1);
        assert_eq!(skips.len(), 1);
        assert!(skips[0].1.contains("a.csv:3: "), "{skips:?}");
    }

    #[test]
    fn transform_splits_into_client_files_and_compacts() {
        let dir = tempfile::tempdir().unwrap();
        let p = msr(
            dir.path(),
            "a.csv",
            &[
                ("Write", 0, 4096),
                ("Write", 64 << 20, 4096),
                ("Read", 4096, 4096),
                ("Write", 128 << 20, 100),
            ],
        );
        let out = dir.path().join("out");
        let o = TransformFiles {
            inputs: vec![p],
            parse: ParseOptions::default(),
            transform: TransformOptions {
                writes_only: true,
                compact: Some(1 << 20),
                ..TransformOptions::default()
            },
            output: out.clone(),
            format: OutFormat::Msr,
            fio_file: None,
            clients: 2,
            segment: 1 << 20,
        };
        let s = transform_files(&o, &mut |_| {}).unwrap();
        assert_eq!(s.records_in, 4);
        assert_eq!(s.records_out, 3);
        assert_eq!(s.per_output.iter().sum::<u64>(), 3);
        assert_eq!(s.segments, Some(3));
        assert_eq!(s.compacted_bytes, Some(3 << 20));
        assert_eq!(
            s.outputs,
            output_paths(&out, 2)
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
        );
        // every client's file exists, and together they hold every record
        let lines: usize = output_paths(&out, 2)
            .iter()
            .map(|p| std::fs::read_to_string(p).unwrap().lines().count())
            .sum();
        assert_eq!(lines, 3);
        assert_eq!(
            s.line(),
            "4 records in, 3 out, compacted address space 3 MiB"
        );
    }

    #[test]
    fn transform_names_a_missing_volume() {
        let dir = tempfile::tempdir().unwrap();
        let p = msr(dir.path(), "a.csv", &[("Write", 0, 4096)]);
        let o = TransformFiles {
            inputs: vec![p],
            parse: ParseOptions::default(),
            transform: TransformOptions {
                volumes: vec!["nope".into()],
                ..TransformOptions::default()
            },
            output: dir.path().join("out"),
            format: OutFormat::Msr,
            fio_file: None,
            clients: 1,
            segment: 1 << 20,
        };
        let e = transform_files(&o, &mut |_| {}).unwrap_err().to_string();
        assert!(
            e.starts_with("volume `nope` is not in the trace (volumes: usr"),
            "{e}"
        );
        // a file that cannot be created is named
        let o = TransformFiles {
            transform: TransformOptions::default(),
            output: dir.path().join("no/such/dir"),
            ..o
        };
        let e = transform_files(&o, &mut |_| {}).unwrap_err();
        assert!(e.to_string().starts_with("cannot create "), "{e}");
    }

    #[test]
    fn overrides_need_writes_and_wss_without_a_preset() {
        assert!(TargetOverrides::default()
            .generator(None)
            .unwrap()
            .is_none());
        let e = TargetOverrides {
            wss_bytes: Some(1 << 20),
            ..Default::default()
        }
        .generator(None)
        .unwrap_err();
        assert_eq!(e.to_string(), "--writes is required without --preset");
        let g = TargetOverrides {
            writes: Some(100),
            wss_bytes: Some((1 << 20) + 100),
            files: Some(5),
            ..Default::default()
        }
        .generator(None)
        .unwrap()
        .unwrap();
        let Generator::Targets(t) = g else {
            panic!("targets")
        };
        assert_eq!(t.writes, 100);
        assert_eq!(t.wss_bytes, 1 << 20, "rounded down to 4 KiB");
        assert_eq!(t.files.unwrap().files, 5);
    }

    #[test]
    fn overrides_apply_over_a_target_preset() {
        let base = preset("eplog-fin").unwrap();
        let g = TargetOverrides {
            read_pct: Some(0.0),
            ..Default::default()
        }
        .generator(Some(&base))
        .unwrap()
        .unwrap();
        let (Generator::Targets(t), Generator::Targets(b)) = (&g, &base.generator) else {
            panic!("targets")
        };
        assert_eq!(t.read_pct, 0.0);
        assert_eq!(t.writes, b.writes);
    }

    #[test]
    fn synth_verify_meets_its_targets() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("mds.csv");
        let o = SynthFile {
            preset: Some("eplog-mds".into()),
            generator: preset("eplog-mds").unwrap().generator,
            scale: 0.01,
            seed: 7,
            output: Some(out.clone()),
            format: None,
            verify: true,
        };
        let s = synth_file(&o, &mut |_| {}).unwrap();
        assert!(s.records > 0);
        assert!(!s.failed(), "{}", s.checks_table());
        assert!(s.checks_table().starts_with("metric "));
        let lines = std::fs::read_to_string(&out).unwrap().lines().count() as u64;
        assert_eq!(lines, s.records);
        // neither an output nor --verify: nothing to do
        let e = synth_file(
            &SynthFile {
                output: None,
                verify: false,
                ..o
            },
            &mut |_| {},
        )
        .unwrap_err();
        assert!(e.to_string().starts_with("give -o OUT"), "{e}");
    }

    #[test]
    fn replay_preparation_filters_and_refuses_empty() {
        let recs = vec![rec(0, Op::Read, 0, 4096), rec(1, Op::Write, 8192, 100)];
        let out = prepare_for_replay(recs.clone(), true, None).unwrap();
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].op, Op::Write);
        let out = prepare_for_replay(recs.clone(), false, Some(4096)).unwrap();
        assert_eq!(out.len(), 2);
        assert!(out
            .iter()
            .all(|r| r.offset % 4096 == 0 && r.len % 4096 == 0));
        let e = prepare_for_replay(vec![rec(0, Op::Read, 0, 1)], true, None).unwrap_err();
        assert_eq!(e.to_string(), "the trace has no requests");
        let mut f = rec(0, Op::Write, 0, 1);
        f.file = 1;
        let e = prepare_for_replay(vec![f], false, None).unwrap_err();
        assert!(e.to_string().contains("needs --compact"), "{e}");
    }
}
