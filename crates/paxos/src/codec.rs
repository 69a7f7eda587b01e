//! Binary encoding of [`Value`] for storage and transport.
//!
//! Layout (all integers little-endian): one tag byte, then
//! - `0` Noop: nothing;
//! - `1` Batch: u32 count, then per command u32 length and the bytes;
//! - `2` Reconfigure: u32 count, then u64 per member.
//!
//! Decoding never panics: every length is checked against what is left before it is used. A decoded batch's
//! commands are slices of the buffer they came in (no copy): whoever keeps one keeps that buffer.

use bytes::Bytes;

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
        self.encode_into(&mut out);
        out
    }

    /// Appends the encoding to `out` (a record that starts with fields of its own needs no second copy).
    pub fn encode_into(&self, out: &mut Vec<u8>) {
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
    }

    pub fn decode(bytes: &Bytes) -> Result<Value, DecodeError> {
        let mut r = Reader { bytes, pos: 0 };
        let v = match r.take(1)?[0] {
            0 => Value::Noop,
            1 => {
                let n = r.u32()? as usize;
                // Each command needs at least its 4-byte length: bounds the allocation by the input size.
                let mut cmds = Vec::with_capacity(n.min(r.remaining() / 4));
                for _ in 0..n {
                    let len = r.u32()? as usize;
                    cmds.push(r.share(len)?);
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
    bytes: &'a Bytes,
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
    /// The next `n` bytes as a slice of the input sharing its buffer.
    fn share(&mut self, n: usize) -> Result<Bytes, DecodeError> {
        let start = self.pos;
        self.take(n)?;
        Ok(self.bytes.slice(start..start + n))
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
            Value::Batch(vec![Bytes::from_static(b"a"), Bytes::new(), vec![7; 300].into()]),
            Value::Reconfigure(Membership::new([1, 2, 3])),
        ] {
            assert_eq!(Value::decode(&v.encode().into()).unwrap(), v);
        }
    }

    #[test]
    fn decoded_commands_share_the_input_buffer() {
        let enc = Bytes::from(Value::Batch(vec![vec![5; 1000].into(), vec![6; 10].into()]).encode());
        let Value::Batch(cmds) = Value::decode(&enc).unwrap() else { panic!("a batch") };
        let range = enc.as_ptr_range();
        for c in &cmds {
            assert!(range.contains(&c.as_ptr()), "a command was copied out of its buffer");
        }
    }

    #[test]
    fn truncated_and_garbage_are_errors() {
        let enc = Bytes::from(Value::Batch(vec![Bytes::from_static(&[1, 2, 3])]).encode());
        for cut in 0..enc.len() {
            assert!(Value::decode(&enc.slice(..cut)).is_err(), "cut at {cut}");
        }
        assert_eq!(Value::decode(&Bytes::from_static(&[9])), Err(DecodeError::UnknownTag { tag: 9 }));
        assert_eq!(Value::decode(&Bytes::from_static(&[0, 0])), Err(DecodeError::TrailingBytes { extra: 1 }));
        // A huge declared count must not allocate or panic.
        assert!(Value::decode(&Bytes::from_static(&[1, 0xff, 0xff, 0xff, 0xff])).is_err());
    }
}
