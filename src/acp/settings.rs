//! What `session/new` and `session/load` offer besides the id — the approval modes and the
//! settings a client can change — and how a prompt's content blocks read as text. Pure.

use serde_json::{json, Value};

use crate::config::ApprovalMode;
use crate::protocol::BusyMode;

pub(super) fn mode_id(mode: ApprovalMode) -> &'static str {
    mode.as_str()
}

/// Talaria's approval modes as ACP session modes.
pub(super) fn modes(current: ApprovalMode) -> Value {
    json!({
        "currentModeId": mode_id(current),
        "availableModes": [
            { "id": "auto", "name": "Auto", "description": "sandboxed commands run; every command outside the sandbox asks" },
            { "id": "prompt", "name": "Prompt", "description": "inside the sandbox, what is not a known-safe read-only command asks; outside, everything asks" },
            { "id": "off", "name": "Off", "description": "nothing asks (hardline commands are still refused; the sandbox still applies)" },
        ],
    })
}

/// The settings a client can change: the model (`current` first, then the ones listed) and
/// the busy mode.
pub(super) fn config_options(current: &str, listed: &[String], busy_mode: BusyMode) -> Value {
    let current = current.to_string();
    let mut models = listed.to_vec();
    if !current.is_empty() && !models.contains(&current) {
        models.insert(0, current.clone());
    }
    let model_options: Vec<Value> = models.iter().map(|m| json!({ "value": m, "name": m })).collect();
    json!([
        { "id": "model", "name": "Model", "category": "model", "type": "select", "currentValue": current, "options": model_options },
        {
            "id": "busy_mode",
            "name": "Typing while busy",
            "description": "what a prompt sent while a turn runs does",
            "type": "select",
            "currentValue": busy_mode.as_str(),
            "options": [
                { "value": "redirect", "name": "Redirect", "description": "the running command moves to the background; the message reaches the model at once" },
                { "value": "steer", "name": "Steer", "description": "delivered after the running tools finish" },
                { "value": "queue", "name": "Queue", "description": "runs as the next turn" },
            ],
        },
    ])
}

/// A prompt's content as the text Talaria reads: text blocks as they are, a linked or
/// embedded resource by its URI (and an embedded one's text after it).
pub(super) fn prompt_text(blocks: &Value) -> String {
    let mut parts = Vec::new();
    for block in blocks.as_array().into_iter().flatten() {
        match block["type"].as_str() {
            Some("text") => parts.push(block["text"].as_str().unwrap_or_default().to_string()),
            Some("resource_link") => parts.push(block["uri"].as_str().unwrap_or_default().to_string()),
            Some("resource") => {
                let r = &block["resource"];
                let uri = r["uri"].as_str().unwrap_or_default();
                match r["text"].as_str() {
                    Some(text) => parts.push(format!("{uri}:\n```\n{text}\n```")),
                    None => parts.push(uri.to_string()),
                }
            }
            _ => {}
        }
    }
    parts.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_client_protocol::v1::schema::{InitializeResponse, SessionConfigOption, SessionModeState};
    use pretty_assertions::assert_eq;

    #[test]
    fn modes_and_settings_are_what_the_schema_reads() {
        let _: SessionModeState = serde_json::from_value(modes(ApprovalMode::Auto)).unwrap();
        let value = config_options("m1", &["m2".to_string()], BusyMode::Redirect);
        let options: Vec<SessionConfigOption> = serde_json::from_value(value.clone()).unwrap();
        assert_eq!(options.len(), 2);
        assert_eq!(value[0]["options"].as_array().unwrap().len(), 2, "the current model first, then the listed ones");
        let _: InitializeResponse = serde_json::from_value(super::super::initialize_response(1)).unwrap();
    }

    #[test]
    fn a_prompt_reads_text_links_and_embedded_files() {
        let blocks = json!([
            { "type": "text", "text": "look at" },
            { "type": "resource_link", "uri": "file:///w/a.rs", "name": "a.rs" },
            { "type": "resource", "resource": { "uri": "file:///w/b.rs", "text": "fn b() {}" } },
        ]);
        assert_eq!(prompt_text(&blocks), "look at\nfile:///w/a.rs\nfile:///w/b.rs:\n```\nfn b() {}\n```");
    }
}
