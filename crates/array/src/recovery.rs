//! Recovery (EPLOG §3.4): parity commit first, then rebuild the lost chunks data stripe by data
//! stripe in batches of B stripes. Within a batch the reads of every surviving device are sorted and
//! consecutive chunks merged into one large read (and the writes to each replacement likewise); the
//! devices are read in parallel. With prefetching, a scanner thread walks the metadata and reads the
//! next batches into an in-memory pool while the current batch is decoded and written.

use std::sync::mpsc::sync_channel;
use std::sync::Arc;
use std::time::Instant;

use ecstack_device::BlockDevice;

use crate::core::{lock_sb, CommitReport, Core, RebuildReport};
use crate::format::encode_label;
use crate::io::Rd;
use crate::meta::Rec;
use crate::scheme::UpdateScheme;
use crate::{ArrayError, Result};

/// One stripe of a batch: its shards (surviving ones filled by the batch read) and what to rebuild.
struct Item {
    s: u64,
    shards: Vec<Vec<u8>>,
    erased: Vec<usize>,
    /// (target index, position, slot)
    targets: Vec<(usize, usize, u64)>,
}

/// Metadata scan of `stripes` + batch read of their surviving chunks.
fn scan_and_read(
    core: &Core,
    scheme: &dyn UpdateScheme,
    stripes: &[u64],
    targets: &[usize],
) -> Result<Vec<Item>> {
    let g = &core.geo;
    let c = g.chunk as usize;
    let mut items = Vec::new();
    let mut plans = Vec::new();
    for &s in stripes {
        let Some(layout) = scheme.committed_layout(core, s) else {
            continue;
        };
        let tg: Vec<(usize, usize, u64)> = targets
            .iter()
            .enumerate()
            .filter_map(|(ti, &d)| {
                let p = g.pos_of(s, d);
                layout[p].map(|slot| (ti, p, slot))
            })
            .collect();
        if tg.is_empty() {
            continue;
        }
        let plan = core.plan_stripe(s, &layout, &[])?;
        items.push(Item {
            s,
            shards: vec![vec![0u8; c]; g.n],
            erased: plan.erased,
            targets: tg,
        });
        plans.push(plan.reads);
    }
    let mut bad = Vec::new();
    {
        let mut ops = Vec::new();
        let mut who = Vec::new();
        for (ii, (it, reads)) in items.iter_mut().zip(&plans).enumerate() {
            let mut bufs: Vec<Option<&mut Vec<u8>>> = it.shards.iter_mut().map(Some).collect();
            for &(p, d, slot) in reads {
                ops.push(Rd::new(
                    d,
                    g.off(slot),
                    bufs[p].take().expect("once").as_mut_slice(),
                ));
                who.push(ii);
            }
        }
        core.devs.read(&mut ops);
        for (o, &ii) in ops.iter().zip(&who) {
            if !o.ok && !bad.contains(&ii) {
                bad.push(ii);
            }
        }
    }
    // A device failed during the batch read: decode those stripes one by one around it.
    for ii in bad {
        let s = items[ii].s;
        let layout = scheme
            .committed_layout(core, s)
            .ok_or_else(|| ArrayError::Meta(format!("stripe {s} vanished during rebuild")))?;
        items[ii].shards = core.decode_stripe(s, &layout, &[], &|_, _| Ok(()))?;
        items[ii].erased.clear();
    }
    Ok(items)
}

/// Decode a batch and write the recovered chunks to the replacements (merged per device).
fn decode_and_write(
    core: &Core,
    mut items: Vec<Item>,
    targets: &[(usize, Arc<dyn BlockDevice>)],
    chunks: &mut u64,
) -> Result<()> {
    let g = &core.geo;
    let mut out: Vec<Vec<(u64, Vec<u8>)>> = vec![Vec::new(); targets.len()];
    for it in items.iter_mut() {
        if !it.erased.is_empty() {
            let mut refs: Vec<&mut [u8]> = it.shards.iter_mut().map(|v| v.as_mut_slice()).collect();
            core.code.reconstruct_in_place(&mut refs, &it.erased)?;
        }
        for &(ti, p, slot) in &it.targets {
            out[ti].push((slot, std::mem::take(&mut it.shards[p])));
            *chunks += 1;
        }
    }
    // Each replacement is written by its own thread (they are different devices).
    let write_one = |ti: usize, mut v: Vec<(u64, Vec<u8>)>| -> Result<()> {
        let (d, dev) = &targets[ti];
        v.sort_unstable_by_key(|(s, _)| *s);
        // Runs on a replacement never overlap: each slot is rebuilt once.
        assert!(
            v.windows(2).all(|w| w[0].0 < w[1].0),
            "rebuild writes a slot of device {d} twice"
        );
        let mut i = 0;
        while i < v.len() {
            let mut j = i + 1;
            while j < v.len() && v[j].0 == v[j - 1].0 + 1 && j - i < 256 {
                j += 1;
            }
            if j == i + 1 {
                core.devs
                    .write_to(*d, dev.as_ref(), &v[i].1, g.off(v[i].0))?;
            } else {
                let mut buf = Vec::with_capacity((j - i) * g.chunk as usize);
                for (_, b) in &v[i..j] {
                    buf.extend_from_slice(b);
                }
                core.devs.write_to(*d, dev.as_ref(), &buf, g.off(v[i].0))?;
            }
            i = j;
        }
        Ok(())
    };
    // (replacement index, [(slot, chunk)]) for every replacement with chunks to write.
    type SlotChunks = Vec<(u64, Vec<u8>)>;
    let busy: Vec<(usize, SlotChunks)> = out
        .into_iter()
        .enumerate()
        .filter(|(_, v)| !v.is_empty())
        .collect();
    if busy.len() <= 1 {
        for (ti, v) in busy {
            write_one(ti, v)?;
        }
    } else {
        let write_one = &write_one;
        std::thread::scope(|sc| -> Result<()> {
            let hs: Vec<_> = busy
                .into_iter()
                .map(|(ti, v)| sc.spawn(move || write_one(ti, v)))
                .collect();
            for h in hs {
                h.join()
                    .map_err(|_| ArrayError::Admin("rebuild writer panicked".into()))??;
            }
            Ok(())
        })?;
    }
    Ok(())
}

/// Rebuild `targets` (device index, replacement) with batches of `batch` stripes; `commit` runs the
/// parity commit that must precede the rebuild (the caller holds the admin lock).
pub(crate) fn rebuild(
    core: &Core,
    scheme: &dyn UpdateScheme,
    targets: Vec<(usize, Arc<dyn BlockDevice>)>,
    batch: usize,
    prefetch: bool,
    commit: &dyn Fn() -> Result<CommitReport>,
) -> Result<RebuildReport> {
    let g = core.geo.clone();
    if targets.is_empty() {
        return Err(ArrayError::Admin("nothing to rebuild".into()));
    }
    for (i, dev) in &targets {
        if *i >= core.devs.len() {
            return Err(ArrayError::Admin(format!("no device {i}")));
        }
        let need = if *i < g.n {
            g.off(g.slots)
        } else {
            g.off(g.log_slots)
        };
        if dev.capacity() < need {
            return Err(ArrayError::Admin(format!(
                "replacement {} has {} bytes, device {i} needs {need}",
                dev.name(),
                dev.capacity()
            )));
        }
    }
    let mut idx: Vec<usize> = targets.iter().map(|(i, _)| *i).collect();
    idx.sort_unstable();
    idx.dedup();
    if idx.len() != targets.len() {
        return Err(ArrayError::Admin("a device is listed twice".into()));
    }
    for &i in &idx {
        core.devs.mark_failed(i);
    }
    core.check_tolerance()?;
    core.persist()?;
    let commit = if scheme.has_pending(core) {
        Some(commit()?)
    } else {
        None
    };
    let t = Instant::now();
    let mains: Vec<(usize, Arc<dyn BlockDevice>)> =
        targets.iter().filter(|(i, _)| *i < g.n).cloned().collect();
    let main_idx: Vec<usize> = mains.iter().map(|(i, _)| *i).collect();
    let mut chunks = 0u64;
    let mut nstripes = 0u64;
    if !mains.is_empty() {
        let stripes = scheme.written_stripes(core);
        nstripes = stripes.len() as u64;
        if prefetch {
            std::thread::scope(|sc| -> Result<()> {
                let (tx, rx) = sync_channel::<Result<Vec<Item>>>(4);
                let main_idx = &main_idx;
                let stripes = &stripes;
                sc.spawn(move || {
                    for b in stripes.chunks(batch) {
                        let r = scan_and_read(core, scheme, b, main_idx);
                        let stop = r.is_err();
                        if tx.send(r).is_err() || stop {
                            return;
                        }
                    }
                });
                for r in rx {
                    decode_and_write(core, r?, &mains, &mut chunks)?;
                }
                Ok(())
            })?;
        } else {
            for b in stripes.chunks(batch) {
                let items = scan_and_read(core, scheme, b, &main_idx)?;
                decode_and_write(core, items, &mains, &mut chunks)?;
            }
        }
        for (_, dev) in &mains {
            dev.flush()?;
        }
    }
    let seconds = t.elapsed().as_secs_f64();
    // Install the replacements.
    let uuid = lock_sb(core).uuid;
    for (i, dev) in &targets {
        dev.write_at(&encode_label(uuid, *i as u16), 0)?;
        dev.flush()?;
        core.devs.replace(*i, Arc::clone(dev));
        core.meta().record(Rec::DeviceReplaced { dev: *i as u16 });
    }
    core.checkpoint()?;
    let bytes = chunks * g.chunk;
    Ok(RebuildReport {
        devices: idx,
        stripes: nstripes,
        chunks,
        bytes,
        seconds,
        mb_per_s: if seconds > 0.0 {
            bytes as f64 / seconds / 1e6
        } else {
            0.0
        },
        batch,
        prefetch,
        commit,
    })
}
