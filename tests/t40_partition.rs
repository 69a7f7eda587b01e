//! Partitions, inside a network namespace the test creates (each node on its own loopback address, links cut
//! with iptables there): an isolated master can no longer commit, the majority elects a new master and keeps
//! writing, and after healing the old master rejoins aligned with no divergent transaction.

mod common;

use std::time::Duration;

use common::Cluster;

#[test]
fn isolated_master_stops_committing_and_rejoins_aligned() {
    let c = Cluster::up_in_netns(3, 26400);
    let all = [1, 2, 3];
    let (m1, term1) = c.master_term().expect("a master");
    c.sql(m1, "CREATE TABLE t (id BIGINT PRIMARY KEY, v VARCHAR(64))", Duration::from_secs(10)).expect("create");
    let mut acked: Vec<u64> = (0..20)
        .filter(|i| c.sql(m1, &format!("INSERT INTO t VALUES ({i}, 'a')"), Duration::from_secs(5)).is_ok())
        .collect();
    assert_eq!(acked.len(), 20);

    eprintln!("phase: isolate master {m1}; its writes are never acknowledged");
    c.isolate(m1, &all);
    let stale = c.sql(m1, "INSERT INTO t VALUES (888888, 'isolated')", Duration::from_secs(4));
    assert!(stale.is_err(), "an isolated master acknowledged a write: {stale:?}");

    // The status figure follows the peer links: the isolated node reaches only itself, the others each other.
    let reach = |id: u64, want: u64| {
        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        while c.members_reachable(id) != Some(want) {
            assert!(
                std::time::Instant::now() < deadline,
                "node {id}: members_reachable {:?}, want {want}",
                c.members_reachable(id)
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    reach(m1, 1);
    reach(all.into_iter().find(|n| *n != m1).expect("another node"), 2);

    eprintln!("phase: the majority elects a new master and keeps writing");
    let (m2, _) = c.wait_new_term(term1, Duration::from_secs(30));
    assert_ne!(m2, m1, "the isolated node cannot win a new term");
    acked.extend(
        (100..120).filter(|i| c.sql(m2, &format!("INSERT INTO t VALUES ({i}, 'b')"), Duration::from_secs(5)).is_ok()),
    );
    assert_eq!(acked.len(), 40, "the majority's master acknowledges every write");
    let m1_write = c.sql(m1, "INSERT INTO t VALUES (999999, 'isolated2')", Duration::from_secs(3));
    assert!(m1_write.is_err(), "the old master accepted a write during the partition: {m1_write:?}");

    eprintln!("phase: heal; the old master rejoins as a replica with exactly the majority's data");
    c.heal();
    c.wait_all(&all, "SELECT COUNT(*) FROM t", "40", Duration::from_secs(90));
    reach(m1, 3);
    c.wait_all(&all, "SELECT COUNT(*) FROM t WHERE id IN (888888, 999999)", "0", Duration::from_secs(10));
    let first = c.sql(m2, "CHECKSUM TABLE t", Duration::from_secs(10)).expect("checksum");
    for n in all {
        assert_eq!(
            c.sql(n, "CHECKSUM TABLE t", Duration::from_secs(10)).expect("checksum"),
            first,
            "node {n} diverged"
        );
    }
    let read_only = c.sql(m1, "SELECT @@read_only", Duration::from_secs(5)).expect("read_only");
    assert_eq!(read_only, "1", "the old master must be a read-only replica now");
}
