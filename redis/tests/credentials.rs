//! Credentials and access rules: a password Redis refuses, or one the URL lacks, is a
//! configuration error at `connect`; an ACL rule that denies a command the scripts run is Redis's
//! answer (never a "corrupt stream"), and consumes no id; credentials that change under an append
//! whose reply is lost leave its outcome unknown (never a refusal), and the backend recovers once
//! Redis accepts them again.

mod common;

use std::time::{Duration, Instant};

use common::cut_proxy::{CutProxy, Mode};
use common::RedisServer;
use replay_ring_redis::{Error, ReadItem, RedisBackend, RedisConfig, RedisProducer};
use replay_ring_sse::StreamId;

fn sid(name: &str) -> StreamId {
    StreamId::new(name).unwrap()
}

/// An administrator's connection to a server started with `--requirepass <password>`.
fn admin(server: &RedisServer, password: &str) -> redis::Connection {
    redis::Client::open(format!("redis://:{password}@127.0.0.1:{}/", server.port))
        .unwrap()
        .get_connection_with_timeout(Duration::from_secs(2))
        .unwrap()
}

fn config_set(conn: &mut redis::Connection, name: &str, value: &str) {
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg(name)
        .arg(value)
        .query(conn)
        .unwrap();
}

/// Whether `e` says an ACL rule refused the request (Redis 7.0's and 7.2's wordings).
fn names_a_permission(e: &Error) -> bool {
    let text = e.to_string();
    text.contains("can't run") || text.contains("no permissions")
}

/// The producer of a new stream `s` on a backend connected to `url`, which has appended "one".
async fn producing_one(url: &str) -> RedisProducer {
    let backend = RedisBackend::connect(url, RedisConfig::default())
        .await
        .unwrap();
    let stream = backend.create(&sid("s"), 8).await.unwrap();
    let mut producer = stream.acquire_producer().await.unwrap();
    assert_eq!(producer.append(b"one").await.unwrap(), 1);
    producer
}

/// Events 1, 2 and 3: "one", "two", "three".
fn one_two_three() -> Vec<(u64, String)> {
    [(1, "one"), (2, "two"), (3, "three")]
        .into_iter()
        .map(|(id, p)| (id, p.to_owned()))
        .collect()
}

/// The payloads of `producer`'s stream, read back from the start.
async fn payloads(producer: &RedisProducer) -> Vec<(u64, String)> {
    let mut reader = producer.stream().resume(Some(0)).await.unwrap();
    match reader.recv().await.unwrap() {
        ReadItem::Events(events) => events
            .into_iter()
            .map(|(id, p)| (id, String::from_utf8(p.to_vec()).unwrap()))
            .collect(),
        other => panic!("expected events, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_or_missing_password_is_a_configuration_error_at_connect() {
    let server = RedisServer::start_with(&["--requirepass", "right"]);
    let at = |password: &str| format!("redis://{password}127.0.0.1:{}/", server.port);
    for (url, what) in [(at(""), "no password"), (at(":wrong@"), "a wrong password")] {
        match RedisBackend::connect(&url, RedisConfig::default()).await {
            Err(e @ Error::Server(_)) => assert!(!e.is_transient(), "{what}: {e}"),
            other => panic!("{what}: expected a server error, got {other:?}"),
        }
    }
    let backend = RedisBackend::connect(&at(":right@"), RedisConfig::default())
        .await
        .unwrap();
    backend.create(&sid("s"), 8).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acl_rule_denying_xadd_is_a_server_error_and_consumes_no_id() {
    let server = RedisServer::start();
    let _: () = redis::cmd("ACL")
        .arg(&[
            "SETUSER", "writer", "on", ">pw", "~*", "&*", "+@all", "-xadd",
        ])
        .query(&mut server.raw())
        .unwrap();
    let url = format!("redis://writer:pw@127.0.0.1:{}/", server.port);
    let limited = RedisBackend::connect(&url, RedisConfig::default())
        .await
        .unwrap();
    // Creating writes a wake-up with XADD: denied, and said so.
    match limited.create(&sid("new"), 8).await {
        Err(e @ Error::Server(_)) => assert!(names_a_permission(&e), "{e}"),
        other => panic!("create: expected a server error, got {other:?}"),
    }
    server.backend().await.create(&sid("s"), 8).await.unwrap();
    let mut producer = limited
        .open(&sid("s"))
        .await
        .unwrap()
        .acquire_producer()
        .await
        .unwrap();
    match producer.append(b"denied").await {
        Err(e @ Error::Server(_)) => assert!(names_a_permission(&e), "{e}"),
        other => panic!("append: expected a server error, got {other:?}"),
    }
    let _: () = redis::cmd("ACL")
        .arg(&["SETUSER", "writer", "+xadd"])
        .query(&mut server.raw())
        .unwrap();
    // The refusal consumed no id: the next append is event 1.
    assert_eq!(producer.append(b"allowed").await.unwrap(), 1);
    assert_eq!(payloads(&producer).await, vec![(1, "allowed".to_owned())]);
}

/// The password is changed while an append's reply is on its way, and the connection drops: the
/// reconnection is refused at authentication. The append may have run (it did), so it is
/// `Unknown` and kept; once the password is back, the same backend reconnects by itself and the
/// resend is recognised, so the log holds each event once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_changing_under_a_lost_reply_leave_the_append_unknown_and_recoverable() {
    let server = RedisServer::start_with(&["--requirepass", "old"]);
    let proxy = CutProxy::start(server.port).await;
    let mut producer = producing_one(&format!("redis://:old@{}/", proxy.addr)).await;

    let mut admin = admin(&server, "old");
    config_set(&mut admin, "requirepass", "new");
    proxy.set(Mode::LoseOneReply);
    match producer.append(b"two").await {
        Err(Error::Unknown { id: 2, .. }) => {}
        other => panic!("expected an unknown outcome for id 2, got {other:?}"),
    }
    // While Redis refuses the credentials, the event stays pending (the refusal is of the
    // connection, not of the event).
    assert!(producer.resolve_pending().await.is_err());
    assert_eq!(producer.next_id(), 2);

    config_set(&mut admin, "requirepass", "old");
    let deadline = Instant::now() + Duration::from_secs(10);
    let resolved = loop {
        match producer.resolve_pending().await {
            Ok(last) => break last,
            Err(e) => {
                assert!(
                    Instant::now() < deadline,
                    "the backend did not recover: {e}"
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    };
    assert_eq!(resolved, Some(2));
    assert_eq!(producer.append(b"three").await.unwrap(), 3);
    assert_eq!(payloads(&producer).await, one_two_three());
}

/// An ACL rule that comes into force between an append Redis ran and the resend of it (its
/// reply was lost): the resend is refused (`NOPERM`), yet the event is stored. The append is
/// `Unknown` and kept, never taken for refused (which would drop it, and make every later
/// append a `Conflict` over its id); once the rule is lifted it lands once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acl_rule_arriving_under_a_lost_reply_leaves_the_append_unknown() {
    let server = RedisServer::start();
    let _: () = redis::cmd("ACL")
        .arg(&["SETUSER", "writer", "on", ">pw", "~*", "&*", "+@all"])
        .query(&mut server.raw())
        .unwrap();
    let proxy = CutProxy::start(server.port).await;
    let mut producer = producing_one(&format!("redis://writer:pw@{}/", proxy.addr)).await;

    let set_rule = |rule: &'static str| {
        let url = server.url();
        move || {
            let mut admin = redis::Client::open(url).unwrap().get_connection().unwrap();
            let _: () = redis::cmd("ACL")
                .arg(&["SETUSER", "writer", rule])
                .query(&mut admin)
                .unwrap();
        }
    };
    proxy.on_lost_reply(set_rule("-evalsha"));
    proxy.set(Mode::LoseOneReply);
    match producer.append(b"two").await {
        Err(Error::Unknown { id: 2, .. }) => {}
        other => panic!("expected an unknown outcome for id 2, got {other:?}"),
    }
    assert!(producer.has_pending());
    set_rule("+evalsha")();
    assert_eq!(producer.resolve_pending().await.unwrap(), Some(2));
    assert_eq!(producer.append(b"three").await.unwrap(), 3);
    assert_eq!(payloads(&producer).await, one_two_three());
}
