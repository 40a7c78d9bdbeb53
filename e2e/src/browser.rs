//! Headless Chromium through `browser/drive.mjs` (playwright-core + Debian's `/usr/bin/chromium`):
//! a line-based JSON protocol over the driver's stdin/stdout. Run `scripts/e2e-setup` first.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

/// Upper bound for one driver command (a page load, a screenshot).
const CALL_TIMEOUT: Duration = Duration::from_secs(60);
/// Interval between page-state polls in [`Browser::wait_for_state`].
const POLL: Duration = Duration::from_millis(50);

/// Directory of the node driver (`e2e/browser`).
pub fn driver_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("browser")
}

/// Directory for screenshots and logs (`e2e/artifacts`, gitignored); created on demand.
pub fn artifacts_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("artifacts");
    let _ = std::fs::create_dir_all(&dir);
    dir
}

/// The page's replay state: `window.__replay` plus the text of its status elements.
#[derive(Debug, Clone, Default)]
pub struct PageState {
    /// Event sequence numbers received, in arrival order.
    pub ids: Vec<u64>,
    /// Reconnects the page counted.
    pub reconnects: u64,
    /// Gaps the page detected (a count, or the length of a list of gaps).
    pub gaps: u64,
    /// Duplicates the page detected (count or list length).
    pub duplicates: u64,
    /// The explicit error the page shows, if any.
    pub error: Option<String>,
    /// The page saw the end of the stream.
    pub done: bool,
    /// `textContent` of `#received #reconnects #last-id #gaps #duplicates #error #status`.
    pub text: BTreeMap<String, Option<String>>,
    /// `window.__replay` as the page had it (`Null` if absent).
    pub raw: Value,
}

impl PageState {
    fn from_reply(v: &Value) -> Self {
        let r = &v["replay"];
        let count = |x: &Value| match x {
            Value::Number(n) => n.as_u64().unwrap_or(0),
            Value::Array(a) => a.len() as u64,
            _ => 0,
        };
        let ids = r["ids"]
            .as_array()
            .map(|a| a.iter().filter_map(seq_of).collect())
            .unwrap_or_default();
        let error = match &r["error"] {
            Value::Null => None,
            Value::String(s) if s.is_empty() => None,
            Value::String(s) => Some(s.clone()),
            other => Some(other.to_string()),
        };
        let text = v["text"]
            .as_object()
            .map(|o| {
                o.iter()
                    .map(|(k, v)| (k.clone(), v.as_str().map(str::to_string)))
                    .collect()
            })
            .unwrap_or_default();
        PageState {
            ids,
            reconnects: count(&r["reconnects"]),
            gaps: count(&r["gaps"]),
            duplicates: count(&r["duplicates"]),
            error,
            done: r["done"].as_bool().unwrap_or(false),
            text,
            raw: r.clone(),
        }
    }

    /// Text of element `#id`, trimmed ("" if missing).
    pub fn text_of(&self, id: &str) -> String {
        self.text
            .get(id)
            .cloned()
            .flatten()
            .unwrap_or_default()
            .trim()
            .to_string()
    }
}

/// Sequence number of an id as the page reports it: a number, or the trailing digits of a string
/// (wire ids may carry a stream/epoch prefix).
pub fn seq_of(v: &Value) -> Option<u64> {
    match v {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => seq_of_str(s),
        _ => None,
    }
}

/// Trailing decimal digits of `s` as a number.
pub fn seq_of_str(s: &str) -> Option<u64> {
    let digits: String = s
        .chars()
        .rev()
        .take_while(char::is_ascii_digit)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    digits.parse().ok()
}

/// A running driver with one page.
pub struct Browser {
    child: Child,
    stdin: ChildStdin,
    stdout: Lines<BufReader<ChildStdout>>,
    /// Browser version string reported by playwright.
    pub version: String,
}

impl Browser {
    /// Starts node + chromium; page console output goes to `log` (a file under artifacts/).
    pub async fn launch(log: &Path) -> io::Result<Browser> {
        let dir = driver_dir();
        if !dir.join("node_modules/playwright-core").exists() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                "playwright-core missing: run scripts/e2e-setup",
            ));
        }
        let log = std::fs::File::create(log)?;
        let node = std::env::var("NODE").unwrap_or_else(|_| "node".into());
        let mut child = Command::new(node)
            .arg(dir.join("drive.mjs"))
            .current_dir(&dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()?;
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
        let mut b = Browser {
            child,
            stdin,
            stdout,
            version: String::new(),
        };
        let ready = b.read_reply().await?;
        b.version = ready["version"].as_str().unwrap_or_default().to_string();
        Ok(b)
    }

    async fn read_reply(&mut self) -> io::Result<Value> {
        let line = tokio::time::timeout(CALL_TIMEOUT, self.stdout.next_line())
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "browser driver timed out"))??
            .ok_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, "browser driver exited"))?;
        serde_json::from_str(&line).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
    }

    /// Sends one command and returns its reply (an error if the driver reports one).
    pub async fn call(&mut self, cmd: Value) -> io::Result<Value> {
        let mut line = cmd.to_string();
        line.push('\n');
        self.stdin.write_all(line.as_bytes()).await?;
        self.stdin.flush().await?;
        let reply = self.read_reply().await?;
        if reply["ok"].as_bool() != Some(true) {
            return Err(io::Error::other(format!("driver: {}", reply["error"])));
        }
        Ok(reply)
    }

    /// Navigates the page and waits for DOMContentLoaded.
    pub async fn goto(&mut self, url: &str) -> io::Result<()> {
        self.call(json!({"cmd": "goto", "url": url}))
            .await
            .map(drop)
    }

    /// Evaluates a JavaScript expression in the page; returns its JSON value.
    pub async fn eval(&mut self, expr: &str) -> io::Result<Value> {
        Ok(self.call(json!({"cmd": "eval", "expr": expr})).await?["value"].take())
    }

    /// Current page state.
    pub async fn state(&mut self) -> io::Result<PageState> {
        let v = self.call(json!({"cmd": "state"})).await?;
        Ok(PageState::from_reply(&v))
    }

    /// Polls the page until `pred` holds or `timeout` passes; the error carries the last state.
    pub async fn wait_for_state(
        &mut self,
        timeout: Duration,
        mut pred: impl FnMut(&PageState) -> bool,
    ) -> io::Result<Result<PageState, PageState>> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let s = self.state().await?;
            if pred(&s) {
                return Ok(Ok(s));
            }
            if tokio::time::Instant::now() >= deadline {
                return Ok(Err(s));
            }
            // Polling interval with a deadline, as a browser offers no push channel here.
            tokio::time::sleep(POLL).await;
        }
    }

    /// Full-page PNG screenshot.
    pub async fn screenshot(&mut self, path: &Path) -> io::Result<()> {
        self.call(json!({"cmd": "screenshot", "path": path}))
            .await
            .map(drop)
    }

    /// Closes chromium and waits for the driver to exit.
    pub async fn quit(mut self) -> io::Result<()> {
        let _ = self.call(json!({"cmd": "quit"})).await;
        let _ = tokio::time::timeout(Duration::from_secs(10), self.child.wait()).await;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_state_with_counts_or_lists() {
        let v = json!({
            "replay": {"ids": [1, "s.e.2", "3"], "reconnects": 2, "gaps": [{"from": 4}],
                       "duplicates": 0, "error": null, "done": true},
            "text": {"received": " 3 ", "error": null}
        });
        let s = PageState::from_reply(&v);
        assert_eq!(s.ids, vec![1, 2, 3]);
        assert_eq!((s.reconnects, s.gaps, s.duplicates), (2, 1, 0));
        assert!(s.done && s.error.is_none());
        assert_eq!(s.text_of("received"), "3");
        assert_eq!(s.text_of("error"), "");
    }

    #[test]
    fn seq_from_prefixed_ids() {
        assert_eq!(seq_of_str("abc-7-123"), Some(123));
        assert_eq!(seq_of_str("x"), None);
    }
}
