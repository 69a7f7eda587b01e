//! Moving bytes between a client and its backend once the connection is set up.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use crate::wire::ProxyHeader;
use crate::{ForwardMode, ProxyError};

/// Buffer per direction in [`ForwardMode::Copy`]: a large result set moves in few syscalls.
const COPY_BUF_BYTES: usize = 64 * 1024;

/// Bytes moved by one forwarded connection, and why it ended if not by an orderly close.
#[derive(Debug)]
pub(crate) struct Forwarded {
    pub client_to_server: u64,
    pub server_to_client: u64,
    pub error: Option<io::Error>,
}

/// Forwards both ways until both sides have closed (or one fails). Half-closes pass through, like
/// `copy_bidirectional`: MariaDB clients send `COM_QUIT` and close, then the server closes too.
pub(crate) async fn forward(client: &mut TcpStream, server: &mut TcpStream, mode: ForwardMode) -> Forwarded {
    match mode {
        ForwardMode::Splice => match tokio_splice2::copy_bidirectional(client, server).await {
            Ok(t) => Forwarded { client_to_server: t.tx as u64, server_to_client: t.rx as u64, error: t.error },
            // Creating the pipes failed (fd limit): nothing was forwarded.
            Err(e) => Forwarded { client_to_server: 0, server_to_client: 0, error: Some(e) },
        },
        ForwardMode::Copy => {
            match tokio::io::copy_bidirectional_with_sizes(client, server, COPY_BUF_BYTES, COPY_BUF_BYTES).await {
                Ok((c2s, s2c)) => Forwarded { client_to_server: c2s, server_to_client: s2c, error: None },
                Err(e) => Forwarded { client_to_server: 0, server_to_client: 0, error: Some(e) },
            }
        }
    }
}

/// Connects to a backend mariadbd and, if asked, sends the PROXY header, all within `timeout`.
pub(crate) async fn connect_backend(
    addr: SocketAddr,
    timeout: Duration,
    header: Option<ProxyHeader>,
) -> Result<TcpStream, ProxyError> {
    let unreachable = |detail: String| ProxyError::BackendUnreachable { addr, timeout_ms: timeout.as_millis(), detail };
    let attempt = async {
        let mut stream = TcpStream::connect(addr).await?;
        // Queries and results are small packets; Nagle would hold them back.
        stream.set_nodelay(true)?;
        if let Some(header) = header {
            stream.write_all(&header.encode_v1()).await?;
        }
        Ok::<_, io::Error>(stream)
    };
    match tokio::time::timeout(timeout, attempt).await {
        Ok(Ok(stream)) => Ok(stream),
        Ok(Err(e)) => Err(unreachable(e.to_string())),
        Err(_) => Err(unreachable("timed out".into())),
    }
}

/// Closes `stream` with a RST instead of a FIN: bytes still queued in the kernel for it are discarded, not sent.
/// Used on the stale master's side of a cut connection, so a statement the client sent a moment ago does not
/// reach a master that lost its lease.
pub(crate) fn abort(stream: TcpStream) {
    // tokio deprecates SO_LINGER because a non-zero linger blocks in close(); a zero linger never blocks.
    #[allow(deprecated)]
    let _ = stream.set_linger(Some(Duration::ZERO));
    drop(stream);
}

/// Larger than any server greeting (a few hundred bytes); a backend that announces more is not a MariaDB server.
const GREETING_BYTES_MAX: usize = 64 * 1024;

/// Reads the backend's first packet (its handshake greeting), whole, within `timeout`. The RW port hands a client
/// to a backend only once it has greeted: a backend that dies or is replaced before then has told the client
/// nothing, so the client can still be held and sent to the next master instead of seeing a dropped connection.
pub(crate) async fn read_greeting(
    server: &mut TcpStream,
    addr: SocketAddr,
    timeout: Duration,
) -> Result<Vec<u8>, ProxyError> {
    let unreachable = |detail: String| ProxyError::BackendUnreachable { addr, timeout_ms: timeout.as_millis(), detail };
    let read = async {
        let mut packet = vec![0u8; 4];
        server.read_exact(&mut packet).await?;
        let len = usize::from(packet[0]) | usize::from(packet[1]) << 8 | usize::from(packet[2]) << 16;
        if len > GREETING_BYTES_MAX {
            return Err(io::Error::new(io::ErrorKind::InvalidData, format!("a {len}-byte first packet")));
        }
        packet.resize(4 + len, 0);
        server.read_exact(&mut packet[4..]).await?;
        Ok::<_, io::Error>(packet)
    };
    match tokio::time::timeout(timeout, read).await {
        Ok(Ok(packet)) => Ok(packet),
        Ok(Err(e)) => Err(unreachable(format!("no greeting: {e}"))),
        Err(_) => Err(unreachable("no greeting in time".into())),
    }
}
