//! Arbitrary bytes as a `PeerEnvelope`, then to a `PeerMessage`: must never panic, and whatever decodes must
//! survive a re-encode unchanged.
#![no_main]

use libfuzzer_sys::fuzz_target;
use paxsql_peer_transport::{decode_envelope, seal_envelope};
use prost::Message as _;

fuzz_target!(|data: &[u8]| {
    // Accept any cluster id the input carries, so the fuzzer explores past the cluster check.
    let cluster = match paxsql_peer_transport::pb::PeerEnvelope::decode(data) {
        Ok(env) => env.cluster_id,
        Err(_) => return,
    };
    if let Ok(msg) = decode_envelope(data, &cluster) {
        let again = decode_envelope(&seal_envelope(&cluster, &msg).encode_to_vec(), &cluster)
            .expect("a re-encoded message must decode");
        assert_eq!(again, msg);
    }
});
