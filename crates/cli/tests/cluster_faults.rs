//! Seeded fault runs on a real cluster of processes: OSDs SIGKILLed at random moments between
//! writes, updates and reads (up to m at a time), some restarted, others declared out and
//! replaced; every read returns exactly the model's bytes or a clean error, never wrong bytes;
//! after recovery every segment is healthy and every file reads back whole. The same runs with MDS
//! failovers (`fault_runs_with_mds_failovers`, issue 43): an active and a standby MDS on the
//! testkit's throwaway PostgreSQL (without it the test fails under CI=true and says SKIPPED
//! otherwise), the active one SIGKILLed (then restarted as the standby, now and then two
//! failovers close together) or SIGSTOPped past its lease (then continued, deposed) between the
//! steps, OSD kills going on. The same runs with a mount in the mix (`fault_runs_with_a_mount`,
//! issue 42): an `ecstack cluster mount` process with a cache smaller than the files writes new
//! files (write, fsync), updates them (pwrite, fsync) and reads any file, a third of the steps,
//! among the same kills. Also: more than m failures, MDS SIGKILL + restart, a stale chunk that
//! must never be served, a corrupted chunk file.
//!
//! CI runs `seeds(4)` of `fault_runs` and `seeds(1)` of `fault_runs_with_mds_failovers` and of
//! `fault_runs_with_a_mount` (long mode `ECSTACK_CLUSTER_SEEDS=N … -- fault_runs_with_a_mount`); the long
//! mode is `ECSTACK_CLUSTER_SEEDS=200 cargo test --release -p ecstack --test cluster_faults --
//! --exact fault_runs` (without `--exact` the filter matches both tests), and
//! `ECSTACK_CLUSTER_SEEDS=30 … -- fault_runs_with_mds_failovers` for the runs with failovers
//! (docs/benchmarks.md, "CodFS cluster fault runs"); `ECSTACK_CLUSTER_SEED_FROM=k` starts the
//! seeds at k (to split a long mode over processes); `ECSTACK_SEED=n` replays one seed.

mod cluster_common;

use std::time::Duration;

use cluster_common::mount::{fuse_present, Mount};
use cluster_common::*;
use ecstack_base::Rng;
use ecstack_client::{Client, ClientError, PutOptions, ReadPath};
use ecstack_lab::codfs_local::LocalCluster;
use ecstack_lab::mds_failover::{wait_active, wait_standby};
use ecstack_mds_proto::{ChunkState, UpdateScheme};
use ecstack_rpc::config::ReserveConfig;
use ecstack_rpc::Security;

#[derive(Default, Debug)]
struct Marks {
    reads_ok: u64,
    reads_degraded_ok: u64,
    read_errors: u64,
    updates_ok: u64,
    update_errors: u64,
    puts_ok: u64,
    put_errors: u64,
    kills: u64,
    /// Kills not made: they could have left a segment with more than m unusable chunks.
    kills_refused: u64,
    restarts: u64,
    outs: u64,
    /// Get pieces read straight from the holders, and those a direct read gave back to the primary.
    direct_pieces: u64,
    direct_fallbacks: u64,
    /// SIGKILLs of the active MDS (each a failover to the standby), of them the second of two
    /// close together (the killed one restarted and the new active killed once it answered), and
    /// restarts of a killed MDS (it comes back as the standby).
    mds_kills: u64,
    mds_double_kills: u64,
    /// Of the kills, those made while a put or an update was under way.
    mds_kills_during_writes: u64,
    mds_restarts: u64,
    /// Active MDSs stopped (SIGSTOP) until the standby took over, then continued (SIGCONT): each
    /// deposed, answering as a standby again.
    mds_deposed: u64,
    /// Through the mount: new files and updates (each fsynced) acknowledged and failed, reads
    /// that returned the model's bytes and reads that failed (EIO).
    mount_writes_ok: u64,
    mount_write_errors: u64,
    mount_reads_ok: u64,
    mount_read_errors: u64,
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
async fn fault_run(seed: u64, mds_store: Option<String>, with_mount: bool) -> Marks {
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
    // 2 s and the GC every 10 s (its default), merging logs under the same faults.
    let scheme = UpdateScheme::ALL[((seed / 2 + seed) % 4) as usize];
    let rig = Rig::start(RigSpec {
        read_path,
        reserve: Some(ReserveConfig {
            size_bytes: 16 << 10,
            shrink_period_ms: Some(2_000),
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

fn pick(rng: &mut Rng, model: &Model) -> (String, FileModel) {
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
fn assert_clean(e: &ClientError, ctx: &str) {
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

// Updates cut short by a SIGKILL (of a data holder between its bytes and its deltas, or of the
// primary between sub-updates) once left stripes whose parity missed a delta with no stale mark, and
// recovery decoded wrong bytes from them (seed 2 did). Parity chunks now record which version of each
// data chunk they include and the primary reads only chunks that agree (docs/cluster.md
// "Consistency of a stripe"); these runs check it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_runs() {
    let total = run_seeds("fault_runs", &seeds(4), false, |_| None).await;
    // The runs reached the paths they are for, updates included (an OSD refused by the MDS on a
    // call its role lacked once failed every update of every seed, and the runs still passed).
    assert!(
        total.kills > 0 && total.reads_degraded_ok > 0 && total.updates_ok > 0,
        "{total:?}"
    );
}

/// The fault runs on an active and a standby MDS over PostgreSQL (issue 43), the active one also
/// SIGKILLed and SIGSTOPped between the steps: the same invariant (exact bytes or a clean error,
/// no acknowledged write lost, healthy at the end), across failovers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_runs_with_mds_failovers() {
    let Some(pg) = ecstack_testkit::postgres::shared() else {
        return;
    };
    let total = run_seeds("fault_runs_with_mds_failovers", &seeds(1), false, |seed| {
        Some(pg.create_db(&format!("faults_{seed}")))
    })
    .await;
    assert!(
        total.mds_kills > 0 && total.mds_deposed > 0 && total.kills > 0 && total.updates_ok > 0,
        "{total:?}"
    );
}

/// The fault runs with a mount in the mix (issue 42): its writes, updates and reads meet the same
/// kills, restarts and outs; every byte it reads is the model's, and everything it acknowledged
/// reads back through the library after recovery.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_runs_with_a_mount() {
    if !fuse_present() {
        return;
    }
    let total = run_seeds("fault_runs_with_a_mount", &seeds(1), true, |_| None).await;
    assert!(
        total.kills > 0 && total.mount_writes_ok > 0 && total.mount_reads_ok > 0,
        "{total:?}"
    );
}

/// Runs [`fault_run`] for every seed (with the MDS store `mds_store` gives it), each in its own
/// task: a failing seed is reported with its replay line and the others still run, so a long
/// mode counts failures instead of stopping at the first. The marks added up; panics naming the
/// seeds that failed.
async fn run_seeds(
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

/// More than m OSDs down: reads fail with one clean error (no wrong bytes, no hang), and a put
/// with fewer than k + 1 OSDs up fails naming the reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_than_m_failures_is_a_clean_error() {
    let mut rig = Rig::start(RigSpec {
        osds: 6,
        retry_secs: 4,
        ..RigSpec::default()
    })
    .await;
    let data = random_bytes(&mut Rng::new(3), 300_000);
    rig.client.put("/x", &data[..]).await.unwrap();
    for i in 0..3 {
        rig.cluster.kill_osd(i);
    }
    for i in 0..3 {
        rig.wait_down(&LocalCluster::osd_name(i)).await;
    }
    let e = rig.client.read("/x", 0, 300_000).await.unwrap_err();
    assert_clean(&e, "read with m+1 down");
    let e = rig.client.update("/x", 10, b"abc").await.unwrap_err();
    assert_clean(&e, "update with m+1 down");
    let e = rig.client.put("/y", &data[..]).await.unwrap_err();
    assert_clean(&e, "put with 3 of 6 OSDs up");
    assert!(
        e.to_string().contains("OSD"),
        "the error names the reason: {e}"
    );
    // Back to m down: readable again, with the original bytes.
    rig.cluster.start_osd(0).unwrap();
    rig.client
        .wait_for_osds(4, Duration::from_secs(30))
        .await
        .unwrap();
    let got = rig.client.read("/x", 0, 300_000).await.unwrap();
    assert!(got == data);
}

/// MDS SIGKILL and restart: no acknowledged metadata is lost (every acknowledged put is listed
/// and reads back; an update acknowledged before the kill is still there).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mds_kill_and_restart_loses_no_acknowledged_metadata() {
    let mut rig = Rig::start(RigSpec {
        osds: 6,
        ..RigSpec::default()
    })
    .await;
    let mut rng = Rng::new(11);
    let mut model = Model::new();
    for round in 0..3 {
        for i in 0..4 {
            let path = format!("/r{round}/f{i}");
            let len = (rng.below(2_500_000)) as usize;
            let data = random_bytes(&mut rng, len);
            rig.client.put(&path, &data[..]).await.unwrap();
            model.insert(path, FileModel::new(data));
        }
        let (path, _) = pick(&mut rng, &model);
        if !model[&path].cur.is_empty() {
            rig.client.update(&path, 0, b"Z").await.unwrap();
            model.get_mut(&path).unwrap().updated(0, b"Z");
        }
        rig.cluster.kill_mds();
        rig.cluster.start_mds().unwrap();
        let listed = rig.client.list("/").await.unwrap();
        assert_eq!(listed.len(), model.len(), "round {round}");
        for (path, f) in &model {
            let got = rig.client.read(path, 0, f.cur.len() as u64).await.unwrap();
            assert!(got == f.cur, "round {round}: {path}");
        }
    }
    // A put in flight while the MDS dies: after the restart the file is either absent or whole.
    let data = random_bytes(&mut rng, 3_000_000);
    let client = rig.client.clone();
    let d2 = data.clone();
    let put = tokio::spawn(async move { client.put("/inflight", &d2[..]).await });
    tokio::time::sleep(Duration::from_millis(30)).await;
    rig.cluster.kill_mds();
    tokio::time::sleep(Duration::from_millis(200)).await;
    rig.cluster.start_mds().unwrap();
    let acked = put.await.unwrap().is_ok();
    match rig.client.read("/inflight", 0, data.len() as u64).await {
        Ok(got) => assert!(got == data, "a half-stored file became visible"),
        Err(e) => assert!(!acked, "an acknowledged put was lost: {e}"),
    }
}

/// An OSD that is down while its chunks are updated comes back: its old chunks are never
/// returned (before catch-up they are stale and not read; after catch-up they hold the new bytes,
/// proven by reading with two other holders dead so that its chunk is needed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_chunk_is_never_returned() {
    let mut rig = Rig::start(RigSpec {
        osds: 6,
        ..RigSpec::default()
    })
    .await;
    let mut rng = Rng::new(21);
    let data = random_bytes(&mut rng, 1 << 20);
    rig.client.put("/s", &data[..]).await.unwrap();
    let mut model = FileModel::new(data);
    // Kill the holder of data chunk 1 (not the primary), update every byte it holds.
    let info = rig.client.stat("/s").await.unwrap();
    let layout = &info.segments[0];
    let status = rig.client.status().await.unwrap();
    let osd_index = |osd_id: u32| osd_index(&status, osd_id);
    let victim = osd_index(layout.chunks[1].osd_id);
    rig.cluster.kill_osd(victim);
    let new = random_bytes(&mut rng, 1 << 20);
    rig.client.update("/s", 0, &new).await.unwrap();
    model.updated(0, &new);
    // Back up; then two other holders die, so a read needs the victim's chunk.
    rig.cluster.start_osd(victim).unwrap();
    let others: Vec<usize> = [2usize, 3]
        .iter()
        .map(|&c| osd_index(layout.chunks[c].osd_id))
        .collect();
    for &o in &others {
        rig.cluster.kill_osd(o);
    }
    // Before or after its catch-up, the bytes are the new ones or the read fails cleanly.
    for _ in 0..5 {
        match rig.client.read("/s", 0, 1 << 20).await {
            Ok(got) => assert_eq!(model.check(0, &got), None, "a stale chunk was served"),
            Err(e) => assert_clean(&e, "read with a stale chunk"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for &o in &others {
        rig.cluster.start_osd(o).unwrap();
    }
    rig.wait_healthy().await;
    for &o in &others {
        rig.cluster.kill_osd(o);
    }
    let got = rig.client.read("/s", 0, 1 << 20).await.unwrap();
    assert_eq!(model.check(0, &got), None, "after catch-up");
}

/// A chunk file corrupted on disk is detected by its checksum, the read returns the right bytes
/// (decoded from the others) and the chunk is repaired: with two other holders dead afterwards the
/// segment still reads (it could not with the corrupted chunk).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupted_chunk_is_detected_and_repaired() {
    let mut rig = Rig::start(RigSpec {
        osds: 6,
        ..RigSpec::default()
    })
    .await;
    let data = random_bytes(&mut Rng::new(31), 1 << 20);
    rig.client.put("/c", &data[..]).await.unwrap();
    let info = rig.client.stat("/c").await.unwrap();
    let layout = &info.segments[0];
    let status = rig.client.status().await.unwrap();
    let osd_index = |osd_id: u32| osd_index(&status, osd_id);
    // Data chunk 1's file: the largest file under its OSD's store (the only chunk there).
    let holder = osd_index(layout.chunks[1].osd_id);
    let store = rig.cluster.osd_store(holder);
    let mut files = Vec::new();
    walk(&store, &mut files);
    let (path, len) = files
        .into_iter()
        .max_by_key(|(_, l)| *l)
        .expect("a chunk file");
    let mut bytes = std::fs::read(&path).unwrap();
    let mid = (len / 2) as usize;
    for b in &mut bytes[mid..mid + 64] {
        *b ^= 0x5a;
    }
    std::fs::write(&path, &bytes).unwrap();
    let got = rig.client.read("/c", 0, 1 << 20).await.unwrap();
    assert!(got == data, "corrupted chunk served");
    // Repaired: two other holders die; the repaired chunk is one of the k left.
    tokio::time::sleep(Duration::from_millis(500)).await;
    for c in [2usize, 3] {
        rig.cluster.kill_osd(osd_index(layout.chunks[c].osd_id));
    }
    let got = rig.client.read("/c", 0, 1 << 20).await.unwrap();
    assert!(got == data, "after repair");
}

fn walk(dir: &std::path::Path, out: &mut Vec<(std::path::PathBuf, u64)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        let Ok(md) = e.metadata() else { continue };
        if md.is_dir() {
            walk(&p, out);
        } else {
            out.push((p, md.len()));
        }
    }
}
