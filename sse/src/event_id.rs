//! The event id wire format `<stream>.<epoch>.<seq>` and strict parsing of an untrusted
//! `Last-Event-ID` header.
//!
//! Grammar (ABNF, see `docs/protocol.md`):
//!
//! ```text
//! event-id = stream "." epoch "." seq
//! stream   = 1*32( ALPHA / DIGIT / "-" / "_" )
//! epoch    = "0" / ( %x31-39 / %x61-66 ) *15( DIGIT / %x61-66 )   ; lowercase hex, no leading zero
//! seq      = "0" / %x31-39 *19DIGIT                               ; decimal u64, no leading zero
//! ```
//!
//! Every id has exactly one spelling, so `format(parse(s)) == s` for every accepted `s`.

use std::fmt;
use std::str::FromStr;

/// Longest stream name, in bytes.
///
/// ```
/// use replay_ring_sse::{StreamId, MAX_STREAM_LEN};
/// assert!(StreamId::new(&"s".repeat(MAX_STREAM_LEN)).is_ok());
/// assert!(StreamId::new(&"s".repeat(MAX_STREAM_LEN + 1)).is_err());
/// ```
pub const MAX_STREAM_LEN: usize = 32;

/// Longest accepted event id: a 32-byte stream, 16 hex digits of epoch, 20 digits of sequence and
/// two dots. Anything longer is rejected before it is scanned.
///
/// ```
/// use replay_ring_sse::{EventId, LastEventIdError, MAX_EVENT_ID_LEN};
/// assert_eq!(MAX_EVENT_ID_LEN, 70);
/// let long = "a".repeat(MAX_EVENT_ID_LEN + 1);
/// assert_eq!(EventId::parse(&long), Err(LastEventIdError::TooLong { len: 71, max: 70 }));
/// ```
pub const MAX_EVENT_ID_LEN: usize = MAX_STREAM_LEN + 1 + 16 + 1 + 20;

/// A stream name: 1 to 32 bytes of `[A-Za-z0-9_-]`, stored inline (`Copy`, no allocation).
///
/// The alphabet contains no `.`, CR, LF, NUL, colon or space, so a name can never break an `id:`
/// line or a header, and is always safe to log.
///
/// ```
/// use replay_ring_sse::StreamId;
///
/// let s = StreamId::new("events").unwrap();
/// assert_eq!(s.as_str(), "events");
/// assert!(StreamId::new("a.b").is_err());
/// assert!(StreamId::new("").is_err());
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StreamId {
    len: u8,
    bytes: [u8; MAX_STREAM_LEN],
}

/// Why a string is not a valid [`StreamId`].
///
/// ```
/// use replay_ring_sse::{StreamId, StreamIdError};
///
/// assert_eq!(StreamId::new(""), Err(StreamIdError::Empty));
/// assert_eq!(StreamId::new("a b"), Err(StreamIdError::InvalidByte { position: 1 }));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StreamIdError {
    /// The name is empty.
    Empty,
    /// The name is longer than [`MAX_STREAM_LEN`].
    TooLong {
        /// Its length in bytes.
        len: usize,
    },
    /// A byte outside `[A-Za-z0-9_-]`.
    InvalidByte {
        /// Byte offset of the first offending byte.
        position: usize,
    },
}

impl fmt::Display for StreamIdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            StreamIdError::Empty => f.write_str("stream name is empty"),
            StreamIdError::TooLong { len } => {
                write!(
                    f,
                    "stream name is {len} bytes, the maximum is {MAX_STREAM_LEN}"
                )
            }
            StreamIdError::InvalidByte { position } => write!(
                f,
                "stream name has a byte outside [A-Za-z0-9_-] at offset {position}"
            ),
        }
    }
}

impl std::error::Error for StreamIdError {}

fn is_stream_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'-' || b == b'_'
}

impl StreamId {
    /// Validates and stores a stream name.
    ///
    /// # Errors
    /// - [`StreamIdError::Empty`] for an empty name.
    /// - [`StreamIdError::TooLong`] for a name longer than [`MAX_STREAM_LEN`] bytes.
    /// - [`StreamIdError::InvalidByte`] for a byte outside `[A-Za-z0-9_-]` (with its offset).
    ///
    /// ```
    /// use replay_ring_sse::{StreamId, StreamIdError};
    ///
    /// assert!(StreamId::new("tool-call_7").is_ok());
    /// assert_eq!(StreamId::new(&"x".repeat(33)), Err(StreamIdError::TooLong { len: 33 }));
    /// ```
    pub fn new(name: &str) -> Result<Self, StreamIdError> {
        Self::from_bytes(name.as_bytes())
    }

    fn from_bytes(name: &[u8]) -> Result<Self, StreamIdError> {
        if name.is_empty() {
            return Err(StreamIdError::Empty);
        }
        if name.len() > MAX_STREAM_LEN {
            return Err(StreamIdError::TooLong { len: name.len() });
        }
        if let Some(position) = name.iter().position(|&b| !is_stream_byte(b)) {
            return Err(StreamIdError::InvalidByte { position });
        }
        let mut bytes = [0u8; MAX_STREAM_LEN];
        bytes[..name.len()].copy_from_slice(name);
        Ok(StreamId {
            len: name.len() as u8,
            bytes,
        })
    }

    /// The name as a string slice.
    ///
    /// ```
    /// assert_eq!(replay_ring_sse::StreamId::new("s1").unwrap().as_str(), "s1");
    /// ```
    pub fn as_str(&self) -> &str {
        // Only ASCII bytes are ever stored (checked in `from_bytes`), so this cannot fail.
        std::str::from_utf8(&self.bytes[..self.len as usize]).unwrap_or("")
    }
}

impl fmt::Debug for StreamId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "StreamId({:?})", self.as_str())
    }
}

impl fmt::Display for StreamId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for StreamId {
    type Err = StreamIdError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        StreamId::new(s)
    }
}

/// A per-stream incarnation number. A server that restarts (and so starts a fresh ring at id 1)
/// must pick a new epoch, so that cursors from the old incarnation are recognised as
/// "stream lost" instead of being replayed against unrelated events.
///
/// ```
/// use replay_ring_sse::Epoch;
///
/// let a = Epoch::generate();
/// let b = Epoch::generate();
/// assert_ne!(a, b);
/// assert_eq!(Epoch::new(0x2a).to_string(), "2a");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Epoch(u64);

impl Epoch {
    /// An explicit epoch (for example one persisted alongside a durable log).
    ///
    /// ```
    /// assert_eq!(replay_ring_sse::Epoch::new(7).get(), 7);
    /// ```
    pub const fn new(value: u64) -> Self {
        Epoch(value)
    }

    /// The numeric value.
    ///
    /// ```
    /// assert_eq!(replay_ring_sse::Epoch::new(9).get(), 9);
    /// ```
    pub const fn get(self) -> u64 {
        self.0
    }

    /// A fresh 48-bit epoch (12 hex digits at most) whose 48 bits are all random: across restarts
    /// two streams collide with probability about 2^-48. Within a process, calls never repeat (for
    /// 2^48 calls): the n-th epoch is a keyed pseudo-random permutation of `n` over 48 bits (a
    /// four-round Feistel network whose round function is SipHash under std's per-process keys,
    /// which std draws from the operating system's random source).
    ///
    /// ```
    /// let (a, b) = (replay_ring_sse::Epoch::generate(), replay_ring_sse::Epoch::generate());
    /// assert!(a.get() < 1 << 48 && b.get() < 1 << 48);
    /// assert_ne!(a, b);
    /// ```
    pub fn generate() -> Self {
        use std::collections::hash_map::RandomState;
        use std::hash::BuildHasher;
        use std::sync::atomic::{AtomicU64, Ordering};
        use std::sync::OnceLock;

        const HALF_BITS: u32 = 24;
        const HALF: u64 = (1 << HALF_BITS) - 1;
        static KEYS: OnceLock<RandomState> = OnceLock::new();
        // Relaxed: the counter only has to hand out distinct values; it orders nothing else.
        static COUNTER: AtomicU64 = AtomicU64::new(0);

        let keys = KEYS.get_or_init(RandomState::new);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        // A Feistel network is a bijection whatever its round function, so distinct counters give
        // distinct epochs; with a keyed round function every output bit is pseudo-random.
        let (mut left, mut right) = ((n >> HALF_BITS) & HALF, n & HALF);
        for round in 0u8..4 {
            let f = keys.hash_one((round, right)) & HALF;
            (left, right) = (right, left ^ f);
        }
        Epoch((left << HALF_BITS) | right)
    }
}

impl fmt::Display for Epoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:x}", self.0)
    }
}

/// Parses an epoch as it is spelled in an event id: lowercase hexadecimal, no sign, no leading
/// zero (the inverse of `Display`), so a configured epoch is the one clients will quote back.
///
/// ```
/// use replay_ring_sse::{Epoch, LastEventIdError, Malformed};
///
/// assert_eq!("2a".parse::<Epoch>(), Ok(Epoch::new(0x2a)));
/// assert_eq!(
///     "2A".parse::<Epoch>(),
///     Err(LastEventIdError::Malformed { position: 1, reason: Malformed::InvalidEpochByte })
/// );
/// assert!("02a".parse::<Epoch>().is_err());
/// assert!("+2a".parse::<Epoch>().is_err());
/// assert!("".parse::<Epoch>().is_err());
/// ```
impl std::str::FromStr for Epoch {
    type Err = LastEventIdError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_number(s.as_bytes(), 0, 16, IdField::Epoch).map(Epoch)
    }
}

/// Which numeric field of an id overflowed `u64`.
///
/// ```
/// use replay_ring_sse::{EventId, IdField, LastEventIdError};
/// assert_eq!(EventId::parse("s.10000000000000000.1"),
///            Err(LastEventIdError::Overflow { field: IdField::Epoch }));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdField {
    /// The hexadecimal epoch.
    Epoch,
    /// The decimal sequence number.
    Sequence,
}

impl fmt::Display for IdField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            IdField::Epoch => "epoch",
            IdField::Sequence => "sequence number",
        })
    }
}

/// What exactly is wrong with a syntactically malformed id.
///
/// ```
/// use replay_ring_sse::{EventId, LastEventIdError, Malformed};
/// assert_eq!(EventId::parse("s.1"),
///            Err(LastEventIdError::Malformed { position: 3, reason: Malformed::MissingSeparator }));
/// assert_eq!(Malformed::MissingSeparator.to_string(), "expected <stream>.<epoch>.<seq>");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Malformed {
    /// Fewer than two `.` separators.
    MissingSeparator,
    /// A byte outside `[A-Za-z0-9_-]` in the stream name (this includes a third `.`, spaces and
    /// control characters).
    InvalidStreamByte,
    /// The stream name is empty.
    EmptyStream,
    /// The stream name is longer than [`MAX_STREAM_LEN`].
    StreamTooLong,
    /// The epoch is empty.
    EmptyEpoch,
    /// A byte outside `[0-9a-f]` in the epoch.
    InvalidEpochByte,
    /// The sequence number is empty.
    EmptySequence,
    /// A byte outside `[0-9]` in the sequence number.
    InvalidSequenceByte,
    /// A number with a leading zero (every id has exactly one spelling).
    LeadingZero,
}

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Malformed::MissingSeparator => "expected <stream>.<epoch>.<seq>",
            Malformed::InvalidStreamByte => "stream name byte outside [A-Za-z0-9_-]",
            Malformed::EmptyStream => "empty stream name",
            Malformed::StreamTooLong => "stream name longer than 32 bytes",
            Malformed::EmptyEpoch => "empty epoch",
            Malformed::InvalidEpochByte => "epoch byte outside [0-9a-f]",
            Malformed::EmptySequence => "empty sequence number",
            Malformed::InvalidSequenceByte => "sequence byte outside [0-9]",
            Malformed::LeadingZero => "number with a leading zero",
        })
    }
}

/// Why a `Last-Event-ID` value was refused. Messages never echo the raw header bytes (they are
/// untrusted), only offsets, lengths and already-validated names, so they are safe to log.
///
/// ```
/// use replay_ring_sse::{EventId, LastEventIdError};
///
/// let err = EventId::parse("").unwrap_err();
/// assert_eq!(err, LastEventIdError::Empty);
/// assert_eq!(err.to_string(), "Last-Event-ID is empty");
/// assert!(err.is_syntax());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LastEventIdError {
    /// The value is empty.
    Empty,
    /// The value is longer than [`MAX_EVENT_ID_LEN`] bytes; it was not scanned.
    TooLong {
        /// Its length in bytes.
        len: usize,
        /// The maximum accepted length.
        max: usize,
    },
    /// A byte >= 0x80.
    NonAscii {
        /// Byte offset of the first such byte.
        position: usize,
    },
    /// Not of the form `<stream>.<epoch>.<seq>`.
    Malformed {
        /// Byte offset where parsing failed.
        position: usize,
        /// What was wrong there.
        reason: Malformed,
    },
    /// A number does not fit in `u64`.
    Overflow {
        /// Which number.
        field: IdField,
    },
    /// The stream is known but the id comes from another incarnation of it (typically from
    /// before a server restart): the stream the client was reading no longer exists.
    UnknownEpoch {
        /// The stream named by the id.
        stream: StreamId,
        /// The epoch in the id.
        got: Epoch,
        /// The stream's current epoch.
        current: Epoch,
    },
    /// No stream of that name exists here.
    UnknownStream {
        /// The stream named by the id.
        stream: StreamId,
    },
    /// The request carried the header more than once (or one value joined from several with
    /// commas, as a proxy may); which one the client meant is unknowable, so none is used (see
    /// [`last_event_id`](crate::last_event_id)).
    Duplicate {
        /// How many `Last-Event-ID` values the request had.
        count: usize,
    },
}

impl LastEventIdError {
    /// True for errors about the value's syntax (a client bug or forgery, HTTP 400); false for
    /// [`UnknownEpoch`](Self::UnknownEpoch) and [`UnknownStream`](Self::UnknownStream), which mean
    /// a well-formed cursor for a stream that is gone (HTTP 404).
    ///
    /// ```
    /// use replay_ring_sse::{LastEventIdError, StreamId};
    ///
    /// let gone = LastEventIdError::UnknownStream { stream: StreamId::new("s").unwrap() };
    /// assert!(!gone.is_syntax());
    /// ```
    pub fn is_syntax(&self) -> bool {
        !matches!(
            self,
            LastEventIdError::UnknownEpoch { .. } | LastEventIdError::UnknownStream { .. }
        )
    }

    /// A stable machine-readable code, used as the `reason` in JSON error bodies.
    ///
    /// ```
    /// use replay_ring_sse::EventId;
    /// assert_eq!(EventId::parse("x").unwrap_err().code(), "malformed");
    /// ```
    pub fn code(&self) -> &'static str {
        match self {
            LastEventIdError::Empty => "empty",
            LastEventIdError::TooLong { .. } => "too_long",
            LastEventIdError::NonAscii { .. } => "non_ascii",
            LastEventIdError::Malformed { .. } => "malformed",
            LastEventIdError::Overflow { .. } => "overflow",
            LastEventIdError::UnknownEpoch { .. } => "unknown_epoch",
            LastEventIdError::UnknownStream { .. } => "unknown_stream",
            LastEventIdError::Duplicate { .. } => "duplicate",
        }
    }
}

impl fmt::Display for LastEventIdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            LastEventIdError::Empty => f.write_str("Last-Event-ID is empty"),
            LastEventIdError::TooLong { len, max } => {
                write!(f, "Last-Event-ID is {len} bytes, the maximum is {max}")
            }
            LastEventIdError::NonAscii { position } => {
                write!(f, "Last-Event-ID has a non-ASCII byte at offset {position}")
            }
            LastEventIdError::Malformed { position, reason } => {
                write!(f, "Last-Event-ID is malformed at offset {position}: {reason}")
            }
            LastEventIdError::Overflow { field } => {
                write!(f, "Last-Event-ID {field} does not fit in 64 bits")
            }
            LastEventIdError::UnknownEpoch { stream, got, current } => write!(
                f,
                "Last-Event-ID names epoch {got} of stream {stream}, whose current epoch is {current} (stream lost, e.g. server restart)"
            ),
            LastEventIdError::UnknownStream { stream } => {
                // Also the answer to a request without Last-Event-ID whose stream was deleted,
                // expired or lost in a backend, so it names no header.
                write!(f, "stream {stream} does not exist here (never created, deleted, or lost)")
            }
            LastEventIdError::Duplicate { count } => {
                write!(f, "Last-Event-ID carried {count} ids; send one at most")
            }
        }
    }
}

impl std::error::Error for LastEventIdError {}

/// One event's position: which stream, which incarnation of it, and the ring sequence number.
///
/// ```
/// use replay_ring_sse::{Epoch, EventId, StreamId};
///
/// let id = EventId::new(StreamId::new("events").unwrap(), Epoch::new(0x1f), 42);
/// assert_eq!(id.to_string(), "events.1f.42");
/// assert_eq!(EventId::parse("events.1f.42"), Ok(id));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EventId {
    /// The stream.
    pub stream: StreamId,
    /// The stream's incarnation.
    pub epoch: Epoch,
    /// The ring id (first event 1; 0 means "before the first event").
    pub seq: u64,
}

impl EventId {
    /// Assembles an id.
    ///
    /// ```
    /// use replay_ring_sse::{Epoch, EventId, StreamId};
    /// let id = EventId::new(StreamId::new("s").unwrap(), Epoch::new(1), 0);
    /// assert_eq!(id.seq, 0);
    /// ```
    pub const fn new(stream: StreamId, epoch: Epoch, seq: u64) -> Self {
        EventId { stream, epoch, seq }
    }

    /// Parses an untrusted `Last-Event-ID` value. Never panics; see [`LastEventIdError`] for the
    /// refusals. Checks are ordered cheapest first: empty, length, ASCII, then the grammar.
    ///
    /// # Errors
    /// Only syntax errors (this checks no stream or epoch):
    /// - [`LastEventIdError::Empty`] for an empty value.
    /// - [`LastEventIdError::TooLong`] for a value longer than [`MAX_EVENT_ID_LEN`] bytes.
    /// - [`LastEventIdError::NonAscii`] for a byte >= 0x80.
    /// - [`LastEventIdError::Malformed`] when the value is not `<stream>.<epoch>.<seq>` in its one
    ///   canonical spelling (the [`Malformed`] reason and the offset say where and why).
    /// - [`LastEventIdError::Overflow`] when the epoch or the sequence number exceeds `u64`.
    ///
    /// ```
    /// use replay_ring_sse::{EventId, IdField, LastEventIdError, Malformed};
    ///
    /// assert_eq!(EventId::parse("s.a.18446744073709551616"),
    ///            Err(LastEventIdError::Overflow { field: IdField::Sequence }));
    /// assert_eq!(EventId::parse("s.a.042"),
    ///            Err(LastEventIdError::Malformed { position: 4, reason: Malformed::LeadingZero }));
    /// assert_eq!(EventId::parse("s.é.1"), Err(LastEventIdError::NonAscii { position: 2 }));
    /// ```
    pub fn parse(value: &str) -> Result<Self, LastEventIdError> {
        Self::parse_bytes(value.as_bytes())
    }

    /// [`parse`](Self::parse) for raw header bytes (HTTP header values need not be UTF-8).
    ///
    /// # Errors
    /// The same as [`parse`](Self::parse): [`Empty`](LastEventIdError::Empty),
    /// [`TooLong`](LastEventIdError::TooLong), [`NonAscii`](LastEventIdError::NonAscii) (also for
    /// bytes that are not UTF-8), [`Malformed`](LastEventIdError::Malformed) and
    /// [`Overflow`](LastEventIdError::Overflow).
    ///
    /// ```
    /// use replay_ring_sse::{EventId, LastEventIdError};
    /// assert_eq!(EventId::parse_bytes(b"s.1.\xff"), Err(LastEventIdError::NonAscii { position: 4 }));
    /// assert_eq!(EventId::parse_bytes(b"s.1.7").unwrap().seq, 7);
    /// ```
    pub fn parse_bytes(value: &[u8]) -> Result<Self, LastEventIdError> {
        if value.is_empty() {
            return Err(LastEventIdError::Empty);
        }
        if value.len() > MAX_EVENT_ID_LEN {
            return Err(LastEventIdError::TooLong {
                len: value.len(),
                max: MAX_EVENT_ID_LEN,
            });
        }
        if let Some(position) = value.iter().position(|b| !b.is_ascii()) {
            return Err(LastEventIdError::NonAscii { position });
        }
        let malformed = |position, reason| LastEventIdError::Malformed { position, reason };

        // Stream name: everything up to the first '.'.
        let stream_end = match value.iter().position(|&b| b == b'.') {
            Some(i) => i,
            None => {
                return Err(match value.iter().position(|&b| !is_stream_byte(b)) {
                    Some(p) => malformed(p, Malformed::InvalidStreamByte),
                    None => malformed(value.len(), Malformed::MissingSeparator),
                })
            }
        };
        let stream = StreamId::from_bytes(&value[..stream_end]).map_err(|e| match e {
            StreamIdError::Empty => malformed(0, Malformed::EmptyStream),
            StreamIdError::TooLong { .. } => malformed(MAX_STREAM_LEN, Malformed::StreamTooLong),
            StreamIdError::InvalidByte { position } => {
                malformed(position, Malformed::InvalidStreamByte)
            }
        })?;

        // Epoch: lowercase hex up to the second '.'.
        let epoch_start = stream_end + 1;
        let rest = &value[epoch_start..];
        let epoch_len = match rest.iter().position(|&b| b == b'.') {
            Some(i) => i,
            None => {
                return Err(match rest.iter().position(|&b| !is_lower_hex(b)) {
                    Some(p) => malformed(epoch_start + p, Malformed::InvalidEpochByte),
                    None => malformed(value.len(), Malformed::MissingSeparator),
                })
            }
        };
        let epoch = parse_number(&rest[..epoch_len], epoch_start, 16, IdField::Epoch)?;

        // Sequence: decimal to the end (a further '.' is an invalid byte).
        let seq_start = epoch_start + epoch_len + 1;
        let seq = parse_number(&value[seq_start..], seq_start, 10, IdField::Sequence)?;
        Ok(EventId {
            stream,
            epoch: Epoch(epoch),
            seq,
        })
    }

    /// Writes the canonical form into a stack buffer (no allocation).
    ///
    /// ```
    /// use replay_ring_sse::EventId;
    /// let id = EventId::parse("a.0.0").unwrap();
    /// assert_eq!(id.encode().as_str(), "a.0.0");
    /// ```
    pub fn encode(&self) -> EventIdBuf {
        StreamIdentity::new(self.stream, self.epoch)
            .id_prefix()
            .with_seq(self.seq)
    }
}

impl fmt::Display for EventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.encode().as_str())
    }
}

impl FromStr for EventId {
    type Err = LastEventIdError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        EventId::parse(s)
    }
}

/// An encoded [`EventId`] held inline: at most [`MAX_EVENT_ID_LEN`] ASCII bytes, no CR/LF/NUL/colon.
///
/// ```
/// use replay_ring_sse::EventId;
/// let buf = EventId::parse("s.ff.10").unwrap().encode();
/// assert_eq!(&*buf, "s.ff.10");
/// assert_eq!(buf.as_bytes().len(), 7);
/// ```
#[derive(Clone, Copy)]
pub struct EventIdBuf {
    len: u8,
    bytes: [u8; MAX_EVENT_ID_LEN],
}

impl EventIdBuf {
    fn push(&mut self, part: &[u8]) {
        let start = self.len as usize;
        self.bytes[start..start + part.len()].copy_from_slice(part);
        self.len += part.len() as u8;
    }

    /// This buffer, holding an [`id_prefix`](StreamIdentity::id_prefix), completed with `seq`
    /// into a whole id.
    pub(crate) fn with_seq(mut self, seq: u64) -> Self {
        let mut digits = [0u8; 20];
        self.push(render(seq, 10, &mut digits));
        self
    }

    /// The length of [`with_seq(seq)`](Self::with_seq)'s id, without rendering it.
    // The axum endpoint's encoder: unused without that feature.
    #[cfg_attr(not(feature = "axum"), allow(dead_code))]
    pub(crate) fn len_with_seq(&self, seq: u64) -> usize {
        let digits = seq.checked_ilog10().map_or(1, |d| d as usize + 1);
        self.len as usize + digits
    }

    /// The encoded id.
    ///
    /// ```
    /// assert_eq!(replay_ring_sse::EventId::parse("s.1.2").unwrap().encode().as_str(), "s.1.2");
    /// ```
    pub fn as_str(&self) -> &str {
        // Built only from ASCII stream bytes and ASCII digits.
        std::str::from_utf8(self.as_bytes()).unwrap_or("")
    }

    /// The encoded id as bytes.
    ///
    /// ```
    /// assert_eq!(replay_ring_sse::EventId::parse("s.1.2").unwrap().encode().as_bytes(), b"s.1.2");
    /// ```
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }
}

impl std::ops::Deref for EventIdBuf {
    type Target = str;

    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl fmt::Debug for EventIdBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

fn is_lower_hex(b: u8) -> bool {
    b.is_ascii_digit() || (b'a'..=b'f').contains(&b)
}

/// Parses a canonical number (no sign, no leading zero) in base 10 or 16; `offset` is where the
/// digits start in the whole value, for error positions.
fn parse_number(
    digits: &[u8],
    offset: usize,
    radix: u32,
    field: IdField,
) -> Result<u64, LastEventIdError> {
    let (empty, invalid) = match field {
        IdField::Epoch => (Malformed::EmptyEpoch, Malformed::InvalidEpochByte),
        IdField::Sequence => (Malformed::EmptySequence, Malformed::InvalidSequenceByte),
    };
    if digits.is_empty() {
        return Err(LastEventIdError::Malformed {
            position: offset,
            reason: empty,
        });
    }
    let mut value: u64 = 0;
    let mut overflow = false;
    for (i, &b) in digits.iter().enumerate() {
        let d = match (radix, b) {
            (_, b'0'..=b'9') => u64::from(b - b'0'),
            (16, b'a'..=b'f') => u64::from(b - b'a' + 10),
            _ => {
                return Err(LastEventIdError::Malformed {
                    position: offset + i,
                    reason: invalid,
                })
            }
        };
        // Keep scanning after an overflow so that a later invalid byte is still reported as such.
        match value
            .checked_mul(u64::from(radix))
            .and_then(|v| v.checked_add(d))
        {
            Some(v) => value = v,
            None => overflow = true,
        }
    }
    if digits.len() > 1 && digits[0] == b'0' {
        return Err(LastEventIdError::Malformed {
            position: offset,
            reason: Malformed::LeadingZero,
        });
    }
    if overflow {
        return Err(LastEventIdError::Overflow { field });
    }
    Ok(value)
}

/// Renders `n` in base 10 or 16 (lowercase) into the tail of `out`, returning the digits.
fn render(mut n: u64, radix: u64, out: &mut [u8; 20]) -> &[u8] {
    let mut i = out.len();
    loop {
        i -= 1;
        let d = (n % radix) as u8;
        out[i] = if d < 10 { b'0' + d } else { b'a' + d - 10 };
        n /= radix;
        if n == 0 {
            break;
        }
    }
    &out[i..]
}

/// A stream as a server knows it: its name and current epoch. Checks and mints ids.
///
/// ```
/// use replay_ring_sse::{Epoch, LastEventIdError, StreamId, StreamIdentity};
///
/// let me = StreamIdentity::new(StreamId::new("events").unwrap(), Epoch::new(0xabc));
/// assert_eq!(me.event_id(5).to_string(), "events.abc.5");
/// assert_eq!(me.parse_last_event_id(b"events.abc.5"), Ok(5));
/// assert!(matches!(me.parse_last_event_id(b"events.abd.5"),
///                  Err(LastEventIdError::UnknownEpoch { .. })));
/// assert!(matches!(me.parse_last_event_id(b"other.abc.5"),
///                  Err(LastEventIdError::UnknownStream { .. })));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StreamIdentity {
    /// The stream's name.
    pub stream: StreamId,
    /// The stream's current epoch.
    pub epoch: Epoch,
}

impl StreamIdentity {
    /// A stream identity.
    ///
    /// ```
    /// use replay_ring_sse::{Epoch, StreamId, StreamIdentity};
    /// let me = StreamIdentity::new(StreamId::new("s").unwrap(), Epoch::generate());
    /// assert_eq!(me.stream.as_str(), "s");
    /// ```
    pub const fn new(stream: StreamId, epoch: Epoch) -> Self {
        StreamIdentity { stream, epoch }
    }

    /// The wire id of sequence number `seq` on this stream.
    ///
    /// ```
    /// use replay_ring_sse::{Epoch, StreamId, StreamIdentity};
    /// let me = StreamIdentity::new(StreamId::new("s").unwrap(), Epoch::new(16));
    /// assert_eq!(me.event_id(3).to_string(), "s.10.3");
    /// ```
    pub const fn event_id(&self, seq: u64) -> EventId {
        EventId::new(self.stream, self.epoch, seq)
    }

    /// What every id of this stream starts with, `<stream>.<epoch in hex>.`: the id of event `seq`
    /// is this followed by `seq` in decimal ([`EventIdBuf::with_seq`]). A writer renders it once
    /// instead of rendering the epoch again for every event.
    pub(crate) fn id_prefix(&self) -> EventIdBuf {
        let mut buf = EventIdBuf {
            len: 0,
            bytes: [0; MAX_EVENT_ID_LEN],
        };
        buf.push(self.stream.as_str().as_bytes());
        buf.push(b".");
        let mut digits = [0u8; 20];
        buf.push(render(self.epoch.0, 16, &mut digits));
        buf.push(b".");
        buf
    }

    /// Checks that a parsed id belongs to this stream and incarnation, returning its sequence.
    ///
    /// # Errors
    /// - [`LastEventIdError::UnknownStream`] when the id names another stream.
    /// - [`LastEventIdError::UnknownEpoch`] when it names this stream but another epoch (an
    ///   earlier incarnation, typically from before a server restart).
    ///
    /// ```
    /// use replay_ring_sse::{Epoch, EventId, StreamId, StreamIdentity};
    /// let me = StreamIdentity::new(StreamId::new("s").unwrap(), Epoch::new(1));
    /// assert_eq!(me.check(&EventId::parse("s.1.9").unwrap()), Ok(9));
    /// ```
    pub fn check(&self, id: &EventId) -> Result<u64, LastEventIdError> {
        if id.stream != self.stream {
            return Err(LastEventIdError::UnknownStream { stream: id.stream });
        }
        if id.epoch != self.epoch {
            return Err(LastEventIdError::UnknownEpoch {
                stream: id.stream,
                got: id.epoch,
                current: self.epoch,
            });
        }
        Ok(id.seq)
    }

    /// Parses an untrusted header value and checks it against this stream: all seven
    /// [`LastEventIdError`]s in one call.
    ///
    /// # Errors
    /// The syntax errors of [`EventId::parse_bytes`] ([`Empty`](LastEventIdError::Empty),
    /// [`TooLong`](LastEventIdError::TooLong), [`NonAscii`](LastEventIdError::NonAscii),
    /// [`Malformed`](LastEventIdError::Malformed), [`Overflow`](LastEventIdError::Overflow)), then
    /// those of [`check`](Self::check) ([`UnknownStream`](LastEventIdError::UnknownStream),
    /// [`UnknownEpoch`](LastEventIdError::UnknownEpoch)).
    ///
    /// ```
    /// use replay_ring_sse::{Epoch, LastEventIdError, StreamId, StreamIdentity};
    /// let me = StreamIdentity::new(StreamId::new("s").unwrap(), Epoch::new(1));
    /// assert_eq!(me.parse_last_event_id(b""), Err(LastEventIdError::Empty));
    /// ```
    pub fn parse_last_event_id(&self, value: &[u8]) -> Result<u64, LastEventIdError> {
        self.check(&EventId::parse_bytes(value)?)
    }
}

#[cfg(test)]
mod tests {
    use super::{Epoch, StreamId, StreamIdentity};

    #[test]
    fn len_with_seq_is_the_length_with_seq_renders() {
        let prefix =
            StreamIdentity::new(StreamId::new("events").unwrap(), Epoch::new(0xabc)).id_prefix();
        for seq in [
            0,
            1,
            9,
            10,
            99,
            100,
            999_999,
            1_000_000,
            u64::MAX / 10,
            u64::MAX,
        ] {
            assert_eq!(
                prefix.len_with_seq(seq),
                prefix.with_seq(seq).as_bytes().len(),
                "{seq}"
            );
        }
    }
}
