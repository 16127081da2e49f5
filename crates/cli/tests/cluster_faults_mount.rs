//! The seeded fault runs (`fault_engine/mod.rs`) with a mount in the mix (issue 42): an
//! `ecstack cluster mount` process with a cache smaller than the files writes new files (write,
//! fsync), updates them (pwrite, fsync) and reads any file, a third of the steps, among the same
//! OSD kills, restarts and outs; every byte it reads is the model's, and everything it
//! acknowledged reads back through the library after recovery. A test binary of its own: see the
//! engine's note on descriptors of a FUSE mount and spawned daemons.
//!
//! CI runs `seeds(1)`; long mode `ECSTACK_CLUSTER_SEEDS=N cargo test -p ecstack --test
//! cluster_faults_mount -- --nocapture` (`ECSTACK_CLUSTER_SEED_FROM=k`, `ECSTACK_SEED=n` as in
//! `cluster_faults.rs`).

mod cluster_common;
mod fault_engine;

use cluster_common::mount::fuse_present;
use cluster_common::{replaying_one_seed, seeds};
use fault_engine::run_seeds;

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
        replaying_one_seed()
            || (total.kills > 0 && total.mount_writes_ok > 0 && total.mount_reads_ok > 0),
        "the seeds did not reach every path: {total:?}"
    );
}
