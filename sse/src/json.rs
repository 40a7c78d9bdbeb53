//! A minimal JSON object writer for error bodies (the core takes no serde dependency). Only this
//! crate's own keys and messages are written; strings are escaped anyway.

use std::fmt::Write as _;

use bytes::{BufMut, Bytes, BytesMut};

/// Builds one flat JSON object.
pub(crate) struct JsonObject {
    buf: BytesMut,
    first: bool,
}

impl JsonObject {
    pub(crate) fn new() -> Self {
        let mut buf = BytesMut::with_capacity(256);
        buf.put_u8(b'{');
        JsonObject { buf, first: true }
    }

    fn key(&mut self, key: &str) {
        if !self.first {
            self.buf.put_u8(b',');
        }
        self.first = false;
        self.put_string(key);
        self.buf.put_u8(b':');
    }

    fn put_string(&mut self, s: &str) {
        self.buf.put_u8(b'"');
        for c in s.chars() {
            match c {
                '"' => self.buf.put_slice(b"\\\""),
                '\\' => self.buf.put_slice(b"\\\\"),
                '\n' => self.buf.put_slice(b"\\n"),
                '\r' => self.buf.put_slice(b"\\r"),
                '\t' => self.buf.put_slice(b"\\t"),
                c if (c as u32) < 0x20 => {
                    let mut tmp = String::with_capacity(6);
                    let _ = write!(tmp, "\\u{:04x}", c as u32);
                    self.buf.put_slice(tmp.as_bytes());
                }
                c => {
                    let mut utf8 = [0u8; 4];
                    self.buf.put_slice(c.encode_utf8(&mut utf8).as_bytes());
                }
            }
        }
        self.buf.put_u8(b'"');
    }

    pub(crate) fn string(mut self, key: &str, value: &str) -> Self {
        self.key(key);
        self.put_string(value);
        self
    }

    pub(crate) fn number(mut self, key: &str, value: u64) -> Self {
        self.key(key);
        let mut tmp = String::with_capacity(20);
        let _ = write!(tmp, "{value}");
        self.buf.put_slice(tmp.as_bytes());
        self
    }

    pub(crate) fn finish(mut self) -> Bytes {
        self.buf.put_u8(b'}');
        self.buf.freeze()
    }
}

#[cfg(test)]
mod tests {
    use super::JsonObject;

    #[test]
    fn escapes_strings() {
        let body = JsonObject::new()
            .string("m", "a\"b\\c\n\u{1}é")
            .number("n", 7)
            .finish();
        assert_eq!(
            &body[..],
            "{\"m\":\"a\\\"b\\\\c\\n\\u0001é\",\"n\":7}".as_bytes()
        );
    }
}
