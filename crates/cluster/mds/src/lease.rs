//! The active MDS's lease in a PostgreSQL store (issue 43; CodFS §4.4.3: a backup MDS serves when
//! the main one fails). Two or more MDSs share one database; the one holding the lease is active,
//! the others wait.
//!
//! The lease is one row of the store's `meta` table, `mds_lease` = `"TERM EXPIRES_MS HOLDER"`
//! (no schema change: older code ignores the row). EXPIRES_MS is on the *database server's*
//! clock, so the MDSs' clocks need not agree:
//!
//! - **Take.** In one transaction holding the row `FOR UPDATE`: if the server's clock is past
//!   EXPIRES_MS, write TERM + 1, now + `lease_ms`, this MDS. Only a lapsed lease is taken.
//! - **Renew.** The same, only while TERM and HOLDER are still this MDS's; never shortens.
//! - **Fence.** A store opened for a term ([`crate::store_pg::PgStore::connect_fenced`]) reads
//!   TERM `FOR SHARE` inside every `apply`'s transaction and commits only while it is its own:
//!   a deposed MDS (stopped past its lease, cut off) commits nothing, and a takeover waits for
//!   the transactions under way, so the new active MDS sees every acknowledged change.
//! - **Locally**, the active MDS answers only until the instant it *sent* its last successful
//!   renewal plus `lease_ms` (less [`LOCAL_MARGIN`]): the server stamped the expiry no earlier,
//!   so the MDS has stopped answering (heartbeats included, which renew the OSDs' primary
//!   leases) before any standby can take over.

use postgres::{Client, Transaction};

use crate::store::StoreError;
use crate::store_pg::pg_connect;

/// The `meta` key of the lease row.
pub const LEASE_KEY: &str = "mds_lease";

/// The active MDS stops answering this share of `lease_ms` before its lease can lapse, for clocks
/// that run at slightly different rates.
pub const LOCAL_MARGIN: (u64, u64) = (1, 10);

/// The server's clock in unix ms.
const SERVER_NOW_MS: &str = "CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)";

/// How long a transaction of an MDS's session may sit idle before the server ends it
/// ([`crate::store_pg::pg_connect`]): half the lease. An active MDS's transactions are a few
/// statements sent back to back; one idle this long belongs to a stopped MDS, whose lease lapses
/// after at most `lease_ms` anyway, so the standby's takeover is not delayed past it.
pub fn stall_ms(lease_ms: u64) -> u64 {
    (lease_ms / 2).max(1)
}

/// The lease row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseRow {
    /// 0: never taken.
    pub term: u64,
    /// Until when (the server's unix ms).
    pub expires_ms: i64,
    /// Who holds it: the MDS's address and process (`127.0.0.1:7100 (pid 42)`).
    pub holder: String,
}

impl LeaseRow {
    fn parse(value: &str) -> Result<LeaseRow, StoreError> {
        let bad = || StoreError::Corrupt(format!("lease row {value:?}"));
        let mut parts = value.splitn(3, ' ');
        let term = parts.next().and_then(|t| t.parse().ok()).ok_or_else(bad)?;
        let expires_ms = parts.next().and_then(|t| t.parse().ok()).ok_or_else(bad)?;
        let holder = parts.next().ok_or_else(bad)?.to_owned();
        Ok(LeaseRow {
            term,
            expires_ms,
            holder,
        })
    }

    fn value(&self) -> String {
        format!("{} {} {}", self.term, self.expires_ms, self.holder)
    }
}

/// What [`PgLease::try_take`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Take {
    /// This MDS now holds the lease, at this term.
    Took(u64),
    /// Another MDS holds it for this long still.
    Held { holder: String, remaining_ms: u64 },
}

/// An MDS's own session for its lease (beside its store's session, so a renewal never waits
/// behind a long metadata operation). Reconnects after an error.
pub struct PgLease {
    url: String,
    holder: String,
    lease_ms: u64,
    client: Option<Client>,
}

impl PgLease {
    /// The lease of the MDS `holder` (its address and pid) in the store `url`, `lease_ms` long.
    pub fn new(url: &str, holder: &str, lease_ms: u64) -> PgLease {
        PgLease {
            url: url.to_owned(),
            holder: holder.to_owned(),
            lease_ms,
            client: None,
        }
    }

    pub fn holder(&self) -> &str {
        &self.holder
    }

    /// Runs `f` in one transaction on the row held `FOR UPDATE` (made if absent), with the
    /// server's clock; drops the session on an error.
    fn with_row<T>(
        &mut self,
        f: impl FnOnce(&mut Transaction<'_>, LeaseRow, i64) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        if self.client.is_none() {
            let mut c = pg_connect(&self.url, "mds lease", Some(stall_ms(self.lease_ms))).map_err(
                |message| StoreError::Open {
                    at: crate::store_pg::redact_url(&self.url),
                    message,
                },
            )?;
            // A row lock held by a session the server has not ended yet fails this attempt (the
            // loop tries again) instead of holding the loop up.
            c.batch_execute(&format!("SET lock_timeout = {}", self.lease_ms.max(1)))?;
            self.client = Some(c);
        }
        let client = self.client.as_mut().expect("connected above");
        let res = (|| {
            let mut tx = client.transaction()?;
            tx.execute(
                "INSERT INTO meta VALUES ($1, '0 0 -') ON CONFLICT (key) DO NOTHING",
                &[&LEASE_KEY],
            )?;
            let r = tx.query_one(
                &format!("SELECT value, {SERVER_NOW_MS} FROM meta WHERE key = $1 FOR UPDATE"),
                &[&LEASE_KEY],
            )?;
            let row = LeaseRow::parse(&r.get::<_, String>(0))?;
            let now: i64 = r.get(1);
            let out = f(&mut tx, row, now)?;
            tx.commit()?;
            Ok(out)
        })();
        if res.is_err() {
            self.client = None;
        }
        res
    }

    fn write(tx: &mut Transaction<'_>, row: &LeaseRow) -> Result<(), StoreError> {
        tx.execute(
            "UPDATE meta SET value = $2 WHERE key = $1",
            &[&LEASE_KEY, &row.value()],
        )?;
        Ok(())
    }

    /// Takes the lease if it lapsed (the next term), else says who holds it.
    pub fn try_take(&mut self) -> Result<Take, StoreError> {
        let (holder, lease_ms) = (self.holder.clone(), self.lease_ms as i64);
        self.with_row(|tx, row, now| {
            if now < row.expires_ms {
                return Ok(Take::Held {
                    holder: row.holder,
                    remaining_ms: (row.expires_ms - now) as u64,
                });
            }
            let term = row.term + 1;
            PgLease::write(
                tx,
                &LeaseRow {
                    term,
                    expires_ms: now + lease_ms,
                    holder,
                },
            )?;
            Ok(Take::Took(term))
        })
    }

    /// Extends the lease of `term` by `lease_ms` from now; false when another MDS took it.
    pub fn renew(&mut self, term: u64) -> Result<bool, StoreError> {
        let (holder, lease_ms) = (self.holder.clone(), self.lease_ms as i64);
        self.with_row(|tx, row, now| {
            if row.term != term || row.holder != holder {
                return Ok(false);
            }
            let expires_ms = row.expires_ms.max(now + lease_ms);
            PgLease::write(
                tx,
                &LeaseRow {
                    term,
                    expires_ms,
                    holder,
                },
            )?;
            Ok(true)
        })
    }

    /// Gives the lease of `term` up (a clean stop): a standby may take it at once.
    pub fn release(&mut self, term: u64) -> Result<(), StoreError> {
        let holder = self.holder.clone();
        self.with_row(|tx, row, _| {
            if row.term == term && row.holder == holder {
                PgLease::write(
                    tx,
                    &LeaseRow {
                        expires_ms: 0,
                        ..row
                    },
                )?;
            }
            Ok(())
        })
    }

    /// The lease row as stored now.
    pub fn read(&mut self) -> Result<LeaseRow, StoreError> {
        self.with_row(|_, row, _| Ok(row))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{MetadataStore, Mutation};
    use crate::store_pg::PgStore;

    #[test]
    fn lease_rows_read_back() {
        let row = LeaseRow {
            term: 7,
            expires_ms: 1_700_000_000_000,
            holder: "127.0.0.1:7100 (pid 42)".into(),
        };
        assert_eq!(LeaseRow::parse(&row.value()).unwrap(), row);
        assert!(LeaseRow::parse("x 1 a").is_err());
        assert!(LeaseRow::parse("1 2").is_err());
    }

    /// One MDS takes the lease; another cannot while it lasts, takes it once it lapsed, and the
    /// first, deposed, can neither renew nor commit through its fenced store.
    #[test]
    fn a_lapsed_lease_moves_on_and_fences_the_deposed() {
        let Some(pg) = ecstack_testkit::postgres::shared() else {
            return;
        };
        let url = pg.create_db("lease");
        let mut a = PgLease::new(&url, "a:1 (pid 1)", 300);
        let mut b = PgLease::new(&url, "b:2 (pid 2)", 300);
        // The schema first (an MDS opens its store before it takes the lease).
        drop(PgStore::connect_fenced(&url, 0, 1_000).unwrap());
        assert_eq!(a.try_take().unwrap(), Take::Took(1));
        let mut store_a = PgStore::connect_fenced(&url, 1, 1_000).unwrap();
        let set = |v| {
            [Mutation::SetCounter {
                name: "test",
                value: v,
            }]
        };
        store_a.apply(&set(1)).unwrap();
        match b.try_take().unwrap() {
            Take::Held {
                holder,
                remaining_ms,
            } => {
                assert_eq!(holder, "a:1 (pid 1)");
                assert!(remaining_ms <= 300, "{remaining_ms}");
            }
            t => panic!("{t:?}"),
        }
        assert!(a.renew(1).unwrap());
        std::thread::sleep(std::time::Duration::from_millis(350));
        assert_eq!(b.try_take().unwrap(), Take::Took(2));
        assert!(!a.renew(1).unwrap());
        let e = store_a.apply(&set(2)).unwrap_err();
        assert!(matches!(e, StoreError::Deposed { mine: 1, now: 2 }), "{e}");
        let mut store_b = PgStore::connect_fenced(&url, 2, 1_000).unwrap();
        assert_eq!(store_b.counter("test").unwrap(), 1);
        store_b.apply(&set(3)).unwrap();
        b.release(2).unwrap();
        assert_eq!(a.try_take().unwrap(), Take::Took(3));
        assert_eq!(a.read().unwrap().holder, "a:1 (pid 1)");
    }

    /// An MDS stopped inside a transaction holding the lease row (as an `apply` holds it `FOR
    /// SHARE`) keeps its session open; the server ends that transaction after the stall time, so
    /// a standby takes the lapsed lease instead of waiting for the stopped MDS to resume.
    #[test]
    fn a_session_stopped_holding_the_lease_row_does_not_hold_a_takeover_up() {
        let Some(pg) = ecstack_testkit::postgres::shared() else {
            return;
        };
        let url = pg.create_db("lease_stall");
        let lease_ms = 400;
        drop(PgStore::connect_fenced(&url, 0, stall_ms(lease_ms)).unwrap());
        let mut a = PgLease::new(&url, "a:1 (pid 1)", lease_ms);
        let mut b = PgLease::new(&url, "b:2 (pid 2)", lease_ms);
        assert_eq!(a.try_take().unwrap(), Take::Took(1));
        // The stopped MDS's store session, in the middle of an apply's transaction.
        let mut stopped = pg_connect(&url, "stopped mds", Some(stall_ms(lease_ms))).unwrap();
        stopped.batch_execute("BEGIN").unwrap();
        stopped
            .query_one(
                "SELECT value FROM meta WHERE key = $1 FOR SHARE",
                &[&LEASE_KEY],
            )
            .unwrap();
        let start = std::time::Instant::now();
        let took = loop {
            match b.try_take() {
                Ok(Take::Took(term)) => break term,
                Ok(Take::Held { .. }) | Err(_) => {
                    assert!(
                        start.elapsed() < std::time::Duration::from_secs(10),
                        "the standby never took the lease"
                    );
                    std::thread::sleep(std::time::Duration::from_millis(50));
                }
            }
        };
        assert_eq!(took, 2);
        assert!(
            start.elapsed() < std::time::Duration::from_millis(3 * lease_ms),
            "{:?}",
            start.elapsed()
        );
        // The stopped session's transaction was ended: resumed, it commits nothing.
        assert!(stopped.batch_execute("COMMIT").is_err() || stopped.is_closed());
    }
}
