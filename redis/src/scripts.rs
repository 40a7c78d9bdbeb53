//! The server-side half of the backend: one Lua script per state transition.
//!
//! Each script runs atomically (Redis blocks every other command while it runs) and touches only
//! keys of one stream, which share a `{hash tag}` and therefore one Cluster slot. Expected outcomes
//! (window full, fenced, gap…) are returned as a status array `{'STATUS', …}` rather than as
//! errors, so the client can tell them from real failures. Numbers cross the boundary as decimal
//! strings: Lua 5.1 numbers are doubles, exact only below 2^53, so every id is kept below 2^53
//! ([`MAX_ID`](crate::MAX_ID)) and formatted with `%d`, never `tostring` (which switches to
//! exponent notation).
//!
//! Every script that acts for a handle (append, renew, close, give up the lease, release, read)
//! first compares the stream's epoch with the handle's and answers `LOST` when they differ. A
//! fencing token is unique only within one incarnation: a stream deleted or expired and created
//! again counts its tokens from 1 again, so the token alone would let a producer of the old
//! incarnation write into the new one.
//!
//! Write scripts start with the `#!lua` shebang: Redis then refuses the whole script up front when
//! it is over `maxmemory` (`-OOM`), instead of failing half-way after a first write. Read scripts
//! carry `flags=no-writes`, so they keep working while Redis is out of memory, and run with
//! `EVALSHA_RO` / `EVAL_RO`, so they keep working while Redis holds writes back ([`eval_read`]); release, close and
//! renew carry `flags=allow-oom`, because releasing is how memory is freed, closing is how a stream
//! ends explicitly when appends can no longer succeed, and renewing keeps the producer's lease
//! (a standby could not append either, and a lapsed lease would fence the producer once memory
//! is freed). None of the three grows memory.

use std::sync::LazyLock;

use redis::aio::ConnectionLike;
use redis::{Cmd, RedisResult, Script, Value};

/// Lua functions shared by every script, placed after the shebang line.
const PRELUDE: &str = r#"
local LIMIT = 9007199254740992
local function corrupt(msg)
  error({err = 'RRCORRUPT ' .. msg})
end
local function num(v, name)
  if type(v) ~= 'string' or #v == 0 or #v > 16 or not string.find(v, '^%d+$') then
    corrupt('field ' .. name .. ' is not a decimal number')
  end
  local n = tonumber(v)
  -- Of the decimals above LIMIT, only 2^53 + 1 converts to LIMIT itself (doubles round it to
  -- even), so LIMIT is checked by its spelling.
  if n > LIMIT or (n == LIMIT and v ~= '9007199254740992') then
    corrupt('field ' .. name .. ' is out of range')
  end
  return n
end
-- A stored head: an id, so below LIMIT (a floor may reach LIMIT, one past the last id).
local function head_of(v)
  local n = num(v, 'head')
  if n >= LIMIT then corrupt('field head is out of range') end
  return n
end
local function dec(n) return string.format('%d', n) end
-- A stored close reason, or false while the stream is open. Replies spell "open" as an empty
-- string, and no reason the crate stores is empty (`codec::encode_reason`): an empty one was
-- written behind its back, and taken as a close it would stop the producer while every reader,
-- told "open", waited.
local function closed_of(v)
  if v == '' then corrupt('field closed is empty') end
  return v
end
-- A stored floor, given the stored head: 1 <= floor <= head + 1, as every script keeps it (and
-- as `RedisStream::state` checks). Anything else was written behind the crate's back: going on
-- would disable the window check (a floor past the head) or answer resumes with a floor above
-- the head.
local function floor_of(v, head)
  local n = num(v, 'floor')
  if n < 1 or n > head + 1 then
    corrupt('inconsistent window: floor ' .. dec(n) .. ', head ' .. dec(head))
  end
  return n
end
local function eid(n) return string.format('0-%d', n) end
local function touch(ttl, ...)
  for _, k in ipairs({...}) do
    if ttl > 0 then redis.call('PEXPIRE', k, ttl) else redis.call('PERSIST', k) end
  end
end
-- The expiry a lease holder sets: the stream's ttl, or the lease if that is longer (replicas may
-- be configured differently, and the stream keeps its creator's ttl): a stream never expires
-- under a producer that renews its lease.
local function lease_ttl(ttl, lease_ms)
  if ttl > 0 and ttl < lease_ms then return lease_ms end
  return ttl
end
-- `touch` for callers that hold no lease (release, close): never shortens an expiry a lease
-- holder set (a key without one, new or persisted, gets it).
local function touch_no_shorter(ttl, ...)
  for _, k in ipairs({...}) do
    if ttl <= 0 then
      redis.call('PERSIST', k)
    elseif redis.call('PTTL', k) < ttl then
      redis.call('PEXPIRE', k, ttl)
    end
  end
end
"#;

/// KEYS: meta log ctl lease. ARGV: epoch capacity ttl_ms.
/// Creates a new incarnation unless the meta key exists (then reports the existing epoch). The
/// new incarnation writes ctl, so a reader of an older one that is blocked on (or comes back to)
/// ctl re-reads the state and finds the epoch changed, instead of reading the new log.
const CREATE: &str = r#"
if redis.call('EXISTS', KEYS[1]) == 1 then
  local m = redis.call('HMGET', KEYS[1], 'epoch', 'cap')
  return {'EXISTS', m[1] or '', m[2] or ''}
end
local ttl = num(ARGV[3], 'ttl')
redis.call('DEL', KEYS[2], KEYS[3], KEYS[4])
redis.call('HSET', KEYS[1], 'epoch', ARGV[1], 'cap', ARGV[2], 'head', '0', 'floor', '1',
  'fence', '0', 'ttl', ARGV[3])
redis.call('XADD', KEYS[3], 'MAXLEN', '16', '*', 'n', '1')
touch(ttl, KEYS[1], KEYS[3])
return {'CREATED', ARGV[1], ARGV[2]}
"#;

/// KEYS: meta. Read-only snapshot of the meta hash.
const STATE: &str = r#"
if redis.call('EXISTS', KEYS[1]) == 0 then return {'NOSTREAM'} end
local m = redis.call('HMGET', KEYS[1], 'epoch', 'cap', 'head', 'floor', 'closed', 'fence', 'ttl')
return {'OK', m[1] or '', m[2] or '', m[3] or '', m[4] or '', closed_of(m[5]) or '', m[6] or '',
  m[7] or ''}
"#;

/// KEYS: meta log ctl lease. ARGV: epoch.
/// Deletes the stream's keys if they are still this incarnation's (a newer one is left alone).
/// A meta key that is not a hash, or whose epoch is not spelled as this crate spells one
/// (`codec::decode_epoch`: lowercase hex, no leading zero, at most 16 digits), is no incarnation
/// at all, only something in the stream's place (the stream is `Corrupt`): deleting it is the
/// way back, so it is deleted too.
const DELETE: &str = r#"
local epoch = redis.pcall('HGET', KEYS[1], 'epoch')
if type(epoch) == 'table' and epoch.err then epoch = false end
local function spelled(e)
  return e == '0' or (#e <= 16 and string.match(e, '^[1-9a-f][0-9a-f]*$') ~= nil)
end
if epoch and epoch ~= ARGV[1] and spelled(epoch) then return {'LOST', epoch} end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4])
return {'OK'}
"#;

/// KEYS: meta lease log ctl. ARGV: epoch lease_ms seen claim.
/// Takes the producer lease if the stream is open, nobody holds the lease and the log reaches
/// `seen` (the highest head the caller saw; `BEHIND` if Redis lost events since): a fresh fencing
/// token from the meta counter, granted under the caller's `claim` (kept in meta as
/// `<token>:<claim>`). A lease held by the token granted under the same claim is the caller's own
/// acquisition repeated after its reply was lost (`claim.rs`): answered with that token. A closed stream is answered `CLOSED` without
/// touching the lease. A grant refreshes the stream's expiry to at least the lease.
const ACQUIRE: &str = r#"
if redis.call('EXISTS', KEYS[1]) == 0 then return {'NOSTREAM'} end
local m = redis.call('HMGET', KEYS[1], 'epoch', 'head', 'closed', 'fence', 'ttl')
if m[1] ~= ARGV[1] then return {'LOST', m[1] or ''} end
local head = head_of(m[2])
-- Below LIMIT, so the token granted next is too: a double holds it exactly, and no two grants
-- share one.
if num(m[4], 'fence') >= LIMIT then corrupt('field fence is out of range') end
if head < num(ARGV[3], 'seen') then return {'BEHIND', dec(head)} end
local closed = closed_of(m[3])
if closed then return {'CLOSED', closed} end
local holder = redis.call('GET', KEYS[2])
if holder then
  -- Every lease this crate grants is a token with an expiry. Anything else in the key would be
  -- waited on forever by a standby (`acquire_producer_when_free`).
  if #holder > 16 or not string.find(holder, '^%d+$') then
    corrupt('the lease key holds no fencing token')
  end
  -- The caller's own earlier acquisition, whose reply it never got: the same token again.
  if holder == m[4] and redis.call('HGET', KEYS[1], 'claim') == holder .. ':' .. ARGV[4] then
    redis.call('PEXPIRE', KEYS[2], ARGV[2])
    touch(lease_ttl(num(m[5], 'ttl'), num(ARGV[2], 'lease')), KEYS[1], KEYS[3], KEYS[4])
    return {'OK', holder, dec(head)}
  end
  local ttl = redis.call('PTTL', KEYS[2])
  if ttl < 0 then corrupt('the lease key has no expiry') end
  return {'HELD', holder, dec(ttl)}
end
local token = redis.call('HINCRBY', KEYS[1], 'fence', 1)
redis.call('HSET', KEYS[1], 'claim', dec(token) .. ':' .. ARGV[4])
redis.call('SET', KEYS[2], dec(token), 'PX', ARGV[2])
touch(lease_ttl(num(m[5], 'ttl'), num(ARGV[2], 'lease')), KEYS[1], KEYS[3], KEYS[4])
return {'OK', dec(token), dec(head)}
"#;

/// KEYS: lease meta log ctl. ARGV: token lease_ms epoch.
/// Extends the lease (and the stream's expiry) if the caller still holds it.
const RENEW: &str = r#"
if redis.call('EXISTS', KEYS[2]) == 0 then return {'NOSTREAM'} end
local epoch = redis.call('HGET', KEYS[2], 'epoch')
if epoch ~= ARGV[3] then return {'LOST', epoch or ''} end
local holder = redis.call('GET', KEYS[1])
if holder ~= ARGV[1] then return {'FENCED', holder or ''} end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
touch(lease_ttl(num(redis.call('HGET', KEYS[2], 'ttl'), 'ttl'), num(ARGV[2], 'lease')),
  KEYS[2], KEYS[3], KEYS[4])
return {'OK'}
"#;

/// KEYS: lease meta. ARGV: token epoch. Gives the lease up if the caller holds it in this
/// incarnation.
const UNLEASE: &str = r#"
if redis.call('HGET', KEYS[2], 'epoch') ~= ARGV[2] then return {'LOST'} end
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) return {'OK'} end
return {'FENCED'}
"#;

/// KEYS: meta log lease ctl. ARGV: token first_id lease_ms epoch payload...
/// Appends the payloads as entries `first_id ..` if the caller holds the lease, `first_id` is the
/// next id and the window has room for all of them (a batch is all or nothing). Only the first
/// entry is written with its explicit id (checked: the log refuses an id at or below its last);
/// the others use `0-*`, which Redis numbers last + 1 within the same script, so they get exactly
/// `first_id + 1 ..` without a string built per entry. A resend of a
/// batch that was already written (first_id <= head) is recognised and answered `DUP` (or
/// `CONFLICT` if a retained payload differs); it never writes twice.
const APPEND: &str = r#"
if redis.call('EXISTS', KEYS[1]) == 0 then return {'NOSTREAM'} end
local m = redis.call('HMGET', KEYS[1], 'cap', 'head', 'floor', 'closed', 'ttl', 'epoch')
if m[6] ~= ARGV[4] then return {'LOST', m[6] or ''} end
local holder = redis.call('GET', KEYS[3])
if holder ~= ARGV[1] then return {'FENCED', holder or ''} end
local cap = num(m[1], 'cap')
if cap < 1 then corrupt('field cap is 0') end
local head = head_of(m[2])
local floor = floor_of(m[3], head)
local ttl = num(m[5], 'ttl')
local first = num(ARGV[2], 'id')
local n = #ARGV - 4
local last = first + n - 1
if first <= head then
  if last > head then return {'SEQ', dec(head)} end
  local from = math.max(first, floor)
  if from <= last then
    local e = redis.call('XRANGE', KEYS[2], eid(from), eid(last))
    if #e ~= last - from + 1 then corrupt('entries ' .. dec(from) .. '..' .. dec(last) .. ' are missing from the log') end
    for i, entry in ipairs(e) do
      local f = entry[2]
      if f[1] ~= 'd' or f[2] ~= ARGV[4 + from - first + i] then return {'CONFLICT', dec(from + i - 1)} end
    end
  end
  return {'DUP', dec(first), dec(last), dec(floor)}
end
if first ~= head + 1 then return {'SEQ', dec(head)} end
local closed = closed_of(m[4])
if closed then return {'CLOSED', closed} end
if last - floor + 1 > cap then return {'FULL', dec(floor), dec(head), dec(cap)} end
if last >= LIMIT then return {'EXHAUSTED', dec(head)} end
local r = redis.pcall('XADD', KEYS[2], eid(first), 'd', ARGV[5])
if type(r) == 'table' and r.err then
  -- The log holds an id at or past this one: entries this crate did not write. Any other refusal
  -- (an ACL rule denying XADD) is Redis's answer to the request, passed on as it is.
  if string.find(r.err, 'equal or smaller', 1, true) then
    corrupt('the log refused id ' .. dec(first) .. ': ' .. r.err)
  end
  return r
end
for i = 6, #ARGV do
  redis.call('XADD', KEYS[2], '0-*', 'd', ARGV[i])
end
redis.call('HSET', KEYS[1], 'head', dec(last))
redis.call('PEXPIRE', KEYS[3], ARGV[3])
touch(lease_ttl(ttl, num(ARGV[3], 'lease')), KEYS[1], KEYS[2], KEYS[4])
return {'OK', dec(first), dec(last), dec(floor)}
"#;

/// KEYS: meta log ctl. ARGV: through epoch.
/// Releases every id <= through: `XTRIM MINID`, floor in the meta hash, wake-up on ctl.
const RELEASE: &str = r#"
if redis.call('EXISTS', KEYS[1]) == 0 then return {'NOSTREAM'} end
local m = redis.call('HMGET', KEYS[1], 'head', 'floor', 'ttl', 'epoch')
if m[4] ~= ARGV[2] then return {'LOST', m[4] or ''} end
local head = head_of(m[1])
local floor = floor_of(m[2], head)
local ttl = num(m[3], 'ttl')
local x = num(ARGV[1], 'through')
if x > head then return {'AHEAD', dec(floor), dec(head)} end
if x + 1 > floor then
  redis.call('XTRIM', KEYS[2], 'MINID', eid(x + 1))
  redis.call('HSET', KEYS[1], 'floor', dec(x + 1))
  floor = x + 1
  redis.call('XADD', KEYS[3], 'MAXLEN', '16', '*', 'r', dec(x))
end
touch_no_shorter(ttl, KEYS[1], KEYS[2], KEYS[3])
return {'OK', dec(floor), dec(head)}
"#;

/// KEYS: meta lease ctl log. ARGV: token reason epoch seen.
/// Stores the close reason (once) and wakes every blocked reader through ctl. `BEHIND` if the
/// log is shorter than the caller saw (Redis lost events): closing it would end the stream
/// without them.
const CLOSE: &str = r#"
if redis.call('EXISTS', KEYS[1]) == 0 then return {'NOSTREAM'} end
local m = redis.call('HMGET', KEYS[1], 'closed', 'ttl', 'epoch', 'head')
if m[3] ~= ARGV[3] then return {'LOST', m[3] or ''} end
local holder = redis.call('GET', KEYS[2])
if holder ~= ARGV[1] then return {'FENCED', holder or ''} end
local closed = closed_of(m[1])
if closed then return {'CLOSED', closed} end
local head = head_of(m[4])
if head < num(ARGV[4], 'seen') then return {'BEHIND', dec(head)} end
local ttl = num(m[2], 'ttl')
redis.call('HSET', KEYS[1], 'closed', ARGV[2])
redis.call('XADD', KEYS[3], 'MAXLEN', '16', '*', 'c', '1')
redis.call('DEL', KEYS[2])
touch_no_shorter(ttl, KEYS[1], KEYS[3], KEYS[4])
return {'OK'}
"#;

/// KEYS: meta log ctl. ARGV: epoch after count.
/// The resume decision and the first page of the replay in one atomic step: `LOST` (other
/// epoch), `AHEAD` (after > head), `GAP` (after < floor - 1), or `OK` with `XRANGE (after`
/// (no entries when count is 0: the caller then reads them with a native `XRANGE` pipelined
/// behind the script, which skips the Lua conversion of every entry).
/// Also returns ctl's newest id, so a reader that then blocks cannot miss a later close.
const READ: &str = r#"
if redis.call('EXISTS', KEYS[1]) == 0 then return {'NOSTREAM'} end
local m = redis.call('HMGET', KEYS[1], 'epoch', 'head', 'floor', 'closed')
if m[1] ~= ARGV[1] then return {'LOST', m[1] or ''} end
local head = head_of(m[2])
local floor = floor_of(m[3], head)
local x = num(ARGV[2], 'after')
local closed = closed_of(m[4]) or ''
if x > head then return {'AHEAD', dec(floor), dec(head), closed} end
if x + 1 < floor then return {'GAP', dec(floor), dec(head), closed} end
local entries = {}
if x < head and ARGV[3] ~= '0' then
  entries = redis.call('XRANGE', KEYS[2], '(' .. eid(x), '+', 'COUNT', ARGV[3])
end
local c = redis.call('XREVRANGE', KEYS[3], '+', '-', 'COUNT', 1)
local ctl = '0-0'
if #c > 0 then ctl = c[1][1] end
return {'OK', dec(floor), dec(head), closed, ctl, entries}
"#;

/// KEYS: meta. ARGV: epoch.
/// Records in this incarnation's meta hash that a client subscribed somewhere (field
/// `subscribed`), for a producer that waits for its first subscriber; a stream that is gone, or
/// another incarnation, is left alone (an `HSET` alone would create a meta hash without a
/// stream).
const SUBSCRIBED: &str = r#"
if redis.call('EXISTS', KEYS[1]) == 0 then return {'NOSTREAM'} end
local epoch = redis.call('HGET', KEYS[1], 'epoch')
if epoch ~= ARGV[1] then return {'LOST', epoch or ''} end
redis.call('HSET', KEYS[1], 'subscribed', '1')
return {'OK'}
"#;

fn write_script(body: &str) -> Script {
    Script::new(&format!("#!lua\n{PRELUDE}{body}"))
}

/// A write script that may run over `maxmemory`: it frees memory (release), ends the stream
/// explicitly (close) or keeps the lease (renew), which must stay possible when appends are
/// refused with `-OOM`.
fn oom_exempt_script(body: &str) -> Script {
    Script::new(&format!("#!lua flags=allow-oom\n{PRELUDE}{body}"))
}

/// A script that only reads, run with `EVALSHA_RO` (and `EVAL_RO`, see [`eval_read`]).
pub(crate) struct ReadScript {
    source: String,
    hash: String,
}

impl ReadScript {
    fn new(body: &str) -> Self {
        let source = format!("#!lua flags=no-writes\n{PRELUDE}{body}");
        let hash = Script::new(&source).get_hash().to_owned();
        ReadScript { source, hash }
    }

    /// The script's SHA1, for `EVALSHA_RO`.
    pub(crate) fn hash(&self) -> &str {
        &self.hash
    }
}

pub(crate) static CREATE_SCRIPT: LazyLock<Script> = LazyLock::new(|| write_script(CREATE));
pub(crate) static STATE_SCRIPT: LazyLock<ReadScript> = LazyLock::new(|| ReadScript::new(STATE));
pub(crate) static ACQUIRE_SCRIPT: LazyLock<Script> = LazyLock::new(|| write_script(ACQUIRE));
pub(crate) static RENEW_SCRIPT: LazyLock<Script> = LazyLock::new(|| oom_exempt_script(RENEW));
pub(crate) static UNLEASE_SCRIPT: LazyLock<Script> = LazyLock::new(|| write_script(UNLEASE));
pub(crate) static APPEND_SCRIPT: LazyLock<Script> = LazyLock::new(|| write_script(APPEND));
pub(crate) static RELEASE_SCRIPT: LazyLock<Script> = LazyLock::new(|| oom_exempt_script(RELEASE));
pub(crate) static CLOSE_SCRIPT: LazyLock<Script> = LazyLock::new(|| oom_exempt_script(CLOSE));
pub(crate) static READ_SCRIPT: LazyLock<ReadScript> = LazyLock::new(|| ReadScript::new(READ));
pub(crate) static DELETE_SCRIPT: LazyLock<Script> = LazyLock::new(|| oom_exempt_script(DELETE));
pub(crate) static SUBSCRIBED_SCRIPT: LazyLock<Script> = LazyLock::new(|| write_script(SUBSCRIBED));

/// Runs `script` by `EVALSHA` with `keys` then `args`, each written once into the command buffer
/// (a `ScriptInvocation` copies every argument into its own vector first: for a batch append,
/// one more copy of every payload). Loads the script and retries once when the server answers
/// `NOSCRIPT` (restarted, failed over, or `SCRIPT FLUSH`ed).
pub(crate) async fn eval<C, K, A>(
    script: &Script,
    conn: &mut C,
    keys: &[K],
    args: A,
) -> RedisResult<Value>
where
    C: ConnectionLike,
    K: AsRef<str>,
    A: IntoIterator,
    A::Item: AsRef<[u8]>,
{
    let cmd = script_command("EVALSHA", script.get_hash(), keys, args);
    match cmd.query_async(conn).await {
        Err(e) if e.code() == Some("NOSCRIPT") => {
            script.load_async(conn).await?;
            cmd.query_async(conn).await
        }
        other => other,
    }
}

/// Runs the read-only `script` with `keys` then `args`: by `EVALSHA_RO`, and, if the server does
/// not have it cached (`NOSCRIPT`: restarted, failed over, or `SCRIPT FLUSH`ed), by `EVAL_RO` with
/// its source, which caches it again.
///
/// Both are read-only commands, so Redis runs them while it holds writes back (`CLIENT PAUSE
/// WRITE`, as a failover does): an `EVALSHA` of a script it does not have cached is held back with
/// the writes, since Redis cannot see that the script does not write, and `SCRIPT LOAD` may be too.
pub(crate) async fn eval_read<C, K, A>(
    script: &ReadScript,
    conn: &mut C,
    keys: &[K],
    args: A,
) -> RedisResult<Value>
where
    C: ConnectionLike,
    K: AsRef<str>,
    A: IntoIterator + Clone,
    A::Item: AsRef<[u8]>,
{
    let command = |eval, script| script_command(eval, script, keys, args.clone());
    match command("EVALSHA_RO", &script.hash).query_async(conn).await {
        Err(e) if e.code() == Some("NOSCRIPT") => {
            command("EVAL_RO", &script.source).query_async(conn).await
        }
        other => other,
    }
}

/// `<eval> <script> <number of keys> <keys…> <args…>`, each argument written once.
fn script_command<K, A>(eval: &str, script: &str, keys: &[K], args: A) -> Cmd
where
    K: AsRef<str>,
    A: IntoIterator,
    A::Item: AsRef<[u8]>,
{
    let mut cmd = Cmd::new();
    cmd.arg(eval).arg(script).arg(keys.len());
    for key in keys {
        cmd.arg(key.as_ref());
    }
    for arg in args {
        cmd.arg(arg.as_ref());
    }
    cmd
}
