//! Arbitrary bytes as one binlog event, with and without checksum: decoding must never panic, and whatever
//! decodes must re-encode to exactly the input (the binlog server re-serves decoded events).
#![no_main]

use libfuzzer_sys::fuzz_target;
use paxsql_binlog::{crc32, split_event, BinlogEvent, Checksum, EventDecoder, CHECKSUM_LEN};

fn round_trip(bytes: &[u8], checksum: Checksum) {
    if let Ok(event) = BinlogEvent::decode(bytes, checksum) {
        assert_eq!(event.encode(checksum), bytes, "re-encoding {event:?} with {checksum:?}");
        assert_eq!(event.encoded_len(checksum), bytes.len());
    }
}

fuzz_target!(|data: &[u8]| {
    round_trip(data, Checksum::Off);
    round_trip(data, Checksum::Crc32);

    // Random bytes almost never carry a valid CRC32, which would keep the fuzzer out of the body parsers in
    // CRC32 mode (and out of FORMAT_DESCRIPTION, which is always checksummed): also try with the footer fixed.
    if data.len() >= CHECKSUM_LEN {
        let mut fixed = data.to_vec();
        let split = fixed.len() - CHECKSUM_LEN;
        let crc = crc32(&fixed[..split]);
        fixed[split..].copy_from_slice(&crc.to_le_bytes());
        round_trip(&fixed, Checksum::Crc32);
    }

    // The same bytes as a stream of back-to-back events through the stateful decoder.
    let mut decoder = EventDecoder::new(Checksum::Crc32);
    let mut rest = data;
    while let Ok((event, tail)) = split_event(rest) {
        let _ = decoder.decode(event);
        rest = tail;
    }
});
