//! The connection phase: the server's greeting (`HandshakeV10`), the client's login (`HandshakeResponse41`, or
//! the 32-byte `SSLRequest` that asks for TLS first) and the server's auth switch — each in both directions, since
//! paxsql is a client of mariadbd (the binlog capture) and a server to mariadbd and to applications (the
//! replication server, the admin port, the proxy that reads logins on their way through).

use crate::auth::NATIVE_PASSWORD;
use crate::error::WireError;
use crate::reader::{put_lenenc_str, Reader};
use crate::{caps, ErrPacket, Result};

/// Payload length of an `SSLRequest`: capabilities (4), max packet (4), charset (1), filler (23).
pub const SSL_REQUEST_LEN: usize = 32;

/// A server's v10 greeting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Greeting {
    /// E.g. `5.5.5-10.11.19-MariaDB-0+deb12u1-log` (MariaDB prefixes `5.5.5-` for old clients).
    pub server_version: String,
    pub connection_id: u32,
    pub capabilities: u32,
    pub charset: u8,
    pub status: u16,
    /// The nonce for `mysql_native_password` (20 bytes, never a NUL, as MariaDB's own).
    pub scramble: Vec<u8>,
    /// The plugin the server proposes for the login.
    pub auth_plugin: String,
}

impl Greeting {
    /// The payload. The 10 bytes after the auth data length are 6 reserved bytes and MariaDB's 4 bytes of extended
    /// capabilities — none: with `CLIENT_LONG_PASSWORD` set, MariaDB clients read this as a MySQL-compatible server.
    pub fn encode(&self) -> Vec<u8> {
        let (part1, part2) = self.scramble.split_at(self.scramble.len().min(8));
        let mut p = Vec::with_capacity(64 + self.server_version.len() + self.auth_plugin.len());
        p.push(10);
        p.extend_from_slice(self.server_version.as_bytes());
        p.push(0);
        p.extend_from_slice(&self.connection_id.to_le_bytes());
        p.extend_from_slice(part1);
        p.extend(std::iter::repeat_n(0, 8 - part1.len()));
        p.push(0);
        p.extend_from_slice(&(self.capabilities as u16).to_le_bytes());
        p.push(self.charset);
        p.extend_from_slice(&self.status.to_le_bytes());
        p.extend_from_slice(&((self.capabilities >> 16) as u16).to_le_bytes());
        p.push((self.scramble.len() + 1).min(255) as u8);
        p.extend_from_slice(&[0; 10]);
        p.extend_from_slice(part2);
        p.push(0);
        p.extend_from_slice(self.auth_plugin.as_bytes());
        p.push(0);
        p
    }

    /// Parses a greeting payload. The caller tells an ERR in its place (too many connections, host blocked) by
    /// its first byte 0xFF ([`ErrPacket::decode`]).
    pub fn decode(payload: &[u8]) -> Result<Greeting> {
        let mut r = Reader::new(payload, "greeting");
        if r.u8("protocol version")? != 10 {
            return Err(WireError::Malformed { during: "greeting", what: "protocol version is not 10", offset: 0 });
        }
        let server_version = String::from_utf8_lossy(r.nul_terminated("server version", false)?).into_owned();
        let connection_id = r.u32("connection id")?;
        let mut scramble = r.bytes(8, "scramble part 1")?.to_vec();
        r.u8("filler")?;
        let caps_low = r.u16("capabilities (low)")?;
        let charset = r.u8("charset")?;
        let status = r.u16("status flags")?;
        let caps_high = r.u16("capabilities (high)")?;
        let capabilities = u32::from(caps_low) | u32::from(caps_high) << 16;
        let auth_data_len = r.u8("auth data length")?;
        r.bytes(10, "reserved")?;
        if capabilities & caps::PROTOCOL_41 == 0 || capabilities & caps::SECURE_CONNECTION == 0 {
            return Err(WireError::Malformed {
                during: "greeting",
                what: "server lacks CLIENT_PROTOCOL_41 / CLIENT_SECURE_CONNECTION",
                offset: 0,
            });
        }
        // Part 2 is max(13, auth_data_len - 8) bytes; its last byte is a NUL that is not part of the nonce.
        let part2_len = usize::from(auth_data_len).saturating_sub(8).max(13);
        let part2 = r.bytes(part2_len, "scramble part 2")?;
        scramble.extend_from_slice(part2.strip_suffix(&[0]).unwrap_or(part2));
        let auth_plugin = if capabilities & caps::PLUGIN_AUTH != 0 {
            String::from_utf8_lossy(r.nul_terminated("auth plugin name", true)?).into_owned()
        } else {
            NATIVE_PASSWORD.to_string()
        };
        Ok(Greeting { server_version, connection_id, capabilities, charset, status, scramble, auth_plugin })
    }
}

/// Rewrites the low 16 capability bits of a v10 greeting packet (4-byte header included) in place: the proxy
/// forwards mariadbd's greeting but takes out what it cannot give (compression) and says whether it offers TLS.
/// A packet that is not a greeting (an ERR from a full server) or is cut short is left as it is.
pub fn set_greeting_capabilities(packet: &mut [u8], f: impl FnOnce(u16) -> u16) {
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

/// A decoded `HandshakeResponse41`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoginRequest {
    pub capabilities: u32,
    pub max_packet: u32,
    pub charset: u8,
    pub user: Vec<u8>,
    pub auth_response: Vec<u8>,
    /// Present iff `CLIENT_CONNECT_WITH_DB` is set and the name is not empty.
    pub database: Option<Vec<u8>>,
    /// Present iff `CLIENT_PLUGIN_AUTH` is set.
    pub plugin: Option<Vec<u8>>,
}

/// What a client's first packet after the greeting was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FirstPacket {
    Login(LoginRequest),
    /// A 32-byte `SSLRequest`: the client wants TLS before logging in.
    TlsRequest,
    /// A pre-4.1 client (`HandshakeResponse320`), which paxsql does not serve.
    Protocol320,
}

impl LoginRequest {
    /// A client's login with `mysql_native_password`: the capabilities it wants that the server offers.
    pub fn native(wanted: u32, server: u32, max_packet: u32, user: &str, token: Vec<u8>) -> LoginRequest {
        let capabilities = wanted & (server | caps::LONG_PASSWORD);
        LoginRequest {
            capabilities,
            max_packet,
            charset: crate::CHARSET_UTF8MB4_GENERAL_CI,
            user: user.as_bytes().to_vec(),
            auth_response: token,
            database: None,
            plugin: (capabilities & caps::PLUGIN_AUTH != 0).then(|| NATIVE_PASSWORD.as_bytes().to_vec()),
        }
    }

    /// Decodes the first packet a client sends after the greeting. A field that runs past the packet is an
    /// error naming it. Connection attributes after the plugin name are not read.
    pub fn decode(payload: &[u8]) -> Result<FirstPacket> {
        let mut r = Reader::new(payload, "login packet");
        let capabilities = r.u32("capability flags")?;
        if capabilities & caps::PROTOCOL_41 == 0 {
            return Ok(FirstPacket::Protocol320);
        }
        let max_packet = r.u32("max packet size")?;
        let charset = r.u8("character set")?;
        r.bytes(23, "reserved bytes")?;
        if r.is_empty() && capabilities & caps::SSL != 0 {
            return Ok(FirstPacket::TlsRequest);
        }
        let user = r.nul_terminated("user name", true)?.to_vec();
        let auth_response = if capabilities & caps::PLUGIN_AUTH_LENENC_CLIENT_DATA != 0 {
            let n = r.lenenc_len("auth data length")?;
            let n = usize::try_from(n).map_err(|_| r.error("auth data length"))?;
            r.bytes(n, "auth data")?
        } else if capabilities & caps::SECURE_CONNECTION != 0 {
            let n = r.u8("auth data length")?;
            r.bytes(usize::from(n), "auth data")?
        } else {
            r.nul_terminated("auth data", true)?
        }
        .to_vec();
        let database = if capabilities & caps::CONNECT_WITH_DB != 0 {
            Some(r.nul_terminated("database", true)?.to_vec()).filter(|db| !db.is_empty())
        } else {
            None
        };
        let plugin = if capabilities & caps::PLUGIN_AUTH != 0 {
            Some(r.nul_terminated("auth plugin name", true)?.to_vec())
        } else {
            None
        };
        Ok(FirstPacket::Login(LoginRequest {
            capabilities,
            max_packet,
            charset,
            user,
            auth_response,
            database,
            plugin,
        }))
    }

    /// Encodes the login as a client sends it (the inverse of [`LoginRequest::decode`] for a login without
    /// connection attributes).
    pub fn encode(&self) -> Vec<u8> {
        let mut p = Vec::with_capacity(64 + self.user.len() + self.auth_response.len());
        p.extend_from_slice(&self.capabilities.to_le_bytes());
        p.extend_from_slice(&self.max_packet.to_le_bytes());
        p.push(self.charset);
        // 19 reserved bytes and MariaDB's 4 bytes of extended capabilities (none).
        p.extend_from_slice(&[0; 23]);
        p.extend_from_slice(&self.user);
        p.push(0);
        if self.capabilities & caps::PLUGIN_AUTH_LENENC_CLIENT_DATA != 0 {
            put_lenenc_str(&mut p, &self.auth_response);
        } else if self.capabilities & caps::SECURE_CONNECTION != 0 {
            // The 1-byte length form carries at most 255 bytes; a token is 20.
            let n = self.auth_response.len().min(255);
            p.push(n as u8);
            p.extend_from_slice(&self.auth_response[..n]);
        } else {
            p.extend_from_slice(&self.auth_response);
            p.push(0);
        }
        if self.capabilities & caps::CONNECT_WITH_DB != 0 {
            p.extend_from_slice(self.database.as_deref().unwrap_or_default());
            p.push(0);
        }
        if self.capabilities & caps::PLUGIN_AUTH != 0 {
            p.extend_from_slice(self.plugin.as_deref().unwrap_or_default());
            p.push(0);
        }
        p
    }

    /// Whether the client logged in with a plugin other than `mysql_native_password` (then it gets an
    /// [`auth_switch_request`]).
    pub fn needs_auth_switch(&self) -> bool {
        self.plugin.as_deref().is_some_and(|p| !p.is_empty() && p != NATIVE_PASSWORD.as_bytes())
    }
}

/// The capability flags at the start of a login (or `SSLRequest`) payload; 0 if it is too short.
pub fn login_capabilities(payload: &[u8]) -> u32 {
    payload.get(..4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])).unwrap_or(0)
}

/// Whether a client's first payload is an `SSLRequest`: `CLIENT_SSL` set and nothing after the filler. A full
/// login with `CLIENT_SSL` set (a client that skipped the TLS handshake) is not one.
pub fn is_ssl_request(payload: &[u8]) -> bool {
    login_capabilities(payload) & caps::SSL != 0 && payload.len() == SSL_REQUEST_LEN
}

/// Clears `CLIENT_SSL` in a login payload, in place: the server behind a TLS-terminating proxy runs no TLS.
pub fn clear_ssl_capability(payload: &mut [u8]) {
    if let Some(flags) = payload.get_mut(..4) {
        let cleared = u32::from_le_bytes([flags[0], flags[1], flags[2], flags[3]]) & !caps::SSL;
        flags.copy_from_slice(&cleared.to_le_bytes());
    }
}

/// The user name of a login payload without decoding the rest; `None` when the payload is too short, the name
/// does not end or is not UTF-8.
pub fn login_user(payload: &[u8]) -> Option<&str> {
    let rest = payload.get(SSL_REQUEST_LEN..)?;
    let end = rest.iter().position(|b| *b == 0)?;
    std::str::from_utf8(&rest[..end]).ok()
}

/// The user name of a `COM_CHANGE_USER` payload (the command byte, then the NUL-terminated name); `None` when it
/// does not end or is not UTF-8.
pub fn change_user_name(payload: &[u8]) -> Option<&str> {
    let rest = payload.get(1..)?;
    let end = rest.iter().position(|b| *b == 0)?;
    std::str::from_utf8(&rest[..end]).ok()
}

/// `AuthSwitchRequest` payload: switch to `mysql_native_password` with `salt`.
pub fn auth_switch_request(salt: &[u8]) -> Vec<u8> {
    let mut p = Vec::with_capacity(2 + NATIVE_PASSWORD.len() + salt.len() + 1);
    p.push(0xFE);
    p.extend_from_slice(NATIVE_PASSWORD.as_bytes());
    p.push(0);
    p.extend_from_slice(salt);
    p.push(0);
    p
}

/// The server's answer to a login.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthReply {
    Ok,
    Err(ErrPacket),
    /// `0xFE plugin\0 data`: log in again with `plugin` and the fresh nonce `data`.
    Switch {
        plugin: String,
        data: Vec<u8>,
    },
    /// `0x01 ...`: more rounds of a multi-step plugin (caching_sha2, ed25519 ...), which paxsql does not speak.
    MoreData,
}

impl AuthReply {
    pub fn decode(payload: &[u8]) -> Result<AuthReply> {
        match payload.first() {
            Some(0x00) => Ok(AuthReply::Ok),
            Some(0xFF) => Ok(AuthReply::Err(ErrPacket::decode(payload)?)),
            // Pre-4.1 "use the old password hash" request.
            Some(0xFE) if payload.len() == 1 => {
                Ok(AuthReply::Switch { plugin: "mysql_old_password".into(), data: Vec::new() })
            }
            Some(0xFE) => {
                let mut r = Reader::new(payload, "auth switch request");
                r.u8("marker")?;
                let plugin = String::from_utf8_lossy(r.nul_terminated("plugin name", true)?).into_owned();
                let data = r.rest();
                Ok(AuthReply::Switch { plugin, data: data.strip_suffix(&[0]).unwrap_or(data).to_vec() })
            }
            Some(0x01) => Ok(AuthReply::MoreData),
            _ => Err(WireError::Malformed { during: "login", what: "unexpected reply to the login packet", offset: 0 }),
        }
    }
}

#[cfg(test)]
mod tests;
