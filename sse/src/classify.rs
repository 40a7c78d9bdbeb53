//! The resume classification as a pure function of `(floor, head, cursor)`: the same function,
//! signature and result type as the core's `replay_ring::classify_resume`, kept here until the core
//! version is available to this crate (then this file is deleted and `resume.rs` imports the core's).

use replay_ring::ResumeError;

/// What a valid resume replays.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Resumption {
    /// The client missed `first..=last`, all still retained.
    Replay { first: u64, last: u64 },
    /// The client has everything up to the head.
    AtHead,
}

/// `last_event_id > head` → `AheadOfHead`; `== head` → `AtHead`; `last_event_id + 1 < floor` →
/// `BelowFloor`; otherwise `Replay { last_event_id + 1 ..= head }`. Total: never panics.
pub(crate) fn classify_resume(
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
    // `last_event_id < head`: no overflow.
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
