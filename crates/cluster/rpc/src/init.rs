//! `ecstack cluster init` and `ecstack cluster cert`: a new cluster's id, certificate authority,
//! one certificate per process and `cluster.toml`.
//!
//! Layout of a cluster directory:
//!
//! ```text
//! DIR/cluster.toml        the ClusterConfig every process reads
//! DIR/certs/ca.pem        the cluster's CA certificate (public; every process trusts it)
//! DIR/certs/ca.key        the CA's private key (0600; only `cluster cert` needs it)
//! DIR/certs/NAME.pem      one certificate per process: mds, osd-0 … osd-N-1, client, client-1 …,
//!                         admin
//! DIR/certs/NAME.key      its private key (0600)
//! DIR/mds.db              the MDS's SQLite store (made by the MDS, not here)
//! ```
//!
//! Keys are ECDSA P-256. Every process certificate carries the DNS name [`CLUSTER_DNS_NAME`] (the
//! name clients verify servers against), its role as the URI `urn:ecstack:role:<role>`
//! ([`crate::roles`]: what it may call), the common name of its process (`mds`, `osd-3`,
//! `client`, `admin`), the organization `ecstack cluster <id>`, and the client authentication
//! usage; MDS and OSD certificates also the server one (they serve; clients and admins only
//! call, so their certificates cannot pass for a server). The CA, not the name, ties a
//! certificate to its cluster.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration as StdDuration;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType, SerialNumber,
};
use ring::rand::SecureRandom;

use crate::config::{
    ClusterConfig, CodeConfig, ConfigError, MdsConfig, PlacementConfig, UpdateConfig,
    DEFAULT_SEGMENT_BYTES,
};
use crate::roles::Role;
use crate::security::CLUSTER_DNS_NAME;
use crate::UpdateScheme;

/// Name of the config file inside a cluster directory.
pub const CONFIG_FILE: &str = "cluster.toml";
/// Name of the certificate directory inside a cluster directory.
pub const CERTS_DIR: &str = "certs";
/// Default MDS address (clients and OSDs connect here).
pub const DEFAULT_MDS_ADDR: &str = "127.0.0.1:7100";
/// Default metrics address of the MDS: a loopback port chosen at start and logged.
pub const DEFAULT_METRICS_ADDR: &str = "127.0.0.1:0";
/// Default SQLite file of the MDS, relative to the cluster directory.
pub const DEFAULT_MDS_STORE: &str = "mds.db";
/// OSDs heartbeat every 500 ms …
pub const DEFAULT_HEARTBEAT_MS: u64 = 500;
/// … are down after 3 s without one (6 missed beats: one slow fsync or GC pause is no failure) …
pub const DEFAULT_DOWN_AFTER_MS: u64 = 3_000;
/// … and out after 30 s (a restart catches up in place; a longer absence is rebuilt elsewhere).
pub const DEFAULT_OUT_AFTER_MS: u64 = 30_000;
/// Certificates are valid this long from their creation.
pub const CERT_VALIDITY_DAYS: u64 = 3_650;
/// Largest number of OSD or client certificates one `init` makes.
pub const PROCESSES_MAX: u32 = 4_096;

#[derive(Debug, thiserror::Error)]
pub enum InitError {
    #[error("{path} already holds a cluster; pass --force to replace it (its config, certificates and MDS database are deleted)")]
    ClusterExists { path: PathBuf },
    #[error("{path} already exists; pass --force to replace it")]
    Exists { path: PathBuf },
    #[error("{0}")]
    Invalid(String),
    #[error("cannot write {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("certificate: {0}")]
    Cert(String),
    #[error(transparent)]
    Config(#[from] ConfigError),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> InitError + '_ {
    move |source| InitError::Io {
        path: path.to_owned(),
        source,
    }
}

fn cert_err(e: rcgen::Error) -> InitError {
    InitError::Cert(e.to_string())
}

/// What `ecstack cluster init` makes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InitOptions {
    pub osds: u32,
    pub clients: u32,
    pub code: String,
    pub k: u32,
    pub m: u32,
    pub segment_bytes: u64,
    pub failure_domain: Option<String>,
    pub mds_addr: String,
    /// `[update] scheme`: the scheme of a new file whose put names none.
    pub update_scheme: UpdateScheme,
    /// Replace an existing cluster in the directory.
    pub force: bool,
}

impl Default for InitOptions {
    fn default() -> InitOptions {
        InitOptions {
            osds: 8,
            clients: 1,
            code: "rs-vand".to_owned(),
            k: 6,
            m: 2,
            segment_bytes: DEFAULT_SEGMENT_BYTES,
            failure_domain: None,
            mds_addr: DEFAULT_MDS_ADDR.to_owned(),
            update_scheme: UpdateScheme::Fo,
            force: false,
        }
    }
}

/// The process names `init` certifies: `mds`, `osd-0` … `osd-{osds-1}`, `client`, `client-1` …,
/// `admin` (for `osd out`; see [`crate::roles`]).
pub fn process_names(osds: u32, clients: u32) -> Vec<String> {
    let mut names = vec!["mds".to_owned()];
    names.extend((0..osds).map(|i| format!("osd-{i}")));
    names.extend((0..clients).map(|i| {
        if i == 0 {
            "client".to_owned()
        } else {
            format!("client-{i}")
        }
    }));
    names.push("admin".to_owned());
    names
}

/// A process name is 1–64 characters of `a-z`, `0-9` and `-`, starting with a letter, and not
/// `ca` (it names the file stem of its certificate and key).
pub fn check_process_name(name: &str) -> Result<(), InitError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if !ok || name == "ca" {
        return Err(InitError::Invalid(format!(
            "process name {name:?}: expected 1-64 characters of a-z, 0-9 and '-', starting with a letter, not \"ca\""
        )));
    }
    Ok(())
}

/// A fresh random cluster id: 16 random bytes from the system's secure generator, in hex.
fn new_cluster_id() -> Result<String, InitError> {
    let mut bytes = [0u8; 16];
    ring::rand::SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| InitError::Cert("the system random generator failed".to_owned()))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

fn random_serial() -> Result<SerialNumber, InitError> {
    let mut bytes = [0u8; 16];
    ring::rand::SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| InitError::Cert("the system random generator failed".to_owned()))?;
    bytes[0] &= 0x7f; // a positive INTEGER
    bytes[0] |= 0x01; // and never a leading zero byte
    Ok(SerialNumber::from_slice(&bytes))
}

fn organization(cluster_id: &str) -> String {
    format!("ecstack cluster {cluster_id}")
}

/// Validity: from one day ago (clocks of the cluster's machines may differ) for
/// [`CERT_VALIDITY_DAYS`].
fn set_validity(params: &mut CertificateParams) {
    let now = rcgen::date_time_ymd(1970, 1, 1)
        + std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or(StdDuration::ZERO);
    params.not_before = now - StdDuration::from_secs(86_400);
    params.not_after = now + StdDuration::from_secs(CERT_VALIDITY_DAYS * 86_400);
}

fn ca_params(cluster_id: &str) -> Result<CertificateParams, InitError> {
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(
        DnType::CommonName,
        format!("ecstack cluster CA {cluster_id}"),
    );
    dn.push(DnType::OrganizationName, organization(cluster_id));
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.serial_number = Some(random_serial()?);
    set_validity(&mut params);
    Ok(params)
}

/// `role` `None`: a certificate as `init` made them before roles (both usages, no role URI);
/// only tests of the upgrade path want one.
fn process_params(
    cluster_id: &str,
    name: &str,
    role: Option<Role>,
) -> Result<CertificateParams, InitError> {
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, name);
    dn.push(DnType::OrganizationName, organization(cluster_id));
    params.distinguished_name = dn;
    params.subject_alt_names = vec![SanType::DnsName(
        CLUSTER_DNS_NAME.try_into().map_err(cert_err)?,
    )];
    if let Some(role) = role {
        params
            .subject_alt_names
            .push(SanType::URI(role.uri().try_into().map_err(cert_err)?));
    }
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = match role {
        Some(Role::Client | Role::Admin) => vec![ExtendedKeyUsagePurpose::ClientAuth],
        Some(Role::Mds | Role::Osd) | None => vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ],
    };
    params.use_authority_key_identifier_extension = true;
    params.serial_number = Some(random_serial()?);
    set_validity(&mut params);
    Ok(params)
}

/// Writes a file that must not exist yet, with the given mode (0600 for keys).
fn write_new(path: &Path, bytes: &[u8], mode: u32) -> Result<(), InitError> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .map_err(io(path))?;
    f.write_all(bytes).map_err(io(path))?;
    f.sync_all().map_err(io(path))
}

/// Paths of one process's certificate and key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuedCert {
    pub name: String,
    pub cert: PathBuf,
    pub key: PathBuf,
}

fn issue(
    certs_dir: &Path,
    cluster_id: &str,
    name: &str,
    role: Option<Role>,
    issuer: &Issuer<'_, KeyPair>,
) -> Result<IssuedCert, InitError> {
    check_process_name(name)?;
    let key = KeyPair::generate().map_err(cert_err)?;
    let cert = process_params(cluster_id, name, role)?
        .signed_by(&key, issuer)
        .map_err(cert_err)?;
    let cert_path = certs_dir.join(format!("{name}.pem"));
    let key_path = certs_dir.join(format!("{name}.key"));
    write_new(&key_path, key.serialize_pem().as_bytes(), 0o600)?;
    write_new(&cert_path, cert.pem().as_bytes(), 0o644)?;
    Ok(IssuedCert {
        name: name.to_owned(),
        cert: cert_path,
        key: key_path,
    })
}

fn check_options(opts: &InitOptions) -> Result<(), InitError> {
    if opts.osds > PROCESSES_MAX || opts.clients > PROCESSES_MAX {
        return Err(InitError::Invalid(format!(
            "--osds {} / --clients {}: at most {PROCESSES_MAX} each (more certificates: `ecstack cluster cert NAME`)",
            opts.osds, opts.clients
        )));
    }
    if opts.mds_addr.parse::<std::net::SocketAddr>().is_err() && !opts.mds_addr.contains(':') {
        return Err(InitError::Invalid(format!(
            "--mds-addr {:?}: expected host:port",
            opts.mds_addr
        )));
    }
    Ok(())
}

/// Removes what a previous `init` made in `dir` (config, certificates, the MDS database named by
/// the old config or the default one); other files stay.
fn remove_old_cluster(dir: &Path) -> Result<(), InitError> {
    let config_path = dir.join(CONFIG_FILE);
    let mut store = Some(dir.join(DEFAULT_MDS_STORE));
    if let Ok(old) = ClusterConfig::load(&config_path) {
        // A PostgreSQL database is not ours to remove.
        store = match old.mds_store() {
            crate::config::MdsStore::Sqlite(p) => Some(p),
            crate::config::MdsStore::PostgreSql(_) => None,
        };
    }
    for suffix in ["", "-wal", "-shm", ".lock"] {
        let Some(store) = &store else { break };
        let p = PathBuf::from(format!("{}{suffix}", store.display()));
        if p.exists() {
            std::fs::remove_file(&p).map_err(io(&p))?;
        }
    }
    let certs = dir.join(CERTS_DIR);
    if certs.exists() {
        std::fs::remove_dir_all(&certs).map_err(io(&certs))?;
    }
    if config_path.exists() {
        std::fs::remove_file(&config_path).map_err(io(&config_path))?;
    }
    Ok(())
}

/// Creates a cluster in `dir` (made if missing): a random cluster id, a CA, one certificate per
/// process of [`process_names`] and `cluster.toml`. Refuses a directory that already holds
/// `cluster.toml` or `certs/` unless `opts.force`.
pub fn init_cluster(dir: &Path, opts: &InitOptions) -> Result<ClusterConfig, InitError> {
    check_options(opts)?;
    let cluster_id = new_cluster_id()?;
    let mut config = ClusterConfig {
        cluster_id: cluster_id.clone(),
        code: CodeConfig {
            family: opts.code.clone(),
            k: opts.k,
            m: opts.m,
        },
        segment_bytes: opts.segment_bytes,
        placement: PlacementConfig {
            failure_domain: opts.failure_domain.clone(),
        },
        mds: MdsConfig {
            addr: opts.mds_addr.clone(),
            addrs: Vec::new(),
            lease_ms: crate::config::DEFAULT_MDS_LEASE_MS,
            metrics_addr: DEFAULT_METRICS_ADDR.to_owned(),
            store: PathBuf::from(DEFAULT_MDS_STORE),
            heartbeat_ms: DEFAULT_HEARTBEAT_MS,
            down_after_ms: DEFAULT_DOWN_AFTER_MS,
            out_after_ms: DEFAULT_OUT_AFTER_MS,
            recovery_bytes_per_sec: 0,
            orphan_grace_ms: crate::config::DEFAULT_ORPHAN_GRACE_MS,
        },
        osd: Default::default(),
        update: UpdateConfig {
            scheme: opts.update_scheme,
            ..UpdateConfig::default()
        },
        certs: PathBuf::from(CERTS_DIR),
        dir: dir.to_owned(),
    };
    config.validate().map_err(InitError::Invalid)?;

    let config_path = dir.join(CONFIG_FILE);
    let certs_dir = dir.join(CERTS_DIR);
    for existing in [&config_path, &certs_dir] {
        if existing.exists() && !opts.force {
            return Err(InitError::ClusterExists {
                path: existing.clone(),
            });
        }
    }
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    if opts.force {
        remove_old_cluster(dir)?;
    }
    std::fs::create_dir_all(&certs_dir).map_err(io(&certs_dir))?;

    let ca_key = KeyPair::generate().map_err(cert_err)?;
    let ca_params = ca_params(&cluster_id)?;
    let ca_cert = ca_params.self_signed(&ca_key).map_err(cert_err)?;
    write_new(
        &certs_dir.join("ca.key"),
        ca_key.serialize_pem().as_bytes(),
        0o600,
    )?;
    write_new(&certs_dir.join("ca.pem"), ca_cert.pem().as_bytes(), 0o644)?;
    let issuer = Issuer::new(ca_params, ca_key);
    for name in process_names(opts.osds, opts.clients) {
        let role = role_of_name(&name)?;
        issue(&certs_dir, &cluster_id, &name, Some(role), &issuer)?;
    }

    let text = toml::to_string_pretty(&config)
        .map_err(|e| InitError::Invalid(format!("cannot render the config: {e}")))?;
    let text = format!(
        "# ecstack cluster, made by `ecstack cluster init` (docs/cluster.md, \"Configuration and security\").\n{text}"
    );
    write_new(&config_path, text.as_bytes(), 0o644)?;
    config.dir = dir.to_owned();
    Ok(config)
}

/// The role a process name implies ([`Role::for_process_name`]), or one line asking for it.
pub fn role_of_name(name: &str) -> Result<Role, InitError> {
    Role::for_process_name(name).ok_or_else(|| {
        InitError::Invalid(format!(
            "process name {name:?} implies no role (mds, osd-N, client[-N], admin[-N] do); say which with --role mds|osd|client|admin"
        ))
    })
}

/// Issues one more certificate from the cluster's CA (`ecstack cluster cert NAME`), for an extra
/// OSD, client or admin, with the role its name implies ([`role_of_name`]). Refuses to replace
/// an existing one unless `force` (reissuing a certificate made before roles gives it its role).
pub fn issue_certificate(
    config: &ClusterConfig,
    name: &str,
    force: bool,
) -> Result<IssuedCert, InitError> {
    issue_certificate_with_role(config, name, Some(role_of_name(name)?), force)
}

/// [`issue_certificate`] with the role given (`ecstack cluster cert NAME --role R`). `None` makes
/// a certificate without a role, as `init` made them before roles: every RPC refuses it (only
/// tests of that refusal want one).
pub fn issue_certificate_with_role(
    config: &ClusterConfig,
    name: &str,
    role: Option<Role>,
    force: bool,
) -> Result<IssuedCert, InitError> {
    check_process_name(name)?;
    let certs_dir = config.certs_dir();
    let read = |file: &str| {
        let p = certs_dir.join(file);
        std::fs::read_to_string(&p).map_err(|source| InitError::Io { path: p, source })
    };
    let ca_pem = read("ca.pem")?;
    let ca_key = KeyPair::from_pem(&read("ca.key")?)
        .map_err(|e| InitError::Cert(format!("{}: {e}", certs_dir.join("ca.key").display())))?;
    let issuer = Issuer::from_ca_cert_pem(&ca_pem, ca_key)
        .map_err(|e| InitError::Cert(format!("{}: {e}", certs_dir.join("ca.pem").display())))?;
    let cert_path = certs_dir.join(format!("{name}.pem"));
    let key_path = certs_dir.join(format!("{name}.key"));
    if cert_path.exists() || key_path.exists() {
        if !force {
            return Err(InitError::Exists { path: cert_path });
        }
        for p in [&cert_path, &key_path] {
            if p.exists() {
                std::fs::remove_file(p).map_err(io(p))?;
            }
        }
    }
    issue(&certs_dir, &config.cluster_id, name, role, &issuer)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().permissions().mode() & 0o777
    }

    /// The subject and SAN as x509-parser reads them back from the PEM file.
    fn subject_of(p: &Path) -> (String, String, Vec<String>) {
        let pem = std::fs::read(p).unwrap();
        let (_, pem) = x509_parser::pem::parse_x509_pem(&pem).unwrap();
        let cert = pem.parse_x509().unwrap();
        let cn = cert
            .subject()
            .iter_common_name()
            .next()
            .unwrap()
            .as_str()
            .unwrap()
            .to_owned();
        let o = cert
            .subject()
            .iter_organization()
            .next()
            .unwrap()
            .as_str()
            .unwrap()
            .to_owned();
        let sans = cert
            .subject_alternative_name()
            .unwrap()
            .map(|ext| {
                ext.value
                    .general_names
                    .iter()
                    .map(|n| n.to_string())
                    .collect()
            })
            .unwrap_or_default();
        (cn, o, sans)
    }

    #[test]
    fn init_writes_config_ca_and_one_certificate_per_process() {
        let dir = tempfile::tempdir().unwrap();
        let opts = InitOptions {
            osds: 3,
            clients: 2,
            k: 2,
            m: 1,
            failure_domain: Some("host".to_owned()),
            update_scheme: UpdateScheme::Plr,
            ..InitOptions::default()
        };
        let made = init_cluster(dir.path(), &opts).unwrap();
        let loaded = ClusterConfig::load(&dir.path().join(CONFIG_FILE)).unwrap();
        assert_eq!(made, loaded);
        assert_eq!(loaded.update.scheme, UpdateScheme::Plr);
        assert_eq!(loaded.cluster_id.len(), 32);
        assert_eq!((loaded.code.k, loaded.code.m), (2, 1));
        assert_eq!(loaded.placement.failure_domain.as_deref(), Some("host"));
        assert_eq!(loaded.mds.heartbeat_ms, DEFAULT_HEARTBEAT_MS);

        let certs = loaded.certs_dir();
        assert_eq!(mode(&certs.join("ca.key")), 0o600);
        let names = process_names(3, 2);
        assert_eq!(
            names,
            ["mds", "osd-0", "osd-1", "osd-2", "client", "client-1", "admin"]
        );
        for (name, role) in names
            .iter()
            .zip(["mds", "osd", "osd", "osd", "client", "client", "admin"])
        {
            assert_eq!(mode(&certs.join(format!("{name}.key"))), 0o600, "{name}");
            let path = certs.join(format!("{name}.pem"));
            let (cn, o, sans) = subject_of(&path);
            assert_eq!(cn, *name);
            assert_eq!(o, format!("ecstack cluster {}", loaded.cluster_id));
            assert_eq!(
                sans,
                vec![
                    format!("DNSName({CLUSTER_DNS_NAME})"),
                    format!("URI(urn:ecstack:role:{role})")
                ]
            );
            // The guard reads the same role back.
            let pem = std::fs::read(&path).unwrap();
            let (_, pem) = x509_parser::pem::parse_x509_pem(&pem).unwrap();
            let who = crate::roles::cert_identity(&pem.contents).unwrap();
            assert_eq!(who.name, *name);
            assert_eq!(who.role.map(|r| r.name()), Some(role));
            // Only the servers' certificates may serve.
            let cert = pem.parse_x509().unwrap();
            let eku = cert.extended_key_usage().unwrap().unwrap().value;
            assert!(eku.client_auth, "{name}");
            assert_eq!(eku.server_auth, role == "mds" || role == "osd", "{name}");
        }
        // Every file of certs/ is accounted for.
        assert_eq!(
            std::fs::read_dir(&certs).unwrap().count(),
            2 + 2 * names.len()
        );
    }

    #[test]
    fn init_refuses_an_existing_cluster_unless_forced() {
        let dir = tempfile::tempdir().unwrap();
        let opts = InitOptions {
            osds: 1,
            ..InitOptions::default()
        };
        let first = init_cluster(dir.path(), &opts).unwrap();
        let db = dir.path().join(DEFAULT_MDS_STORE);
        std::fs::write(&db, b"old metadata").unwrap();
        let keep = dir.path().join("notes.txt");
        std::fs::write(&keep, b"mine").unwrap();

        let e = init_cluster(dir.path(), &opts).unwrap_err();
        assert!(matches!(e, InitError::ClusterExists { .. }), "{e}");
        assert!(e.to_string().contains("--force"));
        assert_eq!(
            ClusterConfig::load(&dir.path().join(CONFIG_FILE))
                .unwrap()
                .cluster_id,
            first.cluster_id
        );

        let forced = InitOptions {
            force: true,
            osds: 2,
            ..opts
        };
        let second = init_cluster(dir.path(), &forced).unwrap();
        assert_ne!(second.cluster_id, first.cluster_id);
        assert!(
            !db.exists(),
            "the old MDS database goes with the old cluster"
        );
        assert!(keep.exists(), "other files stay");
        assert!(second.certs_dir().join("osd-1.pem").exists());
    }

    #[test]
    fn bad_options_get_one_line_each() {
        let dir = tempfile::tempdir().unwrap();
        for (opts, needle) in [
            (
                InitOptions {
                    k: 0,
                    ..InitOptions::default()
                },
                "k ≥ 1",
            ),
            (
                InitOptions {
                    segment_bytes: 1000,
                    ..InitOptions::default()
                },
                "segment_bytes",
            ),
            (
                InitOptions {
                    failure_domain: Some("row".to_owned()),
                    ..InitOptions::default()
                },
                "failure_domain",
            ),
            (
                InitOptions {
                    osds: PROCESSES_MAX + 1,
                    ..InitOptions::default()
                },
                "--osds",
            ),
            (
                InitOptions {
                    mds_addr: "nowhere".to_owned(),
                    ..InitOptions::default()
                },
                "--mds-addr",
            ),
        ] {
            let e = init_cluster(dir.path(), &opts).unwrap_err().to_string();
            assert!(e.contains(needle), "{e}");
            assert!(!e.contains('\n'), "{e}");
        }
        assert!(!dir.path().join(CONFIG_FILE).exists());
    }

    #[test]
    fn cert_issues_from_the_ca_and_checks_names() {
        let dir = tempfile::tempdir().unwrap();
        let opts = InitOptions {
            osds: 1,
            ..InitOptions::default()
        };
        let config = init_cluster(dir.path(), &opts).unwrap();
        let issued = issue_certificate(&config, "osd-7", false).unwrap();
        assert_eq!(mode(&issued.key), 0o600);
        let (cn, o, sans) = subject_of(&issued.cert);
        assert_eq!(cn, "osd-7");
        assert!(
            sans.contains(&"URI(urn:ecstack:role:osd)".to_owned()),
            "{sans:?}"
        );
        assert_eq!(o, format!("ecstack cluster {}", config.cluster_id));
        // Its issuer is the CA's subject.
        let pem = std::fs::read(&issued.cert).unwrap();
        let (_, pem) = x509_parser::pem::parse_x509_pem(&pem).unwrap();
        let ca_pem = std::fs::read(config.certs_dir().join("ca.pem")).unwrap();
        let (_, ca_pem) = x509_parser::pem::parse_x509_pem(&ca_pem).unwrap();
        assert_eq!(
            pem.parse_x509().unwrap().issuer(),
            ca_pem.parse_x509().unwrap().subject()
        );

        let e = issue_certificate(&config, "osd-7", false).unwrap_err();
        assert!(matches!(e, InitError::Exists { .. }), "{e}");
        let old = std::fs::read(&issued.cert).unwrap();
        issue_certificate(&config, "osd-7", true).unwrap();
        assert_ne!(std::fs::read(&issued.cert).unwrap(), old);

        for bad in ["", "ca", "OSD", "osd/1", "../x", "-x", &"a".repeat(65)] {
            let e = issue_certificate(&config, bad, false).unwrap_err();
            assert!(matches!(e, InitError::Invalid(_)), "{bad:?}: {e}");
        }

        // A name that implies no role needs one said; with it, the role is in the certificate.
        let e = issue_certificate(&config, "gateway", false).unwrap_err();
        assert!(e.to_string().contains("--role"), "{e}");
        let gw =
            issue_certificate_with_role(&config, "gateway", Some(Role::Client), false).unwrap();
        let (_, _, sans) = subject_of(&gw.cert);
        assert!(
            sans.contains(&"URI(urn:ecstack:role:client)".to_owned()),
            "{sans:?}"
        );
        // Without a role, as before roles: the guard sees none.
        let old = issue_certificate_with_role(&config, "client-9", None, false).unwrap();
        let pem = std::fs::read(&old.cert).unwrap();
        let (_, pem) = x509_parser::pem::parse_x509_pem(&pem).unwrap();
        assert_eq!(
            crate::roles::cert_identity(&pem.contents).unwrap().role,
            None
        );
    }
}
