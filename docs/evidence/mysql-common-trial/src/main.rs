//! Factual trial: can mysql_common 0.37.3 (`proto::codec::PacketCodec` + `packets::*`) replace
//! paxsql's hand-written MySQL wire code? Runs against the MariaDB 10.11 captures in
//! crates/repl-client/fuzz/corpus/server_bytes of this repository (read-only).
//!
//! Run from this directory: cargo run --offline -F binlog (see README.md)
//! (debug profile on purpose: overflow checks on, like `cargo test`).

use std::{
    cell::RefCell,
    fs,
    panic::{self, AssertUnwindSafe},
    sync::Arc,
};

use bytes::BytesMut;
use mysql_common::{
    constants::{CapabilityFlags as C, ColumnType, StatusFlags},
    io::{BufMutExt, ParseBuf},
    packets::{
        AuthPlugin, AuthSwitchRequest, BinlogDumpFlags, Column, ComBinlogDump, ComRegisterSlave,
        CommonOkPacket, ErrPacket, HandshakePacket, HandshakeResponse, OkPacketDeserializer,
        OldEofPacket, ResultSetTerminator, SemiSyncAckPacket, SslRequest,
    },
    proto::{
        codec::{error::PacketCodecError, ChunkDecoder, ChunkInfo, PacketCodec},
        MySerialize, Text,
    },
    row::RowDeserializer,
    scramble::scramble_native,
    Value,
};

const CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../crates/repl-client/fuzz/corpus/server_bytes");

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect::<Vec<_>>().join(" ")
}
fn hex_short(b: &[u8]) -> String {
    if b.len() <= 24 {
        hex(b)
    } else {
        format!("{} … ({} bytes)", hex(&b[..24]), b.len())
    }
}

fn corpus_files() -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<_> = fs::read_dir(CORPUS)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().map(|e| e == "bin").unwrap_or(false))
        .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), fs::read(&p).unwrap()))
        .collect();
    v.sort();
    v
}

/// Frame with mysql_common's public low-level ChunkDecoder (no seq-id check), keeping seq ids.
fn frame_raw(bytes: &[u8]) -> (Vec<(u8, Vec<u8>)>, usize) {
    let mut src = BytesMut::from(bytes);
    let mut out = Vec::new();
    let mut dec = ChunkDecoder::default();
    let mut dst = Vec::new();
    loop {
        match dec.decode(&mut src, &mut dst, usize::MAX) {
            Ok(Some(ChunkInfo::Last(seq))) => out.push((seq, std::mem::take(&mut dst))),
            Ok(Some(ChunkInfo::Middle(_))) => continue,
            Ok(None) => break,
            Err(e) => panic!("ChunkDecoder error {e}"),
        }
    }
    (out, src.len())
}

/// Frame with a PacketCodec; returns the payloads, the error (if any) and the bytes left in src.
fn frame_codec(codec: &mut PacketCodec, bytes: &[u8]) -> (Vec<Vec<u8>>, Option<PacketCodecError>, usize) {
    let mut src = BytesMut::from(bytes);
    let mut out = Vec::new();
    loop {
        let mut dst = Vec::new();
        match codec.decode(&mut src, &mut dst) {
            Ok(true) => out.push(dst),
            Ok(false) => return (out, None, src.len()),
            Err(e) => return (out, Some(e), src.len()),
        }
    }
}

// ---------- panic capture ----------
thread_local!(static LAST_PANIC: RefCell<String> = RefCell::new(String::new()));
fn install_hook() {
    panic::set_hook(Box::new(|info| {
        let msg = if let Some(s) = info.payload().downcast_ref::<&str>() {
            s.to_string()
        } else if let Some(s) = info.payload().downcast_ref::<String>() {
            s.clone()
        } else {
            "?".into()
        };
        let loc = info.location().map(|l| format!("{}:{}", l.file(), l.line())).unwrap_or_default();
        // shorten registry path
        let loc = loc.rsplit_once("mysql_common-0.37.3/").map(|(_, r)| r.to_string()).unwrap_or(loc);
        LAST_PANIC.with(|p| *p.borrow_mut() = format!("{msg} @ {loc}"));
    }));
}
fn catch<R>(f: impl FnOnce() -> R) -> Result<R, String> {
    panic::catch_unwind(AssertUnwindSafe(f)).map_err(|_| LAST_PANIC.with(|p| p.borrow().clone()))
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn bytes(&mut self, max_len: usize) -> Vec<u8> {
        let n = (self.next() as usize) % (max_len + 1);
        (0..n).map(|_| self.next() as u8).collect()
    }
}

fn main() {
    install_hook();
    let args: Vec<String> = std::env::args().collect();
    #[cfg(feature = "binlog")]
    if args.get(1).map(|s| s.as_str()) == Some("binlog-fuzz-child") {
        binlog_fuzz_child(args[2].parse().unwrap());
        return;
    }
    if args.get(1).map(|s| s.as_str()) == Some("huge-binlog-event") {
        #[cfg(feature = "binlog")]
        binlog_huge();
        return;
    }
    let files = corpus_files();
    section1_codec(&files);
    let greeting_nonce = section2_handshake(&files);
    section3_response(&greeting_nonce);
    section4_ok_err_eof(&files);
    section5_binlog(&files);
    section6_resultset(&files);
    section7_errors(&files);
    section8_parser_fuzz(&files);
}

fn payload_of(files: &[(String, Vec<u8>)], name: &str) -> Vec<u8> {
    let f = &files.iter().find(|(n, _)| n == name).unwrap().1;
    frame_raw(f).0.remove(0).1
}

// =====================================================================================
fn section1_codec(files: &[(String, Vec<u8>)]) {
    println!("\n======== 1. PacketCodec framing ========");
    println!("-- 1a. every corpus file through a fresh PacketCodec::default() (max_allowed_packet = 4 MiB default)");
    for (name, bytes) in files {
        let mut codec = PacketCodec::default();
        let (pk, err, left) = frame_codec(&mut codec, bytes);
        let (raw, raw_left) = frame_raw(bytes);
        let seqs: Vec<u8> = raw.iter().map(|(s, _)| *s).collect();
        println!(
            "{name:28} {:4} B: codec -> {} packet(s), err={:?}, {} B left | raw seq ids {:?} ({} pkts, {} B left)",
            bytes.len(),
            pk.len(),
            err,
            left,
            seqs,
            raw.len(),
            raw_left
        );
    }

    println!("-- 1a'. realigning the codec's seq counter: no setter exists; only reset_seq_id() (=0) + encode() dummies, caller mirrors the counter");
    for (name, bytes) in files {
        let mut codec = PacketCodec::default();
        let mut src = BytesMut::from(&bytes[..]);
        let mut n = 0;
        let mut realigns = 0;
        // The codec never tells us what it expects, so we keep our own mirror of its counter.
        let mut mirror: u8 = 0;
        let res = loop {
            if src.len() >= 4 {
                // peek the header ourselves, because decode() never reports the seq id it saw
                let want = src[3];
                if want != mirror {
                    codec.reset_seq_id();
                    let mut junk = BytesMut::new();
                    for _ in 0..want {
                        codec.encode(&mut &[][..], &mut junk).unwrap();
                    }
                    mirror = want;
                    realigns += 1;
                }
            }
            let mut dst = Vec::new();
            match codec.decode(&mut src, &mut dst) {
                Ok(true) => {
                    n += 1;
                    mirror = mirror.wrapping_add(1);
                }
                Ok(false) => break Ok(()),
                Err(e) => break Err(e),
            }
        };
        println!("{name:28} decoded {n} packets with {realigns} forced realignments, result {res:?}, {} B left", src.len());
    }

    println!("-- 1b. sequence-id checking");
    let mut two = Vec::new();
    two.extend_from_slice(&[1, 0, 0, 0, 0xAA]); // seq 0
    two.extend_from_slice(&[1, 0, 0, 2, 0xBB]); // seq 2 (expected 1)
    let mut codec = PacketCodec::default();
    let (pk, err, left) = frame_codec(&mut codec, &two);
    println!("seq 0 then seq 2: payloads={:?} err={:?} bytes left in src={left} (the bad packet was consumed)", pk, err);
    let mut src = BytesMut::from(&[1u8, 0, 0, 2, 0xBB][..]);
    let mut dst = Vec::new();
    let mut c2 = PacketCodec::default();
    let r = c2.decode(&mut src, &mut dst);
    println!("single packet seq 2 into fresh codec: {:?}; dst after error = {:?} (payload was already copied into dst)", r, dst);
    // After encode the shared counter moves: client sends seq0, server answers seq1
    let mut c3 = PacketCodec::default();
    let mut out = BytesMut::new();
    c3.encode(&mut &b"\x03SELECT 1"[..], &mut out).unwrap();
    let mut src = BytesMut::from(&[1u8, 0, 0, 1, 0x01][..]);
    let mut dst = Vec::new();
    println!(
        "encode(seq0) then decode(seq1) on same codec: {:?} (one counter shared by encode and decode); encoded hdr {}",
        c3.decode(&mut src, &mut dst),
        hex(&out[..4])
    );

    println!("-- 1c. max_allowed_packet");
    for (desc, hdr, limit) in [
        ("16 MiB header ff ff ff 00, limit 1 MiB", [0xffu8, 0xff, 0xff, 0x00], 1usize << 20),
        ("1 MiB+1 header 01 00 10 00, limit 1 MiB", [0x01, 0x00, 0x10, 0x00], 1 << 20),
        ("exactly 1 MiB header 00 00 10 00, limit 1 MiB", [0x00, 0x00, 0x10, 0x00], 1 << 20),
    ] {
        let mut codec = PacketCodec::default();
        codec.max_allowed_packet = limit;
        let mut src = BytesMut::from(&hdr[..]);
        let mut dst = Vec::new();
        let r = codec.decode(&mut src, &mut dst);
        println!("{desc}: decode(header only) = {:?}, src left {} B, dst {} B", r, src.len(), dst.len());
    }
    // exactly 1 MiB: feed 1000 bytes of body -> buffering, nothing rejected; caller's src grows
    {
        let mut codec = PacketCodec::default();
        codec.max_allowed_packet = 1 << 20;
        let mut src = BytesMut::from(&[0x00u8, 0x00, 0x10, 0x00][..]);
        src.extend_from_slice(&[7u8; 1000]);
        let mut dst = Vec::new();
        let r1 = codec.decode(&mut src, &mut dst);
        src.extend_from_slice(&vec![7u8; (1 << 20) - 1000]);
        let r2 = codec.decode(&mut src, &mut dst);
        println!("exactly 1 MiB packet fed in 2 parts: {:?} then {:?}, payload {} B", r1, r2, dst.len());
    }
    // multi-chunk: 0xffffff chunk + 10-byte chunk
    {
        let mut big = Vec::with_capacity((16 << 20) + 20);
        big.extend_from_slice(&[0xff, 0xff, 0xff, 0x00]);
        big.extend(std::iter::repeat(0x41u8).take(0xff_ffff));
        big.extend_from_slice(&[10, 0, 0, 1]);
        big.extend(std::iter::repeat(0x42u8).take(10));
        for limit in [64usize << 20, 0xff_ffff + 5] {
            let mut codec = PacketCodec::default();
            codec.max_allowed_packet = limit;
            let (pk, err, left) = frame_codec(&mut codec, &big);
            println!(
                "16 MiB-1 chunk + 10 B chunk, limit {limit}: {} packet(s) of len {:?}, err={:?}, {} B left",
                pk.len(),
                pk.iter().map(|p| p.len()).collect::<Vec<_>>(),
                err,
                left
            );
        }
        let mut out = BytesMut::new();
        let mut codec = PacketCodec::default();
        codec.max_allowed_packet = 64 << 20;
        codec.encode(&mut &vec![0u8; 0xff_ffff][..], &mut out).unwrap();
        println!(
            "encode(payload of exactly 0xffffff B): {} B out, headers {} / trailing {}",
            out.len(),
            hex(&out[..4]),
            hex(&out[out.len() - 4..])
        );
        let mut codec = PacketCodec::default();
        codec.max_allowed_packet = 1 << 20;
        println!("encode(2 MiB) with limit 1 MiB: {:?}", codec.encode(&mut &vec![0u8; 2 << 20][..], &mut out));
    }

    println!("-- 1d. panic hunt: every prefix of every file, byte-by-byte feeding, 10k random streams");
    let mut prefixes = 0usize;
    let mut panics = Vec::new();
    for (name, bytes) in files {
        for n in 0..=bytes.len() {
            prefixes += 1;
            if let Err(p) = catch(|| {
                let mut codec = PacketCodec::default();
                frame_codec(&mut codec, &bytes[..n])
            }) {
                panics.push(format!("{name}[..{n}]: {p}"));
            }
        }
        // byte-by-byte
        let whole = frame_raw(bytes).0;
        let r = catch(|| {
            let mut codec = PacketCodec::default();
            let mut src = BytesMut::new();
            let mut got = Vec::new();
            let mut dst = Vec::new();
            for b in bytes {
                src.extend_from_slice(&[*b]);
                loop {
                    match codec.decode(&mut src, &mut dst) {
                        Ok(true) => got.push(std::mem::take(&mut dst)),
                        Ok(false) => break,
                        Err(_) => return got,
                    }
                }
            }
            got
        });
        match r {
            Ok(got) => {
                let same = got.iter().zip(whole.iter()).all(|(a, (_, b))| a == b);
                if !same {
                    println!("byte-by-byte mismatch on {name}");
                }
            }
            Err(p) => panics.push(format!("{name} byte-by-byte: {p}")),
        }
    }
    let mut rng = Rng(0x9E3779B97F4A7C15);
    let mut stats = [0usize; 5]; // ok-with-packets, need-more, too-large, out-of-sync, other
    for i in 0..10_000 {
        let mut s = rng.bytes(300);
        if i % 2 == 0 && s.len() >= 4 {
            // bias: plausible small length, seq 0
            s[1] = 0;
            s[2] = 0;
            s[3] = if i % 4 == 0 { 0 } else { s[3] };
        }
        let mut codec = PacketCodec::default();
        if i % 3 == 0 {
            codec.max_allowed_packet = 64;
        }
        match catch(|| frame_codec(&mut codec, &s)) {
            Ok((pk, err, _)) => match err {
                None if !pk.is_empty() => stats[0] += 1,
                None => stats[1] += 1,
                Some(PacketCodecError::PacketTooLarge) => stats[2] += 1,
                Some(PacketCodecError::PacketsOutOfSync) => stats[3] += 1,
                Some(_) => stats[4] += 1,
            },
            Err(p) => panics.push(format!("random #{i} {}: {p}", hex_short(&s))),
        }
    }
    println!(
        "prefixes tried: {prefixes}; random streams: 10000 -> with-packets {}, need-more {}, PacketTooLarge {}, PacketsOutOfSync {}, other {}",
        stats[0], stats[1], stats[2], stats[3], stats[4]
    );
    println!("PANICS in codec: {}", panics.len());
    for p in panics.iter().take(5) {
        println!("  {p}");
    }
}


// =====================================================================================
fn section2_handshake(files: &[(String, Vec<u8>)]) -> Vec<u8> {
    println!("\n======== 2. HandshakePacket ========");
    let p = payload_of(files, "greeting.bin");
    let hs: HandshakePacket = ParseBuf(&p).parse(()).unwrap();
    println!("greeting payload {} B parsed:", p.len());
    println!("  protocol_version      {}", hs.protocol_version());
    println!("  server_version        {:?}", hs.server_version_str());
    println!("  server_version_parsed {:?}  maria_db_server_version_parsed {:?}", hs.server_version_parsed(), hs.maria_db_server_version_parsed());
    println!("  connection_id         {}", hs.connection_id());
    println!("  capabilities          0x{:08x} {:?}", hs.capabilities().bits(), hs.capabilities());
    println!("  mariadb_ext_caps      0x{:08x} {:?}", hs.mariadb_ext_capabilities().bits(), hs.mariadb_ext_capabilities());
    println!("  default_collation     {}  status_flags {:?}", hs.default_collation(), hs.status_flags());
    println!("  scramble_1 {:?} scramble_2 {:?}", String::from_utf8_lossy(hs.scramble_1_ref()), hs.scramble_2_ref().map(String::from_utf8_lossy));
    println!("  nonce()               {:?}", String::from_utf8_lossy(&hs.nonce()));
    println!("  auth_plugin_name      {:?}  auth_plugin() {:?}", hs.auth_plugin_name_str(), hs.auth_plugin());
    let mut re = Vec::new();
    hs.serialize(&mut re);
    println!("  re-serialize == captured payload: {}", re == p);

    println!("-- our own server's greeting");
    let salt = *b"A1b2C3d4E5f6G7h8I9j0";
    let caps = C::CLIENT_PROTOCOL_41 | C::CLIENT_SECURE_CONNECTION | C::CLIENT_PLUGIN_AUTH | C::CLIENT_DEPRECATE_EOF | C::CLIENT_TRANSACTIONS | C::CLIENT_LONG_PASSWORD;
    for (desc, s2) in [("scramble_2 = salt[8..] + NUL (13 B)", [&salt[8..], &[0u8][..]].concat()), ("scramble_2 = salt[8..] (12 B, no NUL)", salt[8..].to_vec())] {
        let ours = HandshakePacket::new(
            10,
            &b"10.11.0-paxsql"[..],
            7,
            salt[..8].try_into().unwrap(),
            Some(s2.clone()),
            caps,
            33,
            StatusFlags::SERVER_STATUS_AUTOCOMMIT,
            Some(&b"mysql_native_password"[..]),
        );
        let mut b = Vec::new();
        ours.serialize(&mut b);
        println!("{desc}: serialized {} B: {}", b.len(), hex(&b));
        match ParseBuf(&b).parse::<HandshakePacket>(()) {
            Ok(back) => println!(
                "   parsed back: version {:?} conn {} caps 0x{:08x} nonce {:?} (== salt: {}) plugin {:?}; equal to original struct: {}",
                back.server_version_str(),
                back.connection_id(),
                back.capabilities().bits(),
                String::from_utf8_lossy(&back.nonce()),
                back.nonce() == salt,
                back.auth_plugin_name_str(),
                back == ours
            ),
            Err(e) => println!("   parse back error: {e}"),
        }
        let mut codec = PacketCodec::default();
        let mut out = BytesMut::new();
        codec.encode(&mut &b[..], &mut out).unwrap();
        println!("   framed by PacketCodec::encode: header {}", hex(&out[..4]));
    }
    // crafted: auth_plugin_data_len >= 0x80
    let vpos = p.iter().position(|&b| b == 0).unwrap();
    let len_off = vpos + 21;
    println!("-- crafted greeting: auth_plugin_data_len byte (payload offset {len_off}, was 0x{:02x}) set to 0x80 / 0x85 / 0xff", p[len_off]);
    for v in [0x80u8, 0x85, 0xff] {
        let mut q = p.clone();
        q[len_off] = v;
        let r = catch(|| ParseBuf(&q).parse::<HandshakePacket>(()).map(|h| (h.scramble_2_ref().map(|s| s.len()), h.auth_plugin_name_str().map(|s| s.into_owned()))));
        println!("   0x{v:02x}: {:?}", r);
    }
    hs.nonce()
}

// =====================================================================================
fn section3_response(nonce: &[u8]) {
    println!("\n======== 3. HandshakeResponse / SslRequest ========");
    let token = scramble_native(nonce, b"replpass").unwrap();
    let wanted = C::from_bits_truncate(0x000a_a205);
    let hr = HandshakeResponse::new(
        Some(&token[..]),
        (10, 11, 19),
        Some(&b"repl"[..]),
        None::<&[u8]>,
        Some(AuthPlugin::MysqlNativePassword),
        wanted,
        None,
        0x0100_0000,
    );
    let mut b = Vec::new();
    hr.serialize(&mut b);
    println!("asked caps 0x{:08x}, struct caps 0x{:08x}, collation {} (no setter; new() picks 45 for >=5.5.3)", wanted.bits(), hr.capabilities().bits(), hr.collation());
    println!("serialized {} B: {}", b.len(), hex(&b));
    let back: HandshakeResponse = ParseBuf(&b).parse(()).unwrap();
    println!(
        "parsed back: user {:?} token==ours {} plugin {:?} caps 0x{:08x} db {:?}; struct equal {}",
        String::from_utf8_lossy(back.user()),
        back.scramble_buf() == token,
        back.auth_plugin(),
        back.capabilities().bits(),
        back.db_name(),
        back == hr
    );

    // mariadb CLI shape
    let mut cli = Vec::new();
    cli.extend_from_slice(&0x81ae_a20du32.to_le_bytes());
    cli.extend_from_slice(&0x0100_0000u32.to_le_bytes());
    cli.push(33);
    cli.extend_from_slice(&[0u8; 23]);
    cli.extend_from_slice(b"admin\0");
    cli.push(0x14);
    cli.extend_from_slice(&[0xAA; 20]);
    cli.extend_from_slice(b"paxsql\0");
    cli.extend_from_slice(b"mysql_native_password\0");
    println!("CLI login payload {} B", cli.len());
    match ParseBuf(&cli).parse::<HandshakeResponse>(()) {
        Ok(h) => {
            println!(
                "  parsed: caps 0x{:08x} collation {} user {:?} token {} db {:?} plugin {:?} mariadb_ext 0x{:x}",
                h.capabilities().bits(),
                h.collation(),
                String::from_utf8_lossy(h.user()),
                hex_short(h.scramble_buf()),
                h.db_name().map(String::from_utf8_lossy),
                h.auth_plugin(),
                h.mariadb_ext_capabilities().bits()
            );
            println!("  Debug (max_packet_size has no getter): {:?}", h);
            let mut re = Vec::new();
            h.serialize(&mut re);
            println!("  re-serialized == input: {}", re == cli);
        }
        Err(e) => println!("  parse error: {e}"),
    }
    // truncated variants
    for (desc, cut) in [("no plugin NUL", cli.len() - 1), ("cut inside db", 32 + 6 + 21 + 3), ("cut inside token", 32 + 6 + 10)] {
        println!("  {desc} ({} B): {:?}", cut, ParseBuf(&cli[..cut]).parse::<HandshakeResponse>(()).map(|h| (String::from_utf8_lossy(h.user()).into_owned(), h.db_name().map(|d| d.to_vec()), h.auth_plugin().cloned())));
    }

    // SslRequest
    let ssl = SslRequest::new(C::from_bits_truncate(0x81ae_a20d) | C::CLIENT_SSL, 0x0100_0000, 33);
    let mut sb = Vec::new();
    ssl.serialize(&mut sb);
    println!("SslRequest serialized {} B: {}", sb.len(), hex(&sb));
    println!("  32-byte SslRequest parsed as HandshakeResponse: {:?}", ParseBuf(&sb).parse::<HandshakeResponse>(()).map(|h| String::from_utf8_lossy(h.user()).into_owned()));
    let mut pb = ParseBuf(&cli);
    let r = pb.parse::<SslRequest>(());
    println!("  full CLI login parsed as SslRequest: ok={} caps has CLIENT_SSL={:?}; {} bytes silently left unconsumed", r.is_ok(), r.as_ref().map(|s| s.capabilities().contains(C::CLIENT_SSL)), pb.len());
    println!("  => no type tells an SSLRequest from a login: caller must test payload.len()==32 && CLIENT_SSL itself");
}

// =====================================================================================
fn section4_ok_err_eof(files: &[(String, Vec<u8>)]) {
    println!("\n======== 4. OK / ERR / EOF / AuthSwitch ========");
    let p41 = C::CLIENT_PROTOCOL_41 | C::CLIENT_SECURE_CONNECTION | C::CLIENT_PLUGIN_AUTH;
    let ok = payload_of(files, "ok.bin");
    println!("ok.bin payload {}", hex(&ok));
    for caps in [p41, p41 | C::CLIENT_SESSION_TRACK] {
        match ParseBuf(&ok).parse::<OkPacketDeserializer<CommonOkPacket>>(caps) {
            Ok(o) => {
                let o = o.into_inner();
                println!(
                    "  CommonOkPacket (caps 0x{:08x}): affected {} last_insert_id {:?} status {:?} warnings {} info {:?}",
                    caps.bits(),
                    o.affected_rows(),
                    o.last_insert_id(),
                    o.status_flags(),
                    o.warnings(),
                    o.info_str()
                );
            }
            Err(e) => println!("  error {e}"),
        }
    }
    let err = payload_of(files, "err-1236.bin");
    println!("err-1236.bin payload {}", hex_short(&err));
    for (desc, caps) in [("PROTOCOL_41", p41), ("no caps", C::empty())] {
        match ParseBuf(&err).parse::<ErrPacket>(caps) {
            Ok(ErrPacket::Error(e)) => println!("  [{desc}] code {} state {:?} msg {:?}", e.error_code(), e.sql_state_ref().map(|s| s.as_str().into_owned()), e.message_str()),
            Ok(other) => println!("  [{desc}] {other:?}"),
            Err(e) => println!("  [{desc}] error {e}"),
        }
    }
    let mut nostate = vec![0xff, 0x69, 0x04];
    nostate.extend_from_slice(b"Host '10.0.0.9' is blocked because of many connection errors");
    println!("ERR without '#SQLSTATE' (as sent before the handshake): {}", hex_short(&nostate));
    for (desc, caps) in [("PROTOCOL_41", p41), ("no caps", C::empty())] {
        match ParseBuf(&nostate).parse::<ErrPacket>(caps) {
            Ok(ErrPacket::Error(e)) => println!("  [{desc}] code {} state {:?} msg {:?}", e.error_code(), e.sql_state_ref().map(|s| s.as_str().into_owned()), e.message_str()),
            Ok(other) => println!("  [{desc}] {other:?}"),
            Err(e) => println!("  [{desc}] error: {e} (kind {:?})", e.kind()),
        }
    }
    let mut ser = Vec::new();
    ErrPacket::Error(mysql_common::packets::ServerError::new(1236, Some(mysql_common::packets::SqlState::new(*b"HY000")), &b"Error: x"[..])).serialize(&mut ser);
    println!("ErrPacket serialize (server side): {}", hex(&ser));

    let eof = payload_of(files, "eof.bin");
    println!("eof.bin payload {}", hex(&eof));
    match ParseBuf(&eof).parse::<OkPacketDeserializer<OldEofPacket>>(p41) {
        Ok(o) => {
            let o = o.into_inner();
            println!("  OldEofPacket: status {:?} warnings {}", o.status_flags(), o.warnings());
        }
        Err(e) => println!("  OldEofPacket error {e}"),
    }
    println!("  same bytes as ResultSetTerminator: {:?}", ParseBuf(&eof).parse::<OkPacketDeserializer<ResultSetTerminator>>(p41).map(|o| o.into_inner().status_flags()));
    println!("  same bytes as CommonOkPacket: {:?}", ParseBuf(&eof).parse::<OkPacketDeserializer<CommonOkPacket>>(p41).map(|o| o.into_inner().status_flags()));
    let fe_ok = [0xfe, 0, 0, 2, 0, 0, 0];
    println!("  0xFE-OK (DEPRECATE_EOF terminator) {} as ResultSetTerminator: {:?}", hex(&fe_ok), ParseBuf(&fe_ok).parse::<OkPacketDeserializer<ResultSetTerminator>>(p41 | C::CLIENT_DEPRECATE_EOF).map(|o| o.into_inner().status_flags()));
    println!("  OkPacket / OldEof serializer exists? -> no `impl MySerialize for OkPacket` in 0.37.3 (grep), only parsing");

    let sw = payload_of(files, "auth-switch.bin");
    match ParseBuf(&sw).parse::<AuthSwitchRequest>(()) {
        Ok(a) => println!("auth-switch.bin: plugin {:?} data {:?} ({} B after trailing NUL stripped)", a.auth_plugin(), String::from_utf8_lossy(a.plugin_data()), a.plugin_data().len()),
        Err(e) => println!("auth-switch error {e}"),
    }
    let mut ser = Vec::new();
    AuthSwitchRequest::new(&b"mysql_native_password"[..], &b"01234567890123456789\0"[..]).serialize(&mut ser);
    println!("AuthSwitchRequest::serialize == captured payload: {}", ser == sw);
}

// =====================================================================================
fn section5_binlog(files: &[(String, Vec<u8>)]) {
    println!("\n======== 5. Binlog dump stream / replication commands ========");
    let reg = ComRegisterSlave::new(2).with_port(23307);
    let mut b = Vec::new();
    reg.serialize(&mut b);
    let cap_reg = [0x15, 0x02, 0, 0, 0, 0, 0, 0, 0x0b, 0x5b, 0, 0, 0, 0, 0, 0, 0, 0];
    println!("ComRegisterSlave::new(2).with_port(23307): {}\n  capture:                                  {}\n  equal: {}", hex(&b), hex(&cap_reg), b == cap_reg);
    let back: ComRegisterSlave = ParseBuf(&cap_reg).parse(()).unwrap();
    println!("  capture parsed: server_id {} port {} rank {} master_id {}", back.server_id(), back.port(), back.replication_rank(), back.master_id());

    let dump = ComBinlogDump::new(2).with_pos(4).with_flags(BinlogDumpFlags::BINLOG_THROUGH_POSITION);
    let mut b = Vec::new();
    dump.serialize(&mut b);
    let cap_dump = [0x12, 0x04, 0, 0, 0, 0x02, 0x00, 0x02, 0, 0, 0];
    println!("ComBinlogDump::new(2).with_pos(4).with_flags(0x02 — named BINLOG_THROUGH_POSITION, MariaDB's BINLOG_SEND_ANNOTATE_ROWS_EVENT): {}\n  capture: {}\n  equal: {}", hex(&b), hex(&cap_dump), b == cap_dump);
    let back: ComBinlogDump = ParseBuf(&cap_dump).parse(()).unwrap();
    println!("  capture parsed: pos {} flags {:?} server_id {} file {:?}", back.pos(), back.flags(), back.server_id(), back.filename());

    let ack = SemiSyncAckPacket::new(0x1c0, &b"n1-bin.000001"[..]);
    let mut b = Vec::new();
    ack.serialize(&mut b);
    println!("SemiSyncAckPacket::new(448, n1-bin.000001): {} (doc: ef c0 01 00 00 00 00 00 00 6e 31 2d …)", hex(&b));

    let ev = payload_of(files, "event-00.bin");
    println!("event-00 payload head: {}", hex(&ev[..8]));
    let as_ack = ParseBuf(&ev[1..]).parse::<SemiSyncAckPacket>(());
    println!(
        "  event payload[1..] (starts EF) parsed as SemiSyncAckPacket: ok={} (position {:?}) — nothing checks which way the packet went; no type for the EF <flag> event header",
        as_ack.is_ok(),
        as_ack.as_ref().map(|a| a.position())
    );

    #[cfg(feature = "binlog")]
    binlog_events(files);
    #[cfg(not(feature = "binlog"))]
    println!("(binlog feature off: mysql_common::binlog not compiled — the project's mysql_async features don't enable it)");
}

#[cfg(feature = "binlog")]
fn binlog_events(files: &[(String, Vec<u8>)]) {
    use mysql_common::binlog::{consts::BinlogVersion, EventStreamReader};
    println!("-- mysql_common::binlog::EventStreamReader (feature `binlog`, NOT enabled by the project)");
    let mut events: Vec<(String, Vec<u8>)> = files.iter().filter(|(n, _)| n.starts_with("event-")).map(|(n, b)| (n.clone(), frame_raw(b).0.remove(0).1)).collect();
    events.sort();
    for (mode, skip) in [("payload[3..] (0x00 EF flag stripped by caller)", 3usize), ("payload[1..] (only 0x00 stripped, as mysql_async 0.37 does)", 1)] {
        println!("  mode {mode}:");
        let mut esr = EventStreamReader::new(BinlogVersion::Version4);
        for (name, p) in &events {
            if name == "event-no-semisync.bin" && skip == 3 {
                continue;
            }
            let input = if name == "event-no-semisync.bin" { &p[1..] } else { &p[skip.min(p.len())..] };
            let r = catch(|| {
                let e = esr.read(input)?;
                let e = e.unwrap();
                let d = e.read_data().map(|d| format!("{:?}", d).chars().take(90).collect::<String>());
                Ok::<_, std::io::Error>((e.header().event_type_raw(), e.header().log_pos(), e.header().event_size(), d))
            });
            match r {
                Ok(Ok((t, pos, sz, d))) => println!("    {name}: type {t} log_pos {pos} size {sz} data {:?}", d.map_err(|e| e.to_string())),
                Ok(Err(e)) => println!("    {name}: io error: {e}"),
                Err(p) => println!("    {name}: PANIC: {p}"),
            }
        }
    }
    // child process for a header announcing a huge event
    let exe = std::env::current_exe().unwrap();
    let out = std::process::Command::new(exe).arg("huge-binlog-event").output().unwrap();
    println!("  19-byte header announcing event_size=0xfffffff0 (child process): status {:?}, stdout {:?}, stderr tail {:?}", out.status, String::from_utf8_lossy(&out.stdout).trim(), String::from_utf8_lossy(&out.stderr).lines().last());
}

#[cfg(feature = "binlog")]
fn binlog_huge() {
    use mysql_common::binlog::{consts::BinlogVersion, EventStreamReader};
    let mut h = vec![0u8; 19];
    h[4] = 4; // ROTATE
    h[9..13].copy_from_slice(&0xffff_fff0u32.to_le_bytes());
    let t = std::time::Instant::now();
    let r = catch(|| EventStreamReader::new(BinlogVersion::Version4).read(&h[..]).map(|_| ()));
    println!("result {:?} after {:?}", r, t.elapsed());
}

// =====================================================================================
fn section6_resultset(files: &[(String, Vec<u8>)]) {
    println!("\n======== 6. Text result sets (server side) ========");
    let rs = &files.iter().find(|(n, _)| n == "result-set.bin").unwrap().1;
    let pk = frame_raw(rs).0;
    for (s, p) in &pk {
        println!("  seq {s}: {}", hex_short(p));
    }
    let col: Column = ParseBuf(&pk[1].1).parse(()).unwrap();
    println!(
        "Column parsed: name {:?} type {:?} charset {} column_length {} flags {:?} decimals {}",
        col.name_str(),
        col.column_type(),
        col.character_set(),
        col.column_length(),
        col.flags(),
        col.decimals()
    );
    let mut re = Vec::new();
    col.serialize(&mut re);
    println!("  Column re-serialized: {}\n  captured:             {}\n  equal: {}", hex(&re), hex(&pk[1].1), re == pk[1].1);
    let back: Column = ParseBuf(&re).parse(()).unwrap();
    println!("  re-serialized bytes parsed again: charset {} column_length {} (orig {} / {})", back.character_set(), back.column_length(), col.character_set(), col.column_length());
    let fresh = Column::new(ColumnType::MYSQL_TYPE_VAR_STRING).with_name(b"x").with_character_set(33).with_column_length(0x1234_5678);
    let mut fb = Vec::new();
    fresh.serialize(&mut fb);
    let fb_back: Column = ParseBuf(&fb).parse(()).unwrap();
    println!("  Column::new(..).with_character_set(33).with_column_length(0x12345678) -> {}\n    parsed back: charset {} column_length 0x{:x}", hex(&fb), fb_back.character_set(), fb_back.column_length());
    let cols: Arc<[Column]> = vec![col.clone()].into();
    let row = ParseBuf(&pk[3].1).parse::<RowDeserializer<(), Text>>(cols.clone()).unwrap().into_inner();
    println!("  text row parsed: {:?}", row.unwrap());
    let mut vb = Vec::new();
    Value::NULL.serialize(&mut vb);
    let nb = vb.len();
    Value::Bytes(b"CRC32".to_vec()).serialize(&mut vb);
    Value::Int(1796221860).serialize(&mut vb);
    println!("  Value::serialize (NULL, Bytes(CRC32), Int(1796221860)) -> {} (NULL wrote {} bytes; text protocol needs 0xfb; Int is binary LE, text needs lenenc \"1796221860\")", hex(&vb), nb);
    let mut cc = Vec::new();
    cc.put_lenenc_int(1);
    println!("  column count via BufMutExt::put_lenenc_int(1): {}", hex(&cc));
    println!("  => pieces only: no result-set writer, no OK/EOF serializer, no text-row serializer, no DEPRECATE_EOF switch");
}

// =====================================================================================
fn section7_errors(files: &[(String, Vec<u8>)]) {
    println!("\n======== 7. Error reporting on malformed input ========");
    let g = payload_of(files, "greeting.bin");
    let cases: Vec<(&str, Box<dyn Fn() -> std::io::Result<String>>)> = vec![
        ("greeting cut at 20 B (inside server_version)", Box::new(|| ParseBuf(&g[..20]).parse::<HandshakePacket>(()).map(|_| "ok".into()))),
        ("greeting cut at 50 B (inside caps block)", Box::new(|| ParseBuf(&g[..50]).parse::<HandshakePacket>(()).map(|_| "ok".into()))),
        ("greeting cut at 70 B (inside scramble_2)", Box::new(|| ParseBuf(&g[..70]).parse::<HandshakePacket>(()).map(|_| "ok".into()))),
        ("OK 00 fc 01", Box::new(|| ParseBuf(&[0u8, 0xfc, 0x01]).parse::<OkPacketDeserializer<CommonOkPacket>>(C::CLIENT_PROTOCOL_41).map(|_| "ok".into()))),
        ("OK with header 0x07", Box::new(|| ParseBuf(&[7u8, 0, 0, 2, 0, 0, 0]).parse::<OkPacketDeserializer<CommonOkPacket>>(C::CLIENT_PROTOCOL_41).map(|_| "ok".into()))),
        ("ERR with header 0x00", Box::new(|| ParseBuf(&[0u8, 1, 2, b'#', b'H', b'Y', b'0', b'0', b'0']).parse::<ErrPacket>(C::CLIENT_PROTOCOL_41).map(|_| "ok".into()))),
        ("ComBinlogDump with header 0x13", Box::new(|| ParseBuf(&[0x13u8, 4, 0, 0, 0, 2, 0, 2, 0, 0, 0]).parse::<ComBinlogDump>(()).map(|_| "ok".into()))),
        ("Column def cut at 10 B", Box::new(|| ParseBuf(&[3u8, b'd', b'e', b'f', 0, 0, 0, 1, b'x', 0]).parse::<Column>(()).map(|_| "ok".into()))),
    ];
    for (d, f) in cases {
        match f() {
            Ok(s) => println!("  {d}: {s}"),
            Err(e) => println!("  {d}: kind {:?}, message {:?}, inner type {:?}", e.kind(), e.to_string(), e.get_ref().map(|x| format!("{x:?}"))),
        }
    }
    println!("  PacketCodecError variants: {:?} / {:?} (no offset, no seq ids in the error)", PacketCodecError::PacketsOutOfSync, PacketCodecError::PacketTooLarge);
}

// =====================================================================================
type Parser = (&'static str, fn(&[u8]) -> bool);
fn parsers() -> Vec<Parser> {
    let p41 = || C::CLIENT_PROTOCOL_41 | C::CLIENT_SESSION_TRACK | C::CLIENT_PROGRESS_OBSOLETE | C::CLIENT_DEPRECATE_EOF;
    let _ = p41;
    vec![
        ("HandshakePacket", |b| ParseBuf(b).parse::<HandshakePacket>(()).is_ok()),
        ("HandshakeResponse", |b| ParseBuf(b).parse::<HandshakeResponse>(()).is_ok()),
        ("SslRequest", |b| ParseBuf(b).parse::<SslRequest>(()).is_ok()),
        ("OkPacket<CommonOk>", |b| ParseBuf(b).parse::<OkPacketDeserializer<CommonOkPacket>>(C::CLIENT_PROTOCOL_41 | C::CLIENT_SESSION_TRACK).map(|o| o.into_inner().session_state_info().is_ok()).is_ok()),
        ("OkPacket<ResultSetTerminator>", |b| ParseBuf(b).parse::<OkPacketDeserializer<ResultSetTerminator>>(C::CLIENT_PROTOCOL_41 | C::CLIENT_SESSION_TRACK).is_ok()),
        ("OkPacket<OldEof>", |b| ParseBuf(b).parse::<OkPacketDeserializer<OldEofPacket>>(C::CLIENT_PROTOCOL_41).is_ok()),
        ("ErrPacket(p41+progress)", |b| ParseBuf(b).parse::<ErrPacket>(C::CLIENT_PROTOCOL_41 | C::CLIENT_PROGRESS_OBSOLETE).is_ok()),
        ("ErrPacket(no caps)", |b| ParseBuf(b).parse::<ErrPacket>(C::empty()).is_ok()),
        ("AuthSwitchRequest", |b| ParseBuf(b).parse::<AuthSwitchRequest>(()).map(|a| format!("{:?}", a.auth_plugin())).is_ok()),
        ("Column", |b| ParseBuf(b).parse::<Column>(()).is_ok()),
        ("TextRow(2 cols)", |b| {
            let c = Column::new(ColumnType::MYSQL_TYPE_VAR_STRING);
            let cols: Arc<[Column]> = vec![c.clone(), c].into();
            ParseBuf(b).parse::<RowDeserializer<(), Text>>(cols).is_ok()
        }),
        ("ComBinlogDump", |b| ParseBuf(b).parse::<ComBinlogDump>(()).is_ok()),
        ("ComRegisterSlave", |b| ParseBuf(b).parse::<ComRegisterSlave>(()).is_ok()),
        ("SemiSyncAckPacket", |b| ParseBuf(b).parse::<SemiSyncAckPacket>(()).is_ok()),
    ]
}

fn build_inputs(files: &[(String, Vec<u8>)]) -> Vec<(String, Vec<u8>)> {
    let mut inputs: Vec<(String, Vec<u8>)> = Vec::new();
    let mut payloads: Vec<(String, Vec<u8>)> = Vec::new();
    for (name, bytes) in files {
        for (i, (_, p)) in frame_raw(bytes).0.into_iter().enumerate() {
            payloads.push((format!("{name}#{i}"), p.clone()));
            if p.len() > 3 && p[0] == 0 && p[1] == 0xef {
                payloads.push((format!("{name}#{i}[3..]"), p[3..].to_vec()));
            }
            if !p.is_empty() && p[0] == 0 {
                payloads.push((format!("{name}#{i}[1..]"), p[1..].to_vec()));
            }
        }
    }
    // client->server payloads too (commands, logins), so their parsers see real shapes
    let mut cli = Vec::new();
    cli.extend_from_slice(&0x81ae_a20du32.to_le_bytes());
    cli.extend_from_slice(&0x0100_0000u32.to_le_bytes());
    cli.push(33);
    cli.extend_from_slice(&[0u8; 23]);
    cli.extend_from_slice(b"admin\0");
    cli.push(0x14);
    cli.extend_from_slice(&[0xAA; 20]);
    cli.extend_from_slice(b"paxsql\0mysql_native_password\0");
    payloads.push(("cli-login".into(), cli));
    payloads.push(("com_register_slave".into(), vec![0x15, 0x02, 0, 0, 0, 0, 0, 0, 0x0b, 0x5b, 0, 0, 0, 0, 0, 0, 0, 0]));
    payloads.push(("com_binlog_dump".into(), [&[0x12u8, 0x04, 0, 0, 0, 0x02, 0x00, 0x02, 0, 0, 0][..], b"n1-bin.000001"].concat()));
    let mut ack = Vec::new();
    SemiSyncAckPacket::new(0x1c0, &b"n1-bin.000001"[..]).serialize(&mut ack);
    payloads.push(("semisync_ack".into(), ack));
    for (n, p) in &payloads {
        for k in 0..=p.len() {
            inputs.push((format!("{n}[..{k}]"), p[..k].to_vec()));
        }
        for pos in 0..p.len().min(64) {
            for v in [0x00u8, 0x7f, 0x80, 0xfb, 0xfc, 0xfd, 0xfe, 0xff] {
                let mut q = p.clone();
                q[pos] = v;
                inputs.push((format!("{n} byte{pos}={v:02x}"), q));
            }
        }
    }
    let mut rng = Rng(0xDEADBEEFCAFEF00D);
    for i in 0..10_000 {
        let mut s = rng.bytes(200);
        // bias every other input toward a sane binlog event_size so the reader gets past the header
        if i % 2 == 0 && s.len() >= 19 {
            let sz = (s.len() as u32).saturating_sub((rng.next() % 8) as u32);
            s[9..13].copy_from_slice(&sz.to_le_bytes());
        }
        inputs.push((format!("random#{i}"), s));
    }
    inputs
}

#[cfg(feature = "binlog")]
fn binlog_parse(b: &[u8]) -> bool {
    use mysql_common::binlog::{consts::BinlogVersion, EventStreamReader};
    let mut esr = EventStreamReader::new(BinlogVersion::Version4);
    match esr.read(b) {
        Ok(Some(e)) => e.read_data().is_ok(),
        _ => false,
    }
}

/// Child: run binlog parser on inputs[start..], announcing each index first (so an abort can be located).
#[cfg(feature = "binlog")]
fn binlog_fuzz_child(start: usize) {
    use std::io::Write;
    let inputs = build_inputs(&corpus_files());
    let out = std::io::stdout();
    let mut out = out.lock();
    for (i, (_, inp)) in inputs.iter().enumerate().skip(start) {
        writeln!(out, "I {i}").unwrap();
        out.flush().unwrap();
        match catch(|| binlog_parse(inp)) {
            Ok(true) => writeln!(out, "O").unwrap(),
            Ok(false) => writeln!(out, "E").unwrap(),
            Err(m) => writeln!(out, "P {m}").unwrap(),
        }
    }
    writeln!(out, "DONE").unwrap();
}

#[cfg(feature = "binlog")]
fn binlog_fuzz_parent(inputs: &[(String, Vec<u8>)]) {
    let exe = std::env::current_exe().unwrap();
    let (mut ok, mut err) = (0usize, 0usize);
    let mut panics = std::collections::BTreeMap::<String, (String, String, usize)>::new();
    let mut aborts = Vec::new();
    let mut start = 0usize;
    let mut children = 0;
    loop {
        children += 1;
        let o = std::process::Command::new(&exe).arg("binlog-fuzz-child").arg(start.to_string()).output().unwrap();
        let text = String::from_utf8_lossy(&o.stdout);
        let mut cur = None;
        let mut done = false;
        for line in text.lines() {
            if let Some(i) = line.strip_prefix("I ") {
                cur = Some(i.parse::<usize>().unwrap());
            } else if line == "O" {
                ok += 1;
            } else if line == "E" {
                err += 1;
            } else if let Some(m) = line.strip_prefix("P ") {
                let i = cur.unwrap();
                let key = m.split(" @ ").nth(1).unwrap_or(m).to_string();
                panics.entry(key).or_insert((m.to_string(), format!("{}: {}", inputs[i].0, hex_short(&inputs[i].1)), 0)).2 += 1;
            } else if line == "DONE" {
                done = true;
            }
        }
        if done {
            break;
        }
        let i = cur.expect("child died before first input");
        let first_err = String::from_utf8_lossy(&o.stderr).lines().next().unwrap_or("").to_string();
        aborts.push((i, inputs[i].0.clone(), hex_short(&inputs[i].1), o.status.to_string(), first_err));
        start = i + 1;
        if aborts.len() >= 300 {
            println!("    (stopping after 300 aborts)");
            break;
        }
    }
    let np: usize = panics.values().map(|v| v.2).sum();
    println!("{:38} ok {ok:6} err {err:6} PANICS {np} PROCESS ABORTS {} ({} child processes)", "binlog EventStreamReader+read_data", aborts.len(), children);
    for (_, (m, e, c)) in &panics {
        println!("    x{c:<5} {m}\n           e.g. {e}");
    }
    let mut by_msg = std::collections::BTreeMap::<String, Vec<&(usize, String, String, String, String)>>::new();
    for a in &aborts {
        let k: String = a.4.split(" bytes").next().unwrap_or("").split_whitespace().take(2).collect::<Vec<_>>().join(" ");
        by_msg.entry(k).or_default().push(a);
    }
    for (k, v) in by_msg {
        println!("    ABORT x{} [{}] e.g. {}: {} -> {} / {:?}", v.len(), k, v[0].1, v[0].2, v[0].3, v[0].4);
    }
}

fn section8_parser_fuzz(files: &[(String, Vec<u8>)]) {
    println!("\n======== 8. Panic hunt on payload parsers (prefixes, byte mutations, 10k random) ========");
    let inputs = build_inputs(files);
    println!("inputs: {}", inputs.len());
    #[cfg(feature = "binlog")]
    binlog_fuzz_parent(&inputs);
    for (pname, f) in parsers() {
        let mut ok = 0;
        let mut err = 0;
        let mut panics: Vec<(String, String, String)> = Vec::new();
        for (iname, inp) in &inputs {
            match catch(|| f(inp)) {
                Ok(true) => ok += 1,
                Ok(false) => err += 1,
                Err(msg) => panics.push((iname.clone(), hex_short(inp), msg)),
            }
        }
        println!("{pname:38} ok {ok:6} err {err:6} PANICS {}", panics.len());
        let mut seen = std::collections::BTreeMap::new();
        for (iname, h, msg) in &panics {
            let key = msg.split(" @ ").nth(1).unwrap_or(msg).to_string();
            seen.entry(key).or_insert((iname.clone(), h.clone(), msg.clone(), 0usize)).3 += 1;
        }
        for (_, (iname, h, msg, count)) in seen {
            println!("    x{count:<5} {msg}\n           e.g. {iname}: {h}");
        }
    }
}
