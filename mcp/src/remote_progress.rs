//! The connections other replicas serve a request stream to, counted by the replica that owns
//! the stream (feature `redis`).
//!
//! A resume that lands on another replica is served from Redis (`remote.rs`), so the owner's
//! retention would not see it: the events of a long call would wait in the owner's window for a
//! reader it does not know of, and once the window filled the call would end with
//! `BackpressureTimeout` although its client was reading. So each such connection reports how far
//! it has written into a hash next to the stream's keys (`RedisEventLog::report_reader`), and the
//! owner's maintenance reads the hash and keeps one retention connection per report: an event
//! written to a remote client is released one resumption window after the owner saw the report,
//! as one written to a local client is one window after its writing (a little later, which only
//! holds it longer).
//!
//! A report whose count (`beat`) has not moved for [`dead_after`](RemoteProgress::apply) is a
//! reader whose replica died, or a client that stopped reading (its connection writes nothing, so
//! reports nothing): it is disconnected as a departed client, which keeps what it has not read for
//! a resumption window, and its report is removed.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use replay_ring_sse::{ConnectionId, Retention};

use crate::redis_log::ReaderReport;

/// The remote connections of one stream that its retention counts.
#[derive(Debug, Default)]
pub(crate) struct RemoteProgress {
    tracked: HashMap<String, Tracked>,
    /// Reports seen dead or superseded whose removal from Redis has not been seen yet: not
    /// counted again.
    retired: HashSet<String>,
}

#[derive(Debug)]
struct Tracked {
    conn: ConnectionId,
    through: u64,
    beat: u64,
    /// When `beat` last moved.
    moved_at: Instant,
}

impl RemoteProgress {
    /// Brings `retention` in line with one read of the stream's `reports` at `now`: a new report
    /// connects (at most `limit` remote connections are counted) and supersedes the older ones
    /// it has passed ([`supersede`](Self::supersede)), a moved one records what it wrote, a
    /// missing one (its connection ended) disconnects, and one that has not moved for
    /// `dead_after` disconnects and is retired. Returns the fields to remove from Redis.
    pub(crate) fn apply(
        &mut self,
        retention: &mut Retention,
        reports: &[ReaderReport],
        now: Instant,
        dead_after: Duration,
        limit: usize,
    ) -> Vec<Vec<u8>> {
        let present: HashSet<&str> = reports.iter().map(|r| r.token.as_str()).collect();
        self.retired
            .retain(|token| present.contains(token.as_str()));
        let ended: Vec<String> = self
            .tracked
            .keys()
            .filter(|token| !present.contains(token.as_str()))
            .cloned()
            .collect();
        for token in ended {
            if let Some(gone) = self.tracked.remove(&token) {
                retention.disconnect(gone.conn, now);
            }
        }
        let mut forget = Vec::new();
        let mut arrived = Vec::new();
        for report in reports {
            if self.retired.contains(&report.token) {
                forget.push(report.token.clone().into_bytes());
                continue;
            }
            let counted = self.tracked.len();
            match self.tracked.get_mut(&report.token) {
                Some(t) if t.beat != report.beat => {
                    t.beat = report.beat;
                    t.moved_at = now;
                    t.through = t.through.max(report.through);
                    retention.on_written(&t.conn, report.through, now);
                }
                Some(t) if now.saturating_duration_since(t.moved_at) >= dead_after => {
                    self.retire(retention, &report.token, now);
                    forget.push(report.token.clone().into_bytes());
                }
                Some(_) => {}
                None if counted < limit => {
                    if let Some(conn) = retention.connect(report.through) {
                        arrived.push((report.token.clone(), report.through));
                        let tracked = Tracked {
                            conn,
                            through: report.through,
                            beat: report.beat,
                            moved_at: now,
                        };
                        self.tracked.insert(report.token.clone(), tracked);
                    }
                }
                None => {}
            }
        }
        // Only reports counted before this read are superseded: two that arrive together are
        // two connections, not one replacing the other.
        let newcomers: HashSet<String> = arrived.iter().map(|(token, _)| token.clone()).collect();
        for (_, through) in &arrived {
            for old in self.supersede_except(retention, *through, &newcomers, now) {
                forget.push(old.into_bytes());
            }
        }
        forget
    }

    /// A connection of the stream's client resumed at `cursor` (here, or as a new report from
    /// another replica): a request stream has one client, and a resume proves it has moved on
    /// from any connection that had written no further, so those are disconnected (they hold
    /// what they had not written for a window, as a departed client does) and retired. Without
    /// this, a report left behind by a replica that died would hold the window until it is
    /// taken for dead. The next [`apply`](Self::apply) removes their reports from Redis.
    pub(crate) fn supersede(&mut self, retention: &mut Retention, cursor: u64, now: Instant) {
        self.supersede_except(retention, cursor, &HashSet::new(), now);
    }

    fn supersede_except(
        &mut self,
        retention: &mut Retention,
        cursor: u64,
        except: &HashSet<String>,
        now: Instant,
    ) -> Vec<String> {
        let passed: Vec<String> = self
            .tracked
            .iter()
            .filter(|(token, t)| t.through <= cursor && !except.contains(token.as_str()))
            .map(|(token, _)| token.clone())
            .collect();
        for token in &passed {
            self.retire(retention, token, now);
        }
        passed
    }

    /// When the reports cannot be read: the counted ones whose count has not moved for
    /// `dead_after` are taken for dead (on this replica's clock), so an unreadable hash does
    /// not hold the window for good.
    pub(crate) fn expire_unread(
        &mut self,
        retention: &mut Retention,
        now: Instant,
        dead_after: Duration,
    ) {
        let dead: Vec<String> = self
            .tracked
            .iter()
            .filter(|(_, t)| now.saturating_duration_since(t.moved_at) >= dead_after)
            .map(|(token, _)| token.clone())
            .collect();
        for token in &dead {
            self.retire(retention, token, now);
        }
    }

    fn retire(&mut self, retention: &mut Retention, token: &str, now: Instant) {
        if let Some(gone) = self.tracked.remove(token) {
            retention.disconnect(gone.conn, now);
        }
        self.retired.insert(token.to_owned());
    }

    /// How many remote connections are counted.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.tracked.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use replay_ring::ReplayRing;
    use replay_ring_sse::RetentionConfig;

    fn report(token: &str, through: u64, beat: u64) -> ReaderReport {
        ReaderReport {
            token: token.to_owned(),
            through,
            beat,
        }
    }

    const WINDOW: Duration = Duration::from_secs(30);
    const DEAD: Duration = Duration::from_secs(20);

    fn setup() -> (replay_ring::Producer<u32>, ReplayRing<u32>, Retention) {
        let (mut producer, ring) = ReplayRing::<u32>::new(8, 4).unwrap();
        for n in 1..=4 {
            producer.try_push(n).unwrap();
        }
        let config = RetentionConfig {
            resumption_window: WINDOW,
            ..RetentionConfig::default()
        };
        let retention = Retention::new(config, 8).with_vacancy_release(false);
        (producer, ring, retention)
    }

    /// What a remote connection reports written is released one window after the owner saw it,
    /// and what it has not is held.
    #[test]
    fn a_remote_report_releases_what_it_wrote_one_window_later() {
        let (_producer, ring, mut retention) = setup();
        let mut remote = RemoteProgress::default();
        let t0 = Instant::now();
        let forget = remote.apply(&mut retention, &[report("a", 1, 1)], t0, DEAD, 4);
        assert!(forget.is_empty());
        assert_eq!(retention.live_connections(), 1);
        remote.apply(&mut retention, &[report("a", 3, 2)], t0, DEAD, 4);
        assert_eq!(retention.release_expired(&ring, t0 + WINDOW / 2), None);
        assert_eq!(retention.release_expired(&ring, t0 + WINDOW), Some(4));
        assert_eq!(ring.floor(), 4, "event 4 was not written to the reader");
    }

    /// A report that stops moving is a dead reader: disconnected (it keeps a window for what it
    /// did not read), retired, and removed from Redis, also when it is seen again.
    #[test]
    fn a_report_that_stops_moving_is_disconnected_and_retired() {
        let (_producer, _ring, mut retention) = setup();
        let mut remote = RemoteProgress::default();
        let t0 = Instant::now();
        remote.apply(&mut retention, &[report("a", 2, 1)], t0, DEAD, 4);
        let almost = remote.apply(&mut retention, &[report("a", 2, 1)], t0 + DEAD / 2, DEAD, 4);
        assert!(almost.is_empty());
        assert_eq!(retention.live_connections(), 1);
        let dead = remote.apply(&mut retention, &[report("a", 2, 1)], t0 + DEAD, DEAD, 4);
        assert_eq!(dead, [b"a".to_vec()]);
        assert_eq!(retention.live_connections(), 0);
        let again = remote.apply(&mut retention, &[report("a", 2, 2)], t0 + DEAD, DEAD, 4);
        assert_eq!(
            again,
            [b"a".to_vec()],
            "a retired report is not counted again"
        );
        assert_eq!(remote.len(), 0);
        // Once Redis no longer has it, the token is forgotten here too.
        remote.apply(&mut retention, &[], t0 + DEAD, DEAD, 4);
        assert!(remote.retired.is_empty());
    }

    /// A report that disappears (its connection ended) disconnects; at most `limit` are
    /// counted.
    #[test]
    fn an_ended_report_disconnects_and_the_count_is_bounded() {
        let (_producer, _ring, mut retention) = setup();
        let mut remote = RemoteProgress::default();
        let t0 = Instant::now();
        let three = [report("a", 0, 1), report("b", 0, 1), report("c", 0, 1)];
        remote.apply(&mut retention, &three, t0, DEAD, 2);
        assert_eq!(remote.len(), 2);
        assert_eq!(retention.live_connections(), 2);
        remote.apply(&mut retention, &three[2..], t0, DEAD, 2);
        assert_eq!(
            retention.live_connections(),
            1,
            "a and b ended, c counted now"
        );
        remote.apply(&mut retention, &[], t0, DEAD, 2);
        assert_eq!(retention.live_connections(), 0);
    }

    /// A new report supersedes the counted ones that had written no further (the client moved
    /// on), but not a report that arrives with it; a resume here supersedes the same way.
    #[test]
    fn a_resume_supersedes_the_reports_it_passed() {
        let (_producer, _ring, mut retention) = setup();
        let mut remote = RemoteProgress::default();
        let t0 = Instant::now();
        remote.apply(
            &mut retention,
            &[report("a", 1, 1), report("b", 1, 1)],
            t0,
            DEAD,
            4,
        );
        assert_eq!(
            remote.len(),
            2,
            "two that arrive together are two connections"
        );
        let seen = [report("a", 1, 1), report("b", 1, 1), report("c", 2, 1)];
        let forget = remote.apply(&mut retention, &seen, t0, DEAD, 4);
        assert_eq!(remote.len(), 1, "c resumed past a and b");
        assert_eq!(forget.len(), 2);
        remote.supersede(&mut retention, 2, t0);
        assert_eq!((remote.len(), retention.live_connections()), (0, 0));
    }

    /// Reports that cannot be read: the counted ones are taken for dead on this replica's clock.
    #[test]
    fn unreadable_reports_expire_on_the_owners_clock() {
        let (_producer, _ring, mut retention) = setup();
        let mut remote = RemoteProgress::default();
        let t0 = Instant::now();
        remote.apply(&mut retention, &[report("a", 1, 1)], t0, DEAD, 4);
        remote.expire_unread(&mut retention, t0 + DEAD / 2, DEAD);
        assert_eq!(retention.live_connections(), 1);
        remote.expire_unread(&mut retention, t0 + DEAD, DEAD);
        assert_eq!(retention.live_connections(), 0);
    }
}
