//! The master's write path (docs/ARCHITECTURE.md §3), one place from the client's COMMIT to its ACK: the local
//! mariadbd's binlog is read as a semi-sync replica ([`paxsql_repl_client`]), each transaction is proposed to the
//! global log through the driver, and the ACK that lets the client's COMMIT return is sent only once the
//! transaction is applied for this master's term — chosen on a majority. The role controller ([`crate::roles`])
//! starts it at promotion and ends the term when it fails.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use paxsql_admin_sql::WriteHop;
use paxsql_binlog::{Gtid, GtidSet};
use paxsql_global_log::Applied;
use paxsql_repl_client::{Address, ConnectOptions, ReplicationClient, TransactionAssembler};
use tokio::sync::{broadcast, mpsc, oneshot, watch};

use crate::context::RoleContext;
use crate::driver::{send_input, Input};

/// A transaction goes into the log in parts once this many of its bytes are buffered: smaller parts keep the
/// master's memory for one transaction small.
const PART_BYTES: usize = 4 << 20;
/// The most one proposal carries, whole transaction or part: below any log entry (an entry carries at least
/// 16 MiB less a margin, see `NodeConfig::peer_message_bytes`). A part is PART_BYTES plus the event that crossed it,
/// so only an event larger than this is cut across several parts.
const MAX_PROPOSAL_BYTES: usize = 12 << 20;
/// Parts proposed and not yet applied, at most: the capture reads on only as the log takes them.
const PARTS_IN_FLIGHT: u64 = 2;

/// A transaction read from the local binlog, waiting for its ACK.
struct Captured {
    seq: u64,
    /// Its end in the local binlog: the position the semi-sync ACK names.
    end_file: Arc<str>,
    end_pos: u64,
    captured_at: Instant,
    /// Of its events, as proposed (all parts together).
    fingerprint: Fingerprint,
}

/// The master's write path: local binlog → global log → ACK.
pub(crate) async fn capture(ctx: Arc<RoleContext>, term: u64, start: GtidSet, failed: watch::Sender<bool>) {
    let span = tracing::info_span!("capture", node = ctx.node_id, master_version = term);
    let _g = span.enter();
    let result = capture_inner(&ctx, term, start).await;
    if let Err(e) = result {
        tracing::error!(error = %e, "capture ended");
    }
    failed.send_replace(true);
}

#[derive(Debug, thiserror::Error)]
enum CaptureError {
    #[error(transparent)]
    Client(#[from] paxsql_repl_client::Error),
    #[error("the global log refused transaction {0}: {1}")]
    Refused(Gtid, paxsql_global_log::GlobalLogError),
    #[error("the global-log driver is gone")]
    DriverGone,
    #[error("the ACK task stopped: {0}")]
    AckerStopped(String),
}

/// Transactions of this term the log applied, by GTID seq_no, with the length and CRC32 of their events, until the
/// capture's own transaction at that seq_no is matched against them. A commit is acknowledged only if the log holds
/// the transaction this capture read at its GTID (same length, same CRC32): after a lapse of the lease and its
/// return in the same term (a demotion in between truncated the un-ACKed tail), a proposal of the earlier capture
/// may still be chosen at a seq_no the new capture reads another transaction at. Acknowledging by seq_no alone
/// would confirm a commit the log does not hold.
#[derive(Default)]
struct AppliedFingerprints {
    whole: std::collections::BTreeMap<u64, Fingerprint>,
    /// The transaction arriving in parts: its seq_no and its fingerprint so far.
    parts: Option<(u64, FingerprintBuilder)>,
}

impl AppliedFingerprints {
    fn part(&mut self, seq: u64, offset: u64, last: bool, bytes: &[u8]) {
        if offset == 0 || self.parts.as_ref().is_some_and(|(s, _)| *s != seq) {
            self.parts = Some((seq, FingerprintBuilder::default()));
        }
        if let Some((_, h)) = self.parts.as_mut() {
            h.update(bytes);
        }
        if last {
            if let Some((seq, b)) = self.parts.take() {
                self.whole.insert(seq, b.finish());
            }
        }
    }

    /// Whether the log applied the captured transaction `seq` (fingerprint `fp`); forgets it, and any before it
    /// (another capture's of this term), either way.
    fn matches(&mut self, seq: u64, fp: Fingerprint) -> bool {
        while let Some(older) = self.whole.first_entry().filter(|e| *e.key() < seq) {
            older.remove();
        }
        self.whole.remove(&seq) == Some(fp)
    }
}

/// Length and CRC32 of a transaction's events.
type Fingerprint = (u64, u32);

#[derive(Default)]
struct FingerprintBuilder {
    len: u64,
    crc: crc32fast::Hasher,
}

impl FingerprintBuilder {
    fn update(&mut self, bytes: &[u8]) {
        self.len += bytes.len() as u64;
        self.crc.update(bytes);
    }

    fn finish(self) -> Fingerprint {
        (self.len, self.crc.finalize())
    }
}

fn fingerprint(bytes: &[u8]) -> Fingerprint {
    let mut b = FingerprintBuilder::default();
    b.update(bytes);
    b.finish()
}

async fn capture_inner(ctx: &Arc<RoleContext>, term: u64, start: GtidSet) -> Result<(), CaptureError> {
    let mut opts = ConnectOptions::new(
        Address::Unix(ctx.socket.clone()),
        &ctx.replication_user,
        &ctx.replication_password,
        2_000_000_000 + ctx.node_id as u32,
    );
    opts.start = start;
    let mut client = ReplicationClient::connect(opts).await?;
    let acks = client.ack_handle();
    // The transactions read and waiting for their ACK, in commit order.
    let pending: Arc<Mutex<VecDeque<Captured>>> = Arc::default();
    let metrics = ctx.metrics.clone();
    let mut applied = ctx.applied.subscribe();
    let ack_pending = pending.clone();
    // For the write-path hops: when the driver proposed each transaction (by seq_no, in order), and the last
    // seq_no the ACK task has seen applied (a proposal answered after its own application is not timed).
    let proposed: Arc<Mutex<VecDeque<(u64, Instant)>>> = Arc::default();
    let applied_seq = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let (ack_proposed, ack_applied_seq) = (proposed.clone(), applied_seq.clone());
    // Parts of large transactions applied for this term, against those proposed: the capture keeps at most
    // `PARTS_IN_FLIGHT` ahead, so a transaction of any size costs the master a few parts of memory.
    let parts_applied = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let part_applied = Arc::new(tokio::sync::Notify::new());
    let (ack_parts_applied, ack_part_applied) = (parts_applied.clone(), part_applied.clone());
    let mut acker = tokio::spawn(async move {
        let mut fingerprints = AppliedFingerprints::default();
        loop {
            // A part of this term's transaction: one fewer in flight; its last one is the transaction's ACK.
            let last_seq = match &applied.recv().await {
                Ok(Applied::BinlogPartAppended { master_version, gtid, offset, last, bytes, .. })
                    if *master_version == term =>
                {
                    ack_parts_applied.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    ack_part_applied.notify_one();
                    fingerprints.part(gtid.seq_no, *offset, *last, bytes);
                    last.then_some(gtid.seq_no)
                }
                Ok(Applied::BinlogAppended { master_version, gtid_first, last_seq, events, .. })
                    if *master_version == term =>
                {
                    // This capture proposes one transaction per append; a range is not one of its own and matches
                    // none of its transactions below.
                    if gtid_first.seq_no == *last_seq {
                        fingerprints.whole.insert(*last_seq, fingerprint(events));
                    }
                    Some(*last_seq)
                }
                Ok(Applied::PartsDropped { .. }) => {
                    fingerprints.parts = None;
                    None
                }
                Ok(_) => None,
                // Missed effects may hold this term's appends: their commits would wait forever while the master
                // keeps its lease. The capture ends instead, and the node hands its term over.
                Err(broadcast::error::RecvError::Lagged(n)) => {
                    return format!("it fell behind the applied log by {n} effects");
                }
                Err(broadcast::error::RecvError::Closed) => return "the applied log closed".to_string(),
            };
            let Some(last_seq) = last_seq else { continue };
            let seen = Instant::now();
            ack_applied_seq.fetch_max(last_seq, std::sync::atomic::Ordering::Relaxed);
            if let Ok(mut p) = ack_proposed.lock() {
                while let Some((_, at)) = p.front().filter(|(seq, _)| *seq <= last_seq).copied() {
                    p.pop_front();
                    metrics.record_write_hop(WriteHop::Choose, seen.duration_since(at));
                }
            }
            let (mut last, mut oldest, mut count) = (None, None, 0u64);
            if let Ok(mut p) = ack_pending.lock() {
                while p.front().is_some_and(|c| c.seq <= last_seq) {
                    let Some(c) = p.pop_front() else { break };
                    if !fingerprints.matches(c.seq, c.fingerprint) {
                        return format!(
                            "the global log holds another transaction than this master's at seq_no {} of term {term}: \
                             it is never acknowledged",
                            c.seq
                        );
                    }
                    oldest = oldest.or(Some(c.captured_at));
                    count += 1;
                    last = Some(c);
                }
            }
            if let Some(Captured { end_file: file, end_pos: pos, .. }) = last {
                if let Err(e) = acks.ack(&file, pos) {
                    return format!("the ACK could not be sent to mariadbd: {e}");
                }
                metrics.record_capture_ack(count, oldest.map(|t| t.elapsed()).unwrap_or_default());
                metrics.record_write_hop(WriteHop::Ack, seen.elapsed());
            }
        }
    });
    // Answers of proposals are awaited by their own task, in order. The capture does not wait for each one before
    // reading the next transaction: the driver then finds many proposals per round and batches them into one Paxos
    // instance (one fsync per round instead of one per transaction). ACKs still come only from the applied log,
    // above. A refusal must end the capture even when no further transaction arrives (the refused one is usually
    // the last a client sent: it waits for its ACK), so the loop below waits on both. Unbounded is safe: each entry
    // stands for a proposal already taken by the driver's bounded inbox.
    type Answer = oneshot::Receiver<Result<(), paxsql_global_log::GlobalLogError>>;
    let (answer_tx, mut answer_rx) = mpsc::unbounded_channel::<(Gtid, Answer, Instant)>();
    let (refused_tx, mut refused) = oneshot::channel::<CaptureError>();
    let hop_metrics = ctx.metrics.clone();
    let answer_checker = tokio::spawn(async move {
        while let Some((gtid, answer, inboxed)) = answer_rx.recv().await {
            let failure = match answer.await {
                Ok(Ok(())) => {
                    let at = Instant::now();
                    hop_metrics.record_write_hop(WriteHop::Propose, at.duration_since(inboxed));
                    if gtid.seq_no > applied_seq.load(std::sync::atomic::Ordering::Relaxed) {
                        if let Ok(mut p) = proposed.lock() {
                            p.push_back((gtid.seq_no, at));
                        }
                    }
                    continue;
                }
                Ok(Err(e)) => CaptureError::Refused(gtid, e),
                Err(_) => CaptureError::DriverGone,
            };
            let _ = refused_tx.send(failure);
            return;
        }
    });
    let mut assembler = TransactionAssembler::new();
    // The transaction going on in parts (its seq_no) and the bytes proposed of it so far.
    let mut parted: Option<(u64, u64)> = None;
    // The fingerprint of the transaction being read, over the parts proposed so far.
    let mut read = FingerprintBuilder::default();
    let mut parts_proposed = 0u64;
    let result = loop {
        // `next_event` is only ever cancelled when the capture ends, so no half-read packet is left behind.
        let event = tokio::select! {
            biased;
            failure = &mut refused => break Err(failure.unwrap_or(CaptureError::DriverGone)),
            stopped = &mut acker => {
                break Err(CaptureError::AckerStopped(stopped.unwrap_or_else(|e| format!("it panicked: {e}"))))
            }
            event = client.next_event() => match event {
                Ok(e) => e,
                Err(e) => break Err(CaptureError::Client(e)),
            },
        };
        let (gtid, events, last) = match assembler.push(&event) {
            Ok(Some(trx)) => {
                read.update(&trx.events);
                let captured = Captured {
                    seq: trx.gtid.seq_no,
                    end_file: trx.end_file.clone(),
                    end_pos: trx.end_pos,
                    captured_at: Instant::now(),
                    fingerprint: std::mem::take(&mut read).finish(),
                };
                if let Ok(mut p) = pending.lock() {
                    p.push_back(captured);
                }
                (trx.gtid, trx.events, true)
            }
            // A transaction too large for one log entry goes on in parts while it is read.
            Ok(None) => match assembler.take_open_events(PART_BYTES) {
                Some((gtid, events)) => {
                    read.update(&events);
                    (gtid, events, false)
                }
                None => continue,
            },
            Err(e) => break Err(CaptureError::Client(e)),
        };
        let captured = Instant::now();
        let whole = last && parted.is_none_or(|(seq, _)| seq != gtid.seq_no) && events.len() <= MAX_PROPOSAL_BYTES;
        let mut proposals = Vec::new();
        if whole {
            let (reply, answer) = oneshot::channel();
            let input = Input::ProposeBinlog {
                domain_id: gtid.domain_id,
                server_id: gtid.server_id,
                first_seq: gtid.seq_no,
                last_seq: gtid.seq_no,
                events,
                reply,
            };
            proposals.push((input, answer));
        } else {
            let mut offset = parted.filter(|(seq, _)| *seq == gtid.seq_no).map_or(0, |(_, o)| o);
            if offset == 0 {
                tracing::info!(%gtid, "a transaction larger than one part ({PART_BYTES} bytes) goes into the global log in parts");
            }
            // Moved whole in the usual case; cut (copied) only around an event larger than one proposal.
            let chunks = if events.len() <= MAX_PROPOSAL_BYTES {
                vec![events]
            } else {
                events.chunks(MAX_PROPOSAL_BYTES).map(<[u8]>::to_vec).collect()
            };
            let n = chunks.len();
            for (i, bytes) in chunks.into_iter().enumerate() {
                let (reply, answer) = oneshot::channel();
                let len = bytes.len() as u64;
                let input = Input::ProposeBinlogPart {
                    domain_id: gtid.domain_id,
                    server_id: gtid.server_id,
                    seq: gtid.seq_no,
                    offset,
                    last: last && i + 1 == n,
                    bytes,
                    reply,
                };
                offset += len;
                proposals.push((input, answer));
            }
            parted = (!last).then_some((gtid.seq_no, offset));
        }
        let mut stopped = None;
        for (input, answer) in proposals {
            if matches!(input, Input::ProposeBinlogPart { .. }) {
                // At most PARTS_IN_FLIGHT parts proposed and not yet applied.
                while parts_proposed >= parts_applied.load(std::sync::atomic::Ordering::Relaxed) + PARTS_IN_FLIGHT {
                    tokio::select! {
                        biased;
                        failure = &mut refused => {
                            stopped = Some(Err(failure.unwrap_or(CaptureError::DriverGone)));
                            break;
                        }
                        ended = &mut acker => {
                            let why = ended.unwrap_or_else(|e| format!("it panicked: {e}"));
                            stopped = Some(Err(CaptureError::AckerStopped(why)));
                            break;
                        }
                        // A notification sent while no one waits is kept for the next wait: none is lost.
                        _ = part_applied.notified() => {}
                    }
                }
                if stopped.is_some() {
                    break;
                }
                parts_proposed += 1;
            }
            if send_input(&ctx.inbox, input).await.is_err() {
                stopped = Some(Err(CaptureError::DriverGone));
                break;
            }
            let inboxed = Instant::now();
            ctx.metrics.record_write_hop(WriteHop::Inbox, inboxed.duration_since(captured));
            // The checker only stops after sending a failure; the next turn of the loop picks it up.
            let _ = answer_tx.send((gtid, answer, inboxed));
        }
        if let Some(result) = stopped {
            break result;
        }
    };
    answer_checker.abort();
    acker.abort();
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_transaction_this_capture_read_is_acknowledged() {
        let mut applied = AppliedFingerprints::default();
        // The log took an earlier capture's transaction 7 (same term, before a lapse of the lease); this capture
        // read another one at 7.
        applied.whole.insert(7, fingerprint(b"the earlier capture's 7"));
        assert!(!applied.matches(7, fingerprint(b"this capture's 7")));
        // Its own, applied whole or in parts, is.
        applied.whole.insert(8, fingerprint(b"eight"));
        assert!(applied.matches(8, fingerprint(b"eight")));
        applied.part(9, 0, false, b"ni");
        applied.part(9, 2, true, b"ne");
        assert!(applied.matches(9, fingerprint(b"nine")));
        // Same bytes, other length: not the same transaction.
        assert_ne!(fingerprint(b"ab"), fingerprint(b"ab\0"));
        // Parts that start over (dropped by a master change, or another transaction) are not mixed.
        applied.part(10, 0, false, b"lost");
        applied.part(10, 0, true, b"ten");
        assert!(applied.matches(10, fingerprint(b"ten")));
        // Nothing matches twice, and older entries go once a later one is matched.
        applied.whole.insert(11, fingerprint(b"x"));
        applied.whole.insert(12, fingerprint(b"y"));
        assert!(applied.matches(12, fingerprint(b"y")));
        assert!(applied.whole.is_empty());
        assert!(!applied.matches(12, fingerprint(b"y")));
    }
}
