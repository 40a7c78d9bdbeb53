//! Typed errors of every backend operation.

use std::fmt;

use replay_ring::CloseReason;
use replay_ring_sse::{Epoch, StreamId};

/// Everything that can go wrong talking to the Redis backend.
///
/// Contract outcomes (a full window, a fenced producer, a resume below the floor…) have their own
/// variants, distinct from infrastructure failures, so a caller never mistakes one for the other.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// Redis could not be reached, or the connection dropped or timed out before a reply. Retry
    /// later. (For an append, see [`Error::Unknown`] instead: its outcome is not known.)
    Unavailable(redis::RedisError),
    /// An append was sent but its reply was lost (connection dropped or timed out): the event may
    /// or may not be in the log. The producer keeps the payload and resends it, with the same id,
    /// before its next append (or on [`resolve_pending`](crate::RedisProducer::resolve_pending));
    /// the server recognises a repeat, so the retry neither duplicates nor skips. Do not append
    /// the same payload again yourself: it is already queued. (If the lease moves to another
    /// producer first, the next call is [`Error::Fenced`] and pending events are never resent:
    /// each is in the log if an earlier send of it arrived, and the new producer continues after
    /// the head either way, so ids still neither repeat nor skip.)
    Unknown {
        /// The id the append would have (or has) received.
        id: u64,
        /// The transport error.
        source: redis::RedisError,
    },
    /// Redis is over `maxmemory` and refused a write (`-OOM`). Nothing was written.
    OutOfMemory(String),
    /// The stream's keys hold something this crate did not write (wrong type, garbage field,
    /// an entry missing from the log). The stream cannot be trusted; treat it as lost.
    Corrupt {
        /// The stream.
        stream: StreamId,
        /// What was found.
        detail: String,
    },
    /// The stream does not exist: never created, deleted, or expired after being abandoned
    /// ("stream lost").
    NotFound {
        /// The stream.
        stream: StreamId,
    },
    /// The stream exists, but as another incarnation (another epoch) than the one this handle or
    /// cursor refers to: it was deleted or expired and created again ("stream lost").
    EpochChanged {
        /// The stream.
        stream: StreamId,
        /// The epoch this handle refers to.
        expected: Epoch,
        /// The epoch Redis holds now (`None` if the stored value is unreadable).
        current: Option<Epoch>,
    },
    /// The window is full (`capacity` events retained): nothing was appended and no id consumed.
    Full {
        /// Oldest retained id.
        floor: u64,
        /// Newest id.
        head: u64,
        /// The window's capacity.
        capacity: u64,
    },
    /// This producer does not hold the lease (another producer took it, or it expired): nothing was
    /// appended. Acquire the lease again to continue.
    Fenced {
        /// The fencing token of the current holder, if any.
        holder: Option<u64>,
    },
    /// The [`RedisProducer`](crate::RedisProducer) a [`LeaseKeeper`](crate::LeaseKeeper) renews
    /// for was dropped (or consumed by a close or a hand-over): the keeper renews no more, and a
    /// lease left behind lapses after [`RedisConfig::lease`](crate::RedisConfig::lease).
    ProducerDropped,
    /// Lease acquisition refused: another producer holds it.
    LeaseHeld {
        /// The holder's fencing token.
        holder: u64,
        /// Milliseconds until the holder's lease expires unless renewed.
        expires_in_ms: i64,
    },
    /// The stream was closed; nothing more can be appended.
    Closed(CloseReason),
    /// A resend of an append whose outcome was unknown found a *different* payload under that id:
    /// the caller changed the event between the attempt and the retry.
    Conflict {
        /// The id in question.
        id: u64,
    },
    /// The log's head is not where this producer expects it: another writer appended while this
    /// producer held the lease (impossible unless the keys were modified outside this crate).
    OutOfSequence {
        /// The head in Redis.
        head: u64,
        /// The id this producer tried to write.
        id: u64,
    },
    /// Redis's log ends before an id this process saw in it: Redis lost events it had
    /// acknowledged (restored from an older snapshot, or a replica that lagged was promoted).
    /// Continuing would hand those ids out again with other events, so the handle refuses to:
    /// treat the stream as lost, delete it ([`RedisStream::delete`](crate::RedisStream::delete)
    /// removes only this incarnation) and create it again, which gives it a new epoch and every
    /// old cursor a `404 stream_lost`.
    LogRolledBack {
        /// The stream.
        stream: StreamId,
        /// The highest head seen in this incarnation.
        seen: u64,
        /// The head Redis has now.
        head: u64,
    },
    /// Ids would reach 2^53 (the limit of exact arithmetic in Redis's Lua).
    IdsExhausted,
    /// A payload is longer than
    /// [`RedisConfig::max_payload_bytes`](crate::RedisConfig::max_payload_bytes). Nothing was
    /// sent (nor the rest of its batch) and no id consumed.
    TooLarge {
        /// The payload's length.
        bytes: u64,
        /// The limit.
        limit: u64,
    },
    /// Resume below the retained window: `requested + 1 ..= floor - 1` were released.
    Gap {
        /// The cursor.
        requested: u64,
        /// Oldest retained id.
        floor: u64,
        /// Newest id.
        head: u64,
    },
    /// Resume or release ahead of the newest id: the cursor is not from this stream.
    AheadOfHead {
        /// The cursor.
        requested: u64,
        /// Newest id.
        head: u64,
    },
    /// Every reader place of this stream handle is taken (see
    /// [`RedisStream::with_max_readers`](crate::RedisStream::with_max_readers)); retry later.
    TooManyReaders {
        /// The handle's reader limit.
        limit: usize,
    },
    /// Invalid configuration or argument (message says which).
    InvalidArgument(&'static str),
    /// Any other error reply from Redis.
    Server(redis::RedisError),
}

impl Error {
    /// Classifies a redis-rs error for `stream`.
    pub(crate) fn from_redis(stream: &StreamId, err: redis::RedisError) -> Error {
        if unreachable_for_now(&err) {
            return Error::Unavailable(err);
        }
        if let Some((node, slot)) = err.redirect_node() {
            // A Redis Cluster node redirecting to the node that serves the stream's slot, on a
            // backend that took its URL's node for a single Redis (a cluster client follows
            // redirections, and turns the ones that do not end into `TRYAGAIN`): the node
            // refused `INFO cluster`. For this backend the stream is out of reach for good.
            return Error::Server(redis::RedisError::from((
                err.kind(),
                "the stream's keys are in a Redis Cluster slot that another node serves, and \
                 this backend talks to its URL's node alone: that node refused `INFO cluster`, \
                 which tells it a cluster (docs/scaling.md, Redis Cluster)",
                format!("slot {slot} is served by {node}"),
            )));
        }
        match err.code() {
            Some("OOM") => Error::OutOfMemory(err.detail().unwrap_or("").to_owned()),
            Some("RRCORRUPT") => Error::Corrupt {
                stream: *stream,
                detail: err.detail().unwrap_or("").to_owned(),
            },
            Some("WRONGTYPE") => Error::Corrupt {
                stream: *stream,
                detail: format!("a key holds the wrong type: {}", err.detail().unwrap_or("")),
            },
            // An `ERR` raised inside one of the scripts (e.g. HINCRBY on a garbage field) means the
            // data, not the request, is broken: the arguments are all produced by this crate.
            // Except an ACL rule denying the script a command or a key: that is the deployment's
            // answer to the request.
            Some("ERR")
                if err
                    .detail()
                    .is_some_and(|d| d.contains("script:") && !is_acl_denial(d)) =>
            {
                Error::Corrupt {
                    stream: *stream,
                    detail: err.detail().unwrap_or("").to_owned(),
                }
            }
            _ => Error::Server(err),
        }
    }

    /// Classifies the failure of a write that may have run all the same (its request went out
    /// again after its connection closed under it): whatever a later attempt was told (an ACL
    /// rule, `-OOM`, a failed login), it is the lost connection ([`Error::Unavailable`], so
    /// `Error::Unknown` for an append), never a refusal. Only data this crate did not write is
    /// known as such whichever attempt ran.
    pub(crate) fn from_redis_after_resend(stream: &StreamId, err: redis::RedisError) -> Error {
        if unreachable_for_now(&err) {
            return Error::Unavailable(err);
        }
        match Error::from_redis(stream, err) {
            corrupt @ Error::Corrupt { .. } => corrupt,
            other => Error::Unavailable(crate::connection::may_have_run(other.to_string())),
        }
    }

    /// Classifies a failure to connect: Redis down, or busy for a moment, is
    /// [`Error::Unavailable`]; anything else (credentials refused or missing, an unknown
    /// database) is a configuration to fix, [`Error::Server`], not worth retrying as it is.
    pub(crate) fn from_connect(err: redis::RedisError) -> Error {
        if unreachable_for_now(&err) {
            return Error::Unavailable(err);
        }
        if matches!(
            err.kind(),
            redis::ErrorKind::Parse | redis::ErrorKind::UnexpectedReturnType
        ) {
            // Typically a URL with the port of another service (HTTP, say): its first answer
            // does not parse, which redis-rs reports in terms of bytes.
            return Error::Server(redis::RedisError::from((
                err.kind(),
                "the server at this address does not speak the Redis protocol (RESP): check the URL's host and port",
                err.to_string(),
            )));
        }
        Error::Server(err)
    }

    /// Whether retrying the same call later may succeed (Redis down, out of memory, window full).
    ///
    /// [`Error::Unknown`] is *not* transient in this sense: the producer already keeps that event
    /// and resends it itself; calling `append` again with the same payload would add it twice.
    ///
    /// ```
    /// let e = replay_ring_redis::Error::Full { floor: 1, head: 8, capacity: 8 };
    /// assert!(e.is_transient());
    /// assert!(!replay_ring_redis::Error::IdsExhausted.is_transient());
    /// ```
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            Error::Unavailable(_) | Error::OutOfMemory(_) | Error::Full { .. }
        )
    }

    /// Whether the stream is gone for good ("stream lost"): not found, another epoch, or corrupt.
    ///
    /// ```
    /// use replay_ring_sse::StreamId;
    /// let e = replay_ring_redis::Error::NotFound { stream: StreamId::new("s").unwrap() };
    /// assert!(e.is_stream_lost());
    /// ```
    pub fn is_stream_lost(&self) -> bool {
        matches!(
            self,
            Error::NotFound { .. }
                | Error::EpochChanged { .. }
                | Error::Corrupt { .. }
                | Error::LogRolledBack { .. }
        )
    }
}

/// Whether a script's error is an ACL rule denying it a command or a key. Redis 7.0 says "The
/// user executing the script can't run this command or subcommand" (or "can't access at least
/// one of the keys"); 7.2 and later say "ACL failure in script: User … has no permissions to …".
fn is_acl_denial(detail: &str) -> bool {
    [
        "can't run this command",
        "can't access",
        "ACL failure",
        "no permissions",
    ]
    .iter()
    .any(|words| detail.contains(words))
}

/// Redis cannot answer now, but the same request can succeed shortly: it is down or the
/// connection broke, it is replaying its AOF after a restart, or a cluster or replica is
/// failing over.
fn unreachable_for_now(err: &redis::RedisError) -> bool {
    err.is_io_error()
        || err.is_timeout()
        || err.is_connection_dropped()
        || err.is_connection_refusal()
        // A Redis Cluster client with no connected node to send the command to (every node it
        // knows is down or being reconnected): the command never went out.
        || err.kind() == redis::ErrorKind::ClusterConnectionNotFound
        || matches!(
            err.code(),
            // `BUSY`: another client's script or function is running past the busy threshold;
            // Redis answers everyone else this way until it ends or is killed. `UNBLOCKED`: a
            // primary that turned replica (a failover) ended a blocking read, which did nothing.
            // `NOREPLICAS`: a primary set up with `min-replicas-to-write` that has too few
            // replicas in reach refused a write (a replica restarting, or this primary cut off
            // from them: docs/scaling.md, Replication and failover).
            Some(
                "LOADING" | "MASTERDOWN" | "TRYAGAIN" | "CLUSTERDOWN" | "READONLY" | "BUSY"
                    | "UNBLOCKED" | "NOREPLICAS"
            )
        )
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Unavailable(e) => write!(f, "redis unavailable: {e}"),
            Error::Unknown { id, source } => write!(
                f,
                "append of id {id} has an unknown outcome ({source}): Redis may or may not have stored it"
            ),
            Error::OutOfMemory(d) => write!(f, "redis is out of memory, nothing written: {d}"),
            Error::Corrupt { stream, detail } => {
                write!(f, "stream {} has data this crate did not write: {detail}", stream.as_str())
            }
            Error::NotFound { stream } => write!(
                f,
                "stream {} not found (never created, deleted or expired): stream lost",
                stream.as_str()
            ),
            Error::EpochChanged { stream, expected, current } => match current {
                Some(c) => write!(
                    f,
                    "stream {} is now epoch {c}, not {expected}: stream lost",
                    stream.as_str()
                ),
                None => write!(
                    f,
                    "stream {} no longer has epoch {expected}: stream lost",
                    stream.as_str()
                ),
            },
            Error::Full { floor, head, capacity } => write!(
                f,
                "window full: {capacity} events retained ({floor}..={head}); nothing appended"
            ),
            Error::Fenced { holder: Some(h) } => {
                write!(f, "producer fenced: the lease is held by token {h}; nothing appended")
            }
            Error::Fenced { holder: None } => {
                write!(f, "producer fenced: the lease expired; nothing appended")
            }
            Error::LeaseHeld { holder, expires_in_ms } => write!(
                f,
                "producer lease held by token {holder} (expires in {expires_in_ms} ms unless renewed)"
            ),
            Error::ProducerDropped => f.write_str(
                "the producer was dropped: its lease is no longer renewed (it lapses after the \
                 lease time unless the producer closed or handed it over)",
            ),
            Error::Closed(reason) => write!(f, "stream closed: {reason}"),
            Error::Conflict { id } => {
                write!(f, "id {id} already holds a different payload than the one resent")
            }
            Error::OutOfSequence { head, id } => {
                write!(f, "append of id {id} out of sequence: the log's head is {head}")
            }
            Error::LogRolledBack { stream, seen, head } => write!(
                f,
                "stream {stream} lost events in Redis: its log ends at id {head}, but id {seen} was seen in it (a restore from an older snapshot, or a failover to a lagging replica), so it cannot be continued under its epoch"
            ),
            Error::IdsExhausted => write!(f, "ids exhausted (2^53)"),
            Error::TooLarge { bytes, limit } => write!(
                f,
                "a payload of {bytes} bytes exceeds max_payload_bytes ({limit}); nothing was \
                 sent"
            ),
            Error::Gap { requested, floor, head } => write!(
                f,
                "cannot resume after id {requested}: events {}..={} were released (retained {floor}..={head})",
                requested.saturating_add(1),
                floor.saturating_sub(1)
            ),
            Error::AheadOfHead { requested, head } => write!(
                f,
                "id {requested} is ahead of the stream's newest id {head} (state mismatch)"
            ),
            Error::TooManyReaders { limit } => {
                write!(f, "all {limit} reader places are in use; retry later")
            }
            Error::InvalidArgument(m) => write!(f, "invalid argument: {m}"),
            Error::Server(e) => write!(f, "redis error: {e}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Unavailable(e) | Error::Server(e) | Error::Unknown { source: e, .. } => Some(e),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `text`, an error reply as Redis sends it, classified for a stream.
    fn classify(text: &str) -> Error {
        let reply = format!("-{text}\r\n");
        let err = redis::parse_redis_value(reply.as_bytes())
            .unwrap()
            .extract_error()
            .unwrap_err();
        Error::from_redis(&StreamId::new("s").unwrap(), err)
    }

    #[test]
    fn a_gap_at_the_edges_of_the_id_range_formats_without_overflow() {
        for (requested, floor, head) in [(0, 0, 0), (u64::MAX, u64::MAX, u64::MAX), (3, 9, 12)] {
            let text = Error::Gap {
                requested,
                floor,
                head,
            }
            .to_string();
            assert!(text.contains(&format!("after id {requested}")), "{text}");
        }
        let text = Error::Gap {
            requested: 3,
            floor: 9,
            head: 12,
        }
        .to_string();
        assert!(text.contains("events 4..=8 were released"), "{text}");
    }

    #[test]
    fn acl_denials_in_scripts_are_server_errors_in_every_wording() {
        for text in [
            "ERR The user executing the script can't run this command or subcommand script: \
             8d3d, on @user_script:1.",
            "ERR The user executing the script can't access at least one of the keys mentioned \
             in the command arguments script: 57fa, on @user_script:1.",
            "ERR ACL failure in script: User writer has no permissions to run the 'xtrim' \
             command script: 8d3d, on @user_script:12.",
            "ERR ACL failure in script: User writer has no permissions to access the 'k' key \
             script: 8d3d, on @user_script:12.",
            "NOPERM User writer has no permissions to run the 'evalsha' command",
        ] {
            assert!(matches!(classify(text), Error::Server(_)), "{text}");
        }
    }

    #[test]
    fn other_script_errors_mean_data_this_crate_did_not_write() {
        for text in [
            "ERR Error running script (call to f_0123): @user_script:5: ERR value is not an \
             integer or out of range script: 0123, on @user_script:5.",
            "RRCORRUPT field head is not a decimal number",
            "WRONGTYPE Operation against a key holding the wrong kind of value",
        ] {
            assert!(matches!(classify(text), Error::Corrupt { .. }), "{text}");
        }
    }
}
