//! The view's rules, without Redis: what a reader takes, when it reads the state itself, and how
//! the task's reads and state reads change the view.

use super::*;

fn view(version: u64, mark: &str, recent: impl IntoIterator<Item = u64>, pos: u64) -> TailView {
    TailView {
        version,
        ctl_mark: mark.to_owned(),
        released: Vec::new(),
        pos,
        recent: recent
            .into_iter()
            .map(|id| (id, Bytes::new()))
            .collect::<Vec<_>>()
            .into(),
        outcome: Outcome::Reading,
        floor: None,
        caught_up: false,
        live: true,
        issued: 0,
        mark_since: 1,
        settled: None,
    }
}

/// A reader at `cursor` whose last state read gave `mark` (floor 1, head `cursor`, open).
fn known(cursor: u64, mark: &str) -> Known {
    Known {
        cursor,
        ctl_mark: mark.to_owned(),
        floor: 1,
        head: cursor,
        closed: None,
        seen: 0,
        rechecked: u64::MAX,
        sent_at: 0,
        read_at: 0,
    }
}

fn ids(next: Next) -> Vec<u64> {
    match next {
        Next::Take(e) => e.into_iter().map(|(id, _)| id).collect(),
        other => panic!("expected Take, got {other:?}"),
    }
}

fn entries(ids: std::ops::RangeInclusive<u64>) -> Option<Entries> {
    Some(ids.map(|i| (i, Bytes::new())).collect())
}

fn recent(tail: &Tail) -> Vec<u64> {
    tail.view.borrow().recent.iter().map(|(i, _)| *i).collect()
}

fn releases(newest: &str, through: u64) -> Option<CtlNews> {
    Some(CtlNews {
        newest: newest.into(),
        releases_only: Some(through),
    })
}

fn change(newest: &str) -> Option<CtlNews> {
    Some(CtlNews {
        newest: newest.into(),
        releases_only: None,
    })
}

fn page(ctl: &str, floor: u64, head: u64, ids: std::ops::RangeInclusive<u64>) -> Page {
    Page {
        floor,
        head,
        closed: None,
        ctl: ctl.into(),
        entries: ids.map(|i| (i, Bytes::new())).collect(),
    }
}

/// A state read that found no entries after the task's position.
fn nothing_after(ctl: &str, floor: u64, head: u64) -> Page {
    Page {
        entries: Vec::new(),
        ..page(ctl, floor, head, 1..=1)
    }
}

#[test]
fn a_reader_takes_exactly_what_continues_its_cursor() {
    let v = view(3, "5-0", 11..=20, 20);
    let mut k = known(10, "5-0");
    assert_eq!(ids(v.next_for(&mut k)), (11..=20).collect::<Vec<_>>());
    assert_eq!(k.seen, 3);
    let mut k = known(15, "5-0");
    assert_eq!(ids(v.next_for(&mut k)), (16..=20).collect::<Vec<_>>());
    assert!(matches!(v.next_for(&mut known(20, "5-0")), Next::Wait));
    // Ahead of the task's position (it read from an older cursor): wait for it.
    assert!(matches!(v.next_for(&mut known(25, "5-0")), Next::Wait));
}

#[test]
fn a_reader_behind_what_the_view_keeps_reads_itself() {
    let v = view(1, "5-0", 11..=20, 20);
    assert!(matches!(v.next_for(&mut known(9, "5-0")), Next::Recheck));
    let empty = view(1, "5-0", [], 20);
    assert!(matches!(
        empty.next_for(&mut known(19, "5-0")),
        Next::Recheck
    ));
    assert!(matches!(empty.next_for(&mut known(20, "5-0")), Next::Wait));
}

#[test]
fn a_ctl_change_the_reader_has_not_seen_makes_it_read_the_state() {
    let v = view(1, "7-3", 11..=20, 20);
    assert!(matches!(v.next_for(&mut known(10, "7-2")), Next::Recheck));
    assert!(matches!(v.next_for(&mut known(20, "6-9")), Next::Recheck));
    // The reader has seen a newer ctl entry than the task: the task's read returns with it.
    assert!(matches!(v.next_for(&mut known(10, "7-4")), Next::Wait));
    assert!(matches!(v.next_for(&mut known(10, "8-0")), Next::Wait));
}

#[test]
fn an_outcome_is_acted_on_once() {
    let mut v = view(4, "5-0", [], 20);
    v.outcome = Outcome::Unsettled;
    let mut k = known(20, "5-0");
    k.seen = 3;
    assert!(matches!(v.next_for(&mut k), Next::Recheck));
    assert!(matches!(v.next_for(&mut k), Next::Wait));
    v.version = 5;
    v.outcome = Outcome::Failed(Failure::Corrupt("x".into()));
    assert!(matches!(v.next_for(&mut k), Next::Fail(_)));
    assert!(matches!(v.next_for(&mut k), Next::Wait));
    // Entries that continue the cursor are taken whatever the outcome.
    v.version = 6;
    v.recent = vec![(21, Bytes::new())].into();
    v.pos = 21;
    assert_eq!(ids(v.next_for(&mut k)), vec![21]);
}

#[test]
fn ctl_ids_order_numerically() {
    assert!(ctl_order("10-0") > ctl_order("9-5"));
    assert!(ctl_order("9-10") > ctl_order("9-9"));
    assert_eq!(ctl_order("0-0"), (0, 0));
    assert_eq!(ctl_order("garbage"), (0, 0));
}

#[test]
fn publishing_keeps_a_gap_free_window_ending_at_the_position() {
    let tail = Tail::default();
    tail.publish(entries(1..=3), None, 4, 0);
    assert_eq!(recent(&tail), vec![1, 2, 3]);
    tail.publish(entries(4..=5), None, 4, 0);
    assert_eq!(recent(&tail), vec![2, 3, 4, 5]);
    assert_eq!(tail.view.borrow().pos, 5);
    // Entries 6 and 7 were released before the read: nothing before 8 is kept.
    tail.publish(entries(8..=9), None, 4, 0);
    assert_eq!(recent(&tail), vec![8, 9]);
    // A close or a re-creation the task could not read the state for empties the window.
    tail.publish(entries(10..=10), change("9-0"), 4, 0);
    assert_eq!(recent(&tail), Vec::<u64>::new());
    assert_eq!(tail.view.borrow().pos, 10);
    assert_eq!(tail.view.borrow().ctl_mark, "9-0");
    tail.publish(None, None, 4, 0);
    assert!(matches!(tail.view.borrow().outcome, Outcome::Unsettled));
    assert_eq!(tail.version(), 5);
}

#[test]
fn releases_move_the_mark_for_readers_they_removed_nothing_from() {
    let tail = Tail::default();
    tail.publish(entries(1..=10), None, 64, 0);
    // Released through 4, then through 7, while 11 and 12 came in.
    tail.publish(entries(11..=12), releases("1-0", 4), 64, 0);
    tail.publish(None, releases("2-0", 7), 64, 0);
    let v = tail.view.borrow().clone();
    assert_eq!(v.ctl_mark, "2-0");
    assert_eq!(
        v.released,
        vec![("0-0".to_owned(), 7), ("1-0".to_owned(), 7)]
    );
    assert_eq!(
        recent(&tail),
        (8..=12).collect::<Vec<_>>(),
        "released entries leave"
    );
    // A reader at the first mark whose cursor is past the releases takes the new mark.
    let mut k = known(9, "0-0");
    assert_eq!(ids(v.next_for(&mut k)), vec![10, 11, 12]);
    assert_eq!((k.ctl_mark.as_str(), k.floor), ("2-0", 8));
    // One whose next event was released reads the state (and finds the gap).
    let mut k = known(5, "0-0");
    assert!(matches!(v.next_for(&mut k), Next::Recheck));
    assert_eq!(k.ctl_mark, "0-0");
    // A change the task could not settle: every earlier mark reads the state again.
    tail.publish(None, change("3-0"), 64, 0);
    let v = tail.view.borrow().clone();
    assert!(v.released.is_empty());
    assert!(matches!(v.next_for(&mut known(12, "2-0")), Next::Recheck));
}

#[test]
fn a_state_read_by_the_task_answers_for_readers_with_older_marks() {
    let tail = Tail::default();
    tail.publish(entries(1..=10), None, 64, 0);
    // A close came in while 11 and 12 were appended; the task read the state after 10.
    let mut closed = page("5-0", 3, 12, 11..=12);
    closed.closed = Some(CloseReason::error("done"));
    tail.settle(10, closed, 64, 0);
    let v = tail.view.borrow().clone();
    assert_eq!(
        recent(&tail),
        (3..=12).collect::<Vec<_>>(),
        "kept from the floor on"
    );
    // A reader at an older mark takes the state, the entries it lacks, then the close.
    let mut k = known(8, "1-0");
    assert_eq!(ids(v.next_for(&mut k)), vec![9, 10, 11, 12]);
    assert_eq!((k.ctl_mark.as_str(), k.floor, k.head), ("5-0", 3, 12));
    assert_eq!(k.closed, Some(CloseReason::error("done")));
    k.cursor = 12;
    assert!(matches!(v.next_for(&mut k), Next::Closed(r) if r == CloseReason::error("done")));
    // One whose next event the floor passed reads the state itself (and finds the gap).
    assert!(matches!(v.next_for(&mut known(1, "1-0")), Next::Recheck));
    // Readers that know the newer mark wait for the task.
    assert!(matches!(v.next_for(&mut known(12, "6-0")), Next::Wait));
}

#[test]
fn a_state_read_below_the_floor_starts_the_window_afresh() {
    let tail = Tail::default();
    tail.publish(entries(1..=4), None, 64, 0);
    // Released through 9 before the task read the state: it read from 9.
    tail.settle(9, page("5-0", 10, 12, 10..=12), 64, 0);
    assert_eq!(recent(&tail), vec![10, 11, 12]);
    let v = tail.view.borrow().clone();
    assert_eq!((v.pos, v.caught_up, v.floor), (12, true, Some(10)));
}

#[test]
fn the_window_follows_reads_and_releases_while_the_task_runs() {
    let tail = Tail::default();
    assert_eq!(tail.recent_window(), None, "no task");
    tail.view.send_modify(|v| {
        let v = Arc::make_mut(v);
        (v.live, v.floor, v.pos, v.caught_up) = (true, Some(1), 0, true);
    });
    assert_eq!(tail.recent_window(), Some((1, 0)));
    tail.publish(entries(1..=4), None, 4, 0);
    assert_eq!(tail.recent_window(), None, "a full page: more may follow");
    tail.publish(entries(5..=6), None, 4, 0);
    assert_eq!(tail.recent_window(), Some((1, 6)));
    tail.publish(None, releases("1-0", 5), 4, 0);
    assert_eq!(tail.recent_window(), Some((6, 6)));
    // Released past what the task read (it never saw 7 and 8): the head is at least 8.
    tail.publish(None, releases("2-0", 8), 4, 0);
    assert_eq!(tail.recent_window(), Some((9, 8)));
    assert_eq!(tail.view.borrow().pos, 8);
    // A change the task could not settle: the floor is unknown until a reader reads the state
    // at the new mark.
    tail.publish(None, change("3-0"), 4, 0);
    assert_eq!(tail.recent_window(), None);
    tail.learn_floor("2-0", 9);
    assert_eq!(tail.recent_window(), None, "a state read at an older mark");
    tail.learn_floor("3-0", 9);
    assert_eq!(tail.recent_window(), Some((9, 8)));
    tail.fail(Failure::Corrupt("x".into()));
    assert_eq!(tail.recent_window(), None, "the task stopped");
}

#[test]
fn ctl_news_trusts_releases_only_when_it_saw_every_entry() {
    fn entry(id: &str, field: &str, value: &str) -> redis::Value {
        let s = |t: &str| redis::Value::BulkString(t.as_bytes().to_vec());
        redis::Value::Array(vec![s(id), redis::Value::Array(vec![s(field), s(value)])])
    }
    let two = [entry("5-0", "r", "3"), entry("6-0", "r", "9")];
    let news = ctl_news(&two, 512).unwrap();
    assert_eq!(news.newest, "6-0");
    assert_eq!(news.releases_only, Some(9));
    // A close among them.
    let with_close = [entry("5-0", "r", "3"), entry("6-0", "c", "1")];
    assert_eq!(ctl_news(&with_close, 512).unwrap().releases_only, None);
    // As many as ctl keeps: one may have been trimmed unread.
    let full: Vec<_> = (0..CTL_KEEPS)
        .map(|i| entry(&format!("{i}-0"), "r", "1"))
        .collect();
    assert_eq!(ctl_news(&full, 512).unwrap().releases_only, None);
    // A full page of a small COUNT: more may follow.
    assert_eq!(ctl_news(&two, 2).unwrap().releases_only, None);
    assert!(ctl_news(&[redis::Value::Nil], 512).is_none());
}

#[test]
fn a_reader_whose_mark_a_later_read_did_not_return_takes_redis_mark_once_per_view() {
    // The reader's state read was answered at version 4 with mark 9-0.
    let mut k = known(20, "9-0");
    (k.sent_at, k.read_at) = (4, 4);
    // A view from a read sent at version 4 may have been answered before the reader's: its
    // older mark says nothing, and the task's next read returns with 9-0.
    let mut v = view(5, "5-0", [], 20);
    v.issued = 4;
    assert!(matches!(v.next_for(&mut k), Next::Wait));
    // A read sent after the reader's was answered, without 9-0: Redis lost it.
    let mut v = view(6, "5-0", 21..=22, 22);
    v.issued = 5;
    assert!(matches!(v.next_for(&mut k), Next::Recheck));
    assert!(
        matches!(v.next_for(&mut k), Next::Wait),
        "not again for the same view"
    );
    // Its state read gave Redis's mark: the view's entries are its again.
    k.ctl_mark = "5-0".into();
    (k.sent_at, k.read_at) = (6, 6);
    assert_eq!(ids(v.next_for(&mut k)), vec![21, 22]);
}

#[test]
fn a_reader_whose_state_read_lost_the_view_mark_asks_the_task_instead_of_reading_again() {
    // The view has had mark 9-0 since version 3; entries keep coming under it.
    let mut v = view(7, "9-0", 21..=22, 22);
    v.mark_since = 3;
    let mut k = known(20, "5-0");
    // A state read sent before the view had 9-0: 9-0 may simply be newer. Read again.
    (k.sent_at, k.read_at) = (2, 2);
    assert!(matches!(v.next_for(&mut k), Next::Recheck));
    // Sent after, and still 5-0: Redis lost 9-0. Reading again would find 5-0 on every view.
    (k.sent_at, k.read_at) = (7, 7);
    assert!(matches!(v.next_for(&mut k), Next::ViewMarkLost));
    let mut later = view(8, "9-0", 21..=23, 23);
    later.mark_since = 3;
    assert!(matches!(later.next_for(&mut k), Next::ViewMarkLost));
    // A task that stopped, or could not read the state itself, will not settle: the reader
    // reads the state (and reports what is wrong), once per view.
    for outcome in [Outcome::Unsettled, Outcome::Reading] {
        let mut stuck = view(9, "9-0", [], 20);
        stuck.mark_since = 3;
        stuck.live = matches!(outcome, Outcome::Unsettled);
        stuck.outcome = outcome;
        let mut k = known(20, "5-0");
        (k.sent_at, k.read_at) = (8, 8);
        assert!(matches!(stuck.next_for(&mut k), Next::Recheck));
        assert!(matches!(stuck.next_for(&mut k), Next::Wait));
    }
    // The task's state read takes Redis's mark: the reader takes the entries again.
    let tail = Tail::default();
    tail.publish(entries(21..=22), change("9-0"), 64, 1);
    tail.settle(22, page("5-0", 1, 23, 23..=23), 64, 2);
    let v = tail.view.borrow().clone();
    assert_eq!(v.mark_since, v.version, "the mark changed with the settle");
    k.cursor = 22;
    assert_eq!(ids(v.next_for(&mut k)), vec![23]);
    // A settle that keeps the mark keeps its age.
    tail.settle(23, nothing_after("5-0", 1, 23), 64, 3);
    assert_eq!(tail.view.borrow().mark_since, v.version);
}
