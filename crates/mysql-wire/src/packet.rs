//! Packet framing: a 3-byte little-endian payload length, a 1-byte sequence id, the payload.
//!
//! A payload of 0xFFFFFF bytes or more travels as consecutive chunks of exactly 0xFFFFFF bytes, each with the
//! next sequence id, ended by a shorter chunk (possibly empty): binlog events larger than 16 MiB (one row with a
//! big BLOB) and big statements arrive this way (MariaDB `net_write_buff` / `my_net_read`). Reading never panics
//! on input: [`check`] says "need more" and bounds the reassembled size, so a hostile length cannot make a
//! reader buffer without end.

use bytes::{Bytes, BytesMut};

use crate::error::WireError;
use crate::Result;

/// Length of a chunk header.
pub const HEADER_LEN: usize = 4;
/// Largest chunk payload; a chunk of exactly this length means "more chunks follow".
pub const MAX_CHUNK: usize = 0xFF_FFFF;

/// Where a complete packet lies at the start of a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame {
    /// Sequence id of the first chunk.
    pub first_seq: u8,
    /// Sequence id of the last chunk (equal to `first_seq` for a single-chunk packet): the answer continues
    /// from the next one.
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
pub enum Check {
    /// The buffer holds a complete packet.
    Complete(Frame),
    /// At least `need` more bytes are required.
    Incomplete { need: usize },
}

/// The payload length a chunk header announces.
pub fn chunk_len(header: &[u8; HEADER_LEN]) -> usize {
    usize::from(header[0]) | usize::from(header[1]) << 8 | usize::from(header[2]) << 16
}

/// Looks for one complete (reassembled) packet at the start of `buf`, without copying. Chunks after the first
/// must carry consecutive sequence ids; a payload longer than `max_payload` is an error as soon as the chunk
/// headers show it.
pub fn check(buf: &[u8], max_payload: usize) -> Result<Check> {
    let mut offset = 0usize;
    let mut payload_len = 0usize;
    let mut chunks = 0usize;
    let mut first_seq = 0u8;
    loop {
        let Some(header) = buf.get(offset..offset + HEADER_LEN).and_then(|h| <&[u8; HEADER_LEN]>::try_from(h).ok())
        else {
            return Ok(Check::Incomplete { need: offset + HEADER_LEN - buf.len() });
        };
        let len = chunk_len(header);
        let seq = header[3];
        if chunks == 0 {
            first_seq = seq;
        } else {
            // Wraps like the sequence id itself: a packet of more than 255 chunks (4 GiB) goes round.
            let expected = first_seq.wrapping_add(chunks as u8);
            if seq != expected {
                return Err(WireError::PacketOutOfOrder {
                    during: "reassembling a multi-chunk packet",
                    expected,
                    got: seq,
                });
            }
        }
        payload_len = payload_len.saturating_add(len);
        if payload_len > max_payload {
            return Err(WireError::PacketTooLarge { len: payload_len, max: max_payload });
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
pub fn take(buf: &mut BytesMut, frame: &Frame) -> Bytes {
    let mut raw = buf.split_to(frame.consumed);
    if frame.chunks == 1 {
        let _ = raw.split_to(HEADER_LEN);
        return raw.freeze();
    }
    Bytes::from(join_chunks(&raw, frame.payload_len))
}

/// The payload of the whole packet `raw` (every chunk, headers included), its chunks joined.
fn join_chunks(raw: &[u8], payload_len: usize) -> Vec<u8> {
    let mut payload = Vec::with_capacity(payload_len);
    let mut rest = raw;
    while let Some((header, tail)) = rest.split_first_chunk::<HEADER_LEN>() {
        let n = chunk_len(header).min(tail.len());
        payload.extend_from_slice(&tail[..n]);
        rest = &tail[n..];
    }
    payload
}

/// Finds the first complete packet in `buf` and copies its payload out: the sequence id of its LAST chunk, the
/// payload, and how many bytes of `buf` it used; `Ok(None)` when `buf` does not hold the whole packet yet.
pub fn decode(buf: &[u8], max_payload: usize) -> Result<Option<(u8, Vec<u8>, usize)>> {
    let Check::Complete(frame) = check(buf, max_payload)? else { return Ok(None) };
    Ok(Some((frame.last_seq, join_chunks(&buf[..frame.consumed], frame.payload_len), frame.consumed)))
}

/// Appends `parts` (concatenated) as one packet, split at 0xFFFFFF bytes, and advances `seq` by one per chunk.
/// A payload whose length is a multiple of 0xFFFFFF (0 included) ends with the short (empty) chunk the protocol
/// requires.
pub fn write(out: &mut Vec<u8>, seq: &mut u8, parts: &[&[u8]]) {
    let total: usize = parts.iter().map(|p| p.len()).sum();
    out.reserve(total + HEADER_LEN * (total / MAX_CHUNK + 1));
    let mut remaining = total;
    let mut part_index = 0usize;
    let mut part_offset = 0usize;
    loop {
        let chunk = remaining.min(MAX_CHUNK);
        out.extend_from_slice(&(chunk as u32).to_le_bytes()[..3]);
        out.push(*seq);
        *seq = seq.wrapping_add(1);
        let mut need = chunk;
        while need > 0 {
            let Some(part) = parts.get(part_index) else { break };
            let take = (part.len() - part_offset).min(need);
            out.extend_from_slice(&part[part_offset..part_offset + take]);
            part_offset += take;
            need -= take;
            if part_offset == part.len() {
                part_index += 1;
                part_offset = 0;
            }
        }
        remaining -= chunk;
        if chunk < MAX_CHUNK {
            return;
        }
    }
}

/// Appends `payload` framed as a packet starting at sequence id `seq`; returns the id the exchange's next packet
/// uses.
pub fn encode(seq: u8, payload: &[u8], out: &mut Vec<u8>) -> u8 {
    let mut seq = seq;
    write(out, &mut seq, &[payload]);
    seq
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
        // The OK packet of the replication capture: len 7, seq 2, `00 00 00 02 00 00 00`.
        let bytes = framed(2, &[0, 0, 0, 2, 0, 0, 0]);
        assert_eq!(bytes[..4], [7, 0, 0, 2]);
        let Check::Complete(frame) = check(&bytes, 1 << 20).unwrap() else { panic!("incomplete") };
        assert_eq!((frame.first_seq, frame.last_seq, frame.chunks, frame.consumed), (2, 2, 1, 11));
        let mut buf = BytesMut::from(&bytes[..]);
        assert_eq!(&take(&mut buf, &frame)[..], &[0, 0, 0, 2, 0, 0, 0]);
        assert!(buf.is_empty());
        assert_eq!(decode(&bytes, 1 << 20).unwrap(), Some((2, vec![0, 0, 0, 2, 0, 0, 0], 11)));
        for cut in 0..bytes.len() {
            assert!(matches!(check(&bytes[..cut], 1 << 20).unwrap(), Check::Incomplete { .. }), "cut {cut}");
            assert_eq!(decode(&bytes[..cut], 1 << 20).unwrap(), None, "cut {cut}");
        }
    }

    #[test]
    fn large_payload_is_chunked_and_reassembled() {
        for len in [0, MAX_CHUNK - 1, MAX_CHUNK, MAX_CHUNK + 1, 2 * MAX_CHUNK, 2 * MAX_CHUNK + 5] {
            let payload: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
            let mut bytes = Vec::new();
            let next = encode(255, &payload, &mut bytes);
            let chunks = len / MAX_CHUNK + 1;
            assert_eq!(next, 255u8.wrapping_add(chunks as u8));
            assert_eq!(bytes.len(), len + 4 * chunks);
            bytes.extend_from_slice(&[1, 0, 0, 9, 0xAA]); // a following packet stays in the buffer
            let Check::Complete(frame) = check(&bytes, 1 << 30).unwrap() else { panic!("incomplete") };
            assert_eq!((frame.chunks, frame.payload_len, frame.last_seq), (chunks, len, next.wrapping_sub(1)));
            let copied = decode(&bytes, 1 << 30).unwrap().expect("complete");
            assert!(copied.1 == payload && copied.0 == next.wrapping_sub(1) && copied.2 == frame.consumed);
            let mut buf = BytesMut::from(&bytes[..]);
            assert!(take(&mut buf, &frame)[..] == payload[..]);
            assert_eq!(&buf[..], &[1, 0, 0, 9, 0xAA]);
            assert!(matches!(check(&bytes[..bytes.len() - 6], 1 << 30).unwrap(), Check::Incomplete { need: 1 }));
            if len > 0 {
                assert!(matches!(check(&bytes, len - 1), Err(WireError::PacketTooLarge { .. })));
            }
        }
    }

    #[test]
    fn parts_are_framed_as_one_payload() {
        let (a, b) = (vec![1u8; MAX_CHUNK - 3], vec![2u8; 10]);
        let mut out = Vec::new();
        let mut seq = 7;
        write(&mut out, &mut seq, &[&a, &b]);
        assert_eq!(seq, 9);
        let (last, payload, used) = decode(&out, usize::MAX).unwrap().expect("complete");
        assert_eq!((last, payload.len(), used), (8, MAX_CHUNK + 7, out.len()));
        assert!(payload[..a.len()] == a[..] && payload[a.len()..] == b[..]);
    }

    #[test]
    fn chunk_with_wrong_sequence_is_an_error() {
        let mut bytes = framed(3, &vec![7u8; MAX_CHUNK + 2]);
        bytes[4 + MAX_CHUNK + 3] = 9; // second chunk's seq should be 4
        assert!(matches!(check(&bytes, usize::MAX), Err(WireError::PacketOutOfOrder { expected: 4, got: 9, .. })));
        assert!(decode(&bytes, usize::MAX).is_err());
    }

    #[test]
    fn oversized_packets_are_refused_from_the_header() {
        let header = [0xFF, 0xFF, 0x7F, 0];
        assert!(matches!(check(&header, 1 << 20), Err(WireError::PacketTooLarge { .. })));
    }
}
