//! `chaos-proxy --upstream PORT [--port P] [--cut-after-frames K] [--cut-after-ms N]
//! [--throttle BYTES_PER_SEC] [--recv-buffer BYTES] [--drain-after-cut]`
//!
//! Runs the chaos proxy on 127.0.0.1 in front of 127.0.0.1:UPSTREAM, printing
//! `listening on http://127.0.0.1:PORT` first and one line per finished request on stderr.

use std::net::SocketAddr;
use std::time::Duration;

use replay_ring_e2e::{ChaosProxy, ProxyConfig};

fn usage() -> ! {
    eprintln!(
        "usage: chaos-proxy --upstream PORT [--port P] [--cut-after-frames K] [--cut-after-ms N] \
         [--throttle BYTES_PER_SEC] [--recv-buffer BYTES] [--drain-after-cut]"
    );
    std::process::exit(2)
}

fn num<T: std::str::FromStr>(v: Option<String>) -> T {
    v.and_then(|v| v.parse().ok()).unwrap_or_else(|| usage())
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let mut upstream: Option<u16> = None;
    let mut cfg = ProxyConfig::new(SocketAddr::from(([127, 0, 0, 1], 0)));
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--upstream" => upstream = Some(num(args.next())),
            "--port" => cfg.listen = SocketAddr::from(([127, 0, 0, 1], num::<u16>(args.next()))),
            "--cut-after-frames" => cfg.cut_after_frames = Some(num(args.next())),
            "--cut-after-ms" => cfg.cut_after = Some(Duration::from_millis(num(args.next()))),
            "--throttle" => cfg.throttle_bytes_per_sec = Some(num(args.next())),
            "--recv-buffer" => cfg.upstream_recv_buffer = Some(num(args.next())),
            "--drain-after-cut" => cfg.drain_upstream_after_cut = true,
            _ => usage(),
        }
    }
    cfg.upstream = SocketAddr::from(([127, 0, 0, 1], upstream.unwrap_or_else(|| usage())));
    cfg.log_to_stderr = true;
    let proxy = ChaosProxy::start(cfg).await?;
    println!("listening on {}", proxy.url());
    tokio::signal::ctrl_c().await?;
    Ok(())
}
