//! Arbitrary text as a GTID and as a GTID position: parsing must never panic, and a parsed value must print to
//! text that parses back to the same value.
#![no_main]

use libfuzzer_sys::fuzz_target;
use paxsql_binlog::{Gtid, GtidSet};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(set) = text.parse::<GtidSet>() {
        let printed = set.to_string();
        assert_eq!(printed.parse::<GtidSet>().as_ref(), Ok(&set), "{text:?} printed as {printed:?}");
        assert!(set.includes(&set));
    }
    if let Ok(gtid) = text.parse::<Gtid>() {
        assert_eq!(gtid.to_string().parse::<Gtid>(), Ok(gtid));
    }
});
