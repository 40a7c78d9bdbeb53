//! How backend errors become the SSE layer's resume decisions (and so HTTP statuses).

use replay_ring_sse::{LastEventIdError, ResumeDecision};

use crate::error::Error;

/// The [`ResumeDecision`] for a resume that failed with `error` (`None` for infrastructure
/// failures, which are not a statement about the cursor: answer them with a 503 and let the client
/// retry). `got` is the epoch named by the client's cursor, used for the "stream lost" body.
///
/// | error | decision | HTTP |
/// |---|---|---|
/// | [`Error::Gap`] | `Gap` | 416 |
/// | [`Error::AheadOfHead`] | `Mismatch` | 409 |
/// | [`Error::NotFound`], [`Error::Corrupt`], [`Error::LogRolledBack`] | `StreamLost(UnknownStream)` | 404 |
/// | [`Error::EpochChanged`] | `StreamLost(UnknownEpoch)` | 404 |
///
/// ```
/// use replay_ring_redis::{decision_for, Error};
/// use replay_ring_sse::{status_for, Epoch};
///
/// let gap = Error::Gap { requested: 3, floor: 10, head: 20 };
/// let d = decision_for(&gap, Epoch::new(1)).unwrap();
/// assert_eq!(status_for(&d), 416);
/// assert!(decision_for(&Error::IdsExhausted, Epoch::new(1)).is_none());
/// ```
pub fn decision_for(error: &Error, got: replay_ring_sse::Epoch) -> Option<ResumeDecision> {
    Some(match error {
        Error::Gap {
            requested,
            floor,
            head,
        } => ResumeDecision::Gap {
            requested: *requested,
            floor: *floor,
            head: *head,
        },
        Error::AheadOfHead { requested, head } => ResumeDecision::Mismatch {
            requested: *requested,
            head: *head,
        },
        Error::NotFound { stream }
        | Error::Corrupt { stream, .. }
        | Error::LogRolledBack { stream, .. } => {
            ResumeDecision::StreamLost(LastEventIdError::UnknownStream { stream: *stream })
        }
        Error::EpochChanged {
            stream, current, ..
        } => match current {
            Some(current) => ResumeDecision::StreamLost(LastEventIdError::UnknownEpoch {
                stream: *stream,
                got,
                current: *current,
            }),
            None => ResumeDecision::StreamLost(LastEventIdError::UnknownStream { stream: *stream }),
        },
        _ => return None,
    })
}
