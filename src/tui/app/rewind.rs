//! `/rewind` and `/diff` in the TUI (DESIGN §13).

use super::App;
use crate::protocol::rewind::{points_text, preview_text, RewindPoint, RewindPreview};
use crate::protocol::NoticeLevel;

impl App {
    pub(super) fn offer_rewind(&mut self, points: Vec<RewindPoint>, warnings: Vec<String>) {
        self.log_say(NoticeLevel::Info, points_text(&points, &warnings));
    }

    pub(super) fn confirm_rewind(&mut self, preview: RewindPreview) {
        self.log_say(NoticeLevel::Info, preview_text(&preview));
    }

    pub(super) fn show_diff(&mut self, title: String, text: String) {
        self.log_say(NoticeLevel::Info, format!("{title}\n{text}"));
    }
}
