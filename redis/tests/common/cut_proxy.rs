//! A TCP proxy in front of redis-server that can lose a request or a reply on purpose, to
//! produce the "unknown outcome" of an append for real (the connection drops mid-command).

#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the proxy does with the next command / reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Mode {
    /// Forward both ways.
    Pass = 0,
    /// Drop the connection when the client sends bytes, without forwarding them (the request
    /// never reaches Redis).
    LoseRequest = 1,
    /// Forward the request, then drop the connection when Redis answers (the command ran, the
    /// reply is lost).
    LoseReply = 2,
    /// As `LoseReply` for the next reply only, then `Pass` (so the client's reconnection gets
    /// through).
    LoseOneReply = 3,
}

pub struct CutProxy {
    pub addr: SocketAddr,
    mode: Arc<AtomicU8>,
}

impl CutProxy {
    pub async fn start(upstream: u16) -> CutProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mode = Arc::new(AtomicU8::new(Mode::Pass as u8));
        let m = mode.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let m = m.clone();
                tokio::spawn(async move {
                    if let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)).await {
                        pump(client, server, m).await;
                    }
                });
            }
        });
        CutProxy { addr, mode }
    }

    pub fn url(&self) -> String {
        format!("redis://{}/", self.addr)
    }

    pub fn set(&self, mode: Mode) {
        // SeqCst: a plain flag read by the pump tasks; no other data rides on it.
        self.mode.store(mode as u8, Ordering::SeqCst);
    }
}

async fn pump(client: TcpStream, server: TcpStream, mode: Arc<AtomicU8>) {
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    let mut cbuf = vec![0u8; 64 * 1024];
    let mut sbuf = vec![0u8; 64 * 1024];
    loop {
        tokio::select! {
            n = cr.read(&mut cbuf) => {
                let Ok(n) = n else { return };
                if n == 0 { return }
                if mode.load(Ordering::SeqCst) == Mode::LoseRequest as u8 { return }
                if sw.write_all(&cbuf[..n]).await.is_err() { return }
            }
            n = sr.read(&mut sbuf) => {
                let Ok(n) = n else { return };
                if n == 0 { return }
                if mode.load(Ordering::SeqCst) == Mode::LoseReply as u8 { return }
                if mode
                    .compare_exchange(Mode::LoseOneReply as u8, Mode::Pass as u8, Ordering::SeqCst, Ordering::SeqCst)
                    .is_ok()
                {
                    return;
                }
                if cw.write_all(&sbuf[..n]).await.is_err() { return }
            }
        }
    }
}
