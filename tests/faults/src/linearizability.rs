//! A linearizability checker for one read/write/compare-and-set register, in the style of Wing & Gong with Lowe's
//! memoisation ("Testing for linearizability", 2017): a depth-first search over configurations (which operations
//! are already linearized, the register's value), where the next operation to linearize must have been invoked
//! before the earliest response still outstanding. Configurations already seen are not explored again.
//!
//! Operations whose outcome is unknown (a timeout, a lost connection) may have taken effect at any moment after
//! their invocation, or never: the search may linearize them (their completion is taken as infinitely late) but
//! does not have to. Operations that definitely failed must be left out of the history by the caller.
//!
//! Registers are independent of each other (P-compositionality): check one key at a time.

use std::collections::HashMap;

/// What a client asked the register to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegisterOp {
    Read,
    Write(i64),
    /// Set to `new` only if the value is `expected`.
    Cas {
        expected: i64,
        new: i64,
    },
}

/// How an operation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegisterOutcome {
    /// A read that returned this value.
    ReadOk(i64),
    WriteOk,
    /// A compare-and-set that answered whether it swapped.
    CasOk(bool),
    /// No answer: may or may not have taken effect.
    Unknown,
}

/// One operation of the history, times from one monotonic clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegisterEntry {
    pub op: RegisterOp,
    pub outcome: RegisterOutcome,
    pub invoke_ns: u64,
    /// Ignored for `Unknown` outcomes (treated as never completing).
    pub complete_ns: u64,
}

/// The checker's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Linearizable,
    /// No order exists. `stuck_at` is the acknowledged operation (index into the history) that could not be placed
    /// in the deepest configuration the search reached, with how many operations were linearized there.
    NotLinearizable {
        stuck_at: usize,
        linearized: usize,
    },
    /// The search gave up after exploring `configurations` configurations.
    Undecided {
        configurations: usize,
    },
}

impl RegisterEntry {
    fn completes(&self) -> bool {
        self.outcome != RegisterOutcome::Unknown
    }

    /// The register's value after this operation takes effect at `value`, if it may take effect there.
    fn step(&self, value: i64) -> Option<i64> {
        match (self.op, self.outcome) {
            (RegisterOp::Read, RegisterOutcome::ReadOk(v)) => (v == value).then_some(value),
            // A read whose answer nobody saw constrains nothing.
            (RegisterOp::Read, RegisterOutcome::Unknown) => Some(value),
            (RegisterOp::Write(v), RegisterOutcome::WriteOk | RegisterOutcome::Unknown) => Some(v),
            (RegisterOp::Cas { expected, new }, RegisterOutcome::CasOk(true)) => (value == expected).then_some(new),
            (RegisterOp::Cas { expected, .. }, RegisterOutcome::CasOk(false)) => (value != expected).then_some(value),
            // Taking effect at all means it swapped; not swapping is the same as not taking effect.
            (RegisterOp::Cas { expected, new }, RegisterOutcome::Unknown) => (value == expected).then_some(new),
            _ => None,
        }
    }
}

/// Checks one register's history starting from `initial`, exploring at most `max_configurations`.
pub fn check_register(history: &[RegisterEntry], initial: i64, max_configurations: usize) -> Verdict {
    let n = history.len();
    let words = n.div_ceil(64).max(1);
    let is_set = |bits: &[u64], i: usize| bits[i / 64] & (1 << (i % 64)) != 0;
    let known_mask: Vec<u64> = {
        let mut m = vec![0u64; words];
        for (i, e) in history.iter().enumerate() {
            if e.completes() {
                m[i / 64] |= 1 << (i % 64);
            }
        }
        m
    };
    // Memo keyed by (acknowledged operations linearized, value). A configuration that used a superset of the
    // unknown operations of one already seen is dominated: every unknown operation may also be left out, so it
    // cannot reach anything the other cannot.
    let mut seen: HashMap<(Vec<u64>, i64), Vec<Vec<u64>>> = HashMap::new();
    let mut configurations = 0usize;
    let mut remember = |bits: &[u64], value: i64| -> bool {
        let known: Vec<u64> = bits.iter().zip(&known_mask).map(|(b, m)| b & m).collect();
        let unknown: Vec<u64> = bits.iter().zip(&known_mask).map(|(b, m)| b & !m).collect();
        let sets = seen.entry((known, value)).or_default();
        if sets.iter().any(|s| s.iter().zip(&unknown).all(|(a, b)| a & !b == 0)) {
            return false;
        }
        sets.push(unknown);
        true
    };
    let mut stack: Vec<(Vec<u64>, i64, usize)> = vec![(vec![0; words], initial, 0)];
    remember(&vec![0; words], initial);
    let mut deepest: (usize, usize) = (0, 0);
    while let Some((bits, value, depth)) = stack.pop() {
        // The earliest response among acknowledged operations not yet linearized bounds what may go next.
        let mut min_complete = u64::MAX;
        let mut min_op = None;
        for (i, e) in history.iter().enumerate() {
            if e.completes() && !is_set(&bits, i) && e.complete_ns < min_complete {
                min_complete = e.complete_ns;
                min_op = Some(i);
            }
        }
        let Some(first_pending) = min_op else {
            return Verdict::Linearizable;
        };
        if depth >= deepest.1 {
            deepest = (first_pending, depth);
        }
        // Unknown operations are pushed first so that the search tries leaving them out first (a stack).
        for pass_known in [false, true] {
            for (i, e) in history.iter().enumerate() {
                if e.completes() != pass_known || is_set(&bits, i) || e.invoke_ns > min_complete {
                    continue;
                }
                if let Some(next) = e.step(value) {
                    let mut nb = bits.clone();
                    nb[i / 64] |= 1 << (i % 64);
                    if remember(&nb, next) {
                        configurations += 1;
                        if configurations > max_configurations {
                            return Verdict::Undecided { configurations };
                        }
                        stack.push((nb, next, depth + 1));
                    }
                }
            }
        }
    }
    Verdict::NotLinearizable { stuck_at: deepest.0, linearized: deepest.1 }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(op: RegisterOp, outcome: RegisterOutcome, invoke_ns: u64, complete_ns: u64) -> RegisterEntry {
        RegisterEntry { op, outcome, invoke_ns, complete_ns }
    }
    fn unknown(op: RegisterOp, invoke_ns: u64) -> RegisterEntry {
        RegisterEntry { op, outcome: RegisterOutcome::Unknown, invoke_ns, complete_ns: 0 }
    }
    use RegisterOp::*;
    use RegisterOutcome::*;

    fn check(h: &[RegisterEntry]) -> Verdict {
        check_register(h, 0, 1_000_000)
    }

    #[test]
    fn sequential_history_is_linearizable() {
        let h = [
            ok(Write(1), WriteOk, 0, 1),
            ok(Read, ReadOk(1), 2, 3),
            ok(Cas { expected: 1, new: 2 }, CasOk(true), 4, 5),
        ];
        assert_eq!(check(&h), Verdict::Linearizable);
        assert_eq!(check(&[]), Verdict::Linearizable);
    }

    #[test]
    fn stale_read_after_completed_write_is_rejected() {
        let h = [ok(Write(1), WriteOk, 0, 10), ok(Read, ReadOk(0), 11, 12)];
        assert!(matches!(check(&h), Verdict::NotLinearizable { stuck_at: 1, .. }), "{:?}", check(&h));
    }

    #[test]
    fn concurrent_read_may_see_old_or_new() {
        for seen in [0, 1] {
            let h = [ok(Write(1), WriteOk, 0, 10), ok(Read, ReadOk(seen), 5, 6)];
            assert_eq!(check(&h), Verdict::Linearizable, "read {seen}");
        }
    }

    #[test]
    fn new_then_old_reads_during_one_write_are_rejected() {
        // The write is still in flight, but once a read saw 1 a later read cannot see 0 again.
        let h = [ok(Write(1), WriteOk, 0, 100), ok(Read, ReadOk(1), 10, 20), ok(Read, ReadOk(0), 30, 40)];
        assert!(matches!(check(&h), Verdict::NotLinearizable { .. }));
    }

    #[test]
    fn value_never_written_is_rejected() {
        let h = [ok(Write(1), WriteOk, 0, 10), ok(Read, ReadOk(7), 5, 20)];
        assert!(matches!(check(&h), Verdict::NotLinearizable { .. }));
    }

    #[test]
    fn cas_must_agree_with_the_value() {
        let swapped_wrongly = [ok(Write(1), WriteOk, 0, 1), ok(Cas { expected: 0, new: 5 }, CasOk(true), 2, 3)];
        assert!(matches!(check(&swapped_wrongly), Verdict::NotLinearizable { .. }));
        let refused_wrongly = [ok(Write(1), WriteOk, 0, 1), ok(Cas { expected: 1, new: 5 }, CasOk(false), 2, 3)];
        assert!(matches!(check(&refused_wrongly), Verdict::NotLinearizable { .. }));
        let refused = [ok(Write(1), WriteOk, 0, 1), ok(Cas { expected: 0, new: 5 }, CasOk(false), 2, 3)];
        assert_eq!(check(&refused), Verdict::Linearizable);
    }

    #[test]
    fn unknown_write_may_take_effect_later_or_never() {
        let taken = [unknown(Write(3), 0), ok(Read, ReadOk(0), 10, 11), ok(Read, ReadOk(3), 50, 51)];
        assert_eq!(check(&taken), Verdict::Linearizable);
        let never = [unknown(Write(3), 0), ok(Read, ReadOk(0), 10, 11), ok(Read, ReadOk(0), 50, 51)];
        assert_eq!(check(&never), Verdict::Linearizable);
        // But it cannot take effect twice: 3, then the acknowledged 4, then 3 again is impossible.
        let twice = [
            unknown(Write(3), 0),
            ok(Read, ReadOk(3), 10, 11),
            ok(Write(4), WriteOk, 20, 21),
            ok(Read, ReadOk(3), 30, 31),
        ];
        assert!(matches!(check(&twice), Verdict::NotLinearizable { .. }));
    }

    #[test]
    fn unknown_write_cannot_take_effect_before_its_invocation() {
        let h = [ok(Read, ReadOk(3), 0, 5), unknown(Write(3), 10)];
        assert!(matches!(check(&h), Verdict::NotLinearizable { .. }));
    }

    #[test]
    fn unknown_cas_takes_effect_only_when_it_matches() {
        let h = [
            ok(Write(1), WriteOk, 0, 1),
            unknown(Cas { expected: 1, new: 9 }, 2),
            ok(Read, ReadOk(9), 10, 11),
            ok(Write(2), WriteOk, 12, 13),
            ok(Read, ReadOk(2), 14, 15),
        ];
        assert_eq!(check(&h), Verdict::Linearizable);
        let mismatch =
            [ok(Write(1), WriteOk, 0, 1), unknown(Cas { expected: 5, new: 9 }, 2), ok(Read, ReadOk(9), 10, 11)];
        assert!(matches!(check(&mismatch), Verdict::NotLinearizable { .. }));
    }

    #[test]
    fn lost_acknowledged_write_is_rejected() {
        // Two masters: a write acknowledged by the old one, then the new one answers reads without it.
        let h = [ok(Write(1), WriteOk, 0, 10), ok(Write(2), WriteOk, 20, 30), ok(Read, ReadOk(1), 40, 50)];
        assert!(matches!(check(&h), Verdict::NotLinearizable { stuck_at: 2, .. }));
    }

    #[test]
    fn many_concurrent_unknowns_stay_tractable() {
        let mut h: Vec<RegisterEntry> = (0..12).map(|i| unknown(Write(100 + i), i as u64)).collect();
        for k in 0..200u64 {
            h.push(ok(Write(k as i64 + 1000), WriteOk, 1000 + 10 * k, 1000 + 10 * k + 5));
            h.push(ok(Read, ReadOk(k as i64 + 1000), 1000 + 10 * k + 6, 1000 + 10 * k + 8));
        }
        assert!(matches!(check_register(&h, 0, 5_000_000), Verdict::Linearizable));
    }

    #[test]
    fn search_budget_is_reported() {
        let h: Vec<RegisterEntry> = (0..40).map(|i| unknown(Write(i), 0)).chain([ok(Read, ReadOk(-1), 1, 2)]).collect();
        assert!(matches!(check_register(&h, 0, 10), Verdict::Undecided { .. }));
    }
}
