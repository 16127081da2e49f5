//! Mutual TLS with real sockets on 127.0.0.1 and a real gRPC service (the standard health
//! service): only a process holding a certificate of the same cluster gets an answer.

use std::time::Duration;

use ecstack_rpc::init::{init_cluster, issue_certificate, InitOptions};
use ecstack_rpc::security::{bind, peer_name};

/// The peer names the server saw, in call order.
type PeerLog = std::sync::Arc<std::sync::Mutex<Vec<Option<String>>>>;
use ecstack_rpc::{ClusterConfig, Security};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

const TIMEOUT: Duration = Duration::from_secs(5);

fn cluster(dir: &std::path::Path) -> ClusterConfig {
    let opts = InitOptions {
        osds: 2,
        clients: 1,
        ..InitOptions::default()
    };
    init_cluster(dir, &opts).unwrap();
    ClusterConfig::load(&dir.join("cluster.toml")).unwrap()
}

/// Starts a health server with `security` on a fresh loopback port; returns its address.
async fn serve(security: &Security, seen: PeerLog) -> String {
    let (reporter, service) = tonic_health::server::health_reporter();
    let service = tonic::service::interceptor::InterceptedService::new(
        service,
        move |req: tonic::Request<()>| {
            seen.lock().unwrap().push(peer_name(&req));
            Ok(req)
        },
    );
    reporter
        .set_service_status("", tonic_health::ServingStatus::Serving)
        .await;
    let (incoming, addr) = bind("127.0.0.1:0").await.unwrap();
    let server = security.server().unwrap().add_service(service);
    tokio::spawn(async move {
        // Keep the reporter alive as long as the server.
        let _reporter = reporter;
        server.serve_with_incoming(incoming).await.unwrap();
    });
    addr.to_string()
}

async fn check(security: &Security, addr: &str) -> Result<ServingStatus, tonic::Status> {
    let channel = security.channel(addr, TIMEOUT, Some(TIMEOUT)).unwrap();
    let reply = HealthClient::new(channel)
        .check(HealthCheckRequest {
            service: String::new(),
        })
        .await?;
    Ok(reply.into_inner().status())
}

#[tokio::test]
async fn mtls_admits_only_certificates_of_the_same_cluster() {
    let a_dir = tempfile::tempdir().unwrap();
    let b_dir = tempfile::tempdir().unwrap();
    let a = cluster(a_dir.path());
    let b = cluster(b_dir.path());
    assert_ne!(a.cluster_id, b.cluster_id);

    let mds = Security::load(&a.certs_dir(), "mds").unwrap();
    let seen = PeerLog::default();
    let addr = serve(&mds, seen.clone()).await;

    // Same cluster: the client, an OSD and a certificate issued later all get an answer.
    for name in ["client", "osd-1"] {
        let me = Security::load(&a.certs_dir(), name).unwrap();
        assert_eq!(
            check(&me, &addr).await.unwrap(),
            ServingStatus::Serving,
            "{name}"
        );
    }
    issue_certificate(&a, "osd-9", false).unwrap();
    let late = Security::load(&a.certs_dir(), "osd-9").unwrap();
    assert_eq!(check(&late, &addr).await.unwrap(), ServingStatus::Serving);
    let names = seen.lock().unwrap().clone();
    let expected = ["client", "osd-1", "osd-9"].map(|n| Some(n.to_owned()));
    assert_eq!(
        names, expected,
        "the server sees each caller's certificate name"
    );

    // Another cluster's client: the server refuses its certificate (and the client refuses the
    // server's, whose CA it does not trust).
    let stranger = Security::load(&b.certs_dir(), "client").unwrap();
    let e = check(&stranger, &addr).await.unwrap_err();
    refused(&e, "UnknownIssuer");

    // A client that trusts cluster A's CA but presents cluster B's certificate: only the server's
    // check can refuse it, so this isolates the server side of mutual TLS.
    let Security::Mtls { ca_pem, .. } = &mds else {
        unreachable!()
    };
    let Security::Mtls {
        cert_pem, key_pem, ..
    } = &stranger
    else {
        unreachable!()
    };
    let forged = Security::Mtls {
        ca_pem: ca_pem.clone(),
        cert_pem: cert_pem.clone(),
        key_pem: key_pem.clone(),
    };
    let e = check(&forged, &addr).await.unwrap_err();
    refused(&e, "UnknownCA");

    // No certificate at all, but trusting the server.
    let anonymous = no_client_cert_channel(ca_pem, &addr);
    let e = HealthClient::new(anonymous)
        .check(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .unwrap_err();
    refused(&e, "CertificateRequired");

    // Plain HTTP/2 against the TLS server.
    let e = check(&Security::Insecure, &addr).await.unwrap_err();
    eprintln!("plain HTTP/2 refused: {e}");

    // And the server still serves its own cluster after all that.
    let me = Security::load(&a.certs_dir(), "client").unwrap();
    assert_eq!(check(&me, &addr).await.unwrap(), ServingStatus::Serving);
}

/// The call failed in the TLS handshake for `reason` (a rustls error or alert name), and the
/// failure is final: retrying cannot fix a certificate.
fn refused(e: &tonic::Status, reason: &str) {
    let chain = format!("{e:?}");
    assert!(chain.contains(reason), "expected {reason}, got {chain}");
    assert!(
        !ecstack_rpc::is_transient(e),
        "a refused certificate is not transient: {chain}"
    );
    let line = ecstack_rpc::handshake_refusal(e).expect("a refused handshake");
    assert!(
        line.starts_with("the certificate is not of this cluster (") && line.contains(reason),
        "{line}"
    );
    eprintln!("refused ({reason}): {e}");
}

fn no_client_cert_channel(ca_pem: &[u8], addr: &str) -> tonic::transport::Channel {
    use tonic::transport::{Certificate, ClientTlsConfig, Endpoint};
    let tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(ca_pem))
        .domain_name(ecstack_rpc::CLUSTER_DNS_NAME);
    Endpoint::from_shared(format!("https://{addr}"))
        .unwrap()
        .connect_timeout(TIMEOUT)
        .timeout(TIMEOUT)
        .tls_config(tls)
        .unwrap()
        .connect_lazy()
}

/// A peer that accepts the TCP connection and never answers (a stopped process: the kernel
/// accepts for it) fails a call after the connect deadline, TLS handshake included.
#[tokio::test]
async fn a_peer_that_never_handshakes_fails_within_the_connect_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let a = cluster(dir.path());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    let me = Security::load(&a.certs_dir(), "client").unwrap();
    let channel = me.channel(&addr, Duration::from_millis(300), None).unwrap();
    let start = std::time::Instant::now();
    let r = tokio::time::timeout(
        Duration::from_secs(10),
        HealthClient::new(channel).check(HealthCheckRequest {
            service: String::new(),
        }),
    )
    .await
    .expect("the call was held up past 10 s");
    assert!(r.is_err());
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "{:?}",
        start.elapsed()
    );
}
