//! Colours from `ui/themes/<name>.toml` (embedded).

use std::str::FromStr;

use anyhow::Context as _;
use ratatui::style::Color;
use serde::Deserialize;

const DEFAULT_THEME: &str = include_str!("../../ui/themes/default.toml");

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Theme {
    pub(crate) text: Color,
    pub(crate) dim: Color,
    pub(crate) user: Color,
    pub(crate) user_mid_turn: Color,
    pub(crate) assistant: Color,
    pub(crate) reasoning: Color,
    pub(crate) heading: Color,
    pub(crate) inline_code: Color,
    pub(crate) link: Color,
    pub(crate) quote: Color,
    pub(crate) tool_running: Color,
    pub(crate) tool_ok: Color,
    pub(crate) tool_failed: Color,
    pub(crate) notice_info: Color,
    pub(crate) notice_warn: Color,
    pub(crate) notice_error: Color,
    pub(crate) injected: Color,
    pub(crate) border: Color,
    pub(crate) border_focus: Color,
    pub(crate) selection: Color,
    pub(crate) status_fg: Color,
    pub(crate) status_state: Color,
    pub(crate) paused: Color,
    pub(crate) banner: Color,
    pub(crate) modal_border: Color,
    pub(crate) new_output: Color,
    /// The ground of a diff's added and removed lines (`/diff`).
    pub(crate) diff_added: Color,
    pub(crate) diff_removed: Color,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ThemeFile {
    colors: std::collections::BTreeMap<String, String>,
}

impl Theme {
    /// The built-in theme named `name` ("default" is the only one shipped).
    pub fn builtin(name: &str) -> anyhow::Result<Theme> {
        match name {
            "default" | "" => Theme::from_toml(DEFAULT_THEME).context("ui/themes/default.toml"),
            other => anyhow::bail!("ui.theme: unknown theme \"{other}\"; the built-in theme is \"default\""),
        }
    }

    pub fn from_toml(text: &str) -> anyhow::Result<Theme> {
        let file: ThemeFile = toml::from_str(text)?;
        let get = |key: &str| -> anyhow::Result<Color> {
            let value = file.colors.get(key).with_context(|| format!("colors.{key} is missing"))?;
            Color::from_str(value).map_err(|_| anyhow::anyhow!("colors.{key}: \"{value}\" is not a colour"))
        };
        Ok(Theme {
            text: get("text")?,
            dim: get("dim")?,
            user: get("user")?,
            user_mid_turn: get("user_mid_turn")?,
            assistant: get("assistant")?,
            reasoning: get("reasoning")?,
            heading: get("heading")?,
            inline_code: get("inline_code")?,
            link: get("link")?,
            quote: get("quote")?,
            tool_running: get("tool_running")?,
            tool_ok: get("tool_ok")?,
            tool_failed: get("tool_failed")?,
            notice_info: get("notice_info")?,
            notice_warn: get("notice_warn")?,
            notice_error: get("notice_error")?,
            injected: get("injected")?,
            border: get("border")?,
            border_focus: get("border_focus")?,
            selection: get("selection")?,
            status_fg: get("status_fg")?,
            status_state: get("status_state")?,
            paused: get("paused")?,
            banner: get("banner")?,
            modal_border: get("modal_border")?,
            new_output: get("new_output")?,
            diff_added: get("diff_added")?,
            diff_removed: get("diff_removed")?,
        })
    }
}

impl Default for Theme {
    fn default() -> Theme {
        // The embedded file is checked by a test; fall back to plain colours regardless.
        Theme::from_toml(DEFAULT_THEME).unwrap_or(Theme {
            text: Color::Reset,
            dim: Color::DarkGray,
            user: Color::Cyan,
            user_mid_turn: Color::LightCyan,
            assistant: Color::Reset,
            reasoning: Color::DarkGray,
            heading: Color::Magenta,
            inline_code: Color::Yellow,
            link: Color::Blue,
            quote: Color::Gray,
            tool_running: Color::Yellow,
            tool_ok: Color::Green,
            tool_failed: Color::Red,
            notice_info: Color::Cyan,
            notice_warn: Color::Yellow,
            notice_error: Color::Red,
            injected: Color::Magenta,
            border: Color::DarkGray,
            border_focus: Color::Cyan,
            selection: Color::Cyan,
            status_fg: Color::Gray,
            status_state: Color::Cyan,
            paused: Color::Red,
            banner: Color::Magenta,
            modal_border: Color::Yellow,
            new_output: Color::Yellow,
            diff_added: Color::Rgb(0x12, 0x36, 0x1c),
            diff_removed: Color::Rgb(0x3d, 0x15, 0x17),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_theme_parses() {
        let theme = Theme::builtin("default").expect("embedded theme parses");
        assert_eq!(theme.tool_failed, Color::Red);
        assert!(Theme::builtin("neon").unwrap_err().to_string().contains("default"));
        let err = Theme::from_toml("[colors]\ntext = \"chartreuse-ish\"").unwrap_err().to_string();
        assert!(err.contains("not a colour"), "{err}");
    }
}
