//! Property tests with a hand-rolled, seeded generator (SplitMix64). Why not proptest: these properties need
//! no shrinking to be readable (failures print the seed and the event), the crate keeps zero dev-dependencies,
//! and a fixed seed makes every run identical, like the simulator's (docs/ARCHITECTURE.md §13). Set PAXSQL_BINLOG_SEED to try
//! another seed; the cargo-fuzz targets in fuzz/ cover the open-ended search.
//!
//! Properties:
//! 1. decode(encode(e)) == e and encode(decode(b)) == b for generated events of every type, both checksum modes.
//! 2. decoding random bytes, and captured events with any single bit flipped, never panics; whatever decodes
//!    re-encodes to the same bytes; with CRC32 on, every single-bit flip of a captured event is rejected.
//! 3. GTID positions print and parse back to themselves.

mod common;

use common::{captured, CAPTURES};
use paxsql_binlog::{
    crc32, gtid_flags, split_event, BinlogEvent, Checksum, Error, EventData, EventDecoder, FormatDescription, Gtid,
    GtidEvent, GtidList, GtidSet, OpaqueBody, Query, RowsKind, CHECKSUM_LEN, EVENT_HEADER_LEN, SERVER_VERSION_LEN,
};

struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn len(&mut self, max: usize) -> usize {
        // Mostly short, sometimes long: boundaries live near 0.
        if self.below(4) == 0 {
            self.below(max as u64 + 1) as usize
        } else {
            self.below(8) as usize
        }
    }
    fn bytes(&mut self, max: usize) -> Vec<u8> {
        let n = self.len(max);
        (0..n).map(|_| self.next() as u8).collect()
    }
    fn u32(&mut self) -> u32 {
        // Favour edge values.
        match self.below(4) {
            0 => 0,
            1 => u32::MAX,
            _ => self.next() as u32,
        }
    }
    fn u64(&mut self) -> u64 {
        match self.below(4) {
            0 => 0,
            1 => u64::MAX,
            _ => self.next(),
        }
    }
}

fn seed() -> u64 {
    std::env::var("PAXSQL_BINLOG_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x5eed_b10c)
}

fn gen_gtid(rng: &mut SplitMix64) -> Gtid {
    Gtid::new(rng.below(4) as u32, rng.u32(), rng.u64())
}

fn gen_data(rng: &mut SplitMix64) -> EventData {
    match rng.below(14) {
        0 => {
            let mut server_version_raw = [0u8; SERVER_VERSION_LEN];
            server_version_raw.iter_mut().for_each(|b| *b = rng.next() as u8);
            EventData::FormatDescription(FormatDescription {
                binlog_version: rng.next() as u16,
                server_version_raw,
                create_timestamp: rng.u32(),
                header_len: rng.next() as u8,
                post_header_lens: rng.bytes(200),
                checksum_alg: rng.next() as u8,
            })
        }
        1 => EventData::Rotate { position: rng.u64(), file_name: rng.bytes(64) },
        2 => {
            let commit_id = if rng.below(2) == 0 { Some(rng.u64()) } else { None };
            let mut g = GtidEvent::new(rng.u32(), rng.u64(), rng.next() as u8, commit_id);
            if rng.below(3) == 0 {
                g.rest = rng.bytes(40);
            }
            EventData::Gtid(g)
        }
        3 => {
            let n = rng.len(20);
            let mut list = GtidList::new((0..n).map(|_| gen_gtid(rng)).collect());
            list.flags = rng.below(16) as u8;
            if rng.below(3) == 0 {
                list.padding = rng.bytes(15);
            }
            EventData::GtidList(list)
        }
        4 => EventData::BinlogCheckpoint { file_name: rng.bytes(64) },
        5 => EventData::Query(Query {
            thread_id: rng.u32(),
            exec_time: rng.u32(),
            error_code: rng.next() as u16,
            status_vars: rng.bytes(300),
            db: rng.bytes(255),
            query: rng.bytes(500),
        }),
        6 => EventData::Xid { xid: rng.u64() },
        7 => EventData::AnnotateRows { sql: rng.bytes(300) },
        8 => EventData::TableMap(OpaqueBody(rng.bytes(100))),
        9 => {
            let kind = [RowsKind::Write, RowsKind::Update, RowsKind::Delete][rng.below(3) as usize];
            EventData::Rows { kind, body: OpaqueBody(rng.bytes(300)) }
        }
        10 => EventData::Heartbeat { file_name: rng.bytes(64) },
        11 => EventData::Stop,
        _ => {
            // Any type code the codec does not interpret.
            let known = [2, 3, 4, 15, 16, 19, 23, 24, 25, 27, 160, 161, 162, 163];
            let mut type_code = rng.next() as u8;
            while known.contains(&type_code) {
                type_code = type_code.wrapping_add(1);
            }
            EventData::Unknown { type_code, body: rng.bytes(300) }
        }
    }
}

#[test]
fn generated_events_round_trip() {
    let seed = seed();
    let mut rng = SplitMix64(seed);
    let mut kinds = std::collections::BTreeSet::new();
    for i in 0..20_000 {
        let checksum = if rng.below(2) == 0 { Checksum::Off } else { Checksum::Crc32 };
        let data = gen_data(&mut rng);
        kinds.insert(data.type_code());
        let event = BinlogEvent::new(rng.u32(), rng.u32(), rng.u32(), rng.next() as u16, data, checksum);
        let bytes = event.encode(checksum);
        let decoded = BinlogEvent::decode(&bytes, checksum)
            .unwrap_or_else(|e| panic!("seed {seed} case {i}: {event:?} does not decode: {e}"));
        assert_eq!(decoded, event, "seed {seed} case {i}");
        assert_eq!(decoded.encode(checksum), bytes, "seed {seed} case {i}");
    }
    assert!(kinds.len() > 20, "generator covers every typed event and some unknown ones: {kinds:?}");
}

/// Decodes in both modes and with the footer repaired; checks the round-trip property whenever decoding succeeds.
fn decode_never_panics(bytes: &[u8], context: &dyn Fn() -> String) {
    for checksum in [Checksum::Off, Checksum::Crc32] {
        if let Ok(event) = BinlogEvent::decode(bytes, checksum) {
            assert_eq!(event.encode(checksum), bytes, "{} ({checksum:?})", context());
        }
    }
    if bytes.len() >= CHECKSUM_LEN {
        let mut fixed = bytes.to_vec();
        let split = fixed.len() - CHECKSUM_LEN;
        let crc = crc32(&fixed[..split]);
        fixed[split..].copy_from_slice(&crc.to_le_bytes());
        if let Ok(event) = BinlogEvent::decode(&fixed, Checksum::Crc32) {
            assert_eq!(event.encode(Checksum::Crc32), fixed, "{} (footer repaired)", context());
        }
    }
    let mut decoder = EventDecoder::new(Checksum::Crc32);
    let mut rest = bytes;
    while let Ok((event, tail)) = split_event(rest) {
        let _ = decoder.decode(event);
        rest = tail;
    }
}

#[test]
fn random_bytes_never_panic() {
    let seed = seed();
    let mut rng = SplitMix64(seed ^ 1);
    for i in 0..50_000 {
        let mut bytes = rng.bytes(400);
        // Half the time make the header plausible so the body parsers run: a real type code and the right size.
        if rng.below(2) == 0 && bytes.len() >= EVENT_HEADER_LEN {
            let types = [2u8, 3, 4, 15, 16, 19, 23, 24, 25, 27, 160, 161, 162, 163];
            bytes[4] = types[rng.below(types.len() as u64) as usize];
            let size = bytes.len() as u32;
            bytes[9..13].copy_from_slice(&size.to_le_bytes());
        }
        decode_never_panics(&bytes, &|| format!("seed {seed} case {i}: {bytes:02x?}"));
    }
}

#[test]
fn bit_flips_of_captured_events() {
    let mut distinct = std::collections::BTreeSet::new();
    for stem in CAPTURES {
        for (_, bytes) in captured(stem) {
            distinct.insert(bytes);
        }
    }
    let mut flips = 0;
    for original in &distinct {
        for bit in 0..original.len() * 8 {
            let mut bytes = original.clone();
            bytes[bit / 8] ^= 1 << (bit % 8);
            decode_never_panics(&bytes, &|| format!("bit {bit} of {original:02x?}"));
            // CRC32 detects every single-bit error; a flip in event_size is caught by framing first.
            match BinlogEvent::decode(&bytes, Checksum::Crc32) {
                Err(Error::ChecksumMismatch { .. } | Error::Incomplete { .. } | Error::Malformed { .. }) => {}
                other => panic!("bit {bit} flipped in {original:02x?} went unnoticed: {other:?}"),
            }
            flips += 1;
        }
    }
    assert!(flips > 10_000, "{flips} flips over {} distinct events", distinct.len());
}

#[test]
fn truncations_of_captured_events_are_incomplete() {
    for stem in CAPTURES {
        for (comment, bytes) in captured(stem) {
            for cut in 0..bytes.len() {
                match BinlogEvent::decode(&bytes[..cut], Checksum::Crc32) {
                    Err(Error::Incomplete { have, need }) => {
                        assert_eq!(have, cut);
                        assert!(need == EVENT_HEADER_LEN || need == bytes.len(), "{comment}");
                    }
                    other => panic!("{comment} cut at {cut}: {other:?}"),
                }
            }
        }
    }
}

#[test]
fn gtid_positions_print_and_parse_back() {
    let seed = seed();
    let mut rng = SplitMix64(seed ^ 2);
    for i in 0..5_000 {
        let set = GtidSet::from_state((0..rng.len(12)).map(|_| {
            let mut g = gen_gtid(&mut rng);
            g.domain_id = rng.u32();
            g
        }));
        let text = set.to_string();
        assert_eq!(text.parse::<GtidSet>().as_ref(), Ok(&set), "seed {seed} case {i}: {text:?}");
        for gtid in &set {
            assert!(set.contains(gtid));
            assert_eq!(gtid.to_string().parse::<Gtid>(), Ok(*gtid));
        }
    }
}

#[test]
fn gtid_flag_constants_match_the_decoded_capture() {
    // repl-handshake-and-stream.decoded.txt: flags2=0x29 [STANDALONE|ALLOW_PARALLEL|DDL], 0x0c [TRANSACTIONAL|ALLOW_PARALLEL].
    assert_eq!(gtid_flags::STANDALONE | gtid_flags::ALLOW_PARALLEL | gtid_flags::DDL, 0x29);
    assert_eq!(gtid_flags::TRANSACTIONAL | gtid_flags::ALLOW_PARALLEL, 0x0c);
}
