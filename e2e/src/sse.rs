//! Incremental SSE frame scanner: finds where each event-stream frame ends in a byte stream that
//! arrives in arbitrary pieces, without buffering whole frames.
//!
//! Line endings follow the HTML event-stream grammar: `\r\n`, `\n` or a lone `\r`. A frame is one or
//! more lines closed by an empty line. A frame whose lines are all comments (`:` first) is a
//! keep-alive: it dispatches nothing in a browser, so it is counted apart from event frames. So is
//! a keep-alive event (`event: keep-alive` without an id): it reaches only a page's keep-alive
//! listener and moves no cursor.

use replay_ring_sse::KEEP_ALIVE_EVENT_NAME;

/// Longest `id:` value kept per frame; longer ids are truncated in the log (they are still forwarded).
const MAX_ID_LEN: usize = 256;

/// A frame that ended inside the bytes given to [`FrameScanner::feed`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrameEnd {
    /// Offset just past the frame's terminating line break, relative to the fed slice.
    pub end: usize,
    /// True when the frame held only comment lines (a keep-alive).
    pub comment_only: bool,
    /// True when the frame is a keep-alive comment or a keep-alive event without an id.
    pub keep_alive: bool,
    /// The frame's `id:` field, if it had one (the last one wins, as in the standard).
    pub id: Option<String>,
    /// True when a `data:` line of the frame has a non-empty value (a priming event has none).
    pub has_data: bool,
}

/// Streaming frame scanner; feed it the response body (already de-chunked) in order.
#[derive(Debug, Default)]
pub struct FrameScanner {
    /// The previous byte was `\r`, so a following `\n` belongs to the same line break.
    prev_cr: bool,
    /// Bytes seen on the current line so far (only the count matters past the field name).
    line_len: usize,
    /// The current line is a comment (first byte `:`).
    line_is_comment: bool,
    /// Prefix of the current line, kept only while it might still be an `id` field.
    line_prefix: Vec<u8>,
    /// The current frame has at least one line.
    frame_has_lines: bool,
    /// The current frame has a non-comment line.
    frame_has_field: bool,
    /// `id` value of the current frame.
    frame_id: Option<String>,
    /// The current frame has a `data` line with a non-empty value.
    frame_has_data: bool,
    /// The current frame's `event` field names the keep-alive event.
    frame_is_keep_alive_event: bool,
}

impl FrameScanner {
    /// A scanner at the start of a stream.
    pub fn new() -> Self {
        Self::default()
    }

    /// Scans `bytes`, returning every frame that ends inside them, in order.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<FrameEnd> {
        let mut ends = Vec::new();
        for (i, &b) in bytes.iter().enumerate() {
            match b {
                b'\n' if self.prev_cr => {
                    // Second half of a `\r\n`; the line already ended at the `\r`.
                    self.prev_cr = false;
                }
                b'\n' | b'\r' => {
                    self.prev_cr = b == b'\r';
                    if let Some(mut end) = self.end_line() {
                        end.end = i + 1;
                        ends.push(end);
                    }
                }
                _ => {
                    self.prev_cr = false;
                    if self.line_len == 0 {
                        self.line_is_comment = b == b':';
                    }
                    self.line_len += 1;
                    if self.line_prefix.len() < MAX_ID_LEN + 4 {
                        self.line_prefix.push(b);
                    }
                }
            }
        }
        ends
    }

    /// Closes the current line; returns the frame if the line was the empty one that ends it.
    fn end_line(&mut self) -> Option<FrameEnd> {
        if self.line_len == 0 {
            if !self.frame_has_lines {
                // Blank line with no frame open (e.g. a stray leading newline): nothing to dispatch.
                return None;
            }
            let id = self.frame_id.take();
            let end = FrameEnd {
                end: 0,
                comment_only: !self.frame_has_field,
                keep_alive: !self.frame_has_field
                    || (self.frame_is_keep_alive_event && id.is_none()),
                id,
                has_data: self.frame_has_data,
            };
            self.frame_has_lines = false;
            self.frame_has_field = false;
            self.frame_has_data = false;
            self.frame_is_keep_alive_event = false;
            return Some(end);
        }
        self.frame_has_lines = true;
        if !self.line_is_comment {
            self.frame_has_field = true;
            if let Some(value) = field_value(&self.line_prefix, b"id") {
                self.frame_id = Some(String::from_utf8_lossy(value).into_owned());
            }
            if field_value(&self.line_prefix, b"data").is_some_and(|v| !v.is_empty()) {
                self.frame_has_data = true;
            }
            if let Some(name) = field_value(&self.line_prefix, b"event") {
                // The last `event` field wins, as in the standard.
                self.frame_is_keep_alive_event = name == KEEP_ALIVE_EVENT_NAME.as_bytes();
            }
        }
        self.line_len = 0;
        self.line_is_comment = false;
        self.line_prefix.clear();
        None
    }
}

/// If `line` is the field `name` (`name:value`, `name: value` or bare `name`), its value.
fn field_value<'a>(line: &'a [u8], name: &[u8]) -> Option<&'a [u8]> {
    let rest = line.strip_prefix(name)?;
    if rest.is_empty() {
        return Some(rest);
    }
    let value = rest.strip_prefix(b":")?;
    Some(value.strip_prefix(b" ").unwrap_or(value))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan_all(pieces: &[&[u8]]) -> Vec<(usize, bool, Option<String>)> {
        let mut s = FrameScanner::new();
        let mut offset = 0;
        let mut out = Vec::new();
        for p in pieces {
            for e in s.feed(p) {
                out.push((offset + e.end, e.comment_only, e.id));
            }
            offset += p.len();
        }
        out
    }

    #[test]
    fn counts_lf_frames_with_ids() {
        let body = b"id: 1\ndata: a\n\nid:2\ndata: b\ndata: c\n\n";
        let got = scan_all(&[body]);
        assert_eq!(
            got,
            vec![
                (15, false, Some("1".into())),
                (body.len(), false, Some("2".into()))
            ]
        );
    }

    #[test]
    fn crlf_and_lone_cr_terminators() {
        let got = scan_all(&[b"id: 7\r\ndata: x\r\n\r\n", b"data: y\r\r"]);
        assert_eq!(got.len(), 2);
        // The CRLF frame dispatches at the second CR, before its final LF arrives.
        assert_eq!(got[0], (17, false, Some("7".into())));
        assert_eq!(got[1], (27, false, None));
    }

    #[test]
    fn frames_split_across_pieces_at_every_offset() {
        let body: &[u8] =
            b": hi\n\nid: 10\nevent: tick\ndata: {\"n\":10}\n\nid: 11\r\ndata:\r\n\r\n";
        let whole = scan_all(&[body]);
        assert_eq!(whole.len(), 3);
        assert!(whole[0].1, "comment-only frame is a keep-alive");
        for cut in 0..=body.len() {
            let (a, b) = body.split_at(cut);
            assert_eq!(scan_all(&[a, b]), whole, "split at {cut}");
        }
        let bytewise: Vec<&[u8]> = body.chunks(1).collect();
        assert_eq!(scan_all(&bytewise), whole);
    }

    #[test]
    fn leading_blank_lines_are_not_frames() {
        assert!(scan_all(&[b"\n\n\r\n"]).is_empty());
    }

    #[test]
    fn tells_priming_frames_by_their_empty_data() {
        let mut s = FrameScanner::new();
        let ends =
            s.feed(b"id: 4\nretry: 200\ndata:\n\nid: 5\ndata: \n\nid: 6\ndata: x\n\nretry: 1\n\n");
        let got: Vec<_> = ends.iter().map(|e| (e.id.as_deref(), e.has_data)).collect();
        assert_eq!(
            got,
            [
                (Some("4"), false),
                (Some("5"), false),
                (Some("6"), true),
                (None, false)
            ]
        );
    }

    #[test]
    fn keep_alive_comments_and_events_are_keep_alives_and_nothing_else_is() {
        let mut s = FrameScanner::new();
        let ends = s.feed(
            b": keep-alive\n\nevent: keep-alive\ndata:\n\nevent: keep-alive\nid: 3\ndata:\n\n\
              event: keep-alives\ndata:\n\nevent: end\ndata: {}\n\nid: 4\ndata: x\n\n",
        );
        let got: Vec<_> = ends
            .iter()
            .map(|e| (e.keep_alive, e.comment_only))
            .collect();
        assert_eq!(
            got,
            [
                (true, true),
                (true, false),
                (false, false),
                (false, false),
                (false, false),
                (false, false)
            ]
        );
    }

    #[test]
    fn id_prefix_is_not_confused_with_other_fields() {
        let got = scan_all(&[b"idx: 3\ndata: 1\n\n"]);
        assert_eq!(got, vec![(16, false, None)]);
    }
}
