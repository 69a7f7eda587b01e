//! Scenario tests of the Paxos core: feed inputs, assert the outputs exactly.

use std::collections::BTreeMap;

use paxsql_paxos::{Ballot, Config, Membership, Message, MessageBody, NodeId, PaxosNode, Role, Value};

fn group(n: u64) -> BTreeMap<NodeId, PaxosNode> {
    group_with(n, |_| {})
}

/// A group of `n` whose members' configuration `tune` adjusts.
fn group_with(n: u64, tune: impl Fn(&mut Config)) -> BTreeMap<NodeId, PaxosNode> {
    let m = Membership::new(1..=n);
    (1..=n)
        .map(|id| {
            let mut cfg = Config::new(id);
            tune(&mut cfg);
            (id, PaxosNode::new(cfg, m.clone()))
        })
        .collect()
}

/// Delivers every message (after-persist ones too: storage is instant here) until the group is quiet, except
/// messages `drop` says to lose. Returns what each node reported chosen.
fn settle(nodes: &mut BTreeMap<NodeId, PaxosNode>, drop: impl Fn(&Message) -> bool) -> BTreeMap<NodeId, Vec<u64>> {
    let mut chosen: BTreeMap<NodeId, Vec<u64>> = BTreeMap::new();
    for _ in 0..100 {
        let mut inflight = Vec::new();
        for (id, n) in nodes.iter_mut() {
            let r = n.take_ready();
            chosen.entry(*id).or_default().extend(r.chosen.iter().map(|(i, _)| *i));
            inflight.extend(r.messages);
            inflight.extend(r.after_persist);
        }
        if inflight.is_empty() {
            return chosen;
        }
        for m in inflight {
            if !drop(&m) {
                if let Some(n) = nodes.get_mut(&m.to) {
                    n.step(m);
                }
            }
        }
    }
    panic!("group did not settle");
}

#[test]
fn campaign_persists_the_ballot_before_any_prepare_leaves() {
    let mut n = PaxosNode::new(Config::new(1), Membership::new([1, 2, 3]));
    n.campaign();
    let r = n.take_ready();
    let ballot = Ballot::new(1, 1);
    assert_eq!(r.batch.promised, Some(ballot));
    assert!(r.messages.is_empty(), "prepares must wait for the promise to be durable");
    let expected: Vec<Message> = [1, 2, 3]
        .into_iter()
        .map(|to| Message { from: 1, to, body: MessageBody::Prepare { ballot, from_instance: 1 } })
        .collect();
    assert_eq!(r.after_persist, expected);
    assert_eq!(n.role(), Role::Candidate);
}

#[test]
fn leader_chooses_a_value_in_one_round_trip_and_followers_learn_it() {
    let mut g = group(3);
    g.get_mut(&1).unwrap().campaign();
    settle(&mut g, |_| false);
    assert_eq!(g[&1].role(), Role::Leader);

    g.get_mut(&1).unwrap().propose(b"x".to_vec().into()).unwrap();
    let r = g.get_mut(&1).unwrap().take_ready();
    let accepts: Vec<_> = r.messages.iter().filter(|m| matches!(m.body, MessageBody::Accept { .. })).collect();
    assert_eq!(accepts.len(), 3, "one accept per member, the leader's own included");
    for m in &r.messages {
        g.get_mut(&m.to).unwrap().step(m.clone());
    }
    let chosen = settle(&mut g, |_| false);
    assert_eq!(chosen[&1], vec![1]);
    // Followers learn it from the leader's next commit point (heartbeat).
    g.get_mut(&1).unwrap().tick(1_000);
    let chosen = settle(&mut g, |_| false);
    assert_eq!((chosen[&2].clone(), chosen[&3].clone()), (vec![1], vec![1]));
    assert_eq!(g[&3].chosen_value(1), Some(&Value::Batch(vec![b"x".to_vec().into()])));
}

#[test]
fn new_leader_keeps_a_value_only_one_acceptor_accepted() {
    let mut g = group(3);
    g.get_mut(&1).unwrap().campaign();
    settle(&mut g, |_| false);
    // Node 1 proposes; only node 2 ever accepts it (and node 1's own acceptor).
    g.get_mut(&1).unwrap().propose(b"kept".to_vec().into()).unwrap();
    settle(&mut g, |m| m.to == 3 || matches!(m.body, MessageBody::Accepted { .. }));
    // Node 1 falls silent; once the acceptors stop sticking to it, node 3 takes over with node 2: phase 1 must find
    // the accepted value and choose it again.
    for id in [2, 3] {
        g.get_mut(&id).unwrap().tick(10_000);
    }
    g.get_mut(&3).unwrap().campaign();
    settle(&mut g, |m| m.from == 1 || m.to == 1);
    assert_eq!(g[&3].role(), Role::Leader);
    assert_eq!(g[&3].chosen_value(1), Some(&Value::Batch(vec![b"kept".to_vec().into()])));
}

#[test]
fn one_nack_does_not_unseat_a_leader_but_losing_the_majority_does() {
    let mut g = group(3);
    g.get_mut(&1).unwrap().campaign();
    settle(&mut g, |_| false);
    let higher = Ballot::new(9, 3);
    let nack =
        |from| Message { from, to: 1, body: MessageBody::Nack { rejected: Ballot::new(1, 1), promised: higher } };
    g.get_mut(&1).unwrap().step(nack(3));
    assert_eq!(g[&1].role(), Role::Leader, "nodes 1 and 2 still form a majority");
    g.get_mut(&1).unwrap().step(nack(2));
    assert_eq!(g[&1].role(), Role::Follower);
    assert_eq!(g[&1].last_step_down_reason(), "no majority left (nacks)");
}

#[test]
fn a_leader_refused_by_one_acceptor_while_the_other_is_silent_campaigns_above_the_refusal() {
    // Node 1 leads with ballot (1, 1); node 3 has promised a higher ballot of its own (a campaign that lost the
    // race) and node 2 dies: node 1's proposal can be chosen only by node 3, which refuses ballot (1, 1) for good.
    let mut g = group(3);
    g.get_mut(&1).unwrap().campaign();
    settle(&mut g, |_| false);
    let higher = Ballot::new(7, 3);
    g.get_mut(&3).unwrap().step(Message {
        from: 3,
        to: 3,
        body: MessageBody::Prepare { ballot: higher, from_instance: 1 },
    });
    let dead = |m: &Message| m.to == 2 || m.from == 2;
    g.get_mut(&1).unwrap().propose(b"renewal".to_vec().into()).unwrap();
    settle(&mut g, dead);
    assert_eq!(g[&1].role(), Role::Leader, "one nack alone does not unseat the leader");
    g.get_mut(&1).unwrap().tick(200);
    settle(&mut g, dead);
    assert_eq!(g[&1].role(), Role::Leader, "one retransmit interval is not yet a stall");
    // Stalled behind a refusing and a silent acceptor: it campaigns again above the refused ballot, keeping what
    // it was asked to propose; node 3 promises, and the values are chosen.
    g.get_mut(&1).unwrap().propose(b"queued".to_vec().into()).unwrap();
    g.get_mut(&1).unwrap().tick(400);
    assert_eq!(g[&1].role(), Role::Candidate);
    assert!(g[&1].last_step_down_reason().starts_with("refused by an acceptor"), "{}", g[&1].last_step_down_reason());
    let chosen = settle(&mut g, dead);
    assert_eq!(g[&1].role(), Role::Leader);
    assert!(g[&1].ballot().is_some_and(|b| b > higher), "{:?}", g[&1].ballot());
    assert_eq!(chosen[&1], vec![1, 2]);
    assert_eq!(g[&1].chosen_value(1), Some(&Value::Batch(vec![b"renewal".to_vec().into()])));
    assert_eq!(g[&1].chosen_value(2), Some(&Value::Batch(vec![b"queued".to_vec().into()])));
}

#[test]
fn a_candidate_refused_by_one_acceptor_while_the_other_is_silent_campaigns_above_the_refusal() {
    // Node 3 has promised a higher ballot of its own and node 2 is gone: node 1's phase 1 can complete only with
    // node 3, which refuses ballot (1, 1) for good.
    let mut g = group(3);
    let higher = Ballot::new(7, 3);
    g.get_mut(&3).unwrap().step(Message {
        from: 3,
        to: 3,
        body: MessageBody::Prepare { ballot: higher, from_instance: 1 },
    });
    let dead = |m: &Message| m.to == 2 || m.from == 2;
    g.get_mut(&1).unwrap().campaign();
    g.get_mut(&1).unwrap().propose(b"queued".to_vec().into()).unwrap();
    settle(&mut g, dead);
    assert_eq!(g[&1].role(), Role::Candidate, "one nack alone does not end a campaign");
    g.get_mut(&1).unwrap().tick(200);
    settle(&mut g, dead);
    assert_eq!(g[&1].role(), Role::Candidate, "one retransmit interval is not yet a stall");
    g.get_mut(&1).unwrap().tick(400);
    let chosen = settle(&mut g, dead);
    assert_eq!(g[&1].role(), Role::Leader);
    assert!(g[&1].ballot().is_some_and(|b| b > higher), "{:?}", g[&1].ballot());
    assert_eq!(chosen[&1], vec![1]);
    assert_eq!(g[&1].chosen_value(1), Some(&Value::Batch(vec![b"queued".to_vec().into()])));
}

#[test]
fn a_rival_that_insists_gets_through_a_promise_to_a_campaign_that_failed_but_not_past_a_leader() {
    // Four members, node 4 gone: a majority needs all three others. Node 2's campaign is promised by node 1 but
    // never hears node 3, and is given up; node 1 hears nothing more from it.
    let mut g = group(4);
    let gone = |m: &Message| m.to == 4 || m.from == 4;
    g.get_mut(&2).unwrap().campaign();
    settle(&mut g, |m| gone(m) || (m.from == 3 && m.to == 2));
    assert_eq!(g[&2].role(), Role::Candidate);
    g.get_mut(&2).unwrap().step_down();
    // Node 3's first prepare finds node 1 still holding to node 2's campaign.
    g.get_mut(&3).unwrap().campaign();
    settle(&mut g, gone);
    assert_eq!(g[&3].role(), Role::Candidate, "a rival's first prepare does not unseat a campaign");
    // Node 3 insists for a retransmit interval: node 1 lets it through.
    for n in g.values_mut() {
        n.tick(200);
    }
    settle(&mut g, gone);
    assert_eq!(g[&3].role(), Role::Leader);
    // An established leader is not unseated the same way: node 2's insisting prepares stay ignored by those
    // that hear node 3 lead.
    g.get_mut(&3).unwrap().propose(b"lead".to_vec().into()).unwrap();
    settle(&mut g, gone);
    g.get_mut(&2).unwrap().campaign();
    for t in [250, 450, 650] {
        for n in g.values_mut() {
            n.tick(t);
        }
        settle(&mut g, |m| gone(m) || matches!(m.body, MessageBody::Commit { .. }));
    }
    assert_eq!(g[&3].role(), Role::Leader);
    assert_ne!(g[&2].role(), Role::Leader);
}

#[test]
fn a_member_behind_a_compaction_is_told_to_rebuild() {
    let mut g = group(3);
    g.get_mut(&1).unwrap().campaign();
    settle(&mut g, |_| false);
    for i in 0..5u8 {
        g.get_mut(&1).unwrap().propose(vec![i].into()).unwrap();
        settle(&mut g, |m| m.to == 3);
    }
    let leader = g.get_mut(&1).unwrap();
    assert_eq!(leader.last_chosen(), 5);
    leader.compact(paxsql_paxos::Snapshot { last_included: 4, membership: Membership::new([1, 2, 3]), data: vec![] });
    let r = leader.take_ready();
    assert_eq!(r.batch.snapshot.as_ref().map(|s| s.last_included), Some(4));
    // Node 3 saw nothing; the leader's commit point sends it asking from instance 1, which is gone.
    let n3 = g.get_mut(&3).unwrap();
    n3.step(Message { from: 1, to: 3, body: MessageBody::Commit { ballot: Ballot::new(1, 1), chosen_up_to: 5 } });
    let ask = n3.take_ready().messages;
    assert_eq!(ask, vec![Message { from: 3, to: 1, body: MessageBody::CatchUpRequest { from_instance: 1 } }]);
    g.get_mut(&1).unwrap().step(ask[0].clone());
    let reply = g.get_mut(&1).unwrap().take_ready().messages;
    assert_eq!(reply, vec![Message { from: 1, to: 3, body: MessageBody::CatchUpGone { first_held: 5 } }]);
    let n3 = g.get_mut(&3).unwrap();
    n3.step(reply[0].clone());
    assert_eq!(n3.take_ready().rebuild_required, Some(5));
}

/// A member holds only the newest `chosen_cache_bytes` of chosen values in memory; a laggard below them is
/// neither promised nor answered from memory, but caught up from storage (a read the caller serves).
#[test]
fn a_member_behind_the_memory_window_is_caught_up_from_storage_and_not_promised() {
    let cache = 3 * Value::Batch(vec![vec![0u8; 100].into()]).size_bytes();
    let mut g = group_with(3, |cfg| cfg.chosen_cache_bytes = cache);
    g.get_mut(&1).unwrap().campaign();
    settle(&mut g, |_| false);
    for i in 0..10u8 {
        g.get_mut(&1).unwrap().propose(vec![i; 100].into()).unwrap();
        settle(&mut g, |m| m.to == 3);
    }
    let leader = g.get_mut(&1).unwrap();
    assert_eq!((leader.last_chosen(), leader.first_held(), leader.first_in_memory()), (10, 1, 8));
    assert_eq!(leader.chosen_value(7), None);
    assert!(leader.chosen_value(8).is_some());

    // Node 3 asks from instance 1: in storage, not in memory.
    leader.step(Message { from: 3, to: 1, body: MessageBody::CatchUpRequest { from_instance: 1 } });
    let r = leader.take_ready();
    assert!(r.messages.is_empty(), "nothing answered from memory: {:?}", r.messages);
    let read = paxsql_paxos::CatchUpRead { to: 3, from_instance: 1, chosen_up_to: 10 };
    assert_eq!(r.catch_up_reads, vec![read]);
    // From inside the window it is answered as before.
    leader.step(Message { from: 3, to: 1, body: MessageBody::CatchUpRequest { from_instance: 9 } });
    let r = leader.take_ready();
    assert!(r.catch_up_reads.is_empty());
    assert!(
        matches!(&r.messages[..], [Message { body: MessageBody::CatchUp { entries, .. }, .. }] if entries.len() == 2)
    );

    // Node 3 campaigning from instance 1 gets no promise from node 2 (only a catch-up read), so it cannot lead
    // with a log it does not have.
    let n2 = g.get_mut(&2).unwrap();
    n2.tick(100_000);
    n2.step(Message { from: 3, to: 2, body: MessageBody::Prepare { ballot: Ballot::new(50, 3), from_instance: 1 } });
    let r = n2.take_ready();
    assert!(r.after_persist.is_empty() && r.messages.is_empty(), "no promise: {r:?}");
    assert_eq!(r.catch_up_reads.len(), 1);
    assert!(n2.promised() < Ballot::new(50, 3));
}

/// A chosen value above `chosen_cache_value_limit` (a part of a large transaction) is not kept in memory: it
/// empties the cache, the small values after it are cached again, and a member asking from before them is caught
/// up from storage — so a large transaction passing through never fills the cache with its parts.
#[test]
fn a_value_above_the_cache_limit_empties_the_cache_and_is_read_from_storage() {
    let mut g = group_with(3, |cfg| cfg.chosen_cache_value_limit = 1000);
    g.get_mut(&1).unwrap().campaign();
    settle(&mut g, |_| false);
    for size in [100usize, 100, 5000, 100, 100] {
        g.get_mut(&1).unwrap().propose(vec![7u8; size].into()).unwrap();
        settle(&mut g, |_| false);
    }
    let last = g[&1].last_chosen();
    // The large value was chosen at last - 2: the leader holds only the two small ones after it.
    assert_eq!(g[&1].first_in_memory(), last - 1);
    assert!(g[&1].chosen_value(last).is_some());
    for id in 1..=3 {
        assert!(g[&id].last_chosen() >= last - 2, "node {id} learned the large value");
        assert_eq!(g[&id].chosen_value(last - 2), None, "node {id} keeps the large value");
    }
    let leader = g.get_mut(&1).unwrap();
    leader.step(Message { from: 3, to: 1, body: MessageBody::CatchUpRequest { from_instance: last - 2 } });
    let r = leader.take_ready();
    assert!(r.messages.is_empty(), "nothing answered from memory: {:?}", r.messages);
    assert_eq!(
        r.catch_up_reads,
        vec![paxsql_paxos::CatchUpRead { to: 3, from_instance: last - 2, chosen_up_to: last }]
    );
}

/// Regression (simulator seeds 22426, 58370, ...): a leader that learns, from a catch-up, values chosen past its
/// next slot must not propose there: its commit point would tell followers that its own proposal was chosen.
#[test]
fn a_leader_overtaken_by_the_log_steps_down_instead_of_proposing_into_it() {
    let mut g = group(3);
    g.get_mut(&1).unwrap().campaign();
    settle(&mut g, |_| false);
    let leader = g.get_mut(&1).unwrap();
    assert_eq!(leader.role(), Role::Leader);
    let overtaken =
        MessageBody::CatchUp { entries: vec![(1, Value::Batch(vec![b"theirs".to_vec().into()]))], chosen_up_to: 1 };
    leader.step(Message { from: 3, to: 1, body: overtaken });
    leader.propose(b"ours".to_vec().into()).unwrap();
    let r = leader.take_ready();
    assert!(
        !r.messages.iter().any(|m| matches!(m.body, MessageBody::Accept { instance: 1, .. })),
        "proposed into a decided instance: {:?}",
        r.messages
    );
    assert_eq!(leader.role(), Role::Follower);
    assert_eq!(leader.last_step_down_reason(), "the log moved past this leader");
}

/// Chooses `x` at instance 1 on all three members.
fn one_value_chosen() -> BTreeMap<NodeId, PaxosNode> {
    let mut g = group(3);
    g.get_mut(&1).unwrap().campaign();
    settle(&mut g, |_| false);
    g.get_mut(&1).unwrap().propose(b"x".to_vec().into()).unwrap();
    settle(&mut g, |_| false);
    g.get_mut(&1).unwrap().tick(1_000);
    settle(&mut g, |_| false);
    assert_eq!(g[&3].chosen_value(1), Some(&Value::Batch(vec![b"x".to_vec().into()])));
    g
}

/// Node 3 is told by node 2 that `value` was chosen at instance 1.
fn catch_up_at_1(g: &mut BTreeMap<NodeId, PaxosNode>, value: &[u8]) {
    let entries = vec![(1, Value::Batch(vec![value.to_vec().into()]))];
    g.get_mut(&3).unwrap().step(Message { from: 2, to: 3, body: MessageBody::CatchUp { entries, chosen_up_to: 1 } });
}

#[test]
fn learning_the_chosen_value_again_changes_nothing() {
    let mut g = one_value_chosen();
    catch_up_at_1(&mut g, b"x");
    assert!(g.get_mut(&3).unwrap().take_ready().chosen.is_empty());
}

#[test]
#[should_panic(expected = "instance 1 learned with a value other than the one chosen there")]
fn learning_another_value_for_a_chosen_instance_stops_the_node() {
    let mut g = one_value_chosen();
    catch_up_at_1(&mut g, b"y");
}
