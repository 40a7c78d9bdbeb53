//! A TCP proxy in front of redis-server that can lose a request or a reply on purpose, to
//! produce the "unknown outcome" of an append for real (the connection drops mid-command).

#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

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

/// Run once a reply is lost, before the client's connection is closed (so before it can send
/// anything again).
type Hook = Box<dyn FnOnce() + Send>;

pub struct CutProxy {
    pub addr: SocketAddr,
    mode: Arc<AtomicU8>,
    hook: Arc<Mutex<Option<Hook>>>,
}

/// A backend whose connections go through a new proxy in front of `server` that can lose a
/// request or a reply; a lost reply is an error after half a second.
pub async fn backend_through(
    server: &super::RedisServer,
) -> (CutProxy, replay_ring_redis::RedisBackend) {
    let proxy = CutProxy::start(server.port).await;
    let config = replay_ring_redis::RedisConfig {
        response_timeout: std::time::Duration::from_millis(500),
        ..replay_ring_redis::RedisConfig::default()
    };
    let backend = replay_ring_redis::RedisBackend::connect(&proxy.url(), config)
        .await
        .unwrap();
    (proxy, backend)
}

impl CutProxy {
    pub async fn start(upstream: u16) -> CutProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mode = Arc::new(AtomicU8::new(Mode::Pass as u8));
        let hook: Arc<Mutex<Option<Hook>>> = Arc::default();
        let (m, h) = (mode.clone(), hook.clone());
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let (m, h) = (m.clone(), h.clone());
                tokio::spawn(async move {
                    if let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)).await {
                        pump(client, server, m, h).await;
                    }
                });
            }
        });
        CutProxy { addr, mode, hook }
    }

    /// Runs `hook` when the next reply is lost (`LoseOneReply`), before the client sees its
    /// connection close: a change to the server between the request it ran and the resend.
    pub fn on_lost_reply(&self, hook: impl FnOnce() + Send + 'static) {
        *self.hook.lock().unwrap() = Some(Box::new(hook));
    }

    pub fn url(&self) -> String {
        format!("redis://{}/", self.addr)
    }

    pub fn set(&self, mode: Mode) {
        // SeqCst: a plain flag read by the pump tasks; no other data rides on it.
        self.mode.store(mode as u8, Ordering::SeqCst);
    }
}

async fn pump(
    client: TcpStream,
    server: TcpStream,
    mode: Arc<AtomicU8>,
    hook: Arc<Mutex<Option<Hook>>>,
) {
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    let mut cbuf = vec![0u8; 64 * 1024];
    let mut sbuf = vec![0u8; 64 * 1024];
    loop {
        tokio::select! {
            n = cr.read(&mut cbuf) => {
                let Ok(n) = n else { return };
                if n == 0 { return }
                // SeqCst: the same plain flag as `set`'s store; no other data rides on it (the
                // hook has its own lock).
                if mode.load(Ordering::SeqCst) == Mode::LoseRequest as u8 { return }
                if sw.write_all(&cbuf[..n]).await.is_err() { return }
            }
            n = sr.read(&mut sbuf) => {
                let Ok(n) = n else { return };
                if n == 0 { return }
                // SeqCst (this load and the exchange): as above. The exchange, an atomic
                // read-modify-write at any ordering, is what lets one pump alone lose the reply.
                if mode.load(Ordering::SeqCst) == Mode::LoseReply as u8 { return }
                if mode
                    .compare_exchange(Mode::LoseOneReply as u8, Mode::Pass as u8, Ordering::SeqCst, Ordering::SeqCst)
                    .is_ok()
                {
                    let hook = hook.lock().unwrap().take();
                    if let Some(hook) = hook {
                        // A blocking call in a test's proxy: it runs once, before the close.
                        let _ = tokio::task::spawn_blocking(hook).await;
                    }
                    return;
                }
                if cw.write_all(&sbuf[..n]).await.is_err() { return }
            }
        }
    }
}
