//! What the experiment's points produce and how they group into the chapter's figures: shared by
//! the runner (`mod.rs`) and the report (`report.rs`), kept apart so that neither imports the other
//! through its parent.

use ecstack_sim::robustore::Scheme;
use serde::{Deserialize, Serialize};

/// The experiment groups in the chapter's order: (first figure, its figures, title).
pub const GROUPS: [(&str, &[&str], &str); 12] = [
    (
        "6-5",
        &["6-5"],
        "Background workload: disk utilization and foreground bandwidth",
    ),
    (
        "6-6",
        &["6-6", "6-7", "6-8"],
        "Number of disks, heterogeneous layout (read)",
    ),
    (
        "6-9",
        &["6-9", "6-10", "6-11"],
        "Block size, heterogeneous layout (read)",
    ),
    (
        "6-12",
        &["6-12", "6-13", "6-14"],
        "Network latency, heterogeneous layout (read)",
    ),
    (
        "6-15",
        &["6-15", "6-16", "6-17"],
        "Data redundancy, heterogeneous layout (read)",
    ),
    (
        "6-18",
        &["6-18", "6-19", "6-20"],
        "Data redundancy, heterogeneous layout (write)",
    ),
    (
        "6-21",
        &["6-21", "6-22", "6-23"],
        "Data redundancy, heterogeneous layout (read after write: unbalanced striping)",
    ),
    (
        "6-24",
        &["6-24", "6-25"],
        "Competitive workloads, homogeneous (read)",
    ),
    (
        "6-26",
        &["6-26", "6-27", "6-28"],
        "Data redundancy, heterogeneous competitive workloads (read)",
    ),
    (
        "6-29",
        &["6-29", "6-30", "6-31"],
        "Data redundancy, heterogeneous competitive workloads (write)",
    ),
    (
        "6-32",
        &["6-32", "6-33", "6-34"],
        "Data redundancy, heterogeneous competitive workloads (read after write)",
    ),
    (
        "6-35",
        &["6-35", "6-36"],
        "Filesystem cache off and on (read, competitive workloads)",
    ),
];

/// One result row (the CSV's columns).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Row {
    pub group: String,
    pub variant: String,
    pub x: f64,
    pub scheme: Scheme,
    pub bandwidth_mbps: f64,
    pub latency_mean_s: f64,
    pub latency_std_s: f64,
    pub io_overhead: f64,
    pub disk_overhead: f64,
    pub reception_overhead: Option<f64>,
    pub bg_utilization: f64,
    pub accesses: usize,
    pub seed: u64,
    /// Index of the job in the full run (orders rows after a merge).
    pub job: usize,
    /// RobuSTore's rateless code in this run (`code_label`; the other schemes do not use it).
    pub code: String,
    /// RRAID-A's halving unit in this run (`split_label`; absent in rows written before it
    /// existed, which halved sectors).
    #[serde(default = "sector")]
    pub rraid_a_split: String,
}

fn sector() -> String {
    "sector".into()
}
