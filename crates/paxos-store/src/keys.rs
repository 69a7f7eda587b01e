//! Keys and value encodings of the KV side of the store (everything but the chosen log).
//!
//! All integers little-endian, except the instance inside an accepted key, which is big-endian so that raft-engine's
//! byte-ordered key scan walks accepted instances in numeric order. Keys never start with `__`, which raft-engine
//! reserves for itself (`LogBatch::put` refuses such keys).
//!
//! - `format` → one byte, [`FORMAT_VERSION`];
//! - `promised` → ballot: u64 round, u64 node;
//! - `snapshot` → u64 last_included, u32 member count, u64 per member, u64 data length, data;
//! - `acc` + u64 BE instance → ballot (16 bytes), then `Value::encode()`.
//!
//! Decoding returns [`StorageError::Corrupt`] naming the key; it never panics on what it reads.

use paxsql_paxos::{Ballot, Instance, Membership, Snapshot, StorageError, Value};

/// Bumped when an incompatible change is made to any key or value layout.
pub(crate) const FORMAT_VERSION: u8 = 1;

pub(crate) const FORMAT: &[u8] = b"format";
pub(crate) const PROMISED: &[u8] = b"promised";
pub(crate) const SNAPSHOT: &[u8] = b"snapshot";
const ACCEPTED_PREFIX: &[u8] = b"acc";

pub(crate) fn accepted_key(instance: Instance) -> Vec<u8> {
    let mut k = ACCEPTED_PREFIX.to_vec();
    k.extend_from_slice(&instance.to_be_bytes());
    k
}

/// First key past every accepted key, the end of a scan over them.
pub(crate) fn accepted_key_end() -> Vec<u8> {
    let mut k = ACCEPTED_PREFIX.to_vec();
    // One byte longer than any `acc` + u64 key with all ones, so it sorts after all of them.
    k.extend_from_slice(&[0xff; 9]);
    k
}

pub(crate) fn decode_accepted_key(key: &[u8]) -> Result<Instance, StorageError> {
    let rest = key
        .strip_prefix(ACCEPTED_PREFIX)
        .ok_or_else(|| StorageError::Corrupt(format!("key {key:x?} is not an accepted key")))?;
    let bytes: [u8; 8] =
        rest.try_into().map_err(|_| StorageError::Corrupt(format!("accepted key {key:x?} has {} bytes", key.len())))?;
    Ok(Instance::from_be_bytes(bytes))
}

pub(crate) fn encode_ballot(out: &mut Vec<u8>, b: Ballot) {
    out.extend_from_slice(&b.round.to_le_bytes());
    out.extend_from_slice(&b.node.to_le_bytes());
}

pub(crate) fn decode_promised(bytes: &[u8]) -> Result<Ballot, StorageError> {
    let mut r = Reader::new(bytes, "promised");
    let b = r.ballot()?;
    r.finish()?;
    Ok(b)
}

pub(crate) fn encode_accepted(ballot: Ballot, value: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + value.size_bytes() + 8);
    encode_ballot(&mut out, ballot);
    value.encode_into(&mut out);
    out
}

pub(crate) fn decode_accepted(instance: Instance, bytes: &[u8]) -> Result<(Ballot, Value), StorageError> {
    let mut r = Reader::new(bytes, "accepted");
    let ballot = r.ballot()?;
    let value = Value::decode(&bytes::Bytes::copy_from_slice(r.rest()))
        .map_err(|e| StorageError::Corrupt(format!("accepted value of instance {instance}: {e}")))?;
    Ok((ballot, value))
}

pub(crate) fn encode_snapshot(s: &Snapshot) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + 4 + s.membership.members.len() * 8 + 8 + s.data.len());
    out.extend_from_slice(&s.last_included.to_le_bytes());
    out.extend_from_slice(&(s.membership.members.len() as u32).to_le_bytes());
    for m in &s.membership.members {
        out.extend_from_slice(&m.to_le_bytes());
    }
    out.extend_from_slice(&(s.data.len() as u64).to_le_bytes());
    out.extend_from_slice(&s.data);
    out
}

pub(crate) fn decode_snapshot(bytes: &[u8]) -> Result<Snapshot, StorageError> {
    let mut r = Reader::new(bytes, "snapshot");
    let last_included = r.u64()?;
    let count = r.u32()?;
    let mut membership = Membership::default();
    for _ in 0..count {
        membership.members.insert(r.u64()?);
    }
    let len = r.u64()?;
    let data = r.take(usize::try_from(len).unwrap_or(usize::MAX))?.to_vec();
    r.finish()?;
    Ok(Snapshot { last_included, membership, data })
}

/// Bounds-checked cursor; every failure names the key being decoded.
struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
    what: &'static str,
}

impl<'a> Reader<'a> {
    fn new(bytes: &'a [u8], what: &'static str) -> Self {
        Reader { bytes, pos: 0, what }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], StorageError> {
        let left = self.bytes.len() - self.pos;
        if left < n {
            return Err(StorageError::Corrupt(format!(
                "{} record truncated: needs {n} bytes at offset {}, {left} left",
                self.what, self.pos
            )));
        }
        let s = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn u64(&mut self) -> Result<u64, StorageError> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(a))
    }

    fn u32(&mut self) -> Result<u32, StorageError> {
        let mut a = [0u8; 4];
        a.copy_from_slice(self.take(4)?);
        Ok(u32::from_le_bytes(a))
    }

    fn ballot(&mut self) -> Result<Ballot, StorageError> {
        Ok(Ballot::new(self.u64()?, self.u64()?))
    }

    fn rest(&mut self) -> &'a [u8] {
        let s = &self.bytes[self.pos..];
        self.pos = self.bytes.len();
        s
    }

    fn finish(&self) -> Result<(), StorageError> {
        match self.bytes.len() - self.pos {
            0 => Ok(()),
            extra => Err(StorageError::Corrupt(format!("{} record has {extra} trailing bytes", self.what))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepted_keys_sort_by_instance() {
        let mut keys: Vec<_> = [300u64, 1, 256, u64::MAX, 0].iter().map(|i| accepted_key(*i)).collect();
        keys.sort();
        let back: Vec<_> = keys.iter().map(|k| decode_accepted_key(k).unwrap()).collect();
        assert_eq!(back, vec![0, 1, 256, 300, u64::MAX]);
        assert!(accepted_key(u64::MAX) < accepted_key_end());
        assert!(decode_accepted_key(b"acc\x01").is_err());
        assert!(decode_accepted_key(b"promised").is_err());
    }

    #[test]
    fn records_round_trip() {
        let s = Snapshot { last_included: 42, membership: Membership::new([1, 2, 3]), data: vec![9; 1000] };
        assert_eq!(decode_snapshot(&encode_snapshot(&s)).unwrap(), s);
        let v = Value::Batch(vec![vec![1, 2].into(), bytes::Bytes::new()]);
        let b = Ballot::new(7, 3);
        assert_eq!(decode_accepted(5, &encode_accepted(b, &v)).unwrap(), (b, v));
        let mut p = Vec::new();
        encode_ballot(&mut p, b);
        assert_eq!(decode_promised(&p).unwrap(), b);
    }

    #[test]
    fn truncated_or_padded_records_are_corrupt() {
        let s = Snapshot { last_included: 42, membership: Membership::new([1, 2, 3]), data: vec![9; 10] };
        let enc = encode_snapshot(&s);
        for cut in 0..enc.len() {
            assert!(matches!(decode_snapshot(&enc[..cut]), Err(StorageError::Corrupt(_))), "cut at {cut}");
        }
        let mut padded = enc.clone();
        padded.push(0);
        assert!(matches!(decode_snapshot(&padded), Err(StorageError::Corrupt(_))));
        assert!(matches!(decode_promised(&[0; 15]), Err(StorageError::Corrupt(_))));
        assert!(matches!(decode_accepted(1, &[0; 16]), Err(StorageError::Corrupt(_))), "empty value");
        // A huge declared data length must not allocate or panic.
        let mut huge = 1u64.to_le_bytes().to_vec();
        huge.extend_from_slice(&0u32.to_le_bytes());
        huge.extend_from_slice(&u64::MAX.to_le_bytes());
        assert!(matches!(decode_snapshot(&huge), Err(StorageError::Corrupt(_))));
    }
}
