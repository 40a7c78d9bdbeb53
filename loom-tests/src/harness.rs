//! Payloads that check themselves, a drop ledger, batch checks and the model runner.
//!
//! The drop [`Ledger`] uses `std` atomics on purpose: it only counts, is checked after every thread
//! has been joined, and so must add no happens-before edge (and no scheduling point) to the model.
//! Ordering facts a model asserts on go through a loom [`Flag`] instead.

use std::fmt;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc as StdArc;
use std::time::Instant;

use loom::alloc::Track;
use loom::future::block_on;
use loom::thread::{self, JoinHandle};
use replay_ring::{Batch, Producer, ReadError, Reader, ReplayRing};

/// Counts the drops of every payload id. Shared by the payloads of one execution.
#[derive(Debug)]
pub struct Ledger {
    drops: Box<[AtomicU32]>,
}

impl Ledger {
    /// A ledger for payload ids `1..=max_id`.
    pub fn new(max_id: u64) -> StdArc<Ledger> {
        StdArc::new(Ledger {
            drops: (0..=max_id).map(|_| AtomicU32::new(0)).collect(),
        })
    }

    fn dropped(&self, id: u64) {
        // SeqCst on a ghost counter: schedule order only (see the module doc).
        let before = self.drops[id as usize].fetch_add(1, SeqCst);
        assert_eq!(before, 0, "payload dropped twice: id {id}");
    }

    /// After the ring and every handle are gone: ids `1..=head` were dropped exactly once, and no
    /// payload with a larger id was ever built (a refused push must not build its value).
    pub fn assert_all_dropped_once(&self, head: u64) {
        for (id, count) in self.drops.iter().enumerate().skip(1) {
            // SeqCst on a ghost counter: schedule order only.
            let count = count.load(SeqCst);
            if id as u64 <= head {
                assert_eq!(
                    count, 1,
                    "payload never dropped: id {id} (or dropped {count} times)"
                );
            } else {
                assert_eq!(
                    count, 0,
                    "payload built for an id that was never pushed: {id}"
                );
            }
        }
    }
}

/// An event payload that knows its id and reports its drop. Its loom [`Track`] makes loom's leak
/// check fail if it is never dropped.
pub struct Ev {
    id: u64,
    ledger: StdArc<Ledger>,
    _track: Track<()>,
}

impl fmt::Debug for Ev {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Ev({})", self.id)
    }
}

impl Ev {
    /// The id this payload was built for.
    pub fn id(&self) -> u64 {
        self.id
    }
}

impl Drop for Ev {
    fn drop(&mut self) {
        self.ledger.dropped(self.id);
    }
}

/// The `make` closure for `try_push_with` / `push_with`: builds the payload for the id it is given.
pub fn maker(ledger: &StdArc<Ledger>) -> impl FnOnce(u64) -> Ev {
    let ledger = ledger.clone();
    move |id| Ev {
        id,
        ledger,
        _track: Track::new(()),
    }
}

/// Checks one lent batch: it starts at `expected_first` (per-reader order, no skip, no repeat), its
/// two slices together hold exactly `len()` events, and every slot holds the payload of its own id
/// (no torn or overwritten read). Returns the last id.
pub fn check_batch(batch: &Batch<'_, Ev>, expected_first: u64) -> u64 {
    assert_eq!(
        batch.first_id(),
        expected_first,
        "order violation: batch starts at {} but the reader expected {expected_first}",
        batch.first_id()
    );
    let (a, b) = batch.as_slices();
    assert_eq!(
        a.len() + b.len(),
        batch.len(),
        "order violation: slices do not cover the batch"
    );
    assert!(!a.is_empty(), "order violation: empty first slice");
    for (offset, ev) in a.iter().chain(b).enumerate() {
        let id = batch.first_id() + offset as u64;
        assert_eq!(
            ev.id(),
            id,
            "overwritten read: the slot of id {id} holds id {}",
            ev.id()
        );
    }
    assert_eq!(
        batch.first_id() + batch.len() as u64 - 1,
        batch.last_id(),
        "order violation: last_id disagrees with len"
    );
    batch.last_id()
}

/// A ring of `capacity` slots for `max_readers` readers, with ids `1..=pushed` already pushed by
/// `try_push_with` (each push must get its id). The models' common setup, before any thread starts.
pub fn ring_with(
    ledger: &StdArc<Ledger>,
    capacity: usize,
    max_readers: usize,
    pushed: u64,
) -> (Producer<Ev>, ReplayRing<Ev>) {
    let (mut producer, ring) = ReplayRing::<Ev>::builder()
        .capacity(capacity)
        .max_readers(max_readers)
        .build()
        .unwrap();
    for id in 1..=pushed {
        assert_eq!(producer.try_push_with(maker(ledger)).ok(), Some(id));
    }
    (producer, ring)
}

/// Capacity 2, one reader, nothing pushed, and that reader live at the empty head.
pub fn empty_ring_with_live_reader(
    ledger: &StdArc<Ledger>,
) -> (Producer<Ev>, ReplayRing<Ev>, Reader<Ev>) {
    let (producer, ring) = ring_with(ledger, 2, 1, 0);
    let reader = ring.reader().unwrap();
    (producer, ring, reader)
}

/// Capacity 1, one reader, id 1 pushed and pinned by a reader that resumed from 0. With
/// `released`, id 1 is then released (floor 2), so only the pin keeps its slot from the producer.
pub fn one_event_pinned(
    ledger: &StdArc<Ledger>,
    released: bool,
) -> (Producer<Ev>, ReplayRing<Ev>, Reader<Ev>) {
    let (producer, ring) = ring_with(ledger, 1, 1, 1);
    let reader = ring.resume(Some(0)).unwrap();
    if released {
        assert_eq!(ring.release_through(1), Ok(2));
    }
    (producer, ring, reader)
}

/// `push_with(..).await` (waiting for space if there is none) must push `id`.
pub fn push_waiting(producer: &mut Producer<Ev>, ledger: &StdArc<Ledger>, id: u64) {
    assert_eq!(block_on(producer.push_with(maker(ledger))).ok(), Some(id));
}

/// The waiting producer thread: [`push_waiting`] for `id`, then hands the producer back.
pub fn spawn_waiting_push(
    mut producer: Producer<Ev>,
    ledger: &StdArc<Ledger>,
    id: u64,
) -> JoinHandle<Producer<Ev>> {
    let ledger = ledger.clone();
    thread::spawn(move || {
        push_waiting(&mut producer, &ledger, id);
        producer
    })
}

/// Reads the batch a replay has pinned with `try_read` (no waiting), checks it starts at `first`,
/// and drops it (unpinning) before returning its last id.
pub fn read_pinned(reader: &mut Reader<Ev>, first: u64) -> u64 {
    let batch = reader
        .try_read()
        .unwrap()
        .unwrap_or_else(|| panic!("id {first} is pinned"));
    check_batch(&batch, first)
}

/// Releases through `id`, which must move the floor to `id + 1`, then [`check_cursors`].
pub fn release_and_check(ring: &ReplayRing<Ev>, id: u64) {
    assert_eq!(ring.release_through(id), Ok(id + 1));
    check_cursors(ring);
}

/// The race of models 2b and 2c, with ids up to 2 pushed, the floor at 2 and `reader` at cursor 2:
/// on a new thread the producer pushes the next id (a pin scan), releases through 2 and tries
/// to push into id 2's slot, refused while a pin covers id 2; on this thread `reader` reads once,
/// which must lend id 2 intact, or nothing yet, or an explicit gap. Returns the producer, then
/// checks the cursors and the drop ledger.
pub fn read_against_a_release_and_reuse(
    producer: Producer<Ev>,
    ring: ReplayRing<Ev>,
    ledger: &StdArc<Ledger>,
    reader: Reader<Ev>,
    others: Vec<Reader<Ev>>,
) {
    read_against_a_release_and_reuse_beside(producer, ring, ledger, reader, others, None);
}

/// As [`read_against_a_release_and_reuse`], with a third thread (`beside`, which returns its
/// reader) joined, and its reader dropped, before the ledger is checked.
pub fn read_against_a_release_and_reuse_beside(
    mut producer: Producer<Ev>,
    ring: ReplayRing<Ev>,
    ledger: &StdArc<Ledger>,
    mut reader: Reader<Ev>,
    others: Vec<Reader<Ev>>,
    beside: Option<JoinHandle<Reader<Ev>>>,
) {
    let next = ring.head() + 1;
    let producer_thread = {
        let ledger = ledger.clone();
        let ring = ring.clone();
        thread::spawn(move || {
            // Room: the floor is 2, and no pin is below 2.
            assert_eq!(producer.try_push_with(maker(&ledger)).ok(), Some(next));
            // The release may overtake the reader; a pin it validated keeps id 2's slot.
            assert_eq!(ring.release_through(2), Ok(3));
            // Into id 2's slot: refused while the reader pins id 2.
            let _ = producer.try_push_with(maker(&ledger));
            check_cursors(&ring);
            producer
        })
    };
    match reader.try_read() {
        Ok(Some(batch)) => {
            check_batch(&batch, 2);
        }
        // Id 2 not published yet, or released before the pin was validated.
        Ok(None) | Err(ReadError::Gap { .. }) => {}
        Err(e) => panic!("read mismatch: unexpected {e:?}"),
    }
    check_cursors(&ring);
    let producer = producer_thread.join().unwrap();
    let beside = beside.map(|thread| thread.join().unwrap());
    let head = ring.head();
    drop((reader, others, beside));
    drop_and_check_ledger(ledger, head, Some(producer), ring);
}

/// The end of a model, after every thread is joined: drops the producer (if the model still holds
/// it), then the ring, then checks that ids `1..=head` were each dropped exactly once.
pub fn drop_and_check_ledger(
    ledger: &Ledger,
    head: u64,
    producer: Option<Producer<Ev>>,
    ring: ReplayRing<Ev>,
) {
    drop(producer);
    drop(ring);
    ledger.assert_all_dropped_once(head);
}

/// `floor <= head + 1`, read in that order (floor first: `head` only grows, so a later `head` is at
/// least the one the releaser validated against).
pub fn check_cursors<T>(ring: &ReplayRing<T>) {
    let floor = ring.floor();
    let head = ring.head();
    assert!(
        floor <= head + 1,
        "cursor invariant violated: floor {floor} > head {head} + 1"
    );
}

/// "This has happened", as a loom atomic: `set` is a `Release` store, `get` an `Acquire` load.
///
/// A check such as "a resume started after the release completed" must mean *happens-after*:
/// loom's partial-order reduction only reorders operations on the same object, so a ghost flag
/// outside loom's view would silently never be observed set at the interesting moment. This flag
/// is a loom object, so loom explores both orders of `set` and `get`, and a `true` from `get`
/// makes everything before `set` happen-before everything after `get`.
#[derive(Debug, Clone)]
pub struct Flag(loom::sync::Arc<loom::sync::atomic::AtomicBool>);

impl Default for Flag {
    fn default() -> Self {
        Flag(loom::sync::Arc::new(loom::sync::atomic::AtomicBool::new(
            false,
        )))
    }
}

impl Flag {
    /// Records that the event happened.
    pub fn set(&self) {
        // Release: pairs with the Acquire in `get`; the event happens-before whoever sees the flag.
        self.0.store(true, loom::sync::atomic::Ordering::Release);
    }

    /// Whether the event has happened (and, if so, happens-before the caller's next steps).
    pub fn get(&self) -> bool {
        // Acquire: pairs with the Release in `set`.
        self.0.load(loom::sync::atomic::Ordering::Acquire)
    }
}

/// How much of the schedule space a model explores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    /// No preemption bound: every schedule (within loom's memory model, see docs/verification.md).
    Exhaustive,
    /// At most this many preemptions per execution.
    Preemptions(usize),
}

impl fmt::Display for Bound {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Bound::Exhaustive => f.write_str("exhaustive"),
            Bound::Preemptions(n) => write!(f, "preemptions<={n}"),
        }
    }
}

/// Runs `f` under loom with the model's bound and prints one summary line:
/// `loom-model <name>: <executions> executions, <bound>, <secs>s`.
///
/// `LOOM_MAX_DURATION` and `LOOM_MAX_PERMUTATIONS` are ignored on purpose: they end the search early
/// and still pass. `LOOM_MAX_PREEMPTIONS` overrides the bound (for quick local runs; `scripts/loom`
/// unsets it). `LOOM_MAX_BRANCHES` defaults to 10,000. With `LOOM_LOG` set, loom's own `model()` runs
/// instead, so its trace output is printed.
pub fn model<F>(name: &str, bound: Bound, f: F)
where
    F: Fn() + Sync + Send + 'static,
{
    let executions = StdArc::new(AtomicUsize::new(0));
    let counter = executions.clone();
    let f = move || {
        // SeqCst on a ghost counter: schedule order only.
        counter.fetch_add(1, SeqCst);
        f()
    };
    let start = Instant::now();
    let mut builder = loom::model::Builder::new();
    let bound_text = match std::env::var("LOOM_MAX_PREEMPTIONS") {
        Ok(v) => format!("preemptions<={v} (LOOM_MAX_PREEMPTIONS override)"),
        Err(_) => {
            builder.preemption_bound = match bound {
                Bound::Exhaustive => None,
                Bound::Preemptions(n) => Some(n),
            };
            bound.to_string()
        }
    };
    builder.max_duration = None;
    builder.max_permutations = None;
    if std::env::var("LOOM_MAX_BRANCHES").is_err() {
        builder.max_branches = 10_000;
    }
    if std::env::var("LOOM_LOG").is_ok() {
        loom::model(f);
    } else {
        builder.check(f);
    }
    println!(
        "loom-model {name}: {} executions, {bound_text}, {:.1}s",
        executions.load(SeqCst),
        start.elapsed().as_secs_f64()
    );
}
