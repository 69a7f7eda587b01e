//! Everything the replication client parses from the master: packet framing (with multi-chunk reassembly),
//! greeting, login replies, OK / ERR / EOF, text rows, semi-sync stream framing and the binlog events inside.
//! Any panic is a bug.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    paxsql_repl_client::fuzzing::server_bytes(data);
});
