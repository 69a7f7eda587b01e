//! No decoder panics on bytes from the network: the packet framer, greeting / login / OK / ERR / EOF / row
//! parsers, the semi-sync stream framing and the event decoding behind it, fed captured traffic with every
//! truncation and byte flip, and seeded random bytes. Also the transaction assembler on shuffled streams.

use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use paxsql_binlog::{Checksum, EventDecoder};
use paxsql_repl_client::fuzzing::server_bytes;
use paxsql_repl_client::{ReplicationEvent, TransactionAssembler};

/// SplitMix64: a seeded generator, so a failure reproduces.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// The captured dump events (shared with paxsql-binlog's fixtures, see its `testdata/extract_events.py`).
fn captured_events() -> Vec<Vec<u8>> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../binlog/testdata/captured/repl-handshake-and-stream.events.hex");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| (0..l.len() / 2).map(|i| u8::from_str_radix(&l[2 * i..2 * i + 2], 16).expect("hex")).collect())
        .collect()
}

fn frame(seq: u8, payload: &[u8], out: &mut Vec<u8>) {
    let mut rest = payload;
    let mut seq = seq;
    loop {
        let n = rest.len().min(0xFF_FFFF);
        out.extend_from_slice(&(n as u32).to_le_bytes()[..3]);
        out.push(seq);
        out.extend_from_slice(&rest[..n]);
        rest = &rest[n..];
        seq = seq.wrapping_add(1);
        if n < 0xFF_FFFF {
            return;
        }
    }
}

/// What a master sends a replica: greeting, OK, a one-row result set, ERR 1236, then semi-sync dump packets.
fn server_stream() -> Vec<u8> {
    let mut out = Vec::new();
    let mut greeting = vec![10];
    greeting.extend_from_slice(b"5.5.5-10.11.19-MariaDB-0+deb12u1-log\0");
    greeting.extend_from_slice(&[174, 0, 0, 0]);
    greeting.extend_from_slice(b"abcdefgh\0");
    greeting.extend_from_slice(&[0xfe, 0xf7, 45, 2, 0, 0xff, 0x81, 21, 0, 0, 0, 0, 0, 0, 0x1d, 0, 0, 0]);
    greeting.extend_from_slice(b"ijklmnopqrst\0mysql_native_password\0");
    frame(0, &greeting, &mut out);
    frame(2, &[0, 0, 0, 2, 0, 0, 0], &mut out);
    frame(1, &[1], &mut out);
    let mut coldef = b"\x03def\x00\x00\x00\x17@master_binlog_checksum\x00\x0c\x08\x00".to_vec();
    coldef.extend_from_slice(&[0xff, 0xff, 0xff, 0, 0xfb, 0, 0, 0x27, 0, 0]);
    frame(2, &coldef, &mut out);
    frame(3, &[0xfe, 0, 0, 2, 0], &mut out);
    frame(4, b"\x05CRC32", &mut out);
    frame(5, &[0xfe, 0, 0, 2, 0], &mut out);
    let mut err = vec![0xff, 0xd4, 0x04];
    err.extend_from_slice(b"#HY000Error: connecting slave requested to start from GTID 0-7-5");
    frame(1, &err, &mut out);
    for (i, event) in captured_events().iter().enumerate() {
        let mut p = vec![0, 0xEF, u8::from(i % 5 == 4)];
        p.extend_from_slice(event);
        frame(i as u8 + 1, &p, &mut out);
    }
    out
}

#[test]
fn truncations_and_byte_flips_of_captured_traffic() {
    let stream = server_stream();
    eprintln!("== every truncation and every byte flip of {} bytes of server traffic", stream.len());
    for cut in 0..=stream.len() {
        server_bytes(&stream[..cut]);
        server_bytes(&stream[cut..]);
    }
    let mut rng = Rng(0x5EED_0001);
    let mut mutated = stream.clone();
    for i in 0..stream.len() {
        for value in [stream[i] ^ 0xFF, stream[i] ^ 1, 0, 0xFF, 0xFB, 0xFE, rng.next() as u8] {
            mutated[i] = value;
            server_bytes(&mutated);
        }
        mutated[i] = stream[i];
    }
}

#[test]
fn seeded_random_inputs() {
    let stream = server_stream();
    let seed = 0x5EED_0002;
    eprintln!("== 50k random inputs, seed {seed:#x}");
    let mut rng = Rng(seed);
    for _ in 0..50_000 {
        let len = rng.below(300);
        let mut input: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        match rng.below(3) {
            // A plausible packet header in front of random payload bytes.
            0 if len > 4 => {
                let n = len as u32 - 4;
                input[..3].copy_from_slice(&n.to_le_bytes()[..3]);
                input[4] = [0x00, 0xFF, 0xFE, 0x0A, 0x01][rng.below(5)];
            }
            // Random splices of real traffic.
            1 => {
                let a = rng.below(stream.len());
                let b = (a + rng.below(400)).min(stream.len());
                input.extend_from_slice(&stream[a..b]);
            }
            _ => {}
        }
        server_bytes(&input);
    }
}

#[test]
fn multi_chunk_packet_survives_truncation() {
    eprintln!("== a 16 MiB + 1 byte event packet, reassembled and cut");
    let mut event = captured_events().into_iter().nth(1).expect("FORMAT_DESCRIPTION");
    event.resize(0xFF_FFFF - 2, 0xAB);
    let mut bytes = Vec::new();
    let mut payload = vec![0, 0xEF, 1];
    payload.extend_from_slice(&event);
    payload.push(7);
    frame(1, &payload, &mut bytes);
    server_bytes(&bytes);
    for cut in [1, 4, 5, 0xFF_FFFF, 0xFF_FFFF + 4, 0xFF_FFFF + 5, bytes.len() - 1] {
        server_bytes(&bytes[..cut]);
    }
}

#[test]
fn assembler_never_panics_on_shuffled_streams() {
    eprintln!("== the transaction assembler on 2k shuffled captured streams");
    let mut decoder = EventDecoder::new(Checksum::Crc32);
    let events: Vec<ReplicationEvent> = captured_events()
        .into_iter()
        .map(|raw| {
            let e = decoder.decode(&raw).expect("captured events decode");
            ReplicationEvent {
                header: e.header,
                data: Some(e.data),
                end_pos: u64::from(e.header.log_pos),
                raw: Bytes::from(raw),
                file: Arc::from("n1-bin.000001"),
                ack_requested: false,
            }
        })
        .collect();
    let mut rng = Rng(0x5EED_0003);
    let mut completed = 0;
    for _ in 0..2_000 {
        let mut a = TransactionAssembler::new();
        for _ in 0..events.len() {
            let mut e = events[rng.below(events.len())].clone();
            if rng.below(4) == 0 {
                e.data = None; // as for row events, which the client leaves undecoded
            }
            if let Ok(Some(_)) = a.push(&e) {
                completed += 1;
            }
        }
    }
    assert!(completed > 0, "shuffles should complete some groups");
}
