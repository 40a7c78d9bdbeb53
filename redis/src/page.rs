//! A state read: the READ script's resume decision (epoch, window, close reason, ctl's newest id)
//! with the page of entries after a cursor, as one consistent answer.

use crate::codec::{self, Page, Reply};
use crate::error::Error;
use crate::scripts;
use crate::stream::RedisStream;

/// One page after `after`: the READ script's decision (window, epoch, close reason) with a
/// native `XRANGE` pipelined right behind it, in one round trip. Commands of another connection
/// may run between the two, so the page is accepted only if it continues the cursor exactly
/// (entries that exist were not released); otherwise the script runs again with the entries
/// inside it, which classifies the case atomically (gap, or entries missing from the log).
pub(crate) async fn read_page(stream: &RedisStream, after: u64) -> Result<Page, Error> {
    let s = stream;
    let seen = s.head_seen_before();
    let after_arg = after.min(crate::MAX_ID + 1).to_string();
    let count = s.backend.config().read_batch;
    let mut pipe = redis::pipe();
    pipe.cmd("EVALSHA_RO")
        .arg(scripts::READ_SCRIPT.hash())
        .arg(3)
        .arg(&s.keys.meta)
        .arg(&s.keys.log)
        .arg(&s.keys.ctl)
        .arg(codec::encode_epoch(s.epoch))
        .arg(&after_arg)
        .arg(0)
        .cmd("XRANGE")
        .arg(&s.keys.log)
        .arg(format!("(0-{after_arg}"))
        .arg("+")
        .arg("COUNT")
        .arg(count);
    let mut conn = s.backend.connection();
    let reply: Result<(redis::Value, redis::Value), _> = pipe.query_async(&mut conn).await;
    let (decision, range) = match reply {
        Ok(r) => r,
        Err(e)
            if e.is_io_error()
                || e.is_timeout()
                || e.is_connection_dropped()
                || e.is_connection_refusal() =>
        {
            return Err(Error::from_redis(&s.id, e));
        }
        // An error reply inside the pipeline (NOSCRIPT after a restart or failover, a corrupt
        // field, a wrong key type): the single-command path reloads the script and reports the
        // error with its own code.
        Err(_) => return read_page_atomic(s, after).await,
    };
    let mut page = decide_page(s, after, seen, decision)?;
    if let redis::Value::Array(raw) = range {
        page.entries = raw
            .into_iter()
            .map(|e| codec::entry(&s.id, e))
            .collect::<Result<_, _>>()?;
    }
    if after < page.head && page.entries.first().map(|(id, _)| *id) != Some(after + 1) {
        // Released or removed between the two commands (or never there): decide atomically.
        return read_page_atomic(s, after).await;
    }
    Ok(page)
}

/// The READ script with the page inside it: decision and entries in one atomic step.
async fn read_page_atomic(stream: &RedisStream, after: u64) -> Result<Page, Error> {
    let s = stream;
    let seen = s.head_seen_before();
    let after_arg = after.min(crate::MAX_ID + 1).to_string();
    let epoch = codec::encode_epoch(s.epoch);
    let count = s.backend.config().read_batch.to_string();
    let value = scripts::eval_read(
        &scripts::READ_SCRIPT,
        &mut s.backend.connection(),
        &[&s.keys.meta, &s.keys.log, &s.keys.ctl],
        [epoch.as_str(), after_arg.as_str(), count.as_str()],
    )
    .await
    .map_err(|e| Error::from_redis(&s.id, e))?;
    let page = decide_page(s, after, seen, value)?;
    if after < page.head && page.entries.first().map(|(id, _)| *id) != Some(after + 1) {
        return Err(codec::corrupt(
            &s.id,
            &format!(
                "entry {} is missing from the log (retained {}..={})",
                after + 1,
                page.floor,
                page.head
            ),
        ));
    }
    Ok(page)
}

/// Reads the READ script's reply: the decision, and the entries if the script read them.
/// `seen`: the handle's highest head before the command was sent ([`RedisStream::check_head`]).
fn decide_page(s: &RedisStream, after: u64, seen: u64, value: redis::Value) -> Result<Page, Error> {
    let (mut reply, status) = Reply::new(&s.id, value)?;
    match status.as_str() {
        "OK" => {
            let floor = reply.id("floor")?;
            let head = reply.id("head")?;
            s.check_head(seen, head)?;
            let closed = reply.reason("closed")?;
            let ctl = reply.string("ctl")?;
            let entries = reply.entries("entries")?;
            Ok(Page {
                floor,
                head,
                closed,
                ctl,
                entries,
            })
        }
        "AHEAD" => {
            let _floor = reply.id("floor")?;
            let head = reply.id("head")?;
            s.check_head(seen, head)?;
            Err(Error::AheadOfHead {
                requested: after,
                head,
            })
        }
        "GAP" => {
            let floor = reply.id("floor")?;
            let head = reply.id("head")?;
            s.check_head(seen, head)?;
            Err(Error::Gap {
                requested: after,
                floor,
                head,
            })
        }
        other => Err(s.common_status(other, &mut reply)),
    }
}
