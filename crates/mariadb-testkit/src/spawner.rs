//! Starts child processes so that they die with the test process, even when it dies without running destructors
//! (abort, SIGKILL, `std::process::exit`).
//!
//! Linux `PR_SET_PDEATHSIG` sends the signal when the *thread* that forked the child exits, not the process.
//! Test harnesses run each test on its own short-lived thread, so forking from there would kill a server that a
//! test handed to another thread (or kept in a static). All forks therefore happen on one spawner thread that
//! lives as long as the process.

use std::io;
use std::process::{Child, Command};
use std::sync::mpsc;
use std::sync::OnceLock;

type Request = (Command, mpsc::Sender<io::Result<Child>>);

static SPAWNER: OnceLock<Option<mpsc::Sender<Request>>> = OnceLock::new();

fn spawner() -> Option<&'static mpsc::Sender<Request>> {
    SPAWNER
        .get_or_init(|| {
            let (tx, rx) = mpsc::channel::<Request>();
            let thread = std::thread::Builder::new().name("mariadb-testkit-spawner".into()).spawn(move || {
                for (mut cmd, reply) in rx {
                    // If the requester is gone, nobody owns the child: end it now.
                    if let Err(mpsc::SendError(Ok(mut orphan))) = reply.send(cmd.spawn()) {
                        let _ = orphan.kill();
                        let _ = orphan.wait();
                    }
                }
            });
            thread.ok().map(|_| tx)
        })
        .as_ref()
}

/// Spawns `cmd` so that the child gets SIGKILL when the test process exits.
pub(crate) fn spawn_tied_to_process(mut cmd: Command) -> io::Result<Child> {
    use std::os::unix::process::CommandExt as _;
    let parent = std::process::id();
    // SAFETY: the closure runs between fork and exec and only calls async-signal-safe functions (prctl,
    // getppid) and builds io::Error values from raw codes, which does not allocate.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            // The parent may have exited between fork and prctl: then no signal would ever come.
            if libc::getppid() as u32 != parent {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
    let Some(tx) = spawner() else {
        return Err(io::Error::other("cannot start the mariadb-testkit spawner thread"));
    };
    let (reply_tx, reply_rx) = mpsc::channel();
    tx.send((cmd, reply_tx)).map_err(|_| io::Error::other("mariadb-testkit spawner thread is gone"))?;
    reply_rx.recv().map_err(|_| io::Error::other("mariadb-testkit spawner thread dropped the request"))?
}
