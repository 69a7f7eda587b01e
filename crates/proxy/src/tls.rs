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

/// The client's `CLIENT_SSL` capability bit (also the server's, in the greeting).
pub const CLIENT_SSL: u32 = 0x800;
/// Payload length of an `SSLRequest`: capabilities (4), max packet (4), charset (1), filler (23).
const SSL_REQUEST_LEN: usize = 32;

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
    set_greeting_caps(packet, |low| low | CLIENT_SSL as u16);
}

/// Clears `CLIENT_SSL` in a v10 greeting packet: where no certificate is configured, a client must not be told
/// it could have one.
pub fn withhold_tls(packet: &mut [u8]) {
    set_greeting_caps(packet, |low| low & !(CLIENT_SSL as u16));
}

/// Rewrites the low 16 capability bits of a v10 greeting packet (header included).
pub(crate) fn set_greeting_caps(packet: &mut [u8], f: impl FnOnce(u16) -> u16) {
    let Some(payload) = packet.get_mut(4..) else { return };
    if payload.first() != Some(&10) {
        return;
    }
    let Some(version_end) = payload[1..].iter().position(|b| *b == 0) else { return };
    // protocol, version + NUL, connection id (4), scramble part 1 (8), filler (1), then the low capability bytes.
    let caps_at = 1 + version_end + 1 + 4 + 8 + 1;
    if let Some(caps) = payload.get_mut(caps_at..caps_at + 2) {
        let low = f(u16::from_le_bytes([caps[0], caps[1]]));
        caps.copy_from_slice(&low.to_le_bytes());
    }
}

/// The capability flags at the start of a handshake response (or `SSLRequest`) payload; 0 if it is too short.
pub fn response_capabilities(payload: &[u8]) -> u32 {
    payload.get(..4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])).unwrap_or(0)
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
    let len = usize::from(header[0]) | usize::from(header[1]) << 8 | usize::from(header[2]) << 16;
    if len > max_payload {
        return Err(io::Error::new(io::ErrorKind::InvalidData, format!("a {len}-byte packet during the login")));
    }
    let mut payload = vec![0u8; len];
    rd.read_exact(&mut payload).await?;
    Ok(Some((header[3], payload)))
}

/// Whether a client's first payload is an `SSLRequest`: `CLIENT_SSL` set and nothing after the filler. A full
/// handshake response with `CLIENT_SSL` set (a client that skipped the TLS handshake) is not one.
pub fn is_ssl_request(payload: &[u8]) -> bool {
    response_capabilities(payload) & CLIENT_SSL != 0 && payload.len() == SSL_REQUEST_LEN
}

/// Clears `CLIENT_SSL` in a handshake response payload: the server behind the proxy runs no TLS with it.
pub fn clear_ssl_capability(payload: &mut [u8]) {
    if let Some(caps) = payload.get_mut(..4) {
        let flags = u32::from_le_bytes([caps[0], caps[1], caps[2], caps[3]]) & !CLIENT_SSL;
        caps.copy_from_slice(&flags.to_le_bytes());
    }
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
    fn ssl_request_is_told_from_a_full_response() {
        let mut req = vec![0u8; 32];
        req[..4].copy_from_slice(&(CLIENT_SSL | 0x200).to_le_bytes());
        assert!(is_ssl_request(&req));
        let mut full = req.clone();
        full.extend_from_slice(b"app\0");
        assert!(!is_ssl_request(&full));
        clear_ssl_capability(&mut full);
        assert_eq!(response_capabilities(&full), 0x200);
        assert!(!is_ssl_request(&[0u8; 32]));
        assert!(!is_ssl_request(&[]));
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
