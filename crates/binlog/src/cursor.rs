//! Bounds-checked little-endian reader over an event body. Every read returns [`Error::Truncated`] instead of
//! panicking, with the offset counted from the start of the event so errors point at the byte in a hex dump.

use crate::error::{Error, Result};
use crate::header::EVENT_HEADER_LEN;

pub(crate) struct Cursor<'a> {
    body: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(body: &'a [u8]) -> Self {
        Cursor { body, pos: 0 }
    }

    /// Offset of the next unread byte, counted from the start of the event.
    pub(crate) fn offset(&self) -> usize {
        EVENT_HEADER_LEN + self.pos
    }

    pub(crate) fn remaining(&self) -> usize {
        self.body.len() - self.pos
    }

    pub(crate) fn bytes(&mut self, n: usize, what: &'static str) -> Result<&'a [u8]> {
        let end = self.pos.checked_add(n).filter(|&end| end <= self.body.len());
        let Some(end) = end else {
            return Err(Error::Truncated { what, offset: self.offset() });
        };
        let out = &self.body[self.pos..end];
        self.pos = end;
        Ok(out)
    }

    pub(crate) fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N]> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.bytes(N, what)?);
        Ok(out)
    }

    pub(crate) fn u8(&mut self, what: &'static str) -> Result<u8> {
        Ok(self.array::<1>(what)?[0])
    }

    pub(crate) fn u16(&mut self, what: &'static str) -> Result<u16> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }

    pub(crate) fn u32(&mut self, what: &'static str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    pub(crate) fn u64(&mut self, what: &'static str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    /// Everything not read yet.
    pub(crate) fn rest(&mut self) -> &'a [u8] {
        let out = &self.body[self.pos..];
        self.pos = self.body.len();
        out
    }

    /// Fails with [`Error::Malformed`] if bytes are left over; used by events whose body has an exact length, so
    /// that a decoded event always re-encodes to the same bytes.
    pub(crate) fn finish(&self, what: &'static str) -> Result<()> {
        if self.remaining() != 0 {
            return Err(Error::Malformed { what, offset: self.offset() });
        }
        Ok(())
    }
}
