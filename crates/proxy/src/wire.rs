//! The only bytes the proxy writes itself: a MySQL ERR packet sent instead of the server greeting, and the PROXY
//! protocol v1 header sent to MariaDB before the client's bytes. Everything else is forwarded untouched.

use std::net::{IpAddr, SocketAddr};

use crate::ProxyError;

/// MariaDB `ER_CON_COUNT_ERROR` ("Too many connections"), what a full server answers too.
pub const ER_CON_COUNT_ERROR: u16 = 1040;
/// MariaDB `ER_SERVER_SHUTDOWN`: "the server you reached cannot serve you now, retry". Connection pools treat its
/// SQLSTATE class 08 as a connection failure and retry, which is right for an election or an unreachable master.
pub const ER_SERVER_SHUTDOWN: u16 = 1053;
/// SQLSTATE of a connection failure (`08S01`, "communication link failure").
pub const SQLSTATE_CONNECTION_FAILURE: [u8; 5] = *b"08S01";
/// SQLSTATE of `ER_CON_COUNT_ERROR`.
pub const SQLSTATE_CONNECTION_REJECTED: [u8; 5] = *b"08004";
/// MariaDB's `MYSQL_ERRMSG_SIZE`: clients keep at most this many bytes of a message.
const MESSAGE_BYTES_MAX: usize = 511;
/// PROXY v1: "the maximum line length is 107 bytes including the CRLF" (haproxy proxy-protocol.txt §2.1).
const PROXY_V1_LINE_MAX: usize = 107;

/// A MySQL ERR packet (protocol 4.1 layout: `0xFF`, code, `#`, SQLSTATE, message).
///
/// Before the handshake the client has not announced `CLIENT_PROTOCOL_41`, and MariaDB itself then leaves the
/// `#SQLSTATE` marker out. We put it in because libmariadb (the `mariadb` CLI, Connector/C and everything built
/// on it), Connector/J, Go's driver and PyMySQL all look for the `#` and so report `08S01`; `mysql_async` parses a
/// pre-handshake ERR without capabilities and shows `#08S01` at the start of the message instead (code intact).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ErrPacket {
    /// MariaDB error code.
    pub code: u16,
    /// Five ASCII characters.
    pub sql_state: [u8; 5],
    /// Human-readable message, cut to 511 bytes (at a char boundary) when encoded.
    pub message: String,
}

impl ErrPacket {
    /// The answer for a client the proxy cannot serve now (no master, master unreachable).
    pub fn connection_failure(message: impl Into<String>) -> Self {
        ErrPacket { code: ER_SERVER_SHUTDOWN, sql_state: SQLSTATE_CONNECTION_FAILURE, message: message.into() }
    }

    /// The answer when `max_connections` is reached.
    pub fn too_many_connections() -> Self {
        ErrPacket {
            code: ER_CON_COUNT_ERROR,
            sql_state: SQLSTATE_CONNECTION_REJECTED,
            message: "paxsql: too many connections".into(),
        }
    }

    /// One whole packet: 3-byte little-endian payload length, sequence id `seq`, payload.
    pub fn encode(&self, seq: u8) -> Vec<u8> {
        let mut cut = self.message.len().min(MESSAGE_BYTES_MAX);
        while !self.message.is_char_boundary(cut) {
            cut -= 1;
        }
        let message = &self.message.as_bytes()[..cut];
        let payload_len = 1 + 2 + 1 + 5 + message.len();
        let mut out = Vec::with_capacity(4 + payload_len);
        // payload_len <= 520, so it fits the 3-byte length.
        out.extend_from_slice(&(payload_len as u32).to_le_bytes()[..3]);
        out.push(seq);
        out.push(0xFF);
        out.extend_from_slice(&self.code.to_le_bytes());
        out.push(b'#');
        out.extend_from_slice(&self.sql_state);
        out.extend_from_slice(message);
        out
    }

    /// Parses one whole packet as written by [`ErrPacket::encode`]; returns the sequence id too.
    /// `Ok(None)`: not all bytes are there yet.
    pub fn decode(buf: &[u8]) -> Result<Option<(u8, ErrPacket)>, ProxyError> {
        let malformed = |what, offset| ProxyError::MalformedErrPacket { what, offset };
        if buf.len() < 4 {
            return Ok(None);
        }
        let payload_len = u32::from_le_bytes([buf[0], buf[1], buf[2], 0]) as usize;
        let Some(payload) = buf.get(4..4 + payload_len) else {
            return Ok(None);
        };
        if buf.len() > 4 + payload_len {
            return Err(malformed("bytes after the packet", 4 + payload_len));
        }
        if payload.first() != Some(&0xFF) {
            return Err(malformed("header byte is not 0xFF", 4));
        }
        if payload.len() < 9 {
            return Err(malformed("payload shorter than header, code and SQLSTATE", 4 + payload.len()));
        }
        if payload[3] != b'#' {
            return Err(malformed("no '#' SQLSTATE marker", 7));
        }
        let code = u16::from_le_bytes([payload[1], payload[2]]);
        let mut sql_state = [0u8; 5];
        sql_state.copy_from_slice(&payload[4..9]);
        let message =
            std::str::from_utf8(&payload[9..]).map_err(|e| malformed("message is not UTF-8", 13 + e.valid_up_to()))?;
        Ok(Some((buf[3], ErrPacket { code, sql_state, message: message.to_string() })))
    }
}

/// The addresses a PROXY protocol v1 header carries: who connected to the proxy, and where.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProxyHeader {
    /// The client, as the proxy saw it; MariaDB uses this for grants, `USER()` and `SHOW PROCESSLIST`.
    pub source: SocketAddr,
    /// The proxy address the client connected to.
    pub destination: SocketAddr,
}

impl ProxyHeader {
    /// The v1 (text) line, e.g. `PROXY TCP4 127.0.0.2 127.0.0.1 40312 3306\r\n`. v1 has one family per line, so
    /// a mixed pair is sent as IPv6 with the IPv4 side mapped (`::ffff:a.b.c.d`).
    pub fn encode_v1(&self) -> Vec<u8> {
        let (family, src, dst) = match (self.source.ip(), self.destination.ip()) {
            (IpAddr::V4(s), IpAddr::V4(d)) => ("TCP4", IpAddr::V4(s), IpAddr::V4(d)),
            (s, d) => ("TCP6", IpAddr::V6(to_v6(s)), IpAddr::V6(to_v6(d))),
        };
        format!("PROXY {family} {src} {dst} {} {}\r\n", self.source.port(), self.destination.port()).into_bytes()
    }

    /// Parses a v1 line at the start of `buf`; returns the header and its length in bytes.
    /// `Ok(None)`: no CRLF yet within the 107-byte limit. `UNKNOWN` lines are rejected: we never send them.
    pub fn decode_v1(buf: &[u8]) -> Result<Option<(ProxyHeader, usize)>, ProxyError> {
        let malformed = |what, offset| ProxyError::MalformedProxyHeader { what, offset };
        let window = &buf[..buf.len().min(PROXY_V1_LINE_MAX)];
        let Some(cr) = window.windows(2).position(|w| w == b"\r\n") else {
            return if buf.len() >= PROXY_V1_LINE_MAX {
                Err(malformed("no CRLF within 107 bytes", 0))
            } else {
                Ok(None)
            };
        };
        let line = std::str::from_utf8(&buf[..cr]).map_err(|e| malformed("not ASCII", e.valid_up_to()))?;
        let fields: Vec<&str> = line.split(' ').collect();
        let [magic, family, src, dst, sport, dport] = fields.as_slice() else {
            return Err(malformed("not six space-separated fields", 0));
        };
        if *magic != "PROXY" {
            return Err(malformed("does not start with PROXY", 0));
        }
        let src_ip: IpAddr = src.parse().map_err(|_| malformed("bad source address", 0))?;
        let dst_ip: IpAddr = dst.parse().map_err(|_| malformed("bad destination address", 0))?;
        let family_ok = match *family {
            "TCP4" => src_ip.is_ipv4() && dst_ip.is_ipv4(),
            "TCP6" => src_ip.is_ipv6() && dst_ip.is_ipv6(),
            _ => return Err(malformed("family is neither TCP4 nor TCP6", 6)),
        };
        if !family_ok {
            return Err(malformed("address does not match the family", 0));
        }
        let port = |p: &str| p.parse::<u16>().map_err(|_| malformed("bad port", 0));
        let header = ProxyHeader {
            source: SocketAddr::new(src_ip, port(sport)?),
            destination: SocketAddr::new(dst_ip, port(dport)?),
        };
        Ok(Some((header, cr + 2)))
    }
}

fn to_v6(ip: IpAddr) -> std::net::Ipv6Addr {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn err_packet_bytes_field_by_field() {
        let packet = ErrPacket::connection_failure("paxsql: no master: x").encode(0);
        let mut want = vec![
            29, 0, 0,    // payload length: 1 + 2 + 1 + 5 + 20
            0,    // sequence id: the first packet of the connection
            0xFF, // ERR
            0x1D, 0x04, // 1053 little-endian
            b'#',
        ];
        want.extend_from_slice(b"08S01");
        want.extend_from_slice(b"paxsql: no master: x");
        assert_eq!(packet, want);
    }

    #[test]
    fn err_packet_round_trip() {
        for (seq, p) in [
            (0, ErrPacket::connection_failure("paxsql: no master: election in progress")),
            (3, ErrPacket::too_many_connections()),
            (255, ErrPacket { code: 65534, sql_state: *b"HY000", message: String::new() }),
            (1, ErrPacket::connection_failure("é".repeat(300))),
        ] {
            let bytes = p.encode(seq);
            let (got_seq, got) = ErrPacket::decode(&bytes).unwrap().unwrap();
            assert_eq!(got_seq, seq);
            assert_eq!(got.code, p.code);
            assert_eq!(got.sql_state, p.sql_state);
            // Long messages are cut at a char boundary within 511 bytes, never mid-character.
            assert!(p.message.starts_with(&got.message));
            assert!(got.message.len() <= MESSAGE_BYTES_MAX);
            assert!(got.message.len() + 3 >= p.message.len().min(MESSAGE_BYTES_MAX));
            // Every strict prefix is incomplete, never an error or a panic.
            for cut in 0..bytes.len() {
                assert_eq!(ErrPacket::decode(&bytes[..cut]).unwrap(), None, "prefix of {cut} bytes");
            }
        }
    }

    #[test]
    fn err_packet_decode_rejects_garbage() {
        let mut ok = ErrPacket::too_many_connections().encode(0);
        ok[4] = 0x00; // an OK packet, not ERR
        assert!(matches!(ErrPacket::decode(&ok), Err(ProxyError::MalformedErrPacket { offset: 4, .. })));
        let mut extra = ErrPacket::too_many_connections().encode(0);
        extra.push(0);
        assert!(ErrPacket::decode(&extra).is_err());
        assert!(ErrPacket::decode(&[3, 0, 0, 0, 0xFF, 1, 2]).is_err());
    }

    #[test]
    fn proxy_v1_bytes() {
        let h =
            ProxyHeader { source: "127.0.0.2:40312".parse().unwrap(), destination: "127.0.0.1:3306".parse().unwrap() };
        assert_eq!(h.encode_v1(), b"PROXY TCP4 127.0.0.2 127.0.0.1 40312 3306\r\n");
        let mixed = ProxyHeader { source: "10.1.2.3:1".parse().unwrap(), destination: "[::1]:2".parse().unwrap() };
        assert_eq!(mixed.encode_v1(), b"PROXY TCP6 ::ffff:10.1.2.3 ::1 1 2\r\n");
    }

    #[test]
    fn proxy_v1_round_trip() {
        let cases = [
            ("127.0.0.2:40312", "127.0.0.1:3306"),
            ("[2001:db8::1]:65535", "[fe80::1]:1"),
            ("[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535", "[ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe]:65535"),
            ("0.0.0.0:0", "255.255.255.255:65535"),
        ];
        for (src, dst) in cases {
            let h = ProxyHeader { source: src.parse().unwrap(), destination: dst.parse().unwrap() };
            let mut bytes = h.encode_v1();
            assert!(bytes.len() <= PROXY_V1_LINE_MAX, "{} bytes", bytes.len());
            let len = bytes.len();
            for cut in 0..len {
                assert_eq!(ProxyHeader::decode_v1(&bytes[..cut]).unwrap(), None, "prefix of {cut} bytes");
            }
            // The client's first bytes follow the header on the same stream.
            bytes.extend_from_slice(b"\x20\x00\x00\x01");
            assert_eq!(ProxyHeader::decode_v1(&bytes).unwrap(), Some((h, len)));
        }
    }

    #[test]
    fn proxy_v1_decode_rejects_garbage() {
        for bad in [
            &b"PROXY UNKNOWN\r\n"[..],
            b"PROXY TCP4 ::1 127.0.0.1 1 2\r\n",
            b"PROXY TCP4 127.0.0.1 127.0.0.1 1 70000\r\n",
            b"HELLO TCP4 127.0.0.1 127.0.0.1 1 2\r\n",
            b"PROXY TCP4 127.0.0.1  127.0.0.1 1 2\r\n",
            &[b'P'; 200],
        ] {
            assert!(ProxyHeader::decode_v1(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
    }
}
