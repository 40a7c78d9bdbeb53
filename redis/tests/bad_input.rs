//! Data this crate did not write, a stream deleted behind its back, and Redis out of memory: each
//! gives a typed error, never a panic.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::RedisServer;
use replay_ring::CloseReason;
use replay_ring_redis::{Error, ReadItem, RedisBackend, RedisConfig, RedisStream};
use replay_ring_sse::StreamId;

fn sid(name: &str) -> StreamId {
    StreamId::new(name).unwrap()
}

async fn with_events(backend: &RedisBackend, name: &str, n: u64) -> RedisStream {
    let stream = backend.create(&sid(name), 64).await.unwrap();
    let mut p = stream.acquire_producer().await.unwrap();
    for i in 1..=n {
        p.append(format!("e{i}").as_bytes()).await.unwrap();
    }
    p.release_lease().await.unwrap();
    stream
}

fn hset(server: &RedisServer, key: &str, field: &str, value: &str) {
    let _: () = redis::cmd("HSET")
        .arg(key)
        .arg(field)
        .arg(value)
        .query(&mut server.raw())
        .unwrap();
}

fn assert_corrupt<T: std::fmt::Debug>(what: &str, r: Result<T, Error>) {
    match r {
        Err(Error::Corrupt { detail, .. }) => assert!(!detail.is_empty(), "{what}"),
        other => panic!("{what}: expected Corrupt, got {other:?}"),
    }
}

/// Settings that cannot work are refused by `connect`, before any connection is made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn impossible_configurations_are_refused_up_front() {
    let refused = |config: RedisConfig| async move {
        // Port 1 on loopback: nothing listens there, so a configuration that passed the checks
        // would fail as `Unavailable` instead.
        match RedisBackend::connect("redis://127.0.0.1:1/", config).await {
            Err(Error::InvalidArgument(why)) => why,
            Err(other) => panic!("expected InvalidArgument, got {other:?}"),
            Ok(_) => panic!("expected InvalidArgument, got a backend"),
        }
    };
    let base = RedisConfig::default;
    // URLs, refused with what is wrong with them.
    for (url, says) in [
        ("rediss://127.0.0.1:1/", "TLS"),
        ("REDISS://127.0.0.1:1/", "TLS"),
        ("http://127.0.0.1:1/", "not a valid redis URL"),
        ("", "not a valid redis URL"),
    ] {
        match RedisBackend::connect(url, base()).await {
            Err(Error::InvalidArgument(why)) => assert!(why.contains(says), "{url}: {why}"),
            Err(other) => panic!("{url}: expected InvalidArgument, got {other:?}"),
            Ok(_) => panic!("{url}: expected InvalidArgument, got a backend"),
        }
    }
    let why = refused(RedisConfig {
        stream_ttl: Duration::from_millis(500),
        lease: Duration::from_secs(10),
        ..base()
    })
    .await;
    assert!(why.contains("stream_ttl"), "{why}");
    refused(RedisConfig {
        key_prefix: "a{b}".into(),
        ..base()
    })
    .await;
    refused(RedisConfig {
        lease: Duration::ZERO,
        ..base()
    })
    .await;
    // A lease of a few milliseconds lapses before the first append reaches Redis: every append
    // would be refused as fenced.
    let why = refused(RedisConfig {
        lease: Duration::from_millis(99),
        stream_ttl: Duration::ZERO,
        ..base()
    })
    .await;
    assert!(why.contains("lease must be at least 100 ms"), "{why}");
    // A zero response or connect timeout would fail requests at random, not fail fast.
    for config in [
        RedisConfig {
            response_timeout: Duration::ZERO,
            ..base()
        },
        RedisConfig {
            connect_timeout: Duration::ZERO,
            ..base()
        },
    ] {
        let why = refused(config).await;
        assert!(why.contains("timeout"), "{why}");
    }
    // A zero limit would refuse every append.
    let why = refused(RedisConfig {
        max_payload_bytes: 0,
        ..base()
    })
    .await;
    assert!(why.contains("max_payload_bytes"), "{why}");
    // `XRANGE … COUNT` takes a signed 64-bit count: more would fail every read.
    let why = refused(RedisConfig {
        read_batch: usize::MAX,
        ..base()
    })
    .await;
    assert!(why.contains("read_batch"), "{why}");
    // Durations Redis takes in milliseconds, which the scripts read as exact Lua numbers.
    let too_long = Duration::from_millis(1 << 53);
    for config in [
        RedisConfig {
            stream_ttl: Duration::MAX,
            ..base()
        },
        RedisConfig {
            stream_ttl: too_long,
            ..base()
        },
        RedisConfig {
            lease: Duration::MAX,
            stream_ttl: Duration::ZERO,
            ..base()
        },
        RedisConfig {
            block: Duration::MAX,
            ..base()
        },
    ] {
        let why = refused(config).await;
        assert!(why.contains("2^53"), "{why}");
    }

    // No expiry at all, or an expiry of at least the lease, is accepted.
    let server = RedisServer::start();
    for stream_ttl in [Duration::ZERO, Duration::from_secs(10)] {
        let config = RedisConfig {
            stream_ttl,
            lease: Duration::from_secs(10),
            ..base()
        };
        RedisBackend::connect(&server.url(), config).await.unwrap();
    }
    let largest_batch = RedisConfig {
        read_batch: usize::try_from(i64::MAX).unwrap_or(usize::MAX),
        ..base()
    };
    let backend = RedisBackend::connect(&server.url(), largest_batch)
        .await
        .unwrap();
    let stream = backend
        .create(&StreamId::new("largest-batch").unwrap(), 8)
        .await
        .unwrap();
    let mut producer = stream.acquire_producer().await.unwrap();
    producer.append(b"one").await.unwrap();
    let mut reader = stream.resume(Some(0)).await.unwrap();
    assert_eq!(
        reader.recv().await.unwrap(),
        ReadItem::Events(vec![(1, Bytes::from("one"))])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_meta_fields_are_corrupt() {
    let server = RedisServer::start();
    let backend = server.backend().await;
    for (field, value) in [
        ("head", "abc"),
        ("head", "-1"),
        ("head", "99999999999999999999"),
        ("floor", ""),
        ("cap", "1e5"),
        ("ttl", "x"),
        // 2^53 + 1, which a Lua number (a double) rounds to 2^53, the largest value allowed.
        ("cap", "9007199254740993"),
        ("ttl", "9007199254740993"),
        // No reason the crate stores is empty: a closed stream that readers would call open.
        ("closed", ""),
    ] {
        let name = format!("meta-{field}-{}", value.len());
        let stream = with_events(&backend, &name, 3).await;
        let meta = stream.key_names()[0].to_owned();
        hset(&server, &meta, field, value);
        let what = format!("{field}={value:?}");
        assert_corrupt(&format!("state {what}"), stream.state().await);
        assert_corrupt(
            &format!("open {what}"),
            backend.open(&sid(&name)).await.map(|_| ()),
        );
        // Creating over it opens it, and checks it as `open` does.
        assert_corrupt(
            &format!("create {what}"),
            backend.create(&sid(&name), 8).await.map(|_| ()),
        );
        if field != "ttl" && field != "cap" {
            assert_corrupt(
                &format!("resume {what}"),
                stream.resume(Some(1)).await.map(|_| ()),
            );
        }
        let producer = stream.acquire_producer().await;
        // A grant reads the head, whether the stream is closed, and the ttl to refresh the
        // stream's expiry with.
        if field == "head" || field == "ttl" || field == "closed" {
            assert_corrupt(&format!("acquire {what}"), producer.map(|_| ()));
        } else {
            let mut p = producer.unwrap();
            assert_corrupt(&format!("append {what}"), p.append(b"x").await);
        }
    }
}

/// A lease key that holds no fencing token, or one without an expiry, is corrupt: taken for a
/// live lease, it would keep a standby waiting for ever. A fence counter at 2^53 is corrupt too,
/// so that no two grants get the same token (Lua counts in doubles).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_or_fence_written_behind_the_backends_back_is_corrupt() {
    let server = RedisServer::start();
    let backend = server.backend().await;
    let set = |args: &[&str]| {
        let _: () = redis::cmd("SET")
            .arg(args)
            .query(&mut server.raw())
            .unwrap();
    };
    let stream = with_events(&backend, "lease", 1).await;
    let lease = stream.key_names()[3].to_owned();
    for (value, expiry) in [("garbage", None), ("7", None), ("", Some("60000"))] {
        match expiry {
            Some(ms) => set(&[&lease, value, "PX", ms]),
            None => set(&[&lease, value]),
        }
        let what = format!("lease {value:?} expiring in {expiry:?} ms");
        assert_corrupt(&what, stream.acquire_producer().await.map(|_| ()));
        let standby =
            tokio::time::timeout(Duration::from_secs(10), stream.acquire_producer_when_free())
                .await
                .unwrap_or_else(|_| panic!("{what}: a standby still waits"));
        assert_corrupt(&format!("{what}, standby"), standby.map(|_| ()));
    }
    // A token with an expiry is a lease held by someone else, as before.
    set(&[&lease, "7", "PX", "60000"]);
    match stream.acquire_producer().await {
        Err(Error::LeaseHeld {
            holder: 7,
            expires_in_ms,
        }) => assert!((1..=60_000).contains(&expires_in_ms), "{expires_in_ms}"),
        other => panic!("a live lease: {:?}", other.map(|_| ())),
    }

    let stream = with_events(&backend, "fence", 1).await;
    let [meta, _, _, lease] = stream.key_names();
    hset(&server, meta, "fence", "9007199254740991");
    let last = stream.acquire_producer().await.unwrap();
    assert_eq!(last.fencing_token(), 1 << 53, "the last token there is");
    // The holder's lease lapses; the next grant would need a token past 2^53.
    let _: () = redis::cmd("DEL")
        .arg(lease)
        .query(&mut server.raw())
        .unwrap();
    assert_corrupt(
        "acquire past 2^53",
        stream.acquire_producer().await.map(|_| ()),
    );
}

/// A window written behind the backend's back that `state` calls corrupt (a floor of 0 or past
/// `head + 1`, a capacity of 0) is corrupt for the scripts too: appended into with the window
/// check off (a floor past the head), resumes answered `Gap` with a floor above the head, or
/// every append `Full` for good (a capacity of 0, which `append_wait` would wait on) otherwise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inconsistent_window_is_corrupt_for_append_resume_and_release() {
    let server = RedisServer::start();
    let backend = server.backend().await;
    for (field, value) in [("floor", "0"), ("floor", "100"), ("cap", "0")] {
        let name = format!("window-{field}-{value}");
        let stream = backend.create(&sid(&name), 4).await.unwrap();
        let mut p = stream.acquire_producer().await.unwrap();
        p.append(b"e1").await.unwrap();
        p.append(b"e2").await.unwrap();
        hset(&server, stream.key_names()[0], field, value);
        let what = format!("{field}={value}");
        assert_corrupt(&format!("state {what}"), stream.state().await);
        assert_corrupt(&format!("append {what}"), p.append(b"e3").await);
        if field == "floor" {
            // Resumes and releases do not read the capacity.
            assert_corrupt(
                &format!("resume {what}"),
                stream.resume(Some(1)).await.map(|_| ()),
            );
            assert_corrupt(&format!("release {what}"), stream.release_through(1).await);
        }
        let ids: Vec<u64> = server.log_entries(&stream).iter().map(|e| e.0).collect();
        assert_eq!(ids, [1, 2], "{what}: nothing appended or trimmed");
    }
}

/// A stream whose epoch is not spelled as an epoch is no incarnation: its handle's `delete`
/// deletes it (a newer incarnation's keys would be left alone), and without a handle, which no
/// `open` or `create` gives, the backend's `purge` does. Either way `create` works again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_with_a_garbage_epoch_is_deleted_by_delete_and_by_purge() {
    let server = RedisServer::start();
    let backend = server.backend().await;
    let exists = |stream: &RedisStream| -> u64 {
        redis::cmd("EXISTS")
            .arg(stream.key_names().to_vec())
            .query(&mut server.raw())
            .unwrap()
    };
    for (name, garbage) in [("by-handle", "not-hex"), ("by-purge", "0a")] {
        let stream = with_events(&backend, name, 2).await;
        hset(&server, stream.key_names()[0], "epoch", garbage);
        assert_corrupt("open", backend.open(&sid(name)).await.map(|_| ()));
        assert_corrupt("create", backend.create(&sid(name), 64).await.map(|_| ()));
        if name == "by-handle" {
            stream.delete().await.unwrap();
        } else {
            backend.purge(&sid(name)).await.unwrap();
        }
        assert_eq!(exists(&stream), 0, "{name}: every key deleted");
        let again = backend.create(&sid(name), 64).await.unwrap();
        assert_eq!(again.state().await.unwrap().head, 0, "{name}");
    }
    // A newer incarnation (a well-spelled epoch) is not an old handle's to delete.
    let old = with_events(&backend, "newer", 1).await;
    hset(&server, old.key_names()[0], "epoch", "abc");
    old.delete().await.unwrap();
    assert!(
        exists(&old) > 0,
        "another incarnation's keys are left alone"
    );
}

/// A head of 2^53 (one past the last id the backend hands out) written behind its back is
/// corrupt for every operation, so no cursor above the last id is taken for "at the head".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_past_the_last_id_is_corrupt() {
    let server = RedisServer::start();
    let backend = server.backend().await;
    let stream = with_events(&backend, "past-last", 2).await;
    let meta = stream.key_names()[0].to_owned();
    hset(&server, &meta, "head", "9007199254740992");
    hset(&server, &meta, "floor", "9007199254740992");
    assert_corrupt("state", stream.state().await);
    assert_corrupt("open", backend.open(&sid("past-last")).await.map(|_| ()));
    for cursor in [u64::MAX, (1 << 53) + 5, 1 << 53, 1] {
        assert_corrupt(
            &format!("resume {cursor}"),
            stream.resume(Some(cursor)).await.map(|_| ()),
        );
        assert_corrupt(
            &format!("release {cursor}"),
            stream.release_through(cursor).await,
        );
    }
    assert_corrupt("acquire", stream.acquire_producer().await.map(|_| ()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_epoch_reason_and_key_types_are_corrupt() {
    let server = RedisServer::start();
    let backend = server.backend().await;
    let stream = with_events(&backend, "epoch", 1).await;
    hset(&server, stream.key_names()[0], "epoch", "not-hex");
    assert_corrupt("open", backend.open(&sid("epoch")).await.map(|_| ()));

    let stream = with_events(&backend, "reason", 2).await;
    hset(&server, stream.key_names()[0], "closed", "exploded");
    let mut r = stream.resume(Some(0)).await;
    if let Ok(reader) = &mut r {
        // The reason is read with the first page: a reader must never report a garbage reason.
        assert_corrupt("recv", reader.recv().await);
    } else {
        assert_corrupt("resume", r.map(|_| ()));
    }

    let stream = with_events(&backend, "wrongtype", 2).await;
    let _: () = redis::cmd("DEL")
        .arg(stream.key_names()[0])
        .query(&mut server.raw())
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg(stream.key_names()[0])
        .arg("x")
        .query(&mut server.raw())
        .unwrap();
    assert_corrupt("state on a string", stream.state().await);
    assert_corrupt(
        "resume on a string",
        stream.resume(Some(0)).await.map(|_| ()),
    );
    // The way back from a corrupt stream is to delete it, whatever holds its place.
    stream.delete().await.unwrap();
    let exists: u64 = redis::cmd("EXISTS")
        .arg(stream.key_names().to_vec())
        .query(&mut server.raw())
        .unwrap();
    assert_eq!(exists, 0, "every key of the corrupt stream is deleted");
    let again = backend.create(&sid("wrongtype"), 64).await.unwrap();
    assert_eq!(again.state().await.unwrap().head, 0);

    let stream = with_events(&backend, "logtype", 0).await;
    let _: () = redis::cmd("SET")
        .arg(stream.key_names()[1])
        .arg("x")
        .query(&mut server.raw())
        .unwrap();
    let mut p = stream.acquire_producer().await.unwrap();
    assert_corrupt("append onto a string log", p.append(b"x").await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_log_entries_are_corrupt() {
    let server = RedisServer::start();
    let backend = server.backend().await;
    // An entry with other fields, appended behind our back with the head moved to match.
    let stream = with_events(&backend, "fields", 2).await;
    let _: String = redis::cmd("XADD")
        .arg(stream.key_names()[1])
        .arg("0-3")
        .arg("x")
        .arg("y")
        .query(&mut server.raw())
        .unwrap();
    hset(&server, stream.key_names()[0], "head", "3");
    let mut reader = stream.resume(Some(2)).await;
    match &mut reader {
        Ok(r) => assert_corrupt("recv", r.recv().await),
        Err(_) => assert_corrupt("resume", reader.map(|_| ())),
    }
    // An entry id not of our form.
    let stream = with_events(&backend, "ids", 1).await;
    let _: String = redis::cmd("XADD")
        .arg(stream.key_names()[1])
        .arg("7-1")
        .arg("d")
        .arg("y")
        .query(&mut server.raw())
        .unwrap();
    hset(&server, stream.key_names()[0], "head", "2");
    let r = stream.resume(Some(1)).await;
    assert_corrupt("foreign id", r.map(|_| ()));
    // An entry at the next id, the head left alone: the log refuses the producer's append.
    let stream = with_events(&backend, "next", 1).await;
    let _: String = redis::cmd("XADD")
        .arg(stream.key_names()[1])
        .arg("0-2")
        .arg("d")
        .arg("y")
        .query(&mut server.raw())
        .unwrap();
    let mut producer = stream.acquire_producer().await.unwrap();
    assert_corrupt("append", producer.append(b"e2").await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_deleted_externally_is_lost_for_everyone() {
    let server = RedisServer::start();
    let backend = server.backend().await;
    let stream = with_events(&backend, "gone", 3).await;
    let mut p = stream.acquire_producer().await.unwrap();
    let mut reader = stream.resume(Some(3)).await.unwrap();
    let waiting = tokio::spawn(async move { reader.recv().await });

    // Only the log disappears: entries the window promises are missing.
    let _: () = redis::cmd("DEL")
        .arg(stream.key_names()[1])
        .query(&mut server.raw())
        .unwrap();
    assert_corrupt(
        "resume after log deleted",
        stream.resume(Some(1)).await.map(|_| ()),
    );

    // Everything disappears (FLUSHDB, a careless DEL): not found, for every operation.
    let _: () = redis::cmd("FLUSHDB").query(&mut server.raw()).unwrap();
    assert!(matches!(
        stream.resume(Some(1)).await,
        Err(Error::NotFound { .. })
    ));
    assert!(matches!(stream.state().await, Err(Error::NotFound { .. })));
    assert!(matches!(
        stream.release_through(1).await,
        Err(Error::NotFound { .. })
    ));
    assert!(matches!(p.append(b"x").await, Err(Error::NotFound { .. })));
    // The blocked reader notices on its next wake-up (block timeout at most).
    let got = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(got, Err(Error::NotFound { .. })), "{got:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_memory_is_a_typed_error_and_release_and_renewal_still_work() {
    let server =
        RedisServer::start_with(&["--maxmemory", "4mb", "--maxmemory-policy", "noeviction"]);
    let config = RedisConfig {
        block: Duration::from_millis(200),
        ..RedisConfig::default()
    };
    let backend = server.backend_with(config).await;
    let stream = backend.create(&sid("oom"), 1_000).await.unwrap();
    let mut p = stream.acquire_producer().await.unwrap();
    let big = vec![b'x'; 256 * 1024];
    let mut appended = 0;
    let err = loop {
        match p.append(&big).await {
            Ok(id) => appended = id,
            Err(e) => break e,
        }
        assert!(appended < 100, "maxmemory never reached");
    };
    assert!(matches!(err, Error::OutOfMemory(_)), "{err:?}");
    assert!(
        !p.has_pending(),
        "a refused append is not an unknown outcome"
    );
    assert!(appended > 0);
    // Well over the limit now (not only for a large append): the lease is renewed all the
    // same. A standby would be refused the same appends, and a lease that lapsed and moved on
    // would fence this producer once memory is freed.
    let _: () = redis::cmd("CONFIG")
        .arg(&["SET", "maxmemory", "1mb"])
        .query(&mut server.raw())
        .unwrap();
    assert!(matches!(
        p.append(b"small").await,
        Err(Error::OutOfMemory(_))
    ));
    p.renew().await.unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg(&["SET", "maxmemory", "4mb"])
        .query(&mut server.raw())
        .unwrap();
    // Reads still work (read-only scripts), and nothing was half-written.
    let state = stream.state().await.unwrap();
    assert_eq!(state.head, appended);
    let mut r = stream.resume(Some(appended - 1)).await.unwrap();
    assert!(matches!(r.recv().await.unwrap(), ReadItem::Events(e) if e.len() == 1));
    // Releasing frees memory, then appends succeed again with the next id.
    stream.release_through(appended).await.unwrap();
    assert_eq!(p.append(b"small").await.unwrap(), appended + 1);
    p.close(CloseReason::Completed).await.unwrap();
}

/// A primary set up with `min-replicas-to-write` refuses writes while too few replicas are in
/// reach (`NOREPLICAS`): a transient refusal, like a failover's. An append is kept and resent, and
/// lands once the replicas are back; a lease is not renewed meanwhile, and reads still work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_refused_for_want_of_replicas_are_transient_and_land_later() {
    let server = RedisServer::start();
    let backend = server.backend().await;
    let stream = with_events(&backend, "noreplicas", 1).await;
    let mut p = stream.acquire_producer().await.unwrap();
    let min_replicas = |n: &str| {
        let _: () = redis::cmd("CONFIG")
            .arg(&["SET", "min-replicas-to-write", n])
            .query(&mut server.raw())
            .unwrap();
    };

    min_replicas("1"); // and this Redis has none
    match p.append(b"two").await {
        Err(Error::Unknown { id: 2, source }) => {
            assert!(source.to_string().contains("NOREPLICAS"), "{source}")
        }
        other => panic!("an append refused for want of replicas: {other:?}"),
    }
    assert!(p.has_pending());
    let refused = p.renew().await.unwrap_err();
    assert!(refused.is_transient(), "a lease renewal: {refused:?}");
    assert_eq!(stream.state().await.unwrap().head, 1, "reads still work");

    min_replicas("0");
    assert_eq!(p.resolve_pending().await.unwrap(), Some(2));
    assert_eq!(p.append(b"three").await.unwrap(), 3);
    let stored: Vec<Vec<u8>> = server
        .log_entries(&stream)
        .into_iter()
        .map(|(_, data)| data)
        .collect();
    assert_eq!(stored[1..], [b"two".to_vec(), b"three".to_vec()]);
}

/// A stream deleted and created again while a reader tails it: the new incarnation's ids restart
/// at 1 and soon pass the reader's cursor, but the reader must report the lost stream, never
/// deliver the new incarnation's events as the old one's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tailing_reader_never_reads_a_recreated_stream() {
    let server = RedisServer::start();
    let backend = server.backend().await;
    let stream = with_events(&backend, "again", 3).await;
    let mut reader = stream.resume(Some(0)).await.unwrap();
    assert!(matches!(reader.recv().await.unwrap(), ReadItem::Events(e) if e.len() == 3));
    // Caught up at 3: the next read blocks in XREAD.
    let waiting = tokio::spawn(async move { reader.recv().await });

    stream.delete().await.unwrap();
    let again = backend.create(&sid("again"), 8).await.unwrap();
    assert_ne!(again.identity().epoch, stream.identity().epoch);
    let mut p = again.acquire_producer().await.unwrap();
    for id in 1..=5 {
        assert_eq!(p.append(b"new").await.unwrap(), id);
    }
    let got = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .unwrap()
        .unwrap();
    assert!(
        matches!(got, Err(Error::EpochChanged { .. })),
        "the old incarnation's reader got {got:?}"
    );
}
