//! What the model reads of an MCP `tools/call` result (DESIGN §12): text content
//! concatenated, `structuredContent` passed as JSON, images, audio and resources named but
//! not inlined, `isError` an error result; everything capped like any tool output. Pure:
//! it reads the result as the JSON the server sent.

use serde_json::{json, Value};

use crate::text::truncate_for_model;

/// The tool result for the model, and whether it is a success.
pub(crate) fn to_model(server: &str, tool: &str, result: &Value, max_chars: usize) -> (Value, bool) {
    let mut parts = Vec::new();
    for item in result.get("content").and_then(Value::as_array).into_iter().flatten() {
        parts.push(describe_content(item));
    }
    let text = truncate_for_model(&parts.join("\n"), max_chars);
    let is_error = result.get("isError").and_then(Value::as_bool).unwrap_or(false);
    let mut value = if is_error {
        let why = if text.trim().is_empty() { "the tool reported an error without a message".into() } else { text };
        json!({ "error": format!("MCP server '{server}', tool '{tool}': {why}") })
    } else {
        json!({ "output": text })
    };
    if let Some(structured) = result.get("structuredContent").filter(|v| !v.is_null()) {
        let encoded = structured.to_string();
        value["structured"] = if encoded.chars().count() > max_chars {
            Value::String(truncate_for_model(&encoded, max_chars))
        } else {
            structured.clone()
        };
    }
    (value, !is_error)
}

/// One content item as text: text as it is, anything binary named by its kind and type.
fn describe_content(item: &Value) -> String {
    let field = |k: &str| item.get(k).and_then(Value::as_str).unwrap_or("");
    let size = |k: &str| {
        let b64 = item.get(k).and_then(Value::as_str).map_or(0, str::len);
        // Base64 carries 3 bytes in 4 characters.
        b64 / 4 * 3
    };
    match field("type") {
        "text" => field("text").to_string(),
        "image" => format!("[image: {}, {} bytes, not shown]", or_unknown(field("mimeType")), size("data")),
        "audio" => format!("[audio: {}, {} bytes, not shown]", or_unknown(field("mimeType")), size("data")),
        "resource" => {
            let r = item.get("resource").cloned().unwrap_or(Value::Null);
            let uri = r.get("uri").and_then(Value::as_str).unwrap_or("?");
            let mime = r.get("mimeType").and_then(Value::as_str).unwrap_or("unknown type");
            format!("[resource: {uri} ({mime}), not inlined]")
        }
        "resource_link" => {
            let name = field("name");
            format!("[resource link: {} {}]", field("uri"), if name.is_empty() { "" } else { name })
                .trim_end()
                .to_string()
        }
        other => format!("[{} content, not shown]", or_unknown(other)),
    }
}

fn or_unknown(s: &str) -> &str {
    if s.is_empty() {
        "unknown type"
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn text_is_joined_and_binary_is_named() {
        let result = json!({"content": [
            {"type": "text", "text": "first"},
            {"type": "image", "mimeType": "image/png", "data": "AAAABBBB"},
            {"type": "resource", "resource": {"uri": "file:///a.txt", "mimeType": "text/plain", "text": "secret body"}},
            {"type": "resource_link", "uri": "file:///b", "name": "b"},
            {"type": "text", "text": "second"}
        ]});
        let (value, ok) = to_model("srv", "t", &result, 1000);
        assert!(ok);
        assert_eq!(
            value,
            json!({"output": "first\n[image: image/png, 6 bytes, not shown]\n[resource: file:///a.txt (text/plain), not inlined]\n[resource link: file:///b b]\nsecond"})
        );
        assert!(!value.to_string().contains("secret body"));
    }

    #[test]
    fn is_error_makes_an_error_naming_the_server() {
        let (value, ok) =
            to_model("srv", "boom", &json!({"content": [{"type":"text","text":"no such row"}], "isError": true}), 1000);
        assert!(!ok);
        assert_eq!(value, json!({"error": "MCP server 'srv', tool 'boom': no such row"}));
    }

    #[test]
    fn structured_content_is_passed_as_json_and_everything_is_capped() {
        let (value, _) = to_model("s", "t", &json!({"content": [], "structuredContent": {"sum": 5}}), 1000);
        assert_eq!(value, json!({"output": "", "structured": {"sum": 5}}));
        let big = "x".repeat(5000);
        let (value, _) = to_model(
            "s",
            "t",
            &json!({"content": [{"type":"text","text": big}], "structuredContent": {"big": big}}),
            200,
        );
        let out = value["output"].as_str().unwrap();
        assert!(out.contains("OUTPUT TRUNCATED") && out.chars().count() < 400, "{out}");
        assert!(value["structured"].as_str().unwrap().contains("OUTPUT TRUNCATED"));
    }
}
