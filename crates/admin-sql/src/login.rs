//! The client's login packet (HandshakeResponse41), decoded to check the password ourselves and re-encoded to hand
//! the verified login on to opensrv-mysql's command loop.
//!
//! Why we log clients in ourselves: opensrv-mysql answers a refused login with error 1698
//! (ER_ACCESS_DENIED_NO_PASSWORD_ERROR) and its own message, whereas MariaDB, and so every client and script,
//! says 1045 "Access denied for user ...". We also want no byte from an unauthenticated client to reach a parser
//! that has no size limit. So the server reads the login packet itself (bounded), answers an auth switch if the
//! client started with another plugin, verifies the `mysql_native_password` token, and only then feeds opensrv a
//! login it will accept.

use paxsql_repl_server::packet::{caps, Reader};

/// The auth plugin we speak.
pub const NATIVE_PASSWORD: &[u8] = b"mysql_native_password";

/// A decoded HandshakeResponse41.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoginRequest {
    pub capabilities: u32,
    pub max_packet: u32,
    pub charset: u8,
    pub user: Vec<u8>,
    pub auth_response: Vec<u8>,
    /// Present iff CLIENT_CONNECT_WITH_DB is set and the name is not empty.
    pub database: Option<Vec<u8>>,
    /// Present iff CLIENT_PLUGIN_AUTH is set.
    pub plugin: Option<Vec<u8>>,
}

/// What the first client packet was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FirstPacket {
    Login(LoginRequest),
    /// A 32-byte SSLRequest: the client wants TLS before logging in.
    TlsRequest,
    /// A pre-4.1 client (HandshakeResponse320), which we do not serve.
    Protocol320,
}

impl LoginRequest {
    /// Decodes the first packet a client sends after our greeting. Never panics; a field that runs past the
    /// packet is an error naming it.
    pub fn decode(payload: &[u8]) -> Result<FirstPacket, paxsql_repl_server::Error> {
        let mut r = Reader::new(payload);
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
        let user = r.nul_str().to_vec();
        let auth_response = if capabilities & caps::PLUGIN_AUTH_LENENC_CLIENT_DATA != 0 {
            let n = r.lenenc_int("auth data length")?;
            let n = usize::try_from(n)
                .map_err(|_| paxsql_repl_server::Error::Malformed { what: "auth data length", offset: 36 })?;
            r.bytes(n, "auth data")?
        } else if capabilities & caps::SECURE_CONNECTION != 0 {
            let n = r.u8("auth data length")?;
            r.bytes(usize::from(n), "auth data")?
        } else {
            r.nul_str()
        }
        .to_vec();
        let database = if capabilities & caps::CONNECT_WITH_DB != 0 {
            Some(r.nul_str().to_vec()).filter(|db| !db.is_empty())
        } else {
            None
        };
        let plugin = (capabilities & caps::PLUGIN_AUTH != 0).then(|| r.nul_str().to_vec());
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

    /// Encodes the login as a client would send it (the inverse of [`LoginRequest::decode`] for a login that
    /// carries no connection attributes).
    pub fn encode(&self) -> Vec<u8> {
        let mut p = Vec::with_capacity(64 + self.user.len() + self.auth_response.len());
        p.extend_from_slice(&self.capabilities.to_le_bytes());
        p.extend_from_slice(&self.max_packet.to_le_bytes());
        p.push(self.charset);
        p.extend_from_slice(&[0; 23]);
        p.extend_from_slice(&self.user);
        p.push(0);
        if self.capabilities & caps::PLUGIN_AUTH_LENENC_CLIENT_DATA != 0 {
            paxsql_repl_server::packet::put_lenenc_str(&mut p, &self.auth_response);
        } else if self.capabilities & caps::SECURE_CONNECTION != 0 {
            // The 1-byte length form only carries up to 255 bytes; a token is 20.
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

    /// The login opensrv-mysql gets once we have verified the password: the client's capabilities (they decide
    /// the result-set format, e.g. CLIENT_DEPRECATE_EOF) without TLS and connection attributes (opensrv reads
    /// neither), the verified token under `mysql_native_password` (so opensrv does not start an auth switch),
    /// and the database the client asked for (opensrv answers it through our `on_init`).
    pub fn for_command_loop(&self, token: &[u8]) -> LoginRequest {
        let mut capabilities = self.capabilities & !(caps::SSL | caps::CONNECT_ATTRS | caps::CONNECT_WITH_DB);
        capabilities |= caps::PLUGIN_AUTH | caps::SECURE_CONNECTION | caps::PLUGIN_AUTH_LENENC_CLIENT_DATA;
        if self.database.is_some() {
            capabilities |= caps::CONNECT_WITH_DB;
        }
        LoginRequest {
            capabilities,
            max_packet: self.max_packet,
            charset: self.charset,
            user: self.user.clone(),
            auth_response: token.to_vec(),
            database: self.database.clone(),
            plugin: Some(NATIVE_PASSWORD.to_vec()),
        }
    }

    /// Whether the client logged in with a plugin other than ours (then it gets an AuthSwitchRequest).
    pub fn needs_auth_switch(&self) -> bool {
        self.plugin.as_deref().is_some_and(|p| !p.is_empty() && p != NATIVE_PASSWORD)
    }
}

/// AuthSwitchRequest payload: switch to `mysql_native_password` with `salt`.
pub fn auth_switch_request(salt: &[u8]) -> Vec<u8> {
    let mut p = Vec::with_capacity(2 + NATIVE_PASSWORD.len() + salt.len() + 1);
    p.push(0xFE);
    p.extend_from_slice(NATIVE_PASSWORD);
    p.push(0);
    p.extend_from_slice(salt);
    p.push(0);
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(capabilities: u32, database: Option<&str>, plugin: Option<&str>, auth_len: usize) -> LoginRequest {
        LoginRequest {
            capabilities: capabilities | caps::PROTOCOL_41,
            max_packet: 16 << 20,
            charset: 45,
            user: b"admin".to_vec(),
            auth_response: (0..auth_len as u8).map(|i| i.wrapping_mul(37).wrapping_add(1)).collect(),
            database: database.map(|d| d.as_bytes().to_vec()),
            plugin: plugin.map(|p| p.as_bytes().to_vec()),
        }
    }

    #[test]
    fn encode_decode_round_trip() {
        let cases = [
            sample(caps::SECURE_CONNECTION | caps::PLUGIN_AUTH, None, Some("mysql_native_password"), 20),
            sample(caps::PLUGIN_AUTH_LENENC_CLIENT_DATA | caps::PLUGIN_AUTH, None, Some("client_ed25519"), 300),
            sample(
                caps::SECURE_CONNECTION | caps::CONNECT_WITH_DB | caps::PLUGIN_AUTH | caps::DEPRECATE_EOF,
                Some("paxsql"),
                Some("mysql_native_password"),
                20,
            ),
            sample(caps::SECURE_CONNECTION, None, None, 0),
            sample(caps::PLUGIN_AUTH_LENENC_CLIENT_DATA | caps::CONNECT_WITH_DB, Some("x"), None, 0),
        ];
        for login in cases {
            let bytes = login.encode();
            assert_eq!(LoginRequest::decode(&bytes).unwrap(), FirstPacket::Login(login.clone()), "{login:?}");
            let relayed = login.for_command_loop(&[7; 20]);
            assert_eq!(LoginRequest::decode(&relayed.encode()).unwrap(), FirstPacket::Login(relayed.clone()));
        }
    }

    #[test]
    fn decodes_a_mariadb_cli_login() {
        // Shaped like the mariadb 10.11 CLI's `-u admin -p... -D paxsql` without connection attributes: caps
        // 0x81aea20d (CONNECT_WITH_DB, PROTOCOL_41, SECURE_CONNECTION, PLUGIN_AUTH, PLUGIN_AUTH_LENENC,
        // DEPRECATE_EOF, ...), max packet 16 MiB, charset 33.
        let mut p = Vec::new();
        p.extend_from_slice(&0x81ae_a20du32.to_le_bytes()); // capabilities
        p.extend_from_slice(&0x0100_0000u32.to_le_bytes()); // max packet
        p.push(33); // charset utf8_general_ci
        p.extend_from_slice(&[0; 23]); // reserved
        p.extend_from_slice(b"admin\0"); // user
        p.push(20); // lenenc auth length
        p.extend_from_slice(&[0xAA; 20]); // token
        p.extend_from_slice(b"paxsql\0"); // database
        p.extend_from_slice(b"mysql_native_password\0"); // plugin
        let FirstPacket::Login(login) = LoginRequest::decode(&p).unwrap() else { panic!("not a login") };
        assert_eq!(login.user, b"admin");
        assert_eq!(login.auth_response, vec![0xAA; 20]);
        assert_eq!(login.database.as_deref(), Some(&b"paxsql"[..]));
        assert!(!login.needs_auth_switch());
    }

    #[test]
    fn tls_request_and_old_protocol_are_recognised() {
        let mut p = Vec::new();
        p.extend_from_slice(&(caps::PROTOCOL_41 | caps::SSL).to_le_bytes());
        p.extend_from_slice(&[0; 28]);
        assert_eq!(LoginRequest::decode(&p).unwrap(), FirstPacket::TlsRequest);
        // HandshakeResponse320: 2-byte capabilities without CLIENT_PROTOCOL_41, 3-byte max packet, user.
        assert_eq!(LoginRequest::decode(&[0x05, 0x80, 0, 0, 0, b'u', 0]).unwrap(), FirstPacket::Protocol320);
    }

    #[test]
    fn truncated_logins_are_errors_not_panics() {
        let full = sample(caps::PLUGIN_AUTH_LENENC_CLIENT_DATA | caps::PLUGIN_AUTH, Some("db"), Some("p"), 20).encode();
        for len in 0..full.len() {
            // Every prefix either decodes (the trailing NUL-terminated fields may be cut) or is an error.
            let _ = LoginRequest::decode(&full[..len]);
        }
        assert!(LoginRequest::decode(&full[..10]).is_err());
        // A lenenc length far beyond the packet.
        let mut p = full[..32].to_vec();
        p.extend_from_slice(b"u\0");
        p.extend_from_slice(&[0xFE, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x7F]);
        assert!(LoginRequest::decode(&p).is_err());
    }
}
