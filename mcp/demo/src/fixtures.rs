//! The conformance suite's prompt, resource and completion fixtures (MCP features unrelated to
//! resumability; the demo serves them so the whole server suite can run against it). Results are
//! written as the JSON the suite documents and deserialized into rmcp's types.

use rmcp::model::{
    CompleteResult, ErrorData, GetPromptResult, ListPromptsResult, ListResourceTemplatesResult,
    ListResourcesResult, ReadResourceResult,
};
use serde::de::DeserializeOwned;
use serde_json::{json, Map, Value};

use super::PNG_1X1;

fn parse<T: DeserializeOwned>(v: Value) -> Result<T, ErrorData> {
    serde_json::from_value(v).map_err(|e| ErrorData::internal_error(format!("fixture: {e}"), None))
}

/// `prompts/list`.
pub fn list_prompts() -> Result<ListPromptsResult, ErrorData> {
    parse(json!({"prompts": [
        {"name": "test_simple_prompt", "description": "A prompt without arguments"},
        {"name": "test_prompt_with_arguments", "description": "A prompt with two required arguments",
         "arguments": [
            {"name": "arg1", "description": "First test argument", "required": true},
            {"name": "arg2", "description": "Second test argument", "required": true}]},
        {"name": "test_prompt_with_embedded_resource", "description": "A prompt embedding a resource",
         "arguments": [{"name": "resourceUri", "description": "URI of the resource to embed", "required": true}]},
        {"name": "test_prompt_with_image", "description": "A prompt with an image"}
    ]}))
}

fn arg(args: &Option<Map<String, Value>>, key: &str) -> String {
    args.as_ref()
        .and_then(|a| a.get(key))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// `prompts/get`.
pub fn get_prompt(
    name: &str,
    args: &Option<Map<String, Value>>,
) -> Result<GetPromptResult, ErrorData> {
    let text = |t: String| json!({"role": "user", "content": {"type": "text", "text": t}});
    let messages = match name {
        "test_simple_prompt" => json!([text("This is a simple prompt for testing.".into())]),
        "test_prompt_with_arguments" => json!([text(format!(
            "Prompt with arguments: arg1='{}', arg2='{}'",
            arg(args, "arg1"),
            arg(args, "arg2")
        ))]),
        "test_prompt_with_embedded_resource" => json!([
            {"role": "user", "content": {"type": "resource", "resource": {
                "uri": arg(args, "resourceUri"), "mimeType": "text/plain",
                "text": "Embedded resource content for testing."}}},
            text("Please process the embedded resource above.".into())
        ]),
        "test_prompt_with_image" => json!([
            {"role": "user", "content": {"type": "image", "data": PNG_1X1, "mimeType": "image/png"}},
            text("Please analyze the image above.".into())
        ]),
        other => {
            return Err(ErrorData::invalid_params(
                format!("unknown prompt {other}"),
                None,
            ))
        }
    };
    parse(json!({ "messages": messages }))
}

/// `resources/list`.
pub fn list_resources() -> Result<ListResourcesResult, ErrorData> {
    parse(json!({"resources": [
        {"uri": "test://static-text", "name": "static-text", "description": "A static text resource", "mimeType": "text/plain"},
        {"uri": "test://static-binary", "name": "static-binary", "description": "A static PNG", "mimeType": "image/png"},
        {"uri": "test://watched-resource", "name": "watched-resource", "description": "A resource to subscribe to", "mimeType": "text/plain"}
    ]}))
}

/// `resources/templates/list`.
pub fn list_resource_templates() -> Result<ListResourceTemplatesResult, ErrorData> {
    parse(json!({"resourceTemplates": [
        {"uriTemplate": "test://template/{id}/data", "name": "template-data",
         "description": "Data for an id", "mimeType": "application/json"}
    ]}))
}

/// `resources/read`, including the `test://template/{id}/data` template.
pub fn read_resource(uri: &str) -> Result<ReadResourceResult, ErrorData> {
    let content = match uri {
        "test://static-text" => json!({"uri": uri, "mimeType": "text/plain",
            "text": "This is the content of the static text resource."}),
        "test://static-binary" => json!({"uri": uri, "mimeType": "image/png", "blob": PNG_1X1}),
        "test://watched-resource" => {
            json!({"uri": uri, "mimeType": "text/plain", "text": "watched"})
        }
        _ => match uri
            .strip_prefix("test://template/")
            .and_then(|r| r.strip_suffix("/data"))
        {
            Some(id) => json!({"uri": uri, "mimeType": "application/json",
                "text": json!({"id": id, "templateTest": true, "data": format!("Data for ID: {id}")}).to_string()}),
            None => {
                return Err(ErrorData::resource_not_found(
                    format!("no resource {uri}"),
                    None,
                ))
            }
        },
    };
    parse(json!({ "contents": [content] }))
}

/// `completion/complete`: an empty (valid) completion.
pub fn complete() -> Result<CompleteResult, ErrorData> {
    parse(json!({"completion": {"values": [], "total": 0, "hasMore": false}}))
}
