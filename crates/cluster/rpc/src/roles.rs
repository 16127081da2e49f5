//! Roles: which RPCs a certificate may call.
//!
//! Every certificate `ecstack cluster init` / `cluster cert` issues carries its holder's role as a
//! URI subject alternative name, `urn:ecstack:role:<role>` ([`Role::uri`]), next to the DNS name
//! every certificate has. The CA signs it, so a holder cannot change it. A server wraps each of
//! its gRPC services in a [`RoleGuard`] ([`Security::guard`]) with the service's [`RoleTable`]
//! (`ecstack_mds::service::MDS_ROLES`, `ecstack_osd::roles::OSD_ROLES`): before a call reaches the
//! service, the guard reads the caller's certificate from the TLS connection and answers
//! `PermissionDenied` (one line) unless the table lets that role call the method.
//!
//! - A certificate without a role URI (issued before roles existed) is refused on every RPC with
//!   a line naming the fix: reissue it with `ecstack cluster cert NAME --force`. Guessing a role
//!   from the certificate's name would make every old client certificate whatever its name says.
//! - A method missing from the table is refused for every role (a new RPC is closed until
//!   someone decides who may call it).
//! - An insecure server (loopback experiments, no TLS) has no certificates and so no roles: its
//!   guard lets everything through, as before roles.

use std::convert::Infallible;
use std::task::{Context, Poll};

use tonic::body::Body;
use tonic::codegen::{http, BoxFuture, Service};
use tonic::server::NamedService;
use tonic::transport::server::{TcpConnectInfo, TlsConnectInfo};
use tonic::Status;

use crate::security::Security;

/// What a certificate's holder is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Role {
    /// The metadata server.
    Mds,
    /// An object storage daemon: registers, heartbeats, and calls its peers' chunk RPCs.
    Osd,
    /// A client: reads, writes, updates, removes and lists files.
    Client,
    /// An operator: everything a client may do, and cluster administration (`osd out`).
    Admin,
}

/// The prefix of a role URI in a certificate's subject alternative names.
pub const ROLE_URI_PREFIX: &str = "urn:ecstack:role:";

impl Role {
    pub const ALL: [Role; 4] = [Role::Mds, Role::Osd, Role::Client, Role::Admin];

    pub fn name(self) -> &'static str {
        match self {
            Role::Mds => "mds",
            Role::Osd => "osd",
            Role::Client => "client",
            Role::Admin => "admin",
        }
    }

    /// The URI SAN that carries this role: `urn:ecstack:role:client`.
    pub fn uri(self) -> String {
        format!("{ROLE_URI_PREFIX}{}", self.name())
    }

    /// The role a process name implies: `mds`, `mds-*` → mds; `osd-*` → osd; `client`,
    /// `client-*` → client; `admin`, `admin-*` → admin; any other name has to say its role.
    pub fn for_process_name(name: &str) -> Option<Role> {
        let stem = name.split('-').next().unwrap_or(name);
        match stem {
            "mds" => Some(Role::Mds),
            "osd" if name != "osd" => Some(Role::Osd),
            "client" => Some(Role::Client),
            "admin" => Some(Role::Admin),
            _ => None,
        }
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Role {
    type Err = String;
    fn from_str(s: &str) -> Result<Role, String> {
        Role::ALL
            .into_iter()
            .find(|r| r.name() == s)
            .ok_or_else(|| format!("role {s:?}: expected mds, osd, client or admin"))
    }
}

/// Who a certificate names: its common name and its role (`None`: a certificate issued before
/// roles).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertIdentity {
    pub name: String,
    pub role: Option<Role>,
}

/// Reads the common name and role of a DER certificate; an error (one line) when it cannot be
/// parsed, names an unknown role or more than one.
pub fn cert_identity(der: &[u8]) -> Result<CertIdentity, String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der)
        .map_err(|e| format!("unreadable certificate: {e}"))?;
    let name = cert
        .subject()
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
        .unwrap_or("(no common name)")
        .to_owned();
    let mut roles = Vec::new();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for n in &san.value.general_names {
            if let x509_parser::extensions::GeneralName::URI(uri) = n {
                if let Some(role) = uri.strip_prefix(ROLE_URI_PREFIX) {
                    let role: Role = role
                        .parse()
                        .map_err(|e| format!("certificate {name:?}: {e}"))?;
                    if !roles.contains(&role) {
                        roles.push(role);
                    }
                }
            }
        }
    }
    if roles.len() > 1 {
        return Err(format!(
            "certificate {name:?} names {} roles; a certificate has one",
            roles.len()
        ));
    }
    Ok(CertIdentity {
        name,
        role: roles.first().copied(),
    })
}

/// Which roles may call each method of one gRPC service. Written once per server crate, next to
/// its `.proto`, and printed in docs/cluster.md's security section.
#[derive(Debug)]
pub struct RoleTable {
    /// The gRPC service's full name (`ecstack.mds.v1.Mds`).
    pub service: &'static str,
    /// Method name (as in the `.proto`) and the roles that may call it.
    pub methods: &'static [(&'static str, &'static [Role])],
}

impl RoleTable {
    /// The methods the table lists, in its order.
    pub fn method_names(&self) -> Vec<String> {
        self.methods.iter().map(|(m, _)| m.to_string()).collect()
    }

    /// The roles that may call `method`; `None` for a method the table does not list.
    pub fn roles(&self, method: &str) -> Option<&'static [Role]> {
        self.methods
            .iter()
            .find(|(m, _)| *m == method)
            .map(|(_, roles)| *roles)
    }

    /// Whether a caller with `role` may call the method at `path` (`/ecstack.mds.v1.Mds/Status`);
    /// `Err` is the one-line reason.
    pub fn check(&self, path: &str, caller: &CertIdentity) -> Result<(), String> {
        let method = path
            .strip_prefix('/')
            .and_then(|p| p.strip_prefix(self.service))
            .and_then(|p| p.strip_prefix('/'))
            .unwrap_or(path);
        let Some(allowed) = self.roles(method) else {
            return Err(format!(
                "{path} is not in the role table of {}: no certificate may call it",
                self.service
            ));
        };
        let name = &caller.name;
        match caller.role {
            None => Err(format!(
                "certificate {name:?} carries no role (it was issued before roles); reissue it with `ecstack cluster cert {name} --force`"
            )),
            Some(role) if allowed.contains(&role) => Ok(()),
            Some(role) => Err(format!(
                "certificate {name:?} has role {role}, and {method} is for {} certificates only",
                role_list(allowed)
            )),
        }
    }
}

/// The RPC names of a `.proto` file's services, in order (each line that starts `rpc Name(`):
/// what a role table and its tests are checked against, so that a new RPC cannot go unlisted.
pub fn proto_rpcs(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("rpc "))
        .filter_map(|l| l.split('(').next())
        .map(|name| name.trim().to_owned())
        .collect()
}

fn role_list(roles: &[Role]) -> String {
    match roles {
        [] => "no".to_owned(),
        [one] => one.name().to_owned(),
        _ => {
            let names: Vec<&str> = roles.iter().map(|r| r.name()).collect();
            let (last, rest) = names.split_last().expect("two or more");
            format!("{} or {last}", rest.join(", "))
        }
    }
}

/// A gRPC service behind a role check ([`Security::guard`]). With `table` `None` (an insecure
/// server) every call goes through.
#[derive(Debug, Clone)]
pub struct RoleGuard<S> {
    inner: S,
    table: Option<&'static RoleTable>,
}

impl Security {
    /// `service` behind a role check with `table`: a TLS server refuses every call whose caller's
    /// certificate role the table does not allow; an insecure one has no roles and checks nothing.
    pub fn guard<S>(&self, table: &'static RoleTable, service: S) -> RoleGuard<S> {
        RoleGuard {
            inner: service,
            table: (!self.is_insecure()).then_some(table),
        }
    }
}

impl<S: NamedService> NamedService for RoleGuard<S> {
    const NAME: &'static str = S::NAME;
}

/// The caller's identity from the TLS connection a request came on (the server puts the
/// connection's details into every request's extensions).
fn caller<B>(req: &http::Request<B>) -> Result<CertIdentity, String> {
    let certs = req
        .extensions()
        .get::<TlsConnectInfo<TcpConnectInfo>>()
        .and_then(|info| info.peer_certs())
        .ok_or_else(|| "no client certificate on this connection".to_owned())?;
    let leaf = certs
        .first()
        .ok_or_else(|| "no client certificate on this connection".to_owned())?;
    cert_identity(leaf.as_ref())
}

impl<S> Service<http::Request<Body>> for RoleGuard<S>
where
    S: Service<http::Request<Body>, Response = http::Response<Body>, Error = Infallible>,
    S::Future: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<http::Response<Body>, Infallible>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        if let Some(table) = self.table {
            let verdict = caller(&req).and_then(|who| {
                table.check(req.uri().path(), &who).map_err(|e| {
                    tracing::warn!(caller = %who.name, path = %req.uri().path(), "refused: {e}");
                    e
                })
            });
            if let Err(message) = verdict {
                let response = Status::permission_denied(message).into_http();
                return Box::pin(async move { Ok(response) });
            }
        }
        Box::pin(self.inner.call(req))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static TABLE: RoleTable = RoleTable {
        service: "ecstack.test.v1.T",
        methods: &[
            ("Read", &[Role::Client, Role::Admin]),
            ("Beat", &[Role::Osd]),
            ("Nobody", &[]),
        ],
    };

    fn who(role: Option<Role>) -> CertIdentity {
        CertIdentity {
            name: "client-7".to_owned(),
            role,
        }
    }

    #[test]
    fn names_and_uris_round_trip() {
        for r in Role::ALL {
            assert_eq!(r.name().parse::<Role>().unwrap(), r);
            assert_eq!(r.uri(), format!("urn:ecstack:role:{}", r.name()));
        }
        assert!("root".parse::<Role>().is_err());
        for (name, role) in [
            ("mds", Some(Role::Mds)),
            ("osd-0", Some(Role::Osd)),
            ("osd-17", Some(Role::Osd)),
            ("osd", None),
            ("client", Some(Role::Client)),
            ("client-3", Some(Role::Client)),
            ("admin", Some(Role::Admin)),
            ("admin-ops", Some(Role::Admin)),
            ("osdx-1", None),
            ("gateway", None),
        ] {
            assert_eq!(Role::for_process_name(name), role, "{name}");
        }
    }

    #[test]
    fn the_table_decides_per_method_and_role() {
        let p = |m: &str| format!("/ecstack.test.v1.T/{m}");
        assert!(TABLE.check(&p("Read"), &who(Some(Role::Client))).is_ok());
        assert!(TABLE.check(&p("Read"), &who(Some(Role::Admin))).is_ok());
        assert!(TABLE.check(&p("Beat"), &who(Some(Role::Osd))).is_ok());
        let e = TABLE
            .check(&p("Beat"), &who(Some(Role::Client)))
            .unwrap_err();
        assert_eq!(
            e,
            "certificate \"client-7\" has role client, and Beat is for osd certificates only"
        );
        let e = TABLE.check(&p("Read"), &who(Some(Role::Osd))).unwrap_err();
        assert!(
            e.ends_with("Read is for client or admin certificates only"),
            "{e}"
        );
        for role in Role::ALL {
            assert!(TABLE.check(&p("Nobody"), &who(Some(role))).is_err());
            let e = TABLE.check(&p("Missing"), &who(Some(role))).unwrap_err();
            assert!(e.contains("not in the role table"), "{e}");
        }
        // A certificate from before roles: refused everywhere, with the fix.
        let e = TABLE.check(&p("Read"), &who(None)).unwrap_err();
        assert!(
            e.contains("carries no role")
                && e.contains("`ecstack cluster cert client-7 --force`")
                && !e.contains('\n'),
            "{e}"
        );
    }
}
