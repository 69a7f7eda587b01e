//! Conversions between the domain messages and `paxsql.v1` protobuf messages.
//!
//! Encoding is infallible. Decoding ([`TryFrom`]) never panics: a missing ballot, body or message, or value bytes
//! that `Value::decode` rejects, give a [`TransportError`]. Instances and ballots are carried as they are; the
//! Paxos core judges their meaning.

use paxsql_global_log::PeerMessage;
use paxsql_paxos::{Ballot, Membership, Message, MessageBody, Snapshot, Value};
use prost::Message as _;

use crate::pb;
use crate::pb::paxos_message::Body;
use crate::pb::peer_message::Kind;
use crate::TransportError;

impl From<Ballot> for pb::Ballot {
    fn from(b: Ballot) -> Self {
        pb::Ballot { round: b.round, node: b.node }
    }
}

impl From<pb::Ballot> for Ballot {
    fn from(b: pb::Ballot) -> Self {
        Ballot { round: b.round, node: b.node }
    }
}

fn ballot(b: Option<pb::Ballot>, what: &'static str) -> Result<Ballot, TransportError> {
    b.map(Ballot::from).ok_or(TransportError::MissingField { what })
}

fn value(bytes: &bytes::Bytes, what: &'static str) -> Result<Value, TransportError> {
    Value::decode(bytes).map_err(|source| TransportError::BadValue { what, source })
}

impl From<&MessageBody> for Body {
    fn from(body: &MessageBody) -> Self {
        match body {
            MessageBody::Prepare { ballot, from_instance } => {
                Body::Prepare(pb::Prepare { ballot: Some((*ballot).into()), from_instance: *from_instance })
            }
            MessageBody::Promise { ballot, from_instance, entries, more } => Body::Promise(pb::Promise {
                ballot: Some((*ballot).into()),
                from_instance: *from_instance,
                entries: entries
                    .iter()
                    .map(|(instance, ballot, value)| pb::PromiseEntry {
                        instance: *instance,
                        ballot: Some((*ballot).into()),
                        value: value.encode().into(),
                    })
                    .collect(),
                more: *more,
            }),
            MessageBody::Nack { rejected, promised } => {
                Body::Nack(pb::Nack { rejected: Some((*rejected).into()), promised: Some((*promised).into()) })
            }
            MessageBody::Accept { ballot, instance, value, chosen_up_to } => Body::Accept(pb::Accept {
                ballot: Some((*ballot).into()),
                instance: *instance,
                value: value.encode().into(),
                chosen_up_to: *chosen_up_to,
            }),
            MessageBody::Accepted { ballot, instance } => {
                Body::Accepted(pb::Accepted { ballot: Some((*ballot).into()), instance: *instance })
            }
            MessageBody::Commit { ballot, chosen_up_to } => {
                Body::Commit(pb::Commit { ballot: Some((*ballot).into()), chosen_up_to: *chosen_up_to })
            }
            MessageBody::CatchUpRequest { from_instance } => {
                Body::CatchUpRequest(pb::CatchUpRequest { from_instance: *from_instance })
            }
            MessageBody::CatchUp { entries, chosen_up_to } => Body::CatchUp(pb::CatchUp {
                entries: entries
                    .iter()
                    .map(|(instance, value)| pb::CatchUpEntry { instance: *instance, value: value.encode().into() })
                    .collect(),
                chosen_up_to: *chosen_up_to,
            }),
            MessageBody::CatchUpGone { first_held } => Body::CatchUpGone(pb::CatchUpGone { first_held: *first_held }),
        }
    }
}

impl TryFrom<Body> for MessageBody {
    type Error = TransportError;

    fn try_from(body: Body) -> Result<Self, TransportError> {
        Ok(match body {
            Body::Prepare(m) => {
                MessageBody::Prepare { ballot: ballot(m.ballot, "prepare.ballot")?, from_instance: m.from_instance }
            }
            Body::Promise(m) => MessageBody::Promise {
                ballot: ballot(m.ballot, "promise.ballot")?,
                from_instance: m.from_instance,
                entries: m
                    .entries
                    .into_iter()
                    .map(|e| {
                        Ok((
                            e.instance,
                            ballot(e.ballot, "promise.entries.ballot")?,
                            value(&e.value, "promise.entries.value")?,
                        ))
                    })
                    .collect::<Result<_, TransportError>>()?,
                more: m.more,
            },
            Body::Nack(m) => MessageBody::Nack {
                rejected: ballot(m.rejected, "nack.rejected")?,
                promised: ballot(m.promised, "nack.promised")?,
            },
            Body::Accept(m) => MessageBody::Accept {
                ballot: ballot(m.ballot, "accept.ballot")?,
                instance: m.instance,
                value: value(&m.value, "accept.value")?,
                chosen_up_to: m.chosen_up_to,
            },
            Body::Accepted(m) => {
                MessageBody::Accepted { ballot: ballot(m.ballot, "accepted.ballot")?, instance: m.instance }
            }
            Body::Commit(m) => {
                MessageBody::Commit { ballot: ballot(m.ballot, "commit.ballot")?, chosen_up_to: m.chosen_up_to }
            }
            Body::CatchUpRequest(m) => MessageBody::CatchUpRequest { from_instance: m.from_instance },
            Body::CatchUp(m) => MessageBody::CatchUp {
                entries: m
                    .entries
                    .into_iter()
                    .map(|e| Ok((e.instance, value(&e.value, "catch_up.entries.value")?)))
                    .collect::<Result<_, TransportError>>()?,
                chosen_up_to: m.chosen_up_to,
            },
            Body::CatchUpGone(m) => MessageBody::CatchUpGone { first_held: m.first_held },
        })
    }
}

impl From<&Message> for pb::PaxosMessage {
    fn from(m: &Message) -> Self {
        pb::PaxosMessage { from: m.from, to: m.to, body: Some((&m.body).into()) }
    }
}

impl TryFrom<pb::PaxosMessage> for Message {
    type Error = TransportError;

    fn try_from(m: pb::PaxosMessage) -> Result<Self, TransportError> {
        let body = m.body.ok_or(TransportError::MissingField { what: "paxos.body" })?;
        Ok(Message { from: m.from, to: m.to, body: body.try_into()? })
    }
}

impl From<&PeerMessage> for pb::PeerMessage {
    fn from(m: &PeerMessage) -> Self {
        let kind = match m {
            PeerMessage::Paxos(m) => Kind::Paxos(m.into()),
            PeerMessage::Status { from, to, progress, chosen_up_to } => {
                Kind::Status(pb::Status { from: *from, to: *to, progress: *progress, chosen_up_to: *chosen_up_to })
            }
            PeerMessage::SnapshotRequest { from, to } => {
                Kind::SnapshotRequest(pb::SnapshotRequest { from: *from, to: *to })
            }
            PeerMessage::SnapshotReply { from, to, snapshot } => Kind::SnapshotReply(pb::SnapshotReply {
                from: *from,
                to: *to,
                last_included: snapshot.last_included,
                members: snapshot.membership.members.iter().copied().collect(),
                data: snapshot.data.clone(),
            }),
        };
        pb::PeerMessage { kind: Some(kind) }
    }
}

impl From<PeerMessage> for pb::PeerMessage {
    fn from(m: PeerMessage) -> Self {
        (&m).into()
    }
}

impl TryFrom<pb::PeerMessage> for PeerMessage {
    type Error = TransportError;

    fn try_from(m: pb::PeerMessage) -> Result<Self, TransportError> {
        match m.kind.ok_or(TransportError::MissingField { what: "peer_message.kind" })? {
            Kind::Paxos(m) => Ok(PeerMessage::Paxos(m.try_into()?)),
            Kind::Status(s) => {
                Ok(PeerMessage::Status { from: s.from, to: s.to, progress: s.progress, chosen_up_to: s.chosen_up_to })
            }
            Kind::SnapshotRequest(r) => Ok(PeerMessage::SnapshotRequest { from: r.from, to: r.to }),
            Kind::SnapshotReply(r) => {
                let snapshot =
                    Snapshot { last_included: r.last_included, membership: Membership::new(r.members), data: r.data };
                Ok(PeerMessage::SnapshotReply { from: r.from, to: r.to, snapshot })
            }
        }
    }
}

/// Wraps `msg` for the wire.
pub fn seal_envelope(cluster_id: &str, msg: &PeerMessage) -> pb::PeerEnvelope {
    pb::PeerEnvelope { cluster_id: cluster_id.to_string(), from: msg.from(), message: Some(msg.into()) }
}

/// Unwraps an envelope received in `expected_cluster`: the cluster id must match, the message must decode, and the
/// envelope's sender must be the message's sender.
pub fn open_envelope(env: pb::PeerEnvelope, expected_cluster: &str) -> Result<PeerMessage, TransportError> {
    if env.cluster_id != expected_cluster {
        return Err(TransportError::ClusterMismatch {
            expected: expected_cluster.to_string(),
            got: env.cluster_id.chars().take(64).collect(),
        });
    }
    let msg: PeerMessage = env.message.ok_or(TransportError::MissingField { what: "envelope.message" })?.try_into()?;
    if msg.from() != env.from {
        return Err(TransportError::SenderMismatch { envelope: env.from, message: msg.from() });
    }
    Ok(msg)
}

/// Decodes the bytes of one `PeerEnvelope` and opens it (what the server does per stream message; also the fuzz
/// target's entry point).
pub fn decode_envelope(bytes: &[u8], expected_cluster: &str) -> Result<PeerMessage, TransportError> {
    open_envelope(pb::PeerEnvelope::decode(bytes)?, expected_cluster)
}

#[cfg(test)]
mod tests {
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    use super::*;

    fn any_u64(rng: &mut ChaCha8Rng) -> u64 {
        // Edge values often: varint boundaries are where encoders slip.
        match rng.gen_range(0..6) {
            0 => 0,
            1 => u64::MAX,
            2 => rng.gen_range(0..128),
            3 => 1 << rng.gen_range(0..64),
            _ => rng.gen(),
        }
    }

    fn any_ballot(rng: &mut ChaCha8Rng) -> Ballot {
        match rng.gen_range(0..5) {
            0 => Ballot::ZERO,
            1 => Ballot::CHOSEN,
            _ => Ballot::new(any_u64(rng), any_u64(rng)),
        }
    }

    fn any_value(rng: &mut ChaCha8Rng) -> Value {
        match rng.gen_range(0..3) {
            0 => Value::Noop,
            1 => Value::Batch(
                (0..rng.gen_range(0..5)).map(|_| (0..rng.gen_range(0..200)).map(|_| rng.gen()).collect()).collect(),
            ),
            _ => Value::Reconfigure(Membership::new((0..rng.gen_range(0..7)).map(|_| any_u64(rng)))),
        }
    }

    /// One message of kind `kind` (0..=8 Paxos bodies, 9 Status, 10 SnapshotRequest, 11 SnapshotReply), random fields.
    fn any_message(rng: &mut ChaCha8Rng, kind: u32) -> PeerMessage {
        let (from, to) = (any_u64(rng), any_u64(rng));
        let body = match kind {
            0 => MessageBody::Prepare { ballot: any_ballot(rng), from_instance: any_u64(rng) },
            1 => MessageBody::Promise {
                ballot: any_ballot(rng),
                from_instance: any_u64(rng),
                entries: (0..rng.gen_range(0..6)).map(|_| (any_u64(rng), any_ballot(rng), any_value(rng))).collect(),
                more: rng.gen(),
            },
            2 => MessageBody::Nack { rejected: any_ballot(rng), promised: any_ballot(rng) },
            3 => MessageBody::Accept {
                ballot: any_ballot(rng),
                instance: any_u64(rng),
                value: any_value(rng),
                chosen_up_to: any_u64(rng),
            },
            4 => MessageBody::Accepted { ballot: any_ballot(rng), instance: any_u64(rng) },
            5 => MessageBody::Commit { ballot: any_ballot(rng), chosen_up_to: any_u64(rng) },
            6 => MessageBody::CatchUpRequest { from_instance: any_u64(rng) },
            7 => MessageBody::CatchUp {
                entries: (0..rng.gen_range(0..6)).map(|_| (any_u64(rng), any_value(rng))).collect(),
                chosen_up_to: any_u64(rng),
            },
            8 => MessageBody::CatchUpGone { first_held: any_u64(rng) },
            9 => return PeerMessage::Status { from, to, progress: any_u64(rng), chosen_up_to: any_u64(rng) },
            10 => return PeerMessage::SnapshotRequest { from, to },
            _ => {
                let snapshot = Snapshot {
                    last_included: any_u64(rng),
                    membership: Membership::new((0..rng.gen_range(0..7)).map(|_| any_u64(rng))),
                    data: (0..rng.gen_range(0..300)).map(|_| rng.gen()).collect(),
                };
                return PeerMessage::SnapshotReply { from, to, snapshot };
            }
        };
        PeerMessage::Paxos(Message { from, to, body })
    }

    #[test]
    fn every_variant_round_trips_through_bytes() {
        let seed = 0x9e3779b97f4a7c15;
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut seen = std::collections::BTreeSet::new();
        for i in 0..5_000 {
            let msg = any_message(&mut rng, i % 12);
            seen.insert(match &msg {
                PeerMessage::Paxos(m) => m.body.kind(),
                PeerMessage::Status { .. } => "status",
                PeerMessage::SnapshotRequest { .. } => "snapshot_request",
                PeerMessage::SnapshotReply { .. } => "snapshot_reply",
            });
            let bytes = seal_envelope("c1", &msg).encode_to_vec();
            let back = decode_envelope(&bytes, "c1").unwrap_or_else(|e| panic!("seed {seed:#x} case {i}: {e}"));
            assert_eq!(back, msg, "seed {seed:#x} case {i}");
        }
        assert_eq!(seen.len(), 12, "{seen:?}");
    }

    #[test]
    fn missing_fields_are_typed_errors() {
        let no_ballot = pb::PeerMessage {
            kind: Some(Kind::Paxos(pb::PaxosMessage {
                from: 1,
                to: 2,
                body: Some(Body::Nack(pb::Nack { rejected: Some(pb::Ballot { round: 1, node: 1 }), promised: None })),
            })),
        };
        assert!(matches!(
            PeerMessage::try_from(no_ballot),
            Err(TransportError::MissingField { what: "nack.promised" })
        ));
        let no_body = pb::PaxosMessage { from: 1, to: 2, body: None };
        assert!(matches!(Message::try_from(no_body), Err(TransportError::MissingField { what: "paxos.body" })));
        assert!(matches!(
            PeerMessage::try_from(pb::PeerMessage { kind: None }),
            Err(TransportError::MissingField { what: "peer_message.kind" })
        ));
        let empty_value = pb::PaxosMessage {
            from: 1,
            to: 2,
            body: Some(Body::Accept(pb::Accept {
                ballot: Some(pb::Ballot::default()),
                instance: 1,
                value: bytes::Bytes::new(),
                chosen_up_to: 0,
            })),
        };
        assert!(matches!(Message::try_from(empty_value), Err(TransportError::BadValue { what: "accept.value", .. })));
        let bad_entry =
            pb::CatchUp { entries: vec![pb::CatchUpEntry { instance: 1, value: vec![9].into() }], chosen_up_to: 1 };
        assert!(matches!(
            MessageBody::try_from(Body::CatchUp(bad_entry)),
            Err(TransportError::BadValue { what: "catch_up.entries.value", .. })
        ));
    }

    #[test]
    fn envelope_checks() {
        let msg = PeerMessage::Status { from: 3, to: 1, progress: 7, chosen_up_to: 9 };
        let env = seal_envelope("c1", &msg);
        assert!(matches!(open_envelope(env.clone(), "c2"), Err(TransportError::ClusterMismatch { .. })));
        let mut lying = env.clone();
        lying.from = 4;
        assert!(matches!(open_envelope(lying, "c1"), Err(TransportError::SenderMismatch { envelope: 4, message: 3 })));
        let mut empty = env;
        empty.message = None;
        assert!(matches!(open_envelope(empty, "c1"), Err(TransportError::MissingField { what: "envelope.message" })));
    }

    #[test]
    fn garbage_bytes_give_errors_not_panics() {
        let mut rng = ChaCha8Rng::seed_from_u64(42);
        let mut errors = 0;
        for _ in 0..20_000 {
            let len = rng.gen_range(0..64);
            let bytes: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
            if decode_envelope(&bytes, "c1").is_err() {
                errors += 1;
            }
        }
        // Almost all random inputs are malformed; the point is that none panicked.
        assert!(errors > 19_000, "{errors}");
    }

    #[test]
    fn every_truncation_and_bit_flip_of_valid_envelopes_is_handled() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        for kind in 0..10 {
            let msg = any_message(&mut rng, kind);
            let bytes = seal_envelope("c1", &msg).encode_to_vec();
            for cut in 0..bytes.len() {
                let _ = decode_envelope(&bytes[..cut], "c1");
            }
            for bit in 0..bytes.len() * 8 {
                let mut b = bytes.clone();
                b[bit / 8] ^= 1 << (bit % 8);
                if let Ok(back) = decode_envelope(&b, "c1") {
                    // Whatever decodes must re-encode to something that decodes to the same message.
                    let again = decode_envelope(&seal_envelope("c1", &back).encode_to_vec(), "c1").unwrap();
                    assert_eq!(again, back);
                }
            }
        }
    }

    /// Regenerates the fuzz seed corpus (two of each kind):
    /// `cargo test -p paxsql-peer-transport write_fuzz_seeds -- --ignored`.
    #[test]
    #[ignore]
    fn write_fuzz_seeds() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/decode_envelope");
        std::fs::create_dir_all(&dir).unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        for i in 0..20 {
            let msg = any_message(&mut rng, i % 10);
            std::fs::write(dir.join(format!("seed-{i:02}")), seal_envelope("c1", &msg).encode_to_vec()).unwrap();
        }
    }
}
