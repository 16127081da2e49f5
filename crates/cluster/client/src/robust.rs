//! Robust files: RobuSTore's access on the cluster (RobuSTore thesis ch. 4–5; docs/robustore.md
//! "On the cluster"). A robust file is split into objects of at most `object_blocks` source blocks;
//! each object is coded by a rateless code (`ecstack_codes::BlockCode`: LT or RaptorQ) into coded
//! blocks named by ids in an id space N′ fixed at creation, larger than the N = ceil((1 + D)·K)
//! blocks stored.
//!
//! - **Write until N** (§4.1.2, §5.3): every chosen OSD has a stream with a few blocks in flight
//!   and always gets the next unused id, so fast OSDs end up holding more blocks; once N blocks are
//!   durable and a dry run on their ids says they decode, every stream is dropped (blocks sent but
//!   not acknowledged are deleted again). A refused stream (admission control) goes to another OSD.
//! - **Read all, then cancel** (§4.3.3, §5.3.3): one `GetBlocks` per holder at once; blocks are
//!   decoded as they arrive and every stream is dropped once the object decodes, which cancels the
//!   OSDs' queued reads.
//! - **Disk selection and redundancy** (§5.3.1–5.3.2): OSDs are picked by measured bandwidth, load
//!   and free space (heartbeat figures the MDS keeps); D defaults to (1 + ε)·max_i(B_ir / B_iw) − 1.
//! - **Updates** (§4.3.4): the object is read, changed, and only the coded blocks whose source
//!   blocks changed are written again at the object's next version (all of an object under
//!   RaptorQ); the MDS records the new blocks and has the old ones deleted.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;
use ecstack_codes::{BlockCode, BlockCodeKind, BlockDecoder, BlockEncoder};
use ecstack_mds_proto::{
    BlockPlacement, FileInfo, OsdInfo, OsdState, RobustBlockKey, RobustCode, RobustInfo,
    RobustObject, RobustParams, RobustUpdate,
};
use ecstack_osd_proto::{BlockKey, OsdCallError, StreamPriority, MAX_BLOCK_BYTES};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

use crate::client::Client;
use crate::error::ClientError;

/// How long a robust read keeps asking holders that refused its stream (admission control) while
/// the blocks of the others do not decode.
pub const REFUSED_READ_PATIENCE: std::time::Duration = std::time::Duration::from_secs(10);

/// What a `GetBlocks` stream of a read hands the decoding loop.
enum StreamItem {
    Block((BlockKey, Bytes)),
    /// The stream failed; `true`: the OSD refused it (admission control).
    Failed(bool, ClientError),
}

/// Default bytes per coded block (RobuSTore's 1 MB blocks).
pub const DEFAULT_BLOCK_BYTES: u32 = 1 << 20;
/// Default source blocks per object: LT keeps the seed's 1 GB objects (K = 1024: its overhead
/// falls with K); RaptorQ objects stay at 256 MiB so an update re-encodes a bounded part.
pub const DEFAULT_LT_OBJECT_BLOCKS: u32 = 1024;
pub const DEFAULT_RAPTORQ_OBJECT_BLOCKS: u32 = 256;
/// ε of the default redundancy D = (1 + ε)·max_i(B_ir / B_iw) − 1 (§5.3.2): the code's reception
/// overhead, (1 + ε)·K blocks decode. LT at C = 1, δ = 0.5 needs about a quarter more than K at the
/// object sizes used here; RaptorQ decodes from K blocks almost always.
pub fn reception_epsilon(code: RobustCode) -> f64 {
    match code {
        RobustCode::Lt => 0.25,
        RobustCode::RaptorQ => 0.01,
    }
}
/// The largest per-disk variation B_ir / B_iw the default takes: the seed calls the formula "a
/// strict boundary" and notes a very large D is not needed in practice; an OSD whose reads come
/// from its page cache reports reads far above writes without being a slow writer.
pub const MAX_DEFAULT_VARIATION: f64 = 4.0;
/// The smallest default D: a little room for an OSD slower at read time than at write time.
pub const MIN_DEFAULT_REDUNDANCY: f64 = 0.2;
/// Blocks each write stream keeps in flight.
pub const BLOCKS_IN_FLIGHT: usize = 2;
/// How long a stopped write stream waits for the OSD to end it (its blocks in flight stored or
/// dropped) before the put deletes what it did not acknowledge anyway.
const WIND_DOWN: std::time::Duration = std::time::Duration::from_secs(10);
/// Disks a robust put uses by default (at most; fewer when fewer are up).
pub const DEFAULT_DISKS: usize = 8;

/// How a robust put codes and places a file.
#[derive(Debug, Clone)]
pub struct RobustOptions {
    pub code: RobustCode,
    pub block_bytes: u32,
    /// D; `None`: the default from the chosen OSDs' measured rates.
    pub redundancy: Option<f64>,
    /// H, the OSDs written to; `None`: [`DEFAULT_DISKS`] or all that are up.
    pub disks: Option<usize>,
    /// These OSDs (by id), in this order of preference, instead of choosing by bandwidth, load
    /// and space: the first H are written to, the rest are spares for a refused or failed stream.
    pub osds: Option<Vec<u32>>,
    /// Source blocks per object; `None`: [`DEFAULT_LT_OBJECT_BLOCKS`] / [`DEFAULT_RAPTORQ_OBJECT_BLOCKS`].
    pub object_blocks: Option<u32>,
    /// LT's robust soliton C and δ (the simulator's C = 1, δ = 0.5).
    pub lt_c: f64,
    pub lt_delta: f64,
    pub priority: StreamPriority,
}

impl Default for RobustOptions {
    fn default() -> Self {
        RobustOptions {
            code: RobustCode::RaptorQ,
            block_bytes: DEFAULT_BLOCK_BYTES,
            redundancy: None,
            disks: None,
            osds: None,
            object_blocks: None,
            lt_c: 1.0,
            lt_delta: 0.5,
            priority: StreamPriority::Normal,
        }
    }
}

/// What a robust put did.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct RobustPutReport {
    pub bytes: u64,
    pub objects: usize,
    pub redundancy: f64,
    /// Blocks committed (durable and in the block map).
    pub blocks: u64,
    /// Blocks sent but not committed (cancelled in flight, or on an OSD that failed).
    pub blocks_wasted: u64,
    /// Streams refused by an OSD's admission control (each moved to another OSD).
    pub refused: u64,
    /// Committed blocks per OSD id.
    pub per_osd: BTreeMap<u32, u64>,
    pub seconds: f64,
}

/// What a robust get did.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct RobustGetReport {
    pub bytes: u64,
    /// Source blocks of the objects read.
    pub k: u64,
    /// Blocks taken by the decoders until each object decoded.
    pub used: u64,
    /// Blocks that arrived (from every stream, before its cancel took effect).
    pub received: u64,
    /// Blocks refused as not in the block map (an old version, a block not committed).
    pub stale: u64,
    /// Streams that failed or were refused (their OSDs' blocks not read).
    pub failed_streams: u64,
    pub seconds: f64,
}

impl RobustGetReport {
    /// Blocks used over K, minus one (RobuSTore's reception overhead).
    pub fn reception_overhead(&self) -> f64 {
        self.used as f64 / self.k.max(1) as f64 - 1.0
    }
    /// Blocks read over K, minus one (I/O overhead: what arrived before the cancels took effect).
    pub fn io_overhead(&self) -> f64 {
        self.received as f64 / self.k.max(1) as f64 - 1.0
    }
}

fn local(msg: String) -> ClientError {
    ClientError::Local(msg)
}

/// The code of a robust file's object.
pub fn object_code(params: &RobustParams, o: &RobustObject) -> Result<BlockCode, ClientError> {
    let kind = match params.code {
        RobustCode::Lt => BlockCodeKind::Lt {
            c: params.lt_c,
            delta: params.lt_delta,
        },
        RobustCode::RaptorQ => BlockCodeKind::RaptorQ,
    };
    BlockCode::new(
        kind,
        o.k as usize,
        params.block_bytes as usize,
        o.id_space as usize,
        o.seed,
    )
    .map_err(|e| local(format!("object #{}: {e}", o.index)))
}

/// D = (1 + ε)·max_i(B_ir / B_iw) − 1 over `osds` (ε: [`reception_epsilon`]; an OSD without
/// figures counts as 1; the variation at most [`MAX_DEFAULT_VARIATION`]), at least
/// [`MIN_DEFAULT_REDUNDANCY`].
pub fn default_redundancy(code: RobustCode, osds: &[OsdInfo]) -> f64 {
    let ratio = osds
        .iter()
        .map(|o| {
            let (r, w) = (o.load.read_bytes_per_s, o.load.write_bytes_per_s);
            if r == 0 || w == 0 {
                1.0
            } else {
                r as f64 / w as f64
            }
        })
        .fold(1.0f64, f64::max)
        .min(MAX_DEFAULT_VARIATION);
    ((1.0 + reception_epsilon(code)) * ratio - 1.0).max(MIN_DEFAULT_REDUNDANCY)
}

/// The H OSDs a put writes to: UP, with room for their share, best first by measured bandwidth
/// over (1 + queue depth). Fewer than `h` up is one line naming both.
pub fn choose_osds(osds: &[OsdInfo], h: usize, share: u64) -> Result<Vec<OsdInfo>, ClientError> {
    let mut up: Vec<&OsdInfo> = osds
        .iter()
        .filter(|o| o.state == OsdState::Up)
        .filter(|o| o.capacity_bytes == 0 || o.capacity_bytes.saturating_sub(o.used_bytes) >= share)
        .collect();
    if up.len() < h {
        return Err(local(format!(
            "a robust put on {h} disks needs {h} OSDs up with {share} bytes free; {} are",
            up.len()
        )));
    }
    let score = |o: &OsdInfo| {
        let bw = o.load.write_bytes_per_s.min(o.load.read_bytes_per_s.max(1)) as f64;
        bw / (1.0 + f64::from(o.load.queue_depth))
    };
    up.sort_by(|a, b| score(b).total_cmp(&score(a)).then(a.osd_id.cmp(&b.osd_id)));
    Ok(up.into_iter().take(h).cloned().collect())
}

/// The write of one object: ids handed out, blocks acknowledged per OSD.
struct WriteState {
    next_id: u32,
    id_space: u32,
    /// Blocks to reach before the dry run (N, raised while the acknowledged ids do not decode).
    target: usize,
    acked: Vec<(u32, u32)>,
    /// (id, osd) sent and not acknowledged.
    pending: HashSet<(u32, u32)>,
    /// Ids whose blocks are lost with a failed stream (never handed out again).
    lost: u64,
}

impl WriteState {
    fn take_id(&mut self) -> Option<u32> {
        (self.next_id < self.id_space).then(|| {
            self.next_id += 1;
            self.next_id - 1
        })
    }
}

enum StreamEnd {
    /// Stopped by the writer (enough blocks) or all sent.
    Done,
    /// Admission refused at open: try another OSD.
    Refused,
    Failed(ClientError),
}

impl Client {
    /// Stores `data` at `path` as a robust file (see the module's documentation). Replaces what
    /// was at `path` at the commit.
    pub async fn put_robust(
        &self,
        path: &str,
        data: Bytes,
        opts: &RobustOptions,
    ) -> Result<RobustPutReport, ClientError> {
        let start = Instant::now();
        if opts.block_bytes == 0 || opts.block_bytes > MAX_BLOCK_BYTES {
            return Err(local(format!(
                "block size {} is refused: it must be 1..={MAX_BLOCK_BYTES} bytes",
                opts.block_bytes
            )));
        }
        if opts.code == RobustCode::RaptorQ && opts.block_bytes % 32 != 0 {
            return Err(local(format!(
                "block size {} is refused for RaptorQ: a block is 32 symbols, so it must be a multiple of 32",
                opts.block_bytes
            )));
        }
        if let Some(d) = opts.redundancy {
            if !(d.is_finite() && d > 0.0) {
                return Err(local(format!(
                    "redundancy D = {d} is refused: it must be above 0 (N = (1 + D)·K blocks)"
                )));
            }
        }
        let status = self.status().await?;
        let candidates: Vec<OsdInfo> = match &opts.osds {
            Some(ids) => {
                let mut v = Vec::new();
                for id in ids {
                    let o = status
                        .osds
                        .iter()
                        .find(|o| o.osd_id == *id && o.state == OsdState::Up)
                        .ok_or_else(|| local(format!("OSD {id} is not up")))?;
                    v.push(o.clone());
                }
                v
            }
            None => status.osds.clone(),
        };
        let up = candidates
            .iter()
            .filter(|o| o.state == OsdState::Up)
            .count();
        let h = match (opts.disks, &opts.osds) {
            (Some(0), _) => return Err(local("--disks must be at least 1".into())),
            (Some(h), _) => h,
            (None, Some(ids)) => ids.len(),
            (None, None) => up.min(DEFAULT_DISKS),
        };
        let bs = u64::from(opts.block_bytes);
        let share = (data.len() as u64).div_ceil(bs) * bs * 2 / h.max(1) as u64;
        let chosen = match &opts.osds {
            Some(_) if candidates.len() < h => {
                return Err(local(format!(
                    "a robust put on {h} disks was given {} OSDs",
                    candidates.len()
                )))
            }
            Some(_) => candidates[..h].to_vec(),
            None => choose_osds(&candidates, h, share)?,
        };
        let d = opts
            .redundancy
            .unwrap_or_else(|| default_redundancy(opts.code, &chosen));
        let spares: Vec<OsdInfo> = candidates
            .iter()
            .filter(|o| o.state == OsdState::Up && !chosen.iter().any(|c| c.osd_id == o.osd_id))
            .cloned()
            .collect();
        let object_blocks = opts.object_blocks.unwrap_or(match opts.code {
            RobustCode::Lt => DEFAULT_LT_OBJECT_BLOCKS,
            RobustCode::RaptorQ => DEFAULT_RAPTORQ_OBJECT_BLOCKS,
        });
        let params = RobustParams {
            code: opts.code,
            block_bytes: opts.block_bytes,
            redundancy: d,
            object_blocks,
            lt_c: if opts.code == RobustCode::Lt {
                opts.lt_c
            } else {
                0.0
            },
            lt_delta: if opts.code == RobustCode::Lt {
                opts.lt_delta
            } else {
                0.0
            },
        };
        params.check().map_err(local)?;
        // Objects and their codes (an LT graph is generated and checked here: the seed is stored).
        let object_bytes = u64::from(object_blocks) * bs;
        let mut objects = Vec::new();
        let mut codes = Vec::new();
        let mut at = 0u64;
        while at < data.len() as u64 {
            let length = object_bytes.min(data.len() as u64 - at);
            let k = length.div_ceil(bs) as u32;
            let n = params.n_for(k);
            let id_space = n.saturating_mul(2).max(n + 2 * h as u32);
            let mut o = RobustObject {
                object_id: 0,
                index: objects.len() as u32,
                length,
                k,
                n,
                id_space,
                seed: 1,
                version: 1,
                blocks: Vec::new(),
            };
            let p = params;
            let oc = o.clone();
            let code = tokio::task::spawn_blocking(move || object_code(&p, &oc))
                .await
                .map_err(|e| local(format!("coding task failed: {e}")))??;
            o.seed = code.seed();
            objects.push(o);
            codes.push(code);
            at += length;
        }
        let what = format!("put {path}");
        let size = data.len() as u64;
        let (file_id, ids) = self
            .meta(&what, |m| {
                let objects = objects.clone();
                async move { m.create_robust_file(path, params, size, &objects).await }
            })
            .await?;
        let mut report = RobustPutReport {
            bytes: data.len() as u64,
            objects: objects.len(),
            redundancy: d,
            ..RobustPutReport::default()
        };
        let mut spares = spares;
        for ((o, code), id) in objects.iter_mut().zip(&codes).zip(ids) {
            o.object_id = id;
            let part = data.slice(
                (u64::from(o.index) * object_bytes) as usize
                    ..(u64::from(o.index) * object_bytes + o.length) as usize,
            );
            let blocks = self
                .write_until_n(
                    o,
                    code,
                    part,
                    1,
                    &chosen,
                    &mut spares,
                    opts.priority,
                    &mut report,
                )
                .await?;
            for b in &blocks {
                *report.per_osd.entry(b.osd_id).or_default() += 1;
            }
            report.blocks += blocks.len() as u64;
            o.blocks = blocks;
        }
        self.meta(&what, |m| {
            let objects = objects.clone();
            async move { m.commit_robust_file(file_id, &objects).await }
        })
        .await?;
        report.seconds = start.elapsed().as_secs_f64();
        Ok(report)
    }

    /// Writes blocks of object `o` at `version` to `osds` until N are durable and decode (module
    /// documentation); returns the acknowledged blocks. A refused or failed OSD is replaced by a
    /// spare when one is left.
    #[allow(clippy::too_many_arguments)]
    async fn write_until_n(
        &self,
        o: &RobustObject,
        code: &BlockCode,
        data: Bytes,
        version: u64,
        osds: &[OsdInfo],
        spares: &mut Vec<OsdInfo>,
        priority: StreamPriority,
        report: &mut RobustPutReport,
    ) -> Result<Vec<BlockPlacement>, ClientError> {
        let c = code.clone();
        let encoder = tokio::task::spawn_blocking(move || c.encoder(&data))
            .await
            .map_err(|e| local(format!("coding task failed: {e}")))?
            .map_err(|e| local(format!("object #{}: {e}", o.index)))?;
        let encoder = Arc::new(encoder);
        let state = Arc::new(Mutex::new(WriteState {
            next_id: 0,
            id_space: o.id_space,
            target: o.n as usize,
            acked: Vec::new(),
            pending: HashSet::new(),
            lost: 0,
        }));
        let (stop_tx, stop_rx) = watch::channel(false);
        let stop_tx = Arc::new(stop_tx);
        let expected = u64::from(o.n).div_ceil(osds.len().max(1) as u64)
            * u64::from(code.block_bytes() as u32);
        let mut streams: JoinSet<(OsdInfo, StreamEnd)> = JoinSet::new();
        let spawn = |streams: &mut JoinSet<(OsdInfo, StreamEnd)>, osd: OsdInfo| {
            let this = self.clone();
            let (encoder, state, stop_tx, stop_rx) = (
                encoder.clone(),
                state.clone(),
                stop_tx.clone(),
                stop_rx.clone(),
            );
            let code = code.clone();
            let object_id = o.object_id;
            streams.spawn(async move {
                let end = this
                    .write_stream(
                        &osd, object_id, &code, version, encoder, state, stop_tx, stop_rx,
                        priority, expected,
                    )
                    .await;
                (osd, end)
            });
        };
        for osd in osds {
            spawn(&mut streams, osd.clone());
        }
        let mut last_error: Option<ClientError> = None;
        while let Some(done) = streams.join_next().await {
            let (osd, end) = done.map_err(|e| local(format!("write stream task failed: {e}")))?;
            match end {
                StreamEnd::Done => {}
                StreamEnd::Refused | StreamEnd::Failed(_) => {
                    if let StreamEnd::Failed(e) = end {
                        last_error = Some(e);
                    } else {
                        report.refused += 1;
                    }
                    {
                        let mut s = state.lock().expect("write state poisoned");
                        let lost: Vec<(u32, u32)> = s
                            .pending
                            .iter()
                            .copied()
                            .filter(|&(_, on)| on == osd.osd_id)
                            .collect();
                        for p in &lost {
                            s.pending.remove(p);
                        }
                        s.lost += lost.len() as u64;
                    }
                    if !*stop_rx.borrow() {
                        if let Some(spare) = (!spares.is_empty()).then(|| spares.remove(0)) {
                            spawn(&mut streams, spare);
                        }
                    }
                }
            }
        }
        let (acked, pending, lost, target) = {
            let s = state.lock().expect("write state poisoned");
            (s.acked.clone(), s.pending.clone(), s.lost, s.target)
        };
        let ids: Vec<u32> = acked.iter().map(|&(id, _)| id).collect();
        report.blocks_wasted += pending.len() as u64 + lost;
        if ids.len() < target || !code.decodable(&ids) {
            return Err(last_error.unwrap_or_else(|| {
                local(format!(
                    "object #{}: only {} blocks durable ({target} needed), and no OSD left to write to",
                    o.index,
                    ids.len(),
                ))
            }));
        }
        // Blocks sent but not acknowledged may still have been stored: drop them (best effort;
        // they are not in the block map, so no reader takes them).
        let mut orphans: HashMap<u32, Vec<BlockKey>> = HashMap::new();
        for &(id, osd) in &pending {
            orphans
                .entry(osd)
                .or_default()
                .push(BlockKey { id, version });
        }
        // Awaited, all OSDs at once: a deletion is one small record appended to the object's block
        // file and flushed (the OSD compacts the file later, off its reads' path), so the put
        // returns with no unacknowledged block of it left behind on a reachable OSD.
        let mut deletions = tokio::task::JoinSet::new();
        for (osd_id, keys) in orphans {
            if let Some(info) = osds
                .iter()
                .chain(spares.iter())
                .find(|i| i.osd_id == osd_id)
            {
                if let Ok(c) = self.osd_client(&info.addr) {
                    let object = o.object_id;
                    deletions.spawn(async move {
                        let _ = c.for_osd(osd_id).delete_blocks(object, &keys).await;
                    });
                }
            }
        }
        while deletions.join_next().await.is_some() {}
        let addr_of = |id: u32| {
            osds.iter()
                .chain(spares.iter())
                .find(|i| i.osd_id == id)
                .map(|i| i.addr.clone())
                .unwrap_or_default()
        };
        let mut blocks: Vec<BlockPlacement> = acked
            .into_iter()
            .map(|(id, osd_id)| BlockPlacement {
                key: RobustBlockKey { id, version },
                osd_id,
                addr: addr_of(osd_id),
                up: true,
            })
            .collect();
        blocks.sort_by_key(|b| b.key.id);
        Ok(blocks)
    }

    /// One OSD's write stream of [`Client::write_until_n`].
    #[allow(clippy::too_many_arguments)]
    async fn write_stream(
        &self,
        osd: &OsdInfo,
        object_id: u64,
        code: &BlockCode,
        version: u64,
        encoder: Arc<BlockEncoder>,
        state: Arc<Mutex<WriteState>>,
        stop_tx: Arc<watch::Sender<bool>>,
        mut stop: watch::Receiver<bool>,
        priority: StreamPriority,
        expected: u64,
    ) -> StreamEnd {
        let client = match self.osd_client(&osd.addr) {
            Ok(c) => c.for_osd(osd.osd_id),
            Err(e) => return StreamEnd::Failed(e),
        };
        let bb = code.block_bytes() as u32;
        let mut w = match client.put_blocks(object_id, bb, priority, expected).await {
            Ok(w) => w,
            Err(OsdCallError::Refused { .. }) => return StreamEnd::Refused,
            Err(e) => return StreamEnd::Failed(e.into()),
        };
        let mut in_flight = 0usize;
        loop {
            while in_flight < BLOCKS_IN_FLIGHT && !*stop.borrow() {
                let Some(id) = state.lock().expect("write state poisoned").take_id() else {
                    break;
                };
                let enc = encoder.clone();
                let block = match tokio::task::spawn_blocking(move || enc.block(id)).await {
                    Ok(Ok(b)) => b,
                    Ok(Err(e)) => return StreamEnd::Failed(local(format!("encoding: {e}"))),
                    Err(e) => return StreamEnd::Failed(local(format!("encoding task: {e}"))),
                };
                state
                    .lock()
                    .expect("write state poisoned")
                    .pending
                    .insert((id, osd.osd_id));
                if let Err(e) = w.send(BlockKey { id, version }, Bytes::from(block)).await {
                    return match e {
                        OsdCallError::Refused { .. } => StreamEnd::Refused,
                        e => StreamEnd::Failed(e.into()),
                    };
                }
                in_flight += 1;
            }
            if in_flight == 0 {
                return StreamEnd::Done;
            }
            if *stop.borrow() {
                return wind_down(&mut w, in_flight).await;
            }
            tokio::select! {
                _ = stop.changed() => return wind_down(&mut w, in_flight).await,
                ack = w.ack() => match ack {
                    Ok(Some(key)) => {
                        in_flight -= 1;
                        let mut s = state.lock().expect("write state poisoned");
                        s.pending.remove(&(key.id, osd.osd_id));
                        s.acked.push((key.id, osd.osd_id));
                        if s.acked.len() >= s.target {
                            let ids: Vec<u32> = s.acked.iter().map(|&(id, _)| id).collect();
                            if code.decodable(&ids) {
                                let _ = stop_tx.send(true);
                            } else {
                                // Write a few more, then try again.
                                s.target += (s.target / 50).max(1);
                            }
                        }
                    }
                    Ok(None) => return StreamEnd::Done,
                    Err(OsdCallError::Refused { .. }) => return StreamEnd::Refused,
                    Err(e) => return StreamEnd::Failed(e.into()),
                },
            }
        }
    }

    /// The bytes of robust file `info` (read all, then cancel).
    pub async fn get_robust(
        &self,
        info: &FileInfo,
        priority: StreamPriority,
    ) -> Result<(Bytes, RobustGetReport), ClientError> {
        let start = Instant::now();
        let r = info
            .robust
            .as_ref()
            .ok_or_else(|| local(format!("{} is not a robust file", info.path)))?;
        let mut report = RobustGetReport::default();
        let mut out = Vec::with_capacity(info.size as usize);
        for o in &r.objects {
            let bytes = self
                .read_object(&info.path, r, o, priority, &mut report)
                .await?;
            out.extend_from_slice(&bytes[..o.length as usize]);
        }
        report.bytes = out.len() as u64;
        report.seconds = start.elapsed().as_secs_f64();
        Ok((Bytes::from(out), report))
    }

    /// One object: a `GetBlocks` stream per holder, blocks decoded as they arrive, every stream
    /// dropped once it decodes. Returns K × block bytes.
    async fn read_object(
        &self,
        path: &str,
        r: &RobustInfo,
        o: &RobustObject,
        priority: StreamPriority,
        report: &mut RobustGetReport,
    ) -> Result<Vec<u8>, ClientError> {
        let (p, oc) = (r.params, o.clone());
        let code = tokio::task::spawn_blocking(move || object_code(&p, &oc))
            .await
            .map_err(|e| local(format!("coding task failed: {e}")))??;
        // Which block of each id the map names, and where.
        let wanted: HashMap<u32, (u64, u32)> = o
            .blocks
            .iter()
            .map(|b| (b.key.id, (b.key.version, b.osd_id)))
            .collect();
        let mut holders: BTreeMap<u32, String> = BTreeMap::new();
        for b in &o.blocks {
            if b.up {
                holders.insert(b.osd_id, b.addr.clone());
            }
        }
        let decoder: Arc<Mutex<Option<BlockDecoder>>> = Arc::new(Mutex::new(Some(code.decoder())));
        let mut taken: HashSet<u32> = HashSet::new();
        let mut complete = false;
        // The last error of each holder whose stream failed.
        let mut errors: BTreeMap<u32, String> = BTreeMap::new();
        // Rounds: every holder at once; then, while the blocks received do not decode, the
        // holders whose admission control refused the stream (busy with other streams, it may
        // have room a moment later: a reader has no other copy of their blocks) again, after a
        // growing wait, within REFUSED_READ_PATIENCE.
        let mut round: Vec<(u32, String)> = holders.into_iter().collect();
        let mut wait = std::time::Duration::from_millis(50);
        let deadline = Instant::now() + REFUSED_READ_PATIENCE;
        loop {
            let (tx, mut rx) = mpsc::channel::<(u32, String, StreamItem)>(64);
            let mut streams = JoinSet::new();
            for (osd_id, addr) in round.drain(..) {
                let (tx, this) = (tx.clone(), self.clone());
                let (object_id, version) = (o.object_id, o.version);
                streams.spawn(async move {
                    let failed = |e: OsdCallError| {
                        let refused = matches!(e, OsdCallError::Refused { .. });
                        StreamItem::Failed(refused, e.into())
                    };
                    let reader = match this.osd_client(&addr) {
                        Ok(c) => {
                            c.for_osd(osd_id)
                                .get_blocks(object_id, version, priority)
                                .await
                        }
                        Err(e) => {
                            let _ = tx.send((osd_id, addr, StreamItem::Failed(false, e))).await;
                            return;
                        }
                    };
                    let mut reader = match reader {
                        Ok(r) => r,
                        Err(e) => {
                            let _ = tx.send((osd_id, addr, failed(e))).await;
                            return;
                        }
                    };
                    loop {
                        match reader.next().await {
                            Ok(Some(b)) => {
                                if tx
                                    .send((osd_id, addr.clone(), StreamItem::Block(b)))
                                    .await
                                    .is_err()
                                {
                                    return; // the object decoded: dropping the reader cancels
                                }
                            }
                            Ok(None) => return,
                            Err(e) => {
                                let _ = tx.send((osd_id, addr, failed(e))).await;
                                return;
                            }
                        }
                    }
                });
            }
            drop(tx);
            let mut refused = Vec::new();
            while let Some((osd_id, addr, item)) = rx.recv().await {
                match item {
                    StreamItem::Block((key, data)) => {
                        report.received += 1;
                        let ok = wanted.get(&key.id) == Some(&(key.version, osd_id));
                        if !ok || taken.contains(&key.id) {
                            report.stale += u64::from(!ok);
                            continue;
                        }
                        taken.insert(key.id);
                        report.used += 1;
                        let dec = decoder.clone();
                        let done = tokio::task::spawn_blocking(move || {
                            let mut g = dec.lock().expect("decoder poisoned");
                            g.as_mut()
                                .expect("decoder present until finished")
                                .push(key.id, data.to_vec())
                        })
                        .await
                        .map_err(|e| local(format!("decoding task failed: {e}")))?
                        .map_err(|e| local(format!("{path}: object #{}: {e}", o.index)))?;
                        if done {
                            complete = true;
                            break;
                        }
                    }
                    StreamItem::Failed(was_refused, e) => {
                        report.failed_streams += 1;
                        if was_refused {
                            refused.push((osd_id, addr));
                        }
                        errors.insert(osd_id, e.to_string());
                    }
                }
            }
            // Cancel every stream still running (their readers are dropped with the tasks).
            streams.abort_all();
            drop(rx);
            if complete || refused.is_empty() || Instant::now() + wait > deadline {
                break;
            }
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(std::time::Duration::from_secs(2));
            round = refused;
        }
        report.k += u64::from(o.k);
        if !complete {
            return Err(local(format!(
                "{path}: object #{} did not decode from the {} blocks its OSDs returned (K = {}){}",
                o.index,
                taken.len(),
                o.k,
                if errors.is_empty() {
                    String::new()
                } else {
                    let errors: Vec<String> = errors.into_values().collect();
                    format!("; {}", errors.join("; "))
                }
            )));
        }
        let dec = decoder
            .lock()
            .expect("decoder poisoned")
            .take()
            .expect("decoder present");
        tokio::task::spawn_blocking(move || dec.finish())
            .await
            .map_err(|e| local(format!("decoding task failed: {e}")))?
            .map_err(|e| local(format!("{path}: object #{}: {e}", o.index)))
    }

    /// Writes `data` at `offset` of robust file `path` (§4.3.4): each object the range touches is
    /// read, changed, and its changed coded blocks written at the object's next version (LT: only
    /// those whose source blocks changed; RaptorQ: the object's N again), then recorded at the MDS.
    pub async fn update_robust(
        &self,
        path: &str,
        offset: u64,
        data: &[u8],
        priority: StreamPriority,
    ) -> Result<u64, ClientError> {
        let info = self.stat(path).await?;
        let r = info
            .robust
            .clone()
            .ok_or_else(|| local(format!("{path} is not a robust file")))?;
        let end = offset.saturating_add(data.len() as u64);
        if end > info.size {
            return Err(ClientError::Range {
                path: path.to_owned(),
                offset,
                end,
                size: info.size,
            });
        }
        let object_bytes = u64::from(r.params.object_blocks) * u64::from(r.params.block_bytes);
        let status = self.status().await?;
        let mut rewritten = 0u64;
        for o in &r.objects {
            let o_start = u64::from(o.index) * object_bytes;
            let (lo, hi) = (offset.max(o_start), end.min(o_start + o.length));
            if lo >= hi {
                continue;
            }
            let mut scratch = RobustGetReport::default();
            let mut bytes = self
                .read_object(path, &r, o, priority, &mut scratch)
                .await?;
            bytes.truncate(o.length as usize);
            bytes[(lo - o_start) as usize..(hi - o_start) as usize]
                .copy_from_slice(&data[(lo - offset) as usize..(hi - offset) as usize]);
            let (p, oc) = (r.params, o.clone());
            let code = tokio::task::spawn_blocking(move || object_code(&p, &oc))
                .await
                .map_err(|e| local(format!("coding task failed: {e}")))??;
            let version = o.version + 1;
            let holders: Vec<OsdInfo> = {
                let ids: HashSet<u32> = o.blocks.iter().map(|b| b.osd_id).collect();
                status
                    .osds
                    .iter()
                    .filter(|i| ids.contains(&i.osd_id) && i.state == OsdState::Up)
                    .cloned()
                    .collect()
            };
            let (added, dropped) = match r.params.code {
                RobustCode::Lt => {
                    let ids: Vec<u32> = o.blocks.iter().map(|b| b.key.id).collect();
                    let sources = code.source_blocks_of((lo - o_start)..(hi - o_start));
                    let changed = code.coded_using(sources, &ids);
                    let enc = {
                        let (c, b) = (code.clone(), Bytes::from(bytes));
                        tokio::task::spawn_blocking(move || c.encoder(&b))
                            .await
                            .map_err(|e| local(format!("coding task failed: {e}")))?
                            .map_err(|e| local(format!("object #{}: {e}", o.index)))?
                    };
                    let mut added = Vec::new();
                    let mut by_osd: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
                    for b in &o.blocks {
                        if changed.contains(&b.key.id) {
                            by_osd.entry(b.osd_id).or_default().push(b.key.id);
                        }
                    }
                    for (osd_id, ids) in by_osd {
                        let info = holders.iter().find(|h| h.osd_id == osd_id).ok_or_else(|| {
                            local(format!(
                                "{path}: object #{}: OSD {osd_id} holds blocks to rewrite and is not up",
                                o.index
                            ))
                        })?;
                        let c = self.osd_client(&info.addr)?.for_osd(osd_id);
                        let mut w = c
                            .put_blocks(
                                o.object_id,
                                r.params.block_bytes,
                                priority,
                                ids.len() as u64 * u64::from(r.params.block_bytes),
                            )
                            .await?;
                        for &id in &ids {
                            let block =
                                enc.block(id).map_err(|e| local(format!("encoding: {e}")))?;
                            w.send(BlockKey { id, version }, Bytes::from(block)).await?;
                        }
                        w.close();
                        let mut acked = 0;
                        while let Some(k) = w.ack().await? {
                            acked += 1;
                            added.push(BlockPlacement {
                                key: k,
                                osd_id,
                                addr: info.addr.clone(),
                                up: true,
                            });
                        }
                        if acked != ids.len() {
                            return Err(local(format!(
                                "{path}: OSD {osd_id} acknowledged {acked} of {} rewritten blocks",
                                ids.len()
                            )));
                        }
                    }
                    (added, Vec::new())
                }
                RobustCode::RaptorQ => {
                    let mut spares = Vec::new();
                    let mut rep = RobustPutReport::default();
                    let targets = if holders.is_empty() {
                        return Err(local(format!(
                            "{path}: object #{}: none of its OSDs is up",
                            o.index
                        )));
                    } else {
                        holders.clone()
                    };
                    let added = self
                        .write_until_n(
                            o,
                            &code,
                            Bytes::from(bytes),
                            version,
                            &targets,
                            &mut spares,
                            priority,
                            &mut rep,
                        )
                        .await?;
                    let new: HashSet<u32> = added.iter().map(|b| b.key.id).collect();
                    let dropped: Vec<RobustBlockKey> = o
                        .blocks
                        .iter()
                        .filter(|b| !new.contains(&b.key.id))
                        .map(|b| b.key)
                        .collect();
                    (added, dropped)
                }
            };
            rewritten += added.len() as u64;
            let u = RobustUpdate {
                file_id: info.file_id,
                object_id: o.object_id,
                version,
                added,
                dropped,
                seed: o.seed,
            };
            self.meta(&format!("update {path}"), |m| {
                let u = u.clone();
                async move { m.update_robust_object(&u).await }
            })
            .await?;
        }
        Ok(rewritten)
    }
}

/// Blocks per OSD of a robust file (for `cluster stat`), by OSD id.
/// A stopped write stream's end: closed, then its OSD's acknowledgements of the `in_flight` blocks
/// sent before the stop awaited (they stay pending: the put deletes them) until the OSD ends the
/// stream, for at most [`WIND_DOWN`]. Without it the put's deletion of those blocks could reach
/// the OSD before their writes (another RPC, while the stream still winds down there) and leave
/// them stored, outside the block map.
async fn wind_down(w: &mut ecstack_osd_proto::BlockWriter, mut in_flight: usize) -> StreamEnd {
    w.close();
    let _ = tokio::time::timeout(WIND_DOWN, async {
        while in_flight > 0 {
            match w.ack().await {
                Ok(Some(_)) => in_flight -= 1,
                Ok(None) | Err(_) => break,
            }
        }
    })
    .await;
    StreamEnd::Done
}

pub fn blocks_per_osd(r: &RobustInfo) -> BTreeMap<u32, u64> {
    let mut m = BTreeMap::new();
    for o in &r.objects {
        for b in &o.blocks {
            *m.entry(b.osd_id).or_default() += 1;
        }
    }
    m
}
