//! How long a GTID lookup took, and where the time went. Under load the wall time of a lookup can be far above
//! its work: it waits for the state lock (an append or a dump's read holds it) or for a core (the node shares two
//! with three mariadbds). Timing the lock wait and the thread's own CPU time apart says which of the three a slow
//! lookup paid for.

use std::time::{Duration, Instant};

/// One lookup's figures.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LookupTime {
    /// From the call to its answer.
    pub wall: Duration,
    /// Part of `wall` spent waiting for the state lock.
    pub lock_wait: Duration,
    /// CPU time the calling thread spent in the lookup (lock included); `wall - lock_wait - cpu` is time the thread
    /// was ready but off a core, or blocked in the kernel.
    pub cpu: Duration,
}

pub(crate) struct LookupClock {
    started: Instant,
    cpu_started: Duration,
    locked: Option<Instant>,
}

impl LookupClock {
    pub(crate) fn start() -> Self {
        LookupClock { started: Instant::now(), cpu_started: thread_cpu_time(), locked: None }
    }

    /// The state lock is held from now on.
    pub(crate) fn locked(&mut self) {
        self.locked = Some(Instant::now());
    }

    pub(crate) fn finish(self) -> LookupTime {
        let now = Instant::now();
        let lock_wait = self.locked.map_or(Duration::ZERO, |at| at - self.started);
        LookupTime { wall: now - self.started, lock_wait, cpu: thread_cpu_time().saturating_sub(self.cpu_started) }
    }
}

/// The calling thread's CPU time (0 where the clock cannot be read: only the figure is lost).
fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec into the valid, exclusively borrowed `ts`.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return Duration::ZERO;
    }
    Duration::new(u64::try_from(ts.tv_sec).unwrap_or(0), u32::try_from(ts.tv_nsec).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lock_wait_and_the_cpu_time_are_parts_of_the_wall_time() {
        let mut clock = LookupClock::start();
        std::thread::sleep(Duration::from_millis(20));
        clock.locked();
        // Busy for a while: CPU time the clock must see.
        let until = Instant::now() + Duration::from_millis(20);
        let mut spins = 0u64;
        while Instant::now() < until {
            spins = spins.wrapping_add(1);
        }
        assert!(spins > 0);
        let t = clock.finish();
        assert!(t.lock_wait >= Duration::from_millis(20), "{t:?}");
        assert!(t.wall >= t.lock_wait + Duration::from_millis(20), "{t:?}");
        // The sleep took no CPU; the spin took most of its 20 ms (a loaded machine may take some away).
        assert!(t.cpu >= Duration::from_millis(5) && t.cpu < t.wall - Duration::from_millis(15), "{t:?}");
    }
}
