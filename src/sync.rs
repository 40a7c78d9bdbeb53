//! The one place that names atomics, `UnsafeCell`, `Arc`, locks and wakers.
//!
//! Under `--cfg replay_ring_loom` every primitive is swapped for its loom twin so the models in
//! `loom-tests/` explore the real protocol. The cfg is the crate's own (not bare `loom`) so that a
//! global `RUSTFLAGS="--cfg loom"` in a downstream project never flips this crate into model mode.

#[cfg(not(replay_ring_loom))]
mod imp {
    use std::task::Waker;

    /// atomic-waker's `AtomicWaker`, given a clone made before its lock is taken. Its `register`
    /// clones the waker while it holds its registration lock, and a `clone` that panics leaves the
    /// lock held for good: every later registration of that entry is then dropped, also another
    /// reader's once the entry is reused, and that reader is never woken. A clone made first
    /// panics with nothing held. `register` clones it again only to replace a waker of another
    /// task, from a clone that just succeeded. One clone and drop per registration, that is per
    /// park, not per event.
    #[derive(Debug, Default)]
    pub(crate) struct AtomicWaker(atomic_waker::AtomicWaker);

    impl AtomicWaker {
        pub(crate) const fn new() -> Self {
            AtomicWaker(atomic_waker::AtomicWaker::new())
        }
        #[inline]
        pub(crate) fn register(&self, waker: &Waker) {
            let owned = waker.clone();
            self.0.register(&owned);
        }
        #[inline]
        pub(crate) fn wake(&self) {
            self.0.wake();
        }
        #[inline]
        pub(crate) fn take(&self) -> Option<Waker> {
            self.0.take()
        }
    }
    pub(crate) use std::sync::atomic::{
        fence, AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering,
    };
    pub(crate) use std::sync::Arc;

    /// A lock for cold paths only (the close reason). Never taken on push or read.
    pub(crate) type Mutex<T> = parking_lot::Mutex<T>;

    pub(crate) fn lock<T>(m: &Mutex<T>) -> parking_lot::MutexGuard<'_, T> {
        m.lock()
    }

    /// Zero-sized stand-in for loom's access tracking of one slot.
    ///
    /// The slots themselves are std `UnsafeCell`s in every build, because a reader borrows a whole run
    /// of them as one `&[T]`; loom's cell cannot hand out such a slice. Under loom this type carries a
    /// `loom::cell::UnsafeCell<()>` whose guards span exactly the real accesses, so loom still reports
    /// a read that overlaps a write of the same slot.
    #[derive(Debug)]
    pub(crate) struct SlotTracker;

    /// One [`SlotTracker`] per slot index. Outside loom there is nothing to track, so this holds
    /// nothing: building a ring costs no pass over its capacity.
    #[derive(Debug)]
    pub(crate) struct SlotTrackers;

    impl SlotTrackers {
        pub(crate) fn new(_capacity: usize) -> Self {
            SlotTrackers
        }

        /// The tracker of slot `index`.
        #[inline(always)]
        pub(crate) fn get(&self, _index: usize) -> &SlotTracker {
            &SlotTracker
        }
    }

    impl SlotTracker {
        #[inline(always)]
        pub(crate) fn read(&self) -> ReadTrack {
            ReadTrack
        }
        #[inline(always)]
        pub(crate) fn write(&self) -> WriteTrack {
            WriteTrack
        }
    }

    /// Held while a reader borrows a slot.
    #[derive(Debug)]
    pub(crate) struct ReadTrack;
    /// Held while the producer writes a slot.
    #[derive(Debug)]
    pub(crate) struct WriteTrack;

    /// Mutant hook: always the real ordering outside loom builds.
    #[inline(always)]
    pub(crate) fn mutant(_name: &str) -> bool {
        false
    }

    /// The cheap half of an asymmetric fence pair, for the side that runs on every push or read.
    ///
    /// Where the kernel offers `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)`, this is only a
    /// compiler fence: the waiting side's [`heavy_fence`] makes every running thread of the process
    /// execute a full barrier, which orders our store before our load exactly as if we had issued a
    /// `fence(SeqCst)` ourselves (the liburcu / folly asymmetric-fence argument). Elsewhere it is a
    /// plain `fence(SeqCst)`. Under loom the light half is a `fence(SeqCst)` or, with
    /// `REPLAY_RING_LIGHT_FENCE=none`, nothing (see the loom twin).
    ///
    /// `asymmetric` must be what [`init_fences`] returned (possibly and-ed with a per-ring choice),
    /// and the same value must reach the matching [`heavy_fence`]. It is decided once per ring so
    /// the push path reads one field it already has in cache.
    #[inline(always)]
    pub(crate) fn light_fence(_name: &str, asymmetric: bool) {
        if asymmetric {
            std::sync::atomic::compiler_fence(Ordering::SeqCst);
        } else {
            fence(Ordering::SeqCst);
        }
    }

    /// The expensive half, for the side that is about to sleep anyway.
    ///
    /// With `asymmetric`, the matching light halves are compiler fences only, so this side *must*
    /// issue the membarrier: a `fence(SeqCst)` here would order nothing on the other threads. If
    /// the system call fails after registration succeeded (a seccomp filter installed later, for
    /// example), no correct fallback exists — the light sides have already run without a fence —
    /// so the process aborts with a message, as liburcu does, rather than lose wake-ups silently.
    pub(crate) fn heavy_fence(_name: &str, asymmetric: bool) {
        if asymmetric {
            if let Err(errno) = membarrier::barrier() {
                membarrier::die(errno);
            }
        } else {
            fence(Ordering::SeqCst);
        }
    }

    /// Registers this process for expedited membarriers, once, and says whether asymmetric fences
    /// are available. Called when a ring is built; the answer never changes afterwards.
    pub(crate) fn init_fences() -> bool {
        membarrier::init();
        membarrier::expedited()
    }

    #[cfg(all(target_os = "linux", not(miri)))]
    mod membarrier {
        use std::sync::atomic::{AtomicU8, Ordering::Acquire, Ordering::Release};

        const UNKNOWN: u8 = 0;
        const EXPEDITED: u8 = 1;
        const UNSUPPORTED: u8 = 2;
        // From <linux/membarrier.h>.
        const CMD_PRIVATE_EXPEDITED: libc::c_int = 1 << 3;
        const CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_int = 1 << 4;

        static STATE: AtomicU8 = AtomicU8::new(UNKNOWN);

        /// `Err(errno)` when the system call fails.
        fn membarrier(cmd: libc::c_int) -> Result<(), i32> {
            // SAFETY: `membarrier` takes two integers and touches no memory of ours; an
            // unsupported command or kernel returns -1 and sets errno.
            let ret = unsafe {
                libc::syscall(
                    libc::SYS_membarrier,
                    cmd,
                    0 as libc::c_uint,
                    0 as libc::c_int,
                )
            };
            if ret == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
            }
        }

        pub(super) fn init() {
            // Acquire: pairs with the Release store below, made by an earlier initialiser.
            if STATE.load(Acquire) == UNKNOWN {
                let supported = membarrier(CMD_REGISTER_PRIVATE_EXPEDITED).is_ok();
                // Release: pairs with the Acquire loads below; racing initialisers store the
                // same answer.
                STATE.store(if supported { EXPEDITED } else { UNSUPPORTED }, Release);
            }
        }

        #[inline(always)]
        pub(super) fn expedited() -> bool {
            // Acquire: pairs with the Release store in `init`, which happened before the ring
            // reached this thread.
            STATE.load(Acquire) == EXPEDITED
        }

        /// Only called once `expedited()` said yes (the ring chose asymmetric fences).
        pub(super) fn barrier() -> Result<(), i32> {
            membarrier(CMD_PRIVATE_EXPEDITED)
        }

        /// The one-sided state is unrecoverable: report it and abort (never unwind: the caller
        /// may be inside a `Drop` or a poll, and continuing would lose wake-ups).
        #[cold]
        pub(super) fn die(errno: i32) -> ! {
            eprintln!(
                "replay-ring: membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) failed with errno \
                 {errno} after registration succeeded; the asymmetric wake-up fences cannot be \
                 completed, aborting (see docs/design.md, \"Who pays for the wake-up fences\")"
            );
            std::process::abort()
        }
    }

    #[cfg(not(all(target_os = "linux", not(miri))))]
    mod membarrier {
        pub(super) fn init() {}
        #[inline(always)]
        pub(super) fn expedited() -> bool {
            false
        }
        pub(super) fn barrier() -> Result<(), i32> {
            // Unreachable: `expedited()` is false, so no ring is asymmetric here.
            Err(0)
        }
        pub(super) fn die(errno: i32) -> ! {
            panic!("replay-ring: membarrier unavailable (errno {errno}) in an asymmetric ring")
        }
    }
}

#[cfg(replay_ring_loom)]
mod imp {
    /// loom's `AtomicWaker` takes the waker by value; this gives it atomic-waker's by-reference API.
    #[derive(Debug, Default)]
    pub(crate) struct AtomicWaker(loom::future::AtomicWaker);

    impl AtomicWaker {
        pub(crate) fn new() -> Self {
            AtomicWaker(loom::future::AtomicWaker::new())
        }
        pub(crate) fn register(&self, waker: &std::task::Waker) {
            self.0.register_by_ref(waker);
        }
        pub(crate) fn wake(&self) {
            self.0.wake();
        }
        pub(crate) fn take(&self) -> Option<std::task::Waker> {
            self.0.take_waker()
        }
    }
    pub(crate) use loom::sync::atomic::{
        fence, AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering,
    };
    pub(crate) use loom::sync::Arc;

    pub(crate) type Mutex<T> = loom::sync::Mutex<T>;

    pub(crate) fn lock<T>(m: &Mutex<T>) -> loom::sync::MutexGuard<'_, T> {
        m.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Loom-tracked access to one slot; see the std twin.
    #[derive(Debug)]
    pub(crate) struct SlotTracker(loom::cell::UnsafeCell<()>);

    /// One loom cell per slot index, allocated with the ring; see the std twin.
    #[derive(Debug)]
    pub(crate) struct SlotTrackers(Box<[SlotTracker]>);

    impl SlotTrackers {
        pub(crate) fn new(capacity: usize) -> Self {
            SlotTrackers(
                (0..capacity)
                    .map(|_| SlotTracker(loom::cell::UnsafeCell::new(())))
                    .collect(),
            )
        }

        /// The tracker of slot `index` (`< capacity`).
        pub(crate) fn get(&self, index: usize) -> &SlotTracker {
            &self.0[index]
        }
    }

    impl SlotTracker {
        pub(crate) fn read(&self) -> ReadTrack {
            ReadTrack(self.0.get())
        }
        pub(crate) fn write(&self) -> WriteTrack {
            WriteTrack(self.0.get_mut())
        }
    }

    /// Loom records a read access for as long as this guard lives.
    #[derive(Debug)]
    pub(crate) struct ReadTrack(#[allow(dead_code)] loom::cell::ConstPtr<()>);
    /// Loom records a write access for as long as this guard lives.
    #[derive(Debug)]
    pub(crate) struct WriteTrack(#[allow(dead_code)] loom::cell::MutPtr<()>);

    /// Mutation testing: `REPLAY_RING_MUTANT=<name>` weakens the named protocol step, so the loom
    /// models can prove they notice. Read per call (cheap enough in a model) so one build serves
    /// every mutant; see `docs/verification.md`.
    pub(crate) fn mutant(name: &str) -> bool {
        std::env::var("REPLAY_RING_MUTANT").is_ok_and(|m| m == name)
    }

    /// How the light half of an asymmetric pair is modelled, from `REPLAY_RING_LIGHT_FENCE`:
    ///
    /// - unset or `fence`: a `fence(SeqCst)`, which is what the pair guarantees together (and what
    ///   a symmetric ring really issues). Every model runs in this configuration.
    /// - `none`: nothing at all, which is what the hot side of an asymmetric ring issues (a
    ///   compiler fence). Loom cannot model `membarrier`, so the waiting models would report false
    ///   deadlocks; the non-blocking models run in this configuration too, to prove that no
    ///   ordering outside the wake-up pairs leans on a light fence.
    pub(crate) fn light_fence(name: &str, _asymmetric: bool) {
        if std::env::var("REPLAY_RING_LIGHT_FENCE").is_ok_and(|v| v == "none") {
            return;
        }
        super::seq_cst_fence(name);
    }

    /// See `light_fence`.
    pub(crate) fn heavy_fence(name: &str, _asymmetric: bool) {
        super::seq_cst_fence(name);
    }

    pub(crate) fn init_fences() -> bool {
        true
    }
}

pub(crate) use imp::*;

/// `ordering` unless the named mutant is active, then `weakened`.
#[inline(always)]
pub(crate) fn ord(name: &str, ordering: Ordering, weakened: Ordering) -> Ordering {
    if mutant(name) {
        weakened
    } else {
        ordering
    }
}

/// A `fence(SeqCst)` that the named mutant removes.
#[inline(always)]
pub(crate) fn seq_cst_fence(name: &str) {
    if !mutant(name) {
        fence(Ordering::SeqCst);
    }
}

/// Whether a ring's `initialised` bitmaps carry loom's edges: in loom builds, a ring built with
/// `Builder::loom_model_metrics_walk` (model 8w); nothing in other builds.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct WalkModel(#[cfg(replay_ring_loom)] pub(crate) bool);

/// Which entries of a reader-table segment hold a value: bit `i % 64` of word `i / 64`. Each bit
/// is set once, by the claim that initialised its entry, and read by the walks that can meet an
/// entry no claim has initialised yet (the metrics walk and the segment's `Drop`) and by a debug
/// assertion.
///
/// The bits are std atomics in every build, which loom does not see, so that the debug assertion
/// and `Drop` add no edge (and no schedule point) to a model. In a ring that models the metrics
/// walk (loom builds only, [`WalkModel`]) every word also has a loom twin, which carries the one
/// pair that matters: a claim's Release `set` and the walk's Acquire `is_set`. Model 8w
/// (`docs/verification.md`) races the walk with a registration, and its two mutants break the
/// pair. Other models leave the twin out: each set would add a schedule point to every claim of a
/// fresh entry, which the preemption-bounded models pay for in reach.
pub(crate) struct InitialisedBits {
    words: Box<[std::sync::atomic::AtomicU64]>,
    #[cfg(replay_ring_loom)]
    modelled: Option<Box<[loom::sync::atomic::AtomicU64]>>,
}

impl InitialisedBits {
    /// Bits for `len` entries, none set.
    pub(crate) fn new(len: usize, walk: WalkModel) -> Self {
        let words = len.div_ceil(64);
        // Read only by loom builds.
        let _ = walk;
        InitialisedBits {
            words: (0..words)
                .map(|_| std::sync::atomic::AtomicU64::new(0))
                .collect(),
            #[cfg(replay_ring_loom)]
            modelled: walk.0.then(|| {
                (0..words)
                    .map(|_| loom::sync::atomic::AtomicU64::new(0))
                    .collect()
            }),
        }
    }

    /// Records that entry `offset` holds a value. Call after writing the entry (and after any
    /// loom access guard on it ends): a walk that sees the bit reads the entry.
    pub(crate) fn set(&self, offset: usize) {
        let bit = 1 << (offset % 64);
        // Release: pairs with the Acquire load in `is_set`, so a walk that finds the bit sees the
        // entry written.
        let set = ord(
            "initialised_set_relaxed",
            Ordering::Release,
            Ordering::Relaxed,
        );
        #[cfg(replay_ring_loom)]
        if let Some(modelled) = &self.modelled {
            modelled[offset / 64].fetch_or(bit, set);
        }
        self.words[offset / 64].fetch_or(bit, set);
    }

    /// Whether entry `offset` holds a value; if so, its initialisation happens-before this call.
    pub(crate) fn is_set(&self, offset: usize) -> bool {
        // Acquire: pairs with the Release RMW in `set`.
        let get = ord(
            "initialised_load_relaxed",
            Ordering::Acquire,
            Ordering::Relaxed,
        );
        #[cfg(replay_ring_loom)]
        if let Some(modelled) = &self.modelled {
            return modelled[offset / 64].load(get) & (1 << (offset % 64)) != 0;
        }
        self.words[offset / 64].load(get) & (1 << (offset % 64)) != 0
    }

    /// Whether entry `offset` holds a value, with no ordering: for a check that must not add an
    /// edge that would hide a missing one. If the initialisation happens-before the call,
    /// coherence makes its bit visible.
    pub(crate) fn is_set_unordered(&self, offset: usize) -> bool {
        // Relaxed: see above.
        self.words[offset / 64].load(Ordering::Relaxed) & (1 << (offset % 64)) != 0
    }

    /// Every entry that holds a value, given exclusive access (the segment's `Drop`).
    pub(crate) fn set_offsets(&mut self) -> impl Iterator<Item = usize> + '_ {
        self.words.iter_mut().enumerate().flat_map(|(w, word)| {
            let mut word = *word.get_mut();
            std::iter::from_fn(move || {
                (word != 0).then(|| {
                    let offset = w * 64 + word.trailing_zeros() as usize;
                    word &= word - 1;
                    offset
                })
            })
        })
    }
}
