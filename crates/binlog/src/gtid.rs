//! MariaDB global transaction ids and GTID positions.
//!
//! A MariaDB GTID is `domain_id-server_id-seq_no` (MariaDB KB "Global Transaction ID"; `struct rpl_gtid` in
//! `sql/rpl_gtid.h`). Within one replication domain `seq_no` only grows, so "has this position reached that
//! GTID?" is a per-domain comparison of `seq_no`; the server_id only tells who wrote it. A GTID *position*
//! (`@@gtid_binlog_pos`, `@@gtid_slave_pos`, `@slave_connect_state`) holds at most one GTID per domain: the last
//! one applied in that domain.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use crate::error::{Error, Result};

/// One MariaDB GTID, printed and parsed as `domain_id-server_id-seq_no` (e.g. `0-1-42`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Gtid {
    pub domain_id: u32,
    pub server_id: u32,
    pub seq_no: u64,
}

impl Gtid {
    pub fn new(domain_id: u32, server_id: u32, seq_no: u64) -> Gtid {
        Gtid { domain_id, server_id, seq_no }
    }
}

impl fmt::Display for Gtid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}-{}", self.domain_id, self.server_id, self.seq_no)
    }
}

fn invalid(text: &str, what: &'static str) -> Error {
    Error::InvalidGtid { text: text.to_owned(), what }
}

/// Parses one decimal component: ASCII digits only (no sign, no spaces inside), must fit the target type.
fn component<T: FromStr>(text: &str, part: &str, name: &'static str, overflow: &'static str) -> Result<T> {
    if part.is_empty() {
        return Err(invalid(text, name));
    }
    if !part.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid(text, "components must be decimal digits"));
    }
    part.parse().map_err(|_| invalid(text, overflow))
}

impl FromStr for Gtid {
    type Err = Error;

    /// Parses `domain-server-seq`; surrounding ASCII whitespace is ignored, as MariaDB does for the elements
    /// of a GTID list.
    fn from_str(s: &str) -> Result<Gtid> {
        let text = s.trim_ascii();
        let mut parts = text.split('-');
        let (Some(d), Some(sv), Some(q), None) = (parts.next(), parts.next(), parts.next(), parts.next()) else {
            return Err(invalid(s, "expected domain_id-server_id-seq_no"));
        };
        Ok(Gtid {
            domain_id: component(s, d, "missing domain_id", "domain_id does not fit in 32 bits")?,
            server_id: component(s, sv, "missing server_id", "server_id does not fit in 32 bits")?,
            seq_no: component(s, q, "missing seq_no", "seq_no does not fit in 64 bits")?,
        })
    }
}

/// A MariaDB GTID position: at most one GTID per replication domain, like `@@gtid_binlog_pos` or the
/// `@slave_connect_state` a replica sends. Printed as a comma-separated list ordered by domain
/// (`0-1-42,1-2-7`); the empty position prints and parses as the empty string.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct GtidSet {
    by_domain: BTreeMap<u32, Gtid>,
}

impl GtidSet {
    /// The empty position (a replica that has applied nothing: `@slave_connect_state=''`).
    pub fn new() -> GtidSet {
        GtidSet::default()
    }

    /// Builds a position from GTIDs with distinct domains; [`Error::DuplicateDomain`] otherwise.
    pub fn from_gtids(gtids: impl IntoIterator<Item = Gtid>) -> Result<GtidSet> {
        let mut set = GtidSet::new();
        for gtid in gtids {
            if set.by_domain.insert(gtid.domain_id, gtid).is_some() {
                return Err(Error::DuplicateDomain { domain_id: gtid.domain_id });
            }
        }
        Ok(set)
    }

    /// The position reached after all of `gtids`: per domain, the GTID with the highest `seq_no`. Use it on a
    /// GTID_LIST event, which lists the binlog *state* (one entry per domain and server_id) rather than a
    /// position.
    pub fn from_state(gtids: impl IntoIterator<Item = Gtid>) -> GtidSet {
        let mut set = GtidSet::new();
        for gtid in gtids {
            set.advance(gtid);
        }
        set
    }

    pub fn is_empty(&self) -> bool {
        self.by_domain.is_empty()
    }

    /// Number of domains.
    pub fn len(&self) -> usize {
        self.by_domain.len()
    }

    /// The GTID recorded for `domain_id`.
    pub fn get(&self, domain_id: u32) -> Option<&Gtid> {
        self.by_domain.get(&domain_id)
    }

    /// GTIDs in domain order.
    pub fn iter(&self) -> impl Iterator<Item = &Gtid> + '_ {
        self.by_domain.values()
    }

    /// Records `gtid` as its domain's position unconditionally (what applying it does); returns the GTID it
    /// replaced.
    pub fn set(&mut self, gtid: Gtid) -> Option<Gtid> {
        self.by_domain.insert(gtid.domain_id, gtid)
    }

    /// Records `gtid` only if it is ahead of its domain's current position (higher `seq_no`, or a new
    /// domain). Returns whether the position moved.
    pub fn advance(&mut self, gtid: Gtid) -> bool {
        match self.by_domain.get(&gtid.domain_id) {
            Some(have) if have.seq_no >= gtid.seq_no => false,
            _ => {
                self.by_domain.insert(gtid.domain_id, gtid);
                true
            }
        }
    }

    /// Forgets a domain; returns its GTID.
    pub fn remove(&mut self, domain_id: u32) -> Option<Gtid> {
        self.by_domain.remove(&domain_id)
    }

    /// How this position's entry for `gtid`'s domain compares with `gtid` by `seq_no`: `None` if the domain is
    /// absent, `Less` if the position is behind `gtid`, `Equal` if it is exactly there, `Greater` if past it.
    pub fn compare(&self, gtid: &Gtid) -> Option<Ordering> {
        self.get(gtid.domain_id).map(|have| have.seq_no.cmp(&gtid.seq_no))
    }

    /// Whether this position has reached `gtid` (its domain's `seq_no` is at least `gtid.seq_no`). Ignores
    /// server_id: in a domain, seq_no order is commit order (gtid_strict_mode), whoever wrote it.
    pub fn contains(&self, gtid: &Gtid) -> bool {
        matches!(self.compare(gtid), Some(Ordering::Equal | Ordering::Greater))
    }

    /// Whether this position has reached every domain of `other`.
    pub fn includes(&self, other: &GtidSet) -> bool {
        other.iter().all(|gtid| self.contains(gtid))
    }
}

impl fmt::Display for GtidSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, gtid) in self.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{gtid}")?;
        }
        Ok(())
    }
}

impl FromStr for GtidSet {
    type Err = Error;

    /// Parses `gtid[,gtid...]`; an empty or all-whitespace string is the empty position. Two GTIDs in one
    /// domain are rejected, as MariaDB rejects them in `@slave_connect_state` (error 1947).
    fn from_str(s: &str) -> Result<GtidSet> {
        if s.trim_ascii().is_empty() {
            return Ok(GtidSet::new());
        }
        let gtids = s.split(',').map(|part| {
            part.parse::<Gtid>().map_err(|e| match e {
                // Report the whole input, not just the element, so the caller sees what it passed.
                Error::InvalidGtid { what, .. } => invalid(s, what),
                other => other,
            })
        });
        GtidSet::from_gtids(gtids.collect::<Result<Vec<_>>>()?)
    }
}

impl<'a> IntoIterator for &'a GtidSet {
    type Item = &'a Gtid;
    type IntoIter = std::collections::btree_map::Values<'a, u32, Gtid>;

    fn into_iter(self) -> Self::IntoIter {
        self.by_domain.values()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gtid_parses_and_prints() {
        let g: Gtid = "0-1-42".parse().unwrap();
        assert_eq!(g, Gtid::new(0, 1, 42));
        assert_eq!(g.to_string(), "0-1-42");
        assert_eq!(" 4294967295-4294967295-18446744073709551615 ".parse::<Gtid>().unwrap().seq_no, u64::MAX);
    }

    #[test]
    fn gtid_rejects_garbage_with_a_reason() {
        let what = |s: &str| match s.parse::<Gtid>() {
            Err(Error::InvalidGtid { what, .. }) => what,
            other => panic!("{s:?} parsed as {other:?}"),
        };
        assert_eq!(what("0-1"), "expected domain_id-server_id-seq_no");
        assert_eq!(what("0-1-2-3"), "expected domain_id-server_id-seq_no");
        assert_eq!(what("-1-2"), "missing domain_id");
        assert_eq!(what("0--2"), "missing server_id");
        assert_eq!(what("0-1-"), "missing seq_no");
        assert_eq!(what("0-+1-2"), "components must be decimal digits");
        assert_eq!(what("0-1-2x"), "components must be decimal digits");
        assert_eq!(what("4294967296-1-2"), "domain_id does not fit in 32 bits");
        assert_eq!(what("0-1-18446744073709551616"), "seq_no does not fit in 64 bits");
        assert_eq!(what(""), "expected domain_id-server_id-seq_no");
    }

    #[test]
    fn position_parses_prints_in_domain_order() {
        let p: GtidSet = "1-2-7, 0-1-42".parse().unwrap();
        assert_eq!(p.to_string(), "0-1-42,1-2-7");
        assert_eq!(p.len(), 2);
        assert_eq!("".parse::<GtidSet>().unwrap(), GtidSet::new());
        assert_eq!(GtidSet::new().to_string(), "");
        assert_eq!("0-1-1,0-2-2".parse::<GtidSet>(), Err(Error::DuplicateDomain { domain_id: 0 }));
        assert!(matches!("0-1-1,".parse::<GtidSet>(), Err(Error::InvalidGtid { .. })));
        assert!(matches!("0-1-1,,1-1-1".parse::<GtidSet>(), Err(Error::InvalidGtid { .. })));
    }

    #[test]
    fn containment_is_per_domain_by_seq_no() {
        let p: GtidSet = "0-1-42,1-2-7".parse().unwrap();
        assert!(p.contains(&Gtid::new(0, 1, 42)));
        assert!(p.contains(&Gtid::new(0, 9, 41)), "server_id does not matter");
        assert!(!p.contains(&Gtid::new(0, 1, 43)));
        assert!(!p.contains(&Gtid::new(2, 1, 1)), "unknown domain");
        assert_eq!(p.compare(&Gtid::new(1, 2, 8)), Some(Ordering::Less));
        assert_eq!(p.compare(&Gtid::new(1, 2, 7)), Some(Ordering::Equal));
        assert_eq!(p.compare(&Gtid::new(3, 2, 7)), None);
        assert!(p.includes(&"0-1-40".parse().unwrap()));
        assert!(p.includes(&GtidSet::new()));
        assert!(!p.includes(&"0-1-40,5-1-1".parse().unwrap()));
    }

    #[test]
    fn advance_only_moves_forward() {
        let mut p = GtidSet::new();
        assert!(p.advance(Gtid::new(0, 1, 5)));
        assert!(!p.advance(Gtid::new(0, 2, 5)));
        assert!(!p.advance(Gtid::new(0, 2, 4)));
        assert!(p.advance(Gtid::new(0, 2, 6)));
        assert_eq!(p.get(0), Some(&Gtid::new(0, 2, 6)));
        assert_eq!(p.set(Gtid::new(0, 1, 1)), Some(Gtid::new(0, 2, 6)));
        let state = GtidSet::from_state([Gtid::new(0, 1, 9), Gtid::new(0, 2, 3), Gtid::new(1, 1, 1)]);
        assert_eq!(state.to_string(), "0-1-9,1-1-1");
    }
}
