//! Who is at the other end of a TLS connection.
//!
//! The cluster secret proves that a caller belongs to the cluster, not *which* member it is: the `from` of a Paxos
//! message is whatever the sender wrote. With TLS on, every member's certificate names it — a DNS subject
//! alternative name [`member_name`]`(id)` — and both ends check that name: a client dials node 2 expecting
//! `node-2.paxsql` in the server's certificate, and a server accepts messages only with the `from` its client's
//! certificate names. A holder of one member's key can therefore speak only as that member. Certificates for
//! operators' tools ([`OPERATOR_NAME`]) may call the admin service but send no Paxos message at all.
//!
//! The names sit under `.paxsql`, a label no public CA issues for; the cluster CA is what scopes them to one
//! cluster.

use paxsql_paxos::NodeId;

/// DNS suffix of every identity a cluster certificate carries.
const SUFFIX: &str = ".paxsql";

/// Subject alternative name of an operator tool's certificate (`paxsql cluster status`, the naming watcher).
pub const OPERATOR_NAME: &str = "operator.paxsql";

/// The DNS name member `id`'s certificate carries, and that its peers verify when they dial it.
pub fn member_name(id: NodeId) -> String {
    format!("node-{id}{SUFFIX}")
}

/// The member id a DNS name denotes, if it is a member name in canonical form (no sign, no leading zero).
pub fn parse_member_name(name: &str) -> Option<NodeId> {
    let digits = name.strip_prefix("node-")?.strip_suffix(SUFFIX)?;
    if digits.is_empty() || digits.starts_with('0') || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// What a client certificate says its holder is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeerIdentity {
    /// A member; may send Paxos messages `from` this id only.
    Member(NodeId),
    /// Signed by the cluster CA but naming no single member (an operator tool, or an ambiguous certificate naming
    /// several members): admin calls only.
    Other,
}

/// Reads the member names of a DER certificate's subject alternative names. A certificate that does not parse, or
/// names no member or more than one, is [`PeerIdentity::Other`]: never a member.
pub fn identify(cert_der: &[u8]) -> PeerIdentity {
    use x509_parser::extensions::GeneralName;
    let Ok((_, cert)) = x509_parser::parse_x509_certificate(cert_der) else { return PeerIdentity::Other };
    let Ok(Some(san)) = cert.subject_alternative_name() else { return PeerIdentity::Other };
    let mut members = san.value.general_names.iter().filter_map(|name| match name {
        GeneralName::DNSName(dns) => parse_member_name(dns),
        _ => None,
    });
    match (members.next(), members.next()) {
        (Some(id), None) => PeerIdentity::Member(id),
        _ => PeerIdentity::Other,
    }
}

/// What the client certificate of a call names; `None` on a connection without TLS.
pub fn caller<T>(req: &tonic::Request<T>) -> Option<PeerIdentity> {
    let certs = req.peer_certs()?;
    Some(certs.first().map_or(PeerIdentity::Other, |c| identify(c)))
}

/// [`identify`] for the first certificate of a PEM file (a node's own chain: the leaf comes first).
pub fn identify_pem(pem: &[u8]) -> PeerIdentity {
    match x509_parser::pem::parse_x509_pem(pem) {
        Ok((_, block)) => identify(&block.contents),
        Err(_) => PeerIdentity::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_names_round_trip_and_only_canonical_ones_parse() {
        for id in [1, 2, 9, 10, 4_000_000_000] {
            assert_eq!(parse_member_name(&member_name(id)), Some(id));
        }
        for bad in [
            "node-0.paxsql",
            "node-01.paxsql",
            "node-.paxsql",
            "node-1.paxsql.evil",
            "node-+1.paxsql",
            "node-1",
            "1.paxsql",
            OPERATOR_NAME,
            "node-99999999999999999999.paxsql",
        ] {
            assert_eq!(parse_member_name(bad), None, "{bad}");
        }
    }

    fn cert(names: &[&str]) -> Vec<u8> {
        let key = rcgen::KeyPair::generate().unwrap();
        let params = rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).unwrap();
        params.self_signed(&key).unwrap().der().to_vec()
    }

    #[test]
    fn a_certificate_is_a_member_only_if_it_names_exactly_one() {
        assert_eq!(identify(&cert(&["node-3.paxsql", "127.0.0.1", "localhost"])), PeerIdentity::Member(3));
        assert_eq!(identify(&cert(&[OPERATOR_NAME])), PeerIdentity::Other);
        assert_eq!(identify(&cert(&["node-1.paxsql", "node-2.paxsql"])), PeerIdentity::Other);
        assert_eq!(identify(&cert(&["localhost"])), PeerIdentity::Other);
        assert_eq!(identify(b"not a certificate"), PeerIdentity::Other);
        assert_eq!(identify(&[]), PeerIdentity::Other);
    }

    #[test]
    fn a_pem_file_is_identified_by_its_first_certificate() {
        let key = rcgen::KeyPair::generate().unwrap();
        let pem =
            rcgen::CertificateParams::new(vec!["node-7.paxsql".to_string()]).unwrap().self_signed(&key).unwrap().pem();
        assert_eq!(identify_pem(pem.as_bytes()), PeerIdentity::Member(7));
        assert_eq!(
            identify_pem(b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"),
            PeerIdentity::Other
        );
        assert_eq!(identify_pem(b""), PeerIdentity::Other);
    }
}
