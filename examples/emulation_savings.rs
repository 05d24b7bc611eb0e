//! What terminal emulation saves the model (DESIGN §4c): for each recorded output file,
//! the characters the model received before (escape sequences stripped, `\r` rewrites of
//! one line collapsed) and after (vt100-emulated), and the emulation's throughput.
//!
//! `cargo run --release --example emulation_savings -- FILE...` — files recorded with
//! `script -q -c CMD FILE` (its "Script started/done" lines are skipped). With no file, a
//! synthetic flood of 20 MB measures throughput alone.

use std::time::Instant;

use talaria::engine::jobs::watches::{Limits, WatchOwner, Watches};

fn main() {
    let files: Vec<String> = std::env::args().skip(1).collect();
    if files.is_empty() {
        let flood: String = (0..200_000).map(|i| format!("line {i} of a build log with some text in it\r\n")).collect();
        let flood = flood.repeat(2);
        let start = Instant::now();
        let out = talaria::emulate::plain(&flood);
        let secs = start.elapsed().as_secs_f64();
        println!(
            "flood: {} MB emulated in {:.3} s = {:.0} MB/s ({} chars out)",
            flood.len() / 1_000_000,
            secs,
            flood.len() as f64 / secs / 1e6,
            out.len()
        );
        // The watch path: every line of a watched job goes through a one-row line feed and
        // the regex (fed in the follower's read sizes).
        let limits = Limits { cooldown_ms: 10_000, max_notices: 5 };
        let mut watches = Watches::default();
        let _ = watches.add("line 1999[0-9]{2} of", WatchOwner::Model, limits, "");
        let start = Instant::now();
        let mut hits = 0;
        let mut at = 0;
        while at < flood.len() {
            let mut end = (at + 64 * 1024).min(flood.len());
            while !flood.is_char_boundary(end) {
                end += 1;
            }
            hits += watches.feed(&flood[at..end], 0).len();
            at = end;
        }
        let secs = start.elapsed().as_secs_f64();
        println!(
            "watch: {} MB of output matched line by line in {:.3} s = {:.0} MB/s ({hits} notice(s), the rest folded)",
            flood.len() / 1_000_000,
            secs,
            flood.len() as f64 / secs / 1e6
        );
        return;
    }
    println!("| recording | raw bytes | before (chars) | after (chars) | saved |");
    println!("|---|---:|---:|---:|---:|");
    for file in files {
        let bytes = std::fs::read(&file).unwrap_or_else(|e| panic!("{file}: {e}"));
        let text = String::from_utf8_lossy(&bytes);
        let body: String = text
            .split_inclusive('\n')
            .filter(|l| !l.starts_with("Script started on ") && !l.starts_with("Script done on "))
            .collect();
        let before = talaria::text::strip_ansi(&body).chars().count();
        let after = talaria::emulate::plain(&body).chars().count();
        let saved = 100.0 * (1.0 - after as f64 / before.max(1) as f64);
        let name =
            std::path::Path::new(&file).file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or(file.clone());
        println!("| {name} | {} | {before} | {after} | {saved:.0}% |", body.len());
    }
}
