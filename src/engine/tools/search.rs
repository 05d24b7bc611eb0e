//! `search_files` (DESIGN §4a): a regex search over a directory tree with ripgrep's own
//! crates — `ignore` walks it (honouring .gitignore, skipping hidden files) and `grep`
//! searches each file. The blocking search runs on tokio's blocking pool.

use std::path::Path;

use async_trait::async_trait;
use grep::regex::RegexMatcherBuilder;
use grep::searcher::sinks::Lossy;
use grep::searcher::{BinaryDetection, SearcherBuilder};
use ignore::overrides::OverrideBuilder;
use ignore::WalkBuilder;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use super::{arg_str, Concurrency, Tool, ToolCtx, ToolResult};

/// Matches returned at most; the result says when there were more.
pub const MAX_MATCHES: usize = 200;
/// A matching line longer than this is cut.
pub(crate) const MAX_MATCH_LINE_CHARS: usize = 300;
/// Files bigger than this are skipped (logs, data dumps).
const MAX_SEARCH_FILE_BYTES: u64 = 50 * 1024 * 1024;

/// Search `root` (a directory or one file) for `pattern`, optionally only in files matching
/// `glob`. Output lines are `path:line:text` with paths relative to `root`; the whole output
/// stays under `max_chars` characters.
pub fn search_at(
    root: &Path,
    pattern: &str,
    glob: Option<&str>,
    max_chars: usize,
    interrupt: &CancellationToken,
) -> ToolResult {
    if pattern.is_empty() {
        return ToolResult::error("pattern is empty; give a regular expression to search for");
    }
    let matcher = match RegexMatcherBuilder::new().line_terminator(Some(b'\n')).build(pattern) {
        Ok(m) => m,
        Err(e) => {
            return ToolResult::error(format!(
                "invalid regex {pattern:?}: {e}. Escape special characters such as ( [ {{ . * + ? with a backslash \
                 to match them literally"
            ))
        }
    };
    if !root.exists() {
        return ToolResult::error(format!(
            "{} does not exist; check the path (relative paths start from the session's working directory)",
            root.display()
        ));
    }
    let mut walk = WalkBuilder::new(root);
    // .gitignore counts even outside a git repository (a fresh project, a copied tree).
    walk.hidden(true).git_ignore(true).require_git(false).max_filesize(Some(MAX_SEARCH_FILE_BYTES));
    walk.sort_by_file_name(|a, b| a.cmp(b));
    if let Some(glob) = glob.filter(|g| !g.trim().is_empty()) {
        let mut overrides = OverrideBuilder::new(root);
        for part in glob.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            if let Err(e) = overrides.add(part) {
                return ToolResult::error(format!("invalid glob {part:?}: {e}"));
            }
        }
        match overrides.build() {
            Ok(o) => {
                walk.overrides(o);
            }
            Err(e) => return ToolResult::error(format!("invalid glob {glob:?}: {e}")),
        }
    }
    let mut searcher = SearcherBuilder::new().binary_detection(BinaryDetection::quit(0)).line_number(true).build();

    let mut out = String::new();
    let mut count = 0usize;
    let mut truncated = false;
    let mut unreadable = 0usize;
    for entry in walk.build() {
        if interrupt.is_cancelled() {
            return ToolResult::error("search interrupted").with_status(crate::protocol::ToolStatus::Interrupted);
        }
        let Ok(entry) = entry else {
            unreadable += 1;
            continue;
        };
        if !entry.file_type().is_some_and(|t| t.is_file()) {
            continue;
        }
        let path = entry.path();
        let shown = match path.strip_prefix(root) {
            Ok(rel) if !rel.as_os_str().is_empty() => rel.display().to_string(),
            _ => {
                path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| path.display().to_string())
            }
        };
        let result = searcher.search_path(
            &matcher,
            path,
            Lossy(|line_number, line| {
                if count >= MAX_MATCHES {
                    truncated = true;
                    return Ok(false);
                }
                let line = match_line(&shown, line_number, line);
                if out.len() + line.len() > max_chars {
                    truncated = true;
                    return Ok(false);
                }
                out.push_str(&line);
                count += 1;
                Ok(true)
            }),
        );
        if result.is_err() {
            unreadable += 1;
        }
        if truncated {
            break;
        }
    }
    if out.ends_with('\n') {
        out.pop();
    }
    let mut value = json!({ "matches": out, "count": count, "truncated": truncated });
    if truncated {
        value["note"] = json!(format!(
            "Only the first {count} matches are shown; narrow the pattern, the path or the glob to see the rest."
        ));
    } else if count == 0 {
        value["note"] = json!(format!("No matches for {pattern:?} in {}.", root.display()));
    }
    if unreadable > 0 {
        value["unreadable"] = json!(unreadable);
        if super::fs_helper::in_helper() {
            value["sandbox"] = json!(format!(
                "{unreadable} files or directories could not be read: the sandbox stopped it (credential stores, \
                 talaria's own files, sandbox.deny_read) or their permissions do; ways on: ask the user for what you \
                 need from them"
            ));
        }
    }
    ToolResult::ok(value)
}

/// `search_files` as the tool runs it: in the sandboxed helper, so what the sandbox hides
/// (credential stores, talaria's files, `sandbox.deny_read`) is never searched.
pub async fn search_sandboxed(
    root: &Path,
    pattern: &str,
    glob: Option<&str>,
    max_chars: usize,
    approvals: &crate::engine::approval::Approver,
    interrupt: &CancellationToken,
) -> ToolResult {
    let request = super::fs_helper::Request::Search {
        root: root.to_path_buf(),
        pattern: pattern.to_string(),
        glob: glob.map(str::to_string),
        max_chars,
    };
    super::fs_helper::call(&approvals.sandbox_policy(), request, interrupt).await
}

/// `path:line:text`, the text without its line end, cut when long.
fn match_line(path: &str, line_number: u64, line: &str) -> String {
    let text = line.trim_end_matches(['\n', '\r']);
    let count = text.chars().count();
    if count > MAX_MATCH_LINE_CHARS {
        let cut: String = text.chars().take(MAX_MATCH_LINE_CHARS).collect();
        format!("{path}:{line_number}:{cut}… [{count} chars]\n")
    } else {
        format!("{path}:{line_number}:{text}\n")
    }
}

pub(crate) struct SearchFiles;

/// Decode `search_files`'s arguments (for the fuzz target).
pub(crate) fn decode(args: &Value) -> Result<(), String> {
    crate::engine::args::parse::<SearchArgs>("search_files", args).map(drop)
}

/// `search_files`'s arguments (DESIGN §4a).
#[derive(Debug, serde::Deserialize)]
struct SearchArgs {
    pattern: String,
    #[serde(default)]
    path: Option<String>,
    #[serde(default)]
    glob: Option<String>,
}

#[async_trait]
impl Tool for SearchFiles {
    fn name(&self) -> &'static str {
        "search_files"
    }
    fn description(&self) -> &'static str {
        "Search file contents with a regular expression (Rust regex syntax, like ripgrep). Returns matching lines \
         as `path:line:text`, paths relative to the searched directory, at most 200 matches. Honours .gitignore and \
         skips hidden and binary files. Narrow it with `path` (a directory or file) and `glob` (e.g. \"*.rs\" or \
         \"src/**/*.ts\"; several separated by commas; \"!*.min.js\" excludes)."
    }
    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "pattern": { "type": "string", "description": "Regular expression to search for; (?i) makes it case-insensitive" },
                "path": { "type": "string", "description": "Directory or file to search (default: the working directory)" },
                "glob": { "type": "string", "description": "Only search files whose paths match this glob" }
            },
            "required": ["pattern"],
            "additionalProperties": false
        })
    }
    fn concurrency(&self) -> Concurrency {
        Concurrency::Parallel
    }
    fn summary(&self, args: &Value) -> String {
        let pattern = arg_str(args, "pattern").unwrap_or("?");
        let mut s = format!("/{pattern}/");
        if let Some(path) = arg_str(args, "path") {
            s.push_str(&format!(" in {path}"));
        }
        if let Some(glob) = arg_str(args, "glob") {
            s.push_str(&format!(" ({glob})"));
        }
        s
    }
    async fn call(&self, args: Value, ctx: ToolCtx) -> ToolResult {
        let args: SearchArgs = match crate::engine::args::parse("search_files", &args) {
            Ok(a) => a,
            Err(e) => return ToolResult::error(format!("{e} (`pattern` is a regular expression)")),
        };
        let pattern = args.pattern;
        let backend = ctx.jobs.backends().current();
        if backend.is_remote() {
            return super::remote_files::search_files(
                &ctx,
                &backend,
                &pattern,
                args.path.as_deref(),
                args.glob.as_deref(),
            )
            .await;
        }
        let root = match args.path.as_deref().filter(|p| !p.trim().is_empty()) {
            Some(p) => ctx.resolve(p),
            None => ctx.cwd(),
        };
        let max_chars = ctx.config.tool_output.max_chars.max(1_000);
        search_sandboxed(&root, &pattern, args.glob.as_deref(), max_chars, &ctx.approvals, &ctx.signals.interrupt).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn long_lines_are_cut() {
        let long = "x".repeat(400);
        let line = match_line("a.txt", 3, &format!("{long}\r\n"));
        assert_eq!(line, format!("a.txt:3:{}… [400 chars]\n", "x".repeat(300)));
        assert_eq!(match_line("a.txt", 1, "short\n"), "a.txt:1:short\n");
    }

    #[test]
    fn summary_names_pattern_path_and_glob() {
        let args = json!({"pattern": "fn main", "path": "src", "glob": "*.rs"});
        assert_eq!(SearchFiles.summary(&args), "/fn main/ in src (*.rs)");
    }
}
