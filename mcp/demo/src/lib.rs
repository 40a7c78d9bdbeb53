//! The demo MCP server of `replay-ring-mcp`: its tools and its axum app, shared by the
//! `mcp_server` example and the end-to-end tests (which run the same server in-process). Not
//! published; the library's API is `replay-ring-mcp`.
//!
//! Tools: `long_task(n, delay_ms)` sends `notifications/progress` 1..n with the request's progress
//! token and returns `{"n": n}` (bounded by [`LONG_TASK_MAX_STEPS`], [`LONG_TASK_MAX_DELAY_MS`]
//! and [`LONG_TASK_MAX_TOTAL_MS`], and stopped by a cancellation); `test_reconnection` closes
//! its own connection after the priming event (SEP-1699) and returns its result on the stream
//! the client resumes; and everything the conformance suite's server scenarios call (`test_*`
//! tools, sampling and elicitation requests, `json_schema_2020_12_tool`, prompts, resources,
//! completion in [`fixtures`]).
// Logging is deprecated only from 2026-07-28 (SEP-2577); this server speaks 2025-11-25, where it is
// part of the protocol (and the conformance suite tests it).
#![allow(deprecated)]

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use axum::http::header;
use axum::routing::get;
use axum::Router;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusRecorder};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CompleteRequestParams, CompleteResult,
    ContentBlock, ErrorData, GetPromptRequestParams, GetPromptResponse, ListPromptsResult,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, LoggingLevel,
    LoggingMessageNotificationParam, PaginatedRequestParams, ProgressNotificationParam,
    ProtocolVersion, ReadResourceRequestParams, ReadResourceResponse, ServerCapabilities,
    ServerConfig, SetLevelRequestParams, SubscribeRequestParams, Tool, UnsubscribeRequestParams,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::{LocalSessionManager, SessionConfig};
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{RoleServer, ServerHandler};
use serde_json::{json, Map, Value};

use replay_ring_mcp::{ReplayRingSessionManager, ResumeGuardLayer, RingEventStore, StoreConfig};

pub mod fixtures;

/// A 1×1 PNG and a silent 8-bit WAV, for the conformance suite's content tools.
pub(crate) const PNG_1X1: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";
const WAV_SILENT: &str = "UklGRiQAAABXQVZFZm10IBAAAAABAAEAQB8AAEAfAAABAAgAZGF0YQAAAAA=";

/// At most this many progress notifications per `long_task` call.
pub const LONG_TASK_MAX_STEPS: u64 = 100_000;
/// At most this long between two of them.
pub const LONG_TASK_MAX_DELAY_MS: u64 = 60_000;
/// At most this long for a whole call (`n * delay_ms`).
pub const LONG_TASK_MAX_TOTAL_MS: u64 = 3_600_000;

/// The demo tool server. `store` is `None` on rmcp's built-in cache.
#[derive(Clone)]
pub struct Tools {
    store: Option<RingEventStore>,
}

fn schema(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

fn empty_schema() -> Map<String, Value> {
    schema(json!({"type": "object", "properties": {}}))
}

fn tool_list() -> Vec<Tool> {
    vec![
        Tool::new(
            "long_task",
            "Sends notifications/progress 1..n (total n) with the request's progress token, delay_ms apart, then returns {\"n\": n}.",
            schema(json!({
                "type": "object",
                "properties": {
                    "n": {"type": "integer", "minimum": 0, "maximum": LONG_TASK_MAX_STEPS, "description": "number of progress notifications"},
                    "delay_ms": {"type": "integer", "minimum": 0, "maximum": LONG_TASK_MAX_DELAY_MS, "description": "pause between notifications (n * delay_ms at most one hour)"}
                },
                "required": ["n"]
            })),
        ),
        Tool::new(
            "test_reconnection",
            "Closes its own SSE connection after the priming event (SEP-1699), then returns its result on the stream the client resumes.",
            empty_schema(),
        ),
        Tool::new("test_simple_text", "Returns simple text.", empty_schema()),
        Tool::new("test_tool_with_progress", "Reports progress 0, 50, 100 of 100.", empty_schema()),
        Tool::new("test_error_handling", "Always returns a tool error.", empty_schema()),
        Tool::new("test_tool_with_logging", "Sends three info log messages.", empty_schema()),
        Tool::new("test_image_content", "Returns a PNG image.", empty_schema()),
        Tool::new("test_audio_content", "Returns a WAV clip.", empty_schema()),
        Tool::new("test_embedded_resource", "Returns an embedded text resource.", empty_schema()),
        Tool::new("test_multiple_content_types", "Returns text, image and resource.", empty_schema()),
        Tool::new(
            "test_sampling",
            "Asks the client to sample an LLM (sampling/createMessage) on this request's stream.",
            schema(json!({"type": "object", "properties": {"prompt": {"type": "string"}}, "required": ["prompt"]})),
        ),
        Tool::new(
            "test_elicitation",
            "Asks the user for input (elicitation/create) on this request's stream.",
            schema(json!({"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]})),
        ),
        Tool::new("test_elicitation_sep1034_defaults", "Elicitation with defaults (SEP-1034).", empty_schema()),
        Tool::new("test_elicitation_sep1330_enums", "Elicitation with enum schemas (SEP-1330).", empty_schema()),
        Tool::new(
            "json_schema_2020_12_tool",
            "Tool with JSON Schema 2020-12 features",
            schema(json!({
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "type": "object",
                "$defs": {"address": {"type": "object", "properties": {"street": {"type": "string"}, "city": {"type": "string"}}}},
                "properties": {"name": {"type": "string"}, "address": {"$ref": "#/$defs/address"}},
                "additionalProperties": false
            })),
        ),
    ]
}

/// The integer argument `key`: `None` when it is absent, an invalid-params error naming it and
/// its range when it is present but not an integer in `0..=max` (a string, a fraction, a negative
/// or huge number are refused, never read as something else).
fn arg_u64(
    args: &Option<Map<String, Value>>,
    key: &str,
    max: u64,
) -> Result<Option<u64>, ErrorData> {
    let Some(value) = args.as_ref().and_then(|a| a.get(key)) else {
        return Ok(None);
    };
    // JSON Schema's `integer` includes numbers written with a zero fraction (`5.0`).
    let integer = value.as_u64().or_else(|| {
        let f = value.as_f64()?;
        (f.fract() == 0.0 && (0.0..=max as f64).contains(&f)).then_some(f as u64)
    });
    match integer {
        Some(v) if v <= max => Ok(Some(v)),
        _ => Err(ErrorData::invalid_params(
            format!("{key} must be an integer from 0 to {max}, got {value}"),
            None,
        )),
    }
}

fn session_of(ctx: &RequestContext<RoleServer>) -> Option<String> {
    let parts = ctx.extensions.get::<http::request::Parts>()?;
    Some(
        parts
            .headers
            .get("mcp-session-id")?
            .to_str()
            .ok()?
            .to_owned(),
    )
}

fn embedded() -> ContentBlock {
    serde_json::from_value(json!({
        "type": "resource",
        "resource": {"uri": "test://embedded-resource", "mimeType": "text/plain", "text": "This is an embedded resource content."}
    }))
    .expect("valid embedded resource")
}

impl Tools {
    async fn progress(
        ctx: &RequestContext<RoleServer>,
        progress: f64,
        total: f64,
    ) -> Result<(), ErrorData> {
        if let Some(token) = ctx.meta.get_progress_token() {
            ctx.peer
                .notify_progress(ProgressNotificationParam::new(token, progress).with_total(total))
                .await
                .map_err(|e| {
                    ErrorData::internal_error(format!("progress not stored: {e}"), None)
                })?;
        }
        Ok(())
    }

    async fn log(ctx: &RequestContext<RoleServer>, text: &str) -> Result<(), ErrorData> {
        ctx.peer
            .notify_logging_message(
                LoggingMessageNotificationParam::new(LoggingLevel::Info, json!(text))
                    .with_logger("mcp_server"),
            )
            .await
            .map_err(|e| ErrorData::internal_error(format!("log not stored: {e}"), None))
    }

    /// Sends `elicitation/create` with raw params (the suite's schemas include forms rmcp's typed
    /// schema builder does not model) and renders the answer as `action=..., content=...`.
    async fn elicit(ctx: &RequestContext<RoleServer>, params: Value) -> Result<String, ErrorData> {
        let params = serde_json::from_value(params)
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        let answer = ctx
            .peer
            .create_elicitation(params)
            .await
            .map_err(|e| ErrorData::internal_error(format!("elicitation failed: {e}"), None))?;
        let v = serde_json::to_value(&answer).unwrap_or_default();
        Ok(format!(
            "action={}, content={}",
            v["action"].as_str().unwrap_or("?"),
            v["content"]
        ))
    }

    fn cancelled() -> ErrorData {
        ErrorData::internal_error("long_task cancelled", None)
    }

    async fn long_task(
        &self,
        args: &Option<Map<String, Value>>,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        // A client must not be able to hold the server: bounded work, and a task that gives its
        // worker up (without a progress token, a step awaits nothing) and stops when cancelled
        // (`notifications/cancelled`, the session's DELETE).
        let n = arg_u64(args, "n", LONG_TASK_MAX_STEPS)?.ok_or_else(|| {
            ErrorData::invalid_params(
                format!("n (an integer from 0 to {LONG_TASK_MAX_STEPS}) is required"),
                None,
            )
        })?;
        let delay_ms = arg_u64(args, "delay_ms", LONG_TASK_MAX_DELAY_MS)?.unwrap_or(0);
        if n.saturating_mul(delay_ms) > LONG_TASK_MAX_TOTAL_MS {
            return Err(ErrorData::invalid_params(
                format!(
                    "long_task takes n <= {LONG_TASK_MAX_STEPS}, delay_ms <= \
                     {LONG_TASK_MAX_DELAY_MS} and n * delay_ms <= {LONG_TASK_MAX_TOTAL_MS}"
                ),
                None,
            ));
        }
        let delay = Duration::from_millis(delay_ms);
        for i in 1..=n {
            if !delay.is_zero() {
                tokio::select! {
                    () = tokio::time::sleep(delay) => {}
                    () = ctx.ct.cancelled() => return Err(Self::cancelled()),
                }
            } else {
                tokio::task::consume_budget().await;
                if ctx.ct.is_cancelled() {
                    return Err(Self::cancelled());
                }
            }
            Self::progress(ctx, i as f64, n as f64).await?;
        }
        let mut result = CallToolResult::structured(json!({"n": n}));
        result.content = vec![ContentBlock::text(json!({"n": n}).to_string())];
        Ok(result)
    }

    async fn test_reconnection(
        &self,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let (Some(store), Some(session)) = (&self.store, session_of(ctx)) else {
            return Ok(CallToolResult::error(vec![ContentBlock::text(
                "test_reconnection needs the replay-ring store and a session",
            )]));
        };
        store.disconnect_request_stream(&session, &ctx.id);
        // Finish after the client had time to reconnect, so the result travels on the resumed
        // stream; if it comes back sooner it gets the result from the ring anyway.
        tokio::time::sleep(Duration::from_millis(200)).await;
        Ok(CallToolResult::success(vec![ContentBlock::text(
            "Reconnection test completed successfully",
        )]))
    }
}

impl ServerHandler for Tools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_logging()
                .build(),
        )
        .with_protocol_version(ProtocolVersion::V_2025_11_25)
        .with_server_info(rmcp::model::Implementation::new(
            "replay-ring-mcp-example",
            env!("CARGO_PKG_VERSION"),
        ))
        .with_instructions("Resumable streams stored in replay-ring. Try long_task(n, delay_ms).")
    }

    /// Only the revisions that have `Last-Event-ID` resumability (2026-07-28 removed it).
    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(ProtocolVersion::known_up_to(&ProtocolVersion::V_2025_11_25))
    }

    async fn set_level(
        &self,
        _request: SetLevelRequestParams,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        Ok(())
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        fixtures::list_prompts()
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        Ok(fixtures::get_prompt(&request.name, &request.arguments)?.into())
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        fixtures::list_resources()
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        fixtures::list_resource_templates()
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        Ok(fixtures::read_resource(&request.uri)?.into())
    }

    async fn subscribe(
        &self,
        _request: SubscribeRequestParams,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        Ok(())
    }

    async fn unsubscribe(
        &self,
        _request: UnsubscribeRequestParams,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        Ok(())
    }

    async fn complete(
        &self,
        _request: CompleteRequestParams,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        fixtures::complete()
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(tool_list()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let result = match request.name.as_ref() {
            "long_task" => self.long_task(&request.arguments, &ctx).await?,
            "test_reconnection" => self.test_reconnection(&ctx).await?,
            "test_simple_text" => CallToolResult::success(vec![ContentBlock::text(
                "This is a simple text response for testing.",
            )]),
            "test_tool_with_progress" => {
                for (i, p) in [0.0, 50.0, 100.0].into_iter().enumerate() {
                    if i > 0 {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    Self::progress(&ctx, p, 100.0).await?;
                }
                CallToolResult::success(vec![ContentBlock::text("Progress tool completed")])
            }
            "test_error_handling" => CallToolResult::error(vec![ContentBlock::text(
                "This tool intentionally returns an error for testing",
            )]),
            "test_tool_with_logging" => {
                Self::log(&ctx, "Tool execution started").await?;
                tokio::time::sleep(Duration::from_millis(50)).await;
                Self::log(&ctx, "Tool processing data").await?;
                tokio::time::sleep(Duration::from_millis(50)).await;
                Self::log(&ctx, "Tool execution completed").await?;
                CallToolResult::success(vec![ContentBlock::text("Logging tool completed")])
            }
            "test_image_content" => {
                CallToolResult::success(vec![ContentBlock::image(PNG_1X1, "image/png")])
            }
            "test_audio_content" => {
                CallToolResult::success(vec![ContentBlock::audio(WAV_SILENT, "audio/wav")])
            }
            "test_embedded_resource" => CallToolResult::success(vec![embedded()]),
            "test_sampling" => {
                let prompt = request
                    .arguments
                    .as_ref()
                    .and_then(|a| a.get("prompt"))
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let params = serde_json::from_value(json!({
                    "messages": [{"role": "user", "content": {"type": "text", "text": prompt}}],
                    "maxTokens": 100
                }))
                .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
                let reply = ctx.peer.create_message(params).await.map_err(|e| {
                    ErrorData::internal_error(format!("sampling failed: {e}"), None)
                })?;
                let reply = serde_json::to_value(&reply).unwrap_or_default();
                let text = reply["content"]["text"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                CallToolResult::success(vec![ContentBlock::text(format!("LLM response: {text}"))])
            }
            "test_elicitation" => {
                let message = request
                    .arguments
                    .as_ref()
                    .and_then(|a| a.get("message"))
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let answer = Self::elicit(
                    &ctx,
                    json!({
                        "message": message,
                        "requestedSchema": {"type": "object", "properties": {
                            "username": {"type": "string", "description": "User's response"},
                            "email": {"type": "string", "description": "User's email address"}},
                            "required": ["username", "email"]}
                    }),
                )
                .await?;
                CallToolResult::success(vec![ContentBlock::text(format!(
                    "User response: {answer}"
                ))])
            }
            "test_elicitation_sep1034_defaults" => {
                let answer = Self::elicit(&ctx, json!({
                    "message": "Please review and update the form fields with defaults",
                    "requestedSchema": {"type": "object", "properties": {
                        "name": {"type": "string", "description": "User name", "default": "John Doe"},
                        "age": {"type": "integer", "description": "User age", "default": 30},
                        "score": {"type": "number", "description": "User score", "default": 95.5},
                        "status": {"type": "string", "description": "User status",
                                   "enum": ["active", "inactive", "pending"], "default": "active"},
                        "verified": {"type": "boolean", "description": "Verification status", "default": true}
                    }}
                }))
                .await?;
                CallToolResult::success(vec![ContentBlock::text(format!(
                    "Elicitation completed: {answer}"
                ))])
            }
            "test_elicitation_sep1330_enums" => {
                let answer = Self::elicit(&ctx, json!({
                    "message": "Please select options",
                    "requestedSchema": {"type": "object", "properties": {
                        "untitledSingle": {"type": "string", "enum": ["option1", "option2", "option3"]},
                        "titledSingle": {"type": "string", "oneOf": [
                            {"const": "value1", "title": "First Option"},
                            {"const": "value2", "title": "Second Option"},
                            {"const": "value3", "title": "Third Option"}]},
                        "legacyEnum": {"type": "string", "enum": ["opt1", "opt2", "opt3"],
                                       "enumNames": ["Option One", "Option Two", "Option Three"]},
                        "untitledMulti": {"type": "array", "items": {"type": "string", "enum": ["option1", "option2", "option3"]}},
                        "titledMulti": {"type": "array", "items": {"anyOf": [
                            {"const": "value1", "title": "First Choice"},
                            {"const": "value2", "title": "Second Choice"},
                            {"const": "value3", "title": "Third Choice"}]}}
                    }}
                }))
                .await?;
                CallToolResult::success(vec![ContentBlock::text(format!(
                    "Elicitation completed: {answer}"
                ))])
            }
            "json_schema_2020_12_tool" => CallToolResult::success(vec![ContentBlock::text(
                json!({"arguments": request.arguments}).to_string(),
            )]),
            "test_multiple_content_types" => CallToolResult::success(vec![
                ContentBlock::text("Multiple content types test:"),
                ContentBlock::image(PNG_1X1, "image/png"),
                embedded(),
            ]),
            other => {
                return Err(ErrorData::invalid_params(
                    format!("unknown tool {other}"),
                    None,
                ))
            }
        };
        Ok(result.into())
    }
}

/// Which event storage the demo app uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Storage {
    /// replay-ring, through [`ReplayRingSessionManager`] and [`ResumeGuardLayer`].
    ReplayRing(StoreConfig),
    /// rmcp's built-in `LocalSessionManager` cache (for comparison).
    BuiltinCache {
        /// `retry:` hint of priming events.
        retry: Duration,
    },
}

/// Browser origins the demo accepts: pages on this machine, any port. The server listens on
/// loopback only; a page elsewhere whose host name an attacker re-binds to 127.0.0.1 (DNS
/// rebinding) still sends its own `Origin`, and is answered 403 (MCP's transport rules: servers
/// must validate `Origin`). Requests without an `Origin` (SDK clients, curl) are not browsers and
/// pass; rmcp's `Host` check applies to every request.
pub const ALLOWED_ORIGINS: [&str; 3] =
    ["http://localhost:*", "http://127.0.0.1:*", "http://[::1]:*"];

/// rmcp's transport settings for both apps: the `retry:` hint, keep-alives, and `Origin` checks.
fn http_config(retry: Duration) -> StreamableHttpServerConfig {
    StreamableHttpServerConfig::default()
        .with_sse_retry(Some(retry))
        .with_sse_keep_alive(Some(Duration::from_secs(15)))
        .with_allowed_origins(ALLOWED_ORIGINS)
}

/// The demo app: MCP at `/mcp`, counters at `/metrics` (replay-ring only). Returns the store too.
pub fn app(storage: Storage) -> (Router, Option<RingEventStore>) {
    let retry = match storage {
        Storage::ReplayRing(c) => c.retry,
        Storage::BuiltinCache { retry } => retry,
    };
    let http_config = http_config(retry);
    let mut local = LocalSessionManager::default();
    local.session_config.sse_retry = Some(retry);
    match storage {
        Storage::BuiltinCache { .. } => {
            let service = StreamableHttpService::new(
                || Ok(Tools { store: None }),
                Arc::new(local),
                http_config,
            );
            (Router::new().nest_service("/mcp", service), None)
        }
        Storage::ReplayRing(config) => {
            let store = RingEventStore::new(config);
            (store_app(store.clone()), Some(store))
        }
    }
}

/// The demo app on a given replay-ring store, for example one whose event log is on Redis
/// (`RingEventStore::with_redis`): MCP at `/mcp`, counters at `/metrics`.
pub fn store_app(store: RingEventStore) -> Router {
    store_app_with_limits(store, Limits::default())
}

/// [`store_app`] with at most `max_sessions` MCP sessions open at once (more get a 503).
pub fn store_app_with_max_sessions(store: RingEventStore, max_sessions: usize) -> Router {
    store_app_with_limits(
        store,
        Limits {
            max_sessions,
            ..Limits::default()
        },
    )
}

/// The limits of [`store_app_with_limits`]; the defaults are `replay_ring_mcp`'s and rmcp's.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// MCP sessions open at once.
    pub max_sessions: usize,
    /// Request streams per session (open, or ended within `completed_ttl`).
    pub max_streams_per_session: usize,
    /// Request streams across all sessions, counted alike.
    pub max_streams: usize,
    /// rmcp closes a session whose worker handled nothing for this long
    /// (`SessionConfig::keep_alive`): no request and no message from a running call. Shorter
    /// frees the sessions that clients abandon sooner (they hold `max_sessions` until then); a
    /// call silent for longer ends with an error.
    pub session_idle: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_sessions: replay_ring_mcp::DEFAULT_MAX_SESSIONS,
            max_streams_per_session: replay_ring_mcp::DEFAULT_MAX_STREAMS_PER_SESSION,
            max_streams: replay_ring_mcp::DEFAULT_MAX_STREAMS,
            session_idle: SessionConfig::DEFAULT_KEEP_ALIVE,
        }
    }
}

/// [`store_app`] under `limits`: a request past a cap gets a 503, and a session idle for
/// `limits.session_idle` is closed.
pub fn store_app_with_limits(store: RingEventStore, limits: Limits) -> Router {
    let retry = store.config().retry;
    let http_config = http_config(retry);
    let mut local = LocalSessionManager::default();
    local.session_config.sse_retry = Some(retry);
    local.session_config.keep_alive = Some(limits.session_idle);
    let manager = Arc::new(
        ReplayRingSessionManager::new(store.clone(), local)
            .with_max_sessions(limits.max_sessions)
            .with_max_streams_per_session(limits.max_streams_per_session)
            .with_max_streams(limits.max_streams),
    );
    let tools = Tools {
        store: Some(store.clone()),
    };
    let service =
        StreamableHttpService::new(move || Ok(tools.clone()), manager.clone(), http_config);
    let guarded = tower_layer::Layer::layer(&ResumeGuardLayer::new(manager), service);
    let metrics = MetricsEndpoint::new(store);
    Router::new().nest_service("/mcp", guarded).route(
        "/metrics",
        get(move || {
            let text = metrics.render();
            async move { ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text) }
        }),
    )
}

/// `/metrics` of one store: its counters published through the `metrics` facade
/// ([`RingEventStore::record_metrics`]) and rendered by `metrics-exporter-prometheus`.
#[derive(Clone)]
pub struct MetricsEndpoint {
    store: RingEventStore,
    // One recorder per app (not the process-wide one), so apps in one process do not mix.
    recorder: Arc<PrometheusRecorder>,
}

impl MetricsEndpoint {
    /// An endpoint with its own Prometheus recorder.
    pub fn new(store: RingEventStore) -> Self {
        let recorder = Arc::new(PrometheusBuilder::new().build_recorder());
        Self { store, recorder }
    }

    /// Records the store's counters (and `serve`'s connection counters) now and returns the
    /// Prometheus text exposition.
    pub fn render(&self) -> String {
        metrics::with_local_recorder(&*self.recorder, || {
            self.store.record_metrics();
            replay_ring_sse::axum::record_serve_metrics();
        });
        self.recorder.handle().render()
    }
}
