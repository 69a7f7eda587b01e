//! The proxy's own answers — MySQL ERR packets (the shared wire crate's [`ErrPacket`]) sent instead of the
//! server's greeting — and the PROXY protocol v1 header sent to MariaDB before the client's bytes.

use std::net::{IpAddr, SocketAddr};

pub use paxsql_mysql_wire::ErrPacket;

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
/// PROXY v1: "the maximum line length is 107 bytes including the CRLF" (haproxy proxy-protocol.txt §2.1).
const PROXY_V1_LINE_MAX: usize = 107;

/// The answer for a client the proxy cannot serve now (no master, master unreachable).
pub fn connection_failure(message: impl Into<String>) -> ErrPacket {
    ErrPacket { code: ER_SERVER_SHUTDOWN, sql_state: Some(SQLSTATE_CONNECTION_FAILURE), message: message.into() }
}

/// The answer when `max_connections` is reached.
pub fn too_many_connections() -> ErrPacket {
    ErrPacket {
        code: ER_CON_COUNT_ERROR,
        sql_state: Some(SQLSTATE_CONNECTION_REJECTED),
        message: "paxsql: too many connections".into(),
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
        let packet = connection_failure("paxsql: no master: x").packet(0);
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
            (0, connection_failure("paxsql: no master: election in progress")),
            (3, too_many_connections()),
            (255, ErrPacket { code: 65534, sql_state: Some(*b"HY000"), message: String::new() }),
            (1, connection_failure("é".repeat(300))),
        ] {
            let bytes = p.packet(seq);
            let (got_seq, payload, used) = paxsql_mysql_wire::packet::decode(&bytes, 1 << 10).unwrap().unwrap();
            assert_eq!((got_seq, used), (seq, bytes.len()));
            let got = ErrPacket::decode(&payload).unwrap();
            assert_eq!(got.code, p.code);
            assert_eq!(got.sql_state, p.sql_state);
            // Long messages are cut at a char boundary within 511 bytes, never mid-character.
            assert!(p.message.starts_with(&got.message));
            assert!(got.message.len() <= 511);
            assert!(got.message.len() + 3 >= p.message.len().min(511));
            // Every strict prefix is incomplete, never an error or a panic.
            for cut in 0..bytes.len() {
                assert_eq!(paxsql_mysql_wire::packet::decode(&bytes[..cut], 1 << 10).unwrap(), None, "{cut} bytes");
            }
        }
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
