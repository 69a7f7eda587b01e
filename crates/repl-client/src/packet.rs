//! MySQL/MariaDB packet framing, sans IO.
//!
//! Every packet is `payload_len u24 LE | sequence_id u8 | payload`. A payload of 2^24-1 bytes or more is sent as
//! chunks of exactly 0xFFFFFF bytes followed by one shorter chunk (possibly empty), each chunk with the next
//! sequence id; the reader reassembles them. Binlog events larger than 16 MiB (a big row, a big DDL) arrive
//! this way (MariaDB `net_write_buff` / `my_net_read`).

use bytes::{Bytes, BytesMut};

use crate::error::{Error, Result};

/// Length of the packet header.
pub(crate) const HEADER_LEN: usize = 4;
/// Largest chunk; a chunk of this size means "more chunks follow".
pub(crate) const MAX_CHUNK: usize = 0xFF_FFFF;

/// Where a complete packet lies at the start of a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Frame {
    /// Sequence id of the first chunk.
    pub first_seq: u8,
    /// Sequence id of the last chunk (equal to `first_seq` for a single-chunk packet).
    pub last_seq: u8,
    /// Number of chunks.
    pub chunks: usize,
    /// Reassembled payload length.
    pub payload_len: usize,
    /// Bytes of the buffer the packet occupies, headers included.
    pub consumed: usize,
}

/// Result of looking for a packet at the start of a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Check {
    /// The buffer holds a complete packet.
    Complete(Frame),
    /// At least `need` more bytes are required.
    Incomplete { need: usize },
}

/// Looks for one complete (reassembled) packet at the start of `buf`, without copying. Chunks after the
/// first must carry consecutive sequence ids; `max_payload` bounds the reassembled size so a hostile length
/// cannot make the reader buffer without end.
pub(crate) fn check(buf: &[u8], max_payload: usize) -> Result<Check> {
    let mut offset = 0usize;
    let mut payload_len = 0usize;
    let mut chunks = 0usize;
    let mut first_seq = 0u8;
    loop {
        let Some(header) = buf.get(offset..offset + HEADER_LEN) else {
            return Ok(Check::Incomplete { need: offset + HEADER_LEN - buf.len() });
        };
        let len = usize::from(header[0]) | usize::from(header[1]) << 8 | usize::from(header[2]) << 16;
        let seq = header[3];
        if chunks == 0 {
            first_seq = seq;
        } else {
            // `chunks` < 2^24 here because every chunk but the last is 16 MiB and max_payload is a usize.
            let expected = first_seq.wrapping_add(chunks as u8);
            if seq != expected {
                return Err(Error::PacketOutOfOrder {
                    during: "reassembling a multi-chunk packet",
                    expected,
                    got: seq,
                });
            }
        }
        payload_len = payload_len.saturating_add(len);
        if payload_len > max_payload {
            return Err(Error::PacketTooLarge { len: payload_len, max: max_payload });
        }
        let end = offset + HEADER_LEN + len;
        if buf.len() < end {
            return Ok(Check::Incomplete { need: end - buf.len() });
        }
        chunks += 1;
        offset = end;
        if len < MAX_CHUNK {
            return Ok(Check::Complete(Frame { first_seq, last_seq: seq, chunks, payload_len, consumed: offset }));
        }
    }
}

/// Removes the packet described by `frame` (from [`check`] on the same buffer) and returns its payload.
/// Single-chunk packets (nearly all) are split off without copying.
pub(crate) fn take(buf: &mut BytesMut, frame: &Frame) -> Bytes {
    let mut raw = buf.split_to(frame.consumed);
    if frame.chunks == 1 {
        let _ = raw.split_to(HEADER_LEN);
        return raw.freeze();
    }
    let mut payload = Vec::with_capacity(frame.payload_len);
    let mut rest = &raw[..];
    while let Some((header, tail)) = rest.split_first_chunk::<HEADER_LEN>() {
        let len = usize::from(header[0]) | usize::from(header[1]) << 8 | usize::from(header[2]) << 16;
        let n = len.min(tail.len());
        payload.extend_from_slice(&tail[..n]);
        rest = &tail[n..];
    }
    Bytes::from(payload)
}

/// Appends `payload` framed as a packet (split into chunks if needed) starting at sequence id `seq`; returns
/// the sequence id the next packet of the exchange uses.
pub(crate) fn encode(seq: u8, payload: &[u8], out: &mut Vec<u8>) -> u8 {
    let mut seq = seq;
    let mut rest = payload;
    loop {
        let n = rest.len().min(MAX_CHUNK);
        out.extend_from_slice(&(n as u32).to_le_bytes()[..3]);
        out.push(seq);
        out.extend_from_slice(&rest[..n]);
        seq = seq.wrapping_add(1);
        rest = &rest[n..];
        if n < MAX_CHUNK {
            return seq;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn framed(seq: u8, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        encode(seq, payload, &mut out);
        out
    }

    #[test]
    fn small_packet_round_trip() {
        // The OK packet of the capture: len 7, seq 2, `00 00 00 02 00 00 00`.
        let bytes = framed(2, &[0, 0, 0, 2, 0, 0, 0]);
        assert_eq!(bytes[..4], [7, 0, 0, 2]);
        let Check::Complete(frame) = check(&bytes, 1 << 20).unwrap() else { panic!("incomplete") };
        assert_eq!((frame.first_seq, frame.last_seq, frame.chunks, frame.consumed), (2, 2, 1, 11));
        let mut buf = BytesMut::from(&bytes[..]);
        assert_eq!(&take(&mut buf, &frame)[..], &[0, 0, 0, 2, 0, 0, 0]);
        assert!(buf.is_empty());
        for cut in 0..bytes.len() {
            assert!(matches!(check(&bytes[..cut], 1 << 20).unwrap(), Check::Incomplete { .. }), "cut {cut}");
        }
    }

    #[test]
    fn large_payload_is_chunked_and_reassembled() {
        for len in [MAX_CHUNK - 1, MAX_CHUNK, MAX_CHUNK + 1, 2 * MAX_CHUNK, 2 * MAX_CHUNK + 5] {
            let payload: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
            let mut bytes = Vec::new();
            let next = encode(255, &payload, &mut bytes);
            let chunks = len / MAX_CHUNK + 1;
            assert_eq!(next, 255u8.wrapping_add(chunks as u8));
            assert_eq!(bytes.len(), len + 4 * chunks);
            bytes.extend_from_slice(&[1, 0, 0, 9, 0xAA]); // a following packet stays in the buffer
            let Check::Complete(frame) = check(&bytes, 1 << 30).unwrap() else { panic!("incomplete") };
            assert_eq!((frame.chunks, frame.payload_len, frame.last_seq), (chunks, len, next.wrapping_sub(1)));
            let mut buf = BytesMut::from(&bytes[..]);
            assert!(take(&mut buf, &frame)[..] == payload[..]);
            assert_eq!(&buf[..], &[1, 0, 0, 9, 0xAA]);
            assert!(matches!(check(&bytes[..bytes.len() - 6], 1 << 30).unwrap(), Check::Incomplete { need: 1 }));
            assert!(matches!(check(&bytes, len - 1), Err(Error::PacketTooLarge { .. })));
        }
    }

    #[test]
    fn chunk_with_wrong_sequence_is_an_error() {
        let mut bytes = framed(3, &vec![7u8; MAX_CHUNK + 2]);
        bytes[4 + MAX_CHUNK + 3] = 9; // second chunk's seq should be 4
        assert!(matches!(check(&bytes, usize::MAX), Err(Error::PacketOutOfOrder { expected: 4, got: 9, .. })));
    }
}
