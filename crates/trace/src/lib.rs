//! Trace tooling: parse, analyze, transform, synthesize and replay block and file traces.
//!
//! Every input format is read by a streaming [`TraceReader`] into one internal [`Record`] type
//! (time in ns, volume, file, op, byte offset, byte length). Everything else consumes records:
//!
//! - [`analyze`]: the update statistics of CodFS Tables 3.1–3.2 and EPLOG Table 2, the update-size
//!   distribution and the address-reuse CDF of ZombieNAND Fig 4.5, memory bounded by the working set
//!   at 4 KiB block granularity;
//! - [`transform`]: EPLOG compaction (drop untouched 1 MiB segments), chunk rounding, CodFS merge of
//!   consecutive requests, volume / time-window selection, split into client streams;
//! - [`synth`]: deterministic generators matching published statistics (named presets);
//! - [`replay`]: drive a [`ecstack_device::BlockDevice`] with N client threads;
//! - [`tools`]: the runs behind `ecstack trace` (files transformed into files, synthesis into a
//!   file with its check against the targets, records prepared for a replay).
//!
//! The array experiment gets an EPLOG-ready trace with
//! `synth::synthesize_preset("eplog-fin", 0.1, 42)` followed by
//! `transform::eplog_prepare(&trace.records, 4096)`.

#![forbid(unsafe_code)]

pub mod analyze;
mod bitmap;
mod error;
mod hash;
pub mod input;
pub mod parse;
pub mod record;
#[cfg(feature = "replay")]
pub mod replay;
pub mod synth;
pub mod tools;
pub mod transform;
pub mod write;

pub use analyze::{analyze_records, AnalyzeOptions, Analyzer, GroupBy, Report, VolumeReport};
pub use error::{Result, TraceError};
pub use parse::{Format, ParseOptions, TraceReader};
pub use record::{Names, Op, Record, BLOCK_SIZE};
pub use synth::{preset_names, synthesize, synthesize_preset, Preset, SynthTrace, Targets};
pub use write::{write_records, OutFormat};
