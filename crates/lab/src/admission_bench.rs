//! `ecstack bench admission`: what admission control of block streams buys an OSD whose store pays
//! for positioning when streams interleave (docs/robustore.md "Admission control on OSDs"; issue
//! 44's target: aggregate throughput with admission / without ≥ 1.3).
//!
//! One OSD (its real gRPC service on 127.0.0.1, no MDS: the block calls need none) on a
//! `DeviceStore` over a device that charges positioning — by default EPLOG's HDD profile
//! (`throttled:profile=eplog-hdd:mem:…`: a read is sequential only if it starts near where one of
//! the last 32 requests ended; otherwise it pays a seek). `streams` objects of `object_bytes` are
//! written, the store is probed, then `streams` readers each read their own object over and over
//! with GetBlocks for `seconds`, all at once; a refused reader waits `retry_ms` and asks again (on a
//! cluster it would read from its other OSDs meanwhile). The OSD's block I/O queue has `threads`
//! workers (by default one per stream, as a server with a thread per request has: every stream's
//! reads reach the disk interleaved). Three runs on fresh stores: admission off, admission on, and
//! admission off with the default 4 workers (the queue alone bounds the interleaving). The figure is
//! the bytes the readers received over the run's time.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ecstack_codes::{new_code, CodeKind};
use ecstack_osd::admission::AdmissionConfig;
use ecstack_osd::api::{BlockKey, OsdCallError, OsdClient, StreamPriority};
use ecstack_osd::device_store::{DeviceStore, DeviceStoreOptions};
use ecstack_osd::service::{BlockConfig, NoMds, Osd, OsdSetup, DEFAULT_BLOCK_IO_THREADS};
use ecstack_rpc::Security;
use serde::Serialize;

use crate::{LabError, Result};

#[derive(Debug, Clone)]
pub struct AdmissionBenchConfig {
    /// The store's device spec; `{size}` is replaced by a capacity that holds the objects.
    pub device: String,
    /// Readers at once (each its own object).
    pub streams: usize,
    pub object_bytes: u64,
    pub block_bytes: u32,
    /// Block I/O workers of the OSD in the runs with many (0: one per stream).
    pub threads: usize,
    /// The floor each admitted stream keeps, bytes/s.
    pub floor_bytes_per_s: u64,
    /// How long the readers read, per run.
    pub seconds: f64,
    /// How long a refused reader waits before it asks again.
    pub retry_ms: u64,
}

impl Default for AdmissionBenchConfig {
    fn default() -> Self {
        AdmissionBenchConfig {
            device: "throttled:profile=eplog-hdd:mem:{size}".into(),
            streams: 48,
            object_bytes: 4 << 20,
            block_bytes: 1 << 20,
            threads: 0,
            floor_bytes_per_s: 8 << 20,
            seconds: 8.0,
            retry_ms: 20,
        }
    }
}

impl AdmissionBenchConfig {
    /// A short run (CI, `--quick`).
    pub fn quick() -> AdmissionBenchConfig {
        AdmissionBenchConfig {
            streams: 40,
            object_bytes: 2 << 20,
            seconds: 3.0,
            ..AdmissionBenchConfig::default()
        }
    }

    fn validate(&self) -> Result<()> {
        let bad = |field, msg: &str| {
            Err(LabError::Config {
                field,
                msg: msg.into(),
            })
        };
        if self.streams == 0 || self.streams > 1024 {
            return bad("streams", "must be 1..=1024");
        }
        if self.block_bytes == 0 || self.block_bytes > ecstack_osd::api::MAX_BLOCK_BYTES {
            return bad("block-size", "must be 1 B..=2 MiB");
        }
        if self.object_bytes < u64::from(self.block_bytes) || self.object_bytes > 1 << 30 {
            return bad("object-size", "must be one block..=1 GiB");
        }
        if !(self.seconds.is_finite() && self.seconds > 0.0 && self.seconds <= 3600.0) {
            return bad("seconds", "must be in (0, 3600]");
        }
        if self.floor_bytes_per_s == 0 {
            return bad("floor", "must be positive");
        }
        if self.threads > 256 {
            return bad("threads", "must be 0..=256");
        }
        Ok(())
    }

    fn blocks_per_object(&self) -> u64 {
        self.object_bytes.div_ceil(u64::from(self.block_bytes))
    }
}

/// One run's figures.
#[derive(Debug, Clone, Serialize)]
pub struct RunFigures {
    pub admission: bool,
    pub threads: usize,
    /// Bytes the readers received, over the run's seconds.
    pub mb_per_s: f64,
    pub bytes: u64,
    pub seconds: f64,
    /// Whole objects read.
    pub objects: u64,
    pub admitted: u64,
    pub refused: u64,
    /// The store's read throughput as the OSD measured it at the end (bytes over busy time).
    pub store_read_mb_per_s: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct AdmissionBenchReport {
    pub device: String,
    pub streams: usize,
    pub object_bytes: u64,
    pub block_bytes: u32,
    pub floor_bytes_per_s: u64,
    pub runs: Vec<RunFigures>,
    /// Aggregate throughput delivered to the readers with admission / without (same workers);
    /// `None` when nothing was delivered without (no block completed in the run).
    pub ratio: Option<f64>,
    /// The store's measured read throughput with admission / without (same workers).
    pub store_ratio: f64,
}

impl AdmissionBenchReport {
    pub fn markdown(&self) -> String {
        let mut s = format!(
            "Admission control at one OSD: {} readers of {} MiB objects ({} KiB blocks) at once, store `{}`, floor {:.1} MB/s per stream\n\n| admission | block I/O threads | MB/s (aggregate) | objects read | streams admitted | refused | store read MB/s (measured) |\n|---|---:|---:|---:|---:|---:|---:|\n",
            self.streams,
            self.object_bytes >> 20,
            self.block_bytes >> 10,
            self.device,
            self.floor_bytes_per_s as f64 / 1e6
        );
        for r in &self.runs {
            s += &format!(
                "| {} | {} | {:.1} | {} | {} | {} | {:.1} |\n",
                if r.admission { "on" } else { "off" },
                r.threads,
                r.mb_per_s,
                r.objects,
                r.admitted,
                r.refused,
                r.store_read_mb_per_s
            );
        }
        s += &match self.ratio {
            Some(r) => format!(
                "\nwith / without admission (same threads), delivered: {r:.2} (target ≥ 1.3); store reads: {:.2}\n",
                self.store_ratio
            ),
            None => format!(
                "\nwith / without admission (same threads): nothing was delivered without admission (no block completed in the run; target ≥ 1.3); store reads: {:.2}\n",
                self.store_ratio
            ),
        };
        s
    }
}

fn run_error(what: &str) -> impl Fn(OsdCallError) -> LabError + '_ {
    move |e| LabError::Run(format!("{what}: {e}"))
}

/// The three runs (see the module doc).
pub fn run(cfg: &AdmissionBenchConfig, log: &dyn Fn(&str)) -> Result<AdmissionBenchReport> {
    cfg.validate()?;
    let rt = crate::codfs_bench::runtime()?;
    let many = if cfg.threads == 0 {
        cfg.streams
    } else {
        cfg.threads
    };
    let mut runs = Vec::new();
    for (admission, threads) in [
        (false, many),
        (true, many),
        (false, DEFAULT_BLOCK_IO_THREADS),
    ] {
        log(&format!(
            "admission {}, {threads} block I/O threads",
            if admission { "on" } else { "off" }
        ));
        runs.push(rt.block_on(one_run(cfg, admission, threads, log))?);
    }
    let ratio = (runs[0].bytes > 0).then(|| runs[1].mb_per_s / runs[0].mb_per_s);
    let store_ratio = runs[1].store_read_mb_per_s / runs[0].store_read_mb_per_s.max(1e-9);
    Ok(AdmissionBenchReport {
        device: cfg.device.clone(),
        streams: cfg.streams,
        object_bytes: cfg.object_bytes,
        block_bytes: cfg.block_bytes,
        floor_bytes_per_s: cfg.floor_bytes_per_s,
        runs,
        ratio,
        store_ratio,
    })
}

async fn one_run(
    cfg: &AdmissionBenchConfig,
    admission: bool,
    threads: usize,
    log: &dyn Fn(&str),
) -> Result<RunFigures> {
    let record = ecstack_osd::chunk_store::record_span(cfg.block_bytes);
    let need = cfg.streams as u64 * (cfg.blocks_per_object() * record + (64 << 10));
    let size = (need + need / 4 + (64 << 20)).next_multiple_of(1 << 20);
    let spec = cfg.device.replace("{size}", &format!("{}M", size >> 20));
    let store = DeviceStore::open_spec(&spec, DeviceStoreOptions::default())
        .map_err(|e| LabError::Run(format!("store on {spec}: {e}")))?;
    let osd = Osd::new(
        OsdSetup {
            osd_id: 1,
            code: new_code(CodeKind::RsVandermonde, 2, 1)?.into(),
            store: Arc::new(store),
            security: Security::Insecure,
            mds: Arc::new(NoMds),
        },
        0,
    );
    let floor = cfg.floor_bytes_per_s;
    let config = |enabled| BlockConfig {
        threads,
        admission: AdmissionConfig {
            enabled,
            floor_bytes_per_s: floor,
        },
    };
    // The objects are written with admission off (one writer at a time anyway).
    osd.configure_blocks(config(false));
    let addr = osd
        .serve_loopback()
        .await
        .map_err(|e| LabError::Run(format!("cannot serve the OSD: {e}")))?;
    let client = OsdClient::connect(&addr, &Security::Insecure).map_err(run_error("connect"))?;
    let block = bytes::Bytes::from(
        (0..cfg.block_bytes as usize)
            .map(|i| (i * 7 + i / 251) as u8)
            .collect::<Vec<u8>>(),
    );
    for o in 1..=cfg.streams as u64 {
        let mut w = client
            .put_blocks(o, cfg.block_bytes, StreamPriority::Normal, cfg.object_bytes)
            .await
            .map_err(run_error("write"))?;
        for id in 0..cfg.blocks_per_object() as u32 {
            w.send(BlockKey { id, version: 1 }, block.clone())
                .await
                .map_err(run_error("write"))?;
        }
        w.close();
        while w.ack().await.map_err(run_error("write"))?.is_some() {}
    }
    osd.block_io()
        .probe()
        .await
        .map_err(|e| LabError::Run(format!("store probe: {e}")))?;
    log(&format!(
        "  {} objects written; store measured at {:.1} MB/s read",
        cfg.streams,
        osd.block_io().rates().0.unwrap_or(0.0) / 1e6
    ));
    osd.configure_blocks(config(admission));
    let received = Arc::new(AtomicU64::new(0));
    let objects = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(cfg.seconds);
    let mut readers = Vec::new();
    for o in 1..=cfg.streams as u64 {
        let (client, received, objects) = (client.clone(), received.clone(), objects.clone());
        let retry = Duration::from_millis(cfg.retry_ms);
        readers.push(tokio::spawn(async move {
            while Instant::now() < deadline {
                let mut r = match client.get_blocks(o, 0, StreamPriority::Normal).await {
                    Ok(r) => r,
                    Err(OsdCallError::Refused { .. }) => {
                        tokio::time::sleep(retry).await;
                        continue;
                    }
                    Err(e) => return Err(e),
                };
                loop {
                    let next = tokio::time::timeout_at(deadline.into(), r.next()).await;
                    match next {
                        Err(_) => return Ok(()), // the run is over: dropping r cancels the rest
                        Ok(Ok(Some((_, d)))) => {
                            received.fetch_add(d.len() as u64, Ordering::Relaxed);
                        }
                        Ok(Ok(None)) => {
                            objects.fetch_add(1, Ordering::Relaxed);
                            break;
                        }
                        Ok(Err(OsdCallError::Refused { .. })) => break,
                        Ok(Err(e)) => return Err(e),
                    }
                }
            }
            Ok(())
        }));
    }
    for r in readers {
        r.await
            .map_err(|e| LabError::Run(format!("a reader failed: {e}")))?
            .map_err(run_error("read"))?;
    }
    let seconds = started.elapsed().as_secs_f64();
    let bytes = received.load(Ordering::Relaxed);
    let m = osd.metrics();
    Ok(RunFigures {
        admission,
        threads,
        mb_per_s: bytes as f64 / seconds / 1e6,
        bytes,
        seconds,
        objects: objects.load(Ordering::Relaxed),
        // The writes' streams and the probe's are not block reads.
        admitted: m.streams_admitted.get().saturating_sub(cfg.streams as u64),
        refused: m.streams_refused.get(),
        store_read_mb_per_s: osd.block_io().rates().0.unwrap_or(0.0) / 1e6,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_settings_name_their_flag() {
        let e = AdmissionBenchConfig {
            streams: 0,
            ..AdmissionBenchConfig::default()
        }
        .validate()
        .unwrap_err();
        assert_eq!(e.to_string(), "streams: must be 1..=1024");
        let e = AdmissionBenchConfig {
            seconds: f64::NAN,
            ..AdmissionBenchConfig::default()
        }
        .validate()
        .unwrap_err();
        assert!(e.to_string().starts_with("seconds:"), "{e}");
    }
}
