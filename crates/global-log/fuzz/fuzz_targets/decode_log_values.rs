//! Arbitrary bytes as a log command and as a state snapshot: decoding must never panic, and whatever decodes must
//! survive a re-encode unchanged (a member that re-snapshots an installed state hands on the same state).
#![no_main]

use libfuzzer_sys::fuzz_target;
use paxsql_global_log::{Command, ReplicatedState};
use paxsql_paxos::Membership;

fuzz_target!(|data: &[u8]| {
    if let Ok(cmd) = Command::decode(&bytes::Bytes::copy_from_slice(data)) {
        assert_eq!(Command::decode(&cmd.encode()), Ok(cmd));
    }
    let members = Membership::new([1, 2, 3]);
    if let Some(state) = ReplicatedState::decode_snapshot(data, members.clone()) {
        assert_eq!(ReplicatedState::decode_snapshot(&state.encode_snapshot(), members), Some(state));
    }
});
