//! `ecstack ec demo`: erasure coding end to end on files. Generate pseudo-random data, encode it
//! into k + m shard files, delete m of them (data shards first, chosen by the seed, so decoding has
//! real work to do), decode from the rest and compare byte for byte.

use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use ecstack_codes::shard::{self, EncodeOptions};
use serde_json::json;

use crate::{io_at, LabError, Result};

/// One demo run.
#[derive(Clone, Debug)]
pub struct EcDemoConfig {
    /// Size of the generated file.
    pub bytes: u64,
    pub options: EncodeOptions,
    /// Work directory (it must exist): `demo.bin`, `shards/`, `demo.out`.
    pub dir: PathBuf,
    /// Seed of the data and of the choice of lost shards.
    pub seed: u64,
}

/// What the demo tells its caller while it goes: the steps, and the coding progress in bytes.
#[derive(Debug, PartialEq)]
pub enum DemoEvent<'a> {
    /// Step 1 starts: the data goes into `input`.
    Generating {
        input: &'a Path,
    },
    /// Step 2 starts: encoding `total` bytes.
    Encoding {
        total: u64,
    },
    EncodeAt(u64),
    EncodeDone,
    /// Step 3: these shard files were deleted.
    Deleted {
        lost: &'a [usize],
    },
    /// Step 4 starts: decoding.
    Decoding,
    DecodeAt {
        done: u64,
        total: u64,
    },
    DecodeDone,
}

/// What the demo measured.
#[derive(Clone, Debug)]
pub struct EcDemoReport {
    pub config: EcDemoConfig,
    /// The shard indices deleted.
    pub lost: Vec<usize>,
    /// Shards decoded from.
    pub kept: usize,
    pub encode: shard::Report,
    pub decode: shard::Report,
    /// The SIMD level of the kernels.
    pub simd: &'static str,
}

/// GB/s of `bytes` in `secs` (0 for no time).
pub fn gbps(bytes: u64, secs: f64) -> f64 {
    if secs > 0.0 {
        bytes as f64 / secs / 1e9
    } else {
        0.0
    }
}

/// Write `size` bytes of the seeded generator's output to `path`.
pub fn write_random_file(path: &Path, size: u64, seed: u64) -> Result<()> {
    let mut w = BufWriter::new(File::create(path).map_err(io_at(path))?);
    let mut rng = ecstack_base::rng::Rng::new(seed);
    let mut buf = vec![0u8; 1 << 20];
    let mut left = size;
    while left > 0 {
        let n = left.min(buf.len() as u64) as usize;
        rng.fill(&mut buf[..n]);
        w.write_all(&buf[..n]).map_err(io_at(path))?;
        left -= n as u64;
    }
    w.flush().map_err(io_at(path))?;
    Ok(())
}

/// Whether two files hold the same bytes.
pub fn files_equal(a: &Path, b: &Path) -> Result<bool> {
    let mut fa = File::open(a).map_err(io_at(a))?;
    let mut fb = File::open(b).map_err(io_at(b))?;
    let len = |f: &File, p: &Path| f.metadata().map(|m| m.len()).map_err(io_at(p));
    if len(&fa, a)? != len(&fb, b)? {
        return Ok(false);
    }
    let (mut ba, mut bb) = (vec![0u8; 1 << 20], vec![0u8; 1 << 20]);
    loop {
        let n = fa.read(&mut ba).map_err(io_at(a))?;
        if n == 0 {
            return Ok(true);
        }
        fb.read_exact(&mut bb[..n]).map_err(io_at(b))?;
        if ba[..n] != bb[..n] {
            return Ok(false);
        }
    }
}

/// Run the demo; an error if the decoded file differs from the original.
pub fn run(c: &EcDemoConfig, on: &mut dyn FnMut(DemoEvent)) -> Result<EcDemoReport> {
    let opts = &c.options;
    let input = c.dir.join("demo.bin");
    on(DemoEvent::Generating { input: &input });
    write_random_file(&input, c.bytes, c.seed)?;
    on(DemoEvent::Encoding { total: c.bytes });
    let enc = shard::encode_file_with_progress(&input, &c.dir.join("shards"), opts, &mut |d, _| {
        on(DemoEvent::EncodeAt(d))
    });
    on(DemoEvent::EncodeDone);
    let enc = enc?;
    // Lose m shards, chosen by the seed, data shards first so decoding has real work to do.
    let mut rng = ecstack_base::rng::Rng::new(c.seed);
    let mut idx: Vec<usize> = (0..opts.k + opts.m).collect();
    rng.shuffle(&mut idx[..opts.k]);
    let lost: Vec<usize> = idx[..opts.m.min(opts.k)].to_vec();
    for &i in &lost {
        std::fs::remove_file(&enc.shards[i]).map_err(io_at(&enc.shards[i]))?;
    }
    on(DemoEvent::Deleted { lost: &lost });
    let keep: Vec<PathBuf> = enc
        .shards
        .iter()
        .enumerate()
        .filter(|(i, _)| !lost.contains(i))
        .map(|(_, p)| p.clone())
        .collect();
    let out = c.dir.join("demo.out");
    on(DemoEvent::Decoding);
    let dec = shard::decode_files_with_progress(&keep, &out, &mut |done, total| {
        on(DemoEvent::DecodeAt { done, total })
    });
    on(DemoEvent::DecodeDone);
    let dec = dec?;
    if !files_equal(&input, &out)? {
        return Err(LabError::Run(
            "decoded file differs from the original".into(),
        ));
    }
    Ok(EcDemoReport {
        config: c.clone(),
        lost,
        kept: keep.len(),
        encode: enc,
        decode: dec,
        simd: ecstack_codes::Simd::active().name(),
    })
}

impl EcDemoReport {
    /// The `--json` report.
    pub fn to_json(&self) -> serde_json::Value {
        let (o, size) = (&self.config.options, self.config.bytes);
        json!({
            "bytes": size, "code": o.code, "k": o.k, "m": o.m, "lost": self.lost, "verified": true,
            "simd": self.simd,
            "encode_gbps": gbps(size, self.encode.coding_seconds),
            "decode_gbps": gbps(size, self.decode.coding_seconds),
            "encode_total_seconds": self.encode.total_seconds,
            "decode_total_seconds": self.decode.total_seconds,
        })
    }

    /// The text of step 4: the comparison and the speeds.
    pub fn text(&self) -> String {
        let size = self.config.bytes;
        format!(
            "4. decoded from the {} remaining shards and compared byte for byte: identical\n   \
             encode {:.2} GB/s, decode ({} lost) {:.2} GB/s  (coding only; with file I/O {:.2} / {:.2} GB/s)\n",
            self.kept,
            gbps(size, self.encode.coding_seconds),
            self.lost.len(),
            gbps(size, self.decode.coding_seconds),
            gbps(size, self.encode.total_seconds),
            gbps(size, self.decode.total_seconds)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ecstack_codes::CodeKind;

    #[test]
    fn demo_loses_m_data_shards_and_decodes() {
        let dir = tempfile::tempdir().unwrap();
        let c = EcDemoConfig {
            bytes: (1 << 20) + 12345,
            options: EncodeOptions {
                code: CodeKind::RsVandermonde,
                k: 4,
                m: 2,
                unit: None,
                set_id: Some(7),
            },
            dir: dir.path().to_path_buf(),
            seed: 3,
        };
        let mut steps = Vec::new();
        let r = run(&c, &mut |e| match e {
            DemoEvent::EncodeAt(_) | DemoEvent::DecodeAt { .. } => {}
            e => steps.push(format!("{e:?}")),
        })
        .unwrap();
        assert_eq!(r.lost.len(), 2);
        assert!(
            r.lost.iter().all(|&i| i < 4),
            "data shards first: {:?}",
            r.lost
        );
        assert_eq!(r.kept, 4);
        assert_eq!(steps.len(), 6, "{steps:?}");
        assert!(steps[3].starts_with("Deleted"), "{steps:?}");
        let j = r.to_json();
        assert_eq!(j["verified"], true);
        assert_eq!(j["bytes"], (1 << 20) + 12345);
        assert!(r
            .text()
            .starts_with("4. decoded from the 4 remaining shards"));
        // the same seed loses the same shards
        let d2 = tempfile::tempdir().unwrap();
        let again = run(
            &EcDemoConfig {
                dir: d2.path().to_path_buf(),
                ..c
            },
            &mut |_| {},
        )
        .unwrap();
        assert_eq!(again.lost, r.lost);
    }

    #[test]
    fn files_equal_compares_length_and_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        write_random_file(&a, 5000, 1).unwrap();
        write_random_file(&b, 5000, 1).unwrap();
        assert!(files_equal(&a, &b).unwrap());
        write_random_file(&b, 5000, 2).unwrap();
        assert!(!files_equal(&a, &b).unwrap());
        write_random_file(&b, 4999, 1).unwrap();
        assert!(!files_equal(&a, &b).unwrap());
    }
}
