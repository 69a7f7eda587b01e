//! Bounds-checked reading of a payload's fields, and the length-encoded writers.

use crate::error::WireError;
use crate::Result;

/// A reader over one payload. Every accessor names the field it reads, so an error says what was missing and
/// where; `during` names the packet (e.g. "login packet").
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    during: &'static str,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8], during: &'static str) -> Reader<'a> {
        Reader { buf, pos: 0, during }
    }

    /// The error for field `what` at the current offset.
    pub fn error(&self, what: &'static str) -> WireError {
        WireError::Malformed { during: self.during, what, offset: self.pos }
    }

    pub fn position(&self) -> usize {
        self.pos
    }

    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    pub fn is_empty(&self) -> bool {
        self.pos >= self.buf.len()
    }

    pub fn bytes(&mut self, n: usize, what: &'static str) -> Result<&'a [u8]> {
        let end = self.pos.checked_add(n).filter(|&end| end <= self.buf.len()).ok_or_else(|| self.error(what))?;
        let b = &self.buf[self.pos..end];
        self.pos = end;
        Ok(b)
    }

    pub fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N]> {
        let b = self.bytes(N, what)?;
        let mut out = [0u8; N];
        out.copy_from_slice(b);
        Ok(out)
    }

    pub fn u8(&mut self, what: &'static str) -> Result<u8> {
        Ok(self.array::<1>(what)?[0])
    }

    pub fn u16(&mut self, what: &'static str) -> Result<u16> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }

    pub fn u32(&mut self, what: &'static str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    pub fn u64(&mut self, what: &'static str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    /// Everything left.
    pub fn rest(&mut self) -> &'a [u8] {
        let b = &self.buf[self.pos..];
        self.pos = self.buf.len();
        b
    }

    /// A NUL-terminated string; `lenient` takes the end of the payload as the terminator too (clients and servers
    /// omit the NUL after a last field).
    pub fn nul_terminated(&mut self, what: &'static str, lenient: bool) -> Result<&'a [u8]> {
        let rest = &self.buf[self.pos..];
        match rest.iter().position(|&b| b == 0) {
            Some(n) => {
                self.pos += n + 1;
                Ok(&rest[..n])
            }
            None if lenient => Ok(self.rest()),
            None => Err(self.error(what)),
        }
    }

    /// A length-encoded integer; `None` for the NULL marker 0xFB. 0xFF is not a length.
    pub fn lenenc_int(&mut self, what: &'static str) -> Result<Option<u64>> {
        let first = self.u8(what)?;
        Ok(Some(match first {
            0xFB => return Ok(None),
            0xFC => u64::from(self.u16(what)?),
            0xFD => {
                let b = self.array::<3>(what)?;
                u64::from(u32::from_le_bytes([b[0], b[1], b[2], 0]))
            }
            0xFE => self.u64(what)?,
            0xFF => {
                self.pos -= 1;
                return Err(self.error(what));
            }
            n => u64::from(n),
        }))
    }

    /// A length-encoded integer where NULL is not allowed (lengths, counts).
    pub fn lenenc_len(&mut self, what: &'static str) -> Result<u64> {
        let at = self.pos;
        self.lenenc_int(what)?.ok_or(WireError::Malformed { during: self.during, what, offset: at })
    }

    /// A length-encoded string; `None` for NULL.
    pub fn lenenc_bytes(&mut self, what: &'static str) -> Result<Option<&'a [u8]>> {
        match self.lenenc_int(what)? {
            None => Ok(None),
            Some(n) => {
                let n = usize::try_from(n).map_err(|_| self.error(what))?;
                self.bytes(n, what).map(Some)
            }
        }
    }
}

/// Appends a length-encoded integer (protocol "int<lenenc>").
pub fn put_lenenc_int(out: &mut Vec<u8>, v: u64) {
    match v {
        0..=250 => out.push(v as u8),
        251..=0xFFFF => {
            out.push(0xFC);
            out.extend_from_slice(&(v as u16).to_le_bytes());
        }
        0x1_0000..=0xFF_FFFF => {
            out.push(0xFD);
            out.extend_from_slice(&(v as u32).to_le_bytes()[..3]);
        }
        _ => {
            out.push(0xFE);
            out.extend_from_slice(&v.to_le_bytes());
        }
    }
}

/// Appends a length-encoded string.
pub fn put_lenenc_str(out: &mut Vec<u8>, s: &[u8]) {
    put_lenenc_int(out, s.len() as u64);
    out.extend_from_slice(s);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lenenc_round_trip() {
        for v in [0, 1, 250, 251, 0xFFFF, 0x1_0000, 0xFF_FFFF, 0x100_0000, u64::MAX] {
            let mut out = Vec::new();
            put_lenenc_int(&mut out, v);
            let mut r = Reader::new(&out, "test");
            assert_eq!(r.lenenc_int("v").unwrap(), Some(v));
            assert!(r.is_empty());
        }
        let mut out = Vec::new();
        put_lenenc_str(&mut out, b"paxsql");
        assert_eq!(Reader::new(&out, "test").lenenc_bytes("s").unwrap(), Some(&b"paxsql"[..]));
        assert_eq!(Reader::new(&[0xFB], "test").lenenc_bytes("s").unwrap(), None);
        assert!(Reader::new(&[0xFB], "test").lenenc_len("n").is_err());
    }

    #[test]
    fn short_fields_name_themselves() {
        let mut r = Reader::new(&[1, 2, 3], "greeting");
        assert_eq!(r.u16("a").unwrap(), 0x0201);
        assert_eq!(
            r.u32("connection id"),
            Err(WireError::Malformed { during: "greeting", what: "connection id", offset: 2 })
        );
        assert!(Reader::new(&[0xFC, 1], "x").lenenc_int("n").is_err());
        assert!(Reader::new(&[0xFF], "x").lenenc_int("n").is_err());
        assert!(Reader::new(b"abc", "x").nul_terminated("s", false).is_err());
        assert_eq!(Reader::new(b"abc", "x").nul_terminated("s", true).unwrap(), b"abc");
        assert!(Reader::new(&[0xFE, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF], "x").lenenc_bytes("s").is_err());
    }
}
