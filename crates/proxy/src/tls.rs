//! TLS for MySQL clients, terminated where paxsql meets them (the RW and RO ports, and the admin SQL port).
//!
//! MySQL starts every connection in plaintext: the server's greeting announces `CLIENT_SSL`, a client that wants
//! TLS answers with a 32-byte `SSLRequest` (its capabilities, `CLIENT_SSL` set, no user), both sides run the TLS
//! handshake, and the client sends its real handshake response — with sequence id 2 instead of 1 — inside the
//! encrypted stream. The proxy terminates rather than passing the handshake on to mariadbd because it must read
//! every command (KILL of a waiting commit; docs/ARCHITECTURE.md §7), and because a replica's mariadbd must keep
//! refusing every TCP login (`require_secure_transport` without TLS configured): TLS on mariadbd would let
//! encrypted logins of privileged accounts reach replicas again.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

use paxsql_mysql_wire::caps::SSL as CLIENT_SSL;
use paxsql_mysql_wire::handshake::set_greeting_capabilities;

/// Why the server certificate or key cannot be used. Each names the file.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{path} holds no PEM certificate")]
    NoCertificate { path: PathBuf },
    #[error("{path} holds no PEM private key (PKCS#8, PKCS#1 or SEC1): {detail}")]
    NoKey { path: PathBuf, detail: String },
    #[error("the key in {key} does not fit the certificate in {cert}: {detail}")]
    Mismatch { cert: PathBuf, key: PathBuf, detail: String },
}

/// A server certificate and key, ready to accept TLS from MySQL clients.
#[derive(Clone)]
pub struct ServerTls {
    acceptor: TlsAcceptor,
    cert: PathBuf,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls").field("cert", &self.cert).finish_non_exhaustive()
    }
}

impl ServerTls {
    /// Loads `cert` (the chain, leaf first) and `key` (PEM). Errors name the file that is missing, unreadable or
    /// wrong, so a node refuses to start with a message an operator can act on.
    pub fn load(cert: &Path, key: &Path) -> Result<ServerTls, TlsError> {
        let read = |path: &Path| std::fs::read(path).map_err(|source| TlsError::Read { path: path.into(), source });
        let cert_pem = read(cert)?;
        let chain: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(&cert_pem).filter_map(Result::ok).collect();
        if chain.is_empty() {
            return Err(TlsError::NoCertificate { path: cert.into() });
        }
        let key_pem = read(key)?;
        let private = PrivateKeyDer::from_pem_slice(&key_pem)
            .map_err(|e| TlsError::NoKey { path: key.into(), detail: e.to_string() })?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Mismatch { cert: cert.into(), key: key.into(), detail: e.to_string() })?
            .with_no_client_auth()
            .with_single_cert(chain, private)
            .map_err(|e| TlsError::Mismatch { cert: cert.into(), key: key.into(), detail: e.to_string() })?;
        Ok(ServerTls { acceptor: TlsAcceptor::from(Arc::new(config)), cert: cert.into() })
    }

    /// Runs the server side of the TLS handshake on a client that sent an `SSLRequest`.
    pub async fn accept(&self, client: TcpStream) -> io::Result<TlsStream<TcpStream>> {
        self.acceptor.accept(client).await
    }
}

/// Sets `CLIENT_SSL` in a v10 greeting packet (4-byte header included), so clients know they may ask for TLS. A
/// packet that is not a greeting (an ERR from a full server) is left as it is.
pub fn announce_tls(packet: &mut [u8]) {
    set_greeting_capabilities(packet, |low| low | CLIENT_SSL as u16);
}

/// Clears `CLIENT_SSL` in a v10 greeting packet: where no certificate is configured, a client must not be told
/// it could have one.
pub fn withhold_tls(packet: &mut [u8]) {
    set_greeting_capabilities(packet, |low| low & !(CLIENT_SSL as u16));
}

/// Reads one whole packet (sequence id, payload of at most `max_payload` bytes) and not a byte past it: a client that
/// asks for TLS sends its TLS hello right behind its `SSLRequest`, and those bytes belong to the TLS layer.
/// `Ok(None)`: the peer closed before the packet began.
pub async fn read_one_packet<R: tokio::io::AsyncRead + Unpin>(
    rd: &mut R,
    max_payload: usize,
) -> io::Result<Option<(u8, Vec<u8>)>> {
    use tokio::io::AsyncReadExt as _;
    let mut header = [0u8; 4];
    match rd.read_exact(&mut header).await {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = paxsql_mysql_wire::packet::chunk_len(&header);
    if len > max_payload {
        return Err(io::Error::new(io::ErrorKind::InvalidData, format!("a {len}-byte packet during the login")));
    }
    let mut payload = vec![0u8; len];
    rd.read_exact(&mut payload).await?;
    Ok(Some((header[3], payload)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A greeting as MariaDB 10.11 sends it, cut after the low capability bytes.
    fn greeting(low_caps: u16) -> Vec<u8> {
        let mut payload = vec![10u8];
        payload.extend_from_slice(b"10.11.6-MariaDB\0");
        payload.extend_from_slice(&7u32.to_le_bytes());
        payload.extend_from_slice(b"abcdefgh\0");
        payload.extend_from_slice(&low_caps.to_le_bytes());
        let mut packet = (payload.len() as u32).to_le_bytes()[..3].to_vec();
        packet.push(0);
        packet.extend_from_slice(&payload);
        packet
    }

    #[test]
    fn greeting_capabilities_are_set_and_cleared() {
        let mut g = greeting(0xF7FE & !(CLIENT_SSL as u16));
        announce_tls(&mut g);
        assert_eq!(u16::from_le_bytes([g[g.len() - 2], g[g.len() - 1]]), 0xF7FE | CLIENT_SSL as u16);
        withhold_tls(&mut g);
        assert_eq!(u16::from_le_bytes([g[g.len() - 2], g[g.len() - 1]]) & CLIENT_SSL as u16, 0);
        // Not a greeting, or cut short: untouched.
        let mut err = vec![5, 0, 0, 0, 0xFF, 1, 2, 3, 4];
        let before = err.clone();
        announce_tls(&mut err);
        assert_eq!(err, before);
        let mut short = greeting(0)[..10].to_vec();
        let before = short.clone();
        announce_tls(&mut short);
        assert_eq!(short, before);
    }

    #[test]
    fn unusable_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.pem");
        let err = ServerTls::load(&missing, &missing).unwrap_err();
        assert!(err.to_string().contains("missing.pem"), "{err}");
        let junk = dir.path().join("junk.pem");
        std::fs::write(&junk, "not a certificate").unwrap();
        let err = ServerTls::load(&junk, &junk).unwrap_err();
        assert!(matches!(err, TlsError::NoCertificate { .. }), "{err}");
        assert!(err.to_string().contains("junk.pem"), "{err}");
    }
}
