//! Binary encoding of [`Value`] for storage and transport.
//!
//! Layout (all integers little-endian): one tag byte, then
//! - `0` Noop: nothing;
//! - `1` Batch: u32 count, then per command u32 length and the bytes;
//! - `2` Reconfigure: u32 count, then u64 per member.
//!
//! Decoding never panics: every length is checked against what is left before it is used.

use crate::types::{Membership, Value};

/// Why bytes could not be decoded as a [`Value`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("value truncated: needed {needed} more bytes at offset {offset}")]
    Truncated { offset: usize, needed: usize },
    #[error("unknown value tag {tag}")]
    UnknownTag { tag: u8 },
    #[error("{extra} trailing bytes after value")]
    TrailingBytes { extra: usize },
}

impl Value {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.size_bytes() + 8);
        match self {
            Value::Noop => out.push(0),
            Value::Batch(cmds) => {
                out.push(1);
                out.extend_from_slice(&(cmds.len() as u32).to_le_bytes());
                for c in cmds {
                    out.extend_from_slice(&(c.len() as u32).to_le_bytes());
                    out.extend_from_slice(c);
                }
            }
            Value::Reconfigure(m) => {
                out.push(2);
                out.extend_from_slice(&(m.members.len() as u32).to_le_bytes());
                for n in &m.members {
                    out.extend_from_slice(&n.to_le_bytes());
                }
            }
        }
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<Value, DecodeError> {
        let mut r = Reader { bytes, pos: 0 };
        let v = match r.take(1)?[0] {
            0 => Value::Noop,
            1 => {
                let n = r.u32()? as usize;
                // Each command needs at least its 4-byte length: bounds the allocation by the input size.
                let mut cmds = Vec::with_capacity(n.min(r.remaining() / 4));
                for _ in 0..n {
                    let len = r.u32()? as usize;
                    cmds.push(r.take(len)?.to_vec());
                }
                Value::Batch(cmds)
            }
            2 => {
                let n = r.u32()? as usize;
                let mut m = Membership::default();
                for _ in 0..n {
                    let id = u64::from_le_bytes(r.array()?);
                    m.members.insert(id);
                }
                Value::Reconfigure(m)
            }
            tag => return Err(DecodeError::UnknownTag { tag }),
        };
        if r.remaining() > 0 {
            return Err(DecodeError::TrailingBytes { extra: r.remaining() });
        }
        Ok(v)
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.remaining() < n {
            return Err(DecodeError::Truncated { offset: self.pos, needed: n - self.remaining() });
        }
        let s = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
    fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }
    fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.array()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        for v in [
            Value::Noop,
            Value::Batch(vec![]),
            Value::Batch(vec![b"a".to_vec(), vec![], vec![7; 300]]),
            Value::Reconfigure(Membership::new([1, 2, 3])),
        ] {
            assert_eq!(Value::decode(&v.encode()).unwrap(), v);
        }
    }

    #[test]
    fn truncated_and_garbage_are_errors() {
        let enc = Value::Batch(vec![vec![1, 2, 3]]).encode();
        for cut in 0..enc.len() {
            assert!(Value::decode(&enc[..cut]).is_err(), "cut at {cut}");
        }
        assert_eq!(Value::decode(&[9]), Err(DecodeError::UnknownTag { tag: 9 }));
        assert_eq!(Value::decode(&[0, 0]), Err(DecodeError::TrailingBytes { extra: 1 }));
        // A huge declared count must not allocate or panic.
        assert!(Value::decode(&[1, 0xff, 0xff, 0xff, 0xff]).is_err());
    }
}
