//! The seeded fault runs' engine, shared by `cluster_faults.rs` (OSD kills, MDS failovers) and
//! `cluster_faults_mount.rs` (the same with a mount in the mix): a real cluster of processes, a
//! byte model of every file, OSDs SIGKILLed at random moments between writes, updates and reads
//! (up to m at a time), some restarted, others declared out and replaced; every read returns
//! exactly the model's bytes or a clean error; after recovery every segment is healthy and every
//! file reads back whole.
//!
//! The mount's runs are a test binary of their own: a process that spawns daemons while one of its
//! threads holds a file of a FUSE mount open gives each child a copy of that descriptor, and the
//! child's `execve` closes it (O_CLOEXEC), which sends the mount a FLUSH; with the mount's cluster
//! degraded that flush waits for its writes, and the other test's restarted OSD did not run its
//! first instruction for over a minute (CI's `fault_runs` failed so: "the restarted OSDs
//! registered: not reached").

use std::time::Duration;

use crate::cluster_common::mount::Mount;
use crate::cluster_common::*;
use ecstack_base::Rng;
use ecstack_client::{Client, ClientError, PutOptions, ReadPath};
use ecstack_lab::codfs_local::LocalCluster;
use ecstack_lab::mds_failover::{wait_active, wait_standby};
use ecstack_mds_proto::{ChunkState, UpdateScheme};
use ecstack_rpc::config::ReserveConfig;
use ecstack_rpc::Security;

#[derive(Default, Debug)]
pub struct Marks {
    pub reads_ok: u64,
    pub reads_degraded_ok: u64,
    pub read_errors: u64,
    pub updates_ok: u64,
    pub update_errors: u64,
    pub puts_ok: u64,
    pub put_errors: u64,
    pub kills: u64,
    /// Kills not made: they could have left a segment with more than m unusable chunks.
    pub kills_refused: u64,
    pub restarts: u64,
    pub outs: u64,
    /// Get pieces read straight from the holders, and those a direct read gave back to the primary.
    pub direct_pieces: u64,
    pub direct_fallbacks: u64,
    /// SIGKILLs of the active MDS (each a failover to the standby), of them the second of two
    /// close together (the killed one restarted and the new active killed once it answered), and
    /// restarts of a killed MDS (it comes back as the standby).
    pub mds_kills: u64,
    pub mds_double_kills: u64,
    /// Of the kills, those made while a put or an update was under way.
    pub mds_kills_during_writes: u64,
    pub mds_restarts: u64,
    /// Active MDSs stopped (SIGSTOP) until the standby took over, then continued (SIGCONT): each
    /// deposed, answering as a standby again.
    pub mds_deposed: u64,
    /// Through the mount: new files and updates (each fsynced) acknowledged and failed, reads
    /// that returned the model's bytes and reads that failed (EIO).
    pub mount_writes_ok: u64,
    pub mount_write_errors: u64,
    pub mount_reads_ok: u64,
    pub mount_read_errors: u64,
}

impl Marks {
    fn add(&mut self, m: &Marks) {
        self.reads_ok += m.reads_ok;
        self.reads_degraded_ok += m.reads_degraded_ok;
        self.read_errors += m.read_errors;
        self.updates_ok += m.updates_ok;
        self.update_errors += m.update_errors;
        self.puts_ok += m.puts_ok;
        self.put_errors += m.put_errors;
        self.kills += m.kills;
        self.kills_refused += m.kills_refused;
        self.restarts += m.restarts;
        self.outs += m.outs;
        self.direct_pieces += m.direct_pieces;
        self.direct_fallbacks += m.direct_fallbacks;
        self.mds_kills += m.mds_kills;
        self.mds_double_kills += m.mds_double_kills;
        self.mds_kills_during_writes += m.mds_kills_during_writes;
        self.mds_restarts += m.mds_restarts;
        self.mds_deposed += m.mds_deposed;
        self.mount_writes_ok += m.mount_writes_ok;
        self.mount_write_errors += m.mount_write_errors;
        self.mount_reads_ok += m.mount_reads_ok;
        self.mount_read_errors += m.mount_read_errors;
    }
}

/// The two MDSs of a run with failovers (`[mds] addrs` indexes 0 and 1) and what its steps did to
/// them: at most one is down or stopped at a time, so one can always take over.
struct MdsFaults {
    security: Security,
    /// The MDS SIGKILLed and not restarted yet.
    down: Option<usize>,
    /// The MDS SIGSTOPped, and the step from which on it is continued.
    stopped: Option<(usize, usize)>,
}

impl MdsFaults {
    /// The MDS that answers (waiting for a takeover to end).
    async fn active(&self, rig: &Rig, ctx: &str) -> usize {
        wait_active(&rig.cluster, &self.security, Duration::from_secs(60))
            .await
            .unwrap_or_else(|e| panic!("{ctx}: {e}\n{}", rig.logs()))
    }

    /// Continues the stopped MDS (if any) once the other one took over: deposed, it must answer as
    /// a standby (naming the new active), never as the active.
    async fn continue_stopped(&mut self, rig: &Rig, marks: &mut Marks, ctx: &str) {
        let Some((stopped, _)) = self.stopped.take() else {
            return;
        };
        let took = self.active(rig, ctx).await;
        assert_ne!(took, stopped, "{ctx}: the stopped MDS answered");
        note(
            ctx,
            &format!("SIGCONT MDS {stopped} (MDS {took} took over)"),
        );
        rig.cluster.signal_mds(stopped, libc::SIGCONT);
        wait_standby(&rig.cluster, stopped, &self.security)
            .await
            .unwrap_or_else(|e| panic!("{ctx}: deposed MDS {stopped}: {e}\n{}", rig.logs()));
        marks.mds_deposed += 1;
    }
}

/// One seeded run; panics with the seed on a wrong byte or an unhealthy end.
///
/// `mds_store`: a PostgreSQL database for an active and a standby MDS, and the steps also fail the
/// MDS: SIGKILL of the active one (now and then two failovers close together), restarted some steps
/// later as the standby, and SIGSTOP of the active one, continued once the standby took over (a
/// deposed MDS). OSD kills go on meanwhile, and the operations made during a takeover wait for it
/// within the client's retry budget (30 s) or fail cleanly. `None`: one MDS on SQLite, never
/// failed here.
///
/// `with_mount`: an `ecstack cluster mount` of the cluster (a 4 MiB cache) takes a third of the
/// steps ([`mount_step`]); the files it writes (`/m…`) are written only through it (a write it
/// failed stays dirty in its cache and may land at any later flush), the others only through the
/// library; it reads both. Unmounted (flushing what it holds) once the OSDs are back.
pub async fn fault_run(seed: u64, mds_store: Option<String>, with_mount: bool) -> Marks {
    let failovers = mds_store.is_some();
    // Even seeds read the default way, straight from the holders (ReadPath::Direct): its plans,
    // version checks and fallbacks to the primary meet the same kills, restarts, stale chunks and
    // recoveries as odd seeds, which read through the primary (CodFS's path).
    let read_path = if seed % 2 == 0 {
        ReadPath::default()
    } else {
        ReadPath::Primary
    };
    // Each seed's files are stored under one update scheme, (seed / 2 + seed) mod 4 of fo, fl,
    // codfs-pl, plr: seeds 1–4 are fl, plr, fo, codfs-pl, and over more seeds every scheme meets
    // both read paths. PLR reserves are 16 KiB:
    // updates fill them, so merges on the update path meet the kills too; Algorithm 1 runs every
    // 2 s and the GC every 10 s (its default), merging logs under the same faults. Seeds 0–3,
    // 8–11, … merge reserves ahead once half full (the Monitor merging while updates append).
    let scheme = UpdateScheme::ALL[((seed / 2 + seed) % 4) as usize];
    let rig = Rig::start(RigSpec {
        read_path,
        reserve: Some(ReserveConfig {
            size_bytes: 16 << 10,
            shrink_period_ms: Some(2_000),
            merge_ahead: if (seed / 4) % 2 == 0 { 0.5 } else { 0.0 },
            ..ReserveConfig::default()
        }),
        retry_secs: if failovers { 30 } else { 20 },
        mds_standbys: usize::from(failovers),
        mds_store,
        ..RigSpec::default()
    })
    .await;
    let mut mds = MdsFaults {
        security: rig.security(),
        down: None,
        stopped: None,
    };
    let mut mount = with_mount.then(|| Mount::start(&rig, &rig.dir.path().join("mnt"), "4M"));
    let put_options = || PutOptions {
        scheme: Some(scheme),
        ..PutOptions::default()
    };
    let mut rig = rig;
    let mut rng = Rng::new(seed);
    let mut model = Model::new();
    let mut marks = Marks::default();
    let seg = rig.segment_bytes as usize;
    let m = rig.m as usize;
    // OSD indexes that are down (killed, not restarted), and how many were declared out.
    let mut down: Vec<usize> = Vec::new();
    let mut outs = 0usize;
    let outs_max = rig.cluster.osd_count() - (rig.k + rig.m) as usize;
    for i in 0..4 {
        let path = format!("/f{i}");
        let len = (1 + rng.below(3 * seg as u64)) as usize;
        let data = random_bytes(&mut rng, len);
        rig.client
            .put_with(&path, &data[..], put_options())
            .await
            .unwrap();
        model.insert(path, FileModel::new(data));
    }
    // Runs with failovers draw from three more kinds of step (the others' draws stay as they were).
    let kinds = if failovers { 13 } else { 10 };
    for step in 0..40 {
        let ctx = format!(
            "seed {seed} step {step} (down {down:?}, outs {outs}, MDS down {:?}, stopped {:?})",
            mds.down, mds.stopped
        );
        if mds.stopped.is_some_and(|(_, at)| step >= at) {
            mds.continue_stopped(&rig, &mut marks, &ctx).await;
        }
        if let Some(mnt) = &mount {
            if rng.below(3) == 0 {
                let mut model_now = std::mem::take(&mut model);
                let degraded = !down.is_empty();
                let mnt = mnt.dir.clone();
                let (mut r, mut mk) = (rng.clone(), Marks::default());
                let ctx2 = ctx.clone();
                // Blocking file calls, off the runtime's workers.
                let (r, mk, m) = tokio::task::spawn_blocking(move || {
                    mount_step(
                        &mut r,
                        &mnt,
                        step,
                        seg,
                        &mut model_now,
                        &mut mk,
                        degraded,
                        &ctx2,
                    );
                    (r, mk, model_now)
                })
                .await
                .unwrap_or_else(|e| panic!("{ctx}: {e}\n{}", rig.logs()));
                rng = r;
                model = m;
                marks.add(&mk);
                continue;
            }
        }
        match rng.below(kinds) {
            // Kill a running OSD, unless that could leave a segment with more than m unusable
            // chunks.
            0 | 1 if down.len() < m => {
                let running: Vec<usize> = (0..rig.cluster.osd_count())
                    .filter(|&i| rig.cluster.osd_running(i))
                    .collect();
                let i = running[rng.below(running.len() as u64) as usize];
                if kill_keeps_m(&rig, &down, i, &ctx).await {
                    note(&ctx, &format!("kill osd-{i}"));
                    rig.cluster.kill_osd(i);
                    down.push(i);
                    marks.kills += 1;
                } else {
                    marks.kills_refused += 1;
                }
            }
            // Restart a killed OSD (it catches up on what it missed).
            2 if !down.is_empty() => {
                let i = down.remove(rng.below(down.len() as u64) as usize);
                note(&ctx, &format!("restart osd-{i}"));
                rig.cluster.start_osd(i).unwrap();
                marks.restarts += 1;
            }
            // Declare a killed OSD out: a replacement joins, recovery rebuilds its chunks.
            3 if !down.is_empty() && outs < outs_max => {
                let i = down.remove(rng.below(down.len() as u64) as usize);
                let name = LocalCluster::osd_name(i);
                rig.wait_down(&name).await;
                note(&ctx, &format!("osd out {name}"));
                rig.admin()
                    .osd_out(&name)
                    .await
                    .unwrap_or_else(|e| panic!("{ctx}: osd out {name}: {e}"));
                outs += 1;
                marks.outs += 1;
            }
            // A new file.
            4 => {
                let w = Write::put(&mut rng, step, seg);
                let answer = w.run(&rig.client, put_options()).await;
                w.record(answer, &mut model, &mut marks, &ctx);
            }
            // An update of a random range.
            5..=6 => {
                let Some(w) = Write::update(&mut rng, &model, seg) else {
                    continue;
                };
                let answer = w.run(&rig.client, put_options()).await;
                w.record(answer, &mut model, &mut marks, &ctx);
            }
            // SIGKILL the active MDS: the standby takes over once its lease lapses; or restart the
            // one killed before (it comes back as the standby).
            10 | 11 if failovers => {
                mds.continue_stopped(&rig, &mut marks, &ctx).await;
                if let Some(i) = mds.down.take() {
                    note(&ctx, &format!("restart MDS {i}"));
                    rig.cluster.start_mds_at(i).unwrap();
                    marks.mds_restarts += 1;
                } else {
                    let active = mds.active(&rig, &ctx).await;
                    // Half the kills land during a write (0–400 ms into a put or an update): a
                    // put's metadata commit or an update's primary lease meets the dying MDS, and
                    // the write must be acknowledged and persist, or fail cleanly.
                    let during = match rng.below(4) {
                        0 => Some(Write::put(&mut rng, step, seg)),
                        1 => Write::update(&mut rng, &model, seg),
                        _ => None,
                    };
                    if let Some(w) = during {
                        let client = rig.client.clone();
                        let options = put_options();
                        let write = tokio::spawn(async move {
                            let answer = w.run(&client, options).await;
                            (w, answer)
                        });
                        tokio::time::sleep(Duration::from_millis(rng.below(400))).await;
                        note(
                            &ctx,
                            &format!("kill the active MDS {active} during a write"),
                        );
                        rig.cluster.kill_mds_at(active);
                        let (w, answer) = write.await.unwrap_or_else(|e| panic!("{ctx}: {e}"));
                        w.record(answer, &mut model, &mut marks, &ctx);
                        marks.mds_kills_during_writes += 1;
                    } else {
                        note(&ctx, &format!("kill the active MDS {active}"));
                        rig.cluster.kill_mds_at(active);
                    }
                    mds.down = Some(active);
                    marks.mds_kills += 1;
                    // Now and then two failovers close together: once the standby answers, the
                    // killed MDS is restarted and the new active killed at once, so the restarted
                    // one takes over while it barely runs.
                    if rng.below(4) == 0 {
                        let took = mds.active(&rig, &ctx).await;
                        assert_ne!(took, active, "{ctx}: the killed MDS answered");
                        note(
                            &ctx,
                            &format!("restart MDS {active}, kill the active MDS {took}"),
                        );
                        rig.cluster.start_mds_at(active).unwrap();
                        marks.mds_restarts += 1;
                        rig.cluster.kill_mds_at(took);
                        mds.down = Some(took);
                        marks.mds_kills += 1;
                        marks.mds_double_kills += 1;
                    }
                }
            }
            // SIGSTOP the active MDS with both running; the next 1–4 steps meet it stopped (calls
            // to it time out and move on to the standby, which takes over once the lease lapses),
            // then it is continued, deposed.
            12 if failovers && mds.down.is_none() && mds.stopped.is_none() => {
                let active = mds.active(&rig, &ctx).await;
                note(&ctx, &format!("SIGSTOP the active MDS {active}"));
                rig.cluster.signal_mds(active, libc::SIGSTOP);
                mds.stopped = Some((active, step + 1 + rng.below(4) as usize));
            }
            // A read of a random range.
            _ => {
                let (path, f) = pick(&mut rng, &model);
                let size = f.cur.len();
                let offset = rng.below(size as u64 + 1) as usize;
                let len = rng.below((size - offset) as u64 + 1) as usize;
                match rig.client.read(&path, offset as u64, len as u64).await {
                    Ok(got) => {
                        assert_eq!(got.len(), len, "{ctx}: {path} {offset}+{len}");
                        if let Some(at) = f.check(offset, &got) {
                            panic!("{ctx}: {path} read {offset}+{len} returned a wrong byte at {at}\n{}", rig.logs());
                        }
                        marks.reads_ok += 1;
                        if !down.is_empty() {
                            marks.reads_degraded_ok += 1;
                        }
                    }
                    Err(e) => {
                        note(&ctx, &format!("read {path} {offset}+{len} failed: {e}"));
                        assert_clean(&e, &ctx);
                        marks.read_errors += 1;
                    }
                }
            }
        }
    }
    // Heal: both MDSs running, restart whatever OSD is down, wait for full redundancy, then every
    // file must read whole.
    let ctx = format!("seed {seed} at the end");
    mds.continue_stopped(&rig, &mut marks, &ctx).await;
    if let Some(i) = mds.down.take() {
        note(&ctx, &format!("restart MDS {i}"));
        rig.cluster.start_mds_at(i).unwrap();
        marks.mds_restarts += 1;
    }
    let restart: Vec<usize> = down.drain(..).collect();
    rig.restart_and_wait(&restart).await;
    if let Some(mut mnt) = mount.take() {
        // SIGTERM: it flushes what it still holds (writes it answered EIO to included) and exits.
        tokio::task::spawn_blocking(move || mnt.stop())
            .await
            .unwrap_or_else(|e| panic!("{ctx}: unmount: {e}\n{}", rig.logs()));
    }
    rig.wait_healthy().await;
    for (path, f) in &model {
        let got = rig
            .client
            .read(path, 0, f.cur.len() as u64)
            .await
            .unwrap_or_else(|e| panic!("seed {seed}: after recovery {path}: {e}\n{}", rig.logs()));
        if let Some(at) = f.check(0, &got) {
            panic!("seed {seed}: after recovery {path} has a wrong byte at {at}");
        }
    }
    if failovers {
        // One MDS answers, the other is its standby.
        let active = mds.active(&rig, &ctx).await;
        wait_standby(&rig.cluster, 1 - active, &mds.security)
            .await
            .unwrap_or_else(|e| panic!("{ctx}: {e}\n{}", rig.logs()));
    }
    rig.cluster.check_alive().unwrap();
    let reads = rig.client.read_stats();
    marks.direct_pieces = reads.direct;
    marks.direct_fallbacks = reads.fallbacks;
    if read_path == ReadPath::Direct {
        assert!(reads.direct > 0, "seed {seed}: no piece was read directly");
    }
    marks
}

/// A write a step draws: a put of a new file or an update of a random range of a file.
enum Write {
    Put {
        path: String,
        data: Vec<u8>,
    },
    Update {
        path: String,
        offset: usize,
        data: Vec<u8>,
    },
}

impl Write {
    /// A new file `/n<step>` of up to two segments.
    fn put(rng: &mut Rng, step: usize, seg: usize) -> Write {
        let path = format!("/n{step}");
        let len = (rng.below(2 * seg as u64 + 100)) as usize;
        let data = random_bytes(rng, len);
        Write::Put { path, data }
    }

    /// New bytes for a random range of a random file the library wrote (`None` when that file is
    /// empty).
    fn update(rng: &mut Rng, model: &Model, seg: usize) -> Option<Write> {
        let (path, f) = pick_where(rng, model, |p| !p.starts_with("/m"));
        let size = f.cur.len();
        if size == 0 {
            return None;
        }
        let offset = rng.below(size as u64) as usize;
        let len = 1 + rng.below(((size - offset) as u64).min(seg as u64 + 10)) as usize;
        let data = random_bytes(rng, len);
        Some(Write::Update { path, offset, data })
    }

    fn what(&self) -> String {
        match self {
            Write::Put { path, data } => format!("put {path} ({} bytes)", data.len()),
            Write::Update { path, offset, data } => {
                format!("update {path} {offset}+{}", data.len())
            }
        }
    }

    async fn run(&self, client: &Client, options: PutOptions) -> Result<(), ClientError> {
        match self {
            Write::Put { path, data } => client.put_with(path, &data[..], options).await.map(drop),
            Write::Update { path, offset, data } => client.update(path, *offset as u64, data).await,
        }
    }

    /// Adds the client's answer to the model (an acknowledged write must read back; a failed
    /// update may have reached some chunks) and the marks; a failure must be clean (and is
    /// printed, for `--nocapture`).
    fn record(
        self,
        answer: Result<(), ClientError>,
        model: &mut Model,
        marks: &mut Marks,
        ctx: &str,
    ) {
        if let Err(e) = &answer {
            note(ctx, &format!("{} failed: {e}", self.what()));
        }
        match (self, answer) {
            (Write::Put { path, data }, Ok(())) => {
                marks.puts_ok += 1;
                model.insert(path, FileModel::new(data));
            }
            (Write::Put { .. }, Err(e)) => {
                assert_clean(&e, ctx);
                marks.put_errors += 1;
            }
            (Write::Update { path, offset, data }, Ok(())) => {
                marks.updates_ok += 1;
                model.get_mut(&path).unwrap().updated(offset, &data);
            }
            (Write::Update { path, offset, data }, Err(e)) => {
                assert_clean(&e, ctx);
                marks.update_errors += 1;
                model.get_mut(&path).unwrap().maybe_updated(offset, &data);
            }
        }
    }
}

/// Whether killing OSD `victim` (a rig index) keeps every segment of the cluster within m
/// unusable chunks, counting those the MDS reports unusable (stale, recovering, on a down or out
/// holder), those on OSDs this run killed (the MDS may not see them down yet) and the victim's.
///
/// A count of failures alone is not enough: a restarted OSD's chunks stay stale until their
/// catch-up ends, and an update sent just after a restart can miss the holder at its old address
/// and leave a new stale chunk there (seeds 16, 38 and 364824 once killed two more OSDs of such a
/// segment: three unusable chunks, more than m, which the cluster rightly could not rebuild).
async fn kill_keeps_m(rig: &Rig, down: &[usize], victim: usize, ctx: &str) -> bool {
    let status = rig
        .client
        .status()
        .await
        .unwrap_or_else(|e| panic!("{ctx}: status: {e}"));
    let gone: Vec<u32> = down
        .iter()
        .chain([&victim])
        .map(|&i| {
            let name = LocalCluster::osd_name(i);
            status
                .osds
                .iter()
                .find(|o| o.name == name)
                .map(|o| o.osd_id)
                .unwrap_or_else(|| panic!("{ctx}: the MDS does not know {name}"))
        })
        .collect();
    let files = rig
        .client
        .list("/")
        .await
        .unwrap_or_else(|e| panic!("{ctx}: ls: {e}"));
    for f in files {
        let info = rig
            .client
            .stat(&f.path)
            .await
            .unwrap_or_else(|e| panic!("{ctx}: stat {}: {e}", f.path));
        for s in &info.segments {
            let unusable = s
                .chunks
                .iter()
                .filter(|c| c.state != ChunkState::Healthy || !c.up || gone.contains(&c.osd_id))
                .count();
            if unusable > rig.m as usize {
                return false;
            }
        }
    }
    true
}

/// One line on stderr (shown with `--nocapture`, and for a failing test) of a fault made or an
/// operation failed, with the time of day (UTC, as the daemons' logs have it).
fn note(ctx: &str, what: &str) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let s = now.as_secs() % 86_400;
    eprintln!(
        "{:02}:{:02}:{:02}.{:03} {ctx}: {what}",
        s / 3600,
        s / 60 % 60,
        s % 60,
        now.subsec_millis()
    );
}

pub fn pick(rng: &mut Rng, model: &Model) -> (String, FileModel) {
    pick_where(rng, model, |_| true)
}

/// A random file of those whose path `keep` takes (the draw is as [`pick`]'s when it takes all).
fn pick_where(rng: &mut Rng, model: &Model, keep: impl Fn(&str) -> bool) -> (String, FileModel) {
    let n = model.keys().filter(|p| keep(p)).count();
    let i = rng.below(n as u64) as usize;
    let (p, f) = model.iter().filter(|(p, _)| keep(p)).nth(i).unwrap();
    (p.clone(), f.clone())
}

/// One step through the mount at `mnt`: a new file `/m<step>` (create, write, fsync), an update
/// of a random range of a file the mount wrote (pwrite, fsync), or a read of a random range of any
/// file. An acknowledged write joins the model; a failed one must be an I/O error, and its bytes
/// may land later (the mount keeps them dirty), so they become possible values; a read returns
/// the model's bytes or fails with an I/O error.
#[allow(clippy::too_many_arguments)]
fn mount_step(
    rng: &mut Rng,
    mnt: &std::path::Path,
    step: usize,
    seg: usize,
    model: &mut Model,
    marks: &mut Marks,
    degraded: bool,
    ctx: &str,
) {
    use std::io::Write as _;
    use std::os::unix::fs::FileExt;
    let at = |path: &str| mnt.join(&path[1..]);
    let ours = model.keys().filter(|p| p.starts_with("/m")).count();
    let failed = |what: &str, e: std::io::Error, marks: &mut u64| {
        // The mount's own account of it: the last lines of its log (beside the mountpoint).
        let log = std::fs::read_to_string(mnt.with_extension("log")).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(3).collect();
        note(
            ctx,
            &format!(
                "mount: {what} failed: {e} (mount log: {})",
                tail.join(" | ")
            ),
        );
        // More than m failures at a time never happen here (kills keep m), but a write or read
        // may still time out against a holder that just died: EIO, never another kind.
        assert_eq!(
            e.raw_os_error(),
            Some(libc::EIO),
            "{ctx}: mount: {what}: {e}"
        );
        *marks += 1;
    };
    match rng.below(3) {
        0 => {
            let path = format!("/m{step}");
            let len = rng.below(2 * seg as u64 + 100) as usize;
            let data = random_bytes(rng, len);
            let r = std::fs::File::create(at(&path)).and_then(|mut f| {
                f.write_all(&data)?;
                f.sync_all()
            });
            match r {
                Ok(()) => {
                    marks.mount_writes_ok += 1;
                    model.insert(path, FileModel::new(data));
                }
                Err(e) => failed(&format!("write {path}"), e, &mut marks.mount_write_errors),
            }
        }
        1 if ours > 0 => {
            let (path, f) = pick_where(rng, model, |p| p.starts_with("/m"));
            let size = f.cur.len();
            if size == 0 {
                return;
            }
            let offset = rng.below(size as u64) as usize;
            let len = 1 + rng.below(((size - offset) as u64).min(seg as u64 + 10)) as usize;
            let data = random_bytes(rng, len);
            let r = std::fs::OpenOptions::new()
                .write(true)
                .open(at(&path))
                .and_then(|f| {
                    f.write_all_at(&data, offset as u64)?;
                    f.sync_all()
                });
            let m = model.get_mut(&path).expect("picked from it");
            match r {
                Ok(()) => {
                    marks.mount_writes_ok += 1;
                    m.updated(offset, &data);
                }
                Err(e) => {
                    m.maybe_updated(offset, &data);
                    failed(
                        &format!("update {path} {offset}+{len}"),
                        e,
                        &mut marks.mount_write_errors,
                    );
                }
            }
        }
        _ => {
            let (path, f) = pick(rng, model);
            let size = f.cur.len();
            let offset = rng.below(size as u64 + 1) as usize;
            let len = rng.below((size - offset) as u64 + 1) as usize;
            let mut got = vec![0u8; len];
            let r = std::fs::File::open(at(&path))
                .and_then(|file| file.read_exact_at(&mut got, offset as u64));
            match r {
                Ok(()) => {
                    if let Some(at) = f.check(offset, &got) {
                        panic!("{ctx}: the mount's read of {path} {offset}+{len} returned a wrong byte at {at}");
                    }
                    marks.mount_reads_ok += 1;
                    if degraded {
                        marks.reads_degraded_ok += 1;
                    }
                }
                Err(e) => failed(
                    &format!("read {path} {offset}+{len}"),
                    e,
                    &mut marks.mount_read_errors,
                ),
            }
        }
    }
}

/// A failure is acceptable only as one line of a known kind (never a panic, never wrong bytes).
pub fn assert_clean(e: &ClientError, ctx: &str) {
    let s = e.to_string();
    assert!(
        !s.is_empty() && !s.contains('\n'),
        "{ctx}: messy error {s:?}"
    );
    assert!(
        !matches!(e, ClientError::Range { .. } | ClientError::Layout(_)),
        "{ctx}: unexpected error kind: {s}"
    );
}

/// Runs [`fault_run`] for every seed (with the MDS store `mds_store` gives it), each in its own
/// task: a failing seed is reported with its replay line and the others still run, so a long
/// mode counts failures instead of stopping at the first. The marks added up; panics naming the
/// seeds that failed.
pub async fn run_seeds(
    test: &str,
    seeds: &[u64],
    with_mount: bool,
    mds_store: impl Fn(u64) -> Option<String>,
) -> Marks {
    let mut total = Marks::default();
    let mut failed = Vec::new();
    for &seed in seeds {
        let m = match tokio::spawn(fault_run(seed, mds_store(seed), with_mount)).await {
            Ok(m) => m,
            Err(e) => {
                eprintln!("seed {seed} FAILED: {e} (replay: ECSTACK_SEED={seed} ... -- {test})");
                failed.push(seed);
                continue;
            }
        };
        eprintln!(
            "seed {seed} ({}): {m:?}",
            UpdateScheme::ALL[((seed / 2 + seed) % 4) as usize]
        );
        total.add(&m);
    }
    eprintln!("{test}: {} seeds: {total:?}", seeds.len());
    assert!(
        failed.is_empty(),
        "{} of {} seeds failed: {failed:?}",
        failed.len(),
        seeds.len()
    );
    total
}
