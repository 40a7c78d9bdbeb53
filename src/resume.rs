//! The resume decision as a pure function of three numbers, so that every layer (the ring itself, an
//! HTTP endpoint, a store backed by something other than a ring) answers a `Last-Event-ID` the same
//! way.

use crate::error::ResumeError;

/// What a valid resume replays. The `Ok` side of [`classify_resume`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Resumption {
    /// The client missed `first..=last` (with `first <= last`), all still retained.
    Replay {
        /// The first id to send: `Last-Event-ID + 1`.
        first: u64,
        /// The last id to send: the head at decision time.
        last: u64,
    },
    /// The client has everything up to the head: nothing to replay, continue live.
    AtHead,
}

/// Classifies a resume from `last_event_id` against a window that retains `floor..=head`.
///
/// - `last_event_id > head`: [`ResumeError::AheadOfHead`] — the client claims an id this stream
///   never assigned (its state belongs to another stream or an earlier life of this one);
/// - `last_event_id == head`: [`Resumption::AtHead`];
/// - `floor - 1 <= last_event_id < head`: [`Resumption::Replay`] of exactly
///   `last_event_id + 1 ..= head`;
/// - `last_event_id + 1 < floor`: [`ResumeError::BelowFloor`] — events
///   `last_event_id + 1 ..= floor - 1` were released, and replaying the rest would skip them.
///
/// The ahead-of-head check comes first, and the at-head check before the floor check, so the answer
/// never depends on which of the two cursors a caller happened to load last. A window that has
/// released everything (`floor == head + 1`) still answers `AtHead` for `head`. The function is total:
/// it never panics, whatever the three numbers (a real window always has `floor <= head + 1`).
///
/// [`ReplayRing::resume`](crate::ReplayRing::resume) makes exactly this decision (and then pins the
/// replay, which may still find the floor moved past it and answer `BelowFloor`).
///
/// # Errors
///
/// [`ResumeError::AheadOfHead`] and [`ResumeError::BelowFloor`] as above; never
/// [`ResumeError::TooManyReaders`], which concerns registration, not the cursor.
///
/// ```
/// use replay_ring::{classify_resume, ResumeError, Resumption};
///
/// // The window retains 5..=9.
/// assert_eq!(classify_resume(5, 9, 6), Ok(Resumption::Replay { first: 7, last: 9 }));
/// assert_eq!(classify_resume(5, 9, 4), Ok(Resumption::Replay { first: 5, last: 9 }));
/// assert_eq!(classify_resume(5, 9, 9), Ok(Resumption::AtHead));
/// assert_eq!(
///     classify_resume(5, 9, 3),
///     Err(ResumeError::BelowFloor { requested: 3, floor: 5, head: 9 })
/// );
/// assert_eq!(
///     classify_resume(5, 9, 10),
///     Err(ResumeError::AheadOfHead { requested: 10, head: 9 })
/// );
/// ```
pub fn classify_resume(
    floor: u64,
    head: u64,
    last_event_id: u64,
) -> Result<Resumption, ResumeError> {
    if last_event_id > head {
        return Err(ResumeError::AheadOfHead {
            requested: last_event_id,
            head,
        });
    }
    if last_event_id == head {
        return Ok(Resumption::AtHead);
    }
    // `last_event_id < head <= u64::MAX`: no overflow.
    let first = last_event_id + 1;
    if first < floor {
        return Err(ResumeError::BelowFloor {
            requested: last_event_id,
            floor,
            head,
        });
    }
    Ok(Resumption::Replay { first, last: head })
}
