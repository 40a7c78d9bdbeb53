//! What the soak reads from the server itself: its resident memory (`/proc/<pid>/status`) and a
//! counter of its Prometheus `/metrics` text.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use replay_ring_e2e::http::{find, parse_head, ChunkedDecoder};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// One memory sample of the server process, in KiB.
#[derive(Debug, Clone, Copy)]
pub struct Memory {
    /// `VmRSS`: every resident page.
    pub rss: u64,
    /// `RssAnon`: resident anonymous pages (the heap, stacks), without the mapped binary.
    pub anon: u64,
    /// Bytes allocated and not freed (the server's `sse_server_heap_bytes` gauge, in KiB), where
    /// the server reports it.
    pub heap: Option<u64>,
}

/// Samples the server's resident memory; `None` once the process is gone. `heap` is left empty.
pub fn memory(pid: u32) -> Option<Memory> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
    };
    Some(Memory {
        rss: field("VmRSS:")?,
        anon: field("RssAnon:")?,
        heap: None,
    })
}

/// Fetches `path` (the Prometheus text) from the server.
pub async fn scrape(addr: SocketAddr, path: &str) -> io::Result<String> {
    let fetch = async {
        let mut tcp = TcpStream::connect(addr).await?;
        let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        tcp.write_all(req.as_bytes()).await?;
        let mut raw = Vec::new();
        tcp.read_to_end(&mut raw).await?;
        Ok::<_, io::Error>(raw)
    };
    let mut raw = tokio::time::timeout(Duration::from_secs(10), fetch)
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "metrics"))??;
    let end = find(&raw, b"\r\n\r\n")
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no response head"))?
        + 4;
    let body = raw.split_off(end);
    let head = parse_head(raw)?;
    if !head.first_line.contains(" 200 ") {
        return Err(io::Error::other(format!("metrics: {}", head.first_line)));
    }
    let body = if head.is_chunked() {
        let mut out = Vec::new();
        ChunkedDecoder::new().feed(&body, &mut out)?;
        out
    } else {
        body
    };
    String::from_utf8(body).map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "not UTF-8"))
}

/// The sum of counter or gauge `name` over its label sets in Prometheus text (`None` if absent).
pub fn counter(text: &str, name: &str) -> Option<u64> {
    let mut found = None;
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(name) else {
            continue;
        };
        // `name{labels} value` or `name value`; not a longer name with this prefix.
        let value = match rest.as_bytes().first() {
            Some(b'{') => rest.rsplit_once('}').map(|(_, v)| v),
            Some(b' ') => Some(rest),
            _ => None,
        };
        if let Some(v) = value.and_then(|v| v.trim().parse::<f64>().ok()) {
            *found.get_or_insert(0) += v as u64;
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::counter;

    #[test]
    fn a_counter_is_summed_over_its_labels_and_not_confused_with_longer_names() {
        let text = "# TYPE replay_ring_slow_consumers_cut_total counter\n\
                    replay_ring_slow_consumers_cut_total{stream=\"a\"} 3\n\
                    replay_ring_slow_consumers_cut_total{stream=\"b\"} 4\n\
                    replay_ring_slow_consumers_cut_total_x 100\n\
                    replay_ring_head 9\n";
        assert_eq!(
            counter(text, "replay_ring_slow_consumers_cut_total"),
            Some(7)
        );
        assert_eq!(counter(text, "replay_ring_head"), Some(9));
        assert_eq!(counter(text, "replay_ring_floor"), None);
    }
}
