//! RainFS Table 2.1 (seed `rainfs-treechunks-zombienand-thesis.txt` §2.4): how many concurrently
//! failed disks and racks each architecture tolerates without data loss, for RAID-5 / RAID-6 inside
//! each NAS and 1–3 replicas, computed from the architecture's parameters.
//!
//! The fault model (§2.4): one NAS system per rack, each a RAID failure domain that loses its data
//! when more disks fail than its RAID level tolerates (t = 1 for RAID-5, 2 for RAID-6). When the r
//! replicas of a file are on r distinct NAS systems, losing the file needs every replica's domain
//! to fail, at least t + 1 disks in each of r racks, so "no matter which disks fail" the
//! architecture tolerates r(t+1) - 1 disks and r - 1 racks (§2.4.3). A federated namespace over all
//! NAS systems (No HDFS) is one RAID domain with no replication: t disks, 0 racks.

use serde::Serialize;

/// What decides an architecture's tolerance.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Architecture {
    pub name: &'static str,
    /// Highest replication level it can run at: DN-on-Client stops at 2 (at 3, HDFS puts the
    /// second replica in the writer's rack, the same NAS); No HDFS has no replication (1);
    /// DN-on-NAS and RainFS place one replica per NAS system, up to the number of NAS systems.
    pub replication_max: Option<usize>,
}

/// The four architectures of §2.3 in the table's order.
pub const ARCHITECTURES: [Architecture; 4] = [
    Architecture {
        name: "DN-on-Client",
        replication_max: Some(2),
    },
    Architecture {
        name: "DN-on-NAS Node",
        replication_max: None,
    },
    Architecture {
        name: "No HDFS",
        replication_max: Some(1),
    },
    Architecture {
        name: "RainFS",
        replication_max: None,
    },
];

/// RAID level inside each NAS: the disks one NAS tolerates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct RaidLevel {
    pub name: &'static str,
    pub disks_tolerated: usize,
}

pub const RAID5: RaidLevel = RaidLevel {
    name: "RAID 5",
    disks_tolerated: 1,
};
pub const RAID6: RaidLevel = RaidLevel {
    name: "RAID 6",
    disks_tolerated: 2,
};

/// Disks and racks tolerated, or `None` when the architecture cannot run at this replication.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Tolerance {
    pub disks: usize,
    pub racks: usize,
}

/// The tolerance of `arch` with `raid` in each of `nas_systems` NAS systems and `replicas` copies.
pub fn tolerance(
    arch: &Architecture,
    raid: RaidLevel,
    replicas: usize,
    nas_systems: usize,
) -> Option<Tolerance> {
    let max = arch.replication_max.unwrap_or(nas_systems).min(nas_systems);
    if replicas == 0 || replicas > max {
        return None;
    }
    Some(Tolerance {
        disks: replicas * (raid.disks_tolerated + 1) - 1,
        racks: replicas - 1,
    })
}

/// The table: one row per architecture, columns RAID 5 / RAID 6 × replication 1..=3.
#[derive(Clone, Debug, Serialize)]
pub struct Table {
    pub nas_systems: usize,
    pub columns: Vec<Column>,
    pub rows: Vec<Row>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Column {
    pub raid: &'static str,
    pub replicas: usize,
}

/// One architecture's tolerances, one per column; `None` where it cannot run.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub architecture: &'static str,
    pub cells: Vec<Option<Tolerance>>,
}

pub fn table_2_1(nas_systems: usize) -> Table {
    let mut columns = Vec::new();
    for r in 1..=3 {
        for raid in [RAID5, RAID6] {
            columns.push(Column {
                raid: raid.name,
                replicas: r,
            });
        }
    }
    let rows = ARCHITECTURES
        .iter()
        .map(|a| {
            let cells = (1..=3)
                .flat_map(|r| [RAID5, RAID6].map(move |raid| (r, raid)))
                .map(|(r, raid)| tolerance(a, raid, r, nas_systems))
                .collect();
            Row {
                architecture: a.name,
                cells,
            }
        })
        .collect();
    Table {
        nas_systems,
        columns,
        rows,
    }
}

impl std::fmt::Display for Table {
    /// The seed's layout: "disks / racks", "- / -" where the architecture cannot run.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let cell = |t: &Option<Tolerance>| match t {
            Some(t) => format!("{} / {}", t.disks, t.racks),
            None => "- / -".to_string(),
        };
        let name_w = self
            .rows
            .iter()
            .map(|r| r.architecture.len())
            .max()
            .unwrap_or(0);
        write!(f, "{:name_w$}", "")?;
        for c in &self.columns {
            write!(f, " | {:>7}", c.raid)?;
        }
        writeln!(f)?;
        write!(f, "{:name_w$}", "")?;
        for c in &self.columns {
            write!(f, " | {:>7}", format!("Repl. {}", c.replicas))?;
        }
        writeln!(f)?;
        for row in &self.rows {
            write!(f, "{:name_w$}", row.architecture)?;
            for c in &row.cells {
                write!(f, " | {:>7}", cell(c))?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}
