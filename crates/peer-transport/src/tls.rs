//! rustls configurations of the peer port, built here rather than by tonic because the port carries three
//! protocols told apart by ALPN: gRPC (`h2`), links ([`LINK_ALPN`]) and relays ([`RELAY_ALPN`]).

use std::sync::Arc;

use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::config::TlsMaterial;
use crate::{TlsConfig, TransportError};

/// The TLS application protocols (ALPN) of a relay and of a link on the peer port; gRPC negotiates `h2`. Here,
/// with the configurations that offer them, so that this module needs nothing from the protocols built on it.
pub const RELAY_ALPN: &[u8] = b"paxsql-relay/1";
pub const LINK_ALPN: &[u8] = b"paxsql-link/1";

fn invalid(field: &'static str, reason: impl std::fmt::Display) -> TransportError {
    TransportError::InvalidConfig { field, reason: reason.to_string() }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

struct Parsed {
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    roots: rustls::RootCertStore,
}

fn parse(m: &TlsMaterial, files: &TlsConfig) -> Result<Parsed, TransportError> {
    let chain: Vec<_> = CertificateDer::pem_slice_iter(&m.cert).filter_map(Result::ok).collect();
    if chain.is_empty() {
        return Err(invalid("tls.cert", format!("{} holds no PEM certificate", files.cert.display())));
    }
    let key = PrivateKeyDer::from_pem_slice(&m.key)
        .map_err(|e| invalid("tls.key", format!("{}: no usable PEM private key: {e}", files.key.display())))?;
    let mut roots = rustls::RootCertStore::empty();
    for ca in CertificateDer::pem_slice_iter(&m.ca) {
        let ca = ca.map_err(|e| invalid("tls.ca", format!("{}: {e}", files.ca.display())))?;
        roots.add(ca).map_err(|e| invalid("tls.ca", format!("{}: {e}", files.ca.display())))?;
    }
    if roots.is_empty() {
        return Err(invalid("tls.ca", format!("{} holds no CA certificate", files.ca.display())));
    }
    Ok(Parsed { chain, key, roots })
}

/// The peer port's server side: this member's certificate, a client certificate signed by the cluster CA required
/// (mutual TLS), links, `h2` and relays offered.
pub(crate) fn server_config(m: &TlsMaterial, files: &TlsConfig) -> Result<rustls::ServerConfig, TransportError> {
    let p = parse(m, files)?;
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(p.roots), provider())
        .build()
        .map_err(|e| invalid("tls.ca", e))?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| invalid("tls", e))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(p.chain, p.key)
        .map_err(|e| {
            invalid("tls.key", format!("{} does not fit {}: {e}", files.key.display(), files.cert.display()))
        })?;
    config.alpn_protocols = vec![LINK_ALPN.to_vec(), b"h2".to_vec(), RELAY_ALPN.to_vec()];
    Ok(config)
}

/// A dialler's side: the cluster CA as the only root, this member's certificate as client certificate. The caller
/// sets the ALPN.
pub(crate) fn client_config(m: &TlsMaterial, files: &TlsConfig) -> Result<rustls::ClientConfig, TransportError> {
    let p = parse(m, files)?;
    rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| invalid("tls", e))?
        .with_root_certificates(p.roots)
        .with_client_auth_cert(p.chain, p.key)
        .map_err(|e| invalid("tls.key", format!("{} does not fit {}: {e}", files.key.display(), files.cert.display())))
}

/// A member's dialler for one of the peer port's own protocols (`alpn`): this member's certificate, the cluster CA;
/// `None` on a plaintext cluster.
pub(crate) fn connector(
    cfg: &crate::TransportConfig,
    alpn: &[u8],
) -> Result<Option<tokio_rustls::TlsConnector>, TransportError> {
    let Some(tls) = &cfg.tls else { return Ok(None) };
    let mut config = client_config(&tls.load()?, tls)?;
    config.alpn_protocols = vec![alpn.to_vec()];
    Ok(Some(tokio_rustls::TlsConnector::from(Arc::new(config))))
}
