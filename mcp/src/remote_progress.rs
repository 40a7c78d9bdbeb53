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
    /// Reports not counted: taken for dead, passed by a resume here, or left behind by a
    /// connection the client had already left. Each is counted again if its count moves (a
    /// reader that is alive after all), and forgotten once it has been absent from Redis for the
    /// dead-reader bound.
    retired: HashMap<String, Retired>,
    /// The last resume of the stream on this replica: its cursor and when it came.
    local_resume: Option<(u64, Instant)>,
}

#[derive(Debug)]
struct Tracked {
    conn: ConnectionId,
    through: u64,
    beat: u64,
    /// When `beat` last moved.
    moved_at: Instant,
}

#[derive(Debug)]
struct Retired {
    beat: u64,
    /// Since when the report has been missing from Redis.
    absent_since: Option<Instant>,
}

impl RemoteProgress {
    /// Brings `retention` in line with one read of the stream's `reports` at `now`:
    /// - a new report connects (at most `limit` remote connections are counted), unless it had
    ///   written no further than a resume here that came within `dead_after` before (a report of
    ///   the connection that client left, written before it came here): that one is retired;
    /// - a counted report that moved records what it wrote; one that has not moved for
    ///   `dead_after` disconnects and is retired; one that is missing (its connection ended)
    ///   disconnects;
    /// - a retired report that moved is counted again.
    ///
    /// Returns the fields to remove from Redis: the retired reports that have not moved.
    pub(crate) fn apply(
        &mut self,
        retention: &mut Retention,
        reports: &[ReaderReport],
        now: Instant,
        dead_after: Duration,
        limit: usize,
    ) -> Vec<Vec<u8>> {
        let present: HashSet<&str> = reports.iter().map(|r| r.token.as_str()).collect();
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
        self.retired.retain(|token, retired| {
            if present.contains(token.as_str()) {
                return true;
            }
            let since = *retired.absent_since.get_or_insert(now);
            now.saturating_duration_since(since) < dead_after
        });
        let left_behind = |through: u64| {
            self.local_resume.is_some_and(|(cursor, at)| {
                through <= cursor && now.saturating_duration_since(at) < dead_after
            })
        };
        let mut forget = Vec::new();
        let mut retire = Vec::new();
        let mut admit = Vec::new();
        for report in reports {
            if let Some(retired) = self.retired.get_mut(&report.token) {
                retired.absent_since = None;
                if retired.beat == report.beat {
                    forget.push(report.token.clone().into_bytes());
                } else {
                    admit.push(report);
                }
                continue;
            }
            match self.tracked.get_mut(&report.token) {
                Some(t) if t.beat != report.beat => {
                    t.beat = report.beat;
                    t.moved_at = now;
                    t.through = t.through.max(report.through);
                    retention.on_written(&t.conn, report.through, now);
                }
                Some(t) if now.saturating_duration_since(t.moved_at) >= dead_after => {
                    retire.push(report.token.clone());
                    forget.push(report.token.clone().into_bytes());
                }
                Some(_) => {}
                None if left_behind(report.through) => {
                    let retired = Retired {
                        beat: report.beat,
                        absent_since: None,
                    };
                    self.retired.insert(report.token.clone(), retired);
                }
                None => admit.push(report),
            }
        }
        for token in retire {
            self.retire(retention, &token, now);
        }
        for report in admit {
            if self.tracked.len() >= limit {
                break;
            }
            self.retired.remove(&report.token);
            if let Some(conn) = retention.connect(report.through) {
                let tracked = Tracked {
                    conn,
                    through: report.through,
                    beat: report.beat,
                    moved_at: now,
                };
                self.tracked.insert(report.token.clone(), tracked);
            }
        }
        forget
    }

    /// The stream's client resumed here at `cursor`. A request stream has one client, and a
    /// resume proves it left every connection that had written no further, so those are
    /// disconnected (each holds what it had not written for a window, as a departed client
    /// does) and retired; without this, a report left behind by a replica that died would hold
    /// the window until it is taken for dead. One that is alive after all (its count moves) is
    /// counted again.
    pub(crate) fn supersede(&mut self, retention: &mut Retention, cursor: u64, now: Instant) {
        self.local_resume = Some((cursor, now));
        let passed: Vec<String> = self
            .tracked
            .iter()
            .filter(|(_, t)| t.through <= cursor)
            .map(|(token, _)| token.clone())
            .collect();
        for token in &passed {
            self.retire(retention, token, now);
        }
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
            let retired = Retired {
                beat: gone.beat,
                absent_since: None,
            };
            self.retired.insert(token.to_owned(), retired);
        }
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
    /// did not read), retired, and removed from Redis while it stays as it was; counted again if
    /// it moves after all; forgotten once absent from Redis for the dead-reader bound.
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
        let still = remote.apply(&mut retention, &[report("a", 2, 1)], t0 + DEAD, DEAD, 4);
        assert_eq!(still, [b"a".to_vec()], "not counted while it does not move");
        // Missing from one read (removed, then written again): still retired, not new.
        remote.apply(&mut retention, &[], t0 + DEAD, DEAD, 4);
        remote.apply(&mut retention, &[report("a", 2, 1)], t0 + DEAD, DEAD, 4);
        assert_eq!(remote.len(), 0);
        let alive = remote.apply(&mut retention, &[report("a", 3, 2)], t0 + DEAD, DEAD, 4);
        assert!(alive.is_empty());
        assert_eq!(
            remote.len(),
            1,
            "a retired report that moves is counted again"
        );
        let t1 = t0 + 3 * DEAD;
        remote.apply(&mut retention, &[report("a", 3, 2)], t1, DEAD, 4);
        remote.apply(&mut retention, &[], t1, DEAD, 4);
        remote.apply(&mut retention, &[], t1 + DEAD, DEAD, 4);
        assert!(
            remote.retired.is_empty(),
            "forgotten once absent for the bound"
        );
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

    /// A new report supersedes nobody (two connections may read one stream); a resume here
    /// retires the counted reports it passed, and a report it passed that is first read after it
    /// is not counted unless it moves.
    #[test]
    fn a_resume_here_retires_the_reports_it_passed() {
        let (_producer, _ring, mut retention) = setup();
        let mut remote = RemoteProgress::default();
        let t0 = Instant::now();
        remote.apply(&mut retention, &[report("a", 1, 1)], t0, DEAD, 4);
        remote.apply(
            &mut retention,
            &[report("a", 1, 1), report("b", 2, 1)],
            t0,
            DEAD,
            4,
        );
        assert_eq!(remote.len(), 2, "b does not supersede a");
        remote.supersede(&mut retention, 1, t0);
        assert_eq!(remote.len(), 1, "the resume at 1 passed a, not b");
        let late = [report("a", 1, 1), report("b", 2, 2), report("c", 1, 1)];
        let forget = remote.apply(&mut retention, &late, t0, DEAD, 4);
        assert_eq!(remote.len(), 1, "c, at or below the resume, is not counted");
        assert_eq!(forget, [b"a".to_vec()]);
        let moved = [report("b", 2, 3), report("c", 2, 2)];
        remote.apply(&mut retention, &moved, t0, DEAD, 4);
        assert_eq!(remote.len(), 2, "c moved: counted after all");
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
