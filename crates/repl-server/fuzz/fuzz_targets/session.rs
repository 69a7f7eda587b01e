//! Feeds arbitrary bytes to the client-packet framing and the session state machine. The input is read as a
//! byte stream from the client (framed with `decode_packet`, as the server does); if its first byte is odd, a
//! valid login is sent first so the fuzzer spends its time in the command phase. Must never panic, and every
//! answer must be well framed.
#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use paxsql_mysql_wire::packet::decode as decode_packet;
use paxsql_repl_server::{Session, SessionConfig, Step};

fn login(salt: &[u8; 20]) -> Vec<u8> {
    let mut p = Vec::new();
    p.extend_from_slice(&0x8038_a205u32.to_le_bytes());
    p.extend_from_slice(&(1u32 << 30).to_le_bytes());
    p.push(8);
    p.extend_from_slice(&[0; 23]);
    p.extend_from_slice(b"repl\0");
    let token = paxsql_mysql_wire::auth::token(b"replpw", salt);
    p.push(token.len() as u8);
    p.extend_from_slice(&token);
    p.extend_from_slice(b"mysql_native_password\0");
    p
}

fuzz_target!(|data: &[u8]| {
    let config = Arc::new(SessionConfig::new("repl", "replpw", 100, "10.11.19-MariaDB-paxsql"));
    let mut session = Session::new(config, 1, [7; 20], "127.0.0.1");
    let mut out = Vec::new();
    session.greeting(&mut out);
    let mut input = data;
    if let Some((&first, rest)) = input.split_first() {
        input = rest;
        if first & 1 == 1 {
            let salt = *session.salt();
            let _ = session.on_packet(1, &login(&salt), 0, &mut out);
        }
    }
    loop {
        let (seq, payload, used) = match decode_packet(input, 1 << 20) {
            Ok(Some(p)) => p,
            Ok(None) | Err(_) => break,
        };
        input = &input[used..];
        match session.on_packet(seq, &payload, 1_796_221_860, &mut out) {
            Step::Kill { connection_id } => session.kill_done(connection_id, connection_id % 2 == 0, &mut out),
            Step::Close | Step::Dump(_) => break,
            Step::Continue => {}
        }
    }
    // Our own output must frame cleanly.
    let mut rest = &out[..];
    while !rest.is_empty() {
        match decode_packet(rest, usize::MAX) {
            Ok(Some((_, _, used))) => rest = &rest[used..],
            other => panic!("server output does not frame: {other:?}"),
        }
    }
});
