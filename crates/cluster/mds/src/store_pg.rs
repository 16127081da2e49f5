//! The metadata store in a PostgreSQL database (`[mds] store = "postgresql://…"`): the same
//! tables, schema versions and statements as the SQLite store ([`crate::store_sql`]), on an
//! existing database engine that can live on another machine than the MDS.
//!
//! - **Versions.** A new database starts at [`STORE_VERSION`] (the first version PostgreSQL stores
//!   have is 3, [`PG_STORE_VERSION_MIN`]); later versions add one migration to [`PG_MIGRATIONS`]
//!   beside the SQLite one, run in the transaction that writes the new version.
//! - **Durability.** Each `apply` is one transaction with `synchronous_commit = on` (set for the
//!   session, whatever the server's default), so it is on the server's disk when it returns.
//! - **One MDS.** The session holds an advisory lock ([`PG_LOCK_KEY`]) while the store lives; a
//!   second MDS on the same database is refused, naming the holder's `application_name` and
//!   address from `pg_stat_activity`. A session that dies (the MDS killed) releases it.
//! - **One round trip per batch.** An `apply`'s statements, its fence and its `COMMIT` are
//!   pipelined (sent together, answered in order): the MDS waits for the server once per
//!   batch, not once per statement. A statement that fails aborts the transaction, and the
//!   pipelined `COMMIT` then rolls it back; one that cannot be sent at all (its parameters do not
//!   encode) makes the batch end with `ROLLBACK` instead.
//! - **Connection.** No TLS (a unix socket or a trusted network); `connect_timeout` defaults to
//!   [`PG_CONNECT_TIMEOUT_S`] seconds, so an unreachable server is one error line, not a hang.

use std::cell::RefCell;
use std::collections::HashMap;
use std::error::Error as _;
use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use bytes::BytesMut;
use postgres::types::{to_sql_checked, IsNull, ToSql, Type};
use postgres::{Client, NoTls, Statement};

use ecstack_mds_proto::FileKind;

use crate::store::{
    check_meta, new_inode, now_ns, StoreError, COUNTER_INO, ROOT_INO, STORE_VERSION,
};
use crate::store_sql::{put_inode_stmt, set_counter_stmt, Db, Row, SqlStore, Stmt, Value};

/// The first schema version a PostgreSQL store has (the version PostgreSQL support came with).
pub const PG_STORE_VERSION_MIN: u32 = 3;
/// `PG_MIGRATIONS[i]` takes version `PG_STORE_VERSION_MIN + i` to the next. Never edit one.
const PG_MIGRATIONS: [&str; 1] = [
    // 3 → 4: robust files (`store_robust`).
    crate::store_robust::PG_SCHEMA_V4,
];
const _: () = assert!(STORE_VERSION == PG_STORE_VERSION_MIN + PG_MIGRATIONS.len() as u32);

/// The advisory lock key of the MDS's session ("ecstack" read as a number, below 2^32 so that
/// `pg_locks` shows it in `objid`).
pub const PG_LOCK_KEY: i64 = 0x6563_7374;
/// Default connect timeout, seconds (a URL's `connect_timeout` wins).
pub const PG_CONNECT_TIMEOUT_S: u64 = 10;

/// The schema of version 3, the tables of `SCHEMA_V1` and its migrations in the SQLite store
/// with PostgreSQL's types (`BIGINT` for every integer, `BYTEA` for bytes).
const PG_SCHEMA_V3: &str = "
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE counters (name TEXT PRIMARY KEY, value BIGINT NOT NULL);
CREATE TABLE osds (
    osd_id BIGINT PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    addr TEXT NOT NULL,
    capacity_bytes BIGINT NOT NULL,
    used_bytes BIGINT NOT NULL,
    state BIGINT NOT NULL,
    last_heartbeat_ms BIGINT NOT NULL
);
CREATE TABLE osd_labels (
    osd_id BIGINT NOT NULL REFERENCES osds(osd_id),
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY (osd_id, key)
);
CREATE TABLE files (
    file_id BIGINT PRIMARY KEY,
    path TEXT NOT NULL,
    size BIGINT NOT NULL,
    mtime_ms BIGINT NOT NULL,
    committed BIGINT NOT NULL,
    update_scheme BIGINT NOT NULL DEFAULT 0
);
CREATE TABLE segments (
    segment_id BIGINT PRIMARY KEY,
    file_id BIGINT NOT NULL REFERENCES files(file_id),
    seg_index BIGINT NOT NULL,
    length BIGINT NOT NULL,
    primary_osd BIGINT NOT NULL,
    epoch BIGINT NOT NULL,
    version BIGINT NOT NULL,
    UNIQUE (file_id, seg_index)
);
CREATE INDEX segments_primary ON segments(primary_osd);
CREATE TABLE chunks (
    segment_id BIGINT NOT NULL REFERENCES segments(segment_id),
    chunk_index BIGINT NOT NULL,
    osd_id BIGINT,
    state BIGINT NOT NULL,
    PRIMARY KEY (segment_id, chunk_index)
);
CREATE INDEX chunks_osd ON chunks(osd_id);
CREATE INDEX chunks_state ON chunks(state);
CREATE TABLE delete_tasks (
    osd_id BIGINT NOT NULL,
    segment_id BIGINT NOT NULL,
    chunk_index BIGINT NOT NULL,
    PRIMARY KEY (osd_id, segment_id, chunk_index)
);
CREATE TABLE recovery (
    id BIGINT PRIMARY KEY CHECK (id = 0),
    chunks_total BIGINT NOT NULL,
    chunks_done BIGINT NOT NULL,
    bytes_done BIGINT NOT NULL,
    started_ms BIGINT NOT NULL,
    finished_ms BIGINT NOT NULL
);
INSERT INTO recovery VALUES (0, 0, 0, 0, 0, 0);
CREATE TABLE inodes (
    ino BIGINT PRIMARY KEY,
    kind BIGINT NOT NULL,
    mode BIGINT NOT NULL,
    uid BIGINT NOT NULL,
    gid BIGINT NOT NULL,
    nlink BIGINT NOT NULL,
    size BIGINT NOT NULL,
    rdev BIGINT NOT NULL,
    atime_ns BIGINT NOT NULL,
    mtime_ns BIGINT NOT NULL,
    ctime_ns BIGINT NOT NULL,
    version BIGINT NOT NULL,
    file_id BIGINT UNIQUE REFERENCES files(file_id),
    target BYTEA
);
CREATE TABLE dentries (
    parent BIGINT NOT NULL REFERENCES inodes(ino),
    name BYTEA NOT NULL,
    ino BIGINT NOT NULL REFERENCES inodes(ino),
    PRIMARY KEY (parent, name)
);
CREATE INDEX dentries_ino ON dentries(ino);
CREATE TABLE xattrs (
    ino BIGINT NOT NULL REFERENCES inodes(ino),
    name BYTEA NOT NULL,
    value BYTEA NOT NULL,
    PRIMARY KEY (ino, name)
);
";

/// The metadata store in a PostgreSQL database.
pub type PgStore = SqlStore<PgDb>;

/// The PostgreSQL engine under [`PgStore`]: one session (holding the MDS's advisory lock) and its
/// prepared statements.
pub struct PgDb {
    session: RefCell<Session>,
    /// The lease term this store's MDS holds ([`crate::lease`]): each `apply` checks in its
    /// transaction that the store is still at that term, so a deposed MDS commits nothing.
    /// `None`: the store is locked to one MDS instead (advisory lock).
    fence: Option<u64>,
}

/// The store's session: a tokio-postgres client on a runtime of its own (one thread: the
/// connection is driven while a request is awaited), so that a batch's requests can be pipelined,
/// which the synchronous client cannot do.
struct Session {
    rt: tokio::runtime::Runtime,
    client: tokio_postgres::Client,
    /// Prepared statements by their `?N` text.
    prepared: HashMap<String, Statement>,
}

/// The SQLSTATE the fence function raises for a deposed MDS.
const DEPOSED_SQLSTATE: &str = "EC001";

/// The fenced store's check, one statement of each batch: the lease row's term, held `FOR SHARE`
/// (a takeover's update of the lease row waits for this transaction, so what it commits is seen
/// by the MDS that takes over), and an error ([`DEPOSED_SQLSTATE`], the store's term in its
/// detail) when it is not this MDS's. A function of the session (`pg_temp`), not of the schema.
fn fence_function() -> String {
    format!(
        "CREATE FUNCTION pg_temp.ecstack_fence(mine BIGINT) RETURNS BIGINT LANGUAGE plpgsql AS $f$
         DECLARE now BIGINT;
         BEGIN
             SELECT CAST(split_part(value, ' ', 1) AS BIGINT) INTO now FROM meta
             WHERE key = '{key}' FOR SHARE;
             IF now IS DISTINCT FROM mine THEN
                 RAISE EXCEPTION USING ERRCODE = '{DEPOSED_SQLSTATE}',
                     MESSAGE = format('this MDS holds lease term %s; the store is at %s', mine, COALESCE(now, 0)),
                     DETAIL = COALESCE(now, 0)::TEXT;
             END IF;
             RETURN now;
         END $f$",
        key = crate::lease::LEASE_KEY
    )
}

const FENCE_SQL: &str = "SELECT pg_temp.ecstack_fence(?1)";

/// A request of a pipelined batch.
type Request<'a> = Pin<Box<dyn Future<Output = Result<u64, postgres::Error>> + Send + 'a>>;

/// Sends `requests` (each when first polled, in order), then `COMMIT` — or `ROLLBACK` when one
/// failed before it was sent (a failure this early is the client's: its parameters did not
/// encode, or the session is gone) — and waits for every answer. The requests' results, then the
/// end's.
async fn pipelined<'a>(
    client: &'a tokio_postgres::Client,
    mut requests: Vec<Request<'a>>,
) -> (
    Vec<Result<u64, postgres::Error>>,
    Result<(), postgres::Error>,
) {
    let mut done: Vec<Option<Result<u64, postgres::Error>>> =
        requests.iter().map(|_| None).collect();
    let mut end: Option<Pin<Box<dyn Future<Output = Result<(), postgres::Error>> + Send + 'a>>> =
        None;
    let mut end_done = None;
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (r, d) in requests.iter_mut().zip(done.iter_mut()) {
            if d.is_none() {
                match r.as_mut().poll(cx) {
                    Poll::Ready(v) => *d = Some(v),
                    Poll::Pending => pending = true,
                }
            }
        }
        if end.is_none() {
            // The first pass sent every request: none could have its answer yet (the
            // connection runs only when this future waits), so one ready is the client's failure.
            let unsent = done.iter().any(|d| matches!(d, Some(Err(_))));
            end = Some(Box::pin(client.batch_execute(if unsent {
                "ROLLBACK"
            } else {
                "COMMIT"
            })));
        }
        if end_done.is_none() {
            match end.as_mut().expect("made above").as_mut().poll(cx) {
                Poll::Ready(v) => end_done = Some(v),
                Poll::Pending => pending = true,
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    (
        done.into_iter()
            .map(|d| d.expect("every request answered"))
            .collect(),
        end_done.expect("the end answered"),
    )
}

/// `url` without its password, for messages.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let shown = match authority.rsplit_once('@') {
        Some((user_info, host)) => match user_info.split_once(':') {
            Some((user, _password)) => format!("{user}:***@{host}"),
            None => authority.to_owned(),
        },
        None => authority.to_owned(),
    };
    let tail = match tail.find("password=") {
        Some(i) => {
            let end = tail[i..].find('&').map_or(tail.len(), |e| i + e);
            format!("{}password=***{}", &tail[..i], &tail[end..])
        }
        None => tail.to_owned(),
    };
    format!("{scheme}://{shown}{tail}")
}

/// One line for a client error: the server's own message when it sent one.
fn pg_message(e: &postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        return format!("{}: {}", db.severity(), db.message());
    }
    match e.source() {
        Some(cause) => format!("{e}: {cause}"),
        None => e.to_string(),
    }
}

impl From<postgres::Error> for StoreError {
    fn from(e: postgres::Error) -> Self {
        StoreError::Db(pg_message(&e))
    }
}

/// PostgreSQL's parameters are `$N` where the shared SQL has `?N`.
fn pg_sql(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '?' && chars.peek().is_some_and(|d| d.is_ascii_digit()) {
            out.push('$');
        } else {
            out.push(c);
        }
    }
    out
}

/// A shared [`Value`] as the parameter type PostgreSQL inferred for its place.
#[derive(Debug)]
struct Param<'a>(&'a Value);

impl ToSql for Param<'_> {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match self.0 {
            Value::Null => Ok(IsNull::Yes),
            Value::Integer(v) => match *ty {
                Type::INT8 => v.to_sql(ty, out),
                Type::INT4 => i32::try_from(*v)?.to_sql(ty, out),
                Type::INT2 => i16::try_from(*v)?.to_sql(ty, out),
                _ => Err(format!("an integer for a parameter of type {ty}").into()),
            },
            Value::Real(v) => v.to_sql(ty, out),
            Value::Text(s) => s.as_str().to_sql(ty, out),
            Value::Blob(b) => b.as_slice().to_sql(ty, out),
        }
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    to_sql_checked!();
}

/// A result row as shared [`Value`]s, by each column's type.
fn row_of(r: &postgres::Row) -> Result<Row, postgres::Error> {
    (0..r.len())
        .map(|i| {
            let int = |v: Option<i64>| v.map_or(Value::Null, Value::Integer);
            Ok(match *r.columns()[i].type_() {
                Type::INT8 => int(r.try_get::<_, Option<i64>>(i)?),
                Type::INT4 => int(r.try_get::<_, Option<i32>>(i)?.map(i64::from)),
                Type::INT2 => int(r.try_get::<_, Option<i16>>(i)?.map(i64::from)),
                Type::BOOL => int(r.try_get::<_, Option<bool>>(i)?.map(i64::from)),
                Type::BYTEA => r
                    .try_get::<_, Option<Vec<u8>>>(i)?
                    .map_or(Value::Null, Value::Blob),
                _ => r
                    .try_get::<_, Option<String>>(i)?
                    .map_or(Value::Null, Value::Text),
            })
        })
        .collect()
}

impl Session {
    fn connect(url: &str, what: &str, stall_ms: Option<u64>) -> Result<Session, String> {
        let config = pg_config(url, what, stall_ms)?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("cannot make the PostgreSQL session's runtime: {e}"))?;
        let (client, connection) = rt
            .block_on(config.connect(NoTls))
            .map_err(|e| pg_message(&e))?;
        rt.spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!("PostgreSQL session ended: {}", pg_message(&e));
            }
        });
        Ok(Session {
            rt,
            client,
            prepared: HashMap::new(),
        })
    }

    fn statement(&mut self, sql: &str) -> Result<Statement, postgres::Error> {
        if let Some(s) = self.prepared.get(sql) {
            return Ok(s.clone());
        }
        let s = self.rt.block_on(self.client.prepare(&pg_sql(sql)))?;
        self.prepared.insert(sql.to_owned(), s.clone());
        Ok(s)
    }

    fn batch_execute(&self, sql: &str) -> Result<(), postgres::Error> {
        self.rt.block_on(self.client.batch_execute(sql))
    }

    fn query_one(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<postgres::Row, postgres::Error> {
        self.rt.block_on(self.client.query_one(sql, params))
    }

    fn query_opt(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<postgres::Row>, postgres::Error> {
        self.rt.block_on(self.client.query_opt(sql, params))
    }

    fn execute(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<u64, postgres::Error> {
        self.rt.block_on(self.client.execute(sql, params))
    }

    /// Runs `f` in a transaction: committed when it succeeds, rolled back when it fails.
    fn in_transaction(
        &self,
        f: impl FnOnce(&Session) -> Result<(), postgres::Error>,
    ) -> Result<(), postgres::Error> {
        self.batch_execute("BEGIN")?;
        match f(self) {
            Ok(()) => self.batch_execute("COMMIT"),
            Err(e) => {
                let _ = self.batch_execute("ROLLBACK");
                Err(e)
            }
        }
    }
}

fn params(args: &[Value]) -> Vec<Param<'_>> {
    args.iter().map(Param).collect()
}

fn refs<'a>(p: &'a [Param<'a>]) -> Vec<&'a (dyn ToSql + Sync)> {
    p.iter().map(|p| p as &(dyn ToSql + Sync)).collect()
}

impl Db for PgDb {
    fn transact(&mut self, stmts: &[Stmt]) -> Result<(), StoreError> {
        let session = self.session.get_mut();
        let fence = match self.fence {
            Some(mine) => Some((
                mine,
                crate::store_sql::int(mine),
                session.statement(FENCE_SQL)?,
            )),
            None => None,
        };
        let prepared = stmts
            .iter()
            .map(|s| session.statement(s.sql))
            .collect::<Result<Vec<_>, _>>()?;
        let params: Vec<Vec<Param<'_>>> = stmts.iter().map(|s| params(&s.args)).collect();
        let refs: Vec<Vec<&(dyn ToSql + Sync)>> = params.iter().map(|p| refs(p)).collect();
        let fence_args: Vec<&(dyn ToSql + Sync)> = fence
            .iter()
            .map(|(_, mine, _)| mine as &(dyn ToSql + Sync))
            .collect();
        let client = &session.client;
        let mut requests: Vec<Request<'_>> = Vec::with_capacity(stmts.len() + 2);
        requests.push(Box::pin(async move {
            client.batch_execute("BEGIN").await.map(|()| 0)
        }));
        if let Some((_, _, statement)) = &fence {
            requests.push(Box::pin(client.execute(statement, &fence_args)));
        }
        for (statement, r) in prepared.iter().zip(&refs) {
            requests.push(Box::pin(client.execute(statement, r)));
        }
        let (answers, end) = session.rt.block_on(pipelined(client, requests));
        // The first error is what went wrong: the requests after it were refused because the
        // transaction had aborted, and the `COMMIT` rolled it back.
        for a in answers {
            if let Err(e) = a {
                if let (Some((mine, ..)), Some(db)) = (fence.as_ref(), e.as_db_error()) {
                    if db.code().code() == DEPOSED_SQLSTATE {
                        let now = db.detail().and_then(|d| d.parse().ok()).unwrap_or(0);
                        return Err(StoreError::Deposed { mine: *mine, now });
                    }
                }
                return Err(e.into());
            }
        }
        end?;
        Ok(())
    }

    fn query(&self, sql: &str, args: &[Value]) -> Result<Vec<Row>, StoreError> {
        let mut session = self.session.borrow_mut();
        let statement = session.statement(sql)?;
        let p = params(args);
        let rows = session
            .rt
            .block_on(session.client.query(&statement, &refs(&p)))?;
        Ok(rows.iter().map(row_of).collect::<Result<_, _>>()?)
    }

    fn backup_source(&self) -> Result<std::path::PathBuf, StoreError> {
        Err(StoreError::Db(
            "a PostgreSQL store is backed up with pg_dump (`ecstack cluster backup` runs it)"
                .into(),
        ))
    }
}

impl Drop for PgDb {
    fn drop(&mut self) {
        // Release the lock before the socket closes, so a reopen right after this drop finds it
        // free (the server notices a closed socket only later).
        let _ = self
            .session
            .get_mut()
            .batch_execute("SELECT pg_advisory_unlock_all()");
    }
}

/// A session with the database `url` names (`what`: which part of the MDS, for
/// `application_name`), with [`PG_CONNECT_TIMEOUT_S`] unless the URL sets one and
/// `synchronous_commit` on; the error as one line.
/// Connects to `url` as `what`. With `stall_ms`, the server ends a transaction of this session
/// left idle that long (`idle_in_transaction_session_timeout`): a stopped MDS (SIGSTOP, a frozen
/// VM) keeps its TCP session open, and a row it holds (the lease row `FOR SHARE` in an `apply`,
/// `FOR UPDATE` in a renewal) would otherwise block a standby's takeover until it resumes.
pub(crate) fn pg_connect(url: &str, what: &str, stall_ms: Option<u64>) -> Result<Client, String> {
    postgres::Config::from(pg_config(url, what, stall_ms)?)
        .connect(NoTls)
        .map_err(|e| pg_message(&e))
}

/// [`pg_connect`]'s configuration.
fn pg_config(
    url: &str,
    what: &str,
    stall_ms: Option<u64>,
) -> Result<tokio_postgres::Config, String> {
    let mut config: tokio_postgres::Config = url
        .parse()
        .map_err(|e: postgres::Error| format!("not a PostgreSQL URL: {}", pg_message(&e)))?;
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(Duration::from_secs(PG_CONNECT_TIMEOUT_S));
    }
    config.application_name(&format!("ecstack {what} pid {}", std::process::id()));
    let mut options = "-c synchronous_commit=on".to_owned();
    if let Some(ms) = stall_ms {
        options.push_str(&format!(
            " -c idle_in_transaction_session_timeout={}",
            ms.max(1)
        ));
    }
    config.options(&options);
    Ok(config)
}

impl SqlStore<PgDb> {
    /// Connects to the database `url` names (`postgresql://user@host:port/db`, or with
    /// `?host=/socket/dir`), takes the MDS's lock, and creates the schema in an empty database;
    /// refuses a database holding other tables, another version, or another MDS's session.
    pub fn connect(url: &str) -> Result<PgStore, StoreError> {
        PgStore::open(url, None)
    }

    /// Connects to the database `url` names for the MDS holding lease `term` ([`crate::lease`]):
    /// no advisory lock (the standby shares the database), and every `apply` commits only while
    /// the store's lease is still at `term`. A transaction of its session left idle `stall_ms`
    /// (the MDS stopped in it) is ended by the server, so it cannot hold a takeover up.
    pub fn connect_fenced(url: &str, term: u64, stall_ms: u64) -> Result<PgStore, StoreError> {
        PgStore::open(url, Some((term, stall_ms)))
    }

    fn open(url: &str, fenced: Option<(u64, u64)>) -> Result<PgStore, StoreError> {
        let fence = fenced.map(|(term, _)| term);
        let at = redact_url(url);
        let open = |message: String| StoreError::Open {
            at: at.clone(),
            message,
        };
        let session = Session::connect(url, "mds", fenced.map(|(_, ms)| ms)).map_err(open)?;
        let mut store = SqlStore {
            db: PgDb {
                session: RefCell::new(session),
                fence,
            },
            loads: Default::default(),
            rows: crate::store_sql::RowCache::new(),
        };
        if fence.is_none() {
            store.lock(&at)?;
        }
        store.check_or_init(&at)?;
        store.rows.clear();
        if fence.is_some() {
            store.session().batch_execute(&fence_function())?;
        }
        Ok(store)
    }

    fn session(&mut self) -> &mut Session {
        self.db.session.get_mut()
    }

    /// Takes the MDS's advisory lock for this session, or refuses naming the session holding it.
    fn lock(&mut self, at: &str) -> Result<(), StoreError> {
        let got: bool = self
            .session()
            .query_one("SELECT pg_try_advisory_lock($1)", &[&PG_LOCK_KEY])?
            .get(0);
        if got {
            return Ok(());
        }
        let holder = self
            .session()
            .query_opt(
                "SELECT a.application_name, COALESCE(host(a.client_addr), 'local socket'), a.pid
                 FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
                 WHERE l.locktype = 'advisory' AND l.granted AND l.classid = 0 AND l.objid = $1
                 AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())",
                &[&(PG_LOCK_KEY as u32)],
            )?
            .map(|r| {
                format!(
                    "{}, from {}, server pid {}",
                    r.get::<_, String>(0),
                    r.get::<_, String>(1),
                    r.get::<_, i32>(2)
                )
            })
            .unwrap_or_else(|| "holder not found in pg_locks".into());
        Err(StoreError::Locked {
            path: at.to_owned(),
            holder,
        })
    }

    fn check_or_init(&mut self, at: &str) -> Result<(), StoreError> {
        let tables: i64 = self
            .session()
            .query_one(
                "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = current_schema()",
                &[],
            )?
            .get(0);
        let has_meta: bool = self
            .session()
            .query_one(
                "SELECT COUNT(*) > 0 FROM information_schema.tables
                 WHERE table_schema = current_schema() AND table_name = 'meta'",
                &[],
            )?
            .get(0);
        if !has_meta {
            if tables > 0 {
                return Err(StoreError::NotAStore {
                    at: at.to_owned(),
                    found: String::new(),
                });
            }
            self.session().in_transaction(|tx| {
                tx.batch_execute(PG_SCHEMA_V3)?;
                for m in PG_MIGRATIONS {
                    tx.batch_execute(m)?;
                }
                // What the SQLite store's migration to version 3 makes: the root directory.
                let root = new_inode(ROOT_INO, FileKind::Dir, 0o755, now_ns());
                for s in [
                    put_inode_stmt(&root),
                    set_counter_stmt(COUNTER_INO, ROOT_INO),
                ] {
                    let p = params(&s.args);
                    tx.execute(&pg_sql(s.sql), &refs(&p))?;
                }
                tx.execute(
                    "INSERT INTO meta VALUES ('marker', $1), ('version', $2)",
                    &[&crate::store::STORE_MARKER, &STORE_VERSION.to_string()],
                )?;
                Ok(())
            })?;
            return Ok(());
        }
        let mut get = |key: &str| -> Result<String, StoreError> {
            Ok(self
                .session()
                .query_opt("SELECT value FROM meta WHERE key = $1", &[&key])?
                .map(|r| r.get(0))
                .unwrap_or_default())
        };
        let (marker, version) = (get("marker")?, get("version")?);
        match check_meta(at, marker, version, PG_STORE_VERSION_MIN)? {
            None => Ok(()),
            Some(from) => {
                self.session().in_transaction(|tx| {
                    for m in &PG_MIGRATIONS[(from - PG_STORE_VERSION_MIN) as usize..] {
                        tx.batch_execute(m)?;
                    }
                    tx.execute(
                        "UPDATE meta SET value = $1 WHERE key = 'version'",
                        &[&STORE_VERSION.to_string()],
                    )?;
                    Ok(())
                })?;
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MetadataStore;
    use crate::store_sql::Db;

    fn server() -> Option<&'static ecstack_testkit::postgres::TempPostgres> {
        ecstack_testkit::postgres::shared()
    }

    #[test]
    fn postgresql_passes_the_store_suite() {
        let Some(pg) = server() else { return };
        let url = pg.create_db("suite");
        crate::store_suite::run(&|| {
            Box::new(PgStore::connect(&url).unwrap()) as Box<dyn MetadataStore>
        });
    }

    /// A database of version 3 (what this code's first PostgreSQL release made: the frozen
    /// [`PG_SCHEMA_V3`], its root and a file) is migrated on open, keeping what it held, and
    /// ends with a new database's schema.
    #[test]
    fn a_version_3_database_is_migrated_on_open() {
        let Some(pg) = server() else { return };
        let url = pg.create_db("v3");
        {
            let mut c = Client::connect(&url, NoTls).unwrap();
            c.batch_execute(PG_SCHEMA_V3).unwrap();
            c.batch_execute(
                "INSERT INTO meta VALUES ('marker', 'ecstack-mds-store'), ('version', '3');
                 INSERT INTO files VALUES (5, '/a', 7, 1700000000000, 1, 3);",
            )
            .unwrap();
        }
        let store = PgStore::connect(&url).unwrap();
        let f = store.file(5).unwrap().unwrap();
        assert_eq!(
            (f.size, f.scheme),
            (7, ecstack_mds_proto::UpdateScheme::Plr)
        );
        assert!(store.robust_file(5).unwrap().is_none());
        assert_eq!(store.robust_census().unwrap(), (0, Vec::new()));
        drop(store);
        let columns = |url: &str| -> Vec<(String, String, String)> {
            let mut c = Client::connect(url, NoTls).unwrap();
            let mut cols: Vec<(String, String, String)> = c
                .query(
                    "SELECT table_name::text, column_name::text, data_type::text FROM information_schema.columns
                     WHERE table_schema = current_schema()",
                    &[],
                )
                .unwrap()
                .iter()
                .map(|r| (r.get(0), r.get(1), r.get(2)))
                .collect();
            cols.sort();
            cols
        };
        let fresh = pg.create_db("v4fresh");
        drop(PgStore::connect(&fresh).unwrap());
        assert_eq!(columns(&url), columns(&fresh));
        let mut c = Client::connect(&url, NoTls).unwrap();
        let v: String = c
            .query_one("SELECT value FROM meta WHERE key = 'version'", &[])
            .unwrap()
            .get(0);
        assert_eq!(v, STORE_VERSION.to_string());
    }

    /// A pipelined batch is all or nothing: a statement the server refuses (a duplicate key) and
    /// one the client cannot send (an integer for a text parameter) each leave nothing of their
    /// batch committed, and the session goes on.
    #[test]
    fn a_failing_statement_commits_nothing_of_its_batch() {
        let Some(pg) = server() else { return };
        let url = pg.create_db("pipelined");
        let mut store = PgStore::connect(&url).unwrap();
        let set = |name: &str, value: i64| {
            crate::store_sql::stmt(
                "INSERT INTO counters VALUES (?1, ?2)",
                vec![Value::Text(name.into()), Value::Integer(value)],
            )
        };
        let count = |store: &PgStore, name: &str| {
            store
                .db
                .query(
                    "SELECT COUNT(*) FROM counters WHERE name = ?1",
                    &[Value::Text(name.into())],
                )
                .unwrap()[0][0]
                .clone()
        };
        // Refused by the server: the second insert's key is the first's.
        let e = store
            .db
            .transact(&[set("a", 1), set("b", 2), set("a", 3)])
            .unwrap_err();
        assert!(e.to_string().contains("duplicate key"), "{e}");
        // Refused by the client before it was sent: the batch ends with ROLLBACK.
        let unsendable = crate::store_sql::stmt(
            "INSERT INTO counters VALUES (?1, ?2)",
            vec![Value::Integer(7), Value::Integer(1)],
        );
        let e = store
            .db
            .transact(&[set("c", 1), unsendable, set("d", 1)])
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("an integer for a parameter of type text"),
            "{e}"
        );
        for name in ["a", "b", "c", "d"] {
            assert_eq!(count(&store, name), Value::Integer(0), "{name}");
        }
        store.db.transact(&[set("a", 1), set("b", 2)]).unwrap();
        assert_eq!(count(&store, "a"), Value::Integer(1));
        assert_eq!(count(&store, "b"), Value::Integer(1));
    }

    /// A second MDS on one database is refused while the first lives, naming its session.
    #[test]
    fn a_second_mds_on_one_database_is_refused() {
        let Some(pg) = server() else { return };
        let url = pg.create_db("locked");
        let first = PgStore::connect(&url).unwrap();
        let e = PgStore::connect(&url).err().unwrap().to_string();
        assert_eq!(
            e,
            format!(
                "metadata store {url} is in use by another MDS (ecstack mds pid {}, from local socket, server pid {}); stop it first, or give this MDS a store of its own",
                std::process::id(),
                e.rsplit("server pid ").next().unwrap().split(')').next().unwrap()
            )
        );
        drop(first);
        PgStore::connect(&url).unwrap();
    }

    /// A bad URL, an unreachable server, a missing database, a database of something else or of
    /// an unknown version: one line each.
    #[test]
    fn bad_stores_are_refused_with_one_line() {
        let line = |url: &str| {
            let e = PgStore::connect(url).err().unwrap().to_string();
            assert_eq!(e.lines().count(), 1, "{e}");
            e
        };
        let e = line("postgresql://mds@127.0.0.1:1/x?connect_timeout=zz");
        assert!(e.contains("not a PostgreSQL URL"), "{e}");
        let e = line("postgresql://mds:pw@127.0.0.1:1/x");
        assert!(
            e.starts_with("cannot open metadata store postgresql://mds:***@127.0.0.1:1/x: error connecting to server"),
            "{e}"
        );
        let Some(pg) = server() else { return };
        let e = line(&pg.url("absent"));
        assert!(e.contains("database \"absent\" does not exist"), "{e}");
        let url = pg.create_db("other");
        {
            let mut c = Client::connect(&url, NoTls).unwrap();
            c.batch_execute("CREATE TABLE t (x INTEGER)").unwrap();
        }
        let e = line(&url);
        assert!(e.contains("is not an ecstack MDS store"), "{e}");
        let url = pg.create_db("future");
        drop(PgStore::connect(&url).unwrap());
        {
            let mut c = Client::connect(&url, NoTls).unwrap();
            c.batch_execute("UPDATE meta SET value = '9' WHERE key = 'version'")
                .unwrap();
        }
        assert_eq!(
            line(&url),
            format!("metadata store {url} has schema version 9; this ecstack reads versions 3 to {STORE_VERSION} only")
        );
    }

    #[test]
    fn urls_lose_their_password_in_messages() {
        assert_eq!(
            redact_url("postgresql://mds:secret@db.example:5432/ecstack"),
            "postgresql://mds:***@db.example:5432/ecstack"
        );
        assert_eq!(
            redact_url("postgresql://mds@db/ecstack?password=s3&sslmode=disable"),
            "postgresql://mds@db/ecstack?password=***&sslmode=disable"
        );
        assert_eq!(
            redact_url("postgresql:///ecstack?host=/tmp/pg"),
            "postgresql:///ecstack?host=/tmp/pg"
        );
    }

    #[test]
    fn parameters_are_renumbered_for_postgresql() {
        assert_eq!(
            pg_sql("SELECT a FROM t WHERE x = ?1 AND y > ?12"),
            "SELECT a FROM t WHERE x = $1 AND y > $12"
        );
    }
}
