//! A stream refuses, when it is built, the settings it cannot honour: each one named by a typed
//! error, the limits themselves accepted, and a stream built at the limits working on the wire.

#![cfg(feature = "axum")]

use std::time::Duration;

use ::axum::http::{HeaderMap, StatusCode};
use bytes::Bytes;
use futures_util::StreamExt;
use replay_ring::{BuildError, ReplayRing};
use replay_ring_sse::axum::{SseConfig, SseStream};
use replay_ring_sse::{ConfigError, SlowConsumerPolicy, MAX_RETRY, MIN_KEEP_ALIVE};
use replay_ring_sse::{Epoch, StreamId, StreamIdentity};

fn me() -> StreamIdentity {
    StreamIdentity::new(StreamId::new("cfg").unwrap(), Epoch::new(1))
}

fn policy(write_timeout: Option<Duration>, max_lag_percent: Option<u8>) -> SlowConsumerPolicy {
    SlowConsumerPolicy {
        write_timeout,
        max_lag_percent,
        ..SlowConsumerPolicy::default()
    }
}

/// Every setting a stream cannot work with, and the error that names it.
fn refused() -> Vec<(SseConfig, ConfigError)> {
    let base = SseConfig::default;
    let tick = Duration::from_nanos(1);
    vec![
        (
            SseConfig {
                capacity: 0,
                ..base()
            },
            ConfigError::Ring(BuildError::ZeroCapacity),
        ),
        (
            SseConfig {
                max_connections: 0,
                ..base()
            },
            ConfigError::Ring(BuildError::ZeroReaders),
        ),
        (
            SseConfig {
                keep_alive: tick,
                ..base()
            },
            ConfigError::KeepAliveTooShort(tick),
        ),
        (
            SseConfig {
                keep_alive: MIN_KEEP_ALIVE - tick,
                ..base()
            },
            ConfigError::KeepAliveTooShort(MIN_KEEP_ALIVE - tick),
        ),
        (
            SseConfig {
                retry: Some(Duration::MAX),
                ..base()
            },
            ConfigError::RetryTooLong(Duration::MAX),
        ),
        (
            SseConfig {
                retry: Some(MAX_RETRY + tick),
                ..base()
            },
            ConfigError::RetryTooLong(MAX_RETRY + tick),
        ),
        (
            SseConfig {
                slow_consumer: policy(None, Some(0)),
                ..base()
            },
            ConfigError::MaxLagPercent(0),
        ),
        (
            SseConfig {
                slow_consumer: policy(None, Some(101)),
                ..base()
            },
            ConfigError::MaxLagPercent(101),
        ),
        (
            SseConfig {
                slow_consumer: policy(Some(Duration::ZERO), None),
                ..base()
            },
            ConfigError::ZeroWriteTimeout,
        ),
    ]
}

#[test]
fn a_setting_the_stream_cannot_honour_is_refused_by_name() {
    for (config, expected) in refused() {
        assert_eq!(config.check(), Err(expected), "{config:?}");
        let built = SseStream::new(me(), config).map(drop);
        assert_eq!(built, Err(expected), "{config:?}");
        assert!(!expected.to_string().is_empty());
    }
}

#[test]
fn the_error_message_names_the_setting() {
    let names = [
        "capacity",
        "max_readers",
        "keep_alive",
        "keep_alive",
        "retry",
        "retry",
        "max_lag_percent",
        "max_lag_percent",
        "write_timeout",
    ];
    for ((_, error), name) in refused().into_iter().zip(names) {
        assert!(error.to_string().contains(name), "{error} names no {name}");
    }
}

/// A backend other than the ring decides its own capacity, so `with_backend` does not look at
/// it, but the settings every backend shares are checked there too: a panic, as for any
/// constructor given an impossible argument, with the setting's error in the message.
#[test]
fn with_backend_refuses_the_shared_settings_and_ignores_the_rings() {
    for (config, expected) in refused() {
        let (producer, _ring) = ReplayRing::<Bytes>::new(8, 2).unwrap();
        let build = || SseStream::with_backend(producer, me(), config);
        let built = std::panic::catch_unwind(std::panic::AssertUnwindSafe(build));
        match expected {
            ConfigError::Ring(_) => assert!(built.is_ok(), "{config:?}"),
            _ => {
                let panic = built.map(drop).unwrap_err();
                let message = panic.downcast_ref::<String>().unwrap();
                assert!(message.contains(&expected.to_string()), "{message}");
            }
        }
    }
}

#[test]
fn the_limits_themselves_and_the_off_values_are_accepted() {
    let accepted = [
        SseConfig {
            keep_alive: Duration::ZERO,
            ..SseConfig::default()
        },
        SseConfig {
            keep_alive: MIN_KEEP_ALIVE,
            ..SseConfig::default()
        },
        SseConfig {
            keep_alive: Duration::MAX,
            ..SseConfig::default()
        },
        SseConfig {
            retry: None,
            ..SseConfig::default()
        },
        SseConfig {
            retry: Some(Duration::ZERO),
            ..SseConfig::default()
        },
        SseConfig {
            retry: Some(MAX_RETRY),
            ..SseConfig::default()
        },
        SseConfig {
            slow_consumer: policy(None, None),
            ..SseConfig::default()
        },
        SseConfig {
            slow_consumer: policy(Some(Duration::from_nanos(1)), Some(1)),
            ..SseConfig::default()
        },
        SseConfig {
            slow_consumer: policy(Some(Duration::MAX), Some(100)),
            ..SseConfig::default()
        },
    ];
    for config in accepted {
        assert_eq!(config.check(), Ok(()), "{config:?}");
        assert!(SseStream::new(me(), config).is_ok(), "{config:?}");
    }
}

/// The longest accepted `retry` is announced exactly, in milliseconds.
#[tokio::test]
async fn the_longest_retry_is_announced_in_milliseconds() {
    let config = SseConfig {
        retry: Some(MAX_RETRY),
        ..SseConfig::default()
    };
    let (stream, _producer) = SseStream::new(me(), config).unwrap();
    let response = stream.respond(&HeaderMap::new());
    assert_eq!(response.status(), StatusCode::OK);
    let mut body = response.into_body().into_data_stream();
    let priming = body.next().await.unwrap().unwrap();
    let text = std::str::from_utf8(&priming).unwrap();
    assert!(text.contains("\nretry: 2147483647\n"), "{text}");
}
